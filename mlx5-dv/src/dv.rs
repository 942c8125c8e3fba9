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
    /// `__be32 *dbrec`: the QP doorbell record, two big-endian u32 (`[0]` RQ, `[1]` SQ counter).
    pub dbrec: *mut u32,
    /// `sq`: the send queue ring.
    pub sq: mlx5dv_wq,
    /// `rq`: the receive queue ring (no entries on an SRQ QP).
    pub rq: mlx5dv_wq,
    /// `bf`: the BlueFlame (UAR) register the SQ doorbell is written to.
    pub bf: mlx5dv_bf,
    /// `MLX5DV_QP_MASK_*` bits: in, the fields asked for; out, those filled.
    pub comp_mask: u64,
    /// `off_t uar_mmap_offset` (with `MLX5DV_QP_MASK_UAR_MMAP_OFFSET`).
    pub uar_mmap_offset: i64,
    /// `tirn` (with `MLX5DV_QP_MASK_RAW_QP_HANDLES`; raw packet QPs).
    pub tirn: u32,
    /// `tisn` (with `MLX5DV_QP_MASK_RAW_QP_HANDLES`; raw packet QPs).
    pub tisn: u32,
    /// `rqn` (with `MLX5DV_QP_MASK_RAW_QP_HANDLES`; raw packet QPs).
    pub rqn: u32,
    /// `sqn` (with `MLX5DV_QP_MASK_RAW_QP_HANDLES`; raw packet QPs).
    pub sqn: u32,
    /// `tir_icm_addr` (with `MLX5DV_QP_MASK_RAW_QP_TIR_ADDR`).
    pub tir_icm_addr: u64,
}

/// The anonymous `sq` / `rq` member of `struct mlx5dv_qp`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_wq {
    /// `void *buf`: the ring's first entry.
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
    /// `void *buf`: the CQE ring, `cqe_cnt * cqe_size` bytes.
    pub buf: *mut c_void,
    /// `__be32 *dbrec`: the CQ doorbell record (`[0]` consumer index, `[1]` arm word), big-endian.
    pub dbrec: *mut u32,
    /// CQEs in the ring, a power of two.
    pub cqe_cnt: u32,
    /// Bytes per CQE: 64 or 128.
    pub cqe_size: u32,
    /// `void *cq_uar`: the UAR page holding the CQ doorbell (arm) register at 0x20; null: no arming.
    pub cq_uar: *mut c_void,
    /// The CQ number (24 bits), as CQEs and the arm doorbell name it.
    pub cqn: u32,
    /// `comp_mask` (no bits defined in `mlx5dv.h`).
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
    /// `struct ibv_qp *` in, [`mlx5dv_qp`] out (`MLX5DV_OBJ_QP`).
    pub qp: mlx5dv_obj_pair<c_void, mlx5dv_qp>,
    /// `struct ibv_cq *` in, [`mlx5dv_cq`] out (`MLX5DV_OBJ_CQ`).
    pub cq: mlx5dv_obj_pair<c_void, mlx5dv_cq>,
    /// `struct ibv_srq *` in, [`mlx5dv_srq`] out (`MLX5DV_OBJ_SRQ`).
    pub srq: mlx5dv_obj_pair<c_void, mlx5dv_srq>,
    /// `struct ibv_wq *` in, `struct mlx5dv_rwq` out (`MLX5DV_OBJ_RWQ`; opaque here).
    pub rwq: mlx5dv_obj_pair<c_void, c_void>,
    /// `struct ibv_dm *` in, `struct mlx5dv_dm` out (`MLX5DV_OBJ_DM`; opaque here).
    pub dm: mlx5dv_obj_pair<c_void, c_void>,
    /// `struct ibv_ah *` in, [`mlx5dv_ah`] out (`MLX5DV_OBJ_AH`).
    pub ah: mlx5dv_obj_pair<c_void, mlx5dv_ah>,
    /// `struct ibv_pd *` in, `struct mlx5dv_pd` out (`MLX5DV_OBJ_PD`; opaque here).
    pub pd: mlx5dv_obj_pair<c_void, c_void>,
}

