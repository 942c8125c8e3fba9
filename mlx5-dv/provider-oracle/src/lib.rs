//! rdma-core's own mlx5 provider as a differential oracle for mlx5-dv.
//!
//! `scripts/provider-oracle` compiles libmlx5's data path
//! (`providers/mlx5/qp.c`, `cq.c`, `srq.c` of rdma-core v59, unchanged)
//! with a harness of ours (`harness/harness.c`: fake provider objects over
//! memory we own) into one static library. Built with
//! `RDMA_DIRECT_PROVIDER_ORACLE` naming its folder, this crate links it,
//! and its tests feed the same work requests to `mlx5_post_send` /
//! `mlx5_post_recv` / `mlx5_post_srq_recv` and to our ring driver, and the
//! same CQEs to `mlx5_poll_cq_v1` and to our poller, and compare the rings,
//! doorbell records, BlueFlame registers and completions byte for byte.
//! What legitimately differs is one table, `docs/prm.md` "rdma-core's
//! provider as the oracle"; [`send::Allowed`] is that table in code.
//!
//! Without the library every test says `SKIPPED:` on stderr (counted as a
//! skip by `scripts/summarise`); `RDMA_DIRECT_REQUIRE_ORACLE=1` makes that
//! a failure, as `.ci/run` sets it.
//!
//! - [`mem`]: aligned, zeroed memory the rings live in.
//! - [`ffi`]: the harness's C entry points and their `#[repr(C)]` mirrors.
//! - [`gen`]: generated send queues and WR lists (property tests, fuzzing).
//! - [`provider`]: work requests in the harness's form.
//! - [`wr`]: a work request in one form, turned into the provider's
//!   `ibv_send_wr` and into our driver's `SendWqe`.
//! - [`recv`]: RQs and SRQs of ours and the provider's.
//! - [`send`]: an SQ of ours and one of the provider's over identical
//!   rings, and the comparison.
//! - [`mw`]: memory-window WQEs (UMR): binds and `LOCAL_INV` through
//!   `mlx5_post_send` and `mlx5_bind_mw`, mixed with plain WRs, and the
//!   comparison.
//! - [`dc`]: DC WQEs: a DCI of ours and one of the provider's, driven
//!   through libmlx5's `ibv_wr_*` / `mlx5dv_wr_*` builders
//!   (`harness/dc.c`), and the comparison.

pub mod cqe;
pub mod dc;
#[cfg(provider_oracle)]
pub mod ffi;
pub mod gen;
pub mod mem;
pub mod mw;
#[cfg(provider_oracle)]
pub mod provider;
#[cfg(provider_oracle)]
pub mod recv;
pub mod send;
pub mod wr;

/// Whether the oracle is linked. If not, says so on stderr with the
/// `SKIPPED:` marker and returns `false`, or panics when
/// `RDMA_DIRECT_REQUIRE_ORACLE=1` (a missing oracle is then a failure).
pub fn oracle_or_skip(test: &str) -> bool {
    if cfg!(provider_oracle) {
        return true;
    }
    let why = "rdma-core's provider oracle is not linked: RDMA_DIRECT_PROVIDER_ORACLE was unset, \
               or named no libmlx5_provider_oracle.a, when this crate was built (docs/testing.md, \"rdma-core's own provider as the \
               oracle\", has the three commands that build it and run these tests with it)";
    if std::env::var("RDMA_DIRECT_REQUIRE_ORACLE").as_deref() == Ok("1") {
        panic!("provider-oracle: {test}: {why}; RDMA_DIRECT_REQUIRE_ORACLE=1 makes this a failure");
    }
    // Straight to stderr, past libtest's capture, so that a passing
    // test's skip is seen (and counted by scripts/summarise).
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "provider-oracle: {test}: SKIPPED: {why}");
    false
}

/// Prints `provider-oracle: TEST: MSG` on stderr, past libtest's capture:
/// what a test compared, seen whether or not it passes.
pub fn say(test: &str, msg: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "provider-oracle: {test}: {msg}");
}

/// How many generated cases a property test runs: `RDMA_DIRECT_ORACLE_CASES`,
/// else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("RDMA_DIRECT_ORACLE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// [`send::differences`] of `wrs` on `cfg` (the list posted to both sides
/// over rings holding `pattern(seed, ..)`), or `None` when the oracle is
/// not linked: for callers that cannot see this crate's `cfg` (the fuzz
/// target).
pub fn send_differences(
    cfg: &send::SqConfig,
    wrs: &[wr::Wr],
    arena: &[u8],
    seed: u64,
) -> Option<(Vec<String>, u32)> {
    #[cfg(provider_oracle)]
    return Some(send::differences(cfg, wrs, None, arena, seed));
    #[cfg(not(provider_oracle))]
    {
        let _ = (cfg, wrs, arena, seed);
        None
    }
}

/// rdma-core's provider driving the sim: `mlx5_post_send` into the sim's rings,
/// `mlx5_poll_cq_v1` over its CQEs (issue 27 item 5).
#[cfg(provider_oracle)]
pub mod sim_driven;
