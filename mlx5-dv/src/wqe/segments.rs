//! The segment codec: one encoder per segment of a send WQE (ctrl,
//! remote-address, atomic, data, inline header, datagram), and the
//! decoders of the data, remote-address and atomic segments. Every writer
//! of WQE bytes uses these: the general encoder (`encode`), the ring
//! driver's in-place posts (`driver::fast`), the receive WQE codec
//! (`recv`), the SRQ driver, the sim and the tests; the `*_seg` functions
//! give the same bytes as arrays, for tools and tests.
//!
//! Layouts (rdma-core `mlx5dv.h`, all fields big-endian; also the parent
//! module's table):
//!
//! ```text
//! ctrl   (struct mlx5_wqe_ctrl_seg)   0: opmod (1) wqe_idx (2) opcode (1)  4: qpn (3) ds (1)
//!                                     8: signature, rsvd, rsvd  11: fm_ce_se  12: imm (4)
//! raddr  (struct mlx5_wqe_raddr_seg)  0: raddr (8)  8: rkey (4)  12: reserved 0 (4)
//! atomic (struct mlx5_wqe_atomic_seg) 0: swap_add (8)  8: compare (8)
//! data   (struct mlx5_wqe_data_seg)   0: byte_count (4)  4: lkey (4)  8: addr (8)
//! inline (struct mlx5_wqe_inline_seg) 0: MLX5_INLINE_SEG | byte_count (4), then the bytes
//! datagram (struct mlx5_wqe_av, 48)   UD: 0: qkey (4)    8: dqp_dct = MLX5_EXTENDED_UD_AV | QPN (4)
//!                                     DC: 0: dc_key (8)  8: dqp_dct |= MLX5_EXTENDED_UD_AV | DCTN (4)
//! ```
//!
//! A 16-byte segment is built in registers as a [`Seg`], two 64-bit
//! values whose big-endian bytes it is, and stored with two 8-byte stores:
//! assembling it in a stack array first would make a later 16-byte reload
//! of the array miss store forwarding.

use super::{
    AtomicSeg, DataSeg, RemoteSeg, WqeError, AV_DQP_DCT, AV_KEY, DATAGRAM_SEG, EXTENDED_UD_AV,
};
use crate::prm::{CtrlFlags, WqeOpcode, DS, INLINE_SEG};

/// One 16-byte WQE segment, held as the two 64-bit values whose
/// big-endian bytes it is: bytes 0..8 are `hi`'s, bytes 8..16 `lo`'s
/// (rdma-core `mlx5dv.h` segment structs, all fields big-endian). What the
/// ring driver's in-place posts take ([`crate::driver::SendQueue::post_segs`])
/// after the ctrl segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seg {
    hi: u64,
    lo: u64,
}

impl Seg {
    /// A remote-address segment (`struct mlx5_wqe_raddr_seg`): `raddr` at
    /// bytes 0..8, `rkey` at 8..12, 4 reserved zero bytes; big-endian.
    #[inline(always)]
    pub const fn raddr(addr: u64, rkey: u32) -> Seg {
        Seg {
            hi: addr,
            lo: (rkey as u64) << 32,
        }
    }

    /// A data segment (`struct mlx5_wqe_data_seg`): `byte_count` at bytes
    /// 0..4 (`len`, below 2^31: bit 31 would mark an inline segment), `lkey`
    /// at 4..8, `addr` at 8..16; big-endian.
    #[inline(always)]
    pub const fn data(addr: u64, len: u32, lkey: u32) -> Seg {
        Seg {
            hi: ((len as u64) << 32) | lkey as u64,
            lo: addr,
        }
    }

    /// An atomic segment (`struct mlx5_wqe_atomic_seg`): `swap_add` at bytes
    /// 0..8, `compare` at 8..16; big-endian.
    #[inline(always)]
    pub const fn atomic(swap_add: u64, compare: u64) -> Seg {
        Seg {
            hi: swap_add,
            lo: compare,
        }
    }