/// `MLX5DV_OBJ_QP` (`enum mlx5dv_obj_type`): describe [`mlx5dv_obj::qp`].
pub const MLX5DV_OBJ_QP: u64 = 1 << 0;
/// `MLX5DV_OBJ_CQ`: describe [`mlx5dv_obj::cq`].
pub const MLX5DV_OBJ_CQ: u64 = 1 << 1;
/// `MLX5DV_OBJ_SRQ`: describe [`mlx5dv_obj::srq`].
pub const MLX5DV_OBJ_SRQ: u64 = 1 << 2;
/// `MLX5DV_OBJ_AH`: describe [`mlx5dv_obj::ah`].
pub const MLX5DV_OBJ_AH: u64 = 1 << 5;

/// `struct mlx5dv_ah` (rdma-core `mlx5dv.h`): the AH's 48-byte AV
/// (`struct mlx5_wqe_av`), which a UD WQE's datagram segment copies.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_ah {
    /// `struct mlx5_wqe_av *av`: the 48-byte address vector.
    pub av: *mut c_void,
    /// `comp_mask` (no bits defined in `mlx5dv.h`).
    pub comp_mask: u64,
}

/// `struct mlx5dv_srq` (rdma-core `mlx5dv.h`): the SRQ ring (`stride`
/// bytes per WQE, linked from `head` to `tail` through `next_wqe_index`;
/// the WQE count is not given), its doorbell record (one big-endian u32)
/// and number.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_srq {
    /// `void *buf`: the SRQ ring's first WQE.
    pub buf: *mut c_void,
    /// `__be32 *dbrec`: the SRQ doorbell record (the WQE counter, big-endian).
    pub dbrec: *mut u32,
    /// Bytes per WQE.
    pub stride: u32,
    /// Index of the first WQE of the free list.
    pub head: u32,
    /// Index of the last WQE of the free list.
    pub tail: u32,
    /// `MLX5DV_SRQ_MASK_*` bits: in, asked for; out, filled (`MLX5DV_SRQ_MASK_SRQN` for `srqn`).
    pub comp_mask: u64,
    /// The SRQ number (with `MLX5DV_SRQ_MASK_SRQN`).
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
    /// `max_num`: most CQEs one compressed CQE may stand for.
    pub max_num: u32,
    /// `supported_format`: `enum mlx5dv_cqe_comp_res_format` bits.
    pub supported_format: u32,
}

/// `struct mlx5dv_sw_parsing_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_sw_parsing_caps {
    /// `sw_parsing_offloads`: `enum mlx5dv_sw_parsing_offloads` bits.
    pub sw_parsing_offloads: u32,
    /// `supported_qpts`: bit `1 << IBV_QPT_*` per QP type supported.
    pub supported_qpts: u32,
}

/// `struct mlx5dv_striding_rq_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_striding_rq_caps {
    /// `min_single_stride_log_num_of_bytes`: log2 of the smallest stride, in bytes.
    pub min_single_stride_log_num_of_bytes: u32,
    /// `max_single_stride_log_num_of_bytes`: log2 of the largest stride, in bytes.
    pub max_single_stride_log_num_of_bytes: u32,
    /// `min_single_wqe_log_num_of_strides`: log2 of the fewest strides per WQE.
    pub min_single_wqe_log_num_of_strides: u32,
    /// `max_single_wqe_log_num_of_strides`: log2 of the most strides per WQE.
    pub max_single_wqe_log_num_of_strides: u32,
    /// `supported_qpts`: bit `1 << IBV_QPT_*` per QP type supported.
    pub supported_qpts: u32,
}

/// `struct mlx5dv_sig_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_sig_caps {
    /// `block_size`: `enum mlx5dv_block_size_caps` bits.
    pub block_size: u64,
    /// `block_prot`: `enum mlx5dv_sig_prot_caps` bits.
    pub block_prot: u32,
    /// `t10dif_bg`: `enum mlx5dv_sig_t10dif_bg_caps` bits.
    pub t10dif_bg: u16,
    /// `crc_type`: `enum mlx5dv_sig_crc_type_caps` bits.
    pub crc_type: u16,
}

