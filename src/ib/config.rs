//! Sizes a QP and its CQ are created with, and how a caller waits for
//! completions.

use super::error::{Error, Result};

/// Sizes and path facts for a QP pair.
#[derive(Clone, Copy, Debug)]
pub struct QpConfig {
    /// The transport: RC (the default), UC or UD.
    pub qp_type: super::qp_attr::QpType,
    /// Send queue depth in work requests.
    pub max_send_wr: u32,
    /// Most SGEs per send WR.
    pub max_send_sge: u32,
    /// Largest inline payload in bytes (`-I` in perftest).
    pub max_inline: u32,
    /// Receive queue depth in work requests.
    pub max_recv_wr: u32,
    /// Most SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Port number (verbs devices).
    pub port: u8,
    /// GID index to use on RoCE; `None` picks the IPv4-mapped RoCE v2 GID.
    pub gid_index: Option<u8>,
    /// How often a SEND that finds no posted receive at the peer (RNR NAK)
    /// is retried before it fails with `RNR_RETRY_EXC_ERR`: 0 to 6, or 7 for
    /// forever (IB spec 9.7.5.2.8). The responder's `min_rnr_timer` sets
    /// the wait between tries.
    pub rnr_retry: u8,
    /// The RNR NAK timer this QP asks of a sender when it has no receive
    /// posted, as the IB spec table 45 code 0..=31 (`ibv_qp_attr.min_rnr_timer`;
    /// 12 = 0.64 ms, the default, as rdma-core's `ibv_rc_pingpong` uses;
    /// 31 = 491.52 ms; 0 = 655.36 ms). Set at INIT -> RTR by [`Qp::rtr_attr`](crate::Qp::rtr_attr).
    pub min_rnr_timer: u8,
    /// Depth of the QP's CQ in CQEs; `None`: what [`CqSizing`] gives for
    /// this QP (1.5 x `max_send_wr + max_recv_wr`), so the CQ never limits
    /// posting. The device may round it up ([`Qp::cq_depth`](crate::Qp::cq_depth)). Posts
    /// that would leave the CQ without room for every WR's completion
    /// (including the flush after an error) are refused with
    /// [`Error::CqFull`], so the CQ never overruns.
    pub cq_depth: Option<u32>,
    /// CQE compression on the QP's own CQ (default off): the device writes
    /// runs of alike completions as a title CQE and arrays of 8-byte
    /// mini-CQEs (the basic layout, up to 8 completions per 64-byte slot),
    /// which the poller expands in place; what the program sees is the same.
    /// On the sim it turns on the sim's model of it
    /// (`mlx5_dv::sim::Cq::set_compression`). Refused: with a shared CQ ([`Error::Invalid`]: the
    /// shared CQ's own option decides, `Pd::create_compressed_shared_cq`);
    /// on a QP on an SRQ ([`Error::Invalid`]: responder mini-CQEs carry no
    /// WQE counter, the first's plus the position stands for it, and our
    /// SRQ is a linked list whose WQEs complete out of index order); on the
    /// verbs path ([`Error::Unsupported`], `Feature::CqeCompression`). On
    /// ConnectX the CQ is made by `mlx5dv_create_cq` with
    /// `MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE` (64-byte CQEs, a mini-CQE
    /// format from the device's `cqe_comp_caps`); refused with the same
    /// [`Error::Unsupported`] where those caps have no `max_num` or no
    /// format we know, or the call refuses it. Wired; compiles, not yet run
    /// on hardware.
    ///
    /// [`Error::Invalid`]: crate::Error::Invalid
    /// [`Error::Unsupported`]: crate::Error::Unsupported
    pub cqe_compression: bool,
    /// Completion timestamps on the QP's own CQ (default off): each
    /// [`Completion::timestamp`](crate::Completion::timestamp) is when the
    /// device completed the WR, in the device's clock ticks (not
    /// nanoseconds; the sim: nanoseconds since it was made). The CQ is made
    /// as `ibv_create_cq_ex(3)` with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`
    /// in `wc_flags`: on the verbs path each is read by
    /// `ibv_wc_read_completion_ts`; on the direct path (ConnectX, the sim)
    /// the poller copies the CQE's 64-bit big-endian `timestamp` (byte 48
    /// of the CQE, rdma-core `mlx5dv.h` `struct mlx5_cqe64`), and such a CQ
    /// polls through the general path, not the fast one (see
    /// `docs/concepts.md`). On the sim it turns on the sim's clock in its
    /// CQEs (`mlx5_dv::sim::Cq::set_timestamps`).
    ///
    /// Refused, before anything is created: with a shared CQ
    /// ([`Error::Invalid`]: the shared CQ's own option decides,
    /// `Pd::create_timestamped_shared_cq`); with `cqe_compression`
    /// ([`Error::Invalid`]: mini-CQEs carry no timestamp of their own);
    /// where the device or provider has none ([`Error::Unsupported`],
    /// `Feature::CompletionTimestamp`): a provider without
    /// `ibv_create_cq_ex`, the old verbs calls
    /// (`RDMA_DIRECT_VERBS_OLD_POST=1`: `ibv_poll_cq` gives no timestamp),
    /// or a CQ creation that fails with `EOPNOTSUPP` or `EINVAL` (rxe:
    /// its provider takes no `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`).
    /// ConnectX's direct path is wired (`ibv_create_cq_ex` with the flag,
    /// then `mlx5dv_init_obj`); compiles, not yet run on hardware.
    ///
    /// [`Error::Invalid`]: crate::Error::Invalid
    /// [`Error::Unsupported`]: crate::Error::Unsupported
    pub completion_timestamps: bool,
    /// Scatter to CQE, "inline receive" (UCX's RX inline, rdma-core's
    /// `MLX5_SCATTER_TO_CQE`): small payloads come inside the CQE and the
    /// poll copies them to the WR's buffers. Off by default, as in UCX
    /// (libmlx5 turns it on by default). See [`InlineRecv`].
    pub inline_recv: InlineRecv,
    /// The DC access key of a DCT ([`QpType::Dct`](crate::QpType::Dct)):
    /// a DCI's WR reaches it only carrying this key
    /// (`mlx5dv_dc_init_attr.dct_access_key`, 64 bits, rdma-core
    /// `mlx5dv.h`). Ignored by every other QP type. Default 0.
    pub dc_key: u64,
    /// The QP posts memory-window WRs: type-1 binds
    /// ([`Qp::bind_mw`](crate::Qp::bind_mw)), type-2 binds and
    /// `LOCAL_INV` ([`SendWr::bind_mw`](crate::SendWr::bind_mw),
    /// [`SendWr::local_inv`](crate::SendWr::local_inv)). RC and UC.
    /// The direct path sizes its send WQEs for a bind's UMR WQE (3
    /// WQEBBs: ctrl, UMR ctrl, mkey context, one KLM), as rdma-core's
    /// `mlx5_calc_send_wqe` does for `IBV_QP_EX_WITH_BIND_MW`; the verbs
    /// path adds `IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
    /// IBV_QP_EX_WITH_SEND_WITH_INV` to its `send_ops_flags`. Without it
    /// those WRs are refused ([`MwRefusal::NotEnabled`](crate::MwRefusal::NotEnabled)).
    /// A SEND with invalidate needs no window of its own and no flag.
    /// Default off.
    pub memory_windows: bool,
}

