//! `DciPool` on the sim: WRs to one target stay on one DCI while any is
//! outstanding (completing in post order), two targets take two DCIs, a
//! DCI freed by its last completion serves another target, all W bound
//! refuses with `Error::QueueFull` (nothing written) until a poll frees
//! one, and a DCI failed by a wrong key is reset before it serves again
//! (its flushed WRs, unsignaled ones too, polled first); a refused post
//! binds nothing; random interleavings keep each target's order.

use rdma_direct::*;

#[path = "support/sim.rs"]
mod sim;
use sim::*;

const KEY: u64 = 0x0123_4567_89ab_cdef;

fn dci_cfg() -> QpConfig {
    QpConfig {
        qp_type: QpType::Dci,
        max_send_wr: 16,
        ..QpConfig::default()
    }
}

/// A DCT in RTR on its own SRQ, with key `key`.
fn dct(e: &Env, key: u64) -> (Srq, Qp) {
    let srq = e.pd.create_srq(8, 1).unwrap();
    let cfg = QpConfig {
        qp_type: QpType::Dct,
        dc_key: key,
        ..QpConfig::default()
    };
    let mut q = e.pd.create_qp_on_srq(&cfg, &srq).unwrap();
    q.ready_dct().unwrap();
    (srq, q)
}

fn ah(e: &Env, pool: &DciPool, dct: &Qp) -> Ah {
    e.pd.create_ah(&pool.dci(0).av_to(&dct.endpoint())).unwrap()
}

fn dest<'a>(ah: &'a Ah, dct: &Qp, key: u64) -> DcDest<'a> {
    DcDest {
        ah,
        dctn: dct.dct_number().unwrap(),
        key,
    }
}

/// Polls the pool until `n` completions came.
fn drain(pool: &mut DciPool, n: usize) -> Vec<Completion> {
    poll_n_with(|wc| pool.poll(wc), n)
}

fn read8(mr: &Mr, off: usize) -> [u8; 8] {
    let mut b = [0u8; 8];
    mr.read(off, &mut b).unwrap();
    b
}

#[test]
fn wrs_to_one_target_stay_on_one_dci_and_complete_in_post_order() {
    let e = env();
    let (_srq, t) = dct(&e, KEY);
    let mut pool = DciPool::new(&e.pd, &dci_cfg(), 4).unwrap();
    let a1 = ah(&e, &pool, &t);
    // A second AH to the same port: the same target.
    let a2 = ah(&e, &pool, &t);
    e.src.write(0, &[5u8; 64]).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let mut took = Vec::new();
    for k in 0..6u64 {
        let d = dest(if k % 2 == 0 { &a1 } else { &a2 }, &t, KEY);
        let w = [SendWr::rdma_write(k, &s, remote(&e.dst, k * 8)).signaled()];
        took.push(pool.post(&d, &w).unwrap());
    }
    let i = took[0];
    assert!(took.iter().all(|&j| j == i), "one DCI: {took:?}");
    assert!(pool.bound(i));
    assert_eq!(pool.busy(), 1);
    let got = drain(&mut pool, 6);
    assert_eq!(
        got.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4, 5]
    );
    assert!(got.iter().all(|c| c.status == WcStatus::SUCCESS), "{got:?}");
    assert!(
        got.iter().all(|c| c.qp_num == pool.qpn(i)),
        "each names its DCI"
    );
    assert_eq!(pool.index_of(got[0].qp_num), Some(i));
    assert!(!pool.bound(i), "unbound after its last completion");
    for k in 0..6 {
        assert_eq!(read8(&e.dst, k * 8), [5u8; 8]);
    }
}

