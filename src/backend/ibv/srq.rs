//! SRQs through libibverbs: `ibv_create_srq`, `ibv_modify_srq` (the
//! limit), `ibv_post_srq_recv` (the verbs path) and `ibv_destroy_srq`.

use super::{check_detail, errno, Pd};
use crate::ib::error::{Error, Result};
use rdma_sys::*;
use std::mem::MaybeUninit;
use std::sync::Arc;

/// An SRQ. Kept by `Arc` by the SRQ's handle and every QP on it; destroyed
/// after the last (`ibv_destroy_srq` fails while a QP names it).
pub(crate) struct VerbsSrq {
    pub(crate) raw: *mut ibv_srq,
    /// What the provider granted (`ibv_srq_init_attr.attr` after the call).
    pub(crate) max_wr: u32,
    pub(crate) max_sge: u32,
    srqn: u32,
    _pd: Arc<Pd>,
}

// SAFETY: one owner posts to the SRQ and modifies it (`&mut Srq`); the QPs
// holding it only name it at creation; rdma-core's SRQ calls lock
// internally.
unsafe impl Send for VerbsSrq {}
// SAFETY: as for `Send`: through `&VerbsSrq` the SRQ is only named (at QP
// creation) or called through rdma-core's locked SRQ calls.
unsafe impl Sync for VerbsSrq {}

impl Drop for VerbsSrq {
    fn drop(&mut self) {
        // SAFETY: created in `create`; every QP on it holds this object, so
        // none is left.
        unsafe { ibv_destroy_srq(self.raw) };
    }
}

impl VerbsSrq {
    /// `ibv_create_srq` on `pd` for `max_wr` receives of `max_sge` SGEs
    /// (no limit armed).
    pub(crate) fn create(pd: &Arc<Pd>, max_wr: u32, max_sge: u32) -> Result<Self> {
        // SAFETY: plain data; zero is valid.
        let mut attr: ibv_srq_init_attr = unsafe { std::mem::zeroed() };
        attr.attr.max_wr = max_wr;
        attr.attr.max_sge = max_sge;
        // SAFETY: live PD; `attr` valid for the call.
        let raw = unsafe { ibv_create_srq(pd.raw, &mut attr) };
        if raw.is_null() {
            return Err(Error::Verbs {
                call: "ibv_create_srq",
                errno: errno(),
                detail: format!(" (max_wr {max_wr}, max_sge {max_sge})"),
            });
        }
        let srqn = srq_num_of(raw);
        Ok(VerbsSrq {
            raw,
            max_wr: attr.attr.max_wr,
            max_sge: attr.attr.max_sge,
            srqn,
            _pd: pd.clone(),
        })
    }

    /// The SRQ number ([`srq_num_of`]).
    pub(crate) fn srqn(&self) -> u32 {
        self.srqn
    }

    /// Arms the limit: `ibv_modify_srq` with `IBV_SRQ_LIMIT` (0 disarms).
    pub(crate) fn set_limit(&self, limit: u32) -> Result<()> {
        let mut attr = ibv_srq_attr {
            max_wr: 0,
            max_sge: 0,
            srq_limit: limit,
        };
        // SAFETY: live SRQ; `attr` valid for the call.
        let rc = unsafe {
            ibv_modify_srq(
                self.raw,
                &mut attr,
                ibv_srq_attr_mask::IBV_SRQ_LIMIT.0 as i32,
            )
        };
        check_detail("ibv_modify_srq", rc, || format!(" (srq_limit {limit})"))
    }
}

