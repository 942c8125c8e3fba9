//! rdma-direct: kernel-bypass RDMA for mlx5 (ConnectX) with a portable verbs
//! path for every other RDMA device, and an embedded software mlx5 device
//! (`sim`) so everything runs without RDMA hardware.
//!
//! ```no_run
//! use rdma_direct::{Access, Context, QpConfig, RemoteAddr, SendWr, Sge, Completion};
//! let ctx = Context::open("sim")?;
//! let pd = ctx.alloc_pd()?;
//! let src = pd.reg_mr(4096, Access::LOCAL_WRITE)?;
//! let dst = pd.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
//! let (mut a, _b) = pd.create_connected_pair(&QpConfig::default())?;
//! src.write(0, b"hello")?;
//! let sge = [Sge::new(&src, 0, 5)?];
//! a.post_send(&[SendWr::rdma_write(1, &sge, RemoteAddr { addr: dst.addr(), rkey: dst.rkey() }).signaled()])?;
//! let mut wc = [Completion::default(); 1];
//! while a.poll(&mut wc)? == 0 {}
//! assert!(wc[0].status.is_ok());
//! # Ok::<(), rdma_direct::Error>(())
//! ```
//!
//! # Threads
//!
//! - [`Context`], [`Pd`] and [`Mr`] are `Send + Sync`: share them freely.
//! - A [`Qp`] is `Send` but not `Sync`: posting and polling take `&mut self`,
//!   so one thread drives a QP (its send queue, receive queue and CQ) at a time.
//!   Move it to another thread, or put it behind your own lock; the crate adds
//!   none on the data path.
//! - A [`SharedCq`] is `Send` but not `Sync` in the same way: it holds the
//!   QPs that complete into it, and one thread polls it and drives them.
//!
//! ```compile_fail
//! fn shared<T: Sync>() {}
//! shared::<rdma_direct::Qp>(); // a Qp is not Sync
//! ```
//! - The sim's device thread is the device: it touches only ring memory,
//!   doorbell records and registered memory.
//!
//! # Seeing the ring
//!
//! `RDMA_DIRECT_TRACE=1` prints every WQE posted and CQE polled on the direct
//! path, decoded, with its ring offset (`mlx5_dv::trace`).
#![deny(unsafe_op_in_unsafe_fn)]

/// The README's library example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub mod bench;
#[cfg(feature = "verbs")]
pub mod cm;
/// RDMA's concepts (memory registration, QPs and their states, CQs and
/// CQEs, WRs and WQEs, SGEs) mapped to this crate's types; every example
/// compiles and runs as a doc test. The text is `docs/concepts.md`.
#[doc = include_str!("../docs/concepts.md")]
pub mod concepts {}
pub mod conformance;
mod cq;
mod direct;
mod error;
pub mod exchange;
mod mem;
pub mod pool;
pub mod qp_attr;
#[cfg(feature = "verbs")]
mod verbs;
mod wr;

pub use cq::{CompletionMode, CqSizing, SharedCq};
pub use error::{Error, Result};

pub use mem::{Access, Mr, Pages};
pub use qp_attr::{AddressVector, Grh, QpAttr, QpAttrMask};
pub use wr::{Completion, Lkey, RecvWr, RemoteAddr, Rkey, SendWr, Sge, WcOpcode, WcStatus, WrOp};

use cq::SharedKind;
use mem::{Buffer, MrInner, Registration};
use mlx5_dv::driver::CqCredits;
use mlx5_dv::sim;
use std::sync::{Arc, Mutex};

/// Name of the embedded software mlx5 device.
pub const SIM_DEVICE: &str = "sim";

/// One device `rdma-direct devices` lists.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub name: String,
    /// `sim`, or `verbs` for an ibverbs device.
    pub kind: &'static str,
    /// Kernel driver (`mlx5_core`, `rdma_rxe (on eth0)`, ...; `sim`).
    pub driver: String,
    /// Node GUID (0 for the sim).
    pub node_guid: u64,
    /// The data path its QPs use: `direct` (our ring driver) or `verbs`.
    pub data_path: &'static str,
    /// Its ports. Empty when the device could not be opened (`error` says why).
    pub ports: Vec<PortDetail>,
    /// Why the device's ports could not be read.
    pub error: Option<String>,
}

/// One port of a device.
#[derive(Clone, Debug)]
pub struct PortDetail {
    pub port: u8,
    /// `ACTIVE`, `DOWN`, ... (`enum ibv_port_state`).
    pub state: &'static str,
    /// `InfiniBand`, `Ethernet` (RoCE) or `sim`.
    pub link_layer: &'static str,
    /// Active MTU in bytes (`None` on the sim, which has no wire).
    pub active_mtu: Option<u32>,
    /// Active rate in Gb/s (lanes x lane speed).
    pub rate_gbps: Option<f64>,
    pub lid: u16,
    /// Non-empty GID table entries.
    pub gids: Vec<GidEntry>,
}

/// One GID table entry.
#[derive(Clone, Debug)]
pub struct GidEntry {
    pub index: u32,
    pub gid: [u8; 16],
    /// `RoCE v2`, `IB/RoCE v1`, or `IB` (from sysfs `gid_attrs/types`).
    pub kind: String,
}

/// The sim and every ibverbs device on this host.
pub fn list_devices() -> Result<Vec<DeviceInfo>> {
    #[cfg_attr(not(feature = "verbs"), allow(unused_mut))]
    let mut v = vec![DeviceInfo {
        name: SIM_DEVICE.into(),
        kind: "sim",
        driver: "sim".into(),
        node_guid: 0,
        data_path: "direct",
        ports: vec![PortDetail {
            port: 1,
            state: "ACTIVE",
            link_layer: "sim",
            active_mtu: None,
            rate_gbps: None,
            lid: 0,
            gids: Vec::new(),
        }],
        error: None,
    }];
    #[cfg(feature = "verbs")]
    for d in verbs::list_devices()? {
        let (driver, ports, mlx5, error) = match verbs::describe(&d.name) {
            Ok((driver, ports, mlx5)) => (driver, ports, mlx5, None),
            Err(e) => ("unknown".into(), Vec::new(), false, Some(e.to_string())),
        };
        v.push(DeviceInfo {
            name: d.name,
            kind: "verbs",
            driver,
            node_guid: d.node_guid,
            // What `Backend::Auto` picks: direct on ConnectX (mlx5dv).
            data_path: if mlx5 { "direct" } else { "verbs" },
            ports,
            error,
        });
    }
    Ok(v)
}

