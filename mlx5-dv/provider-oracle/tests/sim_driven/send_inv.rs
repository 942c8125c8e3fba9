//! SEND with invalidate, libmlx5 on both sides of the sim: B's
//! `IBV_WR_BIND_MW` (libmlx5's UMR WQE) binds a type-2 window, A's
//! `IBV_WR_SEND_WITH_INV` of its rkey frees it, and `mlx5_poll_cq_v1`
//! reads B's RESP_SEND_INV CQE as `IBV_WC_RECV` with `IBV_WC_WITH_INV`
//! and the rkey (`agree` checks mlx5-dv's `Cqe::invalidated_rkey` says
//! the same); then the refusals.

use crate::common::*;
use mlx5_dv::prm::{CqeOpcode, Syndrome};
use mlx5_dv::wqe::MwType;
use mlx5_provider_oracle::mw::{ibv_mw, Bind};

/// A type-2 window over all of `win`, bound by B through libmlx5
/// (unsignaled: the sim's state says it took), with rkey `mw | key`.
fn bind_on_b(p: &mut Pair, win: &Region, key: u8) -> (u32, u32) {
    let mw = p.rig.alloc_mw(MwType::Two);
    let rkey = mw | key as u32;
    let bind = Bind {
        wr_id: 70,
        mw_type: MwType::Two,
        mw_rkey: mw,
        new_rkey: rkey,
        lkey: win.lkey,
        addr: win.at(0),
        len: win.len as u64,
        access: ibv_mw::ACCESS_REMOTE_WRITE | ibv_mw::ACCESS_REMOTE_READ,
        signaled: false,
        fence: false,
    };
    p.rig.post_bind(p.b, &bind).expect("the bind");
    assert_eq!(p.rig.run(), 1, "the sim ran libmlx5's UMR WQE");
    assert_eq!(p.rig.dev.mw_state(mw), Some((rkey, true)), "bound");
    (mw, rkey)
}

pub fn send_with_invalidate() -> Rig {
    let mut p = pair(false);
    let (a, b) = (p.a, p.b);
    let (qa, qb) = (p.rig.qpn(a), p.rig.qpn(b));
    let win = p.rig.mr(4096, ALL | Access::MW_BIND);
    let (mw, rkey) = bind_on_b(&mut p, &win, 0x2a);
    let r = p.b_recv;
    p.rig
        .post_recv(b, &[(80, vec![r.sge(0, 256)]), (81, vec![r.sge(256, 256)])])
        .expect("the receives");
    let send = wr(71, Op::SendInv { rkey }, vec![p.a_src.sge(0, 200)], true);
    p.rig.post_send(a, &[send]).expect("the SEND_WITH_INV");
    assert_eq!(p.rig.run(), 1);
    let c = p.rig.poll(p.acq, 4);
    assert_eq!(c.len(), 1);
    expect(&c[0], 71, wc::SUCCESS, Some(wc::SEND), qa);
    let c = p.rig.poll(p.bcq, 4);
    assert_eq!(c.len(), 1, "B's receive");
    expect(&c[0], 80, wc::SUCCESS, Some(wc::RECV), qb);
    assert_eq!(c[0].wc.wc_flags & wc::WITH_INV, wc::WITH_INV);
    assert_eq!(c[0].wc.imm.swap_bytes(), rkey, "libmlx5's invalidated_rkey");
    assert_eq!(c[0].ours.invalidated_rkey(), Some(rkey));
    assert_eq!(c[0].wc.byte_len, 200);
    let src = p.rig.read_mem(&p.a_src, 0, 200);
    assert_eq!(p.rig.read_mem(&p.b_recv, 0, 200), src);
    assert_eq!(p.rig.dev.mw_state(mw), Some((rkey, false)), "free");
    // A WRITE through the old rkey: refused, the memory unchanged, B's
    // other receive flushed.
    let write = Op::Write {
        raddr: win.at(0),
        rkey,
    };
    p.rig
        .post_send(a, &[wr(72, write, vec![p.a_src.sge(0, 64)], true)])
        .expect("the WRITE");
    p.rig.run();
    let c = p.rig.poll(p.acq, 4);
    assert_eq!(c.len(), 1);
    expect(&c[0], 72, wc::REM_ACCESS_ERR, None, qa);
    assert_eq!(p.rig.read_mem(&win, 0, 4096), vec![0u8; 4096]);
    let c = p.rig.poll(p.bcq, 4);
    assert_eq!(c.len(), 1);
    expect(&c[0], 81, wc::WR_FLUSH_ERR, None, qb);
    p.rig
}

/// A SEND_WITH_INV of a window B may not invalidate (a type-2 window
/// never bound): A's WR completes REM_INV_REQ_ERR, B's receive
/// REM_INV_REQ_ERR (the sim's choice, as rxe) and the next flushed,
/// nothing delivered.
pub fn send_with_invalidate_refused() -> Rig {
    let mut p = pair(false);
    let (a, b) = (p.a, p.b);
    let (qa, qb) = (p.rig.qpn(a), p.rig.qpn(b));
    let free = p.rig.alloc_mw(MwType::Two);
    let r = p.b_recv;
    p.rig
        .post_recv(b, &[(90, vec![r.sge(0, 256)]), (91, vec![r.sge(256, 256)])])
        .expect("the receives");
    let send = wr(
        73,
        Op::SendInv { rkey: free },
        vec![p.a_src.sge(0, 100)],
        true,
    );
    p.rig.post_send(a, &[send]).expect("the SEND_WITH_INV");
    p.rig.run();
    let c = p.rig.poll(p.acq, 4);
    assert_eq!(c.len(), 1);
    expect(&c[0], 73, wc::REM_INV_REQ_ERR, None, qa);
    assert_eq!(
        (c[0].ours.opcode, c[0].ours.syndrome),
        (CqeOpcode::REQ_ERR, Syndrome::REMOTE_INVAL_REQ_ERR)
    );
    let c = p.rig.poll(p.bcq, 4);
    assert_eq!(c.len(), 2);
    expect(&c[0], 90, wc::REM_INV_REQ_ERR, None, qb);
    expect(&c[1], 91, wc::WR_FLUSH_ERR, None, qb);
    assert_eq!(p.rig.read_mem(&p.b_recv, 0, 512), vec![0u8; 512]);
    assert_eq!(
        (p.rig.state(a), p.rig.state(b)),
        (QpState::Err, QpState::Err)
    );
    assert_eq!(p.rig.dev.mw_state(free), Some((free, false)));
    p.rig
}
