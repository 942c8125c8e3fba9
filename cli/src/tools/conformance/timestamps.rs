//! Completion timestamps (`QpConfig::completion_timestamps`): where the
//! device has them (the sim: nanoseconds since it was made; ConnectX:
//! device clock ticks, wired, not yet run on hardware; a verbs provider
//! that takes `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`), every successful
//! completion carries one, non-decreasing in completion order; where it
//! has not (rxe, the old verbs calls), QP creation refuses them with
//! `Error::Unsupported { feature: CompletionTimestamp }` and the case is
//! skipped with that reason.

use super::*;
use rdma_direct::Feature;

/// Eight signaled WRITEs, one post each, and four SENDs into posted
/// receives: every send and receive completion has a non-zero timestamp,
/// non-decreasing in the order polled on each CQ; a QP made without the
/// option reports 0.
pub(super) fn completion_timestamps_are_present_and_in_order(dev: &str) -> CaseResult {
    let ctx = Context::open(dev).map_err(|e| Failure(format!("open {dev}: {e}")))?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig {
        max_send_wr: 32,
        max_recv_wr: 16,
        completion_timestamps: true,
        ..QpConfig::default()
    };
    let (mut a, mut b) = match pd.create_connected_pair(&cfg) {
        Ok(p) => p,
        Err(
            e @ Error::Unsupported {
                feature: Feature::CompletionTimestamp,
                ..
            },
        ) => return skipped(format!("refused with a typed error: {e}")),
        Err(e) => return Err(e.into()),
    };
    let src = pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sg = [Sge::new(&src, 0, 8)?];
    for k in 0..8u64 {
        let to = RemoteAddr {
            addr: dst.addr() + k * 8,
            rkey: dst.rkey(),
        };
        a.post_send(&[SendWr::rdma_write(k, &sg, to).signaled()])?;
    }
    let mut sent = poll_until(&mut a, 8)?;
    let rsges: Vec<Sge> = (0..4)
        .map(|k| Sge::new(&dst, 1024 + k * 64, 64))
        .collect::<rdma_direct::Result<_>>()?;
    let recvs: Vec<RecvWr> = (0..4)
        .map(|k| RecvWr::new(100 + k as u64, std::slice::from_ref(&rsges[k])))
        .collect();
    b.post_recv(&recvs)?;
    for k in 0..4u64 {
        a.post_send(&[SendWr::send(10 + k, &sg).signaled()])?;
    }
    sent.extend(poll_until(&mut a, 4)?);
    let received = poll_until(&mut b, 4)?;
    for (what, got) in [("send", &sent), ("receive", &received)] {
        for c in got.iter() {
            check_eq!(c.status, WcStatus::SUCCESS, "{what} completion {c:?}");
            check!(
                c.timestamp != 0,
                "{what} completion without a timestamp: {c:?}"
            );
        }
        for w in got.windows(2) {
            check!(
                w[0].timestamp <= w[1].timestamp,
                "{what} timestamps go back: {:?} then {:?}",
                w[0],
                w[1]
            );
        }
    }
    let span = sent[sent.len() - 1].timestamp - sent[0].timestamp;
    // Without the option: 0.
    let (mut c, _d) = pd.create_connected_pair(&QpConfig::default())?;
    let to = RemoteAddr {
        addr: dst.addr(),
        rkey: dst.rkey(),
    };
    c.post_send(&[SendWr::rdma_write(1, &sg, to).signaled()])?;
    let plain = poll_until(&mut c, 1)?;
    check_eq!(
        plain[0].timestamp,
        0,
        "a CQ without timestamps: {:?}",
        plain[0]
    );
    passed(vec![format!(
        "12 send and 4 receive completions stamped; the sends span {span} device clock units"
    )])
}
