//! On-demand paging on an ibverbs device: the caps (`ibv_query_device_ex`'s
//! `odp_caps`, asked once per context), the check every ODP registration
//! passes before `ibv_reg_mr`, the implicit registration of the whole
//! address space, and prefetch (`ibv_advise_mr`).
//!
//! `rdma-sys` 0.3 has `ibv_query_device_ex` and `ibv_advise_mr` as Rust
//! copies of verbs.h's inline functions, but both find the provider's op
//! through its `verbs_get_ctx`, which on 64-bit never finds it (see
//! `ctx_op!`): they are called here through `ctx_op!` instead.

use super::{errno, Ctx, MrReg, Pd};
use crate::ib::device::{OdpCaps, OdpOps};
use crate::ib::error::{Error, Feature, Result};
use crate::ib::mem::{Access, Buffer, OdpAdvice};
use crate::ib::mr::MrInner;
use rdma_sys::*;
use std::sync::Arc;

/// `IBV_ODP_SUPPORT` and `IBV_ODP_SUPPORT_IMPLICIT` (`enum
/// ibv_odp_general_caps`, verbs.h).
const ODP_SUPPORT: u64 = 1;
const ODP_SUPPORT_IMPLICIT: u64 = 2;

/// `IBV_ADVISE_MR_FLAG_FLUSH` (verbs.h): the advice is done when
/// `ibv_advise_mr` returns.
const ADVISE_FLUSH: u32 = 1;

/// The context's ODP caps: `ibv_query_device_ex`, asked once and kept;
/// empty where the provider has no `query_device_ex` or it fails (no ODP
/// can be asked of such a device).
pub(crate) fn odp_caps(ctx: &Ctx) -> OdpCaps {
    *ctx.odp.get_or_init(|| query(ctx).unwrap_or_default())
}

fn query(ctx: &Ctx) -> Option<OdpCaps> {
    let f = ctx_op!(ctx.raw, query_device_ex)?;
    // SAFETY: plain data; zero is valid.
    let mut attr: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
    // SAFETY: the provider's op on its live context, with an out-struct of
    // the size passed (verbs.h's `ibv_query_device_ex` passes the same).
    let rc = unsafe {
        f(
            ctx.raw,
            std::ptr::null(),
            &mut attr,
            std::mem::size_of::<ibv_device_attr_ex>(),
        )
    };
    if rc != 0 {
        return None;
    }
    let o = attr.odp_caps;
    let t = o.per_transport_caps;
    Some(OdpCaps {
        supported: o.general_caps & ODP_SUPPORT != 0,
        implicit: o.general_caps & ODP_SUPPORT_IMPLICIT != 0,
        rc: OdpOps::from_bits_truncate(t.rc_odp_caps),
        uc: OdpOps::from_bits_truncate(t.uc_odp_caps),
        ud: OdpOps::from_bits_truncate(t.ud_odp_caps),
    })
}

/// The refusal, before any verb, of an ODP registration (`implicit`: of
/// the whole address space) the caps do not allow.
///
/// Errors: [`Error::Unsupported`] ([`Feature::Odp`], [`Feature::ImplicitOdp`]).
pub(crate) fn check(ctx: &Ctx, implicit: bool) -> Result<()> {
    let caps = odp_caps(ctx);
    let lacks = if !caps.supported {
        Some(Feature::Odp)
    } else if implicit && !caps.implicit {
        Some(Feature::ImplicitOdp)
    } else {
        None
    };
    match lacks {
        Some(feature) => Err(Error::Unsupported {
            device: ctx.name.clone(),
            feature,
        }),
        None => Ok(()),
    }
}

/// `EOPNOTSUPP` from an ODP verb as [`Feature::Odp`] (the kernel driver has
/// none, whatever the caps said), else the verb's errno.
pub(crate) fn refusal(ctx: &Ctx, call: &'static str, errno: i32, detail: String) -> Error {
    if errno == libc::EOPNOTSUPP {
        return Error::Unsupported {
            device: ctx.name.clone(),
            feature: Feature::Odp,
        };
    }
    Error::Verbs {
        call,
        errno,
        detail,
    }
}

