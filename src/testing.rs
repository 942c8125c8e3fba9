//! Test hooks (feature `test-hooks`, off by default): what tests and the
//! conformance suite need and programs must not use. They bypass the
//! checks that keep a correct program away from some device errors
//! (malformed WQEs, CQ overrun), so a test can show that the device reports
//! them as the hardware does, and they read the send queue's ring bytes, so
//! a test can show that a refused post wrote nothing.
//!
//! As vm-virtio gates its mocks behind `test-utils`: a build of the library
//! without the feature has none of this. The crate's own tests turn it on
//! through a dev-dependency on the crate itself:
//!
//! ```toml
//! [dev-dependencies]
//! rdma-direct = { path = ".", features = ["test-hooks"] }
//! ```
//!
//! ```
//! use rdma_direct::testing::QpHooks;
//! # use rdma_direct::{Context, QpConfig};
//! let ctx = Context::open("sim")?;
//! let pd = ctx.alloc_pd()?;
//! let (mut a, _b) = pd.create_connected_pair(&QpConfig::default())?;
//! let ring = a.sq_snapshot().expect("the direct path");
//! assert!(a.sim_hook().is_some());
//! # drop(ring);
//! # Ok::<(), rdma_direct::Error>(())
//! ```

use crate::backend::direct::DirectQp;
use crate::device::handles::PdKind;
use crate::ib::error::{Error, Result};
use crate::ib::mr::Mr;
use crate::ib::wr::SendWr;
use crate::pd::Pd;
use crate::qp::{Qp, QpKind};

/// The sim's ODP counters ([`PdHooks::sim_odp_stats`]).
pub use mlx5_dv::sim::OdpStats;

/// The direct path's step from one polled CQE to a [`Completion`]
/// (`backend/direct/poll.rs`), for `mlx5-dv/provider-oracle`, which compares
/// it with libmlx5's `mlx5_poll_cq_v1` on the same CQEs.
///
/// [`Completion`]: crate::Completion
pub use crate::backend::direct::poll::completion_of as direct_completion_of;

/// Test hooks on a [`Qp`].
pub trait QpHooks {
    /// The send queue's ring bytes followed by its 4-byte doorbell record
    /// (big-endian PI), on the direct path. `None` on verbs, whose provider
    /// owns the ring, and on a QP split into halves, whose send half writes
    /// it. Allocates.
    fn sq_snapshot(&self) -> Option<Vec<u8>>;

    /// The sim's hooks on this QP: `None` on other devices, on a QP of a
    /// shared CQ and on a split QP.
    fn sim_hook(&mut self) -> Option<SimHook<'_>>;

    /// The QP's posts stop taking CQ credits, so they can exceed its CQ's
    /// room and overrun it (what the device reports then:
    /// `AsyncEvent::CqError`). On the sim, as [`SimHook::ignore_cq_credits`];
    /// on a verbs device, a raw overflow of its own CQ. `false` where it
    /// does nothing: ConnectX, a QP of a shared CQ, a split QP.
    fn ignore_cq_credits(&mut self) -> bool;

    /// On the verbs backend, whether the QP posts through rdma-core's
    /// extended verbs (`ibv_wr_*`) and whether its CQ is polled through
    /// them (`ibv_start_poll`): `(false, false)` where the provider lacks
    /// them or `RDMA_DIRECT_VERBS_OLD_POST=1` forces the old calls. `None`
    /// on the direct path.
    fn verbs_extended(&self) -> Option<(bool, bool)>;
}

impl QpHooks for Qp {
    fn sq_snapshot(&self) -> Option<Vec<u8>> {
        if self.halves.is_some() {
            // Its send half may be writing the ring now.
            return None;
        }
        match &self.kind {
            QpKind::Direct(q) => Some(q.sq_snapshot()),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(_) => None,
        }
    }

    fn sim_hook(&mut self) -> Option<SimHook<'_>> {
        if self.shared_cq.is_some() || self.halves.is_some() {
            return None;
        }
        match &mut self.kind {
            QpKind::Direct(q) if q.is_sim() => Some(SimHook { q }),
            QpKind::Direct(_) => None,
            #[cfg(feature = "verbs")]
            QpKind::Verbs(_) => None,
        }
    }

    fn verbs_extended(&self) -> Option<(bool, bool)> {
        match &self.kind {
            QpKind::Direct(_) => None,
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => Some(q.extended()),
        }
    }

    fn ignore_cq_credits(&mut self) -> bool {
        if self.shared_cq.is_some() || self.halves.is_some() {
            return false;
        }
        match &mut self.kind {
            QpKind::Direct(q) if q.is_sim() => {
                q.ignore_credits();
                true
            }
            QpKind::Direct(_) => false,
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => {
                q.ignore_credits();
                true
            }
        }
    }
}

