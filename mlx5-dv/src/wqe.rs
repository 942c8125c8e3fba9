//! WQE encoding: ctrl, remote-address, atomic, data and inline segments; the
//! writer that places one whole send WQE into an SQ ring at producer index
//! `pi`; and receive WQEs.
//!
//! Layouts (`docs/prm.md`; rdma-core `mlx5dv.h`
//! `struct mlx5_wqe_ctrl_seg` / `mlx5_wqe_raddr_seg` / `mlx5_wqe_data_seg` /
//! `mlx5_wqe_inline_seg`, `providers/mlx5/qp.c` `_mlx5_post_send`), all big-endian:
//!
//! ```text
//! ctrl   0: opmod<<24 | wqe_idx<<8 | opcode   4: qpn<<8 | ds   8: signature, rsvd, rsvd
//!       11: fm_ce_se                         12: immediate
//! raddr  0: remote address (8)    8: rkey (4)    12: reserved 0 (4)
//! atomic 0: swap or add value (8)  8: compare value (8)
//! data   0: byte_count (4)        4: lkey (4)     8: local address (8)
//! inline 0: 0x80000000 | len (4)  4: bytes..., padded to a multiple of 16
//! ```

use crate::prm::{CtrlFlags, WqeOpcode, DS, INLINE_SEG, INVALID_LKEY, MAX_DS, WQEBB};
use crate::ring::RingBuf;

/// One scatter/gather entry as it goes into a data segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataSeg {
    /// Local virtual address.
    pub addr: u64,
    /// Length in bytes. Zero-length entries are left out of the WQE (as rdma-core does).
    pub len: u32,
    /// Local key of the memory region holding `addr..addr+len`.
    pub lkey: u32,
}

/// The remote side of an RDMA operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteSeg {
    pub addr: u64,
    pub rkey: u32,
}

/// Where the WQE's payload comes from.
#[derive(Clone, Copy, Debug)]
pub enum Payload<'a> {
    /// Gathered by the device from registered memory.
    Sges(&'a [DataSeg]),
    /// Copied into the WQE itself (inline segment).
    Inline(&'a [u8]),
}

/// Operands of an atomic (`mlx5_wqe_atomic_seg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicSeg {
    /// ATOMIC_CS: the value swapped in; ATOMIC_FA: the value added.
    pub swap_add: u64,
    /// ATOMIC_CS: the value compared with; ignored (0) for ATOMIC_FA.
    pub compare: u64,
}

/// One send WQE to encode.
///
/// What each opcode takes (rdma-core `_mlx5_post_send`):
///
/// | opcode | remote | atomic | payload |
/// |---|---|---|---|
/// | SEND, SEND_IMM | - | - | SGEs or inline |
/// | RDMA_WRITE, RDMA_WRITE_IMM | required | - | SGEs or inline |
/// | RDMA_READ | required | - | SGEs (scatter list) |
/// | ATOMIC_CS, ATOMIC_FA | required, 8-byte aligned | required | one SGE of at least 8 bytes (gets the old value) |
/// | NOP | - | - | none |
#[derive(Clone, Copy, Debug)]
pub struct SendWqe<'a> {
    pub opcode: WqeOpcode,
    pub flags: CtrlFlags,
    /// Immediate data as the application means it (SEND_IMM, RDMA_WRITE_IMM);
    /// written big-endian, so the responder's CQE returns the same `u32`.
    /// Other opcodes write 0.
    pub imm: u32,
    pub remote: Option<RemoteSeg>,
    pub atomic: Option<AtomicSeg>,
    pub payload: Payload<'a>,
}

/// The fixed facts of one send queue that the encoder needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqGeometry {
    /// SQ size in WQEBBs (`mlx5dv_qp.sq.wqe_cnt`), a power of two.
    pub wqe_cnt: u32,
    /// QP number (24 bits).
    pub qpn: u32,
    /// Largest inline payload in bytes (the QP's `max_inline_data`).
    pub max_inline: u32,
    /// Largest WQE in WQEBBs (at most 16: the kernel caps a send WQE at 1 KiB).
    pub max_wqebbs: u32,
}

/// What writing a WQE did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    /// DS count in the ctrl segment (16-byte units).
    pub ds: u32,
    /// WQEBBs used (64-byte units).
    pub wqebbs: u32,
    /// Producer index for the next WQE.
    pub next_pi: u32,
}

/// Why a WQE was refused. Nothing was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WqeError {
    #[error("WQE needs {ds} DS; the ctrl segment's ds field holds at most 63")]
    TooManyDs { ds: u32 },
    #[error("WQE needs {wqebbs} WQEBBs; this QP's largest send WQE is {max} WQEBBs")]
    TooBig { wqebbs: u32, max: u32 },
    #[error("inline payload of {len} bytes exceeds this QP's max_inline_data of {max} bytes")]
    InlineTooLong { len: usize, max: u32 },
    #[error("scatter/gather lengths sum to {total} bytes, more than 2^31")]
    LengthOverflow { total: u64 },
    #[error("an SGE of {len} bytes: a data segment's byte count holds at most 2^31 - 1 (bit 31 marks inline data)")]
    SgeTooLong { len: u32 },
    #[error("opcode {0:#04x} needs a remote address and rkey")]
    MissingRemote(u8),
    #[error("opcode {0:#04x} needs atomic operands (swap/add, compare)")]
    MissingAtomic(u8),
    #[error("atomic remote address {0:#x} is not 8-byte aligned")]
    UnalignedAtomic(u64),
    #[error("an atomic takes exactly one SGE of at least 8 bytes for the old value")]
    AtomicSge,
    #[error("opcode {0:#04x} cannot carry inline data")]
    InlineNotAllowed(u8),
    #[error("a receive WQE of {need} data segments does not fit the RQ stride of {stride} bytes")]
    RecvTooManySges { need: usize, stride: u32 },
    #[error("RQ geometry: {wqe_cnt} WQEs of {stride} bytes, ring of {ring_len} bytes (need powers of two, stride at least 16)")]
    BadRqGeometry {
        wqe_cnt: u32,
        stride: u32,
        ring_len: usize,
    },
    #[error("opcode {0:#04x} is not supported by this encoder")]
    UnsupportedOpcode(u8),
    #[error("WQE needs {need} WQEBBs; only {free} are free in the SQ")]
    QueueFull { need: u32, free: u32 },
    #[error("SQ geometry says {wqe_cnt} WQEBBs, but the ring holds {ring_len} bytes (need a power of two, times 64)")]
    BadGeometry { wqe_cnt: u32, ring_len: usize },
    #[error("the SQ already holds max_send_wr = {max_post} outstanding work requests")]
    WrLimit { max_post: u32 },
}

