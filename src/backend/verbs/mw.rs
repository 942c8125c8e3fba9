//! Memory windows on the verbs path (rdma-core `libibverbs/verbs.h`,
//! `providers/rxe/rxe.c`): type-1 binds through `ibv_bind_mw`
//! ([`VerbsQp::bind_mw`]); type-2 binds, `LOCAL_INV` and SEND with
//! invalidate as WRs through `post_send` (`IBV_WR_BIND_MW`,
//! `IBV_WR_LOCAL_INV`, `IBV_WR_SEND_WITH_INV` in `post.rs`;
//! `ibv_wr_bind_mw`, `ibv_wr_local_inv`, `ibv_wr_send_inv` in
//! `post_ex.rs`, where the QP was made with their send ops, else the
//! old calls: `VerbsQp::mw_ex`).
//!
//! **The window's rkey is ours.** A bind names the window by its current
//! rkey (rxe's kernel refuses a bind whose `mw_rkey` is not the window's
//! now, `rxe_bind_mw`; mlx5 puts it in the UMR's `ctrl.imm`), which the
//! provider reads from the `ibv_mw`. rdma-core updates `ibv_mw.rkey` after
//! a type-1 bind only, at post (whatever its completion), and a type-2
//! window is rebound after an invalidation; so the [`Mw`] keeps the rkey
//! (claimed by the front end before the post, `Mw::claim_bind`: one bind
//! of a window outstanding at a time), and each bind hands the provider a
//! copy of the window's `ibv_mw` carrying the rkey before the claim (rxe
//! and mlx5 read only its plain fields: `rkey`, `type`, `pd`; they
//! allocate it bare). The `ibv_mw` rdma-core allocated is never written.
//!
//! **A bind is outstanding until its WR retires** ([`VerbsBinds`]): its
//! completion, or a later signaled WR's (which retires it unsignaled), or
//! the RESET's drain. One in error (`IBV_WC_MW_BIND_ERR`, or flushed)
//! rolls the window's rkey back (`MwState::settle`).
//!
//! **A zero-length bind names an MR.** `ibv_bind_mw` allows `mr` null with
//! length 0, but rxe's provider reads `bind_info.mr->lkey` whatever the
//! length (`convert_send_wr`, rdma-core 44 to 59; its kernel ignores it at
//! length 0). So an unbind names the MR of the window's last bind, which
//! the window keeps alive; a window never bound names a stand-in: zeroed
//! memory holding an `ibv_mr` of the window's context and PD, lkey 0, and
//! room behind it for what mlx5 reads past the `ibv_mr` (`verbs_mr.mr_type`
//! 0, `IBV_MR_TYPE_MR`; `mlx5_mr.alloc_flags` 0).
//!
//! **The receive of a SEND with invalidate** (`VerbsQp::retire`) is a
//! [`WcOpcode::RECV`] whose [`Completion::imm`] holds the rkey
//! invalidated and whose `src_qp` has [`SrcQp::WITH_INV`]: flagged
//! `IBV_WC_WITH_INV`, or, as rxe hands it on, the kernel's own bit for it
//! ([`KERNEL_WITH_INV`]).

use super::*;
use crate::ib::keys::Rkey;
use crate::ib::mw::{prev_rkey, Claim, Mw, MwBind, MwState};
use crate::ib::wr::SendWr;
use std::collections::VecDeque;

/// Whether the extended QP `qpx` (null: none) has the window WRs'
/// builders: made with `IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV
/// | IBV_QP_EX_WITH_SEND_WITH_INV`, which the provider took.
///
/// # Safety
/// `qpx` is null or a live `ibv_qp_ex`.
pub(super) unsafe fn window_ops_set(qpx: *mut ibv_qp_ex) -> bool {
    if qpx.is_null() {
        return false;
    }
    // SAFETY: the caller's contract (reads of plain fields).
    let x = unsafe { &*qpx };
    x.wr_bind_mw.is_some() && x.wr_local_inv.is_some() && x.wr_send_inv.is_some()
}

/// Whether `op` is a window WR (a type-2 bind, `LOCAL_INV`, SEND with
/// invalidate): the extended path takes it only where the QP has their
/// builders (`VerbsQp::mw_ex`).
#[inline(always)]
pub(super) fn is_window_op(op: &WrOp<'_>) -> bool {
    matches!(
        op,
        WrOp::BindMw { .. } | WrOp::LocalInv { .. } | WrOp::SendWithInv { .. }
    )
}

