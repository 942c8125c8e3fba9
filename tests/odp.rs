//! On-demand paging (ODP) through the public API on the sim, whose model
//! (`mlx5_dv::sim`, `odp.rs`) starts an ODP MR with no page resident and
//! counts each page it faults in (`testing::PdHooks::sim_odp_stats`):
//! faults on first touch and again after an eviction, none after a
//! prefetch (`Pd::advise`), implicit ODP over plain memory, the caps.
//! The SRQ's page faults: `odp_srq.rs`; hostile input: `odp_attacks.rs`.
//! And on a verbs device named by `RDMA_DIRECT_VERBS_DEVICE` (rxe0 in the
//! guest, which has no ODP): the typed refusals, before any verb.

use rdma_direct::testing::PdHooks;
use rdma_direct::*;

#[path = "support/sim.rs"]
mod sim;
use sim::*;

const RW: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC);
const ODP: Access = RW.union(Access::ON_DEMAND);
const PAGE: usize = 4096;

fn stats(pd: &Pd) -> testing::OdpStats {
    pd.sim_odp_stats().expect("the sim")
}

fn pair(pd: &Pd) -> (Qp, Qp) {
    pd.create_connected_pair(&QpConfig {
        max_send_wr: 16,
        max_recv_wr: 16,
        ..QpConfig::default()
    })
    .unwrap()
}

fn done(q: &mut Qp) -> Completion {
    let c = poll_n(q, 1)[0];
    assert!(c.status.is_ok(), "{c:?}");
    c
}

fn write(a: &mut Qp, from: &Mr, off: usize, len: u32, to: RemoteAddr) {
    let s = [Sge::new(from, off, len).unwrap()];
    a.post_send(&[SendWr::rdma_write(1, &s, to).signaled()])
        .unwrap();
    done(a);
}

/// The sim reports ODP and implicit ODP, through `Context::odp_caps` and
/// the device list alike.
#[test]
fn sim_reports_its_odp_caps() {
    let ctx = Context::open("sim").unwrap();
    let caps = ctx.odp_caps();
    assert!(caps.supported && caps.implicit, "{caps:?}");
    assert!(caps
        .rc
        .contains(OdpOps::SEND | OdpOps::RECV | OdpOps::WRITE | OdpOps::READ | OdpOps::ATOMIC));
    assert!(caps.rc.contains(OdpOps::SRQ_RECV));
    let listed = list_devices().unwrap();
    let sim = listed.iter().find(|d| d.name == SIM_DEVICE).unwrap();
    assert_eq!(sim.odp, caps);
}

/// Every registration call takes ON_DEMAND and keeps it in the MR's
/// access; nothing is resident, so the first WRITE into each page faults
/// (one per page), a second into the same pages does not, and after an
/// eviction the next one faults again. The bytes land each time.
#[test]
fn odp_mr_faults_on_first_touch_and_after_eviction() {
    let e = env();
    let (mut a, _b) = pair(&e.pd);
    let regs = [
        e.pd.alloc_mr(3 * PAGE, ODP).unwrap(),
        e.pd.reg_mr(vec![0u8; 3 * PAGE], ODP).unwrap(),
        e.pd.alloc_mapped_mr(3 * PAGE, ODP).unwrap().0,
    ];
    e.src.write(0, &[0xab; 2 * PAGE]).unwrap();
    for m in &regs {
        assert!(m.access().contains(Access::ON_DEMAND));
        let s0 = stats(&e.pd);
        // Two pages: [PAGE - 8, PAGE + 8) of a page-aligned buffer.
        let base = m.addr() as usize % PAGE;
        let off = PAGE - base - 8;
        write(&mut a, &e.src, 0, 16, remote(m, off as u64));
        let s1 = stats(&e.pd);
        assert_eq!(s1.faults - s0.faults, 2, "first touch of two pages");
        let mut got = [0u8; 16];
        m.read(off, &mut got).unwrap();
        assert_eq!(got, [0xab; 16]);
        write(&mut a, &e.src, 0, 16, remote(m, off as u64));
        assert_eq!(stats(&e.pd).faults, s1.faults, "resident now");
        let out = e.pd.sim_evict_odp(m).unwrap().unwrap();
        assert_eq!(out, 2, "the two pages touched were resident");
        write(&mut a, &e.src, 0, 16, remote(m, off as u64));
        assert_eq!(stats(&e.pd).faults - s1.faults, 2, "after eviction");
    }
    // A LocalMr too: a SEND's source and a receive's target, faulting
    // transparently (a QP's own RQ).
    let (mut a, mut b) = pair(&e.pd);
    let mut from = e.pd.alloc_local_mr(PAGE, Access::ON_DEMAND).unwrap();
    from[..5].copy_from_slice(b"local");
    let into =
        e.pd.alloc_local_mr(PAGE, Access::LOCAL_WRITE | Access::ON_DEMAND)
            .unwrap();
    let f0 = stats(&e.pd).faults;
    b.post_recv_owned(7, into, 0, PAGE as u32).unwrap();
    a.post_send_owned(&SendWr::send(8, &[]).signaled(), from, 0, 5)
        .unwrap();
    done(&mut a);
    let c = done(&mut b);
    assert_eq!((c.wr_id, c.byte_len), (7, 5));
    let (id, into) = b.take_recv_buf().unwrap();
    assert_eq!(id, 7);
    assert_eq!(&into[..5], b"local");
    assert_eq!(stats(&e.pd).faults - f0, 2, "one page each side");
}

