//! The writers: a send WQE validated and sized ([`wqe_size`]), then laid out
//! into an SQ ring at producer index `pi` (wrapping at the ring end), each
//! segment by its encoder in `segments`.

use super::segments::{
    ctrl_stored, inline_ds, put_stored, write_inline_hdr, CtrlQpn, Seg, ATOMIC_SIZE,
};
use super::{AtomicSeg, Datagram, Payload, SendWqe, SqGeometry, WqeError, Written};
use crate::prm::{CtrlFlags, WqeOpcode, DS, INLINE_SEG, MAX_DS, WQEBB};
use crate::ring::RingBuf;

/// Validates `wqe` against `geo` and returns `(ds, wqebbs)` without writing anything.
#[inline(always)]
pub fn wqe_size(geo: &SqGeometry, wqe: &SendWqe<'_>) -> Result<(u32, u32), WqeError> {
    let max = geo.max_wqebbs.min(geo.wqe_cnt);
    match wqe_size_within(geo, wqe, max) {
        Ok(s) => Ok(s),
        Err(e) => masked_size_or(e, wqe, max),
    }
}

/// [`wqe_size`] with the largest WQE, `geo.max_wqebbs.min(geo.wqe_cnt)`,
/// given (the driver keeps it), for the common opcodes only: a masked
/// atomic is [`WqeError::UnsupportedOpcode`] here, and its callers take it
/// on their error path ([`masked_size_or`], [`write_masked`]), so that the
/// other WQEs pay nothing for it (a check on the common path measured 14
/// instructions on the inline SEND encode, `scripts/insn-count`).
#[inline(always)]
pub(crate) fn wqe_size_within(
    geo: &SqGeometry,
    wqe: &SendWqe<'_>,
    max_wqebbs: u32,
) -> Result<(u32, u32), WqeError> {
    let op = wqe.opcode;
    let atomic = matches!(op, WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA);
    if !matches!(
        op,
        WqeOpcode::RDMA_WRITE
            | WqeOpcode::RDMA_WRITE_IMM
            | WqeOpcode::SEND
            | WqeOpcode::SEND_IMM
            | WqeOpcode::SEND_INVAL
            | WqeOpcode::RDMA_READ
            | WqeOpcode::ATOMIC_CS
            | WqeOpcode::ATOMIC_FA
            | WqeOpcode::NOP
    ) {
        // (The masked atomics too: see above.)
        return Err(WqeError::UnsupportedOpcode(op.0));
    }
    let mut ds = 1u32;
    if let Some(d) = wqe.datagram {
        // UD: SEND and SEND_IMM; DC: every operation but NOP, SEND_INVAL
        // included (rdma-core `MLX5_SUPPORTED_SEND_OPS_FLAGS_UD` /
        // `..._DCI`, which is `..._RC`).
        let ok = match d {
            Datagram::Ud(_) => matches!(op, WqeOpcode::SEND | WqeOpcode::SEND_IMM),
            Datagram::Dc(_) => op != WqeOpcode::NOP,
        };
        if !ok {
            return Err(WqeError::UnsupportedOpcode(op.0));
        }
        ds += (super::DATAGRAM_SEG / DS) as u32;
    }
    if op.has_raddr() {
        let Some(r) = wqe.remote else {
            return Err(WqeError::MissingRemote(op.0));
        };
        if atomic && r.addr % 8 != 0 {
            return Err(WqeError::UnalignedAtomic(r.addr));
        }
        ds += 1;
    }
    if atomic {
        if wqe.atomic.is_none() {
            return Err(WqeError::MissingAtomic(op.0));
        }
        match wqe.payload {
            Payload::Sges([s]) if s.len >= ATOMIC_SIZE => {}
            _ => return Err(WqeError::AtomicSge),
        }
        return finish(ds + 2, max_wqebbs);
    }
    match wqe.payload {
        Payload::Inline(bytes) => {
            if matches!(op, WqeOpcode::RDMA_READ | WqeOpcode::NOP) && !bytes.is_empty() {
                return Err(WqeError::InlineNotAllowed(op.0));
            }
            if bytes.len() > geo.max_inline as usize {
                return Err(WqeError::InlineTooLong {
                    len: bytes.len(),
                    max: geo.max_inline,
                });
            }
            if !bytes.is_empty() {
                ds += inline_ds(bytes.len());
            }
        }
        Payload::Sges(sges) => {
            // One pass: total length, per-SGE limit, and non-empty count.
            let (mut total, mut n) = (0u64, 0u32);
            for s in sges {
                if s.len & INLINE_SEG != 0 {
                    return Err(WqeError::SgeTooLong { len: s.len });
                }
                total += s.len as u64;
                n = n.saturating_add((s.len != 0) as u32);
            }
            if total > 1 << 31 {
                return Err(WqeError::LengthOverflow { total });
            }
            ds = ds.saturating_add(n);
        }
    }
    finish(ds, max_wqebbs)
}

