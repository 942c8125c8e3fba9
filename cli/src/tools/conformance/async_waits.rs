//! Async waits (`Qp::completions`, `SharedCq::completions`): each wait
//! sleeps and is woken by the CQ's event, on the QP's own CQ and on a
//! shared one, as a future and as a stream; the lost-event stress (two
//! send halves on two threads, 10,000 rounds of arm, wait, ack and drain,
//! blocking and async); and a stale consumer index at arm time (direct
//! path). Run by a small executor of its own (a thread that parks), so the
//! suite needs no runtime.

use super::*;
use rdma_direct::{Completions, SendHalf};
use std::future::Future;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Wake, Waker};

/// Wakes a parked thread.
pub(super) struct Unpark(pub(super) std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `f` on this thread until it resolves, or `None` after `timeout`
/// (the future is dropped then: a cancelled wait). Counts the times it
/// slept (`Pending` and parked) in `sleeps`.
pub(super) fn block_on<F: Future>(f: F, timeout: Duration, sleeps: &mut u64) -> Option<F::Output> {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = TaskContext::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    let deadline = Instant::now() + timeout;
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return Some(v);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        *sleeps += 1;
        std::thread::park_timeout(deadline - now);
    }
}

/// One async wait: `Ok(n)` completions, or a failure (`what` names it) on
/// a timeout or an error.
fn wait_async(
    c: &mut Completions<'_>,
    out: &mut [Completion],
    timeout: Duration,
    sleeps: &mut u64,
    what: &str,
) -> Result<usize, Failure> {
    match block_on(c.next_batch(out), timeout, sleeps) {
        None => Err(Failure(format!("{what}: no completion within {timeout:?}"))),
        Some(r) => Ok(r?),
    }
}

/// The next completion of `c` as a stream, within `timeout`.
fn stream_next(
    c: &mut Completions<'_>,
    timeout: Duration,
    sleeps: &mut u64,
) -> Result<Completion, Failure> {
    let next =
        std::future::poll_fn(|cx| futures_core::Stream::poll_next(std::pin::Pin::new(&mut *c), cx));
    match block_on(next, timeout, sleeps) {
        Some(Some(r)) => Ok(r?),
        Some(None) => Err(Failure("the stream ended".into())),
        None => Err(Failure(format!("nothing streamed within {timeout:?}"))),
    }
}

