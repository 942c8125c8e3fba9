//! The direct data path: work requests become mlx5 WQEs written by our own
//! ring driver (`mlx5_dv::driver`); completions are parsed from raw CQEs.
//! Runs on the sim today; on ConnectX once `mlx5dv_init_obj` hands over the rings.

// Without the verbs feature the device enums have one variant, and matches
// written for both read as needless to clippy.
#![cfg_attr(
    not(feature = "verbs"),
    allow(clippy::infallible_destructuring_match, clippy::bind_instead_of_map)
)]

mod batch;
mod cq;
mod dc;
mod geometry;
#[cfg(feature = "test-hooks")]
mod hooks;
mod mr;
mod mw;
mod odp;
pub(crate) mod poll;
mod poll_shared;
mod poll_srq;
mod post;
mod recv;
mod scatter;
mod split;
mod srq;

pub(crate) use cq::{CqFor, DirectCq, DirectCqDev};
pub(crate) use mr::reg_sim_mr;
pub(crate) use mw::alloc_sim_mw;
pub(crate) use odp::{reg_sim_implicit_odp, sim_advise, sim_odp_caps};
pub(crate) use srq::{DirectSrq, DirectSrqDev};

#[cfg(feature = "verbs")]
use super::ibv;
use super::WrCounts;
use crate::ib::error::{Error, Result};
use crate::ib::progress::WrProgress;
use crate::ib::qp_attr::{self, PathInfo, QpAttr, QpInfo, QpState, QpType};
use mlx5_dv::driver::{CqCredits, ReceiveQueue, SendQueue, SignalNext};
use mlx5_dv::sim;
use std::sync::Arc;

pub(crate) use geometry::sq_max_wqebbs;
#[cfg(feature = "test-hooks")]
use post::with_wqe;
pub(crate) use post::{Declined, PostMode};

/// Most SGEs one direct WR may carry (ctrl + raddr + 30 data segments: 32
/// DS, a 512-byte WQE of 8 WQEBBs).
pub(crate) const MAX_SGE: usize = 30;
/// Largest inline payload the direct path copies (bytes).
pub(crate) const MAX_INLINE: usize = 512;

