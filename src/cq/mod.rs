//! Completion queues beyond a QP's own: a CQ several QPs share, the sizing
//! helper, and the ways to wait for completions (busy polling, events,
//! adaptive).

pub(crate) mod channel;
pub(crate) mod completions;
pub(crate) mod wait;

use crate::backend::direct::DirectQp;
#[cfg(feature = "verbs")]
use crate::backend::verbs::{self, VerbsQp};
use crate::backend::SharedQps;
use crate::cq::channel::ChannelSeat;
use crate::cq::wait::{wait_on, CqOps};
use crate::device::handles::{PdInner, SharedKind};
use crate::ib::completion::Completion;
use crate::ib::config::{CompletionMode, QpConfig};
use crate::ib::error::{Error, Result};
use crate::ib::qp_attr::{QpAttr, QpState};
use crate::qp::Qp;
use mlx5_dv::driver::CqCredits;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// A completion queue that several QPs share: the sends and receives of
/// every QP created on it ([`Self::create_qp`]) complete into it, and one
/// owner polls it. Each [`Completion`] carries the `qp_num` of its QP.
///
/// The QPs live inside the `SharedCq` (reach them with [`Self::qp_mut`]),
/// so polling, which retires each completion's WR in its QP's send or
/// receive queue, needs no lock. The QPs take CQ credits from the CQ, as a
/// QP with its own CQ does: a post that would leave the CQ without room
/// for every outstanding WR's completion is refused with
/// [`Error::CqFull`], so the CQ never overruns; size it with [`CqSizing`](crate::CqSizing)
/// and that never happens. [`Qp::poll`], [`Qp::arm_cq`] and
/// [`Qp::wait_cq_event`] on these QPs return [`Error::SharedCq`].
///
/// Like a [`Qp`], a `SharedCq` is `Send`, not `Sync`: one thread drives it.
///
/// ```
/// use rdma_direct::*;
/// let pd = Context::open("sim")?.alloc_pd()?;
/// let cfg = QpConfig { max_send_wr: 16, max_recv_wr: 16, ..QpConfig::default() };
/// let mut cq = pd.create_shared_cq(CqSizing::new().qp(&cfg).qp(&cfg).depth()?)?;
/// let (a, b) = (cq.create_qp(&cfg)?, cq.create_qp(&cfg)?);
/// let (mut pa, mut pb) = (pd.create_qp(&cfg)?, pd.create_qp(&cfg)?);
/// Qp::connect_loopback(cq.qp_mut(a), &mut pa)?;
/// Qp::connect_loopback(cq.qp_mut(b), &mut pb)?;
/// let mr = pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
/// let sge = [Sge::new(&mr, 0, 8)?];
/// let to = RemoteAddr { addr: mr.addr() + 8, rkey: mr.rkey() };
/// cq.qp_mut(a).post_send(&[SendWr::rdma_write(1, &sge, to).signaled()])?;
/// cq.qp_mut(b).post_send(&[SendWr::rdma_write(2, &sge, to).signaled()])?;
/// let mut wc = [Completion::default(); 2];
/// let mut got = 0;
/// while got < 2 {
///     got += cq.poll(&mut wc[got..])?;
/// }
/// wc.sort_by_key(|c| c.wr_id);
/// assert_eq!(wc[0].qp_num, cq.qp(a).qp_num());
/// assert_eq!(wc[1].qp_num, cq.qp(b).qp_num());
/// # Ok::<(), rdma_direct::Error>(())
/// ```
pub struct SharedCq {
    // Field order: the QPs go before the CQ they complete into.
    members: Members,
    kind: SharedKind,
    /// Completions of other QPs taken while a QP was reset
    /// ([`Self::reset_qp`]), and an error met after completions were
    /// already in the caller's slice: [`Self::poll`] returns them first.
    pending: VecDeque<Completion>,
    pending_err: Option<Error>,
    pd: Arc<PdInner>,
    /// On a completion channel several CQs share: its place there (given
    /// back after the CQ is destroyed: the last field).
    seat: Option<ChannelSeat>,
}

