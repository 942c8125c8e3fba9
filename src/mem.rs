//! Registered memory. An [`Mr`] owns its buffer (page-aligned, zeroed); the
//! buffer is deregistered and freed only when the `Mr` handle and the
//! protection domain that registered it are both gone, so memory a WQE names
//! can never be freed or moved under the device while a QP of that PD lives.
//!
//! The device writes this memory asynchronously, so the crate hands out copies
//! and single-byte atomic loads, never `&[u8]` into it.

use crate::wr::{Lkey, Rkey};
use crate::{Error, Result};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// Access flags (`enum ibv_access_flags` values): one type for every backend.
pub use mlx5_dv::sim::Access;

/// A page-aligned, zeroed heap buffer.
pub(crate) struct Buffer {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: plain heap memory; see the module docs for how it is accessed.
unsafe impl Send for Buffer {}
unsafe impl Sync for Buffer {}

impl Buffer {
    pub(crate) fn new(len: usize) -> Result<Self> {
        if len == 0 {
            return Err(Error::Invalid(
                "a memory region of zero bytes cannot be registered".into(),
            ));
        }
        let too_big = || Error::Invalid(format!("cannot allocate a memory region of {len} bytes"));
        let layout = Layout::from_size_align(len, 4096).map_err(|_| too_big())?;
        // SAFETY: nonzero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(too_big());
        }
        Ok(Self { ptr, layout })
    }
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

/// What deregisters an MR when it is dropped (backend-specific).
pub(crate) trait Registration: Send + Sync {}

pub(crate) struct MrInner {
    // Field order matters: the registration drops (deregisters) before the buffer.
    pub(crate) _reg: Box<dyn Registration>,
    pub(crate) buf: Buffer,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
}

/// A registered memory region. Cloning makes another handle to the same region.
#[derive(Clone)]
pub struct Mr {
    pub(crate) inner: Arc<MrInner>,
}

impl Mr {
    pub fn lkey(&self) -> Lkey {
        Lkey(self.inner.lkey)
    }
    pub fn rkey(&self) -> Rkey {
        Rkey(self.inner.rkey)
    }
    /// Virtual address of byte 0.
    pub fn addr(&self) -> u64 {
        self.inner.buf.ptr() as u64
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.inner.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        false
    }

    pub(crate) fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(Error::Invalid(format!(
                "range {offset}+{len} is outside the {}-byte memory region",
                self.len()
            ))),
        }
    }

    /// Copies `src` into the region at `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check_range(offset, src.len())?;
        // SAFETY: range checked; the buffer lives as long as `self`. The device
        // may write concurrently: like DMA, the result is then unspecified but
        // memory-safe (u8 stores).
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.inner.buf.ptr().add(offset), src.len())
        };
        Ok(())
    }

    /// Copies from the region at `offset` into `dst`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range(offset, dst.len())?;
        // SAFETY: as in `write`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.inner.buf.ptr().add(offset),
                dst.as_mut_ptr(),
                dst.len(),
            )
        };
        Ok(())
    }

    /// Reads one byte with acquire order: the way to poll for data the device
    /// writes (perftest polls the last byte of the receive buffer).
    ///
    /// # Panics
    /// If `offset >= self.len()` (as slice indexing does).
    #[inline]
    pub fn load_u8(&self, offset: usize) -> u8 {
        assert!(
            offset < self.len(),
            "offset {offset} outside the memory region"
        );
        // SAFETY: in bounds; AtomicU8 needs no alignment.
        unsafe { AtomicU8::from_ptr(self.inner.buf.ptr().add(offset)) }.load(Ordering::Acquire)
    }

    /// Stores one byte with release order.
    ///
    /// # Panics
    /// If `offset >= self.len()` (as slice indexing does).
    #[inline]
    pub fn store_u8(&self, offset: usize, v: u8) {
        assert!(
            offset < self.len(),
            "offset {offset} outside the memory region"
        );
        // SAFETY: in bounds; AtomicU8 needs no alignment.
        unsafe { AtomicU8::from_ptr(self.inner.buf.ptr().add(offset)) }.store(v, Ordering::Release);
    }
}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .field("lkey", &format_args!("{:#x}", self.inner.lkey))
            .field("rkey", &format_args!("{:#x}", self.inner.rkey))
            .finish()
    }
}
