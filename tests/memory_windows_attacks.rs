//! Hostile uses of the memory-window API on the sim: binds whose range
//! overflows, windows of another device, a window outliving its MR and
//! PD handles, a window dropped with its bind outstanding, binds on QPs
//! that take no windows (UD, DCI, split, outside RTS, in ERR), LOCAL_INV
//! and SEND with invalidate of keys that are not type-2 windows, batches
//! mixing a window WR with a bad WR, a full SQ, the rkey's variant
//! wrapping (binds of one window from two threads or QPs at once:
//! `memory_windows_outstanding.rs`). Each case
//! asks for a typed error that changes nothing, or a device refusal that
//! leaves everything else working; never a panic or a hang.

use rdma_direct::testing::QpHooks;
use rdma_direct::*;

#[path = "support/mw.rs"]
mod support;
use support::*;

/// The window's address in `mr` (`OFF`).
fn waddr(mr: &Mr) -> u64 {
    mr.addr() + OFF as u64
}

/// Ranges that overflow or exceed 2^31 are `Range` refusals, for both
/// types; the last byte of the MR (offset `LEN - 1`, 1 byte) binds.
#[test]
fn bind_ranges_that_overflow_or_exceed_2_pow_31_are_refused() {
    let e = mw_env();
    let (mw1, mw2) = (
        e.pd.alloc_mw(MwType::One).unwrap(),
        e.pd.alloc_mw(MwType::Two).unwrap(),
    );
    for (offset, len) in [
        (usize::MAX - 10, 20),
        (usize::MAX, usize::MAX),
        (1, usize::MAX),
        (0, (1 << 31) + 1),
        (0, usize::MAX),
        (LEN, 1),
        (LEN, 0),
        (0, 0),
    ] {
        let bind = MwBind::new(&e.mr, offset, len, RW);
        let want = MwRefusal::Range {
            offset,
            len,
            mr_len: LEN,
        };
        let (_a, mut b) = pair(&e.pd);
        let err = refused(&mut b, |q| {
            q.bind_mw(&mw1, bind, 1, SendFlags::SIGNALED).map(drop)
        });
        assert!(
            matches!(err, Error::MwRefused(r) if r == want),
            "{offset}+{len}: {err:?}"
        );
        let err = refused(&mut b, |q| q.post_send(&[SendWr::bind_mw(2, &mw2, bind)]));
        assert!(
            matches!(err, Error::MwRefused(r) if r == want),
            "{offset}+{len}: {err:?}"
        );
        still_posts(&mut b, &e, "range");
    }
    assert_eq!(mw1.rkey().0 & 0xff, 0);
    assert_eq!(mw2.rkey().0 & 0xff, 0);
    let (mut a, mut b) = pair(&e.pd);
    let rkey = b
        .bind_mw(
            &mw1,
            MwBind::new(&e.mr, LEN - 1, 1, RW),
            3,
            SendFlags::SIGNALED,
        )
        .unwrap();
    assert_eq!(next(&mut b).status, WcStatus::SUCCESS);
    let (st, _) = read_through(&mut a, &e.src, e.mr.addr() + LEN as u64 - 1, rkey);
    // (An 8-byte READ from the last byte passes the window's end.)
    assert_eq!(st, WcStatus::REM_ACCESS_ERR);
}

/// `MwBind::addr` of a bind whose offset overflows (a value `MwBind::new`
/// takes, and the bind checks refuse): a public accessor, it must not
/// panic.
#[test]
fn mwbind_addr_of_an_overflowing_offset_does_not_panic() {
    let e = mw_env();
    let bind = MwBind::new(&e.mr, usize::MAX - 10, 20, RW);
    let _ = std::hint::black_box(bind.addr());
}