/// The QPs of a shared CQ and the CQ credits they take from: what polling
/// the CQ needs besides the CQ itself.
pub(crate) struct Members {
    qps: Vec<Qp>,
    pub(crate) credits: CqCredits,
    /// Names this CQ in its QPs (`Qp::shared_cq`): the credits' id.
    tag: usize,
    /// Where the last completion's QP was found in `qps`.
    at: usize,
}

impl Members {
    /// The QP numbered `qpn` that completes into this CQ (completions of
    /// one QP tend to come in runs: the last one found is tried first).
    #[inline]
    pub(crate) fn find(&mut self, qpn: u32) -> Option<&mut Qp> {
        let tag = self.tag;
        let ours = |q: &Qp| q.local.qpn == qpn && q.shared_cq == Some(tag);
        if !self.qps.get(self.at).is_some_and(ours) {
            self.at = self.qps.iter().position(ours)?;
        }
        self.qps.get_mut(self.at)
    }
}

impl SharedQps<DirectQp> for Members {
    #[inline]
    fn find(&mut self, qpn: u32) -> Option<&mut DirectQp> {
        Members::find(self, qpn).and_then(Qp::direct_mut)
    }
    fn credits(&mut self) -> &mut CqCredits {
        &mut self.credits
    }
}

#[cfg(feature = "verbs")]
impl SharedQps<VerbsQp> for Members {
    #[inline]
    fn find(&mut self, qpn: u32) -> Option<&mut VerbsQp> {
        Members::find(self, qpn).and_then(Qp::verbs_mut)
    }
    fn credits(&mut self) -> &mut CqCredits {
        &mut self.credits
    }
}

impl Drop for SharedCq {
    /// Before its QPs and the CQ go, each QP on an SRQ is reset as
    /// [`Self::reset_qp`] does: a receive the SRQ gave it whose completion
    /// sits unpolled in this CQ goes back to the SRQ, which may outlive
    /// the CQ (rdma-core's `mlx5_cq_clean` frees such WQEs likewise). An
    /// error here cannot be reported: the QP is destroyed all the same.
    fn drop(&mut self) {
        for i in 0..self.members.qps.len() {
            if self.members.qps[i].srq.is_some() && self.members.qps[i].state != QpState::Reset {
                if let Err(Error::QpSplit { qpn }) = self.reset_qp(i) {
                    // Its halves live on (no RESET under them): ERR stops
                    // it taking SRQ receives, and the CQ is drained of the
                    // receives it completed (back to the SRQ).
                    let _ = self.members.qps[i].modify(QpState::Err, &QpAttr::default());
                    self.drain_of(qpn);
                }
            }
        }
    }
}

impl SharedCq {
    pub(crate) fn new(
        kind: SharedKind,
        credits: CqCredits,
        pd: Arc<PdInner>,
        seat: Option<ChannelSeat>,
    ) -> Self {
        SharedCq {
            members: Members {
                qps: Vec::new(),
                tag: credits.id(),
                credits,
                at: 0,
            },
            kind,
            pending: VecDeque::new(),
            pending_err: None,
            pd,
            seat,
        }
    }

    /// Creates an RC QP, in RESET, whose sends and receives complete into
    /// this CQ; returns its index for [`Self::qp`] / [`Self::qp_mut`].
    ///
    /// The QPs share the CQ's credits (one per WR outstanding, across all
    /// of them), so a QP may join a CQ smaller than its own `max_send_wr +
    /// max_recv_wr`: its posts are then refused with [`Error::CqFull`] (or
    /// [`Error::NeverFits`] for a batch larger than the CQ) while the CQ is
    /// full, never an overrun. [`CqSizing`](crate::CqSizing) gives a depth
    /// that never limits posting.
    ///
    /// Errors: as [`Pd::create_qp`](crate::Pd::create_qp); [`Error::Config`] when `cfg.cq_depth`
    /// is set (the depth is the shared CQ's).
    pub fn create_qp(&mut self, cfg: &QpConfig) -> Result<usize> {
        let m = &mut self.members;
        let qp = Qp::create(&self.pd, cfg, Some((&self.kind, &m.credits, m.tag)), None)?;
        m.qps.push(qp);
        Ok(m.qps.len() - 1)
    }

