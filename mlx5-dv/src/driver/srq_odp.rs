//! ODP page faults on an SRQ (the policy: `srq.rs`'s module docs): a
//! poller's [`SrqSlots::fault`], and the poster's reposts at its relink.

use super::{SharedReceiveQueue, SrqSlots, FAULTED, HELD};
use crate::wqe::{decode_srq_next_seg, SRQ_NEXT_SEG};
use core::sync::atomic::Ordering;

impl SrqSlots {
    /// A poller met an ODP page-fault CQE ([`crate::cqe::Cqe::is_odp_fault`])
    /// naming WQE `idx`: called instead of [`Self::complete`], it reports
    /// nothing, marks the WQE faulted and queues it, lock-free, as
    /// `complete` does, for the poster to repost with the same wr_id and
    /// SGEs at its next relink ([`SharedReceiveQueue::repost_faulted`], the
    /// next [`SharedReceiveQueue::post`]; module docs). `false` for an index
    /// that names no WQE the device holds (out of range, never posted,
    /// completed or faulted already). The error path only: a CAS loop and
    /// two `fetch_add`s.
    #[cold]
    pub fn fault(&self, idx: u16) -> bool {
        let Some(slot) = self.slots.get(idx as usize) else {
            return false;
        };
        let mut cur = slot.state.load(Ordering::Acquire);
        loop {
            if cur & HELD == 0 {
                return false;
            }
            // AcqRel: as `complete_with`'s; the poster reads FAULTED
            // after the return queue's word, stored below with release.
            match slot.state.compare_exchange_weak(
                cur,
                cur & !HELD | FAULTED,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        // Counted before the word is queued: a relink that takes the word
        // sees the count (its acquire of the word), and walks for it.
        self.faults.fetch_add(1, Ordering::Relaxed);
        let word = (idx as u64 * self.stride_at16) | self.word_bits | idx.to_be() as u64;
        let at = self.returned_at.fetch_add(1, Ordering::AcqRel);
        self.returned[(at & self.returned_mask) as usize].store(word, Ordering::Release);
        true
    }

    /// WQEs given back as faulted so far ([`Self::fault`]), modulo 2^32.
    pub fn faults(&self) -> u32 {
        self.faults.load(Ordering::Relaxed) as u32
    }
}

impl SharedReceiveQueue {
    /// Reposts now every WQE a poller gave back as faulted
    /// ([`SrqSlots::fault`]) and queued: each with its wr_id and SGEs, the
    /// doorbell rung (its record counts each repost as a post); returns how
    /// many. [`Self::post`], [`Self::check`], [`Self::free`] and
    /// [`Self::refill`] do it too (they relink); [`Self::post_one_seg`]
    /// does not (its fast path tests nothing more).
    pub fn repost_faulted(&mut self) -> u32 {
        let before = self.reposted;
        self.relink();
        self.reposted.wrapping_sub(before) as u32
    }

    /// WQEs given back as faulted and not reposted yet (the device does not
    /// hold them; [`Self::outstanding`] does not count them).
    pub fn faulted(&self) -> u32 {
        (self.slots.faults.load(Ordering::Relaxed) as u32).wrapping_sub(self.reposted as u32)
    }

    /// Reposts the faulted WQEs among those the relink just linked after
    /// `old_tail`, in list order: each one's data segments (the ring still
    /// holds them: the device writes no receive WQE) copied into the head
    /// WQE, which takes its wr_id and lkeys, as rdma-core's `srq_repost`
    /// does; then the doorbell. In list order, no copy overwrites a faulted
    /// WQE not yet reposted: the `j`-th repost writes the free list's
    /// `j`-th WQE from the head, and the `j`-th faulted WQE lies past it
    /// (behind every WQE free before the relink and the `j - 1` faulted
    /// ones before it). A faulted WQE already at the head is reposted in
    /// place.
    #[cold]
    #[inline(never)]
    pub(super) fn repost_from(&mut self, old_tail: u32) {
        let stride = self.stride as usize;
        let mut at = old_tail;
        let before = self.reposted;
        while at != self.tail {
            let next = self.buf.read_seg(at as usize * stride);
            at = decode_srq_next_seg(&next) as u32 & self.wqe_mask;
            let slot = &self.slots.slots[at as usize];
            let state = slot.state.load(Ordering::Acquire);
            if state & FAULTED == 0 {
                continue;
            }
            let wr_id = slot.wr_id.load(Ordering::Relaxed);
            let head = self.head;
            if head != at {
                for k in (SRQ_NEXT_SEG..stride).step_by(crate::prm::DS) {
                    let seg = self.buf.read_seg(at as usize * stride + k);
                    self.buf.write_seg(head as usize * stride + k, &seg);
                }
            }
            // Its lkeys, read from its slot as the head's are written (the
            // same slot, in place, when the head is the faulted WQE).
            let slots: &SrqSlots = &self.slots;
            let more = slots.max_sge - 1;
            let i = at as usize * more;
            let lkeys = core::iter::once(state as u32)
                .chain(
                    slots.more_lkeys[i..i + more]
                        .iter()
                        .map(|k| k.load(Ordering::Relaxed)),
                )
                .take((state >> 32 & 0xffff) as usize);
            slots.give(head, wr_id, lkeys);
            // Cleared only now, after the head names its lkeys: in between,
            // `SrqSlots::names` (an MR's reclaim, on any thread) sees them
            // on one slot or both, never on none. In place, `give` wrote
            // the whole word, FAULTED gone.
            if head != at {
                slot.state
                    .store(state & !(FAULTED | HELD), Ordering::Release);
            }
            self.head = decode_srq_next_seg(&self.buf.read_seg(head as usize * stride)) as u32;
            self.free -= 1;
            self.counter = self.counter.wrapping_add(1);
            self.reposted = self.reposted.wrapping_add(1);
        }
        if self.reposted != before {
            self.write_dbrec();
        }
    }
}
