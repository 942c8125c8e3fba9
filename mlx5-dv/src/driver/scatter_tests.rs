//! Unit tests of the scatter-to-CQE copy-out (`scatter.rs`) over rings and
//! buffers in plain memory (the test plays the device). They run under
//! Miri (`scripts/miri`: mlx5-dv's lib tests).

use super::*;
use crate::dv::{mlx5dv_qp, mlx5dv_wq};
use crate::prm::{CtrlFlags, WqeOpcode, WQEBB};
use crate::wqe::{AtomicSeg, DataSeg, Payload, RemoteSeg, SendWqe};

/// Guard byte around every target buffer: a copy that writes past its
/// segments shows as a changed guard.
const GUARD: u8 = 0xee;
/// Guard bytes on each side of a target.
const PAD: usize = 16;

/// A target buffer with `PAD` guard bytes on each side.
struct Target {
    mem: Vec<u8>,
    len: usize,
}

impl Target {
    fn new(len: usize) -> Self {
        Target {
            mem: vec![GUARD; len + 2 * PAD],
            len,
        }
    }

    /// The data segment over bytes `from..from + len` of the buffer.
    fn seg(&mut self, from: usize, len: u32) -> DataSeg {
        assert!(from + len as usize <= self.len);
        DataSeg {
            addr: self.mem.as_mut_ptr() as u64 + (PAD + from) as u64,
            len,
            lkey: 0x200,
        }
    }

    fn body(&self) -> &[u8] {
        &self.mem[PAD..PAD + self.len]
    }

    fn guards_intact(&self) -> bool {
        self.mem[..PAD].iter().all(|&b| b == GUARD)
            && self.mem[PAD + self.len..].iter().all(|&b| b == GUARD)
    }
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(1))
        .collect()
}

/// A receive queue of `wqe_cnt` WQEs of `stride` bytes over `ring`.
fn rq(ring: &mut [u64], dbrec: &mut [u32; 2], wqe_cnt: u32, stride: u32) -> ReceiveQueue {
    let mut d = mlx5dv_qp::zeroed();
    d.dbrec = dbrec.as_mut_ptr();
    d.rq = mlx5dv_wq {
        buf: ring.as_mut_ptr().cast(),
        wqe_cnt,
        stride,
    };
    // SAFETY: `ring` holds `wqe_cnt * stride` bytes and `dbrec` two words,
    // both outliving the queue, touched by nothing else meanwhile.
    unsafe { ReceiveQueue::new(&d) }.expect("receive queue")
}

/// A 2-SGE receive (10 and 22 bytes, apart in one buffer) gets exactly
/// 32 bytes in order, with the guards and the gap between the SGEs left
/// alone; with fewer bytes, the first SGE first and the second only for
/// what is left.
#[test]
fn rq_copy_fills_two_sges_in_order_and_nothing_past_them() {
    let (mut ring, mut db) = (vec![0u64; 4 * 64 / 8], [0u32; 2]);
    let mut q = rq(&mut ring, &mut db, 4, 64);
    let mut t = Target::new(40);
    let segs = [t.seg(0, 10), t.seg(16, 22)];
    q.post(&segs, 1).unwrap();
    q.post(&segs, 2).unwrap();
    let data = pattern(32);
    // SAFETY: the WQEs' segments are in `t`, alive and ours.
    unsafe { q.scatter_from_cqe(0, &data) }.unwrap();
    assert_eq!(&t.body()[..10], &data[..10]);
    assert!(t.body()[10..16].iter().all(|&b| b == GUARD), "the gap");
    assert_eq!(&t.body()[16..38], &data[10..]);
    assert_eq!(&t.body()[38..], &[GUARD; 2]);
    assert!(t.guards_intact());
    assert_eq!(q.complete(0), Some(1));
    // 12 bytes: 10 into the first SGE, 2 into the second.
    let before = t.mem.clone();
    let small = [0xabu8; 12];
    // SAFETY: as above.
    unsafe { q.scatter_from_cqe(1, &small) }.unwrap();
    assert_eq!(&t.body()[..10], &small[..10]);
    assert_eq!(&t.body()[16..18], &small[10..]);
    assert_eq!(&t.body()[18..], &before[PAD + 18..PAD + 40]);
    assert!(t.guards_intact());
}

