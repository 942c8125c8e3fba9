//! Memory windows on a [`Qp`]: the type-1 bind and unbind
//! ([`Qp::bind_mw`], [`Qp::unbind_mw`]), and the checks of the window WRs
//! (`WrOp::BindMw`, `WrOp::LocalInv`, `WrOp::SendWithInv`) that
//! `check_send_wrs` makes before anything is written.

use super::{Qp, QpKind};
use crate::ib::error::{Error, Result};
use crate::ib::keys::Rkey;
use crate::ib::mw::{check_bind, Mw, MwBind, MwRefusal, MwType};
use crate::ib::qp_attr::{QpState, QpType};
use crate::ib::wr::{SendFlags, SendWr, SendWrs, WrOp};

/// Gives back the claims ([`Mw::claim_bind`]) of the type-2 binds among
/// the WRs `range` of `wrs`, posted nothing.
pub(crate) fn unclaim_binds<W: SendWrs + ?Sized>(wrs: &W, range: std::ops::Range<usize>) {
    for i in range.rev() {
        if let WrOp::BindMw { mw, .. } = wrs.wr(i).op {
            mw.unclaim_bind();
        }
    }
}

impl Qp {
    /// Binds the type-1 window `mw` to `bind` (`ibv_bind_mw`; on mlx5 a
    /// UMR WQE of 3 WQEBBs on this QP's send queue, rung at once): once
    /// the device runs it, a peer reaches `bind.len` bytes of `bind.mr`
    /// from `bind.addr()` through the returned rkey, with `bind.access`.
    /// A bound type-1 window may be bound again (the old rkey dies). The
    /// WR completes as [`WcOpcode::BIND_MW`](crate::WcOpcode::BIND_MW)
    /// when `flags` has [`SendFlags::SIGNALED`]; a bind the device
    /// refuses completes with `MW_BIND_ERR` and the QP goes to ERR. The
    /// window keeps `bind.mr` alive until it is bound again or dropped.
    ///
    /// Returns the window's new rkey ([`Mw::rkey`] from now on): its
    /// variant byte is the old one plus one.
    ///
    /// One bind of a window is outstanding at a time (see [`Mw`]): until
    /// a poll of this QP retires it (its completion, or a later signaled
    /// WR's), another bind of the window is refused; if it completes in
    /// error or is flushed, [`Mw::rkey`] rolls back to the one before it.
    ///
    /// Errors, before anything is written: [`Error::MwRefused`] (a bind
    /// of the window outstanding, [`MwRefusal::BindOutstanding`]; a type-2
    /// window, [`MwRefusal::WrongType`]; the QP created without
    /// [`QpConfig::memory_windows`](crate::QpConfig::memory_windows) or
    /// not RC / UC, `NotEnabled`; the window, MR and QP of different PDs,
    /// `OtherPd`; the bind's own refusals: [`MwBind`]); [`Error::QpState`]
    /// unless the QP is in RTS; [`Error::QueueFull`] / [`Error::CqFull`]
    /// (poll, then retry).
    pub fn bind_mw(
        &mut self,
        mw: &Mw,
        bind: MwBind<'_>,
        wr_id: u64,
        flags: SendFlags,
    ) -> Result<Rkey> {
        self.check_type1(mw)?;
        check_bind(self.pd_id, &bind).map_err(Error::MwRefused)?;
        self.bind_type1(mw, Some(&bind), wr_id, flags)
    }

    /// Unbinds the type-1 window `mw` with a zero-length bind: once the
    /// device runs it, every access through the window is refused
    /// (`REM_ACCESS_ERR` at the peer). Returns the window's new rkey.
    /// Completes as [`Self::bind_mw`] does.
    ///
    /// Errors: as [`Self::bind_mw`]'s, but for the bind's own.
    pub fn unbind_mw(&mut self, mw: &Mw, wr_id: u64, flags: SendFlags) -> Result<Rkey> {
        self.check_type1(mw)?;
        self.bind_type1(mw, None, wr_id, flags)
    }

    /// A type-1 bind's checks of the window and the QP.
    fn check_type1(&self, mw: &Mw) -> Result<()> {
        if mw.mw_type() != MwType::One {
            return Err(Error::MwRefused(MwRefusal::WrongType {
                mw_type: mw.mw_type(),
            }));
        }
        self.check_mw_qp()?;
        if mw.pd() != self.pd_id {
            return Err(Error::MwRefused(MwRefusal::OtherPd));
        }
        if self.state != QpState::Rts {
            return Err(Error::QpState {
                state: self.state,
                needs: "RTS (a bind is posted on the send queue)",
            });
        }
        if self.halves.is_some() {
            return Err(Error::QpSplit {
                qpn: self.local.qpn,
            });
        }
        Ok(())
    }

