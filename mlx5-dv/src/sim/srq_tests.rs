//! The sim's SRQ, driven by the ring driver: WQEs consumed in list order,
//! version-1 CQEs, out-of-order completion through the swap hook, the
//! limit event, a QP on an SRQ in ERR.

use super::*;
use crate::cqe::Cqe;
use crate::driver::{CompletionQueue, SendQueue, SharedReceiveQueue};
use crate::prm::{CqeOpcode, CtrlFlags, WqeOpcode};
use crate::wqe::{DataSeg, Payload, SendWqe};

const PD: u32 = 3;

struct Rig {
    dev: Device,
    _a: Qp,
    _acq: Cq,
    asq: SendQueue,
    b: Qp,
    bcq: Cq,
    bcqp: CompletionQueue,
    srq_ring: SharedReceiveQueue,
    srq: Srq,
    src: Vec<u8>,
    dst: Vec<u8>,
    ks: MrKeys,
    kd: MrKeys,
}

/// A sends to B; B's receives come from an SRQ of `max_wr` WQEs of 2 SGEs.
fn rig(max_wr: u32) -> Rig {
    let dev = Device::new();
    let acq = dev.create_cq(64, 64).unwrap();
    let bcq = dev.create_cq(64, 64).unwrap();
    let srq = dev.create_srq(PD, max_wr, 2).unwrap();
    let a = dev.create_qp(PD, &acq, 64).unwrap();
    let b = dev.create_qp_srq(PD, &bcq, 8, &srq).unwrap();
    assert_eq!(b.dv().rq.wqe_cnt, 0, "a QP on an SRQ has no RQ of its own");
    for (x, y) in [(&a, &b), (&b, &a)] {
        x.to_init(Access::LOCAL_WRITE).unwrap();
        x.to_rtr(y.qpn()).unwrap();
        x.to_rts().unwrap();
    }
    // SAFETY: the descriptions come from the sim objects the rig keeps
    // (dropped after the drivers: the test ends with the rig).
    let asq = unsafe { SendQueue::new(&a.dv(), a.qpn(), 64, 64) }.unwrap();
    // SAFETY: a description from a live sim object the test keeps longer than the driver; the
    // driver touches ring memory only when called.
    let bcqp = unsafe { CompletionQueue::new(&bcq.dv()) }.unwrap();
    // SAFETY: a description from a live sim object the test keeps longer than the driver; the
    // driver touches ring memory only when called.
    let srq_ring = unsafe { SharedReceiveQueue::new(&srq.dv(), 2) }.unwrap();
    let mut src: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
    let mut dst = vec![0u8; 4096];
    // SAFETY: the Vecs live in the rig, which outlives all device work.
    let ks = unsafe { dev.reg_mr(PD, src.as_mut_ptr(), 4096, Access::LOCAL_WRITE) }.unwrap();
    // SAFETY: the Vec outlives all device work on it, done only inside `dev.process()` calls while
    // it lives.
    let kd = unsafe { dev.reg_mr(PD, dst.as_mut_ptr(), 4096, Access::LOCAL_WRITE) }.unwrap();
    Rig {
        dev,
        _a: a,
        _acq: acq,
        asq,
        b,
        bcq,
        bcqp,
        srq_ring,
        srq,
        src,
        dst,
        ks,
        kd,
    }
}

impl Rig {
    fn send(&mut self, off: u64, len: u32) {
        let sge = [DataSeg {
            addr: self.src.as_ptr() as u64 + off,
            len,
            lkey: self.ks.lkey,
        }];
        let w = SendWqe {
            datagram: None,
            masked: None,
            atomic: None,
            opcode: WqeOpcode::SEND,
            flags: CtrlFlags::empty(),
            imm: 0,
            remote: None,
            payload: Payload::Sges(&sge),
        };
        self.asq.post(&w, 0).unwrap();
        self.asq.ring_doorbell();
        self.dev.process();
    }

    fn recv(&mut self, segs: &[(u64, u32)], wr_id: u64) -> u32 {
        let d: Vec<DataSeg> = segs
            .iter()
            .map(|&(off, len)| DataSeg {
                addr: self.dst.as_ptr() as u64 + off,
                len,
                lkey: self.kd.lkey,
            })
            .collect();
        let i = self.srq_ring.post(&d, wr_id).unwrap();
        self.srq_ring.ring_doorbell();
        i
    }

    /// B's CQEs written so far.
    fn cqes(&mut self) -> Vec<Cqe> {
        let mut v = Vec::new();
        while let Some(c) = self.bcqp.poll_one() {
            v.push(c);
        }
        self.bcqp.update_ci();
        v
    }
}

