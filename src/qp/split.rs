//! A QP in two halves ([`Qp::split`]): a [`SendHalf`] and a [`RecvHalf`],
//! each `Send`, so that one thread or task posts sends while another posts
//! receives, and the [`Qp`] itself (or its [`SharedCq`](crate::SharedCq))
//! polls the completions of both.
//!
//! Each half holds a copy of the QP's backend object that posts to its own
//! queue (on the direct path a copy of the SQ or RQ driver over the same
//! ring and per-WQE table; on verbs a copy of the counts over the same
//! `ibv_qp`). The CQ owner publishes how far it retired each queue in a
//! `HalfLink` (a release store per queue after each poll that took the
//! QP's CQEs); a half loads its queue's count (one acquire load) before
//! each post call. The CQ credits the halves may need were taken at the
//! split, so a half's post does no read-modify-write that another thread
//! also does. A half dropped without [`Qp::join`] parks its counts with
//! the QP, which takes both back at its next post once both are gone.

use crate::ib::error::{Error, Result};
use crate::ib::progress::HalfLink;
use crate::ib::qp_attr::QpState;
use crate::ib::wr::{RecvWr, SendWr, WriteWr};
use crate::qp::held::{HeldQueue, Owned};
use crate::qp::{Halves, Parked, Qp, QpKind, ReclaimOnDrop};
use crate::reactor::park_on;
use std::sync::{Arc, Mutex};
use std::task::Poll;

/// The send half of a split QP ([`Qp::split`]): posts sends (every kind
/// [`Qp::post_send`] takes, and the one-opcode WRITE posts), from any one
/// thread or task at a time. `Send`, not `Sync`: it is moved to the thread
/// that posts, not shared (posting takes `&mut self`). Its completions come
/// from the QP's CQ, polled by the QP (or its [`SharedCq`](crate::SharedCq)).
///
/// Cost: one acquire load (the room the CQ owner gave back) on top of the
/// whole QP's post (`scripts/insn-count`, row `half post_write`).
///
/// Dropped without [`Qp::join`], it hands its queue back to the QP, which
/// posts again once both halves are gone. If the QP is dropped first, the
/// half's posts fail with [`Error::CqOwnerGone`] once its queue is full.
pub struct SendHalf {
    qp: Qp,
    /// `halves.link`, one load nearer.
    link: Arc<HalfLink>,
    halves: Arc<Halves>,
}

/// The receive half of a split QP ([`Qp::split`]): posts receives, from
/// any one thread or task at a time. `Send`, not `Sync`. A QP on an SRQ
/// has no receives of its own: its receive half refuses every post
/// ([`Error::SrqAttached`]; post to the [`Srq`](crate::Srq)).
pub struct RecvHalf {
    qp: Qp,
    halves: Arc<Halves>,
}

impl Qp {
    /// Splits the QP's posting into a [`SendHalf`] and a [`RecvHalf`], each
    /// `Send`, so that two threads or tasks post sends and receives at
    /// once. The QP keeps polling the completions of both (or its
    /// [`SharedCq`](crate::SharedCq) does), and its control path
    /// ([`Self::modify`] to any state but RESET or SQD, [`Self::query`]); it posts
    /// nothing itself until [`Self::join`] (or both halves are dropped):
    /// its posts are [`Error::QpSplit`].
    ///
    /// A QP that counts CQ credits (on a shared CQ, or an own CQ shallower
    /// than `max_send_wr + max_recv_wr`) takes now the credits of every WR
    /// the halves may post, so their posts take none.
    ///
    /// Errors: a DC QP ([`Error::WrongTransport`]); the QP is not in RTS ([`Error::QpState`]: connect it
    /// first); it is split already ([`Error::QpSplit`]); the CQ has not
    /// the credits free now ([`Error::CqFull`]: poll and split again), or
    /// never could ([`Error::CqTooSmall`]: its own CQ holds fewer than
    /// `max_send_wr + max_recv_wr` CQEs; size it with
    /// [`CqSizing`](crate::CqSizing)). Nothing changes.
    ///
    /// The halves run at their own pace: a SEND may reach the peer before
    /// its receive half posted the receive, so give the sending QP
    /// `rnr_retry: 7` (or a credit scheme of your own).
    pub fn split(&mut self) -> Result<(SendHalf, RecvHalf)> {
        if self.halves.is_some() && !self.rejoin_parked() {
            return Err(Error::QpSplit { qpn: self.qp_num() });
        }
        if self.cfg.qp_type.is_dc() {
            return Err(Error::WrongTransport {
                qp_type: self.cfg.qp_type,
                op: "split (a DCI posts through Qp::post_dc alone; a DCT sends nothing)",
            });
        }
        if self.state != QpState::Rts {
            return Err(Error::QpState {
                state: self.state,
                needs: "RTS (connect the QP, then split it)",
            });
        }
        let link = Arc::new(HalfLink::default());
        let (send, recv) = match &mut self.kind {
            QpKind::Direct(q) => {
                let (s, r) = q.split(&link)?;
                (QpKind::Direct(s), QpKind::Direct(r))
            }
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => {
                let (s, r) = q.split(&link)?;
                (QpKind::Verbs(s), QpKind::Verbs(r))
            }
        };
        let halves = Arc::new(Halves {
            link,
            parked: Mutex::new(Parked::default()),
            owner_gone: std::sync::atomic::AtomicBool::new(false),
        });
        self.halves = Some(halves.clone());
        Ok((
            SendHalf {
                qp: self.copy_with(send),
                link: halves.link.clone(),
                halves: halves.clone(),
            },
            RecvHalf {
                qp: self.copy_with(recv),
                halves,
            },
        ))
    }