enum CtxKind {
    Sim(sim::Device),
    /// An ibverbs device, and whether its QPs run the direct path (mlx5).
    #[cfg(feature = "verbs")]
    Verbs(Arc<verbs::Ctx>, bool),
}

/// Which data path a device's QPs use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// The direct path (our ring driver) on the sim and on ConnectX
    /// (`mlx5dv_is_supported`), verbs everywhere else.
    #[default]
    Auto,
    /// The direct path; a device that is not mlx5 (or the sim) is refused.
    Direct,
    /// `ibv_post_send` / `ibv_poll_cq`, even on mlx5 (for comparison). The
    /// sim has no verbs path.
    Verbs,
}

/// An open device.
pub struct Context {
    kind: CtxKind,
    name: String,
}

impl Context {
    /// Opens `name`: `sim` (a new software mlx5 device with its own device
    /// thread, which ends when the context and everything made from it are
    /// dropped) or an ibverbs device name such as `rxe0` or `mlx5_0`.
    pub fn open(name: &str) -> Result<Context> {
        Self::open_with(name, Backend::Auto)
    }

    /// Opens `name` with the data path `backend` asks for.
    ///
    /// Errors: [`Backend::Direct`] on a device that is neither the sim nor
    /// an mlx5, or [`Backend::Verbs`] on the sim ([`Error::Invalid`]).
    pub fn open_with(name: &str, backend: Backend) -> Result<Context> {
        if name == SIM_DEVICE {
            if backend == Backend::Verbs {
                return Err(Error::Invalid(
                    "the sim has only the direct path (--backend verbs needs an ibverbs device)"
                        .into(),
                ));
            }
            let dev = sim::Device::new();
            dev.start()?;
            return Ok(Context {
                kind: CtxKind::Sim(dev),
                name: name.into(),
            });
        }
        #[cfg(feature = "verbs")]
        {
            match verbs::open(name)? {
                Some(c) => {
                    let mlx5 = verbs::mlx5_supported(&c);
                    let direct = match backend {
                        Backend::Auto => mlx5,
                        Backend::Verbs => false,
                        Backend::Direct if mlx5 => true,
                        Backend::Direct => {
                            return Err(Error::Invalid(format!(
                                "{name} is not an mlx5 device: the direct path drives ConnectX (and the sim) only"
                            )))
                        }
                    };
                    Ok(Context {
                        kind: CtxKind::Verbs(c, direct),
                        name: name.into(),
                    })
                }
                None => Err(Error::NoSuchDevice { name: name.into() }),
            }
        }
        #[cfg(not(feature = "verbs"))]
        Err(Error::NoVerbs { name: name.into() })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `direct` or `verbs`: the data path QPs of this device use.
    pub fn data_path(&self) -> &'static str {
        match self.kind {
            CtxKind::Sim(_) => "direct",
            #[cfg(feature = "verbs")]
            CtxKind::Verbs(_, true) => "direct",
            #[cfg(feature = "verbs")]
            CtxKind::Verbs(_, false) => "verbs",
        }
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<Pd> {
        let kind = match &self.kind {
            CtxKind::Sim(d) => PdKind::Sim(d.clone(), d.alloc_pd()),
            #[cfg(feature = "verbs")]
            CtxKind::Verbs(c, direct) => PdKind::Verbs(verbs::alloc_pd(c)?, *direct),
        };
        Ok(Pd {
            inner: Arc::new(PdInner {
                mrs: Mutex::new(Vec::new()),
                registrations: std::sync::atomic::AtomicU64::new(0),
                kind,
            }),
        })
    }
}

enum PdKind {
    /// The device and the PD number.
    Sim(sim::Device, u32),
    /// An ibverbs PD, and whether its QPs run the direct path (mlx5).
    #[cfg(feature = "verbs")]
    Verbs(Arc<verbs::Pd>, bool),
}

struct PdInner {
    // Field order: MRs are released before the PD itself.
    mrs: Mutex<Vec<Arc<MrInner>>>,
    /// Memory registrations made through this PD (the pool's tests count them).
    registrations: std::sync::atomic::AtomicU64,
    kind: PdKind,
}

/// A protection domain. It keeps every MR registered through it alive (memory
/// and registration) until the PD and every QP created from it are dropped.
pub struct Pd {
    inner: Arc<PdInner>,
}

struct SimReg {
    dev: sim::Device,
    lkey: u32,
}
impl Registration for SimReg {}
impl Drop for SimReg {
    fn drop(&mut self) {
        let _ = self.dev.dereg_mr(self.lkey);
    }
}

/// Sizes and path facts for a QP pair.
#[derive(Clone, Copy, Debug)]
pub struct QpConfig {
    /// Send queue depth in work requests.
    pub max_send_wr: u32,
    /// Most SGEs per send WR.
    pub max_send_sge: u32,
    /// Largest inline payload in bytes (`-I` in perftest).
    pub max_inline: u32,
    /// Receive queue depth in work requests.
    pub max_recv_wr: u32,
    /// Most SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Port number (verbs devices).
    pub port: u8,
    /// GID index to use on RoCE; `None` picks the IPv4-mapped RoCE v2 GID.
    pub gid_index: Option<u8>,
    /// How often a SEND that finds no posted receive at the peer (RNR NAK)
    /// is retried before it fails with `RNR_RETRY_EXC_ERR`: 0 to 6, or 7 for
    /// forever (IB spec 9.7.5.2.8). The responder's `min_rnr_timer` sets
    /// the wait between tries.
    pub rnr_retry: u8,
    /// The RNR NAK timer this QP asks of a sender when it has no receive
    /// posted, as the IB spec table 45 code 0..=31 (`ibv_qp_attr.min_rnr_timer`;
    /// 12 = 0.64 ms, the default, as rdma-core's `ibv_rc_pingpong` uses;
    /// 31 = 491.52 ms; 0 = 655.36 ms). Set at INIT -> RTR by [`Qp::rtr_attr`].
    pub min_rnr_timer: u8,
    /// Depth of the QP's CQ in CQEs; `None`: what [`CqSizing`] gives for
    /// this QP (1.5 x `max_send_wr + max_recv_wr`), so the CQ never limits
    /// posting. The device may round it up ([`Qp::cq_depth`]). Posts
    /// that would leave the CQ without room for every WR's completion
    /// (including the flush after an error) are refused with
    /// [`Error::CqFull`], so the CQ never overruns.
    pub cq_depth: Option<u32>,
}

impl Default for QpConfig {
    fn default() -> Self {
        QpConfig {
            max_send_wr: 128,
            max_send_sge: 1,
            max_inline: 220,
            max_recv_wr: 64,
            max_recv_sge: 1,
            port: 1,
            gid_index: None,
            rnr_retry: 6,
            min_rnr_timer: 12,
            cq_depth: None,
        }
    }
}

impl Pd {
    /// Registers a new zeroed, page-aligned buffer of `len` bytes.
    ///
    /// Errors: `len` of 0, or REMOTE_WRITE / REMOTE_ATOMIC without LOCAL_WRITE
    /// (the IB spec requires it) are refused before any registration.
    pub fn reg_mr(&self, len: usize, access: Access) -> Result<Mr> {
        check_access(access)?;
        self.register(Buffer::new(len)?, access)
    }

