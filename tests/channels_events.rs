//! Completion channels and async events on the sim, through the public
//! API: many CQs on one `CompChannel` (`Pd::create_shared_cq_on`): every
//! waiting clone woken, tokens refused when duplicate or foreign and given
//! back, arming twice, a split QP's events, no event lost or misrouted
//! between threads, extreme timeouts, `Send + Sync`; and the send-queue
//! drain (`Qp::drain_sq`, `QpState::Sqd`, `AsyncEvent::SqDrained`): its
//! event, posts refused in SQD, drains waiting for RNR retries, SQD to ERR
//! or RTS, UC, UD and shared-CQ QPs, and a QP the device failed.

use rdma_direct::*;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};

#[path = "support/sim.rs"]
mod support;
use support::*;

// ------------------------------------------------------------ helpers

struct Flag(AtomicBool, std::thread::Thread);
impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
        self.1.unpark();
    }
}
fn flag() -> Arc<Flag> {
    Arc::new(Flag(AtomicBool::new(false), std::thread::current()))
}

/// Runs `f` on this thread until it resolves or `limit` passes (`None`).
fn block_on_for<F: Future>(f: F, limit: Duration) -> Option<F::Output> {
    let fl = flag();
    let waker = Waker::from(fl.clone());
    let mut cx = TaskContext::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    let t = Instant::now();
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return Some(v);
        }
        if t.elapsed() > limit {
            return None;
        }
        std::thread::park_timeout(Duration::from_millis(50));
    }
}

/// Runs `f` on a thread; `None` if it took longer than `limit`.
fn bounded<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).ok()
}

fn cfg() -> QpConfig {
    QpConfig {
        max_send_wr: 16,
        max_recv_wr: 16,
        ..QpConfig::default()
    }
}

/// A shared CQ on `ch` with `token`, one QP on it connected to a peer QP
/// with its own CQ.
fn cq_on(pd: &Pd, ch: &CompChannel, token: u64) -> (SharedCq, Qp) {
    let c = cfg();
    let depth = CqSizing::new().qp(&c).depth().unwrap();
    let mut cq = pd.create_shared_cq_on(depth, ch, token).unwrap();
    let i = cq.create_qp(&c).unwrap();
    let mut p = pd.create_qp(&c).unwrap();
    Qp::connect_loopback(cq.qp_mut(i), &mut p).unwrap();
    (cq, p)
}

fn write_on(cq: &mut SharedCq, e: &Env, wr_id: u64) {
    let sge = [Sge::new(&e.src, 0, 8).unwrap()];
    cq.qp_mut(0)
        .post_send(&[SendWr::rdma_write(wr_id, &sge, remote(&e.dst, 0)).signaled()])
        .unwrap();
}

fn pair(pd: &Pd, c: &QpConfig) -> (Qp, Qp) {
    let mut a = pd.create_qp(c).unwrap();
    let mut b = pd.create_qp(c).unwrap();
    Qp::connect_loopback(&mut a, &mut b).unwrap();
    (a, b)
}

/// The next SqDrained of `qpn` within `limit` (other events skipped).
fn sq_drained(ctx: &Context, qpn: u32, limit: Duration) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        match ctx.get_async_event(Duration::from_millis(20)).unwrap() {
            Some(AsyncEvent::SqDrained { qp_num }) if qp_num == qpn => return true,
            _ => {}
        }
    }
    false
}

// ==================================================== one channel, many CQs

