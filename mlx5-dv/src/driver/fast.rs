//! Posting without staging: [`SendQueue::post_segs`] builds a WQE of one
//! WQEBB in place in the SQ ring from segment values its caller computed in
//! registers and rings the doorbell with a BlueFlame copy of it;
//! [`SendQueue::post_inline`] does the same for an inline WRITE or SEND;
//! [`SendQueue::reserve`] and [`Reserved`] fill a batch and ring once. The
//! bytes are exactly what [`SendQueue::post`] (the codec's writer) writes
//! for the same WR (`driver/fast_tests.rs` checks it), so the device cannot
//! tell the two apart. UCX builds its WQEs the same way (`ib_mlx5.inl`).

use super::sq::{auto_signal, SendQueue, Slot};
use crate::prm::{CtrlFlags, WqeOpcode, WQEBB};
use crate::wqe::{ctrl_stored, inline_ds, put_stored, CtrlQpn, Seg, WqeError};

/// A WQE of one WQEBB written and counted in its queue, which it borrows,
/// not yet rung ([`SendQueue::write_segs_gated`]; [`Written::ring`]): its index
/// and its place in the ring. Dropped without a ring, the WQE stays posted
/// and the queue's next doorbell publishes it.
#[must_use = "a WQE written is rung by Written::ring"]
pub struct Written<'q> {
    sq: &'q mut SendQueue,
    pi: u32,
    wqe: *mut u8,
}

impl Written<'_> {
    /// Sends posted in all on the queue, this one included, modulo 2^32
    /// ([`SendQueue::posted_count`]).
    #[inline(always)]
    pub fn posted_count(&self) -> u32 {
        self.sq.posted
    }

    /// The doorbell: the doorbell record and the BlueFlame copy of the
    /// WQE (or [`SendQueue::ring_doorbell`], as in
    /// [`SendQueue::post_segs`]).
    #[inline(always)]
    pub fn ring(self) {
        let Written { sq, pi, wqe } = self;
        // (`batch_start` read after the ring stores, so that it need not be
        // held in a register across them.)
        if sq.batch_start != pi as u64 || crate::trace::in_capture() {
            sq.batch_last = pi;
            sq.ring_doorbell();
            return;
        }
        // (`batch_last` is not stored: with `batch_start` at `pi` after the
        // doorbell, nothing reads it before the next post sets it.)
        // SAFETY: `wqe` is WQE `pi`'s WQEBB in `sq`'s ring (`write_segs_unchecked`),
        // borrowed with `sq` since.
        unsafe { sq.ring_bf_one(wqe, pi.wrapping_add(1)) };
    }
}

/// A [`Written`] WQE whose doorbell is a BlueFlame copy
/// ([`SendQueue::write_segs_bf`]).
#[must_use = "a WQE written is rung by WrittenBf::ring"]
pub struct WrittenBf<'q>(Written<'q>);

impl WrittenBf<'_> {
    /// As [`Written::posted_count`].
    #[inline(always)]
    pub fn posted_count(&self) -> u32 {
        self.0.posted_count()
    }

    /// The doorbell: the doorbell record and the BlueFlame copy of the
    /// WQE, with no call.
    #[inline(always)]
    pub fn ring(self) {
        let Written { sq, pi, wqe } = self.0;
        debug_assert!(sq.batch_start == pi as u64);
        // SAFETY: `wqe` is WQE `pi`'s WQEBB in `sq`'s ring
        // (`write_segs_unchecked`), borrowed with `sq` since; the queue
        // rings from registers (`write_segs_bf`: no bit 32 in `batch_start`,
        // so `bf_size >= 64`).
        unsafe { sq.ring_bf_one(wqe, pi.wrapping_add(1)) };
    }
}

impl SendQueue {
    /// Posts a WQE of the ctrl segment and the `N` segments given (`N` at
    /// most 3: DS `1 + N`, one WQEBB), written straight into the ring at
    /// the producer index, then the doorbell: the doorbell record and a
    /// BlueFlame copy of the WQEBB, in rdma-core's order (`post_send_db`);
    /// when WQEs posted since the last doorbell precede it, the BlueFlame
    /// registers are smaller than 64 bytes, or tracing is on, the doorbell
    /// is [`Self::ring_doorbell`]'s. Auto-signal applies
    /// as in [`Self::post`]; `flags` are the ctrl segment's `fm_ce_se`, `imm`
    /// its immediate (0 unless `opcode` carries one). The caller vouches
    /// that the segments suit `opcode`: what the device reads is its own
    /// business (a READ without a remote-address segment fails on the wire,
    /// not here); every byte of the `(1 + N) * 16` the device reads is
    /// written.
    ///
    /// Errors, with nothing written: [`WqeError::WrLimit`] when `max_post`
    /// WRs are outstanding, [`WqeError::QueueFull`] when no WQEBB is free.
    #[inline(always)]
    pub fn post_segs<const N: usize>(
        &mut self,
        opcode: WqeOpcode,
        flags: CtrlFlags,
        imm: u32,
        segs: [Seg; N],
        wr_id: u64,
    ) -> Result<(), WqeError> {
        self.write_segs_checked(opcode, flags, imm, segs, wr_id)?
            .ring();
        Ok(())
    }

