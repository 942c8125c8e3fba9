//! Memory windows in the SQ ring, on the sim's direct path: a bind's UMR
//! WQE takes 3 WQEBBs and a zero-length one (an unbind, `LOCAL_INV`) 2;
//! the WQE after a UMR carries `INITIATOR_SMALL_FENCE` (libmlx5's
//! `fm_cache`) whichever post writes it: `post_send` of one WR or of a
//! batch, inline or not, `post_write`, `post_writes`, `post_write_inline`,
//! and a WR in the same batch as the UMR; one that asks for `FENCE` keeps
//! it; the WQE after the fenced one has none.

use rdma_direct::*;

#[path = "support/mw.rs"]
mod support;
use support::*;

/// `MLX5_WQE_CTRL_FENCE` in `fm_ce_se` (bits 7:5 = 4).
const FENCE: u8 = 4 << 5;
/// The fence mode bits of `fm_ce_se`.
const FENCE_MODE: u8 = 7 << 5;

/// One in-place post: `(q, src, mr)`.
type Post = fn(&mut Qp, &Mr, &Mr);

/// The in-place posts that might write the WQE after a UMR, each writing
/// `n` 8-byte WRITEs (or 1) from `src` into `mr`'s first bytes through its
/// own rkey, the first signaled.
fn posts() -> Vec<(&'static str, u32, Post)> {
    fn remote(mr: &Mr) -> RemoteAddr {
        RemoteAddr {
            addr: mr.addr(),
            rkey: mr.rkey(),
        }
    }
    vec![
        ("post_send, one 1-SGE WRITE", 1, |q, src, mr| {
            let s = [Sge::new(src, 0, 8).unwrap()];
            q.post_send(&[SendWr::rdma_write(20, &s, remote(mr)).signaled()])
                .unwrap();
        }),
        ("post_send, one inline WRITE", 1, |q, _src, mr| {
            let d = [7u8; 8];
            let s = [Sge::bytes(&d).unwrap()];
            q.post_send(&[SendWr::rdma_write(20, &s, remote(mr)).signaled().inline()])
                .unwrap();
        }),
        ("post_send, two WRITEs", 2, |q, src, mr| {
            let s = [Sge::new(src, 0, 8).unwrap()];
            q.post_send(&[
                SendWr::rdma_write(20, &s, remote(mr)).signaled(),
                SendWr::rdma_write(21, &s, remote(mr)).signaled(),
            ])
            .unwrap();
        }),
        ("post_write", 1, |q, src, mr| {
            q.post_write(&WriteWr::new(20, Sge::new(src, 0, 8).unwrap(), remote(mr)).signaled())
                .unwrap();
        }),
        ("post_writes", 2, |q, src, mr| {
            let w = WriteWr::new(20, Sge::new(src, 0, 8).unwrap(), remote(mr)).signaled();
            q.post_writes(&[w, WriteWr { wr_id: 21, ..w }]).unwrap();
        }),
        ("post_write_inline", 1, |q, _src, mr| {
            q.post_write_inline(20, &[9u8; 8], remote(mr), SendFlags::SIGNALED)
                .unwrap();
        }),
    ]
}