/// Found (fixed: the sim channel keeps one waker per handle, every one
/// woken). Two clones of one channel, each awaited (`next_event`) by its
/// own task, as "Clones share the channel (each with its own async wait)"
/// promises. The sim channel keeps ONE waker (`wake_on_event` replaces
/// it), so the first task's registration is lost: when two events come,
/// only the last-registered task is woken; the other sleeps forever while
/// an event waits in the channel (a lost wakeup: a hang in an async server
/// with two consumers).
#[test]
fn every_clone_awaiting_the_channel_is_woken() {
    let e = env();
    let ch = e.ctx.create_comp_channel().unwrap();
    let (mut c1, _p1) = cq_on(&e.pd, &ch, 1);
    let (mut c2, _p2) = cq_on(&e.pd, &ch, 2);
    let (mut a, mut b) = (ch.clone(), ch.clone());
    let (fa, fb) = (flag(), flag());
    let (wa, wb) = (Waker::from(fa.clone()), Waker::from(fb.clone()));
    let mut na = Box::pin(a.next_event());
    let mut nb = Box::pin(b.next_event());
    assert!(na
        .as_mut()
        .poll(&mut TaskContext::from_waker(&wa))
        .is_pending());
    assert!(nb
        .as_mut()
        .poll(&mut TaskContext::from_waker(&wb))
        .is_pending());
    c1.arm_cq(false).unwrap();
    c2.arm_cq(false).unwrap();
    write_on(&mut c1, &e, 1);
    write_on(&mut c2, &e, 2);
    poll_n_with(|wc| c1.poll(wc), 1);
    poll_n_with(|wc| c2.poll(wc), 1);
    // Both events are raised; the task woken takes one of them.
    let t = Instant::now();
    while !fa.0.load(Ordering::SeqCst) && !fb.0.load(Ordering::SeqCst) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no task woken at all"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let woken_b = fb.0.load(Ordering::SeqCst);
    let (first, other_flag, other) = if woken_b {
        (
            nb.as_mut().poll(&mut TaskContext::from_waker(&wb)),
            fa.clone(),
            na,
        )
    } else {
        (
            na.as_mut().poll(&mut TaskContext::from_waker(&wa)),
            fb.clone(),
            nb,
        )
    };
    assert!(matches!(first, Poll::Ready(Ok(_))), "{first:?}");
    // One event still waits in the channel: the other task must be woken.
    let t = Instant::now();
    while !other_flag.0.load(Ordering::SeqCst) && t.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let waiting = ch.get_event(Duration::ZERO).unwrap();
    assert!(
        other_flag.0.load(Ordering::SeqCst),
        "the other clone's task was never woken, though an event (token {waiting:?}) waited for it"
    );
    drop(other);
}

/// Found (same cause and fix, through the `Stream`): a task polling clone A's
/// stream is forgotten as soon as another task polls clone B's stream.
#[test]
fn a_stream_of_one_clone_is_woken_while_another_clone_also_waits() {
    use futures_core::Stream;
    let e = env();
    let ch = e.ctx.create_comp_channel().unwrap();
    let (mut c1, _p1) = cq_on(&e.pd, &ch, 11);
    let (mut a, mut b) = (ch.clone(), ch.clone());
    let (fa, fb) = (flag(), flag());
    let (wa, wb) = (Waker::from(fa.clone()), Waker::from(fb.clone()));
    assert!(Pin::new(&mut a)
        .poll_next(&mut TaskContext::from_waker(&wa))
        .is_pending());
    assert!(Pin::new(&mut b)
        .poll_next(&mut TaskContext::from_waker(&wb))
        .is_pending());
    // B's task goes away (its select! took another branch, say).
    drop(b);
    c1.arm_cq(false).unwrap();
    write_on(&mut c1, &e, 1);
    poll_n_with(|wc| c1.poll(wc), 1);
    let t = Instant::now();
    while !fa.0.load(Ordering::SeqCst) && t.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        fa.0.load(Ordering::SeqCst),
        "A's task, the only one waiting, was never woken by the event"
    );
}
use std::pin::Pin;

/// Held: a duplicate token is refused (Invalid), the refusal changes
/// nothing, and the token is free again once its CQ is dropped; a channel
/// of another Context is refused.
#[test]
fn duplicate_and_foreign_tokens_are_refused_and_tokens_come_back() {
    let e = env();
    let ch = e.ctx.create_comp_channel().unwrap();
    let a = e.pd.create_shared_cq_on(8, &ch, 5).unwrap();
    assert!(matches!(
        e.pd.create_shared_cq_on(8, &ch, 5),
        Err(Error::DuplicateToken { token: 5 })
    ));
    assert!(matches!(
        e.pd.create_shared_cq_on(0, &ch, 6),
        Err(Error::Config { value: 0, .. })
    ));
    assert!(matches!(
        e.pd.create_shared_cq_on((1 << 22) + 1, &ch, 6),
        Err(Error::Config { .. })
    ));
    assert_eq!(ch.cqs(), 1);
    drop(a);
    assert_eq!(ch.cqs(), 0);
    let _again = e.pd.create_shared_cq_on(8, &ch, 5).unwrap();
    let other = Context::open("sim").unwrap().create_comp_channel().unwrap();
    assert!(matches!(
        e.pd.create_shared_cq_on(8, &other, 7),
        Err(Error::ForeignPd { .. })
    ));
    assert_eq!(other.cqs(), 0);
}

