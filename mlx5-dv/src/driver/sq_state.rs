//! The send queue's state apart from posting: the in-place posts' gates,
//! the WR counts, the split copy and its window, RESET, and the test
//! hooks' views of it.

use super::sq::SendQueue;
use crate::doorbell::QP_DBREC_SQ;
use crate::mmio;
use crate::ring::RingBuf;
use core::ptr::NonNull;

impl SendQueue {
    /// Opens (or closes) the gate of [`Self::write_segs_gated`]: while it is
    /// closed every gated post is refused, so that its owner need not check
    /// a mode of its own on each post. It stays closed, whatever `open`,
    /// when the room check is not implied by the WR limit.
    pub fn set_gate(&mut self, open: bool) {
        self.gate_open = open;
        self.gate = if open && self.room_implied {
            self.max_post
        } else {
            0
        };
    }

    /// Opens (or closes) the gate of the in-place UD SENDs
    /// ([`Self::ud_room`]), as [`Self::set_gate`] does theirs. It stays
    /// closed, whatever `open`, when the room check is not implied by the
    /// WR limit, when the queue's largest WQE is one WQEBB (a UD SEND takes
    /// two), or when the BlueFlame register holds less than two WQEBBs (its
    /// doorbell copies both).
    pub fn set_ud_gate(&mut self, open: bool) {
        self.ud_gate_open = open;
        self.ud_gate = self.two_wqebb_gate(open);
    }

    /// Opens (or closes) the gate of the in-place DC posts
    /// ([`Self::dc_room`]): as [`Self::set_ud_gate`]'s, on its own, so that
    /// a DCI's open gate never lets a UD SEND in, nor a UD QP's a DC WQE.
    pub fn set_dc_gate(&mut self, open: bool) {
        self.dc_gate_open = open;
        self.dc_gate = self.two_wqebb_gate(open);
    }

    /// The WR limit of a two-WQEBB gate: `max_post` when `open` and the
    /// room check is implied, a WQE may take two WQEBBs and the BlueFlame
    /// register holds two; else 0.
    fn two_wqebb_gate(&self, open: bool) -> u32 {
        if open
            && self.room_implied
            && self.geo.max_wqebbs >= 2
            && self.bf_size >= 2 * crate::prm::WQEBB as u32
        {
            self.max_post
        } else {
            0
        }
    }

    /// WRs posted since the queue was made, modulo 2^32 (a reset does
    /// not rewind it).
    #[inline(always)]
    pub fn posted_count(&self) -> u32 {
        self.posted
    }

    /// WRs retired since the queue was made, modulo 2^32: at most
    /// `max_post` behind [`Self::posted_count`] (a reset retires them all).
    #[inline(always)]
    pub fn retired_count(&self) -> u32 {
        self.retired
    }

    /// A second copy of this queue, for a QP split into a send half and a
    /// receive half: the same ring, doorbell record, BlueFlame registers
    /// and slot table (`Table`), with its own copy of the indices. One
    /// copy then posts (the send half's) and the other only retires (the
    /// CQ owner's, between [`Self::open_window`] and
    /// [`Self::close_window`]); each learns what the other did through
    /// [`Self::consumed`] / [`Self::set_consumed`], which its owner passes
    /// over an atomic (release store, acquire load).
    ///
    /// # Safety
    /// The copies keep to those roles: only one of them posts or rings,
    /// and neither resets, while both live; the rings stay valid until both
    /// are dropped (`new`'s contract, for both).
    pub unsafe fn split_copy(&self) -> SendQueue {
        SendQueue {
            // SAFETY: the same ring as `self.buf` (the caller's contract
            // keeps it valid and says who writes it).
            buf: unsafe {
                RingBuf::from_raw(NonNull::new_unchecked(self.buf.as_ptr()), self.buf.len())
            },
            geo: self.geo,
            // SAFETY: the caller's contract orders the copies' accesses.
            slots: unsafe { self.slots.share() },
            gate_open: self.gate_open,
            // (A queue with no ring is never split: its copy would point
            // into memory the original owns.)
            own: None,
            ..*self
        }
    }