/// How a CQ is made beyond its depth (`ibv_cq_init_attr_ex`'s options
/// we offer): CQE compression, completion timestamps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CqOptions {
    /// CQE compression ([`QpConfig::cqe_compression`]).
    pub(crate) compress: bool,
    /// Completion timestamps ([`QpConfig::completion_timestamps`]).
    pub(crate) timestamps: bool,
}

/// Scatter to CQE ("inline receive") for a QP, on the direct path
/// (ConnectX and the sim). The NIC writes a small payload into the CQE
/// itself instead of DMAing it to the WR's buffers, saving a DMA write and
/// the CPU a cache miss; the poll copies it to the WR's SGEs before it
/// reports the completion, so a caller sees the same buffers and
/// [`Completion`](crate::Completion)s either way (a WR whose SGEs are too
/// small for the data completes with `WcStatus::LOC_LEN_ERR`, and then
/// none of the data was copied). What scatters:
///
/// - **responder** (RC and UC): a received SEND or SEND_IMM of 1 up to
///   32 bytes ([`Self::Up32`]: in bytes 0..32 of the 64-byte CQE, `op_own`
///   bit 0x4, `MLX5_INLINE_SCATTER_32`) or 64 bytes ([`Self::Up64`]: in
///   the first half of a 128-byte CQE, bit 0x8, `MLX5_INLINE_SCATTER_64`).
///   On UD it is ignored, as the kernel's mlx5 driver ignores it (the QP
///   context's `cs_res` is set for RC and UC only), libmlx5's default.
/// - **requester** (RC only): an RDMA READ response or an atomic's old
///   value (8 bytes) of a *signaled* WR, up to the same size, goes into
///   its send CQE (libmlx5's `MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE`: the
///   kernel's `cs_req`). An unsignaled READ or atomic gets its data by DMA
///   (no CQE is written for it).
///
/// Larger payloads are DMAed as without it. The sizes are the device's:
/// 32 bytes with 64-byte CQEs, 64 with 128-byte CQEs (the QP's own CQ is
/// created with 128-byte CQEs for [`Self::Up64`]).
///
/// Refusals, before anything is created: the verbs backend (rxe, or
/// `DataPath::Verbs`) with [`Error::Unsupported`] and
/// [`Feature::InlineReceive`](crate::Feature::InlineReceive) (libibverbs
/// has no such attribute); [`Self::Up64`] on a shared CQ (its CQEs are 64
/// bytes) or with CQE compression (64-byte CQEs) with [`Error::Invalid`].
/// On ConnectX [`Self::Up64`]'s CQ is made by `mlx5dv_create_cq` with
/// `MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE` 128 (the kernel then scatters up to
/// 64 bytes); where the device refuses that, [`Error::Unsupported`] with
/// [`Feature::InlineReceive`](crate::Feature::InlineReceive). Wired;
/// compiles, not yet run on hardware.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum InlineRecv {
    /// No scatter to CQE (`MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`).
    #[default]
    Off,
    /// Up to 32 bytes, in a 64-byte CQE.
    Up32,
    /// Up to 64 bytes, in a 128-byte CQE (the QP's own CQ only; on
    /// ConnectX through `mlx5dv_create_cq`, not yet run on hardware).
    Up64,
}

