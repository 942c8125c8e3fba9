//! Hostile uses of DMA-BUF registration on the sim (`Pd::register_dmabuf`,
//! `Pd::dmabuf_stand_in`, `Sge::of_dmabuf`): descriptors that are not a
//! sealed memfd (a plain file, a pipe, an unsealed memfd, a write-sealed
//! one, a read-only descriptor), ranges past the buffer or wrapping, zero
//! bytes, the `Mr`'s byte accessors, and memory windows over a DMA-BUF MR.
//! Each case asks for a typed error with nothing registered, or a device
//! refusal that leaves the buffer and the window usable; never a panic.

use rdma_direct::testing::QpHooks;
use rdma_direct::*;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;

#[path = "support/mw.rs"]
mod support;
use support::*;

/// The stand-in's size: three pages.
const FILE: usize = 3 * 4096;
/// Where the MR starts in the buffer, and its device address (the same
/// offset in a page).
const OFFSET: u64 = 0x1010;
const IOVA: u64 = 0x7f00_0000_2010;
const DLEN: usize = 0x800;
const ALL: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ);

/// `register_dmabuf` of `fd` refused with an error `ok` accepts, and
/// nothing registered.
fn refused_reg(pd: &Pd, what: &str, r: Result<Mr>, ok: impl Fn(&Error) -> bool) {
    match r {
        Ok(_) => panic!("{what}: registered"),
        Err(e) => assert!(ok(&e), "{what}: {e:?}"),
    }
    assert_eq!(pd.live_mrs(), 0, "{what}: something registered");
}

/// Ranges: zero bytes, `offset + len` and `iova + len` wrapping, past the
/// buffer's end, huge; access bits unknown: each refused, nothing
/// registered, and a good registration works afterwards.
#[test]
fn bad_ranges_and_access_are_refused_before_anything() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let fd = Pd::dmabuf_stand_in(FILE).unwrap();
    let cases: Vec<(&str, u64, usize, u64, Access)> = vec![
        ("zero bytes", OFFSET, 0, IOVA, ALL),
        ("offset + len wraps", u64::MAX - 0xfef, 0x2000, 0x10, ALL),
        ("iova + len wraps", 0, 0x2000, u64::MAX - 0xfff, ALL),
        ("len usize::MAX", 0, usize::MAX, 0, ALL),
        ("past the end", FILE as u64 - 0x10, 0x20, 0x10_0ff0, ALL),
        ("far past the end", 1 << 40, 16, 1 << 40, ALL),
        ("offset at the end", FILE as u64, 1, 0x1000, ALL),
        ("2^40 bytes", 0, 1 << 40, 0, ALL),
        (
            "unknown access bits",
            OFFSET,
            DLEN,
            IOVA,
            Access::from_bits_retain(1 << 30),
        ),
        (
            "remote write without local write",
            OFFSET,
            DLEN,
            IOVA,
            Access::REMOTE_WRITE,
        ),
    ];
    for (what, offset, len, iova, access) in cases {
        let r = pd.register_dmabuf(&fd, offset, len, iova, access);
        refused_reg(&pd, what, r, |e| {
            matches!(
                e,
                Error::Register(_) | Error::OutOfBounds { .. } | Error::Invalid(_)
            )
        });
    }
    let mr = pd.register_dmabuf(&fd, OFFSET, DLEN, IOVA, ALL).unwrap();
    assert_eq!(pd.live_mrs(), 1);
    drop(mr);
}

