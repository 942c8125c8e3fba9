//! QP numbers, RNR retries, and ERR -> RESET -> RTS.

use super::*;

/// A SEND with no receive posted: `rnr_retry` 2 means three tries,
/// RNR_DELAY apart, then RNR_RETRY_EXC_ERR (0x16); `rnr_retry` 7 keeps
/// trying until a receive is posted.
#[test]
fn rnr_retry_is_counted_and_7_is_forever() {
    for (rnr_retry, want_err) in [(0u8, true), (2, true), (7, false)] {
        let dev = Device::new();
        let mk = || {
            let cq = dev.create_cq(16, 64).unwrap();
            let qp = dev.create_qp_rq(PD, &cq, 8, 4, 16).unwrap();
            (qp, cq)
        };
        let ((qa, ca), (qb, _cb)) = (mk(), mk());
        for (x, y) in [(&qa, &qb), (&qb, &qa)] {
            x.to_init(Access::QP_ALL).unwrap();
            x.to_rtr(y.qpn()).unwrap();
            x.to_rts_with(rnr_retry).unwrap();
        }
        assert!(qa.to_rts_with(8).is_err());
        // SAFETY: as in `pair`.
        let mut sq = unsafe { SendQueue::new(&qa.dv(), qa.qpn(), 64, 4) }.unwrap();
        // SAFETY: a description from a live sim object the test keeps longer than the driver; the
        // driver touches ring memory only when called.
        let mut cq = unsafe { CompletionQueue::new(&ca.dv()) }.unwrap();
        let mut src = vec![9u8; 64];
        // SAFETY: the Vec outlives all device work on it, done only inside `dev.process()` calls
        // while it lives.
        let k = unsafe { dev.reg_mr(PD, src.as_mut_ptr(), 64, Access::LOCAL_WRITE) }.unwrap();
        let sge = [DataSeg {
            addr: src.as_ptr() as u64,
            len: 64,
            lkey: k.lkey,
        }];
        sq.post(&send_wqe(&sge), 1).unwrap();
        sq.ring_doorbell();
        let t0 = std::time::Instant::now();
        let mut got = None;
        // How long to wait for the verdict; Miri runs the retries hundreds of
        // times slower (on a loaded machine it missed the native bound).
        let slow = if cfg!(miri) { 20 } else { 1 };
        let limit =
            (RNR_DELAY * (rnr_retry as u32 + 1) * 20 + std::time::Duration::from_millis(50)) * slow;
        process_until(&dev, limit, || {
            got = cq.poll_one();
            got.is_some()
        });
        if want_err {
            let c = got.unwrap_or_else(|| panic!("rnr_retry {rnr_retry}: no completion"));
            assert_eq!(
                c.syndrome,
                Syndrome::RNR_RETRY_EXC_ERR,
                "rnr_retry {rnr_retry}"
            );
            // Retries wait RNR_DELAY each (elapsed time is at least that; no upper bound asserted).
            assert!(
                t0.elapsed() >= RNR_DELAY * rnr_retry as u32,
                "rnr_retry {rnr_retry}"
            );
            assert_eq!(qa.state(), QpState::Err);
        } else {
            assert!(got.is_none(), "rnr_retry 7 gave up: {got:?}");
            assert_eq!(qa.state(), QpState::Rts);
        }
    }
}

/// QPNs are 24 bits: after a wrap the next one skips numbers in use.
#[test]
fn qp_numbers_wrap_at_24_bits_and_skip_live_ones() {
    let dev = Device::new();
    let cq = dev.create_cq(4, 64).unwrap();
    let a = dev.create_qp(PD, &cq, 8).unwrap();
    dev.lock().next_qpn = 0xff_ffff;
    let b = dev.create_qp(PD, &cq, 8).unwrap();
    assert_eq!(b.qpn(), 0xff_ffff);
    dev.lock().next_qpn = a.qpn();
    let c = dev.create_qp(PD, &cq, 8).unwrap();
    assert_eq!(c.qpn(), a.qpn() + 1, "skips the live QPN");
    let mut m = vec![0u8; 64];
    // SAFETY: the Vec outlives all device work on it, done only inside `dev.process()` calls while
    // it lives.
    let k1 = unsafe { dev.reg_mr(PD, m.as_mut_ptr(), 64, Access::LOCAL_WRITE) }.unwrap();
    dev.lock().next_key = k1.lkey;
    // SAFETY: the Vec outlives all device work on it, done only inside `dev.process()` calls while
    // it lives.
    let k2 = unsafe { dev.reg_mr(PD, m.as_mut_ptr(), 64, Access::LOCAL_WRITE) }.unwrap();
    assert_ne!(k1.lkey, k2.lkey, "a live key was handed out again");
}

/// ERR -> RESET -> INIT -> RTR -> RTS: after an error, resetting the QP on
/// both sides (the sim's `to_reset`, the driver's `reset`) zeroes the
/// doorbell record and the indices, and the QP works again from index 0.
#[test]
fn reset_zeroes_the_indices_and_the_qp_works_again() {
    let dev = Device::new();
    let (mut a, b) = pair(&dev);
    let mut dst = vec![0u8; 64];
    // SAFETY: the Vec outlives all device work on it, done only inside `dev.process()` calls while
    // it lives.
    let kd = unsafe { dev.reg_mr(PD, dst.as_mut_ptr(), 64, Access::MR_ALL) }.unwrap();
    let bad = write_wqe(
        Payload::Inline(&[1; 8]),
        dst.as_ptr() as u64,
        kd.rkey ^ 0x1000,
    );
    a.sq.post(&bad, 1).unwrap();
    a.sq.ring_doorbell();
    dev.process();
    let c = a.cqp.poll_one().expect("error CQE");
    assert_eq!(c.syndrome, Syndrome::REMOTE_ACCESS_ERR);
    a.sq.complete(c.wqe_counter);
    a.cqp.update_ci();
    assert_eq!(a.qp.state(), QpState::Err);
    a.qp.to_reset().unwrap();
    a.sq.reset();
    assert_eq!(a.sq.pi(), 0);
    assert_eq!(
        // SAFETY: the live QP's doorbell record; word 1 is the SQ counter.
        unsafe { crate::mmio::read_dbrec(a.qp.dv().dbrec.add(1)) },
        0
    );
    // The responder went to ERR too (a remote access error is class C).
    assert_eq!(b.qp.state(), QpState::Err);
    b.qp.to_reset().unwrap();
    for (x, y) in [(&a, &b), (&b, &a)] {
        x.qp.to_init(Access::QP_ALL).unwrap();
        x.qp.to_rtr(y.qp.qpn()).unwrap();
        x.qp.to_rts().unwrap();
    }
    let good = write_wqe(Payload::Inline(&[7; 8]), dst.as_ptr() as u64, kd.rkey);
    a.sq.post(&good, 2).unwrap();
    a.sq.ring_doorbell();
    dev.process();
    let c = a.cqp.poll_one().expect("CQE");
    assert_eq!((c.syndrome, c.wqe_counter), (Syndrome(0), 0));
    assert_eq!(a.sq.complete(c.wqe_counter).map(|r| r.wr_id), Some(2));
    assert_eq!(&dst[..8], &[7; 8]);
}
