//! DC on the sim, driven by the ring driver with WQEs the codec writes
//! (`Datagram::Dc` of `dc_datagram_seg`): SENDs into a DCT's SRQ naming
//! their DCI, WRITE / READ / atomics through a DCT, several DCIs and DCTs,
//! each bad address failing on the DCI with nothing delivered and the
//! DCI's later WQEs flushed, the DCT number before RTR, the DCT's refused
//! moves, RNR on an empty SRQ, and a DCI reset and reused.

use super::*;
use crate::cqe::Cqe;
use crate::driver::{CompletionQueue, SendQueue, SharedReceiveQueue};
use crate::prm::{CqeOpcode, CtrlFlags, Syndrome, WqeOpcode};
use crate::wqe::{
    dc_datagram_seg, AtomicSeg, DataSeg, Datagram, Payload, RemoteSeg, SendWqe, DATAGRAM_SEG,
};
use std::time::Duration;

pub(super) const PD: u32 = 5;
pub(super) const KEY: u64 = 0x0123_4567_89ab_cdef;
pub(super) const BUF: usize = 4096;

/// A DCI with its CQ, its send queue driver and its CQ poller.
pub(super) struct Dci {
    pub(super) qp: Qp,
    pub(super) _cq: Cq,
    pub(super) sq: SendQueue,
    pub(super) cqp: CompletionQueue,
}

/// A DCT on an SRQ, with the SRQ's and the CQ's drivers.
pub(super) struct Dct {
    pub(super) qp: Qp,
    pub(super) _cq: Cq,
    pub(super) cqp: CompletionQueue,
    pub(super) _srq: Srq,
    pub(super) srq_ring: SharedReceiveQueue,
}

/// The device, the DCIs' source buffer and the targets' buffer (in one PD).
pub(super) struct Rig {
    pub(super) dev: Device,
    pub(super) src: Vec<u8>,
    pub(super) dst: Vec<u8>,
    pub(super) ks: MrKeys,
    pub(super) kd: MrKeys,
}

pub(super) fn rig() -> Rig {
    let dev = Device::new();
    let mut src: Vec<u8> = (0..BUF as u32).map(|i| (i * 7 + 1) as u8).collect();
    let mut dst = vec![0u8; BUF];
    // SAFETY: the Vecs live in the rig, which outlives all device work
    // (done only inside `dev.process()` calls while the rig lives).
    let ks = unsafe { dev.reg_mr(PD, src.as_mut_ptr(), BUF, Access::LOCAL_WRITE) }.unwrap();
    // SAFETY: as above.
    let kd = unsafe { dev.reg_mr(PD, dst.as_mut_ptr(), BUF, Access::MR_ALL) }.unwrap();
    Rig {
        dev,
        src,
        dst,
        ks,
        kd,
    }
}

impl Rig {
    /// A DCI in RTS retrying RNR NAKs `rnr_retry` times.
    pub(super) fn dci(&self, rnr_retry: u8) -> Dci {
        let cq = self.dev.create_cq(64, 64).unwrap();
        let qp = self.dev.create_dci(PD, &cq, 64).unwrap();
        assert_eq!(qp.dv().rq.wqe_cnt, 0, "a DCI has no receive queue");
        qp.to_init(Access::empty()).unwrap();
        qp.to_rtr_dci().unwrap();
        qp.to_rts_with(rnr_retry).unwrap();
        // SAFETY: the descriptions come from the sim objects the Dci keeps;
        // the drivers touch ring memory only when called.
        let sq = unsafe { SendQueue::new(&qp.dv(), qp.qpn(), 128, 32) }.unwrap();
        // SAFETY: as above.
        let cqp = unsafe { CompletionQueue::new(&cq.dv()) }.unwrap();
        Dci {
            qp,
            _cq: cq,
            sq,
            cqp,
        }
    }

    /// A DCT with `access` and `key`, left in INIT (`rtr`: false) or RTR,
    /// on an SRQ of 15 receives and a CQ of 64 CQEs.
    pub(super) fn dct(&self, access: Access, key: u64, rtr: bool) -> Dct {
        self.dct_sized(access, key, rtr, 15, 64)
    }

