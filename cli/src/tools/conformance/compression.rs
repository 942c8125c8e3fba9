//! CQE compression (basic layout): where the device has it (the sim's
//! model), a session split across polls delivers every completion once
//! and in order (on ConnectX, a CQ made by `mlx5dv_create_cq`: not yet
//! run on hardware); where it has not (rxe, other verbs devices, a
//! ConnectX without `cqe_comp_caps`), QP creation refuses it with
//! `Error::Unsupported { feature: CqeCompression }` and the case is skipped
//! with that reason.

use super::*;
use rdma_direct::Feature;

/// Seven SENDs behind one doorbell complete as one session of receive
/// completions (the sim's model), polled 3 at a time: receives in posting
/// order, each once, with the right lengths; then twenty signaled WRITEs
/// as one requester session, every wr_id once and in order.
pub(super) fn cqe_compression_sessions_deliver_every_completion_once(dev: &str) -> CaseResult {
    let ctx = Context::open(dev).map_err(|e| Failure(format!("open {dev}: {e}")))?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig {
        max_send_wr: 32,
        max_recv_wr: 16,
        cqe_compression: true,
        ..QpConfig::default()
    };
    let (mut a, mut b) = match pd.create_connected_pair(&cfg) {
        Ok(p) => p,
        Err(
            e @ Error::Unsupported {
                feature: Feature::CqeCompression,
                ..
            },
        ) => return skipped(format!("refused with a typed error: {e}")),
        Err(e) => return Err(e.into()),
    };
    let src = pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let rsges: Vec<Sge> = (0..7)
        .map(|k| Sge::new(&dst, k * 256, 256))
        .collect::<rdma_direct::Result<_>>()?;
    let recvs: Vec<RecvWr> = (0..7)
        .map(|k| RecvWr::new(100 + k as u64, std::slice::from_ref(&rsges[k])))
        .collect();
    b.post_recv(&recvs)?;
    let ssges: Vec<[Sge; 1]> = (0..7u32)
        .map(|k| Ok([Sge::new(&src, 0, 10 + k)?]))
        .collect::<rdma_direct::Result<_>>()?;
    let sends: Vec<SendWr> = (0..7)
        .map(|k| SendWr::send(k as u64, &ssges[k]).signaled())
        .collect();
    let bytes0 = b.sim_hook().map(|h| h.cqe_bytes_written());
    a.post_send(&sends)?;
    poll_until(&mut a, 7)?;
    let mut got = Vec::new();
    let deadline = Instant::now() + COMPLETION_TIMEOUT;
    while got.len() < 7 {
        let mut wc = [Completion::default(); 3];
        let n = b.poll(&mut wc)?;
        got.extend(wc[..n].iter().map(|c| (c.wr_id, c.byte_len, c.status)));
        check!(Instant::now() < deadline, "{} of 7 receives", got.len());
    }
    let want: Vec<_> = (0..7u32)
        .map(|k| (100 + k as u64, 10 + k, WcStatus::SUCCESS))
        .collect();
    check_eq!(got, want, "receives of a session polled 3 at a time");
    let mut notes = Vec::new();
    if let (Some(b0), Some(h)) = (bytes0, b.sim_hook()) {
        let bytes = h.cqe_bytes_written() - b0;
        check_eq!(
            bytes,
            128,
            "CQE bytes for the 7 receives (a title and one array)"
        );
        notes.push(format!("7 receive completions in {bytes} CQE bytes"));
    }
    let wsge = [Sge::new(&src, 0, 8)?];
    let writes: Vec<SendWr> = (0..20u64)
        .map(|i| SendWr::rdma_write(1000 + i, &wsge, remote(&dst, 2048)).signaled())
        .collect();
    a.post_send(&writes)?;
    let ids: Vec<u64> = poll_until(&mut a, 20)?.iter().map(|c| c.wr_id).collect();
    check_eq!(ids, (1000..1020).collect::<Vec<_>>(), "WRITE completions");
    let mut wc = [Completion::default(); 4];
    check_eq!(a.poll(&mut wc)?, 0, "completions after the last");
    check_eq!(b.poll(&mut wc)?, 0, "receives after the last");
    passed(notes)
}
