//! rdma-direct: kernel-bypass RDMA for mlx5 (ConnectX) with a portable verbs
//! path for every other RDMA device, and an embedded software mlx5 device
//! (`sim`) so everything runs without RDMA hardware.
//!
//! ```no_run
//! use rdma_direct::{Access, Context, QpConfig, RemoteAddr, SendWr, Sge, Completion};
//! let ctx = Context::open("sim")?;
//! let pd = ctx.alloc_pd()?;
//! let src = pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
//! let dst = pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
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
//! - A [`LocalMr`] is `Send + Sync` too, but not `Clone`: one owner at a
//!   time, moved into a QP's WR and back.
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
//!
//! # The verbs backend's calls
//!
//! On devices other than mlx5 the verbs backend posts with rdma-core's
//! extended verbs (`ibv_create_qp_ex` with the send ops, `ibv_wr_*`) and
//! polls with `ibv_create_cq_ex` / `ibv_start_poll` where the provider has
//! them, else with `ibv_post_send` / `ibv_poll_cq`.
//! `RDMA_DIRECT_VERBS_OLD_POST=1` (read once) forces the old calls.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

/// The README's library example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

// Layer 1: the verbs' vocabulary (no backend, no handle): WRs,
// completions, keys and access, QP states and attributes, errors.
mod ib;
// Layer 2: the backends.
mod backend;
// Layer 3: the front end users hold, by what it is.
mod connect;
mod cq;
mod device;
mod pd;
mod qp;
pub mod reactor;
mod srq;
#[cfg(feature = "test-hooks")]
pub mod testing;

/// RDMA's concepts (memory registration, QPs and their states, CQs and
/// CQEs, WRs and WQEs, SGEs) mapped to this crate's types; every example
/// compiles and runs as a doc test. The text is `docs/concepts.md`.
#[doc = include_str!("../docs/concepts.md")]
pub mod concepts {}

#[cfg(feature = "verbs")]
pub use connect::cm;
pub use connect::exchange;
pub use cq::channel::CompChannel;
pub use cq::completions::Completions;
pub use cq::SharedCq;
pub use device::context::{list_devices, Context};
pub use device::events::AsyncEvents;
pub use ib::ah::Ah;
pub use ib::completion::{Completion, SrcQp, WcOpcode, WcStatus};
pub use ib::config::{CompletionMode, CqSizing, InlineRecv, QpConfig};
pub use ib::device::{
    Backend, DataPath, DeviceInfo, GidEntry, OdpCaps, OdpOps, PortDetail, SIM_DEVICE,
};
pub use ib::error::RegRefusal;
pub use ib::error::{Error, Feature, PdObject, Queue, Result};
pub use ib::event::AsyncEvent;
pub use ib::keys::{Lkey, RemoteAddr, Rkey};
pub use ib::mem::{Access, AlignedBuf, MemfdPages, Memory, OdpAdvice, Pages};
pub use ib::mr::{LocalMr, Mr, Refused};
pub use ib::mw::{Mw, MwBind, MwRefusal, MwType};
pub use ib::qp_attr;
pub use ib::qp_attr::{AddressVector, Endpoint, Grh, PathInfo, QpAttr, QpAttrMask, QpInfo, QpType};
pub use ib::qp_state::QpState;
pub use ib::wr::{AtomicSize, DcDest, RecvWr, SendFlags, SendWr, Sge, UdDest, WrOp, WriteWr};
/// The `memmap2` this crate's [`Memory`] takes mappings of (0.9): use it,
/// or the same version, to map what you register.
pub use memmap2;
pub use pd::dci_pool::DciPool;
pub use pd::pool;
pub use pd::Pd;
pub use qp::split::{RecvHalf, SendHalf};
pub use qp::Qp;
#[cfg(feature = "tokio")]
pub use reactor::TokioReactor;
pub use reactor::{Reactor, ReadyFd, ThreadReactor};
pub use srq::Srq;
