//! A QP in two halves (`Qp::split`, `SendHalf`, `RecvHalf`, `Qp::join`) on
//! the sim, through the public API: halves of SRQ, UD and UC QPs, the
//! halves refusing what the QP refuses (bad SGEs, bad receives, other PDs)
//! with nothing posted, the one-opcode posts through a half, errors and
//! flushes reaching the owner, queue limits and ring wraparound across
//! split/join cycles, and a thread waiting for room until the owner polls.

use rdma_direct::testing::QpHooks;
use rdma_direct::*;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[path = "support/sim.rs"]
mod support;
use support::*;
#[path = "support/split_qps.rs"]
mod split;
use split::*;

/// A QP on an SRQ splits: its receive half refuses every receive
/// (Invalid, as documented on `RecvHalf`), an empty batch is harmless, and
/// the receives the SRQ gives it complete through the owner's poll with
/// the SRQ's wr_ids; its send half posts.
#[test]
fn srq_qp_split_recv_half_refuses_srq_receives_complete() {
    let e = env();
    let mut srq = e.pd.create_srq(16, 1).unwrap();
    let mut a = e.pd.create_qp(&QpConfig::default()).unwrap();
    let mut b = e.pd.create_qp_on_srq(&QpConfig::default(), &srq).unwrap();
    Qp::connect_loopback(&mut a, &mut b).unwrap();
    let (mut tx, mut rx) = b.split().unwrap();
    let rs = [Sge::new(&e.dst, 0, 64).unwrap()];
    let r = rx.post_recv(&[RecvWr::new(9, &rs)]);
    assert!(
        matches!(r, Err(Error::SrqAttached { .. })),
        "a receive half of a QP on an SRQ: {r:?}"
    );
    rx.post_recv(&[]).unwrap();
    let rws: Vec<RecvWr> = (0..4).map(|i| RecvWr::new(100 + i, &rs)).collect();
    srq.post_recv(&rws).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    for i in 0..4 {
        a.post_send(&[SendWr::send(i, &s).signaled()]).unwrap();
    }
    assert_eq!(ids(&poll_n(&mut a, 4)), vec![0, 1, 2, 3]);
    let got = poll_n(&mut b, 4);
    assert!(got.iter().all(|c| c.status == WcStatus::SUCCESS), "{got:?}");
    assert_eq!(ids(&got), vec![100, 101, 102, 103]);
    assert_eq!(srq.outstanding(), 0, "the SRQ's receives polled back");
    tx.post_send(&[SendWr::rdma_write(7, &s, remote(&e.dst, 0)).signaled()])
        .unwrap();
    assert_eq!(ids(&poll_n(&mut b, 1)), vec![7]);
    b.join(tx, rx).unwrap();
}

/// A UD QP splits; its send half posts UD sends (in place and inline)
/// and the peer's receive half posts receives; every completion comes
/// through the owners with the right wr_ids and source QPN.
#[test]
fn ud_qp_split_halves_post() {
    let e = env();
    let ud = QpConfig {
        qp_type: QpType::Ud,
        ..QpConfig::default()
    };
    let mut a = e.pd.create_qp(&ud).unwrap();
    let mut b = e.pd.create_qp(&ud).unwrap();
    a.ready_ud(QKEY).unwrap();
    b.ready_ud(QKEY).unwrap();
    let ah = e.pd.create_ah(&a.av_to(&b.endpoint())).unwrap();
    let d = UdDest {
        ah: &ah,
        remote_qpn: b.qp_num(),
        qkey: QKEY,
    };
    let (mut atx, _arx) = a.split().unwrap();
    let (_btx, mut brx) = b.split().unwrap();
    let rsg: Vec<[Sge; 1]> = (0..3)
        .map(|k| [Sge::new(&e.dst, k * 1024, 40 + 256).unwrap()])
        .collect();
    let rws: Vec<RecvWr> = rsg
        .iter()
        .enumerate()
        .map(|(k, s)| RecvWr::new(200 + k as u64, s))
        .collect();
    brx.post_recv(&rws).unwrap();
    let s = [Sge::new(&e.src, 0, 256).unwrap()];
    let pat = [0x5au8; 64];
    let inl = [Sge::bytes(&pat).unwrap()];
    atx.post_send(&[SendWr::ud_send(1, &s, d).signaled()])
        .unwrap();
    atx.post_send(&[SendWr::ud_send(2, &s, d).imm(9).signaled()])
        .unwrap();
    atx.post_send(&[SendWr::ud_send(3, &inl, d).inline().signaled()])
        .unwrap();
    assert_eq!(ids(&poll_n(&mut a, 3)), vec![1, 2, 3]);
    let got = poll_n(&mut b, 3);
    assert_eq!(ids(&got), vec![200, 201, 202]);
    for c in &got {
        assert_eq!(c.status, WcStatus::SUCCESS, "{c:?}");
        assert_eq!(c.src_qp.qpn(), a.qp_num());
    }
    // An RC-only WR through a UD half: refused as the whole QP refuses it.
    let r = atx.post_send(&[SendWr::rdma_write(4, &s, remote(&e.dst, 0))]);
    assert!(matches!(r, Err(Error::WrongTransport { .. })), "{r:?}");
}

