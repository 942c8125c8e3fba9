//! The receive queue: posting receive WQEs, their doorbell, retiring them by
//! a responder CQE's `wqe_counter`, RESET.

use super::{pow2, DescError};
use crate::doorbell::full_wqe_index;
use crate::dv::mlx5dv_qp;
use crate::mmio;
use crate::ring::RingBuf;
use crate::wqe::WqeError;
use core::ptr::NonNull;

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
