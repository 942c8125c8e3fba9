//! Unit tests of the SRQ driver's ODP page-fault policy (`srq.rs`,
//! module docs): a poller gives a faulted WQE back ([`SrqSlots::fault`]),
//! the owner's next relink reposts it into the head WQE with its wr_id
//! and SGEs, counted by the doorbell record. Rings in plain memory; the
//! test plays the device. They run under Miri with the other lib tests.

use super::tests::{lkeys_of, next_of, ring, srq};
use super::*;
use crate::prm::INVALID_LKEY;
use crate::wqe::decode_data_seg;
use std::collections::VecDeque;

/// A step of [`fault_model`].
#[derive(Clone, Debug)]
enum Step {
    /// A general post of `n` SGEs (at most the stride's), if one is free.
    Post(usize),
    /// The device takes the next posted WQE, following the list.
    Take,
    /// A completion of one of the WQEs the device took.
    Complete(usize),
    /// An ODP page-fault CQE for one of them.
    Fault(usize),
    /// `repost_faulted`.
    Repost,
    /// `refill` (it relinks, so it reposts).
    Refill,
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (1..5usize).prop_map(Step::Post),
        4 => Just(Step::Take),
        2 => any::<usize>().prop_map(Step::Complete),
        2 => any::<usize>().prop_map(Step::Fault),
        1 => Just(Step::Repost),
        1 => Just(Step::Refill),
    ]
}

/// One receive: its wr_id and the lkeys of its SGEs (each SGE's address
/// is `wr_id << 8 | k`).
type Recv = (u64, Vec<u32>);

/// Runs `steps` against a model of the SRQ with faults: every WQE the
/// device takes is the next posted one (a repost's, after a relink, with
/// the faulted receive's SGEs and wr_id), held; a faulted WQE is not
/// completed and not faulted twice; `outstanding` counts posted and taken
/// receives, not the faulted ones waiting, which `faulted` counts; the
/// doorbell record counts every post and repost; at the end every wr_id
/// completed exactly once and the free list is whole.
fn fault_model(count: u32, stride: u32, steps: &[Step]) {
    let (mut mem, mut db) = ring(count, stride);
    let words = mem.len();
    let mut q = srq(&mut mem, &mut db, count, stride);
    let (mem_ptr, db_ptr): (*const u64, *const u32) = (q.buf.as_ptr().cast(), q.dbrec);
    // SAFETY: the queue writes through its own pointers; the test reads
    // the same memory between its calls (one thread).
    let dbv = || u32::from_be(unsafe { db_ptr.read() });
    let seg_at = |at: usize| {
        // SAFETY: as `dbv`'s; `at + 16` is inside the ring.
        decode_data_seg(&unsafe { core::ptr::read(mem_ptr.cast::<u8>().add(at).cast()) })
    };
    // SAFETY: as `dbv`'s.
    let view = || unsafe { core::slice::from_raw_parts(mem_ptr, words) }.to_vec();
    let slots = q.slots().clone();
    let max_sge = (stride / 16 - 1) as usize;
    let mut posted = VecDeque::<Recv>::new();
    let mut taken = Vec::<(u32, Recv)>::new();
    let mut faulted = VecDeque::<Recv>::new();
    let mut done = Vec::<u64>::new();
    let (mut dev_at, mut dev_taken, mut next_wr) = (0u32, 0u32, 1u64);
    // After a call that relinks: the reposts, in the order faulted, are
    // posted before anything else.
    let settle =
        |q: &SharedReceiveQueue, faulted: &mut VecDeque<Recv>, posted: &mut VecDeque<Recv>| {
            let reposted = faulted.len() - q.faulted() as usize;
            posted.extend(faulted.drain(..reposted));
        };
    // Returns how many are posted and taken after the step.
    let mut run = |s: &Step, q: &mut SharedReceiveQueue| -> (usize, usize) {
        match *s {
            Step::Post(n) => {
                let n = n.min(max_sge);
                let free = q.free();
                settle(q, &mut faulted, &mut posted);
                if free == 0 {
                    return (posted.len(), taken.len());
                }
                let wr = next_wr;
                let lk = lkeys_of(wr, n);
                let sges: Vec<DataSeg> = (0..n)
                    .map(|k| DataSeg {
                        addr: wr << 8 | k as u64,
                        len: 8,
                        lkey: lk[k],
                    })
                    .collect();
                q.post(&sges, wr).unwrap();
                q.ring_doorbell();
                posted.push_back((wr, lk));
                next_wr += 1;
            }
            Step::Take => {
                assert_eq!(
                    dbv().wrapping_sub(dev_taken) & 0xffff,
                    posted.len() as u32,
                    "the doorbell record counts every post and repost"
                );
                let Some((wr, lk)) = posted.pop_front() else {
                    return (0, taken.len());
                };
                assert!(slots.is_held(dev_at as usize));
                let base = (dev_at * stride) as usize + SRQ_NEXT_SEG;
                for (k, &l) in lk.iter().enumerate() {
                    let s = seg_at(base + k * 16);
                    assert_eq!(
                        (s.addr, s.len, s.lkey),
                        (wr << 8 | k as u64, 8, l),
                        "WQE {dev_at}"
                    );
                }
                if lk.len() < max_sge {
                    assert_eq!(seg_at(base + lk.len() * 16).lkey, INVALID_LKEY);
                }
                taken.push((dev_at, (wr, lk)));
                dev_at = next_of(&view(), stride, dev_at) as u32;
                dev_taken = dev_taken.wrapping_add(1);
            }
            Step::Complete(k) => {
                if taken.is_empty() {
                    return (posted.len(), 0);
                }
                let (idx, (wr, _)) = taken.swap_remove(k % taken.len());
                assert_eq!(slots.complete(idx as u16), Some(wr));
                done.push(wr);
            }
            Step::Fault(k) => {
                if taken.is_empty() {
                    return (posted.len(), 0);
                }
                let (idx, r) = taken.swap_remove(k % taken.len());
                for &l in &r.1 {
                    assert!(slots.names(l));
                }
                assert!(slots.fault(idx as u16));
                assert!(!slots.fault(idx as u16), "faulted once");
                assert_eq!(slots.complete(idx as u16), None, "not completed");
                for &l in &r.1 {
                    assert!(slots.names(l), "waiting for its repost: its MR must stay");
                }
                faulted.push_back(r);
            }
            Step::Repost => {
                let n = faulted.len() as u32;
                assert_eq!(q.repost_faulted(), n);
                settle(q, &mut faulted, &mut posted);
                assert!(faulted.is_empty());
            }
            Step::Refill => {
                q.refill(count);
                settle(q, &mut faulted, &mut posted);
            }
        }
        let out = (posted.len() + taken.len()) as u32;
        assert_eq!(q.outstanding(), out, "after {s:?}");
        assert_eq!(slots.held(), out);
        assert_eq!(q.faulted(), faulted.len() as u32);
        assert!(!q.pending, "reposts ring their own doorbell");
        assert_eq!(dbv(), q.counter & 0xffff);
        (posted.len(), taken.len())
    };
    for s in steps {
        run(s, &mut q);
    }
    // Drain: repost, take, complete until nothing is left.
    loop {
        match run(&Step::Repost, &mut q) {
            (_, t) if t > 0 => run(&Step::Complete(0), &mut q),
            (p, _) if p > 0 => run(&Step::Take, &mut q),
            _ => break,
        };
    }
    done.sort_unstable();
    assert_eq!(
        done,
        (1..next_wr).collect::<Vec<_>>(),
        "every wr_id completed once"
    );
    q.refill(count);
    assert_eq!(q.free(), count - 1);
    let mem = view();
    let (mut at, mut seen) = (q.head, vec![false; count as usize]);
    for _ in 0..count - 1 {
        assert!(!seen[at as usize], "WQE {at} twice on the list");
        seen[at as usize] = true;
        at = next_of(&mem, stride, at) as u32;
    }
    assert_eq!(at, q.tail);
    assert_eq!(q.head, dev_at, "the device's next WQE is the list's head");
}

