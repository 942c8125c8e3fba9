//! Shared receive queues: a SEND scattered over an SRQ receive's SGEs,
//! one SRQ feeding four QPs on one CQ, the limit event, completions out of
//! order, a QP on an SRQ in ERR, the refusals, an MR a posted SRQ
//! receive holds, an error receive's WQE given back, and a QP on an SRQ
//! whose own receive caps are ignored.

use super::*;
use rdma_direct::testing::QpHooks;
use rdma_direct::{AsyncEvent, Srq};

const RW: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);

/// A context, a PD, an SRQ, and `n` pairs: `rx[i]` on the SRQ (own CQs),
/// `tx[i]` its connected peer.
struct SrqRig {
    ctx: Context,
    pd: Pd,
    srq: Srq,
    rx: Vec<Qp>,
    tx: Vec<Qp>,
}

fn rig(dev: &str, n: usize, max_wr: u32, max_sge: u32) -> Result<SrqRig, Failure> {
    let ctx = Context::open(dev).map_err(|e| Failure(format!("open {dev}: {e}")))?;
    let pd = ctx.alloc_pd()?;
    let srq = pd.create_srq(max_wr, max_sge)?;
    let cfg = QpConfig {
        max_send_wr: 64,
        ..QpConfig::default()
    };
    let (mut rx, mut tx) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let mut r = pd.create_qp_on_srq(&cfg, &srq)?;
        let mut t = pd.create_qp(&cfg)?;
        Qp::connect_loopback(&mut r, &mut t)?;
        rx.push(r);
        tx.push(t);
    }
    Ok(SrqRig {
        ctx,
        pd,
        srq,
        rx,
        tx,
    })
}

/// One-SGE receive buffers of 64 bytes at slots `0..n` of `mr`.
fn slots(mr: &Mr, n: usize) -> Result<Vec<[Sge<'_>; 1]>, Failure> {
    (0..n).map(|k| Ok([Sge::new(mr, k * 64, 64)?])).collect()
}

