//! The ring driver: a send queue and a completion queue over the raw ring
//! descriptions `mlx5dv_init_obj` returns (`mlx5dv_qp`, `mlx5dv_cq`), so the
//! same code drives the sim and a ConnectX NIC.
//!
//! Hot path (`post`, `ring_doorbell`, `poll`): no allocation, no lock, no syscall.

use crate::cqe::{sw_owned, Cqe};
use crate::doorbell::{
    cq_arm_uar, cq_arm_word, cq_ci, full_wqe_index, sq_dbrec, CQ_DBREC_ARM, CQ_DBREC_CI,
    CQ_UAR_DOORBELL, QP_DBREC_SQ,
};
use crate::dv::{mlx5dv_cq, mlx5dv_qp};
use crate::mmio;
use crate::prm::{CtrlFlags, CQE64, WQEBB};
use crate::ring::RingBuf;
use crate::wqe::{wqe_size_within, write_sized, SendWqe, SqGeometry, WqeError};
use core::ptr::NonNull;

/// Why a ring description was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DescError {
    #[error("{what} is null")]
    Null { what: &'static str },
    #[error("{what} = {value} must be a nonzero power of two")]
    NotPow2 { what: &'static str, value: u32 },
    #[error("SQ stride is {0} bytes; mlx5 send WQEBBs are 64")]
    Stride(u32),
    #[error("CQE size is {0} bytes; mlx5 CQEs are 64 or 128")]
    CqeSize(u32),
}

fn pow2(what: &'static str, value: u32) -> Result<u32, DescError> {
    if value.is_power_of_two() {
        Ok(value)
    } else {
        Err(DescError::NotPow2 { what, value })
    }
}

/// What a requester CQE retired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retired {
    /// wr_id of the WQE the CQE names.
    pub wr_id: u64,
    /// The CQE exists only because of auto-signal: report it only on error.
    pub hidden: bool,
}

/// How far ahead of the producer index [`SendQueue::post`] prefetches the
/// SQ for writing, in WQEBBs.
const PREFETCH_WQEBBS: u32 = 8;

/// What the send queue remembers of the WQE that starts at one WQEBB slot.
#[derive(Clone, Copy, Default)]
#[repr(C, align(16))]
struct Slot {
    /// wr_id the caller gave.
    wr_id: u64,
    /// WR sequence number (`posted` when it was posted).
    wr_seq: u32,
    /// WQEBBs it occupies.
    wqebbs: u8,
    /// Whether its CQE was asked for by auto-signal, not the caller.
    hidden: bool,
    _pad: u16,
}

impl Slot {
    /// Stores a slot as two 8-byte words (field by field it would be four
    /// stores, on the hottest path there is).
    ///
    /// # Safety
    /// `to` must be valid for writes of a `Slot`.
    #[inline(always)]
    unsafe fn store(to: *mut Slot, wr_id: u64, wr_seq: u32, wqebbs: u32, hidden: bool) {
        let s = wr_seq.to_ne_bytes();
        // The second word in memory order: wr_seq, wqebbs, hidden, padding.
        let meta = u64::from_ne_bytes([s[0], s[1], s[2], s[3], wqebbs as u8, hidden as u8, 0, 0]);
        // SAFETY: `Slot` is `repr(C)`: 16 bytes, 16-aligned, `wr_id` at 0 and
        // the rest (whose bytes `meta` lays out) at 8; the caller guarantees
        // `to` is writable.
        unsafe { (to as *mut [u64; 2]).write([wr_id, meta]) };
    }
}

/// `SendQueue::force_after` for an auto-signal period of `n` WRs (0: off).
fn force_after(n: u32) -> u64 {
    if n == 0 {
        u64::MAX
    } else {
        n as u64 - 1
    }
}

/// Send queue of one QP.
pub struct SendQueue {
    buf: RingBuf<'static>,
    geo: SqGeometry,
    dbrec: *mut u32,
    bf_reg: *mut u8,
    bf_size: u32,
    bf_offset: u32,
    /// Next WQE index to post.
    pi: u32,
    /// Oldest outstanding WQE index.
    tail: u32,
    /// Producer index at the last doorbell (the first WQE posted since, if
    /// `pi` has moved), and the index of the last WQE posted.
    batch_start: u32,
    batch_last: u32,
    /// Per WQEBB slot: what we know of the WQE that starts there (one entry,
    /// so posting and retiring touch one cache line).
    slots: Box<[Slot]>,
    /// `wqe_cnt - 1`.
    slot_mask: u32,
    /// Unsignaled WRs posted in a row.
    unsignaled_run: u64,
    /// The auto-signal period in WRs less one, or never (`u64::MAX`) when
    /// auto-signal is off: a WR is signaled by force once this many unsignaled
    /// ones precede it.
    force_after: u64,
    /// Most work requests outstanding at once (`max_send_wr`), and the WR
    /// counts posted and retired so far.
    max_post: u32,
    posted: u32,
    retired: u32,
}

