//! The verbs backend's lean post and poll of one WR (issue 32): what
//! `Qp::post_send` of one WR and `Qp::poll` into one entry take first, as
//! the direct path's in-place posts are.
//!
//! The post: one gate (`VerbsQp::gate`: the QP in RTS, not split, taking
//! CQ credits, RC or UC, at least one send SGE, the provider's entry points
//! found at creation), the WR's room under `max_send_wr`, its one SGE on
//! the QP's PD in one compare (`Sge::one_seg_on`: not a byte-slice SGE,
//! 1 to 2^31 - 1 bytes), its opcode (WRITE, WRITE_IMM, SEND, SEND_IMM; READ
//! on RC) and a CQ credit: all the checked path
//! (`Qp::post_send_checked`, `VerbsQp::post_send`) would check of such a
//! WR. Anything else is declined having changed nothing, and the checked
//! path posts it or says why not. Then the WR's bookkeeping
//! (`VerbsQp::track`: the caller's `wr_id`, auto-signal) and one
//! `ibv_wr_start` / `ibv_wr_*` / `ibv_wr_set_sge` / `ibv_wr_complete`
//! batch (or one `ibv_post_send`), each called through the provider's
//! function pointer directly (found set at creation: `send_ops_set`).
//!
//! The poll: a QP with its own CQ polling into one entry takes one
//! completion (`VerbsCq::poll_one`); a send's of a QP not split is retired
//! here as the general `VerbsQp::retire` would, any other by `retire`.

use super::*;
use crate::ib::qp_attr::QpType;
use crate::ib::wr::SendWr;

/// The operation of a WR the lean post builds.
#[derive(Clone, Copy)]
enum Op {
    Write,
    WriteImm,
    Send,
    SendImm,
    Read,
}

/// Whether the extended QP `qpx` of type `t` has every builder the lean
/// post calls (`post_one_fast`), or, with `qpx` null, whether the context
/// of `qp` has `post_send`: checked once at creation, so the post calls
/// them without a test.
///
/// # Safety
/// `qp` is a live QP and `qpx` null or its `ibv_qp_ex`.
pub(super) unsafe fn send_ops_set(qp: *mut ibv_qp, qpx: *mut ibv_qp_ex, t: QpType) -> bool {
    // SAFETY: the caller's contract: both are live (reads of plain fields).
    unsafe {
        if qpx.is_null() {
            return (*(*qp).context).ops.post_send.is_some();
        }
        let x = &*qpx;
        x.wr_start.is_some()
            && x.wr_complete.is_some()
            && x.wr_set_sge.is_some()
            && x.wr_rdma_write.is_some()
            && x.wr_rdma_write_imm.is_some()
            && x.wr_send.is_some()
            && x.wr_send_imm.is_some()
            && (t != QpType::Rc || x.wr_rdma_read.is_some())
    }
}

/// `Option::unwrap_unchecked` of a provider entry point.
///
/// # Safety
/// `f` is `Some` (checked at creation: [`send_ops_set`]).
#[inline(always)]
unsafe fn set<F>(f: Option<F>) -> F {
    // SAFETY: the caller's contract.
    unsafe { f.unwrap_unchecked() }
}

impl VerbsQp {
    /// Opens or closes the lean post's gate after a change of state,
    /// split or credit counting (`gate`).
    pub(super) fn set_gate(&mut self) {
        // (With window binds outstanding every send completion goes
        // through `retire`, which settles them: `mw.rs`.)
        self.plain = self.split.is_none() && self.counts && self.binds.is_empty();
        self.gate = self.rts
            && self.split.is_none()
            && self.counts
            && self.ops_set
            && self.caps.max_send_sge >= 1
            && matches!(self.caps.qp_type, QpType::Rc | QpType::Uc);
    }

