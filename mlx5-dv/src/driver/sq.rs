//! The send queue: posting WQEs, ringing the doorbell (BlueFlame or 8-byte),
//! retiring WQEs by a CQE's `wqe_counter`, auto-signal (its gates, counts,
//! split copy and RESET in `sq_state.rs`).

use super::table::Table;
use super::{pow2, DescError};
use crate::doorbell::{full_wqe_index, sq_dbrec, QP_DBREC_SQ};
use crate::dv::mlx5dv_qp;
use crate::mmio;
use crate::prm::{CtrlFlags, WQEBB};
use crate::ring::RingBuf;
use crate::wqe::{wqe_size_within, write_sized, CtrlQpn, SendWqe, SqGeometry, WqeError};
use core::ptr::NonNull;

/// What a requester CQE retired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retired {
    /// wr_id of the WQE the CQE names.
    pub wr_id: u64,
    /// The CQE exists only because of auto-signal: report it only on error.
    pub hidden: bool,
}

/// How far ahead of the producer index [`SendQueue::post`] prefetches the
/// SQ for writing, in WQEBBs (x86_64 only, and not under Miri).
#[cfg(all(target_arch = "x86_64", not(miri)))]
const PREFETCH_WQEBBS: u32 = 8;

/// What the send queue remembers of the WQE that starts at one WQEBB slot.
#[derive(Clone, Copy, Default)]
#[repr(C, align(16))]
pub(super) struct Slot {
    /// wr_id the caller gave.
    wr_id: u64,
    /// The retired count once it retires: its WR sequence number (`posted`
    /// when it was posted) plus 1.
    retires_to: u32,
    /// WQEBBs it occupies, less 1 (so a WQE of one WQEBB, not hidden, has
    /// the sequence number alone in its second word).
    extra_wqebbs: u8,
    /// Whether its CQE was asked for by auto-signal, not the caller.
    hidden: bool,
    _pad: u16,
}

impl Slot {
    /// Stores a slot as two 8-byte words (field by field it would be four
    /// stores, on the hottest path there is), for WR `wr_seq` of `wqebbs`
    /// WQEBBs (at least 1).
    ///
    /// # Safety
    /// `to` must be valid for writes of a `Slot`.
    #[inline(always)]
    pub(super) unsafe fn store(to: *mut Slot, wr_id: u64, wr_seq: u32, wqebbs: u32, hidden: bool) {
        // The second word in memory order: retires_to, extra_wqebbs, hidden,
        // padding (built with shifts: assembling it from bytes costs a dozen
        // instructions when `wqebbs` is not a constant).
        debug_assert!(wqebbs >= 1);
        let seq = wr_seq.wrapping_add(1) as u64;
        let (bbs, hid) = (((wqebbs - 1) & 0xff) as u64, hidden as u64);
        #[cfg(target_endian = "little")]
        let meta = seq | bbs << 32 | hid << 40;
        #[cfg(target_endian = "big")]
        let meta = seq << 32 | bbs << 24 | hid << 16;
        // SAFETY: `Slot` is `repr(C)`: 16 bytes, 16-aligned, `wr_id` at 0 and
        // the rest (whose bytes `meta` lays out) at 8; the caller guarantees
        // `to` is writable.
        unsafe { (to as *mut [u64; 2]).write([wr_id, meta]) };
    }

    /// wr_id, WR sequence number, WQEBBs, hidden: for tests.
    #[cfg(test)]
    pub(super) fn fields(&self) -> (u64, u32, u8, bool) {
        (
            self.wr_id,
            self.retires_to.wrapping_sub(1),
            self.extra_wqebbs + 1,
            self.hidden,
        )
    }
}

/// See [`SendQueue::retirer`].
pub struct Retirer<'a> {
    /// `pi - 1`: the index of the last WQE posted.
    pub(super) last: u32,
    /// `pi - tail`: WQEBBs outstanding.
    pub(super) inflight: u32,
    retired: u32,
    posted: u32,
    /// `sq.slots`, `wqe_cnt` entries (not resized while borrowed).
    slots: *const Slot,
    slot_mask: u32,
    pub(super) sq: &'a mut SendQueue,
}

