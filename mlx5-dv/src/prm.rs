//! PRM constants: WQE and CQE opcodes, control-segment flags, error syndromes.
//!
//! Sources: rdma-core `providers/mlx5/mlx5dv.h` (`MLX5_OPCODE_*`, `MLX5_CQE_*`,
//! `MLX5_WQE_CTRL_*`), `providers/mlx5/cq.c` (`mlx5_handle_error_cqe`), and the
//! kernel's `include/linux/mlx5/qp.h`. All multi-byte ring fields are big-endian.

use bitflags::bitflags;

/// Size of one WQE basic block (WQEBB) in bytes.
pub const WQEBB: usize = 64;
/// Size of one data segment ("DS"), the unit of the ctrl segment's `ds` count, in bytes.
pub const DS: usize = 16;
/// Largest `ds` the 6-bit field in the ctrl segment can carry.
pub const MAX_DS: u32 = 63;
/// Size of the CQE proper in bytes (the last 64 bytes of a 128-byte CQE slot).
pub const CQE64: usize = 64;
/// `MLX5_INVALID_LKEY`: ends a receive WQE shorter than the RQ stride.
pub const INVALID_LKEY: u32 = 0x100;
/// Inline segment header flag (`MLX5_INLINE_SEG`), OR-ed with the byte count.
pub const INLINE_SEG: u32 = 0x8000_0000;

/// WQE opcode, byte 3 of the ctrl segment (`MLX5_OPCODE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WqeOpcode(pub u8);

impl WqeOpcode {
    /// `MLX5_OPCODE_NOP`: no operation (a WQE that only completes).
    pub const NOP: Self = Self(0x00);
    /// `MLX5_OPCODE_SEND_INVAL`: SEND with invalidate (an rkey to invalidate at the responder).
    pub const SEND_INVAL: Self = Self(0x01);
    /// `MLX5_OPCODE_RDMA_WRITE`: RDMA WRITE.
    pub const RDMA_WRITE: Self = Self(0x08);
    /// `MLX5_OPCODE_RDMA_WRITE_IMM`: RDMA WRITE with immediate (consumes a responder receive).
    pub const RDMA_WRITE_IMM: Self = Self(0x09);
    /// `MLX5_OPCODE_SEND`: SEND.
    pub const SEND: Self = Self(0x0a);
    /// `MLX5_OPCODE_SEND_IMM`: SEND with immediate.
    pub const SEND_IMM: Self = Self(0x0b);
    /// `MLX5_OPCODE_RDMA_READ`: RDMA READ.
    pub const RDMA_READ: Self = Self(0x10);
    /// `MLX5_OPCODE_ATOMIC_CS`: 8-byte atomic compare and swap.
    pub const ATOMIC_CS: Self = Self(0x11);
    /// `MLX5_OPCODE_ATOMIC_FA`: 8-byte atomic fetch and add.
    pub const ATOMIC_FA: Self = Self(0x12);
    /// `MLX5_OPCODE_ATOMIC_MASKED_CS`: extended (masked) compare and swap,
    /// 4 or 8 bytes by the ctrl segment's opmod (`wqe::AtomicSize`).
    pub const ATOMIC_MASKED_CS: Self = Self(0x14);
    /// `MLX5_OPCODE_ATOMIC_MASKED_FA`: extended (masked) fetch and add,
    /// 4 or 8 bytes by the ctrl segment's opmod (`wqe::AtomicSize`).
    pub const ATOMIC_MASKED_FA: Self = Self(0x15);

