//! The mlx5dv calls that hand a ConnectX's rings to the direct path:
//! `mlx5dv_is_supported`, `mlx5dv_query_device` (the CQE compression
//! caps), `mlx5dv_create_cq` (the call itself; [`VerbsCq`] makes the CQ),
//! `mlx5dv_create_qp` (RC/UC/UD QPs, and the DC QPs: [`create_mlx5_dct`],
//! [`create_mlx5_dci`] and their modify masks), `mlx5dv_init_obj`.

use super::{errno, modify_raw, query_raw, Ctx, Pd, QpCaps, VerbsCq};
use crate::ib::error::{Error, Result};
use crate::ib::qp_attr::{QpAttr, QpAttrMask, QpInfo, QpState};
use rdma_sys::*;
use std::sync::Arc;

/// Whether `ctx`'s device is a ConnectX that libmlx5's direct verbs
/// describe (`mlx5dv_is_supported`): then the direct path can drive it.
pub(crate) fn mlx5_supported(ctx: &Ctx) -> bool {
    // SAFETY: live context; its device pointer is valid while it is open.
    unsafe { mlx5_dv::dv::mlx5dv_is_supported((*ctx.raw).device.cast()) }
}

/// The device's CQE compression caps (`mlx5dv_query_device` with
/// `MLX5DV_CONTEXT_MASK_CQE_COMPRESION`): all zero where the call fails or
/// the provider leaves them out (no `max_num`: no compression).
pub(crate) fn cqe_comp_caps(ctx: &Ctx) -> mlx5_dv::dv::mlx5dv_cqe_comp_caps {
    use mlx5_dv::dv::*;
    let mut out = mlx5dv_context::zeroed();
    out.comp_mask = MLX5DV_CONTEXT_MASK_CQE_COMPRESION;
    // SAFETY: live context; `out` is a writable `struct mlx5dv_context`
    // (layout-tested), whose `comp_mask` asks only for the caps it has room for.
    let rc = unsafe { mlx5dv_query_device(ctx.raw.cast(), &mut out) };
    if rc != 0 || out.comp_mask & MLX5DV_CONTEXT_MASK_CQE_COMPRESION == 0 {
        return mlx5dv_cqe_comp_caps::default();
    }
    out.cqe_comp_caps
}

/// The responder mini-CQE format a compressed CQ is created with
/// (`mlx5dv_cq_init_attr::cqe_comp_res_format`, exactly one: the kernel
/// takes one value), from those `caps` reports; `None` when the device
/// cannot compress (`max_num` 0) or reports none of the three known.
///
/// The basic layout's requester mini-CQEs carry `wqe_counter` and the WQE
/// opcode in every format; the format only says what a responder mini-CQE
/// carries beside `byte_cnt` (the RX hash, or the checksum and stride
/// index). Our expansion reads a responder mini's `byte_cnt` only (its
/// counter is the title's plus the position), so any format serves:
/// `MLX5DV_CQE_RES_FORMAT_HASH` first, the hardware's format 0, which the
/// kernel reports with `CSUM` on every device with `cqe_compression`;
/// then `CSUM`; then `CSUM_STRIDX` (which the kernel adds only with
/// `mini_cqe_resp_stride_index`).
pub(crate) fn mini_cqe_format(caps: &mlx5_dv::dv::mlx5dv_cqe_comp_caps) -> Option<u8> {
    use mlx5_dv::dv::*;
    if caps.max_num == 0 {
        return None;
    }
    [
        MLX5DV_CQE_RES_FORMAT_HASH,
        MLX5DV_CQE_RES_FORMAT_CSUM,
        MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX,
    ]
    .into_iter()
    .find(|f| caps.supported_format & u32::from(*f) != 0)
}

