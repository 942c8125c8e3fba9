//! Memory windows in the sim (`mw.rs`): a peer's WRITE and READ through a
//! bound window land inside its range; outside the window (inside the MR),
//! after a `LOCAL_INV`, after a type-1 unbind, with a stale variant byte,
//! beyond the window's access, a type-2 window through another QP: each
//! REM_ACCESS_ERR with the memory unchanged; binds the sim refuses with
//! MW_BIND_ERR and the window unchanged; an MR with a bound window is not
//! deregistered.

use super::*;
use crate::wqe::{MwAccess, MwType, UmrBind, UmrWqe};

pub(super) const RW: MwAccess = MwAccess {
    local_write: false,
    remote_read: true,
    remote_write: true,
    remote_atomic: false,
};

/// Registers `buf` on the device, with `access`.
pub(super) fn reg(dev: &Device, buf: &mut [u8], access: Access) -> MrKeys {
    // SAFETY: every caller's buffer outlives the device work on it, done
    // only inside `dev.process()` calls while it lives.
    unsafe { dev.reg_mr(PD, buf.as_mut_ptr(), buf.len(), access) }.unwrap()
}

pub(super) fn bind(mw: u32, new_key: u8, mr: &MrKeys, addr: u64, len: u64, t: MwType) -> UmrWqe {
    UmrWqe {
        flags: CtrlFlags::CQ_UPDATE,
        imm_rkey: mw,
        mw_type: t,
        new_key,
        bind: Some(UmrBind {
            lkey: mr.lkey,
            addr,
            len,
            access: RW,
        }),
    }
}

/// Posts `w` on `side` and runs it: the CQE's syndrome (0: success).
pub(super) fn run_umr(dev: &Device, side: &mut Side, w: &UmrWqe) -> Syndrome {
    side.sq.post_umr(w, 1).unwrap();
    side.sq.ring_doorbell();
    dev.process();
    let c = side.cqp.poll_one().expect("the UMR's CQE");
    side.sq.complete(c.wqe_counter);
    if c.opcode == CqeOpcode::REQ {
        assert_eq!(c.wqe_opcode, crate::wqe::UMR);
        Syndrome(0)
    } else {
        c.syndrome
    }
}

/// `a` WRITEs 8 bytes of 0x5a at `raddr` with `rkey`: the CQE's syndrome.
pub(super) fn write(dev: &Device, a: &mut Side, raddr: u64, rkey: u32) -> Syndrome {
    a.sq.post(&write_wqe(Payload::Inline(&[0x5a; 8]), raddr, rkey), 2)
        .unwrap();
    a.sq.ring_doorbell();
    dev.process();
    let c = a.cqp.poll_one().expect("the WRITE's CQE");
    a.sq.complete(c.wqe_counter);
    if c.opcode == CqeOpcode::REQ {
        Syndrome(0)
    } else {
        c.syndrome
    }
}

#[test]
fn a_type_2_window_grants_its_range_and_local_inv_revokes_it() {
    let dev = Device::new();
    let mut mem = vec![0u8; 4096];
    let base = mem.as_ptr() as u64;
    let mr = reg(
        &dev,
        &mut mem,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::MW_BIND,
    );
    let mw = dev.alloc_mw(PD, MwType::Two).unwrap();
    let (mut a, mut b) = pair_with(&dev, 16, 4);
    // b binds [base + 1024, base + 2048) with the variant byte 7.
    let w = bind(mw, 7, &mr, base + 1024, 1024, MwType::Two);
    assert_eq!(run_umr(&dev, &mut b, &w), Syndrome(0));
    let rkey = mw | 7;
    assert_eq!(dev.mw_state(mw), Some((rkey, true)));
    assert_eq!(write(&dev, &mut a, base + 1024, rkey), Syndrome(0));
    assert_eq!(mem[1024..1032], [0x5a; 8]);
    assert_eq!(write(&dev, &mut a, base + 2040, rkey), Syndrome(0));
    assert!(mem[..1024].iter().chain(&mem[2048..]).all(|&x| x == 0));
    // The MR cannot go while the window is bound.
    assert_eq!(
        dev.dereg_mr(mr.lkey),
        Err(SimError::MrHasWindows {
            lkey: mr.lkey,
            windows: 1
        })
    );
    // LOCAL_INV of a stale variant: refused, the window stays bound.
    let stale = UmrWqe::local_inv(mw | 6, CtrlFlags::CQ_UPDATE);
    assert_eq!(run_umr(&dev, &mut b, &stale), Syndrome::LOCAL_QP_OP_ERR);
    assert_eq!(dev.mw_state(mw), Some((rkey, true)));
    // (The error put b in ERR: a fresh pair for the rest.)
    let (mut a, b2) = pair_with(&dev, 16, 4);
    // A type-2 window serves only the QP it was bound on: b2 is not b.
    assert_eq!(
        write(&dev, &mut a, base + 1024, rkey),
        Syndrome::REMOTE_ACCESS_ERR
    );
    let (_, mut b3) = pair_with(&dev, 16, 4);
    // LOCAL_INV from another QP: refused.
    let inv = UmrWqe::local_inv(rkey, CtrlFlags::CQ_UPDATE);
    assert_eq!(run_umr(&dev, &mut b3, &inv), Syndrome::LOCAL_QP_OP_ERR);
    drop(b2);
    // b itself is in ERR now; the window is still bound to it. Free it by
    // dealloc; then the MR goes.
    dev.dealloc_mw(rkey).unwrap();
    dev.dereg_mr(mr.lkey).unwrap();
    drop(b);
}

