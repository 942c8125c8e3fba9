//! perftest-compatible benchmarks.
//!
//! `write_lat` follows perftest's `ib_write_lat` (perftest `src/write_lat.c`,
//! `run_iter_lat_write`; report in `print_report_lat`): the two sides take
//! turns RDMA-writing `size` bytes into each other's receive buffer, each
//! waiting for the last byte of its own receive buffer to change before
//! writing back. A timestamp is taken before each post of side A; the
//! `iters - 1` differences are round trips. As perftest 4.5 does, they are
//! sorted, the 2 largest dropped, and reported as one-way latency (half the
//! round trip) in microseconds.
//!
//! This file holds perftest's limits, a run's settings (`LatConfig`,
//! `AtomicKind`, `LatTest`) and their checks; the rest by concern:
//! `lat.rs` and `bw.rs` (one-process runs), `remote/` (two hosts),
//! `reg.rs` (`reg_mr`), `transport.rs` (`-c`, `--use-srq`), `wait.rs`
//! (waiting on the device), `timing.rs` (the cycle counter, deadlines, the
//! CPU meter), `results.rs` (rows, headers, the banner).

use rdma_direct::{
    Access, Completion, Context, Error, Mr, Qp, QpConfig, RecvWr, RemoteAddr, Result, SendWr, Sge,
};
use std::time::{Duration, Instant};

/// perftest's `LAT_MEASURE_TAIL`: the largest samples dropped from the report.
pub const LAT_MEASURE_TAIL: usize = 2;
/// perftest's `MIN_ITER`.
pub const MIN_ITERS: u32 = 5;
/// Largest message perftest sends (`-a` goes to 2^23).
pub const MAX_SIZE: u32 = 8 << 20;
/// The most bytes a WQE of the direct path (the sim, mlx5) carries inline:
/// `Pd::create_qp` refuses a larger `QpConfig::max_inline` there (the
/// library's `backend::direct::MAX_INLINE`). The largest `-I` on that path.
pub const DIRECT_MAX_INLINE: u32 = 512;
/// perftest's default `-I`.
pub const INLINE_DEFAULT: u32 = 220;
/// perftest's default `-I` for DC writes and sends (`-c DC`; its
/// `DEF_INLINE_DC`).
pub const DC_INLINE_DEFAULT: u32 = 150;
/// How long a wait for the device may take before the benchmark gives up.
pub const WAIT_LIMIT: Duration = Duration::from_secs(10);

/// Settings of a latency test.
#[derive(Clone, Debug)]
pub struct LatConfig {
    pub device: String,
    /// Message size in bytes.
    pub size: u32,
    pub iters: u32,
    /// Messages up to this size are posted inline (perftest `-I`).
    pub inline_size: u32,
    pub port: u8,
    pub gid_index: Option<u8>,
    /// The data path (`--backend`): auto, direct or verbs.
    pub backend: rdma_direct::Backend,
    /// Wait for completions with events instead of spinning (perftest `-e`).
    pub events: bool,
    /// With `events`: empty polls before arming and sleeping (the adaptive
    /// mode, [`rdma_direct::CompletionMode::Adaptive`], `--adaptive`); 0 arms at
    /// the first empty poll, as perftest's `-e`.
    pub spins: u32,
    /// Wait through the async API (`Qp::completions(mode).next()`, on a
    /// one-thread executor that parks: `--async`; ours, not perftest's),
    /// in the mode `events` and `spins` give (busy polling without them).
    pub async_wait: bool,
    /// The atomic the atomic tests run (perftest `-A`).
    pub atomic: AtomicKind,
    /// Two hosts: connect the QPs through rdma_cm (perftest `-R`).
    pub rdma_cm: bool,
    /// Latency tests: run this long instead of `iters` round trips
    /// (perftest `-D`), keeping at most [`DURATION_SAMPLES`] samples.
    /// Bandwidth tests use [`BwConfig::duration`].
    pub duration: Option<Duration>,
    /// The transport (perftest `-c`): RC, UC (WRITE and SEND tests), UD
    /// (SEND tests; at most the port's MTU per message); `QpType::Dci` for
    /// `-c DC` (DCIs posting to DCTs on SRQs, `transport::Pair::new`).
    pub qp_type: rdma_direct::QpType,
    /// The receiving sides take their receives from an SRQ (perftest
    /// `--use-srq`; SEND tests).
    pub use_srq: bool,
    /// CQE compression on the QPs' CQs (`--cqe-comp`; ours, not perftest's).
    pub cqe_comp: bool,
    /// Inline receive (scatter to CQE) on the QPs (`--inline-recv`; not in
    /// perftest, which runs with libmlx5's default: on).
    pub inline_recv: rdma_direct::InlineRecv,
}

