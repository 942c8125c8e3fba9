//! The one-opcode review, continued: long mixed streams compared with a QP
//! driven only through `post_send`, shared CQs, MR lifetime, tracing, and
//! batches behind unsignaled WRs (see `review_one_opcode.rs`).

use rdma_direct::testing::QpHooks;
use rdma_direct::*;
use std::time::{Duration, Instant};

#[path = "support/one_opcode.rs"]
mod support;
use support::*;

// ---------------------------------------------------------------------
// Lockstep streams against post_send
// ---------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Write {
        id: u64,
        off: usize,
        len: u32,
        f: SendFlags,
    },
    Inline {
        id: u64,
        len: usize,
        f: SendFlags,
    },
    Writes(Vec<(u64, usize, u32, SendFlags)>),
    /// post_send on both: a batch of plain WRITEs / one WRITE.
    Send(Vec<(u64, usize, u32, SendFlags)>),
}

fn rand_flags(rng: &mut Rng, p_sig: u64) -> SendFlags {
    let mut f = SendFlags::empty();
    if rng.below(100) < p_sig {
        f |= SendFlags::SIGNALED;
    }
    if rng.below(8) == 0 {
        f |= SendFlags::SOLICITED;
    }
    if rng.below(8) == 0 {
        f |= SendFlags::FENCE;
    }
    f
}

fn rand_op(rng: &mut Rng, id: &mut u64, max_batch: u64, max_inline: usize, p_sig: u64) -> Op {
    let mut next = || {
        *id += 1;
        *id
    };
    let one = |rng: &mut Rng, id: u64| {
        (
            id,
            rng.below(1024) as usize,
            rng.below(200) as u32 + (rng.below(10) != 0) as u32,
            rand_flags(rng, p_sig),
        )
    };
    match rng.below(4) {
        0 => {
            let (id, off, len, f) = one(rng, next());
            Op::Write { id, off, len, f }
        }
        1 => Op::Inline {
            id: next(),
            len: rng.below(max_inline as u64 + 1) as usize,
            f: rand_flags(rng, p_sig),
        },
        k => {
            let n = 1 + rng.below(max_batch);
            let v = (0..n).map(|_| one(rng, next())).collect();
            if k == 2 {
                Op::Writes(v)
            } else {
                Op::Send(v)
            }
        }
    }
}

/// Posts `op` on `a` with the new APIs (or post_send for `Op::Send`) and
/// on `b` with post_send; returns both results.
fn apply(e: &Env, data: &[u8], op: &Op, q: &mut Qp, reference: bool) -> Result<()> {
    let r = |id: u64| to(&e.dst, (id % 64) * 512);
    let ww = |&(id, off, len, f): &(u64, usize, u32, SendFlags)| WriteWr {
        wr_id: id,
        sge: Sge::new(&e.src, off, len).unwrap(),
        remote: r(id),
        flags: f,
    };
    match op {
        Op::Write { id, off, len, f } => {
            let w = ww(&(*id, *off, *len, *f));
            if reference {
                q.post_send(&[w.to_send_wr()])
            } else {
                q.post_write(&w)
            }
        }
        Op::Inline { id, len, f } => {
            if reference {
                let by = [Sge::bytes(&data[..*len]).unwrap()];
                q.post_send(&[with_flags(
                    SendWr::rdma_write(*id, &by, r(*id)).inline(),
                    *f,
                )])
            } else {
                q.post_write_inline(*id, &data[..*len], r(*id), *f)
            }
        }
        Op::Writes(v) => {
            let ws: Vec<WriteWr<'_>> = v.iter().map(ww).collect();
            if reference {
                let s: Vec<SendWr<'_>> = ws.iter().map(WriteWr::to_send_wr).collect();
                q.post_send(&s)
            } else {
                q.post_writes(&ws)
            }
        }
        Op::Send(v) => {
            let ws: Vec<WriteWr<'_>> = v.iter().map(ww).collect();
            let s: Vec<SendWr<'_>> = ws.iter().map(WriteWr::to_send_wr).collect();
            q.post_send(&s)
        }
    }
}

fn signaled_ids(op: &Op) -> Vec<u64> {
    match op {
        Op::Write { id, f, .. } | Op::Inline { id, f, .. } => {
            if f.contains(SendFlags::SIGNALED) {
                vec![*id]
            } else {
                vec![]
            }
        }
        Op::Writes(v) | Op::Send(v) => v
            .iter()
            .filter(|x| x.3.contains(SendFlags::SIGNALED))
            .map(|x| x.0)
            .collect(),
    }
}

