//! The portable data path: RC, UC and UD QPs posted and polled through
//! rdma-core's extended verbs where the provider has them (`ibv_wr_*`,
//! `post_ex.rs`; `ibv_start_poll` in [`super::ibv`]'s CQ), else through
//! `ibv_post_send` / `ibv_poll_cq`; receives through `ibv_post_recv`; over
//! the control path of [`super::ibv`]. `RDMA_DIRECT_VERBS_OLD_POST=1`
//! forces the old calls. Memory windows (binds, `LOCAL_INV`, SEND with
//! invalidate and its receive): `mw.rs`. Every `unsafe` block here calls
//! rdma-core.

mod fast;
mod mw;
mod post;
mod post_ex;
mod split;
mod srq;

use super::ibv::{errno, modify_raw, query_raw, Ctx, Pd, QpCaps, VerbsCq, VerbsSrq};
use super::SharedQps;
use crate::ib::completion::{Completion, SrcQp, WcOpcode, WcStatus};
use crate::ib::error::{Error, Result};
use crate::ib::progress::WrProgress;
use crate::ib::qp_attr::{PathInfo, QpAttr, QpInfo, QpState};
use crate::ib::wr::{RecvWr, SendFlags, SendWrs, WrOp};
use mlx5_dv::driver::CqCredits;
use mlx5_dv::driver::SrqSlots;
use mlx5_dv::driver::Table;
use rdma_sys::*;
pub(crate) use srq::VerbsSrqPost;
use srq::SRQ_TAG;
use std::sync::Arc;

/// How many WRs of a chain a post call took: all on success; on failure
/// those before `bad`, the first one not posted (verbs contract).
fn posted_count<T>(rc: i32, chain: &[T], bad: *mut T) -> usize {
    if rc == 0 {
        return chain.len();
    }
    chain.iter().position(|w| std::ptr::eq(w, bad)).unwrap_or(0)
}

/// Marks the verbs `wr_id` of a receive (sends carry a plain sequence number).
const RECV_TAG: u64 = 1 << 63;

/// Work requests per `ibv_post_send` call.
const CHUNK: usize = 32;

/// Takes completions from a CQ that several verbs QPs share, until `max`
/// were handed to `put` or the CQ is empty: each goes to the QP of `m` its
/// `qp_num` names, which retires the WR (and the unsignaled ones before
/// it); the CQ credits of every retired WR go back once. Completions of QP
/// `skip` are dropped unretired (a QP just moved to RESET). Returns the
/// completions handed over and the first error (a completion of a QP not
/// among `m`: [`Error::ForeignCqe`]); the batch already taken is still
/// handed over.
pub(crate) fn take_shared(
    cq: &VerbsCq,
    m: &mut impl SharedQps<VerbsQp>,
    max: usize,
    skip: Option<u32>,
    mut put: impl FnMut(usize, Completion),
) -> (usize, Result<()>) {
    let mut store = [const { std::mem::MaybeUninit::<ibv_wc>::uninit() }; 16];
    // (Only a CQ with timestamps reads them.)
    let mut stamps = cq.timestamps.then_some([0u64; 16]);
    let mut freed = 0;
    let mut k = 0;
    let mut result = Ok(());
    while k < max {
        let want = (max - k).min(store.len());
        let polled = match &mut stamps {
            Some(t) => cq.poll_stamped(&mut store, t, want),
            None => cq.poll_into(&mut store, want),
        };
        let wc = match polled {
            Ok(wc) => wc,
            Err(e) => {
                result = Err(e);
                break;
            }
        };
        for (i, w) in wc.iter().enumerate() {
            if skip == Some(w.qp_num) {
                // Dropped unretired (an SRQ's receive goes back to it).
                if let Some(q) = m.find(w.qp_num) {
                    discarded(&q.srq, w);
                }
                continue;
            }
            let found = m.find(w.qp_num);
            let Some(q) = found else {
                if result.is_ok() {
                    result = Err(Error::ForeignCqe { qpn: w.qp_num });
                }
                continue;
            };
            if let Some(mut c) = q.retire(w, &mut freed) {
                if let Some(t) = &stamps {
                    c.timestamp = stamped(&c, t[i]);
                }
                put(k, c);
                k += 1;
            }
        }
        if wc.len() < want || result.is_err() {
            break;
        }
    }
    m.credits().give(freed);
    (k, result)
}