#[test]
fn local_inv_on_the_binding_qp_revokes_every_later_access() {
    let dev = Device::new();
    let mut mem = vec![0u8; 256];
    let base = mem.as_ptr() as u64;
    let mr = reg(
        &dev,
        &mut mem,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::MW_BIND,
    );
    let mw = dev.alloc_mw(PD, MwType::Two).unwrap();
    let (mut a, mut b) = pair_with(&dev, 16, 4);
    assert_eq!(
        run_umr(&dev, &mut b, &bind(mw, 1, &mr, base, 256, MwType::Two)),
        Syndrome(0)
    );
    assert_eq!(write(&dev, &mut a, base, mw | 1), Syndrome(0));
    mem.fill(0);
    let inv = UmrWqe::local_inv(mw | 1, CtrlFlags::CQ_UPDATE);
    assert_eq!(run_umr(&dev, &mut b, &inv), Syndrome(0));
    assert_eq!(dev.mw_state(mw), Some((mw | 1, false)));
    assert_eq!(
        write(&dev, &mut a, base, mw | 1),
        Syndrome::REMOTE_ACCESS_ERR
    );
    assert!(mem.iter().all(|&x| x == 0));
    // A freed type-2 window binds again (on a fresh pair), with a new variant.
    let (mut a, mut b) = pair_with(&dev, 16, 4);
    assert_eq!(
        run_umr(&dev, &mut b, &bind(mw | 1, 2, &mr, base, 16, MwType::Two)),
        Syndrome(0)
    );
    assert_eq!(
        write(&dev, &mut a, base, mw | 1),
        Syndrome::REMOTE_ACCESS_ERR,
        "the old rkey"
    );
    drop(b);
}

#[test]
fn type_1_windows_rebind_and_unbind() {
    let dev = Device::new();
    let mut mem = vec![0u8; 512];
    let base = mem.as_ptr() as u64;
    let mr = reg(
        &dev,
        &mut mem,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::MW_BIND,
    );
    let mw = dev.alloc_mw(PD, MwType::One).unwrap();
    let (mut a, mut b) = pair_with(&dev, 16, 4);
    assert_eq!(
        run_umr(&dev, &mut b, &bind(mw, 1, &mr, base, 64, MwType::One)),
        Syndrome(0)
    );
    // Rebound while bound (type 1 may), to another range and variant.
    assert_eq!(
        run_umr(
            &dev,
            &mut b,
            &bind(mw | 1, 2, &mr, base + 64, 64, MwType::One)
        ),
        Syndrome(0)
    );
    assert_eq!(write(&dev, &mut a, base + 64, mw | 2), Syndrome(0));
    // A type-1 window is not tied to a QP: another pair reaches it too.
    let (mut a2, _b2) = pair_with(&dev, 16, 4);
    assert_eq!(write(&dev, &mut a2, base + 120, mw | 2), Syndrome(0));
    // The zero-length bind unbinds it.
    let unbind = UmrWqe {
        flags: CtrlFlags::CQ_UPDATE,
        imm_rkey: mw | 2,
        mw_type: MwType::One,
        new_key: 3,
        bind: None,
    };
    assert_eq!(run_umr(&dev, &mut b, &unbind), Syndrome(0));
    mem.fill(0);
    assert_eq!(
        write(&dev, &mut a, base + 64, mw | 3),
        Syndrome::REMOTE_ACCESS_ERR
    );
    assert!(mem.iter().all(|&x| x == 0));
}