/// After [`wqe_size_within`] refused `wqe` with `e`: a masked atomic's
/// checks (its datagram segment on DC only, raddr, operands, their
/// alignment and size, the one SGE) and size (ctrl, any datagram segment,
/// raddr, 1 or 2 operand segments, the data segment); for any other WQE,
/// `e` as it was.
#[cold]
#[inline(never)]
pub(crate) fn masked_size_or(
    e: WqeError,
    wqe: &SendWqe<'_>,
    max_wqebbs: u32,
) -> Result<(u32, u32), WqeError> {
    let op = wqe.opcode;
    if e != WqeError::UnsupportedOpcode(op.0) || !op.is_masked_atomic() {
        return Err(e);
    }
    if matches!(wqe.datagram, Some(Datagram::Ud(_))) {
        return Err(e);
    }
    let dgram = if wqe.datagram.is_some() {
        (super::DATAGRAM_SEG / DS) as u32
    } else {
        0
    };
    let Some(r) = wqe.remote else {
        return Err(WqeError::MissingRemote(op.0));
    };
    let Some(m) = wqe.masked else {
        return Err(WqeError::MissingAtomic(op.0));
    };
    let size = m.size.bytes();
    if r.addr % size as u64 != 0 {
        return Err(WqeError::MaskedAtomicUnaligned { addr: r.addr, size });
    }
    if !m.fits(op) {
        return Err(WqeError::MaskedOperandTooWide { size });
    }
    match wqe.payload {
        Payload::Sges([s]) if s.len >= size => {}
        _ => return Err(WqeError::MaskedAtomicSge { size }),
    }
    let (_, n) = super::masked_atomic_segs(op, m);
    finish(1 + dgram + 1 + n as u32 + 1, max_wqebbs)
}

#[inline(always)]
fn finish(ds: u32, max: u32) -> Result<(u32, u32), WqeError> {
    if ds > MAX_DS {
        return Err(WqeError::TooManyDs { ds });
    }
    let wqebbs = (ds * DS as u32).div_ceil(WQEBB as u32);
    if wqebbs > max {
        return Err(WqeError::TooBig { wqebbs, max });
    }
    Ok((ds, wqebbs))
}

/// Writes one whole send WQE into `sq` at producer index `pi`.
///
/// `sq` is the SQ buffer (`geo.wqe_cnt * 64` bytes); the WQE starts at byte
/// `(pi & (wqe_cnt - 1)) * 64`, and segments or inline bytes that reach the end
/// of the buffer continue at its start. `free` is the number of WQEBBs the caller
/// knows to be free. On error nothing is written.
#[inline]
pub fn write_send_wqe(
    sq: &mut RingBuf<'_>,
    geo: &SqGeometry,
    pi: u32,
    wqe: &SendWqe<'_>,
    free: u32,
) -> Result<Written, WqeError> {
    if !geo.wqe_cnt.is_power_of_two() || sq.len() != geo.wqe_cnt as usize * WQEBB {
        return Err(WqeError::BadGeometry {
            wqe_cnt: geo.wqe_cnt,
            ring_len: sq.len(),
        });
    }
    write_send_wqe_checked_geo(sq, geo, pi, wqe, wqe.flags, free)
}

