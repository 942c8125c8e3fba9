//! QP sizes, state changes (`ibv_modify_qp`) and queries (`ibv_query_qp`).

use super::check_detail;
use crate::ib::error::Result;
use crate::ib::qp_attr::{AddressVector, QpAttr, QpAttrMask, QpInfo, QpState, QpType};
use rdma_sys::*;

/// Sizes of one QP.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QpCaps {
    pub(crate) qp_type: QpType,
    pub(crate) max_send_wr: u32,
    pub(crate) max_send_sge: u32,
    pub(crate) max_inline: u32,
    pub(crate) max_recv_wr: u32,
    pub(crate) max_recv_sge: u32,
    /// `QpConfig::memory_windows`: the QP posts window binds and
    /// `LOCAL_INV` (the verbs path asks `ibv_create_qp_ex` for their send
    /// ops: `backend/verbs/mod.rs` `send_ops`).
    pub(crate) memory_windows: bool,
}

/// The `enum ibv_qp_type` of a transport.
pub(crate) fn ibv_type(t: QpType) -> ibv_qp_type::Type {
    match t {
        QpType::Rc => ibv_qp_type::IBV_QPT_RC,
        QpType::Uc => ibv_qp_type::IBV_QPT_UC,
        // DC QPs are the mlx5 provider's (`mlx5dv_create_qp`).
        QpType::Dci | QpType::Dct => ibv_qp_type::IBV_QPT_DRIVER,
        QpType::Ud => ibv_qp_type::IBV_QPT_UD,
    }
}

/// `struct ibv_ah_attr` of an address vector.
pub(crate) fn ah_attr(av: &AddressVector) -> ibv_ah_attr {
    // SAFETY: plain data; zero is valid.
    let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
    a.dlid = av.dlid;
    a.port_num = av.port;
    a.sl = av.service_level;
    if let Some(g) = av.grh {
        a.is_global = 1;
        a.grh.dgid = ibv_gid { raw: g.dgid };
        a.grh.sgid_index = g.sgid_index;
        a.grh.hop_limit = g.hop_limit;
        a.grh.traffic_class = g.traffic_class;
        a.grh.flow_label = g.flow_label;
    }
    a
}

/// `ibv_modify_qp` of `qp` to `to` with the attributes `attr` carries.
pub(crate) fn modify_raw(qp: *mut ibv_qp, qpn: u32, to: QpState, attr: &QpAttr) -> Result<()> {
    // SAFETY: plain data; zero is valid.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = match to {
        QpState::Reset => ibv_qp_state::IBV_QPS_RESET,
        QpState::Init => ibv_qp_state::IBV_QPS_INIT,
        QpState::Rtr => ibv_qp_state::IBV_QPS_RTR,
        QpState::Rts => ibv_qp_state::IBV_QPS_RTS,
        QpState::Sqd => ibv_qp_state::IBV_QPS_SQD,
        QpState::Err => ibv_qp_state::IBV_QPS_ERR,
    };
    if let Some(v) = attr.pkey_index {
        a.pkey_index = v;
    }
    if let Some(v) = attr.port {
        a.port_num = v;
    }
    if let Some(v) = attr.access {
        a.qp_access_flags = v.bits();
    }
    if let Some(av) = attr.av {
        a.ah_attr = ah_attr(&av);
    }
    if let Some(v) = attr.path_mtu {
        a.path_mtu = v;
    }
    if let Some(v) = attr.dest_qpn {
        a.dest_qp_num = v;
    }
    if let Some(v) = attr.rq_psn {
        a.rq_psn = v;
    }
    if let Some(v) = attr.max_dest_rd_atomic {
        a.max_dest_rd_atomic = v;
    }
    if let Some(v) = attr.min_rnr_timer {
        a.min_rnr_timer = v;
    }
    if let Some(v) = attr.sq_psn {
        a.sq_psn = v;
    }
    if let Some(v) = attr.timeout {
        a.timeout = v;
    }
    if let Some(v) = attr.retry_cnt {
        a.retry_cnt = v;
    }
    if let Some(v) = attr.rnr_retry {
        a.rnr_retry = v;
    }
    if let Some(v) = attr.max_rd_atomic {
        a.max_rd_atomic = v;
    }
    if let Some(v) = attr.qkey {
        a.qkey = v;
    }
    if let Some(v) = attr.sqd_notify {
        a.en_sqd_async_notify = v as u8;
    }
    let mask = (attr.mask() | QpAttrMask::STATE).bits();
    check_detail(
        "ibv_modify_qp",
        // SAFETY: the caller's QP is live; `a` is valid for the call.
        unsafe { ibv_modify_qp(qp, &mut a, mask as i32) },
        || format!(" (QP {qpn:#x} to {to:?}, attributes {:?})", attr.mask()),
    )?;
    Ok(())
}

/// `ibv_query_qp` of `qp`: its state and connection attributes.
pub(crate) fn query_raw(qp: *mut ibv_qp, qpn: u32) -> Result<QpInfo> {
    // SAFETY: plain data; zero is valid.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    // SAFETY: plain data; zero is valid.
    let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    let mask = QpAttrMask::STATE
        | QpAttrMask::DEST_QPN
        | QpAttrMask::PATH_MTU
        | QpAttrMask::RNR_RETRY
        | QpAttrMask::SQ_PSN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MIN_RNR_TIMER;
    check_detail(
        "ibv_query_qp",
        // SAFETY: live QP; both outputs valid for the call.
        unsafe { ibv_query_qp(qp, &mut a, mask.bits() as i32, &mut init) },
        || format!(" (QP {qpn:#x})"),
    )?;
    let state = match a.qp_state {
        ibv_qp_state::IBV_QPS_RESET => QpState::Reset,
        ibv_qp_state::IBV_QPS_INIT => QpState::Init,
        ibv_qp_state::IBV_QPS_RTR => QpState::Rtr,
        ibv_qp_state::IBV_QPS_RTS => QpState::Rts,
        ibv_qp_state::IBV_QPS_SQD => QpState::Sqd,
        _ => QpState::Err,
    };
    Ok(QpInfo {
        state,
        dest_qpn: (state != QpState::Reset && state != QpState::Init).then_some(a.dest_qp_num),
        rnr_retry: Some(a.rnr_retry),
        min_rnr_timer: Some(a.min_rnr_timer),
        path_mtu: Some(a.path_mtu),
        sq_psn: Some(a.sq_psn),
        rq_psn: Some(a.rq_psn),
    })
}
