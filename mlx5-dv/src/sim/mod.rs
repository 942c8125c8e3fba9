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
//! What it executes: SEND and SEND_IMM (into the responder's posted receive
//! WQEs, RNR NAKs retried per `rnr_retry` when none is posted), RDMA WRITE
//! and WRITE_IMM (SGE and inline payloads), RDMA READ, ATOMIC_CS and
//! ATOMIC_FA (on the remote u64 in host byte order). A malformed WQE (DS 0,
//! wrong QPN or index, unknown opcode) completes with LOCAL_QP_OP_ERR
//! (syndrome 0x02). A write with a bad
//! rkey, outside the MR, or without REMOTE_WRITE access on the MR or the
//! responder QP completes with REM_ACCESS_ERR (0x13), moves both QPs to ERR,
//! and leaves remote memory untouched. A QP in ERR flushes every WQE posted to
//! it with WR_FLUSH_ERR (0x05), signaled or not.

mod dma;

use crate::cqe::{owner_bit, Cqe};
use crate::doorbell::{CQ_DBREC_CI, CQ_UAR_DOORBELL, QP_DBREC_RQ, QP_DBREC_SQ};
use crate::dv::{mlx5dv_bf, mlx5dv_cq, mlx5dv_qp, mlx5dv_wq};
use crate::mmio;
use crate::prm::{CqeOpcode, CtrlFlags, Syndrome, WqeOpcode, CQE64, DS, INVALID_LKEY, WQEBB};
use crate::ring::RingBuf;
use crate::wqe::{decode_send_wqe, DataSeg, DecodedPayload, DecodedWqe};
use bitflags::bitflags;
use dma::DmaBuf;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

bitflags! {
    /// Memory-region and QP access flags, with `enum ibv_access_flags` values.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Access: u32 {
        const LOCAL_WRITE = 1;
        const REMOTE_WRITE = 2;
        const REMOTE_READ = 4;
        const REMOTE_ATOMIC = 8;
    }
}

/// Most data segments in one receive WQE (a 1 KiB stride).
const MAX_RECV_SGE: usize = 64;

/// Largest SQ the sim hands out, in WQEBBs.
pub const MAX_SQ_WQEBBS: u32 = 1 << 15;

/// How long a requester waits after an RNR NAK before it retries: the
/// responder's `min_rnr_timer` 12, 0.64 ms (IB spec table 45), what
/// rdma-core's `ibv_rc_pingpong` and perftest ask for.
pub const RNR_DELAY: std::time::Duration = std::time::Duration::from_micros(640);

/// RC QP states the sim models.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    Reset,
    Init,
    Rtr,
    Rts,
    Err,
}

/// Errors from the sim's control path.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SimError {
    #[error("{what} = {value} must be a power of two between {min} and {max}")]
    BadSize {
        what: &'static str,
        value: u32,
        min: u32,
        max: u32,
    },
    #[error("memory region of zero length")]
    ZeroLength,
    #[error("memory region {addr:#x}+{len} wraps the address space")]
    BadRange { addr: u64, len: u64 },
    #[error("no memory region with lkey {0:#x}")]
    NoSuchMr(u32),
    #[error("invalid QP transition {from:?} -> {to:?}")]
    BadTransition { from: QpState, to: QpState },
    #[error("no QP {0:#x} on this device")]
    NoSuchQp(u32),
    #[error("CQ {0:#x} belongs to another device")]
    ForeignCq(u32),
    #[error("every {what} number is in use")]
    Exhausted { what: &'static str },
    #[error("the operating system refused the sim a resource: {0}")]
    Os(String),
}

/// Keys of a registered memory region (equal, as on ConnectX).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrKeys {
    pub lkey: u32,
    pub rkey: u32,
}

struct MrEntry {
    pd: u32,
    addr: u64,
    len: u64,
    access: Access,
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
    /// A CQE found no free slot: the CQ stopped (writes no more CQEs) and
    /// raised a CQ error event (`IBV_EVENT_CQ_ERR`).
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
    /// Handles keeping the CQ: its `Cq` and every QP completing to it. The
    /// entry (and its ring memory) goes when the last one does.
    refs: u32,
}