/// A window, an MR or a QP of another device (a second
/// `Context::open("sim")`): `OtherPd`, nothing written.
#[test]
fn a_window_or_mr_of_another_device_is_refused() {
    let e = mw_env();
    let ctx2 = Context::open("sim").unwrap();
    let pd2 = ctx2.alloc_pd().unwrap();
    let (far1, far2) = (
        pd2.alloc_mw(MwType::One).unwrap(),
        pd2.alloc_mw(MwType::Two).unwrap(),
    );
    let far_mr = pd2
        .alloc_mr(LEN, Access::LOCAL_WRITE | Access::MW_BIND | RW)
        .unwrap();
    let (near1, near2) = (
        e.pd.alloc_mw(MwType::One).unwrap(),
        e.pd.alloc_mw(MwType::Two).unwrap(),
    );
    let (_a, mut b) = pair(&e.pd);
    let other = |err: Error| matches!(err, Error::MwRefused(MwRefusal::OtherPd));
    let err = refused(&mut b, |q| {
        q.bind_mw(&far1, window(&e.mr, RW), 1, SendFlags::SIGNALED)
            .map(drop)
    });
    assert!(other(err));
    let err = refused(&mut b, |q| {
        q.bind_mw(&near1, window(&far_mr, RW), 1, SendFlags::SIGNALED)
            .map(drop)
    });
    assert!(other(err));
    let err = refused(&mut b, |q| {
        q.unbind_mw(&far1, 1, SendFlags::SIGNALED).map(drop)
    });
    assert!(other(err));
    let err = refused(&mut b, |q| {
        q.post_send(&[SendWr::bind_mw(2, &far2, window(&e.mr, RW))])
    });
    assert!(other(err));
    let err = refused(&mut b, |q| {
        q.post_send(&[SendWr::bind_mw(2, &near2, window(&far_mr, RW))])
    });
    assert!(other(err));
    still_posts(&mut b, &e, "another device");
    // And from the other device's side: its QP, this device's window.
    let (_c, mut d) = pd2.create_connected_pair(&mw_cfg()).unwrap();
    let err = refused(&mut d, |q| {
        q.bind_mw(&near1, window(&far_mr, RW), 1, SendFlags::SIGNALED)
            .map(drop)
    });
    assert!(other(err));
    for m in [&far1, &far2, &near1, &near2] {
        assert_eq!(m.rkey().0 & 0xff, 0, "an rkey moved");
    }
}

/// A type-1 window bound over an MR whose `Mr` handle, and then whose
/// `Pd`, the program dropped: the window still serves the peer (it holds
/// the MR), and once the window is dropped too, the rkey is dead and
/// nothing crashes.
#[test]
fn a_window_outlives_its_mr_handle_and_pd() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd
        .alloc_mr(LEN, Access::LOCAL_WRITE | RW | Access::MW_BIND)
        .unwrap();
    let src = pd.alloc_mr(LEN, Access::LOCAL_WRITE).unwrap();
    let addr = waddr(&mr);
    let mw = pd.alloc_mw(MwType::One).unwrap();
    let (mut a, mut b) = pair(&pd);
    let rkey = b
        .bind_mw(&mw, window(&mr, RW), 1, SendFlags::SIGNALED)
        .unwrap();
    assert_eq!(next(&mut b).status, WcStatus::SUCCESS);
    drop(mr);
    drop(pd);
    assert_eq!(
        write_through(&mut a, &src, 0x42, addr, rkey),
        WcStatus::SUCCESS
    );
    let (st, got) = read_through(&mut a, &src, addr, rkey);
    assert_eq!((st, got), (WcStatus::SUCCESS, [0x42; 8]));
    drop(mw);
    assert_eq!(
        write_through(&mut a, &src, 0x43, addr, rkey),
        WcStatus::REM_ACCESS_ERR
    );
}