    /// [`Self::dct`] on an SRQ of `srq_wr` receives and a CQ of `cqes` CQEs.
    pub(super) fn dct_sized(
        &self,
        access: Access,
        key: u64,
        rtr: bool,
        srq_wr: u32,
        cqes: u32,
    ) -> Dct {
        let cq = self.dev.create_cq(cqes, 64).unwrap();
        let srq = self.dev.create_srq(PD, srq_wr, 1).unwrap();
        let qp = self.dev.create_dct(PD, &cq, &srq, key).unwrap();
        assert!(qp.is_dct() && !qp.is_dci());
        assert_eq!(qp.dv().sq.wqe_cnt, 0, "a DCT has no SQ");
        assert_eq!(qp.dv().rq.wqe_cnt, 0, "a DCT has no RQ");
        qp.to_init_dct(access, 1).unwrap();
        if rtr {
            qp.to_rtr_dct(Duration::from_micros(10)).unwrap();
        }
        // SAFETY: descriptions of sim objects the Dct keeps.
        let cqp = unsafe { CompletionQueue::new(&cq.dv()) }.unwrap();
        // SAFETY: as above.
        let srq_ring = unsafe { SharedReceiveQueue::new(&srq.dv(), 1) }.unwrap();
        Dct {
            qp,
            _cq: cq,
            cqp,
            _srq: srq,
            srq_ring,
        }
    }

    /// Posts a receive of `len` bytes at `dst[off..]` on `t`'s SRQ.
    pub(super) fn recv(&self, t: &mut Dct, off: usize, len: u32, wr_id: u64) {
        let seg = [DataSeg {
            addr: self.dst.as_ptr() as u64 + off as u64,
            len,
            lkey: self.kd.lkey,
        }];
        t.srq_ring.post(&seg, wr_id).unwrap();
        t.srq_ring.ring_doorbell();
    }

    pub(super) fn sge(&self, off: usize, len: u32) -> DataSeg {
        DataSeg {
            addr: self.src.as_ptr() as u64 + off as u64,
            len,
            lkey: self.ks.lkey,
        }
    }

    pub(super) fn raddr(&self, off: usize) -> RemoteSeg {
        RemoteSeg {
            addr: self.dst.as_ptr() as u64 + off as u64,
            rkey: self.kd.rkey,
        }
    }
}

/// The datagram segment addressing DCT number `dctn` with `key` (on an AV
/// of zeros: the sim has no wire).
pub(super) fn seg(dctn: u32, key: u64) -> [u8; DATAGRAM_SEG] {
    dc_datagram_seg(&[0; DATAGRAM_SEG], dctn, key).unwrap()
}

/// A signaled WQE of `opcode` through `dg`.
pub(super) fn wqe<'a>(
    dg: &'a [u8; DATAGRAM_SEG],
    opcode: WqeOpcode,
    remote: Option<RemoteSeg>,
    payload: Payload<'a>,
) -> SendWqe<'a> {
    SendWqe {
        datagram: Some(Datagram::Dc(dg)),
        masked: None,
        atomic: None,
        opcode,
        flags: CtrlFlags::CQ_UPDATE,
        imm: 0,
        remote,
        payload,
    }
}

/// Posts `w` as `wr_id` and rings the doorbell.
pub(super) fn post(d: &mut Dci, w: &SendWqe<'_>, wr_id: u64) {
    d.sq.post(w, wr_id).unwrap();
    d.sq.ring_doorbell();
}

/// Every CQE written so far on a poller.
pub(super) fn drain(cqp: &mut CompletionQueue) -> Vec<Cqe> {
    let mut v = Vec::new();
    while let Some(c) = cqp.poll_one() {
        v.push(c);
    }
    cqp.update_ci();
    v
}

/// A DCI's CQEs with the wr_id each retires.
pub(super) fn completions(d: &mut Dci) -> Vec<(Cqe, u64)> {
    drain(&mut d.cqp)
        .into_iter()
        .map(|c| {
            let r =
                d.sq.complete(c.wqe_counter)
                    .expect("a CQE names a posted WQE");
            (c, r.wr_id)
        })
        .collect()
}