/// The sim's hooks on one QP ([`QpHooks::sim_hook`]).
pub struct SimHook<'q> {
    q: &'q mut DirectQp,
}

impl SimHook<'_> {
    /// Posts `wr` (checked and encoded as usual), lets `patch` rewrite its
    /// WQE bytes in the ring (all of its WQEBBs, 64 bytes each, starting at
    /// the ctrl segment), then rings the doorbell.
    ///
    /// # Errors
    /// As `Qp::post_send` for one WR.
    pub fn post_patched(&mut self, wr: &SendWr<'_>, patch: impl FnOnce(&mut [u8])) -> Result<()> {
        self.q.post_patched(wr, patch)
    }

    /// Whether the QP's own CQ holds `k` CQEs not yet polled: a look that
    /// consumes nothing (for measurements that must know a poll finds them).
    pub fn cqes_ready(&self, k: u32) -> bool {
        self.q.cqes_ready(k)
    }

    /// Stops taking CQ credits, so posts can exceed the CQ's room.
    pub fn ignore_cq_credits(&mut self) {
        self.q.ignore_credits();
    }

    /// CQE bytes the sim has written into the QP's own CQ: 64 per CQE
    /// written whole; with CQE compression (`QpConfig::cqe_compression`)
    /// 64 per session title and per mini-CQE array, not per completion.
    pub fn cqe_bytes_written(&self) -> u64 {
        self.q.cqe_bytes_written().unwrap_or(0)
    }

    /// Whether the QP's CQ overran, and the CQ error events it raised.
    pub fn cq_overrun(&self) -> (bool, u64) {
        self.q.cq_overrun()
    }

    /// CQEs the sim wrote for this QP with data in them (scatter to CQE,
    /// [`InlineRecv`](crate::InlineRecv)): received SENDs, READ responses
    /// and atomic results that came in the CQE rather than by DMA.
    pub fn scatter_cqes(&self) -> u64 {
        self.q.scatter_cqes()
    }

    /// With `on`, the device writes this QP's receive CQEs in swapped
    /// pairs (the receives into WQEs 0, 1, 2, 3 complete as 1, 0, 3, 2),
    /// as a device that completes receives out of order; the first of a
    /// pair waits for the second, or for `false`.
    pub fn swap_recv_completions(&mut self, on: bool) {
        self.q.swap_recv_completions(on);
    }
}

/// Test hooks on a [`Pd`]: the sim's ODP model (`mlx5_dv::sim`'s
/// `Device::odp_stats`, `Device::evict_odp`).
pub trait PdHooks {
    /// The sim device's ODP counters: page faults its MRs took, SRQ
    /// receives it failed with the ODP page-fault CQE, pages prefetched.
    /// `None` on other devices.
    fn sim_odp_stats(&self) -> Option<OdpStats>;

    /// Makes every page of the sim ODP MR `mr` (of this PD) not resident,
    /// as the kernel does when it takes pages back: the next touch faults.
    /// Returns how many pages were resident. `None` on other devices.
    ///
    /// Errors: `mr` of another PD ([`Error::ForeignPd`]); the sim's
    /// ([`Error::Sim`]: not an ODP MR).
    fn sim_evict_odp(&self, mr: &Mr) -> Option<Result<u64>>;
}

impl PdHooks for Pd {
    fn sim_odp_stats(&self) -> Option<OdpStats> {
        match &self.inner.kind {
            PdKind::Sim(dev, _) => Some(dev.odp_stats()),
            #[cfg(feature = "verbs")]
            PdKind::Verbs(..) => None,
        }
    }

    fn sim_evict_odp(&self, mr: &Mr) -> Option<Result<u64>> {
        match &self.inner.kind {
            PdKind::Sim(..) if mr.pd() != self.inner.id => Some(Err(Error::ForeignPd {
                object: crate::PdObject::Sge,
            })),
            PdKind::Sim(dev, _) => Some(dev.evict_odp(mr.lkey().0).map_err(Error::from)),
            #[cfg(feature = "verbs")]
            PdKind::Verbs(..) => None,
        }
    }
}