/// Held: the CQ's own event waits are refused with Invalid.
#[test]
fn a_channel_cq_refuses_its_own_event_waits() {
    let e = env();
    let ch = e.ctx.create_comp_channel().unwrap();
    let (mut cq, _p) = cq_on(&e.pd, &ch, 3);
    assert!(matches!(
        cq.wait_cq_event(Duration::from_secs(5)),
        Err(Error::ChannelShared { token: 3 })
    ));
    let mut wc = [Completion::default(); 4];
    for m in [
        CompletionMode::Events,
        CompletionMode::Adaptive { spins: 0 },
    ] {
        assert!(matches!(
            cq.wait(&mut wc, m, Duration::from_secs(5)),
            Err(Error::ChannelShared { token: 3 })
        ));
    }
    let r = block_on_for(
        cq.completions(CompletionMode::Events).next_batch(&mut wc),
        Duration::from_secs(5),
    );
    assert!(
        matches!(r, Some(Err(Error::ChannelShared { token: 3 }))),
        "{r:?}"
    );
}

/// Held: the channel dropped before its CQs; they still arm, complete and
/// drop without a panic (the CQs keep the channel alive).
#[test]
fn dropping_the_channel_before_its_cqs_is_harmless() {
    let e = env();
    let ch = e.ctx.create_comp_channel().unwrap();
    let (mut cq, _p) = cq_on(&e.pd, &ch, 9);
    drop(ch);
    cq.arm_cq(false).unwrap();
    write_on(&mut cq, &e, 1);
    poll_n_with(|wc| cq.poll(wc), 1);
    cq.arm_cq(false).unwrap();
    drop(cq);
}

/// Held: arming twice before the event is taken gives one event; the next
/// arm after taking it gives the next one; a dropped CQ's pending event
/// goes with it.
#[test]
fn arming_twice_gives_one_event_and_the_next_arm_works() {
    let e = env();
    let ch = e.ctx.create_comp_channel().unwrap();
    let (mut cq, _p) = cq_on(&e.pd, &ch, 4);
    cq.arm_cq(false).unwrap();
    cq.arm_cq(false).unwrap();
    write_on(&mut cq, &e, 1);
    assert_eq!(ch.get_event(Duration::from_secs(10)).unwrap(), Some(4));
    poll_n_with(|wc| cq.poll(wc), 1);
    cq.arm_cq(false).unwrap(); // a repeat before nothing
    write_on(&mut cq, &e, 2);
    poll_n_with(|wc| cq.poll(wc), 1);
    assert_eq!(ch.get_event(Duration::from_secs(10)).unwrap(), Some(4));
    assert_eq!(ch.get_event(Duration::from_millis(100)).unwrap(), None);
    // An event pending at drop goes with the CQ; the token comes back.
    cq.arm_cq(false).unwrap();
    write_on(&mut cq, &e, 3);
    poll_n_with(|wc| cq.poll(wc), 1);
    std::thread::sleep(Duration::from_millis(50));
    drop(cq);
    assert_eq!(ch.get_event(Duration::from_millis(100)).unwrap(), None);
    let (mut cq, _p2) = cq_on(&e.pd, &ch, 4);
    cq.arm_cq(false).unwrap();
    write_on(&mut cq, &e, 4);
    assert_eq!(ch.get_event(Duration::from_secs(10)).unwrap(), Some(4));
}

/// Held: a QP of a channel CQ splits; a WRITE from its send half raises
/// the CQ's event on the channel.
#[test]
fn a_split_qp_of_a_channel_cq_raises_its_event_there() {
    let e = env();
    let ch = e.ctx.create_comp_channel().unwrap();
    let (mut cq, _p) = cq_on(&e.pd, &ch, 12);
    let (mut tx, rx) = cq.qp_mut(0).split().unwrap();
    cq.arm_cq(false).unwrap();
    let sge = [Sge::new(&e.src, 0, 8).unwrap()];
    tx.post_send(&[SendWr::rdma_write(1, &sge, remote(&e.dst, 0)).signaled()])
        .unwrap();
    assert_eq!(ch.get_event(Duration::from_secs(10)).unwrap(), Some(12));
    let w = poll_n_with(|wc| cq.poll(wc), 1);
    assert_eq!(w[0].wr_id, 1);
    cq.qp_mut(0).join(tx, rx).unwrap();
}

