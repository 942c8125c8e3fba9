//! Receive WQEs against libmlx5: our RQ posting against `mlx5_post_recv`
//! (the same bytes at the same index, the doorbell record's counter), our
//! SRQ posting against `mlx5_post_srq_recv` (what the device reads of each
//! posted WR wherever each side put it, the doorbell counter, no WQE the
//! device may own handed out again, the same refusals), over generated
//! sequences of posts and completions.
// Needs the oracle linked: without it `oracle_linked.rs` says SKIPPED.
#![cfg(provider_oracle)]

use mlx5_provider_oracle::gen::{Rng, Source};
use mlx5_provider_oracle::recv::{RqPair, SrqPair};
use mlx5_provider_oracle::send::pattern;
use mlx5_provider_oracle::wr::Sge;
use mlx5_provider_oracle::{cases, oracle_or_skip};
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

static RQ_WRS: AtomicU64 = AtomicU64::new(0);
static SRQ_WRS: AtomicU64 = AtomicU64::new(0);

/// A receive WR's SGEs: up to `max` of them (some zero-length when
/// `zeros`), their lengths summing to at most 2^31.
fn sges(s: &mut Rng, max: u32, zeros: bool) -> Vec<Sge> {
    let n = s.range(0, max as u64);
    (0..n)
        .map(|_| Sge {
            addr: s.next_u64(),
            len: if zeros && s.chance(15) {
                0
            } else {
                s.range(1, 1 << 24) as u32
            },
            lkey: s.next_u64() as u32,
        })
        .collect()
}

fn run(runner_cases: u32, f: impl Fn(u64) -> Result<(), String>) {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: runner_cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    if let Err(e) = runner.run(&any::<u64>(), |seed| f(seed).map_err(TestCaseError::fail)) {
        panic!("{e}");
    }
}

fn rq_case(seed: u64) -> Result<(), String> {
    let mut s = Rng(seed);
    let stride = 16u32 << s.range(0, 5);
    let min_cnt = (64 / stride).max(1).trailing_zeros() as u64;
    let wqe_cnt = 1u32 << s.range(min_cnt, 10);
    let head = match s.range(0, 3) {
        0 => s.range(0, 100) as u32,
        1 => (1u32 << 16).wrapping_sub(s.range(0, 40) as u32),
        2 => 0u32.wrapping_sub(s.range(1, 40) as u32),
        _ => s.next_u64() as u32,
    };
    let mut p = RqPair::new(wqe_cnt, stride, head, |i| pattern(seed, i));
    let mut next_id = 0u64;
    let mut tail = head;
    for step in 0..s.range(1, 12) {
        let (out_o, out_t) = p.outstanding();
        if out_o != out_t {
            return Err(format!(
                "step {step}: outstanding ours {out_o}, theirs {out_t}"
            ));
        }
        if out_o > 0 && s.chance(35) {
            let n = s.range(1, out_o as u64) as u32;
            let ids = p.complete(tail, n);
            if ids.iter().any(|i| i.is_none()) {
                return Err(format!(
                    "step {step}: our RQ did not complete {n} from {tail:#x}"
                ));
            }
            tail = tail.wrapping_add(n);
            continue;
        }
        let free = wqe_cnt - out_o;
        // Mostly within the room; sometimes one over, so both refuse.
        let n = if s.chance(10) {
            (free + 1).min(64)
        } else {
            s.range(1, free.clamp(1, 64) as u64) as u32
        };
        let wrs: Vec<(u64, Vec<Sge>)> = (0..n)
            .map(|_| {
                next_id += 1;
                (next_id, sges(&mut s, stride / 16, true))
            })
            .collect();
        let (at_o, at_t) = p.post(&wrs);
        RQ_WRS.fetch_add(at_t as u64, Relaxed);
        if at_o != at_t {
            return Err(format!(
                "step {step}: {n} WRs with {free} free: ours refused at {at_o}, theirs at {at_t}"
            ));
        }
        let (ro, rt) = p.rings();
        if let Some(i) = (0..ro.len()).find(|&i| ro[i] != rt[i]) {
            return Err(format!(
                "step {step}: RQ ring ({wqe_cnt} x {stride} bytes, head {head:#x}) differs first at byte {i} \
                 (WQE {}, byte {}): ours {:#04x}, theirs {:#04x}",
                i / stride as usize,
                i % stride as usize,
                ro[i],
                rt[i]
            ));
        }
        let (dbo, dbt) = p.dbrecs();
        if dbo != dbt {
            return Err(format!(
                "step {step}: RQ doorbell record ours {dbo:02x?}, theirs {dbt:02x?}"
            ));
        }
    }
    Ok(())
}

#[test]
fn rq_posts_write_what_mlx5_post_recv_writes() {
    if !oracle_or_skip("rq_posts_write_what_mlx5_post_recv_writes") {
        return;
    }
    let n = cases(1_000) / 4 + 1;
    run(n, rq_case);
    mlx5_provider_oracle::say(
        "rq_posts_write_what_mlx5_post_recv_writes",
        format_args!(
            "{n} sequences of posts and completions, {} receive WRs compared with mlx5_post_recv",
            RQ_WRS.load(Relaxed)
        ),
    );
}

