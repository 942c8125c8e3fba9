//! A software mlx5 device ("sim").
//!
//! It hands out SQ/CQ rings, doorbell records and a UAR page in the same
//! descriptions `mlx5dv_init_obj` returns ([`mlx5dv_qp`], [`mlx5dv_cq`]), keeps
//! an MR table, and executes the WQEs it finds between its consumer index and
//! the SQ doorbell record as the PRM says the NIC does, writing CQEs with the
//! owner bit of each pass. Two RC QPs of one `Device` connect to each other.
//!
//! Execution is either synchronous ([`Device::process`], for deterministic
//! tests) or on a device thread ([`Device::start`]).
//!
//! What it executes: SEND, SEND_IMM and SEND_INVAL (into the responder's
//! posted receive WQEs, RNR NAKs retried per `rnr_retry` when none is
//! posted; SEND_INVAL frees a type-2 window first, `mw`), RDMA WRITE
//! and WRITE_IMM (SGE and inline payloads), RDMA READ, ATOMIC_CS and
//! ATOMIC_FA (on the remote u64 in host byte order). A malformed WQE (DS 0,
//! wrong QPN or index, unknown opcode) completes with LOCAL_QP_OP_ERR
//! (syndrome 0x02). A write with a bad
//! rkey, outside the MR, or without REMOTE_WRITE access on the MR or the
//! responder QP completes with REM_ACCESS_ERR (0x13), moves both QPs to ERR,
//! and leaves remote memory untouched. A QP in ERR flushes every WQE posted to
//! it with WR_FLUSH_ERR (0x05), signaled or not.
//!
//! Memory windows (`mw`): windows on a PD ([`Device::alloc_mw`]) whose
//! rkeys share the MRs' key space; UMR WQEs ([`crate::wqe::UmrWqe`]) bind
//! them (type 1 and 2) and invalidate them (`LOCAL_INV`, a type-1
//! zero-length bind; a peer's SEND_INVAL), checked as `mw.rs` says
//! (MW_BIND_ERR, LOCAL_QP_OP_ERR, REMOTE_INVAL_REQ_ERR);
//! a peer's access whose rkey names a window is checked against the
//! window's own range, access, variant byte and (type 2) QP; an MR with a
//! bound window is not deregistered.
//!
//! ODP (`odp`): an MR registered with [`Access::ON_DEMAND`] (or
//! [`Device::reg_implicit_odp`], the whole address space) is not pinned;
//! each of its 4096-byte pages faults in (counted, [`Device::odp_stats`])
//! on the first DMA to it, transparently, except a receive into an SRQ
//! WQE, which gets ConnectX's page-fault CQE (RESP_ERR, 0x22 / 0x93) and
//! the message again in the next WQE; [`Device::advise_mr`] prefetches,
//! [`Device::evict_odp`] invalidates.
//!
//! DC (`dc`): a DCT ([`Device::create_dct`]) on an SRQ and a CQ, keyed,
//! RESET -> INIT -> RTR only, its number ([`Qp::dctn`]) given at RTR; a
//! DCI ([`Device::create_dci`]) whose WQEs each name a DCT by number and
//! key and then run as RC's against it (SENDs into its SRQ, naming the
//! DCI in the CQE's `flags_rqpn`). A WQE naming no DCT in RTR completes
//! with [`DC_ADDRESS_SYNDROME`] (the sim's choice) and delivers nothing.
//!
//! How it touches registered memory: an MR registered *owned*
//! ([`Device::reg_mr_owned`]: the host's `LocalMr`, which moves into the QP
//! with the WR naming it) is read and written plainly (memcpy), because
//! the WR owns it while it is outstanding. Every other MR may be reached by
//! a peer or read by the program at any moment, so the sim reads and writes
//! it one relaxed atomic byte at a time (`crate::shared`): the granularity
//! the host's safe copies use too, since atomics of different sizes racing
//! on the same bytes are undefined behaviour. The last byte of a transfer
//! is stored with release order (perftest-style pollers watch it);
//! atomics act on the remote word as one 8-byte atomic.
//!
//! Files: here, the public types, the MR, CQ and QP tables (`State`) and
//! the MR calls; `cq` and `qp` create the CQs and QPs and hold their
//! handles ([`Cq`], [`Qp`]); `thread` runs the device thread; `exec`
//! executes an SQ's WQEs (RNR retries, errors, requester CQEs), `ops` each
//! opcode (DMA, the responder's checks), `recv` the responder's receive
//! queue; `ud` UD's datagrams, `dc` DC's targets and initiators; `cq` also writes CQEs and raises events, `session` holds runs of
//! them as compressed sessions on a CQ that compresses (the sim's model of
//! CQE compression, [`crate::mini_cqe`]). `dma` is the sim's door to
//! memory; `odp` checks an ODP MR's pages before it.
//!
//! [`mlx5dv_qp`]: crate::dv::mlx5dv_qp
//! [`mlx5dv_cq`]: crate::dv::mlx5dv_cq