    /// Registers a fresh anonymous mapping of `len` bytes (huge pages when
    /// the system has them: see [`Pages`]), as the memory pool's chunks are.
    ///
    /// Errors: as [`Self::reg_mr`]; the mapping's.
    pub fn reg_mapped(&self, len: usize, access: Access) -> Result<(Mr, Pages)> {
        check_access(access)?;
        let (buf, pages) = Buffer::mapped(len)?;
        Ok((self.register(buf, access)?, pages))
    }

    /// How many memory registrations this PD has made (pool chunks
    /// included): a pool that serves from its chunks adds none.
    pub fn registrations(&self) -> u64 {
        self.inner
            .registrations
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Releases `mr` now, instead of when the PD goes: for a registration
    /// no work request has ever named (a pool whose building failed).
    pub(crate) fn release_unused(&self, mr: Mr) {
        self.inner
            .mrs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|m| !Arc::ptr_eq(m, &mr.inner));
    }

    /// Registers `buf` (checked access flags) and keeps it with the PD.
    fn register(&self, buf: Buffer, access: Access) -> Result<Mr> {
        check_access(access)?;
        let (reg, lkey, rkey): (Box<dyn Registration>, u32, u32) = match &self.inner.kind {
            PdKind::Sim(dev, pdn) => {
                // SAFETY: `buf` is owned by the MrInner built below, whose
                // field order drops this registration (dereg) before the buffer.
                let k = unsafe { dev.reg_mr(*pdn, buf.ptr(), buf.len(), access) }?;
                (
                    Box::new(SimReg {
                        dev: dev.clone(),
                        lkey: k.lkey,
                    }),
                    k.lkey,
                    k.rkey,
                )
            }
            #[cfg(feature = "verbs")]
            PdKind::Verbs(pd, _) => verbs::reg_mr(pd, &buf, access)?,
        };
        self.inner
            .registrations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let inner = Arc::new(MrInner {
            _reg: reg,
            buf,
            lkey,
            rkey,
        });
        self.inner
            .mrs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(inner.clone());
        Ok(Mr { inner })
    }

    /// Creates two RC QPs on this device, each with its own CQ, and takes both
    /// RESET -> INIT -> RTR -> RTS connected to each other (loopback):
    /// [`Pd::create_qp`] twice, then [`Qp::connect_loopback`].
    pub fn create_connected_pair(&self, cfg: &QpConfig) -> Result<(Qp, Qp)> {
        let mut a = self.create_qp(cfg)?;
        let mut b = self.create_qp(cfg)?;
        Qp::connect_loopback(&mut a, &mut b)?;
        Ok((a, b))
    }

    /// Creates an RC QP with its own CQ, in RESET: it takes no work request
    /// until it is connected ([`Qp::connect_loopback`]).
    ///
    /// The CQ has room for a completion of every outstanding send and every
    /// posted receive (what a flush after an error produces), so it cannot
    /// overrun.
    ///
    /// Errors: [`Error::Invalid`], before the device is asked, when
    /// `max_send_wr` is not 1..=16384, `max_recv_wr` over 16384, `rnr_retry`
    /// over 7, `min_rnr_timer` over 31 or `cq_depth` not 1..=4194304; the
    /// device's own refusals as [`Error::Verbs`] naming the call.
    pub fn create_qp(&self, cfg: &QpConfig) -> Result<Qp> {
        self.create_qp_on(cfg, None)
    }

    /// Creates a CQ of at least `depth` CQEs for several QPs to share
    /// ([`SharedCq::create_qp`]); [`CqSizing`] gives a depth that never
    /// limits posting. On verbs this is `ibv_create_cq` with a completion
    /// channel; on the direct path our poller runs over its ring.
    ///
    /// Errors: [`Error::Invalid`] when `depth` is not 1..=4194304; the
    /// device's refusal as [`Error::Verbs`].
    pub fn create_shared_cq(&self, depth: u32) -> Result<SharedCq> {
        if depth == 0 || depth > 1 << 22 {
            return Err(Error::Invalid(format!(
                "shared CQ depth {depth} must be 1..=4194304"
            )));
        }
        let kind = match &self.inner.kind {
            PdKind::Sim(dev, _) => SharedKind::Direct(direct::DirectCq::create_sim(dev, depth)?),
            #[cfg(feature = "verbs")]
            PdKind::Verbs(pd, true) => {
                SharedKind::Direct(direct::DirectCq::create_mlx5(&pd.ctx, depth)?)
            }
            #[cfg(feature = "verbs")]
            PdKind::Verbs(pd, false) => SharedKind::Verbs(verbs::VerbsCq::create(&pd.ctx, depth)?),
        };
        let depth = match &kind {
            SharedKind::Direct(c) => c.depth(),
            #[cfg(feature = "verbs")]
            SharedKind::Verbs(c) => c.depth,
        };
        Ok(SharedCq::new(
            kind,
            CqCredits::new(depth),
            self.inner.clone(),
        ))
    }

