//! `rdma-direct bench`: the flags checked, the settings built, each size run
//! (one process or two hosts), and the table and `--out_json` written.

use crate::args::{BenchArgs, Test};
use crate::tools::args::{AtomicArg, ConnArg};
use crate::tools::bench::{
    self, BwConfig, BwTest, LatConfig, LatTest, BW_HEADER, CPU_HEADER, LAT_HEADER, RESULT_LINE,
};
use crate::tools::output::OutputFile;
use crate::tools::progress;

/// MB/sec (2^20 bytes) to Gb/sec (10^9 bits), as perftest's --report_gbits.
const GBITS_PER_MB: f64 = (1u64 << 20) as f64 * 8.0 / 1e9;

/// `-s` and `-n` checked against their ranges, each message naming the
/// flag: the perftest tests take 1..=[`bench::MAX_SIZE`] bytes and
/// [`bench::MIN_ITERS`]..=4294967295 iterations; reg_mr takes any positive
/// size (bytes; `run_reg_mr` wants a multiple of 4096) and
/// 1..=4294967295 repetitions.
///
/// Errors: [`rdma_direct::Error::Invalid`] for a value out of range.
fn size_and_iters(a: &BenchArgs) -> rdma_direct::Result<(Option<u64>, Option<u32>)> {
    use rdma_direct::Error;
    let reg = matches!(a.test, Test::RegMr);
    let size = match a.size {
        None => None,
        Some(s) if s >= 1 && (reg || s <= i64::from(bench::MAX_SIZE)) => Some(s as u64),
        Some(s) if reg => {
            return Err(Error::Invalid(format!(
                "-s (--size): reg_mr takes a positive size in bytes (a multiple of 4096), not {s}"
            )))
        }
        Some(s) => {
            return Err(Error::Invalid(format!(
                "-s (--size): message size {s} is not in 1..={} bytes",
                bench::MAX_SIZE
            )))
        }
    };
    let min_iters = if reg { 1 } else { bench::MIN_ITERS };
    let iters = match a.iters {
        None => None,
        Some(n) => match u32::try_from(n) {
            Ok(n) if n >= min_iters => Some(n),
            _ => {
                return Err(Error::Invalid(format!(
                "-n (--iters) takes a count of at least {min_iters} ({min_iters}..={}), not {n}",
                u32::MAX
            )))
            }
        },
    };
    Ok((size, iters))
}

