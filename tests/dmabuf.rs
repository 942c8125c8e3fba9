//! DMA-BUF MRs on the sim (`Pd::register_dmabuf`), whose stand-in exporter
//! is a memfd (`Pd::dmabuf_stand_in`): the MR maps the buffer's bytes
//! `[offset, offset + len)` at `[iova, iova + len)`, with `iova != offset`
//! in every case here, so an address confused with the other misses.
//! What the device wrote is read back through the memfd (`pread`), never
//! through the `Mr`, which has no CPU mapping.

use rdma_direct::{
    Access, Completion, Context, Error, Mr, Pd, Qp, QpConfig, RecvWr, RegRefusal, RemoteAddr,
    SendWr, Sge, WcOpcode, WcStatus,
};
use std::fs::File;
use std::os::unix::fs::FileExt;

/// The stand-in's size: three pages.
const FILE: usize = 3 * 4096;
/// Where the MR starts in the buffer (not page-aligned).
const OFFSET: u64 = 0x1010;
/// Its length.
const LEN: usize = 0x800;
/// Its device address: the same offset within a page as `OFFSET`, far
/// from it.
const IOVA: u64 = 0x7f00_0000_2010;
const ALL: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ);

fn cfg() -> QpConfig {
    QpConfig {
        max_send_wr: 8,
        max_recv_wr: 8,
        ..QpConfig::default()
    }
}

/// A sim PD, a stand-in buffer and the DMA-BUF MR over its
/// `[OFFSET, OFFSET + LEN)` at `IOVA`.
fn setup() -> (Pd, File, Mr) {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let file = File::from(Pd::dmabuf_stand_in(FILE).unwrap());
    let mr = pd.register_dmabuf(&file, OFFSET, LEN, IOVA, ALL).unwrap();
    (pd, file, mr)
}

/// The whole stand-in buffer, read with `pread`.
fn contents(file: &File) -> Vec<u8> {
    let mut all = vec![0u8; FILE];
    file.read_exact_at(&mut all, 0).unwrap();
    all
}

fn at(mr: &Mr, offset: u64) -> RemoteAddr {
    RemoteAddr {
        addr: mr.addr() + offset,
        rkey: mr.rkey(),
    }
}

/// Polls until one completion arrives.
fn completion(qp: &mut Qp) -> Completion {
    let mut wc = [Completion::default(); 1];
    while qp.poll(&mut wc).unwrap() == 0 {
        std::thread::yield_now();
    }
    wc[0]
}

/// A peer's WRITE to `iova + 0x40` lands at byte `offset + 0x40` of the
/// buffer, and nowhere else; the MR's address is the IOVA.
#[test]
fn a_write_to_iova_plus_0x40_lands_at_offset_plus_0x40() {
    let (pd, file, dmr) = setup();
    assert_eq!((dmr.addr(), dmr.len()), (IOVA, LEN));
    assert!(!dmr.is_cpu_mapped());
    let src = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    src.write(0, b"dma-buf!").unwrap();
    let (mut a, _b) = pd.create_connected_pair(&cfg()).unwrap();
    let sge = [Sge::new(&src, 0, 8).unwrap()];
    a.post_send(&[SendWr::rdma_write(1, &sge, at(&dmr, 0x40)).signaled()])
        .unwrap();
    let wc = completion(&mut a);
    assert!(wc.status.is_ok(), "{wc:?}");
    let mut want = vec![0u8; FILE];
    let o = OFFSET as usize + 0x40;
    want[o..o + 8].copy_from_slice(b"dma-buf!");
    assert_eq!(contents(&file), want);
}

/// WRITEs to addresses outside `[iova, iova + len)` (just below, across
/// the end, and at the offset, which libibverbs reports as `ibv_mr.addr`)
/// are refused with REM_ACCESS_ERR, each on fresh QPs, and the buffer
/// stays as it was.
#[test]
fn a_write_outside_the_iova_range_is_refused_and_changes_nothing() {
    let (pd, file, dmr) = setup();
    let before: Vec<u8> = (0..FILE).map(|i| i as u8).collect();
    file.write_all_at(&before, 0).unwrap();
    let src = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    src.write(0, &[0xee; 16]).unwrap();
    let sge = [Sge::new(&src, 0, 16).unwrap()];
    for addr in [IOVA - 8, IOVA + LEN as u64 - 8, OFFSET] {
        let (mut a, _b) = pd.create_connected_pair(&cfg()).unwrap();
        let to = RemoteAddr {
            addr,
            rkey: dmr.rkey(),
        };
        a.post_send(&[SendWr::rdma_write(1, &sge, to).signaled()])
            .unwrap();
        let wc = completion(&mut a);
        assert_eq!(wc.status, WcStatus::REM_ACCESS_ERR, "{addr:#x}: {wc:?}");
        assert_eq!(contents(&file), before, "{addr:#x}");
    }
}

