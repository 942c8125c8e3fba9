//! Completions of the in-place posts of `Qp::post_send`, on the sim: CQ
//! credits on a shallow own CQ and on a shared CQ (`CqFull` comes and goes,
//! never an overrun), MRs that wait for the completions of the WRs naming
//! them, error CQEs then flushes, the fields of every completion, and
//! `RDMA_DIRECT_TRACE` showing every WQE and CQE.

use rdma_direct::testing::QpHooks;
use rdma_direct::*;
use std::time::{Duration, Instant};

#[path = "support/in_place.rs"]
mod support;
use support::*;

/// A shallow CQ counts credits: CqFull comes, no overrun, ever.
#[test]
fn shallow_cq_credits() {
    let e = env();
    let c = QpConfig {
        cq_depth: Some(2),
        ..cfg(16, 16)
    };
    let (mut a, mut b) = e.pd.create_connected_pair(&c).unwrap();
    let sg = [Sge::new(&e.src, 0, 8).unwrap()];
    let rsg = [Sge::new(&e.dst, 4096, 64).unwrap()];
    let mut got_full = false;
    for i in 0..10u64 {
        match a.post_send(&[SendWr::rdma_write(i, &sg, remote(&e.dst, 0)).signaled()]) {
            Ok(()) => {}
            Err(Error::CqFull) => {
                got_full = true;
                break;
            }
            Err(x) => panic!("{x:?}"),
        }
    }
    assert!(got_full);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(a.sim_hook().unwrap().cq_overrun(), (false, 0));
    // Receives too.
    for i in 0..4u64 {
        let r = b.post_recv(&[RecvWr::new(i, &rsg)]);
        println!("recv {i}: {r:?}");
    }
    let got = poll_n(&mut a, 2);
    assert_eq!(got.iter().map(|c| c.wr_id).collect::<Vec<_>>(), vec![0, 1]);
    // batch of 3 on depth 2: never fits -> Invalid
    let w = SendWr::rdma_write(1, &sg, remote(&e.dst, 0));
    let err = refused(&mut a, &[w, w, w]);
    assert!(matches!(err, Error::NeverFits { wrs: 3, .. }), "{err:?}");
}

#[test]
fn a_batch_as_deep_as_the_cq_is_not_cqfull_for_ever() {
    let e = env();
    let c = QpConfig {
        cq_depth: Some(2),
        ..cfg(4, 0)
    };
    let (mut a, _b) = e.pd.create_connected_pair(&c).unwrap();
    let sg = [Sge::new(&e.src, 0, 8).unwrap()];
    let w = SendWr::rdma_write(1, &sg, remote(&e.dst, 0));
    a.post_send(&[w]).unwrap();
    let t = Instant::now();
    let mut wc = [Completion::default(); 4];
    let mut last = None;
    while t.elapsed() < PATIENCE {
        match a.post_send(&[w, w]) {
            Ok(()) => return,
            Err(e) => last = Some(format!("{e:?}")),
        }
        assert_eq!(a.poll(&mut wc).unwrap(), 0);
        std::thread::yield_now();
    }
    panic!("a batch of 2 on a CQ of 2 never posts: {last:?}");
}

