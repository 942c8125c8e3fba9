//! `rdma-direct`: benchmarks and tools.

use clap::{Parser, Subcommand, ValueEnum};
use std::process::ExitCode;
use tools::bench::{
    self, BwConfig, BwTest, LatConfig, LatTest, BW_HEADER, CPU_HEADER, LAT_HEADER, RESULT_LINE,
};

mod tools;

use tools::args::{AtomicArg, BackendArg, ConnArg};

use tools::output::OutputFile;
use tools::{codec, compare, progress, report, soak};

/// `println!` that ends the process quietly, with the status a C tool killed
/// by SIGPIPE has (141), when stdout is closed (`rdma-direct ... | head -1`).
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout(), $($t)*).is_err() {
            std::process::exit(141);
        }
    }};
}

/// `print!` with the same handling of a closed stdout.
macro_rules! out_part {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        if write!(std::io::stdout(), $($t)*).is_err() {
            std::process::exit(141);
        }
    }};
}

#[derive(Parser)]
#[command(
    name = "rdma-direct",
    version,
    about = "Kernel-bypass RDMA for mlx5, with a portable verbs path and an embedded software mlx5 device (`sim`)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List the sim and every ibverbs device: driver, the data path QPs
    /// use, and each port's state, link layer, active MTU, rate and GIDs.
    Devices {
        /// Print JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Run a perftest-compatible benchmark: both sides in this process, or
    /// two hosts with --server on one and the server's address on the other.
    ///
    /// Each row ends with two columns perftest does not print:
    /// post[nsec/WR], the time inside post calls per work request, and
    /// poll[nsec/CQE], the time inside poll calls that returned completions
    /// per completion (the cycle counter, its own cost subtracted). On the
    /// direct path (the sim, ConnectX) that is our CPU cost; on the verbs
    /// path it is the provider's, and rxe moves the data inside the post
    /// call. BW peak is not measured above 20000 iterations (perftest's
    /// -N) and reads 0.00 there.
    Bench(BenchArgs),
    /// Run a matrix of tests x message sizes on every device and data path
    /// present (sim direct; rxe verbs; mlx5 direct and verbs); print a
    /// Markdown table, write JSON and an SVG plot of latency and message
    /// rate against message size.
    Compare(compare::CompareArgs),
    /// Run the conformance suite on a device: one line per case, then
    /// `N passed, N failed, N skipped`. Exits 1 if any case failed.
    Conformance(ConformanceArgs),
    /// Encode one send WQE into an SQ ring; print its segments as JSON.
    /// Numbers are decimal or 0x hex.
    EncodeWqe(codec::EncodeWqe),
    /// Decode one CQE (hex); print its fields as JSON.
    DecodeCqe(codec::DecodeCqe),
    /// Register, RDMA WRITE into, and drop MRs in a loop; check that
    /// resident memory and live MRs stay bounded. Exits 1 if they do not.
    Soak(soak::SoakArgs),
    Report(report::ReportArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum Test {
    /// RDMA WRITE latency, as perftest's ib_write_lat (half the round trip).
    #[value(name = "write_lat")]
    Write,
    /// SEND latency, as perftest's ib_send_lat (half the round trip).
    #[value(name = "send_lat")]
    Send,
    /// RDMA READ latency, as perftest's ib_read_lat (the full round trip).
    #[value(name = "read_lat")]
    Read,
    /// Fetch-and-add latency, as perftest's ib_atomic_lat (the full round trip; 8 bytes).
    #[value(name = "atomic_lat")]
    Atomic,
    /// RDMA WRITE bandwidth, as perftest's ib_write_bw.
    #[value(name = "write_bw")]
    WriteBw,
    /// RDMA READ bandwidth, as perftest's ib_read_bw.
    #[value(name = "read_bw")]
    ReadBw,
    /// SEND bandwidth into receives kept posted, as perftest's ib_send_bw.
    #[value(name = "send_bw")]
    SendBw,
    /// Fetch-and-add message rate, as perftest's ib_atomic_bw (8 bytes).
    #[value(name = "atomic_bw")]
    AtomicBw,
    /// Memory registration and deregistration time, 4 KiB to 1 GiB (-a),
    /// beside allocation from the pre-registered pool.
    #[value(name = "reg_mr")]
    RegMr,
}

#[derive(clap::Args)]
struct BenchArgs {
    /// The test to run.
    test: Test,
    /// Server's host name or address: run as the client of a two-host test.
    /// Without it and without --server, both sides run in this process.
    host: Option<String>,
    /// Wait for a client on -p: the server of a two-host test (perftest
    /// with no host argument).
    #[arg(long)]
    server: bool,
    /// TCP port of the connection exchange (two-host tests).
    #[arg(short = 'p', long = "port", default_value_t = rdma_direct::exchange::DEFAULT_PORT,
          value_parser = clap::value_parser!(u16).range(1..))]
    tcp_port: u16,
    /// Device: `sim` (embedded software mlx5, direct path) or an ibverbs device such as rxe0 or mlx5_0.
    #[arg(short = 'd', long = "ib-dev", default_value = rdma_direct::SIM_DEVICE)]
    device: String,
    /// Message size in bytes, 1 to 8388608 [default: 2 for latency, 65536 for
    /// bandwidth tests (1024 with -c UD: a UD message is at most the port's
    /// MTU); atomics always move 8].
    /// (reg_mr: a positive multiple of 4096, any size.)
    #[arg(short = 's', long = "size", allow_negative_numbers = true)]
    size: Option<i64>,
    /// Number of exchanges, at least 5 [default: 1000 for latency, 5000 for
    /// bandwidth tests] (reg_mr: repetitions, at least 1 [default: 5]).
    #[arg(short = 'n', long = "iters", allow_negative_numbers = true)]
    iters: Option<i64>,
    /// Work requests kept in flight (bandwidth tests; latency tests keep
    /// one) [default: 128].
    #[arg(short = 't', long = "tx-depth", value_parser = clap::value_parser!(u32).range(1..=16384))]
    tx_depth: Option<u32>,
    /// Ask for a completion every this many work requests (bandwidth tests)
    /// [default: 100; 1 for messages over 8192 bytes, as perftest].
    #[arg(short = 'Q', long = "cq-mod", value_parser = clap::value_parser!(u32).range(1..))]
    cq_mod: Option<u32>,
    /// Messages up to this many bytes are sent inline (the direct path, on
    /// the sim and mlx5, takes at most 512; a verbs device, what it grants).
    #[arg(short = 'I', long = "inline_size", default_value_t = 220)]
    inline_size: u32,
    /// Port of the device.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    port: u8,
    /// GID index (default: the IPv4-mapped RoCE v2 GID).
    #[arg(short = 'x', long = "gid-index")]
    gid_index: Option<u8>,
    /// Run every size from 2 B to 8 MiB (powers of two), one row each.
    #[arg(short = 'a', long = "all", conflicts_with = "size")]
    all: bool,
    /// Wait for completions with events (arm, sleep on the completion
    /// channel, poll) instead of spinning. perftest has it on send, read and
    /// atomic tests; ours takes it on every test (write_lat waits for the
    /// peer's data by spinning on memory either way).
    #[arg(short = 'e', long = "events")]
    events: bool,
    /// Adaptive completion mode: poll this many times without a completion
    /// before arming and sleeping as -e does (implies -e; not in perftest).
    #[arg(long = "adaptive", value_name = "SPINS")]
    adaptive: Option<u32>,
    /// Wait for completions through the async API (Qp::completions, on a
    /// one-thread executor), busy or, with -e / --adaptive, sleeping until
    /// the CQ's event wakes it (not in perftest).
    #[arg(long = "async")]
    async_wait: bool,
    /// Run for this many seconds instead of -n: a bandwidth test counts the
    /// WRs completed and reports no peak; a latency test reports the round
    /// trips it made (at most 4,000,000) as usual (perftest -D).
    #[arg(short = 'D', long = "duration", conflicts_with = "iters",
          value_parser = clap::value_parser!(u32).range(1..=3600))]
    duration: Option<u32>,
    /// Number of QPs, each running the test with -t in flight and -n
    /// iterations; the report covers all of them (bandwidth tests; over
    /// the TCP exchange between hosts, not with -R) [default: 1].
    #[arg(short = 'q', long = "qp", value_parser = clap::value_parser!(u32).range(1..=64))]
    qps: Option<u32>,
    /// Work requests per post call, one doorbell for the list, at most -t
    /// (bandwidth tests) [default: 1].
    #[arg(short = 'l', long = "post_list", value_parser = clap::value_parser!(u32).range(1..=16384))]
    post_list: Option<u32>,
    /// The atomic of the atomic tests [default: FETCH_AND_ADD].
    #[arg(short = 'A', long = "atomic_type", value_enum)]
    atomic_type: Option<AtomicArg>,
    /// Two hosts: connect the QPs through rdma_cm (both sides give -R). RC
    /// QPs (with or without --use-srq); -c UC and UD connect through the TCP
    /// exchange (UD through rdma_cm: `cm::connect_ud`, `ud_echo -R`).
    #[arg(short = 'R', long = "rdma_cm")]
    rdma_cm: bool,
    /// Bandwidth in Gb/sec (10^9 bits) instead of MB/sec (2^20 bytes).
    #[arg(long = "report_gbits")]
    report_gbits: bool,
    /// Also write the results as JSON (to --out_json_file).
    #[arg(long = "out_json")]
    out_json: bool,
    /// Where --out_json writes.
    #[arg(
        long = "out_json_file",
        default_value = "perftest_out.json",
        requires = "out_json"
    )]
    out_json_file: std::path::PathBuf,
    /// Data path: auto (direct on the sim and mlx5, verbs elsewhere),
    /// direct, or verbs (the fallback even on mlx5, for comparison).
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    backend: BackendArg,
    /// Connection type, as perftest's -c: RC; UC (write_lat, write_bw,
    /// send_lat, send_bw); UD (send_lat, send_bw; at most the port's MTU
    /// per message).
    #[arg(short = 'c', long = "connection", value_enum, default_value_t = ConnArg::Rc)]
    connection: ConnArg,
    /// The receiving side takes its receives from an SRQ (send_lat,
    /// send_bw), as perftest's --use-srq.
    #[arg(long = "use-srq")]
    use_srq: bool,
}

