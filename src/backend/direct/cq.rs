//! A CQ on the direct path ([`DirectCq`]): the ring driver's poller over
//! a sim CQ or a ConnectX CQ's ring, arming and events; and where a new
//! QP's completions go ([`CqFor`]).

#[cfg(feature = "verbs")]
use super::super::ibv;
use crate::ib::config::CqOptions;
use crate::ib::error::Result;
use mlx5_dv::driver::{CompletionQueue, CqCredits};
use mlx5_dv::sim;

/// A CQ on the direct path: the ring driver's poller over it, and the
/// device object that owns the ring.
pub(crate) struct DirectCq {
    // Field order: the poller drops before the object that owns its ring.
    pub(super) cq: CompletionQueue,
    pub(super) dev: DirectCqDev,
    /// On a completion channel other CQs share: the events of this CQ its
    /// reader has taken (on any thread), the sequence number of the next arm.
    pub(super) channel_events: Option<std::sync::Arc<std::sync::atomic::AtomicU32>>,
    /// Made with CQE compression ([`Self::create_sim_ex`],
    /// [`Self::create_mlx5_ex`]): the poller writes its consumer-index
    /// record after each poll.
    pub(crate) compressed: bool,
    /// Made with completion timestamps (the sim's `Cq::set_timestamps`,
    /// ConnectX's `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`): its CQEs carry
    /// one at byte 48, which the poll copies into each
    /// [`Completion`](crate::Completion) (the general path's: such a CQ
    /// takes no fast path).
    pub(crate) timestamps: bool,
    /// Every CQE takes the poll's general path: a CQ with
    /// [`Self::timestamps`], or the QP's own CQ while a `LOCAL_INV` it
    /// posted may be outstanding (its CQE names a UMR, as a bind's does:
    /// the general path tells them apart, `mw.rs`). The fast paths' one test.
    pub(crate) general: bool,
}

/// Who owns a direct-path CQ's ring.
pub(crate) enum DirectCqDev {
    Sim(sim::Cq),
    /// A ConnectX CQ made by `ibv_create_cq(_ex)`, or by `mlx5dv_create_cq`
    /// for CQE compression or 128-byte CQEs, described by `mlx5dv_init_obj`.
    #[cfg(feature = "verbs")]
    Mlx5(std::sync::Arc<ibv::VerbsCq>),
}

/// Where a new direct-path QP's completions go: a CQ of its own of this
/// many CQEs with these options (compressing CQEs or not, timestamps or
/// not), or a shared CQ whose credits it takes from.
pub(crate) enum CqFor<'a> {
    Own(u32, CqOptions),
    Shared(&'a DirectCq, &'a CqCredits),
}

impl<'a> CqFor<'a> {
    /// The QP's own CQ (`create`d for `Own`, with that depth), and the
    /// credits the QP takes from.
    pub(super) fn resolve(
        &self,
        create: impl FnOnce(u32, CqOptions) -> Result<DirectCq>,
    ) -> Result<(Option<DirectCq>, CqCredits)> {
        Ok(match self {
            CqFor::Own(depth, opts) => {
                let c = create(*depth, *opts)?;
                let credits = CqCredits::new(c.depth());
                (Some(c), credits)
            }
            CqFor::Shared(_, credits) => (None, (*credits).clone()),
        })
    }

    /// Whether a QP that may have `outstanding` WRs at once must count
    /// `credits` on this CQ: always on a shared one; on its own, only when
    /// the CQ is shallower than that.
    pub(super) fn counts_credits(&self, credits: &CqCredits, outstanding: u32) -> bool {
        match self {
            CqFor::Own(..) => credits.depth() < outstanding,
            CqFor::Shared(..) => true,
        }
    }

    /// The CQ the QP completes into: its own (from [`Self::resolve`]) or
    /// the shared one.
    pub(super) fn in_use<'c>(&'c self, own: &'c Option<DirectCq>) -> &'c DirectCq {
        match (own, self) {
            (Some(c), _) | (None, &CqFor::Shared(c, _)) => c,
            (None, CqFor::Own(..)) => unreachable!("resolve made the QP's own CQ"),
        }
    }
}