/// `mlx5dv_create_cq(ctx, attr, dv)` as an `ibv_cq` (`ibv_cq_ex_to_cq`);
/// null with `errno` set when it fails.
pub(super) fn dv_create_cq(
    ctx: &Ctx,
    attr: &mut ibv_cq_init_attr_ex,
    dv: &mut mlx5_dv::dv::mlx5dv_cq_init_attr,
) -> *mut ibv_cq {
    // SAFETY: live context (and channel, in `attr`); both attribute
    // structs are valid for the call (`mlx5dv_cq_init_attr` layout-tested).
    let ex = unsafe {
        mlx5_dv::dv::mlx5dv_create_cq(
            ctx.raw.cast(),
            (attr as *mut ibv_cq_init_attr_ex).cast(),
            dv,
        )
    } as *mut ibv_cq_ex;
    if ex.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: `ex` is the CQ just made; `ibv_cq_ex_to_cq` is a cast (an
    // `ibv_cq_ex` starts with the `ibv_cq` fields).
    unsafe { ibv_cq_ex_to_cq(ex) }
}

/// The verbs objects behind a direct-path QP on ConnectX: the QP made by
/// `mlx5dv_create_qp` (scatter-to-CQE disabled, so every payload lands in
/// the buffers the WRs name), its CQ and completion channel. Our ring driver
/// posts and polls them; verbs does only the control path (modify, query,
/// events).
pub(crate) struct Mlx5Objs {
    qp: *mut ibv_qp,
    pub(crate) qpn: u32,
    pub(crate) max_inline: u32,
    /// `Some` for a DC QP ([`create_mlx5_dct`], [`create_mlx5_dci`]):
    /// [`Self::modify_to`] then checks the DC attribute masks.
    dc: Option<DcRole>,
    /// The CQ it completes into (dropped after the QP).
    _cq: Arc<VerbsCq>,
    _pd: Arc<Pd>,
}

// SAFETY: as for VerbsQp; the owning DirectQp is driven by one thread at a
// time (a split QP's halves share it: they only keep it alive, and the
// control path's `ibv_modify_qp` / `ibv_query_qp` are thread-safe).
unsafe impl Send for Mlx5Objs {}
// SAFETY: `&Mlx5Objs` only modifies and queries the QP through rdma-core,
// which locks what it must.
unsafe impl Sync for Mlx5Objs {}

impl Drop for Mlx5Objs {
    fn drop(&mut self) {
        // SAFETY: created in `create_mlx5_qp`; the QP goes before its CQ
        // (the `Arc<VerbsCq>` field is dropped after this).
        unsafe { ibv_destroy_qp(self.qp) };
    }
}

impl Mlx5Objs {
    /// `ibv_modify_qp` to `to` with `attr`. On a DC QP, `attr` must carry
    /// exactly the attributes [`dc_modify_mask`] names for `to` (checked
    /// first: [`check_dc_modify`]; nothing is changed on a mismatch).
    pub(crate) fn modify_to(&self, to: QpState, attr: &QpAttr) -> Result<()> {
        if let Some(role) = self.dc {
            check_dc_modify(role, to, attr)?;
        }
        modify_raw(self.qp, self.qpn, to, attr)
    }

    /// The QP number libibverbs holds now (`ibv_qp.qp_num`), `None` while
    /// it is 0. For a DCT that is its DCT number, which exists only after
    /// INIT -> RTR (libmlx5 `modify_dct` sets `qp_num` from the kernel's
    /// `dctn` then; [`Self::qpn`] keeps the 0 of creation): read it after
    /// that modify, and give it to the DCIs' peers only then. For every
    /// other QP it is [`Self::qpn`]. Not to be called while another thread
    /// runs [`Self::modify_to`] on this QP (the owner's control path calls
    /// both).
    pub(crate) fn current_qpn(&self) -> Option<u32> {
        // SAFETY: `qp` is live until drop; libmlx5 writes `qp_num` only
        // inside `ibv_modify_qp`, which the caller does not run meanwhile.
        let n = unsafe { (*self.qp).qp_num };
        (n != 0).then_some(n)
    }

    pub(crate) fn query(&self) -> Result<QpInfo> {
        query_raw(self.qp, self.qpn)
    }
}

/// Creates a QP for the direct path on a ConnectX (`mlx5dv_create_qp`)
/// completing into `cq`, and describes it with `mlx5dv_init_obj`. Without
/// `scatter`, with `MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`; with it
/// (`InlineRecv`), with `MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE`, which
/// turns on responder scatter (RC, UC; the kernel ignores it on UD) and
/// requester scatter without `sq_sig_all` (RC).
pub(crate) fn create_mlx5_qp(
    pd: &Arc<Pd>,
    caps: QpCaps,
    cq: &Arc<VerbsCq>,
    srq: Option<&super::VerbsSrq>,
    scatter: bool,
) -> Result<(Mlx5Objs, mlx5_dv::dv::mlx5dv_qp)> {
    use mlx5_dv::dv::*;
    // SAFETY: plain data; zero is valid.
    let mut attr: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
    attr.send_cq = cq.cq;
    attr.recv_cq = cq.cq;
    attr.qp_type = super::ibv_type(caps.qp_type);
    attr.comp_mask = ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0;
    attr.pd = pd.raw;
    if let Some(s) = srq {
        attr.srq = s.raw;
    }
    attr.cap = ibv_qp_cap {
        max_send_wr: caps.max_send_wr,
        max_recv_wr: if srq.is_some() { 0 } else { caps.max_recv_wr },
        max_send_sge: caps.max_send_sge,
        max_recv_sge: caps.max_recv_sge,
        max_inline_data: caps.max_inline,
    };
    // SAFETY: plain data; zero is valid.
    let mut dv_attr: mlx5dv_qp_init_attr = unsafe { std::mem::zeroed() };
    dv_attr.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS;
    dv_attr.create_flags = if scatter {
        MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE
    } else {
        MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE
    };
    // SAFETY: live context; both attribute structs valid for the call.
    let qp = unsafe {
        mlx5dv_create_qp(
            pd.ctx.raw.cast(),
            (&mut attr as *mut ibv_qp_init_attr_ex).cast(),
            &mut dv_attr,
        )
    } as *mut ibv_qp;
    if qp.is_null() {
        return Err(Error::Verbs {
            call: "mlx5dv_create_qp",
            errno: errno(),
            detail: format!(
                " (RC, max_send_wr {}, max_send_sge {}, max_inline_data {})",
                caps.max_send_wr, caps.max_send_sge, caps.max_inline
            ),
        });
    }
    // SAFETY: non-null QP.
    let qpn = unsafe { (*qp).qp_num };
    let objs = Mlx5Objs {
        qp,
        qpn,
        max_inline: attr.cap.max_inline_data,
        dc: None,
        _cq: cq.clone(),
        _pd: pd.clone(),
    };
    let mut dv_qp = mlx5dv_qp::zeroed();
    init_obj(
        qp.cast(),
        &mut dv_qp,
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    )?;
    Ok((objs, dv_qp))
}

/// The two kinds of DC QP (`enum mlx5dv_dc_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DcRole {
    /// `MLX5DV_DCTYPE_DCT`: the target, on an SRQ; no SQ, no rings of its own.
    Dct,
    /// `MLX5DV_DCTYPE_DCI`: the initiator, a send queue.
    Dci,
}

