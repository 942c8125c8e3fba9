//! Unit tests of the SRQ's ring driver (`srq.rs`): the poster's posts
//! and relinking over rings in plain memory (the test plays the device),
//! and the slots' completions from several threads. They run under Miri
//! (`scripts/miri`: mlx5-dv's lib tests).

use super::*;

impl SharedReceiveQueue {
    fn dbrec_value(&self) -> &u32 {
        // SAFETY: the test's record, alive while the queue is.
        unsafe { &*self.dbrec }
    }
}

/// A ring of `count` WQEs of `stride` bytes linked 0 -> 1 -> ... as
/// libmlx5's `set_srq_buf_ll` leaves it: head 0, tail `count - 1`.
pub(super) fn ring(count: u32, stride: u32) -> (Vec<u64>, Box<u32>) {
    let mut mem = vec![0u64; (count * stride / 8) as usize];
    let bytes: &mut [u8] =
        // SAFETY: a u64 vector viewed as its bytes.
        unsafe { core::slice::from_raw_parts_mut(mem.as_mut_ptr().cast(), mem.len() * 8) };
    for i in 0..count as usize {
        let at = i * stride as usize;
        bytes[at..at + SRQ_NEXT_SEG].copy_from_slice(&crate::wqe::srq_next_seg((i + 1) as u16));
    }
    (mem, Box::new(0))
}

pub(super) fn srq(mem: &mut [u64], db: &mut u32, count: u32, stride: u32) -> SharedReceiveQueue {
    let d = SrqDesc {
        buf: mem.as_mut_ptr().cast(),
        dbrec: db,
        stride,
        head: 0,
        tail: count - 1,
    };
    // SAFETY: `mem` holds the ring, linked; both outlive the queue.
    unsafe { SharedReceiveQueue::new(&d, stride / 16 - 1) }.expect("srq")
}

fn seg(len: u32) -> [DataSeg; 1] {
    [DataSeg {
        addr: 0x1000,
        len,
        lkey: 0x200,
    }]
}

pub(super) fn next_of(mem: &[u64], stride: u32, idx: u32) -> u16 {
    // SAFETY: a u64 slice viewed as its bytes.
    let b: &[u8] = unsafe { core::slice::from_raw_parts(mem.as_ptr().cast(), mem.len() * 8) };
    let at = (idx * stride) as usize;
    decode_srq_next_seg(b[at..at + SRQ_NEXT_SEG].try_into().unwrap())
}

/// A full SRQ holds one less than its WQEs; the doorbell record is the
/// big-endian count of WQEs posted; posts follow the list.
/// The in-place post writes the ring bytes and doorbell record that
/// `post` + `ring_doorbell` write, for strides of one data segment
/// and of more (the terminating segment); it posts only as many as the
/// last `refill` allowed (the free list, and `max_outstanding` less
/// what is outstanding), declining after that with nothing written;
/// a refill relinks WQEs completed, and a general `post` counts
/// against the in-place room too.
#[test]
fn post_one_seg_writes_what_post_writes() {
    for stride in [32u32, 64] {
        let (mut m1, mut d1) = ring(4, stride);
        let (mut m2, mut d2) = ring(4, stride);
        let mut a = srq(&mut m1, &mut d1, 4, stride);
        let mut b = srq(&mut m2, &mut d2, 4, stride);
        let s = crate::wqe::Seg::data(0x1000, 64, 0x200);
        assert!(!b.post_one_seg(&s, 0x200, 9), "no room before a refill");
        b.refill(3);
        for w in 0..3u64 {
            a.post(&seg(64), 10 + w).unwrap();
            a.ring_doorbell();
            assert!(b.post_one_seg(&s, 0x200, 10 + w));
        }
        assert_eq!(m1, m2, "stride {stride}");
        assert_eq!(d1, d2);
        assert_eq!(b.outstanding(), 3);
        let before = m2.clone();
        let db = *b.dbrec_value();
        assert!(!b.post_one_seg(&s, 0x200, 99), "the list is empty");
        b.refill(3);
        assert!(!b.post_one_seg(&s, 0x200, 99), "still empty");
        assert_eq!(m2, before);
        assert_eq!(b.slots.complete(1), Some(11));
        assert_eq!(b.outstanding(), 2);
        b.refill(2);
        assert!(!b.post_one_seg(&s, 0x200, 99), "at max_outstanding");
        // (Relinking WQE 1 wrote the tail's next_wqe_index, which the
        // device never reads; nothing else changed.)
        assert_eq!(*b.dbrec_value(), db);
        assert_eq!(m2[..(stride as usize / 8)], before[..(stride as usize / 8)]);
        let one = stride as usize / 8;
        assert_eq!(m2[one..2 * one], before[one..2 * one], "WQE 1 as it was");
        // WQE 1 relinked after the old tail (3), which is posted now.
        b.refill(3);
        assert!(b.post_one_seg(&s, 0x200, 20));
        assert_eq!(b.slots.complete(3), Some(20));
        assert_eq!(u32::from_be(*b.dbrec_value()), 4);
        // A general post takes from the same room: one left (WQE 1),
        // and the general post takes it.
        b.post(&seg(64), 21).unwrap();
        b.ring_doorbell();
        assert!(
            !b.post_one_seg(&s, 0x200, 99),
            "the general post took the room"
        );
    }
}

