//! The shared receive queue (SRQ): the host side of an mlx5 SRQ's ring,
//! and the slot table its completions go through.
//!
//! **The ring** (`struct mlx5_wqe_srq_next_seg`, rdma-core
//! `providers/mlx5/srq.c`, PRM "SRQ"): WQE `i` is `stride` bytes at
//! `i * stride` (a power of two, at least 32). Bytes 0..16 are the *next*
//! segment (bytes 2..4: `next_wqe_index`, big-endian u16; the rest
//! reserved), then `stride / 16 - 1` data segments (byte count, lkey,
//! address; big-endian), the unused ones ended by one with lkey
//! `MLX5_INVALID_LKEY` (0x100). The free WQEs form a list through
//! `next_wqe_index`: software posts at `head` and moves `head` to that
//! WQE's next; `tail` is the last free WQE and is never posted, so the SRQ
//! is full when `head == tail` and holds one less than its WQE count. The
//! device consumes posted WQEs in list order. The doorbell record is a
//! 32-bit big-endian store of a 16-bit count of every WQE ever posted,
//! after a to-device barrier.
//!
//! **Completions** name the WQE by its index (the CQE's `wqe_counter`),
//! and may come in any order, on any QP's CQ: [`SrqSlots`] is shared by the
//! poster ([`SharedReceiveQueue`]) and every poller, lock-free. A
//! completed WQE is the host's again at once: the poll marks it and queues
//! its index, and the next post relinks it at the tail before it takes a
//! WQE (so no WQE the device may still own is ever handed out again).
//!
//! **ODP page faults** (rdma-core `providers/mlx5/srq.c`
//! `mlx5_complete_odp_fault`, `cq.c`): when a receive into an SRQ WQE
//! takes a page fault on an ODP MR, ConnectX consumes the WQE with an error
//! CQE (RESP_ERR, syndrome 0x22, vendor syndrome 0x93:
//! [`crate::cqe::Cqe::is_odp_fault`]), nothing written to its buffer, and
//! the message arrives again later into another WQE. That CQE is not a
//! completion: a poller that reported it, or completed the WQE, would lose
//! the buffer (the application never reposts what it never saw). libmlx5
//! reports nothing and, under the SRQ's lock, moves the WQE to a wait
//! queue (a cool-down: the device may still be resolving the fault) and
//! posts its SGEs in the head WQE with the same wr_id, ringing the
//! doorbell. Here the SRQ has one poster (`&mut SharedReceiveQueue`) and
//! lock-free pollers, so a poller cannot post. **Our policy**: the poller
//! calls [`SrqSlots::fault`] instead of [`SrqSlots::complete`], which marks
//! the WQE faulted and queues it on the same lock-free return queue; the
//! owner's next relink ([`SharedReceiveQueue::post`], `check`, `free`,
//! `refill`, or [`SharedReceiveQueue::repost_faulted`] now) relinks it as
//! any returned WQE and then reposts it first: its data segments copied
//! into the head WQE, with its wr_id and lkeys, as `srq_repost` does, each
//! repost counted in the doorbell record, and the doorbell rung. The
//! cool-down libmlx5's wait queue gives comes from the owner's next call;
//! the faulted WQE's own slot goes to the free list's tail, reused last.
//! [`SharedReceiveQueue::post_one_seg`] (the fast path) does not relink,
//! so reposts wait for its next refill; the post and poll fast paths test
//! nothing more (a fault CQE is an error CQE, which leaves them already).

use super::DescError;
use crate::mmio;
use crate::ring::RingBuf;
use crate::wqe::{decode_srq_next_seg, DataSeg, WqeError, SRQ_NEXT_SEG, SRQ_NEXT_WQE_INDEX};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// The description of an SRQ's ring: `struct mlx5dv_srq`'s fields this
/// driver uses (`mlx5dv_init_obj(MLX5DV_OBJ_SRQ)`, or the sim's).
#[derive(Clone, Copy, Debug)]
pub struct SrqDesc {
    /// The ring's first WQE.
    pub buf: *mut u8,
    /// The SRQ's doorbell record (one big-endian u32).
    pub dbrec: *mut u32,
    /// Bytes per WQE (a power of two, at least 32).
    pub stride: u32,
    /// The first free WQE (its index).
    pub head: u32,
    /// The last free WQE (the list's tail, never posted).
    pub tail: u32,
}