    /// [`Self::post_segs`]'s WQE, written when the gate is open
    /// ([`Self::set_gate`]) and fewer than `max_post` WRs are outstanding,
    /// and not rung: [`Written::ring`] rings it. The one check is the
    /// gate's (an open gate means the room check is implied). `None`, with
    /// nothing written, when the gate is closed or `max_post` WRs are
    /// outstanding.
    #[inline(always)]
    pub fn write_segs_gated<const N: usize>(
        &mut self,
        opcode: WqeOpcode,
        flags: CtrlFlags,
        imm: u32,
        segs: [Seg; N],
        wr_id: u64,
    ) -> Option<Written<'_>> {
        if self.posted.wrapping_sub(self.retired) >= self.gate {
            return None;
        }
        Some(self.write_segs_unchecked(opcode, flags, imm, segs, wr_id))
    }

    /// [`Self::write_segs_gated`] when, besides, its doorbell is a
    /// BlueFlame copy: no WQE posted since the last doorbell precedes it,
    /// and the queue rings from registers (`bf_size` of 64 bytes or more,
    /// tracing off). `None`, with nothing written, otherwise. Its
    /// [`WrittenBf::ring`] makes no call (the caller's path then needs no
    /// register saved across one), which [`Written::ring`] may.
    #[inline(always)]
    pub fn write_segs_bf<const N: usize>(
        &mut self,
        opcode: WqeOpcode,
        flags: CtrlFlags,
        imm: u32,
        segs: [Seg; N],
        wr_id: u64,
    ) -> Option<WrittenBf<'_>> {
        if self.posted.wrapping_sub(self.retired) >= self.gate || !self.bf_ready() {
            return None;
        }
        Some(WrittenBf(
            self.write_segs_unchecked(opcode, flags, imm, segs, wr_id),
        ))
    }

    /// Whether the next post's doorbell is a BlueFlame copy from registers:
    /// nothing posted since the last doorbell, and no bit 32
    /// (`NO_BF_FROM_REGS`) in `batch_start`; tracing off.
    #[inline(always)]
    pub(super) fn bf_ready(&self) -> bool {
        self.batch_start == self.pi as u64 && !crate::trace::in_capture()
    }

    /// Checks of [`Self::post_segs`], then [`Self::write_segs_unchecked`].
    #[inline(always)]
    fn write_segs_checked<const N: usize>(
        &mut self,
        opcode: WqeOpcode,
        flags: CtrlFlags,
        imm: u32,
        segs: [Seg; N],
        wr_id: u64,
    ) -> Result<Written<'_>, WqeError> {
        if self.max_post == self.posted.wrapping_sub(self.retired) {
            return Err(self.wr_limit());
        }
        // With no more than `max_post` WRs of `max_wqebbs` each the ring
        // cannot be full (`room_implied`); else look.
        if !self.room_implied && self.pi.wrapping_sub(self.tail) >= self.geo.wqe_cnt {
            return Err(self.no_room());
        }
        Ok(self.write_segs_unchecked(opcode, flags, imm, segs, wr_id))
    }

    /// The ring stores and bookkeeping of [`Self::post_segs`], its checks
    /// passed: fewer than `max_post` WRs outstanding, and a WQEBB free.
    #[inline(always)]
    fn write_segs_unchecked<const N: usize>(
        &mut self,
        opcode: WqeOpcode,
        flags: CtrlFlags,
        imm: u32,
        segs: [Seg; N],
        wr_id: u64,
    ) -> Written<'_> {
        const { assert!(N <= 3, "one WQEBB: the ctrl segment and three more") };
        let (pi, posted) = (self.pi, self.posted);
        let slot = pi & self.slot_mask;
        // SAFETY: a masked WQEBB index: the 64 bytes at `slot * 64` are inside
        // the ring (`wqe_cnt * 64` bytes, `new`).
        let wqe = unsafe { self.buf.as_ptr().add(slot as usize * WQEBB) };
        // The segments first, then the slot, then the ctrl segment: each
        // value is stored as soon as it can be, which frees its register
        // (the device reads none of it before the doorbell).
        // SAFETY: the WQEBB is free (checked above) and ours (`new`); the
        // WQE's `(1 + N) * 16` bytes fit it.
        unsafe {
            for (i, s) in segs.iter().enumerate() {
                s.write(wqe.add(16 * (i + 1)));
            }
        }
        // A signaled WR (the common case of a single post) has its own copy
        // of the rest, in which auto-signal is one store and the slot's
        // `hidden` a constant.
        if flags.contains(CtrlFlags::CQ_UPDATE) {
            self.last_signaled = posted;
            self.write_rest::<N>(opcode, flags, false, imm, wqe, slot, wr_id, (pi, posted));
        } else {
            let (flags, forced) = self.auto_signal(flags);
            self.write_rest::<N>(opcode, flags, forced, imm, wqe, slot, wr_id, (pi, posted));
        }
        Written { sq: self, pi, wqe }
    }

    /// The slot and ctrl segment of [`Self::write_segs_checked`]'s WQE, and the
    /// indices.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn write_rest<const N: usize>(
        &mut self,
        opcode: WqeOpcode,
        flags: CtrlFlags,
        forced: bool,
        imm: u32,
        wqe: *mut u8,
        slot: u32,
        wr_id: u64,
        (pi, posted): (u32, u32),
    ) {
        // SAFETY: `slots` has `wqe_cnt` entries (`new`), `slot` is masked below it.
        unsafe {
            Slot::store(
                self.slots.ptr().add(slot as usize),
                wr_id,
                posted,
                1,
                forced,
            )
        };
        let ds = 1 + N as u32;
        let ctrl = ctrl_stored(opcode, pi, CtrlQpn::Word(self.qpn_word), ds, flags, imm);
        // SAFETY: `wqe` is the free WQEBB of `write_segs_checked`, ours.
        unsafe { put_stored(wqe, ctrl) };
        self.posted = posted.wrapping_add(1);
        self.pi = pi.wrapping_add(1);
    }

    #[cold]
    fn no_room(&self) -> WqeError {
        WqeError::QueueFull {
            need: 1,
            free: self.free_wqebbs(),
        }
    }
}

