//! CQE compression on the sim (basic layout, `sim/session.rs`'s model)
//! polled by the ring driver, which expands sessions in place: what is
//! held and how it is written, the room rule, events, the bytes written.

use super::*;
use crate::cqe::Cqe;
use crate::mini_cqe::is_title;

fn recv(qpn: u32, counter: u16, byte_cnt: u32) -> Cqe {
    Cqe {
        opcode: CqeOpcode::RESP_SEND,
        wqe_opcode: WqeOpcode(0),
        qpn,
        wqe_counter: counter,
        byte_cnt,
        imm: 0,
        solicited: false,
        format: 0,
        owner: false,
        syndrome: Syndrome(0),
        vendor_syndrome: 0,
        flags_rqpn: 0,
    }
}

/// A compressing CQ of `cnt` 64-byte slots and its poller.
fn zip_cq(dev: &Device, cnt: u32) -> (Cq, CompletionQueue) {
    let cq = dev.create_cq(cnt, 64).unwrap();
    cq.set_compression(true).unwrap();
    // SAFETY: a description from a live sim CQ the test keeps longer than
    // the poller, which touches ring memory only when called.
    let cqp = unsafe { CompletionQueue::new(&cq.dv()) }.unwrap();
    (cq, cqp)
}

/// Polls at most `k` CQEs: (counter, byte_cnt, qpn) each; writes the
/// consumer-index record after.
fn poll(cqp: &mut CompletionQueue, k: usize) -> Vec<(u16, u32, u32)> {
    let mut v = Vec::new();
    let mut cur = cqp.cursor::<64>();
    while v.len() < k {
        let Some(c) = cur.next() else { break };
        v.push((c.wqe_counter(), c.byte_cnt(), c.qpn()));
    }
    drop(cur);
    cqp.update_ci();
    v
}

#[test]
fn seven_receives_from_100_polled_3_3_3_give_100_to_106_then_the_next_cqe() {
    let dev = Device::new();
    let (cq, mut cqp) = zip_cq(&dev, 16);
    for k in 0..7u16 {
        cq.hook_push_cqe(&recv(0x11, 100 + k, 10 + k as u32), 5);
    }
    // Held until the pass ends.
    assert!(poll(&mut cqp, 1).is_empty());
    dev.process();
    let title = cq.hook_read_cqe(0);
    assert!(is_title(title[63]));
    assert_eq!(
        &title[44..48],
        &7u32.to_be_bytes(),
        "the title's byte_cnt is the count"
    );
    assert_eq!(cq.cqe_bytes_written(), 128, "a title and one array");
    // Another QP's CQE breaks nothing: a run of 1, written whole.
    cq.hook_push_cqe(&recv(0x12, 7, 99), 6);
    dev.process();
    assert_eq!(cq.cqe_bytes_written(), 192);
    let mut got = Vec::new();
    for _ in 0..3 {
        let p = poll(&mut cqp, 3);
        assert!(!p.is_empty());
        got.extend(p);
    }
    let want: Vec<_> = (0..7u16)
        .map(|k| (100 + k, 10 + k as u32, 0x11))
        .chain([(7, 99, 0x12)])
        .collect();
    assert_eq!(got, want);
    assert!(poll(&mut cqp, 3).is_empty());
    assert_eq!(
        cqp.ci(),
        8,
        "the session's 7 slots (the title's its first) and 1 consumed"
    );
}

#[test]
fn an_error_cqe_breaks_the_run_and_is_written_whole_after_it() {
    let dev = Device::new();
    let (cq, mut cqp) = zip_cq(&dev, 16);
    for k in 0..3u16 {
        cq.hook_push_cqe(&recv(0x11, k, 1), 5);
    }
    let mut e = recv(0x11, 3, 0);
    e.opcode = CqeOpcode::RESP_ERR;
    e.syndrome = Syndrome::WR_FLUSH_ERR;
    cq.hook_push_cqe(&e, 5);
    // The error forced the run out: no pass needed.
    assert!(is_title(cq.hook_read_cqe(0)[63]));
    assert_eq!(cq.hook_read_cqe(3)[63] >> 4, CqeOpcode::RESP_ERR.0);
    let mut cur = cqp.cursor::<64>();
    let mut ops = Vec::new();
    while let Some(c) = cur.next() {
        ops.push((c.opcode(), c.wqe_counter()));
    }
    assert_eq!(
        ops,
        [
            (CqeOpcode::RESP_SEND, 0),
            (CqeOpcode::RESP_SEND, 1),
            (CqeOpcode::RESP_SEND, 2),
            (CqeOpcode::RESP_ERR, 3)
        ]
    );
}

#[test]
fn responder_counters_that_skip_break_the_run() {
    let dev = Device::new();
    let (cq, mut cqp) = zip_cq(&dev, 16);
    for c in [1u16, 2, 5, 6] {
        cq.hook_push_cqe(&recv(0x11, c, 1), 5);
    }
    dev.process();
    // Two sessions of 2: 2 slots each.
    assert!(is_title(cq.hook_read_cqe(0)[63]) && is_title(cq.hook_read_cqe(2)[63]));
    let got: Vec<u16> = poll(&mut cqp, 8).iter().map(|c| c.0).collect();
    assert_eq!(got, [1, 2, 5, 6]);
}

