//! The completion queue poller: ownership checks with look-ahead (one
//! barrier per run of CQEs), the consumer index, arming.

use super::{pow2, DescError};
use crate::cqe::{sw_owned, Cqe};
use crate::doorbell::{cq_arm_uar, cq_arm_word, cq_ci, CQ_DBREC_ARM, CQ_DBREC_CI, CQ_UAR_DOORBELL};
use crate::dv::mlx5dv_cq;
use crate::mmio;
use crate::prm::CQE64;

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
pub(super) fn owned(op_own: u8, owner: u8) -> bool {
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
    /// Whether the `k` CQEs from the consumer index on are software-owned
    /// (`k` at most `cqe_cnt`): a look that consumes nothing, for tests and
    /// measurements that must know a poll will find them.
    pub fn ready(&self, k: u32) -> bool {
        (0..k.min(self.cqe_cnt)).all(|j| {
            let i = self.ci.wrapping_add(j);
            // SAFETY: a masked slot index inside the CQ buffer (constructor
            // contract); byte 63 of the CQE proper is op_own.
            let op_own = unsafe {
                mmio::read_op_own(self.first.add((i & self.mask) as usize * self.stride + 63))
            };
            sw_owned(op_own, i, self.cqe_cnt)
        })
    }

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
}
