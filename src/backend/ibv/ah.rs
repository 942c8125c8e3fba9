//! Address handles through libibverbs: `ibv_create_ah`, and on mlx5 the AV
//! `mlx5dv_init_obj(MLX5DV_OBJ_AH)` describes.

use super::{errno, Pd};
use crate::ib::ah::AhOwner;
use crate::ib::error::{Error, Result};
use crate::ib::qp_attr::AddressVector;
use rdma_sys::*;
use std::sync::Arc;

/// An `ibv_ah`, destroyed on drop (after every WR naming it: a UD send
/// borrows the `Ah` for its post, and the provider copies what it needs).
pub(crate) struct VerbsAh {
    pub(crate) raw: *mut ibv_ah,
    _pd: Arc<Pd>,
}

// SAFETY: an AH is only named by posts and destroyed once, on drop.
unsafe impl Send for VerbsAh {}
// SAFETY: through `&VerbsAh` the AH is only named: posts pass `raw` to
// `ibv_post_send`, which only reads it; destroying it needs `drop`'s `&mut`.
unsafe impl Sync for VerbsAh {}
impl AhOwner for VerbsAh {}

impl Drop for VerbsAh {
    fn drop(&mut self) {
        // SAFETY: created in `create`, destroyed once.
        unsafe { ibv_destroy_ah(self.raw) };
    }
}

impl VerbsAh {
    /// `ibv_create_ah` on `pd` toward `av`.
    pub(crate) fn create(pd: &Arc<Pd>, av: &AddressVector) -> Result<Self> {
        let mut a = super::qp::ah_attr(av);
        // SAFETY: live PD; `a` valid for the call.
        let raw = unsafe { ibv_create_ah(pd.raw, &mut a) };
        if raw.is_null() {
            return Err(Error::Verbs {
                call: "ibv_create_ah",
                errno: errno(),
                detail: format!(" (port {}, global {})", av.port, av.grh.is_some()),
            });
        }
        Ok(VerbsAh {
            raw,
            _pd: pd.clone(),
        })
    }

    /// `ibv_create_ah_from_wc` on `pd`: the path back to the sender of the
    /// UD receive `c` took on `port`, from the GRH slot `grh` (the
    /// receive's first 40 bytes). Only the fields libibverbs reads are
    /// filled: the GRH flag, the source QPN; the source LID, SL and path
    /// bits are 0 (the caller refuses a receive without a GRH).
    pub(crate) fn from_recv(
        pd: &Arc<Pd>,
        port: u8,
        c: &crate::Completion,
        grh: &[u8; 40],
    ) -> Result<Self> {
        // SAFETY: plain data; zero is valid.
        let mut wc: ibv_wc = unsafe { std::mem::zeroed() };
        wc.wr_id = c.wr_id;
        wc.status = ibv_wc_status::IBV_WC_SUCCESS;
        wc.opcode = ibv_wc_opcode::IBV_WC_RECV;
        wc.byte_len = c.byte_len;
        wc.qp_num = c.qp_num;
        wc.src_qp = c.src_qp.qpn();
        wc.wc_flags = if c.src_qp.grh() {
            ibv_wc_flags::IBV_WC_GRH.0
        } else {
            0
        };
        let mut g = *grh;
        // SAFETY: live PD; `wc` and the 40-byte `g` (a `struct ibv_grh`)
        // are valid for the call, which only reads them.
        let raw = unsafe { ibv_create_ah_from_wc(pd.raw, &mut wc, g.as_mut_ptr().cast(), port) };
        if raw.is_null() {
            return Err(Error::Verbs {
                call: "ibv_create_ah_from_wc",
                errno: errno(),
                detail: format!(" (port {port}, source QPN {:#x})", c.src_qp.qpn()),
            });
        }
        Ok(VerbsAh {
            raw,
            _pd: pd.clone(),
        })
    }

    /// The AH's 48-byte AV, as `mlx5dv_init_obj(MLX5DV_OBJ_AH)` gives it
    /// (mlx5 only).
    pub(crate) fn mlx5_av(&self) -> Result<[u8; 48]> {
        use mlx5_dv::dv::*;
        let mut out = mlx5dv_ah {
            av: std::ptr::null_mut(),
            comp_mask: 0,
        };
        let mut obj = mlx5dv_obj {
            qp: super::mlx5::none_pair(),
            cq: super::mlx5::none_pair(),
            srq: super::mlx5::none_pair(),
            rwq: super::mlx5::none_pair(),
            dm: super::mlx5::none_pair(),
            ah: mlx5dv_obj_pair {
                in_: self.raw.cast(),
                out: &mut out,
            },
            pd: super::mlx5::none_pair(),
        };
        // SAFETY: `obj` names a live AH and a writable output.
        let rc = unsafe { mlx5dv_init_obj(&mut obj, MLX5DV_OBJ_AH) };
        if rc != 0 || out.av.is_null() {
            return Err(Error::Verbs {
                call: "mlx5dv_init_obj",
                errno: if rc > 0 { rc } else { errno() },
                detail: " (MLX5DV_OBJ_AH)".into(),
            });
        }
        let mut av = [0u8; 48];
        // SAFETY: `out.av` points at the AH's 48-byte `struct mlx5_wqe_av`,
        // live while the AH is.
        unsafe { std::ptr::copy_nonoverlapping(out.av.cast::<u8>(), av.as_mut_ptr(), 48) };
        Ok(av)
    }
}