/// A UC QP splits; its send half writes, and refuses READ (IB spec
/// 9.8.3) as the whole QP does, posting nothing.
#[test]
fn uc_qp_split_refuses_read_writes_go() {
    let e = env();
    let uc = QpConfig {
        qp_type: QpType::Uc,
        ..QpConfig::default()
    };
    let (mut a, _b) = pair(&e.pd, &uc);
    let (mut tx, _rx) = a.split().unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let before = a.sq_snapshot();
    let r = tx.post_send(&[SendWr::rdma_read(1, &s, remote(&e.dst, 0)).signaled()]);
    assert!(
        matches!(r, Err(Error::WrongTransport { .. })),
        "READ on a UC half: {r:?}"
    );
    assert_eq!(a.sq_snapshot(), before, "the refused READ wrote the SQ");
    e.src.write(0, &[7; 8]).unwrap();
    tx.post_send(&[SendWr::rdma_write(2, &s, remote(&e.dst, 0)).signaled()])
        .unwrap();
    assert_eq!(ids(&poll_n(&mut a, 1)), vec![2]);
    let mut got = [0u8; 8];
    e.dst.read(0, &mut got).unwrap();
    assert_eq!(got, [7; 8]);
}

/// max_send_sge 0: the half refuses a WR with an SGE exactly as the
/// whole QP does (same error kind), writes nothing, and posts inline.
/// max_recv_wr 0: the receive half refuses a receive (Invalid).
#[test]
fn zero_sge_and_zero_recv_wr_halves_refuse_as_the_qp() {
    let e = env();
    let c = QpConfig {
        max_send_sge: 0,
        max_recv_wr: 0,
        ..QpConfig::default()
    };
    let (mut whole, _w) = pair(&e.pd, &c);
    let (mut a, _b) = pair(&e.pd, &c);
    let (mut tx, mut rx) = a.split().unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let wr = SendWr::rdma_write(1, &s, remote(&e.dst, 0)).signaled();
    let want = whole.post_send(&[wr]);
    let before = a.sq_snapshot();
    let got = tx.post_send(&[wr]);
    assert_eq!(
        std::mem::discriminant(&got),
        std::mem::discriminant(&want),
        "half {got:?}, whole QP {want:?}"
    );
    assert!(
        got.is_err(),
        "an SGE posted on a QP of max_send_sge 0: {got:?}"
    );
    let w = WriteWr::new(2, s[0], remote(&e.dst, 0)).signaled();
    assert!(tx.post_write(&w).is_err(), "post_write with max_send_sge 0");
    assert!(
        tx.post_writes(&[w]).is_err(),
        "post_writes with max_send_sge 0"
    );
    assert_eq!(a.sq_snapshot(), before, "refused posts wrote the SQ");
    let want = whole.post_write_inline(3, &[1, 2, 3, 4], remote(&e.dst, 64), SendFlags::SIGNALED);
    let got = tx.post_write_inline(3, &[1, 2, 3, 4], remote(&e.dst, 64), SendFlags::SIGNALED);
    assert_eq!(
        std::mem::discriminant(&got),
        std::mem::discriminant(&want),
        "inline: half {got:?}, whole QP {want:?}"
    );
    if got.is_ok() {
        assert_eq!(ids(&poll_n(&mut a, 1)), vec![3]);
    }
    let rs = [Sge::new(&e.dst, 0, 8).unwrap()];
    let r = rx.post_recv(&[RecvWr::new(4, &rs)]);
    assert!(
        matches!(r, Err(Error::NeverFits { depth: 0, .. })),
        "receive on max_recv_wr 0: {r:?}"
    );
    rx.post_recv(&[]).unwrap();
}