    /// Takes back the halves of [`Self::split`]: the QP posts again.
    ///
    /// Errors: the halves are not this QP's ([`Error::NotTheHalves`]; they are
    /// dropped, which hands them back to their own QP).
    pub fn join(&mut self, send: SendHalf, recv: RecvHalf) -> Result<()> {
        let ours = |h: &Arc<Halves>| self.halves.as_ref().is_some_and(|m| Arc::ptr_eq(m, h));
        if !ours(&send.halves) || !ours(&recv.halves) {
            return Err(Error::NotTheHalves { qpn: self.qp_num() });
        }
        drop((send, recv));
        self.rejoin_parked();
        Ok(())
    }

    /// Whether the QP is split into halves now.
    pub fn is_split(&self) -> bool {
        self.halves.is_some()
    }

    /// When both halves were dropped: takes their queues back (the QP
    /// posts again) and returns `true`; else `false`, nothing changed.
    pub(crate) fn rejoin_parked(&mut self) -> bool {
        let Some(h) = &self.halves else {
            return true;
        };
        let (send, recv) = {
            let mut p = h.parked.lock().unwrap_or_else(|e| e.into_inner());
            match (p.send.take(), p.recv.take()) {
                (Some(s), Some(r)) => (s, r),
                (s, r) => {
                    (p.send, p.recv) = (s, r);
                    return false;
                }
            }
        };
        match (&mut self.kind, send, recv) {
            (QpKind::Direct(q), QpKind::Direct(s), QpKind::Direct(r)) => {
                q.join(s, r);
                q.rejoined(self.state);
            }
            #[cfg(feature = "verbs")]
            (QpKind::Verbs(q), QpKind::Verbs(s), QpKind::Verbs(r)) => q.join(s, r),
            #[cfg(feature = "verbs")]
            _ => unreachable!("a QP's halves are of its own backend"),
        }
        self.halves = None;
        true
    }

    /// A `Qp` around `kind`, a half's copy of this QP's backend object.
    fn copy_with(&self, kind: QpKind) -> Qp {
        Qp {
            kind,
            owned: Owned {
                send: HeldQueue::new(1),
                recv: HeldQueue::new(1),
            },
            shared_cq: self.shared_cq,
            state: self.state,
            pd_id: self.pd_id,
            cfg: self.cfg,
            local: self.local,
            srq: None,
            pd: self.pd.clone(),
            halves: None,
            _reclaim: ReclaimOnDrop(self.pd.dereg.clone()),
        }
    }

    /// A copy of a half's backend object, to park when the half goes.
    fn parked_copy(&self) -> QpKind {
        match &self.kind {
            QpKind::Direct(q) => QpKind::Direct(q.parked_copy()),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => QpKind::Verbs(q.parked_copy()),
        }
    }
}

/// Whether the halves' QP (their CQ's owner) was dropped.
#[cold]
fn gone(h: &Halves) -> bool {
    h.owner_gone.load(std::sync::atomic::Ordering::Relaxed)
}

