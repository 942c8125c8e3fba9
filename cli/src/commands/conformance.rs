//! `rdma-direct conformance`: the suite on one device, or its two-sided
//! cases between two hosts (`--server`, `--peer`).

use crate::args::ConformanceArgs;
use std::process::ExitCode;

pub fn conformance(a: &ConformanceArgs) -> ExitCode {
    use crate::tools::conformance::{cases, run, two_host, Outcome};
    let how = if a.rdma_cm {
        two_host::Connect::RdmaCm
    } else {
        two_host::Connect::Tcp
    };
    if a.rdma_cm && !a.server && a.peer.is_none() {
        eprintln!(
            "rdma-direct: error: -R (rdma_cm) is for two hosts: give --server or --peer HOST"
        );
        return ExitCode::from(2);
    }
    if a.server || a.peer.is_some() {
        // A server binds first: a port in use is refused before anything else.
        let listener = match a.server.then(|| super::listen(a.tcp_port)).transpose() {
            Ok(l) => l,
            Err(e) => {
                eprintln!("rdma-direct: error: {e}");
                return ExitCode::from(2);
            }
        };
        if a.device == rdma_direct::SIM_DEVICE {
            eprintln!(
                "rdma-direct: error: the sim is one process's device: two-host conformance needs a real device (-d rxe0, -d mlx5_0)"
            );
            return ExitCode::from(2);
        }
        if let Err(e) = rdma_direct::Context::open(&a.device) {
            eprintln!("rdma-direct: error: {e}");
            return ExitCode::from(2);
        }
        if let Some(listener) = listener {
            eprintln!(
                "rdma-direct: serving the two-sided cases on {}; waiting for `conformance --peer` on TCP port {}{}",
                a.device,
                a.tcp_port,
                if a.rdma_cm { " (QPs connected through rdma_cm)" } else { "" }
            );
            return match two_host::serve(&a.device, &listener, how) {
                Ok(()) => {
                    out!(
                        "conformance server on {}: served {} two-sided cases",
                        a.device,
                        two_host::two_host_cases().len()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("rdma-direct: error: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        let host = a.peer.as_deref().unwrap_or_default();
        eprintln!(
            "rdma-direct: connecting to {host}:{} for each two-sided case (retrying for up to 60 s)",
            a.tcp_port
        );
        let width = two_host::two_host_cases()
            .iter()
            .map(|c| c.name.len())
            .max()
            .unwrap_or(0);
        let (mut passed, mut failed, mut skipped) = (0, 0, 0);
        for case in two_host::two_host_cases() {
            let name = case.name;
            let line = match two_host::run_remote(&a.device, host, a.tcp_port, how, case) {
                Ok(Outcome::Passed(n)) => {
                    passed += 1;
                    if n.is_empty() {
                        "ok".to_string()
                    } else {
                        format!("ok ({n})")
                    }
                }
                Ok(Outcome::Skipped(w)) => {
                    skipped += 1;
                    format!("skipped: {w}")
                }
                Err(f) => {
                    failed += 1;
                    format!("FAILED: {f}")
                }
            };
            out!("{name:<width$}  {line}");
            if line.starts_with(&format!("FAILED: {}", two_host::NOT_CONNECTED)) {
                eprintln!("rdma-direct: stopping: no connection to the server, the remaining cases are not run");
                break;
            }
        }
        out!(
            "conformance on {} with side B on {host}{}: {passed} passed, {failed} failed, {skipped} skipped",
            a.device,
            if a.rdma_cm { " (QPs connected through rdma_cm)" } else { "" }
        );
        return if failed > 0 {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    let filter = a.filter.as_deref().unwrap_or("");
    if !cases().iter().any(|c| c.name.contains(filter)) {
        eprintln!("rdma-direct: error: no conformance case matches {filter:?} (see --list)");
        return ExitCode::from(2);
    }
    if a.list {
        for c in cases().iter().filter(|c| c.name.contains(filter)) {
            out!("{}", c.name);
        }
        return ExitCode::SUCCESS;
    }
    // The device must open before any case runs: a wrong name is a usage error.
    if let Err(e) = rdma_direct::Context::open(&a.device) {
        eprintln!("rdma-direct: error: {e}");
        return ExitCode::from(2);
    }
    let width = cases().iter().map(|c| c.name.len()).max().unwrap_or(0);
    let s = run(&a.device, filter, |c, r| {
        let line = match r {
            Ok(Outcome::Passed(note)) if note.is_empty() => "ok".to_string(),
            Ok(Outcome::Passed(note)) => format!("ok ({note})"),
            Ok(Outcome::Skipped(why)) => format!("skipped: {why}"),
            Err(f) => format!("FAILED: {f}"),
        };
        out!("{:<width$}  {line}", c.name);
    });
    out!(
        "conformance on {}: {} passed, {} failed, {} skipped",
        a.device,
        s.passed,
        s.failed,
        s.skipped
    );
    if s.failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
