//! An SRQ whose receive buffers are ODP memory, on the sim: a SEND into a
//! WQE whose page is not resident comes back as ConnectX's page-fault CQE
//! (RESP_ERR, syndrome 0x22, vendor syndrome 0x93), which the direct poll
//! does not report and whose WQE the SRQ posts again (`Srq::post_recv`,
//! `Srq::repost_faulted`); the message lands in a later receive. Every
//! message is received exactly once, no completion in error is reported,
//! and every buffer comes back, round after round with the pages evicted
//! between rounds: on QPs with their own CQs and on a shared CQ. Faulted
//! receives wait unreported for the owner, keep their room and their MR,
//! and survive a reset of their QP that drops their CQEs.

use rdma_direct::testing::PdHooks;
use rdma_direct::*;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const PAGE: usize = 4096;
/// Receives in the SRQ: one page-sized buffer each, wr_id = its page.
const MAX_WR: u32 = 16;
/// QPs on the SRQ, and the clients that send to them.
const QPS: usize = 4;
const ROUNDS: u64 = 5;
/// SENDs per round (more than the SRQ's receives: buffers are reused).
const PER_ROUND: u64 = 48;

fn cfg() -> QpConfig {
    QpConfig {
        max_send_wr: 64,
        rnr_retry: 7,
        min_rnr_timer: 1,
        cq_depth: Some(256),
        ..QpConfig::default()
    }
}

/// Where the servers' completions come from.
enum Servers {
    Own(Vec<Qp>),
    Shared(Box<SharedCq>),
}

impl Servers {
    fn poll(&mut self, out: &mut [Completion]) -> usize {
        match self {
            Servers::Own(qs) => {
                let mut n = 0;
                for q in qs {
                    n += q.poll(&mut out[n..]).unwrap();
                }
                n
            }
            Servers::Shared(cq) => cq.poll(out).unwrap(),
        }
    }
}

