//! QP attributes and the RC, UC and UD state machines as typed steps: which attributes a
//! transition requires, which it allows, and the values each may take.
//!
//! Sources: IB spec 1.4 vol. 1, 11.2.4.2 (Modify QP) and the table of
//! required and optional attributes per transition, as the kernel encodes it
//! (`qp_state_table` in `drivers/infiniband/core/verbs.c`, used by
//! `ib_modify_qp_is_ok`); values from `enum ibv_qp_attr_mask` in
//! rdma-core's `libibverbs/verbs.h`.

use super::error::{Error, Result};
use super::mem::Access;
pub use super::qp_state::QpState;
// The transport of a QP (`enum ibv_qp_type`): defined in `mlx5_dv::verbs`.
pub use mlx5_dv::verbs::QpType;

bitflags::bitflags! {
    /// Which attributes a modify carries (`enum ibv_qp_attr_mask` values).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct QpAttrMask: u32 {
        /// `IBV_QP_STATE`: `qp_state`, the state to move to.
        const STATE = 1 << 0;
        /// `IBV_QP_CUR_STATE`: `cur_qp_state`, the state the caller believes the QP is in.
        const CUR_STATE = 1 << 1;
        /// `IBV_QP_EN_SQD_ASYNC_NOTIFY`: `en_sqd_async_notify` (RTS -> SQD).
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// `IBV_QP_ACCESS_FLAGS`: `qp_access_flags`, the remote operations the responder accepts.
        const ACCESS_FLAGS = 1 << 3;
        /// `IBV_QP_PKEY_INDEX`: `pkey_index`, the P_Key table index.
        const PKEY_INDEX = 1 << 4;
        /// `IBV_QP_PORT`: `port_num`.
        const PORT = 1 << 5;
        /// `IBV_QP_QKEY`: `qkey` (UD).
        const QKEY = 1 << 6;
        /// `IBV_QP_AV`: `ah_attr`, the primary path's address vector.
        const AV = 1 << 7;
        /// `IBV_QP_PATH_MTU`: `path_mtu` (`enum ibv_mtu`).
        const PATH_MTU = 1 << 8;
        /// `IBV_QP_TIMEOUT`: `timeout`, the local ACK timeout.
        const TIMEOUT = 1 << 9;
        /// `IBV_QP_RETRY_CNT`: `retry_cnt`, transport retries.
        const RETRY_CNT = 1 << 10;
        /// `IBV_QP_RNR_RETRY`: `rnr_retry`, RNR NAK retries.
        const RNR_RETRY = 1 << 11;
        /// `IBV_QP_RQ_PSN`: `rq_psn`, the first PSN expected.
        const RQ_PSN = 1 << 12;
        /// `IBV_QP_MAX_QP_RD_ATOMIC`: `max_rd_atomic`, READs/atomics in flight as requester.
        const MAX_QP_RD_ATOMIC = 1 << 13;
        /// `IBV_QP_ALT_PATH`: `alt_ah_attr` and the alternate path (APM).
        const ALT_PATH = 1 << 14;
        /// `IBV_QP_MIN_RNR_TIMER`: `min_rnr_timer`, the RNR NAK timer asked of the requester.
        const MIN_RNR_TIMER = 1 << 15;
        /// `IBV_QP_SQ_PSN`: `sq_psn`, the first PSN sent.
        const SQ_PSN = 1 << 16;
        /// `IBV_QP_MAX_DEST_RD_ATOMIC`: `max_dest_rd_atomic`, READs/atomics in flight as responder.
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        /// `IBV_QP_PATH_MIG_STATE`: `path_mig_state` (APM).
        const PATH_MIG_STATE = 1 << 18;
        /// `IBV_QP_CAP`: `cap`, the queue sizes (resize).
        const CAP = 1 << 19;
        /// `IBV_QP_DEST_QPN`: `dest_qp_num`, the peer's QPN.
        const DEST_QPN = 1 << 20;
    }
}

