//! DC through the public API on the sim: a DCT on an SRQ and DCIs
//! addressing it (`Qp::ready_dct`, `Qp::ready_dci`, `Qp::post_dc`), every
//! RC operation over DC, the DCT number only from RTR, bad addresses
//! failing the DCI, a failed DCI refused until reset, and refusals that
//! write nothing.

use rdma_direct::*;

#[path = "support/sim.rs"]
mod sim;
use sim::*;

const KEY: u64 = 0x0123_4567_89ab_cdef;

fn dct_cfg() -> QpConfig {
    QpConfig {
        qp_type: QpType::Dct,
        dc_key: KEY,
        ..QpConfig::default()
    }
}

fn dci_cfg() -> QpConfig {
    QpConfig {
        qp_type: QpType::Dci,
        max_send_wr: 16,
        max_send_sge: 2,
        max_inline: 64,
        ..QpConfig::default()
    }
}

struct Dc {
    e: Env,
    srq: Srq,
    dct: Qp,
    dci: Qp,
    ah: Ah,
}

/// A DCT (in RTR, on an SRQ of 16 receives) and a DCI (in RTS) of one PD.
fn dc() -> Dc {
    let e = env();
    let srq = e.pd.create_srq(16, 1).unwrap();
    let mut dct = e.pd.create_qp_on_srq(&dct_cfg(), &srq).unwrap();
    assert_eq!(dct.dct_number(), None, "no DCT number in RESET");
    dct.ready_dct().unwrap();
    assert_eq!(dct.state(), QpState::Rtr);
    let mut dci = e.pd.create_qp(&dci_cfg()).unwrap();
    dci.ready_dci().unwrap();
    let ah = e.pd.create_ah(&dci.av_to(&dct.endpoint())).unwrap();
    Dc {
        e,
        srq,
        dct,
        dci,
        ah,
    }
}

/// The DCT `dct` through `ah`, with the right key.
fn dest<'a>(ah: &'a Ah, dct: &Qp) -> DcDest<'a> {
    DcDest {
        ah,
        dctn: dct.dct_number().unwrap(),
        key: KEY,
    }
}

#[test]
fn the_dct_number_exists_from_rtr_and_is_the_endpoints_qpn() {
    let d = dc();
    let n = d.dct.dct_number().unwrap();
    assert!(n != 0 && n <= 0xff_ffff);
    assert_eq!(d.dct.endpoint().qpn, n);
    // Not a DCT: none.
    assert_eq!(d.dci.dct_number(), None);
}

