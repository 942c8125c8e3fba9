//! Posting sends through rdma-core's extended verbs (`ibv_qp_ex`): a
//! chunk of up to [`CHUNK`](super::CHUNK) WRs is one `ibv_wr_start` ...
//! `ibv_wr_complete` batch, each WR built with `qpx->wr_id` and
//! `qpx->wr_flags` set, then its operation (`ibv_wr_rdma_write`, ...), its
//! UD address and its data (`ibv_wr_set_sge`, `ibv_wr_set_inline_data`
//! of one buffer, `ibv_wr_set_sge_list` for none). A batch is all or
//! nothing: a provider that refuses a WR fails `ibv_wr_complete` and posts
//! none of the batch (no WR is refused half-built here: the front end
//! checked them, so `ibv_wr_abort` has no caller). Chunks with a WR of
//! several SGEs go through `ibv_post_send` instead (`post.rs`: rdma-core
//! 44's rxe miscounts their length). Receives stay on `ibv_post_recv`
//! (rdma-core has no extended receive).

use super::*;
use std::mem::MaybeUninit;

/// SGEs per WR built on the stack (more: a heap buffer).
const STACK_SGES: usize = 16;

/// Builds the operation of `w` (`ibv_wr_rdma_write`, `ibv_wr_send`, ...,
/// and a UD send's `ibv_wr_set_ud_addr`) in the batch open on `qpx`.
///
/// # Safety
/// `qpx` is a live extended QP made with the send ops `w` needs (a window
/// WR's: `VerbsQp::mw_ex`), inside a batch begun by `ibv_wr_start`, with
/// `wr_id` and `wr_flags` set; `w` was checked by the front end (keys, the
/// AH of this PD, borrowed for the call; a bind's window of this PD's verbs
/// device).
#[inline(always)]
unsafe fn set_op(qpx: *mut ibv_qp_ex, w: &crate::ib::wr::SendWr<'_>) {
    // SAFETY: the caller's contract.
    unsafe {
        match w.op {
            WrOp::RdmaWrite { remote } => {
                ibv_wr_rdma_write(qpx, remote.rkey.0, remote.addr);
            }
            WrOp::RdmaWriteWithImm { remote, imm } => {
                ibv_wr_rdma_write_imm(qpx, remote.rkey.0, remote.addr, imm.to_be());
            }
            WrOp::Send => ibv_wr_send(qpx),
            WrOp::SendWithImm { imm } => ibv_wr_send_imm(qpx, imm.to_be()),
            WrOp::RdmaRead { remote } => {
                ibv_wr_rdma_read(qpx, remote.rkey.0, remote.addr);
            }
            WrOp::AtomicCmpSwp {
                remote,
                compare,
                swap,
            } => ibv_wr_atomic_cmp_swp(qpx, remote.rkey.0, remote.addr, compare, swap),
            WrOp::AtomicFetchAdd { remote, add } => {
                ibv_wr_atomic_fetch_add(qpx, remote.rkey.0, remote.addr, add);
            }
            WrOp::MaskedCmpSwap { .. } | WrOp::MaskedFetchAdd { .. } => {
                unreachable!("the front end refuses masked atomics on the verbs path")
            }
            WrOp::BindMw { mw, bind } => {
                // (The builder copies the window's rkey now: the copy
                // need not outlive it.)
                let mut copy = MaybeUninit::<ibv_mw>::uninit();
                let b = mw::bind_wr(mw, &bind, &mut copy);
                ibv_wr_bind_mw(qpx, b.mw, b.rkey, &b.bind_info);
            }
            WrOp::LocalInv { rkey } => ibv_wr_local_inv(qpx, rkey.0),
            WrOp::SendWithInv { rkey } => ibv_wr_send_inv(qpx, rkey.0),
            WrOp::UdSend { dest: d, imm } => {
                match imm {
                    None => ibv_wr_send(qpx),
                    Some(i) => ibv_wr_send_imm(qpx, i.to_be()),
                }
                ibv_wr_set_ud_addr(qpx, d.ah.inner.raw as *mut ibv_ah, d.remote_qpn, d.qkey);
            }
        }
    }
}

/// What `ibv_wr_complete` returned, as the post's result (`len` WRs in the
/// batch, none posted on an error).
#[inline(always)]
fn complete_result(rc: i32, len: usize) -> Result<()> {
    match rc {
        0 => Ok(()),
        libc::ENOMEM => Err(Error::QueueFull),
        e => Err(complete_error(e, len)),
    }
}

#[cold]
#[inline(never)]
fn complete_error(e: i32, len: usize) -> Error {
    Error::Verbs {
        call: "ibv_wr_complete",
        errno: if e > 0 { e } else { errno() },
        detail: format!(" (none of a batch of {len} WRs was posted)"),
    }
}

