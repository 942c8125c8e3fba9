//! Shared receive queues on the sim, through the public API: bad input
//! refused with nothing posted, the SRQ limit event once per arming, many
//! QPs taking every receive once, receives posted one at a time over many
//! laps of the ring, many QPs on small shared CQs, MRs kept until their
//! receive is consumed, and UD QPs on an SRQ. (When what uses an SRQ goes:
//! `srq_teardown.rs`.)

use rdma_direct::testing::QpHooks;
use rdma_direct::*;
use std::time::{Duration, Instant};

#[path = "support/posts.rs"]
mod support;
use support::*;
#[path = "support/transports.rs"]
mod transports;
use transports::*;

/// Creation limits, and post_recv's refusals: each typed, nothing posted
/// (outstanding unchanged; the next good post takes exactly max_wr).
#[test]
fn srq_bad_input_refused_nothing_posted() {
    let e = env();
    for (w, s) in [
        (0, 1),
        (16385, 1),
        (1, 0),
        (1, 31),
        (u32::MAX, 1),
        (1, u32::MAX),
    ] {
        assert!(
            matches!(e.pd.create_srq(w, s), Err(Error::Config { .. })),
            "{w} {s}"
        );
    }
    let pd2 = e.ctx.alloc_pd().unwrap();
    let other = pd2.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let rb = e.pd.alloc_mr(1 << 16, Access::LOCAL_WRITE).unwrap();
    for max_wr in [1u32, 2, 3, 7, 8, 16, 63, 64] {
        let mut srq = e.pd.create_srq(max_wr, 2).unwrap();
        assert_eq!(srq.outstanding(), 0);
        let sg = srq_sges(&rb, max_wr as usize + 1, 64);
        let all = recvs(&sg, 0);
        let err = srq.post_recv(&all).unwrap_err();
        assert!(matches!(err, Error::NeverFits { .. }), "max_wr+1: {err:?}");
        assert_eq!(srq.outstanding(), 0);
        let three = [
            Sge::new(&rb, 0, 8).unwrap(),
            Sge::new(&rb, 8, 8).unwrap(),
            Sge::new(&rb, 16, 8).unwrap(),
        ];
        let os = [Sge::new(&other, 0, 8).unwrap()];
        let data = [1u8; 8];
        let bs = [Sge::bytes(&data).unwrap()];
        for bad in [&three[..], &os[..], &bs[..]] {
            let mut b = all[..max_wr as usize - 1].to_vec();
            b.push(RecvWr::new(99, bad));
            let err = srq.post_recv(&b).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::TooManySges { .. } | Error::ForeignPd { .. } | Error::BytesSge
                ),
                "{err:?}"
            );
            assert_eq!(srq.outstanding(), 0);
        }
        srq.post_recv(&all[..max_wr as usize]).unwrap();
        assert_eq!(srq.outstanding(), max_wr);
        let err = srq.post_recv(&all[..1]).unwrap_err();
        assert!(matches!(err, Error::RecvQueueFull), "{err:?}");
        srq.post_recv(&[]).unwrap();
        assert_eq!(srq.outstanding(), max_wr);
        // Limits.
        assert!(matches!(
            srq.set_limit(max_wr + 1),
            Err(Error::Config { .. })
        ));
        srq.set_limit(max_wr).unwrap();
        srq.set_limit(0).unwrap();
    }
    // A QP on an SRQ of another PD; post_recv on a QP on an SRQ.
    let srq2 = pd2.create_srq(4, 1).unwrap();
    assert!(matches!(
        e.pd.create_qp_on_srq(&QpConfig::default(), &srq2),
        Err(Error::ForeignPd {
            object: PdObject::Srq
        })
    ));
    let srq = e.pd.create_srq(4, 1).unwrap();
    let mut q = e.pd.create_qp_on_srq(&QpConfig::default(), &srq).unwrap();
    let mut p = e.pd.create_qp(&QpConfig::default()).unwrap();
    let s = [Sge::new(&rb, 0, 8).unwrap()];
    assert!(matches!(
        q.post_recv(&[RecvWr::new(1, &s)]),
        Err(Error::SrqAttached { .. })
    ));
    Qp::connect_loopback(&mut q, &mut p).unwrap();
    assert!(matches!(
        q.post_recv(&[RecvWr::new(1, &s)]),
        Err(Error::SrqAttached { .. })
    ));
    assert!(matches!(q.post_recv(&[]), Err(Error::SrqAttached { .. })));
    // An own CQ too small for the SRQ's receives.
    let srq = e.pd.create_srq(64, 1).unwrap();
    let small = QpConfig {
        cq_depth: Some(32),
        ..QpConfig::default()
    };
    assert!(matches!(
        e.pd.create_qp_on_srq(&small, &srq),
        Err(Error::SrqCqCredits { .. })
    ));
    let mut cq = e.pd.create_shared_cq(32).unwrap();
    assert!(matches!(
        cq.create_qp_on_srq(&QpConfig::default(), &srq),
        Err(Error::SrqCqCredits { .. })
    ));
    assert_eq!(cq.credits_free(), 32);
    assert!(cq.is_empty());
}