#[test]
fn holds_one_less_than_its_wqes_and_counts_posts() {
    let (mut mem, mut db) = ring(4, 32);
    let mut q = srq(&mut mem, &mut db, 4, 32);
    assert_eq!(q.free(), 3);
    for w in 0..3 {
        assert_eq!(q.post(&seg(64), 100 + w).unwrap(), w as u32);
    }
    assert!(matches!(
        q.post(&seg(64), 9),
        Err(WqeError::QueueFull { .. })
    ));
    q.ring_doorbell();
    assert_eq!(u32::from_be(*db), 3);
}

/// Completions out of order: each WQE goes back to the tail at once
/// (the next post takes it), a second completion is refused, and an
/// index the device does not hold is refused.
#[test]
fn out_of_order_completions_relink_at_once() {
    let (mut mem, mut db) = ring(4, 32);
    let mut q = srq(&mut mem, &mut db, 4, 32);
    for w in 0..3 {
        q.post(&seg(64), 100 + w).unwrap();
    }
    let slots = q.slots().clone();
    assert_eq!(slots.complete(1), Some(101));
    assert_eq!(slots.complete(1), None, "completed already");
    assert_eq!(slots.complete(3), None, "the tail was never posted");
    assert_eq!(slots.complete(9), None, "out of range");
    assert_eq!(q.free(), 1, "WQE 1 is free again at once");
    assert_eq!(next_of(&mem, 32, 3), 1, "linked after the old tail");
    // The head was the old tail (3): it is posted; WQE 1 is the tail now.
    assert_eq!(q.post(&seg(64), 200).unwrap(), 3);
    assert!(q.post(&seg(64), 9).is_err(), "full: the tail stays");
    assert_eq!(slots.complete(0), Some(100));
    assert_eq!(q.post(&seg(64), 201).unwrap(), 1);
    assert!(q.post(&seg(64), 9).is_err());
    assert_eq!(slots.complete(1), Some(201));
    assert_eq!(slots.complete(2), Some(102));
    assert_eq!(slots.complete(3), Some(200));
    assert_eq!(q.free(), 3);
    assert_eq!(slots.held(), 0);
}

/// A refused post writes nothing: no ring byte, no slot, no doorbell.
#[test]
fn refusals_write_nothing() {
    let (mut mem, mut db) = ring(4, 32);
    let mut q = srq(&mut mem, &mut db, 4, 32);
    let before = mem.clone();
    let two = [seg(8)[0], seg(8)[0]];
    assert!(matches!(
        q.post(&two, 1),
        Err(WqeError::RecvTooManySges { .. })
    ));
    let big = [DataSeg {
        addr: 0,
        len: u32::MAX,
        lkey: 1,
    }];
    assert!(q.post(&big, 1).is_err());
    q.ring_doorbell();
    assert_eq!(mem, before);
    assert_eq!(*db, 0);
    assert_eq!(q.slots().held(), 0);
}

