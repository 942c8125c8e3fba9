//! What a split QP's halves hold and give back, on the sim: the owner or
//! the halves dropped while WRs are outstanding, a shared CQ reset,
//! removed or dropped with live halves, SRQ receives given back when a
//! split QP or its shared CQ goes, MRs held by the halves' WRs, an error
//! while two threads post, the SQ snapshot racing the send half, owned
//! buffers, the owner waiting by event, and out-of-order receives.

use rdma_direct::testing::QpHooks;
use rdma_direct::*;
use std::time::{Duration, Instant};

#[path = "support/sim.rs"]
mod support;
use support::*;
#[path = "support/split_qps.rs"]
mod split;
use split::*;

// ------------------------------------------------------------ dropping

/// The Qp dropped while its halves live: they post on without a crash,
/// until the queues they can fill are full (nobody polls), never more,
/// and then say why (`CqOwnerGone`, not a `QueueFull` that polling would
/// cure); then dropped too, in either order.
#[test]
fn owner_dropped_while_halves_post() {
    for send_first in [true, false] {
        let e = env();
        let (a, mut b) = pair(&e.pd, &cfg(8, 4));
        let mut a = a;
        let (mut tx, mut rx) = a.split().unwrap();
        drop(a);
        let s = [Sge::new(&e.src, 0, 8).unwrap()];
        let rs = [Sge::new(&e.dst, 0, 8).unwrap()];
        let mut sent = 0;
        for i in 0..20u64 {
            match tx.post_send(&[SendWr::rdma_write(i, &s, remote(&e.dst, 0)).signaled()]) {
                Ok(()) => sent += 1,
                Err(Error::CqOwnerGone { qpn }) => {
                    assert_eq!(qpn, tx.qp_num());
                    break;
                }
                Err(e) => panic!("{e:?}"),
            }
        }
        assert_eq!(sent, 8, "sends a half posted with nobody polling");
        let mut recvd = 0;
        for i in 0..20u64 {
            match rx.post_recv(&[RecvWr::new(i, &rs)]) {
                Ok(()) => recvd += 1,
                Err(Error::CqOwnerGone { .. }) => break,
                Err(e) => panic!("{e:?}"),
            }
        }
        assert_eq!(recvd, 4, "receives a half posted with nobody polling");
        // The peer's SENDs land in the orphan's receives (no crash).
        b.post_send(&[SendWr::send(1, &s).signaled()]).unwrap();
        assert_eq!(poll_n(&mut b, 1)[0].status, WcStatus::SUCCESS);
        if send_first {
            drop(tx);
            drop(rx);
        } else {
            drop(rx);
            drop(tx);
        }
        assert_eq!(e.pd.reclaim(), 0);
    }
}

/// Halves dropped unjoined (either order) while WRs are outstanding: the
/// QP takes them back at its next post, with the right room: it posts
/// exactly max_send_wr less what is outstanding before QueueFull, and
/// the halves' WRs complete through it with their wr_ids.
#[test]
fn dropped_halves_give_back_exact_room() {
    for send_first in [true, false] {
        let e = env();
        let c = QpConfig {
            rnr_retry: 7,
            ..cfg(8, 8)
        };
        let (mut a, mut b) = pair(&e.pd, &c);
        let (mut tx, rx) = a.split().unwrap();
        let s = [Sge::new(&e.src, 0, 8).unwrap()];
        // Three SENDs that wait (b has no receive): outstanding.
        for i in 0..3u64 {
            tx.post_send(&[SendWr::send(i, &s).signaled()]).unwrap();
        }
        if send_first {
            drop(tx);
            drop(rx);
        } else {
            drop(rx);
            drop(tx);
        }
        let mut ok = 0;
        for i in 0..20u64 {
            match a.post_send(&[SendWr::send(10 + i, &s).signaled()]) {
                Ok(()) => ok += 1,
                Err(Error::QueueFull) => break,
                Err(e) => panic!("{e:?}"),
            }
        }
        assert_eq!(ok, 5, "room after the halves came back (8 - 3 outstanding)");
        assert!(!a.is_split());
        let rs = [Sge::new(&e.dst, 0, 8).unwrap()];
        let rws: Vec<RecvWr> = (0..8).map(|i| RecvWr::new(i, &rs)).collect();
        b.post_recv(&rws).unwrap();
        let got = poll_n(&mut a, 8);
        assert_eq!(ids(&got), vec![0, 1, 2, 10, 11, 12, 13, 14]);
    }
}