impl InlineRecv {
    /// Whether it asks for scatter to CQE at all.
    pub fn is_on(self) -> bool {
        self != InlineRecv::Off
    }

    /// The most bytes a CQE carries: 0, 32 or 64.
    pub fn max_bytes(self) -> u32 {
        match self {
            InlineRecv::Off => 0,
            InlineRecv::Up32 => 32,
            InlineRecv::Up64 => 64,
        }
    }
}

impl Default for QpConfig {
    fn default() -> Self {
        QpConfig {
            qp_type: super::qp_attr::QpType::Rc,
            max_send_wr: 128,
            max_send_sge: 1,
            max_inline: 220,
            max_recv_wr: 64,
            max_recv_sge: 1,
            port: 1,
            gid_index: None,
            rnr_retry: 6,
            min_rnr_timer: 12,
            cq_depth: None,
            cqe_compression: false,
            completion_timestamps: false,
            inline_recv: InlineRecv::Off,
            dc_key: 0,
            memory_windows: false,
        }
    }
}

/// How deep a CQ must be for the queues that complete into it.
///
/// The depth is the sum of the work requests every attached queue may have
/// outstanding, times a headroom factor (1.5 by default), and never less
/// than that sum: after an error every outstanding WR of a QP, signaled or
/// not, is flushed into the CQ with a CQE of its own (IB spec 10.8.3.1), so
/// a CQ smaller than the sum could overrun. A CQ of this depth never
/// refuses a post with [`Error::CqFull`] while every queue keeps within its
/// own depth.
///
/// ```
/// use rdma_direct::{CqSizing, QpConfig};
/// let cfg = QpConfig { max_send_wr: 64, max_recv_wr: 32, ..QpConfig::default() };
/// // Two QPs on one CQ: 2 x (64 + 32) = 192 WRs outstanding at most.
/// assert_eq!(CqSizing::new().qp(&cfg).qp(&cfg).depth()?, 288);
/// // No headroom: exactly what a flush after an error needs.
/// assert_eq!(CqSizing::new().headroom(1.0).qp(&cfg).qp(&cfg).depth()?, 192);
/// // Less than 1 is raised to 1: a CQ is never smaller than its flush.
/// assert_eq!(CqSizing::new().headroom(0.5).qp(&cfg).depth()?, 96);
/// # Ok::<(), rdma_direct::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CqSizing {
    outstanding: u64,
    headroom: f64,
}

