//! The completion queue poller: the ownership check, one CQE at a time
//! with its barrier, compressed sessions expanded in place (out of line),
//! the consumer index (written lazily on a CQ that ignores overrun), arming.

use super::{pow2, DescError};
use crate::cqe::{sw_owned, Cqe, CqeRef};
use crate::doorbell::{cq_arm_uar, cq_arm_word, cq_ci, CQ_DBREC_ARM, CQ_DBREC_CI, CQ_UAR_DOORBELL};
use crate::dv::mlx5dv_cq;
use crate::mini_cqe::{self, CqSlots};
use crate::mmio;
use crate::prm::CQE64;

/// Completion queue poller.
pub struct CompletionQueue {
    /// Address of the `op_own` byte of slot 0 (byte 63 of the CQE proper,
    /// the last 64 bytes of the slot).
    op_own0: *const u8,
    /// `cqe_cnt - 1`.
    mask: u32,
    /// `cqe_cnt * slot size - 1`.
    ring_mask: usize,
    /// `ring_mask + 1`: the owner bit of `at` (kept, so that a test of the
    /// CQE at the consumer index tests it in memory, in one instruction).
    ring_size: usize,
    dbrec: *mut u32,
    /// The consumer index in bytes of ring: `ci * slot size`, wrapping (the
    /// consumer index is `at >> slot_log`; its low 24 bits, all the
    /// doorbell record carries, stay right however `usize` wraps): the
    /// slot's offset is `at & ring_mask` and its owner bit `at & (ring_mask
    /// + 1)`, so the poll needs no shift.
    at: usize,
    /// The CQ was created to ignore overrun: the device never reads the
    /// consumer-index record, so polls do not write it ([`Self::polled`]).
    lazy_ci: bool,
    /// What [`Self::polled`] has to do, decided once (a poll then tests one
    /// byte): [`AFTER_POLL_CI`], and [`AFTER_POLL_TRACE`] when tracing is on
    /// (read from the environment when the CQ is made).
    after_poll: u8,
    cqn: u32,
    /// The CQ's UAR page (`mlx5dv_cq.cq_uar`; null: arming unavailable), and
    /// the arm sequence number (2 bits used), advanced per completion event.
    uar: *mut u8,
    arm_sn: u32,
    /// `log2` of the slot size (6: 64 bytes, 7: 128).
    slot_log: SlotLog,
}

/// `log2` of a CQ's slot size: 6 (64-byte CQEs) or 7 (128-byte slots, the
/// CQE proper their second half). Two values of 16 bits: the most unused
/// values of any field a struct holding a `CompletionQueue` is likely to
/// have (a `bool` has 254), so that an `Option` of one takes them for
/// `None` (rustc puts an enum's tag in the largest such niche), and its
/// poll tells "a CQ, of 64-byte slots" in one compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
enum SlotLog {
    S64 = 6,
    S128 = 7,
}

/// [`CompletionQueue::polled`] writes the consumer-index record.
const AFTER_POLL_CI: u8 = 1;
/// [`CompletionQueue::polled`] prints the CQEs polled.
const AFTER_POLL_TRACE: u8 = 2;

fn after_poll_trace() -> u8 {
    if crate::trace::enabled() {
        AFTER_POLL_TRACE
    } else {
        0
    }
}

/// See [`CompletionQueue::cursor`].
/// `SLOT` is the CQ's slot size in bytes (64 or 128), a constant so that
/// the loop over the cursor spends no register on it.
pub struct CqCursor<'a, const SLOT: usize> {
    op_own0: *const u8,
    /// The consumer index in bytes of ring (`ci * SLOT`, wrapping): the
    /// slot's offset is `at & ring_mask`, its owner bit `at & (ring_mask +
    /// 1)`, and the next slot is `SLOT` further, so the loop needs no shift.
    at: usize,
    /// `cqe_cnt * SLOT - 1`.
    ring_mask: usize,
    cq: &'a mut CompletionQueue,
}

