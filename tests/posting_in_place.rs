//! The in-place posts of `Qp::post_send` (`Sge::bytes`, inline payloads,
//! the post modes) against the checked path, on the sim: plain bytes
//! refused wherever they are not inline, inline sizes and ring wrapping,
//! states that refuse without writing, SGE length edges, unsignaled streams
//! on tiny SQs, all-or-nothing batches, odd QP configurations, and the
//! in-place and checked paths writing the same WQEs.

use rdma_direct::testing::QpHooks;
use rdma_direct::*;
use std::time::{Duration, Instant};

#[path = "support/in_place.rs"]
mod support;
use support::*;

#[test]
fn bytes_refused_in_every_non_inline_position() {
    let e = env();
    let (mut a, mut b) = e.pd.create_connected_pair(&cfg(16, 16)).unwrap();
    let data = [7u8; 32];
    let by = [Sge::bytes(&data).unwrap()];
    let good = [Sge::new(&e.src, 0, 8).unwrap()];
    let to = remote(&e.dst, 0);
    let cases: Vec<(&str, Vec<SendWr>)> = vec![
        ("write", vec![SendWr::rdma_write(1, &by, to)]),
        (
            "write signaled",
            vec![SendWr::rdma_write(1, &by, to).signaled()],
        ),
        ("write_imm", vec![SendWr::rdma_write(1, &by, to).imm(5)]),
        ("send", vec![SendWr::send(1, &by)]),
        ("send_imm", vec![SendWr::send(1, &by).imm(3)]),
        ("read", vec![SendWr::rdma_read(1, &by, to)]),
        ("read inline", vec![SendWr::rdma_read(1, &by, to).inline()]),
        ("cas", vec![SendWr::atomic_cmp_swp(1, &by[..], to, 0, 1)]),
        (
            "faa inline",
            vec![SendWr::atomic_fetch_add(1, &by, to, 1).inline()],
        ),
        (
            "batch good+bytes",
            vec![
                SendWr::rdma_write(1, &good, to),
                SendWr::rdma_write(2, &by, to),
            ],
        ),
        (
            "batch bytes+good",
            vec![SendWr::send(1, &by), SendWr::rdma_write(2, &good, to)],
        ),
        (
            "batch inline ok + bytes read",
            vec![
                SendWr::rdma_write(1, &by, to).inline(),
                SendWr::rdma_read(2, &by, to),
            ],
        ),
    ];
    for (name, wrs) in cases {
        let err = refused(&mut a, &wrs);
        assert!(
            matches!(
                err,
                Error::BytesSge | Error::AtomicShape { .. } | Error::ReadInline
            ),
            "{name}: {err:?}"
        );
    }
    // 8-byte atomic over bytes
    let d8 = [0u8; 8];
    let b8 = [Sge::bytes(&d8).unwrap()];
    let err = refused(&mut a, &[SendWr::atomic_fetch_add(1, &b8, to, 1)]);
    assert!(matches!(err, Error::BytesSge), "faa: {err:?}");
    // receive
    let err = b.post_recv(&[RecvWr::new(1, &by)]).unwrap_err();
    assert!(matches!(err, Error::BytesSge), "recv: {err:?}");
    assert_eq!(a.post_send(&[]).ok(), Some(()));
    assert!(drain(&mut a).is_empty());
    assert!(drain(&mut b).is_empty());
}