pub fn run_bench(a: BenchArgs) -> rdma_direct::Result<()> {
    use rdma_direct::Error;
    let (size, iters) = size_and_iters(&a)?;
    if matches!(a.test, Test::RegMr) {
        return run_reg_mr(&a, size, iters);
    }
    let size = size.map(|s| s as u32); // at most MAX_SIZE
    let atomic = matches!(a.test, Test::Atomic | Test::AtomicBw);
    if atomic && size.is_some_and(|s| s != 8) {
        return Err(Error::Invalid(
            "atomics always move 8 bytes; -s does not apply".into(),
        ));
    }
    if atomic && a.all {
        return Err(Error::Invalid(
            "atomics always move 8 bytes; -a does not apply".into(),
        ));
    }

    if !atomic && a.atomic_type.is_some() {
        return Err(Error::Invalid(
            "-A applies to atomic_lat and atomic_bw only".into(),
        ));
    }
    let latency = matches!(a.test, Test::Write | Test::Send | Test::Read | Test::Atomic);
    for (given, flag) in [
        (a.tx_depth.is_some(), "-t"),
        (a.cq_mod.is_some(), "-Q"),
        (a.post_list.is_some(), "-l"),
        (a.qps.is_some(), "-q"),
        (a.report_gbits, "--report_gbits"),
    ] {
        if latency && given {
            return Err(Error::Invalid(format!(
                "{flag} applies to the bandwidth tests (a latency test keeps one WR in flight)"
            )));
        }
    }
    let tx_depth = a.tx_depth.unwrap_or(128);
    let post_list = a.post_list.unwrap_or(1);
    if post_list > tx_depth {
        return Err(Error::Invalid(format!(
            "-l {post_list} is more than -t {tx_depth}: a post list must fit the send queue"
        )));
    }
    let dc = matches!(a.connection, ConnArg::Dc);
    // perftest's -c DC: --use-srq implied, -R refused, the device mlx5's
    // direct path (the sim, ConnectX).
    if dc {
        bench::check_dc(
            a.rdma_cm,
            &a.device,
            rdma_direct::Context::open_with(&a.device, a.backend.into())?.data_path(),
        )?;
    }
    let inline_size = a.inline_size.unwrap_or(if dc {
        bench::DC_INLINE_DEFAULT
    } else {
        bench::INLINE_DEFAULT
    });
    if inline_size > bench::DIRECT_MAX_INLINE
        && rdma_direct::Context::open_with(&a.device, a.backend.into())?.data_path()
            == rdma_direct::DataPath::Direct
    {
        return Err(Error::Invalid(format!(
            "-I (--inline_size) {}: the direct path on {} takes 0..={} inline bytes",
            inline_size,
            a.device,
            bench::DIRECT_MAX_INLINE
        )));
    }
    let json_out = if a.out_json {
        Some(OutputFile::open(&a.out_json_file)?)
    } else {
        None
    };
    let lat = match a.test {
        Test::Write => Some(LatTest::Write),
        Test::Send => Some(LatTest::Send),
        Test::Read => Some(LatTest::Read),
        Test::Atomic => Some(LatTest::Atomic),
        _ => None,
    };
    let bw_test = match a.test {
        Test::WriteBw => BwTest::Write,
        Test::ReadBw => BwTest::Read,
        Test::SendBw => BwTest::Send,
        _ => BwTest::Atomic,
    };
    let any = match lat {
        Some(t) => bench::AnyTest::Lat(t),
        None => bench::AnyTest::Bw(bw_test),
    };
    let bw_defaults = BwConfig::default();
    let base = LatConfig {
        device: a.device.clone(),
        size: size.unwrap_or(if lat.is_some() {
            2
        } else if matches!(a.connection, ConnArg::Ud) {
            // A UD message is at most the port's MTU: 1024 is every RoCE
            // port's least (perftest lowers its default to the MTU).
            1024
        } else {
            bw_defaults.lat.size
        }),
        iters: iters.unwrap_or(if lat.is_some() {
            1000
        } else {
            bw_defaults.lat.iters
        }),
        inline_size,
        port: a.port,
        gid_index: a.gid_index,
        backend: a.backend.into(),
        events: a.events || a.adaptive.is_some(),
        spins: a.adaptive.unwrap_or(0),
        async_wait: a.async_wait,
        atomic: match a.atomic_type {
            None | Some(AtomicArg::FetchAndAdd) => bench::AtomicKind::FetchAndAdd,
            Some(AtomicArg::CmpAndSwap) => bench::AtomicKind::CmpAndSwap,
            Some(AtomicArg::MaskedCmpAndSwap) => bench::AtomicKind::MaskedCmpAndSwap,
            Some(AtomicArg::MaskedFetchAndAdd) => bench::AtomicKind::MaskedFetchAndAdd,
        },
        rdma_cm: a.rdma_cm,
        duration: a.duration.map(|d| std::time::Duration::from_secs(d.into())),
        qp_type: a.connection.into(),
        use_srq: a.use_srq || dc,
        cqe_comp: a.cqe_comp,
        inline_recv: match a.inline_recv {
            None => rdma_direct::InlineRecv::Off,
            Some(64) => rdma_direct::InlineRecv::Up64,
            Some(_) => rdma_direct::InlineRecv::Up32,
        },
    };
    let test_name = match a.test {
        Test::Write => "write_lat",
        Test::Send => "send_lat",
        Test::Read => "read_lat",
        Test::Atomic => "atomic_lat",
        Test::WriteBw => "write_bw",
        Test::ReadBw => "read_bw",
        Test::SendBw => "send_bw",
        Test::AtomicBw => "atomic_bw",
        Test::RegMr => "reg_mr",
    };
    bench::check_transport(test_name, base.qp_type, base.use_srq)?;
    let role = match (&a.host, a.server) {
        (Some(_), true) => {
            return Err(Error::Invalid(
                "give a host (client) or --server, not both".into(),
            ))
        }
        (Some(h), false) => Some(bench::Role::Client {
            host: h.clone(),
            port: a.tcp_port,
        }),
        // Bound first: a port in use is refused before anything else.
        (None, true) => Some(bench::Role::Server {
            listener: std::sync::Arc::new(super::listen(a.tcp_port)?),
        }),
        (None, false) => None,
    };
    if a.rdma_cm && role.is_none() {
        return Err(Error::Invalid(
            "-R (rdma_cm) connects two hosts: give --server or the server's address".into(),
        ));
    }
    if role.is_some() && base.qp_type != rdma_direct::QpType::Rc && a.rdma_cm {
        return Err(Error::Invalid(format!(
            "-c {} with -R: the two-host benchmarks connect RC QPs through rdma_cm; connect UC and UD through the TCP exchange (no -R)",
            base.qp_type.name()
        )));
    }
    if let Some(role) = &role {
        // The device is checked before anything is said about waiting.
        if base.device == rdma_direct::SIM_DEVICE {
            return Err(Error::Invalid(
                "the sim is one process's device: run both sides in one process (no --server, no host)"
                    .into(),
            ));
        }
        drop(rdma_direct::Context::open_with(&base.device, base.backend)?);
        match role {
            bench::Role::Server { listener } => {
                eprintln!(
                    "rdma-direct: waiting for a client on TCP port {}",
                    listener.port()
                )
            }
            bench::Role::Client { host, port } => {
                eprintln!("rdma-direct: connecting to {host}:{port} (retrying for up to 60 s)")
            }
        }
    }
    let sizes: Vec<u32> = if a.all {
        (1..=23).map(|k| 1u32 << k).collect()
    } else if atomic {
        vec![8]
    } else {
        vec![base.size]
    };
    let title = match (any, base.atomic) {
        (_, bench::AtomicKind::FetchAndAdd) => any.title(),
        (bench::AnyTest::Lat(LatTest::Atomic), k) => match k {
            bench::AtomicKind::CmpAndSwap => "Atomic CMP_AND_SWAP Latency Test",
            bench::AtomicKind::MaskedCmpAndSwap => "Atomic MASKED_CMP_AND_SWAP Latency Test",
            _ => "Atomic MASKED_FETCH_AND_ADD Latency Test",
        },
        (bench::AnyTest::Bw(BwTest::Atomic), k) => match k {
            bench::AtomicKind::CmpAndSwap => "Atomic CMP_AND_SWAP BW Test",
            bench::AtomicKind::MaskedCmpAndSwap => "Atomic MASKED_CMP_AND_SWAP BW Test",
            _ => "Atomic MASKED_FETCH_AND_ADD BW Test",
        },
        _ => any.title(),
    };
    let gbits = |r: &bench::BwReport| bench::BwReport {
        bw_peak: r.bw_peak * GBITS_PER_MB,
        bw_average: r.bw_average * GBITS_PER_MB,
        ..*r
    };
    // One size: the spinner says a run is on; a bar of 0/1 would say it again.
    let bar = if sizes.len() > 1 {
        progress::bar(sizes.len() as u64, "sizes")
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut json_rows = Vec::new();
    for (k, &size) in sizes.iter().enumerate() {
        let cfg = BwConfig {
            lat: LatConfig {
                size,
                ..base.clone()
            },
            tx_depth,
            cq_mod: a.cq_mod.unwrap_or(bench::default_cq_mod(size)),
            post_list,
            qps: a.qps.unwrap_or(1),
            duration: a.duration.map(|d| std::time::Duration::from_secs(d.into())),
        };
        let spin = (sizes.len() == 1)
            .then(|| progress::Spinner::new(format!("{title} on {}", cfg.lat.device)));
        let (info, report) = match (&role, any) {
            (Some(role), _) => bench::run_remote(any, &cfg, role)?,
            (None, bench::AnyTest::Lat(t)) => {
                let (i, r) = bench::run_lat(t, &cfg.lat)?;
                (i, bench::AnyReport::Lat(r))
            }
            (None, bench::AnyTest::Bw(t)) => {
                let (i, r) = bench::run_bw(t, &cfg)?;
                (i, bench::AnyReport::Bw(r))
            }
        };
        drop(spin);
        bar.suspend(|| {
            if k == 0 {
                out_part!("{}", info.banner(title));
                match report {
                    bench::AnyReport::Lat(_) => out!("{LAT_HEADER}{CPU_HEADER}"),
                    bench::AnyReport::Bw(_) if a.report_gbits => {
                        out!("{}{CPU_HEADER}", BW_HEADER.replace("MB/sec", "Gb/sec"))
                    }
                    bench::AnyReport::Bw(_) => out!("{BW_HEADER}{CPU_HEADER}"),
                    bench::AnyReport::Served { .. } => {}
                }
            }
            match report {
                bench::AnyReport::Lat(r) => out!("{}{}", r.row(), r.cpu.columns()),
                bench::AnyReport::Bw(r) if a.report_gbits => {
                    out!("{}{}", gbits(&r).row(), r.cpu.columns())
                }
                bench::AnyReport::Bw(r) => out!("{}{}", r.row(), r.cpu.columns()),
                bench::AnyReport::Served { iterations } => match a.duration {
                    Some(d) => out!(
                        " {size} B: this side served the client's {d} s run; the client reports"
                    ),
                    None => out!(
                        " {size} B: this side served {iterations} iterations; the client reports"
                    ),
                },
            }
        });
        bar.inc(1);
        json_rows.push(report_json(size, &report, a.report_gbits));
    }
    bar.finish_and_clear();
    out!("{RESULT_LINE}");
    if let Some(out) = json_out {
        let doc = serde_json::json!({
            "test": any.name(),
            "title": title,
            "device": base.device,
            "bw_unit": if a.report_gbits { "Gb/sec" } else { "MB/sec" },
            "results": json_rows,
        });
        out.write(&(serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"))?;
        eprintln!("rdma-direct: wrote {}", a.out_json_file.display());
    }
    Ok(())
}

/// `bench reg_mr`: registration and deregistration time per size, and the
/// pool's allocation time.
/// Cycles of each window row of `bench reg_mr` (a bind and its revocation
/// cost microseconds: -n's MR repetitions would give too few).
const MW_CYCLES: u32 = 1000;

fn run_reg_mr(a: &BenchArgs, size: Option<u64>, iters: Option<u32>) -> rdma_direct::Result<()> {
    use rdma_direct::Error;
    if a.host.is_some() || a.server {
        return Err(Error::Invalid("reg_mr runs on one host".into()));
    }
    let backend: rdma_direct::Backend = a.backend.into();
    let sizes: Vec<usize> = match (size, a.all) {
        (Some(s), _) => vec![usize::try_from(s)
            .map_err(|_| Error::Invalid(format!("-s {s}: more than this machine addresses")))?],
        // 4 KiB to 1 GiB in steps of 4x.
        (None, true) => (0..10).map(|k| 4096usize << (2 * k)).collect(),
        (None, false) => vec![4096, 64 << 10, 1 << 20, 16 << 20, 256 << 20],
    };
    let reps = iters.unwrap_or(5);
    let rows = bench::run_reg_mr(&a.device, backend, &sizes, reps)?;
    out!("{RESULT_LINE}");
    out!(
        "                    Memory registration (reg_mr) on {}",
        a.device
    );
    out!("{RESULT_LINE}");
    out!(" #bytes        #reps   reg[usec]      reg[usec/MiB]   dereg[usec]    dereg[usec/MiB]");
    for r in &rows {
        out!(
            " {:<13} {:<7} {:<14.2} {:<15.2} {:<14.2} {:<14.2}",
            r.bytes,
            r.reps,
            r.reg_us,
            r.reg_us_per_mib(),
            r.dereg_us,
            r.dereg_us_per_mib()
        );
    }
    out!("{RESULT_LINE}");
    match bench::run_mw_costs(&a.device, backend, MW_CYCLES)? {
        Ok(rows) => {
            out!(" memory windows over 64 KiB, post + completion (signaled), medians:");
            out!(" window                              #cycles  bind[usec]     revoke[usec]");
            for r in &rows {
                out!(
                    " {:<35} {:<8} {:<14.2} {:<14.2}",
                    r.what,
                    r.reps,
                    r.bind_us,
                    r.revoke_us
                );
            }
        }
        Err(why) => out!(" memory windows: not measured: {why}"),
    }
    let ns = bench::pool_alloc_ns(&a.device, backend, 1_000_000)?;
    out!("{RESULT_LINE}");
    out!(" pool: allocate + free one 4 KiB buffer from registered 2 MiB chunks: {ns:.1} ns (no registration)");
    out!("{RESULT_LINE}");
    Ok(())
}

/// One row of `--out_json`: perftest's columns and our CPU cost.
fn report_json(bytes: u32, r: &bench::AnyReport, gbits: bool) -> serde_json::Value {
    let f = if gbits { GBITS_PER_MB } else { 1.0 };
    match r {
        bench::AnyReport::Lat(r) => serde_json::json!({
            "bytes": r.bytes, "iterations": r.iterations,
            "t_min_usec": r.t_min, "t_max_usec": r.t_max, "t_typical_usec": r.t_typical,
            "t_avg_usec": r.t_avg, "t_stdev_usec": r.t_stdev,
            "p99_usec": r.p99, "p99_9_usec": r.p99_9,
            "post_nsec_per_wr": r.cpu.post_ns, "poll_nsec_per_cqe": r.cpu.poll_ns,
        }),
        bench::AnyReport::Bw(r) => serde_json::json!({
            "bytes": r.bytes, "iterations": r.iterations,
            "bw_peak": r.bw_peak * f, "bw_average": r.bw_average * f, "msg_rate_mpps": r.msg_rate,
            "post_nsec_per_wr": r.cpu.post_ns, "poll_nsec_per_cqe": r.cpu.poll_ns,
        }),
        bench::AnyReport::Served { iterations } => serde_json::json!({
            "bytes": bytes, "iterations": iterations, "served": true,
        }),
    }
}
