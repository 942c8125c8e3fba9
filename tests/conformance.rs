//! The backend-generic conformance suite: every test runs on every device
//! present — always the sim (direct path), plus each ibverbs device (verbs
//! path), e.g. rxe0 inside the soft-RoCE guest (`scripts/rxe-vm`).
//!
//! `RDMA_DIRECT_REQUIRE_DEVICE=name[,name...]` makes a missing device a failure
//! instead of a loud skip (CI sets it in the guest).

use rdma_direct::{
    Access, Completion, Context, Error, Mr, Qp, QpConfig, RemoteAddr, Rkey, SendWr, Sge, WcOpcode,
    WcStatus,
};
use std::time::{Duration, Instant};

/// Writes to the real stderr, past libtest's capture, so skips and
/// per-device results show in every run, not only failing ones.
fn loud(msg: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// The devices under test; says (once) what it skips and why.
fn devices() -> Vec<String> {
    let all = rdma_direct::list_devices().expect("list devices");
    let names: Vec<String> = all.iter().map(|d| d.name.clone()).collect();
    if let Ok(req) = std::env::var("RDMA_DIRECT_REQUIRE_DEVICE") {
        for r in req.split(',').filter(|s| !s.is_empty()) {
            assert!(
                names.iter().any(|n| n == r),
                "RDMA_DIRECT_REQUIRE_DEVICE names {r}, which is not present: {names:?}"
            );
        }
    }
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if names.len() == 1 {
            loud(format_args!(
                "conformance: SKIPPING the verbs path: no ibverbs device on this host (only the sim). \
                 scripts/test runs this suite again on rxe0 in a soft-RoCE guest."
            ));
        } else {
            loud(format_args!("conformance: devices under test: {names:?}"));
        }
    });
    names
}

struct Setup {
    _ctx: Context,
    pd: rdma_direct::Pd,
    a: Qp,
    b: Qp,
}

fn setup(dev: &str) -> Setup {
    let ctx = Context::open(dev).unwrap_or_else(|e| panic!("open {dev}: {e}"));
    let pd = ctx.alloc_pd().unwrap();
    let cfg = QpConfig {
        max_send_wr: 64,
        max_send_sge: 4,
        max_inline: 128,
        ..QpConfig::default()
    };
    let (a, b) = pd
        .create_connected_pair(&cfg)
        .unwrap_or_else(|e| panic!("connect on {dev}: {e}"));
    Setup {
        _ctx: ctx,
        pd,
        a,
        b,
    }
}

fn poll_one(qp: &mut Qp, dev: &str) -> Completion {
    let mut wc = [Completion::default(); 1];
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if qp.poll(&mut wc).unwrap() == 1 {
            return wc[0];
        }
        assert!(
            Instant::now() < deadline,
            "{dev}: no completion within 20 s"
        );
        std::thread::yield_now();
    }
}

