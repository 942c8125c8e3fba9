//! Copies into and out of registered memory beside `memcpy`
//! (`copy_from_slice`) of the same size, source, destination and alignment
//! (issue 13's "Measure"); and filling a message in place and posting it
//! against building it elsewhere and copying it in.
//!
//! `cargo bench --bench memory` (`-- --quick` for 3 rounds instead of 7).
//! Each figure is the median of the rounds; within a round ours and memcpy
//! alternate, warm, on the same buffers, so a noisy neighbour hits both
//! alike. GB/s are 10^9 bytes per second.

use rdma_direct::{
    Access, AlignedBuf, Completion, Context, LocalMr, Mr, Qp, QpConfig, SendWr, Sge,
};
use std::hint::black_box;
use std::time::{Duration, Instant};

const SIZES: [usize; 4] = [64, 4096, 64 << 10, 1 << 20];

/// Seconds per call of `f`, timed over about 20 ms.
fn time(mut f: impl FnMut()) -> f64 {
    let mut iters = 1u64;
    loop {
        let t = Instant::now();
        for _ in 0..iters {
            f();
        }
        let e = t.elapsed();
        if e > Duration::from_millis(20) {
            return e.as_secs_f64() / iters as f64;
        }
        iters *= 2;
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `f(true)` (ours) and `f(false)` (the baseline) alternately for
/// `rounds`; medians in seconds.
fn pair(rounds: usize, mut f: impl FnMut(bool)) -> (f64, f64) {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        a.push(time(|| f(true)));
        b.push(time(|| f(false)));
    }
    (median(a), median(b))
}

fn row(what: &str, n: usize, (ours, base): (f64, f64)) {
    let gbs = |s: f64| n as f64 / s / 1e9;
    println!(
        "{what:<34} {n:>8} B  {:>8.2} GB/s  memcpy {:>8.2} GB/s  ratio {:>5.2}",
        gbs(ours),
        gbs(base),
        base / ours
    );
}

fn main() {
    let rounds = if std::env::args().any(|a| a == "--quick") {
        3
    } else {
        7
    };
    let ctx = Context::open("sim").expect("the sim");
    let pd = ctx.alloc_pd().unwrap();
    println!(
        "# {rounds} rounds, median; GB/s = 10^9 bytes/s; ratio = ours / memcpy throughput (1.00: memcpy speed)"
    );
    for n in SIZES {
        let mut local: LocalMr = pd.alloc_local_mr(n, Access::LOCAL_WRITE).unwrap();
        let shared: Mr = pd
            .alloc_mr(n, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        // Same alignment on every side: page-aligned buffers.
        let src = AlignedBuf::zeroed(n).unwrap();
        let mut dst = AlignedBuf::zeroed(n).unwrap();
        let mut plain = AlignedBuf::zeroed(n).unwrap();
        let r = pair(rounds, |ours| {
            if ours {
                local.write(0, black_box(&src)).unwrap()
            } else {
                plain.copy_from_slice(black_box(&src))
            }
        });
        row("LocalMr::write (first kind)", n, r);
        let r = pair(rounds, |ours| {
            if ours {
                local.read(0, black_box(&mut dst)).unwrap()
            } else {
                dst.copy_from_slice(black_box(&plain))
            }
        });
        row("LocalMr::read (first kind)", n, r);
        let r = pair(rounds, |ours| {
            if ours {
                shared.write(0, black_box(&src)).unwrap()
            } else {
                plain.copy_from_slice(black_box(&src))
            }
        });
        row("Mr::write (atomic bytes)", n, r);
        let r = pair(rounds, |ours| {
            if ours {
                shared.read(0, black_box(&mut dst)).unwrap()
            } else {
                dst.copy_from_slice(black_box(&plain))
            }
        });
        row("Mr::read (atomic bytes)", n, r);
    }
    fill_and_post(&pd, rounds);
}

/// One SEND of `n` bytes each way: (a) the message is written straight into
/// a `LocalMr` and the buffer is posted by value; (b) it is written into a
/// plain buffer and copied into an `Mr` with `Mr::write`, then posted.
/// Each includes the post, the completion and (a) taking the buffer back.
fn fill_and_post(pd: &rdma_direct::Pd, rounds: usize) {
    let cfg = QpConfig {
        max_send_wr: 16,
        max_recv_wr: 16,
        ..QpConfig::default()
    };
    for n in [64usize, 4096, 64 << 10] {
        let (mut a, mut b) = pd.create_connected_pair(&cfg).unwrap();
        let rmr = pd.alloc_mr(n, Access::LOCAL_WRITE).unwrap();
        let mut local = Some(pd.alloc_local_mr(n, Access::empty()).unwrap());
        let shared = pd.alloc_mr(n, Access::empty()).unwrap();
        let mut scratch = vec![0u8; n];
        let fill = |buf: &mut [u8], k: u8| {
            for (i, x) in buf.iter_mut().enumerate() {
                *x = (i as u8).wrapping_add(k);
            }
        };
        let post_recv = |b: &mut Qp| {
            let rs = [Sge::new(&rmr, 0, n as u32).unwrap()];
            b.post_recv(&[rdma_direct::RecvWr::new(0, &rs)]).unwrap();
        };
        let wait = |q: &mut Qp| {
            let mut wc = [Completion::default()];
            while q.poll(&mut wc).unwrap() == 0 {}
        };
        let mut k = 0u8;
        let mut j = 0u8;
        let mut ours = || {
            post_recv(&mut b);
            let mut buf = local.take().unwrap();
            k = k.wrapping_add(1);
            fill(&mut buf, k);
            a.post_send_owned(&SendWr::send(1, &[]).signaled(), buf, 0, n as u32)
                .unwrap();
            wait(&mut a);
            wait(&mut b);
            local = Some(a.take_send_buf().unwrap().1);
        };
        let (mut a2, mut b2) = pd.create_connected_pair(&cfg).unwrap();
        let mut base = || {
            post_recv(&mut b2);
            j = j.wrapping_add(1);
            fill(&mut scratch, j);
            shared.write(0, &scratch).unwrap();
            let s = [Sge::new(&shared, 0, n as u32).unwrap()];
            a2.post_send(&[SendWr::send(1, &s).signaled()]).unwrap();
            wait(&mut a2);
            wait(&mut b2);
        };
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            x.push(time(&mut ours));
            y.push(time(&mut base));
        }
        let (x, y) = (median(x), median(y));
        if n == 64 {
            println!("# fill + SEND: time per message, us; ratio = theirs / ours (above 1: in place is faster)");
        }
        println!(
            "fill in place + SEND (LocalMr)     {n:>8} B  {:>8.2} us  fill + Mr::write + SEND {:>8.2} us  ratio {:>5.2}",
            x * 1e6,
            y * 1e6,
            y / x
        );
    }
}
