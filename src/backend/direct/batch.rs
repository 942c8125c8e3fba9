//! Batches built in place in the SQ with one doorbell: `post_many` (any
//! of `post_one`'s kinds; a batch of one opcode written by one loop) and
//! `post_writes` (`Qp::post_writes`'s 1-SGE WRITEs).

use super::post::{ctrl_flags, ctrl_of, Declined, InPlace, PostMode, NO_REMOTE};
use super::DirectQp;
use crate::ib::keys::RemoteAddr;
use crate::ib::qp_attr::QpType;
use crate::ib::wr::{SendWr, Sge, WrOp, WriteWr};
use mlx5_dv::driver::{Reserved, Seg};
use mlx5_dv::prm::{CtrlFlags, WqeOpcode};

impl DirectQp {
    /// Posts a batch of WRs, each of [`Self::post_one`]'s kinds, built in
    /// place, with one doorbell (the 8-byte one, as rdma-core rings a batch).
    /// [`Declined`], having changed nothing, when one is of another kind
    /// or they do not all fit the SQ and the CQ: the checked path then
    /// posts them, or says why not.
    #[inline(always)]
    pub(crate) fn post_many(&mut self, wrs: &[SendWr<'_>], pd: u32) -> InPlace {
        let reads = self.qp_type == QpType::Rc;
        // What the batch is: of one opcode (WRITE or SEND: written by one
        // loop, `write_all`, as `post_writes` writes), or of several.
        let one_seg = |w: &SendWr<'_>| !w.inline && matches!(w.sges, [s] if s.one_seg_on(pd));
        let all = match wrs.first().map(Uniform::of) {
            Some(Uniform::Write)
                if wrs
                    .iter()
                    .all(|w| matches!(w.op, WrOp::RdmaWrite { .. }) && one_seg(w)) =>
            {
                Uniform::Write
            }
            Some(Uniform::Send) if wrs.iter().all(|w| matches!(w.op, WrOp::Send) && one_seg(w)) => {
                Uniform::Send
            }
            _ if wrs.iter().all(|w| in_place_sge(w, pd, reads).is_some()) => Uniform::Mixed,
            _ => return Err(Declined::Shape),
        };
        let Some((last, head)) = wrs.split_last() else {
            return Err(Declined::Shape);
        };
        let (mut room, low) = self.reserve_batch(wrs.len() as u32)?;
        match all {
            Uniform::Write => write_uniform(&mut room, head, last, low, write_wqe),
            Uniform::Send => write_uniform(&mut room, head, last, low, send_wqe),
            Uniform::Mixed => {
                for w in head {
                    push_in_place(&mut room, w);
                }
                if low {
                    // As `signal_if_credits_low`: the last WR makes a CQE.
                    room.signal_next();
                }
                push_in_place(&mut room, last);
            }
        }
        room.ring();
        self.posted_sends(wrs.len());
        Ok(())
    }

    /// A batch of 1-SGE RDMA WRITEs posted by
    /// [`Qp::post_writes`](crate::Qp::post_writes): [`Self::post_many`] for
    /// one opcode, built in place with one doorbell. [`Declined`], having
    /// changed nothing, when one would be declined or they do not all fit
    /// the SQ and the CQ.
    #[inline(always)]
    pub(crate) fn post_writes(&mut self, wrs: &[WriteWr<'_>], pd: u32) -> InPlace {
        if !wrs.iter().all(|w| w.sge.one_seg_on(pd)) {
            return Err(Declined::Shape);
        }
        let (mut room, low) = self.reserve_batch(wrs.len() as u32)?;
        let Some((last, head)) = wrs.split_last() else {
            return Ok(());
        };
        let wqe = |w: &WriteWr<'_>| {
            let raddr = Seg::raddr(w.remote.addr, w.remote.rkey.0);
            let data = Seg::data(w.sge.addr, w.sge.len, w.sge.lkey.0);
            (
                WqeOpcode::RDMA_WRITE,
                ctrl_of(w.flags),
                0,
                [raddr, data],
                w.wr_id,
            )
        };
        write_uniform(&mut room, head, last, low, wqe);
        room.ring();
        self.posted_sends(wrs.len());
        Ok(())
    }

    /// Room in the SQ for a batch of `n` WQEs of one WQEBB each, in an
    /// in-place post mode, and whether the last must make a CQE (CQ
    /// credits low: `signal_if_credits_low`'s rule). In the counted post
    /// mode the batch's CQ credits are taken first, and given back when
    /// the SQ has no room. [`Declined`], having changed nothing, in the
    /// checked post mode or without room.
    #[inline(always)]
    fn reserve_batch(&mut self, n: u32) -> Result<(Reserved<'_>, bool), Declined> {
        let counted = match self.post_mode {
            PostMode::InPlace => false,
            PostMode::InPlaceCounted => true,
            _ => return Err(Declined::Mode),
        };
        if counted && !self.credits.take(n) {
            return Err(Declined::NoRoom);
        }
        let low = counted && super::credits_low(&self.credits);
        match self.sq.reserve(n) {
            Ok(room) => Ok((room, low)),
            Err(_) => {
                if counted {
                    self.credits.give(n);
                }
                Err(Declined::NoRoom)
            }
        }
    }
}

/// The one SGE of a WR that [`DirectQp::post_many`] builds in place: not
/// inline, not an atomic or window WR, not a READ unless `reads` (the QP is RC), one
/// SGE of 1 to 2^31 - 1 bytes on PD `pd`.
#[inline(always)]
fn in_place_sge<'a>(w: &'a SendWr<'_>, pd: u32, reads: bool) -> Option<&'a Sge<'a>> {
    match (w.op, w.sges) {
        (
            WrOp::AtomicCmpSwp { .. }
            | WrOp::AtomicFetchAdd { .. }
            | WrOp::MaskedCmpSwap { .. }
            | WrOp::MaskedFetchAdd { .. }
            | WrOp::UdSend { .. }
            | WrOp::BindMw { .. }
            | WrOp::LocalInv { .. }
            | WrOp::SendWithInv { .. },
            _,
        ) => None,
        (WrOp::RdmaRead { .. }, _) if !reads => None,
        (_, [s]) if !w.inline && s.one_seg_on(pd) => Some(s),
        _ => None,
    }
}

