//! Posting on the verbs path: send WRs become `ibv_send_wr` chains given to
//! `ibv_post_send`, receive WRs `ibv_recv_wr` chains given to
//! `ibv_post_recv`, in chunks of [`CHUNK`](super::CHUNK) built on the stack.

use super::*;

impl VerbsQp {
    /// Posts `wrs` with `ibv_post_send`, 32 WRs per call (through the
    /// extended verbs where the QP has them: `post_ex.rs`, 32 WRs per
    /// `ibv_wr_start` ... `ibv_wr_complete` batch). The front end
    /// checked each WR against the QP's state and limits
    /// (`Qp::post_send_checked`); here room for every WR under `max_send_wr`
    /// outstanding, and the CQ credits: on those errors nothing is posted.
    ///
    /// The claims of the type-2 binds not posted (`Mw::claim_bind`, made by
    /// the front end) go back on an error (those posted are outstanding
    /// until their WRs retire: `mw.rs`).
    pub(crate) fn post_send<W: SendWrs + ?Sized>(&mut self, wrs: &W) -> Result<()> {
        let before = self.posted;
        let r = self.post_send_all(wrs);
        if r.is_err() {
            mw::binds_not_posted(wrs, (self.posted - before) as usize);
        }
        r
    }

    /// [`Self::post_send`] but for the claims it gives back.
    fn post_send_all<W: SendWrs + ?Sized>(&mut self, wrs: &W) -> Result<()> {
        debug_assert!(!self.is_split(), "the front end refuses a split QP's posts");
        let count = wrs.count();
        let outstanding = self.posted - self.retired;
        if outstanding + count as u64 > self.max_post as u64 {
            return Err(Error::QueueFull);
        }
        if count == 0 {
            return Ok(());
        }
        if self.counts && !self.credits.take(count as u32) {
            return Err(Error::CqFull);
        }
        // When this batch left at most half of the CQ's credits free, its
        // last WR makes a CQE: a later post refused with CqFull is then
        // cured by polling, not stuck behind unsignaled WRs that hold credits
        // and that no CQE will ever retire (and the WR that takes the last
        // credit makes one, or none would give the credits back).
        let credits_low =
            self.counts && self.credits.free() as u64 * 2 <= self.credits.depth() as u64;
        if count == 1 {
            // One WR (the commonest post): built alone, without a chunk's
            // loops and scratch arrays.
            let w = wrs.wr(0);
            // (A window WR takes the old call where the extended QP has no
            // builder for it: `mw_ex`.)
            let ex = !self.qpx.is_null() && (self.mw_ex || !mw::is_window_op(&w.op));
            let r = if ex && w.sges.len() == 1 {
                self.post_one_ex(&w, credits_low)
            } else if !ex && w.sges.len() <= 1 {
                self.post_one(&w, credits_low)
            } else if ex && (w.sges.is_empty() || w.inline) {
                self.post_chunk_ex(wrs, 0..1, credits_low)
            } else {
                // (Several SGEs: the old call, as below.)
                self.post_chunk(wrs, 0..1, credits_low)
            };
            if r.is_err() && self.counts {
                // Not posted: its credit goes back.
                self.credits.give(1);
            }
            return r;
        }
        let before = self.posted;
        for start in (0..count).step_by(CHUNK) {
            let end = (start + CHUNK).min(count);
            let last = credits_low && end == count;
            // A chunk with a WR of several SGEs goes through
            // `ibv_post_send` (the QP takes both): rdma-core's rxe before
            // v56 sums the first SGE's length `num_sge` times in
            // `ibv_wr_set_sge_list` ("rxe: Fix dma.length computation").
            // So does a chunk with a window WR the extended QP has no
            // builder for (`mw_ex`).
            let r = if self.qpx.is_null()
                || (start..end).any(|i| {
                    let w = wrs.wr(i);
                    (w.sges.len() > 1 && !w.inline) || (!self.mw_ex && mw::is_window_op(&w.op))
                }) {
                self.post_chunk(wrs, start..end, last)
            } else {
                self.post_chunk_ex(wrs, start..end, last)
            };
            if let Err(e) = r {
                // Credits of the WRs the provider did not take go back.
                if self.counts {
                    self.credits
                        .give(count as u32 - (self.posted - before) as u32);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Records the send WR `w` posted as sequence number `seq` (its
    /// caller's wr_id, whether its CQE is auto-signal's only) and returns
    /// its `send_flags`. Auto-signal, as the direct path does: a hidden CQE
    /// every `auto_signal` unsignaled WRs keeps the accounting moving; with
    /// `force`, this one is signaled whatever its flags.
    // (Inlined everywhere: out of line it cost the lean post a call.)
    #[inline(always)]
    pub(super) fn track(&mut self, w: &crate::ib::wr::SendWr<'_>, seq: u64, force: bool) -> u32 {
        let signaled = w.flags.contains(SendFlags::SIGNALED);
        let forced = !signaled && (self.unsignaled_run + 1 >= self.auto_signal || force);
        self.unsignaled_run = if signaled || forced {
            0
        } else {
            self.unsignaled_run + 1
        };
        let slot = (seq % self.max_post as u64) as usize;
        self.wr_ids.set(slot, w.wr_id);
        self.hidden.set(slot, forced);
        let mut flags = 0;
        if signaled || forced {
            flags |= ibv_send_flags::IBV_SEND_SIGNALED.0;
        }
        // (Also on the extended path: rxe's `ibv_wr_set_inline_data_list`
        // leaves `send_flags` as `wr_flags` has it, and the kernel copies
        // the payload from the WQE only with IBV_SEND_INLINE there.)
        if w.inline {
            flags |= ibv_send_flags::IBV_SEND_INLINE.0;
        }
        if w.flags.contains(SendFlags::SOLICITED) {
            flags |= ibv_send_flags::IBV_SEND_SOLICITED.0;
        }
        if w.flags.contains(SendFlags::FENCE) {
            flags |= ibv_send_flags::IBV_SEND_FENCE.0;
        }
        flags
    }

    /// One WR of at most one SGE through `ibv_post_send` (`post_send`'s
    /// single WR on the old calls: one `ibv_send_wr` and one `ibv_sge` on
    /// the stack); with `force`, signaled whatever its flags.
    #[inline]
    fn post_one(&mut self, w: &crate::ib::wr::SendWr<'_>, force: bool) -> Result<()> {
        let seq = self.posted;
        let flags = self.track(w, seq, force);
        let mut sge = std::mem::MaybeUninit::<ibv_sge>::uninit();
        let mut mwc = std::mem::MaybeUninit::<ibv_mw>::uninit();
        // SAFETY: ibv_send_wr is plain data (pointers and integers); zero is valid.
        let mut v: ibv_send_wr = unsafe { std::mem::zeroed() };
        v.wr_id = seq;
        v.send_flags = flags;
        if let [g] = w.sges {
            v.sg_list = sge.write(ibv_sge {
                addr: g.addr,
                length: g.len,
                lkey: g.lkey.0,
            });
            v.num_sge = 1;
        }
        fill_op(&mut v, w, &mut mwc);
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: live QP; the WR, its SGE and window copy outlive the
        // call; the SGE names registered memory (Sge::new checked the
        // range) or, inline, bytes the provider copies now.
        let rc = unsafe { ibv_post_send(self.qp, &mut v, &mut bad) };
        if let (WrOp::BindMw { .. }, 0) = (w.op, rc) {
            self.note_binds_posted(|b| mw::binds_posted(b, std::slice::from_ref(w), 0..1, 1, seq));
        }
        if rc == 0 {
            self.posted = seq + 1;
            self.progress.sends_posted(self.posted as u32);
            return Ok(());
        }
        Err(post_error(rc))
    }

    /// One `ibv_post_send` of up to `CHUNK` WRs; with `signal_last`, the
    /// last one is signaled whatever its flags.
    fn post_chunk<W: SendWrs + ?Sized>(
        &mut self,
        all: &W,
        range: std::ops::Range<usize>,
        signal_last: bool,
    ) -> Result<()> {
        use std::mem::MaybeUninit;
        let len = range.len();
        let nsge: usize = range.clone().map(|i| all.wr(i).sges.len()).sum();
        // Only the entries used are written (no zeroing of whole arrays on
        // every post: that showed in the latency under emulation).
        let mut sge_store = [const { MaybeUninit::<ibv_sge>::uninit() }; CHUNK * 4];
        let mut sge_vec: Vec<ibv_sge>;
        let sge_base: *mut ibv_sge = if nsge <= sge_store.len() {
            sge_store.as_mut_ptr().cast()
        } else {
            // Many-SGE batches are rare; they may allocate.
            sge_vec = Vec::with_capacity(nsge);
            sge_vec.as_mut_ptr()
        };
        let mut wr_store = [const { MaybeUninit::<ibv_send_wr>::uninit() }; CHUNK];
        // The copies of the windows type-2 binds name (`mw::bind_wr`).
        let mut mw_store = [const { MaybeUninit::<ibv_mw>::uninit() }; CHUNK];
        let mut binds = false;
        let mut s = 0;
        for (i, at) in range.clone().enumerate() {
            let w = all.wr(at);
            let first = s;
            for g in w.sges {
                // SAFETY: `sge_base` has room for `nsge` entries and `s < nsge`.
                unsafe {
                    sge_base.add(s).write(ibv_sge {
                        addr: g.addr,
                        length: g.len,
                        lkey: g.lkey.0,
                    })
                };
                s += 1;
            }
            let seq = self.posted + i as u64;
            let flags = self.track(&w, seq, signal_last && i + 1 == len);
            // SAFETY: ibv_send_wr is plain data (pointers and integers); zero is valid.
            let v = wr_store[i].write(unsafe { std::mem::zeroed() });
            v.wr_id = seq;
            // SAFETY: `first <= nsge`: inside (or one past) the SGE storage.
            v.sg_list = unsafe { sge_base.add(first) };
            v.num_sge = w.sges.len() as i32;
            v.send_flags = flags;
            binds |= matches!(w.op, WrOp::BindMw { .. });
            fill_op(v, &w, &mut mw_store[i]);
        }
        // SAFETY: the first `len` entries were written above.
        let vwrs: &mut [ibv_send_wr] =
            unsafe { std::slice::from_raw_parts_mut(wr_store.as_mut_ptr().cast(), len) };
        for i in 1..len {
            let next: *mut ibv_send_wr = &mut vwrs[i];
            vwrs[i - 1].next = next;
        }
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: live QP; the WR chain and SGE arrays outlive the call; the
        // SGEs name registered memory (Sge::new checked the ranges).
        let rc = unsafe { ibv_post_send(self.qp, vwrs.as_mut_ptr(), &mut bad) };
        // WRs before `bad` were posted: count them, so their completions match.
        let posted = posted_count(rc, vwrs, bad);
        if binds && posted > 0 {
            let seq = self.posted;
            self.note_binds_posted(|b| mw::binds_posted(b, all, range, posted, seq));
        }
        self.posted += posted as u64;
        self.progress.sends_posted(self.posted as u32);
        match rc {
            0 => Ok(()),
            libc::ENOMEM => Err(Error::QueueFull),
            e => Err(Error::Verbs {
                call: "ibv_post_send",
                errno: if e > 0 { e } else { errno() },
                detail: format!(" ({posted} of a chunk of {len} WRs were posted)"),
            }),
        }
    }

    /// Posts receives with `ibv_post_recv`, 32 per call. Checked first (SGE
    /// count, room under `max_recv_wr`): on those errors nothing is posted.
    /// Receives take at most `n` SGEs (the QP's config), whatever the
    /// device granted.
    pub(crate) fn limit_recv_sge(&mut self, n: u32) {
        self.caps.max_recv_sge = self.caps.max_recv_sge.min(n);
    }

    pub(crate) fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        if self.is_split() {
            return Err(Error::QpSplit { qpn: self.qpn });
        }
        if self.srq.is_some() && !wrs.is_empty() {
            return Err(Error::SrqAttached { qpn: self.qpn });
        }
        for w in wrs {
            if w.sges.len() > self.caps.max_recv_sge as usize {
                return Err(Error::TooManySges {
                    sges: w.sges.len(),
                    max: self.caps.max_recv_sge,
                    limit: "the QP's max_recv_sge",
                });
            }
        }
        if self.recv_posted - self.recv_done + wrs.len() as u64 > self.max_recv as u64 {
            return Err(Error::RecvQueueFull);
        }
        if self.counts && !self.credits.take(wrs.len() as u32) {
            return Err(Error::CqFull);
        }
        let before = self.recv_posted;
        let r = self.post_recv_chunks(wrs);
        if r.is_err() && self.counts {
            // Credits of the WRs the provider did not take go back.
            self.credits
                .give(wrs.len() as u32 - (self.recv_posted - before) as u32);
        }
        r
    }

    /// `ibv_post_recv` of `wrs`, 32 per call (checked by `post_recv`).
    fn post_recv_chunks(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        for chunk in wrs.chunks(CHUNK) {
            use std::mem::MaybeUninit;
            let nsge: usize = chunk.iter().map(|w| w.sges.len()).sum();
            // Only the entries used are written, as in `post_chunk`.
            let mut sge_store = [const { MaybeUninit::<ibv_sge>::uninit() }; CHUNK * 4];
            let mut sge_vec: Vec<ibv_sge>;
            let sge_base: *mut ibv_sge = if nsge <= sge_store.len() {
                sge_store.as_mut_ptr().cast()
            } else {
                // Many-SGE batches are rare; they may allocate.
                sge_vec = Vec::with_capacity(nsge);
                sge_vec.as_mut_ptr()
            };
            let mut wr_store = [const { MaybeUninit::<ibv_recv_wr>::uninit() }; CHUNK];
            let mut k = 0;
            for (i, w) in chunk.iter().enumerate() {
                let first = k;
                for g in w.sges {
                    // SAFETY: `sge_base` has room for `nsge` entries and `k < nsge`.
                    unsafe {
                        sge_base.add(k).write(ibv_sge {
                            addr: g.addr,
                            length: g.len,
                            lkey: g.lkey.0,
                        })
                    };
                    k += 1;
                }
                let seq = self.recv_posted + i as u64;
                self.recv_ids
                    .set((seq % self.max_recv as u64) as usize, w.wr_id);
                wr_store[i].write(ibv_recv_wr {
                    wr_id: RECV_TAG | seq,
                    next: std::ptr::null_mut(),
                    // SAFETY: `first <= nsge`: inside (or one past) the SGE storage.
                    sg_list: unsafe { sge_base.add(first) },
                    num_sge: w.sges.len() as i32,
                });
            }
            // SAFETY: the first `chunk.len()` entries were written above.
            let vwrs: &mut [ibv_recv_wr] = unsafe {
                std::slice::from_raw_parts_mut(wr_store.as_mut_ptr().cast(), chunk.len())
            };
            for i in 1..chunk.len() {
                let next: *mut ibv_recv_wr = &mut vwrs[i];
                vwrs[i - 1].next = next;
            }
            let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
            // SAFETY: live QP; the WR chain and SGE array outlive the call; the
            // SGEs name registered memory (Sge::new checked the ranges).
            let rc = unsafe { ibv_post_recv(self.qp, vwrs.as_mut_ptr(), &mut bad) };
            let posted = posted_count(rc, vwrs, bad);
            self.recv_posted += posted as u64;
            self.progress.recvs_posted(self.recv_posted);
            match rc {
                0 => {}
                libc::ENOMEM => return Err(Error::QueueFull),
                e => {
                    return Err(Error::Verbs {
                        call: "ibv_post_recv",
                        errno: if e > 0 { e } else { errno() },
                        detail: format!(
                            " ({posted} of a chunk of {} WRs were posted)",
                            chunk.len()
                        ),
                    })
                }
            }
        }
        Ok(())
    }
}

/// The opcode and its operands of `w` in the zeroed `v` (the caller sets
/// `wr_id`, flags and SGEs); a type-2 bind's copy of its window in `mwc`
/// (`mw::bind_wr`), which must outlive the post.
#[inline(always)]
fn fill_op(
    v: &mut ibv_send_wr,
    w: &crate::ib::wr::SendWr<'_>,
    mwc: &mut std::mem::MaybeUninit<ibv_mw>,
) {
    match w.op {
        WrOp::RdmaWrite { remote } => {
            v.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
            v.wr.rdma = rdma_t {
                remote_addr: remote.addr,
                rkey: remote.rkey.0,
            };
        }
        WrOp::RdmaWriteWithImm { remote, imm } => {
            v.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
            v.wr.rdma = rdma_t {
                remote_addr: remote.addr,
                rkey: remote.rkey.0,
            };
            v.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
        }
        WrOp::Send => v.opcode = ibv_wr_opcode::IBV_WR_SEND,
        WrOp::SendWithImm { imm } => {
            v.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_IMM;
            v.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
        }
        WrOp::RdmaRead { remote } => {
            v.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ;
            v.wr.rdma = rdma_t {
                remote_addr: remote.addr,
                rkey: remote.rkey.0,
            };
        }
        WrOp::AtomicCmpSwp {
            remote,
            compare,
            swap,
        } => {
            v.opcode = ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP;
            v.wr.atomic = atomic_t {
                remote_addr: remote.addr,
                compare_add: compare,
                swap,
                rkey: remote.rkey.0,
            };
        }
        WrOp::AtomicFetchAdd { remote, add } => {
            v.opcode = ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD;
            v.wr.atomic = atomic_t {
                remote_addr: remote.addr,
                compare_add: add,
                swap: 0,
                rkey: remote.rkey.0,
            };
        }
        WrOp::MaskedCmpSwap { .. } | WrOp::MaskedFetchAdd { .. } => {
            unreachable!("the front end refuses masked atomics on the verbs path")
        }
        WrOp::BindMw { mw, bind } => {
            v.opcode = ibv_wr_opcode::IBV_WR_BIND_MW;
            // SAFETY: the front end checked the window is of this PD's
            // verbs device (type 2): its `raw` is a live `*mut ibv_mw`.
            v.bind_mw_tso_union.bind_mw = unsafe { mw::bind_wr(mw, &bind, mwc) };
        }
        WrOp::LocalInv { rkey } => {
            v.opcode = ibv_wr_opcode::IBV_WR_LOCAL_INV;
            v.imm_data_invalidated_rkey_union.invalidated_rkey = rkey.0;
        }
        WrOp::SendWithInv { rkey } => {
            v.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_INV;
            v.imm_data_invalidated_rkey_union.invalidated_rkey = rkey.0;
        }
        WrOp::UdSend { dest: d, imm } => {
            v.opcode = match imm {
                None => ibv_wr_opcode::IBV_WR_SEND,
                Some(i) => {
                    v.imm_data_invalidated_rkey_union.imm_data = i.to_be();
                    ibv_wr_opcode::IBV_WR_SEND_WITH_IMM
                }
            };
            // (Checked by the caller: the destination's AH is of
            // this PD; the WR borrows it for the call.)
            v.wr.ud = ud_t {
                ah: d.ah.inner.raw as *mut ibv_ah,
                remote_qpn: d.remote_qpn,
                remote_qkey: d.qkey,
            };
        }
    }
}

/// `ibv_post_send`'s error `rc` for one WR, not posted.
#[cold]
#[inline(never)]
fn post_error(rc: i32) -> Error {
    match rc {
        libc::ENOMEM => Error::QueueFull,
        e => Error::Verbs {
            call: "ibv_post_send",
            errno: if e > 0 { e } else { errno() },
            detail: " (a single WR, not posted)".into(),
        },
    }
}
