//! DC under faults on the sim: DCIs on a shared CQ failing one by one,
//! targets dropped or of another PD or context, malformed exchange
//! messages, shallow CQs, the largest WQEs: every failure credited to its
//! own DCI, nothing delivered where it should not be, nothing hangs.

#[path = "support/sim.rs"]
mod sim;
use sim::*;
#[path = "support/dc.rs"]
mod dc;
use dc::*;
use rdma_direct::*;

/// Two DCIs on one SharedCq: the error of one is credited to it alone.
#[test]
fn on_a_shared_cq_a_failure_is_credited_to_its_own_dci() {
    let e = env();
    let srq = e.pd.create_srq(16, 1).unwrap();
    let mut dct = e.pd.create_qp_on_srq(&dct_cfg(), &srq).unwrap();
    dct.ready_dct().unwrap();
    let mut cq = e.pd.create_shared_cq(64).unwrap();
    let a = cq.create_qp(&dci_cfg()).unwrap();
    let b = cq.create_qp(&dci_cfg()).unwrap();
    cq.qp_mut(a).ready_dci().unwrap();
    cq.qp_mut(b).ready_dci().unwrap();
    let ah = e.pd.create_ah(&cq.qp(a).av_to(&dct.endpoint())).unwrap();
    let good = DcDest {
        ah: &ah,
        dctn: dct.dct_number().unwrap(),
        key: KEY,
    };
    let bad = DcDest {
        key: KEY ^ 1,
        ..good
    };
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let w = |id| [SendWr::rdma_write(id, &s, remote(&e.dst, 0)).signaled()];
    cq.qp_mut(a).post_dc(&bad, &w(1)).unwrap();
    cq.qp_mut(b).post_dc(&good, &w(2)).unwrap();
    let got = poll_n_with(|wc| cq.poll(wc), 2);
    let qa = cq.qp(a).qp_num();
    for c in &got {
        if c.wr_id == 1 {
            assert_eq!(c.qp_num, qa);
            assert_ne!(c.status, WcStatus::SUCCESS);
        } else {
            assert_eq!(c.status, WcStatus::SUCCESS);
        }
    }
    assert!(cq.qp(a).dci_failed());
    assert!(!cq.qp(b).dci_failed());
    let before = ring(cq.qp(a));
    let r = cq.qp_mut(a).post_dc(&good, &w(3));
    assert!(matches!(r, Err(Error::QpState { .. })), "{r:?}");
    assert_eq!(before, ring(cq.qp(a)));
    cq.qp_mut(b).post_dc(&good, &w(4)).unwrap();
    assert_eq!(poll_n_with(|wc| cq.poll(wc), 1)[0].wr_id, 4);
    cq.reset_qp(a).unwrap();
    cq.qp_mut(a).ready_dci().unwrap();
    cq.qp_mut(a).post_dc(&good, &w(5)).unwrap();
    let c = poll_n_with(|wc| cq.poll(wc), 1);
    assert_eq!((c[0].wr_id, c[0].status), (5, WcStatus::SUCCESS));
}

/// A DCT on a SharedCq (create_qp_on_srq) serves a DCI.
#[test]
fn a_dct_on_a_shared_cq_serves() {
    let e = env();
    let mut srq = e.pd.create_srq(8, 1).unwrap();
    let mut cq = e.pd.create_shared_cq(64).unwrap();
    let t = cq.create_qp_on_srq(&dct_cfg(), &srq).unwrap();
    cq.qp_mut(t).ready_dct().unwrap();
    let mut dci = e.pd.create_qp(&dci_cfg()).unwrap();
    dci.ready_dci().unwrap();
    let ah = e.pd.create_ah(&dci.av_to(&cq.qp(t).endpoint())).unwrap();
    let to = DcDest {
        ah: &ah,
        dctn: cq.qp(t).dct_number().unwrap(),
        key: KEY,
    };
    let r = [Sge::new(&e.dst, 0, 64).unwrap()];
    srq.post_recv(&[RecvWr::new(50, &r)]).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    dci.post_dc(&to, &[SendWr::send(1, &s).signaled()]).unwrap();
    assert_eq!(poll_n(&mut dci, 1)[0].status, WcStatus::SUCCESS);
    let c = poll_n_with(|wc| cq.poll(wc), 1);
    assert_eq!((c[0].wr_id, c[0].status), (50, WcStatus::SUCCESS));
}