/// Runs the rounds: `ROUNDS` times, the buffer's pages evicted, then
/// `PER_ROUND` SENDs (each carrying its number) spread over the clients;
/// each receive's buffer is read and posted again as it completes.
fn run(shared: bool) {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut srq = pd.create_srq(MAX_WR, 1).unwrap();
    let bufs = pd
        .alloc_mr(
            MAX_WR as usize * PAGE,
            Access::LOCAL_WRITE | Access::ON_DEMAND,
        )
        .unwrap();
    let src = pd
        .alloc_mr(PER_ROUND as usize * 8, Access::LOCAL_WRITE)
        .unwrap();
    let sges: Vec<[Sge<'_>; 1]> = (0..MAX_WR as usize)
        .map(|k| [Sge::new(&bufs, k * PAGE, PAGE as u32).unwrap()])
        .collect();
    let wrs: Vec<RecvWr<'_>> = sges
        .iter()
        .enumerate()
        .map(|(k, s)| RecvWr::new(k as u64, s))
        .collect();
    srq.post_recv(&wrs).unwrap();
    let mut clients = Vec::new();
    let mut servers = if shared {
        let mut cq = pd.create_shared_cq(MAX_WR + 64).unwrap();
        let on_cq = QpConfig {
            cq_depth: None,
            ..cfg()
        };
        for _ in 0..QPS {
            let s = cq.create_qp_on_srq(&on_cq, &srq).unwrap();
            let mut c = pd.create_qp(&cfg()).unwrap();
            Qp::connect_loopback(cq.qp_mut(s), &mut c).unwrap();
            clients.push(c);
        }
        Servers::Shared(Box::new(cq))
    } else {
        let mut qs = Vec::new();
        for _ in 0..QPS {
            let mut s = pd.create_qp_on_srq(&cfg(), &srq).unwrap();
            let mut c = pd.create_qp(&cfg()).unwrap();
            Qp::connect_loopback(&mut s, &mut c).unwrap();
            qs.push(s);
            clients.push(c);
        }
        Servers::Own(qs)
    };
    // Which buffers the SRQ holds (posted, not yet completed).
    let mut held = vec![true; MAX_WR as usize];
    let mut fault_cqes = 0;
    for round in 0..ROUNDS {
        let evicted = pd.sim_evict_odp(&bufs).unwrap().unwrap();
        assert!(
            round == 0 || evicted > 0,
            "round {round}: pages were resident"
        );
        let s0 = pd.sim_odp_stats().unwrap();
        for i in 0..PER_ROUND {
            let n = round * PER_ROUND + i;
            src.write(i as usize * 8, &n.to_le_bytes()).unwrap();
        }
        for i in 0..PER_ROUND {
            let s = [Sge::new(&src, i as usize * 8, 8).unwrap()];
            clients[i as usize % QPS]
                .post_send(&[SendWr::send(i, &s).signaled()])
                .unwrap();
        }
        let mut seen: BTreeMap<u64, u64> = BTreeMap::new();
        let mut sent = 0;
        let mut wc = [Completion::default(); 32];
        let t = Instant::now();
        while seen.len() < PER_ROUND as usize || sent < PER_ROUND {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "round {round}: {} of {PER_ROUND} received, {sent} sent, srq faulted {}",
                seen.len(),
                srq.faulted()
            );
            let n = servers.poll(&mut wc);
            for c in &wc[..n] {
                assert_eq!(c.status, WcStatus::SUCCESS, "round {round}: {c:?}");
                assert_eq!(c.byte_len, 8);
                let k = c.wr_id as usize;
                assert!(held[k], "buffer {k} completed twice without a repost");
                held[k] = false;
                let mut b = [0u8; 8];
                bufs.read(k * PAGE, &mut b).unwrap();
                let msg = u64::from_le_bytes(b);
                assert!(
                    seen.insert(msg, c.wr_id).is_none(),
                    "message {msg} received twice"
                );
                srq.post_recv(&wrs[k..k + 1]).unwrap();
                held[k] = true;
            }
            for c in clients.iter_mut() {
                let m = c.poll(&mut wc).unwrap();
                assert!(wc[..m].iter().all(|c| c.status.is_ok()), "{:?}", &wc[..m]);
                sent += m as u64;
            }
            if n == 0 {
                // A server posts only when it has something: faulted
                // receives wait for this.
                srq.repost_faulted();
                std::thread::yield_now();
            }
        }
        let want: Vec<u64> = (round * PER_ROUND..(round + 1) * PER_ROUND).collect();
        assert_eq!(seen.keys().copied().collect::<Vec<_>>(), want);
        let s1 = pd.sim_odp_stats().unwrap();
        assert!(
            s1.faults > s0.faults,
            "round {round}: the evicted pages faulted"
        );
        fault_cqes += s1.srq_fault_cqes - s0.srq_fault_cqes;
    }
    assert!(fault_cqes > 0, "the SRQ took page-fault CQEs");
    // Every buffer is the SRQ's again: posted or waiting to be.
    srq.repost_faulted();
    assert_eq!(srq.faulted(), 0);
    assert_eq!(srq.outstanding(), MAX_WR, "every buffer kept");
    assert!(held.iter().all(|&h| h));
    let mut wc = [Completion::default(); 8];
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(servers.poll(&mut wc), 0, "nothing more reported");
    eprintln!("odp_srq: {fault_cqes} page-fault CQEs over {ROUNDS} rounds (shared CQ: {shared})");
}

#[test]
fn srq_keeps_every_buffer_under_repeated_faults() {
    run(false);
}

#[test]
fn srq_on_a_shared_cq_keeps_every_buffer_under_repeated_faults() {
    run(true);
}

/// Polls `q` until the SRQ holds `n` faulted receives (none reported), or
/// fails after 30 s.
fn until_faulted(q: &mut Qp, srq: &Srq, n: u32) {
    let t = Instant::now();
    let mut wc = [Completion::default(); 4];
    while srq.faulted() < n {
        assert_eq!(q.poll(&mut wc).unwrap(), 0, "a fault reported: {wc:?}");
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{} faulted",
            srq.faulted()
        );
        std::thread::yield_now();
    }
    assert_eq!(srq.faulted(), n);
}

