//! `rdma-direct report -d DEV [-o FILE]`: the hardware tier on one device
//! (the conformance suite with its two-sided cases, the ConnectX-only
//! checks of `tests/mlx5.rs`, a short benchmark) and the facts a bug
//! report needs, written as one JSON document.
//!
//! The schema (`"schema": "rdma-direct-report/1"`; keys in this order, a
//! later version adds keys but never renames or retypes one):
//!
//! | key | type | what |
//! |---|---|---|
//! | `schema` | string | `rdma-direct-report/1` |
//! | `generated` | string | when the report was written, UTC, RFC 3339 (`2025-01-31T12:00:00Z`) |
//! | `rdma_direct` | object | `version` (string), `profile` (`release` or `debug`: debug figures are slow), `verbs` (bool: built with rdma-core) |
//! | `host` | object | `kernel` (`uname -r`), `os` (`/etc/os-release`'s PRETTY_NAME), `arch`, `cpu` (model name), `cpus` (number) (strings null when unknown); `rdma_core`: `version` (string or null), `source` (what said it) or `reason` (why null), `libraries` (the rdma-core libraries this process has loaded, file names) |
//! | `device` | object | `name`, `kind` (`sim` or `verbs`), `driver`, `data_path` (`direct` or `verbs`), `connectx` (bool: not the sim and driven by the direct path), `fw_ver`, `hw_rev`, `hca_type`, `board_id`, `pci_vendor_id` (strings or null; `fw_ver` is `sim` on the sim), `vendor_part_id` (number or null: the PCI device id, as `ibv_devinfo` prints it on mlx5), `attrs_source`, `ports` (`port`, `state`, `link_layer`, `active_mtu`, `rate_gbps`) |
//! | `run` | object | `iters` (latency iterations), `side_b` (where the two-sided cases' side B ran: `this process` or `the peer (--peer)`), `connect` (`loopback`, `tcp` or `rdma_cm`), `mlx5_device_env` (`RDMA_DIRECT_MLX5_DEVICE`, string or null), `env` (object: every `MLX5_*`, `RDMA_DIRECT_*` and `IBV_*` variable set, name to value: libmlx5's and libibverbs' tuning, ours), `seconds` (number) |
//! | `cases` | array | one object per case, in the order run: `name`, `group` (`conformance`, `two_sided`, `hardware`, `bench`), `result` (`passed`, `failed` or `skipped`), `detail` (string: what a passed case saw, possibly empty; why one skipped, never empty; what differed in one that failed), `ms` (number) |
//! | `figures` | array | one object per benchmark that ran: `test`, `data_path`, `bytes`, `iterations`, then `bench --out_json`'s columns: latency `t_min_usec`, `t_max_usec`, `t_typical_usec`, `t_avg_usec`, `t_stdev_usec`, `p99_usec`, `p99_9_usec`; bandwidth `bw_unit`, `bw_peak`, `bw_average`, `msg_rate_mpps`; both `post_nsec_per_wr`, `poll_nsec_per_cqe` |
//! | `summary` | object | `passed`, `failed`, `skipped`: the counts of `cases` |
//!
//! No host name, address, GID or GUID goes into the report.

use super::bench::{self, BwConfig, BwTest, LatConfig, LatTest};
use super::conformance::{cases, two_host, CaseResult, Failure, Outcome};
use super::output::{check_output_path, OutputFile};
use serde_json::{json, Value};
use std::process::ExitCode;
use std::time::Instant;

/// The value of the report's `schema` key.
pub const SCHEMA: &str = "rdma-direct-report/1";

