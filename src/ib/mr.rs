//! Registered memory regions, of two kinds the API keeps apart:
//!
//! 1. [`LocalMr`]: memory only this program's own WRs touch (no REMOTE_*
//!    access). It is not `Clone`; while the program holds it no WR names
//!    it, so it derefs to plain `&[u8]` / `&mut [u8]` and its copies are
//!    `memcpy`. To use it in a WR it *moves* into the post
//!    ([`Qp::post_send_owned`](crate::Qp::post_send_owned),
//!    [`Qp::post_recv_owned`](crate::Qp::post_recv_owned)); the QP keeps it
//!    until the WR completes or is flushed and hands it back
//!    ([`Qp::take_send_buf`](crate::Qp::take_send_buf),
//!    [`Qp::take_recv_buf`](crate::Qp::take_recv_buf)). Dropping it
//!    deregisters it at once.
//! 2. [`Mr`]: memory a peer may reach (any access, REMOTE_* included), or
//!    named by borrowed [`Sge`](crate::Sge)s. A peer may write or read it at
//!    any moment with no local WR, so safe access is one-byte atomic copies,
//!    the device side's granularity ([`Mr::write`], [`Mr::read`],
//!    [`Mr::load_u8`]); plain slices come only through `unsafe`
//!    ([`Mr::slice`], [`Mr::slice_mut`]), whose contract is that the
//!    program's protocol keeps every peer and WR off the range meanwhile.
//!    Cloning makes another handle; when the last one goes the region is
//!    deregistered as soon as no WR posted before then on a QP of its PD is
//!    outstanding.
//!
//! `docs/concepts.md` ("Two kinds of memory") has the rules with examples.

use super::error::{Error, Result};
use super::keys::{Lkey, Rkey};
use super::mem::{Access, Buffer, Memory};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// What deregisters an MR when it is dropped (backend-specific).
pub(crate) trait Registration: Send + Sync {
    /// The backend's handle of the registration, as an integer: a verbs
    /// `*mut ibv_mr` (or `*mut ibv_mw`); 0 where there is none (the sim).
    /// What a memory-window bind names its MR by (`ibv_mw_bind_info.mr`).
    #[cfg_attr(not(feature = "verbs"), allow(dead_code))] // (verbs binds only)
    fn handle(&self) -> usize {
        0
    }
}

/// Counts a PD's live registrations: one per `MrInner`, gone at its drop.
pub(crate) struct LiveGuard(pub(crate) Arc<AtomicU64>);