    /// Posts the one WR `w` (its memory of PD `pd`) if it is a 1-SGE
    /// WRITE, WRITE_IMM, SEND, SEND_IMM or (RC) READ, not inline, and the
    /// gate is open, with room for it and a CQ credit: `Some` of the
    /// post's result (an error: the provider's; not posted, its credit back).
    /// `None`, having changed nothing, for anything else: the caller's
    /// checked path then posts it or says why not.
    #[inline(always)]
    pub(crate) fn post_one_fast(&mut self, w: &SendWr<'_>, pd: u32) -> Option<Result<()>> {
        let seq = self.posted;
        if !self.gate || seq - self.retired >= self.max_post as u64 {
            return None;
        }
        let s = match (w.sges, w.inline) {
            ([s], false) if s.one_seg_on(pd) => s,
            _ => return None,
        };
        let (op, rkey, raddr, imm) = match w.op {
            WrOp::RdmaWrite { remote: r } => (Op::Write, r.rkey.0, r.addr, 0),
            WrOp::RdmaWriteWithImm { remote: r, imm } => (Op::WriteImm, r.rkey.0, r.addr, imm),
            WrOp::Send => (Op::Send, 0, 0, 0),
            WrOp::SendWithImm { imm } => (Op::SendImm, 0, 0, imm),
            WrOp::RdmaRead { remote: r } if self.caps.qp_type == QpType::Rc => {
                (Op::Read, r.rkey.0, r.addr, 0)
            }
            _ => return None,
        };
        let free = self.credits.take_one()?;
        // As `post_send`: the WR that leaves at most half the CQ's credits
        // free makes a CQE.
        let low = free as u64 * 2 <= self.credits.depth() as u64;
        let flags = self.track(w, seq, low);
        let qpx = self.qpx;
        let rc = if !qpx.is_null() {
            // SAFETY: live extended QP made with these send ops, whose
            // builders were found set at creation (`send_ops_set`: the gate
            // is closed otherwise); posted to only by its one owner (`&mut
            // self`); `wr_id` and `wr_flags` are plain fields the builder
            // reads; the SGE names memory of the QP's PD (checked above,
            // its range by `Sge::new`); one batch, begun and completed here.
            unsafe {
                let x = &*qpx;
                set(x.wr_start)(qpx);
                (*qpx).wr_id = seq;
                (*qpx).wr_flags = flags;
                match op {
                    Op::Write => set(x.wr_rdma_write)(qpx, rkey, raddr),
                    Op::WriteImm => set(x.wr_rdma_write_imm)(qpx, rkey, raddr, imm.to_be()),
                    Op::Send => set(x.wr_send)(qpx),
                    Op::SendImm => set(x.wr_send_imm)(qpx, imm.to_be()),
                    Op::Read => set(x.wr_rdma_read)(qpx, rkey, raddr),
                }
                set(x.wr_set_sge)(qpx, s.lkey.0, s.addr, s.len);
                set(x.wr_complete)(qpx)
            }
        } else {
            let mut sge = ibv_sge {
                addr: s.addr,
                length: s.len,
                lkey: s.lkey.0,
            };
            // SAFETY: ibv_send_wr is plain data (pointers and integers);
            // zero is valid.
            let mut v: ibv_send_wr = unsafe { std::mem::zeroed() };
            v.wr_id = seq;
            v.send_flags = flags;
            v.sg_list = &mut sge;
            v.num_sge = 1;
            v.opcode = match op {
                Op::Write => ibv_wr_opcode::IBV_WR_RDMA_WRITE,
                Op::WriteImm => ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM,
                Op::Send => ibv_wr_opcode::IBV_WR_SEND,
                Op::SendImm => ibv_wr_opcode::IBV_WR_SEND_WITH_IMM,
                Op::Read => ibv_wr_opcode::IBV_WR_RDMA_READ,
            };
            v.wr.rdma = rdma_t {
                remote_addr: raddr,
                rkey,
            };
            v.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
            let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
            // SAFETY: live QP whose context's `post_send` was found set at
            // creation (`send_ops_set`); the WR and its SGE outlive the
            // call; the SGE names memory of the QP's PD (checked above).
            unsafe { set((*(*self.qp).context).ops.post_send)(self.qp, &mut v, &mut bad) }
        };
        if rc != 0 {
            // Not posted: its credit goes back.
            self.credits.give(1);
            return Some(Err(fast_error(rc, !qpx.is_null())));
        }
        self.posted = seq + 1;
        self.progress.sends_posted(self.posted as u32);
        Some(Ok(()))
    }

