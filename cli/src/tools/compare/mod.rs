//! `rdma-direct compare`: a matrix of tests x message sizes x every device
//! and data path present (the sim's direct path; each ibverbs device through
//! the path `auto` picks; ConnectX also through verbs, for comparison), all
//! in one process per run. Prints a Markdown table, writes JSON and an SVG
//! plot (latency and message rate against message size, one line per test
//! and device/path). `--from-json` renders the SVG again from such a JSON
//! file (e.g. one printed out of the soft-RoCE guest) without running
//! anything.

use super::bench::{self, AnyTest, BwConfig, BwTest, LatConfig, LatTest};
use rdma_direct::QpType;
use rdma_direct::{Backend, Error, Result};
use std::path::PathBuf;

/// The command's arguments.
#[derive(clap::Args)]
pub struct CompareArgs {
    /// Devices to include (repeat -d); default: every device listed by
    /// `rdma-direct devices` whose port 1 is ACTIVE.
    #[arg(short = 'd', long = "ib-dev")]
    devices: Vec<String>,
    /// Tests, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "write_lat,read_lat,send_lat,atomic_lat,write_bw,read_bw,send_bw,atomic_bw,send_lat:UD,send_bw:UD,write_lat:UC,write_bw:UC,send_lat:SRQ,send_bw:SRQ,write_lat:DC,write_bw:DC,send_lat:DC,send_bw:DC"
    )]
    /// A test on another transport is `<test>:UD`, `<test>:UC`,
    /// `<test>:SRQ` or `<test>:DC` (perftest's `-c UD`, `-c UC`,
    /// `--use-srq`, `-c DC`), on the tests perftest runs them on; UD sizes
    /// over the port's MTU are skipped, and DC off mlx5's direct path (the
    /// sim, ConnectX).
    tests: Vec<String>,
    /// Message sizes in bytes, comma-separated (atomics always move 8).
    #[arg(long, value_delimiter = ',', default_value = "2,64,1024,4096,65536")]
    sizes: Vec<u32>,
    /// Iterations of each latency run.
    #[arg(long, default_value_t = 1000)]
    lat_iters: u32,
    /// Iterations of each bandwidth run.
    #[arg(long, default_value_t = 2000)]
    bw_iters: u32,
    /// Where the JSON goes.
    #[arg(long, default_value = "compare.json")]
    json: PathBuf,
    /// Where the SVG plot goes.
    #[arg(long, default_value = "compare.svg")]
    svg: PathBuf,
    /// Run nothing: render the SVG (to --svg) from FILE, the JSON of an
    /// earlier run (what --json wrote).
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["devices", "tests", "sizes", "lat_iters", "bw_iters", "json"]
    )]
    from_json: Option<PathBuf>,
}

/// One run of the matrix.
#[derive(Clone, Debug)]
pub struct Row {
    pub test: &'static str,
    pub bytes: u32,
    pub device: String,
    /// `direct` or `verbs`.
    pub data_path: &'static str,
    /// Latency tests: t_typical, t_avg, 99% in us (perftest's meaning).
    pub lat: Option<(f64, f64, f64)>,
    /// Bandwidth tests: BW average in MB/sec (2^20), MsgRate in Mpps.
    pub bw: Option<(f64, f64)>,
    pub post_ns: f64,
    pub poll_ns: f64,
}

/// One test of the matrix: a bench test on a transport.
#[derive(Clone, Copy, Debug)]
struct Spec {
    /// Its row name: the test's, with `:UD`, `:UC` or `:SRQ` off RC.
    name: &'static str,
    test: AnyTest,
    qp_type: QpType,
    use_srq: bool,
}