// SAFETY: the raw pointers are the QP's own rings and registers; the SendQueue
// is their only user on the host side.
unsafe impl Send for SendQueue {}

impl SendQueue {
    /// A send queue over `qp`'s SQ that holds at most `max_post` outstanding
    /// work requests (the QP's `max_send_wr`; 0 means one per WQEBB), each of
    /// at most `max_inline` inline bytes. Auto-signal starts at every
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
                max_inline,
                max_wqebbs: 16.min(wqe_cnt),
            },
            dbrec: qp.dbrec,
            bf_reg: qp.bf.reg as *mut u8,
            bf_size: qp.bf.size,
            bf_offset: 0,
            pi: 0,
            tail: 0,
            batch_start: 0,
            batch_last: 0,
            slots: vec![Slot::default(); wqe_cnt as usize].into_boxed_slice(),
            slot_mask: wqe_cnt - 1,
            unsignaled_run: 0,
            force_after: force_after((max_post / 2).max(1)),
            max_post,
            posted: 0,
            retired: 0,
        })
    }

    pub fn geometry(&self) -> &SqGeometry {
        &self.geo
    }

    /// WQEBBs free for posting.
    pub fn free_wqebbs(&self) -> u32 {
        self.geo.wqe_cnt - self.pi.wrapping_sub(self.tail)
    }

    /// Work requests posted and not yet retired.
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
        // Auto-signal: after `auto_signal - 1` unsignaled WRs in a row, ask for
        // a CQE anyway so completions keep retiring SQ space. The caller never
        // sees that CQE unless the WR fails ([`Retired::hidden`]).
        let user_signaled = wqe.flags.contains(CtrlFlags::CQ_UPDATE);
        let run = self.unsignaled_run;
        // `run + 1 >= period` for a period other than 0 (the run is a u64 and
        // never reaches `force_after`'s "never").
        let forced = !user_signaled && run >= self.force_after;
        let flags = if forced {
            wqe.flags | CtrlFlags::CQ_UPDATE
        } else {
            wqe.flags
        };
        // `new` made `geo.max_wqebbs` at most `wqe_cnt`.
        let (ds, wqebbs) = wqe_size_within(&self.geo, wqe, self.geo.max_wqebbs)?;
        if wqebbs > free {
            return Err(WqeError::QueueFull { need: wqebbs, free });
        }
        self.unsignaled_run = if flags.contains(CtrlFlags::CQ_UPDATE) {
            0
        } else {
            run + 1
        };
        let slot = (pi & (wqe_cnt - 1)) as usize;
        debug_assert_eq!(self.slots.len(), wqe_cnt as usize);
        // SAFETY: `slots` has `wqe_cnt` entries (made so in `new`), and `slot`
        // is masked below `wqe_cnt`.
        unsafe {
            Slot::store(
                self.slots.get_unchecked_mut(slot),
                wr_id,
                posted,
                wqebbs,
                forced,
            )
        };
        self.posted = posted.wrapping_add(1);
        self.batch_last = pi;
        self.pi = pi.wrapping_add(wqebbs);
        // The geometry was checked in `new` (power-of-two `wqe_cnt`, ring of
        // `wqe_cnt * 64` bytes).
        write_sized(&mut self.buf, &self.geo, pi, wqe, flags, ds);
        // Bring the WQEBB a few WQEs ahead into the cache (for writing where
        // the target has `prefetchw`), so that the stores of a later post, and
        // the drain at the doorbell's barrier, do not wait for the line. A
        // hint: no fault, no effect on the ring's contents.
        #[cfg(target_arch = "x86_64")]
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

    /// Prints every WQE posted since the last doorbell (tracing is checked
    /// once per doorbell, not once per WQE, to keep `post` short).
    #[cold]
    #[inline(never)]
    fn trace_batch(&self) {
        let mut idx = self.batch_start;
        while idx != self.pi {
            let s = self.slots[(idx & self.slot_mask) as usize];
            crate::trace::posted(self.geo.qpn, &self.buf, self.geo.wqe_cnt, idx, s.wr_id);
            idx = idx.wrapping_add((s.wqebbs as u32).max(1));
        }
    }

    #[cold]
    fn wr_limit(&self) -> WqeError {
        WqeError::WrLimit {
            max_post: self.max_post,
        }
    }

    /// Rings the doorbell for everything posted since the last ring, in the
    /// order rdma-core uses (`qp.c` `post_send_db`): barrier, doorbell record, WC barrier, BlueFlame
    /// copy (single WQE that fits) or 8-byte doorbell, flush, offset toggle.
    #[inline]
    pub fn ring_doorbell(&mut self) {
        if self.pi == self.batch_start {
            // Nothing posted since the last doorbell (every WQE takes a WQEBB).
            return;
        }
        if crate::trace::enabled() {
            self.trace_batch();
        }
        mmio::to_device_barrier();
        // SAFETY: `dbrec` is the QP's doorbell record (constructor contract).
        unsafe { mmio::write_dbrec(self.dbrec.add(QP_DBREC_SQ), sq_dbrec(self.pi)) };
        mmio::wc_start_barrier();
        let first = self.batch_start;
        let wqebbs = self.pi.wrapping_sub(first) as usize;
        let mask = (self.geo.wqe_cnt - 1) as usize;
        let ring = self.buf.as_ptr() as *const u64;
        // SAFETY (for both arms): `bf_reg + bf_offset` is within the QP's
        // BlueFlame register pair, `bf_size` bytes each (constructor contract),
        // and 8-byte aligned as every UAR register is.
        let reg = unsafe { self.bf_reg.add(self.bf_offset as usize) } as *mut u64;
        // A single WQE since the last doorbell: it starts where the batch does.
        let single = self.batch_last == first;
        if single && self.bf_size as usize >= wqebbs * WQEBB {
            // BlueFlame: the single WQE, 64 bytes at a time; its WQEBBs may
            // continue at the start of the ring.
            for i in 0..wqebbs {
                let at = ((first as usize + i) & mask) * (WQEBB / 8);
                // SAFETY: `at` is a WQEBB inside the ring (`wqe_cnt * 64`
                // bytes, masked index); the ring is ours (constructor
                // contract); unaligned reads need no alignment.
                let chunk: [u64; WQEBB / 8] =
                    unsafe { (ring.add(at) as *const [u64; WQEBB / 8]).read_unaligned() };
                // SAFETY: see above; `i * 8 + 8 <= wqebbs * 8 <= bf_size / 8`.
                unsafe { mmio::write_uar(reg.add(i * 8), &chunk) };
            }
        } else {
            // rdma-core rings with the first 8 bytes of the last WQE's ctrl segment.
            let at = (self.batch_last as usize & mask) * (WQEBB / 8);
            // SAFETY: the first 8 bytes of a WQEBB inside the ring (masked index).
            let last = unsafe { ring.add(at).read_unaligned() };
            // SAFETY: see above.
            unsafe { mmio::write_uar(reg, &[last]) };
        }
        mmio::wc_flush_barrier();
        self.bf_offset ^= self.bf_size;
        self.batch_start = self.pi;
    }

    /// Retires every WQE up to and including the one a requester CQE names by
    /// its `wqe_counter`; returns that WQE's wr_id, or `None` for a stale counter.
    #[inline]
    pub fn complete(&mut self, wqe_counter: u16) -> Option<Retired> {
        // The index is counted back from the last WQE posted, not forward from
        // `tail`: the same index (the window `[tail, pi)` holds at most
        // `wqe_cnt <= 2^16` WQEs, so a counter names at most one of them), but
        // the new `tail` then does not depend on the old one, and retiring a
        // run of CQEs is not one long chain of dependent loads.
        let last = self.pi.wrapping_sub(1);
        let back = (last as u16).wrapping_sub(wqe_counter) as u32;
        if back >= self.pi.wrapping_sub(self.tail) {
            return None;
        }
        let idx = last.wrapping_sub(back);
        debug_assert!(
            self.pi.wrapping_sub(self.tail) > 1 << 16
                || Some(idx) == full_wqe_index(wqe_counter, self.tail, self.pi)
        );
        // SAFETY: `slots` has `wqe_cnt` entries (made so in `new`), and the
        // index is masked below `wqe_cnt`.
        let s = unsafe { self.slots.get_unchecked((idx & self.slot_mask) as usize) };
        self.tail = idx.wrapping_add(s.wqebbs as u32);
        self.retired = s.wr_seq.wrapping_add(1);
        Some(Retired {
            wr_id: s.wr_id,
            hidden: s.hidden,
        })
    }

    /// Auto-signal every `n` work requests (0: off). Default: half of `max_post`.
    pub fn set_auto_signal(&mut self, n: u32) {
        self.force_after = force_after(n);
    }

    /// Makes the next WQE posted signaled even if its WR is not (a hidden
    /// CQE, as auto-signal's), whatever the auto-signal setting. For a
    /// caller that knows a CQE must come, e.g. when this WR takes the CQ's
    /// last credit.
    pub fn signal_next(&mut self) {
        // `run >= force_after` holds for every `force_after`, "never" included.
        self.unsignaled_run = u64::MAX;
    }

    /// Whether a WQE with these flags is signaled.
    pub fn signaled(flags: CtrlFlags) -> bool {
        flags.contains(CtrlFlags::CQ_UPDATE)
    }
}