/// Room reserved in the SQ for a batch of WRs of one WQEBB each
/// ([`SendQueue::reserve`]), filled in place by [`Self::write_segs`] and
/// published by [`Self::ring`] with one doorbell: io_uring's "push, then
/// submit once". The queue's indices stay in this value (in registers)
/// while it is filled; they go back to the queue when it is rung or
/// dropped. WQEs pushed and dropped without a ring are posted, and the
/// next doorbell of the queue publishes them.
pub struct Reserved<'a> {
    sq: &'a mut SendQueue,
    ring: *mut u8,
    slots: *mut Slot,
    mask: u32,
    qpn_word: u64,
    pi: u32,
    posted: u32,
    left: u32,
    last_signaled: u32,
    force_after: u32,
}

impl SendQueue {
    /// Reserves room for `wrs` WRs of one WQEBB each (ctrl and at most three
    /// segments).
    ///
    /// Errors, reserving nothing: [`WqeError::WrLimit`] when fewer than
    /// `wrs` more WRs may be outstanding, [`WqeError::QueueFull`] when fewer
    /// than `wrs` WQEBBs are free.
    #[inline(always)]
    pub fn reserve(&mut self, wrs: u32) -> Result<Reserved<'_>, WqeError> {
        if wrs > self.free_wrs() {
            return Err(self.wr_limit());
        }
        if wrs > self.free_wqebbs() {
            return Err(WqeError::QueueFull {
                need: wrs,
                free: self.free_wqebbs(),
            });
        }
        Ok(Reserved {
            ring: self.buf.as_ptr(),
            slots: self.slots.ptr(),
            mask: self.slot_mask,
            qpn_word: self.qpn_word,
            pi: self.pi,
            posted: self.posted,
            left: wrs,
            last_signaled: self.last_signaled,
            force_after: self.force_after,
            sq: self,
        })
    }
}

