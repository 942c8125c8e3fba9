//! Receives on the direct path: a QP's own RQ (`post_recv`), and the
//! checks an RQ's and an SRQ's posts share (`check_recvs`, `recv_segs`).

use super::{DirectQp, MAX_SGE};
use crate::ib::error::{Error, Result};
use crate::ib::wr::RecvWr;
use mlx5_dv::wqe::DataSeg;

impl DirectQp {
    /// Receives take at most `n` SGEs (the QP's config), whatever the
    /// RQ's stride holds.
    #[cfg(feature = "verbs")]
    pub(crate) fn limit_recv_sge(&mut self, n: u32) {
        self.max_recv_sge = self.max_recv_sge.min(n);
    }

    /// Posts receive WQEs and rings the RQ doorbell once. Checked first: on
    /// error nothing is written.
    pub(crate) fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        if self.is_split() {
            return Err(Error::QpSplit { qpn: self.qpn });
        }
        if self.rq.is_srq() && !wrs.is_empty() {
            return Err(Error::SrqAttached { qpn: self.qpn });
        }
        check_recvs(wrs, self.max_recv_sge, "the QP's max_recv_sge")?;
        let held = self.rq.outstanding();
        if held as usize + wrs.len() > self.max_recv_wr as usize
            || wrs.len() as u32 > self.rq.free()
        {
            return Err(Error::RecvQueueFull);
        }
        self.take_credits(wrs.len() as u32)?;
        for w in wrs {
            let (segs, n) = recv_segs(w);
            // Checked above (SGE count, length, room): cannot fail.
            self.rq.post(&segs[..n], w.wr_id)?;
        }
        self.rq.ring_doorbell();
        self.recvd += wrs.len() as u64;
        self.progress.recvs_posted(self.recvd);
        Ok(())
    }
}

/// Checks each receive of `wrs` against a limit of `max_sge` SGEs (`what`
/// names it in the error) and 2^31 bytes: the checks an RQ's and an SRQ's
/// posts make before writing anything.
///
/// Errors: [`Error::TooManySges`], [`Error::LengthOverflow`].
pub(super) fn check_recvs(wrs: &[RecvWr<'_>], max_sge: u32, what: &'static str) -> Result<()> {
    for w in wrs {
        if w.sges.len() > max_sge as usize {
            return Err(Error::TooManySges {
                sges: w.sges.len(),
                max: max_sge,
                limit: what,
            });
        }
        let total: u64 = w.sges.iter().map(|s| s.len as u64).sum();
        if total > 1 << 31 {
            return Err(Error::LengthOverflow {
                len: total,
                max: 1 << 31,
            });
        }
    }
    Ok(())
}

/// A receive's SGEs as data segments (at most [`MAX_SGE`]: `check_recvs`
/// saw to it), and how many.
pub(super) fn recv_segs(w: &RecvWr<'_>) -> ([DataSeg; MAX_SGE], usize) {
    let mut segs = [DataSeg {
        addr: 0,
        len: 0,
        lkey: 0,
    }; MAX_SGE];
    for (d, s) in segs.iter_mut().zip(w.sges) {
        *d = DataSeg {
            addr: s.addr,
            len: s.len,
            lkey: s.lkey.0,
        };
    }
    (segs, w.sges.len().min(MAX_SGE))
}