/// SRQ limit: 0 raises nothing; max_wr raises on the first receive taken;
/// an event once per arming; re-arming raises again; events are typed with
/// the SRQ's number.
#[test]
fn srq_limit_events_once_per_arming() {
    let e = env();
    let mut srq = e.pd.create_srq(8, 1).unwrap();
    let rb = e.pd.alloc_mr(8 * 64, Access::LOCAL_WRITE).unwrap();
    let sg = srq_sges(&rb, 8, 64);
    let mut server = e.pd.create_qp_on_srq(&QpConfig::default(), &srq).unwrap();
    let mut client = e.pd.create_qp(&QpConfig::default()).unwrap();
    Qp::connect_loopback(&mut server, &mut client).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    assert_eq!(e.ctx.get_async_event(Duration::ZERO).unwrap(), None);
    srq.post_recv(&recvs(&sg, 0)).unwrap();
    srq.set_limit(0).unwrap();
    let send = |client: &mut Qp, server: &mut Qp, id: u64| {
        client
            .post_send(&[SendWr::send(id, &s).signaled()])
            .unwrap();
        poll_n(client, 1);
        poll_n(server, 1)[0]
    };
    send(&mut client, &mut server, 1);
    assert_eq!(
        e.ctx.get_async_event(Duration::from_millis(50)).unwrap(),
        None
    );
    // 7 posted; limit 8: the next one taken raises it.
    srq.set_limit(8).unwrap();
    send(&mut client, &mut server, 2);
    let ev = e.ctx.get_async_event(PATIENCE).unwrap();
    assert_eq!(
        ev,
        Some(AsyncEvent::SrqLimitReached {
            srq_num: srq.srq_num()
        })
    );
    send(&mut client, &mut server, 3);
    assert_eq!(
        e.ctx.get_async_event(Duration::from_millis(50)).unwrap(),
        None
    );
    // Re-arm at 2 with 5 posted: nothing until fewer than 2 are left.
    srq.set_limit(2).unwrap();
    for id in 4..7 {
        send(&mut client, &mut server, id);
        assert_eq!(
            e.ctx.get_async_event(Duration::ZERO).unwrap(),
            None,
            "id {id}"
        );
    }
    send(&mut client, &mut server, 7); // 1 left
    let ev = e.ctx.get_async_event(PATIENCE).unwrap();
    assert_eq!(
        ev,
        Some(AsyncEvent::SrqLimitReached {
            srq_num: srq.srq_num()
        })
    );
    assert_eq!(e.ctx.get_async_event(Duration::ZERO).unwrap(), None);
    // Re-filled to max_wr: the limit at max_wr raises once.
    srq.post_recv(&recvs(&sg[..7], 100)).unwrap();
    assert_eq!(srq.outstanding(), 8);
    srq.set_limit(8).unwrap();
    send(&mut client, &mut server, 8);
    send(&mut client, &mut server, 9);
    assert!(e.ctx.get_async_event(PATIENCE).unwrap().is_some());
    assert_eq!(
        e.ctx.get_async_event(Duration::from_millis(50)).unwrap(),
        None
    );
}

