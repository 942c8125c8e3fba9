//! Random send queues and WR lists, posted through our driver and through
//! rdma-core's own `mlx5_post_send` over identical rings: any difference
//! outside docs/prm.md's table is a crash. The input drives the same
//! generator as `mlx5-dv/provider-oracle/tests/send_wqes.rs`.
//!
//! Needs the oracle linked: `RDMA_DIRECT_PROVIDER_ORACLE` (printed by
//! `scripts/provider-oracle`) set when the target is built. Without it the
//! target says `SKIPPED:` once and checks nothing, or panics when
//! `RDMA_DIRECT_REQUIRE_ORACLE=1` (as .ci/run sets it).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mlx5_provider_oracle::gen::{self, Bytes, Source, ARENA};
use mlx5_provider_oracle::{oracle_or_skip, send_differences};
use std::sync::OnceLock;

static LINKED: OnceLock<bool> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    if !*LINKED.get_or_init(|| oracle_or_skip("fuzz provider_send")) {
        return;
    }
    let mut s = Bytes(data);
    let cfg = gen::sq_config(&mut s);
    let seed = s.next_u64();
    let arena: Vec<u8> = (0..ARENA).map(|i| (i as u64 ^ seed) as u8).collect();
    let wrs = gen::wr_list(&mut s, &cfg, arena.as_ptr() as u64);
    if let Some((bad, _)) = send_differences(&cfg, &wrs, &arena, seed) {
        assert!(bad.is_empty(), "{cfg:?}\n{wrs:?}\n{}", bad.join("\n"));
    }
});
