//! Memory windows on the direct path: a sim window's allocation, the UMR
//! WQEs of a type-1 bind or unbind ([`DirectQp::bind_mw`]) and of the
//! window WRs `post_send` writes ([`DirectQp::write_wr`]: a type-2 bind,
//! `LOCAL_INV`), and the small fence after a UMR (the in-place posts
//! decline until the next WQE, written by `SendQueue::post`, takes it).
//! The SQ's WQE size for a bind's UMR: `geometry.rs`.
//!
//! Every UMR goes through `SendQueue::post_umr` (`mlx5_dv::wqe::UmrWqe`,
//! as rdma-core v59's libmlx5 writes it: `_mlx5_post_send`'s
//! `IBV_WR_BIND_MW` / `IBV_WR_LOCAL_INV` cases, `mlx5_bind_mw`). On
//! ConnectX (a verbs PD on the direct path) the window comes from
//! `ibv_alloc_mw`: only its rkey and type are needed here.

use super::post::{ctrl_flags, ctrl_of, sq_post, with_wqe, PostMode};
use super::{DirectCq, DirectQp};
use crate::ib::completion::{Completion, WcOpcode};
use crate::ib::error::{Error, Result};
use crate::ib::mem::Access;
use crate::ib::mr::Registration;
use crate::ib::mw::{prev_rkey, Claim, Mw, MwBind, MwState, MwType};
use crate::ib::wr::{SendFlags, SendWr, WrOp};
use mlx5_dv::driver::{ReceiveQueue, SendQueue, Table};
use mlx5_dv::prm::{CqeOpcode, CtrlFlags};
use mlx5_dv::sim;
use mlx5_dv::wqe::{umr_size, wqe_size, MwAccess, UmrBind, UmrWqe, WqeError};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Deallocates a sim window when dropped (`Device::dealloc_mw`, which
/// unbinds it first).
struct SimMw {
    dev: sim::Device,
    rkey: u32,
}
impl Registration for SimMw {}
impl Drop for SimMw {
    fn drop(&mut self) {
        let _ = self.dev.dealloc_mw(self.rkey);
    }
}

/// Allocates a window of `mw_type` in sim PD `pdn`; the registration
/// deallocates it when dropped. Returns it and its rkey (variant byte 0).
///
/// Errors: the sim's ([`Error::Sim`]: key space full).
pub(crate) fn alloc_sim_mw(
    dev: &sim::Device,
    pdn: u32,
    mw_type: MwType,
) -> Result<(Box<dyn Registration>, u32)> {
    let rkey = dev.alloc_mw(pdn, mw_type)?;
    let reg = SimMw {
        dev: dev.clone(),
        rkey,
    };
    Ok((Box::new(reg), rkey))
}

/// A window's access as the mkey context holds it (REMOTE_READ,
/// REMOTE_WRITE, REMOTE_ATOMIC, LOCAL_WRITE; the front end refused any
/// other flag).
fn mw_access(a: Access) -> MwAccess {
    MwAccess {
        local_write: a.contains(Access::LOCAL_WRITE),
        remote_read: a.contains(Access::REMOTE_READ),
        remote_write: a.contains(Access::REMOTE_WRITE),
        remote_atomic: a.contains(Access::REMOTE_ATOMIC),
    }
}

/// The UMR of a bind of `mw` (its type), whose rkey is `old`, to `bind`
/// (`None`: zero length), giving it the next rkey (`next_rkey`: the
/// variant byte plus one).
fn bind_wqe(mw: &Mw, old: u32, bind: Option<&MwBind<'_>>, flags: CtrlFlags) -> UmrWqe {
    UmrWqe {
        flags,
        imm_rkey: old,
        mw_type: mw.mw_type(),
        new_key: old.wrapping_add(1) as u8,
        bind: bind.map(|b| UmrBind {
            lkey: b.mr.lkey().0,
            addr: b.addr(),
            len: b.len as u64,
            access: mw_access(b.access),
        }),
    }
}

/// The driver's refusal as the crate's error.
fn wqe_error(e: WqeError) -> Error {
    match e {
        WqeError::QueueFull { .. } | WqeError::WrLimit { .. } => Error::QueueFull,
        e => Error::Wqe(e),
    }
}

impl DirectQp {
    /// Posts a type-1 bind of `mw` to `bind` (`None`: a zero-length bind,
    /// the unbind) as a UMR WQE and rings the doorbell: the window, whose
    /// rkey was `claim.old`, has `claim.new_rkey()` once it runs, its
    /// variant byte plus one, for a zero-length bind too (libmlx5's
    /// `mlx5_bind_mw` posts `ibv_inc_rkey(mw->rkey)` whatever the length;
    /// the sim sets the window's variant byte from it either way). The
    /// front end checked the window, the bind and the QP, and claimed the
    /// window (`Mw::claim_bind`); the bind is outstanding here until its
    /// WQE retires ([`PendingBinds`]).
    ///
    /// Errors: [`Error::CqFull`], [`Error::QueueFull`] (nothing written);
    /// [`Error::Wqe`] for a WQE the QP's SQ cannot hold (created without
    /// `QpConfig::memory_windows`: the front end refuses that first).
    pub(crate) fn bind_mw(
        &mut self,
        mw: &Mw,
        claim: Claim,
        bind: Option<&MwBind<'_>>,
        wr_id: u64,
        flags: SendFlags,
    ) -> Result<()> {
        let wqe = bind_wqe(mw, claim.old, bind, ctrl_of(flags));
        self.take_credits(1)?;
        let undo = self.signal_if_credits_low();
        let pi = self.sq.pi();
        let seq = self.sq.posted_count();
        if let Err(e) = self.sq.post_umr(&wqe, wr_id) {
            self.give_credits(1);
            if let Some(u) = undo {
                self.sq.undo_signal_next(u);
            }
            return Err(wqe_error(e));
        }
        self.note_umr(pi, false);
        self.note_bind(seq, mw);
        self.fence_after_umr();
        self.sq.ring_doorbell();
        self.posted_sends(1);
        Ok(())
    }

    /// The WQE of `w`, written without ringing the doorbell: a window WR's
    /// UMR ([`Self::write_umr_wr`]), any other's staged WQE
    /// (`SendQueue::post`, or `post_masked`). On error nothing is written.
    #[inline(always)]
    pub(super) fn write_wr(&mut self, w: &SendWr<'_>) -> Result<std::result::Result<(), WqeError>> {
        match w.op {
            WrOp::BindMw { .. } | WrOp::LocalInv { .. } => Ok(self.write_umr_wr(w)),
            _ => with_wqe(w, |wqe| sq_post(&mut self.sq, wqe, w.wr_id)),
        }
    }

    /// `(ds, wqebbs)` of `w`'s WQE, writing nothing (an inline payload's
    /// bytes not copied).
    #[inline(always)]
    pub(super) fn wr_size(&self, w: &SendWr<'_>) -> Result<(u32, u32)> {
        let geo = self.sq.geometry();
        match umr_of(w) {
            Some(u) => Ok(umr_size(geo, &u)?),
            None => Ok(super::post::with_wqe_shape(w, |wqe| wqe_size(geo, wqe))??),
        }
    }

    /// [`Self::write_wr`] of a type-2 bind (its window claimed by the
    /// front end, `Qp::claim_binds`: its rkey already the next; the bind
    /// outstanding here until its WQE retires, [`PendingBinds`]) or of a
    /// `LOCAL_INV`.
    #[cold]
    #[inline(never)]
    fn write_umr_wr(&mut self, w: &SendWr<'_>) -> std::result::Result<(), WqeError> {
        let wqe = umr_of(w).expect("a window WR");
        let pi = self.sq.pi();
        let seq = self.sq.posted_count();
        self.sq.post_umr(&wqe, w.wr_id)?;
        match w.op {
            WrOp::BindMw { mw, .. } => {
                self.note_umr(pi, false);
                self.note_bind(seq, mw);
            }
            _ => self.note_umr(pi, true),
        }
        self.fence_after_umr();
        Ok(())
    }

    /// Records the bind of `mw` just written as WR `seq` (the SQ's posted
    /// count before it) outstanding: the QP's own CQ polls on the general
    /// path until it retires, where its retire settles the window
    /// ([`Self::settle_binds`]).
    fn note_bind(&mut self, seq: u32, mw: &Mw) {
        self.binds.push(seq, mw.state.clone());
        if let Some(cq) = &mut self.cq {
            cq.general = true;
        }
    }

    /// After a requester CQE `cqe` retired WRs on the SQ (with binds
    /// outstanding; `failed_before`: a requester CQE in error was polled
    /// before it since RESET): [`PendingBinds::settle`] by the SQ's retired
    /// count. For the general polls that retire one CQE at a time through
    /// the `SendQueue` (a shared CQ's, RESET's drain).
    #[cold]
    #[inline(never)]
    pub(super) fn settle_binds(&mut self, opcode: CqeOpcode, failed_before: bool) {
        let retired = self.sq.retired_count();
        self.binds
            .settle(retired, opcode == CqeOpcode::REQ_ERR, failed_before);
    }

    /// Records the UMR just written at WQE index `pi`: a bind's or (`inv`)
    /// a `LOCAL_INV`'s, whose CQE the QP's own CQ then takes on the
    /// general path until it is retired ([`umr_completion`]).
    fn note_umr(&mut self, pi: u32, inv: bool) {
        let op = if inv {
            WcOpcode::LOCAL_INV
        } else {
            WcOpcode::BIND_MW
        };
        if !self.umr_ops.is_empty() {
            // (A power of two long: the SQ's WQEBBs.)
            let i = pi as usize & (self.umr_ops.len() - 1);
            self.umr_ops.set(i, op.0 as u8);
        }
        if inv {
            self.inv_pending = Some(self.sq.posted_count());
            if let Some(cq) = &mut self.cq {
                cq.general = true;
            }
        }
    }

    /// After a split QP took its halves back: binds its send half posted
    /// and not yet retired keep the QP's own CQ on the general path.
    pub(crate) fn binds_after_join(&mut self) {
        if !self.binds.is_empty() {
            self.binds.general = true;
            if let Some(cq) = &mut self.cq {
                cq.general = true;
            }
        }
    }

    /// Whether a `LOCAL_INV` or a bind may be outstanding: the QP's own
    /// CQ polls on the general path ([`Self::umrs_retired`] ends it).
    #[inline(always)]
    pub(super) fn umrs_pending(&self) -> bool {
        self.inv_pending.is_some() || self.binds.general
    }

    /// After a poll on the general path: once every `LOCAL_INV` posted is
    /// retired and no bind is outstanding, the QP's own CQ takes the fast
    /// paths again (unless it has timestamps).
    #[cold]
    #[inline(never)]
    pub(super) fn umrs_retired(&mut self) {
        if let Some(last) = self.inv_pending {
            if (self.sq.retired_count().wrapping_sub(last) as i32) < 0 {
                return;
            }
            self.inv_pending = None;
        }
        if !self.binds.is_empty() {
            return;
        }
        self.binds.general = false;
        if let Some(cq) = &mut self.cq {
            cq.general = cq.timestamps;
        }
    }

    /// After a UMR: until the next WQE, written by `SendQueue::post`, takes
    /// its small fence, every in-place post declines (the post mode is
    /// [`PostMode::Checked`]; `post_umr` closed the SQ's gates). The mode
    /// to come back to is kept ([`Self::fence_taken`] restores it).
    fn fence_after_umr(&mut self) {
        if self.mode_after_fence.is_none() {
            self.mode_after_fence = Some(self.post_mode);
        }
        self.post_mode = PostMode::Checked;
    }

    /// After a checked post: once the small fence is spent, the post mode
    /// [`Self::fence_after_umr`] kept comes back (with its gates).
    #[cold]
    #[inline(never)]
    pub(super) fn fence_taken(&mut self) {
        if self.sq.pending_fence().is_empty() {
            if let Some(m) = self.mode_after_fence.take() {
                self.set_post_mode(m);
            }
        }
    }
}

/// A QP's per-WQE UMR opcodes (`DirectQp::umr_ops`): one entry per WQEBB
/// of `sq`'s ring with `memory_windows`, else none.
pub(super) fn umr_ops(sq: &SendQueue, memory_windows: bool) -> Table<u8> {
    let n = if memory_windows {
        sq.geometry().wqe_cnt as usize
    } else {
        0
    };
    Table::new(n, WcOpcode::BIND_MW.0 as u8)
}

/// The binds outstanding on a QP's SQ, oldest first: each its WR's
/// sequence number (the SQ's posted count before it) and its window's
/// state ([`MwState`]: the window's allocation too, so a window dropped
/// under its bind is deallocated only once the bind is settled here).
/// While any is (`general`), the QP's own CQ polls on the general path,
/// where each CQE settles what it retired ([`Self::settle`]); a shared
/// CQ's poll settles them by CQE too. Shared with the halves of a split
/// QP ([`Self::share`]: the send half posts, the owner retires).
///
/// The queue is locked only to add a bind (its post) and to settle binds
/// (a poll's general path, with a bind outstanding): an empty one is told
/// by one atomic load. Room for one bind per two WQEBBs (a bind's UMR is
/// 2 or 3) from creation: no allocation at post.
pub(super) struct PendingBinds {
    shared: Arc<BindQueue>,
    /// Set with a bind posted; cleared by `DirectQp::umrs_retired` once
    /// none is outstanding (and no `LOCAL_INV`).
    pub(super) general: bool,
}

/// [`PendingBinds`]' queue and its length.
struct BindQueue {
    q: Mutex<VecDeque<(u32, Arc<MwState>)>>,
    len: AtomicUsize,
}

impl Drop for BindQueue {
    /// The QP and its halves gone: [`PendingBinds::settle_rest`].
    fn drop(&mut self) {
        let q = self.q.get_mut().unwrap_or_else(|e| e.into_inner());
        for (_, st) in q.drain(..) {
            st.settle(true);
        }
    }
}

impl PendingBinds {
    /// Room for the binds `sq` may hold with `memory_windows`, else none.
    pub(super) fn new(sq: &SendQueue, memory_windows: bool) -> PendingBinds {
        let n = if memory_windows {
            sq.geometry().wqe_cnt as usize / 2
        } else {
            0
        };
        PendingBinds {
            shared: Arc::new(BindQueue {
                q: Mutex::new(VecDeque::with_capacity(n)),
                len: AtomicUsize::new(0),
            }),
            general: false,
        }
    }

    /// The same queue, for a split QP's half.
    pub(super) fn share(&self) -> PendingBinds {
        PendingBinds {
            shared: self.shared.clone(),
            general: false,
        }
    }

    /// Whether no bind is outstanding (one atomic load).
    #[inline(always)]
    pub(super) fn is_empty(&self) -> bool {
        self.shared.len.load(Ordering::Acquire) == 0
    }

    /// The queue, locked.
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(u32, Arc<MwState>)>> {
        self.shared.q.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&mut self, seq: u32, state: Arc<MwState>) {
        {
            let mut q = self.lock();
            q.push_back((seq, state));
            self.shared.len.store(q.len(), Ordering::Release);
        }
        self.general = true;
    }

    /// Settles each bind a requester CQE retired, the SQ's retired count
    /// now `retired`: the one it names (its last, `retired - 1`) failed
    /// if the CQE is in `error`; one before it, which it retired unsignaled,
    /// ran (the device runs an SQ's WQEs in order, and reports the first
    /// that fails) unless the QP had failed before (`failed_before`: then
    /// it was flushed, though the sim and ConnectX give every flushed WQE
    /// its own CQE, signaled or not). A failed bind rolls its window's
    /// rkey back ([`MwState::settle`]). Any other CQE settles nothing.
    pub(super) fn settle(&mut self, retired: u32, error: bool, failed_before: bool) {
        let mut q = self.lock();
        while let Some(&(seq, _)) = q.front() {
            if retired.wrapping_sub(seq) as i32 <= 0 {
                break;
            }
            let named = seq == retired.wrapping_sub(1);
            let ok = !error || (!named && !failed_before);
            if let Some((_, st)) = q.pop_front() {
                st.settle(ok);
            }
        }
        self.shared.len.store(q.len(), Ordering::Release);
    }

    /// Settles every bind still outstanding as run (RESET, with no CQE of
    /// theirs seen: whether the device ran them is not known; the rkey
    /// stays the one each gave). The last copy of the QP dropped does the
    /// same.
    pub(super) fn settle_rest(&mut self) {
        if self.is_empty() {
            return;
        }
        let mut q = self.lock();
        for (_, st) in q.drain(..) {
            st.settle(true);
        }
        self.shared.len.store(0, Ordering::Release);
    }
}

/// RESET's drain of a QP's own CQ `cq` with binds outstanding (`binds`;
/// `failed`: a requester CQE in error was polled since the last RESET):
/// each requester CQE retires its WRs on `sq` and settles the binds it
/// retired, as the poll does ([`PendingBinds::settle`]), before the SQ is
/// reset; each receive's as `ReceiveQueue::discarded` has it.
#[cold]
#[inline(never)]
pub(super) fn drain_settling(
    cq: &mut DirectCq,
    rq: &mut ReceiveQueue,
    sq: &mut SendQueue,
    binds: &mut PendingBinds,
    mut failed: bool,
) {
    cq.drain(|c| {
        rq.discarded(c);
        if !matches!(c.opcode, CqeOpcode::REQ | CqeOpcode::REQ_ERR) {
            return;
        }
        let error = c.opcode == CqeOpcode::REQ_ERR;
        let posted = sq.posted_count();
        let mut r = sq.retirer();
        if r.complete(c.wqe_counter).is_some() {
            let retired = posted.wrapping_sub(r.outstanding());
            drop(r);
            binds.settle(retired, error, failed);
        }
        failed |= error;
    });
}

/// A UMR's completion `c` (its CQE's WQE index `counter`) as its WR was:
/// `WcOpcode::LOCAL_INV` where `umr_ops` says so (every UMR reads as
/// `BIND_MW` from the CQE). Any other completion is left as it is.
#[inline]
pub(super) fn umr_completion(umr_ops: &Table<u8>, c: &mut Completion, counter: u16) {
    if c.opcode != WcOpcode::BIND_MW || umr_ops.is_empty() {
        return;
    }
    let op = umr_ops.get(counter as usize & (umr_ops.len() - 1));
    c.opcode = WcOpcode(op as u32);
}

/// The UMR WQE of a window WR (`None` for any other WR): a type-2 bind of
/// the window's current rkey to its next (`CHECK_FREE`; the codec puts the
/// SQ's QPN in `qpn_mkey`), or a `LOCAL_INV` (a type-2 zero-length UMR).
fn umr_of(w: &SendWr<'_>) -> Option<UmrWqe> {
    let flags = ctrl_flags(w);
    match w.op {
        // (Claimed: the window's rkey is already the one the bind gives.)
        WrOp::BindMw { mw, bind } => Some(bind_wqe(mw, prev_rkey(mw.rkey().0), Some(&bind), flags)),
        WrOp::LocalInv { rkey } => Some(UmrWqe::local_inv(rkey.0, flags)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A UMR's completion reads as its WR's opcode by its WQE index (the
    /// table's length a power of two); any other completion, and a QP
    /// without the table, stays as it is.
    #[test]
    fn umr_completion_tells_local_inv_by_wqe_index() {
        let t = Table::new(8, WcOpcode::BIND_MW.0 as u8);
        t.set(5, WcOpcode::LOCAL_INV.0 as u8);
        let none = Table::new(0, 0u8);
        let c = |op| Completion {
            opcode: op,
            ..Completion::default()
        };
        for (table, op, counter, want) in [
            (&t, WcOpcode::BIND_MW, 5, WcOpcode::LOCAL_INV),
            (&t, WcOpcode::BIND_MW, 13, WcOpcode::LOCAL_INV),
            (&t, WcOpcode::BIND_MW, 4, WcOpcode::BIND_MW),
            (&t, WcOpcode::RDMA_WRITE, 5, WcOpcode::RDMA_WRITE),
            (&none, WcOpcode::BIND_MW, 5, WcOpcode::BIND_MW),
        ] {
            let mut x = c(op);
            umr_completion(table, &mut x, counter);
            assert_eq!(x.opcode, want, "{op:?} at {counter}");
        }
    }

    /// The window's access as the mkey context's bits.
    #[test]
    fn mw_access_maps_each_flag() {
        let all = Access::LOCAL_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_WRITE
            | Access::REMOTE_ATOMIC;
        assert_eq!(mw_access(all).bits(), 0x78);
        assert_eq!(mw_access(Access::REMOTE_READ).bits(), 0x10);
        assert_eq!(mw_access(Access::empty()).bits(), 0);
    }
}
