//! How far a QP's work requests have got: counts of WRs posted and retired,
//! which its PD reads to know when a dropped MR can no longer be named by
//! an outstanding WR (see [`super::mr`]). No per-WR counting: each count is
//! one plain store per post call (release per poll call that retired
//! something), read only by the PD's deregistration bookkeeping.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// WRs posted and retired on one QP since it was created (monotonic: a
/// RESET retires every outstanding WR, it does not rewind; sends counted
/// modulo 2^32, as the SQ counts them, so that a post publishes the SQ's
/// own count, and compared wrapping: at most `max_send_wr` sends, far
/// below 2^31, are outstanding); and the lkeys
/// of its posted receives, so that a receive kept posted for ever (a
/// server's) holds only the MR it names.
#[derive(Debug)]
pub(crate) struct WrProgress {
    send_posted: AtomicU32,
    send_retired: AtomicU32,
    recv_posted: AtomicU64,
    recv_retired: AtomicU64,
    /// `recv_sges` lkeys per receive, receive `seq` at slot
    /// `seq % recv_slots` (at most `recv_slots`, a power of two, receives
    /// are outstanding);
    /// 0 past a receive's last SGE.
    recv_keys: Box<[AtomicU32]>,
    recv_slots: u64,
    recv_sges: usize,
}

/// The posted counts of one QP when an MR's last handle went: the MR may be
/// deregistered once that QP has retired that many.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PostedAt {
    send: u32,
    recv: u64,
}

impl WrProgress {
    /// For a QP holding at most `recv_wr` receives of at most `recv_sge`
    /// SGEs each.
    pub(crate) fn new(recv_wr: u32, recv_sge: u32) -> Self {
        // A power of two: a receive's slot is its sequence number masked.
        let (slots, sges) = (
            (recv_wr.max(1) as usize).next_power_of_two(),
            recv_sge.max(1) as usize,
        );
        WrProgress {
            recv_keys: (0..slots * sges).map(|_| AtomicU32::new(0)).collect(),
            recv_slots: slots as u64,
            recv_sges: sges,
            send_posted: AtomicU32::new(0),
            send_retired: AtomicU32::new(0),
            recv_posted: AtomicU64::new(0),
            recv_retired: AtomicU64::new(0),
        }
    }

    /// Before receive `seq` is posted: the lkeys of its SGEs (those past
    /// the QP's limit are ignored: the post refuses them).
    #[inline]
    pub(crate) fn note_recv(&self, seq: u64, lkeys: impl Iterator<Item = u32>) {
        let base = (seq & (self.recv_slots - 1)) as usize * self.recv_sges;
        let slot = &self.recv_keys[base..base + self.recv_sges];
        let mut keys = lkeys.fuse();
        for k in slot {
            // Relaxed: the receive is posted (and its count stored) after
            // this, and an MR it names is dropped after that (see `ticket`).
            k.store(keys.next().unwrap_or(0), Ordering::Relaxed);
        }
    }