/// A receive over each of `bufs`, wr_ids `first`, `first + 1`, ...
fn recvs<'a>(bufs: &'a [[Sge<'a>; 1]], first: u64) -> Vec<RecvWr<'a>> {
    bufs.iter()
        .enumerate()
        .map(|(k, s)| RecvWr::new(first + k as u64, s))
        .collect()
}

fn send(qp: &mut Qp, wr_id: u64, sge: &[Sge<'_>]) -> Result<(), Failure> {
    qp.post_send(&[SendWr::send(wr_id, sge).signaled()])?;
    Ok(())
}

/// A 100-byte SEND into an SRQ receive of SGEs of 32 and 96 bytes lands as
/// bytes 0..31 and 32..99, and completes with byte_len 100 on the QP that
/// took it, with the wr_id posted to the SRQ.
pub(super) fn srq_scatters_a_send_over_two_sges(dev: &str) -> CaseResult {
    let mut r = rig(dev, 1, 16, 2)?;
    let src = r.pd.alloc_mr(100, Access::LOCAL_WRITE)?;
    let dst = r.pd.alloc_mr(256, Access::LOCAL_WRITE)?;
    src.write(0, &pattern(100, 3))?;
    let sges = [Sge::new(&dst, 0, 32)?, Sge::new(&dst, 128, 96)?];
    r.srq.post_recv(&[RecvWr::new(77, &sges)])?;
    send(&mut r.tx[0], 1, &[Sge::new(&src, 0, 100)?])?;
    let wc = poll_one(&mut r.rx[0])?;
    check_eq!(
        (wc.status, wc.opcode, wc.wr_id, wc.byte_len),
        (WcStatus::SUCCESS, WcOpcode::RECV, 77, 100),
        "the receive's completion"
    );
    check_eq!(wc.qp_num, r.rx[0].qp_num(), "the QP that took it");
    check!(poll_one(&mut r.tx[0])?.status.is_ok(), "the SEND");
    let got = contents(&dst)?;
    let want = pattern(100, 3);
    check_eq!(&got[..32], &want[..32], "bytes 0..31 in the first SGE");
    check_eq!(&got[128..196], &want[32..], "bytes 32..99 in the second");
    check!(got[196..].iter().all(|&b| b == 0), "nothing past the end");
    passed(vec![])
}

/// One SRQ shared by 4 QPs on one shared CQ, 10,000 SENDs to each: every
/// receive's wr_id comes back exactly once, on the QP its SEND went to.
pub(super) fn one_srq_feeds_four_qps_on_one_cq(dev: &str) -> CaseResult {
    const QPS: usize = 4;
    const EACH: u64 = 10_000;
    const WINDOW: u64 = 16;
    let ctx = Context::open(dev).map_err(|e| Failure(format!("open {dev}: {e}")))?;
    let pd = ctx.alloc_pd()?;
    let mut srq = pd.create_srq(256, 1)?;
    let cfg = QpConfig {
        max_send_wr: WINDOW as u32,
        rnr_retry: 7,
        ..QpConfig::default()
    };
    let depth = CqSizing::new()
        .queue(srq.max_wr())
        .queue(QPS as u32 * cfg.max_send_wr)
        .depth()?;
    let mut cq = pd.create_shared_cq(depth)?;
    let mut tx = Vec::new();
    for _ in 0..QPS {
        let i = cq.create_qp_on_srq(&cfg, &srq)?;
        let mut t = pd.create_qp(&cfg)?;
        Qp::connect_loopback(cq.qp_mut(i), &mut t)?;
        tx.push(t);
    }
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(64 * 256, Access::LOCAL_WRITE)?;
    let sge = [Sge::new(&src, 0, 64)?];
    // Receive wr_id k lands in slot k % 256; posted in order.
    let mut next_recv = 0u64;
    let post = |srq: &mut Srq, next: &mut u64, n: usize| -> Result<(), Failure> {
        let bufs: Vec<[Sge; 1]> = (0..n as u64)
            .map(|k| Sge::new(&dst, ((*next + k) % 256 * 64) as usize, 64).map(|s| [s]))
            .collect::<Result<_, _>>()?;
        let wrs: Vec<RecvWr> = bufs
            .iter()
            .enumerate()
            .map(|(k, s)| RecvWr::new(*next + k as u64, s))
            .collect();
        srq.post_recv(&wrs)?;
        *next += n as u64;
        Ok(())
    };
    post(&mut srq, &mut next_recv, 256)?;
    let total = QPS as u64 * EACH;
    let mut seen = vec![false; (total + 256) as usize];
    let mut per_qp = [0u64; QPS];
    let (mut sent, mut acked) = ([0u64; QPS], [0u64; QPS]);
    let mut received = 0u64;
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut wc = [Completion::default(); 32];
    while received < total {
        check!(
            Instant::now() < deadline,
            "{received} of {total} receives within 240 s"
        );
        for q in 0..QPS {
            while sent[q] < EACH && sent[q] - acked[q] < WINDOW {
                send(&mut tx[q], sent[q], &sge)?;
                sent[q] += 1;
            }
            let n = tx[q].poll(&mut wc)?;
            for c in &wc[..n] {
                check!(c.status.is_ok(), "a SEND of QP {q}: {c:?}");
            }
            acked[q] += n as u64;
        }
        let n = cq.poll(&mut wc)?;
        for c in &wc[..n] {
            check!(
                c.status.is_ok() && c.opcode == WcOpcode::RECV,
                "a receive: {c:?}"
            );
            let k = c.wr_id as usize;
            check!(k < seen.len() && !seen[k], "wr_id {k} came back twice");
            seen[k] = true;
            let i = cq
                .index_of(c.qp_num)
                .ok_or_else(|| Failure(format!("a receive of QP {:#x}", c.qp_num)))?;
            per_qp[i] += 1;
        }
        received += n as u64;
        if n > 0 {
            post(&mut srq, &mut next_recv, n)?;
        } else {
            std::thread::yield_now();
        }
    }
    check_eq!(per_qp, [EACH; QPS], "receives per QP");
    check!(
        seen[..total as usize].iter().all(|&s| s),
        "every wr_id up to {total} came back"
    );
    while acked.iter().sum::<u64>() < total {
        check!(Instant::now() < deadline, "the last SENDs' completions");
        for q in 0..QPS {
            acked[q] += tx[q].poll(&mut wc)? as u64;
        }
    }
    passed(vec![format!("{total} receives through one SRQ of 256")])
}

/// The SRQ limit: armed at 4 with 6 receives posted, the event comes once,
/// when a receive taken leaves 3; then it is disarmed, and armed again it
/// comes again.
pub(super) fn srq_limit_event_is_raised_once_then_rearmed(dev: &str) -> CaseResult {
    let mut r = rig(dev, 1, 16, 1)?;
    let src = r.pd.alloc_mr(8, Access::LOCAL_WRITE)?;
    let dst = r.pd.alloc_mr(64 * 16, Access::LOCAL_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    let bufs = slots(&dst, 6)?;
    let wrs = recvs(&bufs, 0);
    r.srq.post_recv(&wrs)?;
    // Events from before (a port coming up) are not this case's.
    while r.ctx.get_async_event(Duration::ZERO)?.is_some() {}
    r.srq.set_limit(4)?;
    let want = AsyncEvent::SrqLimitReached {
        srq_num: r.srq.srq_num(),
    };
    let mut events = Vec::new();
    for k in 0..4 {
        send(&mut r.tx[0], k, &sge)?;
        poll_one(&mut r.tx[0])?;
        poll_one(&mut r.rx[0])?;
        // Left posted: 5, 4, 3 (fewer than 4: the event), 2.
        let wait = if k == 2 {
            COMPLETION_TIMEOUT
        } else {
            Duration::from_millis(100)
        };
        if let Some(e) = r.ctx.get_async_event(wait)? {
            events.push((k, e));
        }
    }
    check_eq!(events, vec![(2, want)], "events after each receive taken");
    r.srq.set_limit(2)?;
    send(&mut r.tx[0], 9, &sge)?;
    poll_one(&mut r.tx[0])?;
    poll_one(&mut r.rx[0])?; // 1 left
    check_eq!(
        r.ctx.get_async_event(COMPLETION_TIMEOUT)?,
        Some(want),
        "the event after re-arming"
    );
    check_eq!(
        r.ctx.get_async_event(Duration::from_millis(100))?,
        None,
        "no second event"
    );
    passed(vec![])
}

/// Receive completions out of order (the sim's hook swaps them in pairs):
/// on an RQ, wr_ids 100..103 at WQEs 0..3 complete as 101, 100, 103, 102,
/// and a receive's room comes back only once WQE 0's completion is polled;
/// on an SRQ, a WQE completed is free again at once.
pub(super) fn out_of_order_receive_completions_on_rq_and_srq(dev: &str) -> CaseResult {
    let mut s = setup_with(
        dev,
        QpConfig {
            max_recv_wr: 4,
            ..QpConfig::default()
        },
    )?;
    if s.b.sim_hook().is_none() {
        return skipped("needs the sim's hook that completes receives out of order");
    }
    let src = s.pd.alloc_mr(8, Access::LOCAL_WRITE)?;
    let dst = s.pd.alloc_mr(64 * 4, Access::LOCAL_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    s.b.sim_hook().expect("sim").swap_recv_completions(true);
    let bufs = slots(&dst, 4)?;
    let wrs = recvs(&bufs, 100);
    s.b.post_recv(&wrs)?;
    send(&mut s.a, 0, &sge)?;
    send(&mut s.a, 1, &sge)?;
    let first = poll_one(&mut s.b)?;
    check_eq!(first.wr_id, 101, "WQE 1 completes first");
    let one = [Sge::new(&dst, 0, 64)?];
    check!(
        matches!(
            s.b.post_recv(&[RecvWr::new(9, &one)]),
            Err(Error::RecvQueueFull)
        ),
        "no room back before WQE 0 completes"
    );
    check_eq!(poll_one(&mut s.b)?.wr_id, 100, "then WQE 0");
    s.b.post_recv(&[RecvWr::new(104, &one)])?;
    send(&mut s.a, 2, &sge)?;
    send(&mut s.a, 3, &sge)?;
    let order: Vec<u64> = poll_until(&mut s.b, 2)?.iter().map(|c| c.wr_id).collect();
    check_eq!(order, vec![103, 102], "WQEs 3, 2");
    s.b.sim_hook().expect("sim").swap_recv_completions(false);
    poll_until(&mut s.a, 4)?;

    // On an SRQ of 3: WQE 1 completed first is free again at once.
    let mut r = rig(dev, 1, 3, 1)?;
    let src = r.pd.alloc_mr(8, Access::LOCAL_WRITE)?;
    let dst = r.pd.alloc_mr(64 * 4, Access::LOCAL_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    r.rx[0].sim_hook().expect("sim").swap_recv_completions(true);
    let bufs = slots(&dst, 3)?;
    let wrs = recvs(&bufs, 100);
    r.srq.post_recv(&wrs)?;
    send(&mut r.tx[0], 0, &sge)?;
    send(&mut r.tx[0], 1, &sge)?;
    check_eq!(poll_one(&mut r.rx[0])?.wr_id, 101, "SRQ WQE 1 first");
    check_eq!(r.srq.outstanding(), 2, "WQE 1 is free again at once");
    r.srq.post_recv(&[RecvWr::new(103, &bufs[1])])?;
    check_eq!(poll_one(&mut r.rx[0])?.wr_id, 100, "then WQE 0");
    r.rx[0]
        .sim_hook()
        .expect("sim")
        .swap_recv_completions(false);
    passed(vec![])
}

/// A QP on an SRQ moved to ERR flushes its own send, and takes none of
/// the SRQ's receives: the other QP on the SRQ receives into them.
pub(super) fn a_qp_on_an_srq_in_err_leaves_the_srq_to_the_others(dev: &str) -> CaseResult {
    let mut r = rig(dev, 2, 8, 1)?;
    let src = r.pd.alloc_mr(8, Access::LOCAL_WRITE)?;
    let dst = r.pd.alloc_mr(64 * 4, Access::LOCAL_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    let bufs = slots(&dst, 4)?;
    let wrs = recvs(&bufs, 0);
    r.srq.post_recv(&wrs)?;
    r.rx[0].modify(QpState::Err, &QpAttr::default())?;
    r.rx[0].post_send(&[SendWr::send(50, &sge).signaled()])?;
    let f = poll_one(&mut r.rx[0])?;
    check_eq!(
        (f.wr_id, f.status),
        (50, WcStatus::WR_FLUSH_ERR),
        "the QP in ERR flushes its own send"
    );
    nothing_completes(&mut r.rx[0])?;
    check_eq!(r.srq.outstanding(), 4, "the SRQ keeps its receives");
    for k in 0..4 {
        send(&mut r.tx[1], k, &sge)?;
    }
    let got = poll_until(&mut r.rx[1], 4)?;
    let mut ids: Vec<u64> = got.iter().map(|c| c.wr_id).collect();
    ids.sort();
    check_eq!(ids, vec![0, 1, 2, 3], "the other QP took all four");
    check!(got.iter().all(|c| c.status.is_ok()), "{got:?}");
    poll_until(&mut r.tx[1], 4)?;
    passed(vec![])
}

/// What an SRQ and its QPs refuse, each with nothing posted.
pub(super) fn srq_refusals_post_nothing(dev: &str) -> CaseResult {
    let mut r = rig(dev, 1, 4, 1)?;
    let dst = r.pd.alloc_mr(256, Access::LOCAL_WRITE)?;
    let one = [Sge::new(&dst, 0, 64)?];
    let two = [Sge::new(&dst, 0, 32)?, Sge::new(&dst, 64, 32)?];
    check!(
        matches!(
            r.rx[0].post_recv(&[RecvWr::new(1, &one)]),
            Err(Error::SrqAttached { .. })
        ),
        "a receive posted to a QP on an SRQ"
    );
    check!(
        matches!(
            r.srq.post_recv(&[RecvWr::new(1, &two)]),
            Err(Error::TooManySges {
                sges: 2,
                max: 1,
                ..
            })
        ),
        "2 SGEs on an SRQ of max_sge 1"
    );
    let five: Vec<RecvWr> = (0..5).map(|k| RecvWr::new(k, &one)).collect();
    check!(
        matches!(r.srq.post_recv(&five), Err(Error::NeverFits { wrs: 5, .. })),
        "a batch over max_wr"
    );
    let other = r.ctx.alloc_pd()?;
    let foreign = other.alloc_mr(64, Access::LOCAL_WRITE)?;
    let f = [Sge::new(&foreign, 0, 64)?];
    check!(
        matches!(
            r.srq.post_recv(&[RecvWr::new(1, &f)]),
            Err(Error::ForeignPd { .. })
        ),
        "an SGE of another PD"
    );
    check!(
        matches!(r.srq.set_limit(5), Err(Error::Config { .. })),
        "a limit over max_wr"
    );
    check!(
        other
            .create_qp_on_srq(&QpConfig::default(), &r.srq)
            .is_err(),
        "a QP of another PD on the SRQ"
    );
    check!(
        r.pd.create_srq(0, 1).is_err() && r.pd.create_srq(4, 0).is_err(),
        "an SRQ of no receives or no SGE"
    );
    check_eq!(r.srq.outstanding(), 0, "nothing posted by the refusals");
    let four: Vec<RecvWr> = (0..4).map(|k| RecvWr::new(k, &one)).collect();
    r.srq.post_recv(&four)?;
    check!(
        matches!(
            r.srq.post_recv(&[RecvWr::new(9, &one)]),
            Err(Error::RecvQueueFull)
        ),
        "the fifth receive on an SRQ of 4"
    );
    // A QP whose own CQ has no room for the SRQ's receives besides its sends.
    let small = QpConfig {
        max_send_wr: 4,
        cq_depth: Some(6),
        ..QpConfig::default()
    };
    let big = r.pd.create_srq(64, 1)?;
    check!(
        r.pd.create_qp_on_srq(&small, &big).is_err(),
        "a CQ of 6 for an SRQ of 64 and 4 sends"
    );
    passed(vec![])
}

/// An MR dropped while a posted SRQ receive names it stays registered
/// until that receive completes; one no receive names goes at once.
pub(super) fn an_srq_receive_holds_only_the_mr_it_names(dev: &str) -> CaseResult {
    let mut r = rig(dev, 1, 8, 1)?;
    let src = r.pd.alloc_mr(8, Access::LOCAL_WRITE)?;
    let named = r.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let free = r.pd.alloc_mr(64, RW)?;
    r.srq
        .post_recv(&[RecvWr::new(1, &[Sge::new(&named, 0, 64)?])])?;
    let live = r.pd.live_mrs();
    drop(free);
    check_eq!(
        r.pd.live_mrs(),
        live - 1,
        "an MR no receive names goes at once"
    );
    drop(named);
    check_eq!(
        r.pd.live_mrs(),
        live - 1,
        "the named one waits for its receive"
    );
    send(&mut r.tx[0], 1, &[Sge::new(&src, 0, 8)?])?;
    check!(poll_one(&mut r.rx[0])?.status.is_ok(), "the receive");
    r.pd.reclaim();
    check_eq!(
        r.pd.live_mrs(),
        live - 2,
        "gone once its receive was polled"
    );
    passed(vec![])
}

/// A receive an SRQ gave a QP whose completion was never polled goes back
/// to the SRQ when that QP moves to RESET (its CQ's stale completions are
/// discarded): with its own CQ, on a shared CQ (`SharedCq::reset_qp`), and
/// when the shared CQ is dropped while the SRQ lives on.
pub(super) fn a_reset_gives_unpolled_srq_receives_back(dev: &str) -> CaseResult {
    let mut r = rig(dev, 1, 4, 1)?;
    let src = r.pd.alloc_mr(8, Access::LOCAL_WRITE)?;
    let dst = r.pd.alloc_mr(64 * 4, Access::LOCAL_WRITE)?;
    let bufs = slots(&dst, 4)?;
    let wrs = recvs(&bufs, 0);
    r.srq.post_recv(&wrs)?;
    let sge = [Sge::new(&src, 0, 8)?];
    send(&mut r.tx[0], 1, &sge)?;
    send(&mut r.tx[0], 2, &sge)?;
    poll_until(&mut r.tx[0], 2)?;
    check_eq!(r.srq.outstanding(), 4, "two consumed, not polled");
    r.rx[0].modify(QpState::Reset, &QpAttr::default())?;
    check_eq!(r.srq.outstanding(), 2, "after RESET (own CQ)");
    // The same on a shared CQ.
    let cfg = QpConfig::default();
    let depth = CqSizing::new().queue(r.srq.max_wr()).queue(64).depth()?;
    let mut cq = r.pd.create_shared_cq(depth)?;
    let i = cq.create_qp_on_srq(&cfg, &r.srq)?;
    let mut t = r.pd.create_qp(&cfg)?;
    Qp::connect_loopback(cq.qp_mut(i), &mut t)?;
    send(&mut t, 3, &sge)?;
    poll_until(&mut t, 1)?;
    check_eq!(r.srq.outstanding(), 2, "one more consumed, not polled");
    cq.reset_qp(i)?;
    check_eq!(r.srq.outstanding(), 1, "after SharedCq::reset_qp");
    // A shared CQ dropped with a consumed receive's completion unpolled
    // (the SRQ outlives it): the receive goes back too.
    let mut cq2 = r.pd.create_shared_cq(depth)?;
    let j = cq2.create_qp_on_srq(&cfg, &r.srq)?;
    let mut t2 = r.pd.create_qp(&cfg)?;
    Qp::connect_loopback(cq2.qp_mut(j), &mut t2)?;
    send(&mut t2, 4, &sge)?;
    poll_until(&mut t2, 1)?;
    check_eq!(r.srq.outstanding(), 1, "the last one consumed, not polled");
    drop(cq2);
    check_eq!(r.srq.outstanding(), 0, "after the shared CQ is dropped");
    passed(vec![])
}

/// A receive an SRQ gave that completes with an error (a SEND longer than
/// its buffer) goes back to the SRQ at once, as rdma-core frees the SRQ
/// WQE of every responder CQE (`cq.c`): the SRQ's outstanding count drops
/// with its completion, and the others still serve another QP (UCX PR
/// #11933: error CQEs skipped without their descriptor ran an SRQ dry).
pub(super) fn an_error_receive_gives_its_srq_wqe_back(dev: &str) -> CaseResult {
    let mut r = rig(dev, 2, 4, 1)?;
    let src = r.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst = r.pd.alloc_mr(64 * 4, Access::LOCAL_WRITE)?;
    let bufs: Vec<[Sge<'_>; 1]> = (0..4)
        .map(|k| Ok([Sge::new(&dst, k * 64, 8)?]))
        .collect::<Result<_, Failure>>()?;
    r.srq.post_recv(&recvs(&bufs, 0))?;
    send(&mut r.tx[0], 7, &[Sge::new(&src, 0, 64)?])?;
    let e = poll_one(&mut r.rx[0])?;
    check!(
        !e.status.is_ok(),
        "a 64-byte SEND into 8 bytes fails: {e:?}"
    );
    check!(e.wr_id < 4, "the receive's wr_id: {e:?}");
    check_eq!(
        r.srq.outstanding(),
        3,
        "its WQE went back with its completion"
    );
    let sge = [Sge::new(&src, 0, 8)?];
    for k in 0..3 {
        send(&mut r.tx[1], k, &sge)?;
    }
    let got = poll_until(&mut r.rx[1], 3)?;
    check!(got.iter().all(|c| c.status.is_ok()), "{got:?}");
    check_eq!(
        r.srq.outstanding(),
        0,
        "the other three served the other QP"
    );
    r.srq.post_recv(&recvs(&bufs, 10))?;
    check_eq!(r.srq.outstanding(), 4, "all four posted again");
    poll_until(&mut r.tx[1], 3)?;
    passed(vec![])
}

/// A QP on an SRQ takes the SRQ's receive limits whatever its own config
/// asks: receive caps far past any device's (2^20 WRs, 1000 SGEs) create
/// it (rdma-core PR #1624: libmlx5 checked `max_recv_wr` against the
/// device even on an SRQ; we pass 0), and it receives.
pub(super) fn a_qp_on_an_srq_ignores_its_receive_caps(dev: &str) -> CaseResult {
    let mut r = rig(dev, 0, 4, 1)?;
    let cfg = QpConfig {
        max_recv_wr: 1 << 20,
        max_recv_sge: 1000,
        ..QpConfig::default()
    };
    let mut rx = r.pd.create_qp_on_srq(&cfg, &r.srq)?;
    let mut tx = r.pd.create_qp(&QpConfig::default())?;
    Qp::connect_loopback(&mut rx, &mut tx)?;
    let src = r.pd.alloc_mr(8, Access::LOCAL_WRITE)?;
    let dst = r.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let bufs = slots(&dst, 1)?;
    r.srq.post_recv(&recvs(&bufs, 5))?;
    send(&mut tx, 1, &[Sge::new(&src, 0, 8)?])?;
    let c = poll_one(&mut rx)?;
    check_eq!(
        (c.wr_id, c.status, c.byte_len),
        (5, WcStatus::SUCCESS, 8),
        "{c:?}"
    );
    poll_until(&mut tx, 1)?;
    drop(r.ctx);
    passed(vec![])
}