/// The rows off RC: (row name, test, transport, SRQ), where perftest runs
/// `-c UD`, `-c UC`, `--use-srq` and `-c DC` (`QpType::Dci`: a DCI to a DCT
/// on an SRQ; mlx5's direct path only, skipped elsewhere).
const TRANSPORT_ROWS: [(&str, &str, QpType, bool); 16] = [
    ("send_lat:UD", "send_lat", QpType::Ud, false),
    ("send_bw:UD", "send_bw", QpType::Ud, false),
    ("write_lat:UC", "write_lat", QpType::Uc, false),
    ("write_bw:UC", "write_bw", QpType::Uc, false),
    ("send_lat:UC", "send_lat", QpType::Uc, false),
    ("send_bw:UC", "send_bw", QpType::Uc, false),
    ("send_lat:SRQ", "send_lat", QpType::Rc, true),
    ("send_bw:SRQ", "send_bw", QpType::Rc, true),
    ("write_lat:DC", "write_lat", QpType::Dci, true),
    ("write_bw:DC", "write_bw", QpType::Dci, true),
    ("read_lat:DC", "read_lat", QpType::Dci, true),
    ("read_bw:DC", "read_bw", QpType::Dci, true),
    ("send_lat:DC", "send_lat", QpType::Dci, true),
    ("send_bw:DC", "send_bw", QpType::Dci, true),
    ("atomic_lat:DC", "atomic_lat", QpType::Dci, true),
    ("atomic_bw:DC", "atomic_bw", QpType::Dci, true),
];

fn parse_test(name: &str) -> Result<Spec> {
    let by_name = |n: &str| AnyTest::ALL.into_iter().find(|t| t.name() == n);
    if let Some(test) = by_name(name) {
        return Ok(Spec {
            name: test.name(),
            test,
            qp_type: QpType::Rc,
            use_srq: false,
        });
    }
    if let Some(&(row, t, qp_type, use_srq)) = TRANSPORT_ROWS.iter().find(|r| r.0 == name) {
        return Ok(Spec {
            name: row,
            test: by_name(t).expect("a bench test"),
            qp_type,
            use_srq,
        });
    }
    let all: Vec<&str> = AnyTest::ALL
        .iter()
        .map(|t| t.name())
        .chain(TRANSPORT_ROWS.iter().map(|r| r.0))
        .collect();
    Err(Error::Invalid(format!(
        "unknown test {name:?} ({})",
        all.join(", ")
    )))
}