/// The descriptions `new` refuses.
#[test]
fn bad_descriptions_are_refused() {
    let (mut mem, mut db) = ring(4, 32);
    let mut d = SrqDesc {
        buf: mem.as_mut_ptr().cast(),
        dbrec: &mut *db,
        stride: 32,
        head: 0,
        tail: 3,
    };
    // SAFETY: `d` describes `mem`: 4 linked WQEs of 32 bytes and one doorbell u32, live for
    // the test.
    assert!(unsafe { SharedReceiveQueue::new(&d, 1) }.is_ok());
    d.stride = 24;
    // SAFETY: `d` lies within `mem` and `db` (4 WQEs of 32 bytes, one u32); `new` refuses it
    // after reading only those.
    assert!(unsafe { SharedReceiveQueue::new(&d, 1) }.is_err());
    d.stride = 32;
    // 3 WQEs: not a power of two.
    d.tail = 2;
    // SAFETY: `d` lies within `mem` and `db` (4 WQEs of 32 bytes, one u32); `new` refuses it
    // after reading only those.
    assert!(unsafe { SharedReceiveQueue::new(&d, 1) }.is_err());
    d.tail = 3;
    // The walk misses WQE 0.
    d.head = 1;
    // SAFETY: `d` lies within `mem` and `db` (4 WQEs of 32 bytes, one u32); `new` refuses it
    // after reading only those.
    assert!(unsafe { SharedReceiveQueue::new(&d, 1) }.is_err());
    d.head = 0;
    d.buf = core::ptr::null_mut();
    // SAFETY: `new` refuses a null `buf` before reading anything; `dbrec` is still live.
    assert!(unsafe { SharedReceiveQueue::new(&d, 1) }.is_err());
}

/// The lkeys a held WQE names, for deregistration.
#[test]
fn slots_say_which_lkeys_held_wqes_name() {
    let s = SrqSlots::new(4, 2);
    s.give(2, 7, [0x300, 0x400].into_iter());
    assert!(s.names(0x400));
    assert!(!s.names(0x500));
    assert_eq!(s.complete(2), Some(7));
    assert!(!s.names(0x400), "completed: the device holds it no more");
}

/// Many pollers complete WQEs at once; the poster relinks each once.
#[test]
fn concurrent_completions_are_each_returned_once() {
    let s = Arc::new(SrqSlots::new(64, 1));
    for i in 0..64 {
        s.give(i, i as u64, core::iter::empty());
    }
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || (0..16u16).filter_map(|k| s.complete(t * 16 + k)).count())
        })
        .collect();
    let done: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(done, 64);
    let mut at = 0;
    let mut back = Vec::new();
    while let Some(i) = s.take_returned(&mut at) {
        back.push(i);
    }
    back.sort();
    assert_eq!(back, (0..64).collect::<Vec<_>>());
}

/// What a test's device holds: (WQE index, wr_id) pairs, in no fixed order.
type Held = Arc<std::sync::Mutex<std::collections::VecDeque<(u16, u64)>>>;

/// `n` threads completing what `held` names through `slots`, out of order
/// (thread 0 from the front, the others from the back), each completion
/// checked to return the wr_id posted into that WQE. They stop once `done`
/// is set, `held` is empty and the device holds no WQE, and return the
/// wr_ids they completed.
fn completers(
    n: usize,
    slots: &Arc<SrqSlots>,
    held: &Held,
    done: &Arc<std::sync::atomic::AtomicBool>,
) -> Vec<std::thread::JoinHandle<Vec<u64>>> {
    (0..n)
        .map(|t| {
            let (slots, held, done) = (slots.clone(), held.clone(), done.clone());
            std::thread::spawn(move || {
                let mut got = Vec::new();
                loop {
                    let next = {
                        let mut d = held.lock().unwrap();
                        if t == 0 {
                            d.pop_front()
                        } else {
                            d.pop_back()
                        }
                    };
                    match next {
                        Some((idx, wr_id)) => {
                            assert_eq!(slots.complete(idx), Some(wr_id), "WQE {idx}");
                            got.push(wr_id);
                        }
                        None if done.load(Ordering::Acquire)
                            && slots.held() == 0
                            && held.lock().unwrap().is_empty() =>
                        {
                            return got
                        }
                        None => std::thread::yield_now(),
                    }
                }
            })
        })
        .collect()
}

