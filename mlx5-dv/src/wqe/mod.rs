//! WQE encoding: ctrl, datagram (UD and DC), remote-address, atomic, data
//! and inline segments; the writer that places one whole send WQE into an
//! SQ ring at producer index `pi`; and receive WQEs.
//!
//! Layouts (`docs/prm.md`; rdma-core `mlx5dv.h`
//! `struct mlx5_wqe_ctrl_seg` / `mlx5_wqe_raddr_seg` / `mlx5_wqe_data_seg` /
//! `mlx5_wqe_inline_seg`, `providers/mlx5/qp.c` `_mlx5_post_send`), all big-endian:
//!
//! ```text
//! ctrl   0: opmod<<24 | wqe_idx<<8 | opcode   4: qpn<<8 | ds   8: signature, rsvd, rsvd
//!       11: fm_ce_se                         12: immediate
//! av     0: key: UD qkey (4), rsvd (4); DC dc_key (8)
//!        8: dqp_dct: UD = 0x80000000 | remote QPN; DC |= 0x80000000 | DCT number
//!       12: stat_rate_sl
//!       13: fl_mlid  14: rlid (2)  16: rsvd (4)  20: rmac (6)  26: tclass  27: hop_limit
//!       28: grh_gid_fl (4)  32: rgid (16)
//! raddr  0: remote address (8)    8: rkey (4)    12: reserved 0 (4)
//! atomic 0: swap or add value (8)  8: compare value (8)
//! masked atomics (opcode 0x14 / 0x15, ctrl opmod 8 | (log2(size) - 2)), after raddr:
//!   4-byte CS 0: swap (4) 4: compare (4) 8: swap_mask (4) 12: compare_mask (4)
//!   4-byte FA 0: add (4)  4: field_boundary (4) 8: reserved 0 (8)
//!   8-byte CS 0: swap (8) 8: compare (8), then 0: swap_mask (8) 8: compare_mask (8)
//!   8-byte FA 0: add (8)  8: field_boundary (8)
//!   then the data segment of the local `size` bytes that get the old value
//! data   0: byte_count (4)        4: lkey (4)     8: local address (8)
//! inline 0: 0x80000000 | len (4)  4: bytes..., padded to a multiple of 16
//! ```
//!
//! Files: `segments` is the segment codec, one encoder per segment kind
//! (every writer of WQE bytes uses it, the ring driver's in-place posts
//! included) and the segment decoders; `encode` writes whole send WQEs into
//! a ring; `recv` writes receive WQEs and decodes them (RQ and SRQ);
//! `decode` reads a send WQE back (RC, UD, DC); `umr` writes and reads the
//! UMR WQEs of memory-window binds and `LOCAL_INV`. Everything is used from here
//! (`crate::wqe::*`).

#[cfg(test)]
mod dc_tests;
mod decode;
mod encode;
#[cfg(test)]
mod masked_tests;
mod recv;
#[cfg(test)]
mod segment_tests;
mod segments;
#[cfg(test)]
mod send_inv_tests;
#[cfg(test)]
mod tests;
mod umr;
#[cfg(test)]
mod umr_tests;

pub use decode::{
    decode_dc_send_wqe, decode_send_wqe, decode_ud_send_wqe, DecodeError, DecodedPayload,
    DecodedWqe,
};
pub(crate) use encode::{copy_inline, masked_size_or, wqe_size_within, write_masked, write_sized};
pub use encode::{wqe_size, write_send_wqe};
pub(crate) use recv::write_recv_segs;
pub use recv::{
    decode_recv_wqe, decode_srq_next_seg, srq_next_seg, write_recv_wqe, RecvLayout, RecvWqe,
    RECV_END, SRQ_NEXT_SEG, SRQ_NEXT_WQE_INDEX,
};
pub use segments::{
    atomic_seg, ctrl_seg, data_seg, datagram_seg, dc_datagram_seg, decode_atomic_seg,
    decode_ctrl_seg, decode_data_seg, decode_datagram_seg, decode_dc_datagram_seg,
    decode_inline_hdr, decode_raddr_seg, inline_ds, inline_hdr, raddr_seg, CtrlFields,
    DatagramDest, DcDest, Seg, ATOMIC_SIZE,
};
pub(crate) use segments::{
    ctrl_stored, put_stored, qpn_word, write_datagram, write_dc_datagram, write_inline_hdr, CtrlQpn,
};
pub(crate) use umr::write_umr_sized;
pub use umr::{
    decode_umr_wqe, umr_size, umr_wqe_bytes, write_umr_wqe, DecodedUmr, MwAccess, MwType, UmrBind,
    UmrWqe, UMR, UMR_MAX_LEN,
};