    /// [`Self::create_qp`], completing into its own CQ or into `shared`'s.
    fn create_qp_on(
        &self,
        cfg: &QpConfig,
        shared: Option<(&SharedKind, &CqCredits, usize)>,
    ) -> Result<Qp> {
        if cfg.max_send_wr == 0 || cfg.max_send_wr > 1 << 14 {
            return Err(Error::Invalid(format!(
                "max_send_wr {} must be 1..=16384",
                cfg.max_send_wr
            )));
        }
        if cfg.max_recv_wr > 1 << 14 {
            return Err(Error::Invalid(format!(
                "max_recv_wr {} must be at most 16384",
                cfg.max_recv_wr
            )));
        }
        if cfg.rnr_retry > 7 {
            return Err(Error::Invalid(format!(
                "rnr_retry {} must be 0..=7 (7: retry forever)",
                cfg.rnr_retry
            )));
        }
        if cfg.min_rnr_timer > 31 {
            return Err(Error::Invalid(format!(
                "min_rnr_timer {} must be 0..=31 (IB spec table 45 code)",
                cfg.min_rnr_timer
            )));
        }
        let cq_depth = match cfg.cq_depth {
            Some(_) if shared.is_some() => {
                return Err(Error::Invalid(
                    "cq_depth is the shared CQ's: leave QpConfig::cq_depth None".into(),
                ))
            }
            Some(d) if d == 0 || d > 1 << 22 => {
                return Err(Error::Invalid(format!("cq_depth {d} must be 1..=4194304")))
            }
            Some(d) => d,
            // Default: room for a completion of every outstanding send and
            // posted receive, with the sizing helper's headroom.
            None => CqSizing::new().qp(cfg).depth()?,
        };
        let direct_cq = || match shared {
            None => Ok::<_, Error>(direct::CqFor::Own(cq_depth)),
            Some((SharedKind::Direct(c), credits, _)) => Ok(direct::CqFor::Shared(c, credits)),
            #[cfg(feature = "verbs")]
            Some((SharedKind::Verbs(..), ..)) => Err(Error::Invalid(
                "a direct-path QP cannot complete into a verbs CQ".into(),
            )),
        };
        let kind = match &self.inner.kind {
            PdKind::Sim(dev, pdn) => {
                if cfg.max_send_sge as usize > direct::MAX_SGE {
                    return Err(Error::Invalid(format!(
                        "max_send_sge {} exceeds the direct path's {} SGEs per WQE",
                        cfg.max_send_sge,
                        direct::MAX_SGE
                    )));
                }
                if cfg.max_recv_sge as usize > direct::MAX_SGE {
                    return Err(Error::Invalid(format!(
                        "max_recv_sge {} exceeds the direct path's {} SGEs per receive WQE",
                        cfg.max_recv_sge,
                        direct::MAX_SGE
                    )));
                }
                if cfg.max_inline as usize > direct::MAX_INLINE {
                    return Err(Error::Invalid(format!(
                        "max_inline {} exceeds the direct path's {} inline bytes per WQE",
                        cfg.max_inline,
                        direct::MAX_INLINE
                    )));
                }
                if cfg.port != 1 {
                    return Err(Error::Invalid(format!(
                        "the sim has one port, 1 (asked for port {})",
                        cfg.port
                    )));
                }
                if let Some(i) = cfg.gid_index {
                    return Err(Error::Invalid(format!(
                        "the sim has no GID table (asked for GID index {i}); GID indices apply to RoCE devices"
                    )));
                }
                // WQEBBs per WQE: ctrl + raddr + the larger of the SGE list and the inline segment.
                let payload = (cfg.max_send_sge as usize * 16)
                    .max((cfg.max_inline as usize + 4).div_ceil(16) * 16);
                let per_wqe = (32 + payload).div_ceil(64) as u32;
                let wqebbs = (cfg.max_send_wr * per_wqe).next_power_of_two();
                if wqebbs > sim::MAX_SQ_WQEBBS {
                    return Err(Error::Invalid(format!(
                        "max_send_wr {} of WQEs up to {per_wqe} WQEBBs (max_send_sge {}, max_inline {}) needs \
                         {wqebbs} WQEBBs; the sim's SQ holds at most {}",
                        cfg.max_send_wr,
                        cfg.max_send_sge,
                        cfg.max_inline,
                        sim::MAX_SQ_WQEBBS
                    )));
                }
                QpKind::Direct(direct::DirectQp::create_sim(
                    dev,
                    *pdn,
                    wqebbs,
                    cfg.max_send_wr,
                    direct_cq()?,
                    cfg.max_inline,
                    cfg.max_send_sge,
                    cfg.max_recv_wr,
                    cfg.max_recv_sge,
                )?)
            }
            #[cfg(feature = "verbs")]
            PdKind::Verbs(pd, direct) => {
                let caps = verbs::QpCaps {
                    max_send_wr: cfg.max_send_wr,
                    max_send_sge: cfg.max_send_sge,
                    max_inline: cfg.max_inline,
                    max_recv_wr: cfg.max_recv_wr.max(1),
                    max_recv_sge: cfg.max_recv_sge.max(1),
                };
                if *direct {
                    if cfg.max_send_sge as usize > direct::MAX_SGE
                        || cfg.max_recv_sge as usize > direct::MAX_SGE
                        || cfg.max_inline as usize > direct::MAX_INLINE
                    {
                        return Err(Error::Invalid(format!(
                            "the direct path takes at most {} SGEs and {} inline bytes per WQE",
                            direct::MAX_SGE,
                            direct::MAX_INLINE
                        )));
                    }
                    let mut q = direct::DirectQp::create_mlx5(pd, caps, direct_cq()?)?;
                    q.limit_recv_sge(cfg.max_recv_sge);
                    QpKind::Direct(q)
                } else {
                    // The device is asked for at least one receive SGE;
                    // receives are held to what the caller asked.
                    let choice = match shared {
                        None => verbs::CqChoice::Own(cq_depth),
                        Some((SharedKind::Verbs(c), credits, _)) => {
                            verbs::CqChoice::Shared(c, credits)
                        }
                        Some((SharedKind::Direct(_), ..)) => {
                            return Err(Error::Invalid(
                                "a verbs QP cannot complete into a direct-path CQ".into(),
                            ))
                        }
                    };
                    let mut q = verbs::create_qp(pd, caps, choice)?;
                    q.limit_recv_sge(cfg.max_recv_sge);
                    QpKind::Verbs(q)
                }
            }
        };
        let local = match &self.inner.kind {
            PdKind::Sim(..) => Endpoint {
                qpn: 0,
                lid: 0,
                gid: [0; 16],
                gid_index: None,
                active_mtu: 0,
                roce: false,
            },
            #[cfg(feature = "verbs")]
            PdKind::Verbs(pd, _) => {
                let port = pd.ctx.query_port(cfg.port)?;
                let roce = port.link_layer == 2;
                let (gid_index, gid) = if roce {
                    let (i, g) = pd.ctx.choose_gid(cfg.port, &port, cfg.gid_index)?;
                    (Some(i), g)
                } else {
                    (None, [0; 16])
                };
                Endpoint {
                    qpn: 0,
                    lid: port.lid,
                    gid,
                    gid_index,
                    active_mtu: port.active_mtu,
                    roce,
                }
            }
        };
        let mut qp = Qp {
            kind,
            shared_cq: shared.map(|(_, _, tag)| tag),
            state: QpState::Reset,
            cfg: *cfg,
            local,
            pd: self.inner.clone(),
        };
        qp.local.qpn = qp.qp_num();
        Ok(qp)
    }
}

/// Access flags a registration takes: only bits this crate knows, and
/// REMOTE_WRITE / REMOTE_ATOMIC only with LOCAL_WRITE (IB spec 10.6.3.1).
fn check_access(access: Access) -> Result<()> {
    if Access::from_bits(access.bits()).is_none() {
        return Err(Error::Invalid(format!(
            "access flags {:#x} hold bits this crate does not know",
            access.bits()
        )));
    }
    if access.intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
        && !access.contains(Access::LOCAL_WRITE)
    {
        return Err(Error::Invalid(
            "REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE too".into(),
        ));
    }
    Ok(())
}

/// See [`Qp::sim_hook`].
#[doc(hidden)]
pub struct SimHook<'q> {
    q: &'q mut direct::DirectQp,
}

