//! CQE compression (basic layout) on the sim, through the public API: a
//! session split across polls delivers every completion once and in order
//! (DPDK `828274b70a`'s bug), requester sessions retire every WR once,
//! sessions across the ring's end and the laps after them, a shared CQ
//! with compression, and the refusals (an SRQ's QP, a shared CQ's QP
//! asking on its own).

use rdma_direct::testing::QpHooks;
use rdma_direct::*;

#[path = "support/sim.rs"]
mod support;
use support::*;

fn zip_cfg() -> QpConfig {
    QpConfig {
        max_send_wr: 64,
        max_recv_wr: 128,
        cqe_compression: true,
        ..QpConfig::default()
    }
}

fn cqe_bytes(q: &mut Qp) -> u64 {
    q.sim_hook().expect("a sim QP").cqe_bytes_written()
}

/// Waits until `q`'s own CQ holds `k` completions not yet polled.
fn wait_ready(q: &mut Qp, k: u32) {
    let t = std::time::Instant::now();
    while !q.sim_hook().expect("a sim QP").cqes_ready(k) {
        assert!(t.elapsed() < PATIENCE, "{k} CQEs never came");
        std::thread::yield_now();
    }
}

/// The case: a session of 7 receive completions whose first
/// counter is 100, polled 3, 3 and 3 at a time, gives exactly the
/// receives 100..=106 in order, then the next CQE, and each receive's
/// buffer comes back exactly once, holding what was sent to it.
#[test]
fn seven_receives_from_counter_100_polled_three_at_a_time_come_once_in_order() {
    let e = env();
    let (mut a, mut b) = e.pd.create_connected_pair(&zip_cfg()).unwrap();
    // 100 receives first, so that the RQ's counter is 100.
    for round in 0..10u64 {
        let sges: Vec<Sge> = (0..10)
            .map(|k| Sge::new(&e.dst, k * 64, 64).unwrap())
            .collect();
        let recvs: Vec<RecvWr> = (0..10)
            .map(|k| RecvWr::new(round * 10 + k as u64, std::slice::from_ref(&sges[k])))
            .collect();
        b.post_recv(&recvs).unwrap();
        let sg = [Sge::new(&e.src, 0, 8).unwrap()];
        let sends: Vec<SendWr> = (0..10).map(|k| SendWr::send(k, &sg).signaled()).collect();
        a.post_send(&sends).unwrap();
        poll_n(&mut a, 10);
        let got: Vec<u64> = poll_n(&mut b, 10).iter().map(|c| c.wr_id).collect();
        assert_eq!(got, (round * 10..round * 10 + 10).collect::<Vec<_>>());
    }
    let mut addrs = Vec::new();
    for k in 0..8u64 {
        let buf = e.pd.alloc_local_mr(256, Access::LOCAL_WRITE).unwrap();
        addrs.push(buf.addr());
        b.post_recv_owned(100 + k, buf, 0, 256).unwrap();
    }
    for k in 0..8u64 {
        e.src
            .write(1024 + k as usize * 64, &[k as u8 + 1; 64])
            .unwrap();
    }
    let before = cqe_bytes(&mut b);
    // Seven SENDs behind one doorbell: one pass of the sim, one session.
    let sgs: Vec<[Sge; 1]> = (0..7u64)
        .map(|k| [Sge::new(&e.src, 1024 + k as usize * 64, 10 + k as u32).unwrap()])
        .collect();
    let sends: Vec<SendWr> = (0..7u64)
        .map(|k| SendWr::send(k, &sgs[k as usize]).signaled())
        .collect();
    a.post_send(&sends).unwrap();
    poll_n(&mut a, 7);
    wait_ready(&mut b, 7);
    assert_eq!(
        cqe_bytes(&mut b) - before,
        128,
        "one session: a title and one array"
    );
    // Then the next CQE, written whole.
    let last = [Sge::new(&e.src, 1024 + 7 * 64, 50).unwrap()];
    a.post_send(&[SendWr::send(7, &last).signaled()]).unwrap();
    poll_n(&mut a, 1);
    wait_ready(&mut b, 8);
    assert_eq!(cqe_bytes(&mut b) - before, 192);
    let mut got = Vec::new();
    let mut bufs = Vec::new();
    for want in [3, 3, 2] {
        let mut wc = [Completion::default(); 3];
        let n = b.poll(&mut wc).unwrap();
        assert_eq!(n, want);
        for c in &wc[..n] {
            assert!(c.status.is_ok(), "{c:?}");
            got.push((c.wr_id, c.byte_len));
        }
        while let Some(x) = b.take_recv_buf() {
            bufs.push(x);
        }
        assert_eq!(bufs.len(), got.len(), "a buffer back per receive completed");
    }
    assert_eq!(b.poll(&mut [Completion::default(); 3]).unwrap(), 0);
    assert!(b.take_recv_buf().is_none(), "no buffer handed back twice");
    let want: Vec<(u64, u32)> = (0..7)
        .map(|k| (100 + k, 10 + k as u32))
        .chain([(107, 50)])
        .collect();
    assert_eq!(got, want);
    for (k, (id, buf)) in bufs.iter().enumerate() {
        assert_eq!((*id, buf.addr()), (100 + k as u64, addrs[k]));
        let len = want[k].1 as usize;
        assert!(
            buf[..len].iter().all(|&x| x == k as u8 + 1),
            "receive {id}'s bytes"
        );
    }
}

