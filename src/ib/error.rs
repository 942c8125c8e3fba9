//! Error types of the portable crate.

use mlx5_dv::verbs::Access;
use mlx5_dv::wqe::{MwType, WqeError};

/// Every error the crate returns.
///
/// The refusals a caller may act on have variants of their own, with the
/// numbers that matter; [`Error::Invalid`] is left for the rare rest. Every
/// refusal before a device is asked changes nothing. New variants may come
/// (`#[non_exhaustive]`): match the ones you act on, and print the rest.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// A work request with more SGEs than the limit `limit` allows (the
    /// QP's `max_send_sge` or `max_recv_sge`, the SRQ's `max_sge`, or the
    /// direct path's SGEs per WQE); nothing was posted. Post fewer SGEs
    /// (copy into one buffer), or create the QP or SRQ with more.
    #[error("{sges} SGEs exceed {limit} of {max}")]
    TooManySges {
        /// The WR's SGE count.
        sges: usize,
        /// The most the limit allows.
        max: u32,
        /// Which limit (`the QP's max_send_sge`, ...).
        limit: &'static str,
    },
    /// An inline send or write of `len` bytes, more than `max` bytes (the
    /// QP's `max_inline`, or the direct path's inline bytes per WQE);
    /// nothing was posted. Post it from registered memory, not inline, or
    /// create the QP with a larger `max_inline`.
    #[error("inline payload of {len} bytes exceeds the inline limit of {max} bytes (the QP's max_inline, or the path's)")]
    InlineTooLong {
        /// The payload's length in bytes (the sum of its SGEs).
        len: u64,
        /// The limit in bytes.
        max: u32,
    },
    /// A message (a send's, a receive's, or one `Sge::bytes` slice) of
    /// `len` bytes, more than `max` bytes (2^31, the most one WR carries);
    /// nothing was posted. Split it into several WRs.
    #[error("message of {len} bytes exceeds 2^31 (at most {max} bytes per WR)")]
    LengthOverflow {
        /// The length in bytes.
        len: u64,
        /// The limit in bytes (2^31).
        max: u64,
    },
    /// `object` belongs to another protection domain (or device) than the
    /// QP, SRQ or PD it was handed to; nothing was changed. Use one of the
    /// same PD (register the memory, create the AH, SRQ or QP on it).
    #[error("the {object} belongs to another protection domain (or device)")]
    ForeignPd {
        /// What was foreign.
        object: PdObject,
    },
    /// An SGE of plain bytes ([`Sge::bytes`](crate::Sge::bytes)) in a WR
    /// that is not an inline send; nothing was posted. Mark the WR inline,
    /// or use an SGE of registered memory.
    #[error("an SGE of plain bytes (Sge::bytes) is inline data: only an inline send takes it")]
    BytesSge,
    /// A QP of one path (`qp`: `sim`, `ConnectX`, `direct-path`, `verbs`)
    /// was handed `object` of another (`theirs`); nothing was created. Make
    /// both on one device and path.
    #[error("a {qp} QP cannot use a {theirs} {object}")]
    PathMismatch {
        /// The QP's device or path.
        qp: &'static str,
        /// What it was handed.
        object: PdObject,
        /// That object's device or path.
        theirs: &'static str,
    },
    /// `op` is not for a QP of type `qp_type` (an RDMA READ or atomic on UC
    /// or UD, IB spec 9.8.3; a UD send on RC or UC; a connected operation
    /// on UD, or a UD one on RC or UC); nothing was posted or changed. Use
    /// a QP of the right type, or another operation.
    #[error("{op} is not for a {} QP", .qp_type.name())]
    WrongTransport {
        /// The QP's type.
        qp_type: mlx5_dv::verbs::QpType,
        /// What was asked (`an RDMA READ or atomic (IB spec 9.8.3)`, ...).
        op: &'static str,
    },
    /// A batch of `wrs` WRs larger than `queue` ever holds (`depth`: its
    /// WRs, or CQEs for a CQ): polling would never make room; nothing was
    /// posted. Post it in parts (or size the CQ with
    /// [`CqSizing`](crate::CqSizing)).
    #[error("a batch of {wrs} WRs can never fit {queue} of {depth} {}: post it in parts{}", .queue.unit(), .queue.hint())]
    NeverFits {
        /// The batch's WR count.
        wrs: usize,
        /// The queue that could never hold it.
        queue: Queue,
        /// Its depth: WRs (CQEs for a CQ).
        depth: u32,
    },
    /// A QP's halves ([`crate::Qp::split`]) may post `wrs` WRs, more than
    /// its CQ of `cqes` CQEs holds; nothing was split. Size the CQ with
    /// [`CqSizing`](crate::CqSizing).
    #[error("QP {qpn:#x}'s halves may post {wrs} WRs, more than its CQ of {cqes} CQEs holds: size the CQ with CqSizing to split it")]
    CqTooSmall {
        /// The QP's QPN.
        qpn: u32,
        /// The WRs its halves may have outstanding.
        wrs: u32,
        /// The CQ's depth in CQEs.
        cqes: u32,
    },
    /// A QP on an SRQ of `max_wr` receives, whose CQ has only `free` CQ
    /// credits free: it needs room for that many receives besides its
    /// sends; nothing was created. Size the CQ with
    /// `CqSizing::new().queue(srq.max_wr())` plus the sends of its QPs.
    #[error(
        "the QP's CQ has {free} CQ credits free; a QP on an SRQ of max_wr {max_wr} needs room \
             for that many receives besides its sends (size the CQ with \
             CqSizing::new().queue(srq.max_wr()).queue(the sends of its QPs))"
    )]
    SrqCqCredits {
        /// The CQ's free credits (CQEs).
        free: u32,
        /// The SRQ's `max_wr`.
        max_wr: u32,
    },
    /// `op` needs the QP in RESET, and it is in `state`; nothing changed.
    /// Move it to RESET first (or use a fresh QP).
    #[error("{op} needs the QP in RESET (it is in {state:?})")]
    NotInReset {
        /// What was asked (`connecting`, ...).
        op: &'static str,
        /// The state it is in.
        state: mlx5_dv::verbs::QpState,
    },
    /// An atomic WR of the wrong shape: it takes exactly one 8-byte SGE
    /// for the old value, not inline. `sges` and `len` (bytes, all SGEs)
    /// are this one's; nothing was posted.
    #[error("an atomic takes exactly one 8-byte SGE for the old value, not inline (this one: {sges} SGEs, {len} bytes{})", if *.inline { ", inline" } else { "" })]
    AtomicShape {
        /// Its SGE count.
        sges: usize,
        /// Its length in bytes.
        len: u64,
        /// Whether it was marked inline.
        inline: bool,
    },
    /// An atomic's remote address `addr` is not 8-byte aligned; nothing
    /// was posted.
    #[error("atomic remote address {addr:#x} is not 8-byte aligned")]
    AtomicUnaligned {
        /// The remote address.
        addr: u64,
    },
    /// A masked atomic WR of the wrong shape: it takes exactly one SGE of
    /// `size` bytes (4 or 8) for the old value, not inline. `sges` and
    /// `len` (bytes, all SGEs) are this one's; nothing was posted.
    #[error("a {size}-byte masked atomic takes exactly one {size}-byte SGE for the old value, not inline (this one: {sges} SGEs, {len} bytes{})", if *.inline { ", inline" } else { "" })]
    MaskedAtomicShape {
        /// The operand size in bytes.
        size: u32,
        /// Its SGE count.
        sges: usize,
        /// Its length in bytes.
        len: u64,
        /// Whether it was marked inline.
        inline: bool,
    },
    /// A masked atomic's remote address `addr` is not aligned to its
    /// operand size (`size` bytes), or an operand `value` does not fit it
    /// (`addr` 0 then); nothing was posted.
    #[error("a {size}-byte masked atomic {}", if *.value != 0 { format!("takes operands of {size} bytes, not {:#x}", .value) } else { format!("needs a {size}-byte-aligned remote address, not {:#x}", .addr) })]
    MaskedAtomicOperand {
        /// The operand size in bytes.
        size: u32,
        /// The misaligned remote address (0 for an operand too wide).
        addr: u64,
        /// The operand too wide (0 for a misaligned address).
        value: u64,
    },
    /// An RDMA READ marked inline (it lands in local memory, it sends
    /// none); nothing was posted.
    #[error("an RDMA READ cannot be inline")]
    ReadInline,
    /// A configuration value out of range at creation (QP, CQ, SRQ, AH,
    /// connection): `field` is `value`, which must be within
    /// `min..=max`; nothing was created. Ask for a value in range.
    #[error("{field} {value} is out of range: must be {min}..={max}")]
    Config {
        /// The setting (`max_send_wr`, `cq_depth`, `port`, ...).
        field: &'static str,
        /// The value asked for.
        value: u64,
        /// The smallest allowed.
        min: u64,
        /// The largest allowed.
        max: u64,
    },
    /// The device `device` does not have `feature`; nothing was changed.
    /// Use another device (or path), or do without it.
    #[error("{device} does not support {feature}")]
    Unsupported {
        /// The device's name (`sim`, `mlx5_0`, ...).
        device: String,
        /// What it lacks.
        feature: Feature,
    },
    /// A memory-window bind, unbind or invalidation refused before
    /// anything was written (no ring bytes, no doorbell): see
    /// [`MwRefusal`](crate::MwRefusal) for each reason.
    #[error("memory window refused: {0}")]
    MwRefused(MwRefusal),
    /// A receive posted to a QP that receives from an SRQ; nothing was
    /// posted. Post receives to the SRQ.
    #[error("QP {qpn:#x} receives from an SRQ: post receives to the SRQ")]
    SrqAttached {
        /// The QP's QPN.
        qpn: u32,
    },
    /// `offset + len` bytes (`len` bytes at `offset`) leave `object` of
    /// `size` bytes; nothing was changed. Stay within it.
    #[error("range {offset}+{len} is outside the {size}-byte {object}")]
    OutOfBounds {
        /// The start, in bytes from the start of `object`.
        offset: u64,
        /// The length in bytes.
        len: u64,
        /// `object`'s size in bytes.
        size: u64,
        /// What (`memory region`, `pool buffer`, `buffer`).
        object: &'static str,
    },
    /// `object` lacks the access `needs` (all of those bits, or for
    /// remote access any of them); nothing was posted. Register the memory
    /// with that access.
    #[error("{object} needs {needs:?}")]
    MissingAccess {
        /// What needs it (`a receive buffer`, ...).
        object: &'static str,
        /// The access.
        needs: mlx5_dv::verbs::Access,
    },
    /// An operating-system call failed (`what` names it and its arguments).
    #[error("{what}: {source}")]
    Os {
        /// The call and what it was asked (`memfd_create`, ...).
        what: String,
        /// The OS's error.
        source: std::io::Error,
    },
    /// A completion channel already has a CQ of `token`: its events could
    /// not be told apart; nothing was created. Pick another token.
    #[error("token {token} names a CQ already on this completion channel: its events could not be told apart")]
    DuplicateToken {
        /// The token asked for.
        token: u64,
    },
    /// The CQ's events go to a shared completion channel (its `token`
    /// there): wait on the channel, then poll the CQ.
    #[error("this CQ's events go to a shared completion channel (token {token}): wait on the channel, then poll the CQ")]
    ChannelShared {
        /// The CQ's token on the channel.
        token: u64,
    },
    /// QP `qpn` completes into a shared CQ and has `outstanding` WRs: it
    /// is not moved to RESET. Reset it with
    /// [`SharedCq::reset_qp`](crate::SharedCq::reset_qp), which drains the
    /// CQ of its completions.
    #[error("QP {qpn:#x} completes into a shared CQ and has {outstanding} WRs outstanding: reset it with SharedCq::reset_qp, which drains the CQ of its completions")]
    SharedCqOutstanding {
        /// The QP's QPN.
        qpn: u32,
        /// Its outstanding WRs.
        outstanding: u32,
    },
    /// The QP at `index` of a shared CQ (QPN `qpn`) does not complete into
    /// it (swapped in?); nothing changed.
    #[error("QP {qpn:#x} at index {index} does not complete into this CQ (swapped in?)")]
    NotOnCq {
        /// The QP's QPN.
        qpn: u32,
        /// Its index in the shared CQ's QPs.
        index: usize,
    },
    /// [`Qp::join`](crate::Qp::join) was handed halves of another QP (or
    /// of another split); nothing changed.
    #[error("these halves are not those of QP {qpn:#x}")]
    NotTheHalves {
        /// The QPN of the QP asked to join them.
        qpn: u32,
    },
    /// A memory registration was refused before any device was asked;
    /// nothing was registered.
    #[error("registration refused: {0}")]
    Register(#[from] RegRefusal),
    /// The memory region has no CPU mapping this crate can prove (a
    /// DMA-BUF registration, [`Pd::register_dmabuf`](crate::Pd::register_dmabuf)):
    /// the device reaches its bytes, the program does not, so the `Mr`'s
    /// byte copies and slices, and a safe [`Sge::new`](crate::Sge::new)
    /// (which an inline post would copy through the CPU), are refused;
    /// nothing was read or written. Name it in SGEs with
    /// [`Sge::of_dmabuf`](crate::Sge::of_dmabuf), and reach its bytes
    /// through its exporter (the GPU's API).
    #[error("the memory region is a DMA-BUF registration with no CPU mapping: {what} cannot reach it (SGEs: Sge::of_dmabuf, never inline)")]
    NoCpuMapping {
        /// What was refused (`Mr::write`, `Sge::new`, ...).
        what: &'static str,
    },
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
        state: mlx5_dv::verbs::QpState,
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
    /// [`Pd::reg_mr`](crate::Pd::reg_mr) instead.
    #[error("a LocalMr takes no REMOTE_* access (use Pd::reg_mr for memory a peer reaches)")]
    RemoteOnLocal,
    /// A [`LocalMr`](crate::LocalMr) hands out `&mut [u8]`: it needs
    /// writable memory.
    #[error("a LocalMr needs writable memory (register a read-only mapping with Pd::reg_mr)")]
    LocalReadOnly,
    /// A DMA-BUF registration whose `iova` and `offset` differ in their
    /// offset within a 4096-byte page: the device maps whole pages, so the
    /// two must line up (the kernel refuses it too: `EINVAL`, Linux
    /// `drivers/infiniband/core/uverbs_std_types_mr.c`).
    #[error("DMA-BUF registration: iova {iova:#x} and offset {offset:#x} differ within a 4096-byte page ({:#x} != {:#x})", iova % 4096, offset % 4096)]
    IovaPageOffset {
        /// The IOVA asked for.
        iova: u64,
        /// The offset into the dma-buf.
        offset: u64,
    },
    /// [`Access::ON_DEMAND`](crate::Access::ON_DEMAND) asked of a DMA-BUF
    /// registration: its pages are the exporter's, which moves them through
    /// its own notifier (the kernel's `ib_umem_dmabuf`), not the process's
    /// page tables, so there is nothing to page on demand. Register without
    /// it.
    #[error("a DMA-BUF registration takes no ON_DEMAND access (the exporter moves its pages, not the process's page tables)")]
    OnDemandDmabuf,
}