/// Held (stress): 3 CQs, each driven by its own thread (arm, poll, post,
/// wait for its token, poll), one dispatcher thread taking every event
/// from a clone of the channel: no event lost in 3 x 300 rounds.
#[test]
fn no_event_is_lost_with_a_dispatcher_thread() {
    let e = Arc::new(env());
    let ch = e.ctx.create_comp_channel().unwrap();
    let rounds = 300u64;
    let mut txs = Vec::new();
    let mut owners = Vec::new();
    let stop = Arc::new(AtomicBool::new(false));
    for k in 0..3u64 {
        let (tx, rx) = std::sync::mpsc::channel::<u64>();
        txs.push(tx);
        let (mut cq, p) = cq_on(&e.pd, &ch, 100 + k);
        let e = e.clone();
        owners.push(std::thread::spawn(move || {
            let _p = p;
            let mut wc = [Completion::default(); 4];
            for r in 0..rounds {
                cq.arm_cq(false).unwrap();
                assert_eq!(cq.poll(&mut wc).unwrap(), 0);
                write_on(&mut cq, &e, r);
                match rx.recv_timeout(Duration::from_secs(20)) {
                    Ok(t) => assert_eq!(t, 100 + k),
                    Err(_) => panic!("CQ {k}: round {r}: no event (lost)"),
                }
                let w = poll_n_with(|wc| cq.poll(wc), 1);
                assert_eq!(w[0].wr_id, r);
            }
        }));
    }
    let d = {
        let ch = ch.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                if let Some(t) = ch.get_event(Duration::from_millis(50)).unwrap() {
                    let _ = txs[(t - 100) as usize].send(t);
                }
            }
        })
    };
    let mut failed = None;
    for o in owners {
        if let Err(p) = o.join() {
            failed = Some(p);
        }
    }
    stop.store(true, Ordering::SeqCst);
    d.join().unwrap();
    if let Some(p) = failed {
        std::panic::resume_unwind(p);
    }
}

/// Found (fixed: a CQ's events carry a serial of its seat, never reused,
/// rather than its token; an event of a dropped CQ is skipped). A race: about half the runs within 3 s here, so it loops up to
/// 10 s). A token's event count is keyed by the token alone and bumped
/// after the take (src/channel.rs:169 `seen`, after the sim queue's pop
/// at :164). A waiter thread that pops the old CQ's event just before the
/// owner drops that CQ and makes a new one with the same token (as the
/// docs invite: "the token is free again") counts the stale event to the
/// NEW CQ; that CQ then arms with a sequence number ahead of the device's
/// and never raises another event: its owner waits forever.
#[test]
fn a_token_reused_while_another_thread_takes_events_still_gets_its_events() {
    let e = env();
    let ch = e.ctx.create_comp_channel().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<u64>();
    let stop = Arc::new(AtomicBool::new(false));
    let d = {
        let (ch, stop) = (ch.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                if let Some(t) = ch.get_event(Duration::from_millis(10)).unwrap() {
                    let _ = tx.send(t);
                }
            }
        })
    };
    // Contention on the channel's token map (`CompChannel::cqs` locks it)
    // widens the waiter's window between its pop and its count.
    let hammer = {
        let (ch, stop) = (ch.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                std::hint::black_box(ch.cqs());
            }
        })
    };
    let t0 = Instant::now();
    let mut result = Ok(());
    'outer: while t0.elapsed() < Duration::from_secs(15) {
        let (mut old, _po) = cq_on(&e.pd, &ch, 77);
        old.arm_cq(false).unwrap();
        write_on(&mut old, &e, 1);
        poll_n_with(|wc| old.poll(wc), 1);
        drop(old); // races the waiter's take of its event
        while rx.try_recv().is_ok() {}
        let (mut new, _pn) = cq_on(&e.pd, &ch, 77);
        for r in 0..3 {
            new.arm_cq(false).unwrap();
            write_on(&mut new, &e, r);
            poll_n_with(|wc| new.poll(wc), 1);
            if rx.recv_timeout(Duration::from_secs(2)).is_err() {
                result = Err(format!("round {r} of a reused token: no event"));
                break 'outer;
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    d.join().unwrap();
    hammer.join().unwrap();
    result.unwrap();
}

/// Held: a CompChannel wait with Duration::MAX returns the event (no
/// overflow), and get_event on a channel with no CQ and a zero timeout
/// returns None at once.
#[test]
fn channel_waits_with_extreme_timeouts() {
    let e = env();
    let ch = e.ctx.create_comp_channel().unwrap();
    assert_eq!(ch.get_event(Duration::ZERO).unwrap(), None);
    let (mut cq, _p) = cq_on(&e.pd, &ch, 0);
    cq.arm_cq(false).unwrap();
    write_on(&mut cq, &e, 1);
    let r = bounded(Duration::from_secs(20), move || {
        ch.get_event(Duration::MAX).unwrap()
    });
    assert_eq!(r, Some(Some(0)));
}

/// From the fresh user's report: the docs say `CompChannel` is `Send` and
/// `Sync` (threads may share one by reference for `get_event`); it was not
/// `Sync`. A compile-time check, and the use it allows.
#[test]
fn a_comp_channel_is_send_and_sync_and_shared_by_reference() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    let e = env();
    let ch = e.ctx.create_comp_channel().unwrap();
    send_sync(&ch);
    std::thread::scope(|s| {
        let r = &ch;
        s.spawn(move || r.get_event(Duration::ZERO).unwrap());
    });
}

