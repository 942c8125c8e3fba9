//! Scatter to CQE, the host's half: copying the data a CQE carries
//! ([`CqeRef::inline_data`](crate::cqe::CqeRef::inline_data):
//! `MLX5_INLINE_SCATTER_32` / `_64` in `op_own`) to the buffers of the WR
//! it completes, as rdma-core's `copy_to_scat` does (`providers/mlx5/qp.c`
//! `mlx5_copy_to_recv_wqe` and `mlx5_copy_to_send_wqe`, `srq.c`
//! `mlx5_copy_to_recv_srq`).
//!
//! The WR's data segments (16 bytes each, big-endian: byte count 0..4,
//! lkey 4..8, address 8..16) are read back from its WQE, which is still
//! the device's (the CQE is not retired yet), and filled in order,
//! `min(remaining, byte count)` bytes each:
//! - a receive WQE of the QP's RQ at `wqe_counter`: up to `stride / 16`
//!   segments, ending at one whose lkey is `MLX5_INVALID_LKEY` (0x100;
//!   rdma-core walks on over it, copying 0 bytes there and then into
//!   whatever stale segments follow: we stop);
//! - an SRQ WQE at index `wqe_counter`: the same after its 16-byte next
//!   segment (`stride / 16 - 1` segments);
//! - a send WQE at `wqe_counter` (RC): READ skips ctrl and raddr (32
//!   bytes), ATOMIC_CS / ATOMIC_FA skip ctrl, raddr and atomic (48), up to
//!   the ctrl segment's DS, the list continuing at the ring's start when it
//!   crosses the SQ's end.
//!
//! Unlike rdma-core, a WR whose segments hold fewer bytes than the CQE
//! carries gets none of them ([`ScatterError::Length`], reported as
//! `IBV_WC_LOC_LEN_ERR`): rdma-core copies what fits first.
//!
//! The copies are one-byte relaxed atomic stores (`crate::shared`), as every
//! write of the host to registered memory a peer may touch.

use super::{ReceiveQueue, Retirer, SrqSlots};
use crate::doorbell::full_wqe_index;
use crate::prm::{WqeOpcode, DS, INVALID_LKEY, WQEBB};
use crate::wqe::{decode_ctrl_seg, decode_data_seg, DataSeg};

/// Why the data of an inline-scatter CQE was not copied out. In every
/// case nothing was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScatterError {
    /// The WR's data segments hold `room` bytes, fewer than the CQE's
    /// `need`: `IBV_WC_LOC_LEN_ERR` (status 1), as rdma-core's
    /// `copy_to_scat`.
    #[error("the WR's buffers hold {room} bytes, the CQE carries {need}")]
    Length {
        /// Bytes the CQE carries.
        need: u32,
        /// Bytes the WR's data segments hold (up to the first that hold
        /// `need`, or all of them).
        room: u64,
    },
    /// The send WQE the counter names is not a READ, ATOMIC_CS or
    /// ATOMIC_FA (its opcode given), or not a WQE's start: no CQE carries
    /// data for it (rdma-core's `mlx5_copy_to_send_wqe` reports
    /// `IBV_WC_REM_INV_REQ_ERR`).
    #[error("send WQE opcode {0:#04x} takes no data from a CQE")]
    Opcode(u8),
    /// The counter names no WQE outstanding on this queue (the poll
    /// reports the CQE as stale when it retires it).
    #[error("the CQE's wqe_counter names no outstanding WQE")]
    Stale,
}

