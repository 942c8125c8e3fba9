//! How the async waits ([`Completions`](crate::Completions)) learn that a
//! file descriptor became readable, whatever the async runtime: the
//! [`Reactor`] trait, the built-in [`ThreadReactor`] (one background thread
//! in `poll(2)`, no runtime crate), and with the `tokio` feature
// (A link only in a build that has it.)
#![cfg_attr(
    feature = "tokio",
    doc = "[`TokioReactor`] (tokio's own reactor, through `AsyncFd`)."
)]
#![cfg_attr(
    not(feature = "tokio"),
    doc = "`TokioReactor` (tokio's own reactor, through `AsyncFd`)."
)]
//!
//! Only verbs devices (and a ConnectX's completion channels) need one: the
//! sim wakes an async wait's waker itself when it raises the event.

use crate::ib::error::{Error, Result};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// Watches file descriptors for readability for the async waits: the seam
/// between this crate and an async runtime. Implement it to run the waits
/// on another runtime's reactor.
pub trait Reactor: Send + Sync {
    /// Starts watching `fd` for readability. Implementations watch a
    /// duplicate (`fd.try_clone_to_owned()`), so the caller's descriptor
    /// stays its own to close.
    ///
    /// Errors: the OS's (`dup`, registration), or no runtime to register
    /// with.
    fn watch(&self, fd: BorrowedFd<'_>) -> io::Result<Box<dyn ReadyFd>>;

    /// Starts watching `fd` for writability (a TCP connect in progress):
    /// the watch's [`ReadyFd::poll_readable`] is then ready once `fd` is
    /// writable. The async TCP exchange needs it; the default refuses.
    ///
    /// Errors: as [`Self::watch`]; `Unsupported` from a reactor that
    /// watches readability only.
    fn watch_writable(&self, fd: BorrowedFd<'_>) -> io::Result<Box<dyn ReadyFd>> {
        let _ = fd;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this reactor watches readability only",
        ))
    }
}

/// One descriptor a [`Reactor`] watches.
pub trait ReadyFd: Send {
    /// `Ready(Ok(()))` once the descriptor is readable (the caller then
    /// consumes what it holds, or this is ready again at once); else
    /// `Pending`, with `cx`'s waker woken when it becomes readable.
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

/// An async wait's side of a reactor: the reactor (chosen at the first
/// sleep, unless given) and its watch of the wait's fd (made then, kept).
#[derive(Default)]
pub(crate) struct FdSleep {
    reactor: Option<Arc<dyn Reactor>>,
    watch: Option<Box<dyn ReadyFd>>,
}

impl FdSleep {
    /// Whether the watch is made (the fd it watches is its own duplicate).
    pub(crate) fn watching(&self) -> bool {
        self.watch.is_some()
    }

    /// Sleeps through `reactor` from now on.
    pub(crate) fn set_reactor(&mut self, reactor: Arc<dyn Reactor>) {
        self.reactor = Some(reactor);
        self.watch = None;
    }

    /// Ready once the wait's fd is readable; `fd` gives it (a duplicate,
    /// the watch's own) at the first call.
    ///
    /// Errors: `fd`'s; the reactor's ([`Error::Reactor`]).
    pub(crate) fn poll_readable(
        &mut self,
        cx: &mut Context<'_>,
        fd: impl FnOnce() -> Result<OwnedFd>,
    ) -> Poll<Result<()>> {
        self.poll_ready(cx, fd, false)
    }

    /// [`Self::poll_readable`] for writability ([`Reactor::watch_writable`]).
    pub(crate) fn poll_writable(
        &mut self,
        cx: &mut Context<'_>,
        fd: impl FnOnce() -> Result<OwnedFd>,
    ) -> Poll<Result<()>> {
        self.poll_ready(cx, fd, true)
    }