/// Registers the whole address space as one ODP MR (`ibv_reg_mr(pd, NULL,
/// SIZE_MAX, access | IBV_ACCESS_ON_DEMAND)`, `ibv_reg_mr(3)`: "implicit
/// ODP"); the caller checked `access` and the caps. The `MrInner`'s buffer
/// has no CPU mapping: it is every address, owned by no one.
///
/// Errors: as [`check`]; `ibv_reg_mr`'s, `EOPNOTSUPP` as [`Feature::Odp`].
pub(crate) fn reg_implicit(pd: &Arc<Pd>, access: Access) -> Result<MrInner> {
    check(&pd.ctx, true)?;
    let access = access | Access::ON_DEMAND;
    // SAFETY: a live PD; implicit ODP maps nothing now (the device faults
    // pages in as WRs name them); the caller's contract covers what it reaches.
    let raw = unsafe {
        ibv_reg_mr(
            pd.raw,
            std::ptr::null_mut(),
            usize::MAX,
            access.bits() as i32,
        )
    };
    if raw.is_null() {
        return Err(refusal(
            &pd.ctx,
            "ibv_reg_mr",
            errno(),
            format!(" (implicit ODP: address 0, SIZE_MAX bytes, access {access:?})"),
        ));
    }
    // SAFETY: non-null ibv_mr returned by rdma-core.
    let (lkey, rkey) = unsafe { ((*raw).lkey, (*raw).rkey) };
    Ok(MrInner {
        reg: Box::new(MrReg {
            raw,
            _pd: pd.clone(),
        }),
        live: None,
        pd: 0,
        buf: Buffer::implicit(),
        lkey,
        rkey,
        access,
    })
}

/// `ibv_advise_mr(pd, advice, IBV_ADVISE_MR_FLAG_FLUSH, sges, n)`: the
/// pages of each `(lkey, addr, len)` faulted in (for `PrefetchWrite`,
/// writable) before it returns. The caller checked the list.
///
/// Errors: [`Feature::Odp`] where the provider has no `advise_mr` or the
/// kernel answers `EOPNOTSUPP`; the rest as [`Error::Verbs`] naming
/// `ibv_advise_mr` (`EINVAL`: a range outside its MR, an lkey of another
/// PD or of no ODP MR; `EFAULT`: pages that cannot be mapped).
pub(crate) fn advise(pd: &Pd, advice: OdpAdvice, sges: &[(u32, u64, u32)]) -> Result<()> {
    let Some(f) = ctx_op!(pd.ctx.raw, advise_mr) else {
        return Err(refusal(
            &pd.ctx,
            "ibv_advise_mr",
            libc::EOPNOTSUPP,
            String::new(),
        ));
    };
    let mut list: Vec<ibv_sge> = sges
        .iter()
        .map(|&(lkey, addr, length)| ibv_sge { addr, length, lkey })
        .collect();
    let advice = match advice {
        OdpAdvice::Prefetch => ib_uverbs_advise_mr_advice::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH,
        OdpAdvice::PrefetchWrite => {
            ib_uverbs_advise_mr_advice::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE
        }
        OdpAdvice::PrefetchNoFault => {
            ib_uverbs_advise_mr_advice::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT
        }
    };
    // SAFETY: the provider's op on the live PD; `list` holds `len` SGEs.
    let rc = unsafe {
        f(
            pd.raw,
            advice,
            ADVISE_FLUSH,
            list.as_mut_ptr(),
            list.len() as u32,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = if rc > 0 { rc } else { errno() };
    Err(refusal(
        &pd.ctx,
        "ibv_advise_mr",
        e,
        format!(" ({} SGEs, advice {advice})", list.len()),
    ))
}
