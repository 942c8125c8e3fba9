//! The CLI as a user meets it: bad arguments exit 2 with a message naming
//! the problem (and run nothing); `compare` writes its JSON and SVG on a
//! machine with only the sim; `bench` runs its flags on the sim.

/// `eprintln!` past libtest's capture, so a skip's `SKIPPED:` marker shows
/// (and is counted by `scripts/summarise`) even when the test passes.
macro_rules! loud {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

use std::process::{Command, Output};

/// The binary, or `None` after a `SKIPPED:` line on stderr (the marker
/// `scripts/test` and `.ci/run` count as a skip) naming the calling test.
fn bin() -> Option<&'static str> {
    let b = option_env!("CARGO_BIN_EXE_rdma-direct");
    if b.is_none() {
        let t = std::thread::current();
        loud!(
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
        "t_typical [µs]",
        "message rate [million messages/s]",
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

/// A child process killed (and reaped) when dropped, so a failing test
/// leaves no server behind.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A TCP port free right now (bound on port 0, then released).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind(("0.0.0.0", 0)).expect("bind port 0");
    l.local_addr().unwrap().port()
}

/// An ibverbs device with an ACTIVE port (the sim is one process's device
/// and cannot run two hosts), or `None` after a `SKIPPED:` line.
fn two_host_device(test: &str) -> Option<String> {
    let o = run(&["devices", "--json"])?;
    let list: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).expect("devices --json");
    let dev = list.iter().find(|d| {
        d["name"] != "sim"
            && d["ports"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p["state"] == "ACTIVE"))
    });
    match dev {
        Some(d) => d["name"].as_str().map(str::to_string),
        None => {
            loud!(
                "cli: {test}: SKIPPED: no ibverbs device with an ACTIVE port (only the sim, which \
                 runs one process); the settings check itself is tested in src/tools/bench/tests.rs"
            );
            None
        }
    }
}

#[test]
fn a_two_host_flag_mismatch_names_the_flags_that_differ() {
    let Some(b) = bin() else { return };
    let Some(dev) = two_host_device("a_two_host_flag_mismatch_names_the_flags_that_differ") else {
        return;
    };
    let port = free_port().to_string();
    let server = Command::new(b)
        .args([
            "bench",
            "write_lat",
            "--server",
            "-p",
            &port,
            "-s",
            "64",
            "-n",
            "100",
        ])
        .args(["-d", &dev])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the server");
    let mut server = KillOnDrop(server);
    let Some(o) = run(&[
        "bench",
        "write_lat",
        "-s",
        "128",
        "-n",
        "100",
        "-p",
        &port,
        "-d",
        &dev,
        "127.0.0.1",
    ]) else {
        return;
    };
    let e = stderr(&o);
    assert!(!o.status.success(), "the client ran: {e}");
    assert!(e.contains("-s 128 here, -s 64 on the peer"), "{e}");
    for debug in ["None", "FetchAndAdd", "false", "duration", "rdma_cm"] {
        assert!(!e.contains(debug), "Debug text {debug:?} in {e:?}");
    }
    // The server saw the same mismatch from its side and ended.
    let status = server.0.wait().expect("wait for the server");
    let mut se = String::new();
    use std::io::Read;
    let _ = server.0.stderr.take().unwrap().read_to_string(&mut se);
    assert!(!status.success(), "the server ran: {se}");
    assert!(se.contains("-s 64 here, -s 128 on the peer"), "{se}");
}

#[test]
fn a_server_whose_port_is_taken_says_so_before_waiting() {
    let held = std::net::TcpListener::bind(("0.0.0.0", 0)).expect("bind port 0");
    let port = held.local_addr().unwrap().port();
    let p = port.to_string();
    for args in [
        &["bench", "write_lat", "--server", "-p", &p][..],
        &["bench", "write_bw", "--server", "-p", &p, "-d", "rxe0"],
        &["conformance", "--server", "-p", &p],
        &["conformance", "--server", "-p", &p, "-d", "rxe0"],
    ] {
        let Some(o) = run(args) else { return };
        let e = stderr(&o);
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(
            e.contains(&format!("TCP port {port} is in use")) && e.contains("-p"),
            "{args:?}: {e:?}"
        );
        assert!(
            !e.contains("waiting") && !out.contains("waiting"),
            "{args:?} said it waits: {e:?} {out:?}"
        );
    }
    drop(held);
}

