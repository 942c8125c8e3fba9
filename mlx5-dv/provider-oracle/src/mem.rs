//! Zeroed memory aligned to a page, for rings, doorbell records and
//! BlueFlame registers that both sides write through raw pointers.

use std::alloc::{alloc_zeroed, dealloc, Layout};

/// `len` bytes (at least 1), zeroed, 4096-aligned; freed on drop.
pub struct Mem {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: `Mem` owns its allocation; moving it to another thread moves that
// ownership (as `Box<[u8]>`).
unsafe impl Send for Mem {}

impl Mem {
    pub fn zeroed(len: usize) -> Mem {
        let layout = Layout::from_size_align(len.max(1), 4096).expect("a layout");
        // SAFETY: the layout has a nonzero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory for {len} bytes");
        Mem { ptr, layout }
    }

    pub fn len(&self) -> usize {
        self.layout.size()
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// The base address, for the C side and our driver's ring descriptions.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` holds `len` initialised (zeroed at least) bytes we
        // own; writers through raw pointers (the driver, the provider) run
        // only inside calls that take `&mut self` of their owners.
        unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `bytes`, and `&mut self` is the only handle.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        // SAFETY: allocated by `alloc_zeroed` with this layout.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}
