//! Flow: unsignaled streams, CQ credits, RNR retries and timers, and the
//! memory pool.

use super::*;

/// An endless stream of unsignaled WRs keeps flowing: auto-signal retires
/// them through CQEs the caller never sees.
pub(super) fn unsignaled_streams_never_fill_the_send_queue(dev: &str) -> CaseResult {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let (mut a, _b) = pd.create_connected_pair(&QpConfig {
        max_send_wr: 8,
        ..QpConfig::default()
    })?;
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut wc = [Completion::default(); 8];
    for i in 0..200u64 {
        loop {
            match a.post_send(&[SendWr::rdma_write(i, &sge, remote(&dst, 0))]) {
                Ok(()) => break,
                Err(Error::QueueFull | Error::CqFull) => {
                    let n = a.poll(&mut wc)?;
                    check_eq!(n, 0, "a hidden completion was reported: {:?}", &wc[..n]);
                    check!(Instant::now() < deadline, "the SQ stayed full at WR {i}");
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    passed(vec![])
}

/// A SEND that finds no receive posted is retried `rnr_retry` times, then
/// fails with RNR_RETRY_EXC_ERR (and flushes what follows); with
/// `rnr_retry` 7 it waits until a receive is posted, then lands.
pub(super) fn rnr_retry_finite_and_forever(dev: &str) -> CaseResult {
    let cfg = |rnr_retry| QpConfig {
        rnr_retry,
        ..QpConfig::default()
    };
    let mut s = setup_with(dev, cfg(1))?;
    let src = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let sge = [Sge::new(&src, 0, 64)?];
    s.a.post_send(&[
        SendWr::send(1, &sge).signaled(),
        SendWr::send(2, &sge).signaled(),
    ])?;
    let got = poll_until(&mut s.a, 2)?;
    let seen: Vec<_> = got.iter().map(|c| (c.wr_id, c.status)).collect();
    check_eq!(
        seen,
        vec![
            (1, WcStatus::RNR_RETRY_EXC_ERR),
            (2, WcStatus::WR_FLUSH_ERR)
        ],
        "rnr_retry 1 with no receive posted"
    );

    let mut s = setup_with(dev, cfg(7))?;
    let src = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let rbuf = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    src.write(0, &[0x3c; 64])?;
    let sge = [Sge::new(&src, 0, 64)?];
    s.a.post_send(&[SendWr::send(3, &sge).signaled()])?;
    // Longer than rnr_retry 6 at min_rnr_timer 12 (6 x 0.64 ms) would last.
    std::thread::sleep(Duration::from_millis(200));
    nothing_completes(&mut s.a)?;
    let rsge = [Sge::new(&rbuf, 0, 64)?];
    s.b.post_recv(&[RecvWr::new(4, &rsge)])?;
    let c = poll_one(&mut s.a)?;
    check_eq!(
        (c.status, c.wr_id),
        (WcStatus::SUCCESS, 3),
        "rnr_retry 7: SEND after the receive is posted"
    );
    let r = poll_one(&mut s.b)?;
    check_eq!((r.status, r.wr_id, r.byte_len), (WcStatus::SUCCESS, 4, 64));
    check!(contents(&rbuf)? == vec![0x3c; 64], "payload");
    passed(vec![])
}

/// CQ credits: with a CQ of depth d, at most d WRs (sends outstanding plus
/// receives posted) are held at once, since an error would flush each into
/// the CQ. The post that would exceed it is refused and writes nothing;
/// polling gives the room back.
pub(super) fn cq_credits_bound_what_is_outstanding(dev: &str) -> CaseResult {
    let mut s = setup_with(
        dev,
        QpConfig {
            max_send_wr: 64,
            max_recv_wr: 64,
            cq_depth: Some(4),
            ..QpConfig::default()
        },
    )?;
    let d = s.a.cq_depth() as usize;
    if d >= 64 {
        return skipped(format!(
            "asked for a CQ of 4, {dev} made it {d} deep, not less than the SQ"
        ));
    }
    let src = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    let wr = |id| SendWr::rdma_write(id, &sge, remote(&dst, 0));
    // d - 1 unsignaled, then one signaled: d outstanding.
    let mut batch: Vec<SendWr> = (0..d as u64 - 1).map(wr).collect();
    batch.push(wr(d as u64 - 1).signaled());
    s.a.post_send(&batch)?;
    let before = ring_snapshot(&s.a);
    let r = s.a.post_send(&[wr(100).signaled()]);
    check!(
        matches!(r, Err(Error::CqFull)),
        "WR {} of a CQ of {d} accepted: {r:?}",
        d + 1
    );
    check!(
        ring_snapshot(&s.a) == before,
        "the refused post changed the ring"
    );
    let c = poll_one(&mut s.a)?;
    check_eq!((c.status, c.wr_id), (WcStatus::SUCCESS, d as u64 - 1));
    // The CQE retired all d: d fit again.
    let batch: Vec<SendWr> = (200..200 + d as u64).map(|i| wr(i).signaled()).collect();
    s.a.post_send(&batch)?;
    let got = poll_until(&mut s.a, d)?;
    check!(got.iter().all(|c| c.status.is_ok()), "{got:?}");
    // Receives hold credits too.
    let rsge = [Sge::new(&dst, 0, 8)?];
    let recvs: Vec<RecvWr> = (0..d as u64).map(|i| RecvWr::new(i, &rsge)).collect();
    s.b.post_recv(&recvs)?;
    let r = s.b.post_recv(&[RecvWr::new(99, &rsge)]);
    check!(
        matches!(r, Err(Error::CqFull)),
        "receive {} of a CQ of {d} accepted: {r:?}",
        d + 1
    );
    let r =
        s.b.post_send(&[SendWr::rdma_write(98, &rsge, remote(&src, 0)).signaled()]);
    check!(
        matches!(r, Err(Error::CqFull)),
        "a send beside {d} receives accepted: {r:?}"
    );
    passed(vec![format!(
        "CQ of {d}: WR {} refused until a completion was polled",
        d + 1
    )])
}

/// A stream of unsignaled WRs through a CQ much smaller than the SQ keeps
/// flowing: a send that leaves at most half of the CQ's credits free is
/// signaled (a CQE the caller never sees), so credits always come back.
pub(super) fn unsignaled_streams_never_exhaust_cq_credits(dev: &str) -> CaseResult {
    let mut s = setup_with(
        dev,
        QpConfig {
            max_send_wr: 256,
            max_recv_wr: 2,
            cq_depth: Some(8),
            ..QpConfig::default()
        },
    )?;
    let src = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    // Two receives hold two of the credits the whole time.
    s.a.post_recv(&[RecvWr::new(1, &sge), RecvWr::new(2, &sge)])?;
    let deadline = Instant::now() + COMPLETION_TIMEOUT;
    let mut wc = [Completion::default(); 8];
    for i in 0..1000u64 {
        loop {
            match s
                .a
                .post_send(&[SendWr::rdma_write(i, &sge, remote(&dst, 0))])
            {
                Ok(()) => break,
                Err(Error::QueueFull | Error::CqFull) => {
                    let n = s.a.poll(&mut wc)?;
                    check_eq!(n, 0, "a hidden completion was reported: {:?}", &wc[..n]);
                    check!(
                        Instant::now() < deadline,
                        "stuck at WR {i}: no credits came back"
                    );
                    std::thread::yield_now();
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    // Receives: max_recv_wr is a hard limit.
    let r = s.a.post_recv(&[RecvWr::new(3, &sge)]);
    check!(
        matches!(r, Err(Error::RecvQueueFull)),
        "receive 3 of max_recv_wr 2: {r:?}"
    );
    passed(vec![format!(
        "1000 unsignaled WRs through a CQ of {}",
        s.a.cq_depth()
    )])
}

/// A receiver asking for `min_rnr_timer` 1 (0.01 ms) and a sender with
/// `rnr_retry` 1: a SEND with no receive posted ends RNR_RETRY_EXC_ERR
/// within a second. With `min_rnr_timer` 18 (5.12 ms) the one retry waits
/// at least that long first: the responder's timer is the one used.
pub(super) fn short_rnr_timer_fails_fast(dev: &str) -> CaseResult {
    let fast = rnr_exhaustion_time(dev, 1)?;
    check!(
        fast < Duration::from_secs(1),
        "min_rnr_timer 1: took {fast:?}"
    );
    let slow = rnr_exhaustion_time(dev, 18)?;
    check!(
        slow >= rdma_direct::qp_attr::rnr_timer(18),
        "min_rnr_timer 18 (5.12 ms): gave up after {slow:?}, before one timer ran out"
    );
    passed(vec![format!(
        "RNR_RETRY_EXC_ERR after {fast:?} with min_rnr_timer 1, {slow:?} with 18"
    )])
}

/// Connects a pair by hand with the receiver's `min_rnr_timer` = `timer`
/// and `rnr_retry` 1, sends with no receive posted, and returns how long the
/// RNR_RETRY_EXC_ERR took.
pub(super) fn rnr_exhaustion_time(dev: &str, timer: u8) -> Result<Duration, Failure> {
    use rdma_direct::{QpAttr, QpState};
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig::default();
    let mut a = pd.create_qp(&cfg)?;
    let mut b = pd.create_qp(&cfg)?;
    let (ea, eb) = (a.endpoint(), b.endpoint());
    for q in [&mut a, &mut b] {
        q.modify(QpState::Init, &QpAttr::init(1, Access::QP_ALL))?;
    }
    let mut rtr_b = b.rtr_attr(&ea, 1);
    rtr_b.min_rnr_timer = Some(timer);
    b.modify(QpState::Rtr, &rtr_b)?;
    a.modify(QpState::Rtr, &a.rtr_attr(&eb, 2))?;
    a.modify(QpState::Rts, &QpAttr::rts(1, 1))?;
    b.modify(QpState::Rts, &QpAttr::rts(2, 1))?;
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let sge = [Sge::new(&src, 0, 64)?];
    let t = Instant::now();
    a.post_send(&[SendWr::send(1, &sge).signaled()])?;
    let c = poll_one(&mut a)?;
    let took = t.elapsed();
    check_eq!(
        (c.wr_id, c.status),
        (1, WcStatus::RNR_RETRY_EXC_ERR),
        "min_rnr_timer {timer}"
    );
    Ok(took)
}

/// The memory pool: 1,000 allocate/free cycles register nothing after the
/// pool is built; a pool buffer works as a local SGE and as a remote
/// target; exhaustion is `PoolExhausted` and the pool serves again after a
/// buffer comes back.
pub(super) fn memory_pool_serves_without_registering(dev: &str) -> CaseResult {
    use rdma_direct::pool::{Pool, PoolConfig};
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let pool = Pool::new(
        &pd,
        &PoolConfig {
            buf_size: 4096,
            // Its buffers are WRITE targets too.
            access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            ..PoolConfig::default()
        },
    )?;
    check_eq!(pool.capacity(), 512);
    let regs = pd.registrations();
    for i in 0..1000 {
        let b = pool.alloc()?;
        b.write(0, &(i as u64).to_le_bytes())?;
    }
    check_eq!(pd.registrations(), regs, "allocations registered memory");
    // One buffer sends, another receives the WRITE.
    let (mut a, _b) = pd.create_connected_pair(&QpConfig::default())?;
    let (src, dst) = (pool.alloc()?, pool.alloc()?);
    let data = pattern(4096, 5);
    src.write(0, &data)?;
    dst.write(0, &[0; 4096])?;
    a.post_send(&[SendWr::rdma_write(1, &[src.sge(0, 4096)?], dst.remote(0)?).signaled()])?;
    check_eq!(poll_one(&mut a)?.status, WcStatus::SUCCESS);
    let mut got = vec![0; 4096];
    dst.read(0, &mut got)?;
    check!(got == data, "WRITE between two pool buffers");
    check!(
        matches!(src.sge(4000, 97), Err(Error::OutOfBounds { .. })),
        "an SGE leaving its pool buffer was accepted"
    );
    // Exhaustion, then a buffer back.
    let mut held = vec![src, dst];
    while let Ok(b) = pool.alloc() {
        held.push(b);
    }
    check_eq!(held.len(), 512);
    check!(
        matches!(pool.alloc(), Err(Error::PoolExhausted { buffers: 512 })),
        "a 513th buffer"
    );
    held.pop();
    check!(pool.alloc().is_ok(), "no buffer after one came back");
    check_eq!(pd.registrations(), regs);
    passed(vec![format!(
        "512 buffers of 4 KiB, {:?} pages",
        pool.pages()
    )])
}
