//! One completion channel for many CQs (`ibv_comp_channel` shared, as
//! sideway #113 asks): [`CompChannel`], made by
//! [`Context::create_comp_channel`](crate::Context::create_comp_channel);
//! CQs join it through [`Pd::create_shared_cq_on`](crate::Pd::create_shared_cq_on),
//! each with a token its events carry (verbs' `cq_context`).
//!
//! The loop is rdma-core's: arm each CQ ([`SharedCq::arm_cq`](crate::SharedCq::arm_cq)),
//! take an event from the channel ([`CompChannel::get_event`], or
//! `next_event().await`, or the `Stream`), poll the CQ its token names
//! until empty, arm it again, poll it once more (a completion that came
//! between the last poll and the arm raised no event), and take the next
//! event. Each event is acknowledged (`ibv_ack_cq_events`) as it is taken,
//! so a CQ can be destroyed at any time; a destroyed CQ's events not yet
//! taken go with it.

#[cfg(feature = "verbs")]
use crate::backend::ibv;
use crate::backend::wait_readable;
use crate::device::handles::CtxKind;
use crate::ib::error::{Error, Result};
#[cfg(feature = "verbs")]
use crate::reactor::dup_fd;
use crate::reactor::{FdSleep, Reactor};
use futures_core::Stream;
use mlx5_dv::sim;
use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

/// A completion channel that many CQs share: each completion event names
/// its CQ by the `u64` token the CQ was made with. Clones share the
/// channel (each with its own async wait); the CQs on it keep it alive.
///
/// `Send` and `Sync`: one thread or task may wait on the channel while the
/// CQs' owners arm and poll them elsewhere; [`Self::get_event`] takes
/// `&self`, so threads may share one by reference, while an async wait
/// (`next_event`, the `Stream`) takes `&mut self`: give each task its own
/// clone. The fd ([`AsFd`]) is
/// non-blocking and readable while an event waits, for an event loop of
/// one's own (`epoll`, mio): then call [`Self::get_event`] with a zero
/// timeout.
///
/// Source: `ibv_create_comp_channel(3)`, `ibv_get_cq_event(3)`; on the sim,
/// `mlx5_dv::sim::Channel`.
pub struct CompChannel {
    shared: Arc<ChannelShared>,
    /// This handle's key among the channel's async waiters (the sim keeps
    /// one waker per key).
    key: u64,
    /// The async wait's reactor watch. Reached only through `&mut self`
    /// (`Mutex::get_mut`, no locking): the `Mutex` makes the channel
    /// `Sync`, so a `&CompChannel` may wait (`get_event`) on any thread.
    sleep: Mutex<FdSleep>,
}

pub(crate) struct ChannelShared {
    pub(crate) kind: ChannelKind,
    /// The CQs on the channel by the context value their events carry (a
    /// serial of the seat, never reused: an event of a dropped CQ names no
    /// one, even if a new CQ took its token), each with its token and the
    /// count of its events taken: a direct-path CQ arms with that count as
    /// its sequence number (rdma-core's `mlx5_cq_event` advances `arm_sn`
    /// likewise).
    cqs: Mutex<HashMap<u64, (u64, Arc<AtomicU32>)>>,
}

/// A fresh serial: a seat's context value, a handle's waiter key.
fn next_serial() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

pub(crate) enum ChannelKind {
    Sim(sim::Device, sim::Channel),
    #[cfg(feature = "verbs")]
    Verbs(Arc<ibv::VerbsChannel>),
}

/// A CQ's place on a channel: its token, given back when the CQ is
/// dropped, and the context value its events carry.
pub(crate) struct ChannelSeat {
    shared: Arc<ChannelShared>,
    serial: u64,
    token: u64,
}

impl ChannelSeat {
    pub(crate) fn token(&self) -> u64 {
        self.token
    }

    /// The context value the CQ's events carry (`cq_context`).
    pub(crate) fn context(&self) -> u64 {
        self.serial
    }
}

impl Drop for ChannelSeat {
    fn drop(&mut self) {
        self.shared.lock().remove(&self.serial);
    }
}

impl ChannelShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (u64, Arc<AtomicU32>)>> {
        self.cqs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one event taken of the CQ whose context value is `context`;
    /// its token, or `None` if that CQ is gone (the event is dropped).
    fn seen(&self, context: u64) -> Option<u64> {
        let cqs = self.lock();
        let (token, n) = cqs.get(&context)?;
        n.fetch_add(1, Ordering::Release);
        Some(*token)
    }
}

impl Clone for CompChannel {
    /// The same channel, with an async wait of its own.
    fn clone(&self) -> Self {
        CompChannel {
            shared: self.shared.clone(),
            key: next_serial(),
            sleep: Mutex::default(),
        }
    }
}

impl CompChannel {
    /// A channel on the device of `ctx` (`ibv_create_comp_channel`, its fd
    /// made non-blocking; a sim channel on the sim).
    pub(crate) fn create(ctx: &CtxKind) -> Result<CompChannel> {
        let kind = match ctx {
            CtxKind::Sim(d) => ChannelKind::Sim(d.clone(), d.create_channel()?),
            #[cfg(feature = "verbs")]
            CtxKind::Verbs(c, _) => ChannelKind::Verbs(ibv::VerbsChannel::create(c)?),
        };
        Ok(CompChannel {
            shared: Arc::new(ChannelShared {
                kind,
                cqs: Mutex::new(HashMap::new()),
            }),
            key: next_serial(),
            sleep: Mutex::default(),
        })
    }

