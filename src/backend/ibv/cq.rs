//! CQs with their completion channels: created, polled, armed and waited on
//! through libibverbs.

use super::{check_detail, errno, Ctx};
use crate::ib::error::{Error, Result};
use rdma_sys::*;
use std::sync::Arc;

/// A completion channel (`ibv_create_comp_channel`, its fd made
/// non-blocking): a CQ's own, or one several CQs share. Destroyed after the
/// last CQ on it (each holds this `Arc`).
pub(crate) struct VerbsChannel {
    raw: *mut ibv_comp_channel,
    _ctx: Arc<Ctx>,
}

// SAFETY: rdma-core's channel calls (`ibv_get_cq_event`, a `read` of the
// fd) are thread-safe; the pointer is only destroyed in `drop`.
unsafe impl Send for VerbsChannel {}
// SAFETY: as for `Send`: the channel calls made through `&VerbsChannel`
// are thread-safe, and destroying it needs `drop`'s `&mut`.
unsafe impl Sync for VerbsChannel {}

impl Drop for VerbsChannel {
    fn drop(&mut self) {
        // SAFETY: created in `VerbsChannel::create`; every CQ on it holds
        // this `Arc` and was destroyed first.
        unsafe { ibv_destroy_comp_channel(self.raw) };
    }
}

impl VerbsChannel {
    /// `ibv_create_comp_channel`, its fd made non-blocking.
    pub(crate) fn create(ctx: &Arc<Ctx>) -> Result<Arc<VerbsChannel>> {
        // SAFETY: live context.
        let raw = unsafe { ibv_create_comp_channel(ctx.raw) };
        if raw.is_null() {
            return Err(Error::Verbs {
                call: "ibv_create_comp_channel",
                errno: errno(),
                detail: String::new(),
            });
        }
        // SAFETY: `raw` is live; fcntl on its fd changes only its flags.
        unsafe {
            let fd = (*raw).fd;
            libc::fcntl(
                fd,
                libc::F_SETFL,
                libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
            );
        }
        Ok(Arc::new(VerbsChannel {
            raw,
            _ctx: ctx.clone(),
        }))
    }

    /// The channel's fd (non-blocking), readable while an event waits.
    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // SAFETY: the channel is destroyed only in `drop`, after every
        // borrow of `self` (this one included).
        unsafe { std::os::fd::BorrowedFd::borrow_raw((*self.raw).fd) }
    }

    /// Whether `ctx` is the device context the channel was made on.
    pub(crate) fn of(&self, ctx: &Arc<Ctx>) -> bool {
        Arc::ptr_eq(&self._ctx, ctx)
    }

    /// Takes one completion event without blocking (`ibv_get_cq_event` on
    /// the non-blocking fd, acknowledged at once with `ibv_ack_cq_events`
    /// after `seen` has been called with its CQ's `cq_context`): what
    /// `seen` returned, or `None` if no event waits. A CQ's destruction
    /// waits for the ack of every event read of it (rdma-core's
    /// `ibv_destroy_cq`), so `seen` runs while the CQ lives.
    pub(crate) fn get_event<T>(&self, seen: impl FnOnce(u64) -> T) -> Result<Option<T>> {
        let mut cq: *mut ibv_cq = std::ptr::null_mut();
        let mut ctx: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: live channel; out-pointers valid. Non-blocking fd: EAGAIN
        // when none waits (or another reader took it).
        let rc = unsafe { ibv_get_cq_event(self.raw, &mut cq, &mut ctx) };
        if rc != 0 {
            let e = errno();
            if e == libc::EAGAIN {
                return Ok(None);
            }
            return Err(Error::Verbs {
                call: "ibv_get_cq_event",
                errno: e,
                detail: String::new(),
            });
        }
        let out = seen(ctx as u64);
        // SAFETY: `cq` is the CQ the event was for, alive until this ack
        // (its destruction waits for it); one event to ack.
        unsafe { ibv_ack_cq_events(cq, 1) };
        Ok(Some(out))
    }
}

/// The completion fields an extended verbs CQ is made with: those a
/// `Completion` carries beyond what every `ibv_cq_ex` gives (`wr_id`,
/// `status`, the opcode, `vendor_err`, `wc_flags`).
const WC_FLAGS: u64 = (ibv_create_cq_wc_flags::IBV_WC_EX_WITH_BYTE_LEN.0
    | ibv_create_cq_wc_flags::IBV_WC_EX_WITH_IMM.0
    | ibv_create_cq_wc_flags::IBV_WC_EX_WITH_QP_NUM.0
    | ibv_create_cq_wc_flags::IBV_WC_EX_WITH_SRC_QP.0) as u64;