/// Completion queue poller.
pub struct CompletionQueue {
    /// Address of the first CQE proper (the last 64 bytes of slot 0).
    first: *const u8,
    cqe_cnt: u32,
    /// `cqe_cnt - 1`.
    mask: u32,
    /// Slot size in bytes (64 or 128).
    stride: usize,
    dbrec: *mut u32,
    ci: u32,
    /// The CQEs from `ci` up to (not including) `ready_end` had their
    /// `op_own` seen software-owned before a completed
    /// [`mmio::from_device_barrier`].
    ready_end: u32,
    cqn: u32,
    /// The CQ's UAR page (`mlx5dv_cq.cq_uar`; null: arming unavailable), and
    /// the arm sequence number (2 bits used), advanced per completion event.
    uar: *mut u8,
    arm_sn: u32,
}

/// Most CQEs [`CompletionQueue::poll_one`] checks ahead of the consumer index
/// before its one acquire barrier.
const POLL_AHEAD: u32 = 16;

/// [`sw_owned`] for a CQE whose software-owned owner bit is `owner`: its
/// opcode (bits 7:4) is not INVALID (0xF) and bit 0 equals `owner`. In one
/// compare: with bit 0 rotated to bit 7 and bits 2:1 dropped, the byte is
/// below 0x78 exactly when bit 7 is clear and bits 6:3 are not all set.
#[inline(always)]
fn owned(op_own: u8, owner: u8) -> bool {
    ((op_own ^ owner).rotate_right(1) & 0xf8) < 0x78
}

