//! The benchmark engine (`crate::tools::bench`) runs every test on the
//! device.

use super::*;

pub(super) fn latency_benchmarks_run(dev: &str) -> CaseResult {
    use crate::tools::bench::AtomicKind;
    use crate::tools::bench::{run_lat, LatConfig, LatTest};
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

pub(super) fn bandwidth_benchmarks_run(dev: &str) -> CaseResult {
    use crate::tools::bench::{run_bw, BwConfig, BwTest, LatConfig};
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

/// The benchmarks on the other transports and with an SRQ, as perftest
/// runs them: send_lat and send_bw with `-c UD` and with `--use-srq`
/// (and both), write_lat and write_bw with `-c UC`; the tests perftest does
/// not run on a transport are refused by name.
pub(super) fn transport_benchmarks_run(dev: &str) -> CaseResult {
    use crate::tools::bench::{
        check_transport, run_bw, run_lat, BwConfig, BwTest, LatConfig, LatTest,
    };
    use rdma_direct::QpType;
    let mut notes = Vec::new();
    for (qp_type, use_srq, lat, bw) in [
        (QpType::Ud, false, LatTest::Send, BwTest::Send),
        (QpType::Rc, true, LatTest::Send, BwTest::Send),
        (QpType::Ud, true, LatTest::Send, BwTest::Send),
        (QpType::Uc, true, LatTest::Send, BwTest::Send),
        (QpType::Uc, false, LatTest::Write, BwTest::Write),
    ] {
        let what = format!("{lat:?}/{bw:?} -c {} srq {use_srq}", qp_type.name());
        let cfg = LatConfig {
            device: dev.to_string(),
            iters: 50,
            qp_type,
            use_srq,
            ..Default::default()
        };
        let (info, r) = run_lat(lat, &cfg)?;
        check_eq!((r.bytes, r.iterations), (2, 50), "{what}");
        check!(
            info.banner("t").contains(qp_type.name()),
            "{what}: the banner"
        );
        let bcfg = BwConfig {
            lat: LatConfig {
                size: 1024,
                iters: 2000,
                ..cfg.clone()
            },
            tx_depth: 64,
            cq_mod: 16,
            post_list: 1,
            qps: 1,
            duration: None,
        };
        let (_, r) = run_bw(bw, &bcfg)?;
        check_eq!((r.bytes, r.iterations), (1024, 2000), "{what}");
        check!(r.bw_average > 0.0 && r.msg_rate > 0.0, "{what}: {r:?}");
        notes.push(format!("{what}: {:.1} MB/s", r.bw_average));
    }
    for (test, qp_type, srq) in [
        ("read_lat", QpType::Uc, false),
        ("write_lat", QpType::Ud, false),
        ("atomic_bw", QpType::Ud, false),
        ("write_bw", QpType::Rc, true),
    ] {
        check!(
            matches!(check_transport(test, qp_type, srq), Err(Error::Invalid(_))),
            "{test} -c {} srq {srq}",
            qp_type.name()
        );
    }
    let over = LatConfig {
        device: dev.to_string(),
        size: 8192,
        iters: 10,
        qp_type: QpType::Ud,
        ..Default::default()
    };
    check!(
        matches!(run_lat(LatTest::Send, &over), Err(Error::Invalid(_))),
        "a UD send_lat over the MTU"
    );
    passed(notes)
}
