//! Work completions (`struct ibv_wc`), backend-neutral.

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
    /// `IBV_WC_SUCCESS`: the WR completed; `opcode` and `byte_len` are valid.
    pub const SUCCESS: Self = Self(0);
    /// `IBV_WC_LOC_LEN_ERR`: a message longer than the port's max message
    /// size, or a receive whose SGEs are too short for the incoming message.
    pub const LOC_LEN_ERR: Self = Self(1);
    /// `IBV_WC_LOC_QP_OP_ERR`: the local QP found the WR inconsistent (e.g. an
    /// opcode its transport lacks, or a UD WR's AH of another PD).
    pub const LOC_QP_OP_ERR: Self = Self(2);
    /// `IBV_WC_LOC_PROT_ERR`: a local SGE's lkey, address or length is not
    /// covered by an MR of the QP's PD with the access the operation needs.
    pub const LOC_PROT_ERR: Self = Self(4);
    /// `IBV_WC_WR_FLUSH_ERR`: the QP went to the error state with this WR
    /// outstanding, or it was posted after; it was flushed, not executed.
    pub const WR_FLUSH_ERR: Self = Self(5);
    /// `IBV_WC_REM_INV_REQ_ERR`: the responder found the request invalid
    /// (opcode not enabled on its QP, message longer than its receive, ...).
    pub const REM_INV_REQ_ERR: Self = Self(9);
    /// `IBV_WC_REM_ACCESS_ERR`: the responder refused the RDMA or atomic
    /// access (bad rkey, range outside the MR, or access flag missing).
    pub const REM_ACCESS_ERR: Self = Self(10);
    /// `IBV_WC_REM_OP_ERR`: the responder could not complete the operation
    /// (e.g. a local error there while writing the receive buffer).
    pub const REM_OP_ERR: Self = Self(11);
    /// `IBV_WC_RETRY_EXC_ERR`: no ACK within the QP's `timeout`, `retry_cnt`
    /// times over (peer gone, or path wrong).
    pub const RETRY_EXC_ERR: Self = Self(12);
    /// `IBV_WC_RNR_RETRY_EXC_ERR`: the responder had no receive WQE posted,
    /// `rnr_retry` times over.
    pub const RNR_RETRY_EXC_ERR: Self = Self(13);
    /// `IBV_WC_GENERAL_ERR`: a transport error with no more specific status.
    pub const GENERAL_ERR: Self = Self(21);

    /// Whether this is `IBV_WC_SUCCESS`.
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
            Self::BIND_MW => "BIND_MW",
            Self::LOCAL_INV => "LOCAL_INV",
            Self::RECV => "RECV",
            Self::RECV_RDMA_WITH_IMM => "RECV_RDMA_WITH_IMM",
            _ => return write!(f, "WcOpcode({})", self.0),
        };
        f.write_str(name)
    }
}

impl WcOpcode {
    /// `IBV_WC_SEND`: a send WR (SEND, SEND with immediate, SEND with
    /// invalidate) completed.
    pub const SEND: Self = Self(0);
    /// `IBV_WC_RDMA_WRITE`: an RDMA WRITE, with or without immediate, completed.
    pub const RDMA_WRITE: Self = Self(1);
    /// `IBV_WC_RDMA_READ`: an RDMA READ completed; its data is in the local SGEs.
    pub const RDMA_READ: Self = Self(2);
    /// `IBV_WC_COMP_SWAP`: an atomic compare-and-swap completed; the original
    /// 8 bytes are in the local SGE.
    pub const COMP_SWAP: Self = Self(3);
    /// `IBV_WC_FETCH_ADD`: an atomic fetch-and-add completed; the original
    /// 8 bytes are in the local SGE.
    pub const FETCH_ADD: Self = Self(4);
    /// `IBV_WC_BIND_MW`: a memory-window bind (type 1's `Qp::bind_mw` /
    /// `unbind_mw`, or a type-2 bind WR) completed.
    pub const BIND_MW: Self = Self(5);
    /// `IBV_WC_LOCAL_INV`: a local invalidation completed.
    pub const LOCAL_INV: Self = Self(6);
    /// `IBV_WC_RECV`: a receive WR consumed by an incoming SEND (with or
    /// without immediate or invalidate).
    pub const RECV: Self = Self(128);
    /// `IBV_WC_RECV_RDMA_WITH_IMM`: a receive WR consumed by an incoming RDMA
    /// WRITE with immediate; [`Completion::imm`] holds the immediate.
    pub const RECV_RDMA_WITH_IMM: Self = Self(129);
}

