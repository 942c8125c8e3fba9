//! The sim's CQs: overrun (stop and event, or ignored), arming and
//! completion events, a CQ handle dropped before its QP.

use super::*;

/// A CQE that finds no free slot is never written: the CQ overruns, raises
/// one CQ error event, and the QP completing to it stops.
#[test]
fn cq_overrun_writes_nothing_and_raises_an_event() {
    let dev = Device::new();
    let cq = dev.create_cq(4, 64).unwrap();
    let peer_cq = dev.create_cq(4, 64).unwrap();
    let qa = dev.create_qp(PD, &cq, 16).unwrap();
    let qb = dev.create_qp(PD, &peer_cq, 16).unwrap();
    for (x, y) in [(&qa, &qb), (&qb, &qa)] {
        x.to_init(Access::QP_ALL).unwrap();
        x.to_rtr(y.qpn()).unwrap();
        x.to_rts().unwrap();
    }
    // SAFETY: as in `pair`.
    let mut sq = unsafe { SendQueue::new(&qa.dv(), qa.qpn(), 64, 16) }.unwrap();
    // SAFETY: a description from a live sim object the test keeps longer than the driver; the
    // driver touches ring memory only when called.
    let mut cqp = unsafe { CompletionQueue::new(&cq.dv()) }.unwrap();
    let mut dst = vec![0u8; 64];
    // SAFETY: the Vec outlives all device work on it, done only inside `dev.process()` calls while
    // it lives.
    let kd = unsafe { dev.reg_mr(PD, dst.as_mut_ptr(), 64, Access::MR_ALL) }.unwrap();
    let w = write_wqe(Payload::Inline(&[1; 8]), dst.as_ptr() as u64, kd.rkey);
    // Six signaled WQEs into a CQ of 4 that nobody polls.
    for i in 0..6 {
        sq.post(&w, i).unwrap();
    }
    sq.ring_doorbell();
    dev.process();
    assert!(cq.overrun());
    assert_eq!(cq.error_events(), 1);
    // Exactly the four CQEs that fit, then nothing: slot 0 was not overwritten.
    let counters: Vec<u16> = std::iter::from_fn(|| cqp.poll_one().map(|c| c.wqe_counter)).collect();
    assert_eq!(counters, [0, 1, 2, 3]);
    cqp.update_ci();
    // The CQ stays stopped: nothing more is executed or written.
    sq.complete(3);
    sq.post(&w, 9).unwrap();
    sq.ring_doorbell();
    dev.process();
    assert!(cqp.poll_one().is_none());
    assert_eq!(cq.error_events(), 1);
}

/// A CQ handle dropped before the QP completing to it: the CQ lives on until
/// the QP goes, and the device keeps working (the QP still completes to it).
#[test]
fn a_cq_dropped_before_its_qp_lives_until_the_qp_goes() {
    let dev = Device::new();
    let cq = dev.create_cq(4, 64).unwrap();
    let qp = dev.create_qp(PD, &cq, 8).unwrap();
    let cqn = cq.cqn();
    drop(cq);
    qp.to_err().unwrap();
    dev.process();
    assert!(dev.lock().cqs.contains_key(&cqn));
    drop(qp);
    assert!(!dev.lock().cqs.contains_key(&cqn));
}