/// A copy of the window's `ibv_mw` carrying the window's rkey `rkey` (see
/// the module docs).
///
/// # Safety
/// `mw.raw` is the live `*mut ibv_mw` of a verbs window.
unsafe fn mw_copy(mw: &Mw, rkey: u32) -> ibv_mw {
    let raw = mw.raw as *const ibv_mw;
    // SAFETY: the caller's contract; rdma-core never writes it after
    // `ibv_alloc_mw` and neither do we (reads of plain fields).
    unsafe {
        ibv_mw {
            context: (*raw).context,
            pd: (*raw).pd,
            rkey,
            handle: (*raw).handle,
            type_: (*raw).type_,
        }
    }
}

/// `ibv_mw_bind_info` of `bind`: the MR (its `*mut ibv_mr`), the window's
/// first address (the MR's address plus the offset: not zero-based), its
/// length and access (`IBV_ACCESS_*`, the same bits as [`crate::Access`]).
fn bind_info(bind: &MwBind<'_>) -> ibv_mw_bind_info {
    ibv_mw_bind_info {
        mr: bind.mr.handle() as *mut ibv_mr,
        addr: bind.addr(),
        length: bind.len as u64,
        mw_access_flags: bind.access.bits(),
    }
}

/// The type-2 bind of `mw` to `bind` as the provider takes it: a copy of
/// the window's `ibv_mw` (in `copy`) with the rkey before the bind, the
/// rkey the bind gives it (the variant byte plus one: `ibv_inc_rkey`), and
/// the bind info. The front end claimed the window (`Mw::claim_bind`):
/// its rkey is already the new one.
///
/// # Safety
/// `mw` is a verbs window (its `raw` a live `*mut ibv_mw`).
#[inline(never)]
pub(super) unsafe fn bind_wr(
    mw: &Mw,
    bind: &MwBind<'_>,
    copy: &mut std::mem::MaybeUninit<ibv_mw>,
) -> bind_mw_t {
    let new = mw.rkey().0;
    // SAFETY: the caller's contract.
    let c = copy.write(unsafe { mw_copy(mw, prev_rkey(new)) });
    bind_mw_t {
        mw: c,
        rkey: new,
        bind_info: bind_info(bind),
    }
}

/// The binds outstanding on a QP's send queue, oldest first: each its
/// WR's sequence number (our verbs `wr_id`) and its window's state
/// (`MwState`, which holds the window's allocation too: a window dropped
/// under its bind is deallocated once the bind is settled here). Each
/// send completion settles the binds it retired ([`Self::settle`]).
/// Shared with the halves of a split QP ([`Self::share`]: the send half
/// posts, the owner retires). Locked only to add a bind and to settle
/// binds (with one outstanding); an empty one is told by one atomic load.
#[derive(Default)]
pub(super) struct VerbsBinds {
    shared: std::sync::Arc<BindQueue>,
}

/// [`VerbsBinds`]' queue, its length, and whether a send completion in
/// error was seen since the last RESET (the QP is in ERR: a bind it
/// retires unsignaled was flushed).
#[derive(Default)]
struct BindQueue {
    q: std::sync::Mutex<Queue>,
    len: std::sync::atomic::AtomicUsize,
}

#[derive(Default)]
struct Queue {
    q: VecDeque<(u64, std::sync::Arc<MwState>)>,
    failed: bool,
}

impl Drop for BindQueue {
    /// The QP and its halves gone: [`VerbsBinds::settle_rest`].
    fn drop(&mut self) {
        let q = self.q.get_mut().unwrap_or_else(|e| e.into_inner());
        for (_, st) in q.q.drain(..) {
            st.settle(true);
        }
    }
}

impl VerbsBinds {
    /// The same queue, for a split QP's half.
    pub(super) fn share(&self) -> VerbsBinds {
        VerbsBinds {
            shared: self.shared.clone(),
        }
    }

    /// Whether no bind is outstanding (one atomic load).
    #[inline(always)]
    pub(super) fn is_empty(&self) -> bool {
        self.shared.len.load(std::sync::atomic::Ordering::Acquire) == 0
    }

    /// The queue, locked.
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.shared.q.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores the queue's length `n` for [`Self::is_empty`].
    fn set_len(&self, n: usize) {
        self.shared
            .len
            .store(n, std::sync::atomic::Ordering::Release);
    }

