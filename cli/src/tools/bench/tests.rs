//! The report reductions against perftest's, as unit tests of the binary
//! (declared from `src/tools/mod.rs`, so the test crates that compile the
//! engine do not run them again).

use super::bench::*;

#[test]
fn report_follows_perftest_reduction() {
    // 11 round trips of 2..=22 us (one-way 1..=11), plus noise in the tail.
    let mut rtt: Vec<f64> = (1..=10).map(|i| i as f64 * 2000.0).collect();
    rtt.push(1_000_000.0);
    rtt.push(2_000_000.0);
    let r = LatReport::from_round_trips(2, 13, &mut rtt, 2.0);
    // 12 samples, 2 dropped -> n = 10: one-way 1..=10 us.
    assert_eq!(r.t_min, 1.0);
    assert_eq!(r.t_max, 500.0); // perftest reports delta[n], the first dropped sample
    assert_eq!(r.t_typical, 5.5);
    assert_eq!(r.t_avg, 5.5);
    assert!((r.t_stdev - 2.8722813232690143).abs() < 1e-12);
    assert_eq!(r.p99, 500.0); // index ceil(10 * 0.99) = 10
    assert!(
        r.row()
            .starts_with("      2          13           1.00         500.00 "),
        "{:?}",
        r.row()
    );
}

#[test]
fn bandwidth_follows_perftest_reduction() {
    // 4 WRs of 1 MiB, posted at 0, 1, 2, 3 ms, completed at 2, 3, 4, 5 ms.
    let posted = [0.0, 1e6, 2e6, 3e6];
    let completed = [2e6, 3e6, 4e6, 5e6];
    let r = BwReport::from_times(1 << 20, &posted, &completed);
    // Average: 4 MiB over 5 ms = 800 MiB/s; 800 msgs/s = 0.0008 Mpps.
    assert!((r.bw_average - 800.0).abs() < 1e-9, "{r:?}");
    assert!((r.msg_rate - 0.0008).abs() < 1e-12, "{r:?}");
    // Peak: best window is i = 0..j = 3: (5 - 0) / 4 = 1.25 ms per MiB = 800 MiB/s;
    // i = 1, j = 3: (5 - 1) / 3 = 1.33 ms; a single WR takes 2 ms. So 800.
    assert!((r.bw_peak - 800.0).abs() < 1e-9, "{r:?}");
    assert!(
        r.row().starts_with(
            "1048576               4             800.00                800.00        0.000800"
        ),
        "{:?}",
        r.row()
    );
}

#[test]
fn a_settings_mismatch_names_the_flags_that_differ() {
    let cfg = |size, rdma_cm, duration: Option<u64>| BwConfig {
        lat: LatConfig {
            size,
            iters: 100,
            rdma_cm,
            ..LatConfig::default()
        },
        duration: duration.map(std::time::Duration::from_secs),
        ..BwConfig::default()
    };
    let write = AnyTest::Lat(LatTest::Write);
    let mine = settings_line(write, &cfg(128, false, None));
    assert_eq!(settings_mismatch(&mine, &mine), None);
    let theirs = settings_line(write, &cfg(64, false, None));
    let m = settings_mismatch(&mine, &theirs).unwrap();
    assert_eq!(m, "the two sides differ: -s 128 here, -s 64 on the peer");
    // No Rust Debug text (`None`, `FetchAndAdd`, `false`) in any message.
    let theirs = settings_line(AnyTest::Lat(LatTest::Read), &cfg(64, true, Some(5)));
    let m = settings_mismatch(&mine, &theirs).unwrap();
    assert_eq!(
        m,
        "the two sides differ: write_lat here, read_lat on the peer; -s 128 here, -s 64 on the peer; \
         no -D here, -D 5 on the peer; no -R here, -R on the peer"
    );
    for debug in ["None", "Some", "FetchAndAdd", "false", "true"] {
        assert!(!m.contains(debug), "{m}");
    }
    // The transport and the SRQ, in the CLI's words.
    let ud = BwConfig {
        lat: LatConfig {
            qp_type: rdma_direct::QpType::Ud,
            use_srq: true,
            ..cfg(128, false, None).lat
        },
        ..cfg(128, false, None)
    };
    let m = settings_mismatch(&mine, &settings_line(write, &ud)).unwrap();
    assert_eq!(
        m,
        "the two sides differ: -c RC here, -c UD on the peer; no --use-srq here, --use-srq on the peer"
    );
    // A line from another version is said to be one.
    let m = settings_mismatch(&mine, "ib_write_lat size 2 iters 1000").unwrap();
    assert!(m.contains("not one this version reads"), "{m}");
}

/// Where each of `names` ends in `header` (exclusive), in order.
fn name_ends(header: &str, names: &[&str]) -> Vec<usize> {
    let mut from = 0;
    names
        .iter()
        .map(|n| {
            from += header[from..].find(n).expect("name in header") + n.len();
            from
        })
        .collect()
}

/// Where each whitespace-separated token of `row` ends (exclusive).
fn token_ends(row: &str) -> Vec<usize> {
    let b = row.as_bytes();
    (0..b.len())
        .filter(|&i| b[i] != b' ' && b.get(i + 1).is_none_or(|&c| c == b' '))
        .map(|i| i + 1)
        .collect()
}