// ------------------------------------------------------------ ERR, errors

/// Split, the halves post (sends stuck in RNR retry at a peer with no
/// receive, receives waiting), the owner moves the QP to ERR: every WR
/// posted, signaled or not, comes back through the owner's poll as
/// WR_FLUSH_ERR with its wr_id, exactly once (the sim flushes "signaled
/// or not", as the IB spec's Error state does); posts from the halves in
/// ERR are flushed too.
#[test]
fn modify_to_err_flushes_half_wrs_through_owner() {
    let e = env();
    let c = QpConfig {
        rnr_retry: 7,
        ..cfg(16, 16)
    };
    let (mut a, mut b) = pair(&e.pd, &c);
    let (mut tx, mut rx) = a.split().unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let rs = [Sge::new(&e.dst, 0, 8).unwrap()];
    for i in 0..4u64 {
        let w = SendWr::send(i, &s);
        tx.post_send(&[if i % 2 == 0 { w.signaled() } else { w }])
            .unwrap();
    }
    let rws: Vec<RecvWr> = (0..5).map(|i| RecvWr::new(100 + i, &rs)).collect();
    rx.post_recv(&rws).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    a.modify(QpState::Err, &QpAttr::default()).unwrap();
    tx.post_send(&[SendWr::send(10, &s)]).unwrap();
    tx.post_write(&WriteWr::new(11, s[0], remote(&e.dst, 0)))
        .unwrap();
    rx.post_recv(&[RecvWr::new(110, &rs)]).unwrap();
    let got = poll_n(&mut a, 12);
    let more = drain(&mut a);
    assert!(more.is_empty(), "more than one completion per WR: {more:?}");
    let mut by: BTreeMap<u64, Vec<WcStatus>> = BTreeMap::new();
    for c in &got {
        by.entry(c.wr_id).or_default().push(c.status);
    }
    let want: Vec<u64> = vec![0, 1, 2, 3, 10, 11, 100, 101, 102, 103, 104, 110];
    assert_eq!(by.keys().copied().collect::<Vec<_>>(), want, "{got:?}");
    for (id, st) in &by {
        assert_eq!(st, &vec![WcStatus::WR_FLUSH_ERR], "wr_id {id}: {got:?}");
    }
    // Joined after ERR: RESET and reconnect work, and the QP posts again.
    a.join(tx, rx).unwrap();
    a.modify(QpState::Reset, &QpAttr::default()).unwrap();
    b.modify(QpState::Reset, &QpAttr::default()).unwrap();
    Qp::connect_loopback(&mut a, &mut b).unwrap();
    a.post_send(&[SendWr::rdma_write(20, &s, remote(&e.dst, 0)).signaled()])
        .unwrap();
    assert_eq!(ids(&poll_n(&mut a, 1)), vec![20]);
}