/// After a type-1 bind, a type-1 unbind, a type-2 bind and a `LOCAL_INV`
/// (each a UMR of 3 or 2 WQEBBs, opcode 0x25), every in-place post's first
/// WQE carries SMALL_FENCE, and its second (or the next post's) none; all
/// complete.
#[test]
fn the_wqe_after_a_umr_carries_the_small_fence_whichever_post_writes_it() {
    let e = mw_env();
    let mw1 = e.pd.alloc_mw(MwType::One).unwrap();
    let mw2 = e.pd.alloc_mw(MwType::Two).unwrap();
    for (what, n, post) in posts() {
        for umr in ["type-1 bind", "type-1 unbind", "type-2 bind", "LOCAL_INV"] {
            let (_a, mut b) = pair(&e.pd);
            // (A type-2 window is freed for its next bind; a fresh QP binds it.)
            if umr == "LOCAL_INV" {
                b.post_send(&[SendWr::bind_mw(1, &mw2, window(&e.mr, RW)).signaled()])
                    .unwrap();
                assert_eq!(next(&mut b).status, WcStatus::SUCCESS);
                let s = [Sge::new(&e.src, 0, 8).unwrap()];
                let r = RemoteAddr {
                    addr: e.mr.addr(),
                    rkey: e.mr.rkey(),
                };
                // (Spends the bind's fence.)
                b.post_send(&[SendWr::rdma_write(2, &s, r).signaled()])
                    .unwrap();
                next(&mut b);
            }
            let pi = pi_of(&b);
            let (wqebbs, opcode) = match umr {
                "type-1 bind" => {
                    b.bind_mw(&mw1, window(&e.mr, RW), 10, SendFlags::SIGNALED)
                        .unwrap();
                    (3, WcOpcode::BIND_MW)
                }
                "type-1 unbind" => {
                    b.unbind_mw(&mw1, 10, SendFlags::SIGNALED).unwrap();
                    (2, WcOpcode::BIND_MW)
                }
                "type-2 bind" => {
                    b.post_send(&[SendWr::bind_mw(10, &mw2, window(&e.mr, RW)).signaled()])
                        .unwrap();
                    (3, WcOpcode::BIND_MW)
                }
                _ => {
                    b.post_send(&[SendWr::local_inv(10, mw2.rkey()).signaled()])
                        .unwrap();
                    (2, WcOpcode::LOCAL_INV)
                }
            };
            let at = format!("{what} after a {umr}");
            assert_eq!(pi_of(&b), pi + wqebbs, "{at}: WQEBBs");
            assert_eq!(opcode_at(&b, pi), UMR, "{at}");
            let c = next(&mut b);
            assert_eq!(
                (c.wr_id, c.status, c.opcode),
                (10, WcStatus::SUCCESS, opcode),
                "{at}"
            );
            let after = pi_of(&b);
            post(&mut b, &e.src, &e.mr);
            assert_eq!(
                fm_ce_se(&b, after) & FENCE_MODE,
                SMALL_FENCE,
                "{at}: first WQE"
            );
            if n == 2 {
                assert_eq!(fm_ce_se(&b, after + 1) & FENCE_MODE, 0, "{at}: second WQE");
            }
            let got = poll_n(&mut b, n as usize);
            assert!(
                got.iter().all(|c| c.status == WcStatus::SUCCESS),
                "{at}: {got:?}"
            );
            // The next post: no fence.
            let next_pi = pi_of(&b);
            post(&mut b, &e.src, &e.mr);
            assert_eq!(fm_ce_se(&b, next_pi) & FENCE_MODE, 0, "{at}: the next post");
            poll_n(&mut b, n as usize);
            // The type-2 window is bound on this QP (or freed): the next
            // case's QP binds it afresh once it is free.
            if umr == "type-2 bind" {
                b.post_send(&[SendWr::local_inv(11, mw2.rkey()).signaled()])
                    .unwrap();
                assert_eq!(next(&mut b).opcode, WcOpcode::LOCAL_INV, "{at}");
            }
        }
    }
}

/// In one batch: a UMR then a WRITE, the WRITE fenced; a WRITE then a
/// UMR then a WRITE then a WRITE, only the one right after the UMR.
#[test]
fn the_wr_after_a_umr_in_the_same_batch_carries_the_small_fence() {
    let e = mw_env();
    let mw = e.pd.alloc_mw(MwType::Two).unwrap();
    let (_a, mut b) = pair(&e.pd);
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let r = RemoteAddr {
        addr: e.mr.addr(),
        rkey: e.mr.rkey(),
    };
    let pi = pi_of(&b);
    b.post_send(&[
        SendWr::rdma_write(1, &s, r),
        SendWr::bind_mw(2, &mw, window(&e.mr, RW)),
        SendWr::rdma_write(3, &s, r),
        SendWr::rdma_write(4, &s, r).signaled(),
    ])
    .unwrap();
    assert_eq!(pi_of(&b), pi + 1 + 3 + 1 + 1);
    assert_eq!(fm_ce_se(&b, pi) & FENCE_MODE, 0);
    assert_eq!(opcode_at(&b, pi + 1), UMR);
    assert_eq!(fm_ce_se(&b, pi + 4) & FENCE_MODE, SMALL_FENCE);
    assert_eq!(fm_ce_se(&b, pi + 5) & FENCE_MODE, 0);
    assert_eq!(next(&mut b).wr_id, 4);
    let pi = pi_of(&b);
    b.post_send(&[
        SendWr::local_inv(5, mw.rkey()),
        SendWr::rdma_write(6, &s, r).signaled(),
    ])
    .unwrap();
    assert_eq!(opcode_at(&b, pi), UMR);
    assert_eq!(fm_ce_se(&b, pi + 2) & FENCE_MODE, SMALL_FENCE);
    assert_eq!(next(&mut b).wr_id, 6);
}

