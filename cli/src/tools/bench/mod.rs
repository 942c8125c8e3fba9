//! perftest-compatible benchmarks.
//!
//! `write_lat` follows perftest's `ib_write_lat` (perftest `src/write_lat.c`,
//! `run_iter_lat_write`; report in `print_report_lat`): the two sides take
//! turns RDMA-writing `size` bytes into each other's receive buffer, each
//! waiting for the last byte of its own receive buffer to change before
//! writing back. A timestamp is taken before each post of side A; the
//! `iters - 1` differences are round trips. As perftest 4.5 does, they are
//! sorted, the 2 largest dropped, and reported as one-way latency (half the
//! round trip) in microseconds.

use rdma_direct::{
    Access, Completion, Context, Error, Mr, Qp, QpConfig, RecvWr, RemoteAddr, Result, SendWr, Sge,
};
use std::time::{Duration, Instant};

/// perftest's `LAT_MEASURE_TAIL`: the largest samples dropped from the report.
pub const LAT_MEASURE_TAIL: usize = 2;
/// perftest's `MIN_ITER`.
pub const MIN_ITERS: u32 = 5;
/// Largest message perftest sends (`-a` goes to 2^23).
pub const MAX_SIZE: u32 = 8 << 20;
/// The most bytes a WQE of the direct path (the sim, mlx5) carries inline:
/// `Pd::create_qp` refuses a larger `QpConfig::max_inline` there (the
/// library's `backend::direct::MAX_INLINE`). The largest `-I` on that path.
pub const DIRECT_MAX_INLINE: u32 = 512;
/// How long a wait for the device may take before the benchmark gives up.
pub const WAIT_LIMIT: Duration = Duration::from_secs(10);

/// Settings of a latency test.
#[derive(Clone, Debug)]
pub struct LatConfig {
    pub device: String,
    /// Message size in bytes.
    pub size: u32,
    pub iters: u32,
    /// Messages up to this size are posted inline (perftest `-I`).
    pub inline_size: u32,
    pub port: u8,
    pub gid_index: Option<u8>,
    /// The data path (`--backend`): auto, direct or verbs.
    pub backend: rdma_direct::Backend,
    /// Wait for completions with events instead of spinning (perftest `-e`).
    pub events: bool,
    /// With `events`: empty polls before arming and sleeping (the adaptive
    /// mode, [`rdma_direct::CompletionMode::Adaptive`], `--adaptive`); 0 arms at
    /// the first empty poll, as perftest's `-e`.
    pub spins: u32,
    /// Wait through the async API (`Qp::completions(mode).next()`, on a
    /// one-thread executor that parks: `--async`; ours, not perftest's),
    /// in the mode `events` and `spins` give (busy polling without them).
    pub async_wait: bool,
    /// The atomic the atomic tests run (perftest `-A`).
    pub atomic: AtomicKind,
    /// Two hosts: connect the QPs through rdma_cm (perftest `-R`).
    pub rdma_cm: bool,
    /// Latency tests: run this long instead of `iters` round trips
    /// (perftest `-D`), keeping at most [`DURATION_SAMPLES`] samples.
    /// Bandwidth tests use [`BwConfig::duration`].
    pub duration: Option<Duration>,
    /// The transport (perftest `-c`): RC, UC (WRITE and SEND tests), UD
    /// (SEND tests; at most the port's MTU per message).
    pub qp_type: rdma_direct::QpType,
    /// The receiving sides take their receives from an SRQ (perftest
    /// `--use-srq`; SEND tests).
    pub use_srq: bool,
}

/// Most round trips a latency test with a duration keeps (their stamps are
/// reserved before the run: 32 MiB); the run ends when they are taken.
pub const DURATION_SAMPLES: u32 = 4_000_000;

/// A `-D` deadline: read on the counter ([`ticks`]) in the timed loops, and
/// confirmed on the monotonic clock once the counter says it has passed. A
/// counter rate measured over 2 ms ([`ticks_per_ns`]) can be a few percent
/// off in a QEMU TCG guest, whose clock reads are system calls; unconfirmed,
/// a run could end before its duration.
#[derive(Clone, Copy, Debug)]
struct Deadline {
    /// When the counter says the duration is over.
    at: u64,
    start: Instant,
    d: Duration,
}