#[test]
fn inline_sizes_land_and_limits_refuse() {
    let e = env();
    let c = QpConfig {
        max_inline: 220,
        ..cfg(16, 16)
    };
    let (mut a, _b) = e.pd.create_connected_pair(&c).unwrap();
    let mi = a.max_inline() as usize;
    for &len in &[
        0usize,
        1,
        3,
        4,
        7,
        8,
        15,
        16,
        31,
        32,
        63,
        64,
        65,
        100,
        mi - 1,
        mi,
    ] {
        let data: Vec<u8> = (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(len as u8))
            .collect();
        e.dst.write(0, &vec![0xee; 600]).unwrap();
        let sg = [Sge::bytes(&data).unwrap()];
        a.post_send(&[SendWr::rdma_write(len as u64, &sg, remote(&e.dst, 0))
            .inline()
            .signaled()])
            .unwrap();
        let wc = poll_n(&mut a, 1);
        assert_eq!(wc[0].wr_id, len as u64);
        assert!(wc[0].status.is_ok(), "{wc:?}");
        let mut got = vec![0u8; len + 8];
        e.dst.read(0, &mut got).unwrap();
        assert_eq!(&got[..len], &data[..], "len {len}");
        assert!(
            got[len..].iter().all(|&x| x == 0xee),
            "len {len} wrote past its end"
        );
    }
    let big = vec![1u8; mi + 1];
    let sg = [Sge::bytes(&big).unwrap()];
    let err = refused(
        &mut a,
        &[SendWr::rdma_write(1, &sg, remote(&e.dst, 0)).inline()],
    );
    assert!(matches!(err, Error::InlineTooLong { .. }), "{err:?}");
    let err = refused(&mut a, &[SendWr::send(1, &sg).inline()]);
    assert!(matches!(err, Error::InlineTooLong { .. }), "{err:?}");
    let err = refused(
        &mut a,
        &[
            SendWr::send(1, &sg[..]).inline(),
            SendWr::send(1, &sg[..]).inline(),
        ],
    );
    assert!(matches!(err, Error::InlineTooLong { .. }), "{err:?}");
}

/// Inline WRITEs of varying sizes, many times around the ring: every byte
/// lands (wraps at the ring end).
#[test]
fn inline_wrapping_many_sizes() {
    let e = env();
    for &(sw, inl) in &[
        (1u32, 220u32),
        (2, 100),
        (3, 64),
        (4, 512),
        (16, 300),
        (5, 28),
    ] {
        let c = QpConfig {
            max_inline: inl,
            ..cfg(sw, 4)
        };
        let (mut a, _b) = e.pd.create_connected_pair(&c).unwrap();
        let mi = a.max_inline() as usize;
        let mut seed = 12345u32;
        for i in 0..300u64 {
            seed = seed.wrapping_mul(1103515245).wrapping_add(12345);
            let len = (seed >> 8) as usize % (mi + 1);
            let data: Vec<u8> = (0..len).map(|k| (k as u8) ^ (i as u8)).collect();
            let off = (i % 8) * 1024;
            let sg = [Sge::bytes(&data).unwrap()];
            let mut wr = SendWr::rdma_write(i, &sg, remote(&e.dst, off)).inline();
            if i % 3 == 0 {
                wr = wr.signaled();
            }
            loop {
                match a.post_send(&[wr]) {
                    Ok(()) => break,
                    Err(Error::QueueFull) | Err(Error::CqFull) => {
                        let mut wc = [Completion::default(); 4];
                        let n = a.poll(&mut wc).unwrap();
                        for c in &wc[..n] {
                            assert!(c.status.is_ok(), "{c:?}");
                        }
                    }
                    Err(x) => panic!("sw {sw} inl {inl} i {i} len {len}: {x:?}"),
                }
            }
            // wait until all done (so dst stable) by posting a signaled WRITE of 0 and polling
            let z = [Sge::new(&e.src, 0, 1).unwrap()];
            let probe = SendWr::rdma_write(999_999, &z, remote(&e.dst, 60000)).signaled();
            loop {
                match a.post_send(&[probe]) {
                    Ok(()) => break,
                    Err(Error::QueueFull) | Err(Error::CqFull) => {
                        let mut wc = [Completion::default(); 4];
                        a.poll(&mut wc).unwrap();
                    }
                    Err(x) => panic!("{x:?}"),
                }
            }
            loop {
                let mut wc = [Completion::default(); 4];
                let n = a.poll(&mut wc).unwrap();
                if wc[..n].iter().any(|c| c.wr_id == 999_999) {
                    break;
                }
            }
            let mut got = vec![0u8; len];
            e.dst.read(off as usize, &mut got).unwrap();
            assert_eq!(got, data, "sw {sw} inl {inl} i {i} len {len}");
        }
    }
}

