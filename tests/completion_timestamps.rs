//! Completion timestamps (`QpConfig::completion_timestamps`,
//! `Pd::create_timestamped_shared_cq`) on the sim, through the public API:
//! on a QP's own CQ (sends and receives, polled one at a time and many at
//! once, and a CQ of 128-byte CQEs), on a QP on an SRQ and on a shared CQ,
//! every successful completion carries a non-zero timestamp, non-decreasing
//! in completion order; an error completion and every completion of a CQ
//! not asked for timestamps carry 0; and the refusals (a shared CQ's QP
//! asking on its own, timestamps with CQE compression).

use rdma_direct::*;

#[path = "support/sim.rs"]
mod support;
use support::*;

fn ts_cfg() -> QpConfig {
    QpConfig {
        max_send_wr: 64,
        max_recv_wr: 64,
        completion_timestamps: true,
        ..QpConfig::default()
    }
}

/// Every completion succeeded and has a timestamp, non-decreasing in the
/// order polled.
fn assert_stamped(what: &str, got: &[Completion]) {
    assert!(!got.is_empty(), "{what}: no completion");
    for c in got {
        assert!(c.status.is_ok(), "{what}: {c:?}");
        assert_ne!(c.timestamp, 0, "{what}: no timestamp: {c:?}");
    }
    for w in got.windows(2) {
        assert!(
            w[0].timestamp <= w[1].timestamp,
            "{what}: timestamps go back: {:?} then {:?}",
            w[0],
            w[1]
        );
    }
}

/// Polls `n` completions of `q` one at a time.
fn poll_singly(q: &mut Qp, n: usize) -> Vec<Completion> {
    (0..n)
        .flat_map(|_| poll_n_with(|wc| q.poll(&mut wc[..1]), 1))
        .collect()
}

/// `n` signaled 8-byte WRITEs (wr_ids `first..`), one post each, so that
/// their CQEs are written at different times.
fn writes(a: &mut Qp, e: &Env, first: u64, n: u64) {
    let sg = [Sge::new(&e.src, 0, 8).unwrap()];
    for id in first..first + n {
        a.post_send(&[SendWr::rdma_write(id, &sg, remote(&e.dst, id * 8)).signaled()])
            .unwrap();
    }
}

/// Sends `n` 16-byte messages from `a` into `b`'s posted receives, and
/// returns (send completions, receive completions), each polled `singly`
/// or 16 at a time.
fn sends(a: &mut Qp, b: &mut Qp, e: &Env, n: usize, singly: bool) -> [Vec<Completion>; 2] {
    let rsg: Vec<Sge> = (0..n)
        .map(|k| Sge::new(&e.dst, 4096 + k * 64, 64).unwrap())
        .collect();
    let recvs: Vec<RecvWr> = (0..n)
        .map(|k| RecvWr::new(100 + k as u64, std::slice::from_ref(&rsg[k])))
        .collect();
    b.post_recv(&recvs).unwrap();
    let sg = [Sge::new(&e.src, 0, 16).unwrap()];
    for k in 0..n as u64 {
        a.post_send(&[SendWr::send(k, &sg).signaled()]).unwrap();
    }
    if singly {
        [poll_singly(a, n), poll_singly(b, n)]
    } else {
        [poll_n(a, n), poll_n(b, n)]
    }
}

#[test]
fn an_own_cq_with_timestamps_stamps_every_completion_in_order() {
    let e = env();
    let (mut a, mut b) = e.pd.create_connected_pair(&ts_cfg()).unwrap();
    writes(&mut a, &e, 1, 8);
    let got = poll_n(&mut a, 8);
    assert_eq!(
        got.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        (1..9).collect::<Vec<_>>()
    );
    assert_stamped("8 WRITEs polled together", &got);
    writes(&mut a, &e, 9, 4);
    let more = poll_singly(&mut a, 4);
    assert_stamped("4 WRITEs polled singly", &more);
    assert!(
        got[7].timestamp <= more[0].timestamp,
        "{:?} then {:?}",
        got[7],
        more[0]
    );
    for singly in [false, true] {
        let [s, r] = sends(&mut a, &mut b, &e, 6, singly);
        assert_stamped("send completions", &s);
        assert_stamped("receive completions", &r);
        assert!(r
            .iter()
            .all(|c| c.opcode == WcOpcode::RECV && c.byte_len == 16));
    }
    // Split: the halves post, the QP polls (its retiring copy's general path).
    let (mut tx, _rx) = a.split().unwrap();
    let sg = [Sge::new(&e.src, 0, 8).unwrap()];
    for id in 30..34u64 {
        tx.post_send(&[SendWr::rdma_write(id, &sg, remote(&e.dst, 0)).signaled()])
            .unwrap();
    }
    let split = poll_n(&mut a, 4);
    assert_eq!(
        split.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        (30..34).collect::<Vec<_>>()
    );
    assert_stamped("WRITEs of a send half", &split);
}