/// The deadline `d` from now; `None` without one.
fn deadline_after(d: Option<Duration>) -> Option<Deadline> {
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
fn past(deadline: &mut Option<Deadline>) -> bool {
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

/// perftest's `-A`: which atomic the atomic tests post.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AtomicKind {
    /// Fetch-and-add of 1.
    #[default]
    FetchAndAdd,
    /// Compare-and-swap: compare 0, swap 1 (after the first it fails the
    /// compare, which is still one atomic round trip).
    CmpAndSwap,
}

impl AtomicKind {
    /// perftest's name for it (`-A FETCH_AND_ADD`, `-A CMP_AND_SWAP`).
    pub fn name(self) -> &'static str {
        match self {
            AtomicKind::FetchAndAdd => "FETCH_AND_ADD",
            AtomicKind::CmpAndSwap => "CMP_AND_SWAP",
        }
    }

    fn wr<'a>(self, wr_id: u64, old: &'a [Sge], remote: RemoteAddr) -> SendWr<'a> {
        match self {
            AtomicKind::FetchAndAdd => SendWr::atomic_fetch_add(wr_id, old, remote, 1),
            AtomicKind::CmpAndSwap => SendWr::atomic_cmp_swp(wr_id, old, remote, 0, 1),
        }
    }
}

impl Default for LatConfig {
    fn default() -> Self {
        LatConfig {
            device: rdma_direct::SIM_DEVICE.into(),
            size: 2,
            iters: 1000,
            inline_size: 220,
            port: 1,
            gid_index: None,
            backend: rdma_direct::Backend::Auto,
            events: false,
            spins: 0,
            async_wait: false,
            atomic: AtomicKind::FetchAndAdd,
            rdma_cm: false,
            duration: None,
            qp_type: rdma_direct::QpType::Rc,
            use_srq: false,
        }
    }
}

/// One row of perftest's latency table; times in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatReport {
    pub bytes: u32,
    pub iterations: u32,
    pub t_min: f64,
    pub t_max: f64,
    pub t_typical: f64,
    pub t_avg: f64,
    pub t_stdev: f64,
    pub p99: f64,
    pub p99_9: f64,
    /// CPU cost of posting and polling during the run.
    pub cpu: CpuCost,
}

/// perftest's latency header line.
pub const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";
/// The column names of [`LAT_HEADER`], in order.
pub const LAT_COLUMNS: [&str; 9] = [
    "#bytes",
    "#iterations",
    "t_min[usec]",
    "t_max[usec]",
    "t_typical[usec]",
    "t_avg[usec]",
    "t_stdev[usec]",
    "99% percentile[usec]",
    "99.9% percentile[usec]",
];

/// Lays `values` out under `header`, whose column names `names` holds in
/// order: each value ends where its name ends (numbers right-aligned under
/// their names), separated by spaces only, and the line is padded with
/// spaces to the header's length, so columns printed after it (as
/// [`CPU_HEADER`]'s after perftest's) line up too. A value wider than its
/// column pushes the rest of the row right; one space always separates two
/// values. A name missing from `header` gets its value one space after the
/// previous one.
pub fn under_header(header: &str, names: &[&str], values: &[String]) -> String {
    let mut out = String::with_capacity(header.len());
    let mut from = 0;
    for (name, value) in names.iter().zip(values) {
        let end = match header[from..].find(name) {
            Some(i) => {
                from += i + name.len();
                from
            }
            None => 0,
        };
        let gap = usize::from(!out.is_empty());
        let pad = end.saturating_sub(out.len() + value.len()).max(gap);
        out.extend(std::iter::repeat_n(' ', pad));
        out.push_str(value);
    }
    let pad = header.len().saturating_sub(out.len());
    out.extend(std::iter::repeat_n(' ', pad));
    out
}
/// perftest's separator line.
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

impl LatReport {
    /// Reduces round-trip samples (ns) the way perftest 4.5's `print_report_lat`
    /// does: sort, drop the [`LAT_MEASURE_TAIL`] largest, median of the rest
    /// (`t_typical`), average and standard deviation over the rest, percentiles
    /// at index `ceil(n * p)`, all divided by `rtt_factor` (2 for write/send).
    /// Needs at least `LAT_MEASURE_TAIL + 1` samples.
    pub fn from_round_trips(
        bytes: u32,
        iterations: u32,
        rtt_ns: &mut [f64],
        rtt_factor: f64,
    ) -> LatReport {
        assert!(
            rtt_ns.len() > LAT_MEASURE_TAIL,
            "need more than {LAT_MEASURE_TAIL} samples"
        );
        rtt_ns.sort_by(|a, b| a.total_cmp(b));
        let n = rtt_ns.len() - LAT_MEASURE_TAIL;
        let d: Vec<f64> = rtt_ns.iter().map(|x| x / 1000.0 / rtt_factor).collect();
        let median = if (n - 1) % 2 == 1 {
            (d[n / 2] + d[n / 2 - 1]) / 2.0
        } else {
            d[n / 2]
        };
        let avg = d[..n].iter().sum::<f64>() / n as f64;
        let var = d[..n].iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
        let idx = |p: f64| ((n as f64 * p).ceil() as usize).min(d.len() - 1);
        LatReport {
            bytes,
            iterations,
            t_min: d[0],
            t_max: d[n],
            t_typical: median,
            t_avg: avg,
            t_stdev: var.sqrt(),
            p99: d[idx(0.99)],
            p99_9: d[idx(0.999)],
            cpu: CpuCost::default(),
        }
    }

