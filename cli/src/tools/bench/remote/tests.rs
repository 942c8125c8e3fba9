//! The two-host bench's pieces on the sim, as unit tests of the binary
//! (declared from `src/tools/mod.rs`, so the test crates that compile the
//! engine do not run them again): the settings line carries `-c DC`; a
//! DC side's QPs (a DCI, a DCT on an SRQ) and the exchange message it
//! sends (version 2: its DCT number and key); and whole two-host runs
//! with both sides threads of this process on one sim `Context`
//! (`run_remote_on`'s loopback: the CLI refuses the sim between two
//! processes, each of which would have its own device).

use super::bench::remote::run_remote_on;
use super::bench::remote::side::{DcTarget, SideQps};
use super::bench::*;
use rdma_direct::exchange::{ConnInfo, Listener, MSG_LEN, MSG_LEN_V2};
use rdma_direct::{Access, Context, Error, QpConfig, QpType};
use std::sync::Arc;

fn cfg(qp_type: QpType, size: u32, iters: u32) -> BwConfig {
    BwConfig {
        lat: LatConfig {
            qp_type,
            use_srq: qp_type.is_dc(),
            size,
            iters,
            inline_size: DC_INLINE_DEFAULT,
            ..LatConfig::default()
        },
        tx_depth: 16,
        cq_mod: 4,
        ..BwConfig::default()
    }
}

/// A QP config as `run_remote_on` makes for send_lat.
fn qcfg(qp_type: QpType) -> QpConfig {
    QpConfig {
        qp_type,
        max_send_wr: 16,
        max_recv_wr: 1,
        ..QpConfig::default()
    }
}

#[test]
fn the_settings_line_carries_dc_and_a_transport_mismatch_is_named() {
    let t = AnyTest::Lat(LatTest::Write);
    let dc = settings_line(t, &cfg(QpType::Dci, 64, 100));
    assert!(dc.contains(" -c=DC "), "{dc}");
    assert!(dc.ends_with("--use-srq=yes"), "{dc}");
    let rc = settings_line(t, &cfg(QpType::Rc, 64, 100));
    assert!(rc.contains(" -c=RC "), "{rc}");
    let m = settings_mismatch(&dc, &rc).unwrap();
    assert!(m.contains("-c DC here, -c RC on the peer"), "{m}");
    assert_eq!(settings_mismatch(&dc, &dc), None);
}

#[test]
fn a_dc_side_makes_a_dci_and_a_dct_on_an_srq_and_the_others_one_qp() {
    let ctx = Context::open(rdma_direct::SIM_DEVICE).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let s = SideQps::new(&pd, &qcfg(QpType::Dci), false).unwrap();
    assert_eq!(s.qp.config().qp_type, QpType::Dci);
    let dct = s.dct.as_ref().expect("a DCT on DC");
    assert_eq!(dct.config().qp_type, QpType::Dct);
    assert_eq!(dct.config().dc_key, DC_KEY);
    assert!(dct.dct_number().is_some(), "the DCT is up (RTR)");
    assert!(s.srq.is_some(), "the DCT takes its receives from an SRQ");
    for (t, srq) in [(QpType::Rc, false), (QpType::Uc, false), (QpType::Ud, true)] {
        let s = SideQps::new(&pd, &qcfg(t), srq).unwrap();
        assert_eq!(s.qp.config().qp_type, t);
        assert!(s.dct.is_none(), "{t:?}");
        assert_eq!(s.srq.is_some(), srq, "{t:?}");
    }
}

#[test]
fn a_dc_side_sends_version_2_with_its_dct_number_and_key() {
    let ctx = Context::open(rdma_direct::SIM_DEVICE).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.alloc_mr(2 * 64 + 40, Access::LOCAL_WRITE).unwrap();
    let s = SideQps::new(&pd, &qcfg(QpType::Dci), false).unwrap();
    let i = s.conn_info(7, &mr, 64).unwrap();
    let dctn = s.dct.as_ref().unwrap().dct_number().unwrap();
    assert_eq!(i.endpoint.qpn, dctn);
    assert_ne!(dctn, s.qp.qp_num(), "the DCT's number, not the DCI's QPN");
    assert_eq!(i.dc_key, Some(DC_KEY));
    assert_eq!((i.rkey, i.addr, i.len), (mr.rkey(), mr.addr() + 64, 64));
    let m = i.encode();
    assert_eq!(m.len(), MSG_LEN_V2);
    assert_eq!(&m[8..10], &2u16.to_be_bytes(), "version 2");
    assert_eq!(&m[12..16], &dctn.to_be_bytes());
    assert_eq!(&m[64..72], &DC_KEY.to_be_bytes());
    assert_eq!(ConnInfo::decode(&m).unwrap(), i);
    // The peer's DCT as this side's DCI will name it.
    let t = DcTarget::of_peer(&pd, &s.qp, &i).unwrap();
    assert_eq!((t.dctn, t.key), (dctn, DC_KEY));
    // RC: version 1, 64 bytes, no key; a DC side refuses it as its peer.
    let rc = SideQps::new(&pd, &qcfg(QpType::Rc), false).unwrap();
    let r = rc.conn_info(7, &mr, 64).unwrap();
    assert_eq!((r.endpoint.qpn, r.psn, r.dc_key), (rc.qp.qp_num(), 7, None));
    assert_eq!(r.encode().len(), MSG_LEN);
    match DcTarget::of_peer(&pd, &s.qp, &r) {
        Err(Error::Exchange(m)) => assert!(m.contains("names no DC target"), "{m}"),
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("a version-1 peer taken as a DC target"),
    }
}

