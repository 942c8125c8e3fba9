//! DMA-BUF MRs in the sim: memory the device names by an IOVA, a device
//! address unrelated to where the host sees it.
//!
//! On ConnectX a DMA-BUF MR (`ibv_reg_dmabuf_mr(pd, offset, len, iova,
//! fd, access)`) maps bytes `[offset, offset + len)` of a buffer another
//! driver exported (a GPU's) at `[iova, iova + len)`: every SGE and every
//! peer's raddr names it by IOVA. The sim has no exporter; its caller hands
//! it host memory that stands in for the buffer (the front end maps a
//! memfd, `MAP_SHARED`) and the IOVA. Every other MR is named by host
//! address, so the sim's checks and DMA (`ops.rs`, `dma.rs`) work on host
//! addresses: this file translates a DMA-BUF MR's device addresses to host
//! ones, `host = base + (va - iova)`, where a WQE enters the device (the SQ
//! WQE's raddr and data segments, in `exec.rs`; a receive WQE's segments, in
//! `recv.rs` and `srq.rs`), before any check. An address outside
//! `[iova, iova + len]` becomes `u64::MAX`, which every range check refuses
//! (an SGE: LOCAL_PROT_ERR; a peer's access: REM_ACCESS_ERR), so nothing
//! is touched. With no DMA-BUF MR registered nothing is looked up.
//!
//! Not modeled: a memory window bound to a DMA-BUF MR (a bind names the
//! range by host address here, so a bind by IOVA is refused, MW_BIND_ERR).

use super::{Device, MrEntry, MrKeys, SimError, State};
use crate::verbs::Access;
use crate::wqe::{data_seg, decode_data_seg, DataSeg, DecodedPayload, DecodedWqe};