    fn poll_ready(
        &mut self,
        cx: &mut Context<'_>,
        fd: impl FnOnce() -> Result<OwnedFd>,
        write: bool,
    ) -> Poll<Result<()>> {
        if self.watch.is_none() {
            let fd = match fd() {
                Ok(fd) => fd,
                Err(e) => return Poll::Ready(Err(e)),
            };
            let r = self.reactor.get_or_insert_with(default_reactor).clone();
            let w = if write {
                r.watch_writable(fd.as_fd())
            } else {
                r.watch(fd.as_fd())
            };
            match w {
                Ok(w) => self.watch = Some(w),
                Err(e) => return Poll::Ready(Err(Error::Reactor(e.to_string()))),
            }
        }
        match self.watch.as_mut().map(|w| w.poll_readable(cx)) {
            Some(Poll::Ready(Ok(()))) => Poll::Ready(Ok(())),
            Some(Poll::Ready(Err(e))) => Poll::Ready(Err(Error::Reactor(e.to_string()))),
            _ => Poll::Pending,
        }
    }
}

/// `d` from now, or a year from now where that does not fit an `Instant`
/// (`Duration::MAX`: no limit).
pub(crate) fn deadline_after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

/// A duplicate of `fd` for a reactor's watch; `what` names the fd in the
/// error.
///
/// Errors: the OS's `dup` ([`Error::Reactor`]).
pub(crate) fn dup_fd(fd: BorrowedFd<'_>, what: &str) -> Result<OwnedFd> {
    fd.try_clone_to_owned()
        .map_err(|e| Error::Reactor(format!("dup of the {what} fd: {e}")))
}

/// Runs `poll` on this thread, parked between polls (its waker unparks
/// it), until it is ready; `None` once `deadline` passed first (`None`:
/// no limit). The executor of the crate's blocking calls over futures.
pub(crate) fn park_on<T>(
    mut poll: impl FnMut(&mut Context<'_>) -> Poll<T>,
    deadline: Option<Instant>,
) -> Option<T> {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = poll(&mut cx) {
            return Some(v);
        }
        match deadline {
            None => std::thread::park(),
            Some(d) => {
                let left = d.checked_duration_since(Instant::now())?;
                std::thread::park_timeout(left);
            }
        }
    }
}

/// The reactor an async wait uses when given none:
#[cfg_attr(feature = "tokio", doc = "[`TokioReactor`] when")]
#[cfg_attr(not(feature = "tokio"), doc = "`TokioReactor` when")]
/// the `tokio` feature is on and the caller runs inside a tokio runtime,
/// else the process's [`ThreadReactor`].
pub fn default_reactor() -> Arc<dyn Reactor> {
    #[cfg(feature = "tokio")]
    if tokio::runtime::Handle::try_current().is_ok() {
        return Arc::new(TokioReactor);
    }
    ThreadReactor::global()
}

/// A reactor of its own: one background thread (`rdma-direct-reactor`,
/// started at the first watch) sleeping in `poll(2)` on every descriptor
/// whose wait is pending, and waking that wait's waker when it becomes
/// readable. Works under any executor (a waker is all it needs); costs a
/// thread and, per sleep, one `eventfd` write to tell the thread.
pub struct ThreadReactor {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Written to interrupt the thread's `poll(2)` (a new or dropped watch).
    wake: nix::sys::eventfd::EventFd,
}

#[derive(Default)]
struct State {
    entries: HashMap<u64, Entry>,
    next: u64,
    started: bool,
}

struct Entry {
    /// The watched duplicate (an `Arc`: the thread keeps it open while it
    /// polls, even if the watch is dropped meanwhile).
    fd: Arc<OwnedFd>,
    /// Set while a wait sleeps on it; taken when woken.
    waker: Option<Waker>,
    /// Found readable since the wait last looked.
    ready: bool,
    /// What it is watched for: `POLLIN`, or `POLLOUT` (a writable watch).
    flags: nix::poll::PollFlags,
}

impl ThreadReactor {
    /// The process's reactor (its thread starts at the first watch).
    pub fn global() -> Arc<dyn Reactor> {
        static GLOBAL: OnceLock<Arc<ThreadReactor>> = OnceLock::new();
        GLOBAL
            .get_or_init(|| {
                Arc::new(ThreadReactor::new().expect("an eventfd for the reactor thread"))
            })
            .clone()
    }

    /// A reactor with a thread of its own (started at its first watch;
    /// it runs for the rest of the process).
    ///
    /// Errors: the `eventfd` it interrupts its thread with.
    pub fn new() -> io::Result<Self> {
        let wake = nix::sys::eventfd::EventFd::from_value_and_flags(
            0,
            nix::sys::eventfd::EfdFlags::EFD_NONBLOCK | nix::sys::eventfd::EfdFlags::EFD_CLOEXEC,
        )
        .map_err(io::Error::from)?;
        Ok(ThreadReactor {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                wake,
            }),
        })
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn interrupt(&self) {
        // A full counter (2^64 - 2 writes unread) cannot happen: the thread
        // reads it at each wakeup.
        let _ = self.wake.write(1);
    }

