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

impl mlx5dv_cq {
    /// An all-null description, for `mlx5dv_init_obj` to fill.
    pub fn zeroed() -> Self {
        Self {
            buf: core::ptr::null_mut(),
            dbrec: core::ptr::null_mut(),
            cqe_cnt: 0,
            cqe_size: 0,
            cq_uar: core::ptr::null_mut(),
            cqn: 0,
            comp_mask: 0,
        }
    }
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

/// An `{in, out}` pair of `struct mlx5dv_obj` (rdma-core `mlx5dv.h`).
#[repr(C)]
#[derive(Debug)]
pub struct mlx5dv_obj_pair<I, O> {
    /// The verbs object (`struct ibv_qp *`, `struct ibv_cq *`, ...).
    pub in_: *mut I,
    /// Where `mlx5dv_init_obj` writes its description.
    pub out: *mut O,
}

impl<I, O> Clone for mlx5dv_obj_pair<I, O> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<I, O> Copy for mlx5dv_obj_pair<I, O> {}

/// `struct mlx5dv_obj`: the objects `mlx5dv_init_obj` describes. Members this
/// crate does not use have opaque `out` types.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_obj {
    pub qp: mlx5dv_obj_pair<c_void, mlx5dv_qp>,
    pub cq: mlx5dv_obj_pair<c_void, mlx5dv_cq>,
    pub srq: mlx5dv_obj_pair<c_void, mlx5dv_srq>,
    pub rwq: mlx5dv_obj_pair<c_void, c_void>,
    pub dm: mlx5dv_obj_pair<c_void, c_void>,
    pub ah: mlx5dv_obj_pair<c_void, mlx5dv_ah>,
    pub pd: mlx5dv_obj_pair<c_void, c_void>,
}

/// `enum mlx5dv_obj_type`.
pub const MLX5DV_OBJ_QP: u64 = 1 << 0;
pub const MLX5DV_OBJ_CQ: u64 = 1 << 1;
pub const MLX5DV_OBJ_SRQ: u64 = 1 << 2;
pub const MLX5DV_OBJ_AH: u64 = 1 << 5;

/// `struct mlx5dv_ah` (rdma-core `mlx5dv.h`): the AH's 48-byte AV
/// (`struct mlx5_wqe_av`), which a UD WQE's datagram segment copies.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_ah {
    pub av: *mut c_void,
    pub comp_mask: u64,
}

/// `struct mlx5dv_srq` (rdma-core `mlx5dv.h`): the SRQ ring (`stride`
/// bytes per WQE, linked from `head` to `tail` through `next_wqe_index`;
/// the WQE count is not given), its doorbell record (one big-endian u32)
/// and number.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_srq {
    pub buf: *mut c_void,
    pub dbrec: *mut u32,
    pub stride: u32,
    pub head: u32,
    pub tail: u32,
    pub comp_mask: u64,
    pub srqn: u32,
}

impl mlx5dv_srq {
    /// An all-null description, for `mlx5dv_init_obj` to fill.
    pub fn zeroed() -> Self {
        Self {
            buf: core::ptr::null_mut(),
            dbrec: core::ptr::null_mut(),
            stride: 0,
            head: 0,
            tail: 0,
            comp_mask: 0,
            srqn: 0,
        }
    }

    /// The fields the ring driver takes.
    pub fn desc(&self) -> crate::driver::SrqDesc {
        crate::driver::SrqDesc {
            buf: self.buf.cast(),
            dbrec: self.dbrec,
            stride: self.stride,
            head: self.head,
            tail: self.tail,
        }
    }
}

/// `struct mlx5dv_cqe_comp_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_cqe_comp_caps {
    pub max_num: u32,
    pub supported_format: u32,
}

/// `struct mlx5dv_sw_parsing_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_sw_parsing_caps {
    pub sw_parsing_offloads: u32,
    pub supported_qpts: u32,
}

/// `struct mlx5dv_striding_rq_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_striding_rq_caps {
    pub min_single_stride_log_num_of_bytes: u32,
    pub max_single_stride_log_num_of_bytes: u32,
    pub min_single_wqe_log_num_of_strides: u32,
    pub max_single_wqe_log_num_of_strides: u32,
    pub supported_qpts: u32,
}

