//! On-demand paging (ODP): MRs registered with `Access::ON_DEMAND`, not
//! pinned, their pages faulted in by the device on first touch.
//!
//! Each case registers ODP memory first; a device that has no ODP refuses
//! with `Error::Unsupported { feature: Odp }` (its `odp_caps` lack
//! `IBV_ODP_SUPPORT`, or its driver answers `EOPNOTSUPP`: rxe in Linux 6.1)
//! and the case is skipped with that reason, never passed. On the sim the
//! pages are taken back (`testing::PdHooks::sim_evict_odp`) before each
//! access, and its fault counters (`sim_odp_stats`) show the faults taken;
//! elsewhere only the bytes are checked. The SRQ case is the one fault the
//! poll sees: a receive into a page not resident comes back on mlx5 as an
//! error CQE (syndrome 0x22, vendor syndrome 0x93) that is not reported
//! and whose receive the SRQ posts again.

use super::*;
use rdma_direct::testing::PdHooks;
use rdma_direct::{Feature, OdpAdvice, Srq};

const PAGE: usize = 4096;
const ALL: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC);
const ODP: Access = ALL.union(Access::ON_DEMAND);

/// `pd.alloc_mr(len, access)`; `Err(skip)` where the device refuses ODP.
fn odp_mr(pd: &Pd, len: usize, access: Access) -> Result<Result<Mr, CaseResult>, Failure> {
    match pd.alloc_mr(len, access) {
        Ok(m) => Ok(Ok(m)),
        Err(e) => refused(e).map(Err),
    }
}

/// A refusal for want of ODP as the case's skip; anything else a failure.
fn refused(e: Error) -> Result<CaseResult, Failure> {
    match e {
        Error::Unsupported {
            feature: Feature::Odp | Feature::ImplicitOdp,
            ..
        } => Ok(skipped(format!("no ODP: {e}"))),
        e => Err(Failure(format!("ODP registration: {e}"))),
    }
}

/// The sim's fault count (`None` elsewhere).
fn faults(pd: &Pd) -> Option<u64> {
    pd.sim_odp_stats().map(|s| s.faults)
}

/// On the sim, every page of `mr` not resident again.
fn evict(pd: &Pd, mr: &Mr) -> Result<(), Failure> {
    if let Some(r) = pd.sim_evict_odp(mr) {
        r?;
    }
    Ok(())
}

/// Posts `wr` on `s.a` and wants it completed without error.
fn step(what: &str, s: &mut Setup, wr: SendWr<'_>) -> Result<(), Failure> {
    s.a.post_send(&[wr])?;
    let wc = poll_one(&mut s.a)?;
    check!(wc.status.is_ok(), "{what}: {wc:?}");
    Ok(())
}