/// Arming: a CQE written while the CQ is armed raises one completion event;
/// none comes until the CQ is armed again with the next sequence number; a
/// CQ armed for solicited completions only ignores unsolicited CQEs.
#[test]
fn an_armed_cq_raises_one_event_per_arm() {
    let dev = Device::new();
    let (mut a, _b) = pair(&dev);
    let mut dst = vec![0u8; 64];
    // SAFETY: the Vec outlives all device work on it, done only inside `dev.process()` calls while
    // it lives.
    let kd = unsafe { dev.reg_mr(PD, dst.as_mut_ptr(), 64, Access::MR_ALL) }.unwrap();
    let w = write_wqe(Payload::Inline(&[1; 8]), dst.as_ptr() as u64, kd.rkey);
    let round = |a: &mut Side, id: u64| {
        a.sq.post(&w, id).unwrap();
        a.sq.ring_doorbell();
        dev.process();
        let c = a.cqp.poll_one().expect("CQE");
        a.sq.complete(c.wqe_counter);
        a.cqp.update_ci();
    };
    round(&mut a, 0);
    assert_eq!(a._cq.completion_events(), 0, "not armed");
    a.cqp.arm(false).unwrap();
    round(&mut a, 1);
    assert_eq!(a._cq.completion_events(), 1);
    round(&mut a, 2);
    assert_eq!(a._cq.completion_events(), 1, "one event per arm");
    a.cqp.event_consumed();
    a.cqp.arm(true).unwrap();
    round(&mut a, 3);
    assert_eq!(
        a._cq.completion_events(),
        1,
        "solicited only: an unsolicited CQE"
    );
    a.cqp.arm(false).unwrap();
    round(&mut a, 4);
    assert_eq!(a._cq.completion_events(), 2);
}

/// The consumer-index record stays 0 (the host polls as on a CQ that
/// ignores overrun: it never writes the record) while 4 CQEs are consumed
/// from a CQ of 4, then 4 more WQEs complete. A CQ created with
/// `ignore_overrun` does not read the stale record: it writes the 4 new
/// CQEs and the host polls them; one created without it reads the record
/// as a full CQ, overruns (one CQ error event) and writes none.
#[test]
fn an_overrun_ignoring_cq_does_not_stop_on_a_stale_ci_record() {
    for ignore in [true, false] {
        let dev = Device::new();
        let cq = dev.create_cq_ex(4, 64, ignore).unwrap();
        assert_eq!(cq.ignores_overrun(), ignore);
        let peer_cq = dev.create_cq(4, 64).unwrap();
        let qa = dev.create_qp(PD, &cq, 16).unwrap();
        let qb = dev.create_qp(PD, &peer_cq, 16).unwrap();
        for (x, y) in [(&qa, &qb), (&qb, &qa)] {
            x.to_init(Access::QP_ALL).unwrap();
            x.to_rtr(y.qpn()).unwrap();
            x.to_rts().unwrap();
        }
        // SAFETY: as in `pair`.
        let mut sq = unsafe { SendQueue::new(&qa.dv(), qa.qpn(), 64, 16) }.unwrap();
        // SAFETY: a description from a live sim object the test keeps longer than the driver; the
        // driver touches ring memory only when called.
        let mut cqp = unsafe { CompletionQueue::new(&cq.dv()) }.unwrap();
        cqp.set_overrun_ignored(true);
        let mut dst = vec![0u8; 64];
        // SAFETY: the Vec outlives all device work on it, done only inside `dev.process()` calls
        // while it lives.
        let kd = unsafe { dev.reg_mr(PD, dst.as_mut_ptr(), 64, Access::MR_ALL) }.unwrap();
        let w = write_wqe(Payload::Inline(&[1; 8]), dst.as_ptr() as u64, kd.rkey);
        let mut counters = Vec::new();
        for round in 0..2u64 {
            for i in 0..4 {
                sq.post(&w, round * 4 + i).unwrap();
            }
            sq.ring_doorbell();
            dev.process();
            let from = cqp.ci();
            while let Some(c) = cqp.poll_one() {
                assert_eq!(
                    sq.complete(c.wqe_counter).map(|r| r.wr_id),
                    Some(c.wqe_counter as u64)
                );
                counters.push(c.wqe_counter);
            }
            cqp.polled(from);
        }
        let dbrec = cq.dv().dbrec;
        assert_eq!(
            // SAFETY: the sim CQ's live doorbell record; word 0 is the CI.
            unsafe { crate::mmio::read_dbrec(dbrec) },
            0,
            "the CI record was never written"
        );
        if ignore {
            assert_eq!(counters, [0, 1, 2, 3, 4, 5, 6, 7]);
            assert!(!cq.overrun());
            assert_eq!(cq.error_events(), 0);
        } else {
            assert_eq!(counters, [0, 1, 2, 3], "the CQ stopped at the stale record");
            assert!(cq.overrun());
            assert_eq!(cq.error_events(), 1);
        }
    }
}

