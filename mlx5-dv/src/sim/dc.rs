//! DC (dynamically connected) on the sim: DC targets (DCTs) and DC
//! initiators (DCIs), and the lookup of the DCT a DCI's WQE addresses.
//!
//! What the sim models:
//! - A DCT ([`Device::create_dct`]) is created on an SRQ and a CQ with a
//!   64-bit access key; it has no SQ and no RQ of its own. It moves RESET
//!   -> INIT ([`Qp::to_init_dct`]) -> RTR ([`Qp::to_rtr_dct`]) and no
//!   further: every other move is refused with [`SimError::BadTransition`]
//!   (the kernel's `mlx5_ib_modify_dct`, `drivers/infiniband/hw/mlx5/qp.c`,
//!   takes only these two, and creates the DCT in the device at INIT ->
//!   RTR). So its DCT number exists only from RTR on ([`Qp::dctn`]).
//! - A DCI ([`Device::create_dci`]) is send-only: RESET -> INIT
//!   ([`Qp::to_init`]) -> RTR with no destination ([`Qp::to_rtr_dci`]) ->
//!   RTS, ERR and back through RESET as RC's. WQEs posted to a DCI not in
//!   RTS wait in its SQ as an RC QP's do (in ERR they flush).
//! - A DCI's WQE is the ctrl segment, the 48-byte datagram segment (DC key
//!   at bytes 0..8, DCT number in the low 24 bits of bytes 8..12), then the
//!   operation's segments as RC's. The sim finds the DCT by that number
//!   and checks its key, then runs the operation as RC between the DCI
//!   and the DCT: SENDs into the DCT's SRQ (the receive CQE's `flags_rqpn`
//!   carries the DCI's QPN), WRITE, READ and atomics against the DCT's
//!   access flags and its PD's MRs, RNR NAKs retried per the DCI's
//!   `rnr_retry` after the DCT's `min_rnr_timer`. WQE by WQE a DCI may
//!   address different DCTs.
//! - A bad address (wrong key, no such DCT number, number 0, a DCT not in
//!   RTR) completes with [`DC_ADDRESS_SYNDROME`] on the DCI, which goes to
//!   ERR; nothing is delivered to or touched on any target.
//! - A DCT never goes to ERR on its own: a remote access error, or a SEND
//!   its receive cannot take, fails the DCI's WQE (as RC's requester) and
//!   leaves the DCT in RTR serving its other DCIs (the sim's choice: one
//!   initiator's bad request must not stop a target shared by many; not
//!   verified on hardware).
//!
//! - Scatter to CQE is never in force on a DC QP
//!   ([`Qp::set_scatter_to_cqe`] leaves it off: rdma-core clears it for a
//!   DCI and for a DCT without `MLX5_VENDOR_CAP_FLAGS_SCAT2CQE_DCT`).
//!
//! DCI streams and the compact (16-byte) AV are not modelled.

use super::{Access, Cq, Device, Qp, QpState, QpType, SimError, Srq, State};
use crate::prm::Syndrome;
use crate::wqe::DcDest;

/// The completion status of a DCI's WQE whose DCT number or DC key names
/// no DCT in RTR: `TRANSPORT_RETRY_EXC_ERR` (0x15, `IBV_WC_RETRY_EXC_ERR`).
///
/// The sim's choice, unverified on hardware: no public source gives
/// ConnectX's status for these. Why this one: a responder silently drops
/// a packet addressed to no QP, and one whose key does not match (as UD
/// drops a Q_Key violation, IB spec 10.2.4; a DC key is DC's Q_Key), so the
/// requester sees no ACK and exhausts its transport retries; it is also
/// what the sim gives an RC QP whose peer is gone or not in RTR.
pub const DC_ADDRESS_SYNDROME: Syndrome = Syndrome::TRANSPORT_RETRY_EXC_ERR;

/// What a DC QP of the sim is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DcRole {
    /// An initiator: the operations' requester.
    Dci,
    /// A target: `key` is the access key its requests must carry; `dctn`
    /// its DCT number, given at INIT -> RTR (the sim gives the QP's own
    /// table number, never 0).
    Dct { key: u64, dctn: Option<u32> },
}

impl Device {
    /// Creates a DCT in RESET on `srq` (its receives) and `cq` (their
    /// completions), whose requests must carry `dc_key`
    /// (`mlx5dv_dc_init_attr.dct_access_key`). It has no SQ and no RQ:
    /// `dv()` describes both as empty.
    ///
    /// Errors: [`SimError::NoSuchSrq`], [`SimError::ForeignCq`],
    /// [`SimError::Exhausted`] (no QP number left).
    pub fn create_dct(&self, pd: u32, cq: &Cq, srq: &Srq, dc_key: u64) -> Result<Qp, SimError> {
        if !self.lock().srqs.contains_key(&srq.srqn()) {
            return Err(SimError::NoSuchSrq(srq.srqn()));
        }
        let qp = self.create_qp_in(pd, cq, 1, 1, 16, Some(srq.srqn()), QpType::Rc)?;
        self.lock().qps.get_mut(&qp.qpn).expect("just made").dc = Some(DcRole::Dct {
            key: dc_key,
            dctn: None,
        });
        Ok(qp)
    }