struct QpEntry {
    pd: u32,
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
    /// The RNR NAK timer this QP asks its requesters to wait (responder
    /// side, set at INIT -> RTR from `min_rnr_timer`).
    min_rnr_delay: std::time::Duration,
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

#[derive(Default)]
struct State {
    mrs: Table<MrEntry>,
    cqs: Table<CqEntry>,
    qps: Table<QpEntry>,
    /// QP numbers in creation order (the device walks them without allocating).
    qp_order: Vec<u32>,
    next_key: u32,
    next_cqn: u32,
    next_qpn: u32,
    next_pdn: u32,
    /// Reused buffer for SEND payloads.
    scratch: Vec<u8>,
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
    pub fn new() -> Self {
        let state = State {
            // Never MLX5_INVALID_LKEY (0x100): it ends a receive WQE's segment list.
            next_key: 0x200,
            next_cqn: 0x80,
            next_qpn: 0x1000,
            ..Default::default()
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

    /// Registers `len` bytes at `addr`. lkey equals rkey.
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
        // Keys step by 0x100 and wrap; never 0, never MLX5_INVALID_LKEY
        // (0x100: it ends a receive WQE's segment list), never one in use.
        let start = st.next_key;
        let mut key = start;
        while key == 0 || key == INVALID_LKEY || st.mrs.contains_key(&key) {
            key = key.wrapping_add(0x100);
            if key == start {
                return Err(SimError::Exhausted { what: "memory key" });
            }
        }
        st.next_key = key.wrapping_add(0x100);
        st.mrs.insert(
            key,
            MrEntry {
                pd,
                addr: addr as u64,
                len: len as u64,
                access,
            },
        );
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
    pub fn dereg_mr(&self, lkey: u32) -> Result<(), SimError> {
        self.lock()
            .mrs
            .remove(&lkey)
            .map(|_| ())
            .ok_or(SimError::NoSuchMr(lkey))
    }

    /// Creates a CQ of `cqe_cnt` entries (power of two, 2..=4M) of `cqe_size` (64 or 128) bytes.
    pub fn create_cq(&self, cqe_cnt: u32, cqe_size: u32) -> Result<Cq, SimError> {
        if !cqe_cnt.is_power_of_two() || !(2..=1 << 22).contains(&cqe_cnt) {
            return Err(SimError::BadSize {
                what: "cqe_cnt",
                value: cqe_cnt,
                min: 2,
                max: 1 << 22,
            });
        }
        if cqe_size != 64 && cqe_size != 128 {
            return Err(SimError::BadSize {
                what: "cqe_size",
                value: cqe_size,
                min: 64,
                max: 128,
            });
        }
        let buf = DmaBuf::new(cqe_cnt as usize * cqe_size as usize);
        for i in 0..cqe_cnt as usize {
            // Every slot starts INVALID with owner 0 (op_own = 0xF0).
            buf.write(i * cqe_size as usize + cqe_size as usize - 1, &[0xf0]);
        }
        let events = Arc::new(
            nix::sys::eventfd::EventFd::from_value_and_flags(
                0,
                nix::sys::eventfd::EfdFlags::EFD_NONBLOCK
                    | nix::sys::eventfd::EfdFlags::EFD_CLOEXEC,
            )
            .map_err(|e| SimError::Os(format!("eventfd: {e}")))?,
        );
        let mut st = self.lock();
        // CQNs are 24 bits; skip numbers in use after a wrap.
        let start = st.next_cqn;
        let mut cqn = start;
        while st.cqs.contains_key(&cqn) || cqn == 0 {
            cqn = (cqn + 1) & 0xff_ffff;
            if cqn == start {
                return Err(SimError::Exhausted { what: "CQ" });
            }
        }
        st.next_cqn = (cqn + 1) & 0xff_ffff;
        st.cqs.insert(
            cqn,
            CqEntry {
                cqn,
                buf,
                dbrec: DmaBuf::new(64),
                uar: DmaBuf::new(4096),
                cqe_cnt,
                cqe_size,
                pi: 0,
                overrun: false,
                error_events: 0,
                completion_events: 0,
                event_sn: 0,
                event_fd: events.clone(),
                refs: 1,
            },
        );
        Ok(Cq {
            dev: self.clone(),
            cqn,
            events,
        })
    }

    /// Creates an RC QP in RESET whose send completions go to `send_cq`.
    /// `sq_wqebbs` is the SQ size in 64-byte WQEBBs (power of two, 1..=32768).
    pub fn create_qp(&self, pd: u32, send_cq: &Cq, sq_wqebbs: u32) -> Result<Qp, SimError> {
        self.create_qp_rq(pd, send_cq, sq_wqebbs, 1, 16)
    }

    /// Creates an RC QP in RESET with a receive queue of `rq_wqe_cnt` WQEs of
    /// `rq_stride` bytes (powers of two; stride 16..=1024, one data segment per
    /// 16 bytes). Send and receive completions both go to `cq`.
    pub fn create_qp_rq(
        &self,
        pd: u32,
        cq: &Cq,
        sq_wqebbs: u32,
        rq_wqe_cnt: u32,
        rq_stride: u32,
    ) -> Result<Qp, SimError> {
        if !rq_wqe_cnt.is_power_of_two() || rq_wqe_cnt > 1 << 15 {
            return Err(SimError::BadSize {
                what: "rq_wqe_cnt",
                value: rq_wqe_cnt,
                min: 1,
                max: 1 << 15,
            });
        }
        if !rq_stride.is_power_of_two() || !(16..=1024).contains(&rq_stride) {
            return Err(SimError::BadSize {
                what: "rq_stride",
                value: rq_stride,
                min: 16,
                max: 1024,
            });
        }
        let send_cq = cq;
        if !sq_wqebbs.is_power_of_two() || sq_wqebbs > MAX_SQ_WQEBBS {
            return Err(SimError::BadSize {
                what: "sq_wqebbs",
                value: sq_wqebbs,
                min: 1,
                max: 1 << 15,
            });
        }
        if !Arc::ptr_eq(&send_cq.dev.inner, &self.inner) {
            return Err(SimError::ForeignCq(send_cq.cqn));
        }
        let mut st = self.lock();
        // QPNs are 24 bits; skip numbers in use after a wrap.
        let start = st.next_qpn;
        let mut qpn = start;
        while st.qps.contains_key(&qpn) || qpn == 0 {
            qpn = (qpn + 1) & 0xff_ffff;
            if qpn == start {
                return Err(SimError::Exhausted { what: "QP" });
            }
        }
        st.next_qpn = (qpn + 1) & 0xff_ffff;
        st.cqs.get_mut(&send_cq.cqn).expect("live CQ").refs += 1;
        st.qp_order.push(qpn);
        st.qps.insert(
            qpn,
            QpEntry {
                pd,
                state: QpState::Reset,
                sq: DmaBuf::new(sq_wqebbs as usize * WQEBB),
                sq_wqe_cnt: sq_wqebbs,
                dbrec: DmaBuf::new(64),
                uar: DmaBuf::new(4096),
                send_cqn: send_cq.cqn,
                sq_ci: 0,
                rq: DmaBuf::new(rq_wqe_cnt as usize * rq_stride as usize),
                rq_wqe_cnt,
                rq_stride,
                rq_ci: 0,
                peer: None,
                access: Access::empty(),
                rnr_retry: 7,
                rnr_left: 7,
                rnr_wait_until: None,
                min_rnr_delay: RNR_DELAY,
            },
        );
        Ok(Qp {
            dev: self.clone(),
            qpn,
        })
    }

    /// Executes every WQE posted so far, on every QP; returns how many WQEs ran.
    pub fn process(&self) -> usize {
        run_all(&mut self.lock())
    }

    /// Starts a device thread that executes WQEs as doorbells arrive. When the
    /// calling thread may run on two or more CPUs, the device thread takes the
    /// last of them ([`device_cpu`]), as a NIC runs beside the host. It stops
    /// when [`Self::stop`] is called or every handle to the device is gone.
    pub fn start(&self) -> Result<(), SimError> {
        let mut t = self.inner.thread.lock().unwrap_or_else(|e| e.into_inner());
        if t.is_some() {
            return Ok(());
        }
        self.inner.stop.store(false, Ordering::SeqCst);
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        // Chosen from the starting thread's CPUs (the new thread inherits them).
        let cpu = device_cpu();
        *t = Some(
            std::thread::Builder::new()
                .name("mlx5-sim".into())
                .spawn(move || device_thread(weak, cpu))
                .map_err(|e| SimError::Os(format!("spawn the device thread: {e}")))?,
        );
        Ok(())
    }

    /// Stops the device thread, if one runs, and waits for it.
    pub fn stop(&self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        let t = self
            .inner
            .thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(t) = t {
            let _ = t.join();
        }
    }
}

/// How long the idle device thread spins before it starts yielding its core
/// (so a waiter sharing the core can run), and before it starts sleeping
/// (200 us a time). Spinning is what keeps its reaction to a doorbell short.
const SPIN_FOR: Duration = Duration::from_micros(20);
const SLEEP_AFTER: Duration = Duration::from_millis(10);

/// CPUs this thread may run on, in order.
fn allowed_cpus() -> Vec<usize> {
    use nix::sched::{sched_getaffinity, CpuSet};
    use nix::unistd::Pid;
    let Ok(set) = sched_getaffinity(Pid::from_raw(0)) else {
        return Vec::new();
    };
    (0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect()
}

/// The CPU the device thread takes when the process may use two or more: the
/// last one. Callers that spin on the device (benchmarks) stay off it.
pub fn device_cpu() -> Option<usize> {
    let cpus = allowed_cpus();
    (cpus.len() >= 2).then(|| cpus[cpus.len() - 1])
}

/// Device threads running in this process now.
static RUNNING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many sim device threads run in this process: a waiter spinning on
/// a sim must let them have the CPU now and then; on a kernel device there
/// is none to wait for.
pub fn device_threads() -> usize {
    RUNNING.load(Ordering::Relaxed)
}

struct Running;

impl Running {
    fn new() -> Self {
        RUNNING.fetch_add(1, Ordering::Relaxed);
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::Relaxed);
    }
}

fn device_thread(weak: Weak<Inner>, cpu: Option<usize>) {
    let _running = Running::new();
    // Like a NIC, the device runs beside the host's threads, not on their core:
    // two spinning threads sharing one core wait out each other's time slices.
    if let Some(cpu) = cpu {
        let mut set = nix::sched::CpuSet::new();
        if set.set(cpu).is_ok() {
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
        }
    }
    let mut idle_passes: u32 = 0;
    let mut idle_since: Option<Instant> = None;
    loop {
        let Some(inner) = weak.upgrade() else { return };
        if inner.stop.load(Ordering::Relaxed) {
            return;
        }
        let n = run_all(&mut inner.state.lock().unwrap_or_else(|e| e.into_inner()));
        drop(inner);
        if n > 0 {
            idle_passes = 0;
            idle_since = None;
            continue;
        }
        idle_passes = idle_passes.wrapping_add(1);
        if idle_passes % 64 != 0 {
            std::hint::spin_loop();
            continue;
        }
        let idle = idle_since.get_or_insert_with(Instant::now).elapsed();
        if idle > SLEEP_AFTER {
            std::thread::sleep(Duration::from_micros(200));
        } else if idle > SPIN_FOR {
            std::thread::yield_now();
        }
    }
}

/// A sim CQ; destroyed on drop.
pub struct Cq {
    dev: Device,
    cqn: u32,
    events: Arc<nix::sys::eventfd::EventFd>,
}

impl Cq {
    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// Whether a CQE found no free slot (the consumer index in the doorbell
    /// record had not released it): the CQ then stopped, writing no more
    /// CQEs, and raised a CQ error event. QPs completing to it stop too.
    pub fn overrun(&self) -> bool {
        self.dev.lock().cqs[&self.cqn].overrun
    }

    /// A file descriptor that becomes readable when the CQ raises a
    /// completion event (as a verbs completion channel's fd): wait on it with
    /// `poll`, then [`Self::take_events`].
    pub fn event_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.events.as_fd()
    }

    /// Consumes the completion events raised since the last call; returns
    /// how many (0 if none).
    pub fn take_events(&self) -> u64 {
        self.events.read().unwrap_or(0)
    }

    /// Completion events raised (what `ibv_get_cq_event` would return).
    pub fn completion_events(&self) -> u64 {
        self.dev.lock().cqs[&self.cqn].completion_events
    }

    /// CQ error events raised (`IBV_EVENT_CQ_ERR` in verbs).
    pub fn error_events(&self) -> u64 {
        self.dev.lock().cqs[&self.cqn].error_events
    }

    /// The raw description, as `mlx5dv_init_obj` would return it. Valid while `self` lives.
    pub fn dv(&self) -> mlx5dv_cq {
        let st = self.dev.lock();
        let c = &st.cqs[&self.cqn];
        mlx5dv_cq {
            buf: c.buf.ptr().cast(),
            dbrec: c.dbrec.ptr().cast(),
            cqe_cnt: c.cqe_cnt,
            cqe_size: c.cqe_size,
            cq_uar: c.uar.ptr().cast(),
            cqn: self.cqn,
            comp_mask: 0,
        }
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        release_cq(&mut self.dev.lock(), self.cqn);
    }
}

/// Drops one reference to CQ `cqn`; the last one destroys it.
fn release_cq(st: &mut State, cqn: u32) {
    if let Some(c) = st.cqs.get_mut(&cqn) {
        c.refs -= 1;
        if c.refs == 0 {
            st.cqs.remove(&cqn);
        }
    }
}

/// A sim RC QP; destroyed on drop.
pub struct Qp {
    dev: Device,
    qpn: u32,
}

/// Offset of the first BlueFlame register in the UAR page, and its size.
pub const BF_OFFSET: usize = 0x800;
pub const BF_SIZE: u32 = 256;

impl Qp {
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The raw description, as `mlx5dv_init_obj` would return it. Valid while `self` lives.
    pub fn dv(&self) -> mlx5dv_qp {
        let st = self.dev.lock();
        let q = &st.qps[&self.qpn];
        let mut d = mlx5dv_qp::zeroed();
        d.dbrec = q.dbrec.ptr().cast();
        d.sq = mlx5dv_wq {
            buf: q.sq.ptr().cast(),
            wqe_cnt: q.sq_wqe_cnt,
            stride: WQEBB as u32,
        };
        // SAFETY: BF_OFFSET < 4096, the UAR page's size.
        d.bf = mlx5dv_bf {
            reg: unsafe { q.uar.ptr().add(BF_OFFSET) }.cast(),
            size: BF_SIZE,
        };
        d.rq = mlx5dv_wq {
            buf: q.rq.ptr().cast(),
            wqe_cnt: q.rq_wqe_cnt,
            stride: q.rq_stride,
        };
        d.sqn = self.qpn;
        d.rqn = self.qpn;
        d
    }