#[test]
fn send_lands_in_the_dcts_srq_and_names_the_dci() {
    let r = rig();
    let mut t = r.dct(Access::LOCAL_WRITE, KEY, true);
    let mut d = r.dci(7);
    let dctn = t.qp.dctn().unwrap();
    r.recv(&mut t, 100, 64, 9);
    let g = seg(dctn, KEY);
    let sge = [r.sge(10, 40)];
    let mut w = wqe(&g, WqeOpcode::SEND_IMM, None, Payload::Sges(&sge));
    w.imm = 0xdead_beef;
    post(&mut d, &w, 1);
    r.dev.process();
    let c = completions(&mut d);
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].0.opcode, c[0].0.syndrome, c[0].1),
        (CqeOpcode::REQ, Syndrome(0), 1)
    );
    assert_eq!(c[0].0.qpn, d.qp.qpn());
    let rc = drain(&mut t.cqp);
    assert_eq!(rc.len(), 1);
    assert_eq!(rc[0].opcode, CqeOpcode::RESP_SEND_IMM);
    assert_eq!(rc[0].byte_cnt, 40);
    assert_eq!(rc[0].imm, 0xdead_beef);
    assert_eq!(rc[0].qpn, dctn, "the receive CQE names the DCT");
    assert_eq!(
        rc[0].flags_rqpn & 0xff_ffff,
        d.qp.qpn(),
        "and its source, the DCI"
    );
    assert_eq!(r.dst[100..140], r.src[10..50]);
    assert_eq!(t.qp.state(), QpState::Rtr);
}

#[test]
fn write_read_and_atomics_through_a_dct() {
    let mut r = rig();
    let t = r.dct(
        Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
        KEY,
        true,
    );
    let mut d = r.dci(7);
    let g = seg(t.qp.dctn().unwrap(), KEY);
    // WRITE (SGE) and inline WRITE.
    let sge = [r.sge(0, 300)];
    post(
        &mut d,
        &wqe(
            &g,
            WqeOpcode::RDMA_WRITE,
            Some(r.raddr(1000)),
            Payload::Sges(&sge),
        ),
        1,
    );
    post(
        &mut d,
        &wqe(
            &g,
            WqeOpcode::RDMA_WRITE,
            Some(r.raddr(2000)),
            Payload::Inline(b"inline!"),
        ),
        2,
    );
    r.dev.process();
    assert_eq!(r.dst[1000..1300], r.src[0..300]);
    assert_eq!(&r.dst[2000..2007], b"inline!");
    // READ back into the source buffer.
    r.dst[3000..3016].copy_from_slice(&[0x5a; 16]);
    let into = [r.sge(500, 16)];
    post(
        &mut d,
        &wqe(
            &g,
            WqeOpcode::RDMA_READ,
            Some(r.raddr(3000)),
            Payload::Sges(&into),
        ),
        3,
    );
    // Atomics on the u64 at dst[at], 8-byte aligned (a Vec<u8> need not
    // be: Miri places it anywhere).
    let at = 3200 + (r.dst.as_ptr() as usize).wrapping_neg() % 8;
    r.dst[at..at + 8].copy_from_slice(&40u64.to_ne_bytes());
    let old = [r.sge(600, 8)];
    let mut fa = wqe(
        &g,
        WqeOpcode::ATOMIC_FA,
        Some(r.raddr(at)),
        Payload::Sges(&old),
    );
    fa.atomic = Some(AtomicSeg {
        swap_add: 2,
        compare: 0,
    });
    post(&mut d, &fa, 4);
    r.dev.process();
    assert_eq!(r.src[500..516], [0x5a; 16]);
    assert_eq!(u64::from_ne_bytes(r.src[600..608].try_into().unwrap()), 40);
    let old2 = [r.sge(608, 8)];
    let mut cs = wqe(
        &g,
        WqeOpcode::ATOMIC_CS,
        Some(r.raddr(at)),
        Payload::Sges(&old2),
    );
    cs.atomic = Some(AtomicSeg {
        swap_add: 7,
        compare: 42,
    });
    post(&mut d, &cs, 5);
    r.dev.process();
    assert_eq!(u64::from_ne_bytes(r.src[608..616].try_into().unwrap()), 42);
    assert_eq!(u64::from_ne_bytes(r.dst[at..at + 8].try_into().unwrap()), 7);
    let c = completions(&mut d);
    let ids: Vec<u64> = c.iter().map(|x| x.1).collect();
    assert_eq!(ids, [1, 2, 3, 4, 5]);
    assert!(c.iter().all(|x| x.0.opcode == CqeOpcode::REQ));
    assert_eq!(c[2].0.byte_cnt, 16);
}