/// Per WQE of an SRQ: its wr_id, whether the device owns it (posted, not
/// yet completed), and the lkeys it names; and the queue of completed WQE
/// indices the poster relinks. Shared (`Arc`) by the poster and every QP
/// that polls the SRQ's completions: atomics only, no lock.
///
/// Each WQE's slot is 16 bytes: its wr_id, and one state word
/// (`HELD | sges << 32 | first lkey`; `HELD` clear when the host holds
/// the WQE, and every reader tests it first), so that a post of one SGE
/// is two stores and a completion one atomic bit test and reset. The
/// lkeys of SGEs after the first are kept apart (`max_sge - 1` a WQE).
/// A WQE given back by an ODP page fault ([`Self::fault`]) has `FAULTED`
/// (bit 61) set in place of `HELD` until the poster reposts it.
///
/// The return queue is a bounded multi-producer ring with one consumer
/// (the poster): a poll takes a position with one `fetch_add` and stores
/// the WQE's word there with release order: `READY`, the byte offset of
/// its `next_wqe_index` in the ring (`index << log2(stride) | 2`) at bit
/// 16, and the index big-endian in bits 0..16, so that the poster's relink
/// writes the word's low half where the word says, with no arithmetic. The
/// poster takes a word once it is `READY` and clears it. It cannot
/// overflow: a WQE is queued at most once (completed or faulted) between
/// two posts of it (a repost is a post, of another WQE), and at
/// most `count - 1` are posted, so position `p + len` is taken only by the
/// completion of a WQE posted after the poster cleared position `p` (its
/// doorbell, the device, the CQE, and the `fetch_add`'s release sequence
/// order the clear before that word's store).
#[derive(Debug)]
pub struct SrqSlots {
    slots: Box<[Slot]>,
    /// The lkeys of SGEs 1.. of each WQE (`max_sge - 1` a WQE).
    more_lkeys: Box<[AtomicU32]>,
    max_sge: usize,
    returned: Box<[AtomicU64]>,
    /// `returned.len() - 1` (a power of two's).
    returned_mask: u64,
    returned_at: AtomicU64,
    /// WQEs given back as faulted ([`Self::fault`]).
    faults: AtomicU64,
    count: u32,
    /// The ring's address and stride, for copying scatter-to-CQE data out
    /// (`scatter.rs`); 0 when there is none (the verbs backend's slots).
    pub(super) ring: usize,
    pub(super) stride: u32,
    /// `stride << 16`: a WQE's offset in the ring, shifted to its place in
    /// the return queue's word, is one multiply by it.
    pub(super) stride_at16: u64,
    /// `READY` and the offset of `next_wqe_index` in a WQE, at their
    /// places in the word: a constant, kept here so that the poll ors it
    /// from memory (a 64-bit constant takes a register on x86_64).
    word_bits: u64,
}

/// One WQE's slot: its wr_id, and its state word ([`SrqSlots`]).
#[derive(Debug, Default)]
#[repr(C, align(16))]
struct Slot {
    wr_id: AtomicU64,
    state: AtomicU64,
}

/// `x`, computed where this is called: an empty asm (with side effects,
/// so not moved past the atomics that follow it) takes it in a register,
/// so that the compiler neither puts its computation off (keeping its
/// inputs live) nor takes it apart.
#[inline(always)]
fn settled(x: u64) -> u64 {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        let mut x = x;
        // SAFETY: an empty instruction sequence (a comment): no memory,
        // stack or flags touched; `x` comes out as it went in.
        unsafe {
            core::arch::asm!("/* {0} */", inout(reg) x, options(nomem, nostack, preserves_flags))
        };
        x
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    x
}

/// [`settled`] for a slot's address (a raw pointer: the caller borrows
/// it again).
#[inline(always)]
// (`nomem` is right: the asm passes the pointer's value along and reads
// nothing through it.)
#[allow(clippy::pointers_in_nomem_asm_block)]
fn settled_ptr(p: *const Slot) -> *const Slot {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        let mut p = p;
        // SAFETY: as in `settled`.
        unsafe {
            core::arch::asm!("/* {0} */", inout(reg) p, options(nomem, nostack, preserves_flags))
        };
        p
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    p
}

/// A state word's bit: the device holds the WQE. (Not bit 63: the
/// completion's `fetch_and` of one bit, tested, is one `lock btr` on
/// x86_64 only for a bit whose test is not a sign test.)
const HELD: u64 = 1 << 62;