/// A completion's timestamp as [`Completion::timestamp`] reports it: the
/// one read (`ibv_wc_read_completion_ts`), 0 for a completion in error
/// (as on the direct path, whose error CQEs have none).
#[inline]
fn stamped(c: &Completion, ts: u64) -> u64 {
    if c.status.is_ok() {
        ts
    } else {
        0
    }
}

/// A work completion of a QP on `srq` thrown away unpolled (a RESET's or
/// a destroy's drain): an SRQ receive's slot goes back to the SRQ (as
/// rdma-core's `mlx5_cq_clean` frees it).
fn discarded(srq: &Option<(Arc<VerbsSrq>, Arc<SrqSlots>)>, w: &ibv_wc) {
    if let (Some((_, slots)), true) = (srq, w.wr_id & SRQ_TAG != 0) {
        slots.complete(w.wr_id as u16);
    }
}

/// An RC QP driven through `ibv_post_send` / `ibv_poll_cq`, with its own CQ
/// or on a [`crate::SharedCq`].
pub(crate) struct VerbsQp {
    qp: *mut ibv_qp,
    /// The QP as an `ibv_qp_ex` (`ibv_qp_to_qp_ex`) where it was made by
    /// `ibv_create_qp_ex` with the send ops it posts: sends go through
    /// `ibv_wr_*` (`post_ex.rs`). Null: `ibv_post_send` (`post.rs`).
    qpx: *mut ibv_qp_ex,
    /// The CQ its sends and receives complete into.
    cq: Arc<VerbsCq>,
    /// The CQ is a [`crate::SharedCq`]'s: polled, armed and waited on there.
    shared: bool,
    /// Room in the CQ: every posted WR holds one credit until retired
    /// (shared by the QPs of a shared CQ).
    credits: CqCredits,
    qpn: u32,
    caps: QpCaps,
    /// Outstanding-WR accounting, as rdma-core's mlx5 provider keeps it
    /// (`mlx5_wq_overflow`): the verbs `wr_id` we post is our WR sequence
    /// number; `wr_ids[seq % max_post]` holds the caller's wr_id. A completion
    /// for `seq` retires every WR up to it (unsignaled ones included). So a
    /// batch that does not fit is refused whole whatever the provider does
    /// with SQ slots. The CQ is guarded by `credits`.
    max_post: u32,
    /// Per sequence slot: the CQE was asked for by auto-signal only.
    hidden: Table<bool>,
    auto_signal: u32,
    unsignaled_run: u32,
    /// The same accounting for receives; their verbs `wr_id` is `RECV_TAG | seq`.
    max_recv: u32,
    recv_ids: Table<u64>,
    recv_posted: u64,
    recv_done: u64,
    path: PathInfo,
    wr_ids: Table<u64>,
    posted: u64,
    retired: u64,
    /// The counts above, for the PD's deregistration of dropped MRs.
    progress: Arc<WrProgress>,
    /// The SRQ its receives come from (destroyed after the QP), and the
    /// slot table its receive completions name (`SRQ_TAG | slot`).
    srq: Option<(Arc<VerbsSrq>, Arc<SrqSlots>)>,
    /// Whether posts take CQ credits and polls give them back: always,
    /// but on a split QP's copies (the split reserved them; `split.rs`).
    counts: bool,
    /// Split into a send half and a receive half: this copy only retires.
    split: Option<Box<split::SplitState>>,
    /// The lean post's gate (`fast.rs`, `set_gate`): RTS, not split,
    /// counting credits, RC or UC, a send SGE, `ops_set`.
    gate: bool,
    /// In RTS (the last `modify`).
    rts: bool,
    /// The provider's entry points the lean post calls were found set at
    /// creation (`fast::send_ops_set`).
    ops_set: bool,
    /// The extended QP has the window WRs' builders (`ibv_wr_bind_mw`,
    /// `ibv_wr_local_inv`, `ibv_wr_send_inv`: made with their send ops,
    /// `mw::window_ops_set`); else those WRs go through `ibv_post_send`.
    mw_ex: bool,
    /// Polls into one entry take `poll_one` (its own CQ, whose entry
    /// points were found set: `VerbsCq::one_ok`).
    lean_poll: bool,
    /// Not split and counting credits (`set_gate`): `poll_one` retires a
    /// send's completion itself.
    plain: bool,
    /// The window binds outstanding, settled as their WRs retire
    /// (`mw.rs`). (Before `raw`: a window dropped under its bind is
    /// deallocated before the QP is destroyed.)
    binds: mw::VerbsBinds,
    /// Owns the `ibv_qp` (`qp`): destroyed when the last copy goes (a
    /// split QP's halves hold it too).
    raw: Arc<RawQp>,
    _pd: Arc<Pd>,
}