#[test]
fn in_place_posts_on_a_shared_cq() {
    let e = env();
    let c = cfg(8, 8);
    let mut cq = e.pd.create_shared_cq(4).unwrap();
    let x = cq.create_qp(&c).unwrap();
    let y = cq.create_qp(&c).unwrap();
    let (mut px, mut py) = (e.pd.create_qp(&c).unwrap(), e.pd.create_qp(&c).unwrap());
    Qp::connect_loopback(cq.qp_mut(x), &mut px).unwrap();
    Qp::connect_loopback(cq.qp_mut(y), &mut py).unwrap();
    let sg = [Sge::new(&e.src, 0, 8).unwrap()];
    let d = [5u8; 20];
    let by = [Sge::bytes(&d).unwrap()];
    let to = remote(&e.dst, 0);
    // poll on member QP: SharedCq error
    let mut wc = [Completion::default(); 4];
    let err = cq.qp_mut(x).poll(&mut wc).unwrap_err();
    assert!(matches!(err, Error::SharedCq { .. }), "{err:?}");
    // bytes in a non-inline on a shared QP
    let err = refused(cq.qp_mut(x), &[SendWr::rdma_write(1, &by, to)]);
    assert!(matches!(err, Error::BytesSge), "{err:?}");
    // unsignaled streams across both QPs with credits
    let t = Instant::now();
    let mut done = 0;
    let mut i = 0u64;
    let mut seen = Vec::new();
    while done < 400 {
        assert!(t.elapsed() < PATIENCE, "stuck at {done}");
        let q = if i.is_multiple_of(2) { x } else { y };
        let w = match i % 4 {
            0 => SendWr::rdma_write(i, &sg, to),
            1 => SendWr::rdma_write(i, &by, to).inline(),
            2 => SendWr::rdma_write(i, &sg, to).signaled(),
            _ => SendWr::send(i, &by).inline().signaled(),
        };
        let r = if i.is_multiple_of(5) {
            cq.qp_mut(q).post_send(&[
                w,
                SendWr {
                    wr_id: i + 1000000,
                    ..w
                },
            ])
        } else {
            cq.qp_mut(q).post_send(&[w])
        };
        match r {
            Ok(()) => {
                done += 1;
                i += 1;
            }
            Err(Error::CqFull) | Err(Error::QueueFull) => {
                let n = cq.poll(&mut wc).unwrap();
                seen.extend_from_slice(&wc[..n]);
                // peers need receives for SENDs
            }
            Err(e) => panic!("{i}: {e:?}"),
        }
        // keep receives posted at peers
        let rsg = [Sge::new(&e.dst, 8192, 64).unwrap()];
        let _ = px.post_recv(&[RecvWr::new(0, &rsg)]);
        let _ = py.post_recv(&[RecvWr::new(0, &rsg)]);
        let _ = px.poll(&mut wc);
        let _ = py.poll(&mut wc);
    }
    for c in &seen {
        assert!(c.status.is_ok(), "{c:?}");
    }
}

