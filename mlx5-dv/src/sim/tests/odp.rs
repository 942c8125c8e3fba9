//! ODP in the sim (`odp.rs`), driven through the ring driver: a first
//! touch of each page faults (counted) and the access lands; a second
//! does not; after `evict_odp` it faults again; `advise_mr` prefetches
//! and refuses what it must; implicit ODP reaches any mapped address and
//! fails an unmapped or read-only one, touching nothing.

use super::*;
use crate::cqe::Cqe;
use crate::wqe::AtomicSeg;
use std::alloc::{alloc_zeroed, dealloc, Layout};

/// Page-aligned, zeroed memory the device reaches (the test reads and
/// writes it only between `dev.process()` calls).
struct Mem {
    ptr: *mut u8,
    layout: Layout,
}

impl Mem {
    fn new(pages: usize) -> Self {
        let layout = Layout::from_size_align(pages * ODP_PAGE as usize, ODP_PAGE as usize).unwrap();
        // SAFETY: a nonzero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        Mem { ptr, layout }
    }

    fn addr(&self, off: usize) -> u64 {
        self.ptr as u64 + off as u64
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the allocation, borrowed as `self` is, read and written
        // by the test only while the device does not run (synchronous
        // `process`).
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }

    /// Registers it all on [`PD`] with `access`.
    fn reg(&self, dev: &Device, access: Access) -> MrKeys {
        // SAFETY: `self` outlives the device work on it (the tests drop it last).
        unsafe { dev.reg_mr(PD, self.ptr, self.layout.size(), access) }.unwrap()
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

const ODP_WRITE: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::ON_DEMAND);

/// Posts `w` on A, executes it, and returns A's CQE (its WQE retired).
fn run(dev: &Device, a: &mut Side, w: &SendWqe) -> Cqe {
    a.sq.post(w, 1).unwrap();
    a.sq.ring_doorbell();
    dev.process();
    let c = a.cqp.poll_one().expect("a CQE");
    a.cqp.update_ci();
    a.sq.complete(c.wqe_counter);
    c
}

fn sge(addr: u64, len: u32, lkey: u32) -> [DataSeg; 1] {
    [DataSeg { addr, len, lkey }]
}

fn read_wqe<'a>(sge: &'a [DataSeg], raddr: u64, rkey: u32) -> SendWqe<'a> {
    SendWqe {
        opcode: WqeOpcode::RDMA_READ,
        ..write_wqe(Payload::Sges(sge), raddr, rkey)
    }
}

#[test]
fn a_write_to_an_odp_mr_faults_each_page_once_and_again_after_eviction() {
    let dev = Device::new();
    let (mut a, b) = pair_with(&dev, 64, 4);
    let (mut src, mut dst) = (Mem::new(2), Mem::new(2));
    let ks = src.reg(&dev, Access::LOCAL_WRITE);
    let kd = dst.reg(&dev, ODP_WRITE);
    for (round, faults) in [(1u8, 2), (2, 2)] {
        src.bytes().fill(round);
        let s = sge(src.addr(0), 8192, ks.lkey);
        let c = run(
            &dev,
            &mut a,
            &write_wqe(Payload::Sges(&s), dst.addr(0), kd.rkey),
        );
        assert_eq!(c.opcode, CqeOpcode::REQ);
        assert!(
            dst.bytes().iter().all(|&x| x == round),
            "round {round} landed"
        );
        assert_eq!(dev.odp_stats().faults, faults, "round {round}");
    }
    assert_eq!(dev.evict_odp(kd.lkey), Ok(2));
    assert_eq!(dev.evict_odp(kd.lkey), Ok(0), "nothing resident");
    // One byte on the second page: that page alone faults.
    src.bytes().fill(3);
    let s = sge(src.addr(0), 1, ks.lkey);
    run(
        &dev,
        &mut a,
        &write_wqe(Payload::Sges(&s), dst.addr(5000), kd.rkey),
    );
    assert_eq!(dst.bytes()[5000], 3);
    assert_eq!(dev.odp_stats().faults, 3);
    assert_eq!(b.qp.state(), QpState::Rts);
    assert_eq!(dev.odp_stats().srq_fault_cqes, 0);
}