    /// The segment's 16 bytes, as they lie in the ring.
    #[inline]
    pub const fn to_bytes(self) -> [u8; 16] {
        let (h, l) = (self.hi.to_be_bytes(), self.lo.to_be_bytes());
        let mut s = [0u8; 16];
        let mut i = 0;
        while i < 8 {
            s[i] = h[i];
            s[8 + i] = l[i];
            i += 1;
        }
        s
    }

    /// The segment read back from its 16 bytes (the inverse of [`Self::to_bytes`]).
    #[inline]
    pub fn from_bytes(b: &[u8; 16]) -> Seg {
        let (h, l) = b.split_at(8);
        Seg {
            hi: u64::from_be_bytes(h.try_into().unwrap()),
            lo: u64::from_be_bytes(l.try_into().unwrap()),
        }
    }

    /// The two 64-bit values whose big-endian bytes it is: bytes 0..8, 8..16.
    #[inline(always)]
    pub const fn words(self) -> (u64, u64) {
        (self.hi, self.lo)
    }

    /// The two 8-byte words as they are stored (big-endian).
    #[inline(always)]
    pub(crate) fn stored(self) -> [u64; 2] {
        [self.hi.to_be(), self.lo.to_be()]
    }

    /// Stores the segment at `dst`.
    ///
    /// # Safety
    /// `dst` must be valid for 16 bytes of writes.
    #[inline(always)]
    pub(crate) unsafe fn write(self, dst: *mut u8) {
        // SAFETY: the caller's guarantee.
        unsafe { put_stored(dst, self.stored()) }
    }
}

/// Stores a 16-byte segment given as its two 8-byte words as they lie in
/// memory (`Seg::stored`, [`ctrl_stored`]).
///
/// # Safety
/// `dst` must be valid for 16 bytes of writes.
#[inline(always)]
pub(crate) unsafe fn put_stored(dst: *mut u8, w: [u64; 2]) {
    // SAFETY: the caller's guarantee; unaligned stores need no alignment.
    unsafe { dst.cast::<[u64; 2]>().write_unaligned(w) }
}

/// The QP number as the ctrl segment encoder ([`ctrl_stored`]) takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CtrlQpn {
    /// The QP number (its low 24 bits are used).
    Raw(u32),
    /// [`qpn_word`] of the QP number, computed once per queue.
    Word(u64),
}

/// The QP's number as bytes 4..7 of a ctrl segment (`qpn_ds` without the
/// DS), in the first 8 bytes of the segment read as one host-order `u64`
/// (its high half on a little-endian host): what [`ctrl_stored`] ORs in
/// for [`CtrlQpn::Word`]. A queue computes it once, so that each of its
/// ctrl segments is a few shifts and ors with no byte swap of its own.
#[inline(always)]
pub(crate) fn qpn_word(qpn: u32) -> u64 {
    // `qpn << 8` drops bits 24..32 and leaves byte 7 (DS) zero; a 64-bit
    // swap puts its big-endian bytes at 4..7 of a little-endian host.
    let w = (qpn << 8) as u64;
    if cfg!(target_endian = "little") {
        w.swap_bytes()
    } else {
        w
    }
}