/// Encodes a ctrl segment (bytes 0..16 of every send WQE).
#[inline]
pub fn ctrl_seg(
    opcode: WqeOpcode,
    wqe_idx: u16,
    qpn: u32,
    ds: u32,
    flags: CtrlFlags,
    imm: u32,
) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[0..4].copy_from_slice(&(((wqe_idx as u32) << 8) | opcode.0 as u32).to_be_bytes());
    s[4..8].copy_from_slice(&(((qpn & 0xff_ffff) << 8) | (ds & 0x3f)).to_be_bytes());
    s[11] = flags.bits();
    s[12..16].copy_from_slice(&imm.to_be_bytes());
    s
}

/// The ctrl segment as four big-endian words (what [`ctrl_seg`] lays out),
/// for writers that store them straight into the ring.
#[inline(always)]
fn ctrl_words(
    opcode: WqeOpcode,
    wqe_idx: u16,
    qpn: u32,
    ds: u32,
    flags: CtrlFlags,
    imm: u32,
) -> [u32; 4] {
    [
        ((wqe_idx as u32) << 8) | opcode.0 as u32,
        ((qpn & 0xff_ffff) << 8) | (ds & 0x3f),
        flags.bits() as u32,
        imm,
    ]
}

/// Stores a 16-byte segment given as two big-endian 64-bit halves.
///
/// # Safety
/// `dst` must be valid for 16 bytes of writes.
#[inline(always)]
unsafe fn put_be64x2(dst: *mut u8, a: u64, b: u64) {
    // SAFETY: caller guarantees `dst` is writable for 16 bytes; unaligned
    // stores need no alignment. Building the segment in registers and storing
    // it once avoids assembling it in a stack array first, which makes the
    // 16-byte reload of the array miss store forwarding.
    unsafe {
        (dst as *mut u64).write_unaligned(a.to_be());
        (dst.add(8) as *mut u64).write_unaligned(b.to_be());
    }
}

/// Stores a segment given as four big-endian 32-bit words.
///
/// # Safety
/// As [`put_be64x2`].
#[inline(always)]
unsafe fn put_be32x4(dst: *mut u8, w: [u32; 4]) {
    // SAFETY: as in `put_be64x2`.
    unsafe {
        put_be64x2(
            dst,
            ((w[0] as u64) << 32) | w[1] as u64,
            ((w[2] as u64) << 32) | w[3] as u64,
        )
    };
}

/// Encodes a remote-address segment.
#[inline]
pub fn raddr_seg(r: RemoteSeg) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[0..8].copy_from_slice(&r.addr.to_be_bytes());
    s[8..12].copy_from_slice(&r.rkey.to_be_bytes());
    s
}

/// Encodes an atomic segment.
#[inline]
pub fn atomic_seg(a: AtomicSeg) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[0..8].copy_from_slice(&a.swap_add.to_be_bytes());
    s[8..16].copy_from_slice(&a.compare.to_be_bytes());
    s
}

/// Size of an atomic operand and of the data segment that receives the old value.
pub const ATOMIC_SIZE: u32 = 8;

/// Encodes a data segment.
#[inline]
pub fn data_seg(d: DataSeg) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[0..4].copy_from_slice(&d.len.to_be_bytes());
    s[4..8].copy_from_slice(&d.lkey.to_be_bytes());
    s[8..16].copy_from_slice(&d.addr.to_be_bytes());
    s
}

/// DS count of an inline segment carrying `len` bytes: `ceil((len + 4) / 16)`.
#[inline]
pub fn inline_ds(len: usize) -> u32 {
    (len + 4).div_ceil(DS) as u32
}

/// Validates `wqe` against `geo` and returns `(ds, wqebbs)` without writing anything.
#[inline(always)]
pub fn wqe_size(geo: &SqGeometry, wqe: &SendWqe<'_>) -> Result<(u32, u32), WqeError> {
    wqe_size_within(geo, wqe, geo.max_wqebbs.min(geo.wqe_cnt))
}

/// [`wqe_size`] with the largest WQE, `geo.max_wqebbs.min(geo.wqe_cnt)`,
/// given (the driver keeps it).
#[inline(always)]
pub(crate) fn wqe_size_within(
    geo: &SqGeometry,
    wqe: &SendWqe<'_>,
    max_wqebbs: u32,
) -> Result<(u32, u32), WqeError> {
    let op = wqe.opcode;
    let atomic = matches!(op, WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA);
    if !matches!(
        op,
        WqeOpcode::RDMA_WRITE
            | WqeOpcode::RDMA_WRITE_IMM
            | WqeOpcode::SEND
            | WqeOpcode::SEND_IMM
            | WqeOpcode::RDMA_READ
            | WqeOpcode::ATOMIC_CS
            | WqeOpcode::ATOMIC_FA
            | WqeOpcode::NOP
    ) {
        return Err(WqeError::UnsupportedOpcode(op.0));
    }
    let mut ds = 1u32;
    if op.has_raddr() {
        let Some(r) = wqe.remote else {
            return Err(WqeError::MissingRemote(op.0));
        };
        if atomic && r.addr % 8 != 0 {
            return Err(WqeError::UnalignedAtomic(r.addr));
        }
        ds += 1;
    }
    if atomic {
        if wqe.atomic.is_none() {
            return Err(WqeError::MissingAtomic(op.0));
        }
        match wqe.payload {
            Payload::Sges([s]) if s.len >= ATOMIC_SIZE => {}
            _ => return Err(WqeError::AtomicSge),
        }
        return finish(ds + 2, max_wqebbs);
    }
    match wqe.payload {
        Payload::Inline(bytes) => {
            if matches!(op, WqeOpcode::RDMA_READ | WqeOpcode::NOP) && !bytes.is_empty() {
                return Err(WqeError::InlineNotAllowed(op.0));
            }
            if bytes.len() > geo.max_inline as usize {
                return Err(WqeError::InlineTooLong {
                    len: bytes.len(),
                    max: geo.max_inline,
                });
            }
            if !bytes.is_empty() {
                ds += inline_ds(bytes.len());
            }
        }
        Payload::Sges(sges) => {
            // One pass: total length, per-SGE limit, and non-empty count.
            let (mut total, mut n) = (0u64, 0u32);
            for s in sges {
                if s.len & INLINE_SEG != 0 {
                    return Err(WqeError::SgeTooLong { len: s.len });
                }
                total += s.len as u64;
                n = n.saturating_add((s.len != 0) as u32);
            }
            if total > 1 << 31 {
                return Err(WqeError::LengthOverflow { total });
            }
            ds = ds.saturating_add(n);
        }
    }
    finish(ds, max_wqebbs)
}

