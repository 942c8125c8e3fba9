//! Timing of the benchmarks: the cycle counter (`ticks`) and its rate, the
//! round trips between stamps, `-D` deadlines, and the CPU meter behind the
//! post and poll columns.

use super::*;

/// A cycle counter: the TSC on x86_64 (about 8 ns a read here, no
/// serialization), elsewhere nanoseconds from a monotonic clock.
#[inline(always)]
pub(super) fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC reads a counter; it touches no memory and has no
        // precondition (it is `unsafe` only as an intrinsic).
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        T0.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// [`ticks`] per nanosecond, measured once per process against the
/// monotonic clock over 2 ms. Timing with the counter keeps clock reads out
/// of the timed loops: in a guest whose clocksource has no vDSO (QEMU TCG)
/// every `Instant::now` is a system call, which perftest (it stamps with
/// `get_cycles`, the TSC) does not pay.
pub(super) fn ticks_per_ns() -> f64 {
    static RATE: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *RATE.get_or_init(|| {
        let (t0, c0) = (Instant::now(), ticks());
        while t0.elapsed() < Duration::from_millis(2) {
            std::hint::spin_loop();
        }
        let c1 = ticks();
        let ns = t0.elapsed().as_nanos() as f64;
        (c1.wrapping_sub(c0) as f64 / ns).max(1e-3)
    })
}

/// Nanoseconds between two [`ticks`] readings.
pub(super) fn ns_between(t0: u64, t1: u64) -> f64 {
    t1.wrapping_sub(t0) as f64 / ticks_per_ns()
}

/// Round trips (ns) between consecutive stamps.
pub(super) fn round_trips(stamps: &[u64]) -> Vec<f64> {
    stamps.windows(2).map(|w| ns_between(w[0], w[1])).collect()
}

/// CPU time spent inside `post_send`/`post_recv` and inside `poll` calls that
/// returned completions (empty polls are waiting, not cost), in [`ticks`].
/// The cost of reading the counter itself is measured once and subtracted.
pub(super) struct CpuMeter {
    post_ticks: u64,
    posted: u64,
    poll_ticks: u64,
    polled: u64,
    overhead: u64,
    start: (Instant, u64),
    /// Completions are waited for with events (`-e`), not by spinning.
    pub(super) events: bool,
    /// With `events`: empty polls before arming (`--adaptive`).
    pub(super) spins: u32,
    /// Waits go through the async API (`--async`).
    pub(super) async_wait: bool,
}

impl CpuMeter {
    pub(super) fn new(cfg: &LatConfig) -> Self {
        let overhead = (0..1000)
            .map(|_| {
                let t = ticks();
                ticks().wrapping_sub(t)
            })
            .min()
            .unwrap_or(0);
        CpuMeter {
            post_ticks: 0,
            posted: 0,
            poll_ticks: 0,
            polled: 0,
            overhead,
            start: (Instant::now(), ticks()),
            events: cfg.events,
            spins: cfg.spins,
            async_wait: cfg.async_wait,
        }
    }

    /// Times one post call of `wrs` work requests.
    #[inline(always)]
    pub(super) fn post(&mut self, wrs: usize, f: impl FnOnce() -> Result<()>) -> Result<()> {
        let t = ticks();
        let r = f();
        let dt = ticks().wrapping_sub(t).saturating_sub(self.overhead);
        if r.is_ok() {
            self.post_ticks += dt;
            self.posted += wrs as u64;
        }
        r
    }

    /// Polls `qp` once, timing the call if it returned completions.
    #[inline(always)]
    pub(super) fn poll(&mut self, qp: &mut Qp, wc: &mut [Completion]) -> Result<usize> {
        let t = ticks();
        let n = qp.poll(wc)?;
        if n > 0 {
            self.poll_ticks += ticks().wrapping_sub(t).saturating_sub(self.overhead);
            self.polled += n as u64;
        }
        Ok(n)
    }

    /// An async wait that took `n` completions in `dt` ticks (its whole
    /// poll, the sleep excluded: the executor parks between polls).
    pub(super) fn polled_async(&mut self, n: usize, dt: u64) {
        self.poll_ticks += dt.saturating_sub(self.overhead);
        self.polled += n as u64;
    }

    /// ns per posted WR and per polled CQE.
    pub(super) fn report(&self) -> CpuCost {
        let (t0, c0) = self.start;
        let ns = t0.elapsed().as_nanos() as f64;
        let per_ns = (ticks().wrapping_sub(c0) as f64 / ns).max(f64::MIN_POSITIVE);
        let per = |t: u64, n: u64| {
            if n == 0 {
                0.0
            } else {
                t as f64 / per_ns / n as f64
            }
        };
        CpuCost {
            post_ns: per(self.post_ticks, self.posted),
            poll_ns: per(self.poll_ticks, self.polled),
        }
    }
}

/// A `-D` deadline: read on the counter ([`ticks`]) in the timed loops, and
/// confirmed on the monotonic clock once the counter says it has passed. A
/// counter rate measured over 2 ms ([`ticks_per_ns`]) can be a few percent
/// off in a QEMU TCG guest, whose clock reads are system calls; unconfirmed,
/// a run could end before its duration.
#[derive(Clone, Copy, Debug)]
pub(super) struct Deadline {
    /// When the counter says the duration is over.
    at: u64,
    start: Instant,
    d: Duration,
}

/// The deadline `d` from now; `None` without one.
pub(super) fn deadline_after(d: Option<Duration>) -> Option<Deadline> {
    d.map(|d| Deadline {
        at: ticks().wrapping_add((d.as_nanos() as f64 * ticks_per_ns()) as u64),
        start: Instant::now(),
        d,
    })
}

/// Whether `deadline` (from [`deadline_after`]) has passed: by the counter,
/// then by the clock (one read, only then); when the clock says not yet,
/// the counter's deadline moves to what is left.
#[inline]
pub(super) fn past(deadline: &mut Option<Deadline>) -> bool {
    let Some(dl) = deadline else { return false };
    if ticks().wrapping_sub(dl.at) >= u64::MAX / 2 {
        return false;
    }
    let left = dl.d.saturating_sub(dl.start.elapsed());
    if left.is_zero() {
        return true;
    }
    dl.at = ticks().wrapping_add((left.as_nanos() as f64 * ticks_per_ns()) as u64);
    false
}