/// A DCT's RESET -> INIT attributes: `STATE | PKEY_INDEX | PORT |
/// ACCESS_FLAGS` (the access flags: which remote operations DCIs may do).
/// Source: rdma-core `pyverbs/providers/mlx5/mlx5dv.pyx`
/// (`Mlx5QP._get_comp_mask`, used by `tests/test_mlx5_dc.py`); UCX
/// `uct_dc_mlx5_iface_create_dct` sets the same.
pub(crate) const DCT_INIT_MASK: QpAttrMask = QpAttrMask::STATE
    .union(QpAttrMask::PKEY_INDEX)
    .union(QpAttrMask::PORT)
    .union(QpAttrMask::ACCESS_FLAGS);
/// A DCT's INIT -> RTR attributes: `STATE | MIN_RNR_TIMER | AV |
/// PATH_MTU`. The AV names no peer (a DCT has none): its port and, on
/// RoCE, its GRH (`sgid_index`, hop limit, traffic class, flow label) are
/// those of the DCT's responses. A DCT never goes to RTS, and gets its
/// number here ([`Mlx5Objs::current_qpn`]). Source: as [`DCT_INIT_MASK`].
pub(crate) const DCT_RTR_MASK: QpAttrMask = QpAttrMask::STATE
    .union(QpAttrMask::MIN_RNR_TIMER)
    .union(QpAttrMask::AV)
    .union(QpAttrMask::PATH_MTU);