/// One RC QP on the direct path, with its own CQ or on a shared one.
pub(crate) struct DirectQp {
    // Field order matters: the drivers drop before the sim objects that own the rings.
    sq: SendQueue,
    rq: ReceiveQueue,
    /// The QP's own CQ; `None` when it completes into a `SharedCq`.
    cq: Option<DirectCq>,
    qpn: u32,
    max_send_sge: u32,
    max_recv_sge: u32,
    /// Receives the QP may hold (the RQ ring may be larger).
    max_recv_wr: u32,
    /// Room in the CQ: every posted WR holds one credit until retired.
    credits: CqCredits,
    /// Whether posts take (and polls give back) `credits`. Not on a CQ of
    /// the QP's own that holds a CQE of every WR the QP may have
    /// outstanding (`max_send_wr + max_recv_wr`, as [`CqSizing`]'s default
    /// gives it): the WR limits already keep that CQ from overrunning, so
    /// the check is paid once, at creation. Always on a shared CQ. Off
    /// after the `ignore_credits` test hook (to reach a CQ overrun).
    ///
    /// [`CqSizing`]: crate::ib::config::CqSizing
    count_credits: bool,
    /// Which way [`Self::post_one`] posts, decided when the state or the
    /// credits change rather than per WR: [`PostMode::Checked`], [`PostMode::InPlace`]
    /// or [`PostMode::InPlaceCounted`].
    post_mode: PostMode,
    /// While the WQE after a UMR is still to take its small fence
    /// (`SendQueue::pending_fence`): the post mode to come back to, the
    /// post mode being [`PostMode::Checked`] meanwhile, so that no in-place
    /// writer, which would not apply the fence, writes that WQE (`mw.rs`).
    mode_after_fence: Option<PostMode>,
    /// Per SQ WQE index, the completion opcode of the UMR WQE that starts
    /// there (`WcOpcode::BIND_MW` or `LOCAL_INV`: a UMR's CQE does not
    /// say which, libmlx5's `wr_data[idx]`); other entries stale. Empty
    /// without `QpConfig::memory_windows` (`mw.rs`). Shared with the
    /// halves of a split QP, as the SQ's slots are (`Table`).
    umr_ops: mlx5_dv::driver::Table<u8>,
    /// The SQ's posted count after the last `LOCAL_INV` while one may be
    /// outstanding: the QP's own CQ then polls on the general path
    /// (`DirectCq::general`), which tells its CQE from a bind's.
    inv_pending: Option<u32>,
    /// The window binds outstanding, settled as their WQEs retire (`mw.rs`).
    binds: mw::PendingBinds,
    /// Whether a receive of one SGE is posted in place
    /// ([`Self::post_recv_one`]): a QP out of RESET, not split, with an RQ
    /// of its own. Set with [`Self::post_mode`].
    recv_in_place: bool,
    /// The device objects that own the rings (dropped after the drivers).
    dev: Arc<DirectDev>,
    /// The SRQ its receives come from (its ring's owner, dropped after the
    /// QP: a device destroys no SRQ a QP names).
    _srq: Option<Arc<DirectSrqDev>>,
    /// The path facts the last modify set (for `path`).
    path: PathInfo,
    /// WRs posted and retired, for the PD's deregistration of dropped MRs:
    /// sends and receives posted in all (monotonic across RESET).
    progress: Arc<WrProgress>,
    sent: u64,
    recvd: u64,
    /// CQ credits of its own CQ held for its SRQ's receives (0 without).
    srq_reserved: u32,
    /// The transport: only RC takes an RDMA READ in place (UC has none);
    /// a UD QP posts through [`PostMode::Ud`] or the checked path (its WQEs
    /// carry a datagram segment), and its transitions are UD's.
    qp_type: QpType,
    /// UD: the largest message, bytes (the port's active MTU).
    pub(super) ud_mtu: u32,
    /// Split into a send half and a receive half: this copy only retires
    /// (`split.rs`).
    split: Option<Box<split::SplitState>>,
    /// A requester CQE in error was polled since the last RESET: the
    /// device moved the QP to ERR (a DCI then takes no post, `dc.rs`).
    /// Set by the polls' general paths, which every error CQE takes.
    send_failed: bool,
}

impl Drop for DirectQp {
    /// A QP on an SRQ with a CQ of its own: moved to RESET first, so that
    /// the receives the SRQ gave it whose completions were never polled go
    /// back to the SRQ (the RESET's drain), as rdma-core's `mlx5_cq_clean`
    /// frees them when a QP is destroyed. (Its other fields then drop in
    /// order: the drivers before the device objects.)
    fn drop(&mut self) {
        if !(self.rq.is_srq() && self.cq.is_some()) {
            return;
        }
        if self.split.is_none() && self.qp_type != QpType::Dct {
            let _ = self.modify_dev(QpState::Err, QpState::Reset, &QpAttr::default());
            return;
        }
        // (A DCT cannot be moved out of RTR: its CQ is drained as a split
        // QP's, below.)
        // Split, and its halves live on (they may still post to the rings,
        // and hold the device objects): no RESET under them. ERR stops the
        // QP taking SRQ receives; the CQ, which goes with this copy, is
        // drained of the receives it completed (back to the SRQ).
        if self.qp_type != QpType::Dct {
            let _ = self.modify_dev(QpState::Rts, QpState::Err, &QpAttr::default());
        }
        if let Some(cq) = &mut self.cq {
            let rq = &mut self.rq;
            cq.drain(|c| rq.discarded(c));
        }
    }
}

/// At most half of a CQ's credits are free: the send WR that took them
/// makes a CQE ([`DirectQp::signal_if_credits_low`]).
#[inline]
pub(super) fn credits_low(c: &CqCredits) -> bool {
    c.free() as u64 * 2 <= c.depth() as u64
}