impl SimHook<'_> {
    /// Posts `wr` (checked and encoded as usual), lets `patch` rewrite its
    /// WQE bytes in the ring (all of its WQEBBs, starting at the ctrl
    /// segment), then rings the doorbell.
    pub fn post_patched(&mut self, wr: &SendWr<'_>, patch: impl FnOnce(&mut [u8])) -> Result<()> {
        self.q.post_patched(wr, patch)
    }

    /// Stops taking CQ credits, so posts can exceed the CQ's room.
    pub fn ignore_cq_credits(&mut self) {
        self.q.ignore_credits();
    }

    /// Whether the QP's CQ overran, and the CQ error events it raised.
    pub fn cq_overrun(&self) -> (bool, u64) {
        self.q.cq_overrun()
    }
}

/// Waits up to `timeout` (rounded up to whole ms: a 100 us wait must not
/// become a 0 ms busy poll) for `fd` to become readable; `what` names it in
/// errors. The one wait of event mode, on both data paths.
pub(crate) fn wait_readable(
    fd: std::os::fd::BorrowedFd<'_>,
    timeout: std::time::Duration,
    what: &str,
) -> Result<bool> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    let n = poll(
        &mut fds,
        PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
    )
    .map_err(|e| Error::Verbs {
        call: "poll",
        errno: e as i32,
        detail: format!(" ({what})"),
    })?;
    Ok(n > 0)
}

/// A random 24-bit PSN (as perftest and `ibv_rc_pingpong` pick them).
fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    (h.finish() as u32) & 0xff_ffff
}

enum QpKind {
    Direct(direct::DirectQp),
    #[cfg(feature = "verbs")]
    Verbs(verbs::VerbsQp),
}

/// How a connected QP reaches its peer (what perftest prints before a run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathInfo {
    /// `IB`, `Ethernet` (RoCE) or `sim`.
    pub link_layer: &'static str,
    /// Path MTU in bytes (`None` on the sim, which has no wire).
    pub mtu: Option<u32>,
    /// Source GID index on RoCE.
    pub gid_index: Option<u8>,
    /// Source GID (zero unless RoCE).
    pub gid: [u8; 16],
    /// Local LID (0 on RoCE and the sim).
    pub lid: u16,
    /// First send PSN (24 bits).
    pub sq_psn: u32,
    /// QPN of the connected peer.
    pub dest_qpn: u32,
}

impl PathInfo {
    /// A QP's path before RTR and RTS set it: only the link layer known.
    pub(crate) fn unconnected(link_layer: &'static str) -> Self {
        PathInfo {
            link_layer,
            mtu: None,
            gid_index: None,
            gid: [0; 16],
            lid: 0,
            sq_psn: 0,
            dest_qpn: 0,
        }
    }
}

/// RC QP states (IB spec 10.3.1). [`Qp::state`] is where this crate moved
/// the QP; the device may move a QP to ERR on its own after an error
/// ([`Qp::query`] reports it; the completions say why).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    Reset,
    Init,
    Rtr,
    Rts,
    Err,
}

/// What [`Qp::query`] reports: the device's view of the QP. Attributes the
/// device does not keep (the sim has no PSNs or MTU) are `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInfo {
    pub state: QpState,
    pub dest_qpn: Option<u32>,
    pub rnr_retry: Option<u8>,
    pub min_rnr_timer: Option<u8>,
    /// `enum ibv_mtu`.
    pub path_mtu: Option<u32>,
    pub sq_psn: Option<u32>,
    pub rq_psn: Option<u32>,
}

/// This side's half of a connection: what the peer needs for its INIT ->
/// RTR (perftest exchanges the same facts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub qpn: u32,
    /// Our LID (InfiniBand; 0 on RoCE and the sim).
    pub lid: u16,
    /// Our GID and its table index (RoCE: the chosen RoCE v2 entry).
    pub gid: [u8; 16],
    pub gid_index: Option<u8>,
    /// The port's active MTU (`enum ibv_mtu`; 0 on the sim).
    pub active_mtu: u32,
    /// RoCE: address vectors must be global.
    pub roce: bool,
}

