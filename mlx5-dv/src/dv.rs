//! Hand-written `#[repr(C)]` mirrors of rdma-core's direct-verbs descriptions
//! (`infiniband/mlx5dv.h`), and, with feature `rdma-core`, the libmlx5 functions
//! that fill them.
//!
//! `tests/layout.rs` proves sizes and field offsets against the system header.

use core::ffi::c_void;

/// `struct mlx5dv_qp` (rdma-core `mlx5dv.h`): the raw SQ/RQ rings, the QP
/// doorbell record (`dbrec[0]` RQ, `dbrec[1]` SQ) and the BlueFlame register.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_qp {
    pub dbrec: *mut u32,
    pub sq: mlx5dv_wq,
    pub rq: mlx5dv_wq,
    pub bf: mlx5dv_bf,
    pub comp_mask: u64,
    /// `off_t`.
    pub uar_mmap_offset: i64,
    pub tirn: u32,
    pub tisn: u32,
    pub rqn: u32,
    pub sqn: u32,
    pub tir_icm_addr: u64,
}

/// The anonymous `sq` / `rq` member of `struct mlx5dv_qp`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_wq {
    pub buf: *mut c_void,
    /// Entries (WQEBBs for the SQ), a power of two.
    pub wqe_cnt: u32,
    /// Bytes per entry (64 for the SQ).
    pub stride: u32,
}

/// The anonymous `bf` member of `struct mlx5dv_qp`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_bf {
    /// BlueFlame register (UAR page offset 0x800 or 0x900).
    pub reg: *mut c_void,
    /// BlueFlame buffer size in bytes; 0 when the UAR has none.
    pub size: u32,
}

/// `struct mlx5dv_cq` (rdma-core `mlx5dv.h`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_cq {
    pub buf: *mut c_void,
    pub dbrec: *mut u32,
    pub cqe_cnt: u32,
    /// 64 or 128.
    pub cqe_size: u32,
    pub cq_uar: *mut c_void,
    pub cqn: u32,
    pub comp_mask: u64,
}

impl mlx5dv_qp {
    /// An all-null description, for `mlx5dv_init_obj` to fill.
    pub fn zeroed() -> Self {
        let wq = mlx5dv_wq {
            buf: core::ptr::null_mut(),
            wqe_cnt: 0,
            stride: 0,
        };
        Self {
            dbrec: core::ptr::null_mut(),
            sq: wq,
            rq: wq,
            bf: mlx5dv_bf {
                reg: core::ptr::null_mut(),
                size: 0,
            },
            comp_mask: 0,
            uar_mmap_offset: 0,
            tirn: 0,
            tisn: 0,
            rqn: 0,
            sqn: 0,
            tir_icm_addr: 0,
        }
    }
}

#[cfg(feature = "rdma-core")]
#[link(name = "mlx5")]
extern "C" {
    /// `int mlx5dv_is_supported(struct ibv_device *device)`.
    pub fn mlx5dv_is_supported(device: *mut c_void) -> bool;
}