#[test]
fn an_output_file_that_cannot_be_written_is_refused_before_the_run() {
    let dir = std::env::temp_dir().join(format!("rdma-direct-out-{}", std::process::id()));
    let missing = dir.join("no-such-dir").join("x.json");
    let missing = missing.to_str().unwrap();
    // /proc takes no new files; /sys/kernel has its write bit but takes none
    // either (EACCES), so only opening the file finds it out.
    let paths = [
        "/proc/rdma-direct-test.json",
        "/sys/kernel/rdma-direct-test.json",
        missing,
    ];
    for path in paths {
        let args = [
            "bench",
            "write_lat",
            "-n",
            "100",
            "--out_json",
            "--out_json_file",
            path,
        ];
        let Some(o) = run(&args) else { return };
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(
            e.contains(&format!("cannot write {path}")),
            "{args:?}: {e:?}"
        );
        assert!(
            o.stdout.is_empty(),
            "{args:?} ran: {:?}",
            String::from_utf8_lossy(&o.stdout)
        );
        for flag in ["--json", "--svg"] {
            let args = ["compare", "-d", "sim", "--sizes", "2", flag, path];
            let Some(o) = run(&args) else { return };
            let e = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
            assert!(
                e.contains(&format!("cannot write {path}")),
                "{args:?}: {e:?}"
            );
            assert!(o.stdout.is_empty(), "{args:?} ran");
        }
    }
    // A file that can be written is, and one a refused run created is not left.
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("o.json");
    let j = json.to_str().unwrap();
    let Some(o) = run(&[
        "bench",
        "write_lat",
        "-n",
        "4",
        "--out_json",
        "--out_json_file",
        j,
    ]) else {
        return;
    };
    assert_eq!(o.status.code(), Some(2));
    assert!(!json.exists(), "a refused run left {j}");
    let Some(o) = run(&[
        "bench",
        "write_lat",
        "-n",
        "20",
        "--out_json",
        "--out_json_file",
        j,
    ]) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["results"][0]["iterations"], 20);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn out_of_range_values_name_their_flag_and_range() {
    let write = ["encode-wqe", "--op", "write", "--qpn", "1", "--pi", "0"];
    let cases: &[(Vec<&str>, &[&str])] = &[
        (
            vec!["bench", "write_lat", "-s", "99999999999"],
            &["-s (--size)", "1..=8388608"],
        ),
        (
            vec!["bench", "write_lat", "-s", "8388609"],
            &["-s (--size)", "1..=8388608"],
        ),
        (
            vec!["bench", "write_lat", "-n", "-5"],
            &["-n (--iters)", "at least 5", "not -5"],
        ),
        (
            vec!["bench", "write_lat", "-I", "99999"],
            &["-I (--inline_size) 99999", "0..=512"],
        ),
        (
            [&write[..], &["--sq-wqebbs", "8", "--sge", "0:4:1"]].concat(),
            &["--op write needs --raddr and --rkey"],
        ),
        (
            vec!["compare", "-d", "sim", "--lat-iters", "0"],
            &["--lat-iters 0", "at least 5"],
        ),
        (
            vec!["compare", "-d", "sim", "--bw-iters", "0"],
            &["--bw-iters 0", "at least 5"],
        ),
    ];
    for (args, want) in cases {
        let Some(o) = run(args) else { return };
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        for w in *want {
            assert!(e.contains(w), "{args:?}: {e:?} lacks {w:?}");
        }
        for wrong in [
            "0..=4294967295",
            "unexpected argument",
            "max_inline",
            "needs a remote address",
        ] {
            assert!(!e.contains(wrong), "{args:?}: {e:?} says {wrong:?}");
        }
        assert!(o.stdout.is_empty(), "{args:?} ran");
    }
    // The ends of the ranges are taken.
    for args in [
        &["bench", "write_lat", "-I", "512", "-s", "512", "-n", "5"][..],
        &["bench", "write_lat", "-s", "8388608", "-n", "5"],
    ] {
        let Some(o) = run(args) else { return };
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn result_rows_are_spaces_only_and_line_up_with_the_header() {
    let Some(o) = run(&["bench", "write_bw", "-s", "8388608", "-n", "20"]) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let mut lines = out.lines().skip_while(|l| !l.contains("#bytes"));
    let (header, row) = (lines.next().unwrap(), lines.next().unwrap());
    assert!(!row.contains('\t'), "{row:?}");
    // Each value ends where its column's name ends.
    let ends = |s: &str, words: &[&str]| -> Vec<usize> {
        let mut from = 0;
        words
            .iter()
            .map(|w| {
                from += s[from..].find(w).unwrap() + w.len();
                from
            })
            .collect()
    };
    let values: Vec<&str> = row.split_whitespace().collect();
    let names = [
        "#bytes",
        "#iterations",
        "BW peak[MB/sec]",
        "BW average[MB/sec]",
        "MsgRate[Mpps]",
        "post[nsec/WR]",
        "poll[nsec/CQE]",
    ];
    assert_eq!(
        ends(row, &values),
        ends(header, &names),
        "\n{header}\n{row}"
    );
}

#[test]
fn a_one_size_run_on_a_terminal_shows_no_sizes_bar() {
    let Some(b) = bin() else { return };
    // `script` gives the run a pseudo-terminal, so progress is drawn.
    let cmd = format!("{b} bench write_lat -n 1000");
    let o = match Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            loud!(
                "cli: a_one_size_run_on_a_terminal_shows_no_sizes_bar: SKIPPED: no `script` (util-linux): {e}"
            );
            return;
        }
    };
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && out.contains("#bytes"), "{out}");
    assert!(
        !out.contains("sizes ["),
        "a one-size run drew a sizes bar: {out:?}"
    );
    // -a draws it (the check above can tell).
    let cmd = format!("{b} bench write_lat -a -n 20");
    let o = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("sizes ["), "-a drew no bar: {out:?}");
}

