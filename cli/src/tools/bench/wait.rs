//! Waiting on the device: spinning (yielding to the sim's device thread
//! when they may share a core), polling with or without events or through
//! the async API, the completions a run waits for, and keeping the bench
//! thread off the sim's device CPU.

use super::*;

/// How long a waiter spins before it starts yielding its core, in
/// [`ticks`]: only while a sim device thread runs in this process, since
/// the device must run for the wait to end and the two may share a core
/// (1 ms when the process has two or more CPUs and the device thread one
/// of its own, else 20 us); on a kernel device a waiter never yields, as
/// perftest's never do.
pub(super) fn yield_after() -> Option<u64> {
    if mlx5_dv::sim::device_threads() == 0 {
        return None;
    }
    static AFTER: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    Some(*AFTER.get_or_init(|| {
        let ns = match mlx5_dv::sim::device_cpu() {
            Some(_) => 1e6,
            None => 2e4,
        };
        (ns * ticks_per_ns()) as u64
    }))
}

/// Spins until `done()` holds (yielding as [`yield_after`] says), failing
/// after [`WAIT_LIMIT`]. The clock is the cycle counter: no system call.
#[inline]
pub(super) fn spin_until(
    what: impl Fn() -> String,
    mut done: impl FnMut() -> Result<bool>,
) -> Result<()> {
    let mut spins = 0u32;
    let start = ticks();
    let limit = (WAIT_LIMIT.as_nanos() as f64 * ticks_per_ns()) as u64;
    let yield_after = yield_after();
    // PAUSE only toward a sim device thread (it may share the core); on a
    // kernel device the poll itself is the back-off, as in perftest's loops
    // (under QEMU TCG a PAUSE leaves the vCPU's execution loop: it costs
    // more than a poll).
    let pause = yield_after.is_some();
    while !done()? {
        spins = spins.wrapping_add(1);
        if !spins.is_multiple_of(256) {
            if pause {
                std::hint::spin_loop();
            }
            continue;
        }
        let waited = ticks().wrapping_sub(start);
        if waited > limit {
            return Err(Error::Timeout(what()));
        }
        if yield_after.is_some_and(|y| waited > y) {
            std::thread::yield_now();
        }
    }
    Ok(())
}