impl DirectCq {
    /// A sim CQ of at least `depth` CQEs (a power of two, at least 2),
    /// created to ignore overrun (`sim::Device::create_cq_ex`), as
    /// [`Self::create_mlx5`] makes them: CQ credits, or the WR limits of a
    /// QP whose own CQ is deep enough, keep it from overrunning, so polls
    /// need not write its consumer-index record.
    pub(crate) fn create_sim(dev: &sim::Device, depth: u32) -> Result<Self> {
        let sim_cq = dev.create_cq_ex(depth.next_power_of_two().max(2), 64, true)?;
        Self::over_sim(sim_cq, None)
    }

    /// [`Self::create_sim`], and with `opts.compress` a CQ with CQE compression
    /// (basic layout; the sim's model: `mlx5_dv::sim::Cq::set_compression`),
    /// whose sessions the poller expands in place. A session of `N >= 2`
    /// completions takes `N` slots (DPDK's and UCX's decoders), so the
    /// ring is sized as an uncompressed one; the poller writes the
    /// consumer-index record after each poll, which the sim reads to see
    /// room for a session (the sim CQ still ignores overrun: it never
    /// stops). With `opts.timestamps` (the front end refuses both), a CQ
    /// whose CQEs carry the sim's clock ([`Self::sim_timestamps`]).
    pub(crate) fn create_sim_ex(dev: &sim::Device, depth: u32, opts: CqOptions) -> Result<Self> {
        if !opts.compress {
            return Self::create_sim(dev, depth)?.sim_timestamps(opts.timestamps);
        }
        let cqe_cnt = depth.max(1).next_power_of_two().max(2);
        let sim_cq = dev.create_cq_ex(cqe_cnt, 64, true)?;
        sim_cq.set_compression(true)?;
        let mut c = Self::over_sim(sim_cq, None)?;
        c.cq.set_overrun_ignored(false);
        c.compressed = true;
        Ok(c)
    }

    /// [`Self::create_sim`] on `channel`, shared with other CQs: its events
    /// carry `context` (its `cq_context`), and `events` counts those its reader took.
    pub(crate) fn create_sim_on(
        dev: &sim::Device,
        depth: u32,
        channel: &sim::Channel,
        context: u64,
        events: std::sync::Arc<std::sync::atomic::AtomicU32>,
    ) -> Result<Self> {
        let cqe_cnt = depth.next_power_of_two().max(2);
        let sim_cq = dev.create_cq_on(cqe_cnt, 64, true, channel, context)?;
        Self::over_sim(sim_cq, Some(events))
    }

    /// With `on`, a sim CQ just made (no CQE written yet) has completion
    /// timestamps turned on (`mlx5_dv::sim::Cq::set_timestamps`: each CQE
    /// then carries at byte 48 nanoseconds since the sim device was made)
    /// and copied by the poll. A ConnectX CQ is left as it is: its
    /// timestamps are asked for when it is made ([`Self::create_mlx5_ex`]).
    pub(super) fn sim_timestamps(mut self, on: bool) -> Result<Self> {
        if let (true, DirectCqDev::Sim(c)) = (on, &self.dev) {
            c.set_timestamps(true)?;
            self.timestamps = true;
            self.general = true;
        }
        Ok(self)
    }

    pub(super) fn over_sim(
        sim_cq: sim::Cq,
        channel_events: Option<std::sync::Arc<std::sync::atomic::AtomicU32>>,
    ) -> Result<Self> {
        // SAFETY: the description comes from `sim_cq`, which this struct
        // owns and drops after the poller (field order); nothing else on the
        // host polls this ring.
        let mut cq = unsafe { CompletionQueue::new(&sim_cq.dv()) }?;
        cq.set_overrun_ignored(true);
        Ok(Self {
            cq,
            dev: DirectCqDev::Sim(sim_cq),
            channel_events,
            compressed: false,
            timestamps: false,
            general: false,
        })
    }

    /// A ConnectX CQ of at least `depth` CQEs, described by
    /// `mlx5dv_init_obj`: made by `ibv_create_cq_ex` with
    /// `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN` (then polls write no
    /// consumer-index record: CQ credits keep it from overrunning), or, where
    /// the device refuses that, by `ibv_create_cq` (the record written per
    /// poll, as before).
    #[cfg(feature = "verbs")]
    pub(crate) fn create_mlx5(ctx: &std::sync::Arc<ibv::Ctx>, depth: u32) -> Result<Self> {
        let vcq = ibv::VerbsCq::create_ex(ctx, depth, true)?;
        Self::over_mlx5(vcq, None)
    }