    /// Takes `token` for a CQ about to be made on the channel; the count
    /// its events advance, and the seat that gives the token back.
    ///
    /// Errors: [`Error::DuplicateToken`] when a live CQ on the channel has it.
    pub(crate) fn seat(&self, token: u64) -> Result<(ChannelSeat, Arc<AtomicU32>)> {
        let mut cqs = self.shared.lock();
        if cqs.values().any(|(t, _)| *t == token) {
            return Err(Error::DuplicateToken { token });
        }
        let n = Arc::new(AtomicU32::new(0));
        let serial = next_serial();
        cqs.insert(serial, (token, n.clone()));
        let seat = ChannelSeat {
            shared: self.shared.clone(),
            serial,
            token,
        };
        Ok((seat, n))
    }

    /// The device-side channel.
    pub(crate) fn kind(&self) -> &ChannelKind {
        &self.shared.kind
    }

    /// How many CQs are on the channel now.
    pub fn cqs(&self) -> usize {
        self.shared.lock().len()
    }

    /// Sleeps through `reactor` rather than
    /// [`default_reactor`](crate::reactor::default_reactor) (verbs devices
    /// only: the sim wakes the waker itself).
    pub fn with_reactor(mut self, reactor: Arc<dyn Reactor>) -> Self {
        self.sleep_mut().set_reactor(reactor);
        self
    }

    fn sleep_mut(&mut self) -> &mut FdSleep {
        self.sleep.get_mut().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes one event if one waits, without blocking: the token of the CQ
    /// that raised it.
    /// Events of CQs dropped since they were raised are skipped.
    fn try_event(&self) -> Result<Option<u64>> {
        loop {
            let token = match &self.shared.kind {
                ChannelKind::Sim(_, ch) => match ch.get_event() {
                    None => return Ok(None),
                    Some(context) => self.shared.seen(context),
                },
                #[cfg(feature = "verbs")]
                ChannelKind::Verbs(ch) => match ch.get_event(|c| self.shared.seen(c))? {
                    None => return Ok(None),
                    Some(token) => token,
                },
            };
            if let Some(t) = token {
                return Ok(Some(t));
            }
        }
    }

    /// Waits up to `timeout` for a completion event of any CQ on the
    /// channel and takes it (acknowledged at once): the token of the CQ
    /// that raised it, or `None` when `timeout` passed first. A zero
    /// timeout does not block. Events come oldest first, one per arm.
    ///
    /// Errors: the read's ([`Error::Verbs`]: `ibv_get_cq_event`, `poll`).
    pub fn get_event(&self, timeout: Duration) -> Result<Option<u64>> {
        let start = Instant::now();
        loop {
            if let Some(t) = self.try_event()? {
                return Ok(Some(t));
            }
            let Some(left) = timeout.checked_sub(start.elapsed()) else {
                return Ok(None);
            };
            if left.is_zero() || !wait_readable(self.as_fd(), left, "completion channel")? {
                return Ok(None);
            }
        }
    }

    /// The next completion event, awaited: the token of its CQ.
    /// Cancel-safe: dropped before it resolves, it took none.
    ///
    /// Errors: as [`Self::get_event`]; [`Error::Reactor`].
    pub async fn next_event(&mut self) -> Result<u64> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    /// [`Self::next_event`] as a poll function.
    pub fn poll_event(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<u64>> {
        // Loops only on verbs (the fd readable, the event taken elsewhere).
        #[cfg_attr(not(feature = "verbs"), allow(clippy::never_loop))]
        loop {
            match &self.shared.kind {
                ChannelKind::Sim(_, ch) => {
                    // Registered before the take: an event after it wakes us.
                    ch.wake_on_event(self.key, cx.waker());
                    return match self.try_event()? {
                        Some(t) => Poll::Ready(Ok(t)),
                        None => Poll::Pending,
                    };
                }
                #[cfg(feature = "verbs")]
                ChannelKind::Verbs(_) => {
                    if let Some(t) = self.try_event()? {
                        return Poll::Ready(Ok(t));
                    }
                    let shared = &self.shared;
                    let sleep = self.sleep.get_mut().unwrap_or_else(|e| e.into_inner());
                    let fd = shared.fd();
                    match sleep.poll_readable(cx, || dup_fd(fd, "completion channel's")) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        // Readable: take again.
                        Poll::Ready(Ok(())) => {}
                    }
                }
            }
        }
    }
}

impl ChannelShared {
    fn fd(&self) -> BorrowedFd<'_> {
        match &self.kind {
            ChannelKind::Sim(_, ch) => ch.event_fd(),
            #[cfg(feature = "verbs")]
            ChannelKind::Verbs(ch) => ch.fd(),
        }
    }
}

impl AsFd for CompChannel {
    /// The channel's fd: non-blocking, readable while an event waits.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.shared.fd()
    }
}

impl Drop for CompChannel {
    /// This handle's async wait, if any, waits no more.
    fn drop(&mut self) {
        #[cfg_attr(not(feature = "verbs"), allow(irrefutable_let_patterns))]
        if let ChannelKind::Sim(_, ch) = &self.shared.kind {
            ch.forget_waker(self.key);
        }
    }
}

impl Stream for CompChannel {
    type Item = Result<u64>;

    /// The token of the next event's CQ; never ends.
    fn poll_next(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_event(cx).map(Some)
    }
}

impl std::fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompChannel")
            .field("fd", &self.as_fd())
            .field("cqs", &self.cqs())
            .finish()
    }
}
