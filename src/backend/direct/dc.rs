//! DC on the direct path: a DCI's posts (each WQE with its target's
//! datagram segment), a DCT's number, and the DC QPs' transitions on the
//! sim.
//!
//! A DCI posts only through [`DirectQp::post_dc`]: its post mode is always
//! `Checked`, so the RC in-place posts (which write no datagram segment)
//! never take its WRs. The WQE is what the codec writes for
//! [`Datagram::Dc`]: ctrl, the 48-byte datagram segment (the AH's AV,
//! `dqp_dct = dctn | MLX5_EXTENDED_UD_AV`, the DC key), then RC's segments
//! for the operation (rdma-core `mlx5_send_wr_set_dc_addr`).

use super::post::{ctrl_flags, with_wqe, Declined, InPlace, PostMode, NO_REMOTE};
use super::{DirectDev, DirectQp};
use crate::ib::error::{Error, Result};
use crate::ib::keys::RemoteAddr;
use crate::ib::qp_attr::{self, QpAttr, QpState, QpType};
use crate::ib::wr::{DcDest, SendWr, SendWrs, WrOp};
use mlx5_dv::driver::Seg;
use mlx5_dv::prm::WqeOpcode;
use mlx5_dv::sim;
use mlx5_dv::wqe::{dc_datagram_seg, Datagram, SendWqe, WqeError, DATAGRAM_SEG};

impl DirectQp {
    /// Posts `wrs` from this DCI to `dest` and rings the doorbell once.
    /// Every WR is sized first (and the SQ's room for all of them): on an
    /// error nothing is written, no credit is taken and no doorbell rung.
    ///
    /// The front end (`Qp::post_dc`) checked the QP's state, type and
    /// every WR against its limits; here only what the ring knows.
    ///
    /// Errors: [`Error::Wqe`] ([`WqeError::DctnTooWide`] for a DCT number
    /// over 24 bits); [`Error::QueueFull`]; [`Error::CqFull`] (CQ credits).
    pub(crate) fn post_dc<W: SendWrs + ?Sized>(
        &mut self,
        dest: &DcDest<'_>,
        wrs: &W,
    ) -> Result<()> {
        debug_assert!(self.qp_type == QpType::Dci && !self.is_split());
        let seg: [u8; DATAGRAM_SEG] =
            dc_datagram_seg(&dest.ah.inner.av, dest.dctn, dest.key).map_err(Error::Wqe)?;
        let n = wrs.count();
        if n == 0 {
            return Ok(());
        }
        fn with_dest<'a>(wqe: &SendWqe<'a>, seg: &'a [u8; DATAGRAM_SEG]) -> SendWqe<'a> {
            SendWqe {
                datagram: Some(Datagram::Dc(seg)),
                ..*wqe
            }
        }
        let mut need = 0u32;
        for i in 0..n {
            let w = wrs.wr(i);
            let wqebbs = with_wqe(&w, |wqe| {
                mlx5_dv::wqe::wqe_size(self.sq.geometry(), &with_dest(wqe, &seg)).map(|(_, b)| b)
            })?
            .map_err(Error::Wqe)?;
            need += wqebbs;
        }
        if need > self.sq.free_wqebbs() || n as u32 > self.sq.free_wrs() {
            return Err(Error::QueueFull);
        }
        self.take_credits(n as u32)?;
        for i in 0..n {
            let w = wrs.wr(i);
            if i + 1 == n {
                // (Every WR was sized and fits: nothing here is refused.)
                let _ = self.signal_if_credits_low();
            }
            with_wqe(&w, |wqe| {
                super::post::sq_post(&mut self.sq, &with_dest(wqe, &seg), w.wr_id)
            })?
            .map_err(|e| match e {
                WqeError::QueueFull { .. } | WqeError::WrLimit { .. } => Error::QueueFull,
                e => Error::Wqe(e),
            })?;
        }
        self.sq.ring_doorbell();
        self.posted_sends(n);
        Ok(())
    }

