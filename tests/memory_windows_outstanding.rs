//! One bind of a window outstanding at a time, on the sim: a second bind
//! while one is outstanding is refused (`MwRefusal::BindOutstanding`)
//! with nothing written; the mark clears when the bind's WQE retires (its
//! own completion, or a later signaled WR's for an unsignaled bind); a
//! bind that completes in error or is flushed rolls the window's rkey
//! back, so the window binds again; a window dropped under its bind is
//! deallocated once the bind is polled; one window bound from two
//! threads, or on two QPs, at once.

use rdma_direct::testing::QpHooks;
use rdma_direct::*;

#[path = "support/mw.rs"]
mod support;
use support::*;

/// The window's address in `mr` (`OFF`).
fn waddr(mr: &Mr) -> u64 {
    mr.addr() + OFF as u64
}

/// A WRITE of 8 bytes from `e.src` through an rkey that names nothing:
/// it completes REM_ACCESS_ERR and its QP goes to ERR.
fn bad_write<'a>(e: &'a MwEnv, s: &'a [Sge; 1], wr_id: u64) -> SendWr<'a> {
    let r = RemoteAddr {
        addr: e.mr.addr(),
        rkey: Rkey(0xdead_be00),
    };
    SendWr::rdma_write(wr_id, s, r).signaled()
}

/// A second type-2 bind of one window in the same batch is refused
/// before anything is written (`BindOutstanding`), and the first bind's
/// claim is given back: the rkey as it was, no bind outstanding, and the
/// window binds afterwards.
#[test]
fn a_second_bind_of_a_window_in_one_batch_is_refused_and_writes_nothing() {
    let e = mw_env();
    let mw = e.pd.alloc_mw(MwType::Two).unwrap();
    let (mut a, mut b) = pair(&e.pd);
    let before = mw.rkey();
    let bind = window(&e.mr, RW);
    let err = refused(&mut b, |q| {
        q.post_send(&[
            SendWr::bind_mw(1, &mw, bind).signaled(),
            SendWr::bind_mw(2, &mw, bind).signaled(),
        ])
    });
    assert!(
        matches!(err, Error::MwRefused(MwRefusal::BindOutstanding { rkey }) if rkey == inc(before).0),
        "{err:?}"
    );
    assert_eq!(mw.rkey(), before);
    assert!(!mw.bind_outstanding());
    still_posts(&mut b, &e, "a second bind in the batch");
    b.post_send(&[SendWr::bind_mw(3, &mw, bind).signaled()])
        .unwrap();
    assert_eq!(next(&mut b).status, WcStatus::SUCCESS);
    assert_eq!(mw.rkey(), inc(before));
    assert_eq!(
        write_through(&mut a, &e.src, 0x21, waddr(&e.mr), mw.rkey()),
        WcStatus::SUCCESS
    );
}

/// While a type-1 bind is outstanding, binds and unbinds of its window
/// on the same QP are refused, and a type-2 window's bind on another QP
/// too: each with nothing written (ring bytes as they were), the rkey the
/// outstanding bind gives unchanged.
#[test]
fn binds_while_one_is_outstanding_are_refused_and_write_nothing() {
    let e = mw_env();
    let mw1 = e.pd.alloc_mw(MwType::One).unwrap();
    let mw2 = e.pd.alloc_mw(MwType::Two).unwrap();
    let (_a, mut b) = pair(&e.pd);
    let (_a2, mut b2) = pair(&e.pd);
    let k1 = b
        .bind_mw(&mw1, window(&e.mr, RW), 1, SendFlags::SIGNALED)
        .unwrap();
    b2.post_send(&[SendWr::bind_mw(2, &mw2, window(&e.mr, RW)).signaled()])
        .unwrap();
    let k2 = mw2.rkey();
    assert!(mw1.bind_outstanding() && mw2.bind_outstanding());
    for q in [&mut b, &mut b2] {
        let err = refused(q, |q| {
            q.bind_mw(&mw1, window(&e.mr, RW), 3, SendFlags::SIGNALED)
                .map(drop)
        });
        assert!(
            matches!(err, Error::MwRefused(MwRefusal::BindOutstanding { rkey }) if rkey == k1.0),
            "{err:?}"
        );
        let err = refused(q, |q| q.unbind_mw(&mw1, 4, SendFlags::SIGNALED).map(drop));
        assert!(
            matches!(err, Error::MwRefused(MwRefusal::BindOutstanding { .. })),
            "{err:?}"
        );
        let err = refused(q, |q| {
            q.post_send(&[SendWr::bind_mw(5, &mw2, window(&e.mr, RW))])
        });
        assert!(
            matches!(err, Error::MwRefused(MwRefusal::BindOutstanding { rkey }) if rkey == k2.0),
            "{err:?}"
        );
    }
    assert_eq!((mw1.rkey(), mw2.rkey()), (k1, k2));
    assert_eq!(next(&mut b).status, WcStatus::SUCCESS);
    assert_eq!(next(&mut b2).status, WcStatus::SUCCESS);
    assert!(!mw1.bind_outstanding() && !mw2.bind_outstanding());
    assert_eq!((mw1.rkey(), mw2.rkey()), (k1, k2));
}

