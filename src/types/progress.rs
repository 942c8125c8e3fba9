//! How far a QP's work requests have got: counts of WRs posted and retired,
//! which its PD reads to know when a dropped MR can no longer be named by
//! an outstanding WR (see [`super::mr`]). No per-WR counting: each count is
//! one plain store per post call (release per poll call that retired
//! something), read only by the PD's deregistration bookkeeping.

use std::sync::atomic::{AtomicU64, Ordering};

/// WRs posted and retired on one QP since it was created (monotonic: a
/// RESET retires every outstanding WR, it does not rewind).
#[derive(Default, Debug)]
pub(crate) struct WrProgress {
    send_posted: AtomicU64,
    send_retired: AtomicU64,
    recv_posted: AtomicU64,
    recv_retired: AtomicU64,
}

/// The posted counts of one QP when an MR's last handle went: the MR may be
/// deregistered once that QP has retired that many.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ticket {
    send: u64,
    recv: u64,
}

impl WrProgress {
    /// After a post call: sends posted in all.
    #[inline(always)]
    pub(crate) fn sends_posted(&self, n: u64) {
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
    pub(crate) fn retired(&self, sends: u64, recvs: u64) {
        self.send_retired.store(sends, Ordering::Release);
        self.recv_retired.store(recvs, Ordering::Release);
    }
    /// What has been posted so far.
    pub(crate) fn ticket(&self) -> Ticket {
        Ticket {
            send: self.send_posted.load(Ordering::Relaxed),
            recv: self.recv_posted.load(Ordering::Relaxed),
        }
    }
    /// Whether every WR counted in `t` has been retired.
    pub(crate) fn reached(&self, t: Ticket) -> bool {
        self.send_retired.load(Ordering::Acquire) >= t.send
            && self.recv_retired.load(Ordering::Acquire) >= t.recv
    }
}