/// A window dropped while its bind is posted and not yet polled (type 1
/// and type 2): the bind still completes (or flushes), nothing panics, and
/// the rkey it gave is dead afterwards.
#[test]
fn dropping_a_window_with_its_bind_outstanding() {
    let e = mw_env();
    for ty in [MwType::One, MwType::Two] {
        let mw = e.pd.alloc_mw(ty).unwrap();
        let (mut a, mut b) = pair(&e.pd);
        let rkey = match ty {
            MwType::One => b
                .bind_mw(&mw, window(&e.mr, RW), 1, SendFlags::SIGNALED)
                .unwrap(),
            _ => {
                b.post_send(&[SendWr::bind_mw(1, &mw, window(&e.mr, RW)).signaled()])
                    .unwrap();
                mw.rkey()
            }
        };
        drop(mw);
        let c = next(&mut b);
        assert_eq!(c.wr_id, 1, "{ty:?}");
        println!("{ty:?}: the bind of the dropped window: {:?}", c.status);
        let before = bytes(&e.mr);
        let st = write_through(&mut a, &e.src, 0x99, waddr(&e.mr), rkey);
        println!("{ty:?}: a WRITE through its rkey: {st:?}");
        assert_ne!(
            st,
            WcStatus::SUCCESS,
            "{ty:?}: the dropped window still grants"
        );
        assert_eq!(bytes(&e.mr), before, "{ty:?}");
    }
    // The MR the dropped windows held is freed with them.
    assert_eq!(e.pd.live_mrs(), 2);
}

/// A UD QP, a UC QP without the flag, and a DCI, all asked for windows:
/// refused at creation or at the bind, with a typed error and nothing
/// written.
#[test]
fn qps_that_take_no_windows_refuse_binds() {
    let e = mw_env();
    let (mw1, mw2) = (
        e.pd.alloc_mw(MwType::One).unwrap(),
        e.pd.alloc_mw(MwType::Two).unwrap(),
    );
    for qp_type in [QpType::Ud, QpType::Dci] {
        let cfg = QpConfig {
            qp_type,
            memory_windows: true,
            ..mw_cfg()
        };
        let mut q = match e.pd.create_qp(&cfg) {
            Ok(q) => q,
            Err(err) => {
                println!("{qp_type:?} with memory_windows refused at creation: {err}");
                continue;
            }
        };
        match qp_type {
            QpType::Ud => q.ready_ud(0x1234).unwrap(),
            _ => q.ready_dci().unwrap(),
        }
        let err = refused(&mut q, |q| {
            q.bind_mw(&mw1, window(&e.mr, RW), 1, SendFlags::SIGNALED)
                .map(drop)
        });
        assert!(
            matches!(err, Error::MwRefused(MwRefusal::NotEnabled)),
            "{qp_type:?}: {err:?}"
        );
        let err = refused(&mut q, |q| {
            q.post_send(&[SendWr::bind_mw(2, &mw2, window(&e.mr, RW))])
        });
        assert!(
            matches!(
                err,
                Error::MwRefused(MwRefusal::NotEnabled) | Error::WrongTransport { .. }
            ),
            "{qp_type:?}: {err:?}"
        );
        let err = refused(&mut q, |q| q.post_send(&[SendWr::local_inv(3, mw2.rkey())]));
        assert!(
            matches!(
                err,
                Error::MwRefused(MwRefusal::NotEnabled) | Error::WrongTransport { .. }
            ),
            "{qp_type:?}: {err:?}"
        );
    }
    assert_eq!(mw1.rkey().0 & 0xff, 0);
    assert_eq!(mw2.rkey().0 & 0xff, 0);
}

