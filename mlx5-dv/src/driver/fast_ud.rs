//! UD SENDs built in place: [`SendQueue::post_ud`] (its checks, then the
//! doorbell) and [`SendQueue::ud_room`] (one check, the gate's; then
//! [`UdRoom`]'s steps and [`WrittenUd::ring`]). The WQE is the ctrl
//! segment, the 48-byte datagram segment (the AH's AV with the remote QPN
//! and qkey patched in, as rdma-core's `set_datagram_seg`), which fills the
//! first WQEBB, and one data segment at the start of the second: 5 DS, 2
//! WQEBBs. The bytes are
//! exactly what [`SendQueue::post`] writes for the same WR
//! (`driver/fast_tests.rs` checks it).

use super::sq::{SendQueue, Slot};
use crate::prm::{CtrlFlags, WqeOpcode, WQEBB};
use crate::wqe::{ctrl_stored, put_stored, CtrlQpn, Seg, WqeError, DATAGRAM_SEG};

/// A UD WQE (two WQEBBs) written and counted in its queue, which it
/// borrows, not yet rung ([`UdRoom::finish`];
/// [`WrittenUd::ring`]). Dropped without a ring, the WQE stays posted and
/// the queue's next doorbell publishes it.
#[must_use = "a WQE written is rung by WrittenUd::ring"]
pub struct WrittenUd<'q> {
    pub(super) sq: &'q mut SendQueue,
    pub(super) pi: u32,
    pub(super) wqe: *mut u8,
    pub(super) second: *mut u8,
}

impl WrittenUd<'_> {
    /// Sends posted in all on the queue, this one included, modulo 2^32
    /// ([`SendQueue::posted_count`]).
    #[inline(always)]
    pub fn posted_count(&self) -> u32 {
        self.sq.posted
    }

    /// The doorbell: the doorbell record and the BlueFlame copy of both
    /// WQEBBs, with no call ([`SendQueue::ud_room`] opens only when the
    /// doorbell is a BlueFlame copy, and the room held the queue since).
    #[inline(always)]
    pub fn ring(self) {
        let WrittenUd {
            sq,
            pi,
            wqe,
            second,
        } = self;
        debug_assert!(sq.batch_start == pi as u64);
        // SAFETY: `wqe` and `second` are WQE `pi`'s WQEBBs in `sq`'s ring
        // (`ud_room`, or `dc_room` for a DC WQE), borrowed with `sq` since;
        // either gate is open only with `bf_size >= 128` (`set_ud_gate`,
        // `set_dc_gate`).
        unsafe { sq.ring_bf_two(wqe, second, pi.wrapping_add(2)) };
    }
}

/// Room for one UD WQE (two WQEBBs) at the producer index, past the UD
/// gate ([`SendQueue::ud_room`]), filled in order: [`Self::datagram`] and
/// [`Self::data`] (the segments, in any order), then [`Self::finish`] (the
/// ctrl segment and the slot, and the indices). Dropped unfinished, it
/// posts nothing: what its steps wrote stays in free WQEBBs, past the
/// doorbell record (the device reads none of it), for the next post to
/// overwrite.
#[must_use = "room is posted by UdRoom::finish"]
pub struct UdRoom<'q> {
    sq: &'q mut SendQueue,
    pi: u32,
    slot: u32,
    wqe: *mut u8,
    second: *mut u8,
}

impl SendQueue {
    /// Room for [`Self::post_ud`]'s WQE when the UD gate is open
    /// ([`Self::set_ud_gate`]) and fewer than `max_post` WRs are
    /// outstanding (one compare: an open gate means the room check is
    /// implied, and the WQE's two WQEBBs within the queue's largest), and
    /// its doorbell is a BlueFlame copy (nothing posted since the last
    /// doorbell; the queue rings from registers, tracing off): so that
    /// [`WrittenUd::ring`] makes no call. `None` otherwise (then
    /// [`Self::post_ud`] posts it).
    /// The caller fills the room in three steps ([`UdRoom`]), so that each
    /// WR field is read where it is stored.
    #[inline(always)]
    pub fn ud_room(&mut self) -> Option<UdRoom<'_>> {
        let pi = self.pi;
        if self.posted.wrapping_sub(self.retired) >= self.ud_gate || !self.bf_ready() {
            return None;
        }
        let ring = self.buf.as_ptr();
        let mask = self.slot_mask;
        let slot = pi & mask;
        // SAFETY: both indices are masked below `wqe_cnt`, so each 64-byte
        // WQEBB lies inside the ring (`new`).
        let (wqe, second) = unsafe {
            (
                ring.add(slot as usize * WQEBB),
                ring.add((pi.wrapping_add(1) & mask) as usize * WQEBB),
            )
        };
        Some(UdRoom {
            sq: self,
            pi,
            slot,
            wqe,
            second,
        })
    }
}

impl<'q> UdRoom<'q> {
    /// The datagram segment: the AH's AV `av` with `qkey` at byte 0 and
    /// `remote_qpn | MLX5_EXTENDED_UD_AV` at byte 8 (rdma-core's
    /// `set_datagram_seg`), bytes 16..64 of the first WQEBB.
    #[inline(always)]
    pub fn datagram(&mut self, av: &[u8; DATAGRAM_SEG], remote_qpn: u32, qkey: u32) {
        // SAFETY: both WQEBBs are free (the open gate: `room_implied`, and
        // fewer than `max_post` WRs outstanding) and ours; bytes 16..64 of
        // the first are inside it, apart from `av`.
        unsafe { crate::wqe::write_datagram(self.wqe.add(16), av, remote_qpn, qkey) };
    }