/// A DCI's RESET -> INIT attributes: `STATE | PKEY_INDEX | PORT` (no
/// access flags: a DCI is never a responder). Source: rdma-core
/// `Mlx5QP._get_comp_mask`; UCX `uct_dc_mlx5_iface_dci_connect`.
pub(crate) const DCI_INIT_MASK: QpAttrMask = QpAttrMask::STATE
    .union(QpAttrMask::PKEY_INDEX)
    .union(QpAttrMask::PORT);
/// A DCI's INIT -> RTR attributes: `STATE | PATH_MTU | AV`, the AV naming
/// only the port, SL and (RoCE) GRH source: no destination LID, GID or
/// QPN (each WQE names its DCT). UCX `uct_dc_mlx5_iface_dci_connect` sets
/// `IBV_QP_AV` (`ah_attr.is_global`, `sl`, `port_num`); rdma-core's
/// `Mlx5QP._get_comp_mask` passes `PATH_MTU` alone.
pub(crate) const DCI_RTR_MASK: QpAttrMask = QpAttrMask::STATE
    .union(QpAttrMask::PATH_MTU)
    .union(QpAttrMask::AV);
/// A DCI's RTR -> RTS attributes: `STATE | TIMEOUT | RETRY_CNT | RNR_RETRY
/// | SQ_PSN | MAX_QP_RD_ATOMIC`. Source: rdma-core `Mlx5QP._get_comp_mask`;
/// UCX `uct_dc_mlx5_iface_dci_connect`.
pub(crate) const DCI_RTS_MASK: QpAttrMask = QpAttrMask::STATE
    .union(QpAttrMask::TIMEOUT)
    .union(QpAttrMask::RETRY_CNT)
    .union(QpAttrMask::RNR_RETRY)
    .union(QpAttrMask::SQ_PSN)
    .union(QpAttrMask::MAX_QP_RD_ATOMIC);

/// The attribute mask (with `STATE`) a `role` QP is moved to `to` with,
/// following the transition the DC state machines take: RESET -> INIT ->
/// RTR for a DCT, RESET -> INIT -> RTR -> RTS for a DCI; any state -> RESET
/// or ERR with `STATE` alone. `None`: no such DC transition (a DCT to RTS,
/// SQD).
pub(crate) fn dc_modify_mask(role: DcRole, to: QpState) -> Option<QpAttrMask> {
    match (role, to) {
        (DcRole::Dct, QpState::Init) => Some(DCT_INIT_MASK),
        (DcRole::Dct, QpState::Rtr) => Some(DCT_RTR_MASK),
        (DcRole::Dci, QpState::Init) => Some(DCI_INIT_MASK),
        (DcRole::Dci, QpState::Rtr) => Some(DCI_RTR_MASK),
        (DcRole::Dci, QpState::Rts) => Some(DCI_RTS_MASK),
        (_, QpState::Reset | QpState::Err) => Some(QpAttrMask::STATE),
        _ => None,
    }
}