// SAFETY: as for SendQueue.
unsafe impl Send for CompletionQueue {}

impl CompletionQueue {
    /// A poller over `cq`.
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
            // SAFETY: `cqe_size - 64` (0 or 64) is inside slot 0 of the CQ buffer.
            first: unsafe { (cq.buf as *const u8).add(cq.cqe_size as usize - CQE64) },
            cqe_cnt,
            mask: cqe_cnt - 1,
            stride: cq.cqe_size as usize,
            dbrec: cq.dbrec,
            ci: 0,
            ready_end: 0,
            cqn: cq.cqn,
            uar: cq.cq_uar as *mut u8,
            arm_sn: 0,
        })
    }

    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// Consumer index.
    pub fn ci(&self) -> u32 {
        self.ci
    }

    /// Takes the next software-owned CQE, if any, and advances the consumer
    /// index (the doorbell record is updated by [`Self::update_ci`]).
    ///
    /// Ordering as rdma-core's: `op_own` is read first, then the acquire
    /// barrier (`lfence` on x86_64), then the rest of the CQE. When it finds
    /// the CQE at `ci` software-owned it also reads the `op_own` bytes of up to
    /// 15 following CQEs (`POLL_AHEAD`) and stops at the first that is not,
    /// so one barrier orders the reads of all of them: the later calls that
    /// take those CQEs need no barrier of their own. The device does not write
    /// a slot again until the consumer index has passed it, so what was seen
    /// stays valid. With tracing on ([`crate::trace`]) it looks at one CQE at
    /// a time, and the trace switch is read only when it looks: switched on
    /// while CQEs are already seen, tracing starts at most 15 CQEs later.
    #[inline]
    pub fn poll_one(&mut self) -> Option<Cqe> {
        let mask = self.mask;
        let ci = self.ci;
        let mut trace = false;
        if ci == self.ready_end {
            // Up to the end of the ring at most, so that every CQE looked at
            // has the same software-owned value of the owner bit.
            let ahead = POLL_AHEAD.min(self.cqe_cnt - (ci & mask));
            let owner = ((ci & self.cqe_cnt) != 0) as u8;
            // SAFETY: a masked slot index: `slot + cqe_size <= cqe_cnt *
            // cqe_size`, inside the CQ buffer (constructor contract); `first`
            // points at the CQE proper of slot 0; byte 63 is op_own.
            let mut p = unsafe { self.first.add((ci & mask) as usize * self.stride + 63) };
            let mut n = 0;
            while n < ahead {
                // SAFETY: `p` is the op_own byte of slot `(ci & mask) + n`,
                // and `(ci & mask) + n < cqe_cnt` (`ahead` stops at the end).
                let op_own = unsafe { mmio::read_op_own(p) };
                debug_assert_eq!(
                    owned(op_own, owner),
                    sw_owned(op_own, ci.wrapping_add(n), self.cqe_cnt)
                );
                if !owned(op_own, owner) {
                    break;
                }
                n += 1;
                // Past the last slot only when the loop ends here (`n == ahead`).
                p = p.wrapping_add(self.stride);
            }
            if n == 0 {
                return None;
            }
            trace = crate::trace::enabled();
            if trace {
                n = 1;
            }
            mmio::from_device_barrier();
            self.ready_end = ci.wrapping_add(n);
        }
        let slot = (ci & mask) as usize * self.stride;
        // SAFETY: as above. The device wrote this CQE before publishing its
        // op_own, which we loaded before the barrier; the slot is ours until
        // the consumer index moves past it. Only the fields the CQE carries
        // are read, not a copy of all 64 bytes.
        let c = unsafe { Cqe::decode_raw(self.first.add(slot)) };
        self.ci = ci.wrapping_add(1);
        if trace {
            // Decoded again inside, so that the fast path computes only the
            // fields its caller uses.
            // SAFETY: as above: the 64 bytes of the CQE just polled.
            unsafe { crate::trace::polled(self.cqn, ci, slot, self.first.add(slot)) };
        }
        Some(c)
    }

    /// Tells the device how far software has consumed (`dbrec[0] = ci & 0xffffff`).
    #[inline]
    pub fn update_ci(&mut self) {
        mmio::to_device_barrier();
        // SAFETY: `dbrec` is the CQ's doorbell record (constructor contract).
        unsafe { mmio::write_dbrec(self.dbrec.add(CQ_DBREC_CI), cq_ci(self.ci)) };
    }

    /// Arms the CQ: the device raises one completion event for the next CQE
    /// written at or after the current consumer index (with `solicited_only`,
    /// only for a CQE with the `se` bit or an error CQE). As rdma-core's
    /// `mlx5_arm_cq`: the arm word `sn << 28 | cmd | ci` goes to doorbell
    /// record word 1, then, after a barrier, `arm word << 32 | cqn` is written
    /// big-endian to `cq_uar + 0x20`. Call [`Self::update_ci`] first if
    /// completions were polled, then poll once more after arming: a CQE
    /// written before the arm raises no event.
    ///
    /// Errors: [`DescError::Null`] when the description had no `cq_uar`.
    pub fn arm(&mut self, solicited_only: bool) -> Result<(), DescError> {
        if self.uar.is_null() {
            return Err(DescError::Null { what: "cq.cq_uar" });
        }
        let word = cq_arm_word(self.arm_sn, solicited_only, self.ci);
        // SAFETY: `dbrec` is the CQ's doorbell record (constructor contract).
        unsafe { mmio::write_dbrec(self.dbrec.add(CQ_DBREC_ARM), word) };
        mmio::to_device_barrier();
        let v = cq_arm_uar(word, self.cqn).to_be();
        // SAFETY: `cq_uar` is the CQ's UAR page (constructor contract); the
        // doorbell register at 0x20 is 8 bytes and 8-byte aligned.
        unsafe { mmio::write_uar(self.uar.add(CQ_UAR_DOORBELL).cast(), &[v]) };
        // The caller polls next: the arm must be seen before that poll reads.
        mmio::store_load_barrier();
        Ok(())
    }

    /// Records that a completion event was consumed (`ibv_get_cq_event` /
    /// `mlx5_cq_event`): the next arm carries the next sequence number.
    pub fn event_consumed(&mut self) {
        self.arm_sn = self.arm_sn.wrapping_add(1);
    }
}

