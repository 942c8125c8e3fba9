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
fn ring(count: u32, stride: u32) -> (Vec<u64>, Box<u32>) {
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

fn srq(mem: &mut [u64], db: &mut u32, count: u32, stride: u32) -> SharedReceiveQueue {
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

fn next_of(mem: &[u64], stride: u32, idx: u32) -> u16 {
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
    let completers: Vec<_> = (0..3)
        .map(|t| {
            let (slots, device, done) = (slots.clone(), device.clone(), done.clone());
            std::thread::spawn(move || {
                let mut got = Vec::new();
                loop {
                    // Take from the front or the back: completions out of order.
                    let next = {
                        let mut d = device.lock().unwrap();
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
                        None if done.load(Ordering::Acquire) => return got,
                        None => std::thread::yield_now(),
                    }
                }
            })
        })
        .collect();
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