#[test]
fn dropped_mrs_wait_for_fast_path_wrs() {
    let e = env();
    let (mut a, _b) = e.pd.create_connected_pair(&cfg(16, 16)).unwrap();
    let base = e.pd.live_mrs();
    let m1 = e.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let m2 =
        e.pd.alloc_mr(
            4096,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let m3 = e.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    assert_eq!(e.pd.live_mrs(), base + 3);
    {
        let s1 = [Sge::new(&m1, 0, 8).unwrap()];
        let s3 = [Sge::new(&m3, 0, 8).unwrap()];
        // single unsignaled, fast path
        a.post_send(&[SendWr::rdma_write(1, &s1, remote(&m2, 0))])
            .unwrap();
        // batch unsignaled, fast path
        a.post_send(&[
            SendWr::rdma_read(2, &s3, remote(&m2, 0)),
            SendWr::rdma_write(3, &s3, remote(&m2, 8)),
        ])
        .unwrap();
    }
    drop((m1, m2, m3));
    assert_eq!(e.pd.live_mrs(), base + 3, "dropped while WRs outstanding");
    assert!(drain(&mut a).is_empty());
    assert_eq!(e.pd.live_mrs(), base + 3, "still outstanding (unsignaled)");
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    a.post_send(&[SendWr::rdma_write(4, &s, remote(&e.dst, 0)).signaled()])
        .unwrap();
    assert_eq!(poll_n(&mut a, 1)[0].wr_id, 4);
    e.pd.reclaim();
    assert_eq!(e.pd.live_mrs(), base);
    // Inline with an MR: dropped MR and reset
    let m4 = e.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    {
        let s4 = [Sge::new(&m4, 0, 8).unwrap()];
        a.post_send(&[SendWr::rdma_write(5, &s4, remote(&e.dst, 0)).inline()])
            .unwrap();
    }
    drop(m4);
    a.modify(QpState::Reset, &QpAttr::default()).unwrap();
    assert_eq!(e.pd.live_mrs(), base);
}

#[test]
fn errors_then_flush_through_fast_path() {
    let e = env();
    let (mut a, mut b) = e.pd.create_connected_pair(&cfg(16, 16)).unwrap();
    let sg = [Sge::new(&e.src, 0, 8).unwrap()];
    let d = [1u8; 16];
    let by = [Sge::bytes(&d).unwrap()];
    let bad = RemoteAddr {
        addr: 0x10,
        rkey: Rkey(0xdead),
    };
    let to = remote(&e.dst, 0);
    a.post_send(&[SendWr::rdma_write(1, &sg, to)]).unwrap();
    a.post_send(&[SendWr::rdma_write(2, &sg, bad)]).unwrap(); // unsignaled error
    a.post_send(&[SendWr::rdma_write(3, &sg, to)]).unwrap();
    a.post_send(&[SendWr::rdma_write(4, &by, to).inline()])
        .unwrap();
    a.post_send(&[SendWr::rdma_read(5, &sg, to), SendWr::send(6, &sg)])
        .unwrap();
    let got = poll_n(&mut a, 5);
    println!("{got:#?}");
    let ids: Vec<_> = got.iter().map(|c| (c.wr_id, c.status.name())).collect();
    println!("{ids:?}");
    assert_eq!(got[0].wr_id, 2);
    assert!(!got[0].status.is_ok());
    for (c, id) in got[1..].iter().zip([3, 4, 5, 6]) {
        assert_eq!(c.wr_id, id);
        assert_eq!(c.status, WcStatus::WR_FLUSH_ERR);
    }
    // Device in ERR now; crate state still RTS. Post more via fast paths: flushed.
    a.post_send(&[SendWr::rdma_write(7, &sg, to)]).unwrap();
    a.post_send(&[SendWr::rdma_write(8, &by, to).inline()])
        .unwrap();
    a.post_send(&[
        SendWr::rdma_write(9, &sg, to),
        SendWr::rdma_write(10, &sg, to),
    ])
    .unwrap();
    let got = poll_n(&mut a, 4);
    assert_eq!(
        got.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        vec![7, 8, 9, 10]
    );
    for c in &got {
        assert_eq!(c.status, WcStatus::WR_FLUSH_ERR, "{c:?}");
        assert_eq!(c.qp_num, a.qp_num());
    }
    // b's got nothing posted; it should also be in ERR (class C errors put both)
    println!("b: {:?}", drain(&mut b));
    // reset and reuse
    a.modify(QpState::Reset, &QpAttr::default()).unwrap();
    b.modify(QpState::Reset, &QpAttr::default()).unwrap();
    Qp::connect_loopback(&mut a, &mut b).unwrap();
    for i in 0..50u64 {
        a.post_send(&[SendWr::rdma_write(100 + i, &sg, to).signaled()])
            .unwrap();
        let c = poll_n(&mut a, 1);
        assert_eq!((c[0].wr_id, c[0].status), (100 + i, WcStatus::SUCCESS));
    }
    // out of len 0 with a CQE waiting
    a.post_send(&[SendWr::rdma_write(200, &sg, to).signaled()])
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let mut none: [Completion; 0] = [];
    assert_eq!(a.poll(&mut none).unwrap(), 0);
    assert_eq!(poll_n(&mut a, 1)[0].wr_id, 200);
}

#[test]
fn singles_and_pairs_complete_alike_on_both_sides() {
    let e = env();
    let (mut a, mut b) = e.pd.create_connected_pair(&cfg(16, 16)).unwrap();
    let sg = [Sge::new(&e.src, 0, 100).unwrap()];
    let d = [1u8; 33];
    let by = [Sge::bytes(&d).unwrap()];
    let rsg = [Sge::new(&e.dst, 8192, 256).unwrap()];
    let to = remote(&e.dst, 0);
    for i in 0..6 {
        b.post_recv(&[RecvWr::new(50 + i, &rsg)]).unwrap();
    }
    let wrs = [
        SendWr::rdma_write(1, &sg, to).signaled(),
        SendWr::rdma_write(2, &sg, to).imm(0xabcd).signaled(),
        SendWr::send(3, &sg).signaled(),
        SendWr::send(4, &sg).imm(0x1234).signaled(),
        SendWr::rdma_read(5, &sg, to).signaled(),
        SendWr::rdma_write(6, &by, to).inline().signaled(),
        SendWr::send(7, &by).inline().signaled(),
        SendWr::send(8, &by).imm(77).inline().signaled().solicited(),
        SendWr::rdma_write(9, &by, to).imm(78).inline().signaled(),
    ];
    let mut single = Vec::new();
    for w in &wrs {
        a.post_send(std::slice::from_ref(w)).unwrap();
        single.extend(poll_n(&mut a, 1));
    }
    let rs = poll_n(&mut b, 6);
    println!("{single:#?}\n{rs:#?}");
    for i in 0..6 {
        b.post_recv(&[RecvWr::new(50 + i, &rsg)]).unwrap();
    }
    // the same as pairs (checked path for inline, fast for the rest)
    let mut batch = Vec::new();
    for w in wrs.chunks(2) {
        a.post_send(w).unwrap();
        batch.extend(poll_n(&mut a, w.len()));
    }
    let rb = poll_n(&mut b, 6);
    let key = |c: &Completion| {
        (
            c.wr_id,
            c.status,
            c.opcode,
            c.byte_len,
            c.imm,
            c.qp_num,
            c.vendor_err,
        )
    };
    assert_eq!(
        single.iter().map(key).collect::<Vec<_>>(),
        batch.iter().map(key).collect::<Vec<_>>()
    );
    assert_eq!(
        rs.iter().map(key).collect::<Vec<_>>(),
        rb.iter().map(key).collect::<Vec<_>>()
    );
}

/// The child process of `trace_shows_every_wqe_and_cqe`, which runs it
/// (with `--ignored`) under `RDMA_DIRECT_TRACE=1` and checks its stderr; on
/// its own it checks nothing, so it is ignored.
#[test]
#[ignore = "the child of trace_shows_every_wqe_and_cqe, which runs it"]
fn in_place_trace_child() {
    assert!(
        std::env::var("FAST_PATHS_TRACE_CHILD").is_ok(),
        "run by trace_shows_every_wqe_and_cqe"
    );
    let e = env();
    let c = QpConfig {
        max_inline: 220,
        ..cfg(4, 4)
    };
    let (mut a, _b) = e.pd.create_connected_pair(&c).unwrap();
    let sg = [Sge::new(&e.src, 0, 8).unwrap()];
    let d = [3u8; 200];
    let to = remote(&e.dst, 0);
    let mut expect_posts = 0;
    let mut expect_cqes = 0;
    for i in 0..40u64 {
        let len = (i as usize * 37) % 201;
        let by = [Sge::bytes(&d[..len]).unwrap()];
        let wrs: Vec<SendWr> = match i % 4 {
            0 => vec![SendWr::rdma_write(i, &sg, to).signaled()],
            1 => vec![SendWr::rdma_write(i, &by, to).inline().signaled()],
            2 => vec![
                SendWr::rdma_write(i, &sg, to).signaled(),
                SendWr::rdma_read(i + 1000, &sg, to).signaled(),
            ],
            _ => vec![SendWr::rdma_write(i, &sg, to)],
        };
        a.post_send(&wrs).unwrap();
        expect_posts += wrs.len();
        let sig = wrs
            .iter()
            .filter(|w| w.flags.contains(SendFlags::SIGNALED))
            .count();
        expect_cqes += sig;
        if sig > 0 {
            poll_n(&mut a, sig);
        } else {
            // unsignaled: the next signaled one retires it
        }
    }
    eprintln!("FAST_PATHS expect posts {expect_posts} cqes>= {expect_cqes}");
}

#[test]
fn trace_shows_every_wqe_and_cqe() {
    let err = traced_child("in_place_trace_child", "FAST_PATHS_TRACE_CHILD");
    let posts = err
        .lines()
        .filter(|l| l.contains("rdma-direct trace: QP") && l.contains(" post wr_id"))
        .count();
    let cqes = err
        .lines()
        .filter(|l| l.contains("rdma-direct trace: CQ") && l.contains("CQE ci"))
        .count();
    let undecodable = err.lines().filter(|l| l.contains("undecodable")).count();
    let exp = err.lines().find(|l| l.starts_with("FAST_PATHS")).unwrap();
    println!("{exp}: got posts {posts} cqes {cqes} undecodable {undecodable}");
    for l in err.lines().filter(|l| l.contains("trace")).take(12) {
        println!("{l}");
    }
    let want: usize = exp.split_whitespace().nth(3).unwrap().parse().unwrap();
    let wantc: usize = exp.split_whitespace().nth(5).unwrap().parse().unwrap();
    assert_eq!(posts, want);
    assert!(cqes >= wantc);
    assert_eq!(undecodable, 0);
}

/// What a receive's completion says (every field; the QPNs as whether
/// they are the receiver's and, in `src_qp`, the sender's, a fresh pair's
/// QPNs being new ones).
type RecvKey = (
    u64,
    WcStatus,
    WcOpcode,
    u32,
    Option<u32>,
    bool,
    u32,
    (bool, bool),
);

fn recv_key(c: &Completion, rx: u32, tx: u32) -> RecvKey {
    (
        c.wr_id,
        c.status,
        c.opcode,
        c.byte_len,
        c.imm,
        c.qp_num == rx,
        c.vendor_err,
        (c.src_qp.qpn() == tx, c.src_qp.grh()),
    )
}

/// How `recv_case` polls its receiver.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Rx {
    /// Its own CQ, into a one-entry slice: one CQE a poll, the inlined
    /// poll's (`DirectQp::poll_cqes`).
    One,
    /// Its own CQ, into a slice of 16 once every CQE is there: the loop
    /// of a poll of many (`poll_more`, its receives in `poll_recvs`).
    Many,
    /// A shared CQ: every CQE decoded and retired by the general path
    /// (`DirectCq::take_shared`, `retire`).
    Shared,
}

