//! The direct path's posts: the common WRs built in place in the SQ
//! (`post_one`, and a batch's in `batch.rs`: no staging, each check
//! once), and the checked
//! general path for every WR (`post_send`, through a `SendWqe` staged on
//! the stack) and for receives (`post_recv`).

use super::{DirectQp, MAX_INLINE, MAX_SGE};
use crate::ib::error::{Error, Result};
use crate::ib::keys::RemoteAddr;
use crate::ib::qp_attr::QpType;
use crate::ib::wr::{SendFlags, SendWr, SendWrs, WrOp, WriteWr};
use mlx5_dv::driver::Seg;
use mlx5_dv::prm::{CtrlFlags, WqeOpcode};
use mlx5_dv::wqe::{
    datagram_seg, AtomicSeg, DataSeg, Datagram, MaskedAtomic, Payload, RemoteSeg, SendWqe,
    WqeError, DATAGRAM_SEG,
};

impl DirectQp {
    /// Posts one WR of the common kinds, built in place in the SQ (no
    /// staging) with a BlueFlame copy from registers: a 1-SGE RDMA WRITE
    /// (with or without immediate), SEND (with or without immediate) or
    /// RDMA READ, not inline, its SGE of 1 to 2^31 - 1 bytes on PD `pd`,
    /// with room in the SQ and the CQ. Anything else is [`Declined`],
    /// having changed nothing: the caller then takes the checked general
    /// path (`Qp::post_send_checked`), which posts it or says why not. The
    /// caller need not check the QP's state: the post mode says it.
    #[inline(always)]
    pub(crate) fn post_one(&mut self, w: &SendWr<'_>, pd: u32) -> InPlace {
        if self.post_mode == PostMode::InPlace {
            self.post_one_built(w, pd)
        } else {
            self.post_one_counted(w, pd)
        }
    }

    /// [`Self::post_one`] of an inline WR in the in-place post mode
    /// ([`Self::post_inline`]); [`Declined`], having changed nothing, in
    /// another mode or for another WR.
    #[inline(always)]
    pub(crate) fn post_one_inline(&mut self, w: &SendWr<'_>) -> InPlace {
        if self.post_inline_write(w).is_ok() {
            return Ok(());
        }
        if self.post_mode != PostMode::InPlace || !w.inline {
            return Err(Declined::Mode);
        }
        self.post_inline(w)
    }

    /// [`Self::post_one_inline`]'s commonest WR alone, for inlining into
    /// `Qp::post_send`: an inline WRITE of one SGE of plain bytes, built
    /// for itself (as `post_write_inline` is: the copy known to be a plain
    /// one), behind the SQ's gate (the in-place post mode, and room: one
    /// compare). [`Declined`], having changed nothing, for any other.
    #[inline(always)]
    pub(crate) fn post_inline_write(&mut self, w: &SendWr<'_>) -> InPlace {
        if let (WrOp::RdmaWrite { remote }, [s], true) = (w.op, w.sges, w.inline) {
            if s.plain {
                let raddr = Seg::raddr(remote.addr, remote.rkey.0);
                // SAFETY: `s` borrows its memory for the call (`Sge<'mr>`),
                // its range checked by `Sge::bytes` / `Sge::new`; a `plain`
                // SGE is plain bytes (or a LocalMr the WR owns) that nothing
                // else writes now: copied plainly.
                let posted = unsafe {
                    self.sq.post_inline_gated(
                        WqeOpcode::RDMA_WRITE,
                        ctrl_flags(w),
                        0,
                        Some(raddr),
                        s.addr as *const u8,
                        s.len as usize,
                        false,
                        w.wr_id,
                    )
                };
                if !posted {
                    return Err(Declined::Mode);
                }
                self.posted_sends(1);
                return Ok(());
            }
        }
        Err(Declined::Shape)
    }