/// Whether a batch's WRs share one opcode that [`write_uniform`] writes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Uniform {
    /// All RDMA WRITEs (without immediate).
    Write,
    /// All SENDs (without immediate).
    Send,
    /// Anything else.
    Mixed,
}

impl Uniform {
    /// What a batch that begins with `w` may be.
    #[inline(always)]
    fn of(w: &SendWr<'_>) -> Self {
        match w.op {
            WrOp::RdmaWrite { .. } => Uniform::Write,
            WrOp::Send => Uniform::Send,
            _ => Uniform::Mixed,
        }
    }
}

/// The WQE of a WR of a [`Uniform::Write`] batch: the RDMA WRITE of its
/// one SGE ([`in_place_sge`] saw to both).
#[inline(always)]
fn write_wqe(w: &SendWr<'_>) -> (WqeOpcode, CtrlFlags, u32, [Seg; 2], u64) {
    let remote = match w.op {
        WrOp::RdmaWrite { remote } => remote,
        _ => NO_REMOTE,
    };
    let data = match w.sges {
        [s] => Seg::data(s.addr, s.len, s.lkey.0),
        _ => Seg::data(0, 0, 0),
    };
    let raddr = Seg::raddr(remote.addr, remote.rkey.0);
    (
        WqeOpcode::RDMA_WRITE,
        ctrl_flags(w),
        0,
        [raddr, data],
        w.wr_id,
    )
}

/// The WQE of a WR of a [`Uniform::Send`] batch: the SEND of its one SGE.
#[inline(always)]
fn send_wqe(w: &SendWr<'_>) -> (WqeOpcode, CtrlFlags, u32, [Seg; 1], u64) {
    let data = match w.sges {
        [s] => Seg::data(s.addr, s.len, s.lkey.0),
        _ => Seg::data(0, 0, 0),
    };
    (WqeOpcode::SEND, ctrl_flags(w), 0, [data], w.wr_id)
}

/// Writes a batch of one opcode (`head`, then `last`), each WQE made by
/// `wqe`, into room reserved for all of it, in one loop per part
/// (`Reserved::write_all`); `low`: the last makes a CQE
/// (`signal_if_credits_low`).
#[inline(always)]
fn write_uniform<T, const N: usize>(
    room: &mut Reserved<'_>,
    head: &[T],
    last: &T,
    low: bool,
    wqe: impl Fn(&T) -> (WqeOpcode, CtrlFlags, u32, [Seg; N], u64) + Copy,
) {
    let pushed = room.write_all(head, wqe);
    if low {
        room.signal_next();
    }
    let pushed = pushed && room.write_all(std::slice::from_ref(last), wqe);
    debug_assert!(pushed, "room was reserved for the whole batch");
}

/// Writes one WR that [`in_place_sge`] accepted into room reserved for it.
#[inline(always)]
fn push_in_place(room: &mut Reserved<'_>, w: &SendWr<'_>) {
    let Some(s) = w.sges.first() else { return };
    let flags = ctrl_flags(w);
    let data = Seg::data(s.addr, s.len, s.lkey.0);
    let raddr = |r: RemoteAddr| Seg::raddr(r.addr, r.rkey.0);
    let r = match w.op {
        WrOp::RdmaWrite { remote } => room.write_segs(
            WqeOpcode::RDMA_WRITE,
            flags,
            0,
            [raddr(remote), data],
            w.wr_id,
        ),
        WrOp::RdmaWriteWithImm { remote, imm } => room.write_segs(
            WqeOpcode::RDMA_WRITE_IMM,
            flags,
            imm,
            [raddr(remote), data],
            w.wr_id,
        ),
        WrOp::Send => room.write_segs(WqeOpcode::SEND, flags, 0, [data], w.wr_id),
        WrOp::SendWithImm { imm } => {
            room.write_segs(WqeOpcode::SEND_IMM, flags, imm, [data], w.wr_id)
        }
        WrOp::RdmaRead { remote } => room.write_segs(
            WqeOpcode::RDMA_READ,
            flags,
            0,
            [raddr(remote), data],
            w.wr_id,
        ),
        _ => Ok(()),
    };
    debug_assert!(r.is_ok(), "room was reserved for the whole batch: {r:?}");
}
