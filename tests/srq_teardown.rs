//! A shared receive queue when what uses it goes, on the sim, through the
//! public API: the SRQ handle dropped while QPs use it; receives given
//! back when a QP on it is reset, removed or dropped with completions
//! unpolled (own and shared CQs); an own CQ's credits across a reset.

use rdma_direct::testing::QpHooks;
use rdma_direct::*;
use std::time::Duration;

#[path = "support/posts.rs"]
mod support;
use support::*;
#[path = "support/transports.rs"]
mod transports;
use transports::*;

/// Dropping the Srq handle while QPs use it: they keep taking the
/// receives posted, each completes once, and then SENDs get RNR (RC) or
/// are dropped (UD); nothing panics.
#[test]
fn srq_handle_dropped_while_qps_use_it() {
    let e = env();
    let mut srq = e.pd.create_srq(4, 1).unwrap();
    let rb = e.pd.alloc_mr(4 * 256, Access::LOCAL_WRITE).unwrap();
    let sg = srq_sges(&rb, 4, 256);
    let cfg = QpConfig {
        rnr_retry: 1,
        min_rnr_timer: 1,
        ..QpConfig::default()
    };
    let mut server = e.pd.create_qp_on_srq(&cfg, &srq).unwrap();
    let mut client = e.pd.create_qp(&cfg).unwrap();
    Qp::connect_loopback(&mut server, &mut client).unwrap();
    let mut udq = e.pd.create_qp_on_srq(&ud_cfg(), &srq).unwrap();
    udq.ready_ud(QKEY).unwrap();
    let mut uds = e.pd.create_qp(&ud_cfg()).unwrap();
    uds.ready_ud(QKEY).unwrap();
    let ah = e.pd.create_ah(&uds.av_to(&udq.endpoint())).unwrap();
    srq.post_recv(&recvs(&sg, 0)).unwrap();
    drop(srq);
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    client
        .post_send(&[
            SendWr::send(1, &s).signaled(),
            SendWr::send(2, &s).signaled(),
        ])
        .unwrap();
    uds.post_send(&[
        SendWr::ud_send(3, &s, dest(&ah, udq.qp_num())).signaled(),
        SendWr::ud_send(4, &s, dest(&ah, udq.qp_num())).signaled(),
    ])
    .unwrap();
    let mut ids: Vec<u64> = poll_n(&mut server, 2).iter().map(|c| c.wr_id).collect();
    let ud = poll_n(&mut udq, 2);
    assert!(
        ud.iter()
            .all(|c| c.byte_len == 48 && c.src_qp.qpn() == uds.qp_num()),
        "{ud:?}"
    );
    ids.extend(ud.iter().map(|c| c.wr_id));
    ids.sort();
    assert_eq!(ids, vec![0, 1, 2, 3]);
    poll_n(&mut client, 2);
    poll_n(&mut uds, 2);
    // No receive left: UD dropped, RC RNR retries exhausted.
    uds.post_send(&[SendWr::ud_send(5, &s, dest(&ah, udq.qp_num())).signaled()])
        .unwrap();
    assert_eq!(poll_n(&mut uds, 1)[0].status, WcStatus::SUCCESS);
    assert!(drain(&mut udq).is_empty());
    client.post_send(&[SendWr::send(6, &s).signaled()]).unwrap();
    let c = poll_n(&mut client, 1);
    assert_eq!(
        (c[0].wr_id, c[0].status),
        (6, WcStatus::RNR_RETRY_EXC_ERR),
        "{c:?}"
    );
    assert!(drain(&mut server).is_empty());
}

/// RESET of a QP on an SRQ (own CQ) whose CQ holds completions of SRQ
/// receives not yet polled: those WQEs were consumed, and the CQ drained
/// at RESET; the SRQ must get them back (as libmlx5's `mlx5_cq_clean`
/// frees them with `mlx5_free_srq_wqe`), or it shrinks for ever.
#[test]
fn srq_qp_reset_with_unpolled_receives_frees_srq_wqes() {
    let e = env();
    let mut srq = e.pd.create_srq(4, 1).unwrap();
    let rb = e.pd.alloc_mr(4 * 64, Access::LOCAL_WRITE).unwrap();
    let sg = srq_sges(&rb, 4, 64);
    let mut server = e.pd.create_qp_on_srq(&QpConfig::default(), &srq).unwrap();
    let mut client = e.pd.create_qp(&QpConfig::default()).unwrap();
    Qp::connect_loopback(&mut server, &mut client).unwrap();
    srq.post_recv(&recvs(&sg, 0)).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    for i in 0..4 {
        client.post_send(&[SendWr::send(i, &s).signaled()]).unwrap();
    }
    poll_n(&mut client, 4);
    eventually("4 CQEs on the server's CQ", || {
        server.sim_hook().unwrap().cqes_ready(4)
    });
    server.modify(QpState::Reset, &QpAttr::default()).unwrap();
    // Polling anything anywhere cannot cure it: the CQEs are gone.
    client.modify(QpState::Reset, &QpAttr::default()).unwrap();
    Qp::connect_loopback(&mut server, &mut client).unwrap();
    assert!(drain(&mut server).is_empty());
    let (left, post) = (srq.outstanding(), srq.post_recv(&recvs(&sg, 10)));
    assert!(
        left == 0 && post.is_ok(),
        "SRQ WQEs completed into a reset QP's CQ are lost: outstanding {left}, post {post:?}"
    );
}

