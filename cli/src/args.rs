//! The command line: clap's definitions of `rdma-direct` and its
//! subcommands' arguments (`bench`, `conformance`; the other subcommands'
//! arguments live with their engines in `tools/`).

use crate::tools::args::{AtomicArg, BackendArg, ConnArg};
use crate::tools::{codec, compare, report, soak};
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "rdma-direct",
    version,
    about = "Kernel-bypass RDMA for mlx5, with a portable verbs path and an embedded software mlx5 device (`sim`)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
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
pub enum Test {
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
pub struct BenchArgs {
    /// The test to run.
    pub test: Test,
    /// Server's host name or address: run as the client of a two-host test.
    /// Without it and without --server, both sides run in this process.
    pub host: Option<String>,
    /// Wait for a client on -p: the server of a two-host test (perftest
    /// with no host argument).
    #[arg(long)]
    pub server: bool,
    /// TCP port of the connection exchange (two-host tests).
    #[arg(short = 'p', long = "port", default_value_t = rdma_direct::exchange::DEFAULT_PORT,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub tcp_port: u16,
    /// Device: `sim` (embedded software mlx5, direct path) or an ibverbs device such as rxe0 or mlx5_0.
    #[arg(short = 'd', long = "ib-dev", default_value = rdma_direct::SIM_DEVICE)]
    pub device: String,
    /// Message size in bytes, 1 to 8388608 [default: 2 for latency, 65536 for
    /// bandwidth tests (1024 with -c UD: a UD message is at most the port's
    /// MTU); atomics always move 8].
    /// (reg_mr: a positive multiple of 4096, any size.)
    #[arg(short = 's', long = "size", allow_negative_numbers = true)]
    pub size: Option<i64>,
    /// Number of exchanges, at least 5 [default: 1000 for latency, 5000 for
    /// bandwidth tests] (reg_mr: repetitions, at least 1 [default: 5]).
    #[arg(short = 'n', long = "iters", allow_negative_numbers = true)]
    pub iters: Option<i64>,
    /// Work requests kept in flight (bandwidth tests; latency tests keep
    /// one) [default: 128].
    #[arg(short = 't', long = "tx-depth", value_parser = clap::value_parser!(u32).range(1..=16384))]
    pub tx_depth: Option<u32>,
    /// Ask for a completion every this many work requests (bandwidth tests)
    /// [default: 100; 1 for messages over 8192 bytes, as perftest].
    #[arg(short = 'Q', long = "cq-mod", value_parser = clap::value_parser!(u32).range(1..))]
    pub cq_mod: Option<u32>,
    /// Messages up to this many bytes are sent inline (the direct path, on
    /// the sim and mlx5, takes at most 512; a verbs device, what it grants)
    /// [default: 220; 150 for -c DC writes and sends, as perftest].
    #[arg(short = 'I', long = "inline_size")]
    pub inline_size: Option<u32>,
    /// Port of the device.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub port: u8,
    /// GID index (default: the IPv4-mapped RoCE v2 GID).
    #[arg(short = 'x', long = "gid-index")]
    pub gid_index: Option<u8>,
    /// Run every size from 2 B to 8 MiB (powers of two), one row each.
    #[arg(short = 'a', long = "all", conflicts_with = "size")]
    pub all: bool,
    /// Wait for completions with events (arm, sleep on the completion
    /// channel, poll) instead of spinning. perftest has it on send, read and
    /// atomic tests; ours takes it on every test (write_lat waits for the
    /// peer's data by spinning on memory either way).
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Adaptive completion mode: poll this many times without a completion
    /// before arming and sleeping as -e does (implies -e; not in perftest).
    #[arg(long = "adaptive", value_name = "SPINS")]
    pub adaptive: Option<u32>,
    /// Wait for completions through the async API (Qp::completions, on a
    /// one-thread executor), busy or, with -e / --adaptive, sleeping until
    /// the CQ's event wakes it (not in perftest).
    #[arg(long = "async")]
    pub async_wait: bool,
    /// Run for this many seconds instead of -n: a bandwidth test counts the
    /// WRs completed and reports no peak; a latency test reports the round
    /// trips it made (at most 4,000,000) as usual (perftest -D).
    #[arg(short = 'D', long = "duration", conflicts_with = "iters",
          value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub duration: Option<u32>,
    /// Number of QPs, each running the test with -t in flight and -n
    /// iterations; the report covers all of them (bandwidth tests; over
    /// the TCP exchange between hosts, not with -R) [default: 1].
    #[arg(short = 'q', long = "qp", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub qps: Option<u32>,
    /// Work requests per post call, one doorbell for the list, at most -t
    /// (bandwidth tests) [default: 1].
    #[arg(short = 'l', long = "post_list", value_parser = clap::value_parser!(u32).range(1..=16384))]
    pub post_list: Option<u32>,
    /// The atomic of the atomic tests [default: FETCH_AND_ADD].
    #[arg(short = 'A', long = "atomic_type", value_enum)]
    pub atomic_type: Option<AtomicArg>,
    /// Two hosts: connect the QPs through rdma_cm (both sides give -R). RC
    /// QPs (with or without --use-srq); -c UC and UD connect through the TCP
    /// exchange (UD through rdma_cm: `cm::connect_ud`, `ud_echo -R`); -c DC
    /// refuses it, as perftest.
    #[arg(short = 'R', long = "rdma_cm")]
    pub rdma_cm: bool,
    /// Bandwidth in Gb/sec (10^9 bits) instead of MB/sec (2^20 bytes).
    #[arg(long = "report_gbits")]
    pub report_gbits: bool,
    /// Also write the results as JSON (to --out_json_file).
    #[arg(long = "out_json")]
    pub out_json: bool,
    /// Where --out_json writes.
    #[arg(
        long = "out_json_file",
        default_value = "perftest_out.json",
        requires = "out_json"
    )]
    pub out_json_file: std::path::PathBuf,
    /// Data path: auto (direct on the sim and mlx5, verbs elsewhere),
    /// direct, or verbs (the fallback even on mlx5, for comparison).
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// Connection type, as perftest's -c: RC; UC (write_lat, write_bw,
    /// send_lat, send_bw); UD (send_lat, send_bw; at most the port's MTU
    /// per message); DC (write, read, send and atomic tests; mlx5 only:
    /// the sim and ConnectX's direct path, in one process or between two
    /// hosts, each side then a DCI and a DCT whose number and key the TCP
    /// exchange carries; the target is a DCT on an SRQ, as perftest's -c DC
    /// implies --use-srq; writes and sends inline up to 150 bytes unless -I
    /// says otherwise).
    #[arg(short = 'c', long = "connection", value_enum, default_value_t = ConnArg::Rc)]
    pub connection: ConnArg,
    /// The receiving side takes its receives from an SRQ (send_lat,
    /// send_bw), as perftest's --use-srq (implied by -c DC).
    #[arg(long = "use-srq")]
    pub use_srq: bool,
    /// CQE compression on the QPs' CQs (ours, not perftest's: perftest has
    /// no flag for it): the device writes runs of alike completions as a
    /// title CQE and 8-byte mini-CQEs, which the poller expands. On the
    /// sim, its model of it; the banner then gives the CQE bytes the sim
    /// wrote. Refused with a typed error where the device has none (verbs
    /// devices, ConnectX for now) and with --use-srq.
    #[arg(long = "cqe-comp")]
    pub cqe_comp: bool,
    /// Inline receive (scatter to CQE): small receives, READ responses and
    /// atomic results come inside the CQE, up to 32 bytes (64-byte CQEs)
    /// or, with `--inline-recv=64`, 64 (128-byte CQEs; the sim only). Off
    /// by default; perftest has no such flag and runs with libmlx5's
    /// default, which is on. The direct path only (the verbs path refuses it).
    #[arg(long = "inline-recv", value_name = "BYTES", num_args = 0..=1,
          default_missing_value = "32",
          value_parser = {
              use clap::builder::TypedValueParser;
              clap::builder::PossibleValuesParser::new(["32", "64"])
                  .map(|s| s.parse::<u32>().expect("32 or 64"))
          })]
    pub inline_recv: Option<u32>,
}