/// Run the hardware tier on a device and write one JSON report to attach
/// to a bug.
///
/// Runs the conformance suite (its two-sided cases with side B a second QP
/// of DEV in this process, or on the `conformance --server` at --peer),
/// the ConnectX-only checks of tests/mlx5.rs (skipped, with the reason, on
/// the sim, rxe and any other device that is not a ConnectX driven by the
/// direct path) and a short benchmark (write_lat, send_lat, read_lat with
/// -n iterations, write_bw 64 KiB x 2000; on a ConnectX write_lat on verbs
/// too). Writes the JSON to -o FILE, else to stdout; progress goes to
/// stderr. Exits 0 when no case failed, 1 when one did (the report is
/// written either way), 2 on a usage error (nothing is written), 3 when
/// the report could not be written to FILE (it goes to stdout instead).
/// FILE is replaced whole, through a temporary file beside it: an
/// interrupted run leaves none.
///
/// The JSON (schema "rdma-direct-report/1"): `schema`, `generated` (UTC,
/// RFC 3339), `rdma_direct` {version, profile, verbs}, `host` {kernel, os,
/// arch, cpu, cpus, rdma_core {version, source | reason, libraries}},
/// `device` {name, kind, driver, data_path, connectx, fw_ver, hw_rev,
/// hca_type, board_id, pci_vendor_id, vendor_part_id, attrs_source, ports},
/// `run` {iters, side_b, connect, mlx5_device_env, env, seconds}, `cases`
/// [{name, group: conformance|two_sided|hardware|bench, result:
/// passed|failed|skipped, detail (what a passed case saw; the reason for
/// a skip or a failure), ms}], `figures`
/// [{test, data_path, bytes, iterations, bench --out_json's columns}],
/// `summary` {passed, failed, skipped}. No host name, address, GID or GUID.
#[derive(clap::Args)]
pub struct ReportArgs {
    /// Device: `sim` or an ibverbs device such as rxe0 or mlx5_0.
    #[arg(short = 'd', long = "ib-dev", visible_alias = "device",
          default_value = rdma_direct::SIM_DEVICE)]
    pub device: String,
    /// Write the JSON here (opened before anything runs) instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
    /// Iterations of each latency test (5 to 1,000,000).
    #[arg(short = 'n', long = "iters", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(i64::from(bench::MIN_ITERS)..=1_000_000))]
    pub iters: u32,
    /// Run the two-sided cases against `rdma-direct conformance --server`
    /// on this host (side B there) instead of in this process.
    #[arg(long, value_name = "HOST")]
    pub peer: Option<String>,
    /// TCP port of the exchange with --peer.
    #[arg(short = 'p', long = "port", default_value_t = rdma_direct::exchange::DEFAULT_PORT,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub tcp_port: u16,
    /// With --peer: connect the QPs through rdma_cm (the server says -R too).
    #[arg(short = 'R', long = "rdma_cm", requires = "peer")]
    pub rdma_cm: bool,
}

/// One line of the report's `cases`.
struct Row {
    name: String,
    group: &'static str,
    result: CaseResult,
    ms: f64,
}

impl Row {
    fn result_name(&self) -> &'static str {
        match &self.result {
            Ok(Outcome::Passed(_)) => "passed",
            Ok(Outcome::Skipped(_)) => "skipped",
            Err(_) => "failed",
        }
    }

    /// Its JSON, with `peer` (the --peer host, if any) named only as
    /// "the peer": no host name or address goes into a report.
    fn json(&self, peer: Option<&str>) -> Value {
        let detail = match &self.result {
            Ok(Outcome::Passed(n) | Outcome::Skipped(n)) => n,
            Err(f) => &f.0,
        };
        let detail = match peer {
            Some(h) if !h.is_empty() => detail.replace(h, "the peer"),
            _ => detail.clone(),
        };
        json!({
            "name": self.name, "group": self.group, "result": self.result_name(),
            "detail": detail, "ms": round(self.ms, 3),
        })
    }

    /// The line stderr shows for it (`conformance`'s form).
    fn line(&self) -> String {
        match &self.result {
            Ok(Outcome::Passed(n)) if n.is_empty() => "ok".into(),
            Ok(Outcome::Passed(n)) => format!("ok ({n})"),
            Ok(Outcome::Skipped(w)) => format!("skipped: {w}"),
            Err(f) => format!("FAILED: {f}"),
        }
    }
}

/// Runs `f` as a case named `name`, timed, a panic a failure.
fn timed(name: &str, group: &'static str, f: impl FnOnce() -> CaseResult) -> Row {
    let t = Instant::now();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        Err(Failure(format!("panicked: {msg}")))
    });
    Row {
        name: name.to_string(),
        group,
        result,
        ms: t.elapsed().as_secs_f64() * 1e3,
    }
}