/// An unsignaled type-1 bind: the mark clears once a later signaled WR's
/// completion retires it (success implied), the rkey stays the one it
/// gave, and the window binds again.
#[test]
fn an_unsignaled_bind_is_settled_by_a_later_signaled_wr() {
    let e = mw_env();
    let mw = e.pd.alloc_mw(MwType::One).unwrap();
    let (mut a, mut b) = pair(&e.pd);
    let k = b
        .bind_mw(&mw, window(&e.mr, RW), 1, SendFlags::empty())
        .unwrap();
    assert!(mw.bind_outstanding());
    let mut wc = [Completion::default(); 4];
    assert_eq!(b.poll(&mut wc).unwrap(), 0);
    assert!(mw.bind_outstanding(), "settled by an empty poll");
    still_posts(&mut b, &e, "after an unsignaled bind");
    assert!(
        !mw.bind_outstanding(),
        "the later WR's completion did not settle it"
    );
    assert_eq!(mw.rkey(), k);
    let k2 = b
        .bind_mw(&mw, window(&e.mr, RW), 2, SendFlags::SIGNALED)
        .unwrap();
    assert_eq!(k2, inc(k));
    assert_eq!(next(&mut b).status, WcStatus::SUCCESS);
    assert_eq!(
        write_through(&mut a, &e.src, 0x22, waddr(&e.mr), k2),
        WcStatus::SUCCESS
    );
}

/// A type-1 bind flushed behind a WR that failed (the QP in ERR when the
/// device reaches it; posted unsignaled: a flushed WQE completes anyway)
/// rolls back: the rkey is the one before it, no bind outstanding, and
/// the window binds on a healthy QP with the next variant.
#[test]
fn a_type1_bind_flushed_behind_a_failed_wr_rolls_back() {
    let e = mw_env();
    let mw = e.pd.alloc_mw(MwType::One).unwrap();
    let (_a, mut b) = pair(&e.pd);
    let before = mw.rkey();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    b.post_send(&[bad_write(&e, &s, 1)]).unwrap();
    let posted = b.bind_mw(&mw, window(&e.mr, RW), 2, SendFlags::empty());
    let got = poll_n(&mut b, 1 + posted.is_ok() as usize);
    assert_eq!(got[0].status, WcStatus::REM_ACCESS_ERR, "{got:?}");
    if posted.is_ok() {
        assert_eq!(got[1].status, WcStatus::WR_FLUSH_ERR, "{got:?}");
        assert_eq!(got[1].wr_id, 2);
    }
    assert_eq!(mw.rkey(), before, "a flushed bind moved the rkey");
    assert!(!mw.bind_outstanding());
    let (mut a2, mut b2) = pair(&e.pd);
    let k = b2
        .bind_mw(&mw, window(&e.mr, RW), 3, SendFlags::SIGNALED)
        .unwrap();
    assert_eq!(k, inc(before));
    assert_eq!(next(&mut b2).status, WcStatus::SUCCESS);
    assert_eq!(
        write_through(&mut a2, &e.src, 0x23, waddr(&e.mr), k),
        WcStatus::SUCCESS
    );
}

/// Unsignaled type-2 binds: the first, which succeeds, is settled by a
/// later signaled WR (a second bind before that is refused,
/// `BindOutstanding`); the next, which the device refuses (MW_BIND_ERR:
/// the window is bound, not free), completes anyway (its error CQE names
/// it) and rolls the rkey back to the live binding's.
#[test]
fn an_unsignaled_refused_bind_rolls_back() {
    let e = mw_env();
    let mw = e.pd.alloc_mw(MwType::Two).unwrap();
    let (_a, mut b) = pair(&e.pd);
    b.post_send(&[SendWr::bind_mw(1, &mw, window(&e.mr, RW))])
        .unwrap();
    let live = mw.rkey();
    let err = b
        .post_send(&[SendWr::bind_mw(2, &mw, window(&e.mr, RW))])
        .unwrap_err();
    assert!(
        matches!(err, Error::MwRefused(MwRefusal::BindOutstanding { .. })),
        "{err:?}"
    );
    assert!(mw.bind_outstanding());
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    b.post_send(&[SendWr::rdma_write(
        3,
        &s,
        RemoteAddr {
            addr: e.mr.addr(),
            rkey: e.mr.rkey(),
        },
    )
    .signaled()])
        .unwrap();
    assert_eq!(next(&mut b).status, WcStatus::SUCCESS);
    assert!(!mw.bind_outstanding());
    assert_eq!(mw.rkey(), live);
    // Now a refused one, unsignaled: the window is bound (not free).
    b.post_send(&[SendWr::bind_mw(4, &mw, window(&e.mr, RW))])
        .unwrap();
    assert_eq!(mw.rkey(), inc(live));
    let c = next(&mut b);
    assert_eq!((c.wr_id, c.status.ident()), (4, "MW_BIND_ERR"), "{c:?}");
    assert_eq!(mw.rkey(), live, "a refused unsignaled bind moved the rkey");
    assert!(!mw.bind_outstanding());
}