    /// Adds the bind of WR `seq` of the window `state`.
    pub(super) fn push(&mut self, seq: u64, state: std::sync::Arc<MwState>) {
        let mut q = self.lock();
        q.q.push_back((seq, state));
        self.set_len(q.q.len());
    }

    /// Settles each bind a send completion for sequence number `seq`
    /// (in `error`) retired, the sends retired now `retired`: the bind it
    /// names failed if it is in error; one before it (retired unsignaled)
    /// ran, unless the QP had failed before (it was flushed: rxe gives
    /// every flushed WR its own completion, signaled or not,
    /// `rxe_comp.c`). A failed bind rolls its window's rkey back.
    pub(super) fn settle(&mut self, seq: u64, error: bool, retired: u64) {
        let mut q = self.lock();
        while let Some(&(s, _)) = q.q.front() {
            if s >= retired {
                break;
            }
            let ok = !error || (s != seq && !q.failed);
            if let Some((_, st)) = q.q.pop_front() {
                st.settle(ok);
            }
        }
        q.failed |= error;
        self.set_len(q.q.len());
    }

    /// Settles every bind still outstanding as run (RESET, with no
    /// completion of theirs seen: the rkey stays the one each gave) and
    /// forgets a failure. The last copy of the QP dropped does the same.
    pub(super) fn settle_rest(&mut self) {
        let mut q = self.lock();
        for (_, st) in q.q.drain(..) {
            st.settle(true);
        }
        q.failed = false;
        self.set_len(0);
    }
}

/// After a post of the WRs `range` of `all` of which the provider took
/// the first `posted`, the first as sequence number `seq`: each type-2
/// bind posted is outstanding (`binds`) until its WR retires. (Those not
/// posted are given back by [`VerbsQp::post_send`]'s caller path:
/// [`binds_not_posted`].)
#[cold]
#[inline(never)]
pub(super) fn binds_posted<W: SendWrs + ?Sized>(
    binds: &mut VerbsBinds,
    all: &W,
    range: std::ops::Range<usize>,
    posted: usize,
    seq: u64,
) {
    let cut = range.start + posted.min(range.len());
    for i in range.start..cut {
        if let WrOp::BindMw { mw, .. } = all.wr(i).op {
            binds.push(seq + (i - range.start) as u64, mw.state.clone());
        }
    }
}

/// After a post of `all` that failed with its first `posted` WRs posted:
/// the claims (`Mw::claim_bind`) of the type-2 binds after them go back.
#[cold]
#[inline(never)]
pub(super) fn binds_not_posted<W: SendWrs + ?Sized>(all: &W, posted: usize) {
    for i in (posted..all.count()).rev() {
        if let WrOp::BindMw { mw, .. } = all.wr(i).op {
            mw.unclaim_bind();
        }
    }
}

/// Room for the stand-in MR a zero-length bind of a window never bound
/// names (module docs): zeroed, an `ibv_mr` at its start.
#[repr(C, align(8))]
struct StandInMr([u64; 32]);