    /// [`Self::post_one`]'s commonest WRs alone, for inlining into
    /// `Qp::post_send`: one SGE on PD `pd` of 1 to 2^31 - 1 bytes, not
    /// inline, a WRITE or a SEND (or a UD SEND: [`Self::post_ud_gated`]),
    /// built in place when the SQ's gate is open (the in-place post mode,
    /// and a WR free under `max_post`: one compare for both, as the
    /// one-opcode posts') and its doorbell is a BlueFlame copy
    /// (`SendQueue::write_segs_bf`: then it makes no call). [`Declined`],
    /// having changed nothing, for any other: the caller's out-of-line
    /// path (`Self::post_one`, which rings any doorbell, `Self::post_many`).
    #[inline(always)]
    pub(crate) fn post_one_sge(&mut self, w: &SendWr<'_>, pd: u32) -> InPlace {
        // The opcode first: a WR of another (a UD SEND, an atomic) is
        // declined in one compare. Each opcode has its own copy of the rest
        // (`sge_gated`): one shared copy costs a flag and its tests.
        match w.op {
            WrOp::RdmaWrite { remote } => {
                self.sge_gated::<true>(WqeOpcode::RDMA_WRITE, remote, w, pd)
            }
            WrOp::Send => self.sge_gated::<false>(WqeOpcode::SEND, NO_REMOTE, w, pd),
            // (A UD SEND, or another: it looks at the opcode itself, so
            // that the WRITE and the SEND pay no compare for it.)
            _ => self.post_ud_gated(w, pd),
        }
    }

    /// [`Self::post_one_sge`] for one opcode: ctrl, the remote-address
    /// segment when `RADDR`, one data segment, behind the SQ's gate.
    #[inline(always)]
    fn sge_gated<const RADDR: bool>(
        &mut self,
        op: WqeOpcode,
        remote: RemoteAddr,
        w: &SendWr<'_>,
        pd: u32,
    ) -> InPlace {
        let s = match (w.sges, w.inline) {
            ([s], false) if s.one_seg_on(pd) => s,
            _ => return Err(Declined::Shape),
        };
        let flags = ctrl_flags(w);
        let data = Seg::data(s.addr, s.len, s.lkey.0);
        let put = if RADDR {
            let raddr = Seg::raddr(remote.addr, remote.rkey.0);
            self.sq.write_segs_bf(op, flags, 0, [raddr, data], w.wr_id)
        } else {
            self.sq.write_segs_bf(op, flags, 0, [data], w.wr_id)
        };
        let Some(put) = put else {
            return Err(Declined::Mode);
        };
        // (Published before the doorbell, as `post_write` does.)
        super::count_sends(&mut self.sent, &self.progress, 1, put.posted_count());
        put.ring();
        Ok(())
    }

    /// A 1-SGE RDMA WRITE posted by [`Qp::post_write`](crate::Qp::post_write):
    /// [`Self::post_one`] for one opcode, so nothing is decoded.
    /// [`Declined`], having changed nothing, for anything
    /// [`Self::post_one`] would decline, and in the counted post mode (the
    /// caller's general path then posts it with its CQ credit).
    #[inline(always)]
    pub(crate) fn post_write(&mut self, w: &WriteWr<'_>, pd: u32) -> InPlace {
        let s = &w.sge;
        if !s.one_seg_on(pd) {
            return Err(Declined::Shape);
        }
        let raddr = Seg::raddr(w.remote.addr, w.remote.rkey.0);
        let data = Seg::data(s.addr, s.len, s.lkey.0);
        let flags = ctrl_of(w.flags);
        // The SQ's gate is open in the in-place post mode alone
        // (`set_post_mode`): its WR-limit check says the mode too.
        let Some(put) =
            self.sq
                .write_segs_gated(WqeOpcode::RDMA_WRITE, flags, 0, [raddr, data], w.wr_id)
        else {
            // The gate: another post mode, or no room.
            return Err(Declined::Mode);
        };
        // (Published before the doorbell, while the count is in a register:
        // a count that takes in a WR not yet rung only holds an MR longer.)
        super::count_sends(&mut self.sent, &self.progress, 1, put.posted_count());
        put.ring();
        Ok(())
    }