// ------------------------------------------------------------ shared CQ

/// On a SharedCq: reset_qp and remove_qp of a QP whose halves live are
/// refused (QpSplit) and change nothing (credits, state, members); once
/// the halves are dropped both work and every credit is back.
#[test]
fn shared_cq_reset_remove_with_live_halves() {
    let e = env();
    let c = cfg(8, 8);
    let depth = CqSizing::new().qp(&c).qp(&c).depth().unwrap();
    let mut cq = e.pd.create_shared_cq(depth).unwrap();
    let x = cq.create_qp(&c).unwrap();
    let mut peer = e.pd.create_qp(&c).unwrap();
    Qp::connect_loopback(cq.qp_mut(x), &mut peer).unwrap();
    let free0 = cq.credits_free();
    let (mut tx, mut rx) = cq.qp_mut(x).split().unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let rs = [Sge::new(&e.dst, 0, 8).unwrap()];
    tx.post_send(&[SendWr::rdma_write(1, &s, remote(&e.dst, 0)).signaled()])
        .unwrap();
    rx.post_recv(&[RecvWr::new(2, &rs)]).unwrap();
    let free_split = cq.credits_free();
    let r = cq.reset_qp(x);
    assert!(matches!(r, Err(Error::QpSplit { .. })), "reset_qp: {r:?}");
    let r = cq.remove_qp(x);
    assert!(matches!(r, Err(Error::QpSplit { .. })), "remove_qp: {r:?}");
    assert_eq!(cq.len(), 1);
    assert_eq!(cq.credits_free(), free_split, "credits after refusals");
    assert_eq!(cq.qp(x).state(), QpState::Rts);
    assert_eq!(ids(&poll_shared_n(&mut cq, 1)), vec![1]);
    drop(tx);
    drop(rx);
    // One receive still outstanding: reset drops it and gives all back.
    cq.reset_qp(x).unwrap();
    assert_eq!(
        cq.credits_free(),
        free0,
        "credits after reset of a QP whose halves went"
    );
    cq.remove_qp(x).unwrap();
    assert!(cq.is_empty());
}