/// Receive queue of one QP (`mlx5dv_qp.rq`, doorbell record word 0).
pub struct ReceiveQueue {
    buf: RingBuf<'static>,
    wqe_cnt: u32,
    stride: u32,
    dbrec: *mut u32,
    /// Next receive WQE index to post, and the oldest not yet completed.
    head: u32,
    tail: u32,
    pending: bool,
    wr_id: Box<[u64]>,
}

// SAFETY: as for SendQueue.
unsafe impl Send for ReceiveQueue {}

impl ReceiveQueue {
    /// The host side of moving the QP to RESET: the RQ doorbell record and
    /// the producer and consumer indices go back to 0; posted receives are
    /// forgotten (they produce no completion after this).
    pub fn reset(&mut self) {
        self.head = 0;
        self.tail = 0;
        self.pending = false;
        // SAFETY: `dbrec` is the QP's live doorbell record (`new`'s contract).
        unsafe { mmio::write_dbrec(self.dbrec.add(crate::doorbell::QP_DBREC_RQ), 0) };
    }

    /// A receive queue over `qp`'s RQ.
    ///
    /// # Safety
    /// As [`SendQueue::new`], for the RQ and doorbell record word 0.
    pub unsafe fn new(qp: &mlx5dv_qp) -> Result<Self, DescError> {
        let wqe_cnt = pow2("rq.wqe_cnt", qp.rq.wqe_cnt)?;
        let stride = pow2("rq.stride", qp.rq.stride)?;
        let buf = NonNull::new(qp.rq.buf as *mut u8).ok_or(DescError::Null { what: "rq.buf" })?;
        if qp.dbrec.is_null() {
            return Err(DescError::Null { what: "dbrec" });
        }
        let len = wqe_cnt as usize * stride as usize;
        if len < 64 {
            // RingBuf wants at least 64 bytes; a smaller RQ is not one we can drive.
            return Err(DescError::NotPow2 {
                what: "rq bytes (at least 64)",
                value: len as u32,
            });
        }
        Ok(Self {
            // SAFETY: the caller guarantees `rq.buf` holds `wqe_cnt * stride`
            // bytes for our lifetime and nobody else on the host touches them.
            buf: unsafe { RingBuf::from_raw(buf, len) },
            wqe_cnt,
            stride,
            dbrec: qp.dbrec,
            head: 0,
            tail: 0,
            pending: false,
            wr_id: vec![0; wqe_cnt as usize].into_boxed_slice(),
        })
    }

