//! SEND with invalidate in the sim (`ops.rs` `deliver`, `mw.rs`
//! `remote_invalidate`): a peer's SEND_INVAL frees the responder's type-2
//! window and delivers the payload, its receive CQE RESP_SEND_INV with
//! the rkey in `imm_inval_pkey`; later accesses through the rkey are
//! refused and change nothing; each refusal (unknown key, an MR's rkey,
//! type 1, stale variant, another QP's window, a free window) delivers
//! nothing, completes the requester with REMOTE_INVAL_REQ_ERR and puts
//! an RC responder in ERR; UC drops a refused one; the rkey survives
//! scatter to CQE and CQE compression.

use super::windows::{bind, reg, run_umr, write};
use super::*;
use crate::cqe::{Cqe, INLINE_SCATTER_32};
use crate::driver::ReceiveQueue;
use crate::mini_cqe::is_title;
use crate::wqe::MwType;

/// A QP with its own CQ (64 slots), SQ driver and RQ (4 x 16 bytes).
struct End {
    s: Side,
    rq: ReceiveQueue,
}

fn end(dev: &Device, t: QpType, scatter: bool) -> End {
    let cq = dev.create_cq(64, 64).unwrap();
    let qp = dev.create_qp_of(t, PD, &cq, 16, 4, 16, None).unwrap();
    if scatter {
        assert_eq!(qp.set_scatter_to_cqe(true, false), Ok((true, false)));
    }
    // SAFETY: descriptions from live sim objects the End keeps longer than
    // the drivers, which touch ring memory only when called.
    let (sq, cqp, rq) = unsafe {
        (
            SendQueue::new(&qp.dv(), qp.qpn(), 128, 4).unwrap(),
            CompletionQueue::new(&cq.dv()).unwrap(),
            ReceiveQueue::new(&qp.dv()).unwrap(),
        )
    };
    End {
        s: Side {
            qp,
            _cq: cq,
            sq,
            cqp,
        },
        rq,
    }
}

/// Two connected QPs of type `t`, in RTS; `b` with responder scatter to
/// CQE if asked.
fn pair_of(dev: &Device, t: QpType, scatter: bool) -> (End, End) {
    let (a, b) = (end(dev, t, false), end(dev, t, scatter));
    let access = match t {
        QpType::Uc => Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        _ => Access::QP_ALL,
    };
    for (x, y) in [(&a, &b), (&b, &a)] {
        x.s.qp.to_init(access).unwrap();
        x.s.qp.to_rtr(y.s.qp.qpn()).unwrap();
        x.s.qp.to_rts().unwrap();
    }
    (a, b)
}

/// Posts receive `wr_id` of `len` bytes at `addr` (lkey `lkey`) on `e`.
fn post_recv(e: &mut End, addr: u64, len: u32, lkey: u32, wr_id: u64) {
    e.rq.post(&[DataSeg { addr, len, lkey }], wr_id).unwrap();
    e.rq.ring_doorbell();
}

/// `a` SENDs `payload` inline with invalidate of `rkey`, signaled and
/// solicited; the device runs; the requester's CQE.
fn send_inv(dev: &Device, a: &mut End, rkey: u32, payload: &[u8]) -> Cqe {
    let w = SendWqe {
        datagram: None,
        masked: None,
        atomic: None,
        opcode: WqeOpcode::SEND_INVAL,
        flags: CtrlFlags::CQ_UPDATE | CtrlFlags::SOLICITED,
        imm: rkey,
        remote: None,
        payload: Payload::Inline(payload),
    };
    a.s.sq.post(&w, 9).unwrap();
    a.s.sq.ring_doorbell();
    dev.process();
    let c = a.s.cqp.poll_one().expect("the SEND_INVAL's CQE");
    a.s.sq.complete(c.wqe_counter);
    c
}

const PAYLOAD: &[u8] = b"hello, window";