/// A state word's bit: the device gave the WQE back with an ODP page
/// fault ([`SrqSlots::fault`]); the poster reposts it and clears the bit.
const FAULTED: u64 = 1 << 61;

/// A return queue word's bit: a WQE's index is queued there.
const READY: u64 = 1 << 63;

impl SrqSlots {
    /// Slots for `count` WQEs of at most `max_sge` SGEs each.
    pub fn new(count: u32, max_sge: u32) -> Self {
        let ring = (count.max(1) as usize).next_power_of_two();
        let max_sge = max_sge.max(1) as usize;
        SrqSlots {
            slots: (0..count).map(|_| Slot::default()).collect(),
            more_lkeys: (0..count as usize * (max_sge - 1))
                .map(|_| AtomicU32::new(0))
                .collect(),
            max_sge,
            returned: (0..ring).map(|_| AtomicU64::new(0)).collect(),
            returned_mask: ring as u64 - 1,
            returned_at: AtomicU64::new(0),
            faults: AtomicU64::new(0),
            count,
            ring: 0,
            stride: 0,
            stride_at16: 0,
            word_bits: READY | (SRQ_NEXT_WQE_INDEX as u64) << 16,
        }
    }

    /// WQEs (slots).
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The poster hands slot `idx` to the device, for `wr_id`, its SGEs
    /// naming `lkeys` (past `max_sge` ignored). Before its doorbell.
    #[inline]
    pub fn give(&self, idx: u32, wr_id: u64, lkeys: impl Iterator<Item = u32>) {
        let i = idx as usize;
        let slot = &self.slots[i];
        slot.wr_id.store(wr_id, Ordering::Relaxed);
        let more = &self.more_lkeys[i * (self.max_sge - 1)..(i + 1) * (self.max_sge - 1)];
        let mut first = 0;
        let mut n = 0u64;
        for k in lkeys.take(self.max_sge) {
            match n {
                0 => first = k,
                _ => more[n as usize - 1].store(k, Ordering::Relaxed),
            }
            n += 1;
        }
        // Release: a poller that sees the slot as the device's (after the
        // CQE) sees its wr_id.
        slot.state
            .store(HELD | n << 32 | first as u64, Ordering::Release);
    }

    /// Whether the device holds WQE `i` (posted, not yet completed);
    /// acquire: after the poster's writes of it.
    #[inline]
    pub(super) fn is_held(&self, i: usize) -> bool {
        self.slots
            .get(i)
            .is_some_and(|s| s.state.load(Ordering::Acquire) & HELD != 0)
    }

    /// A completion names WQE `idx`: returns its wr_id and queues the WQE
    /// for relinking, or `None` for an index that names no WQE the device
    /// holds (out of range, never posted, or completed already).
    #[inline(always)]
    pub fn complete(&self, idx: u16) -> Option<u64> {
        let mut got = None;
        self.complete_with(idx, |wr_id| got = Some(wr_id));
        got
    }

    /// [`Self::complete`], handing the wr_id to `f` between taking the
    /// slot and queuing the WQE for relinking (so that a poll writes its
    /// completion with the return queue's values not yet live); `false`,
    /// without calling `f`, where `complete` returns `None`.
    #[inline(always)]
    pub fn complete_with(&self, idx: u16, f: impl FnOnce(u64)) -> bool {
        let Some(slot) = self.slots.get(idx as usize) else {
            return false;
        };
        // The return queue's word, made first, and the slot's address in
        // one register (`settled`): only they are live while `f` runs.
        // (A multiply, not a shift by log2(stride): x86 shifts by `cl` only.)
        let word = settled((idx as u64 * self.stride_at16) | self.word_bits | idx.to_be() as u64);
        // SAFETY: `settled` hands back the address it was given, that of
        // a slot of `self.slots`, borrowed as long as `self` is.
        let slot: &Slot = unsafe { &*settled_ptr(slot) };
        // AcqRel: after the device's writes (ordered before by the CQE's
        // acquire) and before whoever next reads the slot as free.
        // (Only HELD is cleared: every reader of the word tests it first.)
        if slot.state.fetch_and(!HELD, Ordering::AcqRel) & HELD == 0 {
            return false;
        }
        f(slot.wr_id.load(Ordering::Relaxed));
        // AcqRel: the release sequence that orders the poster's clearing of
        // a position before the next lap's store there (see the type's doc).
        let at = self.returned_at.fetch_add(1, Ordering::AcqRel);
        // SAFETY: `returned_mask` is `returned.len() - 1`, a power of
        // two's (`new`), so the index is in bounds.
        let w = unsafe {
            self.returned
                .get_unchecked((at & self.returned_mask) as usize)
        };
        w.store(word, Ordering::Release);
        true
    }

