//! The one door to memory shared with the device: doorbell records, the UAR /
//! BlueFlame registers, CQE ownership bytes, and the barriers that order them.
//!
//! Barriers are named for what they order, as rdma-core's `util/udma_barrier.h`
//! names them, not for the instruction they emit:
//!
//! | ours                     | rdma-core                      | x86_64            | aarch64        |
//! |--------------------------|--------------------------------|-------------------|----------------|
//! | [`to_device_barrier`]    | `udma_to_device_barrier`       | compiler barrier  | `dmb oshst`    |
//! | [`from_device_barrier`]  | `udma_from_device_barrier`     | `lfence`          | `dmb oshld`    |
//! | [`wc_start_barrier`]     | `mmio_wc_start`                | `sfence`          | `dmb oshst`    |
//! | [`wc_flush_barrier`]     | `mmio_flush_writes`            | `sfence`          | `dsb st`       |
//!
//! Each also carries the matching Rust atomic fence, so that the software device
//! (`sim`) running on another thread sees the same order under Rust's memory model.
//! Under Miri only the Rust fence is there (Miri runs neither the x86
//! intrinsics nor `asm!`); it is what orders the sim's thread in the model.
//! The write barriers carry a release fence, not a sequentially consistent one:
//! on x86_64 `fence(SeqCst)` is an `mfence` (tens of cycles, and it drains the
//! store buffer), which rdma-core does not issue there, and the sim observes
//! host writes only through the doorbell record it loads with acquire order.

use core::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Orders this CPU's earlier writes to host memory (WQEs) before later writes
/// the device may act on (doorbell record). rdma-core: `udma_to_device_barrier`.
#[inline(always)]
pub fn to_device_barrier() {
    fence(Ordering::Release);
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: a barrier instruction; touches no memory.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags))
    };
}

/// Orders a read of a device-written ownership byte (CQE `op_own`) before the
/// reads of the rest of that entry. rdma-core: `udma_from_device_barrier`.
#[inline(always)]
pub fn from_device_barrier() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `lfence` is available on every x86_64 CPU; touches no memory.
    unsafe {
        core::arch::x86_64::_mm_lfence()
    };
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: a barrier instruction; touches no memory.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags))
    };
    fence(Ordering::Acquire);
}

/// Before writes to a write-combining mapping (BlueFlame / UAR): earlier host
/// memory writes (doorbell record) become visible first. rdma-core: `mmio_wc_start`.
#[inline(always)]
pub fn wc_start_barrier() {
    fence(Ordering::Release);
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `sfence` is available on every x86_64 CPU; touches no memory.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: a barrier instruction; touches no memory.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags))
    };
}

/// Flushes the write-combining buffer after a BlueFlame copy or doorbell write.
/// rdma-core: `mmio_flush_writes`.
#[inline(always)]
pub fn wc_flush_barrier() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: as above.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: as above.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags))
    };
    fence(Ordering::Release);
}

/// Orders this CPU's earlier writes (an arm doorbell) before its later
/// reads (the next poll of the CQ): a full fence, `mfence` on x86_64. Without
/// it an arm could still sit in the store buffer while the poll misses a CQE
/// the device writes next, and the device, not seeing the arm yet, raises no
/// event: the waiter would sleep with a completion in the CQ. (rdma-core's
/// `mlx5_arm_cq` writes the doorbell to uncached MMIO, which x86 does not
/// reorder with later loads; the sim's UAR is ordinary memory.)
#[inline]
pub fn store_load_barrier() {
    fence(Ordering::SeqCst);
}

/// Stores `value` big-endian into a doorbell-record word.
///
/// # Safety
/// `word` must be valid for writes of 4 bytes and 4-byte aligned for as long as
/// the call lasts (a doorbell record from `mlx5dv_qp.dbrec` / `mlx5dv_cq.dbrec`).
#[inline(always)]
pub unsafe fn write_dbrec(word: *mut u32, value: u32) {
    // SAFETY: caller guarantees validity and alignment; an atomic store of an
    // aligned u32 is a plain `mov` on x86_64 and `str` on aarch64.
    unsafe { AtomicU32::from_ptr(word) }.store(value.to_be(), Ordering::Relaxed);
}

/// Loads a big-endian doorbell-record word (the device side reads these).
///
/// # Safety
/// As [`write_dbrec`], for reads.
#[inline(always)]
pub unsafe fn read_dbrec(word: *const u32) -> u32 {
    // SAFETY: caller guarantees validity and alignment.
    u32::from_be(unsafe { AtomicU32::from_ptr(word as *mut u32) }.load(Ordering::Acquire))
}