#[test]
fn a_read_faults_the_responders_source_and_the_requesters_target() {
    let dev = Device::new();
    let (mut a, _b) = pair_with(&dev, 64, 4);
    let (mut src, mut dst) = (Mem::new(1), Mem::new(1));
    src.bytes().fill(0x77);
    let ks = src.reg(
        &dev,
        Access::LOCAL_WRITE | Access::REMOTE_READ | Access::ON_DEMAND,
    );
    let kd = dst.reg(&dev, Access::LOCAL_WRITE | Access::ON_DEMAND);
    for faults in [2, 2] {
        let d = sge(dst.addr(0), 4096, kd.lkey);
        let c = run(&dev, &mut a, &read_wqe(&d, src.addr(0), ks.rkey));
        assert_eq!((c.opcode, c.byte_cnt), (CqeOpcode::REQ, 4096));
        assert!(dst.bytes().iter().all(|&x| x == 0x77));
        assert_eq!(dev.odp_stats().faults, faults);
    }
}

/// A SEND's gather from an ODP MR and its receive's scatter into one fault
/// transparently; the receive faults only the pages the message fills.
#[test]
fn a_send_gathers_and_scatters_through_odp_mrs_faulting_only_the_bytes_used() {
    use crate::driver::ReceiveQueue;
    let dev = Device::new();
    let cq = |_| dev.create_cq(16, 64).unwrap();
    let (ca, cb) = (cq(0), cq(1));
    let qa = dev.create_qp_rq(PD, &ca, 8, 4, 16).unwrap();
    let qb = dev.create_qp_rq(PD, &cb, 8, 4, 16).unwrap();
    for (x, y) in [(&qa, &qb), (&qb, &qa)] {
        x.to_init(Access::QP_ALL).unwrap();
        x.to_rtr(y.qpn()).unwrap();
        x.to_rts().unwrap();
    }
    // SAFETY: descriptions of live sim objects the test keeps longer than
    // the drivers, which touch ring memory only when called.
    let (mut sq, mut rq, mut cqb) = unsafe {
        (
            SendQueue::new(&qa.dv(), qa.qpn(), 64, 4).unwrap(),
            ReceiveQueue::new(&qb.dv()).unwrap(),
            CompletionQueue::new(&cb.dv()).unwrap(),
        )
    };
    let (mut src, mut dst) = (Mem::new(2), Mem::new(3));
    for (i, x) in src.bytes().iter_mut().enumerate() {
        *x = i as u8;
    }
    let ks = src.reg(&dev, Access::LOCAL_WRITE | Access::ON_DEMAND);
    let kd = dst.reg(&dev, Access::LOCAL_WRITE | Access::ON_DEMAND);
    // A receive of three pages; a SEND of 100 bytes across the source's
    // two pages: 2 faults at the requester, 1 at the responder.
    rq.post(&sge(dst.addr(0), 3 * 4096, kd.lkey), 5).unwrap();
    rq.ring_doorbell();
    let s = sge(src.addr(4000), 100, ks.lkey);
    sq.post(&send_wqe(&s), 6).unwrap();
    sq.ring_doorbell();
    dev.process();
    let c = cqb.poll_one().expect("receive CQE");
    assert_eq!((c.opcode, c.byte_cnt), (CqeOpcode::RESP_SEND, 100));
    assert_eq!(rq.complete(c.wqe_counter), Some(5));
    assert_eq!(&dst.bytes()[..100], &src.bytes()[4000..4100]);
    assert_eq!(dev.odp_stats().faults, 3);
    assert_eq!(qb.state(), QpState::Rts);
}

#[test]
fn an_atomic_faults_the_remote_word_and_the_local_result() {
    let dev = Device::new();
    let (mut a, _b) = pair_with(&dev, 64, 4);
    let (mut word, mut old) = (Mem::new(1), Mem::new(1));
    word.bytes()[8..16].copy_from_slice(&40u64.to_ne_bytes());
    let kw = word.reg(
        &dev,
        Access::LOCAL_WRITE | Access::REMOTE_ATOMIC | Access::ON_DEMAND,
    );
    let ko = old.reg(&dev, Access::LOCAL_WRITE | Access::ON_DEMAND);
    for (n, faults) in [(0u64, 2), (1, 2)] {
        let o = sge(old.addr(0), 8, ko.lkey);
        let w = SendWqe {
            opcode: WqeOpcode::ATOMIC_FA,
            atomic: Some(AtomicSeg {
                swap_add: 2,
                compare: 0,
            }),
            ..read_wqe(&o, word.addr(8), kw.rkey)
        };
        let c = run(&dev, &mut a, &w);
        assert_eq!(c.opcode, CqeOpcode::REQ);
        assert_eq!(old.bytes()[..8], (40 + 2 * n).to_ne_bytes());
        assert_eq!(dev.odp_stats().faults, faults);
    }
    assert_eq!(word.bytes()[8..16], 44u64.to_ne_bytes());
}