    /// rdma-core's name without the `MLX5_OPCODE_` prefix (`None` if unknown).
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0x00 => "NOP",
            0x01 => "SEND_INVAL",
            0x08 => "RDMA_WRITE",
            0x09 => "RDMA_WRITE_IMM",
            0x0a => "SEND",
            0x0b => "SEND_IMM",
            0x0e => "TSO",
            0x10 => "RDMA_READ",
            0x11 => "ATOMIC_CS",
            0x12 => "ATOMIC_FA",
            0x14 => "ATOMIC_MASKED_CS",
            0x15 => "ATOMIC_MASKED_FA",
            0x19 => "FMR",
            0x1b => "LOCAL_INVAL",
            0x1f => "CONFIG_CMD",
            0x20 => "SET_PSV",
            0x25 => "UMR",
            0x28 => "TAG_MATCHING",
            0x2c => "FLOW_TBL_ACCESS",
            0x2f => "MMO",
            _ => return None,
        })
    }

    /// Whether the WQE carries a remote-address segment after the ctrl segment.
    pub fn has_raddr(self) -> bool {
        matches!(
            self,
            Self::RDMA_WRITE
                | Self::RDMA_WRITE_IMM
                | Self::RDMA_READ
                | Self::ATOMIC_CS
                | Self::ATOMIC_FA
                | Self::ATOMIC_MASKED_CS
                | Self::ATOMIC_MASKED_FA
        )
    }

    /// Whether it is a masked (extended) atomic: ATOMIC_MASKED_CS or ATOMIC_MASKED_FA.
    #[inline(always)]
    pub fn is_masked_atomic(self) -> bool {
        matches!(self, Self::ATOMIC_MASKED_CS | Self::ATOMIC_MASKED_FA)
    }

    /// Whether the ctrl segment's immediate field (bytes 12..16,
    /// big-endian) is meaningful: immediate data (RDMA_WRITE_IMM,
    /// SEND_IMM) or the rkey to invalidate at the responder (SEND_INVAL;
    /// rdma-core `qp.c` `send_ieth`: `htobe32(wr->invalidate_rkey)`).
    pub fn has_imm(self) -> bool {
        matches!(
            self,
            Self::RDMA_WRITE_IMM | Self::SEND_IMM | Self::SEND_INVAL
        )
    }

    /// Whether the ctrl segment's immediate field is immediate data that
    /// the responder's receive CQE returns as such (RDMA_WRITE_IMM,
    /// SEND_IMM): [`Self::has_imm`] without SEND_INVAL, whose field is an
    /// rkey. The in-place posts, which never write SEND_INVAL, test this.
    #[inline(always)]
    pub fn has_imm_data(self) -> bool {
        matches!(self, Self::RDMA_WRITE_IMM | Self::SEND_IMM)
    }
}

bitflags! {
    /// Byte 11 of the ctrl segment, `fm_ce_se`: fence mode in bits 7:5,
    /// completion-event mode in bits 3:2, solicited event in bit 1.
    ///
    /// `FENCE` is rdma-core's `MLX5_WQE_CTRL_FENCE` (4 << 5); the kernel's
    /// `MLX5_FENCE_MODE_FENCE` is 2 << 5 (see `docs/prm.md`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct CtrlFlags: u8 {
        /// `MLX5_WQE_CTRL_CQ_UPDATE` (2 << 2): generate a CQE for this WQE (signaled).
        const CQ_UPDATE = 2 << 2;
        /// `MLX5_WQE_CTRL_SOLICITED` (1 << 1).
        const SOLICITED = 1 << 1;
        /// `MLX5_WQE_CTRL_FENCE` (4 << 5): wait for earlier RDMA READ/atomics.
        const FENCE = 4 << 5;
        /// `MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE` (1 << 5).
        const SMALL_FENCE = 1 << 5;
    }
}

/// CQE opcode, bits 7:4 of `op_own` (`MLX5_CQE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CqeOpcode(pub u8);

impl CqeOpcode {
    /// `MLX5_CQE_REQ`: requester completion (a send-queue WQE succeeded).
    pub const REQ: Self = Self(0);
    /// `MLX5_CQE_RESP_WR_IMM`: responder, RDMA WRITE with immediate received.
    pub const RESP_WR_IMM: Self = Self(1);
    /// `MLX5_CQE_RESP_SEND`: responder, SEND received.
    pub const RESP_SEND: Self = Self(2);
    /// `MLX5_CQE_RESP_SEND_IMM`: responder, SEND with immediate received.
    pub const RESP_SEND_IMM: Self = Self(3);
    /// `MLX5_CQE_RESP_SEND_INV`: responder, SEND with invalidate received.
    pub const RESP_SEND_INV: Self = Self(4);
    /// `MLX5_CQE_RESIZE_CQ`: marks the end of the old buffer of a resized CQ.
    pub const RESIZE_CQ: Self = Self(5);
    /// `MLX5_CQE_NO_PACKET`: a completion with no packet behind it.
    pub const NO_PACKET: Self = Self(6);
    /// `MLX5_CQE_SIG_ERR`: signature (T10-DIF) error.
    pub const SIG_ERR: Self = Self(12);
    /// `MLX5_CQE_REQ_ERR`: requester error; the syndrome says which.
    pub const REQ_ERR: Self = Self(13);
    /// `MLX5_CQE_RESP_ERR`: responder error; the syndrome says which.
    pub const RESP_ERR: Self = Self(14);
    /// Never software-owned: fresh CQ slots hold `op_own = 0xF0`.
    pub const INVALID: Self = Self(15);

