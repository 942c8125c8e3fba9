//! The RC QP state machine's states (IB spec 10.3.1).

/// RC QP states (IB spec 10.3.1). [`Qp::state`](crate::Qp::state) is where this crate moved
/// the QP; the device may move a QP to ERR on its own after an error
/// ([`Qp::query`](crate::Qp::query) reports it; the completions say why).
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
    /// Send queue drain (IB spec 10.3.1.4): the WRs posted before the move
    /// are finished, none after it are started (posting sends is refused
    /// here until the QP is back in RTS), receives go on. With
    /// [`QpAttr::sqd_notify`](crate::QpAttr::sqd_notify) the device raises
    /// [`AsyncEvent::SqDrained`](crate::AsyncEvent::SqDrained) once the
    /// queue is drained. Entered from RTS ([`Qp::drain_sq`](crate::Qp::drain_sq));
    /// left for RTS, ERR or RESET.
    Sqd,
    /// `IBV_QPS_ERR`: outstanding and newly posted WRs complete with
    /// `WR_FLUSH_ERR`; only RESET leaves it.
    Err,
}