fn remote(mr: &Mr, offset: u64) -> RemoteAddr {
    RemoteAddr {
        addr: mr.addr() + offset,
        rkey: mr.rkey(),
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn contents(mr: &Mr) -> Vec<u8> {
    let mut v = vec![0; mr.len()];
    mr.read(0, &mut v).unwrap();
    v
}

#[test]
fn rdma_write_4096_lands_byte_for_byte() {
    for dev in devices() {
        let mut s = setup(&dev);
        let src = s.pd.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
        let dst =
            s.pd.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
                .unwrap();
        let data = pattern(4096, 7);
        src.write(0, &data).unwrap();
        let sge = [Sge::new(&src, 0, 4096).unwrap()];
        s.a.post_send(&[SendWr::rdma_write(77, &sge, remote(&dst, 0)).signaled()])
            .unwrap();
        let wc = poll_one(&mut s.a, &dev);
        assert_eq!(wc.status, WcStatus::SUCCESS, "{dev}");
        assert_eq!(wc.wr_id, 77, "{dev}");
        assert_eq!(wc.opcode, WcOpcode::RDMA_WRITE, "{dev}");
        assert_eq!(wc.qp_num, s.a.qp_num(), "{dev}");
        assert_eq!(contents(&dst), data, "{dev}: payload differs");
        loud(format_args!(
            "conformance: {dev} ({}): 4096-byte RDMA WRITE landed byte for byte",
            s.a.data_path()
        ));
        drop(s.b);
    }
}

#[test]
fn wrong_rkey_is_remote_access_error_and_target_unchanged() {
    for dev in devices() {
        let mut s = setup(&dev);
        let src = s.pd.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
        let dst =
            s.pd.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
                .unwrap();
        src.write(0, &pattern(4096, 1)).unwrap();
        let before = pattern(4096, 200);
        dst.write(0, &before).unwrap();
        let sge = [Sge::new(&src, 0, 4096).unwrap()];
        let bad = RemoteAddr {
            addr: dst.addr(),
            rkey: Rkey(dst.rkey().0 ^ 0x00ab_cd00),
        };
        s.a.post_send(&[SendWr::rdma_write(5, &sge, bad).signaled()])
            .unwrap();
        let wc = poll_one(&mut s.a, &dev);
        assert_eq!(
            wc.status,
            WcStatus::REM_ACCESS_ERR,
            "{dev}: got {}",
            wc.status
        );
        assert_eq!(wc.wr_id, 5, "{dev}");
        assert_eq!(contents(&dst), before, "{dev}: target changed");
        loud(format_args!(
            "conformance: {dev}: wrong rkey -> {}, target unchanged",
            wc.status
        ));
        drop(s.b);
    }
}

#[test]
fn write_beyond_the_remote_mr_is_remote_access_error() {
    for dev in devices() {
        let mut s = setup(&dev);
        let src = s.pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
        let dst =
            s.pd.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
                .unwrap();
        src.write(0, &[0xee; 64]).unwrap();
        let sge = [Sge::new(&src, 0, 64).unwrap()];
        s.a.post_send(&[SendWr::rdma_write(1, &sge, remote(&dst, 4096 - 32)).signaled()])
            .unwrap();
        let wc = poll_one(&mut s.a, &dev);
        assert_eq!(
            wc.status,
            WcStatus::REM_ACCESS_ERR,
            "{dev}: got {}",
            wc.status
        );
        assert!(
            contents(&dst).iter().all(|&b| b == 0),
            "{dev}: target changed"
        );
        drop(s.b);
    }
}

#[test]
fn inline_gather_and_unsignaled_writes_wrap_the_ring() {
    for dev in devices() {
        let mut s = setup(&dev);
        let src = s.pd.reg_mr(8192, Access::LOCAL_WRITE).unwrap();
        let dst =
            s.pd.reg_mr(8192, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
                .unwrap();
        // 300 rounds of: an unsignaled inline write, then a signaled 3-SGE write;
        // the signaled completion retires both. Sizes vary so WQEs straddle the SQ end.
        for round in 0..300u32 {
            let n = 1 + (round as usize * 37) % 120;
            let a = pattern(n, round as u8);
            src.write(0, &a).unwrap();
            let sge = [Sge::new(&src, 0, n as u32).unwrap()];
            let off = (round as u64 * 13) % 3800;
            s.a.post_send(&[
                SendWr::rdma_write(1000 + round as u64, &sge, remote(&dst, off)).inline(),
            ])
            .unwrap();
            let parts = [(4096usize, 100u32), (4500, 0), (5000, 200)];
            let b = pattern(300, round as u8 ^ 0x5a);
            src.write(4096, &b[..100]).unwrap();
            src.write(5000, &b[100..]).unwrap();
            let sges: Vec<Sge> = parts
                .iter()
                .map(|&(o, l)| Sge::new(&src, o, l).unwrap())
                .collect();
            s.a.post_send(&[
                SendWr::rdma_write(round as u64, &sges, remote(&dst, 4096 + off)).signaled(),
            ])
            .unwrap();
            let wc = poll_one(&mut s.a, &dev);
            assert_eq!(
                (wc.status, wc.wr_id),
                (WcStatus::SUCCESS, round as u64),
                "{dev}: round {round}"
            );
            let got = contents(&dst);
            assert_eq!(
                &got[off as usize..off as usize + n],
                &a[..],
                "{dev}: inline payload, round {round}"
            );
            assert_eq!(
                &got[4096 + off as usize..4096 + off as usize + 300],
                &b[..],
                "{dev}: SGE payload, round {round}"
            );
        }
        drop(s.b);
    }
}

#[test]
fn bad_input_is_refused_and_posts_nothing() {
    for dev in devices() {
        let mut s = setup(&dev);
        assert!(
            matches!(s.pd.reg_mr(0, Access::LOCAL_WRITE), Err(Error::Invalid(_))),
            "{dev}: zero-length MR"
        );
        assert!(
            matches!(
                s.pd.reg_mr(64, Access::REMOTE_WRITE),
                Err(Error::Invalid(_))
            ),
            "{dev}: REMOTE_WRITE alone"
        );
        let src = s.pd.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
        let dst =
            s.pd.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
                .unwrap();
        assert!(
            Sge::new(&src, 4000, 200).is_err(),
            "{dev}: SGE outside the MR"
        );
        assert!(
            Sge::new(&src, usize::MAX, 2).is_err(),
            "{dev}: SGE offset overflow"
        );
        // A batch whose second WR is bad (inline longer than max_inline) posts nothing.
        let good = [Sge::new(&src, 0, 8).unwrap()];
        let long = [Sge::new(&src, 0, 1024).unwrap()];
        let batch = [
            SendWr::rdma_write(1, &good, remote(&dst, 0)).signaled(),
            SendWr::rdma_write(2, &long, remote(&dst, 0))
                .inline()
                .signaled(),
        ];
        assert!(
            s.a.post_send(&batch).is_err(),
            "{dev}: over-long inline accepted"
        );
        let mut wc = [Completion::default(); 4];
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(s.a.poll(&mut wc).unwrap(), 0, "{dev}: something was posted");
        // The QP still works afterwards: the next completion is the next WR's.
        src.write(0, b"intact!!").unwrap();
        s.a.post_send(&[SendWr::rdma_write(3, &good, remote(&dst, 0)).signaled()])
            .unwrap();
        let c = poll_one(&mut s.a, &dev);
        assert_eq!((c.status, c.wr_id), (WcStatus::SUCCESS, 3), "{dev}");
        let mut got = [0u8; 8];
        dst.read(0, &mut got).unwrap();
        assert_eq!(&got, b"intact!!", "{dev}");
        drop(s.b);
    }
}

#[test]
fn latency_benchmarks_run() {
    use rdma_direct::bench::{run_lat, LatConfig, LatTest};
    for dev in devices() {
        for (test, bytes) in [
            (LatTest::Write, 2),
            (LatTest::Send, 2),
            (LatTest::Read, 2),
            (LatTest::Atomic, 8),
        ] {
            let cfg = LatConfig {
                device: dev.clone(),
                iters: 50,
                ..Default::default()
            };
            let (_, r) = run_lat(test, &cfg).unwrap_or_else(|e| panic!("{dev} {test:?}: {e}"));
            assert_eq!((r.bytes, r.iterations), (bytes, 50), "{dev} {test:?}");
            assert!(
                r.t_min > 0.0 && r.t_min <= r.t_typical && r.t_typical <= r.t_max,
                "{dev} {test:?}: {r:?}"
            );
        }
    }
}

#[test]
fn qp_outlives_its_context_handle() {
    for dev in devices() {
        let s = setup(&dev);
        let Setup { _ctx, pd, mut a, b } = s;
        drop(_ctx);
        let src = pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
        let dst = pd
            .reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        src.write(0, &[3; 64]).unwrap();
        let sge = [Sge::new(&src, 0, 64).unwrap()];
        a.post_send(&[SendWr::rdma_write(9, &sge, remote(&dst, 0)).signaled()])
            .unwrap();
        assert_eq!(poll_one(&mut a, &dev).status, WcStatus::SUCCESS, "{dev}");
        assert_eq!(contents(&dst), vec![3; 64], "{dev}");
        drop(b);
    }
}

#[test]
fn memory_of_another_protection_domain_is_refused() {
    for dev in devices() {
        let mut s = setup(&dev);
        let other = s._ctx.alloc_pd().unwrap();
        let src = s.pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
        let foreign_dst = other
            .reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        src.write(0, &[0x11; 64]).unwrap();
        let sge = [Sge::new(&src, 0, 64).unwrap()];
        s.a.post_send(&[SendWr::rdma_write(1, &sge, remote(&foreign_dst, 0)).signaled()])
            .unwrap();
        let wc = poll_one(&mut s.a, &dev);
        assert_eq!(
            wc.status,
            WcStatus::REM_ACCESS_ERR,
            "{dev}: rkey of another PD: got {}",
            wc.status
        );
        assert!(
            contents(&foreign_dst).iter().all(|&b| b == 0),
            "{dev}: foreign MR written"
        );

        // A local SGE from another PD's MR: the requester fails it (mlx5 and the
        // sim say local protection error, rxe local QP operation error).
        let mut s = setup(&dev);
        let foreign_src = other.reg_mr(64, Access::LOCAL_WRITE).unwrap();
        let dst =
            s.pd.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
                .unwrap();
        foreign_src.write(0, &[0x22; 64]).unwrap();
        let sge = [Sge::new(&foreign_src, 0, 64).unwrap()];
        s.a.post_send(&[SendWr::rdma_write(2, &sge, remote(&dst, 0)).signaled()])
            .unwrap();
        let wc = poll_one(&mut s.a, &dev);
        assert!(!wc.status.is_ok(), "{dev}: SGE of another PD succeeded");
        assert!(contents(&dst).iter().all(|&b| b == 0), "{dev}: data landed");
        loud(format_args!(
            "conformance: {dev}: SGE of another PD -> {}",
            wc.status
        ));
        drop(s.b);
    }
}

#[test]
fn zero_length_write_checks_no_rkey() {
    for dev in devices() {
        let mut s = setup(&dev);
        let src = s.pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
        let sge = [Sge::new(&src, 0, 0).unwrap()];
        let nowhere = RemoteAddr {
            addr: 0,
            rkey: Rkey(0xdead),
        };
        s.a.post_send(&[SendWr::rdma_write(4, &sge, nowhere).signaled()])
            .unwrap();
        let wc = poll_one(&mut s.a, &dev);
        assert_eq!(
            (wc.status, wc.wr_id),
            (WcStatus::SUCCESS, 4),
            "{dev}: got {}",
            wc.status
        );
        drop(s.b);
    }
}

#[test]
fn send_queue_full_refuses_the_whole_batch_until_completions_are_polled() {
    for dev in devices() {
        let ctx = Context::open(&dev).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cfg = QpConfig {
            max_send_wr: 4,
            ..QpConfig::default()
        };
        let (mut a, _b) = pd.create_connected_pair(&cfg).unwrap();
        let src = pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
        let dst = pd
            .reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        let sge = [Sge::new(&src, 0, 8).unwrap()];
        let wr = |id| SendWr::rdma_write(id, &sge, remote(&dst, 0));
        // Three unsignaled and one signaled: four outstanding.
        a.post_send(&[wr(0), wr(1), wr(2)]).unwrap();
        a.post_send(&[wr(3).signaled()]).unwrap();
        assert!(
            matches!(a.post_send(&[wr(4).signaled()]), Err(Error::QueueFull)),
            "{dev}: 5th WR accepted"
        );
        // The signaled completion retires all four; a batch of 5 still does not fit, 4 do.
        let c = poll_one(&mut a, &dev);
        assert_eq!((c.status, c.wr_id), (WcStatus::SUCCESS, 3), "{dev}");
        let five: Vec<SendWr> = (10..15).map(|i| wr(i).signaled()).collect();
        assert!(
            matches!(a.post_send(&five), Err(Error::QueueFull)),
            "{dev}: oversized batch accepted"
        );
        a.post_send(&five[..4]).unwrap();
        for want in 10..14 {
            let c = poll_one(&mut a, &dev);
            assert_eq!(
                (c.status, c.wr_id),
                (WcStatus::SUCCESS, want),
                "{dev}: the refused batch left WRs behind"
            );
        }
        let mut wc = [Completion::default(); 4];
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            a.poll(&mut wc).unwrap(),
            0,
            "{dev}: a refused WR was posted"
        );
    }
}

#[test]
fn rdma_read_lands_byte_for_byte_and_needs_remote_read() {
    for dev in devices() {
        let mut s = setup(&dev);
        let remote_mr =
            s.pd.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_READ)
                .unwrap();
        let local = s.pd.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
        let data = pattern(4096, 99);
        remote_mr.write(0, &data).unwrap();
        // Two SGEs scatter the read: 1000 bytes then 3096.
        let sges = [
            Sge::new(&local, 0, 1000).unwrap(),
            Sge::new(&local, 1000, 3096).unwrap(),
        ];
        s.a.post_send(&[SendWr::rdma_read(8, &sges, remote(&remote_mr, 0)).signaled()])
            .unwrap();
        let wc = poll_one(&mut s.a, &dev);
        assert_eq!(
            (wc.status, wc.wr_id, wc.byte_len),
            (WcStatus::SUCCESS, 8, 4096),
            "{dev}: {}",
            wc.status
        );
        assert_eq!(wc.opcode, WcOpcode::RDMA_READ, "{dev}");
        assert_eq!(contents(&local), data, "{dev}: read data differs");
        loud(format_args!(
            "conformance: {dev}: 4096-byte RDMA READ landed byte for byte"
        ));

        // A region without REMOTE_READ: remote access error, local memory untouched.
        let mut s = setup(&dev);
        let no_read =
            s.pd.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
                .unwrap();
        let local = s.pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
        no_read.write(0, &[7; 64]).unwrap();
        let sge = [Sge::new(&local, 0, 64).unwrap()];
        s.a.post_send(&[SendWr::rdma_read(9, &sge, remote(&no_read, 0)).signaled()])
            .unwrap();
        let wc = poll_one(&mut s.a, &dev);
        assert_eq!(
            wc.status,
            WcStatus::REM_ACCESS_ERR,
            "{dev}: got {}",
            wc.status
        );
        assert!(
            contents(&local).iter().all(|&b| b == 0),
            "{dev}: local memory changed"
        );
        drop(s.b);
    }
}

#[test]
fn atomics_update_the_remote_word_and_return_the_old_value() {
    for dev in devices() {
        let mut s = setup(&dev);
        let word =
            s.pd.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_ATOMIC)
                .unwrap();
        let old = s.pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
        let read_u64 = |mr: &rdma_direct::Mr, off: usize| {
            let mut b = [0u8; 8];
            mr.read(off, &mut b).unwrap();
            u64::from_ne_bytes(b)
        };
        word.write(8, &0x0102_0304_0506_0708u64.to_ne_bytes())
            .unwrap();
        let sge = [Sge::new(&old, 0, 8).unwrap()];
        s.a.post_send(&[SendWr::atomic_fetch_add(1, &sge, remote(&word, 8), 0x10).signaled()])
            .unwrap();
        let wc = poll_one(&mut s.a, &dev);
        assert_eq!(
            (wc.status, wc.wr_id),
            (WcStatus::SUCCESS, 1),
            "{dev}: {}",
            wc.status
        );
        assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::FETCH_ADD, 8), "{dev}");
        assert_eq!(
            read_u64(&word, 8),
            0x0102_0304_0506_0718,
            "{dev}: remote after FAA"
        );
        assert_eq!(read_u64(&old, 0), 0x0102_0304_0506_0708, "{dev}: old value");

        // CAS that matches swaps; one that does not leaves the word alone. Both return the old value.
        let sge = [Sge::new(&old, 8, 8).unwrap()];
        s.a.post_send(&[SendWr::atomic_cmp_swp(
            2,
            &sge,
            remote(&word, 8),
            0x0102_0304_0506_0718,
            42,
        )
        .signaled()])
            .unwrap();
        assert_eq!(poll_one(&mut s.a, &dev).status, WcStatus::SUCCESS, "{dev}");
        assert_eq!(read_u64(&word, 8), 42, "{dev}: CAS did not swap");
        assert_eq!(
            read_u64(&old, 8),
            0x0102_0304_0506_0718,
            "{dev}: CAS old value"
        );
        s.a.post_send(&[SendWr::atomic_cmp_swp(3, &sge, remote(&word, 8), 7, 99).signaled()])
            .unwrap();
        assert_eq!(poll_one(&mut s.a, &dev).status, WcStatus::SUCCESS, "{dev}");
        assert_eq!(
            read_u64(&word, 8),
            42,
            "{dev}: a failed CAS changed the word"
        );
        assert_eq!(read_u64(&old, 8), 42, "{dev}: failed CAS old value");
        loud(format_args!(
            "conformance: {dev}: FAA and CAS update the remote word, return the old value"
        ));

        // Bad atomics are refused before anything is posted.
        let bad = [
            SendWr::atomic_fetch_add(4, &sge, remote(&word, 4), 1),
            SendWr::atomic_fetch_add(5, &[], remote(&word, 8), 1),
        ];
        for w in bad {
            assert!(
                matches!(s.a.post_send(&[w.signaled()]), Err(Error::Invalid(_))),
                "{dev}"
            );
        }
        let mut wc = [Completion::default(); 2];
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            s.a.poll(&mut wc).unwrap(),
            0,
            "{dev}: a refused atomic was posted"
        );
        assert_eq!(read_u64(&word, 8), 42, "{dev}");
        drop(s.b);
    }
}

