//! DMA-BUF MRs (`Pd::register_dmabuf`): memory exported by another driver,
//! registered at an IOVA unrelated to its offset in the buffer.
//!
//! No dma-buf can be made on these machines (no GPU, no udmabuf), so each
//! case registers the sim's stand-in, a sealed memfd
//! (`Pd::dmabuf_stand_in`), and reads what the device wrote through it
//! (`pread`). The sim takes it; a device with no DMA-BUF registration
//! refuses with `Error::Unsupported { feature: DmaBuf }` (rxe in Linux 6.1:
//! no `reg_user_mr_dmabuf`, `EOPNOTSUPP`), and a device that has it refuses
//! the memfd, which is no dma-buf (`ibv_reg_dmabuf_mr`'s `EINVAL` or
//! `EBADF`): both are skipped with the reason. The page-offset refusal is
//! the crate's own, before any device is asked: it runs everywhere.

use super::*;
use rdma_direct::Feature;
use std::fs::File;
use std::os::unix::fs::FileExt;

/// The stand-in's size (three pages), the MR's offset in it (not page
/// aligned), its length and its IOVA (the same offset within a page, far
/// from the offset).
const FILE: usize = 3 * 4096;
const OFFSET: u64 = 0x1010;
const LEN: usize = 0x800;
const IOVA: u64 = 0x7f00_0000_2010;
const RW: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ);

/// The stand-in and the DMA-BUF MR over its `[OFFSET, OFFSET + LEN)` at
/// `IOVA`; `Err(skip)` when the device refuses the registration.
fn register(pd: &Pd, dev: &str) -> Result<Result<(File, Mr), CaseResult>, Failure> {
    let file = File::from(Pd::dmabuf_stand_in(FILE)?);
    match pd.register_dmabuf(&file, OFFSET, LEN, IOVA, RW) {
        Ok(mr) => Ok(Ok((file, mr))),
        Err(
            e @ Error::Unsupported {
                feature: Feature::DmaBuf,
                ..
            },
        ) => Ok(Err(skipped(format!("no DMA-BUF registration: {e}")))),
        Err(e @ Error::Verbs { .. }) if dev != rdma_direct::SIM_DEVICE => Ok(Err(skipped(
            format!("{dev} refuses the sim's stand-in (a memfd is not a dma-buf, and none can be made here): {e}"),
        ))),
        Err(e) => Err(Failure(format!("register_dmabuf: {e}"))),
    }
}

fn file_bytes(file: &File) -> Result<Vec<u8>, Failure> {
    let mut all = vec![0u8; FILE];
    file.read_exact_at(&mut all, 0)
        .map_err(|e| Failure(format!("pread of the stand-in: {e}")))?;
    Ok(all)
}

