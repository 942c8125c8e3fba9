//! The poll of a QP on an SRQ ([`DirectQp::poll_on_srq`]): chosen by one
//! test at the top of `DirectQp::poll`, before the CQ's, so that the poll
//! of a QP of its own RQ keeps no SRQ code, and a QP on an SRQ takes its
//! common CQE, a receive's, in straight-line code of its own (inlined
//! into `Qp::poll` too: it needs no register the rest does not save),
//! taking it once; everything else goes on out of line, through one call.

use super::poll::{plain_receive, write_recv_fields, COMMON_SEND_LIMIT};
use super::DirectQp;
use crate::ib::completion::Completion;
use crate::ib::error::Result;
use mlx5_dv::cqe::CqeRef;
use mlx5_dv::driver::ReceiveQueue;

/// Retires the receive a successful responder CQE of the plain format
/// names on a QP on an SRQ (its slot: `SrqSlots::complete_with`), its
/// completion in `c` (QP `qpn`): `true`. `false`, having retired nothing,
/// for any other CQE: an error, a compressed or scattering one, a stale
/// one (the general path's). The CQE's fields are written into `c` before
/// the slot is taken (so that few values are live at once), and may be
/// left there when it returns `false`; the wr_id only after.
#[inline(always)]
fn received_on_srq(
    rq: &ReceiveQueue,
    cqe: CqeRef<'_>,
    op_own: u8,
    c: &mut Completion,
    qpn: u32,
) -> bool {
    if !plain_receive(op_own) {
        return false;
    }
    let counter = cqe.wqe_counter();
    write_recv_fields(c, cqe, op_own, qpn);
    rq.complete_on_srq_with(counter, |wr_id| c.wr_id = wr_id)
}

impl DirectQp {
    /// [`Self::poll`] of a QP on an SRQ (the caller tested only that its
    /// receives come from an SRQ). Its first CQE, on its own CQ of 64-byte
    /// slots, is taken once, in straight-line code, when it is the common
    /// one: a receive's of the plain format, whose completion is written
    /// and whose WQE the SRQ's slot gives back ([`received_on_srq`]).
    /// Then, with room for more than one completion, if a second CQE is
    /// there, the poll goes on in the loop of more than one (`poll_recvs`;
    /// on a split QP's copy, `poll_rest`). Any other first CQE is put back
    /// and goes on out of line ([`Self::poll_on_srq_slow`]): a send's
    /// common one to `poll_cqes` (which takes it as for any QP), the rest
    /// to `poll_general` (an error, a compressed or scattering CQE, a
    /// stale `wqe_counter`). A CQ of 128-byte slots polls through the same
    /// code, out of line; a shared CQ is [`Error::SharedCq`].
    ///
    /// A receive of an SRQ's publishes nothing and gives no CQ credit
    /// back: the QP's own receive counts do not move (it takes no post
    /// of its own: [`Self::post_recv`] refuses one, so its receives
    /// posted and outstanding stay 0), and the credits its SRQ's receives
    /// need were reserved once (`srq_reserved`). Only the CQ's
    /// [`polled`] is called, when it has something to do.
    ///
    /// [`Error::SharedCq`]: crate::Error::SharedCq
    /// [`polled`]: mlx5_dv::driver::CompletionQueue::polled
    #[inline(always)]
    pub(super) fn poll_on_srq(&mut self, out: &mut [Completion]) -> Result<usize> {
        // (One compare: a CQ, of 64-byte slots.)
        match &self.cq {
            Some(c) if c.cq.slot_size() == 64 => self.poll_on_srq_in::<64>(out),
            _ => self.poll_on_srq_slow::<64>(out, Slow::Other),
        }
    }

    /// [`Self::poll_on_srq`] on a CQ of `SLOT`-byte slots: by the room in
    /// `out`, so that the ring's state is not kept beside its length.
    #[inline(always)]
    fn poll_on_srq_in<const SLOT: usize>(&mut self, out: &mut [Completion]) -> Result<usize> {
        if out.len() > 1 {
            self.poll_on_srq_n::<SLOT, true>(out)
        } else if out.len() == 1 {
            self.poll_on_srq_n::<SLOT, false>(out)
        } else {
            Ok(0)
        }
    }