    /// [`Self::create_mlx5`], and with `opts.compress` a CQ with CQE compression
    /// (basic layout), the ConnectX twin of [`Self::create_sim_ex`]:
    /// `mlx5dv_create_cq` with `MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE`
    /// in the responder mini-CQE format `ibv::mini_cqe_format` picks from
    /// `mlx5dv_query_device`'s `cqe_comp_caps`, and
    /// `MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE` 64 (our sessions are 64-byte
    /// slots; libmlx5 would otherwise take `MLX5_CQE_SIZE` from the
    /// environment), ignoring overrun where the device accepts it as
    /// [`Self::create_mlx5`] does. The poller writes the consumer-index
    /// record after each poll, as on the sim. Then `mlx5dv_init_obj` as for
    /// any CQ. A session of `N` completions takes slots `t..t+N-1` and the
    /// next CQE is at `t+N`, as the basic-layout decoders that run on
    /// ConnectX read it (DPDK's `mlx5_rx_poll_len`: `zip->cq_ci = title +
    /// cqe_cnt`; UCX's former `uct_ib_mlx5_iface_cqe_unzip`), and as
    /// `mlx5_dv::mini_cqe` expands it.
    ///
    /// Errors: [`Error::Unsupported`] (`Feature::CqeCompression`) where the
    /// device cannot compress (`max_num` 0, or no mini-CQE format we know)
    /// or `mlx5dv_create_cq` refuses it (`EINVAL`, `EOPNOTSUPP`); nothing
    /// is created. Compiles; not yet run on hardware.
    ///
    /// With `opts.timestamps` (the front end refuses it with compression):
    /// `ibv_create_cq_ex` with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` in
    /// `wc_flags` (and `IGNORE_OVERRUN` where accepted), so that each CQE
    /// carries the device clock's ticks at byte 48, which the poll copies;
    /// [`Error::Unsupported`] (`Feature::CompletionTimestamp`) where the
    /// provider or device refuses it (`ibv::VerbsCq::create_stamped`),
    /// nothing created. Compiles; not yet run on hardware.
    ///
    /// [`Error::Unsupported`]: crate::Error::Unsupported
    #[cfg(feature = "verbs")]
    pub(crate) fn create_mlx5_ex(
        ctx: &std::sync::Arc<ibv::Ctx>,
        depth: u32,
        opts: CqOptions,
    ) -> Result<Self> {
        use mlx5_dv::dv::*;
        if opts.timestamps && !opts.compress {
            let vcq = ibv::VerbsCq::create_stamped(ctx, depth, true, true)?;
            return Self::over_mlx5(vcq, None);
        }
        if !opts.compress {
            return Self::create_mlx5(ctx, depth);
        }
        let feature = crate::Feature::CqeCompression;
        let format = ibv::mini_cqe_format(&ibv::cqe_comp_caps(ctx))
            .ok_or_else(|| unsupported(ctx, feature))?;
        let dv = mlx5dv_cq_init_attr {
            comp_mask: MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE | MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE,
            cqe_comp_res_format: format,
            flags: 0,
            cqe_size: 64,
        };
        let slots = depth.max(1);
        let vcq = ibv::VerbsCq::create_dv(ctx, slots, true, dv, false)
            .map_err(|e| refused(e, ctx, feature))?;
        let mut c = Self::over_mlx5(vcq, None)?;
        c.cq.set_overrun_ignored(false);
        c.compressed = true;
        Ok(c)
    }

