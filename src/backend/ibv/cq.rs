//! CQs with their completion channels: created, polled, armed and waited on
//! through libibverbs.

use super::{check_detail, errno, Ctx};
use crate::types::error::{Error, Result};
use rdma_sys::*;
use std::sync::Arc;

/// A CQ with its completion channel (event mode; the channel's fd is
/// non-blocking). Held by `Arc` by the QPs that complete into it and by
/// whoever polls it (a QP's own CQ, or a [`crate::SharedCq`]); destroyed
/// after the last of them: `ibv_destroy_cq`, then the channel.
pub(crate) struct VerbsCq {
    pub(crate) cq: *mut ibv_cq,
    channel: *mut ibv_comp_channel,
    /// CQEs the CQ holds, as the provider made it (`ibv_cq.cqe`).
    pub(crate) depth: u32,
    _ctx: Arc<Ctx>,
}

// SAFETY: one owner polls, arms and waits on the CQ (`&mut Qp` for a QP's
// own CQ, `&mut SharedCq` for a shared one); the other holders of the `Arc`
// only keep it alive for their QP; rdma-core's CQ calls lock internally.
unsafe impl Send for VerbsCq {}
unsafe impl Sync for VerbsCq {}

impl Drop for VerbsCq {
    fn drop(&mut self) {
        // SAFETY: created in `VerbsCq::create`; every QP completing into it
        // was destroyed first (they hold this `Arc`); the CQ goes before its
        // channel (events were acked as they came).
        unsafe {
            ibv_destroy_cq(self.cq);
            ibv_destroy_comp_channel(self.channel);
        }
    }
}

impl VerbsCq {
    /// `ibv_create_comp_channel` (fd made non-blocking), then
    /// `ibv_create_cq` of at least `depth` CQEs on it.
    pub(crate) fn create(ctx: &Arc<Ctx>, depth: u32) -> Result<Arc<VerbsCq>> {
        // SAFETY: live context.
        let channel = unsafe { ibv_create_comp_channel(ctx.raw) };
        if channel.is_null() {
            return Err(Error::Verbs {
                call: "ibv_create_comp_channel",
                errno: errno(),
                detail: String::new(),
            });
        }
        // SAFETY: `channel` is live; fcntl on its fd changes only its flags.
        unsafe {
            let fd = (*channel).fd;
            libc::fcntl(
                fd,
                libc::F_SETFL,
                libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
            );
        }
        // SAFETY: live context and channel.
        let cq = unsafe {
            ibv_create_cq(
                ctx.raw,
                depth.min(i32::MAX as u32) as i32,
                std::ptr::null_mut(),
                channel,
                0,
            )
        };
        if cq.is_null() {
            let e = errno();
            // SAFETY: created above, unused.
            unsafe { ibv_destroy_comp_channel(channel) };
            return Err(Error::Verbs {
                call: "ibv_create_cq",
                errno: e,
                detail: format!(" ({depth} CQEs)"),
            });
        }
        // SAFETY: non-null CQ; `cqe` is the depth the provider gave it.
        let depth = unsafe { (*cq).cqe }.max(1) as u32;
        Ok(Arc::new(VerbsCq {
            cq,
            channel,
            depth,
            _ctx: ctx.clone(),
        }))
    }

    /// `ibv_req_notify_cq`: one completion event for the next completion
    /// (with `solicited_only`, the next solicited or error one).
    pub(crate) fn arm(&self, solicited_only: bool) -> Result<()> {
        // SAFETY: live CQ.
        let rc = unsafe { ibv_req_notify_cq(self.cq, solicited_only as i32) };
        check_detail("ibv_req_notify_cq", rc, String::new)
    }

    /// Waits up to `timeout` for a completion event ([`wait_channel`]).
    pub(crate) fn wait(&self, timeout: std::time::Duration) -> Result<bool> {
        wait_channel(self.channel, timeout)
    }

    /// `ibv_poll_cq` for up to `store.len()` (at most 16) completions.
    #[inline]
    pub(crate) fn poll_into<'s>(
        &self,
        store: &'s mut [std::mem::MaybeUninit<ibv_wc>; 16],
        want: usize,
    ) -> Result<&'s [ibv_wc]> {
        let want = want.min(store.len());
        // SAFETY: live CQ; `store` has room for `want` entries.
        let n = unsafe { ibv_poll_cq(self.cq, want as i32, store.as_mut_ptr().cast()) };
        if n < 0 {
            return Err(Error::Verbs {
                call: "ibv_poll_cq",
                errno: -n,
                detail: String::new(),
            });
        }
        // SAFETY: ibv_poll_cq wrote the first `n` (<= `want`) entries.
        Ok(unsafe { std::slice::from_raw_parts(store.as_ptr().cast(), n as usize) })
    }

    /// Discards the events raised and the completions written so far (a QP
    /// with its own CQ going to RESET).
    pub(crate) fn drain(&self) {
        while self.wait(std::time::Duration::ZERO).unwrap_or(false) {}
        // SAFETY: plain data; zero is valid.
        let mut wc: [ibv_wc; 16] = unsafe { std::mem::zeroed() };
        // SAFETY: live CQ; `wc` holds 16 entries.
        while unsafe { ibv_poll_cq(self.cq, 16, wc.as_mut_ptr()) } > 0 {}
    }
}

/// Waits (poll on the completion channel's fd) up to `timeout` for a
/// completion event, then `ibv_get_cq_event` and `ibv_ack_cq_events`.
pub(crate) fn wait_channel(
    channel: *mut ibv_comp_channel,
    timeout: std::time::Duration,
) -> Result<bool> {
    // SAFETY: the caller keeps the channel (and its fd) alive.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw((*channel).fd) };
    if !crate::backend::wait_readable(fd, timeout, "completion channel")? {
        return Ok(false);
    }
    let mut cq: *mut ibv_cq = std::ptr::null_mut();
    let mut ctx: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: live channel; out-pointers valid. Non-blocking fd: EAGAIN
    // when another reader took the event.
    let rc = unsafe { ibv_get_cq_event(channel, &mut cq, &mut ctx) };
    if rc != 0 {
        let e = errno();
        if e == libc::EAGAIN {
            return Ok(false);
        }
        return Err(Error::Verbs {
            call: "ibv_get_cq_event",
            errno: e,
            detail: String::new(),
        });
    }
    // SAFETY: `cq` is the CQ the event was for (ours); one event to ack.
    unsafe { ibv_ack_cq_events(cq, 1) };
    Ok(true)
}