/// [`write_send_wqe`] for a caller that has already checked that `geo.wqe_cnt`
/// is a power of two and `sq.len() == geo.wqe_cnt * 64` (the driver checks
/// once, at construction), with the ctrl segment's `fm_ce_se` flags given
/// apart from `wqe` (the driver adds CQ_UPDATE for auto-signal).
#[inline(always)]
pub(crate) fn write_send_wqe_checked_geo(
    sq: &mut RingBuf<'_>,
    geo: &SqGeometry,
    pi: u32,
    wqe: &SendWqe<'_>,
    flags: CtrlFlags,
    free: u32,
) -> Result<Written, WqeError> {
    debug_assert!(
        geo.wqe_cnt.is_power_of_two() && sq.len() == geo.wqe_cnt as usize * WQEBB,
        "geometry not checked"
    );
    if let Some(w) = write_one_sge(sq, geo, pi, wqe, flags, free) {
        return w;
    }
    let (ds, wqebbs) = match wqe_size_within(geo, wqe, geo.max_wqebbs.min(geo.wqe_cnt)) {
        Ok(s) => s,
        Err(e) => return write_masked_or(sq, geo, pi, wqe, flags, free, e),
    };
    if wqebbs > free {
        return Err(WqeError::QueueFull { need: wqebbs, free });
    }
    write_sized(sq, geo, CtrlQpn::Raw(geo.qpn), pi, wqe, flags, ds);
    Ok(Written {
        ds,
        wqebbs,
        next_pi: pi.wrapping_add(wqebbs),
    })
}

/// The most common WQE, sized and written in one pass: a WRITE (with or
/// without immediate), SEND (with or without) or READ with one SGE of 1 to
/// 2^31 - 1 bytes: ctrl, the remote-address segment where the opcode has
/// one, the data segment; 2 or 3 DS, one WQEBB, so it never reaches the
/// ring's end. `None` for every other WQE (and for a missing remote
/// segment), which the general writer sizes, refuses or writes: the bytes
/// are the same (`wqe::tests` checks every shape against the oracle).
#[inline(always)]
fn write_one_sge(
    sq: &mut RingBuf<'_>,
    geo: &SqGeometry,
    pi: u32,
    wqe: &SendWqe<'_>,
    flags: CtrlFlags,
    free: u32,
) -> Option<Result<Written, WqeError>> {
    let Payload::Sges([d]) = wqe.payload else {
        return None;
    };
    if wqe.datagram.is_some() {
        return None;
    }
    let op = wqe.opcode;
    let raddr = match (op, wqe.remote) {
        (WqeOpcode::RDMA_WRITE | WqeOpcode::RDMA_WRITE_IMM | WqeOpcode::RDMA_READ, Some(r)) => {
            Some(r)
        }
        (WqeOpcode::SEND | WqeOpcode::SEND_IMM, _) => None,
        _ => return None,
    };
    // (A geometry that allows no WQEBB per WQE refuses it: the general
    // writer's `TooBig`.)
    if d.len.wrapping_sub(1) >= INLINE_SEG - 1 || geo.max_wqebbs == 0 {
        return None;
    }
    if free == 0 {
        return Some(Err(WqeError::QueueFull { need: 1, free }));
    }
    // (SEND_INVAL, whose immediate is an rkey, does not come here.)
    let imm = if op.has_imm_data() { wqe.imm } else { 0 };
    let ds = 2 + raddr.is_some() as u32;
    let ctrl = ctrl_stored(op, pi, CtrlQpn::Raw(geo.qpn), ds, flags, imm);
    let base = (pi & (geo.wqe_cnt - 1)) as usize * WQEBB;
    // SAFETY: a masked WQEBB of the ring (the caller checked `sq.len() ==
    // wqe_cnt * 64`), which the ring owns; the WQE's 32 or 48 bytes fit it.
    unsafe {
        let p = sq.as_ptr().add(base);
        put_stored(p, ctrl);
        let data = p.add(16 * (ds as usize - 1));
        if let Some(r) = raddr {
            Seg::raddr(r.addr, r.rkey).write(p.add(DS));
        }
        Seg::data(d.addr, d.len, d.lkey).write(data);
    }
    Some(Ok(Written {
        ds,
        wqebbs: 1,
        next_pi: pi.wrapping_add(1),
    }))
}