impl QpAttrMask {
    /// The `IBV_QP_*` name of a single-bit mask.
    pub fn name(self) -> &'static str {
        const NAMES: [&str; 21] = [
            "STATE",
            "CUR_STATE",
            "EN_SQD_ASYNC_NOTIFY",
            "ACCESS_FLAGS",
            "PKEY_INDEX",
            "PORT",
            "QKEY",
            "AV",
            "PATH_MTU",
            "TIMEOUT",
            "RETRY_CNT",
            "RNR_RETRY",
            "RQ_PSN",
            "MAX_QP_RD_ATOMIC",
            "ALT_PATH",
            "MIN_RNR_TIMER",
            "SQ_PSN",
            "MAX_DEST_RD_ATOMIC",
            "PATH_MIG_STATE",
            "CAP",
            "DEST_QPN",
        ];
        NAMES
            .get(self.bits().trailing_zeros() as usize)
            .copied()
            .unwrap_or("?")
    }
}

/// The global route header of an address vector (RoCE always needs one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grh {
    /// The peer's GID.
    pub dgid: [u8; 16],
    /// Our GID table index (a RoCE v2 entry on RoCE).
    pub sgid_index: u8,
    /// Hop limit; 64 is what rdma-core's examples and perftest use.
    pub hop_limit: u8,
    /// Traffic class (8 bits; on RoCE v2 the IP header's DSCP and ECN).
    pub traffic_class: u8,
    /// Flow label (20 bits; 0: none).
    pub flow_label: u32,
}

/// Where a QP's packets go (`struct ibv_ah_attr`): an RC or UC QP's path
/// at RTR, or a UD destination's address handle (`Pd::create_ah`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressVector {
    /// The peer's LID (InfiniBand; 0 on RoCE).
    pub dlid: u16,
    /// Our port.
    pub port: u8,
    /// Global routing: required on RoCE, optional on InfiniBand.
    pub grh: Option<Grh>,
    /// Service level, 0..=15 (`ibv_ah_attr.sl`).
    pub service_level: u8,
}

/// Attributes of one modify, each present or not (the mask follows from
/// which fields are `Some`). Units and ranges are the IB spec's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpAttr {
    /// P_Key table index (`IBV_QP_PKEY_INDEX`; RESET -> INIT).
    pub pkey_index: Option<u16>,
    /// Port number, from 1 (`IBV_QP_PORT`; RESET -> INIT).
    pub port: Option<u8>,
    /// Responder access: which remote operations the QP accepts.
    pub access: Option<Access>,
    /// The path to the peer (`IBV_QP_AV`, `ibv_qp_attr.ah_attr`; RC/UC INIT -> RTR).
    pub av: Option<AddressVector>,
    /// `enum ibv_mtu`: 1 = 256 B ... 5 = 4096 B.
    pub path_mtu: Option<u32>,
    /// The peer's QPN (24 bits).
    pub dest_qpn: Option<u32>,
    /// First PSN expected from the peer (24 bits).
    pub rq_psn: Option<u32>,
    /// RDMA READs and atomics the responder takes in flight.
    pub max_dest_rd_atomic: Option<u8>,
    /// RNR NAK timer the responder asks for: 0..=31, IB table 45
    /// (1 = 0.01 ms, 12 = 0.64 ms, 0 = 655.36 ms).
    pub min_rnr_timer: Option<u8>,
    /// First PSN we send (24 bits).
    pub sq_psn: Option<u32>,
    /// Local ACK timeout: 4.096 us * 2^timeout, 0..=31 (0: infinite).
    pub timeout: Option<u8>,
    /// Transport retries: 0..=7.
    pub retry_cnt: Option<u8>,
    /// RNR retries: 0..=6, 7 = forever.
    pub rnr_retry: Option<u8>,
    /// RDMA READs and atomics we keep in flight.
    pub max_rd_atomic: Option<u8>,
    /// UD: the queue key datagrams to this QP must carry (32 bits; one with
    /// bit 31 set is a controlled qkey, which only privileged users set).
    pub qkey: Option<u32>,
    /// RTS -> SQD: whether the device raises
    /// [`AsyncEvent::SqDrained`](crate::AsyncEvent::SqDrained) once the send
    /// queue is drained (`IBV_QP_EN_SQD_ASYNC_NOTIFY`,
    /// `ibv_qp_attr.en_sqd_async_notify`).
    pub sqd_notify: Option<bool>,
}

