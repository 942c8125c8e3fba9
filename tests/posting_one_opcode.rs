//! The one-opcode posts (`Qp::post_write`, `Qp::post_write_inline`,
//! `Qp::post_writes`) against `Qp::post_send` of the same `SendWr`s, on the
//! sim: the same WQE bytes and doorbell for every flag (known or not), SGE
//! size, inline size and batch size, the same completions, the same errors,
//! and a refusal writes nothing; on own and shared CQs.

use rdma_direct::testing::QpHooks;
use rdma_direct::*;
use std::time::{Duration, Instant};

#[path = "support/posts.rs"]
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
    let foreign = other_pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
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
    assert!(matches!(e1, Error::ForeignPd { .. }), "{e1:?}");
    let bigs = [Sge::bytes(&big).unwrap()];
    let e1 = check(
        &mut a,
        &|q| q.post_write_inline(3, &big, r, SendFlags::empty()),
        SendWr::rdma_write(3, &bigs, r).inline(),
    );
    assert!(
        matches!(e1, Error::InlineTooLong { .. } | Error::Wqe(_)),
        "{e1:?}"
    );
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
fn one_opcode_posts_on_a_shared_cq() {
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
        assert_same_completions(&mut a, &mut b, want, &format!("round {round}"));
    }
    assert_same_wqes(&a, &b);
}