#[test]
fn write_imm_consumes_a_receive_of_the_srq() {
    let r = rig();
    let mut t = r.dct(Access::REMOTE_WRITE, KEY, true);
    let mut d = r.dci(7);
    r.recv(&mut t, 0, 16, 1);
    let g = seg(t.qp.dctn().unwrap(), KEY);
    let mut w = wqe(
        &g,
        WqeOpcode::RDMA_WRITE_IMM,
        Some(r.raddr(512)),
        Payload::Inline(b"abc"),
    );
    w.imm = 77;
    post(&mut d, &w, 1);
    r.dev.process();
    assert_eq!(&r.dst[512..515], b"abc");
    let rc = drain(&mut t.cqp);
    assert_eq!(rc.len(), 1);
    assert_eq!(
        (rc[0].opcode, rc[0].imm, rc[0].byte_cnt),
        (CqeOpcode::RESP_WR_IMM, 77, 3)
    );
    assert_eq!(rc[0].flags_rqpn & 0xff_ffff, d.qp.qpn());
}

/// A remote access error (the DCT lacks REMOTE_READ; a bad rkey) fails the
/// DCI's WQE as RC's, touches nothing, and leaves the DCT serving others.
#[test]
fn remote_access_errors_fail_the_dci_and_spare_the_dct() {
    let r = rig();
    let t = r.dct(Access::REMOTE_WRITE, KEY, true);
    let g = seg(t.qp.dctn().unwrap(), KEY);
    let mut d = r.dci(7);
    let into = [r.sge(0, 8)];
    post(
        &mut d,
        &wqe(
            &g,
            WqeOpcode::RDMA_READ,
            Some(r.raddr(0)),
            Payload::Sges(&into),
        ),
        1,
    );
    r.dev.process();
    let c = completions(&mut d);
    assert_eq!(
        (c[0].0.opcode, c[0].0.syndrome),
        (CqeOpcode::REQ_ERR, Syndrome::REMOTE_ACCESS_ERR)
    );
    assert_eq!(d.qp.state(), QpState::Err);
    assert_eq!(t.qp.state(), QpState::Rtr);
    let mut e = r.dci(7);
    let mut bad = r.raddr(0);
    bad.rkey ^= 0x100;
    post(
        &mut e,
        &wqe(&g, WqeOpcode::RDMA_WRITE, Some(bad), Payload::Inline(b"x")),
        1,
    );
    r.dev.process();
    assert_eq!(
        completions(&mut e)[0].0.syndrome,
        Syndrome::REMOTE_ACCESS_ERR
    );
    assert!(r.dst.iter().all(|&b| b == 0));
    // The DCT still takes a good WRITE from a third DCI.
    let mut f = r.dci(7);
    post(
        &mut f,
        &wqe(
            &g,
            WqeOpcode::RDMA_WRITE,
            Some(r.raddr(8)),
            Payload::Inline(b"ok"),
        ),
        1,
    );
    r.dev.process();
    assert_eq!(completions(&mut f)[0].0.syndrome, Syndrome(0));
    assert_eq!(&r.dst[8..10], b"ok");
}