// ==================================================== send queue drain

/// Held: a drain with nothing outstanding raises SqDrained at once; the
/// device says SQD; a second drain is refused (QpAttr) and SQD -> INIT
/// too, each leaving the QP in SQD; SQD -> RTS -> SQD raises a new event.
#[test]
fn an_idle_drain_raises_its_event_and_bad_transitions_change_nothing() {
    let e = env();
    let (mut a, _b) = pair(&e.pd, &cfg());
    a.drain_sq().unwrap();
    assert!(sq_drained(&e.ctx, a.qp_num(), Duration::from_secs(10)));
    assert_eq!(a.state(), QpState::Sqd);
    assert_eq!(a.query().unwrap().state, QpState::Sqd);
    assert!(matches!(a.drain_sq(), Err(Error::QpAttr { .. })));
    assert!(matches!(
        a.modify(QpState::Sqd, &QpAttr::default()),
        Err(Error::QpAttr { .. })
    ));
    assert!(matches!(
        a.modify(QpState::Init, &QpAttr::default()),
        Err(Error::QpAttr { .. })
    ));
    assert_eq!(a.state(), QpState::Sqd);
    assert_eq!(a.query().unwrap().state, QpState::Sqd);
    assert!(!sq_drained(&e.ctx, a.qp_num(), Duration::from_millis(100)));
    a.modify(QpState::Rts, &QpAttr::default()).unwrap();
    a.drain_sq().unwrap();
    assert!(sq_drained(&e.ctx, a.qp_num(), Duration::from_secs(10)));
}

/// Held: every send-side post in SQD is refused with QpState and posts
/// nothing (after SQD -> RTS only the new WRITE completes); the owned
/// buffer comes back; receives go on.
#[test]
fn every_send_post_in_sqd_is_refused_and_posts_nothing() {
    let e = env();
    let (mut a, mut b) = pair(&e.pd, &cfg());
    a.drain_sq().unwrap();
    let sge = [Sge::new(&e.src, 0, 8).unwrap()];
    let to = remote(&e.dst, 0);
    let st = |r: Result<()>| matches!(r, Err(Error::QpState { .. }));
    assert!(st(
        a.post_send(&[SendWr::rdma_write(1, &sge, to).signaled()])
    ));
    assert!(st(a.post_write(&WriteWr::new(2, sge[0], to).signaled())));
    assert!(st(a.post_writes(&[
        WriteWr::new(3, sge[0], to).signaled(),
        WriteWr::new(4, sge[0], to).signaled()
    ])));
    assert!(st(a.post_write_inline(
        5,
        b"abcdefgh",
        to,
        SendFlags::SIGNALED
    )));
    let buf = e.pd.alloc_local_mr(64, Access::LOCAL_WRITE).unwrap();
    let r = a.post_send_owned(&SendWr::rdma_write(6, &[], to).signaled(), buf, 0, 8);
    let back = match r {
        Err(Refused {
            error: Error::QpState { .. },
            buf,
        }) => buf,
        Err(Refused { error, .. }) => panic!("owned post: {error:?}"),
        Ok(()) => panic!("owned post in SQD accepted"),
    };
    assert_eq!(back.len(), 64);
    // Receives go on.
    a.post_recv(&[RecvWr::new(7, &[Sge::new(&e.dst, 64, 8).unwrap()])])
        .unwrap();
    b.post_send(&[SendWr::send(8, &sge).signaled()]).unwrap();
    assert_eq!(poll_n(&mut a, 1)[0].wr_id, 7);
    poll_n(&mut b, 1);
    a.modify(QpState::Rts, &QpAttr::default()).unwrap();
    a.post_send(&[SendWr::rdma_write(9, &sge, to).signaled()])
        .unwrap();
    let got: Vec<u64> = poll_n(&mut a, 1).iter().map(|c| c.wr_id).collect();
    assert_eq!(got, [9]);
    assert!(drain(&mut a).is_empty(), "a refused WR ran");
}