/// The held case beside it: RESET after polling, then the QP reused on the
/// SRQ (own CQ), every wr_id once; unconsumed SRQ receives outlive a QP
/// dropped and go to another QP.
#[test]
fn srq_qp_reset_after_poll_and_reuse_and_drop_with_posted_receives() {
    let e = env();
    let mut srq = e.pd.create_srq(4, 1).unwrap();
    let rb = e.pd.alloc_mr(4 * 64, Access::LOCAL_WRITE).unwrap();
    let sg = srq_sges(&rb, 4, 64);
    let mut server = e.pd.create_qp_on_srq(&QpConfig::default(), &srq).unwrap();
    let mut client = e.pd.create_qp(&QpConfig::default()).unwrap();
    Qp::connect_loopback(&mut server, &mut client).unwrap();
    srq.post_recv(&recvs(&sg, 0)).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    client
        .post_send(&[
            SendWr::send(1, &s).signaled(),
            SendWr::send(2, &s).signaled(),
        ])
        .unwrap();
    poll_n(&mut client, 2);
    let ids: Vec<u64> = poll_n(&mut server, 2).iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, vec![0, 1]);
    server.modify(QpState::Reset, &QpAttr::default()).unwrap();
    client.modify(QpState::Reset, &QpAttr::default()).unwrap();
    assert_eq!(srq.outstanding(), 2);
    Qp::connect_loopback(&mut server, &mut client).unwrap();
    client.post_send(&[SendWr::send(3, &s).signaled()]).unwrap();
    poll_n(&mut client, 1);
    assert_eq!(poll_n(&mut server, 1)[0].wr_id, 2);
    // Drop the server with one receive still posted: another QP takes it.
    drop(server);
    let mut s2 = e.pd.create_qp_on_srq(&QpConfig::default(), &srq).unwrap();
    let mut c2 = e.pd.create_qp(&QpConfig::default()).unwrap();
    Qp::connect_loopback(&mut s2, &mut c2).unwrap();
    c2.post_send(&[SendWr::send(4, &s).signaled()]).unwrap();
    poll_n(&mut c2, 1);
    assert_eq!(poll_n(&mut s2, 1)[0].wr_id, 3);
    assert_eq!(srq.outstanding(), 0);
    assert!(drain(&mut s2).is_empty());
}

/// As above, for a QP dropped with SRQ completions unpolled: the SRQ gets
/// the WQEs back, and an MR named only by them is deregistered.
#[test]
fn srq_qp_dropped_with_unpolled_receives_frees_srq_wqes() {
    let e = env();
    let mut srq = e.pd.create_srq(4, 1).unwrap();
    let rb = e.pd.alloc_mr(4 * 64, Access::LOCAL_WRITE).unwrap();
    let mut server = e.pd.create_qp_on_srq(&QpConfig::default(), &srq).unwrap();
    let mut client = e.pd.create_qp(&QpConfig::default()).unwrap();
    Qp::connect_loopback(&mut server, &mut client).unwrap();
    {
        let sg = srq_sges(&rb, 4, 64);
        srq.post_recv(&recvs(&sg, 0)).unwrap();
    }
    let live = e.pd.live_mrs();
    drop(rb);
    assert_eq!(e.pd.live_mrs(), live, "named by posted SRQ receives: kept");
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    for i in 0..4 {
        client.post_send(&[SendWr::send(i, &s).signaled()]).unwrap();
    }
    poll_n(&mut client, 4);
    eventually("4 CQEs on the server's CQ", || {
        server.sim_hook().unwrap().cqes_ready(4)
    });
    drop(server);
    e.pd.reclaim();
    let (left, mrs) = (srq.outstanding(), e.pd.live_mrs());
    assert!(
        left == 0 && mrs == live - 1,
        "SRQ WQEs completed into a dropped QP's CQ are lost: outstanding {left}, live MRs {mrs} (want {})",
        live - 1
    );
}

