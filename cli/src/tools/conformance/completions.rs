//! Completions: events, the completion modes, and two QPs on one shared CQ.

use super::*;

/// Event mode: arm, post, wait for the event (1 s at most), poll; 300
/// rounds, every completion found and no wait timing out. A CQ armed for
/// solicited completions only sleeps through an unsolicited SEND and wakes
/// for a solicited one.
pub(super) fn completion_events_wake_the_waiter(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let src = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    let mut wc = [Completion::default(); 4];
    // Each round as an event-driven poller runs: post one signaled write,
    // wait for the event (the CQ was armed before the post), drain, arm,
    // poll once more (a completion between the drain and the arm raises no
    // event but sits in the CQ).
    let mut waits = 0;
    s.a.arm_cq(false)?;
    for i in 0..10_000u64 {
        s.a.post_send(&[SendWr::rdma_write(i, &sge, remote(&dst, 0)).signaled()])?;
        check!(
            s.a.wait_cq_event(Duration::from_secs(1))?,
            "round {i}: no completion event within 1 s"
        );
        waits += 1;
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(1);
        while got.is_empty() {
            let n = s.a.poll(&mut wc)?;
            got.extend_from_slice(&wc[..n]);
            check!(Instant::now() < deadline, "round {i}: an event but no CQE");
        }
        s.a.arm_cq(false)?;
        let n = s.a.poll(&mut wc)?;
        got.extend_from_slice(&wc[..n]);
        check_eq!(got.len(), 1, "round {i}: completions {got:?}");
        check_eq!(
            (got[0].status, got[0].wr_id),
            (WcStatus::SUCCESS, i),
            "round {i}"
        );
    }
    // Solicited only, at the responder.
    let rbuf = s.pd.alloc_mr(128, Access::LOCAL_WRITE)?;
    let r = [Sge::new(&rbuf, 0, 64)?];
    let r2 = [Sge::new(&rbuf, 64, 64)?];
    s.b.post_recv(&[RecvWr::new(1, &r), RecvWr::new(2, &r2)])?;
    s.b.arm_cq(true)?;
    s.a.post_send(&[SendWr::send(10, &sge).signaled()])?;
    check_eq!(poll_one(&mut s.a)?.status, WcStatus::SUCCESS);
    check!(
        !s.b.wait_cq_event(Duration::from_millis(200))?,
        "an unsolicited SEND woke a CQ armed for solicited completions"
    );
    s.a.post_send(&[SendWr::send(11, &sge).solicited().signaled()])?;
    check_eq!(poll_one(&mut s.a)?.status, WcStatus::SUCCESS);
    check!(
        s.b.wait_cq_event(Duration::from_secs(1))?,
        "a solicited SEND did not wake the CQ"
    );
    let got = poll_until(&mut s.b, 2)?;
    check_eq!((got[0].wr_id, got[1].wr_id), (1, 2));
    passed(vec![format!("10,000 rounds, {waits} waits on the event")])
}

