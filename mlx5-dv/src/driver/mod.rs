//! The ring driver: a send queue and a completion queue over the raw ring
//! descriptions `mlx5dv_init_obj` returns (`mlx5dv_qp`, `mlx5dv_cq`), so the
//! same code drives the sim and a ConnectX NIC.
//!
//! Hot path (`post`, `ring_doorbell`, `poll`): no allocation, no lock, no syscall.
//!
//! Files: `sq` ([`SendQueue`]; its gates, counts and RESET in `sq_state`;
//! the post of a masked atomic in `sq_masked`),
//! `fast`, `fast_ud` and `fast_dc` (its in-place posts), `rq` ([`ReceiveQueue`]), `srq`
//! ([`SharedReceiveQueue`], [`SrqSlots`]), `cq` ([`CompletionQueue`]) and
//! `scatter` (scatter to CQE: `scatter_from_cqe`, [`ScatterError`]); here, what they share ([`DescError`]) and the CQ
//! credits ([`CqCredits`]). Everything is used from here (`crate::driver::*`).

mod cq;
mod fast;
mod fast_dc;
#[cfg(test)]
mod fast_tests;
mod fast_ud;
mod rq;
mod scatter;
#[cfg(test)]
mod scatter_tests;
mod sq;
mod sq_masked;
mod sq_state;
mod srq;
mod table;
#[cfg(test)]
mod tests;
mod umr;
#[cfg(test)]
mod umr_tests;

/// The segment and SRQ layout the posts take, from the codec (`crate::wqe`).
pub use crate::wqe::{Seg, SRQ_NEXT_SEG};
pub use cq::{CompletionQueue, CqCursor, PutBack, Taken};
pub use fast::{Reserved, Written, WrittenBf};
pub use fast_dc::{DcRoom, WrittenDc};
pub use fast_ud::{UdRoom, WrittenUd};
pub use rq::ReceiveQueue;
pub use scatter::ScatterError;
pub use sq::{Retired, Retirer, SendQueue, SignalNext};
pub use srq::{SharedReceiveQueue, SrqDesc, SrqSlots};
pub use table::Table;

/// Why a ring description was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DescError {
    /// A pointer of the description is null.
    #[error("{what} is null")]
    Null {
        /// The field, e.g. `cq.dbrec`.
        what: &'static str,
    },
    /// A count that must be a nonzero power of two is not.
    #[error("{what} = {value} must be a nonzero power of two")]
    NotPow2 {
        /// The field, e.g. `sq.wqe_cnt`.
        what: &'static str,
        /// Its value.
        value: u32,
    },
    /// The SQ stride is not 64 bytes (one WQEBB).
    #[error("SQ stride is {0} bytes; mlx5 send WQEBBs are 64")]
    Stride(u32),
    /// The CQE size is neither 64 nor 128 bytes.
    #[error("CQE size is {0} bytes; mlx5 CQEs are 64 or 128")]
    CqeSize(u32),
}

pub(super) fn pow2(what: &'static str, value: u32) -> Result<u32, DescError> {
    if value.is_power_of_two() {
        Ok(value)
    } else {
        Err(DescError::NotPow2 { what, value })
    }
}

/// CQ credits: the room a CQ has for CQEs not yet produced. Every work
/// request posted to a queue that completes to the CQ takes one credit (a
/// send WR, signaled or not, because after an error every outstanding WR is
/// flushed into the CQ with its own CQE; a receive WR because it completes
/// once) and gives it back when the WR is retired. Posts that find too few
/// credits are refused before anything is written, so the CQ can never
/// overrun. Clones share the count: QPs sharing one CQ share its credits.
///
/// One atomic add per post batch and per poll batch; no lock.
#[derive(Clone, Debug)]
pub struct CqCredits {
    free: std::sync::Arc<core::sync::atomic::AtomicU32>,
    depth: u32,
}

impl CqCredits {
    /// Credits for a CQ of `depth` CQEs.
    pub fn new(depth: u32) -> Self {
        CqCredits {
            free: std::sync::Arc::new(core::sync::atomic::AtomicU32::new(depth)),
            depth,
        }
    }

    /// Names the count the clones share (equal for clones, different for
    /// credits made by separate `new` calls while both live).
    pub fn id(&self) -> usize {
        std::sync::Arc::as_ptr(&self.free) as usize
    }

    /// The CQ depth the credits stand for, in CQEs.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Credits free now.
    pub fn free(&self) -> u32 {
        self.free.load(core::sync::atomic::Ordering::Relaxed)
    }

    /// Takes `n` credits, or none if fewer than `n` are free.
    #[inline]
    pub fn take(&self, n: u32) -> bool {
        use core::sync::atomic::Ordering::Relaxed;
        self.free
            .fetch_update(Relaxed, Relaxed, |f| f.checked_sub(n))
            .is_ok()
    }

    /// Takes one credit: the credits left free after it, or `None` (none
    /// taken) if none was free.
    #[inline]
    pub fn take_one(&self) -> Option<u32> {
        use core::sync::atomic::Ordering::Relaxed;
        self.free
            .fetch_update(Relaxed, Relaxed, |f| f.checked_sub(1))
            .ok()
            .map(|before| before - 1)
    }

    /// [`Self::give`] for a caller whose accounting guarantees that the
    /// `n` credits were taken (one atomic add, no saturation: a debug
    /// build checks the count stays within `depth`).
    #[inline(always)]
    pub fn give_taken(&self, n: u32) {
        use core::sync::atomic::Ordering::Relaxed;
        let _before = self.free.fetch_add(n, Relaxed);
        debug_assert!(
            _before as u64 + n as u64 <= self.depth as u64,
            "more credits given back than taken"
        );
    }

    /// Gives back `n` credits of retired work requests. More than were
    /// taken is a caller bug: the count stops at `depth` (never wraps).
    #[inline]
    pub fn give(&self, n: u32) {
        use core::sync::atomic::Ordering::Relaxed;
        if n != 0 {
            let depth = self.depth;
            let r = self
                .free
                .fetch_update(Relaxed, Relaxed, |f| Some(f.saturating_add(n).min(depth)));
            debug_assert!(
                r.is_ok_and(|before| before as u64 + n as u64 <= depth as u64),
                "more credits given back than taken"
            );
        }
    }
}

#[cfg(test)]
mod credit_tests {
    use super::CqCredits;

    #[test]
    fn credits_refuse_what_the_cq_cannot_hold_and_are_shared_by_clones() {
        let a = CqCredits::new(4);
        let b = a.clone();
        assert!(a.take(3));
        assert!(!b.take(2), "5 of 4");
        assert_eq!(b.free(), 1, "a refused take takes nothing");
        assert!(b.take(1));
        assert!(!a.take(1));
        a.give(4);
        assert_eq!(b.free(), 4);
        assert_eq!(a.depth(), 4);
        if !cfg!(debug_assertions) {
            a.give(u32::MAX);
            assert_eq!(a.free(), 4, "never above depth, never wraps");
        }
    }
}