    /// The connected peer's QPN (set at RTR).
    pub fn dest_qpn(&self) -> Option<u32> {
        self.dev.lock().qps.get(&self.qpn).and_then(|q| q.peer)
    }

    pub fn state(&self) -> QpState {
        self.dev.lock().qps[&self.qpn].state
    }

    /// Test hook: copies SQ bytes from ring offset `off` (wrapping at the
    /// ring end) into `dst`, as the device would DMA-read them.
    pub fn hook_read_sq(&self, off: usize, dst: &mut [u8]) {
        self.dev.lock().qps[&self.qpn].sq.read_wrapping(off, dst);
    }

    /// Test hook: overwrites SQ bytes at ring offset `off` (wrapping), for
    /// WQEs the driver would never write (bad DS, wrong QPN or index,
    /// unknown opcode, misaligned atomic). Use before ringing the doorbell.
    pub fn hook_write_sq(&self, off: usize, src: &[u8]) {
        self.dev.lock().qps[&self.qpn].sq.write(off, src);
    }

    fn modify(&self, to: QpState, f: impl FnOnce(&mut QpEntry)) -> Result<(), SimError> {
        let mut st = self.dev.lock();
        let q = st
            .qps
            .get_mut(&self.qpn)
            .ok_or(SimError::NoSuchQp(self.qpn))?;
        let ok = matches!(
            (q.state, to),
            (QpState::Reset, QpState::Init)
                | (QpState::Init, QpState::Rtr)
                | (QpState::Rtr, QpState::Rts)
                | (_, QpState::Reset)
                | (_, QpState::Err)
        );
        if !ok {
            return Err(SimError::BadTransition { from: q.state, to });
        }
        f(q);
        q.state = to;
        Ok(())
    }

