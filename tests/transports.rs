//! The unreliable transports on the sim, through the public API: UD
//! destinations, sends on the wrong QP type, the MTU boundary, undeliverable
//! datagrams, posts outside RTS, receives too small, controlled qkeys and
//! modifies with the wrong attributes (UD and UC); UC's refused READs and
//! atomics, and its dropped SENDs and bad-rkey WRITEs.

use rdma_direct::*;

#[path = "support/posts.rs"]
mod support;
use support::*;
#[path = "support/transports.rs"]
mod transports;
use transports::*;

// ---------------------------------------------------------------- UD

/// An AH of another PD, a remote QPN over 24 bits, an RC WR on a UD QP
/// (every post API), a UD op without its destination: each refused with
/// Invalid, nothing written.
#[test]
fn ud_bad_destinations_refused_nothing_written() {
    let e = env();
    let (mut a, b, ah) = ud_pair(&e.pd);
    let pd2 = e.ctx.alloc_pd().unwrap();
    let ah2 = pd2.create_ah(&a.av_to(&b.endpoint())).unwrap();
    let s = [Sge::new(&e.src, 0, 64).unwrap()];
    let inv = |e: Error, what: &str| {
        assert!(
            matches!(
                e,
                Error::ForeignPd { .. } | Error::Config { .. } | Error::WrongTransport { .. }
            ),
            "{what}: {e:?}"
        )
    };
    for signaled in [false, true] {
        fn sig_(w: SendWr<'_>, s: bool) -> SendWr<'_> {
            if s {
                w.signaled()
            } else {
                w
            }
        }
        let sig = |w| sig_(w, signaled);
        let w = sig(SendWr::ud_send(1, &s, dest(&ah2, b.qp_num())));
        inv(
            refused_by(&mut a, |q| q.post_send(&[w])),
            "AH of another PD",
        );
        let w = sig(SendWr::ud_send(1, &s, dest(&ah, 0x100_0000 | b.qp_num())));
        inv(refused_by(&mut a, |q| q.post_send(&[w])), "QPN > 24 bits");
        let w = sig(SendWr::ud_send(1, &s, dest(&ah, u32::MAX)).imm(3));
        inv(refused_by(&mut a, |q| q.post_send(&[w])), "QPN u32::MAX");
        // Batches: a good one first, the bad one second: nothing posted.
        let good = sig(SendWr::ud_send(1, &s, dest(&ah, b.qp_num())));
        let bad = sig(SendWr::ud_send(2, &s, dest(&ah2, b.qp_num())));
        inv(
            refused_by(&mut a, |q| q.post_send(&[good, bad])),
            "batch, AH of another PD",
        );
        // RC WRs on a UD QP.
        let r = to(&e.dst, 0);
        for w in [
            SendWr::send(3, &s),
            SendWr::send(3, &s).imm(9),
            SendWr::rdma_write(3, &s, r),
            SendWr::rdma_write(3, &s, r).imm(1),
            SendWr::rdma_read(3, &s, r),
        ] {
            let w = sig(w);
            inv(
                refused_by(&mut a, |q| q.post_send(&[w])),
                &format!("{:?} on UD", w.op),
            );
            inv(
                refused_by(&mut a, |q| q.post_send(&[good, w])),
                "batch with an RC WR",
            );
            let wi = w.inline();
            inv(
                refused_by(&mut a, |q| q.post_send(&[wi])),
                "inline RC WR on UD",
            );
        }
        // A SEND (which names no destination) on a UD QP. (A UD send
        // without its destination cannot be built: `WrOp::UdSend`'s
        // compile_fail doctest.)
        let w = sig(SendWr::send(4, &s));
        inv(refused_by(&mut a, |q| q.post_send(&[w])), "Send op on UD");
    }
    let sg = Sge::new(&e.src, 0, 8).unwrap();
    let ww = WriteWr::new(5, sg, to(&e.dst, 0));
    inv(
        refused_by(&mut a, |q| q.post_write(&ww)),
        "post_write on UD",
    );
    inv(
        refused_by(&mut a, |q| q.post_write(&ww.signaled())),
        "post_write signaled on UD",
    );
    inv(
        refused_by(&mut a, |q| q.post_writes(&[ww, ww])),
        "post_writes on UD",
    );
    inv(
        refused_by(&mut a, |q| {
            q.post_write_inline(6, b"abc", to(&e.dst, 0), SendFlags::SIGNALED)
        }),
        "post_write_inline on UD",
    );
    // Nothing went out: no completion at all.
    assert!(drain(&mut a).is_empty());
}

/// A UD send on an RC QP and on a UC QP: Invalid, nothing written.
#[test]
fn ud_send_on_rc_and_uc_refused() {
    let e = env();
    let (_x, y, ah) = ud_pair(&e.pd);
    let s = [Sge::new(&e.src, 0, 64).unwrap()];
    for cfg in [QpConfig::default(), uc_cfg()] {
        let mut a = e.pd.create_qp(&cfg).unwrap();
        let mut b = e.pd.create_qp(&cfg).unwrap();
        Qp::connect_loopback(&mut a, &mut b).unwrap();
        for w in [
            SendWr::ud_send(1, &s, dest(&ah, y.qp_num())),
            SendWr::ud_send(1, &s, dest(&ah, y.qp_num()))
                .imm(5)
                .signaled(),
            SendWr::ud_send(1, &s, dest(&ah, y.qp_num())).inline(),
        ] {
            let err = refused_by(&mut a, |q| q.post_send(&[w]));
            assert!(
                matches!(err, Error::WrongTransport { .. }),
                "{:?}: {err:?}",
                cfg.qp_type
            );
            let ok = SendWr::rdma_write(2, &s, to(&e.dst, 0));
            let err = refused_by(&mut a, |q| q.post_send(&[ok, w]));
            assert!(
                matches!(err, Error::WrongTransport { .. }),
                "{:?}: {err:?}",
                cfg.qp_type
            );
        }
        assert!(drain(&mut a).is_empty());
        // ready_ud is for UD QPs.
        let mut c = e.pd.create_qp(&cfg).unwrap();
        assert!(matches!(
            c.ready_ud(QKEY),
            Err(Error::WrongTransport { .. })
        ));
        assert_eq!(c.state(), QpState::Reset);
    }
}

/// The MTU boundary: 4096 bytes (one SGE, several SGEs) go and land after
/// the GRH slot; 4097 is MessageTooLong (one SGE, several SGEs, with imm),
/// nothing written; inline sends over max_inline are refused.
#[test]
fn ud_mtu_boundary() {
    let e = env();
    let cfg = QpConfig {
        max_send_sge: 4,
        max_inline: 512,
        ..ud_cfg()
    };
    let (mut a, mut b) = (e.pd.create_qp(&cfg).unwrap(), e.pd.create_qp(&cfg).unwrap());
    a.ready_ud(QKEY).unwrap();
    b.ready_ud(QKEY).unwrap();
    let ah = e.pd.create_ah(&a.av_to(&b.endpoint())).unwrap();
    let mtu = a.ud_mtu();
    assert_eq!(mtu, 4096);
    let pat: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
    e.src.write(0, &pat).unwrap();
    let d = dest(&ah, b.qp_num());
    let one = [Sge::new(&e.src, 0, mtu).unwrap()];
    let over = [Sge::new(&e.src, 0, mtu + 1).unwrap()];
    let split = [
        Sge::new(&e.src, 0, 1000).unwrap(),
        Sge::new(&e.src, 1000, 0).unwrap(),
        Sge::new(&e.src, 1000, 3096).unwrap(),
    ];
    let split_over = [
        Sge::new(&e.src, 0, 1000).unwrap(),
        Sge::new(&e.src, 1000, 3097).unwrap(),
    ];
    for (sg, imm) in [
        (&over[..], None),
        (&split_over[..], Some(7)),
        (&over[..], Some(1)),
    ] {
        for sig in [false, true] {
            let mut w = SendWr::ud_send(9, sg, d);
            if let Some(imm) = imm {
                w = w.imm(imm);
            }
            if sig {
                w = w.signaled();
            }
            let err = refused_by(&mut a, |q| q.post_send(&[w]));
            assert!(
                matches!(
                    err,
                    Error::MessageTooLong {
                        len: 4097,
                        mtu: 4096
                    }
                ),
                "{err:?}"
            );
        }
    }
    // Inline: the QP's max_inline (512) bounds it first.
    let big = vec![1u8; 513];
    let bs = [Sge::bytes(&big).unwrap()];
    let err = refused_by(&mut a, |q| {
        q.post_send(&[SendWr::ud_send(9, &bs, d).inline()])
    });
    assert!(
        matches!(err, Error::InlineTooLong { len: 513, max: 512 }),
        "{err:?}"
    );
    let huge = vec![1u8; 5000];
    let hs = [Sge::bytes(&huge).unwrap()];
    let err = refused_by(&mut a, |q| {
        q.post_send(&[SendWr::ud_send(9, &hs, d).inline()])
    });
    assert!(
        matches!(
            err,
            Error::MessageTooLong { .. } | Error::InlineTooLong { .. }
        ),
        "{err:?}"
    );
    // Exactly the MTU goes, both ways; an inline of 512 too.
    let rbuf = e.pd.alloc_mr(3 * 8192, Access::LOCAL_WRITE).unwrap();
    let rs: Vec<[Sge; 1]> = (0..3)
        .map(|k| [Sge::new(&rbuf, k * 8192, 40 + mtu).unwrap()])
        .collect();
    let rws: Vec<RecvWr> = rs
        .iter()
        .enumerate()
        .map(|(k, s)| RecvWr::new(100 + k as u64, s))
        .collect();
    b.post_recv(&rws).unwrap();
    let inl = [Sge::bytes(&pat[..512]).unwrap()];
    a.post_send(&[
        SendWr::ud_send(1, &one, d).signaled(),
        SendWr::ud_send(2, &split, d).imm(0xabcd).signaled(),
        SendWr::ud_send(3, &inl, d).inline().signaled(),
    ])
    .unwrap();
    let sent = poll_n(&mut a, 3);
    assert_eq!(
        sent.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert!(sent.iter().all(|c| c.status == WcStatus::SUCCESS));
    let got = poll_n(&mut b, 3);
    for (k, c) in got.iter().enumerate() {
        assert_eq!(c.status, WcStatus::SUCCESS, "{c:?}");
        assert_eq!(c.wr_id, 100 + k as u64);
        assert_eq!(c.src_qp.qpn(), a.qp_num());
        assert!(c.src_qp.grh());
        assert_eq!(c.qp_num, b.qp_num());
    }
    assert_eq!(got[0].byte_len, 40 + 4096);
    assert_eq!(got[1].byte_len, 40 + 4096);
    assert_eq!(got[1].imm, Some(0xabcd));
    assert_eq!(got[2].byte_len, 40 + 512);
    let mut buf = vec![0u8; 4096];
    for k in 0..2 {
        rbuf.read(k * 8192 + 40, &mut buf).unwrap();
        assert!(buf == pat[..4096], "message {k} payload");
    }
    rbuf.read(2 * 8192 + 40, &mut buf[..512]).unwrap();
    assert!(buf[..512] == pat[..512]);
    assert!(drain(&mut a).is_empty() && drain(&mut b).is_empty());
}

/// A datagram to a QP in RESET, INIT, ERR, of another type, to no QP, with
/// the wrong qkey, or to a QP with no receive: the sender completes
/// successfully, nothing lands, the receiver's posted receive stays and
/// takes the next good datagram.
#[test]
fn ud_undeliverable_dropped_sender_succeeds() {
    let e = env();
    let (mut a, mut b, ah) = ud_pair(&e.pd);
    let s = [Sge::new(&e.src, 0, 32).unwrap()];
    e.src.write(0, &[0x5a; 32]).unwrap();
    let reset = e.pd.create_qp(&ud_cfg()).unwrap();
    let mut init = e.pd.create_qp(&ud_cfg()).unwrap();
    init.modify(QpState::Init, &QpAttr::init_ud(1, QKEY))
        .unwrap();
    let mut err = e.pd.create_qp(&ud_cfg()).unwrap();
    err.ready_ud(QKEY).unwrap();
    err.modify(QpState::Err, &QpAttr::default()).unwrap();
    let (rc, _rc2) = e.pd.create_connected_pair(&QpConfig::default()).unwrap();
    let (uc, _uc2) = {
        let mut x = e.pd.create_qp(&uc_cfg()).unwrap();
        let mut y = e.pd.create_qp(&uc_cfg()).unwrap();
        Qp::connect_loopback(&mut x, &mut y).unwrap();
        (x, y)
    };
    let rb = e.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    // No receive posted on b yet: dropped.
    a.post_send(&[SendWr::ud_send(1, &s, dest(&ah, b.qp_num())).signaled()])
        .unwrap();
    let c = poll_n(&mut a, 1);
    assert_eq!((c[0].wr_id, c[0].status), (1, WcStatus::SUCCESS));
    let rsg = [Sge::new(&rb, 0, 4096).unwrap()];
    b.post_recv(&[RecvWr::new(77, &rsg)]).unwrap();
    let targets = [
        (reset.qp_num(), QKEY),
        (init.qp_num(), QKEY),
        (err.qp_num(), QKEY),
        (rc.qp_num(), QKEY),
        (uc.qp_num(), QKEY),
        (0xff_ffff, QKEY),
        (0, QKEY),
        (b.qp_num(), QKEY + 1),
        (b.qp_num(), 0),
    ];
    for (i, (qpn, qkey)) in targets.iter().enumerate() {
        let d = UdDest {
            ah: &ah,
            remote_qpn: *qpn,
            qkey: *qkey,
        };
        a.post_send(&[SendWr::ud_send(10 + i as u64, &s, d).signaled()])
            .unwrap();
    }
    let c = poll_n(&mut a, targets.len());
    for (i, c) in c.iter().enumerate() {
        assert_eq!(
            (c.wr_id, c.status),
            (10 + i as u64, WcStatus::SUCCESS),
            "{c:?}"
        );
    }
    assert!(drain(&mut b).is_empty(), "nothing for b");
    let mut got = [0u8; 72];
    rb.read(0, &mut got).unwrap();
    assert!(got.iter().all(|&x| x == 0), "nothing landed");
    // The receive is still there for the next good one.
    a.post_send(&[SendWr::ud_send(50, &s, dest(&ah, b.qp_num())).signaled()])
        .unwrap();
    assert_eq!(poll_n(&mut a, 1)[0].wr_id, 50);
    let c = poll_n(&mut b, 1);
    assert_eq!(
        (c[0].wr_id, c[0].byte_len, c[0].status),
        (77, 72, WcStatus::SUCCESS)
    );
    rb.read(0, &mut got).unwrap();
    assert!(got[40..].iter().all(|&x| x == 0x5a));
    for q in [&reset, &init, &err] {
        let _ = q.query().unwrap();
    }
}

/// A UD post on a QP in RESET, INIT or RTR: QpState, nothing written.
#[test]
fn ud_post_outside_rts_refused() {
    let e = env();
    let (_x, y, ah) = ud_pair(&e.pd);
    let s = [Sge::new(&e.src, 0, 32).unwrap()];
    let w = SendWr::ud_send(1, &s, dest(&ah, y.qp_num())).signaled();
    let mut q = e.pd.create_qp(&ud_cfg()).unwrap();
    let err = refused_by(&mut q, |q| q.post_send(&[w]));
    assert!(matches!(err, Error::QpState { .. }), "{err:?}");
    q.modify(QpState::Init, &QpAttr::init_ud(1, QKEY)).unwrap();
    let err = refused_by(&mut q, |q| q.post_send(&[w]));
    assert!(matches!(err, Error::QpState { .. }), "{err:?}");
    q.modify(QpState::Rtr, &QpAttr::default()).unwrap();
    let err = refused_by(&mut q, |q| q.post_send(&[w]));
    assert!(matches!(err, Error::QpState { .. }), "{err:?}");
    q.modify(QpState::Rts, &QpAttr::rts_unreliable(0)).unwrap();
    q.post_send(&[w]).unwrap();
    assert_eq!(poll_n(&mut q, 1)[0].wr_id, 1);
    // Back to RESET: refused again, then ready_ud again works.
    q.modify(QpState::Reset, &QpAttr::default()).unwrap();
    let err = refused_by(&mut q, |q| q.post_send(&[w]));
    assert!(matches!(err, Error::QpState { .. }), "{err:?}");
    q.ready_ud(QKEY).unwrap();
    q.post_send(&[w]).unwrap();
    assert_eq!(poll_n(&mut q, 1)[0].wr_id, 1);
    // ready_ud on a QP not in RESET: Invalid, state unchanged.
    assert!(matches!(q.ready_ud(QKEY), Err(Error::NotInReset { .. })));
    assert_eq!(q.state(), QpState::Rts);
}

/// A UD receive too small for GRH + payload: a local length error, then
/// the QP's other receives are flushed, each wr_id once; the sender
/// succeeds.
#[test]
fn ud_receive_too_small_errors_once_and_flushes() {
    let e = env();
    let (mut a, mut b, ah) = ud_pair(&e.pd);
    let rb = e.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let small = [Sge::new(&rb, 0, 40 + 99).unwrap()];
    let big = [Sge::new(&rb, 1024, 1024).unwrap()];
    b.post_recv(&[
        RecvWr::new(1, &small),
        RecvWr::new(2, &big),
        RecvWr::new(3, &big),
    ])
    .unwrap();
    let s = [Sge::new(&e.src, 0, 100).unwrap()];
    a.post_send(&[SendWr::ud_send(9, &s, dest(&ah, b.qp_num())).signaled()])
        .unwrap();
    assert_eq!(poll_n(&mut a, 1)[0].status, WcStatus::SUCCESS);
    let got = poll_n(&mut b, 3);
    assert_eq!(
        got.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_eq!(got[0].status, WcStatus::LOC_LEN_ERR, "{:?}", got[0]);
    assert!(
        got[1..].iter().all(|c| c.status == WcStatus::WR_FLUSH_ERR),
        "{got:?}"
    );
    assert!(drain(&mut b).is_empty());
    // An exact fit (40 + 100) is fine on a fresh QP.
    let (mut a, mut b, ah) = ud_pair(&e.pd);
    let fit = [Sge::new(&rb, 0, 140).unwrap()];
    b.post_recv(&[RecvWr::new(5, &fit)]).unwrap();
    a.post_send(&[SendWr::ud_send(9, &s, dest(&ah, b.qp_num())).signaled()])
        .unwrap();
    poll_n(&mut a, 1);
    let c = poll_n(&mut b, 1);
    assert_eq!(
        (c[0].wr_id, c[0].status, c[0].byte_len),
        (5, WcStatus::SUCCESS, 140)
    );
}

/// IB spec C10-15 / 10.2.5 (and rxe, mlx5): a WR's qkey with its high bit
/// set means "use the sending QP's own qkey".
#[test]
fn ud_controlled_qkey_in_wr_uses_qp_qkey() {
    let e = env();
    let (mut a, mut b, ah) = ud_pair(&e.pd);
    let rb = e.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let r = [Sge::new(&rb, 0, 4096).unwrap()];
    b.post_recv(&[RecvWr::new(1, &r)]).unwrap();
    let s = [Sge::new(&e.src, 0, 10).unwrap()];
    let d = UdDest {
        ah: &ah,
        remote_qpn: b.qp_num(),
        qkey: 0x8000_0000,
    };
    a.post_send(&[SendWr::ud_send(1, &s, d).signaled()])
        .unwrap();
    poll_n(&mut a, 1);
    let c = drain(&mut b);
    assert_eq!(
        c.len(),
        1,
        "the datagram with qkey 0x80000000 was dropped: {c:?}"
    );
}

/// Modifies of a UD and a UC QP with the wrong attributes: QpAttr naming
/// the attribute, nothing changed.
#[test]
fn uc_ud_modify_wrong_attributes_named() {
    let e = env();
    let named = |r: Result<()>| match r {
        Err(Error::QpAttr { attr, .. }) => attr,
        other => panic!("not a QpAttr error: {other:?}"),
    };
    // UD.
    let mut u = e.pd.create_qp(&ud_cfg()).unwrap();
    let peer = e.pd.create_qp(&ud_cfg()).unwrap();
    assert_eq!(
        named(u.modify(QpState::Init, &QpAttr::init(1, Access::LOCAL_WRITE))),
        "QKEY"
    );
    let with_access = QpAttr {
        access: Some(Access::LOCAL_WRITE),
        ..QpAttr::init_ud(1, QKEY)
    };
    assert_eq!(named(u.modify(QpState::Init, &with_access)), "ACCESS_FLAGS");
    assert_eq!(named(u.modify(QpState::Rtr, &QpAttr::default())), "STATE");
    assert_eq!(u.state(), QpState::Reset);
    u.modify(QpState::Init, &QpAttr::init_ud(1, QKEY)).unwrap();
    let rtr = u.rtr_attr(&peer.endpoint(), 1);
    let a = named(u.modify(QpState::Rtr, &rtr));
    assert!(
        [
            "AV",
            "PATH_MTU",
            "DEST_QPN",
            "RQ_PSN",
            "MAX_DEST_RD_ATOMIC",
            "MIN_RNR_TIMER"
        ]
        .contains(&a),
        "{a}"
    );
    assert_eq!(u.state(), QpState::Init);
    u.modify(QpState::Rtr, &QpAttr::default()).unwrap();
    assert_eq!(named(u.modify(QpState::Rts, &QpAttr::rts(1, 7))), "TIMEOUT");
    assert_eq!(named(u.modify(QpState::Rts, &QpAttr::default())), "SQ_PSN");
    let bad_psn = QpAttr::rts_unreliable(0x100_0000);
    assert_eq!(named(u.modify(QpState::Rts, &bad_psn)), "SQ_PSN");
    assert_eq!(u.state(), QpState::Rtr);
    u.modify(QpState::Rts, &QpAttr::rts_unreliable(5)).unwrap();
    // UC.
    let mut c = e.pd.create_qp(&uc_cfg()).unwrap();
    let mut d = e.pd.create_qp(&uc_cfg()).unwrap();
    assert_eq!(
        named(c.modify(QpState::Init, &QpAttr::init_ud(1, QKEY))),
        "ACCESS_FLAGS"
    );
    c.modify(QpState::Init, &QpAttr::init(1, Access::QP_ALL))
        .unwrap();
    d.modify(QpState::Init, &QpAttr::init(1, Access::QP_ALL))
        .unwrap();
    let rc_rtr = c.rtr_attr(&d.endpoint(), 1);
    // rtr_attr of a UC QP: whatever it is, it must be accepted or named.
    let av = c.av_to(&d.endpoint());
    let rd = QpAttr::rtr(av, 3, d.qp_num(), 1);
    let n = named(c.modify(QpState::Rtr, &rd));
    assert!(n == "MAX_DEST_RD_ATOMIC" || n == "MIN_RNR_TIMER", "{n}");
    let no_psn = QpAttr {
        rq_psn: None,
        ..QpAttr::rtr_uc(av, 3, d.qp_num(), 1)
    };
    assert_eq!(named(c.modify(QpState::Rtr, &no_psn)), "RQ_PSN");
    assert_eq!(c.state(), QpState::Init);
    c.modify(QpState::Rtr, &rc_rtr).unwrap();
    assert_eq!(named(c.modify(QpState::Rts, &QpAttr::rts(1, 7))), "TIMEOUT");
    let qk = QpAttr {
        qkey: Some(1),
        ..QpAttr::rts_unreliable(1)
    };
    assert_eq!(named(c.modify(QpState::Rts, &qk)), "QKEY");
    assert_eq!(c.state(), QpState::Rtr);
    c.modify(QpState::Rts, &QpAttr::rts_unreliable(1)).unwrap();
}

// ---------------------------------------------------------------- UC

/// READ and atomics on UC: Invalid at post (alone, in a batch, inline),
/// nothing written; WRITE and SEND go.
#[test]
fn uc_read_and_atomics_refused() {
    let e = env();
    let (mut a, mut b) = uc_pair(&e.pd);
    let s8 = [Sge::new(&e.src, 0, 8).unwrap()];
    let r = to(&e.dst, 0);
    let ok = SendWr::rdma_write(1, &s8, r);
    for w in [
        SendWr::rdma_read(2, &s8, r),
        SendWr::rdma_read(2, &s8, r).signaled(),
        SendWr::atomic_cmp_swp(2, &s8, r, 0, 1),
        SendWr::atomic_fetch_add(2, &s8, r, 1).signaled(),
    ] {
        let err = refused_by(&mut a, |q| q.post_send(&[w]));
        assert!(
            matches!(err, Error::WrongTransport { .. }),
            "{:?}: {err:?}",
            w.op
        );
        let err = refused_by(&mut a, |q| q.post_send(&[ok, w]));
        assert!(
            matches!(err, Error::WrongTransport { .. }),
            "batch {:?}: {err:?}",
            w.op
        );
        let err = refused_by(&mut a, |q| q.post_send(&[ok, ok, w, ok]));
        assert!(
            matches!(err, Error::WrongTransport { .. }),
            "batch {:?}: {err:?}",
            w.op
        );
    }
    assert!(drain(&mut a).is_empty());
    // WRITE, WRITE_IMM, SEND, SEND_IMM go.
    let rb = e.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let rs = [Sge::new(&rb, 0, 64).unwrap()];
    b.post_recv(&[
        RecvWr::new(10, &rs),
        RecvWr::new(11, &rs),
        RecvWr::new(12, &rs),
    ])
    .unwrap();
    a.post_send(&[
        SendWr::rdma_write(1, &s8, r).signaled(),
        SendWr::rdma_write(2, &s8, r).imm(7).signaled(),
        SendWr::send(3, &s8).signaled(),
        SendWr::send(4, &s8).imm(8).signaled(),
    ])
    .unwrap();
    let c = poll_n(&mut a, 4);
    assert_eq!(
        c.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    let c = poll_n(&mut b, 3);
    assert_eq!(
        c.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        vec![10, 11, 12]
    );
    assert_eq!(c[0].imm, Some(7));
    assert_eq!(c[2].imm, Some(8));
    assert!(drain(&mut b).is_empty());
}

/// A UC SEND with no receive posted is dropped: the sender succeeds, the
/// responder stays RTS, and the next SEND takes the receive posted later.
#[test]
fn uc_send_without_receive_dropped() {
    let e = env();
    let (mut a, mut b) = uc_pair(&e.pd);
    let s = [Sge::new(&e.src, 0, 16).unwrap()];
    for i in 0..5 {
        a.post_send(&[SendWr::send(i, &s).signaled()]).unwrap();
    }
    let c = poll_n(&mut a, 5);
    assert!(c.iter().all(|c| c.status == WcStatus::SUCCESS), "{c:?}");
    assert_eq!(b.query().unwrap().state, QpState::Rts);
    assert_eq!(a.query().unwrap().state, QpState::Rts);
    assert!(drain(&mut b).is_empty());
    let rb = e.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let rs = [Sge::new(&rb, 0, 64).unwrap()];
    b.post_recv(&[RecvWr::new(42, &rs)]).unwrap();
    a.post_send(&[SendWr::send(6, &s).signaled()]).unwrap();
    assert_eq!(poll_n(&mut a, 1)[0].wr_id, 6);
    let c = poll_n(&mut b, 1);
    assert_eq!((c[0].wr_id, c[0].byte_len), (42, 16));
    // A SEND longer than the receive: dropped on UC? or error: the
    // receiver must not scribble past its buffer, and each wr_id once.
    let big = [Sge::new(&e.src, 0, 128).unwrap()];
    b.post_recv(&[RecvWr::new(43, &rs)]).unwrap();
    a.post_send(&[SendWr::send(7, &big).signaled()]).unwrap();
    assert_eq!(poll_n(&mut a, 1)[0].status, WcStatus::SUCCESS);
    let got = drain(&mut b);
    assert!(
        got.len() <= 1 && got.iter().all(|c| c.wr_id == 43),
        "{got:?}"
    );
}

/// A UC WRITE with a bad rkey (or out of range, or to an MR without
/// REMOTE_WRITE): completes successfully, nothing lands, the responder
/// stays RTS and takes the next good WRITE.
#[test]
fn uc_write_bad_rkey_dropped_responder_stays_rts() {
    let e = env();
    let (mut a, b) = uc_pair(&e.pd);
    e.src.write(0, &[0xee; 64]).unwrap();
    let ro = e.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let s = [Sge::new(&e.src, 0, 64).unwrap()];
    let good = to(&e.dst, 0);
    let bads = [
        RemoteAddr {
            addr: good.addr,
            rkey: Rkey(good.rkey.0 ^ 0x55_5500),
        },
        RemoteAddr {
            addr: good.addr + (1 << 16) - 8,
            rkey: good.rkey,
        },
        RemoteAddr {
            addr: good.addr.wrapping_sub(4096),
            rkey: good.rkey,
        },
        to(&ro, 0),
    ];
    for (i, r) in bads.iter().enumerate() {
        a.post_send(&[SendWr::rdma_write(i as u64, &s, *r).signaled()])
            .unwrap();
        a.post_write(&WriteWr::new(100 + i as u64, s[0], *r).signaled())
            .unwrap();
        a.post_write_inline(200 + i as u64, &[0xee; 16], *r, SendFlags::SIGNALED)
            .unwrap();
    }
    let c = poll_n(&mut a, 3 * bads.len());
    assert!(c.iter().all(|c| c.status == WcStatus::SUCCESS), "{c:?}");
    let mut ids: Vec<u64> = c.iter().map(|c| c.wr_id).collect();
    ids.sort();
    let mut want: Vec<u64> = (0..bads.len() as u64)
        .flat_map(|i| [i, 100 + i, 200 + i])
        .collect();
    want.sort();
    assert_eq!(ids, want);
    let mut got = vec![0u8; 1 << 16];
    e.dst.read(0, &mut got).unwrap();
    assert!(got.iter().all(|&x| x == 0), "a bad WRITE landed");
    let mut got = vec![0u8; 4096];
    ro.read(0, &mut got).unwrap();
    assert!(
        got.iter().all(|&x| x == 0),
        "a WRITE landed in a local-only MR"
    );
    assert_eq!(b.query().unwrap().state, QpState::Rts);
    a.post_write(&WriteWr::new(9, s[0], good).signaled())
        .unwrap();
    assert_eq!(poll_n(&mut a, 1)[0].wr_id, 9);
    let mut got = [0u8; 64];
    eventually("the good WRITE lands", || {
        e.dst.read(0, &mut got).unwrap();
        got == [0xee; 64]
    });
}
