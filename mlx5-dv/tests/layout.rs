//! Proves our `#[repr(C)]` mirrors match rdma-core's system header
//! (`infiniband/mlx5dv.h`, package libibverbs-dev): a small C program prints
//! each struct's size and field offsets, and they must equal ours.
//! Without the header (or a C compiler) it says so loudly and skips, unless
//! `RDMA_DIRECT_REQUIRE_HEADERS=1`, which makes that a failure.

use mlx5_dv::dv::*;
use std::mem::{offset_of, size_of};
use std::process::Command;

const PROGRAM: &str = r#"
#include <stdio.h>
#include <stddef.h>
#include <infiniband/mlx5dv.h>
#define F(s, f) printf(#s "." #f " %zu\n", offsetof(struct s, f))
int main(void) {
    printf("mlx5dv_qp %zu\n", sizeof(struct mlx5dv_qp));
    F(mlx5dv_qp, dbrec); F(mlx5dv_qp, sq.buf); F(mlx5dv_qp, sq.wqe_cnt); F(mlx5dv_qp, sq.stride);
    F(mlx5dv_qp, rq.buf); F(mlx5dv_qp, rq.wqe_cnt); F(mlx5dv_qp, rq.stride);
    F(mlx5dv_qp, bf.reg); F(mlx5dv_qp, bf.size); F(mlx5dv_qp, comp_mask); F(mlx5dv_qp, uar_mmap_offset);
    F(mlx5dv_qp, tirn); F(mlx5dv_qp, tisn); F(mlx5dv_qp, rqn); F(mlx5dv_qp, sqn); F(mlx5dv_qp, tir_icm_addr);
    printf("mlx5dv_cq %zu\n", sizeof(struct mlx5dv_cq));
    F(mlx5dv_cq, buf); F(mlx5dv_cq, dbrec); F(mlx5dv_cq, cqe_cnt); F(mlx5dv_cq, cqe_size);
    F(mlx5dv_cq, cq_uar); F(mlx5dv_cq, cqn); F(mlx5dv_cq, comp_mask);
    printf("mlx5dv_srq %zu\n", sizeof(struct mlx5dv_srq));
    F(mlx5dv_srq, buf); F(mlx5dv_srq, dbrec); F(mlx5dv_srq, stride); F(mlx5dv_srq, head);
    F(mlx5dv_srq, tail); F(mlx5dv_srq, comp_mask); F(mlx5dv_srq, srqn);
    printf("mlx5_wqe_srq_next_seg.next_wqe_index %zu\n", offsetof(struct mlx5_wqe_srq_next_seg, next_wqe_index));
    printf("mlx5_wqe_srq_next_seg %zu\n", sizeof(struct mlx5_wqe_srq_next_seg));
    printf("mlx5dv_ah %zu\n", sizeof(struct mlx5dv_ah));
    F(mlx5dv_ah, av); F(mlx5dv_ah, comp_mask);
    printf("mlx5_wqe_av %zu\n", sizeof(struct mlx5_wqe_av));
    printf("mlx5_wqe_av.dqp_dct %zu\n", offsetof(struct mlx5_wqe_av, dqp_dct));
    F(mlx5_wqe_av, key); F(mlx5_wqe_av, key.qkey.qkey); F(mlx5_wqe_av, key.dc_key);
    printf("mlx5_wqe_av.key.size %zu\n", sizeof(((struct mlx5_wqe_av *)0)->key));
    printf("MLX5_EXTENDED_UD_AV %u\n", (unsigned)MLX5_EXTENDED_UD_AV);
    printf("mlx5_cqe64.flags_rqpn %zu\n", offsetof(struct mlx5_cqe64, flags_rqpn));
    printf("mlx5dv_obj %zu\n", sizeof(struct mlx5dv_obj));
    F(mlx5dv_obj, qp.in); F(mlx5dv_obj, qp.out); F(mlx5dv_obj, cq.in); F(mlx5dv_obj, cq.out);
    F(mlx5dv_obj, srq); F(mlx5dv_obj, rwq); F(mlx5dv_obj, dm); F(mlx5dv_obj, ah); F(mlx5dv_obj, pd);
    printf("mlx5dv_context %zu\n", sizeof(struct mlx5dv_context));
    F(mlx5dv_context, version); F(mlx5dv_context, flags); F(mlx5dv_context, comp_mask);
    F(mlx5dv_context, cqe_comp_caps); F(mlx5dv_context, sw_parsing_caps); F(mlx5dv_context, striding_rq_caps);
    F(mlx5dv_context, tunnel_offloads_caps); F(mlx5dv_context, max_dynamic_bfregs);
    F(mlx5dv_context, max_clock_info_update_nsec); F(mlx5dv_context, flow_action_flags);
    F(mlx5dv_context, dc_odp_caps); F(mlx5dv_context, hca_core_clock); F(mlx5dv_context, num_lag_ports);
    F(mlx5dv_context, sig_caps); F(mlx5dv_context, dci_streams_caps); F(mlx5dv_context, max_wr_memcpy_length);
    F(mlx5dv_context, crypto_caps);
    printf("mlx5dv_sig_caps %zu\n", sizeof(struct mlx5dv_sig_caps));
    printf("mlx5dv_crypto_caps %zu\n", sizeof(struct mlx5dv_crypto_caps));
    F(mlx5dv_crypto_caps, flags);
    printf("mlx5dv_qp_init_attr %zu\n", sizeof(struct mlx5dv_qp_init_attr));
    F(mlx5dv_qp_init_attr, comp_mask); F(mlx5dv_qp_init_attr, create_flags);
    F(mlx5dv_qp_init_attr, dc_init_attr); F(mlx5dv_qp_init_attr, send_ops_flags);
    printf("mlx5dv_dc_init_attr %zu\n", sizeof(struct mlx5dv_dc_init_attr));
    printf("MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE %u\n", (unsigned)MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE);
    printf("MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE %u\n", (unsigned)MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE);
    printf("mlx5dv_cqe_comp_caps %zu\n", sizeof(struct mlx5dv_cqe_comp_caps));
    F(mlx5dv_cqe_comp_caps, max_num); F(mlx5dv_cqe_comp_caps, supported_format);
    printf("mlx5dv_cq_init_attr %zu\n", sizeof(struct mlx5dv_cq_init_attr));
    F(mlx5dv_cq_init_attr, comp_mask); F(mlx5dv_cq_init_attr, cqe_comp_res_format);
    F(mlx5dv_cq_init_attr, flags); F(mlx5dv_cq_init_attr, cqe_size);
    printf("MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE %u\n", (unsigned)MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE);
    printf("MLX5DV_CQ_INIT_ATTR_MASK_FLAGS %u\n", (unsigned)MLX5DV_CQ_INIT_ATTR_MASK_FLAGS);
    printf("MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE %u\n", (unsigned)MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE);
    printf("MLX5DV_CQ_INIT_ATTR_FLAGS_CQE_PAD %u\n", (unsigned)MLX5DV_CQ_INIT_ATTR_FLAGS_CQE_PAD);
    printf("MLX5DV_CQE_RES_FORMAT_HASH %u\n", (unsigned)MLX5DV_CQE_RES_FORMAT_HASH);
    printf("MLX5DV_CQE_RES_FORMAT_CSUM %u\n", (unsigned)MLX5DV_CQE_RES_FORMAT_CSUM);
    printf("MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX %u\n", (unsigned)MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX);
    printf("MLX5DV_CONTEXT_MASK_CQE_COMPRESION %u\n", (unsigned)MLX5DV_CONTEXT_MASK_CQE_COMPRESION);
    printf("MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP %u\n", (unsigned)MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP);
    printf("MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD %u\n", (unsigned)MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD);
    /* The function's type (no link against libmlx5): a mismatch fails to compile. */
    _Static_assert(__builtin_types_compatible_p(__typeof__(&mlx5dv_create_cq),
        struct ibv_cq_ex *(*)(struct ibv_context *, struct ibv_cq_init_attr_ex *,
                              struct mlx5dv_cq_init_attr *)), "mlx5dv_create_cq's type");
    printf("MLX5DV_OBJ_QP %u\n", (unsigned)MLX5DV_OBJ_QP);
    printf("MLX5DV_OBJ_CQ %u\n", (unsigned)MLX5DV_OBJ_CQ);
    printf("MLX5DV_OBJ_SRQ %u\n", (unsigned)MLX5DV_OBJ_SRQ);
    printf("MLX5DV_OBJ_AH %u\n", (unsigned)MLX5DV_OBJ_AH);
    return 0;
}
"#;