    /// Receive WQEs that may still be posted.
    pub fn free(&self) -> u32 {
        self.wqe_cnt - self.outstanding()
    }

    /// Receive WQEs posted and not yet completed.
    pub fn outstanding(&self) -> u32 {
        self.head.wrapping_sub(self.tail)
    }

    /// Most data segments per receive WQE (`stride / 16`).
    pub fn max_sge(&self) -> u32 {
        self.stride / 16
    }

    /// Writes one receive WQE without ringing the doorbell. On error nothing is written.
    #[inline]
    pub fn post(&mut self, sges: &[crate::wqe::DataSeg], wr_id: u64) -> Result<(), WqeError> {
        if self.free() == 0 {
            return Err(WqeError::QueueFull { need: 1, free: 0 });
        }
        crate::wqe::write_recv_wqe(&mut self.buf, self.wqe_cnt, self.stride, self.head, sges)?;
        self.wr_id[(self.head & (self.wqe_cnt - 1)) as usize] = wr_id;
        if crate::trace::enabled() {
            let off = (self.head & (self.wqe_cnt - 1)) as usize * self.stride as usize;
            crate::trace::recv_posted(self.head, off, wr_id, sges.len());
        }
        self.head = self.head.wrapping_add(1);
        self.pending = true;
        Ok(())
    }

    /// Publishes what was posted: barrier, then `dbrec[0] = be32(head & 0xffff)`.
    #[inline]
    pub fn ring_doorbell(&mut self) {
        if !self.pending {
            return;
        }
        mmio::to_device_barrier();
        // SAFETY: `dbrec` is the QP's doorbell record (constructor contract).
        unsafe {
            mmio::write_dbrec(
                self.dbrec.add(crate::doorbell::QP_DBREC_RQ),
                crate::doorbell::rq_dbrec(self.head),
            )
        };
        self.pending = false;
    }

    /// Retires the receive WQE a responder CQE names; returns its wr_id, or
    /// `None` for a counter that names no outstanding receive.
    #[inline]
    pub fn complete(&mut self, wqe_counter: u16) -> Option<u64> {
        let idx = full_wqe_index(wqe_counter, self.tail, self.head)?;
        self.tail = idx.wrapping_add(1);
        Some(self.wr_id[(idx & (self.wqe_cnt - 1)) as usize])
    }
}

impl SendQueue {
    /// The host side of moving the QP to RESET (after `ibv_modify_qp` to
    /// RESET, as rdma-core's `mlx5_modify_qp` does): the SQ doorbell record,
    /// producer and consumer indices, BlueFlame offset and every outstanding
    /// WR are forgotten. Outstanding WRs produce no completion after this.
    pub fn reset(&mut self) {
        self.pi = 0;
        self.tail = 0;
        self.batch_start = 0;
        self.batch_last = 0;
        self.bf_offset = 0;
        self.unsignaled_run = 0;
        self.retired = self.posted;
        // SAFETY: `dbrec` is the QP's live doorbell record (`new`'s contract).
        unsafe { mmio::write_dbrec(self.dbrec.add(QP_DBREC_SQ), 0) };
    }

    /// A copy of the whole SQ ring followed by the SQ doorbell record (4
    /// bytes, big-endian as the device reads it), for tests and tools that
    /// show a refused post wrote nothing. Allocates; not for the hot path.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.buf.len() + 4];
        let n = self.buf.len();
        self.buf.read_wrapping(0, &mut v[..n]);
        // SAFETY: `dbrec` is the QP's live doorbell record (`new`'s contract);
        // word QP_DBREC_SQ is the SQ's.
        let db = unsafe { mmio::read_dbrec(self.dbrec.add(QP_DBREC_SQ)) };
        v[n..].copy_from_slice(&db.to_be_bytes());
        v
    }
}