impl VerbsQp {
    /// Binds the type-1 window `mw` to `bind` (`None`: a zero-length bind,
    /// the unbind) with `ibv_bind_mw`, posted on this QP's send queue as
    /// one WR (its room and CQ credit taken, its completion retired as any
    /// send's, which settles the bind: [`VerbsBinds`]). The front end
    /// checked the window, the bind and the QP, and claimed the window
    /// (`claim`: the rkey the bind names it by, `claim.old`; the provider
    /// writes the next, `ibv_inc_rkey`, into the copy handed to it).
    ///
    /// Errors, nothing posted: [`Error::QueueFull`] / [`Error::CqFull`];
    /// [`Error::Verbs`] naming `ibv_bind_mw` and the provider's errno.
    pub(crate) fn bind_mw(
        &mut self,
        mw: &Mw,
        claim: Claim,
        bind: Option<&MwBind<'_>>,
        wr_id: u64,
        flags: SendFlags,
    ) -> Result<()> {
        debug_assert!(!self.is_split(), "the front end refuses a split QP's binds");
        if self.posted - self.retired >= self.max_post as u64 {
            return Err(Error::QueueFull);
        }
        if self.counts && !self.credits.take(1) {
            return Err(Error::CqFull);
        }
        let low = self.counts && self.credits.free() as u64 * 2 <= self.credits.depth() as u64;
        let seq = self.posted;
        // (The bookkeeping of a WR with these flags and no data.)
        let shape = SendWr {
            wr_id,
            op: WrOp::LocalInv { rkey: Rkey(0) },
            sges: &[],
            flags,
            inline: false,
        };
        let send_flags = self.track(&shape, seq, low);
        let now = claim.old;
        // SAFETY: a verbs window's `raw` is its live `*mut ibv_mw`.
        let mut copy = unsafe { mw_copy(mw, now) };
        // The MR a zero-length bind names (module docs; the claim made it
        // `last`), kept by the window while the lock is held.
        let bound = mw.state.bound.lock().unwrap_or_else(|e| e.into_inner());
        let last = &bound.last;
        let mut stand_in = StandInMr([0; 32]);
        let info = match bind {
            Some(b) => bind_info(b),
            None => {
                let mr = match last.as_ref() {
                    Some(m) => m.handle() as *mut ibv_mr,
                    None => {
                        let p = stand_in.0.as_mut_ptr().cast::<ibv_mr>();
                        // SAFETY: `stand_in` is zeroed, aligned and larger
                        // than an `ibv_mr`; its context and PD are the
                        // window's.
                        unsafe {
                            (*p).context = copy.context;
                            (*p).pd = copy.pd;
                        }
                        p
                    }
                };
                ibv_mw_bind_info {
                    mr,
                    addr: 0,
                    length: 0,
                    mw_access_flags: 0,
                }
            }
        };
        let mut mb = ibv_mw_bind {
            wr_id: seq,
            send_flags,
            bind_info: info,
        };
        // SAFETY: live QP posted to only by its owner (`&mut self`); the
        // window's context has `bind_mw` (checked by `alloc_mw`); `copy`,
        // `mb`, the MR it names (an `Mr` the caller or the window holds, or
        // the stand-in) outlive the call; the front end checked the bind
        // (type 1, range inside the MR, access, one PD).
        let rc = unsafe { ibv_bind_mw(self.qp, &mut copy, &mut mb) };
        drop(bound);
        if rc != 0 {
            if self.counts {
                self.credits.give(1);
            }
            return Err(match rc {
                libc::ENOMEM => Error::QueueFull,
                e => Error::Verbs {
                    call: "ibv_bind_mw",
                    errno: if e > 0 { e } else { errno() },
                    detail: format!(
                        " ({} of window {:#x}, not posted)",
                        if bind.is_some() {
                            "a bind"
                        } else {
                            "a zero-length bind"
                        },
                        now
                    ),
                },
            });
        }
        self.posted = seq + 1;
        self.progress.sends_posted(self.posted as u32);
        // (rdma-core's providers write the new rkey into the `ibv_mw` they
        // were given: `ibv_inc_rkey` of the one it had.)
        debug_assert_eq!(copy.rkey, claim.new_rkey());
        self.note_binds_posted(|b| b.push(seq, mw.state.clone()));
        Ok(())
    }

    /// Records binds just posted (`push` adds them to [`Self::binds`]):
    /// the lean poll (`poll_one`) declines while any is outstanding, so
    /// that every send completion goes through `retire`, which settles
    /// them.
    pub(super) fn note_binds_posted(&mut self, push: impl FnOnce(&mut VerbsBinds)) {
        push(&mut self.binds);
        self.set_gate();
    }

    /// The send completion `w` retired sends up to `self.retired`, with
    /// binds outstanding: [`VerbsBinds::settle`]; once none is, the lean
    /// poll takes completions again.
    #[cold]
    #[inline(never)]
    pub(super) fn settle_binds(&mut self, w: &ibv_wc) {
        let error = w.status != ibv_wc_status::IBV_WC_SUCCESS;
        self.binds.settle(w.wr_id, error, self.retired);
        if self.binds.is_empty() {
            self.set_gate();
        }
    }

    /// RESET's drain of the QP's own CQ with binds outstanding: each send
    /// completion settles the binds it retires, as [`Self::retire`] would,
    /// then the rest are settled as run ([`VerbsBinds::settle_rest`]);
    /// each receive's as `discarded` has it.
    #[cold]
    #[inline(never)]
    pub(super) fn drain_settling(&mut self) {
        let srq = &self.srq;
        let binds = &mut self.binds;
        let mut retired = self.retired;
        let posted = self.posted;
        self.cq.drain(|w| {
            discarded(srq, w);
            if w.wr_id & (RECV_TAG | SRQ_TAG) == 0 && w.wr_id >= retired && w.wr_id < posted {
                retired = w.wr_id + 1;
                let error = w.status != ibv_wc_status::IBV_WC_SUCCESS;
                binds.settle(w.wr_id, error, retired);
            }
        });
        self.binds.settle_rest();
    }
}