/// The DCT dropped while a DCI posts to it: the DCI's WR fails, no hang.
#[test]
fn a_dropped_dct_fails_the_dci_and_nothing_hangs() {
    let Dc {
        e,
        srq,
        dct,
        mut dci,
        ah,
    } = dc();
    let to = DcDest {
        ah: &ah,
        dctn: dct.dct_number().unwrap(),
        key: KEY,
    };
    drop(dct);
    drop(srq);
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    dci.post_dc(
        &to,
        &[
            SendWr::rdma_write(1, &s, remote(&e.dst, 0)).signaled(),
            SendWr::rdma_write(2, &s, remote(&e.dst, 0)).signaled(),
        ],
    )
    .unwrap();
    let c = poll_n(&mut dci, 2);
    assert!(c.iter().all(|c| c.status != WcStatus::SUCCESS), "{c:?}");
    assert!(dci.dci_failed());
    dci.reset_dci().unwrap();
    // A DCI dropped with WRs outstanding.
    dci.post_dc(&to, &[SendWr::rdma_write(3, &s, remote(&e.dst, 0))])
        .unwrap();
    drop(dci);
}

/// `reset_dci` with WRs in flight: their completions are gone, the next
/// WR's is the first.
#[test]
fn reset_dci_mid_flight() {
    let mut d = dc();
    let to = dest(&d.ah, &d.dct);
    let s = [Sge::new(&d.e.src, 0, 1000).unwrap()];
    let ws: Vec<_> = (0..8)
        .map(|i| SendWr::rdma_write(i, &s, remote(&d.e.dst, 0)).signaled())
        .collect();
    d.dci.post_dc(&to, &ws).unwrap();
    d.dci.reset_dci().unwrap();
    assert_eq!(d.dci.state(), QpState::Rts);
    still_clean(&mut d, 1000);
}

/// Malformed 72-byte (version 2) messages.
#[test]
fn malformed_v2_messages_are_refused() {
    let d = dc();
    let good = exchange::ConnInfo::of_dct(&d.dct).unwrap().encode();
    assert_eq!(good.len(), 72);
    let m = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut v = good.to_vec();
        f(&mut v);
        exchange::ConnInfo::decode(&v)
    };
    assert!(m(&|v| v[23] &= !2).is_err(), "no DC flag");
    assert!(
        m(&|v| v[12..16].copy_from_slice(&[0, 0, 0, 0])).is_err(),
        "DCT 0"
    );
    assert!(m(&|v| v[12] = 1).is_err(), "qpn over 24 bits");
    assert!(m(&|v| v[22] = 6).is_err(), "MTU");
    assert!(m(&|v| v[9] = 1).is_err(), "v1 of 72 bytes");
    assert!(m(&|v| v[9] = 3).is_err(), "v3");
    assert!(
        m(&|v| {
            v.pop();
        })
        .is_err(),
        "71 bytes"
    );
    assert!(m(&|v| v.push(0)).is_err(), "73 bytes");
    assert!(m(&|v| v.truncate(10)).is_err(), "10 bytes");
    assert!(m(&|v| v.truncate(3)).is_err(), "3 bytes");
    assert!(m(&|v| v[0] = b'x').is_err(), "magic");
    let back = m(&|_| {}).unwrap();
    assert_eq!(back.dc_key, Some(KEY));
}