/// Copies `data` over the data segments `seg(0)`, `seg(1)`, ... (at most
/// `max`, ending before one whose lkey is `MLX5_INVALID_LKEY`), in order,
/// `min(remaining, byte count)` bytes into each; nothing at all when they
/// hold fewer than `data.len()` bytes ([`ScatterError::Length`]).
///
/// # Safety
/// Every segment `seg` yields up to the one that completes the copy names
/// `byte count` bytes at `address` that are valid for writes for the call
/// (memory registered for an outstanding WR), accessed by others only with
/// one-byte atomics or a device's DMA, and not overlapping `data`.
unsafe fn copy_to_segs(
    seg: impl Fn(usize) -> DataSeg,
    max: usize,
    data: &[u8],
) -> Result<(), ScatterError> {
    let need = data.len() as u64;
    if need == 0 {
        return Ok(());
    }
    // Pass 1: how many segments it takes (and whether they hold it all).
    let (mut n, mut room) = (0, 0u64);
    while n < max && room < need {
        let s = seg(n);
        if s.lkey == INVALID_LKEY {
            break;
        }
        room += s.len as u64;
        n += 1;
    }
    if room < need {
        return Err(ScatterError::Length {
            need: need as u32,
            room,
        });
    }
    // Pass 2: copy.
    let mut left = data;
    for i in 0..n {
        let s = seg(i);
        let k = left.len().min(s.len as usize);
        // SAFETY: `k <= s.len` bytes at `s.addr`, a segment the caller
        // vouches for; `left[..k]` is ours.
        unsafe { crate::shared::store_from(&left[..k], s.addr as usize as *mut u8) };
        left = &left[k..];
    }
    debug_assert!(left.is_empty());
    Ok(())
}

impl ReceiveQueue {
    /// Copies the data of a responder CQE that carries it inline (`data`,
    /// from [`CqeRef::inline_data`](crate::cqe::CqeRef::inline_data)) to the
    /// receive WQE its `wqe_counter` names: on the QP's RQ, the WQE at that
    /// counter if it is outstanding; on an SRQ, the SRQ's WQE of that index
    /// if the device holds it ([`SrqSlots::scatter_from_cqe`]). Call it
    /// before [`Self::complete`] retires the WQE.
    ///
    /// Errors (nothing written): [`ScatterError::Stale`],
    /// [`ScatterError::Length`].
    ///
    /// # Safety
    /// The receive WQEs outstanding on this queue were posted with SGEs of
    /// memory the host registered and keeps alive, valid for writes, until
    /// their WRs are retired (the WR is outstanding, so its MR is alive),
    /// at addresses of this process; `data` is not in them.
    pub unsafe fn scatter_from_cqe(
        &self,
        wqe_counter: u16,
        data: &[u8],
    ) -> Result<(), ScatterError> {
        if let Some(s) = &self.srq {
            // SAFETY: the caller's contract, for the SRQ's WQEs.
            return unsafe { s.scatter_from_cqe(wqe_counter, data) };
        }
        let Some(buf) = &self.buf else {
            return Err(ScatterError::Stale);
        };
        let idx = full_wqe_index(wqe_counter, self.tail, self.head).ok_or(ScatterError::Stale)?;
        let slot = (idx & (self.wqe_cnt - 1)) as usize;
        if self.done.get(slot) {
            return Err(ScatterError::Stale);
        }
        let off = slot * self.stride as usize;
        let seg = |i: usize| {
            let mut b = [0u8; DS];
            buf.read_wrapping(off + i * DS, &mut b);
            decode_data_seg(&b)
        };
        // SAFETY: the WQE is outstanding (checked above), so its segments
        // name memory alive and writable (the caller's contract).
        unsafe { copy_to_segs(seg, self.stride as usize / DS, data) }
    }
}

impl SrqSlots {
    /// The ring these slots index, at `buf` with `stride` bytes per WQE,
    /// so that [`Self::scatter_from_cqe`] can read WQEs back.
    pub(super) fn with_ring(mut self, buf: core::ptr::NonNull<u8>, stride: u32) -> Self {
        self.ring = buf.as_ptr() as usize;
        self.stride = stride;
        self.stride_at16 = (stride as u64) << 16;
        self
    }

