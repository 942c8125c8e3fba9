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
    let src = s.pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    let dst = s.pd.alloc_mr(4096, RW)?;
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
        SendWr::rdma_write(2, &small, remote(&dst, 1024)).imm(0xabcd),
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
                Err(Error::WrongTransport { .. })
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
    let src = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst = s.pd.alloc_mr(4096, RW)?;
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

/// The qkey the UD cases use (bit 31 clear: not a controlled qkey).
const QKEY: u32 = 0x1111_2222;

/// Two UD QPs of one PD, up (`ready_ud` with [`QKEY`]), and an AH from
/// `a` toward `b`'s port.
struct UdPair {
    _ctx: Context,
    pd: Pd,
    a: Qp,
    b: Qp,
    ah: rdma_direct::Ah,
}

fn ud_pair(dev: &str) -> Result<UdPair, Failure> {
    let ctx = Context::open(dev).map_err(|e| Failure(format!("open {dev}: {e}")))?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig {
        qp_type: QpType::Ud,
        max_send_wr: 32,
        max_recv_wr: 32,
        max_inline: 0,
        ..QpConfig::default()
    };
    let mut a = pd.create_qp(&cfg)?;
    let mut b = pd.create_qp(&cfg)?;
    a.ready_ud(QKEY)?;
    b.ready_ud(QKEY)?;
    let ah = pd.create_ah(&a.av_to(&b.endpoint()))?;
    Ok(UdPair {
        _ctx: ctx,
        pd,
        a,
        b,
        ah,
    })
}

/// Toward QP `remote_qpn` through `ah`, with `qkey`.
fn dest(ah: &rdma_direct::Ah, remote_qpn: u32, qkey: u32) -> rdma_direct::UdDest<'_> {
    rdma_direct::UdDest {
        ah,
        remote_qpn,
        qkey,
    }
}

/// A UD SEND of 1000 bytes into a receive of 1040 completes with byte_len
/// 1040 (the 40-byte GRH slot first), the payload at offset 40, and the
/// sender's QPN as the source; the sender's completion is a SEND.
pub(super) fn ud_send_lands_after_the_grh_slot(dev: &str) -> CaseResult {
    let mut u = ud_pair(dev)?;
    let src = u.pd.alloc_mr(1000, Access::LOCAL_WRITE)?;
    let dst = u.pd.alloc_mr(1040, Access::LOCAL_WRITE)?;
    src.write(0, &pattern(1000, 11))?;
    u.b.post_recv(&[RecvWr::new(5, &[Sge::new(&dst, 0, 1040)?])])?;
    let sge = [Sge::new(&src, 0, 1000)?];
    let w = SendWr::ud_send(1, &sge, dest(&u.ah, u.b.qp_num(), QKEY))
        .imm(0x77)
        .signaled();
    u.a.post_send(&[w])?;
    let s = poll_one(&mut u.a)?;
    check_eq!(
        (s.wr_id, s.status, s.opcode),
        (1, WcStatus::SUCCESS, WcOpcode::SEND),
        "the sender's"
    );
    let r = poll_one(&mut u.b)?;
    check_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len, r.imm),
        (5, WcStatus::SUCCESS, WcOpcode::RECV, 1040, Some(0x77)),
        "the receive"
    );
    check_eq!(r.src_qp.qpn(), u.a.qp_num(), "the source QPN");
    check!(r.src_qp.grh(), "a UD receive carries the GRH flag");
    check_eq!(
        &contents(&dst)?[40..],
        &pattern(1000, 11)[..],
        "the payload at offset 40"
    );
    passed(vec![format!("UD MTU {} bytes", u.a.ud_mtu())])
}