/// Drives `a` with the new APIs and `b` with post_send through the same
/// stream; after each post the rings match. Refusals for a full queue or
/// CQ are cured by polling (never for ever); every completion reported is
/// a signaled WR's, in order, on both.
fn lockstep(c: &QpConfig, seed: u64, steps: usize, p_sig: u64, label: &str) {
    let e = env();
    let (mut a, _pa) = e.pd.create_connected_pair(c).unwrap();
    let (mut b, _pb) = e.pd.create_connected_pair(c).unwrap();
    let max_inline = (a.max_inline() as usize).min(256);
    let data: Vec<u8> = (0..1024u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut rng = Rng(seed);
    let mut id = 0;
    let (mut got_a, mut got_b, mut want) = (Vec::new(), Vec::new(), Vec::new());
    // Batches no trailing run of unsignaled WRs (at most the auto-signal
    // period less one, holding the SQ and CQ credits for good) can block:
    // larger ones may be refused for ever by post_send too (see
    // `batches_within_max_send_wr_refused_for_ever`).
    let period = (c.max_send_wr / 2).max(1);
    let sq_safe = c.max_send_wr - (period - 1);
    let cq_safe = if c.cq_depth.is_some() {
        a.cq_depth() / 2 + 1
    } else {
        u32::MAX
    };
    let max_batch = (sq_safe.min(cq_safe) as u64).clamp(1, 80);
    let mut pi = 0;
    for step in 0..steps {
        let op = rand_op(&mut rng, &mut id, max_batch, max_inline, p_sig);
        let n = match &op {
            Op::Writes(v) | Op::Send(v) => v.len(),
            _ => 1,
        };
        // Nothing is polled but in a barrier, so the SQ's and the CQ
        // credits' state is a function of the posts alone: both QPs must be
        // refused alike.
        let ra = apply(&e, &data, &op, &mut a, false);
        let rb = apply(&e, &data, &op, &mut b, true);
        match (&ra, &rb) {
            (Ok(()), Ok(())) => {}
            (Err(Error::QueueFull | Error::CqFull), Err(Error::QueueFull | Error::CqFull))
                if format!("{ra:?}") == format!("{rb:?}") =>
            {
                // A barrier on both: a signaled WR, polled with all before it.
                id += 1;
                let bar = Op::Write {
                    id,
                    off: 0,
                    len: 8,
                    f: SendFlags::SIGNALED,
                };
                for (q, got, reference) in [(&mut a, &mut got_a, false), (&mut b, &mut got_b, true)]
                {
                    let t = Instant::now();
                    let mut wc = [Completion::default(); 16];
                    while let Err(x) = apply(&e, &data, &bar, q, reference) {
                        assert!(
                            matches!(x, Error::QueueFull | Error::CqFull),
                            "{label}: barrier: {x:?}"
                        );
                        let k = q.poll(&mut wc).unwrap();
                        got.extend(wc[..k].iter().map(|c| (c.wr_id, c.status)));
                        std::thread::yield_now();
                        assert!(
                            t.elapsed() < PATIENCE,
                            "{label} step {step}: barrier refused for ever (reference {reference})"
                        );
                    }
                    while got.last().map(|x| x.0) != Some(id) {
                        let k = q.poll(&mut wc).unwrap();
                        got.extend(wc[..k].iter().map(|c| (c.wr_id, c.status)));
                        if k == 0 {
                            std::thread::yield_now();
                        }
                        assert!(t.elapsed() < PATIENCE, "{label} step {step}: barrier CQE never came (reference {reference}): {:?}", got.last());
                    }
                }
                want.push(id);
                pi = same_wqes_since(&a, &b, pi, &format!("{label} step {step}: barrier"));
                let ra = apply(&e, &data, &op, &mut a, false);
                let rb = apply(&e, &data, &op, &mut b, true);
                assert!(
                    ra.is_ok() && rb.is_ok(),
                    "{label} step {step}: {op:?} (n {n}) refused with every WR retired: new API {ra:?}, post_send {rb:?}"
                );
            }
            _ => panic!("{label} step {step}: {op:?}: new API {ra:?}, post_send {rb:?}"),
        }
        want.extend(signaled_ids(&op));
        pi = same_wqes_since(&a, &b, pi, &format!("{label} step {step}: {op:?}"));
    }
    // Flush the tail: one signaled WR on each.
    id += 1;
    let last = Op::Write {
        id,
        off: 0,
        len: 8,
        f: SendFlags::SIGNALED,
    };
    for (q, got, reference) in [(&mut a, &mut got_a, false), (&mut b, &mut got_b, true)] {
        let t = Instant::now();
        let mut wc = [Completion::default(); 16];
        while let Err(x) = apply(&e, &data, &last, q, reference) {
            assert!(matches!(x, Error::QueueFull | Error::CqFull), "{x:?}");
            let k = q.poll(&mut wc).unwrap();
            got.extend(wc[..k].iter().map(|c| (c.wr_id, c.status)));
            std::thread::yield_now();
            assert!(t.elapsed() < PATIENCE, "{label}: tail refused for ever");
        }
    }
    want.push(id);
    let na = want.len() - got_a.len();
    got_a.extend(poll_n(&mut a, na).iter().map(|c| (c.wr_id, c.status)));
    let nb = want.len() - got_b.len();
    got_b.extend(poll_n(&mut b, nb).iter().map(|c| (c.wr_id, c.status)));
    assert!(drain(&mut a).is_empty(), "{label}: extra completions on a");
    let ids: Vec<u64> = got_a.iter().map(|x| x.0).collect();
    assert_eq!(ids, want, "{label}: wr_ids reported by the new APIs");
    assert_eq!(got_a, got_b, "{label}");
    assert!(
        got_a.iter().all(|x| x.1 == WcStatus::SUCCESS),
        "{label}: {got_a:?}"
    );
}

/// Long mostly-unsignaled streams on tiny SQs (1, 2, 3, 4, 5 WRs) through
/// all three APIs mixed with post_send: never refused for ever, no hidden
/// CQE reported, rings identical to post_send's.
#[test]
fn lockstep_tiny_sqs_unsignaled() {
    for send in [1u32, 2, 3, 4, 5] {
        for seed in [1u64, 2, 3] {
            lockstep(
                &cfg(send, 64),
                seed * 77 + send as u64,
                400,
                3,
                &format!("sq {send} seed {seed}"),
            );
        }
    }
}

#[test]
fn lockstep_mid_sqs() {
    for send in [7u32, 16, 33, 64, 100] {
        for (seed, p) in [(11u64, 0u64), (12, 10), (13, 50)] {
            lockstep(
                &cfg(send, 220),
                seed * 1000 + send as u64,
                300,
                p,
                &format!("sq {send} p {p}"),
            );
        }
    }
}

/// Shallow own CQs: CQ credits counted (the one-opcode posts take
/// post_send); CqFull cured by polling.
#[test]
fn lockstep_shallow_cqs() {
    for send in [1u32, 2, 3, 4, 8, 16] {
        for cq in [1u32, 2, 3, 5] {
            let c = QpConfig {
                cq_depth: Some(cq),
                ..cfg(send, 64)
            };
            lockstep(
                &c,
                (send * 31 + cq) as u64,
                250,
                5,
                &format!("sq {send} cq {cq}"),
            );
        }
    }
}

// ---------------------------------------------------------------------
// Shared CQs
// ---------------------------------------------------------------------

/// Two QPs on one shallow shared CQ through the three APIs: CqFull comes,
/// polling cures it, every signaled wr_id comes once, no hidden one.
#[test]
fn shared_cq_credits() {
    let e = env();
    for (send, depth) in [(2u32, 2u32), (4, 3), (8, 4), (16, 8)] {
        let c = cfg(send, 64);
        let mut cq = e.pd.create_shared_cq(depth).unwrap();
        let x = cq.create_qp(&c).unwrap();
        let y = cq.create_qp(&c).unwrap();
        let (mut px, mut py) = (e.pd.create_qp(&c).unwrap(), e.pd.create_qp(&c).unwrap());
        Qp::connect_loopback(cq.qp_mut(x), &mut px).unwrap();
        Qp::connect_loopback(cq.qp_mut(y), &mut py).unwrap();
        let r = to(&e.dst, 0);
        let sg = Sge::new(&e.src, 0, 16).unwrap();
        let mut rng = Rng(depth as u64 * 99 + send as u64);
        let mut want: Vec<u64> = Vec::new();
        let mut seen: Vec<u64> = Vec::new();
        let mut fulls = 0;
        let mut wc = [Completion::default(); 16];
        let mut id = 0u64;
        let mut invalid = 0;
        for _ in 0..400 {
            let q = if rng.below(2) == 0 { x } else { y };
            let sig = rng.below(4) == 0;
            let f = if sig {
                SendFlags::SIGNALED
            } else {
                SendFlags::empty()
            };
            id += 1;
            let kind = rng.below(4);
            // (At most depth / 2 + 1: see `lockstep`.)
            let n = 1 + rng.below(send.min(depth / 2 + 1) as u64) as usize;
            let t = Instant::now();
            loop {
                let r = match kind {
                    0 => cq.qp_mut(q).post_write(&WriteWr {
                        wr_id: id,
                        sge: sg,
                        remote: r,
                        flags: f,
                    }),
                    1 => cq.qp_mut(q).post_write_inline(id, b"hello", r, f),
                    2 => {
                        let v: Vec<WriteWr<'_>> = (0..n)
                            .map(|k| WriteWr {
                                wr_id: id * 1000 + k as u64,
                                sge: sg,
                                remote: r,
                                flags: f,
                            })
                            .collect();
                        cq.qp_mut(q).post_writes(&v)
                    }
                    _ => cq.qp_mut(q).post_send(&[WriteWr {
                        wr_id: id,
                        sge: sg,
                        remote: r,
                        flags: f,
                    }
                    .to_send_wr()]),
                };
                match r {
                    Ok(()) => {
                        if sig {
                            if kind == 2 {
                                want.extend((0..n).map(|k| id * 1000 + k as u64));
                            } else {
                                want.push(id);
                            }
                        }
                        break;
                    }
                    Err(Error::CqFull | Error::QueueFull) => {
                        fulls += 1;
                        let k = cq.poll(&mut wc).unwrap();
                        for c in &wc[..k] {
                            assert!(c.status.is_ok(), "{c:?}");
                            seen.push(c.wr_id);
                        }
                        if k == 0 {
                            std::thread::yield_now();
                        }
                    }
                    Err(Error::Invalid(m)) => {
                        // A batch that can never fit the CQ.
                        invalid += 1;
                        assert!(kind == 2, "{m}");
                        break;
                    }
                    Err(x) => panic!("{x:?}"),
                }
                assert!(
                    t.elapsed() < PATIENCE,
                    "send {send} depth {depth}: stuck at {id} kind {kind} n {n}"
                );
            }
        }
        // Flush each QP's tail.
        for q in [x, y] {
            id += 1;
            let t = Instant::now();
            while let Err(x) = cq.qp_mut(q).post_write(&WriteWr {
                wr_id: id,
                sge: sg,
                remote: r,
                flags: SendFlags::SIGNALED,
            }) {
                assert!(matches!(x, Error::CqFull | Error::QueueFull), "{x:?}");
                let k = cq.poll(&mut wc).unwrap();
                seen.extend(wc[..k].iter().map(|c| c.wr_id));
                std::thread::yield_now();
                assert!(t.elapsed() < PATIENCE);
            }
            want.push(id);
        }
        let t = Instant::now();
        while seen.len() < want.len() {
            let k = cq.poll(&mut wc).unwrap();
            seen.extend(wc[..k].iter().map(|c| c.wr_id));
            if k == 0 {
                std::thread::yield_now();
            }
            assert!(t.elapsed() < PATIENCE, "{} of {}", seen.len(), want.len());
        }
        let (mut s, mut w) = (seen.clone(), want.clone());
        s.sort();
        w.sort();
        assert_eq!(
            s, w,
            "send {send} depth {depth}: reported wr_ids (fulls {fulls}, invalid {invalid})"
        );
    }
}

// ---------------------------------------------------------------------
// MR lifetime
// ---------------------------------------------------------------------

/// An MR dropped while a post_write / post_writes WR names it waits for
/// the WR to retire (as for post_send's), then goes.
#[test]
fn dropped_mrs_wait_for_one_opcode_wrs() {
    let e = env();
    let (mut a, _b) = e.pd.create_connected_pair(&cfg(16, 64)).unwrap();
    let base = e.pd.live_mrs();
    let m1 = e.pd.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    let m2 = e.pd.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    let r = to(&e.dst, 0);
    a.post_write(&WriteWr::new(1, Sge::new(&m1, 0, 8).unwrap(), r))
        .unwrap();
    a.post_writes(&[
        WriteWr::new(2, Sge::new(&m2, 0, 8).unwrap(), r),
        WriteWr::new(3, Sge::new(&m2, 8, 8).unwrap(), r),
    ])
    .unwrap();
    drop((m1, m2));
    assert_eq!(e.pd.live_mrs(), base + 2, "dropped while WRs outstanding");
    assert!(drain(&mut a).is_empty());
    e.pd.reclaim();
    assert_eq!(e.pd.live_mrs(), base + 2, "still outstanding (unsignaled)");
    a.post_write_inline(4, b"z", r, SendFlags::SIGNALED)
        .unwrap();
    assert_eq!(poll_n(&mut a, 1)[0].wr_id, 4);
    e.pd.reclaim();
    assert_eq!(e.pd.live_mrs(), base);
    // And a single one, signaled, then RESET with it outstanding.
    let m3 = e.pd.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    a.post_write(&WriteWr::new(5, Sge::new(&m3, 0, 8).unwrap(), r))
        .unwrap();
    drop(m3);
    assert_eq!(e.pd.live_mrs(), base + 1);
    a.modify(QpState::Reset, &QpAttr::default()).unwrap();
    assert_eq!(e.pd.live_mrs(), base);
}

// ---------------------------------------------------------------------
// Tracing
// ---------------------------------------------------------------------

/// The child of `trace_shows_every_one_opcode_wqe`.
#[test]
#[ignore = "the child of trace_shows_every_one_opcode_wqe, which runs it"]
fn review_trace_child() {
    assert!(std::env::var("REVIEW_TRACE_CHILD").is_ok());
    let e = env();
    let (mut a, _b) = e.pd.create_connected_pair(&cfg(8, 200)).unwrap();
    let r = to(&e.dst, 0);
    let sg = Sge::new(&e.src, 0, 8).unwrap();
    let d = [3u8; 200];
    let mut posts = 0;
    for i in 0..60u64 {
        let f = if i % 2 == 0 {
            SendFlags::SIGNALED
        } else {
            SendFlags::empty()
        };
        let n = match i % 5 {
            0 => {
                a.post_write(&WriteWr {
                    wr_id: i,
                    sge: sg,
                    remote: r,
                    flags: f,
                })
                .unwrap();
                1
            }
            1 => {
                a.post_write_inline(i, &d[..(i as usize * 37) % 201], r, f)
                    .unwrap();
                1
            }
            2 => {
                let k = 1 + (i as usize % 3);
                let v: Vec<WriteWr<'_>> = (0..k)
                    .map(|j| WriteWr {
                        wr_id: i * 10 + j as u64,
                        sge: sg,
                        remote: r,
                        flags: SendFlags::empty(),
                    })
                    .collect();
                a.post_writes(&v).unwrap();
                k
            }
            3 => {
                a.post_writes(&[WriteWr {
                    wr_id: i,
                    sge: sg,
                    remote: r,
                    flags: f,
                }])
                .unwrap();
                1
            }
            _ => {
                a.post_send(&[WriteWr {
                    wr_id: i,
                    sge: sg,
                    remote: r,
                    flags: f,
                }
                .to_send_wr()])
                    .unwrap();
                1
            }
        };
        posts += n;
        // Retire everything.
        a.post_write(&WriteWr {
            wr_id: 7777,
            sge: sg,
            remote: r,
            flags: SendFlags::SIGNALED,
        })
        .unwrap();
        posts += 1;
        let want = 1 + (f.contains(SendFlags::SIGNALED) && i % 5 != 2) as usize;
        poll_n(&mut a, want);
    }
    // A shallow CQ (credits counted: post_writes in place, the others
    // through post_send).
    let c = QpConfig {
        cq_depth: Some(4),
        ..cfg(8, 200)
    };
    let (mut s, _sb) = e.pd.create_connected_pair(&c).unwrap();
    for i in 0..30u64 {
        let n = match i % 3 {
            0 => {
                s.post_write(&WriteWr {
                    wr_id: i,
                    sge: sg,
                    remote: r,
                    flags: SendFlags::SIGNALED,
                })
                .unwrap();
                1
            }
            1 => {
                s.post_write_inline(i, &d[..(i as usize * 7) % 200], r, SendFlags::SIGNALED)
                    .unwrap();
                1
            }
            _ => {
                s.post_writes(&[
                    WriteWr {
                        wr_id: 1000 + i,
                        sge: sg,
                        remote: r,
                        flags: SendFlags::empty(),
                    },
                    WriteWr {
                        wr_id: i,
                        sge: sg,
                        remote: r,
                        flags: SendFlags::SIGNALED,
                    },
                ])
                .unwrap();
                2
            }
        };
        posts += n;
        poll_n(&mut s, 1);
    }
    eprintln!("REVIEW expect posts {posts}");
}

#[test]
fn trace_shows_every_one_opcode_wqe() {
    let err = traced_child("review_trace_child", "REVIEW_TRACE_CHILD");
    let posts = err
        .lines()
        .filter(|l| l.contains("rdma-direct trace: QP") && l.contains(" post wr_id"))
        .count();
    let undecodable = err.lines().filter(|l| l.contains("undecodable")).count();
    let exp = err
        .lines()
        .find(|l| l.starts_with("REVIEW expect"))
        .unwrap_or_else(|| panic!("{err}"));
    let want: usize = exp.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert_eq!(undecodable, 0);
    assert_eq!(posts, want, "traced posts");
}

// ---------------------------------------------------------------------
// Refused for ever
// ---------------------------------------------------------------------

/// A batch within max_send_wr (so not `Error::Invalid`) after a few
/// unsignaled WRs: auto-signal leaves up to `max_send_wr / 2 - 1` trailing
/// unsignaled WRs outstanding with no CQE to come, so a batch larger than
/// the rest is `QueueFull` however long one polls, by post_writes as by
/// post_send. What `Error::QueueFull` documents for it holds: a signaled
/// WR posted, its completion polled, and the batch fits.
#[test]
fn a_batch_behind_unsignaled_wrs_needs_a_signaled_one() {
    let e = env();
    let c = cfg(8, 64);
    let r = to(&e.dst, 0);
    let g = WriteWr::new(1, Sge::new(&e.src, 0, 8).unwrap(), r);
    for api in ["post_writes", "post_send"] {
        let (mut a, _pa) = e.pd.create_connected_pair(&c).unwrap();
        // Three unsignaled WRs (auto-signal period 4: none is forced).
        for _ in 0..3 {
            a.post_write(&g).unwrap();
        }
        let batch = vec![WriteWr { wr_id: 2, ..g }.signaled(); 8];
        let sends: Vec<SendWr<'_>> = batch.iter().map(WriteWr::to_send_wr).collect();
        let post = |a: &mut Qp| {
            if api == "post_send" {
                a.post_send(&sends)
            } else {
                a.post_writes(&batch)
            }
        };
        let before = a.sq_snapshot().unwrap();
        assert!(matches!(post(&mut a), Err(Error::QueueFull)), "{api}");
        assert_eq!(before, a.sq_snapshot().unwrap(), "{api}: refusal wrote");
        // Nothing comes for the unsignaled WRs...
        assert!(drain(&mut a).is_empty(), "{api}");
        assert!(matches!(post(&mut a), Err(Error::QueueFull)), "{api}");
        // ... until a signaled one is posted and completes.
        a.post_write(&WriteWr { wr_id: 3, ..g }.signaled()).unwrap();
        assert_eq!(poll_n(&mut a, 1)[0].wr_id, 3, "{api}");
        post(&mut a).unwrap();
        let got = poll_n(&mut a, 8);
        assert!(
            got.iter().all(|c| c.wr_id == 2 && c.status.is_ok()),
            "{api}: {got:?}"
        );
    }
}

/// The same on a shared CQ's credits: a QP leaves an unsignaled WR holding
/// a credit (no CQE will come for it), and a batch of `depth` WRs (not
/// Invalid: it fits the CQ) is `CqFull` until that QP posts a signaled WR
/// and its completion is polled, as `Error::CqFull` documents.
#[test]
fn a_shared_cq_batch_behind_unsignaled_wrs_needs_a_signaled_one() {
    let e = env();
    let c = cfg(8, 64);
    let r = to(&e.dst, 0);
    let g = WriteWr::new(1, Sge::new(&e.src, 0, 8).unwrap(), r);
    for api in ["post_writes", "post_send"] {
        let mut cq = e.pd.create_shared_cq(4).unwrap();
        let x = cq.create_qp(&c).unwrap();
        let y = cq.create_qp(&c).unwrap();
        let (mut px, mut py) = (e.pd.create_qp(&c).unwrap(), e.pd.create_qp(&c).unwrap());
        Qp::connect_loopback(cq.qp_mut(x), &mut px).unwrap();
        Qp::connect_loopback(cq.qp_mut(y), &mut py).unwrap();
        cq.qp_mut(x).post_write(&g).unwrap();
        cq.qp_mut(y).post_write(&g).unwrap();
        let batch = vec![WriteWr { wr_id: 2, ..g }.signaled(); 4];
        let sends: Vec<SendWr<'_>> = batch.iter().map(WriteWr::to_send_wr).collect();
        let post = |q: &mut Qp| {
            if api == "post_send" {
                q.post_send(&sends)
            } else {
                q.post_writes(&batch)
            }
        };
        let mut wc = [Completion::default(); 8];
        let mut got = Vec::new();
        let t = Instant::now();
        // Polling alone does not cure it: y's hidden CQE comes back, x's
        // unsignaled WR keeps its credit.
        while t.elapsed() < Duration::from_millis(200) {
            assert!(matches!(post(cq.qp_mut(x)), Err(Error::CqFull)), "{api}");
            let k = cq.poll(&mut wc).unwrap();
            assert_eq!(k, 0, "{api}: a hidden CQE reported: {:?}", &wc[..k]);
            std::thread::yield_now();
        }
        cq.qp_mut(x)
            .post_write(&WriteWr { wr_id: 3, ..g }.signaled())
            .unwrap();
        while got.is_empty() {
            let k = cq.poll(&mut wc).unwrap();
            got.extend(wc[..k].iter().map(|c| c.wr_id));
            assert!(t.elapsed() < PATIENCE, "{api}");
            std::thread::yield_now();
        }
        assert_eq!(got, [3], "{api}");
        post(cq.qp_mut(x)).unwrap();
        while got.len() < 5 {
            let k = cq.poll(&mut wc).unwrap();
            got.extend(wc[..k].iter().map(|c| c.wr_id));
            assert!(t.elapsed() < PATIENCE, "{api}");
            std::thread::yield_now();
        }
        assert_eq!(got, [3, 2, 2, 2, 2], "{api}");
    }
}

// ---------------------------------------------------------------------
// Errors, flushes, shared-CQ reset
// ---------------------------------------------------------------------

/// A stream with a WRITE to a bad rkey in the middle (unsignaled), then
/// more through every API: the completions (error, then flushes) are
/// those of the same stream through post_send.
#[test]
fn errors_and_flushes_as_post_send() {
    let e = env();
    let c = cfg(16, 64);
    let bad = RemoteAddr {
        addr: 0x10,
        rkey: Rkey(0xdead),
    };
    let r = to(&e.dst, 0);
    let sg = Sge::new(&e.src, 0, 8).unwrap();
    let mut results = Vec::new();
    for reference in [false, true] {
        let (mut a, _b) = e.pd.create_connected_pair(&c).unwrap();
        let w = |id: u64, remote: RemoteAddr, f: SendFlags| WriteWr {
            wr_id: id,
            sge: sg,
            remote,
            flags: f,
        };
        let post = |a: &mut Qp, ws: &[WriteWr<'_>], single: bool| {
            if reference {
                let s: Vec<SendWr<'_>> = ws.iter().map(WriteWr::to_send_wr).collect();
                a.post_send(&s).unwrap()
            } else if single {
                a.post_write(&ws[0]).unwrap()
            } else {
                a.post_writes(ws).unwrap()
            }
        };
        post(&mut a, &[w(1, r, SendFlags::empty())], true);
        post(&mut a, &[w(2, bad, SendFlags::empty())], true);
        post(
            &mut a,
            &[w(3, r, SendFlags::empty()), w(4, r, SendFlags::SIGNALED)],
            false,
        );
        if reference {
            let by = [Sge::bytes(b"abc").unwrap()];
            a.post_send(&[SendWr::rdma_write(5, &by, r).inline()])
                .unwrap();
        } else {
            a.post_write_inline(5, b"abc", r, SendFlags::empty())
                .unwrap();
        }
        post(&mut a, &[w(6, r, SendFlags::SIGNALED)], false);
        let got = poll_n(&mut a, 5);
        let mut v: Vec<(u64, WcStatus)> = got.iter().map(|c| (c.wr_id, c.status)).collect();
        v.extend(drain(&mut a).iter().map(|c| (c.wr_id, c.status)));
        // In ERR (device side): more posts are flushed.
        post(&mut a, &[w(7, r, SendFlags::empty())], true);
        post(
            &mut a,
            &[w(8, r, SendFlags::empty()), w(9, r, SendFlags::SIGNALED)],
            false,
        );
        v.extend(poll_n(&mut a, 3).iter().map(|c| (c.wr_id, c.status)));
        v.extend(drain(&mut a).iter().map(|c| (c.wr_id, c.status)));
        results.push(v);
    }
    assert_eq!(results[0], results[1], "new APIs vs post_send");
    assert!(!results[0][0].1.is_ok(), "{:?}", results[0]);
}

/// A QP of a shared CQ reset with unsignaled one-opcode WRs outstanding
/// (SharedCq::reset_qp) gets every credit back and posts again.
#[test]
fn shared_cq_reset_qp_then_post() {
    let e = env();
    let c = cfg(8, 64);
    let mut cq = e.pd.create_shared_cq(8).unwrap();
    let x = cq.create_qp(&c).unwrap();
    let mut px = e.pd.create_qp(&c).unwrap();
    Qp::connect_loopback(cq.qp_mut(x), &mut px).unwrap();
    let r = to(&e.dst, 0);
    let g = WriteWr::new(1, Sge::new(&e.src, 0, 8).unwrap(), r);
    let depth = cq.credits_free();
    cq.qp_mut(x).post_write(&g).unwrap();
    cq.qp_mut(x).post_writes(&[g, g]).unwrap();
    cq.qp_mut(x)
        .post_write_inline(2, b"ab", r, SendFlags::empty())
        .unwrap();
    assert!(cq.credits_free() < depth);
    let err = cq
        .qp_mut(x)
        .modify(QpState::Reset, &QpAttr::default())
        .unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err:?}");
    cq.reset_qp(x).unwrap();
    assert_eq!(cq.credits_free(), depth, "credits back after reset_qp");
    px.modify(QpState::Reset, &QpAttr::default()).unwrap();
    Qp::connect_loopback(cq.qp_mut(x), &mut px).unwrap();
    let mut wc = [Completion::default(); 8];
    for i in 0..30u64 {
        let t = Instant::now();
        let r = match i % 3 {
            0 => cq
                .qp_mut(x)
                .post_write(&WriteWr { wr_id: i, ..g }.signaled()),
            1 => cq
                .qp_mut(x)
                .post_write_inline(i, b"xy", r, SendFlags::SIGNALED),
            _ => cq.qp_mut(x).post_writes(&[
                WriteWr {
                    wr_id: 100 + i,
                    ..g
                },
                WriteWr { wr_id: i, ..g }.signaled(),
            ]),
        };
        r.unwrap();
        loop {
            let k = cq.poll(&mut wc).unwrap();
            if k > 0 {
                assert_eq!(k, 1, "{:?}", &wc[..k]);
                assert_eq!((wc[0].wr_id, wc[0].status), (i, WcStatus::SUCCESS));
                break;
            }
            std::thread::yield_now();
            assert!(t.elapsed() < PATIENCE);
        }
    }
    assert_eq!(cq.credits_free(), depth);
}

