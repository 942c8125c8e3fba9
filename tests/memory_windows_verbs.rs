//! Memory windows on the verbs path, on a real verbs device named by
//! `RDMA_DIRECT_VERBS_DEVICE` (rxe0 in the soft-RoCE guest; skipped
//! without it), through the extended verbs (`ibv_bind_mw`,
//! `ibv_wr_bind_mw`, `ibv_wr_local_inv`, `ibv_wr_send_inv`) or, with
//! `RDMA_DIRECT_VERBS_OLD_POST=1`, `ibv_post_send` (`IBV_WR_BIND_MW`,
//! `IBV_WR_LOCAL_INV`, `IBV_WR_SEND_WITH_INV`): scripts/test step 3 runs
//! it both ways.
//!
//! Each case makes fresh QPs (a refused access puts both in ERR): a
//! loopback RC pair on one PD, `a` the requester, `b` the responder whose
//! PD's MR the windows map (a type-2 window is bound on `b`, the QP it
//! serves). READs and WRITEs through a window land inside its range; after
//! a type-1 zero-length bind, a type-2 `LOCAL_INV` and a peer's SEND with
//! invalidate (whose receive completion names the rkey) the same access is
//! refused (`REM_ACCESS_ERR`) and the memory is unchanged.

use rdma_direct::testing::QpHooks;
use rdma_direct::*;
use std::time::{Duration, Instant};

/// The device, or `None` having printed why the case is skipped.
fn device(case: &str) -> Option<String> {
    match std::env::var("RDMA_DIRECT_VERBS_DEVICE") {
        Ok(d) => Some(d),
        Err(_) => {
            eprintln!(
                "memory_windows_verbs: {case}: SKIPPED: RDMA_DIRECT_VERBS_DEVICE names no verbs \
                 device (scripts/test step 3 sets it in the rxe guest)"
            );
            None
        }
    }
}

fn wait_one(q: &mut Qp) -> Completion {
    let mut out = [Completion::default(); 1];
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        if q.poll(&mut out).unwrap() == 1 {
            return out[0];
        }
    }
    panic!("no completion in 10 s");
}

/// What each case works on: a PD, the MR the windows map (`target`, 4 KiB
/// of a known pattern, MW_BIND and every remote access), a local MR
/// (`local`) and a loopback RC pair made with `QpConfig::memory_windows`.
struct Setup {
    // (Field order: the QPs go first, then the MRs.)
    a: Qp,
    b: Qp,
    local: Mr,
    target: Mr,
    pd: Pd,
    old: bool,
}

const PATTERN: u8 = 0x5a;

fn setup(dev: &str) -> Setup {
    let old = std::env::var("RDMA_DIRECT_VERBS_OLD_POST").is_ok_and(|v| v == "1");
    let ctx = Context::open(dev).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let target = pd
        .alloc_mr(
            4096,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::MW_BIND,
        )
        .unwrap();
    target.write(0, &[PATTERN; 4096]).unwrap();
    let local = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let cfg = QpConfig {
        memory_windows: true,
        ..QpConfig::default()
    };
    let (a, b) = pd.create_connected_pair(&cfg).unwrap();
    assert_eq!(
        a.verbs_extended(),
        Some((!old, !old)),
        "on {dev}, old {old}"
    );
    Setup {
        a,
        b,
        local,
        target,
        pd,
        old,
    }
}

impl Setup {
    /// A signaled WRITE from `a` of `len` bytes of `fill` (written into
    /// `local` first) to `addr` through `rkey`; its completion.
    fn write(&mut self, addr: u64, rkey: Rkey, fill: u8, len: u32) -> Completion {
        self.local.write(0, &vec![fill; len as usize]).unwrap();
        let sge = [Sge::new(&self.local, 0, len).unwrap()];
        self.a
            .post_send(&[SendWr::rdma_write(11, &sge, RemoteAddr { addr, rkey })
                .with_flags(SendFlags::SIGNALED)])
            .unwrap();
        wait_one(&mut self.a)
    }