#[inline(always)]
fn finish(ds: u32, max: u32) -> Result<(u32, u32), WqeError> {
    if ds > MAX_DS {
        return Err(WqeError::TooManyDs { ds });
    }
    let wqebbs = (ds * DS as u32).div_ceil(WQEBB as u32);
    if wqebbs > max {
        return Err(WqeError::TooBig { wqebbs, max });
    }
    Ok((ds, wqebbs))
}

/// Writes one whole send WQE into `sq` at producer index `pi`.
///
/// `sq` is the SQ buffer (`geo.wqe_cnt * 64` bytes); the WQE starts at byte
/// `(pi & (wqe_cnt - 1)) * 64`, and segments or inline bytes that reach the end
/// of the buffer continue at its start. `free` is the number of WQEBBs the caller
/// knows to be free. On error nothing is written.
#[inline]
pub fn write_send_wqe(
    sq: &mut RingBuf<'_>,
    geo: &SqGeometry,
    pi: u32,
    wqe: &SendWqe<'_>,
    free: u32,
) -> Result<Written, WqeError> {
    if !geo.wqe_cnt.is_power_of_two() || sq.len() != geo.wqe_cnt as usize * WQEBB {
        return Err(WqeError::BadGeometry {
            wqe_cnt: geo.wqe_cnt,
            ring_len: sq.len(),
        });
    }
    write_send_wqe_checked_geo(sq, geo, pi, wqe, wqe.flags, free)
}

/// [`write_send_wqe`] for a caller that has already checked that `geo.wqe_cnt`
/// is a power of two and `sq.len() == geo.wqe_cnt * 64` (the driver checks
/// once, at construction), with the ctrl segment's `fm_ce_se` flags given
/// apart from `wqe` (the driver adds CQ_UPDATE for auto-signal).
#[inline(always)]
pub(crate) fn write_send_wqe_checked_geo(
    sq: &mut RingBuf<'_>,
    geo: &SqGeometry,
    pi: u32,
    wqe: &SendWqe<'_>,
    flags: CtrlFlags,
    free: u32,
) -> Result<Written, WqeError> {
    debug_assert!(
        geo.wqe_cnt.is_power_of_two() && sq.len() == geo.wqe_cnt as usize * WQEBB,
        "geometry not checked"
    );
    let (ds, wqebbs) = wqe_size(geo, wqe)?;
    if wqebbs > free {
        return Err(WqeError::QueueFull { need: wqebbs, free });
    }
    write_sized(sq, geo, pi, wqe, flags, ds);
    Ok(Written {
        ds,
        wqebbs,
        next_pi: pi.wrapping_add(wqebbs),
    })
}

/// Writes a WQE that [`wqe_size`] accepted with `ds` DS (and for which the
/// caller has room) into a ring whose geometry the caller has checked.
#[inline(always)]
pub(crate) fn write_sized(
    sq: &mut RingBuf<'_>,
    geo: &SqGeometry,
    pi: u32,
    wqe: &SendWqe<'_>,
    flags: CtrlFlags,
    ds: u32,
) {
    debug_assert!(ds <= MAX_DS && geo.wqe_cnt.is_power_of_two());
    let imm = if wqe.opcode.has_imm() { wqe.imm } else { 0 };
    let ctrl = ctrl_words(wqe.opcode, pi as u16, geo.qpn, ds, flags, imm);
    let base = (pi & (geo.wqe_cnt - 1)) as usize * WQEBB;
    if base + ds as usize * DS <= sq.len() {
        // Fast path: the WQE does not reach the end of the ring, so every
        // segment is written straight to its place with fixed-size stores.
        // SAFETY: `base + ds * 16 <= sq.len()`, and `write_linear` writes
        // only the WQE's `ds * 16` bytes (what `wqe_size` counted) from `base`;
        // the ring owns its bytes (RingBuf contract).
        unsafe { write_linear(sq.as_ptr().add(base), ctrl, wqe) };
    } else {
        // The WQE reaches the end of the ring: lay it out with the same writer
        // in a scratch buffer, then copy the bytes it wrote, continuing at the
        // start of the ring. (Taking `wqe` by reference into an out-of-line
        // writer instead would make every caller build it in memory.)
        let mut tmp = [0u8; MAX_DS as usize * DS];
        // SAFETY: `wqe_size` refused more than MAX_DS DS, so the WQE's
        // `ds * 16` bytes fit `tmp`, which is not the payload's memory.
        let n = unsafe { write_linear(tmp.as_mut_ptr(), ctrl, wqe) };
        write_wrapped(sq, base, &tmp[..n]);
    }
}