impl QpAttr {
    /// The mask of the attributes present (STATE not included).
    pub fn mask(&self) -> QpAttrMask {
        let mut m = QpAttrMask::empty();
        let mut set = |present: bool, bit| m.set(bit, present);
        set(self.pkey_index.is_some(), QpAttrMask::PKEY_INDEX);
        set(self.port.is_some(), QpAttrMask::PORT);
        set(self.access.is_some(), QpAttrMask::ACCESS_FLAGS);
        set(self.av.is_some(), QpAttrMask::AV);
        set(self.path_mtu.is_some(), QpAttrMask::PATH_MTU);
        set(self.dest_qpn.is_some(), QpAttrMask::DEST_QPN);
        set(self.rq_psn.is_some(), QpAttrMask::RQ_PSN);
        set(
            self.max_dest_rd_atomic.is_some(),
            QpAttrMask::MAX_DEST_RD_ATOMIC,
        );
        set(self.min_rnr_timer.is_some(), QpAttrMask::MIN_RNR_TIMER);
        set(self.sq_psn.is_some(), QpAttrMask::SQ_PSN);
        set(self.timeout.is_some(), QpAttrMask::TIMEOUT);
        set(self.retry_cnt.is_some(), QpAttrMask::RETRY_CNT);
        set(self.rnr_retry.is_some(), QpAttrMask::RNR_RETRY);
        set(self.max_rd_atomic.is_some(), QpAttrMask::MAX_QP_RD_ATOMIC);
        set(self.qkey.is_some(), QpAttrMask::QKEY);
        set(self.sqd_notify.is_some(), QpAttrMask::EN_SQD_ASYNC_NOTIFY);
        m
    }

    /// RESET -> INIT of a UD QP: P_Key index 0, `port`, `qkey`.
    pub fn init_ud(port: u8, qkey: u32) -> Self {
        QpAttr {
            pkey_index: Some(0),
            port: Some(port),
            qkey: Some(qkey),
            ..Default::default()
        }
    }

    /// INIT -> RTR of a UC QP toward `dest_qpn`: the address vector, path
    /// MTU, peer QPN and first PSN (no READ/atomic or RNR attributes: UC
    /// has neither).
    pub fn rtr_uc(av: AddressVector, path_mtu: u32, dest_qpn: u32, rq_psn: u32) -> Self {
        QpAttr {
            av: Some(av),
            path_mtu: Some(path_mtu),
            dest_qpn: Some(dest_qpn),
            rq_psn: Some(rq_psn),
            ..Default::default()
        }
    }

    /// RTR -> RTS of a UC or UD QP: the first PSN alone.
    pub fn rts_unreliable(sq_psn: u32) -> Self {
        QpAttr {
            sq_psn: Some(sq_psn),
            ..Default::default()
        }
    }

    /// RESET -> INIT with the usual values: P_Key index 0, `port`, `access`
    /// (its QP access flags, [`Access::QP_ALL`]; `MW_BIND`, an MR's
    /// attribute, is left out).
    pub fn init(port: u8, access: Access) -> Self {
        QpAttr {
            pkey_index: Some(0),
            port: Some(port),
            access: Some(access & Access::QP_ALL),
            ..Default::default()
        }
    }

    /// INIT -> RTR toward `dest_qpn` with what rdma-core's `ibv_rc_pingpong`
    /// asks for: one READ/atomic in flight, `min_rnr_timer` 12 (0.64 ms).
    pub fn rtr(av: AddressVector, path_mtu: u32, dest_qpn: u32, rq_psn: u32) -> Self {
        QpAttr {
            av: Some(av),
            path_mtu: Some(path_mtu),
            dest_qpn: Some(dest_qpn),
            rq_psn: Some(rq_psn),
            max_dest_rd_atomic: Some(1),
            min_rnr_timer: Some(12),
            ..Default::default()
        }
    }

    /// RESET -> INIT of a DCI: P_Key index 0 and `port` (a DCI takes no
    /// access flags: it is never a responder).
    pub fn init_dci(port: u8) -> Self {
        QpAttr {
            pkey_index: Some(0),
            port: Some(port),
            ..Default::default()
        }
    }

    /// INIT -> RTR of a DCT: requesters wait `min_rnr_timer` (IB spec
    /// table 45 code) after an RNR NAK; `path` the AV and path MTU where
    /// the device needs them (ConnectX), `None` on the sim.
    pub fn rtr_dct(min_rnr_timer: u8, path: Option<(AddressVector, u32)>) -> Self {
        QpAttr {
            min_rnr_timer: Some(min_rnr_timer),
            av: path.map(|p| p.0),
            path_mtu: path.map(|p| p.1),
            ..Default::default()
        }
    }