    /// A signaled READ by `a` of `len` bytes at `addr` through `rkey` into
    /// `local` at 2048; its completion and the bytes.
    fn read(&mut self, addr: u64, rkey: Rkey, len: u32) -> (Completion, Vec<u8>) {
        let sge = [Sge::new(&self.local, 2048, len).unwrap()];
        self.a
            .post_send(&[SendWr::rdma_read(12, &sge, RemoteAddr { addr, rkey })
                .with_flags(SendFlags::SIGNALED)])
            .unwrap();
        let c = wait_one(&mut self.a);
        let mut got = vec![0u8; len as usize];
        self.local.read(2048, &mut got).unwrap();
        (c, got)
    }

    /// The target's bytes.
    fn target_bytes(&self) -> Vec<u8> {
        let mut got = vec![0u8; 4096];
        self.target.read(0, &mut got).unwrap();
        got
    }
}

/// Posts `wr` signaled on `q` and returns its completion.
fn post_wait(q: &mut Qp, wr: SendWr<'_>) -> Completion {
    q.post_send(&[wr.with_flags(SendFlags::SIGNALED)]).unwrap();
    wait_one(q)
}

/// Asserts `c` is the successful completion of `opcode`.
fn ok(c: Completion, opcode: WcOpcode, what: &str) {
    assert_eq!(
        (c.status, c.opcode),
        (WcStatus::SUCCESS, opcode),
        "{what}: {c:?}"
    );
}

/// Asserts the access of `c` was refused by the responder, and that the
/// target still holds `before`.
fn refused(s: &Setup, c: Completion, before: &[u8], what: &str) {
    assert_eq!(c.status, WcStatus::REM_ACCESS_ERR, "{what}: {c:?}");
    assert!(s.target_bytes() == before, "{what}: the target changed");
}

const RW: Access = Access::REMOTE_WRITE.union(Access::REMOTE_READ);

#[test]
fn type1_bind_lands_reads_and_writes_in_the_window_and_unbind_revokes_it() {
    let Some(dev) = device("type1_bind_lands_reads_and_writes_in_the_window_and_unbind_revokes_it")
    else {
        return;
    };
    let mut s = setup(&dev);
    let mw = s.pd.alloc_mw(MwType::One).unwrap();
    assert_eq!(mw.mw_type(), MwType::One);
    let r0 = mw.rkey();
    let base = s.target.addr() + 1024;
    let rkey =
        s.a.bind_mw(
            &mw,
            MwBind::new(&s.target, 1024, 256, RW),
            1,
            SendFlags::SIGNALED,
        )
        .unwrap();
    assert_eq!(rkey, mw.rkey());
    assert_eq!(
        rkey.0 >> 8,
        r0.0 >> 8,
        "the index stays: {r0:?} -> {rkey:?}"
    );
    assert_eq!(rkey.0 & 0xff, (r0.0 + 1) & 0xff, "the variant is the next");
    let c = wait_one(&mut s.a);
    ok(c, WcOpcode::BIND_MW, "the type-1 bind");
    assert_eq!(c.wr_id, 1);
    // A WRITE through the window lands at its offset in the MR.
    ok(
        s.write(base + 16, rkey, 0xa1, 64),
        WcOpcode::RDMA_WRITE,
        "WRITE",
    );
    let got = s.target_bytes();
    assert!(got[1040..1104].iter().all(|&x| x == 0xa1));
    assert!(got[..1040].iter().all(|&x| x == PATTERN));
    assert!(got[1104..].iter().all(|&x| x == PATTERN));
    // A READ through it reads the window's bytes.
    let (c, bytes) = s.read(base, rkey, 32);
    ok(c, WcOpcode::RDMA_READ, "READ");
    assert_eq!(bytes[..16], [PATTERN; 16]);
    assert_eq!(bytes[16..], [0xa1; 16]);
    // The zero-length bind: a new rkey, and the old one is refused.
    let r2 = s.a.unbind_mw(&mw, 2, SendFlags::SIGNALED).unwrap();
    assert_eq!(r2, mw.rkey());
    assert_eq!(r2.0 & 0xff, (rkey.0 + 1) & 0xff);
    let c = wait_one(&mut s.a);
    ok(c, WcOpcode::BIND_MW, "the zero-length bind");
    assert_eq!(c.wr_id, 2);
    let before = s.target_bytes();
    let c = s.write(base, rkey, 0xa2, 8);
    refused(&s, c, &before, "a WRITE through the unbound window");
}