    /// WQEs completed so far (each [`Self::complete`] that returned a
    /// wr_id, and each [`Self::fault`] that returned `true`: the device
    /// gave the WQE back either way), modulo 2^32.
    #[inline(always)]
    pub fn completed(&self) -> u32 {
        self.returned_at.load(Ordering::Relaxed) as u32
    }

    /// The poster's next relinkable WQE index, at its position `*at` in
    /// the return queue (advanced past it), if queued yet. One consumer:
    /// the poster, with its own `at` (starting at 0). (The direct path's
    /// poster reads the queue in its own loop: `SharedReceiveQueue::relink`.)
    #[inline]
    pub fn take_returned(&self, at: &mut u64) -> Option<u32> {
        let slot = self.returned.get((*at & self.returned_mask) as usize)?;
        let w = slot.load(Ordering::Acquire);
        if w & READY == 0 {
            return None;
        }
        slot.store(0, Ordering::Relaxed);
        *at += 1;
        Some(u16::from_be(w as u16) as u32)
    }

    /// The poster takes slot `idx` back before the device saw it (a post
    /// the device refused): not queued for relinking.
    pub fn take_back(&self, idx: u32) {
        self.slots[idx as usize].state.store(0, Ordering::Release);
    }

    /// Whether a WQE the device holds, or a faulted one to be reposted,
    /// names `lkey` (for deregistration: a dropped MR waits for it).
    pub fn names(&self, lkey: u32) -> bool {
        let more = self.max_sge - 1;
        self.slots.iter().enumerate().any(|(i, s)| {
            let st = s.state.load(Ordering::Acquire);
            let n = (st >> 32 & 0xffff) as usize;
            st & (HELD | FAULTED) != 0
                && (st as u32 == lkey
                    || self.more_lkeys[i * more..i * more + n.saturating_sub(1).min(more)]
                        .iter()
                        .any(|k| k.load(Ordering::Relaxed) == lkey))
        })
    }

    /// WQEs the device holds now (a count for tests and for RESET checks;
    /// walks every slot).
    pub fn held(&self) -> u32 {
        self.slots
            .iter()
            .filter(|s| s.state.load(Ordering::Acquire) & HELD != 0)
            .count() as u32
    }
}

/// The poster's side of an SRQ: its ring, doorbell record and free list.
/// One owner posts (`&mut self`); completions come through the shared
/// [`SrqSlots`] ([`Self::slots`]) from any thread.
pub struct SharedReceiveQueue {
    buf: RingBuf<'static>,
    count: u32,
    stride: u32,
    dbrec: *mut u32,
    head: u32,
    tail: u32,
    /// WQEs that may be posted now (the list from `head` to `tail`,
    /// without `tail`).
    free: u32,
    /// Every WQE ever posted, modulo 2^32 (the doorbell record's value is
    /// its low 16 bits).
    counter: u32,
    pending: bool,
    /// The poster's position in the slots' return queue.
    returned_at: u64,
    /// Faulted WQEs reposted ([`SrqSlots::fault`]), modulo 2^64: behind
    /// the slots' count while some wait for a relink.
    reposted: u64,
    /// `slots`' slot 0, and `count - 1`: where the in-place post finds a
    /// WQE's slot without following the `Arc` or a bounds test.
    slot0: NonNull<Slot>,
    wqe_mask: u32,
    /// Posts [`Self::post_one_seg`] may make before it declines (then
    /// [`Self::refill`]): at most `free`, and at most the outstanding
    /// receives' room at the last refill (completions since only add room).
    room: u32,
    /// `room` when `free` was last brought up to date: `free` does not
    /// count the in-place posts since, `room_then - room` ([`Self::settle`]).
    room_then: u32,
    slots: Arc<SrqSlots>,
}

// SAFETY: as for SendQueue: the ring and doorbell record are this
// struct's alone on the host; moving it between threads is sound. (`slot0`
// points into `slots`, which is `Sync`.)
unsafe impl Send for SharedReceiveQueue {}