/// A peer's access through a memory window faults the pages of the ODP
/// MR the window is bound to.
#[test]
fn a_write_through_a_window_faults_the_pages_of_its_odp_mr() {
    use super::windows::{bind, run_umr, write};
    use crate::wqe::MwType;
    let dev = Device::new();
    let mut m = Mem::new(2);
    let mr = m.reg(&dev, ODP_WRITE | Access::REMOTE_READ | Access::MW_BIND);
    let mw = dev.alloc_mw(PD, MwType::Two).unwrap();
    let (mut a, mut b) = pair_with(&dev, 16, 4);
    let w = bind(mw, 7, &mr, m.addr(4096), 4096, MwType::Two);
    assert_eq!(run_umr(&dev, &mut b, &w), Syndrome(0));
    assert_eq!(dev.odp_stats().faults, 0, "a bind touches no page");
    for _ in 0..2 {
        assert_eq!(write(&dev, &mut a, m.addr(4100), mw | 7), Syndrome(0));
        assert_eq!(m.bytes()[4100..4108], [0x5a; 8]);
        assert_eq!(dev.odp_stats().faults, 1, "its page, once");
    }
    dev.dealloc_mw(mw | 7).unwrap();
    dev.dereg_mr(mr.lkey).unwrap();
}

#[test]
fn advise_makes_the_next_access_fault_free() {
    let dev = Device::new();
    let (mut a, _b) = pair_with(&dev, 64, 4);
    let (src, dst) = (Mem::new(2), Mem::new(2));
    let ks = src.reg(&dev, Access::LOCAL_WRITE);
    let kd = dst.reg(&dev, ODP_WRITE);
    let all = [(kd.lkey, dst.addr(0), 8192)];
    dev.advise_mr(PD, OdpAdvice::PrefetchWrite, &all).unwrap();
    assert_eq!(dev.odp_stats().prefetched, 2);
    dev.advise_mr(PD, OdpAdvice::Prefetch, &all).unwrap();
    assert_eq!(dev.odp_stats().prefetched, 2, "resident already");
    let s = sge(src.addr(0), 8192, ks.lkey);
    run(
        &dev,
        &mut a,
        &write_wqe(Payload::Sges(&s), dst.addr(0), kd.rkey),
    );
    assert_eq!(dev.odp_stats().faults, 0);
    // A zero-length SGE makes nothing resident; one byte, its page.
    dev.evict_odp(kd.lkey).unwrap();
    let two = [(kd.lkey, dst.addr(10), 0), (kd.lkey, dst.addr(4096), 1)];
    dev.advise_mr(PD, OdpAdvice::Prefetch, &two).unwrap();
    assert_eq!(dev.odp_stats().prefetched, 3);
}

#[test]
fn advise_and_evict_refuse_with_typed_errors_and_change_nothing() {
    let dev = Device::new();
    let m = Mem::new(2);
    let odp = m.reg(&dev, ODP_WRITE);
    let ro = m.reg(&dev, Access::REMOTE_READ | Access::ON_DEMAND);
    let pinned = m.reg(&dev, Access::LOCAL_WRITE);
    let good = (odp.lkey, m.addr(0), 4096);
    let p = OdpAdvice::Prefetch;
    // (PD, advice, the bad SGE, the refusal)
    type Case = (u32, OdpAdvice, (u32, u64, u32), SimError);
    let cases: [Case; 6] = [
        (PD, p, (0x7700, m.addr(0), 8), SimError::NoSuchMr(0x7700)),
        (
            PD,
            p,
            (pinned.lkey, m.addr(0), 8),
            SimError::NotOdp(pinned.lkey),
        ),
        (
            PD + 1,
            p,
            good,
            SimError::ForeignMr {
                lkey: odp.lkey,
                pd: PD + 1,
            },
        ),
        (
            PD,
            OdpAdvice::PrefetchWrite,
            (ro.lkey, m.addr(0), 8),
            SimError::NotWritable(ro.lkey),
        ),
        (
            PD,
            p,
            (odp.lkey, m.addr(4096), 4097),
            SimError::OutsideMr {
                lkey: odp.lkey,
                addr: m.addr(4096),
                len: 4097,
            },
        ),
        (
            PD,
            p,
            (odp.lkey, u64::MAX - 1, 8),
            SimError::OutsideMr {
                lkey: odp.lkey,
                addr: u64::MAX - 1,
                len: 8,
            },
        ),
    ];
    for (pd, advice, bad, err) in cases {
        // The good SGE first: a refusal makes it no more resident.
        assert_eq!(dev.advise_mr(pd, advice, &[good, bad]), Err(err));
        assert_eq!(dev.odp_stats().prefetched, 0);
    }
    assert_eq!(dev.evict_odp(0x7700), Err(SimError::NoSuchMr(0x7700)));
    assert_eq!(
        dev.evict_odp(pinned.lkey),
        Err(SimError::NotOdp(pinned.lkey))
    );
    assert_eq!(dev.evict_odp(odp.lkey), Ok(0));
}