/// WRITE, READ, SEND and both atomics into and out of an ODP MR (its
/// pages taken back before each on the sim), the bytes checked each time:
/// a peer's WRITE into it and READ out of it, a local WRITE's source and
/// READ's target in it, a SEND from it into a receive in it, a
/// fetch-and-add and a compare-and-swap on a word of it.
pub(super) fn odp_mr_takes_every_operation_in_and_out(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let odp = match odp_mr(&s.pd, 4 * PAGE, ODP)? {
        Ok(m) => m,
        Err(skip) => return skip,
    };
    let plain = s.pd.alloc_mr(PAGE, ALL)?;
    let f0 = faults(&s.pd);
    // A peer's WRITE into page 1.
    plain.write(0, b"written in")?;
    evict(&s.pd, &odp)?;
    let src = [Sge::new(&plain, 0, 10)?];
    step(
        "WRITE into it",
        &mut s,
        SendWr::rdma_write(1, &src, remote(&odp, PAGE as u64)).signaled(),
    )?;
    let mut got = [0u8; 10];
    odp.read(PAGE, &mut got)?;
    check_eq!(&got, b"written in", "the WRITE's bytes");
    // A peer's READ out of page 2.
    odp.write(2 * PAGE + 8, b"read out")?;
    evict(&s.pd, &odp)?;
    let dst = [Sge::new(&plain, 64, 8)?];
    step(
        "READ out of it",
        &mut s,
        SendWr::rdma_read(2, &dst, remote(&odp, 2 * PAGE as u64 + 8)).signaled(),
    )?;
    plain.read(64, &mut got[..8])?;
    check_eq!(&got[..8], b"read out", "the READ's bytes");
    // A local WRITE's source and a local READ's target in page 3.
    odp.write(3 * PAGE, b"source")?;
    evict(&s.pd, &odp)?;
    let from = [Sge::new(&odp, 3 * PAGE, 6)?];
    step(
        "WRITE from it",
        &mut s,
        SendWr::rdma_write(3, &from, remote(&plain, 128)).signaled(),
    )?;
    plain.read(128, &mut got[..6])?;
    check_eq!(&got[..6], b"source", "the WRITE from it");
    plain.write(256, b"target")?;
    evict(&s.pd, &odp)?;
    let into = [Sge::new(&odp, 3 * PAGE + 64, 6)?];
    step(
        "READ into it",
        &mut s,
        SendWr::rdma_read(4, &into, remote(&plain, 256)).signaled(),
    )?;
    odp.read(3 * PAGE + 64, &mut got[..6])?;
    check_eq!(&got[..6], b"target", "the READ into it");
    // A SEND from page 0 into a receive in page 1 (b's own RQ).
    odp.write(0, b"a message")?;
    evict(&s.pd, &odp)?;
    let rb = [Sge::new(&odp, PAGE + 512, 64)?];
    s.b.post_recv(&[RecvWr::new(9, &rb)])?;
    let msg = [Sge::new(&odp, 0, 9)?];
    step("SEND", &mut s, SendWr::send(5, &msg).signaled())?;
    let wc = poll_one(&mut s.b)?;
    check_eq!(
        (wc.status, wc.wr_id, wc.byte_len),
        (WcStatus::SUCCESS, 9, 9),
        "the receive"
    );
    odp.read(PAGE + 512, &mut got[..9])?;
    check_eq!(&got[..9], b"a message", "the received bytes");
    // Atomics on a word of page 2; the old values into page 3.
    odp.write(2 * PAGE + 64, &40u64.to_ne_bytes())?;
    evict(&s.pd, &odp)?;
    let old = [Sge::new(&odp, 3 * PAGE + 128, 8)?];
    let word = remote(&odp, 2 * PAGE as u64 + 64);
    step(
        "FETCH_ADD",
        &mut s,
        SendWr::atomic_fetch_add(6, &old, word, 2).signaled(),
    )?;
    check_eq!(read_u64(&odp, 3 * PAGE + 128)?, 40, "the old value");
    evict(&s.pd, &odp)?;
    step(
        "CMP_SWAP",
        &mut s,
        SendWr::atomic_cmp_swp(7, &old, word, 42, 7).signaled(),
    )?;
    check_eq!(read_u64(&odp, 3 * PAGE + 128)?, 42, "the compared value");
    check_eq!(read_u64(&odp, 2 * PAGE + 64)?, 7, "the swapped word");
    let mut notes = vec!["WRITE, READ, SEND, FETCH_ADD, CMP_SWAP".to_string()];
    if let (Some(a), Some(b)) = (f0, faults(&s.pd)) {
        check!(
            b - a >= 8,
            "the sim counted {} faults, want one per access at least",
            b - a
        );
        notes.push(format!("{} page faults", b - a));
    }
    passed(notes)
}

