//! A break-it review of `Qp::post_write`'s SQ gate, the SGE PD tag, the
//! slot bookkeeping and the u32 send counts (commit 66cfb43), on the sim.

use rdma_direct::testing::QpHooks;
use rdma_direct::*;

#[path = "support/one_opcode.rs"]
mod support;
use support::*;

fn attr_init() -> QpAttr {
    QpAttr::init(1, Access::all())
}

/// post_write is refused with QpState, nothing written, in RESET, INIT and
/// RTR (the gate closed), posts in RTS, and is refused again after a modify
/// back to RESET (with WRs outstanding), then posts after reconnecting.
#[test]
fn gate_closed_outside_rts_and_err() {
    let e = env();
    let c = cfg(8, 64);
    let r = to(&e.dst, 0);
    let g = WriteWr::new(1, Sge::new(&e.src, 0, 8).unwrap(), r);
    let mut a = e.pd.create_qp(&c).unwrap();
    let mut p = e.pd.create_qp(&c).unwrap();
    let st = |q: &mut Qp, what: &str| {
        let e1 = refused_at(q, what, |q| q.post_write(&g));
        assert!(matches!(e1, Error::QpState { .. }), "{what}: {e1:?}");
        let e1 = refused_at(q, what, |q| q.post_write(&g.signaled()));
        assert!(matches!(e1, Error::QpState { .. }), "{what}: {e1:?}");
    };
    st(&mut a, "RESET");
    a.modify(QpState::Init, &attr_init()).unwrap();
    st(&mut a, "INIT");
    p.modify(QpState::Init, &attr_init()).unwrap();
    let (ea, ep) = (a.endpoint(), p.endpoint());
    a.modify(QpState::Rtr, &a.rtr_attr(&ep, 7)).unwrap();
    st(&mut a, "RTR");
    p.modify(QpState::Rtr, &p.rtr_attr(&ea, 9)).unwrap();
    p.modify(QpState::Rts, &QpAttr::rts(7, 7)).unwrap();
    a.modify(QpState::Rts, &QpAttr::rts(9, 7)).unwrap();
    for _ in 0..3 {
        a.post_write(&g).unwrap();
    }
    a.post_write(&WriteWr { wr_id: 42, ..g }.signaled())
        .unwrap();
    assert_eq!(poll_n(&mut a, 1)[0].wr_id, 42);
    for _ in 0..3 {
        a.post_write(&g).unwrap();
    }
    a.modify(QpState::Reset, &QpAttr::default()).unwrap();
    st(&mut a, "RESET after RTS, 3 outstanding");
    p.modify(QpState::Reset, &QpAttr::default()).unwrap();
    Qp::connect_loopback(&mut a, &mut p).unwrap();
    // The full limit is free again after the RESET.
    for i in 0..8 {
        a.post_write(&WriteWr { wr_id: i, ..g }).unwrap();
    }
    let e1 = refused_by(&mut a, |q| q.post_write(&g));
    assert!(matches!(e1, Error::QueueFull), "{e1:?}");
}