#[test]
fn two_dcis_to_one_dct_and_one_dci_to_two_dcts() {
    let r = rig();
    let mut t1 = r.dct(Access::LOCAL_WRITE, KEY, true);
    let mut t2 = r.dct(Access::LOCAL_WRITE, KEY ^ 1, true);
    let (n1, n2) = (t1.qp.dctn().unwrap(), t2.qp.dctn().unwrap());
    assert_ne!(n1, n2);
    let (mut a, mut b) = (r.dci(7), r.dci(7));
    for i in 0..4 {
        r.recv(&mut t1, i * 16, 16, i as u64);
    }
    r.recv(&mut t2, 64, 16, 9);
    let (g1, g2) = (seg(n1, KEY), seg(n2, KEY ^ 1));
    let s = |o| [r.sge(o, 4)];
    let (s0, s1, s2, s3) = (s(0), s(4), s(8), s(12));
    // A: t1, t2, t1 WQE by WQE; B: t1 twice.
    post(
        &mut a,
        &wqe(&g1, WqeOpcode::SEND, None, Payload::Sges(&s0)),
        1,
    );
    post(
        &mut a,
        &wqe(&g2, WqeOpcode::SEND, None, Payload::Sges(&s1)),
        2,
    );
    post(
        &mut a,
        &wqe(&g1, WqeOpcode::SEND, None, Payload::Sges(&s2)),
        3,
    );
    post(
        &mut b,
        &wqe(&g1, WqeOpcode::SEND, None, Payload::Sges(&s3)),
        4,
    );
    post(
        &mut b,
        &wqe(&g1, WqeOpcode::SEND, None, Payload::Sges(&s0)),
        5,
    );
    r.dev.process();
    for (d, ids) in [(&mut a, vec![1, 2, 3]), (&mut b, vec![4, 5])] {
        let c = completions(d);
        assert!(c.iter().all(|x| x.0.syndrome == Syndrome(0)));
        assert_eq!(c.iter().map(|x| x.1).collect::<Vec<_>>(), ids);
    }
    let srcs: Vec<u32> = drain(&mut t1.cqp)
        .iter()
        .map(|c| c.flags_rqpn & 0xff_ffff)
        .collect();
    let (qa, qb) = (a.qp.qpn(), b.qp.qpn());
    // The sim runs A's SQ, then B's: A's two SENDs to t1, then B's two.
    assert_eq!(srcs, [qa, qa, qb, qb]);
    let c2 = drain(&mut t2.cqp);
    assert_eq!(c2.len(), 1);
    assert_eq!(c2[0].flags_rqpn & 0xff_ffff, qa);
    assert_eq!(r.dst[64..68], r.src[4..8]);
}

/// Each bad address (wrong key, unknown DCT number, number 0, a DCT in
/// INIT) fails the DCI's WQE with `DC_ADDRESS_SYNDROME`; the DCI goes to
/// ERR and flushes its later WQEs with their own wr_ids; no target sees
/// anything: no receive consumed, no byte written.
#[test]
fn bad_addresses_fail_on_the_dci_and_deliver_nothing() {
    for case in ["wrong key", "unknown DCTN", "DCTN 0", "DCT in INIT"] {
        let r = rig();
        let mut t = r.dct(Access::LOCAL_WRITE | Access::REMOTE_WRITE, KEY, true);
        let mut init = r.dct(Access::LOCAL_WRITE | Access::REMOTE_WRITE, KEY, false);
        assert_eq!(init.qp.dctn(), None);
        r.recv(&mut t, 0, 64, 1);
        r.recv(&mut init, 64, 64, 2);
        let n = t.qp.dctn().unwrap();
        let bad = match case {
            "wrong key" => seg(n, KEY ^ 0x8000_0000_0000_0000),
            // Past every number the device gave (QPNs count up).
            "unknown DCTN" => seg(init.qp.qpn() + 100, KEY),
            "DCTN 0" => seg(0, KEY),
            // The number it will get at RTR (the sim's: its QPN).
            _ => seg(init.qp.qpn(), KEY),
        };
        let good = seg(n, KEY);
        let mut d = r.dci(7);
        let sge = [r.sge(0, 8)];
        post(
            &mut d,
            &wqe(&bad, WqeOpcode::SEND, None, Payload::Sges(&sge)),
            10,
        );
        let mut w = wqe(
            &good,
            WqeOpcode::RDMA_WRITE,
            Some(r.raddr(200)),
            Payload::Inline(b"no"),
        );
        w.flags = CtrlFlags::empty();
        post(&mut d, &w, 11);
        post(
            &mut d,
            &wqe(&good, WqeOpcode::SEND, None, Payload::Sges(&sge)),
            12,
        );
        r.dev.process();
        let c = completions(&mut d);
        assert_eq!(
            c.len(),
            3,
            "{case}: the error, then a flush per WQE, signaled or not"
        );
        assert_eq!(
            (c[0].0.opcode, c[0].0.syndrome, c[0].1),
            (CqeOpcode::REQ_ERR, DC_ADDRESS_SYNDROME, 10),
            "{case}"
        );
        for (x, id) in c[1..].iter().zip([11, 12]) {
            assert_eq!((x.0.syndrome, x.1), (Syndrome::WR_FLUSH_ERR, id), "{case}");
        }
        assert_eq!(d.qp.state(), QpState::Err, "{case}");
        assert!(drain(&mut t.cqp).is_empty(), "{case}: nothing received");
        assert!(drain(&mut init.cqp).is_empty(), "{case}: nothing received");
        assert!(r.dst.iter().all(|&b| b == 0), "{case}: nothing written");
        assert_eq!(
            (t.qp.state(), init.qp.state()),
            (QpState::Rtr, QpState::Init)
        );
        // The DCT's receive is still there for a good SEND.
        let mut e = r.dci(7);
        post(
            &mut e,
            &wqe(&good, WqeOpcode::SEND, None, Payload::Sges(&sge)),
            1,
        );
        r.dev.process();
        assert_eq!(completions(&mut e)[0].0.syndrome, Syndrome(0), "{case}");
        let rc = drain(&mut t.cqp);
        assert_eq!(
            (rc.len(), rc[0].opcode),
            (1, CqeOpcode::RESP_SEND),
            "{case}"
        );
    }
}

