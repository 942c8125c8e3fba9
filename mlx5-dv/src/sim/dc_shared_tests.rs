//! DC on the sim, many QPs at once: DCIs sharing one CQ with interleaved
//! errors (every CQE names its own DCI and retires that DCI's WQE, UCX PR
//! #7878), one DCT serving 64 DCIs, a SEND too long for the DCT's
//! receive, scatter to CQE left off on DC QPs, and DC on the device
//! thread. Helpers: `dc_tests`.

use super::dc_tests::{drain, post, rig, seg, wqe, Dci, KEY, PD};
use super::*;
use crate::driver::{CompletionQueue, SendQueue};
use crate::prm::{CqeOpcode, Syndrome, WqeOpcode};
use crate::wqe::{DataSeg, Payload};
use std::time::Duration;

/// Four DCIs on one CQ, each posting three WRITEs per round; in each round
/// two of them address DCT 0 in their second WQE. Every CQE names a DCI
/// by QPN and retires a WQE of that DCI (its wr_id says whose); each DCI
/// gets exactly its own WRs back and ends with none outstanding; the
/// failed ones are reset and reused in the next round.
#[test]
fn dcis_on_one_cq_get_their_own_completions() {
    let r = rig();
    let t = r.dct_sized(
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        KEY,
        true,
        15,
        64,
    );
    let good = seg(t.qp.dctn().unwrap(), KEY);
    let zero = seg(0, KEY);
    let cq = r.dev.create_cq(64, 64).unwrap();
    // SAFETY: a description of a CQ this test keeps.
    let mut cqp = unsafe { CompletionQueue::new(&cq.dv()) }.unwrap();
    let mut dcis: Vec<(Qp, SendQueue)> = (0..4)
        .map(|_| {
            let qp = r.dev.create_dci(PD, &cq, 16).unwrap();
            // SAFETY: a description of a DCI this test keeps.
            let sq = unsafe { SendQueue::new(&qp.dv(), qp.qpn(), 64, 4) }.unwrap();
            (qp, sq)
        })
        .collect();
    for round in 0..3u64 {
        for (qp, sq) in &mut dcis {
            if qp.state() != QpState::Rts {
                qp.to_reset().unwrap();
                sq.reset();
                qp.to_init(Access::empty()).unwrap();
                qp.to_rtr_dci().unwrap();
                qp.to_rts().unwrap();
            }
        }
        let failing = [(round as usize) % 4, (round as usize + 2) % 4];
        // Interleaved posts: WQE k of every DCI, then WQE k + 1.
        for k in 0..3u64 {
            for (i, (_, sq)) in dcis.iter_mut().enumerate() {
                let g = if k == 1 && failing.contains(&i) {
                    &zero
                } else {
                    &good
                };
                let off = (i * 3 + k as usize) * 8;
                let w = wqe(
                    g,
                    WqeOpcode::RDMA_WRITE,
                    Some(r.raddr(off)),
                    Payload::Inline(b"w"),
                );
                sq.post(&w, round << 16 | (i as u64) << 8 | k).unwrap();
                sq.ring_doorbell();
            }
        }
        r.dev.process();
        let mut got: Vec<Vec<(u64, Syndrome)>> = vec![Vec::new(); 4];
        for c in drain(&mut cqp) {
            let i = dcis
                .iter()
                .position(|(qp, _)| qp.qpn() == c.qpn)
                .expect("a CQE names one of the DCIs");
            let wr = dcis[i]
                .1
                .complete(c.wqe_counter)
                .expect("a WQE of that DCI");
            assert_eq!(wr.wr_id >> 8 & 0xff, i as u64, "credited to its own DCI");
            got[i].push((wr.wr_id, c.syndrome));
        }
        for (i, g) in got.iter().enumerate() {
            let id = |k: u64| round << 16 | (i as u64) << 8 | k;
            let want = if failing.contains(&i) {
                vec![
                    (id(0), Syndrome(0)),
                    (id(1), DC_ADDRESS_SYNDROME),
                    (id(2), Syndrome::WR_FLUSH_ERR),
                ]
            } else {
                (0..3).map(|k| (id(k), Syndrome(0))).collect()
            };
            assert_eq!(*g, want, "round {round}, DCI {i}");
            assert_eq!(dcis[i].1.outstanding(), 0);
            let st = if failing.contains(&i) {
                QpState::Err
            } else {
                QpState::Rts
            };
            assert_eq!(dcis[i].0.state(), st);
        }
    }
    assert_eq!(t.qp.state(), QpState::Rtr);
}