#[test]
fn type1_unbind_of_a_window_never_bound_then_bind() {
    let Some(dev) = device("type1_unbind_of_a_window_never_bound_then_bind") else {
        return;
    };
    let mut s = setup(&dev);
    let mw = s.pd.alloc_mw(MwType::One).unwrap();
    let r0 = mw.rkey();
    // (No MR yet: the zero-length bind names the stand-in.)
    let r1 = s.a.unbind_mw(&mw, 1, SendFlags::SIGNALED).unwrap();
    assert_eq!(r1.0 & 0xff, (r0.0 + 1) & 0xff);
    ok(wait_one(&mut s.a), WcOpcode::BIND_MW, "the unbind");
    let r2 =
        s.a.bind_mw(
            &mw,
            MwBind::new(&s.target, 0, 4096, RW),
            2,
            SendFlags::SIGNALED,
        )
        .unwrap();
    ok(wait_one(&mut s.a), WcOpcode::BIND_MW, "the bind");
    ok(
        s.write(s.target.addr() + 4000, r2, 0xb1, 96),
        WcOpcode::RDMA_WRITE,
        "WRITE",
    );
    assert!(s.target_bytes()[4000..].iter().all(|&x| x == 0xb1));
}

#[test]
fn type1_window_with_less_access_than_its_mr_refuses_a_write() {
    let Some(dev) = device("type1_window_with_less_access_than_its_mr_refuses_a_write") else {
        return;
    };
    let mut s = setup(&dev);
    let mw = s.pd.alloc_mw(MwType::One).unwrap();
    let base = s.target.addr() + 512;
    let rkey =
        s.a.bind_mw(
            &mw,
            MwBind::new(&s.target, 512, 512, Access::REMOTE_READ),
            1,
            SendFlags::SIGNALED,
        )
        .unwrap();
    ok(wait_one(&mut s.a), WcOpcode::BIND_MW, "the bind");
    let (c, bytes) = s.read(base, rkey, 64);
    ok(c, WcOpcode::RDMA_READ, "READ");
    assert_eq!(bytes, [PATTERN; 64]);
    let before = s.target_bytes();
    let c = s.write(base, rkey, 0xc1, 8);
    refused(&s, c, &before, "a WRITE through a read-only window");
}