    /// An inline RDMA WRITE of `data` posted by
    /// [`Qp::post_write_inline`](crate::Qp::post_write_inline), built in
    /// place as [`Self::post_one`] builds one. [`Declined`], having
    /// changed nothing, for anything [`Self::post_one`] would decline, and
    /// in the counted post mode.
    #[inline(always)]
    pub(crate) fn post_write_inline(
        &mut self,
        wr_id: u64,
        data: &[u8],
        remote: RemoteAddr,
        flags: SendFlags,
    ) -> InPlace {
        let raddr = Seg::raddr(remote.addr, remote.rkey.0);
        let flags = ctrl_of(flags);
        // SAFETY: `data` is borrowed for the call and, being a shared
        // borrow of plain bytes, written by nothing meanwhile: copied plainly.
        // (The SQ's gate is open in the in-place post mode alone.)
        let posted = unsafe {
            self.sq.post_inline_gated(
                WqeOpcode::RDMA_WRITE,
                flags,
                0,
                Some(raddr),
                data.as_ptr(),
                data.len(),
                false,
                wr_id,
            )
        };
        if !posted {
            return Err(Declined::Mode);
        }
        self.posted_sends(1);
        Ok(())
    }

    /// [`Self::post_one`] taking a CQ credit (a shared CQ, or a shallow one);
    /// [`Declined::Mode`] in the checked post mode. (Inlined into
    /// `Qp::post_send`'s out-of-line half.)
    #[inline(always)]
    fn post_one_counted(&mut self, w: &SendWr<'_>, pd: u32) -> InPlace {
        match self.post_mode {
            PostMode::Ud => return self.post_ud_one(w, pd),
            PostMode::InPlaceCounted => {}
            _ => return Err(Declined::Mode),
        }
        if !self.credits.take(1) {
            return Err(Declined::NoRoom);
        }
        let undo = self.signal_if_credits_low();
        let r = self.post_one_built(w, pd);
        if r.is_err() {
            // Declined after all: it leaves no trace.
            self.credits.give(1);
            if let Some(u) = undo {
                self.sq.undo_signal_next(u);
            }
        }
        r
    }

    /// [`Self::post_one`] without the CQ credits. The opcode mapping is
    /// written out per arm (here, in `post_inline` and `push_in_place`), so
    /// that each opcode gets its own copy of the code: one shared
    /// `WrOp -> (opcode, imm, remote)` mapping measured 9 to 27 instructions
    /// more per WR (`scripts/insn-count`).
    #[inline(always)]
    fn post_one_built(&mut self, w: &SendWr<'_>, pd: u32) -> InPlace {
        if w.inline {
            return self.post_inline(w);
        }
        match w.op {
            WrOp::RdmaWrite { remote } => {
                self.post_sge::<true>(WqeOpcode::RDMA_WRITE, 0, remote, w, pd)
            }
            WrOp::RdmaWriteWithImm { remote, imm } => {
                self.post_sge::<true>(WqeOpcode::RDMA_WRITE_IMM, imm, remote, w, pd)
            }
            WrOp::Send => self.post_sge::<false>(WqeOpcode::SEND, 0, NO_REMOTE, w, pd),
            WrOp::SendWithImm { imm } => {
                self.post_sge::<false>(WqeOpcode::SEND_IMM, imm, NO_REMOTE, w, pd)
            }
            WrOp::RdmaRead { remote } if self.qp_type == QpType::Rc => {
                self.post_sge::<true>(WqeOpcode::RDMA_READ, 0, remote, w, pd)
            }
            _ => Err(Declined::Shape),
        }
    }

