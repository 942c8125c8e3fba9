//! Async waits for completions, on any runtime: [`Completions`], a
//! future per batch ([`Completions::next_batch`]; named so that it does not
//! hide `StreamExt::next`) and a [`Stream`] of single
//! completions, over a QP's own CQ ([`Qp::completions`]) or a
//! [`SharedCq`] ([`SharedCq::completions`]).
//!
//! The wait polls; when the CQ is empty it polls `spins` more times
//! (adaptive), arms the CQ, polls once more (a completion that came before
//! the arm raises no event), and only then sleeps: on the sim the device
//! wakes the waker itself when it raises the event; on verbs (and a
//! ConnectX's channel) a [`Reactor`] watches the completion channel's
//! non-blocking file descriptor. Woken, it consumes and acknowledges every
//! event waiting (`ibv_get_cq_event`, `ibv_ack_cq_events`), and polls
//! again. So no wakeup is lost: poll, arm, poll, sleep.
//!
//! Cancellation: dropping a wait (the future, the stream, or the
//! `Completions`) loses nothing. A completion stays in the CQ until a poll
//! that returns it takes it: the future polls into the caller's buffer
//! only when it resolves, and the stream polls one completion at a time
//! and hands it out at once. The CQ may stay armed: its event is consumed
//! by the next wait.

use crate::backend::EventWake;
use crate::cq::wait::CqOps;
use crate::cq::SharedCq;
use crate::ib::completion::Completion;
use crate::ib::config::CompletionMode;
use crate::ib::error::{Error, Result};
use crate::qp::Qp;
use crate::reactor::{dup_fd, FdSleep, Reactor};
use futures_core::Stream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Async waits for completions of one CQ (see the module's docs, or
/// [`Qp::completions`]). Borrows the CQ's owner: the task that owns the
/// [`Qp`] or [`SharedCq`] waits; other tasks post through the QP's halves
/// ([`Qp::split`]).
pub struct Completions<'c> {
    cq: Target<'c>,
    mode: CompletionMode,
    /// The CQ is armed and its event not yet consumed.
    armed: bool,
    /// The reactor and the channel fd's watch, made at the first sleep on
    /// a CQ whose device does not wake wakers itself.
    sleep: FdSleep,
}

enum Target<'c> {
    Qp(&'c mut Qp),
    Shared(&'c mut SharedCq),
}

impl Target<'_> {
    fn ops(&mut self) -> &mut dyn CqOps {
        match self {
            Target::Qp(q) => &mut **q,
            Target::Shared(c) => &mut **c,
        }
    }
}

impl Qp {
    /// Async waits for the completions of the QP's own CQ, in `mode`:
    /// [`CompletionMode::Events`] sleeps as soon as the CQ is empty,
    /// [`CompletionMode::Adaptive`] polls `spins` more times first,
    /// [`CompletionMode::Busy`] never sleeps (it yields to the executor
    /// and is polled again).
    ///
    /// Errors (from the first wait): [`Error::SharedCq`] for a QP of a
    /// [`SharedCq`] (wait there); [`Error::Reactor`].
    pub fn completions(&mut self, mode: CompletionMode) -> Completions<'_> {
        Completions::new(Target::Qp(self), mode)
    }
}

impl SharedCq {
    /// Async waits for the completions of every QP of this CQ, as
    /// [`Qp::completions`].
    pub fn completions(&mut self, mode: CompletionMode) -> Completions<'_> {
        Completions::new(Target::Shared(self), mode)
    }
}

impl<'c> Completions<'c> {
    fn new(cq: Target<'c>, mode: CompletionMode) -> Self {
        Completions {
            cq,
            mode,
            armed: false,
            sleep: FdSleep::default(),
        }
    }

    /// Sleeps through `reactor` rather than [`default_reactor`](crate::reactor::default_reactor) (tokio's
    /// inside a tokio runtime with the `tokio` feature, else the built-in
    /// [`ThreadReactor`](crate::ThreadReactor)). Only verbs devices use
    /// one: the sim wakes the waker itself.
    pub fn with_reactor(mut self, reactor: Arc<dyn Reactor>) -> Self {
        self.sleep.set_reactor(reactor);
        self
    }

    /// Waits for completions: resolves as soon as at least one is in
    /// `out`, with how many (at most `out.len()`). Cancel-safe: dropped
    /// before it resolves, it took none.
    ///
    /// Errors: `out` is empty ([`Error::Config`]); the poll's, arm's or
    /// event's; [`Error::Reactor`].
    pub async fn next_batch(&mut self, out: &mut [Completion]) -> Result<usize> {
        std::future::poll_fn(|cx| self.poll_completions(cx, out)).await
    }

    /// [`Self::next_batch`] as a poll function, for a hand-written future.
    pub fn poll_completions(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut [Completion],
    ) -> Poll<Result<usize>> {
        if out.is_empty() {
            return Poll::Ready(Err(Error::Config {
                field: "room for completions (out.len())",
                value: 0,
                min: 1,
                max: usize::MAX as u64,
            }));
        }
        self.poll_cq(cx, out)
    }

    /// Poll, spin, arm, poll, sleep (the module's docs).
    fn poll_cq(&mut self, cx: &mut Context<'_>, out: &mut [Completion]) -> Poll<Result<usize>> {
        let spins = match self.mode {
            CompletionMode::Busy => 0,
            CompletionMode::Events => 0,
            CompletionMode::Adaptive { spins } => spins,
        };
        let mut polls = 0u32;
        loop {
            let n = self.cq.ops().poll_cq(out)?;
            if n > 0 {
                return Poll::Ready(Ok(n));
            }
            if self.mode == CompletionMode::Busy {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            if polls < spins {
                polls += 1;
                std::hint::spin_loop();
                continue;
            }
            if !self.armed {
                self.cq.ops().arm_cq()?;
                self.armed = true;
                // Poll once more: a completion before the arm raises none.
                continue;
            }
            if !self.sleep(cx)? {
                return Poll::Pending;
            }
            // The event came (consumed): poll again, arm again.
            self.armed = false;
            polls = spins;
        }
    }

    /// Sleeps until the armed CQ's event: `Ok(true)` when it came (it is
    /// consumed now), `Ok(false)` when the waker is registered (Pending).
    fn sleep(&mut self, cx: &mut Context<'_>) -> Result<bool> {
        // (The fd is duplicated for the reactor once, when its watch is
        // made: `Some(None)` once it is.)
        let fd = match self.cq.ops().event_wake(cx.waker())? {
            EventWake::Registered => None,
            EventWake::Fd(_) if self.sleep.watching() => Some(None),
            EventWake::Fd(fd) => Some(Some(dup_fd(fd, "completion channel's")?)),
        };
        match fd {
            // The device wakes the waker; an event that came first is in
            // its fd already.
            None => Ok(self.cq.ops().take_events()? > 0),
            Some(fd) => match self.sleep.poll_readable(cx, || {
                fd.ok_or_else(|| Error::Reactor("no fd to watch".into()))
            }) {
                Poll::Pending => Ok(false),
                Poll::Ready(r) => {
                    r?;
                    // Readable: consume what waits. None (another reader
                    // took it) only means polling again.
                    self.cq.ops().take_events()?;
                    Ok(true)
                }
            },
        }
    }
}

impl Stream for Completions<'_> {
    type Item = Result<Completion>;

    /// The next completion (polled one at a time, so a dropped stream
    /// holds none); never ends (`None` is never returned): a CQ always may
    /// complete more.
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut one = [Completion::default()];
        match self.get_mut().poll_cq(cx, &mut one) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => Poll::Ready(Some(r.map(|_| one[0]))),
        }
    }
}