/// Whether a device is a ConnectX the hardware tier runs on: the gate of
/// `tests/mlx5.rs` (not the sim, and its QPs take the direct path).
enum Hardware {
    ConnectX,
    /// Not a ConnectX: why the hardware-only cases skip.
    Not(String),
    /// Named as a ConnectX (`RDMA_DIRECT_MLX5_DEVICE`, or an mlx5 driver)
    /// but not driven by the direct path: what is wrong.
    Broken(String),
}

fn hardware(dev: &str, data_path: &str, driver: &str, env: Option<&str>) -> Hardware {
    if dev == rdma_direct::SIM_DEVICE {
        return Hardware::Not(
            "the sim is not a ConnectX: the hardware tier (tests/mlx5.rs) runs the direct path \
             (mlx5dv_create_qp + mlx5dv_init_obj + our ring driver) on ConnectX hardware"
                .into(),
        );
    }
    if data_path == "direct" {
        return Hardware::ConnectX;
    }
    if env == Some(dev) || driver.starts_with("mlx5") {
        let why = if env == Some(dev) {
            format!("RDMA_DIRECT_MLX5_DEVICE={dev}")
        } else {
            format!("driver {driver}")
        };
        return Hardware::Broken(format!(
            "{dev} is named as a ConnectX ({why}), but its QPs take the verbs path, not the \
             direct path (mlx5dv_is_supported is false?)"
        ));
    }
    Hardware::Not(format!(
        "{dev} is not a ConnectX: its QPs take the verbs path (driver {driver})"
    ))
}