impl Reserved<'_> {
    /// [`SendQueue::post_segs`]'s WQE, into the reserved room without its
    /// checks, and no doorbell.
    ///
    /// Errors, with nothing written: [`WqeError::WrLimit`] once as many WRs
    /// as were reserved have been pushed.
    #[inline(always)]
    pub fn write_segs<const N: usize>(
        &mut self,
        opcode: WqeOpcode,
        flags: CtrlFlags,
        imm: u32,
        segs: [Seg; N],
        wr_id: u64,
    ) -> Result<(), WqeError> {
        if self.left == 0 {
            return Err(self.sq.wr_limit());
        }
        self.left -= 1;
        let pi = self.pi;
        let slot = (pi & self.mask) as usize;
        let (flags, forced) = auto_signal(
            &mut self.last_signaled,
            self.force_after,
            self.posted,
            flags,
        );
        let ctrl = ctrl_stored(
            opcode,
            pi,
            CtrlQpn::Word(self.qpn_word),
            1 + N as u32,
            flags,
            imm,
        );
        // SAFETY: `reserve` found this WQEBB free (`left` counts what is
        // left of it); `slot` is masked below the ring's WQEBBs.
        unsafe {
            write_wqebb(
                self.ring,
                self.slots,
                slot,
                ctrl,
                segs,
                wr_id,
                self.posted,
                forced,
            )
        };
        self.posted = self.posted.wrapping_add(1);
        self.pi = pi.wrapping_add(1);
        Ok(())
    }

    /// [`Self::write_segs`] for each of `items`, its WQE's opcode, flags,
    /// immediate, segments and wr_id given by `wqe`; `false`, pushing
    /// nothing, when more items than the room left were given. The room is
    /// checked once for all of them, and the loop keeps the queue's indices
    /// in registers.
    #[inline(always)]
    pub fn write_all<T, const N: usize>(
        &mut self,
        items: &[T],
        wqe: impl Fn(&T) -> (WqeOpcode, CtrlFlags, u32, [Seg; N], u64),
    ) -> bool {
        if items.len() > self.left as usize {
            return false;
        }
        self.left -= items.len() as u32;
        // When not even `items.len()` unsignaled WRs in a row would reach
        // the auto-signal period, none of these is signaled by force (a
        // signaled one only restarts the count): the loop then only notes
        // the last signaled WR.
        let since = self.posted.wrapping_sub(self.last_signaled).wrapping_sub(1);
        let fa = self.force_after;
        if since < fa && (items.len() as u32).wrapping_sub(1) < fa - since {
            self.push_loop::<T, N, false>(items, wqe);
        } else {
            self.push_loop::<T, N, true>(items, wqe);
        }
        true
    }

    /// [`Self::write_all`]'s loop, with auto-signal (`FORCE`) or, when
    /// none of `items` can be signaled by force, without.
    #[inline(always)]
    fn push_loop<T, const N: usize, const FORCE: bool>(
        &mut self,
        items: &[T],
        wqe: impl Fn(&T) -> (WqeOpcode, CtrlFlags, u32, [Seg; N], u64),
    ) {
        let (ring, slots, mask, qpn_word) = (self.ring, self.slots, self.mask, self.qpn_word);
        let (mut pi, mut posted, mut last) = (self.pi, self.posted, self.last_signaled);
        for it in items {
            let (opcode, flags, imm, segs, wr_id) = wqe(it);
            let slot = (pi & mask) as usize;
            let (flags, forced) = if FORCE {
                auto_signal(&mut last, self.force_after, posted, flags)
            } else {
                if flags.contains(CtrlFlags::CQ_UPDATE) {
                    last = posted;
                }
                (flags, false)
            };
            let ctrl = ctrl_stored(
                opcode,
                pi,
                CtrlQpn::Word(qpn_word),
                1 + N as u32,
                flags,
                imm,
            );
            // SAFETY: `reserve` found this WQEBB free (the room for
            // `items.len()` more was checked by `write_all`); `slot` is masked
            // below the ring's WQEBBs.
            unsafe { write_wqebb(ring, slots, slot, ctrl, segs, wr_id, posted, forced) };
            posted = posted.wrapping_add(1);
            pi = pi.wrapping_add(1);
        }
        (self.pi, self.posted, self.last_signaled) = (pi, posted, last);
    }

    /// Makes the next WR pushed signaled, as [`SendQueue::signal_next`].
    pub fn signal_next(&mut self) {
        self.last_signaled = self.posted;
    }

    /// Rings the doorbell for everything posted since the last one
    /// ([`SendQueue::ring_doorbell`]: for more than one WQE the 8-byte
    /// doorbell of the last).
    #[inline]
    pub fn ring(mut self) {
        self.sync();
        self.sq.ring_doorbell();
    }

    /// Hands the indices back to the queue (again: nothing changes).
    #[inline(always)]
    fn sync(&mut self) {
        if self.pi != self.sq.pi {
            self.sq.batch_last = self.pi.wrapping_sub(1);
        }
        self.sq.pi = self.pi;
        self.sq.posted = self.posted;
        self.sq.last_signaled = self.last_signaled;
    }
}