/// A UD SEND over the port's active MTU is refused at post with
/// `MessageTooLong`, nothing written; a wrong qkey and a missing receive
/// each lose the datagram while the sender succeeds.
pub(super) fn ud_drops_and_refusals(dev: &str) -> CaseResult {
    let mut u = ud_pair(dev)?;
    let mtu = u.a.ud_mtu();
    let src = u.pd.alloc_mr(mtu as usize + 1, Access::LOCAL_WRITE)?;
    let dst = u.pd.alloc_mr(mtu as usize + 64, Access::LOCAL_WRITE)?;
    let over = [Sge::new(&src, 0, mtu + 1)?];
    let before = ring_snapshot(&u.a);
    match u
        .a
        .post_send(&[SendWr::ud_send(1, &over, dest(&u.ah, u.b.qp_num(), QKEY)).signaled()])
    {
        Err(Error::MessageTooLong { len, mtu: m }) => {
            check_eq!((len, m), (mtu as u64 + 1, mtu), "the refusal's figures")
        }
        other => return Err(Failure(format!("a UD SEND of MTU + 1 bytes: {other:?}"))),
    }
    check_eq!(ring_snapshot(&u.a), before, "the SQ after the refusal");
    // Not a UD send, and an RC WR's fields, on a UD QP.
    let one = [Sge::new(&src, 0, 8)?];
    check!(
        matches!(
            u.a.post_send(&[SendWr::send(2, &one)]),
            Err(Error::WrongTransport { .. })
        ),
        "a plain SEND on a UD QP"
    );
    nothing_completes(&mut u.a)?;
    // No receive posted: dropped, the sender succeeds.
    u.a.post_send(&[SendWr::ud_send(3, &one, dest(&u.ah, u.b.qp_num(), QKEY)).signaled()])?;
    check!(
        poll_one(&mut u.a)?.status.is_ok(),
        "a datagram with no receive posted"
    );
    // The wrong qkey: dropped, though a receive waits.
    u.b.post_recv(&[RecvWr::new(9, &[Sge::new(&dst, 0, 64)?])])?;
    u.a.post_send(&[SendWr::ud_send(4, &one, dest(&u.ah, u.b.qp_num(), QKEY ^ 1)).signaled()])?;
    check!(
        poll_one(&mut u.a)?.status.is_ok(),
        "a datagram with the wrong qkey"
    );
    nothing_completes(&mut u.b)?;
    // The receive still waits for a datagram with the right qkey.
    u.a.post_send(&[SendWr::ud_send(5, &one, dest(&u.ah, u.b.qp_num(), QKEY)).signaled()])?;
    check!(poll_one(&mut u.a)?.status.is_ok(), "the right qkey");
    let r = poll_one(&mut u.b)?;
    check_eq!((r.wr_id, r.byte_len), (9, 48), "the receive that waited");
    // At the MTU exactly: sent.
    u.b.post_recv(&[RecvWr::new(10, &[Sge::new(&dst, 0, mtu + 40)?])])?;
    let at = [Sge::new(&src, 0, mtu)?];
    u.a.post_send(&[SendWr::ud_send(6, &at, dest(&u.ah, u.b.qp_num(), QKEY)).signaled()])?;
    check!(poll_one(&mut u.a)?.status.is_ok(), "a datagram of the MTU");
    check_eq!(poll_one(&mut u.b)?.byte_len, mtu + 40, "its receive");
    passed(vec![])
}

/// `Pd::create_ah_from_recv` (`ibv_create_ah_from_wc`): an AH from B's
/// receive of A's datagram sends B's reply to A's QP; port 0, a
/// completion that is not a receive, and one without the GRH flag are
/// refused with `Invalid`.
pub(super) fn an_ah_from_a_receive_answers_its_sender(dev: &str) -> CaseResult {
    let mut u = ud_pair(dev)?;
    let src = u.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let rb = u.pd.alloc_mr(104, Access::LOCAL_WRITE)?;
    let ra = u.pd.alloc_mr(104, Access::LOCAL_WRITE)?;
    src.write(0, &pattern(64, 9))?;
    u.b.post_recv(&[RecvWr::new(1, &[Sge::new(&rb, 0, 104)?])])?;
    u.a.post_recv(&[RecvWr::new(2, &[Sge::new(&ra, 0, 104)?])])?;
    let sge = [Sge::new(&src, 0, 64)?];
    u.a.post_send(&[SendWr::ud_send(3, &sge, dest(&u.ah, u.b.qp_num(), QKEY)).signaled()])?;
    check!(poll_one(&mut u.a)?.status.is_ok(), "A's SEND");
    let c = poll_one(&mut u.b)?;
    let mut grh = [0u8; 40];
    rb.read(0, &mut grh)?;
    let port = QpConfig::default().port;
    let invalid = |r: rdma_direct::Result<rdma_direct::Ah>| {
        matches!(r, Err(Error::Invalid(_) | Error::Config { .. }))
    };
    check!(invalid(u.pd.create_ah_from_recv(0, &c, &grh)), "port 0");
    let send = Completion {
        opcode: WcOpcode::SEND,
        ..c
    };
    check!(
        invalid(u.pd.create_ah_from_recv(port, &send, &grh)),
        "a SEND's completion"
    );
    let no_grh = Completion {
        src_qp: rdma_direct::SrcQp::new(c.src_qp.qpn(), false),
        ..c
    };
    check!(
        invalid(u.pd.create_ah_from_recv(port, &no_grh, &grh)),
        "no GRH"
    );
    let back = u.pd.create_ah_from_recv(port, &c, &grh)?;
    let reply = [Sge::new(&rb, 40, 64)?];
    u.b.post_send(&[SendWr::ud_send(4, &reply, dest(&back, c.src_qp.qpn(), QKEY)).signaled()])?;
    check!(poll_one(&mut u.b)?.status.is_ok(), "B's reply");
    let r = poll_one(&mut u.a)?;
    check_eq!(
        (r.wr_id, r.byte_len, r.src_qp.qpn()),
        (2, 104, u.b.qp_num()),
        "A's receive of the reply"
    );
    check_eq!(
        &contents(&ra)?[40..],
        &pattern(64, 9)[..],
        "the reply's payload"
    );
    passed(vec![])
}

