//! The sim's door to memory: the buffers it allocates for rings, doorbell
//! records and UAR pages ([`DmaBuf`]), and its "DMA" into registered memory.

use crate::mmio;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};

/// Zeroed, 4096-byte-aligned memory of a power-of-two length, shared with the
/// host-side driver through raw pointers. Offsets wrap modulo the length.
pub(super) struct DmaBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: DmaBuf is plain memory; all access goes through raw pointers whose
// cross-thread ordering is set by the doorbell-record / op_own atomics.
unsafe impl Send for DmaBuf {}
// SAFETY: `&DmaBuf` hands out only its raw pointer and length; every access
// through it is a raw-pointer access whose cross-thread ordering, as for
// `Send`, comes from the doorbell-record / op_own atomics (`mmio`, `shared`).
unsafe impl Sync for DmaBuf {}

impl DmaBuf {
    pub(super) fn new(len: usize) -> Self {
        assert!(len.is_power_of_two());
        let layout = Layout::from_size_align(len, 4096).expect("layout");
        // SAFETY: layout has nonzero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Self { ptr, layout }
    }

    pub(super) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    fn mask(&self) -> usize {
        self.layout.size() - 1
    }

    /// Reads `N` bytes at `off` (wrapping).
    pub(super) fn read_array<const N: usize>(&self, off: usize) -> [u8; N] {
        let mut out = [0u8; N];
        self.read_wrapping(off, &mut out);
        out
    }