#[test]
fn states_refuse_without_writing() {
    let e = env();
    let mut a = e.pd.create_qp(&cfg(8, 8)).unwrap();
    let mut b = e.pd.create_qp(&cfg(8, 8)).unwrap();
    let sg = [Sge::new(&e.src, 0, 8).unwrap()];
    let d = [1u8; 4];
    let by = [Sge::bytes(&d).unwrap()];
    let to = remote(&e.dst, 0);
    let wrs = [
        SendWr::rdma_write(1, &sg, to),
        SendWr::rdma_write(1, &by, to).inline(),
    ];
    for w in &wrs {
        let err = refused(&mut a, std::slice::from_ref(w));
        assert!(matches!(err, Error::QpState { .. }), "{err:?}");
    }
    let err = refused(&mut a, &wrs);
    assert!(matches!(err, Error::QpState { .. }), "{err:?}");
    let init = QpAttr::init(1, Access::QP_ALL);
    a.modify(QpState::Init, &init).unwrap();
    b.modify(QpState::Init, &init).unwrap();
    for w in &wrs {
        let err = refused(&mut a, std::slice::from_ref(w));
        assert!(matches!(err, Error::QpState { .. }), "INIT {err:?}");
    }
    let rtr = a.rtr_attr(&b.endpoint(), 0);
    a.modify(QpState::Rtr, &rtr).unwrap();
    for w in &wrs {
        let err = refused(&mut a, std::slice::from_ref(w));
        assert!(matches!(err, Error::QpState { .. }), "RTR {err:?}");
    }
    a.modify(QpState::Reset, &QpAttr::default()).unwrap();
    b.modify(QpState::Reset, &QpAttr::default()).unwrap();
    Qp::connect_loopback(&mut a, &mut b).unwrap();
    a.post_send(&[wrs[0].signaled()]).unwrap();
    assert_eq!(poll_n(&mut a, 1)[0].wr_id, 1);
}

/// sge lengths: 0, 2^31 - 1, 2^31
#[test]
fn sge_length_edges() {
    let e = env();
    let (mut a, _b) = e.pd.create_connected_pair(&cfg(8, 8)).unwrap();
    // zero-length SGE write: posted via the checked path
    let z = [Sge::new(&e.src, 0, 0).unwrap()];
    a.post_send(&[SendWr::rdma_write(5, &z, remote(&e.dst, 0)).signaled()])
        .unwrap();
    let wc = poll_n(&mut a, 1);
    assert_eq!((wc[0].wr_id, wc[0].status.is_ok()), (5, true), "{wc:?}");
    // batch of two zero-length: same
    a.post_send(&[
        SendWr::rdma_write(6, &z, remote(&e.dst, 0)).signaled(),
        SendWr::send(7, &z).signaled(),
    ])
    .unwrap_or_else(|e| panic!("{e:?}"));
    let _ = drain(&mut a);
}

#[test]
fn huge_sges_refused_or_failing_remotely() {
    let e = env();
    let (mut a, _b) = e.pd.create_connected_pair(&cfg(8, 8)).unwrap();
    let big =
        e.pd.alloc_mr((1usize << 31) + 64, Access::LOCAL_WRITE)
            .unwrap();
    let bad = RemoteAddr {
        addr: 0x1000,
        rkey: Rkey(0x7777),
    };
    let s = [Sge::new(&big, 0, 1 << 31).unwrap()];
    let err = refused(&mut a, &[SendWr::rdma_write(1, &s, bad)]);
    println!("2^31 single: {err:?}");
    let err2 = refused(
        &mut a,
        &[
            SendWr::rdma_write(1, &s, bad),
            SendWr::rdma_write(2, &s, bad),
        ],
    );
    println!("2^31 batch: {err2:?}");
    // 2^31 - 1 bytes to a bad rkey: posted, fails remotely at once
    let s = [Sge::new(&big, 0, (1 << 31) - 1).unwrap()];
    a.post_send(&[SendWr::rdma_write(3, &s, bad).signaled()])
        .unwrap();
    let wc = poll_n(&mut a, 1);
    println!("2^31-1: {wc:?}");
    assert_eq!(wc[0].wr_id, 3);
    assert!(!wc[0].status.is_ok());
}

