//! `bench -c DC` on the sim (perftest's DC: a DCI on side A posting to a
//! DCT on an SRQ on side B; both ways in the ping-pong tests), perftest's
//! rules (the SRQ implied, 150 bytes inline for writes and sends unless
//! `-I`), and its refusals: `-R`, the sim between two processes (a
//! device off mlx5's direct path, such as rxe: a unit test of
//! `bench::check_dc`). `-c DC` between two hosts runs as unit tests of
//! the binary, both sides threads of one process on one sim
//! (`src/tools/bench/remote/tests.rs`).

#[macro_use]
#[path = "support/bin.rs"]
mod support;
use support::*;

/// The run's banner value after `label` (`Connection type : DC ...`).
fn banner_value<'a>(out: &'a str, label: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.split_once(label).map(|(_, r)| r))
        .and_then(|r| r.trim_start().strip_prefix(':'))
        .map(|r| r.split_whitespace().next().unwrap_or(""))
        .unwrap_or_else(|| panic!("no {label:?} in {out}"))
}

/// The first result row's `#iterations`.
fn iterations(out: &str) -> u64 {
    out.lines()
        .skip_while(|l| !l.contains("#bytes"))
        .nth(1)
        .and_then(|r| r.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn every_dc_test_runs_on_the_sim_with_the_srq_on() {
    for (test, args) in [
        ("write_lat", &["-n", "100"][..]),
        ("send_lat", &["-n", "100"]),
        ("read_lat", &["-n", "100"]),
        ("atomic_lat", &["-n", "100"]),
        ("write_bw", &["-n", "200", "-s", "4096"]),
        ("send_bw", &["-n", "200", "-s", "4096"]),
        ("read_bw", &["-n", "200", "-s", "4096"]),
        ("atomic_bw", &["-n", "200"]),
    ] {
        let mut a = vec!["bench", test, "-c", "DC"];
        a.extend_from_slice(args);
        let Some(o) = run(&a) else { return };
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{a:?}: {}\n{out}", stderr(&o));
        assert_eq!(banner_value(&out, "Connection type"), "DC", "{test}");
        assert_eq!(banner_value(&out, "Using SRQ"), "ON", "{test}");
        assert_eq!(iterations(&out), args[1].parse().unwrap(), "{test}: {out}");
    }
}

#[test]
fn dc_writes_and_sends_default_to_150_bytes_inline_unless_i_says() {
    for (args, want) in [
        (
            &["bench", "write_lat", "-c", "DC", "-n", "50"][..],
            "150[B]",
        ),
        (
            &["bench", "send_bw", "-c", "DC", "-n", "50", "-s", "64"],
            "150[B]",
        ),
        (
            &["bench", "write_lat", "-c", "DC", "-n", "50", "-I", "64"],
            "64[B]",
        ),
        // RC keeps perftest's 220.
        (&["bench", "write_lat", "-n", "50"], "220[B]"),
    ] {
        let Some(o) = run(args) else { return };
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        assert_eq!(banner_value(&out, "Max inline data"), want, "{args:?}");
    }
}

#[test]
fn dc_refusals_exit_2_and_say_why() {
    for (args, want) in [
        (
            &["bench", "write_lat", "-c", "DC", "-R", "--server"][..],
            "-c DC with -R",
        ),
        (&["bench", "write_lat", "-c", "DC", "-R"], "-c DC with -R"),
        // Between two hosts -c DC runs (each side a DCI and a DCT, swapped
        // over the exchange), but not on the sim: one process's device.
        (
            &["bench", "write_bw", "-c", "DC", "127.0.0.1"],
            "the sim is one process's device",
        ),
        (
            &["bench", "send_lat", "-c", "DC", "--server", "-p", "47133"],
            "the sim is one process's device",
        ),
    ] {
        let Some(o) = run(args) else { return };
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(want), "{args:?}: {e:?} lacks {want:?}");
        assert!(o.stdout.is_empty(), "{args:?} printed a result");
    }
}
