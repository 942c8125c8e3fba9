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

use crate::{
    Access, Completion, Context, Error, Mr, Qp, QpConfig, RecvWr, RemoteAddr, Result, SendWr, Sge,
};
use std::time::{Duration, Instant};

/// perftest's `LAT_MEASURE_TAIL`: the largest samples dropped from the report.
pub const LAT_MEASURE_TAIL: usize = 2;
/// perftest's `MIN_ITER`.
pub const MIN_ITERS: u32 = 5;
/// Largest message perftest sends (`-a` goes to 2^23).
pub const MAX_SIZE: u32 = 8 << 20;
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
    pub backend: crate::Backend,
    /// Wait for completions with events instead of spinning (perftest `-e`).
    pub events: bool,
    /// With `events`: empty polls before arming and sleeping (the adaptive
    /// mode, [`crate::CompletionMode::Adaptive`], `--adaptive`); 0 arms at
    /// the first empty poll, as perftest's `-e`.
    pub spins: u32,
    /// The atomic the atomic tests run (perftest `-A`).
    pub atomic: AtomicKind,
    /// Two hosts: connect the QPs through rdma_cm (perftest `-R`).
    pub rdma_cm: bool,
    /// Latency tests: run this long instead of `iters` round trips
    /// (perftest `-D`), keeping at most [`DURATION_SAMPLES`] samples.
    /// Bandwidth tests use [`BwConfig::duration`].
    pub duration: Option<Duration>,
}

/// Most round trips a latency test with a duration keeps (their stamps are
/// reserved before the run: 32 MiB); the run ends when they are taken.
pub const DURATION_SAMPLES: u32 = 4_000_000;

/// The deadline `d` from now, in [`ticks`]; `None` without one.
fn deadline_after(d: Option<Duration>) -> Option<u64> {
    d.map(|d| ticks().wrapping_add((d.as_nanos() as f64 * ticks_per_ns()) as u64))
}