/// Checks a DC modify before any verbs call: `attr` carries exactly
/// [`dc_modify_mask`]'s attributes for `to` (the error names the first
/// missing or extra one, as [`crate::ib::qp_attr::check_modify`] does for
/// RC). Values are the caller's to range-check.
pub(crate) fn check_dc_modify(role: DcRole, to: QpState, attr: &QpAttr) -> Result<()> {
    let transition = || format!("{role:?} to {to:?}");
    let Some(want) = dc_modify_mask(role, to) else {
        return Err(Error::QpAttr {
            transition: transition(),
            attr: "STATE",
            problem: format!("is not a transition of a {role:?}"),
        });
    };
    let have = attr.mask() | QpAttrMask::STATE;
    if let Some(bit) = (want - have).iter().next() {
        return Err(Error::QpAttr {
            transition: transition(),
            attr: bit.name(),
            problem: "is required and missing".into(),
        });
    }
    if let Some(bit) = (have - want).iter().next() {
        return Err(Error::QpAttr {
            transition: transition(),
            attr: bit.name(),
            problem: "is not allowed in this transition".into(),
        });
    }
    Ok(())
}

/// `mlx5dv_create_qp` of a DC QP: `qp_type = IBV_QPT_DRIVER`,
/// `comp_mask = IBV_QP_INIT_ATTR_PD`, the mlx5 attributes
/// `MLX5DV_QP_INIT_ATTR_MASK_DC | MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS`
/// with `MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE` (payloads land in the
/// buffers the WRs name; rdma-core drops scatter-to-CQE on DC anyway, and
/// on a DCT without `MLX5_VENDOR_CAP_FLAGS_SCAT2CQE_DCT`).
fn create_dc(
    pd: &Arc<Pd>,
    attr: &mut ibv_qp_init_attr_ex,
    dc: mlx5_dv::dv::mlx5dv_dc_init_attr,
    what: impl FnOnce() -> String,
) -> Result<*mut ibv_qp> {
    use mlx5_dv::dv::*;
    attr.qp_type = ibv_qp_type::IBV_QPT_DRIVER;
    attr.comp_mask = ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0;
    attr.pd = pd.raw;
    let mut dv_attr = mlx5dv_qp_init_attr::zeroed();
    dv_attr.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC | MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS;
    dv_attr.create_flags = MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE;
    dv_attr.dc_init_attr = dc;
    // SAFETY: live context (the PD's; the caller gates on
    // `mlx5_supported`); both attribute structs valid for the call
    // (`mlx5dv_qp_init_attr` layout-tested; `attr` is rdma-sys's).
    let qp = unsafe {
        mlx5dv_create_qp(
            pd.ctx.raw.cast(),
            (attr as *mut ibv_qp_init_attr_ex).cast(),
            &mut dv_attr,
        )
    } as *mut ibv_qp;
    if qp.is_null() {
        return Err(Error::Verbs {
            call: "mlx5dv_create_qp",
            errno: errno(),
            detail: what(),
        });
    }
    Ok(qp)
}

/// Creates a DCT (`MLX5DV_DCTYPE_DCT`) on `pd`: its receives come from
/// `srq` and complete into `cq` (`send_cq = recv_cq = cq`), DCIs reach it
/// with `access_key`. It is in RESET, has no number yet
/// ([`Mlx5Objs::qpn`] 0; [`Mlx5Objs::current_qpn`] after INIT -> RTR), no
/// rings and no doorbell: there is no `mlx5dv_qp` to take, and
/// `mlx5dv_init_obj` must never be called on it (libmlx5's `mlx5dv_get_qp`
/// reads its BlueFlame register, which a DCT lacks). Modifies go through
/// [`Mlx5Objs::modify_to`] with [`DCT_INIT_MASK`] then [`DCT_RTR_MASK`];
/// dropping the [`Mlx5Objs`] destroys it (`ibv_destroy_qp`).
///
/// Only for a ConnectX: the caller must have checked [`mlx5_supported`]
/// (on another device `mlx5dv_create_qp` is not to be reached; libibverbs
/// would fail it with `EOPNOTSUPP` at best). The SRQ must outlive the DCT
/// (the caller keeps it, as `DirectQp` keeps an RC QP's). An error is
/// [`Error::Verbs`] naming `mlx5dv_create_qp` with its `errno`
/// (`EOPNOTSUPP`: no DC on this device or rdma-core; `EINVAL`: refused
/// attributes).
pub(crate) fn create_mlx5_dct(
    pd: &Arc<Pd>,
    cq: &Arc<VerbsCq>,
    srq: &super::VerbsSrq,
    access_key: u64,
) -> Result<Mlx5Objs> {
    use mlx5_dv::dv::*;
    // SAFETY: plain data; zero is valid.
    let mut attr: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
    attr.send_cq = cq.cq;
    attr.recv_cq = cq.cq;
    attr.srq = srq.raw;
    let dc = mlx5dv_dc_init_attr {
        dc_type: MLX5DV_DCTYPE_DCT,
        u: mlx5dv_dc_init_attr_u {
            dct_access_key: access_key,
        },
    };
    let qp = create_dc(pd, &mut attr, dc, || {
        format!(" (DCT, access key {access_key:#x})")
    })?;
    Ok(Mlx5Objs {
        qp,
        // SAFETY: non-null QP (0 for a DCT until RTR).
        qpn: unsafe { (*qp).qp_num },
        max_inline: 0,
        dc: Some(DcRole::Dct),
        _cq: cq.clone(),
        _pd: pd.clone(),
    })
}