/// The traffic of `receives_polled_alike_by_the_fast_and_general_paths`'s
/// `case` on a fresh pair whose receiver `rx` polls: the receiver's
/// completions, and whether its RQ took 8 receives again after them
/// (every receive retired, its CQ credits back).
fn recv_case(e: &Env, case: &str, rx: Rx) -> (Vec<RecvKey>, bool) {
    let rsg = [Sge::new(&e.dst, 8192, 256).unwrap()];
    let sg = [Sge::new(&e.src, 0, 100).unwrap()];
    let to = remote(&e.dst, 0);
    let ud = case == "ud";
    let c = QpConfig {
        // A CQ shallower than the WRs: the QP counts CQ credits.
        cq_depth: (case == "credits").then_some(8),
        qp_type: if ud { QpType::Ud } else { QpType::Rc },
        ..cfg(16, 8)
    };
    let mut a = e.pd.create_qp(&c).unwrap();
    let (mut own, mut shared) = match rx {
        Rx::Shared => {
            // (A shared CQ always counts credits; its depth is its own.)
            let mut cq = e.pd.create_shared_cq(c.cq_depth.unwrap_or(16)).unwrap();
            let i = cq
                .create_qp(&QpConfig {
                    cq_depth: None,
                    ..c
                })
                .unwrap();
            (None, Some((cq, i)))
        }
        _ => (Some(e.pd.create_qp(&c).unwrap()), None),
    };
    let b = match (&mut own, &mut shared) {
        (Some(q), _) => q,
        (_, Some((cq, i))) => cq.qp_mut(*i),
        _ => unreachable!(),
    };
    if ud {
        a.ready_ud(0x1234).unwrap();
        b.ready_ud(0x1234).unwrap();
    } else {
        Qp::connect_loopback(&mut a, b).unwrap();
    }
    let (rx_qpn, tx_qpn) = (b.qp_num(), a.qp_num());
    let ah = e.pd.create_ah(&a.av_to(&b.endpoint())).unwrap();
    let dest = UdDest {
        ah: &ah,
        remote_qpn: rx_qpn,
        qkey: 0x1234,
    };
    for i in 0..8 {
        b.post_recv(&[RecvWr::new(100 + i, &rsg)]).unwrap();
    }
    if case == "swapped" {
        // Receives complete as 1, 0, 3, 2, ...: the fast paths decline.
        b.sim_hook().unwrap().swap_recv_completions(true);
    }
    if case == "flush" {
        // Flushed receives: error CQEs, the general path's.
        b.modify(QpState::Err, &QpAttr::default()).unwrap();
    } else {
        let wrs = if ud {
            vec![
                SendWr::ud_send(1, &sg, dest).signaled(),
                SendWr::ud_send(2, &sg, dest).imm(7).signaled(),
                SendWr::ud_send(3, &sg, dest).signaled().solicited(),
                SendWr::ud_send(4, &sg, dest).imm(8).signaled(),
            ]
        } else {
            vec![
                SendWr::send(1, &sg).signaled(),
                SendWr::send(2, &sg).imm(0x1234).signaled(),
                SendWr::rdma_write(3, &sg, to).imm(0xabcd).signaled(),
                SendWr::send(4, &sg).signaled().solicited(),
            ]
        };
        for (i, w) in wrs.iter().chain(&wrs).enumerate() {
            a.post_send(std::slice::from_ref(w)).unwrap();
            if case == "mixed" {
                // The receiver's CQ: a receive's CQE, then a send's, in turn.
                ready(b, 2 * i as u32 + 1);
                let w = SendWr::rdma_write(200 + i as u64, &sg, to).signaled();
                b.post_send(&[w]).unwrap();
                ready(b, 2 * i as u32 + 2);
            }
        }
        poll_n(&mut a, 8);
    }
    let k = if case == "mixed" { 16 } else { 8 };
    let got = match (&mut own, &mut shared) {
        (Some(b), _) => {
            ready(b, k as u32);
            let mut wc = vec![Completion::default(); if rx == Rx::One { 1 } else { 16 }];
            let mut got = Vec::new();
            while got.len() < k {
                let n = b.poll(&mut wc).unwrap();
                assert!(n > 0, "{case}: the CQEs were there");
                got.extend_from_slice(&wc[..n]);
            }
            assert_eq!(b.poll(&mut wc).unwrap(), 0, "{case}: nothing more");
            got
        }
        (_, Some((cq, _))) => poll_n_with(|wc| cq.poll(wc), k),
        _ => unreachable!(),
    };
    let b = match (&mut own, &mut shared) {
        (Some(q), _) => q,
        (_, Some((cq, i))) => cq.qp_mut(*i),
        _ => unreachable!(),
    };
    let room = case == "flush" || (0..8).all(|i| b.post_recv(&[RecvWr::new(i, &rsg)]).is_ok());
    let got = got.iter().map(|c| recv_key(c, rx_qpn, tx_qpn)).collect();
    (got, room)
}

