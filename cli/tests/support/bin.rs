//! What the CLI's test files share: the `rdma-direct` binary, run with
//! arguments, its stderr, and a `loud!` line past libtest's capture.

/// `eprintln!` past libtest's capture, so a skip's `SKIPPED:` marker shows
/// (and is counted by `scripts/summarise`) even when the test passes.
#[allow(unused_macros)]
macro_rules! loud {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

pub use std::process::{Command, Output};

/// The binary, or `None` after a `SKIPPED:` line on stderr (the marker
/// `scripts/test` and `.ci/run` count as a skip) naming the calling test.
pub fn bin() -> Option<&'static str> {
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

/// The binary run with `args`, its output (`None`: not built, as [`bin`]).
pub fn run(args: &[&str]) -> Option<Output> {
    let out = Command::new(bin()?)
        .args(args)
        .output()
        .expect("run rdma-direct");
    Some(out)
}

/// Its stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
