//! The poll of a CQ several direct-path QPs share
//! ([`DirectCq::take_shared`]): each CQE goes to the QP its QPN names, whose
//! SQ or RQ retires the WR with `poll.rs`'s `retire`; the costs are
//! `poll.rs`'s, plus the lookup of the QP.

use super::odp::odp_fault;
use super::poll::{retire, stamp, Stale};
use super::{DirectCq, DirectQp};
use crate::backend::SharedQps;
use crate::ib::completion::Completion;
use crate::ib::error::{Error, Result};
use mlx5_dv::prm::CqeOpcode;

impl DirectCq {
    /// Whether the CQE at the consumer index is software-owned (one load
    /// and one compare; nothing consumed): what an empty poll costs.
    #[inline(always)]
    pub(crate) fn has_cqe(&self) -> bool {
        self.cq.has_cqe()
    }

    /// Takes CQEs from a CQ that several direct-path QPs share, until
    /// `max` completions were handed to `put` or the CQ is empty: each CQE
    /// goes to the QP of `m` its QPN names, whose SQ or RQ retires the WR;
    /// the credits of every retired WR go back once. CQEs of QP `skip` are
    /// dropped unretired (a QP just moved to RESET). Returns the completions
    /// handed over, and the first error: a CQE of a QP not among `m`
    /// ([`Error::ForeignCqe`]) or a stale `wqe_counter`
    /// ([`Error::StaleCqe`]), after which it stops.
    #[inline]
    pub(crate) fn take_shared(
        &mut self,
        m: &mut impl SharedQps<DirectQp>,
        max: usize,
        skip: Option<u32>,
        put: impl FnMut(usize, Completion),
    ) -> (usize, Result<()>) {
        let from = self.cq.ci();
        if self.cq.slot_size() == 64 {
            self.take_shared_in::<64>(m, max, skip, put, from)
        } else {
            self.take_shared_in::<128>(m, max, skip, put, from)
        }
    }

    /// [`Self::take_shared`] on a CQ of `SLOT`-byte slots, from consumer
    /// index `from`.
    #[inline(always)]
    fn take_shared_in<const SLOT: usize>(
        &mut self,
        m: &mut impl SharedQps<DirectQp>,
        max: usize,
        skip: Option<u32>,
        mut put: impl FnMut(usize, Completion),
        from: u32,
    ) -> (usize, Result<()>) {
        let stamps = self.timestamps;
        let mut cqes = self.cq.cursor::<SLOT>();
        let mut freed = 0;
        let mut n = 0;
        let mut result = Ok(());
        while n < max {
            let Some(raw) = cqes.next() else { break };
            let cqe = raw.decode();
            if skip == Some(cqe.qpn) {
                // Dropped unretired; but a receive of an SRQ is the SRQ's
                // again (a faulted one to be posted again: `odp_fault`).
                if let Some(q) = m.find(cqe.qpn) {
                    if q.rq.is_srq()
                        && !matches!(cqe.opcode, CqeOpcode::REQ | CqeOpcode::REQ_ERR)
                        && !odp_fault(&q.rq, &cqe)
                    {
                        q.rq.complete(cqe.wqe_counter);
                    }
                }
                continue;
            }
            let Some(q) = m.find(cqe.qpn) else {
                result = Err(Error::ForeignCqe { qpn: cqe.qpn });
                break;
            };
            let cqe = super::scatter::decode_shared(raw, cqe, q);
            // REQ_ERR, RESP_ERR (and INVALID, which a software-owned CQE
            // never is): one compare. A requester's error is noted (and
            // whether the QP had failed before, which a bind's settle
            // asks); an SRQ WQE's ODP page fault is no completion and
            // gives no credit.
            let mut failed_before = false;
            if cqe.opcode.0 >= CqeOpcode::REQ_ERR.0 {
                failed_before = cqe.opcode == CqeOpcode::REQ_ERR && q.send_failed();
                if q.failed_or_faulted(&cqe) {
                    continue;
                }
            }
            let r = if q.is_split() {
                // Its halves reserved their credits: none go back.
                q.retire_split(|q| {
                    let r = retire(&mut q.sq.retirer(), &mut q.rq, &cqe);
                    if !q.binds.is_empty() {
                        q.settle_binds(cqe.opcode, failed_before);
                    }
                    r
                })
            } else {
                let held = q.outstanding();
                let r = retire(&mut q.sq.retirer(), &mut q.rq, &cqe);
                freed += held - q.outstanding();
                q.publish_retired();
                if !q.binds.is_empty() {
                    q.settle_binds(cqe.opcode, failed_before);
                }
                r
            };
            match r {
                Ok(Some(mut c)) => {
                    super::mw::umr_completion(&q.umr_ops, &mut c, cqe.wqe_counter);
                    if stamps {
                        stamp(&mut c, raw);
                    }
                    put(n, c);
                    n += 1;
                }
                Ok(None) => {}
                Err(Stale) => {
                    result = Err(Stale::error(&cqe));
                    break;
                }
            }
        }
        drop(cqes);
        let cq = &mut self.cq;
        cq.polled(from);
        m.credits().give(freed);
        (n, result)
    }
}