impl<const SLOT: usize> CqCursor<'_, SLOT> {
    /// The consumer index: the index of the CQE [`Self::next`] looks at.
    #[inline(always)]
    pub fn ci(&self) -> u32 {
        (self.at >> self.cq.slot_log as u32) as u32
    }

    /// Puts back the CQE the last [`Self::next`] took (call it only after
    /// one that returned a CQE): the consumer index goes back one slot, and
    /// the next `next` here or on a later cursor takes it again, its
    /// ownership tested again. For a loop that hands a CQE it does not
    /// handle to a poll of another kind without decoding it.
    #[inline(always)]
    pub fn put_back(&mut self) {
        self.at = self.at.wrapping_sub(SLOT);
    }

    /// Takes the CQE at the consumer index if it is software-owned, and
    /// advances the consumer index. Ordering as rdma-core's (`cq.c`
    /// `mlx5_get_next_cqe`, `udma_from_device_barrier`): `op_own` is read
    /// first and tested (one compare: `owned`), then the from-device
    /// barrier (`lfence` on x86_64), then the fields the caller reads
    /// through the [`CqeRef`], only those (the others are never loaded).
    ///
    /// On a CQ of 64-byte slots, a compressed session's title (format 3,
    /// [`crate::mini_cqe`]) is expanded in place first, out of line
    /// (`unzip`): its first completion, now in the title's slot, is handed
    /// out, the others following as ordinary CQEs. A
    /// title [`mini_cqe::expand_session`] refuses (a corrupt count or
    /// opcode) is not handed out: `None`, the consumer index left on it.
    /// The common path pays one bit test for this (`op_own` bit 3).
    #[inline(always)]
    #[allow(clippy::should_implement_trait)] // borrows from the cursor: no Iterator
    pub fn next(&mut self) -> Option<CqeRef<'_>> {
        let at = self.at;
        let p = self.op_own0.wrapping_add(at & self.ring_mask);
        // SAFETY: the op_own byte of a slot inside the CQ buffer (masked
        // offset of a whole slot; `CompletionQueue::new`'s contract).
        let op_own = unsafe { mmio::read_op_own(p) };
        let owner = (at & (self.ring_mask + 1) != 0) as u8;
        debug_assert_eq!(
            owned(op_own, owner),
            sw_owned(op_own, self.ci(), self.cq.cqe_cnt())
        );
        if !owned(op_own, owner) {
            return None;
        }
        mmio::from_device_barrier();
        let (at, p, op_own) = if SLOT == CQE64 && maybe_title(op_own) {
            let at = unzip(self.op_own0, at, self.ring_mask, op_own)?;
            let p = self.op_own0.wrapping_add(at & self.ring_mask);
            // SAFETY: the op_own byte of a slot inside the CQ buffer
            // (masked offset of a whole slot), software-owned: the CQE
            // tested (not a title), or a session's first completion, just
            // written by the expansion.
            (at, p, unsafe { mmio::read_op_own(p) })
        } else {
            (at, p, op_own)
        };
        self.at = at.wrapping_add(SLOT);
        // SAFETY: the 64-byte CQE proper ends at `p` (its byte 63), inside
        // the slot. The device wrote it before publishing its op_own, which
        // we loaded before the barrier; it writes the slot again only a
        // whole ring later, which the caller's CQ credits (or WR limits)
        // keep from happening while the CqeRef (borrowing this cursor)
        // lives. The slot is `SLOT` bytes (`cursor` asserts it), so with
        // 128 its first half precedes the CQE proper, likewise.
        Some(unsafe { CqeRef::in_slot(p.wrapping_sub(CQE64 - 1), op_own, SLOT) })
    }
}

