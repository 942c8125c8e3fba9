//! The conformance suite: one set of cases, written once against the
//! backend-neutral API, run on any device: the sim (direct path), rxe and
//! other ibverbs devices (verbs path), mlx5.
//!
//! `cargo test --test conformance` runs every case on every device present;
//! `rdma-direct conformance -d DEV` runs them from the CLI, one line per case.
//! A case passes, fails with a message naming what differed, or is skipped
//! with the reason (e.g. a case that needs the sim's test hook on rxe).

use crate::{
    Access, Completion, CompletionMode, Context, CqSizing, Error, Mr, Pd, Qp, QpAttr, QpConfig,
    QpState, RecvWr, RemoteAddr, Rkey, SendWr, Sge, SharedCq, WcOpcode, WcStatus,
};
use std::time::{Duration, Instant};

/// What a case that did not fail found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Passed; the text says what was seen (may be empty).
    Passed(String),
    /// Not run on this device; the text says why.
    Skipped(String),
}

/// Why a case failed: what differed, and where in the suite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure(pub String);

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure(format!("unexpected error: {e}"))
    }
}

/// The result of one case on one device.
pub type CaseResult = Result<Outcome, Failure>;

/// One case of the suite.
#[derive(Clone, Copy)]
pub struct Case {
    /// Its name (a Rust identifier; the test of the same name runs it).
    pub name: &'static str,
    run: CaseFn,
}

#[derive(Clone, Copy)]
enum CaseFn {
    /// Builds what it needs on the device itself.
    OneSided(fn(&str) -> CaseResult),
    /// A two-sided case (`two_host`): here with side B a second QP in this
    /// process; `--peer` runs the same code against another host.
    TwoSided(two_host::TwoHostFn),
}

impl Case {
    /// Runs the case on device `dev`. A panic inside the case is a failure.
    pub fn run(&self, dev: &str) -> CaseResult {
        let run = || match self.run {
            CaseFn::OneSided(f) => f(dev),
            CaseFn::TwoSided(f) => two_host::run_local(dev, f),
        };
        match std::panic::catch_unwind(run) {
            Ok(r) => r,
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                Err(Failure(format!("panicked: {msg}")))
            }
        }
    }
}

/// Totals of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

/// Runs every case whose name contains `filter` on `dev`, calling `report`
/// after each one.
pub fn run(dev: &str, filter: &str, mut report: impl FnMut(&Case, &CaseResult)) -> Summary {
    let mut s = Summary::default();
    for c in cases().iter().filter(|c| c.name.contains(filter)) {
        let r = c.run(dev);
        match &r {
            Ok(Outcome::Passed(_)) => s.passed += 1,
            Ok(Outcome::Skipped(_)) => s.skipped += 1,
            Err(_) => s.failed += 1,
        }
        report(c, &r);
    }
    s
}

macro_rules! check {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(Failure(format!(
                "{} (check `{}` at line {})",
                format!($($msg)+),
                stringify!($cond),
                line!()
            )));
        }
    };
    ($cond:expr) => {
        check!($cond, "failed")
    };
}

macro_rules! check_eq {
    ($left:expr, $right:expr, $($msg:tt)+) => {{
        let (l, r) = (&$left, &$right);
        if l != r {
            return Err(Failure(format!(
                "{}: got {:?}, want {:?} (line {})",
                format!($($msg)+),
                l,
                r,
                line!()
            )));
        }
    }};
    ($left:expr, $right:expr) => {
        check_eq!($left, $right, "`{}`", stringify!($left))
    };
}

pub mod two_host;

fn passed(notes: Vec<String>) -> CaseResult {
    Ok(Outcome::Passed(notes.join("; ")))
}

fn skipped(why: impl Into<String>) -> CaseResult {
    Ok(Outcome::Skipped(why.into()))
}

struct Setup {
    _ctx: Context,
    pd: Pd,
    a: Qp,
    b: Qp,
}

fn setup(dev: &str) -> Result<Setup, Failure> {
    setup_with(
        dev,
        QpConfig {
            max_send_wr: 64,
            max_send_sge: 4,
            max_inline: 128,
            ..QpConfig::default()
        },
    )
}

fn setup_with(dev: &str, cfg: QpConfig) -> Result<Setup, Failure> {
    let ctx = Context::open(dev).map_err(|e| Failure(format!("open {dev}: {e}")))?;
    let pd = ctx.alloc_pd()?;
    let (a, b) = pd
        .create_connected_pair(&cfg)
        .map_err(|e| Failure(format!("connect on {dev}: {e}")))?;
    Ok(Setup {
        _ctx: ctx,
        pd,
        a,
        b,
    })
}

/// How long a case waits for a completion before it fails.
const COMPLETION_TIMEOUT: Duration = Duration::from_secs(20);

fn poll_one(qp: &mut Qp) -> Result<Completion, Failure> {
    Ok(poll_until(qp, 1)?[0])
}

/// Polls a QP's own CQ or a shared one until `want` completions came
/// (never taking more), or fails after `COMPLETION_TIMEOUT`.
fn poll_until<C: crate::cq::CqOps>(cq: &mut C, want: usize) -> Result<Vec<Completion>, Failure> {
    let mut got = Vec::new();
    let deadline = Instant::now() + COMPLETION_TIMEOUT;
    let mut wc = [Completion::default(); 16];
    while got.len() < want {
        let room = (want - got.len()).min(wc.len());
        let n = cq.poll_cq(&mut wc[..room])?;
        got.extend_from_slice(&wc[..n]);
        if n == 0 {
            check!(
                Instant::now() < deadline,
                "{} of {want} completions within {COMPLETION_TIMEOUT:?}",
                got.len()
            );
            std::thread::yield_now();
        }
    }
    Ok(got)
}

/// Nothing completes within 50 ms (what a refused post must leave behind).
fn nothing_completes(qp: &mut Qp) -> Result<(), Failure> {
    std::thread::sleep(Duration::from_millis(50));
    let mut wc = [Completion::default(); 4];
    let n = qp.poll(&mut wc)?;
    check_eq!(n, 0, "completions of refused WRs: {:?}", &wc[..n]);
    Ok(())
}