/// The ctrl segment encoder (`struct mlx5_wqe_ctrl_seg`, rdma-core
/// `mlx5dv_set_ctrl_seg` with opmod 0 and signature 0): the segment's two
/// 8-byte words as they lie in memory, for [`put_stored`]. Bytes 0..4
/// `opmod_idx_opcode` (0, the low 16 bits of `wqe_idx`, `opcode`), 4..8
/// `qpn_ds` (the low 24 bits of the QP number, `ds` in 6 bits), byte 11
/// `fm_ce_se` (`flags`), 12..16 `imm`; all big-endian.
///
/// Two routes to the same bytes (`wqe::tests` checks that they agree, and
/// the oracle tests check [`ctrl_seg`] against `mlx5dv_set_ctrl_seg`): with
/// the QP's word kept by its queue ([`CtrlQpn::Word`], the driver's posts)
/// each word is assembled already swapped; with a bare QP number
/// ([`CtrlQpn::Raw`], the stand-alone encoder) each word is assembled in
/// host order and swapped once, which costs less than swapping the QPN.
#[inline(always)]
pub(crate) fn ctrl_stored(
    opcode: WqeOpcode,
    wqe_idx: u32,
    qpn: CtrlQpn,
    ds: u32,
    flags: CtrlFlags,
    imm: u32,
) -> [u64; 2] {
    let qpn_word = match qpn {
        CtrlQpn::Raw(qpn) => {
            let w0 = ((wqe_idx & 0xffff) << 8) | opcode.0 as u32;
            let w1 = ((qpn & 0xff_ffff) << 8) | (ds & 0x3f);
            return [
                (((w0 as u64) << 32) | w1 as u64).to_be(),
                (((flags.bits() as u64) << 32) | imm as u64).to_be(),
            ];
        }
        CtrlQpn::Word(w) => w,
    };
    #[cfg(target_endian = "little")]
    {
        // Bytes 0..4, `opmod_idx_opcode` big-endian (0, the 16-bit index,
        // the opcode), read little-endian; bytes 4..8 `qpn_ds`; byte 11
        // `fm_ce_se`; bytes 12..16 the immediate.
        let w0 = ((wqe_idx as u16).swap_bytes() as u32) << 8 | (opcode.0 as u32) << 24;
        let w2 = (flags.bits() as u32) << 24;
        [
            w0 as u64 | ((ds & 0x3f) as u64) << 56 | qpn_word,
            w2 as u64 | (imm.to_be() as u64) << 32,
        ]
    }
    #[cfg(target_endian = "big")]
    {
        let w0 = ((wqe_idx & 0xffff) << 8) | opcode.0 as u32;
        [
            ((w0 as u64) << 32) | (ds & 0x3f) as u64 | qpn_word,
            ((flags.bits() as u64) << 32) | imm as u64,
        ]
    }
}

/// Encodes a ctrl segment (bytes 0..16 of every send WQE; `ctrl_stored`'s
/// layout): `wqe_idx` at bytes 1..3, `opcode` at 3, the low 24 bits of
/// `qpn` at 4..7, the low 6 bits of `ds` at 7, `flags` at 11, `imm` at
/// 12..16, big-endian.
#[inline]
pub fn ctrl_seg(
    opcode: WqeOpcode,
    wqe_idx: u16,
    qpn: u32,
    ds: u32,
    flags: CtrlFlags,
    imm: u32,
) -> [u8; 16] {
    let [a, b] = ctrl_stored(opcode, wqe_idx as u32, CtrlQpn::Raw(qpn), ds, flags, imm);
    let mut s = [0u8; 16];
    s[..8].copy_from_slice(&a.to_ne_bytes());
    s[8..].copy_from_slice(&b.to_ne_bytes());
    s
}

/// A ctrl segment's fields, decoded ([`decode_ctrl_seg`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtrlFields {
    /// Byte 3.
    pub opcode: WqeOpcode,
    /// Byte 0.
    pub opmod: u8,
    /// Bytes 1..3: the low 16 bits of the WQE index.
    pub wqe_idx: u16,
    /// Bytes 4..7: the QP number (24 bits).
    pub qpn: u32,
    /// Byte 7, low 6 bits: the WQE's size in 16-byte units.
    pub ds: u32,
    /// Byte 11, `fm_ce_se`.
    pub flags: CtrlFlags,
    /// Bytes 12..16, as the application meant it.
    pub imm: u32,
}

/// Decodes a ctrl segment (`struct mlx5_wqe_ctrl_seg`, [`ctrl_seg`]'s
/// layout, big-endian): the inverse of [`ctrl_seg`], opmod included.
#[inline]
pub fn decode_ctrl_seg(b: &[u8; 16]) -> CtrlFields {
    let be32 = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let (w0, w1) = (be32(0), be32(4));
    CtrlFields {
        opcode: WqeOpcode(w0 as u8),
        opmod: (w0 >> 24) as u8,
        wqe_idx: (w0 >> 8) as u16,
        qpn: w1 >> 8,
        ds: w1 & 0x3f,
        flags: CtrlFlags::from_bits_retain(b[11]),
        imm: be32(12),
    }
}

