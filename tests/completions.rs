//! Completions of the one-opcode posts and `Qp::post_send`, on the sim:
//! CQ credits on shallow own CQs and on shared CQs (`CqFull`, never an
//! overrun; the `ignore_cq_credits` hook), batches behind unsignaled WRs
//! that need a signaled one, error CQEs and the flushes after them, a
//! shared-CQ member reset with WRs outstanding, and MRs that wait for the
//! completions of the WRs naming them.

use rdma_direct::testing::QpHooks;
use rdma_direct::*;
use std::time::{Duration, Instant};

#[path = "support/posts.rs"]
mod support;
use support::*;

// ---------------------------------------------------------------------
// CQ credits
// ---------------------------------------------------------------------

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

/// Two QPs on one shallow shared CQ through the three APIs: CqFull comes,
/// polling cures it, every signaled wr_id comes once, no hidden one.
#[test]
fn shared_cq_credits() {
    let e = env();
    for (send, depth) in [(2u32, 2u32), (4, 3), (8, 4), (16, 8)] {
        let c = cfg(send, 64);
        let mut cq = e.pd.create_shared_cq(depth).unwrap();
        let x = cq.create_qp(&c).unwrap();
        let y = cq.create_qp(&c).unwrap();
        let (mut px, mut py) = (e.pd.create_qp(&c).unwrap(), e.pd.create_qp(&c).unwrap());
        Qp::connect_loopback(cq.qp_mut(x), &mut px).unwrap();
        Qp::connect_loopback(cq.qp_mut(y), &mut py).unwrap();
        let r = to(&e.dst, 0);
        let sg = Sge::new(&e.src, 0, 16).unwrap();
        let mut rng = Rng(depth as u64 * 99 + send as u64);
        let mut want: Vec<u64> = Vec::new();
        let mut seen: Vec<u64> = Vec::new();
        let mut fulls = 0;
        let mut wc = [Completion::default(); 16];
        let mut id = 0u64;
        let mut invalid = 0;
        for _ in 0..400 {
            let q = if rng.below(2) == 0 { x } else { y };
            let sig = rng.below(4) == 0;
            let f = if sig {
                SendFlags::SIGNALED
            } else {
                SendFlags::empty()
            };
            id += 1;
            let kind = rng.below(4);
            // (At most depth / 2 + 1: see `lockstep`.)
            let n = 1 + rng.below(send.min(depth / 2 + 1) as u64) as usize;
            let t = Instant::now();
            loop {
                let r = match kind {
                    0 => cq.qp_mut(q).post_write(&WriteWr {
                        wr_id: id,
                        sge: sg,
                        remote: r,
                        flags: f,
                    }),
                    1 => cq.qp_mut(q).post_write_inline(id, b"hello", r, f),
                    2 => {
                        let v: Vec<WriteWr<'_>> = (0..n)
                            .map(|k| WriteWr {
                                wr_id: id * 1000 + k as u64,
                                sge: sg,
                                remote: r,
                                flags: f,
                            })
                            .collect();
                        cq.qp_mut(q).post_writes(&v)
                    }
                    _ => cq.qp_mut(q).post_send(&[WriteWr {
                        wr_id: id,
                        sge: sg,
                        remote: r,
                        flags: f,
                    }
                    .to_send_wr()]),
                };
                match r {
                    Ok(()) => {
                        if sig {
                            if kind == 2 {
                                want.extend((0..n).map(|k| id * 1000 + k as u64));
                            } else {
                                want.push(id);
                            }
                        }
                        break;
                    }
                    Err(Error::CqFull | Error::QueueFull) => {
                        fulls += 1;
                        let k = cq.poll(&mut wc).unwrap();
                        for c in &wc[..k] {
                            assert!(c.status.is_ok(), "{c:?}");
                            seen.push(c.wr_id);
                        }
                        if k == 0 {
                            std::thread::yield_now();
                        }
                    }
                    Err(m @ Error::NeverFits { .. }) => {
                        // A batch that can never fit the CQ.
                        invalid += 1;
                        assert!(kind == 2, "{m}");
                        break;
                    }
                    Err(x) => panic!("{x:?}"),
                }
                assert!(
                    t.elapsed() < PATIENCE,
                    "send {send} depth {depth}: stuck at {id} kind {kind} n {n}"
                );
            }
        }
        // Flush each QP's tail.
        for q in [x, y] {
            id += 1;
            let t = Instant::now();
            while let Err(x) = cq.qp_mut(q).post_write(&WriteWr {
                wr_id: id,
                sge: sg,
                remote: r,
                flags: SendFlags::SIGNALED,
            }) {
                assert!(matches!(x, Error::CqFull | Error::QueueFull), "{x:?}");
                let k = cq.poll(&mut wc).unwrap();
                seen.extend(wc[..k].iter().map(|c| c.wr_id));
                std::thread::yield_now();
                assert!(t.elapsed() < PATIENCE);
            }
            want.push(id);
        }
        let t = Instant::now();
        while seen.len() < want.len() {
            let k = cq.poll(&mut wc).unwrap();
            seen.extend(wc[..k].iter().map(|c| c.wr_id));
            if k == 0 {
                std::thread::yield_now();
            }
            assert!(t.elapsed() < PATIENCE, "{} of {}", seen.len(), want.len());
        }
        let (mut s, mut w) = (seen.clone(), want.clone());
        s.sort();
        w.sort();
        assert_eq!(
            s, w,
            "send {send} depth {depth}: reported wr_ids (fulls {fulls}, invalid {invalid})"
        );
    }
}

