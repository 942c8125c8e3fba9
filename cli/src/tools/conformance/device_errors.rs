//! Device errors only the sim's test hook can provoke (a correct program
//! never writes these WQEs or overruns a CQ): the device reports them as the
//! hardware does.

use super::*;
use rdma_direct::testing::QpHooks;

pub(super) const NEEDS_HOOK: &str =
    "needs the sim's test hook (raw WQE bytes or bypassed CQ credits); this device has none";

/// WQEs the driver never writes, put on the ring through the sim's test
/// hook: DS 0, another QP's number, the wrong WQE index, an unknown opcode.
/// Each completes with LOC_QP_OP_ERR (syndrome 0x02) carrying its wr_id,
/// moves the QP to ERR (the next WR is flushed) and touches no memory.
pub(super) fn malformed_wqes_are_local_qp_operation_errors(dev: &str) -> CaseResult {
    type Patch = fn(&mut [u8]);
    let patches: [(&str, Patch); 4] = [
        ("DS 0", |w| w[7] &= !0x3f),
        ("another QPN", |w| w[6] ^= 0x01),
        ("wrong WQE index", |w| w[2] ^= 0x01),
        ("unknown opcode 0x07", |w| w[3] = 0x07),
    ];
    for (what, patch) in patches {
        let mut s = setup(dev)?;
        let src = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
        let dst =
            s.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
        src.write(0, &[0x99; 64])?;
        let sge = [Sge::new(&src, 0, 64)?];
        let Some(mut hook) = s.a.sim_hook() else {
            return skipped(NEEDS_HOOK);
        };
        hook.post_patched(
            &SendWr::rdma_write(1, &sge, remote(&dst, 0)).signaled(),
            patch,
        )?;
        s.a.post_send(&[SendWr::rdma_write(2, &sge, remote(&dst, 0)).signaled()])?;
        let got = poll_until(&mut s.a, 2)?;
        let seen: Vec<_> = got.iter().map(|c| (c.wr_id, c.status)).collect();
        check_eq!(
            seen,
            vec![(1, WcStatus::LOC_QP_OP_ERR), (2, WcStatus::WR_FLUSH_ERR)],
            "{what}"
        );
        check!(
            contents(&dst)?.iter().all(|&b| b == 0),
            "{what}: memory written"
        );
        // A WQE the device cannot parse is the QP's catastrophic error too
        // (the sim raises IBV_EVENT_QP_FATAL); an unknown opcode parses.
        let fatal = what != "unknown opcode 0x07";
        let mut events = s._ctx.async_events();
        let mut sleeps = 0;
        let wait = if fatal {
            COMPLETION_TIMEOUT
        } else {
            Duration::from_millis(100)
        };
        let got =
            super::async_waits::block_on(events.next_event(), wait, &mut sleeps).transpose()?;
        let qp_num = s.a.qp_num();
        if fatal {
            check_eq!(
                got,
                Some(rdma_direct::AsyncEvent::QpFatal { qp_num }),
                "{what}: the async event"
            );
        } else {
            check_eq!(got, None, "{what}: an async event");
        }
    }
    passed(vec![
        "DS 0, another QPN, wrong WQE index (each a QP fatal async event, streamed), unknown opcode".into()
    ])
}

/// A fetch-and-add whose remote address is not 8-byte aligned (put on the
/// ring through the hook; the API refuses it): REM_INV_REQ_ERR (0x12), the
/// remote word unchanged.
pub(super) fn misaligned_atomic_is_a_remote_invalid_request(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let word =
        s.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_ATOMIC)?;
    let old = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    word.write(0, &[0x11; 64])?;
    let sge = [Sge::new(&old, 0, 8)?];
    let Some(mut hook) = s.a.sim_hook() else {
        return skipped(NEEDS_HOOK);
    };
    // The remote address segment follows the 16-byte ctrl segment: addr (8, BE), rkey, reserved.
    hook.post_patched(
        &SendWr::atomic_fetch_add(1, &sge, remote(&word, 8), 1).signaled(),
        |w| {
            let a = u64::from_be_bytes(w[16..24].try_into().unwrap()) + 4;
            w[16..24].copy_from_slice(&a.to_be_bytes());
        },
    )?;
    let c = poll_one(&mut s.a)?;
    check_eq!((c.wr_id, c.status), (1, WcStatus::REM_INV_REQ_ERR));
    check!(
        contents(&word)? == vec![0x11; 64],
        "the remote word changed"
    );
    check!(
        contents(&old)?.iter().all(|&b| b == 0),
        "an old value was returned"
    );
    passed(vec![])
}

