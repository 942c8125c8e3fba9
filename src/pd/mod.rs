//! Protection domains: memory registration, and where QPs and shared CQs
//! are created.

pub(crate) mod dci_pool;
mod dmabuf;
mod odp;
pub mod pool;
pub(crate) mod reclaim;

use crate::backend::direct;
#[cfg(feature = "verbs")]
use crate::backend::ibv;
use crate::cq::channel::{ChannelKind, CompChannel};
use crate::cq::SharedCq;
use crate::device::handles::{PdInner, PdKind, SharedKind};
use crate::ib::config::{CqOptions, QpConfig};
#[cfg(feature = "verbs")]
use crate::ib::device::DataPath;
use crate::ib::error::RegRefusal;
use crate::ib::error::{Error, Result};
use crate::ib::mem::{check_registration, writes, Access, AlignedBuf, Buffer, Memory, Pages};
use crate::ib::mr::{LiveGuard, LocalMr, Mr, MrInner};
use crate::qp::Qp;
use mlx5_dv::driver::CqCredits;
use std::sync::Arc;

/// A protection domain: where memory is registered and QPs and shared CQs
/// are created.
///
/// Memory registration comes in the two kinds of [`concepts`](crate::concepts)
/// ("Two kinds of memory"):
///
/// | call | memory | handle |
/// |---|---|---|
/// | [`Self::alloc_mr`], [`Self::alloc_mapped_mr`] | the crate's, zeroed | [`Mr`] |
/// | [`Self::reg_mr`] | the caller's ([`Memory`]) | [`Mr`] |
/// | [`Self::reg_mr_raw`] (`unsafe`) | a range the caller manages | [`Mr`] |
/// | [`Self::alloc_local_mr`] | the crate's, zeroed | [`LocalMr`] |
/// | [`Self::reg_local_mr`] | the caller's ([`Memory`]) | [`LocalMr`] |
/// | [`Self::register_dmabuf`] | another driver's (a dma-buf), no CPU mapping | [`Mr`] |
/// | [`Self::reg_implicit_odp`] (`unsafe`) | the whole address space, ODP, no CPU mapping | [`Mr`] |
///
/// **On-demand paging (ODP).** [`Access::ON_DEMAND`] in any of the first
/// five registers the memory without pinning it (`IBV_ACCESS_ON_DEMAND`,
/// `ibv_reg_mr(3)`): the device faults its pages in when a WR or a peer
/// first touches them, and again after the kernel takes them back;
/// [`Self::advise`] faults them in ahead. It is asked of the device's
/// caps first ([`Context::odp_caps`](crate::Context::odp_caps)): where they
/// lack `IBV_ODP_SUPPORT`, or the kernel driver answers `EOPNOTSUPP` (rxe
/// in Linux 6.1), the registration is [`Error::Unsupported`]
/// ([`Feature::Odp`](crate::Feature::Odp)) and nothing is registered. On
/// the sim an ODP MR starts with no page resident, and the sim counts its
/// faults (`rdma_direct::testing::PdHooks`). A receive into ODP memory
/// posted to an SRQ that takes a fault comes back, on mlx5, as an error CQE
/// that is not reported: the receive is posted again
/// ([`Srq`](crate::Srq) says when).
///
/// Every registration is checked before a device is asked; a refusal is
/// [`Error::Register`] ([`RegRefusal`]): zero bytes, a range that wraps,
/// REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE, bits this crate does
/// not know, write access to a read-only mapping on the sim, REMOTE_* access
/// or read-only memory for a [`LocalMr`]. A verbs device's own refusal is
/// [`Error::Verbs`] naming `ibv_reg_mr` and its errno (`EFAULT` for write
/// access to read-only memory). Nothing is registered on error (the memory
/// handed in is dropped).
///
/// Dropped MRs are deregistered, and their memory freed, once no WR posted
/// before the drop on a QP of this PD is outstanding; see [`Self::reclaim`].
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

impl Pd {
    /// Registers a new zeroed, page-aligned buffer of `len` bytes, of the
    /// second kind (any access; atomic copies).
    ///
    /// Errors: as the [type docs](Self).
    pub fn alloc_mr(&self, len: usize, access: Access) -> Result<Mr> {
        check_registration(0, len, access)?;
        self.shared(Buffer::new(len)?, access)
    }