/// Exactly max_send_wr post_writes are taken (unsignaled, signaled, and
/// mixed with multi-WQEBB post_sends); the next is QueueFull with nothing
/// written; polling frees exactly what completed.
#[test]
fn post_write_respects_max_send_wr_exactly() {
    let e = env();
    let r = to(&e.dst, 0);
    let sg = Sge::new(&e.src, 0, 8).unwrap();
    let d = [3u8; 200];
    let by = [Sge::bytes(&d).unwrap()];
    for send in [1u32, 2, 3, 5, 7, 8, 16, 63, 64, 100, 128] {
        for kind in 0..3 {
            let (mut a, _b) = e.pd.create_connected_pair(&cfg(send, 220)).unwrap();
            for i in 0..send as u64 {
                let w = WriteWr::new(i, sg, r);
                match kind {
                    0 => a.post_write(&w).unwrap(),
                    1 => a.post_write(&w.signaled()).unwrap(),
                    // Every other one an inline post_send of 4 WQEBBs.
                    _ if i % 2 == 0 => a
                        .post_send(&[SendWr::rdma_write(i, &by, r).inline()])
                        .unwrap(),
                    _ => a.post_write(&w).unwrap(),
                }
            }
            for w in [WriteWr::new(99, sg, r), WriteWr::new(99, sg, r).signaled()] {
                let e1 = refused_at(&mut a, &format!("send {send} kind {kind}"), |q| {
                    q.post_write(&w)
                });
                assert!(matches!(e1, Error::QueueFull), "send {send}: {e1:?}");
                let e2 = refused_by(&mut a, |q| q.post_send(&[w.to_send_wr()]));
                assert_eq!(format!("{e1:?}"), format!("{e2:?}"));
            }
            // Signaled: every WR completes; then the whole limit again.
            if kind == 1 {
                let got = poll_n(&mut a, send as usize);
                let ids: Vec<u64> = got.iter().map(|c| c.wr_id).collect();
                assert_eq!(ids, (0..send as u64).collect::<Vec<_>>());
                for i in 0..send as u64 {
                    a.post_write(&WriteWr::new(100 + i, sg, r).signaled())
                        .unwrap();
                }
                let e1 = refused_by(&mut a, |q| q.post_write(&WriteWr::new(9, sg, r)));
                assert!(matches!(e1, Error::QueueFull), "send {send}: {e1:?}");
                let got = poll_n(&mut a, send as usize);
                assert!(got.iter().all(|c| c.status == WcStatus::SUCCESS));
                assert!(drain(&mut a).is_empty());
            }
        }
    }
}

/// Posts until refused on `q`, all signaled, via `post`; returns how many
/// were taken and the error.
fn fill(q: &mut Qp, mut post: impl FnMut(&mut Qp, u64) -> Result<()>) -> (u64, Error) {
    for i in 0..10_000u64 {
        let before = q.sq_snapshot().unwrap();
        if let Err(e) = post(q, i) {
            assert_eq!(before, q.sq_snapshot().unwrap(), "refusal wrote ring bytes");
            return (i, e);
        }
    }
    panic!("never refused");
}

/// On a QP of a shared CQ (credits counted), post_write takes a credit per
/// WR: it is refused with CqFull exactly where post_send is, nothing
/// written, and no CQ overrun.
#[test]
fn shared_cq_post_write_counts_credits() {
    let e = env();
    for depth in [1u32, 2, 3, 4, 8] {
        let c = cfg(64, 64);
        let r = to(&e.dst, 0);
        let sg = Sge::new(&e.src, 0, 8).unwrap();
        let mut res = Vec::new();
        for api in 0..2 {
            let mut cq = e.pd.create_shared_cq(depth).unwrap();
            let x = cq.create_qp(&c).unwrap();
            let mut px = e.pd.create_qp(&c).unwrap();
            Qp::connect_loopback(cq.qp_mut(x), &mut px).unwrap();
            let (n, err) = fill(cq.qp_mut(x), |q, i| {
                let w = WriteWr::new(i, sg, r).signaled();
                if api == 0 {
                    q.post_write(&w)
                } else {
                    q.post_send(&[w.to_send_wr()])
                }
            });
            assert!(matches!(err, Error::CqFull), "depth {depth}: {err:?}");
            assert!(n as u32 <= cq.depth(), "depth {depth}: {n} posted");
            // Every posted WR completes, once.
            let mut got = Vec::new();
            let mut wc = [Completion::default(); 16];
            let t = std::time::Instant::now();
            while got.len() < n as usize {
                let k = cq.poll(&mut wc).unwrap();
                got.extend(wc[..k].iter().map(|c| c.wr_id));
                assert!(t.elapsed() < PATIENCE, "{got:?}");
                std::thread::yield_now();
            }
            assert_eq!(got, (0..n).collect::<Vec<_>>());
            res.push(n);
        }
        assert_eq!(res[0], res[1], "depth {depth}: post_write vs post_send");
    }
}