impl SendHalf {
    /// A refusal: [`Error::QueueFull`] for good once the QP is gone.
    #[cold]
    fn owner_gone(&self, e: Error) -> Error {
        if matches!(e, Error::QueueFull) && gone(&self.halves) {
            return Error::CqOwnerGone {
                qpn: self.qp.qp_num(),
            };
        }
        e
    }

    /// Before a post: the room the CQ owner gave back (one acquire load).
    #[inline(always)]
    fn sync(&mut self) {
        match &mut self.qp.kind {
            QpKind::Direct(q) => q.sync_sends(&self.link),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => q.sync_sends(&self.link),
        }
    }

    /// [`Qp::post_send`], from this half: the same checks and errors
    /// ([`Error::QueueFull`] when `max_send_wr` WRs are outstanding: the
    /// CQ's owner must poll; never [`Error::CqFull`], whose credits the
    /// split took).
    #[inline(always)]
    pub fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<()> {
        // `sync` and `Qp::post_send` in one match on the backend.
        let pd = self.qp.pd_id;
        match &mut self.qp.kind {
            QpKind::Direct(q) => {
                q.sync_sends(&self.link);
                let posted = match wrs {
                    [w] => q.post_one(w, pd),
                    [] => Err(crate::backend::direct::Declined::Shape),
                    _ => q.post_many(wrs, pd),
                };
                if posted.is_ok() {
                    return Ok(());
                }
            }
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => q.sync_sends(&self.link),
        }
        self.qp
            .post_send_checked(wrs)
            .map_err(|e| self.owner_gone(e))
    }

    /// [`Qp::post_write`], from this half.
    #[inline(always)]
    pub fn post_write(&mut self, w: &WriteWr<'_>) -> Result<()> {
        // `sync` and `Qp::post_write` in one match on the backend.
        let pd = self.qp.pd_id;
        match &mut self.qp.kind {
            QpKind::Direct(q) => {
                q.sync_sends(&self.link);
                if q.post_write(w, pd).is_ok() {
                    return Ok(());
                }
            }
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => q.sync_sends(&self.link),
        }
        self.qp
            .post_write_general(w)
            .map_err(|e| self.owner_gone(e))
    }

    /// [`Qp::post_writes`], from this half.
    pub fn post_writes(&mut self, wrs: &[WriteWr<'_>]) -> Result<()> {
        self.sync();
        self.qp.post_writes(wrs).map_err(|e| self.owner_gone(e))
    }

    /// [`Qp::post_write_inline`], from this half.
    pub fn post_write_inline(
        &mut self,
        wr_id: u64,
        data: &[u8],
        remote: crate::RemoteAddr,
        flags: crate::SendFlags,
    ) -> Result<()> {
        self.sync();
        self.qp
            .post_write_inline(wr_id, data, remote, flags)
            .map_err(|e| self.owner_gone(e))
    }

    /// Waits until `n` send WRs may be posted (the CQ's owner polled the
    /// completions that free them): `room(1).await` where a post was
    /// refused with [`Error::QueueFull`], rather than retrying. The owner
    /// wakes it with the poll that gave the room back. Cancel-safe.
    ///
    /// Errors: `n` is more than the queue ever holds ([`Error::NeverFits`]);
    /// the QP was dropped, so no room will come ([`Error::CqOwnerGone`]).
    pub async fn room(&mut self, n: u32) -> Result<()> {
        std::future::poll_fn(|cx| self.poll_room(cx, n)).await
    }

    /// [`Self::room`] for a thread: blocks (parked, woken by the owner's
    /// poll) until `n` send WRs may be posted, `true`, or `timeout` passed
    /// first, `false`.
    ///
    /// Errors: as [`Self::room`].
    pub fn wait_room(&mut self, n: u32, timeout: std::time::Duration) -> Result<bool> {
        let deadline = crate::reactor::deadline_after(timeout);
        park_on(|cx| self.poll_room(cx, n), Some(deadline)).map_or(Ok(false), |r| r.map(|()| true))
    }

    /// [`Self::room`] as a poll function.
    pub fn poll_room(&mut self, cx: &mut std::task::Context<'_>, n: u32) -> Poll<Result<()>> {
        let qpn = self.qp.qp_num();
        let SendHalf { qp, link, halves } = self;
        let mut room = || match &mut qp.kind {
            QpKind::Direct(q) => {
                q.sync_sends(link);
                q.send_room()
            }
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => {
                q.sync_sends(link);
                q.send_room()
            }
        };
        poll_room(halves, 0, cx, n, qpn, &mut room)
    }

    /// The QP's number (24 bits).
    pub fn qp_num(&self) -> u32 {
        self.qp.qp_num()
    }

    /// The largest inline payload, bytes ([`Qp::max_inline`]).
    pub fn max_inline(&self) -> u32 {
        self.qp.max_inline()
    }
}

impl RecvHalf {
    /// [`Qp::post_recv`], from this half: the same checks and errors
    /// ([`Error::RecvQueueFull`] when `max_recv_wr` receives are
    /// outstanding: the CQ's owner must poll).
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        match &mut self.qp.kind {
            QpKind::Direct(q) => q.sync_recvs(&self.halves.link),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => q.sync_recvs(&self.halves.link),
        }
        self.qp.post_recv(wrs).map_err(|e| {
            if matches!(e, Error::RecvQueueFull) && gone(&self.halves) {
                return Error::CqOwnerGone {
                    qpn: self.qp.qp_num(),
                };
            }
            e
        })
    }

