//! The in-place DC posts (`fast_dc.rs`) against the general one: for the
//! same WR, send queues over plain memory end with the same ring bytes,
//! doorbell record, BlueFlame register contents and bookkeeping, whether
//! it goes through `SendQueue::post` + `ring_doorbell` (a `SendWqe` with
//! `Datagram::Dc`, written by the codec's writer), `post_dc` or the gated
//! `dc_room`; refusals write nothing; and a WRITE posted in place on a sim
//! DCI lands in the DCT side's memory and completes.

use crate::driver::{Seg, SendQueue};
use crate::dv::{mlx5dv_bf, mlx5dv_qp, mlx5dv_wq};
use crate::prm::{CtrlFlags, WqeOpcode, WQEBB};
use crate::wqe::{
    dc_datagram_seg, DataSeg, Datagram, Payload, RemoteSeg, SendWqe, WqeError, DATAGRAM_SEG,
};
use proptest::prelude::*;

/// One SQ's memory: ring, doorbell record, BlueFlame register pair.
#[derive(Clone, PartialEq, Eq, Debug)]
struct Mem {
    ring: Vec<u64>,
    dbrec: Box<[u32; 2]>,
    bf: Vec<u64>,
}

impl Mem {
    fn new(wqe_cnt: u32) -> Self {
        Mem {
            ring: vec![0; wqe_cnt as usize * WQEBB / 8],
            dbrec: Box::new([0; 2]),
            bf: vec![0; 2 * 256 / 8],
        }
    }
    fn sq(&mut self, wqe_cnt: u32, max_post: u32) -> SendQueue {
        self.sq_inline(wqe_cnt, max_post, 128)
    }
    fn sq_inline(&mut self, wqe_cnt: u32, max_post: u32, max_inline: u32) -> SendQueue {
        let mut d = mlx5dv_qp::zeroed();
        d.dbrec = self.dbrec.as_mut_ptr();
        d.sq = mlx5dv_wq {
            buf: self.ring.as_mut_ptr().cast(),
            wqe_cnt,
            stride: 64,
        };
        d.bf = mlx5dv_bf {
            reg: self.bf.as_mut_ptr().cast(),
            size: 256,
        };
        // SAFETY: the description names this value's memory, which outlives
        // the queue in every test and which nothing else touches meanwhile.
        unsafe { SendQueue::new(&d, 0xabc, max_inline, max_post) }.expect("send queue")
    }
}

const OPS: [WqeOpcode; 5] = [
    WqeOpcode::RDMA_WRITE,
    WqeOpcode::RDMA_WRITE_IMM,
    WqeOpcode::SEND,
    WqeOpcode::SEND_IMM,
    WqeOpcode::RDMA_READ,
];

/// A DC WR as all paths take it.
#[derive(Clone, Debug)]
struct DcWr {
    op: WqeOpcode,
    flags: CtrlFlags,
    imm: u32,
    av: [u8; DATAGRAM_SEG],
    dctn: u32,
    key: u64,
    remote: RemoteSeg,
    sge: DataSeg,
    wr_id: u64,
}

impl DcWr {
    fn raddr(&self) -> bool {
        self.op.has_raddr()
    }
    fn general(&self, sq: &mut SendQueue) -> Result<(), WqeError> {
        let seg = dc_datagram_seg(&self.av, self.dctn, self.key)?;
        let sges = [self.sge];
        let w = SendWqe {
            datagram: Some(Datagram::Dc(&seg)),
            opcode: self.op,
            flags: self.flags,
            imm: self.imm,
            remote: Some(self.remote),
            masked: None,
            atomic: None,
            payload: Payload::Sges(&sges),
        };
        sq.post(&w, self.wr_id)?;
        sq.ring_doorbell();
        Ok(())
    }
    fn post_dc(&self, sq: &mut SendQueue) -> Result<(), WqeError> {
        sq.post_dc(
            self.op,
            self.flags,
            self.imm,
            &self.av,
            self.dctn,
            self.key,
            Some(Seg::raddr(self.remote.addr, self.remote.rkey)),
            Seg::data(self.sge.addr, self.sge.len, self.sge.lkey),
            self.wr_id,
        )
    }
    /// Through `dc_room`, its steps in the order `post_dc` takes them;
    /// `false` when the room is refused.
    fn gated(&self, sq: &mut SendQueue) -> bool {
        let Some(mut room) = sq.dc_room() else {
            return false;
        };
        room.datagram(&self.av, self.dctn, self.key).unwrap();
        if self.raddr() {
            room.raddr(Seg::raddr(self.remote.addr, self.remote.rkey));
        }
        room.data(
            Seg::data(self.sge.addr, self.sge.len, self.sge.lkey),
            self.raddr(),
        );
        let ds = 5 + self.raddr() as u32;
        room.finish(self.op, self.flags, self.imm, ds, self.wr_id)
            .ring();
        true
    }
}

