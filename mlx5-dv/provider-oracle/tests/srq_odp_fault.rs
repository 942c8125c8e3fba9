//! An SRQ WQE's ODP page-fault CQE (RESP_ERR, syndrome 0x22, vendor
//! syndrome 0x93) against libmlx5: `mlx5_poll_cq_v1` reports nothing for
//! it and reposts the WQE (`mlx5_complete_odp_fault`: its SGEs into the
//! head WQE, the doorbell counter one up); our driver's poller gives the
//! WQE back (`SrqSlots::fault`) and the owner reposts it
//! (`SharedReceiveQueue::repost_faulted`). Both report the same
//! completions, repost into the same WQE with the same SGEs and wr_id, and
//! count the same doorbell.
// Needs the oracle linked: without it `oracle_linked.rs` says SKIPPED.
#![cfg(provider_oracle)]

use mlx5_dv::cqe::Cqe;
use mlx5_dv::driver::{CompletionQueue, SharedReceiveQueue, SrqDesc};
use mlx5_dv::dv::mlx5dv_cq;
use mlx5_dv::prm::{CqeOpcode, Syndrome, WqeOpcode, VENDOR_SYNDROME_ODP_PFAULT};
use mlx5_provider_oracle::ffi::*;
use mlx5_provider_oracle::mem::Mem;
use mlx5_provider_oracle::provider::ProviderRecvs;
use mlx5_provider_oracle::recv::SrqPair;
use mlx5_provider_oracle::send::BF_SIZE;
use mlx5_provider_oracle::wr::{data_segs, ibv, Sge};

const COUNT: u32 = 8;
const STRIDE: u32 = 64;
const CQES: u32 = 64;
const QPN: u32 = 0x456;
const UIDX: u32 = 0x123;

/// A responder CQE of the QP for SRQ WQE `idx`: a 64-byte SEND's, or the
/// page fault's; with the QP's user index in `srqn_uidx` (bytes 32..36,
/// CQE version 1), the owner bit of the first pass.
fn cqe(idx: u16, fault: bool) -> [u8; 64] {
    let c = Cqe {
        opcode: if fault {
            CqeOpcode::RESP_ERR
        } else {
            CqeOpcode::RESP_SEND
        },
        wqe_opcode: WqeOpcode(0),
        qpn: QPN,
        wqe_counter: idx,
        byte_cnt: if fault { 0 } else { 64 },
        imm: 0,
        solicited: false,
        format: 0,
        syndrome: if fault {
            Syndrome::REMOTE_ABORTED_ERR
        } else {
            Syndrome(0)
        },
        vendor_syndrome: if fault { VENDOR_SYNDROME_ODP_PFAULT } else { 0 },
        flags_rqpn: 0,
        owner: false,
    };
    assert_eq!(c.is_odp_fault(), fault);
    let mut b = c.encode(0);
    b[32..36].copy_from_slice(&UIDX.to_be_bytes());
    b
}

/// The provider's objects: a context, a CQ, an SRQ and an RC QP on it.
struct Theirs {
    ctx: *mut po_ctx,
    cq: *mut po_cq,
    srq: *mut po_srq,
    qp: *mut po_qp,
    _mem: Vec<Mem>,
}

impl Drop for Theirs {
    fn drop(&mut self) {
        // SAFETY: made in `world`, freed once, QP, SRQ, CQ, then context.
        unsafe {
            po_qp_free(self.qp);
            po_srq_free(self.srq);
            po_cq_free(self.cq);
            po_ctx_free(self.ctx);
        }
    }
}

struct World {
    theirs: Theirs,
    their_ring: *mut u8,
    their_cqes: *mut u8,
    their_db: *const u8,
    ours: SharedReceiveQueue,
    our_ring: *mut u8,
    our_db: *const u8,
    our_cq: CompletionQueue,
    our_cqes: *mut u8,
    /// CQEs written so far (the next slot).
    written: u32,
}

