//! `rdma-direct report`: on the sim (or `RDMA_DIRECT_REPORT_DEVICE`, rxe0
//! in scripts/test's guest) it writes one JSON document of schema
//! `rdma-direct-report/1` (every key present with its JSON type, each
//! case's result one of three, skips with their reasons, the summary equal
//! to the case list, figures with positive numbers; the ConnectX-only
//! cases skipped, saying why); a device that does not open, an output that
//! cannot be written and bad flags exit 2 and write nothing.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The binary, or `None` after a `SKIPPED:` line on stderr (the marker
/// `scripts/test` and `.ci/run` count as a skip) naming the calling test.
fn bin() -> Option<&'static str> {
    let b = option_env!("CARGO_BIN_EXE_rdma-direct");
    if b.is_none() {
        use std::io::Write as _;
        let t = std::thread::current();
        let _ = writeln!(
            std::io::stderr(),
            "report: {}: SKIPPED: the rdma-direct binary is not built (feature cli off)",
            t.name().unwrap_or("?")
        );
    }
    b
}

fn run(args: &[&str]) -> Option<Output> {
    Some(
        Command::new(bin()?)
            .args(args)
            .env_remove("RDMA_DIRECT_MLX5_DEVICE")
            .env("RDMA_DIRECT_REPORT_TEST", "1")
            .output()
            .expect("run rdma-direct"),
    )
}

/// A fresh directory of this test's own.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rdma-direct-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    dir
}

/// `v[key]`, which must be there.
fn get<'a>(v: &'a Value, key: &str, at: &str) -> &'a Value {
    v.get(key)
        .unwrap_or_else(|| panic!("{at}: no key {key:?} in {v}"))
}

fn string<'a>(v: &'a Value, key: &str, at: &str) -> &'a str {
    get(v, key, at)
        .as_str()
        .unwrap_or_else(|| panic!("{at}.{key}: not a string: {v}"))
}

/// A string or null.
fn opt_string<'a>(v: &'a Value, key: &str, at: &str) -> Option<&'a str> {
    let x = get(v, key, at);
    assert!(
        x.is_string() || x.is_null(),
        "{at}.{key}: neither string nor null: {x}"
    );
    x.as_str()
}

fn number(v: &Value, key: &str, at: &str) -> f64 {
    get(v, key, at)
        .as_f64()
        .unwrap_or_else(|| panic!("{at}.{key}: not a number: {v}"))
}

fn opt_number(v: &Value, key: &str, at: &str) -> Option<f64> {
    let x = get(v, key, at);
    assert!(
        x.is_number() || x.is_null(),
        "{at}.{key}: neither number nor null: {x}"
    );
    x.as_f64()
}

fn boolean(v: &Value, key: &str, at: &str) -> bool {
    get(v, key, at)
        .as_bool()
        .unwrap_or_else(|| panic!("{at}.{key}: not a bool: {v}"))
}

fn array<'a>(v: &'a Value, key: &str, at: &str) -> &'a Vec<Value> {
    get(v, key, at)
        .as_array()
        .unwrap_or_else(|| panic!("{at}.{key}: not an array: {v}"))
}