/// `struct mlx5dv_dci_streams_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_dci_streams_caps {
    /// `max_log_num_concurent` (sic): log2 of the most concurrent DCI streams.
    pub max_log_num_concurent: u8,
    /// `max_log_num_errored`: log2 of the most DCI streams in error at once.
    pub max_log_num_errored: u8,
}

/// `struct mlx5dv_crypto_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_crypto_caps {
    /// `failed_selftests`: nonzero if some crypto self tests failed.
    pub failed_selftests: u16,
    /// `crypto_engines`: `enum mlx5dv_crypto_engines_caps` bits.
    pub crypto_engines: u8,
    /// `wrapped_import_method`: `enum mlx5dv_crypto_wrapped_import_method_caps` bits.
    pub wrapped_import_method: u8,
    /// `log_max_num_deks`: log2 of the most data encryption keys.
    pub log_max_num_deks: u8,
    /// `flags`: `enum mlx5dv_crypto_caps_flags` bits.
    pub flags: u32,
}

/// `struct mlx5dv_context` (`mlx5dv_query_device`). Set `comp_mask` to the
/// `MLX5DV_CONTEXT_MASK_*` bits wanted before the call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_context {
    /// `version`: the provider's ABI version.
    pub version: u8,
    /// `MLX5DV_CONTEXT_FLAGS_*` bits (e.g. [`MLX5DV_CONTEXT_FLAGS_CQE_V1`]).
    pub flags: u64,
    /// `MLX5DV_CONTEXT_MASK_*` bits: in, the fields asked for; out, those filled.
    pub comp_mask: u64,
    /// CQE compression (`MLX5DV_CONTEXT_MASK_CQE_COMPRESION`).
    pub cqe_comp_caps: mlx5dv_cqe_comp_caps,
    /// Software parsing offloads (`MLX5DV_CONTEXT_MASK_SWP`).
    pub sw_parsing_caps: mlx5dv_sw_parsing_caps,
    /// Striding RQ (`MLX5DV_CONTEXT_MASK_STRIDING_RQ`).
    pub striding_rq_caps: mlx5dv_striding_rq_caps,
    /// `enum mlx5dv_tunnel_offloads` bits (`MLX5DV_CONTEXT_MASK_TUNNEL_OFFLOADS`).
    pub tunnel_offloads_caps: u32,
    /// Dynamic BlueFlame registers available (`MLX5DV_CONTEXT_MASK_DYN_BFREGS`).
    pub max_dynamic_bfregs: u32,
    /// Nanoseconds between updates of the clock info page (`MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE`).
    pub max_clock_info_update_nsec: u64,
    /// `enum mlx5dv_flow_action_cap_flags` bits (`MLX5DV_CONTEXT_MASK_FLOW_ACTION_FLAGS`).
    pub flow_action_flags: u32,
    /// `enum ibv_odp_transport_cap_bits` for DC (`MLX5DV_CONTEXT_MASK_DC_ODP_CAPS`).
    pub dc_odp_caps: u32,
    /// `void *hca_core_clock`: the mapped free-running clock (`MLX5DV_CONTEXT_MASK_HCA_CORE_CLOCK`).
    pub hca_core_clock: *mut c_void,
    /// LAG ports (`MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS`).
    pub num_lag_ports: u8,
    /// Signature offload (`MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD`).
    pub sig_caps: mlx5dv_sig_caps,
    /// DCI streams (`MLX5DV_CONTEXT_MASK_DCI_STREAMS`).
    pub dci_streams_caps: mlx5dv_dci_streams_caps,
    /// Largest memcpy work request, in bytes (`MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH`).
    pub max_wr_memcpy_length: usize,
    /// Crypto offload (`MLX5DV_CONTEXT_MASK_CRYPTO_OFFLOAD`).
    pub crypto_caps: mlx5dv_crypto_caps,
}

/// `MLX5DV_CONTEXT_FLAGS_CQE_V1`: the device writes version-1 CQEs.
pub const MLX5DV_CONTEXT_FLAGS_CQE_V1: u64 = 1 << 0;