use crate::prm::{CtrlFlags, WqeOpcode};

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
    /// Remote virtual address (raddr segment bytes 0..8).
    pub addr: u64,
    /// Remote key of the memory region holding it (raddr segment bytes 8..12).
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

/// The operand size of an extended (masked) atomic, 4 or 8 bytes; the
/// ctrl segment's opmod byte carries it as `8 | (log2(size) - 2)` (UCX
/// `UCT_IB_MLX5_OPMOD_EXT_ATOMIC`, `src/uct/ib/mlx5/ib_mlx5.h`): 0x08 for 4
/// bytes, 0x09 for 8.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicSize {
    /// 4 bytes (a `u32`): big-endian on the wire and in the response.
    B4,
    /// 8 bytes (a `u64`): the response in the device's
    /// `atomic_req_8B_endianness_mode` (host order on the sim).
    B8,
}

impl AtomicSize {
    /// The size in bytes: 4 or 8.
    #[inline(always)]
    pub const fn bytes(self) -> u32 {
        match self {
            AtomicSize::B4 => 4,
            AtomicSize::B8 => 8,
        }
    }

    /// The ctrl segment's opmod for this size: `8 | (log2(size) - 2)`.
    #[inline(always)]
    pub const fn opmod(self) -> u8 {
        match self {
            AtomicSize::B4 => 0x08,
            AtomicSize::B8 => 0x09,
        }
    }

    /// The size an opmod byte names (`None` for any other than 0x08 and 0x09).
    pub const fn from_opmod(opmod: u8) -> Option<AtomicSize> {
        match opmod {
            0x08 => Some(AtomicSize::B4),
            0x09 => Some(AtomicSize::B8),
            _ => None,
        }
    }

    /// The size of `bytes` bytes (`None` unless 4 or 8).
    pub const fn from_bytes(bytes: u32) -> Option<AtomicSize> {
        match bytes {
            4 => Some(AtomicSize::B4),
            8 => Some(AtomicSize::B8),
            _ => None,
        }
    }

    /// The old value a masked atomic of this size left in its local SGE,
    /// from the SGE's first `bytes()` bytes (`None` if `resp` is shorter):
    /// 4 bytes big-endian (4-byte extended atomics reply big-endian); 8
    /// bytes in host order, the device's `atomic_req_8B_endianness_mode` 1
    /// (host endianness: the sim's, and the mode the kernel sets where the
    /// device has it; a device left in mode 0 replies big-endian).
    pub fn old_value(self, resp: &[u8]) -> Option<u64> {
        Some(match self {
            AtomicSize::B4 => u32::from_be_bytes(resp.get(..4)?.try_into().ok()?) as u64,
            AtomicSize::B8 => u64::from_ne_bytes(resp.get(..8)?.try_into().ok()?),
        })
    }

    /// The largest operand of this size (`u32::MAX` or `u64::MAX`).
    #[inline(always)]
    pub const fn max_value(self) -> u64 {
        match self {
            AtomicSize::B4 => u32::MAX as u64,
            AtomicSize::B8 => u64::MAX,
        }
    }
}