/// A WR after a UMR that asks for `FENCE` keeps it (it orders more), and
/// the small fence is spent.
#[test]
fn a_fence_asked_after_a_umr_is_kept() {
    let e = mw_env();
    let mw = e.pd.alloc_mw(MwType::One).unwrap();
    let (_a, mut b) = pair(&e.pd);
    b.bind_mw(&mw, window(&e.mr, RW), 1, SendFlags::empty())
        .unwrap();
    let pi = pi_of(&b);
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let r = RemoteAddr {
        addr: e.mr.addr(),
        rkey: e.mr.rkey(),
    };
    b.post_send(&[SendWr::rdma_write(2, &s, r).signaled().fence()])
        .unwrap();
    assert_eq!(fm_ce_se(&b, pi) & FENCE_MODE, FENCE);
    assert_eq!(next(&mut b).wr_id, 2);
    let pi = pi_of(&b);
    b.post_send(&[SendWr::rdma_write(3, &s, r).signaled()])
        .unwrap();
    assert_eq!(fm_ce_se(&b, pi) & FENCE_MODE, 0);
    assert_eq!(next(&mut b).wr_id, 3);
}

/// An unsignaled bind completes nothing, and the WRITE after it (fenced)
/// completes: its CQE retires the UMR too.
#[test]
fn an_unsignaled_bind_is_retired_by_the_next_signaled_wr() {
    let e = mw_env();
    let mw = e.pd.alloc_mw(MwType::One).unwrap();
    let (mut a, mut b) = pair(&e.pd);
    let rkey = b
        .bind_mw(&mw, window(&e.mr, RW), 1, SendFlags::empty())
        .unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let r = RemoteAddr {
        addr: e.mr.addr(),
        rkey: e.mr.rkey(),
    };
    b.post_send(&[SendWr::rdma_write(2, &s, r).signaled()])
        .unwrap();
    let got = poll_n(&mut b, 1);
    assert_eq!(got[0].wr_id, 2);
    let mut wc = [Completion::default(); 4];
    assert_eq!(b.poll(&mut wc).unwrap(), 0);
    let addr = e.mr.addr() + OFF as u64;
    assert_eq!(
        write_through(&mut a, &e.src, 0x12, addr, rkey),
        WcStatus::SUCCESS
    );
}

/// A QP on a shared CQ (its posts take CQ credits: the counted in-place
/// mode): the WQE after a UMR is fenced there too, and the shared CQ's
/// poll tells a `LOCAL_INV`'s completion from a bind's.
#[test]
fn on_a_shared_cq_the_fence_and_the_umr_completions_hold() {
    let e = mw_env();
    let mw = e.pd.alloc_mw(MwType::Two).unwrap();
    let mut cq = e.pd.create_shared_cq(16).unwrap();
    let x = cq.create_qp(&mw_cfg()).unwrap();
    let mut peer = e.pd.create_qp(&mw_cfg()).unwrap();
    Qp::connect_loopback(cq.qp_mut(x), &mut peer).unwrap();
    let r = RemoteAddr {
        addr: e.mr.addr(),
        rkey: e.mr.rkey(),
    };
    let w = WriteWr::new(2, Sge::new(&e.src, 0, 8).unwrap(), r).signaled();
    let b = cq.qp_mut(x);
    let pi = pi_of(b);
    b.post_send(&[SendWr::bind_mw(1, &mw, window(&e.mr, RW)).signaled()])
        .unwrap();
    b.post_write(&w).unwrap();
    assert_eq!(opcode_at(b, pi), UMR);
    assert_eq!(fm_ce_se(b, pi + 3) & FENCE_MODE, SMALL_FENCE);
    let rkey = mw.rkey();
    b.post_send(&[SendWr::local_inv(3, rkey).signaled()])
        .unwrap();
    b.post_send(&[w.to_send_wr()]).unwrap();
    assert_eq!(fm_ce_se(b, pi + 6) & FENCE_MODE, SMALL_FENCE);
    b.post_write(&WriteWr { wr_id: 4, ..w }).unwrap();
    assert_eq!(fm_ce_se(b, pi + 7) & FENCE_MODE, 0);
    let got = poll_n_with(|wc| cq.poll(wc), 5);
    assert_eq!(
        got.iter()
            .map(|c| (c.wr_id, c.status, c.opcode))
            .collect::<Vec<_>>(),
        [
            (1, WcStatus::SUCCESS, WcOpcode::BIND_MW),
            (2, WcStatus::SUCCESS, WcOpcode::RDMA_WRITE),
            (3, WcStatus::SUCCESS, WcOpcode::LOCAL_INV),
            (2, WcStatus::SUCCESS, WcOpcode::RDMA_WRITE),
            (4, WcStatus::SUCCESS, WcOpcode::RDMA_WRITE),
        ]
    );
}

