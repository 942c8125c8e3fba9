//! The segments of a send WQE, one at a time: ctrl, remote-address, atomic
//! and data segments as bytes (for tools and tests), and the register-built
//! stores the writer uses (layouts in the parent module's documentation).

use super::{AtomicSeg, DataSeg, RemoteSeg};
use crate::prm::{CtrlFlags, WqeOpcode, DS};

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
pub(crate) fn ctrl_words(
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
pub(super) unsafe fn put_be64x2(dst: *mut u8, a: u64, b: u64) {
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
pub(super) unsafe fn put_be32x4(dst: *mut u8, w: [u32; 4]) {
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