/// One work completion.
///
/// `repr(C)`, 48 bytes, the fields in this order so that the four a
/// successful completion of a CQ without timestamps leaves at zero
/// (status, `vendor_err`, `timestamp`, `imm`'s tag) are adjacent: a poll
/// writes them with two stores (wr_id at 0, status 8, vendor_err 12,
/// timestamp 16, imm 24 (tag) and 28, byte_len 32, qp_num 36, opcode 40,
/// src_qp 44).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Completion {
    /// The `wr_id` of the WR this completes, as posted (`ibv_wc.wr_id`).
    pub wr_id: u64,
    /// Success or the error (`ibv_wc.status`); on error only `wr_id`,
    /// `status`, `vendor_err` and `qp_num` are meaningful.
    pub status: WcStatus,
    /// Vendor syndrome (mlx5: CQE byte 54), 0 on success.
    pub vendor_err: u32,
    /// When the device completed the WR, on its free-running clock
    /// (`ibv_wc_read_completion_ts`, see `ibv_create_cq_ex(3)`), for a CQ
    /// created with completion timestamps
    /// ([`QpConfig::completion_timestamps`](crate::QpConfig::completion_timestamps),
    /// [`Pd::create_timestamped_shared_cq`](crate::Pd::create_timestamped_shared_cq));
    /// 0 on any other CQ, and on a completion in error (mlx5's error CQE
    /// has its syndromes where the timestamp would be).
    ///
    /// Units are the device's, not nanoseconds: on ConnectX the raw ticks
    /// of its core clock, the 64-bit big-endian `timestamp` at byte 48 of
    /// the CQE (rdma-core `mlx5dv.h` `struct mlx5_cqe64`), as
    /// `ibv_wc_read_completion_ts` gives them (`ibv_query_device_ex`'s
    /// `hca_core_clock`, in kHz, converts them); on the sim nanoseconds
    /// since the sim device was made. Non-decreasing in the order one CQ's
    /// completions are written; compare timestamps of one device only.
    pub timestamp: u64,
    /// Immediate data, as the sender passed it (receives with immediate);
    /// for a receive of a SEND with invalidate, the rkey it invalidated
    /// (as `ibv_wc`'s `imm_data` / `invalidated_rkey` union; then
    /// [`SrcQp::with_inv`] is set: read it with [`Self::invalidated_rkey`]).
    pub imm: Option<u32>,
    /// Bytes transferred (RDMA READ, atomics, receives).
    pub byte_len: u32,
    /// The local QP's QPN (24 bits) whose WR this completes (`ibv_wc.qp_num`).
    pub qp_num: u32,
    /// What the WR was (`ibv_wc.opcode`); meaningful on success only.
    pub opcode: WcOpcode,
    /// The sender of a received message (UD: its QPN, and whether a GRH
    /// came); zero in send completions.
    pub src_qp: SrcQp,
}

/// The sender of a received message, one 32-bit word: its QP number in
/// bits 0..24 (`ibv_wc.src_qp`; for UD receives) and, in bit 31, whether
/// the receive buffer's first 40 bytes hold a GRH (`IBV_WC_GRH`;
/// meaningful for UD receives, though rxe sets it on every receive). On
/// mlx5 both come from the CQE's `flags_rqpn` (bytes 24..28).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SrcQp(pub u32);

impl SrcQp {
    /// Bit 31: a GRH came.
    pub const GRH: u32 = 1 << 31;
    /// Bit 30: the message was a SEND with invalidate (`IBV_WC_WITH_INV`;
    /// mlx5 CQE opcode `MLX5_CQE_RESP_SEND_INV`): [`Completion::imm`]
    /// holds the rkey it invalidated.
    pub const WITH_INV: u32 = 1 << 30;

    /// The sender's QPN and GRH flag.
    pub fn new(qpn: u32, grh: bool) -> Self {
        SrcQp(qpn & 0xff_ffff | if grh { Self::GRH } else { 0 })
    }

    /// The sender's QP number (24 bits).
    pub fn qpn(self) -> u32 {
        self.0 & 0xff_ffff
    }

    /// Whether the receive buffer begins with a 40-byte GRH.
    pub fn grh(self) -> bool {
        self.0 & Self::GRH != 0
    }

    /// Whether the message was a SEND with invalidate ([`Self::WITH_INV`]).
    pub fn with_inv(self) -> bool {
        self.0 & Self::WITH_INV != 0
    }
}

impl Completion {
    /// The rkey a received SEND with invalidate invalidated at this side
    /// (`IBV_WC_WITH_INV`, `ibv_wc.invalidated_rkey`), `None` for any
    /// other completion. The window it named is free from then on: bind it
    /// again before handing it out.
    pub fn invalidated_rkey(&self) -> Option<crate::Rkey> {
        if self.src_qp.with_inv() {
            self.imm.map(crate::Rkey)
        } else {
            None
        }
    }
}

impl Default for WcStatus {
    fn default() -> Self {
        Self::SUCCESS
    }
}
