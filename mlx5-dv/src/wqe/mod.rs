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
mod recv;
#[cfg(test)]
mod segment_tests;
mod segments;
#[cfg(test)]
mod tests;
mod umr;
#[cfg(test)]
mod umr_tests;

pub use decode::{
    decode_dc_send_wqe, decode_send_wqe, decode_ud_send_wqe, DecodeError, DecodedPayload,
    DecodedWqe,
};
pub(crate) use encode::{copy_inline, wqe_size_within, write_sized};
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
    /// The WQE opcode (ctrl segment byte 3).
    pub opcode: WqeOpcode,
    /// The ctrl segment's `fm_ce_se` byte (byte 11): completion, solicited, fence.
    pub flags: CtrlFlags,
    /// Immediate data as the application means it (SEND_IMM, RDMA_WRITE_IMM);
    /// written big-endian, so the responder's CQE returns the same `u32`.
    /// Other opcodes write 0.
    pub imm: u32,
    /// The raddr segment (RDMA and atomic opcodes; see the table).
    pub remote: Option<RemoteSeg>,
    /// The atomic segment (ATOMIC_CS, ATOMIC_FA).
    pub atomic: Option<AtomicSeg>,
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
    /// UD (`IBV_QPT_UD`): SEND and SEND_IMM only (rdma-core
    /// `MLX5_SUPPORTED_SEND_OPS_FLAGS_UD`); the segment as [`datagram_seg`]
    /// makes it (qkey at bytes 0..4, remote QPN at 8..12).
    Ud(&'a [u8; DATAGRAM_SEG]),
    /// DC, on a DCI: every operation RC has (rdma-core
    /// `MLX5_SUPPORTED_SEND_OPS_FLAGS_DCI` = `..._RC`): SEND, SEND_IMM,
    /// RDMA_WRITE, RDMA_WRITE_IMM, RDMA_READ, ATOMIC_CS, ATOMIC_FA; not NOP.
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
