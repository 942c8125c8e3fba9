//! A pool of DCIs ([`DciPool`]): its policy, ordering and cost are on the type.

use crate::ib::completion::Completion;
use crate::ib::config::QpConfig;
use crate::ib::error::{Error, Result};
use crate::ib::qp_attr::QpType;
use crate::ib::wr::{DcDest, SendWr};
use crate::pd::Pd;
use crate::qp::Qp;

/// The most DCIs a [`DciPool`] holds.
const MAX_WIDTH: usize = 64;

/// The target a DCI is bound to: the AH's AV bytes, DCT number and key.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Target {
    av: [u8; 48],
    dctn: u32,
    key: u64,
}

impl Target {
    fn of(dest: &DcDest<'_>) -> Target {
        Target {
            av: dest.ah.inner.av,
            dctn: dest.dctn,
            key: dest.key,
        }
    }
}

/// W DCIs of one PD, each with its own CQ, shared by the targets their
/// WRs go to: one DCI per target while it has WRs outstanding, a failed
/// DCI reset before reuse. `Send`, not `Sync`: one thread posts and polls,
/// as for a [`Qp`].
///
/// # Policy
///
/// A *target* is what a [`DcDest`] names: the AH's address vector (the
/// path to the target's port, compared by its bytes, so two [`Ah`](crate::Ah)s made
/// from one address name one target), the DCT number and the DC key. Each
/// DCI is *free* or *bound* to one target:
///
/// - [`DciPool::post`] to a target that a DCI is bound to posts on that DCI
///   (the same one while the target has WRs outstanding on it).
/// - Otherwise it takes the free DCI of lowest index and binds it to the
///   target. If none is free, it refuses with [`Error::QueueFull`]: poll
///   ([`DciPool::poll`]) and post again.
/// - [`DciPool::poll`] polls each bound DCI's own CQ; a DCI whose last
///   outstanding WR was retired (completed, or flushed) is unbound, free
///   for any target.
/// - A DCI whose WR failed ([`Qp::dci_failed`]: a wrong key, an unknown
///   DCT) is in ERR and its other WRs flush. It stays bound (a post to its
///   target is refused with [`Error::QueueFull`] meanwhile) until the
///   flushed completions were polled; then [`DciPool::poll`] resets it
///   ([`Qp::reset_dci`]) before anyone posts on it again (UCX PR #6646:
///   never a WQE on a DCI still in error, nor a reset that discards one).
///
/// # Ordering
///
/// WRs posted to one target through the pool, while any of them is
/// outstanding, go on one DCI, so they execute and complete in the order
/// posted (RC's ordering on that DCI). Once all of a target's WRs are
/// retired its next WR may go on another DCI: there is nothing left to
/// order it after. WRs to different targets are not ordered with each
/// other. Two [`DcDest`]s with the same AV, DCT number and key are one
/// target; with different keys (or AVs) they are two, and not ordered.
///
/// An unsignaled WR is retired only when a later signaled WR of its DCI
/// completes: end each target's batch with a signaled WR, or the DCI stays
/// bound to that target (it still serves it) until one is posted there.
///
/// # Completions
///
/// Each completion keeps its own [`Completion::qp_num`], the DCI it came
/// from ([`DciPool::qpn`]); a failure is never credited to another DCI
/// (UCX PR #7878): each DCI has its own CQ, polled on its own.
///
/// # Cost
///
/// No allocation and no lock per post or poll: the DCIs and their bindings
/// are made in [`DciPool::new`]; a post scans at most W bindings (W <= 64),
/// a poll polls only the bound DCIs (a 64-bit mask).
pub struct DciPool {
    dcis: Vec<Qp>,
    /// `targets[i]`: the target DCI `i` is bound to (meaningful while
    /// bit `i` of `bound` is set).
    targets: Vec<Target>,
    /// Bit `i`: DCI `i` is bound (it has WRs outstanding, or is failed
    /// and not yet reset).
    bound: u64,
    /// Where the next poll starts (turns, so that a small `out` does not
    /// starve the DCIs of high index).
    next_poll: usize,
}

impl std::fmt::Debug for DciPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DciPool")
            .field("width", &self.dcis.len())
            .field("bound", &format_args!("{:#x}", self.bound))
            .finish()
    }
}

impl DciPool {
    /// Creates `width` DCIs on `pd` with `cfg` (each with its own CQ,
    /// [`Pd::create_qp`]) and brings each up to RTS ([`Qp::ready_dci`]).
    /// `cfg.qp_type` must be [`QpType::Dci`]; `cfg.max_send_wr` is each
    /// DCI's ring, which bounds one target's WRs outstanding at a time.
    ///
    /// Errors: `width` not in 1..=64 ([`Error::Config`]); `cfg.qp_type`
    /// not `Dci` ([`Error::WrongTransport`]); [`Pd::create_qp`]'s (no DC on
    /// the device: [`Error::Unsupported`]) and [`Qp::ready_dci`]'s. The
    /// DCIs made before the error are destroyed.
    pub fn new(pd: &Pd, cfg: &QpConfig, width: usize) -> Result<DciPool> {
        if !(1..=MAX_WIDTH).contains(&width) {
            return Err(Error::Config {
                field: "DciPool width (DCIs)",
                value: width as u64,
                min: 1,
                max: MAX_WIDTH as u64,
            });
        }
        if cfg.qp_type != QpType::Dci {
            return Err(Error::WrongTransport {
                qp_type: cfg.qp_type,
                op: "DciPool::new (its QPs are DCIs: QpConfig::qp_type Dci)",
            });
        }
        let mut dcis = Vec::with_capacity(width);
        for _ in 0..width {
            let mut q = pd.create_qp(cfg)?;
            q.ready_dci()?;
            dcis.push(q);
        }
        let none = Target {
            av: [0; 48],
            dctn: 0,
            key: 0,
        };
        Ok(DciPool {
            dcis,
            targets: vec![none; width],
            bound: 0,
            next_poll: 0,
        })
    }