/// The (device, backend) pairs to run: the sim's direct path; an ibverbs
/// device through `auto`'s path, and ConnectX through verbs as well.
/// A (device, backend, data path) to run, with its port 1's active MTU in
/// bytes (`None`: the sim, 4096).
type Target = (String, Backend, &'static str, Option<u32>);

fn targets(asked: &[String]) -> Result<Vec<Target>> {
    let list = rdma_direct::list_devices()?;
    let mut out = Vec::new();
    for d in &list {
        if !asked.is_empty() && !asked.contains(&d.name) {
            continue;
        }
        let active = d.ports.first().is_some_and(|p| p.state == "ACTIVE");
        if !active {
            eprintln!(
                "rdma-direct compare: skipping {}: port 1 is not ACTIVE{}",
                d.name,
                d.error
                    .as_ref()
                    .map_or(String::new(), |e| format!(" ({e})"))
            );
            continue;
        }
        let mtu = d.ports.first().and_then(|p| p.active_mtu);
        out.push((d.name.clone(), Backend::Auto, d.data_path.as_str(), mtu));
        if d.kind == "verbs" && d.data_path == rdma_direct::DataPath::Direct {
            out.push((d.name.clone(), Backend::Verbs, "verbs", mtu));
        }
    }
    for a in asked {
        if !list.iter().any(|d| &d.name == a) {
            return Err(Error::NoSuchDevice { name: a.clone() });
        }
    }
    if out.is_empty() {
        return Err(Error::Invalid(
            "no device with an ACTIVE port to compare".into(),
        ));
    }
    Ok(out)
}

/// Runs the matrix, prints the table (stdout), writes the JSON and the SVG;
/// with `--from-json`, only renders that file's rows to the SVG. Errors:
/// `Error::Invalid` for bad arguments, an unreadable or malformed JSON file
/// and a file that cannot be written; a run's own errors as `bench` gives
/// them.
pub fn run(a: &CompareArgs) -> Result<()> {
    if let Some(src) = &a.from_json {
        return replot(src, &a.svg);
    }
    let tests = a
        .tests
        .iter()
        .map(|t| parse_test(t.trim()))
        .collect::<Result<Vec<_>>>()?;
    if a.sizes.is_empty() {
        return Err(Error::Invalid("--sizes is empty".into()));
    }
    if let Some(bad) = a.sizes.iter().find(|&&s| s == 0 || s > bench::MAX_SIZE) {
        return Err(Error::Invalid(format!(
            "size {bad} is not 1..={} bytes",
            bench::MAX_SIZE
        )));
    }
    if same_file(&a.json, &a.svg) {
        return Err(Error::Invalid(format!(
            "--json and --svg are both {}",
            a.json.display()
        )));
    }
    super::output::check_output_path(&a.json)?;
    super::output::check_output_path(&a.svg)?;
    for (flag, n) in [("--lat-iters", a.lat_iters), ("--bw-iters", a.bw_iters)] {
        if n < bench::MIN_ITERS {
            return Err(Error::Invalid(format!(
                "{flag} {n}: an iteration count must be at least {} ({}..={})",
                bench::MIN_ITERS,
                bench::MIN_ITERS,
                u32::MAX
            )));
        }
    }
    let targets = targets(&a.devices)?;
    let mut plan = Vec::new();
    for (dev, backend, path, mtu) in &targets {
        for &t in &tests {
            let sizes: Vec<u32> = if matches!(
                t.test,
                AnyTest::Lat(LatTest::Atomic) | AnyTest::Bw(BwTest::Atomic)
            ) {
                vec![8]
            } else {
                a.sizes.clone()
            };
            for s in sizes {
                // The sim lists no active MTU; its UD messages go to 4096 B.
                let mtu = mtu.unwrap_or(4096);
                if t.qp_type.is_dc() && *path != rdma_direct::DataPath::Direct.as_str() {
                    eprintln!(
                        "rdma-direct compare: skipping {} on {dev}/{path}: DC runs on mlx5's direct path only",
                        t.name
                    );
                    continue;
                }
                if t.qp_type == QpType::Ud && s > mtu {
                    eprintln!(
                        "rdma-direct compare: skipping {} at {s} B on {dev}: a UD message is at most the port's MTU, {mtu} B",
                        t.name
                    );
                    continue;
                }
                plan.push((dev.clone(), *backend, *path, t, s));
            }
        }
    }
    if plan.is_empty() {
        return Err(Error::Invalid(
            "nothing to run: every test and size asked was skipped (a UD size over the port's MTU, DC off the direct path); nothing written"
                .into(),
        ));
    }
    let bar = crate::progress::bar(plan.len() as u64, "compare");
    let mut rows = Vec::new();
    for (dev, backend, path, t, size) in plan {
        bar.set_message(format!("{} {size} B on {dev}/{path}", t.name));
        let lat = LatConfig {
            device: dev.clone(),
            size,
            iters: a.lat_iters,
            backend,
            qp_type: t.qp_type,
            use_srq: t.use_srq,
            // perftest's -c DC default inline size for writes and sends.
            inline_size: if t.qp_type.is_dc() {
                bench::DC_INLINE_DEFAULT
            } else {
                bench::INLINE_DEFAULT
            },
            ..LatConfig::default()
        };
        let mut row = Row {
            test: t.name,
            bytes: size,
            device: dev.clone(),
            data_path: path,
            lat: None,
            bw: None,
            post_ns: 0.0,
            poll_ns: 0.0,
        };
        match t.test {
            AnyTest::Lat(lt) => {
                let (_, r) = bench::run_lat(lt, &lat)?;
                row.lat = Some((r.t_typical, r.t_avg, r.p99));
                (row.post_ns, row.poll_ns) = (r.cpu.post_ns, r.cpu.poll_ns);
            }
            AnyTest::Bw(bt) => {
                let cfg = BwConfig {
                    lat: LatConfig {
                        iters: a.bw_iters,
                        ..lat
                    },
                    cq_mod: bench::default_cq_mod(size),
                    ..BwConfig::default()
                };
                let (_, r) = bench::run_bw(bt, &cfg)?;
                row.bw = Some((r.bw_average, r.msg_rate));
                (row.post_ns, row.poll_ns) = (r.cpu.post_ns, r.cpu.poll_ns);
            }
        }
        rows.push(row);
        bar.inc(1);
    }
    bar.finish_and_clear();
    print_table(&rows);
    // Both rendered before either is written.
    let json = json_text(&rows);
    let svg = plot(&a.svg, &rows)?;
    for (path, text) in [(&a.json, json), (&a.svg, svg)] {
        std::fs::write(path, text)
            .map_err(|e| Error::Invalid(format!("write {}: {e}", path.display())))?;
    }
    eprintln!(
        "rdma-direct compare: {} run(s); wrote {} and {}",
        rows.len(),
        a.json.display(),
        a.svg.display()
    );
    Ok(())
}

/// Whether `a` and `b` name one file however spelled (`x` and `./x`, a
/// symbolic or a hard link): the same device and inode when both exist,
/// else the same canonical directory and file name.
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        return x.dev() == y.dev() && x.ino() == y.ino();
    }
    let canon = |p: &std::path::Path| {
        let dir = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => std::path::Path::new("."),
        };
        Some((std::fs::canonicalize(dir).ok()?, p.file_name()?.to_owned()))
    };
    a == b || matches!((canon(a), canon(b)), (Some(x), Some(y)) if x == y)
}