impl LiveGuard {
    pub(crate) fn new(count: &Arc<AtomicU64>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        LiveGuard(count.clone())
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A registration and the memory it covers.
pub(crate) struct MrInner {
    // Field order matters: the registration drops (deregisters) before the
    // count goes down and before the buffer is freed.
    pub(crate) reg: Box<dyn Registration>,
    pub(crate) live: Option<LiveGuard>,
    pub(crate) buf: Buffer,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
    pub(crate) access: Access,
    /// The PD's number (unique in the process): a WR may name the MR only
    /// on a QP of this PD, whose progress the PD watches.
    pub(crate) pd: u32,
}

impl MrInner {
    /// Deregisters, then hands the memory back (`None`: a caller-managed range).
    pub(crate) fn into_memory(self) -> Option<Memory> {
        let MrInner { reg, live, buf, .. } = self;
        drop(reg);
        drop(live);
        buf.into_memory()
    }
}

/// Where an [`Mr`] goes when its last handle is dropped: its PD, which
/// deregisters it once no outstanding WR can name it.
pub(crate) trait DeferredDereg: Send + Sync {
    /// Takes `mr`: deregisters it now when no WR posted so far on a QP of
    /// the PD is outstanding, else keeps it until those WRs are retired.
    fn defer(&self, mr: MrInner);
    /// Whether no outstanding WR on the PD's QPs may name the MR of `lkey`
    /// (every send retired, and no outstanding receive names it).
    fn idle_for(&self, lkey: u32) -> bool;
}

/// What every handle of one [`Mr`] shares.
pub(crate) struct MrShared {
    ptr: *mut u8,
    len: usize,
    lkey: u32,
    rkey: u32,
    access: Access,
    writable: bool,
    /// False for a DMA-BUF registration (`ptr` is its IOVA) and an
    /// implicit ODP one: `ptr` never dereferenced (every byte accessor
    /// refuses).
    cpu: bool,
    /// An implicit ODP registration: `ptr` 0, `len` `usize::MAX`.
    implicit: bool,
    pd: u32,
    mr: Option<MrInner>,
    dereg: Arc<dyn DeferredDereg>,
}

// SAFETY: `ptr` is the registered buffer's (owned by `mr`, `Send + Sync`);
// every access through it is an atomic or an `unsafe` method's contract.
unsafe impl Send for MrShared {}
// SAFETY: as for `Send`: through `&MrShared` the buffer is touched only
// by atomics, plain reads of read-only memory (nothing writes it), or
// `unsafe` methods whose callers exclude concurrent writers.
unsafe impl Sync for MrShared {}

impl Drop for MrShared {
    fn drop(&mut self) {
        if let Some(mr) = self.mr.take() {
            self.dereg.defer(mr);
        }
    }
}

/// A registered memory region that a peer may reach, or that borrowed
/// [`Sge`](crate::Sge)s name (the second kind of [`concepts`](crate::concepts), "Two kinds of memory").
/// Cloning makes another handle to the same region.
///
/// Safe access is one-byte atomic copies; see [`Mr::slice`] for plain slices.
#[derive(Clone)]
pub struct Mr {
    pub(crate) inner: Arc<MrShared>,
}

impl Mr {
    pub(crate) fn new(mr: MrInner, dereg: Arc<dyn DeferredDereg>) -> Mr {
        Mr {
            inner: Arc::new(MrShared {
                ptr: mr.buf.ptr(),
                len: mr.buf.len(),
                lkey: mr.lkey,
                rkey: mr.rkey,
                access: mr.access,
                writable: mr.buf.writable(),
                cpu: mr.buf.cpu_mapped(),
                implicit: mr.buf.is_implicit(),
                pd: mr.pd,
                mr: Some(mr),
                dereg,
            }),
        }
    }
    /// The key this program's WRs quote (`ibv_mr.lkey`).
    pub fn lkey(&self) -> Lkey {
        Lkey(self.inner.lkey)
    }
    /// The key a peer quotes to reach the region (`ibv_mr.rkey`; useful only
    /// with REMOTE_* access).
    pub fn rkey(&self) -> Rkey {
        Rkey(self.inner.rkey)
    }
    /// The address of byte 0 that WRs and peers name: the virtual address
    /// of byte 0; for a DMA-BUF registration ([`Pd::register_dmabuf`](crate::Pd::register_dmabuf))
    /// its IOVA, a device address with no CPU mapping (not `ibv_mr.addr`,
    /// which libibverbs sets to the dma-buf offset: rust-ibverbs PR #148).
    /// Send a peer this, with [`Self::rkey`].
    pub fn addr(&self) -> u64 {
        self.inner.ptr as u64
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }
    /// Whether the program may reach its bytes through this handle: false
    /// for a DMA-BUF registration and an implicit ODP one
    /// ([`Self::is_implicit_odp`]), whose byte accessors ([`Self::write`],
    /// [`Self::read`], [`Self::slice`], ...) refuse
    /// ([`Error::NoCpuMapping`]) and whose SGEs are made with
    /// [`Sge::of_dmabuf`](crate::Sge::of_dmabuf).
    pub fn is_cpu_mapped(&self) -> bool {
        self.inner.cpu
    }
    /// Whether it is an implicit ODP registration of the whole address
    /// space ([`Pd::reg_implicit_odp`](crate::Pd::reg_implicit_odp)):
    /// [`Self::addr`] 0, [`Self::len`] `usize::MAX`, no CPU mapping, SGEs
    /// made with [`Sge::of_implicit_odp`](crate::Sge::of_implicit_odp).
    pub fn is_implicit_odp(&self) -> bool {
        self.inner.implicit
    }
    /// Never: no zero-byte region can be registered.
    pub fn is_empty(&self) -> bool {
        false
    }
    /// The access flags it was registered with.
    pub fn access(&self) -> Access {
        self.inner.access
    }
    /// Whether the program may write it (not a read-only mapping, not a
    /// raw range registered without write access).
    pub fn is_writable(&self) -> bool {
        self.inner.writable
    }
    pub(crate) fn pd(&self) -> u32 {
        self.inner.pd
    }
    /// Its registration's backend handle ([`Registration::handle`]).
    #[cfg_attr(not(feature = "verbs"), allow(dead_code))] // (verbs binds only)
    pub(crate) fn handle(&self) -> usize {
        self.inner.mr.as_ref().map_or(0, |m| m.reg.handle())
    }

    pub(crate) fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        check_range(offset, len, self.len())
    }

    /// [`Error::NoCpuMapping`] naming `what` for a DMA-BUF registration.
    #[inline]
    pub(crate) fn check_cpu(&self, what: &'static str) -> Result<()> {
        if self.inner.cpu {
            return Ok(());
        }
        Err(Error::NoCpuMapping { what })
    }

    fn check_write(&self, offset: usize, len: usize) -> Result<()> {
        if !self.inner.writable {
            // (A DMA-BUF registration is not writable: its refusal says why.)
            self.check_cpu("a write (Mr::write, Mr::slice_mut)")?;
            return Err(Error::Invalid(
                "the memory region is a read-only mapping".into(),
            ));
        }
        self.check_range(offset, len)
    }

    /// Copies `src` into the region at `offset`, one relaxed atomic byte
    /// store each (a peer's RDMA may race with it: the bytes are then
    /// unspecified, as with DMA, but there is no undefined behaviour).
    ///
    /// Errors: the range is outside the region ([`Error::OutOfBounds`]), or
    /// the region is read-only ([`Error::Invalid`]) or has no CPU mapping
    /// ([`Error::NoCpuMapping`]); nothing is written.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check_write(offset, src.len())?;
        // SAFETY: range checked, memory writable; the buffer lives as long as
        // `self`. Concurrent device or thread access is atomic too (`shared`).
        unsafe { mlx5_dv::shared::store_from(src, self.inner.ptr.add(offset)) };
        Ok(())
    }