    /// Creates a DCI in RESET with an SQ of `sq_wqebbs` WQEBBs (power of
    /// two, 1..=32768) whose completions go to `cq`; no receive queue
    /// (`dv().rq.wqe_cnt` is 0).
    ///
    /// Errors: as [`Device::create_qp`].
    pub fn create_dci(&self, pd: u32, cq: &Cq, sq_wqebbs: u32) -> Result<Qp, SimError> {
        let qp = self.create_qp_in(pd, cq, sq_wqebbs, 1, 16, None, QpType::Rc)?;
        self.lock().qps.get_mut(&qp.qpn).expect("just made").dc = Some(DcRole::Dci);
        Ok(qp)
    }
}

impl Qp {
    /// The QP's DC role, if it is a DCI or a DCT.
    fn dc_role(&self) -> Option<DcRole> {
        self.dev.lock().qps.get(&self.qpn).and_then(|q| q.dc)
    }

    /// Whether this QP is a DCT.
    pub fn is_dct(&self) -> bool {
        matches!(self.dc_role(), Some(DcRole::Dct { .. }))
    }

    /// Whether this QP is a DCI.
    pub fn is_dci(&self) -> bool {
        self.dc_role() == Some(DcRole::Dci)
    }

    /// A DCT's number (24 bits, never 0), which DCIs address it by: `None`
    /// before INIT -> RTR, as the device creates the DCT only then
    /// (rdma-core's `mlx5_modify_qp`, `verbs.c`, sets `qp_num` from the
    /// kernel's `dctn` at RTR; sideway read 0 before), and `None` for a QP that is not a DCT.
    pub fn dctn(&self) -> Option<u32> {
        match self.dc_role() {
            Some(DcRole::Dct { dctn, .. }) => dctn,
            _ => None,
        }
    }

    fn require_dct(&self) -> Result<(), SimError> {
        if self.is_dct() {
            Ok(())
        } else {
            Err(SimError::Unsupported {
                what: "a DCT transition on a QP that is not a DCT",
            })
        }
    }

    /// RESET -> INIT of a DCT: the access its requesters get (REMOTE_WRITE,
    /// REMOTE_READ, REMOTE_ATOMIC) and its port (the sim has one: 1).
    ///
    /// Errors: [`SimError::Unsupported`] on a QP that is not a DCT;
    /// [`SimError::BadSize`] for a port other than 1;
    /// [`SimError::BadTransition`] from a state other than RESET.
    pub fn to_init_dct(&self, access: Access, port: u8) -> Result<(), SimError> {
        self.require_dct()?;
        if port != 1 {
            return Err(SimError::BadSize {
                what: "port",
                value: port as u32,
                min: 1,
                max: 1,
            });
        }
        self.to_init(access)
    }

    /// INIT -> RTR of a DCT: it gets its DCT number ([`Self::dctn`]) and
    /// asks its requesters to wait `min_rnr_delay` after an RNR NAK (its
    /// `min_rnr_timer`, IB spec table 45).
    ///
    /// Errors: [`SimError::Unsupported`] on a QP that is not a DCT;
    /// [`SimError::BadTransition`] from a state other than INIT.
    pub fn to_rtr_dct(&self, min_rnr_delay: std::time::Duration) -> Result<(), SimError> {
        self.require_dct()?;
        let qpn = self.qpn;
        self.modify(QpState::Rtr, |q| {
            q.min_rnr_delay = min_rnr_delay;
            if let Some(DcRole::Dct { dctn, .. }) = &mut q.dc {
                *dctn = Some(qpn);
            }
        })
    }

    /// INIT -> RTR of a DCI: no destination (each WQE names its DCT).
    ///
    /// Errors: [`SimError::Unsupported`] on a QP that is not a DCI;
    /// [`SimError::BadTransition`] from a state other than INIT.
    pub fn to_rtr_dci(&self) -> Result<(), SimError> {
        if !self.is_dci() {
            return Err(SimError::Unsupported {
                what: "a DCI transition on a QP that is not a DCI",
            });
        }
        self.modify(QpState::Rtr, |_| {})
    }
}

/// Whether the move `from -> to` is one a QP of DC role `dc` may make:
/// a DCT only RESET -> INIT and INIT -> RTR (`mlx5_ib_modify_dct`); a DCI
/// and every other QP as the caller's table says.
pub(super) fn dc_allows(dc: Option<DcRole>, from: QpState, to: QpState) -> bool {
    match dc {
        Some(DcRole::Dct { .. }) => matches!(
            (from, to),
            (QpState::Reset, QpState::Init) | (QpState::Init, QpState::Rtr)
        ),
        _ => true,
    }
}

/// The DCT a DCI's WQE addresses with `dest`: its QP number in the sim's
/// table, if a DCT in RTR has that DCT number (not 0) and that key;
/// otherwise the WQE's error, [`DC_ADDRESS_SYNDROME`].
pub(super) fn find_dct(st: &State, dest: DcDest) -> Result<u32, Syndrome> {
    if dest.dctn == 0 {
        return Err(DC_ADDRESS_SYNDROME);
    }
    let q = st.qps.get(&dest.dctn).ok_or(DC_ADDRESS_SYNDROME)?;
    match q.dc {
        Some(DcRole::Dct { key, dctn: Some(n) })
            if n == dest.dctn && key == dest.dc_key && q.state == QpState::Rtr =>
        {
            Ok(dest.dctn)
        }
        _ => Err(DC_ADDRESS_SYNDROME),
    }
}

/// Whether QP `qpn` is a DCT (the responder side keeps it out of ERR).
pub(super) fn is_dct(st: &State, qpn: u32) -> bool {
    st.qps
        .get(&qpn)
        .is_some_and(|q| matches!(q.dc, Some(DcRole::Dct { .. })))
}