impl Device {
    /// Registers `len` bytes at host address `host` that WQEs name by
    /// device address `iova` (a DMA-BUF MR: the bytes at `iova + k` are
    /// the host's `host + k`). lkey equals rkey; [`Self::dereg_mr`]
    /// deregisters it.
    ///
    /// Errors: [`SimError::ZeroLength`]; [`SimError::BadRange`] when
    /// either range wraps the address space; [`SimError::Unsupported`] when
    /// `host` and `iova` differ in their offset within a 4096-byte page
    /// (the device maps pages: the kernel refuses such an IOVA, `EINVAL`).
    ///
    /// # Safety
    /// As [`Self::reg_mr`]: `host..host+len` stays valid for reads and
    /// writes by the device (any thread) until [`Self::dereg_mr`] returns
    /// for this key.
    pub unsafe fn reg_dmabuf_mr(
        &self,
        pd: u32,
        host: *mut u8,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<MrKeys, SimError> {
        if len == 0 {
            return Err(SimError::ZeroLength);
        }
        for addr in [host as u64, iova] {
            if addr.checked_add(len as u64).is_none() {
                return Err(SimError::BadRange {
                    addr,
                    len: len as u64,
                });
            }
        }
        if (host as u64 ^ iova) & 0xfff != 0 {
            return Err(SimError::Unsupported {
                what: "a DMA-BUF IOVA whose offset within a page differs from its memory's",
            });
        }
        let mut st = self.lock();
        let key = st.alloc_key()?;
        st.mrs.insert(
            key,
            MrEntry {
                pd,
                addr: host as u64,
                len: len as u64,
                access,
                owned: false,
                iova: Some(iova),
                odp: access
                    .contains(Access::ON_DEMAND)
                    .then(|| super::odp::Pages::new(false)),
            },
        );
        st.dmabufs += 1;
        st.odp.mrs += access.contains(Access::ON_DEMAND) as usize;
        Ok(MrKeys {
            lkey: key,
            rkey: key,
        })
    }
}

/// The host address of device address `va` in the MR of `key`: `va`
/// itself unless `key` names a DMA-BUF MR; for one, `base + (va - iova)`
/// when `va` lies in `[iova, iova + len]`, else `u64::MAX` (refused by
/// every range check, whatever the length).
pub(super) fn host_addr(st: &State, key: u32, va: u64) -> u64 {
    match st.mrs.get(&key) {
        Some(&MrEntry {
            iova: Some(iova),
            addr,
            len,
            ..
        }) => match va.checked_sub(iova) {
            Some(d) if d <= len => addr + d,
            _ => u64::MAX,
        },
        _ => va,
    }
}

/// Translates an SQ WQE's device addresses (`wqe`: its linear copy, `w`
/// decoded from it): the raddr segment's by its rkey, each data
/// segment's by its lkey (rewritten in the copy, where `ops.rs` reads
/// them).
pub(super) fn translate_wqe(st: &State, w: &mut DecodedWqe, wqe: &mut [u8]) {
    if st.dmabufs == 0 {
        return;
    }
    if let Some(r) = w.remote.as_mut() {
        r.addr = host_addr(st, r.rkey, r.addr);
    }
    if let DecodedPayload::Sges { first, count } = w.payload {
        for i in 0..count as usize {
            let at = first + i * crate::prm::DS;
            let Some(b) = wqe.get_mut(at..at + 16) else {
                return;
            };
            let mut s = decode_data_seg((&*b).try_into().expect("16 bytes"));
            s.addr = host_addr(st, s.lkey, s.addr);
            b.copy_from_slice(&data_seg(s));
        }
    }
}

/// Translates a receive WQE's data segments by their lkeys.
pub(super) fn translate_segs(st: &State, segs: &mut [DataSeg]) {
    if st.dmabufs == 0 {
        return;
    }
    for s in segs {
        s.addr = host_addr(st, s.lkey, s.addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DMA-BUF MR's device addresses map onto its host memory, the end
    /// included (a zero-length SGE there); any other address maps to one
    /// every check refuses; other MRs' addresses pass unchanged.
    #[test]
    fn dmabuf_addresses_translate_within_the_iova_range_only() {
        let dev = Device::new();
        let pd = dev.alloc_pd();
        let mut mem = vec![0u8; 8192];
        let host = mem
            .as_mut_ptr()
            .wrapping_add(4096 - (mem.as_ptr() as usize % 4096));
        let iova = 0x10_0000_0000u64;
        // SAFETY: `mem` outlives the registration (deregistered below).
        let k = unsafe { dev.reg_dmabuf_mr(pd, host, 4096, iova, Access::LOCAL_WRITE) }.unwrap();
        // SAFETY: as above.
        let plain = unsafe { dev.reg_mr(pd, host, 64, Access::LOCAL_WRITE) }.unwrap();
        {
            let st = dev.lock();
            let h = host as u64;
            assert_eq!(host_addr(&st, k.lkey, iova), h);
            assert_eq!(host_addr(&st, k.rkey, iova + 0x40), h + 0x40);
            assert_eq!(host_addr(&st, k.lkey, iova + 4096), h + 4096);
            assert_eq!(host_addr(&st, k.lkey, iova + 4097), u64::MAX);
            assert_eq!(host_addr(&st, k.lkey, iova - 1), u64::MAX);
            assert_eq!(host_addr(&st, plain.lkey, h + 8), h + 8);
            let mut segs = [DataSeg {
                addr: iova + 8,
                len: 8,
                lkey: k.lkey,
            }];
            translate_segs(&st, &mut segs);
            assert_eq!(segs[0].addr, h + 8);
        }
        // Page offsets that differ are refused.
        // SAFETY: refused: nothing is registered.
        let r = unsafe { dev.reg_dmabuf_mr(pd, host, 64, iova + 8, Access::LOCAL_WRITE) };
        assert!(matches!(r, Err(SimError::Unsupported { .. })));
        dev.dereg_mr(k.lkey).unwrap();
        dev.dereg_mr(plain.lkey).unwrap();
        assert_eq!(dev.lock().dmabufs, 0);
    }
}
