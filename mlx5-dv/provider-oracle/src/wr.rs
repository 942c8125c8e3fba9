//! A send work request in one form, and its two translations: the
//! provider's `ibv_send_wr` (through the harness's `po_send_wr`) and our
//! driver's [`SendWqe`], each as its own user would write it (rdma-core's
//! `ibv_post_send` caller; rdma-direct's direct backend, which gathers an
//! inline payload into one buffer and builds the UD address vector).

use mlx5_dv::prm::{CtrlFlags, WqeOpcode};
use mlx5_dv::wqe::{
    AtomicSeg, DataSeg, Datagram, Payload, RemoteSeg, SendWqe, AV_DQP_DCT, DATAGRAM_SEG,
    EXTENDED_UD_AV,
};

/// One SGE: an address (inside the case's data arena when the WR is
/// inline: the provider copies from it), a length in bytes, an lkey.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub len: u32,
    pub lkey: u32,
}

/// What the WR does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Send,
    SendImm {
        imm: u32,
    },
    /// SEND with invalidate (`IBV_WR_SEND_WITH_INV`): `rkey` is the
    /// WR's `invalidate_rkey` (host order), which both writers put in the
    /// ctrl immediate big-endian.
    SendInv {
        rkey: u32,
    },
    Write {
        raddr: u64,
        rkey: u32,
    },
    WriteImm {
        raddr: u64,
        rkey: u32,
        imm: u32,
    },
    Read {
        raddr: u64,
        rkey: u32,
    },
    CmpSwap {
        raddr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
    FetchAdd {
        raddr: u64,
        rkey: u32,
        add: u64,
    },
}

/// A UD destination: the AH's 48-byte address vector (`struct
/// mlx5_wqe_av`, as `mlx5_create_ah` fills it), the remote QPN and qkey.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ud {
    pub av: [u8; DATAGRAM_SEG],
    pub remote_qpn: u32,
    pub qkey: u32,
}

/// A send work request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wr {
    pub wr_id: u64,
    pub op: Op,
    pub sges: Vec<Sge>,
    pub inline: bool,
    pub signaled: bool,
    pub solicited: bool,
    pub fence: bool,
    pub ud: Option<Ud>,
}

impl Op {
    /// `enum ibv_wr_opcode`.
    pub fn ibv(self) -> u32 {
        use crate::wr::ibv::*;
        match self {
            Op::Send => SEND,
            Op::SendImm { .. } => SEND_WITH_IMM,
            Op::SendInv { .. } => SEND_WITH_INV,
            Op::Write { .. } => RDMA_WRITE,
            Op::WriteImm { .. } => RDMA_WRITE_WITH_IMM,
            Op::Read { .. } => RDMA_READ,
            Op::CmpSwap { .. } => ATOMIC_CMP_AND_SWP,
            Op::FetchAdd { .. } => ATOMIC_FETCH_AND_ADD,
        }
    }

    /// The mlx5 opcode of the ctrl segment.
    pub fn mlx5(self) -> WqeOpcode {
        match self {
            Op::Send => WqeOpcode::SEND,
            Op::SendImm { .. } => WqeOpcode::SEND_IMM,
            Op::SendInv { .. } => WqeOpcode::SEND_INVAL,
            Op::Write { .. } => WqeOpcode::RDMA_WRITE,
            Op::WriteImm { .. } => WqeOpcode::RDMA_WRITE_IMM,
            Op::Read { .. } => WqeOpcode::RDMA_READ,
            Op::CmpSwap { .. } => WqeOpcode::ATOMIC_CS,
            Op::FetchAdd { .. } => WqeOpcode::ATOMIC_FA,
        }
    }

    pub fn is_atomic(self) -> bool {
        matches!(self, Op::CmpSwap { .. } | Op::FetchAdd { .. })
    }

    /// The ctrl immediate our driver is given ([`SendWqe::imm`]): the
    /// immediate (SEND_IMM, WRITE_IMM) or the rkey to invalidate
    /// (SEND_INV), else 0. The harness passes it as `imm_data` (made
    /// big-endian) or, for SEND_INV, as `invalidate_rkey` (as is).
    pub fn imm(self) -> u32 {
        match self {
            Op::SendImm { imm } | Op::WriteImm { imm, .. } => imm,
            Op::SendInv { rkey } => rkey,
            _ => 0,
        }
    }

    /// The remote address and rkey (WRITE, WRITE_IMM, READ, atomics).
    pub fn remote(self) -> Option<(u64, u32)> {
        match self {
            Op::Write { raddr, rkey }
            | Op::WriteImm { raddr, rkey, .. }
            | Op::Read { raddr, rkey }
            | Op::CmpSwap { raddr, rkey, .. }
            | Op::FetchAdd { raddr, rkey, .. } => Some((raddr, rkey)),
            Op::Send | Op::SendImm { .. } | Op::SendInv { .. } => None,
        }
    }

    /// An atomic's operands as `ibv_send_wr.wr.atomic` has them:
    /// `(compare_add, swap)` (compare and swap for CAS, the addend and 0
    /// for FETCH_ADD), `(0, 0)` for the other opcodes.
    pub fn atomic_args(self) -> (u64, u64) {
        match self {
            Op::CmpSwap { compare, swap, .. } => (compare, swap),
            Op::FetchAdd { add, .. } => (add, 0),
            _ => (0, 0),
        }
    }
}