/// Many split/join cycles on a SharedCq, each with WRs outstanding at the
/// split and at the join, the halves' WRs mixed signaled and unsignaled:
/// once everything is polled, credits_free is back at its start value.
#[test]
fn shared_cq_split_join_cycles_credits_return() {
    let e = env();
    let c = QpConfig {
        rnr_retry: 7,
        ..cfg(16, 16)
    };
    let depth = CqSizing::new().qp(&c).qp(&c).depth().unwrap();
    let mut cq = e.pd.create_shared_cq(depth).unwrap();
    let x = cq.create_qp(&c).unwrap();
    let y = cq.create_qp(&c).unwrap();
    {
        let (l, r) = cq.qps_mut().split_at_mut(1);
        Qp::connect_loopback(&mut l[0], &mut r[0]).unwrap();
    }
    let free0 = cq.credits_free();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let rs = [Sge::new(&e.dst, 0, 8).unwrap()];
    let mut want_recvs = 0usize;
    let mut sends_done = 0usize;
    let mut expected = 0usize;
    let mut wc = [Completion::default(); 32];
    let mut got = 0usize;
    // Retries `f` while the queue or CQ is full, polling meanwhile.
    fn retry<T>(
        cq: &mut SharedCq,
        got: &mut usize,
        mut f: impl FnMut(&mut SharedCq) -> Result<T>,
    ) -> T {
        let t = Instant::now();
        loop {
            match f(cq) {
                Ok(v) => return v,
                Err(Error::QueueFull | Error::RecvQueueFull | Error::CqFull) => {
                    assert!(t.elapsed() < PATIENCE, "stuck");
                    let mut wc = [Completion::default(); 32];
                    *got += cq.poll(&mut wc).unwrap();
                }
                Err(e) => panic!("{e:?}"),
            }
        }
    }
    for cycle in 0..300u64 {
        // x's own post before the split: outstanding at the split.
        retry(&mut cq, &mut got, |cq| {
            cq.qp_mut(x)
                .post_send(&[SendWr::rdma_write(cycle, &s, remote(&e.dst, 0))])
        });
        let (mut tx, mut rx) = retry(&mut cq, &mut got, |cq| cq.qp_mut(x).split());
        // y sends to x (x's receives come from its receive half).
        retry(&mut cq, &mut got, |_| {
            rx.post_recv(&[RecvWr::new(cycle, &rs)])
        });
        want_recvs += 1;
        retry(&mut cq, &mut got, |_| {
            tx.post_send(&[SendWr::rdma_write(cycle, &s, remote(&e.dst, 8)).signaled()])
        });
        expected += 1; // that signaled WRITE
        retry(&mut cq, &mut got, |cq| {
            cq.qp_mut(y)
                .post_send(&[SendWr::send(cycle, &s).signaled()])
        });
        expected += 2; // y's SEND and x's receive
        sends_done += 1;
        if cycle % 3 == 0 {
            got += cq.poll(&mut wc).unwrap();
        }
        cq.qp_mut(x).join(tx, rx).unwrap();
        if cycle % 2 == 0 {
            got += cq.poll(&mut wc).unwrap();
        }
    }
    let _ = (want_recvs, sends_done);
    let t = Instant::now();
    while got < expected && t.elapsed() < PATIENCE {
        got += cq.poll(&mut wc).unwrap();
    }
    assert_eq!(got, expected);
    // x's last unsignaled WRITE may still hold credit until a signaled
    // one retires it: one more signaled WRITE and its completion.
    cq.qp_mut(x)
        .post_send(&[SendWr::rdma_write(9999, &s, remote(&e.dst, 0)).signaled()])
        .unwrap();
    assert_eq!(ids(&poll_shared_n(&mut cq, 1)), vec![9999]);
    assert!(drain_cq(&mut cq).is_empty());
    assert_eq!(
        cq.credits_free(),
        free0,
        "credits after 300 split/join cycles"
    );
}

/// A SharedCq dropped while a member's halves live (and post): no crash;
/// the orphaned halves post until full, then drop.
#[test]
fn shared_cq_dropped_with_live_halves() {
    let e = env();
    let c = cfg(8, 8);
    let mut cq =
        e.pd.create_shared_cq(CqSizing::new().qp(&c).depth().unwrap())
            .unwrap();
    let x = cq.create_qp(&c).unwrap();
    let mut peer = e.pd.create_qp(&c).unwrap();
    Qp::connect_loopback(cq.qp_mut(x), &mut peer).unwrap();
    let (mut tx, mut rx) = cq.qp_mut(x).split().unwrap();
    drop(cq);
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let rs = [Sge::new(&e.dst, 0, 8).unwrap()];
    let mut n = 0;
    while tx
        .post_send(&[SendWr::rdma_write(n, &s, remote(&e.dst, 0)).signaled()])
        .is_ok()
    {
        n += 1;
        assert!(n <= 8, "posted past max_send_wr with nobody polling");
    }
    assert_eq!(n, 8);
    rx.post_recv(&[RecvWr::new(1, &rs)]).unwrap();
    drop(rx);
    drop(tx);
}

// ------------------------------------------------------------ SRQ cleanup

