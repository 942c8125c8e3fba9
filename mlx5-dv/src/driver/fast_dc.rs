//! DC WQEs of one SGE built in place, on a DCI: [`SendQueue::post_dc`]
//! (its checks, then the doorbell) and [`SendQueue::dc_room`] (one check,
//! the two-WQEBB gate's; then [`DcRoom`]'s steps and [`WrittenDc::ring`]).
//! The WQE is the ctrl segment, the 48-byte datagram segment (the AH's AV
//! with `dqp_dct |= dctn | MLX5_EXTENDED_UD_AV` and the 8-byte DC access
//! key patched in, as rdma-core's `mlx5_send_wr_set_dc_addr`), which fills
//! the first WQEBB, then the operation's segments at the start of the
//! second: the remote-address segment (RDMA WRITE, WRITE_IMM, READ) and
//! one data segment. 6 DS (5 for a SEND), 2 WQEBBs. The bytes are exactly
//! what [`SendQueue::post`] writes for the same WR with
//! [`crate::wqe::Datagram::Dc`] (`driver/fast_dc_tests.rs` checks it).

use super::fast_ud::WrittenUd;
use super::sq::{SendQueue, Slot};
use crate::prm::{CtrlFlags, WqeOpcode, WQEBB};
use crate::wqe::{ctrl_stored, put_stored, CtrlQpn, Seg, WqeError, DATAGRAM_SEG};

/// The opcodes the in-place DC posts take, and whether each has a
/// remote-address segment: `Some(true)` for RDMA WRITE, WRITE_IMM and
/// READ, `Some(false)` for SEND and SEND_IMM, `None` for the rest (atomics
/// and NOP go through [`SendQueue::post`]).
#[inline(always)]
const fn dc_raddr(opcode: WqeOpcode) -> Option<bool> {
    match opcode {
        WqeOpcode::RDMA_WRITE | WqeOpcode::RDMA_WRITE_IMM | WqeOpcode::RDMA_READ => Some(true),
        WqeOpcode::SEND | WqeOpcode::SEND_IMM => Some(false),
        _ => None,
    }
}

/// A DC WQE (two WQEBBs) written and counted in its queue, not yet rung
/// ([`DcRoom::finish`]): the same as a UD one, rung the same way
/// ([`WrittenUd::ring`]: the doorbell record and a BlueFlame copy of both
/// WQEBBs; the DC gate, as the UD gate, opens only with `bf_size >= 128`).
pub type WrittenDc<'q> = WrittenUd<'q>;

/// Room for one DC WQE (two WQEBBs) at the producer index, past the
/// two-WQEBB gate ([`SendQueue::dc_room`]), filled in order:
/// [`Self::datagram`], [`Self::raddr`] (RDMA WRITE, WRITE_IMM, READ) and
/// [`Self::data`] (the segments, in any order), then [`Self::finish`] (the
/// ctrl segment and the slot, and the indices). Dropped unfinished, it
/// posts nothing: what its steps wrote stays in free WQEBBs, past the
/// doorbell record (the device reads none of it), for the next post to
/// overwrite.
#[must_use = "room is posted by DcRoom::finish"]
pub struct DcRoom<'q> {
    sq: &'q mut SendQueue,
    pi: u32,
    slot: u32,
    wqe: *mut u8,
    second: *mut u8,
}

impl SendQueue {
    /// Room for [`Self::post_dc`]'s WQE when the DC gate is open
    /// ([`Self::set_dc_gate`]: the UD gate's conditions, on its own, as a DC
    /// WQE takes two WQEBBs and rings them through BlueFlame as a UD one) and
    /// fewer than `max_post` WRs are outstanding (one compare: an open gate
    /// means the room check is implied, and the WQE's two WQEBBs within
    /// the queue's largest), and its doorbell is a BlueFlame copy (nothing
    /// posted since the last doorbell; the queue rings from registers,
    /// tracing off): so that [`WrittenDc::ring`] makes no call. `None`,
    /// with nothing written, otherwise (then [`Self::post_dc`] posts it).
    /// The caller fills the room in steps ([`DcRoom`]), so that each WR
    /// field is read where it is stored.
    #[inline(always)]
    pub fn dc_room(&mut self) -> Option<DcRoom<'_>> {
        let pi = self.pi;
        if self.posted.wrapping_sub(self.retired) >= self.dc_gate || !self.bf_ready() {
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
        Some(DcRoom {
            sq: self,
            pi,
            slot,
            wqe,
            second,
        })
    }
}