/// Exactly max_wr receives are taken and each completes once (on the QP
/// that took it), then the SRQ takes max_wr again; SENDs beyond its
/// receives get RNR and complete once a receive is posted.
#[test]
fn srq_several_qps_every_wr_id_once() {
    let e = env();
    let max_wr = 16u32;
    let mut srq = e.pd.create_srq(max_wr, 1).unwrap();
    let rb =
        e.pd.alloc_mr(max_wr as usize * 64, Access::LOCAL_WRITE)
            .unwrap();
    let sg = srq_sges(&rb, max_wr as usize, 64);
    let cfg = QpConfig {
        rnr_retry: 7,
        min_rnr_timer: 1,
        ..QpConfig::default()
    };
    let mut servers: Vec<Qp> = Vec::new();
    let mut clients: Vec<Qp> = Vec::new();
    for _ in 0..4 {
        let mut s = e.pd.create_qp_on_srq(&cfg, &srq).unwrap();
        let mut c = e.pd.create_qp(&cfg).unwrap();
        Qp::connect_loopback(&mut s, &mut c).unwrap();
        servers.push(s);
        clients.push(c);
    }
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    for round in 0..3u64 {
        srq.post_recv(&recvs(&sg, round * 100)).unwrap();
        assert_eq!(srq.outstanding(), max_wr);
        assert!(matches!(
            srq.post_recv(&recvs(&sg[..1], 0)),
            Err(Error::RecvQueueFull)
        ));
        for i in 0..max_wr as u64 {
            let k = (i % 4) as usize;
            clients[k]
                .post_send(&[SendWr::send(i, &s).signaled()])
                .unwrap();
        }
        let mut ids = Vec::new();
        for (k, srv) in servers.iter_mut().enumerate() {
            let got = poll_n(srv, max_wr as usize / 4);
            assert!(got
                .iter()
                .all(|c| c.qp_num == srv.qp_num() && c.status == WcStatus::SUCCESS));
            ids.extend(got.iter().map(|c| c.wr_id));
            assert!(drain(srv).is_empty(), "server {k}");
        }
        for c in clients.iter_mut() {
            poll_n(c, max_wr as usize / 4);
        }
        ids.sort();
        assert_eq!(
            ids,
            (round * 100..round * 100 + max_wr as u64).collect::<Vec<_>>()
        );
        assert_eq!(srq.outstanding(), 0);
    }
    // One more SEND than receives: it waits (RNR), then takes the next.
    clients[0]
        .post_send(&[SendWr::send(7, &s).signaled()])
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert!(drain(&mut servers[0]).is_empty());
    srq.post_recv(&recvs(&sg[..1], 1000)).unwrap();
    assert_eq!(poll_n(&mut servers[0], 1)[0].wr_id, 1000);
    assert_eq!(poll_n(&mut clients[0], 1)[0].status, WcStatus::SUCCESS);
}