/// Creates a DCI (`MLX5DV_DCTYPE_DCI`, DCI streams off) on `pd` completing
/// into `cq` (`send_cq = recv_cq = cq`), with `max_send_wr`,
/// `max_send_sge` and `max_inline_data`; no receive queue (`max_recv_wr`
/// and `max_recv_sge` 0, no SRQ), no `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`
/// (our ring driver writes the WQEs, as UCX's `uct_dc_mlx5_iface_create_qp`
/// does; rdma-core's `tests/test_mlx5_dc.py` sets send ops only to post
/// through libmlx5's `ibv_wr_*` builders). Returns the QP (in RESET, its
/// number known now) and its rings (`mlx5dv_init_obj`, as
/// [`create_mlx5_qp`] does: the SQ; `rq.wqe_cnt` 0), so the caller binds
/// `SendQueue::new(&dv_qp, objs.qpn, objs.max_inline, max_send_wr)` the
/// same way. Its WQEs carry the 48-byte datagram segment after the
/// control segment (libmlx5 sizes the SQ for it: `sq_overhead`).
/// Modifies: [`DCI_INIT_MASK`], [`DCI_RTR_MASK`], [`DCI_RTS_MASK`].
///
/// Only for a ConnectX: the caller must have checked [`mlx5_supported`].
/// An error is [`Error::Verbs`] naming `mlx5dv_create_qp` (or
/// `mlx5dv_init_obj`) with its `errno`.
pub(crate) fn create_mlx5_dci(
    pd: &Arc<Pd>,
    cq: &Arc<VerbsCq>,
    max_send_wr: u32,
    max_send_sge: u32,
    max_inline: u32,
) -> Result<(Mlx5Objs, mlx5_dv::dv::mlx5dv_qp)> {
    use mlx5_dv::dv::*;
    // SAFETY: plain data; zero is valid.
    let mut attr: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
    attr.send_cq = cq.cq;
    attr.recv_cq = cq.cq;
    attr.cap = ibv_qp_cap {
        max_send_wr,
        max_recv_wr: 0,
        max_send_sge,
        max_recv_sge: 0,
        max_inline_data: max_inline,
    };
    let dc = mlx5dv_dc_init_attr {
        dc_type: MLX5DV_DCTYPE_DCI,
        u: mlx5dv_dc_init_attr_u {
            dci_streams: mlx5dv_dci_streams::default(),
        },
    };
    let qp = create_dc(pd, &mut attr, dc, || {
        format!(
            " (DCI, max_send_wr {max_send_wr}, max_send_sge {max_send_sge}, max_inline_data {max_inline})"
        )
    })?;
    let objs = Mlx5Objs {
        qp,
        // SAFETY: non-null QP.
        qpn: unsafe { (*qp).qp_num },
        max_inline: attr.cap.max_inline_data,
        dc: Some(DcRole::Dci),
        _cq: cq.clone(),
        _pd: pd.clone(),
    };
    let mut dv_qp = mlx5dv_qp::zeroed();
    // (On error `objs` is dropped: the DCI is destroyed.)
    init_obj(
        qp.cast(),
        &mut dv_qp,
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    )?;
    Ok((objs, dv_qp))
}