impl SharedReceiveQueue {
    /// The host side of the SRQ `d` describes: walks the free list from
    /// `head` to `tail` (as libmlx5 or the sim linked it) to find the WQE
    /// count, which `mlx5dv_srq` does not give (libmlx5 may allocate more,
    /// as a wait queue outside the list: those are never touched).
    ///
    /// Errors: a null pointer, a stride that is not a power of two of at
    /// least 32, a list that does not cover exactly WQEs `0..n` for a
    /// power-of-two `n` with `n * stride` at least 64 ([`DescError`]).
    ///
    /// # Safety
    /// `d.buf` holds at least `(tail + 1) * stride` bytes, and `d.dbrec`
    /// one u32, valid for the device and this queue for its lifetime;
    /// nothing else on the host touches them meanwhile; the list is
    /// initialized (every WQE's next segment) as the description says.
    pub unsafe fn new(d: &SrqDesc, max_sge: u32) -> Result<Self, DescError> {
        let buf = NonNull::new(d.buf).ok_or(DescError::Null { what: "srq.buf" })?;
        if d.dbrec.is_null() {
            return Err(DescError::Null { what: "srq.dbrec" });
        }
        if !d.stride.is_power_of_two() || d.stride < 32 {
            return Err(DescError::NotPow2 {
                what: "srq.stride (at least 32)",
                value: d.stride,
            });
        }
        let count = d.tail.wrapping_add(1);
        let bad = DescError::NotPow2 {
            what: "srq WQEs linked from head to tail",
            value: count,
        };
        if !count.is_power_of_two() || count > 1 << 16 || (count as usize * d.stride as usize) < 64
        {
            return Err(bad);
        }
        // Walk the list: it must visit every WQE 0..count once, ending at tail.
        let mut seen = vec![false; count as usize];
        let mut at = d.head;
        let mut free = 0;
        loop {
            if at >= count || seen[at as usize] {
                return Err(bad);
            }
            seen[at as usize] = true;
            if at == d.tail {
                break;
            }
            free += 1;
            // SAFETY: `at < count`, inside the `(tail + 1) * stride` bytes
            // the caller vouches for; a read of the 16-byte next segment
            // (stride at least 32), byte-aligned.
            let next = unsafe {
                core::ptr::read_volatile(
                    d.buf
                        .add(at as usize * d.stride as usize)
                        .cast::<[u8; SRQ_NEXT_SEG]>(),
                )
            };
            at = decode_srq_next_seg(&next) as u32;
        }
        if free + 1 != count {
            return Err(bad);
        }
        let slots =
            Arc::new(SrqSlots::new(count, max_sge.min(d.stride / 16 - 1)).with_ring(buf, d.stride));
        Ok(SharedReceiveQueue {
            // SAFETY: the caller's contract: `count * stride` bytes, ours.
            buf: unsafe { RingBuf::from_raw(buf, count as usize * d.stride as usize) },
            count,
            stride: d.stride,
            dbrec: d.dbrec,
            head: d.head,
            tail: d.tail,
            free,
            counter: 0,
            pending: false,
            returned_at: 0,
            reposted: 0,
            room: 0,
            room_then: 0,
            // (From the whole slice: the pointer may reach every slot.)
            slot0: NonNull::from(&slots.slots[..]).cast(),
            wqe_mask: count - 1,
            slots,
        })
    }

    /// The slot table the SRQ's pollers complete WQEs through.
    pub fn slots(&self) -> &Arc<SrqSlots> {
        &self.slots
    }

    /// WQEs in the ring (the list's length, its tail included).
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Most data segments per WQE (`stride / 16 - 1`).
    pub fn max_sge(&self) -> u32 {
        self.stride / 16 - 1
    }

    /// WQEs that may be posted now, once completed ones are relinked.
    pub fn free(&mut self) -> u32 {
        self.relink();
        self.free
    }

    /// WQEs posted and not yet completed (polled back, on any CQ): every
    /// post counted less [`SrqSlots::completed`]. Completed WQEs not yet
    /// relinked do not count.
    #[inline(always)]
    pub fn outstanding(&self) -> u32 {
        self.counter.wrapping_sub(self.slots.completed())
    }