impl Default for CqSizing {
    fn default() -> Self {
        Self::new()
    }
}

impl CqSizing {
    /// Largest CQ the crate creates, in CQEs (`2^22`, the sim's and the
    /// ConnectX `log_cq_size` limit).
    pub const MAX_DEPTH: u32 = 1 << 22;

    /// No queue yet; headroom 1.5.
    pub fn new() -> Self {
        CqSizing {
            outstanding: 0,
            headroom: 1.5,
        }
    }

    /// A QP whose send and receive queues both complete into the CQ: its
    /// `max_send_wr + max_recv_wr`.
    pub fn qp(self, cfg: &QpConfig) -> Self {
        self.queue(cfg.max_send_wr).queue(cfg.max_recv_wr)
    }

    /// One queue (a send or a receive queue) that may have `outstanding`
    /// work requests at once.
    pub fn queue(mut self, outstanding: u32) -> Self {
        self.outstanding += outstanding as u64;
        self
    }

    /// The headroom factor over the outstanding WRs (default 1.5); below 1
    /// (or NaN) counts as 1.
    pub fn headroom(mut self, factor: f64) -> Self {
        self.headroom = factor;
        self
    }

    /// The depth in CQEs: `max(ceil(outstanding x headroom), outstanding)`,
    /// at least 1. The device may round it up (to a power of two on mlx5).
    ///
    /// Errors: [`Error::Config`] when that exceeds [`Self::MAX_DEPTH`].
    pub fn depth(&self) -> Result<u32> {
        let factor = if self.headroom.is_nan() {
            1.0
        } else {
            self.headroom.max(1.0)
        };
        let want = ((self.outstanding as f64 * factor).ceil() as u64)
            .max(self.outstanding)
            .max(1);
        if want > Self::MAX_DEPTH as u64 {
            return Err(Error::Config {
                field: "CQ depth (CqSizing: outstanding WRs times headroom)",
                value: want,
                min: 1,
                max: Self::MAX_DEPTH as u64,
            });
        }
        Ok(want as u32)
    }
}

/// How a caller waits for completions ([`Qp::wait`](crate::Qp::wait), [`SharedCq::wait`](crate::SharedCq::wait)).
///
/// Busy polling gives the lowest latency and keeps a core busy; events
/// sleep in the kernel until the CQ's completion event (a system call and a
/// wake-up per wait, as perftest's `-e`); adaptive polls a while first, so
/// completions that come quickly cost no system call, and idle waits sleep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionMode {
    /// Poll until a completion comes or the timeout passes.
    Busy,
    /// Poll once; if empty, arm the CQ, poll again (a completion that came
    /// before the arm raises no event), then sleep on the completion
    /// channel until the event; acknowledge it and poll again.
    Events,
    /// Poll `spins` times, then as [`Self::Events`].
    Adaptive {
        /// Empty polls before arming.
        spins: u32,
    },
}