    /// [`ReceiveQueue::scatter_from_cqe`] for SRQ WQE `wqe_counter`: its
    /// data segments after the 16-byte next segment (`stride / 16 - 1`),
    /// if the device holds that WQE (posted, not yet completed).
    ///
    /// Errors (nothing written): [`ScatterError::Stale`] (also when these
    /// slots have no ring: the verbs backend's), [`ScatterError::Length`].
    ///
    /// # Safety
    /// As [`ReceiveQueue::scatter_from_cqe`], for the SRQ's WQEs; the SRQ's
    /// ring is alive (its poster is).
    pub unsafe fn scatter_from_cqe(
        &self,
        wqe_counter: u16,
        data: &[u8],
    ) -> Result<(), ScatterError> {
        let i = wqe_counter as usize;
        // Acquire: the poster wrote the WQE before marking it the device's.
        if !self.is_held(i) || self.ring == 0 {
            return Err(ScatterError::Stale);
        }
        let wqe = self.ring + i * self.stride as usize + crate::wqe::SRQ_NEXT_SEG;
        let seg = |j: usize| {
            // SAFETY: segment `j < stride / 16 - 1` of WQE `i < count`,
            // inside the ring (`count * stride` bytes, alive); the poster
            // writes no WQE the device holds, so nothing writes these bytes
            // now.
            let b = unsafe { core::ptr::read_unaligned((wqe + j * DS) as *const [u8; DS]) };
            decode_data_seg(&b)
        };
        // SAFETY: the device holds the WQE, so its WR is outstanding and its
        // segments name memory alive and writable (the caller's contract).
        unsafe { copy_to_segs(seg, self.stride as usize / DS - 1, data) }
    }
}

impl Retirer<'_> {
    /// Copies the data of a requester CQE that carries it inline (a READ
    /// response or an atomic's old value; `data` from
    /// [`CqeRef::inline_data`](crate::cqe::CqeRef::inline_data)) to the
    /// data segments of the send WQE its `wqe_counter` names, if that WQE
    /// is outstanding: after ctrl and raddr for RDMA_READ (byte 32), after
    /// ctrl, raddr and atomic for ATOMIC_CS / ATOMIC_FA (byte 48), up to
    /// the ctrl segment's DS, continuing at the ring's start past its end.
    /// Call it before [`Self::complete`] retires the WQE.
    ///
    /// Errors (nothing written): [`ScatterError::Stale`],
    /// [`ScatterError::Opcode`] (the WQE there is another opcode, or its
    /// ctrl segment names another index), [`ScatterError::Length`].
    ///
    /// # Safety
    /// The send WQEs outstanding on this queue were posted with SGEs of
    /// memory the host registered and keeps alive, valid for writes for
    /// READ and atomic targets, until their WRs are retired, at addresses
    /// of this process; `data` is not in them.
    pub unsafe fn scatter_from_cqe(
        &self,
        wqe_counter: u16,
        data: &[u8],
    ) -> Result<(), ScatterError> {
        let back = (self.last as u16).wrapping_sub(wqe_counter) as u32;
        if back >= self.inflight {
            return Err(ScatterError::Stale);
        }
        let idx = self.last.wrapping_sub(back);
        let ring = &self.sq.buf;
        let off = idx as usize * WQEBB;
        let mut c = [0u8; DS];
        ring.read_wrapping(off, &mut c);
        let ctrl = decode_ctrl_seg(&c);
        let skip = match ctrl.opcode {
            WqeOpcode::RDMA_READ => 2,
            WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA => 3,
            op => return Err(ScatterError::Opcode(op.0)),
        };
        if ctrl.wqe_idx != wqe_counter {
            return Err(ScatterError::Opcode(ctrl.opcode.0));
        }
        let seg = |j: usize| {
            let mut b = [0u8; DS];
            // Wraps at the ring's end (`read_wrapping` masks the offset).
            ring.read_wrapping(off + (skip + j) * DS, &mut b);
            decode_data_seg(&b)
        };
        let max = (ctrl.ds as usize).saturating_sub(skip);
        // SAFETY: the WQE is outstanding (checked above), so its segments
        // name memory alive and writable (the caller's contract).
        unsafe { copy_to_segs(seg, max, data) }
    }
}