#[test]
fn rows_line_up_under_their_headers() {
    const CPU: [&str; 2] = ["post[nsec/WR]", "poll[nsec/CQE]"];
    let cpu_cols: Vec<&str> = CPU.to_vec();
    for (bytes, iters, t, ns) in [
        (2, 1000, 1.5, 80.0),
        (8 << 20, 4_000_000, 123456.78, 1234567.8),
    ] {
        let cpu = CpuCost {
            post_ns: ns,
            poll_ns: ns,
        };
        let lat = LatReport {
            bytes,
            iterations: iters,
            t_min: t,
            t_max: t,
            t_typical: t,
            t_avg: t,
            t_stdev: t,
            p99: t,
            p99_9: t,
            cpu,
        };
        let header = format!("{LAT_HEADER}{CPU_HEADER}");
        let row = format!("{}{}", lat.row(), cpu.columns());
        let names: Vec<&str> = LAT_COLUMNS
            .iter()
            .copied()
            .chain(cpu_cols.clone())
            .collect();
        assert!(!row.contains('\t'), "{row:?}");
        assert_eq!(
            token_ends(&row),
            name_ends(&header, &names),
            "\n{header}\n{row}"
        );
        let bw = BwReport {
            bytes,
            iterations: iters,
            bw_peak: t,
            bw_average: t,
            msg_rate: t,
            cpu,
        };
        let names: Vec<&str> = BW_COLUMNS.iter().copied().chain(cpu_cols.clone()).collect();
        let row = format!("{}{}", bw.row(), cpu.columns());
        assert!(!row.contains('\t'), "{row:?}");
        for header in [
            format!("{BW_HEADER}{CPU_HEADER}"),
            format!("{BW_HEADER}{CPU_HEADER}").replace("MB/sec", "Gb/sec"),
        ] {
            let unit = if header.contains("Gb/sec") {
                "Gb/sec"
            } else {
                "MB/sec"
            };
            let names: Vec<String> = names.iter().map(|n| n.replace("MB/sec", unit)).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            assert_eq!(
                token_ends(&row),
                name_ends(&header, &names),
                "\n{header}\n{row}"
            );
        }
    }
}

#[test]
fn dc_is_refused_with_rdma_cm_and_off_the_direct_path() {
    use rdma_direct::DataPath;
    assert!(check_dc(false, "sim", DataPath::Direct).is_ok());
    // Between two hosts too (ConnectX): the exchange carries the DCT.
    assert!(check_dc(false, "mlx5_0", DataPath::Direct).is_ok());
    let msg = |r: rdma_direct::Result<()>| r.unwrap_err().to_string();
    let m = msg(check_dc(true, "sim", DataPath::Direct));
    assert!(m.contains("-c DC with -R"), "{m}");
    // rxe (or mlx5 with --backend verbs): the verbs path has no DC.
    let m = msg(check_dc(false, "rxe0", DataPath::Verbs));
    assert!(
        m.contains("rxe0") && m.contains("mlx5's direct path"),
        "{m}"
    );
}

#[test]
fn dc_runs_the_write_read_send_and_atomic_tests_with_its_srq() {
    use rdma_direct::QpType;
    for t in [
        "write_lat",
        "write_bw",
        "read_lat",
        "read_bw",
        "send_lat",
        "send_bw",
        "atomic_lat",
        "atomic_bw",
    ] {
        // -c DC implies --use-srq, whatever the test.
        assert!(check_transport(t, QpType::Dci, true).is_ok(), "{t}");
        assert!(check_transport(t, QpType::Dci, false).is_ok(), "{t}");
    }
    assert_eq!(conn_name(QpType::Dci), "DC");
    assert_eq!(conn_name(QpType::Rc), "RC");
    let m = check_transport("reg_mr", QpType::Dci, true)
        .unwrap_err()
        .to_string();
    assert!(m.contains("-c DC does not run reg_mr"), "{m}");
    // RC keeps refusing --use-srq off the SEND tests.
    assert!(check_transport("write_bw", QpType::Rc, true).is_err());
}

/// `bench reg_mr`'s window rows on the sim: a type-1 bind + unbind and a
/// type-2 bind + LOCAL_INV, each a positive median over the cycles asked;
/// 0 cycles refused.
#[test]
fn reg_mr_window_rows_measure_both_types() {
    let sim = rdma_direct::SIM_DEVICE;
    let auto = rdma_direct::Backend::Auto;
    assert!(matches!(
        run_mw_costs(sim, auto, 0),
        Err(rdma_direct::Error::Invalid(_))
    ));
    let rows = run_mw_costs(sim, auto, 20)
        .expect("the window rows")
        .expect("the sim has memory windows");
    assert_eq!(rows.len(), 2, "{rows:?}");
    for r in &rows {
        assert_eq!(r.reps, 20);
        assert!(r.bind_us > 0.0 && r.revoke_us > 0.0, "{r:?}");
    }
    assert!(rows[0].what.starts_with("type 1") && rows[1].what.starts_with("type 2"));
}