/// The `wc_flags` bit of completion timestamps (`ibv_create_cq_ex(3)`):
/// each completion carries one, read by `ibv_wc_read_completion_ts`.
const WC_TIMESTAMP: u64 = ibv_create_cq_wc_flags::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP.0 as u64;

/// The `wc_flags` with which a completion's `imm_data` /
/// `invalidated_rkey` union may hold something: an immediate
/// (`IBV_WC_WITH_IMM`) or the rkey a SEND with invalidate invalidated
/// (`IBV_WC_WITH_INV`, or `1 << 2`, the kernel's `IB_WC_WITH_INVALIDATE`
/// that rxe hands on unconverted: `backend/verbs` `KERNEL_WITH_INV`); read
/// by one reader, `read_imm_data` (`ibv_wc_read_invalidated_rkey` is the
/// same call, `verbs.h`). The verbs backend decides what the value is.
const IMM_OR_INV: u32 =
    ibv_wc_flags::IBV_WC_WITH_IMM.0 | ibv_wc_flags::IBV_WC_WITH_INV.0 | (1 << 2);

/// The current completion of an extended CQ's poll as an `ibv_wc` (the
/// fields a `Completion` reads; the rest zero).
///
/// # Safety
/// `ex` is a live extended CQ made with [`WC_FLAGS`], inside a poll whose
/// `ibv_start_poll` / `ibv_next_poll` returned 0.
#[inline]
unsafe fn read_wc(ex: *mut ibv_cq_ex) -> ibv_wc {
    // SAFETY: plain data; zero is valid.
    let mut w: ibv_wc = unsafe { std::mem::zeroed() };
    // SAFETY: the caller's contract: the readers are valid for the current
    // completion, and the CQ was made with the fields read (BYTE_LEN, IMM,
    // QP_NUM, SRC_QP; opcode, vendor_err and wc_flags are always there).
    unsafe {
        w.wr_id = (*ex).wr_id;
        w.status = (*ex).status;
        w.opcode = ibv_wc_read_opcode(ex);
        w.vendor_err = ibv_wc_read_vendor_err(ex);
        w.wc_flags = ibv_wc_read_wc_flags(ex);
        w.byte_len = ibv_wc_read_byte_len(ex);
        w.qp_num = ibv_wc_read_qp_num(ex);
        w.src_qp = ibv_wc_read_src_qp(ex);
        if w.wc_flags & IMM_OR_INV != 0 {
            // (`ibv_wc_read_invalidated_rkey` is the same reader: the
            // union's other member, host order.)
            w.imm_data_invalidated_rkey_union.imm_data = ibv_wc_read_imm_data(ex);
        }
    }
    w
}

/// A CQ with its completion channel (event mode): its own, or one it shares
/// with other CQs ([`VerbsCq::create_on`]). Held by `Arc` by the QPs that
/// complete into it and by whoever polls it (a QP's own CQ, or a
/// [`crate::SharedCq`]); destroyed after the last of them: `ibv_destroy_cq`,
/// then (the last `Arc` of) the channel.
pub(crate) struct VerbsCq {
    pub(crate) cq: *mut ibv_cq,
    /// The same CQ as an `ibv_cq_ex` made with the completion fields
    /// [`WC_FLAGS`] names (`ibv_create_cq_ex`): polled with
    /// `ibv_start_poll` / `ibv_next_poll` / `ibv_end_poll`. Null where it
    /// was made by `ibv_create_cq` (the provider has no `create_cq_ex`, it
    /// refused the fields, [`super::old_verbs`] forces the old calls) or
    /// for the direct path: then `ibv_poll_cq`.
    ex: *mut ibv_cq_ex,
    channel: Arc<VerbsChannel>,
    /// The channel is shared: its events are read there, never here.
    shared_channel: bool,
    /// CQEs the CQ holds, as the provider made it (`ibv_cq.cqe`).
    pub(crate) depth: u32,
    /// Made with `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN` ([`Self::create_ex`]):
    /// the device never reads its consumer-index record.
    pub(crate) ignores_overrun: bool,
    /// Made with [`WC_TIMESTAMP`] ([`Self::create_stamped`]): on the verbs
    /// path [`Self::poll_stamped`] reads each completion's timestamp; on
    /// the direct path its CQEs carry one at byte 48.
    pub(crate) timestamps: bool,
    /// The provider's entry points [`Self::poll_one`] calls were found set
    /// at creation ([`poll_ops_set`]): `start_poll`, `end_poll` and the
    /// readers of the fields a `Completion` carries (and
    /// `read_completion_ts` with `timestamps`) on an extended CQ, else the
    /// context's `poll_cq`.
    pub(crate) one_ok: bool,
}