impl VerbsQp {
    /// One WR of one SGE or one inline buffer as its own extended-verbs
    /// batch (`post_send`'s single WR: none of `post_chunk_ex`'s loop and
    /// scratch); with `force`, signaled whatever its flags.
    #[inline]
    pub(super) fn post_one_ex(&mut self, w: &crate::ib::wr::SendWr<'_>, force: bool) -> Result<()> {
        debug_assert!(w.sges.len() == 1);
        let qpx = self.qpx;
        let seq = self.posted;
        let flags = self.track(w, seq, force);
        let g = &w.sges[0];
        // SAFETY: live extended QP (made with the send ops used), posted to
        // only by its one owner (`&mut self`); `wr_id` and `wr_flags` are
        // plain fields the builder reads; its operands and the SGE's (or
        // the inline bytes', which the provider copies now) memory were
        // checked by the front end; one batch, begun and completed here.
        let rc = unsafe {
            ibv_wr_start(qpx);
            (*qpx).wr_id = seq;
            (*qpx).wr_flags = flags;
            set_op(qpx, w);
            if w.inline {
                // (rxe before v56: the single-buffer setter, as below.)
                ibv_wr_set_inline_data(qpx, g.addr as usize as *mut _, g.len as usize);
            } else {
                ibv_wr_set_sge(qpx, g.lkey.0, g.addr, g.len);
            }
            ibv_wr_complete(qpx)
        };
        if rc == 0 {
            self.posted = seq + 1;
            self.progress.sends_posted(self.posted as u32);
        }
        complete_result(rc, 1)
    }

    /// One extended-verbs batch of the WRs `range` of `all`; with
    /// `signal_last`, the last one is signaled whatever its flags.
    pub(super) fn post_chunk_ex<W: SendWrs + ?Sized>(
        &mut self,
        all: &W,
        range: std::ops::Range<usize>,
        signal_last: bool,
    ) -> Result<()> {
        let qpx = self.qpx;
        let len = range.len();
        // SAFETY: live extended QP (made with the send ops used below),
        // posted to only by its one owner (`&mut self`).
        unsafe { ibv_wr_start(qpx) };
        let mut sge_store = [const { MaybeUninit::<ibv_sge>::uninit() }; STACK_SGES];
        let mut sge_vec: Vec<ibv_sge> = Vec::new();
        let mut inl: Vec<u8> = Vec::new();
        let mut binds = false;
        for (i, at) in range.clone().enumerate() {
            let w = all.wr(at);
            let seq = self.posted + i as u64;
            let flags = self.track(&w, seq, signal_last && i + 1 == len);
            // SAFETY: inside the batch begun by `ibv_wr_start`; `wr_id` and
            // `wr_flags` are plain fields the next builder reads; the
            // builder gets the operands the front end checked.
            unsafe {
                (*qpx).wr_id = seq;
                (*qpx).wr_flags = flags;
                set_op(qpx, &w);
            }
            if let WrOp::BindMw { .. } | WrOp::LocalInv { .. } = w.op {
                // No data setter follows these builders (`ibv_wr_post(3)`:
                // mlx5's finish the UMR WQE themselves).
                binds |= matches!(w.op, WrOp::BindMw { .. });
                continue;
            }
            let n = w.sges.len();
            if w.inline {
                // One buffer: rdma-core's rxe before v56 leaves the length
                // of `ibv_wr_set_inline_data_list` at 0 ("providers/rxe:
                // Fix missing length accumulation"); its single-buffer
                // setter is right. Several pieces are gathered first.
                if n == 1 {
                    let g = &w.sges[0];
                    // SAFETY: in the batch, after this WR's builder; the
                    // provider copies the payload (memory Sge::new checked)
                    // now.
                    unsafe {
                        ibv_wr_set_inline_data(qpx, g.addr as usize as *mut _, g.len as usize)
                    };
                } else {
                    inl.clear();
                    for g in w.sges {
                        let at = inl.len();
                        inl.reserve(g.len as usize);
                        // SAFETY: `Sge::new` / `Sge::bytes` checked that
                        // `len` bytes at `addr` are live memory of ours;
                        // `inl` has room for them after `at`. A raw copy,
                        // as the provider's own memcpy of the old path (a
                        // peer may write registered memory: the bytes are
                        // then unspecified, no reference is made to them).
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                g.addr as usize as *const u8,
                                inl.as_mut_ptr().add(at),
                                g.len as usize,
                            );
                            inl.set_len(at + g.len as usize);
                        }
                    }
                    // SAFETY: in the batch, after this WR's builder; `inl`
                    // is copied now.
                    unsafe { ibv_wr_set_inline_data(qpx, inl.as_mut_ptr().cast(), inl.len()) };
                }
            } else if n == 1 {
                let g = &w.sges[0];
                // SAFETY: in the batch, after this WR's builder.
                unsafe { ibv_wr_set_sge(qpx, g.lkey.0, g.addr, g.len) };
            } else {
                let base: *mut ibv_sge = if n <= STACK_SGES {
                    sge_store.as_mut_ptr().cast()
                } else {
                    sge_vec.clear();
                    sge_vec.reserve(n);
                    sge_vec.as_mut_ptr()
                };
                for (k, g) in w.sges.iter().enumerate() {
                    // SAFETY: `base` has room for `n` entries, `k < n`.
                    unsafe {
                        base.add(k).write(ibv_sge {
                            addr: g.addr,
                            length: g.len,
                            lkey: g.lkey.0,
                        })
                    };
                }
                // SAFETY: in the batch, after this WR's builder; the `n`
                // entries were written (the provider copies them now).
                unsafe { ibv_wr_set_sge_list(qpx, n, base) };
            }
        }
        // SAFETY: ends the batch `ibv_wr_start` began (on failure nothing
        // of it is posted and the provider has released the batch).
        let rc = unsafe { ibv_wr_complete(qpx) };
        if binds && rc == 0 {
            let seq = self.posted;
            self.note_binds_posted(|b| mw::binds_posted(b, all, range, len, seq));
        }
        if rc == 0 {
            self.posted += len as u64;
            self.progress.sends_posted(self.posted as u32);
        }
        complete_result(rc, len)
    }
}