/// Receives posted one at a time (the in-place post) over many laps of
/// the ring, their completions polled in a different order each round
/// across four QPs: each post before max_wr outstanding succeeds, the one
/// after is refused (RecvQueueFull) and posts nothing, and every wr_id comes
/// back once, so WQEs completed out of order are relinked and reused.
#[test]
fn srq_single_posts_over_many_laps_keep_max_wr() {
    let e = env();
    let max_wr = 5u32;
    let mut srq = e.pd.create_srq(max_wr, 1).unwrap();
    let rb =
        e.pd.alloc_mr(max_wr as usize * 64, Access::LOCAL_WRITE)
            .unwrap();
    let sg = srq_sges(&rb, max_wr as usize, 64);
    let cfg = QpConfig {
        rnr_retry: 7,
        min_rnr_timer: 1,
        ..QpConfig::default()
    };
    let (mut servers, mut clients) = (Vec::new(), Vec::new());
    for _ in 0..4 {
        let mut s = e.pd.create_qp_on_srq(&cfg, &srq).unwrap();
        let mut c = e.pd.create_qp(&cfg).unwrap();
        Qp::connect_loopback(&mut s, &mut c).unwrap();
        servers.push(s);
        clients.push(c);
    }
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let mut next_id = 0u64;
    let mut slot = 0usize;
    // The wr_ids posted and not yet completed.
    let mut held = std::collections::HashSet::new();
    for round in 0..40u64 {
        // Fill up one receive at a time.
        while srq.outstanding() < max_wr {
            srq.post_recv(&[RecvWr::new(next_id, &sg[slot])]).unwrap();
            held.insert(next_id);
            next_id += 1;
            slot = (slot + 1) % sg.len();
        }
        assert!(matches!(
            srq.post_recv(&[RecvWr::new(u64::MAX, &sg[0])]),
            Err(Error::RecvQueueFull)
        ));
        assert_eq!(srq.outstanding(), max_wr);
        // Consume some of them (1 to max_wr), spread over the QPs.
        let n = 1 + (round as usize * 3) % max_wr as usize;
        let mut per = [0usize; 4];
        for i in 0..n {
            let k = (i + round as usize) % 4;
            clients[k]
                .post_send(&[SendWr::send(i as u64, &s).signaled()])
                .unwrap();
            per[k] += 1;
        }
        let mut ids = Vec::new();
        // Poll the servers in an order that changes every round.
        for j in 0..4 {
            let k = if round % 2 == 0 { j } else { 3 - j };
            ids.extend(poll_n(&mut servers[k], per[k]).iter().map(|c| c.wr_id));
            poll_n(&mut clients[k], per[k]);
        }
        assert_eq!(ids.len(), n);
        for id in &ids {
            assert!(
                held.remove(id),
                "wr_id {id} (round {round}) not held, or twice"
            );
        }
        assert_eq!(srq.outstanding(), max_wr - n as u32);
        assert_eq!(held.len(), srq.outstanding() as usize);
        // Take the rest back at the end of every fourth round.
        if round % 4 == 3 {
            let rest = srq.outstanding() as usize;
            for i in 0..rest {
                clients[i % 4]
                    .post_send(&[SendWr::send(0, &s).signaled()])
                    .unwrap();
            }
            for i in 0..4 {
                let c = (rest + 3 - i) / 4;
                for w in poll_n(&mut servers[i], c) {
                    assert!(held.remove(&w.wr_id), "wr_id {} twice", w.wr_id);
                }
                poll_n(&mut clients[i], c);
            }
            assert!(held.is_empty());
            assert_eq!(srq.outstanding(), 0);
        }
    }
    assert!(
        next_id > 4 * 8,
        "many laps of the 8-WQE ring ({next_id} posts)"
    );
}