/// A DCI of the direct path's largest WQEs (30 SGEs, 512 inline bytes)
/// and one WR: each shape posts and completes, round after round (the
/// ring wraps), and two at once never fit.
#[test]
fn a_dci_of_the_largest_wqes_and_one_wr() {
    let mut d = dc_with(&QpConfig {
        max_send_wr: 1,
        max_send_sge: 30,
        max_inline: 512,
        ..dci_cfg()
    });
    let to = dest(&d.ah, &d.dct);
    let rs = [Sge::new(&d.e.dst, 30000, 64).unwrap()];
    for i in 0..8 {
        d.srq.post_recv(&[RecvWr::new(500 + i, &rs)]).unwrap();
    }
    let sges: Vec<Sge<'_>> = (0..30)
        .map(|i| Sge::new(&d.e.src, i * 16, 16).unwrap())
        .collect();
    let data = [5u8; 512];
    let inl = [Sge::bytes(&data).unwrap()];
    let a = [Sge::new(&d.e.src, 1024, 8).unwrap()];
    for round in 0..24u64 {
        let w = match round % 6 {
            0 => SendWr::rdma_write(round, &sges, remote(&d.e.dst, 0)),
            1 => SendWr::rdma_write(round, &inl, remote(&d.e.dst, 4096)).inline(),
            2 => SendWr::rdma_read(round, &sges, remote(&d.e.dst, 0)),
            3 => SendWr::atomic_fetch_add(round, &a, remote(&d.e.dst, 8192), 1),
            4 => SendWr::rdma_write(round, &inl, remote(&d.e.dst, 4096))
                .inline()
                .imm(7),
            _ => SendWr::rdma_write(round, &sges[..1], remote(&d.e.dst, 0)),
        }
        .signaled();
        let r = d.dci.post_dc(&to, &[w, w]);
        assert!(matches!(r, Err(Error::NeverFits { .. })), "{r:?}");
        d.dci.post_dc(&to, &[w]).unwrap();
        let c = poll_n(&mut d.dci, 1);
        assert_eq!(
            (c[0].wr_id, c[0].status),
            (round, WcStatus::SUCCESS),
            "{c:?}"
        );
    }
    let mut b = [0u8; 512];
    d.e.dst.read(4096, &mut b).unwrap();
    assert_eq!(b, data);
}

/// A DCI on a CQ of few CQEs posting unsignaled WRs: CqFull comes, is
/// cured by polling, and nothing is written on the refusal.
#[test]
fn a_shallow_cq_dci_counts_credits_and_recovers() {
    for depth in [1u32, 2, 3, 4] {
        let mut d = dc_with(&QpConfig {
            cq_depth: Some(depth),
            ..dci_cfg()
        });
        let to = dest(&d.ah, &d.dct);
        let s = [Sge::new(&d.e.src, 0, 8).unwrap()];
        let mut full = 0;
        let t = std::time::Instant::now();
        let mut posted = 0u64;
        while posted < 200 {
            let w = SendWr::rdma_write(posted, &s, remote(&d.e.dst, 0));
            let w = if posted % 3 == 2 { w.signaled() } else { w };
            let batch = [w; 1];
            let before = ring(&d.dci);
            match d.dci.post_dc(&to, &batch) {
                Ok(()) => posted += 1,
                Err(Error::CqFull) | Err(Error::QueueFull) => {
                    assert_eq!(before, ring(&d.dci), "depth {depth}: written");
                    full += 1;
                    let mut wc = [Completion::default(); 4];
                    let _ = d.dci.poll(&mut wc).unwrap();
                    std::thread::yield_now();
                }
                Err(e) => panic!("depth {depth}: {e:?}"),
            }
            assert!(t.elapsed() < PATIENCE, "depth {depth}: stuck at {posted}");
        }
        let _ = full;
        let got = drain(&mut d.dci);
        assert!(got.iter().all(|c| c.status == WcStatus::SUCCESS), "{got:?}");
        // Batches too: of 2 on depth 1 never fit.
        let two = [SendWr::rdma_write(1, &s, remote(&d.e.dst, 0)).signaled(); 2];
        let r = d.dci.post_dc(&to, &two);
        if d.dci.cq_depth() < 2 {
            assert!(matches!(r, Err(Error::NeverFits { .. })), "{r:?}");
        }
    }
}

/// An AH and an SGE of another sim device's PD.
#[test]
fn an_ah_or_mr_of_another_context_is_foreign() {
    let mut d = dc();
    let to = dest(&d.ah, &d.dct);
    let ctx2 = Context::open("sim").unwrap();
    let pd2 = ctx2.alloc_pd().unwrap();
    let ah2 = pd2.create_ah(&d.dci.av_to(&d.dct.endpoint())).unwrap();
    let mr2 = pd2.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let s = [Sge::new(&d.e.src, 0, 8).unwrap()];
    let s2 = [Sge::new(&mr2, 0, 8).unwrap()];
    let before = ring(&d.dci);
    let r = d.dci.post_dc(
        &DcDest { ah: &ah2, ..to },
        &[SendWr::rdma_write(1, &s, remote(&d.e.dst, 0))],
    );
    assert!(matches!(r, Err(Error::ForeignPd { .. })), "{r:?}");
    let r = d
        .dci
        .post_dc(&to, &[SendWr::rdma_write(2, &s2, remote(&d.e.dst, 0))]);
    assert!(matches!(r, Err(Error::ForeignPd { .. })), "{r:?}");
    assert_eq!(before, ring(&d.dci));
    still_clean(&mut d, 3);
}

