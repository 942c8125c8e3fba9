//! Posting receives: `Qp::post_recv`, one receive of one SGE in place on
//! the direct path (`DirectQp::post_recv_one`), anything else through the
//! checked path that owns the checks of a receive WR against the QP.

use super::{backend, Qp, QpKind};
use crate::backend::{QpBackend, WrCounts};
use crate::ib::error::{Error, Result};
use crate::ib::qp_attr::QpState;
use crate::ib::wr::RecvWr;

impl Qp {
    /// Posts a batch of receive work requests with one doorbell. Every WR is
    /// checked first; on any error nothing is posted. [`Error::RecvQueueFull`]
    /// when the QP would hold more than `max_recv_wr` receives,
    /// [`Error::CqFull`] when its CQ has no room for their completions; a
    /// batch larger than either, which could never fit, is [`Error::NeverFits`].
    ///
    /// A QP in RESET refuses every WR with [`Error::QpState`]; an SGE of an
    /// MR of another PD (or device) is [`Error::ForeignPd`].
    #[inline]
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        // One receive of one SGE on the direct path: in place, with the
        // checks it needs (`DirectQp::post_recv_one`); anything else, or
        // anything that would refuse, takes the checked path.
        if let (QpKind::Direct(q), [w]) = (&mut self.kind, wrs) {
            if q.post_recv_one(w, self.pd_id).is_ok() {
                return Ok(());
            }
        }
        self.post_recv_checked(wrs)
    }

    /// [`Self::post_recv`] with every check, for every WR and backend.
    #[inline(never)]
    fn post_recv_checked(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        if self.halves.is_some() && !self.rejoin_parked() {
            return Err(Error::QpSplit {
                qpn: self.local.qpn,
            });
        }
        if self.srq.is_some() {
            return Err(Error::SrqAttached {
                qpn: self.local.qpn,
            });
        }
        if self.state == QpState::Reset {
            return Err(Error::QpState {
                state: self.state,
                needs: "INIT or later",
            });
        }
        if self.cfg.max_recv_wr == 0 && !wrs.is_empty() {
            // (The verbs device was asked for one receive, as it must be.)
            return Err(Error::NeverFits {
                wrs: wrs.len(),
                queue: crate::Queue::Recv,
                depth: 0,
            });
        }
        // Room first: noting the lkeys of a receive that cannot be posted
        // would overwrite the slot of the oldest one still posted.
        let WrCounts {
            recvs_posted: posted,
            recvs_retired: retired,
            ..
        } = self.counts();
        if posted - retired + wrs.len() as u64 > self.cfg.max_recv_wr as u64 {
            return Err(self.never_fits(
                wrs.len(),
                crate::Queue::Recv,
                self.cfg.max_recv_wr,
                Error::RecvQueueFull,
            ));
        }
        // The lkeys each receive names, before it is posted: a dropped MR
        // waits only for the outstanding receives that name it (noting the
        // slots of receives a refusal leaves unposted is harmless: only
        // posted ones are looked at).
        let seq = posted;
        for (i, w) in wrs.iter().enumerate() {
            self.check_pd(w.sges)?;
            self.progress()
                .note_recv(seq + i as u64, w.sges.iter().map(|s| s.lkey.0));
        }
        let r = backend!(&mut self.kind, post_recv(wrs));
        match r {
            Err(Error::RecvQueueFull | Error::CqFull) => Err(self.never_fits(
                wrs.len(),
                crate::Queue::Recv,
                self.cfg.max_recv_wr,
                r.unwrap_err(),
            )),
            r => r,
        }
    }
}