// ---------------------------------------------------------------------
// Refused for ever
// ---------------------------------------------------------------------

/// A batch within max_send_wr (so not `Error::Invalid`) after a few
/// unsignaled WRs: auto-signal leaves up to `max_send_wr / 2 - 1` trailing
/// unsignaled WRs outstanding with no CQE to come, so a batch larger than
/// the rest is `QueueFull` however long one polls, by post_writes as by
/// post_send. What `Error::QueueFull` documents for it holds: a signaled
/// WR posted, its completion polled, and the batch fits.
#[test]
fn a_batch_behind_unsignaled_wrs_needs_a_signaled_one() {
    let e = env();
    let c = cfg(8, 64);
    let r = to(&e.dst, 0);
    let g = WriteWr::new(1, Sge::new(&e.src, 0, 8).unwrap(), r);
    for api in ["post_writes", "post_send"] {
        let (mut a, _pa) = e.pd.create_connected_pair(&c).unwrap();
        // Three unsignaled WRs (auto-signal period 4: none is forced).
        for _ in 0..3 {
            a.post_write(&g).unwrap();
        }
        let batch = vec![WriteWr { wr_id: 2, ..g }.signaled(); 8];
        let sends: Vec<SendWr<'_>> = batch.iter().map(WriteWr::to_send_wr).collect();
        let post = |a: &mut Qp| {
            if api == "post_send" {
                a.post_send(&sends)
            } else {
                a.post_writes(&batch)
            }
        };
        let before = a.sq_snapshot().unwrap();
        assert!(matches!(post(&mut a), Err(Error::QueueFull)), "{api}");
        assert_eq!(before, a.sq_snapshot().unwrap(), "{api}: refusal wrote");
        // Nothing comes for the unsignaled WRs...
        assert!(drain(&mut a).is_empty(), "{api}");
        assert!(matches!(post(&mut a), Err(Error::QueueFull)), "{api}");
        // ... until a signaled one is posted and completes.
        a.post_write(&WriteWr { wr_id: 3, ..g }.signaled()).unwrap();
        assert_eq!(poll_n(&mut a, 1)[0].wr_id, 3, "{api}");
        post(&mut a).unwrap();
        let got = poll_n(&mut a, 8);
        assert!(
            got.iter().all(|c| c.wr_id == 2 && c.status.is_ok()),
            "{api}: {got:?}"
        );
    }
}