/// Held: a SEND stuck in RNR retry (rnr_retry 7, no receive at the peer)
/// keeps the drain open (no SqDrained); a receive at the peer lets it
/// complete and the event comes.
#[test]
fn a_drain_waits_for_a_send_in_rnr_retry() {
    let e = env();
    let c = QpConfig {
        rnr_retry: 7,
        ..cfg()
    };
    let (mut a, mut b) = pair(&e.pd, &c);
    let sge = [Sge::new(&e.src, 0, 8).unwrap()];
    a.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    a.drain_sq().unwrap();
    assert!(!sq_drained(&e.ctx, a.qp_num(), Duration::from_millis(300)));
    b.post_recv(&[RecvWr::new(2, &[Sge::new(&e.dst, 0, 8).unwrap()])])
        .unwrap();
    assert!(sq_drained(&e.ctx, a.qp_num(), Duration::from_secs(10)));
    let w = poll_n(&mut a, 1)[0];
    assert_eq!((w.wr_id, w.status), (1, WcStatus::SUCCESS));
}

/// Held: a drain stuck in RNR, then SQD -> ERR flushes the SEND and no
/// SqDrained follows; ERR -> RESET, reconnect, drain again works.
#[test]
fn sqd_to_err_flushes_without_an_event_and_the_qp_reconnects() {
    let e = env();
    let c = QpConfig {
        rnr_retry: 7,
        ..cfg()
    };
    let (mut a, mut b) = pair(&e.pd, &c);
    let sge = [Sge::new(&e.src, 0, 8).unwrap()];
    a.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    a.drain_sq().unwrap();
    a.modify(QpState::Err, &QpAttr::default()).unwrap();
    let w = poll_n(&mut a, 1)[0];
    assert_eq!((w.wr_id, w.status), (1, WcStatus::WR_FLUSH_ERR));
    assert!(!sq_drained(&e.ctx, a.qp_num(), Duration::from_millis(200)));
    a.modify(QpState::Reset, &QpAttr::default()).unwrap();
    b.modify(QpState::Reset, &QpAttr::default()).unwrap();
    Qp::connect_loopback(&mut a, &mut b).unwrap();
    a.drain_sq().unwrap();
    assert!(sq_drained(&e.ctx, a.qp_num(), Duration::from_secs(10)));
    a.modify(QpState::Reset, &QpAttr::default()).unwrap();
    assert_eq!(a.query().unwrap().state, QpState::Reset);
}

/// Held: UC and UD QPs drain too (UD: a datagram outstanding), and refuse
/// posts in SQD.
#[test]
fn uc_and_ud_qps_drain_and_refuse_posts_in_sqd() {
    let e = env();
    let uc = QpConfig {
        qp_type: QpType::Uc,
        ..cfg()
    };
    let (mut a, _b) = pair(&e.pd, &uc);
    let sge = [Sge::new(&e.src, 0, 8).unwrap()];
    a.post_send(&[SendWr::rdma_write(1, &sge, remote(&e.dst, 0)).signaled()])
        .unwrap();
    a.drain_sq().unwrap();
    assert!(sq_drained(&e.ctx, a.qp_num(), Duration::from_secs(10)));
    poll_n(&mut a, 1);
    let ud = QpConfig {
        qp_type: QpType::Ud,
        ..cfg()
    };
    let (mut u, mut v) = (e.pd.create_qp(&ud).unwrap(), e.pd.create_qp(&ud).unwrap());
    u.ready_ud(0x11).unwrap();
    v.ready_ud(0x11).unwrap();
    let ah = e.pd.create_ah(&u.av_to(&v.endpoint())).unwrap();
    let d = UdDest {
        ah: &ah,
        remote_qpn: v.qp_num(),
        qkey: 0x11,
    };
    u.post_send(&[SendWr::ud_send(1, &sge, d).signaled()])
        .unwrap();
    u.drain_sq().unwrap();
    assert!(sq_drained(&e.ctx, u.qp_num(), Duration::from_secs(10)));
    assert!(matches!(
        u.post_send(&[SendWr::ud_send(2, &sge, d).signaled()]),
        Err(Error::QpState { .. })
    ));
    u.modify(QpState::Rts, &QpAttr::default()).unwrap();
    u.post_send(&[SendWr::ud_send(3, &sge, d).signaled()])
        .unwrap();
}

