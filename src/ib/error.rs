//! Error types of the portable crate.

use mlx5_dv::wqe::WqeError;

/// Every error the crate returns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `Context::open` found no device of that name.
    #[error("no RDMA device named {name:?} (try `rdma-direct devices`)")]
    NoSuchDevice {
        /// The name asked for.
        name: String,
    },
    /// A verbs call failed; `errno` is what it returned or set; `detail`
    /// names the arguments that matter (may be empty).
    #[error("{call}{detail} failed: {}", std::io::Error::from_raw_os_error(*.errno))]
    Verbs {
        /// The rdma-core function (`ibv_modify_qp`, `ibv_post_send`, ...).
        call: &'static str,
        /// The positive errno (`EINVAL`, `ENOMEM`, ...).
        errno: i32,
        /// Printed after `call`: the arguments that matter, or empty.
        detail: String,
    },
    /// The crate was built without the `verbs` feature.
    #[error("device {name:?} needs rdma-core, but this build has no `verbs` feature")]
    NoVerbs {
        /// The device asked for.
        name: String,
    },
    /// The sim refused a control-path request.
    #[error("sim: {0}")]
    Sim(#[from] mlx5_dv::sim::SimError),
    /// A ring description was refused by the driver.
    #[error("ring description: {0}")]
    Desc(#[from] mlx5_dv::driver::DescError),
    /// A work request was refused before anything was written.
    #[error("work request refused: {0}")]
    Wqe(#[from] WqeError),
    /// An argument is out of range; nothing was changed.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A memory registration was refused before any device was asked;
    /// nothing was registered.
    #[error("registration refused: {0}")]
    Register(#[from] RegRefusal),
    /// A QP modify was refused before any verbs call: `attr` (an
    /// `IBV_QP_*` name) is missing, not allowed in `transition`, or out of
    /// range. Nothing changed.
    #[error("QP {transition}: {attr} {problem}")]
    QpAttr {
        /// The transition asked for, as `Init -> Rtr`.
        transition: String,
        /// The attribute, its `IBV_QP_*` name without the prefix (`PATH_MTU`).
        attr: &'static str,
        /// What is wrong with it (`is missing`, a range, ...).
        problem: String,
    },
    /// The QP is not in a state that takes this work request; nothing was posted.
    #[error("QP is in {state:?}; posting needs {needs}")]
    QpState {
        /// The state the QP is in.
        state: super::qp_state::QpState,
        /// The states that would take the WR (`INIT or later`, ...).
        needs: &'static str,
    },
    /// The send queue has no room for the batch (WQEBBs or `max_send_wr`
    /// outstanding); nothing was posted. Poll completions and post again.
    ///
    /// Unsignaled WRs posted after the last signaled one (auto-signal
    /// leaves up to `max_send_wr / 2 - 1` of them, a CQE being forced every
    /// `max_send_wr / 2`) hold their room until a later signaled WR's CQE
    /// retires them: a batch that needs their room is refused however long
    /// one polls. Post a signaled WR (or a smaller batch whose last WR is
    /// signaled), poll its completion, and post the batch again.
    #[error("send queue full: max_send_wr WRs outstanding, or no room in the SQ (poll completions, then post again)")]
    QueueFull,
    /// The receive queue already holds `max_recv_wr` receives; nothing was posted.
    #[error("receive queue full")]
    RecvQueueFull,
    /// A UD send of `len` bytes, more than the port's active MTU of `mtu`
    /// bytes: refused at post, nothing written. (Verbs and the IB spec,
    /// C10-93.1.1, let such a send complete successfully with nothing
    /// sent; rdma-direct refuses it instead, on every path.)
    #[error("a UD message of {len} bytes exceeds the port's active MTU of {mtu} bytes")]
    MessageTooLong {
        /// The message's length in bytes (the sum of its SGEs).
        len: u64,
        /// The port's active MTU in bytes.
        mtu: u32,
    },
    /// The QP's CQ has no room for the completions of the batch besides
    /// those of every outstanding WR (CQ credits); nothing was posted. Poll
    /// completions and post again: the sends outstanding always make a CQE
    /// that gives their credits back (a send that leaves at most half of
    /// the credits free is signaled, unseen), while a receive holds its
    /// credit until a message arrives for it. As with
    /// [`Error::QueueFull`], unsignaled sends posted after a QP's last
    /// signaled one keep their credits until a later signaled send of that
    /// QP completes: a batch that needs them is refused until then.
    #[error(
        "completion queue full: no CQ credits for the batch (poll completions, or size the CQ with CqSizing)"
    )]
    CqFull,
    /// Every buffer of a memory pool is out; nothing was registered. Drop a
    /// buffer (it goes back) or build the pool with more chunks.
    #[error("memory pool exhausted: all {buffers} buffers are out")]
    PoolExhausted {
        /// How many buffers the pool has.
        buffers: usize,
    },
    /// No GID suitable for RoCE v2 on this port.
    #[error("{0}")]
    NoGid(String),
    /// Something the device should have done did not happen in time.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The out-of-band connection exchange failed (TCP, or a message this
    /// build does not understand).
    #[error("connection exchange: {0}")]
    Exchange(String),
    /// A work request completed with an error status.
    #[error("work request {wr_id} on QP {qp_num:#x} completed with {status}, vendor error {vendor_err:#x}")]
    Completion {
        /// The failed WR's `wr_id` ([`Completion::wr_id`](crate::Completion::wr_id)).
        wr_id: u64,
        /// The QPN of its QP.
        qp_num: u32,
        /// The error status (never `SUCCESS`).
        status: super::completion::WcStatus,
        /// The vendor syndrome ([`Completion::vendor_err`](crate::Completion::vendor_err)).
        vendor_err: u32,
    },
    /// A completion named no outstanding WQE.
    #[error("CQE for QP {qpn:#x} names WQE counter {counter}, which is not outstanding")]
    StaleCqe {
        /// The CQE's QPN.
        qpn: u32,
        /// The CQE's `wqe_counter`: its WQE's index in the SQ (WQEBBs) or RQ, mod 2^16.
        counter: u16,
    },
    /// A shared CQ held a completion of a QP that is not one of its own.
    #[error("CQE for QP {qpn:#x}, which is not a QP of this shared CQ")]
    ForeignCqe {
        /// The CQE's QPN.
        qpn: u32,
    },
    /// The QP's completions go to a [`crate::SharedCq`]: poll, arm and wait
    /// on that instead.
    #[error("QP {qpn:#x} completes into a shared CQ: poll, arm and wait on the SharedCq")]
    SharedCq {
        /// The QP's QPN.
        qpn: u32,
    },
    /// The QP is split into a [`crate::SendHalf`] and a [`crate::RecvHalf`]
    /// ([`crate::Qp::split`]): post through them, or [`crate::Qp::join`]
    /// them first (also before moving it to RESET or SQD). Nothing was
    /// posted, and the state did not change.
    #[error("QP {qpn:#x} is split into a send half and a receive half: post through them; join them first to post on the Qp or move it to RESET or SQD")]
    QpSplit {
        /// The QP's QPN.
        qpn: u32,
    },
    /// The QP of this half ([`crate::Qp::split`]) was dropped: nothing
    /// polls the half's completions, so its queue never has room again
    /// (what it posted before still completes on the device).
    #[error("QP {qpn:#x}'s CQ owner (the Qp) was dropped: this half's queue is full for good")]
    CqOwnerGone {
        /// The QP's QPN.
        qpn: u32,
    },
    /// The reactor of an async wait ([`crate::Reactor`]) could not watch
    /// the completion channel's file descriptor (the OS's error, or no
    /// runtime to register with).
    #[error("the async wait's reactor: {0}")]
    Reactor(String),
}

/// Why a memory registration was refused before any device was asked
/// ([`Error::Register`]). A device's own refusal is [`Error::Verbs`] naming
/// `ibv_reg_mr` and its errno (`EFAULT` for memory it cannot pin for the
/// access asked).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegRefusal {
    /// Zero bytes.
    #[error("a memory region of zero bytes (a Vec registers its len, not its capacity)")]
    ZeroLength,
    /// `addr + len` wraps past the end of the address space.
    #[error("the range {addr:#x}+{len} wraps past the end of the address space")]
    Wraps {
        /// The start address.
        addr: u64,
        /// The length in bytes.
        len: u64,
    },
    /// REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE (IB spec 10.6.3.1).
    #[error("REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE too")]
    RemoteNeedsLocalWrite,
    /// Access bits this crate does not know.
    #[error("access flags {0:#x} hold bits this crate does not know")]
    UnknownAccess(u32),
    /// Write access (LOCAL_WRITE, REMOTE_WRITE or REMOTE_ATOMIC) asked of
    /// read-only memory (`memmap2::Mmap`): the sim refuses it by the type.
    #[error(
        "write access (LOCAL_WRITE, REMOTE_WRITE or REMOTE_ATOMIC) asked of read-only memory \
         (memmap2::Mmap): register it with REMOTE_READ alone, or map it writable (MmapMut)"
    )]
    ReadOnly,
    /// REMOTE_* access asked of a [`LocalMr`](crate::LocalMr), which only
    /// this program's own WRs may touch: register it with
    /// [`Pd::register`](crate::Pd::register) instead.
    #[error("a LocalMr takes no REMOTE_* access (use Pd::register for memory a peer reaches)")]
    RemoteOnLocal,
    /// A [`LocalMr`](crate::LocalMr) hands out `&mut [u8]`: it needs
    /// writable memory.
    #[error("a LocalMr needs writable memory (register a read-only mapping with Pd::register)")]
    LocalReadOnly,
}

/// `std::result::Result` with this crate's [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<super::completion::Completion> for Error {
    /// The error for a completion whose status is not success.
    fn from(c: super::completion::Completion) -> Self {
        Error::Completion {
            wr_id: c.wr_id,
            qp_num: c.qp_num,
            status: c.status,
            vendor_err: c.vendor_err,
        }
    }
}
