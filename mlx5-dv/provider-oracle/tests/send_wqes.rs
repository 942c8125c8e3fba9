//! Send WQEs against libmlx5's `mlx5_post_send`: the same generated WR
//! lists posted through our driver and through the provider over
//! identical rings, every byte of the ring compared (but those
//! docs/prm.md's table allows), the doorbell record, the BlueFlame
//! registers and the producer index after the list.
// Needs the oracle linked: without it `oracle_linked.rs` says SKIPPED.
#![cfg(provider_oracle)]

use mlx5_provider_oracle::gen::{self, Rng, Source, ARENA};
use mlx5_provider_oracle::send::{differences, post_ours, SqMem};
use mlx5_provider_oracle::wr::{Op, Wr};
use mlx5_provider_oracle::{cases, oracle_or_skip};
use proptest::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

static LISTS: AtomicU64 = AtomicU64::new(0);
static WRS: AtomicU64 = AtomicU64::new(0);
static WQEBBS: AtomicU64 = AtomicU64::new(0);

fn one_case(seed: u64) -> Result<(), String> {
    let mut s = Rng(seed);
    let cfg = gen::sq_config(&mut s);
    let mut arena = vec![0u8; ARENA];
    for b in arena.iter_mut() {
        *b = s.next_u64() as u8;
    }
    let wrs = gen::wr_list(&mut s, &cfg, arena.as_ptr() as u64);
    let (bad, wqebbs) = differences(&cfg, &wrs, None, &arena, seed);
    WQEBBS.fetch_add(wqebbs as u64, Relaxed);
    LISTS.fetch_add(1, Relaxed);
    WRS.fetch_add(wrs.len() as u64, Relaxed);
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{cfg:?}\n{} WRs, first {:?}\n{}",
            wrs.len(),
            wrs.first(),
            bad.join("\n")
        ))
    }
}

#[test]
fn generated_wr_lists_write_the_rings_libmlx5_writes() {
    if !oracle_or_skip("generated_wr_lists_write_the_rings_libmlx5_writes") {
        return;
    }
    mlx5_provider_oracle::ffi::check_abi().unwrap();
    let n = cases(2_000);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let r = runner.run(&any::<u64>(), |seed| {
        one_case(seed).map_err(TestCaseError::fail)
    });
    mlx5_provider_oracle::say(
        "generated_wr_lists_write_the_rings_libmlx5_writes",
        format_args!(
            "{} WR lists ({} WRs, {} WQEBBs) compared with mlx5_post_send",
            LISTS.load(Relaxed),
            WRS.load(Relaxed),
            WQEBBS.load(Relaxed)
        ),
    );
    if let Err(e) = r {
        panic!("{e}");
    }
}

/// The comparison sees a one-bit change of any field of any WR: a test
/// that could not fail would prove nothing.
#[test]
fn a_wr_changed_on_one_side_is_a_difference() {
    if !oracle_or_skip("a_wr_changed_on_one_side_is_a_difference") {
        return;
    }
    let mut caught = 0;
    for seed in 0..200u64 {
        let mut s = Rng(seed);
        let cfg = gen::sq_config(&mut s);
        let mut arena = vec![0u8; ARENA];
        for b in arena.iter_mut() {
            *b = s.next_u64() as u8;
        }
        let wrs = gen::wr_list(&mut s, &cfg, arena.as_ptr() as u64);
        let mut changed = wrs.clone();
        let w = &mut changed[s.range(0, wrs.len() as u64 - 1) as usize];
        match s.range(0, 3) {
            0 => w.solicited = !w.solicited,
            1 => w.fence = !w.fence,
            2 if !w.inline && w.sges.iter().any(|g| g.len != 0) => {
                let g = w.sges.iter_mut().find(|g| g.len != 0).unwrap();
                g.lkey ^= 1 << s.range(0, 31);
            }
            _ => w.signaled = !w.signaled,
        }
        if cfg.sq_sig_all && changed == wrs {
            continue;
        }
        let (bad, _) = differences(&cfg, &wrs, Some(&changed), &arena, seed);
        let signal_only = cfg.sq_sig_all
            && wrs.iter().zip(&changed).all(|(a, b)| {
                Wr {
                    signaled: a.signaled,
                    ..b.clone()
                } == *a
            });
        assert!(
            signal_only || !bad.is_empty(),
            "seed {seed}: a changed WR went unnoticed"
        );
        caught += !bad.is_empty() as u32;
    }
    assert!(caught > 150, "only {caught} of 200 changes caught");
}

