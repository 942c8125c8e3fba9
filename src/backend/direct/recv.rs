//! Receives on the direct path: a QP's own RQ (`post_recv`), and the
//! checks an RQ's and an SRQ's posts share (`check_recvs`, `recv_segs`).

use super::post::{Declined, InPlace};
use super::{DirectQp, MAX_SGE};
use crate::ib::error::{Error, Result};
use crate::ib::wr::RecvWr;
use mlx5_dv::wqe::{DataSeg, Seg};

impl DirectQp {
    /// Receives take at most `n` SGEs (the QP's config), whatever the
    /// RQ's stride holds.
    #[cfg(feature = "verbs")]
    pub(crate) fn limit_recv_sge(&mut self, n: u32) {
        self.max_recv_sge = self.max_recv_sge.min(n);
    }

    /// Posts one receive of one SGE in place, and rings the RQ doorbell:
    /// an SGE on the QP's PD of 1 to 2^31 - 1 bytes, on a QP that posts
    /// receives in place (out of RESET, not split, its own RQ), with room
    /// (`max_recv_wr`, the RQ, CQ credits). Its lkey is noted for the PD's
    /// deferred deregistration first, as the general path does.
    /// [`Declined`], having changed nothing, otherwise: the caller's
    /// general path then posts it or says why not.
    #[inline(always)]
    pub(crate) fn post_recv_one(&mut self, w: &RecvWr<'_>, pd: u32) -> InPlace {
        let [s] = w.sges else {
            return Err(Declined::Shape);
        };
        if !self.recv_in_place || !s.one_seg_on(pd) {
            return Err(Declined::Shape);
        }
        if self.rq.outstanding() >= self.max_recv_wr {
            return Err(Declined::NoRoom);
        }
        if self.count_credits && !self.credits.take(1) {
            return Err(Declined::NoRoom);
        }
        self.progress.note_recv1(self.recvd, s.lkey.0);
        if !self
            .rq
            .post_one_seg(&Seg::data(s.addr, s.len, s.lkey.0), w.wr_id)
        {
            // (Room was checked: not reached.)
            if self.count_credits {
                self.credits.give(1);
            }
            return Err(Declined::NoRoom);
        }
        self.recvd += 1;
        self.progress.recvs_posted(self.recvd);
        Ok(())
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
