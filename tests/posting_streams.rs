//! Long random streams of posts compared byte for byte with a QP driven
//! only through `Qp::post_send`, on the sim: one-opcode posts, batches and
//! inline `post_send`s of mixed WQEBB counts on tiny, mid-sized and shallow
//! queues, and `RDMA_DIRECT_TRACE` showing every one-opcode WQE.

use rdma_direct::*;
use std::time::Instant;

#[path = "support/posts.rs"]
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

/// A random stream of post_write (signaled or not), inline post_sends of
/// 1 to 4 WQEBBs, 3-SGE post_sends (2 WQEBBs) and polls on one QP, the same
/// stream through post_send alone on a twin: the same WQEs, the same
/// refusals (QueueFull at the same points), the same completions.
#[test]
fn mixed_wqebbs_stream_matches_post_send() {
    let e = env();
    for (send, seed) in [(4u32, 1u64), (7, 2), (16, 3), (33, 4)] {
        let c = QpConfig {
            max_send_sge: 3,
            ..cfg(send, 220)
        };
        let (mut a, _pa) = e.pd.create_connected_pair(&c).unwrap();
        let (mut b, _pb) = e.pd.create_connected_pair(&c).unwrap();
        let r = to(&e.dst, 0);
        let mut rng = Rng(seed * 7919);
        let d = [0x5au8; 220];
        let mut from = 0u32;
        let (mut ga, mut gb) = (Vec::new(), Vec::new());
        let mut refusals = 0;
        for step in 0..1500u64 {
            let sg = Sge::new(&e.src, (rng.below(64) * 8) as usize, 8).unwrap();
            let sig = rng.below(5) == 0;
            let kind = if rng.below(2 * send as u64) == 0 {
                9
            } else {
                rng.below(9)
            };
            let (ra, rb) = match kind {
                0..=4 => {
                    let mut w = WriteWr::new(step, sg, r);
                    if sig {
                        w = w.signaled();
                    }
                    (a.post_write(&w), b.post_send(&[w.to_send_wr()]))
                }
                5 | 6 => {
                    let len = [1usize, 28, 29, 92, 93, 156, 157, 220][rng.below(8) as usize];
                    let by = [Sge::bytes(&d[..len]).unwrap()];
                    let mut w = SendWr::rdma_write(step, &by, r).inline();
                    w.flags.set(SendFlags::SIGNALED, sig);
                    (a.post_send(&[w]), b.post_send(&[w]))
                }
                7 => {
                    let s3 = [sg, sg, sg];
                    let mut w = SendWr::rdma_write(step, &s3, r);
                    w.flags.set(SendFlags::SIGNALED, sig);
                    (a.post_send(&[w]), b.post_send(&[w]))
                }
                8 => (Ok(()), Ok(())),
                _ => {
                    // Both settle: a signaled marker (the same WR on both),
                    // polled for until it comes, retires everything before it.
                    let m = [sg];
                    let w = SendWr::rdma_write(step, &m, r).signaled();
                    let (ra, rb) = (a.post_send(&[w]), b.post_send(&[w]));
                    if ra.is_ok() && rb.is_ok() {
                        for (q, g) in [(&mut a, &mut ga), (&mut b, &mut gb)] {
                            let t = std::time::Instant::now();
                            let mut wc = [Completion::default(); 16];
                            while g.last().map(|x: &(u64, WcStatus)| x.0) != Some(step) {
                                let k = q.poll(&mut wc).unwrap();
                                g.extend(wc[..k].iter().map(|c| (c.wr_id, c.status)));
                                assert!(t.elapsed() < PATIENCE);
                                std::thread::yield_now();
                            }
                        }
                        assert_eq!(ga, gb, "send {send} step {step}");
                    }
                    (ra, rb)
                }
            };
            assert_eq!(
                format!("{ra:?}"),
                format!("{rb:?}"),
                "send {send} step {step} kind {kind}"
            );
            if ra.is_err() {
                refusals += 1;
                assert!(matches!(ra, Err(Error::QueueFull)), "{ra:?}");
            } else if kind != 8 {
                from = same_wqes_since(&a, &b, from, &format!("send {send} step {step}"));
            }
        }
        assert!(refusals > 0, "send {send}: the queue never filled");
        assert_eq!(ga, gb, "send {send}");
        // Signal one to retire everything, then both drain the same.
        let w = WriteWr::new(9999, Sge::new(&e.src, 0, 8).unwrap(), r).signaled();
        let _ = poll_n(&mut a, 0);
        loop {
            match a.post_write(&w) {
                Ok(()) => break,
                Err(Error::QueueFull) => {
                    let mut wc = [Completion::default(); 16];
                    let k = a.poll(&mut wc).unwrap();
                    ga.extend(wc[..k].iter().map(|c| (c.wr_id, c.status)));
                }
                Err(e) => panic!("{e:?}"),
            }
        }
        loop {
            let mut wc = [Completion::default(); 16];
            let k = a.poll(&mut wc).unwrap();
            ga.extend(wc[..k].iter().map(|c| (c.wr_id, c.status)));
            if ga.last().map(|x| x.0) == Some(9999) {
                break;
            }
            std::thread::yield_now();
        }
        assert!(ga.iter().all(|c| c.1 == WcStatus::SUCCESS), "{ga:?}");
    }
}

// ---------------------------------------------------------------------
// Tracing
// ---------------------------------------------------------------------

/// The child of `trace_shows_every_one_opcode_wqe`.
#[test]
#[ignore = "the child of trace_shows_every_one_opcode_wqe, which runs it"]
fn one_opcode_trace_child() {
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
    let err = traced_child("one_opcode_trace_child", "REVIEW_TRACE_CHILD");
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