    /// Registers a fresh anonymous mapping of `len` bytes (huge pages when
    /// the system has them: see [`Pages`]), as the memory pool's chunks are.
    ///
    /// Errors: as the [type docs](Self); the mapping's.
    pub fn alloc_mapped_mr(&self, len: usize, access: Access) -> Result<(Mr, Pages)> {
        check_registration(0, len, access)?;
        let (buf, pages) = Buffer::mapped(len)?;
        Ok((self.shared(buf, access)?, pages))
    }

    /// Registers the caller's `mem` as memory a peer may reach (an [`Mr`]):
    /// a `Vec<u8>` (its `len` bytes), `Box<[u8]>`, [`AlignedBuf`],
    /// `memmap2::MmapMut` (anonymous, a file, tmpfs, hugetlbfs) or
    /// `memmap2::Mmap` (read-only: no write access). The MR keeps it and
    /// hands it back ([`Mr::try_into_memory`]).
    ///
    /// Errors: as the [type docs](Self).
    pub fn reg_mr(&self, mem: impl Into<Memory>, access: Access) -> Result<Mr> {
        let mem = mem.into();
        check_registration(mem.as_ptr() as u64, mem.len(), access)?;
        self.check_read_only(&mem, access)?;
        self.shared(Buffer::from_memory(mem)?, access)
    }

    /// Registers `len` bytes at `addr`, memory the caller manages (shared
    /// memory, device memory), as an [`Mr`]. Verbs allows overlapping
    /// registrations; so does this.
    ///
    /// Errors: as the [type docs](Self) (no read-only check: the crate
    /// cannot see the mapping's protection; the device refuses it).
    ///
    /// # Safety
    /// `addr..addr + len` must be mapped, readable, and writable when
    /// `access` has any write flag, and stay so until every MR covering it
    /// is deregistered: the last handle dropped *and* [`Self::live_mrs`]
    /// down again (deregistration may wait for outstanding WRs), or
    /// [`Mr::try_into_memory`] returned `Ok`. The program reads and writes
    /// it only as [`Mr`]'s contract allows, and no [`LocalMr`]'s memory lies
    /// in it (a LocalMr's bytes are its WRs' alone). Without a write flag in
    /// `access` the range may be read-only: the `Mr`'s safe writes
    /// ([`Mr::write`], [`Mr::store_u8`], [`Mr::slice_mut`]) are then refused.
    pub unsafe fn reg_mr_raw(&self, addr: *mut u8, len: usize, access: Access) -> Result<Mr> {
        check_registration(addr as u64, len, access)?;
        // SAFETY: the caller's contract, passed on.
        self.shared(unsafe { Buffer::raw(addr, len, writes(access)) }, access)
    }

    /// Registers a new zeroed, page-aligned buffer of `len` bytes of the
    /// first kind (a [`LocalMr`]: plain slices, memcpy copies, posted by
    /// value). `access` is LOCAL_WRITE (receives, RDMA READ and atomic
    /// targets) or empty (send-only).
    ///
    /// Errors: as the [type docs](Self).
    pub fn alloc_local_mr(&self, len: usize, access: Access) -> Result<LocalMr> {
        self.reg_local_mr(AlignedBuf::zeroed(len)?, access)
    }

    /// Registers the caller's writable `mem` as a [`LocalMr`] (see
    /// [`Self::reg_mr`] for what `mem` may be; not a read-only `Mmap`).
    /// [`LocalMr::into_memory`] hands it back.
    ///
    /// Errors: as the [type docs](Self).
    pub fn reg_local_mr(&self, mem: impl Into<Memory>, access: Access) -> Result<LocalMr> {
        let mem = mem.into();
        check_registration(mem.as_ptr() as u64, mem.len(), access)?;
        if access.intersects(Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC) {
            return Err(RegRefusal::RemoteOnLocal.into());
        }
        if !mem.is_writable() {
            return Err(RegRefusal::LocalReadOnly.into());
        }
        Ok(LocalMr::new(self.reg_inner(
            Buffer::from_memory(mem)?,
            access,
            true,
        )?))
    }

