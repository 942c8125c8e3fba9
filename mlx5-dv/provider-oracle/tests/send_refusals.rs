//! Refusals, ours against libmlx5's. Where a list's first WR is refused,
//! both refuse it and neither publishes anything (no doorbell record, no
//! BlueFlame write, the producer index unchanged). Where a later WR is
//! refused, libmlx5 has already written and rung the WRs before it: so
//! has our driver's per-WR post (rdma-direct's `Qp::post_send` checks the
//! whole list first and writes nothing, tested on the sim in
//! tests/fast_paths.rs). Where we refuse and libmlx5 does not (a WQE that
//! does not fit the free WQEBBs, which libmlx5 never checks: it counts WRs
//! against `max_post = wq_size / max_wqe_size`), docs/prm.md says so and
//! the test shows both sides.
// Needs the oracle linked: without it `oracle_linked.rs` says SKIPPED.
#![cfg(provider_oracle)]

use mlx5_dv::wqe::WqeError;
use mlx5_provider_oracle::gen::{self, Rng, ARENA};
use mlx5_provider_oracle::oracle_or_skip;
use mlx5_provider_oracle::send::{
    allowed_bytes, pattern, post_ours, post_theirs, ring_diffs, SqConfig, SqMem,
};
use mlx5_provider_oracle::wr::{ibv, Op, Sge, Wr};

fn arena() -> Vec<u8> {
    (0..ARENA).map(|i| i as u8).collect()
}

fn write(arena: &[u8], len: u32) -> Wr {
    Wr {
        wr_id: 7,
        op: Op::Write {
            raddr: 0x1000,
            rkey: 0x55,
        },
        sges: vec![Sge {
            addr: arena.as_ptr() as u64,
            len,
            lkey: 9,
        }],
        inline: true,
        signaled: true,
        solicited: false,
        fence: false,
        ud: None,
    }
}

fn rc(wqe_cnt: u32, max_wqebbs: u32, max_inline: u32, max_post: u32, start_pi: u32) -> SqConfig {
    SqConfig {
        wqe_cnt,
        start_pi,
        max_wqebbs,
        max_inline,
        max_post,
        qp_type: ibv::QPT_RC,
        qpn: 0x4242,
        sq_sig_all: false,
        prefer_bf: true,
        auto_signal: 0,
        split: 0,
    }
}

/// An inline payload one byte over `max_inline`, first in its list: both
/// refuse it, nothing is published; our ring is untouched too, where
/// libmlx5 has written the WQE's first segments into it (not rung).
#[test]
fn inline_one_over_max_inline_is_refused_by_both() {
    if !oracle_or_skip("inline_one_over_max_inline_is_refused_by_both") {
        return;
    }
    let a = arena();
    for (max_wqebbs, max_inline) in [(1, 28), (2, 92), (4, 220), (16, 972)] {
        let cfg = rc(64, max_wqebbs, max_inline, 64 / max_wqebbs, 0xfffe);
        let wrs = [write(&a, max_inline + 1), write(&a, 4)];
        let mut ours = SqMem::new(&cfg, 1, 64);
        let mut theirs = SqMem::new(&cfg, 1, 64);
        let (o, refused) = post_ours(&cfg, &mut ours, &wrs, &a);
        let (t, err) = post_theirs(&cfg, &mut theirs, &wrs);
        assert_eq!(
            (o.refused_at, t.refused_at),
            (0, 0),
            "max_inline {max_inline}"
        );
        assert!(
            matches!(refused, Some(WqeError::InlineTooLong { .. })),
            "{refused:?}"
        );
        assert_eq!(err, libc_enomem());
        for out in [&o, &t] {
            assert_eq!(out.pi, cfg.start_pi, "nothing posted");
            assert_eq!(out.dbrec, [0; 4], "no doorbell record");
            assert!(out.bf.iter().all(|&b| b == 0), "no BlueFlame write");
        }
        let untouched = ours
            .ring
            .bytes()
            .iter()
            .enumerate()
            .all(|(i, &b)| b == pattern(1, i));
        assert!(untouched, "our ring is written on a refusal");
        let theirs_touched = theirs
            .ring
            .bytes()
            .iter()
            .enumerate()
            .any(|(i, &b)| b != pattern(1, i));
        assert!(
            theirs_touched,
            "libmlx5 wrote no ctrl bytes before refusing: docs/prm.md says it does"
        );
    }
}

