//! Driver unit tests over rings in plain memory (the test plays the device).

use super::cq::owned;
use super::*;
use crate::cqe::{owner_bit, sw_owned, Cqe};
use crate::dv::mlx5dv_cq;
use crate::prm::{CqeOpcode, CtrlFlags, Syndrome, WqeOpcode, CQE64, WQEBB};
use crate::wqe::SendWqe;

/// A CQ in plain memory that the test plays the device for.
struct FakeCq {
    buf: Vec<u8>,
    /// (`Vec`s: their buffers are reached through one raw pointer, so the
    /// test may read and write them while the poller holds its copy.)
    dbrec: Vec<u32>,
    /// The CQ's UAR page (the arm doorbell at 0x20: word 4).
    uar: Vec<u64>,
    cqe_cnt: u32,
    cqe_size: u32,
    pi: u32,
}

impl FakeCq {
    fn new(cqe_cnt: u32, cqe_size: u32) -> Self {
        let mut buf = vec![0u8; (cqe_cnt * cqe_size) as usize];
        for s in buf.chunks_exact_mut(cqe_size as usize) {
            s[cqe_size as usize - 1] = 0xf0;
        }
        FakeCq {
            buf,
            dbrec: vec![0; 2],
            uar: vec![0; 8],
            cqe_cnt,
            cqe_size,
            pi: 0,
        }
    }

    fn dv(&mut self) -> mlx5dv_cq {
        mlx5dv_cq {
            buf: self.buf.as_mut_ptr().cast(),
            dbrec: self.dbrec.as_mut_ptr(),
            cqe_cnt: self.cqe_cnt,
            cqe_size: self.cqe_size,
            cq_uar: self.uar.as_mut_ptr().cast(),
            cqn: 7,
            comp_mask: 0,
        }
    }

    /// Produces the next CQE, naming WQE `counter`.
    fn push(&mut self, counter: u16) {
        let c = Cqe {
            opcode: CqeOpcode::REQ,
            wqe_opcode: WqeOpcode::RDMA_WRITE,
            qpn: 0x1234,
            wqe_counter: counter,
            byte_cnt: counter as u32 * 3,
            imm: 0,
            solicited: false,
            format: 0,
            owner: false,
            syndrome: Syndrome(0),
            vendor_syndrome: 0,
            flags_rqpn: 0,
        };
        let b = c.encode(owner_bit(self.pi, self.cqe_cnt));
        let end = ((self.pi & (self.cqe_cnt - 1)) + 1) as usize * self.cqe_size as usize;
        self.buf[end - CQE64..end].copy_from_slice(&b);
        self.pi += 1;
    }
}