/// SharedCq::reset_qp / remove_qp of a QP on an SRQ with SRQ completions
/// in the shared CQ: the SRQ gets the WQEs back.
#[test]
fn srq_shared_cq_reset_qp_with_unpolled_receives_frees_srq_wqes() {
    let e = env();
    let mut srq = e.pd.create_srq(4, 1).unwrap();
    let rb = e.pd.alloc_mr(4 * 64, Access::LOCAL_WRITE).unwrap();
    let sg = srq_sges(&rb, 4, 64);
    let mut cq =
        e.pd.create_shared_cq(CqSizing::new().queue(4).queue(256).depth().unwrap())
            .unwrap();
    let x = cq.create_qp_on_srq(&QpConfig::default(), &srq).unwrap();
    let mut client = e.pd.create_qp(&QpConfig::default()).unwrap();
    Qp::connect_loopback(cq.qp_mut(x), &mut client).unwrap();
    srq.post_recv(&recvs(&sg, 0)).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    for i in 0..4 {
        client.post_send(&[SendWr::send(i, &s).signaled()]).unwrap();
    }
    poll_n(&mut client, 4);
    std::thread::sleep(Duration::from_millis(50));
    cq.reset_qp(x).unwrap();
    let (left, post) = (srq.outstanding(), srq.post_recv(&recvs(&sg, 10)));
    assert!(
        left == 0 && post.is_ok(),
        "SRQ WQEs drained by reset_qp are lost: outstanding {left}, post {post:?}"
    );
}

/// remove_qp of the same: the SRQ gets its WQEs back.
#[test]
fn srq_shared_cq_remove_qp_with_unpolled_receives_frees_srq_wqes() {
    let e = env();
    let mut srq = e.pd.create_srq(4, 1).unwrap();
    let rb = e.pd.alloc_mr(4 * 64, Access::LOCAL_WRITE).unwrap();
    let sg = srq_sges(&rb, 4, 64);
    let mut cq = e.pd.create_shared_cq(512).unwrap();
    let x = cq.create_qp_on_srq(&QpConfig::default(), &srq).unwrap();
    let mut client = e.pd.create_qp(&QpConfig::default()).unwrap();
    Qp::connect_loopback(cq.qp_mut(x), &mut client).unwrap();
    srq.post_recv(&recvs(&sg, 0)).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    client.post_send(&[SendWr::send(1, &s).signaled()]).unwrap();
    poll_n(&mut client, 1);
    std::thread::sleep(Duration::from_millis(50));
    cq.remove_qp(x).unwrap();
    assert_eq!(srq.outstanding(), 3, "SRQ WQE drained by remove_qp is lost");
}

/// A QP on an SRQ with an own CQ that counts credits (cq_depth given):
/// the SRQ's share is held before and after a RESET; CqFull, nothing
/// written, exactly where the rest runs out.
#[test]
fn srq_own_counted_cq_share_survives_reset() {
    let e = env();
    let max_wr = 8;
    let srq = e.pd.create_srq(max_wr, 1).unwrap();
    let cfg = QpConfig {
        max_send_wr: 16,
        cq_depth: Some(max_wr + 2),
        ..QpConfig::default()
    };
    let mut server = e.pd.create_qp_on_srq(&cfg, &srq).unwrap();
    let mut client = e.pd.create_qp(&QpConfig::default()).unwrap();
    let s = Sge::new(&e.src, 0, 8).unwrap();
    let r = to(&e.dst, 0);
    for round in 0..2 {
        Qp::connect_loopback(&mut server, &mut client).unwrap();
        let room = server.cq_depth() - max_wr;
        for i in 0..room as u64 {
            server
                .post_write(&WriteWr::new(i, s, r).signaled())
                .unwrap();
        }
        let err = refused_by(&mut server, |q| {
            q.post_write(&WriteWr::new(99, s, r).signaled())
        });
        assert!(matches!(err, Error::CqFull), "round {round}: {err:?}");
        assert_eq!(poll_n(&mut server, room as usize).len(), room as usize);
        server.modify(QpState::Reset, &QpAttr::default()).unwrap();
        client.modify(QpState::Reset, &QpAttr::default()).unwrap();
    }
}