/// `2025-01-31T12:00:00Z`.
fn is_rfc3339_utc(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

/// The device the schema test reports on: `RDMA_DIRECT_REPORT_DEVICE`
/// (scripts/test sets rxe0 in the soft-RoCE guest), else the sim.
fn device() -> String {
    std::env::var("RDMA_DIRECT_REPORT_DEVICE").unwrap_or_else(|_| "sim".into())
}

#[test]
fn report_writes_the_documented_schema() {
    let dev = device();
    let sim = dev == "sim";
    let dir = scratch("report");
    let file = dir.join("report.json");
    let Some(o) = run(&[
        "report",
        "-d",
        &dev,
        "-n",
        "200",
        "-o",
        file.to_str().unwrap(),
    ]) else {
        return;
    };
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.stdout.is_empty(),
        "with -o the JSON goes to the file, not stdout: {:?}",
        String::from_utf8_lossy(&o.stdout)
    );
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{e}; stderr: {err}"));
    let doc: Value = serde_json::from_str(&text).expect("the report is JSON");
    let keys: Vec<&str> = doc
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "schema",
            "generated",
            "rdma_direct",
            "host",
            "device",
            "run",
            "cases",
            "figures",
            "summary"
        ]
    );
    assert_eq!(string(&doc, "schema", "$"), "rdma-direct-report/1");
    let when = string(&doc, "generated", "$");
    assert!(is_rfc3339_utc(when), "generated: {when:?}");

    let rd = get(&doc, "rdma_direct", "$");
    assert_eq!(
        string(rd, "version", "rdma_direct"),
        env!("CARGO_PKG_VERSION")
    );
    assert!(["debug", "release"].contains(&string(rd, "profile", "rdma_direct")));
    boolean(rd, "verbs", "rdma_direct");

    let host = get(&doc, "host", "$");
    let kernel = opt_string(host, "kernel", "host").expect("Linux has a kernel release");
    assert!(!kernel.is_empty());
    opt_string(host, "os", "host");
    assert!(!string(host, "arch", "host").is_empty());
    opt_string(host, "cpu", "host");
    assert!(number(host, "cpus", "host") >= 1.0);
    let rc = get(host, "rdma_core", "host");
    if opt_string(rc, "version", "host.rdma_core").is_some() {
        assert!(!string(rc, "source", "host.rdma_core").is_empty());
    } else {
        assert!(!string(rc, "reason", "host.rdma_core").is_empty());
    }
    for l in array(rc, "libraries", "host.rdma_core") {
        assert!(l.as_str().is_some_and(|s| !s.is_empty()), "library {l}");
    }

    let d = get(&doc, "device", "$");
    assert_eq!(string(d, "name", "device"), dev);
    assert_eq!(
        string(d, "kind", "device"),
        if sim { "sim" } else { "verbs" }
    );
    assert!(!string(d, "driver", "device").is_empty());
    if sim {
        assert_eq!(string(d, "driver", "device"), "sim");
        assert_eq!(string(d, "data_path", "device"), "direct");
        assert_eq!(opt_string(d, "fw_ver", "device"), Some("sim"));
    } else {
        assert!(["direct", "verbs"].contains(&string(d, "data_path", "device")));
        opt_string(d, "fw_ver", "device");
    }
    assert!(!boolean(d, "connectx", "device"), "{dev} is no ConnectX");
    for k in ["hw_rev", "hca_type", "board_id", "pci_vendor_id"] {
        opt_string(d, k, "device");
    }
    opt_number(d, "vendor_part_id", "device");
    assert!(!string(d, "attrs_source", "device").is_empty());
    let ports = array(d, "ports", "device");
    assert!(!ports.is_empty());
    for p in ports {
        assert!(number(p, "port", "device.ports") >= 1.0);
        string(p, "state", "device.ports");
        string(p, "link_layer", "device.ports");
        opt_number(p, "active_mtu", "device.ports");
        opt_number(p, "rate_gbps", "device.ports");
    }

    let r = get(&doc, "run", "$");
    assert_eq!(number(r, "iters", "run"), 200.0);
    assert_eq!(string(r, "side_b", "run"), "this process");
    assert_eq!(string(r, "connect", "run"), "loopback");
    assert_eq!(opt_string(r, "mlx5_device_env", "run"), None);
    assert!(number(r, "seconds", "run") > 0.0);
    let env = get(r, "env", "run")
        .as_object()
        .expect("run.env is an object");
    assert_eq!(
        env.get("RDMA_DIRECT_REPORT_TEST").and_then(Value::as_str),
        Some("1"),
        "run.env holds the RDMA_DIRECT_* variables: {env:?}"
    );

    let cases = array(&doc, "cases", "$");
    let mut counts = [0usize; 3];
    let mut names = std::collections::HashSet::new();
    for c in cases {
        let name = string(c, "name", "cases");
        assert!(!name.is_empty() && names.insert(name), "name {name:?}");
        let group = string(c, "group", name);
        assert!(
            ["conformance", "two_sided", "hardware", "bench"].contains(&group),
            "{name}: group {group:?}"
        );
        let detail = string(c, "detail", name);
        assert!(number(c, "ms", name) >= 0.0);
        let k = match string(c, "result", name) {
            "passed" => 0,
            "failed" => 1,
            "skipped" => 2,
            other => panic!("{name}: result {other:?}"),
        };
        counts[k] += 1;
        if k != 0 {
            assert!(
                !detail.trim().is_empty(),
                "{name}: a skip or failure without a reason"
            );
        }
        if group == "hardware" {
            assert_eq!(k, 2, "{name}: {dev} runs no ConnectX-only case: {c}");
            assert!(detail.contains("ConnectX"), "{name}: {detail}");
        }
        if group == "bench" {
            assert_eq!(k, 0, "{name}: {c}");
        }
    }
    let s = get(&doc, "summary", "$");
    assert_eq!(
        [
            number(s, "passed", "summary") as usize,
            number(s, "failed", "summary") as usize,
            number(s, "skipped", "summary") as usize,
        ],
        counts,
        "summary against the case list"
    );
    assert_eq!(
        o.status.code(),
        Some(if counts[1] > 0 { 1 } else { 0 }),
        "exit status against {counts:?} (passed, failed, skipped); stderr: {err}"
    );
    // Every case of the suite is in the report, as `conformance --list` names them.
    let list = run(&["conformance", "--list"]).expect("built");
    let suite: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert!(!suite.is_empty());
    for n in &suite {
        assert!(names.contains(n.as_str()), "{n} is not in the report");
    }
    let in_groups = |g: &[&str]| {
        cases
            .iter()
            .filter(|c| g.contains(&c["group"].as_str().unwrap_or_default()))
            .count()
    };
    assert_eq!(in_groups(&["conformance", "two_sided"]), suite.len());
    assert!(in_groups(&["two_sided"]) > 0);
    assert_eq!(in_groups(&["hardware"]), 2);

    let figures = array(&doc, "figures", "$");
    assert!(!figures.is_empty());
    let mut tests = Vec::new();
    for f in figures {
        let test = string(f, "test", "figures");
        tests.push(test);
        assert_eq!(
            string(f, "data_path", test),
            string(get(&doc, "device", "$"), "data_path", "device"),
            "{test}: the figures are of the device's own data path"
        );
        assert!(number(f, "bytes", test) > 0.0);
        assert!(number(f, "iterations", test) > 0.0);
        let positive: &[&str] = if test.ends_with("_lat") {
            assert_eq!(number(f, "iterations", test), 200.0);
            &[
                "t_min_usec",
                "t_max_usec",
                "t_typical_usec",
                "t_avg_usec",
                "p99_usec",
                "p99_9_usec",
            ]
        } else {
            assert_eq!(string(f, "bw_unit", test), "MB/sec");
            &["bw_peak", "bw_average", "msg_rate_mpps"]
        };
        for k in positive {
            assert!(number(f, k, test) > 0.0, "{test}.{k}: {f}");
        }
        for k in ["post_nsec_per_wr", "poll_nsec_per_cqe"] {
            assert!(number(f, k, test) >= 0.0, "{test}.{k}: {f}");
        }
    }
    for t in ["write_lat", "send_lat", "read_lat", "write_bw"] {
        assert!(tests.contains(&t), "no {t} figure in {tests:?}");
    }
    assert!(
        err.contains(&format!("rdma-direct: report on {dev}:")),
        "stderr: {err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn report_usage_errors_exit_2_and_write_nothing() {
    let dir = scratch("report-usage");
    let file = dir.join("r.json");
    let kept = dir.join("kept.json");
    std::fs::write(&kept, "earlier\n").unwrap();
    let f = file.to_str().unwrap();
    let k = kept.to_str().unwrap();
    // A build without rdma-core knows no device but the sim: it says why.
    let (unknown, unknown_any) = if cfg!(feature = "verbs") {
        (
            "no RDMA device named \"no_such_dev\"",
            "no RDMA device named",
        )
    } else {
        ("device \"no_such_dev\" needs rdma-core", "needs rdma-core")
    };
    let cases: &[(&[&str], &str, &Path)] = &[
        (&["report", "-d", "no_such_dev", "-o", f], unknown, &file),
        (
            &["report", "-d", "no_such_dev", "-o", k],
            unknown_any,
            &kept,
        ),
        (
            &["report", "-o", "/nonexistent-dir/r.json"],
            "its directory does not exist",
            &file,
        ),
        (
            &["report", "--peer", "192.0.2.1", "-o", f],
            "the sim is one process's device",
            &file,
        ),
        (&["report", "-R", "-o", f], "--peer", &file),
        (&["report", "-n", "4", "-o", f], "4", &file),
    ];
    for (args, want, path) in cases {
        let Some(o) = run(args) else { return };
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: stderr {e}");
        assert!(e.contains(want), "{args:?}: stderr {e:?} lacks {want:?}");
        assert!(
            e.lines().count() == 1 && e.starts_with("rdma-direct: "),
            "{args:?}: one clear line, not {e:?}"
        );
        assert!(o.stdout.is_empty(), "{args:?}: printed {:?}", o.stdout);
        if *path == kept.as_path() {
            assert_eq!(
                std::fs::read_to_string(&kept).unwrap(),
                "earlier\n",
                "{args:?} touched an existing file"
            );
        } else {
            assert!(!path.exists(), "{args:?} wrote {}", path.display());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