/// The `ibv_qp` of a [`VerbsQp`] and of its halves' copies.
struct RawQp(*mut ibv_qp);

// SAFETY: rdma-core's QP calls are thread-safe; this only destroys it.
unsafe impl Send for RawQp {}
// SAFETY: as above.
unsafe impl Sync for RawQp {}

impl RawQp {
    /// `ibv_destroy_qp`, once.
    fn destroy(&mut self) {
        if !self.0.is_null() {
            // SAFETY: created in `create_qp`, destroyed only here, once;
            // no copy of the QP is left to post to it (the last one owns
            // this).
            unsafe { ibv_destroy_qp(self.0) };
            self.0 = std::ptr::null_mut();
        }
    }
}

impl Drop for RawQp {
    fn drop(&mut self) {
        self.destroy();
    }
}

// SAFETY: the QP is used from one thread at a time (`&mut self`); its CQ as
// `VerbsCq` says.
unsafe impl Send for VerbsQp {}

impl Drop for VerbsQp {
    fn drop(&mut self) {
        // The last copy destroys the QP (a split QP's halves may outlive
        // it), before its CQ (the `Arc<VerbsCq>` field is dropped after this).
        let Some(raw) = Arc::get_mut(&mut self.raw) else {
            return;
        };
        raw.destroy();
        // The receives an SRQ gave this QP whose completions were never
        // polled go back to the SRQ (as rdma-core's `mlx5_cq_clean` frees
        // them): the QP is gone, so its own CQ holds all there will be.
        if !self.shared && self.srq.is_some() {
            self.cq.drain(|w| discarded(&self.srq, w));
        }
    }
}

/// Where a new QP's completions go: a CQ of its own of `depth` CQEs (with
/// completion timestamps or not), or a shared one whose credits it takes
/// from.
pub(crate) enum CqChoice<'a> {
    Own(u32, bool),
    Shared(&'a Arc<VerbsCq>, &'a CqCredits),
}

impl CqChoice<'_> {
    /// The CQ (created for `Own`), its credits, and whether it is shared.
    fn resolve(&self, ctx: &Arc<Ctx>) -> Result<(Arc<VerbsCq>, CqCredits, bool)> {
        Ok(match self {
            CqChoice::Own(depth, timestamps) => {
                let cq = VerbsCq::create_stamped(ctx, *depth, false, *timestamps)?;
                let credits = CqCredits::new(cq.depth);
                (cq, credits, false)
            }
            CqChoice::Shared(cq, credits) => ((*cq).clone(), (*credits).clone(), true),
        })
    }
}