    /// INIT -> RTR of a DCI: no destination (each WR names its target);
    /// `path` as [`Self::rtr_dct`]'s.
    pub fn rtr_dci(path: Option<(AddressVector, u32)>) -> Self {
        QpAttr {
            av: path.map(|p| p.0),
            path_mtu: path.map(|p| p.1),
            ..Default::default()
        }
    }

    /// RTR -> RTS: `timeout` 14 (67 ms), `retry_cnt` 7, `rnr_retry` as
    /// given (finite unless 7 is asked for), one READ/atomic in flight.
    pub fn rts(sq_psn: u32, rnr_retry: u8) -> Self {
        QpAttr {
            sq_psn: Some(sq_psn),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(rnr_retry),
            max_rd_atomic: Some(1),
            ..Default::default()
        }
    }
}

/// The attributes a transition of a QP of type `t` requires and those it
/// may carry besides (STATE is implied); `None`: the transition does not
/// exist. The kernel's `qp_state_table` (`drivers/infiniband/core/verbs.c`),
/// for the states this crate moves a QP through (SQD only from and back to
/// RTS, with none of SQD -> SQD's path changes; not SQE).
pub fn transition(t: QpType, from: QpState, to: QpState) -> Option<(QpAttrMask, QpAttrMask)> {
    use QpAttrMask as M;
    use QpState::*;
    let none = M::empty();
    match t {
        QpType::Rc => rc_transition(from, to),
        QpType::Uc => Some(match (from, to) {
            (_, Reset) | (_, Err) => (none, none),
            (Reset, Init) => (M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS, none),
            (Init, Init) => (none, M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS),
            (Init, Rtr) => (
                M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN,
                M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX,
            ),
            (Rtr, Rts) => (
                M::SQ_PSN,
                M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE,
            ),
            (Rts, Rts) | (Sqd, Rts) => (
                none,
                M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE,
            ),
            (Rts, Sqd) => (none, M::EN_SQD_ASYNC_NOTIFY),
            _ => return None,
        }),
        QpType::Ud => Some(match (from, to) {
            (_, Reset) | (_, Err) => (none, none),
            (Reset, Init) => (M::PKEY_INDEX | M::PORT | M::QKEY, none),
            (Init, Init) => (none, M::PKEY_INDEX | M::PORT | M::QKEY),
            (Init, Rtr) => (none, M::PKEY_INDEX | M::QKEY),
            (Rtr, Rts) => (M::SQ_PSN, M::CUR_STATE | M::QKEY),
            (Rts, Rts) | (Sqd, Rts) => (none, M::CUR_STATE | M::QKEY),
            (Rts, Sqd) => (none, M::EN_SQD_ASYNC_NOTIFY),
            _ => return None,
        }),
        QpType::Dci | QpType::Dct => dc_transition(t, from, to),
    }
}

/// The attributes a DC QP's transition requires and those it may carry
/// besides (STATE is implied); `None`: the transition does not exist.
/// A DCT moves RESET -> INIT (P_Key index, port, the access its
/// initiators get) -> RTR (`min_rnr_timer`; the AV and path MTU where the
/// device needs them) and nowhere else: the kernel's `mlx5_ib_modify_dct`
/// (`drivers/infiniband/hw/mlx5/qp.c`) takes only these two. A DCI moves
/// as an RC QP with no peer: RESET -> INIT (P_Key index, port) -> RTR (no
/// destination; AV and path MTU optional) -> RTS (RC's), and to ERR and
/// RESET from anywhere. (`../shared/reference/dc.md`; rdma-core
/// `tests/test_mlx5_dc.py`.)
pub fn dc_transition(t: QpType, from: QpState, to: QpState) -> Option<(QpAttrMask, QpAttrMask)> {
    use QpAttrMask as M;
    use QpState::*;
    let none = M::empty();
    match t {
        QpType::Dct => Some(match (from, to) {
            (Reset, Init) => (M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS, none),
            (Init, Rtr) => (M::MIN_RNR_TIMER, M::AV | M::PATH_MTU),
            _ => return None,
        }),
        QpType::Dci => Some(match (from, to) {
            (_, Reset) | (_, Err) => (none, none),
            (Reset, Init) => (M::PKEY_INDEX | M::PORT, none),
            (Init, Init) => (none, M::PKEY_INDEX | M::PORT),
            (Init, Rtr) => (none, M::AV | M::PATH_MTU),
            (Rtr, Rts) => (
                M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC,
                M::CUR_STATE | M::MIN_RNR_TIMER,
            ),
            (Rts, Rts) => (none, M::CUR_STATE | M::MIN_RNR_TIMER),
            _ => return None,
        }),
        _ => None,
    }
}