/// The window WRs through `post_dc` on a DCI (with `memory_windows`, if
/// it is taken): a typed refusal, nothing written.
#[test]
fn a_dci_refuses_window_wrs_through_post_dc() {
    let e = mw_env();
    let mw2 = e.pd.alloc_mw(MwType::Two).unwrap();
    let srq = e.pd.create_srq(16, 1).unwrap();
    let dct_cfg = QpConfig {
        qp_type: QpType::Dct,
        dc_key: 7,
        ..QpConfig::default()
    };
    let mut dct = e.pd.create_qp_on_srq(&dct_cfg, &srq).unwrap();
    dct.ready_dct().unwrap();
    let cfg = QpConfig {
        qp_type: QpType::Dci,
        memory_windows: true,
        ..mw_cfg()
    };
    let mut dci = match e.pd.create_qp(&cfg) {
        Ok(q) => q,
        Err(_) => {
            e.pd.create_qp(&QpConfig {
                memory_windows: false,
                ..cfg
            })
            .unwrap()
        }
    };
    dci.ready_dci().unwrap();
    let ah = e.pd.create_ah(&dci.av_to(&dct.endpoint())).unwrap();
    let to = DcDest {
        ah: &ah,
        dctn: dct.dct_number().unwrap(),
        key: 7,
    };
    for w in [
        SendWr::bind_mw(1, &mw2, window(&e.mr, RW)),
        SendWr::local_inv(2, mw2.rkey()),
    ] {
        let err = refused(&mut dci, |q| q.post_dc(&to, &[w]));
        assert!(
            matches!(
                err,
                Error::MwRefused(MwRefusal::NotEnabled) | Error::WrongTransport { .. }
            ),
            "{err:?}"
        );
    }
    assert_eq!(mw2.rkey().0 & 0xff, 0);
}

/// A type-1 bind on a split QP's owner: `QpSplit`, the rkey unchanged.
/// A type-2 bind WR on a QP in INIT: `QpState`.
#[test]
fn binds_on_a_split_owner_or_outside_rts_are_refused() {
    let e = mw_env();
    let (mw1, mw2) = (
        e.pd.alloc_mw(MwType::One).unwrap(),
        e.pd.alloc_mw(MwType::Two).unwrap(),
    );
    let (_a, mut b) = pair(&e.pd);
    let (_tx, _rx) = b.split().unwrap();
    let err = b
        .bind_mw(&mw1, window(&e.mr, RW), 1, SendFlags::SIGNALED)
        .unwrap_err();
    assert!(matches!(err, Error::QpSplit { .. }), "{err:?}");
    let err = b.unbind_mw(&mw1, 1, SendFlags::SIGNALED).unwrap_err();
    assert!(matches!(err, Error::QpSplit { .. }), "{err:?}");
    let err = b
        .post_send(&[SendWr::bind_mw(2, &mw2, window(&e.mr, RW))])
        .unwrap_err();
    assert!(matches!(err, Error::QpSplit { .. }), "{err:?}");
    let mut q = e.pd.create_qp(&mw_cfg()).unwrap();
    let err = refused(&mut q, |q| {
        q.post_send(&[SendWr::bind_mw(2, &mw2, window(&e.mr, RW))])
    });
    assert!(matches!(err, Error::QpState { .. }), "{err:?}");
    let err = refused(&mut q, |q| q.post_send(&[SendWr::local_inv(3, mw2.rkey())]));
    assert!(matches!(err, Error::QpState { .. }), "{err:?}");
    assert_eq!(mw1.rkey().0 & 0xff, 0);
    assert_eq!(mw2.rkey().0 & 0xff, 0);
}

/// A type-2 bind posted on a QP in ERR flushes: the window was never
/// bound, so a bind of it on a healthy QP must work afterwards (the
/// window's rkey, moved at the post, must not strand it).
#[test]
fn a_type2_bind_flushed_in_err_leaves_the_window_usable() {
    let e = mw_env();
    let mw = e.pd.alloc_mw(MwType::Two).unwrap();
    let (_a, mut b) = pair(&e.pd);
    b.modify(QpState::Err, &QpAttr::default()).unwrap();
    match b.post_send(&[SendWr::bind_mw(1, &mw, window(&e.mr, RW)).signaled()]) {
        Ok(()) => {
            let c = next(&mut b);
            assert_eq!(c.status, WcStatus::WR_FLUSH_ERR, "{c:?}");
        }
        Err(err) => assert!(matches!(err, Error::QpState { .. }), "{err:?}"),
    }
    let (mut a2, mut b2) = pair(&e.pd);
    b2.post_send(&[SendWr::bind_mw(2, &mw, window(&e.mr, RW)).signaled()])
        .unwrap();
    let c = next(&mut b2);
    assert_eq!(c.status, WcStatus::SUCCESS, "{c:?}");
    assert_eq!(
        write_through(&mut a2, &e.src, 0x31, waddr(&e.mr), mw.rkey()),
        WcStatus::SUCCESS
    );
}

