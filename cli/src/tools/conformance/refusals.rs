//! Bad input is refused with a typed error and changes nothing: work
//! requests, batches, QP configurations, attributes, states and protection
//! domains.

use super::*;

pub(super) fn bad_input_is_refused_and_posts_nothing(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    check!(
        matches!(
            s.pd.alloc_mr(0, Access::LOCAL_WRITE),
            Err(Error::Register(RegRefusal::ZeroLength))
        ),
        "zero-length MR"
    );
    check!(
        matches!(
            s.pd.alloc_mr(64, Access::REMOTE_WRITE),
            Err(Error::Register(RegRefusal::RemoteNeedsLocalWrite))
        ),
        "REMOTE_WRITE alone"
    );
    let src = s.pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    check!(Sge::new(&src, 4000, 200).is_err(), "SGE outside the MR");
    check!(
        Sge::new(&src, usize::MAX, 2).is_err(),
        "SGE offset overflow"
    );
    // A batch whose second WR is bad (inline longer than max_inline) posts nothing.
    let good = [Sge::new(&src, 0, 8)?];
    let long = [Sge::new(&src, 0, 1024)?];
    let batch = [
        SendWr::rdma_write(1, &good, remote(&dst, 0)).signaled(),
        SendWr::rdma_write(2, &long, remote(&dst, 0))
            .inline()
            .signaled(),
    ];
    check!(s.a.post_send(&batch).is_err(), "over-long inline accepted");
    let mut wc = [Completion::default(); 4];
    std::thread::sleep(Duration::from_millis(50));
    check_eq!(s.a.poll(&mut wc)?, 0, "something was posted");
    // The QP still works afterwards: the next completion is the next WR's.
    src.write(0, b"intact!!")?;
    s.a.post_send(&[SendWr::rdma_write(3, &good, remote(&dst, 0)).signaled()])?;
    let c = poll_one(&mut s.a)?;
    check_eq!((c.status, c.wr_id), (WcStatus::SUCCESS, 3));
    let mut got = [0u8; 8];
    dst.read(0, &mut got)?;
    check_eq!(&got, b"intact!!");
    drop(s.b);
    passed(vec![])
}

pub(super) fn qp_outlives_its_context_handle(dev: &str) -> CaseResult {
    let s = setup(dev)?;
    let Setup { _ctx, pd, mut a, b } = s;
    drop(_ctx);
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    src.write(0, &[3; 64])?;
    let sge = [Sge::new(&src, 0, 64)?];
    a.post_send(&[SendWr::rdma_write(9, &sge, remote(&dst, 0)).signaled()])?;
    check_eq!(poll_one(&mut a)?.status, WcStatus::SUCCESS);
    check_eq!(contents(&dst)?, vec![3; 64]);
    drop(b);
    passed(vec![])
}