/// A prefetch makes the pages resident: the WRITE after it takes no
/// fault; `PrefetchNoFault` faults nothing in; an empty list does nothing.
#[test]
fn advise_prefetches_so_the_access_takes_no_fault() {
    let e = env();
    let (mut a, _b) = pair(&e.pd);
    let m = e.pd.alloc_mr(4 * PAGE, ODP).unwrap();
    let s0 = stats(&e.pd);
    e.pd.advise(OdpAdvice::Prefetch, &[]).unwrap();
    assert_eq!(stats(&e.pd), s0, "an empty list");
    e.pd.advise(
        OdpAdvice::PrefetchWrite,
        &[
            Sge::new(&m, 0, PAGE as u32).unwrap(),
            Sge::new(&m, 2 * PAGE, 2 * PAGE as u32).unwrap(),
        ],
    )
    .unwrap();
    let s1 = stats(&e.pd);
    assert_eq!(s1.prefetched - s0.prefetched, 3, "pages 0, 2 and 3");
    assert_eq!(s1.faults, s0.faults);
    e.src.write(0, b"prefetched").unwrap();
    write(&mut a, &e.src, 0, 10, remote(&m, 2 * PAGE as u64 + 100));
    assert_eq!(
        stats(&e.pd).faults,
        s1.faults,
        "no fault after the prefetch"
    );
    let mut got = [0u8; 10];
    m.read(2 * PAGE + 100, &mut got).unwrap();
    assert_eq!(&got, b"prefetched");
    // Page 1 was not prefetched: it faults.
    write(&mut a, &e.src, 0, 10, remote(&m, PAGE as u64));
    assert_eq!(stats(&e.pd).faults - s1.faults, 1);
    // Reading too: a READ out of prefetched pages.
    e.pd.sim_evict_odp(&m).unwrap().unwrap();
    let s2 = stats(&e.pd);
    e.pd.advise(
        OdpAdvice::Prefetch,
        &[Sge::new(&m, 0, 4 * PAGE as u32).unwrap()],
    )
    .unwrap();
    assert_eq!(stats(&e.pd).prefetched - s2.prefetched, 4);
    let into = [Sge::new(&e.src, 64, 10).unwrap()];
    a.post_send(&[SendWr::rdma_read(2, &into, remote(&m, 2 * PAGE as u64 + 100)).signaled()])
        .unwrap();
    done(&mut a);
    assert_eq!(stats(&e.pd).faults, s2.faults);
    let mut got = [0u8; 10];
    e.src.read(64, &mut got).unwrap();
    assert_eq!(&got, b"prefetched");
}

/// Implicit ODP: the whole address space as one MR with no CPU mapping of
/// its own. WRs name plain heap memory through it (`Sge::of_implicit_odp`)
/// as a WRITE's source and a READ's target, and a peer writes it by its
/// rkey; each first touch faults.
#[test]
fn implicit_odp_reaches_plain_memory() {
    let e = env();
    let (mut a, _b) = pair(&e.pd);
    // SAFETY: the rkey goes to no peer but `a`, whose accesses below land
    // only in `heap`, which no reference covers while they run.
    let imr = unsafe { e.pd.reg_implicit_odp(RW) }.unwrap();
    assert!(imr.is_implicit_odp() && !imr.is_cpu_mapped());
    assert_eq!((imr.addr(), imr.len()), (0, usize::MAX));
    assert!(imr.access().contains(Access::ON_DEMAND));
    assert!(matches!(
        imr.write(0, b"x"),
        Err(Error::NoCpuMapping { .. })
    ));
    assert!(matches!(
        Sge::new(&imr, 0x1000, 8),
        Err(Error::NoCpuMapping { .. })
    ));
    assert!(matches!(imr.try_into_memory(), Ok(None)));
    // SAFETY: as above.
    let imr = unsafe { e.pd.reg_implicit_odp(RW) }.unwrap();
    let heap: *mut u8 = Box::into_raw(vec![0u8; 2 * PAGE].into_boxed_slice()).cast();
    let at = heap as u64;
    // SAFETY: the heap bytes were initialized; no reference is held.
    unsafe { heap.copy_from(b"from the heap".as_ptr(), 13) };
    let f0 = stats(&e.pd).faults;
    // SAFETY: `heap` is mapped, read and written only between posts here,
    // and lives until the end of the test.
    let from = [unsafe { Sge::of_implicit_odp(&imr, at, 13) }.unwrap()];
    a.post_send(&[SendWr::rdma_write(1, &from, remote(&e.dst, 0)).signaled()])
        .unwrap();
    done(&mut a);
    let mut got = [0u8; 13];
    e.dst.read(0, &mut got).unwrap();
    assert_eq!(&got, b"from the heap");
    assert!(stats(&e.pd).faults > f0, "the heap page faulted in");
    // A READ into the heap through the implicit MR.
    e.dst.write(64, b"read into it").unwrap();
    // SAFETY: as above (PAGE + 12 < 2 * PAGE).
    let into = [unsafe { Sge::of_implicit_odp(&imr, at + PAGE as u64, 12) }.unwrap()];
    a.post_send(&[SendWr::rdma_read(2, &into, remote(&e.dst, 64)).signaled()])
        .unwrap();
    done(&mut a);
    let mut got = [0u8; 12];
    // SAFETY: the READ completed; nothing writes the heap now.
    unsafe { heap.add(PAGE).copy_to(got.as_mut_ptr(), 12) };
    assert_eq!(&got, b"read into it");
    // A peer's WRITE by the implicit MR's rkey, at the heap's address.
    e.src.write(0, b"peer").unwrap();
    write(
        &mut a,
        &e.src,
        0,
        4,
        RemoteAddr {
            addr: at + 100,
            rkey: imr.rkey(),
        },
    );
    let mut got = [0u8; 4];
    // SAFETY: as above.
    unsafe { heap.add(100).copy_to(got.as_mut_ptr(), 4) };
    assert_eq!(&got, b"peer");
    // Prefetch through it.
    let p0 = stats(&e.pd).prefetched;
    // SAFETY: mapped heap memory.
    let whole = [unsafe { Sge::of_implicit_odp(&imr, at, 2 * PAGE as u32) }.unwrap()];
    e.pd.advise(OdpAdvice::PrefetchWrite, &whole).unwrap();
    assert!(stats(&e.pd).prefetched >= p0);
    drop((a, imr));
    // SAFETY: made by `Box::into_raw` above; the QPs and the MR are gone.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(heap, 2 * PAGE)) });
}

