//! Copies to and from memory that someone else may access at the same time:
//! registered memory, which the device (or the sim's device thread, or
//! another thread of the program) reads and writes while we do.
//!
//! Every access to the shared side is a one-byte atomic load or store of
//! relaxed order, so a concurrent access is not a data race in Rust's
//! memory model: the bytes seen are then unspecified, as they are with real
//! DMA, but the program's behaviour is defined. Always one byte, never
//! wider: the other accesses to that memory (the sim's last-byte store,
//! `Mr::load_u8`, a copy over a different range) are byte-sized too, and
//! atomics of different sizes that partially overlap without
//! synchronization are not allowed (`std::sync::atomic`, "mixed-size
//! accesses"). Ordering against the device is the caller's (a completion
//! polled with acquire order, the last byte of a transfer stored with
//! release order).

use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

/// Copies `dst.len()` bytes of shared memory at `src` into `dst`.
///
/// # Safety
/// `src..src + dst.len()` is valid for reads and writes (atomics need
/// both) for the duration of the call; others access it only with
/// one-byte atomics, these functions, or a device's DMA.
#[inline]
pub unsafe fn load_into(src: *const u8, dst: &mut [u8]) {
    for (i, d) in dst.iter_mut().enumerate() {
        // SAFETY: `i < dst.len()`: inside the range the caller vouches for.
        *d = unsafe { AtomicU8::from_ptr(src.add(i).cast_mut()) }.load(Relaxed);
    }
}

/// Copies `src` into shared memory at `dst`.
///
/// # Safety
/// `dst..dst + src.len()` is valid for writes (and reads) for the duration
/// of the call; others access it only with one-byte atomics, these
/// functions, or a device's DMA.
#[inline]
pub unsafe fn store_from(src: &[u8], dst: *mut u8) {
    for (i, &b) in src.iter().enumerate() {
        // SAFETY: `i < src.len()`: inside the range the caller vouches for.
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(b, Relaxed);
    }
}

/// Copies `len` bytes of shared memory from `src` to `dst`; the ranges may
/// overlap (the result is then as `ptr::copy`'s).
///
/// # Safety
/// Both ranges are valid for reads and writes for the duration of the
/// call; others access them only with one-byte atomics, these functions,
/// or a device's DMA.
#[inline]
pub unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
    let byte = |k: usize| {
        // SAFETY: `k < len`: inside both ranges (the caller's contract).
        let b = unsafe { AtomicU8::from_ptr(src.add(k).cast_mut()) }.load(Relaxed);
        // SAFETY: as above.
        unsafe { AtomicU8::from_ptr(dst.add(k)) }.store(b, Relaxed);
    };
    let (s, d) = (src as usize, dst as usize);
    if d > s && d < s.wrapping_add(len) {
        // Overlapping with the destination above: back to front.
        (0..len).rev().for_each(byte);
    } else {
        (0..len).for_each(byte);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_alignment_and_overlap_as_ptr_copy() {
        // Under Miri (where the 81 offset pairs take 40 s) fewer offsets: the
        // copies are byte by byte, so alignment changes no code path.
        let offs: &[usize] = if cfg!(miri) {
            &[0, 1, 5, 8]
        } else {
            &[0, 1, 2, 3, 4, 5, 6, 7, 8]
        };
        for len in [0usize, 1, 7, 8, 9, 31, 64, 100] {
            for &so in offs {
                for &dof in offs {
                    let src: Vec<u8> = (0..128u8).collect();
                    let mut a = [0u8; 128];
                    // SAFETY: in bounds of our own vectors.
                    unsafe { load_into(src.as_ptr().add(so), &mut a[dof..dof + len]) };
                    assert_eq!(&a[dof..dof + len], &src[so..so + len]);
                    let mut b = vec![0u8; 128];
                    // SAFETY: as above.
                    unsafe { store_from(&src[so..so + len], b.as_mut_ptr().add(dof)) };
                    assert_eq!(&b[dof..dof + len], &src[so..so + len]);
                    // Overlapping within one buffer, either direction.
                    let mut want: Vec<u8> = (0..128u8).collect();
                    let mut got = want.clone();
                    want.copy_within(so..so + len, dof + 10);
                    let p = got.as_mut_ptr();
                    // SAFETY: both ranges inside `got`.
                    unsafe { copy(p.add(so), p.add(dof + 10), len) };
                    assert_eq!(got, want, "len {len} src {so} dst {}", dof + 10);
                    let mut want: Vec<u8> = (0..128u8).collect();
                    let mut got = want.clone();
                    want.copy_within(dof + 10..dof + 10 + len, so);
                    let p = got.as_mut_ptr();
                    // SAFETY: as above.
                    unsafe { copy(p.add(dof + 10), p.add(so), len) };
                    assert_eq!(got, want, "len {len} src {} dst {so}", dof + 10);
                }
            }
        }
    }
}