#[test]
fn every_rc_operation_runs_over_dc() {
    let mut d = dc();
    let dest = dest(&d.ah, &d.dct);
    // WRITE, WRITE with immediate (consumes a receive), SEND, SEND with
    // immediate, READ, both atomics.
    let rsges: Vec<[Sge; 1]> = (0..4)
        .map(|i| [Sge::new(&d.e.dst, 4096 + i * 256, 256).unwrap()])
        .collect();
    for (i, s) in rsges.iter().enumerate() {
        d.srq.post_recv(&[RecvWr::new(100 + i as u64, s)]).unwrap();
    }
    d.e.src.write(0, &[7u8; 64]).unwrap();
    d.e.dst.write(1024, &[0u8; 8]).unwrap();
    d.e.dst.write(2048, &5u64.to_ne_bytes()).unwrap();
    let s64 = [Sge::new(&d.e.src, 0, 64).unwrap()];
    let r8 = [Sge::new(&d.e.src, 512, 8).unwrap()];
    let wrs = [
        SendWr::rdma_write(1, &s64, remote(&d.e.dst, 0)).signaled(),
        SendWr::rdma_write(2, &s64, remote(&d.e.dst, 64))
            .imm(0xabc)
            .signaled(),
        SendWr::send(3, &s64).signaled(),
        SendWr::send(4, &s64).imm(0xdef).signaled(),
        SendWr::rdma_read(5, &r8, remote(&d.e.dst, 0)).signaled(),
    ];
    d.dci.post_dc(&dest, &wrs).unwrap();
    let got = poll_n(&mut d.dci, 5);
    assert!(got.iter().all(|c| c.status == WcStatus::SUCCESS), "{got:?}");
    assert_eq!(
        got.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    let mut b = [0u8; 8];
    d.e.src.read(512, &mut b).unwrap();
    assert_eq!(b, [7u8; 8], "the READ brought the WRITE's bytes back");
    let recvd = poll_n(&mut d.dct, 3);
    assert!(recvd.iter().all(|c| c.status == WcStatus::SUCCESS));
    assert!(
        recvd.iter().all(|c| c.src_qp.qpn() == d.dci.qp_num()),
        "each receive names the DCI: {recvd:?}"
    );
    assert_eq!(
        recvd.iter().map(|c| c.imm).collect::<Vec<_>>(),
        [Some(0xabc), None, Some(0xdef)]
    );
    // Atomics, one WR each.
    let a = [Sge::new(&d.e.src, 600, 8).unwrap()];
    d.dci
        .post_dc(
            &dest,
            &[SendWr::atomic_fetch_add(6, &a, remote(&d.e.dst, 2048), 3).signaled()],
        )
        .unwrap();
    poll_n(&mut d.dci, 1);
    d.dci
        .post_dc(
            &dest,
            &[SendWr::atomic_cmp_swp(7, &a, remote(&d.e.dst, 2048), 8, 42).signaled()],
        )
        .unwrap();
    let c = poll_n(&mut d.dci, 1);
    assert_eq!(c[0].status, WcStatus::SUCCESS);
    d.e.dst.read(2048, &mut b).unwrap();
    assert_eq!(u64::from_ne_bytes(b), 42);
}

#[test]
fn a_wrong_key_an_unknown_dct_and_dct_zero_fail_the_dci_until_it_is_reset() {
    let mut d = dc();
    let n = d.dct.dct_number().unwrap();
    let s = [Sge::new(&d.e.src, 0, 8).unwrap()];
    for (dctn, key) in [(n, KEY ^ 1), (n + 1000, KEY), (0, KEY)] {
        let bad = DcDest {
            ah: &d.ah,
            dctn,
            key,
        };
        d.e.dst.write(0, &[0u8; 8]).unwrap();
        d.e.src.write(0, &[9u8; 8]).unwrap();
        d.dci
            .post_dc(
                &bad,
                &[SendWr::rdma_write(1, &s, remote(&d.e.dst, 0)).signaled()],
            )
            .unwrap();
        let c = poll_n(&mut d.dci, 1);
        assert_eq!(c[0].status, WcStatus::RETRY_EXC_ERR, "{dctn:#x} {key:#x}");
        assert!(d.dci.dci_failed());
        let mut b = [1u8; 8];
        d.e.dst.read(0, &mut b).unwrap();
        assert_eq!(b, [0u8; 8], "nothing delivered");
        let good = dest(&d.ah, &d.dct);
        match d.dci.post_dc(
            &good,
            &[SendWr::rdma_write(2, &s, remote(&d.e.dst, 0)).signaled()],
        ) {
            Err(Error::QpState {
                state: QpState::Err,
                ..
            }) => {}
            r => panic!("a failed DCI must refuse posts: {r:?}"),
        }
        d.dci.reset_dci().unwrap();
        assert!(!d.dci.dci_failed());
        d.dci
            .post_dc(
                &good,
                &[SendWr::rdma_write(3, &s, remote(&d.e.dst, 0)).signaled()],
            )
            .unwrap();
        let c = poll_n(&mut d.dci, 1);
        assert_eq!((c[0].wr_id, c[0].status), (3, WcStatus::SUCCESS));
        d.e.dst.read(0, &mut b).unwrap();
        assert_eq!(b, [9u8; 8]);
        assert_eq!(d.dct.state(), QpState::Rtr, "the DCT serves on");
    }
}

#[test]
fn refusals_write_nothing() {
    let mut d = dc();
    let s = [Sge::new(&d.e.src, 0, 8).unwrap()];
    let w = [SendWr::rdma_write(1, &s, remote(&d.e.dst, 0)).signaled()];
    let dest = dest(&d.ah, &d.dct);
    // A DCI's WR without its target.
    assert!(matches!(
        d.dci.post_send(&w),
        Err(Error::WrongTransport {
            qp_type: QpType::Dci,
            ..
        })
    ));
    // A DCT number over 24 bits.
    let wide = DcDest {
        dctn: 1 << 24,
        ..dest
    };
    assert!(matches!(
        d.dci.post_dc(&wide, &w),
        Err(Error::Config { .. })
    ));
    // A UD send on a DCI; an AH of another PD.
    let pd2 = d.e.ctx.alloc_pd().unwrap();
    let ah2 = pd2.create_ah(&d.dci.av_to(&d.dct.endpoint())).unwrap();
    let foreign = DcDest { ah: &ah2, ..dest };
    assert!(matches!(
        d.dci.post_dc(&foreign, &w),
        Err(Error::ForeignPd { .. })
    ));
    // A DCT sends nothing; an RC QP has no post_dc.
    assert!(matches!(
        d.dct.post_send(&w),
        Err(Error::WrongTransport { .. })
    ));
    let mut rc = d.e.pd.create_qp(&QpConfig::default()).unwrap();
    assert!(matches!(
        rc.post_dc(&dest, &w),
        Err(Error::WrongTransport { .. })
    ));
    // A DC QP is not split.
    assert!(matches!(d.dci.split(), Err(Error::WrongTransport { .. })));
    // Nothing went out: the DCI's next WR is the first to complete.
    assert_eq!(d.dci.poll(&mut [Completion::default(); 4]).unwrap(), 0);
    d.dci
        .post_dc(
            &dest,
            &[SendWr::rdma_write(9, &s, remote(&d.e.dst, 0)).signaled()],
        )
        .unwrap();
    assert_eq!(poll_n(&mut d.dci, 1)[0].wr_id, 9);
}

#[test]
fn a_dci_not_in_rts_refuses_posts_and_dc_qps_need_their_shape() {
    let e = env();
    let srq = e.pd.create_srq(4, 1).unwrap();
    let mut dct = e.pd.create_qp_on_srq(&dct_cfg(), &srq).unwrap();
    dct.ready_dct().unwrap();
    let mut dci = e.pd.create_qp(&dci_cfg()).unwrap();
    let ah = e.pd.create_ah(&dci.av_to(&dct.endpoint())).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let dest = DcDest {
        ah: &ah,
        dctn: dct.dct_number().unwrap(),
        key: KEY,
    };
    let w = [SendWr::rdma_write(1, &s, remote(&e.dst, 0))];
    assert!(matches!(
        dci.post_dc(&dest, &w),
        Err(Error::QpState {
            state: QpState::Reset,
            ..
        })
    ));
    // A DCT without an SRQ, a DCI on one, a DCT moved on to RTS.
    assert!(matches!(e.pd.create_qp(&dct_cfg()), Err(Error::Invalid(_))));
    assert!(matches!(
        e.pd.create_qp_on_srq(&dci_cfg(), &srq),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        dct.modify(QpState::Rts, &QpAttr::rts(0, 7)),
        Err(Error::QpAttr { .. })
    ));
    // ready_* on the wrong type.
    assert!(matches!(dct.ready_dci(), Err(Error::WrongTransport { .. })));
    assert!(matches!(dci.ready_dct(), Err(Error::WrongTransport { .. })));
}

/// A DCI in RTS, `max_send_wr` 8 (a ring that DC's two-WQEBB WQEs wrap),
/// on a CQ of `cq_depth` CQEs (a shallow one counts credits).
fn dci(pd: &Pd, cq_depth: Option<u32>) -> Qp {
    let mut q = pd
        .create_qp(&QpConfig {
            max_send_wr: 8,
            cq_depth,
            ..dci_cfg()
        })
        .unwrap();
    q.ready_dci().unwrap();
    q
}

#[test]
fn in_place_dc_posts_write_what_the_counted_and_checked_posts_write() {
    let d = dc();
    let pd = &d.e.pd;
    let mut fast = dci(pd, None);
    let mut counted = dci(pd, Some(4));
    let mut checked = dci(pd, None);
    let to = dest(&d.ah, &d.dct);
    let lens = [1u32, 8, 64, 1000];
    let sges: Vec<[Sge; 1]> = lens
        .iter()
        .map(|&l| [Sge::new(&d.e.src, 0, l).unwrap()])
        .collect();
    let nth = |i: u64| {
        let s = &sges[i as usize % sges.len()];
        let at = remote(&d.e.dst, 16384 + (i % 8) * 1024);
        let w = match i % 4 {
            0 => SendWr::rdma_write(i, s, at),
            1 => SendWr::rdma_write(i, s, at).solicited(),
            2 => SendWr::rdma_read(i, s, at),
            _ => SendWr::rdma_write(i, s, at).fence(),
        };
        if i.is_multiple_of(2) {
            w.signaled()
        } else {
            w
        }
    };
    // Rounds of two WRs: single posts on `fast` and `counted`, a batch of
    // two (the checked path) on `checked`; polled between rounds so that
    // the ring wraps many times.
    for round in 0..40u64 {
        let (w1, w2) = (nth(2 * round), nth(2 * round + 1));
        for q in [&mut fast, &mut counted] {
            q.post_dc(&to, &[w1]).unwrap();
            q.post_dc(&to, &[w2]).unwrap();
        }
        checked.post_dc(&to, &[w1, w2]).unwrap();
        assert_same_wqes(&fast, &checked);
        for q in [&mut fast, &mut counted, &mut checked] {
            let c = poll_n(q, 1);
            assert_eq!(c[0].status, WcStatus::SUCCESS, "round {round}: {c:?}");
        }
    }
}

#[test]
fn the_exchange_publishes_a_dct_only_in_rtr() {
    let e = env();
    let srq = e.pd.create_srq(4, 1).unwrap();
    let mut dct = e.pd.create_qp_on_srq(&dct_cfg(), &srq).unwrap();
    assert!(matches!(
        exchange::ConnInfo::of_dct(&dct),
        Err(Error::QpState {
            state: QpState::Reset,
            ..
        })
    ));
    dct.ready_dct().unwrap();
    let info = exchange::ConnInfo::of_dct(&dct).unwrap();
    assert_eq!(info.endpoint.qpn, dct.dct_number().unwrap());
    assert_eq!(info.dc_key, Some(KEY));
    let back = exchange::ConnInfo::decode(&info.encode()).unwrap();
    assert_eq!(back, info);
    let rc = e.pd.create_qp(&QpConfig::default()).unwrap();
    assert!(matches!(
        exchange::ConnInfo::of_dct(&rc),
        Err(Error::WrongTransport { .. })
    ));
}