/// Which object an [`Error::ForeignPd`] or [`Error::PathMismatch`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PdObject {
    /// An SGE's memory (its memory region).
    Sge,
    /// An address handle.
    Ah,
    /// A shared receive queue.
    Srq,
    /// A completion queue.
    Cq,
    /// A queue pair.
    Qp,
    /// A completion channel.
    CompChannel,
}

impl std::fmt::Display for PdObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PdObject::Sge => "SGE's memory",
            PdObject::Ah => "address handle",
            PdObject::Srq => "SRQ",
            PdObject::Cq => "CQ",
            PdObject::Qp => "QP",
            PdObject::CompChannel => "completion channel",
        })
    }
}

/// The queue an [`Error::NeverFits`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Queue {
    /// A QP's send queue (its `max_send_wr`).
    Send,
    /// A QP's receive queue (its `max_recv_wr`; 0: it takes no receives).
    Recv,
    /// A completion queue (its depth in CQEs; size it with `CqSizing`).
    Cq,
    /// A shared receive queue (its `max_wr`).
    Srq,
}

impl std::fmt::Display for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Queue::Send => "a send queue",
            Queue::Recv => "a receive queue",
            Queue::Cq => "a CQ",
            Queue::Srq => "an SRQ",
        })
    }
}

impl Queue {
    fn unit(self) -> &'static str {
        match self {
            Queue::Cq => "CQEs",
            _ => "WRs",
        }
    }

    fn hint(self) -> &'static str {
        match self {
            Queue::Cq => ", or size the CQ with CqSizing",
            _ => "",
        }
    }
}