/// The README's recipe for getting compare's files out of the soft-RoCE
/// guest, run on the host without the guest: inside `sh -c`, compare's
/// table goes to stderr and only the JSON to stdout (redirected into
/// compare.json), then `compare --from-json` renders the SVG, which must
/// parse as XML with an `<svg>` root. Before, the recipe `cat`ed the SVG
/// into the same stream as the table, and the file began with `| test |`.
#[test]
fn compare_recipe_for_the_guest_gives_json_and_an_svg_that_parses() {
    let Some(bin) = bin() else { return };
    let dir = std::env::temp_dir().join(format!("rdma-direct-recipe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (inner_json, inner_svg) = (dir.join("c.json"), dir.join("c.svg"));
    let (json, svg) = (dir.join("compare.json"), dir.join("compare.svg"));
    let guest_part = format!(
        "\"$0\" compare -d sim --tests write_lat,atomic_lat,write_bw --sizes 2,64 \
         --lat-iters 50 --bw-iters 100 --json {} --svg {} >&2 && cat {}",
        inner_json.display(),
        inner_svg.display(),
        inner_json.display()
    );
    let o = Command::new("sh")
        .args(["-c", &guest_part, bin])
        .output()
        .expect("run sh");
    assert!(o.status.success(), "the guest part failed: {}", stderr(&o));
    assert!(
        stderr(&o).contains("| write_lat | 2 | sim | direct |"),
        "the table is not on stderr: {}",
        stderr(&o)
    );
    std::fs::write(&json, &o.stdout).unwrap();
    let rows: Vec<serde_json::Value> =
        serde_json::from_slice(&o.stdout).expect("stdout is compare's JSON alone");
    assert_eq!(
        rows.len(),
        5,
        "write_lat and write_bw at 2 sizes, atomic_lat at 8 B: {rows:?}"
    );
    let Some(o) = run(&[
        "compare",
        "--from-json",
        json.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]) else {
        return;
    };
    assert!(o.status.success(), "--from-json failed: {}", stderr(&o));
    assert!(o.stdout.is_empty(), "--from-json printed a table");
    for file in [&svg, &inner_svg] {
        let text = std::fs::read_to_string(file).unwrap();
        let doc = roxmltree::Document::parse(&text)
            .unwrap_or_else(|e| panic!("{} is not XML: {e}", file.display()));
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        let texts: Vec<&str> = doc
            .descendants()
            .filter_map(|n| n.is_text().then(|| n.text()).flatten())
            .map(str::trim)
            .collect();
        for label in [
            "t_typical [µs]",
            "message rate [million messages/s]",
            "message size [bytes; Ki = 1024]",
            "write_lat sim/direct",
            "atomic_lat sim/direct",
            "write_bw sim/direct",
        ] {
            assert!(
                texts.contains(&label),
                "{} lacks the text {label:?}",
                file.display()
            );
        }
    }
    // Rendered from the JSON, the plot is the one the run drew.
    assert_eq!(
        std::fs::read_to_string(&svg).unwrap(),
        std::fs::read_to_string(&inner_svg).unwrap()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--from-json` runs nothing, so the run's flags are refused beside it,
/// and a file that is not compare's JSON is a clear error (exit 2), with
/// no SVG written.
#[test]
fn compare_from_json_refuses_bad_input() {
    let dir = std::env::temp_dir().join(format!("rdma-direct-fromjson-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("out.svg");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let good_row = r#"{"test":"write_lat","bytes":2,"device":"sim","data_path":"direct",
        "t_typical_us":1.0,"t_avg_us":1.0,"p99_us":2.0,"bw_average_mb_per_s":null,
        "msg_rate_mpps":null,"post_ns_per_wr":50.0,"poll_ns_per_cqe":60.0}"#;
    let cases: Vec<(String, &str)> = vec![
        (write("table.json", "| test | bytes |\n"), "not JSON"),
        (write("object.json", "{}"), "not a JSON array"),
        (write("empty.json", "[]"), "no rows"),
        (
            write(
                "test.json",
                &format!("[{}]", good_row.replace("write_lat", "write_latency")),
            ),
            "row 0: unknown test \"write_latency\"",
        ),
        (
            write(
                "kind.json",
                &format!(
                    "[{good_row},{}]",
                    good_row.replace("\"write_lat\"", "\"write_bw\"")
                ),
            ),
            "row 1: write_bw needs bw_average_mb_per_s and msg_rate_mpps",
        ),
        (
            write(
                "path.json",
                &format!("[{}]", good_row.replace("direct", "dv")),
            ),
            "row 0: data_path \"dv\"",
        ),
        (
            dir.join("missing.json").to_str().unwrap().to_string(),
            "read ",
        ),
    ];
    for (file, want) in &cases {
        let Some(o) = run(&[
            "compare",
            "--from-json",
            file,
            "--svg",
            svg.to_str().unwrap(),
        ]) else {
            return;
        };
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{file}: exit {:?}, {e}", o.status);
        assert!(e.contains(want), "{file}: stderr {e:?} lacks {want:?}");
        assert!(!svg.exists(), "{file}: an SVG was written");
    }
    let good = write("good.json", &format!("[{good_row}]"));
    for extra in [
        &["-d", "sim"][..],
        &["--tests", "write_lat"],
        &["--json", "x.json"],
    ] {
        let mut args = vec![
            "compare",
            "--from-json",
            &good,
            "--svg",
            svg.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let Some(o) = run(&args) else { return };
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
        assert!(!svg.exists(), "{extra:?}: an SVG was written");
    }
    let Some(o) = run(&["compare", "--from-json", &good, "--svg", &good]) else {
        return;
    };
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("are both"), "{}", stderr(&o));
    let Some(o) = run(&[
        "compare",
        "--from-json",
        &good,
        "--svg",
        svg.to_str().unwrap(),
    ]) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(roxmltree::Document::parse(&std::fs::read_to_string(&svg).unwrap()).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The examples' executables, built by the cargo running this test with
/// this build's profile and features (`cargo test --test cli` builds no
/// example), into the target directory this test runs from.
fn examples() -> Vec<(String, std::path::PathBuf)> {
    let exe = std::env::current_exe().unwrap();
    // <target>/<profile>/deps/cli-<hash>
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| exe.ancestors().nth(3).unwrap().to_path_buf());
    let features: Vec<&str> = [("verbs", cfg!(feature = "verbs"))]
        .into_iter()
        .filter_map(|(f, on)| on.then_some(f))
        .collect();
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args([
        "build",
        "--examples",
        "--message-format=json",
        "--no-default-features",
    ])
    // The library's examples (the workspace root's package).
    .args([
        "--manifest-path",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml"),
        "-p",
        "rdma-direct",
    ])
    .arg("--target-dir")
    .arg(&target)
    .stderr(std::process::Stdio::inherit());
    if !features.is_empty() {
        cmd.args(["--features", &features.join(",")]);
    }
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let o = cmd.output().expect("run cargo build --examples");
    assert!(o.status.success(), "cargo build --examples failed");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["kind"][0] == "example")
        .filter_map(|m| {
            Some((
                m["target"]["name"].as_str()?.to_string(),
                m["executable"].as_str()?.into(),
            ))
        })
        .collect()
}

/// Both examples print their usage, naming every flag they take, on
/// `--help` and `-h` and exit 0 having run nothing; a bad argument exits 2
/// with the usage on stderr (it was 2 for one and 1 for the other).
#[test]
fn examples_print_usage_on_help_and_exit_2_on_a_bad_argument() {
    let built = examples();
    let flags: &[(&str, &[&str])] = &[
        (
            "rc_pingpong",
            &[
                "-d, --ib-dev",
                "-p, --port",
                "-s, --size",
                "-n, --iters",
                "-g, --gid-idx",
                "-e, --events",
                "-h, --help",
                "HOST",
            ],
        ),
        (
            "kv_lookup",
            &[
                "-d, --ib-dev",
                "-p, --port",
                "-n, --iters",
                "-h, --help",
                "HOST",
            ],
        ),
    ];
    for (name, want) in flags {
        let exe = &built
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("cargo built no example {name}: {built:?}"))
            .1;
        for help in ["--help", "-h"] {
            let o = Command::new(exe).arg(help).output().unwrap();
            let out = String::from_utf8_lossy(&o.stdout);
            assert_eq!(o.status.code(), Some(0), "{name} {help}: {}", stderr(&o));
            assert!(
                out.starts_with(&format!("usage: {name} ")),
                "{name} {help}: {out}"
            );
            for flag in *want {
                assert!(
                    out.contains(flag),
                    "{name} {help}: the usage lacks {flag}: {out}"
                );
            }
            assert!(o.stderr.is_empty(), "{name} {help}: {}", stderr(&o));
        }
        for bad in [&["--bogus"][..], &["-n"], &["-n", "0"], &["-p", "x"]] {
            let o = Command::new(exe).args(bad).output().unwrap();
            let e = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{name} {bad:?}: {e}");
            assert!(
                e.starts_with(&format!("{name}: ")) && e.contains(&format!("usage: {name} ")),
                "{name} {bad:?}: {e}"
            );
            assert!(o.stdout.is_empty(), "{name} {bad:?} ran");
        }
    }
}

/// From the break-it review: `--from-json` refuses values a run cannot
/// measure (1e308 used to loop for ever drawing decades of ticks) and an
/// output that is its input however spelled (`./x`, a symbolic link).
#[test]
fn compare_from_json_refuses_absurd_values_and_its_own_input() {
    let Some(_) = bin() else { return };
    let dir = std::env::temp_dir().join(format!("rdma-direct-cli-fromjson-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let row = |t: &str| {
        format!(
            r#"[{{"test":"write_lat","bytes":64,"device":"sim","data_path":"direct","t_typical_us":{t},"t_avg_us":1.0,"p99_us":1.0}}]"#
        )
    };
    let huge = dir.join("huge.json");
    std::fs::write(&huge, row("1e308")).unwrap();
    let svg = dir.join("out.svg");
    let Some(o) = run(&[
        "compare",
        "--from-json",
        huge.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]) else {
        return;
    };
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("t_typical_us"), "{}", stderr(&o));
    assert!(!svg.exists(), "a refused input wrote {}", svg.display());
    let good = dir.join("good.json");
    std::fs::write(&good, row("1.5")).unwrap();
    std::os::unix::fs::symlink(&good, dir.join("link.svg")).unwrap();
    let dotted = format!("{}/./good.json", dir.display());
    let link = dir.join("link.svg");
    for out in [dotted.as_str(), link.to_str().unwrap()] {
        let Some(o) = run(&[
            "compare",
            "--from-json",
            good.to_str().unwrap(),
            "--svg",
            out,
        ]) else {
            return;
        };
        assert_eq!(o.status.code(), Some(2), "--svg {out}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("are both"),
            "--svg {out}: {}",
            stderr(&o)
        );
    }
    assert_eq!(
        std::fs::read_to_string(&good).unwrap(),
        row("1.5"),
        "the input was overwritten"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