/// Waits until `q`'s own CQ holds `k` CQEs not yet polled.
fn ready(q: &mut Qp, k: u32) {
    let t = Instant::now();
    while !q.sim_hook().unwrap().cqes_ready(k) {
        assert!(t.elapsed() < PATIENCE, "{k} CQEs never came");
        std::thread::yield_now();
    }
}

/// Issue 29's receive fast paths against the general path, on the same
/// traffic: a QP's own CQ polled one CQE at a time (the inlined poll takes
/// a receive of its own RQ in order, successful, in the plain format, or
/// declines it to the general path), and into a larger slice once every
/// CQE is there (the loop of a poll of many takes such receives too),
/// against a QP on a shared CQ (every CQE decoded and retired by the
/// general path). The same completions, field by field, and every
/// receive's room back: on RC (with and without immediate, a
/// WRITE_IMM's), on UD (source QPN and GRH flag), on a QP that counts CQ
/// credits, and in the fast paths' decline cases: receives completing out
/// of order, flush errors. And on a CQ where receives and sends
/// complete in turn, the two fast paths alike.
#[test]
fn receives_polled_alike_by_the_fast_and_general_paths() {
    let e = env();
    let mut rc = Vec::new();
    for case in ["rc", "ud", "credits", "swapped", "flush"] {
        let general = if case == "swapped" {
            // (No sim hook on a shared CQ's QP: the RC case's completions,
            // in swapped pairs.)
            rc.chunks(2)
                .flat_map(|p: &[RecvKey]| [p[1], p[0]])
                .collect()
        } else {
            let (general, room) = recv_case(&e, case, Rx::Shared);
            assert!(room, "{case}: every receive retired");
            general
        };
        println!("{case}: {general:?}");
        assert_eq!(general.len(), 8, "{case}");
        assert!(
            general.iter().all(|c| c.1.is_ok() == (case != "flush")),
            "{case}"
        );
        if case == "rc" {
            rc = general.clone();
        }
        for rx in [Rx::One, Rx::Many] {
            let (fast, room) = recv_case(&e, case, rx);
            assert_eq!(fast, general, "{case}, {rx:?}");
            assert!(room, "{case}, {rx:?}: every receive retired");
        }
    }
    // Receives and sends in turn (own CQs only: a shared CQ's QP has no
    // hook that tells its CQEs are there).
    let (one, room1) = recv_case(&e, "mixed", Rx::One);
    let (many, room16) = recv_case(&e, "mixed", Rx::Many);
    assert_eq!(one, many, "mixed");
    assert!(room1 && room16, "mixed: every receive retired");
    let recvs: Vec<RecvKey> = one.iter().step_by(2).copied().collect();
    assert_eq!(recvs, rc, "mixed: the receives");
    let sends: Vec<(u64, WcStatus, WcOpcode)> = one[1..]
        .iter()
        .step_by(2)
        .map(|c| (c.0, c.1, c.2))
        .collect();
    let want: Vec<_> = (200..208)
        .map(|i| (i, WcStatus::SUCCESS, WcOpcode::RDMA_WRITE))
        .collect();
    assert_eq!(sends, want, "mixed: the sends");
}