/// A WRITE with a bad rkey from the send half, unsignaled: its error CQE
/// comes through the owner's poll with its wr_id (an error always
/// completes); the device moved the QP to ERR, so every later post of
/// either half is flushed exactly once with its wr_id.
#[test]
fn half_posts_after_error_cqe_each_flushed_once() {
    let e = env();
    let (mut a, _b) = pair(&e.pd, &cfg(8, 8));
    let (mut tx, mut rx) = a.split().unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let rs = [Sge::new(&e.dst, 0, 8).unwrap()];
    let bad = RemoteAddr {
        addr: e.dst.addr(),
        rkey: Rkey(e.dst.rkey().0 ^ 0x5500),
    };
    tx.post_send(&[SendWr::rdma_write(1, &s, bad)]).unwrap();
    let mut got = poll_n(&mut a, 1);
    assert_eq!(
        (got[0].wr_id, got[0].status),
        (1, WcStatus::REM_ACCESS_ERR),
        "an unsignaled WR's error: {got:?}"
    );
    let mut posted = vec![];
    let mut wc = [Completion::default(); 16];
    let t = Instant::now();
    let mut i = 0u64;
    while i < 40 {
        assert!(t.elapsed() < PATIENCE, "stuck at {i}");
        let r = tx.post_send(&[SendWr::rdma_write(10 + i, &s, remote(&e.dst, 0))]);
        match r {
            Ok(()) => {
                posted.push(10 + i);
                if i < 6 {
                    rx.post_recv(&[RecvWr::new(100 + i, &rs)]).unwrap();
                    posted.push(100 + i);
                }
                i += 1;
            }
            Err(Error::QueueFull) => {}
            Err(e) => panic!("post {i}: {e:?}"),
        }
        let k = a.poll(&mut wc).unwrap();
        got.extend_from_slice(&wc[..k]);
    }
    let n = 1 + posted.len();
    let t = Instant::now();
    while got.len() < n && t.elapsed() < PATIENCE {
        let k = a.poll(&mut wc).unwrap();
        got.extend_from_slice(&wc[..k]);
    }
    got.extend(drain(&mut a));
    let mut seen: Vec<u64> = got[1..].iter().map(|c| c.wr_id).collect();
    seen.sort();
    posted.sort();
    assert_eq!(seen, posted, "flushes after the error: {got:?}");
    assert!(got[1..].iter().all(|c| c.status == WcStatus::WR_FLUSH_ERR));
}

// ------------------------------------------------------------ limits

/// A QP with its own CQ shallower than max_send_wr + max_recv_wr, idle
/// (nothing outstanding, nothing to poll): split asks for more credits
/// than the CQ has, so it can never succeed; the documented remedy for
/// CqFull ("poll and split again") cannot cure it. The crate's own rule
/// for a full queue or CQ that polling cannot cure (`never_fits`) is
/// Error::Invalid, so that the caller does not retry for ever.
#[test]
fn split_on_shallow_own_cq_is_not_a_retryable_cqfull() {
    let e = env();
    let c = QpConfig {
        cq_depth: Some(32),
        ..cfg(32, 32)
    };
    let (mut a, _b) = pair(&e.pd, &c);
    let mut results = vec![];
    for _ in 0..3 {
        let mut wc = [Completion::default(); 4];
        assert_eq!(a.poll(&mut wc).unwrap(), 0);
        match a.split() {
            Ok((tx, rx)) => {
                a.join(tx, rx).unwrap();
                return;
            }
            Err(e) => results.push(format!("{e:?}")),
        }
    }
    assert!(
        !results.iter().any(|r| r.starts_with("CqFull")),
        "an idle QP on a CQ of depth {} (max_send_wr 32 + max_recv_wr 32) is refused \
         with CqFull after polling, every time: {results:?}",
        a.cq_depth()
    );
}