#[derive(clap::Args)]
pub struct ConformanceArgs {
    /// Device: `sim` or an ibverbs device such as rxe0 or mlx5_0.
    #[arg(short = 'd', long = "ib-dev", default_value = rdma_direct::SIM_DEVICE)]
    pub device: String,
    /// Run only the cases whose name contains this text.
    pub filter: Option<String>,
    /// List the cases (those matching FILTER) and exit; `-d` is not opened.
    #[arg(long)]
    pub list: bool,
    /// Two hosts: serve side B of the two-sided cases to one `--peer` client
    /// on -p, then exit.
    #[arg(long, conflicts_with_all = ["peer", "list", "filter"])]
    pub server: bool,
    /// Two hosts: run the two-sided cases as side A against a `--server` on
    /// this host name or address: all of them, in order (the server serves
    /// them in that order, so no FILTER; one process runs them too, without
    /// --peer).
    #[arg(long, value_name = "HOST", conflicts_with_all = ["list", "filter"])]
    pub peer: Option<String>,
    /// TCP port of the exchange (two hosts).
    #[arg(short = 'p', long = "port", default_value_t = rdma_direct::exchange::DEFAULT_PORT,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub tcp_port: u16,
    /// Two hosts: connect the QPs through the RDMA connection manager
    /// (librdmacm, the same port number in its port space) instead of the
    /// TCP exchange, like perftest's -R. Both sides must say it.
    #[arg(short = 'R', long = "rdma_cm")]
    pub rdma_cm: bool,
}