/// The attributes an RC QP transition requires and those it may carry
/// besides (STATE is implied). `None`: the transition does not exist.
pub fn rc_transition(from: QpState, to: QpState) -> Option<(QpAttrMask, QpAttrMask)> {
    use QpAttrMask as M;
    use QpState::*;
    let none = M::empty();
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (none, none),
        (Reset, Init) => (M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS, none),
        (Init, Init) => (none, M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS),
        (Init, Rtr) => (
            M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER,
            M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX,
        ),
        (Rtr, Rts) => (
            M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC,
            M::CUR_STATE | M::ACCESS_FLAGS | M::MIN_RNR_TIMER | M::ALT_PATH | M::PATH_MIG_STATE,
        ),
        (Rts, Rts) | (Sqd, Rts) => (
            none,
            M::CUR_STATE | M::ACCESS_FLAGS | M::MIN_RNR_TIMER | M::ALT_PATH | M::PATH_MIG_STATE,
        ),
        (Rts, Sqd) => (none, M::EN_SQD_ASYNC_NOTIFY),
        _ => return None,
    })
}

/// Checks a modify of an RC QP from `from` to `to` with `attr` before any
/// verbs call: the transition exists, every required attribute is there,
/// nothing else is, each value is in range, and on RoCE (`roce`) the address
/// vector is global. The error names the attribute.
pub fn check_rc_modify(from: QpState, to: QpState, attr: &QpAttr, roce: bool) -> Result<()> {
    check_modify(QpType::Rc, from, to, attr, roce)
}

/// [`check_rc_modify`] for a QP of type `t`: its own table ([`transition`]).
pub fn check_modify(
    t: QpType,
    from: QpState,
    to: QpState,
    attr: &QpAttr,
    roce: bool,
) -> Result<()> {
    let transition = || format!("{from:?} -> {to:?}");
    let Some((required, optional)) = self::transition(t, from, to) else {
        return Err(Error::QpAttr {
            transition: transition(),
            attr: "STATE",
            problem: format!("is not a transition of a {} QP", t.name()),
        });
    };
    let mask = attr.mask();
    for bit in required.iter() {
        if !mask.contains(bit) {
            return Err(Error::QpAttr {
                transition: transition(),
                attr: bit.name(),
                problem: "is required and missing".into(),
            });
        }
    }
    if let Some(bit) = (mask - required - optional).iter().next() {
        return Err(Error::QpAttr {
            transition: transition(),
            attr: bit.name(),
            problem: "is not allowed in this transition".into(),
        });
    }
    let range = |attr: &'static str, v: Option<u32>, max: u32| match v {
        Some(v) if v > max => Err(Error::QpAttr {
            transition: transition(),
            attr,
            problem: format!("= {v} is out of range 0..={max}"),
        }),
        _ => Ok(()),
    };
    range("DEST_QPN", attr.dest_qpn, 0xff_ffff)?;
    range("RQ_PSN", attr.rq_psn, 0xff_ffff)?;
    range("SQ_PSN", attr.sq_psn, 0xff_ffff)?;
    range("MIN_RNR_TIMER", attr.min_rnr_timer.map(u32::from), 31)?;
    range("TIMEOUT", attr.timeout.map(u32::from), 31)?;
    range("RETRY_CNT", attr.retry_cnt.map(u32::from), 7)?;
    range("RNR_RETRY", attr.rnr_retry.map(u32::from), 7)?;
    if attr.port == Some(0) {
        return Err(Error::QpAttr {
            transition: transition(),
            attr: "PORT",
            problem: "0 does not exist (ports count from 1)".into(),
        });
    }
    if let Some(av) = attr.av {
        range("AV", Some(av.service_level as u32), 15)?;
        if let Some(g) = av.grh {
            range("AV", Some(g.flow_label), 0xf_ffff)?;
        }
        if av.port == 0 {
            return Err(Error::QpAttr {
                transition: transition(),
                attr: "AV",
                problem: "port 0 does not exist (ports count from 1)".into(),
            });
        }
    }
    if let Some(m) = attr.path_mtu {
        if !(1..=5).contains(&m) {
            return Err(Error::QpAttr {
                transition: transition(),
                attr: "PATH_MTU",
                problem: format!("= {m} is not an enum ibv_mtu (1 = 256 B ... 5 = 4096 B)"),
            });
        }
    }
    if let Some(av) = attr.av {
        if roce && av.grh.is_none() {
            return Err(Error::QpAttr {
                transition: transition(),
                attr: "AV",
                problem: "must be global (a GRH with the GIDs) on RoCE".into(),
            });
        }
    }
    Ok(())
}

