//! Progress display on stderr (indicatif), only when stderr is a terminal:
//! output piped into a file or another program stays clean.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::mpsc;
use std::time::Duration;

/// A bar over `len` steps; hidden when stderr is not a terminal.
pub fn bar(len: u64, prefix: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}") {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_prefix(prefix.to_string());
    pb
}

/// A spinner with `msg` and the elapsed time that appears once a run has
/// taken a second (shorter runs show nothing); gone when dropped. Its
/// thread wakes four times a second while shown.
pub struct Spinner {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Spinner {
    pub fn new(msg: String) -> Spinner {
        if !std::io::stderr().is_terminal() {
            return Spinner {
                stop: None,
                thread: None,
            };
        }
        let (tx, rx) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("progress".into())
            .spawn(move || {
                if rx.recv_timeout(Duration::from_secs(1)) != Err(mpsc::RecvTimeoutError::Timeout) {
                    return; // done (or dropped) within the second
                }
                let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
                if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
                    pb.set_style(style);
                }
                pb.set_message(msg);
                while rx.recv_timeout(Duration::from_millis(250))
                    == Err(mpsc::RecvTimeoutError::Timeout)
                {
                    pb.tick();
                }
                pb.finish_and_clear();
            })
            .ok();
        Spinner {
            stop: Some(tx),
            thread,
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
