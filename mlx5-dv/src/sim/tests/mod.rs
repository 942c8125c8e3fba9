//! Sim unit tests driven through the ring driver, synchronously: the
//! helpers every subject shares here, the tests in a file per subject.

mod compression;
mod cq;
mod execution;
mod odp;
mod qp_lifecycle;
mod scatter;
mod send_inv;
mod send_queue;
mod windows;

use super::*;
use crate::driver::{CompletionQueue, SendQueue};
use crate::prm::{CqeOpcode, CtrlFlags, Syndrome, WqeOpcode};
use crate::wqe::{DataSeg, Payload, RemoteSeg, SendWqe};

/// The protection domain every test object lives in.
const PD: u32 = 7;

struct Side {
    qp: Qp,
    _cq: Cq,
    sq: SendQueue,
    cqp: CompletionQueue,
}

fn pair(dev: &Device) -> (Side, Side) {
    let mk = || {
        let cq = dev.create_cq(16, 64).unwrap();
        let qp = dev.create_qp(PD, &cq, 8).unwrap();
        // SAFETY: the descriptions come from the sim and stay valid while the
        // Side keeps qp and cq; the drivers touch ring memory only when called.
        let sq = unsafe { SendQueue::new(&qp.dv(), qp.qpn(), 128, 4) }.unwrap();
        // SAFETY: a description from a live sim object the test keeps longer than the driver; the
        // driver touches ring memory only when called.
        let cqp = unsafe { CompletionQueue::new(&cq.dv()) }.unwrap();
        Side {
            qp,
            _cq: cq,
            sq,
            cqp,
        }
    };
    let (a, b) = (mk(), mk());
    for (x, y) in [(&a, &b), (&b, &a)] {
        x.qp.to_init(Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        x.qp.to_rtr(y.qp.qpn()).unwrap();
        x.qp.to_rts().unwrap();
    }
    (a, b)
}

fn write_wqe<'a>(payload: Payload<'a>, raddr: u64, rkey: u32) -> SendWqe<'a> {
    SendWqe {
        datagram: None,
        masked: None,
        atomic: None,
        opcode: WqeOpcode::RDMA_WRITE,
        flags: CtrlFlags::CQ_UPDATE,
        imm: 0,
        remote: Some(RemoteSeg { addr: raddr, rkey }),
        payload,
    }
}

fn pair_with(dev: &Device, sq_wqebbs: u32, max_post: u32) -> (Side, Side) {
    let mk = || {
        let cq = dev.create_cq(64, 64).unwrap();
        let qp = dev.create_qp(PD, &cq, sq_wqebbs).unwrap();
        // SAFETY: as in `pair`.
        let sq = unsafe { SendQueue::new(&qp.dv(), qp.qpn(), 128, max_post) }.unwrap();
        // SAFETY: a description from a live sim object the test keeps longer than the driver; the
        // driver touches ring memory only when called.
        let cqp = unsafe { CompletionQueue::new(&cq.dv()) }.unwrap();
        Side {
            qp,
            _cq: cq,
            sq,
            cqp,
        }
    };
    let (a, b) = (mk(), mk());
    for (x, y) in [(&a, &b), (&b, &a)] {
        x.qp.to_init(Access::QP_ALL).unwrap();
        x.qp.to_rtr(y.qp.qpn()).unwrap();
        x.qp.to_rts().unwrap();
    }
    (a, b)
}

/// A signaled SEND gathering `sge`.
fn send_wqe(sge: &[DataSeg]) -> SendWqe<'_> {
    SendWqe {
        datagram: None,
        masked: None,
        atomic: None,
        opcode: WqeOpcode::SEND,
        flags: CtrlFlags::CQ_UPDATE,
        imm: 0,
        remote: None,
        payload: Payload::Sges(sge),
    }
}

/// Steps the sim until `done` holds or `limit` passes.
fn process_until(dev: &Device, limit: std::time::Duration, mut done: impl FnMut() -> bool) -> bool {
    let t = std::time::Instant::now();
    while t.elapsed() < limit {
        dev.process();
        if done() {
            return true;
        }
        std::thread::yield_now();
    }
    false
}