    /// [`Self::post_one`] of an inline WR of one SGE (any memory: the
    /// bytes are copied now) that is a WRITE or SEND, with or without
    /// immediate: ctrl, the remote-address segment for a WRITE, the inline
    /// segment, built in place.
    #[inline(always)]
    fn post_inline(&mut self, w: &SendWr<'_>) -> InPlace {
        let [s] = w.sges else {
            return Err(Declined::Shape);
        };
        let flags = ctrl_flags(w);
        let raddr = |r: RemoteAddr| Some(Seg::raddr(r.addr, r.rkey.0));
        // SAFETY: in every arm, `s` borrows its memory for the call
        // (`Sge<'mr>`), and `Sge::new` / `Sge::bytes` checked the range: a
        // `plain` SGE is plain bytes (or a LocalMr the WR owns) that nothing
        // else writes now, any other an Mr that a peer may write, read with
        // atomics (`shared`). One call per opcode, so that each is built for it.
        let r = unsafe {
            let (src, len, shared, id) = (s.addr as *const u8, s.len as usize, !s.plain, w.wr_id);
            let sq = &mut self.sq;
            match w.op {
                WrOp::RdmaWrite { remote } => sq.post_inline(
                    WqeOpcode::RDMA_WRITE,
                    flags,
                    0,
                    raddr(remote),
                    src,
                    len,
                    shared,
                    id,
                ),
                WrOp::RdmaWriteWithImm { remote, imm } => sq.post_inline(
                    WqeOpcode::RDMA_WRITE_IMM,
                    flags,
                    imm,
                    raddr(remote),
                    src,
                    len,
                    shared,
                    id,
                ),
                WrOp::Send => sq.post_inline(WqeOpcode::SEND, flags, 0, None, src, len, shared, id),
                WrOp::SendWithImm { imm } => {
                    sq.post_inline(WqeOpcode::SEND_IMM, flags, imm, None, src, len, shared, id)
                }
                _ => return Err(Declined::Shape),
            }
        };
        r.map_err(declined)?;
        self.posted_sends(1);
        Ok(())
    }

    /// [`Self::post_one`] for one opcode: ctrl, the remote-address segment
    /// when `RADDR`, one data segment.
    #[inline(always)]
    fn post_sge<const RADDR: bool>(
        &mut self,
        op: WqeOpcode,
        imm: u32,
        remote: RemoteAddr,
        w: &SendWr<'_>,
        pd: u32,
    ) -> InPlace {
        let [s] = w.sges else {
            return Err(Declined::Shape);
        };
        // A zero-length SGE makes no data segment, one of 2^31 or more
        // cannot be one: the general path's.
        if !s.one_seg_on(pd) {
            return Err(Declined::Shape);
        }
        let flags = ctrl_flags(w);
        let data = Seg::data(s.addr, s.len, s.lkey.0);
        let r = if RADDR {
            let raddr = Seg::raddr(remote.addr, remote.rkey.0);
            self.sq.post_segs(op, flags, imm, [raddr, data], w.wr_id)
        } else {
            self.sq.post_segs(op, flags, imm, [data], w.wr_id)
        };
        r.map_err(declined)?;
        self.posted_sends(1);
        Ok(())
    }