/// `Cq::set_ignore_overrun(false)` (the sim's test hook) turns overrun
/// detection back on: the record the host writes then is read again.
#[test]
fn overrun_detection_can_be_turned_back_on() {
    let dev = Device::new();
    let cq = dev.create_cq_ex(4, 64, true).unwrap();
    cq.set_ignore_overrun(false);
    assert!(!cq.ignores_overrun());
    let peer_cq = dev.create_cq(4, 64).unwrap();
    let qa = dev.create_qp(PD, &cq, 16).unwrap();
    let qb = dev.create_qp(PD, &peer_cq, 16).unwrap();
    for (x, y) in [(&qa, &qb), (&qb, &qa)] {
        x.to_init(Access::QP_ALL).unwrap();
        x.to_rtr(y.qpn()).unwrap();
        x.to_rts().unwrap();
    }
    // SAFETY: as in `pair`.
    let mut sq = unsafe { SendQueue::new(&qa.dv(), qa.qpn(), 64, 16) }.unwrap();
    let mut dst = vec![0u8; 64];
    // SAFETY: the Vec outlives all device work on it, done only inside `dev.process()` calls while
    // it lives.
    let kd = unsafe { dev.reg_mr(PD, dst.as_mut_ptr(), 64, Access::MR_ALL) }.unwrap();
    let w = write_wqe(Payload::Inline(&[1; 8]), dst.as_ptr() as u64, kd.rkey);
    for i in 0..5 {
        sq.post(&w, i).unwrap();
    }
    sq.ring_doorbell();
    dev.process();
    assert!(cq.overrun(), "five CQEs into four slots, none released");
}

/// A CQ with timestamps on (`Cq::set_timestamps`) writes the device clock
/// into bytes 48..56 of each CQE, big-endian, non-zero and non-decreasing,
/// but not into an error CQE (its syndromes lie there); off, those bytes
/// stay 0. Timestamps and compression refuse each other.
#[test]
fn timestamps_are_written_at_byte_48_unless_off_or_an_error() {
    let dev = Device::new();
    let cq = dev.create_cq(8, 64).unwrap();
    let ok = |counter: u16| crate::cqe::Cqe {
        opcode: CqeOpcode::REQ,
        wqe_opcode: WqeOpcode::RDMA_WRITE,
        qpn: 0x1234,
        wqe_counter: counter,
        byte_cnt: 0,
        imm: 0,
        solicited: false,
        format: 0,
        owner: false,
        syndrome: Syndrome(0),
        vendor_syndrome: 0,
        flags_rqpn: 0,
    };
    let ts = |b: &[u8; 64]| u64::from_be_bytes(b[48..56].try_into().unwrap());
    cq.hook_push_cqe(&ok(0), 0);
    assert_eq!(ts(&cq.hook_read_cqe(0)), 0, "timestamps off");
    assert!(!cq.timestamps());
    cq.set_timestamps(true).unwrap();
    assert!(cq.timestamps());
    for k in 1..4 {
        cq.hook_push_cqe(&ok(k), 0);
    }
    let err = crate::cqe::Cqe {
        opcode: CqeOpcode::REQ_ERR,
        syndrome: Syndrome::REMOTE_ACCESS_ERR,
        vendor_syndrome: 0x88,
        ..ok(4)
    };
    cq.hook_push_cqe(&err, 0);
    let stamps: Vec<u64> = (1..4).map(|i| ts(&cq.hook_read_cqe(i))).collect();
    assert!(
        stamps[0] != 0 && stamps.windows(2).all(|w| w[0] <= w[1]),
        "{stamps:?}"
    );
    let e = cq.hook_read_cqe(4);
    assert_eq!(
        (ts(&e) >> 16, e[54], e[55]),
        (0, 0x88, Syndrome::REMOTE_ACCESS_ERR.0)
    );
    assert!(matches!(
        cq.set_compression(true),
        Err(SimError::Unsupported { .. })
    ));
    let zip = dev.create_cq(8, 64).unwrap();
    zip.set_compression(true).unwrap();
    assert!(matches!(
        zip.set_timestamps(true),
        Err(SimError::Unsupported { .. })
    ));
}
