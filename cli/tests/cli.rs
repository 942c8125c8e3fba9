//! The CLI as a user meets it: bad arguments exit 2 with a message naming
//! the problem (and run nothing); `bench` runs its flags on the sim;
//! two-host setups refuse what cannot work; the examples' usage
//! (`compare`'s are in `compare.rs`).

#[macro_use]
#[path = "support/bin.rs"]
mod support;
use support::*;

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

/// `-A MASKED_CMP_AND_SWAP` and `-A MASKED_FETCH_AND_ADD` (ours: the
/// direct path's extended atomics) run atomic_lat and atomic_bw on the
/// sim, under their own titles.
#[test]
fn masked_atomics_bench_on_the_sim() {
    for (test, kind, title) in [
        (
            "atomic_lat",
            "MASKED_CMP_AND_SWAP",
            "Atomic MASKED_CMP_AND_SWAP Latency Test",
        ),
        (
            "atomic_lat",
            "MASKED_FETCH_AND_ADD",
            "Atomic MASKED_FETCH_AND_ADD Latency Test",
        ),
        (
            "atomic_bw",
            "MASKED_CMP_AND_SWAP",
            "Atomic MASKED_CMP_AND_SWAP BW Test",
        ),
        (
            "atomic_bw",
            "MASKED_FETCH_AND_ADD",
            "Atomic MASKED_FETCH_AND_ADD BW Test",
        ),
    ] {
        let Some(o) = run(&["bench", test, "-A", kind, "-n", "100"]) else {
            return;
        };
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && out.contains(title) && out.contains("      8         "),
            "{test} -A {kind}: {out}{}",
            stderr(&o)
        );
    }
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

/// The examples print their usage, naming every flag they take, on
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
        (
            "dc_rpc",
            &[
                "-d, --ib-dev",
                "-c, --clients",
                "-w, --dcis",
                "-n, --rpcs",
                "-h, --help",
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

/// `dc_rpc` on the sim: 64 clients, each side's pool of 4 DCIs (so the
/// server's pool runs out of free DCIs and retries), every reply checked;
/// exit 0 and the summary line. A run that saw a wrong reply exits 1.
#[test]
fn dc_rpc_runs_on_the_sim_and_checks_every_reply() {
    let built = examples();
    let exe = &built
        .iter()
        .find(|(n, _)| n == "dc_rpc")
        .unwrap_or_else(|| panic!("cargo built no example dc_rpc: {built:?}"))
        .1;
    let o = Command::new(exe)
        .args([
            "-d",
            "sim",
            "--clients",
            "64",
            "--dcis",
            "4",
            "--rpcs",
            "640",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    assert!(
        out.contains(
            "dc_rpc: 640 RPCs from 64 clients, 4 DCIs per side: 640 replies checked, 0 mismatches"
        ),
        "{out}"
    );
    assert!(out.contains(" of 4 DCIs bound"), "{out}");
}

/// `encode-wqe` with `--av` and `--dc` or `--ud` prints the datagram
/// segment's fields; the wrong combinations exit 2 with one line.
#[test]
fn encode_wqe_shows_ud_and_dc_datagram_segments() {
    let av = "00".repeat(48);
    let base = ["encode-wqe", "--qpn", "1", "--pi", "0", "--sq-wqebbs", "8"];
    let dc = [
        "--op",
        "read",
        "--raddr",
        "0x40",
        "--rkey",
        "2",
        "--sge",
        "0:8:1",
        "--av",
        &av,
        "--dc",
        "0xabc:0xfeedface",
    ];
    let Some(o) = run(&[&base[..], &dc[..]].concat()) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ds"], 6);
    let d = &v["datagram"];
    assert_eq!(
        (d["transport"].as_str(), d["dctn"].as_u64()),
        (Some("dc"), Some(0xabc))
    );
    assert_eq!(d["dc_key"], "0x00000000feedface");
    assert_eq!(d["dqp_dct"], "80000abc");
    let ud = [
        "--op", "send", "--sge", "0:8:1", "--av", &av, "--ud", "7:0x11",
    ];
    let Some(o) = run(&[&base[..], &ud[..]].concat()) else {
        return;
    };
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (
            v["datagram"]["remote_qpn"].as_u64(),
            v["datagram"]["qkey"].as_u64()
        ),
        (Some(7), Some(0x11))
    );
    let bad: &[(&[&str], &str)] = &[
        (
            &[
                "--op", "send", "--sge", "0:8:1", "--av", &av, "--ud", "1:1", "--dc", "1:1",
            ],
            "not both",
        ),
        (
            &["--op", "send", "--sge", "0:8:1", "--dc", "1:1"],
            "--dc needs --av",
        ),
        (
            &["--op", "send", "--sge", "0:8:1", "--av", &av],
            "--av is for --ud or --dc",
        ),
        (
            &[
                "--op", "read", "--raddr", "0", "--rkey", "1", "--sge", "0:8:1", "--av", &av,
                "--ud", "1:1",
            ],
            "--ud is for send",
        ),
        (
            &[
                "--op", "send", "--sge", "0:8:1", "--av", "0102", "--dc", "1:1",
            ],
            "4 hex digits",
        ),
    ];
    for (args, want) in bad {
        let Some(o) = run(&[&base[..], args].concat()) else {
            return;
        };
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert_eq!(e.trim_end().lines().count(), 1, "{args:?}: {e:?}");
        assert!(e.contains(want), "{args:?}: {e:?} lacks {want:?}");
        assert!(o.stdout.is_empty());
    }
}