/// Writes a WQE that [`wqe_size`] accepted with `ds` DS (and for which the
/// caller has room) into a ring whose geometry the caller has checked.
/// `qpn` is `geo.qpn`, or its word where the caller keeps it (the driver).
#[inline(always)]
pub(crate) fn write_sized(
    sq: &mut RingBuf<'_>,
    geo: &SqGeometry,
    qpn: CtrlQpn,
    pi: u32,
    wqe: &SendWqe<'_>,
    flags: CtrlFlags,
    ds: u32,
) {
    debug_assert!(ds <= MAX_DS && geo.wqe_cnt.is_power_of_two());
    debug_assert!(match qpn {
        CtrlQpn::Raw(q) => q == geo.qpn,
        CtrlQpn::Word(w) => w == super::segments::qpn_word(geo.qpn),
    });
    let imm = if wqe.opcode.has_imm() { wqe.imm } else { 0 };
    debug_assert!(
        !wqe.opcode.is_masked_atomic(),
        "masked atomics: write_masked"
    );
    let ctrl = ctrl_stored(wqe.opcode, pi, qpn, ds, flags, imm);
    let base = (pi & (geo.wqe_cnt - 1)) as usize * WQEBB;
    if base + ds as usize * DS <= sq.len() {
        // Fast path: the WQE does not reach the end of the ring, so every
        // segment is written straight to its place with fixed-size stores.
        // SAFETY: `base + ds * 16 <= sq.len()`, and `write_linear` writes
        // only the WQE's `ds * 16` bytes (what `wqe_size` counted) from `base`;
        // the ring owns its bytes (RingBuf contract).
        unsafe { write_linear(sq.as_ptr().add(base), ctrl, wqe) };
    } else {
        // The WQE reaches the end of the ring: lay it out with the same writer
        // in a scratch buffer, then copy the bytes it wrote, continuing at the
        // start of the ring. (Taking `wqe` by reference into an out-of-line
        // writer instead would make every caller build it in memory.)
        let mut tmp = [0u8; MAX_DS as usize * DS];
        // SAFETY: `wqe_size` refused more than MAX_DS DS, so the WQE's
        // `ds * 16` bytes fit `tmp`, which is not the payload's memory.
        let n = unsafe { write_linear(tmp.as_mut_ptr(), ctrl, wqe) };
        write_wrapped(sq, base, &tmp[..n]);
    }
}