/// Unsignaled streams on tiny SQs: must never deadlock, single or batch.
#[test]
fn tiny_sq_unsignaled_streams() {
    let e = env();
    for sw in [1u32, 2, 3, 4, 5] {
        for cq in [None, Some(1), Some(2)] {
            let c = QpConfig {
                cq_depth: cq,
                ..cfg(sw, 0)
            };
            let (mut a, _b) = e.pd.create_connected_pair(&c).unwrap();
            let sg = [Sge::new(&e.src, 0, 8).unwrap()];
            let d = [9u8; 10];
            let by = [Sge::bytes(&d).unwrap()];
            let t = Instant::now();
            let mut posted = 0u64;
            let mut fulls = 0u64;
            while posted < 500 {
                if t.elapsed() > PATIENCE {
                    panic!(
                        "stuck: max_send_wr {sw}, cq_depth {cq:?} (depth {}): at {posted} ({fulls} refusals)",
                        a.cq_depth()
                    );
                }
                let w1 = SendWr::rdma_write(posted, &sg, remote(&e.dst, 0));
                let w2 = SendWr::rdma_write(posted + 1, &by, remote(&e.dst, 64)).inline();
                let r = match posted % 3 {
                    0 => a.post_send(&[w1]),
                    1 => a.post_send(&[w2]),
                    _ => a.post_send(&[
                        w1,
                        SendWr {
                            wr_id: posted + 1,
                            ..w1
                        },
                    ]),
                };
                match r {
                    Ok(()) => posted += if posted % 3 == 2 { 2 } else { 1 },
                    Err(Error::QueueFull) | Err(Error::CqFull) => {
                        fulls += 1;
                        let mut wc = [Completion::default(); 4];
                        let n = a.poll(&mut wc).unwrap();
                        assert_eq!(n, 0, "unsignaled WRs reported: {:?}", &wc[..n]);
                        std::thread::yield_now();
                    }
                    Err(
                        m @ Error::NeverFits {
                            wrs: 2, depth: 1, ..
                        },
                    ) if sw == 1 && posted % 3 == 2 => {
                        // a batch of 2 never fits a queue of 1
                        let _ = m;
                        posted += 2;
                    }
                    Err(x) => panic!("sw {sw} cq {cq:?} at {posted}: {x:?}"),
                }
            }
            let h = a.sim_hook().unwrap();
            assert_eq!(h.cq_overrun(), (false, 0), "sw {sw} cq {cq:?}");
        }
    }
}

/// The refused post's credit dance must not change the next WQE.
#[test]
fn refused_post_changes_no_later_wqe() {
    let e = env();
    let other = e.ctx.alloc_pd().unwrap();
    let omr = other.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let run = |refuse: bool| -> Vec<u8> {
        let c = QpConfig {
            cq_depth: Some(2),
            ..cfg(8, 8)
        };
        let (mut a, _b) = e.pd.create_connected_pair(&c).unwrap();
        let sg = [Sge::new(&e.src, 0, 8).unwrap()];
        let osg = [Sge::new(&omr, 0, 8).unwrap()];
        a.post_send(&[SendWr::rdma_write(1, &sg, remote(&e.dst, 0)).signaled()])
            .unwrap();
        if refuse {
            let err = refused(&mut a, &[SendWr::rdma_write(2, &osg, remote(&e.dst, 0))]);
            assert!(matches!(err, Error::ForeignPd { .. }), "{err:?}");
        }
        assert_eq!(poll_n(&mut a, 1)[0].wr_id, 1);
        a.post_send(&[SendWr::rdma_write(3, &sg, remote(&e.dst, 0))])
            .unwrap();
        let s = a.sq_snapshot().unwrap();
        // WQE 1's ctrl segment, QPN bytes masked
        let mut w = s[64..80].to_vec();
        w[4..7].fill(0);
        w
    };
    let with = run(true);
    let without = run(false);
    assert_eq!(
        with, without,
        "fm_ce_se byte 11: {:#x} vs {:#x}",
        with[11], without[11]
    );
}

