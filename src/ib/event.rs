//! Device async events (verbs `struct ibv_async_event`), as
//! [`Context::get_async_event`](crate::Context::get_async_event) reads them.

/// One device async event: its type (`enum ibv_event_type`) and the object
/// it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncEvent {
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`: a receive taken from the SRQ
    /// [`Srq::srq_num`](crate::Srq::srq_num) left fewer than its armed
    /// limit; the limit is disarmed ([`Srq::set_limit`](crate::Srq::set_limit)
    /// arms it again).
    SrqLimitReached {
        /// The SRQ's number (SRQN).
        srq_num: u32,
    },
    /// `IBV_EVENT_CQ_ERR`: a CQ overran. `cq_num` is the CQN on the sim, 0
    /// on verbs (which names the CQ by pointer only).
    CqError {
        /// The CQN (sim), or 0 (verbs).
        cq_num: u32,
    },
    /// `IBV_EVENT_PORT_ACTIVE`: the port came up.
    PortActive {
        /// The port number, from 1.
        port: u8,
    },
    /// `IBV_EVENT_PORT_ERR`: the port went down.
    PortError {
        /// The port number, from 1.
        port: u8,
    },
    /// `IBV_EVENT_QP_FATAL`: the QP hit an error no CQE reports and went to
    /// the error state.
    QpFatal {
        /// The QP's QPN.
        qp_num: u32,
    },
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`: a QP attached to an SRQ went to the
    /// error state and will take no more receive WQEs from it.
    QpLastWqeReached {
        /// The QP's QPN.
        qp_num: u32,
    },
    /// `IBV_EVENT_SQ_DRAINED`: a QP moved to SQD has no send WQE in flight.
    SqDrained {
        /// The QP's QPN.
        qp_num: u32,
    },
    /// Any other `enum ibv_event_type` value.
    Other {
        /// The `enum ibv_event_type` value.
        event_type: u32,
    },
}