/// One DCT on one SRQ serves 64 DCIs: 64 receives, each filled by the DCI
/// its CQE names.
#[test]
fn one_dct_serves_64_dcis() {
    let r = rig();
    let mut t = r.dct_sized(
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        KEY,
        true,
        127,
        128,
    );
    let g = seg(t.qp.dctn().unwrap(), KEY);
    let mut at = std::collections::HashMap::new();
    for j in 0..64usize {
        let s = [DataSeg {
            addr: r.dst.as_ptr() as u64 + j as u64 * 16,
            len: 16,
            lkey: r.kd.lkey,
        }];
        let idx = t.srq_ring.post(&s, j as u64).unwrap();
        at.insert(idx as u16, j * 16);
    }
    t.srq_ring.ring_doorbell();
    let mut dcis: Vec<Dci> = (0..64).map(|_| r.dci(7)).collect();
    for (j, d) in dcis.iter_mut().enumerate() {
        let sge = [r.sge(j * 8, 8)];
        post(
            d,
            &wqe(&g, WqeOpcode::SEND, None, Payload::Sges(&sge)),
            j as u64,
        );
    }
    r.dev.process();
    let cqes = drain(&mut t.cqp);
    assert_eq!(cqes.len(), 64);
    let mut seen = std::collections::HashSet::new();
    for c in &cqes {
        assert_eq!((c.opcode, c.byte_cnt), (CqeOpcode::RESP_SEND, 8));
        let j = dcis
            .iter()
            .position(|d| d.qp.qpn() == c.flags_rqpn & 0xff_ffff)
            .expect("the source is one of the DCIs");
        assert!(seen.insert(j), "one SEND per DCI");
        let off = at[&c.wqe_counter];
        assert_eq!(
            r.dst[off..off + 8],
            r.src[j * 8..j * 8 + 8],
            "DCI {j}'s bytes"
        );
    }
    for d in &mut dcis {
        let c = drain(&mut d.cqp);
        assert_eq!((c.len(), c[0].syndrome), (1, Syndrome(0)));
    }
}

/// A SEND longer than the DCT's receive: the receive completes with a
/// local length error on the DCT's CQ, the DCI's WQE with a remote invalid
/// request (as RC's); the DCT stays in RTR and takes the next SEND.
#[test]
fn send_too_long_for_the_receive_spares_the_dct() {
    let r = rig();
    let mut t = r.dct(Access::LOCAL_WRITE, KEY, true);
    let g = seg(t.qp.dctn().unwrap(), KEY);
    r.recv(&mut t, 0, 8, 1);
    r.recv(&mut t, 64, 64, 2);
    let mut d = r.dci(7);
    let sge = [r.sge(0, 32)];
    post(
        &mut d,
        &wqe(&g, WqeOpcode::SEND, None, Payload::Sges(&sge)),
        1,
    );
    r.dev.process();
    let c = drain(&mut d.cqp);
    assert_eq!(c[0].syndrome, Syndrome::REMOTE_INVAL_REQ_ERR);
    let rc = drain(&mut t.cqp);
    assert_eq!(
        (rc[0].opcode, rc[0].syndrome),
        (CqeOpcode::RESP_ERR, Syndrome::LOCAL_LENGTH_ERR)
    );
    assert_eq!(t.qp.state(), QpState::Rtr);
    let mut e = r.dci(7);
    post(
        &mut e,
        &wqe(&g, WqeOpcode::SEND, None, Payload::Sges(&sge)),
        2,
    );
    r.dev.process();
    assert_eq!(drain(&mut e.cqp)[0].syndrome, Syndrome(0));
    let rc = drain(&mut t.cqp);
    assert_eq!((rc[0].opcode, rc[0].byte_cnt), (CqeOpcode::RESP_SEND, 32));
    assert_eq!(r.dst[64..96], r.src[0..32]);
}

/// Scatter to CQE is never in force on a DCI or a DCT.
#[test]
fn no_scatter_to_cqe_on_dc() {
    let r = rig();
    let cq = r.dev.create_cq(16, 64).unwrap();
    let srq = r.dev.create_srq(PD, 3, 1).unwrap();
    let dct = r.dev.create_dct(PD, &cq, &srq, KEY).unwrap();
    let dci = r.dev.create_dci(PD, &cq, 8).unwrap();
    assert_eq!(dct.set_scatter_to_cqe(true, true), Ok((false, false)));
    assert_eq!(dci.set_scatter_to_cqe(true, true), Ok((false, false)));
}

/// On the device thread ([`Device::start`]) as on [`Device::process`]: two
/// DCIs' SENDs land in one DCT's SRQ, each naming its DCI.
#[test]
fn dc_runs_on_the_device_thread() {
    let r = rig();
    let mut t = r.dct(Access::LOCAL_WRITE, KEY, true);
    let g = seg(t.qp.dctn().unwrap(), KEY);
    r.recv(&mut t, 0, 16, 1);
    r.recv(&mut t, 16, 16, 2);
    let (mut a, mut b) = (r.dci(7), r.dci(7));
    r.dev.start().unwrap();
    let (sa, sb) = ([r.sge(0, 16)], [r.sge(16, 16)]);
    post(
        &mut a,
        &wqe(&g, WqeOpcode::SEND, None, Payload::Sges(&sa)),
        1,
    );
    post(
        &mut b,
        &wqe(&g, WqeOpcode::SEND, None, Payload::Sges(&sb)),
        2,
    );
    let mut got = Vec::new();
    let t0 = std::time::Instant::now();
    while got.len() < 2 && t0.elapsed() < Duration::from_secs(5) {
        got.extend(drain(&mut t.cqp));
        std::thread::yield_now();
    }
    r.dev.stop();
    assert_eq!(got.len(), 2, "both SENDs received");
    let mut srcs: Vec<u32> = got.iter().map(|c| c.flags_rqpn & 0xff_ffff).collect();
    srcs.sort_unstable();
    let mut want = vec![a.qp.qpn(), b.qp.qpn()];
    want.sort_unstable();
    assert_eq!(srcs, want);
    assert_eq!(drain(&mut a.cqp)[0].syndrome, Syndrome(0));
    assert_eq!(drain(&mut b.cqp)[0].syndrome, Syndrome(0));
}