#[test]
fn mixed_batches_all_or_nothing() {
    let e = env();
    let other = e.ctx.alloc_pd().unwrap();
    let omr = other.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let c = QpConfig {
        max_send_sge: 2,
        ..cfg(8, 8)
    };
    let (mut a, _b) = e.pd.create_connected_pair(&c).unwrap();
    let sg = [Sge::new(&e.src, 0, 8).unwrap()];
    let sg2 = [
        Sge::new(&e.src, 0, 8).unwrap(),
        Sge::new(&e.src, 8, 8).unwrap(),
    ];
    let sg3 = [sg2[0], sg2[1], sg2[0]];
    let osg = [Sge::new(&omr, 0, 8).unwrap()];
    let osg2 = [
        Sge::new(&e.src, 0, 8).unwrap(),
        Sge::new(&omr, 8, 8).unwrap(),
    ];
    let s8 = [Sge::new(&e.src, 0, 8).unwrap()];
    let to = remote(&e.dst, 0);
    let ok = SendWr::rdma_write(1, &sg, to);
    let cases: Vec<(&str, Vec<SendWr>)> = vec![
        ("ok + other pd", vec![ok, SendWr::rdma_write(2, &osg, to)]),
        (
            "ok + 2sge other pd",
            vec![ok, SendWr::rdma_write(2, &osg2, to)],
        ),
        ("ok + 3 sges", vec![ok, SendWr::rdma_write(2, &sg3, to)]),
        (
            "ok + unaligned atomic",
            vec![ok, SendWr::atomic_fetch_add(2, &s8, remote(&e.dst, 4), 1)],
        ),
        (
            "ok + atomic 2 sges",
            vec![ok, SendWr::atomic_fetch_add(2, &sg2, to, 1)],
        ),
        (
            "ok + inline read",
            vec![ok, SendWr::rdma_read(2, &sg, to).inline()],
        ),
        ("ok x 9", vec![ok; 9]),
        (
            "2sge + ok + other",
            vec![SendWr::send(1, &sg2), ok, SendWr::send(3, &osg)],
        ),
    ];
    for (name, wrs) in cases {
        let err = refused(&mut a, &wrs);
        println!("{name}: {err:?}");
    }
    // Fill all but 1 then a batch of 2
    for i in 0..7 {
        a.post_send(&[SendWr {
            wr_id: 100 + i,
            ..ok
        }])
        .unwrap();
    }
    let err = refused(&mut a, &[ok, ok]);
    assert!(matches!(err, Error::QueueFull), "{err:?}");
    let err = refused(&mut a, &[SendWr::send(1, &sg2), ok]);
    assert!(matches!(err, Error::QueueFull), "{err:?}");
    a.post_send(&[ok.signaled()]).unwrap();
    let got = poll_n(&mut a, 1);
    assert_eq!(got[0].wr_id, 1);
    assert!(drain(&mut a).is_empty());
}