    /// Posts `wrs` and rings the doorbell once. Every WR is checked first
    /// (and the SQ room for all of them): on error nothing is written.
    #[inline]
    ///
    /// The front end checked each WR against the QP's limits and state
    /// (`Qp::check_send_wr`, and a split QP's halves): here only what the
    /// ring alone knows, room and the WQE's size.
    pub(crate) fn post_send<W: SendWrs + ?Sized>(&mut self, wrs: &W) -> Result<()> {
        debug_assert!(!self.is_split(), "the front end refuses a split QP's posts");
        let n = wrs.count();
        if n == 1 {
            // One WR: the driver's own checks already write nothing on error,
            // so there is no batch to pre-check (no second encoding pass).
            let w = wrs.wr(0);
            self.take_credits(1)?;
            let undo = self.signal_if_credits_low();
            let r = self.write_wr(&w).and_then(|r| {
                r.map_err(|e| match e {
                    WqeError::QueueFull { .. } | WqeError::WrLimit { .. } => Error::QueueFull,
                    e => Error::Wqe(e),
                })
            });
            if let Err(e) = r {
                self.give_credits(1);
                if let Some(u) = undo {
                    self.sq.undo_signal_next(u);
                }
                return Err(e);
            }
            self.sq.ring_doorbell();
            self.posted_sends(1);
            if self.mode_after_fence.is_some() {
                self.fence_taken();
            }
            return Ok(());
        }
        if n == 0 {
            return Ok(());
        }
        // Each WQE sized from its shape (no inline byte copied), then
        // built once, below.
        let mut need = 0u32;
        for i in 0..n {
            let (_, wqebbs) = self.wr_size(&wrs.wr(i))?;
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
            self.write_wr(&w)??;
        }
        self.sq.ring_doorbell();
        self.posted_sends(n);
        if self.mode_after_fence.is_some() {
            self.fence_taken();
        }
        Ok(())
    }
}

impl DirectQp {
    /// [`Self::post_one_sge`] of a UD SEND (`w.op` is `UdSend { dest, imm }`):
    /// one SGE on PD `pd` of 1 byte to the port's MTU, not inline, through
    /// an AH of that PD to a 24-bit QPN, built in place when the SQ's UD
    /// gate is open (`SendQueue::ud_room`: the UD post mode without
    /// CQ credits, and a WR free under `max_post`: one compare) and its
    /// doorbell is a BlueFlame copy (no call). [`Declined`],
    /// having changed nothing, for any other: the caller's out-of-line path
    /// ([`Self::post_one`], which takes the credits; the checked path).
    /// (Inlined into `Qp::post_send`: out of line, returning in a register,
    /// it measured 25 instructions more, and the WRITE 1 fewer:
    /// `scripts/insn-count`.)
    #[inline(always)]
    fn post_ud_gated(&mut self, w: &SendWr<'_>, pd: u32) -> InPlace {
        let (WrOp::UdSend { dest: d, imm }, [s], false) = (w.op, w.sges, w.inline) else {
            return Err(Declined::Shape);
        };
        if !s.one_seg_on(pd) {
            return Err(Declined::Shape);
        }
        if s.len > self.ud_mtu || d.ah.inner.pd != pd || d.remote_qpn > 0xff_ffff {
            return Err(Declined::Shape);
        }
        let Some(mut room) = self.sq.ud_room() else {
            // The gate: another post mode, CQ credits to take, or no room.
            return Err(Declined::Mode);
        };
        // Each field read where it is stored (fewer values held at once).
        room.datagram(&d.ah.inner.av, d.remote_qpn, d.qkey);
        room.data(Seg::data(s.addr, s.len, s.lkey.0));
        // One copy of the ctrl segment's build per opcode (no immediate to
        // select).
        let put = match imm {
            None => room.finish(WqeOpcode::SEND, ctrl_flags(w), 0, w.wr_id),
            Some(i) => room.finish(WqeOpcode::SEND_IMM, ctrl_flags(w), i, w.wr_id),
        };
        // (Published before the doorbell, as `post_one_sge` does.)
        super::count_sends(&mut self.sent, &self.progress, 1, put.posted_count());
        put.ring();
        Ok(())
    }