    /// The thread: poll every descriptor a wait sleeps on, wake the waits
    /// whose descriptors are readable, again.
    fn run(self: Arc<Self>) {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        loop {
            let watched: Vec<(u64, Arc<OwnedFd>, PollFlags)> = self
                .lock()
                .entries
                .iter()
                .filter(|(_, e)| e.waker.is_some() && !e.ready)
                .map(|(id, e)| (*id, e.fd.clone(), e.flags))
                .collect();
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(watched.len() + 1);
            fds.push(PollFd::new(self.wake.as_fd(), PollFlags::POLLIN));
            fds.extend(
                watched
                    .iter()
                    .map(|(_, fd, flags)| PollFd::new(fd.as_fd(), *flags)),
            );
            if poll(&mut fds, PollTimeout::NONE).is_err() {
                // EINTR (or EAGAIN): look again.
                continue;
            }
            let hit = |f: &PollFd<'_>| f.revents().is_some_and(|r| !r.is_empty());
            let readable: Vec<u64> = fds[1..]
                .iter()
                .zip(&watched)
                .filter(|(f, _)| hit(f))
                .map(|(_, (id, _, _))| *id)
                .collect();
            if hit(&fds[0]) {
                let _ = self.wake.read();
            }
            let mut woken = Vec::new();
            {
                let mut st = self.lock();
                for id in readable {
                    if let Some(e) = st.entries.get_mut(&id) {
                        e.ready = true;
                        woken.extend(e.waker.take());
                    }
                }
            }
            // Woken outside the lock: a waker may run the wait at once.
            woken.into_iter().for_each(Waker::wake);
        }
    }
}

impl Reactor for ThreadReactor {
    fn watch(&self, fd: BorrowedFd<'_>) -> io::Result<Box<dyn ReadyFd>> {
        self.watch_for(fd, nix::poll::PollFlags::POLLIN)
    }

    fn watch_writable(&self, fd: BorrowedFd<'_>) -> io::Result<Box<dyn ReadyFd>> {
        self.watch_for(fd, nix::poll::PollFlags::POLLOUT)
    }
}

impl ThreadReactor {
    fn watch_for(
        &self,
        fd: BorrowedFd<'_>,
        flags: nix::poll::PollFlags,
    ) -> io::Result<Box<dyn ReadyFd>> {
        let fd = Arc::new(fd.try_clone_to_owned()?);
        let id = {
            let mut st = self.shared.lock();
            if !st.started {
                let shared = self.shared.clone();
                std::thread::Builder::new()
                    .name("rdma-direct-reactor".into())
                    .spawn(move || shared.run())?;
                st.started = true;
            }
            let id = st.next;
            st.next += 1;
            st.entries.insert(
                id,
                Entry {
                    fd,
                    waker: None,
                    ready: false,
                    flags,
                },
            );
            id
        };
        Ok(Box::new(ThreadWatch {
            shared: self.shared.clone(),
            id,
        }))
    }
}

/// A descriptor the [`ThreadReactor`] watches.
struct ThreadWatch {
    shared: Arc<Shared>,
    id: u64,
}

impl ReadyFd for ThreadWatch {
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        {
            let mut st = self.shared.lock();
            let Some(e) = st.entries.get_mut(&self.id) else {
                return Poll::Ready(Err(io::Error::other("the reactor lost a watch")));
            };
            if e.ready {
                e.ready = false;
                return Poll::Ready(Ok(()));
            }
            match &e.waker {
                Some(w) if w.will_wake(cx.waker()) => return Poll::Pending,
                _ => e.waker = Some(cx.waker().clone()),
            }
        }
        self.shared.interrupt();
        Poll::Pending
    }
}

impl Drop for ThreadWatch {
    fn drop(&mut self) {
        self.shared.lock().entries.remove(&self.id);
        self.shared.interrupt();
    }
}

/// Tokio's reactor (feature `tokio`): each watched descriptor (a
/// duplicate) is registered as an `AsyncFd` with the runtime the caller
/// runs in.
#[cfg(feature = "tokio")]
pub struct TokioReactor;

#[cfg(feature = "tokio")]
impl Reactor for TokioReactor {
    fn watch(&self, fd: BorrowedFd<'_>) -> io::Result<Box<dyn ReadyFd>> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(io::Error::other(
                "TokioReactor::watch outside a tokio runtime (use ThreadReactor there)",
            ));
        }
        let fd = fd.try_clone_to_owned()?;
        Ok(Box::new(TokioWatch(
            crate::backend::tokio_readable(fd, false)?,
            false,
        )))
    }

    fn watch_writable(&self, fd: BorrowedFd<'_>) -> io::Result<Box<dyn ReadyFd>> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(io::Error::other(
                "TokioReactor::watch_writable outside a tokio runtime (use ThreadReactor there)",
            ));
        }
        let fd = fd.try_clone_to_owned()?;
        Ok(Box::new(TokioWatch(
            crate::backend::tokio_readable(fd, true)?,
            true,
        )))
    }
}

/// A tokio watch, and whether it is for writing.
#[cfg(feature = "tokio")]
struct TokioWatch(tokio::io::unix::AsyncFd<OwnedFd>, bool);

#[cfg(feature = "tokio")]
impl ReadyFd for TokioWatch {
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let ready = if self.1 {
            self.0.poll_write_ready(cx)
        } else {
            self.0.poll_read_ready(cx)
        };
        match ready {
            Poll::Ready(Ok(mut guard)) => {
                // Cleared before the caller consumes what the descriptor
                // holds: what arrives after the clear is a new edge.
                guard.clear_ready();
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}
