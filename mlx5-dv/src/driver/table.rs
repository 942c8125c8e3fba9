//! [`Table`]: the per-WQE bookkeeping array of a queue (the SQ's slots, the
//! RQ's wr_ids), on the heap, shared by the copies of that queue a QP split
//! into a send half and a receive half keeps ([`SendQueue::split_copy`],
//! [`ReceiveQueue::split_copy`]).
//!
//! [`SendQueue::split_copy`]: super::SendQueue::split_copy
//! [`ReceiveQueue::split_copy`]: super::ReceiveQueue::split_copy

use core::ptr::NonNull;
use std::sync::Arc;

/// A fixed-length heap array reached through raw pointers only, so that two
/// copies of one queue, on two threads, may each touch their own entries
/// without either asserting uniqueness over the whole array (a `Box<[T]>`
/// or `&mut [T]` would). Who may touch which entry when is the queue's
/// rule: the poster writes an entry before ringing the WQE's doorbell, the
/// poller reads it after the WQE's CQE (ordered by the doorbell record's
/// release and the CQE owner byte's acquire, as the ring's own bytes are),
/// and the poster writes it again only after the poller published that it
/// retired the WQE (a release store the poster loads with acquire).
pub struct Table<T> {
    ptr: NonNull<T>,
    len: usize,
    _mem: Arc<Mem<T>>,
}

/// The allocation behind a [`Table`] and its copies: freed when the last goes.
struct Mem<T> {
    ptr: NonNull<T>,
    len: usize,
}

impl<T> Drop for Mem<T> {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` came from `Box::into_raw` of a boxed slice
        // of `len` entries (`Table::new`), freed only here, once (the last
        // `Arc`).
        drop(unsafe {
            Box::from_raw(core::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr(),
                self.len,
            ))
        });
    }
}

// SAFETY: the entries are plain data moved between threads with the queue
// copies that own them; concurrent access follows the rule above.
unsafe impl<T: Send> Send for Mem<T> {}
// SAFETY: as above (`Mem` itself is never read through: only freed).
unsafe impl<T: Send> Sync for Mem<T> {}
// SAFETY: as for `Mem`: a `Table` is a pointer into it.
unsafe impl<T: Send> Send for Table<T> {}

impl<T: Copy> Table<T> {
    /// `len` entries of `v`.
    pub fn new(len: usize, v: T) -> Self {
        let b: Box<[T]> = vec![v; len].into_boxed_slice();
        let raw = Box::into_raw(b) as *mut T;
        // SAFETY: `Box::into_raw` never returns null (an empty slice's
        // pointer is dangling but non-null).
        let ptr = unsafe { NonNull::new_unchecked(raw) };
        Table {
            ptr,
            len,
            _mem: Arc::new(Mem { ptr, len }),
        }
    }

    /// Another handle to the same entries (for a queue's split copy).
    ///
    /// # Safety
    /// Whoever holds the handles orders every two accesses to one entry
    /// from two handles (happens-before: the queue's rule above), so that
    /// [`Self::get`] and [`Self::set`] through them never race.
    pub unsafe fn share(&self) -> Self {
        Table {
            ptr: self.ptr,
            len: self.len,
            _mem: self._mem.clone(),
        }
    }

    /// Entries.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no entries (a queue on an SRQ keeps none).
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first entry's address; entry `i` is at `.add(i)` for `i < len`.
    #[inline(always)]
    pub fn ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }

    /// A copy of entry `i` (bounds-checked: panics past the end).
    #[inline(always)]
    pub fn get(&self, i: usize) -> T {
        assert!(i < self.len, "entry {i} of a table of {}", self.len);
        // SAFETY: in bounds; read by the copy whose turn it is (the rule above).
        unsafe { self.ptr().add(i).read() }
    }

    /// Sets entry `i` to `v` (bounds-checked: panics past the end).
    #[inline(always)]
    pub fn set(&self, i: usize, v: T) {
        assert!(i < self.len, "entry {i} of a table of {}", self.len);
        // SAFETY: in bounds; written by the copy whose turn it is.
        unsafe { self.ptr().add(i).write(v) }
    }
}
