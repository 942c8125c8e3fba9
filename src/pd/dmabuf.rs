//! DMA-BUF memory registration ([`Pd::register_dmabuf`]): memory another
//! driver exported (a GPU's) that the device reaches at an IOVA and the
//! program does not reach at all; the SGEs that name it
//! ([`Sge::of_dmabuf`]); the sim's stand-in exporter
//! ([`Pd::dmabuf_stand_in`]).

use super::Pd;
#[cfg(feature = "verbs")]
use crate::backend::ibv;
use crate::device::handles::PdKind;
use crate::ib::error::{Error, RegRefusal, Result};
use crate::ib::mem::{check_registration, Access};
use crate::ib::mr::{LiveGuard, Mr, MrInner};
use crate::ib::wr::Sge;
use std::os::fd::{AsFd, OwnedFd};

/// The page size DMA-BUF registrations line up to (the kernel's
/// `PAGE_SIZE` on x86-64 and the default on aarch64).
const PAGE: u64 = 4096;

impl Pd {
    /// Registers bytes `[offset, offset + len)` of the dma-buf `fd` (memory
    /// another driver exported, a GPU's above all) as an [`Mr`] that the
    /// device, and every peer, reaches at `[iova, iova + len)`
    /// (`ibv_reg_dmabuf_mr(pd, offset, len, iova, fd, access)`, libibverbs
    /// `verbs.h`).
    ///
    /// The MR's address, [`Mr::addr`], is `iova`: what SGEs name (made with
    /// [`Sge::of_dmabuf`]) and what a peer puts in its RDMA WRITE, READ or
    /// atomic, with [`Mr::rkey`]. It is not libibverbs' `ibv_mr.addr`, which
    /// is set to `offset` (libibverbs `verbs.c`; rust-ibverbs PR #148). The
    /// program has no CPU mapping of the bytes it can prove: the `Mr`'s
    /// byte accessors ([`Mr::write`], [`Mr::read`], [`Mr::slice`], ...)
    /// refuse ([`Error::NoCpuMapping`]; [`Mr::load_u8`] and
    /// [`Mr::store_u8`] panic) and [`Mr::is_cpu_mapped`] is false; reach the
    /// bytes through their exporter. [`Mr::try_into_memory`] gives `None`.
    ///
    /// `fd` is borrowed for the call: the kernel takes its own reference to
    /// the dma-buf (the sim, its mapping), so the descriptor may be closed
    /// once this returns. The registration lives as long as the `Mr`
    /// (deregistered as [`Self::reclaim`] says).
    ///
    /// **The sim** cannot make a dma-buf; its stand-in exporter is a memfd
    /// ([`Self::dmabuf_stand_in`] makes one) sealed against shrinking, whose
    /// bytes `[offset, offset + len)` the sim maps (`MAP_SHARED`) for as long
    /// as the MR lives and reaches through that mapping, translating each
    /// address a WQE names in `[iova, iova + len)` to it. The program sees
    /// what the device wrote by reading the memfd (`pread`, or a mapping of
    /// its own), as it would ask a GPU. On the sim a memory window cannot be
    /// bound to a DMA-BUF MR (refused, `MW_BIND_ERR`).
    ///
    /// Errors, before any device is asked: as [`Self::alloc_mr`]'s
    /// ([`RegRefusal`]: access, zero bytes, `iova + len` or `offset + len`
    /// wrapping); [`RegRefusal::OnDemandDmabuf`] for
    /// [`Access::ON_DEMAND`]; [`RegRefusal::IovaPageOffset`] when `iova` and `offset`
    /// differ in their offset within a 4096-byte page (the kernel refuses it
    /// too, `EINVAL`). Then: [`Error::Unsupported`]
    /// ([`Feature::DmaBuf`](crate::Feature::DmaBuf)) where the device or its
    /// kernel driver has no DMA-BUF registration (`EOPNOTSUPP`: rxe in Linux
    /// 6.1); the device's other refusals as [`Error::Verbs`] naming
    /// `ibv_reg_dmabuf_mr` (`EINVAL`: the range passes the dma-buf's end, or
    /// `fd` is not a dma-buf). On the sim: [`Error::Invalid`] when `fd` is not
    /// a memfd sealed with `F_SEAL_SHRINK`, [`Error::OutOfBounds`] when the
    /// range passes its end. Nothing is registered on error.
    pub fn register_dmabuf(
        &self,
        fd: impl AsFd,
        offset: u64,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<Mr> {
        check_registration(iova, len, access)?;
        super::odp::check_not_on_demand(access)?;
        if offset.checked_add(len as u64).is_none() {
            return Err(RegRefusal::Wraps {
                addr: offset,
                len: len as u64,
            }
            .into());
        }
        if iova % PAGE != offset % PAGE {
            return Err(RegRefusal::IovaPageOffset { iova, offset }.into());
        }
        let fd = fd.as_fd();
        // Dropped MRs go first, as for every registration.
        self.inner.dereg.sweep();
        let mut mr = match &self.inner.kind {
            PdKind::Sim(dev, pdn) => MrInner::sim_dmabuf(dev, *pdn, fd, offset, len, iova, access)?,
            #[cfg(feature = "verbs")]
            PdKind::Verbs(pd, _) => ibv::reg_dmabuf(pd, fd, offset, len, iova, access)?,
        };
        mr.live = Some(LiveGuard::new(&self.inner.dereg.live));
        mr.pd = self.inner.id;
        self.inner
            .registrations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Mr::new(mr, self.inner.dereg.clone()))
    }