fn world() -> World {
    let mut mem = Vec::new();
    let mut take = |len: usize| {
        let m = Mem::zeroed(len);
        let p = m.ptr();
        mem.push(m);
        p
    };
    let len = (COUNT * STRIDE) as usize;
    let (their_ring, their_db, our_ring, our_db) = (take(len), take(64), take(len), take(64));
    let (their_cqes, their_cq_db, our_cqes, our_cq_db) = (
        take(CQES as usize * 64),
        take(64),
        take(CQES as usize * 64),
        take(64),
    );
    let (sq, qp_db, bf) = (take(4 * 64), take(64), take(2 * BF_SIZE as usize));
    // Fresh CQ slots: op_own 0xf0 (invalid, owned by the device).
    for ring in [their_cqes, our_cqes] {
        for i in 0..CQES as usize {
            // SAFETY: slot `i`'s byte 63, inside the ring.
            unsafe { ring.add(i * 64 + 63).write(0xf0) };
        }
    }
    // SAFETY: a fresh context; every buffer is the world's and outlives
    // the objects (`Theirs` drops them first).
    let theirs = unsafe {
        let ctx = po_ctx_new();
        assert!(!ctx.is_null());
        let cq = po_cq_new(
            ctx,
            &po_cq_cfg {
                buf: their_cqes.cast(),
                dbrec: their_cq_db.cast(),
                cqe_cnt: CQES,
                cqe_sz: 64,
                cons_index: 0,
                cqn: 1,
            },
        );
        assert!(!cq.is_null());
        let srq = po_srq_new(
            ctx,
            &po_srq_cfg {
                buf: their_ring.cast(),
                db: their_db.cast(),
                max: COUNT,
                wqe_shift: STRIDE.trailing_zeros(),
                max_gs: STRIDE / 16 - 1,
                srqn: 0x40,
            },
        );
        assert!(!srq.is_null());
        let cfg = po_qp_cfg {
            sq_buf: sq.cast(),
            rq_buf: core::ptr::null_mut(),
            dbrec: qp_db.cast(),
            bf_reg: bf.cast(),
            sq_wqe_cnt: 4,
            sq_cur_post: 0,
            sq_max_post: 4,
            sq_max_gs: 1,
            max_inline: 0,
            rq_wqe_cnt: 0,
            rq_wqe_shift: 0,
            rq_max_gs: 0,
            rq_max_post: 0,
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
        let qp = po_qp_new(ctx, &cfg, cq, cq, srq);
        assert!(!qp.is_null());
        Theirs {
            ctx,
            cq,
            srq,
            qp,
            _mem: Vec::new(),
        }
    };
    // Ours over a copy of the list libmlx5 linked.
    // SAFETY: two distinct buffers of `len` bytes.
    unsafe { core::ptr::copy_nonoverlapping(their_ring, our_ring, len) };
    let d = SrqDesc {
        buf: our_ring,
        dbrec: our_db.cast(),
        stride: STRIDE,
        head: 0,
        tail: COUNT - 1,
    };
    // SAFETY: the ring (linked) and record are the world's, kept in `mem`.
    let ours = unsafe { SharedReceiveQueue::new(&d, STRIDE / 16 - 1) }.unwrap();
    let desc = mlx5dv_cq {
        buf: our_cqes.cast(),
        dbrec: our_cq_db.cast(),
        cqe_cnt: CQES,
        cqe_size: 64,
        cq_uar: core::ptr::null_mut(),
        cqn: 1,
        comp_mask: 0,
    };
    // SAFETY: the ring and record are the world's.
    let our_cq = unsafe { CompletionQueue::new(&desc) }.unwrap();
    let mut theirs = theirs;
    theirs._mem = mem;
    World {
        theirs,
        their_ring,
        their_cqes,
        their_db,
        ours,
        our_ring,
        our_db,
        our_cq,
        our_cqes,
        written: 0,
    }
}

impl World {
    /// Posts receive `wr_id` of two SGEs to both; returns each side's WQE.
    fn post(&mut self, wr_id: u64) -> (u32, u32) {
        let sges = vec![
            Sge {
                addr: wr_id << 12,
                len: 64,
                lkey: 0x200 + wr_id as u32,
            },
            Sge {
                addr: (wr_id << 12) + 64,
                len: 32,
                lkey: 0x300,
            },
        ];
        let ours = self.ours.post(&data_segs(&sges), wr_id).unwrap();
        self.ours.ring_doorbell();
        let recvs = ProviderRecvs::of(&[(wr_id, sges)]);
        let (mut head, mut tail, mut counter, mut bad) = (0i32, 0i32, 0u32, 0u32);
        // SAFETY: the SRQ is live; the list outlives the call.
        unsafe {
            po_srq_state(self.theirs.srq, &mut head, &mut tail, &mut counter);
            assert_eq!(
                po_post_srq_recv(self.theirs.srq, recvs.list.as_ptr(), 1, &mut bad),
                0
            );
        }
        (ours, head as u32)
    }

    /// Writes `cqes` into both CQ rings, polls both, and returns the wr_ids
    /// each reported (ours: a poller that gives faulted WQEs back and
    /// completes the rest, then the owner's repost).
    fn deliver(&mut self, cqes: &[[u8; 64]]) -> (Vec<u64>, Vec<u64>) {
        for c in cqes {
            let at = (self.written % CQES) as usize * 64;
            for ring in [self.their_cqes, self.our_cqes] {
                // SAFETY: slot `written` of a 64-slot ring; nothing polls now.
                unsafe {
                    core::ptr::copy_nonoverlapping(c.as_ptr(), ring.add(at), 63);
                    ring.add(at + 63).write(c[63]);
                }
            }
            self.written += 1;
        }
        let slots = self.ours.slots().clone();
        let mut ours = Vec::new();
        while let Some(c) = self.our_cq.poll_one() {
            if c.is_odp_fault() {
                assert!(slots.fault(c.wqe_counter));
            } else {
                ours.push(slots.complete(c.wqe_counter).expect("a held WQE"));
            }
        }
        self.our_cq.update_ci();
        self.ours.repost_faulted();
        let mut wc = [po_wc::default(); 64];
        // SAFETY: the CQ is live.
        let n = unsafe { po_poll_cq(self.theirs.cq, 64, wc.as_mut_ptr()) };
        assert!(n >= 0);
        let theirs = wc[..n as usize]
            .iter()
            .map(|w| {
                assert_eq!(w.status, 0);
                w.wr_id
            })
            .collect();
        (ours, theirs)
    }

    fn rings(&self) -> (&[u8], &[u8]) {
        let len = (COUNT * STRIDE) as usize;
        // SAFETY: the rings, read while neither side writes them.
        unsafe {
            (
                std::slice::from_raw_parts(self.our_ring, len),
                std::slice::from_raw_parts(self.their_ring, len),
            )
        }
    }

    /// Both doorbell records (big-endian counters).
    fn dbrecs(&self) -> ([u8; 4], [u8; 4]) {
        // SAFETY: the records, 4 bytes each.
        unsafe {
            (
                self.our_db.cast::<[u8; 4]>().read(),
                self.their_db.cast::<[u8; 4]>().read(),
            )
        }
    }

    fn their_wrid(&self, i: u32) -> u64 {
        // SAFETY: the SRQ is live; `i < COUNT`.
        unsafe { po_srq_wrid(self.theirs.srq, i) }
    }
}

#[test]
fn an_odp_fault_cqe_is_not_reported_and_its_wqe_is_reposted_as_libmlx5_does() {
    if !mlx5_provider_oracle::oracle_or_skip("srq_odp_fault") {
        return;
    }
    let mut w = world();
    let mut at = Vec::new();
    for wr in 1..=5u64 {
        let (o, t) = w.post(wr);
        assert_eq!(o, t, "the same WQE for wr_id {wr}");
        at.push(o);
    }
    // WQE 1 faults, WQE 0 completes: one completion, wr_id 1, on both.
    let (ours, theirs) = w.deliver(&[cqe(at[1] as u16, true), cqe(at[0] as u16, false)]);
    assert_eq!(
        (ours.as_slice(), theirs.as_slice()),
        (&[1u64][..], &[1u64][..])
    );
    let (o, t) = w.dbrecs();
    assert_eq!(o, t, "the doorbell counts the repost");
    assert_eq!(u32::from_be_bytes(o), 6);
    // The repost went into the head WQE (5, after the five posts) on both,
    // with wr_id 2's SGEs and wr_id.
    let (or, tr) = w.rings();
    assert_eq!(
        SrqPair::scatter(or, STRIDE, 5),
        SrqPair::scatter(tr, STRIDE, 5),
        "the reposted WQE's SGEs"
    );
    assert_eq!(SrqPair::scatter(or, STRIDE, 5).0[0], (64, 0x202, 2 << 12));
    assert_eq!(w.their_wrid(5), 2);
    // Two faults in a row, then completions of the reposts and the rest.
    let (ours, theirs) = w.deliver(&[
        cqe(at[2] as u16, true),
        cqe(at[4] as u16, true),
        cqe(5, false),
    ]);
    assert_eq!(
        (ours.as_slice(), theirs.as_slice()),
        (&[2u64][..], &[2u64][..])
    );
    let (o, t) = w.dbrecs();
    assert_eq!((o, u32::from_be_bytes(o)), (t, 8));
    let (or, tr) = w.rings();
    for (i, wr) in [(6u32, 3u64), (7, 5)] {
        assert_eq!(
            SrqPair::scatter(or, STRIDE, i),
            SrqPair::scatter(tr, STRIDE, i),
            "WQE {i}"
        );
        assert_eq!(SrqPair::scatter(or, STRIDE, i).0[0].1, 0x200 + wr as u32);
        assert_eq!(w.their_wrid(i), wr);
    }
    let (ours, theirs) = w.deliver(&[cqe(at[3] as u16, false), cqe(7, false), cqe(6, false)]);
    assert_eq!(ours, [4, 5, 3]);
    assert_eq!(ours, theirs);
    assert_eq!(w.ours.outstanding(), 0);
    assert_eq!(w.ours.faulted(), 0);
}