    /// rdma-core's name without the `MLX5_CQE_` prefix (`None` if unknown).
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "REQ",
            1 => "RESP_WR_IMM",
            2 => "RESP_SEND",
            3 => "RESP_SEND_IMM",
            4 => "RESP_SEND_INV",
            5 => "RESIZE_CQ",
            6 => "NO_PACKET",
            12 => "SIG_ERR",
            13 => "REQ_ERR",
            14 => "RESP_ERR",
            15 => "INVALID",
            _ => return None,
        })
    }

    /// REQ_ERR or RESP_ERR: an error CQE (the syndrome in byte 55).
    pub fn is_error(self) -> bool {
        self == Self::REQ_ERR || self == Self::RESP_ERR
    }
}

/// `MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT` (`providers/mlx5/mlx5dv.h`): the
/// vendor syndrome (byte 54, `vendor_err_synd` of `struct mlx5_err_cqe`)
/// of a RESP_ERR CQE with syndrome [`Syndrome::REMOTE_ABORTED_ERR`] that
/// ConnectX writes for an SRQ WQE whose buffer took an ODP page fault: the
/// WQE is consumed, nothing was written to it, the QP stays in RTS and the
/// message comes again into a later WQE. libmlx5 reports no completion for
/// it and reposts the WQE (`mlx5_complete_odp_fault`, `srq.c`; `cq.c`
/// `is_odp_pfault_err`).
pub const VENDOR_SYNDROME_ODP_PFAULT: u8 = 0x93;

/// Error CQE syndrome, byte 55 of the CQE (`MLX5_CQE_SYNDROME_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Syndrome(pub u8);

impl Syndrome {
    /// `MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR`: reported as `IBV_WC_LOC_LEN_ERR`.
    pub const LOCAL_LENGTH_ERR: Self = Self(0x01);
    /// `MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR`: reported as `IBV_WC_LOC_QP_OP_ERR`.
    pub const LOCAL_QP_OP_ERR: Self = Self(0x02);
    /// `MLX5_CQE_SYNDROME_LOCAL_PROT_ERR`: reported as `IBV_WC_LOC_PROT_ERR`.
    pub const LOCAL_PROT_ERR: Self = Self(0x04);
    /// `MLX5_CQE_SYNDROME_WR_FLUSH_ERR`: reported as `IBV_WC_WR_FLUSH_ERR`.
    pub const WR_FLUSH_ERR: Self = Self(0x05);
    /// `MLX5_CQE_SYNDROME_MW_BIND_ERR`: reported as `IBV_WC_MW_BIND_ERR`.
    pub const MW_BIND_ERR: Self = Self(0x06);
    /// `MLX5_CQE_SYNDROME_BAD_RESP_ERR`: reported as `IBV_WC_BAD_RESP_ERR`.
    pub const BAD_RESP_ERR: Self = Self(0x10);
    /// `MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR`: reported as `IBV_WC_LOC_ACCESS_ERR`.
    pub const LOCAL_ACCESS_ERR: Self = Self(0x11);
    /// `MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR`: reported as `IBV_WC_REM_INV_REQ_ERR`.
    pub const REMOTE_INVAL_REQ_ERR: Self = Self(0x12);
    /// `MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR`: reported as `IBV_WC_REM_ACCESS_ERR`.
    pub const REMOTE_ACCESS_ERR: Self = Self(0x13);
    /// `MLX5_CQE_SYNDROME_REMOTE_OP_ERR`: reported as `IBV_WC_REM_OP_ERR`.
    pub const REMOTE_OP_ERR: Self = Self(0x14);
    /// `MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR`: reported as `IBV_WC_RETRY_EXC_ERR`.
    pub const TRANSPORT_RETRY_EXC_ERR: Self = Self(0x15);
    /// `MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR`: reported as `IBV_WC_RNR_RETRY_EXC_ERR`.
    pub const RNR_RETRY_EXC_ERR: Self = Self(0x16);
    /// `MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR`: reported as `IBV_WC_REM_ABORT_ERR`;
    /// with [`VENDOR_SYNDROME_ODP_PFAULT`] in byte 54 of a RESP_ERR CQE, an
    /// SRQ WQE's ODP page fault, not reported ([`crate::cqe::Cqe::is_odp_fault`]).
    pub const REMOTE_ABORTED_ERR: Self = Self(0x22);

    /// The `enum ibv_wc_status` value rdma-core reports for this syndrome
    /// (`mlx5_handle_error_cqe` in `providers/mlx5/cq.c`); unknown syndromes
    /// map to `IBV_WC_GENERAL_ERR` (21).
    pub fn wc_status(self) -> u32 {
        match self.0 {
            0x01 => 1,
            0x02 => 2,
            0x04 => 4,
            0x05 => 5,
            0x06 => 6,
            0x10 => 7,
            0x11 => 8,
            0x12 => 9,
            0x13 => 10,
            0x14 => 11,
            0x15 => 12,
            0x16 => 13,
            0x22 => 16,
            _ => 21,
        }
    }
}