/// A WRITE to `iova + 0x40` lands at the buffer's `offset + 0x40`; a READ
/// at `iova + 0x80` brings `offset + 0x80`; a local SGE naming the MR by
/// IOVA (its lkey) is a WRITE's source.
pub(super) fn dmabuf_writes_and_reads_reach_the_buffer_at_the_iova(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let (file, dmr) = match register(&s.pd, dev)? {
        Ok(r) => r,
        Err(skip) => return skip,
    };
    check_eq!(dmr.addr(), IOVA, "the MR's address is its IOVA");
    let near = s.pd.alloc_mr(4096, RW)?;
    near.write(0, b"dma-buf!")?;
    file.write_all_at(b"from the GPU", OFFSET + 0x80)
        .map_err(|e| Failure(format!("pwrite: {e}")))?;
    file.write_all_at(b"gathered", OFFSET + 0x100)
        .map_err(|e| Failure(format!("pwrite: {e}")))?;
    let sge = [Sge::new(&near, 0, 8)?];
    s.a.post_send(&[SendWr::rdma_write(1, &sge, remote(&dmr, 0x40)).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check!(wc.status.is_ok(), "WRITE to iova + 0x40: {wc:?}");
    let all = file_bytes(&file)?;
    let o = OFFSET as usize;
    check_eq!(&all[o + 0x40..o + 0x48], b"dma-buf!", "offset + 0x40");
    check!(
        all[..o + 0x40].iter().all(|&b| b == 0),
        "nothing before offset + 0x40 changed"
    );
    let into = [Sge::new(&near, 0x100, 12)?];
    s.a.post_send(&[SendWr::rdma_read(2, &into, remote(&dmr, 0x80)).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check!(wc.status.is_ok(), "READ from iova + 0x80: {wc:?}");
    let mut got = [0u8; 12];
    near.read(0x100, &mut got)?;
    check_eq!(&got, b"from the GPU", "the READ's bytes");
    // SAFETY: posted in a WR that is not inline, on QPs without inline receive.
    let from = [unsafe { Sge::of_dmabuf(&dmr, 0x100, 8) }?];
    s.a.post_send(&[SendWr::rdma_write(3, &from, remote(&near, 0x200)).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check!(
        wc.status.is_ok(),
        "WRITE from a local SGE at iova + 0x100: {wc:?}"
    );
    let mut got = [0u8; 8];
    near.read(0x200, &mut got)?;
    check_eq!(&got, b"gathered", "the local SGE's bytes");
    passed(vec![format!(
        "iova {IOVA:#x} <-> offset {OFFSET:#x} of the stand-in memfd"
    )])
}

/// WRITEs outside `[iova, iova + len)`: just below it, across its end, and
/// at the offset (what libibverbs reports as `ibv_mr.addr`): each refused
/// with REM_ACCESS_ERR (fresh QPs each time), the buffer unchanged.
pub(super) fn dmabuf_writes_outside_the_iova_range_are_refused(dev: &str) -> CaseResult {
    let s = setup(dev)?;
    let (file, dmr) = match register(&s.pd, dev)? {
        Ok(r) => r,
        Err(skip) => return skip,
    };
    let before = pattern(FILE, 0x5a);
    file.write_all_at(&before, 0)
        .map_err(|e| Failure(format!("pwrite: {e}")))?;
    let src = s.pd.alloc_mr(4096, RW)?;
    src.write(0, &[0xee; 16])?;
    let sge = [Sge::new(&src, 0, 16)?];
    let mut notes = Vec::new();
    for addr in [IOVA - 8, IOVA + LEN as u64 - 8, OFFSET] {
        // A refused access puts both QPs in ERR: fresh ones each time.
        let (mut a, _b) = s.pd.create_connected_pair(&QpConfig::default())?;
        let to = RemoteAddr {
            addr,
            rkey: dmr.rkey(),
        };
        a.post_send(&[SendWr::rdma_write(1, &sge, to).signaled()])?;
        let wc = poll_one(&mut a)?;
        check_eq!(wc.status, WcStatus::REM_ACCESS_ERR, "WRITE to {addr:#x}");
        check!(
            file_bytes(&file)? == before,
            "the buffer unchanged after the WRITE to {addr:#x}"
        );
        notes.push(format!("{addr:#x}: {}", wc.status));
    }
    passed(notes)
}

/// An `iova` whose offset within a page differs from `offset`'s is refused
/// by the crate before any device is asked (the kernel would refuse it
/// too); nothing is registered.
pub(super) fn dmabuf_iova_and_offset_apart_in_a_page_are_refused_first(dev: &str) -> CaseResult {
    let s = setup(dev)?;
    let file = File::from(Pd::dmabuf_stand_in(FILE)?);
    let (regs, live) = (s.pd.registrations(), s.pd.live_mrs());
    match s.pd.register_dmabuf(&file, OFFSET, LEN, IOVA + 8, RW) {
        Err(Error::Register(RegRefusal::IovaPageOffset { iova, offset })) => {
            check_eq!((iova, offset), (IOVA + 8, OFFSET), "the refusal's numbers");
        }
        other => return Err(Failure(format!("want IovaPageOffset, got {other:?}"))),
    }
    check_eq!(
        (s.pd.registrations(), s.pd.live_mrs()),
        (regs, live),
        "registrations after the refusal"
    );
    passed(vec![])
}