/// The same on a shared CQ's credits: a QP leaves an unsignaled WR holding
/// a credit (no CQE will come for it), and a batch of `depth` WRs (not
/// Invalid: it fits the CQ) is `CqFull` until that QP posts a signaled WR
/// and its completion is polled, as `Error::CqFull` documents.
#[test]
fn a_shared_cq_batch_behind_unsignaled_wrs_needs_a_signaled_one() {
    let e = env();
    let c = cfg(8, 64);
    let r = to(&e.dst, 0);
    let g = WriteWr::new(1, Sge::new(&e.src, 0, 8).unwrap(), r);
    for api in ["post_writes", "post_send"] {
        let mut cq = e.pd.create_shared_cq(4).unwrap();
        let x = cq.create_qp(&c).unwrap();
        let y = cq.create_qp(&c).unwrap();
        let (mut px, mut py) = (e.pd.create_qp(&c).unwrap(), e.pd.create_qp(&c).unwrap());
        Qp::connect_loopback(cq.qp_mut(x), &mut px).unwrap();
        Qp::connect_loopback(cq.qp_mut(y), &mut py).unwrap();
        cq.qp_mut(x).post_write(&g).unwrap();
        cq.qp_mut(y).post_write(&g).unwrap();
        let batch = vec![WriteWr { wr_id: 2, ..g }.signaled(); 4];
        let sends: Vec<SendWr<'_>> = batch.iter().map(WriteWr::to_send_wr).collect();
        let post = |q: &mut Qp| {
            if api == "post_send" {
                q.post_send(&sends)
            } else {
                q.post_writes(&batch)
            }
        };
        let mut wc = [Completion::default(); 8];
        let mut got = Vec::new();
        let t = Instant::now();
        // Polling alone does not cure it: y's hidden CQE comes back, x's
        // unsignaled WR keeps its credit.
        while t.elapsed() < Duration::from_millis(200) {
            assert!(matches!(post(cq.qp_mut(x)), Err(Error::CqFull)), "{api}");
            let k = cq.poll(&mut wc).unwrap();
            assert_eq!(k, 0, "{api}: a hidden CQE reported: {:?}", &wc[..k]);
            std::thread::yield_now();
        }
        cq.qp_mut(x)
            .post_write(&WriteWr { wr_id: 3, ..g }.signaled())
            .unwrap();
        while got.is_empty() {
            let k = cq.poll(&mut wc).unwrap();
            got.extend(wc[..k].iter().map(|c| c.wr_id));
            assert!(t.elapsed() < PATIENCE, "{api}");
            std::thread::yield_now();
        }
        assert_eq!(got, [3], "{api}");
        post(cq.qp_mut(x)).unwrap();
        while got.len() < 5 {
            let k = cq.poll(&mut wc).unwrap();
            got.extend(wc[..k].iter().map(|c| c.wr_id));
            assert!(t.elapsed() < PATIENCE, "{api}");
            std::thread::yield_now();
        }
        assert_eq!(got, [3, 2, 2, 2, 2], "{api}");
    }
}

// ---------------------------------------------------------------------
// Errors, flushes, shared-CQ reset
// ---------------------------------------------------------------------

