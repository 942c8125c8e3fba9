//! ODP on an SRQ (`odp.rs`), with the ring driver's policy (`driver/srq.rs`):
//! a receive into a non-resident buffer writes the page-fault CQE
//! (RESP_ERR, 0x22 / 0x93) for that WQE, the QP stays in RTS, the message
//! lands in the next WQE; the poller gives each faulted WQE back and the
//! owner reposts it, so every buffer completes, over many laps of the ring.

use super::*;
use crate::cqe::Cqe;
use crate::driver::{CompletionQueue, SendQueue, SharedReceiveQueue};
use crate::prm::{CqeOpcode, CtrlFlags, Syndrome, WqeOpcode, VENDOR_SYNDROME_ODP_PFAULT};
use crate::wqe::{DataSeg, Payload, SendWqe};

const PD: u32 = 5;
const PAGE: usize = ODP_PAGE as usize;

/// A sends to B, whose receives come from an SRQ of `max_wr` WQEs into
/// `pages` pages of an ODP MR (page-aligned).
struct Rig {
    dev: Device,
    _a: Qp,
    _acq: Cq,
    asq: SendQueue,
    b: Qp,
    bcq: Cq,
    bcqp: CompletionQueue,
    srq_ring: SharedReceiveQueue,
    srq: Srq,
    src: Vec<u8>,
    dst: Vec<u8>,
    /// `dst`'s first page-aligned byte.
    base: usize,
    ks: MrKeys,
    kd: MrKeys,
}

fn rig(max_wr: u32, pages: usize) -> Rig {
    let dev = Device::new();
    let acq = dev.create_cq(64, 64).unwrap();
    let bcq = dev.create_cq(64, 64).unwrap();
    let srq = dev.create_srq(PD, max_wr, 1).unwrap();
    let a = dev.create_qp(PD, &acq, 64).unwrap();
    let b = dev.create_qp_srq(PD, &bcq, 8, &srq).unwrap();
    for (x, y) in [(&a, &b), (&b, &a)] {
        x.to_init(Access::QP_ALL).unwrap();
        x.to_rtr_with(y.qpn(), std::time::Duration::ZERO).unwrap();
        x.to_rts().unwrap();
    }
    // SAFETY: descriptions of sim objects the rig keeps (dropped after
    // the drivers: the test ends with the rig).
    let (asq, bcqp, srq_ring) = unsafe {
        (
            SendQueue::new(&a.dv(), a.qpn(), 64, 64).unwrap(),
            CompletionQueue::new(&bcq.dv()).unwrap(),
            SharedReceiveQueue::new(&srq.dv(), 1).unwrap(),
        )
    };
    let mut src: Vec<u8> = (0..PAGE as u32).map(|i| (i * 3) as u8).collect();
    let mut dst = vec![0u8; (pages + 1) * PAGE];
    let base = PAGE - dst.as_ptr() as usize % PAGE;
    // SAFETY: the Vecs live in the rig, which outlives all device work.
    let ks = unsafe { dev.reg_mr(PD, src.as_mut_ptr(), PAGE, Access::LOCAL_WRITE) }.unwrap();
    let odp = Access::LOCAL_WRITE | Access::ON_DEMAND;
    // SAFETY: as above.
    let kd = unsafe { dev.reg_mr(PD, dst.as_mut_ptr().add(base), pages * PAGE, odp) }.unwrap();
    Rig {
        dev,
        _a: a,
        _acq: acq,
        asq,
        b,
        bcq,
        bcqp,
        srq_ring,
        srq,
        src,
        dst,
        base,
        ks,
        kd,
    }
}

impl Rig {
    /// A SEND of `len` bytes of the source from offset `off`.
    fn send(&mut self, off: usize, len: u32) {
        let sge = [DataSeg {
            addr: self.src.as_ptr() as u64 + off as u64,
            len,
            lkey: self.ks.lkey,
        }];
        let w = SendWqe {
            datagram: None,
            masked: None,
            atomic: None,
            opcode: WqeOpcode::SEND,
            flags: CtrlFlags::empty(),
            imm: 0,
            remote: None,
            payload: Payload::Sges(&sge),
        };
        self.asq.post(&w, 0).unwrap();
        self.asq.ring_doorbell();
        self.dev.process();
    }