    /// [`Self::poll`] into one entry on the QP's own CQ: one completion
    /// (`VerbsCq::poll_one`), retired as [`Self::poll`] retires it
    /// (`retire`; a send's of a QP not split, the commonest, here without
    /// its other cases), its timestamp where the CQ has them.
    #[inline(always)]
    pub(super) fn poll_one(&mut self, out: &mut Completion) -> Result<usize> {
        let Some((w, ts)) = self.cq.poll_one()? else {
            return Ok(0);
        };
        let id = w.wr_id;
        // Our wr_id of a send is its sequence number (`VerbsQp`): one
        // posted (below `posted`: not split) and not yet retired (a
        // completion from before a RESET is dropped, as `retire` does).
        if !(self.plain && id & (RECV_TAG | SRQ_TAG) == 0 && id >= self.retired && id < self.posted)
        {
            // (A copy made here: `w` itself stays in registers on the
            // common path.)
            let other = ibv_wc {
                imm_data_invalidated_rkey_union: imm_data_invalidated_rkey_union_t {
                    // SAFETY: both members are a u32 (plain data).
                    imm_data: unsafe { w.imm_data_invalidated_rkey_union.imm_data },
                },
                ..w
            };
            return Ok(self.poll_one_other(&other, ts, out));
        }
        // It retires every send up to it (unsignaled ones included), and
        // their CQ credits go back (each was taken: `plain`).
        let freed = id + 1 - self.retired;
        self.retired = id + 1;
        self.credits.give_taken(freed as u32);
        self.progress.sends_retired(self.retired as u32);
        let slot = (id % self.max_post as u64) as usize;
        if self.hidden.get(slot) && w.status == ibv_wc_status::IBV_WC_SUCCESS {
            return Ok(0); // asked for by auto-signal only
        }
        let ok = w.status == ibv_wc_status::IBV_WC_SUCCESS;
        *out = Completion {
            wr_id: self.wr_ids.get(slot),
            status: WcStatus(w.status),
            opcode: WcOpcode(w.opcode),
            // SAFETY: reading the union as the immediate is meaningful only
            // with IBV_WC_WITH_IMM set, which is checked first.
            imm: (w.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0)
                .then(|| u32::from_be(unsafe { w.imm_data_invalidated_rkey_union.imm_data })),
            byte_len: w.byte_len,
            qp_num: w.qp_num,
            vendor_err: w.vendor_err,
            src_qp: SrcQp::new(w.src_qp, w.wc_flags & ibv_wc_flags::IBV_WC_GRH.0 != 0),
            // (As `stamped`: none for a completion in error.)
            timestamp: if ok { ts } else { 0 },
        };
        Ok(1)
    }

    /// [`Self::poll_one`] of any other completion (a receive's, a split
    /// QP's, one that names no WR outstanding): the general `retire`.
    #[inline(never)]
    fn poll_one_other(&mut self, w: &ibv_wc, ts: u64, out: &mut Completion) -> usize {
        let mut freed = 0;
        let c = self.retire(w, &mut freed);
        self.credits.give(freed);
        match c {
            Some(mut c) => {
                c.timestamp = stamped(&c, ts);
                *out = c;
                1
            }
            None => 0,
        }
    }
}

/// The lean post's error for the provider's `rc` (`ext`: from
/// `ibv_wr_complete`, else `ibv_post_send`), as the checked path reports it.
#[cold]
#[inline(never)]
fn fast_error(rc: i32, ext: bool) -> Error {
    match rc {
        libc::ENOMEM => Error::QueueFull,
        e => Error::Verbs {
            call: if ext {
                "ibv_wr_complete"
            } else {
                "ibv_post_send"
            },
            errno: if e > 0 { e } else { errno() },
            detail: if ext {
                " (none of a batch of 1 WRs was posted)".into()
            } else {
                " (a single WR, not posted)".into()
            },
        },
    }
}