/// The poster posts in place (refilling when its room runs out) while
/// three threads play the device and complete what it posted, each taking
/// WQEs in whatever order it finds them: every completion returns the
/// wr_id posted into that WQE (so no WQE the device held was posted
/// again), once; at most `max_wr` are ever outstanding; and at the end the
/// free list, relinked, holds every WQE but the tail, each once.
#[test]
fn in_place_posts_with_completions_on_other_threads() {
    use std::collections::VecDeque;
    use std::sync::atomic::AtomicBool;
    use std::sync::Mutex;
    let (count, stride, max_wr) = (8u32, 32u32, 6u32);
    let posts: u64 = if cfg!(miri) { 60 } else { 20_000 };
    let (mut mem, mut db) = ring(count, stride);
    let mut q = srq(&mut mem, &mut db, count, stride);
    let slots = q.slots().clone();
    // What the device holds: (WQE index, wr_id), in no fixed order.
    let device = Arc::new(Mutex::new(VecDeque::<(u16, u64)>::new()));
    let done = Arc::new(AtomicBool::new(false));
    let completers = completers(3, &slots, &device, &done);
    let s = crate::wqe::Seg::data(0x1000, 64, 0x200);
    for wr_id in 0..posts {
        loop {
            let idx = q.head as u16;
            if q.post_one_seg(&s, 0x200, wr_id) {
                assert!(q.outstanding() <= max_wr);
                device.lock().unwrap().push_back((idx, wr_id));
                break;
            }
            q.refill(max_wr);
            std::thread::yield_now();
        }
    }
    done.store(true, Ordering::Release);
    let mut all: Vec<u64> = completers
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    all.sort_unstable();
    assert_eq!(all, (0..posts).collect::<Vec<_>>());
    assert_eq!(q.outstanding(), 0);
    q.refill(max_wr);
    assert_eq!(q.free(), count - 1);
    // The list from head: every WQE but the tail, once.
    let (mut at, mut seen) = (q.head, vec![false; count as usize]);
    for _ in 0..count - 1 {
        assert!(!seen[at as usize], "WQE {at} twice on the list");
        seen[at as usize] = true;
        at = next_of(&mem, stride, at) as u32;
    }
    assert_eq!(at, q.tail);
}

/// A step of [`model`]: the poster's, the device's or a poller's.
#[derive(Clone, Debug)]
enum Step {
    /// One receive of one SGE in place, refilling once when it declines.
    InPlace,
    /// One receive through the general path (`DirectSrq::post_recv`'s
    /// checks, `post`, doorbell, refill): `n` SGEs, one of them empty if
    /// `empty`.
    General(usize, bool),
    /// The device takes the next posted WQE, following the list.
    Take,
    /// A completion of one of the WQEs the device took (any of them).
    Complete(usize),
    /// A completion naming a WQE the device does not hold.
    Stale(u16),
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        4 => Just(Step::InPlace),
        1 => (1..5usize, any::<bool>()).prop_map(|(n, e)| Step::General(n, e)),
        4 => Just(Step::Take),
        3 => any::<usize>().prop_map(Step::Complete),
        1 => any::<u16>().prop_map(Step::Stale),
    ]
}

/// The SGE lkeys of receive `wr_id` (each distinct, so `names` can be
/// checked exactly).
pub(super) fn lkeys_of(wr_id: u64, n: usize) -> Vec<u32> {
    (0..n as u32).map(|k| (wr_id as u32) << 4 | k).collect()
}

