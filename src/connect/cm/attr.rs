//! What the CM's attributes and parameters become on our side: address
//! vectors and QP attributes from librdmacm's, the INIT/RTR/RTS steps
//! (ours kept where the CM has no say), the connection parameters, and the
//! checks a QP passes before the CM is asked.

use super::{Id, OFFER_LEN};
use crate::qp_attr::{AddressVector, Grh, QpAttr};
use crate::{Access, Error, Qp, Result};
use rdma_sys::*;

/// `ibv_ah_attr` as our address vector.
pub(super) fn av_from_raw(ah: &ibv_ah_attr) -> AddressVector {
    AddressVector {
        dlid: ah.dlid,
        port: ah.port_num,
        service_level: ah.sl,
        grh: (ah.is_global != 0).then_some(Grh {
            // SAFETY: every bit pattern of the GID union is valid.
            dgid: unsafe { ah.grh.dgid.raw },
            sgid_index: ah.grh.sgid_index,
            hop_limit: ah.grh.hop_limit,
            traffic_class: ah.grh.traffic_class,
            flow_label: ah.grh.flow_label,
        }),
    }
}

/// `ibv_qp_attr` with `mask` as our attributes (the fields the mask names).
pub(super) fn attr_from_raw(a: &ibv_qp_attr, mask: u32) -> QpAttr {
    use crate::qp_attr::QpAttrMask as M;
    let m = M::from_bits_truncate(mask);
    let has = |b: M| m.contains(b);
    QpAttr {
        pkey_index: has(M::PKEY_INDEX).then_some(a.pkey_index),
        port: has(M::PORT).then_some(a.port_num),
        access: has(M::ACCESS_FLAGS).then(|| Access::from_bits_truncate(a.qp_access_flags)),
        av: has(M::AV).then(|| av_from_raw(&a.ah_attr)),
        path_mtu: has(M::PATH_MTU).then_some(a.path_mtu),
        dest_qpn: has(M::DEST_QPN).then_some(a.dest_qp_num),
        rq_psn: has(M::RQ_PSN).then_some(a.rq_psn),
        max_dest_rd_atomic: has(M::MAX_DEST_RD_ATOMIC).then_some(a.max_dest_rd_atomic),
        min_rnr_timer: has(M::MIN_RNR_TIMER).then_some(a.min_rnr_timer),
        sq_psn: has(M::SQ_PSN).then_some(a.sq_psn),
        timeout: has(M::TIMEOUT).then_some(a.timeout),
        retry_cnt: has(M::RETRY_CNT).then_some(a.retry_cnt),
        rnr_retry: has(M::RNR_RETRY).then_some(a.rnr_retry),
        qkey: has(M::QKEY).then_some(a.qkey),
        max_rd_atomic: has(M::MAX_QP_RD_ATOMIC).then_some(a.max_rd_atomic),
        sqd_notify: has(M::EN_SQD_ASYNC_NOTIFY).then_some(a.en_sqd_async_notify != 0),
    }
}

/// The CM's INIT, RTR and RTS attributes for `qp`, with our responder
/// access, `min_rnr_timer` and `rnr_retry`.
pub(super) fn steps_from(id: &Id, qp: &Qp) -> Result<[QpAttr; 3]> {
    use ibv_qp_state::*;
    let cfg = qp.config();
    let mut init = id.qp_attr(IBV_QPS_INIT)?;
    init.access = Some(Access::QP_ALL);
    let mut rtr = id.qp_attr(IBV_QPS_RTR)?;
    rtr.min_rnr_timer = Some(cfg.min_rnr_timer);
    let mut rts = id.qp_attr(IBV_QPS_RTS)?;
    rts.rnr_retry = Some(cfg.rnr_retry);
    Ok([init, rtr, rts])
}

/// A UD QP's steps: the CM's INIT attributes (pkey index, port, qkey),
/// RTR with none, RTS with SQ_PSN 0 (librdmacm's `ucma_init_ud_qp`).
pub(super) fn ud_steps_from(id: &Id) -> Result<[QpAttr; 3]> {
    let init = id.qp_attr(ibv_qp_state::IBV_QPS_INIT)?;
    Ok([init, QpAttr::default(), QpAttr::rts_unreliable(0)])
}

pub(super) fn conn_param(qp: &Qp, private: &[u8; OFFER_LEN]) -> rdma_conn_param {
    rdma_conn_param {
        private_data: private.as_ptr().cast(),
        private_data_len: OFFER_LEN as u8,
        responder_resources: 1,
        initiator_depth: 1,
        flow_control: 0,
        retry_count: 7,
        rnr_retry_count: qp.config().rnr_retry,
        // The REQ/REP say whether the QP takes its receives from an SRQ.
        srq: qp.srq.is_some() as u8,
        qp_num: qp.endpoint().qpn,
    }
}

/// `qp` must be a verbs QP in RESET on the device the CM picks, UD when
/// `ud` says so (the UDP port space) and RC or UC when not.
pub(super) fn check_qp(qp: &Qp, id: &Id, peer: &str, ud: bool) -> Result<()> {
    let ours = check_qp_here(qp, ud)?;
    match id.device() {
        Some(d) if d == ours => Ok(()),
        d => Err(Error::Exchange(format!(
            "rdma_cm reaches {peer} through device {}, but the QP is on {ours}",
            d.as_deref().unwrap_or("(none)")
        ))),
    }
}

/// What [`check_qp`] checks without the CM (a verbs QP, its transport, in
/// RESET): run before any id is made, so a wrong QP is refused at once.
/// Returns the QP's device name.
pub(super) fn check_qp_here(qp: &Qp, ud: bool) -> Result<String> {
    let Some(ours) = qp.verbs_device() else {
        return Err(Error::Unsupported {
            device: crate::SIM_DEVICE.into(),
            feature: crate::Feature::RdmaCm,
        });
    };
    let is_ud = qp.config().qp_type == crate::QpType::Ud;
    if is_ud != ud {
        return Err(Error::WrongTransport {
            qp_type: qp.config().qp_type,
            op: if ud {
                "a UD connection through rdma_cm (it needs a UD QP)"
            } else {
                "a connection through rdma_cm's connect or accept (a UD QP connects with cm::connect_ud / CmListener::bind_ud)"
            },
        });
    }
    if qp.state() != crate::qp_attr::QpState::Reset {
        return Err(Error::NotInReset {
            op: "connecting through rdma_cm",
            state: qp.state(),
        });
    }
    Ok(ours.to_string())
}

pub(super) fn sockaddr(addr: std::net::SocketAddrV4) -> libc::sockaddr_in {
    // SAFETY: plain data; zero is valid.
    let mut s: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    s.sin_family = libc::AF_INET as libc::sa_family_t;
    s.sin_port = addr.port().to_be();
    s.sin_addr.s_addr = u32::from(*addr.ip()).to_be();
    s
}