/// A send queue over plain memory: the doorbell record and BlueFlame
/// register get what `ring_doorbell` writes (8-byte doorbell for a batch,
/// the whole WQE for one), and the trace walk over a batch of WQEs of
/// different sizes ends at `pi`.
#[test]
fn doorbell_writes_dbrec_and_bf_and_traces_the_batch() {
    use crate::dv::{mlx5dv_bf, mlx5dv_qp, mlx5dv_wq};
    use crate::wqe::{Payload, RemoteSeg};
    let mut sq = vec![0u64; 8 * WQEBB / 8];
    let mut dbrec = [0u32; 2];
    let mut bf = vec![0u64; 2 * 256 / 8];
    let mut d = mlx5dv_qp::zeroed();
    d.dbrec = dbrec.as_mut_ptr();
    d.sq = mlx5dv_wq {
        buf: sq.as_mut_ptr().cast(),
        wqe_cnt: 8,
        stride: WQEBB as u32,
    };
    d.bf = mlx5dv_bf {
        reg: bf.as_mut_ptr().cast(),
        size: 256,
    };
    // SAFETY: the buffers outlive `q`, and only this test touches them.
    let mut q = unsafe { SendQueue::new(&d, 0x42, 256, 0) }.unwrap();
    let bytes = [7u8; 100];
    let w = |n: usize| SendWqe {
        datagram: None,
        opcode: WqeOpcode::RDMA_WRITE,
        flags: CtrlFlags::CQ_UPDATE,
        imm: 0,
        remote: Some(RemoteSeg { addr: 8, rkey: 9 }),
        masked: None,
        atomic: None,
        payload: Payload::Inline(&bytes[..n]),
    };
    // One WQE of 2 WQEBBs: BlueFlame copies both.
    q.post(&w(64), 1).unwrap();
    q.ring_doorbell();
    assert_eq!(u32::from_be(dbrec[1]), 2);
    assert_eq!(&bf[..16], &sq[..16]);
    // A batch (1, 3 and 2 WQEBBs), traced: 8-byte doorbell of the last
    // WQE's ctrl segment, to the other half of the register.
    q.post(&w(8), 2).unwrap();
    q.post(&w(100), 3).unwrap();
    q.post(&w(64), 4).unwrap();
    let out = crate::trace::capture::run(|| q.ring_doorbell());
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "one line per WQE of the batch: {out}");
    for (l, (wr_id, pi, ds, wqebbs, len)) in
        lines
            .iter()
            .zip([(2, 2, 3, 1, 8), (3, 3, 9, 3, 100), (4, 6, 7, 2, 64)])
    {
        let want = format!(
            "rdma-direct trace: QP 0x42 post wr_id {wr_id} pi {pi} SQ offset {}: RDMA_WRITE ds {ds} wqebbs {wqebbs} flags 0x08 imm 0x0 raddr 0x8 rkey 0x9 atomic - payload Inline {{ off: {}, len: {len} }}",
            pi * 64,
            pi * 64 + 36
        );
        assert_eq!(*l, want);
    }
    assert_eq!(u32::from_be(dbrec[1]), 8);
    assert_eq!(bf[32], sq[6 * 8]);
    assert_eq!(q.pi(), 8);
}

#[test]
fn one_compare_ownership_equals_sw_owned() {
    for op_own in 0..=255u8 {
        for (ci, owner) in [(3u32, 0u8), (8 + 3, 1)] {
            assert_eq!(
                owned(op_own, owner),
                sw_owned(op_own, ci, 8),
                "{op_own:#04x}"
            );
        }
    }
}

/// Polling ahead: CQEs that arrive in bursts of every size, across
/// several passes of the ring, with 64- and 128-byte slots, come out once
/// each and in order; an empty slot ends a burst.
#[test]
fn poll_takes_every_cqe_once_in_order_whatever_the_bursts() {
    for cqe_size in [64, 128] {
        let mut f = FakeCq::new(32, cqe_size);
        // SAFETY: `f` outlives `cq`, and only this test touches the CQ.
        let mut cq = unsafe { CompletionQueue::new(&f.dv()) }.unwrap();
        let mut next = 0u16;
        let mut produced = 0u16;
        for burst in (0..40u16).map(|k| k % 20) {
            for _ in 0..burst {
                // Like the device, never overrun what was consumed.
                if f.pi - cq.ci() == f.cqe_cnt {
                    break;
                }
                f.push(produced);
                produced += 1;
            }
            while let Some(c) = cq.poll_one() {
                assert_eq!((c.wqe_counter, c.byte_cnt), (next, next as u32 * 3));
                assert_eq!(c.opcode, CqeOpcode::REQ);
                next += 1;
            }
            assert_eq!(next, produced, "slot size {cqe_size}");
            cq.update_ci();
        }
        assert!(produced > 3 * 32, "several passes of the ring");
    }
}