/// Runs `test` between a server thread (`server_cfg`) and a client thread
/// (`client_cfg`) of this process on one sim `Context`: what each returned.
type Side = rdma_direct::Result<(RunInfo, AnyReport)>;
fn loopback_with(test: AnyTest, server_cfg: &BwConfig, client_cfg: &BwConfig) -> (Side, Side) {
    let ctx = Context::open(rdma_direct::SIM_DEVICE).unwrap();
    let listener = Arc::new(Listener::bind(0).unwrap());
    let port = listener.port();
    let server = Role::Server { listener };
    let client = Role::Client {
        host: "127.0.0.1".into(),
        port,
    };
    std::thread::scope(|s| {
        let srv = s.spawn(|| run_remote_on(test, server_cfg, &server, Some(&ctx)));
        let cli = run_remote_on(test, client_cfg, &client, Some(&ctx));
        (srv.join().unwrap(), cli)
    })
}

/// Runs `test` between a server thread and a client thread of this
/// process on one sim `Context`: (server's report, client's).
fn loopback(test: AnyTest, cfg: &BwConfig) -> (AnyReport, AnyReport) {
    let (srv, cli) = loopback_with(test, cfg, cfg);
    let name = test.name();
    let (si, sr) = srv.unwrap_or_else(|e| panic!("{name} server: {e}"));
    let (ci, cr) = cli.unwrap_or_else(|e| panic!("{name} client: {e}"));
    assert_eq!((si.role, ci.role), (Some("server"), Some("client")));
    assert_eq!((si.qp_type, ci.qp_type), (cfg.lat.qp_type, cfg.lat.qp_type));
    (sr, cr)
}

fn check_reports(test: AnyTest, iters: u32, (server, client): (AnyReport, AnyReport)) {
    let name = test.name();
    match (test, client) {
        (AnyTest::Lat(_), AnyReport::Lat(r)) => assert!(r.t_min > 0.0, "{name}: {r:?}"),
        (AnyTest::Bw(_), AnyReport::Bw(r)) => assert!(r.bw_average > 0.0, "{name}: {r:?}"),
        r => panic!("{name}: the client reported {r:?}"),
    }
    match (test, server) {
        (AnyTest::Lat(LatTest::Write | LatTest::Send), AnyReport::Lat(r)) => {
            assert!(r.t_min > 0.0, "{name}: {r:?}")
        }
        (AnyTest::Lat(LatTest::Write | LatTest::Send), r) => panic!("{name}: server {r:?}"),
        (_, AnyReport::Served { iterations }) => assert_eq!(iterations, iters, "{name}"),
        (_, r) => panic!("{name}: the server reported {r:?}"),
    }
}

#[test]
fn every_test_runs_dc_between_two_threads_on_one_sim() {
    let iters = 40;
    for test in AnyTest::ALL {
        let c = cfg(QpType::Dci, 64, iters);
        check_reports(test, iters, loopback(test, &c));
    }
}

#[test]
fn the_loopback_runs_rc_and_ud_as_before() {
    let iters = 20;
    for (t, test) in [
        (QpType::Rc, AnyTest::Lat(LatTest::Write)),
        (QpType::Rc, AnyTest::Bw(BwTest::Send)),
        (QpType::Ud, AnyTest::Lat(LatTest::Send)),
    ] {
        let c = cfg(t, 64, iters);
        check_reports(test, iters, loopback(test, &c));
    }
}

#[test]
fn dc_latency_runs_for_a_duration_between_two_threads() {
    for lt in [LatTest::Write, LatTest::Send] {
        let test = AnyTest::Lat(lt);
        let mut c = cfg(QpType::Dci, 8, 1000);
        c.lat.duration = Some(std::time::Duration::from_secs(1));
        let (srv, cli) = loopback_with(test, &c, &c);
        let name = test.name();
        for (side, r) in [("server", srv), ("client", cli)] {
            match r {
                Ok((_, AnyReport::Lat(r))) => assert!(r.iterations > 0, "{name} {side}: {r:?}"),
                r => panic!("{name} {side}: {r:?}"),
            }
        }
    }
}

#[test]
fn a_dc_side_and_an_rc_side_refuse_each_other_naming_c() {
    let test = AnyTest::Bw(BwTest::Write);
    let (srv, cli) = loopback_with(test, &cfg(QpType::Dci, 64, 20), &cfg(QpType::Rc, 64, 20));
    for (side, r, want) in [
        ("server", srv, "-c DC here, -c RC on the peer"),
        ("client", cli, "-c RC here, -c DC on the peer"),
    ] {
        match r {
            Err(Error::Exchange(m)) => assert!(m.contains(want), "{side}: {m}"),
            r => panic!("{side}: {r:?}"),
        }
    }
}