/// With CQ credits bypassed (hook), six signaled WRs into a CQ of four that
/// nobody polls: four CQEs are written, the fifth finds its slot not
/// released, so the CQ stops, raises one CQ error event, and writes nothing
/// more. On a verbs device (rxe), a raw overflow of the QP's own CQ: the
/// device raises `CqError`, taken from the async event stream.
pub(super) fn cq_overrun_stops_the_cq_and_raises_an_event(dev: &str) -> CaseResult {
    let mut s = setup_with(
        dev,
        QpConfig {
            max_send_wr: 16,
            max_recv_wr: 0,
            cq_depth: Some(4),
            ..QpConfig::default()
        },
    )?;
    let src = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    let Some(mut hook) = s.a.sim_hook() else {
        return cq_overrun_on_verbs(s, &sge, &dst);
    };
    hook.ignore_cq_credits();
    let batch: Vec<SendWr> = (0..6)
        .map(|i| SendWr::rdma_write(i, &sge, remote(&dst, 0)).signaled())
        .collect();
    s.a.post_send(&batch)?;
    let deadline = Instant::now() + COMPLETION_TIMEOUT;
    loop {
        let (overrun, events) = s.a.sim_hook().map_or((false, 0), |h| h.cq_overrun());
        if overrun {
            check_eq!(events, 1, "CQ error events");
            break;
        }
        check!(
            Instant::now() < deadline,
            "no CQ overrun within {COMPLETION_TIMEOUT:?}"
        );
        std::thread::yield_now();
    }
    let got = poll_until(&mut s.a, 4)?;
    let ids: Vec<u64> = got.iter().map(|c| c.wr_id).collect();
    check_eq!(ids, vec![0, 1, 2, 3], "the CQEs that fit");
    nothing_completes(&mut s.a)?;
    let (_, events) = s.a.sim_hook().map_or((false, 0), |h| h.cq_overrun());
    check_eq!(events, 1, "CQ error events after polling");
    passed(vec![])
}

/// The verbs half of [`cq_overrun_stops_the_cq_and_raises_an_event`]: with
/// the QP's CQ credits bypassed ([`Qp::ignore_cq_credits`]), 16
/// signaled WRITEs into a CQ of 4 (the provider may round it up; rxe makes
/// 7) that nobody polls; the device raises `CqError` (`IBV_EVENT_CQ_ERR`).
fn cq_overrun_on_verbs(mut s: Setup, sge: &[Sge<'_>], dst: &Mr) -> CaseResult {
    if !s.a.ignore_cq_credits() {
        return skipped(
            "CQ credits cannot be bypassed on this device (ConnectX: the direct path's CQs ignore overrun)",
        );
    }
    let ctx = &s._ctx;
    // Events from before: not this case's.
    while ctx.get_async_event(Duration::ZERO)?.is_some() {}
    for i in 0..16 {
        let wr = SendWr::rdma_write(i, sge, remote(dst, 0)).signaled();
        // The device may refuse posts once the CQ is in error: enough went.
        if s.a.post_send(&[wr]).is_err() {
            check!(i > 8, "WRITE {i} refused before the CQ could overrun");
            break;
        }
    }
    let mut events = ctx.async_events();
    let mut sleeps = 0;
    loop {
        match super::async_waits::block_on(events.next_event(), COMPLETION_TIMEOUT, &mut sleeps) {
            None => {
                return Err(Failure(format!(
                    "no CqError within {COMPLETION_TIMEOUT:?} of overrunning the CQ"
                )))
            }
            Some(Err(e)) => return Err(e.into()),
            Some(Ok(rdma_direct::AsyncEvent::CqError { .. })) => break,
            // Another object's event (a port's, the QP's): not this check's.
            Some(Ok(_)) => {}
        }
    }
    passed(vec![
        "16 signaled WRITEs into the CQ with its credits bypassed: CqError from the async event stream"
            .into(),
    ])
}