    /// The data segment, the second WQEBB's first 16 bytes.
    #[inline(always)]
    pub fn data(&mut self, data: Seg) {
        // SAFETY: as in `datagram`: the second WQEBB is free and ours.
        unsafe { data.write(self.second) };
    }

    /// The ctrl segment (`opcode`, `flags` with auto-signal, `imm`, 5 DS)
    /// and the slot (`wr_id`, two WQEBBs); the WR is then posted, not yet
    /// rung: [`WrittenUd::ring`] rings it.
    #[inline(always)]
    pub fn finish(
        self,
        opcode: WqeOpcode,
        flags: CtrlFlags,
        imm: u32,
        wr_id: u64,
    ) -> WrittenUd<'q> {
        let UdRoom {
            sq,
            pi,
            slot,
            wqe,
            second,
        } = self;
        let posted = sq.posted;
        // A signaled WR has its own copy of the rest, as in
        // `write_segs_unchecked`.
        let (flags, forced) = if flags.contains(CtrlFlags::CQ_UPDATE) {
            sq.last_signaled = posted;
            (flags, false)
        } else {
            sq.auto_signal(flags)
        };
        let ctrl = ctrl_stored(opcode, pi, CtrlQpn::Word(sq.qpn_word), 5, flags, imm);
        // SAFETY: `wqe` is the first WQEBB, free and ours (`ud_room`);
        // `slots` has `wqe_cnt` entries, `slot` masked below it.
        unsafe {
            put_stored(wqe, ctrl);
            Slot::store(sq.slots.ptr().add(slot as usize), wr_id, posted, 2, forced);
        }
        sq.posted = posted.wrapping_add(1);
        sq.pi = pi.wrapping_add(2);
        WrittenUd {
            sq,
            pi,
            wqe,
            second,
        }
    }
}

impl SendQueue {
    /// Posts a UD SEND (or SEND_IMM) of one data segment, built in place:
    /// the ctrl segment, the 48-byte datagram segment (`av`, the AH's AV,
    /// with `qkey` at byte 0 and `remote_qpn | MLX5_EXTENDED_UD_AV` at byte
    /// 8 patched in, as rdma-core's `set_datagram_seg`), which fills the
    /// first WQEBB, and `data` at the start of the second (5 DS, 2 WQEBBs,
    /// continuing at the ring's start past its end). Then the doorbell, with
    /// a BlueFlame copy of both WQEBBs when it is the only WQE since the last
    /// doorbell and they fit the register ([`Self::post_segs`]).
    ///
    /// Errors, with nothing written: [`WqeError::WrLimit`],
    /// [`WqeError::QueueFull`], [`WqeError::TooBig`] on a queue whose
    /// largest WQE is one WQEBB.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn post_ud(
        &mut self,
        opcode: WqeOpcode,
        flags: CtrlFlags,
        imm: u32,
        av: &[u8; crate::wqe::DATAGRAM_SEG],
        remote_qpn: u32,
        qkey: u32,
        data: Seg,
        wr_id: u64,
    ) -> Result<(), WqeError> {
        const WQEBBS: u32 = 2;
        let (pi, posted) = (self.pi, self.posted);
        if self.max_post == posted.wrapping_sub(self.retired) {
            return Err(self.wr_limit());
        }
        if self.geo.max_wqebbs < WQEBBS {
            return Err(WqeError::TooBig {
                wqebbs: WQEBBS,
                max: self.geo.max_wqebbs,
            });
        }
        if !self.room_implied && WQEBBS > self.free_wqebbs() {
            return Err(WqeError::QueueFull {
                need: WQEBBS,
                free: self.free_wqebbs(),
            });
        }
        let ring = self.buf.as_ptr();
        let slot = pi & self.slot_mask;
        let second = pi.wrapping_add(1) & self.slot_mask;
        // SAFETY: both WQEBBs are free (checked above: `room_implied`, or
        // the free count) and the ring's (`new`); each index is masked
        // below `wqe_cnt`, so each 64-byte WQEBB lies inside the ring (the
        // datagram segment, bytes 16..64 of the first, apart from `av`).
        unsafe {
            let wqe = ring.add(slot as usize * WQEBB);
            crate::wqe::write_datagram(wqe.add(16), av, remote_qpn, qkey);
            data.write(ring.add(second as usize * WQEBB));
        }
        let (flags, forced) = self.auto_signal(flags);
        let ctrl = ctrl_stored(opcode, pi, CtrlQpn::Word(self.qpn_word), 5, flags, imm);
        // SAFETY: as above; `slots` has `wqe_cnt` entries, `slot` masked below it.
        unsafe {
            put_stored(ring.add(slot as usize * WQEBB), ctrl);
            Slot::store(
                self.slots.ptr().add(slot as usize),
                wr_id,
                posted,
                WQEBBS,
                forced,
            );
        }
        self.posted = posted.wrapping_add(1);
        self.batch_last = pi;
        self.pi = pi.wrapping_add(WQEBBS);
        if self.batch_start != pi as u64
            || (WQEBBS * WQEBB as u32) > self.bf_size
            || crate::trace::in_capture()
        {
            self.ring_doorbell();
            return Ok(());
        }
        self.ring_bf(pi, WQEBBS);
        Ok(())
    }
}
