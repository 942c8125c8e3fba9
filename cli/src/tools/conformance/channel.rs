//! Many CQs on one completion channel (`Context::create_comp_channel`,
//! `Pd::create_shared_cq_on`): each event names its CQ by token, one event
//! per arm, taken blocking, awaited, and on another thread; a destroyed
//! CQ's waiting event goes with it; the refusals.

use super::async_waits::{block_on, Unpark};
use super::*;
use rdma_direct::CompChannel;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context as TaskContext, Waker};

/// Three shared CQs on one channel, each with one QP connected to a peer
/// with its own CQ.
struct OnChannel {
    cqs: Vec<SharedCq>,
    peers: Vec<Qp>,
}

const TOKENS: [u64; 3] = [7, 1 << 40, u64::MAX];

/// A signaled 8-byte WRITE from CQ `k`'s QP.
fn write_on(cq: &mut SharedCq, src: &Mr, dst: &Mr, wr_id: u64) -> Result<(), Failure> {
    let sge = [Sge::new(src, 0, 8)?];
    let to = remote(dst, (wr_id % 64) * 8);
    cq.qp_mut(0)
        .post_send(&[SendWr::rdma_write(wr_id, &sge, to).signaled()])?;
    Ok(())
}

/// The event the channel gives next, within the completion timeout.
fn next_token(ch: &CompChannel, what: &str) -> Result<u64, Failure> {
    ch.get_event(COMPLETION_TIMEOUT)?
        .ok_or_else(|| Failure(format!("{what}: no event within {COMPLETION_TIMEOUT:?}")))
}