/// The DCT number is `None` until RTR; a DCT moves only RESET -> INIT ->
/// RTR (never RTS, SQD, ERR or back to RESET); DCT and DCI calls are
/// refused on the other kind and on RC QPs; a DC QP takes no connected peer.
#[test]
fn dct_number_and_refused_moves() {
    let r = rig();
    let cq = r.dev.create_cq(16, 64).unwrap();
    let srq = r.dev.create_srq(PD, 3, 1).unwrap();
    let t = r.dev.create_dct(PD, &cq, &srq, KEY).unwrap();
    assert_eq!(t.dctn(), None, "no DCT number at creation");
    assert_eq!(
        t.to_rtr_dct(Duration::ZERO),
        Err(SimError::BadTransition {
            from: QpState::Reset,
            to: QpState::Rtr
        })
    );
    assert!(matches!(
        t.to_init_dct(Access::REMOTE_WRITE, 2),
        Err(SimError::BadSize { what: "port", .. })
    ));
    t.to_init_dct(Access::REMOTE_WRITE, 1).unwrap();
    assert_eq!(t.dctn(), None, "none in INIT");
    t.to_rtr_dct(Duration::ZERO).unwrap();
    let n = t.dctn().expect("a number at RTR");
    assert!(n != 0 && n <= 0xff_ffff);
    let refused = |to| {
        Err(SimError::BadTransition {
            from: QpState::Rtr,
            to,
        })
    };
    assert_eq!(t.to_rts(), refused(QpState::Rts), "a DCT never goes to RTS");
    assert_eq!(t.to_sqd(false), refused(QpState::Sqd));
    assert_eq!(t.to_err(), refused(QpState::Err));
    assert_eq!(t.to_reset(), refused(QpState::Reset));
    assert_eq!((t.state(), t.dctn()), (QpState::Rtr, Some(n)));
    assert!(matches!(t.to_rtr_dci(), Err(SimError::Unsupported { .. })));
    let dci = r.dev.create_dci(PD, &cq, 8).unwrap();
    assert!(dci.is_dci() && !dci.is_dct());
    assert_eq!(dci.dctn(), None);
    assert!(matches!(
        dci.to_init_dct(Access::empty(), 1),
        Err(SimError::Unsupported { .. })
    ));
    dci.to_init(Access::empty()).unwrap();
    assert!(
        matches!(dci.to_rtr(n), Err(SimError::Unsupported { .. })),
        "no peer on a DCI"
    );
    assert!(matches!(
        dci.to_rtr_dct(Duration::ZERO),
        Err(SimError::Unsupported { .. })
    ));
    let rc = r.dev.create_qp(PD, &cq, 8).unwrap();
    rc.to_init(Access::empty()).unwrap();
    assert!(
        matches!(rc.to_rtr(n), Err(SimError::Unsupported { .. })),
        "no RC peer a DCT"
    );
    assert!(matches!(rc.to_rtr_dci(), Err(SimError::Unsupported { .. })));
    assert_eq!(Syndrome::TRANSPORT_RETRY_EXC_ERR, DC_ADDRESS_SYNDROME);
}

