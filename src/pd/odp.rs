//! On-demand paging (ODP): memory registered without pinning it. An
//! [`Access::ON_DEMAND`] registration goes through the ordinary calls
//! ([`Pd::reg_mr`], [`Pd::alloc_mr`], ...); here are the implicit one of the
//! whole address space ([`Pd::reg_implicit_odp`]), the SGEs that name an
//! address through it ([`Sge::of_implicit_odp`]), and prefetch
//! ([`Pd::advise`]).

use super::Pd;
use crate::backend::direct;
#[cfg(feature = "verbs")]
use crate::backend::ibv;
use crate::device::handles::PdKind;
use crate::ib::error::{Error, RegRefusal, Result};
use crate::ib::mem::{Access, OdpAdvice};
use crate::ib::mr::{LiveGuard, Mr};
use crate::ib::wr::{Sge, BYTES_PD};

impl Pd {
    /// Registers the whole address space of the process as one ODP MR
    /// (implicit ODP: `ibv_reg_mr(pd, NULL, SIZE_MAX, access |
    /// IBV_ACCESS_ON_DEMAND)`, `ibv_reg_mr(3)`; on the sim
    /// `mlx5_dv::sim::Device::reg_implicit_odp`). Nothing is pinned or
    /// mapped now: the device faults each page in when a WR (or a peer,
    /// with REMOTE_* access) first names it. [`Access::ON_DEMAND`] is
    /// added to `access`.
    ///
    /// The [`Mr`] has [`Mr::addr`] 0 and [`Mr::len`] `usize::MAX`: an
    /// address `a` of the process is byte `a` of it. It has no CPU mapping
    /// of its own ([`Mr::is_implicit_odp`]; its byte accessors refuse with
    /// [`Error::NoCpuMapping`], [`Sge::new`] too): name memory through it
    /// with [`Sge::of_implicit_odp`], and a peer names `a` with
    /// [`Mr::rkey`]. [`Mr::try_into_memory`] gives `None`.
    ///
    /// Errors, before any device is asked: `access` as every registration
    /// ([`RegRefusal`]); [`Error::Unsupported`] with
    /// [`Feature::Odp`](crate::Feature::Odp) or
    /// [`Feature::ImplicitOdp`](crate::Feature::ImplicitOdp) where the
    /// device's ODP caps ([`Context::odp_caps`](crate::Context::odp_caps))
    /// lack `IBV_ODP_SUPPORT` or `IBV_ODP_SUPPORT_IMPLICIT` (rxe in Linux
    /// 6.1 has neither). Then the device's: `EOPNOTSUPP` as
    /// [`Feature::Odp`](crate::Feature::Odp), others as [`Error::Verbs`]
    /// naming `ibv_reg_mr`; the sim's as [`Error::Sim`]. Nothing is
    /// registered on error.
    ///
    /// # Safety
    /// Every byte of the process becomes reachable by the device through
    /// this MR's lkey and, with REMOTE_* access, by every peer that holds
    /// its rkey. The caller promises that:
    /// - its rkey goes only to peers whose accesses land only in memory the
    ///   program treats as it would an [`Mr`]'s: memory no Rust reference
    ///   covers while a peer may write it, read by the program only through
    ///   atomics or under the program's own protocol (a peer's REMOTE_WRITE
    ///   or atomic into any other object breaks Rust's guarantees for it);
    /// - without REMOTE_* access, nothing reaches memory through it but the
    ///   WRs whose SGEs [`Sge::of_implicit_odp`] made under its contract.
    pub unsafe fn reg_implicit_odp(&self, access: Access) -> Result<Mr> {
        let access = access | Access::ON_DEMAND;
        crate::ib::mem::check_registration(0, usize::MAX, access)?;
        self.inner.dereg.sweep();
        let mut mr = match &self.inner.kind {
            PdKind::Sim(dev, pdn) => direct::reg_sim_implicit_odp(dev, *pdn, access)?,
            #[cfg(feature = "verbs")]
            PdKind::Verbs(pd, _) => ibv::reg_implicit_odp(pd, access)?,
        };
        mr.live = Some(LiveGuard::new(&self.inner.dereg.live));
        mr.pd = self.inner.id;
        self.inner
            .registrations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Mr::new(mr, self.inner.dereg.clone()))
    }

    /// Asks the device to fault in, now, the pages of ODP memory the
    /// SGEs name, so that the WRs that will name them take no page fault
    /// (`ibv_advise_mr(pd, advice, IBV_ADVISE_MR_FLAG_FLUSH, sges, n)`,
    /// `ibv_advise_mr(3)`; on the sim `mlx5_dv::sim::Device::advise_mr`).
    /// With the flush flag it is done when this returns: the pages are
    /// resident then (until the kernel takes them back: prefetch is
    /// advice, not a pin). `advice`: [`OdpAdvice::Prefetch`] for memory
    /// the device will read, [`OdpAdvice::PrefetchWrite`] for memory it
    /// will write, [`OdpAdvice::PrefetchNoFault`] to map only what the
    /// process already has present. An empty list does nothing.
    ///
    /// Each SGE names `len` bytes at an address of an ODP MR of this PD
    /// (made with [`Sge::new`], or [`Sge::of_implicit_odp`] for an
    /// implicit one); the list is checked before anything is asked.
    ///
    /// Errors, before any device is asked: [`Error::ForeignPd`] (an SGE
    /// of another PD's MR), [`Error::BytesSge`] (an [`Sge::bytes`]),
    /// [`Error::Unsupported`] ([`Feature::Odp`](crate::Feature::Odp)) on a
    /// device whose caps lack ODP. Then the device's: on the sim
    /// [`Error::Sim`] (an lkey of no ODP MR of the PD, a range outside its
    /// MR), nothing prefetched; on a verbs device `EOPNOTSUPP` as
    /// [`Feature::Odp`](crate::Feature::Odp), others as [`Error::Verbs`]
    /// naming `ibv_advise_mr` (`EINVAL` for an lkey of no ODP MR or a
    /// range outside it, `EFAULT` for pages that cannot be mapped).
    pub fn advise(&self, advice: OdpAdvice, sges: &[Sge<'_>]) -> Result<()> {
        for s in sges {
            if s.pd() == BYTES_PD {
                return Err(Error::BytesSge);
            }
            if s.pd() != self.inner.id {
                return Err(Error::ForeignPd {
                    object: crate::PdObject::Sge,
                });
            }
        }
        if sges.is_empty() {
            return Ok(());
        }
        let list: Vec<(u32, u64, u32)> = sges.iter().map(|s| (s.lkey.0, s.addr, s.len)).collect();
        match &self.inner.kind {
            PdKind::Sim(dev, pdn) => direct::sim_advise(dev, *pdn, advice, &list),
            #[cfg(feature = "verbs")]
            PdKind::Verbs(pd, _) => {
                if !ibv::odp_caps(&pd.ctx).supported {
                    return Err(Error::Unsupported {
                        device: pd.ctx.name.clone(),
                        feature: crate::Feature::Odp,
                    });
                }
                ibv::advise_odp(pd, advice, &list)
            }
        }
    }
}

