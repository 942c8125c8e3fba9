//! DC refusals on the sim: posts, transitions, configs and pool requests
//! the API must refuse with a typed error, each leaving the DCI's ring as
//! it was (`QpHooks::sq_snapshot`); among them a UD SEND posted to a DCI
//! through `post_send`, which the in-place UD post once let in (the DC
//! posts' gate is now their own).

#[path = "support/sim.rs"]
mod sim;
use sim::*;
#[path = "support/dc.rs"]
mod dc;
use dc::*;
use rdma_direct::*;

/// `post_send` of one UD SEND on a DCI in RTS (own CQ, no credits
/// counted): `WrongTransport`, nothing written. The UD in-place post
/// (`post_ud_gated`) looks at the SQ's UD gate alone, which a DCI never
/// opens (its in-place posts have their own gate).
#[test]
fn post_send_of_a_ud_send_on_a_dci_is_refused_and_writes_nothing() {
    let mut d = dc();
    let s = [Sge::new(&d.e.src, 0, 8).unwrap()];
    let ud = UdDest {
        ah: &d.ah,
        remote_qpn: d.dct.dct_number().unwrap(),
        qkey: 0x1111_1111,
    };
    let before = ring(&d.dci);
    let r = d.dci.post_send(&[SendWr::ud_send(1, &s, ud).signaled()]);
    let after = ring(&d.dci);
    assert!(
        matches!(
            r,
            Err(Error::WrongTransport {
                qp_type: QpType::Dci,
                ..
            })
        ),
        "a UD send through post_send on a DCI: {r:?}"
    );
    assert_eq!(before, after, "the DCI's ring was written");
    still_clean(&mut d, 9);
}

/// The same UD SEND on a DCI whose shallow CQ counts credits (the UD gate
/// is closed there): refused, ring unchanged.
#[test]
fn post_send_of_a_ud_send_on_a_counting_dci_is_refused() {
    let mut d = dc_with(&QpConfig {
        cq_depth: Some(4),
        ..dci_cfg()
    });
    let s = [Sge::new(&d.e.src, 0, 8).unwrap()];
    let ud = UdDest {
        ah: &d.ah,
        remote_qpn: d.dct.dct_number().unwrap(),
        qkey: 0x1111_1111,
    };
    let before = ring(&d.dci);
    let r = d.dci.post_send(&[SendWr::ud_send(1, &s, ud).signaled()]);
    assert!(matches!(r, Err(Error::WrongTransport { .. })), "{r:?}");
    assert_eq!(before, ring(&d.dci));
    still_clean(&mut d, 9);
}

/// Every RC post other than `post_dc` on a DCI: `WrongTransport`, ring
/// unchanged.
#[test]
fn rc_posts_on_a_dci_are_refused_and_write_nothing() {
    let mut d = dc();
    let before = ring(&d.dci);
    let s = Sge::new(&d.e.src, 0, 8).unwrap();
    let ss = [s];
    let at = remote(&d.e.dst, 0);
    let wrong = |r: Result<()>, what: &str| {
        assert!(
            matches!(
                r,
                Err(Error::WrongTransport {
                    qp_type: QpType::Dci,
                    ..
                })
            ),
            "{what}: {r:?}"
        )
    };
    wrong(d.dci.post_write(&WriteWr::new(1, s, at)), "post_write");
    wrong(
        d.dci
            .post_write_inline(2, &[1, 2, 3, 4], at, SendFlags::SIGNALED),
        "post_write_inline",
    );
    wrong(
        d.dci
            .post_writes(&[WriteWr::new(3, s, at), WriteWr::new(4, s, at)]),
        "post_writes",
    );
    for w in [
        SendWr::rdma_write(5, &ss, at),
        SendWr::send(6, &ss),
        SendWr::rdma_read(7, &ss, at),
        SendWr::rdma_write(8, &ss, at).imm(1),
        SendWr::send(9, &ss).imm(1),
    ] {
        wrong(d.dci.post_send(&[w]), "post_send one");
        wrong(d.dci.post_send(&[w, w]), "post_send two");
    }
    let inl = [Sge::bytes(&[7u8; 16]).unwrap()];
    wrong(
        d.dci
            .post_send(&[SendWr::rdma_write(10, &inl, at).inline()]),
        "inline post_send",
    );
    let buf = d.e.pd.alloc_local_mr(4096, Access::LOCAL_WRITE).unwrap();
    let r = d
        .dci
        .post_send_owned(&SendWr::send(11, &[]), buf, 0, 64)
        .map_err(|r| r.error);
    wrong(r, "post_send_owned");
    assert_eq!(before, ring(&d.dci), "a refused post wrote the ring");
    still_clean(&mut d, 99);
}