    /// The consumer side's indices, packed for one atomic store: the
    /// oldest outstanding WQE index (`tail`) in bits 32..64, the WRs
    /// retired (modulo 2^32) in bits 0..32.
    #[inline(always)]
    pub fn consumed(&self) -> u64 {
        (self.tail as u64) << 32 | self.retired as u64
    }

    /// Takes the consumer side's indices from the copy that retires
    /// ([`Self::consumed`]): the room a post sees.
    #[inline(always)]
    pub fn set_consumed(&mut self, v: u64) {
        self.tail = (v >> 32) as u32;
        self.retired = v as u32;
    }

    /// On the copy that only retires: every WQE index of the ring's width
    /// from `tail` on may be named by a CQE (the posting copy's producer
    /// index is not known here; a CQE names only WQEs whose doorbell rang,
    /// whose slots were written before it).
    #[inline]
    pub fn open_window(&mut self) {
        self.pi = self.tail.wrapping_add(self.geo.wqe_cnt);
        self.posted = self.retired.wrapping_add(self.max_post);
    }

    /// On the copy that only retires: no WQE outstanding, so that no
    /// completion is taken outside [`Self::open_window`].
    #[inline]
    pub fn close_window(&mut self) {
        self.pi = self.tail;
        self.posted = self.retired;
    }

    /// The host side of moving the QP to RESET (after `ibv_modify_qp` to
    /// RESET, as rdma-core's `mlx5_modify_qp` does): the SQ doorbell record,
    /// producer and consumer indices, BlueFlame offset and every outstanding
    /// WR are forgotten. Outstanding WRs produce no completion after this.
    pub fn reset(&mut self) {
        self.pi = 0;
        self.tail = 0;
        self.batch_start = self.no_bf;
        self.batch_last = 0;
        self.bf_offset = 0;
        self.last_signaled = self.posted.wrapping_sub(1);
        self.retired = self.posted;
        if !self.fence_next.is_empty() {
            // No UMR is outstanding after RESET: nothing to fence behind.
            self.take_fence(crate::prm::CtrlFlags::empty());
        }
        // SAFETY: `dbrec` is the QP's live doorbell record (`new`'s contract).
        unsafe { mmio::write_dbrec(self.dbrec.add(QP_DBREC_SQ), 0) };
    }

    /// Test hook (feature `test-hooks`): moves an idle queue's producer
    /// and consumer indices to `pi`, as if `pi` WQEBBs had been posted and
    /// retired since RESET, so that tests reach the indices a long-lived QP
    /// does (the ctrl segment's 16-bit `wqe_idx` and the doorbell record
    /// wrapping at 2^16, the 32-bit index at 2^32) without posting 2^32
    /// WQEs. Nothing is written to the ring or the doorbell record.
    /// Returns `false`, changing nothing, while a WR is outstanding.
    #[cfg(feature = "test-hooks")]
    pub fn start_at(&mut self, pi: u32) -> bool {
        if self.outstanding() != 0 {
            return false;
        }
        self.pi = pi;
        self.tail = pi;
        self.batch_start = pi as u64 | self.no_bf;
        self.batch_last = pi;
        true
    }

    /// A copy of the whole SQ ring followed by the SQ doorbell record (4
    /// bytes, big-endian as the device reads it), for tests and tools that
    /// show a refused post wrote nothing. Allocates; not for the hot path.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.buf.len() + 4];
        let n = self.buf.len();
        self.buf.read_wrapping(0, &mut v[..n]);
        // SAFETY: `dbrec` is the QP's live doorbell record (`new`'s contract);
        // word QP_DBREC_SQ is the SQ's.
        let db = unsafe { mmio::read_dbrec(self.dbrec.add(QP_DBREC_SQ)) };
        v[n..].copy_from_slice(&db.to_be_bytes());
        v
    }
}