/// A DCI whose own CQ compresses CQEs: many completions, then a failure
/// that is seen.
#[test]
fn a_dci_with_cqe_compression_sees_its_failure() {
    let r = std::panic::catch_unwind(|| {
        dc_with(&QpConfig {
            cqe_compression: true,
            ..dci_cfg()
        })
    });
    let Ok(mut d) = r else {
        panic!("creating a DCI with cqe_compression panicked")
    };
    let to = dest(&d.ah, &d.dct);
    let s = [Sge::new(&d.e.src, 0, 8).unwrap()];
    for round in 0..4 {
        let ws: Vec<_> = (0..16)
            .map(|i| SendWr::rdma_write(i, &s, remote(&d.e.dst, 0)).signaled())
            .collect();
        d.dci.post_dc(&to, &ws).unwrap();
        let got = poll_n(&mut d.dci, 16);
        assert!(got.iter().all(|c| c.status == WcStatus::SUCCESS), "{round}");
    }
    let bad = DcDest { key: 0, ..to };
    d.dci
        .post_dc(
            &bad,
            &[SendWr::rdma_write(1, &s, remote(&d.e.dst, 0)).signaled()],
        )
        .unwrap();
    let c = poll_n(&mut d.dci, 1);
    assert_ne!(c[0].status, WcStatus::SUCCESS);
    assert!(d.dci.dci_failed());
}

/// A DCT on an own CQ too shallow for its SRQ's receives: a typed error.
#[test]
fn a_dct_on_a_cq_shallower_than_its_srq_is_refused() {
    let e = env();
    let srq = e.pd.create_srq(16, 1).unwrap();
    for depth in [1u32, 2, 8] {
        let r = e.pd.create_qp_on_srq(
            &QpConfig {
                cq_depth: Some(depth),
                ..dct_cfg()
            },
            &srq,
        );
        assert!(
            matches!(r, Err(Error::SrqCqCredits { .. })),
            "a CQ of {depth} CQEs for an SRQ of 16: {:?}",
            r.err()
        );
    }
    // Deep enough: made, and brought up.
    let mut t =
        e.pd.create_qp_on_srq(
            &QpConfig {
                cq_depth: Some(64),
                ..dct_cfg()
            },
            &srq,
        )
        .unwrap();
    t.ready_dct().unwrap();
}

/// A DCI addressing the number of a QP that is not a DCT (an RC QP in
/// RTS, a UD QP, another DCI, itself): the WR fails, nothing lands.
#[test]
fn a_dct_number_that_is_another_kind_of_qp_fails_and_touches_nothing() {
    let mut d = dc();
    let to = dest(&d.ah, &d.dct);
    let mut a = d.e.pd.create_qp(&QpConfig::default()).unwrap();
    let mut b = d.e.pd.create_qp(&QpConfig::default()).unwrap();
    Qp::connect_loopback(&mut a, &mut b).unwrap();
    let mut ud =
        d.e.pd
            .create_qp(&QpConfig {
                qp_type: QpType::Ud,
                ..QpConfig::default()
            })
            .unwrap();
    ud.ready_ud(0x1111).unwrap();
    let mut other = d.e.pd.create_qp(&dci_cfg()).unwrap();
    other.ready_dci().unwrap();
    let r = [Sge::new(&d.e.dst, 0, 64).unwrap()];
    b.post_recv(&[RecvWr::new(1, &r)]).unwrap();
    d.e.src.write(0, &[0xaa; 8]).unwrap();
    let s = [Sge::new(&d.e.src, 0, 8).unwrap()];
    for (what, n) in [
        ("RC", b.qp_num()),
        ("UD", ud.qp_num()),
        ("DCI", other.qp_num()),
        ("itself", d.dci.qp_num()),
    ] {
        d.e.dst.write(100, &[0u8; 8]).unwrap();
        let bad = DcDest { dctn: n, ..to };
        d.dci
            .post_dc(
                &bad,
                &[
                    SendWr::rdma_write(1, &s, remote(&d.e.dst, 100)).signaled(),
                    SendWr::send(2, &s).signaled(),
                ],
            )
            .unwrap();
        let c = poll_n(&mut d.dci, 2);
        assert!(
            c.iter().all(|c| c.status != WcStatus::SUCCESS),
            "{what}: {c:?}"
        );
        let mut got = [1u8; 8];
        d.e.dst.read(100, &mut got).unwrap();
        assert_eq!(got, [0u8; 8], "{what}: the WRITE landed");
        assert!(drain(&mut b).is_empty(), "{what}: the RC QP received");
        assert!(drain(&mut ud).is_empty(), "{what}: the UD QP received");
        d.dci.reset_dci().unwrap();
    }
    still_clean(&mut d, 9);
}