/// Whether the entry points [`VerbsCq::poll_one`] calls are set on the CQ
/// (`ex` its extended form, or null; `timestamps`: made with them).
///
/// # Safety
/// `cq` is a live CQ and `ex` null or its `ibv_cq_ex`.
unsafe fn poll_ops_set(cq: *mut ibv_cq, ex: *mut ibv_cq_ex, timestamps: bool) -> bool {
    // SAFETY: the caller's contract: both live (reads of plain fields).
    unsafe {
        if ex.is_null() {
            return !timestamps && (*(*cq).context).ops.poll_cq.is_some();
        }
        let x = &*ex;
        x.start_poll.is_some()
            && x.end_poll.is_some()
            && x.read_opcode.is_some()
            && x.read_vendor_err.is_some()
            && x.read_wc_flags.is_some()
            && x.read_byte_len.is_some()
            && x.read_qp_num.is_some()
            && x.read_src_qp.is_some()
            && x.read_imm_data.is_some()
            && (!timestamps || x.read_completion_ts.is_some())
    }
}

/// `Option::unwrap_unchecked` of a provider entry point.
///
/// # Safety
/// `f` is `Some` (checked at creation: [`poll_ops_set`]).
#[inline(always)]
unsafe fn set<F>(f: Option<F>) -> F {
    // SAFETY: the caller's contract.
    unsafe { f.unwrap_unchecked() }
}

#[cold]
#[inline(never)]
fn poll_error(call: &'static str, rc: i32) -> Error {
    Error::Verbs {
        call,
        errno: rc,
        detail: String::new(),
    }
}

// SAFETY: one owner polls, arms and waits on the CQ (`&mut Qp` for a QP's
// own CQ, `&mut SharedCq` for a shared one); the other holders of the `Arc`
// only keep it alive for their QP; rdma-core's CQ calls lock internally.
unsafe impl Send for VerbsCq {}
// SAFETY: as for `Send`: the holders sharing the `Arc` make no CQ call
// through it but their one owner's, and rdma-core locks the CQ calls.
unsafe impl Sync for VerbsCq {}

impl Drop for VerbsCq {
    fn drop(&mut self) {
        // SAFETY: created in `VerbsCq::create_ex`; every QP completing into
        // it was destroyed first (they hold this `Arc`); events were acked
        // as they came. The channel (a field) goes after.
        unsafe { ibv_destroy_cq(self.cq) };
    }
}

impl VerbsCq {
    /// `ibv_create_comp_channel` (fd made non-blocking), then
    /// `ibv_create_cq` of at least `depth` CQEs on it; and with
    /// `ignore_overrun` first `ibv_create_cq_ex`
    /// with `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN` (`comp_mask`
    /// `IBV_CQ_INIT_ATTR_MASK_FLAGS`, no extended WC fields), then
    /// `ibv_cq_ex_to_cq`: the CQ context's `oi` bit on mlx5, so the device
    /// never reads the consumer-index record and a raw poller need not
    /// write it per poll (UCX does the same). rdma-sys binds verbs.h's
    /// static inline `ibv_create_cq_ex` in Rust (through the context's
    /// `verbs_context` op, `EOPNOTSUPP` when the library has none). Where
    /// that call fails (an older library or kernel, a device that refuses
    /// the flag: EOPNOTSUPP or EINVAL) it falls back to `ibv_create_cq`;
    /// `ignores_overrun` says which one made the CQ.
    pub(crate) fn create_ex(
        ctx: &Arc<Ctx>,
        depth: u32,
        ignore_overrun: bool,
    ) -> Result<Arc<VerbsCq>> {
        let channel = VerbsChannel::create(ctx)?;
        Self::make(ctx, depth, ignore_overrun, None, channel, false, 0, false)
    }