/// A stream with a WRITE to a bad rkey in the middle (unsignaled), then
/// more through every API: the completions (error, then flushes) are
/// those of the same stream through post_send.
#[test]
fn errors_and_flushes_as_post_send() {
    let e = env();
    let c = cfg(16, 64);
    let bad = RemoteAddr {
        addr: 0x10,
        rkey: Rkey(0xdead),
    };
    let r = to(&e.dst, 0);
    let sg = Sge::new(&e.src, 0, 8).unwrap();
    let mut results = Vec::new();
    for reference in [false, true] {
        let (mut a, _b) = e.pd.create_connected_pair(&c).unwrap();
        let w = |id: u64, remote: RemoteAddr, f: SendFlags| WriteWr {
            wr_id: id,
            sge: sg,
            remote,
            flags: f,
        };
        let post = |a: &mut Qp, ws: &[WriteWr<'_>], single: bool| {
            if reference {
                let s: Vec<SendWr<'_>> = ws.iter().map(WriteWr::to_send_wr).collect();
                a.post_send(&s).unwrap()
            } else if single {
                a.post_write(&ws[0]).unwrap()
            } else {
                a.post_writes(ws).unwrap()
            }
        };
        post(&mut a, &[w(1, r, SendFlags::empty())], true);
        post(&mut a, &[w(2, bad, SendFlags::empty())], true);
        post(
            &mut a,
            &[w(3, r, SendFlags::empty()), w(4, r, SendFlags::SIGNALED)],
            false,
        );
        if reference {
            let by = [Sge::bytes(b"abc").unwrap()];
            a.post_send(&[SendWr::rdma_write(5, &by, r).inline()])
                .unwrap();
        } else {
            a.post_write_inline(5, b"abc", r, SendFlags::empty())
                .unwrap();
        }
        post(&mut a, &[w(6, r, SendFlags::SIGNALED)], false);
        let got = poll_n(&mut a, 5);
        let mut v: Vec<(u64, WcStatus)> = got.iter().map(|c| (c.wr_id, c.status)).collect();
        v.extend(drain(&mut a).iter().map(|c| (c.wr_id, c.status)));
        // In ERR (device side): more posts are flushed.
        post(&mut a, &[w(7, r, SendFlags::empty())], true);
        post(
            &mut a,
            &[w(8, r, SendFlags::empty()), w(9, r, SendFlags::SIGNALED)],
            false,
        );
        v.extend(poll_n(&mut a, 3).iter().map(|c| (c.wr_id, c.status)));
        v.extend(drain(&mut a).iter().map(|c| (c.wr_id, c.status)));
        results.push(v);
    }
    assert_eq!(results[0], results[1], "new APIs vs post_send");
    assert!(!results[0][0].1.is_ok(), "{:?}", results[0]);
}