/// Encodes a remote-address segment ([`Seg::raddr`]).
#[inline]
pub fn raddr_seg(r: RemoteSeg) -> [u8; 16] {
    Seg::raddr(r.addr, r.rkey).to_bytes()
}

/// Encodes an atomic segment ([`Seg::atomic`]).
#[inline]
pub fn atomic_seg(a: AtomicSeg) -> [u8; 16] {
    Seg::atomic(a.swap_add, a.compare).to_bytes()
}

/// Size of an atomic operand and of the data segment that receives the old value.
pub const ATOMIC_SIZE: u32 = 8;

/// Encodes a data segment ([`Seg::data`]).
#[inline]
pub fn data_seg(d: DataSeg) -> [u8; 16] {
    Seg::data(d.addr, d.len, d.lkey).to_bytes()
}

/// Decodes a data segment (`struct mlx5_wqe_data_seg`, [`Seg::data`]'s
/// layout): byte count at 0..4, lkey at 4..8, address at 8..16, big-endian.
#[inline]
pub fn decode_data_seg(b: &[u8; 16]) -> DataSeg {
    let s = Seg::from_bytes(b);
    DataSeg {
        len: (s.hi >> 32) as u32,
        lkey: s.hi as u32,
        addr: s.lo,
    }
}

/// Decodes a remote-address segment (`struct mlx5_wqe_raddr_seg`,
/// [`Seg::raddr`]'s layout): address at 0..8, rkey at 8..12, big-endian.
#[inline]
pub fn decode_raddr_seg(b: &[u8; 16]) -> RemoteSeg {
    let s = Seg::from_bytes(b);
    RemoteSeg {
        addr: s.hi,
        rkey: (s.lo >> 32) as u32,
    }
}

/// Decodes an atomic segment (`struct mlx5_wqe_atomic_seg`,
/// [`Seg::atomic`]'s layout): swap/add at 0..8, compare at 8..16, big-endian.
#[inline]
pub fn decode_atomic_seg(b: &[u8; 16]) -> AtomicSeg {
    let s = Seg::from_bytes(b);
    AtomicSeg {
        swap_add: s.hi,
        compare: s.lo,
    }
}

/// DS count of an inline segment carrying `len` bytes: `ceil((len + 4) / 16)`.
#[inline(always)]
#[allow(clippy::manual_div_ceil)]
pub fn inline_ds(len: usize) -> u32 {
    // Rounded up by adding 15 (one add and one shift): `div_ceil` compiles
    // to more on this path (`SendQueue::post` of an inline WRITE, 4
    // instructions more in `scripts/insn-count`). `len` is a slice's length,
    // far below `usize::MAX - 19`.
    ((len + 4 + (DS - 1)) / DS) as u32
}

/// The inline segment header (`struct mlx5_wqe_inline_seg`): the 4-byte
/// big-endian word `MLX5_INLINE_SEG | len` (bit 31 set, `len` below 2^31)
/// that precedes the inline bytes; the bytes follow at offset 4, padded to
/// a multiple of 16 (the padding is not written, as rdma-core does not).
#[inline(always)]
pub const fn inline_hdr(len: u32) -> [u8; 4] {
    (len | INLINE_SEG).to_be_bytes()
}

/// Decodes the first 4 bytes of a payload segment: `Some(len)` for an
/// inline segment header (bit 31, `MLX5_INLINE_SEG`, set; the inverse of
/// [`inline_hdr`]), `None` for a data segment's byte count.
#[inline]
pub fn decode_inline_hdr(b: [u8; 4]) -> Option<u32> {
    let w = u32::from_be_bytes(b);
    (w & INLINE_SEG != 0).then_some(w & !INLINE_SEG)
}

/// Stores the inline segment header [`inline_hdr`] of `len` bytes at `dst`.
///
/// # Safety
/// `dst` must be valid for 4 bytes of writes.
#[inline(always)]
pub(crate) unsafe fn write_inline_hdr(dst: *mut u8, len: u32) {
    // SAFETY: the caller's guarantee; an unaligned store.
    unsafe { dst.cast::<[u8; 4]>().write_unaligned(inline_hdr(len)) }
}