/// A UD receive too small for the datagram: on the sim a local length
/// error, on rxe (Linux 6.1) a local QP operation error, and the QP in
/// ERR; newer kernels drop the datagram (no completion, the QP in RTS).
/// Either way the sender succeeds.
pub(super) fn ud_receive_too_small(dev: &str) -> CaseResult {
    let mut u = ud_pair(dev)?;
    let src = u.pd.alloc_mr(200, Access::LOCAL_WRITE)?;
    let dst = u.pd.alloc_mr(100, Access::LOCAL_WRITE)?;
    u.b.post_recv(&[RecvWr::new(1, &[Sge::new(&dst, 0, 100)?])])?;
    let sge = [Sge::new(&src, 0, 200)?];
    u.a.post_send(&[SendWr::ud_send(1, &sge, dest(&u.ah, u.b.qp_num(), QKEY)).signaled()])?;
    check!(poll_one(&mut u.a)?.status.is_ok(), "the sender");
    std::thread::sleep(Duration::from_millis(100));
    let mut wc = [Completion::default(); 2];
    let n = u.b.poll(&mut wc)?;
    let state = u.b.query()?.state;
    match (n, wc[0].status, state) {
        (1, WcStatus::LOC_LEN_ERR | WcStatus::LOC_QP_OP_ERR, QpState::Err) => {
            passed(vec![format!("{} and the QP in ERR", wc[0].status.ident())])
        }
        (0, _, QpState::Rts) => passed(vec!["dropped; the QP in RTS".into()]),
        _ => Err(Failure(format!(
            "a receive too small: {:?}, the QP in {state:?}",
            &wc[..n]
        ))),
    }
}

/// UD's state machine: RESET -> INIT needs QKEY (and refuses ACCESS_FLAGS),
/// INIT -> RTR takes no path (an AV is refused), RTR -> RTS needs SQ_PSN
/// alone; `connect_remote` and RC WRs are refused on a UD QP.
pub(super) fn ud_transitions_check_their_own_attributes(dev: &str) -> CaseResult {
    let ctx = Context::open(dev).map_err(|e| Failure(format!("open {dev}: {e}")))?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig {
        qp_type: QpType::Ud,
        ..QpConfig::default()
    };
    let mut q = pd.create_qp(&cfg)?;
    let other = pd.create_qp(&QpConfig::default())?;
    let names = |r: rdma_direct::Result<()>| match r {
        Err(Error::QpAttr { attr, .. }) => Some(attr),
        _ => None,
    };
    check_eq!(
        names(q.modify(QpState::Init, &QpAttr::init(cfg.port, RW))),
        Some("QKEY"),
        "RESET -> INIT with RC's attributes"
    );
    let with_access = QpAttr {
        access: Some(RW),
        ..QpAttr::init_ud(cfg.port, QKEY)
    };
    check_eq!(
        names(q.modify(QpState::Init, &with_access)),
        Some("ACCESS_FLAGS"),
        "RESET -> INIT with ACCESS_FLAGS"
    );
    check!(
        matches!(
            q.connect_remote(1, &other.endpoint(), 1),
            Err(Error::WrongTransport { .. })
        ),
        "connect_remote of a UD QP"
    );
    q.modify(QpState::Init, &QpAttr::init_ud(cfg.port, QKEY))?;
    let av = q.av_to(&other.endpoint());
    let with_av = QpAttr {
        av: Some(av),
        ..Default::default()
    };
    check_eq!(
        names(q.modify(QpState::Rtr, &with_av)),
        Some("AV"),
        "INIT -> RTR with an AV"
    );
    q.modify(QpState::Rtr, &QpAttr::default())?;
    q.modify(QpState::Rts, &QpAttr::rts_unreliable(0))?;
    check_eq!(q.query()?.state, QpState::Rts, "RTS");
    check!(
        matches!(q.ready_ud(QKEY), Err(Error::NotInReset { .. })),
        "ready_ud of a QP not in RESET"
    );
    drop(other);
    passed(vec![])
}