/// Four receives over four pages not resident: one SEND faults into each
/// in turn (the sim redelivers it into the next), so all four come back
/// faulted, unreported, still counted outstanding, and the SEND waits
/// (RNR). `repost_faulted` posts them again (same wr_ids) and the message
/// lands in one of them; before that, a post that would leave the SRQ
/// more than `max_wr` receives counting the faulted ones is refused. Then
/// again with the pages evicted, a checked post of two more receives
/// reposts the faulted ones first.
#[test]
fn faulted_receives_wait_for_the_owner_then_take_the_message() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut srq = pd.create_srq(8, 1).unwrap();
    let bufs = pd
        .alloc_mr(6 * PAGE, Access::LOCAL_WRITE | Access::ON_DEMAND)
        .unwrap();
    let sges: Vec<[Sge<'_>; 1]> = (0..6)
        .map(|k| [Sge::new(&bufs, k * PAGE, 64).unwrap()])
        .collect();
    let wrs: Vec<RecvWr<'_>> = (0..6).map(|k| RecvWr::new(k as u64, &sges[k])).collect();
    let mut server = pd.create_qp_on_srq(&cfg(), &srq).unwrap();
    let mut client = pd.create_qp(&cfg()).unwrap();
    Qp::connect_loopback(&mut server, &mut client).unwrap();
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let s = [Sge::new(&src, 0, 8).unwrap()];
    srq.post_recv(&wrs[..4]).unwrap();
    for (round, msg) in [(0u64, *b"message0"), (1, *b"message1")] {
        pd.sim_evict_odp(&bufs).unwrap().unwrap();
        src.write(0, &msg).unwrap();
        let f0 = pd.sim_odp_stats().unwrap().srq_fault_cqes;
        client
            .post_send(&[SendWr::send(round, &s).signaled()])
            .unwrap();
        until_faulted(&mut server, &srq, 4);
        assert_eq!(pd.sim_odp_stats().unwrap().srq_fault_cqes - f0, 4);
        assert_eq!(srq.outstanding(), 4, "faulted receives stay the SRQ's");
        if round == 0 {
            // Their room is kept: 4 held + 5 > max_wr 8, refused, and
            // nothing relinked or posted.
            assert!(matches!(
                srq.post_recv(&wrs[..5]),
                Err(Error::RecvQueueFull)
            ));
            assert_eq!(srq.faulted(), 4);
            assert_eq!(srq.repost_faulted(), 4);
            assert_eq!(srq.outstanding(), 4);
        } else {
            // A batch takes the checked path: the faulted ones go first.
            srq.post_recv(&wrs[4..6]).unwrap();
            assert_eq!(srq.outstanding(), 6);
        }
        assert_eq!(srq.faulted(), 0);
        let c = {
            let t = Instant::now();
            let mut wc = [Completion::default(); 1];
            loop {
                if server.poll(&mut wc).unwrap() == 1 {
                    break wc[0];
                }
                assert!(t.elapsed() < Duration::from_secs(30));
                std::thread::yield_now();
            }
        };
        assert_eq!((c.status, c.byte_len), (WcStatus::SUCCESS, 8), "{c:?}");
        assert!(c.wr_id < 4, "a reposted receive took it: {c:?}");
        let mut got = [0u8; 8];
        bufs.read(c.wr_id as usize * PAGE, &mut got).unwrap();
        assert_eq!(got, msg);
        let mut wc = [Completion::default(); 1];
        let t = Instant::now();
        while client.poll(&mut wc).unwrap() == 0 {
            assert!(t.elapsed() < Duration::from_secs(30));
        }
        assert!(wc[0].status.is_ok());
        // The one that took it goes back; the others are still posted.
        srq.post_recv(&wrs[c.wr_id as usize..c.wr_id as usize + 1])
            .unwrap();
    }
}

