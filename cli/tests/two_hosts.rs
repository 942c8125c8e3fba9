//! Two hosts with UD, UC and SRQs, on the sim: the exchange's qkey field,
//! `Pd::create_ah_from_recv` (answering a UD receive's sender, refusing
//! what is not a good UD receive), `cm::*_ud`'s typed refusals, and the
//! CLI's two-process refusals and `compare`'s skips.

use rdma_direct::exchange::{ConnInfo, MSG_LEN};
use rdma_direct::*;
use std::process::Command;
use std::time::{Duration, Instant};

const QKEY: u32 = 0x4242;

fn ud_cfg() -> QpConfig {
    QpConfig {
        qp_type: QpType::Ud,
        max_inline: 0,
        ..QpConfig::default()
    }
}

fn sim() -> (Context, Pd) {
    let ctx = Context::open(SIM_DEVICE).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    (ctx, pd)
}

fn poll1(q: &mut Qp) -> Completion {
    let mut wc = [Completion::default(); 1];
    let t = Instant::now();
    loop {
        if q.poll(&mut wc).unwrap() == 1 {
            return wc[0];
        }
        assert!(t.elapsed() < Duration::from_secs(10), "no completion");
        std::thread::yield_now();
    }
}

// ---- exchange: the qkey at bytes 44..48 ----

#[test]
fn the_qkey_field_round_trips_and_is_big_endian_at_44() {
    let (_ctx, pd) = sim();
    let q = pd.create_qp(&ud_cfg()).unwrap();
    for qkey in [0, 1, 0x8000_0000, u32::MAX] {
        let i = ConnInfo {
            endpoint: q.endpoint(),
            psn: 7,
            rkey: Rkey(0x0102_0304),
            addr: u64::MAX,
            len: u64::MAX,
            qkey,
            dc_key: None,
        };
        let m = i.encode();
        assert_eq!(m.len(), MSG_LEN);
        assert_eq!(&m[44..48], &qkey.to_be_bytes());
        assert_eq!(&m[40..44], &[1, 2, 3, 4], "the rkey beside it untouched");
        assert_eq!(&m[48..56], &[0xff; 8], "the addr beside it untouched");
        assert_eq!(ConnInfo::decode(&m).unwrap(), i);
    }
}

// ---- Pd::create_ah_from_recv ----

/// A UD datagram from `a` to `b`, received at `b`: (its completion, the MR).
fn one_ud_receive(pd: &Pd, a: &mut Qp, b: &mut Qp) -> (Completion, Mr) {
    a.ready_ud(QKEY).unwrap();
    b.ready_ud(QKEY).unwrap();
    let ah = pd.create_ah(&a.av_to(&b.endpoint())).unwrap();
    let mr = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let rs = [Sge::new(&mr, 1024, 40 + 64).unwrap()];
    b.post_recv(&[RecvWr::new(9, &rs)]).unwrap();
    let ss = [Sge::new(&mr, 0, 64).unwrap()];
    let to = UdDest {
        ah: &ah,
        remote_qpn: b.qp_num(),
        qkey: QKEY,
    };
    a.post_send(&[SendWr::ud_send(1, &ss, to).signaled()])
        .unwrap();
    assert!(poll1(a).status.is_ok());
    let c = poll1(b);
    assert!(c.status.is_ok(), "{c:?}");
    (c, mr)
}

#[test]
fn an_ah_from_a_ud_receive_answers_its_sender() {
    let (_ctx, pd) = sim();
    let (mut a, mut b) = (
        pd.create_qp(&ud_cfg()).unwrap(),
        pd.create_qp(&ud_cfg()).unwrap(),
    );
    let (c, mr) = one_ud_receive(&pd, &mut a, &mut b);
    assert!(
        c.src_qp.grh(),
        "a UD receive on the sim carries the GRH flag"
    );
    let mut grh = [0u8; 40];
    mr.read(1024, &mut grh).unwrap();
    let back = pd.create_ah_from_recv(1, &c, &grh).unwrap();
    let rs = [Sge::new(&mr, 2048, 40 + 64).unwrap()];
    a.post_recv(&[RecvWr::new(3, &rs)]).unwrap();
    let ss = [Sge::new(&mr, 1024 + 40, 64).unwrap()];
    let to = UdDest {
        ah: &back,
        remote_qpn: c.src_qp.qpn(),
        qkey: QKEY,
    };
    b.post_send(&[SendWr::ud_send(2, &ss, to).signaled()])
        .unwrap();
    assert!(poll1(&mut b).status.is_ok());
    let r = poll1(&mut a);
    assert_eq!((r.wr_id, r.byte_len, r.src_qp.qpn()), (3, 104, b.qp_num()));
}

