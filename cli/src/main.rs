//! `rdma-direct`: benchmarks and tools. This file holds `main`: the parse,
//! the exit statuses, and the dispatch of each subcommand (the arguments
//! are in `args.rs`, bench, conformance and devices in `commands/`, the
//! engines in `tools/`).

use clap::Parser;
use std::process::ExitCode;

mod tools;

use args::{Cli, Cmd};
use tools::{codec, compare, progress, report, soak};

/// `println!` that ends the process quietly, with the status a C tool killed
/// by SIGPIPE has (141), when stdout is closed (`rdma-direct ... | head -1`).
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout(), $($t)*).is_err() {
            std::process::exit(141);
        }
    }};
}

/// `print!` with the same handling of a closed stdout.
macro_rules! out_part {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        if write!(std::io::stdout(), $($t)*).is_err() {
            std::process::exit(141);
        }
    }};
}

mod args;
mod commands;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        // No subcommand: the help, on stderr, exit 2.
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            e.exit()
        }
        Err(e) => {
            // One line: clap's first line (the error), without usage and tips.
            let msg = e.render().to_string();
            let head: Vec<&str> = msg
                .lines()
                .take_while(|l| !l.trim().is_empty() && !l.starts_with("Usage:"))
                .map(str::trim)
                .collect();
            eprintln!("rdma-direct: {}", head.join(" "));
            return ExitCode::from(2);
        }
    };
    // Before any thread starts (the sim's, the spinner's).
    if matches!(cli.cmd, Cmd::Bench(_) | Cmd::Compare(_)) {
        progress::clear_on_interrupt();
    }
    let tool = match &cli.cmd {
        Cmd::EncodeWqe(a) => Some(codec::encode_wqe(a)),
        Cmd::DecodeCqe(a) => Some(codec::decode_cqe(a)),
        _ => None,
    };
    if let Some(out) = tool {
        return match out {
            Ok(v) => {
                use std::io::Write;
                // A closed pipe (`| head`) is not worth a panic.
                let _ = writeln!(std::io::stdout(), "{v}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("rdma-direct: error: {e}");
                ExitCode::from(2)
            }
        };
    }
    if let Cmd::Conformance(a) = &cli.cmd {
        return commands::conformance(a);
    }
    if let Cmd::Report(a) = &cli.cmd {
        return report::run(a);
    }
    if let Cmd::Soak(a) = &cli.cmd {
        return match soak::run(a) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(1),
            Err(e) => {
                eprintln!("rdma-direct: error: {e}");
                // Bad arguments exit 2, as clap's do.
                ExitCode::from(
                    if matches!(
                        e,
                        rdma_direct::Error::Invalid(_)
                            | rdma_direct::Error::Config { .. }
                            | rdma_direct::Error::Unsupported { .. }
                    ) {
                        2
                    } else {
                        1
                    },
                )
            }
        };
    }
    let r = match cli.cmd {
        Cmd::Devices { json } => commands::devices(json),
        Cmd::Bench(a) => commands::run_bench(a),
        Cmd::Compare(a) => compare::run(&a),
        _ => unreachable!("handled above"),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdma-direct: error: {e}");
            // Bad arguments exit 2 (as clap's do); failures of the run exit 1.
            match e {
                rdma_direct::Error::Invalid(_)
                | rdma_direct::Error::Config { .. }
                | rdma_direct::Error::Unsupported { .. }
                | rdma_direct::Error::TooManySges { .. }
                | rdma_direct::Error::InlineTooLong { .. }
                | rdma_direct::Error::WrongTransport { .. }
                | rdma_direct::Error::NoSuchDevice { .. }
                | rdma_direct::Error::NoVerbs { .. } => ExitCode::from(2),
                _ => ExitCode::FAILURE,
            }
        }
    }
}
