//! Address handles: where a UD send goes (`struct ibv_ah`, and on mlx5 the
//! 48-byte AV that `mlx5dv_init_obj(MLX5DV_OBJ_AH)` describes).

use std::sync::Arc;

/// What keeps a backend's address handle alive (`ibv_destroy_ah` on drop).
pub(crate) trait AhOwner: Send + Sync {}

/// An address handle (IB spec 11.2.2): the path to one remote port, made
/// by [`Pd::create_ah`](crate::Pd::create_ah) and named by UD sends
/// ([`SendWr::ud_send`](crate::SendWr::ud_send)). Cheap to clone (a
/// handle); the device's AH goes when the last clone does.
#[derive(Clone)]
pub struct Ah {
    pub(crate) inner: Arc<AhInner>,
}

impl std::fmt::Debug for Ah {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ah").field("pd", &self.inner.pd).finish()
    }
}

impl PartialEq for Ah {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}
impl Eq for Ah {}

pub(crate) struct AhInner {
    /// The direct path's AV (`struct mlx5_wqe_av`, big-endian; a UD WQE's
    /// datagram segment once the remote QPN and qkey are patched in).
    pub(crate) av: [u8; 48],
    /// The verbs `struct ibv_ah *` (0 where there is none: the sim).
    #[cfg_attr(not(feature = "verbs"), allow(dead_code))]
    pub(crate) raw: usize,
    /// The PD id of the PD it was made on: a UD send takes only its own PD's.
    pub(crate) pd: u32,
    pub(crate) _owner: Option<Box<dyn AhOwner>>,
}