    /// Copies `dst.len()` bytes from `off` (wrapping) into `dst`: at most two
    /// copies. `dst` must not be longer than the buffer.
    #[inline]
    pub(super) fn read_wrapping(&self, off: usize, dst: &mut [u8]) {
        let len = self.layout.size();
        assert!(dst.len() <= len);
        let off = off & self.mask();
        if dst.len() <= len - off {
            // SAFETY: `off + dst.len() <= len`; as below.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.ptr.as_ptr().add(off),
                    dst.as_mut_ptr(),
                    dst.len(),
                )
            };
            return;
        }
        let first = len - off;
        // SAFETY: `off + first <= len` and `dst.len() - first <= len`; the host
        // side published these bytes before the doorbell record we acquired.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr(),
                dst.as_mut_ptr().add(first),
                dst.len() - first,
            );
        }
    }

    /// Writes `src` at `off` (wrapping).
    pub(super) fn write(&self, off: usize, src: &[u8]) {
        let off = off & self.mask();
        if off + src.len() <= self.layout.size() {
            // SAFETY: `off..off + src.len()` is inside the allocation; `src` is
            // host memory of ours, not this buffer. Readers on the host side
            // are ordered by the release store that publishes the entry.
            unsafe {
                std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), src.len())
            };
            return;
        }
        for (k, &b) in src.iter().enumerate() {
            // SAFETY: masked offset is inside the allocation.
            unsafe {
                self.ptr
                    .as_ptr()
                    .add((off + k) & self.mask())
                    .write_volatile(b)
            };
        }
    }

    /// Publishes a CQE's `op_own` byte with release order.
    pub(super) fn publish_op_own(&self, off: usize, v: u8) {
        // SAFETY: masked offset is inside the allocation.
        unsafe { mmio::publish_op_own(self.ptr.as_ptr().add(off & self.mask()), v) };
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// Copies `len` bytes between registered regions.
///
/// # Safety
/// Both ranges must lie in live registered memory regions.
pub(super) unsafe fn copy(src: u64, dst: u64, len: usize) {
    // SAFETY: caller guarantees both ranges are valid; `copy` tolerates
    // overlap, and its atomic accesses make a concurrent host access no race.
    unsafe { crate::shared::copy(src as *const u8, dst as *mut u8, len) };
}

/// Copies one byte and publishes it with release order after all earlier writes.
///
/// # Safety
/// As [`copy`] for one byte.
pub(super) unsafe fn copy_last_byte(src: u64, dst: u64) {
    // SAFETY: caller guarantees validity.
    let b = unsafe { AtomicU8::from_ptr(src as *mut u8) }.load(Ordering::Relaxed);
    // SAFETY: as above.
    unsafe { store_last_byte(dst, b) };
}

/// Stores the last byte of a transfer with release order.
///
/// # Safety
/// `dst` is one writable byte of registered memory that stays valid for
/// the call (the device's view: other threads may access it concurrently).
pub(super) unsafe fn store_last_byte(dst: u64, b: u8) {
    // SAFETY: caller guarantees validity; u8 needs no alignment.
    unsafe { AtomicU8::from_ptr(dst as *mut u8) }.store(b, Ordering::Release);
}

/// Copies `src` into registered memory at `dst`.
///
/// # Safety
/// `dst..dst+src.len()` must lie in a live registered memory region.
pub(super) unsafe fn write_from(dst: u64, src: &[u8]) {
    // SAFETY: caller guarantees validity; `src` is host memory of ours.
    unsafe { crate::shared::store_from(src, dst as *mut u8) };
}

/// Atomic compare-and-swap on a registered 8-byte word; returns the old value.
///
/// # Safety
/// `addr` must be 8-byte aligned inside a live registered memory region.
pub(super) unsafe fn compare_swap(addr: u64, compare: u64, swap: u64) -> u64 {
    // SAFETY: caller guarantees alignment and validity.
    let word = unsafe { std::sync::atomic::AtomicU64::from_ptr(addr as *mut u64) };
    match word.compare_exchange(compare, swap, Ordering::AcqRel, Ordering::Acquire) {
        Ok(v) | Err(v) => v,
    }
}

/// Atomic fetch-and-add on a registered 8-byte word; returns the old value.
///
/// # Safety
/// As [`compare_swap`].
pub(super) unsafe fn fetch_add(addr: u64, add: u64) -> u64 {
    // SAFETY: caller guarantees alignment and validity.
    unsafe { std::sync::atomic::AtomicU64::from_ptr(addr as *mut u64) }
        .fetch_add(add, Ordering::AcqRel)
}

/// Atomically replaces the `size`-byte word at `addr` (4 or 8 bytes, host
/// byte order) with `f(old)`, cut to `size` bytes; returns the old value.
///
/// # Safety
/// `addr` must be `size`-byte aligned inside a live registered memory
/// region, and `size` 4 or 8.
pub(super) unsafe fn update(addr: u64, size: u32, f: impl Fn(u64) -> u64) -> u64 {
    use std::sync::atomic::{AtomicU32, AtomicU64};
    let (ok, fail) = (Ordering::AcqRel, Ordering::Acquire);
    if size == 4 {
        // SAFETY: caller guarantees alignment and validity.
        let word = unsafe { AtomicU32::from_ptr(addr as *mut u32) };
        let r = word.fetch_update(ok, fail, |v| Some(f(v as u64) as u32));
        (match r {
            Ok(v) | Err(v) => v,
        }) as u64
    } else {
        debug_assert_eq!(size, 8);
        // SAFETY: caller guarantees alignment and validity.
        let word = unsafe { AtomicU64::from_ptr(addr as *mut u64) };
        match word.fetch_update(ok, fail, |v| Some(f(v))) {
            Ok(v) | Err(v) => v,
        }
    }
}

/// Copies registered memory at `src` into `dst`.
///
/// # Safety
/// `src..src+dst.len()` must lie in a live registered memory region.
pub(super) unsafe fn read_into(src: u64, dst: &mut [u8]) {
    // SAFETY: caller guarantees validity; `dst` is host memory of ours.
    unsafe { crate::shared::load_into(src as *const u8, dst) };
}

/// Copies memory of an owned MR (`Device::reg_mr_owned`) at `src` into `dst`,
/// plainly.
///
/// # Safety
/// `src..src+dst.len()` lies in a live owned MR that nothing but the WR
/// being executed accesses now.
pub(super) unsafe fn read_owned(src: u64, dst: &mut [u8]) {
    // SAFETY: the caller's contract; `dst` is the sim's own memory.
    unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
}

/// Copies `src` into an owned MR at `dst`, plainly.
///
/// # Safety
/// As [`read_owned`], for `dst..dst+src.len()`.
pub(super) unsafe fn write_owned(dst: u64, src: &[u8]) {
    // SAFETY: the caller's contract; `src` is the sim's own memory.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
}

/// Copies `len` bytes from an owned MR (read plainly) into shared
/// registered memory (stored a byte at a time, atomically).
///
/// # Safety
/// `src..src+len` as [`read_owned`]; `dst..dst+len` in a live registered MR;
/// the two do not overlap (an owned MR is covered by no other).
pub(super) unsafe fn copy_from_owned(src: u64, dst: u64, len: usize) {
    // SAFETY: the caller's contract: `src` is owned by this WR for the call.
    let from = unsafe { std::slice::from_raw_parts(src as *const u8, len) };
    // SAFETY: `dst` is valid registered memory (the caller's contract).
    unsafe { crate::shared::store_from(from, dst as *mut u8) };
}

/// Copies `len` bytes of shared registered memory (loaded a byte at a time,
/// atomically) into an owned MR (written plainly).
///
/// # Safety
/// As [`copy_from_owned`], with the roles swapped.
pub(super) unsafe fn copy_to_owned(src: u64, dst: u64, len: usize) {
    // SAFETY: the caller's contract: `dst` is owned by this WR for the call.
    let to = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, len) };
    // SAFETY: `src` is valid registered memory (the caller's contract).
    unsafe { crate::shared::load_into(src as *const u8, to) };
}