    /// [`Self::poll_on_srq_in`] into an `out` of one completion, or (`MANY`)
    /// of more. What it does not take in straight-line code goes on in
    /// [`Self::poll_on_srq_slow`], its one call (so that the common path
    /// keeps few values live). With room for more, it asks whether a
    /// second CQE is there only after the first is taken (when the
    /// ring's state is no longer in registers beside the first's).
    #[inline(always)]
    fn poll_on_srq_n<const SLOT: usize, const MANY: bool>(
        &mut self,
        out: &mut [Completion],
    ) -> Result<usize> {
        let Some(own) = &mut self.cq else {
            return self.poll_on_srq_slow::<SLOT>(out, Slow::Other);
        };
        let Some(taken) = own.cq.take::<SLOT>() else {
            return Ok(0);
        };
        let Some(first) = out.first_mut() else {
            taken.put_back();
            return Ok(0);
        };
        if own.general {
            // The general path copies each CQE's timestamp (`poll.rs`), and
            // tells a `LOCAL_INV`'s CQE (`mw.rs`).
            taken.put_back();
            return self.poll_on_srq_slow::<SLOT>(out, Slow::General);
        }
        let cqe = taken.cqe();
        let op_own = cqe.op_own();
        if !received_on_srq(&self.rq, cqe, op_own, first, self.qpn) {
            taken.put_back();
            // A send's common CQE goes to `poll_cqes`, out of line (its
            // registers are not this path's); any other to the general path.
            let slow = if op_own < COMMON_SEND_LIMIT {
                Slow::Send
            } else {
                Slow::General
            };
            return self.poll_on_srq_slow::<SLOT>(out, slow);
        }
        if MANY && own.cq.has_cqe() {
            return self.poll_on_srq_slow::<SLOT>(out, Slow::More1);
        }
        if !own.cq.quiet_polls() {
            return self.poll_on_srq_slow::<SLOT>(out, Slow::Polled1);
        }
        Ok(1)
    }

    /// The rest of a [`Self::poll_on_srq`] that its straight-line code
    /// did not finish, as `slow` says.
    #[inline(never)]
    fn poll_on_srq_slow<const SLOT: usize>(
        &mut self,
        out: &mut [Completion],
        slow: Slow,
    ) -> Result<usize> {
        let n = match slow {
            Slow::Other => {
                return match &self.cq {
                    Some(_) => self.poll_on_srq_in::<128>(out),
                    None => self.shared_cq(),
                }
            }
            // (A QP on an SRQ takes no receive there: its own RQ's, which
            // it has not, decline, and go to the general path.)
            Slow::Send => return self.poll_cqes::<SLOT>(out),
            Slow::General => return self.poll_general::<SLOT>(out),
            Slow::Polled1 => return self.polled_one(1),
            Slow::More1 => 1,
        };
        // The first CQE taken (its completion, if any, in `out[..n]`), and
        // a second behind it: the loops' from here, from the first's
        // consumer index.
        let from = match &self.cq {
            Some(c) => c.cq.ci().wrapping_sub(1),
            None => return self.shared_cq(),
        };
        if self.is_split() {
            // Its copy of the queues retires nothing: the general path's.
            return self.retire_split(|q| q.poll_rest::<SLOT>(out, n, None, from));
        }
        self.poll_recvs::<SLOT>(out, n, from)
    }
}

/// Where [`DirectQp::poll_on_srq`] goes on out of line.
#[derive(Clone, Copy, Debug)]
enum Slow {
    /// A CQ of 128-byte slots, or a shared one (not the QP's).
    Other,
    /// A first CQE of a send's common kind, put back: `poll_cqes`.
    Send,
    /// A first CQE of the general path's, put back.
    General,
    /// One receive taken, its completion in `out[0]`, and the CQ's
    /// `polled` to do: `polled_one`.
    Polled1,
    /// One receive taken, its completion in `out[0]`, and a second CQE
    /// behind it: the poll of more than one goes on.
    More1,
}