/// A type-2 bind the device refuses (the window still bound:
/// MW_BIND_ERR) must leave `Mw::rkey` naming the live binding: the peer
/// still reaches the window through it, and a LOCAL_INV of it frees the
/// window for the next bind.
#[test]
fn a_refused_type2_bind_leaves_the_rkey_naming_the_live_binding() {
    let e = mw_env();
    let mw = e.pd.alloc_mw(MwType::Two).unwrap();
    let (mut a, mut b) = pair(&e.pd);
    b.post_send(&[SendWr::bind_mw(1, &mw, window(&e.mr, RW)).signaled()])
        .unwrap();
    assert_eq!(next(&mut b).status, WcStatus::SUCCESS);
    let live = mw.rkey();
    b.post_send(&[SendWr::bind_mw(2, &mw, window(&e.mr, RW)).signaled()])
        .unwrap();
    assert_eq!(next(&mut b).status.ident(), "MW_BIND_ERR");
    assert_eq!(mw.rkey(), live, "Mw::rkey moved by a refused bind");
    assert!(!mw.bind_outstanding());
    // The refusal put `b` in ERR: back to RTS (the window stays bound to
    // it), the peer reaches the window through the live rkey, and a
    // LOCAL_INV of it frees the window for the next bind.
    for q in [&mut a, &mut b] {
        q.modify(QpState::Reset, &QpAttr::default()).unwrap();
    }
    Qp::connect_loopback(&mut a, &mut b).unwrap();
    assert_eq!(
        write_through(&mut a, &e.src, 0x11, waddr(&e.mr), mw.rkey()),
        WcStatus::SUCCESS
    );
    b.post_send(&[SendWr::local_inv(3, live).signaled()])
        .unwrap();
    assert_eq!(next(&mut b).status, WcStatus::SUCCESS);
    b.post_send(&[SendWr::bind_mw(4, &mw, window(&e.mr, RW)).signaled()])
        .unwrap();
    assert_eq!(next(&mut b).status, WcStatus::SUCCESS);
    assert_eq!(mw.rkey(), inc(live));
}

/// LOCAL_INV of an MR's own rkey, of a type-1 window's rkey, of garbage,
/// and of a type-2 window bound on another QP: each fails on the device
/// (an error completion) and invalidates nothing: the MR and the windows
/// still serve their peers.
#[test]
fn local_inv_of_keys_that_are_not_its_windows_invalidates_nothing() {
    let e = mw_env();
    let mw1 = e.pd.alloc_mw(MwType::One).unwrap();
    let mw2 = e.pd.alloc_mw(MwType::Two).unwrap();
    let (mut a0, mut b0) = pair(&e.pd);
    let k1 = b0
        .bind_mw(&mw1, window(&e.mr, RW), 1, SendFlags::SIGNALED)
        .unwrap();
    assert_eq!(next(&mut b0).status, WcStatus::SUCCESS);
    b0.post_send(&[SendWr::bind_mw(2, &mw2, MwBind::new(&e.mr, 0, 512, RW)).signaled()])
        .unwrap();
    assert_eq!(next(&mut b0).status, WcStatus::SUCCESS);
    let k2 = mw2.rkey();
    for (what, key) in [
        ("the MR's rkey", e.mr.rkey()),
        ("a type-1 window's rkey", k1),
        ("garbage", Rkey(0xdead_beef)),
        ("zero", Rkey(0)),
        ("a type-2 window bound on another QP", k2),
    ] {
        let (_a, mut b) = pair(&e.pd);
        b.post_send(&[SendWr::local_inv(9, key).signaled()])
            .unwrap();
        let c = next(&mut b);
        assert_eq!(c.wr_id, 9, "{what}");
        assert_ne!(c.status, WcStatus::SUCCESS, "{what}: LOCAL_INV succeeded");
        // Everything still serves.
        assert_eq!(
            write_through(&mut a0, &e.src, 0x21, e.mr.addr(), e.mr.rkey()),
            WcStatus::SUCCESS,
            "{what}: the MR"
        );
        assert_eq!(
            write_through(&mut a0, &e.src, 0x22, waddr(&e.mr), k1),
            WcStatus::SUCCESS,
            "{what}: the type-1 window"
        );
        assert_eq!(
            write_through(&mut a0, &e.src, 0x23, e.mr.addr(), k2),
            WcStatus::SUCCESS,
            "{what}: the type-2 window"
        );
    }
}

