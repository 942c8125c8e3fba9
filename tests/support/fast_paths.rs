//! Helpers of the in-place posts' hostile tests (`fast_paths*.rs`).
#![allow(dead_code)]

use rdma_direct::*;
use std::time::{Duration, Instant};

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

pub fn drain(qp: &mut Qp) -> Vec<Completion> {
    let mut got = Vec::new();
    let mut wc = [Completion::default(); 16];
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(100) {
        let k = qp.poll(&mut wc).unwrap();
        got.extend_from_slice(&wc[..k]);
    }
    got
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