/// Many QPs on one SRQ, on two shared CQs sized for the SRQ and the sends
/// (CqSizing), and on own CQs: every receive completes once, on the QP
/// that took it, with no CQ overrun and no CqFull beyond what polling
/// cures; creation beyond the CQ's credits is refused.
#[test]
fn srq_many_qps_small_shared_cqs() {
    let e = env();
    let max_wr = 32u32;
    let mut srq = e.pd.create_srq(max_wr, 1).unwrap();
    let cfg = QpConfig {
        max_send_wr: 4,
        rnr_retry: 7,
        min_rnr_timer: 1,
        ..QpConfig::default()
    };
    // A CQ exactly big enough for the SRQ's share plus 4 QPs' sends.
    let depth = max_wr + 4 * cfg.max_send_wr;
    let mut cqs = [
        e.pd.create_shared_cq(depth).unwrap(),
        e.pd.create_shared_cq(depth).unwrap(),
    ];
    let depth = cqs[0].depth();
    let mut clients = Vec::new();
    for cq in cqs.iter_mut() {
        for _ in 0..4 {
            let i = cq.create_qp_on_srq(&cfg, &srq).unwrap();
            let mut c = e.pd.create_qp(&cfg).unwrap();
            Qp::connect_loopback(cq.qp_mut(i), &mut c).unwrap();
            clients.push(c);
        }
        assert_eq!(
            cq.credits_free(),
            depth - max_wr,
            "one share of max_wr per CQ"
        );
    }
    let mut own = Vec::new();
    for _ in 0..2 {
        let mut s = e.pd.create_qp_on_srq(&cfg, &srq).unwrap();
        let mut c = e.pd.create_qp(&cfg).unwrap();
        Qp::connect_loopback(&mut s, &mut c).unwrap();
        own.push(s);
        clients.push(c);
    }
    let rb =
        e.pd.alloc_mr(max_wr as usize * 64, Access::LOCAL_WRITE)
            .unwrap();
    let sg = srq_sges(&rb, max_wr as usize, 64);
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let mut seen = Vec::new();
    let mut wc = [Completion::default(); 64];
    let total = 200u64;
    let mut posted_recv = 0u64;
    let mut sent = 0u64;
    let mut client_done = 0u64;
    let t = Instant::now();
    while (seen.len() as u64) < total || client_done < total {
        assert!(
            t.elapsed() < PATIENCE,
            "stuck: {} received, {client_done} sent",
            seen.len()
        );
        // Keep the SRQ full.
        let room = (max_wr - srq.outstanding()) as usize;
        if room > 0 && posted_recv < total {
            let n = room.min((total - posted_recv) as usize);
            let ws: Vec<RecvWr> = sg[..n]
                .iter()
                .enumerate()
                .map(|(k, s)| RecvWr::new(posted_recv + k as u64, s))
                .collect();
            // The sges are reused: only their wr_ids matter here.
            srq.post_recv(&ws).unwrap();
            posted_recv += n as u64;
        }
        for c in clients.iter_mut() {
            if sent < total {
                match c.post_send(&[SendWr::send(sent, &s).signaled()]) {
                    Ok(()) => sent += 1,
                    Err(Error::QueueFull | Error::CqFull) => {}
                    Err(e) => panic!("{e:?}"),
                }
            }
            let k = c.poll(&mut wc).unwrap();
            assert!(wc[..k].iter().all(|c| c.status == WcStatus::SUCCESS));
            client_done += k as u64;
        }
        for cq in cqs.iter_mut() {
            let k = cq.poll(&mut wc).unwrap();
            assert!(
                wc[..k].iter().all(|c| c.status == WcStatus::SUCCESS),
                "{:?}",
                &wc[..k]
            );
            seen.extend(wc[..k].iter().map(|c| c.wr_id));
        }
        for q in own.iter_mut() {
            let k = q.poll(&mut wc).unwrap();
            assert!(wc[..k].iter().all(|c| c.status == WcStatus::SUCCESS));
            seen.extend(wc[..k].iter().map(|c| c.wr_id));
            assert!(!q.sim_hook().unwrap().cq_overrun().0);
        }
    }
    seen.sort();
    assert_eq!(seen, (0..total).collect::<Vec<_>>());
    for cq in cqs.iter_mut() {
        assert!(drain_shared(cq).is_empty());
    }
    // One more QP on a CQ left with fewer credits than max_wr: refused,
    // nothing changed; QPs removed give the share back when the last goes.
    let mut small = e.pd.create_shared_cq(max_wr / 2).unwrap();
    assert!(small.depth() < max_wr, "{}", small.depth());
    let before = small.credits_free();
    assert!(matches!(
        small.create_qp_on_srq(&cfg, &srq),
        Err(Error::SrqCqCredits { .. })
    ));
    assert_eq!(small.credits_free(), before);
    let free = cqs[0].credits_free();
    while !cqs[0].is_empty() {
        cqs[0].remove_qp(0).unwrap();
    }
    assert_eq!(cqs[0].credits_free(), cqs[0].depth(), "was {free}");
}