mod channel;
mod cq;
mod dc;
mod dma;
mod dmabuf;
mod exec;
mod masked;
mod mw;
mod odp;
mod ops;
mod qp;
mod recv;
mod scatter;
mod session;
mod srq;
mod thread;
mod ud;

pub use channel::Channel;
pub use cq::Cq;
pub use dc::DC_ADDRESS_SYNDROME;
pub use odp::{OdpAdvice, OdpCaps, OdpStats, ODP_PAGE};
pub use qp::{Qp, BF_OFFSET, BF_SIZE};
pub use srq::{AsyncEvent, Srq, MAX_SRQ_WR};
pub use thread::{device_cpu, device_threads};
pub use ud::{GRH_BYTES, UD_MTU};
// The access flags, QP transports and QP states the sim takes: defined in
// `crate::verbs`, shared with rdma-direct.
pub use crate::verbs::{Access, QpState, QpType};

use crate::prm::INVALID_LKEY;
use dma::DmaBuf;
use exec::run_all;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// Largest SQ the sim hands out, in WQEBBs.
pub const MAX_SQ_WQEBBS: u32 = 1 << 15;

/// How long a requester waits after an RNR NAK before it retries: the
/// responder's `min_rnr_timer` 12, 0.64 ms (IB spec table 45), what
/// rdma-core's `ibv_rc_pingpong` and perftest ask for.
pub const RNR_DELAY: std::time::Duration = std::time::Duration::from_micros(640);

/// Errors from the sim's control path.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SimError {
    /// A ring size (entries, or bytes per CQE) that is not a power of two in the range the sim takes.
    #[error("{what} = {value} must be a power of two between {min} and {max}")]
    BadSize {
        /// The size asked, e.g. `cqe_cnt`.
        what: &'static str,
        /// Its value.
        value: u32,
        /// The smallest taken.
        min: u32,
        /// The largest taken.
        max: u32,
    },
    /// A memory region of zero bytes.
    #[error("memory region of zero length")]
    ZeroLength,
    /// A memory region whose end passes the top of the address space.
    #[error("memory region {addr:#x}+{len} wraps the address space")]
    BadRange {
        /// Start address.
        addr: u64,
        /// Length in bytes.
        len: u64,
    },
    /// No memory region has this lkey.
    #[error("no memory region with lkey {0:#x}")]
    NoSuchMr(u32),
    /// No memory window has this rkey's key index.
    #[error("no memory window with rkey {0:#x}")]
    NoSuchMw(u32),
    /// An MR with memory windows bound to it cannot be deregistered.
    #[error("memory region {lkey:#x} has {windows} memory window(s) bound to it")]
    MrHasWindows {
        /// The MR's lkey.
        lkey: u32,
        /// Windows bound to it.
        windows: usize,
    },
    /// An owned memory region ([`Device::reg_mr_owned`]) asked for REMOTE_* access.
    #[error("an owned memory region takes no REMOTE_* access (asked {0:?})")]
    RemoteOnOwned(Access),
    /// A QP state transition the sim does not allow.
    #[error("invalid QP transition {from:?} -> {to:?}")]
    BadTransition {
        /// The QP's state.
        from: QpState,
        /// The state asked for.
        to: QpState,
    },
    /// No QP has this number on this device.
    #[error("no QP {0:#x} on this device")]
    NoSuchQp(u32),
    /// No SRQ has this number on this device.
    #[error("no SRQ {0:#x} on this device")]
    NoSuchSrq(u32),
    /// The CQ (its number) was created by another device.
    #[error("CQ {0:#x} belongs to another device")]
    ForeignCq(u32),
    /// Every number of a kind (QP, CQ, memory key) is in use.
    #[error("every {what} number is in use")]
    Exhausted {
        /// What ran out: `QP`, `CQ` or `memory key`.
        what: &'static str,
    },
    /// A feature the sim does not model in the form asked.
    #[error("the sim does not support {what}")]
    Unsupported {
        /// What was asked.
        what: &'static str,
    },
    /// An implicit ODP MR ([`Device::reg_implicit_odp`]) asked without
    /// [`Access::ON_DEMAND`] (the kernel: EINVAL).
    #[error("implicit ODP needs ON_DEMAND access (asked {0:?})")]
    NeedsOnDemand(Access),
    /// An ODP call ([`Device::advise_mr`], [`Device::evict_odp`]) named an
    /// MR registered without [`Access::ON_DEMAND`] (`ibv_advise_mr`: ENOENT).
    #[error("memory region {0:#x} is not an ODP memory region")]
    NotOdp(u32),
    /// [`Device::advise_mr`] named an MR of another PD (EPERM).
    #[error("memory region {lkey:#x} is not on PD {pd}")]
    ForeignMr {
        /// The MR's lkey.
        lkey: u32,
        /// The PD the call named.
        pd: u32,
    },
    /// [`OdpAdvice::PrefetchWrite`] on an MR that is not writable (EPERM).
    #[error("memory region {0:#x} is not writable: no prefetch for writing")]
    NotWritable(u32),
    /// A range not inside the MR it names ([`Device::advise_mr`]: EFAULT).
    #[error("{addr:#x}+{len} is not inside memory region {lkey:#x}")]
    OutsideMr {
        /// The MR's lkey.
        lkey: u32,
        /// Start address.
        addr: u64,
        /// Length in bytes.
        len: u64,
    },
    /// A page of an implicit ODP MR that the process does not map with the
    /// permission asked ([`Device::advise_mr`]: EFAULT).
    #[error("page {0:#x} is not mapped with the permission asked")]
    Unmapped(u64),
    /// The operating system refused a resource (an eventfd); the message says which and why.
    #[error("the operating system refused the sim a resource: {0}")]
    Os(String),
}

