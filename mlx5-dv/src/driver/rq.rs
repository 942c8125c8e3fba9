//! The receive queue: posting receive WQEs, their doorbell, retiring them by
//! a responder CQE's `wqe_counter`, RESET.

use super::table::Table;
use super::{pow2, DescError, SrqSlots};
use crate::doorbell::full_wqe_index;
use crate::dv::mlx5dv_qp;
use crate::mmio;
use crate::ring::RingBuf;
use crate::wqe::WqeError;
use core::ptr::NonNull;
use std::sync::Arc;

/// Receive queue of one QP (`mlx5dv_qp.rq`, doorbell record word 0).
pub struct ReceiveQueue {
    /// `None` for a QP on an SRQ ([`Self::on_srq`]): it has no RQ ring.
    pub(super) buf: Option<RingBuf<'static>>,
    /// The SRQ its receives come from: completions go to its slots.
    pub(super) srq: Option<Arc<SrqSlots>>,
    pub(super) wqe_cnt: u32,
    pub(super) stride: u32,
    dbrec: *mut u32,
    /// Next receive WQE index to post, and the oldest not yet completed.
    pub(super) head: u32,
    pub(super) tail: u32,
    pending: bool,
    wr_id: Table<u64>,
    /// Per slot: completed ahead of `tail` (out of order), so its WQE is
    /// no longer the device's but its room is not back yet: room comes
    /// back only as the completed prefix from `tail` grows.
    pub(super) done: Table<bool>,
    /// Slots of `done` set: while 0, every completion names `tail` (the
    /// in-order case [`Self::complete_in_order`] takes).
    early: u32,
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
        for i in 0..self.done.len() {
            self.done.set(i, false);
        }
        self.early = 0;
        if self.dbrec.is_null() {
            return;
        }
        // SAFETY: `dbrec` is the QP's live doorbell record (`new`'s contract).
        unsafe { mmio::write_dbrec(self.dbrec.add(crate::doorbell::QP_DBREC_RQ), 0) };
    }
    /// A second copy of this queue, for a QP split into a send half and a
    /// receive half: the same ring, doorbell record and wr_id table, its
    /// own indices. One copy posts (the receive half's), the other only
    /// completes (the CQ owner's, between [`Self::open_window`] and
    /// [`Self::close_window`]); the poster learns the room from
    /// [`Self::consumed`], passed over an atomic (release, acquire).
    ///
    /// # Safety
    /// The copies keep to those roles, neither resets while both live, and
    /// the ring stays valid until both are dropped (`new`'s contract).
    pub unsafe fn split_copy(&self) -> ReceiveQueue {
        ReceiveQueue {
            // SAFETY: the same ring (the caller's contract).
            buf: self
                .buf
                .as_ref()
                .map(|b| unsafe { RingBuf::from_raw(NonNull::new_unchecked(b.as_ptr()), b.len()) }),
            srq: self.srq.clone(),
            wqe_cnt: self.wqe_cnt,
            stride: self.stride,
            dbrec: self.dbrec,
            head: self.head,
            tail: self.tail,
            pending: false,
            // SAFETY: the caller's contract orders the copies' accesses.
            wr_id: unsafe { self.wr_id.share() },
            // SAFETY: as above.
            done: unsafe { self.done.share() },
            early: self.early,
        }
    }

    /// The oldest receive not yet completed (WQE index), for the posting copy.
    #[inline(always)]
    pub fn consumed(&self) -> u32 {
        self.tail
    }

    /// Takes the completing copy's [`Self::consumed`]: the room a post sees.
    #[inline(always)]
    pub fn set_consumed(&mut self, tail: u32) {
        self.tail = tail;
    }

    /// On the copy that only completes: any WQE index of the ring's width
    /// from `tail` on may be named by a CQE (its wr_id was written before
    /// its doorbell rang).
    #[inline]
    pub fn open_window(&mut self) {
        self.head = self.tail.wrapping_add(self.wqe_cnt);
    }

    /// On the copy that only completes: nothing outstanding.
    #[inline]
    pub fn close_window(&mut self) {
        self.head = self.tail;
    }

    /// The receive side of a QP whose receives come from an SRQ: it has no
    /// ring and takes no post ([`Self::free`] is 0); a responder CQE's
    /// `wqe_counter` is an index into the SRQ, completed through `slots`
    /// (in any order; [`Self::outstanding`] is always 0: the SRQ's WQEs
    /// are not the QP's).
    pub fn on_srq(slots: Arc<SrqSlots>) -> Self {
        ReceiveQueue {
            buf: None,
            srq: Some(slots),
            wqe_cnt: 0,
            stride: 16,
            dbrec: core::ptr::null_mut(),
            head: 0,
            tail: 0,
            pending: false,
            wr_id: Table::new(0, 0),
            done: Table::new(0, false),
            early: 0,
        }
    }

    /// The receive side of a QP that receives nothing (a DCI: no RQ and
    /// no SRQ): no ring, no doorbell record; every post is refused
    /// ([`WqeError::QueueFull`], nothing written) and [`Self::free`] is 0.
    pub fn none() -> Self {
        ReceiveQueue {
            buf: None,
            srq: None,
            wqe_cnt: 0,
            stride: 16,
            dbrec: core::ptr::null_mut(),
            head: 0,
            tail: 0,
            pending: false,
            wr_id: Table::new(0, 0),
            done: Table::new(0, false),
            early: 0,
        }
    }

    /// A CQE of this QP thrown away unpolled (a RESET's or a destroy's
    /// drain): on an SRQ, a receive's WQE goes back to the SRQ (rdma-core's
    /// `mlx5_cq_clean` frees it too), an ODP fault's to be reposted
    /// ([`Self::fault_on_srq`]); anything else needs nothing here (the
    /// RQ's own indices are reset).
    pub fn discarded(&mut self, cqe: &crate::cqe::Cqe) {
        use crate::prm::CqeOpcode;
        if let Some(s) = &self.srq {
            if cqe.is_odp_fault() {
                // Its buffer was never written: reposted, not lost.
                s.fault(cqe.wqe_counter);
            } else if !matches!(cqe.opcode, CqeOpcode::REQ | CqeOpcode::REQ_ERR) {
                s.complete(cqe.wqe_counter);
            }
        }
    }

    /// A responder CQE of this QP is an SRQ WQE's ODP page fault
    /// ([`crate::cqe::Cqe::is_odp_fault`]): gives the WQE back to the SRQ
    /// for reposting ([`SrqSlots::fault`]) and reports nothing. `false` for
    /// a QP of its own RQ (ConnectX writes the fault CQE for SRQ WQEs only)
    /// or an index the SRQ does not hold. For the poll's error path.
    #[cold]
    pub fn fault_on_srq(&self, wqe_counter: u16) -> bool {
        self.srq.as_ref().is_some_and(|s| s.fault(wqe_counter))
    }

    /// Whether the QP's receives come from an SRQ.
    pub fn is_srq(&self) -> bool {
        self.srq.is_some()
    }

    /// A receive queue over `qp`'s RQ.
    ///
    /// # Safety
    /// As [`SendQueue::new`](super::SendQueue::new), for the RQ and doorbell record word 0.
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
            buf: Some(unsafe { RingBuf::from_raw(buf, len) }),
            srq: None,
            wqe_cnt,
            stride,
            dbrec: qp.dbrec,
            head: 0,
            tail: 0,
            pending: false,
            wr_id: Table::new(wqe_cnt as usize, 0),
            done: Table::new(wqe_cnt as usize, false),
            early: 0,
        })
    }

    /// Test hook (feature `test-hooks`): moves an empty queue's producer
    /// and consumer counters to `head`, as if `head` receives had been
    /// posted and completed since RESET (the doorbell record's 16-bit
    /// counter wraps at 2^16). Nothing is written. Returns `false`,
    /// changing nothing, while a receive is outstanding.
    #[cfg(feature = "test-hooks")]
    pub fn start_at(&mut self, head: u32) -> bool {
        if self.outstanding() != 0 {
            return false;
        }
        self.head = head;
        self.tail = head;
        true
    }

    /// Receive WQEs that may still be posted.
    pub fn free(&self) -> u32 {
        self.wqe_cnt - self.outstanding()
    }

    /// Receive WQEs posted and not yet retired: from the oldest not yet
    /// completed to the last posted (those completed out of order after
    /// it included: their room is not back yet).
    pub fn outstanding(&self) -> u32 {
        self.head.wrapping_sub(self.tail)
    }

    /// Most data segments per receive WQE (`stride / 16`; 0 on an SRQ).
    pub fn max_sge(&self) -> u32 {
        if self.buf.is_none() {
            return 0;
        }
        self.stride / 16
    }

    /// Writes one receive WQE without ringing the doorbell. On error nothing is written.
    #[inline]
    pub fn post(&mut self, sges: &[crate::wqe::DataSeg], wr_id: u64) -> Result<(), WqeError> {
        let Some(buf) = self
            .buf
            .as_mut()
            .filter(|_| self.head.wrapping_sub(self.tail) < self.wqe_cnt)
        else {
            return Err(WqeError::QueueFull { need: 1, free: 0 });
        };
        crate::wqe::write_recv_wqe(buf, self.wqe_cnt, self.stride, self.head, sges)?;
        self.wr_id
            .set((self.head & (self.wqe_cnt - 1)) as usize, wr_id);
        if crate::trace::enabled() {
            let off = (self.head & (self.wqe_cnt - 1)) as usize * self.stride as usize;
            crate::trace::recv_posted(self.head, off, wr_id, sges.len());
        }
        self.head = self.head.wrapping_add(1);
        self.pending = true;
        Ok(())
    }

    /// Posts one receive of one data segment (`seg`: 1 to 2^31 - 1 bytes,
    /// the caller's check) and rings the doorbell: [`Self::post`] and
    /// [`Self::ring_doorbell`] for the common receive, with nothing
    /// staged. The WQE at `head`: `seg` at byte 0, and when the stride
    /// holds more, the terminating segment (lkey `MLX5_INVALID_LKEY`) at
    /// byte 16, as rdma-core's `mlx5_post_recv` writes them. `false`,
    /// writing nothing, when the queue is full (or has no ring: on an SRQ).
    #[inline(always)]
    pub fn post_one_seg(&mut self, seg: &crate::wqe::Seg, wr_id: u64) -> bool {
        let head = self.head;
        let Some(buf) = self
            .buf
            .as_mut()
            .filter(|_| head.wrapping_sub(self.tail) < self.wqe_cnt)
        else {
            return false;
        };
        let slot = head & (self.wqe_cnt - 1);
        let off = slot as usize * self.stride as usize;
        buf.write_seg(off, &seg.to_bytes());
        if self.stride > crate::prm::DS as u32 {
            buf.write_seg(off + crate::prm::DS, &crate::wqe::RECV_END.to_bytes());
        }
        self.wr_id.set(slot as usize, wr_id);
        if crate::trace::enabled() {
            crate::trace::recv_posted(head, off, wr_id, 1);
        }
        self.head = head.wrapping_add(1);
        // (A queue with a ring has a doorbell record: `new`.)
        self.write_dbrec();
        true
    }

    /// Publishes what was posted: barrier, then `dbrec[0] = be32(head & 0xffff)`.
    #[inline]
    pub fn ring_doorbell(&mut self) {
        if !self.pending || self.dbrec.is_null() {
            return;
        }
        self.write_dbrec();
    }

    /// [`Self::ring_doorbell`]'s barrier and store, the record not null.
    #[inline(always)]
    fn write_dbrec(&mut self) {
        mmio::to_device_barrier();
        // SAFETY: `dbrec` is the QP's doorbell record (constructor
        // contract; the callers checked it is not null).
        unsafe {
            mmio::write_dbrec(
                self.dbrec.add(crate::doorbell::QP_DBREC_RQ),
                crate::doorbell::rq_dbrec(self.head),
            )
        };
        self.pending = false;
    }

    /// [`Self::complete`] in the common case, in a few instructions: the
    /// QP's own RQ, nothing completed out of order, and `wqe_counter` names
    /// the oldest outstanding receive (libmlx5's `wq->tail`). Returns its
    /// wr_id; `None`, changing nothing, in every other case (an SRQ's
    /// receive, a stale counter, one out of order): [`Self::complete`]
    /// then says what it is.
    #[inline(always)]
    pub fn complete_in_order(&mut self, wqe_counter: u16) -> Option<u64> {
        let tail = self.tail;
        if wqe_counter != tail as u16 || self.early != 0 || self.head == tail {
            return None;
        }
        // (An SRQ's queue has no WQEs of its own: head == tail, always.)
        // SAFETY: `wr_id` has `wqe_cnt` entries (made so in `new`, shared
        // unchanged by `split_copy`, never resized), and a queue with a
        // receive outstanding (head != tail) is one with a ring, whose
        // `wqe_cnt` is a power of two: the masked index is below it.
        let wr_id = unsafe {
            self.wr_id
                .ptr()
                .add((tail & (self.wqe_cnt - 1)) as usize)
                .read()
        };
        self.tail = tail.wrapping_add(1);
        Some(wr_id)
    }

    /// Completes the receive WQE a responder CQE names; returns its wr_id, or
    /// `None` for a counter that names no outstanding receive, or one
    /// already completed. Completions may come out of order (an SRQ's do,
    /// and a test hook of the sim makes an RQ's do): the oldest outstanding
    /// WQE's completion retires it and every WQE after it that already
    /// completed, so room comes back only as the completed prefix grows.
    /// Completions for WQEs 1, 0, 3, 2 give their wr_ids in that order,
    /// with no room back until WQE 0's; a WQE the device may still own is
    /// never posted again before that.
    ///
    /// On an SRQ this is [`SrqSlots::complete`], in the caller's line; the
    /// QP's own RQ's bookkeeping is out of it.
    #[inline(always)]
    pub fn complete(&mut self, wqe_counter: u16) -> Option<u64> {
        if let Some(s) = &self.srq {
            return s.complete(wqe_counter);
        }
        self.complete_own(wqe_counter)
    }

    /// [`Self::complete`] on a QP on an SRQ ([`SrqSlots::complete`]);
    /// `None` for a QP of its own RQ, as for a WQE the SRQ does not hold.
    #[inline(always)]
    pub fn complete_on_srq(&self, wqe_counter: u16) -> Option<u64> {
        self.srq.as_ref()?.complete(wqe_counter)
    }

    /// [`Self::complete_on_srq`], handing the wr_id to `f` before the WQE
    /// is queued for relinking ([`SrqSlots::complete_with`]); `false`,
    /// without calling `f`, where that returns `None`.
    #[inline(always)]
    pub fn complete_on_srq_with(&self, wqe_counter: u16, f: impl FnOnce(u64)) -> bool {
        match &self.srq {
            Some(s) => s.complete_with(wqe_counter, f),
            None => false,
        }
    }

    /// [`Self::complete`] on the QP's own RQ.
    #[inline(never)]
    fn complete_own(&mut self, wqe_counter: u16) -> Option<u64> {
        let idx = full_wqe_index(wqe_counter, self.tail, self.head)?;
        let mask = self.wqe_cnt - 1;
        let slot = (idx & mask) as usize;
        if self.done.get(slot) {
            return None;
        }
        let wr_id = self.wr_id.get(slot);
        if idx != self.tail {
            self.done.set(slot, true);
            self.early += 1;
            return Some(wr_id);
        }
        let mut tail = idx.wrapping_add(1);
        while tail != self.head && self.done.get((tail & mask) as usize) {
            self.done.set((tail & mask) as usize, false);
            self.early -= 1;
            tail = tail.wrapping_add(1);
        }
        self.tail = tail;
        Some(wr_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dv::{mlx5dv_qp, mlx5dv_wq};
    use crate::wqe::DataSeg;

    fn rq(ring: &mut [u64], dbrec: &mut [u32; 2], wqe_cnt: u32) -> ReceiveQueue {
        let mut d = mlx5dv_qp::zeroed();
        d.dbrec = dbrec.as_mut_ptr();
        d.rq = mlx5dv_wq {
            buf: ring.as_mut_ptr().cast(),
            wqe_cnt,
            stride: 16,
        };
        // SAFETY: `ring` holds `wqe_cnt * 16` bytes and `dbrec` two words,
        // both outliving the queue, touched by nothing else meanwhile.
        unsafe { ReceiveQueue::new(&d) }.expect("receive queue")
    }

    fn post(q: &mut ReceiveQueue, wr_id: u64) -> Result<(), WqeError> {
        let sge = [DataSeg {
            addr: 0x1000,
            len: 64,
            lkey: 1,
        }];
        q.post(&sge, wr_id)
    }

    /// The in-place post writes the ring bytes and doorbell record that
    /// `post` + `ring_doorbell` write (with the terminating segment when
    /// the stride holds more), and refuses a full queue writing nothing;
    /// `complete_in_order` takes in-order completions only, and none
    /// while one completed out of order is pending.
    #[test]
    fn in_place_post_and_in_order_completion() {
        for stride in [16u32, 32] {
            let words = (4 * stride / 8) as usize;
            let (mut r1, mut d1) = (vec![0u64; words], [0u32; 2]);
            let (mut r2, mut d2) = (vec![0u64; words], [0u32; 2]);
            let mk = |ring: &mut Vec<u64>, db: &mut [u32; 2]| {
                let mut d = mlx5dv_qp::zeroed();
                d.dbrec = db.as_mut_ptr();
                d.rq = mlx5dv_wq {
                    buf: ring.as_mut_ptr().cast(),
                    wqe_cnt: 4,
                    stride,
                };
                // SAFETY: the ring holds 4 WQEs of `stride` bytes and the
                // record two words, both outliving the queue.
                unsafe { ReceiveQueue::new(&d) }.expect("receive queue")
            };
            let (mut a, mut b) = (mk(&mut r1, &mut d1), mk(&mut r2, &mut d2));
            let s = crate::wqe::Seg::data(0x1000, 64, 1);
            for w in 0..4u64 {
                post(&mut a, 100 + w).unwrap();
                a.ring_doorbell();
                assert!(b.post_one_seg(&s, 100 + w));
            }
            drop((a, b));
            assert_eq!((&r1, d1), (&r2, d2), "stride {stride}");
            let mut b = mk(&mut r2, &mut d2);
            for w in 0..4u64 {
                assert!(b.post_one_seg(&s, 100 + w));
            }
            assert!(!b.post_one_seg(&s, 9), "full");
            assert_eq!(b.complete_in_order(1), None, "out of order");
            assert_eq!(b.complete(1), Some(101));
            assert_eq!(
                b.complete_in_order(0),
                None,
                "one completed early is pending"
            );
            assert_eq!(b.complete(0), Some(100));
            assert_eq!(b.complete_in_order(2), Some(102));
            assert_eq!(b.complete_in_order(2), None, "completed already");
            assert_eq!(b.complete_in_order(3), Some(103));
            assert_eq!(b.outstanding(), 0);
            assert_eq!(b.complete_in_order(4), None, "nothing outstanding");
        }
    }

    /// Issue 15's rule: completions for WQEs 1, 0, 3, 2 (wr_ids 100..103 at
    /// indices 0..3) report 101, 100, 103, 102, and no room comes back
    /// until WQE 0 completes; a second completion of a WQE is refused.
    #[test]
    fn out_of_order_completions_give_room_back_as_the_prefix_grows() {
        let (mut ring, mut db) = (vec![0u64; 8 * 2], [0u32; 2]);
        let mut q = rq(&mut ring, &mut db, 8);
        for w in 100..104 {
            post(&mut q, w).unwrap();
        }
        assert_eq!(q.outstanding(), 4);
        assert_eq!(q.complete(1), Some(101));
        assert_eq!(q.outstanding(), 4, "WQE 0 is still the device's");
        assert_eq!(q.complete(1), None, "completed already");
        assert_eq!(q.complete(0), Some(100));
        assert_eq!(q.outstanding(), 2, "WQEs 0 and 1 retired");
        assert_eq!(q.complete(3), Some(103));
        assert_eq!(q.outstanding(), 2);
        assert_eq!(q.complete(2), Some(102));
        assert_eq!(q.outstanding(), 0);
        assert_eq!(q.complete(2), None, "nothing outstanding");
    }

    /// A full queue with one hole at its tail takes no post, however many
    /// WQEs after it completed; in order, every completion gives its room.
    #[test]
    fn a_wqe_the_device_may_own_is_not_posted_again() {
        let (mut ring, mut db) = (vec![0u64; 4 * 2], [0u32; 2]);
        let mut q = rq(&mut ring, &mut db, 4);
        for round in 0..3u64 {
            for i in 0..4 {
                post(&mut q, round * 10 + i).unwrap();
            }
            assert!(matches!(post(&mut q, 99), Err(WqeError::QueueFull { .. })));
            let base = (round * 4) as u16;
            for i in 1..4 {
                assert_eq!(q.complete(base + i), Some(round * 10 + i as u64));
                assert!(
                    matches!(post(&mut q, 99), Err(WqeError::QueueFull { .. })),
                    "the oldest WQE is still the device's"
                );
            }
            assert_eq!(q.complete(base), Some(round * 10));
            assert_eq!(q.free(), 4);
        }
        // In order: each completion gives its room back at once.
        for i in 0..4 {
            post(&mut q, 200 + i).unwrap();
        }
        for i in 0..4u16 {
            assert_eq!(q.complete(12 + i), Some(200 + i as u64));
            assert_eq!(q.outstanding(), 3 - i as u32);
        }
    }

    /// RESET forgets WQEs completed out of order with the rest.
    #[test]
    fn reset_forgets_out_of_order_completions() {
        let (mut ring, mut db) = (vec![0u64; 4 * 2], [0u32; 2]);
        let mut q = rq(&mut ring, &mut db, 4);
        for w in 0..3 {
            post(&mut q, w).unwrap();
        }
        assert_eq!(q.complete(2), Some(2));
        q.reset();
        assert_eq!(q.outstanding(), 0);
        for w in 10..14 {
            post(&mut q, w).unwrap();
        }
        assert_eq!(q.complete(2), Some(12), "slot 2 is a new WQE's");
        assert_eq!(q.outstanding(), 4);
        assert_eq!(q.complete(0), Some(10));
        assert_eq!(q.outstanding(), 3);
    }
}