#[test]
fn two_targets_take_two_dcis_and_a_freed_dci_serves_another() {
    let e = env();
    let (_s1, t1) = dct(&e, KEY);
    let (_s2, t2) = dct(&e, KEY ^ 0xff);
    let mut pool = DciPool::new(&e.pd, &dci_cfg(), 2).unwrap();
    let (h1, h2) = (ah(&e, &pool, &t1), ah(&e, &pool, &t2));
    let (d1, d2) = (dest(&h1, &t1, KEY), dest(&h2, &t2, KEY ^ 0xff));
    e.src.write(0, &[1u8; 8]).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let w = |id| [SendWr::rdma_write(id, &s, remote(&e.dst, id * 8)).signaled()];
    let i1 = pool.post(&d1, &w(1)).unwrap();
    let i2 = pool.post(&d2, &w(2)).unwrap();
    assert_eq!((i1, i2), (0, 1), "the free DCI of lowest index");
    assert_eq!(pool.busy(), 2);
    // Each target keeps its DCI while outstanding.
    assert_eq!(pool.post(&d2, &w(3)).unwrap(), 1);
    assert_eq!(pool.post(&d1, &w(4)).unwrap(), 0);
    let got = drain(&mut pool, 4);
    for c in &got {
        let want = if c.wr_id % 3 == 1 { 0 } else { 1 };
        assert_eq!(c.qp_num, pool.qpn(want), "{c:?}");
    }
    assert_eq!(pool.busy(), 0);
    // Both free: target 2 now takes DCI 0, and target 1 DCI 1.
    assert_eq!(pool.post(&d2, &w(5)).unwrap(), 0);
    assert_eq!(pool.post(&d1, &w(6)).unwrap(), 1);
    let got = drain(&mut pool, 2);
    assert!(got.iter().all(|c| c.status == WcStatus::SUCCESS));
    assert_eq!(pool.busy(), 0);
}

#[test]
fn all_dcis_bound_refuse_with_queue_full_and_write_nothing_until_a_poll() {
    let e = env();
    let (_s1, t1) = dct(&e, KEY);
    let (_s2, t2) = dct(&e, KEY);
    let mut pool = DciPool::new(&e.pd, &dci_cfg(), 1).unwrap();
    let (h1, h2) = (ah(&e, &pool, &t1), ah(&e, &pool, &t2));
    let (d1, d2) = (dest(&h1, &t1, KEY), dest(&h2, &t2, KEY));
    e.src.write(0, &[3u8; 8]).unwrap();
    e.dst.write(800, &[0u8; 8]).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let w1 = [SendWr::rdma_write(1, &s, remote(&e.dst, 0)).signaled()];
    let w2 = [SendWr::rdma_write(2, &s, remote(&e.dst, 800)).signaled()];
    assert_eq!(pool.post(&d1, &w1).unwrap(), 0);
    assert!(matches!(pool.post(&d2, &w2), Err(Error::QueueFull)));
    let got = drain(&mut pool, 1);
    assert_eq!(got[0].wr_id, 1);
    assert_eq!(read8(&e.dst, 800), [0u8; 8], "the refused WR wrote nothing");
    assert!(!pool.bound(0));
    assert_eq!(
        pool.post(&d2, &w2).unwrap(),
        0,
        "the freed DCI serves target 2"
    );
    let got = drain(&mut pool, 1);
    assert_eq!((got[0].wr_id, got[0].status), (2, WcStatus::SUCCESS));
    assert_eq!(read8(&e.dst, 800), [3u8; 8]);
    // Nothing else came: the refused post left no WR behind.
    assert_eq!(pool.poll(&mut [Completion::default(); 4]).unwrap(), 0);
}

#[test]
fn a_dci_failed_by_a_wrong_key_is_reset_before_it_serves_again() {
    let e = env();
    let (_s, t) = dct(&e, KEY);
    let mut pool = DciPool::new(&e.pd, &dci_cfg(), 1).unwrap();
    let h = ah(&e, &pool, &t);
    let (bad, good) = (dest(&h, &t, KEY ^ 1), dest(&h, &t, KEY));
    e.src.write(0, &[7u8; 8]).unwrap();
    e.dst.write(0, &[0u8; 32]).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let ws: Vec<SendWr> = (0..3u64)
        .map(|k| SendWr::rdma_write(k, &s, remote(&e.dst, k * 8)).signaled())
        .collect();
    assert_eq!(pool.post(&bad, &ws).unwrap(), 0);
    let qpn = pool.qpn(0);
    let got = drain(&mut pool, 3);
    assert_eq!(got[0].status, WcStatus::RETRY_EXC_ERR, "{got:?}");
    assert!(
        got[1..].iter().all(|c| c.status == WcStatus::WR_FLUSH_ERR),
        "{got:?}"
    );
    assert!(
        got.iter().all(|c| c.qp_num == qpn),
        "credited to its own DCI"
    );
    assert!(!pool.bound(0), "drained: unbound");
    assert!(
        !pool.dci(0).dci_failed(),
        "reset by the poll that drained it"
    );
    assert_eq!(pool.dci(0).state(), QpState::Rts);
    assert_eq!(read8(&e.dst, 0), [0u8; 8], "nothing delivered");
    let w = [SendWr::rdma_write(9, &s, remote(&e.dst, 24)).signaled()];
    assert_eq!(pool.post(&good, &w).unwrap(), 0);
    let got = drain(&mut pool, 1);
    assert_eq!((got[0].wr_id, got[0].status), (9, WcStatus::SUCCESS));
    assert_eq!(read8(&e.dst, 24), [7u8; 8]);
}