/// Data larger than the receive's SGEs: `Length`, and no byte written.
#[test]
fn rq_data_larger_than_the_sges_is_a_length_error_and_writes_nothing() {
    let (mut ring, mut db) = (vec![0u64; 64 / 8], [0u32; 2]);
    let mut q = rq(&mut ring, &mut db, 1, 64);
    let mut t = Target::new(24);
    q.post(&[t.seg(0, 8), t.seg(8, 16)], 1).unwrap();
    // SAFETY: the WQE's segments are in `t`.
    let r = unsafe { q.scatter_from_cqe(0, &pattern(25)) };
    assert_eq!(r, Err(ScatterError::Length { need: 25, room: 24 }));
    assert!(t.mem.iter().all(|&b| b == GUARD), "nothing written");
    // Exactly the room fits.
    // SAFETY: as above.
    unsafe { q.scatter_from_cqe(0, &pattern(24)) }.unwrap();
    assert_eq!(t.body(), &pattern(24)[..]);
}

/// The walk ends at the `MLX5_INVALID_LKEY` terminator: a stale segment
/// after it (from an earlier, bigger WQE in the same slot) is never
/// written, though rdma-core's `copy_to_scat` would walk on into it.
#[test]
fn rq_copy_stops_at_the_invalid_lkey_terminator() {
    let (mut ring, mut db) = (vec![0u64; 64 / 8], [0u32; 2]);
    let mut q = rq(&mut ring, &mut db, 1, 64);
    let mut old = Target::new(48);
    q.post(&[old.seg(0, 16), old.seg(16, 16), old.seg(32, 16)], 1)
        .unwrap();
    assert_eq!(q.complete(0), Some(1));
    let mut t = Target::new(8);
    q.post(&[t.seg(0, 8)], 2).unwrap();
    // SAFETY: WQE 1's segment is in `t`; the stale ones in `old`, alive.
    let r = unsafe { q.scatter_from_cqe(1, &pattern(20)) };
    assert_eq!(r, Err(ScatterError::Length { need: 20, room: 8 }));
    assert!(old.mem.iter().all(|&b| b == GUARD));
    assert!(t.mem.iter().all(|&b| b == GUARD));
}

/// A counter that names no outstanding receive (never posted, or
/// completed already) writes nothing.
#[test]
fn rq_stale_counter_writes_nothing() {
    let (mut ring, mut db) = (vec![0u64; 4 * 32 / 8], [0u32; 2]);
    let mut q = rq(&mut ring, &mut db, 4, 32);
    let mut t = Target::new(32);
    q.post(&[t.seg(0, 32)], 1).unwrap();
    // SAFETY: the only WQE's segment is in `t`.
    unsafe {
        assert_eq!(q.scatter_from_cqe(1, b"x"), Err(ScatterError::Stale));
        assert_eq!(q.complete(0), Some(1));
        assert_eq!(q.scatter_from_cqe(0, b"x"), Err(ScatterError::Stale));
    }
    assert!(t.mem.iter().all(|&b| b == GUARD));
}

/// An SRQ WQE's segments start after its 16-byte next segment; a WQE
/// the device does not hold is stale.
#[test]
fn srq_copy_skips_the_next_segment() {
    use crate::wqe::srq_next_seg;
    let (count, stride) = (4u32, 64u32);
    let mut mem = vec![0u64; (count * stride / 8) as usize];
    for i in 0..count as usize {
        let b = srq_next_seg((i + 1) as u16);
        let w = u64::from_ne_bytes(b[..8].try_into().unwrap());
        mem[i * stride as usize / 8] = w;
    }
    let mut db = 0u32;
    let d = SrqDesc {
        buf: mem.as_mut_ptr().cast(),
        dbrec: &mut db,
        stride,
        head: 0,
        tail: count - 1,
    };
    // SAFETY: `mem` holds the linked ring, `db` the record; both outlive it.
    let mut q = unsafe { SharedReceiveQueue::new(&d, 3) }.expect("srq");
    let mut t = Target::new(33);
    let idx = q.post(&[t.seg(0, 1), t.seg(1, 32)], 7).unwrap();
    let slots = q.slots().clone();
    let data = pattern(33);
    // SAFETY: the WQE's segments are in `t`.
    unsafe {
        assert_eq!(
            slots.scatter_from_cqe(idx as u16 + 1, &data),
            Err(ScatterError::Stale)
        );
        slots.scatter_from_cqe(idx as u16, &data).unwrap();
    }
    assert_eq!(t.body(), &data[..]);
    assert!(t.guards_intact());
    // Through a QP's receive side on the SRQ, once completed: stale.
    let on = ReceiveQueue::on_srq(slots.clone());
    assert_eq!(slots.complete(idx as u16), Some(7));
    // SAFETY: as above.
    let r = unsafe { on.scatter_from_cqe(idx as u16, &data) };
    assert_eq!(r, Err(ScatterError::Stale));
}