impl<const SLOT: usize> CqCursor<'_, SLOT> {
    /// [`Self::next`] without the test for a compressed session's title: a
    /// title is handed out as it is (its `op_own` format bits 3:2 are 3:
    /// [`crate::mini_cqe::is_title`]), for a loop that tests `op_own`
    /// anyway and hands anything but its common CQE back
    /// ([`Self::put_back`]) to a poll that uses [`Self::next`]. The common
    /// path then pays nothing for compression.
    #[inline(always)]
    pub fn next_plain(&mut self) -> Option<CqeRef<'_>> {
        let at = self.at;
        let p = self.op_own0.wrapping_add(at & self.ring_mask);
        // SAFETY: as in `next`.
        let op_own = unsafe { mmio::read_op_own(p) };
        if !owned(op_own, (at & (self.ring_mask + 1) != 0) as u8) {
            return None;
        }
        mmio::from_device_barrier();
        self.at = at.wrapping_add(SLOT);
        // SAFETY: as in `next`: the CQE proper ends at `p`, inside the
        // slot, software-owned and not written again while the CqeRef
        // (borrowing this cursor) lives.
        Some(unsafe { CqeRef::in_slot(p.wrapping_sub(CQE64 - 1), op_own, SLOT) })
    }
}

impl<const SLOT: usize> Drop for CqCursor<'_, SLOT> {
    #[inline(always)]
    fn drop(&mut self) {
        self.cq.at = self.at;
    }
}

/// The CQE [`CompletionQueue::take`] took (the consumer index is past it):
/// read it ([`Self::cqe`]), or put it back ([`Self::put_back`]). It borrows
/// the CQ, so nothing polls it meanwhile.
pub struct Taken<'a, const SLOT: usize> {
    /// Byte 0 of the 64-byte CQE proper, and its `op_own` as tested.
    p: *const u8,
    op_own: u8,
    cq: &'a mut CompletionQueue,
}

impl<const SLOT: usize> Taken<'_, SLOT> {
    /// The CQE's fields, where it lies.
    #[inline(always)]
    pub fn cqe(&self) -> CqeRef<'_> {
        // SAFETY: as in `CqCursor::next`: the CQE proper starts at `p`,
        // inside the slot, and was software-owned before `take`'s barrier;
        // the device writes the slot again only a whole ring later, which
        // the caller's CQ credits (or WR limits) keep from happening while
        // the CqeRef (borrowing this, which borrows the CQ) lives. The slot
        // is `SLOT` bytes (`take` asserts it).
        unsafe { CqeRef::in_slot(self.p, self.op_own, SLOT) }
    }

    /// Whether the CQE after this one (at the consumer index) is
    /// software-owned: [`CompletionQueue::has_cqe`], for a poll that asks
    /// before it reads this one whether it takes more than one.
    #[inline(always)]
    pub fn next_owned(&self) -> bool {
        self.cq.has_cqe()
    }

    /// Puts the CQE back: the consumer index goes back to it, and the next
    /// poll takes it again, for a caller that hands it on to a poll of
    /// another kind: with its ownership tested again ([`CompletionQueue::take`]),
    /// or with the [`PutBack`] returned here
    /// ([`CompletionQueue::take_put_back`]), which skips the test and the
    /// barrier this take did.
    #[inline(always)]
    pub fn put_back(self) -> PutBack<SLOT> {
        let at = self.cq.at.wrapping_sub(SLOT);
        self.cq.at = at;
        PutBack {
            at,
            op_own: self.op_own,
        }
    }
}

/// A CQE [`Taken::put_back`] put back: its `op_own` as tested, and the
/// consumer index it is at. Plain data: [`CompletionQueue::take_put_back`]
/// refuses one whose consumer index is no longer the CQ's.
#[derive(Clone, Copy, Debug)]
pub struct PutBack<const SLOT: usize> {
    at: usize,
    op_own: u8,
}

impl<const SLOT: usize> PutBack<SLOT> {
    /// The CQE's `op_own` (byte 63): opcode in bits 7:4, format 3:2, se 1,
    /// owner 0.
    #[inline(always)]
    pub fn op_own(&self) -> u8 {
        self.op_own
    }
}

/// The CQ ring's 64-byte slots as [`mini_cqe::expand_in`] reads and
/// writes them: `base` is slot 0, `cnt` the slots.
struct RawSlots {
    base: *mut u8,
    cnt: u32,
}