/// `rdma-direct report`: the exit status of the run.
pub fn run(a: &ReportArgs) -> ExitCode {
    let usage = |m: String| {
        eprintln!("rdma-direct: error: {m}");
        ExitCode::from(2)
    };
    let dev = a.device.as_str();
    if a.peer.is_some() && dev == rdma_direct::SIM_DEVICE {
        return usage(
            "the sim is one process's device: --peer needs a real device (-d rxe0, -d mlx5_0)"
                .into(),
        );
    }
    // A device that does not open is a usage error, found before anything runs.
    let data_path = match rdma_direct::Context::open(dev) {
        Ok(ctx) => ctx.data_path().as_str(),
        Err(e) => return usage(e.to_string()),
    };
    if let Some(path) = &a.output {
        if let Err(e) = check_output_path(path) {
            return usage(e.to_string());
        }
    }
    let start = Instant::now();
    let info = rdma_direct::list_devices()
        .ok()
        .and_then(|l| l.into_iter().find(|d| d.name == dev));
    let driver = info.as_ref().map_or("unknown".into(), |d| d.driver.clone());
    let env = std::env::var("RDMA_DIRECT_MLX5_DEVICE").ok();
    let hw = hardware(dev, data_path, &driver, env.as_deref());
    let (side_b, connect) = match &a.peer {
        Some(_) => (
            "the peer (--peer)".to_string(),
            if a.rdma_cm { "rdma_cm" } else { "tcp" },
        ),
        None => ("this process".to_string(), "loopback"),
    };
    eprintln!(
        "rdma-direct: report on {dev} ({data_path} path): {} conformance cases (side B of the \
         two-sided ones: {side_b}), the hardware checks, then the benchmarks",
        cases().len()
    );
    let width = cases().iter().map(|c| c.name.len()).max().unwrap_or(0) + 2;
    let mut rows: Vec<Row> = Vec::new();
    let push = |r: Row, rows: &mut Vec<Row>| {
        eprintln!("{:<width$}{}", r.name, r.line());
        rows.push(r);
    };
    let two: Vec<&str> = two_host::two_host_cases().iter().map(|c| c.name).collect();
    // With --peer the two-sided cases run after these, against the server.
    for c in cases()
        .iter()
        .filter(|c| a.peer.is_none() || !two.contains(&c.name))
    {
        let group = if two.contains(&c.name) {
            "two_sided"
        } else {
            "conformance"
        };
        push(timed(c.name, group, || c.run(dev)), &mut rows);
    }
    if let Some(host) = &a.peer {
        let how = if a.rdma_cm {
            two_host::Connect::RdmaCm
        } else {
            two_host::Connect::Tcp
        };
        eprintln!(
            "rdma-direct: connecting to {host}:{} for each two-sided case (retrying for up to 60 s)",
            a.tcp_port
        );
        let mut gone = false;
        for c in two_host::two_host_cases() {
            let r = if gone {
                Row {
                    name: c.name.into(),
                    group: "two_sided",
                    result: Ok(Outcome::Skipped(format!(
                        "not run: no connection to the server at {side_b}"
                    ))),
                    ms: 0.0,
                }
            } else {
                timed(c.name, "two_sided", || {
                    two_host::run_remote(dev, host, a.tcp_port, how, c)
                })
            };
            gone |= matches!(&r.result, Err(f) if f.0.starts_with(two_host::NOT_CONNECTED));
            push(r, &mut rows);
        }
    }
    let mut figures = Vec::new();
    push(
        timed("hw_connectx_direct_path", "hardware", || match &hw {
            Hardware::ConnectX => Ok(Outcome::Passed(format!(
                "{dev} is driven by the direct path (mlx5dv_create_qp + mlx5dv_init_obj + our ring \
                 driver): the suite above ran on it"
            ))),
            Hardware::Not(why) => Ok(Outcome::Skipped(why.clone())),
            Hardware::Broken(what) => Err(Failure(what.clone())),
        }),
        &mut rows,
    );
    let lat = |backend| LatConfig {
        device: dev.to_string(),
        iters: a.iters,
        backend,
        ..LatConfig::default()
    };
    for (name, t) in [
        ("write_lat", LatTest::Write),
        ("send_lat", LatTest::Send),
        ("read_lat", LatTest::Read),
    ] {
        let r = timed(&format!("bench_{name}"), "bench", || {
            let (i, r) = bench::run_lat(t, &lat(rdma_direct::Backend::Auto))?;
            figures.push(lat_json(name, i.data_path, &r));
            Ok(Outcome::Passed(lat_note(i.data_path, &r)))
        });
        push(r, &mut rows);
    }
    let hw_row = timed(
        "hw_write_lat_direct_beside_verbs",
        "hardware",
        || match &hw {
            Hardware::ConnectX => {
                let (i, r) = bench::run_lat(LatTest::Write, &lat(rdma_direct::Backend::Verbs))?;
                figures.push(lat_json("write_lat", i.data_path, &r));
                Ok(Outcome::Passed(lat_note(i.data_path, &r)))
            }
            Hardware::Not(why) => Ok(Outcome::Skipped(format!(
                "write_lat on verbs beside the direct path needs a ConnectX: {why}"
            ))),
            Hardware::Broken(_) => Ok(Outcome::Skipped(format!(
                "the direct path does not drive {dev} (hw_connectx_direct_path says why)"
            ))),
        },
    );
    push(hw_row, &mut rows);
    let bw = timed("bench_write_bw", "bench", || {
        let cfg = BwConfig {
            lat: LatConfig {
                device: dev.to_string(),
                size: 65536,
                iters: 2000,
                ..LatConfig::default()
            },
            ..BwConfig::default()
        };
        let (i, r) = bench::run_bw(BwTest::Write, &cfg)?;
        figures.push(json!({
            "test": "write_bw", "data_path": i.data_path, "bytes": r.bytes,
            "iterations": r.iterations, "bw_unit": "MB/sec", "bw_peak": round(r.bw_peak, 2),
            "bw_average": round(r.bw_average, 2), "msg_rate_mpps": round(r.msg_rate, 6),
            "post_nsec_per_wr": round(r.cpu.post_ns, 1), "poll_nsec_per_cqe": round(r.cpu.poll_ns, 1),
        }));
        Ok(Outcome::Passed(format!(
            "{} path: {} B x {}: {:.2} MB/sec average, {:.0} messages/s",
            i.data_path,
            r.bytes,
            r.iterations,
            r.bw_average,
            r.msg_rate * 1e6
        )))
    });
    push(bw, &mut rows);
    let count = |want: &str| rows.iter().filter(|r| r.result_name() == want).count();
    let (passed, failed, skipped) = (count("passed"), count("failed"), count("skipped"));
    let doc = json!({
        "schema": SCHEMA,
        "generated": utc_now(),
        "rdma_direct": {
            "version": env!("CARGO_PKG_VERSION"),
            "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
            "verbs": cfg!(feature = "verbs"),
        },
        "host": host(),
        "device": device(dev, data_path, &driver, matches!(hw, Hardware::ConnectX), info.as_ref()),
        "run": {
            "iters": a.iters, "side_b": side_b, "connect": connect,
            "mlx5_device_env": env,
            "env": tuning_env(),
            "seconds": round(start.elapsed().as_secs_f64(), 1),
        },
        "cases": rows.iter().map(|r| r.json(a.peer.as_deref())).collect::<Vec<_>>(),
        "figures": figures,
        "summary": { "passed": passed, "failed": failed, "skipped": skipped },
    });
    let text = serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n";
    let wrote = match &a.output {
        Some(path) => write_report(path, &text).map(|()| format!("wrote {}", path.display())),
        None => {
            use std::io::Write;
            if std::io::stdout().write_all(text.as_bytes()).is_err() {
                return ExitCode::from(141); // stdout closed, as `out!` does
            }
            Ok("the JSON is on stdout".into())
        }
    };
    match wrote {
        Ok(w) => eprintln!(
            "rdma-direct: report on {dev}: {passed} passed, {failed} failed, {skipped} skipped \
             in {:.1} s; {w}",
            start.elapsed().as_secs_f64()
        ),
        Err(e) => {
            // The run's facts are not lost: the JSON goes to stdout.
            use std::io::Write;
            eprintln!("rdma-direct: error: {e}; the report follows on stdout");
            let _ = std::io::stdout().write_all(text.as_bytes());
            return ExitCode::from(3);
        }
    }
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn lat_note(path: &str, r: &bench::LatReport) -> String {
    format!(
        "{path} path: {} B x {}: t_typical {:.2} us, post {:.1} ns/WR, poll {:.1} ns/CQE",
        r.bytes, r.iterations, r.t_typical, r.cpu.post_ns, r.cpu.poll_ns
    )
}

/// A latency figure: `bench --out_json`'s row, with the test and path.
fn lat_json(test: &str, path: &str, r: &bench::LatReport) -> Value {
    let us = |t: f64| round(t, 3);
    json!({
        "test": test, "data_path": path, "bytes": r.bytes, "iterations": r.iterations,
        "t_min_usec": us(r.t_min), "t_max_usec": us(r.t_max), "t_typical_usec": us(r.t_typical),
        "t_avg_usec": us(r.t_avg), "t_stdev_usec": us(r.t_stdev),
        "p99_usec": us(r.p99), "p99_9_usec": us(r.p99_9),
        "post_nsec_per_wr": round(r.cpu.post_ns, 1), "poll_nsec_per_cqe": round(r.cpu.poll_ns, 1),
    })
}

/// `x` to `places` decimals (the figures carry no more than they mean).
fn round(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (x * f).round() / f
}

/// A file's contents, trimmed; `None` when unreadable or empty.
fn read(path: &str) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// What a command prints on stdout, trimmed, if it ran and succeeded.
fn command(prog: &str, args: &[&str]) -> Option<String> {
    let o = std::process::Command::new(prog).args(args).output().ok()?;
    let s = String::from_utf8_lossy(&o.stdout).trim().to_string();
    (o.status.success() && !s.is_empty()).then_some(s)
}

/// The host's facts: kernel, OS, CPU, rdma-core. No host name.
fn host() -> Value {
    let os = read("/etc/os-release").and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map(|v| v.trim_matches('"').to_string())
    });
    let cpu = read("/proc/cpuinfo").and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    });
    json!({
        "kernel": read("/proc/sys/kernel/osrelease"),
        "os": os,
        "arch": std::env::consts::ARCH,
        "cpu": cpu,
        "cpus": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "rdma_core": rdma_core(),
    })
}