    /// One WR of a DCI in RTS built in place: a WRITE (with or without
    /// immediate), SEND (likewise) or READ of one SGE of the QP's PD (1
    /// byte to 2^31 - 1), not inline, to a 24-bit DCT number through an AH
    /// of that PD. Behind the SQ's two-WQEBB gate (no CQ credits to take, a
    /// WR free, a BlueFlame register of two WQEBBs) the WQE is written
    /// where it goes and rung with a BlueFlame copy, no call
    /// (`SendQueue::dc_room`); otherwise `SendQueue::post_dc` with the CQ
    /// credit. The bytes are the checked path's ([`Self::post_dc`];
    /// `mlx5-dv/src/driver/fast_dc_tests.rs`). [`Declined`], having
    /// changed nothing, for anything else: the caller's checked path.
    #[inline(always)]
    pub(crate) fn post_dc_one(&mut self, dest: &DcDest<'_>, w: &SendWr<'_>, pd: u32) -> InPlace {
        // The opcode first; each has its own copy of the rest (as
        // `post_one_sge`'s: one shared copy costs the opcode's tests again).
        match w.op {
            WrOp::RdmaWrite { remote } => {
                self.dc_one::<true>(WqeOpcode::RDMA_WRITE, 0, remote, dest, w, pd)
            }
            WrOp::Send => self.dc_one::<false>(WqeOpcode::SEND, 0, NO_REMOTE, dest, w, pd),
            _ => self.dc_other(dest, w, pd),
        }
    }

    /// [`Self::post_dc_one`] of the other opcodes it builds: WRITE with
    /// immediate, SEND with immediate, READ. (Out of line: the WRITE and
    /// the SEND are the common ones.)
    #[inline(never)]
    fn dc_other(&mut self, dest: &DcDest<'_>, w: &SendWr<'_>, pd: u32) -> InPlace {
        match w.op {
            WrOp::RdmaWriteWithImm { remote, imm } => {
                self.dc_one::<true>(WqeOpcode::RDMA_WRITE_IMM, imm, remote, dest, w, pd)
            }
            WrOp::SendWithImm { imm } => {
                self.dc_one::<false>(WqeOpcode::SEND_IMM, imm, NO_REMOTE, dest, w, pd)
            }
            WrOp::RdmaRead { remote } => {
                self.dc_one::<true>(WqeOpcode::RDMA_READ, 0, remote, dest, w, pd)
            }
            _ => Err(Declined::Shape),
        }
    }

    /// [`Self::post_dc_one`] for one opcode: ctrl, the datagram segment,
    /// the remote-address segment when `RADDR`, one data segment.
    #[inline(always)]
    fn dc_one<const RADDR: bool>(
        &mut self,
        opcode: WqeOpcode,
        imm: u32,
        remote: RemoteAddr,
        dest: &DcDest<'_>,
        w: &SendWr<'_>,
        pd: u32,
    ) -> InPlace {
        if self.post_mode != PostMode::Dc {
            return Err(Declined::Mode);
        }
        let s = match (w.sges, w.inline) {
            ([s], false) if s.one_seg_on(pd) => s,
            _ => return Err(Declined::Shape),
        };
        if dest.ah.inner.pd != pd || dest.dctn > 0xff_ffff {
            return Err(Declined::Shape);
        }
        let raddr = Seg::raddr(remote.addr, remote.rkey.0);
        let data = Seg::data(s.addr, s.len, s.lkey.0);
        let flags = ctrl_flags(w);
        if let Some(mut room) = self.sq.dc_room() {
            // (The DCT number fits: checked above.)
            if room
                .datagram(&dest.ah.inner.av, dest.dctn, dest.key)
                .is_err()
            {
                return Err(Declined::Shape);
            }
            if RADDR {
                room.raddr(raddr);
            }
            room.data(data, RADDR);
            let put = room.finish(opcode, flags, imm, 5 + RADDR as u32, w.wr_id);
            // (Published before the doorbell, as `post_one_sge` does.)
            super::count_sends(&mut self.sent, &self.progress, 1, put.posted_count());
            put.ring();
            return Ok(());
        }
        self.dc_counted(opcode, imm, RADDR.then_some(raddr), data, dest, w)
    }

