//! Layer 4: the tools, built on the library's public API only (they name it
//! `rdma_direct::`): the `rdma-direct` CLI's engines and the conformance
//! suite. None of this is part of the library: `src/main.rs` compiles it
//! into the binary, and `tests/conformance.rs` and `tests/mlx5.rs` compile
//! the two engines they need (`bench`, `conformance`) into their own test
//! crates with `#[path]`, so the suite runs under `cargo test` without the
//! library exporting it (`docs/architecture.md`, "Layers").

pub mod args;
pub mod bench;
pub mod codec;
pub mod compare;
pub mod conformance;
pub mod output;
pub mod progress;
pub mod report;
pub mod soak;

#[cfg(test)]
#[path = "bench/tests.rs"]
mod bench_tests;

#[cfg(test)]
#[path = "bench/remote/tests.rs"]
mod bench_remote_tests;