impl mlx5dv_context {
    /// An all-zero context (no `MLX5DV_CONTEXT_MASK_*` bit asked for), for
    /// `mlx5dv_query_device` to fill once `comp_mask` is set.
    pub fn zeroed() -> Self {
        Self {
            version: 0,
            flags: 0,
            comp_mask: 0,
            cqe_comp_caps: mlx5dv_cqe_comp_caps::default(),
            sw_parsing_caps: mlx5dv_sw_parsing_caps::default(),
            striding_rq_caps: mlx5dv_striding_rq_caps::default(),
            tunnel_offloads_caps: 0,
            max_dynamic_bfregs: 0,
            max_clock_info_update_nsec: 0,
            flow_action_flags: 0,
            dc_odp_caps: 0,
            hca_core_clock: core::ptr::null_mut(),
            num_lag_ports: 0,
            sig_caps: mlx5dv_sig_caps::default(),
            dci_streams_caps: mlx5dv_dci_streams_caps::default(),
            max_wr_memcpy_length: 0,
            crypto_caps: mlx5dv_crypto_caps::default(),
        }
    }
}

/// `MLX5DV_CONTEXT_MASK_CQE_COMPRESION` (sic): ask `mlx5dv_query_device`
/// for [`mlx5dv_context::cqe_comp_caps`]; set in the returned `comp_mask`
/// when the provider filled it.
pub const MLX5DV_CONTEXT_MASK_CQE_COMPRESION: u64 = 1 << 0;
/// `MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP`: CQE compression with 128-byte CQEs.
pub const MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP: u64 = 1 << 4;
/// `MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD`: 128-byte CQE padding
/// ([`MLX5DV_CQ_INIT_ATTR_FLAGS_CQE_PAD`]).
pub const MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD: u64 = 1 << 5;

/// `MLX5DV_CQE_RES_FORMAT_HASH` (`enum mlx5dv_cqe_comp_res_format`): a
/// responder mini-CQE carries the RX hash result (and `byte_cnt`).
pub const MLX5DV_CQE_RES_FORMAT_HASH: u8 = 1 << 0;
/// `MLX5DV_CQE_RES_FORMAT_CSUM`: a responder mini-CQE carries the
/// checksum (and `byte_cnt`).
pub const MLX5DV_CQE_RES_FORMAT_CSUM: u8 = 1 << 1;
/// `MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX`: a responder mini-CQE carries the
/// checksum and the stride index (and `byte_cnt`).
pub const MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX: u8 = 1 << 2;

/// `struct mlx5dv_cq_init_attr` (`mlx5dv_create_cq`): the mlx5 attributes
/// of a new CQ, each taken when its `MLX5DV_CQ_INIT_ATTR_MASK_*` bit is set.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_cq_init_attr {
    /// `MLX5DV_CQ_INIT_ATTR_MASK_*` bits: the fields below that are set.
    pub comp_mask: u64,
    /// One `MLX5DV_CQE_RES_FORMAT_*` value: the responder mini-CQE format
    /// (with [`MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE`], which turns
    /// compression on; libmlx5 checks it against
    /// [`mlx5dv_cqe_comp_caps::supported_format`], the kernel takes exactly one).
    pub cqe_comp_res_format: u8,
    /// `MLX5DV_CQ_INIT_ATTR_FLAGS_*` (with [`MLX5DV_CQ_INIT_ATTR_MASK_FLAGS`]).
    pub flags: u32,
    /// Bytes per CQE, 64 or 128 (with [`MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE`];
    /// otherwise libmlx5 takes `MLX5_CQE_SIZE` from the environment, or 64).
    pub cqe_size: u16,
}

