//! What a run reports: perftest's latency row and separator, the CPU-cost
//! columns, the banner (`RunInfo`), and the latency report of a run's
//! timestamps.

use super::*;

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
    /// CQE compression was asked for (`--cqe-comp`), and the CQE bytes the
    /// sim wrote during the run (`None` off the sim).
    pub cqe_comp: bool,
    pub cqe_bytes: Option<u64>,
    /// Inline receive (scatter to CQE) asked for (`--inline-recv`).
    pub inline_recv: rdma_direct::InlineRecv,
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
            super::conn_name(self.qp_type),
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
            " CQE compression : {}{}",
            if self.cqe_comp { "ON" } else { "OFF" },
            self.cqe_bytes
                .map_or(String::new(), |b| format!("\t\tCQE bytes (sim): {b}"))
        ));
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
            " Inline receive  : {}",
            match self.inline_recv.max_bytes() {
                // perftest has no flag: it takes libmlx5's default.
                0 => "OFF (perftest on ConnectX: ON, libmlx5's MLX5_SCATTER_TO_CQE default)"
                    .to_string(),
                n => format!("ON, up to {n}[B] in the CQE (scatter to CQE)"),
            }
        ));
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

/// The latency report of a run's timestamps (one per round trip started),
/// with the CPU cost `m` measured.
pub(super) fn lat_report(
    size: u32,
    stamps: &[u64],
    rtt_factor: f64,
    m: &CpuMeter,
) -> Result<LatReport> {
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