/// Keys of a registered memory region (equal, as on ConnectX).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrKeys {
    /// Local key (what data segments name).
    pub lkey: u32,
    /// Remote key (what a peer's raddr segment names).
    pub rkey: u32,
}

struct MrEntry {
    pd: u32,
    addr: u64,
    len: u64,
    access: Access,
    /// Registered with [`Device::reg_mr_owned`]: only the WRs naming it touch
    /// it while they are outstanding, so the sim copies to and from it
    /// plainly (memcpy). Other MRs a peer or the program may access at any
    /// moment: the sim copies them one relaxed atomic byte at a time.
    owned: bool,
    /// A DMA-BUF MR ([`Device::reg_dmabuf_mr`]): WQEs name its bytes by
    /// this device address (IOVA), which `dmabuf.rs` translates to the
    /// host address `addr + (va - iova)` before any check or DMA. `None`:
    /// WQEs name host addresses.
    iova: Option<u64>,
    /// An ODP MR ([`Access::ON_DEMAND`]; `odp.rs`): its resident pages.
    /// `None`: pinned, every page resident.
    odp: Option<odp::Pages>,
}

struct CqEntry {
    cqn: u32,
    buf: DmaBuf,
    dbrec: DmaBuf,
    uar: DmaBuf,
    cqe_cnt: u32,
    cqe_size: u32,
    /// Next CQE index the device produces.
    pi: u32,
    /// Created to ignore overrun (`IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`, the
    /// CQ context's `oi` bit): the device never reads the consumer-index
    /// record and writes every CQE into the next slot, room or not.
    ignore_overrun: bool,
    /// A CQE found no free slot: the CQ stopped (writes no more CQEs) and
    /// raised a CQ error event (`IBV_EVENT_CQ_ERR`). Never set on a CQ
    /// that ignores overrun.
    overrun: bool,
    /// CQ error events raised.
    error_events: u64,
    /// Completion events raised, and the arm sequence number the next event
    /// answers: the CQ is armed while the arm word in its doorbell record
    /// carries that number (the host re-arms with the next one after an event).
    completion_events: u64,
    event_sn: u32,
    /// Becomes readable on each completion event (the completion channel's
    /// file descriptor of verbs).
    event_fd: Arc<nix::sys::eventfd::EventFd>,
    /// Woken (once) by the next completion event, after the event fd is
    /// written ([`Cq::wake_on_event`]): an async wait needs no `poll(2)`.
    waker: Arc<std::sync::Mutex<Option<std::task::Waker>>>,
    /// The shared completion channel the events go to instead, and the
    /// CQ's context value there ([`Device::create_cq_on`]).
    channel: Option<(Arc<channel::ChannelShared>, u64)>,
    /// Handles keeping the CQ: its `Cq` and every QP completing to it. The
    /// entry (and its ring memory) goes when the last one does.
    refs: u32,
    /// CQE compression (basic layout, [`crate::mini_cqe`]) is on
    /// ([`Cq::set_compression`]), and the run of CQEs held as the session
    /// being gathered (written at the latest when the pass ends).
    compress: bool,
    held: session::Held,
    /// CQE bytes written into the ring ([`Cq::cqe_bytes_written`]).
    cqe_bytes: u64,
    /// Completion timestamps are on ([`Cq::set_timestamps`]): the device's
    /// clock epoch ([`State::epoch`]), from which each CQE's `timestamp`
    /// counts nanoseconds.
    clock: Option<std::time::Instant>,
}