fn ours() -> Vec<(String, usize)> {
    macro_rules! f {
        ($v:ident, $s:ident, $($f:tt).+) => {
            $v.push((concat!(stringify!($s), ".", stringify!($($f).+)).replace(' ', ""), offset_of!($s, $($f).+)))
        };
    }
    let mut v = vec![("mlx5dv_qp".to_string(), size_of::<mlx5dv_qp>())];
    f!(v, mlx5dv_qp, dbrec);
    f!(v, mlx5dv_qp, sq.buf);
    f!(v, mlx5dv_qp, sq.wqe_cnt);
    f!(v, mlx5dv_qp, sq.stride);
    f!(v, mlx5dv_qp, rq.buf);
    f!(v, mlx5dv_qp, rq.wqe_cnt);
    f!(v, mlx5dv_qp, rq.stride);
    f!(v, mlx5dv_qp, bf.reg);
    f!(v, mlx5dv_qp, bf.size);
    f!(v, mlx5dv_qp, comp_mask);
    f!(v, mlx5dv_qp, uar_mmap_offset);
    f!(v, mlx5dv_qp, tirn);
    f!(v, mlx5dv_qp, tisn);
    f!(v, mlx5dv_qp, rqn);
    f!(v, mlx5dv_qp, sqn);
    f!(v, mlx5dv_qp, tir_icm_addr);
    v.push(("mlx5dv_cq".to_string(), size_of::<mlx5dv_cq>()));
    f!(v, mlx5dv_cq, buf);
    f!(v, mlx5dv_cq, dbrec);
    f!(v, mlx5dv_cq, cqe_cnt);
    f!(v, mlx5dv_cq, cqe_size);
    f!(v, mlx5dv_cq, cq_uar);
    f!(v, mlx5dv_cq, cqn);
    f!(v, mlx5dv_cq, comp_mask);
    v.push(("mlx5dv_srq".to_string(), size_of::<mlx5dv_srq>()));
    f!(v, mlx5dv_srq, buf);
    f!(v, mlx5dv_srq, dbrec);
    f!(v, mlx5dv_srq, stride);
    f!(v, mlx5dv_srq, head);
    f!(v, mlx5dv_srq, tail);
    f!(v, mlx5dv_srq, comp_mask);
    f!(v, mlx5dv_srq, srqn);
    // Bytes 2..4 of every SRQ WQE, and the next segment's size.
    v.push(("mlx5_wqe_srq_next_seg.next_wqe_index".into(), 2));
    v.push((
        "mlx5_wqe_srq_next_seg".into(),
        mlx5_dv::driver::SRQ_NEXT_SEG,
    ));
    v.push(("mlx5dv_ah".to_string(), size_of::<mlx5dv_ah>()));
    f!(v, mlx5dv_ah, av);
    f!(v, mlx5dv_ah, comp_mask);
    // The datagram segment the UD writer copies, its QPN word, the CQE's
    // source-QPN word.
    v.push(("mlx5_wqe_av".into(), mlx5_dv::wqe::DATAGRAM_SEG));
    v.push(("mlx5_wqe_av.dqp_dct".into(), mlx5_dv::wqe::AV_DQP_DCT));
    // The key union the UD writer puts the qkey in (bytes 0..4) and the DC
    // writer the DC key (bytes 0..8): it ends where `dqp_dct` starts.
    v.push(("mlx5_wqe_av.key".into(), mlx5_dv::wqe::AV_KEY));
    v.push(("mlx5_wqe_av.key.qkey.qkey".into(), mlx5_dv::wqe::AV_KEY));
    v.push(("mlx5_wqe_av.key.dc_key".into(), mlx5_dv::wqe::AV_KEY));
    v.push((
        "mlx5_wqe_av.key.size".into(),
        mlx5_dv::wqe::AV_DQP_DCT - mlx5_dv::wqe::AV_KEY,
    ));
    v.push((
        "MLX5_EXTENDED_UD_AV".into(),
        mlx5_dv::wqe::EXTENDED_UD_AV as usize,
    ));
    v.push(("mlx5_cqe64.flags_rqpn".into(), 24));
    v.push(("mlx5dv_obj".to_string(), size_of::<mlx5dv_obj>()));
    v.push(("mlx5dv_obj.qp.in".into(), offset_of!(mlx5dv_obj, qp.in_)));
    v.push(("mlx5dv_obj.qp.out".into(), offset_of!(mlx5dv_obj, qp.out)));
    v.push(("mlx5dv_obj.cq.in".into(), offset_of!(mlx5dv_obj, cq.in_)));
    v.push(("mlx5dv_obj.cq.out".into(), offset_of!(mlx5dv_obj, cq.out)));
    f!(v, mlx5dv_obj, srq);
    f!(v, mlx5dv_obj, rwq);
    f!(v, mlx5dv_obj, dm);
    f!(v, mlx5dv_obj, ah);
    f!(v, mlx5dv_obj, pd);
    v.push(("mlx5dv_context".to_string(), size_of::<mlx5dv_context>()));
    f!(v, mlx5dv_context, version);
    f!(v, mlx5dv_context, flags);
    f!(v, mlx5dv_context, comp_mask);
    f!(v, mlx5dv_context, cqe_comp_caps);
    f!(v, mlx5dv_context, sw_parsing_caps);
    f!(v, mlx5dv_context, striding_rq_caps);
    f!(v, mlx5dv_context, tunnel_offloads_caps);
    f!(v, mlx5dv_context, max_dynamic_bfregs);
    f!(v, mlx5dv_context, max_clock_info_update_nsec);
    f!(v, mlx5dv_context, flow_action_flags);
    f!(v, mlx5dv_context, dc_odp_caps);
    f!(v, mlx5dv_context, hca_core_clock);
    f!(v, mlx5dv_context, num_lag_ports);
    f!(v, mlx5dv_context, sig_caps);
    f!(v, mlx5dv_context, dci_streams_caps);
    f!(v, mlx5dv_context, max_wr_memcpy_length);
    f!(v, mlx5dv_context, crypto_caps);
    v.push(("mlx5dv_sig_caps".to_string(), size_of::<mlx5dv_sig_caps>()));
    v.push((
        "mlx5dv_crypto_caps".to_string(),
        size_of::<mlx5dv_crypto_caps>(),
    ));
    f!(v, mlx5dv_crypto_caps, flags);
    v.push((
        "mlx5dv_qp_init_attr".to_string(),
        size_of::<mlx5dv_qp_init_attr>(),
    ));
    f!(v, mlx5dv_qp_init_attr, comp_mask);
    f!(v, mlx5dv_qp_init_attr, create_flags);
    f!(v, mlx5dv_qp_init_attr, dc_init_attr);
    f!(v, mlx5dv_qp_init_attr, send_ops_flags);
    v.push((
        "mlx5dv_dc_init_attr".to_string(),
        size_of::<mlx5dv_dc_init_attr>(),
    ));
    v.push((
        "MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE".into(),
        MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE as usize,
    ));
    v.push((
        "MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE".into(),
        MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE as usize,
    ));
    v.push((
        "mlx5dv_cqe_comp_caps".to_string(),
        size_of::<mlx5dv_cqe_comp_caps>(),
    ));
    f!(v, mlx5dv_cqe_comp_caps, max_num);
    f!(v, mlx5dv_cqe_comp_caps, supported_format);
    v.push((
        "mlx5dv_cq_init_attr".to_string(),
        size_of::<mlx5dv_cq_init_attr>(),
    ));
    f!(v, mlx5dv_cq_init_attr, comp_mask);
    f!(v, mlx5dv_cq_init_attr, cqe_comp_res_format);
    f!(v, mlx5dv_cq_init_attr, flags);
    f!(v, mlx5dv_cq_init_attr, cqe_size);
    for (k, c) in [
        (
            "MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE",
            MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE,
        ),
        (
            "MLX5DV_CQ_INIT_ATTR_MASK_FLAGS",
            MLX5DV_CQ_INIT_ATTR_MASK_FLAGS,
        ),
        (
            "MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE",
            MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE,
        ),
        (
            "MLX5DV_CQ_INIT_ATTR_FLAGS_CQE_PAD",
            MLX5DV_CQ_INIT_ATTR_FLAGS_CQE_PAD as u64,
        ),
        (
            "MLX5DV_CQE_RES_FORMAT_HASH",
            MLX5DV_CQE_RES_FORMAT_HASH as u64,
        ),
        (
            "MLX5DV_CQE_RES_FORMAT_CSUM",
            MLX5DV_CQE_RES_FORMAT_CSUM as u64,
        ),
        (
            "MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX",
            MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX as u64,
        ),
        (
            "MLX5DV_CONTEXT_MASK_CQE_COMPRESION",
            MLX5DV_CONTEXT_MASK_CQE_COMPRESION,
        ),
        (
            "MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP",
            MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP,
        ),
        (
            "MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD",
            MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD,
        ),
    ] {
        v.push((k.into(), c as usize));
    }
    v.push(("MLX5DV_OBJ_QP".into(), MLX5DV_OBJ_QP as usize));
    v.push(("MLX5DV_OBJ_CQ".into(), MLX5DV_OBJ_CQ as usize));
    v.push(("MLX5DV_OBJ_SRQ".into(), MLX5DV_OBJ_SRQ as usize));
    v.push(("MLX5DV_OBJ_AH".into(), MLX5DV_OBJ_AH as usize));
    v
}

