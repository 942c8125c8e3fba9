//! Ring memory: a byte ring whose length is a power of two, written and read at
//! offsets that continue at its start when they reach its end.
//!
//! Generic over where the memory lives, so the codec runs on a plain `Vec` in
//! tests and on the SQ buffer `mlx5dv_init_obj` returns in the driver.

use core::marker::PhantomData;
use core::ptr::NonNull;

/// A power-of-two-sized byte ring (an SQ buffer, a CQ buffer).
#[derive(Debug)]
pub struct RingBuf<'a> {
    ptr: NonNull<u8>,
    len: usize,
    /// `(len - 1) & !15`: a 16-byte segment's offset in one `and`.
    seg_mask: usize,
    _mem: PhantomData<&'a mut [u8]>,
}

// SAFETY: a RingBuf is a unique handle to its bytes (as `&mut [u8]` is).
unsafe impl Send for RingBuf<'_> {}

impl<'a> RingBuf<'a> {
    /// A ring over `mem`. Returns `None` unless `mem.len()` is a power of two and at least 64.
    pub fn from_slice(mem: &'a mut [u8]) -> Option<Self> {
        if !mem.len().is_power_of_two() || mem.len() < 64 {
            return None;
        }
        Some(Self {
            len: mem.len(),
            seg_mask: (mem.len() - 1) & !15,
            ptr: NonNull::from(mem).cast(),
            _mem: PhantomData,
        })
    }

    /// A ring over raw device-shared memory (`mlx5dv_qp.sq.buf`, `mlx5dv_cq.buf`).
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes for `'a`, and no
    /// other Rust reference may access those bytes during `'a` (the device may).
    /// `len` must be a power of two and at least 64.
    pub unsafe fn from_raw(ptr: NonNull<u8>, len: usize) -> Self {
        debug_assert!(len.is_power_of_two() && len >= 64);
        Self {
            ptr,
            len,
            seg_mask: len.wrapping_sub(1) & !15,
            _mem: PhantomData,
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a ring has at least 64 bytes.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The same ring, borrowed: a copy whose pointer and length a loop can
    /// keep in registers while it writes the ring through it.
    #[inline(always)]
    pub fn reborrow(&mut self) -> RingBuf<'_> {
        RingBuf {
            ptr: self.ptr,
            len: self.len,
            seg_mask: self.seg_mask,
            _mem: PhantomData,
        }
    }

    /// Base address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Copies `src` to ring offset `off` (taken modulo the length), continuing
    /// at offset 0 when the end is reached.
    ///
    /// # Panics
    /// If `src` is longer than the ring.
    #[inline]
    pub fn write_wrapping(&mut self, off: usize, src: &[u8]) {
        assert!(src.len() <= self.len);
        let off = off & (self.len - 1);
        if src.len() <= self.len - off {
            // SAFETY: `off + src.len() <= len`; as below.
            unsafe {
                core::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), src.len())
            };
            return;
        }
        let first = self.len - off;
        // SAFETY: `off + first <= len` and `src.len() - first <= len`; the ring
        // owns these bytes for 'a (constructor contract); src cannot overlap a
        // uniquely owned ring.
        unsafe {
            core::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), first);
            core::ptr::copy_nonoverlapping(
                src.as_ptr().add(first),
                self.ptr.as_ptr(),
                src.len() - first,
            );
        }
    }

    /// Copies from ring offset `off` (modulo the length, wrapping) into `dst`.
    ///
    /// # Panics
    /// If `dst` is longer than the ring.
    #[inline]
    pub fn read_wrapping(&self, off: usize, dst: &mut [u8]) {
        assert!(dst.len() <= self.len);
        let off = off & (self.len - 1);
        if dst.len() <= self.len - off {
            // SAFETY: `off + dst.len() <= len`; as in `write_wrapping`.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    self.ptr.as_ptr().add(off),
                    dst.as_mut_ptr(),
                    dst.len(),
                )
            };
            return;
        }
        let first = self.len - off;
        // SAFETY: as in `write_wrapping`.
        unsafe {
            core::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), first);
            core::ptr::copy_nonoverlapping(
                self.ptr.as_ptr(),
                dst.as_mut_ptr().add(first),
                dst.len() - first,
            );
        }
    }

    /// Reads the 16-byte segment at `off` (as [`Self::write_seg`] places it).
    #[inline(always)]
    pub fn read_seg(&self, off: usize) -> [u8; 16] {
        let off = off & self.seg_mask;
        // SAFETY: as in `write_seg`: `off + 16 <= len`, the ring's bytes.
        unsafe {
            self.ptr
                .as_ptr()
                .add(off)
                .cast::<[u8; 16]>()
                .read_unaligned()
        }
    }

    /// Writes the 2 bytes `b` at `off` (taken modulo the length and
    /// rounded down to even): one 2-byte store, as a field of a segment
    /// such as an SRQ WQE's `next_wqe_index` (big-endian) is written.
    #[inline(always)]
    pub fn write_u16_bytes(&mut self, off: usize, b: [u8; 2]) {
        let off = off & (self.len - 1) & !1;
        // SAFETY: `off + 2 <= len` (an even offset below an even length);
        // the ring owns these bytes for 'a (constructor contract).
        unsafe {
            self.ptr
                .as_ptr()
                .add(off)
                .cast::<[u8; 2]>()
                .write_unaligned(b)
        };
    }

    /// Writes one 16-byte segment at `off` (taken modulo the length and
    /// rounded down to a multiple of 16, as every WQE segment's offset is):
    /// a 16-byte-aligned segment never straddles the end of a ring of a
    /// power-of-two length of at least 64 bytes, so this is one store,
    /// with no wrap test and nothing staged.
    #[inline(always)]
    pub fn write_seg(&mut self, off: usize, seg: &[u8; 16]) {
        let off = off & self.seg_mask;
        // SAFETY: `off + 16 <= len` (a multiple of 16 below a length that
        // is a multiple of 16: the constructors' power of two, at least
        // 64); the ring owns these bytes for 'a (constructor contract).
        unsafe {
            self.ptr
                .as_ptr()
                .add(off)
                .cast::<[u8; 16]>()
                .write_unaligned(*seg)
        };
    }
}