#[test]
fn a_send_with_invalidate_frees_the_window_and_reports_its_rkey() {
    let dev = Device::new();
    let mut mem = vec![0u8; 256];
    let base = mem.as_ptr() as u64;
    let mr = reg(
        &dev,
        &mut mem,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::MW_BIND,
    );
    let mut rbuf = vec![0xeeu8; 64];
    let rk = reg(&dev, &mut rbuf, Access::LOCAL_WRITE);
    let mw = dev.alloc_mw(PD, MwType::Two).unwrap();
    let (mut a, mut b) = pair_of(&dev, QpType::Rc, false);
    let w = bind(mw, 7, &mr, base, 256, MwType::Two);
    assert_eq!(run_umr(&dev, &mut b.s, &w), Syndrome(0));
    let rkey = mw | 7;
    assert_eq!(write(&dev, &mut a.s, base, rkey), Syndrome(0));
    mem.fill(0);
    post_recv(&mut b, rbuf.as_ptr() as u64, 64, rk.lkey, 5);
    let c = send_inv(&dev, &mut a, rkey, PAYLOAD);
    assert_eq!(
        (c.opcode, c.wqe_opcode, c.syndrome),
        (CqeOpcode::REQ, WqeOpcode::SEND_INVAL, Syndrome(0))
    );
    assert_eq!(dev.mw_state(mw), Some((rkey, false)), "the window is free");
    // The receive's CQE (b's slot 1: slot 0 was the bind's), byte for byte.
    let raw = b.s._cq.hook_read_cqe(1);
    assert_eq!(raw[63] >> 4, CqeOpcode::RESP_SEND_INV.0);
    assert_eq!(raw[63] & 0x0e, 0x02, "format 0, solicited");
    assert_eq!(&raw[36..40], &rkey.to_be_bytes(), "imm_inval_pkey");
    assert_eq!(&raw[44..48], &(PAYLOAD.len() as u32).to_be_bytes());
    assert_eq!(&raw[56..60], &b.s.qp.qpn().to_be_bytes(), "sop_drop_qpn");
    assert_eq!(&raw[60..62], &[0, 0], "RQ WQE 0");
    assert_eq!(&raw[55], &0, "no syndrome");
    {
        let mut cur = b.s.cqp.cursor::<64>();
        let r = cur.next().expect("the receive's CQE");
        assert_eq!(r.opcode(), CqeOpcode::RESP_SEND_INV);
        assert_eq!(r.invalidated_rkey(), Some(rkey));
        assert_eq!(r.decode().invalidated_rkey(), Some(rkey));
        assert_eq!(r.byte_cnt(), PAYLOAD.len() as u32);
        assert!(cur.next().is_none());
    }
    assert_eq!(&rbuf[..PAYLOAD.len()], PAYLOAD);
    assert!(rbuf[PAYLOAD.len()..].iter().all(|&x| x == 0xee));
    // The old rkey now opens nothing, and the WRITE changes nothing.
    assert_eq!(
        write(&dev, &mut a.s, base, rkey),
        Syndrome::REMOTE_ACCESS_ERR
    );
    assert!(mem.iter().all(|&x| x == 0));
    // A free type-2 window binds again (on a fresh pair).
    let (mut a, mut b) = pair_of(&dev, QpType::Rc, false);
    let w = bind(rkey, 8, &mr, base, 64, MwType::Two);
    assert_eq!(run_umr(&dev, &mut b.s, &w), Syndrome(0));
    assert_eq!(write(&dev, &mut a.s, base, mw | 8), Syndrome(0));
    assert_eq!(mem[..8], [0x5a; 8]);
}

