//! The device-side objects the front end's handles share: an open device,
//! a protection domain, and the CQ behind a shared CQ. No methods here: the
//! handles (`Context`, `Pd`, `Qp`, `SharedCq`) act on them.

use crate::backend::direct;
#[cfg(feature = "verbs")]
use crate::backend::ibv;
#[cfg(feature = "verbs")]
use crate::ib::device::DataPath;
use crate::pd::reclaim::DeregQueue;
use mlx5_dv::sim;
use std::sync::Arc;

pub(crate) enum CtxKind {
    Sim(sim::Device),
    /// An ibverbs device, and the data path its QPs run (direct on mlx5).
    #[cfg(feature = "verbs")]
    Verbs(Arc<ibv::Ctx>, DataPath),
}

pub(crate) enum PdKind {
    /// The device and the PD number.
    Sim(sim::Device, u32),
    /// An ibverbs PD, and the data path its QPs run (direct on mlx5).
    #[cfg(feature = "verbs")]
    Verbs(Arc<ibv::Pd>, DataPath),
}

pub(crate) struct PdInner {
    /// Dropped MRs waiting for outstanding WRs, and the QPs' progress. (An
    /// MR's registration keeps what it needs of the PD alive itself.)
    pub(crate) dereg: Arc<DeregQueue>,
    /// This PD's number, unique in the process ([`PdInner::next_id`]): MRs
    /// and SGEs carry it, and a post refuses an SGE of another PD.
    pub(crate) id: u32,
    /// Memory registrations made through this PD (the pool's tests count them).
    pub(crate) registrations: std::sync::atomic::AtomicU64,
    pub(crate) kind: PdKind,
}

/// The CQ object behind a [`SharedCq`].
pub(crate) enum SharedKind {
    /// Polled by our ring driver (sim, ConnectX).
    Direct(direct::DirectCq),
    /// Polled with `ibv_poll_cq`.
    #[cfg(feature = "verbs")]
    Verbs(Arc<ibv::VerbsCq>),
}

impl PdInner {
    /// A fresh PD number (never 0, which the backends' MRs carry until
    /// their PD sets it).
    pub(crate) fn next_id() -> u32 {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
        loop {
            // Never 0, never `BYTES_PD`, below 2^31 (an SGE's tag bit,
            // `NOT_ONE_SEG`): after 2^31 PDs the count wraps.
            let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                & !crate::ib::wr::NOT_ONE_SEG;
            if id != 0 && id != crate::ib::wr::BYTES_PD {
                return id;
            }
        }
    }
}