/// CQ credits: the room a CQ has for CQEs not yet produced. Every work
/// request posted to a queue that completes to the CQ takes one credit (a
/// send WR, signaled or not, because after an error every outstanding WR is
/// flushed into the CQ with its own CQE; a receive WR because it completes
/// once) and gives it back when the WR is retired. Posts that find too few
/// credits are refused before anything is written, so the CQ can never
/// overrun. Clones share the count: QPs sharing one CQ share its credits.
///
/// One atomic add per post batch and per poll batch; no lock.
#[derive(Clone, Debug)]
pub struct CqCredits {
    free: std::sync::Arc<core::sync::atomic::AtomicU32>,
    depth: u32,
}

impl CqCredits {
    /// Credits for a CQ of `depth` CQEs.
    pub fn new(depth: u32) -> Self {
        CqCredits {
            free: std::sync::Arc::new(core::sync::atomic::AtomicU32::new(depth)),
            depth,
        }
    }

    /// Names the count the clones share (equal for clones, different for
    /// credits made by separate `new` calls while both live).
    pub fn id(&self) -> usize {
        std::sync::Arc::as_ptr(&self.free) as usize
    }

    /// The CQ depth the credits stand for, in CQEs.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Credits free now.
    pub fn free(&self) -> u32 {
        self.free.load(core::sync::atomic::Ordering::Relaxed)
    }

    /// Takes `n` credits, or none if fewer than `n` are free.
    #[inline]
    pub fn take(&self, n: u32) -> bool {
        use core::sync::atomic::Ordering::Relaxed;
        self.free
            .fetch_update(Relaxed, Relaxed, |f| f.checked_sub(n))
            .is_ok()
    }

    /// Gives back `n` credits of retired work requests. More than were
    /// taken is a caller bug: the count stops at `depth` (never wraps).
    #[inline]
    pub fn give(&self, n: u32) {
        use core::sync::atomic::Ordering::Relaxed;
        if n != 0 {
            let depth = self.depth;
            let r = self
                .free
                .fetch_update(Relaxed, Relaxed, |f| Some(f.saturating_add(n).min(depth)));
            debug_assert!(
                r.is_ok_and(|before| before as u64 + n as u64 <= depth as u64),
                "more credits given back than taken"
            );
        }
    }
}

#[cfg(test)]
mod credit_tests {
    use super::CqCredits;