    /// [`Self::create_ex`], and with `timestamps` a CQ with completion
    /// timestamps: `ibv_create_cq_ex` with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`
    /// in `wc_flags` (with `ignore_overrun`, first with
    /// `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN` too, then without it). There is
    /// no fallback to `ibv_create_cq`, which gives no timestamps: where the
    /// provider has no `create_cq_ex`, the old verbs calls are forced
    /// ([`super::old_verbs`], verbs path), or the call fails with
    /// `EOPNOTSUPP` or `EINVAL` (rxe's provider refuses the flag), the
    /// error is [`Error::Unsupported`] with `Feature::CompletionTimestamp`;
    /// nothing is left created (the channel made for it goes too).
    pub(crate) fn create_stamped(
        ctx: &Arc<Ctx>,
        depth: u32,
        ignore_overrun: bool,
        timestamps: bool,
    ) -> Result<Arc<VerbsCq>> {
        let channel = VerbsChannel::create(ctx)?;
        Self::make(
            ctx,
            depth,
            ignore_overrun,
            None,
            channel,
            false,
            0,
            timestamps,
        )
    }

    /// [`Self::create_ex`] through `mlx5dv_create_cq` with the mlx5
    /// attributes `dv` (CQE compression, CQE size; ConnectX only): with
    /// `ignore_overrun`, first with `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`,
    /// then, where that fails, again without it (`ignores_overrun` says
    /// which made the CQ). An error names `mlx5dv_create_cq` with the
    /// last call's errno (`EINVAL` or `EOPNOTSUPP` where the device refuses
    /// an attribute; nothing is left created). With `timestamps`,
    /// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` in `wc_flags`, refused as in
    /// [`Self::create_stamped`].
    pub(crate) fn create_dv(
        ctx: &Arc<Ctx>,
        depth: u32,
        ignore_overrun: bool,
        dv: mlx5_dv::dv::mlx5dv_cq_init_attr,
        timestamps: bool,
    ) -> Result<Arc<VerbsCq>> {
        let channel = VerbsChannel::create(ctx)?;
        Self::make(
            ctx,
            depth,
            ignore_overrun,
            Some(dv),
            channel,
            false,
            0,
            timestamps,
        )
    }

