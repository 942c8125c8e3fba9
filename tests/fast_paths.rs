//! Hostile tests of the in-place post paths (issue 14: `DirectQp::post_one`
//! / `post_many`, `Sge::bytes`, the post modes and CQ credits) against what
//! the checked path does, on the sim: what a break-it review tried, kept.

use rdma_direct::testing::QpHooks;
use rdma_direct::*;
use std::time::{Duration, Instant};

#[path = "support/fast_paths.rs"]
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
        (
            "write_imm",
            vec![SendWr::rdma_write_with_imm(1, &by, to, 5)],
        ),
        ("send", vec![SendWr::send(1, &by)]),
        ("send_imm", vec![SendWr::send_with_imm(1, &by, 3)]),
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
        assert!(matches!(err, Error::Invalid(_)), "{name}: {err:?}");
    }
    // 8-byte atomic over bytes
    let d8 = [0u8; 8];
    let b8 = [Sge::bytes(&d8).unwrap()];
    let err = refused(&mut a, &[SendWr::atomic_fetch_add(1, &b8, to, 1)]);
    assert!(matches!(err, Error::Invalid(_)), "faa: {err:?}");
    // receive
    let err = b.post_recv(&[RecvWr::new(1, &by)]).unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "recv: {err:?}");
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
    assert!(matches!(err, Error::Invalid(_)), "{err:?}");
    let err = refused(&mut a, &[SendWr::send(1, &sg).inline()]);
    assert!(matches!(err, Error::Invalid(_)), "{err:?}");
    let err = refused(
        &mut a,
        &[
            SendWr::send(1, &sg[..]).inline(),
            SendWr::send(1, &sg[..]).inline(),
        ],
    );
    assert!(matches!(err, Error::Invalid(_)), "{err:?}");
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
    let init = QpAttr::init(1, Access::all());
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
fn huge_sges() {
    let e = env();
    let (mut a, _b) = e.pd.create_connected_pair(&cfg(8, 8)).unwrap();
    let big =
        e.pd.reg_mr((1usize << 31) + 64, Access::LOCAL_WRITE)
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
                    Err(Error::Invalid(m)) if sw == 1 && posted % 3 == 2 => {
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

/// A shallow CQ counts credits: CqFull comes, no overrun, ever.
#[test]
fn shallow_cq_credits() {
    let e = env();
    let c = QpConfig {
        cq_depth: Some(2),
        ..cfg(16, 16)
    };
    let (mut a, mut b) = e.pd.create_connected_pair(&c).unwrap();
    let sg = [Sge::new(&e.src, 0, 8).unwrap()];
    let rsg = [Sge::new(&e.dst, 4096, 64).unwrap()];
    let mut got_full = false;
    for i in 0..10u64 {
        match a.post_send(&[SendWr::rdma_write(i, &sg, remote(&e.dst, 0)).signaled()]) {
            Ok(()) => {}
            Err(Error::CqFull) => {
                got_full = true;
                break;
            }
            Err(x) => panic!("{x:?}"),
        }
    }
    assert!(got_full);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(a.sim_hook().unwrap().cq_overrun(), (false, 0));
    // Receives too.
    for i in 0..4u64 {
        let r = b.post_recv(&[RecvWr::new(i, &rsg)]);
        println!("recv {i}: {r:?}");
    }
    let got = poll_n(&mut a, 2);
    assert_eq!(got.iter().map(|c| c.wr_id).collect::<Vec<_>>(), vec![0, 1]);
    // batch of 3 on depth 2: never fits -> Invalid
    let w = SendWr::rdma_write(1, &sg, remote(&e.dst, 0));
    let err = refused(&mut a, &[w, w, w]);
    assert!(matches!(err, Error::Invalid(_)), "{err:?}");
}

/// The refused post's credit dance must not change the next WQE.
#[test]
fn refused_post_changes_no_later_wqe() {
    let e = env();
    let other = e.ctx.alloc_pd().unwrap();
    let omr = other.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
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
            assert!(matches!(err, Error::Invalid(_)), "{err:?}");
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
fn repro_cqfull_forever() {
    let e = env();
    let c = QpConfig {
        cq_depth: Some(2),
        ..cfg(4, 0)
    };
    let (mut a, _b) = e.pd.create_connected_pair(&c).unwrap();
    let sg = [Sge::new(&e.src, 0, 8).unwrap()];
    let w = SendWr::rdma_write(1, &sg, remote(&e.dst, 0));
    a.post_send(&[w]).unwrap();
    let t = Instant::now();
    let mut wc = [Completion::default(); 4];
    let mut last = None;
    while t.elapsed() < PATIENCE {
        match a.post_send(&[w, w]) {
            Ok(()) => return,
            Err(e) => last = Some(format!("{e:?}")),
        }
        assert_eq!(a.poll(&mut wc).unwrap(), 0);
        std::thread::yield_now();
    }
    panic!("a batch of 2 on a CQ of 2 never posts: {last:?}");
}

#[test]
fn mixed_batches_all_or_nothing() {
    let e = env();
    let other = e.ctx.alloc_pd().unwrap();
    let omr = other.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
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
fn shared_cq_fast_paths() {
    let e = env();
    let c = cfg(8, 8);
    let mut cq = e.pd.create_shared_cq(4).unwrap();
    let x = cq.create_qp(&c).unwrap();
    let y = cq.create_qp(&c).unwrap();
    let (mut px, mut py) = (e.pd.create_qp(&c).unwrap(), e.pd.create_qp(&c).unwrap());
    Qp::connect_loopback(cq.qp_mut(x), &mut px).unwrap();
    Qp::connect_loopback(cq.qp_mut(y), &mut py).unwrap();
    let sg = [Sge::new(&e.src, 0, 8).unwrap()];
    let d = [5u8; 20];
    let by = [Sge::bytes(&d).unwrap()];
    let to = remote(&e.dst, 0);
    // poll on member QP: SharedCq error
    let mut wc = [Completion::default(); 4];
    let err = cq.qp_mut(x).poll(&mut wc).unwrap_err();
    assert!(matches!(err, Error::SharedCq { .. }), "{err:?}");
    // bytes in a non-inline on a shared QP
    let err = refused(cq.qp_mut(x), &[SendWr::rdma_write(1, &by, to)]);
    assert!(matches!(err, Error::Invalid(_)), "{err:?}");
    // unsignaled streams across both QPs with credits
    let t = Instant::now();
    let mut done = 0;
    let mut i = 0u64;
    let mut seen = Vec::new();
    while done < 400 {
        assert!(t.elapsed() < PATIENCE, "stuck at {done}");
        let q = if i % 2 == 0 { x } else { y };
        let w = match i % 4 {
            0 => SendWr::rdma_write(i, &sg, to),
            1 => SendWr::rdma_write(i, &by, to).inline(),
            2 => SendWr::rdma_write(i, &sg, to).signaled(),
            _ => SendWr::send(i, &by).inline().signaled(),
        };
        let r = if i % 5 == 0 {
            cq.qp_mut(q).post_send(&[
                w,
                SendWr {
                    wr_id: i + 1000000,
                    ..w
                },
            ])
        } else {
            cq.qp_mut(q).post_send(&[w])
        };
        match r {
            Ok(()) => {
                done += 1;
                i += 1;
            }
            Err(Error::CqFull) | Err(Error::QueueFull) => {
                let n = cq.poll(&mut wc).unwrap();
                seen.extend_from_slice(&wc[..n]);
                // peers need receives for SENDs
            }
            Err(e) => panic!("{i}: {e:?}"),
        }
        // keep receives posted at peers
        let rsg = [Sge::new(&e.dst, 8192, 64).unwrap()];
        let _ = px.post_recv(&[RecvWr::new(0, &rsg)]);
        let _ = py.post_recv(&[RecvWr::new(0, &rsg)]);
        let _ = px.poll(&mut wc);
        let _ = py.poll(&mut wc);
    }
    for c in &seen {
        assert!(c.status.is_ok(), "{c:?}");
    }
}

#[test]
fn dropped_mrs_wait_for_fast_path_wrs() {
    let e = env();
    let (mut a, _b) = e.pd.create_connected_pair(&cfg(16, 16)).unwrap();
    let base = e.pd.live_mrs();
    let m1 = e.pd.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    let m2 =
        e.pd.reg_mr(
            4096,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let m3 = e.pd.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    assert_eq!(e.pd.live_mrs(), base + 3);
    {
        let s1 = [Sge::new(&m1, 0, 8).unwrap()];
        let s3 = [Sge::new(&m3, 0, 8).unwrap()];
        // single unsignaled, fast path
        a.post_send(&[SendWr::rdma_write(1, &s1, remote(&m2, 0))])
            .unwrap();
        // batch unsignaled, fast path
        a.post_send(&[
            SendWr::rdma_read(2, &s3, remote(&m2, 0)),
            SendWr::rdma_write(3, &s3, remote(&m2, 8)),
        ])
        .unwrap();
    }
    drop((m1, m2, m3));
    assert_eq!(e.pd.live_mrs(), base + 3, "dropped while WRs outstanding");
    assert!(drain(&mut a).is_empty());
    assert_eq!(e.pd.live_mrs(), base + 3, "still outstanding (unsignaled)");
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    a.post_send(&[SendWr::rdma_write(4, &s, remote(&e.dst, 0)).signaled()])
        .unwrap();
    assert_eq!(poll_n(&mut a, 1)[0].wr_id, 4);
    e.pd.reclaim();
    assert_eq!(e.pd.live_mrs(), base);
    // Inline with an MR: dropped MR and reset
    let m4 = e.pd.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    {
        let s4 = [Sge::new(&m4, 0, 8).unwrap()];
        a.post_send(&[SendWr::rdma_write(5, &s4, remote(&e.dst, 0)).inline()])
            .unwrap();
    }
    drop(m4);
    a.modify(QpState::Reset, &QpAttr::default()).unwrap();
    assert_eq!(e.pd.live_mrs(), base);
}

#[test]
fn errors_then_flush_through_fast_path() {
    let e = env();
    let (mut a, mut b) = e.pd.create_connected_pair(&cfg(16, 16)).unwrap();
    let sg = [Sge::new(&e.src, 0, 8).unwrap()];
    let d = [1u8; 16];
    let by = [Sge::bytes(&d).unwrap()];
    let bad = RemoteAddr {
        addr: 0x10,
        rkey: Rkey(0xdead),
    };
    let to = remote(&e.dst, 0);
    a.post_send(&[SendWr::rdma_write(1, &sg, to)]).unwrap();
    a.post_send(&[SendWr::rdma_write(2, &sg, bad)]).unwrap(); // unsignaled error
    a.post_send(&[SendWr::rdma_write(3, &sg, to)]).unwrap();
    a.post_send(&[SendWr::rdma_write(4, &by, to).inline()])
        .unwrap();
    a.post_send(&[SendWr::rdma_read(5, &sg, to), SendWr::send(6, &sg)])
        .unwrap();
    let got = poll_n(&mut a, 5);
    println!("{got:#?}");
    let ids: Vec<_> = got.iter().map(|c| (c.wr_id, c.status.name())).collect();
    println!("{ids:?}");
    assert_eq!(got[0].wr_id, 2);
    assert!(!got[0].status.is_ok());
    for (c, id) in got[1..].iter().zip([3, 4, 5, 6]) {
        assert_eq!(c.wr_id, id);
        assert_eq!(c.status, WcStatus::WR_FLUSH_ERR);
    }
    // Device in ERR now; crate state still RTS. Post more via fast paths: flushed.
    a.post_send(&[SendWr::rdma_write(7, &sg, to)]).unwrap();
    a.post_send(&[SendWr::rdma_write(8, &by, to).inline()])
        .unwrap();
    a.post_send(&[
        SendWr::rdma_write(9, &sg, to),
        SendWr::rdma_write(10, &sg, to),
    ])
    .unwrap();
    let got = poll_n(&mut a, 4);
    assert_eq!(
        got.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        vec![7, 8, 9, 10]
    );
    for c in &got {
        assert_eq!(c.status, WcStatus::WR_FLUSH_ERR, "{c:?}");
        assert_eq!(c.qp_num, a.qp_num());
    }
    // b's got nothing posted; it should also be in ERR (class C errors put both)
    println!("b: {:?}", drain(&mut b));
    // reset and reuse
    a.modify(QpState::Reset, &QpAttr::default()).unwrap();
    b.modify(QpState::Reset, &QpAttr::default()).unwrap();
    Qp::connect_loopback(&mut a, &mut b).unwrap();
    for i in 0..50u64 {
        a.post_send(&[SendWr::rdma_write(100 + i, &sg, to).signaled()])
            .unwrap();
        let c = poll_n(&mut a, 1);
        assert_eq!((c[0].wr_id, c[0].status), (100 + i, WcStatus::SUCCESS));
    }
    // out of len 0 with a CQE waiting
    a.post_send(&[SendWr::rdma_write(200, &sg, to).signaled()])
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let mut none: [Completion; 0] = [];
    assert_eq!(a.poll(&mut none).unwrap(), 0);
    assert_eq!(poll_n(&mut a, 1)[0].wr_id, 200);
}

#[test]
fn completions_are_right() {
    let e = env();
    let (mut a, mut b) = e.pd.create_connected_pair(&cfg(16, 16)).unwrap();
    let sg = [Sge::new(&e.src, 0, 100).unwrap()];
    let d = [1u8; 33];
    let by = [Sge::bytes(&d).unwrap()];
    let rsg = [Sge::new(&e.dst, 8192, 256).unwrap()];
    let to = remote(&e.dst, 0);
    for i in 0..6 {
        b.post_recv(&[RecvWr::new(50 + i, &rsg)]).unwrap();
    }
    let wrs = [
        SendWr::rdma_write(1, &sg, to).signaled(),
        SendWr::rdma_write_with_imm(2, &sg, to, 0xabcd).signaled(),
        SendWr::send(3, &sg).signaled(),
        SendWr::send_with_imm(4, &sg, 0x1234).signaled(),
        SendWr::rdma_read(5, &sg, to).signaled(),
        SendWr::rdma_write(6, &by, to).inline().signaled(),
        SendWr::send(7, &by).inline().signaled(),
        SendWr::send_with_imm(8, &by, 77)
            .inline()
            .signaled()
            .solicited(),
        SendWr::rdma_write_with_imm(9, &by, to, 78)
            .inline()
            .signaled(),
    ];
    let mut single = Vec::new();
    for w in &wrs {
        a.post_send(std::slice::from_ref(w)).unwrap();
        single.extend(poll_n(&mut a, 1));
    }
    let rs = poll_n(&mut b, 6);
    println!("{single:#?}\n{rs:#?}");
    for i in 0..6 {
        b.post_recv(&[RecvWr::new(50 + i, &rsg)]).unwrap();
    }
    // the same as pairs (checked path for inline, fast for the rest)
    let mut batch = Vec::new();
    for w in wrs.chunks(2) {
        a.post_send(w).unwrap();
        batch.extend(poll_n(&mut a, w.len()));
    }
    let rb = poll_n(&mut b, 6);
    let key = |c: &Completion| {
        (
            c.wr_id,
            c.status,
            c.opcode,
            c.byte_len,
            c.imm,
            c.qp_num,
            c.vendor_err,
        )
    };
    assert_eq!(
        single.iter().map(key).collect::<Vec<_>>(),
        batch.iter().map(key).collect::<Vec<_>>()
    );
    assert_eq!(
        rs.iter().map(key).collect::<Vec<_>>(),
        rb.iter().map(key).collect::<Vec<_>>()
    );
}

/// The child process of `trace_shows_every_wqe_and_cqe`, which runs it
/// (with `--ignored`) under `RDMA_DIRECT_TRACE=1` and checks its stderr; on
/// its own it checks nothing, so it is ignored.
#[test]
#[ignore = "the child of trace_shows_every_wqe_and_cqe, which runs it"]
fn trace_child() {
    assert!(
        std::env::var("FAST_PATHS_TRACE_CHILD").is_ok(),
        "run by trace_shows_every_wqe_and_cqe"
    );
    let e = env();
    let c = QpConfig {
        max_inline: 220,
        ..cfg(4, 4)
    };
    let (mut a, _b) = e.pd.create_connected_pair(&c).unwrap();
    let sg = [Sge::new(&e.src, 0, 8).unwrap()];
    let d = [3u8; 200];
    let to = remote(&e.dst, 0);
    let mut expect_posts = 0;
    let mut expect_cqes = 0;
    for i in 0..40u64 {
        let len = (i as usize * 37) % 201;
        let by = [Sge::bytes(&d[..len]).unwrap()];
        let wrs: Vec<SendWr> = match i % 4 {
            0 => vec![SendWr::rdma_write(i, &sg, to).signaled()],
            1 => vec![SendWr::rdma_write(i, &by, to).inline().signaled()],
            2 => vec![
                SendWr::rdma_write(i, &sg, to).signaled(),
                SendWr::rdma_read(i + 1000, &sg, to).signaled(),
            ],
            _ => vec![SendWr::rdma_write(i, &sg, to)],
        };
        a.post_send(&wrs).unwrap();
        expect_posts += wrs.len();
        let sig = wrs.iter().filter(|w| w.signaled).count();
        expect_cqes += sig;
        if sig > 0 {
            poll_n(&mut a, sig);
        } else {
            // unsignaled: the next signaled one retires it
        }
    }
    eprintln!("FAST_PATHS expect posts {expect_posts} cqes>= {expect_cqes}");
}

#[test]
fn trace_shows_every_wqe_and_cqe() {
    let err = traced_child("trace_child", "FAST_PATHS_TRACE_CHILD");
    let posts = err
        .lines()
        .filter(|l| l.contains("rdma-direct trace: QP") && l.contains(" post wr_id"))
        .count();
    let cqes = err
        .lines()
        .filter(|l| l.contains("rdma-direct trace: CQ") && l.contains("CQE ci"))
        .count();
    let undecodable = err.lines().filter(|l| l.contains("undecodable")).count();
    let exp = err.lines().find(|l| l.starts_with("FAST_PATHS")).unwrap();
    println!("{exp}: got posts {posts} cqes {cqes} undecodable {undecodable}");
    for l in err.lines().filter(|l| l.contains("trace")).take(12) {
        println!("{l}");
    }
    let want: usize = exp.split_whitespace().nth(3).unwrap().parse().unwrap();
    let wantc: usize = exp.split_whitespace().nth(5).unwrap().parse().unwrap();
    assert_eq!(posts, want);
    assert!(cqes >= wantc);
    assert_eq!(undecodable, 0);
}