/// A QP whose own CQ is shallower than max_send_wr + max_recv_wr counts
/// credits: post_write refused with CqFull where post_send is.
#[test]
fn shallow_own_cq_post_write_counts_credits() {
    let e = env();
    let r = to(&e.dst, 0);
    let sg = Sge::new(&e.src, 0, 8).unwrap();
    for depth in [1u32, 2, 4, 8, 16] {
        let c = QpConfig {
            cq_depth: Some(depth),
            ..cfg(64, 64)
        };
        let mut res = Vec::new();
        for api in 0..2 {
            let (mut a, _b) = e.pd.create_connected_pair(&c).unwrap();
            let (n, err) = fill(&mut a, |q, i| {
                let w = WriteWr::new(i, sg, r).signaled();
                if api == 0 {
                    q.post_write(&w)
                } else {
                    q.post_send(&[w.to_send_wr()])
                }
            });
            assert!(matches!(err, Error::CqFull), "depth {depth}: {err:?}");
            let got = poll_n(&mut a, n as usize);
            assert_eq!(
                got.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
                (0..n).collect::<Vec<_>>()
            );
            assert!(drain(&mut a).is_empty());
            assert!(
                !a.sim_hook().unwrap().cq_overrun().0,
                "depth {depth}: overrun"
            );
            res.push(n);
        }
        assert_eq!(res[0], res[1], "depth {depth}: post_write vs post_send");
    }
}

/// The `ignore_cq_credits` hook in RESET does not open the gate; once
/// connected, the WR limit still holds exactly (unsignaled posts, so the
/// shallow CQ does not overrun).
#[test]
fn ignore_credits_keeps_the_wr_limit() {
    let e = env();
    let r = to(&e.dst, 0);
    let sg = Sge::new(&e.src, 0, 8).unwrap();
    let c = QpConfig {
        cq_depth: Some(2),
        ..cfg(16, 64)
    };
    // Hook while connected (counted mode -> in place) and while in RESET.
    for when in 0..2 {
        let mut a = e.pd.create_qp(&c).unwrap();
        let mut p = e.pd.create_qp(&c).unwrap();
        if when == 1 {
            a.sim_hook().unwrap().ignore_cq_credits();
            let e1 = refused_by(&mut a, |q| q.post_write(&WriteWr::new(1, sg, r)));
            assert!(matches!(e1, Error::QpState { .. }), "{e1:?}");
        }
        Qp::connect_loopback(&mut a, &mut p).unwrap();
        if when == 0 {
            a.sim_hook().unwrap().ignore_cq_credits();
        }
        a.sq_snapshot().unwrap();
        // Auto-signal (every 8) would make CQEs; turn nothing off: post
        // 16, unpolled, so at most 2 hidden CQEs arrive (depth 2 rounded up).
        for i in 0..16 {
            a.post_write(&WriteWr::new(i, sg, r)).unwrap();
        }
        let e1 = refused_by(&mut a, |q| q.post_write(&WriteWr::new(99, sg, r)));
        assert!(matches!(e1, Error::QueueFull), "when {when}: {e1:?}");
    }
}

