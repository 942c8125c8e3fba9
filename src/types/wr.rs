//! Backend-neutral work requests and completions.

use crate::mem::Mr;
use crate::Result;
use std::marker::PhantomData;

/// Local key of a memory region. Only an [`Mr`] makes one, so an rkey cannot stand in for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lkey(pub(crate) u32);

impl Lkey {
    pub fn get(self) -> u32 {
        self.0
    }
}

/// Remote key of a (possibly remote) memory region, as the peer sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rkey(pub u32);

/// A scatter/gather entry inside a registered memory region (checked when
/// made). It borrows the [`Mr`], so the memory is live whenever a work request
/// naming it is posted (inline payloads are copied from it at post time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge<'mr> {
    pub(crate) addr: u64,
    pub(crate) len: u32,
    pub(crate) lkey: Lkey,
    _mr: PhantomData<&'mr Mr>,
}

impl<'mr> Sge<'mr> {
    /// `len` bytes at byte `offset` of `mr`; refused if it does not fit in `mr`.
    pub fn new(mr: &'mr Mr, offset: usize, len: u32) -> Result<Sge<'mr>> {
        mr.check_range(offset, len as usize)?;
        Ok(Sge {
            addr: mr.addr() + offset as u64,
            len,
            lkey: mr.lkey(),
            _mr: PhantomData,
        })
    }
    pub fn addr(&self) -> u64 {
        self.addr
    }
    pub fn len(&self) -> u32 {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn lkey(&self) -> Lkey {
        self.lkey
    }
}

/// The remote side of an RDMA operation: an address and rkey the peer exposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteAddr {
    pub addr: u64,
    pub rkey: Rkey,
}

/// What a send work request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrOp {
    /// RDMA WRITE of the gather list to `remote`.
    RdmaWrite { remote: RemoteAddr },
    /// RDMA WRITE, then a completion with `imm` at the responder (consumes a receive).
    RdmaWriteWithImm { remote: RemoteAddr, imm: u32 },
    /// SEND of the gather list into the peer's next receive buffer.
    Send,
    /// SEND with immediate data (the receiver's completion carries `imm`).
    SendWithImm { imm: u32 },
    /// RDMA READ from `remote` into the scatter list.
    RdmaRead { remote: RemoteAddr },
    /// If the 8-byte-aligned u64 at `remote` equals `compare`, replace it with
    /// `swap`; the old value lands in the (8-byte) local SGE, host byte order.
    AtomicCmpSwp {
        remote: RemoteAddr,
        compare: u64,
        swap: u64,
    },
    /// Add `add` to the 8-byte-aligned u64 at `remote`; the old value lands in
    /// the (8-byte) local SGE, host byte order.
    AtomicFetchAdd { remote: RemoteAddr, add: u64 },
}

/// One send work request (`ibv_send_wr` without the linked list).
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    pub wr_id: u64,
    pub op: WrOp,
    pub sges: &'a [Sge<'a>],
    /// Generate a completion (`IBV_SEND_SIGNALED`, mlx5 CQ_UPDATE).
    pub signaled: bool,
    /// Copy the payload into the WQE at post time (`IBV_SEND_INLINE`).
    pub inline: bool,
    /// Ask for a solicited event at the responder (`IBV_SEND_SOLICITED`,
    /// mlx5 ctrl `SOLICITED`): its CQE carries the `se` bit, which wakes a CQ
    /// armed for solicited completions only. SEND and WRITE_WITH_IMM.
    pub solicited: bool,
    /// Start only after every earlier RDMA READ and atomic of this QP has
    /// completed (`IBV_SEND_FENCE`, mlx5 ctrl `FENCE`).
    pub fence: bool,
}