/// An `iova` whose offset within a page is not `offset`'s is refused
/// before any device is asked: nothing is registered.
#[test]
fn an_iova_and_offset_apart_within_a_page_are_refused_before_anything() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let file = File::from(Pd::dmabuf_stand_in(FILE).unwrap());
    let (regs, live) = (pd.registrations(), pd.live_mrs());
    let r = pd.register_dmabuf(&file, OFFSET, LEN, IOVA + 8, ALL);
    assert!(
        matches!(
            r,
            Err(Error::Register(RegRefusal::IovaPageOffset { iova, offset }))
                if iova == IOVA + 8 && offset == OFFSET
        ),
        "{r:?}"
    );
    assert_eq!((pd.registrations(), pd.live_mrs()), (regs, live));
    // The other checks of every registration come first too.
    let r = pd.register_dmabuf(&file, OFFSET, 0, IOVA, ALL);
    assert!(matches!(r, Err(Error::Register(RegRefusal::ZeroLength))));
    let r = pd.register_dmabuf(&file, OFFSET, LEN, IOVA, Access::REMOTE_WRITE);
    assert!(matches!(
        r,
        Err(Error::Register(RegRefusal::RemoteNeedsLocalWrite))
    ));
    let r = pd.register_dmabuf(&file, OFFSET, LEN, u64::MAX - 0x3ef, ALL);
    assert!(matches!(r, Err(Error::Register(RegRefusal::Wraps { .. }))));
    assert_eq!((pd.registrations(), pd.live_mrs()), (regs, live));
}

/// The sim's stand-in is a memfd sealed against shrinking, and the range
/// lies inside it; other descriptors and ranges are refused.
#[test]
fn the_sim_takes_only_a_sealed_memfd_and_a_range_inside_it() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let file = File::from(Pd::dmabuf_stand_in(FILE).unwrap());
    let past = pd.register_dmabuf(&file, FILE as u64 - 0x10, 0x20, 0x10_0ff0, ALL);
    assert!(matches!(past, Err(Error::OutOfBounds { .. })), "{past:?}");
    let dir = std::env::temp_dir().join(format!("rdma-direct-dmabuf-{}", std::process::id()));
    let plain = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&dir)
        .unwrap();
    std::fs::remove_file(&dir).unwrap();
    plain.set_len(FILE as u64).unwrap();
    let r = pd.register_dmabuf(&plain, OFFSET, LEN, IOVA, ALL);
    assert!(matches!(r, Err(Error::Invalid(_))), "{r:?}");
    assert_eq!(pd.live_mrs(), 0);
}

/// An RDMA READ from the DMA-BUF MR brings the buffer's bytes at
/// `offset + 0x80` into a local MR.
#[test]
fn a_read_from_the_dmabuf_mr_brings_the_buffers_bytes() {
    let (pd, file, dmr) = setup();
    file.write_all_at(b"from the GPU", OFFSET + 0x80).unwrap();
    let dst = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let (mut a, _b) = pd.create_connected_pair(&cfg()).unwrap();
    let sge = [Sge::new(&dst, 0, 12).unwrap()];
    a.post_send(&[SendWr::rdma_read(1, &sge, at(&dmr, 0x80)).signaled()])
        .unwrap();
    let wc = completion(&mut a);
    assert!(wc.status.is_ok(), "{wc:?}");
    let mut got = [0u8; 12];
    dst.read(0, &mut got).unwrap();
    assert_eq!(&got, b"from the GPU");
}