    /// [`Self::create_ex`] on `channel`, which other CQs may share: the
    /// CQ's `cq_context` is `context`, what [`VerbsChannel::get_event`]
    /// returns for its events.
    pub(crate) fn create_on(
        ctx: &Arc<Ctx>,
        depth: u32,
        ignore_overrun: bool,
        channel: &Arc<VerbsChannel>,
        context: u64,
    ) -> Result<Arc<VerbsCq>> {
        Self::make(
            ctx,
            depth,
            ignore_overrun,
            None,
            channel.clone(),
            true,
            context,
            false,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn make(
        ctx: &Arc<Ctx>,
        depth: u32,
        ignore_overrun: bool,
        mut dv: Option<mlx5_dv::dv::mlx5dv_cq_init_attr>,
        channel: Arc<VerbsChannel>,
        shared_channel: bool,
        context: u64,
        timestamps: bool,
    ) -> Result<Arc<VerbsCq>> {
        let no_timestamps = || Error::Unsupported {
            device: ctx.name.clone(),
            feature: crate::Feature::CompletionTimestamp,
        };
        if timestamps && dv.is_none() && !ignore_overrun && super::old_verbs() {
            // The old calls: `ibv_poll_cq` gives no timestamp.
            return Err(no_timestamps());
        }
        let ts_flag = if timestamps { WC_TIMESTAMP } else { 0 };
        let cqe = depth.min(i32::MAX as u32);
        let cq_context = context as usize as *mut std::ffi::c_void;
        let mut attr = ibv_cq_init_attr_ex {
            cqe,
            cq_context,
            channel: channel.raw,
            comp_vector: 0,
            wc_flags: ts_flag,
            comp_mask: 0,
            flags: 0,
            parent_domain: std::ptr::null_mut(),
        };
        if ignore_overrun {
            attr.comp_mask = ibv_cq_init_attr_mask::IBV_CQ_INIT_ATTR_MASK_FLAGS.0;
            attr.flags = ibv_create_cq_attr_flags::IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN.0;
        }
        let mut cq: *mut ibv_cq = std::ptr::null_mut();
        let mut ex: *mut ibv_cq_ex = std::ptr::null_mut();
        match &mut dv {
            Some(d) => cq = super::mlx5::dv_create_cq(ctx, &mut attr, d),
            None if ignore_overrun => {
                // Our lookup of the provider's op (rdma-sys 0.3.0's
                // `ibv_create_cq_ex` never finds it on 64-bit, so the flag
                // was never asked for).
                let e = super::create_cq_ex(ctx, &mut attr);
                if !e.is_null() {
                    // SAFETY: `e` is the CQ just made; `ibv_cq_ex_to_cq`
                    // is a cast (an `ibv_cq_ex` starts with the `ibv_cq` fields).
                    cq = unsafe { ibv_cq_ex_to_cq(e) };
                }
            }
            // The verbs path: the extended CQ with the fields a
            // `Completion` carries, unless the old calls are forced.
            None if !super::old_verbs() => {
                attr.wc_flags = WC_FLAGS | ts_flag;
                let e = super::create_cq_ex(ctx, &mut attr);
                if !e.is_null() {
                    ex = e;
                    // SAFETY: `e` is the CQ just made; a cast (an
                    // `ibv_cq_ex` starts with the `ibv_cq` fields).
                    cq = unsafe { ibv_cq_ex_to_cq(e) };
                }
                attr.wc_flags = ts_flag;
            }
            None => {}
        }
        let ignores_overrun = ignore_overrun && !cq.is_null();
        if cq.is_null() {
            match &mut dv {
                // Again without the flag (the device refused it).
                Some(d) if ignore_overrun => {
                    attr.comp_mask = 0;
                    attr.flags = 0;
                    cq = super::mlx5::dv_create_cq(ctx, &mut attr, d);
                }
                Some(_) => {}
                // Timestamps: `ibv_create_cq_ex` again without the flag
                // (the direct path), never `ibv_create_cq` (none).
                None if timestamps && ignore_overrun => {
                    attr.comp_mask = 0;
                    attr.flags = 0;
                    let e = super::create_cq_ex(ctx, &mut attr);
                    if !e.is_null() {
                        // SAFETY: as above: a cast of the CQ just made.
                        cq = unsafe { ibv_cq_ex_to_cq(e) };
                    }
                }
                None if timestamps => {}
                None => {
                    // SAFETY: live context and channel; the context is a
                    // value, never dereferenced.
                    cq = unsafe { ibv_create_cq(ctx.raw, cqe as i32, cq_context, channel.raw, 0) }
                }
            }
        }
        if cq.is_null() && timestamps {
            let e = errno();
            if e == libc::EOPNOTSUPP || e == libc::EINVAL {
                return Err(no_timestamps());
            }
            return Err(Error::Verbs {
                call: if dv.is_some() {
                    "mlx5dv_create_cq"
                } else {
                    "ibv_create_cq_ex"
                },
                errno: e,
                detail: format!(" ({depth} CQEs, with completion timestamps)"),
            });
        }
        if cq.is_null() {
            return Err(Error::Verbs {
                call: if dv.is_some() {
                    "mlx5dv_create_cq"
                } else {
                    "ibv_create_cq"
                },
                errno: errno(),
                detail: format!(" ({depth} CQEs)"),
            });
        }
        // SAFETY: non-null CQ; `cqe` is the depth the provider gave it.
        let depth = unsafe { (*cq).cqe }.max(1) as u32;
        // SAFETY: `cq` is live, `ex` null or its extended form.
        let one_ok = unsafe { poll_ops_set(cq, ex, timestamps) };
        Ok(Arc::new(VerbsCq {
            cq,
            ex,
            channel,
            shared_channel,
            depth,
            ignores_overrun,
            timestamps,
            one_ok,
        }))
    }

    /// `ibv_req_notify_cq`: one completion event for the next completion
    /// (with `solicited_only`, the next solicited or error one).
    pub(crate) fn arm(&self, solicited_only: bool) -> Result<()> {
        // SAFETY: live CQ.
        let rc = unsafe { ibv_req_notify_cq(self.cq, solicited_only as i32) };
        check_detail("ibv_req_notify_cq", rc, String::new)
    }

    /// The completion channel's file descriptor (non-blocking), readable
    /// while an event waits: what an async wait watches.
    pub(crate) fn channel_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.channel.fd()
    }

    /// Consumes every completion event waiting now (`ibv_get_cq_event`,
    /// each acknowledged at once with `ibv_ack_cq_events`), without
    /// blocking; returns how many.
    pub(crate) fn take_events(&self) -> Result<u32> {
        let mut n = 0;
        while self.channel.get_event(|_| ())?.is_some() {
            n += 1;
        }
        Ok(n)
    }

    /// Waits (`poll(2)` on the channel's fd) up to `timeout` for a
    /// completion event, then takes it ([`VerbsChannel::get_event`]);
    /// `false` if none came (or another reader took it).
    pub(crate) fn wait(&self, timeout: std::time::Duration) -> Result<bool> {
        let fd = self.channel.fd();
        if !crate::backend::wait_readable(fd, timeout, "completion channel")? {
            return Ok(false);
        }
        Ok(self.channel.get_event(|_| ())?.is_some())
    }

    /// Whether the CQ is polled through the extended verbs
    /// (`ibv_start_poll`; made by `ibv_create_cq_ex`).
    #[cfg(feature = "test-hooks")]
    pub(crate) fn is_ex(&self) -> bool {
        !self.ex.is_null()
    }

    /// Up to `store.len()` (at most 16) completions: `ibv_start_poll` /
    /// `ibv_next_poll` / `ibv_end_poll` on an extended CQ (each read into
    /// an `ibv_wc`), else `ibv_poll_cq`.
    #[inline]
    pub(crate) fn poll_into<'s>(
        &self,
        store: &'s mut [std::mem::MaybeUninit<ibv_wc>; 16],
        want: usize,
    ) -> Result<&'s [ibv_wc]> {
        let want = want.min(store.len());
        if !self.ex.is_null() {
            let n = self.poll_ex(store, None, want)?;
            // SAFETY: `poll_ex` wrote the first `n` (<= `want`) entries.
            return Ok(unsafe { std::slice::from_raw_parts(store.as_ptr().cast(), n) });
        }
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