/// A `LOCAL_INV` in a poll of many CQEs of the QP's own CQ, between
/// WRITEs and binds, unsignaled ones among them: each completion's
/// opcode as its WR's; once it is retired, the polls take their fast
/// paths again (the completions after it are the same either way).
#[test]
fn a_poll_of_many_tells_each_umr_completion() {
    let e = mw_env();
    let mw = e.pd.alloc_mw(MwType::Two).unwrap();
    let (_a, mut b) = pair(&e.pd);
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let r = RemoteAddr {
        addr: e.mr.addr(),
        rkey: e.mr.rkey(),
    };
    for round in 0..4u64 {
        let k = round * 10;
        b.post_send(&[
            SendWr::rdma_write(k + 1, &s, r).signaled(),
            SendWr::bind_mw(k + 2, &mw, window(&e.mr, RW)).signaled(),
            SendWr::rdma_write(k + 3, &s, r),
        ])
        .unwrap();
        let rkey = mw.rkey();
        b.post_send(&[
            SendWr::local_inv(k + 4, rkey).signaled(),
            SendWr::rdma_write(k + 5, &s, r).signaled(),
        ])
        .unwrap();
        let got = poll_n(&mut b, 4);
        assert_eq!(
            got.iter().map(|c| (c.wr_id, c.opcode)).collect::<Vec<_>>(),
            [
                (k + 1, WcOpcode::RDMA_WRITE),
                (k + 2, WcOpcode::BIND_MW),
                (k + 4, WcOpcode::LOCAL_INV),
                (k + 5, WcOpcode::RDMA_WRITE),
            ],
            "round {round}"
        );
        // The fast path again: a WRITE and its completion.
        b.post_send(&[SendWr::rdma_write(k + 6, &s, r).signaled()])
            .unwrap();
        assert_eq!(next(&mut b).opcode, WcOpcode::RDMA_WRITE);
    }
}

/// A split QP's send half posts a type-2 bind and a `LOCAL_INV`: the
/// owner's poll reports BIND_MW and LOCAL_INV (the per-WQE record of UMR
/// opcodes is shared with the halves) and settles the bind (no longer
/// outstanding), and the window works in between.
#[test]
fn a_send_half_binds_and_invalidates_and_the_owner_tells_them() {
    let e = mw_env();
    let mw = e.pd.alloc_mw(MwType::Two).unwrap();
    let (mut a, mut b) = pair(&e.pd);
    let r = RemoteAddr {
        addr: e.mr.addr(),
        rkey: e.mr.rkey(),
    };
    let w = WriteWr::new(2, Sge::new(&e.src, 0, 8).unwrap(), r).signaled();
    let (mut tx, _rx) = b.split().unwrap();
    tx.post_send(&[SendWr::bind_mw(1, &mw, window(&e.mr, RW)).signaled()])
        .unwrap();
    tx.post_write(&w).unwrap();
    let got = poll_n(&mut b, 2);
    assert_eq!(
        got.iter().map(|c| (c.wr_id, c.opcode)).collect::<Vec<_>>(),
        [(1, WcOpcode::BIND_MW), (2, WcOpcode::RDMA_WRITE)]
    );
    // The half's bind, retired by the owner's poll, is settled there.
    assert!(!mw.bind_outstanding());
    let rkey = mw.rkey();
    let addr = e.mr.addr() + OFF as u64;
    assert_eq!(
        write_through(&mut a, &e.src, 0x5d, addr, rkey),
        WcStatus::SUCCESS
    );
    tx.post_send(&[SendWr::local_inv(3, rkey).signaled()])
        .unwrap();
    tx.post_write(&WriteWr { wr_id: 4, ..w }).unwrap();
    let got = poll_n(&mut b, 2);
    assert_eq!(
        got.iter()
            .map(|c| (c.wr_id, c.status, c.opcode))
            .collect::<Vec<_>>(),
        [
            (3, WcStatus::SUCCESS, WcOpcode::LOCAL_INV),
            (4, WcStatus::SUCCESS, WcOpcode::RDMA_WRITE)
        ]
    );
    assert_eq!(
        write_through(&mut a, &e.src, 0x5e, addr, rkey),
        WcStatus::REM_ACCESS_ERR
    );
    assert_eq!(bytes(&e.mr)[OFF], 0x5d);
}
