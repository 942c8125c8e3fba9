//! Runs the conformance suite (`src/tools/conformance`, compiled into this
//! test crate: the library does not export it) as tests: one test per case,
//! named as the case (`rdma-direct conformance --list` lists the same
//! names), each on every device present: always the sim (direct path), plus
//! each ibverbs device (verbs path), e.g. rxe0 inside the soft-RoCE guest
//! (`scripts/rxe-vm`). The tests are made from the suite's case list with
//! `libtest-mimic`, so no case can be left out; `--list`, filters and
//! `--test-threads` work as with libtest.
//!
//! `RDMA_DIRECT_REQUIRE_DEVICE=name[,name...]` makes a missing device a failure
//! instead of a loud skip (CI sets it in the guest).
//! `RDMA_DIRECT_CONFORMANCE_DEVICES=name[,name...]` runs the cases on those
//! devices only (each must be present), e.g. rxe0 alone in the guest, where
//! the sim's run under emulation would repeat step 1's on the host.

// The two engines of `src/tools` the suite needs, compiled into this crate.
#[allow(dead_code, unused_imports)]
#[path = "../src/tools"]
mod tools {
    pub mod bench;
    pub mod conformance;
}

use libtest_mimic::{Arguments, Failed, Trial};
use tools::conformance::{cases, Case, Outcome};

/// Writes to the real stderr, past libtest's capture, so skips and
/// per-device results show in every run, not only failing ones.
fn loud(msg: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// The devices under test; says (once) what it skips and why.
fn devices() -> Vec<String> {
    let all = rdma_direct::list_devices().expect("list devices");
    let names: Vec<String> = all.iter().map(|d| d.name.clone()).collect();
    if let Ok(req) = std::env::var("RDMA_DIRECT_REQUIRE_DEVICE") {
        for r in req.split(',').filter(|s| !s.is_empty()) {
            assert!(
                names.iter().any(|n| n == r),
                "RDMA_DIRECT_REQUIRE_DEVICE names {r}, which is not present: {names:?}"
            );
        }
    }
    let names = match std::env::var("RDMA_DIRECT_CONFORMANCE_DEVICES") {
        Ok(only) => {
            let only: Vec<String> = only
                .split(',')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            for o in &only {
                assert!(
                    names.contains(o),
                    "RDMA_DIRECT_CONFORMANCE_DEVICES names {o}, which is not present: {names:?}"
                );
            }
            only
        }
        Err(_) => names,
    };
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("RDMA_DIRECT_CONFORMANCE_DEVICES").is_some() {
            loud(format_args!(
                "conformance: only the devices RDMA_DIRECT_CONFORMANCE_DEVICES names: {names:?}"
            ));
        } else if names.len() == 1 {
            loud(format_args!(
                "conformance: SKIPPING the verbs path: no ibverbs device on this host (only the sim). \
                 scripts/test runs this suite again on rxe0 in a soft-RoCE guest."
            ));
        } else {
            loud(format_args!("conformance: devices under test: {names:?}"));
        }
    });
    names
}

/// Runs case `name` on every device; a failure on any device fails the test,
/// a skip is said out loud.
fn run_everywhere(case: &Case) -> Result<(), Failed> {
    let name = case.name;
    let mut failures = Vec::new();
    for dev in devices() {
        match case.run(&dev) {
            Ok(Outcome::Passed(note)) if note.is_empty() => {}
            Ok(Outcome::Passed(note)) => loud(format_args!("conformance: {dev}: {name}: {note}")),
            Ok(Outcome::Skipped(why)) => {
                loud(format_args!("conformance: {dev}: {name}: SKIPPED: {why}"))
            }
            Err(f) => failures.push(format!("{dev}: {f}")),
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("{name} failed:\n{}", failures.join("\n")).into())
    }
}

fn main() {
    let args = Arguments::from_args();
    if args.test_threads == Some(0) {
        // As libtest says it (libtest-mimic would wait for ever on no thread).
        eprintln!("error: argument for --test-threads must not be 0");
        std::process::exit(101);
    }
    let trials = cases()
        .iter()
        .map(|c| Trial::test(c.name, move || run_everywhere(c)))
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
