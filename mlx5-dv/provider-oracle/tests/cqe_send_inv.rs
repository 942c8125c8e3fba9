//! CQE opcodes the sim never writes, so `cqes.rs`'s generator never
//! makes them, read by our direct path and by libmlx5's
//! `mlx5_poll_cq_v1` from identical rings. RESP_SEND_INV (a peer's
//! SEND_WITH_INV, which ConnectX and now the sim write) was read as a
//! requester opcode before (docs/prm.md: "found by the oracle"); nothing
//! in the oracle's own tests fed it one, so reverting that fix passed
//! them all. The invalidated rkey: mlx5-dv's `CqeRef::invalidated_rkey`
//! against libmlx5's `invalidated_rkey`.
// Needs the oracle linked: without it `oracle_linked.rs` says SKIPPED.
#![cfg(provider_oracle)]

use mlx5_dv::driver::{CompletionQueue, ReceiveQueue, SendQueue};
use mlx5_dv::dv::{mlx5dv_bf, mlx5dv_cq, mlx5dv_qp, mlx5dv_wq};
use mlx5_dv::wqe::DataSeg;
use mlx5_provider_oracle::ffi::*;
use mlx5_provider_oracle::mem::Mem;
use mlx5_provider_oracle::oracle_or_skip;
use mlx5_provider_oracle::send::BF_SIZE;
use mlx5_provider_oracle::wr::ibv;
use rdma_direct::{WcOpcode, WcStatus};

const QPN: u32 = 0x12_3456;
const UIDX: u32 = 0x55;
const IBV_WC_WITH_INV: u32 = 1 << 3;

/// One responder CQE of opcode `op` (CQE version 1) for RQ WQE 0 of QP
/// `QPN`: byte count 100, `imm_inval_pkey` 0xa1b2c3d4, owner bit 0.
fn cqe(op: u8) -> [u8; 64] {
    let mut b = [0u8; 64];
    b[36..40].copy_from_slice(&0xa1b2_c3d4u32.to_be_bytes());
    b[44..48].copy_from_slice(&100u32.to_be_bytes());
    b[32..36].copy_from_slice(&UIDX.to_be_bytes());
    b[56..60].copy_from_slice(&QPN.to_be_bytes());
    b[60..62].copy_from_slice(&0u16.to_be_bytes());
    b[63] = op << 4;
    b
}