fn libc_enomem() -> i32 {
    12
}

/// `max_post` WRs, then one more in the same list: both take the first
/// `max_post`, write the same bytes and ring once, and refuse the rest.
#[test]
fn the_wr_limit_refuses_the_same_wr() {
    if !oracle_or_skip("the_wr_limit_refuses_the_same_wr") {
        return;
    }
    let a = arena();
    for seed in 0..200u64 {
        let mut s = Rng(seed);
        let mut cfg = gen::sq_config(&mut s);
        cfg.max_post = cfg.max_post.min(63);
        let mut wrs = Vec::new();
        while wrs.len() < cfg.max_post as usize + 1 {
            wrs.push(gen::wr(&mut s, &cfg, a.as_ptr() as u64));
        }
        let reach = cfg.wqe_cnt;
        let mut ours = SqMem::new(&cfg, seed, reach);
        let mut theirs = SqMem::new(&cfg, seed, reach);
        let (o, refused) = post_ours(&cfg, &mut ours, &wrs, &a);
        let (t, err) = post_theirs(&cfg, &mut theirs, &wrs);
        assert!(
            matches!(refused, Some(WqeError::WrLimit { .. })),
            "seed {seed}: {refused:?}"
        );
        assert_eq!(err, libc_enomem(), "seed {seed}");
        assert_eq!(
            (o.refused_at, t.refused_at),
            (cfg.max_post as usize, cfg.max_post as usize)
        );
        assert_eq!((o.pi, o.dbrec), (t.pi, t.dbrec), "seed {seed}");
        let ring_t = theirs.ring.bytes();
        let allowed = allowed_bytes(
            ring_t,
            cfg.wqe_cnt,
            cfg.start_pi,
            t.pi,
            cfg.qp_type == ibv::QPT_UD,
        );
        let d = ring_diffs(ours.ring.bytes(), ring_t, &allowed);
        assert!(
            d.is_empty(),
            "seed {seed}: the rings differ: {:?}",
            &d[..d.len().min(4)]
        );
    }
}

/// A WQE that does not fit the WQEBBs left: ours refuses it
/// (`QueueFull`) and writes nothing; libmlx5, whose WR limit was set
/// larger than the ring holds, writes it over the oldest outstanding WQE.
/// rdma-core never sets such a limit (`max_post = wq_size /
/// max_wqe_size`), so on a QP it made the case cannot arise there.
#[test]
fn a_wqe_over_the_free_wqebbs_is_refused_by_ours_alone() {
    if !oracle_or_skip("a_wqe_over_the_free_wqebbs_is_refused_by_ours_alone") {
        return;
    }
    let a = arena();
    // 4 WQEBBs; WRs of 2 WQEBBs (inline of 60 bytes); a WR limit of 4.
    let cfg = rc(4, 2, 92, 4, 0);
    let wrs: Vec<Wr> = (0..3).map(|_| write(&a, 60)).collect();
    let mut ours = SqMem::new(&cfg, 3, 4);
    let mut theirs = SqMem::new(&cfg, 3, 4);
    let (o, refused) = post_ours(&cfg, &mut ours, &wrs, &a);
    let (t, err) = post_theirs(&cfg, &mut theirs, &wrs);
    assert_eq!(o.refused_at, 2);
    assert!(
        matches!(refused, Some(WqeError::QueueFull { need: 2, free: 0 })),
        "{refused:?}"
    );
    assert_eq!((t.refused_at, err), (3, 0), "libmlx5 counts WRs only");
    assert_eq!(t.pi, 6, "libmlx5 wrote a third WQE over the first");
    assert_eq!(o.pi, 4);
}