    /// RESET -> INIT with the responder access the QP allows.
    pub fn to_init(&self, access: Access) -> Result<(), SimError> {
        self.modify(QpState::Init, |q| q.access = access)
    }

    /// INIT -> RTR, connected to `dest_qpn` on the same device, asking
    /// requesters to wait [`RNR_DELAY`] after an RNR NAK.
    pub fn to_rtr(&self, dest_qpn: u32) -> Result<(), SimError> {
        self.to_rtr_with(dest_qpn, RNR_DELAY)
    }

    /// INIT -> RTR, connected to `dest_qpn`; after an RNR NAK from this QP
    /// its requester waits `min_rnr_delay` (the responder's `min_rnr_timer`,
    /// IB spec table 45) before it retries.
    pub fn to_rtr_with(
        &self,
        dest_qpn: u32,
        min_rnr_delay: std::time::Duration,
    ) -> Result<(), SimError> {
        if !self.dev.lock().qps.contains_key(&dest_qpn) {
            return Err(SimError::NoSuchQp(dest_qpn));
        }
        self.modify(QpState::Rtr, |q| {
            q.peer = Some(dest_qpn);
            q.min_rnr_delay = min_rnr_delay;
        })
    }

    /// Changes the attributes a transition may carry besides the required
    /// ones, in any state but RESET: the responder access and the RNR NAK
    /// timer this QP asks its requesters to wait (INIT -> INIT, INIT -> RTR,
    /// RTR -> RTS and RTS -> RTS may carry them).
    pub fn set_optional(
        &self,
        access: Option<Access>,
        min_rnr_delay: Option<std::time::Duration>,
    ) -> Result<(), SimError> {
        let mut st = self.dev.lock();
        let q = st
            .qps
            .get_mut(&self.qpn)
            .ok_or(SimError::NoSuchQp(self.qpn))?;
        if q.state == QpState::Reset {
            return Err(SimError::BadTransition {
                from: q.state,
                to: q.state,
            });
        }
        if let Some(a) = access {
            q.access = a;
        }
        if let Some(d) = min_rnr_delay {
            q.min_rnr_delay = d;
        }
        Ok(())
    }

    /// `rnr_retry` as set at RTR -> RTS (7 before).
    pub fn rnr_retry(&self) -> u8 {
        self.dev.lock().qps[&self.qpn].rnr_retry
    }

    /// RTR -> RTS, retrying RNR NAKs forever (`rnr_retry` 7).
    pub fn to_rts(&self) -> Result<(), SimError> {
        self.to_rts_with(7)
    }

    /// RTR -> RTS with `rnr_retry`: how often a SEND (or WRITE_IMM) that
    /// finds no receive posted is retried, [`RNR_DELAY`] apart, before it
    /// completes with RNR_RETRY_EXC_ERR (syndrome 0x16); 7 means forever
    /// (IB spec 9.7.5.2.8). Values above 7 are refused.
    pub fn to_rts_with(&self, rnr_retry: u8) -> Result<(), SimError> {
        if rnr_retry > 7 {
            return Err(SimError::BadSize {
                what: "rnr_retry",
                value: rnr_retry as u32,
                min: 0,
                max: 7,
            });
        }
        self.modify(QpState::Rts, |q| {
            q.rnr_retry = rnr_retry;
            q.rnr_left = rnr_retry;
            q.rnr_wait_until = None;
        })
    }

    /// Any state -> ERR.
    pub fn to_err(&self) -> Result<(), SimError> {
        self.modify(QpState::Err, |_| {})
    }

