//! RC queue pairs: connection, state changes, posting and polling; the
//! sim's test hooks.

mod checks;
pub(crate) mod create;
mod dc;
pub(crate) mod held;
mod masked;
mod mw;
mod one_opcode;
mod owned_posts;
mod recv_posts;
pub(crate) mod split;
mod ud;

use crate::backend::direct;
#[cfg(feature = "verbs")]
use crate::backend::verbs;
use crate::backend::{QpBackend, WrCounts};
use crate::cq::wait::{wait_on, CqOps};
use crate::device::handles::{PdInner, PdKind};
use crate::ib::completion::Completion;
use crate::ib::config::{CompletionMode, QpConfig};
use crate::ib::device::DataPath;
use crate::ib::error::{Error, Result};
use crate::ib::mem::Access;
use crate::ib::progress::WrProgress;
use crate::ib::qp_attr::{
    self, AddressVector, Endpoint, Grh, PathInfo, QpAttr, QpInfo, QpState, QpType,
};
use crate::ib::wr::{SendWr, SendWrs, Sge, BYTES_PD};
use crate::pd::reclaim::DeregQueue;
use crate::qp::held::Owned;
use crate::srq::SrqLink;
use std::sync::Arc;
use std::time::Duration;

/// Calls the [`QpBackend`] method `m(args)` on the backend a [`QpKind`]
/// holds (`&self.kind` or `&mut self.kind`): one `match`, each arm the
/// backend's own method inlined (static dispatch, as written by hand).
macro_rules! backend {
    ($kind:expr, $m:ident ( $($arg:expr),* )) => {
        match $kind {
            QpKind::Direct(q) => QpBackend::$m(q, $($arg),*),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => QpBackend::$m(q, $($arg),*),
        }
    };
}
pub(crate) use backend;

/// A queue pair (RC, UC or UD: [`QpConfig::qp_type`]), with its own completion queue ([`Pd::create_qp`](crate::Pd::create_qp)) or
/// on a [`SharedCq`](crate::SharedCq) ([`SharedCq::create_qp`](crate::SharedCq::create_qp)).
// repr(C): `kind` at offset 0, so that a `&mut Qp` is the `&mut DirectQp`
// the data path's out-of-line parts take (no second pointer kept live).
#[repr(C)]
pub struct Qp {
    // Field order: the QP goes first; then the buffers its WRs held (no WR
    // can touch them once it is destroyed); then dropped MRs that waited
    // for its WRs are deregistered (`reclaim`).
    pub(crate) kind: QpKind,
    pub(crate) owned: Owned,
    /// Its completions go to a [`SharedCq`], which polls them (the tag that
    /// names that CQ).
    pub(crate) shared_cq: Option<usize>,
    pub(crate) state: QpState,
    /// Its PD's id (`PdInner::id`), which every SGE posted must carry.
    pub(crate) pd_id: u32,
    pub(crate) cfg: QpConfig,
    pub(crate) local: Endpoint,
    /// The SRQ its receives come from, and the CQ credits held there
    /// (given back after the QP is destroyed: field order).
    pub(crate) srq: Option<SrqLink>,
    pub(crate) pd: Arc<PdInner>,
    /// Split into a send half and a receive half (`split.rs`): what they
    /// share with it.
    pub(crate) halves: Option<Arc<Halves>>,
    pub(crate) _reclaim: ReclaimOnDrop,
}

/// What a split QP and its halves share (`split.rs`): the link, and the
/// halves' copies once dropped (parked until the QP takes them back).
pub(crate) struct Halves {
    pub(crate) link: Arc<crate::ib::progress::HalfLink>,
    pub(crate) parked: std::sync::Mutex<Parked>,
    /// The QP (the CQ's owner) was dropped while its halves lived: nothing
    /// polls their completions any more.
    pub(crate) owner_gone: std::sync::atomic::AtomicBool,
}

/// The halves' backend copies, parked as each is dropped.
#[derive(Default)]
pub(crate) struct Parked {
    pub(crate) send: Option<QpKind>,
    pub(crate) recv: Option<QpKind>,
}