    /// Waits until `n` receives may be posted, as [`SendHalf::room`].
    ///
    /// Errors: as [`SendHalf::room`]; on a QP on an SRQ, which takes no
    /// receives of its own, every `n` is [`Error::NeverFits`].
    pub async fn room(&mut self, n: u32) -> Result<()> {
        std::future::poll_fn(|cx| self.poll_room(cx, n)).await
    }

    /// [`Self::room`] for a thread, as [`SendHalf::wait_room`].
    ///
    /// Errors: as [`Self::room`].
    pub fn wait_room(&mut self, n: u32, timeout: std::time::Duration) -> Result<bool> {
        let deadline = crate::reactor::deadline_after(timeout);
        park_on(|cx| self.poll_room(cx, n), Some(deadline)).map_or(Ok(false), |r| r.map(|()| true))
    }

    /// [`Self::room`] as a poll function.
    pub fn poll_room(&mut self, cx: &mut std::task::Context<'_>, n: u32) -> Poll<Result<()>> {
        let qpn = self.qp.qp_num();
        let RecvHalf { qp, halves } = self;
        let link = &halves.link;
        let mut room = || match &mut qp.kind {
            QpKind::Direct(q) => {
                q.sync_recvs(link);
                q.recv_room()
            }
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => {
                q.sync_recvs(link);
                q.recv_room()
            }
        };
        poll_room(halves, 1, cx, n, qpn, &mut room)
    }

    /// The QP's number (24 bits).
    pub fn qp_num(&self) -> u32 {
        self.qp.qp_num()
    }
}

/// A half's wait for room for `n` WRs in queue `which` (0 send, 1
/// receive); `room` syncs the half's copy and says (free now, at most).
fn poll_room(
    halves: &Halves,
    which: usize,
    cx: &mut std::task::Context<'_>,
    n: u32,
    qpn: u32,
    room: &mut dyn FnMut() -> (u32, u32),
) -> Poll<Result<()>> {
    let (free, max) = room();
    if n > max {
        return Poll::Ready(Err(Error::NeverFits {
            wrs: n as usize,
            queue: if which == 0 {
                crate::Queue::Send
            } else {
                crate::Queue::Recv
            },
            depth: max,
        }));
    }
    if free >= n {
        return Poll::Ready(Ok(()));
    }
    if gone(halves) {
        return Poll::Ready(Err(Error::CqOwnerGone { qpn }));
    }
    halves.link.register(which, cx.waker());
    // Again, after registering: a poll that came between is seen now.
    if room().0 >= n {
        return Poll::Ready(Ok(()));
    }
    if gone(halves) {
        return Poll::Ready(Err(Error::CqOwnerGone { qpn }));
    }
    Poll::Pending
}

impl Drop for SendHalf {
    fn drop(&mut self) {
        let copy = self.qp.parked_copy();
        let mut p = self.halves.parked.lock().unwrap_or_else(|e| e.into_inner());
        p.send = Some(copy);
    }
}

impl Drop for RecvHalf {
    fn drop(&mut self) {
        let copy = self.qp.parked_copy();
        let mut p = self.halves.parked.lock().unwrap_or_else(|e| e.into_inner());
        p.recv = Some(copy);
    }
}

impl std::fmt::Debug for SendHalf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SendHalf {{ qpn: {:#x} }}", self.qp.qp_num())
    }
}

impl std::fmt::Debug for RecvHalf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RecvHalf {{ qpn: {:#x} }}", self.qp.qp_num())
    }
}
