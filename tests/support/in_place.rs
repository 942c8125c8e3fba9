//! Helpers of the in-place post tests (`posting_in_place.rs`,
//! `completions_in_place.rs`): a QP config, a refusal that writes nothing.
#![allow(dead_code)]

use rdma_direct::testing::QpHooks;
use rdma_direct::*;

#[path = "sim.rs"]
mod sim;
pub use sim::*;

pub fn cfg(send: u32, recv: u32) -> QpConfig {
    QpConfig {
        max_send_wr: send,
        max_recv_wr: recv,
        ..QpConfig::default()
    }
}

/// Refused, nothing written.
pub fn refused(qp: &mut Qp, wrs: &[SendWr<'_>]) -> Error {
    let before = qp.sq_snapshot().unwrap();
    let e = qp.post_send(wrs).expect_err("must be refused");
    assert_eq!(
        before,
        qp.sq_snapshot().unwrap(),
        "refusal wrote ring bytes: {e}"
    );
    e
}
