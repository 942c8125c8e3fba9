//! A direct-path QP split into a send half and a receive half
//! ([`crate::Qp::split`]): each half gets a copy of the `DirectQp` whose
//! queue it posts to (`SendQueue::split_copy`, `ReceiveQueue::split_copy`:
//! the same rings and per-WQE tables, its own indices), and the QP itself
//! keeps its CQ and only retires. The CQ owner publishes how far it retired
//! each queue in a [`HalfLink`] after every poll that took the QP's CQEs
//! (two release stores); a half loads its field (one acquire load) before
//! each post. The CQ credits the halves may need are taken at the split, so
//! their posts count none.

use super::post::PostMode;
use super::DirectQp;
use crate::ib::error::{Error, Result};
use crate::ib::progress::HalfLink;
use std::sync::Arc;

/// What a split QP remembers of the split, to count and to join.
pub(crate) struct SplitState {
    link: Arc<HalfLink>,
    /// Sends posted in all at the split.
    sent: u64,
    /// Receives posted in all at the split.
    recvd: u64,
    /// Sends and receives retired in all (kept up to date by each
    /// `retire_split`), and the SQ's retired count and the RQ's tail they
    /// were last counted from.
    sends_retired: u64,
    recvs_retired: u64,
    sq_retired: u32,
    rq_tail: u32,
    /// Whether the QP counted CQ credits, and how many it held at the
    /// split: its outstanding WRs' and the halves' reserve.
    counted: bool,
    held: u32,
}

impl DirectQp {
    /// Splits the QP (in RTS, nothing in its posting state half-done) into
    /// a send half and a receive half (copies of it that post, and never
    /// poll), and makes this one the CQ owner that only retires. A QP that
    /// counts CQ credits takes, now, the credits every WR the halves may
    /// post needs (`max_send_wr` and `max_recv_wr`, less what is
    /// outstanding): [`Error::CqFull`] if the CQ has not that many free,
    /// [`Error::CqTooSmall`] if it never could (its own CQ is shallower), and
    /// nothing changes. While split, a CQE naming a WQE within the ring's
    /// width past the oldest outstanding one is taken as that WQE's (this
    /// copy does not know the halves' producer index): a stale CQE is
    /// not told apart.
    pub(crate) fn split(&mut self, link: &Arc<HalfLink>) -> Result<(DirectQp, DirectQp)> {
        let srq = self.rq.is_srq();
        let outstanding = self.outstanding();
        let reserve = if self.count_credits {
            self.sq.free_wrs()
                + if srq {
                    0
                } else {
                    self.max_recv_wr.saturating_sub(self.rq.outstanding())
                }
        } else {
            0
        };
        if outstanding + reserve > self.credits.depth() {
            // (Only a CQ shallower than the QP's WR limits counts credits.)
            return Err(Error::CqTooSmall {
                qpn: self.qpn,
                wrs: outstanding + reserve,
                cqes: self.credits.depth(),
            });
        }
        if reserve > 0 && !self.credits.take(reserve) {
            return Err(Error::CqFull);
        }
        let crate::backend::WrCounts {
            sends_retired,
            recvs_retired,
            ..
        } = self.counts();
        // SAFETY: from here on the send half's copy alone posts to the SQ
        // and the receive half's alone to the RQ; this QP only retires
        // (its post mode is CHECKED, and `post_send` / `post_recv` refuse
        // while `split` is set), between `open_window` and `close_window`;
        // nothing resets (`Qp::modify` refuses RESET while split, `join`
        // takes the copies back first). Every copy holds `dev`, which owns
        // the rings.
        let (send, recv) = unsafe {
            (
                self.half(self.sq.split_copy(), self.rq.split_copy()),
                self.half(self.sq.split_copy(), self.rq.split_copy()),
            )
        };
        let mut send = send;
        // The split requires RTS; the half counts no credits.
        send.set_mode_for(crate::ib::qp_attr::QpState::Rts);
        self.split = Some(Box::new(SplitState {
            link: link.clone(),
            sent: self.sent,
            recvd: self.recvd,
            sends_retired,
            recvs_retired,
            sq_retired: self.sq.retired_count(),
            rq_tail: self.rq.consumed(),
            counted: self.count_credits,
            held: outstanding + reserve,
        }));
        self.count_credits = false;
        self.set_post_mode(PostMode::Checked);
        self.sq.close_window();
        self.rq.close_window();
        link.publish(self.sq.consumed(), self.rq.consumed() as u64);
        Ok((send, recv))
    }

