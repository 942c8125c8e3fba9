//! The one wait loop of every [`CompletionMode`], over a CQ's poll, arm and
//! wait (a QP's own CQ or a shared one).

use crate::backend::EventWake;
use crate::ib::completion::Completion;
use crate::ib::config::CompletionMode;
use crate::ib::error::{Error, Result};
use std::time::{Duration, Instant};

/// Polling, arming and waiting on one CQ (a QP's own, or shared).
pub(crate) trait CqOps {
    fn poll_cq(&mut self, out: &mut [Completion]) -> Result<usize>;
    fn arm_cq(&mut self) -> Result<()>;
    fn wait_cq(&mut self, timeout: Duration) -> Result<bool>;
    /// For an async wait: registers `waker` with the device (the sim), or
    /// names the completion channel's fd to watch.
    fn event_wake(&mut self, waker: &std::task::Waker) -> Result<EventWake<'_>>;
    /// Consumes (and acknowledges) the completion events waiting now,
    /// without blocking; returns how many.
    fn take_events(&mut self) -> Result<u32>;
}

/// Polls between clock reads while busy polling (a clock read can be a
/// system call under emulation).
const POLLS_PER_CLOCK: u32 = 256;

/// The wait of [`CompletionMode`] on `cq`: returns as soon as at least one
/// completion is in `out`, or 0 when `timeout` passed first.
pub(crate) fn wait_on<C: CqOps>(
    cq: &mut C,
    out: &mut [Completion],
    mode: CompletionMode,
    timeout: Duration,
) -> Result<usize> {
    if out.is_empty() {
        return Err(Error::Config {
            field: "room for completions (out.len())",
            value: 0,
            min: 1,
            max: usize::MAX as u64,
        });
    }
    // A completion already there costs no clock read (under emulation a
    // clock read can be a system call): the timeout counts from the first
    // empty poll.
    let n = cq.poll_cq(out)?;
    if n > 0 {
        return Ok(n);
    }
    let start = Instant::now();
    let spins = match mode {
        CompletionMode::Busy => u32::MAX,
        CompletionMode::Events => 1,
        CompletionMode::Adaptive { spins } => spins.max(1),
    };
    let mut polls = 1u32;
    loop {
        if polls < spins {
            let n = cq.poll_cq(out)?;
            if n > 0 {
                return Ok(n);
            }
            polls += 1;
            if polls.is_multiple_of(POLLS_PER_CLOCK) && start.elapsed() >= timeout {
                return Ok(0);
            }
            std::hint::spin_loop();
            continue;
        }
        if mode == CompletionMode::Busy {
            // u32::MAX empty polls: keep going until the timeout.
            polls = 0;
            continue;
        }
        cq.arm_cq()?;
        let n = cq.poll_cq(out)?;
        if n > 0 {
            return Ok(n);
        }
        let Some(left) = timeout.checked_sub(start.elapsed()) else {
            return Ok(0);
        };
        if !cq.wait_cq(left)? {
            return Ok(0);
        }
        // Event consumed: poll again (and arm again if it raced ahead).
        let n = cq.poll_cq(out)?;
        if n > 0 {
            return Ok(n);
        }
        polls = spins;
    }
}