impl Retirer<'_> {
    /// Retires every WQE up to and including the one a requester CQE names by
    /// its `wqe_counter`; returns that WQE's wr_id, or `None` for a stale
    /// counter (one naming no outstanding WQE), which changes nothing.
    #[inline(always)]
    pub fn complete(&mut self, wqe_counter: u16) -> Option<Retired> {
        // The index is counted back from the last WQE posted, not forward from
        // `tail`: the same index (the window `[tail, pi)` holds at most
        // `wqe_cnt <= 2^16` WQEs, so a counter names at most one of them), but
        // the new `tail` then does not depend on the old one, and retiring a
        // run of CQEs is not one long chain of dependent loads.
        let back = (self.last as u16).wrapping_sub(wqe_counter) as u32;
        if back >= self.inflight {
            return None;
        }
        debug_assert!({
            let pi = self.last.wrapping_add(1);
            let tail = pi.wrapping_sub(self.inflight);
            self.inflight > 1 << 16
                || Some(self.last.wrapping_sub(back)) == full_wqe_index(wqe_counter, tail, pi)
        });
        // The WQE's index is `last - back`, equal to `wqe_counter` modulo
        // 2^16, so its slot is `wqe_counter & slot_mask` (`wqe_cnt <= 2^16`).
        // SAFETY: `slots` has `wqe_cnt` entries (made so in `new`, never
        // resized; the `SendQueue` is borrowed meanwhile), and the index is
        // masked below `wqe_cnt`.
        let s = unsafe {
            &*self
                .slots
                .add((wqe_counter as u32 & self.slot_mask) as usize)
        };
        // The new tail, `last - back + wqebbs`, is `pi - (back + 1 - wqebbs)`.
        self.inflight = back.wrapping_sub(s.extra_wqebbs as u32);
        self.retired = s.retires_to;
        Some(Retired {
            wr_id: s.wr_id,
            hidden: s.hidden,
        })
    }

    /// Work requests posted and not yet retired.
    #[inline(always)]
    pub fn outstanding(&self) -> u32 {
        self.posted.wrapping_sub(self.retired)
    }
}

impl Drop for Retirer<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.sq.tail = self.last.wrapping_add(1).wrapping_sub(self.inflight);
        self.sq.retired = self.retired;
    }
}

/// The auto-signal state before a [`SendQueue::signal_next`], to undo it.
#[derive(Clone, Copy, Debug)]
#[must_use = "undo it if the WR it was for is refused"]
pub struct SignalNext(u32);

/// [`SendQueue::auto_signal`] for the WR of sequence number `seq`, over
/// `last`, the sequence number of the last signaled WR, and the period
/// less one, `force_after`: the queue's own, or a
/// [`Reserved`](super::Reserved) batch's copy. A signaled WR only stores
/// its number (one store: the common case costs a test and a store); an
/// unsignaled one is signaled by force when `force_after` unsignaled WRs
/// precede it, `seq - last - 1 >= force_after` (wrapping: with auto-signal
/// off, `force_after` is `u32::MAX`, which only `signal_next`'s
/// `last = seq` reaches, and a WR 2^32 after the last signaled one, which
/// is then signaled too: a harmless hidden CQE).
#[inline(always)]
pub(super) fn auto_signal(
    last: &mut u32,
    force_after: u32,
    seq: u32,
    flags: CtrlFlags,
) -> (CtrlFlags, bool) {
    if flags.contains(CtrlFlags::CQ_UPDATE) {
        *last = seq;
        (flags, false)
    } else if seq.wrapping_sub(*last).wrapping_sub(1) >= force_after {
        *last = seq;
        (flags | CtrlFlags::CQ_UPDATE, true)
    } else {
        (flags, false)
    }
}

/// `SendQueue::force_after` for an auto-signal period of `n` WRs (0: off).
fn force_after(n: u32) -> u32 {
    if n == 0 {
        u32::MAX
    } else {
        n - 1
    }
}

/// Bit 32 of `SendQueue::batch_start`: no BlueFlame copy from registers.
pub(super) const NO_BF_FROM_REGS: u64 = 1 << 32;

