//! Memory-window operations refused before anything is written, on the
//! sim's direct path: each `MwRefusal` (no MW_BIND on the MR, the range,
//! the access, the window's type, another PD, a QP without
//! `QpConfig::memory_windows`), for a type-1 bind (`Qp::bind_mw`) and a
//! type-2 one (`SendWr::bind_mw`), alone and inside a batch: the ring and
//! its doorbell record unchanged, no completion comes, and the next post
//! works.

use rdma_direct::*;

#[path = "support/mw.rs"]
mod support;
use support::*;

/// Each refusal of a bind, as `Qp::bind_mw` (type 1) and as a WR
/// (type 2), one at a time and at the end of a batch behind a valid WRITE.
#[test]
fn every_refused_bind_writes_nothing() {
    let e = mw_env();
    let other_pd = e.ctx.alloc_pd().unwrap();
    let no_bind =
        e.pd.alloc_mr(LEN, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let read_only =
        e.pd.alloc_mr(LEN, Access::REMOTE_READ | Access::MW_BIND)
            .unwrap();
    let other_mr = other_pd
        .alloc_mr(LEN, Access::LOCAL_WRITE | Access::MW_BIND)
        .unwrap();
    let (mw1, mw2) = (
        e.pd.alloc_mw(MwType::One).unwrap(),
        e.pd.alloc_mw(MwType::Two).unwrap(),
    );
    let rw = RW;
    let cases: Vec<(&str, MwBind<'_>, MwRefusal)> = vec![
        (
            "no MW_BIND on the MR",
            MwBind::new(&no_bind, 0, 64, rw),
            MwRefusal::NoMwBind,
        ),
        (
            "empty",
            MwBind::new(&e.mr, 0, 0, rw),
            MwRefusal::Range {
                offset: 0,
                len: 0,
                mr_len: LEN,
            },
        ),
        (
            "past the MR's end",
            MwBind::new(&e.mr, LEN - 8, 16, rw),
            MwRefusal::Range {
                offset: LEN - 8,
                len: 16,
                mr_len: LEN,
            },
        ),
        (
            "offset overflowing",
            MwBind::new(&e.mr, usize::MAX, 2, rw),
            MwRefusal::Range {
                offset: usize::MAX,
                len: 2,
                mr_len: LEN,
            },
        ),
        (
            "MW_BIND asked of a window",
            MwBind::new(&e.mr, 0, 64, Access::REMOTE_READ | Access::MW_BIND),
            MwRefusal::Access {
                access: Access::REMOTE_READ | Access::MW_BIND,
            },
        ),
        (
            "REMOTE_WRITE over an MR without LOCAL_WRITE",
            MwBind::new(&read_only, 0, 64, Access::REMOTE_WRITE),
            MwRefusal::Access {
                access: Access::REMOTE_WRITE,
            },
        ),
        (
            "an MR of another PD",
            MwBind::new(&other_mr, 0, 64, rw),
            MwRefusal::OtherPd,
        ),
    ];
    for (what, bind, why) in cases {
        let (_a, mut b) = pair(&e.pd);
        // Type 1.
        let err = refused(&mut b, |q| {
            q.bind_mw(&mw1, bind, 1, SendFlags::SIGNALED).map(drop)
        });
        assert!(
            matches!(err, Error::MwRefused(r) if r == why),
            "type 1 or 2, {what}: {err:?}"
        );
        assert_eq!(mw1.rkey().0 & 0xff, 0, "type 1, {what}: the rkey moved");
        still_posts(&mut b, &e, what);
        // Type 2, alone and behind a valid WRITE.
        let err = refused(&mut b, |q| {
            q.post_send(&[SendWr::bind_mw(2, &mw2, bind).signaled()])
        });
        assert!(
            matches!(err, Error::MwRefused(r) if r == why),
            "type 1 or 2, {what}: {err:?}"
        );
        let s = [Sge::new(&e.src, 0, 8).unwrap()];
        let r = RemoteAddr {
            addr: e.mr.addr(),
            rkey: e.mr.rkey(),
        };
        let err = refused(&mut b, |q| {
            q.post_send(&[
                SendWr::rdma_write(3, &s, r).signaled(),
                SendWr::bind_mw(4, &mw2, bind).signaled(),
            ])
        });
        assert!(
            matches!(err, Error::MwRefused(r) if r == why),
            "type 2 in a batch, {what}: {err:?}"
        );
        assert_eq!(mw2.rkey().0 & 0xff, 0, "type 2, {what}: the rkey moved");
        still_posts(&mut b, &e, what);
    }
}

/// A window of the other type for the operation: a type-2 window through
/// `Qp::bind_mw` / `unbind_mw`, a type-1 window through `SendWr::bind_mw`.
#[test]
fn a_window_of_the_wrong_type_is_refused() {
    let e = mw_env();
    let (mw1, mw2) = (
        e.pd.alloc_mw(MwType::One).unwrap(),
        e.pd.alloc_mw(MwType::Two).unwrap(),
    );
    let (_a, mut b) = pair(&e.pd);
    let two = MwRefusal::WrongType {
        mw_type: MwType::Two,
    };
    let err = refused(&mut b, |q| {
        q.bind_mw(&mw2, window(&e.mr, RW), 1, SendFlags::SIGNALED)
            .map(drop)
    });
    assert!(matches!(err, Error::MwRefused(r) if r == two), "{err:?}");
    let err = refused(&mut b, |q| {
        q.unbind_mw(&mw2, 1, SendFlags::SIGNALED).map(drop)
    });
    assert!(matches!(err, Error::MwRefused(r) if r == two), "{err:?}");
    let err = refused(&mut b, |q| {
        q.post_send(&[SendWr::bind_mw(2, &mw1, window(&e.mr, RW))])
    });
    assert!(
        matches!(err, Error::MwRefused(r) if r == MwRefusal::WrongType {
            mw_type: MwType::One
        }),
        "{err:?}"
    );
    still_posts(&mut b, &e, "wrong type");
}

/// A window of another PD than the QP's: refused for both types.
#[test]
fn a_window_of_another_pd_is_refused() {
    let e = mw_env();
    let other = e.ctx.alloc_pd().unwrap();
    let (mw1, mw2) = (
        other.alloc_mw(MwType::One).unwrap(),
        other.alloc_mw(MwType::Two).unwrap(),
    );
    let (_a, mut b) = pair(&e.pd);
    let err = refused(&mut b, |q| {
        q.bind_mw(&mw1, window(&e.mr, RW), 1, SendFlags::SIGNALED)
            .map(drop)
    });
    assert!(
        matches!(err, Error::MwRefused(r) if r == MwRefusal::OtherPd),
        "{err:?}"
    );
    let err = refused(&mut b, |q| {
        q.post_send(&[SendWr::bind_mw(2, &mw2, window(&e.mr, RW))])
    });
    assert!(
        matches!(err, Error::MwRefused(r) if r == MwRefusal::OtherPd),
        "{err:?}"
    );
    still_posts(&mut b, &e, "other PD");
}

/// A QP created without `QpConfig::memory_windows` (its WQEs too small
/// for a bind's UMR) refuses every window operation, and a UD QP with it
/// too; a SEND with invalidate needs no flag (but RC or UC).
#[test]
fn a_qp_without_memory_windows_refuses_them() {
    let e = mw_env();
    let (mw1, mw2) = (
        e.pd.alloc_mw(MwType::One).unwrap(),
        e.pd.alloc_mw(MwType::Two).unwrap(),
    );
    let cfg = QpConfig {
        memory_windows: false,
        ..mw_cfg()
    };
    let (_a, mut b) = e.pd.create_connected_pair(&cfg).unwrap();
    let err = refused(&mut b, |q| {
        q.bind_mw(&mw1, window(&e.mr, RW), 1, SendFlags::SIGNALED)
            .map(drop)
    });
    assert!(
        matches!(err, Error::MwRefused(MwRefusal::NotEnabled)),
        "{err:?}"
    );
    let err = refused(&mut b, |q| {
        q.unbind_mw(&mw1, 1, SendFlags::SIGNALED).map(drop)
    });
    assert!(
        matches!(err, Error::MwRefused(MwRefusal::NotEnabled)),
        "{err:?}"
    );
    let err = refused(&mut b, |q| {
        q.post_send(&[SendWr::bind_mw(2, &mw2, window(&e.mr, RW))])
    });
    assert!(
        matches!(err, Error::MwRefused(MwRefusal::NotEnabled)),
        "{err:?}"
    );
    let err = refused(&mut b, |q| q.post_send(&[SendWr::local_inv(3, mw2.rkey())]));
    assert!(
        matches!(err, Error::MwRefused(MwRefusal::NotEnabled)),
        "{err:?}"
    );
    still_posts(&mut b, &e, "not enabled");
}

/// A type-1 bind outside RTS: refused with `QpState`, nothing written.
#[test]
fn a_bind_outside_rts_is_refused() {
    let e = mw_env();
    let mw = e.pd.alloc_mw(MwType::One).unwrap();
    let mut q = e.pd.create_qp(&mw_cfg()).unwrap();
    let err = refused(&mut q, |q| {
        q.bind_mw(&mw, window(&e.mr, RW), 1, SendFlags::SIGNALED)
            .map(drop)
    });
    assert!(matches!(err, Error::QpState { .. }), "{err:?}");
    assert_eq!(mw.rkey().0 & 0xff, 0);
}

/// A type-1 bind on a full SQ: `QueueFull`, nothing written, the rkey
/// unchanged; after a poll it posts.
#[test]
fn a_bind_on_a_full_sq_is_queue_full() {
    let e = mw_env();
    let mw = e.pd.alloc_mw(MwType::One).unwrap();
    let cfg = QpConfig {
        max_send_wr: 2,
        ..mw_cfg()
    };
    let (_a, mut b) = e.pd.create_connected_pair(&cfg).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let r = RemoteAddr {
        addr: e.mr.addr(),
        rkey: e.mr.rkey(),
    };
    b.post_send(&[
        SendWr::rdma_write(1, &s, r),
        SendWr::rdma_write(2, &s, r).signaled(),
    ])
    .unwrap();
    let before = mw.rkey();
    let err = refused(&mut b, |q| {
        q.bind_mw(&mw, window(&e.mr, RW), 3, SendFlags::SIGNALED)
            .map(drop)
    });
    assert!(matches!(err, Error::QueueFull), "{err:?}");
    assert_eq!(mw.rkey(), before);
    assert_eq!(next(&mut b).wr_id, 2);
    let rkey = b
        .bind_mw(&mw, window(&e.mr, RW), 3, SendFlags::SIGNALED)
        .unwrap();
    assert_eq!(rkey, inc(before));
    assert_eq!(next(&mut b).opcode, WcOpcode::BIND_MW);
}