    /// Relinks every WQE completed since the last relink at the tail: its
    /// index into the tail's `next_wqe_index` (the rest of that next
    /// segment stays as it was made), as rdma-core's `mlx5_free_srq_wqe`
    /// does.
    #[inline]
    fn relink(&mut self) {
        self.settle();
        // Everything the loop reads, in locals: its stores are to the ring.
        let slots: &SrqSlots = &self.slots;
        let (returned, mask) = (&slots.returned[..], slots.returned_mask);
        let shift = self.stride.trailing_zeros();
        let mut buf = self.buf.reborrow();
        let from = self.returned_at;
        let mut at = from;
        // Where the tail's `next_wqe_index` is.
        let mut tail_at = (self.tail as usize) << shift | SRQ_NEXT_WQE_INDEX;
        loop {
            // SAFETY: `mask` is `returned.len() - 1`, a power of two's
            // (`SrqSlots::new`), so the index is in bounds.
            let slot = unsafe { returned.get_unchecked((at & mask) as usize) };
            let w = slot.load(Ordering::Acquire);
            if w & READY == 0 {
                break;
            }
            slot.store(0, Ordering::Relaxed);
            at += 1;
            // The tail WQE is never posted: the device does not read it.
            // (The word's low half is the index, big-endian already.)
            buf.write_u16_bytes(tail_at, (w as u16).to_ne_bytes());
            tail_at = (w >> 16) as u32 as usize;
        }
        self.returned_at = at;
        let old_tail = self.tail;
        self.tail = (tail_at >> shift) as u32;
        self.free += (at - from) as u32;
        // (Relaxed: a word taken above was stored after its fault's count.)
        if self.slots.faults.load(Ordering::Relaxed) != self.reposted {
            self.repost_from(old_tail);
        }
    }

    /// Counts the in-place posts since `free` was last up to date.
    #[inline]
    fn settle(&mut self) {
        self.free -= self.room_then - self.room;
        self.room_then = self.room;
    }

    /// Relinks what completed and sets how many posts
    /// [`Self::post_one_seg`] may make before it asks again: as many as the
    /// free list holds, and as keep at most `max_outstanding` WQEs the
    /// device's ([`Self::outstanding`], and the faulted ones waiting for
    /// their repost, [`Self::faulted`]). 0 turns the in-place post off.
    pub fn refill(&mut self, max_outstanding: u32) {
        self.relink();
        // Faulted WQEs not reposted yet count as the device's: the next
        // relink reposts them. Completions read first (acquire), then
        // faults (a fault counts its fault before its completion): a fault
        // landing between the two reads is counted twice, never missed, so
        // the room never lets the device hold more than `max_outstanding`.
        let completed = self.slots.returned_at.load(Ordering::Acquire) as u32;
        let faulted =
            (self.slots.faults.load(Ordering::Relaxed) as u32).wrapping_sub(self.reposted as u32);
        let held = self.counter.wrapping_sub(completed).wrapping_add(faulted);
        self.room = self.free.min(max_outstanding.saturating_sub(held));
        self.room_then = self.room;
    }

    /// Checks that `n` WQEs of these SGEs may be posted now: the free list
    /// holds `n` (after relinking), each fits. Nothing is written.
    pub fn check(&mut self, n: usize) -> Result<(), WqeError> {
        self.relink();
        if n as u64 > self.free as u64 {
            return Err(WqeError::QueueFull {
                need: n as u32,
                free: self.free,
            });
        }
        Ok(())
    }