/// Each rkey the responder may not invalidate: nothing delivered, the
/// windows unchanged, REMOTE_INVAL_REQ_ERR at the requester, the receive
/// completed with RESP_ERR / REMOTE_INVAL_REQ_ERR and the next flushed
/// (the responder in ERR).
#[test]
fn send_with_invalidate_refusals_deliver_nothing_and_fail_the_responder() {
    let dev = Device::new();
    let mut mem = vec![0u8; 256];
    let base = mem.as_ptr() as u64;
    let mr = reg(
        &dev,
        &mut mem,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::MW_BIND,
    );
    let mut rbuf = vec![0xeeu8; 64];
    let rk = reg(&dev, &mut rbuf, Access::LOCAL_WRITE);
    let one = dev.alloc_mw(PD, MwType::One).unwrap();
    let elsewhere = dev.alloc_mw(PD, MwType::Two).unwrap();
    let free = dev.alloc_mw(PD, MwType::Two).unwrap();
    // Bound on another pair's QP: the type-1 window (which no QP owns)
    // and a type-2 window (which that QP owns).
    let (_, mut binder) = pair_of(&dev, QpType::Rc, false);
    for (mw, t) in [(one, MwType::One), (elsewhere, MwType::Two)] {
        let w = bind(mw, 1, &mr, base, 64, t);
        assert_eq!(run_umr(&dev, &mut binder.s, &w), Syndrome(0));
    }
    for why in [
        "no such key",
        "an MR's rkey",
        "a free type-2 window",
        "a type-1 window",
        "a window bound to another QP",
        "a stale variant byte",
    ] {
        let (mut a, mut b) = pair_of(&dev, QpType::Rc, false);
        let mut watched = vec![one, elsewhere, free];
        let rkey = match why {
            "no such key" => 0x7fff_0001,
            "an MR's rkey" => mr.rkey,
            "a free type-2 window" => free,
            "a type-1 window" => one | 1,
            "a window bound to another QP" => elsewhere | 1,
            _ => {
                // Bound to the responder itself, named with variant 2 of 3.
                let mw = dev.alloc_mw(PD, MwType::Two).unwrap();
                let w = bind(mw, 3, &mr, base, 64, MwType::Two);
                assert_eq!(run_umr(&dev, &mut b.s, &w), Syndrome(0));
                watched.push(mw);
                mw | 2
            }
        };
        let state = |v: &[u32]| v.iter().map(|&m| dev.mw_state(m)).collect::<Vec<_>>();
        let before = state(&watched);
        let addr = rbuf.as_ptr() as u64;
        post_recv(&mut b, addr, 32, rk.lkey, 1);
        post_recv(&mut b, addr + 32, 32, rk.lkey, 2);
        let c = send_inv(&dev, &mut a, rkey, PAYLOAD);
        assert_eq!(
            (c.opcode, c.wqe_opcode, c.syndrome),
            (
                CqeOpcode::REQ_ERR,
                WqeOpcode::SEND_INVAL,
                Syndrome::REMOTE_INVAL_REQ_ERR
            ),
            "{why}"
        );
        dev.process();
        let r1 = b.s.cqp.poll_one().expect("the receive's CQE");
        let r2 = b.s.cqp.poll_one().expect("the flushed receive's CQE");
        assert_eq!(
            (r1.opcode, r1.syndrome, r1.wqe_counter, r1.imm),
            (CqeOpcode::RESP_ERR, Syndrome::REMOTE_INVAL_REQ_ERR, 0, 0),
            "{why}"
        );
        assert_eq!(r1.invalidated_rkey(), None, "{why}");
        assert_eq!(
            (r2.opcode, r2.syndrome, r2.wqe_counter),
            (CqeOpcode::RESP_ERR, Syndrome::WR_FLUSH_ERR, 1),
            "{why}"
        );
        assert!(b.s.cqp.poll_one().is_none(), "{why}");
        assert_eq!(b.s.qp.state(), QpState::Err, "{why}");
        assert!(rbuf.iter().all(|&x| x == 0xee), "{why}: nothing delivered");
        assert_eq!(state(&watched), before, "{why}: the windows unchanged");
    }
    // The type-1 and the other QP's windows still open what they did.
    let (mut a, _b) = pair_of(&dev, QpType::Rc, false);
    assert_eq!(write(&dev, &mut a.s, base, one | 1), Syndrome(0));
}