/// Send queue of one QP.
pub struct SendQueue {
    pub(super) buf: RingBuf<'static>,
    pub(super) geo: SqGeometry,
    pub(super) dbrec: *mut u32,
    pub(super) bf_reg: *mut u8,
    pub(super) bf_size: u32,
    pub(super) bf_offset: u32,
    /// Next WQE index to post.
    pub(super) pi: u32,
    /// Oldest outstanding WQE index.
    pub(super) tail: u32,
    /// Producer index at the last doorbell (the first WQE posted since, if
    /// `pi` has moved) in bits 0..32, and [`NO_BF_FROM_REGS`] in bit 32 when
    /// the in-place posts (`fast.rs`) may not ring with a BlueFlame copy of
    /// their own (so their one test, `batch_start == pi`, says both); and
    /// the index of the last WQE posted.
    pub(super) batch_start: u64,
    pub(super) batch_last: u32,
    /// Per WQEBB slot: what we know of the WQE that starts there (one entry,
    /// so posting and retiring touch one cache line).
    pub(super) slots: Table<Slot>,
    /// `wqe_cnt - 1`.
    pub(super) slot_mask: u32,
    /// `max_post` WQEs of `geo.max_wqebbs` WQEBBs fit the ring, so a WR
    /// within `max_post` always finds room ([`Self::limit_wqe_size`]).
    pub(super) room_implied: bool,
    /// [`NO_BF_FROM_REGS`] or 0, as `batch_start` carries it: set when the
    /// BlueFlame registers hold less than a WQEBB, or tracing is on (read
    /// once, from the environment, by `new`), so that every WQE the
    /// in-place posts post is rung, and traced, by [`Self::ring_doorbell`].
    pub(super) no_bf: u64,
    /// `qpn_ds` of a ctrl segment without its DS, where the in-place posts
    /// OR it into the segment's first 8 bytes (`wqe::qpn_word`).
    pub(super) qpn_word: u64,
    /// The WR sequence number (`posted` when it was posted) of the last
    /// signaled WR, as auto-signal counts from it ([`auto_signal`]).
    pub(super) last_signaled: u32,
    /// The auto-signal period in WRs less one, or never (`u32::MAX`) when
    /// auto-signal is off: a WR is signaled by force once this many unsignaled
    /// ones precede it.
    pub(super) force_after: u32,
    /// Most work requests outstanding at once (`max_send_wr`), and the WR
    /// counts posted and retired so far.
    pub(super) max_post: u32,
    /// The WR limit of the gated posts (`fast::write_segs_gated`): `max_post`
    /// when their owner opened the gate and the room check is implied
    /// (`room_implied`), else 0 (every gated post refused).
    pub(super) gate: u32,
    /// Whether the owner opened the gate ([`Self::set_gate`]).
    pub(super) gate_open: bool,
    /// The WR limit of the gated UD posts (`fast_ud::ud_room`):
    /// `max_post` when their owner opened their gate
    /// ([`Self::set_ud_gate`]), the room check is implied, a WQE may take
    /// two WQEBBs and the BlueFlame register holds two; else 0.
    pub(super) ud_gate: u32,
    /// Whether the owner opened the UD gate.
    pub(super) ud_gate_open: bool,
    /// The same for the gated DC posts (`fast_dc::dc_room`,
    /// [`Self::set_dc_gate`]).
    pub(super) dc_gate: u32,
    /// Whether the owner opened the DC gate.
    pub(super) dc_gate_open: bool,
    /// The fence the next WQE [`Self::post`] writes gets unless it asks for
    /// `FENCE`: `SMALL_FENCE` after a UMR ([`Self::post_umr`]), else empty
    /// (libmlx5's `fm_cache`).
    pub(super) fence_next: CtrlFlags,
    pub(super) posted: u32,
    pub(super) retired: u32,
    /// The memory of a queue that has no ring ([`Self::none`]).
    pub(super) own: Option<Box<NoRing>>,
}

/// What a [`SendQueue::none`] stands on: one WQEBB of ring, a BlueFlame
/// register and a doorbell record of its own, which no device reads.
#[repr(C, align(64))]
pub(super) struct NoRing {
    ring: [u8; WQEBB],
    bf: [u8; WQEBB],
    dbrec: [u32; 2],
}

// SAFETY: the raw pointers are the QP's own rings and registers; the SendQueue
// is their only user on the host side.
unsafe impl Send for SendQueue {}