    /// [`Self::dc_one`] past a closed gate: `SendQueue::post_dc` with the
    /// CQ credit (a shared or shallow CQ; no BlueFlame copy of two WQEBBs;
    /// a full SQ).
    #[inline(never)]
    fn dc_counted(
        &mut self,
        opcode: WqeOpcode,
        imm: u32,
        raddr: Option<Seg>,
        data: Seg,
        dest: &DcDest<'_>,
        w: &SendWr<'_>,
    ) -> InPlace {
        if self.count_credits && !self.credits.take(1) {
            return Err(Declined::NoRoom);
        }
        let undo = self.signal_if_credits_low();
        let r = self.sq.post_dc(
            opcode,
            ctrl_flags(w),
            imm,
            &dest.ah.inner.av,
            dest.dctn,
            dest.key,
            raddr,
            data,
            w.wr_id,
        );
        if r.is_ok() {
            self.posted_sends(1);
            return Ok(());
        }
        if self.count_credits {
            self.credits.give(1);
        }
        if let Some(u) = undo {
            self.sq.undo_signal_next(u);
        }
        Err(Declined::NoRoom)
    }

    /// A requester CQE in error was polled: the device moved the QP to
    /// ERR, and a DCI takes no WR in place (nor, through the front end,
    /// at all) until it is reset.
    #[cold]
    pub(super) fn note_send_failed(&mut self) {
        self.send_failed = true;
        if self.post_mode == PostMode::Dc {
            self.set_post_mode(PostMode::Checked);
        }
    }

    /// Whether a requester CQE in error was polled since the last RESET:
    /// the device has moved the QP to ERR.
    #[inline]
    pub(crate) fn send_failed(&self) -> bool {
        self.send_failed
    }

    /// A DCT's number: `None` before INIT -> RTR (the device creates the
    /// DCT only then: rdma-core `verbs.c` sets `qp_num` from the kernel's
    /// `dctn` at RTR) and for any QP that is not a DCT.
    pub(crate) fn dct_number(&self) -> Option<u32> {
        if self.qp_type != QpType::Dct {
            return None;
        }
        match &*self.dev {
            DirectDev::Sim(q) => q.dctn(),
            // ConnectX: libmlx5 sets the QP's `qp_num` from the kernel's
            // DCT number at INIT -> RTR (0 before).
            #[cfg(feature = "verbs")]
            DirectDev::Mlx5(o) => o.current_qpn(),
        }
    }
}

/// A DC QP's transition on the sim (the device only; the caller resets
/// the host side after a move to RESET). A DCT: RESET -> INIT (`access`,
/// the port), INIT -> RTR (`min_rnr_timer`); a DCI: RESET -> INIT, INIT ->
/// RTR with no destination, RTR -> RTS (`rnr_retry`), and to ERR and
/// RESET from anywhere.
///
/// Errors: the sim's refusal (`SimError::BadTransition` for a move the QP
/// cannot make, as `Error::Sim`).
pub(super) fn modify_sim(
    q: &sim::Qp,
    t: QpType,
    from: QpState,
    to: QpState,
    attr: &QpAttr,
) -> Result<()> {
    use QpState as S;
    let timer = attr.min_rnr_timer.map(qp_attr::rnr_timer);
    match (t, from, to) {
        (QpType::Dct, S::Reset, S::Init) => q.to_init_dct(
            attr.access.unwrap_or(sim::Access::empty()),
            attr.port.unwrap_or(1),
        )?,
        (QpType::Dct, S::Init, S::Rtr) => q.to_rtr_dct(timer.unwrap_or(sim::RNR_DELAY))?,
        (_, S::Reset, S::Init) => q.to_init(sim::Access::empty())?,
        (_, S::Init, S::Init) => {}
        (_, S::Init, S::Rtr) => q.to_rtr_dci()?,
        (_, S::Rtr, S::Rts) => q.to_rts_with(attr.rnr_retry.unwrap_or(7))?,
        (_, S::Rts, S::Rts) => q.set_optional(None, timer)?,
        (_, _, S::Err) => q.to_err()?,
        (_, _, S::Reset) => q.to_reset()?,
        (_, from, to) => {
            return Err(Error::Invalid(format!(
                "the sim does not do {from:?} -> {to:?} for a {}",
                t.name()
            )))
        }
    }
    Ok(())
}
