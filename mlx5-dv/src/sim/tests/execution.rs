//! What a WQE does when the sim executes it: RDMA WRITE landing, the
//! protection and local errors (bad rkey, a wrapping SGE, a foreign QPN),
//! memory keys, the SE bit of a SEND, and the device thread.

use super::*;

#[test]
fn rdma_write_lands_and_completes() {
    let dev = Device::new();
    let (mut a, b) = pair(&dev);
    let mut src: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    let mut dst = vec![0u8; 4096];
    // SAFETY: the Vec outlives all device work on it, done only inside `dev.process()` calls while
    // it lives.
    let ks = unsafe { dev.reg_mr(PD, src.as_mut_ptr(), 4096, Access::LOCAL_WRITE) }.unwrap();
    // SAFETY: the Vec outlives all device work on it, done only inside `dev.process()` calls while
    // it lives.
    let kd = unsafe {
        dev.reg_mr(
            PD,
            dst.as_mut_ptr(),
            4096,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
    }
    .unwrap();
    let sge = [DataSeg {
        addr: src.as_ptr() as u64,
        len: 4096,
        lkey: ks.lkey,
    }];
    a.sq.post(
        &write_wqe(Payload::Sges(&sge), dst.as_ptr() as u64, kd.rkey),
        42,
    )
    .unwrap();
    a.sq.ring_doorbell();
    assert_eq!(dev.process(), 1);
    let c = a.cqp.poll_one().expect("a CQE");
    assert_eq!(c.opcode, CqeOpcode::REQ);
    assert_eq!(c.qpn, a.qp.qpn());
    assert_eq!(a.sq.complete(c.wqe_counter).map(|r| r.wr_id), Some(42));
    assert_eq!(dst, src);
    assert_eq!(b.qp.state(), QpState::Rts);
    drop(b);
}

#[test]
fn bad_rkey_is_remote_access_error_and_memory_untouched() {
    let dev = Device::new();
    let (mut a, b) = pair(&dev);
    let mut src = vec![0xabu8; 64];
    let mut dst = vec![0u8; 64];
    // SAFETY: the Vec outlives all device work on it, done only inside `dev.process()` calls while
    // it lives.
    let ks = unsafe { dev.reg_mr(PD, src.as_mut_ptr(), 64, Access::LOCAL_WRITE) }.unwrap();
    // SAFETY: the Vec outlives all device work on it, done only inside `dev.process()` calls while
    // it lives.
    let kd = unsafe {
        dev.reg_mr(
            PD,
            dst.as_mut_ptr(),
            64,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
    }
    .unwrap();
    // SAFETY: the Vec outlives all device work on it, done only inside `dev.process()` calls while
    // it lives.
    let kro = unsafe { dev.reg_mr(PD, dst.as_mut_ptr(), 64, Access::LOCAL_WRITE) }.unwrap();
    let sge = [DataSeg {
        addr: src.as_ptr() as u64,
        len: 64,
        lkey: ks.lkey,
    }];
    let d = dst.as_ptr() as u64;
    // Wrong rkey; outside the MR; MR without REMOTE_WRITE. The first error
    // puts the QP in ERR, so the rest are flushed: check each on a fresh pair.
    for (raddr, rkey) in [(d, kd.rkey ^ 0x100_0000), (d + 1, kd.rkey), (d, kro.rkey)] {
        let (mut a, b) = pair(&dev);
        a.sq.post(&write_wqe(Payload::Sges(&sge), raddr, rkey), 7)
            .unwrap();
        a.sq.ring_doorbell();
        dev.process();
        let c = a.cqp.poll_one().expect("an error CQE");
        assert_eq!(c.opcode, CqeOpcode::REQ_ERR);
        assert_eq!(c.syndrome, Syndrome::REMOTE_ACCESS_ERR);
        assert_eq!(a.qp.state(), QpState::Err);
        assert_eq!(b.qp.state(), QpState::Err);
        assert!(dst.iter().all(|&x| x == 0));
    }
    // And a QP in ERR flushes what follows, signaled or not.
    a.qp.to_err().unwrap();
    let mut w = write_wqe(Payload::Inline(b"hi"), d, kd.rkey);
    w.flags = CtrlFlags::empty();
    a.sq.post(&w, 1).unwrap();
    a.sq.ring_doorbell();
    dev.process();
    let c = a.cqp.poll_one().expect("flush CQE");
    assert_eq!(c.syndrome, Syndrome::WR_FLUSH_ERR);
    assert!(dst.iter().all(|&x| x == 0));
    drop(b);
}

#[test]
fn sge_range_that_wraps_the_address_space_is_a_protection_error() {
    let dev = Device::new();
    let (mut a, _b) = pair(&dev);
    let mut src = vec![0u8; 64];
    let mut dst = vec![0u8; 64];
    // SAFETY: the Vec outlives all device work on it, done only inside `dev.process()` calls while
    // it lives.
    let ks = unsafe { dev.reg_mr(PD, src.as_mut_ptr(), 64, Access::LOCAL_WRITE) }.unwrap();
    // SAFETY: the Vec outlives all device work on it, done only inside `dev.process()` calls while
    // it lives.
    let kd = unsafe {
        dev.reg_mr(
            PD,
            dst.as_mut_ptr(),
            64,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
    }
    .unwrap();
    let sge = [DataSeg {
        addr: u64::MAX - 3,
        len: 8,
        lkey: ks.lkey,
    }];
    a.sq.post(
        &write_wqe(Payload::Sges(&sge), dst.as_ptr() as u64, kd.rkey),
        1,
    )
    .unwrap();
    a.sq.ring_doorbell();
    dev.process();
    let c = a.cqp.poll_one().expect("CQE");
    assert_eq!(c.syndrome, Syndrome::LOCAL_PROT_ERR);
    assert!(dst.iter().all(|&b| b == 0));
}

/// Found by `bench send_lat`: the first MR key was 0x100, which is
/// MLX5_INVALID_LKEY, the end marker of a receive WQE's segment list.
#[test]
fn no_memory_key_is_the_invalid_lkey() {
    let dev = Device::new();
    let mut buf = vec![0u8; 64];
    for _ in 0..300 {
        // SAFETY: the Vec outlives all device work on it, done only inside `dev.process()` calls
        // while it lives.
        let k = unsafe { dev.reg_mr(PD, buf.as_mut_ptr(), 64, Access::LOCAL_WRITE) }.unwrap();
        assert_ne!(k.lkey, crate::prm::INVALID_LKEY);
    }
}

/// A WQE whose ctrl segment names another QP is a local QP operation error.
#[test]
fn wqe_naming_another_qpn_is_a_local_qp_operation_error() {
    let dev = Device::new();
    let (mut a, _b) = pair(&dev);
    let mut dst = vec![0u8; 64];
    // SAFETY: the Vec outlives all device work on it, done only inside `dev.process()` calls while
    // it lives.
    let kd = unsafe { dev.reg_mr(PD, dst.as_mut_ptr(), 64, Access::MR_ALL) }.unwrap();
    // A send queue that believes its QPN is one more than the real one.
    // SAFETY: as in `pair`; this driver replaces a.sq, used no more.
    let mut wrong = unsafe { SendQueue::new(&a.qp.dv(), a.qp.qpn() + 1, 128, 4) }.unwrap();
    let w = write_wqe(Payload::Inline(&[1; 8]), dst.as_ptr() as u64, kd.rkey);
    wrong.post(&w, 1).unwrap();
    wrong.ring_doorbell();
    dev.process();
    let c = a.cqp.poll_one().expect("error CQE");
    assert_eq!(c.syndrome, Syndrome::LOCAL_QP_OP_ERR);
    assert_eq!(dst, vec![0u8; 64], "the WQE ran");
}

/// A SEND whose ctrl segment has SOLICITED gives the responder a CQE with the
/// `se` bit; one without gives a CQE without it.
#[test]
fn solicited_sends_set_the_se_bit_of_the_receive_cqe() {
    use crate::driver::ReceiveQueue;
    let dev = Device::new();
    let mk = || {
        let cq = dev.create_cq(16, 64).unwrap();
        let qp = dev.create_qp_rq(PD, &cq, 8, 4, 16).unwrap();
        (qp, cq)
    };
    let ((qa, _ca), (qb, cb)) = (mk(), mk());
    for (x, y) in [(&qa, &qb), (&qb, &qa)] {
        x.to_init(Access::QP_ALL).unwrap();
        x.to_rtr(y.qpn()).unwrap();
        x.to_rts().unwrap();
    }
    // SAFETY: as in `pair`.
    let mut sq = unsafe { SendQueue::new(&qa.dv(), qa.qpn(), 64, 4) }.unwrap();
    // SAFETY: a description from a live sim object the test keeps longer than the driver; the
    // driver touches ring memory only when called.
    let mut rq = unsafe { ReceiveQueue::new(&qb.dv()) }.unwrap();
    // SAFETY: a description from a live sim object the test keeps longer than the driver; the
    // driver touches ring memory only when called.
    let mut cq = unsafe { CompletionQueue::new(&cb.dv()) }.unwrap();
    let mut buf = vec![0u8; 128];
    // SAFETY: the Vec outlives all device work on it, done only inside `dev.process()` calls while
    // it lives.
    let k = unsafe { dev.reg_mr(PD, buf.as_mut_ptr(), 128, Access::LOCAL_WRITE) }.unwrap();
    let seg = |off: u64| DataSeg {
        addr: buf.as_ptr() as u64 + off,
        len: 64,
        lkey: k.lkey,
    };
    for flags in [
        CtrlFlags::CQ_UPDATE | CtrlFlags::SOLICITED,
        CtrlFlags::CQ_UPDATE,
    ] {
        rq.post(&[seg(64)], 1).unwrap();
        rq.ring_doorbell();
        let sge = [seg(0)];
        let mut w = send_wqe(&sge);
        w.flags = flags;
        sq.post(&w, 2).unwrap();
        sq.ring_doorbell();
        dev.process();
        let c = cq.poll_one().expect("receive CQE");
        assert_eq!(c.syndrome, Syndrome(0));
        assert_eq!(
            c.solicited,
            flags.contains(CtrlFlags::SOLICITED),
            "{flags:?}"
        );
        rq.complete(c.wqe_counter);
        cq.update_ci();
    }
}

#[test]
fn device_thread_executes_doorbells() {
    let dev = Device::new();
    let (mut a, _b) = pair(&dev);
    let mut dst = vec![0u8; 64];
    // SAFETY: `dst` outlives the device work on it: `dev.stop()` joins the device thread before
    // `dst` goes.
    let kd = unsafe {
        dev.reg_mr(
            PD,
            dst.as_mut_ptr(),
            64,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
    }
    .unwrap();
    dev.start().unwrap();
    a.sq.post(
        &write_wqe(Payload::Inline(&[9; 64]), dst.as_ptr() as u64, kd.rkey),
        5,
    )
    .unwrap();
    a.sq.ring_doorbell();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let c = loop {
        if let Some(c) = a.cqp.poll_one() {
            break c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no CQE from the device thread"
        );
        std::thread::yield_now();
    };
    dev.stop();
    assert_eq!(c.opcode, CqeOpcode::REQ);
    assert_eq!(dst, vec![9u8; 64]);
}
