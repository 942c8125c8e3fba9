//! Registered memory. An [`Mr`] owns its buffer (page-aligned, zeroed); the
//! buffer is deregistered and freed only when the `Mr` handle and the
//! protection domain that registered it are both gone, so memory a WQE names
//! can never be freed or moved under the device while a QP of that PD lives.
//!
//! The device writes this memory asynchronously, so the crate hands out copies
//! and single-byte atomic loads, never `&[u8]` into it.

use super::error::{Error, Result};
use super::keys::{Lkey, Rkey};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// Access flags (`enum ibv_access_flags` values): one type for every backend.
pub use mlx5_dv::sim::Access;

/// Where a registered buffer's memory comes from.
enum Backing {
    /// The heap, page-aligned (`Pd::reg_mr`).
    Heap(Layout),
    /// An anonymous mapping (the memory pool's chunks): huge pages when the
    /// system has them.
    Mapped { _map: memmap2::MmapMut },
}

/// Pages behind a mapped buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pages {
    /// `MAP_HUGETLB` (2 MiB pages from the hugetlbfs pool).
    Huge,
    /// Regular pages with `madvise(MADV_HUGEPAGE)`: transparent huge pages
    /// where the kernel allows them.
    Transparent,
}

/// A page-aligned, zeroed buffer.
pub(crate) struct Buffer {
    ptr: *mut u8,
    len: usize,
    backing: Backing,
}

// SAFETY: plain memory owned by this value; see the module docs for how it
// is accessed.
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
        Ok(Self {
            ptr,
            len,
            backing: Backing::Heap(layout),
        })
    }

    /// An anonymous mapping of `len` bytes: `MAP_HUGETLB` first (when `len`
    /// is a multiple of 2 MiB), else regular pages advised as huge.
    pub(crate) fn mapped(len: usize) -> Result<(Self, Pages)> {
        if len == 0 {
            return Err(Error::Invalid("a chunk of zero bytes".into()));
        }
        let huge = (len % (2 << 20) == 0)
            .then(|| {
                memmap2::MmapOptions::new()
                    .len(len)
                    .huge(Some(21))
                    .map_anon()
                    .ok()
            })
            .flatten();
        let (mut map, pages) = match huge {
            Some(m) => (m, Pages::Huge),
            None => {
                let m = memmap2::MmapOptions::new()
                    .len(len)
                    .map_anon()
                    .map_err(|e| Error::Invalid(format!("cannot map {len} bytes: {e}")))?;
                // Only advice: without THP the chunk still works.
                let _ = m.advise(memmap2::Advice::HugePage);
                (m, Pages::Transparent)
            }
        };
        let ptr = map.as_mut_ptr();
        Ok((
            Self {
                ptr,
                len,
                backing: Backing::Mapped { _map: map },
            },
            pages,
        ))
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Backing::Heap(layout) = self.backing {
            // SAFETY: allocated in `new` with this layout.
            unsafe { dealloc(self.ptr, layout) };
        }
        // A mapping unmaps itself.
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
        // SAFETY: range checked; the buffer lives as long as `self`. The
        // device or another thread may access it concurrently: the copy is
        // atomic stores (`shared`), so that is no data race; the bytes are
        // then unspecified, as with DMA.
        unsafe { mlx5_dv::shared::store_from(src, self.inner.buf.ptr().add(offset)) };
        Ok(())
    }

    /// Copies from the region at `offset` into `dst`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range(offset, dst.len())?;
        // SAFETY: as in `write` (atomic loads).
        unsafe { mlx5_dv::shared::load_into(self.inner.buf.ptr().add(offset), dst) };
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