/// An RC queue pair, with its own completion queue ([`Pd::create_qp`]) or
/// on a [`SharedCq`] ([`SharedCq::create_qp`]).
pub struct Qp {
    // Field order: the QP goes before the PD (and its MRs) it belongs to.
    kind: QpKind,
    /// Its completions go to a [`SharedCq`], which polls them (the tag that
    /// names that CQ).
    shared_cq: Option<usize>,
    state: QpState,
    cfg: QpConfig,
    local: Endpoint,
    pd: Arc<PdInner>,
}

impl Qp {
    /// Connects two QPs of the same PD to each other (loopback on one
    /// device): each goes RESET -> INIT -> RTR -> RTS with the peer's QPN and
    /// PSN, path MTU the port's active MTU, RoCE v2 GID as in [`QpConfig`],
    /// and each QP's own `rnr_retry` ([`Self::connect_remote`] on each side).
    ///
    /// Errors: the QPs belong to different PDs, or either is not in RESET
    /// ([`Error::Invalid`], nothing changed); a failed transition (the QP is
    /// left where it got to).
    pub fn connect_loopback(a: &mut Qp, b: &mut Qp) -> Result<()> {
        if !Arc::ptr_eq(&a.pd, &b.pd) {
            return Err(Error::Invalid(
                "connect_loopback joins two QPs of one PD".into(),
            ));
        }
        if a.state != QpState::Reset || b.state != QpState::Reset {
            return Err(Error::Invalid(format!(
                "connect_loopback needs both QPs in RESET (they are in {:?} and {:?})",
                a.state, b.state
            )));
        }
        let (ea, eb) = (a.local, b.local);
        let (psn_a, psn_b) = (random_psn(), random_psn());
        a.connect_remote(psn_a, &eb, psn_b)?;
        if let Err(e) = b.connect_remote(psn_b, &ea, psn_a) {
            let _ = a.modify(QpState::Reset, &QpAttr::default());
            return Err(e);
        }
        Ok(())
    }

    /// Connects this QP (in RESET) to a peer on another host, whose facts
    /// came over an out-of-band exchange ([`exchange`]): RESET -> INIT ->
    /// RTR (toward `peer`, expecting `peer_psn` first) -> RTS (sending from
    /// `my_psn`, `rnr_retry` from the QP's config).
    ///
    /// Errors: the QP is not in RESET, or an attribute built from `peer`,
    /// `peer_psn` or `my_psn` is out of range: refused before any change.
    /// A transition the device refuses: the QP is put back in RESET.
    pub fn connect_remote(&mut self, my_psn: u32, peer: &Endpoint, peer_psn: u32) -> Result<()> {
        let init = QpAttr::init(self.cfg.port, Access::all());
        let rtr = self.rtr_attr(peer, peer_psn);
        let rts = QpAttr::rts(my_psn, self.cfg.rnr_retry);
        self.connect_steps(init, rtr, rts)
    }