#[test]
fn without_room_for_the_session_the_cqes_are_written_whole() {
    let dev = Device::new();
    let (cq, mut cqp) = zip_cq(&dev, 8);
    // 6 slots in use (nothing polled): 2 free, a session of 3 needs 3.
    cq.hook_start_at(0);
    for k in 0..6u16 {
        cq.hook_push_cqe(&recv(0x20 + k as u32, k, 1), 5);
    }
    dev.process();
    for k in 0..3u16 {
        cq.hook_push_cqe(&recv(0x11, 10 + k, 1), 5);
    }
    dev.process();
    assert!(!is_title(cq.hook_read_cqe(6)[63]));
    assert!(
        cq.overrun(),
        "the third, written whole, finds no slot: as without compression"
    );
    let got: Vec<u16> = poll(&mut cqp, 8).iter().map(|c| c.0).collect();
    assert_eq!(got, [0, 1, 2, 3, 4, 5, 10, 11]);
}

#[test]
fn a_session_across_the_ring_end_and_the_laps_after_it_poll_in_order() {
    let dev = Device::new();
    let (cq, mut cqp) = zip_cq(&dev, 16);
    cq.hook_start_at(13);
    cqp.start_at(13);
    cqp.update_ci();
    let mut next = 0u16;
    let mut got = Vec::new();
    // Sessions of 9, then of 5, 3, 2 and singles, lap after lap: holes of
    // one lap must not read as owned on the next.
    for n in [9u16, 5, 3, 2, 1, 9, 9, 4, 7, 1, 2] {
        for _ in 0..n {
            cq.hook_push_cqe(&recv(0x11, next, next as u32), 5);
            next += 1;
        }
        dev.process();
        got.extend(poll(&mut cqp, 64).iter().map(|c| c.0));
        assert!(!cq.overrun());
    }
    assert_eq!(got, (0..next).collect::<Vec<_>>());
}

#[test]
fn twenty_signaled_writes_complete_as_one_session_each_wr_once_in_order() {
    let dev = Device::new();
    let cq = dev.create_cq(64, 64).unwrap();
    cq.set_compression(true).unwrap();
    let peer_cq = dev.create_cq(64, 64).unwrap();
    let qa = dev.create_qp(PD, &cq, 32).unwrap();
    let qb = dev.create_qp(PD, &peer_cq, 32).unwrap();
    for (x, y) in [(&qa, &qb), (&qb, &qa)] {
        x.to_init(Access::QP_ALL).unwrap();
        x.to_rtr(y.qpn()).unwrap();
        x.to_rts().unwrap();
    }
    // SAFETY: descriptions from live sim objects the test keeps longer than
    // the drivers, which touch ring memory only when called.
    let mut sq = unsafe { SendQueue::new(&qa.dv(), qa.qpn(), 64, 32) }.unwrap();
    // SAFETY: as above.
    let mut cqp = unsafe { CompletionQueue::new(&cq.dv()) }.unwrap();
    let mut dst = vec![0u8; 64];
    // SAFETY: the Vec outlives all device work on it, done only inside
    // `dev.process()` calls while it lives.
    let kd = unsafe { dev.reg_mr(PD, dst.as_mut_ptr(), 64, Access::MR_ALL) }.unwrap();
    let w = write_wqe(Payload::Inline(&[1; 8]), dst.as_ptr() as u64, kd.rkey);
    for i in 0..20 {
        sq.post(&w, 1000 + i).unwrap();
    }
    sq.ring_doorbell();
    dev.process();
    assert!(is_title(cq.hook_read_cqe(0)[63]));
    assert_eq!(
        cq.cqe_bytes_written(),
        64 * 4,
        "a title and 3 arrays for 20"
    );
    let mut ids = Vec::new();
    while let Some(c) = cqp.poll_one() {
        assert_eq!(c.opcode, CqeOpcode::REQ);
        assert_eq!(c.wqe_opcode, WqeOpcode::RDMA_WRITE);
        assert_eq!(c.byte_cnt, 8);
        let id = sq
            .complete(c.wqe_counter)
            .expect("a WR outstanding at that counter");
        ids.push(id.wr_id);
    }
    assert_eq!(ids, (1000..1020).collect::<Vec<u64>>());
    assert_eq!(cqp.ci(), 20);
}

#[test]
fn an_armed_cq_raises_its_event_when_the_session_is_written() {
    let dev = Device::new();
    let (cq, mut cqp) = zip_cq(&dev, 16);
    cqp.arm(false).unwrap();
    for k in 0..4u16 {
        cq.hook_push_cqe(&recv(0x11, k, 1), 5);
    }
    assert_eq!(cq.completion_events(), 0, "held: not written yet");
    dev.process();
    assert_eq!(cq.completion_events(), 1);
    assert_eq!(poll(&mut cqp, 8).len(), 4);
}

#[test]
fn compression_is_refused_on_128_byte_cqes_and_off_by_default() {
    let dev = Device::new();
    let cq = dev.create_cq(8, 128).unwrap();
    assert!(matches!(
        cq.set_compression(true),
        Err(SimError::Unsupported { .. })
    ));
    assert!(!cq.compresses());
    let cq = dev.create_cq(8, 64).unwrap();
    assert!(!cq.compresses());
    for k in 0..3u16 {
        cq.hook_push_cqe(&recv(0x11, k, 1), 5);
    }
    assert_eq!(cq.cqe_bytes_written(), 3 * 64);
    assert!(!is_title(cq.hook_read_cqe(0)[63]));
}