    /// [`Self::create_qp`] for a QP whose receives come from `srq` (see
    /// [`Pd::create_qp_on_srq`](crate::Pd::create_qp_on_srq)): the first
    /// QP of this CQ on `srq` takes CQ credits for the SRQ's `max_wr`
    /// receives (size the CQ with [`CqSizing::queue`](crate::CqSizing::queue)
    /// of it), held until the last of them goes.
    ///
    /// Errors: as [`Self::create_qp`]; `srq` of another PD, or fewer CQ
    /// credits free than the SRQ's `max_wr` ([`Error::SrqCqCredits`]).
    pub fn create_qp_on_srq(&mut self, cfg: &QpConfig, srq: &crate::Srq) -> Result<usize> {
        let m = &mut self.members;
        let qp = Qp::create(
            &self.pd,
            cfg,
            Some((&self.kind, &m.credits, m.tag)),
            Some(srq),
        )?;
        m.qps.push(qp);
        Ok(m.qps.len() - 1)
    }

    /// The QP at `index` (as [`Self::create_qp`] returned it).
    ///
    /// # Panics
    /// When no QP has that index.
    pub fn qp(&self, index: usize) -> &Qp {
        &self.members.qps[index]
    }

    /// The QP at `index`, to connect, modify and post on.
    ///
    /// # Panics
    /// When no QP has that index.
    pub fn qp_mut(&mut self, index: usize) -> &mut Qp {
        &mut self.members.qps[index]
    }

    /// Every QP of the CQ, in creation order (e.g. to connect two of them to
    /// each other with `split_at_mut`).
    pub fn qps_mut(&mut self) -> &mut [Qp] {
        &mut self.members.qps
    }

    /// Destroys the QP at `index` (a server's QP whose client left): it is
    /// reset as [`Self::reset_qp`] does (the CQ drained of its completions,
    /// its credits back), then dropped. The QPs after it move down one
    /// index, as in `Vec::remove` ([`Self::index_of`] finds them again).
    ///
    /// Errors: as [`Self::reset_qp`]; the QP stays on error.
    ///
    /// # Panics
    /// When no QP has that index.
    pub fn remove_qp(&mut self, index: usize) -> Result<()> {
        self.reset_qp(index)?;
        self.members.qps.remove(index);
        self.members.at = 0;
        Ok(())
    }

    /// The index of the QP numbered `qp_num` (a [`Completion::qp_num`]), if
    /// it is one of this CQ's.
    pub fn index_of(&self, qp_num: u32) -> Option<usize> {
        self.members.qps.iter().position(|q| q.qp_num() == qp_num)
    }

    /// How many QPs complete into this CQ.
    pub fn len(&self) -> usize {
        self.members.qps.len()
    }

    /// Whether no QP completes into this CQ yet.
    pub fn is_empty(&self) -> bool {
        self.members.qps.is_empty()
    }

    /// Depth in CQEs, as the device made it.
    pub fn depth(&self) -> u32 {
        self.members.credits.depth()
    }

    /// CQ credits free now: how many more WRs the QPs may post (or hold as
    /// receives) before a post is refused with [`Error::CqFull`].
    pub fn credits_free(&self) -> u32 {
        self.members.credits.free()
    }

    /// Polls up to `out.len()` completions of any of its QPs into `out`;
    /// returns how many. Each completion's `qp_num` names its QP.
    ///
    /// Errors: [`Error::ForeignCqe`] for a completion of a QP not created on
    /// this CQ (e.g. one swapped out of [`Self::qp_mut`]); [`Error::StaleCqe`];
    /// the device's. An error met after some completions were taken is
    /// kept and returned by a later call, once the completions taken before
    /// it have been returned, so none is lost.
    #[inline]
    pub fn poll(&mut self, out: &mut [Completion]) -> Result<usize> {
        if !self.pending.is_empty() || self.pending_err.is_some() {
            return self.poll_pending(out);
        }
        // An empty CQ: one load and one compare.
        match &self.kind {
            SharedKind::Direct(c) if !c.has_cqe() => return Ok(0),
            _ => {}
        }
        self.poll_cq_now(out)
    }

