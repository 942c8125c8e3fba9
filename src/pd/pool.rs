//! A pre-registered memory pool: chunks (2 MiB by default) of anonymous
//! memory, huge pages when the system has them, each registered once when
//! the pool is built; buffers of a fixed size handed out from them go back
//! to the pool when dropped. Allocation never registers memory: when every
//! buffer is out it fails with [`Error::PoolExhausted`].
//!
//! Registration pins pages and costs a system call and page-table work
//! (`docs/benchmarks.md` has the figures), so it belongs at start-up, not
//! on the data path.

use crate::{Access, Error, Mr, Pages, Pd, RemoteAddr, Result, Rkey, Sge};
use std::sync::{Arc, Mutex};

/// How a pool is built.
#[derive(Clone, Copy, Debug)]
pub struct PoolConfig {
    /// Bytes per chunk (one registration each): a multiple of 4096; 2 MiB
    /// (one huge page) by default.
    pub chunk_size: usize,
    /// Chunks registered when the pool is built.
    pub chunks: usize,
    /// Bytes per buffer handed out: 64 to `chunk_size`, a power of two (so
    /// buffers never straddle chunks and stay aligned).
    pub buf_size: usize,
    /// Access of every chunk: default LOCAL_WRITE, for send and receive
    /// buffers, which no peer needs to reach. Add REMOTE_WRITE, REMOTE_READ
    /// or REMOTE_ATOMIC for buffers offered as remote targets
    /// ([`PoolBuf::remote`]); REMOTE_WRITE and REMOTE_ATOMIC need
    /// LOCAL_WRITE.
    pub access: Access,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            chunk_size: 2 << 20,
            chunks: 1,
            buf_size: 4096,
            access: Access::LOCAL_WRITE,
        }
    }
}

struct PoolInner {
    chunks: Vec<Mr>,
    per_chunk: usize,
    buf_size: usize,
    /// Free buffer indices (chunk * per_chunk + slot).
    free: Mutex<Vec<u32>>,
}

/// A pool of registered buffers of one size. Cheap to clone (a handle).
#[derive(Clone)]
pub struct Pool {
    inner: Arc<PoolInner>,
    pages: Pages,
}

impl Pool {
    /// Maps and registers `cfg.chunks` chunks on `pd`.
    ///
    /// Errors: [`Error::Invalid`] for a chunk size not a positive multiple
    /// of 4096, [`Error::Config`] for a buffer size not a power of two in
    /// 64..=chunk size, [`Error::Invalid`] for no
    /// chunks, 2^32 buffers or more, or access flags `Pd::alloc_mr` refuses;
    /// the mapping's and the registration's own errors (the chunks
    /// registered before the failure are released).
    pub fn new(pd: &Pd, cfg: &PoolConfig) -> Result<Pool> {
        if cfg.chunk_size == 0 || !cfg.chunk_size.is_multiple_of(4096) {
            return Err(Error::Invalid(format!(
                "pool chunk size {} must be a positive multiple of 4096",
                cfg.chunk_size
            )));
        }
        if !cfg.buf_size.is_power_of_two() || cfg.buf_size < 64 || cfg.buf_size > cfg.chunk_size {
            return Err(Error::Config {
                field: "pool buffer size (a power of two)",
                value: cfg.buf_size as u64,
                min: 64,
                max: cfg.chunk_size as u64,
            });
        }
        let per_chunk = cfg.chunk_size / cfg.buf_size;
        let total = per_chunk
            .checked_mul(cfg.chunks)
            .filter(|&t| t > 0 && t <= u32::MAX as usize);
        let Some(total) = total else {
            return Err(Error::Invalid(format!(
                "a pool of {} chunks of {} buffers: chunks must be at least 1 and the \
                 buffers fewer than 2^32",
                cfg.chunks, per_chunk
            )));
        };
        if cfg.chunk_size.checked_mul(cfg.chunks).is_none() {
            return Err(Error::Invalid(format!(
                "{} chunks of {} bytes overflow the address space",
                cfg.chunks, cfg.chunk_size
            )));
        }
        let mut chunks = Vec::new();
        chunks
            .try_reserve_exact(cfg.chunks)
            .map_err(|_| Error::Os {
                what: format!("no memory to track {} pool chunks", cfg.chunks),
                source: std::io::ErrorKind::OutOfMemory.into(),
            })?;
        let mut pages = Pages::Huge;
        for _ in 0..cfg.chunks {
            // On error the chunks registered so far are dropped: deregistered
            // and unmapped (no WR has named them).
            let (mr, p) = pd.alloc_mapped_mr(cfg.chunk_size, cfg.access)?;
            if p == Pages::Transparent {
                pages = p;
            }
            chunks.push(mr);
        }
        // Handed out from the low indices first (popped from the end).
        let free = (0..total as u32).rev().collect();
        Ok(Pool {
            inner: Arc::new(PoolInner {
                chunks,
                per_chunk,
                buf_size: cfg.buf_size,
                free: Mutex::new(free),
            }),
            pages,
        })
    }