/// MB/sec (2^20 bytes) to Gb/sec (10^9 bits), as perftest's --report_gbits.
const GBITS_PER_MB: f64 = (1u64 << 20) as f64 * 8.0 / 1e9;

#[derive(clap::Args)]
struct ConformanceArgs {
    /// Device: `sim` or an ibverbs device such as rxe0 or mlx5_0.
    #[arg(short = 'd', long = "ib-dev", default_value = rdma_direct::SIM_DEVICE)]
    device: String,
    /// Run only the cases whose name contains this text.
    filter: Option<String>,
    /// List the cases (those matching FILTER) and exit; `-d` is not opened.
    #[arg(long)]
    list: bool,
    /// Two hosts: serve side B of the two-sided cases to one `--peer` client
    /// on -p, then exit.
    #[arg(long, conflicts_with_all = ["peer", "list", "filter"])]
    server: bool,
    /// Two hosts: run the two-sided cases as side A against a `--server` on
    /// this host name or address: all of them, in order (the server serves
    /// them in that order, so no FILTER; one process runs them too, without
    /// --peer).
    #[arg(long, value_name = "HOST", conflicts_with_all = ["list", "filter"])]
    peer: Option<String>,
    /// TCP port of the exchange (two hosts).
    #[arg(short = 'p', long = "port", default_value_t = rdma_direct::exchange::DEFAULT_PORT,
          value_parser = clap::value_parser!(u16).range(1..))]
    tcp_port: u16,
    /// Two hosts: connect the QPs through the RDMA connection manager
    /// (librdmacm, the same port number in its port space) instead of the
    /// TCP exchange, like perftest's -R. Both sides must say it.
    #[arg(short = 'R', long = "rdma_cm")]
    rdma_cm: bool,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        // No subcommand: the help, on stderr, exit 2.
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            e.exit()
        }
        Err(e) => {
            // One line: clap's first line (the error), without usage and tips.
            let msg = e.render().to_string();
            let head: Vec<&str> = msg
                .lines()
                .take_while(|l| !l.trim().is_empty() && !l.starts_with("Usage:"))
                .map(str::trim)
                .collect();
            eprintln!("rdma-direct: {}", head.join(" "));
            return ExitCode::from(2);
        }
    };
    // Before any thread starts (the sim's, the spinner's).
    if matches!(cli.cmd, Cmd::Bench(_) | Cmd::Compare(_)) {
        progress::clear_on_interrupt();
    }
    let tool = match &cli.cmd {
        Cmd::EncodeWqe(a) => Some(codec::encode_wqe(a)),
        Cmd::DecodeCqe(a) => Some(codec::decode_cqe(a)),
        _ => None,
    };
    if let Some(out) = tool {
        return match out {
            Ok(v) => {
                use std::io::Write;
                // A closed pipe (`| head`) is not worth a panic.
                let _ = writeln!(std::io::stdout(), "{v}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("rdma-direct: error: {e}");
                ExitCode::from(2)
            }
        };
    }
    if let Cmd::Conformance(a) = &cli.cmd {
        return conformance(a);
    }
    if let Cmd::Report(a) = &cli.cmd {
        return report::run(a);
    }
    if let Cmd::Soak(a) = &cli.cmd {
        return match soak::run(a) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(1),
            Err(e) => {
                eprintln!("rdma-direct: error: {e}");
                // Bad arguments exit 2, as clap's do.
                ExitCode::from(if matches!(e, rdma_direct::Error::Invalid(_)) {
                    2
                } else {
                    1
                })
            }
        };
    }
    let r = match cli.cmd {
        Cmd::Devices { json } => devices(json),
        Cmd::Bench(a) => run_bench(a),
        Cmd::Compare(a) => compare::run(&a),
        _ => unreachable!("handled above"),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdma-direct: error: {e}");
            // Bad arguments exit 2 (as clap's do); failures of the run exit 1.
            match e {
                rdma_direct::Error::Invalid(_)
                | rdma_direct::Error::NoSuchDevice { .. }
                | rdma_direct::Error::NoVerbs { .. } => ExitCode::from(2),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

/// The listener of a `--server`, bound before it says it waits.
///
/// Errors: [`rdma_direct::exchange::Listener::bind`]'s; a port in use
/// (an [`rdma_direct::Error::Invalid`]) says to pick another with `-p`.
fn listen(port: u16) -> rdma_direct::Result<rdma_direct::exchange::Listener> {
    if port == 0 {
        return Err(rdma_direct::Error::Invalid(
            "TCP port 0 is not a port a client can be told: pick one with -p".into(),
        ));
    }
    rdma_direct::exchange::Listener::bind(port).map_err(|e| match e {
        rdma_direct::Error::Invalid(m) => {
            rdma_direct::Error::Invalid(format!("{m}: pick another with -p"))
        }
        e => e,
    })
}

fn conformance(a: &ConformanceArgs) -> ExitCode {
    use tools::conformance::{cases, run, two_host, Outcome};
    let how = if a.rdma_cm {
        two_host::Connect::RdmaCm
    } else {
        two_host::Connect::Tcp
    };
    if a.rdma_cm && !a.server && a.peer.is_none() {
        eprintln!(
            "rdma-direct: error: -R (rdma_cm) is for two hosts: give --server or --peer HOST"
        );
        return ExitCode::from(2);
    }
    if a.server || a.peer.is_some() {
        // A server binds first: a port in use is refused before anything else.
        let listener = match a.server.then(|| listen(a.tcp_port)).transpose() {
            Ok(l) => l,
            Err(e) => {
                eprintln!("rdma-direct: error: {e}");
                return ExitCode::from(2);
            }
        };
        if a.device == rdma_direct::SIM_DEVICE {
            eprintln!(
                "rdma-direct: error: the sim is one process's device: two-host conformance needs a real device (-d rxe0, -d mlx5_0)"
            );
            return ExitCode::from(2);
        }
        if let Err(e) = rdma_direct::Context::open(&a.device) {
            eprintln!("rdma-direct: error: {e}");
            return ExitCode::from(2);
        }
        if let Some(listener) = listener {
            eprintln!(
                "rdma-direct: serving the two-sided cases on {}; waiting for `conformance --peer` on TCP port {}{}",
                a.device,
                a.tcp_port,
                if a.rdma_cm { " (QPs connected through rdma_cm)" } else { "" }
            );
            return match two_host::serve(&a.device, &listener, how) {
                Ok(()) => {
                    out!(
                        "conformance server on {}: served {} two-sided cases",
                        a.device,
                        two_host::two_host_cases().len()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("rdma-direct: error: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        let host = a.peer.as_deref().unwrap_or_default();
        eprintln!(
            "rdma-direct: connecting to {host}:{} for each two-sided case (retrying for up to 60 s)",
            a.tcp_port
        );
        let width = two_host::two_host_cases()
            .iter()
            .map(|c| c.name.len())
            .max()
            .unwrap_or(0);
        let (mut passed, mut failed, mut skipped) = (0, 0, 0);
        for case in two_host::two_host_cases() {
            let name = case.name;
            let line = match two_host::run_remote(&a.device, host, a.tcp_port, how, case) {
                Ok(Outcome::Passed(n)) => {
                    passed += 1;
                    if n.is_empty() {
                        "ok".to_string()
                    } else {
                        format!("ok ({n})")
                    }
                }
                Ok(Outcome::Skipped(w)) => {
                    skipped += 1;
                    format!("skipped: {w}")
                }
                Err(f) => {
                    failed += 1;
                    format!("FAILED: {f}")
                }
            };
            out!("{name:<width$}  {line}");
            if line.starts_with(&format!("FAILED: {}", two_host::NOT_CONNECTED)) {
                eprintln!("rdma-direct: stopping: no connection to the server, the remaining cases are not run");
                break;
            }
        }
        out!(
            "conformance on {} with side B on {host}{}: {passed} passed, {failed} failed, {skipped} skipped",
            a.device,
            if a.rdma_cm { " (QPs connected through rdma_cm)" } else { "" }
        );
        return if failed > 0 {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    let filter = a.filter.as_deref().unwrap_or("");
    if !cases().iter().any(|c| c.name.contains(filter)) {
        eprintln!("rdma-direct: error: no conformance case matches {filter:?} (see --list)");
        return ExitCode::from(2);
    }
    if a.list {
        for c in cases().iter().filter(|c| c.name.contains(filter)) {
            out!("{}", c.name);
        }
        return ExitCode::SUCCESS;
    }
    // The device must open before any case runs: a wrong name is a usage error.
    if let Err(e) = rdma_direct::Context::open(&a.device) {
        eprintln!("rdma-direct: error: {e}");
        return ExitCode::from(2);
    }
    let width = cases().iter().map(|c| c.name.len()).max().unwrap_or(0);
    let s = run(&a.device, filter, |c, r| {
        let line = match r {
            Ok(Outcome::Passed(note)) if note.is_empty() => "ok".to_string(),
            Ok(Outcome::Passed(note)) => format!("ok ({note})"),
            Ok(Outcome::Skipped(why)) => format!("skipped: {why}"),
            Err(f) => format!("FAILED: {f}"),
        };
        out!("{:<width$}  {line}", c.name);
    });
    out!(
        "conformance on {}: {} passed, {} failed, {} skipped",
        a.device,
        s.passed,
        s.failed,
        s.skipped
    );
    if s.failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn devices(json: bool) -> rdma_direct::Result<()> {
    let list = rdma_direct::list_devices()?;
    let guid = |g: u64| {
        format!(
            "{:04x}:{:04x}:{:04x}:{:04x}",
            (g >> 48) & 0xffff,
            (g >> 32) & 0xffff,
            (g >> 16) & 0xffff,
            g & 0xffff
        )
    };
    let gid = |g: &[u8; 16]| std::net::Ipv6Addr::from(*g).to_string();
    if json {
        let v: Vec<serde_json::Value> = list
            .iter()
            .map(|d| {
                serde_json::json!({
                    "name": d.name,
                    "kind": d.kind,
                    "driver": d.driver,
                    "node_guid": guid(d.node_guid),
                    "data_path": d.data_path,
                    "error": d.error,
                    "ports": d.ports.iter().map(|p| serde_json::json!({
                        "port": p.port,
                        "state": p.state,
                        "link_layer": p.link_layer,
                        "active_mtu": p.active_mtu,
                        "rate_gbps": p.rate_gbps,
                        "lid": p.lid,
                        "gids": p.gids.iter().map(|e| serde_json::json!({
                            "index": e.index,
                            "gid": gid(&e.gid),
                            "type": e.kind,
                        })).collect::<Vec<_>>(),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        out!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(());
    }
    out!(
        "    {:<16}\t{:<8}\t{:<24}\t{:<18}\tdata path",
        "device",
        "kind",
        "driver",
        "node GUID"
    );
    out!(
        "    {:<16}\t{:<8}\t{:<24}\t{:<18}\t---------",
        "------",
        "----",
        "------",
        "---------"
    );
    for d in &list {
        out!(
            "    {:<16}\t{:<8}\t{:<24}\t{:<18}\t{}",
            d.name,
            d.kind,
            d.driver,
            guid(d.node_guid),
            d.data_path
        );
        if let Some(e) = &d.error {
            out!("        (ports unreadable: {e})");
        }
        for p in &d.ports {
            out!(
                "        port {}: {:<6} link {:<10} mtu {:<5} rate {:<8} lid {}",
                p.port,
                p.state,
                p.link_layer,
                p.active_mtu.map_or("-".into(), |m| m.to_string()),
                p.rate_gbps.map_or("-".into(), |r| format!("{r} Gb/s")),
                p.lid
            );
            for e in &p.gids {
                out!(
                    "            GID[{}] {:<10} {}",
                    e.index,
                    e.kind,
                    gid(&e.gid)
                );
            }
        }
    }
    Ok(())
}

/// `-s` and `-n` checked against their ranges, each message naming the
/// flag: the perftest tests take 1..=[`bench::MAX_SIZE`] bytes and
/// [`bench::MIN_ITERS`]..=4294967295 iterations; reg_mr takes any positive
/// size (bytes; `run_reg_mr` wants a multiple of 4096) and
/// 1..=4294967295 repetitions.
///
/// Errors: [`rdma_direct::Error::Invalid`] for a value out of range.
fn size_and_iters(a: &BenchArgs) -> rdma_direct::Result<(Option<u64>, Option<u32>)> {
    use rdma_direct::Error;
    let reg = matches!(a.test, Test::RegMr);
    let size = match a.size {
        None => None,
        Some(s) if s >= 1 && (reg || s <= i64::from(bench::MAX_SIZE)) => Some(s as u64),
        Some(s) if reg => {
            return Err(Error::Invalid(format!(
                "-s (--size): reg_mr takes a positive size in bytes (a multiple of 4096), not {s}"
            )))
        }
        Some(s) => {
            return Err(Error::Invalid(format!(
                "-s (--size): message size {s} is not in 1..={} bytes",
                bench::MAX_SIZE
            )))
        }
    };
    let min_iters = if reg { 1 } else { bench::MIN_ITERS };
    let iters = match a.iters {
        None => None,
        Some(n) => match u32::try_from(n) {
            Ok(n) if n >= min_iters => Some(n),
            _ => {
                return Err(Error::Invalid(format!(
                "-n (--iters) takes a count of at least {min_iters} ({min_iters}..={}), not {n}",
                u32::MAX
            )))
            }
        },
    };
    Ok((size, iters))
}

fn run_bench(a: BenchArgs) -> rdma_direct::Result<()> {
    use rdma_direct::Error;
    let (size, iters) = size_and_iters(&a)?;
    if matches!(a.test, Test::RegMr) {
        return run_reg_mr(&a, size, iters);
    }
    let size = size.map(|s| s as u32); // at most MAX_SIZE
    let atomic = matches!(a.test, Test::Atomic | Test::AtomicBw);
    if atomic && size.is_some_and(|s| s != 8) {
        return Err(Error::Invalid(
            "atomics always move 8 bytes; -s does not apply".into(),
        ));
    }
    if atomic && a.all {
        return Err(Error::Invalid(
            "atomics always move 8 bytes; -a does not apply".into(),
        ));
    }

    if !atomic && a.atomic_type.is_some() {
        return Err(Error::Invalid(
            "-A applies to atomic_lat and atomic_bw only".into(),
        ));
    }
    let latency = matches!(a.test, Test::Write | Test::Send | Test::Read | Test::Atomic);
    for (given, flag) in [
        (a.tx_depth.is_some(), "-t"),
        (a.cq_mod.is_some(), "-Q"),
        (a.post_list.is_some(), "-l"),
        (a.qps.is_some(), "-q"),
        (a.report_gbits, "--report_gbits"),
    ] {
        if latency && given {
            return Err(Error::Invalid(format!(
                "{flag} applies to the bandwidth tests (a latency test keeps one WR in flight)"
            )));
        }
    }
    let tx_depth = a.tx_depth.unwrap_or(128);
    let post_list = a.post_list.unwrap_or(1);
    if post_list > tx_depth {
        return Err(Error::Invalid(format!(
            "-l {post_list} is more than -t {tx_depth}: a post list must fit the send queue"
        )));
    }
    if a.inline_size > bench::DIRECT_MAX_INLINE
        && rdma_direct::Context::open_with(&a.device, a.backend.into())?.data_path() == "direct"
    {
        return Err(Error::Invalid(format!(
            "-I (--inline_size) {}: the direct path on {} takes 0..={} inline bytes",
            a.inline_size,
            a.device,
            bench::DIRECT_MAX_INLINE
        )));
    }
    let json_out = if a.out_json {
        Some(OutputFile::open(&a.out_json_file)?)
    } else {
        None
    };
    let lat = match a.test {
        Test::Write => Some(LatTest::Write),
        Test::Send => Some(LatTest::Send),
        Test::Read => Some(LatTest::Read),
        Test::Atomic => Some(LatTest::Atomic),
        _ => None,
    };
    let bw_test = match a.test {
        Test::WriteBw => BwTest::Write,
        Test::ReadBw => BwTest::Read,
        Test::SendBw => BwTest::Send,
        _ => BwTest::Atomic,
    };
    let any = match lat {
        Some(t) => bench::AnyTest::Lat(t),
        None => bench::AnyTest::Bw(bw_test),
    };
    let bw_defaults = BwConfig::default();
    let base = LatConfig {
        device: a.device.clone(),
        size: size.unwrap_or(if lat.is_some() {
            2
        } else if matches!(a.connection, ConnArg::Ud) {
            // A UD message is at most the port's MTU: 1024 is every RoCE
            // port's least (perftest lowers its default to the MTU).
            1024
        } else {
            bw_defaults.lat.size
        }),
        iters: iters.unwrap_or(if lat.is_some() {
            1000
        } else {
            bw_defaults.lat.iters
        }),
        inline_size: a.inline_size,
        port: a.port,
        gid_index: a.gid_index,
        backend: a.backend.into(),
        events: a.events || a.adaptive.is_some(),
        spins: a.adaptive.unwrap_or(0),
        async_wait: a.async_wait,
        atomic: match a.atomic_type {
            None | Some(AtomicArg::FetchAndAdd) => bench::AtomicKind::FetchAndAdd,
            Some(AtomicArg::CmpAndSwap) => bench::AtomicKind::CmpAndSwap,
        },
        rdma_cm: a.rdma_cm,
        duration: a.duration.map(|d| std::time::Duration::from_secs(d.into())),
        qp_type: a.connection.into(),
        use_srq: a.use_srq,
    };
    let test_name = match a.test {
        Test::Write => "write_lat",
        Test::Send => "send_lat",
        Test::Read => "read_lat",
        Test::Atomic => "atomic_lat",
        Test::WriteBw => "write_bw",
        Test::ReadBw => "read_bw",
        Test::SendBw => "send_bw",
        Test::AtomicBw => "atomic_bw",
        Test::RegMr => "reg_mr",
    };
    bench::check_transport(test_name, base.qp_type, base.use_srq)?;
    let role = match (&a.host, a.server) {
        (Some(_), true) => {
            return Err(Error::Invalid(
                "give a host (client) or --server, not both".into(),
            ))
        }
        (Some(h), false) => Some(bench::Role::Client {
            host: h.clone(),
            port: a.tcp_port,
        }),
        // Bound first: a port in use is refused before anything else.
        (None, true) => Some(bench::Role::Server {
            listener: std::sync::Arc::new(listen(a.tcp_port)?),
        }),
        (None, false) => None,
    };
    if a.rdma_cm && role.is_none() {
        return Err(Error::Invalid(
            "-R (rdma_cm) connects two hosts: give --server or the server's address".into(),
        ));
    }
    if role.is_some() && base.qp_type != rdma_direct::QpType::Rc && a.rdma_cm {
        return Err(Error::Invalid(format!(
            "-c {} with -R: the two-host benchmarks connect RC QPs through rdma_cm; connect UC and UD through the TCP exchange (no -R)",
            base.qp_type.name()
        )));
    }
    if let Some(role) = &role {
        // The device is checked before anything is said about waiting.
        if base.device == rdma_direct::SIM_DEVICE {
            return Err(Error::Invalid(
                "the sim is one process's device: run both sides in one process (no --server, no host)"
                    .into(),
            ));
        }
        drop(rdma_direct::Context::open_with(&base.device, base.backend)?);
        match role {
            bench::Role::Server { listener } => {
                eprintln!(
                    "rdma-direct: waiting for a client on TCP port {}",
                    listener.port()
                )
            }
            bench::Role::Client { host, port } => {
                eprintln!("rdma-direct: connecting to {host}:{port} (retrying for up to 60 s)")
            }
        }
    }
    let sizes: Vec<u32> = if a.all {
        (1..=23).map(|k| 1u32 << k).collect()
    } else if atomic {
        vec![8]
    } else {
        vec![base.size]
    };
    let title = match (any, base.atomic) {
        (bench::AnyTest::Lat(LatTest::Atomic), bench::AtomicKind::CmpAndSwap) => {
            "Atomic CMP_AND_SWAP Latency Test"
        }
        (bench::AnyTest::Bw(BwTest::Atomic), bench::AtomicKind::CmpAndSwap) => {
            "Atomic CMP_AND_SWAP BW Test"
        }
        _ => any.title(),
    };
    let gbits = |r: &bench::BwReport| bench::BwReport {
        bw_peak: r.bw_peak * GBITS_PER_MB,
        bw_average: r.bw_average * GBITS_PER_MB,
        ..*r
    };
    // One size: the spinner says a run is on; a bar of 0/1 would say it again.
    let bar = if sizes.len() > 1 {
        progress::bar(sizes.len() as u64, "sizes")
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut json_rows = Vec::new();
    for (k, &size) in sizes.iter().enumerate() {
        let cfg = BwConfig {
            lat: LatConfig {
                size,
                ..base.clone()
            },
            tx_depth,
            cq_mod: a.cq_mod.unwrap_or(bench::default_cq_mod(size)),
            post_list,
            qps: a.qps.unwrap_or(1),
            duration: a.duration.map(|d| std::time::Duration::from_secs(d.into())),
        };
        let spin = (sizes.len() == 1)
            .then(|| progress::Spinner::new(format!("{title} on {}", cfg.lat.device)));
        let (info, report) = match (&role, any) {
            (Some(role), _) => bench::run_remote(any, &cfg, role)?,
            (None, bench::AnyTest::Lat(t)) => {
                let (i, r) = bench::run_lat(t, &cfg.lat)?;
                (i, bench::AnyReport::Lat(r))
            }
            (None, bench::AnyTest::Bw(t)) => {
                let (i, r) = bench::run_bw(t, &cfg)?;
                (i, bench::AnyReport::Bw(r))
            }
        };
        drop(spin);
        bar.suspend(|| {
            if k == 0 {
                out_part!("{}", info.banner(title));
                match report {
                    bench::AnyReport::Lat(_) => out!("{LAT_HEADER}{CPU_HEADER}"),
                    bench::AnyReport::Bw(_) if a.report_gbits => {
                        out!("{}{CPU_HEADER}", BW_HEADER.replace("MB/sec", "Gb/sec"))
                    }
                    bench::AnyReport::Bw(_) => out!("{BW_HEADER}{CPU_HEADER}"),
                    bench::AnyReport::Served { .. } => {}
                }
            }
            match report {
                bench::AnyReport::Lat(r) => out!("{}{}", r.row(), r.cpu.columns()),
                bench::AnyReport::Bw(r) if a.report_gbits => {
                    out!("{}{}", gbits(&r).row(), r.cpu.columns())
                }
                bench::AnyReport::Bw(r) => out!("{}{}", r.row(), r.cpu.columns()),
                bench::AnyReport::Served { iterations } => match a.duration {
                    Some(d) => out!(
                        " {size} B: this side served the client's {d} s run; the client reports"
                    ),
                    None => out!(
                        " {size} B: this side served {iterations} iterations; the client reports"
                    ),
                },
            }
        });
        bar.inc(1);
        json_rows.push(report_json(size, &report, a.report_gbits));
    }
    bar.finish_and_clear();
    out!("{RESULT_LINE}");
    if let Some(out) = json_out {
        let doc = serde_json::json!({
            "test": any.name(),
            "title": title,
            "device": base.device,
            "bw_unit": if a.report_gbits { "Gb/sec" } else { "MB/sec" },
            "results": json_rows,
        });
        out.write(&(serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"))?;
        eprintln!("rdma-direct: wrote {}", a.out_json_file.display());
    }
    Ok(())
}

/// `bench reg_mr`: registration and deregistration time per size, and the
/// pool's allocation time.
fn run_reg_mr(a: &BenchArgs, size: Option<u64>, iters: Option<u32>) -> rdma_direct::Result<()> {
    use rdma_direct::Error;
    if a.host.is_some() || a.server {
        return Err(Error::Invalid("reg_mr runs on one host".into()));
    }
    let backend: rdma_direct::Backend = a.backend.into();
    let sizes: Vec<usize> = match (size, a.all) {
        (Some(s), _) => vec![usize::try_from(s)
            .map_err(|_| Error::Invalid(format!("-s {s}: more than this machine addresses")))?],
        // 4 KiB to 1 GiB in steps of 4x.
        (None, true) => (0..10).map(|k| 4096usize << (2 * k)).collect(),
        (None, false) => vec![4096, 64 << 10, 1 << 20, 16 << 20, 256 << 20],
    };
    let reps = iters.unwrap_or(5);
    let rows = bench::run_reg_mr(&a.device, backend, &sizes, reps)?;
    out!("{RESULT_LINE}");
    out!(
        "                    Memory registration (reg_mr) on {}",
        a.device
    );
    out!("{RESULT_LINE}");
    out!(" #bytes        #reps   reg[usec]      reg[usec/MiB]   dereg[usec]    dereg[usec/MiB]");
    for r in &rows {
        out!(
            " {:<13} {:<7} {:<14.2} {:<15.2} {:<14.2} {:<14.2}",
            r.bytes,
            r.reps,
            r.reg_us,
            r.reg_us_per_mib(),
            r.dereg_us,
            r.dereg_us_per_mib()
        );
    }
    let ns = bench::pool_alloc_ns(&a.device, backend, 1_000_000)?;
    out!("{RESULT_LINE}");
    out!(" pool: allocate + free one 4 KiB buffer from registered 2 MiB chunks: {ns:.1} ns (no registration)");
    out!("{RESULT_LINE}");
    Ok(())
}

/// One row of `--out_json`: perftest's columns and our CPU cost.
fn report_json(bytes: u32, r: &bench::AnyReport, gbits: bool) -> serde_json::Value {
    let f = if gbits { GBITS_PER_MB } else { 1.0 };
    match r {
        bench::AnyReport::Lat(r) => serde_json::json!({
            "bytes": r.bytes, "iterations": r.iterations,
            "t_min_usec": r.t_min, "t_max_usec": r.t_max, "t_typical_usec": r.t_typical,
            "t_avg_usec": r.t_avg, "t_stdev_usec": r.t_stdev,
            "p99_usec": r.p99, "p99_9_usec": r.p99_9,
            "post_nsec_per_wr": r.cpu.post_ns, "poll_nsec_per_cqe": r.cpu.poll_ns,
        }),
        bench::AnyReport::Bw(r) => serde_json::json!({
            "bytes": r.bytes, "iterations": r.iterations,
            "bw_peak": r.bw_peak * f, "bw_average": r.bw_average * f, "msg_rate_mpps": r.msg_rate,
            "post_nsec_per_wr": r.cpu.post_ns, "poll_nsec_per_cqe": r.cpu.poll_ns,
        }),
        bench::AnyReport::Served { iterations } => serde_json::json!({
            "bytes": bytes, "iterations": iterations, "served": true,
        }),
    }
}
