//! The direct QP's test hooks (feature `test-hooks`), which
//! `rdma_direct::testing` offers: they bypass the checks that keep a
//! correct program away from some device errors (malformed WQEs, CQ
//! overrun), and read the send queue's ring.

use super::{with_wqe, DirectCq, DirectDev, DirectQp, PostMode};
use crate::ib::error::Result;
use crate::ib::wr::SendWr;

impl DirectQp {
    /// Test hook: see `SimHook::post_patched`.
    pub(crate) fn post_patched(
        &mut self,
        w: &SendWr<'_>,
        patch: impl FnOnce(&mut [u8]),
    ) -> Result<()> {
        self.take_credits(1)?;
        let undo = self.signal_if_credits_low();
        let start = self.sq.pi();
        if let Err(e) =
            with_wqe(w, |wqe| super::post::sq_post(&mut self.sq, wqe, w.wr_id)).and_then(|r| Ok(r?))
        {
            self.give_credits(1);
            if let Some(u) = undo {
                self.sq.undo_signal_next(u);
            }
            return Err(e);
        }
        let wqebbs = self.sq.pi().wrapping_sub(start) as usize;
        let off = (start & (self.sq.geometry().wqe_cnt - 1)) as usize * 64;
        let mut bytes = vec![0u8; wqebbs * 64];
        let sim_qp = match &*self.dev {
            DirectDev::Sim(qp) => qp,
            #[cfg(feature = "verbs")]
            DirectDev::Mlx5(_) => unreachable!("SimHook exists only on the sim"),
        };
        sim_qp.hook_read_sq(off, &mut bytes);
        patch(&mut bytes);
        sim_qp.hook_write_sq(off, &bytes);
        self.sq.ring_doorbell();
        self.posted_sends(1);
        Ok(())
    }

    /// Test hook: posts stop taking CQ credits, and the QP's own CQ detects
    /// overrun (`DirectCq::detect_overrun`), so that a test can reach one.
    pub(crate) fn ignore_credits(&mut self) {
        self.count_credits = false;
        if self.post_mode == PostMode::InPlaceCounted {
            self.set_post_mode(PostMode::InPlace);
        }
        if self.mode_after_fence == Some(PostMode::InPlaceCounted) {
            self.mode_after_fence = Some(PostMode::InPlace);
        }
        if let Some(cq) = &mut self.cq {
            cq.detect_overrun();
        }
    }

    /// Test hook: see `SimHook::swap_recv_completions`.
    pub(crate) fn swap_recv_completions(&mut self, on: bool) {
        match &*self.dev {
            DirectDev::Sim(q) => q.hook_swap_recv_completions(on),
            #[cfg(feature = "verbs")]
            DirectDev::Mlx5(_) => {}
        }
    }

    /// Whether the CQ overran, and its CQ error events.
    pub(crate) fn cq_overrun(&self) -> (bool, u64) {
        self.cq.as_ref().map_or((false, 0), DirectCq::overrun)
    }

    /// Whether the QP's own CQ holds `k` CQEs not yet polled (nothing consumed).
    pub(crate) fn cqes_ready(&self, k: u32) -> bool {
        self.cq.as_ref().is_some_and(|c| c.cq.ready(k))
    }

    /// CQE bytes the sim wrote into the QP's own CQ
    /// (`mlx5_dv::sim::Cq::cqe_bytes_written`); `None` without one.
    pub(crate) fn cqe_bytes_written(&self) -> Option<u64> {
        match &self.cq.as_ref()?.dev {
            super::cq::DirectCqDev::Sim(c) => Some(c.cqe_bytes_written()),
            #[cfg(feature = "verbs")]
            super::cq::DirectCqDev::Mlx5(_) => None,
        }
    }

    /// Whether the QP runs on the sim (its test hooks apply).
    pub(crate) fn is_sim(&self) -> bool {
        matches!(*self.dev, DirectDev::Sim(_))
    }

    /// SQ ring bytes and doorbell record (see `SendQueue::snapshot`).
    pub(crate) fn sq_snapshot(&self) -> Vec<u8> {
        self.sq.snapshot()
    }
}