/// Odd configs: no send SGE (every one-opcode post refused as post_send
/// refuses it, nothing written) and max_inline 0 (0 inline bytes posted,
/// 1 refused).
#[test]
fn odd_configs_as_post_send() {
    let e = env();
    let r = to(&e.dst, 0);
    let g = WriteWr::new(1, Sge::new(&e.src, 0, 8).unwrap(), r);
    let c = QpConfig {
        max_send_sge: 0,
        max_inline: 0,
        ..cfg(4, 0)
    };
    let (mut a, _b) = e.pd.create_connected_pair(&c).unwrap();
    let e1 = refused_by(&mut a, |q| q.post_write(&g));
    let e2 = refused_by(&mut a, |q| q.post_send(&[g.to_send_wr()]));
    assert_eq!(format!("{e1:?}"), format!("{e2:?}"));
    let e1 = refused_by(&mut a, |q| q.post_writes(&[g, g]));
    let e2 = refused_by(&mut a, |q| q.post_send(&[g.to_send_wr(), g.to_send_wr()]));
    assert_eq!(format!("{e1:?}"), format!("{e2:?}"));
    let by = [Sge::bytes(b"").unwrap()];
    let ra = a.post_write_inline(2, b"", r, SendFlags::SIGNALED);
    let rb = a.post_send(&[SendWr::rdma_write(3, &by, r).inline().signaled()]);
    assert_eq!(format!("{ra:?}"), format!("{rb:?}"));
    let _ = drain(&mut a);
    let c = QpConfig {
        max_inline: 0,
        ..cfg(4, 0)
    };
    let (mut a, _b) = e.pd.create_connected_pair(&c).unwrap();
    let (mut b, _bb) = e.pd.create_connected_pair(&c).unwrap();
    a.post_write_inline(4, b"", r, SendFlags::SIGNALED).unwrap();
    b.post_send(&[SendWr::rdma_write(4, &by, r).inline().signaled()])
        .unwrap();
    same_ring(&a, &b, "0 inline bytes");
    assert_eq!(poll_n(&mut a, 1)[0].wr_id, 4);
    let one = [Sge::bytes(b"x").unwrap()];
    let e1 = refused_by(&mut a, |q| {
        q.post_write_inline(5, b"x", r, SendFlags::SIGNALED)
    });
    let e2 = refused_by(&mut a, |q| {
        q.post_send(&[SendWr::rdma_write(5, &one, r).inline().signaled()])
    });
    assert_eq!(format!("{e1:?}"), format!("{e2:?}"));
}