/// The send operations a QP of type `t` is made for on the extended verbs
/// (`IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`): what the backend posts on it; with
/// `windows` (`QpConfig::memory_windows`, RC and UC) also
/// `IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
/// IBV_QP_EX_WITH_SEND_WITH_INV`. Only then: on mlx5 a bind's send op
/// makes every send WQE room for a UMR (`mlx5_calc_send_wqe`), so a QP
/// that posts none is not asked for it; a SEND with invalidate on a QP
/// made without them goes through `ibv_post_send` (`VerbsQp::mw_ex`).
fn send_ops(t: ibv_qp_type::Type, windows: bool) -> u64 {
    use ibv_qp_create_send_ops_flags as f;
    let uc = f::IBV_QP_EX_WITH_SEND.0
        | f::IBV_QP_EX_WITH_SEND_WITH_IMM.0
        | f::IBV_QP_EX_WITH_RDMA_WRITE.0
        | f::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM.0;
    let mw = f::IBV_QP_EX_WITH_BIND_MW.0
        | f::IBV_QP_EX_WITH_LOCAL_INV.0
        | f::IBV_QP_EX_WITH_SEND_WITH_INV.0;
    (match t {
        ibv_qp_type::IBV_QPT_RC => {
            uc | f::IBV_QP_EX_WITH_RDMA_READ.0
                | f::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP.0
                | f::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD.0
                | if windows { mw } else { 0 }
        }
        ibv_qp_type::IBV_QPT_UC => uc | if windows { mw } else { 0 },
        _ => f::IBV_QP_EX_WITH_SEND.0 | f::IBV_QP_EX_WITH_SEND_WITH_IMM.0,
    }) as u64
}

/// Makes the QP `init` describes: first with `ibv_create_qp_ex` and the
/// send ops of its type (unless [`super::ibv::old_verbs`] forces the old
/// calls), returning it with its `ibv_qp_ex`; with `windows`, first with
/// the window send ops, then without them where the provider refuses
/// those (rxe has no `LOCAL_INV` builder on UC: the window WRs then go
/// through `ibv_post_send`); where the provider has no `create_qp_ex` or
/// refuses it (EOPNOTSUPP, EINVAL, ...: e.g. a provider whose QPs have no
/// `ibv_wr_*`), with `ibv_create_qp` and a null `ibv_qp_ex`. A null QP:
/// all failed (errno from the last call).
fn create_raw(
    pd: &Arc<Pd>,
    init: &mut ibv_qp_init_attr,
    windows: bool,
) -> (*mut ibv_qp, *mut ibv_qp_ex) {
    if !super::ibv::old_verbs() {
        let tries: &[bool] = if windows { &[true, false] } else { &[false] };
        for &with in tries {
            // SAFETY: plain data; zero is valid.
            let mut ex: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
            ex.send_cq = init.send_cq;
            ex.recv_cq = init.recv_cq;
            ex.srq = init.srq;
            ex.cap = init.cap;
            ex.qp_type = init.qp_type;
            ex.pd = pd.raw;
            ex.comp_mask = ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0
                | ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.0;
            ex.send_ops_flags = send_ops(init.qp_type, with);
            let qp = super::ibv::create_qp_ex(&pd.ctx, &mut ex);
            if !qp.is_null() {
                // SAFETY: `qp` was made by `ibv_create_qp_ex` with send ops:
                // `ibv_qp_to_qp_ex` gives its `ibv_qp_ex`.
                let qpx = unsafe { ibv_qp_to_qp_ex(qp) };
                if !qpx.is_null() {
                    init.cap = ex.cap;
                    return (qp, qpx);
                }
                // SAFETY: just made, nothing else holds it.
                unsafe { ibv_destroy_qp(qp) };
            }
        }
    }
    // SAFETY: live PD, valid attributes.
    (unsafe { ibv_create_qp(pd.raw, init) }, std::ptr::null_mut())
}