/// Stores a WQE of one WQEBB (the ctrl segment and `N` more, at most three)
/// at WQEBB `slot` of `ring`, and its slot (`wr_id`, WR sequence number
/// `posted`, one WQEBB, `forced`): a [`Reserved`] batch's WQE.
///
/// # Safety
/// `slot` must be below the number of WQEBBs of `ring` and of entries of
/// `slots` (the queue's, `SendQueue::new`), that WQEBB free and ours.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn write_wqebb<const N: usize>(
    ring: *mut u8,
    slots: *mut Slot,
    slot: usize,
    ctrl: [u64; 2],
    segs: [Seg; N],
    wr_id: u64,
    posted: u32,
    forced: bool,
) {
    const { assert!(N <= 3, "one WQEBB: the ctrl segment and three more") };
    // SAFETY: the caller's guarantee: the WQEBB's 64 bytes, which
    // `(1 + N) * 16` fit, and the slot are inside their buffers and ours.
    unsafe {
        let wqe = ring.add(slot * WQEBB);
        for (i, s) in segs.iter().enumerate() {
            s.write(wqe.add(16 * (i + 1)));
        }
        put_stored(wqe, ctrl);
        Slot::store(slots.add(slot), wr_id, posted, 1, forced);
    }
}

impl Drop for Reserved<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.sync();
    }
}