#[test]
fn odd_qp_configs_through_the_in_place_posts() {
    let e = env();
    let to = remote(&e.dst, 0);
    let sg = [Sge::new(&e.src, 0, 8).unwrap()];
    let d = [1u8; 8];
    let by = [Sge::bytes(&d).unwrap()];
    // max_send_sge 0
    let c = QpConfig {
        max_send_sge: 0,
        max_inline: 0,
        ..cfg(4, 4)
    };
    let (mut a, _b) = e.pd.create_connected_pair(&c).unwrap();
    for w in [
        SendWr::rdma_write(1, &sg, to),
        SendWr::rdma_write(1, &by, to).inline(),
        SendWr::send(1, &sg),
    ] {
        let err = refused(&mut a, &[w]);
        println!("sge0: {err:?}");
        assert!(matches!(
            err,
            Error::TooManySges {
                sges: 1,
                max: 0,
                ..
            }
        ));
    }
    a.post_send(&[SendWr::rdma_write(2, &[], to).signaled()])
        .unwrap();
    let wc = poll_n(&mut a, 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status),
        (2, WcStatus::SUCCESS),
        "an empty WRITE"
    );
    a.post_send(&[SendWr::send(3, &[]).inline().signaled()])
        .unwrap_or_else(|e| println!("empty inline send: {e:?}"));
    println!("{:?}", drain(&mut a));
    // max_inline 0 with sge 1
    let c = QpConfig {
        max_send_sge: 1,
        max_inline: 0,
        ..cfg(4, 4)
    };
    let (mut a, _b) = e.pd.create_connected_pair(&c).unwrap();
    let err = refused(&mut a, &[SendWr::rdma_write(1, &by, to).inline()]);
    assert!(
        matches!(err, Error::InlineTooLong { len: 8, max: 0 }),
        "{err:?}"
    );
    let z: [u8; 0] = [];
    let bz = [Sge::bytes(&z).unwrap()];
    a.post_send(&[SendWr::rdma_write(4, &bz, to).inline().signaled()])
        .unwrap();
    a.post_send(&[SendWr::send(5, &bz).inline().signaled()])
        .unwrap();
    let wc = poll_n(&mut a, 1);
    println!("0-byte inline write: {wc:?}");
    std::thread::sleep(Duration::from_millis(20));
    println!("0-byte inline send without recv: {:?}", drain(&mut a));
    // user-modified to ERR: posts flushed
    let (mut a, _b) = e.pd.create_connected_pair(&cfg(4, 4)).unwrap();
    a.modify(QpState::Err, &QpAttr::default()).unwrap();
    a.post_send(&[SendWr::rdma_write(6, &sg, to)]).unwrap();
    a.post_send(&[SendWr::rdma_write(7, &by, to).inline()])
        .unwrap();
    a.post_send(&[
        SendWr::rdma_write(8, &sg, to),
        SendWr::rdma_read(9, &sg, to),
    ])
    .unwrap();
    let wc = poll_n(&mut a, 4);
    assert!(
        wc.iter().all(|c| c.status == WcStatus::WR_FLUSH_ERR),
        "{wc:?}"
    );
    assert_eq!(
        wc.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        vec![6, 7, 8, 9]
    );
    // Owned post with a non-empty sge list made of bytes: refused
    let lm = e.pd.alloc_local_mr(4096, Access::LOCAL_WRITE).unwrap();
    let (mut a, _b) = e.pd.create_connected_pair(&cfg(4, 4)).unwrap();
    let r = a.post_send_owned(&SendWr::rdma_write(1, &by, to), lm, 0, 8);
    let lm = match r {
        Err(rf) => {
            println!("owned+bytes: {:?}", rf.error);
            rf.buf
        }
        Ok(()) => panic!("owned with sges accepted"),
    };
    // Owned inline WRITE on the fast path
    a.post_send_owned(
        &SendWr::rdma_write(2, &[], to).inline().signaled(),
        lm,
        0,
        8,
    )
    .unwrap();
    assert_eq!(poll_n(&mut a, 1)[0].wr_id, 2);
    assert!(a.take_send_buf().is_some());
}

#[test]
fn a_bytes_sge_of_2_pow_31_is_refused() {
    let v = vec![0u8; 1 << 31];
    assert!(matches!(Sge::bytes(&v), Err(Error::LengthOverflow { .. })));
    assert!(Sge::bytes(&v[..(1 << 31) - 1]).is_ok());
}