fn dc_wr() -> impl Strategy<Value = DcWr> {
    (
        (0usize..5, any::<bool>(), any::<bool>(), any::<bool>()),
        any::<u32>(),
        prop::array::uniform32(any::<u8>()),
        (0u32..=0xff_ffff, any::<u64>()),
        (
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
            1u32..0x8000_0000,
            any::<u32>(),
        ),
        any::<u64>(),
    )
        .prop_map(
            |((op, sig, sol, fence), imm, av32, (dctn, key), r, wr_id)| {
                let mut flags = CtrlFlags::empty();
                flags.set(CtrlFlags::CQ_UPDATE, sig);
                flags.set(CtrlFlags::SOLICITED, sol);
                flags.set(CtrlFlags::FENCE, fence);
                // An AV from `mlx5_create_ah` leaves `dqp_dct`'s DCT bits clear.
                let mut av = [0u8; DATAGRAM_SEG];
                av[..32].copy_from_slice(&av32);
                av[32..].copy_from_slice(&av32[..16]);
                av[9..12].fill(0);
                DcWr {
                    op: OPS[op],
                    flags,
                    imm,
                    av,
                    dctn,
                    key,
                    remote: RemoteSeg {
                        addr: r.0,
                        rkey: r.1,
                    },
                    sge: DataSeg {
                        addr: r.2,
                        len: r.3,
                        lkey: r.4,
                    },
                    wr_id,
                }
            },
        )
}

/// `sq` moved to producer index `start` by NOPs, each retired.
fn advance(sq: &mut SendQueue, start: u32) {
    let nop = SendWqe {
        datagram: None,
        opcode: WqeOpcode::NOP,
        flags: CtrlFlags::CQ_UPDATE,
        imm: 0,
        remote: None,
        masked: None,
        atomic: None,
        payload: Payload::Sges(&[]),
    };
    for _ in 0..start {
        sq.post(&nop, 0).unwrap();
        sq.ring_doorbell();
        let last = sq.pi().wrapping_sub(1) as u16;
        sq.retirer().complete(last);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 512 }))]

    /// Each op, imm or not, any flags, at producer indices at and near
    /// the ring's end (the second WQEBB wrapping to the first) of SQs of
    /// 4 to 64 WQEBBs: `post_dc` and `dc_room` write the general writer's
    /// WQE, doorbell record and BlueFlame copy, with the same bookkeeping.
    #[test]
    fn dc_posts_in_place_write_what_the_writer_writes(
        w in dc_wr(),
        log_cnt in 2u32..7,
        back in 0u32..4,
        laps in 0u32..2,
    ) {
        let cnt = 1 << log_cnt;
        // At the end (`back` 0: the last WQEBB, so the second wraps) or a
        // little before it, on the first lap or the second.
        let start = laps * cnt + cnt - 1 - back.min(cnt - 1);
        let max_post = (cnt / 4).max(1);
        let (mut ma, mut mb, mut mc) = (Mem::new(cnt), Mem::new(cnt), Mem::new(cnt));
        let (mut a, mut b, mut c) = (ma.sq(cnt, max_post), mb.sq(cnt, max_post), mc.sq(cnt, max_post));
        for q in [&mut a, &mut b, &mut c] {
            prop_assert!(q.limit_wqe_size(2));
            q.set_auto_signal(3);
            q.set_dc_gate(true);
            advance(q, start);
        }
        let g = w.general(&mut a);
        prop_assert!(g.is_ok(), "{:?}", g);
        prop_assert!(w.post_dc(&mut b).is_ok());
        prop_assert!(w.gated(&mut c), "the gate is open");
        for (m, q, what) in [(&mb, &b, "post_dc"), (&mc, &c, "dc_room")] {
            prop_assert_eq!(&ma.ring, &m.ring, "{}: ring, start {}", what, start);
            prop_assert_eq!(&ma.dbrec, &m.dbrec, "{}: doorbell record", what);
            prop_assert_eq!(&ma.bf, &m.bf, "{}: BlueFlame register", what);
            prop_assert_eq!(
                (a.pi(), a.posted_count(), a.free_wqebbs()),
                (q.pi(), q.posted_count(), q.free_wqebbs())
            );
        }
        // The same WQE retires the same wr_id.
        let at = (start & 0xffff) as u16;
        let ra = a.retirer().complete(at).map(|r| r.wr_id);
        prop_assert_eq!(ra, Some(w.wr_id));
        prop_assert_eq!(ra, b.retirer().complete(at).map(|r| r.wr_id));
        prop_assert_eq!(ra, c.retirer().complete(at).map(|r| r.wr_id));
    }
}

