//! Memory that can be registered: the caller's own buffers ([`Memory`]),
//! the crate's page-aligned heap buffers ([`AlignedBuf`]), and the checks a
//! registration passes before any device is asked.
//!
//! The MR types that own this memory once it is registered, and the rules
//! for touching it, are in [`super::mr`].

use super::error::{Error, RegRefusal, Result};
use std::alloc::{alloc_zeroed, dealloc, Layout};

/// Access flags (`enum ibv_access_flags` values): one type for every backend.
/// An MR takes any of them; a QP ([`QpAttr::init`](crate::QpAttr::init))
/// the four of `Access::QP_ALL`. `MW_BIND` and `ON_DEMAND` are MR
/// attributes: `ON_DEMAND` (`IBV_ACCESS_ON_DEMAND`, `ibv_reg_mr(3)`)
/// registers without pinning (on-demand paging: see [`Pd`](crate::Pd)),
/// refused where the device's ODP caps lack it; `Access::all()` holds it,
/// `Access::MR_ALL` is every permission without it.
pub use mlx5_dv::verbs::Access;

/// What [`Pd::advise`](crate::Pd::advise) asks of the device for ODP
/// memory (`enum ibv_advise_mr_advice`, `ibv_advise_mr(3)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OdpAdvice {
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH`: fault the pages in for reading
    /// (a later SEND's or WRITE's source, a READ's target on the peer).
    Prefetch,
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE`: fault them in writable
    /// (receives, a peer's WRITEs and atomics, local READ targets).
    PrefetchWrite,
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT`: map into the device only
    /// the pages the process already has present; fault nothing in.
    PrefetchNoFault,
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

/// A zeroed heap buffer aligned to 4096 bytes (a page), of a fixed length:
/// what [`Pd::alloc_mr`](crate::Pd::alloc_mr) registers, and what a
/// deregistered one hands back ([`Memory::Aligned`]).
pub struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: plain owned memory, like a `Box<[u8]>`.
unsafe impl Send for AlignedBuf {}
// SAFETY: as a `Box<[u8]>`: `&AlignedBuf` gives only `&[u8]`, and writing
// needs `&mut AlignedBuf`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// `len` zeroed bytes at a 4096-byte-aligned address.
    ///
    /// Errors: [`RegRefusal::ZeroLength`]; a length the allocator refuses
    /// ([`Error::Os`]).
    pub fn zeroed(len: usize) -> Result<Self> {
        if len == 0 {
            return Err(RegRefusal::ZeroLength.into());
        }
        let too_big = || Error::Os {
            what: format!("allocating a buffer of {len} bytes"),
            source: std::io::ErrorKind::OutOfMemory.into(),
        };
        let layout = Layout::from_size_align(len, 4096).map_err(|_| too_big())?;
        // SAFETY: nonzero size.
        let ptr = std::ptr::NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or_else(too_big)?;
        Ok(Self { ptr, len })
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` initialized (zeroed) bytes owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` is unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout (checked there).
        unsafe {
            dealloc(
                self.ptr.as_ptr(),
                Layout::from_size_align_unchecked(self.len, 4096),
            )
        };
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes at {:p})", self.len, self.ptr)
    }
}

/// Memory the caller owns and hands to a registration
/// ([`Pd::reg_mr`](crate::Pd::reg_mr),
/// [`Pd::reg_local_mr`](crate::Pd::reg_local_mr)). The MR keeps it, and
/// hands it back unchanged (the same allocation or mapping) when it is
/// deregistered ([`LocalMr::into_memory`](crate::LocalMr::into_memory),
/// [`Mr::try_into_memory`](crate::Mr::try_into_memory)).
///
/// The registered range is the value's bytes: a `Vec`'s `len` (its
/// initialized bytes, not its capacity), a mapping's whole length.
#[derive(Debug)]
pub enum Memory {
    /// A vector's `len` bytes.
    Vec(Vec<u8>),
    /// A boxed slice.
    Boxed(Box<[u8]>),
    /// A page-aligned heap buffer.
    Aligned(AlignedBuf),
    /// A writable mapping: anonymous, a file (`MAP_SHARED`), tmpfs or
    /// hugetlbfs.
    MmapMut(memmap2::MmapMut),
    /// A read-only mapping. No LOCAL_WRITE, REMOTE_WRITE or REMOTE_ATOMIC:
    /// the sim refuses those by this type ([`RegRefusal::ReadOnly`]); verbs
    /// devices are asked, and kernel 6.1 pins every registration for writing
    /// (`ib_umem_get`), so `ibv_reg_mr` fails with `EFAULT` for a read-only
    /// shared file mapping even with REMOTE_READ alone, and copies a private
    /// one on write. Map files read-write and shared to serve them.
    Mmap(memmap2::Mmap),
}

impl Memory {
    /// Address of byte 0.
    pub fn as_ptr(&self) -> *const u8 {
        match self {
            Memory::Vec(v) => v.as_ptr(),
            Memory::Boxed(b) => b.as_ptr(),
            Memory::Aligned(a) => a.ptr.as_ptr(),
            Memory::MmapMut(m) => m.as_ptr(),
            Memory::Mmap(m) => m.as_ptr(),
        }
    }
    /// Bytes it holds (what is registered).
    pub fn len(&self) -> usize {
        match self {
            Memory::Vec(v) => v.len(),
            Memory::Boxed(b) => b.len(),
            Memory::Aligned(a) => a.len,
            Memory::MmapMut(m) => m.len(),
            Memory::Mmap(m) => m.len(),
        }
    }
    /// No bytes (such memory cannot be registered).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether the program may write it (all but [`Memory::Mmap`]).
    pub fn is_writable(&self) -> bool {
        !matches!(self, Memory::Mmap(_))
    }
}

/// Where [`Memory::memfd`] puts its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemfdPages {
    /// Regular pages: a file on the kernel's internal tmpfs (shmem).
    Tmpfs,
    /// 2 MiB huge pages: a file on hugetlbfs (`MFD_HUGETLB | MFD_HUGE_2MB`);
    /// needs reserved pages (`/proc/sys/vm/nr_hugepages`) and a length that
    /// is a multiple of 2 MiB.
    Huge2M,
}

impl Memory {
    /// A new file of `len` zero bytes with no name (`memfd_create(2)`), on
    /// tmpfs or hugetlbfs, mapped read-write and shared: a file mapping
    /// obtained without `unsafe`. It is sound because no other handle to the
    /// file exists (no path; the descriptor is closed once mapped), so
    /// nothing can truncate or write it behind the mapping.
    ///
    /// Errors: [`RegRefusal::ZeroLength`]; the system's (`memfd_create`,
    /// `ftruncate`, `mmap`; `ENOMEM` when no huge page is free) as
    /// [`Error::Os`] naming the call.
    pub fn memfd(len: usize, pages: MemfdPages) -> Result<memmap2::MmapMut> {
        let file = Self::memfd_file(len, pages)?;
        // SAFETY: `file` is the only handle to a file no one else can open
        // (see above); it is dropped when this returns, and the mapping then
        // is the file's only user.
        unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(|e| Error::Os {
            what: format!("mmap of a {len}-byte memfd"),
            source: e,
        })
    }

    /// A new unnamed file holding `bytes`, mapped read-only and shared (a
    /// [`Memory::Mmap`] to register with REMOTE_READ, or to see write access
    /// refused). Sound as [`Memory::memfd`]: once it returns, no handle can
    /// write the file.
    ///
    /// Errors: as [`Memory::memfd`].
    pub fn memfd_read_only(bytes: &[u8]) -> Result<memmap2::Mmap> {
        use std::io::Write;
        let mut file = Self::memfd_file(bytes.len(), MemfdPages::Tmpfs)?;
        file.write_all(bytes).map_err(|e| Error::Os {
            what: "writing a memfd".into(),
            source: e,
        })?;
        // SAFETY: as in `memfd`: the only handle is `file`, dropped on return.
        unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::Os {
            what: format!("mmap of a {}-byte memfd", bytes.len()),
            source: e,
        })
    }

    fn memfd_file(len: usize, pages: MemfdPages) -> Result<std::fs::File> {
        use nix::sys::memfd::{memfd_create, MFdFlags};
        if len == 0 {
            return Err(RegRefusal::ZeroLength.into());
        }
        let mut flags = MFdFlags::MFD_CLOEXEC;
        if pages == MemfdPages::Huge2M {
            flags |= MFdFlags::MFD_HUGETLB | MFdFlags::MFD_HUGE_2MB;
        }
        let fd = memfd_create(c"rdma-direct", flags).map_err(|e| Error::Os {
            what: "memfd_create".into(),
            source: e.into(),
        })?;
        let file = std::fs::File::from(fd);
        file.set_len(len as u64).map_err(|e| Error::Os {
            what: format!("ftruncate of a memfd to {len} bytes"),
            source: e,
        })?;
        Ok(file)
    }
}

impl From<Vec<u8>> for Memory {
    fn from(v: Vec<u8>) -> Self {
        Memory::Vec(v)
    }
}
impl From<Box<[u8]>> for Memory {
    fn from(b: Box<[u8]>) -> Self {
        Memory::Boxed(b)
    }
}
impl From<AlignedBuf> for Memory {
    fn from(a: AlignedBuf) -> Self {
        Memory::Aligned(a)
    }
}
impl From<memmap2::MmapMut> for Memory {
    fn from(m: memmap2::MmapMut) -> Self {
        Memory::MmapMut(m)
    }
}
impl From<memmap2::Mmap> for Memory {
    fn from(m: memmap2::Mmap) -> Self {
        Memory::Mmap(m)
    }
}

/// What a registered buffer's bytes belong to.
enum Owner {
    /// The caller's memory, handed back at deregistration. The raw parts of
    /// a `Vec` or `Box` are kept instead of the value, so that moving the MR
    /// (into a QP and back) never asserts the unique ownership a `Box`
    /// carries while the device may be writing the bytes.
    Vec {
        cap: usize,
    },
    Boxed,
    Aligned,
    MmapMut(memmap2::MmapMut),
    Mmap(memmap2::Mmap),
    /// A range the caller manages ([`Pd::reg_mr_raw`](crate::Pd::reg_mr_raw)):
    /// nothing to free; the program may write it only if registered with
    /// write access (the contract promises it writable then, not otherwise).
    Raw {
        writable: bool,
    },
    /// A DMA-BUF registration ([`Pd::register_dmabuf`](crate::Pd::register_dmabuf)):
    /// the pointer is the IOVA, a device address, not a host one; the CPU
    /// never touches it through this buffer, and there is nothing to free.
    Device,
    /// An implicit ODP registration ([`Pd::reg_implicit_odp`](crate::Pd::reg_implicit_odp)):
    /// every address of the process, owned by no one; no CPU access
    /// through it, nothing to free.
    Implicit,
}

/// Registered memory as the backends see it: a pointer, a length, whether
/// it may be written, and what frees it.
pub(crate) struct Buffer {
    ptr: *mut u8,
    len: usize,
    owner: Owner,
}

// SAFETY: plain memory owned by this value (or, for `Raw`, by the caller,
// who promised it outlives the registration); how it is accessed is the MR
// types' business (`super::mr`).
unsafe impl Send for Buffer {}
// SAFETY: as for `Send`: `&Buffer` gives out only the pointer, length and
// owner; every access to the bytes goes through the MR types' rules.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// Takes `mem` apart into a buffer.
    ///
    /// Errors: [`RegRefusal::ZeroLength`] (`mem` is dropped).
    pub(crate) fn from_memory(mem: Memory) -> Result<Self> {
        if mem.is_empty() {
            return Err(RegRefusal::ZeroLength.into());
        }
        let len = mem.len();
        Ok(match mem {
            Memory::Vec(v) => {
                let mut v = std::mem::ManuallyDrop::new(v);
                Buffer {
                    ptr: v.as_mut_ptr(),
                    len,
                    owner: Owner::Vec { cap: v.capacity() },
                }
            }
            Memory::Boxed(b) => Buffer {
                ptr: Box::into_raw(b).cast::<u8>(),
                len,
                owner: Owner::Boxed,
            },
            Memory::Aligned(a) => {
                let a = std::mem::ManuallyDrop::new(a);
                Buffer {
                    ptr: a.ptr.as_ptr(),
                    len,
                    owner: Owner::Aligned,
                }
            }
            Memory::MmapMut(mut m) => Buffer {
                ptr: m.as_mut_ptr(),
                len,
                owner: Owner::MmapMut(m),
            },
            Memory::Mmap(m) => Buffer {
                ptr: m.as_ptr().cast_mut(),
                len,
                owner: Owner::Mmap(m),
            },
        })
    }

    /// A caller-managed range; `writable`: registered with write access.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads (and writes, when `writable`)
    /// until the buffer is dropped.
    pub(crate) unsafe fn raw(ptr: *mut u8, len: usize, writable: bool) -> Self {
        Buffer {
            ptr,
            len,
            owner: Owner::Raw { writable },
        }
    }

    /// A device address range with no CPU mapping: `len` bytes at `iova`
    /// (a DMA-BUF registration). Never dereferenced: [`Self::cpu_mapped`]
    /// is false and the MR types refuse every CPU access to it.
    pub(crate) fn device(iova: u64, len: usize) -> Self {
        Buffer {
            // An address with no provenance: nothing may dereference it.
            ptr: std::ptr::without_provenance_mut(iova as usize),
            len,
            owner: Owner::Device,
        }
    }

    /// The whole address space, `[0, usize::MAX)`, as an implicit ODP
    /// registration covers it. Never dereferenced through this buffer:
    /// [`Self::cpu_mapped`] is false.
    pub(crate) fn implicit() -> Self {
        Buffer {
            ptr: std::ptr::null_mut(),
            len: usize::MAX,
            owner: Owner::Implicit,
        }
    }

    /// Whether the CPU may reach the bytes at [`Self::ptr`] (all but a
    /// [`Self::device`] range and an [`Self::implicit`] one).
    pub(crate) fn cpu_mapped(&self) -> bool {
        !matches!(self.owner, Owner::Device | Owner::Implicit)
    }

    /// Whether it is an implicit ODP registration's ([`Self::implicit`]).
    pub(crate) fn is_implicit(&self) -> bool {
        matches!(self.owner, Owner::Implicit)
    }

    /// `len` zeroed bytes, page-aligned, on the heap.
    pub(crate) fn new(len: usize) -> Result<Self> {
        Self::from_memory(Memory::Aligned(AlignedBuf::zeroed(len)?))
    }

    /// An anonymous mapping of `len` bytes: `MAP_HUGETLB` first (when `len`
    /// is a multiple of 2 MiB), else regular pages advised as huge.
    pub(crate) fn mapped(len: usize) -> Result<(Self, Pages)> {
        if len == 0 {
            return Err(RegRefusal::ZeroLength.into());
        }
        // Under Miri neither hint: it maps only MAP_PRIVATE | MAP_ANONYMOUS
        // (no MAP_HUGETLB) and has no madvise. Both are optional here (a
        // failed huge mapping falls back, the advice's result is ignored),
        // so Miri runs the regular-page path, which is the same memory.
        let huge = (len.is_multiple_of(2 << 20) && !cfg!(miri))
            .then(|| {
                memmap2::MmapOptions::new()
                    .len(len)
                    .huge(Some(21))
                    .map_anon()
                    .ok()
            })
            .flatten();
        let (map, pages) = match huge {
            Some(m) => (m, Pages::Huge),
            None => {
                let m = memmap2::MmapOptions::new()
                    .len(len)
                    .map_anon()
                    .map_err(|e| Error::Os {
                        what: format!("cannot map {len} bytes"),
                        source: e,
                    })?;
                // Only advice: without THP the chunk still works.
                #[cfg(not(miri))]
                let _ = m.advise(memmap2::Advice::HugePage);
                (m, Pages::Transparent)
            }
        };
        Ok((Self::from_memory(Memory::MmapMut(map))?, pages))
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    pub(crate) fn len(&self) -> usize {
        self.len
    }
    pub(crate) fn writable(&self) -> bool {
        match self.owner {
            Owner::Mmap(_) | Owner::Device | Owner::Implicit => false,
            Owner::Raw { writable } => writable,
            _ => true,
        }
    }

    /// The memory back, whole; `None` for a caller-managed range.
    pub(crate) fn into_memory(self) -> Option<Memory> {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again; the owner is moved out once.
        let owner = unsafe { std::ptr::read(&me.owner) };
        let (ptr, len) = (me.ptr, me.len);
        // Each arm puts back together, once, the raw parts `from_memory`
        // took apart.
        Some(match owner {
            // SAFETY: `ptr`, `len`, `cap` are the parts of the `Vec` that
            // `from_memory` leaked, and `me` is never dropped.
            Owner::Vec { cap } => Memory::Vec(unsafe { Vec::from_raw_parts(ptr, len, cap) }),
            // SAFETY: `ptr`/`len` are the `Box<[u8]>` `from_memory` leaked; `me`
            // is never dropped, so it is rebuilt once.
            Owner::Boxed => Memory::Boxed(unsafe {
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len))
            }),
            Owner::Aligned => Memory::Aligned(AlignedBuf {
                // SAFETY: the `AlignedBuf`'s pointer `from_memory` took, non-null.
                ptr: unsafe { std::ptr::NonNull::new_unchecked(ptr) },
                len,
            }),
            Owner::MmapMut(m) => Memory::MmapMut(m),
            Owner::Mmap(m) => Memory::Mmap(m),
            Owner::Raw { .. } | Owner::Device | Owner::Implicit => return None,
        })
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let owner = std::mem::replace(&mut self.owner, Owner::Raw { writable: false });
        let me = Buffer {
            ptr: self.ptr,
            len: self.len,
            owner,
        };
        // Frees (or unmaps) through the value it came from.
        drop(Buffer::into_memory(me));
    }
}

/// The checks every registration passes before a device is asked
/// (IB spec 10.6.3.1 for the access rule):
///
/// - [`RegRefusal::UnknownAccess`]: bits this crate does not know;
/// - [`RegRefusal::RemoteNeedsLocalWrite`]: REMOTE_WRITE or REMOTE_ATOMIC
///   without LOCAL_WRITE;
/// - [`RegRefusal::ZeroLength`], [`RegRefusal::Wraps`]: the range.
pub(crate) fn check_registration(addr: u64, len: usize, access: Access) -> Result<()> {
    if Access::from_bits(access.bits()).is_none() {
        return Err(RegRefusal::UnknownAccess(access.bits()).into());
    }
    if access.intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
        && !access.contains(Access::LOCAL_WRITE)
    {
        return Err(RegRefusal::RemoteNeedsLocalWrite.into());
    }
    if len == 0 {
        return Err(RegRefusal::ZeroLength.into());
    }
    if addr.checked_add(len as u64).is_none() {
        return Err(RegRefusal::Wraps {
            addr,
            len: len as u64,
        }
        .into());
    }
    Ok(())
}

/// Whether `access` lets anything write the memory.
pub(crate) fn writes(access: Access) -> bool {
    access.intersects(Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
}