struct QpEntry {
    pd: u32,
    qp_type: QpType,
    state: QpState,
    sq: DmaBuf,
    sq_wqe_cnt: u32,
    dbrec: DmaBuf,
    uar: DmaBuf,
    send_cqn: u32,
    /// Next WQEBB index the device consumes.
    sq_ci: u32,
    rq: DmaBuf,
    rq_wqe_cnt: u32,
    rq_stride: u32,
    /// Next receive WQE the device consumes.
    rq_ci: u32,
    peer: Option<u32>,
    access: Access,
    /// RNR retries the QP allows (7: forever), set at RTR -> RTS.
    rnr_retry: u8,
    /// Retries left for the WQE at the head of the SQ, and when it may be
    /// tried again after an RNR NAK.
    rnr_left: u8,
    rnr_wait_until: Option<std::time::Instant>,
    /// In SQD: the SQ index the drain ends at (the doorbell's at the move),
    /// and whether `AsyncEvent::SqDrained` is still to be raised there.
    sqd: Option<(u32, bool)>,
    /// The RNR NAK timer this QP asks its requesters to wait (responder
    /// side, set at INIT -> RTR from `min_rnr_timer`).
    min_rnr_delay: std::time::Duration,
    /// A test hook rewrote its SQ ([`Qp::hook_write_sq`]): its WQEs may
    /// name an owned MR's lkey they do not own, so they may touch none.
    hooked: bool,
    /// The SRQ its receives come from (then its own RQ is empty).
    srq: Option<u32>,
    /// UD: the qkey datagrams to it must carry (set at RESET -> INIT).
    qkey: u32,
    /// Its user index, which version-1 CQEs carry in `srqn_uidx` (bytes
    /// 32..36) where version 0 had the SRQN: never an SRQN of this device.
    uidx: u32,
    /// Test hook ([`Qp::hook_swap_recv_completions`]): its receive CQEs
    /// are written in swapped pairs (the second WQE's first), as a device
    /// completing out of order; the first of a pair waits here.
    swap_recv: bool,
    held_recv: Option<crate::cqe::Cqe>,
    /// Scatter to CQE (`scatter.rs`): the QP context's `cs_res` (small
    /// SENDs received into the CQE) and `cs_req` (small READ responses and
    /// atomic results into a signaled requester CQE), and the data of the
    /// executing WQE's requester CQE.
    scatter_resp: bool,
    scatter_req: bool,
    req_inline: Option<scatter::InlineData>,
    /// CQEs written for this QP with data in them (responder and requester).
    scatter_cqes: u64,
    /// DC (`dc.rs`): a DCI or a DCT; `None` for RC, UC and UD. Both keep
    /// `qp_type` RC: the operations run as RC's between the DCI and the DCT.
    dc: Option<dc::DcRole>,
}

struct SrqEntry {
    pd: u32,
    buf: DmaBuf,
    dbrec: DmaBuf,
    /// WQEs in the ring, and bytes per WQE.
    count: u32,
    stride: u32,
    /// The next WQE the device consumes, and how many it consumed (mod 2^16).
    cur: u32,
    consumed: u16,
    /// The armed limit (0: none), and the limit events raised.
    limit: u32,
    limit_events: u64,
}