#[test]
fn type2_bind_lands_accesses_then_local_inv_and_rebind_in_one_post() {
    let Some(dev) = device("type2_bind_lands_accesses_then_local_inv_and_rebind_in_one_post")
    else {
        return;
    };
    let mut s = setup(&dev);
    let mw = s.pd.alloc_mw(MwType::Two).unwrap();
    let r0 = mw.rkey();
    let c = post_wait(
        &mut s.b,
        SendWr::bind_mw(1, &mw, MwBind::new(&s.target, 2048, 1024, RW)),
    );
    ok(c, WcOpcode::BIND_MW, "the type-2 bind");
    let r1 = mw.rkey();
    assert_eq!((r1.0 >> 8, r1.0 & 0xff), (r0.0 >> 8, (r0.0 + 1) & 0xff));
    let base = s.target.addr() + 2048;
    ok(
        s.write(base + 1000, r1, 0xd1, 24),
        WcOpcode::RDMA_WRITE,
        "WRITE",
    );
    let got = s.target_bytes();
    assert!(got[3048..3072].iter().all(|&x| x == 0xd1));
    assert!(got[..3048].iter().all(|&x| x == PATTERN));
    let (c, bytes) = s.read(base + 992, r1, 16);
    ok(c, WcOpcode::RDMA_READ, "READ");
    assert_eq!(bytes[..8], [PATTERN; 8]);
    assert_eq!(bytes[8..], [0xd1; 8]);
    // LOCAL_INV, then a rebind of the freed window to another range, in
    // one post: the bind names the window by the rkey the first gave it.
    s.b.post_send(&[
        SendWr::local_inv(2, r1).with_flags(SendFlags::SIGNALED),
        SendWr::bind_mw(3, &mw, MwBind::new(&s.target, 0, 128, RW)).with_flags(SendFlags::SIGNALED),
    ])
    .unwrap();
    let c = wait_one(&mut s.b);
    ok(c, WcOpcode::LOCAL_INV, "LOCAL_INV");
    assert_eq!(c.wr_id, 2);
    let c = wait_one(&mut s.b);
    ok(c, WcOpcode::BIND_MW, "the rebind");
    assert_eq!(c.wr_id, 3);
    let r2 = mw.rkey();
    assert_eq!(r2.0 & 0xff, (r1.0 + 1) & 0xff);
    ok(
        s.write(s.target.addr() + 8, r2, 0xd2, 8),
        WcOpcode::RDMA_WRITE,
        "WRITE through the rebound window",
    );
    assert!(s.target_bytes()[8..16].iter().all(|&x| x == 0xd2));
    // The invalidated rkey is refused.
    let before = s.target_bytes();
    let c = s.write(base, r1, 0xd3, 8);
    refused(&s, c, &before, "a WRITE through the invalidated rkey");
    let _ = s.old;
}

#[test]
fn type2_send_with_inv_names_the_rkey_and_revokes_the_window() {
    let Some(dev) = device("type2_send_with_inv_names_the_rkey_and_revokes_the_window") else {
        return;
    };
    let mut s = setup(&dev);
    let mw = s.pd.alloc_mw(MwType::Two).unwrap();
    let c = post_wait(
        &mut s.b,
        SendWr::bind_mw(1, &mw, MwBind::new(&s.target, 0, 4096, RW)),
    );
    ok(c, WcOpcode::BIND_MW, "the type-2 bind");
    let r1 = mw.rkey();
    ok(
        s.write(s.target.addr() + 100, r1, 0xe1, 4),
        WcOpcode::RDMA_WRITE,
        "WRITE",
    );
    // b receives a SEND with invalidate of the window's rkey.
    let inbox = s.pd.alloc_mr(256, Access::LOCAL_WRITE).unwrap();
    let rsge = [Sge::new(&inbox, 0, 256).unwrap()];
    s.b.post_recv(&[RecvWr::new(7, &rsge)]).unwrap();
    s.local.write(0, b"invalidate").unwrap();
    let sge = [Sge::new(&s.local, 0, 10).unwrap()];
    s.a.post_send(&[SendWr::send_with_inv(8, &sge, r1).with_flags(SendFlags::SIGNALED)])
        .unwrap();
    let c = wait_one(&mut s.a);
    ok(c, WcOpcode::SEND, "the SEND with invalidate");
    let r = wait_one(&mut s.b);
    ok(r, WcOpcode::RECV, "its receive");
    assert_eq!((r.wr_id, r.byte_len), (7, 10), "{r:?}");
    assert!(r.src_qp.with_inv(), "{r:?}");
    assert_eq!(r.invalidated_rkey(), Some(r1), "{r:?}");
    let mut got = [0u8; 10];
    inbox.read(0, &mut got).unwrap();
    assert_eq!(&got, b"invalidate");
    // The window is free: it binds again, under the next rkey.
    let c = post_wait(
        &mut s.b,
        SendWr::bind_mw(2, &mw, MwBind::new(&s.target, 1024, 64, RW)),
    );
    ok(c, WcOpcode::BIND_MW, "the rebind");
    let r2 = mw.rkey();
    assert_eq!(r2.0 & 0xff, (r1.0 + 1) & 0xff);
    let (c, bytes) = s.read(s.target.addr() + 1024, r2, 64);
    ok(c, WcOpcode::RDMA_READ, "READ through the rebound window");
    assert_eq!(bytes, [PATTERN; 64]);
    // The invalidated rkey is refused.
    let before = s.target_bytes();
    let c = s.write(s.target.addr() + 100, r1, 0xe2, 4);
    refused(&s, c, &before, "a WRITE through the invalidated rkey");
}