/// Most round trips a latency test with a duration keeps (their stamps are
/// reserved before the run: 32 MiB); the run ends when they are taken.
pub const DURATION_SAMPLES: u32 = 4_000_000;

/// perftest's `-A`: which atomic the atomic tests post (8 bytes each);
/// the masked ones are ours (the direct path's extended atomics; perftest
/// has only the two plain ones), refused on the verbs path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AtomicKind {
    /// Fetch-and-add of 1.
    #[default]
    FetchAndAdd,
    /// Compare-and-swap: compare 0, swap 1 (after the first it fails the
    /// compare, which is still one atomic round trip).
    CmpAndSwap,
    /// Masked compare-and-swap, all bits compared and swapped (as
    /// `CmpAndSwap`): an 80-byte WQE, two WQEBBs.
    MaskedCmpAndSwap,
    /// Masked fetch-and-add of 1 to each 32-bit half (field boundaries
    /// at bits 31 and 63).
    MaskedFetchAndAdd,
}

impl AtomicKind {
    /// perftest's name for it (`-A FETCH_AND_ADD`, `-A CMP_AND_SWAP`; ours
    /// `-A MASKED_CMP_AND_SWAP`, `-A MASKED_FETCH_AND_ADD`).
    pub fn name(self) -> &'static str {
        match self {
            AtomicKind::FetchAndAdd => "FETCH_AND_ADD",
            AtomicKind::CmpAndSwap => "CMP_AND_SWAP",
            AtomicKind::MaskedCmpAndSwap => "MASKED_CMP_AND_SWAP",
            AtomicKind::MaskedFetchAndAdd => "MASKED_FETCH_AND_ADD",
        }
    }

    /// The `max_send_sge` its QPs ask for: 3 for the masked
    /// compare-and-swap, so that their largest WQE holds its 80 bytes (an
    /// RC WQE is sized as rdma-core's `mlx5_calc_send_wqe` does), else 1.
    pub fn send_sges(self) -> u32 {
        match self {
            AtomicKind::MaskedCmpAndSwap => 3,
            _ => 1,
        }
    }

    fn wr<'a>(self, wr_id: u64, old: &'a [Sge], remote: RemoteAddr) -> SendWr<'a> {
        use rdma_direct::AtomicSize::B8;
        match self {
            AtomicKind::FetchAndAdd => SendWr::atomic_fetch_add(wr_id, old, remote, 1),
            AtomicKind::CmpAndSwap => SendWr::atomic_cmp_swp(wr_id, old, remote, 0, 1),
            AtomicKind::MaskedCmpAndSwap => {
                SendWr::masked_cmp_swap(wr_id, old, remote, B8, 0, u64::MAX, 1, u64::MAX)
            }
            AtomicKind::MaskedFetchAndAdd => SendWr::masked_fetch_add(
                wr_id,
                old,
                remote,
                B8,
                0x0000_0001_0000_0001,
                0x8000_0000_8000_0000,
            ),
        }
    }
}

impl Default for LatConfig {
    fn default() -> Self {
        LatConfig {
            device: rdma_direct::SIM_DEVICE.into(),
            size: 2,
            iters: 1000,
            inline_size: INLINE_DEFAULT,
            port: 1,
            gid_index: None,
            backend: rdma_direct::Backend::Auto,
            events: false,
            spins: 0,
            async_wait: false,
            atomic: AtomicKind::FetchAndAdd,
            rdma_cm: false,
            duration: None,
            qp_type: rdma_direct::QpType::Rc,
            use_srq: false,
            cqe_comp: false,
            inline_recv: rdma_direct::InlineRecv::Off,
        }
    }
}

