//! Memory windows on an ibverbs PD: `ibv_alloc_mw`, `ibv_dealloc_mw`
//! (rdma-core `libibverbs/verbs.h`; the binds are the verbs backend's,
//! `backend/verbs/mw.rs`).

use super::{errno, Pd};
use crate::ib::error::{Error, Result};
use crate::ib::mr::Registration;
use crate::ib::mw::MwType;
use rdma_sys::*;
use std::sync::Arc;

/// A window rdma-core allocated; deallocated (`ibv_dealloc_mw`, which
/// unbinds it) when dropped, before its PD (held here).
struct MwReg {
    raw: *mut ibv_mw,
    _pd: Arc<Pd>,
}

// SAFETY: an ibv_mw handle is deallocated once, on drop; rdma-core's window
// calls are thread-safe.
unsafe impl Send for MwReg {}
// SAFETY: `&MwReg` gives the handle only as an integer (`handle`); the
// binds read the `ibv_mw` (never write it: `backend/verbs/mw.rs` hands the
// provider a copy), only `drop` frees it.
unsafe impl Sync for MwReg {}

impl Registration for MwReg {
    /// The `*mut ibv_mw`.
    fn handle(&self) -> usize {
        self.raw as usize
    }
}

impl Drop for MwReg {
    fn drop(&mut self) {
        // SAFETY: allocated in `alloc_mw` (whose context has `dealloc_mw`,
        // checked there), deallocated once; the `Mw` drops this before the
        // MR of its last bind.
        unsafe { ibv_dealloc_mw(self.raw) };
    }
}

/// The `enum ibv_mw_type` of a window type.
fn ibv_mw_type_of(t: MwType) -> ibv_mw_type::Type {
    match t {
        MwType::One => ibv_mw_type::IBV_MW_TYPE_1,
        MwType::Two => ibv_mw_type::IBV_MW_TYPE_2,
    }
}

/// Allocates a window of `mw_type` on `pd` (`ibv_alloc_mw`); the
/// registration deallocates it when dropped (`ibv_dealloc_mw`). Returns
/// it, the `*mut ibv_mw` as an integer, and its rkey (`ibv_mw.rkey`: index
/// in the upper 24 bits, variant in the low 8).
///
/// Errors: [`Error::Unsupported`] ([`Feature::MemoryWindows`](crate::Feature::MemoryWindows))
/// where the provider has no `alloc_mw` / `dealloc_mw` or says
/// EOPNOTSUPP; else [`Error::Verbs`] naming `ibv_alloc_mw` and its errno.
pub(crate) fn alloc_mw(
    pd: &Arc<Pd>,
    mw_type: MwType,
) -> Result<(Box<dyn Registration>, usize, u32)> {
    let unsupported = || Error::Unsupported {
        device: pd.ctx.name.clone(),
        feature: crate::Feature::MemoryWindows,
    };
    // SAFETY: live context (reads of its ops table).
    let ops = unsafe { &(*pd.ctx.raw).ops };
    if ops.alloc_mw.is_none() || ops.dealloc_mw.is_none() || ops.bind_mw.is_none() {
        return Err(unsupported());
    }
    // SAFETY: live PD whose context has `alloc_mw` (checked above).
    let raw =
        unsafe { ibv_alloc_mw(pd.raw, ibv_mw_type_of(mw_type)) }.unwrap_or(std::ptr::null_mut());
    if raw.is_null() {
        let e = errno();
        if e == libc::EOPNOTSUPP || e == libc::ENOSYS {
            return Err(unsupported());
        }
        return Err(Error::Verbs {
            call: "ibv_alloc_mw",
            errno: e,
            detail: format!(" (type {})", if mw_type == MwType::One { 1 } else { 2 }),
        });
    }
    // SAFETY: non-null ibv_mw returned by rdma-core.
    let rkey = unsafe { (*raw).rkey };
    Ok((
        Box::new(MwReg {
            raw,
            _pd: pd.clone(),
        }),
        raw as usize,
        rkey,
    ))
}