/// A random stream of post_write (signaled or not), inline post_sends of
/// 1 to 4 WQEBBs, 3-SGE post_sends (2 WQEBBs) and polls on one QP, the same
/// stream through post_send alone on a twin: the same WQEs, the same
/// refusals (QueueFull at the same points), the same completions.
#[test]
fn mixed_wqebbs_stream_matches_post_send() {
    let e = env();
    for (send, seed) in [(4u32, 1u64), (7, 2), (16, 3), (33, 4)] {
        let c = QpConfig {
            max_send_sge: 3,
            ..cfg(send, 220)
        };
        let (mut a, _pa) = e.pd.create_connected_pair(&c).unwrap();
        let (mut b, _pb) = e.pd.create_connected_pair(&c).unwrap();
        let r = to(&e.dst, 0);
        let mut rng = Rng(seed * 7919);
        let d = [0x5au8; 220];
        let mut from = 0u32;
        let (mut ga, mut gb) = (Vec::new(), Vec::new());
        let mut refusals = 0;
        for step in 0..1500u64 {
            let sg = Sge::new(&e.src, (rng.below(64) * 8) as usize, 8).unwrap();
            let sig = rng.below(5) == 0;
            let kind = if rng.below(2 * send as u64) == 0 {
                9
            } else {
                rng.below(9)
            };
            let (ra, rb) = match kind {
                0..=4 => {
                    let mut w = WriteWr::new(step, sg, r);
                    if sig {
                        w = w.signaled();
                    }
                    (a.post_write(&w), b.post_send(&[w.to_send_wr()]))
                }
                5 | 6 => {
                    let len = [1usize, 28, 29, 92, 93, 156, 157, 220][rng.below(8) as usize];
                    let by = [Sge::bytes(&d[..len]).unwrap()];
                    let mut w = SendWr::rdma_write(step, &by, r).inline();
                    w.signaled = sig;
                    (a.post_send(&[w]), b.post_send(&[w]))
                }
                7 => {
                    let s3 = [sg, sg, sg];
                    let mut w = SendWr::rdma_write(step, &s3, r);
                    w.signaled = sig;
                    (a.post_send(&[w]), b.post_send(&[w]))
                }
                8 => (Ok(()), Ok(())),
                _ => {
                    // Both settle: a signaled marker (the same WR on both),
                    // polled for until it comes, retires everything before it.
                    let m = [sg];
                    let w = SendWr::rdma_write(step, &m, r).signaled();
                    let (ra, rb) = (a.post_send(&[w]), b.post_send(&[w]));
                    if ra.is_ok() && rb.is_ok() {
                        for (q, g) in [(&mut a, &mut ga), (&mut b, &mut gb)] {
                            let t = std::time::Instant::now();
                            let mut wc = [Completion::default(); 16];
                            while g.last().map(|x: &(u64, WcStatus)| x.0) != Some(step) {
                                let k = q.poll(&mut wc).unwrap();
                                g.extend(wc[..k].iter().map(|c| (c.wr_id, c.status)));
                                assert!(t.elapsed() < PATIENCE);
                                std::thread::yield_now();
                            }
                        }
                        assert_eq!(ga, gb, "send {send} step {step}");
                    }
                    (ra, rb)
                }
            };
            assert_eq!(
                format!("{ra:?}"),
                format!("{rb:?}"),
                "send {send} step {step} kind {kind}"
            );
            if ra.is_err() {
                refusals += 1;
                assert!(matches!(ra, Err(Error::QueueFull)), "{ra:?}");
            } else if kind != 8 {
                from = same_wqes_since(&a, &b, from, &format!("send {send} step {step}"));
            }
        }
        assert!(refusals > 0, "send {send}: the queue never filled");
        assert_eq!(ga, gb, "send {send}");
        // Signal one to retire everything, then both drain the same.
        let w = WriteWr::new(9999, Sge::new(&e.src, 0, 8).unwrap(), r).signaled();
        let _ = poll_n(&mut a, 0);
        loop {
            match a.post_write(&w) {
                Ok(()) => break,
                Err(Error::QueueFull) => {
                    let mut wc = [Completion::default(); 16];
                    let k = a.poll(&mut wc).unwrap();
                    ga.extend(wc[..k].iter().map(|c| (c.wr_id, c.status)));
                }
                Err(e) => panic!("{e:?}"),
            }
        }
        loop {
            let mut wc = [Completion::default(); 16];
            let k = a.poll(&mut wc).unwrap();
            ga.extend(wc[..k].iter().map(|c| (c.wr_id, c.status)));
            if ga.last().map(|x| x.0) == Some(9999) {
                break;
            }
            std::thread::yield_now();
        }
        assert!(ga.iter().all(|c| c.1 == WcStatus::SUCCESS), "{ga:?}");
    }
}

/// An MR dropped while post_writes that name it are outstanding stays
/// registered until they retire, after a RESET (counts not rewound) and
/// with other WRs retiring meanwhile; then goes.
#[test]
fn dropped_mr_waits_for_post_write_across_reset() {
    let e = env();
    let c = cfg(8, 64);
    let (mut a, mut p) = e.pd.create_connected_pair(&c).unwrap();
    let r = to(&e.dst, 0);
    let sg = Sge::new(&e.src, 0, 8).unwrap();
    // Some history, then a RESET with WRs outstanding.
    for round in 0..3u64 {
        for i in 0..5 {
            a.post_write(&WriteWr::new(round * 10 + i, sg, r)).unwrap();
        }
        a.post_write(&WriteWr::new(round * 10 + 5, sg, r).signaled())
            .unwrap();
        assert_eq!(poll_n(&mut a, 1)[0].wr_id, round * 10 + 5);
    }
    a.post_write(&WriteWr::new(77, sg, r)).unwrap();
    a.modify(QpState::Reset, &QpAttr::default()).unwrap();
    p.modify(QpState::Reset, &QpAttr::default()).unwrap();
    Qp::connect_loopback(&mut a, &mut p).unwrap();
    let base = e.pd.live_mrs();
    let m = e.pd.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    // A signaled WR before it, completed: does not retire the later one.
    a.post_write(&WriteWr::new(1, sg, r).signaled()).unwrap();
    a.post_write(&WriteWr::new(2, Sge::new(&m, 0, 8).unwrap(), r))
        .unwrap();
    assert_eq!(poll_n(&mut a, 1)[0].wr_id, 1);
    drop(m);
    e.pd.reclaim();
    assert_eq!(
        e.pd.live_mrs(),
        base + 1,
        "dropped while its WR outstanding"
    );
    assert!(drain(&mut a).is_empty());
    e.pd.reclaim();
    assert_eq!(e.pd.live_mrs(), base + 1, "still outstanding (unsignaled)");
    a.post_write(&WriteWr::new(3, sg, r).signaled()).unwrap();
    assert_eq!(poll_n(&mut a, 1)[0].wr_id, 3);
    e.pd.reclaim();
    assert_eq!(e.pd.live_mrs(), base);
}