/// Describes a CQ for the direct path with `mlx5dv_init_obj`.
pub(crate) fn describe_mlx5_cq(cq: &VerbsCq) -> Result<mlx5_dv::dv::mlx5dv_cq> {
    let mut dv_cq = mlx5_dv::dv::mlx5dv_cq::zeroed();
    init_obj(
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        cq.cq.cast(),
        &mut dv_cq,
    )?;
    Ok(dv_cq)
}

/// An `{in, out}` pair that names no object.
pub(super) fn none_pair<I, O>() -> mlx5_dv::dv::mlx5dv_obj_pair<I, O> {
    mlx5_dv::dv::mlx5dv_obj_pair {
        in_: std::ptr::null_mut(),
        out: std::ptr::null_mut(),
    }
}

/// Describes an SRQ for the direct path with `mlx5dv_init_obj`
/// (`MLX5DV_OBJ_SRQ`).
pub(crate) fn describe_mlx5_srq(srq: &super::VerbsSrq) -> Result<mlx5_dv::driver::SrqDesc> {
    use mlx5_dv::dv::*;
    let mut out = mlx5dv_srq::zeroed();
    let mut obj = mlx5dv_obj {
        qp: none_pair(),
        cq: none_pair(),
        srq: mlx5dv_obj_pair {
            in_: srq.raw.cast(),
            out: &mut out,
        },
        rwq: none_pair(),
        dm: none_pair(),
        ah: none_pair(),
        pd: none_pair(),
    };
    // SAFETY: `obj` names a live SRQ and points at a writable output.
    let rc = unsafe { mlx5dv_init_obj(&mut obj, MLX5DV_OBJ_SRQ) };
    if rc != 0 {
        return Err(Error::Verbs {
            call: "mlx5dv_init_obj",
            errno: if rc > 0 { rc } else { errno() },
            detail: " (MLX5DV_OBJ_SRQ)".into(),
        });
    }
    Ok(out.desc())
}