/// After `n` sends were posted, the SQ's count now `posted`: the QP's own
/// count, and the one its PD reads ([`DirectQp::posted_sends`], and a post
/// that publishes while its WQE's doorbell is still to ring).
#[inline(always)]
fn count_sends(sent: &mut u64, progress: &WrProgress, n: usize, posted: u32) {
    *sent += n as u64;
    progress.sends_posted(posted);
}

/// Who owns the rings the driver runs on.
pub(crate) enum DirectDev {
    /// The software mlx5 device.
    Sim(sim::Qp),
    /// A ConnectX, through `mlx5dv_create_qp` / `mlx5dv_init_obj`.
    #[cfg(feature = "verbs")]
    Mlx5(ibv::Mlx5Objs),
}

impl DirectQp {
    /// Creates the sim QP (and its own CQ, unless it joins a shared one)
    /// and binds the ring driver to their descriptions.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create_sim(
        dev: &sim::Device,
        pd: u32,
        sq_wqebbs: u32,
        max_send_wr: u32,
        cq: CqFor<'_>,
        max_inline: u32,
        max_send_sge: u32,
        max_recv_wr: u32,
        max_recv_sge: u32,
        srq: Option<&DirectSrq>,
        qp_type: QpType,
        inline_recv: crate::InlineRecv,
        dc_key: u64,
        memory_windows: bool,
    ) -> Result<Self> {
        // (The front end refuses compression with 128-byte CQEs.)
        let (own, credits) = cq.resolve(|depth, opts| match opts.compress {
            true => DirectCq::create_sim_ex(dev, depth, opts),
            false => {
                scatter::create_sim_cq(dev, depth, inline_recv)?.sim_timestamps(opts.timestamps)
            }
        })?;
        let sim_cq = match &cq.in_use(&own).dev {
            DirectCqDev::Sim(s) => s,
            #[cfg(feature = "verbs")]
            DirectCqDev::Mlx5(_) => {
                return Err(Error::PathMismatch {
                    qp: "sim",
                    object: crate::PdObject::Cq,
                    theirs: "ConnectX",
                })
            }
        };
        let stride = (max_recv_sge.max(1) * 16).next_power_of_two();
        let rq_cnt = max_recv_wr.max(1).next_power_of_two().max(64 / stride);
        if srq.is_some() && srq.and_then(DirectSrq::sim).is_none() {
            return Err(Error::PathMismatch {
                qp: "sim",
                object: crate::PdObject::Srq,
                theirs: "ConnectX",
            });
        }
        let sim_srq = srq.and_then(DirectSrq::sim);
        let sim_qp = match (qp_type, sim_srq) {
            (QpType::Dci, _) => dev.create_dci(pd, sim_cq, sq_wqebbs)?,
            (QpType::Dct, Some(s)) => dev.create_dct(pd, sim_cq, s, dc_key)?,
            (QpType::Dct, None) => {
                return Err(Error::Invalid(
                    "a DCT takes its receives from an SRQ".into(),
                ))
            }
            _ => dev.create_qp_of(qp_type, pd, sim_cq, sq_wqebbs, rq_cnt, stride, sim_srq)?,
        };
        scatter::set_sim_qp(&sim_qp, inline_recv)?;
        let mut sq = if qp_type == QpType::Dct {
            // A DCT has no SQ (`dv()` describes none).
            SendQueue::none(sim_qp.qpn())
        } else {
            // SAFETY: the descriptions come from `sim_qp`, which this struct
            // owns and drops after the drivers (field order); nothing else on
            // the host uses these rings.
            unsafe { SendQueue::new(&sim_qp.dv(), sim_qp.qpn(), max_inline, max_send_wr) }?
        };
        sq.limit_wqe_size(sq_max_wqebbs(
            qp_type,
            max_send_sge,
            max_inline,
            memory_windows,
        ));
        let rq = match srq {
            Some(s) => ReceiveQueue::on_srq(s.slots().clone()),
            // A DCI receives nothing (`dv()` describes no RQ).
            None if qp_type == QpType::Dci => ReceiveQueue::none(),
            // SAFETY: as above.
            None => unsafe { ReceiveQueue::new(&sim_qp.dv()) }?,
        };
        let umr_ops = mw::umr_ops(&sq, memory_windows);
        let binds = mw::PendingBinds::new(&sq, memory_windows);
        Ok(Self {
            sq,
            rq,
            cq: own,
            qpn: sim_qp.qpn(),
            max_send_sge,
            max_recv_sge,
            max_recv_wr,
            count_credits: cq.counts_credits(&credits, max_send_wr + max_recv_wr),
            post_mode: PostMode::Checked,
            mode_after_fence: None,
            umr_ops,
            inv_pending: None,
            binds,
            recv_in_place: false,
            credits,
            dev: Arc::new(DirectDev::Sim(sim_qp)),
            _srq: srq.map(|s| s.dev().clone()),
            path: PathInfo::unconnected("sim"),
            progress: Arc::new(WrProgress::new(max_recv_wr, max_recv_sge)),
            sent: 0,
            recvd: 0,
            srq_reserved: 0,
            qp_type,
            ud_mtu: 0,
            split: None,
            send_failed: false,
        })
    }

    /// Creates a QP on a ConnectX with `mlx5dv_create_qp` (and its own CQ,
    /// unless it joins a shared one) and binds the ring driver to the rings
    /// `mlx5dv_init_obj` describes.
    #[cfg(feature = "verbs")]
    pub(crate) fn create_mlx5(
        pd: &std::sync::Arc<ibv::Pd>,
        caps: ibv::QpCaps,
        cq: CqFor<'_>,
        srq: Option<&DirectSrq>,
        inline_recv: crate::InlineRecv,
        dc_key: u64,
        memory_windows: bool,
    ) -> Result<Self> {
        let qp_type = caps.qp_type;
        // (The front end refuses compression with 128-byte CQEs.)
        let (own, credits) = cq.resolve(|depth, opts| match (opts.compress, inline_recv) {
            (false, crate::InlineRecv::Up64) => {
                DirectCq::create_mlx5_wide(&pd.ctx, depth, opts.timestamps)
            }
            _ => DirectCq::create_mlx5_ex(&pd.ctx, depth, opts),
        })?;
        let vcq = match &cq.in_use(&own).dev {
            DirectCqDev::Mlx5(v) => v,
            DirectCqDev::Sim(_) => {
                return Err(Error::PathMismatch {
                    qp: "ConnectX",
                    object: crate::PdObject::Cq,
                    theirs: "sim",
                })
            }
        };
        let vsrq = match srq.map(|s| &**s.dev()) {
            Some(DirectSrqDev::Mlx5(v)) => Some(v),
            Some(DirectSrqDev::Sim(_)) => {
                return Err(Error::PathMismatch {
                    qp: "ConnectX",
                    object: crate::PdObject::Srq,
                    theirs: "sim",
                })
            }
            None => None,
        };
        // A DCT has no rings (and `mlx5dv_init_obj` must not be asked for
        // them: libmlx5 reads a BlueFlame register it lacks); a DCI no RQ.
        let (objs, dv_qp) = match (qp_type, vsrq) {
            (QpType::Dct, Some(v)) => (ibv::create_mlx5_dct(pd, vcq, v, dc_key)?, None),
            (QpType::Dct, None) => {
                return Err(Error::Invalid(
                    "a DCT takes its receives from an SRQ".into(),
                ))
            }
            (QpType::Dci, _) => {
                let (o, d) = ibv::create_mlx5_dci(
                    pd,
                    vcq,
                    caps.max_send_wr,
                    caps.max_send_sge,
                    caps.max_inline,
                )?;
                (o, Some(d))
            }
            _ => {
                let (o, d) = ibv::create_mlx5_qp(pd, caps, vcq, vsrq, inline_recv.is_on())?;
                (o, Some(d))
            }
        };
        let mut sq = match &dv_qp {
            None => SendQueue::none(objs.qpn),
            // SAFETY: the description comes from `mlx5dv_init_obj` on the QP
            // that `objs` owns; this struct drops the drivers before `objs`
            // (field order), and no one else posts to it (the QP is never
            // handed to `ibv_post_*`).
            Some(d) => unsafe { SendQueue::new(d, objs.qpn, objs.max_inline, caps.max_send_wr) }?,
        };
        sq.limit_wqe_size(sq_max_wqebbs(
            qp_type,
            caps.max_send_sge,
            objs.max_inline,
            memory_windows,
        ));
        let rq = match (srq, &dv_qp) {
            (Some(s), _) => ReceiveQueue::on_srq(s.slots().clone()),
            (None, _) if qp_type == QpType::Dci => ReceiveQueue::none(),
            // SAFETY: as above.
            (None, Some(d)) => unsafe { ReceiveQueue::new(d) }?,
            (None, None) => ReceiveQueue::none(),
        };
        let umr_ops = mw::umr_ops(&sq, memory_windows);
        let binds = mw::PendingBinds::new(&sq, memory_windows);
        Ok(Self {
            sq,
            rq,
            cq: own,
            qpn: objs.qpn,
            max_send_sge: caps.max_send_sge,
            max_recv_sge: caps.max_recv_sge,
            max_recv_wr: caps.max_recv_wr,
            count_credits: cq.counts_credits(&credits, caps.max_send_wr + caps.max_recv_wr),
            post_mode: PostMode::Checked,
            mode_after_fence: None,
            umr_ops,
            inv_pending: None,
            binds,
            recv_in_place: false,
            credits,
            path: PathInfo::unconnected(""),
            dev: Arc::new(DirectDev::Mlx5(objs)),
            _srq: srq.map(|s| s.dev().clone()),
            progress: Arc::new(WrProgress::new(caps.max_recv_wr, caps.max_recv_sge)),
            sent: 0,
            recvd: 0,
            srq_reserved: 0,
            qp_type,
            ud_mtu: 0,
            split: None,
            send_failed: false,
        })
    }

    /// The inline size the device granted, in bytes (`None`: as configured).
    pub(crate) fn granted_inline(&self) -> Option<u32> {
        match &*self.dev {
            DirectDev::Sim(_) => None,
            #[cfg(feature = "verbs")]
            DirectDev::Mlx5(o) => Some(o.max_inline),
        }
    }

    pub(crate) fn set_path(&mut self, p: PathInfo) {
        self.path = p;
    }

    #[inline]
    fn take_credits(&self, n: u32) -> Result<()> {
        if !self.count_credits || self.credits.take(n) {
            Ok(())
        } else {
            Err(Error::CqFull)
        }
    }

    /// When the send WR about to be posted left at most half of the CQ's
    /// credits free, it makes a CQE (hidden, as auto-signal's). So the last
    /// send posted while credits run low always makes one: a later post
    /// refused with [`Error::CqFull`] is cured by polling, not stuck behind
    /// unsignaled WRs that hold credits and no CQE will ever retire (and
    /// the WR that takes the last credit makes a CQE, or none would give
    /// the credits back). Returns the undo, for a WR refused after all.
    #[inline]
    pub(super) fn signal_if_credits_low(&mut self) -> Option<SignalNext> {
        (self.count_credits && credits_low(&self.credits)).then(|| self.sq.signal_next())
    }

    #[inline]
    fn give_credits(&self, n: u32) {
        if self.count_credits {
            self.credits.give(n);
        }
    }

    /// Moves the sim QP from `from` to `to` (attributes checked by the
    /// caller); moving to RESET also resets the host side.
    pub(crate) fn modify(&mut self, from: QpState, to: QpState, attr: &QpAttr) -> Result<()> {
        self.modify_dev(from, to, attr)?;
        self.set_mode_for(to);
        Ok(())
    }

    /// The post mode in `state`: only RTS posts (and ERR, which flushes
    /// what it is given); a QP with no send SGE posts nothing in place.
    fn set_mode_for(&mut self, state: QpState) {
        self.recv_in_place = state != QpState::Reset
            && !self.rq.is_srq()
            && self.max_recv_wr > 0
            && self.max_recv_sge > 0;
        self.set_post_mode(match state {
            _ if self.max_send_sge == 0 => PostMode::Checked,
            // A DCI's WQEs carry their target: `dc.rs` posts them, in
            // place only in RTS (a DCI takes no WR in ERR).
            QpState::Rts if self.qp_type == QpType::Dci && !self.send_failed => PostMode::Dc,
            _ if self.qp_type.is_dc() => PostMode::Checked,
            QpState::Rts | QpState::Err if self.qp_type == QpType::Ud => PostMode::Ud,
            _ if self.qp_type == QpType::Ud => PostMode::Checked,
            QpState::Rts | QpState::Err if self.count_credits => PostMode::InPlaceCounted,
            QpState::Rts | QpState::Err => PostMode::InPlace,
            _ => PostMode::Checked,
        });
    }

    /// Sets the post mode, and with it the SQ's gate for the one-opcode
    /// posts (`SendQueue::set_gate`): open in [`PostMode::InPlace`] alone, so
    /// that their one check of the WR limit also says the mode; and the UD
    /// posts' (`SendQueue::set_ud_gate`), open in [`PostMode::Ud`] without
    /// CQ credits, and the DC posts' (`SendQueue::set_dc_gate`), open in
    /// [`PostMode::Dc`] without them: two gates, so that a UD SEND posted
    /// to a DCI (`post_send`'s inlined UD post looks at its gate alone) is
    /// never let in.
    /// A split QP posts nothing itself (its halves do): always checked.
    /// While the WQE after a UMR is still to take its small fence, `mode`
    /// is kept for then ([`Self::mode_after_fence`]), and nothing posts in
    /// place.
    fn set_post_mode(&mut self, mode: PostMode) {
        let mode = if self.split.is_some() {
            PostMode::Checked
        } else {
            mode
        };
        self.mode_after_fence = None;
        let mode = if self.sq.pending_fence().is_empty() {
            mode
        } else {
            self.mode_after_fence = Some(mode);
            PostMode::Checked
        };
        self.post_mode = mode;
        if self.split.is_some() {
            self.recv_in_place = false;
        }
        self.sq.set_gate(mode == PostMode::InPlace);
        // The UD posts' gate: UD's mode, without CQ credits to take.
        self.sq
            .set_ud_gate(mode == PostMode::Ud && !self.count_credits);
        // The DC posts' own, in DC's mode.
        self.sq
            .set_dc_gate(mode == PostMode::Dc && !self.count_credits);
    }

    /// [`Self::modify`] on the device.
    fn modify_dev(&mut self, from: QpState, to: QpState, attr: &QpAttr) -> Result<()> {
        use QpState as S;
        let sim_qp = match &*self.dev {
            DirectDev::Sim(qp) => qp,
            #[cfg(feature = "verbs")]
            DirectDev::Mlx5(o) => {
                o.modify_to(to, attr)?;
                // A DCT's number exists from RTR on: its CQEs name it.
                let dctn = (to == S::Rtr && self.qp_type == QpType::Dct)
                    .then(|| o.current_qpn())
                    .flatten();
                if let Some(n) = dctn {
                    self.qpn = n;
                }
                if to == S::Reset {
                    self.reset_host();
                }
                return Ok(());
            }
        };
        if self.qp_type.is_dc() {
            dc::modify_sim(sim_qp, self.qp_type, from, to, attr)?;
            if to == S::Reset {
                self.reset_host();
            }
            return Ok(());
        }
        let timer = attr.min_rnr_timer.map(qp_attr::rnr_timer);
        if self.qp_type == QpType::Ud {
            if let (Some(k), false) = (attr.qkey, from == S::Reset) {
                sim_qp.set_qkey(k)?;
            }
            match (from, to) {
                (S::Reset, S::Init) => sim_qp.to_init_ud(attr.qkey.unwrap_or(0))?,
                (S::Init, S::Rtr) => sim_qp.to_rtr_ud()?,
                (S::Rtr, S::Rts) => sim_qp.to_rts()?,
                (S::Rts, S::Sqd) => sim_qp.to_sqd(attr.sqd_notify.unwrap_or(false))?,
                (S::Sqd, S::Rts) => sim_qp.resume()?,
                (_, S::Err) => sim_qp.to_err()?,
                (_, S::Reset) => {
                    sim_qp.to_reset()?;
                    self.reset_host();
                }
                _ => {}
            }
            return Ok(());
        }
        match (from, to) {
            (S::Reset, S::Init) => sim_qp.to_init(attr.access.unwrap_or(sim::Access::empty()))?,
            (S::Init, S::Init) | (S::Rts, S::Rts) => sim_qp.set_optional(attr.access, timer)?,
            (S::Init, S::Rtr) => {
                let dest = attr.dest_qpn.unwrap_or(0);
                sim_qp
                    .to_rtr_with(dest, timer.unwrap_or(sim::RNR_DELAY))
                    .map_err(|e| match e {
                        sim::SimError::NoSuchQp(q) if q == dest => Error::Invalid(format!(
                            "no QP {q:#x} on this sim device: each Context::open(\"sim\") is a device of its own, with no wire to another; connect QPs of one Context"
                        )),
                        e => e.into(),
                    })?;
                sim_qp.set_optional(attr.access, None)?;
            }
            (S::Rtr, S::Rts) => {
                sim_qp.to_rts_with(attr.rnr_retry.unwrap_or(7))?;
                sim_qp.set_optional(attr.access, timer)?;
            }
            (S::Rts, S::Sqd) => sim_qp.to_sqd(attr.sqd_notify.unwrap_or(false))?,
            (S::Sqd, S::Rts) => {
                sim_qp.resume()?;
                sim_qp.set_optional(attr.access, timer)?;
            }
            (_, S::Err) => sim_qp.to_err()?,
            (_, S::Reset) => {
                sim_qp.to_reset()?;
                self.reset_host();
            }
            (from, to) => {
                return Err(Error::Invalid(format!(
                    "the sim does not do {from:?} -> {to:?}"
                )))
            }
        }
        Ok(())
    }

    /// The host side of RESET: completions not yet polled are discarded,
    /// the SQ and RQ start again at index 0 with their doorbell records
    /// zeroed, and every CQ credit is free.
    fn reset_host(&mut self) {
        if let Some(cq) = &mut self.cq {
            // Events and CQEs from before RESET are stale now. (A QP on a
            // shared CQ reaches RESET with none outstanding: `Qp::modify`
            // sees to it.)
            let rq = &mut self.rq;
            if self.binds.is_empty() {
                cq.drain(|c| rq.discarded(c));
            } else {
                // The binds these CQEs retire are settled (`mw.rs`).
                mw::drain_settling(cq, rq, &mut self.sq, &mut self.binds, self.send_failed);
            }
            self.credits = CqCredits::new(self.credits.depth());
            // (The SRQ's share: taken at creation from a CQ that had it.)
            self.credits.take(self.srq_reserved);
        }
        self.sq.reset();
        self.rq.reset();
        self.send_failed = false;
        self.binds.settle_rest();
        if self.umrs_pending() {
            if self.inv_pending.is_some() {
                self.inv_pending = Some(self.sq.posted_count());
            }
            self.umrs_retired();
        }
        self.publish_retired();
    }

    #[inline(always)]
    fn posted_sends(&mut self, n: usize) {
        count_sends(&mut self.sent, &self.progress, n, self.sq.posted_count());
    }

    /// Publishes how many sends and receives have been retired.
    #[inline(always)]
    fn publish_retired(&self) {
        let recvs = self.counts().recvs_retired;
        self.progress.retired(self.sq.retired_count(), recvs);
    }

    /// The QP's WRs counted since it was created (a RESET retires what was
    /// outstanding).
    #[inline]
    pub(crate) fn counts(&self) -> WrCounts {
        if let Some(s) = &self.split {
            return self.split_counts(s);
        }
        WrCounts {
            sends_posted: self.sent,
            // (wrapping: a count the driver and this disagree on must not
            // panic the poller; it only delays deregistration)
            sends_retired: self.sent.wrapping_sub(self.sq.outstanding() as u64),
            recvs_posted: self.recvd,
            recvs_retired: self.recvd.wrapping_sub(self.rq.outstanding() as u64),
        }
    }

    /// What the PD watches to deregister dropped MRs.
    pub(crate) fn progress(&self) -> &Arc<WrProgress> {
        &self.progress
    }

    /// Sends and receives posted and not yet retired.
    pub(crate) fn outstanding(&self) -> u32 {
        self.sq.outstanding() + self.rq.outstanding()
    }

    /// The QP's own CQ, or [`Error::SharedCq`] when it completes into a shared one.
    fn own_cq(&mut self) -> Result<&mut DirectCq> {
        let qpn = self.qpn;
        self.cq.as_mut().ok_or(Error::SharedCq { qpn })
    }

    /// The device's view of the QP.
    pub(crate) fn query(&self) -> Result<QpInfo> {
        let sim_qp = match &*self.dev {
            DirectDev::Sim(qp) => qp,
            #[cfg(feature = "verbs")]
            DirectDev::Mlx5(o) => return o.query(),
        };
        Ok(QpInfo {
            state: sim_qp.state(),
            dest_qpn: sim_qp.dest_qpn(),
            rnr_retry: Some(sim_qp.rnr_retry()),
            min_rnr_timer: None,
            path_mtu: None,
            sq_psn: None,
            rq_psn: None,
        })
    }

    /// Arms the QP's own CQ for one completion event.
    pub(crate) fn arm_cq(&mut self, solicited_only: bool) -> Result<()> {
        self.own_cq()?.arm(solicited_only)
    }

    /// [`DirectCq::event_wake`] of the QP's own CQ.
    pub(crate) fn event_wake(&mut self, waker: &std::task::Waker) -> Result<super::EventWake<'_>> {
        Ok(self.own_cq()?.event_wake(waker))
    }

    /// [`DirectCq::take_events`] of the QP's own CQ.
    pub(crate) fn take_events(&mut self) -> Result<u32> {
        self.own_cq()?.take_events()
    }

    /// Waits up to `timeout` for a completion event of the QP's own CQ.
    pub(crate) fn wait_cq_event(&mut self, timeout: std::time::Duration) -> Result<bool> {
        self.own_cq()?.wait_event(timeout)
    }

    /// UD: the port's active MTU, the largest message the in-place UD post
    /// takes (set once the port is known; 0 until then: none).
    pub(crate) fn set_ud_mtu(&mut self, mtu: u32) {
        self.ud_mtu = mtu;
    }

    /// The CQ credits the QP counts, if it counts them (a QP on an SRQ
    /// holds the SRQ's receives' share there).
    pub(crate) fn srq_credits(&mut self) -> Option<CqCredits> {
        if self.rq.is_srq() && self.cq.is_some() {
            // Its own CQ's credits are made anew at RESET: take them again.
            self.srq_reserved = self.max_recv_wr;
        }
        self.count_credits.then(|| self.credits.clone())
    }

    /// CQEs the QP's CQ holds.
    pub(crate) fn cq_depth(&self) -> u32 {
        self.credits.depth()
    }

    pub(crate) fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The most SGEs a send WR may carry (the QP's `max_send_sge`).
    pub(crate) fn max_send_sge(&self) -> u32 {
        self.max_send_sge
    }

    pub(crate) fn path(&self) -> PathInfo {
        match &*self.dev {
            DirectDev::Sim(qp) => PathInfo {
                dest_qpn: qp.dest_qpn().unwrap_or(0),
                ..self.path
            },
            #[cfg(feature = "verbs")]
            DirectDev::Mlx5(_) => self.path,
        }
    }
}