/// Descriptors that are not a memfd sealed against shrinking: a plain
/// file, a pipe, `/dev/null`, an unsealed memfd, and sealed memfds the sim
/// cannot map writable (sealed against writes; opened read-only): each a
/// typed error, nothing registered, no panic.
#[test]
fn descriptors_the_sim_cannot_map_are_refused() {
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let typed = |e: &Error| {
        matches!(
            e,
            Error::Invalid(_) | Error::Os { .. } | Error::OutOfBounds { .. } | Error::Sim(_)
        )
    };
    let null = File::open("/dev/null").unwrap();
    let r = pd.register_dmabuf(&null, 0, 16, 0, ALL);
    refused_reg(&pd, "/dev/null", r, typed);
    let (rd, wr) = nix::unistd::pipe().unwrap();
    let r = pd.register_dmabuf(&rd, 0, 16, 0, ALL);
    refused_reg(&pd, "a pipe's read end", r, typed);
    let r = pd.register_dmabuf(&wr, 0, 16, 0, ALL);
    refused_reg(&pd, "a pipe's write end", r, typed);
    let unsealed: OwnedFd = nix::sys::memfd::memfd_create(
        c"unsealed",
        nix::sys::memfd::MFdFlags::MFD_CLOEXEC | nix::sys::memfd::MFdFlags::MFD_ALLOW_SEALING,
    )
    .unwrap();
    nix::unistd::ftruncate(&unsealed, FILE as i64).unwrap();
    let r = pd.register_dmabuf(&unsealed, 0, 16, 0, ALL);
    refused_reg(&pd, "an unsealed memfd", r, typed);
    // Sealed against shrinking and against writes: MAP_SHARED writable
    // fails (EPERM).
    let sealed = Pd::dmabuf_stand_in(FILE).unwrap();
    fcntl(&sealed, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_WRITE)).unwrap();
    let r = pd.register_dmabuf(&sealed, 0, 16, 0, ALL);
    match r {
        Ok(mr) => {
            // Then a peer's WRITE must not write into a write-sealed buffer.
            println!("a write-sealed memfd registered with LOCAL_WRITE: {mr:?}");
            panic!("a write-sealed memfd registered writable");
        }
        Err(e) => assert!(typed(&e), "write-sealed: {e:?}"),
    }
    assert_eq!(pd.live_mrs(), 0);
    // A read-only descriptor of a good memfd.
    let good = Pd::dmabuf_stand_in(FILE).unwrap();
    let ro = File::open(format!("/proc/self/fd/{}", good.as_raw_fd())).unwrap();
    let r = pd.register_dmabuf(&ro, 0, 16, 0, ALL);
    refused_reg(&pd, "a read-only descriptor", r, typed);
    // (`dmabuf_stand_in` of absurd lengths: typed errors.)
    assert!(matches!(
        Pd::dmabuf_stand_in(0),
        Err(Error::Register(RegRefusal::ZeroLength))
    ));
    assert!(Pd::dmabuf_stand_in(usize::MAX).is_err());
}

/// The `Mr`'s CPU accessors and `Sge::new` refuse a DMA-BUF MR;
/// `Sge::of_dmabuf` refuses a range that overflows, without panicking.
#[test]
fn cpu_accessors_refuse_a_dmabuf_mr() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let fd = Pd::dmabuf_stand_in(FILE).unwrap();
    let mr = pd.register_dmabuf(&fd, OFFSET, DLEN, IOVA, ALL).unwrap();
    let no_cpu = |r: Result<()>| matches!(r, Err(Error::NoCpuMapping { .. }));
    assert!(!mr.is_cpu_mapped());
    assert!(no_cpu(mr.write(0, b"x")));
    let mut b = [0u8; 4];
    assert!(no_cpu(mr.read(0, &mut b)));
    // SAFETY: refused before any byte is reached.
    unsafe {
        assert!(matches!(mr.slice(0, 4), Err(Error::NoCpuMapping { .. })));
        assert!(matches!(
            mr.slice_mut(0, 4),
            Err(Error::NoCpuMapping { .. })
        ));
    }
    assert!(matches!(
        Sge::new(&mr, 0, 8),
        Err(Error::NoCpuMapping { .. })
    ));
    // SAFETY: the SGE is refused or dropped unused.
    unsafe {
        for (off, len) in [
            (usize::MAX, 1),
            (usize::MAX - 3, 8),
            (DLEN, 1),
            (0, DLEN as u32 + 1),
            (0, u32::MAX),
        ] {
            assert!(
                Sge::of_dmabuf(&mr, off, len).is_err(),
                "of_dmabuf {off}+{len}"
            );
        }
        assert!(Sge::of_dmabuf(&mr, DLEN - 1, 1).is_ok());
    }
    match mr.try_into_memory() {
        Ok(None) => {}
        Ok(Some(_)) => panic!("a DMA-BUF MR gave memory"),
        Err(_) => {}
    }
}

/// The registration outlives the descriptor and the `Pd` handle: a peer's
/// WRITE lands in the buffer (read through another descriptor of it).
#[test]
fn the_mr_outlives_its_descriptor_and_pd() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let fd = Pd::dmabuf_stand_in(FILE).unwrap();
    let file = File::from(fd.try_clone().unwrap());
    let dmr = pd.register_dmabuf(&fd, OFFSET, DLEN, IOVA, ALL).unwrap();
    drop(fd);
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let (mut a, _b) = pd.create_connected_pair(&mw_cfg()).unwrap();
    drop(pd);
    let r = RemoteAddr {
        addr: dmr.addr() + 0x20,
        rkey: dmr.rkey(),
    };
    assert_eq!(
        write_through(&mut a, &src, 0x3c, r.addr, r.rkey),
        WcStatus::SUCCESS
    );
    let mut got = [0u8; 8];
    file.read_exact_at(&mut got, OFFSET + 0x20).unwrap();
    assert_eq!(got, [0x3c; 8]);
}

