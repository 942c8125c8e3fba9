//! Layer 2: the backends. `direct` drives mlx5 rings with our own driver (the
//! sim and ConnectX); `verbs` posts and polls through `ibv_post_send` /
//! `ibv_poll_cq`; `ibv` is the verbs control path both need (devices, PDs,
//! MRs, CQs, QP state changes; every rdma-core call). Each imports only
//! layer 1 (`crate::ib`), `mlx5-dv` and `rdma-sys`; `direct` and `verbs`
//! never import each other.

pub(crate) mod direct;
#[cfg(feature = "verbs")]
pub(crate) mod ibv;
#[cfg(feature = "verbs")]
pub(crate) mod verbs;

use crate::ib::completion::Completion;
use crate::ib::error::{Error, Result};
use crate::ib::progress::WrProgress;
use crate::ib::qp_attr::{PathInfo, QpAttr, QpInfo, QpState};
use crate::ib::wr::{RecvWr, SendWrs};
use mlx5_dv::driver::CqCredits;
use std::sync::Arc;

/// A QP's work requests counted since it was created (a RESET retires what
/// was outstanding): what the front end and the PD's deregistration read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct WrCounts {
    /// Send WRs posted.
    pub sends_posted: u64,
    /// Send WRs retired (completed, flushed, or retired with a later signaled one).
    pub sends_retired: u64,
    /// Receive WRs posted.
    pub recvs_posted: u64,
    /// Receive WRs retired.
    pub recvs_retired: u64,
}

impl WrCounts {
    /// Sends and receives posted and not yet retired.
    #[inline]
    pub fn outstanding(&self) -> u64 {
        self.sends_posted.wrapping_sub(self.sends_retired)
            + self.recvs_posted.wrapping_sub(self.recvs_retired)
    }
}

/// What a QP's two backends, `direct::DirectQp` and `verbs::VerbsQp`, share:
/// one signature per method. The front end (`Qp`) holds one of them in an
/// enum and reaches them through this trait (`qp::backend!`): static
/// dispatch, each arm inlined, no box and no vtable on the data path. What
/// only one backend has (the direct path's in-place posts, the sim's test
/// hooks, a QP's halves' own steps) stays inherent.
pub(crate) trait QpBackend {
    /// Posts `wrs` with one doorbell, after room checks (the front end
    /// checked each WR against the QP's state and limits).
    fn post_send<W: SendWrs + ?Sized>(&mut self, wrs: &W) -> Result<()>;
    /// Posts receive WRs to the QP's own RQ.
    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<()>;
    /// Polls up to `out.len()` completions of the QP's own CQ.
    fn poll(&mut self, out: &mut [Completion]) -> Result<usize>;
    /// Requests one completion event of the QP's own CQ.
    fn arm_cq(&mut self, solicited_only: bool) -> Result<()>;
    /// Waits up to `timeout` for the armed CQ's event; `true` if it came.
    fn wait_cq_event(&mut self, timeout: std::time::Duration) -> Result<bool>;
    /// How an async wait learns of the next event of the QP's own CQ.
    fn event_wake(&mut self, waker: &std::task::Waker) -> Result<EventWake<'_>>;
    /// Takes the CQ events raised since the last call; how many.
    fn take_events(&mut self) -> Result<u32>;
    /// Moves the QP from `from` to `to` with `attr` (checked by the caller).
    fn modify(&mut self, from: QpState, to: QpState, attr: &QpAttr) -> Result<()>;
    /// The device's view of the QP.
    fn query(&self) -> Result<QpInfo>;
    /// The QP's WRs counted ([`WrCounts`]).
    fn counts(&self) -> WrCounts;
    /// What the PD watches to deregister dropped MRs.
    fn progress(&self) -> &Arc<WrProgress>;
    /// Depth of the QP's CQ, in CQEs.
    fn cq_depth(&self) -> u32;
    /// The most SGEs a send WR may carry.
    fn max_send_sge(&self) -> u32;
    /// The QP number (24 bits).
    fn qpn(&self) -> u32;
    /// The connection's path as this crate set it.
    fn path(&self) -> PathInfo;
    /// Sets the connection's path.
    fn set_path(&mut self, p: PathInfo);
}