/// A SEND finding the DCT's SRQ empty: with `rnr_retry` 0 it fails at
/// once with RNR_RETRY_EXC_ERR (the DCT stays in RTR); with 7 it waits
/// until a receive is posted.
#[test]
fn rnr_on_an_empty_srq() {
    let r = rig();
    let mut t = r.dct(Access::LOCAL_WRITE, KEY, true);
    let g = seg(t.qp.dctn().unwrap(), KEY);
    let sge = [r.sge(0, 32)];
    let mut d = r.dci(0);
    post(
        &mut d,
        &wqe(&g, WqeOpcode::SEND, None, Payload::Sges(&sge)),
        1,
    );
    r.dev.process();
    let c = completions(&mut d);
    assert_eq!((c[0].0.syndrome, c[0].1), (Syndrome::RNR_RETRY_EXC_ERR, 1));
    assert_eq!((d.qp.state(), t.qp.state()), (QpState::Err, QpState::Rtr));
    let mut e = r.dci(7);
    post(
        &mut e,
        &wqe(&g, WqeOpcode::SEND, None, Payload::Sges(&sge)),
        2,
    );
    for _ in 0..3 {
        r.dev.process();
        std::thread::sleep(Duration::from_micros(20));
    }
    assert!(drain(&mut e.cqp).is_empty(), "waiting on RNR NAKs");
    r.recv(&mut t, 0, 64, 1);
    let done = tests_process_until(&r.dev, || e.cqp.has_cqe());
    assert!(done);
    let c = completions(&mut e);
    assert_eq!((c[0].0.syndrome, c[0].1), (Syndrome(0), 2));
    assert_eq!(r.dst[0..32], r.src[0..32]);
    assert_eq!(drain(&mut t.cqp)[0].flags_rqpn & 0xff_ffff, e.qp.qpn());
}

/// WQEs on a DCI not in RTS wait in its SQ (as an RC QP's); a DCI in ERR
/// is reset and reconnected (RESET -> INIT -> RTR -> RTS) and then runs
/// new WQEs.
#[test]
fn dci_waits_before_rts_and_is_reused_after_reset() {
    let r = rig();
    let t = r.dct(Access::REMOTE_WRITE, KEY, true);
    let g = seg(t.qp.dctn().unwrap(), KEY);
    let cq = r.dev.create_cq(16, 64).unwrap();
    let qp = r.dev.create_dci(PD, &cq, 16).unwrap();
    qp.to_init(Access::empty()).unwrap();
    qp.to_rtr_dci().unwrap();
    // SAFETY: descriptions of sim objects this test keeps; the drivers
    // touch ring memory only when called.
    let sq = unsafe { SendQueue::new(&qp.dv(), qp.qpn(), 128, 8) }.unwrap();
    // SAFETY: as above.
    let cqp = unsafe { CompletionQueue::new(&cq.dv()) }.unwrap();
    let mut d = Dci {
        qp,
        _cq: cq,
        sq,
        cqp,
    };
    post(
        &mut d,
        &wqe(
            &g,
            WqeOpcode::RDMA_WRITE,
            Some(r.raddr(0)),
            Payload::Inline(b"1"),
        ),
        1,
    );
    r.dev.process();
    assert!(
        drain(&mut d.cqp).is_empty() && r.dst[0] == 0,
        "nothing runs in RTR"
    );
    d.qp.to_rts().unwrap();
    r.dev.process();
    assert_eq!(completions(&mut d)[0].1, 1);
    assert_eq!(r.dst[0], b'1');
    // An error (DCT number 0), then the reset and reuse.
    let zero = seg(0, KEY);
    post(
        &mut d,
        &wqe(
            &zero,
            WqeOpcode::RDMA_WRITE,
            Some(r.raddr(1)),
            Payload::Inline(b"2"),
        ),
        2,
    );
    r.dev.process();
    assert_eq!(completions(&mut d)[0].0.syndrome, DC_ADDRESS_SYNDROME);
    d.qp.to_reset().unwrap();
    d.sq.reset();
    d.qp.to_init(Access::empty()).unwrap();
    d.qp.to_rtr_dci().unwrap();
    d.qp.to_rts().unwrap();
    post(
        &mut d,
        &wqe(
            &g,
            WqeOpcode::RDMA_WRITE,
            Some(r.raddr(2)),
            Payload::Inline(b"3"),
        ),
        3,
    );
    r.dev.process();
    let c = completions(&mut d);
    assert_eq!((c[0].0.syndrome, c[0].1), (Syndrome(0), 3));
    assert_eq!(&r.dst[..3], b"1\x003");
}

/// Steps the sim until `done` holds, for up to a second.
pub(super) fn tests_process_until(dev: &Device, mut done: impl FnMut() -> bool) -> bool {
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_secs(1) {
        dev.process();
        if done() {
            return true;
        }
        std::thread::yield_now();
    }
    false
}