/// Copies `len` bytes from `src` to `dst` (not overlapping), with fixed-size
/// moves for payloads up to 64 bytes (an inlined `memcpy` call costs more than
/// the copy at these sizes).
///
/// # Safety
/// `src` must be valid for `len` bytes of reads, `dst` for `len` bytes of
/// writes, and the two must not overlap.
#[inline(always)]
unsafe fn copy_small(src: *const u8, dst: *mut u8, len: usize) {
    /// Copies the first and last `N` bytes of `len` (`N <= len <= 2 * N`):
    /// together they cover all `len` bytes.
    ///
    /// # Safety
    /// As `copy_small`, with `N <= len`.
    #[inline(always)]
    unsafe fn two<const N: usize>(src: *const u8, dst: *mut u8, len: usize) {
        // SAFETY: `N <= len`, so both `[0, N)` and `[len - N, len)` are inside
        // the caller's ranges, which do not overlap. Fixed-size copies become
        // plain moves.
        unsafe {
            core::ptr::copy_nonoverlapping(src, dst, N);
            core::ptr::copy_nonoverlapping(src.add(len - N), dst.add(len - N), N);
        }
    }
    // SAFETY (every arm): the size checks give each helper `N <= len <= 2N`;
    // the caller guarantees the ranges.
    unsafe {
        match len {
            0 => {}
            1..=3 => {
                for i in 0..len {
                    *dst.add(i) = *src.add(i);
                }
            }
            4..=7 => two::<4>(src, dst, len),
            8..=15 => two::<8>(src, dst, len),
            16..=31 => two::<16>(src, dst, len),
            32..=64 => two::<32>(src, dst, len),
            _ => core::ptr::copy_nonoverlapping(src, dst, len),
        }
    }
}

/// Writes a send WQE that `wqe_size` accepted to contiguous memory, and
/// returns how many bytes from `dst` on it wrote (all of them: the segments
/// follow one another; an inline segment's padding is not written).
///
/// # Safety
/// `dst` must be valid for writes of the WQE's `ds * 16` bytes (as
/// [`wqe_size`] counts them) and not overlap any payload.
#[inline(always)]
unsafe fn write_linear(dst: *mut u8, ctrl: [u32; 4], wqe: &SendWqe<'_>) -> usize {
    // SAFETY (whole body): each segment is written at the offset, and with
    // the length, that `wqe_size` counted into `ds`: ctrl, then raddr when
    // the opcode has one, then atomic + data, or the inline segment (4-byte
    // header and the bytes), or one data segment per non-empty SGE. So every
    // write is inside `dst[..ds * 16]`. Layouts as `ctrl_seg`, `raddr_seg`,
    // `atomic_seg` and `data_seg` make them.
    unsafe {
        put_be32x4(dst, ctrl);
        let mut p = dst.add(DS);
        if let (true, Some(r)) = (wqe.opcode.has_raddr(), wqe.remote) {
            put_be64x2(p, r.addr, (r.rkey as u64) << 32);
            p = p.add(DS);
        }
        if let (WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA, Some(a), Payload::Sges([d])) =
            (wqe.opcode, wqe.atomic, wqe.payload)
        {
            let a = atomic_operands(wqe.opcode, a);
            put_be64x2(p, a.swap_add, a.compare);
            put_be64x2(
                p.add(DS),
                ((ATOMIC_SIZE as u64) << 32) | d.lkey as u64,
                d.addr,
            );
            return p.add(2 * DS).offset_from(dst) as usize;
        }
        match wqe.payload {
            Payload::Inline(bytes) if !bytes.is_empty() => {
                (p as *mut u32).write_unaligned((bytes.len() as u32 | INLINE_SEG).to_be());
                copy_small(bytes.as_ptr(), p.add(4), bytes.len());
                p = p.add(4 + bytes.len());
            }
            Payload::Inline(_) => {}
            Payload::Sges(sges) => {
                for s in sges.iter().filter(|s| s.len != 0) {
                    put_be64x2(p, ((s.len as u64) << 32) | s.lkey as u64, s.addr);
                    p = p.add(DS);
                }
            }
        }
        p.offset_from(dst) as usize
    }
}

/// The atomic segment's operands: ATOMIC_FA writes no compare value.
#[inline(always)]
fn atomic_operands(opcode: WqeOpcode, a: AtomicSeg) -> AtomicSeg {
    let compare = if opcode == WqeOpcode::ATOMIC_CS {
        a.compare
    } else {
        0
    };
    AtomicSeg {
        swap_add: a.swap_add,
        compare,
    }
}

/// Copies the bytes of a WQE laid out linearly to ring offset `base`, where
/// they reach the end of the ring and continue at its start.
#[cold]
#[inline(never)]
fn write_wrapped(sq: &mut RingBuf<'_>, base: usize, bytes: &[u8]) {
    sq.write_wrapping(base, bytes);
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
    let mut off = base;
    for s in sges.iter().filter(|s| s.len != 0) {
        rq.write_seg(off, &data_seg(*s));
        off += DS;
    }
    if need < slots {
        rq.write_seg(
            off,
            &data_seg(DataSeg {
                addr: 0,
                len: 0,
                lkey: INVALID_LKEY,
            }),
        );
    }
    Ok(())
}

/// Where a decoded WQE's payload sits in the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodedPayload {
    /// No payload segments.
    None,
    /// `count` data segments, the first at ring offset `first`.
    Sges { first: usize, count: u32 },
    /// An inline segment: `len` bytes starting at ring offset `off` (wrapping).
    Inline { off: usize, len: u32 },
}

/// A send WQE read back from an SQ ring: what the device sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodedWqe {
    pub opcode: WqeOpcode,
    pub opmod: u8,
    /// Low 16 bits of the WQE index.
    pub wqe_idx: u16,
    pub qpn: u32,
    pub ds: u32,
    pub flags: CtrlFlags,
    /// Immediate, as the application meant it (ctrl bytes 12..16, big-endian).
    pub imm: u32,
    pub remote: Option<RemoteSeg>,
    pub atomic: Option<AtomicSeg>,
    pub payload: DecodedPayload,
}

impl DecodedWqe {
    /// WQEBBs this WQE occupies.
    pub fn wqebbs(&self) -> u32 {
        (self.ds * DS as u32).div_ceil(WQEBB as u32)
    }