/// Operands of a masked atomic (`MLX5_OPCODE_ATOMIC_MASKED_CS` 0x14 or
/// `MLX5_OPCODE_ATOMIC_MASKED_FA` 0x15), named as UCX's segments
/// (`struct uct_ib_mlx5_atomic_masked_*_seg`, `ib_mlx5.h`; written in
/// `rc/rc_mlx5.inl`): the values as numbers, each written big-endian in
/// `size` bytes ([`masked_atomic_segs`]).
///
/// - MASKED_CS: at the responder, `old = *remote`; if `(old ^ compare) &
///   compare_mask == 0`, `*remote = (old & !swap_mask) | (swap &
///   swap_mask)`.
/// - MASKED_FA: `*remote = old + add`, the sum cut into fields by
///   `field_boundary` (`compare` here): a set bit marks the most
///   significant bit of a field, so no carry leaves it (all bits set: XOR;
///   none: a plain add). `swap_mask` and `compare_mask` are not written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaskedAtomic {
    /// The operand size (the ctrl segment's opmod).
    pub size: AtomicSize,
    /// MASKED_CS: the value swapped in (under `swap_mask`); MASKED_FA: the value added.
    pub swap_add: u64,
    /// MASKED_CS: the value compared with (under `compare_mask`);
    /// MASKED_FA: the field boundaries.
    pub compare: u64,
    /// MASKED_CS: the bits of `swap_add` stored. Not written for MASKED_FA.
    pub swap_mask: u64,
    /// MASKED_CS: the bits compared. Not written for MASKED_FA.
    pub compare_mask: u64,
}

impl MaskedAtomic {
    /// Whether every operand the opcode writes fits `size` bytes.
    #[inline]
    pub fn fits(&self, opcode: WqeOpcode) -> bool {
        let max = self.size.max_value();
        let cs = opcode == WqeOpcode::ATOMIC_MASKED_CS;
        self.swap_add <= max
            && self.compare <= max
            && (!cs || (self.swap_mask <= max && self.compare_mask <= max))
    }
}

/// The operand segments of a masked atomic (after raddr, before the data
/// segment), and how many of the two are used (1, or 2 for an 8-byte
/// MASKED_CS); the module's table gives the layouts. Operands wider than
/// `size` are cut to it ([`wqe_size`] refuses them first).
#[inline(always)]
pub fn masked_atomic_segs(opcode: WqeOpcode, m: &MaskedAtomic) -> ([Seg; 2], usize) {
    let cs = opcode == WqeOpcode::ATOMIC_MASKED_CS;
    let lo32 = |v: u64| v & 0xffff_ffff;
    match (m.size, cs) {
        (AtomicSize::B4, true) => (
            [
                Seg::atomic(
                    lo32(m.swap_add) << 32 | lo32(m.compare),
                    lo32(m.swap_mask) << 32 | lo32(m.compare_mask),
                ),
                Seg::atomic(0, 0),
            ],
            1,
        ),
        (AtomicSize::B4, false) => (
            [
                Seg::atomic(lo32(m.swap_add) << 32 | lo32(m.compare), 0),
                Seg::atomic(0, 0),
            ],
            1,
        ),
        (AtomicSize::B8, true) => (
            [
                Seg::atomic(m.swap_add, m.compare),
                Seg::atomic(m.swap_mask, m.compare_mask),
            ],
            2,
        ),
        (AtomicSize::B8, false) => ([Seg::atomic(m.swap_add, m.compare), Seg::atomic(0, 0)], 1),
    }
}

/// Reads a masked atomic's operand segments back (`segs`: the 16 bytes
/// after raddr, and the next 16 for an 8-byte MASKED_CS): the inverse of
/// [`masked_atomic_segs`] (MASKED_FA's masks read as 0).
pub fn decode_masked_atomic(
    opcode: WqeOpcode,
    size: AtomicSize,
    segs: [&[u8; 16]; 2],
) -> MaskedAtomic {
    let a = Seg::from_bytes(segs[0]).words();
    let cs = opcode == WqeOpcode::ATOMIC_MASKED_CS;
    let (swap_add, compare, swap_mask, compare_mask) = match (size, cs) {
        (AtomicSize::B4, true) => (a.0 >> 32, a.0 & 0xffff_ffff, a.1 >> 32, a.1 & 0xffff_ffff),
        (AtomicSize::B4, false) => (a.0 >> 32, a.0 & 0xffff_ffff, 0, 0),
        (AtomicSize::B8, true) => {
            let b = Seg::from_bytes(segs[1]).words();
            (a.0, a.1, b.0, b.1)
        }
        (AtomicSize::B8, false) => (a.0, a.1, 0, 0),
    };
    MaskedAtomic {
        size,
        swap_add,
        compare,
        swap_mask,
        compare_mask,
    }
}

