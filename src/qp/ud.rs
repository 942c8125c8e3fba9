//! UD on a [`Qp`]: bringing a UD QP up ([`Qp::ready_ud`]), and what a send
//! must be on each transport (`Qp::check_transport`).

use crate::device::handles::PdKind;
use crate::ib::error::{Error, Result};
use crate::ib::qp_attr::{QpAttr, QpType};
use crate::ib::wr::{SendWr, WrOp};
use crate::qp::Qp;
use mlx5_dv::sim;

impl Qp {
    /// Brings a UD QP (in RESET) to RTS: RESET -> INIT (P_Key index 0, the
    /// config's port, `qkey`: the key datagrams to this QP must carry) ->
    /// RTR -> RTS (a random first PSN). A UD QP is connected to no peer:
    /// each send names its destination ([`SendWr::ud_send`]).
    ///
    /// Errors: the QP is not UD or not in RESET ([`Error::WrongTransport`], [`Error::NotInReset`]); an
    /// attribute out of range ([`Error::QpAttr`]); the device's refusal (the
    /// QP is put back in RESET).
    pub fn ready_ud(&mut self, qkey: u32) -> Result<()> {
        if self.cfg.qp_type != QpType::Ud {
            return Err(Error::WrongTransport {
                qp_type: self.cfg.qp_type,
                op: "ready_ud (it brings up a UD QP)",
            });
        }
        let init = QpAttr::init_ud(self.cfg.port, qkey);
        let rts = QpAttr::rts_unreliable(Qp::random_psn());
        self.connect_steps(init, QpAttr::default(), rts)
    }

    /// The largest UD message in bytes: the port's active MTU (the sim's
    /// [`sim::UD_MTU`]).
    #[cfg_attr(not(feature = "verbs"), allow(unreachable_patterns))]
    pub fn ud_mtu(&self) -> u32 {
        match (&self.pd.kind, self.local.active_mtu) {
            (PdKind::Sim(..), _) => sim::UD_MTU,
            (_, m @ 1..=5) => 128 << m,
            _ => 4096,
        }
    }

    /// What a send WR must be on this QP's transport: on UD a
    /// [`WrOp::UdSend`], its destination an AH of this QP's PD, at
    /// most [`Self::ud_mtu`] bytes; elsewhere no UD send.
    ///
    /// Errors: [`Error::WrongTransport`], [`Error::ForeignPd`], [`Error::Config`]; [`Error::MessageTooLong`].
    pub(crate) fn check_transport(&self, w: &SendWr<'_>, dc: bool) -> Result<()> {
        let ud_dest = match w.op {
            WrOp::UdSend { dest, .. } => Some(dest),
            _ => None,
        };
        match (self.cfg.qp_type, dc) {
            (QpType::Dct, _) => {
                return Err(Error::WrongTransport {
                    qp_type: QpType::Dct,
                    op: "a send (a DCT only receives, through its SRQ)",
                })
            }
            (QpType::Dci, false) => {
                return Err(Error::WrongTransport {
                    qp_type: QpType::Dci,
                    op: "a WR without its DC target (post it with Qp::post_dc)",
                })
            }
            _ => {}
        }
        if self.cfg.qp_type != QpType::Ud {
            if ud_dest.is_some() {
                return Err(Error::WrongTransport {
                    qp_type: self.cfg.qp_type,
                    op: "a UD send",
                });
            }
            return Ok(());
        }
        let Some(d) = ud_dest else {
            return Err(Error::WrongTransport {
                qp_type: QpType::Ud,
                op: "a WR other than a UD send (SendWr::ud_send: an AH, the remote QPN and qkey)",
            });
        };
        if d.ah.inner.pd != self.pd.id {
            return Err(Error::ForeignPd {
                object: crate::PdObject::Ah,
            });
        }
        if d.remote_qpn > 0xff_ffff {
            return Err(Error::Config {
                field: "remote QPN",
                value: d.remote_qpn as u64,
                min: 0,
                max: 0xff_ffff,
            });
        }
        let mtu = self.ud_mtu();
        if w.total_len() > mtu as u64 {
            return Err(Error::MessageTooLong {
                len: w.total_len(),
                mtu,
            });
        }
        Ok(())
    }
}