#[test]
fn create_ah_from_recv_refuses_what_is_not_a_good_ud_receive() {
    let (_ctx, pd) = sim();
    let grh = [0u8; 40];
    let good = Completion {
        opcode: WcOpcode::RECV,
        src_qp: SrcQp::new(5, true),
        ..Completion::default()
    };
    let inval = |r: Result<Ah>, what: &str| match r {
        Err(Error::Invalid(_) | Error::Config { .. }) => {}
        Err(e) => panic!("{what}: {e:?}, not Error::Invalid"),
        Ok(_) => panic!("{what}: an AH was made"),
    };
    inval(pd.create_ah_from_recv(0, &good, &grh), "port 0");
    inval(
        pd.create_ah_from_recv(1, &Completion::default(), &grh),
        "a default (SEND) completion",
    );
    inval(
        pd.create_ah_from_recv(
            1,
            &Completion {
                status: WcStatus::WR_FLUSH_ERR,
                ..good
            },
            &grh,
        ),
        "a flushed receive",
    );
    inval(
        pd.create_ah_from_recv(
            1,
            &Completion {
                src_qp: SrcQp::new(5, false),
                ..good
            },
            &grh,
        ),
        "a receive without a GRH",
    );
    inval(
        pd.create_ah_from_recv(
            1,
            &Completion {
                opcode: WcOpcode::RECV_RDMA_WITH_IMM,
                ..good
            },
            &grh,
        ),
        "a WRITE_WITH_IMM's receive",
    );
}

#[test]
fn create_ah_from_recv_refuses_an_rc_receive() {
    let (_ctx, pd) = sim();
    let (mut a, mut b) = pd.create_connected_pair(&QpConfig::default()).unwrap();
    let mr = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let rs = [Sge::new(&mr, 1024, 64).unwrap()];
    b.post_recv(&[RecvWr::new(9, &rs)]).unwrap();
    let ss = [Sge::new(&mr, 0, 64).unwrap()];
    a.post_send(&[SendWr::send(1, &ss).signaled()]).unwrap();
    assert!(poll1(&mut a).status.is_ok());
    let c = poll1(&mut b);
    assert!(c.status.is_ok());
    let r = pd.create_ah_from_recv(1, &c, &[0; 40]);
    assert!(
        matches!(r, Err(Error::Invalid(_))),
        "an RC receive has no GRH: {:?}",
        r.err()
    );
}

// ---- cm's UD entry points on the sim: typed refusals, no panic ----

#[cfg(feature = "verbs")]
mod cm_refusals {
    use super::*;
    use rdma_direct::cm::{self, CmListener, CmOffer};

    fn offer() -> CmOffer {
        CmOffer {
            rkey: Rkey(0),
            addr: 0,
            len: 0,
        }
    }

    /// What a refusal said; fails on a panic or success.
    fn refusal<T>(r: Result<T>) -> Error {
        match r {
            Ok(_) => panic!("accepted"),
            Err(e) => e,
        }
    }

    #[test]
    fn connect_ud_with_a_sim_ud_qp_is_invalid() {
        let (_ctx, pd) = sim();
        let mut q = pd.create_qp(&ud_cfg()).unwrap();
        let t = Instant::now();
        let e = refusal(cm::connect_ud(
            &mut q,
            "127.0.0.1",
            47_111,
            &offer(),
            Duration::from_secs(2),
        ));
        assert!(t.elapsed() < Duration::from_secs(10));
        assert!(
            matches!(
                e,
                Error::Unsupported {
                    feature: rdma_direct::Feature::RdmaCm,
                    ..
                }
            ),
            "a sim QP through rdma_cm: {e:?} ({e}), not Error::Unsupported"
        );
        assert_eq!(q.state(), QpState::Reset, "the QP untouched");
    }

    #[test]
    fn connect_ud_with_an_rc_qp_is_invalid() {
        let (_ctx, pd) = sim();
        let mut q = pd.create_qp(&QpConfig::default()).unwrap();
        let e = refusal(cm::connect_ud(
            &mut q,
            "127.0.0.1",
            47_112,
            &offer(),
            Duration::from_secs(2),
        ));
        assert!(
            matches!(
                e,
                Error::Unsupported {
                    feature: rdma_direct::Feature::RdmaCm,
                    ..
                }
            ),
            "an RC QP to connect_ud: {e:?} ({e}), not Error::Unsupported"
        );
    }

    #[test]
    fn connect_with_a_ud_qp_is_invalid() {
        let (_ctx, pd) = sim();
        let mut q = pd.create_qp(&ud_cfg()).unwrap();
        let e = refusal(cm::connect(
            &mut q,
            "127.0.0.1",
            47_113,
            &offer(),
            Duration::from_secs(2),
        ));
        assert!(
            matches!(
                e,
                Error::Unsupported {
                    feature: rdma_direct::Feature::RdmaCm,
                    ..
                }
            ),
            "a UD QP to connect: {e:?} ({e}), not Error::Unsupported"
        );
    }