/// `struct mlx5dv_sig_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_sig_caps {
    pub block_size: u64,
    pub block_prot: u32,
    pub t10dif_bg: u16,
    pub crc_type: u16,
}

/// `struct mlx5dv_dci_streams_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_dci_streams_caps {
    pub max_log_num_concurent: u8,
    pub max_log_num_errored: u8,
}

/// `struct mlx5dv_crypto_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_crypto_caps {
    pub failed_selftests: u16,
    pub crypto_engines: u8,
    pub wrapped_import_method: u8,
    pub log_max_num_deks: u8,
    pub flags: u32,
}

/// `struct mlx5dv_context` (`mlx5dv_query_device`). Set `comp_mask` to the
/// `MLX5DV_CONTEXT_MASK_*` bits wanted before the call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_context {
    pub version: u8,
    pub flags: u64,
    pub comp_mask: u64,
    pub cqe_comp_caps: mlx5dv_cqe_comp_caps,
    pub sw_parsing_caps: mlx5dv_sw_parsing_caps,
    pub striding_rq_caps: mlx5dv_striding_rq_caps,
    pub tunnel_offloads_caps: u32,
    pub max_dynamic_bfregs: u32,
    pub max_clock_info_update_nsec: u64,
    pub flow_action_flags: u32,
    pub dc_odp_caps: u32,
    pub hca_core_clock: *mut c_void,
    pub num_lag_ports: u8,
    pub sig_caps: mlx5dv_sig_caps,
    pub dci_streams_caps: mlx5dv_dci_streams_caps,
    pub max_wr_memcpy_length: usize,
    pub crypto_caps: mlx5dv_crypto_caps,
}

/// `MLX5DV_CONTEXT_FLAGS_CQE_V1`: the device writes version-1 CQEs.
pub const MLX5DV_CONTEXT_FLAGS_CQE_V1: u64 = 1 << 0;

/// `struct mlx5dv_dci_streams`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_dci_streams {
    pub log_num_concurent: u8,
    pub log_num_errored: u8,
}

/// The anonymous union of `struct mlx5dv_dc_init_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union mlx5dv_dc_init_attr_u {
    pub dct_access_key: u64,
    pub dci_streams: mlx5dv_dci_streams,
}

/// `struct mlx5dv_dc_init_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct mlx5dv_dc_init_attr {
    /// `enum mlx5dv_dc_type`.
    pub dc_type: u32,
    pub u: mlx5dv_dc_init_attr_u,
}

/// `struct mlx5dv_qp_init_attr` (`mlx5dv_create_qp`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct mlx5dv_qp_init_attr {
    /// `MLX5DV_QP_INIT_ATTR_MASK_*`.
    pub comp_mask: u64,
    /// `MLX5DV_QP_CREATE_*`.
    pub create_flags: u32,
    pub dc_init_attr: mlx5dv_dc_init_attr,
    pub send_ops_flags: u64,
}

/// `MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS`.
pub const MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS: u64 = 1 << 0;
/// `MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`: keep small responses out of CQEs.
pub const MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE: u32 = 1 << 3;

#[cfg(feature = "rdma-core")]
#[link(name = "mlx5")]
extern "C" {
    /// `bool mlx5dv_is_supported(struct ibv_device *device)`.
    pub fn mlx5dv_is_supported(device: *mut c_void) -> bool;
    /// `int mlx5dv_init_obj(struct mlx5dv_obj *obj, uint64_t obj_type)`:
    /// fills the `out` descriptions of the objects named in `obj_type`.
    pub fn mlx5dv_init_obj(obj: *mut mlx5dv_obj, obj_type: u64) -> i32;
    /// `int mlx5dv_query_device(struct ibv_context *ctx, struct mlx5dv_context *attrs_out)`.
    pub fn mlx5dv_query_device(ctx: *mut c_void, attrs_out: *mut mlx5dv_context) -> i32;
    /// `struct ibv_qp *mlx5dv_create_qp(struct ibv_context *, struct ibv_qp_init_attr_ex *,
    /// struct mlx5dv_qp_init_attr *)`.
    pub fn mlx5dv_create_qp(
        context: *mut c_void,
        qp_attr: *mut c_void,
        mlx5_qp_attr: *mut mlx5dv_qp_init_attr,
    ) -> *mut c_void;
}
