//! The bandwidth tests with both sides in this process (`run_bw`): settings,
//! the report, and the sending loop the two-host runs share.

use super::*;
use rdma_direct::{SendFlags, WrOp, WriteWr};

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
/// The column names of [`BW_HEADER`], in order (`--report_gbits` prints
/// `Gb/sec` for `MB/sec`, names of the same length).
pub const BW_COLUMNS: [&str; 5] = [
    "#bytes",
    "#iterations",
    "BW peak[MB/sec]",
    "BW average[MB/sec]",
    "MsgRate[Mpps]",
];

impl BwReport {
    /// The row under [`BW_HEADER`]: perftest's columns (`REPORT_FMT`;
    /// bandwidth two decimals, message rate six), each value right-aligned
    /// under its column's name ([`under_header`]).
    pub fn row(&self) -> String {
        under_header(
            BW_HEADER,
            &BW_COLUMNS,
            &[
                self.bytes.to_string(),
                self.iterations.to_string(),
                format!("{:.2}", self.bw_peak),
                format!("{:.2}", self.bw_average),
                format!("{:.6}", self.msg_rate),
            ],
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
    let _off_device_cpu = OffDeviceCpu::new(cfg.lat.device == rdma_direct::SIM_DEVICE);
    let pd = ctx.alloc_pd()?;
    let access =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    // (40 more on UD: a receive begins with the GRH slot.)
    let mr_a = pd.alloc_mr(size as usize + 40, access)?;
    let mr_b = pd.alloc_mr(size as usize + 40, access)?;
    let inline = matches!(test, BwTest::Write | BwTest::Send) && size <= cfg.lat.inline_size;
    // perftest's send_bw: 512 receives posted (`-r`), at most `iters`, and
    // never fewer than the sends in flight.
    let rx_depth = if test == BwTest::Send {
        cfg.tx_depth.max(512).min(cfg.lat.iters.max(cfg.tx_depth))
    } else {
        0
    };
    let qcfg = QpConfig {
        qp_type: cfg.lat.qp_type,
        max_send_wr: cfg.tx_depth,
        max_recv_wr: rx_depth,
        max_inline: if inline { cfg.lat.inline_size } else { 0 },
        max_send_sge: cfg.lat.atomic.send_sges(),
        port: cfg.lat.port,
        gid_index: cfg.lat.gid_index,
        cqe_compression: cfg.lat.cqe_comp,
        inline_recv: cfg.lat.inline_recv,
        ..QpConfig::default()
    };
    let mut pairs = Vec::with_capacity(cfg.qps as usize);
    let mut dests = Vec::with_capacity(cfg.qps as usize);
    for _ in 0..cfg.qps {
        let (p, d) = transport::Pair::new(&pd, &qcfg, cfg.lat.use_srq, false)?;
        pairs.push(p);
        dests.push(d);
    }
    let (a, b) = (&pairs[0].a, &pairs[0].b);
    if cfg.lat.qp_type == rdma_direct::QpType::Ud && size > a.ud_mtu() {
        return Err(Error::Invalid(format!(
            "-s {size}: a UD message is at most the port's active MTU, {} bytes",
            a.ud_mtu()
        )));
    }
    let side = |qp: &Qp, mr: &Mr| SideInfo {
        qpn: qp.qp_num(),
        path: qp.path(),
        rkey: mr.rkey().0,
        vaddr: mr.addr(),
    };
    let mut info = RunInfo {
        qps: cfg.qps,
        rdma_cm: false,
        completion: cfg_completion(&cfg.lat),
        role: None,
        device: ctx.name().into(),
        data_path: a.data_path().as_str(),
        inline: qcfg.max_inline,
        tx_depth: cfg.tx_depth,
        sides: [side(a, &mr_a), side(b, &mr_b)],
        qp_type: cfg.lat.qp_type,
        use_srq: cfg.lat.use_srq,
        cqe_comp: cfg.lat.cqe_comp,
        cqe_bytes: None,
        inline_recv: cfg.lat.inline_recv,
    };
    let to_b = RemoteAddr {
        addr: mr_b.addr(),
        rkey: mr_b.rkey(),
    };
    let sge = [Sge::new(&mr_a, 0, size)?];
    let mut m = CpuMeter::new(&cfg.lat);
    // Send: B keeps `rx_depth` receives posted and reposts each one consumed.
    let rsge = [Sge::new(
        &mr_b,
        0,
        transport::recv_len(cfg.lat.qp_type, size),
    )?];
    let recv = [RecvWr::new(0, &rsge)];
    let mut lanes = Vec::with_capacity(pairs.len());
    for (p, d) in pairs.iter_mut().zip(&dests) {
        let mut wr = match test {
            BwTest::Write => SendWr::rdma_write(0, &sge, to_b),
            BwTest::Read => SendWr::rdma_read(0, &sge, to_b),
            BwTest::Send => d.send_wr(true, &sge),
            BwTest::Atomic => cfg.lat.atomic.wr(0, &sge, to_b),
        };
        wr.inline = inline;
        for _ in 0..rx_depth {
            m.post(1, || transport::post_recv(&mut p.b, &mut p.srq_b, &recv))?;
        }
        let receiver = (rx_depth > 0).then_some(Receiver {
            qp: &mut p.b,
            srq: &mut p.srq_b,
            recv: &recv,
            rx_depth,
            // UD and UC drop a SEND that finds no receive: post no more
            // than the receives posted.
            windowed: matches!(
                cfg.lat.qp_type,
                rdma_direct::QpType::Uc | rdma_direct::QpType::Ud
            ),
        });
        let mut lane = Lane::new(&mut p.a, wr, receiver, cfg.lat.iters)?;
        lane.dc = d.dc(true);
        lanes.push(lane);
    }
    let count = bw_loop(&mut lanes, cfg, &mut m)?;
    let mut report = match cfg.duration {
        None => lanes_report(size, &lanes),
        Some(_) => count.report(size),
    };
    drop(lanes);
    info.cqe_bytes = super::sim_cqe_bytes(pairs.iter_mut().flat_map(|p| [&mut p.a, &mut p.b]));
    drop(pairs);
    report.cpu = m.report();
    Ok((info, report))
}

/// The receiving side of a SEND bandwidth test in this process: its QP,
/// the receive it reposts, and how many it keeps posted.
pub(super) struct Receiver<'a, 'b> {
    qp: &'a mut Qp,
    /// Its SRQ, when its receives come from one (`--use-srq`).
    srq: &'a mut Option<rdma_direct::Srq>,
    recv: &'a [RecvWr<'b>],
    rx_depth: u32,
    /// The sender posts only as many SENDs as receives are posted (UD, UC:
    /// no RNR retry saves one that finds none).
    windowed: bool,
}

/// One sender of a bandwidth test (`-q` runs several): its QP, the WR it
/// repeats, its receiver (SEND in one process), and what it has posted and
/// completed, with per-WR times unless the run is `-D`.
pub(super) struct Lane<'a, 'b> {
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
    /// On DC: the DCT its WRs go to (`Qp::post_dc`).
    pub(super) dc: Option<rdma_direct::DcDest<'b>>,
}

impl<'a, 'b> Lane<'a, 'b> {
    /// A lane with room reserved for `iters` post and completion times.
    pub(super) fn new(
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
            dc: None,
        })
    }
}