impl CqSlots for RawSlots {
    fn cqe_cnt(&self) -> u32 {
        self.cnt
    }
    fn read(&self, i: u32) -> [u8; CQE64] {
        // SAFETY: slot `i < cnt` of the ring (`unzip`'s contract): 64
        // readable bytes, which the device does not write meanwhile.
        unsafe { (self.base.add(i as usize * CQE64) as *const [u8; CQE64]).read_unaligned() }
    }
    fn write(&mut self, i: u32, b: &[u8; CQE64]) {
        let p = self.base.wrapping_add(i as usize * CQE64);
        // SAFETY: as in `read`: a slot of the session being expanded,
        // software-owned, which the device writes again only after the
        // consumer index has passed it. `op_own` goes last, as an atomic
        // store as the device's (the next poll reads it as one).
        unsafe {
            core::ptr::copy_nonoverlapping(b.as_ptr(), p, CQE64 - 1);
            mmio::publish_op_own(p.add(CQE64 - 1), b[CQE64 - 1]);
        }
    }
}

/// The test on the common path, one bit (`test` and a branch): whether a
/// software-owned CQE of a 64-byte slot may be a compressed session's
/// title. Bit 3 of `op_own` is set in format 3 (a title) and in format 2
/// (`MLX5_INLINE_SCATTER_64`, which needs 128-byte CQEs: never in a 64-byte
/// slot), so the exact test ([`mini_cqe::is_title`]) is left to [`unzip`].
#[inline(always)]
fn maybe_title(op_own: u8) -> bool {
    op_own & 0x08 != 0
}

/// [`unzip`] at `cq`'s consumer index, which it leaves on the CQE to take;
/// false when the expansion refused the title. Out of line, through the
/// `CompletionQueue` (in memory already): its inlined caller keeps nothing
/// live across the call.
#[cold]
#[inline(never)]
fn unzip_cq(cq: &mut CompletionQueue, op_own: u8) -> bool {
    match unzip(cq.op_own0, cq.at, cq.ring_mask, op_own) {
        Some(at) => {
            cq.at = at;
            true
        }
        None => false,
    }
}

/// A software-owned CQE whose `op_own` has bit 3 set ([`maybe_title`]) is
/// at ring byte offset `at` (a consumer index in bytes, 64-byte slots) of
/// the ring whose slot 0's `op_own` is at `op_own0` and whose `cqe_cnt *
/// 64 - 1` is `ring_mask`. If it is a compressed session's title
/// ([`mini_cqe::is_title`]), expands the session in place
/// ([`mini_cqe::expand_in`]): its first completion is then an ordinary
/// CQE in the title's slot. Returns `at` (the CQE to take, whatever its
/// format: format 2 is taken as it is); `None` when the expansion refuses
/// the title (nothing written). Out of line, taking and returning values
/// in registers: the common poll never comes here.
#[cold]
#[inline(never)]
fn unzip(op_own0: *const u8, at: usize, ring_mask: usize, op_own: u8) -> Option<usize> {
    if !mini_cqe::is_title(op_own) {
        return Some(at);
    }
    let mut slots = RawSlots {
        base: op_own0.wrapping_sub(CQE64 - 1) as *mut u8,
        cnt: ((ring_mask + 1) / CQE64) as u32,
    };
    // The title and the N slots after it are software-owned: the device
    // wrote the arrays before publishing the title's op_own, which the
    // caller loaded before its barrier.
    mini_cqe::expand_in(&mut slots, ((at & ring_mask) / CQE64) as u32).ok()?;
    // The title's slot now holds the session's first completion.
    Some(at)
}

/// [`sw_owned`] for a CQE whose software-owned owner bit is `owner`: its
/// opcode (bits 7:4) is not INVALID (0xF) and bit 0 equals `owner`. In one
/// compare: with bit 0 rotated to bit 7 and bits 2:1 dropped, the byte is
/// below 0x78 exactly when bit 7 is clear and bits 6:3 are not all set.
#[inline(always)]
pub(super) fn owned(op_own: u8, owner: u8) -> bool {
    ((op_own ^ owner).rotate_right(1) & 0xf8) < 0x78
}