/// `impl QpBackend for $t`, each method the inherent one of the same name
/// and signature (inlined: the front end's dispatch costs nothing over
/// calling it directly). One impl for both backends, so the two cannot
/// drift apart.
macro_rules! qp_backend_by_inherent {
    ($t:ty) => {
        impl QpBackend for $t {
            #[inline(always)]
            fn post_send<W: SendWrs + ?Sized>(&mut self, wrs: &W) -> Result<()> {
                <$t>::post_send(self, wrs)
            }
            #[inline(always)]
            fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
                <$t>::post_recv(self, wrs)
            }
            #[inline(always)]
            fn poll(&mut self, out: &mut [Completion]) -> Result<usize> {
                <$t>::poll(self, out)
            }
            #[inline(always)]
            fn arm_cq(&mut self, solicited_only: bool) -> Result<()> {
                <$t>::arm_cq(self, solicited_only)
            }
            #[inline(always)]
            fn wait_cq_event(&mut self, timeout: std::time::Duration) -> Result<bool> {
                <$t>::wait_cq_event(self, timeout)
            }
            #[inline(always)]
            fn event_wake(&mut self, waker: &std::task::Waker) -> Result<EventWake<'_>> {
                <$t>::event_wake(self, waker)
            }
            #[inline(always)]
            fn take_events(&mut self) -> Result<u32> {
                <$t>::take_events(self)
            }
            #[inline(always)]
            fn modify(&mut self, from: QpState, to: QpState, attr: &QpAttr) -> Result<()> {
                <$t>::modify(self, from, to, attr)
            }
            #[inline(always)]
            fn query(&self) -> Result<QpInfo> {
                <$t>::query(self)
            }
            #[inline(always)]
            fn counts(&self) -> WrCounts {
                <$t>::counts(self)
            }
            #[inline(always)]
            fn progress(&self) -> &Arc<WrProgress> {
                <$t>::progress(self)
            }
            #[inline(always)]
            fn cq_depth(&self) -> u32 {
                <$t>::cq_depth(self)
            }
            #[inline(always)]
            fn max_send_sge(&self) -> u32 {
                <$t>::max_send_sge(self)
            }
            #[inline(always)]
            fn qpn(&self) -> u32 {
                <$t>::qpn(self)
            }
            #[inline(always)]
            fn path(&self) -> PathInfo {
                <$t>::path(self)
            }
            #[inline(always)]
            fn set_path(&mut self, p: PathInfo) {
                <$t>::set_path(self, p)
            }
        }
    };
}

qp_backend_by_inherent!(direct::DirectQp);
#[cfg(feature = "verbs")]
qp_backend_by_inherent!(verbs::VerbsQp);

/// The QPs of a shared CQ as the front end keeps them: what a backend's
/// poller needs to hand each completion to the QP (of type `Q`) its QPN
/// names, and the CQ credits their retired WRs give back.
pub(crate) trait SharedQps<Q> {
    /// The QP numbered `qpn` that completes into this CQ, if any.
    fn find(&mut self, qpn: u32) -> Option<&mut Q>;
    /// The CQ's credits.
    fn credits(&mut self) -> &mut CqCredits;
}
/// Registers `fd` (owned: it stays open, and the same, for the `AsyncFd`'s
/// life) for readability with the current tokio runtime's reactor.
///
/// Errors: the registration's (no runtime is checked by the caller).
/// With `write`, for writability instead.
#[cfg(feature = "tokio")]
pub(crate) fn tokio_readable(
    fd: std::os::fd::OwnedFd,
    write: bool,
) -> std::io::Result<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    let interest = if write {
        tokio::io::Interest::WRITABLE
    } else {
        tokio::io::Interest::READABLE
    };
    // SAFETY: an `OwnedFd` is open until dropped, which the `AsyncFd`
    // (owning it) does last, and its `as_raw_fd` always returns the same
    // descriptor.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, interest) }
        .map_err(|e| std::io::Error::other(e.to_string()))
}

/// How an async wait learns of a CQ's next completion event: the device
/// wakes the waker itself (the sim), or the CQ's completion channel's file
/// descriptor becomes readable (verbs, ConnectX) and a reactor watches it.
pub(crate) enum EventWake<'a> {
    /// The waker is registered with the device.
    Registered,
    /// Watch this (non-blocking) fd for readability.
    #[cfg_attr(not(feature = "verbs"), allow(dead_code))]
    Fd(std::os::fd::BorrowedFd<'a>),
}

/// Waits up to `timeout` (rounded up to whole ms: a 100 us wait must not
/// become a 0 ms busy poll) for `fd` to become readable; `what` names it in
/// errors. The one wait of event mode, on both data paths.
pub(crate) fn wait_readable(
    fd: std::os::fd::BorrowedFd<'_>,
    timeout: std::time::Duration,
    what: &str,
) -> Result<bool> {
    wait_ready(fd, false, timeout, what)
}

/// [`wait_readable`], or with `write` for writability.
pub(crate) fn wait_ready(
    fd: std::os::fd::BorrowedFd<'_>,
    write: bool,
    timeout: std::time::Duration,
    what: &str,
) -> Result<bool> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
    let flags = if write {
        PollFlags::POLLOUT
    } else {
        PollFlags::POLLIN
    };
    let mut fds = [PollFd::new(fd, flags)];
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