    /// Copies from the region at `offset` into `dst`, one relaxed atomic
    /// byte load each (a plain copy when the region is not writable: then
    /// nothing writes it).
    ///
    /// Errors: the range is outside the region ([`Error::OutOfBounds`]), or
    /// it has no CPU mapping ([`Error::NoCpuMapping`]).
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range(offset, dst.len())?;
        let src = self.inner.ptr.wrapping_add(offset);
        if !self.inner.writable {
            self.check_cpu("Mr::read")?;
            // SAFETY: in range. Memory registered without write access on
            // memory the program may not write: nothing writes it (no WR, no
            // peer, no safe method), so a plain copy races with nothing; and
            // atomics would be wrong here (they need writable memory).
            unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
            return Ok(());
        }
        // SAFETY: as in `write` (atomic loads).
        unsafe { mlx5_dv::shared::load_into(src, dst) };
        Ok(())
    }

    /// Reads one byte with acquire order: the way to poll for data the device
    /// writes (perftest polls the last byte of the receive buffer).
    ///
    /// # Panics
    /// If `offset >= self.len()` (as slice indexing does), or the region
    /// has no CPU mapping (a DMA-BUF registration: [`Self::is_cpu_mapped`]).
    #[inline]
    pub fn load_u8(&self, offset: usize) -> u8 {
        assert!(
            offset < self.len(),
            "offset {offset} outside the memory region"
        );
        if !self.inner.writable {
            assert!(
                self.inner.cpu,
                "the memory region has no CPU mapping (DMA-BUF)"
            );
            // SAFETY: in bounds; nothing writes read-only memory (see `read`).
            return unsafe { self.inner.ptr.add(offset).read() };
        }
        // SAFETY: in bounds and writable; AtomicU8 needs no alignment.
        unsafe { AtomicU8::from_ptr(self.inner.ptr.add(offset)) }.load(Ordering::Acquire)
    }

    /// Stores one byte with release order.
    ///
    /// # Panics
    /// If `offset >= self.len()` (as slice indexing does), or the region is
    /// a read-only mapping or has no CPU mapping (DMA-BUF).
    #[inline]
    pub fn store_u8(&self, offset: usize, v: u8) {
        assert!(
            offset < self.len(),
            "offset {offset} outside the memory region"
        );
        assert!(
            self.inner.writable,
            "the memory region is read-only, or has no CPU mapping (DMA-BUF)"
        );
        // SAFETY: in bounds and writable; AtomicU8 needs no alignment.
        unsafe { AtomicU8::from_ptr(self.inner.ptr.add(offset)) }.store(v, Ordering::Release);
    }

    /// `len` bytes at `offset` as a plain slice, read at memory speed.
    ///
    /// Errors: the range is outside the region ([`Error::OutOfBounds`]), or
    /// it has no CPU mapping ([`Error::NoCpuMapping`]).
    ///
    /// # Safety
    /// While the slice lives nothing may write those bytes: no peer (by RDMA
    /// WRITE or atomic through this region's rkey), no WR of this program
    /// (a receive, an RDMA READ or atomic landing there) and no other thread
    /// (through another handle). Your protocol must guarantee it: for
    /// example, the bytes were filled before the rkey was sent and are never
    /// written after, or the peer was told to stop and acknowledged.
    pub unsafe fn slice(&self, offset: usize, len: usize) -> Result<&[u8]> {
        self.check_range(offset, len)?;
        self.check_cpu("Mr::slice")?;
        // SAFETY: in range; the caller guarantees no concurrent writer.
        Ok(unsafe { std::slice::from_raw_parts(self.inner.ptr.add(offset), len) })
    }

    /// `len` bytes at `offset` as a plain mutable slice, written at memory
    /// speed.
    ///
    /// Errors: the range is outside the region ([`Error::OutOfBounds`]), or
    /// the region is read-only ([`Error::Invalid`]) or has no CPU mapping
    /// ([`Error::NoCpuMapping`]).
    ///
    /// # Safety
    /// While the slice lives nothing else may read or write those bytes: no
    /// peer (RDMA READ, WRITE or atomic through the rkey), no WR of this
    /// program (a SEND or WRITE gathering from them, a receive or READ
    /// landing there) and no other slice or copy of them (through this or
    /// another handle, on any thread). For example: a table filled before its
    /// rkey is sent to anyone.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, offset: usize, len: usize) -> Result<&mut [u8]> {
        self.check_write(offset, len)?;
        // SAFETY: in range and writable; the caller guarantees exclusivity.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.inner.ptr.add(offset), len) })
    }

    /// Deregisters the region now and hands its memory back, if this is its
    /// last handle and no WR posted on a QP of its PD is outstanding (so
    /// none can name it). `Ok(None)` for a caller-managed range
    /// ([`Pd::reg_mr_raw`](crate::Pd::reg_mr_raw)) and a DMA-BUF
    /// registration.
    ///
    /// Errors: the handle itself, unchanged, when another handle lives or a
    /// WR is outstanding (poll, then try again; or drop it, and the PD
    /// deregisters it when they are retired).
    pub fn try_into_memory(self) -> std::result::Result<Option<Memory>, Mr> {
        match Arc::try_unwrap(self.inner) {
            Err(inner) => Err(Mr { inner }),
            Ok(mut shared) if shared.dereg.idle_for(shared.lkey) => {
                Ok(shared.mr.take().and_then(MrInner::into_memory))
            }
            Ok(shared) => Err(Mr {
                inner: Arc::new(shared),
            }),
        }
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

fn check_range(offset: usize, len: usize, size: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::OutOfBounds {
            offset: offset as u64,
            len: len as u64,
            size: size as u64,
            object: "memory region",
        }),
    }
}

