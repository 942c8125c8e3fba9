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
        // Under Miri neither hint: it maps only MAP_PRIVATE | MAP_ANONYMOUS
        // (no MAP_HUGETLB) and has no madvise. Both are optional here (a
        // failed huge mapping falls back, the advice's result is ignored),
        // so Miri runs the regular-page path, which is the same memory.
        let huge = (len % (2 << 20) == 0 && !cfg!(miri))
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
                #[cfg(not(miri))]
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

#[cfg(test)]
mod tests {
    //! The buffers and `Mr`'s accessors alone (no device); they run under
    //! Miri too (`scripts/miri`), which checks every raw access here.
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// A registration that, when dropped, reads the buffer it registers:
    /// were the buffer freed first, Miri would report a use after free.
    struct ReadsOnDrop {
        ptr: *const u8,
        len: usize,
        dropped: Arc<AtomicBool>,
    }
    // SAFETY: test-only; the pointer is read once, in `drop`.
    unsafe impl Send for ReadsOnDrop {}
    unsafe impl Sync for ReadsOnDrop {}
    impl Registration for ReadsOnDrop {}
    impl Drop for ReadsOnDrop {
        fn drop(&mut self) {
            let mut last = [0u8; 1];
            // SAFETY: `MrInner` drops the registration before the buffer.
            unsafe { mlx5_dv::shared::load_into(self.ptr.add(self.len - 1), &mut last) };
            assert_eq!(last[0], 0x5a);
            self.dropped.store(true, Ordering::Relaxed);
        }
    }

    fn mr(buf: Buffer, dropped: &Arc<AtomicBool>) -> Mr {
        let reg = ReadsOnDrop {
            ptr: buf.ptr(),
            len: buf.len(),
            dropped: dropped.clone(),
        };
        Mr {
            inner: Arc::new(MrInner {
                _reg: Box::new(reg),
                buf,
                lkey: 0x200,
                rkey: 0x300,
            }),
        }
    }

    #[test]
    fn buffers_are_zeroed_page_aligned_and_refuse_zero_bytes() {
        assert!(Buffer::new(0).is_err());
        assert!(Buffer::mapped(0).is_err());
        let heap = Buffer::new(5000).unwrap();
        let (map, _) = Buffer::mapped(8192).unwrap();
        for (b, len) in [(&heap, 5000), (&map, 8192)] {
            assert_eq!(b.len(), len);
            assert_eq!(b.ptr() as usize % 4096, 0);
            let mut got = vec![0xffu8; len];
            // SAFETY: the whole buffer, which lives for the loop.
            unsafe { mlx5_dv::shared::load_into(b.ptr(), &mut got) };
            assert!(got.iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn mr_copies_and_byte_access_stay_in_range() {
        for mapped in [false, true] {
            let buf = if mapped {
                Buffer::mapped(4096).unwrap().0
            } else {
                Buffer::new(4096).unwrap()
            };
            let dropped = Arc::new(AtomicBool::new(false));
            let m = mr(buf, &dropped);
            assert_eq!((m.len(), m.lkey().0, m.rkey().0), (4096, 0x200, 0x300));
            m.write(4090, b"abcdef").unwrap();
            assert!(m.write(4091, b"abcdef").is_err());
            assert!(m.write(usize::MAX, b"a").is_err());
            let mut got = [0u8; 8];
            m.read(4088, &mut got).unwrap();
            assert_eq!(&got, b"\0\0abcdef");
            assert!(m.read(4089, &mut got).is_err());
            m.store_u8(4095, 0x5a);
            assert_eq!(m.load_u8(4095), 0x5a);
            assert_eq!(m.load_u8(0), 0);
            let past_the_end = std::panic::AssertUnwindSafe(|| m.load_u8(4096));
            assert!(std::panic::catch_unwind(past_the_end).is_err());
            // A clone is another handle to the same region: the registration
            // goes (reading the buffer: see `ReadsOnDrop`) with the last one.
            let c = m.clone();
            drop(m);
            assert!(!dropped.load(Ordering::Relaxed));
            assert_eq!(c.load_u8(4090), b'a');
            drop(c);
            assert!(dropped.load(Ordering::Relaxed));
        }
    }

    /// The device (the sim's thread) reads and writes an MR while the host
    /// does: with every access atomic that is no data race, which Miri's
    /// race detector checks here with two threads.
    #[test]
    fn concurrent_copies_are_no_data_race() {
        let dropped = Arc::new(AtomicBool::new(false));
        let m = mr(Buffer::new(4096).unwrap(), &dropped);
        let rounds = if cfg!(miri) { 4 } else { 1000 };
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..rounds {
                    m.write(0, &[i as u8; 64]).unwrap();
                    m.store_u8(63, 1);
                }
            });
            s.spawn(|| {
                let mut got = [0u8; 64];
                for _ in 0..rounds {
                    m.read(0, &mut got).unwrap();
                    let _ = m.load_u8(63);
                }
            });
        });
        m.store_u8(4095, 0x5a);
        let mut got = [0u8; 64];
        m.read(0, &mut got).unwrap();
        assert_eq!(got[63], 1);
    }
}
