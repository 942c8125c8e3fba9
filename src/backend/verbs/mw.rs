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
//! a type-1 bind only, and a type-2 window is rebound after an
//! invalidation; so the [`Mw`] keeps the rkey, and each bind hands the
//! provider a copy of the window's `ibv_mw` carrying it (rxe and mlx5 read
//! only its plain fields: `rkey`, `type`, `pd`; they allocate it bare).
//! The `ibv_mw` rdma-core allocated is never written, so binds of one
//! window from two threads race in no memory (the device refuses the
//! second: its `mw_rkey` is stale).
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
use crate::ib::mw::{next_rkey, Mw, MwBind};
use crate::ib::wr::SendWr;
use std::sync::atomic::Ordering;

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

/// The variant byte of `rkey` minus one, wrapping: undoes [`next_rkey`].
fn prev_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_sub(1) & 0xff)
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
/// the window's `ibv_mw` (in `copy`) with its rkey now, the rkey the bind
/// gives it (the variant byte plus one: `ibv_inc_rkey`), and the bind
/// info. The window's rkey becomes the new one now (so a second bind of it
/// in the same post names it), until [`settle_binds`] records the bind
/// posted or gives the rkey back.
///
/// # Safety
/// `mw` is a verbs window (its `raw` a live `*mut ibv_mw`).
#[inline(never)]
pub(super) unsafe fn bind_wr(
    mw: &Mw,
    bind: &MwBind<'_>,
    copy: &mut std::mem::MaybeUninit<ibv_mw>,
) -> bind_mw_t {
    let now = mw.rkey.load(Ordering::Acquire);
    let new = next_rkey(now);
    mw.rkey.store(new, Ordering::Release);
    // SAFETY: the caller's contract.
    let c = copy.write(unsafe { mw_copy(mw, now) });
    bind_mw_t {
        mw: c,
        rkey: new,
        bind_info: bind_info(bind),
    }
}

/// After a post of the WRs `range` of `all` of which the provider took
/// the first `posted`: each type-2 bind posted is recorded
/// ([`Mw::record_bind`]: the window keeps its MR), and each one not posted
/// gives back the rkey [`bind_wr`] took (last first).
#[cold]
#[inline(never)]
pub(super) fn settle_binds<W: SendWrs + ?Sized>(
    all: &W,
    range: std::ops::Range<usize>,
    posted: usize,
) {
    let cut = range.start + posted.min(range.len());
    for i in (cut..range.end).rev() {
        if let WrOp::BindMw { mw, .. } = all.wr(i).op {
            let r = mw.rkey.load(Ordering::Acquire);
            mw.rkey.store(prev_rkey(r), Ordering::Release);
        }
    }
    for i in range.start..cut {
        if let WrOp::BindMw { mw, bind } = all.wr(i).op {
            // (A later bind of the same window in this post stores the
            // same rkey and its own MR.)
            mw.record_bind(mw.rkey.load(Ordering::Acquire), Some(bind.mr));
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
    /// send's); returns the window's new rkey (the `ibv_mw.rkey` the
    /// provider wrote after the call, in the copy handed to it). The front
    /// end checked the window, the bind and the QP, and records the bind.
    ///
    /// Errors, nothing posted: [`Error::QueueFull`] / [`Error::CqFull`];
    /// [`Error::Verbs`] naming `ibv_bind_mw` and the provider's errno.
    pub(crate) fn bind_mw(
        &mut self,
        mw: &Mw,
        bind: Option<&MwBind<'_>>,
        wr_id: u64,
        flags: SendFlags,
    ) -> Result<u32> {
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
        let now = mw.rkey.load(Ordering::Acquire);
        // SAFETY: a verbs window's `raw` is its live `*mut ibv_mw`.
        let mut copy = unsafe { mw_copy(mw, now) };
        // The MR a zero-length bind names (module docs), kept by the
        // window while the lock is held.
        let last = mw.bound.lock().unwrap_or_else(|e| e.into_inner());
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
        drop(last);
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
        Ok(copy.rkey)
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
    use super::prev_rkey;
    use crate::ib::mw::next_rkey;

    #[test]
    fn prev_rkey_undoes_next_rkey() {
        for r in [0u32, 0x1234_5600, 0x1234_56ff, 0xffff_ffff, 0xabcd_ef7f] {
            assert_eq!(prev_rkey(next_rkey(r)), r);
        }
    }
}