    /// [`Self::note_recv`] of a receive of one SGE, of `lkey`.
    #[inline(always)]
    pub(crate) fn note_recv1(&self, seq: u64, lkey: u32) {
        let base = (seq & (self.recv_slots - 1)) as usize * self.recv_sges;
        // Relaxed: as `note_recv`'s.
        self.recv_keys[base].store(lkey, Ordering::Relaxed);
        if self.recv_sges > 1 {
            for k in &self.recv_keys[base + 1..base + self.recv_sges] {
                k.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Whether a receive of `from..to` (sequence numbers, outstanding)
    /// names `lkey`.
    fn recvs_name(&self, lkey: u32, from: u64, to: u64) -> bool {
        let n = to.saturating_sub(from).min(self.recv_slots);
        (to - n..to).any(|seq| {
            let base = (seq % self.recv_slots) as usize * self.recv_sges;
            self.recv_keys[base..base + self.recv_sges]
                .iter()
                .any(|k| k.load(Ordering::Relaxed) == lkey)
        })
    }

    /// After a post call: sends posted in all (modulo 2^32).
    #[inline(always)]
    pub(crate) fn sends_posted(&self, n: u32) {
        // Relaxed: a WR can name an MR only while a handle to it lives, and
        // whoever drops the last handle is ordered after this store by the
        // handle's own synchronization (its `Arc`, or a thread join).
        self.send_posted.store(n, Ordering::Relaxed);
    }
    /// After a post call: receives posted in all.
    #[inline(always)]
    pub(crate) fn recvs_posted(&self, n: u64) {
        self.recv_posted.store(n, Ordering::Relaxed);
    }
    /// After a poll (or RESET): sends and receives retired in all. Release:
    /// the device's accesses to the WRs' memory, which the CQEs' acquire
    /// ordered before this, come before any deregistration that reads it.
    #[inline(always)]
    pub(crate) fn retired(&self, sends: u32, recvs: u64) {
        self.send_retired.store(sends, Ordering::Release);
        self.recv_retired.store(recvs, Ordering::Release);
    }
    /// After a poll that retired sends only: sends retired in all (as
    /// [`Self::retired`], the receives' count unchanged).
    #[inline(always)]
    pub(crate) fn sends_retired(&self, sends: u32) {
        self.send_retired.store(sends, Ordering::Release);
    }
    /// After a poll that retired receives only: receives retired in all
    /// (as [`Self::retired`], the sends' count unchanged).
    #[inline(always)]
    pub(crate) fn recvs_retired(&self, recvs: u64) {
        self.recv_retired.store(recvs, Ordering::Release);
    }
    /// The sends and receives retired as last published (by this QP's own
    /// thread: relaxed loads of its own stores), so that a poll can tell
    /// how many it retired.
    #[inline(always)]
    pub(crate) fn retired_published(&self) -> (u32, u64) {
        (
            self.send_retired.load(Ordering::Relaxed),
            self.recv_retired.load(Ordering::Relaxed),
        )
    }
    /// What an MR of `lkey` dropped now waits for on this QP: every send
    /// posted so far, and the receives posted so far if one still
    /// outstanding names it (receives that name other memory, kept posted
    /// by a server, do not hold it).
    pub(crate) fn ticket(&self, lkey: u32) -> PostedAt {
        let send = self.send_posted.load(Ordering::Relaxed);
        let recv = self.recv_posted.load(Ordering::Relaxed);
        let done = self.recv_retired.load(Ordering::Acquire);
        let recv = if done < recv && self.recvs_name(lkey, done, recv) {
            recv
        } else {
            0
        };
        PostedAt { send, recv }
    }

    /// Whether every WR counted in `t` has been retired (sends compared
    /// wrapping: the retired count is at most `max_send_wr` behind the
    /// posted one, so a ticket not yet reached is less than 2^31 ahead; one
    /// reached and then left 2^31 behind reads as not reached, which only
    /// delays a deregistration, and only until the count comes round).
    pub(crate) fn reached(&self, t: PostedAt) -> bool {
        self.send_retired
            .load(Ordering::Acquire)
            .wrapping_sub(t.send) as i32
            >= 0
            && self.recv_retired.load(Ordering::Acquire) >= t.recv
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Send counts wrap at 2^32: a ticket taken just below it is reached
    /// once the retired count has come round past it, and not before.
    #[test]
    fn send_tickets_compare_wrapping() {
        let p = WrProgress::new(1, 1);
        p.sends_posted(u32::MAX - 1);
        p.retired(u32::MAX - 4, 0);
        let t = p.ticket(99);
        assert_eq!(t.send, u32::MAX - 1);
        assert!(!p.reached(t), "3 sends still outstanding");
        p.sends_retired(u32::MAX - 2);
        assert!(!p.reached(t), "1 send still outstanding");
        p.sends_retired(u32::MAX - 1);
        assert!(p.reached(t));
        p.sends_retired(3);
        assert!(p.reached(t), "past the wrap");
    }
}

/// What the owner of a split QP's CQ tells its send half and its receive
/// half ([`crate::Qp::split`]): how far it retired each queue. Each field has
/// one writer, the CQ's owner (a release store after each poll that took
/// CQEs of the QP), and one reader, the half that posts to that queue (one
/// acquire load per post call), so a post does no read-modify-write another
/// thread also does.
#[derive(Debug, Default)]
pub(crate) struct HalfLink {
    /// The send queue: on the direct path the SQ's `tail` (bits 32..64) and
    /// WRs retired modulo 2^32 (bits 0..32, `SendQueue::consumed`); on
    /// verbs the WRs retired.
    pub(crate) sends: AtomicU64,
    /// The receive queue: on the direct path the RQ's `tail`; on verbs the
    /// receives retired.
    pub(crate) recvs: AtomicU64,
    /// A half waits for room (`SendHalf::room`, `RecvHalf::room`): the
    /// next publish wakes it. Looked at by the owner after each publish.
    waiting: std::sync::atomic::AtomicBool,
    /// The wakers of the waiting halves: the send half's, the receive
    /// half's.
    wakers: std::sync::Mutex<[Option<std::task::Waker>; 2]>,
}

impl HalfLink {
    /// The CQ owner's, after a poll: what it retired; then wakes a half
    /// that waits for room.
    #[inline]
    pub(crate) fn publish(&self, sends: u64, recvs: u64) {
        self.sends.store(sends, Ordering::Release);
        self.recvs.store(recvs, Ordering::Release);
        // Against a half that registers, then looks at the counts: one of
        // the two sees the other's store.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.waiting.load(Ordering::Relaxed) {
            self.wake_all();
        }
    }

    /// Wakes every half that waits (a publish, or the owner gone).
    #[cold]
    pub(crate) fn wake_all(&self) {
        let taken = {
            let mut w = self.wakers.lock().unwrap_or_else(|e| e.into_inner());
            self.waiting.store(false, Ordering::Relaxed);
            [w[0].take(), w[1].take()]
        };
        taken.into_iter().flatten().for_each(std::task::Waker::wake);
    }

    /// A half (`which`: 0 send, 1 receive) that found no room registers
    /// `waker`; it then looks at the counts again (the fence pairs with
    /// `publish`'s), and sleeps only if there is still no room.
    pub(crate) fn register(&self, which: usize, waker: &std::task::Waker) {
        {
            let mut w = self.wakers.lock().unwrap_or_else(|e| e.into_inner());
            match &w[which] {
                Some(old) if old.will_wake(waker) => {}
                _ => w[which] = Some(waker.clone()),
            }
            self.waiting.store(true, Ordering::Relaxed);
        }
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// The send half's, before a post.
    #[inline(always)]
    pub(crate) fn sends(&self) -> u64 {
        self.sends.load(Ordering::Acquire)
    }

    /// The receive half's, before a post.
    #[inline(always)]
    pub(crate) fn recvs(&self) -> u64 {
        self.recvs.load(Ordering::Acquire)
    }
}