/// A batch with one bad WR, one too many for the SQ, or on a QP not in RTS
/// is refused as `post_send` refuses it, whole: no ring byte written.
#[test]
fn batch_refusals_write_nothing() {
    let e = env();
    let other = e.ctx.alloc_pd().unwrap();
    let foreign = other.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
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

// ---------------------------------------------------------------------
// Flags
// ---------------------------------------------------------------------

/// `SendFlags` is a bitflags type: `from_bits_retain` (public) makes one
/// with bits that are none of SIGNALED / SOLICITED / FENCE. Its equivalent
/// `SendWr` (`WriteWr::to_send_wr`) carries only the three flags, so
/// `post_send` writes `fm_ce_se` from those; each one-opcode post must
/// write the same byte. Checked per API, on fresh QP pairs.
#[test]
fn unknown_flag_bits_write_what_post_send_writes() {
    let e = env();
    let c = cfg(64, 64);
    let sg = Sge::new(&e.src, 0, 16).unwrap();
    let d = [7u8; 16];
    let by = [Sge::bytes(&d).unwrap()];
    let r = to(&e.dst, 0);
    let mut bad = Vec::new();
    // 0x04: the low CE bit; 0x20: SMALL_FENCE; 0x01: reserved; 0x40: a
    // fence mode; with and without SIGNALED.
    for bits in [0x04u8, 0x20, 0x01, 0x40, 0x0c, 0x08 | 0x20] {
        let f = SendFlags::from_bits_retain(bits);
        let w = WriteWr {
            wr_id: 1,
            sge: sg,
            remote: r,
            flags: f,
        };
        for api in ["post_write", "post_write_inline", "post_writes"] {
            let (mut a, _pa) = e.pd.create_connected_pair(&c).unwrap();
            let (mut b, _pb) = e.pd.create_connected_pair(&c).unwrap();
            match api {
                "post_write" => {
                    a.post_write(&w).unwrap();
                    b.post_send(&[w.to_send_wr()]).unwrap();
                }
                "post_write_inline" => {
                    a.post_write_inline(1, &d, r, f).unwrap();
                    b.post_send(&[with_flags(SendWr::rdma_write(1, &by, r).inline(), f)])
                        .unwrap();
                }
                _ => {
                    a.post_writes(&[w, w]).unwrap();
                    b.post_send(&[w.to_send_wr(), w.to_send_wr()]).unwrap();
                }
            }
            let (sa, sb) = (a.sq_snapshot().unwrap(), b.sq_snapshot().unwrap());
            if sa[11] != sb[11] {
                bad.push(format!(
                    "{api} flags {bits:#04x}: fm_ce_se {:#04x}, post_send {:#04x}",
                    sa[11], sb[11]
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
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

// ---------------------------------------------------------------------
// SGE sizes
// ---------------------------------------------------------------------

/// Zero-length SGEs (a WRITE of no data segment) singly and at the start,
/// middle and end of batches: the same WQEs as post_send, and completions.
#[test]
fn zero_length_sges_as_post_send() {
    let e = env();
    let c = cfg(64, 64);
    let (mut a, _pa) = e.pd.create_connected_pair(&c).unwrap();
    let (mut b, _pb) = e.pd.create_connected_pair(&c).unwrap();
    let r = to(&e.dst, 0);
    let z = WriteWr::new(1, Sge::new(&e.src, 0, 0).unwrap(), r);
    let g = WriteWr::new(2, Sge::new(&e.src, 0, 8).unwrap(), r);
    let mut want = 0;
    let batches: Vec<Vec<WriteWr<'_>>> = vec![
        vec![z],
        vec![z.signaled()],
        vec![z, g, g.signaled()],
        vec![g, z, g.signaled()],
        vec![g, g, z.signaled()],
        vec![z, z],
    ];
    for (i, batch) in batches.iter().enumerate() {
        if i < 2 {
            a.post_write(&batch[0]).unwrap();
        } else {
            a.post_writes(batch).unwrap();
        }
        let sends: Vec<SendWr<'_>> = batch.iter().map(WriteWr::to_send_wr).collect();
        b.post_send(&sends).unwrap();
        want += batch
            .iter()
            .filter(|w| w.flags.contains(SendFlags::SIGNALED))
            .count();
        same_ring(&a, &b, &format!("batch {i}"));
    }
    let key = |v: Vec<Completion>| {
        v.iter()
            .map(|c| (c.wr_id, c.status, c.byte_len))
            .collect::<Vec<_>>()
    };
    assert_eq!(key(poll_n(&mut a, want)), key(poll_n(&mut b, want)));
}

/// An SGE of 2^31 bytes (no data segment can carry it) is refused as
/// post_send refuses it; one of 2^31 - 1 is posted.
#[test]
fn huge_sges_as_post_send() {
    let e = env();
    let (mut a, _b) = e.pd.create_connected_pair(&cfg(8, 64)).unwrap();
    let big =
        e.pd.alloc_mr((1usize << 31) + 64, Access::LOCAL_WRITE)
            .unwrap();
    let bad = RemoteAddr {
        addr: 0x1000,
        rkey: Rkey(0x7777),
    };
    let g = WriteWr::new(9, Sge::new(&e.src, 0, 8).unwrap(), to(&e.dst, 0));
    let w = WriteWr::new(1, Sge::new(&big, 0, 1 << 31).unwrap(), bad);
    let w2 = WriteWr::new(2, Sge::new(&big, 64, u32::MAX - 63).unwrap_or(w.sge), bad);
    for w in [w, w2] {
        let e1 = refused_by(&mut a, |q| q.post_write(&w));
        let e2 = refused_by(&mut a, |q| q.post_send(&[w.to_send_wr()]));
        assert_eq!(format!("{e1:?}"), format!("{e2:?}"));
        for batch in [vec![w, g], vec![g, w], vec![g, g, w]] {
            let e1 = refused_by(&mut a, |q| q.post_writes(&batch));
            let sends: Vec<SendWr<'_>> = batch.iter().map(WriteWr::to_send_wr).collect();
            let e2 = refused_by(&mut a, |q| q.post_send(&sends));
            assert_eq!(format!("{e1:?}"), format!("{e2:?}"));
        }
    }
    // 2^31 - 1 bytes to a bad rkey: posted, fails remotely.
    let w = WriteWr::new(3, Sge::new(&big, 0, (1 << 31) - 1).unwrap(), bad).signaled();
    a.post_write(&w).unwrap();
    let wc = poll_n(&mut a, 1);
    assert_eq!(wc[0].wr_id, 3);
    assert!(!wc[0].status.is_ok());
}

// ---------------------------------------------------------------------
// Inline sizes
// ---------------------------------------------------------------------

/// Inline of 0, max_inline and max_inline + 1 bytes, for several
/// max_inline and SQ sizes: the same outcome as post_send (error text
/// included), nothing written when refused, and the bytes land.
#[test]
fn inline_limits_as_post_send() {
    let e = env();
    let data: Vec<u8> = (0..1200u32).map(|i| (i * 31 + 5) as u8).collect();
    for (send, mi) in [
        (1u32, 0u32),
        (1, 28),
        (1, 64),
        (2, 60),
        (4, 220),
        (8, 256),
        (16, 512),
        (3, 1000),
    ] {
        let c = cfg(send, mi);
        let Ok((mut a, _pa)) = e.pd.create_connected_pair(&c) else {
            println!("config {send}/{mi} refused");
            continue;
        };
        let (mut b, _pb) = e.pd.create_connected_pair(&c).unwrap();
        let max = a.max_inline() as usize;
        let r = to(&e.dst, 0);
        let mut pi = 0;
        for len in [0usize, 1, max.saturating_sub(1), max, max + 1, max + 64] {
            if len > data.len() {
                continue;
            }
            let by = [Sge::bytes(&data[..len]).unwrap()];
            let before = a.sq_snapshot().unwrap();
            let ra = a.post_write_inline(len as u64, &data[..len], r, SendFlags::SIGNALED);
            if ra.is_err() {
                assert_eq!(before, a.sq_snapshot().unwrap(), "len {len}: wrote");
            }
            let rb = b.post_send(&[SendWr::rdma_write(len as u64, &by, r).inline().signaled()]);
            assert_eq!(
                format!("{ra:?}"),
                format!("{rb:?}"),
                "max_send_wr {send} max_inline {mi} (granted {max}) len {len}"
            );
            if len <= max {
                assert!(ra.is_ok(), "len {len} of max {max}: {ra:?}");
            }
            if ra.is_ok() {
                let ca = poll_n(&mut a, 1);
                let cb = poll_n(&mut b, 1);
                assert_eq!(
                    (ca[0].wr_id, ca[0].status),
                    (cb[0].wr_id, cb[0].status),
                    "len {len}"
                );
                assert!(ca[0].status.is_ok(), "{ca:?}");
                let mut got = vec![0u8; len];
                e.dst.read(0, &mut got).unwrap();
                assert_eq!(got, &data[..len], "len {len}");
            }
            pi = same_wqes_since(&a, &b, pi, &format!("{send}/{mi} len {len}"));
        }
    }
}

/// Inline payloads that wrap the ring's end, at every alignment, against
/// post_send (the bytes the device reads, and what lands).
#[test]
fn inline_wrapping_ring_end() {
    let e = env();
    let c = cfg(4, 220);
    let (mut a, _pa) = e.pd.create_connected_pair(&c).unwrap();
    let (mut b, _pb) = e.pd.create_connected_pair(&c).unwrap();
    let data: Vec<u8> = (0..220u32).map(|i| (i * 13 + 1) as u8).collect();
    let mut rng = Rng(0x1234_5678);
    let (mut ga, mut gb, mut want) = (Vec::new(), Vec::new(), Vec::new());
    let mut pi = 0;
    for i in 0..300u64 {
        let len = rng.below(221) as usize;
        let f = if i % 3 == 0 {
            SendFlags::SIGNALED
        } else {
            SendFlags::empty()
        };
        let r = to(&e.dst, 256 * (i % 16));
        let by = [Sge::bytes(&data[..len]).unwrap()];
        let w = with_flags(SendWr::rdma_write(i, &by, r).inline(), f);
        ga.extend(post_retrying(&mut a, |q| {
            q.post_write_inline(i, &data[..len], r, f)
        }));
        gb.extend(post_retrying(&mut b, |q| q.post_send(&[w])));
        pi = same_wqes_since(&a, &b, pi, &format!("WR {i} len {len}"));
        if f.contains(SendFlags::SIGNALED) {
            want.push(i);
        }
    }
    let na = want.len() - ga.len();
    ga.extend(poll_n(&mut a, na));
    let nb = want.len() - gb.len();
    gb.extend(poll_n(&mut b, nb));
    let key = |v: &[Completion]| v.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>();
    assert_eq!(key(&ga), key(&gb));
    assert_eq!(ga.iter().map(|c| c.wr_id).collect::<Vec<_>>(), want);
    assert!(drain(&mut a).is_empty());
}

/// Posts with `f`, polling while QueueFull / CqFull; returns the
/// completions polled meanwhile (for a caller that checks them).
fn post_retrying(q: &mut Qp, mut f: impl FnMut(&mut Qp) -> Result<()>) -> Vec<Completion> {
    let t = Instant::now();
    let mut got = Vec::new();
    let mut wc = [Completion::default(); 16];
    loop {
        match f(q) {
            Ok(()) => return got,
            Err(Error::QueueFull | Error::CqFull) => {
                let k = q.poll(&mut wc).unwrap();
                got.extend_from_slice(&wc[..k]);
                if k == 0 {
                    std::thread::yield_now();
                }
            }
            Err(x) => panic!("{x:?}"),
        }
        assert!(t.elapsed() < PATIENCE, "stuck: QueueFull/CqFull for ever");
    }
}

// ---------------------------------------------------------------------
// Batches
// ---------------------------------------------------------------------

/// Batches of 0, 1, exactly the free room, one more than it, more than
/// max_send_wr, and more than 64: the same results as post_send, all or
/// nothing.
#[test]
fn batch_sizes_as_post_send() {
    let e = env();
    for send in [1u32, 2, 3, 8, 64, 100, 128] {
        let c = cfg(send, 64);
        let (mut a, _pa) = e.pd.create_connected_pair(&c).unwrap();
        let (mut b, _pb) = e.pd.create_connected_pair(&c).unwrap();
        let r = to(&e.dst, 0);
        let mut pi = 0;
        let wr = |i: u64| WriteWr::new(i, Sge::new(&e.src, (i % 64) as usize, 8).unwrap(), r);
        // empty
        a.post_writes(&[]).unwrap();
        b.post_send(&[]).unwrap();
        pi = same_wqes_since(&a, &b, pi, "empty");
        // one signaled outstanding, then the rest of the room, then one more.
        a.post_write(&wr(1).signaled()).unwrap();
        b.post_send(&[wr(1).signaled().to_send_wr()]).unwrap();
        pi = same_wqes_since(&a, &b, pi, "one");
        let free = send as usize - 1;
        for n in [free + 1, send as usize + 1, 65, 200]
            .into_iter()
            .filter(|&n| n > free)
        {
            let batch: Vec<WriteWr<'_>> = (0..n as u64).map(|i| wr(100 + i)).collect();
            let sends: Vec<SendWr<'_>> = batch.iter().map(WriteWr::to_send_wr).collect();
            let what = format!("send {send}: a batch of {n} with {free} free");
            let e1 = refused_at(&mut a, &what, |q| q.post_writes(&batch));
            let e2 = refused_at(&mut b, &what, |q| q.post_send(&sends));
            assert_eq!(format!("{e1:?}"), format!("{e2:?}"), "{what}");
        }
        if free > 0 {
            let mut batch: Vec<WriteWr<'_>> = (0..free as u64).map(|i| wr(200 + i)).collect();
            *batch.last_mut().unwrap() = batch.last().unwrap().signaled();
            let sends: Vec<SendWr<'_>> = batch.iter().map(WriteWr::to_send_wr).collect();
            a.post_writes(&batch).unwrap();
            b.post_send(&sends).unwrap();
            pi = same_wqes_since(&a, &b, pi, &format!("send {send}: exactly the room"));
            // Full now: one more of each kind is QueueFull (or the others').
            let what = format!("send {send}: full");
            let e1 = refused_at(&mut a, &what, |q| q.post_writes(&[wr(5)]));
            let e2 = refused_at(&mut b, &what, |q| q.post_send(&[wr(5).to_send_wr()]));
            assert_eq!(format!("{e1:?}"), format!("{e2:?}"));
            let e1 = refused_at(&mut a, &what, |q| q.post_write(&wr(5)));
            assert_eq!(format!("{e1:?}"), format!("{e2:?}"));
            let e1 = refused_at(&mut a, &what, |q| {
                q.post_write_inline(5, b"x", r, SendFlags::empty())
            });
            assert_eq!(format!("{e1:?}"), format!("{e2:?}"));
        }
        let key = |v: Vec<Completion>| v.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>();
        let n = 1 + (free > 0) as usize;
        assert_eq!(
            key(poll_n(&mut a, n)),
            key(poll_n(&mut b, n)),
            "send {send}"
        );
        assert!(drain(&mut a).is_empty());
        // And a big batch within max_send_wr (more than 64 when it can).
        let n = send as usize;
        let mut batch: Vec<WriteWr<'_>> = (0..n as u64).map(|i| wr(1000 + i)).collect();
        *batch.last_mut().unwrap() = batch.last().unwrap().signaled();
        let sends: Vec<SendWr<'_>> = batch.iter().map(WriteWr::to_send_wr).collect();
        a.post_writes(&batch).unwrap();
        b.post_send(&sends).unwrap();
        same_wqes_since(&a, &b, pi, &format!("send {send}: full batch"));
        assert_eq!(key(poll_n(&mut a, 1)), key(poll_n(&mut b, 1)));
    }
}
