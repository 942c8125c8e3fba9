//! SRQs on the direct path: our driver over the SRQ ring
//! (`mlx5_dv::driver::SharedReceiveQueue`), on the sim or on a ConnectX
//! (`ibv_create_srq`, then `mlx5dv_init_obj(MLX5DV_OBJ_SRQ)`).

#[cfg(feature = "verbs")]
use super::ibv;
use crate::ib::error::{Error, Result};
use crate::ib::wr::RecvWr;
use mlx5_dv::driver::{Seg, SharedReceiveQueue, SrqSlots};
use mlx5_dv::sim;
use std::sync::Arc;

/// Who owns an SRQ's ring: kept by the SRQ's poster and by every QP on it,
/// so the ring outlives both.
pub(crate) enum DirectSrqDev {
    Sim(sim::Srq),
    #[cfg(feature = "verbs")]
    Mlx5(ibv::VerbsSrq),
}

/// The poster's side of a direct-path SRQ.
pub(crate) struct DirectSrq {
    // Field order: the driver drops before the device object (whose last
    // handle may be this one).
    ring: SharedReceiveQueue,
    dev: Arc<DirectSrqDev>,
    max_wr: u32,
    max_sge: u32,
}

impl DirectSrq {
    /// A sim SRQ in PD `pdn` for `max_wr` receives of `max_sge` SGEs.
    pub(crate) fn create_sim(
        dev: &sim::Device,
        pdn: u32,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<Self> {
        let s = dev.create_srq(pdn, max_wr, max_sge)?;
        // SAFETY: the description comes from `s`, which this struct keeps
        // (behind `dev`, dropped after the driver); nothing else on the
        // host posts to it.
        let ring = unsafe { SharedReceiveQueue::new(&s.dv(), max_sge) }?;
        Self::with(ring, DirectSrqDev::Sim(s), max_wr, max_sge)
    }

    /// A ConnectX SRQ: `ibv_create_srq`, described by `mlx5dv_init_obj`.
    #[cfg(feature = "verbs")]
    pub(crate) fn create_mlx5(pd: &Arc<ibv::Pd>, max_wr: u32, max_sge: u32) -> Result<Self> {
        let v = ibv::VerbsSrq::create(pd, max_wr, max_sge)?;
        let d = ibv::describe_mlx5_srq(&v)?;
        // SAFETY: the description comes from `mlx5dv_init_obj` on `v`,
        // kept behind `dev`; the SRQ is never handed to `ibv_post_srq_recv`.
        let ring = unsafe { SharedReceiveQueue::new(&d, max_sge) }?;
        Self::with(ring, DirectSrqDev::Mlx5(v), max_wr, max_sge)
    }

    fn with(
        ring: SharedReceiveQueue,
        dev: DirectSrqDev,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<Self> {
        if ring.count() <= max_wr || ring.max_sge() < max_sge {
            return Err(Error::Invalid(format!(
                "the device's SRQ ({} WQEs of {} SGEs) is smaller than asked ({max_wr} of {max_sge})",
                ring.count(),
                ring.max_sge()
            )));
        }
        Ok(DirectSrq {
            ring,
            dev: Arc::new(dev),
            max_wr,
            max_sge,
        })
    }

    /// What QPs on this SRQ keep: the device object.
    pub(crate) fn dev(&self) -> &Arc<DirectSrqDev> {
        &self.dev
    }

    /// The slot table completions go through.
    pub(crate) fn slots(&self) -> &Arc<SrqSlots> {
        self.ring.slots()
    }

    /// The SRQ number.
    pub(crate) fn srqn(&self) -> u32 {
        match &*self.dev {
            DirectSrqDev::Sim(s) => s.srqn(),
            #[cfg(feature = "verbs")]
            DirectSrqDev::Mlx5(v) => v.srqn(),
        }
    }

    /// Receives posted and not yet polled back, and those an ODP page
    /// fault gave back that wait to be posted again (the driver counts
    /// those as completed until their repost, which then adds them again:
    /// counting them here keeps a post from taking their room, so the SRQ
    /// never holds more than `max_wr`, the CQ credits its CQs reserved).
    pub(crate) fn outstanding(&mut self) -> u32 {
        self.ring.outstanding() + self.ring.faulted()
    }

    /// Posts one receive of one SGE of PD `pd` (1 to 2^31 - 1 bytes) in
    /// place and rings the doorbell (`SharedReceiveQueue::post_one_seg`);
    /// `false`, having changed nothing, for anything else, or when the
    /// room the last [`Self::post_recv`] left is used up:
    /// [`Self::post_recv`] then posts it or says why not.
    #[inline(always)]
    pub(crate) fn post_recv_one(&mut self, w: &RecvWr<'_>, pd: u32) -> bool {
        let [s] = w.sges else {
            return false;
        };
        // (`max_sge` is at least 1: `Srq::create`.)
        s.one_seg_on(pd)
            && self
                .ring
                .post_one_seg(&Seg::data(s.addr, s.len, s.lkey.0), s.lkey.0, w.wr_id)
    }

    /// Relinks the WQEs completed, and gives [`Self::post_recv_one`] the
    /// room there is now.
    pub(crate) fn refill(&mut self) {
        self.ring.refill(self.max_wr);
    }

    /// Posts `wrs` with one doorbell, all or nothing: each at most
    /// `max_sge` SGEs and 2^31 bytes, and at most `max_wr` outstanding
    /// after it ([`Error::RecvQueueFull`]: poll, then post again).
    pub(crate) fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        super::recv::check_recvs(wrs, self.max_sge, "the SRQ's max_sge")?;
        // Room twice over: at most `max_wr` outstanding, and as many WQEs on
        // the free list (which a completion still being queued by another
        // thread's poll has not reached yet).
        if self.outstanding() as usize + wrs.len() > self.max_wr as usize
            || (self.ring.free() as usize) < wrs.len()
        {
            return Err(Error::RecvQueueFull);
        }
        for w in wrs {
            let (segs, n) = super::recv::recv_segs(w);
            // Checked above (SGE count, length, room): cannot fail.
            self.ring.post(&segs[..n], w.wr_id)?;
        }
        self.ring.ring_doorbell();
        // What the in-place post may take before it comes here again.
        self.refill();
        Ok(())
    }

    /// Receives that took an ODP page fault and wait to be posted again
    /// (`SharedReceiveQueue::faulted`).
    pub(crate) fn faulted(&self) -> u32 {
        self.ring.faulted()
    }

    /// Posts every faulted receive again, same wr_id and SGEs, with one
    /// doorbell (`SharedReceiveQueue::repost_faulted`); how many.
    pub(crate) fn repost_faulted(&mut self) -> u32 {
        let n = self.ring.repost_faulted();
        self.refill();
        n
    }

    /// Arms the SRQ limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`; 0 disarms).
    pub(crate) fn set_limit(&mut self, limit: u32) -> Result<()> {
        match &*self.dev {
            DirectSrqDev::Sim(s) => Ok(s.set_limit(limit)?),
            #[cfg(feature = "verbs")]
            DirectSrqDev::Mlx5(v) => v.set_limit(limit),
        }
    }

    /// The sim SRQ behind this one, if it is one (its test hooks).
    pub(crate) fn sim(&self) -> Option<&sim::Srq> {
        match &*self.dev {
            DirectSrqDev::Sim(s) => Some(s),
            #[cfg(feature = "verbs")]
            DirectSrqDev::Mlx5(_) => None,
        }
    }
}
