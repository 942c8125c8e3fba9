//! Memory registration on the sim: the `MrInner` of a buffer registered in
//! a sim PD, deregistered when dropped; a DMA-BUF MR over the sim's
//! stand-in exporter, a memfd.

use crate::ib::error::{Error, Result};
use crate::ib::mem::{Access, Buffer};
use crate::ib::mr::{MrInner, Registration};
use mlx5_dv::sim;
use std::os::fd::BorrowedFd;

/// Deregisters a sim MR when dropped.
pub(super) struct SimReg {
    pub(super) dev: sim::Device,
    pub(super) lkey: u32,
}
impl Registration for SimReg {}
impl Drop for SimReg {
    fn drop(&mut self) {
        let _ = self.dev.dereg_mr(self.lkey);
    }
}

/// Registers `buf` on the sim in PD `pdn` (access flags as given: the
/// caller checked them); the `MrInner` returned owns both, and its field
/// order deregisters before it frees the buffer.
///
/// Errors: the sim's refusal ([`Error::Sim`]: no such PD, key space full).
pub(crate) fn reg_sim_mr(
    dev: &sim::Device,
    pdn: u32,
    buf: Buffer,
    access: Access,
    owned: bool,
) -> Result<MrInner> {
    // SAFETY: `buf` moves into the MrInner returned, whose field order drops
    // this registration (dereg) before the buffer: the memory stays valid
    // until `dereg_mr` returns for its key. `owned`: the MR becomes a
    // `LocalMr`, which moves into the QP with each WR naming it, so nothing
    // else touches it while one is outstanding (and no other registration
    // covers a LocalMr's memory: the crate's are separate allocations,
    // `Pd::register_raw`'s contract excludes it).
    let k = unsafe {
        if owned {
            dev.reg_mr_owned(pdn, buf.ptr(), buf.len(), access)
        } else {
            dev.reg_mr(pdn, buf.ptr(), buf.len(), access)
        }
    }?;
    Ok(MrInner {
        reg: Box::new(SimReg {
            dev: dev.clone(),
            lkey: k.lkey,
        }),
        live: None,
        pd: 0,
        buf,
        lkey: k.lkey,
        rkey: k.rkey,
        access,
    })
}

/// A sim DMA-BUF MR's registration: deregisters it, then unmaps the
/// memfd that stands in for the dma-buf (field order).
struct SimDmabufReg {
    _reg: SimReg,
    _map: memmap2::MmapRaw,
}
impl Registration for SimDmabufReg {}

// (An inherent method of `MrInner` rather than a function re-exported by
// `direct/mod.rs`: reachable from `pd/dmabuf.rs` as `MrInner::sim_dmabuf`.)
impl MrInner {
    /// Registers bytes `[offset, offset + len)` of the memfd `fd` on the sim as
    /// a DMA-BUF MR that WQEs name at `[iova, iova + len)` (checked by the
    /// caller: access, lengths, page offsets). The sim's stand-in for a
    /// dma-buf exporter: the memfd's pages are mapped (`MAP_SHARED`) for as
    /// long as the MR lives, and the sim reaches them through that mapping
    /// only (the `Mr`'s buffer is the IOVA, with no CPU mapping).
    ///
    /// Errors: [`Error::Invalid`] when `fd` is not a memfd sealed against
    /// shrinking (`F_SEAL_SHRINK`: a file that could shrink under the mapping
    /// would fault the device thread), or the range passes the file's end (the
    /// kernel refuses a range past a dma-buf's end too); the mapping's
    /// ([`Error::Os`]); the sim's ([`Error::Sim`]).
    pub(crate) fn sim_dmabuf(
        dev: &sim::Device,
        pdn: u32,
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<MrInner> {
        use nix::fcntl::{fcntl, FcntlArg, SealFlag};
        let seals = fcntl(fd, FcntlArg::F_GET_SEALS).map_err(|_| {
            Error::Invalid(
                "the sim's stand-in for a dma-buf is a memfd (Pd::dmabuf_stand_in makes one); \
             this descriptor is not one"
                    .into(),
            )
        })?;
        if !SealFlag::from_bits_truncate(seals).contains(SealFlag::F_SEAL_SHRINK) {
            return Err(Error::Invalid(
                "the sim's stand-in memfd must be sealed against shrinking (F_SEAL_SHRINK), \
             as a dma-buf cannot shrink (Pd::dmabuf_stand_in makes one)"
                    .into(),
            ));
        }
        let size = nix::sys::stat::fstat(fd)
            .map_err(|e| Error::Os {
                what: "fstat of the stand-in memfd".into(),
                source: e.into(),
            })?
            .st_size as u64;
        if offset.checked_add(len as u64).is_none_or(|end| end > size) {
            return Err(Error::OutOfBounds {
                offset,
                len: len as u64,
                size,
                object: "dma-buf (the sim's stand-in memfd)",
            });
        }
        let in_page = (offset % 4096) as usize;
        let map = memmap2::MmapOptions::new()
            .offset(offset - in_page as u64)
            .len(in_page + len)
            .map_raw(&fd)
            .map_err(|e| Error::Os {
                what: format!("mmap of {len} bytes at offset {offset:#x} of the stand-in memfd"),
                source: e,
            })?;
        let host = map.as_mut_ptr().wrapping_add(in_page);
        // SAFETY: `host..host + len` lies in `map` (inside the file, checked
        // above, and the seal keeps it so), which moves into the registration
        // returned, whose field order deregisters before it unmaps: the memory
        // stays valid until `dereg_mr` returns for its key.
        let k = unsafe { dev.reg_dmabuf_mr(pdn, host, len, iova, access) }?;
        Ok(MrInner {
            reg: Box::new(SimDmabufReg {
                _reg: SimReg {
                    dev: dev.clone(),
                    lkey: k.lkey,
                },
                _map: map,
            }),
            live: None,
            pd: 0,
            buf: Buffer::device(iova, len),
            lkey: k.lkey,
            rkey: k.rkey,
            access,
        })
    }
}