/// PD tags: SGEs of another PD, of plain bytes, and zero-length ones of a
/// foreign PD or of bytes are refused (Invalid) by every post, receives
/// and owned posts included, nothing written.
#[test]
fn pd_tag_refusals_everywhere() {
    let e = env();
    let c = QpConfig {
        max_recv_wr: 8,
        ..cfg(8, 64)
    };
    let (mut a, _b) = e.pd.create_connected_pair(&c).unwrap();
    let other = e.ctx.alloc_pd().unwrap();
    let om = other.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    let r = to(&e.dst, 0);
    let d = [1u8; 8];
    let e0: [u8; 0] = [];
    let bad = [
        Sge::new(&om, 0, 8).unwrap(),
        Sge::new(&om, 0, 0).unwrap(),
        Sge::bytes(&d).unwrap(),
        Sge::bytes(&e0).unwrap(),
    ];
    for (k, s) in bad.iter().enumerate() {
        let w = WriteWr::new(1, *s, r);
        for sig in [false, true] {
            let w = if sig { w.signaled() } else { w };
            let e1 = refused_at(&mut a, &format!("post_write {k}"), |q| q.post_write(&w));
            assert!(matches!(e1, Error::Invalid(_)), "{k}: {e1:?}");
            let e1 = refused_at(&mut a, &format!("post_writes {k}"), |q| {
                q.post_writes(&[WriteWr::new(0, Sge::new(&e.src, 0, 8).unwrap(), r), w])
            });
            assert!(matches!(e1, Error::Invalid(_)), "{k}: {e1:?}");
            let sends = [*s];
            for sw in [
                SendWr::rdma_write(1, &sends, r),
                SendWr::send(1, &sends),
                SendWr::rdma_read(1, &sends, r),
            ] {
                let e1 = refused_at(&mut a, &format!("post_send {k}"), |q| q.post_send(&[sw]));
                assert!(matches!(e1, Error::Invalid(_)), "{k}: {e1:?}");
            }
        }
        let rs = [*s];
        let e1 = a.post_recv(&[RecvWr::new(1, &rs)]).unwrap_err();
        assert!(matches!(e1, Error::Invalid(_)), "recv {k}: {e1:?}");
    }
    // Owned posts of a buffer of another PD.
    let ob = other.reg_local(4096, Access::LOCAL_WRITE).unwrap();
    let Err(f) = a.post_send_owned(&SendWr::rdma_write(1, &[], r), ob, 0, 8) else {
        panic!("an owned send of another PD's buffer was posted");
    };
    assert!(matches!(f.error, Error::Invalid(_)), "{:?}", f.error);
    let ob = other.reg_local(4096, Access::LOCAL_WRITE).unwrap();
    let Err(f) = a.post_recv_owned(1, ob, 0, 8) else {
        panic!("an owned receive of another PD's buffer was posted");
    };
    assert!(matches!(f.error, Error::Invalid(_)), "{:?}", f.error);
    // And the QP still posts.
    a.post_write(&WriteWr::new(5, Sge::new(&e.src, 0, 8).unwrap(), r).signaled())
        .unwrap();
    assert_eq!(poll_n(&mut a, 1)[0].wr_id, 5);
}

