//! A QP in two halves (`Qp::split`): sends and receives posted from two
//! threads at once while the CQ's owner polls, on QPs with their own CQs
//! and on a shared CQ; the refusals; join, and halves dropped unjoined.

use super::*;
use rdma_direct::{RecvHalf, SendHalf};

/// Messages each way in the two-thread case.
const MESSAGES: usize = 2000;

/// Posts `n` SEND_WITH_IMMs of 8 bytes (the WR number, also the
/// immediate) from `tx`, each retried while the queue is full (the CQ's
/// owner polls meanwhile); stops at the deadline.
fn send_all(tx: &mut SendHalf, src: &Mr, n: usize) -> Result<(), Failure> {
    let deadline = Instant::now() + COMPLETION_TIMEOUT;
    for i in 0..n {
        let sge = [Sge::new(src, (i % 64) * 8, 8)?];
        let wr = SendWr::send(i as u64, &sge).imm(i as u32).signaled();
        loop {
            match tx.post_send(&[wr]) {
                Ok(()) => break,
                Err(Error::QueueFull) => {
                    check!(Instant::now() < deadline, "send {i} found no room in time");
                    std::thread::yield_now();
                }
                Err(e) => return Err(Failure(format!("send {i}: {e}"))),
            }
        }
    }
    Ok(())
}