pub(crate) fn create_qp(
    pd: &Arc<Pd>,
    caps: QpCaps,
    cq: CqChoice<'_>,
    srq: Option<&VerbsSrqPost>,
) -> Result<VerbsQp> {
    let (cq, credits, shared) = cq.resolve(&pd.ctx)?;
    let srq = srq.map(VerbsSrqPost::parts);
    // SAFETY: plain data; zero is valid.
    let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    init.send_cq = cq.cq;
    init.recv_cq = cq.cq;
    init.qp_type = super::ibv::ibv_type(caps.qp_type);
    if let Some((s, _)) = &srq {
        init.srq = s.raw;
    }
    init.cap = ibv_qp_cap {
        max_send_wr: caps.max_send_wr,
        max_recv_wr: if srq.is_some() { 0 } else { caps.max_recv_wr },
        max_send_sge: caps.max_send_sge,
        max_recv_sge: caps.max_recv_sge,
        max_inline_data: caps.max_inline,
    };
    let (qp, qpx) = create_raw(pd, &mut init, caps.memory_windows);
    if qp.is_null() {
        return Err(Error::Verbs {
            call: "ibv_create_qp",
            errno: errno(),
            detail: format!(
                " (RC, max_send_wr {}, max_send_sge {}, max_inline_data {}: more than {} allows?)",
                caps.max_send_wr, caps.max_send_sge, caps.max_inline, pd.ctx.name
            ),
        });
    }
    // SAFETY: non-null QP.
    let qpn = unsafe { (*qp).qp_num };
    let caps = QpCaps {
        max_inline: init.cap.max_inline_data,
        ..caps
    };
    let max_post = caps.max_send_wr.min(init.cap.max_send_wr);
    // SAFETY: `qp` is live, `qpx` null or its `ibv_qp_ex`.
    let ops_set = unsafe { fast::send_ops_set(qp, qpx, caps.qp_type) };
    // SAFETY: as above.
    let mw_ex = unsafe { mw::window_ops_set(qpx) };
    let lean_poll = !shared && cq.one_ok;
    Ok(VerbsQp {
        qp,
        qpx,
        cq,
        shared,
        credits,
        qpn,
        caps,
        max_post,
        hidden: Table::new(max_post as usize, false),
        auto_signal: (max_post / 2).max(1),
        unsignaled_run: 0,
        max_recv: init.cap.max_recv_wr.min(caps.max_recv_wr).max(1),
        recv_ids: Table::new(
            init.cap.max_recv_wr.min(caps.max_recv_wr).max(1) as usize,
            0,
        ),
        recv_posted: 0,
        recv_done: 0,
        path: PathInfo::unconnected(""),
        wr_ids: Table::new(max_post as usize, 0),
        posted: 0,
        retired: 0,
        progress: Arc::new(WrProgress::new(
            init.cap.max_recv_wr.min(caps.max_recv_wr).max(1),
            caps.max_recv_sge,
        )),
        srq,
        counts: true,
        split: None,
        gate: false,
        rts: false,
        ops_set,
        mw_ex,
        lean_poll,
        plain: true,
        binds: mw::VerbsBinds::default(),
        raw: Arc::new(RawQp(qp)),
        _pd: pd.clone(),
    })
}

impl VerbsQp {
    /// The QP's own CQ, or [`Error::SharedCq`] when its CQ is shared.
    fn own_cq(&self) -> Result<&VerbsCq> {
        if self.shared {
            return Err(Error::SharedCq { qpn: self.qpn });
        }
        Ok(&self.cq)
    }

    /// `ibv_req_notify_cq` on the QP's own CQ.
    pub(crate) fn arm_cq(&mut self, solicited_only: bool) -> Result<()> {
        self.own_cq()?.arm(solicited_only)
    }