/// `p`, as a value the compiler cannot take apart: a CQE's fields are
/// then read at offsets from one register, rather than from the ring's
/// base and the slot's offset kept in two (a register fewer for the
/// straight-line poll around them).
#[inline(always)]
// (`nomem` is right: the asm passes the pointer's value along and reads
// nothing through it.)
#[allow(clippy::pointers_in_nomem_asm_block)]
fn one_register(p: *const u8) -> *const u8 {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        let mut p = p;
        // SAFETY: an empty instruction sequence (a comment): no memory,
        // stack or flags touched; `p` comes out as it went in.
        unsafe {
            core::arch::asm!("/* {0} */", inout(reg) p, options(pure, nomem, nostack, preserves_flags))
        };
        p
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    p
}

// SAFETY: as for SendQueue.
unsafe impl Send for CompletionQueue {}

impl CompletionQueue {
    /// A poller over `cq`, which writes the consumer-index record after
    /// every poll that consumed CQEs ([`Self::set_overrun_ignored`] for a
    /// CQ that ignores overrun).
    ///
    /// # Safety
    /// `cq` must describe a live CQ that stays valid, and is polled by no one
    /// else, until this `CompletionQueue` is dropped.
    pub unsafe fn new(cq: &mlx5dv_cq) -> Result<Self, DescError> {
        let cqe_cnt = pow2("cqe_cnt", cq.cqe_cnt)?;
        if cq.cqe_size != 64 && cq.cqe_size != 128 {
            return Err(DescError::CqeSize(cq.cqe_size));
        }
        if cq.buf.is_null() {
            return Err(DescError::Null { what: "cq.buf" });
        }
        if cq.dbrec.is_null() {
            return Err(DescError::Null { what: "cq.dbrec" });
        }
        Ok(Self {
            // SAFETY: `cqe_size - 1` (63 or 127), the op_own byte of the CQE
            // proper, is inside slot 0 of the CQ buffer.
            op_own0: unsafe { (cq.buf as *const u8).add(cq.cqe_size as usize - 1) },
            mask: cqe_cnt - 1,
            slot_log: if cq.cqe_size == 64 {
                SlotLog::S64
            } else {
                SlotLog::S128
            },
            dbrec: cq.dbrec,
            ring_mask: cqe_cnt as usize * cq.cqe_size as usize - 1,
            ring_size: cqe_cnt as usize * cq.cqe_size as usize,
            at: 0,
            lazy_ci: false,
            after_poll: AFTER_POLL_CI | after_poll_trace(),
            cqn: cq.cqn,
            uar: cq.cq_uar as *mut u8,
            arm_sn: 0,
        })
    }

    /// Tells the poller whether the CQ was created to ignore overrun
    /// (`IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`; the sim's
    /// `Device::create_cq_ex`). Then the device never reads the
    /// consumer-index record, and [`Self::polled`] does not write it: the
    /// caller keeps the CQ from overrunning (CQ credits). The record is still
    /// written where something reads it: [`Self::update_ci`] (RESET, drain,
    /// before arming). Switching back to `false` writes it at once.
    pub fn set_overrun_ignored(&mut self, ignored: bool) {
        if !ignored {
            self.update_ci();
        }
        self.lazy_ci = ignored;
        self.after_poll = after_poll_trace() | if ignored { 0 } else { AFTER_POLL_CI };
    }

    /// Whether [`Self::polled`] leaves the consumer-index record alone.
    pub fn overrun_ignored(&self) -> bool {
        self.lazy_ci
    }

    /// The CQ number (`mlx5dv_cq.cqn`).
    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// Consumer index.
    #[inline(always)]
    pub fn ci(&self) -> u32 {
        (self.at >> self.slot_log as u32) as u32
    }