/// The SRQ full (head at the tail), every WQE taken and faulted: the
/// relink reposts each, in order, into the WQEs ahead of it without
/// overwriting one not reposted yet; they come back with their own SGEs
/// and wr_ids, the doorbell record counting the reposts; over many laps.
#[test]
fn every_faulted_wqe_of_a_full_srq_is_reposted_with_its_sges() {
    for stride in [32u32, 64, 128] {
        let mut steps = Vec::new();
        for _lap in 0..6 {
            steps.extend((0..7).map(|k| Step::Post(1 + k % 4)));
            steps.extend((0..7).map(|_| Step::Take));
            // Faults in an order unlike the list's, one WQE completed.
            steps.extend([5, 0, 3, 1, 2, 0].map(Step::Fault));
            steps.push(Step::Complete(0));
            steps.push(Step::Repost);
            steps.extend((0..6).map(|_| Step::Take));
            steps.extend((0..6).map(|_| Step::Complete(0)));
        }
        fault_model(8, stride, &steps);
    }
}

/// A faulted WQE is reposted by the owner's next post, before the new
/// receive: the device takes the repost first.
#[test]
fn the_next_post_reposts_a_faulted_wqe_first() {
    let steps = [
        Step::Post(1),
        Step::Post(2),
        Step::Take,
        Step::Fault(0),
        Step::Post(1),
        Step::Take,
        Step::Take,
        Step::Take,
        Step::Fault(1),
        Step::Refill,
    ];
    fault_model(4, 64, &steps);
}

/// Refusals: an index out of range, never posted, completed already.
#[test]
fn fault_refuses_what_the_device_does_not_hold() {
    let (mut mem, mut db) = ring(4, 32);
    let mut q = srq(&mut mem, &mut db, 4, 32);
    let slots = q.slots().clone();
    assert!(!slots.fault(9), "out of range");
    assert!(!slots.fault(0), "never posted");
    let s = [DataSeg {
        addr: 0x1000,
        len: 8,
        lkey: 0x200,
    }];
    q.post(&s, 7).unwrap();
    q.ring_doorbell();
    assert_eq!(slots.complete(0), Some(7));
    assert!(!slots.fault(0), "completed already");
    assert_eq!((q.faulted(), q.repost_faulted()), (0, 0));
}

const MODEL_STEPS: usize = if cfg!(miri) { 40 } else { 300 };

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(
        if cfg!(miri) { 2 } else { 128 }
    ))]

    /// [`fault_model`]: random posts, takes, completions, faults,
    /// reposts and refills over many laps.
    #[test]
    fn faults_and_reposts_against_a_model(
        count_log in 2u32..5,
        stride_log in 5u32..8,
        steps in proptest::collection::vec(step(), 0..MODEL_STEPS),
    ) {
        fault_model(1 << count_log, 1 << stride_log, &steps);
    }
}