#[test]
fn accesses_a_window_does_not_grant_are_remote_access_errors() {
    let dev = Device::new();
    let mut mem = vec![0u8; 4096];
    let base = mem.as_ptr() as u64;
    let mr = reg(
        &dev,
        &mut mem,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::MW_BIND,
    );
    let mw = dev.alloc_mw(PD, MwType::One).unwrap();
    let read_only = UmrWqe {
        bind: Some(UmrBind {
            access: MwAccess {
                remote_read: true,
                ..MwAccess::default()
            },
            ..bind(mw, 1, &mr, base + 1024, 1024, MwType::One)
                .bind
                .unwrap()
        }),
        ..bind(mw, 1, &mr, base + 1024, 1024, MwType::One)
    };
    let (_, mut b) = pair_with(&dev, 16, 4);
    assert_eq!(run_umr(&dev, &mut b, &read_only), Syndrome(0));
    // Each refused access puts the pair in ERR: a fresh pair each.
    for (addr, rkey, why) in [
        (base + 1024, mw | 1, "a WRITE through a read-only window"),
        (base + 1020, mw | 1, "inside the MR, before the window"),
        (base + 2044, mw | 1, "across the window's end"),
        (base + 1024, mw | 2, "a stale variant byte"),
    ] {
        let (mut a, _b) = pair_with(&dev, 16, 4);
        assert_eq!(
            write(&dev, &mut a, addr, rkey),
            Syndrome::REMOTE_ACCESS_ERR,
            "{why}"
        );
        assert!(mem.iter().all(|&x| x == 0), "{why}");
    }
}

#[test]
fn binds_the_sim_refuses_leave_the_window_unchanged() {
    let dev = Device::new();
    let mut mem = vec![0u8; 256];
    let base = mem.as_ptr() as u64;
    let no_bind = reg(&dev, &mut mem, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let mut mem2 = vec![0u8; 256];
    let base2 = mem2.as_ptr() as u64;
    let no_local_write = reg(&dev, &mut mem2, Access::REMOTE_WRITE | Access::MW_BIND);
    let mut mem3 = vec![0u8; 256];
    let base3 = mem3.as_ptr() as u64;
    let ok = reg(
        &dev,
        &mut mem3,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::MW_BIND,
    );
    let one = dev.alloc_mw(PD, MwType::One).unwrap();
    let two = dev.alloc_mw(PD, MwType::Two).unwrap();
    let other_pd = dev.alloc_mw(PD + 1, MwType::One).unwrap();
    let cases = [
        (
            bind(one, 1, &no_bind, base, 16, MwType::One),
            "an MR without MW_BIND",
        ),
        (
            bind(one, 1, &no_local_write, base2, 16, MwType::One),
            "REMOTE_WRITE over an MR without LOCAL_WRITE",
        ),
        (
            bind(one, 1, &ok, base3 + 200, 100, MwType::One),
            "past the MR's end",
        ),
        (
            bind(one, 1, &ok, base3, 16, MwType::Two),
            "a type-1 window bound as type 2",
        ),
        (
            bind(one | 5, 1, &ok, base3, 16, MwType::One),
            "a stale variant byte",
        ),
        (
            bind(other_pd, 1, &ok, base3, 16, MwType::One),
            "a window of another PD",
        ),
        (
            bind(0x7fff_0000, 1, &ok, base3, 16, MwType::One),
            "no such window",
        ),
    ];
    for (w, why) in cases {
        let (_, mut b) = pair_with(&dev, 16, 4);
        assert_eq!(run_umr(&dev, &mut b, &w), Syndrome::MW_BIND_ERR, "{why}");
        for mw in [one, two, other_pd] {
            assert_eq!(dev.mw_state(mw), Some((mw, false)), "{why}");
        }
    }
    // A type-2 window that is bound is not bound again (CHECK_FREE).
    let (_, mut b) = pair_with(&dev, 16, 4);
    assert_eq!(
        run_umr(&dev, &mut b, &bind(two, 1, &ok, base3, 16, MwType::Two)),
        Syndrome(0)
    );
    assert_eq!(
        run_umr(&dev, &mut b, &bind(two | 1, 2, &ok, base3, 16, MwType::Two)),
        Syndrome::MW_BIND_ERR
    );
    assert_eq!(dev.mw_state(two), Some((two | 1, true)));
}