/// Receives: a DCI has no RQ, a DCT's come from its SRQ.
#[test]
fn post_recv_on_a_dci_or_a_dct_is_refused() {
    let mut d = dc();
    let s = [Sge::new(&d.e.dst, 0, 64).unwrap()];
    let r = d.dci.post_recv(&[RecvWr::new(1, &s)]);
    assert!(r.is_err(), "post_recv on a DCI: {r:?}");
    let r = d.dct.post_recv(&[RecvWr::new(2, &s)]);
    assert!(r.is_err(), "post_recv on a DCT: {r:?}");
    let r = d.dci.post_recv(&[RecvWr::new(1, &s), RecvWr::new(3, &s)]);
    assert!(r.is_err(), "post_recv batch on a DCI: {r:?}");
    still_clean(&mut d, 5);
}

/// Every WR-level refusal of `post_dc`: typed, ring unchanged, one WR and
/// in a batch behind a good one.
#[test]
fn post_dc_refuses_bad_wrs_and_writes_nothing() {
    let mut d = dc();
    let to = dest(&d.ah, &d.dct);
    let good_s = [Sge::new(&d.e.src, 0, 8).unwrap()];
    let good = SendWr::rdma_write(100, &good_s, remote(&d.e.dst, 0)).signaled();
    let pd2 = d.e.ctx.alloc_pd().unwrap();
    let mr2 = pd2.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let foreign = [Sge::new(&mr2, 0, 8).unwrap()];
    let big_inline = vec![1u8; 4096];
    let over = [Sge::bytes(&big_inline).unwrap()];
    let s7 = [Sge::new(&d.e.src, 0, 7).unwrap()];
    let s8 = [Sge::new(&d.e.src, 0, 8).unwrap()];
    let three = [
        Sge::new(&d.e.src, 0, 8).unwrap(),
        Sge::new(&d.e.src, 8, 8).unwrap(),
        Sge::new(&d.e.src, 16, 8).unwrap(),
    ];
    let inl8 = [Sge::bytes(&[0u8; 8]).unwrap()];
    let ud = UdDest {
        ah: &d.ah,
        remote_qpn: to.dctn,
        qkey: 1,
    };
    let cases: Vec<(&str, SendWr<'_>)> = vec![
        ("UD send", SendWr::ud_send(1, &s8, ud)),
        (
            "foreign-PD SGE",
            SendWr::rdma_write(2, &foreign, remote(&d.e.dst, 0)),
        ),
        ("foreign-PD SEND", SendWr::send(2, &foreign)),
        (
            "inline over the limit",
            SendWr::rdma_write(3, &over, remote(&d.e.dst, 0)).inline(),
        ),
        (
            "atomic of 7 bytes",
            SendWr::atomic_fetch_add(4, &s7, remote(&d.e.dst, 2048), 1),
        ),
        (
            "atomic misaligned",
            SendWr::atomic_fetch_add(5, &s8, remote(&d.e.dst, 2052), 1),
        ),
        (
            "cmp-swap misaligned",
            SendWr::atomic_cmp_swp(6, &s8, remote(&d.e.dst, 2049), 1, 2),
        ),
        (
            "atomic of 3 SGEs",
            SendWr::atomic_cmp_swp(7, &three, remote(&d.e.dst, 2048), 1, 2),
        ),
        (
            "inline atomic",
            SendWr::atomic_fetch_add(8, &inl8, remote(&d.e.dst, 2048), 1).inline(),
        ),
        (
            "inline READ",
            SendWr::rdma_read(9, &inl8, remote(&d.e.dst, 0)).inline(),
        ),
        (
            "too many SGEs",
            SendWr::rdma_write(10, &three, remote(&d.e.dst, 0)),
        ),
        ("bytes SGE not inline", SendWr::send(11, &inl8)),
    ];
    let before = ring(&d.dci);
    for (what, w) in &cases {
        let r = d.dci.post_dc(&to, std::slice::from_ref(w));
        assert!(r.is_err(), "{what}: {r:?}");
        assert_eq!(before, ring(&d.dci), "{what}: the ring was written");
        let r = d.dci.post_dc(&to, &[good, *w]);
        assert!(r.is_err(), "{what} in a batch: {r:?}");
        assert_eq!(before, ring(&d.dci), "{what} in a batch: written");
    }
    // A batch larger than the queue: NeverFits.
    let many = vec![good; 17];
    let r = d.dci.post_dc(&to, &many);
    assert!(matches!(r, Err(Error::NeverFits { .. })), "{r:?}");
    assert_eq!(before, ring(&d.dci));
    // An empty batch: nothing.
    d.dci.post_dc(&to, &[]).unwrap();
    assert_eq!(before, ring(&d.dci));
    still_clean(&mut d, 77);
}