/// `--from-json SRC --svg SVG`: reads the rows `json_text` wrote and writes
/// their plot; nothing runs.
fn replot(src: &std::path::Path, svg: &std::path::Path) -> Result<()> {
    if same_file(src, svg) {
        return Err(Error::Invalid(format!(
            "--from-json and --svg are both {}",
            src.display()
        )));
    }
    super::output::check_output_path(svg)?;
    // A regular file of at most 64 MiB (not /dev/zero, not a FIFO).
    let meta = std::fs::metadata(src)
        .map_err(|e| Error::Invalid(format!("read {}: {e}", src.display())))?;
    if !meta.is_file() || meta.len() > 64 << 20 {
        return Err(Error::Invalid(format!(
            "--from-json {}: not a regular file of at most 64 MiB (what compare --json writes)",
            src.display()
        )));
    }
    let text = std::fs::read_to_string(src)
        .map_err(|e| Error::Invalid(format!("read {}: {e}", src.display())))?;
    let rows =
        rows_from_json(&text).map_err(|e| Error::Invalid(format!("{}: {e}", src.display())))?;
    let out = plot(svg, &rows)?;
    std::fs::write(svg, out)
        .map_err(|e| Error::Invalid(format!("write {}: {e}", svg.display())))?;
    eprintln!(
        "rdma-direct compare: {} row(s) of {}; wrote {}",
        rows.len(),
        src.display(),
        svg.display()
    );
    Ok(())
}

