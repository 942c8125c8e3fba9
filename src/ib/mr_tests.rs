//! The buffers and the MR types alone (no device); they run under Miri
//! too (`scripts/miri`), which checks every raw access here.
use super::*;
use crate::ib::mem::AlignedBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

/// A registration that, when dropped, reads the buffer it registers:
/// were the buffer freed first, Miri would report a use after free.
struct ReadsOnDrop {
    ptr: *const u8,
    dropped: Arc<AtomicBool>,
}
// SAFETY: test-only; the pointer is read once, in `drop`.
unsafe impl Send for ReadsOnDrop {}
// SAFETY: as for Send: nothing reads the pointer through `&`.
unsafe impl Sync for ReadsOnDrop {}
impl Registration for ReadsOnDrop {}
impl Drop for ReadsOnDrop {
    fn drop(&mut self) {
        let mut first = [0u8; 1];
        // SAFETY: `MrInner` drops the registration before the buffer.
        unsafe { mlx5_dv::shared::load_into(self.ptr, &mut first) };
        let _ = first;
        self.dropped.store(true, Ordering::Relaxed);
    }
}

fn inner(mem: Memory, access: Access, dropped: &Arc<AtomicBool>) -> MrInner {
    let buf = Buffer::from_memory(mem).unwrap();
    MrInner {
        reg: Box::new(ReadsOnDrop {
            ptr: buf.ptr(),
            dropped: dropped.clone(),
        }),
        live: None,
        buf,
        lkey: 0x200,
        rkey: 0x300,
        access,
        pd: 1,
    }
}

/// A deferred deregistration that keeps what it is given.
#[derive(Default)]
struct Keep(Mutex<Vec<MrInner>>, AtomicBool);
impl DeferredDereg for Keep {
    fn defer(&self, mr: MrInner) {
        self.0.lock().unwrap().push(mr);
    }
    fn idle_for(&self, _: u32) -> bool {
        !self.1.load(Ordering::Relaxed)
    }
}

#[test]
fn every_kind_of_memory_comes_back_whole() {
    let kinds: Vec<Memory> = vec![
        vec![7u8; 100].into(),
        vec![8u8; 100].into_boxed_slice().into(),
        AlignedBuf::zeroed(5000).unwrap().into(),
        memmap2::MmapMut::map_anon(8192).unwrap().into(),
    ];
    for mem in kinds {
        let (ptr, len) = (mem.as_ptr(), mem.len());
        let buf = Buffer::from_memory(mem).unwrap();
        assert_eq!(
            (buf.ptr() as *const u8, buf.len(), buf.writable()),
            (ptr, len, true)
        );
        let back = buf.into_memory().unwrap();
        assert_eq!((back.as_ptr(), back.len()), (ptr, len));
    }
    // A Vec's len is registered, not its capacity.
    let mut v = Vec::with_capacity(4096);
    v.extend_from_slice(&[1, 2, 3]);
    assert_eq!(Buffer::from_memory(v.into()).unwrap().len(), 3);
    assert!(Buffer::from_memory(Vec::new().into()).is_err());
    assert!(AlignedBuf::zeroed(0).is_err());
    let a = AlignedBuf::zeroed(5000).unwrap();
    assert_eq!(a.as_ptr() as usize % 4096, 0);
    assert!(a.iter().all(|&b| b == 0));
    let (m, _) = Buffer::mapped(8192).unwrap();
    assert_eq!(m.ptr() as usize % 4096, 0);
}

#[test]
fn registration_checks_refuse_bad_input() {
    use crate::ib::error::RegRefusal as R;
    use crate::ib::mem::check_registration as check;
    let reg = |r: Result<()>| match r {
        Err(Error::Register(r)) => Some(r),
        _ => None,
    };
    assert_eq!(
        reg(check(0x1000, 0, Access::LOCAL_WRITE)),
        Some(R::ZeroLength)
    );
    assert_eq!(
        reg(check(u64::MAX - 10, 20, Access::LOCAL_WRITE)),
        Some(R::Wraps {
            addr: u64::MAX - 10,
            len: 20
        })
    );
    assert_eq!(
        reg(check(0x1000, 8, Access::REMOTE_WRITE)),
        Some(R::RemoteNeedsLocalWrite)
    );
    assert_eq!(
        reg(check(0x1000, 8, Access::REMOTE_ATOMIC)),
        Some(R::RemoteNeedsLocalWrite)
    );
    assert!(check(0x1000, 8, Access::REMOTE_READ).is_ok());
    assert!(check(0x1000, 8, Access::all()).is_ok());
}

