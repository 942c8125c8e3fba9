//! Copies to and from memory that someone else may access at the same time:
//! registered memory, which the device (or the sim's device thread, or
//! another thread of the program) reads and writes while we do.
//!
//! Every access to the shared side is an atomic load or store of relaxed
//! order (8 bytes at a time where the address allows, else one byte), so a
//! concurrent access is not a data race in Rust's memory model: the bytes
//! seen are then unspecified, as they are with real DMA, but the program's
//! behaviour is defined. Ordering against the device is the caller's (a
//! completion polled with acquire order, the last byte of a transfer
//! stored with release order).

use core::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};

const WORD: usize = 8;

/// Copies `dst.len()` bytes of shared memory at `src` into `dst`.
///
/// # Safety
/// `src..src + dst.len()` is valid for reads and writes (atomics need
/// both) for the duration of the call; others access it only atomically or
/// through these functions (or a device's DMA).
#[inline]
pub unsafe fn load_into(src: *const u8, dst: &mut [u8]) {
    let len = dst.len();
    let mut i = 0;
    while i < len && (src as usize + i) % WORD != 0 {
        // SAFETY: `i < len`: inside the range the caller vouches for.
        dst[i] = unsafe { AtomicU8::from_ptr(src.add(i).cast_mut()) }.load(Relaxed);
        i += 1;
    }
    while i + WORD <= len {
        // SAFETY: 8-byte aligned (the loop above) and inside the range.
        let v = unsafe { AtomicU64::from_ptr(src.add(i).cast_mut().cast()) }.load(Relaxed);
        dst[i..i + WORD].copy_from_slice(&v.to_ne_bytes());
        i += WORD;
    }
    while i < len {
        // SAFETY: `i < len`: inside the range.
        dst[i] = unsafe { AtomicU8::from_ptr(src.add(i).cast_mut()) }.load(Relaxed);
        i += 1;
    }
}

/// Copies `src` into shared memory at `dst`.
///
/// # Safety
/// `dst..dst + src.len()` is valid for writes (and reads) for the duration
/// of the call; others access it only atomically or through these
/// functions (or a device's DMA).
#[inline]
pub unsafe fn store_from(src: &[u8], dst: *mut u8) {
    let len = src.len();
    let mut i = 0;
    while i < len && (dst as usize + i) % WORD != 0 {
        // SAFETY: `i < len`: inside the range the caller vouches for.
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(src[i], Relaxed);
        i += 1;
    }
    while i + WORD <= len {
        let v = u64::from_ne_bytes(src[i..i + WORD].try_into().expect("8 bytes"));
        // SAFETY: 8-byte aligned (the loop above) and inside the range.
        unsafe { AtomicU64::from_ptr(dst.add(i).cast()) }.store(v, Relaxed);
        i += WORD;
    }
    while i < len {
        // SAFETY: `i < len`: inside the range.
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(src[i], Relaxed);
        i += 1;
    }
}

/// Copies `len` bytes of shared memory from `src` to `dst`; the ranges may
/// overlap (the result is then as `ptr::copy`'s).
///
/// # Safety
/// Both ranges are valid for reads and writes for the duration of the
/// call; others access them only atomically or through these functions.
#[inline]
pub unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
    let (s, d) = (src as usize, dst as usize);
    let byte = |k: usize| {
        // SAFETY: `k < len`: inside both ranges (the caller's contract).
        let b = unsafe { AtomicU8::from_ptr(src.add(k).cast_mut()) }.load(Relaxed);
        // SAFETY: as above.
        unsafe { AtomicU8::from_ptr(dst.add(k)) }.store(b, Relaxed);
    };
    if d > s && d < s.wrapping_add(len) {
        // Overlapping with the destination above: back to front.
        (0..len).rev().for_each(byte);
        return;
    }
    let mut i = 0;
    if (s ^ d) % WORD == 0 {
        while i < len && (s + i) % WORD != 0 {
            byte(i);
            i += 1;
        }
        while i + WORD <= len {
            // SAFETY: both 8-byte aligned here (same offset mod 8) and
            // inside both ranges.
            let v = unsafe { AtomicU64::from_ptr(src.add(i).cast_mut().cast()) }.load(Relaxed);
            // SAFETY: as above.
            unsafe { AtomicU64::from_ptr(dst.add(i).cast()) }.store(v, Relaxed);
            i += WORD;
        }
    }
    (i..len).for_each(byte);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_alignment_and_overlap_as_ptr_copy() {
        for len in [0usize, 1, 7, 8, 9, 31, 64, 100] {
            for so in 0..9 {
                for dof in 0..9 {
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
