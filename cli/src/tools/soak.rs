//! `rdma-direct soak`: cycles of "register, RDMA WRITE into it, drop it"
//! on one PD, with up to `--depth` WRITEs in flight (each MR is dropped
//! right after its WRITE is posted, so it is deregistered only once that
//! WRITE's completion has been polled), while the target QP keeps 16
//! receives posted into other memory, as a server does. At the end resident memory must be
//! at most what it was after the first 1,000 cycles plus 16 MiB, and the
//! live MRs at most the in-flight depth; it prints both figures and exits
//! 1 otherwise.

use rdma_direct::{Access, Completion, Context, QpConfig, RemoteAddr, SendWr, Sge};

#[derive(clap::Args)]
pub struct SoakArgs {
    /// Device (`sim`, or an ibverbs device such as rxe0).
    #[arg(short = 'd', long = "ib-dev", default_value = "sim")]
    pub device: String,
    /// Cycles (default: 100000 on the sim, 10000 elsewhere).
    #[arg(short = 'n', long)]
    pub cycles: Option<u64>,
    /// Bytes per MR.
    #[arg(short = 's', long, default_value_t = 65536)]
    pub size: usize,
    /// WRITEs in flight at most (each names a dropped MR until polled).
    #[arg(long, default_value_t = 16)]
    pub depth: u32,
}

/// Resident memory in bytes (`/proc/self/statm`'s second field, in pages).
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// The kernel's count of MRs on `dev` (`rdma resource show mr`), where the
/// `rdma` tool is present.
fn kernel_mrs(dev: &str) -> Option<usize> {
    let out = std::process::Command::new("rdma")
        .args(["resource", "show", "mr", "dev", dev])
        .output()
        .ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains("mrn"))
            .count()
    })
}

pub fn run(a: &SoakArgs) -> Result<bool, rdma_direct::Error> {
    let sim = a.device == "sim";
    let cycles = a.cycles.unwrap_or(if sim { 100_000 } else { 10_000 });
    let bad = |m: String| Err(rdma_direct::Error::Invalid(m));
    if a.depth == 0 || a.depth > 1024 {
        return bad(format!("--depth {} must be 1..=1024", a.depth));
    }
    if a.size == 0 || a.size > 1 << 30 {
        return bad(format!("--size {} must be 1..=2^30 bytes", a.size));
    }
    if a.size as u64 * a.depth as u64 > 4 << 30 {
        return bad(format!(
            "--size {} x --depth {} would hold {} GiB in flight: at most 4 GiB",
            a.size,
            a.depth,
            (a.size as u64 * a.depth as u64) >> 30
        ));
    }
    if cycles < 1000 {
        return bad(format!(
            "--cycles {cycles}: at least 1000 (the memory bound compares with the figure after 1,000 cycles)"
        ));
    }
    let ctx = Context::open(&a.device)?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig {
        max_send_wr: a.depth,
        max_recv_wr: 16,
        ..QpConfig::default()
    };
    let (mut qa, mut qb) = pd.create_connected_pair(&cfg)?;
    // The target side keeps 16 receives posted for the whole run, as a
    // server does (into memory of its own): they must hold no dropped MR.
    let rbufs = pd.alloc_mr(16 * 64, Access::LOCAL_WRITE)?;
    for i in 0..16 {
        let s = [Sge::new(&rbufs, i * 64, 64)?];
        qb.post_recv(&[rdma_direct::RecvWr::new(i as u64, &s)])?;
    }
    let src = pd.alloc_mr(a.size, Access::LOCAL_WRITE)?;
    let sge = [Sge::new(&src, 0, a.size as u32)?];
    let fixed = pd.live_mrs();
    let mut wc = vec![Completion::default(); a.depth as usize];
    let (mut in_flight, mut peak, mut baseline) = (0u32, 0u64, None);
    let start = std::time::Instant::now();
    for i in 0..cycles {
        while in_flight == a.depth {
            let n = qa.poll(&mut wc)?;
            for c in &wc[..n] {
                if !c.status.is_ok() {
                    return Err((*c).into());
                }
            }
            in_flight -= n as u32;
        }
        let mr = pd.reg_mr(
            vec![0u8; a.size],
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )?;
        let to = RemoteAddr {
            addr: mr.addr(),
            rkey: mr.rkey(),
        };
        qa.post_send(&[SendWr::rdma_write(i, &sge, to).signaled()])?;
        drop(mr);
        in_flight += 1;
        peak = peak.max(pd.live_mrs() - fixed);
        if i + 1 == 1000 {
            baseline = Some(rss());
        }
    }
    while in_flight > 0 {
        let n = qa.poll(&mut wc)?;
        in_flight -= n as u32;
    }
    let waiting_before = pd.live_mrs() - fixed;
    pd.reclaim();
    let (base, end) = (baseline.unwrap_or(0), rss());
    let live = pd.live_mrs() - fixed;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "soak on {}: {cycles} cycles of register {} B, WRITE, drop (depth {}) in {:.1} s",
        a.device,
        a.size,
        a.depth,
        start.elapsed().as_secs_f64()
    );
    println!(
        "resident memory: {:.1} MiB after 1000 cycles, {:.1} MiB at the end (limit {:.1} MiB: the first figure + 16 MiB)",
        mib(base),
        mib(end),
        mib(base + (16 << 20))
    );
    println!(
        "live MRs (dropped, not yet deregistered): at most {peak} during the run (limit {}), \
         {waiting_before} after the last poll, {live} after Pd::reclaim",
        a.depth
    );
    if !sim {
        match kernel_mrs(&a.device) {
            Some(k) => println!(
                "kernel's MRs on {} (rdma resource show mr): {k} (the soak's source and receive MRs included)",
                a.device
            ),
            None => println!("kernel's MRs: `rdma resource show mr` did not run here"),
        }
    }
    let ok = end <= base + (16 << 20) && peak <= a.depth as u64 && live == 0;
    println!("soak: {}", if ok { "ok" } else { "FAILED" });
    Ok(ok)
}