/// The SRQ number this crate reports for `raw`: `ibv_get_srq_num` where the
/// provider has it, else the SRQ's kernel handle (`ibv_srq.handle`), so
/// that an async event names the SRQ as `Srq::srq_num` does.
pub(crate) fn srq_num_of(raw: *mut ibv_srq) -> u32 {
    let mut n = 0;
    // SAFETY: a live SRQ (the caller's).
    if unsafe { ibv_get_srq_num(raw, &mut n) } == 0 {
        n
    } else {
        // SAFETY: as above.
        unsafe { (*raw).handle }
    }
}
/// The context's async event fd (`ibv_context.async_fd`), made
/// non-blocking, borrowed for as long as `ctx`.
///
/// Errors: `fcntl` ([`Error::Os`]).
fn nonblocking_async_fd(ctx: &super::Ctx) -> Result<std::os::fd::BorrowedFd<'_>> {
    // SAFETY: a live context.
    let fd = unsafe { (*ctx.raw).async_fd };
    // SAFETY: the context keeps its fd open while it lives, and the
    // borrow is `ctx`'s.
    let bfd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let flags = nix::fcntl::fcntl(bfd, nix::fcntl::FcntlArg::F_GETFL).map_err(|e| Error::Os {
        what: "fcntl(async_fd)".into(),
        source: e.into(),
    })?;
    let nb = nix::fcntl::OFlag::from_bits_retain(flags) | nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(bfd, nix::fcntl::FcntlArg::F_SETFL(nb)).map_err(|e| Error::Os {
        what: "fcntl(async_fd)".into(),
        source: e.into(),
    })?;
    Ok(bfd)
}

/// A duplicate of the context's async event fd, made non-blocking: what
/// an async event stream watches.
///
/// Errors: `fcntl` or `dup` ([`Error::Os`]).
pub(crate) fn async_fd(ctx: &super::Ctx) -> Result<std::os::fd::OwnedFd> {
    nonblocking_async_fd(ctx)?
        .try_clone_to_owned()
        .map_err(|e| Error::Os {
            what: "dup(async_fd)".into(),
            source: e,
        })
}

/// Reads one async event of `ctx` (`ibv_get_async_event` on its
/// `async_fd`, made non-blocking; `poll(2)` up to `timeout` first), then
/// acknowledges it (`ibv_ack_async_event`): `None` when none came in time.
pub(crate) fn get_async_event(
    ctx: &super::Ctx,
    timeout: std::time::Duration,
) -> Result<Option<crate::ib::event::AsyncEvent>> {
    use crate::ib::event::AsyncEvent as E;
    let bfd = nonblocking_async_fd(ctx)?;
    let mut ev = MaybeUninit::<ibv_async_event>::zeroed();
    // SAFETY: live context; `ev` is written by the call when it returns 0.
    let mut rc = unsafe { ibv_get_async_event(ctx.raw, ev.as_mut_ptr()) };
    if rc != 0 {
        if !crate::backend::wait_readable(bfd, timeout, "the device's async_fd")? {
            return Ok(None);
        }
        // SAFETY: as above.
        rc = unsafe { ibv_get_async_event(ctx.raw, ev.as_mut_ptr()) };
        if rc != 0 {
            let e = super::errno();
            if e == libc::EAGAIN {
                return Ok(None);
            }
            return Err(Error::Verbs {
                call: "ibv_get_async_event",
                errno: e,
                detail: String::new(),
            });
        }
    }
    let p = ev.as_mut_ptr();
    // The type is read as the C enum's u32, whatever its value (the Rust
    // enum of the binding would not take an unknown one).
    // SAFETY: `ev` was written by the call.
    let kind = unsafe { std::ptr::addr_of!((*p).event_type).cast::<u32>().read() };
    // SAFETY: the union member read is the one the event type names.
    let out = unsafe {
        let el = std::ptr::addr_of!((*p).element);
        let qp = || (*el.cast::<*mut ibv_qp>().read()).qp_num;
        let port = || el.cast::<i32>().read() as u8;
        match kind {
            0 => E::CqError { cq_num: 0 },
            1 => E::QpFatal { qp_num: qp() },
            5 => E::SqDrained { qp_num: qp() },
            9 => E::PortActive { port: port() },
            10 => E::PortError { port: port() },
            15 => E::SrqLimitReached {
                srq_num: srq_num_of(el.cast::<*mut ibv_srq>().read()),
            },
            16 => E::QpLastWqeReached { qp_num: qp() },
            t => E::Other { event_type: t },
        }
    };
    // SAFETY: the event read above, acknowledged once.
    unsafe { ibv_ack_async_event(p) };
    Ok(Some(out))
}