/// Polls `qp` until `enough` says so: spinning, or with events (`-e`):
/// poll, arm the CQ, poll once more (a completion that came before the arm
/// raises no event), then sleep on the completion channel.
pub(super) fn poll_wait(
    qp: &mut Qp,
    m: &mut CpuMeter,
    what: impl Fn() -> String,
    mut enough: impl FnMut(&[Completion]) -> Result<bool>,
) -> Result<()> {
    let mut wc = [Completion::default(); 4];
    if m.async_wait {
        return async_wait(qp, m, what, enough);
    }
    if !m.events {
        return spin_until(what, || {
            let n = m.poll(qp, &mut wc)?;
            enough(&wc[..n])
        });
    }
    let deadline = Instant::now() + WAIT_LIMIT;
    let mut empty = 0u32;
    loop {
        let n = m.poll(qp, &mut wc)?;
        if enough(&wc[..n])? {
            return Ok(());
        }
        if n > 0 {
            empty = 0;
            continue;
        }
        // Adaptive (--adaptive): spin a while before arming.
        empty = empty.saturating_add(1);
        if empty <= m.spins {
            continue;
        }
        empty = 0;
        qp.arm_cq(false)?;
        let n = m.poll(qp, &mut wc)?;
        if enough(&wc[..n])? {
            return Ok(());
        }
        if n > 0 {
            continue;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || !qp.wait_cq_event(left)? {
            return Err(Error::Timeout(what()));
        }
    }
}

/// [`poll_wait`] through the async API: `Qp::completions(mode).next()`
/// on a one-thread executor that parks until the wait's waker is woken
/// (busy: woken at once; events: by the CQ's event), up to `WAIT_LIMIT`.
/// The completions it takes are timed as a poll's (`CpuMeter::polled_async`).
pub(super) fn async_wait(
    qp: &mut Qp,
    m: &mut CpuMeter,
    what: impl Fn() -> String,
    mut enough: impl FnMut(&[Completion]) -> Result<bool>,
) -> Result<()> {
    use std::task::{Context as TaskCx, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let mode = match (m.events, m.spins) {
        (false, _) => rdma_direct::CompletionMode::Busy,
        (true, 0) => rdma_direct::CompletionMode::Events,
        (true, spins) => rdma_direct::CompletionMode::Adaptive { spins },
    };
    let waker = Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = TaskCx::from_waker(&waker);
    let deadline = Instant::now() + WAIT_LIMIT;
    let mut wc = [Completion::default(); 4];
    let mut c = qp.completions(mode);
    loop {
        let t = ticks();
        let r = c.poll_completions(&mut cx, &mut wc);
        if let Poll::Ready(n) = r {
            let n = n?;
            m.polled_async(n, ticks().wrapping_sub(t));
            if enough(&wc[..n])? {
                return Ok(());
            }
            continue;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Timeout(what()));
        }
        std::thread::park_timeout(left);
    }
}

/// Polls until a receive completes (send completions on the way are taken
/// and dropped); an error completion of either kind fails the run.
pub(super) fn wait_recv(qp: &mut Qp, side: &str, m: &mut CpuMeter) -> Result<()> {
    poll_wait(
        qp,
        m,
        || {
            format!(
                "no receive completion on side {side} within {WAIT_LIMIT:?} \
                 (on UD or UC a lost message is not resent)"
            )
        },
        recv_among,
    )
}

/// Whether `wc` holds a receive completion; an error completion of any
/// kind fails the run.
pub(super) fn recv_among(wc: &[Completion]) -> Result<bool> {
    let mut got = false;
    for c in wc {
        if !c.status.is_ok() {
            return Err(Error::from(*c));
        }
        got |= c.opcode == rdma_direct::WcOpcode::RECV;
    }
    Ok(got)
}

/// Polls until one completion comes; an error completion fails the run.
pub(super) fn wait_completion(qp: &mut Qp, side: &str, m: &mut CpuMeter) -> Result<()> {
    poll_wait(
        qp,
        m,
        || format!("no send completion on side {side} within {WAIT_LIMIT:?}"),
        |wc| match wc.iter().find(|c| !c.status.is_ok()) {
            Some(c) => Err(Error::from(*c)),
            None => Ok(!wc.is_empty()),
        },
    )
}

/// The completion mode a run's settings ask for.
pub(super) fn cfg_completion(cfg: &LatConfig) -> rdma_direct::CompletionMode {
    match (cfg.events, cfg.spins) {
        (false, _) => rdma_direct::CompletionMode::Busy,
        (true, 0) => rdma_direct::CompletionMode::Events,
        (true, spins) => rdma_direct::CompletionMode::Adaptive { spins },
    }
}

/// Keeps the calling thread off the sim's device CPU while it lives, then
/// restores its affinity. Without it the scheduler may put the spinning bench
/// thread and the sim's spinning device thread on one core.
pub(super) struct OffDeviceCpu(Option<nix::sched::CpuSet>);

impl OffDeviceCpu {
    pub(super) fn new(is_sim: bool) -> Self {
        use nix::sched::{sched_getaffinity, sched_setaffinity};
        use nix::unistd::Pid;
        let me = Pid::from_raw(0);
        let (Some(dev_cpu), true) = (mlx5_dv::sim::device_cpu(), is_sim) else {
            return Self(None);
        };
        let Ok(saved) = sched_getaffinity(me) else {
            return Self(None);
        };
        let mut set = saved;
        if set.unset(dev_cpu).is_err() || sched_setaffinity(me, &set).is_err() {
            return Self(None);
        }
        Self(Some(saved))
    }
}

impl Drop for OffDeviceCpu {
    fn drop(&mut self) {
        if let Some(saved) = &self.0 {
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), saved);
        }
    }
}