/// `mlx5dv_init_obj` for a QP and/or a CQ (a null `in` pointer leaves that
/// one out).
fn init_obj(
    qp: *mut std::ffi::c_void,
    dv_qp: *mut mlx5_dv::dv::mlx5dv_qp,
    cq: *mut std::ffi::c_void,
    dv_cq: *mut mlx5_dv::dv::mlx5dv_cq,
) -> Result<()> {
    use mlx5_dv::dv::*;
    let mut obj = mlx5dv_obj {
        qp: mlx5dv_obj_pair {
            in_: qp,
            out: dv_qp,
        },
        cq: mlx5dv_obj_pair {
            in_: cq,
            out: dv_cq,
        },
        srq: none_pair(),
        rwq: none_pair(),
        dm: none_pair(),
        ah: none_pair(),
        pd: none_pair(),
    };
    let mut types = 0;
    if !qp.is_null() {
        types |= MLX5DV_OBJ_QP;
    }
    if !cq.is_null() {
        types |= MLX5DV_OBJ_CQ;
    }
    // SAFETY: `obj` names live objects of the caller's and points at
    // writable outputs for the ones `types` selects.
    let rc = unsafe { mlx5dv_init_obj(&mut obj, types) };
    if rc != 0 {
        return Err(Error::Verbs {
            call: "mlx5dv_init_obj",
            errno: if rc > 0 { rc } else { errno() },
            detail: String::new(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{check_dc_modify, dc_modify_mask, mini_cqe_format, DcRole};
    use crate::ib::qp_attr::{AddressVector, QpAttr, QpAttrMask, QpState};
    use mlx5_dv::dv::*;

    fn caps(max_num: u32, supported_format: u32) -> mlx5dv_cqe_comp_caps {
        mlx5dv_cqe_comp_caps {
            max_num,
            supported_format,
        }
    }

    #[test]
    fn the_mini_cqe_format_is_one_the_device_reports() {
        let (h, c, s) = (
            MLX5DV_CQE_RES_FORMAT_HASH,
            MLX5DV_CQE_RES_FORMAT_CSUM,
            MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX,
        );
        let all = u32::from(h | c | s);
        // No compression at all, whatever the formats say.
        assert_eq!(mini_cqe_format(&caps(0, all)), None);
        assert_eq!(mini_cqe_format(&caps(64, 0)), None);
        // A bit we do not know is never passed on.
        assert_eq!(mini_cqe_format(&caps(64, 1 << 3)), None);
        assert_eq!(mini_cqe_format(&caps(64, all)), Some(h));
        assert_eq!(mini_cqe_format(&caps(64, u32::from(c | s))), Some(c));
        assert_eq!(mini_cqe_format(&caps(64, u32::from(s))), Some(s));
    }

    #[test]
    fn dc_modify_masks_are_rdma_cores() {
        use QpAttrMask as M;
        let m = |r, to| dc_modify_mask(r, to).map(|m: M| m.bits());
        // ibv_qp_attr_mask values (verbs.h): STATE 1, ACCESS_FLAGS 8,
        // PKEY_INDEX 16, PORT 32, AV 128, PATH_MTU 256, TIMEOUT 512,
        // RETRY_CNT 1024, RNR_RETRY 2048, MAX_QP_RD_ATOMIC 8192,
        // MIN_RNR_TIMER 32768, SQ_PSN 65536.
        assert_eq!(m(DcRole::Dct, QpState::Init), Some(1 | 16 | 32 | 8));
        assert_eq!(m(DcRole::Dct, QpState::Rtr), Some(1 | 32768 | 128 | 256));
        assert_eq!(m(DcRole::Dct, QpState::Rts), None);
        assert_eq!(m(DcRole::Dci, QpState::Init), Some(1 | 16 | 32));
        assert_eq!(m(DcRole::Dci, QpState::Rtr), Some(1 | 256 | 128));
        assert_eq!(
            m(DcRole::Dci, QpState::Rts),
            Some(1 | 512 | 1024 | 2048 | 65536 | 8192)
        );
        assert_eq!(m(DcRole::Dci, QpState::Reset), Some(1));
        assert_eq!(m(DcRole::Dct, QpState::Err), Some(1));
        assert_eq!(m(DcRole::Dci, QpState::Sqd), None);
    }

    #[test]
    fn dc_modifies_take_exactly_their_attributes() {
        let av = AddressVector {
            dlid: 0,
            port: 1,
            grh: None,
            service_level: 0,
        };
        let dci_rtr = QpAttr {
            path_mtu: Some(5),
            av: Some(av),
            ..Default::default()
        };
        assert!(check_dc_modify(DcRole::Dci, QpState::Rtr, &dci_rtr).is_ok());
        // A DCI has no destination QPN.
        let extra = QpAttr {
            dest_qpn: Some(7),
            ..dci_rtr
        };
        let e = check_dc_modify(DcRole::Dci, QpState::Rtr, &extra).unwrap_err();
        assert!(e.to_string().contains("DEST_QPN"), "{e}");
        // A DCT's RTR needs its min_rnr_timer.
        let e = check_dc_modify(DcRole::Dct, QpState::Rtr, &dci_rtr).unwrap_err();
        assert!(e.to_string().contains("MIN_RNR_TIMER"), "{e}");
        assert!(check_dc_modify(DcRole::Dct, QpState::Rts, &QpAttr::default()).is_err());
        assert!(check_dc_modify(DcRole::Dct, QpState::Reset, &QpAttr::default()).is_ok());
    }
}