/// IB spec table 45: the RNR NAK timer for `min_rnr_timer` 0..=31.
pub fn rnr_timer(code: u8) -> std::time::Duration {
    const US: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
        5120, 7680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
        245_760, 327_680, 491_520,
    ];
    std::time::Duration::from_micros(US[(code & 31) as usize] as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn av(grh: bool) -> AddressVector {
        AddressVector {
            dlid: 0,
            port: 1,
            grh: grh.then_some(Grh {
                dgid: [0; 16],
                sgid_index: 1,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            }),
            service_level: 0,
        }
    }

    fn named(r: Result<()>) -> (&'static str, String) {
        match r {
            Err(Error::QpAttr { attr, problem, .. }) => (attr, problem),
            other => panic!("not a QpAttr error: {other:?}"),
        }
    }

    /// Removing any required attribute from any transition is refused and
    /// names it; the complete set passes.
    #[test]
    fn every_required_attribute_is_checked_by_name() {
        use QpState::*;
        let full = [
            (Reset, Init, QpAttr::init(1, Access::LOCAL_WRITE)),
            (Init, Rtr, QpAttr::rtr(av(true), 3, 0x12, 0x34)),
            (Rtr, Rts, QpAttr::rts(0x56, 6)),
        ];
        for (from, to, attr) in full {
            check_rc_modify(from, to, &attr, true).unwrap();
            let (required, _) = rc_transition(from, to).unwrap();
            for bit in required.iter() {
                let mut a = attr;
                match bit {
                    QpAttrMask::PKEY_INDEX => a.pkey_index = None,
                    QpAttrMask::PORT => a.port = None,
                    QpAttrMask::ACCESS_FLAGS => a.access = None,
                    QpAttrMask::AV => a.av = None,
                    QpAttrMask::PATH_MTU => a.path_mtu = None,
                    QpAttrMask::DEST_QPN => a.dest_qpn = None,
                    QpAttrMask::RQ_PSN => a.rq_psn = None,
                    QpAttrMask::MAX_DEST_RD_ATOMIC => a.max_dest_rd_atomic = None,
                    QpAttrMask::MIN_RNR_TIMER => a.min_rnr_timer = None,
                    QpAttrMask::SQ_PSN => a.sq_psn = None,
                    QpAttrMask::TIMEOUT => a.timeout = None,
                    QpAttrMask::RETRY_CNT => a.retry_cnt = None,
                    QpAttrMask::RNR_RETRY => a.rnr_retry = None,
                    QpAttrMask::MAX_QP_RD_ATOMIC => a.max_rd_atomic = None,
                    _ => unreachable!("{bit:?}"),
                }
                let (name, problem) = named(check_rc_modify(from, to, &a, true));
                assert_eq!(name, bit.name(), "{from:?} -> {to:?}");
                assert!(problem.contains("required"), "{problem}");
            }
        }
    }

    /// PORT or MAX_DEST_RD_ATOMIC added to RTR -> RTS is refused by name.
    #[test]
    fn attributes_a_transition_does_not_allow_are_refused() {
        let mut a = QpAttr::rts(1, 6);
        a.port = Some(1);
        assert_eq!(
            named(check_rc_modify(QpState::Rtr, QpState::Rts, &a, false)).0,
            "PORT"
        );
        let mut a = QpAttr::rts(1, 6);
        a.max_dest_rd_atomic = Some(1);
        assert_eq!(
            named(check_rc_modify(QpState::Rtr, QpState::Rts, &a, false)).0,
            "MAX_DEST_RD_ATOMIC"
        );
        // A transition that does not exist.
        assert_eq!(
            named(check_rc_modify(
                QpState::Reset,
                QpState::Rts,
                &QpAttr::default(),
                false
            ))
            .0,
            "STATE"
        );
    }

    /// RTR on RoCE needs a global address vector; on InfiniBand it may be local.
    #[test]
    fn roce_needs_a_global_address_vector() {
        let a = QpAttr::rtr(av(false), 3, 1, 1);
        assert_eq!(
            named(check_rc_modify(QpState::Init, QpState::Rtr, &a, true)).0,
            "AV"
        );
        check_rc_modify(QpState::Init, QpState::Rtr, &a, false).unwrap();
    }

    #[test]
    fn values_out_of_range_are_refused() {
        let mut a = QpAttr::rts(1 << 24, 6);
        assert_eq!(
            named(check_rc_modify(QpState::Rtr, QpState::Rts, &a, false)).0,
            "SQ_PSN"
        );
        a.sq_psn = Some(1);
        a.rnr_retry = Some(8);
        assert_eq!(
            named(check_rc_modify(QpState::Rtr, QpState::Rts, &a, false)).0,
            "RNR_RETRY"
        );
        let mut r = QpAttr::rtr(av(true), 6, 1, 1);
        assert_eq!(
            named(check_rc_modify(QpState::Init, QpState::Rtr, &r, true)).0,
            "PATH_MTU"
        );
        r.path_mtu = Some(3);
        r.min_rnr_timer = Some(32);
        assert_eq!(
            named(check_rc_modify(QpState::Init, QpState::Rtr, &r, true)).0,
            "MIN_RNR_TIMER"
        );
    }

    #[test]
    fn rnr_timer_follows_table_45() {
        assert_eq!(rnr_timer(1).as_micros(), 10);
        assert_eq!(rnr_timer(12).as_micros(), 640);
        assert_eq!(rnr_timer(0).as_micros(), 655_360);
        assert_eq!(rnr_timer(31).as_micros(), 491_520);
    }
}

