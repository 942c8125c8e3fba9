//! `SendQueue::post_umr`: the UMR WQE is the codec's, byte for byte; the
//! WQE after it carries the small fence (or its own `FENCE`), the one after
//! that nothing; the in-place posts' gates are closed until then; a refused
//! UMR writes and changes nothing.

use super::*;
use crate::dv::{mlx5dv_bf, mlx5dv_qp, mlx5dv_wq};
use crate::prm::{CtrlFlags, WqeOpcode, WQEBB};
use crate::wqe::{
    umr_wqe_bytes, DataSeg, MwAccess, MwType, Payload, RemoteSeg, SendWqe, UmrBind, UmrWqe,
    WqeError,
};

struct Mem {
    ring: Vec<u64>,
    dbrec: Box<[u32; 2]>,
    bf: Vec<u64>,
}

impl Mem {
    fn new(wqe_cnt: u32) -> Self {
        Mem {
            ring: vec![0; wqe_cnt as usize * WQEBB / 8],
            dbrec: Box::new([0; 2]),
            bf: vec![0; 2 * 256 / 8],
        }
    }
    fn sq(&mut self, wqe_cnt: u32, max_post: u32) -> SendQueue {
        let mut d = mlx5dv_qp::zeroed();
        d.dbrec = self.dbrec.as_mut_ptr();
        d.sq = mlx5dv_wq {
            buf: self.ring.as_mut_ptr().cast(),
            wqe_cnt,
            stride: 64,
        };
        d.bf = mlx5dv_bf {
            reg: self.bf.as_mut_ptr().cast(),
            size: 256,
        };
        // SAFETY: the description names this value's memory, which outlives
        // the queue in every test and which nothing else touches meanwhile.
        unsafe { SendQueue::new(&d, 0xabc, 64, max_post) }.expect("send queue")
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: the ring's u64s viewed as bytes, read only.
        unsafe { core::slice::from_raw_parts(self.ring.as_ptr().cast(), self.ring.len() * 8) }
    }
    /// Ctrl byte 11 (`fm_ce_se`) of the WQE at `pi`.
    fn fm_ce_se(&self, pi: u32, wqe_cnt: u32) -> u8 {
        self.bytes()[(pi & (wqe_cnt - 1)) as usize * WQEBB + 11]
    }
}

fn bind() -> UmrWqe {
    UmrWqe {
        flags: CtrlFlags::CQ_UPDATE,
        imm_rkey: 0x1234_5601,
        mw_type: MwType::Two,
        new_key: 0x02,
        bind: Some(UmrBind {
            lkey: 0x77,
            addr: 0x1000,
            len: 0x100,
            access: MwAccess {
                remote_read: true,
                ..MwAccess::default()
            },
        }),
    }
}

fn write(flags: CtrlFlags, sge: &[DataSeg; 1]) -> SendWqe<'_> {
    SendWqe {
        opcode: WqeOpcode::RDMA_WRITE,
        flags,
        imm: 0,
        remote: Some(RemoteSeg {
            addr: 0x2000,
            rkey: 0x1234_5602,
        }),
        atomic: None,
        payload: Payload::Sges(sge),
        datagram: None,
        masked: None,
    }
}

const SGE: [DataSeg; 1] = [DataSeg {
    addr: 0x3000,
    len: 8,
    lkey: 5,
}];

#[test]
fn the_wqe_after_a_umr_gets_the_small_fence_and_the_next_none() {
    let mut m = Mem::new(16);
    let mut sq = m.sq(16, 4);
    sq.post_umr(&bind(), 1).unwrap();
    assert_eq!(sq.pi(), 3, "a bind is 3 WQEBBs");
    assert_eq!(sq.pending_fence(), CtrlFlags::SMALL_FENCE);
    sq.post(&write(CtrlFlags::CQ_UPDATE, &SGE), 2).unwrap();
    sq.post(&write(CtrlFlags::CQ_UPDATE, &SGE), 3).unwrap();
    sq.ring_doorbell();
    let flat = umr_wqe_bytes(0xabc, 0, &bind(), 12);
    assert_eq!(m.bytes()[..3 * WQEBB], flat[..], "the codec's bytes");
    assert_eq!(m.fm_ce_se(3, 16), 0x08 | 0x20, "CQ_UPDATE | SMALL_FENCE");
    assert_eq!(m.fm_ce_se(4, 16), 0x08, "no fence left");
    assert_eq!(sq.pending_fence(), CtrlFlags::empty());
}