/// `MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE`: CQE compression, in the
/// format [`mlx5dv_cq_init_attr::cqe_comp_res_format`] names.
pub const MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE: u64 = 1 << 0;
/// `MLX5DV_CQ_INIT_ATTR_MASK_FLAGS`: [`mlx5dv_cq_init_attr::flags`] is set.
pub const MLX5DV_CQ_INIT_ATTR_MASK_FLAGS: u64 = 1 << 1;
/// `MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE`: [`mlx5dv_cq_init_attr::cqe_size`] is set.
pub const MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE: u64 = 1 << 2;
/// `MLX5DV_CQ_INIT_ATTR_FLAGS_CQE_PAD`: pad 128-byte CQEs (needs
/// [`MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD`] and `cqe_size` 128).
pub const MLX5DV_CQ_INIT_ATTR_FLAGS_CQE_PAD: u32 = 1 << 0;

/// `struct mlx5dv_dci_streams` (rdma-core `providers/mlx5/mlx5dv.h`): the
/// DCI streams a DCI is created with (with
/// [`MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS`]); libmlx5 (`create_qp`,
/// `providers/mlx5/verbs.c`) refuses values above
/// [`mlx5dv_context::dci_streams_caps`] with `EINVAL`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_dci_streams {
    /// `log_num_concurent` (sic): log2 of the DCI's concurrent streams.
    pub log_num_concurent: u8,
    /// `log_num_errored`: log2 of the streams that may be in error at once
    /// before the DCI itself goes to error.
    pub log_num_errored: u8,
}

/// The anonymous union of `struct mlx5dv_dc_init_attr`: which member is
/// read depends on [`mlx5dv_dc_init_attr::dc_type`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union mlx5dv_dc_init_attr_u {
    /// `uint64_t dct_access_key`: the DC access key a DCT checks every
    /// DCI's datagram segment against ([`MLX5DV_DCTYPE_DCT`]; libmlx5's
    /// `create_dct` passes it to the kernel as `cmd.access_key`).
    pub dct_access_key: u64,
    /// `struct mlx5dv_dci_streams dci_streams` ([`MLX5DV_DCTYPE_DCI`] with
    /// [`MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS`]).
    pub dci_streams: mlx5dv_dci_streams,
}

/// `struct mlx5dv_dc_init_attr` (rdma-core `providers/mlx5/mlx5dv.h`): what
/// a DC QP is, taken by `mlx5dv_create_qp` with
/// [`MLX5DV_QP_INIT_ATTR_MASK_DC`] and `qp_type = IBV_QPT_DRIVER`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct mlx5dv_dc_init_attr {
    /// `enum mlx5dv_dc_type dc_type`: [`MLX5DV_DCTYPE_DCT`] or
    /// [`MLX5DV_DCTYPE_DCI`] (any other value: `EINVAL`).
    pub dc_type: u32,
    /// The anonymous union: the DCT's access key or the DCI's streams.
    pub u: mlx5dv_dc_init_attr_u,
}

/// `MLX5DV_DCTYPE_DCT` (`enum mlx5dv_dc_type`): a DC target, made on an SRQ
/// (its receives) and a CQ, with an access key. It has no SQ, no RQ, no
/// doorbell record and no BlueFlame register (libmlx5's `create_dct` makes
/// none), so `mlx5dv_init_obj` must never be asked to describe it (it
/// reads the absent BlueFlame register). Its number exists only after
/// INIT -> RTR (`modify_dct` sets `ibv_qp.qp_num` from the kernel's
/// `dctn`).
pub const MLX5DV_DCTYPE_DCT: u32 = 1;
/// `MLX5DV_DCTYPE_DCI` (`enum mlx5dv_dc_type`): a DC initiator, a send
/// queue whose WQEs each name their DCT (number and key) in a datagram
/// segment.
pub const MLX5DV_DCTYPE_DCI: u32 = 2;