/// The latency tests (perftest's `ib_write_lat`, `ib_read_lat`, `ib_atomic_lat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LatTest {
    /// Ping-pong of RDMA WRITEs; reports half the round trip.
    Write,
    /// Ping-pong of SENDs into posted receives; reports half the round trip.
    Send,
    /// RDMA READ, one side; reports the full round trip.
    Read,
    /// Fetch-and-add of an 8-byte word, one side; reports the full round trip.
    Atomic,
}

impl LatTest {
    /// perftest's banner title.
    pub fn title(self) -> &'static str {
        match self {
            LatTest::Write => "RDMA_Write Latency Test",
            LatTest::Send => "Send Latency Test",
            LatTest::Read => "RDMA_Read Latency Test",
            LatTest::Atomic => "Atomic FETCH_AND_ADD Latency Test",
        }
    }

    /// perftest's `rtt_factor`: 2 for write and send, 1 for read and atomic.
    pub fn rtt_factor(self) -> f64 {
        match self {
            LatTest::Write | LatTest::Send => 2.0,
            LatTest::Read | LatTest::Atomic => 1.0,
        }
    }
}

/// Checks a run's message size (1..=[`MAX_SIZE`] bytes) and iteration count
/// (at least [`MIN_ITERS`]).
fn check_run(size: u32, iters: u32) -> Result<()> {
    if size == 0 || size > MAX_SIZE {
        return Err(Error::Invalid(format!(
            "size {size} must be 1..={MAX_SIZE} bytes"
        )));
    }
    if iters < MIN_ITERS {
        return Err(Error::Invalid(format!(
            "iterations {iters} must be at least {MIN_ITERS}"
        )));
    }
    Ok(())
}

/// Room for one timestamp per iteration, reserved up front so the timed
/// loop never allocates.
fn reserve<T>(iters: u32) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(iters as usize).map_err(|_| {
        Error::Invalid(format!(
            "cannot hold {iters} timestamps in memory; use fewer iterations"
        ))
    })?;
    Ok(v)
}

/// [`check_run`], then [`reserve`].
fn checked_run<T>(size: u32, iters: u32) -> Result<Vec<T>> {
    check_run(size, iters)?;
    reserve(iters)
}

/// Checks a bandwidth run's `-q`, `-t` and `-Q`.
fn check_bw(cfg: &BwConfig) -> Result<()> {
    if cfg.qps == 0 || cfg.qps > 64 {
        return Err(Error::Invalid(format!("-q {} must be 1..=64", cfg.qps)));
    }
    if cfg.tx_depth == 0 || cfg.tx_depth > 1 << 14 {
        return Err(Error::Invalid(format!(
            "tx depth {} must be 1..=16384",
            cfg.tx_depth
        )));
    }
    if cfg.cq_mod == 0 {
        return Err(Error::Invalid("CQ moderation must be at least 1".into()));
    }
    Ok(())
}

mod bw;
mod lat;
mod reg;
pub(crate) mod remote;
mod results;
mod timing;
mod transport;
mod wait;

pub use bw::*;
pub use lat::*;
pub use reg::*;
pub use remote::*;
pub use results::*;
use timing::*;
#[cfg(test)]
pub(crate) use transport::DC_KEY;
pub use transport::{check_dc, check_transport, conn_name};
use wait::*;

/// CQE bytes the sim wrote into the CQs of `qps` (64 a CQE written whole;
/// with CQE compression 64 a session title and a mini-CQE array): `None`
/// off the sim.
pub(crate) fn sim_cqe_bytes<'q>(qps: impl IntoIterator<Item = &'q mut Qp>) -> Option<u64> {
    use rdma_direct::testing::QpHooks;
    let mut total = None;
    for q in qps {
        if let Some(h) = q.sim_hook() {
            *total.get_or_insert(0) += h.cqe_bytes_written();
        }
    }
    total
}
