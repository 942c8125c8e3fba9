//! Masked (extended) atomics: masked compare-and-swap and masked
//! fetch-and-add, 4 and 8 bytes (`SendWr::masked_cmp_swap`,
//! `SendWr::masked_fetch_add`), on the direct path.
//!
//! The verbs path has no opcode for them and refuses them with
//! `Error::Unsupported { feature: MaskedAtomics }`: each case is skipped
//! there with that reason. On ConnectX they are tried (no query reports
//! extended atomics): a device that completes the first one in error is
//! taken not to have them, and the case is skipped with the status.
//! The remote word is in host order for both sizes; the old value comes
//! back big-endian for 4 bytes and in host order for 8
//! (`AtomicSize::old_value`).

use super::*;
use rdma_direct::{AtomicSize, Feature};

/// The skip reason for the path's refusal of masked atomics; any other
/// error fails.
fn masked_refused(e: Error) -> CaseResult {
    match e {
        Error::Unsupported {
            feature: Feature::MaskedAtomics,
            ..
        } => skipped(format!("no masked atomics on this path: {e}")),
        e => Err(Failure(format!("masked atomic: {e}"))),
    }
}

/// Posts `w` signaled and polls its completion: `Ok(None)` when it
/// succeeded; `Ok(Some(skip))` when the path refused it or (not on the
/// sim) the device completed it in error; else the failure.
fn run(s: &mut Setup, dev: &str, w: SendWr<'_>, size: u32) -> Result<Option<CaseResult>, Failure> {
    if let Err(e) = s.a.post_send(&[w.signaled()]) {
        return Ok(Some(masked_refused(e)));
    }
    let wc = poll_one(&mut s.a)?;
    if wc.status != WcStatus::SUCCESS && dev != rdma_direct::SIM_DEVICE {
        return Ok(Some(skipped(format!(
            "{dev} completed a masked atomic with {}: no extended atomics on this device",
            wc.status
        ))));
    }
    check_eq!(
        (wc.status, wc.wr_id),
        (WcStatus::SUCCESS, w.wr_id),
        "{}",
        wc.status
    );
    check_eq!(wc.byte_len, size, "byte_len of a {size}-byte masked atomic");
    let want = match w.op {
        rdma_direct::WrOp::MaskedCmpSwap { .. } => WcOpcode::COMP_SWAP,
        _ => WcOpcode::FETCH_ADD,
    };
    check_eq!(wc.opcode, want, "masked atomics complete as the plain ones");
    Ok(None)
}

fn read_u32(mr: &Mr, off: usize) -> Result<u32, Failure> {
    let mut b = [0u8; 4];
    mr.read(off, &mut b)?;
    Ok(u32::from_ne_bytes(b))
}

/// The old value a masked atomic of `size` left at `old[off..]`.
fn old_value(old: &Mr, off: usize, size: AtomicSize) -> Result<u64, Failure> {
    let mut b = [0u8; 8];
    old.read(off, &mut b[..size.bytes() as usize])?;
    Ok(size.old_value(&b).expect("8 bytes"))
}

fn word_mrs(s: &Setup) -> Result<(Mr, Mr), Failure> {
    let word =
        s.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_ATOMIC)?;
    let old = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    Ok((word, old))
}