    /// [`Self::post_one`] on a UD QP: a UD SEND (or SEND_IMM) of one SGE of
    /// 1 byte to the port's MTU on the QP's PD, through an AH of that PD,
    /// not inline, built in place (`SendQueue::post_ud`). `false`,
    /// having changed nothing, for anything else: the checked path posts it
    /// or says why not. (Inlined into `post_one_counted`, the out-of-line
    /// half of `post_one`: one call from `Qp::post_send`.)
    #[inline(always)]
    fn post_ud_one(&mut self, w: &SendWr<'_>, pd: u32) -> InPlace {
        let (WrOp::UdSend { dest: d, imm }, [s], false) = (w.op, w.sges, w.inline) else {
            return Err(Declined::Shape);
        };
        if !s.one_seg_on(pd)
            || s.len > self.ud_mtu
            || d.ah.inner.pd != pd
            || d.remote_qpn > 0xff_ffff
        {
            return Err(Declined::Shape);
        }
        if self.count_credits && !self.credits.take(1) {
            return Err(Declined::NoRoom);
        }
        let undo = self.signal_if_credits_low();
        let (opcode, imm) = match imm {
            None => (WqeOpcode::SEND, 0),
            Some(i) => (WqeOpcode::SEND_IMM, i),
        };
        let data = Seg::data(s.addr, s.len, s.lkey.0);
        let r = self.sq.post_ud(
            opcode,
            ctrl_flags(w),
            imm,
            &d.ah.inner.av,
            d.remote_qpn,
            d.qkey,
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
        r.map_err(declined)
    }
}

/// How a QP's in-place posts ([`DirectQp::post_one`] and the one-opcode
/// posts) run, set as its state, CQ and split change
/// (`DirectQp::set_post_mode`): one byte the post path reads first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum PostMode {
    /// Nothing is built in place: every WR takes the checked path (a QP
    /// not in RTS or ERR, or with no send SGE).
    Checked,
    /// The common WRs are built in place.
    InPlace,
    /// As [`Self::InPlace`], taking a CQ credit per WR.
    InPlaceCounted,
    /// A UD QP in RTS or ERR: a UD SEND of one SGE is built in place
    /// (`DirectQp::post_ud_one`).
    Ud,
    /// A DCI in RTS whose WRs have not failed: a WRITE, SEND or READ of
    /// one SGE is built in place (`DirectQp::post_dc_one`, `dc.rs`).
    Dc,
}

/// Why an in-place post posted nothing (and changed nothing): the caller
/// then takes the checked path, which posts the WRs or says why not. No
/// path comes back to the in-place posts from there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Declined {
    /// The QP's post mode builds nothing in place, or not this kind of QP's
    /// WRs ([`PostMode`]).
    Mode,
    /// A WR of a shape only the checked path builds or refuses: another
    /// opcode, inline or several SGEs, a zero-length SGE or one of 2^31
    /// bytes or more, memory of another PD, a UD destination it checks.
    Shape,
    /// No room for the WRs in the SQ, or no CQ credit for them.
    NoRoom,
    /// The ring driver refused the WQE for another reason (an inline
    /// payload over the QP's limit).
    Refused,
}

/// What an in-place post did: posted, or [`Declined`].
pub(crate) type InPlace = std::result::Result<(), Declined>;

/// The ring driver's refusal of an in-place WQE as a [`Declined`].
#[inline(always)]
fn declined(e: WqeError) -> Declined {
    match e {
        WqeError::QueueFull { .. } | WqeError::WrLimit { .. } => Declined::NoRoom,
        _ => Declined::Refused,
    }
}

/// The ctrl-segment flags of `f`: its SIGNALED, SOLICITED and FENCE bits
/// (which are mlx5's), and no other bit a caller may have put in with
/// `SendFlags::from_bits_retain` (`SendFlags::ctrl_bits`: one AND).
#[inline(always)]
pub(super) fn ctrl_of(f: SendFlags) -> CtrlFlags {
    CtrlFlags::from_bits_retain(f.ctrl_bits())
}

/// A WR's ctrl-segment flags: its flags as they are (masking them as
/// [`ctrl_of`] does cost `post_send` 2 instructions a WR, and the UD post
/// 5: `scripts/insn-count`); the builders keep out any other bit.
#[inline(always)]
pub(super) fn ctrl_flags(w: &SendWr<'_>) -> CtrlFlags {
    debug_assert!(SendFlags::all().contains(w.flags), "{:?}", w.flags);
    CtrlFlags::from_bits_retain(w.flags.bits())
}