    /// Any state -> RESET: zeroes the doorbell record and restarts the device's index.
    pub fn to_reset(&self) -> Result<(), SimError> {
        self.modify(QpState::Reset, |q| {
            q.dbrec.write(0, &[0; 8]);
            q.sq_ci = 0;
            q.rq_ci = 0;
            q.peer = None;
        })
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        let mut st = self.dev.lock();
        if let Some(q) = st.qps.remove(&self.qpn) {
            release_cq(&mut st, q.send_cqn);
        }
        st.qp_order.retain(|&q| q != self.qpn);
    }
}

/// Outcome of executing one WQE.
enum Exec {
    Ok {
        byte_cnt: u32,
    },
    Err(Syndrome),
    /// Receiver not ready: leave the WQE in the SQ and try again later.
    Rnr,
}

/// One pass over every QP; returns how many WQEs ran.
fn run_all(st: &mut State) -> usize {
    let mut n = 0;
    for i in 0..st.qp_order.len() {
        let qpn = st.qp_order[i];
        n += run_qp(st, qpn);
    }
    n
}

/// Executes the pending WQEs of one QP. Returns how many ran.
fn run_qp(st: &mut State, qpn: u32) -> usize {
    let mut done = 0;
    if st.qps[&qpn].state == QpState::Err {
        done += flush_recv(st, qpn);
    }
    loop {
        let q = &st.qps[&qpn];
        // SAFETY: the dbrec DmaBuf is 64 bytes, 4096-aligned; word 1 is the SQ's.
        let db_pi =
            unsafe { mmio::read_dbrec((q.dbrec.ptr() as *const u32).add(QP_DBREC_SQ)) } & 0xffff;
        if db_pi == q.sq_ci & 0xffff
            || matches!(q.state, QpState::Reset | QpState::Init | QpState::Rtr)
        {
            return done;
        }
        if st.cqs[&q.send_cqn].overrun {
            // The CQ is in error: the device stops this QP.
            return done;
        }
        if let Some(t) = q.rnr_wait_until {
            if std::time::Instant::now() < t {
                return done;
            }
        }
        let slot = (q.sq_ci & (q.sq_wqe_cnt - 1)) as usize * WQEBB;
        let ctrl: [u8; 16] = q.sq.read_array(slot);
        let opcode = WqeOpcode(ctrl[3]);
        let wqe_idx = u16::from_be_bytes([ctrl[1], ctrl[2]]);
        let ds = (ctrl[7] & 0x3f) as usize;
        let flags = CtrlFlags::from_bits_retain(ctrl[11]);
        let wqebbs = (ds.max(1) * DS).div_ceil(WQEBB) as u32;
        let ctrl_qpn = u32::from_be_bytes([ctrl[4], ctrl[5], ctrl[6], ctrl[7]]) >> 8;
        // The device names a WQE by its own counter, whatever the ctrl segment says.
        let own_idx = q.sq_ci as u16;
        let state = q.state;
        let send_cqn = q.send_cqn;
        let mut result = if state == QpState::Err {
            Exec::Err(Syndrome::WR_FLUSH_ERR)
        } else if ds == 0 || wqe_idx != (q.sq_ci & 0xffff) as u16 || ctrl_qpn != qpn {
            Exec::Err(Syndrome::LOCAL_QP_OP_ERR)
        } else {
            execute(st, qpn, slot, ds)
        };
        let q = st.qps.get_mut(&qpn).expect("qp");
        if matches!(result, Exec::Rnr) {
            if q.rnr_retry == 7 || q.rnr_left > 0 {
                // RNR NAK: try this WQE again after the responder's timer.
                if q.rnr_retry != 7 {
                    q.rnr_left -= 1;
                }
                let wait = q
                    .peer
                    .and_then(|p| st.qps.get(&p))
                    .map_or(RNR_DELAY, |p| p.min_rnr_delay);
                let q = st.qps.get_mut(&qpn).expect("qp");
                q.rnr_wait_until = Some(std::time::Instant::now() + wait);
                return done;
            }
            result = Exec::Err(Syndrome::RNR_RETRY_EXC_ERR);
        }
        q.rnr_left = q.rnr_retry;
        q.rnr_wait_until = None;
        q.sq_ci = q.sq_ci.wrapping_add(wqebbs);
        let cqe = match result {
            Exec::Ok { byte_cnt } if flags.contains(CtrlFlags::CQ_UPDATE) => Some(Cqe {
                opcode: CqeOpcode::REQ,
                wqe_opcode: opcode,
                qpn,
                wqe_counter: own_idx,
                byte_cnt,
                imm: 0,
                solicited: false,
                format: 0,
                syndrome: Syndrome(0),
                vendor_syndrome: 0,
                owner: false,
            }),
            Exec::Ok { .. } | Exec::Rnr => None,
            Exec::Err(syn) => {
                q.state = QpState::Err;
                Some(Cqe {
                    opcode: CqeOpcode::REQ_ERR,
                    wqe_opcode: opcode,
                    qpn,
                    wqe_counter: own_idx,
                    byte_cnt: 0,
                    imm: 0,
                    solicited: false,
                    format: 0,
                    syndrome: syn,
                    vendor_syndrome: 0,
                    owner: false,
                })
            }
        };
        if let Some(c) = cqe {
            push_cqe(st.cqs.get_mut(&send_cqn).expect("cq"), &c);
        }
        done += 1;
    }
}

fn cq_full(cq: &CqEntry) -> bool {
    // SAFETY: the CQ dbrec DmaBuf is 64 bytes, 4096-aligned; word 0 is the consumer index.
    let ci =
        unsafe { mmio::read_dbrec((cq.dbrec.ptr() as *const u32).add(CQ_DBREC_CI)) } & 0xff_ffff;
    (cq.pi.wrapping_sub(ci) & 0xff_ffff) >= cq.cqe_cnt
}

/// Writes CQE `c` into the next slot, unless that slot has not been released
/// through the consumer index: then the CQ overruns (PRM: the CQ moves to
/// error and raises a CQ error event) and neither this nor any later CQE is
/// written.
fn push_cqe(cq: &mut CqEntry, c: &Cqe) {
    if cq.overrun {
        return;
    }
    if cq_full(cq) {
        cq.overrun = true;
        cq.error_events += 1;
        return;
    }
    let bytes = c.encode(owner_bit(cq.pi, cq.cqe_cnt));
    let off =
        (cq.pi & (cq.cqe_cnt - 1)) as usize * cq.cqe_size as usize + cq.cqe_size as usize - CQE64;
    cq.buf.write(off, &bytes[..63]);
    cq.buf.publish_op_own(off + 63, bytes[63]);
    cq.pi = cq.pi.wrapping_add(1);
    // The CQE is written before the arm is read (a full fence: the host
    // arms, fences, then polls; with both fences one of the two sides sees
    // the other's write, so a completion never goes without either a poll
    // that finds it or an event).
    mmio::store_load_barrier();
    // Armed? The last arm doorbell (8 bytes big-endian at UAR + 0x20: arm
    // word << 32 | CQN, rdma-core `mlx5_arm_cq`) names this CQ and carries
    // the sequence number the next event answers. Then this CQE raises the
    // event, unless the arm asked for solicited completions only and it is
    // neither solicited nor an error.
    let db = u64::from_be_bytes(cq.uar.read_array::<8>(CQ_UAR_DOORBELL));
    let arm = (db >> 32) as u32;
    if db as u32 == cq.cqn && (arm >> 28) & 3 == cq.event_sn & 3 {
        let solicited_only = arm & (1 << 24) != 0;
        if !solicited_only || c.solicited || c.opcode.is_error() {
            cq.completion_events += 1;
            // A full counter (2^64 - 2 unread events) cannot happen here.
            let _ = cq.event_fd.write(1);
            cq.event_sn = cq.event_sn.wrapping_add(1);
        }
    }
}

/// Receive WQE `rq_ci` of `qpn`, if the RQ doorbell record shows one posted:
/// its index and data segments (up to the stride, ended by MLX5_INVALID_LKEY).
fn next_recv(st: &State, qpn: u32) -> Option<(u16, [DataSeg; MAX_RECV_SGE], usize)> {
    let q = &st.qps[&qpn];
    // SAFETY: the dbrec DmaBuf is 64 bytes, 4096-aligned; word 0 is the RQ's.
    let head = unsafe { mmio::read_dbrec((q.dbrec.ptr() as *const u32).add(QP_DBREC_RQ)) } & 0xffff;
    if head == q.rq_ci & 0xffff {
        return None;
    }
    let slot = (q.rq_ci & (q.rq_wqe_cnt - 1)) as usize * q.rq_stride as usize;
    let mut segs = [DataSeg {
        addr: 0,
        len: 0,
        lkey: 0,
    }; MAX_RECV_SGE];
    let mut n = 0;
    for k in 0..(q.rq_stride as usize / DS).min(MAX_RECV_SGE) {
        let b: [u8; 16] = q.rq.read_array(slot + k * DS);
        let lkey = u32::from_be_bytes(b[4..8].try_into().unwrap());
        if lkey == INVALID_LKEY {
            break;
        }
        segs[n] = DataSeg {
            len: u32::from_be_bytes(b[0..4].try_into().unwrap()),
            lkey,
            addr: u64::from_be_bytes(b[8..16].try_into().unwrap()),
        };
        n += 1;
    }
    Some((q.rq_ci as u16, segs, n))
}

/// Completes receive WQE `idx` of `qpn` on its CQ and moves past it.
fn complete_recv(st: &mut State, qpn: u32, idx: u16, c: Cqe) {
    let q = st.qps.get_mut(&qpn).expect("qp");
    q.rq_ci = q.rq_ci.wrapping_add(1);
    let cqn = q.send_cqn;
    push_cqe(
        st.cqs.get_mut(&cqn).expect("cq"),
        &Cqe {
            qpn,
            wqe_counter: idx,
            ..c
        },
    );
}

fn resp_cqe(opcode: CqeOpcode, byte_cnt: u32, imm: u32, syndrome: Syndrome) -> Cqe {
    Cqe {
        opcode,
        wqe_opcode: WqeOpcode(0),
        qpn: 0,
        wqe_counter: 0,
        byte_cnt,
        imm,
        solicited: false,
        format: 0,
        syndrome,
        vendor_syndrome: 0,
        owner: false,
    }
}

/// Flushes every posted receive WQE of a QP in ERR (RESP_ERR, WR_FLUSH_ERR).
fn flush_recv(st: &mut State, qpn: u32) -> usize {
    let mut n = 0;
    while !st.cqs[&st.qps[&qpn].send_cqn].overrun {
        let Some((idx, _, _)) = next_recv(st, qpn) else {
            break;
        };
        complete_recv(
            st,
            qpn,
            idx,
            resp_cqe(CqeOpcode::RESP_ERR, 0, 0, Syndrome::WR_FLUSH_ERR),
        );
        n += 1;
    }
    n
}

/// The responder side of SEND / SEND_IMM / RDMA_WRITE_IMM: consumes the peer's
/// next receive WQE. `data` is scattered into it (SENDs); for RDMA_WRITE_IMM
/// `data` is empty and `byte_cnt` is the written length. `Rnr` when the peer has
/// no receive WQE posted (the requester retries per its `rnr_retry`).
/// `solicited`: the request's ctrl segment asked for a solicited event; the
/// responder's CQE carries it (CQE `se` bit).
fn deliver(
    st: &mut State,
    qpn: u32,
    data: Option<&[u8]>,
    byte_cnt: u32,
    imm: Option<u32>,
    solicited: bool,
) -> Exec {
    let Some(peer) = st.qps[&qpn].peer.filter(|p| {
        st.qps
            .get(p)
            .is_some_and(|p| matches!(p.state, QpState::Rtr | QpState::Rts))
    }) else {
        return Exec::Err(Syndrome::TRANSPORT_RETRY_EXC_ERR);
    };
    let Some((idx, segs, n)) = next_recv(st, peer) else {
        return Exec::Rnr;
    };
    let pd = st.qps[&peer].pd;
    let fail = |st: &mut State, resp: Syndrome, req: Syndrome| {
        complete_recv(st, peer, idx, resp_cqe(CqeOpcode::RESP_ERR, 0, 0, resp));
        st.qps.get_mut(&peer).expect("peer").state = QpState::Err;
        Exec::Err(req)
    };
    let (opcode, imm) = match (data.is_some(), imm) {
        (true, None) => (CqeOpcode::RESP_SEND, 0),
        (true, Some(v)) => (CqeOpcode::RESP_SEND_IMM, v),
        (false, v) => (CqeOpcode::RESP_WR_IMM, v.unwrap_or(0)),
    };
    if let Some(data) = data {
        if segs[..n]
            .iter()
            .any(|s| s.len != 0 && !local_ok(st, pd, *s, true))
        {
            // A responder-side protection error: the requester sees a remote operation error.
            return fail(st, Syndrome::LOCAL_PROT_ERR, Syndrome::REMOTE_OP_ERR);
        }
        let room: u64 = segs[..n].iter().map(|s| s.len as u64).sum();
        if room < data.len() as u64 {
            // Too small a receive buffer: local length error at the responder,
            // remote invalid request at the requester.
            return fail(
                st,
                Syndrome::LOCAL_LENGTH_ERR,
                Syndrome::REMOTE_INVAL_REQ_ERR,
            );
        }
        // Scatter in order, publishing the final byte last.
        let mut left = data;
        for s in &segs[..n] {
            if left.is_empty() {
                break;
            }
            let k = left.len().min(s.len as usize);
            let (now, rest) = left.split_at(k);
            // SAFETY: `s` was checked against a registered MR of the peer's PD.
            unsafe {
                if rest.is_empty() {
                    dma::write_from(s.addr, &now[..k - 1]);
                    dma::store_last_byte(s.addr + k as u64 - 1, now[k - 1]);
                } else {
                    dma::write_from(s.addr, now);
                }
            }
            left = rest;
        }
    }
    complete_recv(
        st,
        peer,
        idx,
        Cqe {
            solicited,
            ..resp_cqe(opcode, byte_cnt, imm, Syndrome(0))
        },
    );
    Exec::Ok { byte_cnt }
}

/// Copies a WQE's payload (inline bytes or checked local SGEs) into `out`.
fn gather(
    st: &State,
    pd: u32,
    w: &DecodedWqe,
    wqe: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), Syndrome> {
    out.clear();
    match w.payload {
        DecodedPayload::Inline { .. } => out.extend_from_slice(inline_of(w, wqe)),
        DecodedPayload::Sges { count, .. } => {
            for i in 0..count {
                let s = sge_at(w, wqe, i).expect("i < count");
                if !local_ok(st, pd, s, false) {
                    return Err(Syndrome::LOCAL_PROT_ERR);
                }
                if out.len() as u64 + s.len as u64 > 1 << 31 {
                    return Err(Syndrome::LOCAL_LENGTH_ERR);
                }
                let at = out.len();
                out.resize(at + s.len as usize, 0);
                // SAFETY: `s` was checked against a registered MR of this QP's PD.
                unsafe { dma::read_into(s.addr, &mut out[at..]) };
            }
        }
        DecodedPayload::None => {}
    }
    Ok(())
}

fn send(st: &mut State, qpn: u32, w: &DecodedWqe, wqe: &[u8]) -> Exec {
    let pd = st.qps[&qpn].pd;
    let mut data = std::mem::take(&mut st.scratch);
    let r = match gather(st, pd, w, wqe, &mut data) {
        Err(s) => Exec::Err(s),
        Ok(()) => {
            let imm = (w.opcode == WqeOpcode::SEND_IMM).then_some(w.imm);
            let se = w.flags.contains(CtrlFlags::SOLICITED);
            deliver(st, qpn, Some(&data), data.len() as u32, imm, se)
        }
    };
    st.scratch = data;
    r
}

fn rdma_write_imm(st: &mut State, qpn: u32, w: &DecodedWqe, wqe: &[u8]) -> Exec {
    // The receive WQE must be there before any data moves (else RNR, retried).
    let Some(peer) = st.qps[&qpn].peer else {
        return Exec::Err(Syndrome::TRANSPORT_RETRY_EXC_ERR);
    };
    if st
        .qps
        .get(&peer)
        .is_some_and(|p| matches!(p.state, QpState::Rtr | QpState::Rts))
        && next_recv(st, peer).is_none()
    {
        return Exec::Rnr;
    }
    match rdma_write(st, qpn, w, wqe) {
        Exec::Ok { byte_cnt } => deliver(
            st,
            qpn,
            None,
            byte_cnt,
            Some(w.imm),
            w.flags.contains(CtrlFlags::SOLICITED),
        ),
        other => other,
    }
}

/// Largest send WQE: 16 WQEBBs (the kernel's cap; 63 DS fit).
const MAX_WQE: usize = 16 * WQEBB;

/// Executes one WQE of `qpn` whose ctrl segment is at SQ offset `slot`.
fn execute(st: &mut State, qpn: u32, slot: usize, ds: usize) -> Exec {
    // The linear copy is as small as the WQE allows: zeroing 1 KiB per WQE
    // costs more than executing a small one.
    match ds * DS {
        0..=128 => execute_in::<128>(st, qpn, slot, ds),
        129..=256 => execute_in::<256>(st, qpn, slot, ds),
        _ => execute_in::<MAX_WQE>(st, qpn, slot, ds),
    }
}

/// [`execute`] with a linear copy of `N` bytes (a power of two, at least 64
/// and at least `ds * 16`).
fn execute_in<const N: usize>(st: &mut State, qpn: u32, slot: usize, ds: usize) -> Exec {
    // DMA-read the WQE (it may wrap the SQ) into a linear copy, then decode it
    // with the same decoder the tools use. Every offset the decoder returns is
    // below `ds * 16 <= N`, so the payload is contiguous in the copy.
    let mut wqe = [0u8; N];
    let q = &st.qps[&qpn];
    let n = (ds * DS).min(N).min(q.sq_wqe_cnt as usize * WQEBB);
    q.sq.read_wrapping(slot, &mut wqe[..n]);
    let decoded = {
        let ring = RingBuf::from_slice(&mut wqe).expect("a power of two of at least 64 bytes");
        decode_send_wqe(&ring, (N / WQEBB) as u32, 0)
    };
    let Ok(w) = decoded else {
        return Exec::Err(Syndrome::LOCAL_QP_OP_ERR);
    };
    let b = &wqe[..];
    match w.opcode {
        WqeOpcode::RDMA_WRITE => rdma_write(st, qpn, &w, b),
        WqeOpcode::RDMA_WRITE_IMM => rdma_write_imm(st, qpn, &w, b),
        WqeOpcode::SEND | WqeOpcode::SEND_IMM => send(st, qpn, &w, b),
        WqeOpcode::RDMA_READ => rdma_read(st, qpn, &w, b),
        WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA => atomic(st, qpn, &w, b),
        _ => Exec::Err(Syndrome::LOCAL_QP_OP_ERR),
    }
}

/// Data segment `i` of a decoded WQE's SGE payload, read from its linear copy.
fn sge_at(w: &DecodedWqe, wqe: &[u8], i: u32) -> Option<DataSeg> {
    let DecodedPayload::Sges { first, count } = w.payload else {
        return None;
    };
    if i >= count {
        return None;
    }
    let at = first + i as usize * DS;
    let b: &[u8; 16] = wqe.get(at..at + DS)?.try_into().ok()?;
    let be32 = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    Some(DataSeg {
        len: be32(0),
        lkey: be32(4),
        addr: u64::from_be_bytes(b[8..16].try_into().unwrap()),
    })
}

/// The inline bytes of a decoded WQE, in its linear copy (empty for other payloads).
fn inline_of<'a>(w: &DecodedWqe, wqe: &'a [u8]) -> &'a [u8] {
    match w.payload {
        DecodedPayload::Inline { off, len } => wqe.get(off..off + len as usize).unwrap_or(&[]),
        _ => &[],
    }
}

