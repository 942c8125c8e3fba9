//! What each of `bench`, `conformance` and `devices` does with its parsed
//! arguments (`main` dispatches the others straight to their engines in
//! `tools/`), and the `--server` listener bench and conformance share.

mod bench;
mod conformance;
mod devices;

pub use bench::run_bench;
pub use conformance::conformance;
pub use devices::devices;

/// The listener of a `--server`, bound before it says it waits.
///
/// Errors: [`rdma_direct::exchange::Listener::bind`]'s; a port in use
/// (an [`rdma_direct::Error::Invalid`]) says to pick another with `-p`.
fn listen(port: u16) -> rdma_direct::Result<rdma_direct::exchange::Listener> {
    if port == 0 {
        return Err(rdma_direct::Error::Invalid(
            "TCP port 0 is not a port a client can be told: pick one with -p".into(),
        ));
    }
    rdma_direct::exchange::Listener::bind(port).map_err(|e| match e {
        rdma_direct::Error::Invalid(m) => {
            rdma_direct::Error::Invalid(format!("{m}: pick another with -p"))
        }
        e => e,
    })
}
