//! What every sim test of the posts needs: a device, a PD and two MRs, a
//! remote address, and a patient poll (`support/in_place.rs` and
//! `support/posts.rs` use it).
#![allow(dead_code)]

use rdma_direct::*;
use std::time::{Duration, Instant};

pub struct Env {
    pub ctx: Context,
    pub pd: Pd,
    /// 64 KiB, local write.
    pub src: Mr,
    /// 64 KiB, local and remote write, remote read and atomics.
    pub dst: Mr,
}

/// The sim, a PD, and its `src` and `dst` MRs.
pub fn env() -> Env {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let src = pd.alloc_mr(1 << 16, Access::LOCAL_WRITE).unwrap();
    let dst = pd
        .alloc_mr(
            1 << 16,
            Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
        )
        .unwrap();
    Env { ctx, pd, src, dst }
}

/// `mr`'s bytes from `off`, as a peer names them.
pub fn remote(mr: &Mr, off: u64) -> RemoteAddr {
    RemoteAddr {
        addr: mr.addr() + off,
        rkey: mr.rkey(),
    }
}

/// How long a wait for the sim may take before it is called stuck: long,
/// as the sim's device thread may get little CPU on a loaded machine.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Polls until `n` completions came (yielding to the sim's thread while
/// none do), or fails after [`PATIENCE`].
pub fn poll_n(qp: &mut Qp, n: usize) -> Vec<Completion> {
    poll_n_with(|wc| qp.poll(wc), n)
}

/// [`poll_n`] through `poll` (a QP's own CQ, or a `SharedCq`).
pub fn poll_n_with(
    mut poll: impl FnMut(&mut [Completion]) -> Result<usize>,
    n: usize,
) -> Vec<Completion> {
    let mut got = Vec::new();
    let t = Instant::now();
    let mut wc = [Completion::default(); 16];
    while got.len() < n {
        let k = poll(&mut wc).unwrap();
        got.extend_from_slice(&wc[..k]);
        if k == 0 {
            std::thread::yield_now();
        }
        assert!(
            t.elapsed() < PATIENCE,
            "timed out: {} of {n}: {got:?}",
            got.len()
        );
    }
    got
}

/// Runs the ignored test `name` of this test binary in a child process,
/// with `RDMA_DIRECT_TRACE=1` (read once per process, so a child is what
/// can turn it on) and `marker=1` (the child's proof that it was started
/// so, not run on its own); returns its stderr, where the trace goes,
/// after checking that it passed.
pub fn traced_child(name: &str, marker: &str) -> String {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            name,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(marker, "1")
        .env("RDMA_DIRECT_TRACE", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    err
}

/// Polls for 100 ms and returns what came (not a timing assertion: only
/// to see that nothing more comes, or to take what is left).
pub fn drain(qp: &mut Qp) -> Vec<Completion> {
    drain_with(|wc| qp.poll(wc))
}

/// [`drain`] of any CQ: `poll` polls it (a [`SharedCq`]'s, say).
pub fn drain_with(mut poll: impl FnMut(&mut [Completion]) -> Result<usize>) -> Vec<Completion> {
    let mut got = Vec::new();
    let mut wc = [Completion::default(); 16];
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(100) {
        let k = poll(&mut wc).unwrap();
        got.extend_from_slice(&wc[..k]);
        if k == 0 {
            std::thread::yield_now();
        }
    }
    got
}

/// `a`'s and `b`'s send queues hold the same WQEs (`QpHooks::sq_snapshot`),
/// WQEBB by WQEBB, but for bytes 4..7 of each whole one: a ctrl segment's
/// QPN, each QP's own.
pub fn assert_same_wqes(a: &Qp, b: &Qp) {
    use rdma_direct::testing::QpHooks;
    let (sa, sb) = (a.sq_snapshot().unwrap(), b.sq_snapshot().unwrap());
    assert_eq!(sa.len(), sb.len());
    for (k, (x, y)) in sa.chunks(64).zip(sb.chunks(64)).enumerate() {
        let same = if x.len() == 64 {
            x[..4] == y[..4] && x[7..] == y[7..]
        } else {
            x == y
        };
        assert!(same, "WQEBB {k}:\n{x:02x?}\n{y:02x?}");
    }
}

/// Polls `want` completions of each of `a` and `b`: the same WRs with the
/// same statuses, in the same order (`what` names the round).
pub fn assert_same_completions(a: &mut Qp, b: &mut Qp, want: usize, what: &str) {
    let ids = |v: Vec<Completion>| v.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>();
    assert_eq!(ids(poll_n(a, want)), ids(poll_n(b, want)), "{what}");
}