/// Twenty signaled WRITEs behind one doorbell complete as one requester
/// session (a title and three arrays), polled 3 at a time: every wr_id
/// once, in order.
#[test]
fn twenty_signaled_writes_retire_each_wr_once_in_order() {
    let e = env();
    let (mut a, _b) = e.pd.create_connected_pair(&zip_cfg()).unwrap();
    let sg = [Sge::new(&e.src, 0, 16).unwrap()];
    let wrs: Vec<SendWr> = (0..20u64)
        .map(|i| SendWr::rdma_write(1000 + i, &sg, remote(&e.dst, i * 16)).signaled())
        .collect();
    let before = cqe_bytes(&mut a);
    a.post_send(&wrs).unwrap();
    wait_ready(&mut a, 20);
    assert_eq!(cqe_bytes(&mut a) - before, 4 * 64);
    let got = poll_n_with(|wc| a.poll(&mut wc[..3]), 20);
    let ids: Vec<u64> = got.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, (1000..1020).collect::<Vec<_>>());
    assert!(got
        .iter()
        .all(|c| c.status.is_ok() && c.opcode == WcOpcode::RDMA_WRITE));
    assert_eq!(a.poll(&mut [Completion::default(); 4]).unwrap(), 0);
}

/// A QP's own CQ of 16 slots: batches of 1..=8 WRITEs, lap
/// after lap, make sessions that cross the ring's end, and holes of one
/// lap that must not read as owned on the next. Every wr_id once, in order.
#[test]
fn sessions_across_the_ring_end_and_the_laps_after_poll_in_order() {
    let e = env();
    let c = QpConfig {
        cq_depth: Some(16),
        ..zip_cfg()
    };
    let (mut a, _b) = e.pd.create_connected_pair(&c).unwrap();
    let sg = [Sge::new(&e.src, 0, 8).unwrap()];
    let (mut next, mut bytes) = (0u64, 0u64);
    for round in 0..40u64 {
        let n = 1 + round % 8;
        let wrs: Vec<SendWr> = (next..next + n)
            .map(|i| SendWr::rdma_write(i, &sg, remote(&e.dst, 0)).signaled())
            .collect();
        let before = cqe_bytes(&mut a);
        a.post_send(&wrs).unwrap();
        let got: Vec<u64> = poll_n(&mut a, n as usize).iter().map(|c| c.wr_id).collect();
        assert_eq!(got, (next..next + n).collect::<Vec<_>>(), "round {round}");
        bytes += cqe_bytes(&mut a) - before;
        next += n;
    }
    assert!(
        next > 8 * 16,
        "{next} completions: several laps of 16 slots"
    );
    assert!(
        bytes < next * 64,
        "compressed: {bytes} CQE bytes for {next} completions"
    );
}

/// A shared CQ made with compression: two QPs' WRITEs, each QP's run a
/// session of its own (a run breaks at another QP's CQE); every wr_id
/// once, each QP's in order.
#[test]
fn a_compressed_shared_cq_delivers_each_qps_completions_in_order() {
    let e = env();
    let mut cq = e.pd.create_compressed_shared_cq(64).unwrap();
    assert_eq!(cq.depth(), 64);
    let c = QpConfig {
        max_send_wr: 16,
        max_recv_wr: 0,
        ..QpConfig::default()
    };
    let mut peers = Vec::new();
    let mut idx = Vec::new();
    for _ in 0..2 {
        let x = cq.create_qp(&c).unwrap();
        let mut p = e.pd.create_qp(&c).unwrap();
        Qp::connect_loopback(cq.qp_mut(x), &mut p).unwrap();
        peers.push(p);
        idx.push(x);
    }
    let sg = [Sge::new(&e.src, 0, 8).unwrap()];
    for round in 0..5u64 {
        for (q, &x) in idx.iter().enumerate() {
            let base = ((q as u64) << 32) | (round * 10);
            let wrs: Vec<SendWr> = (base..base + 10)
                .map(|i| SendWr::rdma_write(i, &sg, remote(&e.dst, 0)).signaled())
                .collect();
            cq.qp_mut(x).post_send(&wrs).unwrap();
        }
        let got = poll_n_with(|wc| cq.poll(wc), 20);
        for q in 0..2u64 {
            let ids: Vec<u64> = got
                .iter()
                .filter(|c| c.wr_id >> 32 == q)
                .map(|c| c.wr_id & 0xffff_ffff)
                .collect();
            assert_eq!(ids, (round * 10..round * 10 + 10).collect::<Vec<_>>());
        }
    }
}

/// Decision (issue 29, option a): a CQ with compression does not serve a
/// QP on an SRQ (responder mini-CQEs carry no counter; the SRQ is a linked
/// list completing out of index order). And a QP of a shared CQ may not
/// ask for compression itself. Each refused, nothing made.
#[test]
fn compression_is_refused_for_an_srqs_qp_and_a_shared_cqs_qp() {
    let e = env();
    let srq = e.pd.create_srq(16, 1).unwrap();
    let r = e.pd.create_qp_on_srq(&zip_cfg(), &srq);
    assert!(matches!(r, Err(Error::Invalid(_))), "{:?}", r.err());
    let mut zcq = e.pd.create_compressed_shared_cq(64).unwrap();
    let r = zcq.create_qp_on_srq(&QpConfig::default(), &srq);
    assert!(matches!(r, Err(Error::Invalid(_))), "{:?}", r.err());
    assert!(zcq.is_empty());
    let mut cq = e.pd.create_shared_cq(64).unwrap();
    let r = cq.create_qp(&zip_cfg());
    assert!(matches!(r, Err(Error::Invalid(_))), "{:?}", r.err());
    // Without compression the same SRQ QP is made.
    e.pd.create_qp_on_srq(&QpConfig::default(), &srq).unwrap();
    cq.create_qp_on_srq(&QpConfig::default(), &srq).unwrap();
}