    /// Posts a receive of page `page` of the ODP MR; returns its WQE.
    fn recv(&mut self, page: usize, wr_id: u64) -> u32 {
        let d = [DataSeg {
            addr: self.page_addr(page),
            len: PAGE as u32,
            lkey: self.kd.lkey,
        }];
        let i = self.srq_ring.post(&d, wr_id).unwrap();
        self.srq_ring.ring_doorbell();
        i
    }

    fn page_addr(&self, page: usize) -> u64 {
        self.dst.as_ptr() as u64 + (self.base + page * PAGE) as u64
    }

    fn page(&self, page: usize) -> &[u8] {
        &self.dst[self.base + page * PAGE..self.base + (page + 1) * PAGE]
    }

    /// B's CQEs written so far.
    fn cqes(&mut self) -> Vec<Cqe> {
        let mut v = Vec::new();
        while let Some(c) = self.bcqp.poll_one() {
            v.push(c);
        }
        self.bcqp.update_ci();
        v
    }

    /// The SRQ's doorbell record (its count of posts).
    fn dbrec(&self) -> u32 {
        // SAFETY: the SRQ's record, alive while the rig is.
        u32::from_be(unsafe { self.srq.dv().dbrec.read_volatile() })
    }
}

#[test]
fn an_srq_receive_into_a_non_resident_buffer_faults_and_lands_in_the_next_wqe() {
    let mut r = rig(7, 2);
    let slots = r.srq_ring.slots().clone();
    r.dev
        .advise_mr(
            PD,
            OdpAdvice::PrefetchWrite,
            &[(r.kd.lkey, r.page_addr(1), 8)],
        )
        .unwrap();
    assert_eq!(r.recv(0, 500), 0, "page 0: not resident");
    assert_eq!(r.recv(1, 501), 1, "page 1: prefetched");
    r.send(0, 100);
    let got = r.cqes();
    assert_eq!(got.len(), 2);
    let f = &got[0];
    assert_eq!(
        (f.opcode, f.wqe_counter, f.qpn),
        (CqeOpcode::RESP_ERR, 0, r.b.qpn())
    );
    assert_eq!(f.syndrome, Syndrome::REMOTE_ABORTED_ERR);
    assert_eq!(f.vendor_syndrome, VENDOR_SYNDROME_ODP_PFAULT);
    assert!(f.is_odp_fault());
    // Bytes 54 and 55 of the CQE as the device wrote them.
    let raw = r.bcq.hook_read_cqe(0);
    assert_eq!((raw[54], raw[55]), (0x93, 0x22));
    let c = &got[1];
    assert_eq!(
        (c.opcode, c.wqe_counter, c.byte_cnt),
        (CqeOpcode::RESP_SEND, 1, 100)
    );
    assert!(!c.is_odp_fault());
    assert_eq!(r.page(1)[..100], r.src[..100]);
    assert!(
        r.page(0).iter().all(|&x| x == 0),
        "nothing written before the fault resolved"
    );
    assert_eq!(r.b.state(), QpState::Rts);
    let s = r.dev.odp_stats();
    assert_eq!((s.faults, s.srq_fault_cqes, s.prefetched), (1, 1, 1));
    // The poller: the fault given back, the receive completed.
    assert!(slots.fault(0));
    assert_eq!(slots.complete(1), Some(501));
    // The faulted WQE comes back with its buffer, resident now: the next
    // message lands there without a fault.
    assert_eq!(r.srq_ring.repost_faulted(), 1);
    r.send(200, 50);
    let c = r.cqes();
    assert_eq!((c.len(), c[0].opcode), (1, CqeOpcode::RESP_SEND));
    assert_eq!(slots.complete(c[0].wqe_counter), Some(500));
    assert_eq!(r.page(0)[..50], r.src[200..250]);
    assert_eq!(r.dev.odp_stats().srq_fault_cqes, 1);
}

