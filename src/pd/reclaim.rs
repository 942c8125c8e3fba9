//! Deregistration of dropped [`Mr`](crate::Mr)s: a PD's deferred deregistration.
//!
//! When an `Mr`'s last handle goes, a WR posted earlier may still name it
//! (borrowed SGEs hold no reference). Rather than count references per WR,
//! each QP of the PD publishes how many WRs it has posted and retired
//! ([`WrProgress`]); the dropped MR waits here with a [`PostedAt`] per QP that
//! had WRs outstanding, and is deregistered (and its memory freed) once
//! every such QP has retired them, or is gone.
//!
//! The waiting MRs are looked at off the post/poll path: when an `Mr` is
//! dropped, at each registration on the PD, in [`Pd::reclaim`](crate::Pd::reclaim),
//! when a QP of the PD moves to RESET, and when one is destroyed.

use crate::ib::mr::{DeferredDereg, MrInner};
use crate::ib::progress::{PostedAt, WrProgress};
use mlx5_dv::driver::SrqSlots;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// A dropped MR and the QPs whose outstanding WRs may still name it; and
/// the SRQs where a WQE the device holds named it when it was dropped.
struct DroppedMr {
    lkey: u32,
    /// Deregistered when the dropped MR is dropped.
    _mr: MrInner,
    waits: Vec<(Weak<WrProgress>, PostedAt)>,
    srq_waits: Vec<Weak<SrqSlots>>,
}

impl DroppedMr {
    fn ready(&self) -> bool {
        self.waits
            .iter()
            .all(|(q, t)| q.upgrade().is_none_or(|p| p.reached(*t)))
            // No new WQE can name the MR once it was dropped: it is free of
            // an SRQ once no WQE the device holds there names it.
            && self
                .srq_waits
                .iter()
                .all(|s| s.upgrade().is_none_or(|s| !s.names(self.lkey)))
    }
}

#[derive(Default)]
struct State {
    dropped: Vec<DroppedMr>,
    /// Every QP of the PD (dead ones are pruned at each sweep).
    qps: Vec<Weak<WrProgress>>,
    /// Every SRQ of the PD: the WQEs its device holds.
    srqs: Vec<Weak<SrqSlots>>,
}

/// One PD's dropped MRs and its QPs' progress.
#[derive(Default)]
pub(crate) struct DeregQueue {
    state: Mutex<State>,
    /// Registrations of the PD that are live (not yet deregistered):
    /// [`Pd::live_mrs`](crate::Pd::live_mrs).
    pub(crate) live: Arc<AtomicU64>,
}

impl DeregQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new QP of the PD: its progress is looked at when MRs are dropped.
    pub(crate) fn add_qp(&self, p: &Arc<WrProgress>) {
        let mut st = self.lock();
        st.qps.retain(|q| q.strong_count() > 0);
        st.qps.push(Arc::downgrade(p));
    }

    /// A new SRQ of the PD: its held WQEs are looked at when MRs are dropped.
    pub(crate) fn add_srq(&self, s: &Arc<SrqSlots>) {
        let mut st = self.lock();
        st.srqs.retain(|q| q.strong_count() > 0);
        st.srqs.push(Arc::downgrade(s));
    }

    /// Deregisters every waiting MR no outstanding WR can name any more;
    /// returns how many still wait.
    pub(crate) fn sweep(&self) -> usize {
        let freed;
        let left;
        {
            let mut st = self.lock();
            st.qps.retain(|q| q.strong_count() > 0);
            st.srqs.retain(|q| q.strong_count() > 0);
            let (ready, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut st.dropped)
                .into_iter()
                .partition(DroppedMr::ready);
            st.dropped = wait;
            left = st.dropped.len();
            freed = ready;
        }
        // Deregistration (a system call on verbs, the sim's lock) runs
        // outside this lock.
        drop(freed);
        left
    }

    pub(crate) fn live(&self) -> u64 {
        self.live.load(Ordering::Relaxed)
    }
}

impl DeferredDereg for DeregQueue {
    fn defer(&self, mr: MrInner) {
        let now = {
            let mut st = self.lock();
            let waits: Vec<_> = st
                .qps
                .iter()
                .filter_map(|q| {
                    let p = q.upgrade()?;
                    let t = p.ticket(mr.lkey);
                    (!p.reached(t)).then(|| (q.clone(), t))
                })
                .collect();
            let srq_waits: Vec<_> = st
                .srqs
                .iter()
                .filter(|s| s.upgrade().is_some_and(|s| s.names(mr.lkey)))
                .cloned()
                .collect();
            if waits.is_empty() && srq_waits.is_empty() {
                Some(mr)
            } else {
                st.dropped.push(DroppedMr {
                    lkey: mr.lkey,
                    _mr: mr,
                    waits,
                    srq_waits,
                });
                None
            }
        };
        drop(now);
        self.sweep();
    }

    fn idle_for(&self, lkey: u32) -> bool {
        let st = self.lock();
        st.qps
            .iter()
            .filter_map(Weak::upgrade)
            .all(|p| p.reached(p.ticket(lkey)))
            && st
                .srqs
                .iter()
                .filter_map(Weak::upgrade)
                .all(|s| !s.names(lkey))
    }
}