/// Says so on the real stderr (past libtest's capture).
fn skip(why: &str) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "layout: SKIPPING the header comparison: {why}"
    );
}

/// Compiles and runs `program` against the system header, and parses its
/// `name value` lines; `None` (after saying why) where there is no header
/// or no C compiler and `RDMA_DIRECT_REQUIRE_HEADERS` is not `1`.
fn probe(program: &str, tag: &str) -> Option<Vec<(String, usize)>> {
    let required = std::env::var("RDMA_DIRECT_REQUIRE_HEADERS").is_ok_and(|v| v == "1");
    if !std::path::Path::new("/usr/include/infiniband/mlx5dv.h").exists() {
        assert!(
            !required,
            "RDMA_DIRECT_REQUIRE_HEADERS=1 but infiniband/mlx5dv.h is missing"
        );
        skip("/usr/include/infiniband/mlx5dv.h not found (apt-get install libibverbs-dev)");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("mlx5dv-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("layout.c"), dir.join("layout"));
    std::fs::write(&src, program).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc).arg(&src).arg("-o").arg(&exe).status();
    match status {
        Ok(s) if s.success() => {}
        other => {
            assert!(
                !required,
                "compiling the layout probe with {cc} failed: {other:?}"
            );
            skip(&format!(
                "cannot compile against mlx5dv.h with {cc}: {other:?}"
            ));
            return None;
        }
    }
    let out = Command::new(&exe).output().unwrap();
    let theirs = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect();
    std::fs::remove_dir_all(&dir).ok();
    Some(theirs)
}

#[test]
fn dv_layouts_match_the_system_header() {
    if let Some(theirs) = probe(PROGRAM, "layout") {
        assert_eq!(ours(), theirs);
    }
}

/// The DC creation structs of `mlx5dv_create_qp`: sizes, alignments, every
/// field (the anonymous union's members too), the DC constants and the
/// function's C type.
const DC_PROGRAM: &str = r#"
#include <stdio.h>
#include <stddef.h>
#include <infiniband/mlx5dv.h>
#define F(s, f) printf(#s "." #f " %zu\n", offsetof(struct s, f))
#define S(s) printf(#s " %zu\n", sizeof(struct s)); printf(#s ".align %zu\n", _Alignof(struct s))
#define C(c) printf(#c " %llu\n", (unsigned long long)(c))
int main(void) {
    S(mlx5dv_dci_streams);
    F(mlx5dv_dci_streams, log_num_concurent); F(mlx5dv_dci_streams, log_num_errored);
    S(mlx5dv_dc_init_attr);
    F(mlx5dv_dc_init_attr, dc_type); F(mlx5dv_dc_init_attr, dct_access_key);
    F(mlx5dv_dc_init_attr, dci_streams);
    F(mlx5dv_dc_init_attr, dci_streams.log_num_concurent);
    F(mlx5dv_dc_init_attr, dci_streams.log_num_errored);
    printf("mlx5dv_dc_init_attr.dc_type.size %zu\n", sizeof(((struct mlx5dv_dc_init_attr *)0)->dc_type));
    S(mlx5dv_qp_init_attr);
    F(mlx5dv_qp_init_attr, comp_mask); F(mlx5dv_qp_init_attr, create_flags);
    F(mlx5dv_qp_init_attr, dc_init_attr); F(mlx5dv_qp_init_attr, dc_init_attr.dc_type);
    F(mlx5dv_qp_init_attr, dc_init_attr.dct_access_key);
    F(mlx5dv_qp_init_attr, dc_init_attr.dci_streams);
    F(mlx5dv_qp_init_attr, send_ops_flags);
    C(MLX5DV_DCTYPE_DCT); C(MLX5DV_DCTYPE_DCI);
    C(MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS); C(MLX5DV_QP_INIT_ATTR_MASK_DC);
    C(MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS); C(MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS);
    C(MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE); C(MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE);
    /* The function's type (no link against libmlx5): a mismatch fails to compile. */
    _Static_assert(__builtin_types_compatible_p(__typeof__(&mlx5dv_create_qp),
        struct ibv_qp *(*)(struct ibv_context *, struct ibv_qp_init_attr_ex *,
                           struct mlx5dv_qp_init_attr *)), "mlx5dv_create_qp's type");
    return 0;
}
"#;

fn ours_dc() -> Vec<(String, usize)> {
    use std::mem::align_of;
    type U = mlx5dv_dc_init_attr_u;
    let u = offset_of!(mlx5dv_dc_init_attr, u);
    let dc = offset_of!(mlx5dv_qp_init_attr, dc_init_attr);
    let streams = |f: usize| u + offset_of!(U, dci_streams) + f;
    let concurent = offset_of!(mlx5dv_dci_streams, log_num_concurent);
    let errored = offset_of!(mlx5dv_dci_streams, log_num_errored);
    let dc_type = offset_of!(mlx5dv_dc_init_attr, dc_type);
    [
        ("mlx5dv_dci_streams", size_of::<mlx5dv_dci_streams>()),
        ("mlx5dv_dci_streams.align", align_of::<mlx5dv_dci_streams>()),
        ("mlx5dv_dci_streams.log_num_concurent", concurent),
        ("mlx5dv_dci_streams.log_num_errored", errored),
        ("mlx5dv_dc_init_attr", size_of::<mlx5dv_dc_init_attr>()),
        (
            "mlx5dv_dc_init_attr.align",
            align_of::<mlx5dv_dc_init_attr>(),
        ),
        ("mlx5dv_dc_init_attr.dc_type", dc_type),
        (
            "mlx5dv_dc_init_attr.dct_access_key",
            u + offset_of!(U, dct_access_key),
        ),
        ("mlx5dv_dc_init_attr.dci_streams", streams(0)),
        (
            "mlx5dv_dc_init_attr.dci_streams.log_num_concurent",
            streams(concurent),
        ),
        (
            "mlx5dv_dc_init_attr.dci_streams.log_num_errored",
            streams(errored),
        ),
        ("mlx5dv_dc_init_attr.dc_type.size", size_of::<u32>()),
        ("mlx5dv_qp_init_attr", size_of::<mlx5dv_qp_init_attr>()),
        (
            "mlx5dv_qp_init_attr.align",
            align_of::<mlx5dv_qp_init_attr>(),
        ),
        (
            "mlx5dv_qp_init_attr.comp_mask",
            offset_of!(mlx5dv_qp_init_attr, comp_mask),
        ),
        (
            "mlx5dv_qp_init_attr.create_flags",
            offset_of!(mlx5dv_qp_init_attr, create_flags),
        ),
        ("mlx5dv_qp_init_attr.dc_init_attr", dc),
        ("mlx5dv_qp_init_attr.dc_init_attr.dc_type", dc + dc_type),
        (
            "mlx5dv_qp_init_attr.dc_init_attr.dct_access_key",
            dc + u + offset_of!(U, dct_access_key),
        ),
        (
            "mlx5dv_qp_init_attr.dc_init_attr.dci_streams",
            dc + streams(0),
        ),
        (
            "mlx5dv_qp_init_attr.send_ops_flags",
            offset_of!(mlx5dv_qp_init_attr, send_ops_flags),
        ),
        ("MLX5DV_DCTYPE_DCT", MLX5DV_DCTYPE_DCT as usize),
        ("MLX5DV_DCTYPE_DCI", MLX5DV_DCTYPE_DCI as usize),
        (
            "MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS",
            MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS as usize,
        ),
        (
            "MLX5DV_QP_INIT_ATTR_MASK_DC",
            MLX5DV_QP_INIT_ATTR_MASK_DC as usize,
        ),
        (
            "MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS",
            MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS as usize,
        ),
        (
            "MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS",
            MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS as usize,
        ),
        (
            "MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE",
            MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE as usize,
        ),
        (
            "MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE",
            MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE as usize,
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

#[test]
fn dc_qp_init_attrs_match_the_system_header() {
    if let Some(theirs) = probe(DC_PROGRAM, "dc-layout") {
        assert_eq!(ours_dc(), theirs);
    }
}