impl<'q> DcRoom<'q> {
    /// The datagram segment: the AH's AV `av` with `dc_key` (big-endian)
    /// at bytes 0..8 and the AV's `dqp_dct` OR `dctn |
    /// MLX5_EXTENDED_UD_AV` at bytes 8..12 (rdma-core's
    /// `mlx5_send_wr_set_dc_addr`), bytes 16..64 of the first WQEBB.
    ///
    /// Errors, with nothing written: [`WqeError::DctnTooWide`] when `dctn`
    /// does not fit 24 bits (the room stays, to be dropped).
    #[inline(always)]
    pub fn datagram(
        &mut self,
        av: &[u8; DATAGRAM_SEG],
        dctn: u32,
        dc_key: u64,
    ) -> Result<(), WqeError> {
        if dctn > 0xff_ffff {
            return Err(dctn_too_wide(dctn));
        }
        // SAFETY: both WQEBBs are free (the open gate: `room_implied`, and
        // fewer than `max_post` WRs outstanding) and ours; bytes 16..64 of
        // the first are inside it, apart from `av`; `dctn` fits 24 bits.
        unsafe { crate::wqe::write_dc_datagram(self.wqe.add(16), av, dctn, dc_key) };
        Ok(())
    }

    /// The remote-address segment, the second WQEBB's first 16 bytes (RDMA
    /// WRITE, WRITE_IMM and READ only: a SEND's data segment goes there).
    #[inline(always)]
    pub fn raddr(&mut self, raddr: Seg) {
        // SAFETY: as in `datagram`: the second WQEBB is free and ours.
        unsafe { raddr.write(self.second) };
    }

    /// The data segment: the second WQEBB's bytes 16..32 after a
    /// remote-address segment (`raddr`: RDMA WRITE, WRITE_IMM, READ), else
    /// its first 16 (SEND, SEND_IMM).
    #[inline(always)]
    pub fn data(&mut self, data: Seg, raddr: bool) {
        // SAFETY: as in `datagram`: the second WQEBB is free and ours, and
        // 32 bytes fit it.
        unsafe { data.write(self.second.add(16 * raddr as usize)) };
    }

