//! Buffers that moved into a QP with their WRs ([`LocalMr`]s posted by
//! value), kept until the WRs are retired and then handed back in WR order.
//!
//! A slot per WR sequence number (modulo the queue's WR limit), written
//! only by an owned post. Polling does nothing here: the buffers of retired
//! WRs are found when the caller asks for them (`Qp::take_send_buf`,
//! `Qp::take_recv_buf`), from the WR counts the backend keeps anyway.

use crate::ib::mr::LocalMr;

struct Held {
    seq: u64,
    wr_id: u64,
    buf: LocalMr,
}

/// One queue's held buffers.
pub(crate) struct HeldQueue {
    slots: Box<[Option<Held>]>,
    /// The lowest sequence number that may still hold a buffer.
    next: u64,
    /// Slots in use.
    held: usize,
}

impl HeldQueue {
    pub(crate) fn new(cap: u32) -> Self {
        HeldQueue {
            slots: (0..cap.max(1)).map(|_| None).collect(),
            next: 0,
            held: 0,
        }
    }

    fn at(&self, seq: u64) -> usize {
        (seq % self.slots.len() as u64) as usize
    }

    /// Slots: the queue's WR limit.
    pub(crate) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The WR whose buffer holds WR `seq`'s slot (`None`: free).
    pub(crate) fn occupant(&self, seq: u64) -> Option<u64> {
        self.slots[self.at(seq)].as_ref().map(|h| h.seq)
    }

    /// Keeps `buf` for WR `seq` (its slot is free: see [`Self::occupant`]).
    pub(crate) fn put(&mut self, seq: u64, wr_id: u64, buf: LocalMr) {
        let i = self.at(seq);
        debug_assert!(self.slots[i].is_none());
        self.slots[i] = Some(Held { seq, wr_id, buf });
        self.held += 1;
    }

    /// The buffer of the oldest retired WR (sequence below `retired`) not yet
    /// handed back, with that WR's wr_id.
    pub(crate) fn take(&mut self, retired: u64) -> Option<(u64, LocalMr)> {
        if self.held == 0 {
            self.next = self.next.max(retired);
            return None;
        }
        let cap = self.slots.len() as u64;
        let seq = if retired.saturating_sub(self.next) <= cap {
            (self.next..retired)
                .find(|&s| self.slots[self.at(s)].as_ref().is_some_and(|h| h.seq == s))
        } else {
            // Far behind (many WRs without buffers went by): the oldest held.
            self.slots
                .iter()
                .flatten()
                .map(|h| h.seq)
                .filter(|&s| s < retired)
                .min()
        };
        let Some(seq) = seq else {
            self.next = self.next.max(retired);
            return None;
        };
        let i = self.at(seq);
        let h = self.slots[i].take().expect("found above");
        self.held -= 1;
        self.next = seq + 1;
        Some((h.wr_id, h.buf))
    }
}

/// A QP's held send and receive buffers.
pub(crate) struct Owned {
    pub(crate) send: HeldQueue,
    pub(crate) recv: HeldQueue,
}