fn poll_until(qp: &mut Qp, dev: &str, want: usize) -> Vec<Completion> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut wc = [Completion::default(); 8];
    while got.len() < want {
        let n = qp.poll(&mut wc).unwrap();
        got.extend_from_slice(&wc[..n]);
        assert!(
            Instant::now() < deadline,
            "{dev}: {} of {want} completions within 20 s",
            got.len()
        );
        std::thread::yield_now();
    }
    got
}

#[test]
fn send_lands_in_the_posted_receive_with_its_immediate() {
    use rdma_direct::RecvWr;
    for dev in devices() {
        let mut s = setup(&dev);
        let src = s.pd.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
        let rbuf = s.pd.reg_mr(8192, Access::LOCAL_WRITE).unwrap();
        let data = pattern(4096, 3);
        src.write(0, &data).unwrap();
        // Two receives on B, filled in order by a SEND and a SEND_IMM.
        let r0 = [Sge::new(&rbuf, 0, 1000).unwrap()];
        let r1 = [Sge::new(&rbuf, 4096, 4096).unwrap()];
        s.b.post_recv(&[RecvWr::new(500, &r0), RecvWr::new(501, &r1)])
            .unwrap();
        let sge = [Sge::new(&src, 0, 1000).unwrap()];
        s.a.post_send(&[SendWr::send(10, &sge).signaled()]).unwrap();
        let big = [Sge::new(&src, 0, 4096).unwrap()];
        s.a.post_send(&[SendWr::send_with_imm(11, &big, 0x89AB_CDEF).signaled()])
            .unwrap();
        let sent = poll_until(&mut s.a, &dev, 2);
        assert!(
            sent.iter()
                .all(|c| c.status.is_ok() && c.opcode == WcOpcode::SEND),
            "{dev}: {sent:?}"
        );
        let got = poll_until(&mut s.b, &dev, 2);
        assert_eq!(
            (
                got[0].wr_id,
                got[0].status,
                got[0].opcode,
                got[0].byte_len,
                got[0].imm
            ),
            (500, WcStatus::SUCCESS, WcOpcode::RECV, 1000, None),
            "{dev}"
        );
        assert_eq!(
            (got[1].wr_id, got[1].status, got[1].byte_len, got[1].imm),
            (501, WcStatus::SUCCESS, 4096, Some(0x89AB_CDEF)),
            "{dev}"
        );
        let all = contents(&rbuf);
        assert_eq!(&all[..1000], &data[..1000], "{dev}: first receive");
        assert_eq!(&all[4096..], &data[..], "{dev}: second receive");
        loud(format_args!(
            "conformance: {dev}: SEND and SEND_IMM land in posted receives, imm {:#x}",
            got[1].imm.unwrap()
        ));
        drop(s.b);
    }
}

