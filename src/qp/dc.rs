//! DC on a [`Qp`]: bringing a DC target (DCT) and a DC initiator (DCI)
//! up, a DCT's number, and a DCI's posts, each batch to the target it
//! names ([`Qp::post_dc`]).
//!
//! A DCT is created with [`Pd::create_qp_on_srq`](crate::Pd::create_qp_on_srq)
//! and [`QpConfig::qp_type`](crate::QpConfig::qp_type) `QpType::Dct` (its
//! key in [`QpConfig::dc_key`](crate::QpConfig::dc_key)); a DCI with
//! [`Pd::create_qp`](crate::Pd::create_qp) and `QpType::Dci`. mlx5 only:
//! on the sim and on ConnectX's direct path; refused elsewhere with
//! [`Error::Unsupported`] ([`Feature::Dc`](crate::Feature::Dc)).

use crate::device::handles::PdKind;
use crate::ib::error::{Error, Result};
use crate::ib::mem::Access;
use crate::ib::qp_attr::{self, QpAttr, QpState, QpType};
use crate::ib::wr::{DcDest, SendWr};
use crate::qp::{Qp, QpKind};

impl Qp {
    /// Brings a DCT (in RESET) to RTR, where it serves DCIs: RESET -> INIT
    /// (P_Key index 0, the config's port, access LOCAL_WRITE |
    /// REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC) -> RTR (the config's
    /// `min_rnr_timer`; on ConnectX the port's AV and active MTU). A DCT
    /// never goes to RTS. Its number ([`Self::dct_number`]) exists from
    /// here on.
    ///
    /// Errors: the QP is not a DCT or not in RESET ([`Error::WrongTransport`],
    /// [`Error::NotInReset`]); the device's refusal (the DCT is left where
    /// it got: a DCT has no way back to RESET).
    pub fn ready_dct(&mut self) -> Result<()> {
        self.require(QpType::Dct, "ready_dct (it brings up a DCT)")?;
        self.require_reset("ready_dct")?;
        let init = QpAttr::init(self.cfg.port, Access::QP_ALL);
        let rtr = QpAttr::rtr_dct(self.cfg.min_rnr_timer, self.dc_path());
        for (from, to, attr) in [
            (QpState::Reset, QpState::Init, &init),
            (QpState::Init, QpState::Rtr, &rtr),
        ] {
            qp_attr::check_modify(QpType::Dct, from, to, attr, self.local.roce)?;
        }
        self.modify(QpState::Init, &init)?;
        // (`modify` sets the endpoint's QPN to the DCT number at RTR.)
        self.modify(QpState::Rtr, &rtr)
    }

    /// Brings a DCI (in RESET) to RTS: RESET -> INIT (P_Key index 0, the
    /// config's port) -> RTR (no destination; on ConnectX the port's AV
    /// and active MTU) -> RTS (a random first PSN, `timeout` 14, `retry_cnt`
    /// 7, the config's `rnr_retry`, one READ or atomic in flight). Each
    /// WR then names its target ([`Self::post_dc`]).
    ///
    /// After a WR of the DCI failed ([`Self::dci_failed`]), bring it back
    /// with [`Self::reset_dci`].
    ///
    /// Errors: the QP is not a DCI or not in RESET ([`Error::WrongTransport`],
    /// [`Error::NotInReset`]); an attribute out of range; the device's
    /// refusal (the DCI is put back in RESET).
    pub fn ready_dci(&mut self) -> Result<()> {
        self.require(QpType::Dci, "ready_dci (it brings up a DCI)")?;
        self.require_reset("ready_dci (after a failure: Qp::reset_dci)")?;
        let init = QpAttr::init_dci(self.cfg.port);
        let rtr = QpAttr::rtr_dci(self.dc_path());
        let rts = QpAttr::rts(Qp::random_psn(), self.cfg.rnr_retry);
        self.connect_steps(init, rtr, rts)
    }

    /// Takes a DCI back to RESET and up to RTS again ([`Self::ready_dci`]),
    /// as a DCI whose WR failed must be before it posts again (its other
    /// WRs flushed: poll them first; UCX PR #6646). On a
    /// [`SharedCq`](crate::SharedCq), reset it there
    /// ([`SharedCq::reset_qp`](crate::SharedCq::reset_qp)) and call
    /// [`Self::ready_dci`].
    ///
    /// Errors: the QP is not a DCI ([`Error::WrongTransport`]); RESET's
    /// ([`Self::modify`]: WRs still outstanding on a shared CQ); then
    /// [`Self::ready_dci`]'s.
    pub fn reset_dci(&mut self) -> Result<()> {
        self.require(QpType::Dci, "reset_dci (it resets a DCI)")?;
        if self.state != QpState::Reset {
            self.modify(QpState::Reset, &QpAttr::default())?;
        }
        self.ready_dci()
    }

    /// Whether a WR of this DCI completed in error since it was last
    /// brought up: the device moved it to ERR, its other WRs flush, and
    /// [`Self::post_dc`] refuses until [`Self::reset_dci`]. Known once
    /// the error's completion is taken from the CQ: by a poll, or on a
    /// [`SharedCq`](crate::SharedCq) also by another QP's
    /// [`SharedCq::reset_qp`](crate::SharedCq::reset_qp), which keeps it
    /// for the next poll (so this may be `true` before the error is
    /// returned). `false` for any other QP.
    pub fn dci_failed(&self) -> bool {
        match &self.kind {
            QpKind::Direct(q) => self.cfg.qp_type == QpType::Dci && q.send_failed(),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(_) => false,
        }
    }