/// A device feature an [`Error::Unsupported`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Feature {
    /// CQE compression (mlx5 mini-CQEs).
    CqeCompression,
    /// Inline receive (scatter to CQE).
    InlineReceive,
    /// Dynamically connected transport (DC).
    Dc,
    /// DMA-BUF memory registration.
    DmaBuf,
    /// On-demand paging (ODP): `IBV_ACCESS_ON_DEMAND` registrations and
    /// `ibv_advise_mr`. Refused where `ibv_query_device_ex`'s `odp_caps`
    /// lack `IBV_ODP_SUPPORT` (before any other verb), or where the kernel
    /// driver answers `EOPNOTSUPP` (rxe in Linux 6.1 has no ODP).
    Odp,
    /// Implicit ODP: one registration of the whole address space
    /// (`ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | ...)`).
    /// Refused where `odp_caps.general_caps` lacks
    /// `IBV_ODP_SUPPORT_IMPLICIT`, before any other verb.
    ImplicitOdp,
    /// Masked atomics (extended atomics).
    MaskedAtomics,
    /// A connection manager (rdma_cm): kernel RDMA devices only.
    RdmaCm,
    /// The verbs path (the sim has only the direct path).
    VerbsPath,
    /// The direct path: mlx5 (ConnectX) devices and the sim only.
    DirectPath,
    /// A GID table (RoCE devices).
    GidTable,
    /// Completion timestamps (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`).
    CompletionTimestamp,
    /// Memory windows (`ibv_alloc_mw`).
    MemoryWindows,
}