impl<'a> SendWr<'a> {
    /// An RDMA WRITE of `sges` to `remote`, unsignaled, not inline.
    pub fn rdma_write(wr_id: u64, sges: &'a [Sge<'a>], remote: RemoteAddr) -> Self {
        SendWr {
            wr_id,
            op: WrOp::RdmaWrite { remote },
            sges,
            signaled: false,
            inline: false,
            solicited: false,
            fence: false,
        }
    }
    /// A SEND of `sges`, unsignaled, not inline.
    pub fn send(wr_id: u64, sges: &'a [Sge<'a>]) -> Self {
        SendWr {
            wr_id,
            op: WrOp::Send,
            sges,
            signaled: false,
            inline: false,
            solicited: false,
            fence: false,
        }
    }

    /// A SEND with immediate data; `imm` reaches the receiver as the same `u32`.
    pub fn send_with_imm(wr_id: u64, sges: &'a [Sge<'a>], imm: u32) -> Self {
        SendWr {
            wr_id,
            op: WrOp::SendWithImm { imm },
            sges,
            signaled: false,
            inline: false,
            solicited: false,
            fence: false,
        }
    }

    /// An RDMA WRITE with immediate data (consumes a receive at the peer).
    pub fn rdma_write_with_imm(
        wr_id: u64,
        sges: &'a [Sge<'a>],
        remote: RemoteAddr,
        imm: u32,
    ) -> Self {
        SendWr {
            wr_id,
            op: WrOp::RdmaWriteWithImm { remote, imm },
            sges,
            signaled: false,
            inline: false,
            solicited: false,
            fence: false,
        }
    }

    /// An RDMA READ of `remote` into `sges`, unsignaled.
    pub fn rdma_read(wr_id: u64, sges: &'a [Sge<'a>], remote: RemoteAddr) -> Self {
        SendWr {
            wr_id,
            op: WrOp::RdmaRead { remote },
            sges,
            signaled: false,
            inline: false,
            solicited: false,
            fence: false,
        }
    }

    /// A compare-and-swap on the u64 at `remote`; the old value goes to `old` (one 8-byte SGE).
    pub fn atomic_cmp_swp(
        wr_id: u64,
        old: &'a [Sge<'a>],
        remote: RemoteAddr,
        compare: u64,
        swap: u64,
    ) -> Self {
        SendWr {
            wr_id,
            op: WrOp::AtomicCmpSwp {
                remote,
                compare,
                swap,
            },
            sges: old,
            signaled: false,
            inline: false,
            solicited: false,
            fence: false,
        }
    }

    /// A fetch-and-add on the u64 at `remote`; the old value goes to `old` (one 8-byte SGE).
    pub fn atomic_fetch_add(wr_id: u64, old: &'a [Sge<'a>], remote: RemoteAddr, add: u64) -> Self {
        SendWr {
            wr_id,
            op: WrOp::AtomicFetchAdd { remote, add },
            sges: old,
            signaled: false,
            inline: false,
            solicited: false,
            fence: false,
        }
    }

    pub fn signaled(mut self) -> Self {
        self.signaled = true;
        self
    }
    pub fn inline(mut self) -> Self {
        self.inline = true;
        self
    }
    /// See [`SendWr::solicited`](#structfield.solicited).
    pub fn solicited(mut self) -> Self {
        self.solicited = true;
        self
    }
    /// See [`SendWr::fence`](#structfield.fence).
    pub fn fence(mut self) -> Self {
        self.fence = true;
        self
    }
    pub(crate) fn total_len(&self) -> u64 {
        self.sges.iter().map(|s| s.len as u64).sum()
    }
}

/// One receive work request (`ibv_recv_wr` without the linked list): the
/// buffers the next incoming SEND (or nothing, for RDMA WRITE with immediate) fills.
#[derive(Clone, Copy, Debug)]
pub struct RecvWr<'a> {
    pub wr_id: u64,
    pub sges: &'a [Sge<'a>],
}

impl<'a> RecvWr<'a> {
    pub fn new(wr_id: u64, sges: &'a [Sge<'a>]) -> Self {
        RecvWr { wr_id, sges }
    }
}

/// Completion status with `enum ibv_wc_status` values. `Debug` prints the
/// identifier (`REM_ACCESS_ERR`), `Display` the verbs description.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct WcStatus(pub u32);

impl std::fmt::Debug for WcStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.ident())
    }
}

impl WcStatus {
    pub const SUCCESS: Self = Self(0);
    pub const LOC_LEN_ERR: Self = Self(1);
    pub const LOC_QP_OP_ERR: Self = Self(2);
    pub const LOC_PROT_ERR: Self = Self(4);
    pub const WR_FLUSH_ERR: Self = Self(5);
    pub const REM_INV_REQ_ERR: Self = Self(9);
    pub const REM_ACCESS_ERR: Self = Self(10);
    pub const REM_OP_ERR: Self = Self(11);
    pub const RETRY_EXC_ERR: Self = Self(12);
    pub const RNR_RETRY_EXC_ERR: Self = Self(13);
    pub const GENERAL_ERR: Self = Self(21);