fn remote(mr: &Mr, offset: u64) -> RemoteAddr {
    RemoteAddr {
        addr: mr.addr() + offset,
        rkey: mr.rkey(),
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn contents(mr: &Mr) -> Result<Vec<u8>, Failure> {
    let mut v = vec![0; mr.len()];
    mr.read(0, &mut v)?;
    Ok(v)
}

fn read_u64(mr: &Mr, off: usize) -> Result<u64, Failure> {
    let mut b = [0u8; 8];
    mr.read(off, &mut b)?;
    Ok(u64::from_ne_bytes(b))
}

fn write_beyond_the_remote_mr_is_remote_access_error(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let src = s.pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    src.write(0, &[0xee; 64])?;
    let sge = [Sge::new(&src, 0, 64)?];
    s.a.post_send(&[SendWr::rdma_write(1, &sge, remote(&dst, 4096 - 32)).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check_eq!(wc.status, WcStatus::REM_ACCESS_ERR, "got {}", wc.status);
    check!(contents(&dst)?.iter().all(|&b| b == 0), "target changed");
    drop(s.b);
    passed(vec![])
}

fn inline_gather_and_unsignaled_writes_wrap_the_ring(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let src = s.pd.reg_mr(8192, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.reg_mr(8192, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    // 300 rounds of: an unsignaled inline write, then a signaled 3-SGE write;
    // the signaled completion retires both. Sizes vary so WQEs straddle the SQ end.
    for round in 0..300u32 {
        let n = 1 + (round as usize * 37) % 120;
        let a = pattern(n, round as u8);
        src.write(0, &a)?;
        let sge = [Sge::new(&src, 0, n as u32)?];
        let off = (round as u64 * 13) % 3800;
        s.a.post_send(&[
            SendWr::rdma_write(1000 + round as u64, &sge, remote(&dst, off)).inline(),
        ])?;
        let parts = [(4096usize, 100u32), (4500, 0), (5000, 200)];
        let b = pattern(300, round as u8 ^ 0x5a);
        src.write(4096, &b[..100])?;
        src.write(5000, &b[100..])?;
        let sges: Vec<Sge> = parts
            .iter()
            .map(|&(o, l)| Sge::new(&src, o, l))
            .collect::<Result<_, _>>()?;
        s.a.post_send(&[
            SendWr::rdma_write(round as u64, &sges, remote(&dst, 4096 + off)).signaled(),
        ])?;
        let wc = poll_one(&mut s.a)?;
        check_eq!(
            (wc.status, wc.wr_id),
            (WcStatus::SUCCESS, round as u64),
            "round {round}"
        );
        let got = contents(&dst)?;
        check_eq!(
            &got[off as usize..off as usize + n],
            &a[..],
            "inline payload, round {round}"
        );
        check_eq!(
            &got[4096 + off as usize..4096 + off as usize + 300],
            &b[..],
            "SGE payload, round {round}"
        );
    }
    drop(s.b);
    passed(vec![])
}

fn bad_input_is_refused_and_posts_nothing(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    check!(
        matches!(s.pd.reg_mr(0, Access::LOCAL_WRITE), Err(Error::Invalid(_))),
        "zero-length MR"
    );
    check!(
        matches!(
            s.pd.reg_mr(64, Access::REMOTE_WRITE),
            Err(Error::Invalid(_))
        ),
        "REMOTE_WRITE alone"
    );
    let src = s.pd.reg_mr(4096, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    check!(Sge::new(&src, 4000, 200).is_err(), "SGE outside the MR");
    check!(
        Sge::new(&src, usize::MAX, 2).is_err(),
        "SGE offset overflow"
    );
    // A batch whose second WR is bad (inline longer than max_inline) posts nothing.
    let good = [Sge::new(&src, 0, 8)?];
    let long = [Sge::new(&src, 0, 1024)?];
    let batch = [
        SendWr::rdma_write(1, &good, remote(&dst, 0)).signaled(),
        SendWr::rdma_write(2, &long, remote(&dst, 0))
            .inline()
            .signaled(),
    ];
    check!(s.a.post_send(&batch).is_err(), "over-long inline accepted");
    let mut wc = [Completion::default(); 4];
    std::thread::sleep(Duration::from_millis(50));
    check_eq!(s.a.poll(&mut wc)?, 0, "something was posted");
    // The QP still works afterwards: the next completion is the next WR's.
    src.write(0, b"intact!!")?;
    s.a.post_send(&[SendWr::rdma_write(3, &good, remote(&dst, 0)).signaled()])?;
    let c = poll_one(&mut s.a)?;
    check_eq!((c.status, c.wr_id), (WcStatus::SUCCESS, 3));
    let mut got = [0u8; 8];
    dst.read(0, &mut got)?;
    check_eq!(&got, b"intact!!");
    drop(s.b);
    passed(vec![])
}

fn latency_benchmarks_run(dev: &str) -> CaseResult {
    use crate::bench::AtomicKind;
    use crate::bench::{run_lat, LatConfig, LatTest};
    // Each test spinning, and with events (-e); atomics both ways (-A).
    for (test, bytes, events, atomic) in [
        (LatTest::Write, 2, false, AtomicKind::FetchAndAdd),
        (LatTest::Send, 2, false, AtomicKind::FetchAndAdd),
        (LatTest::Read, 2, false, AtomicKind::FetchAndAdd),
        (LatTest::Atomic, 8, false, AtomicKind::FetchAndAdd),
        (LatTest::Atomic, 8, false, AtomicKind::CmpAndSwap),
        (LatTest::Write, 2, true, AtomicKind::FetchAndAdd),
        (LatTest::Send, 2, true, AtomicKind::FetchAndAdd),
        (LatTest::Read, 2, true, AtomicKind::FetchAndAdd),
        (LatTest::Atomic, 8, true, AtomicKind::CmpAndSwap),
    ] {
        let cfg = LatConfig {
            device: dev.to_string(),
            iters: 50,
            events,
            atomic,
            ..Default::default()
        };
        let (_, r) = run_lat(test, &cfg)?;
        let test = format!("{test:?} events {events} {atomic:?}");
        check_eq!((r.bytes, r.iterations), (bytes, 50), "{test}");
        check!(
            r.t_min > 0.0 && r.t_min <= r.t_typical && r.t_typical <= r.t_max,
            "{test}: {r:?}"
        );
    }
    passed(vec![])
}

fn qp_outlives_its_context_handle(dev: &str) -> CaseResult {
    let s = setup(dev)?;
    let Setup { _ctx, pd, mut a, b } = s;
    drop(_ctx);
    let src = pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let dst = pd.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    src.write(0, &[3; 64])?;
    let sge = [Sge::new(&src, 0, 64)?];
    a.post_send(&[SendWr::rdma_write(9, &sge, remote(&dst, 0)).signaled()])?;
    check_eq!(poll_one(&mut a)?.status, WcStatus::SUCCESS);
    check_eq!(contents(&dst)?, vec![3; 64]);
    drop(b);
    passed(vec![])
}

fn memory_of_another_protection_domain_is_refused(dev: &str) -> CaseResult {
    let mut notes: Vec<String> = Vec::new();
    let mut s = setup(dev)?;
    let other = s._ctx.alloc_pd()?;
    let src = s.pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let foreign_dst = other.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    src.write(0, &[0x11; 64])?;
    let sge = [Sge::new(&src, 0, 64)?];
    s.a.post_send(&[SendWr::rdma_write(1, &sge, remote(&foreign_dst, 0)).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check_eq!(
        wc.status,
        WcStatus::REM_ACCESS_ERR,
        "rkey of another PD: got {}",
        wc.status
    );
    check!(
        contents(&foreign_dst)?.iter().all(|&b| b == 0),
        "foreign MR written"
    );

    // A local SGE from another PD's MR: the requester fails it (mlx5 and the
    // sim say local protection error, rxe local QP operation error).
    let mut s = setup(dev)?;
    let foreign_src = other.reg_mr(64, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    foreign_src.write(0, &[0x22; 64])?;
    let sge = [Sge::new(&foreign_src, 0, 64)?];
    s.a.post_send(&[SendWr::rdma_write(2, &sge, remote(&dst, 0)).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check!(!wc.status.is_ok(), "SGE of another PD succeeded");
    check!(contents(&dst)?.iter().all(|&b| b == 0), "data landed");
    notes.push(format!("SGE of another PD -> {}", wc.status));
    drop(s.b);
    passed(notes)
}

fn zero_length_write_checks_no_rkey(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let src = s.pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let sge = [Sge::new(&src, 0, 0)?];
    let nowhere = RemoteAddr {
        addr: 0,
        rkey: Rkey(0xdead),
    };
    s.a.post_send(&[SendWr::rdma_write(4, &sge, nowhere).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check_eq!(
        (wc.status, wc.wr_id),
        (WcStatus::SUCCESS, 4),
        "got {}",
        wc.status
    );
    drop(s.b);
    passed(vec![])
}

fn send_queue_full_refuses_the_whole_batch_until_completions_are_polled(dev: &str) -> CaseResult {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig {
        max_send_wr: 4,
        ..QpConfig::default()
    };
    let (mut a, _b) = pd.create_connected_pair(&cfg)?;
    let src = pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let dst = pd.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    let wr = |id| SendWr::rdma_write(id, &sge, remote(&dst, 0));
    // Three unsignaled and one signaled: four outstanding.
    a.post_send(&[wr(0), wr(1), wr(2)])?;
    a.post_send(&[wr(3).signaled()])?;
    check!(
        matches!(a.post_send(&[wr(4).signaled()]), Err(Error::QueueFull)),
        "5th WR accepted"
    );
    // The signaled completion retires all four; a batch of 5 can never
    // fit (Invalid, not QueueFull: polling would not help), 4 do.
    let c = poll_one(&mut a)?;
    check_eq!((c.status, c.wr_id), (WcStatus::SUCCESS, 3));
    let five: Vec<SendWr> = (10..15).map(|i| wr(i).signaled()).collect();
    check!(
        matches!(a.post_send(&five), Err(Error::Invalid(_))),
        "a batch larger than max_send_wr was not refused as invalid"
    );
    a.post_send(&five[..4])?;
    for want in 10..14 {
        let c = poll_one(&mut a)?;
        check_eq!(
            (c.status, c.wr_id),
            (WcStatus::SUCCESS, want),
            "the refused batch left WRs behind"
        );
    }
    let mut wc = [Completion::default(); 4];
    std::thread::sleep(Duration::from_millis(50));
    check_eq!(a.poll(&mut wc)?, 0, "a refused WR was posted");
    passed(vec![])
}

fn rdma_read_lands_byte_for_byte_and_needs_remote_read(dev: &str) -> CaseResult {
    let mut notes: Vec<String> = Vec::new();
    let mut s = setup(dev)?;
    let remote_mr =
        s.pd.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
    let local = s.pd.reg_mr(4096, Access::LOCAL_WRITE)?;
    let data = pattern(4096, 99);
    remote_mr.write(0, &data)?;
    // Two SGEs scatter the read: 1000 bytes then 3096.
    let sges = [Sge::new(&local, 0, 1000)?, Sge::new(&local, 1000, 3096)?];
    s.a.post_send(&[SendWr::rdma_read(8, &sges, remote(&remote_mr, 0)).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check_eq!(
        (wc.status, wc.wr_id, wc.byte_len),
        (WcStatus::SUCCESS, 8, 4096),
        "{}",
        wc.status
    );
    check_eq!(wc.opcode, WcOpcode::RDMA_READ);
    check_eq!(contents(&local)?, data, "read data differs");
    notes.push("4096-byte RDMA READ landed byte for byte".to_string());

    // A region without REMOTE_READ: remote access error, local memory untouched.
    let mut s = setup(dev)?;
    let no_read =
        s.pd.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let local = s.pd.reg_mr(64, Access::LOCAL_WRITE)?;
    no_read.write(0, &[7; 64])?;
    let sge = [Sge::new(&local, 0, 64)?];
    s.a.post_send(&[SendWr::rdma_read(9, &sge, remote(&no_read, 0)).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check_eq!(wc.status, WcStatus::REM_ACCESS_ERR, "got {}", wc.status);
    check!(
        contents(&local)?.iter().all(|&b| b == 0),
        "local memory changed"
    );
    drop(s.b);
    passed(notes)
}

fn atomics_update_the_remote_word_and_return_the_old_value(dev: &str) -> CaseResult {
    let mut notes: Vec<String> = Vec::new();
    let mut s = setup(dev)?;
    let word =
        s.pd.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_ATOMIC)?;
    let old = s.pd.reg_mr(64, Access::LOCAL_WRITE)?;
    word.write(8, &0x0102_0304_0506_0708u64.to_ne_bytes())?;
    let sge = [Sge::new(&old, 0, 8)?];
    s.a.post_send(&[SendWr::atomic_fetch_add(1, &sge, remote(&word, 8), 0x10).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check_eq!(
        (wc.status, wc.wr_id),
        (WcStatus::SUCCESS, 1),
        "{}",
        wc.status
    );
    check_eq!((wc.opcode, wc.byte_len), (WcOpcode::FETCH_ADD, 8));
    check_eq!(
        read_u64(&word, 8)?,
        0x0102_0304_0506_0718,
        "remote after FAA"
    );
    check_eq!(read_u64(&old, 0)?, 0x0102_0304_0506_0708, "old value");

    // CAS that matches swaps; one that does not leaves the word alone. Both return the old value.
    let sge = [Sge::new(&old, 8, 8)?];
    s.a.post_send(&[
        SendWr::atomic_cmp_swp(2, &sge, remote(&word, 8), 0x0102_0304_0506_0718, 42).signaled(),
    ])?;
    check_eq!(poll_one(&mut s.a)?.status, WcStatus::SUCCESS);
    check_eq!(read_u64(&word, 8)?, 42, "CAS did not swap");
    check_eq!(read_u64(&old, 8)?, 0x0102_0304_0506_0718, "CAS old value");
    s.a.post_send(&[SendWr::atomic_cmp_swp(3, &sge, remote(&word, 8), 7, 99).signaled()])?;
    check_eq!(poll_one(&mut s.a)?.status, WcStatus::SUCCESS);
    check_eq!(read_u64(&word, 8)?, 42, "a failed CAS changed the word");
    check_eq!(read_u64(&old, 8)?, 42, "failed CAS old value");
    notes.push("FAA and CAS update the remote word, return the old value".to_string());

    // Bad atomics are refused before anything is posted.
    let bad = [
        SendWr::atomic_fetch_add(4, &sge, remote(&word, 4), 1),
        SendWr::atomic_fetch_add(5, &[], remote(&word, 8), 1),
    ];
    for w in bad {
        check!(matches!(
            s.a.post_send(&[w.signaled()]),
            Err(Error::Invalid(_))
        ));
    }
    let mut wc = [Completion::default(); 2];
    std::thread::sleep(Duration::from_millis(50));
    check_eq!(s.a.poll(&mut wc)?, 0, "a refused atomic was posted");
    check_eq!(read_u64(&word, 8)?, 42);
    drop(s.b);
    passed(notes)
}

/// More than 65,536 WQEs, so the 16-bit WQE index in ctrl segments and CQEs wraps.
fn the_16_bit_wqe_index_wraps(dev: &str) -> CaseResult {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig {
        max_send_wr: 64,
        ..QpConfig::default()
    };
    let (mut a, _b) = pd.create_connected_pair(&cfg)?;
    let src = pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let dst = pd.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    let total = 70_000u64;
    let mut next = 0u64;
    let mut batch: Vec<SendWr> = Vec::with_capacity(32);
    while next < total {
        batch.clear();
        // 31 unsignaled, then one signaled: one completion per 32 WRs.
        for k in 0..32 {
            let w = SendWr::rdma_write(next + k, &sge, remote(&dst, 0)).inline();
            batch.push(if k == 31 { w.signaled() } else { w });
        }
        src.write(0, &(next + 31).to_ne_bytes())?;
        a.post_send(&batch)?;
        let c = poll_one(&mut a)?;
        check_eq!((c.status, c.wr_id), (WcStatus::SUCCESS, next + 31));
        next += 32;
    }
    let mut last = [0u8; 8];
    dst.read(0, &mut last)?;
    check_eq!(u64::from_ne_bytes(last), next - 1);
    passed(vec![])
}

/// An endless stream of unsignaled WRs keeps flowing: auto-signal retires
/// them through CQEs the caller never sees.
fn unsignaled_streams_never_fill_the_send_queue(dev: &str) -> CaseResult {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let (mut a, _b) = pd.create_connected_pair(&QpConfig {
        max_send_wr: 8,
        ..QpConfig::default()
    })?;
    let src = pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let dst = pd.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut wc = [Completion::default(); 8];
    for i in 0..200u64 {
        loop {
            match a.post_send(&[SendWr::rdma_write(i, &sge, remote(&dst, 0))]) {
                Ok(()) => break,
                Err(Error::QueueFull | Error::CqFull) => {
                    let n = a.poll(&mut wc)?;
                    check_eq!(n, 0, "a hidden completion was reported: {:?}", &wc[..n]);
                    check!(Instant::now() < deadline, "the SQ stayed full at WR {i}");
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    passed(vec![])
}

fn bandwidth_benchmarks_run(dev: &str) -> CaseResult {
    use crate::bench::{run_bw, BwConfig, BwTest, LatConfig};
    // Each test one WR per post, then with post lists of 4 (-l) and events (-e).
    for (test, bytes, post_list, events) in [
        (BwTest::Write, 4096, 1, false),
        (BwTest::Read, 4096, 1, false),
        (BwTest::Send, 4096, 1, false),
        (BwTest::Atomic, 8, 1, false),
        (BwTest::Write, 4096, 4, true),
        (BwTest::Read, 4096, 4, true),
        (BwTest::Send, 4096, 4, true),
        (BwTest::Atomic, 8, 4, true),
    ] {
        let cfg = BwConfig {
            lat: LatConfig {
                device: dev.to_string(),
                size: 4096,
                iters: 300,
                events,
                ..Default::default()
            },
            tx_depth: 16,
            cq_mod: 8,
            post_list,
            qps: 1,
            duration: None,
        };
        let (_, r) = run_bw(test, &cfg)?;
        let test = format!("{test:?} post list {post_list} events {events}");
        check_eq!((r.bytes, r.iterations), (bytes, 300), "{test}");
        check!(
            r.bw_average > 0.0 && r.bw_peak >= r.bw_average * 0.999 && r.msg_rate > 0.0,
            "{test}: {r:?}"
        );
        check!(
            r.cpu.post_ns > 0.0 && r.cpu.poll_ns > 0.0,
            "{test}: no CPU cost measured: {:?}",
            r.cpu
        );
    }
    // A post list as deep as the send queue with -Q not dividing it: the
    // last WR of a list that fills the queue is signaled, so it drains.
    for test in [BwTest::Write, BwTest::Send] {
        let cfg = BwConfig {
            lat: LatConfig {
                device: dev.to_string(),
                size: 64,
                iters: 200,
                ..Default::default()
            },
            tx_depth: 4,
            cq_mod: 3,
            post_list: 4,
            qps: 1,
            duration: None,
        };
        let (_, r) = run_bw(test, &cfg)?;
        check_eq!(r.iterations, 200, "-t 4 -l 4 -Q 3 {test:?}");
    }
    // -q: three QPs, each running the test; the report covers all WRs.
    for test in [BwTest::Write, BwTest::Send] {
        let cfg = BwConfig {
            lat: LatConfig {
                device: dev.to_string(),
                size: 1024,
                iters: 200,
                ..Default::default()
            },
            tx_depth: 16,
            cq_mod: 8,
            post_list: 2,
            qps: 3,
            duration: None,
        };
        let (info, r) = run_bw(test, &cfg)?;
        check_eq!((info.qps, r.iterations), (3, 600), "-q 3 {test:?}");
        check!(
            r.bw_average > 0.0 && r.msg_rate > 0.0,
            "-q 3 {test:?}: {r:?}"
        );
    }
    // -D: as long as asked, then the WRs completed are counted (no peak).
    for test in [BwTest::Write, BwTest::Send] {
        let cfg = BwConfig {
            lat: LatConfig {
                device: dev.to_string(),
                size: 4096,
                ..Default::default()
            },
            tx_depth: 16,
            cq_mod: 8,
            post_list: 1,
            qps: 1,
            duration: Some(Duration::from_millis(200)),
        };
        let t0 = Instant::now();
        let (_, r) = run_bw(test, &cfg)?;
        let took = t0.elapsed();
        check!(
            took >= Duration::from_millis(200) && r.iterations > 0 && r.bw_peak == 0.0,
            "-D 200 ms {test:?}: {r:?} after {took:?}"
        );
        check!(r.bw_average > 0.0 && r.msg_rate > 0.0, "-D {test:?}: {r:?}");
    }
    passed(vec![])
}

/// The operations the size matrix runs, with a name for messages.
const SIZED_OPS: [&str; 5] = ["WRITE", "WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM", "READ"];

/// Gather and scatter with every SGE count from 1 to the QP's maximum:
/// a WRITE gathers k pieces, a SEND gathers k and scatters into k, a READ
/// scatters into k. One SGE over the maximum is refused and posts nothing.
fn one_to_max_sges_gather_and_scatter(dev: &str) -> CaseResult {
    const MAX: usize = 30;
    let mut s = setup_with(
        dev,
        QpConfig {
            max_send_wr: 16,
            max_send_sge: MAX as u32,
            max_recv_wr: 16,
            max_recv_sge: MAX as u32,
            max_inline: 64,
            ..QpConfig::default()
        },
    )?;
    let local = s.pd.reg_mr(64 << 10, Access::LOCAL_WRITE)?;
    let far = s.pd.reg_mr(
        64 << 10,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    )?;
    // Piece i: (3 * i + 5) bytes at 1 KiB * i (pieces never touch).
    let piece = |i: usize| (i << 10, 3 * i as u32 + 5);
    for k in 1..=MAX {
        let total: usize = (0..k).map(|i| piece(i).1 as usize).sum();
        let data = pattern(total, k as u8);
        let mut off = 0;
        for i in 0..k {
            let (at, l) = piece(i);
            local.write(at, &data[off..off + l as usize])?;
            off += l as usize;
        }
        let gather = (0..k)
            .map(|i| Sge::new(&local, piece(i).0, piece(i).1))
            .collect::<Result<Vec<_>, _>>()?;
        // WRITE gathers k pieces into one contiguous run.
        far.write(0, &vec![0; total + 1])?;
        s.a.post_send(&[SendWr::rdma_write(k as u64, &gather, remote(&far, 0)).signaled()])?;
        let c = poll_one(&mut s.a)?;
        check_eq!(
            (c.status, c.wr_id),
            (WcStatus::SUCCESS, k as u64),
            "WRITE with {k} SGEs"
        );
        let mut got = vec![0; total + 1];
        far.read(0, &mut got)?;
        check!(
            got[..total] == data[..] && got[total] == 0,
            "WRITE with {k} SGEs: payload"
        );
        // SEND gathers k and scatters into k pieces of the receive buffer.
        for i in 0..k {
            far.write(piece(i).0, &vec![0; piece(i).1 as usize])?;
        }
        let scatter = (0..k)
            .map(|i| Sge::new(&far, piece(i).0, piece(i).1))
            .collect::<Result<Vec<_>, _>>()?;
        s.b.post_recv(&[RecvWr::new(k as u64, &scatter)])?;
        s.a.post_send(&[SendWr::send(100 + k as u64, &gather).signaled()])?;
        let c = poll_one(&mut s.a)?;
        check_eq!(
            (c.status, c.wr_id),
            (WcStatus::SUCCESS, 100 + k as u64),
            "SEND with {k} SGEs"
        );
        let r = poll_one(&mut s.b)?;
        check_eq!(
            (r.status, r.wr_id, r.byte_len),
            (WcStatus::SUCCESS, k as u64, total as u32),
            "receive with {k} SGEs"
        );
        let mut off = 0;
        for i in 0..k {
            let (at, l) = piece(i);
            let mut got = vec![0; l as usize];
            far.read(at, &mut got)?;
            check!(
                got[..] == data[off..off + l as usize],
                "SEND with {k} SGEs: piece {i} differs"
            );
            off += l as usize;
        }
        // READ scatters a contiguous remote run into k local pieces.
        let back = pattern(total, !(k as u8));
        far.write(32 << 10, &back)?;
        s.a.post_send(&[
            SendWr::rdma_read(200 + k as u64, &gather, remote(&far, 32 << 10)).signaled(),
        ])?;
        let c = poll_one(&mut s.a)?;
        check_eq!(
            (c.status, c.wr_id, c.byte_len),
            (WcStatus::SUCCESS, 200 + k as u64, total as u32),
            "READ with {k} SGEs"
        );
        let mut off = 0;
        for i in 0..k {
            let (at, l) = piece(i);
            let mut got = vec![0; l as usize];
            local.read(at, &mut got)?;
            check!(
                got[..] == back[off..off + l as usize],
                "READ with {k} SGEs: piece {i} differs"
            );
            off += l as usize;
        }
    }
    let over = (0..=MAX)
        .map(|i| Sge::new(&local, i * 8, 8))
        .collect::<Result<Vec<_>, _>>()?;
    let r =
        s.a.post_send(&[SendWr::rdma_write(999, &over, remote(&far, 0)).signaled()]);
    check!(
        matches!(r, Err(Error::Invalid(_))),
        "{} SGEs accepted: {r:?}",
        MAX + 1
    );
    let r = s.b.post_recv(&[RecvWr::new(999, &over)]);
    check!(
        matches!(r, Err(Error::Invalid(_))),
        "receive with {} SGEs accepted: {r:?}",
        MAX + 1
    );
    nothing_completes(&mut s.a)?;
    nothing_completes(&mut s.b)?;
    passed(vec![format!(
        "1..={MAX} SGEs gather and scatter; {} refused",
        MAX + 1
    )])
}

/// An inline WRITE of exactly the QP's inline limit lands; one byte more
/// (in one SGE or spread over two) is refused and posts nothing.
fn inline_at_the_limit_and_one_over(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let limit = s.a.max_inline() as usize;
    let src = s.pd.reg_mr(4096, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let data = pattern(limit + 1, 42);
    src.write(0, &data)?;
    let at_limit = [Sge::new(&src, 0, limit as u32)?];
    s.a.post_send(&[SendWr::rdma_write(1, &at_limit, remote(&dst, 0))
        .inline()
        .signaled()])?;
    let c = poll_one(&mut s.a)?;
    check_eq!(
        (c.status, c.wr_id),
        (WcStatus::SUCCESS, 1),
        "inline of {limit} bytes"
    );
    let got = contents(&dst)?;
    check!(
        got[..limit] == data[..limit] && got[limit] == 0,
        "inline of {limit} bytes: payload"
    );
    // The same WR built from a copy of the source: inline data is taken at post time.
    let one_over = [Sge::new(&src, 0, limit as u32 + 1)?];
    let split = [Sge::new(&src, 0, limit as u32)?, Sge::new(&src, limit, 1)?];
    let before = ring_snapshot(&s.a);
    for (what, sges) in [("one SGE", &one_over[..]), ("two SGEs", &split[..])] {
        let r = s.a.post_send(&[SendWr::rdma_write(2, sges, remote(&dst, 0))
            .inline()
            .signaled()]);
        check!(
            matches!(r, Err(Error::Invalid(_))),
            "inline of {} bytes in {what} accepted: {r:?}",
            limit + 1
        );
    }
    check!(
        ring_snapshot(&s.a) == before,
        "a refused post changed the send queue ring or its doorbell record"
    );
    nothing_completes(&mut s.a)?;
    passed(vec![format!(
        "inline limit {limit} bytes lands; {} refused{}",
        limit + 1,
        if before.is_some() {
            ", ring and doorbell record unchanged"
        } else {
            ""
        }
    )])
}

/// A QP that is not connected takes no work request: posting on a QP in
/// RESET is refused with `QpState` and leaves nothing behind; once
/// connected, the first completion is the first WR posted after.
fn post_before_rts_is_refused(dev: &str) -> CaseResult {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig::default();
    let mut a = pd.create_qp(&cfg)?;
    let mut b = pd.create_qp(&cfg)?;
    check_eq!(a.state(), crate::QpState::Reset);
    let src = pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let dst = pd.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    src.write(0, &[0x77; 64])?;
    let sge = [Sge::new(&src, 0, 64)?];
    let before = ring_snapshot(&a);
    let r = a.post_send(&[SendWr::rdma_write(1, &sge, remote(&dst, 0)).signaled()]);
    check!(
        matches!(r, Err(Error::QpState { .. })),
        "post_send in RESET: {r:?}"
    );
    let r = b.post_recv(&[RecvWr::new(2, &sge)]);
    check!(
        matches!(r, Err(Error::QpState { .. })),
        "post_recv in RESET: {r:?}"
    );
    check!(
        ring_snapshot(&a) == before,
        "a refused post changed the ring"
    );
    Qp::connect_loopback(&mut a, &mut b)?;
    check_eq!(
        (a.state(), b.state()),
        (crate::QpState::Rts, crate::QpState::Rts)
    );
    let r = Qp::connect_loopback(&mut a, &mut b);
    check!(
        matches!(r, Err(Error::Invalid(_))),
        "connecting twice: {r:?}"
    );
    nothing_completes(&mut a)?;
    check!(
        contents(&dst)?.iter().all(|&b| b == 0),
        "the refused WRITE landed"
    );
    a.post_send(&[SendWr::rdma_write(3, &sge, remote(&dst, 0)).signaled()])?;
    let c = poll_one(&mut a)?;
    check_eq!(
        (c.status, c.wr_id),
        (WcStatus::SUCCESS, 3),
        "first WR after connecting"
    );
    check!(contents(&dst)? == vec![0x77; 64], "payload");
    passed(vec![])
}

/// A SEND that finds no receive posted is retried `rnr_retry` times, then
/// fails with RNR_RETRY_EXC_ERR (and flushes what follows); with
/// `rnr_retry` 7 it waits until a receive is posted, then lands.
fn rnr_retry_finite_and_forever(dev: &str) -> CaseResult {
    let cfg = |rnr_retry| QpConfig {
        rnr_retry,
        ..QpConfig::default()
    };
    let mut s = setup_with(dev, cfg(1))?;
    let src = s.pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let sge = [Sge::new(&src, 0, 64)?];
    s.a.post_send(&[
        SendWr::send(1, &sge).signaled(),
        SendWr::send(2, &sge).signaled(),
    ])?;
    let got = poll_until(&mut s.a, 2)?;
    let seen: Vec<_> = got.iter().map(|c| (c.wr_id, c.status)).collect();
    check_eq!(
        seen,
        vec![
            (1, WcStatus::RNR_RETRY_EXC_ERR),
            (2, WcStatus::WR_FLUSH_ERR)
        ],
        "rnr_retry 1 with no receive posted"
    );

    let mut s = setup_with(dev, cfg(7))?;
    let src = s.pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let rbuf = s.pd.reg_mr(64, Access::LOCAL_WRITE)?;
    src.write(0, &[0x3c; 64])?;
    let sge = [Sge::new(&src, 0, 64)?];
    s.a.post_send(&[SendWr::send(3, &sge).signaled()])?;
    // Longer than rnr_retry 6 at min_rnr_timer 12 (6 x 0.64 ms) would last.
    std::thread::sleep(Duration::from_millis(200));
    nothing_completes(&mut s.a)?;
    let rsge = [Sge::new(&rbuf, 0, 64)?];
    s.b.post_recv(&[RecvWr::new(4, &rsge)])?;
    let c = poll_one(&mut s.a)?;
    check_eq!(
        (c.status, c.wr_id),
        (WcStatus::SUCCESS, 3),
        "rnr_retry 7: SEND after the receive is posted"
    );
    let r = poll_one(&mut s.b)?;
    check_eq!((r.status, r.wr_id, r.byte_len), (WcStatus::SUCCESS, 4, 64));
    check!(contents(&rbuf)? == vec![0x3c; 64], "payload");
    passed(vec![])
}

/// CQ credits: with a CQ of depth d, at most d WRs (sends outstanding plus
/// receives posted) are held at once, since an error would flush each into
/// the CQ. The post that would exceed it is refused and writes nothing;
/// polling gives the room back.
fn cq_credits_bound_what_is_outstanding(dev: &str) -> CaseResult {
    let mut s = setup_with(
        dev,
        QpConfig {
            max_send_wr: 64,
            max_recv_wr: 64,
            cq_depth: Some(4),
            ..QpConfig::default()
        },
    )?;
    let d = s.a.cq_depth() as usize;
    if d >= 64 {
        return skipped(format!(
            "asked for a CQ of 4, {dev} made it {d} deep, not less than the SQ"
        ));
    }
    let src = s.pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    let wr = |id| SendWr::rdma_write(id, &sge, remote(&dst, 0));
    // d - 1 unsignaled, then one signaled: d outstanding.
    let mut batch: Vec<SendWr> = (0..d as u64 - 1).map(wr).collect();
    batch.push(wr(d as u64 - 1).signaled());
    s.a.post_send(&batch)?;
    let before = ring_snapshot(&s.a);
    let r = s.a.post_send(&[wr(100).signaled()]);
    check!(
        matches!(r, Err(Error::CqFull)),
        "WR {} of a CQ of {d} accepted: {r:?}",
        d + 1
    );
    check!(
        ring_snapshot(&s.a) == before,
        "the refused post changed the ring"
    );
    let c = poll_one(&mut s.a)?;
    check_eq!((c.status, c.wr_id), (WcStatus::SUCCESS, d as u64 - 1));
    // The CQE retired all d: d fit again.
    let batch: Vec<SendWr> = (200..200 + d as u64).map(|i| wr(i).signaled()).collect();
    s.a.post_send(&batch)?;
    let got = poll_until(&mut s.a, d)?;
    check!(got.iter().all(|c| c.status.is_ok()), "{got:?}");
    // Receives hold credits too.
    let rsge = [Sge::new(&dst, 0, 8)?];
    let recvs: Vec<RecvWr> = (0..d as u64).map(|i| RecvWr::new(i, &rsge)).collect();
    s.b.post_recv(&recvs)?;
    let r = s.b.post_recv(&[RecvWr::new(99, &rsge)]);
    check!(
        matches!(r, Err(Error::CqFull)),
        "receive {} of a CQ of {d} accepted: {r:?}",
        d + 1
    );
    let r =
        s.b.post_send(&[SendWr::rdma_write(98, &rsge, remote(&src, 0)).signaled()]);
    check!(
        matches!(r, Err(Error::CqFull)),
        "a send beside {d} receives accepted: {r:?}"
    );
    passed(vec![format!(
        "CQ of {d}: WR {} refused until a completion was polled",
        d + 1
    )])
}

/// A stream of unsignaled WRs through a CQ much smaller than the SQ keeps
/// flowing: the WR that takes the CQ's last credit is signaled (a CQE the
/// caller never sees), so credits always come back.
fn unsignaled_streams_never_exhaust_cq_credits(dev: &str) -> CaseResult {
    let mut s = setup_with(
        dev,
        QpConfig {
            max_send_wr: 256,
            max_recv_wr: 2,
            cq_depth: Some(8),
            ..QpConfig::default()
        },
    )?;
    let src = s.pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    // Two receives hold two of the credits the whole time.
    s.a.post_recv(&[RecvWr::new(1, &sge), RecvWr::new(2, &sge)])?;
    let deadline = Instant::now() + COMPLETION_TIMEOUT;
    let mut wc = [Completion::default(); 8];
    for i in 0..1000u64 {
        loop {
            match s
                .a
                .post_send(&[SendWr::rdma_write(i, &sge, remote(&dst, 0))])
            {
                Ok(()) => break,
                Err(Error::QueueFull | Error::CqFull) => {
                    let n = s.a.poll(&mut wc)?;
                    check_eq!(n, 0, "a hidden completion was reported: {:?}", &wc[..n]);
                    check!(
                        Instant::now() < deadline,
                        "stuck at WR {i}: no credits came back"
                    );
                    std::thread::yield_now();
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    // Receives: max_recv_wr is a hard limit.
    let r = s.a.post_recv(&[RecvWr::new(3, &sge)]);
    check!(
        matches!(r, Err(Error::RecvQueueFull)),
        "receive 3 of max_recv_wr 2: {r:?}"
    );
    passed(vec![format!(
        "1000 unsignaled WRs through a CQ of {}",
        s.a.cq_depth()
    )])
}

/// QP configurations out of range are refused with `Error::Invalid` before
/// the device is asked for anything, and a good one still works after them.
fn out_of_range_qp_configs_are_refused(dev: &str) -> CaseResult {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let bad: [(&str, QpConfig); 5] = [
        (
            "rnr_retry 8",
            QpConfig {
                rnr_retry: 8,
                ..QpConfig::default()
            },
        ),
        (
            "min_rnr_timer 32",
            QpConfig {
                min_rnr_timer: 32,
                ..QpConfig::default()
            },
        ),
        (
            "cq_depth 0",
            QpConfig {
                cq_depth: Some(0),
                ..QpConfig::default()
            },
        ),
        (
            "max_recv_wr 16385",
            QpConfig {
                max_recv_wr: 16385,
                ..QpConfig::default()
            },
        ),
        (
            "max_send_wr 0",
            QpConfig {
                max_send_wr: 0,
                ..QpConfig::default()
            },
        ),
    ];
    for (what, cfg) in bad {
        let r = pd.create_qp(&cfg);
        check!(matches!(r, Err(Error::Invalid(_))), "{what}: {:?}", r.err());
    }
    let mut qp = pd.create_qp(&QpConfig {
        min_rnr_timer: 31,
        ..QpConfig::default()
    })?;
    check_eq!(qp.state(), crate::QpState::Reset);
    let mut notes = vec!["5 configs refused, min_rnr_timer 31 accepted".to_string()];
    if dev == crate::SIM_DEVICE {
        // The sim has one port: a modify naming another is refused.
        let r = qp.modify(crate::QpState::Init, &crate::QpAttr::init(9, Access::all()));
        check!(
            matches!(r, Err(Error::Invalid(_))),
            "port 9 on the sim: {r:?}"
        );
        check_eq!(qp.state(), crate::QpState::Reset);
        notes.push("port 9 refused by the sim".into());
    }
    // A QP asked for no receive SGEs takes no receive with one.
    let (_a, mut b) = pd.create_connected_pair(&QpConfig {
        max_recv_sge: 0,
        ..QpConfig::default()
    })?;
    let buf = pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let one = [Sge::new(&buf, 0, 64)?];
    let r = b.post_recv(&[RecvWr::new(1, &one)]);
    check!(
        matches!(r, Err(Error::Invalid(_))),
        "1 SGE with max_recv_sge 0: {r:?}"
    );
    notes.push("1-SGE receive refused with max_recv_sge 0".into());
    passed(notes)
}

/// The memory pool: 1,000 allocate/free cycles register nothing after the
/// pool is built; a pool buffer works as a local SGE and as a remote
/// target; exhaustion is `PoolExhausted` and the pool serves again after a
/// buffer comes back.
fn memory_pool_serves_without_registering(dev: &str) -> CaseResult {
    use crate::pool::{Pool, PoolConfig};
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let pool = Pool::new(
        &pd,
        &PoolConfig {
            buf_size: 4096,
            ..PoolConfig::default()
        },
    )?;
    check_eq!(pool.capacity(), 512);
    let regs = pd.registrations();
    for i in 0..1000 {
        let b = pool.alloc()?;
        b.write(0, &(i as u64).to_le_bytes())?;
    }
    check_eq!(pd.registrations(), regs, "allocations registered memory");
    // One buffer sends, another receives the WRITE.
    let (mut a, _b) = pd.create_connected_pair(&QpConfig::default())?;
    let (src, dst) = (pool.alloc()?, pool.alloc()?);
    let data = pattern(4096, 5);
    src.write(0, &data)?;
    dst.write(0, &[0; 4096])?;
    a.post_send(&[SendWr::rdma_write(1, &[src.sge(0, 4096)?], dst.remote(0)?).signaled()])?;
    check_eq!(poll_one(&mut a)?.status, WcStatus::SUCCESS);
    let mut got = vec![0; 4096];
    dst.read(0, &mut got)?;
    check!(got == data, "WRITE between two pool buffers");
    check!(
        matches!(src.sge(4000, 97), Err(Error::Invalid(_))),
        "an SGE leaving its pool buffer was accepted"
    );
    // Exhaustion, then a buffer back.
    let mut held = vec![src, dst];
    while let Ok(b) = pool.alloc() {
        held.push(b);
    }
    check_eq!(held.len(), 512);
    check!(
        matches!(pool.alloc(), Err(Error::PoolExhausted { buffers: 512 })),
        "a 513th buffer"
    );
    held.pop();
    check!(pool.alloc().is_ok(), "no buffer after one came back");
    check_eq!(pd.registrations(), regs);
    passed(vec![format!(
        "512 buffers of 4 KiB, {:?} pages",
        pool.pages()
    )])
}

/// A receive batch with one bad WR posts none of it.
fn refused_receive_batches_post_nothing(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let buf = s.pd.reg_mr(256, Access::LOCAL_WRITE)?;
    let src = s.pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let one = [Sge::new(&buf, 0, 64)?];
    let many = (0..8)
        .map(|i| Sge::new(&buf, i * 8, 8))
        .collect::<Result<Vec<_>, _>>()?;
    let r =
        s.b.post_recv(&[RecvWr::new(111, &one), RecvWr::new(222, &many)]);
    check!(
        matches!(r, Err(Error::Invalid(_))),
        "8 SGEs with max_recv_sge 1: {r:?}"
    );
    s.b.post_recv(&[RecvWr::new(333, &one)])?;
    let sge = [Sge::new(&src, 0, 64)?];
    s.a.post_send(&[SendWr::send(1, &sge).signaled()])?;
    check_eq!(poll_one(&mut s.a)?.status, WcStatus::SUCCESS);
    let r = poll_one(&mut s.b)?;
    check_eq!(
        (r.status, r.wr_id),
        (WcStatus::SUCCESS, 333),
        "the receive that took the SEND"
    );
    nothing_completes(&mut s.b)?;
    // A receive batch short of CQ credits is CqFull (polling cures it),
    // whatever the send queue's depth; one larger than max_recv_wr or the
    // CQ is Invalid (nothing would).
    // (The device may make the CQ deeper than 16: rxe makes it 31.)
    let cfg = QpConfig {
        max_send_wr: 1,
        max_recv_wr: 64,
        cq_depth: Some(16),
        ..QpConfig::default()
    };
    let mut q = s.pd.create_qp(&cfg)?;
    let mut peer = s.pd.create_qp(&cfg)?;
    Qp::connect_loopback(&mut q, &mut peer)?;
    let depth = q.cq_depth() as usize;
    let sges: Vec<[Sge<'_>; 1]> = (0..depth)
        .map(|i| Ok([Sge::new(&buf, (i * 8) % 256, 8)?]))
        .collect::<Result<_, Error>>()?;
    let wrs: Vec<RecvWr<'_>> = sges.iter().map(|g| RecvWr::new(1, g)).collect();
    q.post_recv(&wrs[..depth - 4])?;
    let r = q.post_recv(&wrs[..8]);
    check!(
        matches!(r, Err(Error::CqFull)),
        "8 receives, 4 credits left: {r:?}"
    );
    let r = peer.post_recv(&[]);
    check!(r.is_ok(), "an empty batch: {r:?}");
    let big: Vec<RecvWr<'_>> = (0..65).map(|_| RecvWr::new(2, &sges[0])).collect();
    let mut fresh = s.pd.create_qp(&QpConfig {
        cq_depth: None,
        ..cfg
    })?;
    let mut fresh_peer = s.pd.create_qp(&cfg)?;
    Qp::connect_loopback(&mut fresh, &mut fresh_peer)?;
    let r = fresh.post_recv(&big);
    check!(
        matches!(r, Err(Error::Invalid(_))),
        "65 receives, max_recv_wr 64: {r:?}"
    );
    passed(vec![])
}

/// The typed state machine: a transition missing a required attribute, or
/// carrying one it does not allow, is refused before verbs sees it and the
/// error names the attribute; RoCE needs a global address vector; `query`
/// follows every step.
fn modify_checks_attributes_by_name(dev: &str) -> CaseResult {
    use crate::{QpAttr, QpState};
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig::default();
    let mut a = pd.create_qp(&cfg)?;
    let mut b = pd.create_qp(&cfg)?;
    let refused = |r: crate::Result<()>, want: &str| -> Result<(), Failure> {
        match r {
            Err(Error::QpAttr { attr, .. }) if attr == want => Ok(()),
            other => Err(Failure(format!(
                "wanted a QpAttr error naming {want}, got {other:?}"
            ))),
        }
    };
    let mut init = QpAttr::init(1, Access::all());
    init.port = None;
    refused(a.modify(QpState::Init, &init), "PORT")?;
    check_eq!(
        a.query()?.state,
        QpState::Reset,
        "a refused modify changed the QP"
    );
    refused(a.modify(QpState::Rtr, &QpAttr::default()), "STATE")?;
    for q in [&mut a, &mut b] {
        q.modify(QpState::Init, &QpAttr::init(1, Access::all()))?;
        check_eq!(q.query()?.state, QpState::Init);
    }
    let (ea, eb) = (a.endpoint(), b.endpoint());
    let mut rtr = a.rtr_attr(&eb, 0x123);
    rtr.min_rnr_timer = None;
    refused(a.modify(QpState::Rtr, &rtr), "MIN_RNR_TIMER")?;
    let mut notes = vec![];
    if ea.roce {
        let mut local_av = a.rtr_attr(&eb, 0x123);
        if let Some(av) = local_av.av.as_mut() {
            av.grh = None;
        }
        refused(a.modify(QpState::Rtr, &local_av), "AV")?;
        notes.push("RoCE: a non-global AV refused".to_string());
    }
    a.modify(QpState::Rtr, &a.rtr_attr(&eb, 0x123))?;
    b.modify(QpState::Rtr, &b.rtr_attr(&ea, 0x456))?;
    check_eq!(a.query()?.state, QpState::Rtr);
    check_eq!(a.query()?.dest_qpn, Some(b.qp_num()));
    for (extra, name) in [
        ("PORT", "PORT"),
        ("MAX_DEST_RD_ATOMIC", "MAX_DEST_RD_ATOMIC"),
    ] {
        let mut rts = QpAttr::rts(0x456, 6);
        match extra {
            "PORT" => rts.port = Some(1),
            _ => rts.max_dest_rd_atomic = Some(1),
        }
        refused(a.modify(QpState::Rts, &rts), name)?;
    }
    let mut rts = QpAttr::rts(0x456, 6);
    rts.rnr_retry = None;
    refused(a.modify(QpState::Rts, &rts), "RNR_RETRY")?;
    a.modify(QpState::Rts, &QpAttr::rts(0x456, 6))?;
    b.modify(QpState::Rts, &QpAttr::rts(0x123, 6))?;
    let info = a.query()?;
    check_eq!((info.state, info.rnr_retry), (QpState::Rts, Some(6)));
    // Connected by hand: traffic works.
    let src = pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let dst = pd.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    src.write(0, &[0x42; 64])?;
    let sge = [Sge::new(&src, 0, 64)?];
    a.post_send(&[SendWr::rdma_write(1, &sge, remote(&dst, 0)).signaled()])?;
    check_eq!(poll_one(&mut a)?.status, WcStatus::SUCCESS);
    check!(contents(&dst)? == vec![0x42; 64], "payload");
    notes.push(
        "missing PORT, MIN_RNR_TIMER, RNR_RETRY and extra PORT, MAX_DEST_RD_ATOMIC refused by name"
            .into(),
    );
    passed(notes)
}

/// A receiver asking for `min_rnr_timer` 1 (0.01 ms) and a sender with
/// `rnr_retry` 1: a SEND with no receive posted ends RNR_RETRY_EXC_ERR
/// within a second. With `min_rnr_timer` 18 (5.12 ms) the one retry waits
/// at least that long first: the responder's timer is the one used.
fn short_rnr_timer_fails_fast(dev: &str) -> CaseResult {
    let fast = rnr_exhaustion_time(dev, 1)?;
    check!(
        fast < Duration::from_secs(1),
        "min_rnr_timer 1: took {fast:?}"
    );
    let slow = rnr_exhaustion_time(dev, 18)?;
    check!(
        slow >= crate::qp_attr::rnr_timer(18),
        "min_rnr_timer 18 (5.12 ms): gave up after {slow:?}, before one timer ran out"
    );
    passed(vec![format!(
        "RNR_RETRY_EXC_ERR after {fast:?} with min_rnr_timer 1, {slow:?} with 18"
    )])
}

/// Connects a pair by hand with the receiver's `min_rnr_timer` = `timer`
/// and `rnr_retry` 1, sends with no receive posted, and returns how long the
/// RNR_RETRY_EXC_ERR took.
fn rnr_exhaustion_time(dev: &str, timer: u8) -> Result<Duration, Failure> {
    use crate::{QpAttr, QpState};
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig::default();
    let mut a = pd.create_qp(&cfg)?;
    let mut b = pd.create_qp(&cfg)?;
    let (ea, eb) = (a.endpoint(), b.endpoint());
    for q in [&mut a, &mut b] {
        q.modify(QpState::Init, &QpAttr::init(1, Access::all()))?;
    }
    let mut rtr_b = b.rtr_attr(&ea, 1);
    rtr_b.min_rnr_timer = Some(timer);
    b.modify(QpState::Rtr, &rtr_b)?;
    a.modify(QpState::Rtr, &a.rtr_attr(&eb, 2))?;
    a.modify(QpState::Rts, &QpAttr::rts(1, 1))?;
    b.modify(QpState::Rts, &QpAttr::rts(2, 1))?;
    let src = pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let sge = [Sge::new(&src, 0, 64)?];
    let t = Instant::now();
    a.post_send(&[SendWr::send(1, &sge).signaled()])?;
    let c = poll_one(&mut a)?;
    let took = t.elapsed();
    check_eq!(
        (c.wr_id, c.status),
        (1, WcStatus::RNR_RETRY_EXC_ERR),
        "min_rnr_timer {timer}"
    );
    Ok(took)
}

/// Event mode: arm, post, wait for the event (1 s at most), poll; 300
/// rounds, every completion found and no wait timing out. A CQ armed for
/// solicited completions only sleeps through an unsolicited SEND and wakes
/// for a solicited one.
fn completion_events_wake_the_waiter(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let src = s.pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    let mut wc = [Completion::default(); 4];
    // Each round as an event-driven poller runs: post one signaled write,
    // wait for the event (the CQ was armed before the post), drain, arm,
    // poll once more (a completion between the drain and the arm raises no
    // event but sits in the CQ).
    let mut waits = 0;
    s.a.arm_cq(false)?;
    for i in 0..10_000u64 {
        s.a.post_send(&[SendWr::rdma_write(i, &sge, remote(&dst, 0)).signaled()])?;
        check!(
            s.a.wait_cq_event(Duration::from_secs(1))?,
            "round {i}: no completion event within 1 s"
        );
        waits += 1;
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(1);
        while got.is_empty() {
            let n = s.a.poll(&mut wc)?;
            got.extend_from_slice(&wc[..n]);
            check!(Instant::now() < deadline, "round {i}: an event but no CQE");
        }
        s.a.arm_cq(false)?;
        let n = s.a.poll(&mut wc)?;
        got.extend_from_slice(&wc[..n]);
        check_eq!(got.len(), 1, "round {i}: completions {got:?}");
        check_eq!(
            (got[0].status, got[0].wr_id),
            (WcStatus::SUCCESS, i),
            "round {i}"
        );
    }
    // Solicited only, at the responder.
    let rbuf = s.pd.reg_mr(128, Access::LOCAL_WRITE)?;
    let r = [Sge::new(&rbuf, 0, 64)?];
    let r2 = [Sge::new(&rbuf, 64, 64)?];
    s.b.post_recv(&[RecvWr::new(1, &r), RecvWr::new(2, &r2)])?;
    s.b.arm_cq(true)?;
    s.a.post_send(&[SendWr::send(10, &sge).signaled()])?;
    check_eq!(poll_one(&mut s.a)?.status, WcStatus::SUCCESS);
    check!(
        !s.b.wait_cq_event(Duration::from_millis(200))?,
        "an unsolicited SEND woke a CQ armed for solicited completions"
    );
    s.a.post_send(&[SendWr::send(11, &sge).solicited().signaled()])?;
    check_eq!(poll_one(&mut s.a)?.status, WcStatus::SUCCESS);
    check!(
        s.b.wait_cq_event(Duration::from_secs(1))?,
        "a solicited SEND did not wake the CQ"
    );
    let got = poll_until(&mut s.b, 2)?;
    check_eq!((got[0].wr_id, got[1].wr_id), (1, 2));
    passed(vec![format!("10,000 rounds, {waits} waits on the event")])
}

/// `connect_remote` with facts out of range changes nothing (the QP stays
/// in RESET and connects afterwards); the optional attributes a transition
/// may carry take effect: a responder whose INIT -> RTR drops REMOTE_WRITE
/// refuses an RDMA WRITE, and RTS -> RTS is a transition like any other.
fn connect_checks_first_and_optional_attributes_apply(dev: &str) -> CaseResult {
    use crate::{QpAttr, QpState};
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig::default();
    let mut a = pd.create_qp(&cfg)?;
    let mut b = pd.create_qp(&cfg)?;
    let (ea, eb) = (a.endpoint(), b.endpoint());
    let r = a.connect_remote(1 << 24, &eb, 5);
    check!(
        matches!(r, Err(Error::QpAttr { attr: "SQ_PSN", .. })),
        "my_psn 2^24: {r:?}"
    );
    check_eq!(
        a.query()?.state,
        QpState::Reset,
        "a refused connect changed the QP"
    );
    let r = a.connect_remote(5, &eb, 1 << 24);
    check!(
        matches!(r, Err(Error::QpAttr { attr: "RQ_PSN", .. })),
        "peer_psn 2^24: {r:?}"
    );
    check_eq!(a.query()?.state, QpState::Reset);
    // Now for real, with B's INIT -> RTR taking REMOTE_WRITE away.
    a.connect_remote(5, &eb, 7)?;
    b.modify(QpState::Init, &QpAttr::init(1, Access::all()))?;
    let mut rtr = b.rtr_attr(&ea, 5);
    rtr.access = Some(Access::LOCAL_WRITE | Access::REMOTE_READ);
    b.modify(QpState::Rtr, &rtr)?;
    b.modify(QpState::Rts, &QpAttr::rts(7, 6))?;
    let r = a.connect_remote(5, &eb, 7);
    check!(
        matches!(r, Err(Error::Invalid(_))),
        "connecting an RTS QP again: {r:?}"
    );
    let rts_rts = QpAttr {
        min_rnr_timer: Some(12),
        ..Default::default()
    };
    b.modify(QpState::Rts, &rts_rts)?;
    let src = pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let dst = pd.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 64)?];
    a.post_send(&[SendWr::rdma_write(1, &sge, remote(&dst, 0)).signaled()])?;
    let c = poll_one(&mut a)?;
    check!(
        !c.status.is_ok(),
        "a WRITE into a QP without REMOTE_WRITE succeeded"
    );
    check!(
        contents(&dst)?.iter().all(|&b| b == 0),
        "the refused WRITE landed"
    );
    passed(vec![format!(
        "WRITE without REMOTE_WRITE -> {:?}",
        c.status
    )])
}

const NEEDS_HOOK: &str =
    "needs the sim's test hook (raw WQE bytes or bypassed CQ credits); this device has none";

/// WQEs the driver never writes, put on the ring through the sim's test
/// hook: DS 0, another QP's number, the wrong WQE index, an unknown opcode.
/// Each completes with LOC_QP_OP_ERR (syndrome 0x02) carrying its wr_id,
/// moves the QP to ERR (the next WR is flushed) and touches no memory.
fn malformed_wqes_are_local_qp_operation_errors(dev: &str) -> CaseResult {
    type Patch = fn(&mut [u8]);
    let patches: [(&str, Patch); 4] = [
        ("DS 0", |w| w[7] &= !0x3f),
        ("another QPN", |w| w[6] ^= 0x01),
        ("wrong WQE index", |w| w[2] ^= 0x01),
        ("unknown opcode 0x07", |w| w[3] = 0x07),
    ];
    for (what, patch) in patches {
        let mut s = setup(dev)?;
        let src = s.pd.reg_mr(64, Access::LOCAL_WRITE)?;
        let dst =
            s.pd.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
        src.write(0, &[0x99; 64])?;
        let sge = [Sge::new(&src, 0, 64)?];
        let Some(mut hook) = s.a.sim_hook() else {
            return skipped(NEEDS_HOOK);
        };
        hook.post_patched(
            &SendWr::rdma_write(1, &sge, remote(&dst, 0)).signaled(),
            patch,
        )?;
        s.a.post_send(&[SendWr::rdma_write(2, &sge, remote(&dst, 0)).signaled()])?;
        let got = poll_until(&mut s.a, 2)?;
        let seen: Vec<_> = got.iter().map(|c| (c.wr_id, c.status)).collect();
        check_eq!(
            seen,
            vec![(1, WcStatus::LOC_QP_OP_ERR), (2, WcStatus::WR_FLUSH_ERR)],
            "{what}"
        );
        check!(
            contents(&dst)?.iter().all(|&b| b == 0),
            "{what}: memory written"
        );
    }
    passed(vec![
        "DS 0, another QPN, wrong WQE index, unknown opcode".into()
    ])
}

/// A fetch-and-add whose remote address is not 8-byte aligned (put on the
/// ring through the hook; the API refuses it): REM_INV_REQ_ERR (0x12), the
/// remote word unchanged.
fn misaligned_atomic_is_a_remote_invalid_request(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let word =
        s.pd.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_ATOMIC)?;
    let old = s.pd.reg_mr(64, Access::LOCAL_WRITE)?;
    word.write(0, &[0x11; 64])?;
    let sge = [Sge::new(&old, 0, 8)?];
    let Some(mut hook) = s.a.sim_hook() else {
        return skipped(NEEDS_HOOK);
    };
    // The remote address segment follows the 16-byte ctrl segment: addr (8, BE), rkey, reserved.
    hook.post_patched(
        &SendWr::atomic_fetch_add(1, &sge, remote(&word, 8), 1).signaled(),
        |w| {
            let a = u64::from_be_bytes(w[16..24].try_into().unwrap()) + 4;
            w[16..24].copy_from_slice(&a.to_be_bytes());
        },
    )?;
    let c = poll_one(&mut s.a)?;
    check_eq!((c.wr_id, c.status), (1, WcStatus::REM_INV_REQ_ERR));
    check!(
        contents(&word)? == vec![0x11; 64],
        "the remote word changed"
    );
    check!(
        contents(&old)?.iter().all(|&b| b == 0),
        "an old value was returned"
    );
    passed(vec![])
}

/// With CQ credits bypassed (hook), six signaled WRs into a CQ of four that
/// nobody polls: four CQEs are written, the fifth finds its slot not
/// released, so the CQ stops, raises one CQ error event, and writes nothing
/// more.
fn cq_overrun_stops_the_cq_and_raises_an_event(dev: &str) -> CaseResult {
    let mut s = setup_with(
        dev,
        QpConfig {
            max_send_wr: 16,
            max_recv_wr: 0,
            cq_depth: Some(4),
            ..QpConfig::default()
        },
    )?;
    let src = s.pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    let Some(mut hook) = s.a.sim_hook() else {
        return skipped(NEEDS_HOOK);
    };
    hook.ignore_cq_credits();
    let batch: Vec<SendWr> = (0..6)
        .map(|i| SendWr::rdma_write(i, &sge, remote(&dst, 0)).signaled())
        .collect();
    s.a.post_send(&batch)?;
    let deadline = Instant::now() + COMPLETION_TIMEOUT;
    loop {
        let (overrun, events) = s.a.sim_hook().map_or((false, 0), |h| h.cq_overrun());
        if overrun {
            check_eq!(events, 1, "CQ error events");
            break;
        }
        check!(
            Instant::now() < deadline,
            "no CQ overrun within {COMPLETION_TIMEOUT:?}"
        );
        std::thread::yield_now();
    }
    let got = poll_until(&mut s.a, 4)?;
    let ids: Vec<u64> = got.iter().map(|c| c.wr_id).collect();
    check_eq!(ids, vec![0, 1, 2, 3], "the CQEs that fit");
    nothing_completes(&mut s.a)?;
    let (_, events) = s.a.sim_hook().map_or((false, 0), |h| h.cq_overrun());
    check_eq!(events, 1, "CQ error events after polling");
    passed(vec![])
}

/// A fenced WRITE after a READ of the same bytes sees the READ done first;
/// a solicited SEND lands like any other.
fn fence_and_solicited(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let local = s.pd.reg_mr(4096, Access::LOCAL_WRITE)?;
    let far = s.pd.reg_mr(
        4096,
        Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
    )?;
    let data = pattern(4096, 5);
    far.write(0, &data)?;
    // READ far[0..4096] into local, then (fenced) WRITE local back to far[..]
    // at an offset: the WRITE must carry what the READ brought.
    let rd = [Sge::new(&local, 0, 2048)?];
    let wr = [Sge::new(&local, 0, 2048)?];
    s.a.post_send(&[
        SendWr::rdma_read(1, &rd, remote(&far, 0)),
        SendWr::rdma_write(2, &wr, remote(&far, 2048))
            .fence()
            .signaled(),
    ])?;
    let c = poll_one(&mut s.a)?;
    check_eq!((c.status, c.wr_id), (WcStatus::SUCCESS, 2));
    let got = contents(&far)?;
    check!(
        got[2048..] == data[..2048],
        "the fenced WRITE did not carry the READ's data"
    );
    let rbuf = s.pd.reg_mr(64, Access::LOCAL_WRITE)?;
    s.b.post_recv(&[RecvWr::new(3, &[Sge::new(&rbuf, 0, 64)?])])?;
    let sge = [Sge::new(&local, 0, 64)?];
    s.a.post_send(&[SendWr::send(4, &sge).solicited().signaled()])?;
    check_eq!(
        poll_one(&mut s.a)?.status,
        WcStatus::SUCCESS,
        "solicited SEND"
    );
    let r = poll_one(&mut s.b)?;
    check_eq!((r.status, r.wr_id, r.byte_len), (WcStatus::SUCCESS, 3, 64));
    passed(vec![])
}

/// What the send queue holds, for showing that a refused post wrote
/// nothing: ring bytes and doorbell record on the direct path; `None` on
/// the verbs path (the provider owns the ring).
fn ring_snapshot(qp: &Qp) -> Option<Vec<u8>> {
    qp.sq_snapshot()
}

/// Two QPs complete into one CQ sized by `CqSizing`: with every receive
/// queue and send queue filled before anything is polled, no post is
/// refused and the CQ never overruns; each completion carries the `qp_num`
/// of its QP; an error on one QP flushes only its own WRs into the CQ.
fn two_qps_share_one_cq(dev: &str) -> CaseResult {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig {
        max_send_wr: 32,
        max_recv_wr: 16,
        ..QpConfig::default()
    };
    let depth = CqSizing::new().qp(&cfg).qp(&cfg).depth()?;
    check_eq!(depth, 144, "CqSizing for two QPs of 32 + 16 WRs");
    let mut cq = pd.create_shared_cq(depth)?;
    check!(cq.depth() >= depth, "shared CQ of {} CQEs", cq.depth());
    let full = cq.depth();
    let qa = [cq.create_qp(&cfg)?, cq.create_qp(&cfg)?];
    let mut peers = [pd.create_qp(&cfg)?, pd.create_qp(&cfg)?];
    for (i, p) in peers.iter_mut().enumerate() {
        Qp::connect_loopback(cq.qp_mut(qa[i]), p)?;
    }
    let qpn = [cq.qp(qa[0]).qp_num(), cq.qp(qa[1]).qp_num()];
    check!(qpn[0] != qpn[1], "two QPs with one QPN {:#x}", qpn[0]);
    let mut wc = [Completion::default(); 1];
    check!(
        matches!(cq.qp_mut(qa[0]).poll(&mut wc), Err(Error::SharedCq { .. })),
        "polling a QP of a shared CQ on its own was not refused"
    );
    let src = pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let dst = pd.reg_mr(64 * 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let rbuf = pd.reg_mr(2 * 16 * 64, Access::LOCAL_WRITE)?;
    src.write(0, &pattern(64, 7))?;
    let sge = [Sge::new(&src, 0, 64)?];
    // wr_id: QP index in the high half, the WR's number in the low half.
    let id = |q: usize, i: usize| ((q as u64) << 32) | i as u64;
    let post_recvs = |cq: &mut SharedCq, q: usize| -> Result<(), Failure> {
        let sges: Vec<[Sge<'_>; 1]> = (0..16)
            .map(|i| Ok([Sge::new(&rbuf, (q * 16 + i) * 64, 64)?]))
            .collect::<Result<_, Error>>()?;
        let wrs: Vec<RecvWr<'_>> = (0..16).map(|i| RecvWr::new(id(q, i), &sges[i])).collect();
        cq.qp_mut(qa[q]).post_recv(&wrs)?;
        Ok(())
    };
    // Every queue of both QPs filled to its depth, nothing polled.
    for (q, &index) in qa.iter().enumerate() {
        post_recvs(&mut cq, q)?;
        let wrs: Vec<SendWr<'_>> = (0..32)
            .map(|i| {
                SendWr::rdma_write(
                    id(q, 100 + i),
                    &sge,
                    remote(&dst, ((q * 32 + i) * 64) as u64),
                )
                .signaled()
            })
            .collect();
        for batch in wrs.chunks(8) {
            cq.qp_mut(index).post_send(batch)?;
        }
    }
    check_eq!(
        cq.credits_free(),
        full - 96,
        "CQ credits with 96 WRs outstanding"
    );
    // Each peer SENDs 16 messages into its QP's receives.
    let psrc = pd.reg_mr(16, Access::LOCAL_WRITE)?;
    let psge = [Sge::new(&psrc, 0, 16)?];
    for (q, p) in peers.iter_mut().enumerate() {
        let sends: Vec<SendWr<'_>> = (0..16)
            .map(|i| SendWr::send_with_imm(i as u64, &psge, (q * 16 + i) as u32).signaled())
            .collect();
        p.post_send(&sends)?;
        for c in poll_until(p, 16)? {
            check_eq!(c.status, WcStatus::SUCCESS, "peer {q} SEND {}", c.wr_id);
        }
    }
    let got = poll_until(&mut cq, 96)?;
    let mut per = [(0, 0); 2];
    for c in &got {
        let q = (c.wr_id >> 32) as usize;
        check!(q < 2, "completion with a wr_id of no WR: {c:?}");
        check_eq!(c.status, WcStatus::SUCCESS, "{c:?}");
        check_eq!(c.qp_num, qpn[q], "qp_num of WR {:#x}", c.wr_id);
        if c.opcode == WcOpcode::RECV {
            check_eq!(
                c.imm,
                Some((q * 16 + (c.wr_id & 0xffff_ffff) as usize) as u32),
                "{c:?}"
            );
            per[q].1 += 1;
        } else {
            check_eq!(c.opcode, WcOpcode::RDMA_WRITE, "{c:?}");
            per[q].0 += 1;
        }
    }
    check_eq!(per, [(32, 16), (32, 16)], "(writes, receives) per QP");
    let mut last = vec![0u8; 64];
    dst.read(63 * 64, &mut last)?;
    check_eq!(last, pattern(64, 7), "the last write's bytes");
    check_eq!(cq.credits_free(), full, "CQ credits after every completion");
    // An error on QP 0 flushes its receives only.
    post_recvs(&mut cq, 0)?;
    post_recvs(&mut cq, 1)?;
    check!(
        matches!(
            cq.qp_mut(qa[0]).modify(QpState::Reset, &QpAttr::default()),
            Err(Error::Invalid(_))
        ),
        "RESET with 16 receives outstanding on a shared CQ was not refused"
    );
    cq.qp_mut(qa[0]).modify(QpState::Err, &QpAttr::default())?;
    let flushed = poll_until(&mut cq, 16)?;
    for c in &flushed {
        check_eq!(
            (c.status, c.qp_num, c.wr_id >> 32),
            (WcStatus::WR_FLUSH_ERR, qpn[0], 0),
            "flushed receive {:#x}",
            c.wr_id
        );
    }
    let mut ids: Vec<u64> = flushed.iter().map(|c| c.wr_id).collect();
    ids.sort_unstable();
    check_eq!(
        ids,
        (0..16).map(|i| id(0, i)).collect::<Vec<_>>(),
        "flushed wr_ids"
    );
    peers[1].post_send(&[SendWr::send_with_imm(99, &psge, 99).signaled()])?;
    check_eq!(poll_one(&mut peers[1])?.status, WcStatus::SUCCESS);
    let c = poll_until(&mut cq, 1)?[0];
    check_eq!(
        (c.status, c.qp_num, c.wr_id, c.imm),
        (WcStatus::SUCCESS, qpn[1], id(1, 0), Some(99)),
        "QP 1 after QP 0's error"
    );
    std::thread::sleep(Duration::from_millis(50));
    let n = cq.poll(&mut wc)?;
    check_eq!(n, 0, "completions beyond the flush: {:?}", &wc[..n]);
    cq.qp_mut(qa[0])
        .modify(QpState::Reset, &QpAttr::default())?;
    check_eq!(
        cq.credits_free(),
        full - 15,
        "CQ credits: QP 1 holds 15 receives"
    );
    // Unsignaled WRITEs that completed make no CQE, so they stay
    // outstanding: Qp::modify refuses RESET, SharedCq::reset_qp drains the
    // CQ (keeping QP 1's completion for the next poll) and frees them.
    peers[0].modify(QpState::Reset, &QpAttr::default())?;
    Qp::connect_loopback(cq.qp_mut(qa[0]), &mut peers[0])?;
    let marks: Vec<Vec<u8>> = (0..3).map(|i| pattern(64, 20 + i as u8)).collect();
    let msrc = pd.reg_mr(3 * 64, Access::LOCAL_WRITE)?;
    for (i, m) in marks.iter().enumerate() {
        msrc.write(i * 64, m)?;
    }
    let msges: Vec<[Sge<'_>; 1]> = (0..3)
        .map(|i| Ok([Sge::new(&msrc, i * 64, 64)?]))
        .collect::<Result<_, Error>>()?;
    for (i, g) in msges.iter().enumerate() {
        cq.qp_mut(qa[0]).post_send(&[SendWr::rdma_write(
            id(0, 200 + i),
            g,
            remote(&dst, (i * 64) as u64),
        )])?;
    }
    let deadline = Instant::now() + COMPLETION_TIMEOUT;
    let mut landed = vec![0u8; 64];
    loop {
        dst.read(2 * 64, &mut landed)?;
        if landed == marks[2] {
            break;
        }
        check!(
            Instant::now() < deadline,
            "the unsignaled WRITEs did not land"
        );
        std::thread::yield_now();
    }
    peers[1].post_send(&[SendWr::send_with_imm(98, &psge, 98).signaled()])?;
    check_eq!(poll_one(&mut peers[1])?.status, WcStatus::SUCCESS);
    check!(
        matches!(
            cq.qp_mut(qa[0]).modify(QpState::Reset, &QpAttr::default()),
            Err(Error::Invalid(_))
        ),
        "RESET with 3 unsignaled WRITEs outstanding on a shared CQ was not refused"
    );
    // 16 receives too, flushed by ERR: reset_qp drops their CQEs.
    post_recvs(&mut cq, 0)?;
    cq.qp_mut(qa[0]).modify(QpState::Err, &QpAttr::default())?;
    cq.reset_qp(qa[0])?;
    check_eq!(cq.qp(qa[0]).state(), QpState::Reset);
    let c = poll_until(&mut cq, 1)?[0];
    check_eq!(
        (c.status, c.qp_num, c.wr_id, c.imm),
        (WcStatus::SUCCESS, qpn[1], id(1, 1), Some(98)),
        "QP 1's completion across QP 0's reset"
    );
    check_eq!(
        cq.credits_free(),
        full - 14,
        "CQ credits after reset_qp: QP 1 holds 14 receives"
    );
    std::thread::sleep(Duration::from_millis(50));
    let n = cq.poll(&mut wc)?;
    check_eq!(n, 0, "completions after reset_qp: {:?}", &wc[..n]);
    // Reconnected after reset_qp, then removed with 16 receives
    // outstanding: its credits come back, the other QP keeps its index
    // lookup and its completions.
    peers[0].modify(QpState::Reset, &QpAttr::default())?;
    Qp::connect_loopback(cq.qp_mut(qa[0]), &mut peers[0])?;
    post_recvs(&mut cq, 0)?;
    cq.remove_qp(qa[0])?;
    check_eq!(cq.len(), 1);
    check_eq!(
        cq.index_of(qpn[1]),
        Some(0),
        "QP 1's index after the removal"
    );
    check_eq!(cq.index_of(qpn[0]), None, "the removed QP's index");
    check_eq!(
        cq.credits_free(),
        full - 14,
        "CQ credits after remove_qp: QP 1 holds 14 receives"
    );
    peers[1].post_send(&[SendWr::send_with_imm(97, &psge, 97).signaled()])?;
    check_eq!(poll_one(&mut peers[1])?.status, WcStatus::SUCCESS);
    let c = poll_until(&mut cq, 1)?[0];
    check_eq!(
        (c.status, c.qp_num, c.wr_id, c.imm),
        (WcStatus::SUCCESS, qpn[1], id(1, 2), Some(97)),
        "QP 1 after QP 0 was removed"
    );
    // A QP swapped in from outside is not this CQ's to reset.
    std::mem::swap(cq.qp_mut(0), &mut peers[1]);
    let r = cq.reset_qp(0);
    std::mem::swap(cq.qp_mut(0), &mut peers[1]);
    check!(
        matches!(r, Err(Error::Invalid(_))),
        "reset_qp of a swapped-in QP: {r:?}"
    );
    if let Some(overrun) = cq.sim_overrun() {
        check!(!overrun, "the sim's shared CQ overran");
    }
    passed(vec![format!(
        "CQ of {full} CQEs for 2 x (32 + 16) WRs; 96 completions with their QP's qp_num; QP 0's 16 flushes only; reset_qp with 3 unsignaled WRITEs out; remove_qp"
    )])
}

/// `Qp::wait` in each `CompletionMode`: 1,000 rounds of one signaled WRITE
/// each; a wait with nothing outstanding returns 0 after its timeout; the
/// same through a `SharedCq` in event mode.
fn completion_modes_wait_for_each_completion(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let src = s.pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    let mut wc = [Completion::default(); 4];
    let modes = [
        CompletionMode::Busy,
        CompletionMode::Events,
        CompletionMode::Adaptive { spins: 64 },
    ];
    for mode in modes {
        for i in 0..1_000u64 {
            s.a.post_send(&[SendWr::rdma_write(i, &sge, remote(&dst, 0)).signaled()])?;
            let n = s.a.wait(&mut wc, mode, Duration::from_secs(1))?;
            check_eq!(n, 1, "{mode:?} round {i}: completions within 1 s");
            check_eq!(
                (wc[0].status, wc[0].wr_id),
                (WcStatus::SUCCESS, i),
                "{mode:?} round {i}"
            );
        }
        let t = Instant::now();
        let n = s.a.wait(&mut wc, mode, Duration::from_millis(50))?;
        check_eq!(n, 0, "{mode:?}: a completion with nothing outstanding");
        check!(
            t.elapsed() >= Duration::from_millis(50),
            "{mode:?}: the wait returned after {:?}, before its 50 ms timeout",
            t.elapsed()
        );
    }
    check!(
        matches!(
            s.a.wait(&mut [], CompletionMode::Busy, Duration::ZERO),
            Err(Error::Invalid(_))
        ),
        "a wait with no room for a completion was not refused"
    );
    let cfg = QpConfig::default();
    let mut cq = s.pd.create_shared_cq(CqSizing::new().qp(&cfg).depth()?)?;
    let q = cq.create_qp(&cfg)?;
    let mut peer = s.pd.create_qp(&cfg)?;
    Qp::connect_loopback(cq.qp_mut(q), &mut peer)?;
    for i in 0..1_000u64 {
        cq.qp_mut(q)
            .post_send(&[SendWr::rdma_write(i, &sge, remote(&dst, 8)).signaled()])?;
        let n = cq.wait(&mut wc, CompletionMode::Events, Duration::from_secs(1))?;
        check_eq!(n, 1, "shared CQ round {i}: completions within 1 s");
        check_eq!(wc[0].wr_id, i, "shared CQ round {i}");
    }
    passed(vec![
        "busy, events, adaptive: 1,000 rounds each; shared CQ events: 1,000".into(),
    ])
}

macro_rules! case {
    ($f:ident) => {
        Case {
            name: stringify!($f),
            run: CaseFn::OneSided($f),
        }
    };
}

/// Every case, in the order the CLI runs them.
pub fn cases() -> &'static [Case] {
    static ALL: std::sync::OnceLock<Vec<Case>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        let mut v = ONE_SIDED.to_vec();
        v.extend(two_host::two_host_cases().iter().map(|&(name, f)| Case {
            name,
            run: CaseFn::TwoSided(f),
        }));
        v
    })
}

const ONE_SIDED: &[Case] = &[
    case!(write_beyond_the_remote_mr_is_remote_access_error),
    case!(inline_gather_and_unsignaled_writes_wrap_the_ring),
    case!(bad_input_is_refused_and_posts_nothing),
    case!(latency_benchmarks_run),
    case!(qp_outlives_its_context_handle),
    case!(memory_of_another_protection_domain_is_refused),
    case!(zero_length_write_checks_no_rkey),
    case!(send_queue_full_refuses_the_whole_batch_until_completions_are_polled),
    case!(rdma_read_lands_byte_for_byte_and_needs_remote_read),
    case!(atomics_update_the_remote_word_and_return_the_old_value),
    case!(the_16_bit_wqe_index_wraps),
    case!(unsignaled_streams_never_fill_the_send_queue),
    case!(bandwidth_benchmarks_run),
    case!(one_to_max_sges_gather_and_scatter),
    case!(inline_at_the_limit_and_one_over),
    case!(post_before_rts_is_refused),
    case!(rnr_retry_finite_and_forever),
    case!(fence_and_solicited),
    case!(completion_events_wake_the_waiter),
    case!(modify_checks_attributes_by_name),
    case!(short_rnr_timer_fails_fast),
    case!(connect_checks_first_and_optional_attributes_apply),
    case!(unsignaled_streams_never_exhaust_cq_credits),
    case!(refused_receive_batches_post_nothing),
    case!(out_of_range_qp_configs_are_refused),
    case!(memory_pool_serves_without_registering),
    case!(two_qps_share_one_cq),
    case!(completion_modes_wait_for_each_completion),
    case!(cq_credits_bound_what_is_outstanding),
    case!(malformed_wqes_are_local_qp_operation_errors),
    case!(misaligned_atomic_is_a_remote_invalid_request),
    case!(cq_overrun_stops_the_cq_and_raises_an_event),
];