/// A SEND with invalidate naming a type-1 window's rkey or an MR's: the
/// responder refuses it, and the window and the MR still serve a peer.
#[test]
fn send_with_inv_of_a_type1_window_or_an_mr_invalidates_nothing() {
    let e = mw_env();
    let mw1 = e.pd.alloc_mw(MwType::One).unwrap();
    let (_x, mut y) = pair(&e.pd);
    let k1 = y
        .bind_mw(&mw1, window(&e.mr, RW), 1, SendFlags::SIGNALED)
        .unwrap();
    assert_eq!(next(&mut y).status, WcStatus::SUCCESS);
    for (what, key) in [("a type-1 window", k1), ("an MR", e.mr.rkey())] {
        let (mut a, mut b) = pair(&e.pd);
        let rs = [Sge::new(&e.mr, 2048, 64).unwrap()];
        b.post_recv(&[RecvWr::new(9, &rs)]).unwrap();
        let s = [Sge::new(&e.src, 0, 8).unwrap()];
        match a.post_send(&[SendWr::send_with_inv(3, &s, key).signaled()]) {
            Ok(()) => {}
            Err(Error::Wqe(w)) => {
                println!("SKIPPED: the codec refuses SEND_INVAL ({w})");
                return;
            }
            Err(x) => panic!("{x}"),
        }
        let c = next(&mut a);
        assert_ne!(c.status, WcStatus::SUCCESS, "{what}: invalidated");
        let (mut p, _q) = pair(&e.pd);
        assert_eq!(
            write_through(&mut p, &e.src, 0x44, waddr(&e.mr), k1),
            WcStatus::SUCCESS,
            "{what}: the type-1 window"
        );
        assert_eq!(
            write_through(&mut p, &e.src, 0x45, e.mr.addr(), e.mr.rkey()),
            WcStatus::SUCCESS,
            "{what}: the MR"
        );
    }
}

/// A batch of a valid type-2 bind followed by a bad WR (an SGE of another
/// PD; a LOCAL_INV with an SGE; a SEND of too many SGEs): all or nothing:
/// nothing written, the window's rkey unchanged, no completion.
#[test]
fn a_batch_with_a_bad_wr_after_a_bind_posts_nothing() {
    let e = mw_env();
    let mw2 = e.pd.alloc_mw(MwType::Two).unwrap();
    let other = e.ctx.alloc_pd().unwrap();
    let omr = other.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let os = [Sge::new(&omr, 0, 8).unwrap()];
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let many: Vec<Sge<'_>> = (0..64)
        .map(|i| Sge::new(&e.src, i * 8, 8).unwrap())
        .collect();
    let r = RemoteAddr {
        addr: e.mr.addr(),
        rkey: e.mr.rkey(),
    };
    let mut inv_with_sge = SendWr::local_inv(5, Rkey(0x100));
    inv_with_sge.sges = &s;
    let bad: Vec<(&str, SendWr<'_>)> = vec![
        ("another PD's SGE", SendWr::rdma_write(3, &os, r)),
        ("a LOCAL_INV with an SGE", inv_with_sge),
        ("too many SGEs", SendWr::send(4, &many)),
    ];
    for (what, w) in bad {
        let (_a, mut b) = pair(&e.pd);
        let err = refused(&mut b, |q| {
            q.post_send(&[SendWr::bind_mw(1, &mw2, window(&e.mr, RW)).signaled(), w])
        });
        println!("{what}: {err}");
        assert_eq!(mw2.rkey().0 & 0xff, 0, "{what}: the rkey moved");
        still_posts(&mut b, &e, what);
    }
}