/// `struct mlx5dv_qp_init_attr` (rdma-core `providers/mlx5/mlx5dv.h`;
/// `mlx5dv_create_qp`): the mlx5 attributes of a new QP, each taken when
/// its `MLX5DV_QP_INIT_ATTR_MASK_*` bit is set in `comp_mask`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct mlx5dv_qp_init_attr {
    /// `MLX5DV_QP_INIT_ATTR_MASK_*` bits (`enum mlx5dv_qp_init_attr_mask`):
    /// the fields below that are set.
    pub comp_mask: u64,
    /// `MLX5DV_QP_CREATE_*` bits (`enum mlx5dv_qp_create_flags`; with
    /// [`MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS`]).
    pub create_flags: u32,
    /// DC attributes (with [`MLX5DV_QP_INIT_ATTR_MASK_DC`]).
    pub dc_init_attr: mlx5dv_dc_init_attr,
    /// `MLX5DV_QP_EX_WITH_*` bits (`enum mlx5dv_qp_create_send_ops_flags`;
    /// with [`MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS`]).
    pub send_ops_flags: u64,
}

impl mlx5dv_qp_init_attr {
    /// No mlx5 attribute (`comp_mask` 0), the DC attributes zero.
    pub fn zeroed() -> Self {
        Self {
            comp_mask: 0,
            create_flags: 0,
            dc_init_attr: mlx5dv_dc_init_attr {
                dc_type: 0,
                u: mlx5dv_dc_init_attr_u { dct_access_key: 0 },
            },
            send_ops_flags: 0,
        }
    }
}

/// `MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS`:
/// [`mlx5dv_qp_init_attr::create_flags`] is set.
pub const MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS: u64 = 1 << 0;
/// `MLX5DV_QP_INIT_ATTR_MASK_DC`: [`mlx5dv_qp_init_attr::dc_init_attr`] is
/// set; the QP must be `IBV_QPT_DRIVER` (else `EINVAL`). A DCT takes only
/// this bit and [`MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS`] (libmlx5
/// `create_dct`).
pub const MLX5DV_QP_INIT_ATTR_MASK_DC: u64 = 1 << 1;
/// `MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS`:
/// [`mlx5dv_qp_init_attr::send_ops_flags`] is set (libmlx5's own
/// `mlx5dv_wr_*` builders).
pub const MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS: u64 = 1 << 2;
/// `MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS`: a DCI's
/// [`mlx5dv_dc_init_attr_u::dci_streams`] is set.
pub const MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS: u64 = 1 << 3;
/// `MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`: keep small responses out of CQEs.
pub const MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE: u32 = 1 << 3;
/// `MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE`: scatter to CQE on, for the
/// requester too without `sq_sig_all` (small READ responses and atomic
/// results in the CQE; rdma-core PR #404).
pub const MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE: u32 = 1 << 4;

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
    /// `struct ibv_cq_ex *mlx5dv_create_cq(struct ibv_context *context,
    /// struct ibv_cq_init_attr_ex *cq_attr, struct mlx5dv_cq_init_attr *mlx5_cq_attr)`:
    /// a CQ with mlx5 attributes (compression, CQE size); null with `errno`
    /// set on failure (`EOPNOTSUPP` where the context has no mlx5 ops).
    pub fn mlx5dv_create_cq(
        context: *mut c_void,
        cq_attr: *mut c_void,
        mlx5_cq_attr: *mut mlx5dv_cq_init_attr,
    ) -> *mut c_void;
    /// `struct ibv_qp *mlx5dv_create_qp(struct ibv_context *context,
    /// struct ibv_qp_init_attr_ex *qp_attr, struct mlx5dv_qp_init_attr *mlx5_qp_attr)`
    /// (rdma-core `providers/mlx5/mlx5dv.h`, `verbs.c`): a QP with mlx5
    /// attributes, among them the DC QPs (`qp_type = IBV_QPT_DRIVER` with
    /// [`MLX5DV_QP_INIT_ATTR_MASK_DC`]); null with `errno` set on failure
    /// (`EOPNOTSUPP` where the context has no mlx5 ops). `context` is a
    /// `struct ibv_context *` and `qp_attr` a `struct ibv_qp_init_attr_ex *`,
    /// the result a `struct ibv_qp *` (untyped here: this crate has no
    /// libibverbs bindings; `tests/layout.rs` checks the C prototype).
    pub fn mlx5dv_create_qp(
        context: *mut c_void,
        qp_attr: *mut c_void,
        mlx5_qp_attr: *mut mlx5dv_qp_init_attr,
    ) -> *mut c_void;
}