/// The rows of a JSON array as `json_text` writes it (the keys it writes;
/// `null` for the other kind of test's figures). `Err` names the row and
/// the key that is missing, of the wrong type or out of range.
fn rows_from_json(text: &str) -> std::result::Result<Vec<Row>, String> {
    use serde_json::Value;
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let list = doc
        .as_array()
        .ok_or("not a JSON array of rows (what compare --json writes)")?;
    if list.is_empty() {
        return Err("no rows".into());
    }
    let row = |r: &Value| -> std::result::Result<Row, String> {
        let text = |k: &str| {
            r.get(k)
                .and_then(Value::as_str)
                .ok_or(format!("{k:?} is not a string"))
        };
        let num = |k: &str| match r.get(k) {
            None | Some(Value::Null) => Ok(None),
            // 0 (nothing measured) or within what a run can measure: the
            // log axes span 1e-9..=1e12, never an endless range of decades.
            Some(v) => v
                .as_f64()
                .filter(|x| *x == 0.0 || (1e-9..=1e12).contains(x))
                .map(Some)
                .ok_or(format!("{k:?} is not 0 or a number in 1e-9..=1e12")),
        };
        let test = parse_test(text("test")?).map_err(|e| match e {
            Error::Invalid(m) => m,
            e => e.to_string(),
        })?;
        let bytes = r
            .get("bytes")
            .and_then(Value::as_u64)
            .filter(|b| (1..=u64::from(bench::MAX_SIZE)).contains(b))
            .ok_or(format!("\"bytes\" is not 1..={}", bench::MAX_SIZE))?;
        let data_path = match text("data_path")? {
            "direct" => "direct",
            "verbs" => "verbs",
            p => return Err(format!("data_path {p:?} is not direct or verbs")),
        };
        let lat = match (num("t_typical_us")?, num("t_avg_us")?, num("p99_us")?) {
            (Some(a), Some(b), Some(c)) => Some((a, b, c)),
            _ => None,
        };
        let bw = match (num("bw_average_mb_per_s")?, num("msg_rate_mpps")?) {
            (Some(a), Some(b)) => Some((a, b)),
            _ => None,
        };
        let (fits, needs) = match test.test {
            AnyTest::Lat(_) => (
                lat.is_some() && bw.is_none(),
                "t_typical_us, t_avg_us and p99_us, and no bandwidth figures",
            ),
            AnyTest::Bw(_) => (
                bw.is_some() && lat.is_none(),
                "bw_average_mb_per_s and msg_rate_mpps, and no latency figures",
            ),
        };
        if !fits {
            return Err(format!("{} needs {needs}", test.name));
        }
        Ok(Row {
            test: test.name,
            bytes: bytes as u32,
            device: text("device")?.to_string(),
            data_path,
            lat,
            bw,
            post_ns: num("post_ns_per_wr")?.ok_or("\"post_ns_per_wr\" is missing")?,
            poll_ns: num("poll_ns_per_cqe")?.ok_or("\"poll_ns_per_cqe\" is missing")?,
        })
    };
    list.iter()
        .enumerate()
        .map(|(i, r)| row(r).map_err(|e| format!("row {i}: {e}")))
        .collect()
}

fn print_table(rows: &[Row]) {
    println!("| test | bytes | device | data path | t_typical [us] | t_avg [us] | 99% [us] | BW average [MB/sec] | MsgRate [Mpps] | post [ns/WR] | poll [ns/CQE] |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let (a, b, c) = r
            .lat
            .map_or(("-".into(), "-".into(), "-".into()), |(a, b, c)| {
                (format!("{a:.2}"), format!("{b:.2}"), format!("{c:.2}"))
            });
        let (d, e) = r.bw.map_or(("-".into(), "-".into()), |(d, e)| {
            (format!("{d:.2}"), format!("{e:.6}"))
        });
        println!(
            "| {} | {} | {} | {} | {a} | {b} | {c} | {d} | {e} | {:.1} | {:.1} |",
            r.test, r.bytes, r.device, r.data_path, r.post_ns, r.poll_ns
        );
    }
}

fn json_text(rows: &[Row]) -> String {
    let v: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "test": r.test,
                "bytes": r.bytes,
                "device": r.device,
                "data_path": r.data_path,
                "t_typical_us": r.lat.map(|l| l.0),
                "t_avg_us": r.lat.map(|l| l.1),
                "p99_us": r.lat.map(|l| l.2),
                "bw_average_mb_per_s": r.bw.map(|b| b.0),
                "msg_rate_mpps": r.bw.map(|b| b.1),
                "post_ns_per_wr": r.post_ns,
                "poll_ns_per_cqe": r.poll_ns,
            })
        })
        .collect();
    serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
}

mod plot;
use plot::plot;
