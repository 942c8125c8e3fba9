//! `bench reg_mr`: the cost of memory registration, against the pool.

use super::*;

/// One row of `bench reg_mr`: the cost of registering and deregistering a
/// buffer of `bytes`, medians over the repetitions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RegReport {
    pub bytes: usize,
    pub reps: u32,
    /// Mapping and registering (`Pd` registration of fresh anonymous memory;
    /// on verbs `ibv_reg_mr` pins and faults in every page), microseconds.
    pub reg_us: f64,
    /// Deregistering and unmapping (the PD holding it dropped), microseconds.
    pub dereg_us: f64,
}

impl RegReport {
    /// Registration time per MiB, microseconds.
    pub fn reg_us_per_mib(&self) -> f64 {
        self.reg_us / (self.bytes as f64 / (1u64 << 20) as f64)
    }
    /// Deregistration time per MiB, microseconds.
    pub fn dereg_us_per_mib(&self) -> f64 {
        self.dereg_us / (self.bytes as f64 / (1u64 << 20) as f64)
    }
}

/// `bench reg_mr`: for each size, `reps` times, maps fresh anonymous memory
/// and registers it in a fresh PD (timed), then drops the PD, which
/// deregisters and unmaps it (timed). Medians.
///
/// Errors: sizes of 0 or not a multiple of 4096, `reps` 0; the device's.
pub fn run_reg_mr(
    device: &str,
    backend: rdma_direct::Backend,
    sizes: &[usize],
    reps: u32,
) -> Result<Vec<RegReport>> {
    if reps == 0 {
        return Err(Error::Invalid(
            "reg_mr needs at least one repetition".into(),
        ));
    }
    if let Some(bad) = sizes.iter().find(|&&s| s == 0 || s % 4096 != 0) {
        return Err(Error::Invalid(format!(
            "reg_mr size {bad} must be a positive multiple of 4096"
        )));
    }
    let ctx = Context::open_with(device, backend)?;
    let mut out = Vec::with_capacity(sizes.len());
    for &bytes in sizes {
        let (mut reg, mut dereg) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            let pd = ctx.alloc_pd()?;
            let t = Instant::now();
            let (mr, _) = pd.alloc_mapped_mr(bytes, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
            reg.push(t.elapsed().as_secs_f64() * 1e6);
            drop(mr);
            let t = Instant::now();
            drop(pd);
            dereg.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        };
        out.push(RegReport {
            bytes,
            reps,
            reg_us: median(&mut reg),
            dereg_us: median(&mut dereg),
        });
    }
    Ok(out)
}

/// Nanoseconds per allocate-and-free of a 4 KiB buffer from a pool of one
/// 2 MiB chunk on `device`, over `iters` cycles (no registration happens).
pub fn pool_alloc_ns(device: &str, backend: rdma_direct::Backend, iters: u32) -> Result<f64> {
    use rdma_direct::pool::{Pool, PoolConfig};
    let ctx = Context::open_with(device, backend)?;
    let pd = ctx.alloc_pd()?;
    let pool = Pool::new(&pd, &PoolConfig::default())?;
    let t = Instant::now();
    for _ in 0..iters {
        std::hint::black_box(pool.alloc()?);
    }
    Ok(t.elapsed().as_nanos() as f64 / iters.max(1) as f64)
}

/// One row of `bench reg_mr`'s memory-window part: the cost of granting
/// and revoking a window over a 64 KiB MR, each measured as post +
/// completion (signaled, polled by spinning), medians over the cycles.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MwReport {
    /// What is measured: `type 1 (bind_mw / unbind_mw)` or
    /// `type 2 (BIND_MW / LOCAL_INV WRs)`.
    pub what: &'static str,
    pub reps: u32,
    /// The bind: `Qp::bind_mw` (type 1) or a bind WR through `post_send`
    /// (type 2), until its completion is polled, microseconds.
    pub bind_us: f64,
    /// The revocation: `Qp::unbind_mw` (type 1, a zero-length bind) or a
    /// LOCAL_INV WR (type 2), until its completion is polled, microseconds.
    pub revoke_us: f64,
}