/// Stores a UD WQE's datagram segment (`struct mlx5_wqe_datagram_seg`,
/// 48 bytes, 3 DS) at `dst`: the address handle's AV `av` with `qkey` at
/// bytes 0..4 and `remote_qpn`'s low 24 bits `| MLX5_EXTENDED_UD_AV` at
/// `dqp_dct`, bytes 8..12, patched in, big-endian (rdma-core
/// `set_datagram_seg`). Bytes 4..8 (the key union's reserved half) are
/// the AV's.
///
/// `dqp_dct` is overwritten: whatever the AV held in bytes 8..12 is gone
/// (DC's [`write_dc_datagram`] ORs into it instead).
///
/// # Safety
/// `dst` must be valid for 48 bytes of writes, not overlapping `av`.
#[inline(always)]
pub(crate) unsafe fn write_datagram(
    dst: *mut u8,
    av: &[u8; DATAGRAM_SEG],
    remote_qpn: u32,
    qkey: u32,
) {
    // SAFETY: the caller's guarantee: 48 bytes from `dst`, apart from `av`.
    unsafe {
        core::ptr::copy_nonoverlapping(av.as_ptr(), dst, DATAGRAM_SEG);
        dst.cast::<u32>().write_unaligned(qkey.to_be());
        dst.add(AV_DQP_DCT)
            .cast::<u32>()
            .write_unaligned((remote_qpn & 0xff_ffff | EXTENDED_UD_AV).to_be());
    }
}

/// Where a datagram segment sends ([`decode_datagram_seg`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DatagramDest {
    /// Bytes 0..4: the qkey (bit 31 set: the sending QP's own, IB spec C10-15).
    pub qkey: u32,
    /// Bytes 8..12 (`dqp_dct`), low 24 bits: the remote QP number.
    pub remote_qpn: u32,
}

/// Decodes the destination of a datagram segment (`struct
/// mlx5_wqe_datagram_seg`, big-endian): qkey at 0..4, the remote QPN in
/// the low 24 bits of `dqp_dct` at 8..12 (the inverse of `write_datagram`'s
/// patch).
#[inline]
pub fn decode_datagram_seg(av: &[u8; DATAGRAM_SEG]) -> DatagramDest {
    let be32 = |o: usize| u32::from_be_bytes([av[o], av[o + 1], av[o + 2], av[o + 3]]);
    DatagramDest {
        qkey: be32(0),
        remote_qpn: be32(AV_DQP_DCT) & 0xff_ffff,
    }
}

/// The datagram segment `write_datagram` stores, as bytes: `av` with
/// `qkey` at 0..4 and `remote_qpn | MLX5_EXTENDED_UD_AV` at 8..12 patched
/// in (what [`super::SendWqe::datagram`] takes).
#[inline]
pub fn datagram_seg(av: &[u8; DATAGRAM_SEG], remote_qpn: u32, qkey: u32) -> [u8; DATAGRAM_SEG] {
    let mut s = [0u8; DATAGRAM_SEG];
    // SAFETY: `s` is 48 bytes of ours, apart from `av`.
    unsafe { write_datagram(s.as_mut_ptr(), av, remote_qpn, qkey) };
    s
}

