//! Helpers of the in-place posts' hostile tests (`fast_paths*.rs`).
#![allow(dead_code)]

use rdma_direct::*;
use std::time::{Duration, Instant};

pub fn cfg(send: u32, recv: u32) -> QpConfig {
    QpConfig {
        max_send_wr: send,
        max_recv_wr: recv,
        ..QpConfig::default()
    }
}

pub fn remote(mr: &Mr, off: u64) -> RemoteAddr {
    RemoteAddr {
        addr: mr.addr() + off,
        rkey: mr.rkey(),
    }
}

pub struct Env {
    pub _ctx: Context,
    pub pd: Pd,
    pub src: Mr,
    pub dst: Mr,
}

pub fn env() -> Env {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let src = pd.reg_mr(1 << 16, Access::LOCAL_WRITE).unwrap();
    let dst = pd
        .reg_mr(
            1 << 16,
            Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
        )
        .unwrap();
    Env {
        _ctx: ctx,
        pd,
        src,
        dst,
    }
}

/// How long a test waits for the sim before it calls a wait stuck: long, as
/// the sim's device thread may get little CPU on a loaded machine.
pub const PATIENCE: Duration = Duration::from_secs(30);

pub fn poll_n(qp: &mut Qp, n: usize) -> Vec<Completion> {
    let mut got = Vec::new();
    let t = Instant::now();
    let mut wc = [Completion::default(); 16];
    while got.len() < n {
        let k = qp.poll(&mut wc).unwrap();
        got.extend_from_slice(&wc[..k]);
        if k == 0 {
            std::thread::yield_now();
        }
        assert!(
            t.elapsed() < PATIENCE,
            "timed out: {} of {n}: {got:?}",
            got.len()
        );
    }
    got
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
