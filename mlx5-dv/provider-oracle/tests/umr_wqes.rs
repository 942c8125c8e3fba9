//! Memory-window WQEs against libmlx5: generated lists mixing type-1 and
//! type-2 binds (0 to 2^31 bytes), `LOCAL_INV`s and plain WRs, posted
//! through our driver (`SendQueue::post_umr`, `post`) and through
//! `mlx5_post_send` (`IBV_WR_BIND_MW`, `IBV_WR_LOCAL_INV`) or
//! `mlx5_bind_mw`, over identical rings anywhere in the index space (so
//! the UMRs wrap at the ring's end); every ring byte compared but those
//! docs/prm.md's table allows, the doorbell record, the BlueFlame registers,
//! the producer index, and the small fence on the WQE after each UMR.
// Needs the oracle linked: without it `oracle_linked.rs` says SKIPPED.
#![cfg(provider_oracle)]

use mlx5_dv::wqe::MwType;
use mlx5_provider_oracle::gen::{Rng, Source, ARENA};
use mlx5_provider_oracle::mw::{case, differences, Bind, Item, Post};
use mlx5_provider_oracle::wr::{Op, Wr};
use mlx5_provider_oracle::{cases, oracle_or_skip, say};
use proptest::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

static LISTS: AtomicU64 = AtomicU64::new(0);
static UMRS: AtomicU64 = AtomicU64::new(0);
static BIND_MW: AtomicU64 = AtomicU64::new(0);
static WRAPPED: AtomicU64 = AtomicU64::new(0);

fn arena(s: &mut Rng) -> Vec<u8> {
    (0..ARENA).map(|_| s.next_u64() as u8).collect()
}

fn one_case(seed: u64) -> Result<(), String> {
    let mut s = Rng(seed);
    let arena = arena(&mut s);
    let (cfg, posts) = case(&mut s, arena.as_ptr() as u64);
    let (bad, wqebbs) = differences(&cfg, &posts, None, &arena, seed);
    LISTS.fetch_add(1, Relaxed);
    let items = posts.iter().flat_map(|p| &p.items);
    let umrs = items.filter(|i| !matches!(i, Item::Plain(_))).count();
    UMRS.fetch_add(umrs as u64, Relaxed);
    BIND_MW.fetch_add(
        posts.iter().filter(|p| p.via_bind_mw).count() as u64,
        Relaxed,
    );
    let start = cfg.start_pi & (cfg.wqe_cnt - 1);
    if start + wqebbs > cfg.wqe_cnt && umrs > 0 {
        WRAPPED.fetch_add(1, Relaxed);
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!("{cfg:?}\n{posts:?}\n{}", bad.join("\n")))
    }
}

#[test]
fn generated_memory_window_wqes_are_libmlx5s() {
    let name = "generated_memory_window_wqes_are_libmlx5s";
    if !oracle_or_skip(name) {
        return;
    }
    mlx5_provider_oracle::ffi::check_abi().unwrap();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        // (At most 30,000: CI asks every oracle test for 100,000.)
        cases: cases(3_000).min(30_000),
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let r = runner.run(&any::<u64>(), |seed| {
        one_case(seed).map_err(TestCaseError::fail)
    });
    say(
        name,
        format_args!(
            "{} lists ({} UMR WQEs, {} mlx5_bind_mw calls; {} lists wrapped at the ring end) compared",
            LISTS.load(Relaxed),
            UMRS.load(Relaxed),
            BIND_MW.load(Relaxed),
            WRAPPED.load(Relaxed)
        ),
    );
    if let Err(e) = r {
        panic!("{e}");
    }
    assert!(
        WRAPPED.load(Relaxed) > 50,
        "too few wrapped lists to mean anything"
    );
}

fn bind() -> Bind {
    Bind {
        wr_id: 7,
        mw_type: MwType::Two,
        mw_rkey: 0x1234_5601,
        new_rkey: 0x1234_5602,
        lkey: 0x99,
        addr: 0x7f00_0000_1000,
        len: 0x2000,
        access: 0b0110,
        signaled: true,
        fence: false,
    }
}

fn write(wr_id: u64) -> Wr {
    Wr {
        wr_id,
        op: Op::Write {
            raddr: 0x1000,
            rkey: 0x1234_5602,
        },
        sges: vec![mlx5_provider_oracle::wr::Sge {
            addr: 0x5000,
            len: 64,
            lkey: 0x99,
        }],
        inline: false,
        signaled: true,
        solicited: false,
        fence: false,
        ud: None,
    }
}

