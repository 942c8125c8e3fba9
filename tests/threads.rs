//! What the docs promise about threads (crate docs, "Threads"), checked at
//! compile time; the `compile_fail` doc test there checks that a `Qp` is
//! not `Sync`.

use rdma_direct::{Context, Mr, Pd, Qp, SharedCq};

#[test]
fn thread_safety_is_as_documented() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Context>();
    send_sync::<Pd>();
    send_sync::<Mr>();
    send::<Qp>();
    send::<SharedCq>();
}