impl SendQueue {
    /// A send queue over `qp`'s SQ that holds at most `max_post` outstanding
    /// work requests (the QP's `max_send_wr`; 0 means one per WQEBB), each of
    /// at most `max_inline` inline bytes (fewer if the largest WQE, 16
    /// WQEBBs or the ring if smaller, cannot carry that many with its ctrl,
    /// remote-address and inline header). Auto-signal starts at every
    /// `max_post / 2` WRs ([`Self::set_auto_signal`]), so unsignaled WQEs can
    /// never fill the SQ for good.
    ///
    /// # Safety
    /// `qp` must describe live rings (as `mlx5dv_init_obj` or the sim return
    /// them) that stay valid, and are used by no one else on the host, until
    /// this `SendQueue` is dropped.
    pub unsafe fn new(
        qp: &mlx5dv_qp,
        qpn: u32,
        max_inline: u32,
        max_post: u32,
    ) -> Result<Self, DescError> {
        let wqe_cnt = pow2("sq.wqe_cnt", qp.sq.wqe_cnt)?;
        if qp.sq.stride as usize != WQEBB {
            return Err(DescError::Stride(qp.sq.stride));
        }
        let buf = NonNull::new(qp.sq.buf as *mut u8).ok_or(DescError::Null { what: "sq.buf" })?;
        if qp.dbrec.is_null() {
            return Err(DescError::Null { what: "dbrec" });
        }
        if qp.bf.reg.is_null() {
            return Err(DescError::Null { what: "bf.reg" });
        }
        let max_post = if max_post == 0 {
            wqe_cnt
        } else {
            max_post.min(wqe_cnt)
        };
        Ok(Self {
            // SAFETY: the caller guarantees `sq.buf` holds `wqe_cnt * 64` bytes
            // for our lifetime and nobody else on the host touches them.
            buf: unsafe { RingBuf::from_raw(buf, wqe_cnt as usize * WQEBB) },
            geo: SqGeometry {
                wqe_cnt,
                qpn,
                // No more than a WQE of the largest size carries (ctrl,
                // raddr, inline header): a longer payload could never be
                // posted, and `limit_wqe_size` relies on it.
                max_inline: max_inline
                    .min((16.min(wqe_cnt) * WQEBB as u32).min(crate::prm::MAX_DS * 16) - 36),
                max_wqebbs: 16.min(wqe_cnt),
            },
            dbrec: qp.dbrec,
            bf_reg: qp.bf.reg as *mut u8,
            bf_size: qp.bf.size,
            bf_offset: 0,
            pi: 0,
            tail: 0,
            batch_start: if crate::trace::enabled() || (qp.bf.size as usize) < WQEBB {
                NO_BF_FROM_REGS
            } else {
                0
            },
            batch_last: 0,
            slots: Table::new(wqe_cnt as usize, Slot::default()),
            slot_mask: wqe_cnt - 1,
            room_implied: max_post as u64 * 16.min(wqe_cnt) as u64 <= wqe_cnt as u64,
            no_bf: if crate::trace::enabled() || (qp.bf.size as usize) < WQEBB {
                NO_BF_FROM_REGS
            } else {
                0
            },
            qpn_word: crate::wqe::qpn_word(qpn),
            last_signaled: u32::MAX,
            force_after: force_after((max_post / 2).max(1)),
            max_post,
            gate: 0,
            gate_open: false,
            ud_gate: 0,
            ud_gate_open: false,
            dc_gate: 0,
            dc_gate_open: false,
            fence_next: CtrlFlags::empty(),
            posted: 0,
            retired: 0,
            own: None,
        })
    }

    /// The send queue of a QP that has none (a DCT: it only receives, and
    /// `mlx5dv_init_obj` must not be asked for its rings on ConnectX,
    /// where libmlx5 reads a BlueFlame register a DCT lacks). Every post
    /// is refused ([`WqeError::WrLimit`]: at most 0 WRs outstanding) and
    /// nothing is retired. Its 64-byte ring, doorbell record and BlueFlame
    /// register are memory of its own that no device reads.
    pub fn none(qpn: u32) -> SendQueue {
        let mut own = Box::new(NoRing {
            ring: [0; WQEBB],
            bf: [0; WQEBB],
            dbrec: [0; 2],
        });
        let mut d = crate::dv::mlx5dv_qp::zeroed();
        d.sq = crate::dv::mlx5dv_wq {
            buf: own.ring.as_mut_ptr().cast(),
            wqe_cnt: 1,
            stride: WQEBB as u32,
        };
        d.dbrec = own.dbrec.as_mut_ptr();
        d.bf = crate::dv::mlx5dv_bf {
            reg: own.bf.as_mut_ptr().cast(),
            // (Under a WQEBB: no BlueFlame copy is ever made.)
            size: 0,
        };
        // SAFETY: the description is of `own`'s memory, which the queue
        // keeps (a Box's contents do not move with it) until it is
        // dropped, and which nothing else uses.
        let mut sq = unsafe { Self::new(&d, qpn, 0, 1) }.expect("one WQEBB of 64 bytes");
        sq.max_post = 0;
        sq.own = Some(own);
        sq
    }