/// `mmap`s `pages` anonymous read-write pages, none touched.
fn map(pages: usize) -> *mut u8 {
    // SAFETY: a fresh private anonymous mapping; no memory of ours named.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            pages * 4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    p.cast()
}

#[test]
#[cfg_attr(miri, ignore = "mincore(2), which Miri does not run")]
fn prefetch_no_fault_makes_only_the_pages_the_cpu_has_resident() {
    let dev = Device::new();
    let p = map(2);
    // SAFETY: page 0 of the mapping above.
    unsafe { p.write_volatile(1) };
    // SAFETY: the mapping lives until the munmap below, after the dereg.
    let k = unsafe { dev.reg_mr(PD, p, 8192, ODP_WRITE) }.unwrap();
    let all = [(k.lkey, p as u64, 8192)];
    dev.advise_mr(PD, OdpAdvice::PrefetchNoFault, &all).unwrap();
    assert_eq!(dev.odp_stats().prefetched, 1, "page 1 was never touched");
    dev.advise_mr(PD, OdpAdvice::Prefetch, &all).unwrap();
    assert_eq!(dev.odp_stats().prefetched, 2);
    dev.dereg_mr(k.lkey).unwrap();
    // SAFETY: the mapping made above; nothing refers to it any more.
    assert_eq!(unsafe { libc::munmap(p.cast(), 8192) }, 0);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "the sim's fault reads /proc/self/maps, the host's and not Miri's memory"
)]
fn implicit_odp_needs_on_demand_and_reaches_any_mapped_address() {
    let dev = Device::new();
    let (mut a, _b) = pair_with(&dev, 64, 4);
    // SAFETY: refused: nothing registered.
    let r = unsafe { dev.reg_implicit_odp(PD, Access::LOCAL_WRITE | Access::REMOTE_WRITE) };
    assert!(matches!(r, Err(SimError::NeedsOnDemand(_))));
    let all = Access::MR_ALL | Access::ON_DEMAND;
    // SAFETY: every address named through it below is a live `Mem`.
    let k = unsafe { dev.reg_implicit_odp(PD, all) }.unwrap();
    let (mut src, mut dst) = (Mem::new(1), Mem::new(1));
    src.bytes().fill(0x42);
    // A local SGE and a remote target, both through the implicit MR.
    let s = sge(src.addr(0), 4096, k.lkey);
    let c = run(
        &dev,
        &mut a,
        &write_wqe(Payload::Sges(&s), dst.addr(0), k.rkey),
    );
    assert_eq!(c.opcode, CqeOpcode::REQ);
    assert!(dst.bytes().iter().all(|&x| x == 0x42));
    assert_eq!(dev.odp_stats().faults, 2);
    // READ back through it into the source's page: resident now.
    dst.bytes().fill(0x43);
    let d = sge(src.addr(0), 4096, k.lkey);
    run(&dev, &mut a, &read_wqe(&d, dst.addr(0), k.rkey));
    assert!(src.bytes().iter().all(|&x| x == 0x43));
    assert_eq!(dev.odp_stats().faults, 2);
    dev.dereg_mr(k.lkey).unwrap();
}

/// An address below `mmap_min_addr` (64 KiB on Linux): never mapped.
const UNMAPPED: u64 = 0x1000;

