//! `rdma-direct compare`: a matrix of tests x message sizes x every device
//! and data path present (the sim's direct path; each ibverbs device through
//! the path `auto` picks; ConnectX also through verbs, for comparison), all
//! in one process per run. Prints a Markdown table, writes JSON and an SVG
//! plot (latency and message rate against message size, one line per test
//! and device/path).

use super::bench::{self, AnyTest, BwConfig, BwTest, LatConfig, LatTest};
use plotters::coord::Shift;
use plotters::prelude::*;
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
        default_value = "write_lat,read_lat,send_lat,atomic_lat,write_bw,read_bw,send_bw,atomic_bw"
    )]
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

fn parse_test(name: &str) -> Result<AnyTest> {
    AnyTest::ALL
        .into_iter()
        .find(|t| t.name() == name)
        .ok_or_else(|| {
            let all: Vec<&str> = AnyTest::ALL.iter().map(|t| t.name()).collect();
            Error::Invalid(format!("unknown test {name:?} ({})", all.join(", ")))
        })
}

/// The (device, backend) pairs to run: the sim's direct path; an ibverbs
/// device through `auto`'s path, and ConnectX through verbs as well.
fn targets(asked: &[String]) -> Result<Vec<(String, Backend, &'static str)>> {
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
        out.push((d.name.clone(), Backend::Auto, d.data_path));
        if d.kind == "verbs" && d.data_path == "direct" {
            out.push((d.name.clone(), Backend::Verbs, "verbs"));
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

/// Runs the matrix, prints the table, writes the JSON and the SVG.
pub fn run(a: &CompareArgs) -> Result<()> {
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
    if a.json == a.svg {
        return Err(Error::Invalid(format!(
            "--json and --svg are both {}",
            a.json.display()
        )));
    }
    crate::check_output_path(&a.json)?;
    crate::check_output_path(&a.svg)?;
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
    for (dev, backend, path) in &targets {
        for &t in &tests {
            let sizes: Vec<u32> = if matches!(
                t,
                AnyTest::Lat(LatTest::Atomic) | AnyTest::Bw(BwTest::Atomic)
            ) {
                vec![8]
            } else {
                a.sizes.clone()
            };
            for s in sizes {
                plan.push((dev.clone(), *backend, *path, t, s));
            }
        }
    }
    let bar = crate::progress::bar(plan.len() as u64, "compare");
    let mut rows = Vec::new();
    for (dev, backend, path, t, size) in plan {
        bar.set_message(format!("{} {size} B on {dev}/{path}", t.name()));
        let lat = LatConfig {
            device: dev.clone(),
            size,
            iters: a.lat_iters,
            backend,
            ..LatConfig::default()
        };
        let mut row = Row {
            test: t.name(),
            bytes: size,
            device: dev.clone(),
            data_path: path,
            lat: None,
            bw: None,
            post_ns: 0.0,
            poll_ns: 0.0,
        };
        match t {
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

/// The SVG text of two panels side by side, both log-log against message size: latency
/// (t_typical, in ns so the log axis has labels) of the latency tests, message rate
/// (thousand messages/s) of the
/// bandwidth tests; one line per test and device/path.
fn plot(path: &std::path::Path, rows: &[Row]) -> Result<String> {
    let err = |e: String| Error::Invalid(format!("plot {}: {e}", path.display()));
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1400, 560)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
        let (left, right) = root.split_horizontally(700);
        type Panel<'a, 'b> = (
            &'a DrawingArea<SVGBackend<'b>, Shift>,
            &'static str,
            fn(&Row) -> Option<f64>,
        );
        let panels: [Panel; 2] = [
            (&left, "latency, t_typical [ns]", |r| {
                r.lat.map(|l| l.0 * 1e3)
            }),
            (&right, "message rate [thousand messages/s]", |r| {
                r.bw.map(|b| b.1 * 1e3)
            }),
        ];
        for (area, title, value) in panels {
            let pts: Vec<(&Row, f64)> = rows
                .iter()
                .filter_map(|r| value(r).filter(|v| *v > 0.0).map(|v| (r, v)))
                .collect();
            if pts.is_empty() {
                continue;
            }
            let xmax = pts.iter().map(|(r, _)| r.bytes).max().unwrap_or(2).max(2) as f64 * 2.0;
            let ymin = pts.iter().map(|p| p.1).fold(f64::INFINITY, f64::min) / 2.0;
            let ymax = pts.iter().map(|p| p.1).fold(0.0, f64::max) * 2.0;
            let mut chart = ChartBuilder::on(area)
                .caption(title, ("sans-serif", 20))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d((1.0f64..xmax).log_scale(), (ymin..ymax).log_scale())
                .map_err(|e| err(e.to_string()))?;
            chart
                .configure_mesh()
                .x_desc("message size [bytes]")
                .x_label_formatter(&|x| format!("{}", x.round() as u64))
                .y_label_formatter(&|y| {
                    if *y >= 10.0 {
                        format!("{y:.0}")
                    } else if *y >= 0.1 {
                        format!("{y:.2}")
                    } else {
                        format!("{y:.1e}")
                    }
                })
                .y_labels(12)
                .draw()
                .map_err(|e| err(e.to_string()))?;
            let mut keys: Vec<String> = Vec::new();
            for (r, _) in &pts {
                let k = format!("{} {}/{}", r.test, r.device, r.data_path);
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
            for (i, k) in keys.iter().enumerate() {
                let color = Palette99::pick(i).to_rgba();
                let mut line: Vec<(f64, f64)> = pts
                    .iter()
                    .filter(|(r, _)| &format!("{} {}/{}", r.test, r.device, r.data_path) == k)
                    .map(|(r, v)| (r.bytes as f64, *v))
                    .collect();
                line.sort_by(|a, b| a.0.total_cmp(&b.0));
                chart
                    .draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))
                    .map_err(|e| err(e.to_string()))?
                    .label(k.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                    });
                chart
                    .draw_series(
                        line.iter()
                            .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
                    )
                    .map_err(|e| err(e.to_string()))?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .position(SeriesLabelPosition::LowerRight)
                .draw()
                .map_err(|e| err(e.to_string()))?;
        }
        root.present().map_err(|e| err(e.to_string()))?;
    }
    Ok(out)
}