/// Receives an SRQ gave a QP whose completions were never polled go back
/// to the SRQ when the QP is destroyed (`DirectQp::drop`'s RESET, as
/// rdma-core's mlx5_cq_clean). Baseline, unsplit.
#[test]
fn srq_receives_back_when_unsplit_qp_dropped() {
    let e = env();
    let (mut srq, got) = srq_left_after_drop(&e, None);
    assert_eq!(
        got, 1,
        "SRQ outstanding after the QP (3 unpolled) was dropped"
    );
    let _ = srq.outstanding();
}

/// The same, for a QP split and dropped while split: with the halves
/// dropped first (then the Qp), and with the Qp dropped first (then the
/// halves). The SRQ must get its 3 receives back either way, or it loses
/// them for good.
#[test]
fn srq_receives_back_when_split_qp_dropped() {
    let mut bad = vec![];
    for halves_first in [true, false] {
        let e = env();
        let (_srq, got) = srq_left_after_drop(&e, Some(halves_first));
        if got != 1 {
            bad.push(format!(
                "halves_first={halves_first}: SRQ outstanding {got}, want 1"
            ));
        }
    }
    assert!(bad.is_empty(), "receives lost to the SRQ: {bad:?}");
}

/// An SRQ with 4 receives; a QP on it takes 3 (unpolled); the QP is
/// dropped (`split`: None unsplit, Some(halves_first) split); returns the
/// SRQ's outstanding count after (1 if the 3 came back).
fn srq_left_after_drop(e: &Env, split: Option<bool>) -> (Srq, u32) {
    let mut srq = e.pd.create_srq(8, 1).unwrap();
    let mut a = e.pd.create_qp(&QpConfig::default()).unwrap();
    let mut b = e.pd.create_qp_on_srq(&QpConfig::default(), &srq).unwrap();
    Qp::connect_loopback(&mut a, &mut b).unwrap();
    let rs = [Sge::new(&e.dst, 0, 8).unwrap()];
    let rws: Vec<RecvWr> = (0..4).map(|i| RecvWr::new(i, &rs)).collect();
    srq.post_recv(&rws).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    for i in 0..3 {
        a.post_send(&[SendWr::send(i, &s).signaled()]).unwrap();
    }
    assert_eq!(poll_n(&mut a, 3).len(), 3);
    match split {
        None => drop(b),
        Some(halves_first) => {
            let (tx, rx) = b.split().unwrap();
            if halves_first {
                drop((tx, rx));
                drop(b);
            } else {
                drop(b);
                drop((tx, rx));
            }
        }
    }
    let n = srq.outstanding();
    (srq, n)
}

/// A SharedCq dropped while a split member on an SRQ still has its
/// halves (dropped after the CQ): the SRQ must get the member's unpolled
/// receives back all the same (SharedCq's Drop: "each QP on an SRQ is
/// reset"), or loses them for good.
#[test]
fn shared_cq_drop_with_live_halves_srq_member_gives_receives_back() {
    let e = env();
    let mut srq = e.pd.create_srq(8, 1).unwrap();
    let c = QpConfig::default();
    let depth = CqSizing::new().qp(&c).queue(8).depth().unwrap();
    let mut cq = e.pd.create_shared_cq(depth).unwrap();
    let x = cq.create_qp_on_srq(&c, &srq).unwrap();
    let mut a = e.pd.create_qp(&c).unwrap();
    Qp::connect_loopback(&mut a, cq.qp_mut(x)).unwrap();
    let rs = [Sge::new(&e.dst, 0, 8).unwrap()];
    let rws: Vec<RecvWr> = (0..4).map(|i| RecvWr::new(i, &rs)).collect();
    srq.post_recv(&rws).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    for i in 0..3 {
        a.post_send(&[SendWr::send(i, &s).signaled()]).unwrap();
    }
    assert_eq!(poll_n(&mut a, 3).len(), 3);
    let (tx, rx) = cq.qp_mut(x).split().unwrap();
    drop(cq);
    drop((tx, rx));
    assert_eq!(
        srq.outstanding(),
        1,
        "SRQ outstanding after the CQ, then the halves, went"
    );
}