/// The report of lanes that recorded per-WR times: perftest's reduction over
/// all of their WRs together (post and completion times merged in order).
pub(super) fn lanes_report(bytes: u32, lanes: &[Lane<'_, '_>]) -> BwReport {
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
pub(super) fn bw_loop(
    lanes: &mut [Lane<'_, '_>],
    cfg: &BwConfig,
    m: &mut CpuMeter,
) -> Result<BwCount> {
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
    // A 1-SGE RDMA WRITE, not inline, is posted by `Qp::post_writes` (the
    // same WQEs, nothing decoded per WR).
    let mut writes: Vec<WriteWr<'_>> = Vec::with_capacity(post_list);
    let rate = ticks_per_ns();
    let limit = (WAIT_LIMIT.as_nanos() as f64 * rate) as u64;
    let start = ticks();
    let mut deadline = deadline_after(cfg.duration);
    let mut last_completion = start;
    let mut wc = [Completion::default(); 16];
    let mut last_progress = start;
    let mut idle = 0u32;
    let timed_run = cfg.duration.is_some();
    let done = |l: &Lane<'_, '_>| {
        if timed_run {
            l.last.is_some_and(|x| l.completed > x)
        } else {
            l.completed >= iters
        }
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
                let over = past(&mut deadline);
                let k = if over { 1 } else { post_list.min(iters - i0) };
                if i0 - l.completed + k > cfg.tx_depth as usize {
                    break;
                }
                if let Some(r) = l.receiver.as_ref().filter(|r| r.windowed) {
                    if i0 + k > l.received + r.rx_depth as usize {
                        break;
                    }
                }
                // When no further list fits behind this one, its last WR is
                // signaled whatever -Q says: else nothing would come back to
                // make room (with -l near -t and -Q not dividing -t).
                let full = i0 + k - l.completed + post_list > cfg.tx_depth as usize;
                batch.clear();
                let mut wr = l.wr;
                for i in i0..i0 + k {
                    wr.wr_id = i as u64;
                    wr.flags.set(
                        SendFlags::SIGNALED,
                        (i + 1) % cq_mod == 0
                            || i + 1 == iters
                            || over
                            || (full && i + 1 == i0 + k),
                    );
                    batch.push(wr);
                }
                let t = ticks().wrapping_sub(start) as f64 / rate;
                if timed {
                    l.posted_at.extend(std::iter::repeat_n(t, k));
                }
                let as_write = match (l.wr.op, l.wr.sges, l.wr.inline, &l.dc) {
                    (WrOp::RdmaWrite { remote }, [sge], false, None) => Some((remote, *sge)),
                    _ => None,
                };
                let r = if let Some((remote, sge)) = as_write {
                    writes.clear();
                    writes.extend(batch.iter().map(|w| WriteWr {
                        wr_id: w.wr_id,
                        sge,
                        remote,
                        flags: w.flags,
                    }));
                    m.post(k, || l.a.post_writes(&writes))
                } else if let Some(d) = &l.dc {
                    m.post(k, || l.a.post_dc(d, &batch))
                } else {
                    m.post(k, || l.a.post_send(&batch))
                };
                if let Err(e) = r {
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
                            m.post(1, || transport::post_recv(r.qp, r.srq, r.recv))?;
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
pub(super) struct BwCount {
    completed: usize,
    ns: f64,
}

impl BwCount {
    /// The report of a `-D` run: average over the run, no peak.
    pub(super) fn report(&self, bytes: u32) -> BwReport {
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