/// Posts `n` receives of 8 bytes into `dst` (slot `i % 64`), wr_id `i`, in
/// batches of up to 8, each retried while the RQ is full.
fn recv_all(rx: &mut RecvHalf, dst: &Mr, n: usize) -> Result<(), Failure> {
    let deadline = Instant::now() + COMPLETION_TIMEOUT;
    let mut i = 0;
    while i < n {
        let k = (n - i).min(8);
        let sges: Vec<[Sge<'_>; 1]> = (i..i + k)
            .map(|j| Ok([Sge::new(dst, (j % 64) * 8, 8)?]))
            .collect::<Result<_, Error>>()?;
        let wrs: Vec<RecvWr<'_>> = (0..k)
            .map(|j| RecvWr::new((i + j) as u64, &sges[j]))
            .collect();
        match rx.post_recv(&wrs) {
            Ok(()) => i += k,
            Err(Error::RecvQueueFull) => {
                check!(
                    Instant::now() < deadline,
                    "receive {i} found no room in time"
                );
                std::thread::yield_now();
            }
            Err(e) => return Err(Failure(format!("receive {i}: {e}"))),
        }
    }
    Ok(())
}

/// What one QP's CQ gave: send wr_ids and (wr_id, imm) of receives, in
/// the order polled.
#[derive(Default)]
struct Seen {
    sends: Vec<u64>,
    recvs: Vec<(u64, Option<u32>)>,
}

impl Seen {
    fn take(&mut self, c: &Completion) -> Result<(), Failure> {
        check_eq!(c.status, WcStatus::SUCCESS, "status of wr_id {}", c.wr_id);
        if c.opcode == WcOpcode::RECV {
            self.recvs.push((c.wr_id, c.imm));
        } else {
            self.sends.push(c.wr_id);
        }
        Ok(())
    }

    /// Every send 0..n once, in order; every receive 0..n once, in order,
    /// carrying immediate = its number.
    fn check(&self, who: &str, n: usize) -> Result<(), Failure> {
        let want: Vec<u64> = (0..n as u64).collect();
        check!(
            self.sends == want,
            "{who}: send wr_ids not 0..{n} in order ({} of them)",
            self.sends.len()
        );
        let recvs: Vec<(u64, Option<u32>)> = (0..n).map(|i| (i as u64, Some(i as u32))).collect();
        check!(
            self.recvs == recvs,
            "{who}: receives not 0..{n} in order with their immediates ({} of them)",
            self.recvs.len()
        );
        Ok(())
    }
}

pub(super) fn halves_post_from_four_threads_while_the_owner_polls(dev: &str) -> CaseResult {
    let mut s = setup_with(
        dev,
        QpConfig {
            max_send_wr: 32,
            max_recv_wr: 32,
            // The receives are posted by another thread, which may lag:
            // a SEND waits for its receive (RNR NAKs retried for ever).
            rnr_retry: 7,
            ..QpConfig::default()
        },
    )?;
    let src = s.pd.alloc_mr(64 * 8, Access::LOCAL_WRITE)?;
    let dst = [
        s.pd.alloc_mr(64 * 8, Access::LOCAL_WRITE)?,
        s.pd.alloc_mr(64 * 8, Access::LOCAL_WRITE)?,
    ];
    let (mut a_tx, mut a_rx) = s.a.split()?;
    let (mut b_tx, mut b_rx) = s.b.split()?;
    let (mut seen_a, mut seen_b) = (Seen::default(), Seen::default());
    let (a, b) = (&mut s.a, &mut s.b);
    let results = std::thread::scope(|sc| -> Result<Vec<Result<(), Failure>>, Failure> {
        let posters = [
            sc.spawn(|| send_all(&mut a_tx, &src, MESSAGES)),
            sc.spawn(|| send_all(&mut b_tx, &src, MESSAGES)),
            sc.spawn(|| recv_all(&mut a_rx, &dst[0], MESSAGES)),
            sc.spawn(|| recv_all(&mut b_rx, &dst[1], MESSAGES)),
        ];
        // The CQ owners: both QPs polled here, until every WR completed.
        let deadline = Instant::now() + COMPLETION_TIMEOUT * 3;
        let mut wc = [Completion::default(); 16];
        while seen_a.sends.len() + seen_a.recvs.len() + seen_b.sends.len() + seen_b.recvs.len()
            < 4 * MESSAGES
        {
            let mut got = 0;
            for (qp, seen) in [(&mut *a, &mut seen_a), (&mut *b, &mut seen_b)] {
                let n = qp.poll(&mut wc)?;
                for c in &wc[..n] {
                    seen.take(c)?;
                }
                got += n;
            }
            if got == 0 {
                if Instant::now() > deadline {
                    break;
                }
                std::thread::yield_now();
            }
        }
        Ok(posters
            .into_iter()
            .map(|p| {
                p.join()
                    .unwrap_or_else(|_| Err(Failure("a poster panicked".into())))
            })
            .collect())
    })?;
    for r in results {
        r?;
    }
    seen_a.check("QP a", MESSAGES)?;
    seen_b.check("QP b", MESSAGES)?;
    a.join(a_tx, a_rx)?;
    b.join(b_tx, b_rx)?;
    // Joined: the whole QP posts again, from where the halves were.
    let sge = [Sge::new(&src, 0, 8)?];
    let rsge = [Sge::new(&dst[1], 0, 8)?];
    b.post_recv(&[RecvWr::new(7, &rsge)])?;
    a.post_send(&[SendWr::send(9, &sge).signaled()])?;
    check_eq!(poll_one(a)?.wr_id, 9, "the joined QP's send");
    check_eq!(poll_one(b)?.wr_id, 7, "the joined QP's receive");
    passed(vec![format!(
        "{MESSAGES} SENDs each way, posted by two send halves while two receive halves posted the receives and this thread polled"
    )])
}

pub(super) fn halves_of_qps_on_a_shared_cq(dev: &str) -> CaseResult {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig {
        max_send_wr: 16,
        max_recv_wr: 8,
        ..QpConfig::default()
    };
    // Room for both QPs' WRs, and no more: the split takes it all.
    let depth = CqSizing::new().qp(&cfg).qp(&cfg).depth()?;
    let mut cq = pd.create_shared_cq(depth)?;
    let qa = [cq.create_qp(&cfg)?, cq.create_qp(&cfg)?];
    let mut peers = [pd.create_qp(&cfg)?, pd.create_qp(&cfg)?];
    for (i, p) in peers.iter_mut().enumerate() {
        Qp::connect_loopback(cq.qp_mut(qa[i]), p)?;
    }
    let free = cq.credits_free();
    let (tx0, rx0) = cq.qp_mut(qa[0]).split()?;
    let taken = free - cq.credits_free();
    check_eq!(
        taken,
        16 + 8,
        "CQ credits the first split took (max_send_wr + max_recv_wr)"
    );
    let (tx1, rx1) = match cq.qp_mut(qa[1]).split() {
        Ok(h) => h,
        Err(Error::CqFull) => {
            return Err(Failure(format!(
                "the second split found {} credits free, want 24",
                cq.credits_free()
            )))
        }
        Err(e) => return Err(e.into()),
    };
    let dst = pd.alloc_mr(2 * 64 * 8, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let src = pd.alloc_mr(8, Access::LOCAL_WRITE)?;
    let n = 500;
    let mut halves = [tx0, tx1];
    let mut seen = [Vec::new(), Vec::new()];
    let qpn = [cq.qp(qa[0]).qp_num(), cq.qp(qa[1]).qp_num()];
    let results = std::thread::scope(|sc| -> Result<Vec<Result<(), Failure>>, Failure> {
        let posters: Vec<_> = halves
            .iter_mut()
            .enumerate()
            .map(|(q, tx)| {
                let (dst, src) = (&dst, &src);
                sc.spawn(move || -> Result<(), Failure> {
                    let sge = [Sge::new(src, 0, 8)?];
                    let deadline = Instant::now() + COMPLETION_TIMEOUT;
                    for i in 0..n {
                        let to = remote(dst, ((q * 64 + i % 64) * 8) as u64);
                        let wr = SendWr::rdma_write(i as u64, &sge, to);
                        // Every 4th signaled: the rest retire with it.
                        let wr = if i % 4 == 3 || i + 1 == n {
                            wr.signaled()
                        } else {
                            wr
                        };
                        while let Err(e) = tx.post_send(&[wr]) {
                            check!(matches!(e, Error::QueueFull), "WRITE {i} of QP {q}: {e}");
                            check!(Instant::now() < deadline, "WRITE {i} found no room in time");
                            std::thread::yield_now();
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        let want = n / 4;
        let mut wc = [Completion::default(); 16];
        let deadline = Instant::now() + COMPLETION_TIMEOUT * 2;
        while seen[0].len() + seen[1].len() < 2 * want && Instant::now() < deadline {
            let k = cq.poll(&mut wc)?;
            for c in &wc[..k] {
                check_eq!(c.status, WcStatus::SUCCESS, "status of wr_id {}", c.wr_id);
                let q = qpn.iter().position(|&x| x == c.qp_num);
                check!(q.is_some(), "a completion of QP {:#x}", c.qp_num);
                seen[q.unwrap_or(0)].push(c.wr_id);
            }
            if k == 0 {
                std::thread::yield_now();
            }
        }
        Ok(posters
            .into_iter()
            .map(|p| {
                p.join()
                    .unwrap_or_else(|_| Err(Failure("a poster panicked".into())))
            })
            .collect())
    })?;
    for r in results {
        r?;
    }
    let want: Vec<u64> = (0..n as u64).filter(|i| i % 4 == 3).collect();
    for (q, s) in seen.iter().enumerate() {
        check!(
            *s == want,
            "QP {q}: signaled wr_ids {} of {} in order",
            s.len(),
            want.len()
        );
    }
    let [tx0, tx1] = halves;
    cq.qp_mut(qa[0]).join(tx0, rx0)?;
    drop((tx1, rx1));
    // Joined (and dropped, which parks them): the credits are back.
    check!(
        cq.qp_mut(qa[1]).post_send(&[]).is_ok(),
        "QP 1 takes its dropped halves back at its next post"
    );
    check_eq!(
        cq.credits_free(),
        free,
        "CQ credits after both QPs took their halves back"
    );
    passed(vec![format!(
        "{n} WRITEs from each of two send halves on two threads, one shared CQ polled here; the splits took 24 credits each and gave them back"
    )])
}

pub(super) fn split_refusals_and_join(dev: &str) -> CaseResult {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig::default();
    let mut a = pd.create_qp(&cfg)?;
    let mut b = pd.create_qp(&cfg)?;
    check!(
        matches!(
            a.split(),
            Err(Error::QpState {
                state: QpState::Reset,
                ..
            })
        ),
        "a QP in RESET was split"
    );
    Qp::connect_loopback(&mut a, &mut b)?;
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 64)?];
    let write = |id| SendWr::rdma_write(id, &sge, remote(&dst, 0)).signaled();
    let before = ring_snapshot(&a);
    let (tx, rx) = a.split()?;
    check!(a.is_split(), "is_split after split");
    check!(
        matches!(a.split(), Err(Error::QpSplit { .. })),
        "a split QP was split again"
    );
    check!(
        ring_snapshot(&a).is_none(),
        "a snapshot of a split QP's ring (its send half may be writing it)"
    );
    check!(
        matches!(a.post_send(&[write(1)]), Err(Error::QpSplit { .. })),
        "the split QP posted a send itself"
    );
    check!(
        matches!(
            a.post_write(&rdma_direct::WriteWr::new(2, sge[0], remote(&dst, 0))),
            Err(Error::QpSplit { .. })
        ),
        "the split QP posted a one-opcode WRITE itself"
    );
    let rsge = [Sge::new(&dst, 0, 8)?];
    check!(
        matches!(
            a.post_recv(&[RecvWr::new(3, &rsge)]),
            Err(Error::QpSplit { .. })
        ),
        "the split QP posted a receive itself"
    );
    check!(
        matches!(
            a.modify(QpState::Reset, &QpAttr::default()),
            Err(Error::QpSplit { .. })
        ),
        "a split QP was reset"
    );
    check_eq!(
        a.query()?.state,
        QpState::Rts,
        "the refused RESET changed the state"
    );
    a.join(tx, rx)?;
    check_eq!(
        ring_snapshot(&a),
        before,
        "the SQ ring and doorbell record after the refused posts (joined, the halves posted nothing)"
    );
    // A WR posted by the half, completed after the join.
    let (mut tx, rx) = a.split()?;
    tx.post_send(&[write(4)])?;
    let (b_tx, b_rx) = b.split()?;
    check!(
        matches!(a.join(b_tx, b_rx), Err(Error::NotTheHalves { .. })),
        "QP a took QP b's halves"
    );
    check!(
        b.is_split(),
        "b stays split until it takes its (dropped) halves back"
    );
    a.join(tx, rx)?;
    check!(!a.is_split(), "joined");
    check_eq!(
        poll_one(&mut a)?.wr_id,
        4,
        "the half's WRITE, polled after the join"
    );
    a.post_send(&[write(5)])?;
    check_eq!(poll_one(&mut a)?.wr_id, 5, "the joined QP's own WRITE");
    // b's halves were dropped by the refused join: its next post takes them back.
    b.post_send(&[SendWr::rdma_write(6, &sge, remote(&dst, 0)).signaled()])
        .map_err(|e| Failure(format!("b after its halves were dropped: {e}")))?;
    check_eq!(
        poll_one(&mut b)?.wr_id,
        6,
        "b's WRITE after its halves came back"
    );
    check!(!b.is_split(), "b took its halves back");
    // Split, post from the half, drop both halves, split again.
    let (mut tx, rx) = a.split()?;
    tx.post_send(&[write(7)])?;
    drop((tx, rx));
    let (mut tx, _rx) = a
        .split()
        .map_err(|e| Failure(format!("split after the halves were dropped: {e}")))?;
    tx.post_send(&[write(8)])?;
    let got: Vec<u64> = poll_until(&mut a, 2)?.iter().map(|c| c.wr_id).collect();
    check_eq!(got, vec![7, 8], "WRITEs of two successive send halves");
    passed(vec![
        "split before RTS, twice, the split QP's own posts and RESET refused; foreign halves refused; join and dropped halves give the queues back".into(),
    ])
}

pub(super) fn a_half_waits_for_room_until_the_owner_polls(dev: &str) -> CaseResult {
    let mut s = setup_with(
        dev,
        QpConfig {
            max_send_wr: 8,
            max_recv_wr: 8,
            ..QpConfig::default()
        },
    )?;
    let src = s.pd.alloc_mr(8, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.alloc_mr(8, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    let write = |k| SendWr::rdma_write(k, &sge, remote(&dst, 0)).signaled();
    let (mut tx, mut rx) = s.a.split()?;
    check!(
        matches!(
            super::async_waits::block_on(tx.room(9), Duration::from_secs(1), &mut 0),
            Some(Err(Error::NeverFits { wrs: 9, .. }))
        ),
        "room for more WRs than the queue holds was not refused"
    );
    let mut k = 0;
    while tx.post_send(&[write(k)]).is_ok() {
        k += 1;
        check!(k <= 8, "more than max_send_wr WRs posted");
    }
    check_eq!(k, 8, "WRs posted before the queue was full");
    // The half waits on another thread; this one, the CQ's owner, polls
    // once the half has found no room and gone to sleep: its poll wakes
    // the half, which then posts.
    let a = &mut s.a;
    let asleep = std::sync::atomic::AtomicBool::new(false);
    let (slept, polled) = std::thread::scope(|sc| -> Result<(u64, usize), Failure> {
        let asleep = &asleep;
        let waiter = sc.spawn(move || -> Result<u64, Failure> {
            let waker = std::task::Waker::from(std::sync::Arc::new(super::async_waits::Unpark(
                std::thread::current(),
            )));
            let mut cx = std::task::Context::from_waker(&waker);
            let deadline = Instant::now() + COMPLETION_TIMEOUT;
            let mut sleeps = 0;
            loop {
                match tx.poll_room(&mut cx, 1) {
                    std::task::Poll::Ready(r) => break r?,
                    std::task::Poll::Pending => {
                        check!(Instant::now() < deadline, "no room within the timeout");
                        sleeps += 1;
                        asleep.store(true, std::sync::atomic::Ordering::SeqCst);
                        std::thread::park_timeout(deadline - Instant::now());
                    }
                }
            }
            tx.post_send(&[write(100)])?;
            Ok(sleeps)
        });
        let t = Instant::now();
        while !asleep.load(std::sync::atomic::Ordering::SeqCst) {
            check!(
                t.elapsed() < COMPLETION_TIMEOUT,
                "the half never went to sleep"
            );
            std::thread::yield_now();
        }
        let got = poll_until(a, 8)?.len();
        let slept = waiter
            .join()
            .unwrap_or_else(|_| Err(Failure("the waiter panicked".into())))?;
        Ok((slept, got))
    })?;
    check!(
        slept > 0,
        "the half never slept: the case cannot tell a wakeup from a poll"
    );
    check_eq!(
        poll_one(&mut s.a)?.wr_id,
        100,
        "the WRITE posted once room came"
    );
    // The receive half waits likewise; then the owner goes, and the wait
    // ends with CqOwnerGone rather than never.
    let rsge = [Sge::new(&dst, 0, 8)?];
    let mut r = 0;
    while rx.post_recv(&[RecvWr::new(r, &rsge)]).is_ok() {
        r += 1;
        check!(r <= 8, "more than max_recv_wr receives posted");
    }
    let owner = std::mem::replace(&mut s.a, s.pd.create_qp(&QpConfig::default())?);
    let gone = std::thread::scope(|sc| {
        let waiter =
            sc.spawn(move || super::async_waits::block_on(rx.room(1), COMPLETION_TIMEOUT, &mut 0));
        std::thread::sleep(Duration::from_millis(50));
        drop(owner);
        waiter.join()
    });
    check!(
        matches!(gone, Ok(Some(Err(Error::CqOwnerGone { .. })))),
        "a receive half waiting for room when its QP went: {gone:?}"
    );
    passed(vec![format!(
        "a full send half slept ({slept} times) until the owner polled its {polled} completions, then posted; a waiting receive half learned its QP was gone"
    )])
}