#[test]
fn write_with_imm_lands_and_completes_a_receive() {
    use rdma_direct::RecvWr;
    for dev in devices() {
        let mut s = setup(&dev);
        let src = s.pd.reg_mr(256, Access::LOCAL_WRITE).unwrap();
        let dst =
            s.pd.reg_mr(256, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
                .unwrap();
        let data = pattern(256, 77);
        src.write(0, &data).unwrap();
        s.b.post_recv(&[RecvWr::new(900, &[])]).unwrap();
        let sge = [Sge::new(&src, 0, 256).unwrap()];
        s.a.post_send(&[
            SendWr::rdma_write_with_imm(12, &sge, remote(&dst, 0), 0x0102_0304).signaled(),
        ])
        .unwrap();
        let c = poll_one(&mut s.a, &dev);
        assert_eq!(
            (c.status, c.wr_id, c.opcode),
            (WcStatus::SUCCESS, 12, WcOpcode::RDMA_WRITE),
            "{dev}: {}",
            c.status
        );
        let r = poll_one(&mut s.b, &dev);
        assert_eq!(
            (r.wr_id, r.status, r.opcode, r.imm, r.byte_len),
            (
                900,
                WcStatus::SUCCESS,
                WcOpcode::RECV_RDMA_WITH_IMM,
                Some(0x0102_0304),
                256
            ),
            "{dev}"
        );
        assert_eq!(contents(&dst), data, "{dev}");
        drop(s.b);
    }
}

#[test]
fn send_into_a_too_small_receive_fails_on_both_sides() {
    use rdma_direct::RecvWr;
    for dev in devices() {
        let mut s = setup(&dev);
        let src = s.pd.reg_mr(256, Access::LOCAL_WRITE).unwrap();
        let rbuf = s.pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
        let r = [Sge::new(&rbuf, 0, 64).unwrap()];
        s.b.post_recv(&[RecvWr::new(7, &r)]).unwrap();
        let sge = [Sge::new(&src, 0, 256).unwrap()];
        s.a.post_send(&[SendWr::send(8, &sge).signaled()]).unwrap();
        let c = poll_one(&mut s.a, &dev);
        // mlx5 (and the sim) NAK it as an invalid request; rxe on Debian's 6.1
        // kernel reports a remote operation error.
        assert_eq!(c.wr_id, 8, "{dev}");
        assert!(
            [WcStatus::REM_INV_REQ_ERR, WcStatus::REM_OP_ERR].contains(&c.status),
            "{dev}: requester got {}",
            c.status
        );
        let rc = poll_one(&mut s.b, &dev);
        // mlx5 and the sim: local length error; rxe (6.1): local QP operation error.
        assert_eq!(rc.wr_id, 7, "{dev}");
        assert!(
            [WcStatus::LOC_LEN_ERR, WcStatus::LOC_QP_OP_ERR].contains(&rc.status),
            "{dev}: responder got {}",
            rc.status
        );
        loud(format_args!(
            "conformance: {dev}: SEND into a small receive -> {} / {}",
            c.status, rc.status
        ));
        drop(s.b);
    }
}

/// Issue 4's case: W1 valid signaled, W2 wrong rkey signaled, W3 valid
/// unsignaled, W4 valid signaled: SUCCESS, REM_ACCESS_ERR, then W3 and W4
/// flushed with their own wr_ids, and remote memory untouched by W3/W4.
#[test]
fn an_error_flushes_every_later_wr_with_its_own_wr_id() {
    for dev in devices() {
        let mut s = setup(&dev);
        let src = s.pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
        let dst =
            s.pd.reg_mr(256, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
                .unwrap();
        src.write(0, &[0x5a; 64]).unwrap();
        let sge = [Sge::new(&src, 0, 64).unwrap()];
        let bad = RemoteAddr {
            addr: dst.addr(),
            rkey: Rkey(dst.rkey().0 ^ 0x0012_3400),
        };
        s.a.post_send(&[
            SendWr::rdma_write(1, &sge, remote(&dst, 0)).signaled(),
            SendWr::rdma_write(2, &sge, bad).signaled(),
            SendWr::rdma_write(3, &sge, remote(&dst, 64)),
            SendWr::rdma_write(4, &sge, remote(&dst, 128)).signaled(),
        ])
        .unwrap();
        let got = poll_until(&mut s.a, &dev, 4);
        let seen: Vec<(u64, WcStatus)> = got.iter().map(|c| (c.wr_id, c.status)).collect();
        assert_eq!(
            seen,
            [
                (1, WcStatus::SUCCESS),
                (2, WcStatus::REM_ACCESS_ERR),
                (3, WcStatus::WR_FLUSH_ERR),
                (4, WcStatus::WR_FLUSH_ERR)
            ],
            "{dev}"
        );
        let all = contents(&dst);
        assert!(all[..64].iter().all(|&b| b == 0x5a), "{dev}: W1 missing");
        assert!(
            all[64..].iter().all(|&b| b == 0),
            "{dev}: a flushed WR wrote memory"
        );
        loud(format_args!(
            "conformance: {dev}: error then flushes: {seen:?}"
        ));
        drop(s.b);
    }
}

/// More than 65,536 WQEs, so the 16-bit WQE index in ctrl segments and CQEs wraps.
#[test]
fn the_16_bit_wqe_index_wraps() {
    for dev in devices() {
        let ctx = Context::open(&dev).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cfg = QpConfig {
            max_send_wr: 64,
            ..QpConfig::default()
        };
        let (mut a, _b) = pd.create_connected_pair(&cfg).unwrap();
        let src = pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
        let dst = pd
            .reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        let sge = [Sge::new(&src, 0, 8).unwrap()];
        let total = 70_000u64;
        let mut next = 0u64;
        let mut batch: Vec<SendWr> = Vec::with_capacity(32);
        while next < total {
            batch.clear();
            // 31 unsignaled, then one signaled: one completion per 32 WRs.
            for k in 0..32 {
                let w = SendWr::rdma_write(next + k, &sge, remote(&dst, 0)).inline();
                batch.push(if k == 31 { w.signaled() } else { w });
            }
            src.write(0, &(next + 31).to_ne_bytes()).unwrap();
            a.post_send(&batch).unwrap();
            let c = poll_one(&mut a, &dev);
            assert_eq!((c.status, c.wr_id), (WcStatus::SUCCESS, next + 31), "{dev}");
            next += 32;
        }
        let mut last = [0u8; 8];
        dst.read(0, &mut last).unwrap();
        assert_eq!(u64::from_ne_bytes(last), next - 1, "{dev}");
    }
}

/// What the docs promise about threads, checked at compile time.
#[test]
fn thread_safety_is_as_documented() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Context>();
    send_sync::<rdma_direct::Pd>();
    send_sync::<rdma_direct::Mr>();
    send::<Qp>();
}

/// An endless stream of unsignaled WRs keeps flowing: auto-signal retires
/// them through CQEs the caller never sees.
#[test]
fn unsignaled_streams_never_fill_the_send_queue() {
    for dev in devices() {
        let ctx = Context::open(&dev).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let (mut a, _b) = pd
            .create_connected_pair(&QpConfig {
                max_send_wr: 8,
                ..QpConfig::default()
            })
            .unwrap();
        let src = pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
        let dst = pd
            .reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        let sge = [Sge::new(&src, 0, 8).unwrap()];
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut wc = [Completion::default(); 8];
        for i in 0..200u64 {
            loop {
                match a.post_send(&[SendWr::rdma_write(i, &sge, remote(&dst, 0))]) {
                    Ok(()) => break,
                    Err(Error::QueueFull) => {
                        let n = a.poll(&mut wc).unwrap();
                        assert_eq!(
                            n,
                            0,
                            "{dev}: a hidden completion was reported: {:?}",
                            &wc[..n]
                        );
                        assert!(
                            Instant::now() < deadline,
                            "{dev}: the SQ stayed full at WR {i}"
                        );
                    }
                    Err(e) => panic!("{dev}: {e}"),
                }
            }
        }
    }
}

#[test]
fn bandwidth_benchmarks_run() {
    use rdma_direct::bench::{run_bw, BwConfig, BwTest, LatConfig};
    for dev in devices() {
        for (test, bytes) in [
            (BwTest::Write, 4096),
            (BwTest::Read, 4096),
            (BwTest::Atomic, 8),
        ] {
            let cfg = BwConfig {
                lat: LatConfig {
                    device: dev.clone(),
                    size: 4096,
                    iters: 300,
                    ..Default::default()
                },
                tx_depth: 16,
                cq_mod: 8,
            };
            let (_, r) = run_bw(test, &cfg).unwrap_or_else(|e| panic!("{dev} {test:?}: {e}"));
            assert_eq!((r.bytes, r.iterations), (bytes, 300), "{dev} {test:?}");
            assert!(
                r.bw_average > 0.0 && r.bw_peak >= r.bw_average * 0.999 && r.msg_rate > 0.0,
                "{dev} {test:?}: {r:?}"
            );
        }
    }
}
