//! The send queue through the ring driver: wrapping with owner bits, the
//! `max_post` limit, unsignaled WRs retired by a later CQE or by auto-signal,
//! and a full SQ refusing a post without writing.

use super::*;

#[test]
fn ring_wraps_with_owner_bits_across_many_passes() {
    let dev = Device::new();
    let (mut a, _b) = pair(&dev);
    let mut dst = vec![0u8; 256];
    // SAFETY: the Vec outlives all device work on it, done only inside `dev.process()` calls while
    // it lives.
    let kd = unsafe {
        dev.reg_mr(
            PD,
            dst.as_mut_ptr(),
            256,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
    }
    .unwrap();
    let d = dst.as_ptr() as u64;
    // 100-byte inline writes take 3 WQEBBs in an 8-WQEBB SQ: they wrap often.
    for i in 0..100u32 {
        let payload: Vec<u8> = (0..100).map(|k| (k as u32 + i) as u8).collect();
        a.sq.post(
            &write_wqe(Payload::Inline(&payload), d + (i as u64 % 100), kd.rkey),
            i as u64,
        )
        .unwrap();
        a.sq.ring_doorbell();
        assert_eq!(dev.process(), 1);
        let c = a.cqp.poll_one().expect("CQE");
        a.cqp.update_ci();
        assert_eq!(c.opcode, CqeOpcode::REQ, "iteration {i}");
        assert_eq!(
            a.sq.complete(c.wqe_counter).map(|r| r.wr_id),
            Some(i as u64)
        );
        let o = (i % 100) as usize;
        assert_eq!(&dst[o..o + 100], &payload[..]);
        assert!(a.cqp.poll_one().is_none());
    }
}

#[test]
fn send_queue_holds_at_most_max_post_work_requests() {
    let dev = Device::new();
    let (mut a, _b) = pair(&dev);
    let mut dst = vec![0u8; 64];
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
    let d = dst.as_ptr() as u64;
    a.sq.set_auto_signal(0);
    let mut w = write_wqe(Payload::Inline(&[1; 8]), d, kd.rkey);
    w.flags = CtrlFlags::empty();
    for i in 0..3 {
        a.sq.post(&w, i).unwrap();
    }
    w.flags = CtrlFlags::CQ_UPDATE;
    a.sq.post(&w, 3).unwrap();
    let pi = a.sq.pi();
    assert_eq!(
        a.sq.post(&w, 4),
        Err(crate::wqe::WqeError::WrLimit { max_post: 4 })
    );
    assert_eq!(a.sq.pi(), pi, "a refused WR moved the producer index");
    a.sq.ring_doorbell();
    assert_eq!(dev.process(), 4);
    // One signaled CQE retires all four WRs.
    let c = a.cqp.poll_one().expect("CQE");
    assert_eq!(a.sq.complete(c.wqe_counter).map(|r| r.wr_id), Some(3));
    assert_eq!(a.sq.free_wrs(), 4);
    a.sq.post(&w, 5).unwrap();
}

/// Issue 4's case: SQ of 16 WQEBBs, W0..W9 unsignaled (1 WQEBB each), W10
/// signaled (2 WQEBBs): one CQE with wqe_counter 10 retires all 11, the SQ is
/// whole again, and only W10's wr_id is reported.
#[test]
fn one_signaled_cqe_retires_the_unsignaled_ones_before_it() {
    let dev = Device::new();
    let (mut a, _b) = pair_with(&dev, 16, 0);
    a.sq.set_auto_signal(0);
    let mut dst = vec![0u8; 256];
    // SAFETY: the Vec outlives all device work on it, done only inside `dev.process()` calls while
    // it lives.
    let kd = unsafe {
        dev.reg_mr(
            PD,
            dst.as_mut_ptr(),
            256,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
    }
    .unwrap();
    let d = dst.as_ptr() as u64;
    let mut w = write_wqe(Payload::Inline(&[1; 8]), d, kd.rkey);
    w.flags = CtrlFlags::empty();
    for i in 0..10 {
        a.sq.post(&w, 100 + i).unwrap();
    }
    let two_wqebbs = [7u8; 60]; // ctrl + raddr + 64-byte inline segment = 6 DS = 2 WQEBBs
    let mut w10 = write_wqe(Payload::Inline(&two_wqebbs), d, kd.rkey);
    w10.flags = CtrlFlags::CQ_UPDATE;
    a.sq.post(&w10, 110).unwrap();
    assert_eq!(a.sq.free_wqebbs(), 4);
    a.sq.ring_doorbell();
    assert_eq!(dev.process(), 11);
    let c = a.cqp.poll_one().expect("one CQE");
    assert!(a.cqp.poll_one().is_none(), "unsignaled WQEs made CQEs");
    assert_eq!(c.wqe_counter, 10);
    assert_eq!(a.sq.complete(c.wqe_counter).map(|r| r.wr_id), Some(110));
    assert_eq!(a.sq.free_wqebbs(), 16);
}

/// Issue 4's case: 16 one-WQEBB posts fill a 16-WQEBB SQ; with nothing
/// completed the 17th is refused, and no ring byte or doorbell changes.
#[test]
fn the_seventeenth_post_is_refused_and_writes_nothing() {
    let dev = Device::new();
    let (mut a, _b) = pair_with(&dev, 16, 32);
    let mut dst = vec![0u8; 64];
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
    let w = write_wqe(Payload::Inline(&[1; 8]), dst.as_ptr() as u64, kd.rkey);
    for i in 0..16 {
        a.sq.post(&w, i).unwrap();
    }
    a.sq.ring_doorbell();
    let dv = a.qp.dv();
    let ring = |dv: &crate::dv::mlx5dv_qp| {
        // SAFETY: the SQ is 16 * 64 bytes and the sim is not running.
        unsafe { std::slice::from_raw_parts(dv.sq.buf as *const u8, 16 * 64) }.to_vec()
    };
    let before = ring(&dv);
    // SAFETY: the live QP's doorbell record; word 1 is the SQ counter.
    let db_before = unsafe { crate::mmio::read_dbrec(dv.dbrec.add(1)) };
    // Sixteen 1-WQEBB WRs use every WQEBB and every WR slot (max_post is capped at wqe_cnt).
    assert_eq!(a.sq.free_wqebbs(), 0);
    assert_eq!(
        a.sq.post(&w, 16),
        Err(crate::wqe::WqeError::WrLimit { max_post: 16 })
    );
    a.sq.ring_doorbell();
    assert_eq!(ring(&dv), before, "a refused post wrote ring bytes");
    assert_eq!(
        // SAFETY: the live QP's doorbell record; word 1 is the SQ counter.
        unsafe { crate::mmio::read_dbrec(dv.dbrec.add(1)) },
        db_before,
        "a refused post rang"
    );
}

/// Auto-signal (default every max_post / 2 WRs): unsignaled WRs still retire
/// SQ space, through CQEs the driver marks hidden.
#[test]
fn auto_signal_keeps_an_unsignaled_stream_flowing() {
    let dev = Device::new();
    let (mut a, _b) = pair_with(&dev, 16, 8);
    let mut dst = vec![0u8; 64];
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
    let mut w = write_wqe(Payload::Inline(&[1; 8]), dst.as_ptr() as u64, kd.rkey);
    w.flags = CtrlFlags::empty();
    // 100 unsignaled WRs through an SQ that holds 8: only auto-signal frees it.
    let mut hidden = 0;
    for i in 0..100u64 {
        while a.sq.post(&w, i).is_err() {
            a.sq.ring_doorbell();
            dev.process();
            while let Some(c) = a.cqp.poll_one() {
                let r = a.sq.complete(c.wqe_counter).expect("outstanding");
                assert!(r.hidden, "the caller asked for no CQE");
                hidden += 1;
            }
            a.cqp.update_ci();
        }
    }
    assert!(hidden >= 100 / 4 - 1, "{hidden} auto-signaled CQEs");
}