/// Local SGEs name the DMA-BUF MR by IOVA (lkey): as a WRITE's source, as
/// a READ's target and as a receive's buffer; `Sge::new` refuses it.
#[test]
fn local_sges_name_the_dmabuf_mr_by_iova() {
    let (pd, file, dmr) = setup();
    assert!(matches!(
        Sge::new(&dmr, 0, 8),
        Err(Error::NoCpuMapping { .. })
    ));
    file.write_all_at(b"gathered", OFFSET + 0x100).unwrap();
    let far = pd
        .alloc_mr(
            4096,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    far.write(0x10, b"scattered").unwrap();
    let (mut a, mut b) = pd.create_connected_pair(&cfg()).unwrap();
    // SAFETY: posted in no inline WR, on QPs without inline receive.
    let (from, into, recv) = unsafe {
        (
            [Sge::of_dmabuf(&dmr, 0x100, 8).unwrap()],
            [Sge::of_dmabuf(&dmr, 0x200, 9).unwrap()],
            [Sge::of_dmabuf(&dmr, 0x300, 4).unwrap()],
        )
    };
    assert_eq!(from[0].addr(), IOVA + 0x100);
    assert!(unsafe { Sge::of_dmabuf(&dmr, LEN - 4, 8) }.is_err());
    a.post_send(&[SendWr::rdma_write(1, &from, at(&far, 0x40)).signaled()])
        .unwrap();
    assert!(completion(&mut a).status.is_ok());
    a.post_send(&[SendWr::rdma_read(2, &into, at(&far, 0x10)).signaled()])
        .unwrap();
    assert!(completion(&mut a).status.is_ok());
    b.post_recv(&[RecvWr::new(3, &recv)]).unwrap();
    let msg = [Sge::new(&far, 0x10, 4).unwrap()];
    a.post_send(&[SendWr::send(4, &msg).signaled()]).unwrap();
    assert!(completion(&mut a).status.is_ok());
    let rc = completion(&mut b);
    assert_eq!((rc.status, rc.opcode), (WcStatus::SUCCESS, WcOpcode::RECV));
    let mut got = [0u8; 8];
    far.read(0x40, &mut got).unwrap();
    assert_eq!(&got, b"gathered");
    let all = contents(&file);
    let o = OFFSET as usize;
    assert_eq!(&all[o + 0x200..o + 0x209], b"scattered");
    assert_eq!(&all[o + 0x300..o + 0x304], b"scat");
}

/// The `Mr` of a DMA-BUF registration refuses every CPU access: its
/// copies and slices with `NoCpuMapping`, its byte loads and stores by
/// panicking; it hands back no memory.
#[test]
fn a_dmabuf_mr_refuses_cpu_access() {
    let (_pd, _file, dmr) = setup();
    let refused = |r: Result<(), Error>| matches!(r, Err(Error::NoCpuMapping { .. }));
    assert!(refused(dmr.write(0, b"x")));
    assert!(refused(dmr.read(0, &mut [0u8; 1])));
    // SAFETY: refused before any slice is made.
    assert!(refused(unsafe { dmr.slice(0, 1) }.map(|_| ())));
    // SAFETY: as above.
    assert!(refused(unsafe { dmr.slice_mut(0, 1) }.map(|_| ())));
    assert!(!dmr.is_writable());
    let load = std::panic::AssertUnwindSafe(|| dmr.load_u8(0));
    assert!(std::panic::catch_unwind(load).is_err());
    let store = std::panic::AssertUnwindSafe(|| dmr.store_u8(0, 1));
    assert!(std::panic::catch_unwind(store).is_err());
    assert!(matches!(dmr.try_into_memory(), Ok(None)));
}

/// A receive from an SRQ lands in the DMA-BUF MR it names by IOVA (the
/// sim translates an SRQ WQE's segments as an RQ's).
#[test]
fn an_srq_receive_lands_in_the_dmabuf_mr() {
    let (pd, file, dmr) = setup();
    let mut srq = pd.create_srq(4, 1).unwrap();
    let mut server = pd.create_qp_on_srq(&cfg(), &srq).unwrap();
    let mut client = pd.create_qp(&cfg()).unwrap();
    Qp::connect_loopback(&mut server, &mut client).unwrap();
    // SAFETY: a receive on QPs without inline receive.
    let into = [unsafe { Sge::of_dmabuf(&dmr, 0x400, 6) }.unwrap()];
    srq.post_recv(&[RecvWr::new(7, &into)]).unwrap();
    let src = pd.alloc_mr(64, Access::empty()).unwrap();
    src.write(0, b"pooled").unwrap();
    let msg = [Sge::new(&src, 0, 6).unwrap()];
    client
        .post_send(&[SendWr::send(1, &msg).signaled()])
        .unwrap();
    assert!(completion(&mut client).status.is_ok());
    let rc = completion(&mut server);
    assert_eq!((rc.status, rc.wr_id), (WcStatus::SUCCESS, 7));
    let o = OFFSET as usize + 0x400;
    assert_eq!(&contents(&file)[o..o + 6], b"pooled");
}
