//! Whether rdma-core's provider is linked into this crate: without it
//! this is the crate's one test, and it says `SKIPPED:` (or fails under
//! `RDMA_DIRECT_REQUIRE_ORACLE=1`) for every oracle test, which are then
//! not compiled (`#![cfg(provider_oracle)]`); with it, the harness's
//! structs and ours agree in size.

use mlx5_provider_oracle::oracle_or_skip;

#[test]
fn the_provider_oracle_is_linked() {
    let linked = oracle_or_skip(
        "every provider-oracle test (send_wqes, send_refusals, front_end, recv_wqes, cqes, sim_driven, dc_wqes, srq_odp_fault)",
    );
    #[cfg(provider_oracle)]
    if linked {
        mlx5_provider_oracle::ffi::check_abi().expect("the harness's structs and ours agree");
        mlx5_provider_oracle::ffi::check_dc_abi().expect("harness/dc.c's structs and ours agree");
    }
    let _ = linked;
}
