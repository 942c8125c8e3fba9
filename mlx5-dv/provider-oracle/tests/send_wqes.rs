//! Send WQEs against libmlx5's `mlx5_post_send`: the same generated WR
//! lists posted through our driver and through the provider over
//! identical rings, every byte of the ring compared (but those
//! docs/prm.md's table allows), the doorbell record, the BlueFlame
//! registers and the producer index after the list.

use mlx5_provider_oracle::gen::{self, Rng, Source, ARENA};
use mlx5_provider_oracle::send::{
    allowed_bytes, post_ours, post_theirs, ring_diffs, SqConfig, SqMem,
};
use mlx5_provider_oracle::wr::{ibv, Wr};
use mlx5_provider_oracle::{cases, oracle_or_skip};
use proptest::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

static LISTS: AtomicU64 = AtomicU64::new(0);
static WRS: AtomicU64 = AtomicU64::new(0);
static WQEBBS: AtomicU64 = AtomicU64::new(0);

/// The ring bytes a list may touch, as (start, len) spans: the whole
/// ring when the list may reach around it, else its WQEBBs and one guard
/// WQEBB on each side.
fn spans(cfg: &SqConfig, reach: u32) -> Vec<(usize, usize)> {
    if reach >= cfg.wqe_cnt {
        return vec![(0, cfg.wqe_cnt as usize * 64)];
    }
    (0..reach + 2)
        .map(|k| {
            let idx = cfg.start_pi.wrapping_sub(1).wrapping_add(k) & (cfg.wqe_cnt - 1);
            (idx as usize * 64, 64)
        })
        .collect()
}

/// Posts `wrs` to both (`ours_wrs` to ours, when a test changes one side)
/// and returns what differs, described; empty when they agree.
fn compare(
    cfg: &SqConfig,
    wrs: &[Wr],
    ours_wrs: Option<&[Wr]>,
    arena: &[u8],
    seed: u64,
) -> Vec<String> {
    let reach = (wrs.len() as u32 * cfg.max_wqebbs).min(cfg.wqe_cnt);
    let mut ours = SqMem::new(cfg, seed, reach);
    let mut theirs = SqMem::new(cfg, seed, reach);
    let (o, refused) = post_ours(cfg, &mut ours, ours_wrs.unwrap_or(wrs), arena);
    let (t, err) = post_theirs(cfg, &mut theirs, wrs);
    let mut bad = Vec::new();
    if refused.is_some() || err != 0 {
        bad.push(format!(
            "a refusal: ours at {} ({refused:?}), theirs at {} (errno {err})",
            o.refused_at, t.refused_at
        ));
        return bad;
    }
    if o.pi != t.pi {
        bad.push(format!(
            "producer index: ours {:#x}, theirs {:#x}",
            o.pi, t.pi
        ));
    }
    if o.dbrec != t.dbrec {
        bad.push(format!(
            "doorbell record: ours {:02x?}, theirs {:02x?}",
            o.dbrec, t.dbrec
        ));
    }
    // BlueFlame: the first 8 bytes (the ctrl segment's first half of the
    // last WQE) always; the whole register when the provider copied the
    // WQE too (one WR, inline or prefer_bf, more than one DS, at most 256
    // bytes). Else our copy of the whole WQE is docs/prm.md's row
    // "BlueFlame copy of one WQE".
    let ring_t = theirs.ring.bytes();
    let ds = (ring_t[(cfg.start_pi & (cfg.wqe_cnt - 1)) as usize * 64 + 7] & 0x3f) as u32;
    let inline = wrs[0].inline && wrs[0].inline_len() > 0;
    let provider_copied = wrs.len() == 1 && (inline || cfg.prefer_bf) && ds > 1 && ds * 16 <= 256;
    let n = if provider_copied { o.bf.len() } else { 8 };
    // The copy carries the WQE's bytes, so the ring's allowed bytes are
    // allowed in it too (the register is written at offset 0: the first
    // doorbell of these queues).
    let allowed = allowed_bytes(
        ring_t,
        cfg.wqe_cnt,
        cfg.start_pi,
        t.pi,
        cfg.qp_type == ibv::QPT_UD,
    );
    let (ring_len, first) = (
        ring_t.len(),
        (cfg.start_pi & (cfg.wqe_cnt - 1)) as usize * 64,
    );
    let mut bf_o = o.bf.clone();
    let mut bf_t = t.bf.clone();
    for &(a, _) in &allowed {
        let rel = (a + ring_len - first) % ring_len;
        if rel < n {
            bf_o[rel] = 0;
            bf_t[rel] = 0;
        }
    }
    if bf_o[..n] != bf_t[..n] {
        bad.push(format!(
            "BlueFlame register (first {n} bytes): ours {:02x?}, theirs {:02x?}",
            &o.bf[..n.min(64)],
            &t.bf[..n.min(64)]
        ));
    }
    for (at, len) in spans(cfg, reach) {
        let allowed: Vec<_> = allowed
            .iter()
            .filter(|(a, _)| (at..at + len).contains(a))
            .map(|&(a, why)| (a - at, why))
            .collect();
        for d in ring_diffs(
            &ours.ring.bytes()[at..at + len],
            &ring_t[at..at + len],
            &allowed,
        ) {
            bad.push(format!(
                "ring byte {:#x} (WQEBB {}, byte {}): ours {:#04x}, theirs {:#04x}",
                at + d.at,
                (at + d.at) / 64,
                (at + d.at) % 64,
                d.ours,
                d.theirs
            ));
            if bad.len() > 12 {
                return bad;
            }
        }
    }
    WQEBBS.fetch_add(t.pi.wrapping_sub(cfg.start_pi) as u64, Relaxed);
    bad
}

fn one_case(seed: u64) -> Result<(), String> {
    let mut s = Rng(seed);
    let cfg = gen::sq_config(&mut s);
    let mut arena = vec![0u8; ARENA];
    for b in arena.iter_mut() {
        *b = s.next_u64() as u8;
    }
    let wrs = gen::wr_list(&mut s, &cfg, arena.as_ptr() as u64);
    let bad = compare(&cfg, &wrs, None, &arena, seed);
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
    eprintln!(
        "provider-oracle: send: {} WR lists ({} WRs, {} WQEBBs) compared with mlx5_post_send",
        LISTS.load(Relaxed),
        WRS.load(Relaxed),
        WQEBBS.load(Relaxed)
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
        let bad = compare(&cfg, &wrs, Some(&changed), &arena, seed);
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