/// A registered memory region only this program's own WRs touch (the first
/// kind of [`concepts`](crate::concepts), "Two kinds of memory"): no REMOTE_* access, not `Clone`.
///
/// It derefs to the registered bytes as `&[u8]` / `&mut [u8]`: parse,
/// serialize and copy in place at memory speed. A WR takes it by value
/// ([`Qp::post_send_owned`](crate::Qp::post_send_owned),
/// [`Qp::post_recv_owned`](crate::Qp::post_recv_owned)) and the QP hands it
/// back after the WR's completion or flush, so no slice of it exists while
/// the device may write it. Dropping it deregisters it at once (none of
/// its WRs can be outstanding: they hold it).
pub struct LocalMr {
    mr: MrInner,
}

impl LocalMr {
    pub(crate) fn new(mr: MrInner) -> LocalMr {
        LocalMr { mr }
    }
    /// The key its WRs quote (`ibv_mr.lkey`); the owned posts fill it in.
    pub fn lkey(&self) -> Lkey {
        Lkey(self.mr.lkey)
    }
    /// Virtual address of byte 0.
    pub fn addr(&self) -> u64 {
        self.mr.buf.ptr() as u64
    }
    /// The access flags it was registered with (LOCAL_WRITE or none).
    pub fn access(&self) -> Access {
        self.mr.access
    }
    pub(crate) fn pd(&self) -> u32 {
        self.mr.pd
    }