/// Whether `lkey` names an MR of `pd` holding `addr..addr+len` (with LOCAL_WRITE
/// when the device will write there).
fn local_ok(st: &State, pd: u32, s: DataSeg, write: bool) -> bool {
    st.mrs.get(&s.lkey).is_some_and(|mr| {
        mr.pd == pd
            && (!write || mr.access.contains(Access::LOCAL_WRITE))
            && s.addr >= mr.addr
            && s.addr
                .checked_add(s.len as u64)
                .is_some_and(|end| end <= mr.addr + mr.len)
    })
}

/// The responder side of an RDMA access to `addr..addr+len` with `rkey`
/// (IB class C: an access violation puts the responder QP in ERR too).
fn responder_check(
    st: &mut State,
    qpn: u32,
    rkey: u32,
    addr: u64,
    len: u64,
    need: Access,
) -> Result<(), Syndrome> {
    let peer = st.qps[&qpn].peer.ok_or(Syndrome::TRANSPORT_RETRY_EXC_ERR)?;
    let responder = st
        .qps
        .get(&peer)
        .filter(|p| matches!(p.state, QpState::Rtr | QpState::Rts))
        .ok_or(Syndrome::TRANSPORT_RETRY_EXC_ERR)?;
    let ok = responder.access.contains(need)
        && st.mrs.get(&rkey).is_some_and(|mr| {
            mr.pd == responder.pd
                && mr.access.contains(need)
                && addr >= mr.addr
                && addr
                    .checked_add(len)
                    .is_some_and(|end| end <= mr.addr + mr.len)
        });
    if ok {
        return Ok(());
    }
    st.qps.get_mut(&peer).expect("peer").state = QpState::Err;
    Err(Syndrome::REMOTE_ACCESS_ERR)
}