/// Runs `steps` against a model: the device takes posted WQEs by
/// following the ring's list from the first head, so every WQE it takes
/// must be the next one posted, with that receive's data segment, and
/// held; every completion returns its wr_id once; a refused or declined
/// post writes nothing (ring, doorbell record, `outstanding`); a post is
/// refused exactly when `max_wr` are outstanding (the model's polls
/// are all queued, so relinking leaves WQEs free); `names` follows the
/// SGEs' lkeys; and at the end the free list is whole again.
fn model(count: u32, stride: u32, max_wr: u32, steps: &[Step]) {
    use std::collections::VecDeque;
    let (mut mem, mut db) = ring(count, stride);
    let words = mem.len();
    let mut q = srq(&mut mem, &mut db, count, stride);
    // (The queue's own pointers: what it writes through.)
    let (mem_ptr, db_ptr): (*const u64, *const u32) = (q.buf.as_ptr().cast(), q.dbrec);
    // SAFETY: the queue writes through its own pointers; the test reads
    // the same memory between calls (one thread).
    let snap = || unsafe { core::slice::from_raw_parts(mem_ptr, words) }.to_vec();
    // SAFETY: as `snap`'s.
    let dbv = || u32::from_be(unsafe { db_ptr.read() });
    let bytes = |at: usize| -> [u8; 16] {
        // SAFETY: as `snap`'s; `at + 16` is inside the ring.
        unsafe { core::ptr::read(mem_ptr.cast::<u8>().add(at).cast()) }
    };
    let slots = q.slots().clone();
    // Posted, not yet taken: (WQE, wr_id, lkeys); taken, not completed.
    let mut posted = VecDeque::<(u32, u64, Vec<u32>)>::new();
    let mut taken = Vec::<(u32, u64, Vec<u32>)>::new();
    let (mut dev_at, mut dev_taken, mut next_wr) = (0u32, 0u32, 1u64);
    let max_sge = (stride / 16 - 1) as usize;
    let mut run = |s: &Step,
                   q: &mut SharedReceiveQueue,
                   posted: &mut VecDeque<(u32, u64, Vec<u32>)>,
                   taken: &mut Vec<(u32, u64, Vec<u32>)>| {
        let out = (posted.len() + taken.len()) as u32;
        match *s {
            Step::InPlace => {
                let wr = next_wr;
                let lk = lkeys_of(wr, 1)[0];
                let seg = crate::wqe::Seg::data(wr << 8, 64, lk);
                let idx = q.head;
                let (m, d) = (snap(), dbv());
                let mut ok = q.post_one_seg(&seg, lk, wr);
                if !ok {
                    assert_eq!((snap(), dbv(), q.outstanding()), (m, d, out));
                    q.refill(max_wr);
                    let (m, d) = (snap(), dbv());
                    ok = q.post_one_seg(&seg, lk, wr);
                    if !ok {
                        assert_eq!((snap(), dbv(), q.outstanding()), (m, d, out));
                    }
                }
                assert_eq!(ok, out < max_wr, "in place with {out} outstanding");
                if ok {
                    assert_eq!(dbv(), q.counter & 0xffff);
                    posted.push_back((idx, wr, vec![lk]));
                    next_wr += 1;
                }
            }
            Step::General(n, empty) => {
                let wr = next_wr;
                let lk = lkeys_of(wr, n);
                let sges: Vec<DataSeg> = lk
                    .iter()
                    .enumerate()
                    .map(|(k, &lkey)| DataSeg {
                        addr: wr << 8 | k as u64,
                        len: if empty && k == n - 1 && k > 0 { 0 } else { 8 },
                        lkey,
                    })
                    .collect();
                let names: Vec<u32> = sges.iter().filter(|s| s.len != 0).map(|s| s.lkey).collect();
                let full = q.outstanding() + 1 > max_wr || q.free() < 1;
                assert_eq!(full, out >= max_wr, "general with {out} outstanding");
                if full {
                    return;
                }
                let (m, d) = (snap(), dbv());
                let idx = q.head;
                match q.post(&sges, wr) {
                    Err(WqeError::RecvTooManySges { .. }) => {
                        assert!(names.len() > max_sge);
                        q.ring_doorbell();
                        assert_eq!((snap(), dbv(), q.outstanding()), (m, d, out));
                    }
                    r => {
                        assert_eq!(r.unwrap(), idx);
                        assert!(names.len() <= max_sge);
                        q.ring_doorbell();
                        q.refill(max_wr);
                        for &k in &names {
                            assert!(slots.names(k), "lkey {k:#x} of a held WQE");
                        }
                        posted.push_back((idx, wr, names));
                        next_wr += 1;
                    }
                }
            }
            Step::Take => {
                assert_eq!(
                    dbv().wrapping_sub(dev_taken) & 0xffff,
                    posted.len() as u32,
                    "the doorbell record counts every post"
                );
                let Some((idx, wr, lk)) = posted.pop_front() else {
                    return;
                };
                assert_eq!(dev_at, idx, "the device follows the list");
                assert!(slots.is_held(idx as usize));
                let base = (idx * stride) as usize;
                let first = crate::wqe::decode_data_seg(&bytes(base + SRQ_NEXT_SEG));
                assert_eq!((first.addr >> 8, first.lkey), (wr, lk[0]));
                dev_at = next_of(&mem_view(mem_ptr, words), stride, idx) as u32;
                dev_taken = dev_taken.wrapping_add(1);
                taken.push((idx, wr, lk));
            }
            Step::Complete(k) => {
                if taken.is_empty() {
                    return;
                }
                let (idx, wr, lk) = taken.swap_remove(k % taken.len());
                assert_eq!(slots.complete(idx as u16), Some(wr));
                assert_eq!(slots.complete(idx as u16), None, "completed once");
                for k in lk {
                    assert!(!slots.names(k), "lkey {k:#x} completed");
                }
            }
            Step::Stale(i) => {
                let held = posted.iter().chain(taken.iter()).any(|p| p.0 == i as u32);
                if !held {
                    assert_eq!(slots.complete(i), None);
                }
            }
        }
        let out = (posted.len() + taken.len()) as u32;
        assert_eq!(q.outstanding(), out);
        assert_eq!(slots.held(), out);
        assert!(out <= max_wr);
    };
    for s in steps {
        run(s, &mut q, &mut posted, &mut taken);
    }
    while !posted.is_empty() || !taken.is_empty() {
        run(&Step::Take, &mut q, &mut posted, &mut taken);
        run(&Step::Complete(0), &mut q, &mut posted, &mut taken);
    }
    q.refill(max_wr);
    assert_eq!(q.free(), count - 1);
    let mem = mem_view(mem_ptr, words);
    let (mut at, mut seen) = (q.head, vec![false; count as usize]);
    for _ in 0..count - 1 {
        assert!(!seen[at as usize], "WQE {at} twice on the list");
        seen[at as usize] = true;
        at = next_of(&mem, stride, at) as u32;
    }
    assert_eq!(at, q.tail);
    assert_eq!(q.head, dev_at, "the device's next WQE is the list's head");
}

