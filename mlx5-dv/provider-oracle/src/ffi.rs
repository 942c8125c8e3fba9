//! The harness's C entry points (`harness/harness.c`) and `#[repr(C)]`
//! mirrors of its structs. [`check_abi`] compares the mirrors' sizes with
//! the C side's.
#![allow(non_camel_case_types)]

use core::ffi::c_void;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct po_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct po_send_wr {
    pub wr_id: u64,
    pub sg_list: *const po_sge,
    pub av: *const u8,
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub opcode: u32,
    pub send_flags: u32,
    pub imm: u32,
    pub num_sge: u32,
    pub rkey: u32,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
    pub pad: u32,
}

/// A memory-window WR at its place in a `po_send_wr` list (`kind` 1;
/// `harness.c`'s comment says each field), or a plain WR (`kind` 0).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct po_mw_wr {
    pub addr: u64,
    pub length: u64,
    pub kind: u32,
    pub opcode: u32,
    pub mw_type: u32,
    pub mw_rkey: u32,
    pub new_rkey: u32,
    pub mr_lkey: u32,
    pub access: u32,
    pub invalidate_rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct po_recv_wr {
    pub wr_id: u64,
    pub sg_list: *const po_sge,
    pub num_sge: u32,
    pub pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct po_qp_cfg {
    pub sq_buf: *mut c_void,
    pub rq_buf: *mut c_void,
    pub dbrec: *mut u32,
    pub bf_reg: *mut c_void,
    pub sq_wqe_cnt: u32,
    pub sq_cur_post: u32,
    pub sq_max_post: u32,
    pub sq_max_gs: u32,
    pub max_inline: u32,
    pub rq_wqe_cnt: u32,
    pub rq_wqe_shift: u32,
    pub rq_max_gs: u32,
    pub rq_max_post: u32,
    pub rq_head: u32,
    pub qpn: u32,
    pub qp_type: u32,
    pub sq_sig_all: u32,
    pub wq_sig: u32,
    pub atomics: u32,
    pub prefer_bf: u32,
    pub bf_size: u32,
    pub bf_offset: u32,
    pub user_index: u32,
    pub pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct po_sq_state {
    pub cur_post: u32,
    pub head: u32,
    pub tail: u32,
    pub bf_offset: u32,
    pub rq_head: u32,
    pub rq_tail: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct po_srq_cfg {
    pub buf: *mut c_void,
    pub db: *mut u32,
    pub max: u32,
    pub wqe_shift: u32,
    pub max_gs: u32,
    pub srqn: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct po_cq_cfg {
    pub buf: *mut c_void,
    pub dbrec: *mut u32,
    pub cqe_cnt: u32,
    pub cqe_sz: u32,
    pub cons_index: u32,
    pub cqn: u32,
}

/// `struct ibv_wc`, flattened; `imm` in host order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct po_wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u32,
    pub slid: u32,
    pub sl: u32,
    pub dlid_path_bits: u32,
}

/// Opaque handles of the harness.
#[repr(C)]
pub struct po_ctx {
    _p: [u8; 0],
}
#[repr(C)]
pub struct po_qp {
    _p: [u8; 0],
}
#[repr(C)]
pub struct po_cq {
    _p: [u8; 0],
}
#[repr(C)]
pub struct po_srq {
    _p: [u8; 0],
}

extern "C" {
    pub fn po_ctx_new() -> *mut po_ctx;
    pub fn po_ctx_free(c: *mut po_ctx);
    pub fn po_cq_new(c: *mut po_ctx, cfg: *const po_cq_cfg) -> *mut po_cq;
    pub fn po_cq_free(q: *mut po_cq);
    pub fn po_cq_cons_index(q: *const po_cq) -> u32;
    pub fn po_qp_new(
        c: *mut po_ctx,
        cfg: *const po_qp_cfg,
        scq: *mut po_cq,
        rcq: *mut po_cq,
        srq: *mut po_srq,
    ) -> *mut po_qp;
    pub fn po_qp_free(p: *mut po_qp);
    pub fn po_qp_state(p: *const po_qp, s: *mut po_sq_state);
    pub fn po_qp_retire_sends(p: *mut po_qp, retired: u32);
    pub fn po_post_send(p: *mut po_qp, w: *const po_send_wr, n: u32, bad: *mut u32) -> i32;
    pub fn po_post_send_mw(
        p: *mut po_qp,
        w: *const po_send_wr,
        mw: *const po_mw_wr,
        n: u32,
        bad: *mut u32,
    ) -> i32;
    pub fn po_bind_mw(
        p: *mut po_qp,
        m: *const po_mw_wr,
        wr_id: u64,
        send_flags: u32,
        rkey: *mut u32,
    ) -> i32;
    pub fn po_post_recv(p: *mut po_qp, w: *const po_recv_wr, n: u32, bad: *mut u32) -> i32;
    pub fn po_srq_new(c: *mut po_ctx, cfg: *const po_srq_cfg) -> *mut po_srq;
    pub fn po_srq_free(s: *mut po_srq);
    pub fn po_post_srq_recv(s: *mut po_srq, w: *const po_recv_wr, n: u32, bad: *mut u32) -> i32;
    pub fn po_srq_state(s: *const po_srq, head: *mut i32, tail: *mut i32, counter: *mut u32);
    pub fn po_srq_marked_free(s: *const po_srq, i: u32) -> i32;
    pub fn po_srq_wrid(s: *const po_srq, i: u32) -> u64;
    pub fn po_qp_retire_recvs(p: *mut po_qp, n: u32);
    pub fn po_srq_complete(s: *mut po_srq, i: u32);
    pub fn po_poll_cq(q: *mut po_cq, ne: i32, out: *mut po_wc) -> i32;
    pub fn po_abi_size(which: i32) -> u32;
}

/// Whether every mirror has its C struct's size (`po_abi_size`), else
/// which one does not.
pub fn check_abi() -> Result<(), String> {
    let ours = [
        ("po_send_wr", size_of::<po_send_wr>()),
        ("po_recv_wr", size_of::<po_recv_wr>()),
        ("po_qp_cfg", size_of::<po_qp_cfg>()),
        ("po_srq_cfg", size_of::<po_srq_cfg>()),
        ("po_cq_cfg", size_of::<po_cq_cfg>()),
        ("po_wc", size_of::<po_wc>()),
        ("po_sq_state", size_of::<po_sq_state>()),
        ("po_sge", size_of::<po_sge>()),
        ("po_mw_wr", size_of::<po_mw_wr>()),
    ];
    // SAFETY: a pure function of its argument.
    sizes_agree(&ours, |i| unsafe { po_abi_size(i) })
}

/// Whether each `(name, size)` of `ours`, the `i`th, has the size `c_size(i)`
/// gives for its C struct, else which one does not.
fn sizes_agree(ours: &[(&str, usize)], c_size: impl Fn(i32) -> u32) -> Result<(), String> {
    for (i, (name, size)) in ours.iter().enumerate() {
        let c = c_size(i as i32) as usize;
        if c != *size {
            return Err(format!("{name}: {size} bytes in Rust, {c} in C"));
        }
    }
    Ok(())
}

// -- The DCI of `harness/dc.c` (libmlx5's ibv_wr_* / mlx5dv_wr_* builders) --

/// One SGE, or one inline buffer (`addr`, `length`), of a [`po_dc_wr`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct po_dc_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// One DC work request as `harness/dc.c` `po_dci_post` takes it: the
/// builder of `opcode` (`enum ibv_wr_opcode`), `mlx5dv_wr_set_dc_addr`
/// with an AH holding `av`, and the data setter `setter` names.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct po_dc_wr {
    pub wr_id: u64,
    pub sg_list: *const po_dc_sge,
    pub av: *const u8,
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub dc_key: u64,
    pub opcode: u32,
    pub wr_flags: u32,
    pub imm: u32,
    pub num_sge: u32,
    pub rkey: u32,
    pub dctn: u32,
    pub setter: u32,
    pub addr_first: u32,
}

/// A DCI's ring, doorbell record, BlueFlame registers and limits.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct po_dci_cfg {
    pub sq_buf: *mut c_void,
    pub dbrec: *mut u32,
    pub bf_reg: *mut c_void,
    pub sq_wqe_cnt: u32,
    pub sq_cur_post: u32,
    pub sq_max_post: u32,
    pub sq_max_gs: u32,
    pub max_inline: u32,
    pub qpn: u32,
    pub sq_sig_all: u32,
    pub prefer_bf: u32,
    pub bf_size: u32,
    pub pad: u32,
}

/// Opaque: `harness/dc.c`'s `struct po_dci`.
#[repr(C)]
pub struct po_dci {
    _p: [u8; 0],
}

extern "C" {
    pub fn po_dci_new(cfg: *const po_dci_cfg) -> *mut po_dci;
    pub fn po_dci_free(d: *mut po_dci);
    pub fn po_dci_post(d: *mut po_dci, w: *const po_dc_wr, n: u32) -> i32;
    pub fn po_dci_state(d: *const po_dci, cur_post: *mut u32, head: *mut u32, bf_offset: *mut u32);
    pub fn po_dci_wrid(d: *const po_dci, i: u32) -> u64;
    pub fn po_dc_abi_size(which: i32) -> u32;
}

/// [`check_abi`] for the DCI's mirrors (`po_dc_abi_size`).
pub fn check_dc_abi() -> Result<(), String> {
    let ours = [
        ("po_dc_sge", size_of::<po_dc_sge>()),
        ("po_dc_wr", size_of::<po_dc_wr>()),
        ("po_dci_cfg", size_of::<po_dci_cfg>()),
    ];
    // SAFETY: a pure function of its argument.
    sizes_agree(&ours, |i| unsafe { po_dc_abi_size(i) })
}