/// Many PDs: every id is below 2^31 and not BYTES_PD, so an SGE of one PD
/// never passes as one of another (each refused on the others' QPs).
#[test]
fn many_pds_stay_apart() {
    let ctx = Context::open("sim").unwrap();
    let pds: Vec<Pd> = (0..6).map(|_| ctx.alloc_pd().unwrap()).collect();
    let mrs: Vec<Mr> = pds
        .iter()
        .map(|p| {
            p.reg_mr(
                4096,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            )
            .unwrap()
        })
        .collect();
    for (i, pd) in pds.iter().enumerate() {
        let (mut a, _b) = pd.create_connected_pair(&cfg(8, 64)).unwrap();
        let r = to(&mrs[i], 0);
        for (j, m) in mrs.iter().enumerate() {
            let w = WriteWr::new(j as u64, Sge::new(m, 0, 8).unwrap(), r).signaled();
            if i == j {
                a.post_write(&w).unwrap();
                assert_eq!(poll_n(&mut a, 1)[0].wr_id, j as u64);
            } else {
                let e1 = refused_by(&mut a, |q| q.post_write(&w));
                assert!(matches!(e1, Error::Invalid(_)), "{i} {j}: {e1:?}");
            }
        }
    }
}

/// The ctrl segment post_write stores: opcode 0x08, the WQE index, this
/// QP's QPN (bytes 4..7, not masked as the twin comparisons mask it), DS 3,
/// on several QPs and across the ring's wrap.
#[test]
fn post_write_ctrl_names_its_own_qp() {
    let e = env();
    let r = to(&e.dst, 0);
    let sg = Sge::new(&e.src, 0, 8).unwrap();
    let mut keep = Vec::new();
    for _ in 0..3 {
        let (mut a, b) = e.pd.create_connected_pair(&cfg(4, 0)).unwrap();
        for i in 0..40u32 {
            a.post_write(&WriteWr::new(i as u64, sg, r).signaled())
                .unwrap();
            let s = a.sq_snapshot().unwrap();
            let ring = s.len() - 4;
            let at = (i as usize * 64) % ring;
            let w = &s[at..at + 16];
            assert_eq!(w[3], 0x08, "opcode");
            assert_eq!(u16::from_be_bytes([w[1], w[2]]), i as u16, "wqe index");
            assert_eq!(w[4..7], qpn_bytes(&a), "qpn");
            assert_eq!(w[7], 3, "ds");
            assert_eq!(poll_n(&mut a, 1)[0].status, WcStatus::SUCCESS);
        }
        keep.push((a, b));
    }
}

/// A QP the device moved to ERR (a WRITE to a bad rkey), this crate still
/// in RTS: post_write is flushed as post_send's WR is, each signaled one
/// reported once.
#[test]
fn post_write_after_device_error_is_flushed() {
    let e = env();
    let (mut a, _b) = e.pd.create_connected_pair(&cfg(8, 64)).unwrap();
    let sg = Sge::new(&e.src, 0, 8).unwrap();
    let bad = RemoteAddr {
        addr: e.dst.addr(),
        rkey: Rkey(e.dst.rkey().0 ^ 0x5555),
    };
    a.post_write(&WriteWr::new(1, sg, bad).signaled()).unwrap();
    let c = poll_n(&mut a, 1);
    assert_ne!(c[0].status, WcStatus::SUCCESS, "{c:?}");
    let r = to(&e.dst, 0);
    a.post_write(&WriteWr::new(2, sg, r)).unwrap();
    a.post_write(&WriteWr::new(3, sg, r).signaled()).unwrap();
    a.post_send(&[WriteWr::new(4, sg, r).signaled().to_send_wr()])
        .unwrap();
    // Until WR 4's completion, then whatever else comes: the unsignaled WR
    // 2 may be flushed with a CQE of its own or not (it depends on when
    // the device saw it), so once or never; 3 and 4 once each, in order.
    let mut got = Vec::new();
    while !got.iter().any(|c: &Completion| c.wr_id == 4) {
        got.extend(poll_n(&mut a, 1));
    }
    got.extend(drain(&mut a));
    let ids: Vec<u64> = got.iter().map(|c| c.wr_id).collect();
    assert!(ids == [3, 4] || ids == [2, 3, 4], "{got:?}");
    assert!(
        got.iter().all(|c| c.status == WcStatus::WR_FLUSH_ERR),
        "{got:?}"
    );
}