    /// A DCT's number (24 bits, never 0), by which DCIs address it
    /// ([`DcDest::dctn`]): `Some` only for a DCT in RTR. The device
    /// makes the DCT only at INIT -> RTR, and a number read before is
    /// meaningless (sideway read 0 and published it), so there is none
    /// before.
    pub fn dct_number(&self) -> Option<u32> {
        if self.cfg.qp_type != QpType::Dct || self.state != QpState::Rtr {
            return None;
        }
        match &self.kind {
            QpKind::Direct(q) => q.dct_number(),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(_) => None,
        }
    }

    /// Posts `wrs` from this DCI to the DCT `dest` names and rings the
    /// doorbell once. Each WR may be any RC operation (SEND and SEND with
    /// immediate into the target's SRQ, WRITE, WRITE with immediate,
    /// READ, atomics; inline; SGE lists), checked as [`Self::post_send`]
    /// checks an RC QP's; on any error nothing is written to the ring and
    /// no doorbell rung. The WQE: ctrl, the 48-byte datagram segment (the
    /// AH's AV, `dqp_dct` = `dctn | MLX5_EXTENDED_UD_AV`, the key; rdma-core
    /// `mlx5_send_wr_set_dc_addr`), then RC's segments.
    ///
    /// WRs to one target stay in order on one DCI; a DCI may address
    /// another target in its next post (DCI streams are not used). A
    /// target that does not exist or refuses the key is known only to the
    /// device: the WR completes in error and the DCI fails
    /// ([`Self::dci_failed`]).
    ///
    /// Errors, each before anything is written:
    /// - the QP is not a DCI ([`Error::WrongTransport`]); split
    ///   ([`Error::QpSplit`]);
    /// - it is not in RTS, or a WR of it failed ([`Error::QpState`], state
    ///   `Err`): a DCI is reset and brought up again ([`Self::reset_dci`])
    ///   before it posts again, never written to in ERR;
    /// - `dest.ah` of another PD ([`Error::ForeignPd`]); `dest.dctn` over
    ///   24 bits ([`Error::Config`]);
    /// - a WR's own ([`Self::post_send`]'s for an RC QP);
    /// - [`Error::QueueFull`], [`Error::CqFull`], [`Error::NeverFits`].
    #[inline(always)]
    #[cfg_attr(not(feature = "verbs"), allow(irrefutable_let_patterns))]
    pub fn post_dc(&mut self, dest: &DcDest<'_>, wrs: &[SendWr<'_>]) -> Result<()> {
        // One WR of the common kinds, on a DCI in RTS: built in place
        // (`DirectQp::post_dc_one`: its post mode says the type and the
        // state). Anything else, or anything it declines, is checked here.
        if let (QpKind::Direct(q), [w]) = (&mut self.kind, wrs) {
            if q.post_dc_one(dest, w, self.pd_id).is_ok() {
                return Ok(());
            }
        }
        self.post_dc_checked(dest, wrs)
    }

    /// [`Self::post_dc`] with every check.
    #[inline(never)]
    fn post_dc_checked(&mut self, dest: &DcDest<'_>, wrs: &[SendWr<'_>]) -> Result<()> {
        self.require(QpType::Dci, "post_dc (a DCI's post)")?;
        if self.halves.is_some() {
            return Err(Error::QpSplit {
                qpn: self.local.qpn,
            });
        }
        let failed = self.dci_failed();
        if self.state != QpState::Rts || failed {
            return Err(Error::QpState {
                state: if failed { QpState::Err } else { self.state },
                needs: "RTS: a DCI posts only in RTS, and one whose WR failed is reset and \
                        brought up again first (Qp::reset_dci)",
            });
        }
        if dest.ah.inner.pd != self.pd.id {
            return Err(Error::ForeignPd {
                object: crate::PdObject::Ah,
            });
        }
        if dest.dctn > 0xff_ffff {
            return Err(Error::Config {
                field: "DCT number (DcDest::dctn, 24 bits)",
                value: dest.dctn as u64,
                min: 0,
                max: 0xff_ffff,
            });
        }
        self.check_send_wrs(wrs, true)?;
        let r = match &mut self.kind {
            QpKind::Direct(q) => q.post_dc(dest, wrs),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(_) => Err(Error::Unsupported {
                device: self.verbs_device().unwrap_or("verbs").into(),
                feature: crate::Feature::Dc,
            }),
        };
        match r {
            Err(Error::QueueFull | Error::CqFull) => Err(self.never_fits(
                wrs.len(),
                crate::Queue::Send,
                self.cfg.max_send_wr,
                r.unwrap_err(),
            )),
            r => r,
        }
    }

    /// [`Error::WrongTransport`] unless the QP is of type `t`.
    fn require(&self, t: QpType, op: &'static str) -> Result<()> {
        if self.cfg.qp_type != t {
            return Err(Error::WrongTransport {
                qp_type: self.cfg.qp_type,
                op,
            });
        }
        Ok(())
    }

    /// [`Error::NotInReset`] naming `op` unless the QP is in RESET.
    fn require_reset(&self, op: &'static str) -> Result<()> {
        if self.state != QpState::Reset {
            return Err(Error::NotInReset {
                op,
                state: self.state,
            });
        }
        Ok(())
    }

    /// The AV and path MTU a DC QP's RTR carries on ConnectX (the port's:
    /// a global AV to its own GID on RoCE); none on the sim.
    fn dc_path(&self) -> Option<(qp_attr::AddressVector, u32)> {
        match &self.pd.kind {
            PdKind::Sim(..) => None,
            #[cfg(feature = "verbs")]
            PdKind::Verbs(..) => Some((self.av_to(&self.local), self.local.active_mtu.max(1))),
        }
    }
}