/// Copies `len` bytes (at most a WQE's 1 KiB) from `src` to `dst`, not
/// overlapping, with fixed-size moves and no call: up to 64 bytes as the
/// first and last 32 (or 16, 8, 4), more as 32-byte blocks and then the
/// last 32. (A `memcpy` call makes the caller keep its registers on the
/// stack around it.)
///
/// # Safety
/// `src` valid for `len` bytes of reads, `dst` for `len` bytes of writes,
/// not overlapping.
#[inline(always)]
pub(crate) unsafe fn copy_inline(src: *const u8, dst: *mut u8, len: usize) {
    /// Copies `N` bytes.
    ///
    /// # Safety
    /// `src` and `dst` valid for `N` bytes, not overlapping.
    #[inline(always)]
    unsafe fn block<const N: usize>(src: *const u8, dst: *mut u8) {
        // SAFETY: the caller's; fixed-size copies become plain moves.
        unsafe { core::ptr::copy_nonoverlapping(src, dst, N) }
    }
    // SAFETY: (every arm) each `block::<N>` covers `[0, N)` or
    // `[len - N, len)` with `N <= len`, inside the caller's ranges.
    unsafe {
        if len > 64 {
            let mut off = 0;
            while len - off > 32 {
                block::<32>(src.add(off), dst.add(off));
                off += 32;
            }
            block::<32>(src.add(len - 32), dst.add(len - 32));
        } else if len >= 32 {
            block::<32>(src, dst);
            block::<32>(src.add(len - 32), dst.add(len - 32));
        } else if len >= 16 {
            block::<16>(src, dst);
            block::<16>(src.add(len - 16), dst.add(len - 16));
        } else if len >= 8 {
            block::<8>(src, dst);
            block::<8>(src.add(len - 8), dst.add(len - 8));
        } else if len >= 4 {
            block::<4>(src, dst);
            block::<4>(src.add(len - 4), dst.add(len - 4));
        } else {
            for i in 0..len {
                *dst.add(i) = *src.add(i);
            }
        }
    }
}

/// Writes a send WQE that `wqe_size` accepted to contiguous memory, and
/// returns how many bytes from `dst` on it wrote (all of them: the segments
/// follow one another; an inline segment's padding is not written).
///
/// # Safety
/// `dst` must be valid for writes of the WQE's `ds * 16` bytes (as
/// [`wqe_size`] counts them) and not overlap any payload.
#[inline(always)]
unsafe fn write_linear(dst: *mut u8, ctrl: [u64; 2], wqe: &SendWqe<'_>) -> usize {
    // SAFETY: (whole body) each segment is written at the offset, and with
    // the length, that `wqe_size` counted into `ds`: ctrl, the datagram
    // segment of a UD or DC WQE (3 DS), then raddr when
    // the opcode has one, then atomic + data, or the inline segment (4-byte
    // header and the bytes), or one data segment per non-empty SGE. So every
    // write is inside `dst[..ds * 16]`. Each segment is its encoder's
    // (`segments`). A UD or DC WQE's datagram segment comes finished
    // (`SendWqe::datagram`, as `datagram_seg` / `dc_datagram_seg` make
    // it): it is copied.
    unsafe {
        put_stored(dst, ctrl);
        let mut p = dst.add(DS);
        if let Some(d) = wqe.datagram {
            core::ptr::copy_nonoverlapping(d.bytes().as_ptr(), p, super::DATAGRAM_SEG);
            p = p.add(super::DATAGRAM_SEG);
        }
        if let (true, Some(r)) = (wqe.opcode.has_raddr(), wqe.remote) {
            Seg::raddr(r.addr, r.rkey).write(p);
            p = p.add(DS);
        }
        if let (WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA, Some(a), Payload::Sges([d])) =
            (wqe.opcode, wqe.atomic, wqe.payload)
        {
            let a = atomic_operands(wqe.opcode, a);
            Seg::atomic(a.swap_add, a.compare).write(p);
            Seg::data(d.addr, ATOMIC_SIZE, d.lkey).write(p.add(DS));
            return p.add(2 * DS).offset_from(dst) as usize;
        }
        match wqe.payload {
            Payload::Inline(bytes) if !bytes.is_empty() => {
                write_inline_hdr(p, bytes.len() as u32);
                copy_inline(bytes.as_ptr(), p.add(4), bytes.len());
                p = p.add(4 + bytes.len());
            }
            Payload::Inline(_) => {}
            Payload::Sges(sges) => {
                for s in sges.iter().filter(|s| s.len != 0) {
                    Seg::data(s.addr, s.len, s.lkey).write(p);
                    p = p.add(DS);
                }
            }
        }
        p.offset_from(dst) as usize
    }
}