/// A SharedCq dropped with a split member on an SRQ whose halves were
/// dropped: the SharedCq's drop resets it (reset_qp takes the parked
/// halves back first), so the SRQ gets its unpolled receives back.
#[test]
fn shared_cq_drop_split_srq_member_gives_receives_back() {
    let e = env();
    let mut srq = e.pd.create_srq(8, 1).unwrap();
    let c = QpConfig::default();
    let depth = CqSizing::new().qp(&c).queue(8).depth().unwrap();
    let mut cq = e.pd.create_shared_cq(depth).unwrap();
    let x = cq.create_qp_on_srq(&c, &srq).unwrap();
    let mut a = e.pd.create_qp(&c).unwrap();
    Qp::connect_loopback(&mut a, cq.qp_mut(x)).unwrap();
    let rs = [Sge::new(&e.dst, 0, 8).unwrap()];
    let rws: Vec<RecvWr> = (0..4).map(|i| RecvWr::new(i, &rs)).collect();
    srq.post_recv(&rws).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    for i in 0..3 {
        a.post_send(&[SendWr::send(i, &s).signaled()]).unwrap();
    }
    assert_eq!(poll_n(&mut a, 3).len(), 3);
    let (tx, rx) = cq.qp_mut(x).split().unwrap();
    drop((tx, rx));
    drop(cq);
    assert_eq!(srq.outstanding(), 1);
}

// ------------------------------------------------------------ MR lifetime

/// An MR dropped while a send half's WR (stuck in RNR retry) and a
/// receive half's receive name it stays registered until the owner polls
/// their completions; then reclaim frees it.
#[test]
fn mr_dropped_under_half_wrs_waits_for_owner_poll() {
    let e = env();
    let c = QpConfig {
        rnr_retry: 7,
        ..cfg(8, 8)
    };
    let (mut a, mut b) = pair(&e.pd, &c);
    let (mut tx, mut rx) = a.split().unwrap();
    let m = e.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let r = e.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let live0 = e.pd.live_mrs();
    let ms = [Sge::new(&m, 0, 8).unwrap()];
    let rsg = [Sge::new(&r, 0, 8).unwrap()];
    tx.post_send(&[SendWr::send(1, &ms).signaled()]).unwrap();
    rx.post_recv(&[RecvWr::new(2, &rsg)]).unwrap();
    drop(m);
    drop(r);
    assert_eq!(e.pd.reclaim(), 2, "both wait for the halves' WRs");
    assert_eq!(e.pd.live_mrs(), live0);
    let bs = [Sge::new(&e.dst, 0, 8).unwrap()];
    b.post_recv(&[RecvWr::new(3, &bs)]).unwrap();
    b.post_send(&[SendWr::send(4, &[Sge::new(&e.src, 0, 8).unwrap()]).signaled()])
        .unwrap();
    let got = poll_n(&mut a, 2);
    assert!(got.iter().all(|c| c.status == WcStatus::SUCCESS), "{got:?}");
    assert_eq!(e.pd.reclaim(), 0, "freed once the owner polled");
    assert_eq!(e.pd.live_mrs(), live0 - 2);
}