/// The remote address of an opcode that has none (never stored).
pub(super) const NO_REMOTE: RemoteAddr = RemoteAddr {
    addr: 0,
    rkey: crate::ib::keys::Rkey(0),
};

/// Builds the `SendWqe` for `w` on the stack and hands it to `f`.
#[inline]
pub(super) fn with_wqe<R>(w: &SendWr<'_>, f: impl FnOnce(&SendWqe<'_>) -> R) -> Result<R> {
    stage::<true, R>(w, f)
}

/// [`with_wqe`] for sizing: the same WQE but for an inline payload, whose
/// bytes are not copied (its length is what sizes it).
#[inline]
pub(super) fn with_wqe_shape<R>(w: &SendWr<'_>, f: impl FnOnce(&SendWqe<'_>) -> R) -> Result<R> {
    stage::<false, R>(w, f)
}

/// [`with_wqe`], copying an inline payload's bytes when `COPY`.
#[inline(always)]
fn stage<const COPY: bool, R>(w: &SendWr<'_>, f: impl FnOnce(&SendWqe<'_>) -> R) -> Result<R> {
    if w.sges.len() > MAX_SGE {
        return Err(Error::TooManySges {
            sges: w.sges.len(),
            max: MAX_SGE as u32,
            limit: "the direct path's SGEs per WQE",
        });
    }
    let rs = |r: RemoteAddr| {
        Some(RemoteSeg {
            addr: r.addr,
            rkey: r.rkey.0,
        })
    };
    let (opcode, remote, atomic) = match w.op {
        WrOp::RdmaWrite { remote } => (WqeOpcode::RDMA_WRITE, rs(remote), None),
        WrOp::RdmaWriteWithImm { remote, .. } => (WqeOpcode::RDMA_WRITE_IMM, rs(remote), None),
        WrOp::Send => (WqeOpcode::SEND, None, None),
        WrOp::SendWithImm { .. } => (WqeOpcode::SEND_IMM, None, None),
        WrOp::RdmaRead { remote } => (WqeOpcode::RDMA_READ, rs(remote), None),
        WrOp::AtomicCmpSwp {
            remote,
            compare,
            swap,
        } => (
            WqeOpcode::ATOMIC_CS,
            rs(remote),
            Some(AtomicSeg {
                swap_add: swap,
                compare,
            }),
        ),
        WrOp::AtomicFetchAdd { remote, add } => (
            WqeOpcode::ATOMIC_FA,
            rs(remote),
            Some(AtomicSeg {
                swap_add: add,
                compare: 0,
            }),
        ),
        WrOp::MaskedCmpSwap { remote, .. } => (WqeOpcode::ATOMIC_MASKED_CS, rs(remote), None),
        WrOp::MaskedFetchAdd { remote, .. } => (WqeOpcode::ATOMIC_MASKED_FA, rs(remote), None),
        WrOp::UdSend { imm: None, .. } => (WqeOpcode::SEND, None, None),
        WrOp::UdSend { imm: Some(_), .. } => (WqeOpcode::SEND_IMM, None, None),
        WrOp::SendWithInv { .. } => (WqeOpcode::SEND_INVAL, None, None),
        WrOp::BindMw { .. } | WrOp::LocalInv { .. } => {
            return Err(Error::Invalid(
                "a window bind or LOCAL_INV is a UMR WQE (DirectQp::write_wr), not staged".into(),
            ))
        }
    };
    let masked_ops = masked_of(&w.op);
    let masked = masked_ops.as_ref();
    // UD: the AH's AV with the remote QPN and qkey patched in (rdma-core
    // `set_datagram_seg`), the WQE's datagram segment.
    let av: [u8; DATAGRAM_SEG];
    let datagram = match w.op {
        WrOp::UdSend { dest: d, .. } => {
            av = datagram_seg(&d.ah.inner.av, d.remote_qpn & 0xff_ffff, d.qkey);
            Some(Datagram::Ud(&av))
        }
        _ => None,
    };
    let flags = ctrl_flags(w);
    let mut inline = [0u8; MAX_INLINE];
    let mut segs = [DataSeg {
        addr: 0,
        len: 0,
        lkey: 0,
    }; MAX_SGE];
    let payload = if w.inline {
        let total = w.total_len();
        if total > MAX_INLINE as u64 {
            return Err(Error::InlineTooLong {
                len: total,
                max: MAX_INLINE as u32,
            });
        }
        if !COPY {
            // (Bytes of no meaning: only the length is read.)
            static SIZE_ONLY: [u8; MAX_INLINE] = [0; MAX_INLINE];
            return Ok(f(&SendWqe {
                datagram,
                opcode,
                flags,
                imm: 0,
                remote,
                masked,
                atomic,
                payload: Payload::Inline(&SIZE_ONLY[..total as usize]),
            }));
        }
        let mut off = 0;
        for s in w.sges {
            let dst = &mut inline[off..off + s.len as usize];
            if s.plain {
                // SAFETY: a LocalMr's range (checked by the owned post), which
                // the WR owns: nothing else accesses it now.
                unsafe {
                    std::ptr::copy_nonoverlapping(s.addr as *const u8, dst.as_mut_ptr(), dst.len())
                };
            } else {
                // SAFETY: `s` borrows a live Mr (Sge<'mr>) and `Sge::new`
                // checked that addr..addr+len lies inside it; such memory is
                // read with atomic loads (`shared`), as a peer may write it.
                unsafe { mlx5_dv::shared::load_into(s.addr as *const u8, dst) };
            }
            off += s.len as usize;
        }
        Payload::Inline(&inline[..off])
    } else {
        for (d, s) in segs.iter_mut().zip(w.sges) {
            *d = DataSeg {
                addr: s.addr,
                len: s.len,
                lkey: s.lkey.0,
            };
        }
        Payload::Sges(&segs[..w.sges.len()])
    };
    let imm = match w.op {
        WrOp::RdmaWriteWithImm { imm, .. }
        | WrOp::SendWithImm { imm }
        | WrOp::UdSend { imm: Some(imm), .. } => imm,
        // (The rkey to invalidate, in the immediate's place.)
        WrOp::SendWithInv { rkey } => rkey.0,
        _ => 0,
    };
    Ok(f(&SendWqe {
        datagram,
        opcode,
        flags,
        imm,
        remote,
        masked,
        atomic,
        payload,
    }))
}