    /// Waits up to `timeout` for a completion event of the QP's own CQ.
    /// The own CQ's completion channel fd, for an async wait.
    /// (The waker is not kept: the channel's fd wakes the reactor.)
    pub(crate) fn event_wake(&self, _waker: &std::task::Waker) -> Result<super::EventWake<'_>> {
        Ok(super::EventWake::Fd(self.own_cq()?.channel_fd()))
    }

    /// Consumes (and acknowledges) the own CQ's waiting events, without
    /// blocking; returns how many.
    pub(crate) fn take_events(&self) -> Result<u32> {
        self.own_cq()?.take_events()
    }

    pub(crate) fn wait_cq_event(&mut self, timeout: std::time::Duration) -> Result<bool> {
        self.own_cq()?.wait(timeout)
    }

    /// Test hook: posts stop taking CQ credits, so they can exceed the CQ's
    /// room (a raw overflow, for the device's CQ error).
    #[cfg(feature = "test-hooks")]
    pub(crate) fn ignore_credits(&mut self) {
        self.counts = false;
        self.set_gate();
    }

    /// Whether it posts through the extended verbs, and whether its CQ is
    /// polled through them (test hook).
    #[cfg(feature = "test-hooks")]
    pub(crate) fn extended(&self) -> (bool, bool) {
        (!self.qpx.is_null(), self.cq.is_ex())
    }

    /// The CQ credits its posts take (every verbs QP counts them).
    pub(crate) fn credits(&self) -> &CqCredits {
        &self.credits
    }

    /// Depth of the CQ the device gave, in CQEs.
    pub(crate) fn cq_depth(&self) -> u32 {
        self.cq.depth
    }

    /// The QP's WRs counted since it was created (a RESET retires what was
    /// outstanding).
    pub(crate) fn counts(&self) -> super::WrCounts {
        // (A split QP's own counts of what was posted stop at the split,
        // while it retires what its halves post: never below the retired.)
        super::WrCounts {
            sends_posted: self.posted.max(self.retired),
            sends_retired: self.retired,
            recvs_posted: self.recv_posted.max(self.recv_done),
            recvs_retired: self.recv_done,
        }
    }

    /// What the PD watches to deregister dropped MRs.
    pub(crate) fn progress(&self) -> &Arc<WrProgress> {
        &self.progress
    }

    /// The most SGEs a send WR may carry (what the device granted).
    pub(crate) fn max_send_sge(&self) -> u32 {
        self.caps.max_send_sge
    }

    /// The inline size the device granted (`max_inline_data`), in bytes.
    pub(crate) fn max_inline(&self) -> u32 {
        self.caps.max_inline
    }

    pub(crate) fn qpn(&self) -> u32 {
        self.qpn
    }

    pub(crate) fn path(&self) -> PathInfo {
        self.path
    }

    pub(crate) fn set_path(&mut self, p: PathInfo) {
        self.path = p;
    }

    /// `ibv_modify_qp` to `to` with the attributes `attr` carries (the
    /// caller checked them with `check_rc_modify`). Moving to RESET also
    /// forgets every outstanding WR and discards completions not yet polled
    /// (as rdma-core's providers clean the CQ of a QP they reset).
    pub(crate) fn modify(&mut self, _from: QpState, to: QpState, attr: &QpAttr) -> Result<()> {
        modify_raw(self.qp, self.qpn, to, attr)?;
        self.rts = to == QpState::Rts;
        self.set_gate();
        if to == QpState::Reset {
            if !self.shared {
                // Events and completions from before RESET are stale now.
                // (A QP on a shared CQ reaches RESET with none outstanding:
                // `Qp::modify` sees to it.)
                if self.binds.is_empty() {
                    let srq = &self.srq;
                    self.cq.drain(|w| discarded(srq, w));
                } else {
                    // The binds these completions retire are settled.
                    self.drain_settling();
                }
                self.credits = CqCredits::new(self.credits.depth());
            }
            self.binds.settle_rest();
            self.set_gate();
            self.retired = self.posted;
            self.recv_done = self.recv_posted;
            self.unsignaled_run = 0;
            self.progress.retired(self.retired as u32, self.recv_done);
        }
        Ok(())
    }

    /// The QP's state as the device has it (`ibv_query_qp`), with the
    /// attributes that tell a connection apart.
    pub(crate) fn query(&self) -> Result<QpInfo> {
        query_raw(self.qp, self.qpn)
    }

    /// Polls up to `out.len()` completions of the QP's own CQ with
    /// `ibv_poll_cq`. Errors: [`Error::SharedCq`] when its CQ is shared.
    // (Out of line: inlined into `Qp::poll`, the lean poll cost the
    // direct path's poll registers; the rest is `poll_many`.)
    #[inline(never)]
    pub(crate) fn poll(&mut self, out: &mut [Completion]) -> Result<usize> {
        // (`lean_poll`: not shared.)
        if let ([one], true) = (&mut *out, self.lean_poll) {
            return self.poll_one(one);
        }
        self.poll_many(out)
    }

    /// [`Self::poll`] of all but `poll_one`'s.
    #[inline(never)]
    fn poll_many(&mut self, out: &mut [Completion]) -> Result<usize> {
        if self.shared {
            return Err(Error::SharedCq { qpn: self.qpn });
        }
        if self.cq.timestamps {
            return self.poll_stamped(out);
        }
        let mut store = [const { std::mem::MaybeUninit::<ibv_wc>::uninit() }; 16];
        let wc = self.cq.poll_into(&mut store, out.len())?;
        let mut freed = 0;
        let mut k = 0;
        for w in wc {
            if let Some(c) = self.retire(w, &mut freed) {
                out[k] = c;
                k += 1;
            }
        }
        self.credits.give(freed);
        Ok(k)
    }

    /// [`Self::poll`] of a QP whose own CQ has completion timestamps:
    /// each completion's copied into it ([`stamped`]).
    #[inline(never)]
    fn poll_stamped(&mut self, out: &mut [Completion]) -> Result<usize> {
        let mut store = [const { std::mem::MaybeUninit::<ibv_wc>::uninit() }; 16];
        let mut stamps = [0u64; 16];
        let wc = self.cq.poll_stamped(&mut store, &mut stamps, out.len())?;
        let mut freed = 0;
        let mut k = 0;
        for (w, &ts) in wc.iter().zip(&stamps) {
            if let Some(mut c) = self.retire(w, &mut freed) {
                c.timestamp = stamped(&c, ts);
                out[k] = c;
                k += 1;
            }
        }
        self.credits.give(freed);
        Ok(k)
    }

    /// Retires what the work completion `w` of this QP completes (a
    /// completion for send sequence `seq` retires every send up to it,
    /// unsignaled ones included); adds the CQ credits freed to `freed`.
    /// Returns the completion to report (`None`: asked for by auto-signal only).
    #[inline]
    fn retire(&mut self, w: &ibv_wc, freed: &mut u32) -> Option<Completion> {
        // (`fast::lean_retire` is the commonest case of this, kept in step.)
        // Our wr_id is the WR's sequence number (see `VerbsQp`).
        let (wr_id, hidden) = if w.wr_id & SRQ_TAG != 0 {
            // A receive of the SRQ: its slot (its CQ credits are the SRQ's).
            let slots = &self.srq.as_ref()?.1;
            (slots.complete(w.wr_id as u16)?, false)
        } else if w.wr_id & RECV_TAG != 0 {
            let seq = w.wr_id & !RECV_TAG;
            if seq >= self.recv_limit() || seq < self.recv_done {
                // Names no receive this QP posted, or one already retired
                // (a completion from before a RESET).
                return None;
            }
            let done = self.recv_done.max(seq + 1);
            if self.counts {
                *freed += (done - self.recv_done) as u32;
            }
            self.recv_done = done;
            (
                self.recv_ids.get((seq % self.max_recv as u64) as usize),
                false,
            )
        } else {
            if w.wr_id >= self.send_limit() || w.wr_id < self.retired {
                // Names no send this QP posted, or one already retired (a
                // completion from before a RESET).
                return None;
            }
            let retired = self.retired.max(w.wr_id + 1);
            if self.counts {
                *freed += (retired - self.retired) as u32;
            }
            self.retired = retired;
            if !self.binds.is_empty() {
                self.settle_binds(w);
            }
            let slot = (w.wr_id % self.max_post as u64) as usize;
            (self.wr_ids.get(slot), self.hidden.get(slot))
        };
        self.progress.retired(self.retired as u32, self.recv_done);
        if let Some(s) = &self.split {
            s.publish(self.retired, self.recv_done);
        }
        if hidden && w.status == ibv_wc_status::IBV_WC_SUCCESS {
            return None; // asked for by auto-signal only
        }
        Some(Completion {
            wr_id,
            status: WcStatus(w.status),
            opcode: WcOpcode(w.opcode),
            imm: mw::wc_imm(w, self.inv_flags()),
            byte_len: w.byte_len,
            qp_num: w.qp_num,
            vendor_err: w.vendor_err,
            src_qp: mw::wc_src_qp(w, self.inv_flags()),
            timestamp: 0,
        })
    }
}