#[test]
fn a_local_mr_is_plain_bytes() {
    let dropped = Arc::new(AtomicBool::new(false));
    let mut l = LocalMr::new(inner(vec![0u8; 4096].into(), Access::LOCAL_WRITE, &dropped));
    l[..4].copy_from_slice(b"abcd");
    l.write(4090, b"efghij").unwrap();
    assert!(l.write(4091, b"efghij").is_err());
    assert!(l.write(usize::MAX, b"e").is_err());
    let mut got = [0u8; 8];
    l.read(4088, &mut got).unwrap();
    assert_eq!(&got, b"\0\0efghij");
    assert!(l.read(4089, &mut got).is_err());
    assert_eq!(&l[..4], b"abcd");
    let Memory::Vec(v) = l.into_memory() else {
        panic!("a Vec comes back as a Vec")
    };
    assert!(
        dropped.load(Ordering::Relaxed),
        "deregistered before handed back"
    );
    assert_eq!(&v[..4], b"abcd");
}

#[test]
fn mr_copies_and_byte_access_stay_in_range() {
    let dropped = Arc::new(AtomicBool::new(false));
    let dereg = Arc::new(Keep::default());
    let m = Mr::new(
        inner(
            AlignedBuf::zeroed(4096).unwrap().into(),
            Access::all(),
            &dropped,
        ),
        dereg.clone(),
    );
    assert_eq!((m.len(), m.lkey().0, m.rkey().0), (4096, 0x200, 0x300));
    m.write(4090, b"abcdef").unwrap();
    assert!(m.write(4091, b"abcdef").is_err());
    assert!(m.write(usize::MAX, b"a").is_err());
    let mut got = [0u8; 8];
    m.read(4088, &mut got).unwrap();
    assert_eq!(&got, b"\0\0abcdef");
    assert!(m.read(4089, &mut got).is_err());
    m.store_u8(4095, 0x5a);
    assert_eq!(m.load_u8(4095), 0x5a);
    let past_the_end = std::panic::AssertUnwindSafe(|| m.load_u8(4096));
    assert!(std::panic::catch_unwind(past_the_end).is_err());
    // SAFETY: no device, no other handle in use: nothing else touches it.
    unsafe {
        m.slice_mut(0, 3).unwrap().copy_from_slice(b"xyz");
        assert_eq!(m.slice(0, 3).unwrap(), b"xyz");
        assert!(m.slice(4000, 97).is_err());
    }
    // Another handle: not the last, so no memory back; the last one's
    // drop goes to the deferred deregistration, not straight to deregistration.
    let c = m.clone();
    let m = m.try_into_memory().unwrap_err();
    drop(m);
    assert!(dereg.0.lock().unwrap().is_empty());
    // Not quiet (a WR outstanding): handed back as it was.
    dereg.1.store(true, Ordering::Relaxed);
    let c = c.try_into_memory().unwrap_err();
    drop(c);
    assert_eq!(dereg.0.lock().unwrap().len(), 1);
    assert!(!dropped.load(Ordering::Relaxed));
    dereg.0.lock().unwrap().clear();
    assert!(dropped.load(Ordering::Relaxed));
}

#[test]
// Native only: Miri cannot map files.
#[cfg_attr(miri, ignore = "Miri cannot map files")]
fn a_read_only_mr_refuses_writes() {
    use std::io::Write;
    let dir = std::env::temp_dir().join(format!("rdma-direct-ro-{}", std::process::id()));
    let mut f = std::fs::File::create(&dir).unwrap();
    f.write_all(&[9u8; 4096]).unwrap();
    let f = std::fs::File::open(&dir).unwrap();
    // SAFETY: a file of ours, not changed while mapped.
    let map = unsafe { memmap2::Mmap::map(&f) }.unwrap();
    std::fs::remove_file(&dir).unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let m = Mr::new(
        inner(map.into(), Access::REMOTE_READ, &dropped),
        Arc::new(Keep::default()),
    );
    assert!(!m.is_writable());
    assert!(m.write(0, b"x").is_err());
    // SAFETY: no device touches it.
    assert!(unsafe { m.slice_mut(0, 1) }.is_err());
    assert_eq!(m.load_u8(4095), 9);
    let store = std::panic::AssertUnwindSafe(|| m.store_u8(0, 1));
    assert!(std::panic::catch_unwind(store).is_err());
    assert!(matches!(m.try_into_memory(), Ok(Some(Memory::Mmap(_)))));
}

