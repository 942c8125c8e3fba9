//! UC and UD: what each transport carries, what it drops, what it refuses
//! at post, and its own state machine.

use super::*;
use rdma_direct::QpType;

const RW: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);

fn uc_setup(dev: &str) -> Result<Setup, Failure> {
    setup_with(
        dev,
        QpConfig {
            qp_type: QpType::Uc,
            max_send_wr: 64,
            ..QpConfig::default()
        },
    )
}

/// On UC, WRITE, WRITE_WITH_IMM and SEND land; READ and the atomics are
/// refused at post, with nothing written.
pub(super) fn uc_write_lands_and_read_is_refused(dev: &str) -> CaseResult {
    let mut s = uc_setup(dev)?;
    let src = s.pd.reg_mr(4096, Access::LOCAL_WRITE)?;
    let dst = s.pd.reg_mr(4096, RW)?;
    src.write(0, &pattern(4096, 5))?;
    let sge = [Sge::new(&src, 0, 1000)?];
    s.a.post_send(&[SendWr::rdma_write(1, &sge, remote(&dst, 0)).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (1, WcStatus::SUCCESS, WcOpcode::RDMA_WRITE),
        "the UC WRITE"
    );
    check_eq!(
        &contents(&dst)?[..1000],
        &pattern(4096, 5)[..1000],
        "its bytes"
    );
    let rbuf = [Sge::new(&dst, 2048, 64)?];
    s.b.post_recv(&[RecvWr::new(20, &rbuf), RecvWr::new(21, &rbuf)])?;
    let small = [Sge::new(&src, 0, 64)?];
    s.a.post_send(&[
        SendWr::rdma_write_with_imm(2, &small, remote(&dst, 1024), 0xabcd),
        SendWr::send(3, &small).signaled(),
    ])?;
    let got = poll_until(&mut s.b, 2)?;
    check_eq!(
        (got[0].wr_id, got[0].opcode, got[0].imm),
        (20, WcOpcode::RECV_RDMA_WITH_IMM, Some(0xabcd)),
        "WRITE_WITH_IMM's receive"
    );
    check_eq!(
        (got[1].wr_id, got[1].opcode, got[1].byte_len),
        (21, WcOpcode::RECV, 64),
        "the SEND's receive"
    );
    check!(poll_one(&mut s.a)?.status.is_ok(), "the SEND");
    let before = ring_snapshot(&s.a);
    let tgt = [Sge::new(&src, 0, 8)?];
    let refused = [
        SendWr::rdma_read(4, &tgt, remote(&dst, 0)).signaled(),
        SendWr::atomic_fetch_add(5, &tgt, remote(&dst, 0), 1).signaled(),
        SendWr::atomic_cmp_swp(6, &tgt, remote(&dst, 0), 0, 1).signaled(),
    ];
    for w in &refused {
        check!(
            matches!(
                s.a.post_send(std::slice::from_ref(w)),
                Err(Error::Invalid(_))
            ),
            "{:?} on a UC QP",
            w.op
        );
    }
    check_eq!(ring_snapshot(&s.a), before, "the SQ after the refusals");
    nothing_completes(&mut s.a)?;
    passed(vec![])
}

/// UC has no RNR and no NAK: a SEND with no receive posted, and a WRITE
/// with a bad rkey, complete successfully at the requester; nothing lands
/// and the responder stays in RTS, taking the next SEND.
pub(super) fn uc_drops_what_the_responder_cannot_take(dev: &str) -> CaseResult {
    let mut s = uc_setup(dev)?;
    let src = s.pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let dst = s.pd.reg_mr(4096, RW)?;
    src.write(0, &[7; 64])?;
    let sge = [Sge::new(&src, 0, 64)?];
    s.a.post_send(&[SendWr::send(1, &sge).signaled()])?;
    check!(
        poll_one(&mut s.a)?.status.is_ok(),
        "a SEND with no receive posted"
    );
    let bad = RemoteAddr {
        addr: dst.addr(),
        rkey: Rkey(dst.rkey().0 ^ 0x100),
    };
    s.a.post_send(&[SendWr::rdma_write(2, &sge, bad).signaled()])?;
    check!(
        poll_one(&mut s.a)?.status.is_ok(),
        "a WRITE with a bad rkey"
    );
    nothing_completes(&mut s.b)?;
    check!(contents(&dst)?.iter().all(|&b| b == 0), "nothing landed");
    check_eq!(s.b.query()?.state, QpState::Rts, "the responder's state");
    let rbuf = [Sge::new(&dst, 0, 64)?];
    s.b.post_recv(&[RecvWr::new(9, &rbuf)])?;
    s.a.post_send(&[SendWr::send(3, &sge).signaled()])?;
    check!(poll_one(&mut s.a)?.status.is_ok(), "the next SEND");
    let wc = poll_one(&mut s.b)?;
    check_eq!((wc.wr_id, wc.byte_len), (9, 64), "its receive");
    check_eq!(&contents(&dst)?[..64], &[7u8; 64][..], "its bytes");
    passed(vec![])
}

/// UC's own attribute masks: INIT -> RTR needs AV, PATH_MTU, DEST_QPN and
/// RQ_PSN and refuses RC's MAX_DEST_RD_ATOMIC and MIN_RNR_TIMER; RTR ->
/// RTS needs SQ_PSN and refuses TIMEOUT; each refusal names the
/// attribute and changes nothing.
pub(super) fn uc_transitions_check_their_own_attributes(dev: &str) -> CaseResult {
    let ctx = Context::open(dev).map_err(|e| Failure(format!("open {dev}: {e}")))?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig {
        qp_type: QpType::Uc,
        ..QpConfig::default()
    };
    let mut a = pd.create_qp(&cfg)?;
    let b = pd.create_qp(&cfg)?;
    let names = |r: rdma_direct::Result<()>| match r {
        Err(Error::QpAttr { attr, .. }) => Some(attr),
        _ => None,
    };
    let init = QpAttr::init(cfg.port, RW);
    a.modify(QpState::Init, &init)?;
    let rc_rtr = a.rtr_attr(&b.endpoint(), 0);
    check_eq!(rc_rtr.max_dest_rd_atomic, None, "rtr_attr of a UC QP");
    let with_rd = QpAttr {
        max_dest_rd_atomic: Some(1),
        ..rc_rtr
    };
    check_eq!(
        names(a.modify(QpState::Rtr, &with_rd)),
        Some("MAX_DEST_RD_ATOMIC"),
        "INIT -> RTR with an RC attribute"
    );
    let with_rnr = QpAttr {
        min_rnr_timer: Some(12),
        ..rc_rtr
    };
    check_eq!(
        names(a.modify(QpState::Rtr, &with_rnr)),
        Some("MIN_RNR_TIMER"),
        "INIT -> RTR with the RNR timer"
    );
    let no_psn = QpAttr {
        rq_psn: None,
        ..rc_rtr
    };
    check_eq!(
        names(a.modify(QpState::Rtr, &no_psn)),
        Some("RQ_PSN"),
        "INIT -> RTR without RQ_PSN"
    );
    check_eq!(a.query()?.state, QpState::Init, "after the refusals");
    a.modify(QpState::Rtr, &rc_rtr)?;
    check_eq!(
        names(a.modify(QpState::Rts, &QpAttr::rts(0, 7))),
        Some("TIMEOUT"),
        "RTR -> RTS with RC's attributes"
    );
    a.modify(QpState::Rts, &QpAttr::rts_unreliable(0))?;
    check_eq!(a.query()?.state, QpState::Rts, "RTS");
    drop(b);
    passed(vec![])
}