    /// How many memory registrations this PD has made (pool chunks
    /// included): a pool that serves from its chunks adds none.
    pub fn registrations(&self) -> u64 {
        self.inner
            .registrations
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Registrations of this PD that are live: not yet deregistered (MRs
    /// and LocalMrs held, and dropped MRs waiting for WRs to be retired).
    /// Compare with `rdma resource show mr` on a verbs device.
    pub fn live_mrs(&self) -> u64 {
        self.inner.dereg.live()
    }

    /// Deregisters every dropped MR that no outstanding WR can name any
    /// more, and frees its memory; returns how many still wait (for WRs
    /// posted before their drop, on QPs of this PD, to be polled).
    ///
    /// The same runs by itself when an MR is dropped, at each registration,
    /// when a QP of this PD moves to RESET and when one is destroyed, but
    /// never inside `poll`: MRs whose last WR a poll retired stay registered
    /// (and their memory allocated) until one of those, or this call. Call
    /// it after polling to free them then. What holds a dropped MR: any send
    /// posted before its drop on a QP of this PD, until retired (an idle QP
    /// with unsignaled sends outstanding holds it until polled past them,
    /// reset or destroyed), and the outstanding receives that name it
    /// (receives into other memory, kept posted by a server, do not).
    pub fn reclaim(&self) -> usize {
        self.inner.dereg.sweep()
    }

    /// The sim refuses write access to read-only memory by its type; a
    /// verbs device is asked (`EFAULT`).
    fn check_read_only(&self, mem: &Memory, access: Access) -> Result<()> {
        if matches!(self.inner.kind, PdKind::Sim(..)) && !mem.is_writable() && writes(access) {
            return Err(RegRefusal::ReadOnly.into());
        }
        Ok(())
    }

    fn shared(&self, buf: Buffer, access: Access) -> Result<Mr> {
        let mr = self.reg_inner(buf, access, false)?;
        Ok(Mr::new(mr, self.inner.dereg.clone()))
    }

    /// Registers `buf` (checked by the caller) on the device; `local`: for a
    /// [`LocalMr`] (the sim then copies it plainly).
    fn reg_inner(&self, buf: Buffer, access: Access, local: bool) -> Result<MrInner> {
        check_registration(buf.ptr() as u64, buf.len(), access)?;
        // Dropped MRs go first: a loop of register-and-drop stays flat.
        self.inner.dereg.sweep();
        let mut mr = match &self.inner.kind {
            PdKind::Sim(dev, pdn) => direct::reg_sim_mr(dev, *pdn, buf, access, local)?,
            #[cfg(feature = "verbs")]
            PdKind::Verbs(pd, _) => ibv::reg_mr(pd, buf, access)?,
        };
        mr.live = Some(LiveGuard::new(&self.inner.dereg.live));
        mr.pd = self.inner.id;
        self.inner
            .registrations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(mr)
    }

    /// Allocates a memory window of `mw_type` on this PD (`ibv_alloc_mw`):
    /// bound to nothing, so every access through its rkey is refused until
    /// a bind ([`Qp::bind_mw`] for type 1, [`SendWr::bind_mw`](crate::SendWr::bind_mw)
    /// for type 2). At most one bind of it is outstanding at a time, and a
    /// bind that fails or is flushed gives back the rkey it replaced.
    /// Dropping it deallocates it (`ibv_dealloc_mw`, which unbinds it),
    /// then lets go of the MR of its last bind; dropped while a bind of it
    /// is outstanding, the dealloc waits until that bind retires. See
    /// [`Mw`](crate::Mw).
    ///
    /// Errors: [`Error::Unsupported`] ([`Feature::MemoryWindows`](crate::Feature::MemoryWindows))
    /// where the device has none; the sim's ([`Error::Sim`]: key space
    /// full) or the device's ([`Error::Verbs`] naming `ibv_alloc_mw`).
    pub fn alloc_mw(&self, mw_type: crate::MwType) -> Result<crate::Mw> {
        let (reg, raw, rkey) = match &self.inner.kind {
            PdKind::Sim(dev, pdn) => {
                let (reg, rkey) = direct::alloc_sim_mw(dev, *pdn, mw_type)?;
                (reg, 0, rkey)
            }
            #[cfg(feature = "verbs")]
            PdKind::Verbs(pd, _) => ibv::alloc_mw(pd, mw_type)?,
        };
        Ok(crate::Mw::new(reg, raw, mw_type, self.inner.id, rkey))
    }

    /// Creates two QPs (RC or UC, `cfg.qp_type`) on this device, each with
    /// its own CQ, and takes both RESET -> INIT -> RTR -> RTS connected to
    /// each other (loopback): [`Pd::create_qp`] twice, then
    /// [`Qp::connect_loopback`]. A UD config is [`Error::WrongTransport`] (UD
    /// connects to no peer: [`Qp::ready_ud`]).
    pub fn create_connected_pair(&self, cfg: &QpConfig) -> Result<(Qp, Qp)> {
        let mut a = self.create_qp(cfg)?;
        let mut b = self.create_qp(cfg)?;
        Qp::connect_loopback(&mut a, &mut b)?;
        Ok((a, b))
    }

    /// Creates a QP of `cfg.qp_type` (RC by default, UC, UD, a DC
    /// initiator) with its own CQ, in RESET: it takes no work request until
    /// it is connected ([`Qp::connect_loopback`]; a UD QP: [`Qp::ready_ud`];
    /// a DCI, `QpType::Dci`: [`Qp::ready_dci`], then [`Qp::post_dc`]; a DC
    /// target is made by [`Self::create_qp_on_srq`]).
    ///
    /// The CQ has room for a completion of every outstanding send and every
    /// posted receive (what a flush after an error produces), so it cannot
    /// overrun.
    ///
    /// Errors: [`Error::Config`], before the device is asked, when
    /// `max_send_wr` is not 1..=16384, `max_recv_wr` over 16384, `rnr_retry`
    /// over 7, `min_rnr_timer` over 31 or `cq_depth` not 1..=4194304; the
    /// device's own refusals as [`Error::Verbs`] naming the call.
    pub fn create_qp(&self, cfg: &QpConfig) -> Result<Qp> {
        Qp::create(&self.inner, cfg, None, None)
    }

    /// Creates an address handle toward `av` (`ibv_create_ah`; on mlx5 its
    /// AV is then read once with `mlx5dv_init_obj(MLX5DV_OBJ_AH)`, and each
    /// UD WQE copies it, as rdma-core does). The sim routes by QPN alone:
    /// its AHs carry no path.
    ///
    /// Errors: port 0 ([`Error::Config`]); the device's refusal
    /// ([`Error::Verbs`], `ibv_create_ah`: on RoCE, an `av` without a GRH).
    pub fn create_ah(&self, av: &crate::AddressVector) -> Result<crate::Ah> {
        use crate::ib::ah::Ah;
        if av.port == 0 {
            return Err(Error::Config {
                field: "port (ports count from 1)",
                value: 0,
                min: 1,
                max: u8::MAX as u64,
            });
        }
        let inner = match &self.inner.kind {
            PdKind::Sim(..) => sim_ah(self.inner.id),
            #[cfg(feature = "verbs")]
            PdKind::Verbs(pd, direct) => verbs_ah(
                ibv::VerbsAh::create(pd, av)?,
                *direct == DataPath::Direct,
                self.inner.id,
            )?,
        };
        Ok(Ah {
            inner: Arc::new(inner),
        })
    }

    /// Creates an address handle back to the sender of a UD receive: `c`
    /// is its completion, `grh` the receive's first 40 bytes (the GRH
    /// slot: read them from the receive's buffer, e.g. `mr.read(offset,
    /// &mut grh)`), `port` the port it came in on (the receiving QP's
    /// `qp.config().port`). The sim writes the slot as zeros and its AHs
    /// carry no path, so there the GRH is not read. This is
    /// `ibv_create_ah_from_wc` (rdma-core `verbs.c`: the path from the
    /// GRH's source GID; on RoCE v2 over IPv4 from the IPv4 header in
    /// bytes 20..40); reply to `c.src_qp.qpn()`. A server that learned of
    /// its client through rdma_cm's UDP port space answers it this way
    // (`cm` is verbs-only: a link only in a build that has it.)
    #[cfg_attr(feature = "verbs", doc = "([`crate::cm::CmListener::accept_ud`]).")]
    #[cfg_attr(not(feature = "verbs"), doc = "(`cm::CmListener::accept_ud`).")]
    /// On the sim the AH carries no path, as [`Self::create_ah`]'s.
    ///
    /// Errors: port 0 ([`Error::Config`]), a completion that is not a
    /// successful receive, or a receive without a GRH ([`Error::Invalid`]: [`Completion`](crate::Completion)
    /// carries no source LID, which InfiniBand without a GRH would need);
    /// the device's refusal ([`Error::Verbs`], `ibv_create_ah_from_wc`).
    pub fn create_ah_from_recv(
        &self,
        port: u8,
        c: &crate::Completion,
        grh: &[u8; 40],
    ) -> Result<crate::Ah> {
        use crate::ib::ah::Ah;
        if port == 0 {
            return Err(Error::Config {
                field: "port (ports count from 1)",
                value: 0,
                min: 1,
                max: u8::MAX as u64,
            });
        }
        if !c.status.is_ok() || c.opcode != crate::WcOpcode::RECV {
            return Err(Error::Invalid(format!(
                "an AH from a receive needs a successful RECV completion; this one is {:?} with status {}",
                c.opcode,
                c.status.ident()
            )));
        }
        if !c.src_qp.grh() {
            return Err(Error::Invalid(
                "the receive carries no GRH: without one the path needs the source LID, which a Completion does not carry; build the AV with Qp::av_to".into(),
            ));
        }
        let inner = match &self.inner.kind {
            PdKind::Sim(..) => sim_ah(self.inner.id),
            #[cfg(feature = "verbs")]
            PdKind::Verbs(pd, direct) => verbs_ah(
                ibv::VerbsAh::from_recv(pd, port, c, grh)?,
                *direct == DataPath::Direct,
                self.inner.id,
            )?,
        };
        #[cfg(not(feature = "verbs"))]
        let _ = grh;
        Ok(Ah {
            inner: Arc::new(inner),
        })
    }

    /// Creates a shared receive queue (SRQ) for up to `max_wr` receives
    /// of up to `max_sge` SGEs each: QPs made on it
    /// ([`Self::create_qp_on_srq`], [`SharedCq::create_qp_on_srq`]) take
    /// their receives from it. See [`Srq`](crate::Srq).
    ///
    /// Errors: [`Error::Config`] when `max_wr` is not 1..=16384 or
    /// `max_sge` not 1..=30, or the device granted less; the device's
    /// refusal ([`Error::Verbs`], `ibv_create_srq`; [`Error::Sim`]).
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<crate::Srq> {
        crate::Srq::create(&self.inner, max_wr, max_sge)
    }

    /// Creates a QP (of `cfg.qp_type`) in RESET, with a CQ of its own, whose receives come
    /// from `srq` ([`Qp::post_recv`] refuses: post to the SRQ). A DC target
    /// (`QpType::Dct`, its key in [`QpConfig::dc_key`](crate::QpConfig::dc_key))
    /// is made here: [`Qp::ready_dct`] brings it to RTR, and its number
    /// ([`Qp::dct_number`]) exists from then on (mlx5 only: the sim and
    /// ConnectX's direct path; elsewhere [`Error::Unsupported`]). `cfg`'s
    /// `max_recv_wr` and `max_recv_sge` are not used; the CQ's default
    /// depth is [`CqSizing`](crate::CqSizing) of `max_send_wr` and the
    /// SRQ's `max_wr`.
    ///
    /// Errors: as [`Self::create_qp`]; `srq` of another PD, or a CQ whose
    /// free CQ credits are fewer than the SRQ's `max_wr` (a `cq_depth` too
    /// small: size it with [`CqSizing`](crate::CqSizing)`::new().queue(srq.max_wr())`
    /// and the sends) ([`Error::SrqCqCredits`]).
    pub fn create_qp_on_srq(&self, cfg: &QpConfig, srq: &crate::Srq) -> Result<Qp> {
        Qp::create(&self.inner, cfg, None, Some(srq))
    }

    /// Creates a CQ of at least `depth` CQEs for several QPs to share
    /// ([`SharedCq::create_qp`]); [`CqSizing`](crate::CqSizing) gives a depth that never
    /// limits posting. On verbs this is `ibv_create_cq` with a completion
    /// channel; on the direct path our poller runs over its ring.
    ///
    /// Errors: [`Error::Config`] when `depth` is not 1..=4194304; the
    /// device's refusal as [`Error::Verbs`].
    pub fn create_shared_cq(&self, depth: u32) -> Result<SharedCq> {
        self.shared_cq_of(depth, CqOptions::default())
    }

    /// [`Self::create_shared_cq`] with CQE compression (basic layout: the
    /// device writes runs of alike completions as a title CQE and arrays of
    /// 8-byte mini-CQEs; the poller expands them in place, and what
    /// [`SharedCq::poll`] hands out is the same). On the sim, its model of
    /// it (`mlx5_dv::sim::Cq::set_compression`). A QP on an SRQ may not complete into it
    /// ([`Error::Invalid`] at QP creation: responder mini-CQEs carry no WQE
    /// counter).
    ///
    /// On ConnectX (the direct path), `mlx5dv_create_cq` with
    /// `MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE` in a mini-CQE format the
    /// device reports in `cqe_comp_caps` (compiles; not yet run on
    /// hardware).
    ///
    /// Errors: as [`Self::create_shared_cq`]; [`Error::Unsupported`]
    /// (`Feature::CqeCompression`) on the verbs path, and on a ConnectX
    /// whose `cqe_comp_caps` has no `max_num` or no format we know, or
    /// whose `mlx5dv_create_cq` refuses compression; nothing is created.
    pub fn create_compressed_shared_cq(&self, depth: u32) -> Result<SharedCq> {
        let opts = CqOptions {
            compress: true,
            ..CqOptions::default()
        };
        self.shared_cq_of(depth, opts)
    }

    /// [`Self::create_shared_cq`] with completion timestamps: each
    /// [`Completion::timestamp`](crate::Completion::timestamp) that
    /// [`SharedCq::poll`] hands out is when the device completed the WR,
    /// in the device's clock ticks, not nanoseconds (ConnectX: its core
    /// clock's raw ticks; the sim: nanoseconds since it was made); 0 for a
    /// completion in error. As [`QpConfig::completion_timestamps`] for a
    /// QP's own CQ: `ibv_create_cq_ex(3)` with
    /// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` in `wc_flags`, read with
    /// `ibv_wc_read_completion_ts` on the verbs path and from the CQE's
    /// 64-bit big-endian `timestamp` (byte 48) on the direct path (the sim:
    /// `mlx5_dv::sim::Cq::set_timestamps`).
    ///
    /// Errors: as [`Self::create_shared_cq`]; [`Error::Unsupported`]
    /// (`Feature::CompletionTimestamp`) where the provider has no
    /// `ibv_create_cq_ex`, the old verbs calls are forced
    /// (`RDMA_DIRECT_VERBS_OLD_POST=1`), or the CQ's creation fails with
    /// `EOPNOTSUPP` or `EINVAL` (rxe); nothing is created.
    pub fn create_timestamped_shared_cq(&self, depth: u32) -> Result<SharedCq> {
        let opts = CqOptions {
            timestamps: true,
            ..CqOptions::default()
        };
        self.shared_cq_of(depth, opts)
    }

    /// [`Self::create_shared_cq`] with the options `opts`.
    fn shared_cq_of(&self, depth: u32, opts: CqOptions) -> Result<SharedCq> {
        if depth == 0 || depth > 1 << 22 {
            return Err(Error::Config {
                field: "shared CQ depth",
                value: depth as u64,
                min: 1,
                max: 1 << 22,
            });
        }
        let kind =
            match &self.inner.kind {
                PdKind::Sim(dev, _) => {
                    SharedKind::Direct(direct::DirectCq::create_sim_ex(dev, depth, opts)?)
                }
                #[cfg(feature = "verbs")]
                PdKind::Verbs(pd, DataPath::Direct) => {
                    SharedKind::Direct(direct::DirectCq::create_mlx5_ex(&pd.ctx, depth, opts)?)
                }
                #[cfg(feature = "verbs")]
                PdKind::Verbs(pd, DataPath::Verbs) if opts.compress => {
                    return Err(Error::Unsupported {
                        device: pd.ctx.name.clone(),
                        feature: crate::Feature::CqeCompression,
                    })
                }
                #[cfg(feature = "verbs")]
                PdKind::Verbs(pd, DataPath::Verbs) => SharedKind::Verbs(
                    ibv::VerbsCq::create_stamped(&pd.ctx, depth, false, opts.timestamps)?,
                ),
            };
        Ok(self.shared_cq(kind, None))
    }

    /// [`Self::create_shared_cq`] on `channel`, a completion channel other
    /// CQs may share ([`CompChannel`]): the CQ's completion events go
    /// there, each naming the CQ by `token` (verbs' `cq_context`; one token
    /// per live CQ of the channel). Take them with
    /// [`CompChannel::get_event`] or `next_event().await`; the CQ's own
    /// event waits ([`SharedCq::wait_cq_event`], [`SharedCq::wait`] in a mode
    /// other than busy polling, [`SharedCq::completions`]) are refused.
    /// `ibv_create_cq(3)` with `channel` and `cq_context`; on the direct
    /// path the arm's sequence number counts the events the channel took.
    ///
    /// Errors: as [`Self::create_shared_cq`]; [`Error::ForeignPd`], [`Error::DuplicateToken`] when
    /// `channel` is another device's or `token` names a live CQ on it.
    pub fn create_shared_cq_on(
        &self,
        depth: u32,
        channel: &CompChannel,
        token: u64,
    ) -> Result<SharedCq> {
        if depth == 0 || depth > 1 << 22 {
            return Err(Error::Config {
                field: "shared CQ depth",
                value: depth as u64,
                min: 1,
                max: 1 << 22,
            });
        }
        let other = || Error::ForeignPd {
            object: crate::PdObject::CompChannel,
        };
        let (seat, taken) = match (&self.inner.kind, channel.kind()) {
            (PdKind::Sim(d, _), ChannelKind::Sim(cd, _)) if d.same(cd) => channel.seat(token)?,
            #[cfg(feature = "verbs")]
            (PdKind::Verbs(pd, _), ChannelKind::Verbs(ch)) if ch.of(&pd.ctx) => {
                channel.seat(token)?
            }
            _ => return Err(other()),
        };
        // The CQ's events carry the seat's context value, which no later
        // CQ takes (a token may come back).
        let context = seat.context();
        let kind = match (&self.inner.kind, channel.kind()) {
            (PdKind::Sim(dev, _), ChannelKind::Sim(_, ch)) => SharedKind::Direct(
                direct::DirectCq::create_sim_on(dev, depth, ch, context, taken)?,
            ),
            #[cfg(feature = "verbs")]
            (PdKind::Verbs(pd, DataPath::Direct), ChannelKind::Verbs(ch)) => SharedKind::Direct(
                direct::DirectCq::create_mlx5_on(&pd.ctx, depth, ch, context, taken)?,
            ),
            #[cfg(feature = "verbs")]
            (PdKind::Verbs(pd, DataPath::Verbs), ChannelKind::Verbs(ch)) => {
                SharedKind::Verbs(ibv::VerbsCq::create_on(&pd.ctx, depth, false, ch, context)?)
            }
            #[cfg(feature = "verbs")]
            _ => return Err(other()),
        };
        Ok(self.shared_cq(kind, Some(seat)))
    }

    /// The `SharedCq` over `kind`, with a credit for each CQE it holds.
    fn shared_cq(
        &self,
        kind: SharedKind,
        seat: Option<crate::cq::channel::ChannelSeat>,
    ) -> SharedCq {
        let depth = match &kind {
            SharedKind::Direct(c) => c.depth(),
            #[cfg(feature = "verbs")]
            SharedKind::Verbs(c) => c.depth,
        };
        SharedCq::new(kind, CqCredits::new(depth), self.inner.clone(), seat)
    }
}

/// An AH of PD `pd` on the sim: no path (the sim routes by QPN).
fn sim_ah(pd: u32) -> crate::ib::ah::AhInner {
    crate::ib::ah::AhInner {
        av: [0; 48],
        raw: 0,
        pd,
        _owner: None,
    }
}

/// The verbs AH `v` of PD `pd`, with its mlx5 AV read once on the direct
/// path (`direct`).
#[cfg(feature = "verbs")]
fn verbs_ah(v: ibv::VerbsAh, direct: bool, pd: u32) -> Result<crate::ib::ah::AhInner> {
    Ok(crate::ib::ah::AhInner {
        av: if direct { v.mlx5_av()? } else { [0; 48] },
        raw: v.raw as usize,
        pd,
        _owner: Some(Box::new(v)),
    })
}