fn rdma_write(st: &mut State, qpn: u32, w: &DecodedWqe, wqe: &[u8]) -> Exec {
    let pd = st.qps[&qpn].pd;
    let remote = w.remote.expect("decoded RDMA WRITE has a remote segment");
    // The payload: inline bytes in the WQE, or checked local SGEs (read from
    // the WQE again when copying, rather than gathered into an array first).
    let inline = inline_of(w, wqe);
    let (count, total) = match w.payload {
        DecodedPayload::Inline { .. } => (0, inline.len() as u64),
        DecodedPayload::Sges { count, .. } => {
            let mut total = 0u64;
            for i in 0..count {
                let s = sge_at(w, wqe, i).expect("i < count");
                if !local_ok(st, pd, s, false) {
                    return Exec::Err(Syndrome::LOCAL_PROT_ERR);
                }
                total += s.len as u64;
            }
            (count, total)
        }
        DecodedPayload::None => (0, 0),
    };
    if total > 1 << 31 {
        return Exec::Err(Syndrome::LOCAL_LENGTH_ERR);
    }
    // A zero-length RDMA WRITE carries no data: the responder checks no
    // R_Key or address (IB spec C9-88; the kernel's rxe_resp.c check_rkey).
    if total == 0 {
        return Exec::Ok { byte_cnt: 0 };
    }
    if let Err(s) = responder_check(
        st,
        qpn,
        remote.rkey,
        remote.addr,
        total,
        Access::REMOTE_WRITE,
    ) {
        return Exec::Err(s);
    }
    // Copy in order, holding the very last byte back until everything else
    // landed: perftest-style pollers watch the last byte.
    // SAFETY (every dma call below): both ranges were checked against
    // registered MRs above; registration promises the memory stays valid.
    let last = remote.addr + total - 1;
    if let DecodedPayload::Inline { .. } = w.payload {
        let len = inline.len();
        unsafe {
            dma::write_from(remote.addr, &inline[..len - 1]);
            dma::store_last_byte(last, inline[len - 1]);
        }
    } else {
        let sge = |i: u32| sge_at(w, wqe, i).expect("i < count");
        let last_sge = (0..count)
            .rev()
            .find(|&i| sge(i).len > 0)
            .expect("total > 0");
        let mut dst = remote.addr;
        for i in 0..=last_sge {
            let s = sge(i);
            let body = if i == last_sge {
                s.len as usize - 1
            } else {
                s.len as usize
            };
            // SAFETY: SGE `i` and its place in the remote range were checked above.
            unsafe { dma::copy(s.addr, dst, body) };
            dst += s.len as u64;
        }
        let s = sge(last_sge);
        // SAFETY: the last byte of a checked SGE into the checked remote range.
        unsafe { dma::copy_last_byte(s.addr + s.len as u64 - 1, last) };
    }
    Exec::Ok {
        byte_cnt: total as u32,
    }
}