#[test]
fn a_send_with_invalidate_receive_reads_as_libmlx5_reads_it() {
    if !oracle_or_skip("a_send_with_invalidate_receive_reads_as_libmlx5_reads_it") {
        return;
    }
    let cqe_bytes = cqe(mlx5_dv::prm::CqeOpcode::RESP_SEND_INV.0);
    // Both CQ rings: slot 0 the CQE, the rest hardware-owned.
    let rings = [0, 1].map(|_| {
        let mut m = Mem::zeroed(4 * 64);
        for slot in m.bytes_mut().chunks_mut(64) {
            slot[63] = 0xf1;
        }
        m.bytes_mut()[..64].copy_from_slice(&cqe_bytes);
        m
    });
    let dbrecs = [0, 1].map(|_| Mem::zeroed(64));
    // Our QP: an SQ of one WQEBB (nothing posted) and an RQ of 4 x 32 bytes.
    let (sq_ring, rq_ring, qp_db, bf) = (
        Mem::zeroed(64),
        Mem::zeroed(4 * 32),
        Mem::zeroed(64),
        Mem::zeroed(2 * BF_SIZE as usize),
    );
    let desc = mlx5dv_qp {
        dbrec: qp_db.ptr().cast(),
        sq: mlx5dv_wq {
            buf: sq_ring.ptr().cast(),
            wqe_cnt: 1,
            stride: 64,
        },
        rq: mlx5dv_wq {
            buf: rq_ring.ptr().cast(),
            wqe_cnt: 4,
            stride: 32,
        },
        bf: mlx5dv_bf {
            reg: bf.ptr().cast(),
            size: BF_SIZE,
        },
        ..mlx5dv_qp::zeroed()
    };
    // SAFETY: every ring and record is this test's, alive until its end,
    // after the queues that point into them are dropped.
    let (mut sq, mut rq, mut cq) = unsafe {
        (
            SendQueue::new(&desc, QPN, 0, 1).unwrap(),
            ReceiveQueue::new(&desc).unwrap(),
            CompletionQueue::new(&mlx5dv_cq {
                buf: rings[0].ptr().cast(),
                dbrec: dbrecs[0].ptr().cast(),
                cqe_cnt: 4,
                cqe_size: 64,
                cq_uar: core::ptr::null_mut(),
                cqn: 1,
                comp_mask: 0,
            })
            .unwrap(),
        )
    };
    let sge = DataSeg {
        addr: 0x1000,
        len: 4096,
        lkey: 0x77,
    };
    rq.post(&[sge], 42).unwrap();
    rq.ring_doorbell();
    // The provider's QP over its own copies.
    let (t_sq, t_rq, t_db, t_bf) = (
        Mem::zeroed(64),
        Mem::zeroed(4 * 32),
        Mem::zeroed(64),
        Mem::zeroed(2 * BF_SIZE as usize),
    );
    let qp_cfg = po_qp_cfg {
        sq_buf: t_sq.ptr().cast(),
        rq_buf: t_rq.ptr().cast(),
        dbrec: t_db.ptr().cast(),
        bf_reg: t_bf.ptr().cast(),
        sq_wqe_cnt: 1,
        sq_cur_post: 0,
        sq_max_post: 1,
        sq_max_gs: 1,
        max_inline: 0,
        rq_wqe_cnt: 4,
        rq_wqe_shift: 5,
        rq_max_gs: 2,
        rq_max_post: 4,
        rq_head: 0,
        qpn: QPN,
        qp_type: ibv::QPT_RC,
        sq_sig_all: 0,
        wq_sig: 0,
        atomics: 1,
        prefer_bf: 0,
        bf_size: BF_SIZE,
        bf_offset: 0,
        user_index: UIDX,
        pad: 0,
    };
    let cq_cfg = po_cq_cfg {
        buf: rings[1].ptr().cast(),
        dbrec: dbrecs[1].ptr().cast(),
        cqe_cnt: 4,
        cqe_sz: 64,
        cons_index: 0,
        cqn: 1,
    };
    let sges = [po_sge {
        addr: sge.addr,
        length: sge.len,
        lkey: sge.lkey,
    }];
    let recv = po_recv_wr {
        wr_id: 42,
        sg_list: sges.as_ptr(),
        num_sge: 1,
        pad: 0,
    };
    let mut theirs = [po_wc::default(); 1];
    // SAFETY: every buffer named is this test's and outlives the
    // provider's objects, freed before the end of the block.
    let n = unsafe {
        let ctx = po_ctx_new();
        let pcq = po_cq_new(ctx, &cq_cfg);
        let pqp = po_qp_new(ctx, &qp_cfg, pcq, pcq, core::ptr::null_mut());
        assert!(!ctx.is_null() && !pcq.is_null() && !pqp.is_null());
        let mut bad = 0;
        assert_eq!(po_post_recv(pqp, &recv, 1, &mut bad), 0);
        let n = po_poll_cq(pcq, 1, theirs.as_mut_ptr());
        po_qp_free(pqp);
        po_cq_free(pcq);
        po_ctx_free(ctx);
        n
    };
    assert_eq!(n, 1, "libmlx5 polled the CQE");
    let t = theirs[0];
    let (ours, rkey) = {
        let mut cur = cq.cursor::<64>();
        let c = cur.next().expect("our CQ has the CQE");
        let rkey = c.invalidated_rkey();
        let wc =
            rdma_direct::testing::direct_completion_of(&mut sq.retirer(), &mut rq, c, QPN, true)
                .expect("no error")
                .expect("a completion");
        (wc, rkey)
    };
    assert_eq!(t.status, 0);
    assert_eq!(
        (t.opcode, t.wc_flags & IBV_WC_WITH_INV),
        (128, IBV_WC_WITH_INV),
        "{t:?}"
    );
    assert_eq!(ours.status, WcStatus::SUCCESS);
    assert_eq!(ours.opcode, WcOpcode::RECV, "{ours:?} (libmlx5: {t:?})");
    assert_eq!(ours.opcode.0, t.opcode);
    assert_eq!(
        (ours.wr_id, ours.byte_len, ours.qp_num),
        (t.wr_id, t.byte_len, t.qp_num)
    );
    // `po_wc.imm` is `be32toh(imm_data)`, whose union holds the
    // host-order `invalidated_rkey`.
    assert_eq!(
        t.imm.swap_bytes(),
        0xa1b2_c3d4,
        "libmlx5's invalidated_rkey"
    );
    assert_eq!(
        rkey,
        Some(0xa1b2_c3d4),
        "mlx5-dv's CqeRef::invalidated_rkey"
    );
    // docs/prm.md: rdma-direct's `Completion` has no invalidated rkey
    // yet: no immediate either.
    assert_eq!(ours.imm, None);
}
