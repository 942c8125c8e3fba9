//! Receive WQEs: our RQ and SRQ posting against libmlx5's
//! `mlx5_post_recv` and `mlx5_post_srq_recv`, each side over its own copy
//! of the same memory.
//!
//! An RQ is a ring: both sides must write the same bytes at the same
//! index. An SRQ is a free list whose order is a policy, not a format
//! (v59 relinks completed WQEs lazily from a bitmap at post time,
//! rdma-core 44 and ours in completion order), so an SRQ is compared by
//! what the device reads of each posted WR (its data segments and
//! terminator, wherever each side put it), the doorbell counter, and the
//! invariant that no WQE the device may own is handed out again.

use crate::ffi::*;
use crate::mem::Mem;
use crate::provider::ProviderRecvs;
use crate::wr::{data_segs, Sge};
use mlx5_dv::driver::{ReceiveQueue, SharedReceiveQueue, SrqDesc};
use mlx5_dv::dv::{mlx5dv_bf, mlx5dv_qp, mlx5dv_wq};

/// An RQ of ours and the provider's, over two rings that start equal.
pub struct RqPair {
    pub wqe_cnt: u32,
    pub stride: u32,
    ours_ring: Mem,
    ours_db: Mem,
    ours: ReceiveQueue,
    theirs_ring: Mem,
    theirs_sq: Mem,
    theirs_db: Mem,
    theirs_bf: Mem,
    ctx: *mut po_ctx,
    cq: *mut po_cq,
    qp: *mut po_qp,
    _cq_mem: (Mem, Mem),
}

/// A CQ for the fake QPs (never polled here).
fn fake_cq(ctx: *mut po_ctx) -> (*mut po_cq, (Mem, Mem)) {
    let buf = Mem::zeroed(64);
    let db = Mem::zeroed(64);
    let cfg = po_cq_cfg {
        buf: buf.ptr().cast(),
        dbrec: db.ptr().cast(),
        cqe_cnt: 1,
        cqe_sz: 64,
        cons_index: 0,
        cqn: 1,
    };
    // SAFETY: `ctx` is live; `buf` and `db` are returned with the CQ and
    // kept alive as long as it is (the owners below).
    let cq = unsafe { po_cq_new(ctx, &cfg) };
    assert!(!cq.is_null());
    (cq, (buf, db))
}

impl RqPair {
    /// RQs of `wqe_cnt` WQEs of `stride` bytes (powers of two; stride 16
    /// to 512, at least 64 bytes in all), both rings holding `fill`, both
    /// producer counters at `head`.
    pub fn new(wqe_cnt: u32, stride: u32, head: u32, fill: impl Fn(usize) -> u8) -> RqPair {
        let len = wqe_cnt as usize * stride as usize;
        let mut ours_ring = Mem::zeroed(len);
        let mut theirs_ring = Mem::zeroed(len);
        for (i, (a, b)) in ours_ring
            .bytes_mut()
            .iter_mut()
            .zip(theirs_ring.bytes_mut().iter_mut())
            .enumerate()
        {
            *a = fill(i);
            *b = fill(i);
        }
        let ours_db = Mem::zeroed(64);
        let desc = mlx5dv_qp {
            dbrec: ours_db.ptr().cast(),
            sq: mlx5dv_wq {
                buf: core::ptr::null_mut(),
                wqe_cnt: 0,
                stride: 0,
            },
            rq: mlx5dv_wq {
                buf: ours_ring.ptr().cast(),
                wqe_cnt,
                stride,
            },
            bf: mlx5dv_bf {
                reg: core::ptr::null_mut(),
                size: 0,
            },
            ..mlx5dv_qp::zeroed()
        };
        // SAFETY: the ring and doorbell record are this pair's, alive as
        // long as `ours` (fields of the same struct, dropped after it:
        // `ours` has no Drop that touches them).
        let mut ours = unsafe { ReceiveQueue::new(&desc) }.expect("a valid RQ");
        assert!(ours.start_at(head));
        let theirs_sq = Mem::zeroed(64);
        let theirs_db = Mem::zeroed(64);
        let theirs_bf = Mem::zeroed(512);
        // SAFETY: a fresh context.
        let ctx = unsafe { po_ctx_new() };
        assert!(!ctx.is_null());
        let (cq, cq_mem) = fake_cq(ctx);
        let cfg = po_qp_cfg {
            sq_buf: theirs_sq.ptr().cast(),
            rq_buf: theirs_ring.ptr().cast(),
            dbrec: theirs_db.ptr().cast(),
            bf_reg: theirs_bf.ptr().cast(),
            sq_wqe_cnt: 1,
            sq_cur_post: 0,
            sq_max_post: 1,
            sq_max_gs: 1,
            max_inline: 0,
            rq_wqe_cnt: wqe_cnt,
            rq_wqe_shift: stride.trailing_zeros(),
            rq_max_gs: stride / 16,
            rq_max_post: wqe_cnt,
            rq_head: head,
            qpn: 0x123,
            qp_type: crate::wr::ibv::QPT_RC,
            sq_sig_all: 0,
            wq_sig: 0,
            atomics: 0,
            prefer_bf: 0,
            bf_size: 256,
            bf_offset: 0,
            user_index: 1,
            pad: 0,
        };
        // SAFETY: every buffer named is owned by the pair and outlives the QP
        // (freed in Drop before them).
        let qp = unsafe { po_qp_new(ctx, &cfg, cq, cq, core::ptr::null_mut()) };
        assert!(!qp.is_null());
        RqPair {
            wqe_cnt,
            stride,
            ours_ring,
            ours_db,
            ours,
            theirs_ring,
            theirs_sq,
            theirs_db,
            theirs_bf,
            ctx,
            cq,
            qp,
            _cq_mem: cq_mem,
        }
    }