    /// RESET -> INIT -> RTR -> RTS with these attributes, every step checked
    /// before the first modify; a failed modify takes the QP back to RESET.
    pub(crate) fn connect_steps(&mut self, init: QpAttr, rtr: QpAttr, rts: QpAttr) -> Result<()> {
        if self.state != QpState::Reset {
            return Err(Error::Invalid(format!(
                "connecting needs the QP in RESET (it is in {:?})",
                self.state
            )));
        }
        let steps = [
            (QpState::Reset, QpState::Init, init),
            (QpState::Init, QpState::Rtr, rtr),
            (QpState::Rtr, QpState::Rts, rts),
        ];
        for (from, to, attr) in &steps {
            qp_attr::check_rc_modify(*from, *to, attr, self.local.roce)?;
        }
        for (_, to, attr) in &steps {
            if let Err(e) = self.modify(*to, attr) {
                if self.state != QpState::Reset {
                    let _ = self.modify(QpState::Reset, &QpAttr::default());
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// The direct-path QP behind this one, if it is one.
    pub(crate) fn direct_mut(&mut self) -> Option<&mut direct::DirectQp> {
        match &mut self.kind {
            QpKind::Direct(q) => Some(q),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(_) => None,
        }
    }

    /// The verbs QP behind this one, if it is one.
    #[cfg(feature = "verbs")]
    pub(crate) fn verbs_mut(&mut self) -> Option<&mut verbs::VerbsQp> {
        match &mut self.kind {
            QpKind::Verbs(q) => Some(q),
            QpKind::Direct(_) => None,
        }
    }

    /// The configuration the QP was created with.
    pub fn config(&self) -> &QpConfig {
        &self.cfg
    }

    /// The ibverbs device the QP lives on; `None` on the sim.
    #[cfg(feature = "verbs")]
    pub(crate) fn verbs_device(&self) -> Option<&str> {
        match &self.pd.kind {
            PdKind::Verbs(pd, _) => Some(&pd.ctx.name),
            PdKind::Sim(..) => None,
        }
    }

    /// A random first PSN (24 bits) for [`Self::connect_remote`].
    pub fn random_psn() -> u32 {
        random_psn()
    }

    /// Requests one completion event for the QP's CQ: the next completion
    /// (with `solicited_only`, the next solicited or error one) makes
    /// [`Self::wait_cq_event`] return. A completion already in the CQ raises
    /// none, so poll once more after arming (verbs `ibv_req_notify_cq`; the
    /// direct path writes the arm doorbell itself).
    pub fn arm_cq(&mut self, solicited_only: bool) -> Result<()> {
        match &mut self.kind {
            QpKind::Direct(q) => q.arm_cq(solicited_only),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => q.arm_cq(solicited_only),
        }
    }

    /// Sleeps (`poll` on the completion channel's fd) until the armed CQ
    /// raises its event or `timeout` passes; `true` if an event came. The
    /// event is consumed and acknowledged; arm again for the next.
    pub fn wait_cq_event(&mut self, timeout: std::time::Duration) -> Result<bool> {
        match &mut self.kind {
            QpKind::Direct(q) => q.wait_cq_event(timeout),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => q.wait_cq_event(timeout),
        }
    }

    /// This side's half of a connection, to hand to the peer.
    pub fn endpoint(&self) -> Endpoint {
        self.local
    }

    /// The INIT -> RTR attributes toward `peer` whose first PSN is
    /// `peer_psn`: a global address vector on RoCE (our chosen GID index,
    /// hop limit 64), path MTU the smaller of the two active MTUs,
    /// `min_rnr_timer` from the QP's config, one READ/atomic in flight.
    pub fn rtr_attr(&self, peer: &Endpoint, peer_psn: u32) -> QpAttr {
        let grh = self.local.roce.then(|| Grh {
            dgid: peer.gid,
            sgid_index: self.local.gid_index.unwrap_or(0),
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        });
        let av = AddressVector {
            dlid: peer.lid,
            port: self.cfg.port,
            grh,
            service_level: 0,
        };
        let mtu = match (self.local.active_mtu, peer.active_mtu) {
            (0, 0) => 1,
            (0, m) | (m, 0) => m,
            (a, b) => a.min(b),
        };
        QpAttr {
            min_rnr_timer: Some(self.cfg.min_rnr_timer),
            ..QpAttr::rtr(av, mtu, peer.qpn, peer_psn)
        }
    }

    /// Moves the QP to `to` with `attr` (IB spec 11.2.4.2). The attributes
    /// are checked first ([`qp_attr::check_rc_modify`]): every one the
    /// transition requires must be there, no other, each in range, and on
    /// RoCE the address vector must be global; otherwise
    /// [`Error::QpAttr`] names the attribute and nothing changes.
    ///
    /// Moving to RESET forgets every outstanding WR and discards the QP's
    /// completions not yet polled; the QP can then be connected again
    /// (ERR -> RESET -> INIT -> RTR -> RTS). A QP on a [`SharedCq`] moves to
    /// RESET here only with no WR outstanding ([`Error::Invalid`]
    /// otherwise): the CQ holds other QPs' completions too, so reset it with
    /// [`SharedCq::reset_qp`], which drains the CQ of its completions.
    pub fn modify(&mut self, to: QpState, attr: &QpAttr) -> Result<()> {
        self.modify_with(to, attr, false)
    }

    /// Sends and receives posted and not yet retired.
    pub(crate) fn outstanding(&self) -> u32 {
        match &self.kind {
            QpKind::Direct(q) => q.outstanding(),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => q.outstanding() as u32,
        }
    }

    /// [`Self::modify`]; `cq_drained`: the caller ([`SharedCq::reset_qp`])
    /// drains the shared CQ of this QP's completions after a RESET.
    pub(crate) fn modify_with(
        &mut self,
        to: QpState,
        attr: &QpAttr,
        cq_drained: bool,
    ) -> Result<()> {
        qp_attr::check_rc_modify(self.state, to, attr, self.local.roce)?;
        if to == QpState::Reset && self.shared_cq.is_some() && !cq_drained {
            let outstanding = self.outstanding();
            if outstanding > 0 {
                return Err(Error::Invalid(format!(
                    "QP {:#x} completes into a shared CQ and has {outstanding} WRs outstanding: \
                     reset it with SharedCq::reset_qp, which drains the CQ of its completions",
                    self.local.qpn
                )));
            }
        }
        let sim = matches!(self.pd.kind, PdKind::Sim(..));
        // The sim has one port, as its `create_qp` says.
        let ports = [attr.port, attr.av.map(|av| av.port)];
        if sim && ports.iter().flatten().any(|&p| p != 1) {
            return Err(Error::Invalid(format!(
                "the sim has one port (1); the attributes name {:?}",
                ports.iter().flatten().collect::<Vec<_>>()
            )));
        }
        let local = self.local;
        // The path facts an RTR or RTS sets (the sim has no wire: none).
        let update = |mut p: PathInfo| {
            if let Some(av) = attr.av {
                p.link_layer = if av.grh.is_some() { "Ethernet" } else { "IB" };
                p.gid_index = av.grh.map(|g| g.sgid_index);
                p.gid = local.gid;
                p.lid = local.lid;
            }
            if let Some(m) = attr.path_mtu {
                p.mtu = Some(128 << m.clamp(1, 5));
            }
            if let Some(d) = attr.dest_qpn {
                p.dest_qpn = d;
            }
            if let Some(psn) = attr.sq_psn {
                p.sq_psn = psn;
            }
            p
        };
        match &mut self.kind {
            QpKind::Direct(q) => {
                q.modify(self.state, to, attr)?;
                if !sim {
                    let p = update(q.path());
                    q.set_path(p);
                }
            }
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => {
                q.modify_to(to, attr)?;
                let p = update(q.path());
                q.set_path(p);
            }
        }
        self.state = to;
        Ok(())
    }

    /// The device's view of the QP: its state (ERR after an error, even if
    /// this crate left it in RTS) and connection attributes.
    pub fn query(&self) -> Result<QpInfo> {
        match &self.kind {
            QpKind::Direct(q) => q.query(),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => q.query(),
        }
    }

    /// The send queue's ring bytes followed by its doorbell record, on the
    /// direct path (`None` on verbs, whose provider owns the ring). For tests
    /// and tools that show a refused post wrote nothing; allocates.
    pub fn sq_snapshot(&self) -> Option<Vec<u8>> {
        match &self.kind {
            QpKind::Direct(q) => Some(q.sq_snapshot()),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(_) => None,
        }
    }

    /// Depth of the QP's CQ in CQEs, as the device made it.
    pub fn cq_depth(&self) -> u32 {
        match &self.kind {
            QpKind::Direct(q) => q.cq_depth(),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => q.cq_depth(),
        }
    }

    /// Test hooks of the sim: `None` on other devices. They bypass the
    /// checks that keep a correct program away from some device errors
    /// (malformed WQEs, CQ overrun), so the conformance suite can show that
    /// the device reports them as the hardware does.
    #[doc(hidden)]
    pub fn sim_hook(&mut self) -> Option<SimHook<'_>> {
        if self.shared_cq.is_some() {
            return None;
        }
        match &mut self.kind {
            QpKind::Direct(q) if q.is_sim() => Some(SimHook { q }),
            QpKind::Direct(_) => None,
            #[cfg(feature = "verbs")]
            QpKind::Verbs(_) => None,
        }
    }

    /// The state this crate took the QP to.
    pub fn state(&self) -> QpState {
        self.state
    }

    /// The largest inline payload this QP takes, in bytes (what the device
    /// granted; at least [`QpConfig::max_inline`]).
    pub fn max_inline(&self) -> u32 {
        match &self.kind {
            QpKind::Direct(q) => q.granted_inline().unwrap_or(self.cfg.max_inline),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => q.max_inline(),
        }
    }

    /// QP number (24 bits).
    pub fn qp_num(&self) -> u32 {
        match &self.kind {
            QpKind::Direct(q) => q.qpn(),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => q.qpn(),
        }
    }

    /// How this QP reaches its peer.
    pub fn path(&self) -> PathInfo {
        match &self.kind {
            QpKind::Direct(q) => q.path(),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => q.path(),
        }
    }

    /// `direct` or `verbs`.
    pub fn data_path(&self) -> &'static str {
        match &self.kind {
            QpKind::Direct(_) => "direct",
            #[cfg(feature = "verbs")]
            QpKind::Verbs(_) => "verbs",
        }
    }

    /// Posts a batch of send work requests with one doorbell. Every WR is
    /// checked first; on any error nothing is posted. [`Error::QueueFull`]
    /// when the send queue has no room for the whole batch, [`Error::CqFull`]
    /// when its CQ has no room for their completions (CQ credits): poll and
    /// post again. A batch larger than `max_send_wr` or the CQ, which could
    /// never fit, is [`Error::Invalid`].
    ///
    /// A QP that is not connected (RTS) refuses every WR with
    /// [`Error::QpState`].
    #[inline]
    pub fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<()> {
        if !matches!(self.state, QpState::Rts | QpState::Err) {
            return Err(Error::QpState {
                state: self.state,
                needs: "RTS (or ERR, where it is flushed)",
            });
        }
        let max_inline = self.max_inline();
        for w in wrs {
            match w.op {
                WrOp::AtomicCmpSwp { remote, .. } | WrOp::AtomicFetchAdd { remote, .. } => {
                    if w.inline || w.sges.len() != 1 || w.sges[0].len() != 8 {
                        return Err(Error::Invalid(
                            "an atomic takes exactly one 8-byte SGE for the old value, not inline"
                                .into(),
                        ));
                    }
                    if remote.addr % 8 != 0 {
                        return Err(Error::Invalid(format!(
                            "atomic remote address {:#x} is not 8-byte aligned",
                            remote.addr
                        )));
                    }
                }
                WrOp::RdmaRead { .. } if w.inline => {
                    return Err(Error::Invalid("an RDMA READ cannot be inline".into()));
                }
                _ => {}
            }
            if w.inline && w.total_len() > max_inline as u64 {
                return Err(Error::Invalid(format!(
                    "inline payload of {} bytes exceeds the QP's max_inline of {max_inline}",
                    w.total_len()
                )));
            }
            if w.total_len() > 1 << 31 {
                return Err(Error::Invalid(format!(
                    "message of {} bytes exceeds 2^31",
                    w.total_len()
                )));
            }
        }
        let r = match &mut self.kind {
            QpKind::Direct(q) => q.post_send(wrs),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => q.post_send(wrs),
        };
        match r {
            Err(Error::QueueFull | Error::CqFull) => {
                Err(self.never_fits(wrs.len(), self.cfg.max_send_wr, r.unwrap_err()))
            }
            r => r,
        }
    }

    /// A full queue or CQ (`e`) that polling cannot cure: a batch of `n`
    /// WRs larger than the queue (`queue`: `max_send_wr` or `max_recv_wr`)
    /// or the CQ is [`Error::Invalid`], so the caller does not retry it for
    /// ever.
    #[cold]
    fn never_fits(&self, n: usize, queue: u32, e: Error) -> Error {
        if n > queue as usize {
            return Error::Invalid(format!(
                "a batch of {n} WRs can never fit a queue of {queue} ({e})"
            ));
        }
        let depth = self.cq_depth();
        if n > depth as usize {
            return Error::Invalid(format!(
                "a batch of {n} WRs can never fit a CQ of {depth} CQEs ({e})"
            ));
        }
        e
    }

    /// Posts a batch of receive work requests with one doorbell. Every WR is
    /// checked first; on any error nothing is posted. [`Error::RecvQueueFull`]
    /// when the QP would hold more than `max_recv_wr` receives,
    /// [`Error::CqFull`] when its CQ has no room for their completions; a
    /// batch larger than either, which could never fit, is [`Error::Invalid`].
    ///
    /// A QP in RESET refuses every WR with [`Error::QpState`].
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        if self.state == QpState::Reset {
            return Err(Error::QpState {
                state: self.state,
                needs: "INIT or later",
            });
        }
        if self.cfg.max_recv_wr == 0 && !wrs.is_empty() {
            // (The verbs device was asked for one receive, as it must be.)
            return Err(Error::Invalid(
                "the QP was created with max_recv_wr 0: it takes no receives".into(),
            ));
        }
        let r = match &mut self.kind {
            QpKind::Direct(q) => q.post_recv(wrs),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => q.post_recv(wrs),
        };
        match r {
            Err(Error::RecvQueueFull | Error::CqFull) => {
                Err(self.never_fits(wrs.len(), self.cfg.max_recv_wr, r.unwrap_err()))
            }
            r => r,
        }
    }

    /// Waits for completions of the QP's own CQ in `mode` (busy polling,
    /// events, or adaptive: see [`CompletionMode`]): returns as soon as at
    /// least one is in `out`, or 0 when `timeout` passed first.
    ///
    /// Errors: `out` is empty ([`Error::Invalid`]); [`Error::SharedCq`] on a
    /// QP of a [`SharedCq`] (wait there); the device's.
    pub fn wait(
        &mut self,
        out: &mut [Completion],
        mode: CompletionMode,
        timeout: std::time::Duration,
    ) -> Result<usize> {
        cq::wait_on(self, out, mode, timeout)
    }

    /// Polls up to `out.len()` completions into `out`; returns how many.
    ///
    /// Errors: [`Error::SharedCq`] when the QP completes into a [`SharedCq`]
    /// (poll that); [`Error::StaleCqe`]; the device's.
    #[inline]
    pub fn poll(&mut self, out: &mut [Completion]) -> Result<usize> {
        match &mut self.kind {
            QpKind::Direct(q) => q.poll(out),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => q.poll(out),
        }
    }
}