    /// The row under [`LAT_HEADER`]: perftest 4.5's columns (`REPORT_FMT_LAT`
    /// in `src/perftest_parameters.h`; times in usec, two decimals), each
    /// value right-aligned under its column's name ([`under_header`]), so
    /// whitespace-splitting parsers keep working and the columns line up.
    pub fn row(&self) -> String {
        let t = |v: f64| format!("{v:.2}");
        under_header(
            LAT_HEADER,
            &LAT_COLUMNS,
            &[
                self.bytes.to_string(),
                self.iterations.to_string(),
                t(self.t_min),
                t(self.t_max),
                t(self.t_typical),
                t(self.t_avg),
                t(self.t_stdev),
                t(self.p99),
                t(self.p99_9),
            ],
        )
    }
}

/// A cycle counter: the TSC on x86_64 (about 8 ns a read here, no
/// serialization), elsewhere nanoseconds from a monotonic clock.
#[inline(always)]
fn ticks() -> u64 {
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
fn ticks_per_ns() -> f64 {
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
fn ns_between(t0: u64, t1: u64) -> f64 {
    t1.wrapping_sub(t0) as f64 / ticks_per_ns()
}

/// Round trips (ns) between consecutive stamps.
fn round_trips(stamps: &[u64]) -> Vec<f64> {
    stamps.windows(2).map(|w| ns_between(w[0], w[1])).collect()
}

/// CPU time spent inside `post_send`/`post_recv` and inside `poll` calls that
/// returned completions (empty polls are waiting, not cost), in [`ticks`].
/// The cost of reading the counter itself is measured once and subtracted.
struct CpuMeter {
    post_ticks: u64,
    posted: u64,
    poll_ticks: u64,
    polled: u64,
    overhead: u64,
    start: (Instant, u64),
    /// Completions are waited for with events (`-e`), not by spinning.
    events: bool,
    /// With `events`: empty polls before arming (`--adaptive`).
    spins: u32,
    /// Waits go through the async API (`--async`).
    async_wait: bool,
}

impl CpuMeter {
    fn new(cfg: &LatConfig) -> Self {
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
    fn post(&mut self, wrs: usize, f: impl FnOnce() -> Result<()>) -> Result<()> {
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
    fn poll(&mut self, qp: &mut Qp, wc: &mut [Completion]) -> Result<usize> {
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
    fn polled_async(&mut self, n: usize, dt: u64) {
        self.poll_ticks += dt.saturating_sub(self.overhead);
        self.polled += n as u64;
    }

    /// ns per posted WR and per polled CQE.
    fn report(&self) -> CpuCost {
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

/// CPU cost of the data path during a run: what perftest cannot show.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuCost {
    /// Time inside post calls per work request posted (send and receive), ns.
    pub post_ns: f64,
    /// Time inside poll calls that returned completions, per completion, ns.
    pub poll_ns: f64,
}

/// Header of the columns after perftest's: CPU cost per WR posted and per
/// completion polled.
pub const CPU_HEADER: &str = "   post[nsec/WR]   poll[nsec/CQE]";

impl CpuCost {
    /// The two columns under [`CPU_HEADER`] (ns, one decimal), right-aligned
    /// under their names ([`under_header`]).
    pub fn columns(&self) -> String {
        under_header(
            CPU_HEADER,
            &["post[nsec/WR]", "poll[nsec/CQE]"],
            &[
                format!("{:.1}", self.post_ns),
                format!("{:.1}", self.poll_ns),
            ],
        )
    }
}

/// How long a waiter spins before it starts yielding its core, in
/// [`ticks`]: only while a sim device thread runs in this process, since
/// the device must run for the wait to end and the two may share a core
/// (1 ms when the process has two or more CPUs and the device thread one
/// of its own, else 20 us); on a kernel device a waiter never yields, as
/// perftest's never do.
fn yield_after() -> Option<u64> {
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
fn spin_until(what: impl Fn() -> String, mut done: impl FnMut() -> Result<bool>) -> Result<()> {
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
fn poll_wait(
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
fn async_wait(
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
fn wait_recv(qp: &mut Qp, side: &str, m: &mut CpuMeter) -> Result<()> {
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
fn recv_among(wc: &[Completion]) -> Result<bool> {
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
fn wait_completion(qp: &mut Qp, side: &str, m: &mut CpuMeter) -> Result<()> {
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
fn cfg_completion(cfg: &LatConfig) -> rdma_direct::CompletionMode {
    match (cfg.events, cfg.spins) {
        (false, _) => rdma_direct::CompletionMode::Busy,
        (true, 0) => rdma_direct::CompletionMode::Events,
        (true, spins) => rdma_direct::CompletionMode::Adaptive { spins },
    }
}

/// What a benchmark ran on, for the banner.
#[derive(Clone, Debug)]
pub struct RunInfo {
    pub device: String,
    pub data_path: &'static str,
    /// `None`: both sides in this process; else this side's role
    /// (`server`, `client`) in a two-host run over the TCP exchange.
    pub role: Option<&'static str>,
    /// The QPs were connected through rdma_cm (`-R`).
    pub rdma_cm: bool,
    /// How completions are waited for (`-e`, `--adaptive`).
    pub completion: rdma_direct::CompletionMode,
    /// Number of QPs running the test (`-q`).
    pub qps: u32,
    /// Max inline data of the QPs, bytes.
    pub inline: u32,
    /// Send queue depth, work requests.
    pub tx_depth: u32,
    /// Side A (timestamps) and side B.
    pub sides: [SideInfo; 2],
    /// The transport (`-c`) and whether receives come from an SRQ.
    pub qp_type: rdma_direct::QpType,
    pub use_srq: bool,
}

/// One side's address, as perftest prints "local address" / "remote address".
#[derive(Clone, Copy, Debug)]
pub struct SideInfo {
    pub qpn: u32,
    pub path: rdma_direct::PathInfo,
    pub rkey: u32,
    /// Start of its registered buffer (perftest's `VAddr`).
    pub vaddr: u64,
}

impl RunInfo {
    /// perftest's banner (`ctx_print_test_info`, `ctx_print_pingpong_data`),
    /// with the lines that apply to a one-process run.
    pub fn banner(&self, title: &str) -> String {
        let p = self.sides[0].path;
        let mut s = String::new();
        let mut line = |l: String| {
            s.push_str(&l);
            s.push('\n');
        };
        line(RESULT_LINE.to_string());
        line(format!("                    {title}"));
        line(format!(
            " Dual-port       : OFF\t\tDevice         : {}",
            self.device
        ));
        line(format!(
            " Number of qps   : {}\t\tTransport type : {}",
            self.qps,
            if p.link_layer == "sim" { "sim" } else { "IB" }
        ));
        line(format!(
            " Connection type : {}\t\tUsing SRQ      : {}",
            self.qp_type.name(),
            if self.use_srq { "ON" } else { "OFF" }
        ));
        line(format!(
            " Data path       : {}\t\tSides          : {}",
            self.data_path,
            self.role
                .map_or("both in this process".to_string(), |r| format!(
                    "this host is the {r}"
                ))
        ));
        line(format!(" TX depth        : {}", self.tx_depth));
        line(format!(
            " Mtu             : {}",
            p.mtu.map_or("-".to_string(), |m| format!("{m}[B]"))
        ));
        line(format!(" Link type       : {}", p.link_layer));
        if let Some(g) = p.gid_index {
            line(format!(" GID index       : {g}"));
        }
        line(format!(" Max inline data : {}[B]", self.inline));
        line(format!(
            " CQ waits        : {}",
            match self.completion {
                rdma_direct::CompletionMode::Busy => "busy polling".to_string(),
                rdma_direct::CompletionMode::Events => "events (arm, sleep, poll)".to_string(),
                rdma_direct::CompletionMode::Adaptive { spins } =>
                    format!("adaptive ({spins} empty polls, then events)"),
            }
        ));
        line(format!(
            " rdma_cm QPs\t : {}",
            if self.rdma_cm { "ON" } else { "OFF" }
        ));
        line(match (self.role, self.rdma_cm) {
            (None, _) => " Data ex. method : none (both QPs in this process)".to_string(),
            (Some(_), false) => {
                " Data ex. method : Ethernet (TCP, rdma-direct exchange v1)".to_string()
            }
            (Some(_), true) => {
                " Data ex. method : rdma_cm (buffers over TCP, rdma-direct exchange v1)".to_string()
            }
        });
        line(RESULT_LINE.to_string());
        for (name, side) in [("local", &self.sides[0]), ("remote", &self.sides[1])] {
            line(format!(
                " {name} address: LID {:#06x} QPN {:#06x} PSN {:#08x} RKey {:#08x} VAddr {:#018x}",
                side.path.lid, side.qpn, side.path.sq_psn, side.rkey, side.vaddr
            ));
            if side.path.gid_index.is_some() {
                let g: Vec<String> = side.path.gid.iter().map(|b| format!("{b:02}")).collect();
                line(format!(" GID: {}", g.join(":")));
            }
        }
        line(RESULT_LINE.to_string());
        s
    }
}

/// Keeps the calling thread off the sim's device CPU while it lives, then
/// restores its affinity. Without it the scheduler may put the spinning bench
/// thread and the sim's spinning device thread on one core.
struct OffDeviceCpu(Option<nix::sched::CpuSet>);

impl OffDeviceCpu {
    fn new(is_sim: bool) -> Self {
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

/// The latency tests (perftest's `ib_write_lat`, `ib_read_lat`, `ib_atomic_lat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LatTest {
    /// Ping-pong of RDMA WRITEs; reports half the round trip.
    Write,
    /// Ping-pong of SENDs into posted receives; reports half the round trip.
    Send,
    /// RDMA READ, one side; reports the full round trip.
    Read,
    /// Fetch-and-add of an 8-byte word, one side; reports the full round trip.
    Atomic,
}

impl LatTest {
    /// perftest's banner title.
    pub fn title(self) -> &'static str {
        match self {
            LatTest::Write => "RDMA_Write Latency Test",
            LatTest::Send => "Send Latency Test",
            LatTest::Read => "RDMA_Read Latency Test",
            LatTest::Atomic => "Atomic FETCH_AND_ADD Latency Test",
        }
    }

    /// perftest's `rtt_factor`: 2 for write and send, 1 for read and atomic.
    pub fn rtt_factor(self) -> f64 {
        match self {
            LatTest::Write | LatTest::Send => 2.0,
            LatTest::Read | LatTest::Atomic => 1.0,
        }
    }
}

/// Checks a run's message size (1..=[`MAX_SIZE`] bytes) and iteration count
/// (at least [`MIN_ITERS`]).
fn check_run(size: u32, iters: u32) -> Result<()> {
    if size == 0 || size > MAX_SIZE {
        return Err(Error::Invalid(format!(
            "size {size} must be 1..={MAX_SIZE} bytes"
        )));
    }
    if iters < MIN_ITERS {
        return Err(Error::Invalid(format!(
            "iterations {iters} must be at least {MIN_ITERS}"
        )));
    }
    Ok(())
}

/// Room for one timestamp per iteration, reserved up front so the timed
/// loop never allocates.
fn reserve<T>(iters: u32) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(iters as usize).map_err(|_| {
        Error::Invalid(format!(
            "cannot hold {iters} timestamps in memory; use fewer iterations"
        ))
    })?;
    Ok(v)
}

/// [`check_run`], then [`reserve`].
fn checked_run<T>(size: u32, iters: u32) -> Result<Vec<T>> {
    check_run(size, iters)?;
    reserve(iters)
}

/// Checks a bandwidth run's `-q`, `-t` and `-Q`.
fn check_bw(cfg: &BwConfig) -> Result<()> {
    if cfg.qps == 0 || cfg.qps > 64 {
        return Err(Error::Invalid(format!("-q {} must be 1..=64", cfg.qps)));
    }
    if cfg.tx_depth == 0 || cfg.tx_depth > 1 << 14 {
        return Err(Error::Invalid(format!(
            "tx depth {} must be 1..=16384",
            cfg.tx_depth
        )));
    }
    if cfg.cq_mod == 0 {
        return Err(Error::Invalid("CQ moderation must be at least 1".into()));
    }
    Ok(())
}

/// The latency report of a run's timestamps (one per round trip started),
/// with the CPU cost `m` measured.
fn lat_report(size: u32, stamps: &[u64], rtt_factor: f64, m: &CpuMeter) -> Result<LatReport> {
    let mut rtt = round_trips(stamps);
    if rtt.len() <= LAT_MEASURE_TAIL {
        return Err(Error::Invalid(format!(
            "{} round trips: too few to report",
            rtt.len()
        )));
    }
    let mut r = LatReport::from_round_trips(size, stamps.len() as u32, &mut rtt, rtt_factor);
    r.cpu = m.report();
    Ok(r)
}

mod bw;
mod lat;
mod reg;
mod remote;
mod transport;

pub use bw::*;
pub use lat::*;
pub use reg::*;
pub use remote::*;
pub use transport::check_transport;
