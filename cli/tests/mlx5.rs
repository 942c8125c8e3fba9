//! Real ConnectX hardware: the conformance suite on the direct path
//! (`mlx5dv_create_qp` + `mlx5dv_init_obj` + our ring driver), then a short
//! write_lat on the direct path and on verbs for comparison.
//!
//! Runs only when `RDMA_DIRECT_MLX5_DEVICE` names the device (e.g. `mlx5_0`);
//! otherwise it says loudly on stderr that it skips and why, with the
//! `SKIPPED:` marker that `scripts/test` and `.ci/run` count as a skip (cargo
//! itself reports the test as passed).

// The two engines of `src/tools` the suite needs, compiled into this crate.
#[allow(dead_code, unused_imports)]
#[path = "../src/tools"]
mod tools {
    pub mod bench;
    pub mod conformance;
}

use rdma_direct::{Backend, Context};
use tools::bench::{run_lat, LatConfig, LatTest};
use tools::conformance::{cases, Outcome};

fn loud(msg: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{msg}");
}

#[test]
fn conformance_and_latency_on_mlx5_hardware() {
    let Ok(dev) = std::env::var("RDMA_DIRECT_MLX5_DEVICE") else {
        loud(format_args!(
            "mlx5: conformance_and_latency_on_mlx5_hardware: SKIPPED: RDMA_DIRECT_MLX5_DEVICE is not set \
             (set it to a ConnectX device name such as mlx5_0 to run the hardware tests)"
        ));
        return;
    };
    let ctx = Context::open(&dev).unwrap_or_else(|e| panic!("open {dev}: {e}"));
    assert_eq!(
        ctx.data_path(),
        rdma_direct::DataPath::Direct,
        "{dev} is not driven by the direct path (mlx5dv_is_supported is false?)"
    );
    drop(ctx);
    let mut failed = Vec::new();
    for c in cases() {
        match c.run(&dev) {
            Ok(Outcome::Passed(_)) => {}
            Ok(Outcome::Skipped(why)) => {
                loud(format_args!("mlx5: {dev}: {}: SKIPPED: {why}", c.name))
            }
            Err(f) => failed.push(format!("{}: {f}", c.name)),
        }
    }
    assert!(failed.is_empty(), "{dev}:\n{}", failed.join("\n"));
    for backend in [Backend::Direct, Backend::Verbs] {
        let cfg = LatConfig {
            device: dev.clone(),
            iters: 1000,
            backend,
            ..Default::default()
        };
        let (_, r) = run_lat(LatTest::Write, &cfg).unwrap_or_else(|e| panic!("{backend:?}: {e}"));
        loud(format_args!(
            "mlx5: {dev} write_lat {backend:?}: t_typical {:.2} us, post {:.1} ns/WR, poll {:.1} ns/CQE",
            r.t_typical, r.cpu.post_ns, r.cpu.poll_ns
        ));
    }
}