fn mem_view(p: *const u64, words: usize) -> Vec<u64> {
    // SAFETY: the ring's words, alive (the model's `mem`); read between
    // the queue's calls, on one thread.
    unsafe { core::slice::from_raw_parts(p, words) }.to_vec()
}

/// Steps per [`model`] case (few under Miri).
const MODEL_STEPS: usize = if cfg!(miri) { 40 } else { 400 };

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(
        if cfg!(miri) { 2 } else { 128 }
    ))]

    /// [`model`]: random posts (in place and general, multi-SGE),
    /// device takes and out-of-order completions over many laps.
    #[test]
    fn posts_takes_and_completions_against_a_model(
        count_log in 2u32..5,
        stride_log in 5u32..8,
        wr in proptest::prelude::any::<u32>(),
        steps in proptest::collection::vec(step(), 0..MODEL_STEPS),
    ) {
        let count = 1 << count_log;
        model(count, 1 << stride_log, 1 + wr % (count - 1), &steps);
    }
}

/// The device on its own thread, following the ring's list from the
/// doorbell record (acquire) as hardware does, while two threads complete
/// what it took in any order and the poster posts in place and, every
/// seventh receive, through the general path with two SGEs: the device
/// finds each WQE it takes held and written with the receive posted next
/// (so relinking never wrote a WQE the device may read), and each wr_id
/// completes once. Under Miri its race detector checks the ring's plain
/// writes and reads.
#[test]
fn device_thread_follows_the_list_while_others_complete() {
    use std::collections::VecDeque;
    use std::sync::atomic::AtomicBool;
    use std::sync::Mutex;
    let (count, stride, max_wr) = (8u32, 64u32, 7u32);
    let posts: u64 = if cfg!(miri) { 40 } else { 20_000 };
    let (mut mem, mut db) = ring(count, stride);
    let mut q = srq(&mut mem, &mut db, count, stride);
    // (The queue's own pointers: what it writes through.)
    let (ring_at, db_at) = (q.buf.as_ptr() as usize, q.dbrec as usize);
    let slots = q.slots().clone();
    let took = Arc::new(Mutex::new(VecDeque::<(u16, u64)>::new()));
    let done = Arc::new(AtomicBool::new(false));
    let device = {
        let (slots, took, done) = (slots.clone(), took.clone(), done.clone());
        std::thread::spawn(move || {
            let (mut at, mut seen, mut next_wr) = (0u32, 0u32, 0u64);
            loop {
                // SAFETY: the test's doorbell record, alive until joined.
                let posted = unsafe { crate::mmio::read_dbrec(db_at as *const u32) };
                if posted == seen & 0xffff {
                    if done.load(Ordering::Acquire) && next_wr == posts {
                        return;
                    }
                    std::thread::yield_now();
                    continue;
                }
                assert!(slots.is_held(at as usize), "WQE {at} taken unheld");
                let base = ring_at + (at * stride) as usize;
                // SAFETY: WQE `at` of the ring, alive until joined; posted
                // (the doorbell record's acquire orders its writes first).
                let (next, data) = unsafe {
                    (
                        core::ptr::read(base as *const [u8; SRQ_NEXT_SEG]),
                        core::ptr::read((base + SRQ_NEXT_SEG) as *const [u8; 16]),
                    )
                };
                let d = crate::wqe::decode_data_seg(&data);
                assert_eq!(d.addr >> 8, next_wr, "WQE {at}: the next receive posted");
                took.lock().unwrap().push_back((at as u16, next_wr));
                next_wr += 1;
                seen += 1;
                at = decode_srq_next_seg(&next) as u32;
            }
        })
    };
    let completers = completers(2, &slots, &took, &done);
    for wr_id in 0..posts {
        let s = crate::wqe::Seg::data(wr_id << 8, 64, 0x200);
        loop {
            let ok = if wr_id % 7 == 3 {
                let two = [
                    DataSeg {
                        addr: wr_id << 8,
                        len: 8,
                        lkey: 0x300,
                    },
                    DataSeg {
                        addr: 1,
                        len: 8,
                        lkey: 0x301,
                    },
                ];
                let room = q.outstanding() < max_wr && q.free() > 0;
                if room {
                    q.post(&two, wr_id).unwrap();
                    q.ring_doorbell();
                    q.refill(max_wr);
                }
                room
            } else {
                q.post_one_seg(&s, 0x200, wr_id)
            };
            if ok {
                assert!(q.outstanding() <= max_wr);
                break;
            }
            q.refill(max_wr);
            std::thread::yield_now();
        }
    }
    done.store(true, Ordering::Release);
    device.join().unwrap();
    let mut all: Vec<u64> = completers
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    all.sort_unstable();
    assert_eq!(all, (0..posts).collect::<Vec<_>>());
    assert_eq!(q.outstanding(), 0);
    assert_eq!(q.free(), count - 1);
}