impl Drop for Qp {
    /// A split QP whose halves were both dropped takes them back first, so
    /// its backend's drop sees the whole QP (a QP on an SRQ gives the
    /// receives of its unpolled completions back).
    fn drop(&mut self) {
        if self.halves.is_some() && !self.rejoin_parked() {
            if let Some(h) = &self.halves {
                h.owner_gone
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                // A half waiting for room: none will come.
                h.link.wake_all();
            }
        }
    }
}

/// Looks at the PD's dropped MRs once the QP is gone (its WRs with it).
pub(crate) struct ReclaimOnDrop(pub(crate) Arc<DeregQueue>);

impl Drop for ReclaimOnDrop {
    fn drop(&mut self) {
        self.0.sweep();
    }
}

impl Qp {
    /// Connects two QPs of the same PD to each other (loopback on one
    /// device): each goes RESET -> INIT -> RTR -> RTS with the peer's QPN and
    /// PSN, path MTU the port's active MTU, RoCE v2 GID as in [`QpConfig`],
    /// and each QP's own `rnr_retry` ([`Self::connect_remote`] on each side).
    ///
    /// Errors: the QPs belong to different PDs, or either is not in RESET
    /// ([`Error::ForeignPd`], [`Error::NotInReset`], nothing changed); a failed transition (the QP is
    /// left where it got to).
    pub fn connect_loopback(a: &mut Qp, b: &mut Qp) -> Result<()> {
        if !Arc::ptr_eq(&a.pd, &b.pd) {
            return Err(Error::ForeignPd {
                object: crate::PdObject::Qp,
            });
        }
        if a.state != QpState::Reset || b.state != QpState::Reset {
            return Err(Error::NotInReset {
                op: "connect_loopback (both QPs)",
                state: if a.state != QpState::Reset {
                    a.state
                } else {
                    b.state
                },
            });
        }
        let (ea, eb) = (a.local, b.local);
        let (psn_a, psn_b) = (random_psn(), random_psn());
        a.connect_remote(psn_a, &eb, psn_b)?;
        if let Err(e) = b.connect_remote(psn_b, &ea, psn_a) {
            let _ = a.modify(QpState::Reset, &QpAttr::default());
            return Err(e);
        }
        Ok(())
    }

    /// Connects this QP (in RESET) to a peer on another host, whose facts
    /// came over an out-of-band exchange ([`exchange`](crate::connect::exchange)): RESET -> INIT ->
    /// RTR (toward `peer`, expecting `peer_psn` first) -> RTS (sending from
    /// `my_psn`, `rnr_retry` from the QP's config).
    ///
    /// Errors: the QP is not in RESET, or an attribute built from `peer`,
    /// `peer_psn` or `my_psn` is out of range: refused before any change.
    /// A transition the device refuses: the QP is put back in RESET.
    pub fn connect_remote(&mut self, my_psn: u32, peer: &Endpoint, peer_psn: u32) -> Result<()> {
        let (init, rts) = match self.cfg.qp_type {
            QpType::Rc => (
                QpAttr::init(self.cfg.port, Access::QP_ALL),
                QpAttr::rts(my_psn, self.cfg.rnr_retry),
            ),
            // UC takes no READ or atomic: REMOTE_WRITE alone.
            QpType::Uc => (
                QpAttr::init(self.cfg.port, Access::LOCAL_WRITE | Access::REMOTE_WRITE),
                QpAttr::rts_unreliable(my_psn),
            ),
            QpType::Ud => {
                return Err(Error::WrongTransport {
                    qp_type: QpType::Ud,
                    op: "connecting to a peer (bring a UD QP up with Qp::ready_ud)",
                })
            }
            t @ (QpType::Dci | QpType::Dct) => return Err(Error::WrongTransport {
                qp_type: t,
                op: "connecting to a peer (bring a DC QP up with Qp::ready_dci or Qp::ready_dct)",
            }),
        };
        let rtr = self.rtr_attr(peer, peer_psn);
        self.connect_steps(init, rtr, rts)
    }