/// A SEND with invalidate's rkey changed on our side only, by one bit or
/// by its byte order (the host-order `invalidate_rkey` libmlx5 writes
/// with `htobe32`), is a difference: the generated lists' agreement on
/// SEND_INV is not for want of looking at the ctrl immediate.
#[test]
fn an_invalidate_rkey_changed_on_one_side_is_a_difference() {
    if !oracle_or_skip("an_invalidate_rkey_changed_on_one_side_is_a_difference") {
        return;
    }
    let mut tried = 0;
    for seed in 0..400u64 {
        let mut s = Rng(seed);
        let cfg = gen::sq_config(&mut s);
        let mut arena = vec![0u8; ARENA];
        for b in arena.iter_mut() {
            *b = s.next_u64() as u8;
        }
        let wrs = gen::wr_list(&mut s, &cfg, arena.as_ptr() as u64);
        let Some(k) = wrs.iter().position(|w| matches!(w.op, Op::SendInv { .. })) else {
            continue;
        };
        let Op::SendInv { rkey } = wrs[k].op else {
            unreachable!()
        };
        let (bad, _) = differences(&cfg, &wrs, None, &arena, seed);
        assert!(bad.is_empty(), "seed {seed}: {bad:?}");
        let flipped = rkey ^ 1 << s.range(0, 31);
        let swapped = rkey.swap_bytes();
        for other in [flipped, swapped].into_iter().filter(|&r| r != rkey) {
            let mut changed = wrs.clone();
            changed[k].op = Op::SendInv { rkey: other };
            let (bad, _) = differences(&cfg, &wrs, Some(&changed), &arena, seed);
            assert!(
                !bad.is_empty(),
                "seed {seed}: rkey {rkey:#x} as {other:#x} on our side went unnoticed"
            );
            tried += 1;
        }
    }
    assert!(tried > 100, "only {tried} SEND_INV WRs changed");
}

/// Our auto-signal (a CQE forced on the WR that follows `period - 1`
/// unsignaled ones, so unsignaled WQEs cannot fill the SQ for good; the
/// provider has none) is the only difference when it is on: the WRs it
/// picks, marked signaled for the provider, give the same rings.
#[test]
fn auto_signal_only_sets_cq_update_on_the_wrs_it_picks() {
    if !oracle_or_skip("auto_signal_only_sets_cq_update_on_the_wrs_it_picks") {
        return;
    }
    let mut forced_total = 0;
    for seed in 0..500u64 {
        let mut s = Rng(seed);
        let mut cfg = gen::sq_config(&mut s);
        cfg.sq_sig_all = false;
        cfg.auto_signal = s.range(1, 8) as u32;
        let mut arena = vec![0u8; ARENA];
        for b in arena.iter_mut() {
            *b = s.next_u64() as u8;
        }
        let wrs = gen::wr_list(&mut s, &cfg, arena.as_ptr() as u64);
        // The rule: forced when `period - 1` unsignaled WRs precede it
        // since the last signaled one (or the queue's start).
        let mut expect = Vec::new();
        let mut since = 0u32;
        for (i, w) in wrs.iter().enumerate() {
            if w.signaled {
                since = 0;
            } else if since >= cfg.auto_signal - 1 {
                expect.push(i);
                since = 0;
            } else {
                since += 1;
            }
        }
        // What ours did: byte 11 of each WQE's ctrl segment.
        let reach = (wrs.len() as u32 * cfg.max_wqebbs).min(cfg.wqe_cnt);
        let mut mem = SqMem::new(&cfg, seed, reach);
        let (o, refused) = post_ours(&cfg, &mut mem, &wrs, &arena);
        assert!(refused.is_none(), "seed {seed}: {refused:?}");
        let ring = mem.ring.bytes();
        let mut idx = cfg.start_pi;
        let mut forced = Vec::new();
        for (i, w) in wrs.iter().enumerate() {
            let at = (idx & (cfg.wqe_cnt - 1)) as usize * 64;
            if !w.signaled && ring[at + 11] & 0x08 != 0 {
                forced.push(i);
            }
            idx = idx.wrapping_add(((ring[at + 7] & 0x3f) as u32 * 16).div_ceil(64));
        }
        assert_eq!(idx, o.pi, "seed {seed}: walked the WQEs");
        assert_eq!(forced, expect, "seed {seed}: period {}", cfg.auto_signal);
        forced_total += forced.len();
        let mut theirs = wrs.clone();
        for &i in &forced {
            theirs[i].signaled = true;
        }
        let (bad, _) = differences(&cfg, &theirs, Some(&wrs), &arena, seed);
        assert!(bad.is_empty(), "seed {seed}:\n{}", bad.join("\n"));
    }
    assert!(
        forced_total > 100,
        "auto-signal forced only {forced_total} CQEs"
    );
}