/// A window dropped while its bind is outstanding is deallocated only
/// once the bind is polled: until then the MR it maps stays registered
/// (its handle dropped too) and the bind completes with success (not
/// MW_BIND_ERR, its QP not in ERR); after, the rkey grants nothing and
/// the MR is freed.
#[test]
fn a_window_dropped_under_its_bind_is_deallocated_once_the_bind_is_polled() {
    let e = mw_env();
    for ty in [MwType::One, MwType::Two] {
        let mr =
            e.pd.alloc_mr(LEN, Access::LOCAL_WRITE | RW | Access::MW_BIND)
                .unwrap();
        let live = e.pd.live_mrs();
        let mw = e.pd.alloc_mw(ty).unwrap();
        let (mut a, mut b) = pair(&e.pd);
        let k = match ty {
            MwType::One => b
                .bind_mw(&mw, window(&mr, RW), 1, SendFlags::SIGNALED)
                .unwrap(),
            _ => {
                b.post_send(&[SendWr::bind_mw(1, &mw, window(&mr, RW)).signaled()])
                    .unwrap();
                mw.rkey()
            }
        };
        let addr = waddr(&mr);
        drop(mw);
        drop(mr);
        assert_eq!(e.pd.live_mrs(), live, "{ty:?}: the MR went under the bind");
        // (The sim runs the bind when `b`'s CQ is polled: on a window
        // deallocated already it would complete MW_BIND_ERR.)
        let c = next(&mut b);
        assert_eq!((c.wr_id, c.status), (1, WcStatus::SUCCESS), "{ty:?}");
        assert_eq!(
            write_through(&mut a, &e.src, 0x25, addr, k),
            WcStatus::REM_ACCESS_ERR,
            "{ty:?}: the dropped window still grants"
        );
        // (A dropped MR is deregistered once its PD's QPs retired the WRs
        // posted before: here, with them gone.)
        drop((a, b));
        assert_eq!(
            e.pd.live_mrs(),
            live - 1,
            "{ty:?}: the MR outlived the window"
        );
    }
}

/// One type-1 window (`&Mw` is `Sync`) bound from two threads at once, on
/// two QPs, many times: one bind of it outstanding at a time, so each
/// bind either is refused before anything is written
/// (`MwRefusal::BindOutstanding`: retried) or completes with success (no
/// QP in ERR), and at the end `Mw::rkey` grants the peer access.
#[test]
fn one_window_bound_from_two_threads_at_once() {
    let e = mw_env();
    let mw = e.pd.alloc_mw(MwType::One).unwrap();
    let (mut a1, mut b1) = pair(&e.pd);
    let (_a2, mut b2) = pair(&e.pd);
    let barrier = std::sync::Barrier::new(2);
    let rounds = 2000;
    let run = |b: &mut Qp| {
        barrier.wait();
        let mut refused = 0u64;
        let mut i = 0;
        while i < rounds {
            match b.bind_mw(&mw, window(&e.mr, RW), i, SendFlags::SIGNALED) {
                Ok(_) => {}
                Err(Error::MwRefused(MwRefusal::BindOutstanding { .. })) => {
                    refused += 1;
                    std::thread::yield_now();
                    continue;
                }
                Err(x) => return Err(format!("bind {i}: {x}")),
            }
            let c = next(b);
            if c.status != WcStatus::SUCCESS {
                return Err(format!("bind {i}: {:?}", c.status));
            }
            i += 1;
        }
        Ok(refused)
    };
    let (r1, r2) = std::thread::scope(|s| {
        let h1 = s.spawn(|| run(&mut b1));
        let h2 = s.spawn(|| run(&mut b2));
        (h1.join(), h2.join())
    });
    let (r1, r2) = (r1.unwrap(), r2.unwrap());
    println!("refused while the other's bind was outstanding: {r1:?} {r2:?}");
    assert!(r1.is_ok() && r2.is_ok(), "failed binds: {r1:?} {r2:?}");
    assert!(!mw.bind_outstanding());
    assert_eq!(mw.rkey().0 & 0xff, (2 * rounds as u32) & 0xff);
    assert_eq!(
        write_through(&mut a1, &e.src, 0x55, waddr(&e.mr), mw.rkey()),
        WcStatus::SUCCESS
    );
}

