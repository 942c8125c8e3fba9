//! Progress display on stderr (indicatif), only when stderr is a terminal:
//! output piped into a file or another program stays clean. Ctrl-C clears
//! what is on screen before the process ends ([`clear_on_interrupt`]).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, WeakProgressBar};
use std::io::IsTerminal;
use std::sync::{mpsc, Mutex};
use std::time::Duration;

/// The bars and spinners made here, for [`clear_on_interrupt`] to clear.
static LIVE: Mutex<Vec<WeakProgressBar>> = Mutex::new(Vec::new());

fn register(pb: &ProgressBar) {
    if let Ok(mut live) = LIVE.lock() {
        live.retain(|w| w.upgrade().is_some());
        live.push(pb.downgrade());
    }
}

/// When stderr is a terminal: SIGINT (Ctrl-C) clears every bar and spinner
/// on screen, then exits with status 130 (what a shell reports for SIGINT),
/// instead of leaving a half-drawn bar. SIGINT is blocked in every
/// thread and taken by one thread of its own (`sigwait`), so the clearing
/// runs outside a signal handler; call it before any other thread starts.
/// Does nothing when stderr is not a terminal or the mask cannot be set.
pub fn clear_on_interrupt() {
    use nix::sys::signal::{SigSet, Signal};
    if !std::io::stderr().is_terminal() {
        return;
    }
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    if set.thread_block().is_err() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("sigint".into())
        .spawn(move || {
            while set.wait() != Ok(Signal::SIGINT) {}
            let mut shown = false;
            if let Ok(live) = LIVE.lock() {
                for pb in live.iter().filter_map(WeakProgressBar::upgrade) {
                    shown |= !pb.is_hidden() && !pb.is_finished();
                    pb.set_draw_target(ProgressDrawTarget::hidden());
                }
            }
            if shown {
                // indicatif fills a bar's line to the terminal's width and
                // leaves the cursor at its end, so the `^C` the terminal
                // echoed went to the next line: erase that line, then the
                // bar's (without the echo, the cursor is still on the bar's).
                use std::io::Write;
                let erase: &[u8] = if echoes_ctl() {
                    b"\r\x1b[2K\x1b[1A\x1b[2K"
                } else {
                    b"\r\x1b[2K"
                };
                let mut e = std::io::stderr();
                let _ = e.write_all(erase);
                let _ = e.flush();
            }
            // The status a shell gives a process ended by SIGINT (128 + 2).
            std::process::exit(130);
        });
    if spawned.is_err() {
        let _ = set.thread_unblock();
    }
}

/// Whether the terminal on stderr echoes Ctrl-C as `^C` (ECHO and ECHOCTL set).
fn echoes_ctl() -> bool {
    use nix::sys::termios::{tcgetattr, LocalFlags};
    tcgetattr(std::io::stderr()).is_ok_and(|t| {
        t.local_flags
            .contains(LocalFlags::ECHO | LocalFlags::ECHOCTL)
    })
}

/// A bar over `len` steps; hidden when stderr is not a terminal.
pub fn bar(len: u64, prefix: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    register(&pb);
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
                register(&pb);
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