#[test]
fn a_wqe_that_asks_for_fence_keeps_fence_alone() {
    let mut m = Mem::new(16);
    let mut sq = m.sq(16, 4);
    sq.post_umr(&UmrWqe::local_inv(0x99, CtrlFlags::empty()), 1)
        .unwrap();
    assert_eq!(sq.pi(), 2, "LOCAL_INV is 2 WQEBBs");
    sq.post(&write(CtrlFlags::FENCE, &SGE), 2).unwrap();
    assert_eq!(
        m.fm_ce_se(2, 16) & 0xe0,
        0x80,
        "FENCE, not FENCE | SMALL_FENCE"
    );
    assert_eq!(sq.pending_fence(), CtrlFlags::empty());
}

#[test]
fn a_umr_after_a_umr_is_fenced_too() {
    let mut m = Mem::new(16);
    let mut sq = m.sq(16, 4);
    sq.post_umr(&bind(), 1).unwrap();
    sq.post_umr(&UmrWqe::local_inv(0x99, CtrlFlags::empty()), 2)
        .unwrap();
    assert_eq!(m.fm_ce_se(0, 16) & 0xe0, 0);
    assert_eq!(m.fm_ce_se(3, 16) & 0xe0, 0x20);
    assert_eq!(sq.pending_fence(), CtrlFlags::SMALL_FENCE);
}

#[test]
fn the_gates_close_after_a_umr_and_reopen_after_the_next_post() {
    let mut m = Mem::new(64);
    // 4 WRs of at most 16 WQEBBs fit 64: the room check is implied.
    let mut sq = m.sq(64, 4);
    sq.set_gate(true);
    sq.set_ud_gate(true);
    sq.set_dc_gate(true);
    let open = (sq.gate, sq.ud_gate, sq.dc_gate);
    assert!(open.0 > 0 && open.1 > 0 && open.2 > 0, "{open:?}");
    sq.post_umr(&bind(), 1).unwrap();
    assert_eq!((sq.gate, sq.ud_gate, sq.dc_gate), (0, 0, 0));
    let seg = crate::wqe::Seg::data(0x3000, 8, 5);
    assert!(sq
        .write_segs_gated(WqeOpcode::SEND, CtrlFlags::empty(), 0, [seg], 9)
        .is_none());
    sq.post(&write(CtrlFlags::empty(), &SGE), 2).unwrap();
    assert_eq!((sq.gate, sq.ud_gate, sq.dc_gate), open);
    // A closed gate stays closed.
    sq.set_gate(false);
    sq.post_umr(&bind(), 3).unwrap();
    sq.post(&write(CtrlFlags::empty(), &SGE), 4).unwrap();
    assert_eq!(sq.gate, 0);
}

#[test]
fn a_refused_umr_writes_and_changes_nothing() {
    let mut m = Mem::new(4);
    let mut sq = m.sq(4, 4);
    sq.post(&write(CtrlFlags::empty(), &SGE), 1).unwrap();
    sq.post(&write(CtrlFlags::empty(), &SGE), 2).unwrap();
    let before = (m.bytes().to_vec(), sq.pi(), sq.outstanding());
    let long = UmrWqe {
        bind: Some(UmrBind {
            len: 0,
            ..bind().bind.unwrap()
        }),
        ..bind()
    };
    assert_eq!(sq.post_umr(&long, 3), Err(WqeError::UmrLength { len: 0 }));
    assert_eq!(
        sq.post_umr(&bind(), 3),
        Err(WqeError::QueueFull { need: 3, free: 2 })
    );
    assert_eq!((m.bytes().to_vec(), sq.pi(), sq.outstanding()), before);
    assert_eq!(sq.pending_fence(), CtrlFlags::empty());
}

#[test]
fn reset_drops_the_pending_fence() {
    let mut m = Mem::new(16);
    let mut sq = m.sq(16, 4);
    sq.set_gate(true);
    let open = sq.gate;
    sq.post_umr(&bind(), 1).unwrap();
    sq.reset();
    assert_eq!(sq.pending_fence(), CtrlFlags::empty());
    assert_eq!(sq.gate, open);
}