/// `post_dc` on a DCT, an RC QP, a UD QP; a DCI not yet up; a DCI moved
/// to ERR by hand.
#[test]
fn post_dc_on_the_wrong_qp_or_state_writes_nothing() {
    let mut d = dc();
    let to = dest(&d.ah, &d.dct);
    let s = [Sge::new(&d.e.src, 0, 8).unwrap()];
    let w = [SendWr::rdma_write(1, &s, remote(&d.e.dst, 0)).signaled()];
    assert!(matches!(
        d.dct.post_dc(&to, &w),
        Err(Error::WrongTransport { .. })
    ));
    let mut ud =
        d.e.pd
            .create_qp(&QpConfig {
                qp_type: QpType::Ud,
                ..QpConfig::default()
            })
            .unwrap();
    ud.ready_ud(0x1111).unwrap();
    let before_ud = ring(&ud);
    assert!(matches!(
        ud.post_dc(&to, &w),
        Err(Error::WrongTransport { .. })
    ));
    assert_eq!(before_ud, ring(&ud));
    let before = ring(&d.dci);
    d.dci.modify(QpState::Err, &QpAttr::default()).unwrap();
    for ws in [&w[..], &[w[0], w[0]][..]] {
        let r = d.dci.post_dc(&to, ws);
        assert!(
            matches!(
                r,
                Err(Error::QpState {
                    state: QpState::Err,
                    ..
                })
            ),
            "{r:?}"
        );
    }
    assert_eq!(before, ring(&d.dci), "written in ERR");
    d.dci.reset_dci().unwrap();
    still_clean(&mut d, 3);
}

/// A DCT goes RESET -> INIT -> RTR and nowhere else; a DCI has no SQD.
#[test]
fn dc_transitions_outside_the_tables_are_refused() {
    let mut d = dc();
    let n = d.dct.dct_number().unwrap();
    for (to, attr) in [
        (QpState::Rts, QpAttr::rts(0, 7)),
        (QpState::Err, QpAttr::default()),
        (QpState::Reset, QpAttr::default()),
        (QpState::Sqd, QpAttr::default()),
        (QpState::Init, QpAttr::default()),
    ] {
        let r = d.dct.modify(to, &attr);
        assert!(r.is_err(), "DCT to {to:?}: {r:?}");
        assert_eq!(d.dct.state(), QpState::Rtr);
        assert_eq!(d.dct.dct_number(), Some(n));
    }
    assert!(d.dct.ready_dct().is_err());
    let r = d.dci.drain_sq();
    assert!(r.is_err(), "DCI to SQD: {r:?}");
    assert_eq!(d.dci.state(), QpState::Rts);
    let r = d.dci.modify(QpState::Rtr, &QpAttr::default());
    assert!(r.is_err(), "DCI RTS -> RTR: {r:?}");
    assert!(d.dci.ready_dci().is_err());
    still_clean(&mut d, 4);
    // A DCT brought up by hand has no number before RTR.
    let mut t = d.e.pd.create_qp_on_srq(&dct_cfg(), &d.srq).unwrap();
    t.modify(QpState::Init, &QpAttr::init(1, Access::QP_ALL))
        .unwrap();
    assert_eq!(t.dct_number(), None);
    assert!(exchange::ConnInfo::of_dct(&t).is_err());
    assert!(matches!(t.split(), Err(Error::WrongTransport { .. })));
}