    pub fn is_ok(self) -> bool {
        self == Self::SUCCESS
    }

    /// rdma-core's `ibv_wc_status_str` names (`libibverbs/enum_strs.c`).
    pub fn name(self) -> &'static str {
        const NAMES: [&str; 24] = [
            "success",
            "local length error",
            "local QP operation error",
            "local EE context operation error",
            "local protection error",
            "Work Request Flushed Error",
            "memory management operation error",
            "bad response error",
            "local access error",
            "remote invalid request error",
            "remote access error",
            "remote operation error",
            "transport retry counter exceeded",
            "RNR retry counter exceeded",
            "local RDD violation error",
            "remote invalid RD request",
            "remote aborted error",
            "invalid EE context number",
            "invalid EE context state",
            "fatal error",
            "response timeout error",
            "general error",
            "TM error",
            "TM software rendezvous",
        ];
        NAMES.get(self.0 as usize).copied().unwrap_or("unknown")
    }
}

impl WcStatus {
    /// The `enum ibv_wc_status` identifier without its `IBV_WC_` prefix.
    pub fn ident(self) -> &'static str {
        const IDENTS: [&str; 24] = [
            "SUCCESS",
            "LOC_LEN_ERR",
            "LOC_QP_OP_ERR",
            "LOC_EEC_OP_ERR",
            "LOC_PROT_ERR",
            "WR_FLUSH_ERR",
            "MW_BIND_ERR",
            "BAD_RESP_ERR",
            "LOC_ACCESS_ERR",
            "REM_INV_REQ_ERR",
            "REM_ACCESS_ERR",
            "REM_OP_ERR",
            "RETRY_EXC_ERR",
            "RNR_RETRY_EXC_ERR",
            "LOC_RDD_VIOL_ERR",
            "REM_INV_RD_REQ_ERR",
            "REM_ABORT_ERR",
            "INV_EECN_ERR",
            "INV_EEC_STATE_ERR",
            "FATAL_ERR",
            "RESP_TIMEOUT_ERR",
            "GENERAL_ERR",
            "TM_ERR",
            "TM_RNDV_INCOMPLETE",
        ];
        IDENTS.get(self.0 as usize).copied().unwrap_or("UNKNOWN")
    }
}

impl std::fmt::Display for WcStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

/// What a completed work request was (`enum ibv_wc_opcode` values). Only
/// meaningful when the status is success (as in verbs). `Debug` prints the
/// verbs name.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct WcOpcode(pub u32);

impl std::fmt::Debug for WcOpcode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match *self {
            Self::SEND => "SEND",
            Self::RDMA_WRITE => "RDMA_WRITE",
            Self::RDMA_READ => "RDMA_READ",
            Self::COMP_SWAP => "COMP_SWAP",
            Self::FETCH_ADD => "FETCH_ADD",
            Self::RECV => "RECV",
            Self::RECV_RDMA_WITH_IMM => "RECV_RDMA_WITH_IMM",
            _ => return write!(f, "WcOpcode({})", self.0),
        };
        f.write_str(name)
    }
}

impl WcOpcode {
    pub const SEND: Self = Self(0);
    pub const RDMA_WRITE: Self = Self(1);
    pub const RDMA_READ: Self = Self(2);
    pub const COMP_SWAP: Self = Self(3);
    pub const FETCH_ADD: Self = Self(4);
    pub const RECV: Self = Self(128);
    pub const RECV_RDMA_WITH_IMM: Self = Self(129);
}

/// One work completion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    /// Bytes transferred (RDMA READ, atomics, receives).
    pub byte_len: u32,
    /// Immediate data, as the sender passed it (receives with immediate).
    pub imm: Option<u32>,
    pub qp_num: u32,
    /// Vendor syndrome (mlx5: CQE byte 54), 0 on success.
    pub vendor_err: u32,
}

impl Default for WcStatus {
    fn default() -> Self {
        Self::SUCCESS
    }
}