pub(super) fn many_cqs_on_one_channel(dev: &str) -> CaseResult {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let mut ch = ctx.create_comp_channel()?;
    let cfg = QpConfig {
        max_send_wr: 16,
        max_recv_wr: 4,
        ..QpConfig::default()
    };
    let depth = CqSizing::new().qp(&cfg).depth()?;
    let mut on = OnChannel {
        cqs: Vec::new(),
        peers: Vec::new(),
    };
    for t in TOKENS {
        let mut cq = pd.create_shared_cq_on(depth, &ch, t)?;
        let i = cq.create_qp(&cfg)?;
        let mut p = pd.create_qp(&cfg)?;
        Qp::connect_loopback(cq.qp_mut(i), &mut p)?;
        check_eq!(cq.channel_token(), Some(t), "the CQ's token");
        on.cqs.push(cq);
        on.peers.push(p);
    }
    check_eq!(ch.cqs(), 3, "CQs on the channel");

    // Refusals: a token in use, another device's channel, the CQ's own waits.
    let refused = |r: Result<SharedCq, Error>, what: &str| match r {
        Err(Error::DuplicateToken { .. } | Error::ForeignPd { .. }) => Ok(()),
        Err(e) => Err(Failure(format!(
            "{what}: {e}, want DuplicateToken or ForeignPd"
        ))),
        Ok(_) => Err(Failure(format!(
            "{what}: made, want DuplicateToken or ForeignPd"
        ))),
    };
    refused(
        pd.create_shared_cq_on(depth, &ch, TOKENS[0]),
        "a token in use",
    )?;
    let other = Context::open(dev)?.create_comp_channel()?;
    refused(
        pd.create_shared_cq_on(depth, &other, 99),
        "another context's channel",
    )?;
    check_eq!(ch.cqs(), 3, "CQs on the channel after the refusals");
    let cq0 = &mut on.cqs[0];
    check!(
        matches!(
            cq0.wait_cq_event(Duration::ZERO),
            Err(Error::ChannelShared { .. })
        ),
        "wait_cq_event on a CQ of a shared channel is refused"
    );
    let mut wc = [Completion::default(); 4];
    check!(
        matches!(
            cq0.wait(&mut wc, CompletionMode::Events, Duration::ZERO),
            Err(Error::ChannelShared { .. })
        ),
        "an Events wait on a CQ of a shared channel is refused"
    );
    let mut sleeps = 0;
    let r = block_on(
        cq0.completions(CompletionMode::Events).next_batch(&mut wc),
        COMPLETION_TIMEOUT,
        &mut sleeps,
    );
    check!(
        matches!(r, Some(Err(Error::ChannelShared { .. }))),
        "an async wait on a CQ of a shared channel is refused: {r:?}"
    );
    check_eq!(
        cq0.wait(&mut wc, CompletionMode::Busy, Duration::ZERO)?,
        0,
        "a busy wait is allowed (and finds nothing)"
    );

    let src = pd.alloc_mr(8, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(64 * 8, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    // One event per armed CQ that completes, naming it.
    for cq in &mut on.cqs {
        cq.arm_cq(false)?;
    }
    check_eq!(
        ch.get_event(Duration::ZERO)?,
        None,
        "an event before any completion"
    );
    write_on(&mut on.cqs[1], &src, &dst, 1)?;
    check_eq!(next_token(&ch, "CQ 1")?, TOKENS[1], "the event's token");
    poll_until(&mut on.cqs[1], 1)?;
    write_on(&mut on.cqs[1], &src, &dst, 2)?;
    poll_until(&mut on.cqs[1], 1)?;
    check_eq!(
        ch.get_event(Duration::from_millis(50))?,
        None,
        "a second event without a second arm"
    );
    write_on(&mut on.cqs[0], &src, &dst, 3)?;
    write_on(&mut on.cqs[2], &src, &dst, 4)?;
    let mut two = [
        next_token(&ch, "CQs 0 and 2")?,
        next_token(&ch, "CQs 0 and 2")?,
    ];
    two.sort();
    check_eq!(two, [TOKENS[0], TOKENS[2]], "the two events' tokens");
    poll_until(&mut on.cqs[0], 1)?;
    poll_until(&mut on.cqs[2], 1)?;

    // Rounds across the CQs: arm, find nothing, complete, take the event
    // (blocking, awaited, then from a thread of its own), poll. Every
    // re-arm carries the count of the CQ's events taken.
    let rounds = 90u64;
    // The channel is `Send`: a clone waits on a thread of its own in the
    // last third.
    let (tx, rx) = std::sync::mpsc::channel::<Result<Option<u64>, Error>>();
    let mut waiter = None;
    for r in 0..rounds {
        let k = (r % 3) as usize;
        on.cqs[k].arm_cq(false)?;
        check_eq!(
            on.cqs[k].poll(&mut wc)?,
            0,
            "round {r}: a completion before the post"
        );
        let token = match r / 30 {
            0 => {
                write_on(&mut on.cqs[k], &src, &dst, 100 + r)?;
                next_token(&ch, "blocking")?
            }
            1 => {
                // Awaited from before the post: the first poll finds
                // nothing and sleeps (the sim's waker, or the reactor's
                // watch of the fd).
                let mut next = std::pin::pin!(ch.next_event());
                let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
                let first = next.as_mut().poll(&mut TaskContext::from_waker(&waker));
                check!(
                    first.is_pending(),
                    "round {r}: an event before the post: {first:?}"
                );
                write_on(&mut on.cqs[k], &src, &dst, 100 + r)?;
                match block_on(next, COMPLETION_TIMEOUT, &mut sleeps) {
                    Some(t) => t?,
                    None => return Err(Failure(format!("round {r}: nothing awaited"))),
                }
            }
            _ => {
                if waiter.is_none() {
                    let (waiter_ch, tx) = (ch.clone(), tx.clone());
                    waiter = Some(std::thread::spawn(move || {
                        for _ in 60..rounds {
                            let r = waiter_ch.get_event(COMPLETION_TIMEOUT);
                            let stop = !matches!(r, Ok(Some(_)));
                            if tx.send(r).is_err() || stop {
                                break;
                            }
                        }
                    }));
                }
                write_on(&mut on.cqs[k], &src, &dst, 100 + r)?;
                match rx.recv_timeout(COMPLETION_TIMEOUT * 2) {
                    Ok(Ok(Some(t))) => t,
                    Ok(Ok(None)) => return Err(Failure("the waiter thread: no event".into())),
                    Ok(Err(e)) => return Err(e.into()),
                    Err(e) => return Err(Failure(format!("the waiter thread: {e}"))),
                }
            }
        };
        check_eq!(token, TOKENS[k], "round {r}: the event's token");
        let w = poll_until(&mut on.cqs[k], 1)?[0];
        check_eq!(
            (w.wr_id, w.status),
            (100 + r, WcStatus::SUCCESS),
            "round {r}: the completion"
        );
    }
    if let Some(w) = waiter {
        w.join()
            .map_err(|_| Failure("the waiter thread panicked".into()))?;
    }

    // A destroyed CQ's event not yet taken goes with it, and its token is
    // free again.
    on.cqs[2].arm_cq(false)?;
    write_on(&mut on.cqs[2], &src, &dst, 500)?;
    poll_until(&mut on.cqs[2], 1)?;
    drop(on.cqs.pop());
    drop(on.peers.pop());
    check_eq!(ch.cqs(), 2, "CQs on the channel after one was dropped");
    check_eq!(
        ch.get_event(Duration::from_millis(100))?,
        None,
        "an event of a dropped CQ"
    );
    let again = pd.create_shared_cq_on(depth, &ch, TOKENS[2])?;
    check_eq!(
        again.channel_token(),
        Some(TOKENS[2]),
        "the token, made again"
    );
    Ok(Outcome::Passed(format!(
        "3 CQs, one channel: {rounds} rounds of arm, event, poll ({sleeps} async sleeps)"
    )))
}