    /// The sim's stand-in for a dma-buf of `len` zero bytes: a new memfd
    /// (`memfd_create(2)`, `MFD_ALLOW_SEALING`) of that length, sealed
    /// against shrinking (`F_SEAL_SHRINK`), as [`Self::register_dmabuf`]
    /// wants on the sim. Read and write its bytes with `pread` / `pwrite`
    /// (`std::os::unix::fs::FileExt` on a `File` made from it) or a mapping
    /// of your own. A verbs device refuses it (a memfd is not a dma-buf).
    ///
    /// Errors: [`RegRefusal::ZeroLength`]; the system's (`memfd_create`,
    /// `ftruncate`, `fcntl`) as [`Error::Os`] naming the call.
    pub fn dmabuf_stand_in(len: usize) -> Result<OwnedFd> {
        use nix::fcntl::{fcntl, FcntlArg, SealFlag};
        use nix::sys::memfd::{memfd_create, MFdFlags};
        if len == 0 {
            return Err(RegRefusal::ZeroLength.into());
        }
        let os = |what: &str| {
            let what = what.to_string();
            move |e: nix::Error| Error::Os {
                what,
                source: e.into(),
            }
        };
        let fd = memfd_create(
            c"rdma-direct-dmabuf",
            MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
        )
        .map_err(os("memfd_create"))?;
        nix::unistd::ftruncate(&fd, len as i64)
            .map_err(os(&format!("ftruncate of a memfd to {len} bytes")))?;
        fcntl(&fd, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK))
            .map_err(os("fcntl(F_ADD_SEALS, F_SEAL_SHRINK)"))?;
        Ok(fd)
    }
}

impl<'mr> Sge<'mr> {
    /// `len` bytes at byte `offset` of `mr`, which may be a DMA-BUF
    /// registration ([`Pd::register_dmabuf`]): its address is `mr`'s IOVA
    /// plus `offset`, which the device translates through the MR (the lkey).
    /// [`Sge::new`] refuses such an `mr` because some posts copy an SGE's
    /// bytes through the CPU, and the IOVA is no host address.
    ///
    /// Errors: the range does not fit in `mr` ([`Error::OutOfBounds`]).
    ///
    /// # Safety
    /// Unless `mr` [`is_cpu_mapped`](Mr::is_cpu_mapped), the SGE goes only
    /// where the device alone touches its bytes: never in an inline WR
    /// ([`SendWr::inline`](crate::SendWr::inline): the post copies the
    /// payload from the SGE's address), and never in a receive, RDMA READ or
    /// atomic on a QP or SRQ with inline receive
    /// ([`QpConfig::inline_recv`](crate::QpConfig::inline_recv): the poll
    /// copies small payloads from the CQE to the SGE's address). Either copy
    /// would read or write host memory at the IOVA. (On the verbs path of
    /// an mlx5 device, libmlx5's own scatter to CQE does the same copy:
    /// turn it off there with `MLX5_SCATTER_TO_CQE=0`.)
    pub unsafe fn of_dmabuf(mr: &'mr Mr, offset: usize, len: u32) -> Result<Sge<'mr>> {
        Sge::in_mr(mr, offset, len)
    }
}
