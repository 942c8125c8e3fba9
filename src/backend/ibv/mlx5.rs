//! The mlx5dv calls that hand a ConnectX's rings to the direct path:
//! `mlx5dv_is_supported`, `mlx5dv_query_device` (the CQE compression
//! caps), `mlx5dv_create_cq` (the call itself; [`VerbsCq`] makes the CQ),
//! `mlx5dv_create_qp`, `mlx5dv_init_obj`.

use super::{errno, modify_raw, query_raw, Ctx, Pd, QpCaps, VerbsCq};
use crate::ib::error::{Error, Result};
use crate::ib::qp_attr::{QpAttr, QpInfo, QpState};
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
    pub(crate) fn modify_to(&self, to: QpState, attr: &QpAttr) -> Result<()> {
        modify_raw(self.qp, self.qpn, to, attr)
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
    use super::mini_cqe_format;
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
}