#[test]
fn sends_land_in_srq_wqes_in_list_order_with_version_1_cqes() {
    let mut r = rig(7);
    let slots = r.srq_ring.slots().clone();
    assert_eq!(r.recv(&[(0, 32), (32, 96)], 500), 0);
    assert_eq!(r.recv(&[(1024, 64)], 501), 1);
    r.send(0, 100);
    r.send(200, 16);
    let got = r.cqes();
    assert_eq!(got.len(), 2);
    let c = &got[0];
    assert_eq!(c.opcode, CqeOpcode::RESP_SEND);
    assert_eq!((c.wqe_counter, c.byte_cnt, c.qpn), (0, 100, r.b.qpn()));
    assert_eq!(got[1].wqe_counter, 1);
    assert_eq!(r.dst[..100], r.src[..100], "scattered over 32 + 96");
    assert_eq!(r.dst[1024..1040], r.src[200..216]);
    assert_eq!(slots.complete(0), Some(500));
    assert_eq!(slots.complete(1), Some(501));
    // The version-1 CQE's srqn_uidx (bytes 32..36) is the QP's user index.
    let raw = r.bcq.hook_read_cqe(0);
    let uidx = u32::from_be_bytes(raw[32..36].try_into().unwrap()) & 0xff_ffff;
    assert_eq!(uidx, r.b.user_index());
    assert_ne!(uidx, r.srq.srqn(), "not the SRQN: CQE version 1");
}

#[test]
fn swapped_receive_completions_relink_each_wqe_at_once() {
    let mut r = rig(3);
    let slots = r.srq_ring.slots().clone();
    r.b.hook_swap_recv_completions(true);
    for w in 0..3 {
        r.recv(&[(w * 64, 64)], 100 + w);
    }
    r.send(0, 8);
    assert!(r.cqes().is_empty(), "the first of a pair waits");
    r.send(8, 8);
    let got: Vec<u16> = r.cqes().iter().map(|c| c.wqe_counter).collect();
    assert_eq!(got, [1, 0]);
    assert_eq!(slots.complete(1), Some(101));
    assert_eq!(r.srq_ring.free(), 1, "WQE 1 is the host's again at once");
    assert_eq!(slots.complete(0), Some(100));
    assert_eq!(r.srq_ring.free(), 2);
    r.b.hook_swap_recv_completions(false);
}

#[test]
fn the_limit_event_is_raised_once_then_rearmed() {
    let mut r = rig(7);
    for w in 0..6 {
        r.recv(&[(w * 64, 64)], w);
    }
    r.srq.set_limit(4).unwrap();
    assert!(r.srq.set_limit(8).is_err(), "at most the WQEs less one");
    r.send(0, 8); // 5 left
    assert!(r.dev.take_async_events().is_empty());
    r.send(0, 8); // 4 left
    assert!(r.dev.take_async_events().is_empty());
    r.send(0, 8); // 3 left: fewer than 4
    assert_eq!(
        r.dev.take_async_events(),
        [AsyncEvent::SrqLimitReached { srqn: r.srq.srqn() }]
    );
    assert_eq!(r.srq.limit(), (0, 1), "disarmed");
    r.send(0, 8);
    assert!(r.dev.take_async_events().is_empty(), "once per arm");
    r.srq.set_limit(2).unwrap();
    r.send(0, 8); // 1 left
    assert_eq!(r.dev.take_async_events().len(), 1);
    assert_eq!(r.srq.limit(), (0, 2));
}

#[test]
fn a_qp_on_an_srq_in_err_leaves_its_wqes() {
    let mut r = rig(3);
    for w in 0..3 {
        r.recv(&[(w * 64, 64)], w);
    }
    r.b.to_err().unwrap();
    r.dev.process();
    assert!(
        r.cqes().is_empty(),
        "no receive flushed: the SRQ keeps them"
    );
    assert_eq!(r.srq_ring.slots().held(), 3);
}

#[test]
fn a_qp_on_an_unknown_srq_is_refused() {
    let dev = Device::new();
    let other = Device::new();
    let cq = dev.create_cq(4, 64).unwrap();
    let srq = other.create_srq(PD, 3, 1).unwrap();
    assert!(matches!(
        dev.create_qp_srq(PD, &cq, 8, &srq),
        Err(SimError::NoSuchSrq(_))
    ));
    assert!(dev.create_srq(PD, 0, 1).is_err());
    assert!(dev.create_srq(PD, 1, 64).is_err());
}