    /// The type-1 bind (or unbind, `bind: None`): the window claimed
    /// ([`Mw::claim_bind`]: refused while a bind of it is outstanding),
    /// then the backend's post, which records the bind outstanding until
    /// its WQE retires; the claim given back if it posted nothing.
    fn bind_type1(
        &mut self,
        mw: &Mw,
        bind: Option<&MwBind<'_>>,
        wr_id: u64,
        flags: SendFlags,
    ) -> Result<Rkey> {
        let flags = SendFlags::from_bits_truncate(flags.bits());
        let claim = mw
            .claim_bind(bind.map(|b| b.mr))
            .map_err(Error::MwRefused)?;
        let r = match &mut self.kind {
            QpKind::Direct(q) => q.bind_mw(mw, claim, bind, wr_id, flags),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => q.bind_mw(mw, claim, bind, wr_id, flags),
        };
        match r {
            Ok(()) => Ok(Rkey(claim.new_rkey())),
            Err(e) => {
                mw.unclaim_bind();
                Err(e)
            }
        }
    }

    /// Claims the window of each type-2 bind in `wrs` (checked:
    /// `check_send_wrs`), before anything is written; returns whether
    /// there was one. (A split QP's send half posts binds, and the QP's
    /// poll settles them; the QP itself posts nothing while split.)
    ///
    /// Errors: [`MwRefusal::BindOutstanding`] (a bind of the window
    /// outstanding, or a second bind of it in `wrs`), [`Error::QpSplit`]
    /// (the split QP itself); every claim made given back.
    pub(crate) fn claim_binds<W: SendWrs + ?Sized>(&self, wrs: &W) -> Result<bool> {
        let mut any = false;
        for i in 0..wrs.count() {
            let WrOp::BindMw { mw, bind } = wrs.wr(i).op else {
                continue;
            };
            if self.backend_split() {
                return Err(Error::QpSplit {
                    qpn: self.local.qpn,
                });
            }
            if let Err(e) = mw.claim_bind(Some(bind.mr)) {
                unclaim_binds(wrs, 0..i);
                return Err(Error::MwRefused(e));
            }
            any = true;
        }
        Ok(any)
    }

    /// After a post of `wrs` with type-2 binds that failed: the claims of
    /// the binds not posted go back. The direct path posts all or nothing;
    /// the verbs path, which may post a first part, gives back those it
    /// did not post itself (`VerbsQp::post_send`).
    pub(crate) fn binds_not_posted<W: SendWrs + ?Sized>(&self, wrs: &W) {
        // (Without the verbs feature every QP is a direct one.)
        #[allow(irrefutable_let_patterns)]
        if let QpKind::Direct(_) = self.kind {
            unclaim_binds(wrs, 0..wrs.count());
        }
    }

    /// Whether the backend's QP is a split QP's copy.
    fn backend_split(&self) -> bool {
        match &self.kind {
            QpKind::Direct(q) => q.is_split(),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => q.is_split(),
        }
    }

    /// Whether this QP posts window WRs: created with
    /// `QpConfig::memory_windows`, RC or UC.
    fn check_mw_qp(&self) -> Result<()> {
        if !self.cfg.memory_windows || !matches!(self.cfg.qp_type, QpType::Rc | QpType::Uc) {
            return Err(Error::MwRefused(MwRefusal::NotEnabled));
        }
        Ok(())
    }

    /// The checks of a window WR `w` (type-2 bind, `LOCAL_INV`, SEND with
    /// invalidate); any other WR passes. See [`WrOp::BindMw`].
    pub(crate) fn check_mw_wr(&self, w: &SendWr<'_>) -> Result<()> {
        match w.op {
            WrOp::BindMw { mw, bind } => {
                self.check_mw_qp()?;
                if mw.mw_type() != MwType::Two {
                    return Err(Error::MwRefused(MwRefusal::WrongType {
                        mw_type: mw.mw_type(),
                    }));
                }
                if mw.pd() != self.pd_id {
                    return Err(Error::MwRefused(MwRefusal::OtherPd));
                }
                check_bind(self.pd_id, &bind).map_err(Error::MwRefused)?;
                self.check_no_sges(w)
            }
            WrOp::LocalInv { .. } => {
                self.check_mw_qp()?;
                self.check_no_sges(w)
            }
            WrOp::SendWithInv { .. } => {
                if !matches!(self.cfg.qp_type, QpType::Rc | QpType::Uc) {
                    return Err(Error::WrongTransport {
                        qp_type: self.cfg.qp_type,
                        op: "a SEND with invalidate (RC and UC)",
                    });
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// A bind or `LOCAL_INV` carries no SGEs and is not inline.
    fn check_no_sges(&self, w: &SendWr<'_>) -> Result<()> {
        if !w.sges.is_empty() || w.inline {
            return Err(Error::TooManySges {
                sges: w.sges.len(),
                max: 0,
                limit: "a memory-window bind or LOCAL_INV (no SGEs, not inline)",
            });
        }
        Ok(())
    }
}