/// A batch with a bind that can never fit the SQ (`NeverFits`), and one
/// that does not fit behind outstanding WRs (`QueueFull`): nothing
/// written, the rkey unchanged; it posts once there is room.
#[test]
fn a_batch_with_a_bind_too_big_for_the_sq_is_queue_full() {
    let e = mw_env();
    let mw2 = e.pd.alloc_mw(MwType::Two).unwrap();
    let cfg = QpConfig {
        max_send_wr: 4,
        ..mw_cfg()
    };
    let (_a, mut b) = e.pd.create_connected_pair(&cfg).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let r = RemoteAddr {
        addr: e.mr.addr(),
        rkey: e.mr.rkey(),
    };
    let mut wrs = vec![SendWr::bind_mw(1, &mw2, window(&e.mr, RW)).signaled()];
    for i in 0..16 {
        wrs.push(SendWr::rdma_write(10 + i, &s, r).signaled());
    }
    let err = refused(&mut b, |q| q.post_send(&wrs));
    assert!(matches!(err, Error::NeverFits { .. }), "{err:?}");
    assert_eq!(mw2.rkey().0 & 0xff, 0);
    // A batch that fits an empty SQ, refused behind outstanding WRs.
    b.post_send(&wrs[1..4]).unwrap();
    let err = refused(&mut b, |q| q.post_send(&wrs[..2]));
    assert!(matches!(err, Error::QueueFull), "{err:?}");
    assert_eq!(mw2.rkey().0 & 0xff, 0);
    let got = poll_n(&mut b, 3);
    assert!(got.iter().all(|c| c.status == WcStatus::SUCCESS), "{got:?}");
    b.post_send(&wrs[..2]).unwrap();
    let got = poll_n(&mut b, 2);
    assert!(got.iter().all(|c| c.status == WcStatus::SUCCESS), "{got:?}");
}

/// Type-1 binds in a loop until the SQ refuses (`QueueFull` or `CqFull`,
/// nothing written, the rkey unchanged), then poll and go on: windows in
/// turn (one bind of a window outstanding at a time: more windows than
/// the SQ holds binds, so the SQ fills first), 520 binds each, each
/// window's variant wrapping twice, each refusal clean, and the last rkey
/// grants while the one before it does not.
#[test]
fn binds_until_the_sq_is_full_then_poll_and_continue() {
    let e = mw_env();
    let windows: Vec<Mw> = (0..17)
        .map(|_| e.pd.alloc_mw(MwType::One).unwrap())
        .collect();
    let (mut a, mut b) = pair(&e.pd);
    let total = windows.len() as u32 * 520;
    let (mut done, mut outstanding, mut refusals) = (0u32, 0usize, 0u32);
    while done < total {
        let mw = &windows[done as usize % windows.len()];
        let index = mw.rkey().0 >> 8;
        let before = mw.rkey();
        let snap = b.sq_snapshot().unwrap();
        match b.bind_mw(mw, window(&e.mr, RW), done as u64, SendFlags::SIGNALED) {
            Ok(k) => {
                assert_eq!(k, inc(before));
                assert_eq!(k.0 >> 8, index, "the index moved");
                done += 1;
                outstanding += 1;
            }
            Err(Error::QueueFull | Error::CqFull) => {
                refusals += 1;
                assert_eq!(mw.rkey(), before);
                assert_eq!(snap, b.sq_snapshot().unwrap(), "a refusal wrote");
                let got = poll_n(&mut b, outstanding);
                assert!(got.iter().all(|c| c.status == WcStatus::SUCCESS));
                outstanding = 0;
            }
            Err(x) => panic!("bind {done}: {x}"),
        }
    }
    let got = poll_n(&mut b, outstanding);
    assert!(got.iter().all(|c| c.status == WcStatus::SUCCESS));
    assert!(refusals > 0, "the SQ never filled");
    for mw in &windows {
        assert!(!mw.bind_outstanding());
    }
    let live = windows[0].rkey();
    let stale = Rkey((live.0 & !0xff) | (live.0.wrapping_sub(1) & 0xff));
    assert_eq!(
        write_through(&mut a, &e.src, 0x71, waddr(&e.mr), live),
        WcStatus::SUCCESS
    );
    assert_eq!(
        write_through(&mut a, &e.src, 0x72, waddr(&e.mr), stale),
        WcStatus::REM_ACCESS_ERR
    );
}