/// One send WQE to encode.
///
/// What each opcode takes (rdma-core `_mlx5_post_send`):
///
/// | opcode | remote | atomic | payload |
/// |---|---|---|---|
/// | SEND, SEND_IMM | - | - | SGEs or inline |
/// | SEND_INVAL (RC, UC, DC; not UD) | - | - | SGEs or inline; `imm` the rkey to invalidate |
/// | RDMA_WRITE, RDMA_WRITE_IMM | required | - | SGEs or inline |
/// | RDMA_READ | required | - | SGEs (scatter list) |
/// | ATOMIC_CS, ATOMIC_FA | required, 8-byte aligned | required | one SGE of at least 8 bytes (gets the old value) |
/// | ATOMIC_MASKED_CS, ATOMIC_MASKED_FA | required, aligned to the size | `masked` | one SGE of at least `size` bytes (gets the old value) |
/// | NOP | - | - | none |
#[derive(Clone, Copy, Debug)]
pub struct SendWqe<'a> {
    /// The WQE opcode (ctrl segment byte 3).
    pub opcode: WqeOpcode,
    /// The ctrl segment's `fm_ce_se` byte (byte 11): completion, solicited, fence.
    pub flags: CtrlFlags,
    /// The ctrl segment's immediate (bytes 12..16), written big-endian:
    /// for SEND_IMM and RDMA_WRITE_IMM the immediate data as the
    /// application means it (the responder's CQE returns the same `u32`);
    /// for SEND_INVAL the rkey to invalidate at the responder (libmlx5
    /// `_mlx5_post_send`: `ctrl->imm = htobe32(wr->invalidate_rkey)`; the
    /// responder's RESP_SEND_INV CQE returns it in `imm_inval_pkey`).
    /// Other opcodes write 0 ([`WqeOpcode::has_imm`]).
    pub imm: u32,
    /// The raddr segment (RDMA and atomic opcodes; see the table).
    pub remote: Option<RemoteSeg>,
    /// The atomic segment (ATOMIC_CS, ATOMIC_FA).
    pub atomic: Option<AtomicSeg>,
    /// The masked atomic's operands and size (ATOMIC_MASKED_CS,
    /// ATOMIC_MASKED_FA; the ctrl segment's opmod is its size's). A
    /// reference, so that every other WQE pays one word for it.
    pub masked: Option<&'a MaskedAtomic>,
    /// The data or inline segments.
    pub payload: Payload<'a>,
    /// UD and DC: the finished 48-byte datagram segment (`struct
    /// mlx5_wqe_datagram_seg`, the AV with its key and `dqp_dct` patched in:
    /// [`datagram_seg`] for UD, [`dc_datagram_seg`] for DC), written right
    /// after the ctrl segment (3 DS) and before the operation's segments
    /// (rdma-core `_mlx5_post_send` and the `ibv_wr_*` builders: ctrl,
    /// datagram, raddr, atomic, data or inline). `None` for RC.
    pub datagram: Option<Datagram<'a>>,
}