#[test]
fn an_access_inside_the_mr_but_outside_the_window_is_refused() {
    let Some(dev) = device("an_access_inside_the_mr_but_outside_the_window_is_refused") else {
        return;
    };
    if dev.starts_with("rxe") {
        eprintln!(
            "memory_windows_verbs: an_access_inside_the_mr_but_outside_the_window_is_refused: \
             SKIPPED: rxe checks an access through a window against the window's MR, not the \
             window's own range (Linux 6.1 rxe_resp.c check_rkey)"
        );
        return;
    }
    let mut s = setup(&dev);
    let mw = s.pd.alloc_mw(MwType::One).unwrap();
    let rkey =
        s.a.bind_mw(
            &mw,
            MwBind::new(&s.target, 1024, 256, RW),
            1,
            SendFlags::SIGNALED,
        )
        .unwrap();
    ok(wait_one(&mut s.a), WcOpcode::BIND_MW, "the bind");
    let before = s.target_bytes();
    let c = s.write(s.target.addr() + 1024 + 256, rkey, 0xf1, 8);
    refused(&s, c, &before, "a WRITE past the window's end");
}

/// A QP made without `QpConfig::memory_windows` refuses binds and
/// `LOCAL_INV` (`MwRefusal::NotEnabled`, nothing posted) but posts a SEND
/// with invalidate (through `ibv_post_send` where its extended QP has no
/// `ibv_wr_send_inv`), which revokes the peer's type-2 window.
#[test]
fn send_with_inv_from_a_qp_made_without_memory_windows() {
    let Some(dev) = device("send_with_inv_from_a_qp_made_without_memory_windows") else {
        return;
    };
    let old = std::env::var("RDMA_DIRECT_VERBS_OLD_POST").is_ok_and(|v| v == "1");
    let ctx = Context::open(&dev).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let target = pd
        .alloc_mr(
            4096,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::MW_BIND,
        )
        .unwrap();
    let local = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let mut a = pd.create_qp(&QpConfig::default()).unwrap();
    let mut b = pd
        .create_qp(&QpConfig {
            memory_windows: true,
            ..QpConfig::default()
        })
        .unwrap();
    Qp::connect_loopback(&mut a, &mut b).unwrap();
    assert_eq!(
        a.verbs_extended(),
        Some((!old, !old)),
        "on {dev}, old {old}"
    );
    let mw = pd.alloc_mw(MwType::Two).unwrap();
    let other = pd.alloc_mw(MwType::One).unwrap();
    // The window WRs a's QP was not made for.
    let e = a
        .post_send(&[SendWr::bind_mw(1, &mw, MwBind::new(&target, 0, 64, RW))])
        .unwrap_err();
    assert!(
        matches!(e, Error::MwRefused(MwRefusal::NotEnabled)),
        "{e:?}"
    );
    let e = a.post_send(&[SendWr::local_inv(2, mw.rkey())]).unwrap_err();
    assert!(
        matches!(e, Error::MwRefused(MwRefusal::NotEnabled)),
        "{e:?}"
    );
    let e = a
        .bind_mw(
            &other,
            MwBind::new(&target, 0, 64, RW),
            3,
            SendFlags::SIGNALED,
        )
        .unwrap_err();
    assert!(
        matches!(e, Error::MwRefused(MwRefusal::NotEnabled)),
        "{e:?}"
    );
    // b binds, a invalidates with its SEND.
    let c = post_wait(
        &mut b,
        SendWr::bind_mw(4, &mw, MwBind::new(&target, 0, 4096, RW)),
    );
    ok(c, WcOpcode::BIND_MW, "the type-2 bind");
    let r1 = mw.rkey();
    let inbox = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let rsge = [Sge::new(&inbox, 0, 64).unwrap()];
    b.post_recv(&[RecvWr::new(5, &rsge)]).unwrap();
    local.write(0, &[7; 4]).unwrap();
    let sge = [Sge::new(&local, 0, 4).unwrap()];
    ok(
        post_wait(&mut a, SendWr::send_with_inv(6, &sge, r1)),
        WcOpcode::SEND,
        "the SEND with invalidate",
    );
    let r = wait_one(&mut b);
    ok(r, WcOpcode::RECV, "its receive");
    assert_eq!(r.invalidated_rkey(), Some(r1), "{r:?}");
    // A WRITE through the invalidated window is refused.
    local.write(0, &[9; 8]).unwrap();
    let sge = [Sge::new(&local, 0, 8).unwrap()];
    let c = post_wait(
        &mut a,
        SendWr::rdma_write(
            7,
            &sge,
            RemoteAddr {
                addr: target.addr(),
                rkey: r1,
            },
        ),
    );
    assert_eq!(c.status, WcStatus::REM_ACCESS_ERR, "{c:?}");
    let mut got = [0u8; 8];
    target.read(0, &mut got).unwrap();
    assert_eq!(got, [0; 8]);
}