pub(super) fn masked_compare_and_swap_hits_and_misses(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let (word, old) = word_mrs(&s)?;
    // 4 bytes at offset 12 (4-aligned, not 8): compare the high byte only.
    word.write(12, &0xab12_3456u32.to_ne_bytes())?;
    let sge = [Sge::new(&old, 0, 4)?];
    let w = SendWr::masked_cmp_swap(
        1,
        &sge,
        remote(&word, 12),
        AtomicSize::B4,
        0xab00_0000,
        0xff00_0000,
        0x0000_ffff,
        0x0000_ff00,
    );
    if let Some(skip) = run(&mut s, dev, w, 4)? {
        return skip;
    }
    check_eq!(
        read_u32(&word, 12)?,
        0xab12_ff56,
        "4-byte hit: only swap_mask's bits stored"
    );
    check_eq!(
        old_value(&old, 0, AtomicSize::B4)?,
        0xab12_3456,
        "4-byte old value"
    );
    check!(
        contents(&old)?[0..4] == 0xab12_3456u32.to_be_bytes(),
        "a 4-byte masked atomic's old value lands big-endian"
    );
    // A miss in a compared bit (bit 24 is set, 0 is wanted) leaves the word.
    let w = SendWr::masked_cmp_swap(
        2,
        &sge,
        remote(&word, 12),
        AtomicSize::B4,
        0,
        0x0100_0000,
        0,
        u32::MAX as u64,
    );
    if let Some(skip) = run(&mut s, dev, w, 4)? {
        return skip;
    }
    check_eq!(
        read_u32(&word, 12)?,
        0xab12_ff56,
        "4-byte miss changed the word"
    );
    check_eq!(
        old_value(&old, 0, AtomicSize::B4)?,
        0xab12_ff56,
        "4-byte miss old value"
    );
    check_eq!(read_u32(&word, 8)?, 0, "the neighbouring 4 bytes");

    // 8 bytes: hit on the low 16 bits, swap the high 32.
    word.write(16, &0x1111_2222_3333_4444u64.to_ne_bytes())?;
    let sge = [Sge::new(&old, 8, 8)?];
    let w = SendWr::masked_cmp_swap(
        3,
        &sge,
        remote(&word, 16),
        AtomicSize::B8,
        0x4444,
        0xffff,
        0xaaaa_bbbb_0000_0000,
        0xffff_ffff_0000_0000,
    );
    if let Some(skip) = run(&mut s, dev, w, 8)? {
        return skip;
    }
    check_eq!(read_u64(&word, 16)?, 0xaaaa_bbbb_3333_4444, "8-byte hit");
    check_eq!(
        read_u64(&old, 8)?,
        0x1111_2222_3333_4444,
        "8-byte old value, host order"
    );
    let w = SendWr::masked_cmp_swap(
        4,
        &sge,
        remote(&word, 16),
        AtomicSize::B8,
        0x4445,
        0xffff,
        0,
        u64::MAX,
    );
    if let Some(skip) = run(&mut s, dev, w, 8)? {
        return skip;
    }
    check_eq!(
        read_u64(&word, 16)?,
        0xaaaa_bbbb_3333_4444,
        "8-byte miss changed the word"
    );
    check_eq!(
        read_u64(&old, 8)?,
        0xaaaa_bbbb_3333_4444,
        "8-byte miss old value"
    );
    passed(vec![
        "masked CS, 4 and 8 bytes: a hit stores swap_mask's bits, a miss nothing; old values returned"
            .into(),
    ])
}

pub(super) fn masked_fetch_and_add_stops_carries_at_field_boundaries(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let (word, old) = word_mrs(&s)?;
    // 4 bytes as four 1-byte fields (boundaries at bits 7, 15, 23, 31):
    // 0x01ff_ff7f + 0x0101_0101 = 0x0200_0080 per byte, no carry between.
    word.write(4, &0x01ff_ff7fu32.to_ne_bytes())?;
    let sge = [Sge::new(&old, 0, 4)?];
    let w = SendWr::masked_fetch_add(
        1,
        &sge,
        remote(&word, 4),
        AtomicSize::B4,
        0x0101_0101,
        0x8080_8080,
    );
    if let Some(skip) = run(&mut s, dev, w, 4)? {
        return skip;
    }
    check_eq!(
        read_u32(&word, 4)?,
        0x0200_0080,
        "4-byte add in 1-byte fields"
    );
    check_eq!(
        old_value(&old, 0, AtomicSize::B4)?,
        0x01ff_ff7f,
        "4-byte old value"
    );
    // No boundary: a plain add, carrying all the way (and wrapping).
    let w = SendWr::masked_fetch_add(2, &sge, remote(&word, 4), AtomicSize::B4, 0xfe00_0000, 0);
    if let Some(skip) = run(&mut s, dev, w, 4)? {
        return skip;
    }
    check_eq!(read_u32(&word, 4)?, 0x0000_0080, "4-byte plain add wraps");

    // 8 bytes as two 32-bit fields: the low one overflows, the high one
    // does not see the carry.
    word.write(24, &0x0000_0001_ffff_ffffu64.to_ne_bytes())?;
    let sge = [Sge::new(&old, 8, 8)?];
    let w = SendWr::masked_fetch_add(
        3,
        &sge,
        remote(&word, 24),
        AtomicSize::B8,
        0x0000_0001_0000_0002,
        0x8000_0000_8000_0000,
    );
    if let Some(skip) = run(&mut s, dev, w, 8)? {
        return skip;
    }
    check_eq!(
        read_u64(&word, 24)?,
        0x0000_0002_0000_0001,
        "8-byte add in 32-bit fields"
    );
    check_eq!(
        read_u64(&old, 8)?,
        0x0000_0001_ffff_ffff,
        "8-byte old value, host order"
    );
    // Every bit a boundary: XOR.
    let w = SendWr::masked_fetch_add(
        4,
        &sge,
        remote(&word, 24),
        AtomicSize::B8,
        u64::MAX,
        u64::MAX,
    );
    if let Some(skip) = run(&mut s, dev, w, 8)? {
        return skip;
    }
    check_eq!(
        read_u64(&word, 24)?,
        !0x0000_0002_0000_0001u64,
        "all boundaries: XOR"
    );
    passed(vec![
        "masked FA, 4 and 8 bytes: carries stop at field boundaries".into(),
    ])
}