/// A WQE's finished datagram segment and the transport it is for, which
/// decides the opcodes [`wqe_size`] takes with it.
///
/// The segment lies at WQE bytes 16..64: a WQE starts at a WQEBB boundary
/// and ctrl (16 bytes) plus the datagram segment (48) fill its first WQEBB
/// exactly, so the datagram segment never crosses the ring's end; the
/// segments after it may (they continue at the ring's start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Datagram<'a> {
    /// UD (`IBV_QPT_UD`): SEND and SEND_IMM only, not SEND_INVAL (rdma-core
    /// `MLX5_SUPPORTED_SEND_OPS_FLAGS_UD`); the segment as [`datagram_seg`]
    /// makes it (qkey at bytes 0..4, remote QPN at 8..12).
    Ud(&'a [u8; DATAGRAM_SEG]),
    /// DC, on a DCI: every operation RC has (rdma-core
    /// `MLX5_SUPPORTED_SEND_OPS_FLAGS_DCI` = `..._RC`): SEND, SEND_IMM,
    /// SEND_INVAL, RDMA_WRITE, RDMA_WRITE_IMM, RDMA_READ, ATOMIC_CS,
    /// ATOMIC_FA; not NOP.
    /// The segment as [`dc_datagram_seg`] makes it (DC key at bytes 0..8,
    /// DCT number at 8..12).
    Dc(&'a [u8; DATAGRAM_SEG]),
}

impl<'a> Datagram<'a> {
    /// The segment's 48 bytes, as they go into the WQE.
    #[inline(always)]
    pub fn bytes(self) -> &'a [u8; DATAGRAM_SEG] {
        match self {
            Datagram::Ud(b) | Datagram::Dc(b) => b,
        }
    }
}

/// Bytes of a UD or DC WQE's datagram segment (`struct mlx5_wqe_av`, 3 DS).
pub const DATAGRAM_SEG: usize = 48;

/// Offset of the AV's 8-byte `key` union (`struct mlx5_wqe_av`): UD's
/// `key.qkey.qkey` (4 bytes, big-endian; then 4 reserved) or DC's
/// `key.dc_key` (8 bytes, big-endian).
pub const AV_KEY: usize = 0;

/// Offset of the AV's `dqp_dct` word (big-endian; UD: the remote QPN, DC:
/// the DCT number, each in the low 24 bits): after the 8-byte key union
/// ([`AV_KEY`]).
pub const AV_DQP_DCT: usize = 8;