    /// Copies `src` into the region at `offset` (`copy_from_slice`:
    /// memcpy speed).
    ///
    /// Errors: the range is outside the region ([`Error::OutOfBounds`]); nothing
    /// is written.
    #[inline]
    pub fn write(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        check_range(offset, src.len(), self.len())?;
        self[offset..offset + src.len()].copy_from_slice(src);
        Ok(())
    }

    /// Copies from the region at `offset` into `dst` (memcpy speed).
    ///
    /// Errors: the range is outside the region ([`Error::OutOfBounds`]).
    #[inline]
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        check_range(offset, dst.len(), self.len())?;
        dst.copy_from_slice(&self[offset..offset + dst.len()]);
        Ok(())
    }

    /// Deregisters the region and hands its memory back: what was
    /// registered ([`Pd::reg_local_mr`](crate::Pd::reg_local_mr)), or a
    /// [`Memory::Aligned`] for the crate's own ([`Pd::alloc_local_mr`](crate::Pd::alloc_local_mr)).
    pub fn into_memory(self) -> Memory {
        self.mr
            .into_memory()
            .expect("a LocalMr always owns its memory (no raw registration makes one)")
    }
}

impl std::ops::Deref for LocalMr {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: the registered buffer, which `self` owns; no WR names it
        // while `self` exists (posting moves it into the QP), so nothing
        // else writes it.
        unsafe { std::slice::from_raw_parts(self.mr.buf.ptr(), self.mr.buf.len()) }
    }
}

impl std::ops::DerefMut for LocalMr {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; writable (checked at registration) and
        // `&mut self` is unique.
        unsafe { std::slice::from_raw_parts_mut(self.mr.buf.ptr(), self.mr.buf.len()) }
    }
}

impl std::fmt::Debug for LocalMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalMr")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .field("lkey", &format_args!("{:#x}", self.mr.lkey))
            .finish()
    }
}

/// An owned post that was refused: why, and the buffer, handed back
/// untouched (nothing was posted). Converts into [`Error`] (dropping the
/// buffer) for `?`.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct Refused {
    /// Why the post was refused.
    pub error: Error,
    /// The buffer, as it was before the post.
    pub buf: LocalMr,
}

impl From<Refused> for Error {
    fn from(r: Refused) -> Error {
        r.error
    }
}

#[cfg(test)]
#[path = "mr_tests.rs"]
mod tests;