/// QpConfigs a DCI or DCT cannot have.
#[test]
fn dc_configs_out_of_range_are_refused() {
    let e = env();
    let srq = e.pd.create_srq(4, 1).unwrap();
    for (what, cfg) in [
        (
            "max_send_wr 0",
            QpConfig {
                max_send_wr: 0,
                ..dci_cfg()
            },
        ),
        (
            "max_send_wr 2^20",
            QpConfig {
                max_send_wr: 1 << 20,
                ..dci_cfg()
            },
        ),
        (
            "max_inline 2^20",
            QpConfig {
                max_inline: 1 << 20,
                ..dci_cfg()
            },
        ),
        (
            "max_send_sge 1000",
            QpConfig {
                max_send_sge: 1000,
                ..dci_cfg()
            },
        ),
        (
            "inline_recv",
            QpConfig {
                inline_recv: InlineRecv::Up32,
                ..dci_cfg()
            },
        ),
    ] {
        assert!(e.pd.create_qp(&cfg).is_err(), "DCI {what}");
    }
    assert!(e
        .pd
        .create_qp_on_srq(
            &QpConfig {
                inline_recv: InlineRecv::Up32,
                ..dct_cfg()
            },
            &srq
        )
        .is_err());
    // A DCT's send limits are not looked at.
    let mut t =
        e.pd.create_qp_on_srq(
            &QpConfig {
                max_send_wr: 0,
                max_send_sge: 0,
                max_inline: 1 << 20,
                ..dct_cfg()
            },
            &srq,
        )
        .unwrap();
    t.ready_dct().unwrap();
}

/// A DCI of no send SGE and no inline: posts of 0 SGEs only.
#[test]
fn a_dci_with_max_send_sge_0_refuses_sges() {
    let mut d = dc_with(&QpConfig {
        max_send_sge: 0,
        max_inline: 0,
        ..dci_cfg()
    });
    let to = dest(&d.ah, &d.dct);
    let s = [Sge::new(&d.e.src, 0, 8).unwrap()];
    let before = ring(&d.dci);
    let r = d
        .dci
        .post_dc(&to, &[SendWr::rdma_write(1, &s, remote(&d.e.dst, 0))]);
    assert!(matches!(r, Err(Error::TooManySges { .. })), "{r:?}");
    let inl = [Sge::bytes(&[1u8; 4]).unwrap()];
    let r = d.dci.post_dc(
        &to,
        &[SendWr::rdma_write(2, &inl, remote(&d.e.dst, 0)).inline()],
    );
    assert!(r.is_err(), "{r:?}");
    assert_eq!(before, ring(&d.dci));
    // Zero bytes: a WRITE of nothing.
    d.dci
        .post_dc(
            &to,
            &[SendWr::rdma_write(3, &[], remote(&d.e.dst, 0)).signaled()],
        )
        .unwrap();
    let c = poll_n(&mut d.dci, 1);
    assert_eq!((c[0].wr_id, c[0].status), (3, WcStatus::SUCCESS));
}

/// A zero-length SGE through `post_dc`: posted (or refused), never a panic.
#[test]
fn a_zero_length_sge_through_post_dc() {
    let mut d = dc();
    let to = dest(&d.ah, &d.dct);
    let z = [Sge::new(&d.e.src, 0, 0).unwrap()];
    d.dci
        .post_dc(
            &to,
            &[SendWr::rdma_write(1, &z, remote(&d.e.dst, 0)).signaled()],
        )
        .unwrap();
    let c = poll_n(&mut d.dci, 1);
    assert_eq!((c[0].wr_id, c[0].status), (1, WcStatus::SUCCESS));
    still_clean(&mut d, 2);
}