    /// Data segment `i` of an SGE payload (`None` past the end or for other payloads).
    pub fn sge(&self, sq: &RingBuf<'_>, i: u32) -> Option<DataSeg> {
        let DecodedPayload::Sges { first, count } = self.payload else {
            return None;
        };
        if i >= count {
            return None;
        }
        let mut b = [0u8; 16];
        sq.read_wrapping(first + i as usize * DS, &mut b);
        let be32 = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        Some(DataSeg {
            len: be32(0),
            lkey: be32(4),
            addr: u64::from_be_bytes(b[8..16].try_into().unwrap()),
        })
    }

    /// Copies an inline payload into `out` (at most `out.len()` bytes); returns its length.
    pub fn inline_bytes(&self, sq: &RingBuf<'_>, out: &mut [u8]) -> usize {
        let DecodedPayload::Inline { off, len } = self.payload else {
            return 0;
        };
        let n = (len as usize).min(out.len());
        sq.read_wrapping(off, &mut out[..n]);
        len as usize
    }
}

/// Why ring bytes are not a well-formed send WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("ctrl segment says {ds} DS; opcode {opcode:#04x} needs at least {min}")]
    TooFewDs { ds: u32, opcode: u8, min: u32 },
    #[error("inline segment of {len} bytes overruns the WQE's {ds} DS")]
    InlineOverrun { len: u32, ds: u32 },
    #[error("WQE of {ds} DS does not fit a ring of {wqe_cnt} WQEBBs")]
    BiggerThanRing { ds: u32, wqe_cnt: u32 },
}