    /// Posts `wrs` (wr_id, SGEs) to both: ours one `post` each then one
    /// doorbell, theirs one `mlx5_post_recv`. Returns the index each
    /// refused at (the list's length if none).
    pub fn post(&mut self, wrs: &[(u64, Vec<Sge>)]) -> (usize, usize) {
        let mut at = wrs.len();
        for (i, (id, sges)) in wrs.iter().enumerate() {
            if self.ours.post(&data_segs(sges), *id).is_err() {
                at = i;
                break;
            }
        }
        self.ours.ring_doorbell();
        let recvs = ProviderRecvs::of(wrs);
        let list = &recvs.list;
        let mut bad = 0;
        // SAFETY: `qp` is live; the list and its SGE arrays outlive the call.
        unsafe { po_post_recv(self.qp, list.as_ptr(), list.len() as u32, &mut bad) };
        (at, bad as usize)
    }

    /// The oldest `n` receives completed, in order, on both sides; our
    /// wr_ids of them.
    pub fn complete(&mut self, first_counter: u32, n: u32) -> Vec<Option<u64>> {
        let ids = (0..n)
            .map(|k| self.ours.complete(first_counter.wrapping_add(k) as u16))
            .collect();
        // SAFETY: `qp` is live.
        unsafe { po_qp_retire_recvs(self.qp, n) };
        ids
    }

    pub fn rings(&self) -> (&[u8], &[u8]) {
        (self.ours_ring.bytes(), self.theirs_ring.bytes())
    }

    /// The RQ doorbell record words (word 0), as the device reads them.
    pub fn dbrecs(&self) -> ([u8; 4], [u8; 4]) {
        let o = self.ours_db.bytes();
        let t = self.theirs_db.bytes();
        ([o[0], o[1], o[2], o[3]], [t[0], t[1], t[2], t[3]])
    }

    /// Our receives outstanding, and the provider's (`rq.head - rq.tail`).
    pub fn outstanding(&self) -> (u32, u32) {
        let mut st = po_sq_state::default();
        // SAFETY: `qp` is live.
        unsafe { po_qp_state(self.qp, &mut st) };
        (self.ours.outstanding(), st.rq_head.wrapping_sub(st.rq_tail))
    }
}

impl Drop for RqPair {
    fn drop(&mut self) {
        // SAFETY: made in `new`, freed once, QP before CQ before context.
        unsafe {
            po_qp_free(self.qp);
            po_cq_free(self.cq);
            po_ctx_free(self.ctx);
        }
        let _ = (&self.theirs_sq, &self.theirs_bf);
    }
}

/// An SRQ of ours and the provider's: `count` WQEs of `stride` bytes,
/// linked 0 -> 1 -> ... -> count - 1 as `mlx5_alloc_srq_buf` links them
/// (no wait queue), head 0, tail `count - 1`.
pub struct SrqPair {
    pub count: u32,
    pub stride: u32,
    ours_ring: Mem,
    ours_db: Mem,
    ours: SharedReceiveQueue,
    theirs_ring: Mem,
    theirs_db: Mem,
    ctx: *mut po_ctx,
    srq: *mut po_srq,
}