/// The verbs backend's use of the slots (`backend/verbs/srq.rs`): every
/// slot posted (no tail), a free list of slots, `take_returned` clearing
/// each word it takes; over many laps of a return queue as long as the
/// slots (4) or longer (5 slots: 8 words), with completions on two
/// threads in any order: each slot comes back once per post, with its
/// wr_id, and none twice.
#[test]
fn verbs_style_free_list_over_many_laps() {
    use std::collections::VecDeque;
    use std::sync::atomic::AtomicBool;
    use std::sync::Mutex;
    for n in [4u32, 5] {
        let posts: u64 = if cfg!(miri) { 30 } else { 20_000 };
        let s = Arc::new(SrqSlots::new(n, 2));
        let queue = Arc::new(Mutex::new(VecDeque::<(u16, u64)>::new()));
        let done = Arc::new(AtomicBool::new(false));
        let pollers = completers(2, &s, &queue, &done);
        let (mut free, mut at): (Vec<u32>, u64) = ((0..n).collect(), 0);
        for wr_id in 0..posts {
            let i = loop {
                while let Some(i) = s.take_returned(&mut at) {
                    assert!(!free.contains(&i), "slot {i} returned twice");
                    free.push(i);
                }
                match free.pop() {
                    Some(i) => break i,
                    None => std::thread::yield_now(),
                }
            };
            s.give(i, wr_id, [wr_id as u32, !(wr_id as u32)].into_iter());
            queue.lock().unwrap().push_back((i as u16, wr_id));
        }
        done.store(true, Ordering::Release);
        for p in pollers {
            p.join().unwrap();
        }
        while let Some(i) = s.take_returned(&mut at) {
            assert!(!free.contains(&i), "slot {i} returned twice");
            free.push(i);
        }
        free.sort_unstable();
        assert_eq!(free, (0..n).collect::<Vec<_>>());
        assert_eq!(s.completed() as u64, posts);
        assert_eq!(s.held(), 0);
    }
}