    /// RESET -> INIT -> RTR -> RTS with these attributes, every step checked
    /// before the first modify; a failed modify takes the QP back to RESET.
    pub(crate) fn connect_steps(&mut self, init: QpAttr, rtr: QpAttr, rts: QpAttr) -> Result<()> {
        if self.state != QpState::Reset {
            return Err(Error::NotInReset {
                op: "connecting",
                state: self.state,
            });
        }
        let steps = [
            (QpState::Reset, QpState::Init, init),
            (QpState::Init, QpState::Rtr, rtr),
            (QpState::Rtr, QpState::Rts, rts),
        ];
        for (from, to, attr) in &steps {
            qp_attr::check_modify(self.cfg.qp_type, *from, *to, attr, self.local.roce)?;
        }
        for (_, to, attr) in &steps {
            if let Err(e) = self.modify(*to, attr) {
                if self.state != QpState::Reset {
                    let _ = self.modify(QpState::Reset, &QpAttr::default());
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// The direct-path QP behind this one, if it is one.
    pub(crate) fn direct_mut(&mut self) -> Option<&mut direct::DirectQp> {
        match &mut self.kind {
            QpKind::Direct(q) => Some(q),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(_) => None,
        }
    }

    /// The verbs QP behind this one, if it is one.
    #[cfg(feature = "verbs")]
    pub(crate) fn verbs_mut(&mut self) -> Option<&mut verbs::VerbsQp> {
        match &mut self.kind {
            QpKind::Verbs(q) => Some(q),
            QpKind::Direct(_) => None,
        }
    }

    /// The configuration the QP was created with.
    pub fn config(&self) -> &QpConfig {
        &self.cfg
    }

    /// The ibverbs device the QP lives on; `None` on the sim.
    #[cfg(feature = "verbs")]
    pub(crate) fn verbs_device(&self) -> Option<&str> {
        match &self.pd.kind {
            PdKind::Verbs(pd, _) => Some(&pd.ctx.name),
            PdKind::Sim(..) => None,
        }
    }

    /// A random first PSN (24 bits) for [`Self::connect_remote`].
    pub fn random_psn() -> u32 {
        random_psn()
    }

    /// Requests one completion event for the QP's CQ: the next completion
    /// (with `solicited_only`, the next solicited or error one) makes
    /// [`Self::wait_cq_event`] return. A completion already in the CQ raises
    /// none, so poll once more after arming (verbs `ibv_req_notify_cq`; the
    /// direct path writes the arm doorbell itself).
    pub fn arm_cq(&mut self, solicited_only: bool) -> Result<()> {
        backend!(&mut self.kind, arm_cq(solicited_only))
    }

    /// Sleeps (`poll` on the completion channel's fd) until the armed CQ
    /// raises its event or `timeout` passes; `true` if an event came. The
    /// event is consumed and acknowledged; arm again for the next.
    pub fn wait_cq_event(&mut self, timeout: std::time::Duration) -> Result<bool> {
        backend!(&mut self.kind, wait_cq_event(timeout))
    }

    /// This side's half of a connection, to hand to the peer.
    pub fn endpoint(&self) -> Endpoint {
        self.local
    }

    /// The INIT -> RTR attributes toward `peer` whose first PSN is
    /// `peer_psn`: a global address vector on RoCE (our chosen GID index,
    /// hop limit 64), path MTU the smaller of the two active MTUs,
    /// `min_rnr_timer` from the QP's config, one READ/atomic in flight.
    pub fn rtr_attr(&self, peer: &Endpoint, peer_psn: u32) -> QpAttr {
        let av = self.av_to(peer);
        let mtu = match (self.local.active_mtu, peer.active_mtu) {
            (0, 0) => 1,
            (0, m) | (m, 0) => m,
            (a, b) => a.min(b),
        };
        if self.cfg.qp_type != QpType::Rc {
            return QpAttr::rtr_uc(av, mtu, peer.qpn, peer_psn);
        }
        QpAttr {
            min_rnr_timer: Some(self.cfg.min_rnr_timer),
            ..QpAttr::rtr(av, mtu, peer.qpn, peer_psn)
        }
    }

    /// The address vector toward `peer`'s port: global on RoCE (our GID
    /// index, the peer's GID, hop limit 64), from the QP's config port. For
    /// an RTR, or for [`Pd::create_ah`](crate::Pd::create_ah) (UD).
    pub fn av_to(&self, peer: &Endpoint) -> AddressVector {
        let grh = self.local.roce.then(|| Grh {
            dgid: peer.gid,
            sgid_index: self.local.gid_index.unwrap_or(0),
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        });
        AddressVector {
            dlid: peer.lid,
            port: self.cfg.port,
            grh,
            service_level: 0,
        }
    }

    /// Moves the QP to `to` with `attr` (IB spec 11.2.4.2). The attributes
    /// are checked first ([`qp_attr::check_modify`], the QP type's table): every one the
    /// transition requires must be there, no other, each in range, and on
    /// RoCE the address vector must be global; otherwise
    /// [`Error::QpAttr`] names the attribute and nothing changes.
    ///
    /// Moving to RESET forgets every outstanding WR and discards the QP's
    /// completions not yet polled; the QP can then be connected again
    /// (ERR -> RESET -> INIT -> RTR -> RTS). A QP on a [`SharedCq`](crate::SharedCq) moves to
    /// RESET here only with no WR outstanding ([`Error::SharedCqOutstanding`]
    /// otherwise): the CQ holds other QPs' completions too, so reset it with
    /// [`SharedCq::reset_qp`](crate::SharedCq::reset_qp), which drains the CQ of its completions.
    pub fn modify(&mut self, to: QpState, attr: &QpAttr) -> Result<()> {
        self.modify_with(to, attr, false)
    }

    /// RTS -> SQD asking for the event (`IBV_QP_EN_SQD_ASYNC_NOTIFY`): the
    /// sends posted so far run to completion, and then the device raises
    /// [`AsyncEvent::SqDrained`](crate::AsyncEvent::SqDrained) naming this
    /// QP ([`Context::async_events`](crate::Context::async_events)). Posting
    /// sends is refused in SQD ([`Error::QpState`]); receives go on. Back to
    /// RTS with `modify(QpState::Rts, &QpAttr::default())`. IB spec
    /// 10.3.1.4, `ibv_modify_qp(3)`.
    ///
    /// Errors: a QP not in RTS ([`Error::QpAttr`]: no such transition);
    /// a split QP ([`Error::QpSplit`]); the device's ([`Error::Verbs`]).
    pub fn drain_sq(&mut self) -> Result<()> {
        let attr = QpAttr {
            sqd_notify: Some(true),
            ..QpAttr::default()
        };
        self.modify(QpState::Sqd, &attr)
    }

    /// Sends and receives posted and not yet retired.
    pub(crate) fn outstanding(&self) -> u32 {
        self.counts().outstanding() as u32
    }

    /// [`Self::modify`]; `cq_drained`: the caller ([`SharedCq::reset_qp`])
    /// drains the shared CQ of this QP's completions after a RESET.
    pub(crate) fn modify_with(
        &mut self,
        to: QpState,
        attr: &QpAttr,
        cq_drained: bool,
    ) -> Result<()> {
        qp_attr::check_modify(self.cfg.qp_type, self.state, to, attr, self.local.roce)?;
        if matches!(to, QpState::Reset | QpState::Sqd)
            && self.halves.is_some()
            && !self.rejoin_parked()
        {
            // The halves' copies of the queues would go on from where the
            // RESET took them back from; a send half would post into SQD.
            return Err(Error::QpSplit {
                qpn: self.local.qpn,
            });
        }
        if to == QpState::Reset && self.shared_cq.is_some() && !cq_drained {
            let outstanding = self.outstanding();
            if outstanding > 0 {
                return Err(Error::SharedCqOutstanding {
                    qpn: self.local.qpn,
                    outstanding,
                });
            }
        }
        let sim = matches!(self.pd.kind, PdKind::Sim(..));
        // The sim has one port, as its `create_qp` says.
        let ports = [attr.port, attr.av.map(|av| av.port)];
        if let Some(&p) = ports.iter().flatten().find(|&&p| sim && p != 1) {
            return Err(Error::Config {
                field: "port (the sim has one)",
                value: p as u64,
                min: 1,
                max: 1,
            });
        }
        let local = self.local;
        // The path facts an RTR or RTS sets (the sim has no wire: none).
        let update = |mut p: PathInfo| {
            if let Some(av) = attr.av {
                p.link_layer = if av.grh.is_some() { "Ethernet" } else { "IB" };
                p.gid_index = av.grh.map(|g| g.sgid_index);
                p.gid = local.gid;
                p.lid = local.lid;
            }
            if let Some(m) = attr.path_mtu {
                p.mtu = Some(128 << m.clamp(1, 5));
            }
            if let Some(d) = attr.dest_qpn {
                p.dest_qpn = d;
            }
            if let Some(psn) = attr.sq_psn {
                p.sq_psn = psn;
            }
            p
        };
        backend!(&mut self.kind, modify(self.state, to, attr))?;
        if !sim {
            let p = update(backend!(&self.kind, path()));
            backend!(&mut self.kind, set_path(p));
        }
        self.state = to;
        if let Some(n) = self.dct_number() {
            // A DCT's number exists from RTR on (`Qp::dct_number`).
            self.local.qpn = n;
        }
        if to == QpState::Reset {
            // Every WR was retired: MRs dropped while they were outstanding may go.
            self.pd.dereg.sweep();
        }
        Ok(())
    }

    /// The device's view of the QP: its state (ERR after an error, even if
    /// this crate left it in RTS) and connection attributes.
    pub fn query(&self) -> Result<QpInfo> {
        backend!(&self.kind, query())
    }

    /// Depth of the QP's CQ in CQEs, as the device made it.
    pub fn cq_depth(&self) -> u32 {
        backend!(&self.kind, cq_depth())
    }

    /// The state this crate took the QP to.
    pub fn state(&self) -> QpState {
        self.state
    }

    /// The largest inline payload this QP takes, in bytes (what the device
    /// granted; at least [`QpConfig::max_inline`]).
    pub fn max_inline(&self) -> u32 {
        match &self.kind {
            QpKind::Direct(q) => q.granted_inline().unwrap_or(self.cfg.max_inline),
            #[cfg(feature = "verbs")]
            QpKind::Verbs(q) => q.max_inline(),
        }
    }

    /// The most SGEs a send WR may carry on this QP (what the device
    /// granted; at least [`QpConfig::max_send_sge`]).
    pub fn max_send_sge(&self) -> u32 {
        backend!(&self.kind, max_send_sge())
    }

    /// QP number (24 bits).
    pub fn qp_num(&self) -> u32 {
        backend!(&self.kind, qpn())
    }

    /// How this QP reaches its peer.
    pub fn path(&self) -> PathInfo {
        backend!(&self.kind, path())
    }

    /// The data path the QP posts and polls on.
    pub fn data_path(&self) -> DataPath {
        match &self.kind {
            QpKind::Direct(_) => DataPath::Direct,
            #[cfg(feature = "verbs")]
            QpKind::Verbs(_) => DataPath::Verbs,
        }
    }

    /// Posts a batch of send work requests with one doorbell. Every WR is
    /// checked first; on any error nothing is posted. [`Error::QueueFull`]
    /// when the send queue has no room for the whole batch, [`Error::CqFull`]
    /// when its CQ has no room for their completions (CQ credits): poll and
    /// post again. A batch larger than `max_send_wr` or the CQ, which could
    /// never fit, is [`Error::NeverFits`].
    ///
    /// A QP that is not connected (RTS) refuses every WR with
    /// [`Error::QpState`] (a QP in ERR takes them and flushes them); an SGE of an MR of another PD (or device) is
    /// [`Error::ForeignPd`] (only its own PD's QPs hold a dropped MR back).
    ///
    /// By transport: a UC QP refuses RDMA READ and atomics; a UD QP takes
    /// only UD sends ([`SendWr::ud_send`]) through an AH of its PD to a
    /// 24-bit QPN, each at most [`Self::ud_mtu`] bytes
    /// ([`Error::MessageTooLong`]); an RC or UC QP refuses a UD send (the
    /// others are [`Error::WrongTransport`]).
    #[inline(always)]
    #[cfg_attr(not(feature = "verbs"), allow(irrefutable_let_patterns))]
    pub fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<()> {
        // One WR of the common kinds on the direct path: built in place with
        // the checks it needs, each once (`DirectQp::post_one`). Anything
        // else, or anything that one would refuse, takes the general path,
        // which checks everything from the start and says why.
        // The commonest (one SGE, a WRITE or a SEND; an inline WRITE of
        // plain bytes; a UD SEND of one SGE) inlined into the caller; the
        // other in-place posts out of line.
        if let QpKind::Direct(q) = &mut self.kind {
            if let [w] = wrs {
                if w.inline {
                    if q.post_inline_write(w).is_ok() {
                        return Ok(());
                    }
                    return self.post_send_inline(w);
                }
                if q.post_one_sge(w, self.pd_id).is_ok() {
                    return Ok(());
                }
                return self.post_send_one_direct(w);
            }
            return self.post_send_direct(wrs);
        }
        // One WR of the common kinds on the verbs path: its lean post,
        // which declines (changing nothing) what it does not take.
        #[cfg(feature = "verbs")]
        if let (QpKind::Verbs(q), [w]) = (&mut self.kind, wrs) {
            if let Some(r) = q.post_one_fast(w, self.pd_id) {
                return r;
            }
        }
        self.post_send_checked(wrs)
    }

    /// [`Self::post_send`] of one inline WR on the direct path:
    /// `DirectQp::post_one_inline`, then `DirectQp::post_one` (the counted
    /// post mode), then the checked path.
    #[inline(never)]
    #[cfg_attr(not(feature = "verbs"), allow(irrefutable_let_patterns))]
    fn post_send_inline(&mut self, w: &SendWr<'_>) -> Result<()> {
        if let QpKind::Direct(q) = &mut self.kind {
            if q.post_one_inline(w).is_ok() || q.post_one(w, self.pd_id).is_ok() {
                return Ok(());
            }
        }
        self.post_send_checked(std::slice::from_ref(w))
    }

    /// [`Self::post_send`] of one WR on the direct path that its inlined
    /// post did not take: `DirectQp::post_one` (inline WRs, the other
    /// opcodes, the counted and UD post modes), then the checked path.
    #[inline(never)]
    #[cfg_attr(not(feature = "verbs"), allow(irrefutable_let_patterns))]
    fn post_send_one_direct(&mut self, w: &SendWr<'_>) -> Result<()> {
        if let QpKind::Direct(q) = &mut self.kind {
            if q.post_one(w, self.pd_id).is_ok() {
                return Ok(());
            }
        }
        self.post_send_checked(std::slice::from_ref(w))
    }

    /// [`Self::post_send`] of a batch (or nothing) on the direct path:
    /// `DirectQp::post_many`, then the checked path.
    #[inline(never)]
    #[cfg_attr(not(feature = "verbs"), allow(irrefutable_let_patterns))]
    fn post_send_direct(&mut self, wrs: &[SendWr<'_>]) -> Result<()> {
        if let QpKind::Direct(q) = &mut self.kind {
            let posted = match wrs {
                [] | [_] => Err(direct::Declined::Shape),
                _ => q.post_many(wrs, self.pd_id),
            };
            if posted.is_ok() {
                return Ok(());
            }
        }
        self.post_send_checked(wrs)
    }

    /// [`Self::post_send`] with every check, for every WR and backend: the
    /// path every WR the in-place posts decline takes, and the one owner of
    /// the checks of a send WR against the QP's state and limits (the
    /// backends check only room and what the ring alone knows). It never
    /// goes back to the in-place posts.
    #[inline(never)]
    pub(crate) fn post_send_checked<W: SendWrs + ?Sized>(&mut self, wrs: &W) -> Result<()> {
        if self.halves.is_some() && !self.rejoin_parked() {
            return Err(Error::QpSplit {
                qpn: self.local.qpn,
            });
        }
        if self.cfg.qp_type.is_dc() && wrs.count() > 0 {
            // (Whatever its state: a DCT sends nothing, a DCI only by post_dc.)
            self.check_transport(&wrs.wr(0), false)?;
        }
        if !matches!(self.state, QpState::Rts | QpState::Err) {
            return Err(Error::QpState {
                state: self.state,
                needs: if self.state == QpState::Sqd {
                    "RTS: SQD takes no sends; back with modify(QpState::Rts, &QpAttr::default())"
                } else {
                    "RTS (or ERR, where it is flushed)"
                },
            });
        }
        self.check_send_wrs(wrs, false)?;
        let binds = self.claim_binds(wrs)?;
        let r = backend!(&mut self.kind, post_send(wrs));
        if binds && r.is_err() {
            self.binds_not_posted(wrs);
        }
        match r {
            Err(Error::QueueFull | Error::CqFull) => Err(self.never_fits(
                wrs.count(),
                crate::Queue::Send,
                self.cfg.max_send_wr,
                r.unwrap_err(),
            )),
            r => r,
        }
    }

    /// A full queue or CQ (`e`) that polling cannot cure: a batch of `n`
    /// WRs larger than the queue (`queue`: `max_send_wr` or `max_recv_wr`)
    /// or the CQ is [`Error::NeverFits`], so the caller does not retry it for
    /// ever.
    #[cold]
    pub(crate) fn never_fits(&self, n: usize, which: crate::Queue, queue: u32, e: Error) -> Error {
        if n > queue as usize {
            return Error::NeverFits {
                wrs: n,
                queue: which,
                depth: queue,
            };
        }
        let depth = self.cq_depth();
        if n > depth as usize {
            return Error::NeverFits {
                wrs: n,
                queue: crate::Queue::Cq,
                depth,
            };
        }
        e
    }

    /// Every SGE names memory of this QP's PD: the device checks that too,
    /// but only the PD's own QPs hold its dropped MRs back, so a WR on a QP
    /// of another PD (or device) must never name one.
    #[inline]
    pub(crate) fn check_pd(&self, sges: &[Sge<'_>]) -> Result<()> {
        if sges.iter().any(|s| s.pd() == BYTES_PD) {
            return Err(Error::BytesSge);
        }
        if sges.iter().any(|s| s.pd() != self.pd.id) {
            return Err(Error::ForeignPd {
                object: crate::PdObject::Sge,
            });
        }
        Ok(())
    }

    fn progress(&self) -> &WrProgress {
        backend!(&self.kind, progress())
    }

    /// The QP's WRs counted since it was created ([`WrCounts`]).
    pub(crate) fn counts(&self) -> WrCounts {
        backend!(&self.kind, counts())
    }

    /// Waits for completions of the QP's own CQ in `mode` (busy polling,
    /// events, or adaptive: see [`CompletionMode`]): returns as soon as at
    /// least one is in `out`, or 0 when `timeout` passed first.
    ///
    /// Errors: `out` is empty ([`Error::Config`]); [`Error::SharedCq`] on a
    /// QP of a [`SharedCq`](crate::SharedCq) (wait there); the device's.
    pub fn wait(
        &mut self,
        out: &mut [Completion],
        mode: CompletionMode,
        timeout: std::time::Duration,
    ) -> Result<usize> {
        wait_on(self, out, mode, timeout)
    }

    /// Polls up to `out.len()` completions into `out`; returns how many.
    ///
    /// Errors: [`Error::SharedCq`] when the QP completes into a [`SharedCq`](crate::SharedCq)
    /// (poll that); [`Error::StaleCqe`]; the device's.
    #[inline(always)] // the empty poll, and the poll of one send's CQE, are inline
    pub fn poll(&mut self, out: &mut [Completion]) -> Result<usize> {
        backend!(&mut self.kind, poll(out))
    }
}

/// A random 24-bit PSN (as perftest and `ibv_rc_pingpong` pick them).
fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    (h.finish() as u32) & 0xff_ffff
}

// (Not boxed: the post and poll paths reach the direct QP's rings through
// it, and a box would be one more dependent load on every call.)
#[allow(clippy::large_enum_variant)]
pub(crate) enum QpKind {
    Direct(direct::DirectQp),
    #[cfg(feature = "verbs")]
    Verbs(verbs::VerbsQp),
}

impl CqOps for Qp {
    fn poll_cq(&mut self, out: &mut [Completion]) -> Result<usize> {
        self.poll(out)
    }
    fn arm_cq(&mut self) -> Result<()> {
        Qp::arm_cq(self, false)
    }
    fn wait_cq(&mut self, timeout: Duration) -> Result<bool> {
        self.wait_cq_event(timeout)
    }
    fn event_wake(&mut self, waker: &std::task::Waker) -> Result<crate::backend::EventWake<'_>> {
        backend!(&mut self.kind, event_wake(waker))
    }
    fn take_events(&mut self) -> Result<u32> {
        backend!(&mut self.kind, take_events())
    }
}
