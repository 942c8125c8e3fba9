//! Sim unit tests driven through the ring driver, synchronously.

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
        atomic: None,
        opcode: WqeOpcode::RDMA_WRITE,
        flags: CtrlFlags::CQ_UPDATE,
        imm: 0,
        remote: Some(RemoteSeg { addr: raddr, rkey }),
        payload,
    }
}

#[test]
fn rdma_write_lands_and_completes() {
    let dev = Device::new();
    let (mut a, b) = pair(&dev);
    let mut src: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    let mut dst = vec![0u8; 4096];
    // SAFETY (every reg_mr in these tests): the Vecs outlive all device work,
    // which happens only inside `dev.process()` calls made while they live.
    let ks = unsafe { dev.reg_mr(PD, src.as_mut_ptr(), 4096, Access::LOCAL_WRITE) }.unwrap();
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
    let ks = unsafe { dev.reg_mr(PD, src.as_mut_ptr(), 64, Access::LOCAL_WRITE) }.unwrap();
    let kd = unsafe {
        dev.reg_mr(
            PD,
            dst.as_mut_ptr(),
            64,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
    }
    .unwrap();
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
fn ring_wraps_with_owner_bits_across_many_passes() {
    let dev = Device::new();
    let (mut a, _b) = pair(&dev);
    let mut dst = vec![0u8; 256];
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
fn device_thread_executes_doorbells() {
    let dev = Device::new();
    let (mut a, _b) = pair(&dev);
    let mut dst = vec![0u8; 64];
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

#[test]
fn send_queue_holds_at_most_max_post_work_requests() {
    let dev = Device::new();
    let (mut a, _b) = pair(&dev);
    let mut dst = vec![0u8; 64];
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

#[test]
fn sge_range_that_wraps_the_address_space_is_a_protection_error() {
    let dev = Device::new();
    let (mut a, _b) = pair(&dev);
    let mut src = vec![0u8; 64];
    let mut dst = vec![0u8; 64];
    let ks = unsafe { dev.reg_mr(PD, src.as_mut_ptr(), 64, Access::LOCAL_WRITE) }.unwrap();
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
        let k = unsafe { dev.reg_mr(PD, buf.as_mut_ptr(), 64, Access::LOCAL_WRITE) }.unwrap();
        assert_ne!(k.lkey, crate::prm::INVALID_LKEY);
    }
}

fn pair_with(dev: &Device, sq_wqebbs: u32, max_post: u32) -> (Side, Side) {
    let mk = || {
        let cq = dev.create_cq(64, 64).unwrap();
        let qp = dev.create_qp(PD, &cq, sq_wqebbs).unwrap();
        // SAFETY: as in `pair`.
        let sq = unsafe { SendQueue::new(&qp.dv(), qp.qpn(), 128, max_post) }.unwrap();
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
        x.qp.to_init(Access::all()).unwrap();
        x.qp.to_rtr(y.qp.qpn()).unwrap();
        x.qp.to_rts().unwrap();
    }
    (a, b)
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

/// A signaled SEND gathering `sge`.
fn send_wqe(sge: &[DataSeg]) -> SendWqe<'_> {
    SendWqe {
        datagram: None,
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
            x.to_init(Access::all()).unwrap();
            x.to_rtr(y.qpn()).unwrap();
            x.to_rts_with(rnr_retry).unwrap();
        }
        assert!(qa.to_rts_with(8).is_err());
        // SAFETY: as in `pair`.
        let mut sq = unsafe { SendQueue::new(&qa.dv(), qa.qpn(), 64, 4) }.unwrap();
        let mut cq = unsafe { CompletionQueue::new(&ca.dv()) }.unwrap();
        let mut src = vec![9u8; 64];
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
        x.to_init(Access::all()).unwrap();
        x.to_rtr(y.qpn()).unwrap();
        x.to_rts().unwrap();
    }
    // SAFETY: as in `pair`.
    let mut sq = unsafe { SendQueue::new(&qa.dv(), qa.qpn(), 64, 16) }.unwrap();
    let mut cqp = unsafe { CompletionQueue::new(&cq.dv()) }.unwrap();
    let mut dst = vec![0u8; 64];
    let kd = unsafe { dev.reg_mr(PD, dst.as_mut_ptr(), 64, Access::all()) }.unwrap();
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

/// A WQE whose ctrl segment names another QP is a local QP operation error.
#[test]
fn wqe_naming_another_qpn_is_a_local_qp_operation_error() {
    let dev = Device::new();
    let (mut a, _b) = pair(&dev);
    let mut dst = vec![0u8; 64];
    let kd = unsafe { dev.reg_mr(PD, dst.as_mut_ptr(), 64, Access::all()) }.unwrap();
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
        x.to_init(Access::all()).unwrap();
        x.to_rtr(y.qpn()).unwrap();
        x.to_rts().unwrap();
    }
    // SAFETY: as in `pair`.
    let mut sq = unsafe { SendQueue::new(&qa.dv(), qa.qpn(), 64, 4) }.unwrap();
    let mut rq = unsafe { ReceiveQueue::new(&qb.dv()) }.unwrap();
    let mut cq = unsafe { CompletionQueue::new(&cb.dv()) }.unwrap();
    let mut buf = vec![0u8; 128];
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
    let k1 = unsafe { dev.reg_mr(PD, m.as_mut_ptr(), 64, Access::LOCAL_WRITE) }.unwrap();
    dev.lock().next_key = k1.lkey;
    let k2 = unsafe { dev.reg_mr(PD, m.as_mut_ptr(), 64, Access::LOCAL_WRITE) }.unwrap();
    assert_ne!(k1.lkey, k2.lkey, "a live key was handed out again");
}

/// Arming: a CQE written while the CQ is armed raises one completion event;
/// none comes until the CQ is armed again with the next sequence number; a
/// CQ armed for solicited completions only ignores unsolicited CQEs.
#[test]
fn an_armed_cq_raises_one_event_per_arm() {
    let dev = Device::new();
    let (mut a, _b) = pair(&dev);
    let mut dst = vec![0u8; 64];
    let kd = unsafe { dev.reg_mr(PD, dst.as_mut_ptr(), 64, Access::all()) }.unwrap();
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

/// ERR -> RESET -> INIT -> RTR -> RTS: after an error, resetting the QP on
/// both sides (the sim's `to_reset`, the driver's `reset`) zeroes the
/// doorbell record and the indices, and the QP works again from index 0.
#[test]
fn reset_zeroes_the_indices_and_the_qp_works_again() {
    let dev = Device::new();
    let (mut a, b) = pair(&dev);
    let mut dst = vec![0u8; 64];
    let kd = unsafe { dev.reg_mr(PD, dst.as_mut_ptr(), 64, Access::all()) }.unwrap();
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
        unsafe { crate::mmio::read_dbrec(a.qp.dv().dbrec.add(1)) },
        0
    );
    // The responder went to ERR too (a remote access error is class C).
    assert_eq!(b.qp.state(), QpState::Err);
    b.qp.to_reset().unwrap();
    for (x, y) in [(&a, &b), (&b, &a)] {
        x.qp.to_init(Access::all()).unwrap();
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
            x.to_init(Access::all()).unwrap();
            x.to_rtr(y.qpn()).unwrap();
            x.to_rts().unwrap();
        }
        // SAFETY: as in `pair`.
        let mut sq = unsafe { SendQueue::new(&qa.dv(), qa.qpn(), 64, 16) }.unwrap();
        let mut cqp = unsafe { CompletionQueue::new(&cq.dv()) }.unwrap();
        cqp.set_overrun_ignored(true);
        let mut dst = vec![0u8; 64];
        let kd = unsafe { dev.reg_mr(PD, dst.as_mut_ptr(), 64, Access::all()) }.unwrap();
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
        // SAFETY: the sim CQ's live doorbell record; word 0 is the CI.
        assert_eq!(
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
        x.to_init(Access::all()).unwrap();
        x.to_rtr(y.qpn()).unwrap();
        x.to_rts().unwrap();
    }
    // SAFETY: as in `pair`.
    let mut sq = unsafe { SendQueue::new(&qa.dv(), qa.qpn(), 64, 16) }.unwrap();
    let mut dst = vec![0u8; 64];
    let kd = unsafe { dev.reg_mr(PD, dst.as_mut_ptr(), 64, Access::all()) }.unwrap();
    let w = write_wqe(Payload::Inline(&[1; 8]), dst.as_ptr() as u64, kd.rkey);
    for i in 0..5 {
        sq.post(&w, i).unwrap();
    }
    sq.ring_doorbell();
    dev.process();
    assert!(cq.overrun(), "five CQEs into four slots, none released");
}