    /// [`Self::poll_into`] of a CQ made with timestamps (on the verbs path
    /// always extended): each completion's `ibv_wc_read_completion_ts` in
    /// `stamps`, at its index (raw device clock ticks, as the provider
    /// gives them).
    #[inline(never)]
    pub(crate) fn poll_stamped<'s>(
        &self,
        store: &'s mut [std::mem::MaybeUninit<ibv_wc>; 16],
        stamps: &mut [u64; 16],
        want: usize,
    ) -> Result<&'s [ibv_wc]> {
        debug_assert!(self.timestamps && !self.ex.is_null());
        let want = want.min(store.len());
        let n = self.poll_ex(store, Some(stamps), want)?;
        // SAFETY: `poll_ex` wrote the first `n` (<= `want`) entries.
        Ok(unsafe { std::slice::from_raw_parts(store.as_ptr().cast(), n) })
    }

    /// Extended polling of up to `want` completions into `store` (and,
    /// with `stamps`, each one's completion timestamp there), one
    /// `ibv_start_poll` (ENOENT: none left) ... `ibv_end_poll` per
    /// completion. Not `ibv_next_poll`: rdma-core's rxe before v56 ends the
    /// poll itself when `ibv_next_poll` finds the CQ empty (it stores the
    /// consumer index and unlocks), so the `ibv_end_poll` verbs.h asks for
    /// then skips a CQE and unlocks twice (fixed upstream by "rxe: Fix
    /// double unlock in cq_ex polling"). Returns how many were written.
    #[inline]
    fn poll_ex(
        &self,
        store: &mut [std::mem::MaybeUninit<ibv_wc>; 16],
        mut stamps: Option<&mut [u64; 16]>,
        want: usize,
    ) -> Result<usize> {
        let ex = self.ex;
        let mut n = 0;
        while n < want {
            let mut attr = ibv_poll_cq_attr { comp_mask: 0 };
            // SAFETY: live extended CQ, polled by its one owner (`&mut`
            // above this call); `attr` is valid for the call.
            let rc = unsafe { ibv_start_poll(ex, &mut attr) };
            if rc == libc::ENOENT {
                break;
            }
            if rc != 0 {
                if n > 0 {
                    break; // the error comes again on the next poll
                }
                return Err(Error::Verbs {
                    call: "ibv_start_poll",
                    errno: rc,
                    detail: String::new(),
                });
            }
            // SAFETY: the poll just started: its completion is valid;
            // `n < want <= 16`.
            store[n].write(unsafe { read_wc(ex) });
            if let Some(t) = stamps.as_deref_mut() {
                // SAFETY: as above; the CQ was made with
                // `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` (`timestamps`).
                t[n] = unsafe { ibv_wc_read_completion_ts(ex) };
            }
            n += 1;
            // SAFETY: `ibv_start_poll` succeeded above; ended once.
            unsafe { ibv_end_poll(ex) };
        }
        Ok(n)
    }

    /// One completion for a QP's poll into one entry (only where
    /// [`Self::one_ok`]): on an extended CQ `ibv_start_poll` (ENOENT:
    /// none), the fields a `Completion` carries read into an `ibv_wc` (the
    /// rest zero) and, with `timestamps`, `ibv_wc_read_completion_ts`,
    /// then `ibv_end_poll` (never `ibv_next_poll`: [`Self::poll_ex`]);
    /// else `ibv_poll_cq` of one `ibv_wc` (timestamp 0). Each entry point
    /// is called through the provider's pointer, found set at creation.
    /// Errors as [`Self::poll_into`]'s.
    #[inline(always)]
    pub(crate) fn poll_one(&self) -> Result<Option<(ibv_wc, u64)>> {
        debug_assert!(self.one_ok);
        let ex = self.ex;
        if !ex.is_null() {
            let mut attr = ibv_poll_cq_attr { comp_mask: 0 };
            // SAFETY: live extended CQ, polled by its one owner (`&mut`
            // above this call), whose `start_poll` was found set at
            // creation (`one_ok`); `attr` is valid for the call.
            let rc = unsafe { set((*ex).start_poll)(ex, &mut attr) };
            if rc == libc::ENOENT {
                return Ok(None);
            }
            if rc != 0 {
                return Err(poll_error("ibv_start_poll", rc));
            }
            // SAFETY: the poll just started: the readers (found set at
            // creation, `one_ok`, the CQ made with their fields:
            // `WC_FLAGS`, `WC_TIMESTAMP` with `timestamps`) are valid for
            // its completion; `ibv_end_poll` ends it, once.
            return Ok(Some(unsafe {
                let x = &*ex;
                let wc_flags = set(x.read_wc_flags)(ex);
                let imm = if wc_flags & IMM_OR_INV != 0 {
                    set(x.read_imm_data)(ex)
                } else {
                    0
                };
                let w = ibv_wc {
                    wr_id: x.wr_id,
                    status: x.status,
                    opcode: set(x.read_opcode)(ex),
                    vendor_err: set(x.read_vendor_err)(ex),
                    byte_len: set(x.read_byte_len)(ex),
                    imm_data_invalidated_rkey_union: imm_data_invalidated_rkey_union_t {
                        imm_data: imm,
                    },
                    qp_num: set(x.read_qp_num)(ex),
                    src_qp: set(x.read_src_qp)(ex),
                    wc_flags,
                    pkey_index: 0,
                    slid: 0,
                    sl: 0,
                    dlid_path_bits: 0,
                };
                let ts = if self.timestamps {
                    set(x.read_completion_ts)(ex)
                } else {
                    0
                };
                set(x.end_poll)(ex);
                (w, ts)
            }));
        }
        let mut w = std::mem::MaybeUninit::<ibv_wc>::uninit();
        // SAFETY: live CQ whose context's `poll_cq` was found set at
        // creation (`one_ok`); `w` has room for the one entry asked for.
        let n = unsafe { set((*(*self.cq).context).ops.poll_cq)(self.cq, 1, w.as_mut_ptr()) };
        match n {
            // SAFETY: `ibv_poll_cq` wrote the one entry.
            1 => Ok(Some((unsafe { w.assume_init() }, 0))),
            0 => Ok(None),
            n => Err(poll_error("ibv_poll_cq", -n)),
        }
    }

    /// Discards the events raised and the completions written so far (a QP
    /// with its own CQ going to RESET).
    pub(crate) fn drain(&self, mut each: impl FnMut(&ibv_wc)) {
        // A shared channel's events are its reader's to take.
        while !self.shared_channel && self.wait(std::time::Duration::ZERO).unwrap_or(false) {}
        let mut store = [const { std::mem::MaybeUninit::<ibv_wc>::uninit() }; 16];
        while let Ok(wc) = self.poll_into(&mut store, 16) {
            if wc.is_empty() {
                break;
            }
            wc.iter().for_each(&mut each);
        }
    }
}