    /// A buffer of `buf_size` bytes (its contents are whatever its last user
    /// left). Errors: [`Error::PoolExhausted`] when every buffer is out.
    pub fn alloc(&self) -> Result<PoolBuf> {
        let i = self
            .inner
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .ok_or(Error::PoolExhausted {
                buffers: self.capacity(),
            })?;
        Ok(PoolBuf {
            pool: self.inner.clone(),
            index: i,
        })
    }

    /// Buffers in the pool, out or not.
    pub fn capacity(&self) -> usize {
        self.inner.per_chunk * self.inner.chunks.len()
    }

    /// Buffers free now.
    pub fn available(&self) -> usize {
        self.inner
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Which pages back the chunks: [`Pages::Huge`] only if every chunk got
    /// `MAP_HUGETLB`.
    pub fn pages(&self) -> Pages {
        self.pages
    }
}

/// One buffer of a [`Pool`], back in the pool when dropped. It names
/// registered memory: use it as a local SGE ([`Self::sge`]) or offer it as a
/// remote target ([`Self::remote`]).
///
/// Keep it until every work request naming it has completed: an SGE
/// borrows it only for the post call, and a buffer dropped earlier goes to
/// its next owner while the device may still write it (the memory stays
/// registered, so this is wrong data, never unsafety).
pub struct PoolBuf {
    pool: Arc<PoolInner>,
    index: u32,
}

impl PoolBuf {
    fn chunk(&self) -> &Mr {
        &self.pool.chunks[self.index as usize / self.pool.per_chunk]
    }

    /// Offset of the buffer in its chunk.
    fn base(&self) -> usize {
        (self.index as usize % self.pool.per_chunk) * self.pool.buf_size
    }

    /// Bytes in the buffer.
    pub fn len(&self) -> usize {
        self.pool.buf_size
    }

    /// Never: a pool buffer has at least 64 bytes.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The buffer's address.
    pub fn addr(&self) -> u64 {
        self.chunk().addr() + self.base() as u64
    }

    /// The rkey a peer uses to reach it (its chunk's).
    pub fn rkey(&self) -> Rkey {
        self.chunk().rkey()
    }

    /// A local SGE over `[offset, offset + len)` of the buffer.
    ///
    /// Errors: [`Error::OutOfBounds`] when the range leaves the buffer.
    pub fn sge(&self, offset: usize, len: u32) -> Result<Sge<'_>> {
        self.check(offset, len as usize)?;
        Sge::new(self.chunk(), self.base() + offset, len)
    }

    /// The buffer at `offset`, as a peer names it (the peer may access
    /// from there to the buffer's end).
    ///
    /// Errors: [`Error::OutOfBounds`], [`Error::MissingAccess`] when `offset` is not inside the buffer, or
    /// the pool's access has no REMOTE_* flag (no peer could reach it).
    pub fn remote(&self, offset: u64) -> Result<RemoteAddr> {
        let remote = Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
        if !self.chunk().access().intersects(remote) {
            return Err(Error::MissingAccess {
                object: "the pool was built without remote access (PoolConfig::access): no peer can reach its buffers; a remote address",
                needs: remote,
            });
        }
        if offset >= self.len() as u64 {
            return Err(Error::OutOfBounds {
                offset,
                len: 1,
                size: self.len() as u64,
                object: "pool buffer",
            });
        }
        Ok(RemoteAddr {
            addr: self.addr() + offset,
            rkey: self.rkey(),
        })
    }

    /// Copies `data` into the buffer at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        self.chunk().write(self.base() + offset, data)
    }

    /// Copies from the buffer at `offset` into `out`.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check(offset, out.len())?;
        self.chunk().read(self.base() + offset, out)
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(Error::OutOfBounds {
                offset: offset as u64,
                len: len as u64,
                size: self.len() as u64,
                object: "pool buffer",
            }),
        }
    }
}

impl Drop for PoolBuf {
    fn drop(&mut self) {
        self.pool
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.index);
    }
}
