//! A break-it review of "a QP in two halves", continued from
//! tests/review_halves.rs: never-fitting splits, SRQ receives when a split
//! QP or its shared CQ goes, MRs and receives held, errors while two
//! threads post, the ring snapshot, owned buffers, events, out-of-order
//! receives.

use rdma_direct::testing::QpHooks;
use rdma_direct::*;
use std::time::{Duration, Instant};

#[path = "support/sim.rs"]
mod support;
use support::*;
#[path = "support/halves.rs"]
mod halves;
use halves::*;

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
    let m = e.pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
    let r = e.pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
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
        let held = e.pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
        let other = e.pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
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
    let sb = e.pd.reg_local(64, Access::LOCAL_WRITE).unwrap();
    let rb = e.pd.reg_local(64, Access::LOCAL_WRITE).unwrap();
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