/// An MR dropped while an SRQ receive names it is kept until the receive
/// completes, though the QP that takes it polls in another thread; then
/// reclaim frees it, and the bytes landed in it, not in freed memory.
#[test]
fn srq_mr_dropped_then_consumed_in_another_thread() {
    let e = env();
    let mut srq = e.pd.create_srq(8, 1).unwrap();
    let mut server = e.pd.create_qp_on_srq(&QpConfig::default(), &srq).unwrap();
    let mut client = e.pd.create_qp(&QpConfig::default()).unwrap();
    Qp::connect_loopback(&mut server, &mut client).unwrap();
    let keep = e.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let gone = e.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let live = e.pd.live_mrs();
    {
        let a = [Sge::new(&gone, 0, 64).unwrap()];
        let b = [Sge::new(&keep, 0, 64).unwrap()];
        srq.post_recv(&[RecvWr::new(1, &a), RecvWr::new(2, &b)])
            .unwrap();
    }
    drop(gone);
    assert_eq!(e.pd.live_mrs(), live);
    assert_eq!(e.pd.reclaim(), 1);
    let h = std::thread::spawn(move || {
        let c = poll_n(&mut server, 2);
        (server, c)
    });
    e.src.write(0, b"0123456789").unwrap();
    let s = [Sge::new(&e.src, 0, 10).unwrap()];
    client
        .post_send(&[
            SendWr::send(1, &s).signaled(),
            SendWr::send(2, &s).signaled(),
        ])
        .unwrap();
    poll_n(&mut client, 2);
    let (_server, c) = h.join().unwrap();
    assert_eq!(c.iter().map(|c| c.wr_id).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(e.pd.reclaim(), 0);
    assert_eq!(e.pd.live_mrs(), live - 1);
    let mut got = [0u8; 10];
    keep.read(0, &mut got).unwrap();
    assert_eq!(&got, b"0123456789");
    // The SRQ's WQEs are free again, and the dropped MR's lkey is no
    // longer named.
    assert_eq!(srq.outstanding(), 0);
}

/// A UD QP on an SRQ: datagrams take SRQ receives with the GRH slot;
/// a receive too small errors once (wr_id once), and the SRQ WQE is free
/// again.
#[test]
fn srq_ud_qp_receives() {
    let e = env();
    let mut srq = e.pd.create_srq(4, 1).unwrap();
    let mut r = e.pd.create_qp_on_srq(&ud_cfg(), &srq).unwrap();
    r.ready_ud(QKEY).unwrap();
    let mut a = e.pd.create_qp(&ud_cfg()).unwrap();
    a.ready_ud(QKEY).unwrap();
    let ah = e.pd.create_ah(&a.av_to(&r.endpoint())).unwrap();
    let rb = e.pd.alloc_mr(4 * 256, Access::LOCAL_WRITE).unwrap();
    let sg = srq_sges(&rb, 4, 256);
    srq.post_recv(&recvs(&sg, 0)).unwrap();
    e.src.write(0, &[3; 100]).unwrap();
    let s = [Sge::new(&e.src, 0, 100).unwrap()];
    a.post_send(&[SendWr::ud_send(1, &s, dest(&ah, r.qp_num()))
        .imm(9)
        .signaled()])
        .unwrap();
    poll_n(&mut a, 1);
    let c = poll_n(&mut r, 1);
    assert_eq!((c[0].wr_id, c[0].byte_len, c[0].imm), (0, 140, Some(9)));
    assert_eq!(c[0].src_qp.qpn(), a.qp_num());
    let mut got = [0u8; 140];
    rb.read(0, &mut got).unwrap();
    assert!(got[40..].iter().all(|&x| x == 3));
    assert_eq!(srq.outstanding(), 3);
}