/// A WRITE of `dctn`, signaled.
fn write(dctn: u32) -> DcWr {
    DcWr {
        op: WqeOpcode::RDMA_WRITE,
        flags: CtrlFlags::CQ_UPDATE,
        imm: 0,
        av: [0x11; DATAGRAM_SEG],
        dctn,
        key: 0x5555,
        remote: RemoteSeg {
            addr: 0x9000,
            rkey: 2,
        },
        sge: DataSeg {
            addr: 0x1000,
            len: 64,
            lkey: 1,
        },
        wr_id: 1,
    }
}

/// Every refusal of `post_dc` and `dc_room` leaves the ring, doorbell
/// record, BlueFlame registers and the queue's indices as they were.
#[test]
fn dc_refusals_write_nothing() {
    let mut m = Mem::new(8);
    let mut sq = m.sq(8, 2);
    let unchanged = |m: &Mem, sq: &SendQueue, before: &(Mem, u32, u32)| {
        assert_eq!(m, &before.0);
        assert_eq!((sq.pi(), sq.posted_count()), (before.1, before.2));
    };
    let snap = |m: &Mem, sq: &SendQueue| (m.clone(), sq.pi(), sq.posted_count());
    let before = snap(&m, &sq);
    // A DCT number over 24 bits.
    let r = write(0x100_0000).post_dc(&mut sq);
    assert_eq!(r, Err(WqeError::DctnTooWide { dctn: 0x100_0000 }));
    unchanged(&m, &sq, &before);
    // An opcode the in-place posts do not take, and a missing raddr.
    let mut w = write(1);
    w.op = WqeOpcode::ATOMIC_FA;
    assert_eq!(
        w.post_dc(&mut sq),
        Err(WqeError::UnsupportedOpcode(WqeOpcode::ATOMIC_FA.0))
    );
    w.op = WqeOpcode::NOP;
    assert!(matches!(
        w.post_dc(&mut sq),
        Err(WqeError::UnsupportedOpcode(_))
    ));
    let r = sq.post_dc(
        WqeOpcode::RDMA_READ,
        CtrlFlags::CQ_UPDATE,
        0,
        &[0; DATAGRAM_SEG],
        1,
        2,
        None,
        Seg::data(0x1000, 8, 1),
        3,
    );
    assert_eq!(r, Err(WqeError::MissingRemote(WqeOpcode::RDMA_READ.0)));
    unchanged(&m, &sq, &before);
    // The gate: closed when made, and while the room check is not implied.
    assert!(!write(1).gated(&mut sq), "closed when made");
    sq.set_dc_gate(true);
    assert!(!write(1).gated(&mut sq), "2 WRs of 8 WQEBBs need not fit 8");
    unchanged(&m, &sq, &before);
    assert!(sq.limit_wqe_size(2));
    // A bad DCT number in the gated steps: the room is dropped unposted.
    {
        let mut room = sq.dc_room().expect("open");
        assert_eq!(
            room.datagram(&[0; DATAGRAM_SEG], u32::MAX, 1),
            Err(WqeError::DctnTooWide { dctn: u32::MAX })
        );
    }
    unchanged(&m, &sq, &before);
    // The WR limit (2), for both paths.
    assert!(write(1).gated(&mut sq));
    write(1).post_dc(&mut sq).unwrap();
    let full = snap(&m, &sq);
    assert!(matches!(
        write(1).post_dc(&mut sq),
        Err(WqeError::WrLimit { .. })
    ));
    assert!(!write(1).gated(&mut sq), "at the WR limit");
    unchanged(&m, &sq, &full);
    // A queue whose largest WQE is one WQEBB.
    let mut m1 = Mem::new(8);
    let mut one = m1.sq_inline(8, 4, 0);
    assert!(one.limit_wqe_size(1));
    one.set_dc_gate(true);
    let before = snap(&m1, &one);
    let r = write(1).post_dc(&mut one);
    assert!(
        matches!(r, Err(WqeError::TooBig { wqebbs: 2, max: 1 })),
        "{r:?}"
    );
    assert!(one.dc_room().is_none(), "the gate stays closed");
    unchanged(&m1, &one, &before);
    // A full ring without the room implied: QueueFull.
    let mut m2 = Mem::new(4);
    let mut q = m2.sq(4, 4);
    write(1).post_dc(&mut q).unwrap();
    write(1).post_dc(&mut q).unwrap();
    let before = snap(&m2, &q);
    assert!(matches!(
        write(1).post_dc(&mut q),
        Err(WqeError::QueueFull { need: 2, free: 0 })
    ));
    unchanged(&m2, &q, &before);
}

