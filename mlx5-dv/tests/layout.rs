//! Proves our `#[repr(C)]` mirrors match rdma-core's system header
//! (`infiniband/mlx5dv.h`, package libibverbs-dev): a small C program prints
//! each struct's size and field offsets, and they must equal ours.
//! Without the header (or a C compiler) it says so loudly and skips, unless
//! `RDMA_DIRECT_REQUIRE_HEADERS=1`, which makes that a failure.

use mlx5_dv::dv::{mlx5dv_cq, mlx5dv_qp};
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

#[test]
fn dv_layouts_match_the_system_header() {
    let required = std::env::var("RDMA_DIRECT_REQUIRE_HEADERS").is_ok_and(|v| v == "1");
    if !std::path::Path::new("/usr/include/infiniband/mlx5dv.h").exists() {
        assert!(
            !required,
            "RDMA_DIRECT_REQUIRE_HEADERS=1 but infiniband/mlx5dv.h is missing"
        );
        skip("/usr/include/infiniband/mlx5dv.h not found (apt-get install libibverbs-dev)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("mlx5dv-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("layout.c"), dir.join("layout"));
    std::fs::write(&src, PROGRAM).unwrap();
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
            return;
        }
    }
    let out = Command::new(&exe).output().unwrap();
    let theirs: Vec<(String, usize)> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(ours(), theirs);
}