    /// [`Self::create_mlx5`] with 128-byte CQEs, for `InlineRecv::Up64`
    /// (the kernel then sets the QP's responder scatter to 64 bytes):
    /// `mlx5dv_create_cq` with `MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE` 128,
    /// ignoring overrun where accepted. No context cap gates plain
    /// 128-byte CQEs (`MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP` and `_PAD` are
    /// about compression and padding): the device's answer to the call is
    /// the gate. Errors: [`Error::Unsupported`] (`Feature::InlineReceive`)
    /// where `mlx5dv_create_cq` refuses it (`EINVAL`, `EOPNOTSUPP`) or the
    /// CQ `mlx5dv_init_obj` describes is not of 128-byte CQEs; nothing is
    /// left created. With `timestamps`, `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`
    /// in the call's `wc_flags` too ([`Self::create_mlx5_ex`]; its refusal
    /// is [`Error::Unsupported`] with `Feature::CompletionTimestamp`).
    /// Compiles; not yet run on hardware.
    ///
    /// [`Error::Unsupported`]: crate::Error::Unsupported
    #[cfg(feature = "verbs")]
    pub(crate) fn create_mlx5_wide(
        ctx: &std::sync::Arc<ibv::Ctx>,
        depth: u32,
        timestamps: bool,
    ) -> Result<Self> {
        use mlx5_dv::dv::*;
        let feature = crate::Feature::InlineReceive;
        let dv = mlx5dv_cq_init_attr {
            comp_mask: MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE,
            cqe_size: 128,
            ..Default::default()
        };
        let vcq = ibv::VerbsCq::create_dv(ctx, depth, true, dv, timestamps)
            .map_err(|e| refused(e, ctx, feature))?;
        if ibv::describe_mlx5_cq(&vcq)?.cqe_size != 128 {
            return Err(unsupported(ctx, feature));
        }
        Self::over_mlx5(vcq, None)
    }

    /// [`Self::create_mlx5`] on `channel`, shared with other CQs, as
    /// [`Self::create_sim_on`].
    #[cfg(feature = "verbs")]
    pub(crate) fn create_mlx5_on(
        ctx: &std::sync::Arc<ibv::Ctx>,
        depth: u32,
        channel: &std::sync::Arc<ibv::VerbsChannel>,
        context: u64,
        events: std::sync::Arc<std::sync::atomic::AtomicU32>,
    ) -> Result<Self> {
        let vcq = ibv::VerbsCq::create_on(ctx, depth, true, channel, context)?;
        Self::over_mlx5(vcq, Some(events))
    }

    #[cfg(feature = "verbs")]
    pub(super) fn over_mlx5(
        vcq: std::sync::Arc<ibv::VerbsCq>,
        channel_events: Option<std::sync::Arc<std::sync::atomic::AtomicU32>>,
    ) -> Result<Self> {
        let dv = ibv::describe_mlx5_cq(&vcq)?;
        // SAFETY: the description comes from `mlx5dv_init_obj` on `vcq`,
        // which this struct keeps (dropped after the poller); the CQ is
        // never handed to `ibv_poll_cq`.
        let mut cq = unsafe { CompletionQueue::new(&dv) }?;
        cq.set_overrun_ignored(vcq.ignores_overrun);
        Ok(Self {
            cq,
            timestamps: vcq.timestamps,
            general: vcq.timestamps,
            dev: DirectCqDev::Mlx5(vcq),
            channel_events,
            compressed: false,
        })
    }

    /// CQEs the CQ holds (its slots, compressing or not: a session takes a
    /// slot a completion).
    pub(crate) fn depth(&self) -> u32 {
        match &self.dev {
            DirectCqDev::Sim(c) => c.dv().cqe_cnt,
            #[cfg(feature = "verbs")]
            DirectCqDev::Mlx5(v) => v.depth,
        }
    }

    /// Arms the CQ for one completion event (driver `arm`: the arm word,
    /// which carries the consumer index, then the CQ doorbell on the UAR).
    /// On a shared channel the sequence number is the count of this CQ's
    /// events its reader took: arm after taking the last one.
    pub(crate) fn arm(&mut self, solicited_only: bool) -> Result<()> {
        if let Some(taken) = &self.channel_events {
            self.cq
                .set_events_consumed(taken.load(std::sync::atomic::Ordering::Acquire));
        }
        Ok(self.cq.arm(solicited_only)?)
    }

    /// Test hook: from now on the (sim) CQ detects overrun, as one created
    /// without the ignore-overrun flag: the consumer-index record is
    /// written now and after every poll, and the sim reads it before each
    /// CQE. ConnectX CQs are left as they are.
    #[cfg(feature = "test-hooks")]
    pub(super) fn detect_overrun(&mut self) {
        match &self.dev {
            DirectCqDev::Sim(c) => {
                self.cq.set_overrun_ignored(false);
                c.set_ignore_overrun(false);
            }
            #[cfg(feature = "verbs")]
            DirectCqDev::Mlx5(_) => {}
        }
    }

