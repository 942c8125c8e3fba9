//! A verbs QP split into a send half and a receive half
//! ([`crate::Qp::split`]): each half gets a copy of the `VerbsQp` that posts
//! (`ibv_post_send` and `ibv_post_recv` are thread-safe in rdma-core) with
//! the shared wr_id tables ([`Table`]) and its own counts; the QP itself
//! keeps the CQ and only retires, publishing how far in a [`HalfLink`]
//! (release stores) that a half loads (acquire) before each post. The CQ
//! credits the halves may need are taken at the split, so their posts
//! count none.

use super::VerbsQp;
use crate::ib::error::{Error, Result};
use crate::ib::progress::HalfLink;
use std::sync::Arc;

/// What a split QP remembers of the split.
pub(crate) struct SplitState {
    link: Arc<HalfLink>,
    /// CQ credits the QP held at the split: its outstanding WRs' and the
    /// halves' reserve.
    held: u32,
}

impl SplitState {
    /// After a retire: how far, for the halves.
    #[inline]
    pub(super) fn publish(&self, sends: u64, recvs: u64) {
        self.link.publish(sends, recvs);
    }
}

impl VerbsQp {
    /// Splits the QP into a send half and a receive half (copies that
    /// post), this one the CQ owner that only retires. Takes now the CQ
    /// credits every WR the halves may post needs ([`Error::CqFull`] if
    /// the CQ has not that many free: nothing changes).
    pub(crate) fn split(&mut self, link: &Arc<HalfLink>) -> Result<(VerbsQp, VerbsQp)> {
        let outstanding = self.counts().outstanding() as u32;
        let sends = self.max_post - (self.posted - self.retired) as u32;
        let recvs = if self.srq.is_some() {
            0
        } else {
            self.max_recv - (self.recv_posted - self.recv_done) as u32
        };
        if outstanding + sends + recvs > self.credits.depth() {
            return Err(Error::CqTooSmall {
                qpn: self.qpn,
                wrs: outstanding + sends + recvs,
                cqes: self.credits.depth(),
            });
        }
        if !self.credits.take(sends + recvs) {
            return Err(Error::CqFull);
        }
        let (send, recv) = (self.half(), self.half());
        self.split = Some(Box::new(SplitState {
            link: link.clone(),
            held: outstanding + sends + recvs,
        }));
        self.counts = false;
        self.set_gate();
        link.publish(self.retired, self.recv_done);
        Ok((send, recv))
    }

    /// A copy that posts and never polls (its CQ credits reserved).
    fn half(&self) -> VerbsQp {
        VerbsQp {
            qp: self.qp,
            qpx: self.qpx,
            cq: self.cq.clone(),
            shared: self.shared,
            credits: self.credits.clone(),
            qpn: self.qpn,
            caps: self.caps,
            max_post: self.max_post,
            // SAFETY: a slot is written by the send (receive) half before
            // the WR naming it is posted, read by the CQ owner after its
            // completion (ordered by rdma-core and the device, as the WR
            // itself is), and written again only after the owner published
            // that it retired it (release, acquire: `HalfLink`).
            hidden: unsafe { self.hidden.share() },
            auto_signal: self.auto_signal,
            unsignaled_run: self.unsignaled_run,
            max_recv: self.max_recv,
            // SAFETY: as above.
            recv_ids: unsafe { self.recv_ids.share() },
            recv_posted: self.recv_posted,
            recv_done: self.recv_done,
            path: self.path,
            // SAFETY: as above.
            wr_ids: unsafe { self.wr_ids.share() },
            posted: self.posted,
            retired: self.retired,
            progress: self.progress.clone(),
            srq: self.srq.clone(),
            counts: false,
            split: None,
            gate: false,
            rts: self.rts,
            ops_set: self.ops_set,
            mw_ex: self.mw_ex,
            lean_poll: false,
            plain: false,
            binds: self.binds.share(),
            raw: self.raw.clone(),
            _pd: self._pd.clone(),
        }
    }

    /// A copy of this half (the same counts), to park with the QP when
    /// the half is dropped.
    pub(crate) fn parked_copy(&self) -> VerbsQp {
        self.half()
    }

    /// Whether the QP is split (it then only retires).
    pub(crate) fn is_split(&self) -> bool {
        self.split.is_some()
    }

    /// The first send sequence number no completion may name: what was
    /// posted; on a split QP, which does not know it, a queue's width past
    /// what was retired.
    #[inline]
    pub(super) fn send_limit(&self) -> u64 {
        if self.split.is_some() {
            self.retired + self.max_post as u64
        } else {
            self.posted
        }
    }

    /// As [`Self::send_limit`], for receives.
    #[inline]
    pub(super) fn recv_limit(&self) -> u64 {
        if self.split.is_some() {
            self.recv_done + self.max_recv as u64
        } else {
            self.recv_posted
        }
    }

    /// The send half's, before a post.
    #[inline(always)]
    pub(crate) fn sync_sends(&mut self, link: &HalfLink) {
        self.retired = link.sends();
    }

    /// The receive half's, before a post.
    #[inline(always)]
    pub(crate) fn sync_recvs(&mut self, link: &HalfLink) {
        self.recv_done = link.recvs();
    }

    /// Send WRs that may be posted now (after `sync_sends`), and at most.
    pub(crate) fn send_room(&self) -> (u32, u32) {
        let held = self.posted.saturating_sub(self.retired) as u32;
        (self.max_post.saturating_sub(held), self.max_post)
    }

    /// Receives that may be posted now (after `sync_recvs`), and at most
    /// (0 on an SRQ).
    pub(crate) fn recv_room(&self) -> (u32, u32) {
        if self.srq.is_some() {
            return (0, 0);
        }
        let held = self.recv_posted.saturating_sub(self.recv_done) as u32;
        (self.max_recv.saturating_sub(held), self.max_recv)
    }

    /// Takes back the halves' counts, so the QP posts again; the CQ
    /// credits as before the split.
    pub(crate) fn join(&mut self, send: VerbsQp, recv: VerbsQp) {
        let Some(s) = self.split.take() else {
            return;
        };
        self.posted = send.posted;
        self.unsignaled_run = send.unsignaled_run;
        self.recv_posted = recv.recv_posted;
        self.counts = true;
        self.credits
            .give(s.held.saturating_sub(self.counts().outstanding() as u32));
        self.set_gate();
    }
}