#[test]
fn a_failed_dci_refuses_its_target_until_drained() {
    let e = env();
    let (_s, t) = dct(&e, KEY);
    let mut pool = DciPool::new(&e.pd, &dci_cfg(), 2).unwrap();
    let h = ah(&e, &pool, &t);
    let bad = dest(&h, &t, KEY ^ 1);
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    // The first WR fails; the second flushes.
    let ws = [
        SendWr::rdma_write(1, &s, remote(&e.dst, 0)).signaled(),
        SendWr::rdma_write(2, &s, remote(&e.dst, 8)).signaled(),
    ];
    assert_eq!(pool.post(&bad, &ws).unwrap(), 0);
    // Poll only the error's completion.
    let mut one = [Completion::default(); 1];
    let t0 = std::time::Instant::now();
    while pool.poll(&mut one).unwrap() == 0 {
        assert!(t0.elapsed() < PATIENCE);
        std::thread::yield_now();
    }
    assert_eq!(one[0].status, WcStatus::RETRY_EXC_ERR);
    assert!(pool.dci(0).dci_failed() && pool.bound(0));
    let w = [SendWr::rdma_write(3, &s, remote(&e.dst, 16)).signaled()];
    assert!(matches!(pool.post(&bad, &w), Err(Error::QueueFull)));
    let rest = drain(&mut pool, 1);
    assert_eq!(rest[0].status, WcStatus::WR_FLUSH_ERR);
    assert!(!pool.bound(0) && !pool.dci(0).dci_failed());
}

#[test]
fn new_checks_its_width_and_the_qp_type() {
    let e = env();
    for w in [0, 65] {
        assert!(matches!(
            DciPool::new(&e.pd, &dci_cfg(), w),
            Err(Error::Config { .. })
        ));
    }
    assert!(matches!(
        DciPool::new(&e.pd, &QpConfig::default(), 2),
        Err(Error::WrongTransport { .. })
    ));
    let pool = DciPool::new(&e.pd, &dci_cfg(), 3).unwrap();
    assert_eq!((pool.width(), pool.busy()), (3, 0));
    let qpns: Vec<u32> = (0..3).map(|i| pool.qpn(i)).collect();
    assert!(qpns[0] != qpns[1] && qpns[1] != qpns[2] && qpns[0] != qpns[2]);
    assert!((0..3).all(|i| pool.dci(i).state() == QpState::Rts));
}

#[test]
fn unsignaled_wrs_keep_their_dci_bound_until_a_signaled_one_and_flush_on_failure() {
    let e = env();
    let (_s, t) = dct(&e, KEY);
    let mut pool = DciPool::new(&e.pd, &dci_cfg(), 2).unwrap();
    let h = ah(&e, &pool, &t);
    let (good, bad) = (dest(&h, &t, KEY), dest(&h, &t, KEY ^ 1));
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    // An unsignaled WR alone: nothing completes, the DCI stays bound.
    let w = [SendWr::rdma_write(1, &s, remote(&e.dst, 0))];
    assert_eq!(pool.post(&good, &w).unwrap(), 0);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(pool.poll(&mut [Completion::default(); 4]).unwrap(), 0);
    assert!(pool.bound(0));
    // A signaled one after it retires both.
    let w = [SendWr::rdma_write(2, &s, remote(&e.dst, 8)).signaled()];
    assert_eq!(pool.post(&good, &w).unwrap(), 0);
    assert_eq!(drain(&mut pool, 1)[0].wr_id, 2);
    assert!(!pool.bound(0));
    // On failure, unsignaled WRs after the failed one flush too, and the
    // DCI is reset once they are polled.
    let ws = [
        SendWr::rdma_write(3, &s, remote(&e.dst, 0)).signaled(),
        SendWr::rdma_write(4, &s, remote(&e.dst, 8)),
        SendWr::rdma_write(5, &s, remote(&e.dst, 16)),
    ];
    assert_eq!(pool.post(&bad, &ws).unwrap(), 0);
    let got = drain(&mut pool, 3);
    assert_eq!(got.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [3, 4, 5]);
    assert!(!pool.bound(0) && !pool.dci(0).dci_failed());
    assert_eq!(pool.dci(0).state(), QpState::Rts);
}