/// Reads a CQE's `op_own` byte (the device writes it last).
///
/// # Safety
/// `op_own` must be valid for a 1-byte read.
#[inline(always)]
pub unsafe fn read_op_own(op_own: *const u8) -> u8 {
    // SAFETY: caller guarantees validity; u8 needs no alignment.
    unsafe { AtomicU8::from_ptr(op_own as *mut u8) }.load(Ordering::Relaxed)
}

/// Publishes a CQE's `op_own` byte after the rest of the CQE (device side).
///
/// # Safety
/// As [`read_op_own`], for writes.
#[inline(always)]
pub unsafe fn publish_op_own(op_own: *mut u8, value: u8) {
    // SAFETY: caller guarantees validity.
    unsafe { AtomicU8::from_ptr(op_own) }.store(value, Ordering::Release);
}

/// Writes one 8-byte doorbell to a UAR register (the CQ arm doorbell) as a
/// relaxed atomic store: the same single 8-byte `mov` / `str` as
/// [`write_uar`]'s volatile store, but for a register the device side reads
/// while the host may write it. The sim's UAR is ordinary memory its thread
/// reads ([`read_uar_doorbell`]), and a volatile store racing that read
/// would be a data race (Miri reported it for the arm doorbell).
///
/// # Safety
/// `reg` must be 8-byte aligned and valid for an 8-byte write.
#[inline(always)]
pub unsafe fn write_uar_doorbell(reg: *mut u64, value: u64) {
    // SAFETY: caller guarantees validity and alignment.
    unsafe { AtomicU64::from_ptr(reg) }.store(value, Ordering::Relaxed);
}

/// Reads a UAR doorbell register [`write_uar_doorbell`] writes (device
/// side: the sim). Ordering comes from the fences around both accesses.
///
/// # Safety
/// As [`write_uar_doorbell`], for reads.
#[inline(always)]
pub unsafe fn read_uar_doorbell(reg: *const u64) -> u64 {
    // SAFETY: caller guarantees validity and alignment.
    unsafe { AtomicU64::from_ptr(reg.cast_mut()) }.load(Ordering::Relaxed)
}

/// Copies one 64-byte WQEBB from the SQ ring to a BlueFlame register, 16
/// bytes at a time on x86_64 (`movdqu` loads and stores: rdma-core's
/// `mmio_memcpy_x64` moves 16 bytes at a time too, with plain SSE stores),
/// 8 elsewhere (volatile). The 16-byte stores are unaligned ones, so a
/// register need only be 8-byte aligned as every UAR register is; they are
/// not volatile (Rust has no unaligned volatile store), which costs
/// nothing: the barriers around a BlueFlame copy order it, and a store to
/// memory the device reads is never elided.
///
/// # Safety
/// `src` must be valid for 64 bytes of reads; `reg` must be valid for 64
/// bytes of writes (inside a `mlx5dv_qp.bf.reg` + offset mapping) and read
/// by no one on the host.
#[inline(always)]
pub unsafe fn copy_to_bf(reg: *mut u8, src: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's guarantees; SSE2 is part of x86_64, and these
    // loads and stores need no alignment.
    unsafe {
        use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};
        for i in 0..4 {
            let v = _mm_loadu_si128(src.cast::<__m128i>().add(i));
            _mm_storeu_si128(reg.cast::<__m128i>().add(i), v);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as above, in 8-byte pieces (`reg` is 8-byte aligned).
    unsafe {
        for i in 0..8 {
            let v = src.cast::<u64>().add(i).read_unaligned();
            core::ptr::write_volatile(reg.cast::<u64>().add(i), v);
        }
    }
}

/// Writes `src` to a UAR / BlueFlame register in 8-byte stores.
///
/// # Safety
/// `reg` must be 8-byte aligned and valid for `src.len() * 8` bytes of writes
/// (a `mlx5dv_qp.bf.reg` + offset mapping of at least that size).
#[inline(always)]
pub unsafe fn write_uar(reg: *mut u64, src: &[u64]) {
    for (i, &w) in src.iter().enumerate() {
        // SAFETY: caller guarantees `reg[0..src.len()]` is writable and aligned.
        unsafe { core::ptr::write_volatile(reg.add(i), w) };
    }
}
