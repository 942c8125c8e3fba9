//! `Qp::post_send` of one UD SEND built in place (the SQ's UD gate open: a
//! UD QP in RTS or ERR whose CQ needs no credits counted) against the
//! other paths that post the same WRs: the counted in-place post (a CQ
//! shallower than the QP's WR limits) and the checked path (batches): the
//! same WQE bytes and doorbell record, the same completions; and the WRs
//! the in-place post declines, posted or refused as the checked path does,
//! a refusal writing nothing.

use rdma_direct::testing::QpHooks;
use rdma_direct::*;

#[path = "support/posts.rs"]
mod support;
use support::*;
#[path = "support/transports.rs"]
mod transports;
use transports::*;

/// A UD QP in RTS, `max_send_wr` 8 (a 16-WQEBB ring that UD's two-WQEBB
/// WQEs wrap), on a CQ of `cq_depth` CQEs (a shallow one counts credits).
fn ud_qp(pd: &Pd, cq_depth: Option<u32>) -> Qp {
    let mut q = pd
        .create_qp(&QpConfig {
            max_send_wr: 8,
            cq_depth,
            ..ud_cfg()
        })
        .unwrap();
    q.ready_ud(QKEY).unwrap();
    q
}

/// The `i`th WR of a stream: lengths 1 to the MTU, with and without an
/// immediate, signaled or not, solicited and fenced in turn.
fn nth<'a>(i: u64, sges: &'a [[Sge<'a>; 1]], d: UdDest<'a>) -> SendWr<'a> {
    let mut w = SendWr::ud_send(i, &sges[i as usize % sges.len()], d);
    if i % 3 == 1 {
        w = w.imm(0x1000 + i as u32);
    }
    if i.is_multiple_of(2) {
        w = w.signaled();
    }
    if i.is_multiple_of(5) {
        w = w.solicited();
    }
    if i.is_multiple_of(7) {
        w = w.fence();
    }
    w
}

#[test]
fn ud_in_place_writes_what_the_counted_and_checked_posts_write() {
    let e = env();
    let pd = &e.pd;
    let mut fast = ud_qp(pd, None);
    let mut counted = ud_qp(pd, Some(4));
    let mut checked = ud_qp(pd, None);
    let peer = ud_qp(pd, None);
    let ah = pd.create_ah(&fast.av_to(&peer.endpoint())).unwrap();
    let d = dest(&ah, peer.qp_num());
    let lens = [1u32, 7, 64, 1000, 4096];
    let sges: Vec<[Sge; 1]> = lens
        .iter()
        .map(|&l| [Sge::new(&e.src, 0, l).unwrap()])
        .collect();
    // Rounds of two WRs: single posts on `fast` and `counted`, a batch of
    // two (the checked path) on `checked`, polled between rounds, so that
    // the ring wraps many times (a signaled WR retires the unsignaled one
    // before it). The counted QP's WQEs may differ by a CQE asked for when
    // its credits run low (hidden): its completions are compared.
    for round in 0..40u64 {
        let (w1, w2) = (nth(2 * round, &sges, d), nth(2 * round + 1, &sges, d));
        for q in [&mut fast, &mut counted] {
            q.post_send(&[w1]).unwrap();
            q.post_send(&[w2]).unwrap();
        }
        checked.post_send(&[w1, w2]).unwrap();
        assert_same_wqes(&fast, &checked);
        let want = [w1, w2]
            .iter()
            .filter(|w| w.flags.contains(SendFlags::SIGNALED))
            .count();
        let ids = |q: &mut Qp| {
            poll_n(q, want)
                .iter()
                .map(|c| (c.wr_id, c.status))
                .collect::<Vec<_>>()
        };
        let got = ids(&mut checked);
        assert_eq!(ids(&mut fast), got, "round {round}, in place");
        assert_eq!(ids(&mut counted), got, "round {round}, counted");
    }
    for q in [&mut fast, &mut counted, &mut checked] {
        assert!(drain(q).is_empty());
    }
}

/// What the in-place UD post declines (inline, two SGEs, an SGE of no
/// bytes, of another PD or of plain bytes, over the MTU, an AH of another
/// PD, a QPN over 24 bits, an RC opcode) is posted or refused as the
/// checked path does it; a refusal writes nothing.
#[test]
fn ud_in_place_declines_what_it_does_not_check() {
    let e = env();
    let pd = &e.pd;
    let mut fast = ud_qp(pd, None);
    let mut checked = ud_qp(pd, None);
    let peer = ud_qp(pd, None);
    let ah = pd.create_ah(&fast.av_to(&peer.endpoint())).unwrap();
    let pd2 = e.ctx.alloc_pd().unwrap();
    let ah2 = pd2.create_ah(&fast.av_to(&peer.endpoint())).unwrap();
    let mr2 = pd2.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let big = e.pd.alloc_mr(8192, Access::LOCAL_WRITE).unwrap();
    let d = dest(&ah, peer.qp_num());
    let one = [Sge::new(&e.src, 0, 32).unwrap()];
    let two = [
        Sge::new(&e.src, 0, 32).unwrap(),
        Sge::new(&e.src, 64, 16).unwrap(),
    ];
    let empty = [Sge::new(&e.src, 0, 0).unwrap()];
    let foreign = [Sge::new(&mr2, 0, 32).unwrap()];
    let bytes_buf = [7u8; 40];
    let bytes = [Sge::bytes(&bytes_buf).unwrap()];
    let over = [Sge::new(&big, 0, 4097).unwrap()];
    let to = to(&e.dst, 0);
    let cases: Vec<(&str, SendWr)> = vec![
        ("inline", SendWr::ud_send(1, &bytes, d).inline().signaled()),
        ("two SGEs", SendWr::ud_send(2, &two, d).signaled()),
        ("no bytes", SendWr::ud_send(3, &empty, d).signaled()),
        (
            "SGE of another PD",
            SendWr::ud_send(4, &foreign, d).signaled(),
        ),
        (
            "plain bytes, not inline",
            SendWr::ud_send(5, &bytes, d).signaled(),
        ),
        ("over the MTU", SendWr::ud_send(6, &over, d).signaled()),
        (
            "AH of another PD",
            SendWr::ud_send(7, &one, dest(&ah2, peer.qp_num())).signaled(),
        ),
        (
            "QPN over 24 bits",
            SendWr::ud_send(8, &one, dest(&ah, 1 << 24)).signaled(),
        ),
        ("an RC WRITE", SendWr::rdma_write(9, &one, to).signaled()),
        ("an RC SEND", SendWr::send(10, &one).signaled()),
    ];
    let good = SendWr::ud_send(99, &one, d).signaled();
    for (what, w) in cases {
        let before = fast.sq_snapshot().unwrap();
        let r = fast.post_send(&[w]);
        // The checked path's verdict: the same WR in a batch with a good
        // one after it (all or nothing).
        let c = checked.post_send(&[w, good]);
        match (&r, &c) {
            (Ok(()), Ok(())) => {
                fast.post_send(&[good]).unwrap();
                let _ = poll_n(&mut fast, 2);
                let _ = poll_n(&mut checked, 2);
            }
            (Err(a), Err(b)) => {
                assert_eq!(
                    std::mem::discriminant(a),
                    std::mem::discriminant(b),
                    "{what}: {a:?} / {b:?}"
                );
                assert!(
                    fast.sq_snapshot().unwrap() == before,
                    "{what}: refused, yet written"
                );
            }
            _ => panic!("{what}: in place {r:?}, checked {c:?}"),
        }
        assert_same_wqes(&fast, &checked);
    }
}
