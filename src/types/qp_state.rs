//! The RC QP state machine's states (IB spec 10.3.1).

/// RC QP states (IB spec 10.3.1). [`Qp::state`](crate::Qp::state) is where this crate moved
/// the QP; the device may move a QP to ERR on its own after an error
/// ([`Qp::query`](crate::Qp::query) reports it; the completions say why).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    Reset,
    Init,
    Rtr,
    Rts,
    Err,
}