/// DciPool widths and types out of range.
#[test]
fn dci_pool_of_width_0_or_65_or_of_rc_qps_is_refused() {
    let e = env();
    for w in [0usize, 65, usize::MAX] {
        assert!(
            matches!(
                DciPool::new(&e.pd, &dci_cfg(), w),
                Err(Error::Config { .. })
            ),
            "width {w}"
        );
    }
    assert!(matches!(
        DciPool::new(&e.pd, &QpConfig::default(), 2),
        Err(Error::WrongTransport { .. })
    ));
    let p = DciPool::new(&e.pd, &dci_cfg(), 64).unwrap();
    assert_eq!(p.width(), 64);
    assert_eq!(p.busy(), 0);
}

/// A pool of two DCIs and three targets: the third waits (QueueFull)
/// and no DCI's ring is written for it.
#[test]
fn dci_pool_full_of_targets_refuses_and_writes_nothing() {
    let e = env();
    let srq = e.pd.create_srq(16, 1).unwrap();
    let mut dcts: Vec<Qp> = (0..3)
        .map(|_| {
            let mut t = e.pd.create_qp_on_srq(&dct_cfg(), &srq).unwrap();
            t.ready_dct().unwrap();
            t
        })
        .collect();
    let mut pool = DciPool::new(&e.pd, &dci_cfg(), 2).unwrap();
    let ah =
        e.pd.create_ah(&pool.dci(0).av_to(&dcts[0].endpoint()))
            .unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let w = |id| [SendWr::rdma_write(id, &s, remote(&e.dst, 0)).signaled()];
    let to = |t: &Qp| DcDest {
        ah: &ah,
        dctn: t.dct_number().unwrap(),
        key: KEY,
    };
    assert_eq!(pool.post(&to(&dcts[0]), &w(1)).unwrap(), 0);
    assert_eq!(pool.post(&to(&dcts[1]), &w(2)).unwrap(), 1);
    let rings: Vec<_> = (0..2).map(|i| ring(pool.dci(i))).collect();
    let r = pool.post(&to(&dcts[2]), &w(3));
    assert!(matches!(r, Err(Error::QueueFull)), "{r:?}");
    let r = pool.post(
        &DcDest {
            dctn: 1 << 24,
            ..to(&dcts[0])
        },
        &w(4),
    );
    assert!(r.is_err(), "{r:?}");
    for (i, r) in rings.iter().enumerate() {
        assert_eq!(*r, ring(pool.dci(i)), "DCI {i} written");
    }
    let got = poll_n_with(|wc| pool.poll(wc), 2);
    assert!(got.iter().all(|c| c.status == WcStatus::SUCCESS));
    assert_eq!(pool.busy(), 0);
    assert_eq!(pool.post(&to(&dcts[2]), &w(5)).unwrap(), 0);
    poll_n_with(|wc| pool.poll(wc), 1);
    dcts.clear();
}

/// The same UD SEND where, written, it would do most harm: a UD datagram
/// segment on a DCI puts the qkey where the DC key's high half goes, so a
/// DCT whose key is `qkey << 32` would take it into its SRQ. Refused; the
/// DCT receives nothing.
#[test]
fn a_ud_send_through_post_send_on_a_dci_never_reaches_a_dct() {
    let e = env();
    let mut srq = e.pd.create_srq(16, 1).unwrap();
    let key = 5u64 << 32;
    let mut dct =
        e.pd.create_qp_on_srq(
            &QpConfig {
                qp_type: QpType::Dct,
                dc_key: key,
                ..QpConfig::default()
            },
            &srq,
        )
        .unwrap();
    dct.ready_dct().unwrap();
    let mut dci = e.pd.create_qp(&dci_cfg()).unwrap();
    dci.ready_dci().unwrap();
    let ah = e.pd.create_ah(&dci.av_to(&dct.endpoint())).unwrap();
    let rr = [Sge::new(&e.dst, 0, 64).unwrap()];
    srq.post_recv(&[RecvWr::new(77, &rr)]).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let ud = UdDest {
        ah: &ah,
        remote_qpn: dct.dct_number().unwrap(),
        qkey: 5,
    };
    let r = dci.post_send(&[SendWr::ud_send(1, &s, ud).signaled()]);
    let delivered = drain(&mut dct);
    assert!(
        r.is_err() && delivered.is_empty(),
        "post_send on a DCI: {r:?}; the DCT received {delivered:?}"
    );
}