/// On a CQ that ignores overrun, polls leave the consumer-index record
/// alone: 20 CQEs polled (past a wrap of the ring of 8) and the record is
/// still 0; arming then carries the consumer index in the arm word
/// (`dbrec[1]` and the UAR doorbell), as rdma-core's `mlx5_arm_cq`, and
/// writes no CI record either. `update_ci` and switching back to a CQ that
/// detects overrun write it; then every poll does.
#[test]
fn lazy_ci_polls_write_no_record_and_the_arm_word_carries_the_ci() {
    let mut f = FakeCq::new(8, 64);
    // SAFETY: `f` outlives `cq`, and only this test touches the CQ.
    let mut cq = unsafe { CompletionQueue::new(&f.dv()) }.unwrap();
    assert!(!cq.overrun_ignored(), "eager by default");
    cq.set_overrun_ignored(true);
    let mut next = 0u16;
    for burst in [5, 3, 8, 4] {
        for _ in 0..burst {
            f.push(next);
            next += 1;
        }
        let from = cq.ci();
        let mut got = 0;
        let mut cur = cq.cursor::<64>();
        while let Some(c) = cur.next() {
            assert_eq!(c.wqe_counter(), from as u16 + got);
            assert_eq!(c.byte_cnt(), c.wqe_counter() as u32 * 3);
            got += 1;
        }
        drop(cur);
        assert_eq!(got, burst);
        cq.polled(from);
        assert_eq!(f.dbrec[0], 0, "no CI record per poll");
    }
    assert_eq!(cq.ci(), 20);
    cq.arm(true).unwrap();
    let word = crate::doorbell::cq_arm_word(0, true, 20);
    assert_eq!(u32::from_be(f.dbrec[1]), word);
    assert_eq!(word & 0xff_ffff, 20, "the arm word carries the CI");
    assert_eq!(u64::from_be(f.uar[4]), (word as u64) << 32 | 7);
    assert_eq!(f.dbrec[0], 0, "arming writes no CI record");
    cq.update_ci();
    assert_eq!(u32::from_be(f.dbrec[0]), 20);
    f.dbrec[0] = 0;
    cq.set_overrun_ignored(false);
    assert_eq!(u32::from_be(f.dbrec[0]), 20, "written when switched back");
    f.push(20);
    let from = cq.ci();
    assert!(cq.poll_one().is_some());
    cq.polled(from);
    assert_eq!(u32::from_be(f.dbrec[0]), 21, "eager: written per poll");
}

/// A cursor must be made for the CQ's slot size: one of 128-byte slots over
/// 64-byte ones would reach past the ring, so it panics instead.
#[test]
#[should_panic(expected = "the cursor's slot size")]
fn a_cursor_of_the_wrong_slot_size_panics() {
    let mut f = FakeCq::new(8, 64);
    // SAFETY: `f` outlives `cq`, and only this test touches the CQ.
    let mut cq = unsafe { CompletionQueue::new(&f.dv()) }.unwrap();
    assert_eq!(cq.slot_size(), 64);
    let _ = cq.cursor::<128>();
}

/// With tracing on, `polled` prints every CQE the poll took, in order, with
/// its consumer index and slot offset (the switch is read once per poll,
/// after the loop), across the end of the ring.
#[test]
fn polled_traces_every_cqe_taken() {
    let mut f = FakeCq::new(4, 64);
    // SAFETY: `f` outlives `cq`, and only this test touches the CQ.
    let mut cq = unsafe { CompletionQueue::new(&f.dv()) }.unwrap();
    cq.set_overrun_ignored(true);
    for k in 0..3 {
        f.push(k);
    }
    while cq.poll_one().is_some() {}
    for k in 3..6 {
        f.push(k);
    }
    let from = cq.ci();
    let out = crate::trace::capture::run(|| {
        let mut cur = cq.cursor::<64>();
        while cur.next().is_some() {}
        drop(cur);
        cq.polled(from);
    });
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    for (l, (ci, off)) in lines.iter().zip([(3, 192), (4, 0), (5, 64)]) {
        assert!(
            l.starts_with(&format!("rdma-direct trace: CQ 0x7 CQE ci {ci} offset {off}: REQ wqe_opcode RDMA_WRITE qpn 0x1234 wqe_counter {ci} ")),
            "{l}"
        );
    }
}