/// On UC (no READ, no NAK): a type-2 bind and a WRITE through it that
/// lands; a type-1 bind, a WRITE through it that lands, its zero-length
/// bind, and a WRITE through the old rkey that the responder drops (UC
/// completes it at the requester): a WRITE with immediate through the MR's
/// own rkey behind it, on the same QP, shows the responder got that far
/// with the memory unchanged. (rxe has no `LOCAL_INV` on UC: neither its
/// provider's builder nor its kernel, `rxe_opcode.c`, where it completes
/// `LOC_QP_OP_ERR`; so its UC QP is made with the extended verbs without
/// the window send ops, and the window WRs take `ibv_post_send`.)
#[test]
fn uc_binds_land_writes_and_a_type1_unbind_drops_the_next() {
    let Some(dev) = device("uc_binds_land_writes_and_a_type1_unbind_drops_the_next") else {
        return;
    };
    let old = std::env::var("RDMA_DIRECT_VERBS_OLD_POST").is_ok_and(|v| v == "1");
    let ctx = Context::open(&dev).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let target = pd
        .alloc_mr(
            4096,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::MW_BIND,
        )
        .unwrap();
    let local = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let cfg = QpConfig {
        qp_type: QpType::Uc,
        memory_windows: true,
        ..QpConfig::default()
    };
    let (mut a, mut b) = pd.create_connected_pair(&cfg).unwrap();
    assert_eq!(
        a.verbs_extended(),
        Some((!old, !old)),
        "on {dev}, old {old}"
    );
    let inbox = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let rsge = [Sge::new(&inbox, 0, 64).unwrap()];
    // write(a, wr_id, fill, addr, rkey, imm): a WRITE of 16 bytes of
    // `fill` from a; with `imm`, with an immediate (its wr_id) that a
    // receive of b's completes.
    let write = |a: &mut Qp, wr_id: u64, fill: u8, addr: u64, rkey: Rkey, imm: bool| {
        local.write(0, &[fill; 16]).unwrap();
        let sge = [Sge::new(&local, 0, 16).unwrap()];
        let w = SendWr::rdma_write(wr_id, &sge, RemoteAddr { addr, rkey });
        let c = post_wait(a, if imm { w.imm(wr_id as u32) } else { w });
        ok(
            c,
            WcOpcode::RDMA_WRITE,
            "a UC WRITE (completed at the requester)",
        );
    };
    let bytes = |at: usize| {
        let mut got = [0u8; 16];
        target.read(at, &mut got).unwrap();
        got
    };
    // Type 2, bound on b.
    let mw2 = pd.alloc_mw(MwType::Two).unwrap();
    let c = post_wait(
        &mut b,
        SendWr::bind_mw(
            1,
            &mw2,
            MwBind::new(&target, 256, 256, Access::REMOTE_WRITE),
        ),
    );
    ok(c, WcOpcode::BIND_MW, "the type-2 bind on UC");
    b.post_recv(&[RecvWr::new(20, &rsge)]).unwrap();
    write(&mut a, 2, 0x71, target.addr() + 300, mw2.rkey(), true);
    ok(
        wait_one(&mut b),
        WcOpcode::RECV_RDMA_WITH_IMM,
        "the WRITE's immediate",
    );
    assert_eq!(bytes(300), [0x71; 16]);
    // Type 1, bound and unbound on a.
    let mw1 = pd.alloc_mw(MwType::One).unwrap();
    let r1 = a
        .bind_mw(
            &mw1,
            MwBind::new(&target, 2048, 512, Access::REMOTE_WRITE),
            3,
            SendFlags::SIGNALED,
        )
        .unwrap();
    ok(wait_one(&mut a), WcOpcode::BIND_MW, "the type-1 bind on UC");
    b.post_recv(&[RecvWr::new(21, &rsge)]).unwrap();
    write(&mut a, 4, 0x72, target.addr() + 2048, r1, true);
    ok(
        wait_one(&mut b),
        WcOpcode::RECV_RDMA_WITH_IMM,
        "the WRITE's immediate",
    );
    assert_eq!(bytes(2048), [0x72; 16]);
    a.unbind_mw(&mw1, 5, SendFlags::SIGNALED).unwrap();
    ok(
        wait_one(&mut a),
        WcOpcode::BIND_MW,
        "the zero-length bind on UC",
    );
    // Through the old rkey: dropped. Then through the MR's rkey, with an
    // immediate: b's receive says the responder is past the first.
    write(&mut a, 6, 0x73, target.addr() + 2048, r1, false);
    b.post_recv(&[RecvWr::new(22, &rsge)]).unwrap();
    write(&mut a, 7, 0x74, target.addr() + 1024, target.rkey(), true);
    let r = wait_one(&mut b);
    ok(
        r,
        WcOpcode::RECV_RDMA_WITH_IMM,
        "the fence WRITE's immediate",
    );
    assert_eq!((r.wr_id, r.imm), (22, Some(7)), "{r:?}");
    assert_eq!(
        bytes(2048),
        [0x72; 16],
        "the WRITE through the unbound window landed"
    );
    assert_eq!(bytes(1024), [0x74; 16]);
}