    #[test]
    fn a_sim_qp_is_refused_before_the_host_is_looked_up() {
        // The QP is checked first: an unresolvable host is never tried.
        let (_ctx, pd) = sim();
        let mut q = pd.create_qp(&ud_cfg()).unwrap();
        let e = refusal(cm::connect_ud(
            &mut q,
            "no-such-host.invalid",
            1,
            &offer(),
            Duration::from_secs(2),
        ));
        assert!(
            matches!(
                e,
                Error::Unsupported {
                    feature: rdma_direct::Feature::RdmaCm,
                    ..
                }
            ),
            "{e:?}: the QP's refusal, not the host's"
        );
    }

    #[test]
    fn bind_ud_is_a_typed_result_and_its_listener_takes_ud_only() {
        match CmListener::bind_ud(47_114) {
            Ok(l) => {
                // A kernel CM here: the wrong accept, and a sim QP, are
                // refused at once.
                let (_ctx, pd) = sim();
                let mut q = pd.create_qp(&ud_cfg()).unwrap();
                let wrong = refusal(l.accept(&mut q, &offer(), Duration::from_millis(10)));
                assert!(matches!(wrong, Error::Invalid(_)), "{wrong:?}");
                let sim_qp = refusal(l.accept_ud(&mut q, &offer(), Duration::from_millis(10)));
                assert!(
                    matches!(
                        sim_qp,
                        Error::Unsupported {
                            feature: rdma_direct::Feature::RdmaCm,
                            ..
                        }
                    ),
                    "{sim_qp:?}"
                );
            }
            // No CM here (no rdma_ucm): the call that failed is named.
            Err(e) => assert!(
                matches!(
                    e,
                    Error::Verbs {
                        call: "rdma_create_event_channel" | "rdma_create_id" | "rdma_bind_addr",
                        ..
                    }
                ),
                "{e:?}"
            ),
        }
    }
}

// ---- the CLI ----

fn bin() -> Option<&'static str> {
    option_env!("CARGO_BIN_EXE_rdma-direct")
}

fn run(args: &[&str]) -> Option<(i32, String)> {
    let o = Command::new(bin()?).args(args).output().unwrap();
    Some((
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    ))
}

#[test]
fn bench_refuses_unreliable_and_srq_two_process_runs_clearly() {
    for (args, says) in [
        (
            &["send_lat", "-c", "UD", "-R", "--server"][..],
            "-c UD with -R",
        ),
        (
            &["send_lat", "-c", "UC", "-R", "127.0.0.1"][..],
            "-c UC with -R",
        ),
        (
            &["write_lat", "--use-srq", "--server"][..],
            "--use-srq is for the SEND tests",
        ),
        (
            &["write_bw", "--use-srq", "127.0.0.1"][..],
            "--use-srq is for the SEND tests",
        ),
        (
            &["read_lat", "-c", "UD", "--server"][..],
            "-c UD does not run read_lat",
        ),
        (
            &["send_bw", "-q", "2", "-c", "UD", "--server"][..],
            "the sim is one process's device",
        ),
        (
            &["send_bw", "--use-srq", "127.0.0.1"][..],
            "the sim is one process's device",
        ),
    ] {
        let Some((rc, err)) = run(&[&["bench"], args, &["-d", "sim", "-p", "47120"]].concat())
        else {
            return;
        };
        assert_eq!(rc, 2, "bench {args:?}: {err}");
        assert!(err.contains(says), "bench {args:?}: {err}");
    }
}

#[test]
fn compare_refuses_tests_off_the_matrix() {
    for t in [
        "read_lat:UD",
        "send_lat:XX",
        ":UD",
        "",
        "send_lat:ud",
        "atomic_bw:SRQ",
    ] {
        let Some((rc, err)) = run(&["compare", "-d", "sim", "--tests", t, "--sizes", "8"]) else {
            return;
        };
        assert_eq!(rc, 2, "--tests {t:?}: {err}");
        assert!(err.contains("unknown test"), "--tests {t:?}: {err}");
    }
}

/// When the UD size skip leaves nothing to run, compare should say so and
/// fail rather than report success and write a JSON its own --from-json
/// refuses ("no rows") and a plot of nothing.
#[test]
fn compare_with_every_run_skipped_fails_and_writes_nothing() {
    let dir = std::env::temp_dir().join(format!("review16-compare-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, svg) = (dir.join("r.json"), dir.join("r.svg"));
    let (j, s) = (json.to_str().unwrap(), svg.to_str().unwrap());
    let Some((rc, err)) = run(&[
        "compare",
        "-d",
        "sim",
        "--tests",
        "send_lat:UD",
        "--sizes",
        "8192",
        "--json",
        j,
        "--svg",
        s,
    ]) else {
        return;
    };
    assert!(err.contains("skipping send_lat:UD at 8192 B"), "{err}");
    let wrote = json.exists();
    let replot = if wrote {
        run(&[
            "compare",
            "--from-json",
            j,
            "--svg",
            dir.join("again.svg").to_str().unwrap(),
        ])
    } else {
        None
    };
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        rc != 0 && !wrote,
        "every run skipped: exit {rc}, wrote the JSON: {wrote} (its --from-json: {replot:?}); stderr: {err}"
    );
}