impl std::fmt::Display for Feature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Feature::CqeCompression => "CQE compression",
            Feature::InlineReceive => "inline receive",
            Feature::Dc => "DC (dynamically connected) QPs",
            Feature::DmaBuf => "DMA-BUF registration",
            Feature::Odp => {
                "on-demand paging (ODP: its odp_caps lack IBV_ODP_SUPPORT, or its driver refuses \
                 IBV_ACCESS_ON_DEMAND with EOPNOTSUPP, as rxe in Linux 6.1 does)"
            }
            Feature::ImplicitOdp => {
                "implicit ODP (a registration of the whole address space: its odp_caps lack \
                 IBV_ODP_SUPPORT_IMPLICIT)"
            }
            Feature::MaskedAtomics => "masked atomics",
            Feature::RdmaCm => {
                "rdma_cm (it needs a kernel RDMA device; the sim has no connection manager)"
            }
            Feature::VerbsPath => {
                "the verbs path (the sim has only the direct path; --backend verbs needs an ibverbs device)"
            }
            Feature::DirectPath => {
                "the direct path (it drives ConnectX, mlx5, devices and the sim only)"
            }
            Feature::GidTable => "a GID table (GID indices apply to RoCE devices)",
            Feature::CompletionTimestamp => "completion timestamps",
            Feature::MemoryWindows => "memory windows",
        })
    }
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