/// A type-1 bind posted and not polled, its window and its MR's handle
/// dropped, then a new window (perhaps the same index) and a new MR
/// allocated before the poll: the stale bind must not bind the new window
/// (its rkey, and the variant after it, grant nothing at the old MR's
/// address or the new MR's).
#[test]
fn a_stale_bind_does_not_bind_a_window_that_reuses_its_index() {
    let e = mw_env();
    let (_a, mut b) = pair(&e.pd);
    let old_mr =
        e.pd.alloc_mr(LEN, Access::LOCAL_WRITE | RW | Access::MW_BIND)
            .unwrap();
    let old_addr = waddr(&old_mr);
    let mw = e.pd.alloc_mw(MwType::One).unwrap();
    let old_key = mw.rkey();
    b.bind_mw(&mw, window(&old_mr, RW), 1, SendFlags::SIGNALED)
        .unwrap();
    drop(mw);
    drop(old_mr);
    let fresh = e.pd.alloc_mw(MwType::One).unwrap();
    let new_mr =
        e.pd.alloc_mr(LEN, Access::LOCAL_WRITE | RW | Access::MW_BIND)
            .unwrap();
    println!("old window {old_key:?}, new window {:?}", fresh.rkey());
    let c = next(&mut b);
    println!("the stale bind: {:?}", c.status);
    for k in [fresh.rkey(), inc(fresh.rkey()), old_key, inc(old_key)] {
        for addr in [old_addr, waddr(&new_mr)] {
            let (mut a2, _b2) = pair(&e.pd);
            let st = write_through(&mut a2, &e.src, 0xee, addr, k);
            assert_ne!(st, WcStatus::SUCCESS, "{k:?} at {addr:#x} grants");
        }
    }
    assert!(bytes(&new_mr).iter().all(|&x| x == 0));
}

/// A window's access with bits no `Access` flag names, or with
/// `ZERO_BASED`-like bits beyond the four a window grants: `Access`
/// refusals for both types, nothing written.
#[test]
fn a_window_access_with_unknown_bits_is_refused() {
    let e = mw_env();
    let (mw1, mw2) = (
        e.pd.alloc_mw(MwType::One).unwrap(),
        e.pd.alloc_mw(MwType::Two).unwrap(),
    );
    for access in [
        Access::from_bits_retain(1 << 30),
        RW | Access::from_bits_retain(1 << 31),
    ] {
        let (_a, mut b) = pair(&e.pd);
        let bind = window(&e.mr, access);
        let err = refused(&mut b, |q| {
            q.bind_mw(&mw1, bind, 1, SendFlags::SIGNALED).map(drop)
        });
        assert!(
            matches!(err, Error::MwRefused(MwRefusal::Access { .. })),
            "{access:?}: {err:?}"
        );
        let err = refused(&mut b, |q| q.post_send(&[SendWr::bind_mw(2, &mw2, bind)]));
        assert!(
            matches!(err, Error::MwRefused(MwRefusal::Access { .. })),
            "{access:?}: {err:?}"
        );
        still_posts(&mut b, &e, "unknown access bits");
    }
}