/// One bind of a window outstanding at a time, and rollback, on the
/// verbs path: a type-2 bind flushed on a QP in ERR and one the device
/// refuses (the window bound, not free: rxe's `rxe_check_bind_mw`) each
/// leave `Mw::rkey` as it was before them, with no bind outstanding, and
/// the window binds again on a healthy QP; a type-1 bind posted unsignaled
/// refuses a second bind (`BindOutstanding`) until a later signaled WR's
/// completion retires it.
#[test]
fn failed_binds_roll_back_and_one_bind_is_outstanding_at_a_time() {
    let Some(dev) = device("failed_binds_roll_back_and_one_bind_is_outstanding_at_a_time") else {
        return;
    };
    let mut s = setup(&dev);
    let cfg = QpConfig {
        memory_windows: true,
        ..QpConfig::default()
    };
    let (a2, mut b2) = s.pd.create_connected_pair(&cfg).unwrap();
    let mw = s.pd.alloc_mw(MwType::Two).unwrap();
    let r0 = mw.rkey();
    // Flushed: `b` in ERR.
    s.b.modify(QpState::Err, &QpAttr::default()).unwrap();
    s.b.post_send(&[
        SendWr::bind_mw(1, &mw, MwBind::new(&s.target, 0, 64, RW)).with_flags(SendFlags::SIGNALED)
    ])
    .unwrap();
    assert!(mw.bind_outstanding());
    let c = wait_one(&mut s.b);
    assert_eq!(c.status, WcStatus::WR_FLUSH_ERR, "{c:?}");
    assert_eq!(mw.rkey(), r0, "a flushed bind moved the rkey");
    assert!(!mw.bind_outstanding());
    // Binds again on a healthy QP, with the next variant.
    let c = post_wait(
        &mut b2,
        SendWr::bind_mw(2, &mw, MwBind::new(&s.target, 0, 64, RW)),
    );
    ok(c, WcOpcode::BIND_MW, "the bind after a flushed one");
    let r1 = mw.rkey();
    assert_eq!(r1.0 & 0xff, (r0.0 + 1) & 0xff);
    // Refused by the device: the window is bound (type 2: not free).
    b2.post_send(&[
        SendWr::bind_mw(3, &mw, MwBind::new(&s.target, 64, 64, RW)).with_flags(SendFlags::SIGNALED)
    ])
    .unwrap();
    let c = wait_one(&mut b2);
    println!("a bind of a bound type-2 window: {:?}", c.status);
    assert_ne!(c.status, WcStatus::SUCCESS, "{c:?}");
    assert_eq!(mw.rkey(), r1, "a refused bind moved the rkey");
    assert!(!mw.bind_outstanding());
    // (Before the QPs: rxe holds the QP of a bound type-2 window.)
    drop(mw);
    // (`b2` is in ERR after the refusal: a fresh pair.)
    drop((a2, b2));
    let (mut a2, _b2) = s.pd.create_connected_pair(&cfg).unwrap();
    // Type 1, unsignaled, then a second bind before it retires.
    let mw1 = s.pd.alloc_mw(MwType::One).unwrap();
    let k = a2
        .bind_mw(
            &mw1,
            MwBind::new(&s.target, 0, 64, RW),
            4,
            SendFlags::empty(),
        )
        .unwrap();
    let e = a2
        .bind_mw(
            &mw1,
            MwBind::new(&s.target, 0, 64, RW),
            5,
            SendFlags::SIGNALED,
        )
        .unwrap_err();
    assert!(
        matches!(e, Error::MwRefused(MwRefusal::BindOutstanding { rkey }) if rkey == k.0),
        "{e:?}"
    );
    let sge = [Sge::new(&s.local, 0, 8).unwrap()];
    let to = RemoteAddr {
        addr: s.target.addr(),
        rkey: s.target.rkey(),
    };
    a2.post_send(&[SendWr::rdma_write(6, &sge, to).with_flags(SendFlags::SIGNALED)])
        .unwrap();
    ok(
        wait_one(&mut a2),
        WcOpcode::RDMA_WRITE,
        "the WRITE after the bind",
    );
    assert!(!mw1.bind_outstanding());
    assert_eq!(mw1.rkey(), k);
    // The window serves `b2` through the rkey the bind gave.
    let through = RemoteAddr {
        addr: s.target.addr(),
        rkey: k,
    };
    a2.post_send(&[SendWr::rdma_write(7, &sge, through).with_flags(SendFlags::SIGNALED)])
        .unwrap();
    ok(
        wait_one(&mut a2),
        WcOpcode::RDMA_WRITE,
        "a WRITE through the window",
    );
}