/// `SendQueue::post` of `wqe`, or `SendQueue::post_masked` of a masked
/// atomic (which `post` refuses, so that its other WQEs pay nothing for
/// it): the general path's post.
#[inline(always)]
pub(super) fn sq_post(
    sq: &mut mlx5_dv::driver::SendQueue,
    wqe: &SendWqe<'_>,
    wr_id: u64,
) -> std::result::Result<(), WqeError> {
    if wqe.masked.is_some() {
        sq.post_masked(wqe, wr_id)
    } else {
        sq.post(wqe, wr_id)
    }
}

/// The codec's operands of a masked atomic WR (`None` for any other).
#[inline(always)]
fn masked_of(op: &WrOp<'_>) -> Option<MaskedAtomic> {
    match *op {
        WrOp::MaskedCmpSwap {
            size,
            compare,
            compare_mask,
            swap,
            swap_mask,
            ..
        } => Some(MaskedAtomic {
            size,
            swap_add: swap,
            compare,
            swap_mask,
            compare_mask,
        }),
        WrOp::MaskedFetchAdd {
            size,
            add,
            field_boundary,
            ..
        } => Some(MaskedAtomic {
            size,
            swap_add: add,
            compare: field_boundary,
            swap_mask: 0,
            compare_mask: 0,
        }),
        _ => None,
    }
}