/// Held: a QP of a SharedCq (on a shared channel) drains with its event;
/// in SQD it cannot split; `Qp::modify` to RESET with WRs outstanding is
/// refused and `SharedCq::reset_qp` resets it from SQD.
#[test]
fn a_shared_cq_qp_drains_and_resets_from_sqd() {
    let e = env();
    let ch = e.ctx.create_comp_channel().unwrap();
    let c = QpConfig {
        rnr_retry: 7,
        ..cfg()
    };
    let depth = CqSizing::new().qp(&c).depth().unwrap();
    let mut cq = e.pd.create_shared_cq_on(depth, &ch, 1).unwrap();
    let i = cq.create_qp(&c).unwrap();
    let mut p = e.pd.create_qp(&c).unwrap();
    Qp::connect_loopback(cq.qp_mut(i), &mut p).unwrap();
    let sge = [Sge::new(&e.src, 0, 8).unwrap()];
    cq.qp_mut(i)
        .post_send(&[SendWr::send(1, &sge).signaled()])
        .unwrap(); // stuck in RNR
    cq.qp_mut(i).drain_sq().unwrap();
    assert!(matches!(cq.qp_mut(i).split(), Err(Error::QpState { .. })));
    assert!(matches!(
        cq.qp_mut(i).modify(QpState::Reset, &QpAttr::default()),
        Err(Error::SharedCqOutstanding { .. })
    ));
    assert_eq!(cq.qp(i).state(), QpState::Sqd);
    let qpn = cq.qp(i).qp_num();
    assert!(!sq_drained(&e.ctx, qpn, Duration::from_millis(200)));
    cq.reset_qp(i).unwrap();
    assert_eq!(cq.qp(i).query().unwrap().state, QpState::Reset);
    assert_eq!(cq.credits_free(), cq.depth());
}

/// Held: a drain on a QP the device moved to ERR (a WRITE to a bad rkey)
/// while the crate still says RTS fails with an error and raises nothing.
#[test]
fn a_drain_on_a_qp_the_device_failed_is_an_error() {
    let e = env();
    let (mut a, _b) = pair(&e.pd, &cfg());
    let sge = [Sge::new(&e.src, 0, 8).unwrap()];
    let bad = RemoteAddr {
        addr: e.dst.addr(),
        rkey: Rkey(e.dst.rkey().0 ^ 0x5a5a00),
    };
    a.post_send(&[SendWr::rdma_write(1, &sge, bad).signaled()])
        .unwrap();
    let w = poll_n(&mut a, 1)[0];
    assert_ne!(w.status, WcStatus::SUCCESS);
    let r = a.drain_sq();
    assert!(
        r.is_err(),
        "drain on an errored QP: {r:?}, state {:?}",
        a.state()
    );
    assert!(!sq_drained(&e.ctx, a.qp_num(), Duration::from_millis(200)));
}

/// Held: SQD -> RTS before the drain finished (a SEND stuck in RNR) is
/// allowed; no stale SqDrained comes later when the SEND completes.
#[test]
fn resuming_before_the_drain_ends_raises_no_stale_event() {
    let e = env();
    let c = QpConfig {
        rnr_retry: 7,
        ..cfg()
    };
    let (mut a, mut b) = pair(&e.pd, &c);
    let sge = [Sge::new(&e.src, 0, 8).unwrap()];
    a.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    a.drain_sq().unwrap();
    a.modify(QpState::Rts, &QpAttr::default()).unwrap();
    b.post_recv(&[RecvWr::new(2, &[Sge::new(&e.dst, 0, 8).unwrap()])])
        .unwrap();
    assert_eq!(poll_n(&mut a, 1)[0].status, WcStatus::SUCCESS);
    assert!(!sq_drained(&e.ctx, a.qp_num(), Duration::from_millis(300)));
}