    /// [`Self::poll`] with nothing pending. Out of line, so that the empty
    /// poll inlined into the caller needs none of its registers.
    #[inline(never)]
    fn poll_cq_now(&mut self, out: &mut [Completion]) -> Result<usize> {
        let (n, r) = self.take(out.len(), None, |k, c| out[k] = c);
        match r {
            Ok(()) => Ok(n),
            Err(e) if n > 0 => {
                self.pending_err = Some(e);
                Ok(n)
            }
            Err(e) => Err(e),
        }
    }

    /// [`Self::poll`] while completions or an error are pending.
    #[cold]
    fn poll_pending(&mut self, out: &mut [Completion]) -> Result<usize> {
        let n = out.len().min(self.pending.len());
        for (o, c) in out.iter_mut().zip(self.pending.drain(..n)) {
            *o = c;
        }
        match self.pending_err.take() {
            Some(e) if n == 0 => Err(e),
            e => {
                self.pending_err = e;
                Ok(n)
            }
        }
    }

    /// Takes up to `max` completions from the CQ into `put` (called with
    /// each one's position), dropping those of QP `skip`.
    #[inline]
    fn take(
        &mut self,
        max: usize,
        skip: Option<u32>,
        put: impl FnMut(usize, Completion),
    ) -> (usize, Result<()>) {
        match &mut self.kind {
            SharedKind::Direct(c) => c.take_shared(&mut self.members, max, skip, put),
            #[cfg(feature = "verbs")]
            SharedKind::Verbs(c) => verbs::take_shared(c, &mut self.members, max, skip, put),
        }
    }

    /// Moves the QP at `index` to RESET whatever it has outstanding, as
    /// rdma-core's providers do when they clean a CQ of a QP they reset
    /// (`mlx5_cq_clean`): once the device has it in RESET it writes no more
    /// completions for it, so the CQ is drained then; the QP's completions
    /// are dropped, the other QPs' are kept and returned by the next polls
    /// first; the CQ credits of everything the QP had outstanding (including
    /// unsignaled WRs that completed without a CQE) go back. The QP can then
    /// be connected again. [`Qp::modify`] to RESET on a QP of a shared CQ
    /// does this only when nothing is outstanding.
    ///
    /// Errors: [`Error::NotOnCq`] when the QP at `index` does not complete
    /// into this CQ (one swapped in through [`Self::qp_mut`]); the device's
    /// refusal of the transition (nothing changed in either case). An error
    /// met while draining is kept for a later poll.
    ///
    /// # Panics
    /// When no QP has that index.
    pub fn reset_qp(&mut self, index: usize) -> Result<()> {
        let qp = &mut self.members.qps[index];
        if qp.shared_cq != Some(self.members.tag) {
            return Err(Error::NotOnCq {
                qpn: qp.qp_num(),
                index,
            });
        }
        let qpn = qp.qp_num();
        // Halves dropped: their queues back first, so that what they left
        // outstanding is counted (split, the QP's own copies hold none).
        qp.rejoin_parked();
        let outstanding = qp.outstanding();
        qp.modify_with(QpState::Reset, &QpAttr::default(), true)?;
        self.drain_of(qpn);
        self.members.credits.give(outstanding);
        Ok(())
    }

    /// Drains the CQ of QP `qpn`'s completions (an SRQ's receives among
    /// them go back to it), keeping every other QP's for later polls: its
    /// completions taken earlier (by another QP's reset) go too, and an
    /// error (a foreign CQE) is kept for a later poll while the draining
    /// goes on past it.
    fn drain_of(&mut self, qpn: u32) {
        self.pending.retain(|c| c.qp_num != qpn);
        let mut pending = std::mem::take(&mut self.pending);
        loop {
            let (_, r) = self.take(usize::MAX, Some(qpn), |_, c| pending.push_back(c));
            match r {
                Ok(()) => break,
                Err(e) => {
                    self.pending_err.get_or_insert(e);
                }
            }
        }
        self.pending = pending;
    }