/// UC takes SEND_INVAL (rdma-core `MLX5_SUPPORTED_SEND_OPS_FLAGS_UC`): a
/// good one frees the window as on RC; a refused one is dropped by the
/// responder (no CQE, its receive still posted, its state RTS, the window
/// unchanged) and the requester succeeds.
#[test]
fn uc_invalidates_and_drops_what_it_refuses() {
    let dev = Device::new();
    let mut mem = vec![0u8; 256];
    let base = mem.as_ptr() as u64;
    let mr = reg(
        &dev,
        &mut mem,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::MW_BIND,
    );
    let mut rbuf = vec![0xeeu8; 64];
    let rk = reg(&dev, &mut rbuf, Access::LOCAL_WRITE);
    let mw = dev.alloc_mw(PD, MwType::Two).unwrap();
    let one = dev.alloc_mw(PD, MwType::One).unwrap();
    let (mut a, mut b) = pair_of(&dev, QpType::Uc, false);
    for (m, t) in [(mw, MwType::Two), (one, MwType::One)] {
        let w = bind(m, 4, &mr, base, 64, t);
        assert_eq!(run_umr(&dev, &mut b.s, &w), Syndrome(0));
    }
    let addr = rbuf.as_ptr() as u64;
    post_recv(&mut b, addr, 32, rk.lkey, 1);
    // Refused (a type-1 window): dropped.
    let c = send_inv(&dev, &mut a, one | 4, PAYLOAD);
    assert_eq!((c.opcode, c.syndrome), (CqeOpcode::REQ, Syndrome(0)));
    assert!(b.s.cqp.poll_one().is_none(), "nothing at the responder");
    assert_eq!(b.s.qp.state(), QpState::Rts);
    assert_eq!(dev.mw_state(one), Some((one | 4, true)));
    assert!(rbuf.iter().all(|&x| x == 0xee));
    // The same receive takes the good one.
    let c = send_inv(&dev, &mut a, mw | 4, PAYLOAD);
    assert_eq!((c.opcode, c.syndrome), (CqeOpcode::REQ, Syndrome(0)));
    let r = b.s.cqp.poll_one().expect("the receive's CQE");
    assert_eq!(
        (r.opcode, r.imm, r.wqe_counter, r.byte_cnt),
        (CqeOpcode::RESP_SEND_INV, mw | 4, 0, PAYLOAD.len() as u32)
    );
    assert_eq!(&rbuf[..PAYLOAD.len()], PAYLOAD);
    assert_eq!(dev.mw_state(mw), Some((mw | 4, false)));
    // On UC a refused WRITE is dropped too: memory unchanged.
    assert_eq!(write(&dev, &mut a.s, base, mw | 4), Syndrome(0));
    assert!(mem.iter().all(|&x| x == 0));
}

/// Scatter to CQE: a small SEND_INVAL's payload lies in the receive CQE
/// (bytes 0..32, `MLX5_INLINE_SCATTER_32`), and the rkey in its
/// `imm_inval_pkey` (bytes 36..40), untouched by the data.
#[test]
fn a_scattered_send_with_invalidate_keeps_its_rkey() {
    let dev = Device::new();
    let mut mem = vec![0u8; 64];
    let base = mem.as_ptr() as u64;
    let mr = reg(
        &dev,
        &mut mem,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::MW_BIND,
    );
    let mut rbuf = vec![0xeeu8; 64];
    let rk = reg(&dev, &mut rbuf, Access::LOCAL_WRITE);
    let mw = dev.alloc_mw(PD, MwType::Two).unwrap();
    let (mut a, mut b) = pair_of(&dev, QpType::Rc, true);
    let w = bind(mw, 0x5c, &mr, base, 64, MwType::Two);
    assert_eq!(run_umr(&dev, &mut b.s, &w), Syndrome(0));
    post_recv(&mut b, rbuf.as_ptr() as u64, 64, rk.lkey, 1);
    let data: Vec<u8> = (1..=32).collect();
    let c = send_inv(&dev, &mut a, mw | 0x5c, &data);
    assert_eq!(c.opcode, CqeOpcode::REQ);
    let raw = b.s._cq.hook_read_cqe(1);
    assert_eq!(raw[63] >> 4, CqeOpcode::RESP_SEND_INV.0);
    assert_eq!(raw[63] & 0x0c, INLINE_SCATTER_32);
    assert_eq!(&raw[..32], &data[..]);
    assert_eq!(&raw[36..40], &(mw | 0x5c).to_be_bytes());
    let mut cur = b.s.cqp.cursor::<64>();
    let r = cur.next().expect("the receive's CQE");
    assert_eq!(r.inline_data(), Some(&data[..]));
    assert_eq!(r.invalidated_rkey(), Some(mw | 0x5c));
    drop(cur);
    assert!(rbuf.iter().all(|&x| x == 0xee), "nothing DMAed");
    assert_eq!(b.s.qp.scatter_cqes(), 1);
    assert_eq!(dev.mw_state(mw), Some((mw | 0x5c, false)));
}