    /// The SQ's geometry.
    pub fn geometry(&self) -> &SqGeometry {
        &self.geo
    }

    /// Refuses WQEs larger than `max_wqebbs` WQEBBs from now on (at least 1;
    /// [`WqeError::TooBig`]): the largest its QP's `max_send_sge` and
    /// `max_inline` make, as rdma-core sizes the SQ (`mlx5_calc_send_wqe`).
    /// When `max_post` such WQEs fit the ring, a post within `max_post`
    /// needs no WQEBB room check. Only before the first post, or with no WR
    /// outstanding: otherwise it changes nothing and returns `false`.
    pub fn limit_wqe_size(&mut self, max_wqebbs: u32) -> bool {
        if self.outstanding() != 0 {
            // WQEs larger than the new limit may be outstanding: `room_implied`
            // would not hold for them.
            return false;
        }
        // Never below an inline WQE of `max_inline` bytes with a remote
        // address (ctrl, raddr, inline segment): the in-place inline post
        // relies on `len <= max_inline` keeping it within `max_wqebbs`.
        let inline = (2 + (self.geo.max_inline + 4).div_ceil(16)).div_ceil(4);
        self.geo.max_wqebbs = self.geo.max_wqebbs.min(max_wqebbs.max(1).max(inline));
        self.room_implied =
            self.max_post as u64 * self.geo.max_wqebbs as u64 <= self.geo.wqe_cnt as u64;
        self.set_gate(self.gate_open);
        self.set_ud_gate(self.ud_gate_open);
        self.set_dc_gate(self.dc_gate_open);
        true
    }

    /// WQEBBs free for posting.
    pub fn free_wqebbs(&self) -> u32 {
        self.geo.wqe_cnt - self.pi.wrapping_sub(self.tail)
    }

    /// Work requests posted and not yet retired.
    #[inline]
    pub fn outstanding(&self) -> u32 {
        self.posted.wrapping_sub(self.retired)
    }

    /// Work requests that may still be posted before `max_post` is reached.
    pub fn free_wrs(&self) -> u32 {
        self.max_post - self.posted.wrapping_sub(self.retired)
    }

    /// Next WQE index to post.
    pub fn pi(&self) -> u32 {
        self.pi
    }