/// The registration counts and live MRs of a PD, to show a refusal
/// registered nothing.
fn regs(pd: &Pd) -> (u64, u64) {
    (pd.registrations(), pd.live_mrs())
}

/// On a verbs device: where its caps lack ODP (rxe in Linux 6.1), every
/// ODP call is refused with `Unsupported { Odp }` (implicit ODP with
/// `ImplicitOdp` where only that is missing) and nothing is registered;
/// where they have it, an ODP MR takes a WRITE. Skipped without a device.
#[test]
fn verbs_device_registers_odp_only_where_its_caps_say() {
    let Ok(dev) = std::env::var("RDMA_DIRECT_VERBS_DEVICE") else {
        eprintln!(
            "odp: verbs_device_registers_odp_only_where_its_caps_say: SKIPPED: \
             RDMA_DIRECT_VERBS_DEVICE names no verbs device (scripts/test step 3 sets it in the rxe guest)"
        );
        return;
    };
    let ctx = Context::open_with(&dev, Backend::Verbs).unwrap();
    let caps = ctx.odp_caps();
    let pd = ctx.alloc_pd().unwrap();
    let before = regs(&pd);
    let plain = pd.alloc_mr(PAGE, RW).unwrap();
    let is_odp = |r: &Result<Mr>| {
        matches!(
            r,
            Err(Error::Unsupported {
                feature: Feature::Odp,
                ..
            })
        )
    };
    if !caps.supported {
        eprintln!("odp: {dev} has no ODP ({caps:?}): every call refused");
        let after_plain = regs(&pd);
        assert!(is_odp(&pd.alloc_mr(PAGE, ODP)));
        assert!(is_odp(&pd.reg_mr(vec![0u8; PAGE], ODP)));
        assert!(matches!(
            pd.alloc_local_mr(PAGE, Access::ON_DEMAND),
            Err(Error::Unsupported {
                feature: Feature::Odp,
                ..
            })
        ));
        // SAFETY: refused before any verb (and the rkey goes nowhere).
        assert!(is_odp(&unsafe { pd.reg_implicit_odp(RW) }));
        assert!(matches!(
            pd.advise(OdpAdvice::Prefetch, &[Sge::new(&plain, 0, 8).unwrap()]),
            Err(Error::Unsupported {
                feature: Feature::Odp,
                ..
            })
        ));
        assert_eq!(regs(&pd), after_plain, "nothing registered");
        return;
    }
    assert_ne!(regs(&pd), before);
    let m = pd.alloc_mr(PAGE, ODP).unwrap();
    pd.advise(
        OdpAdvice::PrefetchWrite,
        &[Sge::new(&m, 0, PAGE as u32).unwrap()],
    )
    .unwrap();
    // SAFETY: the rkey goes nowhere; no WR names it.
    let implicit = unsafe { pd.reg_implicit_odp(RW) };
    if caps.implicit {
        assert!(implicit.unwrap().is_implicit_odp());
    } else {
        assert!(matches!(
            implicit,
            Err(Error::Unsupported {
                feature: Feature::ImplicitOdp,
                ..
            })
        ));
    }
}