/// Reads the send WQE at producer index `pi` of an SQ of `wqe_cnt` WQEBBs
/// (the inverse of [`write_send_wqe`]).
pub fn decode_send_wqe(sq: &RingBuf<'_>, wqe_cnt: u32, pi: u32) -> Result<DecodedWqe, DecodeError> {
    let base = (pi & (wqe_cnt.max(1) - 1)) as usize * WQEBB;
    let seg = |k: usize| {
        let mut b = [0u8; 16];
        sq.read_wrapping(base + k * DS, &mut b);
        b
    };
    let c = seg(0);
    let be32 = |b: &[u8; 16], o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let w0 = be32(&c, 0);
    let w1 = be32(&c, 4);
    let opcode = WqeOpcode(w0 as u8);
    let ds = w1 & 0x3f;
    if (ds * DS as u32).div_ceil(WQEBB as u32) > wqe_cnt {
        return Err(DecodeError::BiggerThanRing { ds, wqe_cnt });
    }
    let atomic_op = matches!(opcode, WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA);
    let raddr = opcode.has_raddr() as u32;
    let min = 1 + raddr + if atomic_op { 2 } else { 0 };
    if ds < min {
        return Err(DecodeError::TooFewDs {
            ds,
            opcode: opcode.0,
            min,
        });
    }
    let remote = (raddr == 1).then(|| {
        let r = seg(1);
        RemoteSeg {
            addr: u64::from_be_bytes(r[0..8].try_into().unwrap()),
            rkey: be32(&r, 8),
        }
    });
    let mut atomic = None;
    let first = 1 + raddr as usize + if atomic_op { 1 } else { 0 };
    if atomic_op {
        let a = seg(first - 1);
        atomic = Some(AtomicSeg {
            swap_add: u64::from_be_bytes(a[0..8].try_into().unwrap()),
            compare: u64::from_be_bytes(a[8..16].try_into().unwrap()),
        });
    }
    let rest = ds - first as u32;
    let payload = if rest == 0 {
        DecodedPayload::None
    } else {
        let p = seg(first);
        let w = be32(&p, 0);
        if w & INLINE_SEG != 0 && !atomic_op {
            let len = w & !INLINE_SEG;
            if inline_ds(len as usize) > rest {
                return Err(DecodeError::InlineOverrun { len, ds });
            }
            DecodedPayload::Inline {
                off: (base + first * DS + 4) % sq.len(),
                len,
            }
        } else {
            DecodedPayload::Sges {
                first: (base + first * DS) % sq.len(),
                count: rest,
            }
        }
    };
    Ok(DecodedWqe {
        opcode,
        opmod: (w0 >> 24) as u8,
        wqe_idx: (w0 >> 8) as u16,
        qpn: w1 >> 8,
        ds,
        flags: CtrlFlags::from_bits_retain(c[11]),
        imm: be32(&c, 12),
        remote,
        atomic,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo8() -> SqGeometry {
        SqGeometry {
            wqe_cnt: 8,
            qpn: 0x1234,
            max_inline: 256,
            max_wqebbs: 16,
        }
    }

    /// The vector from the walking-skeleton issue : a 100-byte
    /// inline RDMA WRITE at pi 7 of an 8-WQEBB SQ wraps to the buffer's start.
    #[test]
    fn inline_write_wraps_the_ring() {
        let mut mem = vec![0xeeu8; 512];
        let mut sq = RingBuf::from_slice(&mut mem).unwrap();
        let payload: Vec<u8> = (0u8..100).collect();
        let wqe = SendWqe {
            atomic: None,
            opcode: WqeOpcode::RDMA_WRITE,
            flags: CtrlFlags::CQ_UPDATE,
            imm: 0,
            remote: Some(RemoteSeg {
                addr: 0xdead0000,
                rkey: 0xabc,
            }),
            payload: Payload::Inline(&payload),
        };
        let w = write_send_wqe(&mut sq, &geo8(), 7, &wqe, 8).unwrap();
        assert_eq!(
            w,
            Written {
                ds: 9,
                wqebbs: 3,
                next_pi: 10
            }
        );
        assert_eq!(
            &mem[448..464],
            &[0, 0, 7, 8, 0, 0x12, 0x34, 9, 0, 0, 0, 8, 0, 0, 0, 0]
        );
        assert_eq!(
            &mem[464..480],
            &[0, 0, 0, 0, 0xde, 0xad, 0, 0, 0, 0, 0x0a, 0xbc, 0, 0, 0, 0]
        );
        assert_eq!(&mem[480..484], &[0x80, 0, 0, 0x64]);
        assert_eq!(&mem[484..512], &payload[0..28]);
        assert_eq!(&mem[0..72], &payload[28..100]);
        // Bytes past the WQE (and before the ctrl segment) are untouched.
        assert!(mem[72..448].iter().all(|&b| b == 0xee));
        assert_eq!(
            crate::doorbell::sq_dbrec(w.next_pi).to_be_bytes(),
            [0, 0, 0, 0x0a]
        );
    }

    #[test]
    fn sge_write_layout_and_zero_length_sges_left_out() {
        let mut mem = vec![0u8; 512];
        let mut sq = RingBuf::from_slice(&mut mem).unwrap();
        let sges = [
            DataSeg {
                addr: 0x1000,
                len: 4096,
                lkey: 0x11,
            },
            DataSeg {
                addr: 0x9999,
                len: 0,
                lkey: 0x22,
            },
        ];
        let wqe = SendWqe {
            atomic: None,
            opcode: WqeOpcode::RDMA_WRITE,
            flags: CtrlFlags::empty(),
            imm: 0,
            remote: Some(RemoteSeg {
                addr: 0x2000,
                rkey: 0x33,
            }),
            payload: Payload::Sges(&sges),
        };
        let w = write_send_wqe(&mut sq, &geo8(), 0x10001, &wqe, 8).unwrap();
        assert_eq!(
            w,
            Written {
                ds: 3,
                wqebbs: 1,
                next_pi: 0x10002
            }
        );
        // wqe_idx is pi & 0xffff; slot is pi & 7 = 1.
        assert_eq!(&mem[64..72], &[0, 0, 0x01, 8, 0, 0x12, 0x34, 3]);
        assert_eq!(
            &mem[96..112],
            &[0, 0, 0x10, 0, 0, 0, 0, 0x11, 0, 0, 0, 0, 0, 0, 0x10, 0]
        );
        assert!(mem[112..128].iter().all(|&b| b == 0));
    }

    #[test]
    fn bad_input_writes_nothing() {
        let mut mem = vec![0x5au8; 512];
        let mut sq = RingBuf::from_slice(&mut mem).unwrap();
        let big = vec![0u8; 300];
        let sge = [DataSeg {
            addr: 0,
            len: 1,
            lkey: 0,
        }; 70];
        let huge = [DataSeg {
            addr: 0,
            len: 0x7fff_ffff,
            lkey: 0,
        }; 2];
        let cases: Vec<(SendWqe<'_>, WqeError)> = vec![
            (
                SendWqe {
                    opcode: WqeOpcode::RDMA_WRITE,
                    flags: CtrlFlags::empty(),
                    imm: 0,
                    remote: None,
                    atomic: None,
                    payload: Payload::Inline(b"x"),
                },
                WqeError::MissingRemote(8),
            ),
            (
                SendWqe {
                    opcode: WqeOpcode::SEND,
                    flags: CtrlFlags::empty(),
                    imm: 0,
                    remote: None,
                    atomic: None,
                    payload: Payload::Inline(&big),
                },
                WqeError::InlineTooLong { len: 300, max: 256 },
            ),
            (
                SendWqe {
                    opcode: WqeOpcode::SEND,
                    flags: CtrlFlags::empty(),
                    imm: 0,
                    remote: None,
                    atomic: None,
                    payload: Payload::Sges(&sge),
                },
                WqeError::TooManyDs { ds: 71 },
            ),
            (
                SendWqe {
                    opcode: WqeOpcode::SEND,
                    flags: CtrlFlags::empty(),
                    imm: 0,
                    remote: None,
                    atomic: None,
                    payload: Payload::Sges(&huge),
                },
                WqeError::LengthOverflow {
                    total: 2 * 0x7fff_ffff,
                },
            ),
            (
                SendWqe {
                    opcode: WqeOpcode::SEND,
                    flags: CtrlFlags::empty(),
                    imm: 0,
                    remote: None,
                    atomic: None,
                    payload: Payload::Sges(&sge[..20]),
                },
                WqeError::QueueFull { need: 6, free: 5 },
            ),
        ];
        for (wqe, want) in cases {
            assert_eq!(write_send_wqe(&mut sq, &geo8(), 3, &wqe, 5), Err(want));
        }
        assert!(mem.iter().all(|&b| b == 0x5a));
    }

    fn wqe<'a>(opcode: WqeOpcode, payload: Payload<'a>) -> SendWqe<'a> {
        SendWqe {
            opcode,
            flags: CtrlFlags::CQ_UPDATE,
            imm: 0,
            remote: Some(RemoteSeg {
                addr: 0x1000,
                rkey: 0x77,
            }),
            atomic: None,
            payload,
        }
    }

    #[test]
    fn inline_ds_by_hand() {
        for (len, ds) in [(1, 1), (12, 1), (13, 2), (28, 2), (29, 3), (60, 4), (61, 5)] {
            assert_eq!(inline_ds(len), ds, "inline length {len}");
        }
    }

    #[test]
    fn three_sge_write_in_the_last_wqebb_wraps_its_third_data_segment() {
        let mut mem = vec![0u8; 512];
        let mut sq = RingBuf::from_slice(&mut mem).unwrap();
        let sges = [
            DataSeg {
                addr: 0xa000,
                len: 1,
                lkey: 1,
            },
            DataSeg {
                addr: 0xb000,
                len: 2,
                lkey: 2,
            },
            DataSeg {
                addr: 0xc000,
                len: 3,
                lkey: 3,
            },
        ];
        let w = write_send_wqe(
            &mut sq,
            &geo8(),
            7,
            &wqe(WqeOpcode::RDMA_WRITE, Payload::Sges(&sges)),
            8,
        )
        .unwrap();
        assert_eq!((w.ds, w.wqebbs, w.next_pi), (5, 2, 9));
        assert_eq!(&mem[480..484], &[0, 0, 0, 1]);
        assert_eq!(&mem[496..500], &[0, 0, 0, 2]);
        assert_eq!(&mem[0..16], &data_seg(sges[2]));
    }

    #[test]
    fn atomics_by_hand() {
        let mut mem = vec![0u8; 512];
        let mut sq = RingBuf::from_slice(&mut mem).unwrap();
        let old = [DataSeg {
            addr: 0x5000,
            len: 8,
            lkey: 9,
        }];
        let mut fa = wqe(WqeOpcode::ATOMIC_FA, Payload::Sges(&old));
        fa.atomic = Some(AtomicSeg {
            swap_add: 0x10,
            compare: 0xdead,
        });
        let w = write_send_wqe(&mut sq, &geo8(), 0, &fa, 8).unwrap();
        assert_eq!((w.ds, w.wqebbs), (4, 1));
        assert_eq!(&mem[32..40], &[0, 0, 0, 0, 0, 0, 0, 0x10]);
        assert_eq!(
            &mem[40..48],
            &[0; 8],
            "FETCH_AND_ADD writes no compare value"
        );
        assert_eq!(
            &mem[48..52],
            &[0, 0, 0, 8],
            "the old value's data segment is 8 bytes"
        );

        let mut cs = wqe(WqeOpcode::ATOMIC_CS, Payload::Sges(&old));
        cs.atomic = Some(AtomicSeg {
            swap_add: 9,
            compare: 5,
        });
        let mut sq = RingBuf::from_slice(&mut mem).unwrap();
        let w = write_send_wqe(&mut sq, &geo8(), 1, &cs, 8).unwrap();
        assert_eq!((w.ds, w.wqebbs), (4, 1));
        assert_eq!(&mem[96..104], &9u64.to_be_bytes());
        assert_eq!(&mem[104..112], &5u64.to_be_bytes());
        assert_eq!(mem[67], 0x11, "ATOMIC_CS opcode");

        // Bad atomics write nothing.
        let before = mem.clone();
        let mut bad = cs;
        bad.remote = Some(RemoteSeg {
            addr: 0x1004,
            rkey: 1,
        });
        let mut sq = RingBuf::from_slice(&mut mem).unwrap();
        assert_eq!(
            write_send_wqe(&mut sq, &geo8(), 2, &bad, 8),
            Err(WqeError::UnalignedAtomic(0x1004))
        );
        bad = cs;
        bad.atomic = None;
        assert_eq!(
            write_send_wqe(&mut sq, &geo8(), 2, &bad, 8),
            Err(WqeError::MissingAtomic(0x11))
        );
        bad = cs;
        bad.payload = Payload::Sges(&[]);
        assert_eq!(
            write_send_wqe(&mut sq, &geo8(), 2, &bad, 8),
            Err(WqeError::AtomicSge)
        );
        bad = cs;
        bad.remote = None;
        assert_eq!(
            write_send_wqe(&mut sq, &geo8(), 2, &bad, 8),
            Err(WqeError::MissingRemote(0x11))
        );
        assert_eq!(mem, before);
    }

    #[test]
    fn send_with_imm_round_trips_through_a_cqe() {
        let mut mem = vec![0u8; 512];
        let mut sq = RingBuf::from_slice(&mut mem).unwrap();
        let mut w = wqe(WqeOpcode::SEND_IMM, Payload::Inline(b"x"));
        w.remote = None;
        w.imm = 0x89AB_CDEF;
        write_send_wqe(&mut sq, &geo8(), 0, &w, 8).unwrap();
        assert_eq!(&mem[12..16], &[0x89, 0xAB, 0xCD, 0xEF]);
        let mut cqe = [0u8; 64];
        cqe[36..40].copy_from_slice(&mem[12..16]);
        cqe[63] = crate::prm::CqeOpcode::RESP_SEND_IMM.0 << 4;
        let c = crate::cqe::Cqe::decode(&cqe);
        assert_eq!(c.imm, 0x89AB_CDEF);
        assert_eq!(c.imm as u64, 0x0000_0000_89AB_CDEF);
        // Opcodes without an immediate write 0 there, whatever `imm` holds.
        let mut plain = w;
        plain.opcode = WqeOpcode::SEND;
        let mut sq = RingBuf::from_slice(&mut mem).unwrap();
        write_send_wqe(&mut sq, &geo8(), 1, &plain, 8).unwrap();
        assert_eq!(&mem[64 + 12..64 + 16], &[0; 4]);
    }

    #[test]
    fn read_refuses_inline() {
        let mut mem = vec![0u8; 512];
        let mut sq = RingBuf::from_slice(&mut mem).unwrap();
        let r = wqe(WqeOpcode::RDMA_READ, Payload::Inline(b"no"));
        assert_eq!(
            write_send_wqe(&mut sq, &geo8(), 0, &r, 8),
            Err(WqeError::InlineNotAllowed(0x10))
        );
        assert!(mem.iter().all(|&b| b == 0));
    }

    #[test]
    fn receive_wqe_ends_with_the_invalid_lkey_when_short() {
        let mut mem = vec![0xffu8; 4 * 64];
        let mut rq = RingBuf::from_slice(&mut mem).unwrap();
        let two = [
            DataSeg {
                addr: 0x10,
                len: 100,
                lkey: 5,
            },
            DataSeg {
                addr: 0x20,
                len: 0,
                lkey: 6,
            },
            DataSeg {
                addr: 0x30,
                len: 7,
                lkey: 7,
            },
        ];
        write_recv_wqe(&mut rq, 4, 64, 5, &two).unwrap();
        // Slot 5 & 3 = 1: two data segments (the empty one left out), then the terminator.
        assert_eq!(&mem[64..80], &data_seg(two[0]));
        assert_eq!(&mem[80..96], &data_seg(two[2]));
        assert_eq!(
            &mem[96..112],
            &[0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert!(mem[112..128].iter().all(|&b| b == 0xff));
        let four = [DataSeg {
            addr: 1,
            len: 1,
            lkey: 1,
        }; 4];
        let mut rq = RingBuf::from_slice(&mut mem).unwrap();
        write_recv_wqe(&mut rq, 4, 64, 2, &four).unwrap();
        assert_eq!(
            &mem[176..192],
            &data_seg(four[3]),
            "a full stride has no terminator"
        );
        let before = mem.clone();
        let mut rq = RingBuf::from_slice(&mut mem).unwrap();
        assert_eq!(
            write_recv_wqe(
                &mut rq,
                4,
                64,
                0,
                &[DataSeg {
                    addr: 1,
                    len: 1,
                    lkey: 1
                }; 5]
            ),
            Err(WqeError::RecvTooManySges {
                need: 5,
                stride: 64
            })
        );
        assert_eq!(mem, before);
    }

    #[test]
    fn decode_reads_back_what_was_written() {
        let mut mem = vec![0u8; 512];
        let mut sq = RingBuf::from_slice(&mut mem).unwrap();
        let payload: Vec<u8> = (0u8..100).collect();
        let mut w = wqe(WqeOpcode::RDMA_WRITE_IMM, Payload::Inline(&payload));
        w.imm = 0x0102_0304;
        write_send_wqe(&mut sq, &geo8(), 7, &w, 8).unwrap();
        let d = decode_send_wqe(&sq, 8, 7).unwrap();
        assert_eq!(
            (d.opcode, d.wqe_idx, d.qpn, d.ds, d.imm),
            (WqeOpcode::RDMA_WRITE_IMM, 7, 0x1234, 9, 0x0102_0304)
        );
        assert_eq!(d.remote, w.remote);
        let mut back = [0u8; 128];
        assert_eq!(d.inline_bytes(&sq, &mut back), 100);
        assert_eq!(&back[..100], &payload[..]);

        let old = [DataSeg {
            addr: 0x5000,
            len: 16,
            lkey: 9,
        }];
        let mut cs = wqe(WqeOpcode::ATOMIC_CS, Payload::Sges(&old));
        cs.atomic = Some(AtomicSeg {
            swap_add: 9,
            compare: 5,
        });
        write_send_wqe(&mut sq, &geo8(), 2, &cs, 8).unwrap();
        let d = decode_send_wqe(&sq, 8, 2).unwrap();
        assert_eq!(d.atomic, cs.atomic);
        assert_eq!(d.sge(&sq, 0), Some(DataSeg { len: 8, ..old[0] }));
        assert_eq!(d.sge(&sq, 1), None);
    }

    /// Every WQE shape, at every producer index of a small ring: where the
    /// WQE reaches the end of the ring (scratch buffer, then a wrapping copy)
    /// the ring holds the same bytes, rotated, as where it does not (direct
    /// stores), and nothing outside the bytes the WQE writes changes.
    #[test]
    fn wrapped_and_direct_writes_lay_out_the_same_bytes() {
        let sges = [
            DataSeg {
                addr: 0x1111_2222_3333_4444,
                len: 17,
                lkey: 0x55,
            },
            DataSeg {
                addr: 9,
                len: 0,
                lkey: 1,
            },
            DataSeg {
                addr: 0xabcdef,
                len: 4096,
                lkey: 0x66,
            },
        ];
        let old = [DataSeg {
            addr: 0x8000,
            len: 8,
            lkey: 3,
        }];
        let bytes: Vec<u8> = (1..=200u8).collect();
        let mut shapes = vec![
            wqe(WqeOpcode::RDMA_WRITE, Payload::Sges(&sges)),
            wqe(WqeOpcode::RDMA_READ, Payload::Sges(&sges[..1])),
            wqe(WqeOpcode::NOP, Payload::Inline(&[])),
        ];
        for len in [
            1, 3, 4, 7, 8, 12, 13, 15, 16, 28, 31, 32, 60, 64, 65, 100, 200,
        ] {
            shapes.push(wqe(
                WqeOpcode::RDMA_WRITE_IMM,
                Payload::Inline(&bytes[..len]),
            ));
            let mut send = wqe(WqeOpcode::SEND, Payload::Inline(&bytes[..len]));
            send.remote = None;
            shapes.push(send);
        }
        for op in [WqeOpcode::ATOMIC_CS, WqeOpcode::ATOMIC_FA] {
            let mut a = wqe(op, Payload::Sges(&old));
            a.atomic = Some(AtomicSeg {
                swap_add: 0x0102_0304_0506_0708,
                compare: 0x1112_1314_1516_1718,
            });
            shapes.push(a);
        }
        for w in &shapes {
            // The reference: written at index 0 of a ring large enough that
            // nothing wraps.
            let mut big = vec![0xeeu8; 16 * WQEBB];
            let mut ring = RingBuf::from_slice(&mut big).unwrap();
            let mut g = geo8();
            g.wqe_cnt = 16;
            let r = write_send_wqe(&mut ring, &g, 0, w, 16).unwrap();
            for pi in 0..8u32 {
                let mut mem = vec![0xeeu8; 8 * WQEBB];
                let mut sq = RingBuf::from_slice(&mut mem).unwrap();
                let got = write_send_wqe(&mut sq, &geo8(), pi, w, 8).unwrap();
                assert_eq!((got.ds, got.wqebbs), (r.ds, r.wqebbs));
                let base = pi as usize * WQEBB;
                for k in 0..mem.len() {
                    let want = if k < 16 * WQEBB - base {
                        // Bytes from the WQE's start on (mod the ring).
                        big.get(k).copied()
                    } else {
                        None
                    };
                    let at = (base + k) % mem.len();
                    // The ctrl segment's wqe_idx is the producer index.
                    let want = match (k, want) {
                        (1, Some(_)) => Some((pi >> 8) as u8),
                        (2, Some(_)) => Some(pi as u8),
                        (_, w) => w,
                    };
                    assert_eq!(Some(mem[at]), want, "{:?} at pi {pi}, byte {k}", w.opcode);
                }
            }
        }
    }

    /// Found by the `wqe_encode` fuzzer: a 2^31-byte data segment's byte count
    /// has bit 31 set, which the device reads as an inline segment.
    #[test]
    fn an_sge_of_2_pow_31_bytes_is_refused() {
        let mut mem = vec![0u8; 512];
        let mut sq = RingBuf::from_slice(&mut mem).unwrap();
        let big = [DataSeg {
            addr: 0,
            len: 1 << 31,
            lkey: 1,
        }];
        let w = wqe(WqeOpcode::RDMA_WRITE, Payload::Sges(&big));
        assert_eq!(
            write_send_wqe(&mut sq, &geo8(), 0, &w, 8),
            Err(WqeError::SgeTooLong { len: 1 << 31 })
        );
        assert!(mem.iter().all(|&b| b == 0));
    }
}