/// A type-1 window bound on one QP, then at once (no poll between) on
/// another QP of its PD: the second bind's ctrl immediate would name the
/// variant the first gives, which the device may not have run yet, so it
/// is refused before anything is written (`MwRefusal::BindOutstanding`,
/// the rkey the first gives); once the first is polled, it binds, and
/// neither QP goes to ERR.
#[test]
fn a_type1_window_bound_back_to_back_on_two_qps() {
    let e = mw_env();
    let mw = e.pd.alloc_mw(MwType::One).unwrap();
    let (mut a1, mut b1) = pair(&e.pd);
    let (_a2, mut b2) = pair(&e.pd);
    for i in 0..50 {
        let k1 = b1
            .bind_mw(&mw, window(&e.mr, RW), 1, SendFlags::SIGNALED)
            .unwrap();
        let snap = b2.sq_snapshot().unwrap();
        let err = b2
            .bind_mw(&mw, window(&e.mr, RW), 2, SendFlags::SIGNALED)
            .unwrap_err();
        assert!(
            matches!(err, Error::MwRefused(MwRefusal::BindOutstanding { rkey }) if rkey == k1.0),
            "round {i}: {err:?}"
        );
        assert_eq!(
            snap,
            b2.sq_snapshot().unwrap(),
            "round {i}: a refusal wrote"
        );
        assert_eq!(mw.rkey(), k1);
        let c1 = next(&mut b1);
        assert_eq!(c1.status, WcStatus::SUCCESS, "round {i}: {c1:?}");
        let k2 = b2
            .bind_mw(&mw, window(&e.mr, RW), 2, SendFlags::SIGNALED)
            .unwrap();
        assert_eq!(k2, inc(k1));
        let c2 = next(&mut b2);
        assert_eq!(c2.status, WcStatus::SUCCESS, "round {i}: {c2:?}");
    }
    assert_eq!(
        write_through(&mut a1, &e.src, 0x56, waddr(&e.mr), mw.rkey()),
        WcStatus::SUCCESS
    );
}

/// On a shared CQ: a QP's unsignaled type-1 bind is settled by the shared
/// CQ's poll of a later signaled WR (no longer outstanding, the rkey it
/// gave); a second bind before that is refused; and one flushed behind a
/// failed WR rolls back there too.
#[test]
fn a_shared_cq_settles_binds() {
    let e = mw_env();
    let mw = e.pd.alloc_mw(MwType::One).unwrap();
    let mut cq = e.pd.create_shared_cq(16).unwrap();
    let x = cq.create_qp(&mw_cfg()).unwrap();
    let mut peer = e.pd.create_qp(&mw_cfg()).unwrap();
    Qp::connect_loopback(cq.qp_mut(x), &mut peer).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let good = RemoteAddr {
        addr: e.mr.addr(),
        rkey: e.mr.rkey(),
    };
    let b = cq.qp_mut(x);
    let k = b
        .bind_mw(&mw, window(&e.mr, RW), 1, SendFlags::empty())
        .unwrap();
    let err = refused(b, |q| {
        q.bind_mw(&mw, window(&e.mr, RW), 2, SendFlags::SIGNALED)
            .map(drop)
    });
    assert!(
        matches!(err, Error::MwRefused(MwRefusal::BindOutstanding { .. })),
        "{err:?}"
    );
    b.post_send(&[SendWr::rdma_write(3, &s, good).signaled()])
        .unwrap();
    let got = poll_n_with(|wc| cq.poll(wc), 1);
    assert_eq!((got[0].wr_id, got[0].status), (3, WcStatus::SUCCESS));
    assert!(!mw.bind_outstanding());
    assert_eq!(mw.rkey(), k);
    // Flushed behind a failed WRITE: rolls back to `k`.
    let b = cq.qp_mut(x);
    b.post_send(&[bad_write(&e, &s, 4)]).unwrap();
    let posted = b.bind_mw(&mw, window(&e.mr, RW), 5, SendFlags::empty());
    let got = poll_n_with(|wc| cq.poll(wc), 1 + posted.is_ok() as usize);
    assert_eq!(got[0].status, WcStatus::REM_ACCESS_ERR, "{got:?}");
    assert_eq!(mw.rkey(), k, "a flushed bind moved the rkey");
    assert!(!mw.bind_outstanding());
}