/// What the device reads of a WR ours posted at `io` and theirs at `it`;
/// the provider's zero-length SGEs left out (docs/prm.md: ours leaves
/// them out of SRQ WQEs as libmlx5's RQ post does; its SRQ post writes them).
fn same_scatter(p: &SrqPair, io: u32, it: u32, sges: &[Sge]) -> Result<(), String> {
    let (ro, rt) = p.rings();
    let (o, o_end) = SrqPair::scatter(ro, p.stride, io);
    let (t, _) = SrqPair::scatter(rt, p.stride, it);
    let t: Vec<_> = t.into_iter().filter(|&(len, _, _)| len != 0).collect();
    let want: Vec<_> = sges
        .iter()
        .filter(|s| s.len != 0)
        .map(|s| (s.len, s.lkey, s.addr))
        .collect();
    if o != want || t != want {
        return Err(format!(
            "scatter list: ours (WQE {io}) {o:x?}, theirs (WQE {it}) {t:x?}, WR {want:x?}"
        ));
    }
    let slots = (p.stride / 16 - 1) as usize;
    if want.len() < slots && !o_end {
        return Err(format!(
            "WQE {io} of ours has no terminator after {} SGEs",
            want.len()
        ));
    }
    Ok(())
}

fn srq_case(seed: u64) -> Result<(), String> {
    let mut s = Rng(seed);
    let stride = 32u32 << s.range(0, 4);
    let count = 1u32 << s.range(1, 10);
    let mut p = SrqPair::new(count, stride);
    // wr_id -> (our index, their index), of WRs the device holds.
    let mut held: HashMap<u64, (u32, u32)> = HashMap::new();
    let mut next_id = 0u64;
    for step in 0..s.range(1, 16) {
        if !held.is_empty() && s.chance(40) {
            let mut ids: Vec<u64> = held.keys().copied().collect();
            ids.sort_unstable();
            for _ in 0..s.range(1, ids.len() as u64) {
                let id = ids.swap_remove(s.range(0, ids.len() as u64 - 1) as usize);
                let (io, it) = held.remove(&id).unwrap();
                if p.complete(io, it) != Some(id) {
                    return Err(format!(
                        "step {step}: our SRQ did not complete WQE {io} as wr_id {id}"
                    ));
                }
                if !p.theirs_marked_free(it) {
                    return Err(format!(
                        "step {step}: the provider did not mark WQE {it} free"
                    ));
                }
            }
            continue;
        }
        let free = count - 1 - held.len() as u32;
        let n = if s.chance(15) {
            (free + 1).min(64)
        } else {
            s.range(1, free.clamp(1, 64) as u64) as u32
        };
        let wrs: Vec<(u64, Vec<Sge>)> = (0..n)
            .map(|_| {
                next_id += 1;
                (next_id, sges(&mut s, stride / 16 - 1, true))
            })
            .collect();
        let (o, t) = p.post(&wrs);
        SRQ_WRS.fetch_add(t.len() as u64, Relaxed);
        if o.len() != t.len() {
            return Err(format!(
                "step {step}: {n} WRs, {free} free of {count}: ours posted {}, theirs {}",
                o.len(),
                t.len()
            ));
        }
        let busy_o: HashSet<u32> = held.values().map(|v| v.0).collect();
        let busy_t: HashSet<u32> = held.values().map(|v| v.1).collect();
        for (k, ((id, sg), (&io, &it))) in wrs.iter().zip(o.iter().zip(&t)).enumerate() {
            if busy_o.contains(&io) || busy_t.contains(&it) {
                return Err(format!("step {step}: a WQE the device holds was handed out again (ours {io}, theirs {it})"));
            }
            same_scatter(&p, io, it, sg).map_err(|e| format!("step {step}, WR {k}: {e}"))?;
            held.insert(*id, (io, it));
        }
        if held.values().map(|v| v.0).collect::<HashSet<_>>().len() != held.len()
            || held.values().map(|v| v.1).collect::<HashSet<_>>().len() != held.len()
        {
            return Err(format!("step {step}: one WQE holds two WRs"));
        }
        let (dbo, dbt) = p.dbrecs();
        if dbo != dbt {
            return Err(format!(
                "step {step}: SRQ doorbell record ours {dbo:02x?}, theirs {dbt:02x?}"
            ));
        }
    }
    Ok(())
}

#[test]
fn srq_posts_give_the_device_what_mlx5_post_srq_recv_gives() {
    if !oracle_or_skip("srq_posts_give_the_device_what_mlx5_post_srq_recv_gives") {
        return;
    }
    let n = cases(1_000) / 4 + 1;
    run(n, srq_case);
    mlx5_provider_oracle::say(
        "srq_posts_give_the_device_what_mlx5_post_srq_recv_gives",
        format_args!(
            "{n} sequences of posts and completions, {} receive WRs compared with \
             mlx5_post_srq_recv",
            SRQ_WRS.load(Relaxed)
        ),
    );
}

/// The SRQ doorbell record is a 16-bit counter on both sides: 70,000
/// posts and completions, one at a time, agree across its wrap.
#[test]
fn srq_doorbell_counter_wraps_as_libmlx5s() {
    if !oracle_or_skip("srq_doorbell_counter_wraps_as_libmlx5s") {
        return;
    }
    let mut p = SrqPair::new(4, 64);
    for id in 1..=70_000u64 {
        let (o, t) = p.post(&[(
            id,
            vec![Sge {
                addr: id,
                len: 8,
                lkey: 7,
            }],
        )]);
        assert_eq!((o.len(), t.len()), (1, 1), "post {id}");
        let (dbo, dbt) = p.dbrecs();
        assert_eq!(dbo, dbt, "doorbell after post {id}");
        assert_eq!(p.complete(o[0], t[0]), Some(id));
    }
}