    /// How many DCIs the pool holds (W).
    pub fn width(&self) -> usize {
        self.dcis.len()
    }

    /// DCI `i` (read-only: its state, [`Qp::qp_num`], [`Qp::dci_failed`]).
    /// Panics if `i >= width()`.
    pub fn dci(&self, i: usize) -> &Qp {
        &self.dcis[i]
    }

    /// DCI `i`'s QP number, which its completions carry
    /// ([`Completion::qp_num`]). Panics if `i >= width()`.
    pub fn qpn(&self, i: usize) -> u32 {
        self.dcis[i].qp_num()
    }

    /// The index of the DCI whose QP number is `qpn`, if it is one of the
    /// pool's (to map a completion back to its DCI).
    pub fn index_of(&self, qpn: u32) -> Option<usize> {
        self.dcis.iter().position(|q| q.qp_num() == qpn)
    }

    /// Whether DCI `i` is bound to a target (it has WRs outstanding, or it
    /// failed and its flushed completions were not all polled yet).
    /// Panics if `i >= width()`.
    pub fn bound(&self, i: usize) -> bool {
        assert!(i < self.dcis.len(), "DCI {i} of {}", self.dcis.len());
        self.bound & (1 << i) != 0
    }

    /// How many DCIs are bound ([`Self::bound`]); `width() - busy()` are
    /// free.
    pub fn busy(&self) -> usize {
        self.bound.count_ones() as usize
    }

    /// Posts `wrs` to the target `dest` names on one DCI ([`Qp::post_dc`]),
    /// and returns its index: the DCI bound to that target if there is
    /// one, else the free DCI of lowest index, bound to it from here on.
    /// On any error nothing is written and no DCI is bound anew.
    ///
    /// Errors:
    /// - [`Error::QueueFull`]: no DCI is free (all W are bound to other
    ///   targets), or the target's DCI failed and its flushed WRs were not
    ///   polled yet, or its ring is full: [`Self::poll`] and post again;
    /// - a DCI that could not be reset after a failure: [`Qp::reset_dci`]'s
    ///   (it stays out of service; the next post tries again);
    /// - [`Qp::post_dc`]'s otherwise ([`Error::ForeignPd`],
    ///   [`Error::Config`], a WR's own, [`Error::CqFull`],
    ///   [`Error::NeverFits`]).
    pub fn post(&mut self, dest: &DcDest<'_>, wrs: &[SendWr<'_>]) -> Result<usize> {
        let t = Target::of(dest);
        let i = match self.bound_to(&t) {
            Some(i) => {
                if self.dcis[i].dci_failed() {
                    // Its WRs are flushing: the target's next WR waits for
                    // the reset (the DCI is in ERR: nothing is written).
                    return Err(Error::QueueFull);
                }
                i
            }
            None => {
                let free = !self.bound & self.mask();
                if free == 0 {
                    return Err(Error::QueueFull);
                }
                let i = free.trailing_zeros() as usize;
                let q = &mut self.dcis[i];
                if q.dci_failed() || q.state() != crate::QpState::Rts {
                    // Drained but not yet reset (poll's reset failed).
                    q.reset_dci()?;
                }
                i
            }
        };
        self.dcis[i].post_dc(dest, wrs)?;
        if self.dcis[i].outstanding() > 0 {
            self.targets[i] = t;
            self.bound |= 1 << i;
        }
        Ok(i)
    }

    /// Polls the bound DCIs' CQs, each in turn (starting one further each
    /// call), into `out`; returns how many completions were written. Each
    /// keeps its DCI's [`Completion::qp_num`]. A DCI left with no WR
    /// outstanding is unbound; a failed one is reset first
    /// ([`Qp::reset_dci`]).
    ///
    /// Errors: a DCI's [`Qp::poll`]'s (the completions of the DCIs polled
    /// before it are lost from `out`: none is on the sim or ConnectX's
    /// direct path). A reset that fails here is not reported: the DCI
    /// stays out of service and the post that takes it next resets it
    /// again and reports that.
    pub fn poll(&mut self, out: &mut [Completion]) -> Result<usize> {
        let w = self.dcis.len();
        let mut n = 0;
        let start = self.next_poll;
        self.next_poll = if start + 1 == w { 0 } else { start + 1 };
        for k in 0..w {
            let i = if start + k >= w {
                start + k - w
            } else {
                start + k
            };
            if self.bound & (1 << i) == 0 {
                continue;
            }
            let q = &mut self.dcis[i];
            if n < out.len() {
                n += q.poll(&mut out[n..])?;
            }
            if q.outstanding() == 0 {
                if q.dci_failed() {
                    // On failure it is left failed or in RESET, and `post`
                    // resets it before use (and reports that error).
                    let _ = q.reset_dci();
                }
                self.bound &= !(1 << i);
            }
        }
        Ok(n)
    }

    /// The DCI bound to `t`, if any.
    fn bound_to(&self, t: &Target) -> Option<usize> {
        let mut b = self.bound;
        while b != 0 {
            let i = b.trailing_zeros() as usize;
            if self.targets[i] == *t {
                return Some(i);
            }
            b &= b - 1;
        }
        None
    }

    /// One bit per DCI.
    fn mask(&self) -> u64 {
        if self.dcis.len() == MAX_WIDTH {
            u64::MAX
        } else {
            (1 << self.dcis.len()) - 1
        }
    }
}