#[test]
fn a_refused_post_binds_no_dci() {
    let e = env();
    let (_s, t) = dct(&e, KEY);
    let mut pool = DciPool::new(&e.pd, &dci_cfg(), 1).unwrap();
    let pd2 = e.ctx.alloc_pd().unwrap();
    let foreign = pd2.create_ah(&pool.dci(0).av_to(&t.endpoint())).unwrap();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let w = [SendWr::rdma_write(1, &s, remote(&e.dst, 0)).signaled()];
    assert!(matches!(
        pool.post(&dest(&foreign, &t, KEY), &w),
        Err(Error::ForeignPd { .. })
    ));
    let wide = DcDest {
        dctn: 1 << 24,
        ..dest(&foreign, &t, KEY)
    };
    assert!(matches!(
        pool.post(&wide, &w),
        Err(Error::ForeignPd { .. } | Error::Config { .. })
    ));
    assert_eq!(pool.busy(), 0, "nothing bound");
    // A batch larger than a DCI's ring never fits.
    let many: Vec<SendWr> = (0..17)
        .map(|k| SendWr::rdma_write(k, &s, remote(&e.dst, 0)))
        .collect();
    let h = ah(&e, &pool, &t);
    assert!(matches!(
        pool.post(&dest(&h, &t, KEY), &many),
        Err(Error::NeverFits { .. })
    ));
    assert_eq!(pool.busy(), 0);
    assert_eq!(pool.post(&dest(&h, &t, KEY), &w).unwrap(), 0);
    assert_eq!(drain(&mut pool, 1)[0].wr_id, 1);
}

/// Random posts to 6 targets (two of them with a wrong key) through 3
/// DCIs, polled at random: each target's WRs complete in the order
/// posted, each completion names the DCI that took its WR, a DCI is bound
/// to one target at a time, and a refusal is only `QueueFull`.
#[test]
fn random_interleavings_keep_each_targets_order() {
    let e = env();
    let dcts: Vec<(Srq, Qp)> = (0..6).map(|_| dct(&e, KEY)).collect();
    let mut pool = DciPool::new(&e.pd, &dci_cfg(), 3).unwrap();
    let ahs: Vec<Ah> = dcts.iter().map(|(_, t)| ah(&e, &pool, t)).collect();
    let dests: Vec<DcDest> = (0..6)
        .map(|k| dest(&ahs[k], &dcts[k].1, if k >= 4 { KEY ^ 1 } else { KEY }))
        .collect();
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let mut next = [0u64; 6];
    let mut last = [None::<u64>; 6];
    let mut took = std::collections::HashMap::new();
    let (mut posted, mut done, mut refused) = (0usize, 0usize, 0usize);
    let mut wc = [Completion::default(); 4];
    let mut failed = 0;
    let t0 = std::time::Instant::now();
    while posted < 600 || done < posted {
        assert!(t0.elapsed() < PATIENCE, "{done} of {posted}");
        if posted < 600 && rnd(3) > 0 {
            let k = rnd(6) as usize;
            let n = 1 + rnd(3);
            let ws: Vec<SendWr> = (0..n)
                .map(|j| {
                    let id = (k as u64) << 32 | (next[k] + j);
                    SendWr::rdma_write(id, &s, remote(&e.dst, 8 * k as u64)).signaled()
                })
                .collect();
            match pool.post(&dests[k], &ws) {
                Ok(i) => {
                    for j in 0..n {
                        took.insert((k as u64) << 32 | (next[k] + j), i);
                    }
                    next[k] += n;
                    posted += n as usize;
                }
                Err(Error::QueueFull) => refused += 1,
                Err(e) => panic!("{e:?}"),
            }
        }
        let got = pool.poll(&mut wc).unwrap();
        for c in &wc[..got] {
            let (k, seq) = ((c.wr_id >> 32) as usize, c.wr_id & 0xffff_ffff);
            assert!(
                last[k].is_none_or(|l| l < seq),
                "target {k}: {seq} after {last:?}"
            );
            last[k] = Some(seq);
            assert_eq!(c.qp_num, pool.qpn(took[&c.wr_id]), "{c:?}");
            assert_eq!(c.status.is_ok(), k < 4, "{c:?}");
            failed += usize::from(k >= 4);
            done += 1;
        }
        assert!(pool.busy() <= 3);
        if got == 0 {
            std::thread::yield_now();
        }
    }
    assert_eq!(pool.busy(), 0);
    assert!(refused > 0, "the 3 DCIs were all bound at some point");
    assert!(failed > 0, "{failed} failed of {posted}");
    assert!((0..3).all(|i| pool.dci(i).state() == QpState::Rts && !pool.dci(i).dci_failed()));
}