/// Why a window operation was refused before anything was posted
/// ([`Error::MwRefused`](crate::Error::MwRefused)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MwRefusal {
    /// The window is of the other type for this operation (type 1 binds
    /// through `Qp::bind_mw` / `Qp::unbind_mw`; type 2 through WRs).
    WrongType {
        /// The window's type.
        mw_type: MwType,
    },
    /// The MR was not registered with `Access::MW_BIND` (IB spec C10-73).
    NoMwBind,
    /// The range is empty, over 2^31 bytes, or outside the MR.
    Range {
        /// Byte offset in the MR.
        offset: usize,
        /// Length in bytes.
        len: usize,
        /// The MR's length.
        mr_len: usize,
    },
    /// The window's access has a flag a window cannot grant (MW_BIND), or
    /// REMOTE_WRITE / REMOTE_ATOMIC over an MR without LOCAL_WRITE (C10-75).
    Access {
        /// The access asked for.
        access: Access,
    },
    /// The window, its MR or the QP are of different PDs.
    OtherPd,
    /// The QP cannot post UMR WQEs: created without
    /// `QpConfig::memory_windows` (the direct path's WQEs are then too
    /// small), or of a transport with no windows (UD, DC).
    NotEnabled,
    /// A bind of this window is outstanding (posted, its WQE not yet
    /// retired by a poll of its QP's CQ, on this QP or another): one bind
    /// of a window at a time, since each names the rkey the one before it
    /// gives (IB spec o10-37.2; `ibv_bind_mw(3)`). Poll the QP of the bind
    /// outstanding, then bind again. Nothing was written.
    BindOutstanding {
        /// The window's rkey now (the one the outstanding bind gives it).
        rkey: u32,
    },
}

impl std::fmt::Display for MwRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MwRefusal::WrongType { mw_type } => write!(
                f,
                "a type-{} window: type 1 binds through Qp::bind_mw / unbind_mw, type 2 through WRs (SendWr::bind_mw, local_inv)",
                if *mw_type == MwType::One { 1 } else { 2 }
            ),
            MwRefusal::NoMwBind => f.write_str("the MR was not registered with Access::MW_BIND"),
            MwRefusal::Range {
                offset,
                len,
                mr_len,
            } => write!(
                f,
                "{len} bytes at offset {offset} is not 1 to 2^31 bytes inside the MR's {mr_len}"
            ),
            MwRefusal::Access { access } => write!(
                f,
                "a window cannot grant {access:?} over this MR (REMOTE_WRITE and REMOTE_ATOMIC need the MR's LOCAL_WRITE; MW_BIND is an MR's flag)"
            ),
            MwRefusal::OtherPd => f.write_str("the window, the MR and the QP must share one PD"),
            MwRefusal::NotEnabled => f.write_str(
                "the QP posts no memory-window WRs: create it with QpConfig::memory_windows (RC or UC)",
            ),
            MwRefusal::BindOutstanding { rkey } => write!(
                f,
                "a bind of window {rkey:#x} is outstanding: one bind of a window at a time (poll the QP it was posted on until it retires)"
            ),
        }
    }
}