fn rdma_read(st: &mut State, qpn: u32, w: &DecodedWqe, wqe: &[u8]) -> Exec {
    let pd = st.qps[&qpn].pd;
    let remote = w.remote.expect("decoded RDMA READ has a remote segment");
    let mut dsts = [DataSeg {
        addr: 0,
        len: 0,
        lkey: 0,
    }; MAX_WQE / DS];
    let (mut n, mut total) = (0usize, 0u64);
    if let DecodedPayload::Sges { count, .. } = w.payload {
        for i in 0..count {
            let s = sge_at(w, wqe, i).expect("i < count");
            if !local_ok(st, pd, s, true) {
                return Exec::Err(Syndrome::LOCAL_PROT_ERR);
            }
            dsts[n] = s;
            n += 1;
            total += s.len as u64;
        }
    } else if !matches!(w.payload, DecodedPayload::None) {
        return Exec::Err(Syndrome::LOCAL_QP_OP_ERR);
    }
    if total > 1 << 31 {
        return Exec::Err(Syndrome::LOCAL_LENGTH_ERR);
    }
    if total == 0 {
        return Exec::Ok { byte_cnt: 0 };
    }
    if let Err(s) = responder_check(
        st,
        qpn,
        remote.rkey,
        remote.addr,
        total,
        Access::REMOTE_READ,
    ) {
        return Exec::Err(s);
    }
    let mut src = remote.addr;
    for d in &dsts[..n] {
        // SAFETY: both ranges were checked against registered MRs above.
        unsafe { dma::copy(src, d.addr, d.len as usize) };
        src += d.len as u64;
    }
    Exec::Ok {
        byte_cnt: total as u32,
    }
}

fn atomic(st: &mut State, qpn: u32, w: &DecodedWqe, wqe: &[u8]) -> Exec {
    let pd = st.qps[&qpn].pd;
    let (Some(remote), Some(a), Some(old_to)) = (w.remote, w.atomic, sge_at(w, wqe, 0)) else {
        return Exec::Err(Syndrome::LOCAL_QP_OP_ERR);
    };
    if old_to.len < 8 || !local_ok(st, pd, DataSeg { len: 8, ..old_to }, true) {
        return Exec::Err(Syndrome::LOCAL_PROT_ERR);
    }
    if remote.addr % 8 != 0 {
        // The responder NAKs a misaligned atomic as an invalid request.
        return Exec::Err(Syndrome::REMOTE_INVAL_REQ_ERR);
    }
    if let Err(s) = responder_check(st, qpn, remote.rkey, remote.addr, 8, Access::REMOTE_ATOMIC) {
        return Exec::Err(s);
    }
    // Atomics act on the remote u64 in host byte order (as rxe does); the old
    // value lands in the local buffer in host byte order too.
    // SAFETY: the remote word is 8-byte aligned inside a checked MR; the local
    // 8 bytes were checked above.
    let old = unsafe {
        if w.opcode == WqeOpcode::ATOMIC_CS {
            dma::compare_swap(remote.addr, a.compare, a.swap_add)
        } else {
            dma::fetch_add(remote.addr, a.swap_add)
        }
    };
    // SAFETY: checked above.
    unsafe { dma::write_from(old_to.addr, &old.to_ne_bytes()) };
    Exec::Ok { byte_cnt: 8 }
}

#[cfg(test)]
mod tests;