    /// Writes one WQE at the head without ringing the doorbell; returns
    /// its index. On error nothing is written. Before it, WQEs completed
    /// are relinked and faulted ones reposted (module docs), with their
    /// own doorbell.
    ///
    /// Errors: [`WqeError::QueueFull`] (the free list is empty: poll);
    /// [`WqeError::RecvTooManySges`] (more non-empty SGEs than
    /// [`Self::max_sge`]); [`WqeError::LengthOverflow`] over 2^31 bytes.
    pub fn post(&mut self, sges: &[DataSeg], wr_id: u64) -> Result<u32, WqeError> {
        let slots = self.max_sge() as usize;
        let need = sges.iter().filter(|s| s.len != 0).count();
        if need > slots {
            return Err(WqeError::RecvTooManySges {
                need,
                stride: self.stride,
            });
        }
        let total: u64 = sges.iter().map(|s| s.len as u64).sum();
        if total > 1 << 31 {
            return Err(WqeError::LengthOverflow { total });
        }
        // (After the checks of the SGEs: a refused post relinks nothing,
        // so reposts no faulted WQE and rings no doorbell.)
        self.check(1)?;
        let idx = self.head;
        let base = idx as usize * self.stride as usize;
        crate::wqe::write_recv_segs(&mut self.buf, base + SRQ_NEXT_SEG, sges, slots);
        let mut next = [0u8; SRQ_NEXT_SEG];
        self.buf.read_wrapping(base, &mut next);
        self.slots.give(
            idx,
            wr_id,
            sges.iter().filter(|s| s.len != 0).map(|s| s.lkey),
        );
        self.head = decode_srq_next_seg(&next) as u32;
        self.free -= 1;
        self.room = self.room.saturating_sub(1);
        self.room_then = self.room;
        self.counter = self.counter.wrapping_add(1);
        self.pending = true;
        Ok(idx)
    }

    /// Posts one receive of one data segment (`seg`, of `lkey`: 1 to
    /// 2^31 - 1 bytes, the caller's check) and rings the doorbell:
    /// [`Self::post`] and [`Self::ring_doorbell`] for the common receive,
    /// with nothing staged and one test of room: the posts the last
    /// [`Self::refill`] allowed (the free list, and the most outstanding it
    /// was given). The WQE at the head keeps its next segment; `seg` at
    /// byte 16, and when the stride holds more, the terminating segment
    /// (lkey `MLX5_INVALID_LKEY`) at byte 32, as rdma-core's
    /// `mlx5_post_srq_recv` writes them. Returns `false`, writing nothing,
    /// when that room is used up: the caller then posts through
    /// [`Self::post`], which relinks, and refills. So WQEs completed are
    /// relinked once every so many posts, all of them at once.
    #[inline(always)]
    pub fn post_one_seg(&mut self, seg: &crate::wqe::Seg, lkey: u32, wr_id: u64) -> bool {
        if self.room == 0 {
            return false;
        }
        self.room -= 1;
        let idx = self.head;
        let base = idx as usize * self.stride as usize;
        self.buf.write_seg(base + SRQ_NEXT_SEG, &seg.to_bytes());
        if self.stride as usize > SRQ_NEXT_SEG + crate::prm::DS {
            self.buf.write_seg(
                base + SRQ_NEXT_SEG + crate::prm::DS,
                &crate::wqe::RECV_END.to_bytes(),
            );
        }
        let next = self.buf.read_seg(base);
        // SAFETY: `slot0` is slot 0 of `self.slots`' `count` slots (`new`),
        // alive while this queue keeps that `Arc`; the index is masked
        // below `count`. (`head` is below it: every WQE on the list is.)
        let slot = unsafe { self.slot0.add((idx & self.wqe_mask) as usize).as_ref() };
        slot.wr_id.store(wr_id, Ordering::Relaxed);
        // Release: as `SrqSlots::give`'s.
        slot.state
            .store(HELD | 1 << 32 | lkey as u64, Ordering::Release);
        self.head = decode_srq_next_seg(&next) as u32;
        // (`free` counts this post when next brought up to date: `settle`.)
        self.counter = self.counter.wrapping_add(1);
        // (Nothing is pending: `post` is always followed by its doorbell.)
        mmio::to_device_barrier();
        // SAFETY: `dbrec` is the SRQ's live doorbell record (`new`'s contract).
        unsafe { mmio::write_dbrec(self.dbrec, self.counter & 0xffff) };
        true
    }

    /// Publishes what was posted: barrier, then `dbrec = be32(counter)`.
    #[inline]
    pub fn ring_doorbell(&mut self) {
        if self.pending {
            self.write_dbrec();
        }
    }

    /// [`Self::ring_doorbell`]'s barrier and store.
    #[inline(always)]
    fn write_dbrec(&mut self) {
        mmio::to_device_barrier();
        // SAFETY: `dbrec` is the SRQ's live doorbell record (`new`'s contract).
        unsafe { mmio::write_dbrec(self.dbrec, self.counter & 0xffff) };
        self.pending = false;
    }
}

#[cfg(test)]
#[path = "srq_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "srq_odp_tests.rs"]
mod odp_tests;

// ODP page faults: `SrqSlots::fault` and the poster's reposts.
#[path = "srq_odp.rs"]
mod odp;