/// Hasher for the device's tables, keyed by QPN, CQN and MR key: a multiply
/// and a fold (the keys are the device's own numbers, not attacker-chosen, so
/// SipHash's cost per lookup, several per WQE, buys nothing).
#[derive(Default, Clone, Copy)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u32(b as u32 ^ (self.0 as u32).rotate_left(8));
        }
    }

    fn write_u32(&mut self, n: u32) {
        let h = (self.0 ^ n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // Fold the high half in: the table indexes by the low bits, and MR
        // keys step by 0x100.
        self.0 = h ^ (h >> 32);
    }
}

type Table<V> = HashMap<u32, V, BuildHasherDefault<KeyHasher>>;

impl State {
    /// A memory key for an MR or a memory window: keys step by 0x100 and
    /// wrap; never 0, never MLX5_INVALID_LKEY (0x100: it ends a receive
    /// WQE's segment list), never one an MR or a window holds.
    fn alloc_key(&mut self) -> Result<u32, SimError> {
        let start = self.next_key;
        let mut key = start;
        while key == 0
            || key == INVALID_LKEY
            || self.mrs.contains_key(&key)
            || self.mws.contains_key(&key)
        {
            key = key.wrapping_add(0x100);
            if key == start {
                return Err(SimError::Exhausted { what: "memory key" });
            }
        }
        self.next_key = key.wrapping_add(0x100);
        Ok(key)
    }
}

struct State {
    mrs: Table<MrEntry>,
    /// How many of `mrs` are DMA-BUF MRs (none: no address is translated).
    dmabufs: usize,
    /// ODP MRs and counts (`odp.rs`).
    odp: odp::OdpState,
    /// Memory windows by key index (the rkey with its low, variant byte 0).
    mws: Table<mw::MwEntry>,
    cqs: Table<CqEntry>,
    qps: Table<QpEntry>,
    srqs: Table<SrqEntry>,
    /// QP numbers in creation order (the device walks them without allocating).
    qp_order: Vec<u32>,
    next_key: u32,
    next_cqn: u32,
    next_qpn: u32,
    next_pdn: u32,
    next_srqn: u32,
    next_uidx: u32,
    /// Async events raised and not yet taken, and the fd that says so.
    async_events: Vec<AsyncEvent>,
    async_fd: Option<Arc<nix::sys::eventfd::EventFd>>,
    /// Reused buffer for SEND payloads.
    scratch: Vec<u8>,
    /// CQs holding a compressed session not yet written (written when the
    /// pass over the QPs ends: `session::write_held`).
    held_cqs: Vec<u32>,
    /// When the device was made: its free-running clock counts from here
    /// (the CQE `timestamp` of a CQ with timestamps on).
    epoch: std::time::Instant,
}