/// An MR over a device range (a DMA-BUF registration's IOVA, no CPU
/// mapping): its address is the IOVA, every byte accessor refuses
/// (under Miri too: none dereferences the address), and it hands back
/// no memory.
#[test]
fn an_mr_without_a_cpu_mapping_refuses_every_byte_access() {
    let iova = 0x7f00_0000_2010u64;
    let m = Mr::new(
        MrInner {
            reg: Box::new(NoReg),
            live: None,
            buf: Buffer::device(iova, 0x800),
            lkey: 0x200,
            rkey: 0x200,
            access: Access::all(),
            pd: 1,
        },
        Arc::new(Keep::default()),
    );
    assert_eq!((m.addr(), m.len(), m.is_cpu_mapped()), (iova, 0x800, false));
    let refused = |r: Result<()>| matches!(r, Err(Error::NoCpuMapping { .. }));
    assert!(refused(m.write(0, b"x")));
    assert!(refused(m.read(0, &mut [0u8; 4])));
    assert!(refused(m.check_cpu("Sge::new")));
    // SAFETY: refused before any slice is made.
    unsafe {
        assert!(refused(m.slice(0, 1).map(|_| ())));
        assert!(refused(m.slice_mut(0, 1).map(|_| ())));
    }
    // Out of range is still out of range.
    assert!(matches!(
        m.read(0x800, &mut [0u8; 1]),
        Err(Error::OutOfBounds { .. })
    ));
    let load = std::panic::AssertUnwindSafe(|| m.load_u8(0));
    assert!(std::panic::catch_unwind(load).is_err());
    let store = std::panic::AssertUnwindSafe(|| m.store_u8(0, 1));
    assert!(std::panic::catch_unwind(store).is_err());
    assert!(matches!(m.try_into_memory(), Ok(None)));
}

/// An implicit ODP MR's (the whole address space, no CPU mapping of its
/// own): address 0, `usize::MAX` bytes, every byte accessor refused (under
/// Miri too: nothing dereferences address 0), ranges checked against the
/// address space's end, no memory handed back; an ordinary MR is not
/// implicit.
#[test]
fn an_implicit_odp_mr_is_every_address_with_no_cpu_mapping() {
    let mk = |buf| {
        Mr::new(
            MrInner {
                reg: Box::new(NoReg),
                live: None,
                buf,
                lkey: 0x200,
                rkey: 0x200,
                access: Access::LOCAL_WRITE | Access::ON_DEMAND,
                pd: 1,
            },
            Arc::new(Keep::default()),
        )
    };
    let m = mk(Buffer::implicit());
    assert_eq!((m.addr(), m.len()), (0, usize::MAX));
    assert!(m.is_implicit_odp() && !m.is_cpu_mapped() && !m.is_writable());
    let refused = |r: Result<()>| matches!(r, Err(Error::NoCpuMapping { .. }));
    assert!(refused(m.write(0x1000, b"x")));
    assert!(refused(m.read(0x1000, &mut [0u8; 4])));
    assert!(refused(m.check_cpu("Sge::new")));
    assert!(m.check_range(usize::MAX - 8, 8).is_ok());
    assert!(matches!(
        m.check_range(usize::MAX - 3, 8),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(m.try_into_memory(), Ok(None)));
    let plain = mk(Buffer::new(64).unwrap());
    assert!(!plain.is_implicit_odp() && plain.is_cpu_mapped());
}

/// A registration with nothing to undo.
struct NoReg;
impl Registration for NoReg {}

/// The device (the sim's thread) reads and writes an MR while the host
/// does: with every access atomic that is no data race, which Miri's
/// race detector checks here with two threads.
#[test]
fn concurrent_copies_are_no_data_race() {
    let dropped = Arc::new(AtomicBool::new(false));
    let m = Mr::new(
        inner(
            AlignedBuf::zeroed(4096).unwrap().into(),
            Access::all(),
            &dropped,
        ),
        Arc::new(Keep::default()),
    );
    let rounds = if cfg!(miri) { 4 } else { 1000 };
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..rounds {
                m.write(0, &[i as u8; 64]).unwrap();
                m.store_u8(63, 1);
            }
        });
        s.spawn(|| {
            let mut got = [0u8; 64];
            for _ in 0..rounds {
                m.read(0, &mut got).unwrap();
                let _ = m.load_u8(63);
            }
        });
    });
    let mut got = [0u8; 64];
    m.read(0, &mut got).unwrap();
    assert_eq!(got[63], 1);
}