/// A DCT of one PD, an rkey of an MR of another PD (one context): the
/// DCT refuses the access; nothing lands.
#[test]
fn an_rkey_of_another_pd_than_the_dcts_is_refused_at_the_target() {
    let mut d = dc();
    let to = dest(&d.ah, &d.dct);
    let pd2 = d.e.ctx.alloc_pd().unwrap();
    let mr2 = pd2
        .alloc_mr(
            4096,
            Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
        )
        .unwrap();
    mr2.write(0, &[0u8; 16]).unwrap();
    d.e.src.write(0, &[0xbb; 8]).unwrap();
    let s = [Sge::new(&d.e.src, 0, 8).unwrap()];
    let w = SendWr::rdma_write(1, &s, remote(&mr2, 0)).signaled();
    d.dci.post_dc(&to, &[w]).unwrap();
    let c = poll_n(&mut d.dci, 1);
    assert_eq!(c[0].status, WcStatus::REM_ACCESS_ERR, "{c:?}");
    let mut got = [1u8; 8];
    mr2.read(0, &mut got).unwrap();
    assert_eq!(got, [0u8; 8], "landed in another PD's MR");
}

/// A DCT of another PD than the DCI (one context): DC crosses PDs only
/// through the key; the DCT's PD rules its rkeys.
#[test]
fn a_dci_and_a_dct_of_different_pds() {
    let e = env();
    let pd2 = e.ctx.alloc_pd().unwrap();
    let mut srq = pd2.create_srq(4, 1).unwrap();
    let mut dct = pd2.create_qp_on_srq(&dct_cfg(), &srq).unwrap();
    dct.ready_dct().unwrap();
    let mr2 = pd2
        .alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let mut dci = e.pd.create_qp(&dci_cfg()).unwrap();
    dci.ready_dci().unwrap();
    let ah = e.pd.create_ah(&dci.av_to(&dct.endpoint())).unwrap();
    let to = DcDest {
        ah: &ah,
        dctn: dct.dct_number().unwrap(),
        key: KEY,
    };
    e.src.write(0, &[0xcc; 8]).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    // An rkey of the DCI's PD (not the DCT's): refused.
    e.dst.write(0, &[0u8; 8]).unwrap();
    dci.post_dc(
        &to,
        &[SendWr::rdma_write(1, &s, remote(&e.dst, 0)).signaled()],
    )
    .unwrap();
    let c = poll_n(&mut dci, 1);
    assert_eq!(c[0].status, WcStatus::REM_ACCESS_ERR, "{c:?}");
    let mut got = [1u8; 8];
    e.dst.read(0, &mut got).unwrap();
    assert_eq!(got, [0u8; 8]);
    dci.reset_dci().unwrap();
    // The DCT's PD's rkey: lands.
    dci.post_dc(
        &to,
        &[SendWr::rdma_write(2, &s, remote(&mr2, 0)).signaled()],
    )
    .unwrap();
    assert_eq!(poll_n(&mut dci, 1)[0].status, WcStatus::SUCCESS);
    mr2.read(0, &mut got).unwrap();
    assert_eq!(got, [0xcc; 8]);
    let _ = &mut srq;
}