/// A QP of a shared CQ reset with unsignaled one-opcode WRs outstanding
/// (SharedCq::reset_qp) gets every credit back and posts again.
#[test]
fn shared_cq_reset_qp_then_post() {
    let e = env();
    let c = cfg(8, 64);
    let mut cq = e.pd.create_shared_cq(8).unwrap();
    let x = cq.create_qp(&c).unwrap();
    let mut px = e.pd.create_qp(&c).unwrap();
    Qp::connect_loopback(cq.qp_mut(x), &mut px).unwrap();
    let r = to(&e.dst, 0);
    let g = WriteWr::new(1, Sge::new(&e.src, 0, 8).unwrap(), r);
    let depth = cq.credits_free();
    cq.qp_mut(x).post_write(&g).unwrap();
    cq.qp_mut(x).post_writes(&[g, g]).unwrap();
    cq.qp_mut(x)
        .post_write_inline(2, b"ab", r, SendFlags::empty())
        .unwrap();
    assert!(cq.credits_free() < depth);
    let err = cq
        .qp_mut(x)
        .modify(QpState::Reset, &QpAttr::default())
        .unwrap_err();
    assert!(matches!(err, Error::SharedCqOutstanding { .. }), "{err:?}");
    cq.reset_qp(x).unwrap();
    assert_eq!(cq.credits_free(), depth, "credits back after reset_qp");
    px.modify(QpState::Reset, &QpAttr::default()).unwrap();
    Qp::connect_loopback(cq.qp_mut(x), &mut px).unwrap();
    let mut wc = [Completion::default(); 8];
    for i in 0..30u64 {
        let t = Instant::now();
        let r = match i % 3 {
            0 => cq
                .qp_mut(x)
                .post_write(&WriteWr { wr_id: i, ..g }.signaled()),
            1 => cq
                .qp_mut(x)
                .post_write_inline(i, b"xy", r, SendFlags::SIGNALED),
            _ => cq.qp_mut(x).post_writes(&[
                WriteWr {
                    wr_id: 100 + i,
                    ..g
                },
                WriteWr { wr_id: i, ..g }.signaled(),
            ]),
        };
        r.unwrap();
        loop {
            let k = cq.poll(&mut wc).unwrap();
            if k > 0 {
                assert_eq!(k, 1, "{:?}", &wc[..k]);
                assert_eq!((wc[0].wr_id, wc[0].status), (i, WcStatus::SUCCESS));
                break;
            }
            std::thread::yield_now();
            assert!(t.elapsed() < PATIENCE);
        }
    }
    assert_eq!(cq.credits_free(), depth);
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

// ---------------------------------------------------------------------
// MRs wait for completions
// ---------------------------------------------------------------------

/// An MR dropped while a post_write / post_writes WR names it waits for
/// the WR to retire (as for post_send's), then goes.
#[test]
fn dropped_mrs_wait_for_one_opcode_wrs() {
    let e = env();
    let (mut a, _b) = e.pd.create_connected_pair(&cfg(16, 64)).unwrap();
    let base = e.pd.live_mrs();
    let m1 = e.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let m2 = e.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let r = to(&e.dst, 0);
    a.post_write(&WriteWr::new(1, Sge::new(&m1, 0, 8).unwrap(), r))
        .unwrap();
    a.post_writes(&[
        WriteWr::new(2, Sge::new(&m2, 0, 8).unwrap(), r),
        WriteWr::new(3, Sge::new(&m2, 8, 8).unwrap(), r),
    ])
    .unwrap();
    drop((m1, m2));
    assert_eq!(e.pd.live_mrs(), base + 2, "dropped while WRs outstanding");
    assert!(drain(&mut a).is_empty());
    e.pd.reclaim();
    assert_eq!(e.pd.live_mrs(), base + 2, "still outstanding (unsignaled)");
    a.post_write_inline(4, b"z", r, SendFlags::SIGNALED)
        .unwrap();
    assert_eq!(poll_n(&mut a, 1)[0].wr_id, 4);
    e.pd.reclaim();
    assert_eq!(e.pd.live_mrs(), base);
    // And a single one, signaled, then RESET with it outstanding.
    let m3 = e.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    a.post_write(&WriteWr::new(5, Sge::new(&m3, 0, 8).unwrap(), r))
        .unwrap();
    drop(m3);
    assert_eq!(e.pd.live_mrs(), base + 1);
    a.modify(QpState::Reset, &QpAttr::default()).unwrap();
    assert_eq!(e.pd.live_mrs(), base);
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
    let m = e.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
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

/// A poll into an empty slice takes nothing, whatever waits in the CQ (a
/// send's CQE, a receive's): the next poll delivers each, once.
#[test]
fn a_poll_into_no_room_takes_nothing() {
    let e = env();
    let (mut a, mut b) = e.pd.create_connected_pair(&cfg(8, 0)).unwrap();
    let sge = [Sge::new(&e.src, 0, 8).unwrap()];
    let rbuf = [Sge::new(&e.dst, 0, 64).unwrap()];
    b.post_recv(&[RecvWr::new(9, &rbuf)]).unwrap();
    a.post_send(&[SendWr::send(5, &sge).signaled()]).unwrap();
    let hook = a.sim_hook().unwrap();
    while !hook.cqes_ready(1) {
        std::thread::yield_now();
    }
    let hook = b.sim_hook().unwrap();
    while !hook.cqes_ready(1) {
        std::thread::yield_now();
    }
    for q in [&mut a, &mut b] {
        for _ in 0..3 {
            assert_eq!(q.poll(&mut []).unwrap(), 0);
        }
    }
    assert_eq!(poll_n(&mut a, 1)[0].wr_id, 5);
    assert_eq!(poll_n(&mut b, 1)[0].wr_id, 9);
    let mut out = [Completion::default(); 4];
    assert_eq!(
        (a.poll(&mut out).unwrap(), b.poll(&mut out).unwrap()),
        (0, 0)
    );
}