#[test]
#[cfg_attr(
    miri,
    ignore = "mprotect(2), which Miri does not run, and /proc/self/maps"
)]
fn implicit_odp_fails_an_unmapped_or_read_only_page_and_touches_nothing() {
    let dev = Device::new();
    // SAFETY: every address named through it is a live `Mem`, the mapping
    // below (read-only: the sim refuses writes there) or `UNMAPPED`
    // (refused): the case under test.
    let k = unsafe { dev.reg_implicit_odp(PD, Access::MR_ALL | Access::ON_DEMAND) }.unwrap();
    let ro = map(1);
    // SAFETY: the mapping above, then read-only.
    unsafe {
        ro.write_bytes(0x5a, 4096);
        assert_eq!(libc::mprotect(ro.cast(), 4096, libc::PROT_READ), 0);
    }
    let read_ro = || {
        // SAFETY: the mapping, readable until the munmap at the end.
        unsafe { std::slice::from_raw_parts(ro, 4096) }.to_vec()
    };
    let (src, mut dst) = (Mem::new(1), Mem::new(1));
    let ks = src.reg(&dev, Access::LOCAL_WRITE);
    let kd = dst.reg(&dev, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let s_ok = sge(src.addr(0), 64, ks.lkey);
    let s_unmapped = sge(UNMAPPED, 64, k.lkey);
    let into_ro = sge(ro as u64, 64, k.lkey);
    // (requester's WQE, its syndrome, whether the responder goes to ERR)
    let cases = [
        // A peer's WRITE to a read-only page, and to an unmapped one.
        (
            write_wqe(Payload::Sges(&s_ok), ro as u64, k.rkey),
            Syndrome::REMOTE_ACCESS_ERR,
            true,
        ),
        (
            write_wqe(Payload::Sges(&s_ok), UNMAPPED, k.rkey),
            Syndrome::REMOTE_ACCESS_ERR,
            true,
        ),
        // A local SGE gathering from an unmapped page.
        (
            write_wqe(Payload::Sges(&s_unmapped), dst.addr(0), kd.rkey),
            Syndrome::LOCAL_PROT_ERR,
            false,
        ),
        // A READ's result into the read-only page.
        (
            read_wqe(&into_ro, dst.addr(0), kd.rkey),
            Syndrome::LOCAL_PROT_ERR,
            false,
        ),
    ];
    for (w, syndrome, responder_err) in cases {
        let (mut a, b) = pair_with(&dev, 64, 4);
        dst.bytes().fill(0x11);
        let c = run(&dev, &mut a, &w);
        assert_eq!((c.opcode, c.syndrome), (CqeOpcode::REQ_ERR, syndrome));
        assert!(read_ro().iter().all(|&x| x == 0x5a), "{syndrome:?}");
        assert!(dst.bytes().iter().all(|&x| x == 0x11), "{syndrome:?}");
        let want = if responder_err {
            QpState::Err
        } else {
            QpState::Rts
        };
        assert_eq!(b.qp.state(), want);
    }
    assert_eq!(dev.odp_stats().faults, 0, "no fault resolved");
    // Reading the read-only page is allowed: a peer's READ of it.
    let (mut a, _b) = pair_with(&dev, 64, 4);
    let d = sge(dst.addr(0), 64, kd.lkey);
    let c = run(&dev, &mut a, &read_wqe(&d, ro as u64, k.rkey));
    assert_eq!(c.opcode, CqeOpcode::REQ);
    assert!(dst.bytes()[..64].iter().all(|&x| x == 0x5a));
    assert_eq!(dev.odp_stats().faults, 1);
    // advise: an unmapped page refused; without faulting, skipped.
    let unm = [(k.lkey, UNMAPPED, 8)];
    assert_eq!(
        dev.advise_mr(PD, OdpAdvice::Prefetch, &unm),
        Err(SimError::Unmapped(UNMAPPED))
    );
    let w = [(k.lkey, ro as u64, 8)];
    assert_eq!(
        dev.advise_mr(PD, OdpAdvice::PrefetchWrite, &w),
        Err(SimError::Unmapped(ro as u64)),
        "read-only: not for writing"
    );
    dev.advise_mr(PD, OdpAdvice::PrefetchNoFault, &unm).unwrap();
    assert_eq!(dev.odp_stats().prefetched, 0);
    dev.dereg_mr(k.lkey).unwrap();
    // SAFETY: the mapping made above; nothing refers to it any more.
    assert_eq!(unsafe { libc::munmap(ro.cast(), 4096) }, 0);
}

#[test]
fn odp_caps_report_odp_implicit_and_every_transport() {
    let caps = Device::new().odp_caps();
    assert!(caps.supported() && caps.implicit());
    for bit in [
        OdpCaps::SEND,
        OdpCaps::RECV,
        OdpCaps::WRITE,
        OdpCaps::READ,
        OdpCaps::ATOMIC,
    ] {
        assert_ne!(caps.rc_odp_caps & bit, 0);
    }
    assert_ne!(caps.rc_odp_caps & OdpCaps::SRQ_RECV, 0);
    assert_eq!(
        caps.uc_odp_caps & (OdpCaps::READ | OdpCaps::ATOMIC),
        0,
        "UC has neither"
    );
    assert_eq!(
        caps.ud_odp_caps,
        OdpCaps::SEND | OdpCaps::RECV | OdpCaps::SRQ_RECV
    );
    assert_eq!(caps.xrc_odp_caps, 0);
}