    /// Test hook (feature `test-hooks`): moves the consumer index to `ci`,
    /// as if `ci` CQEs had been polled since the CQ was made, so that tests
    /// reach the indices a long-lived CQ does (the owner bit of any pass,
    /// the record's 24 bits wrapping at 2^24, the index at 2^32) without
    /// polling 2^24 CQEs. Nothing is written to the doorbell record.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn start_at(&mut self, ci: u32) {
        self.at = (ci as usize) << self.slot_log as u32;
    }

    /// The CQEs the CQ holds (`cqe_cnt`).
    pub fn cqe_cnt(&self) -> u32 {
        self.mask + 1
    }

    /// Address of the `op_own` byte of the CQE at index `i`.
    #[inline(always)]
    fn op_own_at(&self, i: u32) -> *const u8 {
        // A masked slot index: inside the CQ buffer (constructor contract).
        self.op_own0
            .wrapping_add(((i & self.mask) as usize) << self.slot_log as u32)
    }

    /// Whether the `k` CQEs from the consumer index on are software-owned
    /// (`k` at most `cqe_cnt`): a look that consumes nothing, for tests and
    /// measurements that must know a poll will find them. A compressed
    /// session's title counts as its `N` completions (its `byte_cnt`), the
    /// slots it covers not looked at.
    pub fn ready(&self, k: u32) -> bool {
        let k = k.min(self.cqe_cnt());
        let (mut i, mut found) = (self.ci(), 0);
        while found < k {
            // SAFETY: the op_own byte of a slot inside the CQ buffer
            // (masked index, constructor contract).
            let op_own = unsafe { mmio::read_op_own(self.op_own_at(i)) };
            if !sw_owned(op_own, i, self.cqe_cnt()) {
                return false;
            }
            mmio::from_device_barrier();
            if self.slot_log == SlotLog::S64 && mini_cqe::is_title(op_own) {
                // SAFETY: a software-owned 64-byte CQE (tested above, before
                // the barrier); its byte_cnt is bytes 44..48.
                let n = unsafe { Cqe::decode_raw(self.op_own_at(i).sub(CQE64 - 1)) }.byte_cnt;
                found += n.max(1);
                i = i.wrapping_add(n.max(1));
            } else {
                found += 1;
                i = i.wrapping_add(1);
            }
        }
        true
    }

    /// Whether the CQE at the consumer index is software-owned: one load of
    /// its `op_own` and one compare, no barrier, nothing consumed. What an
    /// empty poll costs.
    #[inline(always)]
    pub fn has_cqe(&self) -> bool {
        let at = self.at;
        // SAFETY: the op_own byte of a slot inside the CQ buffer (masked
        // offset of a whole slot; constructor contract).
        let op_own = unsafe { mmio::read_op_own(self.op_own0.wrapping_add(at & self.ring_mask)) };
        owned(op_own, (at & self.ring_size != 0) as u8)
    }

    /// If the CQE at the consumer index is a compressed session's title
    /// (software-owned, [`crate::mini_cqe::is_title`], on a CQ of 64-byte
    /// slots), expands the session in place: its completions are then
    /// ordinary CQEs from the consumer index (the title's slot) on, for
    /// any poll (the fast ones among them). Returns whether it did; `false`,
    /// changing nothing, for any other CQE, an empty CQ, or a title the
    /// expansion refuses ([`crate::mini_cqe::expand_session`]'s errors).
    #[inline]
    pub fn expand_title(&mut self) -> bool {
        if self.slot_log != SlotLog::S64 {
            return false;
        }
        let at = self.at;
        // SAFETY: the op_own byte of a slot inside the CQ buffer (masked
        // offset of a whole slot; constructor contract).
        let op_own = unsafe { mmio::read_op_own(self.op_own0.wrapping_add(at & self.ring_mask)) };
        if !owned(op_own, (at & self.ring_size != 0) as u8) || !mini_cqe::is_title(op_own) {
            return false;
        }
        mmio::from_device_barrier();
        unzip_cq(self, op_own)
    }

    /// Takes the CQE at the consumer index if it is software-owned, as
    /// [`CqCursor::next`] does (the same ownership test and barrier), on a
    /// CQ of `SLOT`-byte slots: for a poll that takes one CQE in
    /// straight-line code, which then keeps none of the CQ's state in
    /// registers across the barrier (what it needs after it, it loads).
    /// A compressed session's title is taken as it is (its `op_own` format
    /// bits 3:2 are 3): a poll that tests `op_own` anyway puts anything but
    /// its common CQE back ([`Taken::put_back`]) for one that expands it
    /// ([`Self::expand_title`], [`CqCursor::next`]), so the common path
    /// pays nothing for compression.
    ///
    /// # Panics
    /// When `SLOT` is not the CQ's slot size ([`Self::slot_size`]).
    #[inline(always)]
    pub fn take<const SLOT: usize>(&mut self) -> Option<Taken<'_, SLOT>> {
        assert!(SLOT == self.slot_size(), "the slot size taken");
        let at = self.at;
        let p = self.op_own0.wrapping_add(at & self.ring_mask);
        // SAFETY: the op_own byte of a slot inside the CQ buffer (masked
        // offset of a whole slot; constructor contract).
        let op_own = unsafe { mmio::read_op_own(p) };
        if !owned(op_own, (at & self.ring_size != 0) as u8) {
            return None;
        }
        mmio::from_device_barrier();
        self.at = at.wrapping_add(SLOT);
        Some(Taken {
            p: one_register(p.wrapping_sub(CQE64 - 1)),
            op_own,
            cq: self,
        })
    }

    /// Takes again the CQE `p` names ([`Taken::put_back`]): no ownership
    /// test and no barrier (the take that put it back did both, and a
    /// slot software owns stays software's until the consumer index passes
    /// it); the consumer index advances past it. `None`, taking nothing,
    /// when the consumer index is no longer the one `p` was put back at.
    #[inline(always)]
    pub fn take_put_back<const SLOT: usize>(
        &mut self,
        p: PutBack<SLOT>,
    ) -> Option<Taken<'_, SLOT>> {
        if p.at != self.at {
            return None;
        }
        self.at = p.at.wrapping_add(SLOT);
        Some(Taken {
            p: self
                .op_own0
                .wrapping_add(p.at & self.ring_mask)
                .wrapping_sub(CQE64 - 1),
            op_own: p.op_own,
            cq: self,
        })
    }

    /// Whether [`Self::polled`] has something to do (one load and compare):
    /// a caller that took CQEs without a loop, and keeps nothing live
    /// across a call, can test this and call `polled` out of line.
    #[inline(always)]
    pub fn quiet_polls(&self) -> bool {
        self.after_poll == 0 && !crate::trace::in_capture()
    }

    /// Takes the CQE at the consumer index if it is software-owned (its
    /// barrier as [`CqCursor::next`]'s), decoded, and advances the consumer
    /// index (the doorbell record is written by [`Self::polled`] or
    /// [`Self::update_ci`]).
    #[inline]
    pub fn poll_one(&mut self) -> Option<Cqe> {
        if self.slot_log == SlotLog::S64 {
            self.cursor::<64>().next().map(|c| c.decode())
        } else {
            self.cursor::<128>().next().map(|c| c.decode())
        }
    }

    /// A cursor over the CQEs from the consumer index on ([`CqCursor::next`]),
    /// which holds a copy of what polling reads (ring address, sizes,
    /// consumer index) so that a loop over it keeps them in registers
    /// across its barriers; the consumer index goes back into the
    /// `CompletionQueue` when the cursor is dropped (the doorbell record is
    /// written by [`Self::polled`] or [`Self::update_ci`]).
    ///
    /// # Panics
    /// When `SLOT` is not the CQ's slot size ([`Self::slot_size`]).
    #[inline(always)]
    pub fn cursor<const SLOT: usize>(&mut self) -> CqCursor<'_, SLOT> {
        assert!(SLOT == self.slot_size(), "the cursor's slot size");
        CqCursor {
            op_own0: self.op_own0,
            at: self.at,
            ring_mask: self.ring_mask,
            cq: self,
        }
    }

    /// The CQ's slot size in bytes: 64, or 128 (the CQE proper is then the
    /// second half).
    #[inline(always)]
    pub fn slot_size(&self) -> usize {
        // (a compare, not a shift: the constructor allows these two only)
        if self.slot_log == SlotLog::S64 {
            64
        } else {
            128
        }
    }

    /// After a poll that consumed the CQEs from index `from` to the
    /// consumer index: writes the consumer-index record (unless the CQ
    /// ignores overrun: [`Self::set_overrun_ignored`]), and prints those
    /// CQEs when tracing is on ([`crate::trace`]; the switch is one load
    /// here, none per CQE). The slots are still as the device wrote them:
    /// it writes a slot again only a whole ring later, and the caller's
    /// credits (or WR limits) keep it from getting there during the poll.
    #[inline(always)]
    pub fn polled(&mut self, from: u32) {
        if self.after_poll != 0 || crate::trace::in_capture() {
            self.after_polled(from);
        }
    }

    #[cold]
    #[inline(never)]
    fn after_polled(&mut self, from: u32) {
        if self.after_poll & AFTER_POLL_CI != 0 {
            self.update_ci();
        }
        if self.after_poll & AFTER_POLL_TRACE != 0 || crate::trace::in_capture() {
            self.trace_polled(from);
        }
    }

    /// Prints the CQEs from index `from` to the consumer index.
    #[cold]
    #[inline(never)]
    fn trace_polled(&self, from: u32) {
        let mut i = from;
        while i != self.ci() {
            let p = self.op_own_at(i);
            let off = ((i & self.mask) as usize) << self.slot_log as u32;
            // SAFETY: the 64 bytes of a CQE just polled (see `polled`).
            unsafe { crate::trace::polled(self.cqn, i, off, p.sub(CQE64 - 1)) };
            i = i.wrapping_add(1);
        }
    }

    /// Tells the device how far software has consumed (`dbrec[0] = ci &
    /// 0xffffff`, after a to-device barrier), whether or not the CQ ignores
    /// overrun: for whoever reads the record outside the poll (a CQ that
    /// detects overrun; RESET; a drain).
    #[inline]
    pub fn update_ci(&mut self) {
        mmio::to_device_barrier();
        // SAFETY: `dbrec` is the CQ's doorbell record (constructor contract).
        unsafe { mmio::write_dbrec(self.dbrec.add(CQ_DBREC_CI), cq_ci(self.ci())) };
    }

    /// Arms the CQ: the device raises one completion event for the next CQE
    /// written at or after the current consumer index (with `solicited_only`,
    /// only for a CQE with the `se` bit or an error CQE). As rdma-core's
    /// `mlx5_arm_cq` (and UCX's `uct_ib_mlx5dv_arm_cq`): the arm word `sn <<
    /// 28 | cmd | ci` goes to doorbell record word 1, then, after a barrier,
    /// `arm word << 32 | cqn` is written big-endian to `cq_uar + 0x20`. The
    /// arm word carries the consumer index, so arming needs no
    /// consumer-index record (it writes none). Poll once more after arming:
    /// a CQE written before the arm raises no event.
    ///
    /// Errors: [`DescError::Null`] when the description had no `cq_uar`.
    pub fn arm(&mut self, solicited_only: bool) -> Result<(), DescError> {
        if self.uar.is_null() {
            return Err(DescError::Null { what: "cq.cq_uar" });
        }
        let word = cq_arm_word(self.arm_sn, solicited_only, self.ci());
        // SAFETY: `dbrec` is the CQ's doorbell record (constructor contract).
        unsafe { mmio::write_dbrec(self.dbrec.add(CQ_DBREC_ARM), word) };
        mmio::to_device_barrier();
        let v = cq_arm_uar(word, self.cqn).to_be();
        // SAFETY: `cq_uar` is the CQ's UAR page (constructor contract); the
        // doorbell register at 0x20 is 8 bytes and 8-byte aligned. An atomic
        // store: the device (the sim's thread) may read it meanwhile.
        unsafe { mmio::write_uar_doorbell(self.uar.add(CQ_UAR_DOORBELL).cast(), v) };
        // The caller polls next: the arm must be seen before that poll reads.
        mmio::store_load_barrier();
        Ok(())
    }

    /// Records that a completion event was consumed (`ibv_get_cq_event` /
    /// `mlx5_cq_event`): the next arm carries the next sequence number.
    pub fn event_consumed(&mut self) {
        self.arm_sn = self.arm_sn.wrapping_add(1);
    }

    /// Sets the count of completion events consumed so far, where someone
    /// else consumes them (a completion channel several CQs share, read on
    /// another thread): the next arm carries it as its sequence number.
    pub fn set_events_consumed(&mut self, events: u32) {
        self.arm_sn = events;
    }
}