/// rdma-core's version, from the package manager (Debian's libibverbs1,
/// an RPM's libibverbs) or pkg-config, and the rdma-core libraries this
/// process has loaded (`/proc/self/maps`: libibverbs, libmlx5, librdmacm;
/// their file names carry rdma-core's release, e.g. `libibverbs.so.1.14.44.0`).
fn rdma_core() -> Value {
    let tries: [(&str, &[&str], &str); 3] = [
        (
            "dpkg-query",
            &["-W", "-f=${Version}", "libibverbs1"],
            "dpkg-query -W libibverbs1",
        ),
        (
            "rpm",
            &["-q", "--qf", "%{VERSION}-%{RELEASE}", "libibverbs"],
            "rpm -q libibverbs",
        ),
        (
            "pkg-config",
            &["--modversion", "libibverbs"],
            "pkg-config --modversion libibverbs (the library's version)",
        ),
    ];
    let mut libs: Vec<String> = read("/proc/self/maps")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| {
            ["libibverbs.so", "libmlx5.so", "librdmacm.so"]
                .iter()
                .any(|k| p.contains(k))
        })
        .filter_map(|p| p.rsplit('/').next().map(str::to_string))
        .collect();
    libs.sort();
    libs.dedup();
    let found = tries
        .iter()
        .find_map(|(prog, args, source)| command(prog, args).map(|v| (v, *source)));
    match found {
        Some((version, source)) => {
            json!({ "version": version, "source": source, "libraries": libs })
        }
        None => json!({
            "version": null,
            "reason": "no libibverbs package found (tried dpkg-query libibverbs1, rpm -q libibverbs, \
                       pkg-config --modversion libibverbs)",
            "libraries": libs,
        }),
    }
}