pub(super) fn masked_atomics_misaligned_or_misshapen_are_refused(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let (word, old) = word_mrs(&s)?;
    let four = [Sge::new(&old, 0, 4)?];
    let eight = [Sge::new(&old, 0, 8)?];
    let probe = SendWr::masked_fetch_add(9, &four, remote(&word, 0), AtomicSize::B4, 0, 0);
    if let Some(skip) = run(&mut s, dev, probe, 4)? {
        return skip;
    }
    word.write(0, &[0x5a; 64])?;
    old.write(0, &[0xa5; 64])?;
    let cs = |id, sge, off, size, compare| {
        SendWr::masked_cmp_swap(id, sge, remote(&word, off), size, compare, 0, 0, 0)
    };
    let bad = [
        // 4 bytes at a 2-aligned address; 8 bytes at a 4-aligned one.
        (cs(1, &four[..], 2, AtomicSize::B4, 0), "misaligned 4"),
        (cs(2, &eight[..], 4, AtomicSize::B8, 0), "misaligned 8"),
        // The old value's SGE of the wrong size, or none.
        (
            cs(3, &eight[..], 0, AtomicSize::B4, 0),
            "8-byte SGE for 4 bytes",
        ),
        (
            cs(4, &four[..], 0, AtomicSize::B8, 0),
            "4-byte SGE for 8 bytes",
        ),
        (cs(5, &[], 0, AtomicSize::B4, 0), "no SGE"),
        // An operand wider than 4 bytes.
        (
            cs(6, &four[..], 0, AtomicSize::B4, 1 << 32),
            "operand over 32 bits",
        ),
    ];
    for (w, what) in bad {
        let r = s.a.post_send(&[w.signaled()]);
        check!(
            matches!(
                r,
                Err(Error::MaskedAtomicShape { .. } | Error::MaskedAtomicOperand { .. })
            ),
            "{what}: {r:?}"
        );
    }
    let inline = cs(7, &four[..], 0, AtomicSize::B4, 0).inline();
    check!(matches!(
        s.a.post_send(&[inline.signaled()]),
        Err(Error::MaskedAtomicShape { inline: true, .. })
    ));
    nothing_completes(&mut s.a)?;
    check!(
        contents(&word)?.iter().all(|&b| b == 0x5a),
        "remote memory changed"
    );
    check!(
        contents(&old)?.iter().all(|&b| b == 0xa5),
        "local memory changed"
    );
    // Memory without REMOTE_ATOMIC: the responder refuses it, as a plain
    // atomic (the sim: REM_ACCESS_ERR; the QPs go to ERR).
    let no_atomic =
        s.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    no_atomic.write(0, &[0x5a; 64])?;
    let w = SendWr::masked_fetch_add(8, &four, remote(&no_atomic, 0), AtomicSize::B4, 1, 0);
    s.a.post_send(&[w.signaled()])?;
    let wc = poll_one(&mut s.a)?;
    if dev == rdma_direct::SIM_DEVICE {
        check_eq!(wc.status, WcStatus::REM_ACCESS_ERR, "without REMOTE_ATOMIC");
    } else {
        check!(
            wc.status != WcStatus::SUCCESS,
            "without REMOTE_ATOMIC: {}",
            wc.status
        );
    }
    check!(
        contents(&no_atomic)?.iter().all(|&b| b == 0x5a),
        "memory without REMOTE_ATOMIC changed"
    );
    passed(vec![
        "misaligned, misshapen and too-wide masked atomics refused, nothing posted; \
         memory without REMOTE_ATOMIC refused by the responder"
            .into(),
    ])
}