    /// Writes one WQE without ringing the doorbell. On error nothing is written.
    /// A masked atomic is [`WqeError::UnsupportedOpcode`] here:
    /// [`Self::post_masked`] posts it (a test for it here measured 22
    /// instructions on this path, `scripts/insn-count`).
    /// (With tracing on, [`Self::ring_doorbell`] prints the WQEs it publishes.)
    ///
    /// Always inlined: a caller that builds its WQEs with a fixed opcode and
    /// payload kind gets the checks for the other kinds folded away.
    #[inline(always)]
    pub fn post(&mut self, wqe: &SendWqe<'_>, wr_id: u64) -> Result<(), WqeError> {
        // Checks first; then the bookkeeping; the ring is written last, so
        // little stays live across its stores and nothing is reloaded after.
        let pi = self.pi;
        let posted = self.posted;
        let wqe_cnt = self.geo.wqe_cnt;
        if self.max_post == posted.wrapping_sub(self.retired) {
            return Err(self.wr_limit());
        }
        let free = wqe_cnt - pi.wrapping_sub(self.tail);
        // `new` made `geo.max_wqebbs` at most `wqe_cnt`.
        // (A masked atomic is refused here: `Self::post_masked` posts it.)
        let (ds, wqebbs) = wqe_size_within(&self.geo, wqe, self.geo.max_wqebbs)?;
        if wqebbs > free {
            return Err(WqeError::QueueFull { need: wqebbs, free });
        }
        let (mut flags, forced) = self.auto_signal(wqe.flags);
        if !self.fence_next.is_empty() {
            flags = self.take_fence(flags);
        }
        let slot = (pi & (wqe_cnt - 1)) as usize;
        debug_assert_eq!(self.slots.len(), wqe_cnt as usize);
        // SAFETY: `slots` has `wqe_cnt` entries (made so in `new`), and `slot`
        // is masked below `wqe_cnt`.
        unsafe { Slot::store(self.slots.ptr().add(slot), wr_id, posted, wqebbs, forced) };
        self.posted = posted.wrapping_add(1);
        self.batch_last = pi;
        self.pi = pi.wrapping_add(wqebbs);
        // The geometry was checked in `new` (power-of-two `wqe_cnt`, ring of
        // `wqe_cnt * 64` bytes).
        let qpn = CtrlQpn::Word(self.qpn_word);
        write_sized(&mut self.buf, &self.geo, qpn, pi, wqe, flags, ds);
        // Bring the WQEBB a few WQEs ahead into the cache (for writing where
        // the target has `prefetchw`), so that the stores of a later post, and
        // the drain at the doorbell's barrier, do not wait for the line. A
        // hint: no fault, no effect on the ring's contents, so under Miri
        // (which does not run `_mm_prefetch`) there is none.
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        {
            let ahead = (pi.wrapping_add(PREFETCH_WQEBBS) & (wqe_cnt - 1)) as usize * WQEBB;
            // SAFETY: a prefetch touches no memory architecturally; the
            // address is inside the ring anyway (masked index).
            unsafe {
                core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_ET0 }>(
                    self.buf.as_ptr().add(ahead) as *const i8,
                )
            };
        }
        Ok(())
    }

    /// The flags a WQE posted now gets, and whether auto-signal forced its
    /// CQE: after `auto_signal - 1` unsignaled WRs in a row it asks for a
    /// CQE anyway, so completions keep retiring SQ space. The caller never
    /// sees that CQE unless the WR fails ([`Retired::hidden`]). Counts the
    /// WR into the run: call it only once nothing can refuse the WR.
    #[inline(always)]
    pub(super) fn auto_signal(&mut self, flags: CtrlFlags) -> (CtrlFlags, bool) {
        auto_signal(
            &mut self.last_signaled,
            self.force_after,
            self.posted,
            flags,
        )
    }

    /// Prints every WQE posted since the last doorbell (tracing is checked
    /// once per doorbell, not once per WQE, to keep `post` short).
    #[cold]
    #[inline(never)]
    pub(super) fn trace_batch(&self) {
        let mut idx = self.batch_start as u32;
        while idx != self.pi {
            let s = self.slots.get((idx & self.slot_mask) as usize);
            crate::trace::posted(self.geo.qpn, &self.buf, self.geo.wqe_cnt, idx, s.wr_id);
            idx = idx.wrapping_add(s.extra_wqebbs as u32 + 1);
        }
    }

    #[cold]
    pub(super) fn wr_limit(&self) -> WqeError {
        WqeError::WrLimit {
            max_post: self.max_post,
        }
    }

    /// Rings the doorbell for everything posted since the last ring, in the
    /// order rdma-core uses (`qp.c` `post_send_db`): barrier, doorbell record, WC barrier, BlueFlame
    /// copy (single WQE that fits) or 8-byte doorbell, flush, offset toggle.
    #[inline]
    pub fn ring_doorbell(&mut self) {
        if self.pi == self.batch_start as u32 {
            // Nothing posted since the last doorbell (every WQE takes a WQEBB).
            return;
        }
        if crate::trace::enabled() {
            self.trace_batch();
        }
        let first = self.batch_start as u32;
        let wqebbs = self.pi.wrapping_sub(first);
        // A single WQE since the last doorbell: it starts where the batch does.
        if self.batch_last == first && self.bf_size >= wqebbs * WQEBB as u32 {
            self.ring_bf(first, wqebbs);
            // (`ring_bf` leaves bit 32 clear, as the in-place posts, which
            // call it only when it is, need.)
            self.batch_start |= self.no_bf;
            return;
        }
        mmio::to_device_barrier();
        // SAFETY: `dbrec` is the QP's doorbell record (constructor contract).
        unsafe { mmio::write_dbrec(self.dbrec.add(QP_DBREC_SQ), sq_dbrec(self.pi)) };
        mmio::wc_start_barrier();
        // rdma-core rings with the first 8 bytes of the last WQE's ctrl segment.
        let at = (self.batch_last & self.slot_mask) as usize * WQEBB;
        // SAFETY: the first 8 bytes of a WQEBB inside the ring (masked
        // index), which is ours; `bf_reg + bf_offset` is within the QP's
        // BlueFlame register pair, `bf_size` bytes each (constructor
        // contract), and 8-byte aligned as every UAR register is.
        unsafe {
            let last = self.buf.as_ptr().add(at).cast::<u64>().read_unaligned();
            mmio::write_uar(self.bf_reg.add(self.bf_offset as usize).cast(), &[last]);
        }
        mmio::wc_flush_barrier();
        self.bf_offset ^= self.bf_size;
        self.batch_start = self.pi as u64 | self.no_bf;
    }

    /// The doorbell for the one WQE posted since the last doorbell, of
    /// `wqebbs` WQEBBs at index `first` (so `pi == first + wqebbs`), which
    /// fits the BlueFlame register (`wqebbs * 64 <= bf_size`; the caller
    /// checked both): the doorbell record, then **BlueFlame**, the WQE
    /// copied 64 bytes at a time (`mmio::copy_to_bf`; its WQEBBs may
    /// continue at the start of the ring), so the NIC need not read it
    /// from the ring. In rdma-core's order (`post_send_db`).
    #[inline(always)]
    pub(super) fn ring_bf(&mut self, first: u32, wqebbs: u32) {
        debug_assert!(
            self.pi == first.wrapping_add(wqebbs) && self.bf_size >= wqebbs * WQEBB as u32
        );
        // Read before the barriers: they are compiler fences too, and would
        // make each field a reload.
        let (ring, mask, pi) = (self.buf.as_ptr(), self.slot_mask, self.pi);
        let reg = self.bf_doorbell(pi);
        // The first two WQEBBs (every WQE has one) out of the loop: a WQE
        // of one or two WQEBBs, the common ones, then takes no turn of it.
        // SAFETY: as in the loop below.
        unsafe { mmio::copy_to_bf(reg, ring.add((first & mask) as usize * WQEBB)) };
        if wqebbs >= 2 {
            let at = (first.wrapping_add(1) & mask) as usize * WQEBB;
            // SAFETY: as in the loop below.
            unsafe { mmio::copy_to_bf(reg.add(WQEBB), ring.add(at)) };
        }
        for i in 2..wqebbs {
            let at = (first.wrapping_add(i) & mask) as usize * WQEBB;
            // SAFETY: `at` is a WQEBB inside the ring (`wqe_cnt * 64` bytes,
            // masked index), which is ours; `reg` is a BlueFlame register of
            // `bf_size >= wqebbs * 64` bytes (the caller's check; constructor
            // contract).
            unsafe { mmio::copy_to_bf(reg.add(i as usize * WQEBB), ring.add(at)) };
        }
        mmio::wc_flush_barrier();
    }

    /// [`Self::ring_bf`] of the one WQEBB at `wqe`, the WQE just posted
    /// (the caller's pointer into the ring, so it is not computed again),
    /// `pi` the producer index after it.
    ///
    /// # Safety
    /// `wqe` must be the WQEBB of the WQE just posted, in this queue's ring.
    #[inline(always)]
    pub(super) unsafe fn ring_bf_one(&mut self, wqe: *const u8, pi: u32) {
        debug_assert!(self.bf_size >= WQEBB as u32 && pi == self.pi);
        let reg = self.bf_doorbell(pi);
        // SAFETY: `wqe` is a WQEBB of the ring (the caller's guarantee); `reg`
        // a BlueFlame register of at least 64 bytes (constructor contract;
        // the callers ring from registers only when `bf_size >= 64`).
        unsafe { mmio::copy_to_bf(reg, wqe) };
        mmio::wc_flush_barrier();
    }

    /// [`Self::ring_bf`] of the two WQEBBs `wqe` and `second` (the next in
    /// the ring, which may be its first), the UD WQE just posted, `pi` the
    /// producer index after it.
    ///
    /// # Safety
    /// `wqe` and `second` must be the WQEBBs of the WQE just posted, in this
    /// queue's ring, and the BlueFlame register must hold 128 bytes
    /// (`bf_size >= 128`).
    #[inline(always)]
    pub(super) unsafe fn ring_bf_two(&mut self, wqe: *const u8, second: *const u8, pi: u32) {
        debug_assert!(self.bf_size >= 2 * WQEBB as u32 && pi == self.pi);
        let reg = self.bf_doorbell(pi);
        // SAFETY: `wqe` and `second` are WQEBBs of the ring (the caller's
        // guarantee); `reg` a BlueFlame register of at least 128 bytes
        // (the caller's guarantee; constructor contract).
        unsafe {
            mmio::copy_to_bf(reg, wqe);
            mmio::copy_to_bf(reg.add(WQEBB), second);
        }
        mmio::wc_flush_barrier();
    }

    /// The doorbell of [`Self::ring_bf`] and [`Self::ring_bf_one`], producer
    /// index `pi`, up to the BlueFlame copy: the BlueFlame offset toggled, a
    /// to-device barrier, the doorbell record and the write-combining start
    /// barrier. Returns the BlueFlame register to copy the WQE to; the
    /// caller copies it, then `mmio::wc_flush_barrier`.
    #[inline(always)]
    fn bf_doorbell(&mut self, pi: u32) -> *mut u8 {
        let dbrec = self.dbrec;
        // SAFETY: `bf_reg + bf_offset` is one of the QP's BlueFlame
        // registers (constructor contract).
        let reg = unsafe { self.bf_reg.add(self.bf_offset as usize) };
        self.bf_offset ^= self.bf_size;
        // (Bit 32 clear: see the callers.)
        self.batch_start = pi as u64;
        mmio::to_device_barrier();
        // SAFETY: `dbrec` is the QP's doorbell record (constructor contract).
        unsafe { mmio::write_dbrec(dbrec.add(QP_DBREC_SQ), sq_dbrec(pi)) };
        mmio::wc_start_barrier();
        reg
    }

    /// Retires every WQE up to and including the one a requester CQE names by
    /// its `wqe_counter`; returns that WQE's wr_id, or `None` for a stale counter.
    /// [`Retirer::complete`] for one CQE: the WQE's index counted forward
    /// from `tail` (the window `[tail, pi)` holds at most `wqe_cnt <= 2^16`
    /// WQEBBs, so a counter names at most one index in it), which keeps
    /// fewer values live than counting back from the last WQE posted (what
    /// a loop over many CQEs wants, to keep its iterations independent).
    #[inline(always)]
    pub fn complete(&mut self, wqe_counter: u16) -> Option<Retired> {
        let tail = self.tail;
        let ahead = wqe_counter.wrapping_sub(tail as u16) as u32;
        if ahead >= self.pi.wrapping_sub(tail) {
            return None;
        }
        debug_assert_eq!(
            Some(tail.wrapping_add(ahead)),
            full_wqe_index(wqe_counter, tail, self.pi)
        );
        // The WQE's slot: its index is `wqe_counter` modulo 2^16, and
        // `wqe_cnt <= 2^16`.
        // SAFETY: `slots` has `wqe_cnt` entries (made so in `new`, never
        // resized) and the index is masked below `wqe_cnt`.
        let s = unsafe {
            *self
                .slots
                .ptr()
                .add((wqe_counter as u32 & self.slot_mask) as usize)
        };
        self.tail = tail
            .wrapping_add(ahead)
            .wrapping_add(s.extra_wqebbs as u32 + 1);
        self.retired = s.retires_to;
        Some(Retired {
            wr_id: s.wr_id,
            hidden: s.hidden,
        })
    }

    /// A copy of what retiring reads and writes (indices, the slot table),
    /// for a poll loop that retires many WQEs: it keeps them in registers
    /// across the loop's barriers, and the `SendQueue` gets them back when
    /// the `Retirer` is dropped.
    #[inline(always)]
    pub fn retirer(&mut self) -> Retirer<'_> {
        Retirer {
            last: self.pi.wrapping_sub(1),
            inflight: self.pi.wrapping_sub(self.tail),
            retired: self.retired,
            posted: self.posted,
            slots: self.slots.ptr(),
            slot_mask: self.slot_mask,
            sq: self,
        }
    }

    /// Auto-signal every `n` work requests (0: off), counting from the next
    /// one. Default: half of `max_post`.
    pub fn set_auto_signal(&mut self, n: u32) {
        self.force_after = force_after(n);
        self.last_signaled = self.posted.wrapping_sub(1);
    }

    /// Makes the next WQE posted signaled even if its WR is not (a hidden
    /// CQE, as auto-signal's), whatever the auto-signal setting. For a
    /// caller that knows a CQE must come, e.g. when this WR leaves the CQ's
    /// credits low. Returns what [`Self::undo_signal_next`] takes to undo
    /// it when that WR is refused after all.
    pub fn signal_next(&mut self) -> SignalNext {
        let prev = self.last_signaled;
        self.last_signaled = self.posted;
        SignalNext(prev)
    }

    /// Undoes a [`Self::signal_next`] (nothing was posted since).
    pub fn undo_signal_next(&mut self, s: SignalNext) {
        self.last_signaled = s.0;
    }

    /// Whether a WQE with these flags is signaled.
    pub fn signaled(flags: CtrlFlags) -> bool {
        flags.contains(CtrlFlags::CQ_UPDATE)
    }
}