/// [`write_send_wqe_checked_geo`] after [`wqe_size_within`] refused `wqe`
/// with `e`: a masked atomic sized ([`masked_size_or`]) and written
/// ([`write_masked`]) if there is room; any other WQE refused with `e`.
#[cold]
#[inline(never)]
fn write_masked_or(
    sq: &mut RingBuf<'_>,
    geo: &SqGeometry,
    pi: u32,
    wqe: &SendWqe<'_>,
    flags: CtrlFlags,
    free: u32,
    e: WqeError,
) -> Result<Written, WqeError> {
    let (ds, wqebbs) = masked_size_or(e, wqe, geo.max_wqebbs.min(geo.wqe_cnt))?;
    if wqebbs > free {
        return Err(WqeError::QueueFull { need: wqebbs, free });
    }
    write_masked(sq, geo, CtrlQpn::Raw(geo.qpn), pi, wqe, flags, ds);
    Ok(Written {
        ds,
        wqebbs,
        next_pi: pi.wrapping_add(wqebbs),
    })
}

/// [`write_sized`] of a masked atomic ([`masked_size_or`] accepted it with
/// `ds` DS; its operands `wqe.masked`): ctrl with the size's opmod in byte 0, any
/// datagram segment, raddr, the 1 or 2 operand segments
/// ([`super::masked_atomic_segs`]), the data segment of `m.size` bytes;
/// laid out in a scratch buffer and copied, wrapping at the ring's end.
#[cold]
#[inline(never)]
pub(crate) fn write_masked(
    sq: &mut RingBuf<'_>,
    geo: &SqGeometry,
    qpn: CtrlQpn,
    pi: u32,
    wqe: &SendWqe<'_>,
    flags: CtrlFlags,
    ds: u32,
) {
    let Some(m) = wqe.masked else {
        debug_assert!(
            false,
            "masked_size_or refuses a masked atomic without operands"
        );
        return;
    };
    let ctrl = ctrl_stored(wqe.opcode, pi, qpn, ds, flags, 0);
    // At most 8 DS: ctrl, datagram (3), raddr, 2 operand segments, data.
    let mut tmp = [0u8; 8 * DS];
    let mut n = 0;
    let mut put = |b: &[u8]| {
        tmp[n..n + b.len()].copy_from_slice(b);
        n += b.len();
    };
    put(&ctrl[0].to_ne_bytes());
    put(&ctrl[1].to_ne_bytes());
    if let Some(d) = wqe.datagram {
        put(d.bytes());
    }
    if let Some(r) = wqe.remote {
        put(&Seg::raddr(r.addr, r.rkey).to_bytes());
    }
    let (segs, k) = super::masked_atomic_segs(wqe.opcode, m);
    for s in &segs[..k] {
        put(&s.to_bytes());
    }
    if let Payload::Sges([d]) = wqe.payload {
        put(&Seg::data(d.addr, m.size.bytes(), d.lkey).to_bytes());
    }
    // Byte 0 of the ctrl segment: the opmod, `8 | (log2(size) - 2)`.
    tmp[0] = m.size.opmod();
    debug_assert_eq!(n, ds as usize * DS);
    let base = (pi & (geo.wqe_cnt - 1)) as usize * WQEBB;
    sq.write_wrapping(base, &tmp[..n]);
}

/// The atomic segment's operands: ATOMIC_FA writes no compare value.
#[inline(always)]
fn atomic_operands(opcode: WqeOpcode, a: AtomicSeg) -> AtomicSeg {
    let compare = if opcode == WqeOpcode::ATOMIC_CS {
        a.compare
    } else {
        0
    };
    AtomicSeg {
        swap_add: a.swap_add,
        compare,
    }
}

/// Copies the bytes of a WQE laid out linearly to ring offset `base`, where
/// they reach the end of the ring and continue at its start.
#[cold]
#[inline(never)]
fn write_wrapped(sq: &mut RingBuf<'_>, base: usize, bytes: &[u8]) {
    sq.write_wrapping(base, bytes);
}