/// An ODP MR dropped while receives into it wait, faulted, to be posted
/// again stays registered (the repost will hand its lkey to the device),
/// and goes once they are reposted and completed.
#[test]
fn an_mr_dropped_under_faulted_receives_stays_registered() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut srq = pd.create_srq(4, 1).unwrap();
    let bufs = pd
        .alloc_mr(2 * PAGE, Access::LOCAL_WRITE | Access::ON_DEMAND)
        .unwrap();
    let mut server = pd.create_qp_on_srq(&cfg(), &srq).unwrap();
    // The client on a PD of its own: its outstanding SEND does not hold
    // this PD's MRs, only the SRQ's WQEs do.
    let pd2 = ctx.alloc_pd().unwrap();
    let mut client = pd2.create_qp(&cfg()).unwrap();
    let (ms, mc) = (
        exchange::ConnInfo::of(&server, 1),
        exchange::ConnInfo::of(&client, 2),
    );
    exchange::connect_qp(&mut server, &ms, &mc).unwrap();
    exchange::connect_qp(&mut client, &mc, &ms).unwrap();
    {
        let sges: Vec<[Sge<'_>; 1]> = (0..2)
            .map(|k| [Sge::new(&bufs, k * PAGE, 64).unwrap()])
            .collect();
        let wrs: Vec<RecvWr<'_>> = (0..2).map(|k| RecvWr::new(k as u64, &sges[k])).collect();
        srq.post_recv(&wrs).unwrap();
    }
    let src = pd2.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let s = [Sge::new(&src, 0, 8).unwrap()];
    client.post_send(&[SendWr::send(1, &s).signaled()]).unwrap();
    until_faulted(&mut server, &srq, 2);
    let live = pd.live_mrs();
    drop(bufs);
    pd.reclaim();
    assert_eq!(pd.live_mrs(), live, "deregistered under faulted receives");
    assert_eq!(srq.repost_faulted(), 2);
    let t = Instant::now();
    let mut wc = [Completion::default(); 1];
    while server.poll(&mut wc).unwrap() == 0 {
        assert!(t.elapsed() < Duration::from_secs(30));
    }
    assert_eq!(wc[0].status, WcStatus::SUCCESS);
}

/// Waits (polling nothing) until the sim has written `n` SRQ page-fault
/// CQEs since `from`.
fn until_fault_cqes(pd: &Pd, from: u64, n: u64) {
    let t = Instant::now();
    while pd.sim_odp_stats().unwrap().srq_fault_cqes - from < n {
        assert!(t.elapsed() < Duration::from_secs(30));
        std::thread::yield_now();
    }
}

/// Page-fault CQEs still in the CQ when their QP is reset are thrown away
/// unreported, and their receives go back to the SRQ to be posted again
/// (not lost): on a shared CQ (`SharedCq::reset_qp`) and on the QP's own
/// CQ (`Qp::modify` to RESET).
#[test]
fn faults_dropped_by_a_reset_keep_their_receives() {
    for shared in [false, true] {
        let ctx = Context::open("sim").unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let mut srq = pd.create_srq(4, 1).unwrap();
        let bufs = pd
            .alloc_mr(4 * PAGE, Access::LOCAL_WRITE | Access::ON_DEMAND)
            .unwrap();
        let sges: Vec<[Sge<'_>; 1]> = (0..4)
            .map(|k| [Sge::new(&bufs, k * PAGE, 64).unwrap()])
            .collect();
        let wrs: Vec<RecvWr<'_>> = (0..4).map(|k| RecvWr::new(k as u64, &sges[k])).collect();
        srq.post_recv(&wrs).unwrap();
        let mut cq = pd.create_shared_cq(64).unwrap();
        let mut own = None;
        let mut client = pd.create_qp(&cfg()).unwrap();
        if shared {
            let on_cq = QpConfig {
                cq_depth: None,
                ..cfg()
            };
            let i = cq.create_qp_on_srq(&on_cq, &srq).unwrap();
            Qp::connect_loopback(cq.qp_mut(i), &mut client).unwrap();
        } else {
            let mut q = pd.create_qp_on_srq(&cfg(), &srq).unwrap();
            Qp::connect_loopback(&mut q, &mut client).unwrap();
            own = Some(q);
        }
        let src = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
        let s = [Sge::new(&src, 0, 8).unwrap()];
        let f0 = pd.sim_odp_stats().unwrap().srq_fault_cqes;
        client.post_send(&[SendWr::send(1, &s).signaled()]).unwrap();
        until_fault_cqes(&pd, f0, 4);
        assert_eq!(srq.faulted(), 0, "none polled yet");
        match own.as_mut() {
            Some(q) => q.modify(QpState::Reset, &QpAttr::default()).unwrap(),
            None => cq.reset_qp(0).unwrap(),
        }
        assert_eq!(srq.faulted(), 4, "shared CQ: {shared}");
        assert_eq!(srq.outstanding(), 4, "every buffer still the SRQ's");
        assert_eq!(srq.repost_faulted(), 4);
        let mut wc = [Completion::default(); 4];
        assert_eq!(cq.poll(&mut wc).unwrap(), 0, "nothing reported");
    }
}