/// A send queue of `wqe_cnt` WQEBBs over `ring`.
fn sq(ring: &mut [u64], dbrec: &mut [u32; 2], bf: &mut [u64], wqe_cnt: u32) -> SendQueue {
    use crate::dv::mlx5dv_bf;
    let mut d = mlx5dv_qp::zeroed();
    d.dbrec = dbrec.as_mut_ptr();
    d.sq = mlx5dv_wq {
        buf: ring.as_mut_ptr().cast(),
        wqe_cnt,
        stride: WQEBB as u32,
    };
    d.bf = mlx5dv_bf {
        reg: bf.as_mut_ptr().cast(),
        size: 256,
    };
    // SAFETY: the buffers outlive the queue, and only this test touches them.
    unsafe { SendQueue::new(&d, 0x42, 0, 0) }.unwrap()
}

fn read_wqe<'a>(segs: &'a [DataSeg]) -> SendWqe<'a> {
    SendWqe {
        datagram: None,
        opcode: WqeOpcode::RDMA_READ,
        flags: CtrlFlags::CQ_UPDATE,
        imm: 0,
        remote: Some(RemoteSeg {
            addr: 0x1000,
            rkey: 9,
        }),
        masked: None,
        atomic: None,
        payload: Payload::Sges(segs),
    }
}

/// A READ whose SGE list crosses the SQ's end (its WQE starts in the last
/// WQEBB: 2 segments there, 2 at the ring's start) gets the data in
/// order, as `mlx5_copy_to_send_wqe` continues at `mlx5_get_send_wqe(qp, 0)`.
#[test]
fn sq_read_copy_follows_the_sge_list_across_the_ring_end() {
    let (mut ring, mut db, mut bf) = (vec![0u64; 4 * WQEBB / 8], [0u32; 2], vec![0u64; 64]);
    let mut q = sq(&mut ring, &mut db, &mut bf, 4);
    let mut pad = Target::new(8);
    let one = [pad.seg(0, 8)];
    for w in 0..3 {
        q.post(&read_wqe(&one), w).unwrap();
    }
    assert!(q.complete(2).is_some());
    assert_eq!(q.pi(), 3);
    let mut t = Target::new(64);
    let segs = [t.seg(0, 5), t.seg(5, 11), t.seg(16, 16), t.seg(32, 32)];
    q.post(&read_wqe(&segs), 9).unwrap();
    let data = pattern(60);
    // SAFETY: WQE 3's segments are in `t`, alive and ours.
    unsafe { q.retirer().scatter_from_cqe(3, &data) }.unwrap();
    assert_eq!(&t.body()[..60], &data[..]);
    assert_eq!(&t.body()[60..], &[GUARD; 4]);
    assert!(t.guards_intact());
    assert!(pad.mem.iter().all(|&b| b == GUARD));
    // More than the four SGEs hold: nothing written.
    let before = t.mem.clone();
    // SAFETY: as above.
    let r = unsafe { q.retirer().scatter_from_cqe(3, &pattern(65)) };
    assert_eq!(r, Err(ScatterError::Length { need: 65, room: 64 }));
    assert_eq!(t.mem, before);
    assert_eq!(q.complete(3).map(|r| r.wr_id), Some(9));
    // SAFETY: as above.
    let r = unsafe { q.retirer().scatter_from_cqe(3, &data) };
    assert_eq!(r, Err(ScatterError::Stale), "retired");
}

/// An atomic's old value goes to the segment after ctrl, raddr and
/// atomic (byte 48); a WRITE takes no CQE data.
#[test]
fn sq_atomic_copy_skips_the_atomic_segment_and_a_write_is_refused() {
    let (mut ring, mut db, mut bf) = (vec![0u64; 4 * WQEBB / 8], [0u32; 2], vec![0u64; 64]);
    let mut q = sq(&mut ring, &mut db, &mut bf, 4);
    let mut t = Target::new(8);
    let old = [t.seg(0, 8)];
    let fa = SendWqe {
        opcode: WqeOpcode::ATOMIC_FA,
        atomic: Some(AtomicSeg {
            swap_add: 1,
            compare: 0,
        }),
        ..read_wqe(&old)
    };
    q.post(&fa, 1).unwrap();
    let mut w = Target::new(8);
    let src = [w.seg(0, 8)];
    let write = SendWqe {
        opcode: WqeOpcode::RDMA_WRITE,
        ..read_wqe(&src)
    };
    q.post(&write, 2).unwrap();
    let value = 0x0102_0304_0506_0708u64.to_ne_bytes();
    // SAFETY: the WQEs' segments are in `t` and `w`.
    unsafe {
        q.retirer().scatter_from_cqe(0, &value).unwrap();
        assert_eq!(
            q.retirer().scatter_from_cqe(1, &value),
            Err(ScatterError::Opcode(WqeOpcode::RDMA_WRITE.0))
        );
    }
    assert_eq!(t.body(), &value);
    assert!(t.guards_intact());
    assert!(w.mem.iter().all(|&b| b == GUARD));
}