    /// Requests one completion event, as [`Qp::arm_cq`] does for a QP's own CQ.
    ///
    /// On a shared [`CompChannel`](crate::CompChannel) the event goes
    /// there, naming this CQ's token: arm again only after taking it (the
    /// arm carries the count of events taken as its sequence number, PRM
    /// "CQ doorbell"; one made before is a repeat, as on ConnectX).
    pub fn arm_cq(&mut self, solicited_only: bool) -> Result<()> {
        match &mut self.kind {
            SharedKind::Direct(c) => c.arm(solicited_only),
            #[cfg(feature = "verbs")]
            SharedKind::Verbs(c) => c.arm(solicited_only),
        }
    }

    /// Sleeps until the armed CQ raises its event or `timeout` passes, as
    /// [`Qp::wait_cq_event`]; `true` if an event came (consumed and acked).
    ///
    /// Errors: [`Error::ChannelShared`] on a shared [`CompChannel`](crate::CompChannel)
    /// (its events are taken there); the wait's ([`Error::Verbs`]).
    pub fn wait_cq_event(&mut self, timeout: Duration) -> Result<bool> {
        self.own_channel()?;
        match &mut self.kind {
            SharedKind::Direct(c) => c.wait_event(timeout),
            #[cfg(feature = "verbs")]
            SharedKind::Verbs(c) => c.wait(timeout),
        }
    }

    /// Waits for completions of any of its QPs in `mode` (busy polling,
    /// events, or adaptive: see [`CompletionMode`]): returns as soon as at
    /// least one is in `out`, or 0 when `timeout` passed first.
    ///
    /// Errors: `out` is empty ([`Error::Config`]); a mode other than
    /// busy polling on a shared [`CompChannel`](crate::CompChannel)
    /// ([`Error::ChannelShared`]: wait on the channel); as [`Self::poll`].
    pub fn wait(
        &mut self,
        out: &mut [Completion],
        mode: CompletionMode,
        timeout: Duration,
    ) -> Result<usize> {
        if mode != CompletionMode::Busy {
            self.own_channel()?;
        }
        wait_on(self, out, mode, timeout)
    }

    /// The token this CQ's events carry on a shared
    /// [`CompChannel`](crate::CompChannel), or `None` if it has a channel
    /// of its own.
    pub fn channel_token(&self) -> Option<u64> {
        self.seat.as_ref().map(ChannelSeat::token)
    }

    /// `Ok` if the CQ's events come through its own channel.
    fn own_channel(&self) -> Result<()> {
        match self.channel_token() {
            None => Ok(()),
            Some(token) => Err(Error::ChannelShared { token }),
        }
    }
}

impl CqOps for SharedCq {
    fn poll_cq(&mut self, out: &mut [Completion]) -> Result<usize> {
        self.poll(out)
    }
    fn arm_cq(&mut self) -> Result<()> {
        SharedCq::arm_cq(self, false)
    }
    fn wait_cq(&mut self, timeout: Duration) -> Result<bool> {
        self.wait_cq_event(timeout)
    }
    fn event_wake(&mut self, waker: &std::task::Waker) -> Result<crate::backend::EventWake<'_>> {
        self.own_channel()?;
        Ok(match &mut self.kind {
            SharedKind::Direct(c) => c.event_wake(waker),
            #[cfg(feature = "verbs")]
            SharedKind::Verbs(c) => crate::backend::EventWake::Fd(c.channel_fd()),
        })
    }
    fn take_events(&mut self) -> Result<u32> {
        self.own_channel()?;
        match &mut self.kind {
            SharedKind::Direct(c) => c.take_events(),
            #[cfg(feature = "verbs")]
            SharedKind::Verbs(c) => c.take_events(),
        }
    }
}
