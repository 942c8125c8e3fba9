//! The CLI as a user meets it: bad arguments exit 2 with a message naming
//! the problem (and run nothing); `compare` writes its JSON and SVG on a
//! machine with only the sim; `bench` runs its flags on the sim.

use std::process::{Command, Output};

/// The binary, or `None` after a `SKIPPED:` line on stderr (the marker
/// `scripts/test` and `.ci/run` count as a skip) naming the calling test.
fn bin() -> Option<&'static str> {
    let b = option_env!("CARGO_BIN_EXE_rdma-direct");
    if b.is_none() {
        let t = std::thread::current();
        eprintln!(
            "cli: {}: SKIPPED: the rdma-direct binary is not built (feature cli off)",
            t.name().unwrap_or("?")
        );
    }
    b
}

fn run(args: &[&str]) -> Option<Output> {
    let out = Command::new(bin()?)
        .args(args)
        .output()
        .expect("run rdma-direct");
    Some(out)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn bad_bench_arguments_exit_2_and_say_why() {
    let dir = std::env::temp_dir().join(format!("rdma-direct-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cases: &[(&[&str], &str)] = &[
        (
            &["bench", "write_lat", "-t", "5"],
            "-t applies to the bandwidth tests",
        ),
        (
            &["bench", "send_lat", "-Q", "5"],
            "-Q applies to the bandwidth tests",
        ),
        (
            &["bench", "read_lat", "-l", "2"],
            "-l applies to the bandwidth tests",
        ),
        (
            &["bench", "write_lat", "--report_gbits"],
            "--report_gbits applies",
        ),
        (
            &["bench", "write_bw", "-l", "200", "-t", "128"],
            "a post list must fit",
        ),
        (
            &["bench", "write_lat", "-A", "FETCH_AND_ADD"],
            "-A applies to atomic_lat",
        ),
        (
            &["bench", "atomic_lat", "-s", "16"],
            "atomics always move 8 bytes",
        ),
        (&["bench", "atomic_bw", "-a"], "-a does not apply"),
        (
            &["bench", "write_bw", "-D", "1", "-n", "100"],
            "cannot be used with",
        ),
        (
            &["bench", "write_lat", "-R"],
            "-R (rdma_cm) connects two hosts",
        ),
        (&["bench", "write_lat", "-s", "0"], "size 0"),
        (&["bench", "write_lat", "-n", "4"], "at least 5"),
        (
            &["bench", "write_bw", "--out_json_file", "x.json"],
            "--out_json",
        ),
        (
            &[
                "bench",
                "write_bw",
                "--out_json",
                "--out_json_file",
                "/nonexistent-dir/x.json",
            ],
            "its directory does not exist",
        ),
        (
            &["bench", "write_lat", "--server"],
            "the sim is one process's device",
        ),
        (&["compare", "--sizes", "2,0"], "size 0 is not"),
        (&["compare", "--tests", "write_latency"], "unknown test"),
        (
            &["compare", "--json", "same.out", "--svg", "same.out"],
            "are both same.out",
        ),
        (
            &["compare", "--svg", "/nonexistent-dir/c.svg"],
            "its directory does not exist",
        ),
        (&["compare", "-d", "no_such_dev"], "no RDMA device named"),
        (&["conformance", "-R"], "-R (rdma_cm) is for two hosts"),
        (
            &["conformance", "--server"],
            "two-host conformance needs a real device",
        ),
    ];
    for (args, want) in cases {
        let Some(o) = run(args) else { return };
        let e = stderr(&o);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: exit {:?}, stderr {e}",
            o.status
        );
        assert!(e.contains(want), "{args:?}: stderr {e:?} lacks {want:?}");
        assert!(
            o.stdout.is_empty(),
            "{args:?} printed a result: {:?}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
    assert!(
        !std::path::Path::new("same.out").exists(),
        "a refused compare wrote same.out"
    );
}

#[test]
fn compare_writes_json_and_svg_with_only_the_sim() {
    let dir = std::env::temp_dir().join(format!("rdma-direct-compare-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, svg) = (dir.join("c.json"), dir.join("c.svg"));
    let Some(o) = run(&[
        "compare",
        "-d",
        "sim",
        "--tests",
        "write_lat,write_bw",
        "--sizes",
        "2,4096",
        "--lat-iters",
        "50",
        "--bw-iters",
        "100",
        "--json",
        json.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]) else {
        return;
    };
    assert!(o.status.success(), "compare failed: {}", stderr(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.starts_with("| test | bytes | device |"), "{table}");
    assert_eq!(
        table
            .lines()
            .filter(|l| l.contains("| sim | direct |"))
            .count(),
        4,
        "{table}"
    );
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(rows.len(), 4);
    assert!(rows
        .iter()
        .filter(|r| r["test"] == "write_lat")
        .all(|r| r["t_typical_us"].as_f64().is_some_and(|t| t > 0.0)));
    assert!(rows
        .iter()
        .filter(|r| r["test"] == "write_bw")
        .all(|r| r["msg_rate_mpps"].as_f64().is_some_and(|m| m > 0.0)));
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
    for label in [
        "latency, t_typical [ns]",
        "message rate [thousand messages/s]",
        "write_lat sim/direct",
        "write_bw sim/direct",
    ] {
        assert!(s.contains(label), "the SVG lacks {label:?}");
    }
    assert!(s.contains("<polyline"), "the SVG has no lines");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_flags_run_on_the_sim() {
    let dir = std::env::temp_dir().join(format!("rdma-direct-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("o.json");
    let Some(o) = run(&[
        "bench",
        "send_bw",
        "-s",
        "4096",
        "-n",
        "300",
        "-t",
        "32",
        "-l",
        "4",
        "-e",
        "--report_gbits",
        "--out_json",
        "--out_json_file",
        json.to_str().unwrap(),
    ]) else {
        return;
    };
    assert!(o.status.success(), "bench failed: {}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("BW average[Gb/sec]"), "{out}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["test"], "send_bw");
    assert_eq!(doc["bw_unit"], "Gb/sec");
    assert_eq!(doc["results"][0]["bytes"], 4096);
    assert_eq!(doc["results"][0]["iterations"], 300);
    let Some(o) = run(&["bench", "atomic_lat", "-A", "CMP_AND_SWAP", "-n", "50"]) else {
        return;
    };
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("Atomic CMP_AND_SWAP Latency Test"),
        "{out}"
    );
    // -D on a latency test: as many round trips as fit in the second.
    let Some(o) = run(&["bench", "write_lat", "-D", "1"]) else {
        return;
    };
    let out = String::from_utf8_lossy(&o.stdout);
    let row = out
        .lines()
        .skip_while(|l| !l.contains("#bytes"))
        .nth(1)
        .unwrap_or("");
    let iters: u64 = row
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(o.status.success() && iters > 100, "write_lat -D 1: {out}");
    // The adaptive completion mode, on a latency and a bandwidth test.
    for test in ["send_lat", "read_bw"] {
        let Some(o) = run(&["bench", test, "--adaptive", "100", "-n", "300"]) else {
            return;
        };
        assert!(o.status.success(), "{test} --adaptive 100: {}", stderr(&o));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
