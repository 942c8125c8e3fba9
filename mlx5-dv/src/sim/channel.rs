//! A completion channel that several CQs share (verbs'
//! `ibv_comp_channel` with many CQs on it): each completion event a CQ on
//! it raises queues that CQ's context value, and the channel's event fd is
//! readable while one waits. [`Channel::get_event`] takes them one at a
//! time, oldest first, as `ibv_get_cq_event` does.

use super::{Device, SimError};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// A completion channel (`ibv_create_comp_channel`). Clones share it; the
/// CQs made on it ([`Device::create_cq_on`]) keep it alive.
#[derive(Clone)]
pub struct Channel {
    pub(super) shared: Arc<ChannelShared>,
}

pub(super) struct ChannelShared {
    /// Readable while an event waits (a counter of 1 or 0: written by the
    /// first event queued, read by the take that empties the queue, both
    /// under `queue`'s lock).
    fd: nix::sys::eventfd::EventFd,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    /// The events not yet taken: (CQN, the CQ's context value), oldest first.
    events: VecDeque<(u32, u64)>,
    /// Woken (once) by the next event, each waiter's under its key
    /// ([`Channel::wake_on_event`]).
    wakers: Vec<(u64, std::task::Waker)>,
}

impl Device {
    /// A completion channel for CQs made with [`Device::create_cq_on`].
    ///
    /// Errors: [`SimError::Os`] when no eventfd can be made.
    pub fn create_channel(&self) -> Result<Channel, SimError> {
        let fd = nix::sys::eventfd::EventFd::from_value_and_flags(
            0,
            nix::sys::eventfd::EfdFlags::EFD_NONBLOCK | nix::sys::eventfd::EfdFlags::EFD_CLOEXEC,
        )
        .map_err(|e| SimError::Os(format!("eventfd: {e}")))?;
        Ok(Channel {
            shared: Arc::new(ChannelShared {
                fd,
                queue: Mutex::new(Queue::default()),
            }),
        })
    }
}

impl Channel {
    /// Readable while an event waits: wait on it with `poll`, then
    /// [`Self::get_event`].
    pub fn event_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.shared.fd.as_fd()
    }

    /// Takes the oldest event: the context value its CQ was made with
    /// (`ibv_get_cq_event`'s `cq_context`), or `None` if none waits.
    pub fn get_event(&self) -> Option<u64> {
        let mut q = self.shared.lock();
        let (_, ctx) = q.events.pop_front()?;
        if q.events.is_empty() {
            let _ = self.shared.fd.read();
        }
        Some(ctx)
    }

    /// Has `waker` woken by the next event (once), as the waiter `key`
    /// (one waker per key: a later call with the same key replaces it;
    /// every waiter's is woken). Register, then [`Self::get_event`], then
    /// sleep: no event is missed between the two.
    pub fn wake_on_event(&self, key: u64, waker: &std::task::Waker) {
        let mut q = self.shared.lock();
        match q.wakers.iter_mut().find(|(k, _)| *k == key) {
            Some((_, old)) if old.will_wake(waker) => {}
            Some((_, old)) => *old = waker.clone(),
            None => q.wakers.push((key, waker.clone())),
        }
    }

    /// The waiter `key` waits no more (its waker is dropped unwoken).
    pub fn forget_waker(&self, key: u64) {
        self.shared.lock().wakers.retain(|(k, _)| *k != key);
    }
}

impl ChannelShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// CQ `cqn` raised a completion event: queue its context value, make
    /// the fd readable, wake the waker.
    pub(super) fn raise(&self, cqn: u32, context: u64) {
        let wakers = {
            let mut q = self.lock();
            if q.events.is_empty() {
                // A full counter cannot happen: it is 0 or 1.
                let _ = self.fd.write(1);
            }
            q.events.push_back((cqn, context));
            std::mem::take(&mut q.wakers)
        };
        for (_, w) in wakers {
            w.wake();
        }
    }

    /// CQ `cqn` is destroyed: its events not yet taken go with it (as the
    /// kernel drops a destroyed CQ's events from its channel).
    pub(super) fn forget(&self, cqn: u32) {
        let mut q = self.lock();
        let before = q.events.len();
        q.events.retain(|&(c, _)| c != cqn);
        if before > 0 && q.events.is_empty() {
            let _ = self.fd.read();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(ch: &Channel) -> bool {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds = [PollFd::new(ch.event_fd(), PollFlags::POLLIN)];
        poll(&mut fds, PollTimeout::ZERO).unwrap() > 0
    }

    /// Events come oldest first with their CQ's context; the fd is readable
    /// exactly while one waits; a CQ's events go when it is forgotten, or
    /// when its handle drops.
    #[test]
    #[cfg_attr(miri, ignore = "poll(2), which Miri does not run")]
    fn events_queue_in_order_and_go_with_their_cq() {
        let dev = Device::new();
        let ch = dev.create_channel().unwrap();
        assert!(!readable(&ch) && ch.get_event().is_none());
        ch.shared.raise(1, 10);
        ch.shared.raise(2, 20);
        ch.shared.raise(1, 11);
        assert!(readable(&ch));
        assert_eq!(ch.get_event(), Some(10));
        ch.shared.forget(1);
        assert!(readable(&ch), "CQ 2's event waits");
        assert_eq!(ch.get_event(), Some(20));
        assert!(!readable(&ch) && ch.get_event().is_none());
        ch.shared.raise(3, 30);
        ch.shared.forget(3);
        assert!(!readable(&ch), "the only event went with its CQ");

        let cq = dev.create_cq_on(4, 64, true, &ch, 77).unwrap();
        let other = dev.create_cq_on(4, 64, true, &ch, 88).unwrap();
        ch.shared.raise(cq.cqn(), 77);
        ch.shared.raise(other.cqn(), 88);
        drop(cq);
        assert_eq!(ch.get_event(), Some(88), "the dropped CQ's event went");
        assert!(!readable(&ch));
    }

    /// Every waker registered before an empty take is woken by the next
    /// event, each waiter's own; a forgotten one is not.
    #[test]
    fn a_registered_waker_is_woken_by_the_next_event() {
        struct Flag(std::sync::atomic::AtomicBool);
        impl std::task::Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let ch = Device::new().create_channel().unwrap();
        let flags: Vec<_> = (0..3).map(|_| Arc::new(Flag(false.into()))).collect();
        for (k, f) in flags.iter().enumerate() {
            ch.wake_on_event(k as u64, &std::task::Waker::from(f.clone()));
        }
        ch.forget_waker(2);
        assert!(ch.get_event().is_none());
        ch.shared.raise(5, 50);
        let woken: Vec<bool> = flags
            .iter()
            .map(|f| f.0.load(std::sync::atomic::Ordering::SeqCst))
            .collect();
        assert_eq!(woken, [true, true, false]);
        assert_eq!(ch.get_event(), Some(50));
    }
}