/// The SRQ's buffers all fault: each WQE is consumed with its fault CQE
/// until none is left, then the requester takes RNR NAKs; the poller gives
/// every WQE back, the owner reposts them (the doorbell record counts the
/// reposts), and every message lands in a reposted WQE with its wr_id.
/// Over laps of the ring, the pages evicted before each.
#[test]
fn every_faulted_srq_buffer_is_reposted_and_completes_over_laps() {
    let pages = 7;
    let mut r = rig(7, pages);
    let slots = r.srq_ring.slots().clone();
    let mut next_wr = 1000u64;
    let mut posted = std::collections::HashMap::new();
    let mut laps_wrapped = 0;
    for lap in 0..5 {
        r.dev.evict_odp(r.kd.lkey).unwrap();
        // Fill the SRQ: one page per WQE.
        let mut wrs = Vec::new();
        for p in 0..pages {
            let idx = r.recv(p, next_wr);
            laps_wrapped += (idx == 0 && lap > 0) as u32;
            posted.insert(next_wr, p);
            wrs.push(next_wr);
            next_wr += 1;
        }
        assert_eq!(r.srq_ring.outstanding(), pages as u32);
        let db = r.dbrec();
        let before = r.dev.odp_stats();
        // One message: every WQE faults, then the SRQ is empty (RNR).
        r.send(lap * 8, 64);
        let got = r.cqes();
        assert_eq!(got.len(), pages, "lap {lap}: a fault CQE per WQE");
        for c in &got {
            assert!(c.is_odp_fault(), "lap {lap}: {c:?}");
            assert!(slots.fault(c.wqe_counter));
        }
        let s = r.dev.odp_stats();
        assert_eq!(s.srq_fault_cqes - before.srq_fault_cqes, pages as u64);
        assert_eq!(s.faults - before.faults, pages as u64, "each page once");
        assert_eq!(r.b.state(), QpState::Rts);
        assert_eq!(
            (r.srq_ring.outstanding(), r.srq_ring.faulted()),
            (0, pages as u32)
        );
        assert_eq!(r.srq_ring.repost_faulted(), pages as u32);
        assert_eq!(r.dbrec(), (db + pages as u32) & 0xffff, "reposts are posts");
        assert_eq!(
            (r.srq_ring.outstanding(), r.srq_ring.faulted()),
            (pages as u32, 0)
        );
        // The requester's retry lands in the first repost; then the rest.
        for (k, &want) in wrs.iter().enumerate() {
            if k > 0 {
                r.send(lap * 8 + k, 64);
            }
            let mut c = Vec::new();
            let t = std::time::Instant::now();
            while c.is_empty() && t.elapsed() < std::time::Duration::from_secs(5) {
                r.dev.process();
                c = r.cqes();
            }
            assert_eq!(c.len(), 1, "lap {lap}, message {k}");
            assert_eq!(c[0].opcode, CqeOpcode::RESP_SEND);
            let wr = slots.complete(c[0].wqe_counter).expect("a held WQE");
            // The faulted WQEs come back in their order: wr_ids in turn,
            // each into its own page.
            assert_eq!(wr, want, "lap {lap}");
            let p = posted.remove(&wr).unwrap();
            let off = lap * 8 + k;
            assert_eq!(r.page(p)[..64], r.src[off..off + 64], "lap {lap}, wr {wr}");
        }
        assert_eq!(r.srq_ring.outstanding(), 0);
    }
    assert!(posted.is_empty(), "every wr_id completed");
    assert!(laps_wrapped > 0, "the free list wrapped to WQE 0 again");
    assert_eq!(r.srq_ring.free(), 7);
}

/// A WRITE with immediate consumes an SRQ WQE but writes no buffer of
/// it: no fault, its receive completes as usual.
#[test]
fn a_write_with_immediate_into_an_srq_does_not_fault() {
    let mut r = rig(3, 1);
    r.recv(0, 7);
    let sge = [DataSeg {
        addr: r.src.as_ptr() as u64,
        len: 8,
        lkey: r.ks.lkey,
    }];
    // SAFETY: the rig's source, which outlives all device work.
    let kw = unsafe { r.dev.reg_mr(PD, r.src.as_mut_ptr(), PAGE, Access::MR_ALL) }.unwrap();
    let w = SendWqe {
        datagram: None,
        masked: None,
        atomic: None,
        opcode: WqeOpcode::RDMA_WRITE_IMM,
        flags: CtrlFlags::empty(),
        imm: 9,
        remote: Some(crate::wqe::RemoteSeg {
            addr: r.src.as_ptr() as u64 + 64,
            rkey: kw.rkey,
        }),
        payload: Payload::Sges(&sge),
    };
    r.asq.post(&w, 0).unwrap();
    r.asq.ring_doorbell();
    r.dev.process();
    let c = r.cqes();
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].opcode, c[0].imm, c[0].byte_cnt),
        (CqeOpcode::RESP_WR_IMM, 9, 8)
    );
    assert_eq!(r.srq_ring.slots().complete(c[0].wqe_counter), Some(7));
    assert_eq!(r.src[64..72], r.src[..8]);
    let s = r.dev.odp_stats();
    assert_eq!((s.faults, s.srq_fault_cqes), (0, 0));
}