/// On a compressing CQ, RESP_SEND_INV CQEs of one rkey make a session
/// whose expanded CQEs each carry it (the title's `imm_inval_pkey`);
/// another rkey breaks the run, as any other shared field does.
#[test]
fn compressed_send_with_invalidate_receives_keep_the_rkey() {
    let dev = Device::new();
    let cq = dev.create_cq(16, 64).unwrap();
    cq.set_compression(true).unwrap();
    // SAFETY: a description from a live sim CQ the test keeps longer than
    // the poller, which touches ring memory only when called.
    let mut cqp = unsafe { CompletionQueue::new(&cq.dv()) }.unwrap();
    let inv = |counter: u16, rkey: u32| Cqe {
        opcode: CqeOpcode::RESP_SEND_INV,
        wqe_opcode: WqeOpcode(0),
        qpn: 0x21,
        wqe_counter: counter,
        byte_cnt: 100 + counter as u32,
        imm: rkey,
        solicited: false,
        format: 0,
        owner: false,
        syndrome: Syndrome(0),
        vendor_syndrome: 0,
        flags_rqpn: 0,
    };
    for k in 0..5 {
        cq.hook_push_cqe(&inv(k, 0xabcd_ef01), 3);
    }
    cq.hook_push_cqe(&inv(5, 0x1234_5601), 3);
    dev.process();
    assert!(is_title(cq.hook_read_cqe(0)[63]), "a session of 5");
    assert_eq!(cq.hook_read_cqe(5)[63] & 0x0c, 0, "the sixth written whole");
    let mut cur = cqp.cursor::<64>();
    let mut got = Vec::new();
    while let Some(c) = cur.next() {
        got.push((
            c.opcode(),
            c.wqe_counter(),
            c.byte_cnt(),
            c.invalidated_rkey(),
        ));
    }
    let want: Vec<_> = (0..6u16)
        .map(|k| {
            let rkey = if k < 5 { 0xabcd_ef01 } else { 0x1234_5601 };
            (CqeOpcode::RESP_SEND_INV, k, 100 + k as u32, Some(rkey))
        })
        .collect();
    assert_eq!(got, want);
}

/// DC: a DCI may post SEND_INVAL (`MLX5_SUPPORTED_SEND_OPS_FLAGS_DCI` =
/// RC's), but no window is bound to a DCT (binds run on RC and UC QPs),
/// so the DCT refuses it: REMOTE_INVAL_REQ_ERR at the DCI, which goes to
/// ERR; the SRQ receive completes with it, nothing delivered; the DCT
/// stays in RTR (as for its other errors).
#[test]
fn a_dcis_send_with_invalidate_is_refused_and_spares_the_dct() {
    use crate::sim::dc_tests::{completions, drain, post, rig, seg, wqe, KEY};
    let r = rig();
    let mut t = r.dct(Access::LOCAL_WRITE, KEY, true);
    let mut d = r.dci(7);
    let dctn = t.qp.dctn().unwrap();
    r.recv(&mut t, 100, 64, 9);
    let mw = r
        .dev
        .alloc_mw(crate::sim::dc_tests::PD, MwType::Two)
        .unwrap();
    let g = seg(dctn, KEY);
    let sge = [r.sge(10, 40)];
    let mut w = wqe(&g, WqeOpcode::SEND_INVAL, None, Payload::Sges(&sge));
    w.imm = mw;
    post(&mut d, &w, 1);
    r.dev.process();
    let c = completions(&mut d);
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].0.opcode, c[0].0.wqe_opcode, c[0].0.syndrome),
        (
            CqeOpcode::REQ_ERR,
            WqeOpcode::SEND_INVAL,
            Syndrome::REMOTE_INVAL_REQ_ERR
        )
    );
    assert_eq!(d.qp.state(), QpState::Err);
    let rc = drain(&mut t.cqp);
    assert_eq!(rc.len(), 1);
    assert_eq!(
        (rc[0].opcode, rc[0].syndrome),
        (CqeOpcode::RESP_ERR, Syndrome::REMOTE_INVAL_REQ_ERR)
    );
    assert_eq!(t.qp.state(), QpState::Rtr);
    assert!(r.dst[100..164].iter().all(|&b| b == 0), "nothing delivered");
    assert_eq!(r.dev.mw_state(mw), Some((mw, false)));
}
