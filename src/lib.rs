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
#![deny(unsafe_op_in_unsafe_fn)]

/// The README's library example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

// Layer 1: shared types (no backend, no handle).
mod types;
// Layer 2: the backends.
mod backend;
// Layer 3: the front end users hold.
mod channel;
#[cfg(feature = "verbs")]
pub mod cm;
mod cm_wait;
mod completions;
mod context;
mod cq;
mod events;
pub mod exchange;
mod handles;
mod owned;
mod pd;
pub mod pool;
mod qp;
mod qp_create;
mod qp_fast;
mod qp_owned;
mod qp_ud;
pub mod reactor;
mod reclaim;
mod split;
mod srq;
#[cfg(feature = "test-hooks")]
pub mod testing;
mod wait;

/// RDMA's concepts (memory registration, QPs and their states, CQs and
/// CQEs, WRs and WQEs, SGEs) mapped to this crate's types; every example
/// compiles and runs as a doc test. The text is `docs/concepts.md`.
#[doc = include_str!("../docs/concepts.md")]
pub mod concepts {}

pub use channel::CompChannel;
pub use completions::Completions;
pub use context::{list_devices, Context};
pub use cq::SharedCq;
pub use events::AsyncEvents;
/// The `memmap2` this crate's [`Memory`] takes mappings of (0.9): use it,
/// or the same version, to map what you register.
pub use memmap2;
pub use pd::Pd;
pub use qp::Qp;
#[cfg(feature = "tokio")]
pub use reactor::TokioReactor;
pub use reactor::{Reactor, ReadyFd, ThreadReactor};
pub use split::{RecvHalf, SendHalf};
pub use srq::Srq;
pub use types::ah::Ah;
pub use types::completion::{Completion, SrcQp, WcOpcode, WcStatus};
pub use types::config::{CompletionMode, CqSizing, QpConfig};
pub use types::device::{Backend, DeviceInfo, GidEntry, PortDetail, SIM_DEVICE};
pub use types::error::RegRefusal;
pub use types::error::{Error, Result};
pub use types::event::AsyncEvent;
pub use types::keys::{Lkey, RemoteAddr, Rkey};
pub use types::mem::{Access, AlignedBuf, MemfdPages, Memory, Pages};
pub use types::mr::{LocalMr, Mr, Refused};
pub use types::qp_attr;
pub use types::qp_attr::{
    AddressVector, Endpoint, Grh, PathInfo, QpAttr, QpAttrMask, QpInfo, QpType,
};
pub use types::qp_state::QpState;
pub use types::wr::{RecvWr, SendFlags, SendWr, Sge, UdDest, WrOp, WriteWr};