/// Polls `qp` until one completion comes, which must be `wr_id`'s and
/// successful ([`WAIT_LIMIT`] at most).
fn completes(qp: &mut Qp, wr_id: u64, what: &str) -> Result<()> {
    let mut wc = [Completion::default(); 1];
    let deadline = Instant::now() + WAIT_LIMIT;
    loop {
        if qp.poll(&mut wc)? == 1 {
            let c = wc[0];
            if c.wr_id != wr_id || !c.status.is_ok() {
                return Err(Error::Invalid(format!("{what}: completion {c:?}")));
            }
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::Invalid(format!("{what}: no completion")));
        }
        std::hint::spin_loop();
    }
}

/// Whether `e` is the device's refusal of memory windows.
fn no_windows(e: &Error) -> bool {
    matches!(
        e,
        Error::Unsupported {
            feature: rdma_direct::Feature::MemoryWindows,
            ..
        }
    )
}

/// `bench reg_mr`'s window rows: on a connected loopback pair made with
/// `QpConfig::memory_windows`, over a 64 KiB MR with `MW_BIND`, `reps`
/// cycles of a type-1 bind and unbind (`Qp::bind_mw`, `Qp::unbind_mw`)
/// and of a type-2 bind WR and LOCAL_INV WR (`post_send`), each timed
/// from the post to its completion polled. Medians.
///
/// Returns `Ok(Err(why))` where the device has no windows
/// (`Error::Unsupported`), so the MR rows still print. Errors: `reps` 0;
/// the device's; a bind or invalidation that completes in error.
pub fn run_mw_costs(
    device: &str,
    backend: rdma_direct::Backend,
    reps: u32,
) -> Result<std::result::Result<Vec<MwReport>, String>> {
    use rdma_direct::{MwBind, MwType, SendFlags};
    if reps == 0 {
        return Err(Error::Invalid(
            "the window rows need at least one cycle".into(),
        ));
    }
    let ctx = Context::open_with(device, backend)?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig {
        memory_windows: true,
        ..QpConfig::default()
    };
    let refused = |e: Error| -> Result<std::result::Result<Vec<MwReport>, String>> {
        if no_windows(&e) {
            Ok(Err(e.to_string()))
        } else {
            Err(e)
        }
    };
    let (mut a, _b) = match pd.create_connected_pair(&cfg) {
        Ok(p) => p,
        Err(e) => return refused(e),
    };
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::MW_BIND;
    let mr = pd.alloc_mr(64 << 10, access)?;
    let bind = MwBind::new(&mr, 0, 64 << 10, Access::REMOTE_WRITE | Access::REMOTE_READ);
    let (one, two) = match (pd.alloc_mw(MwType::One), pd.alloc_mw(MwType::Two)) {
        (Ok(one), Ok(two)) => (one, two),
        (Err(e), _) | (_, Err(e)) => return refused(e),
    };
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let us = |t: Instant| t.elapsed().as_secs_f64() * 1e6;
    let (mut b1, mut u1, mut b2, mut u2) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..reps as u64 {
        let t = Instant::now();
        if let Err(e) = a.bind_mw(&one, bind, 4 * i, SendFlags::SIGNALED) {
            return refused(e);
        }
        completes(&mut a, 4 * i, "a type-1 bind")?;
        b1.push(us(t));
        let t = Instant::now();
        a.unbind_mw(&one, 4 * i + 1, SendFlags::SIGNALED)?;
        completes(&mut a, 4 * i + 1, "a type-1 unbind")?;
        u1.push(us(t));
        let t = Instant::now();
        if let Err(e) = a.post_send(&[SendWr::bind_mw(4 * i + 2, &two, bind).signaled()]) {
            return refused(e);
        }
        completes(&mut a, 4 * i + 2, "a type-2 bind WR")?;
        b2.push(us(t));
        let t = Instant::now();
        a.post_send(&[SendWr::local_inv(4 * i + 3, two.rkey()).signaled()])?;
        completes(&mut a, 4 * i + 3, "a LOCAL_INV WR")?;
        u2.push(us(t));
    }
    Ok(Ok(vec![
        MwReport {
            what: "type 1 (bind_mw / unbind_mw)",
            reps,
            bind_us: median(&mut b1),
            revoke_us: median(&mut u1),
        },
        MwReport {
            what: "type 2 (BIND_MW / LOCAL_INV WRs)",
            reps,
            bind_us: median(&mut b2),
            revoke_us: median(&mut u2),
        },
    ]))
}