/// Stores a DC WQE's datagram segment (`struct mlx5_wqe_datagram_seg`, 48
/// bytes, 3 DS) at `dst`, as rdma-core's `mlx5_send_wr_set_dc_addr`
/// (`providers/mlx5/qp.c`) makes it: the address handle's AV `av`, then
///
/// - bytes 0..8 (`key.dc_key`, the whole 8-byte key union): `dc_key`,
///   big-endian; where UD has the qkey in bytes 0..4 and leaves 4..8 as
///   the AV had them, DC replaces all 8;
/// - bytes 8..12 (`dqp_dct`, big-endian): the AV's own word **OR**
///   `dctn | MLX5_EXTENDED_UD_AV`. Unlike UD ([`write_datagram`], which
///   overwrites the word), every bit the AV had set there stays set: bits
///   24..30 (byte 8's low 7 bits) pass through unchanged, bit 31 ends up
///   set, and bits 0..23 become the AV's bits OR `dctn`. An AV from
///   `mlx5_create_ah` has bits 0..23 clear, so they are the DCT number; an
///   AV with any of them set gives a different DCT number, as libmlx5's
///   would (this writer matches its bytes for every AV).
///
/// Bytes 12..48 (rate, SL, LIDs, MAC, GRH) are the AV's.
///
/// # Safety
/// `dst` must be valid for 48 bytes of writes, not overlapping `av`; and
/// `dctn` must fit 24 bits (checked in debug builds; [`dc_datagram_seg`]
/// refuses one that does not).
#[inline(always)]
pub(crate) unsafe fn write_dc_datagram(
    dst: *mut u8,
    av: &[u8; DATAGRAM_SEG],
    dctn: u32,
    dc_key: u64,
) {
    debug_assert!(dctn <= 0xff_ffff, "DCT number {dctn:#x} over 24 bits");
    let word: [u8; 4] = av[AV_DQP_DCT..AV_DQP_DCT + 4].try_into().unwrap();
    let dqp_dct = u32::from_be_bytes(word) | dctn | EXTENDED_UD_AV;
    // SAFETY: the caller's guarantee: 48 bytes from `dst`, apart from `av`;
    // the two patches are at bytes 0..8 and 8..12 of them.
    unsafe {
        core::ptr::copy_nonoverlapping(av.as_ptr(), dst, DATAGRAM_SEG);
        dst.add(AV_KEY)
            .cast::<u64>()
            .write_unaligned(dc_key.to_be());
        dst.add(AV_DQP_DCT)
            .cast::<u32>()
            .write_unaligned(dqp_dct.to_be());
    }
}

/// The datagram segment of a DC WQE, as bytes (`write_dc_datagram`'s
/// layout: `dc_key` big-endian at bytes 0..8, `dqp_dct` at 8..12 the AV's
/// word OR `dctn | MLX5_EXTENDED_UD_AV`, bytes 12..48 the AV's), for
/// [`super::SendWqe::datagram`] as [`super::Datagram::Dc`].
///
/// # Errors
/// [`WqeError::DctnTooWide`] when `dctn` does not fit 24 bits (libmlx5
/// would OR its high bits into byte 8's flags); no segment is made.
#[inline]
pub fn dc_datagram_seg(
    av: &[u8; DATAGRAM_SEG],
    dctn: u32,
    dc_key: u64,
) -> Result<[u8; DATAGRAM_SEG], WqeError> {
    if dctn > 0xff_ffff {
        return Err(WqeError::DctnTooWide { dctn });
    }
    let mut s = [0u8; DATAGRAM_SEG];
    // SAFETY: `s` is 48 bytes of ours, apart from `av`; `dctn` fits 24 bits.
    unsafe { write_dc_datagram(s.as_mut_ptr(), av, dctn, dc_key) };
    Ok(s)
}

/// Where a DC datagram segment sends ([`decode_dc_datagram_seg`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DcDest {
    /// Bytes 8..12 (`dqp_dct`, big-endian), low 24 bits: the DCT number.
    pub dctn: u32,
    /// Bytes 0..8 (`key.dc_key`, big-endian): the DC access key.
    pub dc_key: u64,
}

/// Decodes the destination of a DC datagram segment (`struct
/// mlx5_wqe_datagram_seg`, big-endian): the DC key at bytes 0..8 and the
/// DCT number in the low 24 bits of `dqp_dct` at 8..12; `dqp_dct`'s bits
/// 24..31 (`MLX5_EXTENDED_UD_AV` and the AV's own) are not part of it. The
/// inverse of [`dc_datagram_seg`] for an AV whose `dqp_dct` bits 0..23 are
/// clear.
#[inline]
pub fn decode_dc_datagram_seg(av: &[u8; DATAGRAM_SEG]) -> DcDest {
    let key: [u8; 8] = av[AV_KEY..AV_KEY + 8].try_into().unwrap();
    let w: [u8; 4] = av[AV_DQP_DCT..AV_DQP_DCT + 4].try_into().unwrap();
    DcDest {
        dctn: u32::from_be_bytes(w) & 0xff_ffff,
        dc_key: u64::from_be_bytes(key),
    }
}