/// Two QPs complete into one CQ sized by `CqSizing`: with every receive
/// queue and send queue filled before anything is polled, no post is
/// refused and the CQ never overruns; each completion carries the `qp_num`
/// of its QP; an error on one QP flushes only its own WRs into the CQ.
pub(super) fn two_qps_share_one_cq(dev: &str) -> CaseResult {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig {
        max_send_wr: 32,
        max_recv_wr: 16,
        ..QpConfig::default()
    };
    let depth = CqSizing::new().qp(&cfg).qp(&cfg).depth()?;
    check_eq!(depth, 144, "CqSizing for two QPs of 32 + 16 WRs");
    let mut cq = pd.create_shared_cq(depth)?;
    check!(cq.depth() >= depth, "shared CQ of {} CQEs", cq.depth());
    let full = cq.depth();
    let qa = [cq.create_qp(&cfg)?, cq.create_qp(&cfg)?];
    let mut peers = [pd.create_qp(&cfg)?, pd.create_qp(&cfg)?];
    for (i, p) in peers.iter_mut().enumerate() {
        Qp::connect_loopback(cq.qp_mut(qa[i]), p)?;
    }
    let qpn = [cq.qp(qa[0]).qp_num(), cq.qp(qa[1]).qp_num()];
    check!(qpn[0] != qpn[1], "two QPs with one QPN {:#x}", qpn[0]);
    let mut wc = [Completion::default(); 1];
    check!(
        matches!(cq.qp_mut(qa[0]).poll(&mut wc), Err(Error::SharedCq { .. })),
        "polling a QP of a shared CQ on its own was not refused"
    );
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(64 * 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let rbuf = pd.alloc_mr(2 * 16 * 64, Access::LOCAL_WRITE)?;
    src.write(0, &pattern(64, 7))?;
    let sge = [Sge::new(&src, 0, 64)?];
    // wr_id: QP index in the high half, the WR's number in the low half.
    let id = |q: usize, i: usize| ((q as u64) << 32) | i as u64;
    let post_recvs = |cq: &mut SharedCq, q: usize| -> Result<(), Failure> {
        let sges: Vec<[Sge<'_>; 1]> = (0..16)
            .map(|i| Ok([Sge::new(&rbuf, (q * 16 + i) * 64, 64)?]))
            .collect::<Result<_, Error>>()?;
        let wrs: Vec<RecvWr<'_>> = (0..16).map(|i| RecvWr::new(id(q, i), &sges[i])).collect();
        cq.qp_mut(qa[q]).post_recv(&wrs)?;
        Ok(())
    };
    // Every queue of both QPs filled to its depth, nothing polled.
    for (q, &index) in qa.iter().enumerate() {
        post_recvs(&mut cq, q)?;
        let wrs: Vec<SendWr<'_>> = (0..32)
            .map(|i| {
                SendWr::rdma_write(
                    id(q, 100 + i),
                    &sge,
                    remote(&dst, ((q * 32 + i) * 64) as u64),
                )
                .signaled()
            })
            .collect();
        for batch in wrs.chunks(8) {
            cq.qp_mut(index).post_send(batch)?;
        }
    }
    check_eq!(
        cq.credits_free(),
        full - 96,
        "CQ credits with 96 WRs outstanding"
    );
    // Each peer SENDs 16 messages into its QP's receives.
    let psrc = pd.alloc_mr(16, Access::LOCAL_WRITE)?;
    let psge = [Sge::new(&psrc, 0, 16)?];
    for (q, p) in peers.iter_mut().enumerate() {
        let sends: Vec<SendWr<'_>> = (0..16)
            .map(|i| {
                SendWr::send(i as u64, &psge)
                    .imm((q * 16 + i) as u32)
                    .signaled()
            })
            .collect();
        p.post_send(&sends)?;
        for c in poll_until(p, 16)? {
            check_eq!(c.status, WcStatus::SUCCESS, "peer {q} SEND {}", c.wr_id);
        }
    }
    let got = poll_until(&mut cq, 96)?;
    let mut per = [(0, 0); 2];
    for c in &got {
        let q = (c.wr_id >> 32) as usize;
        check!(q < 2, "completion with a wr_id of no WR: {c:?}");
        check_eq!(c.status, WcStatus::SUCCESS, "{c:?}");
        check_eq!(c.qp_num, qpn[q], "qp_num of WR {:#x}", c.wr_id);
        if c.opcode == WcOpcode::RECV {
            check_eq!(
                c.imm,
                Some((q * 16 + (c.wr_id & 0xffff_ffff) as usize) as u32),
                "{c:?}"
            );
            per[q].1 += 1;
        } else {
            check_eq!(c.opcode, WcOpcode::RDMA_WRITE, "{c:?}");
            per[q].0 += 1;
        }
    }
    check_eq!(per, [(32, 16), (32, 16)], "(writes, receives) per QP");
    let mut last = vec![0u8; 64];
    dst.read(63 * 64, &mut last)?;
    check_eq!(last, pattern(64, 7), "the last write's bytes");
    check_eq!(cq.credits_free(), full, "CQ credits after every completion");
    // An error on QP 0 flushes its receives only.
    post_recvs(&mut cq, 0)?;
    post_recvs(&mut cq, 1)?;
    check!(
        matches!(
            cq.qp_mut(qa[0]).modify(QpState::Reset, &QpAttr::default()),
            Err(Error::SharedCqOutstanding { .. })
        ),
        "RESET with 16 receives outstanding on a shared CQ was not refused"
    );
    cq.qp_mut(qa[0]).modify(QpState::Err, &QpAttr::default())?;
    let flushed = poll_until(&mut cq, 16)?;
    for c in &flushed {
        check_eq!(
            (c.status, c.qp_num, c.wr_id >> 32),
            (WcStatus::WR_FLUSH_ERR, qpn[0], 0),
            "flushed receive {:#x}",
            c.wr_id
        );
    }
    let mut ids: Vec<u64> = flushed.iter().map(|c| c.wr_id).collect();
    ids.sort_unstable();
    check_eq!(
        ids,
        (0..16).map(|i| id(0, i)).collect::<Vec<_>>(),
        "flushed wr_ids"
    );
    peers[1].post_send(&[SendWr::send(99, &psge).imm(99).signaled()])?;
    check_eq!(poll_one(&mut peers[1])?.status, WcStatus::SUCCESS);
    let c = poll_until(&mut cq, 1)?[0];
    check_eq!(
        (c.status, c.qp_num, c.wr_id, c.imm),
        (WcStatus::SUCCESS, qpn[1], id(1, 0), Some(99)),
        "QP 1 after QP 0's error"
    );
    std::thread::sleep(Duration::from_millis(50));
    let n = cq.poll(&mut wc)?;
    check_eq!(n, 0, "completions beyond the flush: {:?}", &wc[..n]);
    cq.qp_mut(qa[0])
        .modify(QpState::Reset, &QpAttr::default())?;
    check_eq!(
        cq.credits_free(),
        full - 15,
        "CQ credits: QP 1 holds 15 receives"
    );
    // Unsignaled WRITEs that completed make no CQE, so they stay
    // outstanding: Qp::modify refuses RESET, SharedCq::reset_qp drains the
    // CQ (keeping QP 1's completion for the next poll) and frees them.
    peers[0].modify(QpState::Reset, &QpAttr::default())?;
    Qp::connect_loopback(cq.qp_mut(qa[0]), &mut peers[0])?;
    let marks: Vec<Vec<u8>> = (0..3).map(|i| pattern(64, 20 + i as u8)).collect();
    let msrc = pd.alloc_mr(3 * 64, Access::LOCAL_WRITE)?;
    for (i, m) in marks.iter().enumerate() {
        msrc.write(i * 64, m)?;
    }
    let msges: Vec<[Sge<'_>; 1]> = (0..3)
        .map(|i| Ok([Sge::new(&msrc, i * 64, 64)?]))
        .collect::<Result<_, Error>>()?;
    for (i, g) in msges.iter().enumerate() {
        cq.qp_mut(qa[0]).post_send(&[SendWr::rdma_write(
            id(0, 200 + i),
            g,
            remote(&dst, (i * 64) as u64),
        )])?;
    }
    let deadline = Instant::now() + COMPLETION_TIMEOUT;
    let mut landed = vec![0u8; 64];
    loop {
        dst.read(2 * 64, &mut landed)?;
        if landed == marks[2] {
            break;
        }
        check!(
            Instant::now() < deadline,
            "the unsignaled WRITEs did not land"
        );
        std::thread::yield_now();
    }
    peers[1].post_send(&[SendWr::send(98, &psge).imm(98).signaled()])?;
    check_eq!(poll_one(&mut peers[1])?.status, WcStatus::SUCCESS);
    check!(
        matches!(
            cq.qp_mut(qa[0]).modify(QpState::Reset, &QpAttr::default()),
            Err(Error::SharedCqOutstanding { .. })
        ),
        "RESET with 3 unsignaled WRITEs outstanding on a shared CQ was not refused"
    );
    // 16 receives too, flushed by ERR: reset_qp drops their CQEs.
    post_recvs(&mut cq, 0)?;
    cq.qp_mut(qa[0]).modify(QpState::Err, &QpAttr::default())?;
    cq.reset_qp(qa[0])?;
    check_eq!(cq.qp(qa[0]).state(), QpState::Reset);
    let c = poll_until(&mut cq, 1)?[0];
    check_eq!(
        (c.status, c.qp_num, c.wr_id, c.imm),
        (WcStatus::SUCCESS, qpn[1], id(1, 1), Some(98)),
        "QP 1's completion across QP 0's reset"
    );
    check_eq!(
        cq.credits_free(),
        full - 14,
        "CQ credits after reset_qp: QP 1 holds 14 receives"
    );
    std::thread::sleep(Duration::from_millis(50));
    let n = cq.poll(&mut wc)?;
    check_eq!(n, 0, "completions after reset_qp: {:?}", &wc[..n]);
    // Reconnected after reset_qp, then removed with 16 receives
    // outstanding: its credits come back, the other QP keeps its index
    // lookup and its completions.
    peers[0].modify(QpState::Reset, &QpAttr::default())?;
    Qp::connect_loopback(cq.qp_mut(qa[0]), &mut peers[0])?;
    post_recvs(&mut cq, 0)?;
    cq.remove_qp(qa[0])?;
    check_eq!(cq.len(), 1);
    check_eq!(
        cq.index_of(qpn[1]),
        Some(0),
        "QP 1's index after the removal"
    );
    check_eq!(cq.index_of(qpn[0]), None, "the removed QP's index");
    check_eq!(
        cq.credits_free(),
        full - 14,
        "CQ credits after remove_qp: QP 1 holds 14 receives"
    );
    peers[1].post_send(&[SendWr::send(97, &psge).imm(97).signaled()])?;
    check_eq!(poll_one(&mut peers[1])?.status, WcStatus::SUCCESS);
    let c = poll_until(&mut cq, 1)?[0];
    check_eq!(
        (c.status, c.qp_num, c.wr_id, c.imm),
        (WcStatus::SUCCESS, qpn[1], id(1, 2), Some(97)),
        "QP 1 after QP 0 was removed"
    );
    // A QP swapped in from outside is not this CQ's to reset.
    std::mem::swap(cq.qp_mut(0), &mut peers[1]);
    let r = cq.reset_qp(0);
    std::mem::swap(cq.qp_mut(0), &mut peers[1]);
    check!(
        matches!(r, Err(Error::NotOnCq { index: 0, .. })),
        "reset_qp of a swapped-in QP: {r:?}"
    );
    // (No look at the sim's overrun flag: the direct path creates its CQs to
    // ignore overrun, so the device never reports one; a CQ the credits
    // failed to protect would have lost completions, which the checks
    // above count.)
    passed(vec![format!(
        "CQ of {full} CQEs for 2 x (32 + 16) WRs; 96 completions with their QP's qp_num; QP 0's 16 flushes only; reset_qp with 3 unsignaled WRITEs out; remove_qp"
    )])
}

/// `Qp::wait` in each `CompletionMode`: 1,000 rounds of one signaled WRITE
/// each; a wait with nothing outstanding returns 0 after its timeout; the
/// same through a `SharedCq` in event mode.
pub(super) fn completion_modes_wait_for_each_completion(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let src = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    let mut wc = [Completion::default(); 4];
    let modes = [
        CompletionMode::Busy,
        CompletionMode::Events,
        CompletionMode::Adaptive { spins: 64 },
    ];
    for mode in modes {
        for i in 0..1_000u64 {
            s.a.post_send(&[SendWr::rdma_write(i, &sge, remote(&dst, 0)).signaled()])?;
            let n = s.a.wait(&mut wc, mode, Duration::from_secs(1))?;
            check_eq!(n, 1, "{mode:?} round {i}: completions within 1 s");
            check_eq!(
                (wc[0].status, wc[0].wr_id),
                (WcStatus::SUCCESS, i),
                "{mode:?} round {i}"
            );
        }
        let t = Instant::now();
        let n = s.a.wait(&mut wc, mode, Duration::from_millis(50))?;
        check_eq!(n, 0, "{mode:?}: a completion with nothing outstanding");
        check!(
            t.elapsed() >= Duration::from_millis(50),
            "{mode:?}: the wait returned after {:?}, before its 50 ms timeout",
            t.elapsed()
        );
    }
    check!(
        matches!(
            s.a.wait(&mut [], CompletionMode::Busy, Duration::ZERO),
            Err(Error::Config { value: 0, .. })
        ),
        "a wait with no room for a completion was not refused"
    );
    let cfg = QpConfig::default();
    let mut cq = s.pd.create_shared_cq(CqSizing::new().qp(&cfg).depth()?)?;
    let q = cq.create_qp(&cfg)?;
    let mut peer = s.pd.create_qp(&cfg)?;
    Qp::connect_loopback(cq.qp_mut(q), &mut peer)?;
    for i in 0..1_000u64 {
        cq.qp_mut(q)
            .post_send(&[SendWr::rdma_write(i, &sge, remote(&dst, 8)).signaled()])?;
        let n = cq.wait(&mut wc, CompletionMode::Events, Duration::from_secs(1))?;
        check_eq!(n, 1, "shared CQ round {i}: completions within 1 s");
        check_eq!(wc[0].wr_id, i, "shared CQ round {i}");
    }
    passed(vec![
        "busy, events, adaptive: 1,000 rounds each; shared CQ events: 1,000".into(),
    ])
}
