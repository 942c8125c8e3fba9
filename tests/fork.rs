//! fork and registered memory, on a real verbs device named by
//! `RDMA_DIRECT_VERBS_DEVICE` (rxe0 in the soft-RoCE guest; skipped
//! without it). The process registers, uses and deregisters memory, keeps
//! a connected pair and its MRs, and forks; the child opens the device
//! afresh, registers fresh memory and moves bytes through it; the parent
//! moves bytes through the QPs and MRs it had before the fork and reads
//! them in its own memory. scripts/test runs it in the guest twice: plain
//! (the 6.1 kernel copies DMA-pinned pages for the child at fork, so
//! libibverbs reports `IBV_FORK_UNNEEDED` and `ibv_dontfork_range` does
//! nothing) and with `RDMAV_FORK_SAFE=1` (libibverbs marks registered
//! ranges `MADV_DONTFORK`: the child has no mapping of them). See
//! `docs/concepts.md`, "fork".
//!
//! Run it alone (`--test-threads=1`, as scripts/test does): the child of a
//! fork in a multi-threaded process must not meet a lock another thread
//! held.

use rdma_direct::*;
use std::time::{Duration, Instant};

fn wait_one(q: &mut Qp) -> Completion {
    let mut out = [Completion::default(); 1];
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        if q.poll(&mut out).unwrap() == 1 {
            return out[0];
        }
    }
    panic!("no completion in 10 s");
}

/// WRITEs 256 bytes of `fill` from `src` to `dst` through `a` and checks
/// that they landed (read in this process's memory).
fn write_and_check(a: &mut Qp, src: &Mr, dst: &Mr, fill: u8, wr_id: u64) -> Result<()> {
    src.write(0, &[fill; 256])?;
    let to = RemoteAddr {
        addr: dst.addr(),
        rkey: dst.rkey(),
    };
    let sge = [Sge::new(src, 0, 256)?];
    a.post_send(&[SendWr::rdma_write(wr_id, &sge, to).with_flags(SendFlags::SIGNALED)])?;
    let c = wait_one(a);
    assert_eq!((c.wr_id, c.status), (wr_id, WcStatus::SUCCESS), "{c:?}");
    let mut got = [0u8; 256];
    dst.read(0, &mut got)?;
    assert_eq!(got, [fill; 256], "the WRITE of {fill:#x} did not land");
    Ok(())
}

/// A connected pair, a source and a destination MR on `dev`.
fn setup(dev: &str) -> Result<(Context, Pd, Qp, Qp, Mr, Mr)> {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let src = pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let (a, b) = pd.create_connected_pair(&QpConfig::default())?;
    Ok((ctx, pd, a, b, src, dst))
}

/// The child: fresh context, fresh memory, bytes moved.
fn child(dev: &str) -> Result<()> {
    let (_ctx, _pd, mut a, _b, src, dst) = setup(dev)?;
    write_and_check(&mut a, &src, &dst, 0xc1, 100)
}

#[test]
fn after_fork_the_parents_qps_and_the_childs_fresh_memory_work() {
    let Ok(dev) = std::env::var("RDMA_DIRECT_VERBS_DEVICE") else {
        eprintln!(
            "fork: after_fork_the_parents_qps_and_the_childs_fresh_memory_work: SKIPPED: \
             RDMA_DIRECT_VERBS_DEVICE names no verbs device (scripts/test step 3 sets it in the rxe guest)"
        );
        return;
    };
    let fork_safe = std::env::var_os("RDMAV_FORK_SAFE").is_some_and(|v| !v.is_empty());
    let (_ctx, pd, mut a, _b, src, dst) = setup(&dev).unwrap();
    write_and_check(&mut a, &src, &dst, 0x11, 1).unwrap();
    // Register, use and deregister memory before the fork.
    {
        let tmp = pd
            .alloc_mr(8192, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        write_and_check(&mut a, &src, &tmp, 0x22, 2).unwrap();
    }
    // SAFETY: the child runs only `child` (its own context and memory; it
    // touches none of the parent's RDMA objects or registered memory) and
    // leaves through `_exit`, running no destructor of the parent's objects;
    // the test runs alone (`--test-threads=1`), so no other thread held a
    // lock the child could meet.
    match unsafe { nix::unistd::fork() }.expect("fork") {
        nix::unistd::ForkResult::Child => {
            let ok = std::panic::catch_unwind(|| child(&dev)).is_ok_and(|r| r.is_ok());
            // SAFETY: ends the child without unwinding into the test harness
            // or running the parent's destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) }
        }
        nix::unistd::ForkResult::Parent { child } => {
            // The parent's QPs and MRs, registered before the fork, still
            // move bytes into memory the parent reads.
            write_and_check(&mut a, &src, &dst, 0x33, 3).unwrap();
            let status = nix::sys::wait::waitpid(child, None).expect("waitpid");
            assert_eq!(
                status,
                nix::sys::wait::WaitStatus::Exited(child, 0),
                "the child's fresh memory did not work (RDMAV_FORK_SAFE set: {fork_safe})"
            );
            write_and_check(&mut a, &src, &dst, 0x44, 4).unwrap();
            eprintln!(
                "fork: on {dev}, RDMAV_FORK_SAFE {}: the parent's pair and MRs moved bytes before \
                 and after the fork, the child's fresh ones in the child",
                if fork_safe { "set" } else { "unset" }
            );
        }
    }
}