pub(super) fn async_waits_sleep_until_the_event(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let src = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst = s.pd.alloc_mr(64 * 64, Access::LOCAL_WRITE)?;
    // Here a's CQ owner awaits each receive while a's receive half posts
    // more; another thread owns b, sends 1 ms apart (so that most waits
    // find the CQ empty and sleep) and takes its sends' completions as a
    // stream.
    let (_a_tx, mut a_rx) = s.a.split()?;
    let rounds = 200;
    let slots: Vec<[Sge<'_>; 1]> = (0..64)
        .map(|k| Ok([Sge::new(&dst, k * 64, 8)?]))
        .collect::<Result<_, Error>>()?;
    let mut sleeps = 0;
    let mut sent = 0;
    for (mode, name) in [
        (CompletionMode::Events, "events"),
        (CompletionMode::Adaptive { spins: 100 }, "adaptive"),
    ] {
        let mut got = Vec::new();
        let mut posted = 0;
        while posted < rounds.min(64) {
            a_rx.post_recv(&[RecvWr::new(posted as u64, &slots[posted % 64])])?;
            posted += 1;
        }
        let b = &mut s.b;
        let src = &src;
        let sender_sleeps = std::thread::scope(|sc| -> Result<u64, Failure> {
            let sender = sc.spawn(move || -> Result<u64, Failure> {
                let sge = [Sge::new(src, 0, 8)?];
                let mut sleeps = 0;
                let mut done = 0;
                for k in 0..rounds {
                    std::thread::sleep(Duration::from_millis(1));
                    let wr = SendWr::send(k as u64, &sge).imm(k as u32).signaled();
                    b.post_send(&[wr])?;
                    if k >= 32 {
                        let w =
                            stream_next(&mut b.completions(mode), COMPLETION_TIMEOUT, &mut sleeps)?;
                        check_eq!(
                            (w.wr_id, w.status),
                            (done, WcStatus::SUCCESS),
                            "{name}: send"
                        );
                        done += 1;
                    }
                }
                let mut c = b.completions(mode);
                while done < rounds as u64 {
                    let w = stream_next(&mut c, COMPLETION_TIMEOUT, &mut sleeps)?;
                    check_eq!(
                        (w.wr_id, w.status),
                        (done, WcStatus::SUCCESS),
                        "{name}: send"
                    );
                    done += 1;
                }
                Ok(sleeps)
            });
            let mut c = s.a.completions(mode);
            let mut out = [Completion::default(); 8];
            while got.len() < rounds {
                let n = match wait_async(&mut c, &mut out, COMPLETION_TIMEOUT, &mut sleeps, name) {
                    Ok(n) => n,
                    // The sender's failure, if it failed, says more.
                    Err(f) => {
                        return Err(match sender.join() {
                            Ok(Err(e)) => e,
                            _ => f,
                        })
                    }
                };
                for w in &out[..n] {
                    check_eq!(w.status, WcStatus::SUCCESS, "{name}: receive {}", w.wr_id);
                    got.push((w.wr_id, w.imm));
                }
                while posted < rounds && posted < got.len() + 64 {
                    a_rx.post_recv(&[RecvWr::new(posted as u64, &slots[posted % 64])])?;
                    posted += 1;
                }
            }
            sender
                .join()
                .unwrap_or_else(|_| Err(Failure("the sender panicked".into())))
        })?;
        sleeps += sender_sleeps;
        let want: Vec<(u64, Option<u32>)> =
            (0..rounds).map(|k| (k as u64, Some(k as u32))).collect();
        check!(
            got == want,
            "{name}: receives {} of {rounds}, in order with their immediates",
            got.len()
        );
        sent += rounds;
    }
    check!(
        sleeps > 0,
        "no wait ever slept: the case cannot tell an event from a poll"
    );
    passed(vec![format!(
        "{sent} SENDs 1 ms apart from another thread (their completions streamed there), each receive awaited here (events, then adaptive) while the receive half posted more; {sleeps} sleeps"
    )])
}

/// Posts one signaled WRITE from `tx` (wr_id: the round) for each round
/// `go` releases, until `go` closes.
fn round_sender(
    tx: &mut SendHalf,
    sge: &[Sge<'_>],
    to: RemoteAddr,
    go: std::sync::mpsc::Receiver<usize>,
) -> Result<(), Failure> {
    for k in go {
        let wr = SendWr::rdma_write(k as u64, sge, to).signaled();
        let deadline = Instant::now() + COMPLETION_TIMEOUT;
        while let Err(e) = tx.post_send(&[wr]) {
            check!(matches!(e, Error::QueueFull), "round {k}: {e}");
            check!(Instant::now() < deadline, "round {k}: no room in time");
            std::thread::yield_now();
        }
    }
    Ok(())
}

/// The lost-event stress: `rounds` rounds in which two send halves on two
/// threads each post one signaled WRITE, and this thread waits (1 s at
/// most) for both completions on their shared CQ, blocking (`async_api`
/// false: `SharedCq::wait` in events mode, which arms, waits, acks and
/// drains) or through `SharedCq::completions`. Returns the waits and
/// (async) the sleeps.
fn lost_events(dev: &str, rounds: usize, async_api: bool) -> Result<(u64, u64), Failure> {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig {
        max_send_wr: 16,
        ..QpConfig::default()
    };
    let mut cq = pd.create_shared_cq(CqSizing::new().qp(&cfg).qp(&cfg).depth()?)?;
    let qa = [cq.create_qp(&cfg)?, cq.create_qp(&cfg)?];
    let mut peers = [pd.create_qp(&cfg)?, pd.create_qp(&cfg)?];
    for (i, p) in peers.iter_mut().enumerate() {
        Qp::connect_loopback(cq.qp_mut(qa[i]), p)?;
    }
    let (mut tx0, _r0) = cq.qp_mut(qa[0]).split()?;
    let (mut tx1, _r1) = cq.qp_mut(qa[1]).split()?;
    let src = pd.alloc_mr(8, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(16, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let (mut sleeps, mut waits) = (0, 0);
    let sge = [Sge::new(&src, 0, 8)?];
    std::thread::scope(|sc| -> Result<(), Failure> {
        let (sge, dst) = (&sge, &dst);
        let (go0, rx0) = std::sync::mpsc::channel();
        let (go1, rx1) = std::sync::mpsc::channel();
        let t0 = sc.spawn(move || round_sender(&mut tx0, sge, remote(dst, 0), rx0));
        let t1 = sc.spawn(move || round_sender(&mut tx1, sge, remote(dst, 8), rx1));
        let mut out = [Completion::default(); 2];
        let mut result = Ok(());
        'rounds: for k in 0..rounds {
            // (A sender gone: its own error, reported at the join.)
            if go0.send(k).is_err() || go1.send(k).is_err() {
                break;
            }
            let mut got = 0;
            while got < 2 {
                waits += 1;
                let n = if async_api {
                    let mut c = cq.completions(CompletionMode::Events);
                    let w = Duration::from_secs(1);
                    match block_on(c.next_batch(&mut out[got..]), w, &mut sleeps) {
                        Some(r) => r?,
                        None => 0,
                    }
                } else {
                    cq.wait(
                        &mut out[got..],
                        CompletionMode::Events,
                        Duration::from_secs(1),
                    )?
                };
                if n == 0 {
                    result = Err(Failure(format!(
                        "round {k}: a wait of 1 s timed out with {got} of 2 completions"
                    )));
                    break 'rounds;
                }
                got += n;
            }
            let ok = out
                .iter()
                .all(|c| c.wr_id == k as u64 && c.status == WcStatus::SUCCESS);
            if !ok {
                result = Err(Failure(format!("round {k}: completions {out:?}")));
                break;
            }
        }
        // Closing the channels ends the senders.
        drop((go0, go1));
        for t in [t0, t1] {
            t.join()
                .unwrap_or_else(|_| Err(Failure("a sender panicked".into())))?;
        }
        result
    })?;
    Ok((waits, sleeps))
}

pub(super) fn no_completion_event_is_lost(dev: &str) -> CaseResult {
    let rounds = 10_000;
    let (waits, _) = lost_events(dev, rounds, false)?;
    let (async_waits, sleeps) = lost_events(dev, rounds, true)?;
    passed(vec![format!(
        "{rounds} rounds of two send halves on two threads into one shared CQ: blocking ({waits} waits) and async ({async_waits} waits, {sleeps} sleeps), no 1 s wait timed out"
    )])
}

pub(super) fn a_stale_consumer_index_at_arm_time(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    if s.a.data_path() != rdma_direct::DataPath::Direct {
        return skipped(format!(
            "{dev} runs verbs: the provider keeps the consumer index itself (a direct-path case: sim, ConnectX)"
        ));
    }
    let src = s.pd.alloc_mr(8, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.alloc_mr(8, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    let write = |k| SendWr::rdma_write(k, &sge, remote(&dst, 0)).signaled();
    for k in 0..5 {
        s.a.post_send(&[write(k)])?;
    }
    // Five CQEs polled; our CQs ignore overrun, so no poll wrote the
    // consumer-index record: the arm word alone carries the index.
    check_eq!(poll_until(&mut s.a, 5)?.len(), 5);
    s.a.arm_cq(false)?;
    check!(
        !s.a.wait_cq_event(Duration::from_millis(100))?,
        "an event with no CQE after the arm (the device took a stale consumer index)"
    );
    s.a.post_send(&[write(5)])?;
    check!(
        s.a.wait_cq_event(Duration::from_secs(5))?,
        "no event for the 6th CQE"
    );
    check_eq!(poll_one(&mut s.a)?.wr_id, 5);
    check!(
        !s.a.wait_cq_event(Duration::from_millis(100))?,
        "a second event for one CQE"
    );
    passed(vec!["no event before the 6th CQE, then exactly one".into()])
}

/// The device's async events as a stream when its port goes down and up:
/// `PortError`, then `PortActive`. It takes the link of the netdev that
/// `RDMA_DIRECT_LINK_NETDEV` names down and up (`ip link set`), so it runs
/// only where that is set (scripts/test sets it in its soft-RoCE guest,
/// whose rxe0 sits on the dummy netdev rxedummy0); the sim has no link.
pub(super) fn port_events_stream_when_the_link_goes_down_and_up(dev: &str) -> CaseResult {
    if dev == "sim" {
        return skipped("the sim has no link to take down");
    }
    let Ok(netdev) = std::env::var("RDMA_DIRECT_LINK_NETDEV") else {
        return skipped(
            "RDMA_DIRECT_LINK_NETDEV names no netdev of this device to take down and up (set it only where that is harmless: scripts/test's guest sets rxedummy0)",
        );
    };
    let ctx = Context::open(dev)?;
    // Events from before: not this case's.
    while ctx.get_async_event(Duration::ZERO)?.is_some() {}
    let link = |state: &str| -> Result<(), Failure> {
        let out = std::process::Command::new("ip")
            .args(["link", "set", &netdev, state])
            .output()
            .map_err(|e| Failure(format!("ip link set {netdev} {state}: {e}")))?;
        check!(
            out.status.success(),
            "ip link set {netdev} {state}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    };
    let mut events = ctx.async_events();
    let mut sleeps = 0;
    let mut next = |want: &str| -> Result<rdma_direct::AsyncEvent, Failure> {
        match block_on(events.next_event(), COMPLETION_TIMEOUT, &mut sleeps) {
            Some(r) => Ok(r?),
            None => Err(Failure(format!(
                "no {want} event within {COMPLETION_TIMEOUT:?}"
            ))),
        }
    };
    link("down")?;
    let down = next("PortError");
    link("up")?;
    let down = down?;
    check!(
        matches!(down, rdma_direct::AsyncEvent::PortError { port: 1 }),
        "after the link went down: {down:?}"
    );
    let up = next("PortActive")?;
    check!(
        matches!(up, rdma_direct::AsyncEvent::PortActive { port: 1 }),
        "after the link came up: {up:?}"
    );
    passed(vec![format!(
        "{netdev} down: {down:?}, up: {up:?}, through the async event stream"
    )])
}

/// RTS -> SQD (`Qp::drain_sq`): the sends posted before run to completion,
/// the device raises `SqDrained` naming the QP (taken from the async event
/// stream), sends are refused meanwhile while receives go on, and the QP
/// goes back to RTS and sends again. A split QP, and a QP not in RTS,
/// refuse the move.
pub(super) fn the_send_queue_drains_with_an_event(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let ctx = &s._ctx;
    // Events from before: not this case's.
    while ctx.get_async_event(Duration::ZERO)?.is_some() {}
    let src = s.pd.alloc_mr(8, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.alloc_mr(64 * 8, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    let n = 16u64;
    for i in 0..n {
        let wr = SendWr::rdma_write(i, &sge, remote(&dst, i * 8)).signaled();
        s.a.post_send(&[wr])?;
    }
    s.a.drain_sq()?;
    check_eq!(s.a.state(), QpState::Sqd, "the state after drain_sq");
    let wr = SendWr::rdma_write(99, &sge, remote(&dst, 0)).signaled();
    check!(
        matches!(s.a.post_send(&[wr]), Err(Error::QpState { .. })),
        "a send posted in SQD was not refused"
    );
    let qpn = s.a.qp_num();
    let mut events = ctx.async_events();
    let mut sleeps = 0;
    let drained = loop {
        match block_on(events.next_event(), COMPLETION_TIMEOUT, &mut sleeps) {
            None => {
                return Err(Failure(format!(
                    "no SqDrained within {COMPLETION_TIMEOUT:?}"
                )))
            }
            Some(Err(e)) => return Err(e.into()),
            Some(Ok(rdma_direct::AsyncEvent::SqDrained { qp_num })) => break qp_num,
            Some(Ok(
                e @ (rdma_direct::AsyncEvent::QpFatal { qp_num }
                | rdma_direct::AsyncEvent::QpLastWqeReached { qp_num }),
            )) => check!(
                qp_num != qpn,
                "an event for the draining QP other than SqDrained: {e:?}"
            ),
            // Another object's event (a port's, a CQ's): not this case's.
            Some(Ok(_)) => {}
        }
    };
    check_eq!(drained, qpn, "the QP SqDrained names");
    let done = poll_until(&mut s.a, n as usize)?;
    for (i, w) in done.iter().enumerate() {
        check_eq!(
            (w.wr_id, w.status),
            (i as u64, WcStatus::SUCCESS),
            "the drained WRITE {i}"
        );
    }
    // Receives go on in SQD: b sends to a.
    let rbuf = s.pd.alloc_mr(8, Access::LOCAL_WRITE)?;
    s.a.post_recv(&[RecvWr::new(7, &[Sge::new(&rbuf, 0, 8)?])])?;
    s.b.post_send(&[SendWr::send(8, &sge).signaled()])?;
    let w = poll_one(&mut s.a)?;
    check_eq!(
        (w.wr_id, w.status),
        (7, WcStatus::SUCCESS),
        "a receive completed in SQD"
    );
    poll_one(&mut s.b)?;
    // Back to RTS: sends again.
    s.a.modify(QpState::Rts, &QpAttr::default())?;
    s.a.post_send(&[SendWr::rdma_write(100, &sge, remote(&dst, 0)).signaled()])?;
    let w = poll_one(&mut s.a)?;
    check_eq!(
        (w.wr_id, w.status),
        (100, WcStatus::SUCCESS),
        "a WRITE after SQD -> RTS"
    );
    // Refusals: split, and not in RTS.
    let (tx, rx) = s.a.split()?;
    check!(
        matches!(s.a.drain_sq(), Err(Error::QpSplit { .. })),
        "a split QP moved to SQD"
    );
    s.a.join(tx, rx)?;
    let mut fresh = s.pd.create_qp(&QpConfig::default())?;
    check!(
        matches!(fresh.drain_sq(), Err(Error::QpAttr { .. })),
        "a QP in RESET moved to SQD"
    );
    passed(vec![format!(
        "{n} WRITEs drained, SqDrained for QP {qpn:#x} from the event stream, a receive in SQD, sends again after RTS"
    )])
}

/// Cancellation: an async wait polled while its SEND is in flight (no
/// receive at the peer: RNR NAKs, `rnr_retry` 7), then dropped, as an
/// aborted task's is. The QP keeps the SEND's `LocalMr` (not handed back,
/// not deregistered) until the completion, which a new wait takes once the
/// peer posts a receive; the buffer comes back untouched and its bytes
/// land. (`tests/cancellation.rs` runs the sim's under Miri.)
pub(super) fn a_dropped_wait_leaves_the_buffer_with_the_qp(dev: &str) -> CaseResult {
    let mut s = setup_with(
        dev,
        QpConfig {
            max_send_wr: 4,
            max_recv_wr: 4,
            rnr_retry: 7,
            ..QpConfig::default()
        },
    )?;
    let mut buf = s.pd.alloc_local_mr(64, Access::empty())?;
    buf.copy_from_slice(&[0xa5; 64]);
    let dst = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let live = s.pd.live_mrs();
    s.a.post_send_owned(&SendWr::send(3, &[]).signaled(), buf, 0, 64)
        .map_err(|r| r.error)?;
    let mut sleeps = 0;
    {
        let mut out = [Completion::default(); 1];
        let mut c = s.a.completions(CompletionMode::Events);
        // Awaited for 200 ms (it sleeps: nothing can complete), then the
        // future is dropped unresolved.
        let r = block_on(
            c.next_batch(&mut out),
            Duration::from_millis(200),
            &mut sleeps,
        );
        check!(
            r.is_none(),
            "the SEND completed with no receive posted: {r:?}"
        );
    }
    check!(
        s.a.take_send_buf().is_none(),
        "the buffer came back while its SEND was in flight"
    );
    check_eq!(
        s.pd.live_mrs(),
        live,
        "MRs alive while the SEND is in flight"
    );
    s.b.post_recv(&[RecvWr::new(4, &[Sge::new(&dst, 0, 64)?])])?;
    let mut out = [Completion::default(); 1];
    let got = block_on(
        s.a.completions(CompletionMode::Events).next_batch(&mut out),
        COMPLETION_TIMEOUT,
        &mut sleeps,
    );
    check!(matches!(got, Some(Ok(1))), "the SEND's completion: {got:?}");
    check_eq!(
        (out[0].wr_id, out[0].status),
        (3, WcStatus::SUCCESS),
        "the SEND's completion"
    );
    let Some((wr_id, back)) = s.a.take_send_buf() else {
        return Err(Failure("no buffer back after the completion".into()));
    };
    check_eq!(wr_id, 3, "the buffer's wr_id");
    check!(
        back.iter().all(|&x| x == 0xa5),
        "the buffer changed in flight"
    );
    poll_one(&mut s.b)?;
    let mut landed = [0u8; 64];
    dst.read(0, &mut landed)?;
    check_eq!(landed, [0xa5; 64], "the bytes that landed");
    passed(vec![format!(
        "a wait dropped mid-flight; the LocalMr stayed with the QP until the completion ({sleeps} sleeps)"
    )])
}
