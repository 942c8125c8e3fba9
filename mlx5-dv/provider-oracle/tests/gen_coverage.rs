//! What `gen` draws, counted over the seeds `send_wqes.rs` runs (0..N of
//! the same splitmix64 stream, not proptest's: the distribution is the
//! same): every case docs/prm.md says the send oracle covers must come up
//! often enough that 2,000 cases meet it. Needs no oracle.

use mlx5_dv::wqe::{wqe_size, SqGeometry};
use mlx5_provider_oracle::gen::{self, Rng, Source, ARENA};
use mlx5_provider_oracle::wr::{ibv, Op};
use std::collections::BTreeMap;

#[test]
fn the_generator_draws_every_case_docs_prm_md_claims() {
    let seeds = 20_000u64;
    let mut n: BTreeMap<&str, u64> = BTreeMap::new();
    let mut bump = |k: &'static str, yes: bool| *n.entry(k).or_default() += yes as u64;
    let mut rings = [0u64; 16];
    let mut ops: BTreeMap<(u32, &str), u64> = BTreeMap::new();
    for seed in 0..seeds {
        let mut s = Rng(seed);
        let cfg = gen::sq_config(&mut s);
        let arena: Vec<u8> = (0..ARENA).map(|_| s.next_u64() as u8).collect();
        let wrs = gen::wr_list(&mut s, &cfg, arena.as_ptr() as u64);
        rings[cfg.wqe_cnt.trailing_zeros() as usize] += 1;
        let geo = SqGeometry {
            wqe_cnt: cfg.wqe_cnt,
            qpn: cfg.qpn,
            max_inline: cfg.max_inline,
            max_wqebbs: cfg.max_wqebbs,
        };
        let mut wqebbs = 0u64;
        for (i, w) in wrs.iter().enumerate() {
            let (ds, bbs) = w
                .with_wqe(false, &arena, |wqe| wqe_size(&geo, wqe))
                .unwrap_or_else(|e| panic!("seed {seed}: {e:?}"));
            wqebbs += bbs as u64;
            let name = match w.op {
                Op::Send => "SEND",
                Op::SendImm { .. } => "SEND_IMM",
                Op::SendInv { .. } => "SEND_INV",
                Op::Write { .. } => "WRITE",
                Op::WriteImm { .. } => "WRITE_IMM",
                Op::Read { .. } => "READ",
                Op::CmpSwap { .. } => "CMP_SWAP",
                Op::FetchAdd { .. } => "FETCH_ADD",
            };
            *ops.entry((cfg.qp_type, name)).or_default() += 1;
            bump("a WQE of 63 DS", ds == 63);
            bump("a WQE reaching the ring's end", {
                let at = cfg.start_pi.wrapping_add(wqebbs as u32 - bbs) & (cfg.wqe_cnt - 1);
                at + bbs > cfg.wqe_cnt
            });
            bump("32 SGEs", !w.inline && w.sges.len() == 32);
            bump(
                "a zero-length SGE among others",
                !w.inline && w.sges.len() > 1 && w.sges.iter().any(|g| g.len == 0),
            );
            bump("inline of 0 bytes", w.inline && w.inline_len() == 0);
            bump(
                "inline of exactly max_inline",
                w.inline && w.inline_len() as u32 == cfg.max_inline && cfg.max_inline > 0,
            );
            bump("inline in 4 SGEs", w.inline && w.sges.len() == 4);
            bump(
                "fence right after a READ or atomic",
                w.fence
                    && i > 0
                    && matches!(
                        wrs[i - 1].op,
                        Op::Read { .. } | Op::CmpSwap { .. } | Op::FetchAdd { .. }
                    ),
            );
        }
        bump("a list of 64 WRs", wrs.len() == 64);
        bump("UD", cfg.qp_type == ibv::QPT_UD);
        let end = cfg.start_pi as u64 + wqebbs;
        bump(
            "a list crossing producer index 2^16",
            (cfg.start_pi as u64) < 1 << 16 && end > 1 << 16,
        );
        bump("a list crossing producer index 2^32", end > 1 << 32);
        bump("a single-WR list (BlueFlame copy)", wrs.len() == 1);
        bump("sq_sig_all", cfg.sq_sig_all);
    }
    eprintln!("gen: {seeds} lists: rings 2^k: {rings:?}");
    for (k, v) in &n {
        eprintln!("gen: {k}: {v} ({:.2}%)", *v as f64 * 100.0 / seeds as f64);
    }
    for ((t, op), v) in &ops {
        eprintln!("gen: qp type {t} {op}: {v}");
    }
    assert!(
        rings.iter().all(|&c| c > 0),
        "a ring size never drawn: {rings:?}"
    );
    for t in [ibv::QPT_RC, ibv::QPT_UC, ibv::QPT_UD] {
        let want: &[&str] = match t {
            ibv::QPT_RC => &[
                "SEND",
                "SEND_IMM",
                "SEND_INV",
                "WRITE",
                "WRITE_IMM",
                "READ",
                "CMP_SWAP",
                "FETCH_ADD",
            ],
            ibv::QPT_UC => &["SEND", "SEND_IMM", "SEND_INV", "WRITE", "WRITE_IMM"],
            _ => &["SEND", "SEND_IMM"],
        };
        for op in want {
            assert!(
                ops.get(&(t, *op)).copied().unwrap_or(0) > 0,
                "type {t}: no {op}"
            );
        }
    }
    // At least 1 in 1,000 lists (2 in send_wqes.rs's default 2,000).
    for (k, v) in &n {
        assert!(*v * 1000 >= seeds, "{k}: only {v} of {seeds} lists");
    }
}
