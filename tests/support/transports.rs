//! What the transport and SRQ tests (`transports.rs`, `srq.rs`) share: UD
//! and UC configs and pairs, a UD destination, a shared-CQ drain, and a
//! patient wait.
#![allow(dead_code)]

use super::support::*;
use rdma_direct::*;
use std::time::{Duration, Instant};

pub const QKEY: u32 = 0x1234;

pub fn ud_cfg() -> QpConfig {
    QpConfig {
        qp_type: QpType::Ud,
        ..QpConfig::default()
    }
}

pub fn uc_cfg() -> QpConfig {
    QpConfig {
        qp_type: QpType::Uc,
        ..QpConfig::default()
    }
}

/// Two UD QPs in RTS with qkey [`QKEY`], and an AH from `a` to `b`.
pub fn ud_pair(pd: &Pd) -> (Qp, Qp, Ah) {
    let (mut a, mut b) = (
        pd.create_qp(&ud_cfg()).unwrap(),
        pd.create_qp(&ud_cfg()).unwrap(),
    );
    a.ready_ud(QKEY).unwrap();
    b.ready_ud(QKEY).unwrap();
    let ah = pd.create_ah(&a.av_to(&b.endpoint())).unwrap();
    (a, b, ah)
}

pub fn dest<'a>(ah: &'a Ah, qpn: u32) -> UdDest<'a> {
    UdDest {
        ah,
        remote_qpn: qpn,
        qkey: QKEY,
    }
}

pub fn drain_shared(cq: &mut SharedCq) -> Vec<Completion> {
    drain_with(|wc| cq.poll(wc))
}

/// Waits (up to PATIENCE) until `f` holds.
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < PATIENCE, "never: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

pub fn uc_pair(pd: &Pd) -> (Qp, Qp) {
    let mut a = pd.create_qp(&uc_cfg()).unwrap();
    let mut b = pd.create_qp(&uc_cfg()).unwrap();
    Qp::connect_loopback(&mut a, &mut b).unwrap();
    (a, b)
}