/// Whether `deadline` (from [`deadline_after`]) has passed.
#[inline]
fn past(deadline: Option<u64>) -> bool {
    deadline.is_some_and(|d| ticks().wrapping_sub(d) < u64::MAX / 2)
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
    /// perftest's name for it, as in its banner.
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
            device: crate::SIM_DEVICE.into(),
            size: 2,
            iters: 1000,
            inline_size: 220,
            port: 1,
            gid_index: None,
            backend: crate::Backend::Auto,
            events: false,
            spins: 0,
            atomic: AtomicKind::FetchAndAdd,
            rdma_cm: false,
            duration: None,
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

    /// The row as perftest 4.5 prints it (`REPORT_FMT_LAT` in
    /// `src/perftest_parameters.h`), so column-based parsers keep working.
    pub fn row(&self) -> String {
        format!(
            " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
            self.bytes,
            self.iterations,
            self.t_min,
            self.t_max,
            self.t_typical,
            self.t_avg,
            self.t_stdev,
            self.p99,
            self.p99_9
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
    /// The two columns under [`CPU_HEADER`].
    pub fn columns(&self) -> String {
        format!("   {:<13.1}   {:<13.1}", self.post_ns, self.poll_ns)
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
        if spins % 256 != 0 {
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

/// Polls until a receive completes (send completions on the way are taken
/// and dropped); an error completion of either kind fails the run.
fn wait_recv(qp: &mut Qp, side: &str, m: &mut CpuMeter) -> Result<()> {
    poll_wait(
        qp,
        m,
        || format!("no receive completion on side {side} within {WAIT_LIMIT:?}"),
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
        got |= c.opcode == crate::WcOpcode::RECV;
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
fn cfg_completion(cfg: &LatConfig) -> crate::CompletionMode {
    match (cfg.events, cfg.spins) {
        (false, _) => crate::CompletionMode::Busy,
        (true, 0) => crate::CompletionMode::Events,
        (true, spins) => crate::CompletionMode::Adaptive { spins },
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
    pub completion: crate::CompletionMode,
    /// Number of QPs running the test (`-q`).
    pub qps: u32,
    /// Max inline data of the QPs, bytes.
    pub inline: u32,
    /// Send queue depth, work requests.
    pub tx_depth: u32,
    /// Side A (timestamps) and side B.
    pub sides: [SideInfo; 2],
}

/// One side's address, as perftest prints "local address" / "remote address".
#[derive(Clone, Copy, Debug)]
pub struct SideInfo {
    pub qpn: u32,
    pub path: crate::PathInfo,
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
        line(" Connection type : RC\t\tUsing SRQ      : OFF".to_string());
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
                crate::CompletionMode::Busy => "busy polling".to_string(),
                crate::CompletionMode::Events => "events (arm, sleep, poll)".to_string(),
                crate::CompletionMode::Adaptive { spins } =>
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

/// Runs `write_lat` with both sides in this process (two connected QPs on one device).
pub fn write_lat(cfg: &LatConfig) -> Result<(RunInfo, LatReport)> {
    run_lat(LatTest::Write, cfg)
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

/// Runs a latency test with both sides in this process (two connected QPs on
/// one device). Atomics always move 8 bytes (perftest has no `-s` for them).
pub fn run_lat(test: LatTest, cfg: &LatConfig) -> Result<(RunInfo, LatReport)> {
    let size_asked = if test == LatTest::Atomic { 8 } else { cfg.size };
    let rounds = if cfg.duration.is_some() {
        DURATION_SAMPLES
    } else {
        cfg.iters
    };
    let mut stamps: Vec<u64> = checked_run(size_asked, rounds)?;
    let ctx = Context::open_with(&cfg.device, cfg.backend)?;
    let _off_device_cpu = OffDeviceCpu::new(cfg.device == crate::SIM_DEVICE);
    let pd = ctx.alloc_pd()?;
    let size = size_asked as usize;
    // Each side: [0, size) is what it sends (or where reads and old values
    // land), [size, 2 size) what the peer writes, reads or adds to.
    let access =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let mr_a = pd.reg_mr(2 * size, access)?;
    let mr_b = pd.reg_mr(2 * size, access)?;
    let inline = matches!(test, LatTest::Write | LatTest::Send) && size_asked <= cfg.inline_size;
    let qcfg = QpConfig {
        max_send_wr: 16,
        max_inline: if inline { cfg.inline_size } else { 0 },
        port: cfg.port,
        gid_index: cfg.gid_index,
        ..QpConfig::default()
    };
    let (mut a, mut b) = pd.create_connected_pair(&qcfg)?;
    let side = |qp: &Qp, mr: &Mr| SideInfo {
        qpn: qp.qp_num(),
        path: qp.path(),
        rkey: mr.rkey().0,
        vaddr: mr.addr(),
    };
    let info = RunInfo {
        qps: 1,
        rdma_cm: false,
        completion: cfg_completion(cfg),
        role: None,
        device: ctx.name().into(),
        data_path: a.data_path(),
        inline: qcfg.max_inline,
        // One WR in flight at a time, as perftest's latency tests print.
        tx_depth: 1,
        sides: [side(&a, &mr_a), side(&b, &mr_b)],
    };
    let remote = |mr: &Mr| RemoteAddr {
        addr: mr.addr() + size as u64,
        rkey: mr.rkey(),
    };
    let (to_b, to_a) = (remote(&mr_b), remote(&mr_a));
    let sge_a = [Sge::new(&mr_a, 0, size_asked)?];
    let sge_b = [Sge::new(&mr_b, 0, size_asked)?];
    let mut m = CpuMeter::new(cfg);
    let deadline = deadline_after(cfg.duration);

    match test {
        LatTest::Write => {
            let last = size - 1;
            let mut wr_a = SendWr::rdma_write(0, &sge_a, to_b).signaled();
            let mut wr_b = SendWr::rdma_write(0, &sge_b, to_a).signaled();
            wr_a.inline = inline;
            wr_b.inline = inline;
            for i in 0..rounds {
                if past(deadline) {
                    break;
                }
                let seq = (i as u8).wrapping_add(1);
                stamps.push(ticks());
                mr_a.store_u8(last, seq);
                wr_a.wr_id = i as u64;
                m.post(1, || a.post_send(&[wr_a]))?;
                spin_until(
                    || format!("iteration {i}: A's write never reached B"),
                    || Ok(mr_b.load_u8(size + last) == seq),
                )?;
                mr_b.store_u8(last, seq);
                wr_b.wr_id = i as u64;
                m.post(1, || b.post_send(&[wr_b]))?;
                spin_until(
                    || format!("iteration {i}: B's write never reached A"),
                    || Ok(mr_a.load_u8(size + last) == seq),
                )?;
                wait_completion(&mut b, "B", &mut m)?;
                wait_completion(&mut a, "A", &mut m)?;
            }
        }
        LatTest::Send => {
            // perftest's send latency: each side keeps a receive posted into
            // [size, 2 size) of its buffer; A sends, B waits for the receive,
            // reposts and sends back; A waits for its receive and reposts.
            let rbuf_a = [Sge::new(&mr_a, size, size_asked)?];
            let rbuf_b = [Sge::new(&mr_b, size, size_asked)?];
            m.post(1, || a.post_recv(&[RecvWr::new(0, &rbuf_a)]))?;
            m.post(1, || b.post_recv(&[RecvWr::new(0, &rbuf_b)]))?;
            let mut wr_a = SendWr::send(0, &sge_a).signaled();
            let mut wr_b = SendWr::send(0, &sge_b).signaled();
            wr_a.inline = inline;
            wr_b.inline = inline;
            for _ in 0..rounds {
                if past(deadline) {
                    break;
                }
                stamps.push(ticks());
                m.post(1, || a.post_send(&[wr_a]))?;
                wait_recv(&mut b, "B", &mut m)?;
                m.post(1, || b.post_recv(&[RecvWr::new(0, &rbuf_b)]))?;
                m.post(1, || b.post_send(&[wr_b]))?;
                wait_recv(&mut a, "A", &mut m)?;
                m.post(1, || a.post_recv(&[RecvWr::new(0, &rbuf_a)]))?;
            }
        }
        LatTest::Read | LatTest::Atomic => {
            // perftest's read and atomic latency: one side posts, waits for its
            // completion, posts again; the peer is passive.
            let mut wr = if test == LatTest::Read {
                SendWr::rdma_read(0, &sge_a, to_b).signaled()
            } else {
                cfg.atomic.wr(0, &sge_a, to_b).signaled()
            };
            for i in 0..rounds {
                if past(deadline) {
                    break;
                }
                stamps.push(ticks());
                wr.wr_id = i as u64;
                m.post(1, || a.post_send(&[wr]))?;
                wait_completion(&mut a, "A", &mut m)?;
            }
        }
    }
    drop(b);
    let report = lat_report(size_asked, &stamps, test.rtt_factor(), &m)?;
    Ok((info, report))
}

/// The bandwidth tests (perftest's `ib_write_bw`, `ib_read_bw`,
/// `ib_send_bw`, `ib_atomic_bw`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BwTest {
    Write,
    Read,
    /// SENDs into receives the other side keeps posted (perftest's
    /// `ib_send_bw`: 512 receives posted, at least `tx_depth`, at most `iters`).
    Send,
    Atomic,
}

impl BwTest {
    /// perftest's banner title.
    pub fn title(self) -> &'static str {
        match self {
            BwTest::Write => "RDMA_Write BW Test",
            BwTest::Read => "RDMA_Read BW Test",
            BwTest::Send => "Send BW Test",
            BwTest::Atomic => "Atomic FETCH_AND_ADD BW Test",
        }
    }
}

/// perftest's CQ moderation when `-Q` is not given: a completion every 100
/// WRs, but every WR for messages over 8 KiB (its `MSG_SIZE_CQ_MOD_LIMIT`),
/// where moderation skews the result and leaves long runs without any
/// completion to show progress.
pub fn default_cq_mod(size: u32) -> u32 {
    if size > 8192 {
        1
    } else {
        100
    }
}

/// Settings of a bandwidth test (perftest's flags in brackets).
#[derive(Clone, Debug)]
pub struct BwConfig {
    pub lat: LatConfig,
    /// Send queue depth (perftest `-t`), work requests kept in flight.
    pub tx_depth: u32,
    /// A completion is requested every `cq_mod` work requests (perftest `-Q`).
    pub cq_mod: u32,
    /// Work requests per post call (perftest `-l`) (one doorbell for the list).
    pub post_list: u32,
    /// QPs, each running the test (perftest `-q`): every one keeps `tx_depth` WRs in
    /// flight and runs `iters` of them; the report is over all of them.
    pub qps: u32,
    /// Run for this long instead of `iters` WRs (perftest `-D`): the report counts
    /// the WRs completed, and has no peak (perftest's `-D` leaves it out
    /// too).
    pub duration: Option<Duration>,
}

impl Default for BwConfig {
    fn default() -> Self {
        BwConfig {
            lat: LatConfig {
                size: 65536,
                iters: 5000,
                ..LatConfig::default()
            },
            tx_depth: 128,
            cq_mod: 100,
            post_list: 1,
            qps: 1,
            duration: None,
        }
    }
}

/// One row of perftest's bandwidth table. MB are 2^20 bytes, as perftest's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BwReport {
    pub bytes: u32,
    pub iterations: u32,
    /// perftest's peak: the best average over any run of consecutive WRs,
    /// from the post of the first to the completion of the last; 0 when not
    /// computed (more than [`PEAK_MAX_ITERS`] iterations, as perftest's `-N`).
    pub bw_peak: f64,
    pub bw_average: f64,
    /// Millions of messages per second.
    pub msg_rate: f64,
    /// CPU cost of posting and polling during the run.
    pub cpu: CpuCost,
}

/// perftest computes the peak only up to this many iterations.
pub const PEAK_MAX_ITERS: u32 = 20_000;

/// perftest's bandwidth header line.
pub const BW_HEADER: &str =
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";

impl BwReport {
    /// The row as perftest prints it (`REPORT_FMT`).
    pub fn row(&self) -> String {
        format!(
            " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
            self.bytes, self.iterations, self.bw_peak, self.bw_average, self.msg_rate
        )
    }

    /// Reduces per-WR post and completion times (ns since the start) the way
    /// perftest's `print_report_bw` does.
    ///
    /// Uses the first `min(posted.len(), completed.len())` WRs; with none,
    /// or no time between the first post and the last completion, every
    /// figure is 0.
    pub fn from_times(bytes: u32, posted: &[f64], completed: &[f64]) -> BwReport {
        let n = posted.len().min(completed.len());
        if n == 0 || completed[n - 1] <= posted[0] {
            return BwReport {
                bytes,
                iterations: n as u32,
                bw_peak: 0.0,
                bw_average: 0.0,
                msg_rate: 0.0,
                cpu: CpuCost::default(),
            };
        }
        let mb = (1u64 << 20) as f64;
        let total_s = (completed[n - 1] - posted[0]) / 1e9;
        let bw_average = bytes as f64 * n as f64 / total_s / mb;
        let mut best = f64::INFINITY;
        if n as u32 <= PEAK_MAX_ITERS {
            for (i, p) in posted[..n].iter().enumerate() {
                for (k, c) in completed[i..n].iter().enumerate() {
                    let t = (c - p) / (k + 1) as f64;
                    if t > 0.0 && t < best {
                        best = t;
                    }
                }
            }
        }
        let bw_peak = if best.is_finite() {
            bytes as f64 / (best / 1e9) / mb
        } else {
            0.0
        };
        BwReport {
            bytes,
            iterations: n as u32,
            bw_peak,
            bw_average,
            msg_rate: n as f64 / total_s / 1e6,
            cpu: CpuCost::default(),
        }
    }
}

/// Runs a bandwidth test: side A keeps `tx_depth` WRs in flight against side
/// B's buffer, asking for a completion every `cq_mod` WRs, until `iters` are done.
pub fn run_bw(test: BwTest, cfg: &BwConfig) -> Result<(RunInfo, BwReport)> {
    let size = if test == BwTest::Atomic {
        8
    } else {
        cfg.lat.size
    };
    check_run(size, cfg.lat.iters)?;
    check_bw(cfg)?;
    let ctx = Context::open_with(&cfg.lat.device, cfg.lat.backend)?;
    let _off_device_cpu = OffDeviceCpu::new(cfg.lat.device == crate::SIM_DEVICE);
    let pd = ctx.alloc_pd()?;
    let access =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let mr_a = pd.reg_mr(size as usize, access)?;
    let mr_b = pd.reg_mr(size as usize, access)?;
    let inline = matches!(test, BwTest::Write | BwTest::Send) && size <= cfg.lat.inline_size;
    // perftest's send_bw: 512 receives posted (`-r`), at most `iters`, and
    // never fewer than the sends in flight.
    let rx_depth = if test == BwTest::Send {
        cfg.tx_depth.max(512).min(cfg.lat.iters.max(cfg.tx_depth))
    } else {
        0
    };
    let qcfg = QpConfig {
        max_send_wr: cfg.tx_depth,
        max_recv_wr: rx_depth,
        max_inline: if inline { cfg.lat.inline_size } else { 0 },
        port: cfg.lat.port,
        gid_index: cfg.lat.gid_index,
        ..QpConfig::default()
    };
    let mut pairs = Vec::with_capacity(cfg.qps as usize);
    for _ in 0..cfg.qps {
        pairs.push(pd.create_connected_pair(&qcfg)?);
    }
    let (a, b) = &pairs[0];
    let side = |qp: &Qp, mr: &Mr| SideInfo {
        qpn: qp.qp_num(),
        path: qp.path(),
        rkey: mr.rkey().0,
        vaddr: mr.addr(),
    };
    let info = RunInfo {
        qps: cfg.qps,
        rdma_cm: false,
        completion: cfg_completion(&cfg.lat),
        role: None,
        device: ctx.name().into(),
        data_path: a.data_path(),
        inline: qcfg.max_inline,
        tx_depth: cfg.tx_depth,
        sides: [side(a, &mr_a), side(b, &mr_b)],
    };
    let to_b = RemoteAddr {
        addr: mr_b.addr(),
        rkey: mr_b.rkey(),
    };
    let sge = [Sge::new(&mr_a, 0, size)?];
    let mut wr = match test {
        BwTest::Write => SendWr::rdma_write(0, &sge, to_b),
        BwTest::Read => SendWr::rdma_read(0, &sge, to_b),
        BwTest::Send => SendWr::send(0, &sge),
        BwTest::Atomic => cfg.lat.atomic.wr(0, &sge, to_b),
    };
    wr.inline = inline;
    let mut m = CpuMeter::new(&cfg.lat);
    // Send: B keeps `rx_depth` receives posted and reposts each one consumed.
    let rsge = [Sge::new(&mr_b, 0, size)?];
    let recv = [RecvWr::new(0, &rsge)];
    let mut lanes = Vec::with_capacity(pairs.len());
    for (a, b) in pairs.iter_mut() {
        for _ in 0..rx_depth {
            m.post(1, || b.post_recv(&recv))?;
        }
        let receiver = (rx_depth > 0).then_some(Receiver {
            qp: b,
            recv: &recv,
            rx_depth,
        });
        lanes.push(Lane::new(a, wr, receiver, cfg.lat.iters)?);
    }
    let count = bw_loop(&mut lanes, cfg, &mut m)?;
    let mut report = match cfg.duration {
        None => lanes_report(size, &lanes),
        Some(_) => count.report(size),
    };
    drop(lanes);
    drop(pairs);
    report.cpu = m.report();
    Ok((info, report))
}

/// The receiving side of a SEND bandwidth test in this process: its QP,
/// the receive it reposts, and how many it keeps posted.
struct Receiver<'a, 'b> {
    qp: &'a mut Qp,
    recv: &'a [RecvWr<'b>],
    rx_depth: u32,
}

/// One sender of a bandwidth test (`-q` runs several): its QP, the WR it
/// repeats, its receiver (SEND in one process), and what it has posted and
/// completed, with per-WR times unless the run is `-D`.
struct Lane<'a, 'b> {
    a: &'a mut Qp,
    wr: SendWr<'b>,
    receiver: Option<Receiver<'a, 'b>>,
    posted_at: Vec<f64>,
    completed_at: Vec<f64>,
    posted: usize,
    completed: usize,
    received: usize,
    /// With `-D`: the index of the last WR (posted after the deadline).
    last: Option<usize>,
}

impl<'a, 'b> Lane<'a, 'b> {
    /// A lane with room reserved for `iters` post and completion times.
    fn new(
        a: &'a mut Qp,
        wr: SendWr<'b>,
        receiver: Option<Receiver<'a, 'b>>,
        iters: u32,
    ) -> Result<Self> {
        Ok(Lane {
            a,
            wr,
            receiver,
            posted_at: reserve(iters)?,
            completed_at: reserve(iters)?,
            posted: 0,
            completed: 0,
            received: 0,
            last: None,
        })
    }
}

/// The report of lanes that recorded per-WR times: perftest's reduction over
/// all of their WRs together (post and completion times merged in order).
fn lanes_report(bytes: u32, lanes: &[Lane<'_, '_>]) -> BwReport {
    if let [one] = lanes {
        return BwReport::from_times(bytes, &one.posted_at, &one.completed_at);
    }
    let mut posted: Vec<f64> = lanes
        .iter()
        .flat_map(|l| l.posted_at.iter().copied())
        .collect();
    let mut completed: Vec<f64> = lanes
        .iter()
        .flat_map(|l| l.completed_at.iter().copied())
        .collect();
    posted.sort_by(|a, b| a.total_cmp(b));
    completed.sort_by(|a, b| a.total_cmp(b));
    BwReport::from_times(bytes, &posted, &completed)
}

/// Side A of a bandwidth test, on every lane: keeps `tx_depth` copies of
/// each lane's WR in flight, every `cq_mod`-th (and the last) signaled,
/// until each lane has `iters` completed (or, with `-D`, until the deadline
/// and the WR posted after it), recording when each WR was posted and
/// completed (ns since the start). A lane's receiver (SEND in one process)
/// has its completions drained and its receives reposted in the same loop.
fn bw_loop(lanes: &mut [Lane<'_, '_>], cfg: &BwConfig, m: &mut CpuMeter) -> Result<BwCount> {
    // With -D: no per-WR times (the count is open), and the WR posted
    // after the deadline is signaled and is the last.
    let timed = cfg.duration.is_none();
    let iters = if timed {
        cfg.lat.iters as usize
    } else {
        usize::MAX
    };
    let cq_mod = cfg.cq_mod.min(cfg.tx_depth) as usize;
    let post_list = (cfg.post_list.max(1) as usize).min(cfg.tx_depth as usize);
    // Reserved here: the loop reuses it without allocating.
    let mut batch: Vec<SendWr<'_>> = Vec::with_capacity(post_list);
    let rate = ticks_per_ns();
    let limit = (WAIT_LIMIT.as_nanos() as f64 * rate) as u64;
    let start = ticks();
    let deadline = cfg
        .duration
        .map(|d| start.wrapping_add((d.as_nanos() as f64 * rate) as u64));
    let mut last_completion = start;
    let mut wc = [Completion::default(); 16];
    let mut last_progress = start;
    let mut idle = 0u32;
    let done = |l: &Lane<'_, '_>| match deadline {
        None => l.completed >= iters,
        Some(_) => l.last.is_some_and(|x| l.completed > x),
    };
    // Polls a lane's QP once; a completion retires every WR of its lane up
    // to its own. Returns how many came, and when.
    let poll_lane =
        |l: &mut Lane<'_, '_>, m: &mut CpuMeter, wc: &mut [Completion]| -> Result<(usize, u64)> {
            let n = m.poll(l.a, wc)?;
            let t = ticks();
            for c in &wc[..n] {
                if !c.status.is_ok() {
                    return Err(Error::from(*c));
                }
                l.completed = l.completed.max(c.wr_id as usize + 1);
            }
            if timed && n > 0 {
                let now = t.wrapping_sub(start) as f64 / rate;
                while l.completed_at.len() < l.completed {
                    l.completed_at.push(now);
                }
            }
            Ok((n, t))
        };
    let several = lanes.len() > 1;
    while !lanes.iter().all(done) {
        let mut got = 0;
        for l in lanes.iter_mut() {
            // Keep the send queue full, `post_list` WRs per post call.
            while l.posted < iters && l.last.is_none() {
                let i0 = l.posted;
                let over = deadline.is_some_and(|d| ticks().wrapping_sub(d) < u64::MAX / 2);
                let k = if over { 1 } else { post_list.min(iters - i0) };
                if i0 - l.completed + k > cfg.tx_depth as usize {
                    break;
                }
                // When no further list fits behind this one, its last WR is
                // signaled whatever -Q says: else nothing would come back to
                // make room (with -l near -t and -Q not dividing -t).
                let full = i0 + k - l.completed + post_list > cfg.tx_depth as usize;
                batch.clear();
                let mut wr = l.wr;
                for i in i0..i0 + k {
                    wr.wr_id = i as u64;
                    wr.signaled = (i + 1) % cq_mod == 0
                        || i + 1 == iters
                        || over
                        || (full && i + 1 == i0 + k);
                    batch.push(wr);
                }
                let t = ticks().wrapping_sub(start) as f64 / rate;
                if timed {
                    l.posted_at.extend(std::iter::repeat(t).take(k));
                }
                if let Err(e) = m.post(k, || l.a.post_send(&batch)) {
                    if timed {
                        l.posted_at.truncate(i0);
                    }
                    if matches!(e, Error::QueueFull | Error::CqFull) {
                        break;
                    }
                    return Err(e);
                }
                l.posted += k;
                if over {
                    l.last = Some(i0);
                }
            }
            // Drain B's receive completions and repost as many receives, so
            // the sends A posts next find receives (no RNR waits).
            if let Some(r) = l.receiver.as_mut() {
                while l.received < iters {
                    let n = m.poll(r.qp, &mut wc)?;
                    if n == 0 {
                        break;
                    }
                    for c in &wc[..n] {
                        if !c.status.is_ok() {
                            return Err(Error::from(*c));
                        }
                        l.received += 1;
                        if l.received.saturating_add(r.rx_depth as usize) <= iters {
                            m.post(1, || r.qp.post_recv(r.recv))?;
                        }
                    }
                }
            }
            let (n, t) = poll_lane(l, m, &mut wc)?;
            if n > 0 {
                last_completion = t;
            }
            got += n;
        }
        let t = ticks();
        if got > 0 {
            last_progress = t;
            idle = 0;
            continue;
        }
        // Adaptive (--adaptive): rounds without a completion before arming.
        idle = idle.saturating_add(1);
        if m.events && idle > m.spins {
            idle = 0;
            // -e: arm each lane with WRs out, poll once more, then sleep
            // until a CQ's event (a short sleep when several CQs or B's
            // receives also need tending here).
            let mut waiter = None;
            for (k, l) in lanes.iter_mut().enumerate() {
                if l.completed < l.posted {
                    l.a.arm_cq(false)?;
                    let (n, t) = poll_lane(l, m, &mut wc)?;
                    if n > 0 {
                        last_completion = t;
                    }
                    got += n;
                    waiter.get_or_insert(k);
                }
            }
            if got > 0 {
                last_progress = ticks();
                continue;
            }
            if let Some(k) = waiter {
                let nap = if several || lanes[k].receiver.is_some() {
                    1
                } else {
                    100
                };
                lanes[k].a.wait_cq_event(Duration::from_millis(nap))?;
            }
        }
        if ticks().wrapping_sub(last_progress) > limit {
            let (c, p): (usize, usize) = lanes
                .iter()
                .fold((0, 0), |(c, p), l| (c + l.completed, p + l.posted));
            return Err(Error::Timeout(format!(
                "{c} of {} WRs completed; none in {WAIT_LIMIT:?}",
                if timed { iters * lanes.len() } else { p }
            )));
        }
    }
    Ok(BwCount {
        completed: lanes.iter().map(|l| l.completed).sum(),
        ns: ns_between(start, last_completion),
    })
}

/// What a bandwidth loop did: WRs completed, and the time from the first
/// post to the last completion.
struct BwCount {
    completed: usize,
    ns: f64,
}

impl BwCount {
    /// The report of a `-D` run: average over the run, no peak.
    fn report(&self, bytes: u32) -> BwReport {
        let s = self.ns / 1e9;
        let n = self.completed as f64;
        BwReport {
            bytes,
            iterations: self.completed as u32,
            bw_peak: 0.0,
            bw_average: if s > 0.0 {
                bytes as f64 * n / s / (1u64 << 20) as f64
            } else {
                0.0
            },
            msg_rate: if s > 0.0 { n / s / 1e6 } else { 0.0 },
            cpu: CpuCost::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_follows_perftest_reduction() {
        // 11 round trips of 2..=22 us (one-way 1..=11), plus noise in the tail.
        let mut rtt: Vec<f64> = (1..=10).map(|i| i as f64 * 2000.0).collect();
        rtt.push(1_000_000.0);
        rtt.push(2_000_000.0);
        let r = LatReport::from_round_trips(2, 13, &mut rtt, 2.0);
        // 12 samples, 2 dropped -> n = 10: one-way 1..=10 us.
        assert_eq!(r.t_min, 1.0);
        assert_eq!(r.t_max, 500.0); // perftest reports delta[n], the first dropped sample
        assert_eq!(r.t_typical, 5.5);
        assert_eq!(r.t_avg, 5.5);
        assert!((r.t_stdev - 2.8722813232690143).abs() < 1e-12);
        assert_eq!(r.p99, 500.0); // index ceil(10 * 0.99) = 10
        assert!(r.row().starts_with(" 2       13          1.00 "));
    }

    #[test]
    fn bandwidth_follows_perftest_reduction() {
        // 4 WRs of 1 MiB, posted at 0, 1, 2, 3 ms, completed at 2, 3, 4, 5 ms.
        let posted = [0.0, 1e6, 2e6, 3e6];
        let completed = [2e6, 3e6, 4e6, 5e6];
        let r = BwReport::from_times(1 << 20, &posted, &completed);
        // Average: 4 MiB over 5 ms = 800 MiB/s; 800 msgs/s = 0.0008 Mpps.
        assert!((r.bw_average - 800.0).abs() < 1e-9, "{r:?}");
        assert!((r.msg_rate - 0.0008).abs() < 1e-12, "{r:?}");
        // Peak: best window is i = 0..j = 3: (5 - 0) / 4 = 1.25 ms per MiB = 800 MiB/s;
        // i = 1, j = 3: (5 - 1) / 3 = 1.33 ms; a single WR takes 2 ms. So 800.
        assert!((r.bw_peak - 800.0).abs() < 1e-9, "{r:?}");
        assert!(r.row().starts_with(" 1048576    4          "));
    }
}

/// Which side of a two-host run this process is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Waits for a client on this TCP port (perftest with no host argument).
    Server { port: u16 },
    /// Connects to a server (perftest with a host argument).
    Client { host: String, port: u16 },
}

/// Any of the eight tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnyTest {
    Lat(LatTest),
    Bw(BwTest),
}

impl AnyTest {
    /// Every test, in perftest's order.
    pub const ALL: [AnyTest; 8] = [
        AnyTest::Lat(LatTest::Write),
        AnyTest::Lat(LatTest::Read),
        AnyTest::Lat(LatTest::Send),
        AnyTest::Lat(LatTest::Atomic),
        AnyTest::Bw(BwTest::Write),
        AnyTest::Bw(BwTest::Read),
        AnyTest::Bw(BwTest::Send),
        AnyTest::Bw(BwTest::Atomic),
    ];

    /// Our name for the test (`write_lat`, ...: perftest's without `ib_`).
    pub fn name(self) -> &'static str {
        self.perftest_name().trim_start_matches("ib_")
    }

    /// perftest's program name for the test (`ib_write_lat`, ...).
    pub fn perftest_name(self) -> &'static str {
        match self {
            AnyTest::Lat(LatTest::Write) => "ib_write_lat",
            AnyTest::Lat(LatTest::Send) => "ib_send_lat",
            AnyTest::Lat(LatTest::Read) => "ib_read_lat",
            AnyTest::Lat(LatTest::Atomic) => "ib_atomic_lat",
            AnyTest::Bw(BwTest::Write) => "ib_write_bw",
            AnyTest::Bw(BwTest::Send) => "ib_send_bw",
            AnyTest::Bw(BwTest::Read) => "ib_read_bw",
            AnyTest::Bw(BwTest::Atomic) => "ib_atomic_bw",
        }
    }

    /// perftest's banner title.
    pub fn title(self) -> &'static str {
        match self {
            AnyTest::Lat(t) => t.title(),
            AnyTest::Bw(t) => t.title(),
        }
    }

    fn moves_8_bytes(self) -> bool {
        matches!(
            self,
            AnyTest::Lat(LatTest::Atomic) | AnyTest::Bw(BwTest::Atomic)
        )
    }
}

/// What a side of a two-host run measured: the side that times (the
/// client, and both sides of write_lat and send_lat, as perftest) reports;
/// the passive server of the other tests reports nothing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AnyReport {
    Lat(LatReport),
    Bw(BwReport),
    /// This side served the peer's run and timed nothing.
    Served {
        iterations: u32,
    },
}

/// A two-host connection for one run: this side's QP and buffer
/// (`[0, size)` what it sends or where reads land, `[size, 2 size)` what
/// the peer writes, reads or adds to), the peer's offered half, the TCP
/// connection for the closing handshake.
struct Link {
    qp: Qp,
    /// The other QPs of a `-q` run, connected in the same order on both sides.
    more: Vec<Qp>,
    mr: Mr,
    peer: crate::exchange::ConnInfo,
    tcp: std::net::TcpStream,
    client: bool,
    info: RunInfo,
    _cm: Option<CmConn>,
}

/// Swaps the facts of both sides over the exchange, checks that both run
/// the same test with the same settings (one line each way), connects the
/// QP and waits until both sides are in RTS.
fn connect_link(test: AnyTest, cfg: &BwConfig, qcfg: &QpConfig, role: &Role) -> Result<Link> {
    use crate::exchange::{self, ConnInfo};
    let lat = &cfg.lat;
    let ctx = Context::open_with(&lat.device, lat.backend)?;
    if ctx.data_path() == "direct" && lat.device == crate::SIM_DEVICE {
        return Err(Error::Invalid(
            "the sim is one process's device: run both sides in one process (no --server, no host)"
                .into(),
        ));
    }
    let size = if test.moves_8_bytes() { 8 } else { lat.size } as usize;
    let pd = ctx.alloc_pd()?;
    let mr = pd.reg_mr(
        2 * size,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
    )?;
    let mut qp = pd.create_qp(qcfg)?;
    let psn = Qp::random_psn();
    let mine = ConnInfo {
        endpoint: qp.endpoint(),
        psn,
        rkey: mr.rkey(),
        addr: mr.addr() + size as u64,
        len: size as u64,
    };
    let (peer, mut tcp, role_name, client) = match role {
        Role::Server { port } => {
            let (p, s) = exchange::serve(*port, &mine)?;
            (p, s, "server", false)
        }
        Role::Client { host, port } => {
            let (p, s) = exchange::connect(host, *port, Duration::from_secs(60), &mine)?;
            (p, s, "client", true)
        }
    };
    // Both sides must run the same thing: one line each way.
    let params = format!(
        "{} size {size} iters {} tx_depth {} cq_mod {} post_list {} qps {} duration {:?} atomic {:?} rdma_cm {}",
        test.perftest_name(),
        lat.iters,
        cfg.tx_depth,
        cfg.cq_mod,
        cfg.post_list,
        cfg.qps,
        cfg.duration.or(lat.duration),
        lat.atomic,
        lat.rdma_cm
    );
    let theirs = exchange::swap_line(&mut tcp, &params)?;
    if theirs.trim_end() != params {
        return Err(Error::Exchange(format!(
            "this side runs `{params}`, the peer `{}`: give both sides the same test and flags",
            theirs.trim_end()
        )));
    }
    if peer.len < size as u64
        || peer.addr.checked_add(peer.len).is_none()
        || peer.addr < size as u64
    {
        return Err(Error::Exchange(format!(
            "the peer offers {} bytes at {:#x}; this run needs {size}",
            peer.len, peer.addr
        )));
    }
    // The connection through the CM lives until the run's closing barrier.
    let cm = connect_qp(&mut qp, lat.rdma_cm, role, psn, &peer, &mine)?;
    // -q: the other QPs swap their facts over the same connection.
    let mut more = Vec::new();
    for _ in 1..cfg.qps {
        let mut q = pd.create_qp(qcfg)?;
        let psn = Qp::random_psn();
        let mine_q = ConnInfo {
            endpoint: q.endpoint(),
            psn,
            ..mine
        };
        let peer_q = exchange::swap(&mut tcp, &mine_q)?;
        q.connect_remote(psn, &peer_q.endpoint, peer_q.psn)?;
        more.push(q);
    }
    exchange::barrier(&mut tcp)?;
    let path = qp.path();
    let info = RunInfo {
        qps: cfg.qps,
        rdma_cm: lat.rdma_cm,
        completion: cfg_completion(lat),
        role: Some(role_name),
        device: ctx.name().into(),
        data_path: qp.data_path(),
        inline: qcfg.max_inline,
        tx_depth: match test {
            AnyTest::Lat(_) => 1,
            AnyTest::Bw(_) => cfg.tx_depth,
        },
        sides: [
            SideInfo {
                qpn: qp.qp_num(),
                path,
                rkey: mr.rkey().0,
                vaddr: mr.addr(),
            },
            SideInfo {
                qpn: peer.endpoint.qpn,
                path: crate::PathInfo {
                    gid: peer.endpoint.gid,
                    lid: peer.endpoint.lid,
                    sq_psn: peer.psn,
                    dest_qpn: qp.qp_num(),
                    ..path
                },
                rkey: peer.rkey.0,
                vaddr: peer.addr - size as u64,
            },
        ],
    };
    Ok(Link {
        qp,
        more,
        mr,
        peer,
        tcp,
        client,
        info,
        _cm: cm,
    })
}

#[cfg(feature = "verbs")]
type CmConn = crate::cm::CmConnection;
#[cfg(not(feature = "verbs"))]
type CmConn = ();

/// Connects `qp` toward the peer: with the exchanged facts, or (`-R`)
/// through the RDMA connection manager on the same port number.
fn connect_qp(
    qp: &mut Qp,
    rdma_cm: bool,
    role: &Role,
    psn: u32,
    peer: &crate::exchange::ConnInfo,
    mine: &crate::exchange::ConnInfo,
) -> Result<Option<CmConn>> {
    if !rdma_cm {
        qp.connect_remote(psn, &peer.endpoint, peer.psn)?;
        return Ok(None);
    }
    #[cfg(feature = "verbs")]
    {
        let offer = crate::cm::CmOffer {
            rkey: mine.rkey,
            addr: mine.addr,
            len: mine.len,
        };
        let wait = Duration::from_secs(60);
        let conn = match role {
            Role::Server { port } => {
                crate::cm::CmListener::bind(*port)?
                    .accept(qp, &offer, wait)?
                    .0
            }
            Role::Client { host, port } => crate::cm::connect(qp, host, *port, &offer, wait)?.0,
        };
        Ok(Some(conn))
    }
    #[cfg(not(feature = "verbs"))]
    {
        let _ = (role, mine);
        Err(Error::Invalid(
            "rdma_cm (-R) needs the `verbs` feature".into(),
        ))
    }
}

/// Runs `test` between two hosts as perftest runs it: the sides swap their
/// QP and buffer facts over TCP ([`crate::exchange`]) and check that both
/// run the same test and flags, connect, run, and meet again before either
/// tears its QP down.
///
/// - write_lat: the sides take turns RDMA-writing `size` bytes into each
///   other's buffer, each waiting for the last byte to change before
///   writing back; the client writes first; both report.
/// - send_lat: the same with SENDs into a receive each side keeps posted.
/// - read_lat, atomic_lat (fetch-and-add), and the four bandwidth tests:
///   the client posts against the server's buffer and reports; the server
///   is passive (for send_bw it keeps receives posted: `max(tx_depth, 512)`
///   at most `iters`, as perftest's `-r`), and reports
///   [`AnyReport::Served`]. SENDs retry RNR forever (`rnr_retry` 7, as
///   perftest), since the server reposts at its own pace.
///
/// Errors: as the one-process runs; [`Error::Exchange`] when the two sides
/// disagree on the test, size, iterations, TX depth or CQ moderation.
pub fn run_remote(test: AnyTest, cfg: &BwConfig, role: &Role) -> Result<(RunInfo, AnyReport)> {
    let lat = &cfg.lat;
    let size_asked = if test.moves_8_bytes() { 8 } else { lat.size };
    let rounds = if lat.duration.is_some() && matches!(test, AnyTest::Lat(_)) {
        DURATION_SAMPLES
    } else {
        lat.iters
    };
    let mut stamps: Vec<u64> = checked_run(size_asked, rounds)?;
    check_bw(cfg)?;
    if cfg.qps > 1 && (matches!(test, AnyTest::Lat(_)) || lat.rdma_cm) {
        return Err(Error::Invalid(
            "-q over 1 runs the bandwidth tests over the TCP exchange (not latency tests, not -R)"
                .into(),
        ));
    }
    let size = size_asked as usize;
    let sends = matches!(
        test,
        AnyTest::Lat(LatTest::Write | LatTest::Send) | AnyTest::Bw(BwTest::Write | BwTest::Send)
    );
    let inline = sends && size_asked <= lat.inline_size;
    let rx_depth = match test {
        AnyTest::Lat(LatTest::Send) => 1,
        AnyTest::Bw(BwTest::Send) => cfg.tx_depth.max(512).min(lat.iters.max(cfg.tx_depth)),
        _ => 0,
    };
    let qcfg = QpConfig {
        max_send_wr: match test {
            AnyTest::Lat(_) => 16,
            AnyTest::Bw(_) => cfg.tx_depth,
        },
        max_recv_wr: rx_depth,
        max_inline: if inline { lat.inline_size } else { 0 },
        port: lat.port,
        gid_index: lat.gid_index,
        rnr_retry: if rx_depth > 0 { 7 } else { 6 },
        ..QpConfig::default()
    };
    let Link {
        mut qp,
        mut more,
        mr,
        peer,
        mut tcp,
        client,
        info,
        _cm,
    } = connect_link(test, cfg, &qcfg, role)?;
    let to_peer = RemoteAddr {
        addr: peer.addr,
        rkey: peer.rkey,
    };
    let sge = [Sge::new(&mr, 0, size_asked)?];
    let rsge = [Sge::new(&mr, size, size_asked)?];
    let recv = [RecvWr::new(0, &rsge)];
    let mut m = CpuMeter::new(&cfg.lat);
    // -D on a latency test: the client stops at its deadline, after a whole
    // round trip; the server stops when the client's closing byte arrives.
    let deadline = if client {
        deadline_after(lat.duration)
    } else {
        None
    };
    let watch = lat.duration.is_some() && !client;
    let report = match test {
        AnyTest::Lat(LatTest::Write) => {
            let mut wr = SendWr::rdma_write(0, &sge, to_peer).signaled();
            wr.inline = inline;
            let last = size - 1;
            for i in 0..rounds {
                if past(deadline) {
                    break;
                }
                let seq = (i as u8).wrapping_add(1);
                if !client {
                    let mut stopped = false;
                    let mut check = PeerCheck::new();
                    spin_until(
                        || format!("iteration {i}: the client's write never arrived"),
                        || {
                            if mr.load_u8(size + last) == seq {
                                return Ok(true);
                            }
                            if watch && check.due() && peer_done(&mut tcp)? {
                                stopped = true;
                                return Ok(true);
                            }
                            Ok(false)
                        },
                    )?;
                    if stopped {
                        break;
                    }
                }
                stamps.push(ticks());
                mr.store_u8(last, seq);
                wr.wr_id = i as u64;
                m.post(1, || qp.post_send(&[wr]))?;
                if client {
                    spin_until(
                        || format!("iteration {i}: the server's write never arrived"),
                        || Ok(mr.load_u8(size + last) == seq),
                    )?;
                }
                wait_completion(&mut qp, "this", &mut m)?;
            }
            None
        }
        AnyTest::Lat(LatTest::Send) => {
            m.post(1, || qp.post_recv(&recv))?;
            crate::exchange::barrier(&mut tcp)?; // both receives posted before the first SEND
            let mut wr = SendWr::send(0, &sge).signaled();
            wr.inline = inline;
            for i in 0..rounds {
                if past(deadline) {
                    break;
                }
                if !client {
                    if watch {
                        if !wait_recv_unless_done(&mut qp, &mut m, &mut tcp)? {
                            break;
                        }
                    } else {
                        wait_recv(&mut qp, "this", &mut m)?;
                    }
                    m.post(1, || qp.post_recv(&recv))?;
                }
                stamps.push(ticks());
                wr.wr_id = i as u64;
                m.post(1, || qp.post_send(&[wr]))?;
                if client {
                    wait_recv(&mut qp, "this", &mut m)?;
                    m.post(1, || qp.post_recv(&recv))?;
                }
            }
            // Send completions not yet seen are drained with the QP.
            None
        }
        AnyTest::Lat(t @ (LatTest::Read | LatTest::Atomic)) => {
            if client {
                let mut wr = if t == LatTest::Read {
                    SendWr::rdma_read(0, &sge, to_peer).signaled()
                } else {
                    lat.atomic.wr(0, &sge, to_peer).signaled()
                };
                for i in 0..rounds {
                    if past(deadline) {
                        break;
                    }
                    stamps.push(ticks());
                    wr.wr_id = i as u64;
                    m.post(1, || qp.post_send(&[wr]))?;
                    wait_completion(&mut qp, "this", &mut m)?;
                }
            }
            None
        }
        AnyTest::Bw(t) => {
            if client {
                if t == BwTest::Send {
                    crate::exchange::barrier(&mut tcp)?; // the server's receives are posted
                }
                let mut wr = match t {
                    BwTest::Write => SendWr::rdma_write(0, &sge, to_peer),
                    BwTest::Read => SendWr::rdma_read(0, &sge, to_peer),
                    BwTest::Send => SendWr::send(0, &sge),
                    BwTest::Atomic => lat.atomic.wr(0, &sge, to_peer),
                };
                wr.inline = inline;
                let mut lanes = Vec::with_capacity(cfg.qps as usize);
                for q in std::iter::once(&mut qp).chain(more.iter_mut()) {
                    lanes.push(Lane::new(q, wr, None, lat.iters)?);
                }
                let count = bw_loop(&mut lanes, cfg, &mut m)?;
                let mut r = match cfg.duration {
                    None => lanes_report(size_asked, &lanes),
                    Some(_) => count.report(size_asked),
                };
                r.cpu = m.report();
                Some(AnyReport::Bw(r))
            } else if t == BwTest::Send {
                let until = match cfg.duration {
                    None => ServeUntil::Received(lat.iters),
                    Some(_) => ServeUntil::PeerDone,
                };
                let mut qps: Vec<&mut Qp> =
                    std::iter::once(&mut qp).chain(more.iter_mut()).collect();
                serve_send_bw(&mut qps, &recv, rx_depth, until, &mut m, &mut tcp)?;
                None
            } else {
                None
            }
        }
    };
    crate::exchange::barrier(&mut tcp)?;
    drop(more);
    drop(qp);
    let report = match (report, test) {
        (Some(r), _) => r,
        (None, AnyTest::Lat(t)) if client || matches!(t, LatTest::Write | LatTest::Send) => {
            AnyReport::Lat(lat_report(size_asked, &stamps, t.rtt_factor(), &m)?)
        }
        (None, _) => AnyReport::Served {
            iterations: lat.iters,
        },
    };
    Ok((info, report))
}

/// Whether the peer's closing handshake byte has arrived on `tcp` (it is
/// left there for [`crate::exchange::barrier`]); a closed connection is an
/// error.
fn peer_done(tcp: &mut std::net::TcpStream) -> Result<bool> {
    let io = |e: std::io::Error| Error::Exchange(format!("the peer left: {e}"));
    tcp.set_nonblocking(true).map_err(io)?;
    let r = tcp.peek(&mut [0u8; 1]);
    tcp.set_nonblocking(false).map_err(io)?;
    match r {
        Ok(0) => Err(Error::Exchange(
            "the client left before its closing handshake".into(),
        )),
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(io(e)),
    }
}

/// When the server of send_bw stops.
enum ServeUntil {
    /// After this many SENDs arrived.
    Received(u32),
    /// When the client's closing handshake byte arrives (`-D`: the client
    /// decides the count).
    PeerDone,
}

/// When a waiting server looks for the client's closing byte: once the wait
/// has lasted 1 ms, then every 1 ms (a round trip never waits that long, so
/// the check, three system calls, stays out of the timed waits).
struct PeerCheck {
    start: u64,
    last: u64,
    ms: u64,
}

impl PeerCheck {
    fn new() -> Self {
        let t = ticks();
        PeerCheck {
            start: t,
            last: t,
            ms: (1e6 * ticks_per_ns()) as u64,
        }
    }

    #[inline]
    fn due(&mut self) -> bool {
        let t = ticks();
        if t.wrapping_sub(self.start) > self.ms && t.wrapping_sub(self.last) > self.ms {
            self.last = t;
            return true;
        }
        false
    }
}

/// Waits for a receive completion (send completions on the way are taken)
/// unless the client's closing byte arrives first: `false` then.
fn wait_recv_unless_done(
    qp: &mut Qp,
    m: &mut CpuMeter,
    tcp: &mut std::net::TcpStream,
) -> Result<bool> {
    let mut wc = [Completion::default(); 4];
    let mut stopped = false;
    let mut check = PeerCheck::new();
    spin_until(
        || format!("no receive completion within {WAIT_LIMIT:?}"),
        || {
            let n = m.poll(qp, &mut wc)?;
            if recv_among(&wc[..n])? {
                return Ok(true);
            }
            if check.due() && peer_done(tcp)? {
                stopped = true;
                return Ok(true);
            }
            Ok(false)
        },
    )?;
    Ok(!stopped)
}

/// The server of send_bw: keeps `rx_depth` receives posted, reposting each
/// one consumed, until `until` says it is over.
fn serve_send_bw(
    qps: &mut [&mut Qp],
    recv: &[RecvWr<'_>],
    rx_depth: u32,
    until: ServeUntil,
    m: &mut CpuMeter,
    tcp: &mut std::net::TcpStream,
) -> Result<()> {
    for qp in qps.iter_mut() {
        for _ in 0..rx_depth {
            m.post(1, || qp.post_recv(recv))?;
        }
    }
    crate::exchange::barrier(tcp)?;
    let iters = match until {
        ServeUntil::Received(n) => n,
        ServeUntil::PeerDone => u32::MAX,
    };
    // SENDs arrived, per QP.
    let mut received = vec![0u32; qps.len()];
    let mut wc = [Completion::default(); 16];
    let limit = (WAIT_LIMIT.as_nanos() as f64 * ticks_per_ns()) as u64;
    let mut last_progress = ticks();
    let mut check = PeerCheck::new();
    while received.iter().any(|&r| r < iters) {
        let mut got = 0;
        for (qp, rcv) in qps.iter_mut().zip(received.iter_mut()) {
            let n = m.poll(qp, &mut wc)?;
            for c in &wc[..n] {
                if !c.status.is_ok() {
                    return Err(Error::from(*c));
                }
                *rcv += 1;
                if rcv.saturating_add(rx_depth) <= iters {
                    m.post(1, || qp.post_recv(recv))?;
                }
            }
            got += n;
        }
        let t = ticks();
        if got > 0 {
            last_progress = t;
        } else {
            if matches!(until, ServeUntil::PeerDone) && check.due() && peer_done(tcp)? {
                return Ok(());
            }
            if t.wrapping_sub(last_progress) > limit && !matches!(until, ServeUntil::PeerDone) {
                let total: u32 = received.iter().sum();
                return Err(Error::Timeout(format!(
                    "{total} of {} SENDs arrived; none in {WAIT_LIMIT:?}",
                    iters.saturating_mul(qps.len() as u32)
                )));
            }
        }
    }
    Ok(())
}

/// One row of `bench reg_mr`: the cost of registering and deregistering a
/// buffer of `bytes`, medians over the repetitions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RegReport {
    pub bytes: usize,
    pub reps: u32,
    /// Mapping and registering (`Pd` registration of fresh anonymous memory;
    /// on verbs `ibv_reg_mr` pins and faults in every page), microseconds.
    pub reg_us: f64,
    /// Deregistering and unmapping (the PD holding it dropped), microseconds.
    pub dereg_us: f64,
}

impl RegReport {
    /// Registration time per MiB, microseconds.
    pub fn reg_us_per_mib(&self) -> f64 {
        self.reg_us / (self.bytes as f64 / (1u64 << 20) as f64)
    }
    /// Deregistration time per MiB, microseconds.
    pub fn dereg_us_per_mib(&self) -> f64 {
        self.dereg_us / (self.bytes as f64 / (1u64 << 20) as f64)
    }
}

/// `bench reg_mr`: for each size, `reps` times, maps fresh anonymous memory
/// and registers it in a fresh PD (timed), then drops the PD, which
/// deregisters and unmaps it (timed). Medians.
///
/// Errors: sizes of 0 or not a multiple of 4096, `reps` 0; the device's.
pub fn run_reg_mr(
    device: &str,
    backend: crate::Backend,
    sizes: &[usize],
    reps: u32,
) -> Result<Vec<RegReport>> {
    if reps == 0 {
        return Err(Error::Invalid(
            "reg_mr needs at least one repetition".into(),
        ));
    }
    if let Some(bad) = sizes.iter().find(|&&s| s == 0 || s % 4096 != 0) {
        return Err(Error::Invalid(format!(
            "reg_mr size {bad} must be a positive multiple of 4096"
        )));
    }
    let ctx = Context::open_with(device, backend)?;
    let mut out = Vec::with_capacity(sizes.len());
    for &bytes in sizes {
        let (mut reg, mut dereg) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            let pd = ctx.alloc_pd()?;
            let t = Instant::now();
            let (mr, _) = pd.reg_mapped(bytes, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
            reg.push(t.elapsed().as_secs_f64() * 1e6);
            drop(mr);
            let t = Instant::now();
            drop(pd);
            dereg.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        };
        out.push(RegReport {
            bytes,
            reps,
            reg_us: median(&mut reg),
            dereg_us: median(&mut dereg),
        });
    }
    Ok(out)
}

/// Nanoseconds per allocate-and-free of a 4 KiB buffer from a pool of one
/// 2 MiB chunk on `device`, over `iters` cycles (no registration happens).
pub fn pool_alloc_ns(device: &str, backend: crate::Backend, iters: u32) -> Result<f64> {
    use crate::pool::{Pool, PoolConfig};
    let ctx = Context::open_with(device, backend)?;
    let pd = ctx.alloc_pd()?;
    let pool = Pool::new(&pd, &PoolConfig::default())?;
    let t = Instant::now();
    for _ in 0..iters {
        std::hint::black_box(pool.alloc()?);
    }
    Ok(t.elapsed().as_nanos() as f64 / iters.max(1) as f64)
}