/// The same WRs through the fast paths (singles) and the checked path (a
/// batch with an inline WR): the WQE bytes the device reads must match.
#[test]
fn fast_and_checked_write_the_same_wqes() {
    let e = env();
    let c = QpConfig {
        max_inline: 220,
        ..cfg(64, 64)
    };
    let (mut a, _pa) = e.pd.create_connected_pair(&c).unwrap();
    let (mut b, _pb) = e.pd.create_connected_pair(&c).unwrap();
    let data: Vec<u8> = (0..220u32).map(|i| (i * 13 + 1) as u8).collect();
    let sg = [Sge::new(&e.src, 16, 40).unwrap()];
    let to = remote(&e.dst, 0);
    let lens = [
        0usize, 1, 11, 12, 13, 27, 28, 29, 44, 60, 61, 64, 65, 92, 124, 156, 188, 219, 220,
    ];
    let mut n = 0;
    for (i, &len) in lens.iter().enumerate() {
        let by = [Sge::bytes(&data[..len]).unwrap()];
        let mut w1 = SendWr::rdma_write(i as u64, &by, to).inline();
        if i % 2 == 0 {
            w1 = w1.signaled();
        }
        if i % 3 == 0 {
            w1 = w1.fence();
        }
        let w2 = match i % 3 {
            0 => SendWr::rdma_write(100 + i as u64, &sg, to),
            1 => SendWr::rdma_read(100 + i as u64, &sg, to).signaled(),
            _ => SendWr::rdma_write(100 + i as u64, &sg, to)
                .imm(0xfeed)
                .solicited(),
        };
        let w2 = if i % 3 == 2 {
            SendWr {
                op: WrOp::RdmaWrite { remote: to },
                ..w2
            }
        } else {
            w2
        };
        a.post_send(&[w1]).unwrap();
        a.post_send(&[w2]).unwrap();
        b.post_send(&[w1, w2]).unwrap();
        n += 2;
    }
    std::thread::sleep(Duration::from_millis(50));
    let sa = a.sq_snapshot().unwrap();
    let sb = b.sq_snapshot().unwrap();
    let ring = sa.len() - 4;
    assert_eq!(&sa[ring..], &sb[ring..], "doorbell records");
    let mut off = 0;
    for k in 0..n {
        let ds = (sa[off + 7] & 0x3f) as usize;
        assert_eq!(sa[off + 7], sb[off + 7], "WQE {k} ds");
        let mut x = sa[off..off + ds * 16].to_vec();
        let mut y = sb[off..off + ds * 16].to_vec();
        x[4..7].fill(0);
        y[4..7].fill(0);
        assert_eq!(x, y, "WQE {k} at {off} (ds {ds})");
        off += (ds * 16).div_ceil(64) * 64;
    }
    let _ = drain(&mut a);
    let _ = drain(&mut b);
}

/// A WR of this id, SGEs and remote address.
type MakeWr = for<'s> fn(u64, &'s [Sge<'s>], RemoteAddr) -> SendWr<'s>;

/// A batch of one opcode (all WRITEs, all SENDs: written by one loop) and
/// a mixed one write the SQ bytes and complete the WRs that the same WRs
/// posted one at a time write and complete, whatever their flags.
#[test]
fn batches_of_one_opcode_write_what_single_posts_write() {
    let e = env();
    let c = cfg(64, 64);
    let (mut a, mut pa) = e.pd.create_connected_pair(&c).unwrap();
    let (mut b, mut pb) = e.pd.create_connected_pair(&c).unwrap();
    let sges: Vec<[Sge<'_>; 1]> = (0..8)
        .map(|i| [Sge::new(&e.src, 16 * i, 8 + i as u32).unwrap()])
        .collect();
    let rbuf = [Sge::new(&e.dst, 0, 64).unwrap()];
    let flags = [
        SendFlags::empty(),
        SendFlags::SOLICITED,
        SendFlags::FENCE,
        SendFlags::SIGNALED,
    ];
    let kinds: [MakeWr; 3] = [
        |id, s, to| SendWr::rdma_write(id, s, to),
        |id, s, _| SendWr::send(id, s),
        |id, s, to| {
            if id % 2 == 0 {
                SendWr::send(id, s)
            } else {
                SendWr::rdma_write(id, s, to)
            }
        },
    ];
    for (round, make) in kinds.iter().enumerate() {
        let wrs: Vec<SendWr<'_>> = (0..8)
            .map(|i| {
                let w = make(
                    (round * 100 + i) as u64,
                    &sges[i],
                    remote(&e.dst, 64 * i as u64),
                );
                w.with_flags(
                    flags[i % 4]
                        | if i == 7 {
                            SendFlags::SIGNALED
                        } else {
                            SendFlags::empty()
                        },
                )
            })
            .collect();
        for peer in [&mut pa, &mut pb] {
            for i in 0..8 {
                peer.post_recv(&[RecvWr::new(i, &rbuf)]).unwrap();
            }
        }
        a.post_send(&wrs).unwrap();
        for w in &wrs {
            b.post_send(std::slice::from_ref(w)).unwrap();
        }
        let want = wrs
            .iter()
            .filter(|w| w.flags.contains(SendFlags::SIGNALED))
            .count();
        assert_same_completions(&mut a, &mut b, want, &format!("round {round}"));
        drain(&mut pa);
        drain(&mut pb);
    }
    assert_same_wqes(&a, &b);
}