/// `Pd::advise` (prefetch for writing) of an ODP MR, then a peer's WRITE
/// across it: the bytes land, and on the sim no fault is taken (every
/// page prefetched).
pub(super) fn odp_advise_then_access(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let odp = match odp_mr(&s.pd, 2 * PAGE, ODP)? {
        Ok(m) => m,
        Err(skip) => return skip,
    };
    let plain = s.pd.alloc_mr(PAGE, ALL)?;
    plain.write(0, &pattern(PAGE, 7))?;
    evict(&s.pd, &odp)?;
    let p0 = s.pd.sim_odp_stats();
    s.pd.advise(
        OdpAdvice::PrefetchWrite,
        &[Sge::new(&odp, 0, 2 * PAGE as u32)?],
    )?;
    let p1 = s.pd.sim_odp_stats();
    let src = [Sge::new(&plain, 0, PAGE as u32)?];
    s.a.post_send(&[SendWr::rdma_write(1, &src, remote(&odp, PAGE as u64 / 2)).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check!(wc.status.is_ok(), "WRITE after the prefetch: {wc:?}");
    let mut got = vec![0u8; PAGE];
    odp.read(PAGE / 2, &mut got)?;
    check!(got == pattern(PAGE, 7), "the WRITE's bytes");
    let mut notes = Vec::new();
    if let (Some(a), Some(b), Some(c)) = (p0, p1, s.pd.sim_odp_stats()) {
        check_eq!(b.prefetched - a.prefetched, 2, "pages prefetched");
        check_eq!(c.faults, b.faults, "faults after the prefetch");
        notes.push("2 pages prefetched, no fault".into());
    }
    passed(notes)
}

/// Implicit ODP (the whole address space, where the device reports
/// `IBV_ODP_SUPPORT_IMPLICIT`): through it, a WRITE's source and a READ's
/// target are the bytes of an ordinary MR named by address, and a peer
/// writes there by the implicit MR's rkey.
pub(super) fn odp_implicit_mr_reaches_memory_by_address(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    // SAFETY: its rkey goes only to `a`, whose accesses land in `plain`,
    // an MR's memory, which the case reads and writes only through `Mr`.
    let imr = match unsafe { s.pd.reg_implicit_odp(ALL) } {
        Ok(m) => m,
        Err(e) => return refused(e)?,
    };
    check!(
        imr.is_implicit_odp() && !imr.is_cpu_mapped(),
        "an implicit MR: {imr:?}"
    );
    let plain = s.pd.alloc_mr(PAGE, ALL)?;
    let other = s.pd.alloc_mr(PAGE, ALL)?;
    plain.write(0, b"by address")?;
    // SAFETY: `plain`'s bytes, mapped while the MR lives (past the WR),
    // touched by the program only through `Mr`; no inline, no inline receive.
    let from = [unsafe { Sge::of_implicit_odp(&imr, plain.addr(), 10) }?];
    s.a.post_send(&[SendWr::rdma_write(1, &from, remote(&other, 0)).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check!(wc.status.is_ok(), "WRITE from it: {wc:?}");
    let mut got = [0u8; 10];
    other.read(0, &mut got)?;
    check_eq!(&got, b"by address", "the WRITE's source");
    other.write(64, b"read back!")?;
    // SAFETY: as above.
    let into = [unsafe { Sge::of_implicit_odp(&imr, plain.addr() + 512, 10) }?];
    s.a.post_send(&[SendWr::rdma_read(2, &into, remote(&other, 64)).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check!(wc.status.is_ok(), "READ into it: {wc:?}");
    plain.read(512, &mut got)?;
    check_eq!(&got, b"read back!", "the READ's target");
    let src = [Sge::new(&other, 0, 10)?];
    let to = RemoteAddr {
        addr: plain.addr() + 1024,
        rkey: imr.rkey(),
    };
    s.a.post_send(&[SendWr::rdma_write(3, &src, to).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check!(wc.status.is_ok(), "a peer's WRITE by its rkey: {wc:?}");
    plain.read(1024, &mut got)?;
    check_eq!(&got, b"by address", "the peer's WRITE");
    passed(vec![])
}

/// An SRQ whose receive buffers are ODP memory not resident (evicted on
/// the sim before each round; freshly registered elsewhere): 3 rounds of
/// 64 SENDs over 4 QPs into 16 receives, each receive posted again as it
/// completes. Every message is received exactly once, no completion in
/// error is reported, and all 16 buffers are the SRQ's at the end (posted,
/// or posted again by `repost_faulted`). On the sim the page-fault CQEs
/// are counted.
pub(super) fn odp_srq_receives_every_message_once_through_faults(dev: &str) -> CaseResult {
    const MAX_WR: u32 = 16;
    const PER_ROUND: u64 = 64;
    const QPS: usize = 4;
    let ctx = Context::open(dev).map_err(|e| Failure(format!("open {dev}: {e}")))?;
    let pd = ctx.alloc_pd()?;
    let bufs = match odp_mr(
        &pd,
        MAX_WR as usize * PAGE,
        Access::LOCAL_WRITE | Access::ON_DEMAND,
    )? {
        Ok(m) => m,
        Err(skip) => return skip,
    };
    let mut srq: Srq = pd.create_srq(MAX_WR, 1)?;
    let cfg = QpConfig {
        max_send_wr: 64,
        rnr_retry: 7,
        min_rnr_timer: 1,
        ..QpConfig::default()
    };
    let (mut rx, mut tx) = (Vec::new(), Vec::new());
    for _ in 0..QPS {
        let mut r = pd.create_qp_on_srq(&cfg, &srq)?;
        let mut t = pd.create_qp(&cfg)?;
        Qp::connect_loopback(&mut r, &mut t)?;
        rx.push(r);
        tx.push(t);
    }
    let sges = (0..MAX_WR as usize)
        .map(|k| Ok([Sge::new(&bufs, k * PAGE, PAGE as u32)?]))
        .collect::<Result<Vec<_>, Failure>>()?;
    let wrs: Vec<RecvWr<'_>> = sges
        .iter()
        .enumerate()
        .map(|(k, s)| RecvWr::new(k as u64, s))
        .collect();
    srq.post_recv(&wrs)?;
    let src = pd.alloc_mr(PER_ROUND as usize * 8, Access::LOCAL_WRITE)?;
    let s0 = pd.sim_odp_stats();
    let mut held = vec![true; MAX_WR as usize];
    let mut wc = [Completion::default(); 16];
    for round in 0..3u64 {
        evict(&pd, &bufs)?;
        for i in 0..PER_ROUND {
            src.write(i as usize * 8, &(round * PER_ROUND + i).to_le_bytes())?;
            let s = [Sge::new(&src, i as usize * 8, 8)?];
            tx[i as usize % QPS].post_send(&[SendWr::send(i, &s).signaled()])?;
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut sent = 0;
        let deadline = Instant::now() + COMPLETION_TIMEOUT;
        while seen.len() < PER_ROUND as usize || sent < PER_ROUND {
            check!(
                Instant::now() < deadline,
                "round {round}: {} of {PER_ROUND} received, {sent} sent, {} receives faulted",
                seen.len(),
                srq.faulted()
            );
            let mut any = false;
            for r in rx.iter_mut() {
                let n = r.poll(&mut wc)?;
                any |= n > 0;
                for c in &wc[..n] {
                    check_eq!(
                        c.status,
                        WcStatus::SUCCESS,
                        "round {round}: a receive: {c:?}"
                    );
                    let k = c.wr_id as usize;
                    check!(held[k], "buffer {k} completed twice without a repost");
                    held[k] = false;
                    let msg = read_u64(&bufs, k * PAGE)?;
                    check!(seen.insert(msg), "message {msg} received twice");
                    srq.post_recv(&wrs[k..k + 1])?;
                    held[k] = true;
                }
            }
            for t in tx.iter_mut() {
                let n = t.poll(&mut wc)?;
                check!(
                    wc[..n].iter().all(|c| c.status.is_ok()),
                    "a SEND: {:?}",
                    &wc[..n]
                );
                sent += n as u64;
            }
            if !any {
                srq.repost_faulted();
                std::thread::yield_now();
            }
        }
        check_eq!(
            seen.iter().copied().collect::<Vec<_>>(),
            (round * PER_ROUND..(round + 1) * PER_ROUND).collect::<Vec<_>>(),
            "round {round}: the messages"
        );
    }
    srq.repost_faulted();
    check_eq!(
        srq.outstanding(),
        MAX_WR,
        "buffers the SRQ holds at the end"
    );
    check_eq!(srq.faulted(), 0, "receives still waiting for a repost");
    check!(held.iter().all(|&h| h), "every buffer posted");
    let mut notes = vec![format!("{} messages, {MAX_WR} buffers kept", 3 * PER_ROUND)];
    if let (Some(a), Some(b)) = (s0, pd.sim_odp_stats()) {
        check!(
            b.srq_fault_cqes > a.srq_fault_cqes,
            "no page-fault CQE on the sim"
        );
        notes.push(format!(
            "{} page-fault CQEs not reported",
            b.srq_fault_cqes - a.srq_fault_cqes
        ));
    }
    drop(ctx);
    passed(notes)
}
