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
