//! Hostile input to the ODP calls on the sim: each refused with a typed
//! error, and nothing done (no registration, no page prefetched, no byte
//! written): advice over SGEs of another PD, of plain bytes, of an MR that
//! is not ODP (alone or behind a good one), for writing on a read-only
//! MR, at unmapped addresses through an implicit MR; ON_DEMAND with
//! DMA-BUF; implicit ODP with bad access; SGEs through an MR that is not
//! implicit, or wrapping the address space; a peer's WRITE through the
//! implicit rkey at an unmapped address; the test hooks' own refusals.

use rdma_direct::testing::PdHooks;
use rdma_direct::*;

#[path = "support/sim.rs"]
mod sim;
use sim::*;

const PAGE: usize = 4096;
const RW: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ);
const ODP: Access = RW.union(Access::ON_DEMAND);

fn stats(pd: &Pd) -> testing::OdpStats {
    pd.sim_odp_stats().expect("the sim")
}

fn regs(pd: &Pd) -> (u64, u64) {
    (pd.registrations(), pd.live_mrs())
}

/// An address no mapping of this process covers: the page at 4 KiB
/// (below `vm.mmap_min_addr`, so nothing is ever mapped there).
const UNMAPPED: u64 = 0x1000;

/// Bad advice lists: another PD's SGE, plain bytes, a pinned MR's SGE
/// (alone and behind a good one), prefetch for writing on an ODP MR
/// without LOCAL_WRITE. Each refused, and no page prefetched, not even the
/// good SGE's before the bad one.
#[test]
fn bad_advice_is_refused_and_prefetches_nothing() {
    let e = env();
    let odp = e.pd.alloc_mr(2 * PAGE, ODP).unwrap();
    let pd2 = e.ctx.alloc_pd().unwrap();
    let theirs = pd2.alloc_mr(PAGE, ODP).unwrap();
    let ro =
        e.pd.alloc_mr(PAGE, Access::REMOTE_READ | Access::ON_DEMAND)
            .unwrap();
    let good = Sge::new(&odp, 0, 2 * PAGE as u32).unwrap();
    let s0 = stats(&e.pd);
    let refused = |advice, list: &[Sge<'_>]| e.pd.advise(advice, list).unwrap_err();
    assert!(matches!(
        refused(
            OdpAdvice::Prefetch,
            &[good, Sge::new(&theirs, 0, 8).unwrap()]
        ),
        Error::ForeignPd {
            object: PdObject::Sge
        }
    ));
    assert!(matches!(
        refused(OdpAdvice::Prefetch, &[good, Sge::bytes(b"bytes").unwrap()]),
        Error::BytesSge
    ));
    for list in [
        vec![Sge::new(&e.src, 0, 8).unwrap()],
        vec![good, Sge::new(&e.dst, 0, 8).unwrap()],
    ] {
        let err = refused(OdpAdvice::PrefetchWrite, &list);
        assert!(
            matches!(err, Error::Sim(ref s) if s.to_string().contains("not an ODP")),
            "{err}"
        );
    }
    let err = refused(OdpAdvice::PrefetchWrite, &[Sge::new(&ro, 0, 8).unwrap()]);
    assert!(matches!(err, Error::Sim(_)), "{err}");
    assert_eq!(stats(&e.pd), s0, "nothing prefetched");
    // The read-only ODP MR may be prefetched for reading.
    e.pd.advise(OdpAdvice::Prefetch, &[Sge::new(&ro, 0, 8).unwrap()])
        .unwrap();
    assert_eq!(stats(&e.pd).prefetched - s0.prefetched, 1);
}

/// ON_DEMAND asked of a DMA-BUF registration is refused by the crate
/// (`RegRefusal::OnDemandDmabuf`) before the device is asked.
#[test]
fn on_demand_dma_buf_is_refused_first() {
    let e = env();
    let fd = Pd::dmabuf_stand_in(2 * PAGE).unwrap();
    let before = regs(&e.pd);
    assert!(matches!(
        e.pd.register_dmabuf(&fd, 0, PAGE, 0x10_0000, ODP),
        Err(Error::Register(RegRefusal::OnDemandDmabuf))
    ));
    assert_eq!(regs(&e.pd), before);
    // Without it, the same registration goes through.
    assert!(e.pd.register_dmabuf(&fd, 0, PAGE, 0x10_0000, RW).is_ok());
}

/// Implicit ODP with access the registration checks refuse (remote write
/// without local write, unknown bits): refused, nothing registered.
#[test]
fn implicit_odp_with_bad_access_registers_nothing() {
    let e = env();
    let before = regs(&e.pd);
    // SAFETY: refused before the device is asked; no rkey is handed out.
    let r = unsafe { e.pd.reg_implicit_odp(Access::REMOTE_WRITE) };
    assert!(matches!(
        r,
        Err(Error::Register(RegRefusal::RemoteNeedsLocalWrite))
    ));
    // SAFETY: as above.
    let r = unsafe { e.pd.reg_implicit_odp(Access::from_bits_retain(1 << 20)) };
    assert!(matches!(
        r,
        Err(Error::Register(RegRefusal::UnknownAccess(_)))
    ));
    assert_eq!(regs(&e.pd), before);
}

/// `Sge::of_implicit_odp` names memory through an implicit ODP MR only:
/// refused for an ordinary MR, an ODP one that is not implicit and a
/// DMA-BUF one (`Error::Invalid`), and for a range that wraps the address
/// space (`Error::OutOfBounds`).
#[test]
fn implicit_sges_need_an_implicit_mr_and_a_range_that_fits() {
    let e = env();
    let odp = e.pd.alloc_mr(PAGE, ODP).unwrap();
    let fd = Pd::dmabuf_stand_in(PAGE).unwrap();
    let dmabuf = e.pd.register_dmabuf(&fd, 0, PAGE, 0x20_0000, RW).unwrap();
    for mr in [&e.src, &odp, &dmabuf] {
        // SAFETY: refused before an SGE exists.
        let r = unsafe { Sge::of_implicit_odp(mr, mr.addr(), 8) };
        assert!(matches!(r, Err(Error::Invalid(_))), "{mr:?}");
    }
    // SAFETY: no WR is posted with what it refuses.
    let imr = unsafe { e.pd.reg_implicit_odp(RW) }.unwrap();
    // SAFETY: as above.
    let r = unsafe { Sge::of_implicit_odp(&imr, u64::MAX - 3, 8) };
    assert!(matches!(r, Err(Error::OutOfBounds { .. })), "{r:?}");
}

/// Through an implicit MR: prefetch of an unmapped page is refused (the
/// sim's EFAULT), `PrefetchNoFault` skips it; a peer's WRITE by the
/// implicit rkey to an unmapped address fails with REM_ACCESS_ERR and
/// writes nothing anywhere.
#[test]
fn implicit_odp_at_unmapped_addresses_fails_and_touches_nothing() {
    let e = env();
    // SAFETY: the rkey goes only to `a`, whose one access below names an
    // address no mapping covers.
    let imr = unsafe { e.pd.reg_implicit_odp(RW) }.unwrap();
    let s0 = stats(&e.pd);
    // SAFETY: handed only to `advise`, which posts no WR.
    let hole = [unsafe { Sge::of_implicit_odp(&imr, UNMAPPED, 64) }.unwrap()];
    let err = e.pd.advise(OdpAdvice::Prefetch, &hole).unwrap_err();
    assert!(matches!(err, Error::Sim(_)), "{err}");
    assert_eq!(stats(&e.pd), s0);
    e.pd.advise(OdpAdvice::PrefetchNoFault, &hole).unwrap();
    assert_eq!(stats(&e.pd).prefetched, s0.prefetched);
    let (mut a, _b) = e.pd.create_connected_pair(&QpConfig::default()).unwrap();
    e.src.write(0, &[0xee; 8]).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let to = RemoteAddr {
        addr: UNMAPPED + 8,
        rkey: imr.rkey(),
    };
    a.post_send(&[SendWr::rdma_write(1, &s, to).signaled()])
        .unwrap();
    let c = poll_n(&mut a, 1)[0];
    assert_eq!(c.status, WcStatus::REM_ACCESS_ERR, "{c:?}");
}

/// The test hook refuses to evict an MR that is not ODP (the sim's
/// `NotOdp`) or one of another PD (`ForeignPd`), changing nothing.
#[test]
fn evict_hook_refuses_pinned_and_foreign_mrs() {
    let e = env();
    let pd2 = e.ctx.alloc_pd().unwrap();
    let theirs = pd2.alloc_mr(PAGE, ODP).unwrap();
    assert!(matches!(
        e.pd.sim_evict_odp(&e.src).unwrap(),
        Err(Error::Sim(_))
    ));
    assert!(matches!(
        e.pd.sim_evict_odp(&theirs).unwrap(),
        Err(Error::ForeignPd { .. })
    ));
}
