//! How connection setup waits for a file descriptor (the rdma_cm event
//! channel's, a TCP socket's): [`Blocking`] sleeps in `poll(2)`, as the
//! blocking calls always did; [`Awaited`] sleeps through a
//! [`Reactor`](crate::Reactor), with a `timerfd` (watched by the same
//! reactor) for its deadline and pauses, so a connect or accept is a future
//! on any runtime and still honours its timeout. Each flow is written once,
//! as an `async fn` over a [`FdWait`]; the blocking calls run it with
//! [`Blocking`], which never pends, through [`block_on`].

use crate::ib::error::{Error, Result};
use crate::reactor::deadline_after;
use crate::reactor::{dup_fd, park_on, FdSleep};
use std::future::Future;
use std::os::fd::{AsFd, BorrowedFd};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Waits for a descriptor to become readable or writable, or for a while
/// to pass.
pub(crate) trait FdWait: Send {
    /// `true` once `fd` is readable (`write`: writable), `false` once
    /// `deadline` passed first. `serial` names the descriptor (a new one
    /// gets a new serial: a watch is never carried over to a reused fd
    /// number); `what` names it in errors.
    fn ready<'a>(
        &'a mut self,
        serial: u64,
        fd: BorrowedFd<'a>,
        write: bool,
        deadline: Instant,
        what: &'a str,
    ) -> impl Future<Output = Result<bool>> + Send + 'a;

    /// Lets `d` pass.
    fn pause(&mut self, d: Duration) -> impl Future<Output = Result<()>> + Send + '_;
}

/// A serial for a descriptor [`FdWait::ready`] is asked about.
pub(crate) fn next_serial() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Blocks the calling thread: `poll(2)` up to the deadline, `sleep` for a
/// pause. Its futures are ready at their first poll.
pub(crate) struct Blocking;

impl FdWait for Blocking {
    fn ready<'a>(
        &'a mut self,
        _serial: u64,
        fd: BorrowedFd<'a>,
        write: bool,
        deadline: Instant,
        what: &'a str,
    ) -> impl Future<Output = Result<bool>> + Send + 'a {
        let left = deadline.saturating_duration_since(Instant::now());
        std::future::ready(crate::backend::wait_ready(fd, write, left, what))
    }

    fn pause(&mut self, d: Duration) -> impl Future<Output = Result<()>> + Send + '_ {
        std::thread::sleep(d);
        std::future::ready(Ok(()))
    }
}

/// Sleeps through a reactor ([`default_reactor`](crate::reactor::default_reactor)
/// at the first sleep): the descriptor's watch, and a `timerfd` set to the
/// deadline (or the pause's end) watched beside it.
#[derive(Default)]
pub(crate) struct Awaited {
    /// The descriptor watched now: its serial, whether for writing, and
    /// the watch.
    fd: Option<(u64, bool, FdSleep)>,
    timer: Option<(nix::sys::timerfd::TimerFd, FdSleep)>,
}

impl Awaited {
    /// Sets the timer to fire at `deadline` (made at the first use).
    fn arm(&mut self, deadline: Instant) -> Result<()> {
        use nix::sys::time::TimeSpec;
        use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
        let os = |e: nix::Error| Error::Reactor(format!("timerfd: {e}"));
        if self.timer.is_none() {
            let t = TimerFd::new(
                ClockId::CLOCK_MONOTONIC,
                TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
            )
            .map_err(os)?;
            self.timer = Some((t, FdSleep::default()));
        }
        let (t, _) = self.timer.as_ref().expect("made above");
        // A zero expiration disarms a timerfd: at least 1 ns.
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_nanos(1));
        t.set(
            Expiration::OneShot(TimeSpec::from_duration(left)),
            TimerSetTimeFlags::empty(),
        )
        .map_err(os)
    }

    /// `Ready` once the timer fired (its count read, so that it is not
    /// readable again until set again).
    fn poll_timer(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let Some((t, sleep)) = self.timer.as_mut() else {
            return Poll::Ready(Err(Error::Reactor("the timer was not set".into())));
        };
        let fd = t.as_fd();
        match sleep.poll_readable(cx, || dup_fd(fd, "timerfd")) {
            Poll::Ready(Ok(())) => {
                // Non-blocking: EAGAIN when it has not fired (a wakeup from
                // an earlier setting); the caller looks at the clock.
                let _ = nix::unistd::read(t.as_fd(), &mut [0u8; 8]);
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl Awaited {
    /// `Ready` once the timer, set to `deadline`, fired at or after it (one
    /// that fired early, from an earlier setting, is set again).
    fn poll_deadline(&mut self, cx: &mut Context<'_>, deadline: Instant) -> Poll<Result<()>> {
        loop {
            match self.poll_timer(cx) {
                Poll::Ready(Ok(())) if Instant::now() >= deadline => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => {
                    if let Err(e) = self.arm(deadline) {
                        return Poll::Ready(Err(e));
                    }
                }
                other => return other,
            }
        }
    }
}

impl FdWait for Awaited {
    async fn ready<'a>(
        &'a mut self,
        serial: u64,
        fd: BorrowedFd<'a>,
        write: bool,
        deadline: Instant,
        what: &'a str,
    ) -> Result<bool> {
        if !matches!(&self.fd, Some((s, w, _)) if *s == serial && *w == write) {
            self.fd = Some((serial, write, FdSleep::default()));
        }
        self.arm(deadline)?;
        std::future::poll_fn(|cx| {
            let (_, _, sleep) = self.fd.as_mut().expect("set above");
            let r = if write {
                sleep.poll_writable(cx, || dup_fd(fd, what))
            } else {
                sleep.poll_readable(cx, || dup_fd(fd, what))
            };
            match r {
                Poll::Ready(r) => Poll::Ready(r.map(|()| true)),
                Poll::Pending => self.poll_deadline(cx, deadline).map(|r| r.map(|()| false)),
            }
        })
        .await
    }

    async fn pause(&mut self, d: Duration) -> Result<()> {
        let end = deadline_after(d);
        self.arm(end)?;
        std::future::poll_fn(|cx| self.poll_deadline(cx, end)).await
    }
}

/// Runs `f` on this thread until it resolves, parking while it pends (with
/// [`Blocking`] it never does).
pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    loop {
        if let Some(v) = park_on(|cx| f.as_mut().poll(cx), None) {
            return v;
        }
    }
}
