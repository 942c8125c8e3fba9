//! The device's async events as a stream ([`Context::async_events`]), on
//! any runtime: each event read without blocking
//! ([`Context::get_async_event`] with no wait: `ibv_get_async_event`, then
//! `ibv_ack_async_event` before it is handed out), and, when none waits,
//! the context's async event fd (a non-blocking duplicate) watched by a
//! [`Reactor`] until it becomes readable.

use crate::device::context::Context;
use crate::ib::error::Result;
use crate::ib::event::AsyncEvent;
use crate::reactor::{FdSleep, Reactor};
use futures_core::Stream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

/// The device's async events ([`AsyncEvent`]: port up or down, CQ error,
/// SRQ limit, QP fatal, ...) as a `Stream` and as
/// [`AsyncEvents::next_event`]; see [`Context::async_events`]. Which events each
/// device raises: `docs/concepts.md`, "Device async events".
pub struct AsyncEvents<'c> {
    ctx: &'c Context,
    sleep: FdSleep,
}

impl Context {
    /// The device's async events, awaited: `next_event().await`, or a
    /// `Stream`.
    /// Events are read as [`Self::get_async_event`] reads them (each
    /// acknowledged before it is handed out), so a stream and that call
    /// take from one queue. Sleeps through [`default_reactor`](crate::reactor::default_reactor) (or
    /// [`AsyncEvents::with_reactor`]'s).
    pub fn async_events(&self) -> AsyncEvents<'_> {
        AsyncEvents {
            ctx: self,
            sleep: FdSleep::default(),
        }
    }
}

impl AsyncEvents<'_> {
    /// Sleeps through `reactor` rather than [`default_reactor`](crate::reactor::default_reactor).
    pub fn with_reactor(mut self, reactor: Arc<dyn Reactor>) -> Self {
        self.sleep.set_reactor(reactor);
        self
    }

    /// The next async event. Cancel-safe: dropped before it resolves, it
    /// took none.
    ///
    /// Errors: the read's ([`Error::Verbs`](crate::Error::Verbs),
    /// [`Error::Os`](crate::Error::Os));
    /// [`Error::Reactor`](crate::Error::Reactor).
    pub async fn next_event(&mut self) -> Result<AsyncEvent> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    /// [`Self::next_event`] as a poll function.
    pub fn poll_event(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<AsyncEvent>> {
        loop {
            if let Some(e) = self.ctx.get_async_event(Duration::ZERO)? {
                return Poll::Ready(Ok(e));
            }
            let ctx = self.ctx;
            match self.sleep.poll_readable(cx, || ctx.async_event_fd()) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                // Readable: read again.
                Poll::Ready(Ok(())) => {}
            }
        }
    }
}

impl Stream for AsyncEvents<'_> {
    type Item = Result<AsyncEvent>;

    /// The next event; never ends.
    fn poll_next(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_event(cx).map(Some)
    }
}