#[test]
fn without_the_option_every_timestamp_is_zero() {
    let e = env();
    let cfg = QpConfig {
        completion_timestamps: false,
        ..ts_cfg()
    };
    let (mut a, mut b) = e.pd.create_connected_pair(&cfg).unwrap();
    writes(&mut a, &e, 1, 4);
    let mut got = poll_n(&mut a, 4);
    let [s, r] = sends(&mut a, &mut b, &e, 4, true);
    got.extend(s.into_iter().chain(r));
    assert!(
        got.iter().all(|c| c.status.is_ok() && c.timestamp == 0),
        "{got:?}"
    );
    // A shared CQ without the option.
    let mut cq = e.pd.create_shared_cq(64).unwrap();
    let qa = cq.create_qp(&cfg).unwrap();
    let mut peer = e.pd.create_qp(&cfg).unwrap();
    Qp::connect_loopback(cq.qp_mut(qa), &mut peer).unwrap();
    writes(cq.qp_mut(qa), &e, 1, 3);
    let got = poll_n_with(|wc| cq.poll(wc), 3);
    assert!(
        got.iter().all(|c| c.status.is_ok() && c.timestamp == 0),
        "{got:?}"
    );
}

#[test]
fn an_error_completion_has_no_timestamp_and_what_came_before_has() {
    let e = env();
    let (mut a, _b) = e.pd.create_connected_pair(&ts_cfg()).unwrap();
    writes(&mut a, &e, 1, 2);
    let sg = [Sge::new(&e.src, 0, 8).unwrap()];
    let bad = RemoteAddr {
        addr: 0x10,
        rkey: Rkey(0xdead),
    };
    a.post_send(&[SendWr::rdma_write(3, &sg, bad).signaled()])
        .unwrap();
    let got = poll_n(&mut a, 3);
    assert_stamped("the WRITEs before the error", &got[..2]);
    assert_eq!(
        (got[2].wr_id, got[2].status),
        (3, WcStatus::REM_ACCESS_ERR),
        "{got:?}"
    );
    assert_eq!(got[2].timestamp, 0, "{:?}", got[2]);
}

#[test]
fn a_qp_on_an_srq_and_a_cq_of_128_byte_cqes_stamp_their_completions() {
    let e = env();
    // On an SRQ: receives through the SRQ's poll.
    let mut srq = e.pd.create_srq(16, 1).unwrap();
    let mut server = e.pd.create_qp_on_srq(&ts_cfg(), &srq).unwrap();
    let mut client = e.pd.create_qp(&ts_cfg()).unwrap();
    Qp::connect_loopback(&mut server, &mut client).unwrap();
    let rsg: Vec<Sge> = (0..8)
        .map(|k| Sge::new(&e.dst, k * 64, 64).unwrap())
        .collect();
    let recvs: Vec<RecvWr> = (0..8)
        .map(|k| RecvWr::new(k as u64, std::slice::from_ref(&rsg[k])))
        .collect();
    srq.post_recv(&recvs).unwrap();
    let sg = [Sge::new(&e.src, 0, 8).unwrap()];
    for k in 0..8 {
        client
            .post_send(&[SendWr::send(k, &sg).signaled()])
            .unwrap();
    }
    assert_stamped("sends to the SRQ's QP", &poll_n(&mut client, 8));
    let mut got = poll_singly(&mut server, 4);
    got.extend(poll_n(&mut server, 4));
    assert_stamped("receives of the SRQ", &got);
    // 128-byte CQEs (scatter to CQE of up to 64 bytes): the data lands.
    let cfg = QpConfig {
        inline_recv: InlineRecv::Up64,
        ..ts_cfg()
    };
    let (mut a, mut b) = e.pd.create_connected_pair(&cfg).unwrap();
    e.src.write(0, &[0x5a; 16]).unwrap();
    let [s, r] = sends(&mut a, &mut b, &e, 5, false);
    assert_stamped("sends, 128-byte CQEs", &s);
    assert_stamped("scattered receives, 128-byte CQEs", &r);
    let mut landed = [0u8; 16];
    e.dst.read(4096 + 4 * 64, &mut landed).unwrap();
    assert_eq!(landed, [0x5a; 16]);
}

#[test]
fn a_timestamped_shared_cq_stamps_the_completions_of_every_qp() {
    let e = env();
    let cfg = QpConfig {
        completion_timestamps: false,
        ..ts_cfg()
    };
    let mut cq =
        e.pd.create_timestamped_shared_cq(CqSizing::new().qp(&cfg).qp(&cfg).depth().unwrap())
            .unwrap();
    let (qa, qb) = (cq.create_qp(&cfg).unwrap(), cq.create_qp(&cfg).unwrap());
    let (mut pa, mut pb) = (e.pd.create_qp(&cfg).unwrap(), e.pd.create_qp(&cfg).unwrap());
    Qp::connect_loopback(cq.qp_mut(qa), &mut pa).unwrap();
    Qp::connect_loopback(cq.qp_mut(qb), &mut pb).unwrap();
    for round in 0..3 {
        writes(cq.qp_mut(qa), &e, round * 10, 3);
        writes(cq.qp_mut(qb), &e, round * 10 + 5, 3);
    }
    let got = poll_n_with(|wc| cq.poll(wc), 18);
    assert_stamped("a shared CQ of two QPs", &got);
    // Its QPs may not ask on their own.
    assert!(matches!(cq.create_qp(&ts_cfg()), Err(Error::Invalid(_))));
}

#[test]
fn timestamps_are_refused_with_compression_before_anything_is_made() {
    let e = env();
    let cfg = QpConfig {
        cqe_compression: true,
        ..ts_cfg()
    };
    assert!(matches!(e.pd.create_qp(&cfg), Err(Error::Invalid(_))));
    assert!(matches!(
        e.pd.create_connected_pair(&cfg),
        Err(Error::Invalid(_))
    ));
    let mut cq = e.pd.create_compressed_shared_cq(64).unwrap();
    assert!(matches!(cq.create_qp(&ts_cfg()), Err(Error::Invalid(_))));
    assert!(cq.is_empty());
}