/// A bind in the ring's last WQEBB, then (in the next post) a WRITE: the
/// bind wraps to the ring's start, and the WRITE carries the small fence,
/// on both sides; a LOCAL_INV after it, the same.
#[test]
fn a_bind_that_wraps_and_the_write_after_it() {
    let name = "a_bind_that_wraps_and_the_write_after_it";
    if !oracle_or_skip(name) {
        return;
    }
    let mut s = Rng(1);
    let arena = arena(&mut s);
    let mut cfg = mlx5_provider_oracle::gen::sq_config(&mut s);
    (cfg.wqe_cnt, cfg.start_pi, cfg.max_wqebbs) = (8, 0x1_0007, 4);
    (cfg.max_post, cfg.qp_type, cfg.sq_sig_all) = (2, mlx5_provider_oracle::wr::ibv::QPT_RC, false);
    for prefer_bf in [false, true] {
        cfg.prefer_bf = prefer_bf;
        let posts = [
            Post {
                items: vec![Item::Bind(bind())],
                via_bind_mw: false,
            },
            Post {
                items: vec![Item::Plain(write(8))],
                via_bind_mw: false,
            },
        ];
        let (bad, wqebbs) = differences(&cfg, &posts, None, &arena, 1);
        assert!(bad.is_empty(), "prefer_bf {prefer_bf}: {bad:?}");
        assert_eq!(wqebbs, 4);
        let inv = [Post {
            items: vec![
                Item::LocalInv {
                    wr_id: 9,
                    rkey: 0x1234_5602,
                    signaled: true,
                    fence: false,
                },
                Item::Plain(write(10)),
            ],
            via_bind_mw: false,
        }];
        let (bad, wqebbs) = differences(&cfg, &inv, None, &arena, 1);
        assert!(bad.is_empty(), "prefer_bf {prefer_bf}: {bad:?}");
        assert_eq!(wqebbs, 3);
    }
    say(
        name,
        format_args!("a bind from index 7 of 8 and a LOCAL_INV, each with a WRITE after it, agree"),
    );
}

/// The comparison sees a change of any field of a bind on one side: a
/// test that could not fail would prove nothing.
#[test]
fn a_bind_changed_on_one_side_is_a_difference() {
    let name = "a_bind_changed_on_one_side_is_a_difference";
    if !oracle_or_skip(name) {
        return;
    }
    let mut s = Rng(2);
    let arena = arena(&mut s);
    let mut cfg = mlx5_provider_oracle::gen::sq_config(&mut s);
    (cfg.wqe_cnt, cfg.start_pi, cfg.max_wqebbs) = (16, 5, 4);
    (cfg.max_post, cfg.qp_type, cfg.sq_sig_all) = (4, mlx5_provider_oracle::wr::ibv::QPT_RC, false);
    let posts = [Post {
        items: vec![Item::Bind(bind()), Item::Plain(write(8))],
        via_bind_mw: false,
    }];
    let changes: [fn(&mut Bind); 8] = [
        |b| b.mw_type = MwType::One,
        |b| b.mw_rkey ^= 1 << 20,
        |b| b.new_rkey ^= 1,
        |b| b.lkey ^= 1 << 9,
        |b| b.addr ^= 1 << 40,
        |b| b.len = 0,
        |b| b.access ^= 8,
        |b| b.fence = true,
    ];
    for (k, change) in changes.iter().enumerate() {
        let mut mine = posts.clone();
        if let Item::Bind(b) = &mut mine[0].items[0] {
            change(b);
        }
        let (bad, _) = differences(&cfg, &posts, Some(&mine), &arena, 2);
        assert!(!bad.is_empty(), "change {k} went unnoticed");
    }
    // And the small fence: our WRITE asking for FENCE instead differs.
    let mut mine = posts.clone();
    if let Item::Plain(w) = &mut mine[0].items[1] {
        w.fence = true;
    }
    let (bad, _) = differences(&cfg, &posts, Some(&mine), &arena, 2);
    assert!(!bad.is_empty(), "FENCE for SMALL_FENCE went unnoticed");
    let (bad, _) = differences(&cfg, &posts, None, &arena, 2);
    assert!(bad.is_empty(), "{bad:?}");
    say(name, format_args!("9 one-sided changes, each caught"));
}