    /// The ctrl segment (`opcode`, `flags` with auto-signal, `imm` if
    /// `opcode` carries one (else 0, as [`SendQueue::post`] writes), and
    /// `ds`: 6 with a remote-address segment, 5 without) and the slot
    /// (`wr_id`, two WQEBBs); the WR is then posted, not yet rung:
    /// [`WrittenDc::ring`] rings it. The caller vouches that the steps it
    /// took suit `opcode` and `ds` (the device reads `ds * 16` bytes;
    /// [`SendQueue::post_dc`] checks them).
    #[inline(always)]
    pub fn finish(
        self,
        opcode: WqeOpcode,
        flags: CtrlFlags,
        imm: u32,
        ds: u32,
        wr_id: u64,
    ) -> WrittenDc<'q> {
        debug_assert!(ds == 5 || ds == 6);
        let DcRoom {
            sq,
            pi,
            slot,
            wqe,
            second,
        } = self;
        let posted = sq.posted;
        // (As the general writer: no immediate but for an opcode with one.)
        let imm = if opcode.has_imm() { imm } else { 0 };
        // A signaled WR has its own copy of the rest, as in
        // `write_segs_unchecked`.
        let (flags, forced) = if flags.contains(CtrlFlags::CQ_UPDATE) {
            sq.last_signaled = posted;
            (flags, false)
        } else {
            sq.auto_signal(flags)
        };
        let ctrl = ctrl_stored(opcode, pi, CtrlQpn::Word(sq.qpn_word), ds, flags, imm);
        // SAFETY: `wqe` is the first WQEBB, free and ours (`dc_room`);
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

#[cold]
fn dctn_too_wide(dctn: u32) -> WqeError {
    WqeError::DctnTooWide { dctn }
}

impl SendQueue {
    /// Posts a DC WQE of one data segment on a DCI, built in place: RDMA
    /// WRITE, WRITE_IMM or READ (with `raddr`, the remote-address segment)
    /// or SEND, SEND_IMM (`raddr` ignored, as [`Self::post`] ignores a
    /// SEND's remote), to DCT `dctn` with access key `dc_key` through the
    /// AH whose AV is `av`. The WQE: the ctrl segment, the 48-byte datagram
    /// segment ([`DcRoom::datagram`]'s), which fills the first WQEBB, and
    /// raddr and `data` at the start of the second (6 DS, or 5 for a SEND;
    /// 2 WQEBBs, the second at the ring's start past its end). Then the
    /// doorbell, with a BlueFlame copy of both WQEBBs when it is the only
    /// WQE since the last doorbell and they fit the register
    /// ([`Self::post_segs`]). `imm` is written for WRITE_IMM and SEND_IMM
    /// only (0 otherwise, as [`Self::post`]). `data` is written as given: a zero-length
    /// SGE, which [`Self::post`] leaves out, is the caller's to leave out.
    ///
    /// Errors, with nothing written: [`WqeError::UnsupportedOpcode`] for
    /// another opcode, [`WqeError::MissingRemote`] for an RDMA opcode
    /// without `raddr`, [`WqeError::DctnTooWide`] when `dctn` does not fit
    /// 24 bits, [`WqeError::WrLimit`], [`WqeError::QueueFull`],
    /// [`WqeError::TooBig`] on a queue whose largest WQE is one WQEBB.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn post_dc(
        &mut self,
        opcode: WqeOpcode,
        flags: CtrlFlags,
        imm: u32,
        av: &[u8; DATAGRAM_SEG],
        dctn: u32,
        dc_key: u64,
        raddr: Option<Seg>,
        data: Seg,
        wr_id: u64,
    ) -> Result<(), WqeError> {
        const WQEBBS: u32 = 2;
        let remote = match (dc_raddr(opcode), raddr) {
            (None, _) => return Err(WqeError::UnsupportedOpcode(opcode.0)),
            (Some(true), None) => return Err(WqeError::MissingRemote(opcode.0)),
            (Some(true), Some(r)) => Some(r),
            (Some(false), _) => None,
        };
        if dctn > 0xff_ffff {
            return Err(dctn_too_wide(dctn));
        }
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
        // below `wqe_cnt`, so each 64-byte WQEBB lies inside it (the
        // datagram segment, bytes 16..64 of the first, apart from `av`;
        // raddr and data, bytes 0..32 of the second). `dctn` fits 24 bits.
        let wqe = unsafe {
            let wqe = ring.add(slot as usize * WQEBB);
            crate::wqe::write_dc_datagram(wqe.add(16), av, dctn, dc_key);
            let second = ring.add(second as usize * WQEBB);
            if let Some(r) = remote {
                r.write(second);
                data.write(second.add(16));
            } else {
                data.write(second);
            }
            wqe
        };
        let ds = 5 + remote.is_some() as u32;
        // (`dc_raddr` took no SEND_INVAL: the immediate is data or 0.)
        let imm = if opcode.has_imm_data() { imm } else { 0 };
        let (flags, forced) = self.auto_signal(flags);
        let ctrl = ctrl_stored(opcode, pi, CtrlQpn::Word(self.qpn_word), ds, flags, imm);
        // SAFETY: as above; `slots` has `wqe_cnt` entries, `slot` masked below it.
        unsafe {
            put_stored(wqe, ctrl);
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

#[cfg(test)]
#[path = "fast_dc_tests.rs"]
mod tests;