impl<'mr> Sge<'mr> {
    /// `len` bytes at address `addr` of this process, through the implicit
    /// ODP MR `mr` ([`Pd::reg_implicit_odp`]): the SGE's address is `addr`,
    /// its lkey `mr`'s. [`Sge::new`] refuses such an `mr` (it has no CPU
    /// mapping of its own to check a range against).
    ///
    /// Errors: `mr` is not an implicit ODP MR ([`Error::Invalid`]);
    /// `addr + len` wraps ([`Error::OutOfBounds`]).
    ///
    /// # Safety
    /// While a WR naming the SGE is outstanding (posted and not yet
    /// polled back, or flushed):
    /// - `addr..addr + len` is mapped in this process, readable, and
    ///   writable when the WR writes it (a receive, an RDMA READ's target,
    ///   an atomic's result), and stays so. A page the process has no
    ///   mapping for cannot be faulted in: the device fails the WR
    ///   (ConnectX; the sim too, which reads the process's mappings on a
    ///   fault), but a page unmapped or remapped while the WR runs is
    ///   memory the device may still reach;
    /// - the program holds no Rust reference to those bytes that the
    ///   device's write would alias (the rules of [`Mr::slice_mut`]), and
    ///   they are no [`LocalMr`](crate::LocalMr)'s memory;
    /// - the memory is not freed or unmapped.
    ///
    /// An inline send copies the bytes at `addr` through the CPU at post
    /// time, and inline receive ([`QpConfig::inline_recv`](crate::QpConfig::inline_recv))
    /// writes small payloads to `addr` from the poll: both are host
    /// addresses here, under the same contract.
    pub unsafe fn of_implicit_odp(mr: &'mr Mr, addr: u64, len: u32) -> Result<Sge<'mr>> {
        if !mr.is_implicit_odp() {
            return Err(Error::Invalid(
                "Sge::of_implicit_odp takes an implicit ODP MR (Pd::reg_implicit_odp); \
                 name an ordinary MR's bytes with Sge::new"
                    .into(),
            ));
        }
        let offset = usize::try_from(addr).map_err(|_| Error::OutOfBounds {
            offset: addr,
            len: len as u64,
            size: usize::MAX as u64,
            object: "address space (an implicit ODP MR)",
        })?;
        Sge::in_mr(mr, offset, len)
    }
}

/// The refusal of ON_DEMAND on a DMA-BUF registration.
pub(super) fn check_not_on_demand(access: Access) -> Result<()> {
    if access.contains(Access::ON_DEMAND) {
        return Err(RegRefusal::OnDemandDmabuf.into());
    }
    Ok(())
}