/// A receive refused (RecvQueueFull) while the RQ holds max_recv_wr
/// receives must not make a dropped MR that the oldest outstanding
/// receive names look free: that receive may still write into it (the
/// PD's rule: "the outstanding receives that name it" hold a dropped
/// MR). Through the receive half and through the whole QP; then the
/// peer's SEND into that receive must succeed.
#[test]
fn refused_receive_keeps_mr_of_oldest_outstanding_receive() {
    let mut bad = vec![];
    for (through_half, refuse) in [(true, true), (false, true), (true, false), (false, false)] {
        let e = env();
        let (mut a, mut b) = pair(&e.pd, &cfg(8, 4));
        let held = e.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
        let other = e.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
        let hs = [Sge::new(&held, 0, 8).unwrap()];
        let os = [Sge::new(&other, 0, 8).unwrap()];
        let mut halves = through_half.then(|| a.split().unwrap());
        let mut post = |a: &mut Qp, w: &[RecvWr]| match &mut halves {
            Some((_, rx)) => rx.post_recv(w),
            None => a.post_recv(w),
        };
        post(&mut a, &[RecvWr::new(0, &hs)]).unwrap();
        for i in 1..4 {
            post(&mut a, &[RecvWr::new(i, &os)]).unwrap();
        }
        if refuse {
            let r = post(&mut a, &[RecvWr::new(4, &os)]);
            assert!(matches!(r, Err(Error::RecvQueueFull)), "{r:?}");
        }
        drop(held);
        let waiting = e.pd.reclaim();
        let s = [Sge::new(&e.src, 0, 8).unwrap()];
        b.post_send(&[SendWr::send(1, &s).signaled()]).unwrap();
        let got = poll_n(&mut a, 1);
        if waiting != 1 || got[0].status != WcStatus::SUCCESS {
            bad.push(format!(
                "through_half={through_half} refused_post={refuse}: dropped MRs still waiting {waiting} (want 1); \
                 receive 0 completed {:?} (wr_id {})",
                got[0].status, got[0].wr_id
            ));
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

// ------------------------------------------------------------ races

/// Two poster threads (send half, receive half) while the owner moves the
/// QP to ERR mid-stream and keeps polling: every WR a half posted
/// successfully (all signaled) completes exactly once, SUCCESS before the
/// ERR, WR_FLUSH_ERR after; no panic, no stall.
#[test]
fn err_mid_stream_with_two_posting_threads() {
    let e = env();
    let c = QpConfig {
        rnr_retry: 7,
        ..cfg(16, 16)
    };
    let (mut a, mut b) = pair(&e.pd, &c);
    let (mut tx, mut rx) = a.split().unwrap();
    let (src, dst) = (&e.src, &e.dst);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (sent, recvd, got) = std::thread::scope(|sc| {
        let st = &stop;
        let ts = sc.spawn(move || {
            let s = [Sge::new(src, 0, 8).unwrap()];
            let mut ok = vec![];
            let mut i = 0u64;
            while !st.load(std::sync::atomic::Ordering::Relaxed) {
                let w = SendWr::rdma_write(i, &s, remote(dst, 0)).signaled();
                match tx.post_send(&[w]) {
                    Ok(()) => ok.push(i),
                    Err(Error::QueueFull) => std::thread::yield_now(),
                    Err(e) => panic!("send {i}: {e:?}"),
                }
                i += 1;
            }
            ok
        });
        let tr = sc.spawn(move || {
            let rs = [Sge::new(dst, 64, 8).unwrap()];
            let mut ok = vec![];
            let mut i = 1_000_000u64;
            while !st.load(std::sync::atomic::Ordering::Relaxed) {
                match rx.post_recv(&[RecvWr::new(i, &rs)]) {
                    Ok(()) => ok.push(i),
                    Err(Error::RecvQueueFull) => std::thread::yield_now(),
                    Err(e) => panic!("recv {i}: {e:?}"),
                }
                i += 1;
            }
            ok
        });
        let mut got = vec![];
        let mut wc = [Completion::default(); 16];
        let t = Instant::now();
        let s = [Sge::new(src, 0, 8).unwrap()];
        let mut bsent = 0;
        let mut berr = false;
        while t.elapsed() < Duration::from_millis(400) {
            if t.elapsed() > Duration::from_millis(200) && !berr {
                a.modify(QpState::Err, &QpAttr::default()).unwrap();
                berr = true;
            }
            if !berr && bsent < 50 && b.post_send(&[SendWr::send(bsent, &s).signaled()]).is_ok() {
                bsent += 1;
            }
            let _ = b.poll(&mut wc);
            let k = a.poll(&mut wc).unwrap();
            got.extend_from_slice(&wc[..k]);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let sent = ts.join().unwrap();
        let recvd = tr.join().unwrap();
        let t = Instant::now();
        while got.len() < sent.len() + recvd.len() && t.elapsed() < PATIENCE {
            let k = a.poll(&mut wc).unwrap();
            got.extend_from_slice(&wc[..k]);
        }
        got.extend(drain(&mut a));
        (sent, recvd, got)
    });
    let mut want: Vec<u64> = sent.iter().chain(recvd.iter()).copied().collect();
    want.sort();
    let mut seen = ids(&got);
    seen.sort();
    assert_eq!(seen.len(), want.len(), "completions vs WRs posted");
    assert!(seen == want, "wr_ids differ");
    assert!(got
        .iter()
        .all(|c| c.status == WcStatus::SUCCESS || c.status == WcStatus::WR_FLUSH_ERR));
}

// ------------------------------------------------------------ soundness

/// `Qp::sq_snapshot` is a safe fn; on a split QP it reads the whole SQ
/// ring (plain `copy_nonoverlapping` through the owner's copy of the
/// ring, `RingBuf::read_wrapping`) while the send half, on another
/// thread, writes the same bytes with plain stores: a data race, i.e.
/// undefined behaviour reachable from safe code (`split_copy` makes two
/// `RingBuf`s over one ring, against `RingBuf::from_raw`'s "no other Rust
/// reference may access those bytes"; `sim_hook` is refused while split,
/// `sq_snapshot` is not). Observable here as torn WQEs: a snapshot in
/// which a WRITE WQE's ctrl index and its data segment's byte count
/// come from different WRs (WR i is posted with length 1 + (i mod 2^16) % 251).
#[test]
fn sq_snapshot_of_split_qp_races_with_send_half() {
    let e = env();
    let (mut a, _b) = pair(&e.pd, &cfg(8, 4));
    let (mut tx, _rx) = a.split().unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (src, dst) = (&e.src, &e.dst);
    let torn = std::thread::scope(|sc| {
        let st = &stop;
        sc.spawn(move || {
            let mut i = 0u32;
            while !st.load(std::sync::atomic::Ordering::Relaxed) {
                let len = 1 + (i & 0xffff) % 251;
                let w = WriteWr::new(i as u64, Sge::new(src, 0, len).unwrap(), remote(dst, 0));
                match tx.post_write(&w) {
                    Ok(()) => i += 1,
                    Err(Error::QueueFull) => std::hint::spin_loop(),
                    Err(e) => panic!("{e:?}"),
                }
            }
        });
        let mut wc = [Completion::default(); 16];
        let t = Instant::now();
        let mut torn = None;
        let mut snaps = 0;
        while t.elapsed() < Duration::from_secs(20) && torn.is_none() {
            let _ = a.poll(&mut wc).unwrap();
            let Some(snap) = a.sq_snapshot() else { break };
            snaps += 1;
            for (slot, w) in snap[..snap.len() - 4].chunks_exact(64).enumerate() {
                if w[3] != 0x08 {
                    continue; // not (yet) a WRITE
                }
                let idx = u16::from_be_bytes([w[1], w[2]]) as u32;
                let len = u32::from_be_bytes([w[32], w[33], w[34], w[35]]);
                // (WR i has length 1 + (i mod 2^16) % 251: a function of
                // its ctrl index alone.)
                if len != 1 + idx % 251 {
                    torn = Some(format!(
                        "snapshot {snaps}, slot {slot}: ctrl index {idx}, byte count {len} (want {})",
                        1 + idx % 251
                    ));
                    break;
                }
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        torn
    });
    assert!(
        torn.is_none(),
        "Qp::sq_snapshot read a WQE the send half was writing (a data race): {torn:?}"
    );
}

/// Owned buffers posted by the whole QP before the split complete while
/// it is split: the owner hands them back (take_send_buf /
/// take_recv_buf) with their wr_ids, as the retired counts say.
#[test]
fn owned_buffers_posted_before_split_come_back_while_split() {
    let e = env();
    let (mut a, mut b) = pair(&e.pd, &cfg(8, 8));
    let sb = e.pd.alloc_local_mr(64, Access::LOCAL_WRITE).unwrap();
    let rb = e.pd.alloc_local_mr(64, Access::LOCAL_WRITE).unwrap();
    a.post_recv_owned(5, rb, 0, 64)
        .map_err(|r| r.error)
        .unwrap();
    a.post_send_owned(
        &SendWr::rdma_write(6, &[], remote(&e.dst, 0)).signaled(),
        sb,
        0,
        8,
    )
    .map_err(|r| r.error)
    .unwrap();
    let (tx, rx) = a.split().unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    b.post_send(&[SendWr::send(1, &s).signaled()]).unwrap();
    let mut got = ids(&poll_n(&mut a, 2));
    got.sort();
    assert_eq!(got, vec![5, 6]);
    assert_eq!(
        a.take_send_buf().map(|(id, _)| id),
        Some(6),
        "send buffer while split"
    );
    assert_eq!(
        a.take_recv_buf().map(|(id, _)| id),
        Some(5),
        "receive buffer while split"
    );
    a.join(tx, rx).unwrap();
}

/// The owner waits for completions by events (arm + wait) while a half
/// on another thread posts: the wait wakes with the half's completion.
#[test]
fn owner_waits_by_event_for_half_completion() {
    let e = env();
    let (mut a, _b) = pair(&e.pd, &cfg(8, 8));
    let (mut tx, _rx) = a.split().unwrap();
    let (src, dst) = (&e.src, &e.dst);
    let got = std::thread::scope(|sc| {
        sc.spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            tx.post_write(
                &WriteWr::new(42, Sge::new(src, 0, 8).unwrap(), remote(dst, 0)).signaled(),
            )
            .unwrap();
        });
        let mut wc = [Completion::default(); 4];
        let n = a
            .wait(&mut wc, CompletionMode::Events, Duration::from_secs(10))
            .unwrap();
        wc[..n].to_vec()
    });
    assert_eq!(ids(&got), vec![42]);
}

/// Receives completed out of order (the sim's swap hook, set before the
/// split) while split: the owner reports them in the device's order with
/// the right wr_ids, and the receive half gets room back only as the
/// completed prefix grows; after the join the QP goes on from there.
#[test]
fn out_of_order_receives_while_split() {
    let e = env();
    let (mut a, mut b) = pair(&e.pd, &cfg(8, 4));
    a.sim_hook().unwrap().swap_recv_completions(true);
    let (tx, mut rx) = a.split().unwrap();
    let rs = [Sge::new(&e.dst, 0, 8).unwrap()];
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let mut got = vec![];
    for lap in 0..6u64 {
        let rws: Vec<RecvWr> = (0..4).map(|i| RecvWr::new(lap * 4 + i, &rs)).collect();
        rx.post_recv(&rws).unwrap();
        let r = rx.post_recv(&[RecvWr::new(99, &rs)]);
        assert!(matches!(r, Err(Error::RecvQueueFull)), "{r:?}");
        for i in 0..4 {
            b.post_send(&[SendWr::send(i, &s).signaled()]).unwrap();
        }
        assert_eq!(poll_n(&mut b, 4).len(), 4);
        got.extend(ids(&poll_n(&mut a, 4)));
    }
    let want: Vec<u64> = (0..6u64)
        .flat_map(|l| [1, 0, 3, 2].map(|i| l * 4 + i))
        .collect();
    assert_eq!(got, want);
    a.join(tx, rx).unwrap();
    a.sim_hook().unwrap().swap_recv_completions(false);
    a.post_recv(&[RecvWr::new(500, &rs)]).unwrap();
    b.post_send(&[SendWr::send(9, &s).signaled()]).unwrap();
    assert_eq!(ids(&poll_n(&mut a, 1)), vec![500]);
}
