//! The checks of send WRs against a QP's limits, transport and PD, before
//! anything is written: [`Qp::check_send_wrs`], the one owner of them
//! (the backends check only room and what the ring alone knows).

use super::Qp;
use crate::ib::error::{Error, Result};
use crate::ib::qp_attr::QpType;
use crate::ib::wr::{SendWrs, WrOp};

impl Qp {
    /// Every WR of `wrs` against the QP's limits and transport (`dc`: the
    /// WRs of [`Self::post_dc`], which carry their DC target beside them):
    /// SGE count, opcode for the transport, memory of the QP's PD, an
    /// atomic's shape (a masked one's: `masked.rs`), inline length, total length.
    pub(crate) fn check_send_wrs<W: SendWrs + ?Sized>(&self, wrs: &W, dc: bool) -> Result<()> {
        let max_inline = self.max_inline();
        let max_sge = self.max_send_sge();
        let reliable = matches!(self.cfg.qp_type, QpType::Rc | QpType::Dci);
        for i in 0..wrs.count() {
            let w = wrs.wr(i);
            if w.sges.len() > max_sge as usize {
                return Err(Error::TooManySges {
                    sges: w.sges.len(),
                    max: max_sge,
                    limit: "the QP's max_send_sge",
                });
            }
            self.check_transport(&w, dc)?;
            if !reliable
                && matches!(
                    w.op,
                    WrOp::RdmaRead { .. }
                        | WrOp::AtomicCmpSwp { .. }
                        | WrOp::AtomicFetchAdd { .. }
                        | WrOp::MaskedCmpSwap { .. }
                        | WrOp::MaskedFetchAdd { .. }
                )
            {
                return Err(Error::WrongTransport {
                    qp_type: self.cfg.qp_type,
                    op: "an RDMA READ or atomic (IB spec 9.8.3)",
                });
            }
            if !w.inline {
                // (Inline bytes are copied now: any memory will do.)
                self.check_pd(w.sges)?;
            }
            match w.op {
                WrOp::AtomicCmpSwp { remote, .. } | WrOp::AtomicFetchAdd { remote, .. } => {
                    if w.inline || w.sges.len() != 1 || w.sges[0].len() != 8 {
                        return Err(Error::AtomicShape {
                            sges: w.sges.len(),
                            len: w.total_len(),
                            inline: w.inline,
                        });
                    }
                    if remote.addr % 8 != 0 {
                        return Err(Error::AtomicUnaligned { addr: remote.addr });
                    }
                }
                WrOp::RdmaRead { .. } if w.inline => {
                    return Err(Error::ReadInline);
                }
                WrOp::MaskedCmpSwap { .. } | WrOp::MaskedFetchAdd { .. } => {
                    self.check_masked(&w)?
                }
                WrOp::BindMw { .. } | WrOp::LocalInv { .. } | WrOp::SendWithInv { .. } => {
                    self.check_mw_wr(&w)?
                }
                _ => {}
            }
            if w.inline && w.total_len() > max_inline as u64 {
                return Err(Error::InlineTooLong {
                    len: w.total_len(),
                    max: max_inline,
                });
            }
            if w.total_len() > 1 << 31 {
                return Err(Error::LengthOverflow {
                    len: w.total_len(),
                    max: 1 << 31,
                });
            }
        }
        Ok(())
    }
}
