//! The receive WQE codec: the data segments of a receive WQE written
//! ([`write_recv_wqe`] for an RQ, the SRQ driver's post), the SRQ's next
//! segment, and one decoder of a posted receive WQE ([`decode_recv_wqe`])
//! that the sim uses for RQs and SRQs alike.
//!
//! Layouts (rdma-core `providers/mlx5/qp.c` `mlx5_post_recv`, `srq.c`
//! `mlx5_post_srq_recv`; `mlx5dv.h` structs, all fields big-endian):
//!
//! ```text
//! RQ WQE  (stride bytes)  0: data segments (16 each), the unused rest of the stride
//!                            begun by one with lkey MLX5_INVALID_LKEY (0x100), count 0, addr 0
//! SRQ WQE (stride bytes)  0: next segment (struct mlx5_wqe_srq_next_seg, 16):
//!                            2: next_wqe_index (2), the rest reserved (0)
//!                        16: data segments, ended as an RQ WQE's
//! ```

use super::segments::{decode_data_seg, Seg};
use super::{DataSeg, WqeError};
use crate::prm::{DS, INLINE_SEG, INVALID_LKEY};
use crate::ring::RingBuf;

/// Bytes of the next segment at the start of every SRQ WQE
/// (`struct mlx5_wqe_srq_next_seg`).
pub const SRQ_NEXT_SEG: usize = 16;

/// Offset of `next_wqe_index` (big-endian u16) in an SRQ WQE's next segment.
pub const SRQ_NEXT_WQE_INDEX: usize = 2;

/// Encodes an SRQ WQE's next segment (`struct mlx5_wqe_srq_next_seg`):
/// `next` at bytes 2..4, big-endian; the other 14 bytes reserved, 0.
#[inline]
pub fn srq_next_seg(next: u16) -> [u8; SRQ_NEXT_SEG] {
    let mut s = [0u8; SRQ_NEXT_SEG];
    s[SRQ_NEXT_WQE_INDEX..SRQ_NEXT_WQE_INDEX + 2].copy_from_slice(&next.to_be_bytes());
    s
}

/// Decodes an SRQ WQE's next segment: its `next_wqe_index` (bytes 2..4,
/// big-endian; the inverse of [`srq_next_seg`]).
#[inline]
pub fn decode_srq_next_seg(b: &[u8; SRQ_NEXT_SEG]) -> u16 {
    u16::from_be_bytes([b[SRQ_NEXT_WQE_INDEX], b[SRQ_NEXT_WQE_INDEX + 1]])
}

/// The data segment that ends a receive WQE shorter than its stride:
/// byte count 0, lkey `MLX5_INVALID_LKEY` (0x100), address 0 (16 bytes,
/// big-endian fields; rdma-core `mlx5_post_recv`).
pub const RECV_END: Seg = Seg::data(0, 0, INVALID_LKEY);

/// Writes the data segments of a receive WQE from ring offset `off` on:
/// one per non-empty SGE of `sges`, then, when fewer than `slots` (the
/// segments the WQE has room for) were written, the terminating one
/// ([`RECV_END`]). The caller has checked that the non-empty SGEs number
/// at most `slots`.
pub(crate) fn write_recv_segs(buf: &mut RingBuf<'_>, off: usize, sges: &[DataSeg], slots: usize) {
    let mut at = off;
    let mut n = 0;
    for s in sges.iter().filter(|s| s.len != 0) {
        buf.write_seg(at, &Seg::data(s.addr, s.len, s.lkey).to_bytes());
        at += DS;
        n += 1;
    }
    debug_assert!(n <= slots);
    if n < slots {
        buf.write_seg(at, &RECV_END.to_bytes());
    }
}

/// Writes receive WQE `idx` into an RQ of `wqe_cnt` entries of `stride` bytes
/// (`mlx5dv_qp.rq`): one data segment per non-empty SGE, then, if the stride
/// holds more, a terminating segment with lkey `MLX5_INVALID_LKEY` (0x100),
/// byte count 0 and address 0 (rdma-core `mlx5_post_recv`). On error nothing
/// is written.
pub fn write_recv_wqe(
    rq: &mut RingBuf<'_>,
    wqe_cnt: u32,
    stride: u32,
    idx: u32,
    sges: &[DataSeg],
) -> Result<(), WqeError> {
    if !wqe_cnt.is_power_of_two()
        || !stride.is_power_of_two()
        || stride < DS as u32
        || rq.len() != wqe_cnt as usize * stride as usize
    {
        return Err(WqeError::BadRqGeometry {
            wqe_cnt,
            stride,
            ring_len: rq.len(),
        });
    }
    let total: u64 = sges.iter().map(|s| s.len as u64).sum();
    if total > 1 << 31 {
        return Err(WqeError::LengthOverflow { total });
    }
    if let Some(s) = sges.iter().find(|s| s.len & INLINE_SEG != 0) {
        return Err(WqeError::SgeTooLong { len: s.len });
    }
    let slots = stride as usize / DS;
    let need = sges.iter().filter(|s| s.len != 0).count();
    if need > slots {
        return Err(WqeError::RecvTooManySges { need, stride });
    }
    let base = (idx & (wqe_cnt - 1)) as usize * stride as usize;
    write_recv_segs(rq, base, sges, slots);
    Ok(())
}

/// The layout of a receive WQE: an RQ's, or an SRQ's (a next segment first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvLayout {
    /// Data segments from byte 0.
    Rq,
    /// The 16-byte next segment, then data segments from byte 16.
    Srq,
}

/// A receive WQE read back, as the device sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvWqe<const N: usize> {
    /// An SRQ WQE's `next_wqe_index`; `None` for an RQ WQE.
    pub next: Option<u16>,
    /// The data segments, `segs[..n]`; the rest zero.
    pub segs: [DataSeg; N],
    /// How many of `segs` the WQE holds.
    pub n: usize,
}

/// Decodes a receive WQE of `stride` bytes laid out as `layout`, reading
/// its 16-byte segments through `read` (given each one's byte offset in
/// the WQE): the SRQ next segment if any, then data segments until the one
/// with lkey `MLX5_INVALID_LKEY` (not included), the end of the stride,
/// or `N` of them, whichever comes first. Used by the sim for RQs and SRQs.
pub fn decode_recv_wqe<const N: usize>(
    layout: RecvLayout,
    stride: u32,
    mut read: impl FnMut(usize) -> [u8; 16],
) -> RecvWqe<N> {
    let (next, first) = match layout {
        RecvLayout::Rq => (None, 0),
        RecvLayout::Srq => (Some(decode_srq_next_seg(&read(0))), SRQ_NEXT_SEG),
    };
    let mut w = RecvWqe {
        next,
        segs: [DataSeg {
            addr: 0,
            len: 0,
            lkey: 0,
        }; N],
        n: 0,
    };
    let slots = (stride as usize).saturating_sub(first) / DS;
    for k in 0..slots.min(N) {
        let d = decode_data_seg(&read(first + k * DS));
        if d.lkey == INVALID_LKEY {
            break;
        }
        w.segs[w.n] = d;
        w.n += 1;
    }
    w
}