impl SrqPair {
    pub fn new(count: u32, stride: u32) -> SrqPair {
        let len = count as usize * stride as usize;
        let mut ours_ring = Mem::zeroed(len);
        for i in 0..count as usize {
            let at = i * stride as usize + 2;
            ours_ring.bytes_mut()[at..at + 2].copy_from_slice(&((i + 1) as u16).to_be_bytes());
        }
        let ours_db = Mem::zeroed(64);
        let d = SrqDesc {
            buf: ours_ring.ptr(),
            dbrec: ours_db.ptr().cast(),
            stride,
            head: 0,
            tail: count - 1,
        };
        // SAFETY: `count * stride` bytes linked as `d` says, and the doorbell
        // record, owned by the pair as long as `ours`.
        let ours = unsafe { SharedReceiveQueue::new(&d, stride / 16 - 1) }.expect("a valid SRQ");
        let theirs_ring = Mem::zeroed(len);
        let theirs_db = Mem::zeroed(64);
        let cfg = po_srq_cfg {
            buf: theirs_ring.ptr().cast(),
            db: theirs_db.ptr().cast(),
            max: count,
            wqe_shift: stride.trailing_zeros(),
            max_gs: stride / 16 - 1,
            srqn: 0x77,
        };
        // SAFETY: a fresh context; the SRQ's buffers are the pair's and
        // outlive it (freed in Drop first).
        let (ctx, srq) = unsafe {
            let ctx = po_ctx_new();
            assert!(!ctx.is_null());
            (ctx, po_srq_new(ctx, &cfg))
        };
        assert!(!srq.is_null());
        SrqPair {
            count,
            stride,
            ours_ring,
            ours_db,
            ours,
            theirs_ring,
            theirs_db,
            ctx,
            srq,
        }
    }

    /// Posts `wrs` to both; returns, per side, the WQE index of each WR
    /// posted (up to the first refused).
    pub fn post(&mut self, wrs: &[(u64, Vec<Sge>)]) -> (Vec<u32>, Vec<u32>) {
        let mut ours = Vec::new();
        if self.ours.check(1).is_ok() {
            for (id, sges) in wrs {
                match self.ours.post(&data_segs(sges), *id) {
                    Ok(i) => ours.push(i),
                    Err(_) => break,
                }
            }
        }
        self.ours.ring_doorbell();
        let recvs = ProviderRecvs::of(wrs);
        let list = &recvs.list;
        let mut theirs = Vec::new();
        // One WR per call, so that the index each goes to is known (the
        // head before the call); the doorbell counter is the same either way.
        for w in list {
            let (mut head, mut tail, mut counter) = (0i32, 0i32, 0u32);
            let mut bad = 0;
            // SAFETY: `srq` is live; `w`'s SGE array outlives the call.
            let err = unsafe {
                let e = po_post_srq_recv(self.srq, w, 1, &mut bad);
                po_srq_state(self.srq, &mut head, &mut tail, &mut counter);
                e
            };
            if err != 0 {
                break;
            }
            // The WQE posted is the one whose wr_id it now holds, among
            // those not yet posted on our record: found by wr_id (unique).
            let idx = (0..self.count)
                // SAFETY: `srq` is live; `i < count`.
                .find(|&i| unsafe { po_srq_wrid(self.srq, i) } == w.wr_id)
                .expect("the posted wr_id is in the SRQ");
            theirs.push(idx);
        }
        (ours, theirs)
    }

    /// WQE `ours_idx` (ours) and `theirs_idx` (theirs) completed.
    pub fn complete(&mut self, ours_idx: u32, theirs_idx: u32) -> Option<u64> {
        let id = self.ours.slots().complete(ours_idx as u16);
        // SAFETY: `srq` is live; the index is one the provider posted.
        unsafe { po_srq_complete(self.srq, theirs_idx) };
        id
    }

    /// What the device reads of WQE `idx` of a ring: its data segments
    /// (byte count, lkey, address), up to the terminator (lkey
    /// `MLX5_INVALID_LKEY`) or the WQE's end; and whether a terminator ended it.
    pub fn scatter(ring: &[u8], stride: u32, idx: u32) -> (Vec<(u32, u32, u64)>, bool) {
        let base = idx as usize * stride as usize;
        let mut out = Vec::new();
        for k in 1..stride as usize / 16 {
            let at = base + k * 16;
            let w = |o: usize| u32::from_be_bytes(ring[at + o..at + o + 4].try_into().unwrap());
            let addr = u64::from_be_bytes(ring[at + 8..at + 16].try_into().unwrap());
            if w(4) == 0x100 && w(0) == 0 && addr == 0 {
                return (out, true);
            }
            out.push((w(0), w(4), addr));
        }
        (out, false)
    }

    pub fn rings(&self) -> (&[u8], &[u8]) {
        (self.ours_ring.bytes(), self.theirs_ring.bytes())
    }

    pub fn dbrecs(&self) -> ([u8; 4], [u8; 4]) {
        let o = self.ours_db.bytes();
        let t = self.theirs_db.bytes();
        ([o[0], o[1], o[2], o[3]], [t[0], t[1], t[2], t[3]])
    }

    /// Whether the provider marks WQE `i` free (completed, not relinked).
    pub fn theirs_marked_free(&self, i: u32) -> bool {
        // SAFETY: `srq` is live; `i < count` (the caller's).
        unsafe { po_srq_marked_free(self.srq, i) != 0 }
    }
}

impl Drop for SrqPair {
    fn drop(&mut self) {
        // SAFETY: made in `new`, freed once, SRQ before context.
        unsafe {
            po_srq_free(self.srq);
            po_ctx_free(self.ctx);
        }
    }
}
