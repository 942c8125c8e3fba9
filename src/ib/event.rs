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
        srq_num: u32,
    },
    /// `IBV_EVENT_CQ_ERR`: a CQ overran. `cq_num` is the CQN on the sim, 0
    /// on verbs (which names the CQ by pointer only).
    CqError {
        cq_num: u32,
    },
    /// `IBV_EVENT_PORT_ACTIVE` / `IBV_EVENT_PORT_ERR`: the port came up or
    /// went down.
    PortActive {
        port: u8,
    },
    PortError {
        port: u8,
    },
    /// `IBV_EVENT_QP_FATAL`, `IBV_EVENT_QP_LAST_WQE_REACHED`,
    /// `IBV_EVENT_SQ_DRAINED`, of QP `qp_num`.
    QpFatal {
        qp_num: u32,
    },
    QpLastWqeReached {
        qp_num: u32,
    },
    SqDrained {
        qp_num: u32,
    },
    /// Any other `enum ibv_event_type` value.
    Other {
        event_type: u32,
    },
}