struct Inner {
    state: Mutex<State>,
    stop: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// A software mlx5 device. Cheap to clone (a handle).
#[derive(Clone)]
pub struct Device {
    inner: Arc<Inner>,
}

impl Default for Device {
    fn default() -> Self {
        Self::new()
    }
}

impl Device {
    /// Whether two handles name one device.
    pub fn same(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// A new device with no MR, CQ, QP or SRQ; it executes on [`Device::process`] until [`Device::start`].
    pub fn new() -> Self {
        let state = State {
            mrs: Table::default(),
            dmabufs: 0,
            odp: odp::OdpState::default(),
            mws: Table::default(),
            cqs: Table::default(),
            qps: Table::default(),
            srqs: Table::default(),
            qp_order: Vec::new(),
            // Never MLX5_INVALID_LKEY (0x100): it ends a receive WQE's segment list.
            next_key: 0x200,
            next_cqn: 0x80,
            next_qpn: 0x1000,
            next_pdn: 0,
            next_srqn: 0x40,
            // User indices far from SRQNs: a driver that took a version-1
            // CQE's user index for an SRQN would find no SRQ.
            next_uidx: 0x80_0000,
            async_events: Vec::new(),
            async_fd: None,
            scratch: Vec::new(),
            held_cqs: Vec::new(),
            epoch: std::time::Instant::now(),
        };
        Device {
            inner: Arc::new(Inner {
                state: Mutex::new(state),
                stop: AtomicBool::new(false),
                thread: Mutex::new(None),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers `len` bytes at `addr`. lkey equals rkey. With
    /// [`Access::ON_DEMAND`] an ODP MR: not pinned, its pages (of
    /// [`ODP_PAGE`] bytes) not resident until an access faults them in or
    /// [`Self::advise_mr`] prefetches them (`odp.rs`).
    ///
    /// # Safety
    /// `addr..addr+len` must stay valid for reads and writes by the device (any
    /// thread) until [`Self::dereg_mr`] returns for this key.
    pub unsafe fn reg_mr(
        &self,
        pd: u32,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<MrKeys, SimError> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.reg(pd, addr, len, access, false) }
    }

    /// Registers `len` bytes at `addr` that only the WRs naming this MR
    /// access while they are outstanding (the host's `LocalMr`, which moves
    /// into the QP with its WR): the sim then reads and writes them with
    /// plain copies. No remote access. lkey equals rkey.
    ///
    /// Errors: as [`Self::reg_mr`]; [`SimError::RemoteOnOwned`] for any
    /// REMOTE_* access (nothing may reach owned memory from a peer).
    ///
    /// # Safety
    /// As [`Self::reg_mr`]; and while a WR naming this MR is outstanding,
    /// nothing else reads or writes the range: no thread of the program, no
    /// other MR covering it.
    pub unsafe fn reg_mr_owned(
        &self,
        pd: u32,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<MrKeys, SimError> {
        if access.intersects(Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC) {
            return Err(SimError::RemoteOnOwned(access));
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { self.reg(pd, addr, len, access, true) }
    }

    /// [`Self::reg_mr`] and [`Self::reg_mr_owned`].
    ///
    /// # Safety
    /// As theirs.
    unsafe fn reg(
        &self,
        pd: u32,
        addr: *mut u8,
        len: usize,
        access: Access,
        owned: bool,
    ) -> Result<MrKeys, SimError> {
        if len == 0 {
            return Err(SimError::ZeroLength);
        }
        if (addr as u64).checked_add(len as u64).is_none() {
            return Err(SimError::BadRange {
                addr: addr as u64,
                len: len as u64,
            });
        }
        let mut st = self.lock();
        let key = st.alloc_key()?;
        st.mrs.insert(
            key,
            MrEntry {
                pd,
                addr: addr as u64,
                len: len as u64,
                access,
                owned,
                iova: None,
                odp: access
                    .contains(Access::ON_DEMAND)
                    .then(|| odp::Pages::new(false)),
            },
        );
        st.odp.mrs += access.contains(Access::ON_DEMAND) as usize;
        Ok(MrKeys {
            lkey: key,
            rkey: key,
        })
    }

    /// Allocates a protection domain number. MRs and QPs name one; a QP may
    /// use (locally) and expose (remotely) only MRs of its own PD.
    pub fn alloc_pd(&self) -> u32 {
        let mut st = self.lock();
        st.next_pdn += 1;
        st.next_pdn
    }

    /// Deregisters an MR; after it returns the device no longer touches its memory.
    ///
    /// Errors: [`SimError::NoSuchMr`]; [`SimError::MrHasWindows`] while a
    /// memory window is bound to it (as rxe refuses, `rxe_mr.c`: EINVAL).
    pub fn dereg_mr(&self, lkey: u32) -> Result<(), SimError> {
        let mut st = self.lock();
        if !st.mrs.contains_key(&lkey) {
            return Err(SimError::NoSuchMr(lkey));
        }
        let windows = mw::windows_on(&st, lkey);
        if windows != 0 {
            return Err(SimError::MrHasWindows { lkey, windows });
        }
        if let Some(mr) = st.mrs.remove(&lkey) {
            st.dmabufs -= mr.iova.is_some() as usize;
            st.odp.mrs -= mr.odp.is_some() as usize;
        }
        Ok(())
    }

    /// Executes every WQE posted so far, on every QP; returns how many WQEs ran.
    pub fn process(&self) -> usize {
        run_all(&mut self.lock())
    }
}

#[cfg(test)]
mod dc_shared_tests;
#[cfg(test)]
mod dc_tests;
#[cfg(test)]
mod odp_srq_tests;
#[cfg(test)]
mod srq_tests;
#[cfg(test)]
mod tests;