/// The device's facts: sysfs attributes (what `ibv_devinfo` shows) and
/// ports, without GUIDs or GIDs.
fn device(
    dev: &str,
    data_path: &str,
    driver: &str,
    connectx: bool,
    info: Option<&rdma_direct::DeviceInfo>,
) -> Value {
    let sim = dev == rdma_direct::SIM_DEVICE;
    let base = format!("/sys/class/infiniband/{dev}");
    let attr = |name: &str| {
        if sim {
            None
        } else {
            read(&format!("{base}/{name}"))
        }
    };
    let part = attr("device/device")
        .and_then(|s| u32::from_str_radix(s.trim_start_matches("0x"), 16).ok());
    let ports: Vec<Value> = info.map_or(Vec::new(), |d| {
        d.ports
            .iter()
            .map(|p| {
                json!({
                    "port": p.port, "state": p.state, "link_layer": p.link_layer,
                    "active_mtu": p.active_mtu, "rate_gbps": p.rate_gbps,
                })
            })
            .collect()
    });
    json!({
        "name": dev,
        "kind": info.map_or("unknown", |d| d.kind),
        "driver": driver,
        "data_path": data_path,
        "connectx": connectx,
        "fw_ver": if sim { Some("sim".to_string()) } else { attr("fw_ver") },
        "hw_rev": attr("hw_rev"),
        "hca_type": attr("hca_type"),
        "board_id": attr("board_id"),
        "pci_vendor_id": attr("device/vendor"),
        "vendor_part_id": part,
        "attrs_source": if sim { "sim (no firmware, no PCI device)".to_string() } else { base },
        "ports": ports,
    })
}

/// Now, UTC, RFC 3339 to the second (`2025-01-31T12:00:00Z`).
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// Seconds since the epoch as RFC 3339, UTC (the civil-from-days algorithm).
fn rfc3339(secs: u64) -> String {
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Writes the report to `path` whole or not at all: a regular file (or a
/// new one) through a temporary file in its directory renamed over it, so
/// an interrupted run leaves no empty or half-written report; anything
/// else (a FIFO, a terminal, `/dev/stdout`) written as it is.
fn write_report(path: &std::path::Path, text: &str) -> rdma_direct::Result<()> {
    let regular = match std::fs::metadata(path) {
        Ok(m) => m.is_file(),
        Err(_) => true,
    };
    if !regular {
        return OutputFile::open(path)?.write(text);
    }
    let name = path
        .file_name()
        .map_or("report".into(), |n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let bad =
        |e: std::io::Error| rdma_direct::Error::Invalid(format!("write {}: {e}", path.display()));
    let r = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path));
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r.map_err(bad)
}

/// The environment that changes how libmlx5, libibverbs and rdma-direct
/// behave (`MLX5_*`, `IBV_*`, `RDMA_DIRECT_*`), name to value, sorted.
fn tuning_env() -> Value {
    let mut vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| {
            ["MLX5_", "IBV_", "RDMA_DIRECT_"]
                .iter()
                .any(|p| k.starts_with(p))
        })
        .collect();
    vars.sort();
    Value::Object(
        vars.into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_dates() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(super::rfc3339(1_738_324_799), "2025-01-31T11:59:59Z");
    }
}