/// How a connected QP reaches its peer (what perftest prints before a run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathInfo {
    /// `IB`, `Ethernet` (RoCE) or `sim`.
    pub link_layer: &'static str,
    /// Path MTU in bytes (`None` on the sim, which has no wire).
    pub mtu: Option<u32>,
    /// Source GID index on RoCE.
    pub gid_index: Option<u8>,
    /// Source GID (zero unless RoCE).
    pub gid: [u8; 16],
    /// Local LID (0 on RoCE and the sim).
    pub lid: u16,
    /// First send PSN (24 bits).
    pub sq_psn: u32,
    /// QPN of the connected peer.
    pub dest_qpn: u32,
}

impl PathInfo {
    /// A QP's path before RTR and RTS set it: only the link layer known.
    pub(crate) fn unconnected(link_layer: &'static str) -> Self {
        PathInfo {
            link_layer,
            mtu: None,
            gid_index: None,
            gid: [0; 16],
            lid: 0,
            sq_psn: 0,
            dest_qpn: 0,
        }
    }
}

/// What [`Qp::query`](crate::Qp::query) reports: the device's view of the QP. Attributes the
/// device does not keep (the sim has no PSNs or MTU) are `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInfo {
    /// The QP's state (`ibv_qp_attr.qp_state`).
    pub state: QpState,
    /// The peer's QPN (`dest_qp_num`).
    pub dest_qpn: Option<u32>,
    /// RNR retries, 0..=7 (7: forever) (`rnr_retry`).
    pub rnr_retry: Option<u8>,
    /// The RNR NAK timer code, 0..=31 (`min_rnr_timer`; see [`QpAttr::min_rnr_timer`]).
    pub min_rnr_timer: Option<u8>,
    /// `enum ibv_mtu`.
    pub path_mtu: Option<u32>,
    /// The next PSN to send, 24 bits (`sq_psn`).
    pub sq_psn: Option<u32>,
    /// The next PSN expected, 24 bits (`rq_psn`).
    pub rq_psn: Option<u32>,
}

/// This side's half of a connection: what the peer needs for its INIT ->
/// RTR (perftest exchanges the same facts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Our QPN (24 bits).
    pub qpn: u32,
    /// Our LID (InfiniBand; 0 on RoCE and the sim).
    pub lid: u16,
    /// Our GID and its table index (RoCE: the chosen RoCE v2 entry).
    pub gid: [u8; 16],
    /// Our GID's table index: `Some` on RoCE, `None` on InfiniBand, the sim,
    /// and an endpoint received from the peer (the index is local).
    pub gid_index: Option<u8>,
    /// The port's active MTU (`enum ibv_mtu`; 0 on the sim).
    pub active_mtu: u32,
    /// RoCE: address vectors must be global.
    pub roce: bool,
}