    /// A copy of this QP over `sq` and `rq` (split copies) that posts and
    /// never polls: no CQ of its own, no CQ credits counted (the split
    /// reserved them), checked posts until its mode is set.
    fn half(&self, sq: mlx5_dv::driver::SendQueue, rq: mlx5_dv::driver::ReceiveQueue) -> DirectQp {
        let mut q = DirectQp {
            sq,
            rq,
            cq: None,
            qpn: self.qpn,
            max_send_sge: self.max_send_sge,
            max_recv_sge: self.max_recv_sge,
            max_recv_wr: self.max_recv_wr,
            credits: self.credits.clone(),
            count_credits: false,
            post_mode: PostMode::Checked,
            mode_after_fence: None,
            // SAFETY: as the SQ's slots (`SendQueue::split_copy`): the
            // posting copy writes a UMR's entry before its doorbell rings,
            // the retiring copy reads it after the WQE's CQE, and the entry
            // is written again only for a WQE posted after that one was
            // retired and published.
            umr_ops: unsafe { self.umr_ops.share() },
            inv_pending: None,
            binds: self.binds.share(),
            recv_in_place: false,
            dev: self.dev.clone(),
            _srq: self._srq.clone(),
            path: self.path,
            progress: self.progress.clone(),
            sent: self.sent,
            recvd: self.recvd,
            srq_reserved: 0,
            qp_type: self.qp_type,
            ud_mtu: self.ud_mtu,
            split: None,
            send_failed: self.send_failed,
        };
        q.set_post_mode(PostMode::Checked);
        q
    }

    /// A copy of this half (the same queue indices and counts), to park
    /// with the QP when the half is dropped.
    pub(crate) fn parked_copy(&self) -> DirectQp {
        // SAFETY: the half this copies is being dropped: the copy takes
        // over its role (it posts nothing until the QP joins it back).
        unsafe { self.half(self.sq.split_copy(), self.rq.split_copy()) }
    }

    /// Whether the QP is split into halves (it then only retires).
    #[inline]
    pub(crate) fn is_split(&self) -> bool {
        self.split.is_some()
    }

    /// The send half's, before a post: the room the CQ owner gave back.
    #[inline(always)]
    pub(crate) fn sync_sends(&mut self, link: &HalfLink) {
        self.sq.set_consumed(link.sends());
    }

    /// The receive half's, before a post.
    #[inline(always)]
    pub(crate) fn sync_recvs(&mut self, link: &HalfLink) {
        self.rq.set_consumed(link.recvs() as u32);
    }

    /// Send WRs that may be posted now (after `sync_sends`), and at most.
    pub(crate) fn send_room(&self) -> (u32, u32) {
        let max = self.sq.free_wrs() + self.sq.outstanding();
        (self.sq.free_wrs(), max)
    }

    /// Receives that may be posted now (after `sync_recvs`), and at most
    /// (0 on an SRQ, which takes the QP's receives).
    pub(crate) fn recv_room(&self) -> (u32, u32) {
        if self.rq.is_srq() {
            return (0, 0);
        }
        let free = self
            .max_recv_wr
            .saturating_sub(self.rq.outstanding())
            .min(self.rq.free());
        (free, self.max_recv_wr)
    }

    /// The [`WrCounts`](crate::backend::WrCounts) of `counts` while split: sends and receives posted as
    /// at the split (this copy posts none), retired as the queues say.
    pub(super) fn split_counts(&self, s: &SplitState) -> crate::backend::WrCounts {
        // (Counted from where the last `retire_split` left them: fewer than
        // 2^32 WRs retire in one.)
        let sends = s.sends_retired + self.sq.retired_count().wrapping_sub(s.sq_retired) as u64;
        let recvs = s.recvs_retired + self.rq.consumed().wrapping_sub(s.rq_tail) as u64;
        // Never below what was retired, never above what was posted as far
        // as this copy knows: the halves posted the rest.
        crate::backend::WrCounts {
            sends_posted: s.sent.max(sends),
            sends_retired: sends,
            recvs_posted: s.recvd.max(recvs),
            recvs_retired: recvs,
        }
    }

    /// Retires, with `f`, what CQEs of a split QP name: the windows opened
    /// around it, what it retired published to the halves and the PD.
    #[inline]
    pub(super) fn retire_split<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        self.sq.open_window();
        self.rq.open_window();
        let r = f(self);
        self.sq.close_window();
        self.rq.close_window();
        self.publish_retired();
        let (sq, rq) = (self.sq.retired_count(), self.rq.consumed());
        if let Some(s) = &mut self.split {
            s.sends_retired += sq.wrapping_sub(s.sq_retired) as u64;
            s.recvs_retired += rq.wrapping_sub(s.rq_tail) as u64;
            (s.sq_retired, s.rq_tail) = (sq, rq);
            s.link.publish(self.sq.consumed(), rq as u64);
        }
        r
    }

    /// Takes back the halves' queues (their copies posted; this one
    /// retired), so the QP posts again: their indices with this copy's
    /// consumer side, the posted counts, and the CQ credits as before the
    /// split (the reserve less what is still outstanding goes back).
    pub(crate) fn join(&mut self, mut send: DirectQp, mut recv: DirectQp) {
        let Some(s) = self.split.take() else {
            return;
        };
        send.sq.set_consumed(self.sq.consumed());
        recv.rq.set_consumed(self.rq.consumed());
        std::mem::swap(&mut self.sq, &mut send.sq);
        std::mem::swap(&mut self.rq, &mut recv.rq);
        self.sent = send.sent;
        self.recvd = recv.recvd;
        self.count_credits = s.counted;
        if s.counted {
            self.credits.give(s.held.saturating_sub(self.outstanding()));
        }
        self.publish_retired();
        self.binds_after_join();
    }

    /// The post mode for `state` after a join (as `modify` sets it).
    pub(crate) fn rejoined(&mut self, state: crate::ib::qp_attr::QpState) {
        self.set_mode_for(state);
    }
}