// The receive of a SEND with invalidate.

/// The `wc_flags` bit that rxe sets on a receive of a SEND with
/// invalidate: the kernel's `IB_WC_WITH_INVALIDATE` (`1 << 2`,
/// `ib_verbs.h`), which rxe writes into the completion user space reads
/// unconverted (Linux 6.1 `rxe_resp.c` `do_complete`; rdma-core's rxe
/// `rxe_poll_cq` and `cq_read_wc_flags` hand it on), where verbs.h's
/// `IBV_WC_WITH_INV` is `1 << 3` and `1 << 2` is `IBV_WC_IP_CSUM_OK`. A
/// checksum flag is set only on raw-packet and UD receives (mlx5's
/// `MLX5_RX_CSUM_VALID`), so on an RC or UC QP this bit means the
/// invalidate ([`VerbsQp::inv_flags`]); seen on rxe0 in the guest.
const KERNEL_WITH_INV: u32 = 1 << 2;

impl VerbsQp {
    /// The `wc_flags` bits that mark a receive of a SEND with invalidate
    /// on this QP: `IBV_WC_WITH_INV`, and [`KERNEL_WITH_INV`] on RC and
    /// UC (the transports a SEND with invalidate comes on).
    #[inline(always)]
    pub(super) fn inv_flags(&self) -> u32 {
        match self.caps.qp_type {
            crate::ib::qp_attr::QpType::Rc | crate::ib::qp_attr::QpType::Uc => {
                ibv_wc_flags::IBV_WC_WITH_INV.0 | KERNEL_WITH_INV
            }
            _ => ibv_wc_flags::IBV_WC_WITH_INV.0,
        }
    }
}

/// A work completion's [`Completion::imm`]: the immediate (`imm_data`,
/// big-endian on the wire, host order here) with `IBV_WC_WITH_IMM`; the
/// rkey a SEND with invalidate invalidated (`invalidated_rkey`, host
/// order already, `ibv_wc_read_invalidated_rkey`) with a flag of `inv`
/// ([`VerbsQp::inv_flags`]); else `None`.
#[inline(always)]
pub(super) fn wc_imm(w: &ibv_wc, inv: u32) -> Option<u32> {
    let f = w.wc_flags;
    // SAFETY: both members of the union are a u32 (plain data); which one
    // it holds is what the flag checked says.
    let raw = unsafe { w.imm_data_invalidated_rkey_union.imm_data };
    if f & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0 {
        Some(u32::from_be(raw))
    } else if f & inv != 0 {
        Some(raw)
    } else {
        None
    }
}

/// A work completion's [`Completion::src_qp`]: the sender's QPN, the GRH
/// flag, and [`SrcQp::WITH_INV`] with a flag of `inv`
/// ([`VerbsQp::inv_flags`]).
#[inline(always)]
pub(super) fn wc_src_qp(w: &ibv_wc, inv: u32) -> SrcQp {
    let s = SrcQp::new(w.src_qp, w.wc_flags & ibv_wc_flags::IBV_WC_GRH.0 != 0);
    if w.wc_flags & inv != 0 {
        SrcQp(s.0 | SrcQp::WITH_INV)
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A completion settles the binds it retired: the one it names fails
    /// with it; one before it, retired unsignaled, ran unless the QP had
    /// failed before.
    #[test]
    fn settle_fails_the_bind_named_and_those_after_a_failure() {
        let state = |rkey| {
            struct NoReg;
            impl crate::ib::mr::Registration for NoReg {}
            MwState::new(Box::new(NoReg), rkey)
        };
        let (a, b, c) = (state(0x100), state(0x200), state(0x300));
        for s in [&a, &b, &c] {
            s.claim().unwrap();
        }
        let mut binds = VerbsBinds::default();
        binds.push(3, a.clone());
        binds.push(5, b.clone());
        binds.push(7, c.clone());
        // WR 5 fails: 3 (unsignaled, before it) ran, 5 rolls back.
        binds.settle(5, true, 6);
        assert_eq!((a.rkey(), a.outstanding()), (0x101, false));
        assert_eq!((b.rkey(), b.outstanding()), (0x200, false));
        assert!(c.outstanding());
        // A flush of WR 8 retires 7 unsignaled: flushed too.
        binds.settle(8, true, 9);
        assert_eq!((c.rkey(), c.outstanding()), (0x300, false));
        assert!(binds.is_empty());
    }
}