/// The verbs constants the translation needs (`verbs.h`).
pub mod ibv {
    pub const RDMA_WRITE: u32 = 0;
    pub const RDMA_WRITE_WITH_IMM: u32 = 1;
    pub const SEND: u32 = 2;
    pub const SEND_WITH_IMM: u32 = 3;
    pub const RDMA_READ: u32 = 4;
    pub const ATOMIC_CMP_AND_SWP: u32 = 5;
    pub const ATOMIC_FETCH_AND_ADD: u32 = 6;
    pub const SEND_WITH_INV: u32 = 9;
    pub const SEND_FENCE: u32 = 1;
    pub const SEND_SIGNALED: u32 = 2;
    pub const SEND_SOLICITED: u32 = 4;
    pub const SEND_INLINE: u32 = 8;
    pub const QPT_RC: u32 = 2;
    pub const QPT_UC: u32 = 3;
    pub const QPT_UD: u32 = 4;
}

impl Wr {
    /// `ibv_send_wr.send_flags`.
    pub fn ibv_flags(&self) -> u32 {
        use ibv::*;
        (if self.fence { SEND_FENCE } else { 0 })
            | (if self.signaled { SEND_SIGNALED } else { 0 })
            | (if self.solicited { SEND_SOLICITED } else { 0 })
            | (if self.inline { SEND_INLINE } else { 0 })
    }

    /// The ctrl segment's `fm_ce_se` our driver is given: what
    /// rdma-direct's `SendWr` flags map to, and CQ_UPDATE on every WR of a
    /// QP that signals all (`sq_sig_all`).
    pub fn ctrl_flags(&self, sig_all: bool) -> CtrlFlags {
        let mut f = CtrlFlags::empty();
        if self.signaled || sig_all {
            f |= CtrlFlags::CQ_UPDATE;
        }
        if self.solicited {
            f |= CtrlFlags::SOLICITED;
        }
        if self.fence {
            f |= CtrlFlags::FENCE;
        }
        f
    }

    /// Bytes of the inline payload: the SGEs gathered in order.
    pub fn inline_len(&self) -> usize {
        self.sges.iter().map(|s| s.len as usize).sum()
    }

    /// The UD address vector our driver writes: the AH's, with the qkey
    /// and `remote QPN | MLX5_EXTENDED_UD_AV` in place (as rdma-direct's
    /// direct backend builds it, and the provider's `set_datagram_seg`).
    pub fn datagram(&self) -> Option<[u8; DATAGRAM_SEG]> {
        let ud = self.ud?;
        let mut av = ud.av;
        av[0..4].copy_from_slice(&ud.qkey.to_be_bytes());
        av[AV_DQP_DCT..AV_DQP_DCT + 4]
            .copy_from_slice(&(ud.remote_qpn | EXTENDED_UD_AV).to_be_bytes());
        Some(av)
    }

    /// Calls `f` with our driver's WQE for this WR. `arena` holds the
    /// bytes inline SGEs point at (`arena_base` is its address).
    pub fn with_wqe<R>(&self, sig_all: bool, arena: &[u8], f: impl FnOnce(&SendWqe<'_>) -> R) -> R {
        let datagram = self.datagram();
        self.with_wqe_datagram(sig_all, arena, datagram.as_ref().map(Datagram::Ud), f)
    }

    /// [`Wr::with_wqe`] with the datagram segment given (a DC WQE's,
    /// `crate::dc`, as [`Datagram::Dc`]), not made from [`Wr::ud`].
    pub fn with_wqe_datagram<R>(
        &self,
        sig_all: bool,
        arena: &[u8],
        datagram: Option<Datagram<'_>>,
        f: impl FnOnce(&SendWqe<'_>) -> R,
    ) -> R {
        let base = arena.as_ptr() as u64;
        let mut inline = Vec::new();
        let segs: Vec<DataSeg> = self
            .sges
            .iter()
            .map(|s| DataSeg {
                addr: s.addr,
                len: s.len,
                lkey: s.lkey,
            })
            .collect();
        let payload = if self.inline {
            for s in &self.sges {
                let off = (s.addr - base) as usize;
                inline.extend_from_slice(&arena[off..off + s.len as usize]);
            }
            Payload::Inline(&inline)
        } else {
            Payload::Sges(&segs)
        };
        let wqe = SendWqe {
            opcode: self.op.mlx5(),
            flags: self.ctrl_flags(sig_all),
            imm: self.op.imm(),
            remote: self
                .op
                .remote()
                .map(|(addr, rkey)| RemoteSeg { addr, rkey }),
            masked: None,
            atomic: match self.op {
                Op::CmpSwap { compare, swap, .. } => Some(AtomicSeg {
                    swap_add: swap,
                    compare,
                }),
                Op::FetchAdd { add, .. } => Some(AtomicSeg {
                    swap_add: add,
                    compare: 0,
                }),
                _ => None,
            },
            payload,
            datagram,
        };
        f(&wqe)
    }
}

/// `sges` as our driver's data segments.
pub fn data_segs(sges: &[Sge]) -> Vec<DataSeg> {
    sges.iter()
        .map(|s| DataSeg {
            addr: s.addr,
            len: s.len,
            lkey: s.lkey,
        })
        .collect()
}