    /// Waits up to `timeout` for a completion event; consumes it (the next
    /// arm carries the next sequence number).
    pub(crate) fn wait_event(&mut self, timeout: std::time::Duration) -> Result<bool> {
        let sim_cq = match &self.dev {
            DirectCqDev::Sim(c) => c,
            #[cfg(feature = "verbs")]
            DirectCqDev::Mlx5(v) => {
                let got = v.wait(timeout)?;
                if got {
                    self.cq.event_consumed();
                }
                return Ok(got);
            }
        };
        if !super::super::wait_readable(sim_cq.event_fd(), timeout, "the CQ's event fd")? {
            return Ok(false);
        }
        for _ in 0..sim_cq.take_events() {
            self.cq.event_consumed();
        }
        Ok(true)
    }

    /// For an async wait: on the sim `waker` is registered, woken by the
    /// next completion event; on ConnectX, the completion channel's fd to
    /// watch.
    pub(crate) fn event_wake(&self, waker: &std::task::Waker) -> super::super::EventWake<'_> {
        match &self.dev {
            DirectCqDev::Sim(c) => {
                c.wake_on_event(waker);
                super::super::EventWake::Registered
            }
            #[cfg(feature = "verbs")]
            DirectCqDev::Mlx5(v) => super::super::EventWake::Fd(v.channel_fd()),
        }
    }

    /// Consumes the completion events raised and not yet consumed, without
    /// blocking (each acknowledged; the next arm carries the next sequence
    /// number); returns how many.
    pub(crate) fn take_events(&mut self) -> Result<u32> {
        let n = match &self.dev {
            DirectCqDev::Sim(c) => c.take_events() as u32,
            #[cfg(feature = "verbs")]
            DirectCqDev::Mlx5(v) => v.take_events()?,
        };
        for _ in 0..n {
            self.cq.event_consumed();
        }
        Ok(n)
    }

    /// Discards the events raised and the CQEs written so far, each CQE
    /// handed to `each` first.
    pub(super) fn drain(&mut self, mut each: impl FnMut(&mlx5_dv::cqe::Cqe)) {
        match &self.dev {
            // The sim's event fd is non-blocking: read it, no poll(2) (which
            // Miri cannot run either).
            DirectCqDev::Sim(c) => {
                for _ in 0..c.take_events() {
                    self.cq.event_consumed();
                }
            }
            // A shared channel's events are its reader's to take.
            #[cfg(feature = "verbs")]
            DirectCqDev::Mlx5(_) if self.channel_events.is_some() => {}
            #[cfg(feature = "verbs")]
            DirectCqDev::Mlx5(_) => {
                while self.wait_event(std::time::Duration::ZERO).unwrap_or(false) {}
            }
        }
        while let Some(c) = self.cq.poll_one() {
            each(&c);
        }
        self.cq.update_ci();
    }

    /// Whether the CQ overran, and the CQ error events it raised (sim only).
    #[cfg(feature = "test-hooks")]
    pub(crate) fn overrun(&self) -> (bool, u64) {
        match &self.dev {
            DirectCqDev::Sim(c) => (c.overrun(), c.error_events()),
            #[cfg(feature = "verbs")]
            DirectCqDev::Mlx5(_) => (false, 0),
        }
    }
}

/// [`Error::Unsupported`](crate::Error::Unsupported): `ctx`'s device lacks `feature`.
#[cfg(feature = "verbs")]
fn unsupported(ctx: &ibv::Ctx, feature: crate::Feature) -> crate::Error {
    crate::Error::Unsupported {
        device: ctx.name.clone(),
        feature,
    }
}

/// A failed `mlx5dv_create_cq`: the device refusing an attribute
/// (`EINVAL`, `EOPNOTSUPP`: libmlx5's and the kernel's answers to a
/// compression or CQE size they do not take) is [`unsupported`]; any other
/// failure stays as it is.
#[cfg(feature = "verbs")]
fn refused(e: crate::Error, ctx: &ibv::Ctx, feature: crate::Feature) -> crate::Error {
    match e {
        crate::Error::Verbs { errno, .. } if errno == libc::EINVAL || errno == libc::EOPNOTSUPP => {
            unsupported(ctx, feature)
        }
        e => e,
    }
}