pub(super) fn memory_of_another_protection_domain_is_refused(dev: &str) -> CaseResult {
    let mut notes: Vec<String> = Vec::new();
    let mut s = setup(dev)?;
    let other = s._ctx.alloc_pd()?;
    let src = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let foreign_dst = other.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    src.write(0, &[0x11; 64])?;
    let sge = [Sge::new(&src, 0, 64)?];
    s.a.post_send(&[SendWr::rdma_write(1, &sge, remote(&foreign_dst, 0)).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check_eq!(
        wc.status,
        WcStatus::REM_ACCESS_ERR,
        "rkey of another PD: got {}",
        wc.status
    );
    check!(
        contents(&foreign_dst)?.iter().all(|&b| b == 0),
        "foreign MR written"
    );

    // A local SGE from another PD's MR (or another device's) is refused
    // before anything is written: only its own PD's QPs hold a dropped MR
    // back, so no other QP may name it (the device would fail it too:
    // mlx5 and the sim with a local protection error, rxe a local QP
    // operation error).
    let mut s = setup(dev)?;
    let foreign_src = other.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    foreign_src.write(0, &[0x22; 64])?;
    let sge = [Sge::new(&foreign_src, 0, 64)?];
    let before = ring_snapshot(&s.a);
    let r =
        s.a.post_send(&[SendWr::rdma_write(2, &sge, remote(&dst, 0)).signaled()]);
    check!(
        matches!(r, Err(Error::ForeignPd { .. })),
        "SGE of another PD: {r:?}"
    );
    let r = s.b.post_recv(&[RecvWr::new(3, &sge)]);
    check!(
        matches!(r, Err(Error::ForeignPd { .. })),
        "receive SGE of another PD: {r:?}"
    );
    // Plain bytes are inline data only: not the source of a WR that is not
    // inline, not a receive buffer.
    let plain = [0x33u8; 64];
    let bytes = [Sge::bytes(&plain)?];
    let r =
        s.a.post_send(&[SendWr::rdma_write(4, &bytes, remote(&dst, 0)).signaled()]);
    check!(
        matches!(r, Err(Error::BytesSge)),
        "plain bytes in a WR that is not inline: {r:?}"
    );
    let r = s.b.post_recv(&[RecvWr::new(5, &bytes)]);
    check!(
        matches!(r, Err(Error::BytesSge)),
        "plain bytes as a receive buffer: {r:?}"
    );
    check!(
        ring_snapshot(&s.a) == before,
        "a refused post wrote ring bytes"
    );
    nothing_completes(&mut s.a)?;
    check!(contents(&dst)?.iter().all(|&b| b == 0), "data landed");
    notes.push("SGE of another PD, and plain bytes not inline, refused at post".into());
    drop(s.b);
    passed(notes)
}

pub(super) fn send_queue_full_refuses_the_whole_batch_until_completions_are_polled(
    dev: &str,
) -> CaseResult {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig {
        max_send_wr: 4,
        ..QpConfig::default()
    };
    let (mut a, _b) = pd.create_connected_pair(&cfg)?;
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    let wr = |id| SendWr::rdma_write(id, &sge, remote(&dst, 0));
    // Three unsignaled and one signaled: four outstanding.
    a.post_send(&[wr(0), wr(1), wr(2)])?;
    a.post_send(&[wr(3).signaled()])?;
    check!(
        matches!(a.post_send(&[wr(4).signaled()]), Err(Error::QueueFull)),
        "5th WR accepted"
    );
    // The signaled completion retires all four; a batch of 5 can never
    // fit (NeverFits, not QueueFull: polling would not help), 4 do.
    let c = poll_one(&mut a)?;
    check_eq!((c.status, c.wr_id), (WcStatus::SUCCESS, 3));
    let five: Vec<SendWr> = (10..15).map(|i| wr(i).signaled()).collect();
    check!(
        matches!(a.post_send(&five), Err(Error::NeverFits { wrs: 5, .. })),
        "a batch larger than max_send_wr was not refused as invalid"
    );
    a.post_send(&five[..4])?;
    for want in 10..14 {
        let c = poll_one(&mut a)?;
        check_eq!(
            (c.status, c.wr_id),
            (WcStatus::SUCCESS, want),
            "the refused batch left WRs behind"
        );
    }
    let mut wc = [Completion::default(); 4];
    std::thread::sleep(Duration::from_millis(50));
    check_eq!(a.poll(&mut wc)?, 0, "a refused WR was posted");
    passed(vec![])
}

/// A QP that is not connected takes no work request: posting on a QP in
/// RESET is refused with `QpState` and leaves nothing behind; once
/// connected, the first completion is the first WR posted after.
pub(super) fn post_before_rts_is_refused(dev: &str) -> CaseResult {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig::default();
    let mut a = pd.create_qp(&cfg)?;
    let mut b = pd.create_qp(&cfg)?;
    check_eq!(a.state(), rdma_direct::QpState::Reset);
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    src.write(0, &[0x77; 64])?;
    let sge = [Sge::new(&src, 0, 64)?];
    let before = ring_snapshot(&a);
    let r = a.post_send(&[SendWr::rdma_write(1, &sge, remote(&dst, 0)).signaled()]);
    check!(
        matches!(r, Err(Error::QpState { .. })),
        "post_send in RESET: {r:?}"
    );
    let r = b.post_recv(&[RecvWr::new(2, &sge)]);
    check!(
        matches!(r, Err(Error::QpState { .. })),
        "post_recv in RESET: {r:?}"
    );
    check!(
        ring_snapshot(&a) == before,
        "a refused post changed the ring"
    );
    Qp::connect_loopback(&mut a, &mut b)?;
    check_eq!(
        (a.state(), b.state()),
        (rdma_direct::QpState::Rts, rdma_direct::QpState::Rts)
    );
    let r = Qp::connect_loopback(&mut a, &mut b);
    check!(
        matches!(r, Err(Error::NotInReset { .. })),
        "connecting twice: {r:?}"
    );
    nothing_completes(&mut a)?;
    check!(
        contents(&dst)?.iter().all(|&b| b == 0),
        "the refused WRITE landed"
    );
    a.post_send(&[SendWr::rdma_write(3, &sge, remote(&dst, 0)).signaled()])?;
    let c = poll_one(&mut a)?;
    check_eq!(
        (c.status, c.wr_id),
        (WcStatus::SUCCESS, 3),
        "first WR after connecting"
    );
    check!(contents(&dst)? == vec![0x77; 64], "payload");
    passed(vec![])
}

/// QP configurations out of range are refused with `Error::Config` before
/// the device is asked for anything, and a good one still works after them.
pub(super) fn out_of_range_qp_configs_are_refused(dev: &str) -> CaseResult {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let bad: [(&str, QpConfig); 5] = [
        (
            "rnr_retry 8",
            QpConfig {
                rnr_retry: 8,
                ..QpConfig::default()
            },
        ),
        (
            "min_rnr_timer 32",
            QpConfig {
                min_rnr_timer: 32,
                ..QpConfig::default()
            },
        ),
        (
            "cq_depth 0",
            QpConfig {
                cq_depth: Some(0),
                ..QpConfig::default()
            },
        ),
        (
            "max_recv_wr 16385",
            QpConfig {
                max_recv_wr: 16385,
                ..QpConfig::default()
            },
        ),
        (
            "max_send_wr 0",
            QpConfig {
                max_send_wr: 0,
                ..QpConfig::default()
            },
        ),
    ];
    for (what, cfg) in bad {
        let r = pd.create_qp(&cfg);
        check!(
            matches!(r, Err(Error::Config { .. })),
            "{what}: {:?}",
            r.err()
        );
    }
    let mut qp = pd.create_qp(&QpConfig {
        min_rnr_timer: 31,
        ..QpConfig::default()
    })?;
    check_eq!(qp.state(), rdma_direct::QpState::Reset);
    let mut notes = vec!["5 configs refused, min_rnr_timer 31 accepted".to_string()];
    if dev == rdma_direct::SIM_DEVICE {
        // The sim has one port: a modify naming another is refused.
        let r = qp.modify(
            rdma_direct::QpState::Init,
            &rdma_direct::QpAttr::init(9, Access::QP_ALL),
        );
        check!(
            matches!(r, Err(Error::Config { .. })),
            "port 9 on the sim: {r:?}"
        );
        check_eq!(qp.state(), rdma_direct::QpState::Reset);
        notes.push("port 9 refused by the sim".into());
    }
    // A QP asked for no receive SGEs takes no receive with one.
    let (_a, mut b) = pd.create_connected_pair(&QpConfig {
        max_recv_sge: 0,
        ..QpConfig::default()
    })?;
    let buf = pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let one = [Sge::new(&buf, 0, 64)?];
    let r = b.post_recv(&[RecvWr::new(1, &one)]);
    check!(
        matches!(r, Err(Error::TooManySges { .. })),
        "1 SGE with max_recv_sge 0: {r:?}"
    );
    notes.push("1-SGE receive refused with max_recv_sge 0".into());
    passed(notes)
}

/// A receive batch with one bad WR posts none of it.
pub(super) fn refused_receive_batches_post_nothing(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let buf = s.pd.alloc_mr(256, Access::LOCAL_WRITE)?;
    let src = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let one = [Sge::new(&buf, 0, 64)?];
    let many = (0..8)
        .map(|i| Sge::new(&buf, i * 8, 8))
        .collect::<Result<Vec<_>, _>>()?;
    let r =
        s.b.post_recv(&[RecvWr::new(111, &one), RecvWr::new(222, &many)]);
    check!(
        matches!(r, Err(Error::TooManySges { .. })),
        "8 SGEs with max_recv_sge 1: {r:?}"
    );
    s.b.post_recv(&[RecvWr::new(333, &one)])?;
    let sge = [Sge::new(&src, 0, 64)?];
    s.a.post_send(&[SendWr::send(1, &sge).signaled()])?;
    check_eq!(poll_one(&mut s.a)?.status, WcStatus::SUCCESS);
    let r = poll_one(&mut s.b)?;
    check_eq!(
        (r.status, r.wr_id),
        (WcStatus::SUCCESS, 333),
        "the receive that took the SEND"
    );
    nothing_completes(&mut s.b)?;
    // A receive batch short of CQ credits is CqFull (polling cures it),
    // whatever the send queue's depth; one larger than max_recv_wr or the
    // CQ is NeverFits (nothing would).
    // (The device may make the CQ deeper than 16: rxe makes it 31.)
    let cfg = QpConfig {
        max_send_wr: 1,
        max_recv_wr: 64,
        cq_depth: Some(16),
        ..QpConfig::default()
    };
    let mut q = s.pd.create_qp(&cfg)?;
    let mut peer = s.pd.create_qp(&cfg)?;
    Qp::connect_loopback(&mut q, &mut peer)?;
    let depth = q.cq_depth() as usize;
    let sges: Vec<[Sge<'_>; 1]> = (0..depth)
        .map(|i| Ok([Sge::new(&buf, (i * 8) % 256, 8)?]))
        .collect::<Result<_, Error>>()?;
    let wrs: Vec<RecvWr<'_>> = sges.iter().map(|g| RecvWr::new(1, g)).collect();
    q.post_recv(&wrs[..depth - 4])?;
    let r = q.post_recv(&wrs[..8]);
    check!(
        matches!(r, Err(Error::CqFull)),
        "8 receives, 4 credits left: {r:?}"
    );
    let r = peer.post_recv(&[]);
    check!(r.is_ok(), "an empty batch: {r:?}");
    let big: Vec<RecvWr<'_>> = (0..65).map(|_| RecvWr::new(2, &sges[0])).collect();
    let mut fresh = s.pd.create_qp(&QpConfig {
        cq_depth: None,
        ..cfg
    })?;
    let mut fresh_peer = s.pd.create_qp(&cfg)?;
    Qp::connect_loopback(&mut fresh, &mut fresh_peer)?;
    let r = fresh.post_recv(&big);
    check!(
        matches!(r, Err(Error::NeverFits { .. })),
        "65 receives, max_recv_wr 64: {r:?}"
    );
    passed(vec![])
}

/// The typed state machine: a transition missing a required attribute, or
/// carrying one it does not allow, is refused before verbs sees it and the
/// error names the attribute; RoCE needs a global address vector; `query`
/// follows every step.
pub(super) fn modify_checks_attributes_by_name(dev: &str) -> CaseResult {
    use rdma_direct::{QpAttr, QpState};
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig::default();
    let mut a = pd.create_qp(&cfg)?;
    let mut b = pd.create_qp(&cfg)?;
    let refused = |r: rdma_direct::Result<()>, want: &str| -> Result<(), Failure> {
        match r {
            Err(Error::QpAttr { attr, .. }) if attr == want => Ok(()),
            other => Err(Failure(format!(
                "wanted a QpAttr error naming {want}, got {other:?}"
            ))),
        }
    };
    let mut init = QpAttr::init(1, Access::QP_ALL);
    init.port = None;
    refused(a.modify(QpState::Init, &init), "PORT")?;
    check_eq!(
        a.query()?.state,
        QpState::Reset,
        "a refused modify changed the QP"
    );
    refused(a.modify(QpState::Rtr, &QpAttr::default()), "STATE")?;
    for q in [&mut a, &mut b] {
        q.modify(QpState::Init, &QpAttr::init(1, Access::QP_ALL))?;
        check_eq!(q.query()?.state, QpState::Init);
    }
    let (ea, eb) = (a.endpoint(), b.endpoint());
    let mut rtr = a.rtr_attr(&eb, 0x123);
    rtr.min_rnr_timer = None;
    refused(a.modify(QpState::Rtr, &rtr), "MIN_RNR_TIMER")?;
    let mut notes = vec![];
    if ea.roce {
        let mut local_av = a.rtr_attr(&eb, 0x123);
        if let Some(av) = local_av.av.as_mut() {
            av.grh = None;
        }
        refused(a.modify(QpState::Rtr, &local_av), "AV")?;
        notes.push("RoCE: a non-global AV refused".to_string());
    }
    a.modify(QpState::Rtr, &a.rtr_attr(&eb, 0x123))?;
    b.modify(QpState::Rtr, &b.rtr_attr(&ea, 0x456))?;
    check_eq!(a.query()?.state, QpState::Rtr);
    check_eq!(a.query()?.dest_qpn, Some(b.qp_num()));
    for (extra, name) in [
        ("PORT", "PORT"),
        ("MAX_DEST_RD_ATOMIC", "MAX_DEST_RD_ATOMIC"),
    ] {
        let mut rts = QpAttr::rts(0x456, 6);
        match extra {
            "PORT" => rts.port = Some(1),
            _ => rts.max_dest_rd_atomic = Some(1),
        }
        refused(a.modify(QpState::Rts, &rts), name)?;
    }
    let mut rts = QpAttr::rts(0x456, 6);
    rts.rnr_retry = None;
    refused(a.modify(QpState::Rts, &rts), "RNR_RETRY")?;
    a.modify(QpState::Rts, &QpAttr::rts(0x456, 6))?;
    b.modify(QpState::Rts, &QpAttr::rts(0x123, 6))?;
    let info = a.query()?;
    check_eq!((info.state, info.rnr_retry), (QpState::Rts, Some(6)));
    // Connected by hand: traffic works.
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    src.write(0, &[0x42; 64])?;
    let sge = [Sge::new(&src, 0, 64)?];
    a.post_send(&[SendWr::rdma_write(1, &sge, remote(&dst, 0)).signaled()])?;
    check_eq!(poll_one(&mut a)?.status, WcStatus::SUCCESS);
    check!(contents(&dst)? == vec![0x42; 64], "payload");
    notes.push(
        "missing PORT, MIN_RNR_TIMER, RNR_RETRY and extra PORT, MAX_DEST_RD_ATOMIC refused by name"
            .into(),
    );
    passed(notes)
}

/// `connect_remote` with facts out of range changes nothing (the QP stays
/// in RESET and connects afterwards); the optional attributes a transition
/// may carry take effect: a responder whose INIT -> RTR drops REMOTE_WRITE
/// refuses an RDMA WRITE, and RTS -> RTS is a transition like any other.
pub(super) fn connect_checks_first_and_optional_attributes_apply(dev: &str) -> CaseResult {
    use rdma_direct::{QpAttr, QpState};
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig::default();
    let mut a = pd.create_qp(&cfg)?;
    let mut b = pd.create_qp(&cfg)?;
    let (ea, eb) = (a.endpoint(), b.endpoint());
    let r = a.connect_remote(1 << 24, &eb, 5);
    check!(
        matches!(r, Err(Error::QpAttr { attr: "SQ_PSN", .. })),
        "my_psn 2^24: {r:?}"
    );
    check_eq!(
        a.query()?.state,
        QpState::Reset,
        "a refused connect changed the QP"
    );
    let r = a.connect_remote(5, &eb, 1 << 24);
    check!(
        matches!(r, Err(Error::QpAttr { attr: "RQ_PSN", .. })),
        "peer_psn 2^24: {r:?}"
    );
    check_eq!(a.query()?.state, QpState::Reset);
    // Now for real, with B's INIT -> RTR taking REMOTE_WRITE away.
    a.connect_remote(5, &eb, 7)?;
    b.modify(QpState::Init, &QpAttr::init(1, Access::QP_ALL))?;
    let mut rtr = b.rtr_attr(&ea, 5);
    rtr.access = Some(Access::LOCAL_WRITE | Access::REMOTE_READ);
    b.modify(QpState::Rtr, &rtr)?;
    b.modify(QpState::Rts, &QpAttr::rts(7, 6))?;
    let r = a.connect_remote(5, &eb, 7);
    check!(
        matches!(r, Err(Error::NotInReset { .. })),
        "connecting an RTS QP again: {r:?}"
    );
    let rts_rts = QpAttr {
        min_rnr_timer: Some(12),
        ..Default::default()
    };
    b.modify(QpState::Rts, &rts_rts)?;
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 64)?];
    a.post_send(&[SendWr::rdma_write(1, &sge, remote(&dst, 0)).signaled()])?;
    let c = poll_one(&mut a)?;
    check!(
        !c.status.is_ok(),
        "a WRITE into a QP without REMOTE_WRITE succeeded"
    );
    check!(
        contents(&dst)?.iter().all(|&b| b == 0),
        "the refused WRITE landed"
    );
    passed(vec![format!(
        "WRITE without REMOTE_WRITE -> {:?}",
        c.status
    )])
}