/// A memory window over a DMA-BUF MR with MW_BIND: the sim refuses the
/// bind (documented: MW_BIND_ERR), type 1 and type 2; the buffer is
/// unchanged and no rkey the bind named grants anything.
#[test]
fn a_window_over_a_dmabuf_mr_is_refused_by_the_device() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let fd = Pd::dmabuf_stand_in(FILE).unwrap();
    let file = File::from(fd.try_clone().unwrap());
    let dmr = pd
        .register_dmabuf(&fd, OFFSET, DLEN, IOVA, ALL | Access::MW_BIND)
        .unwrap();
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let bind = MwBind::new(&dmr, 0, 256, RW);
    let mw1 = pd.alloc_mw(MwType::One).unwrap();
    let (mut a, mut b) = pd.create_connected_pair(&mw_cfg()).unwrap();
    let k = b.bind_mw(&mw1, bind, 1, SendFlags::SIGNALED).unwrap();
    let c = next(&mut b);
    assert_eq!(c.status.ident(), "MW_BIND_ERR", "{c:?}");
    assert_ne!(
        write_through(&mut a, &src, 0x77, IOVA, k),
        WcStatus::SUCCESS
    );
    let mw2 = pd.alloc_mw(MwType::Two).unwrap();
    let (_a, mut b) = pd.create_connected_pair(&mw_cfg()).unwrap();
    b.post_send(&[SendWr::bind_mw(2, &mw2, bind).signaled()])
        .unwrap();
    let c = next(&mut b);
    assert_eq!(c.status.ident(), "MW_BIND_ERR", "{c:?}");
    let mut all = vec![0u8; FILE];
    file.read_exact_at(&mut all, 0).unwrap();
    assert!(all.iter().all(|&x| x == 0), "the buffer changed");
}

/// After a type-1 bind the device refused (over a DMA-BUF MR), the same
/// window must still bind over a host MR on a healthy QP.
#[test]
fn a_type1_window_binds_again_after_a_refused_bind() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let fd = Pd::dmabuf_stand_in(FILE).unwrap();
    let dmr = pd
        .register_dmabuf(&fd, OFFSET, DLEN, IOVA, ALL | Access::MW_BIND)
        .unwrap();
    let host = pd.alloc_mr(4096, ALL | Access::MW_BIND).unwrap();
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let mw = pd.alloc_mw(MwType::One).unwrap();
    let (_a, mut b) = pd.create_connected_pair(&mw_cfg()).unwrap();
    b.bind_mw(&mw, MwBind::new(&dmr, 0, 256, RW), 1, SendFlags::SIGNALED)
        .unwrap();
    assert_eq!(next(&mut b).status.ident(), "MW_BIND_ERR");
    let (mut a2, mut b2) = pd.create_connected_pair(&mw_cfg()).unwrap();
    let k = b2
        .bind_mw(&mw, MwBind::new(&host, 0, 256, RW), 2, SendFlags::SIGNALED)
        .unwrap();
    let c = next(&mut b2);
    assert_eq!(c.status, WcStatus::SUCCESS, "{c:?}");
    assert_eq!(
        write_through(&mut a2, &src, 0x78, host.addr(), k),
        WcStatus::SUCCESS
    );
}

/// A DMA-BUF SGE in a WR on a QP: the front end takes it (the contract
/// of `Sge::of_dmabuf` is the caller's); an SGE of another PD's DMA-BUF
/// MR is refused before anything is written.
#[test]
fn a_dmabuf_sge_of_another_pd_is_refused() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let other = ctx.alloc_pd().unwrap();
    let fd = Pd::dmabuf_stand_in(FILE).unwrap();
    let dmr = other.register_dmabuf(&fd, OFFSET, DLEN, IOVA, ALL).unwrap();
    let far = pd.alloc_mr(4096, ALL).unwrap();
    let (mut a, _b) = pd.create_connected_pair(&mw_cfg()).unwrap();
    // SAFETY: a WRITE, not inline: only the device reaches the SGE.
    let s = [unsafe { Sge::of_dmabuf(&dmr, 0, 8) }.unwrap()];
    let before = a.sq_snapshot().unwrap();
    let r = RemoteAddr {
        addr: far.addr(),
        rkey: far.rkey(),
    };
    let e = a
        .post_send(&[SendWr::rdma_write(1, &s, r).signaled()])
        .unwrap_err();
    println!("{e}");
    assert_eq!(before, a.sq_snapshot().unwrap());
    let _ = fd.as_fd();
}