    #[test]
    fn credits_refuse_what_the_cq_cannot_hold_and_are_shared_by_clones() {
        let a = CqCredits::new(4);
        let b = a.clone();
        assert!(a.take(3));
        assert!(!b.take(2), "5 of 4");
        assert_eq!(b.free(), 1, "a refused take takes nothing");
        assert!(b.take(1));
        assert!(!a.take(1));
        a.give(4);
        assert_eq!(b.free(), 4);
        assert_eq!(a.depth(), 4);
        if !cfg!(debug_assertions) {
            a.give(u32::MAX);
            assert_eq!(a.free(), 4, "never above depth, never wraps");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cqe::owner_bit;
    use crate::prm::{CqeOpcode, Syndrome, WqeOpcode};

    /// A CQ in plain memory that the test plays the device for.
    struct FakeCq {
        buf: Vec<u8>,
        dbrec: Box<[u32; 2]>,
        cqe_cnt: u32,
        cqe_size: u32,
        pi: u32,
    }

    impl FakeCq {
        fn new(cqe_cnt: u32, cqe_size: u32) -> Self {
            let mut buf = vec![0u8; (cqe_cnt * cqe_size) as usize];
            for s in buf.chunks_exact_mut(cqe_size as usize) {
                s[cqe_size as usize - 1] = 0xf0;
            }
            FakeCq {
                buf,
                dbrec: Box::new([0; 2]),
                cqe_cnt,
                cqe_size,
                pi: 0,
            }
        }

        fn dv(&mut self) -> mlx5dv_cq {
            mlx5dv_cq {
                buf: self.buf.as_mut_ptr().cast(),
                dbrec: self.dbrec.as_mut_ptr(),
                cqe_cnt: self.cqe_cnt,
                cqe_size: self.cqe_size,
                cq_uar: core::ptr::null_mut(),
                cqn: 7,
                comp_mask: 0,
            }
        }

        /// Produces the next CQE, naming WQE `counter`.
        fn push(&mut self, counter: u16) {
            let c = Cqe {
                opcode: CqeOpcode::REQ,
                wqe_opcode: WqeOpcode::RDMA_WRITE,
                qpn: 0x1234,
                wqe_counter: counter,
                byte_cnt: counter as u32 * 3,
                imm: 0,
                solicited: false,
                format: 0,
                owner: false,
                syndrome: Syndrome(0),
                vendor_syndrome: 0,
            };
            let b = c.encode(owner_bit(self.pi, self.cqe_cnt));
            let end = ((self.pi & (self.cqe_cnt - 1)) + 1) as usize * self.cqe_size as usize;
            self.buf[end - CQE64..end].copy_from_slice(&b);
            self.pi += 1;
        }
    }

    /// A send queue over plain memory: the doorbell record and BlueFlame
    /// register get what `ring_doorbell` writes (8-byte doorbell for a batch,
    /// the whole WQE for one), and the trace walk over a batch of WQEs of
    /// different sizes ends at `pi`.
    #[test]
    fn doorbell_writes_dbrec_and_bf_and_traces_the_batch() {
        use crate::dv::{mlx5dv_bf, mlx5dv_qp, mlx5dv_wq};
        use crate::wqe::{Payload, RemoteSeg};
        let mut sq = vec![0u64; 8 * WQEBB / 8];
        let mut dbrec = [0u32; 2];
        let mut bf = vec![0u64; 2 * 256 / 8];
        let mut d = mlx5dv_qp::zeroed();
        d.dbrec = dbrec.as_mut_ptr();
        d.sq = mlx5dv_wq {
            buf: sq.as_mut_ptr().cast(),
            wqe_cnt: 8,
            stride: WQEBB as u32,
        };
        d.bf = mlx5dv_bf {
            reg: bf.as_mut_ptr().cast(),
            size: 256,
        };
        // SAFETY: the buffers outlive `q`, and only this test touches them.
        let mut q = unsafe { SendQueue::new(&d, 0x42, 256, 0) }.unwrap();
        let bytes = [7u8; 100];
        let w = |n: usize| SendWqe {
            opcode: WqeOpcode::RDMA_WRITE,
            flags: CtrlFlags::CQ_UPDATE,
            imm: 0,
            remote: Some(RemoteSeg { addr: 8, rkey: 9 }),
            atomic: None,
            payload: Payload::Inline(&bytes[..n]),
        };
        // One WQE of 2 WQEBBs: BlueFlame copies both.
        q.post(&w(64), 1).unwrap();
        q.ring_doorbell();
        assert_eq!(u32::from_be(dbrec[1]), 2);
        assert_eq!(&bf[..16], &sq[..16]);
        // A batch (1, 3 and 2 WQEBBs), traced: 8-byte doorbell of the last
        // WQE's ctrl segment, to the other half of the register.
        q.post(&w(8), 2).unwrap();
        q.post(&w(100), 3).unwrap();
        q.post(&w(64), 4).unwrap();
        let out = crate::trace::capture::run(|| q.ring_doorbell());
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "one line per WQE of the batch: {out}");
        for (l, (wr_id, pi, ds, wqebbs, len)) in
            lines
                .iter()
                .zip([(2, 2, 3, 1, 8), (3, 3, 9, 3, 100), (4, 6, 7, 2, 64)])
        {
            let want = format!(
                "rdma-direct trace: QP 0x42 post wr_id {wr_id} pi {pi} SQ offset {}: RDMA_WRITE ds {ds} wqebbs {wqebbs} flags 0x08 imm 0x0 raddr 0x8 rkey 0x9 atomic - payload Inline {{ off: {}, len: {len} }}",
                pi * 64,
                pi * 64 + 36
            );
            assert_eq!(*l, want);
        }
        assert_eq!(u32::from_be(dbrec[1]), 8);
        assert_eq!(bf[32], sq[6 * 8]);
        assert_eq!(q.pi(), 8);
    }

    #[test]
    fn one_compare_ownership_equals_sw_owned() {
        for op_own in 0..=255u8 {
            for (ci, owner) in [(3u32, 0u8), (8 + 3, 1)] {
                assert_eq!(
                    owned(op_own, owner),
                    sw_owned(op_own, ci, 8),
                    "{op_own:#04x}"
                );
            }
        }
    }

    /// Polling ahead: CQEs that arrive in bursts of every size, across
    /// several passes of the ring, with 64- and 128-byte slots, come out once
    /// each and in order; an empty slot ends a burst.
    #[test]
    fn poll_takes_every_cqe_once_in_order_whatever_the_bursts() {
        for cqe_size in [64, 128] {
            let mut f = FakeCq::new(32, cqe_size);
            // SAFETY: `f` outlives `cq`, and only this test touches the CQ.
            let mut cq = unsafe { CompletionQueue::new(&f.dv()) }.unwrap();
            let mut next = 0u16;
            let mut produced = 0u16;
            for burst in (0..40u16).map(|k| k % 20) {
                for _ in 0..burst {
                    // Like the device, never overrun what was consumed.
                    if f.pi - cq.ci() == f.cqe_cnt {
                        break;
                    }
                    f.push(produced);
                    produced += 1;
                }
                while let Some(c) = cq.poll_one() {
                    assert_eq!((c.wqe_counter, c.byte_cnt), (next, next as u32 * 3));
                    assert_eq!(c.opcode, CqeOpcode::REQ);
                    next += 1;
                }
                assert_eq!(next, produced, "slot size {cqe_size}");
                cq.update_ci();
            }
            assert!(produced > 3 * 32, "several passes of the ring");
        }
    }
}
