//! The verbs-level types the sim and rdma-direct share: access flags
//! (`enum ibv_access_flags`), QP transports (`enum ibv_qp_type`) and QP
//! states (`enum ibv_qp_state`), from rdma-core's `libibverbs/verbs.h`.
//!
//! Always compiled (no feature): rdma-direct re-exports them as
//! `rdma_direct::{Access, QpType, QpState}`, and the sim (`crate::sim`, feature `sim`) takes them.

bitflags::bitflags! {
    /// Memory-region and QP access flags, with `enum ibv_access_flags` values.
    /// [`Access::all`] holds every flag, [`Access::ON_DEMAND`] too (an ODP
    /// registration, which devices without ODP refuse): every permission
    /// without it is [`Access::MR_ALL`], a QP's [`Access::QP_ALL`].
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Access: u32 {
        /// `IBV_ACCESS_LOCAL_WRITE`: the local device may write the memory (receives, READ and atomic results).
        const LOCAL_WRITE = 1;
        /// `IBV_ACCESS_REMOTE_WRITE`: a peer's RDMA WRITE may write it.
        const REMOTE_WRITE = 2;
        /// `IBV_ACCESS_REMOTE_READ`: a peer's RDMA READ may read it.
        const REMOTE_READ = 4;
        /// `IBV_ACCESS_REMOTE_ATOMIC`: a peer's atomics may act on it.
        const REMOTE_ATOMIC = 8;
        /// `IBV_ACCESS_MW_BIND`: memory windows may be bound to the MR (IB
        /// spec C10-73); an MR attribute only, not a QP's.
        const MW_BIND = 16;
        /// `IBV_ACCESS_ON_DEMAND`: on-demand paging (ODP). The MR is not
        /// pinned: the device faults its pages in on first touch (and
        /// again after the kernel invalidates them); `ibv_reg_mr(3)`,
        /// `ibv_advise_mr(3)`. An MR attribute only, not a QP's.
        const ON_DEMAND = 64;
    }
}

impl Access {
    /// Every access a QP may grant (`ibv_qp_attr.qp_access_flags`):
    /// LOCAL_WRITE and the three REMOTE_* flags. Not [`Access::all`], which
    /// holds [`Access::MW_BIND`] and [`Access::ON_DEMAND`] too, an MR's
    /// attributes only.
    pub const QP_ALL: Access = Access::LOCAL_WRITE
        .union(Access::REMOTE_WRITE)
        .union(Access::REMOTE_READ)
        .union(Access::REMOTE_ATOMIC);

    /// Every permission an MR may hold: [`Access::QP_ALL`] and
    /// [`Access::MW_BIND`]. Not [`Access::all`], which holds
    /// [`Access::ON_DEMAND`] too, a registration mode rather than a
    /// permission (an ODP MR, which devices without ODP refuse).
    pub const MR_ALL: Access = Access::QP_ALL.union(Access::MW_BIND);
}

/// The transport of a QP (`enum ibv_qp_type`): reliable connected (RC),
/// unreliable connected (UC: WRITE, WRITE_WITH_IMM, SEND and
/// SEND_WITH_IMM; no ACK, no retry, no RNR: a message the responder cannot
/// take is dropped and the requester still succeeds), unreliable datagram
/// (UD: SENDs to any UD QP named per WR by an address handle, QPN and
/// qkey; at most the port's active MTU each; receives start with a 40-byte
/// GRH slot). IB spec 9.8 (transport services), 11.2.4.2 (attributes).
///
/// In the sim, a UC message the responder cannot take (no receive posted,
/// an access it refuses, a responder not in RTR or RTS) is dropped, nothing
/// at the responder changes, and the requester completes it successfully;
/// READ and the atomics on UC are local QP operation errors.
///
/// DC (dynamically connected, mlx5 only; `IBV_QPT_DRIVER` with
/// `mlx5dv_create_qp`'s `MLX5DV_QP_INIT_ATTR_MASK_DC`): a DC initiator
/// ([`QpType::Dci`]) is a send-only QP whose WRs each name their target
/// (an AV, a DCT number and a DC key) and may be any RC operation; a DC
/// target ([`QpType::Dct`]) takes them, its receives from an SRQ. rdma-core
/// `providers/mlx5/mlx5dv.h` (`enum mlx5dv_dc_type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum QpType {
    /// `IBV_QPT_RC`: reliable connected (ACKs, RNR retries, remote errors reported).
    #[default]
    Rc,
    /// `IBV_QPT_UC`: unreliable connected.
    Uc,
    /// `IBV_QPT_UD`: unreliable datagram.
    Ud,
    /// DC initiator (`MLX5DV_DCTYPE_DCI`): RC's operations and
    /// reliability, each WR to the target it names (in rdma-direct:
    /// `Pd::create_qp`, `Qp::ready_dci`, `Qp::post_dc`).
    Dci,
    /// DC target (`MLX5DV_DCTYPE_DCT`): on an SRQ; sends nothing; RESET ->
    /// INIT -> RTR only (in rdma-direct: `Pd::create_qp_on_srq` with
    /// `QpConfig::dc_key`, `Qp::ready_dct`, `Qp::dct_number`).
    Dct,
}

impl QpType {
    /// perftest's `-c` name: `RC`, `UC`, `UD`; `DCI` and `DCT` for DC's
    /// two sides (perftest's `-c DC` makes both).
    pub fn name(self) -> &'static str {
        match self {
            QpType::Rc => "RC",
            QpType::Uc => "UC",
            QpType::Ud => "UD",
            QpType::Dci => "DCI",
            QpType::Dct => "DCT",
        }
    }

    /// Whether it is one of DC's two sides.
    pub fn is_dc(self) -> bool {
        matches!(self, QpType::Dci | QpType::Dct)
    }
}

/// QP states (IB spec 10.3.1; `enum ibv_qp_state`). rdma-direct's
/// `Qp::state` is where that crate moved the QP; the device may move a QP
/// to ERR on its own after an error (`Qp::query` reports it; the
/// completions say why). The sim models every state here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    /// `IBV_QPS_RESET`: as created; no WR is taken, none outstanding.
    Reset,
    /// `IBV_QPS_INIT`: port, P_Key and access set; receives may be posted.
    Init,
    /// `IBV_QPS_RTR`: ready to receive (path, peer QPN and `rq_psn` set).
    Rtr,
    /// `IBV_QPS_RTS`: ready to send (`sq_psn`, timeouts and retries set).
    Rts,
    /// `IBV_QPS_SQD`, send queue drain (IB spec 10.3.1.4): the WRs posted
    /// before the move are finished, none after it are started (they wait
    /// for RTS; rdma-direct refuses to post sends here), receives go on.
    /// With `en_sqd_async_notify` the device raises an SQ-drained async
    /// event (`IBV_EVENT_SQ_DRAINED`) once the queue is drained. Entered
    /// from RTS; left for RTS, ERR or RESET.
    Sqd,
    /// `IBV_QPS_ERR`: outstanding and newly posted WRs complete with
    /// `WR_FLUSH_ERR`; only RESET leaves it.
    Err,
}