/// The send half posts only unsignaled WRITEs (every CQE is a hidden
/// auto-signal one) until QueueFull; the owner polls (getting nothing to
/// report); the half has room again. Never stuck, nothing reported.
#[test]
fn queue_full_cured_by_owner_poll_unsignaled_only() {
    let e = env();
    let (mut a, _b) = pair(&e.pd, &cfg(7, 4));
    let (mut tx, _rx) = a.split().unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let mut posted = 0u64;
    let mut fulls = 0;
    let t = Instant::now();
    let mut wc = [Completion::default(); 16];
    while posted < 5000 {
        assert!(t.elapsed() < PATIENCE, "stuck at {posted} ({fulls} full)");
        match tx.post_write(&WriteWr::new(posted, s[0], remote(&e.dst, 0))) {
            Ok(()) => posted += 1,
            Err(Error::QueueFull) => {
                fulls += 1;
                let k = a.poll(&mut wc).unwrap();
                assert_eq!(k, 0, "hidden CQEs reported: {:?}", &wc[..k]);
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(fulls > 0, "the queue never filled");
    tx.post_write(&WriteWr::new(77, s[0], remote(&e.dst, 0)).signaled())
        .unwrap();
    let got = poll_n(&mut a, 1);
    assert_eq!(ids(&got), vec![77]);
}

/// Nobody polls: a send half posts exactly max_send_wr WRs and a receive
/// half exactly max_recv_wr receives, then QueueFull / RecvQueueFull; a
/// batch larger than the queue is Invalid (it can never fit), not a
/// full queue to retry for ever.
#[test]
fn stale_owner_exact_limits_and_never_fits() {
    let e = env();
    let (mut a, _b) = pair(&e.pd, &cfg(6, 5));
    let (mut tx, mut rx) = a.split().unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let rs = [Sge::new(&e.dst, 0, 8).unwrap()];
    let big: Vec<SendWr> = (0..7)
        .map(|i| SendWr::rdma_write(i, &s, remote(&e.dst, 0)))
        .collect();
    let r = tx.post_send(&big);
    assert!(
        matches!(r, Err(Error::NeverFits { wrs: 7, .. })),
        "a batch of 7 on a queue of 6: {r:?}"
    );
    let bigr: Vec<RecvWr> = (0..6).map(|i| RecvWr::new(i, &rs)).collect();
    let r = rx.post_recv(&bigr);
    assert!(
        matches!(r, Err(Error::NeverFits { wrs: 6, .. })),
        "6 receives on a queue of 5: {r:?}"
    );
    let mut n = 0;
    loop {
        match tx.post_send(&[SendWr::rdma_write(n, &s, remote(&e.dst, 0))]) {
            Ok(()) => n += 1,
            Err(Error::QueueFull) => break,
            Err(e) => panic!("{e:?}"),
        }
        assert!(n <= 6);
    }
    assert_eq!(n, 6);
    let mut m = 0;
    loop {
        match rx.post_recv(&[RecvWr::new(m, &rs)]) {
            Ok(()) => m += 1,
            Err(Error::RecvQueueFull) => break,
            Err(e) => panic!("{e:?}"),
        }
        assert!(m <= 5);
    }
    assert_eq!(m, 5);
}

/// 70,000 WRs (past 2^16 WQE indices, many ring laps) on a small queue,
/// the QP split and joined every 997 WRs, sends by the half or the whole
/// QP in turn, receives likewise: every signaled wr_id and every receive
/// completes once, in order.
#[test]
fn wraparound_across_split_join_cycles() {
    let e = env();
    let c = QpConfig {
        rnr_retry: 7,
        ..cfg(4, 4)
    };
    let (mut a, mut b) = pair(&e.pd, &c);
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let rs = [Sge::new(&e.dst, 0, 8).unwrap()];
    let total = 70_000u64;
    let mut halves: Option<(SendHalf, RecvHalf)> = None;
    let mut sends = Vec::new();
    let mut recvs = Vec::new();
    let mut bsends = 0usize;
    let mut wc = [Completion::default(); 16];
    let mut i = 0u64;
    let mut r = 0u64; // receives posted on a
    let t = Instant::now();
    while i < total {
        assert!(t.elapsed() < PATIENCE * 4, "stuck at {i}");
        if i.is_multiple_of(997) && i > 0 {
            match halves.take() {
                Some((tx, rx)) => a.join(tx, rx).unwrap(),
                None => halves = Some(a.split().unwrap()),
            }
        }
        let signaled = i.is_multiple_of(3);
        let w = SendWr::rdma_write(i, &s, remote(&e.dst, 0));
        let w = if signaled { w.signaled() } else { w };
        let res = match &mut halves {
            Some((tx, _)) => tx.post_send(&[w]),
            None => a.post_send(&[w]),
        };
        match res {
            Ok(()) => i += 1,
            Err(Error::QueueFull) => {}
            Err(e) => panic!("WR {i}: {e:?}"),
        }
        // A receive on a, filled by a SEND from b.
        if r < i / 2 {
            let rw = [RecvWr::new(r, &rs)];
            let res = match &mut halves {
                Some((_, rx)) => rx.post_recv(&rw),
                None => a.post_recv(&rw),
            };
            match res {
                Ok(()) => {
                    b.post_send(&[SendWr::send(r, &s).signaled()]).unwrap();
                    r += 1;
                }
                Err(Error::RecvQueueFull) => {}
                Err(e) => panic!("receive {r}: {e:?}"),
            }
        }
        let k = a.poll(&mut wc).unwrap();
        for c in &wc[..k] {
            assert_eq!(c.status, WcStatus::SUCCESS, "{c:?}");
            if c.opcode == WcOpcode::RECV {
                recvs.push(c.wr_id);
            } else {
                sends.push(c.wr_id);
            }
        }
        let k = b.poll(&mut wc).unwrap();
        bsends += k;
        // b's SQ (4) must not overflow: wait for its completions.
        while (r as usize) - bsends >= 4 {
            bsends += b.poll(&mut wc).unwrap();
        }
    }
    if let Some((tx, rx)) = halves.take() {
        a.join(tx, rx).unwrap();
    }
    let t = Instant::now();
    loop {
        match a.post_send(&[SendWr::rdma_write(total, &s, remote(&e.dst, 0)).signaled()]) {
            Ok(()) => break,
            Err(Error::QueueFull) => {
                assert!(t.elapsed() < PATIENCE, "stuck on the last WR");
                let k = a.poll(&mut wc).unwrap();
                for c in &wc[..k] {
                    if c.opcode == WcOpcode::RECV {
                        recvs.push(c.wr_id);
                    } else {
                        sends.push(c.wr_id);
                    }
                }
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    let want_sends: Vec<u64> = (0..=total).filter(|i| i % 3 == 0 || *i == total).collect();
    let t = Instant::now();
    while (sends.len() < want_sends.len() || recvs.len() < r as usize) && t.elapsed() < PATIENCE {
        let k = a.poll(&mut wc).unwrap();
        for c in &wc[..k] {
            if c.opcode == WcOpcode::RECV {
                recvs.push(c.wr_id);
            } else {
                sends.push(c.wr_id);
            }
        }
    }
    assert_eq!(sends.len(), want_sends.len());
    assert!(sends == want_sends, "send wr_ids out of order or wrong");
    assert_eq!(recvs, (0..r).collect::<Vec<_>>());
}

// ------------------------------------------------------------ bad input

/// SGEs of another PD through the send half (every post API) and the
/// receive half: Invalid, nothing written to the SQ, nothing completes,
/// and the next good WRs complete with their own wr_ids.
#[test]
fn other_pd_sges_through_halves_refused_nothing_posted() {
    let e = env();
    let pd2 = e.ctx.alloc_pd().unwrap();
    let foreign = pd2
        .alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let (mut a, mut b) = pair(&e.pd, &cfg(8, 8));
    let (mut tx, mut rx) = a.split().unwrap();
    let before = a.sq_snapshot();
    let fs = [Sge::new(&foreign, 0, 8).unwrap()];
    let good = [Sge::new(&e.src, 0, 8).unwrap()];
    let r = tx.post_send(&[SendWr::rdma_write(1, &fs, remote(&e.dst, 0)).signaled()]);
    assert!(
        matches!(r, Err(Error::ForeignPd { .. })),
        "post_send: {r:?}"
    );
    let r = tx.post_send(&[
        SendWr::rdma_write(2, &good, remote(&e.dst, 0)).signaled(),
        SendWr::send(3, &fs).signaled(),
    ]);
    assert!(
        matches!(r, Err(Error::ForeignPd { .. })),
        "post_send batch: {r:?}"
    );
    let r = tx.post_write(&WriteWr::new(4, fs[0], remote(&e.dst, 0)).signaled());
    assert!(
        matches!(r, Err(Error::ForeignPd { .. })),
        "post_write: {r:?}"
    );
    let r = tx.post_writes(&[
        WriteWr::new(5, good[0], remote(&e.dst, 0)).signaled(),
        WriteWr::new(6, fs[0], remote(&e.dst, 0)).signaled(),
    ]);
    assert!(
        matches!(r, Err(Error::ForeignPd { .. })),
        "post_writes: {r:?}"
    );
    let r = tx.post_send(&[SendWr::rdma_read(7, &fs, remote(&e.dst, 0)).signaled()]);
    assert!(
        matches!(r, Err(Error::ForeignPd { .. })),
        "READ into another PD's memory: {r:?}"
    );
    assert_eq!(a.sq_snapshot(), before, "refused posts wrote the SQ");
    let rf = [Sge::new(&foreign, 0, 8).unwrap()];
    let rg = [Sge::new(&e.dst, 64, 8).unwrap()];
    let r = rx.post_recv(&[RecvWr::new(50, &rg), RecvWr::new(51, &rf)]);
    assert!(
        matches!(r, Err(Error::ForeignPd { .. })),
        "post_recv: {r:?}"
    );
    assert!(drain(&mut a).is_empty(), "a refused WR completed");
    rx.post_recv(&[RecvWr::new(52, &rg)]).unwrap();
    tx.post_send(&[SendWr::rdma_write(8, &good, remote(&e.dst, 0)).signaled()])
        .unwrap();
    b.post_send(&[SendWr::send(9, &good).signaled()]).unwrap();
    let got = poll_n(&mut a, 2);
    let mut w = ids(&got);
    w.sort();
    assert_eq!(w, vec![8, 52], "{got:?}");
    assert!(drain(&mut a).is_empty());
}

/// post_write_inline, post_writes and post_write through the send half
/// land their bytes and complete with their wr_ids; an inline payload
/// over max_inline is Invalid and posts nothing.
#[test]
fn one_opcode_posts_through_half() {
    let e = env();
    let (mut a, _b) = pair(&e.pd, &cfg(16, 4));
    let (mut tx, _rx) = a.split().unwrap();
    let max = tx.max_inline() as usize;
    assert_eq!(max, a.max_inline() as usize);
    let before = a.sq_snapshot();
    let big = vec![1u8; max + 1];
    let r = tx.post_write_inline(1, &big, remote(&e.dst, 0), SendFlags::SIGNALED);
    assert!(
        matches!(r, Err(Error::InlineTooLong { .. })),
        "inline over max_inline: {r:?}"
    );
    assert_eq!(a.sq_snapshot(), before);
    let data: Vec<u8> = (0..max as u32).map(|i| i as u8).collect();
    tx.post_write_inline(2, &data, remote(&e.dst, 1024), SendFlags::SIGNALED)
        .unwrap();
    e.src.write(0, &[9u8; 64]).unwrap();
    let ws: Vec<WriteWr> = (0..4)
        .map(|k| {
            WriteWr::new(
                10 + k,
                Sge::new(&e.src, 0, 16).unwrap(),
                remote(&e.dst, 2048 + 16 * k),
            )
            .signaled()
        })
        .collect();
    tx.post_writes(&ws).unwrap();
    tx.post_write(
        &WriteWr::new(20, Sge::new(&e.src, 0, 8).unwrap(), remote(&e.dst, 4096)).signaled(),
    )
    .unwrap();
    assert_eq!(ids(&poll_n(&mut a, 6)), vec![2, 10, 11, 12, 13, 20]);
    let mut got = vec![0u8; max];
    e.dst.read(1024, &mut got).unwrap();
    assert_eq!(got, data);
    let mut got = [0u8; 64];
    e.dst.read(2048, &mut got).unwrap();
    assert_eq!(got, [9u8; 64]);
}

/// Bad RecvWrs through the receive half (too many SGEs; plain bytes; a
/// good one followed by a bad one) are Invalid and post nothing: the
/// peer's next SEND lands in the later good receive, with its wr_id, and
/// the RQ still takes exactly max_recv_wr receives.
#[test]
fn bad_recv_wrs_through_half_post_nothing() {
    let e = env();
    let (mut a, mut b) = pair(&e.pd, &cfg(8, 4));
    let (_tx, mut rx) = a.split().unwrap();
    let r1 = Sge::new(&e.dst, 0, 8).unwrap();
    let r2 = Sge::new(&e.dst, 8, 8).unwrap();
    let two = [r1, r2];
    let one = [r1];
    let raw = [0u8; 8];
    let bytes = [Sge::bytes(&raw).unwrap()];
    let r = rx.post_recv(&[RecvWr::new(1, &two)]);
    assert!(
        matches!(
            r,
            Err(Error::TooManySges {
                sges: 2,
                max: 1,
                ..
            })
        ),
        "2 SGEs on max_recv_sge 1: {r:?}"
    );
    let r = rx.post_recv(&[RecvWr::new(2, &one), RecvWr::new(3, &two)]);
    assert!(
        matches!(r, Err(Error::TooManySges { .. })),
        "good then bad: {r:?}"
    );
    let r = rx.post_recv(&[RecvWr::new(4, &bytes)]);
    assert!(matches!(r, Err(Error::BytesSge)), "plain bytes: {r:?}");
    rx.post_recv(&[RecvWr::new(5, &one)]).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    b.post_send(&[SendWr::send(1, &s).signaled()]).unwrap();
    let got = poll_n(&mut a, 1);
    assert_eq!((got[0].wr_id, got[0].status), (5, WcStatus::SUCCESS));
    let mut n = 0;
    while rx.post_recv(&[RecvWr::new(10 + n, &one)]).is_ok() {
        n += 1;
        assert!(n <= 4);
    }
    assert_eq!(n, 4, "receives the RQ took after the refusals");
}

// ------------------------------------------------------------ credits

/// From the fresh user's report (issue 16): a thread with a full send half
/// blocks in `wait_room` (no async runtime) until the owner's poll gives
/// room back; with no poll, it returns `false` at its timeout; a request
/// larger than the queue is Invalid.
#[test]
fn wait_room_blocks_a_thread_until_the_owner_polls() {
    let e = env();
    let (mut a, _b) = pair(&e.pd, &cfg(4, 0));
    let (mut tx, _rx) = a.split().unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let to = RemoteAddr {
        addr: e.dst.addr(),
        rkey: e.dst.rkey(),
    };
    for i in 0..4 {
        tx.post_send(&[SendWr::rdma_write(i, &s, to).signaled()])
            .unwrap();
    }
    let r = tx.post_send(&[SendWr::rdma_write(4, &s, to).signaled()]);
    assert!(matches!(r, Err(Error::QueueFull)), "{r:?}");
    assert!(matches!(
        tx.wait_room(5, Duration::ZERO),
        Err(Error::NeverFits { wrs: 5, .. })
    ));
    // Nobody polls: no room within 100 ms.
    assert!(!tx.wait_room(1, Duration::from_millis(100)).unwrap());
    let got = std::thread::scope(|sc| {
        let waiter = sc.spawn(|| tx.wait_room(4, Duration::from_secs(20)));
        // The owner polls all four completions, giving the room back.
        let got = poll_n(&mut a, 4);
        (got, waiter.join().unwrap())
    });
    assert_eq!(ids(&got.0), vec![0, 1, 2, 3]);
    assert!(got.1.unwrap(), "the room the owner's poll gave back");
    tx.post_send(&[SendWr::rdma_write(5, &s, to).signaled()])
        .unwrap();
}