/// A WRITE posted in place (`dc_room`, and `post_dc`) on a sim DCI lands
/// in the memory behind the DCT and completes on the DCI's CQ.
#[cfg(feature = "sim")]
#[test]
fn a_dc_write_in_place_lands_through_a_sim_dct() {
    use crate::driver::CompletionQueue;
    use crate::prm::{CqeOpcode, Syndrome};
    use crate::sim::{Access, Device};
    use std::time::Duration;
    const PD: u32 = 5;
    const KEY: u64 = 0x0123_4567_89ab_cdef;
    let dev = Device::new();
    let mut src: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 1) as u8).collect();
    let mut dst = vec![0u8; 4096];
    // SAFETY: the Vecs outlive all device work (done only inside
    // `dev.process()` below, while they live).
    let ks = unsafe { dev.reg_mr(PD, src.as_mut_ptr(), 4096, Access::LOCAL_WRITE) }.unwrap();
    // SAFETY: as above.
    let kd = unsafe { dev.reg_mr(PD, dst.as_mut_ptr(), 4096, Access::MR_ALL) }.unwrap();
    // The DCT, in RTR.
    let tcq = dev.create_cq(64, 64).unwrap();
    let srq = dev.create_srq(PD, 15, 1).unwrap();
    let dct = dev.create_dct(PD, &tcq, &srq, KEY).unwrap();
    dct.to_init_dct(Access::REMOTE_WRITE, 1).unwrap();
    dct.to_rtr_dct(Duration::from_micros(10)).unwrap();
    let dctn = dct.dctn().unwrap();
    // The DCI, in RTS.
    let cq = dev.create_cq(64, 64).unwrap();
    let dci = dev.create_dci(PD, &cq, 64).unwrap();
    dci.to_init(Access::empty()).unwrap();
    dci.to_rtr_dci().unwrap();
    dci.to_rts_with(7).unwrap();
    // SAFETY: descriptions of the sim objects above, which outlive the drivers.
    let mut sq = unsafe { SendQueue::new(&dci.dv(), dci.qpn(), 128, 16) }.unwrap();
    // SAFETY: as above.
    let mut cqp = unsafe { CompletionQueue::new(&cq.dv()) }.unwrap();
    assert!(sq.limit_wqe_size(2));
    sq.set_dc_gate(true);
    let av = [0u8; DATAGRAM_SEG];
    let mut room = sq.dc_room().expect("the gate is open");
    room.datagram(&av, dctn, KEY).unwrap();
    room.raddr(Seg::raddr(dst.as_ptr() as u64 + 100, kd.rkey));
    room.data(Seg::data(src.as_ptr() as u64 + 10, 300, ks.lkey), true);
    room.finish(WqeOpcode::RDMA_WRITE, CtrlFlags::CQ_UPDATE, 0, 6, 41)
        .ring();
    // (A WRITE_IMM would take a receive of the DCT's SRQ.)
    sq.post_dc(
        WqeOpcode::RDMA_WRITE,
        CtrlFlags::CQ_UPDATE,
        7,
        &av,
        dctn,
        KEY,
        Some(Seg::raddr(dst.as_ptr() as u64 + 1000, kd.rkey)),
        Seg::data(src.as_ptr() as u64 + 2000, 64, ks.lkey),
        42,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    dev.process();
    let mut done = Vec::new();
    while let Some(c) = cqp.poll_one() {
        assert_eq!((c.opcode, c.syndrome), (CqeOpcode::REQ, Syndrome(0)));
        assert_eq!(c.qpn, dci.qpn());
        done.push(sq.complete(c.wqe_counter).expect("a posted WQE").wr_id);
    }
    cqp.update_ci();
    assert_eq!(done, [41, 42]);
    assert_eq!(dst[100..400], src[10..310]);
    assert_eq!(dst[1000..1064], src[2000..2064]);
    let _ = srq;
}
