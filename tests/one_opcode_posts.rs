//! `Qp::post_write` and `Qp::post_write_inline` against `Qp::post_send` of
//! the same `SendWr`, on the sim: the same WQE bytes, the same completions,
//! the same errors, and a refusal writes nothing.

use rdma_direct::testing::QpHooks;
use rdma_direct::*;
use std::time::{Duration, Instant};

#[path = "support/one_opcode.rs"]
mod support;
use support::*;

/// Every flag combination of a 1-SGE WRITE and of inline WRITEs of many
/// sizes: the WQEs `post_write` / `post_write_inline` write on one QP are
/// byte for byte those `post_send` writes on another (the QPN aside).
#[test]
fn same_wqes_as_post_send() {
    let e = env();
    let c = cfg(64, 220);
    let (mut a, _pa) = e.pd.create_connected_pair(&c).unwrap();
    let (mut b, _pb) = e.pd.create_connected_pair(&c).unwrap();
    let data: Vec<u8> = (0..220u32).map(|i| (i * 7 + 3) as u8).collect();
    let sg = Sge::new(&e.src, 8, 48).unwrap();
    let sgs = [sg];
    let flag_sets = [
        SendFlags::empty(),
        SendFlags::SIGNALED,
        SendFlags::SOLICITED,
        SendFlags::FENCE,
        SendFlags::all(),
    ];
    let lens = [0usize, 1, 12, 13, 28, 29, 60, 61, 64, 124, 188, 220];
    let mut n = 0;
    for (i, &len) in lens.iter().enumerate() {
        let f = flag_sets[i % flag_sets.len()];
        let r = to(&e.dst, 64 * i as u64);
        a.post_write(&WriteWr {
            wr_id: i as u64,
            sge: sg,
            remote: r,
            flags: f,
        })
        .unwrap();
        b.post_send(&[with_flags(SendWr::rdma_write(i as u64, &sgs, r), f)])
            .unwrap();
        let by = [Sge::bytes(&data[..len]).unwrap()];
        a.post_write_inline(100 + i as u64, &data[..len], r, f)
            .unwrap();
        b.post_send(&[with_flags(
            SendWr::rdma_write(100 + i as u64, &by, r).inline(),
            f,
        )])
        .unwrap();
        n += 2;
    }
    std::thread::sleep(Duration::from_millis(50));
    let (sa, sb) = (a.sq_snapshot().unwrap(), b.sq_snapshot().unwrap());
    let ring = sa.len() - 4;
    assert_eq!(&sa[ring..], &sb[ring..], "doorbell records");
    let mut off = 0;
    for k in 0..n {
        let ds = (sa[off + 7] & 0x3f) as usize;
        assert!(ds >= 2, "WQE {k}: ds {ds}");
        let (mut x, mut y) = (
            sa[off..off + ds * 16].to_vec(),
            sb[off..off + ds * 16].to_vec(),
        );
        // (bytes 4..7: the QPN, which differs)
        x[4..7].fill(0);
        y[4..7].fill(0);
        assert_eq!(x, y, "WQE {k} at {off} (ds {ds})");
        off += (ds * 16).div_ceil(64) * 64;
    }
    // Each signaled WR completes, with its wr_id, on both.
    let want = lens
        .iter()
        .enumerate()
        .filter(|(i, _)| flag_sets[i % flag_sets.len()].contains(SendFlags::SIGNALED))
        .count()
        * 2;
    let ids = |v: Vec<Completion>| {
        let mut v: Vec<u64> = v
            .iter()
            .map(|c| {
                assert!(c.status.is_ok(), "{c:?}");
                c.wr_id
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(ids(poll_n(&mut a, want)), ids(poll_n(&mut b, want)));
    // The inline bytes landed.
    let mut got = vec![0u8; 220];
    e.dst
        .read(64 * (lens.len() as u64 - 1) as usize, &mut got)
        .unwrap();
    assert_eq!(got, data);
}

/// What `post_send` refuses, these refuse with the same error, writing no
/// ring byte; a QP not yet in RTS is refused too.
#[test]
fn same_refusals_and_nothing_written() {
    let e = env();
    let other_pd = e.ctx.alloc_pd().unwrap();
    let foreign = other_pd.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    let mut idle = e.pd.create_qp(&cfg(4, 64)).unwrap();
    let (mut a, _b) = e.pd.create_connected_pair(&cfg(4, 64)).unwrap();
    let r = to(&e.dst, 0);
    let sg = Sge::new(&e.src, 0, 8).unwrap();
    let fsg = Sge::new(&foreign, 0, 8).unwrap();
    let big = vec![0u8; 65];
    let check = |qp: &mut Qp, mine: &dyn Fn(&mut Qp) -> Result<()>, theirs: SendWr<'_>| {
        let before = qp.sq_snapshot().unwrap();
        let e1 = mine(qp).expect_err("refused");
        assert_eq!(before, qp.sq_snapshot().unwrap(), "wrote ring bytes: {e1}");
        let e2 = qp.post_send(&[theirs]).expect_err("refused");
        assert_eq!(format!("{e1:?}"), format!("{e2:?}"));
        e1
    };
    let sgs = [sg];
    let e1 = check(
        &mut idle,
        &|q| {
            q.post_write(&WriteWr {
                wr_id: 1,
                sge: sg,
                remote: r,
                flags: SendFlags::SIGNALED,
            })
        },
        SendWr::rdma_write(1, &sgs, r).signaled(),
    );
    assert!(matches!(e1, Error::QpState { .. }), "{e1:?}");
    let d = [1u8; 4];
    let by = [Sge::bytes(&d).unwrap()];
    let e1 = check(
        &mut idle,
        &|q| q.post_write_inline(1, &d, r, SendFlags::empty()),
        SendWr::rdma_write(1, &by, r).inline(),
    );
    assert!(matches!(e1, Error::QpState { .. }), "{e1:?}");
    let fsgs = [fsg];
    let e1 = check(
        &mut a,
        &|q| {
            q.post_write(&WriteWr {
                wr_id: 2,
                sge: fsg,
                remote: r,
                flags: SendFlags::empty(),
            })
        },
        SendWr::rdma_write(2, &fsgs, r),
    );
    assert!(matches!(e1, Error::Invalid(_)), "{e1:?}");
    let bigs = [Sge::bytes(&big).unwrap()];
    let e1 = check(
        &mut a,
        &|q| q.post_write_inline(3, &big, r, SendFlags::empty()),
        SendWr::rdma_write(3, &bigs, r).inline(),
    );
    assert!(matches!(e1, Error::Invalid(_) | Error::Wqe(_)), "{e1:?}");
    // A full SQ (4 WRs outstanding, none polled): QueueFull from both.
    for i in 0..4 {
        a.post_write(&WriteWr {
            wr_id: 10 + i,
            sge: sg,
            remote: r,
            flags: SendFlags::SIGNALED,
        })
        .unwrap();
    }
    let e1 = check(
        &mut a,
        &|q| {
            q.post_write(&WriteWr {
                wr_id: 20,
                sge: sg,
                remote: r,
                flags: SendFlags::SIGNALED,
            })
        },
        SendWr::rdma_write(20, &sgs, r).signaled(),
    );
    assert!(matches!(e1, Error::QueueFull), "{e1:?}");
    let e1 = check(
        &mut a,
        &|q| q.post_write_inline(21, &d, r, SendFlags::SIGNALED),
        SendWr::rdma_write(21, &by, r).inline().signaled(),
    );
    assert!(matches!(e1, Error::QueueFull), "{e1:?}");
    let got = poll_n(&mut a, 4);
    assert_eq!(
        got.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        [10, 11, 12, 13]
    );
    // And room again.
    a.post_write_inline(22, &d, r, SendFlags::SIGNALED).unwrap();
    assert_eq!(poll_n(&mut a, 1)[0].wr_id, 22);
}

/// On a shared CQ (CQ credits counted) both take the general path and post.
#[test]
fn on_a_shared_cq() {
    let e = env();
    let c = cfg(8, 64);
    let mut cq =
        e.pd.create_shared_cq(CqSizing::new().qp(&c).qp(&c).depth().unwrap())
            .unwrap();
    let qa = cq.create_qp(&c).unwrap();
    let mut peer = e.pd.create_qp(&c).unwrap();
    Qp::connect_loopback(cq.qp_mut(qa), &mut peer).unwrap();
    let sg = Sge::new(&e.src, 0, 16).unwrap();
    let r = to(&e.dst, 0);
    let d = [9u8; 16];
    let mut got = Vec::new();
    let mut wc = [Completion::default(); 8];
    for round in 0..40u64 {
        cq.qp_mut(qa)
            .post_write(&WriteWr {
                wr_id: round * 2,
                sge: sg,
                remote: r,
                flags: SendFlags::SIGNALED,
            })
            .unwrap();
        cq.qp_mut(qa)
            .post_write_inline(round * 2 + 1, &d, r, SendFlags::SIGNALED)
            .unwrap();
        let t = Instant::now();
        while got.len() < (round as usize + 1) * 2 {
            let k = cq.poll(&mut wc).unwrap();
            got.extend(wc[..k].iter().map(|c| c.wr_id));
            if k == 0 {
                std::thread::yield_now();
            }
            assert!(t.elapsed() < PATIENCE);
        }
    }
    assert_eq!(got, (0..80).collect::<Vec<_>>());
}

/// `post_writes` writes the WQEs and rings the doorbell as `post_send` of
/// the same batch does, and completes the same WRs.
#[test]
fn batches_as_post_send() {
    let e = env();
    let c = cfg(128, 64);
    let (mut a, _pa) = e.pd.create_connected_pair(&c).unwrap();
    let (mut b, _pb) = e.pd.create_connected_pair(&c).unwrap();
    let flag_sets = [
        SendFlags::empty(),
        SendFlags::SIGNALED,
        SendFlags::FENCE | SendFlags::SOLICITED,
    ];
    for (round, n) in [1usize, 2, 32, 70].into_iter().enumerate() {
        let wrs: Vec<WriteWr<'_>> = (0..n)
            .map(|i| WriteWr {
                wr_id: (round * 1000 + i) as u64,
                sge: Sge::new(&e.src, 8 * i, 8 + i as u32).unwrap(),
                remote: to(&e.dst, 16 * i as u64),
                flags: flag_sets[i % 3]
                    | if i + 1 == n {
                        SendFlags::SIGNALED
                    } else {
                        SendFlags::empty()
                    },
            })
            .collect();
        let sends: Vec<SendWr<'_>> = wrs.iter().map(WriteWr::to_send_wr).collect();
        a.post_writes(&wrs).unwrap();
        b.post_send(&sends).unwrap();
        let want = wrs
            .iter()
            .filter(|w| w.flags.contains(SendFlags::SIGNALED))
            .count();
        let ids = |v: Vec<Completion>| v.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>();
        assert_eq!(
            ids(poll_n(&mut a, want)),
            ids(poll_n(&mut b, want)),
            "round {round}"
        );
    }
    let (sa, sb) = (a.sq_snapshot().unwrap(), b.sq_snapshot().unwrap());
    assert_eq!(sa.len(), sb.len());
    for (k, (x, y)) in sa.chunks(64).zip(sb.chunks(64)).enumerate() {
        let (mut x, mut y) = (x.to_vec(), y.to_vec());
        if x.len() == 64 {
            x[4..7].fill(0);
            y[4..7].fill(0);
        }
        assert_eq!(x, y, "WQEBB {k}");
    }
}

/// A batch with one bad WR, one too many for the SQ, or on a QP not in RTS
/// is refused as `post_send` refuses it, whole: no ring byte written.
#[test]
fn batch_refusals_write_nothing() {
    let e = env();
    let other = e.ctx.alloc_pd().unwrap();
    let foreign = other.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    let (mut a, _b) = e.pd.create_connected_pair(&cfg(8, 64)).unwrap();
    let mut idle = e.pd.create_qp(&cfg(128, 64)).unwrap();
    let good = |i: u64| WriteWr::new(i, Sge::new(&e.src, 0, 8).unwrap(), to(&e.dst, 0));
    let cases: Vec<(&str, Vec<WriteWr<'_>>)> = vec![
        (
            "foreign PD",
            vec![
                good(1),
                WriteWr::new(2, Sge::new(&foreign, 0, 8).unwrap(), to(&e.dst, 0)),
                good(3),
            ],
        ),
        ("too many", (0..9).map(good).collect()),
    ];
    for (what, wrs) in &cases {
        let before = a.sq_snapshot().unwrap();
        let e1 = a.post_writes(wrs).expect_err(what);
        assert_eq!(before, a.sq_snapshot().unwrap(), "{what}: wrote ring bytes");
        let sends: Vec<SendWr<'_>> = wrs.iter().map(WriteWr::to_send_wr).collect();
        let e2 = a.post_send(&sends).expect_err(what);
        assert_eq!(format!("{e1:?}"), format!("{e2:?}"), "{what}");
    }
    // More than 64 (converted in one allocation) on a QP in RESET.
    let many: Vec<WriteWr<'_>> = (0..100).map(good).collect();
    let before = idle.sq_snapshot().unwrap();
    let e1 = idle.post_writes(&many).expect_err("RESET");
    assert!(matches!(e1, Error::QpState { .. }), "{e1:?}");
    assert_eq!(before, idle.sq_snapshot().unwrap());
    // And the QP still posts.
    a.post_writes(&[good(7).signaled()]).unwrap();
    assert_eq!(poll_n(&mut a, 1)[0].wr_id, 7);
}

/// On a shared CQ (credits counted), batches post and complete in order.
#[test]
fn batches_on_a_shared_cq() {
    let e = env();
    let c = cfg(16, 64);
    let mut cq =
        e.pd.create_shared_cq(CqSizing::new().qp(&c).depth().unwrap())
            .unwrap();
    let qa = cq.create_qp(&c).unwrap();
    let mut peer = e.pd.create_qp(&c).unwrap();
    Qp::connect_loopback(cq.qp_mut(qa), &mut peer).unwrap();
    let mut got = Vec::new();
    let mut wc = [Completion::default(); 16];
    for round in 0..30u64 {
        let wrs: Vec<WriteWr<'_>> = (0..4)
            .map(|i| {
                WriteWr::new(
                    round * 4 + i,
                    Sge::new(&e.src, 0, 16).unwrap(),
                    to(&e.dst, 0),
                )
                .signaled()
            })
            .collect();
        cq.qp_mut(qa).post_writes(&wrs).unwrap();
        let t = Instant::now();
        while got.len() < (round as usize + 1) * 4 {
            let k = cq.poll(&mut wc).unwrap();
            got.extend(wc[..k].iter().map(|c| c.wr_id));
            if k == 0 {
                std::thread::yield_now();
            }
            assert!(t.elapsed() < PATIENCE);
        }
    }
    assert_eq!(got, (0..120).collect::<Vec<_>>());
}