impl SendQueue {
    /// Posts a WQE of the ctrl segment, the remote-address segment `raddr`
    /// (if any) and an inline segment carrying the `len` bytes at `src`
    /// (`MLX5_INLINE_SEG | len`, then the bytes; its padding is not
    /// written, as rdma-core does not), built in place; the bytes continue
    /// at the start of the ring where they reach its end. Then the doorbell,
    /// with a BlueFlame copy of its WQEBBs when it is the only WQE since the
    /// last doorbell and fits the register ([`Self::post_segs`]).
    ///
    /// Errors, with nothing written: [`WqeError::InlineTooLong`] above the
    /// queue's `max_inline` (which `new` and `limit_wqe_size` keep within
    /// its largest WQE), [`WqeError::WrLimit`], [`WqeError::QueueFull`].
    ///
    /// # Safety
    /// `src..src + len` must be valid for reads during the call. When
    /// `shared` is false nothing writes those bytes meanwhile (they are
    /// copied plainly); when true, others may access them only with
    /// one-byte atomics or by DMA (they are read with relaxed one-byte
    /// loads, [`crate::shared::load_into`]).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub unsafe fn post_inline(
        &mut self,
        opcode: WqeOpcode,
        flags: CtrlFlags,
        imm: u32,
        raddr: Option<Seg>,
        src: *const u8,
        len: usize,
        shared: bool,
        wr_id: u64,
    ) -> Result<(), WqeError> {
        if len > self.geo.max_inline as usize {
            return Err(self.inline_too_long(len));
        }
        // (Within `max_inline`, a `u32`.)
        let (_, wqebbs) = inline_size(raddr.is_some(), len as u32);
        if self.max_post == self.posted.wrapping_sub(self.retired) {
            return Err(self.wr_limit());
        }
        // `len <= max_inline` keeps the WQE within `geo.max_wqebbs`
        // (`new` and `limit_wqe_size` see to it), so `room_implied` holds
        // for it too.
        debug_assert!(wqebbs <= self.geo.max_wqebbs);
        if !self.room_implied && wqebbs > self.free_wqebbs() {
            return Err(WqeError::QueueFull {
                need: wqebbs,
                free: self.free_wqebbs(),
            });
        }
        // SAFETY: the checks above; `src` is the caller's.
        unsafe { self.write_inline(opcode, flags, imm, raddr, src, len as u32, shared, wr_id) };
        Ok(())
    }

    /// [`Self::post_inline`] when the gate is open ([`Self::set_gate`]):
    /// its one check of room and WR limit is the gate's (an open gate
    /// means the room check is implied, and a WQE within `max_inline`
    /// within the largest). `false`, with nothing written, when the gate
    /// is closed, `max_post` WRs are outstanding, or `len` is over the
    /// queue's `max_inline`.
    ///
    /// # Safety
    /// As [`Self::post_inline`]'s.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub unsafe fn post_inline_gated(
        &mut self,
        opcode: WqeOpcode,
        flags: CtrlFlags,
        imm: u32,
        raddr: Option<Seg>,
        src: *const u8,
        len: usize,
        shared: bool,
        wr_id: u64,
    ) -> bool {
        if self.posted.wrapping_sub(self.retired) >= self.gate || len > self.geo.max_inline as usize
        {
            return false;
        }
        // SAFETY: the gate's checks above; `src` is the caller's.
        unsafe { self.write_inline(opcode, flags, imm, raddr, src, len as u32, shared, wr_id) };
        true
    }

    /// The ring stores, bookkeeping and doorbell of [`Self::post_inline`]
    /// (its size worked out after the copy, so that it is not held across it).
    ///
    /// # Safety
    /// Its checks passed: a WR free under `max_post`, `wqebbs` WQEBBs free,
    /// `len` within `max_inline`; and its contract on `src`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn write_inline(
        &mut self,
        opcode: WqeOpcode,
        flags: CtrlFlags,
        imm: u32,
        raddr: Option<Seg>,
        src: *const u8,
        len: u32,
        shared: bool,
        wr_id: u64,
    ) {
        let hdr = 16 * (1 + raddr.is_some() as u32);
        let pi = self.pi;
        let posted = self.posted;
        let ring = self.buf.as_ptr();
        let ring_len = self.buf.len();
        let base = (pi & self.slot_mask) as usize * WQEBB;
        // SAFETY: the WQE's WQEBBs are free (checked above) and the ring's
        // (`new`). Its first 36 bytes (ctrl, raddr, inline header) lie in
        // its first WQEBB, inside the ring; the payload's `len` bytes start
        // at `base + hdr + 4` and continue at the ring's start past its end,
        // `wqebbs * 64 <= ring_len` bytes in all. `src` is the caller's.
        unsafe {
            let wqe = ring.add(base);
            if let Some(r) = raddr {
                r.write(wqe.add(16));
            }
            if len != 0 {
                crate::wqe::write_inline_hdr(wqe.add(hdr as usize), len);
                let at = base + hdr as usize + 4;
                let copy = |s: *const u8, d: *mut u8, n: usize| {
                    if shared {
                        crate::shared::load_into(s, core::slice::from_raw_parts_mut(d, n));
                    } else {
                        crate::wqe::copy_inline(s, d, n);
                    }
                };
                if len as usize <= ring_len - at {
                    // Within the ring (the common case): one copy.
                    copy(src, ring.add(at), len as usize);
                } else {
                    // To the ring's end, and the rest from its start.
                    let first = ring_len - at;
                    copy(src, ring.add(at), first);
                    copy(src.add(first), ring, len as usize - first);
                }
            }
        }
        let (ds, wqebbs) = inline_size(raddr.is_some(), len);
        let (flags, forced) = self.auto_signal(flags);
        let ctrl = ctrl_stored(opcode, pi, CtrlQpn::Word(self.qpn_word), ds, flags, imm);
        let slot = pi & self.slot_mask;
        // SAFETY: as above; and `slots` has `wqe_cnt` entries, `slot` masked below it.
        unsafe {
            put_stored(ring.add(base), ctrl);
            Slot::store(
                self.slots.ptr().add(slot as usize),
                wr_id,
                posted,
                wqebbs,
                forced,
            );
        }
        self.posted = posted.wrapping_add(1);
        self.batch_last = pi;
        let next = pi.wrapping_add(wqebbs);
        self.pi = next;
        if self.batch_start != pi as u64
            || (wqebbs * WQEBB as u32) > self.bf_size
            || crate::trace::in_capture()
        {
            self.ring_doorbell();
            return;
        }
        self.ring_bf(pi, wqebbs);
    }

    #[cold]
    fn inline_too_long(&self, len: usize) -> WqeError {
        WqeError::InlineTooLong {
            len,
            max: self.geo.max_inline,
        }
    }
}

/// The DS and WQEBBs of an inline WQE of `len` bytes: ctrl, raddr (when
/// `raddr`), and `ceil((4 + len) / 16)` DS of inline segment (none for no
/// bytes).
#[inline(always)]
fn inline_size(raddr: bool, len: u32) -> (u32, u32) {
    let ds = 1 + raddr as u32 + if len == 0 { 0 } else { inline_ds(len as usize) };
    (ds, (ds + 3) >> 2)
}
