//! What the split-QP tests (`split_qps.rs`, `split_qps_lifetimes.rs`)
//! share: QP pairs, shared-CQ drains, wr_id lists.
#![allow(dead_code)]

use super::support::*;
use rdma_direct::*;

pub const QKEY: u32 = 0x1234;

pub fn cfg(send: u32, recv: u32) -> QpConfig {
    QpConfig {
        max_send_wr: send,
        max_recv_wr: recv,
        ..QpConfig::default()
    }
}

pub fn pair(pd: &Pd, c: &QpConfig) -> (Qp, Qp) {
    let mut a = pd.create_qp(c).unwrap();
    let mut b = pd.create_qp(c).unwrap();
    Qp::connect_loopback(&mut a, &mut b).unwrap();
    (a, b)
}

pub fn drain_cq(cq: &mut SharedCq) -> Vec<Completion> {
    drain_with(|wc| cq.poll(wc))
}

/// Polls `cq` until `n` completions came (or PATIENCE).
pub fn poll_shared_n(cq: &mut SharedCq, n: usize) -> Vec<Completion> {
    poll_n_with(|wc| cq.poll(wc), n)
}

pub fn ids(c: &[Completion]) -> Vec<u64> {
    c.iter().map(|c| c.wr_id).collect()
}