/// `MLX5_EXTENDED_UD_AV`: OR-ed into the AV's `dqp_dct` word, the
/// 48-byte AV form.
pub const EXTENDED_UD_AV: u32 = 0x8000_0000;

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
    /// The WQE needs more DS (16-byte units) than the ctrl segment's 6-bit `ds` field holds (63).
    #[error("WQE needs {ds} DS; the ctrl segment's ds field holds at most 63")]
    TooManyDs {
        /// DS the WQE needs.
        ds: u32,
    },
    /// The WQE needs more WQEBBs than the QP's largest send WQE ([`SqGeometry::max_wqebbs`]).
    #[error("WQE needs {wqebbs} WQEBBs; this QP's largest send WQE is {max} WQEBBs")]
    TooBig {
        /// WQEBBs the WQE needs.
        wqebbs: u32,
        /// The QP's largest send WQE, in WQEBBs.
        max: u32,
    },
    /// The inline payload is longer than the QP's `max_inline_data`.
    #[error("inline payload of {len} bytes exceeds this QP's max_inline_data of {max} bytes")]
    InlineTooLong {
        /// Payload length in bytes.
        len: usize,
        /// [`SqGeometry::max_inline`], in bytes.
        max: u32,
    },
    /// The SGE lengths sum to more than 2^31 bytes (the largest message).
    #[error("scatter/gather lengths sum to {total} bytes, more than 2^31")]
    LengthOverflow {
        /// The sum, in bytes.
        total: u64,
    },
    /// One SGE is 2^31 bytes or longer (bit 31 of a data segment's byte count marks inline data).
    #[error("an SGE of {len} bytes: a data segment's byte count holds at most 2^31 - 1 (bit 31 marks inline data)")]
    SgeTooLong {
        /// The SGE's length in bytes.
        len: u32,
    },
    /// An RDMA or atomic opcode (the `u8`) without [`SendWqe::remote`].
    #[error("opcode {0:#04x} needs a remote address and rkey")]
    MissingRemote(u8),
    /// An atomic opcode (the `u8`) without [`SendWqe::atomic`].
    #[error("opcode {0:#04x} needs atomic operands (swap/add, compare)")]
    MissingAtomic(u8),
    /// An atomic's remote address (the `u64`) is not 8-byte aligned.
    #[error("atomic remote address {0:#x} is not 8-byte aligned")]
    UnalignedAtomic(u64),
    /// A masked atomic's remote address is not aligned to its operand size.
    #[error("masked atomic remote address {addr:#x} is not {size}-byte aligned")]
    MaskedAtomicUnaligned {
        /// The remote address.
        addr: u64,
        /// The operand size in bytes (4 or 8).
        size: u32,
    },
    /// A masked atomic's payload is not one SGE of at least `size` bytes.
    #[error("a {size}-byte masked atomic takes exactly one SGE of at least {size} bytes for the old value")]
    MaskedAtomicSge {
        /// The operand size in bytes (4 or 8).
        size: u32,
    },
    /// A masked atomic's operand does not fit its size (4 bytes: above `u32::MAX`).
    #[error("a {size}-byte masked atomic's operands must fit {size} bytes")]
    MaskedOperandTooWide {
        /// The operand size in bytes.
        size: u32,
    },
    /// An atomic's payload is not one SGE of at least 8 bytes.
    #[error("an atomic takes exactly one SGE of at least 8 bytes for the old value")]
    AtomicSge,
    /// A nonempty inline payload on an opcode (the `u8`) that takes none (RDMA_READ, NOP).
    #[error("opcode {0:#04x} cannot carry inline data")]
    InlineNotAllowed(u8),
    /// A receive WQE's data segments (16 bytes each) do not fit the RQ stride.
    #[error("a receive WQE of {need} data segments does not fit the RQ stride of {stride} bytes")]
    RecvTooManySges {
        /// Data segments needed.
        need: usize,
        /// The RQ stride in bytes.
        stride: u32,
    },
    /// An RQ description that is not powers of two, a stride under 16 bytes, or a ring of another length.
    #[error("RQ geometry: {wqe_cnt} WQEs of {stride} bytes, ring of {ring_len} bytes (need powers of two, stride at least 16)")]
    BadRqGeometry {
        /// Receive WQEs in the ring.
        wqe_cnt: u32,
        /// Bytes per receive WQE.
        stride: u32,
        /// Ring length in bytes.
        ring_len: usize,
    },
    /// A DCT number wider than 24 bits (the low 24 bits of the AV's
    /// `dqp_dct` word hold it; [`dc_datagram_seg`]).
    #[error("DCT number {dctn:#x} does not fit 24 bits")]
    DctnTooWide {
        /// The DCT number given.
        dctn: u32,
    },
    /// An opcode (the `u8`) this encoder does not write (or not with this
    /// transport: [`Datagram`]).
    #[error("opcode {0:#04x} is not supported by this encoder")]
    UnsupportedOpcode(u8),
    /// A memory-window bind of 0 bytes or of more than 2^31 (a UMR KLM's
    /// 32-bit byte count; [`UMR_MAX_LEN`]); a zero-length UMR is written
    /// with [`UmrWqe::bind`] `None`.
    #[error("a memory-window bind of {len} bytes: a bind maps 1 to 2^31 bytes")]
    UmrLength {
        /// The length asked for, in bytes.
        len: u64,
    },
    /// Fewer WQEBBs are free in the SQ than the WQE needs.
    #[error("WQE needs {need} WQEBBs; only {free} are free in the SQ")]
    QueueFull {
        /// WQEBBs the WQE needs.
        need: u32,
        /// WQEBBs free.
        free: u32,
    },
    /// The SQ's WQEBB count is not a power of two, or the ring is not `wqe_cnt * 64` bytes.
    #[error("SQ geometry says {wqe_cnt} WQEBBs, but the ring holds {ring_len} bytes (need a power of two, times 64)")]
    BadGeometry {
        /// [`SqGeometry::wqe_cnt`].
        wqe_cnt: u32,
        /// Ring length in bytes.
        ring_len: usize,
    },
    /// The SQ already holds `max_post` outstanding work requests.
    #[error("the SQ already holds max_send_wr = {max_post} outstanding work requests")]
    WrLimit {
        /// The most outstanding work requests the SQ takes (`max_send_wr`).
        max_post: u32,
    },
}
