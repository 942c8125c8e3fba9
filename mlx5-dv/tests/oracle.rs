//! Differential tests: our encoder and decoder against rdma-core's own
//! `mlx5dv.h` inline helpers (`mlx5dv_set_ctrl_seg`, `mlx5dv_set_data_seg`,
//! `mlx5dv_get_cqe_owner/_se/_format/_opcode`), over random inputs.
//! Without the header it says so loudly and skips, unless
//! `RDMA_DIRECT_REQUIRE_HEADERS=1`, which makes that a failure.

use mlx5_dv::cqe::Cqe;
use mlx5_dv::prm::{CtrlFlags, WqeOpcode, WQEBB};
use mlx5_dv::ring::RingBuf;
use mlx5_dv::wqe::{
    ctrl_seg, data_seg, write_send_wqe, DataSeg, Payload, RemoteSeg, SendWqe, SqGeometry,
};
use mlx5_dv_oracle as oracle;
use proptest::prelude::*;

fn oracle_or_skip() -> bool {
    if oracle::available() {
        return true;
    }
    assert!(
        std::env::var("RDMA_DIRECT_REQUIRE_HEADERS").as_deref() != Ok("1"),
        "RDMA_DIRECT_REQUIRE_HEADERS=1 but the oracle was built without infiniband/mlx5dv.h"
    );
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "oracle: SKIPPING: built without infiniband/mlx5dv.h (apt-get install libibverbs-dev)"
    );
    false
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn ctrl_segment_matches_mlx5dv_set_ctrl_seg(pi: u16, opcode: u8, qpn in 0u32..1 << 24, flags: u8, ds in 0u8..64, imm: u32) {
        if !oracle_or_skip() { return Ok(()); }
        let ours = ctrl_seg(WqeOpcode(opcode), pi, qpn, ds as u32, CtrlFlags::from_bits_retain(flags), imm);
        // rdma-core stores the immediate as given: callers pass it big-endian.
        let theirs = oracle::set_ctrl_seg(pi, opcode, 0, qpn, flags, ds, 0, imm.to_be());
        prop_assert_eq!(ours, theirs);
    }

    #[test]
    fn data_segment_matches_mlx5dv_set_data_seg(len: u32, lkey: u32, addr: u64) {
        if !oracle_or_skip() { return Ok(()); }
        prop_assert_eq!(data_seg(DataSeg { addr, len, lkey }), oracle::set_data_seg(len, lkey, addr));
    }

    #[test]
    fn cqe_op_own_fields_match_mlx5dv_get_cqe(bytes in proptest::array::uniform32(any::<u8>()), tail in proptest::array::uniform32(any::<u8>())) {
        if !oracle_or_skip() { return Ok(()); }
        let mut cqe = [0u8; 64];
        cqe[..32].copy_from_slice(&bytes);
        cqe[32..].copy_from_slice(&tail);
        let c = Cqe::decode(&cqe);
        let [owner, se, format, opcode] = oracle::cqe_fields(&cqe);
        prop_assert_eq!(c.owner as u8, owner);
        prop_assert_eq!(c.solicited as u8, se);
        prop_assert_eq!(c.format, format);
        prop_assert_eq!(c.opcode.0, opcode);
    }

    /// Whole WQEs: the ctrl and data segments our writer places in the ring
    /// equal what rdma-core's helpers make from the same request.
    #[test]
    fn written_wqes_match_the_helpers(
        log_cnt in 0u32..6,
        pi: u32,
        qpn in 0u32..1 << 24,
        signaled: bool,
        sges in proptest::collection::vec((any::<u64>(), 1u32..1 << 20, any::<u32>()), 0..8),
        raddr: u64,
        rkey: u32,
    ) {
        if !oracle_or_skip() { return Ok(()); }
        let wqe_cnt = 4u32 << log_cnt;
        let geo = SqGeometry { wqe_cnt, qpn, max_inline: 256, max_wqebbs: 16 };
        let sges: Vec<DataSeg> = sges.into_iter().map(|(addr, len, lkey)| DataSeg { addr, len, lkey }).collect();
        let flags = if signaled { CtrlFlags::CQ_UPDATE } else { CtrlFlags::empty() };
        let wqe = SendWqe {
            datagram: None,
            opcode: WqeOpcode::RDMA_WRITE,
            flags,
            imm: 0,
            remote: Some(RemoteSeg { addr: raddr, rkey }),
            masked: None,
            atomic: None,
            payload: Payload::Sges(&sges),
        };
        let mut mem = vec![0u8; wqe_cnt as usize * WQEBB];
        let mut ring = RingBuf::from_slice(&mut mem).unwrap();
        let w = write_send_wqe(&mut ring, &geo, pi, &wqe, wqe_cnt).unwrap();
        let len = mem.len();
        let at = |k: usize| {
            let off = ((pi & (wqe_cnt - 1)) as usize * WQEBB + k * 16) % len;
            mem[off..off + 16].to_vec()
        };
        prop_assert_eq!(at(0), oracle::set_ctrl_seg(pi as u16, 0x08, 0, qpn, flags.bits(), w.ds as u8, 0, 0).to_vec());
        for (k, s) in sges.iter().enumerate() {
            prop_assert_eq!(at(2 + k), oracle::set_data_seg(s.len, s.lkey, s.addr).to_vec());
        }
    }
}

/// The oracle itself agrees with the hand-worked ctrl segment of the
/// wrapping inline write (so the properties above compare against real bytes).
#[test]
fn oracle_reproduces_the_hand_worked_ctrl_segment() {
    if !oracle_or_skip() {
        return;
    }
    assert_eq!(
        oracle::set_ctrl_seg(7, 0x08, 0, 0x1234, 0x08, 9, 0, 0),
        [0, 0, 7, 8, 0, 0x12, 0x34, 9, 0, 0, 0, 8, 0, 0, 0, 0]
    );
    assert_eq!(
        oracle::set_data_seg(4096, 0x11, 0x1000),
        [0, 0, 0x10, 0, 0, 0, 0, 0x11, 0, 0, 0, 0, 0, 0, 0x10, 0]
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// The benchmarks' C baseline writes the same WQE bytes as our encoder
    /// (else comparing their cost would compare different work).
    #[test]
    fn c_baseline_writes_the_same_wqes(pi in 0u32..1 << 16, qpn in 0u32..1 << 24, raddr: u64, rkey: u32, addr: u64, len in 1u32..=1 << 31, lkey: u32, inl in 1usize..=200) {
        if !oracle_or_skip() { return Ok(()); }
        const CNT: u32 = 16;
        let geo = SqGeometry { wqe_cnt: CNT, qpn, max_inline: 256, max_wqebbs: 4 };
        let mut ours = vec![0u8; CNT as usize * WQEBB];
        let mut theirs = vec![0u8; CNT as usize * WQEBB];
        let sge = [DataSeg { addr, len, lkey }];
        let wqe = SendWqe {
            datagram: None,
            opcode: WqeOpcode::RDMA_WRITE,
            flags: CtrlFlags::CQ_UPDATE,
            imm: 0,
            remote: Some(RemoteSeg { addr: raddr, rkey }),
            masked: None,
            atomic: None,
            payload: Payload::Sges(&sge),
        };
        {
            let mut sq = RingBuf::from_slice(&mut ours).unwrap();
            write_send_wqe(&mut sq, &geo, pi, &wqe, CNT).unwrap();
        }
        prop_assert_eq!(oracle::baseline::write_sge(&mut theirs, CNT, pi, qpn, raddr, rkey, addr, len, lkey), 1);
        prop_assert_eq!(&ours, &theirs);
        // An inline SEND, from a position where it may wrap; compared over
        // the bytes that carry meaning (the last DS's padding is not).
        let data: Vec<u8> = (0..inl).map(|i| (i as u8).wrapping_mul(31) ^ 0x5a).collect();
        let mut ours = vec![0u8; CNT as usize * WQEBB];
        let mut theirs = vec![0u8; CNT as usize * WQEBB];
        let send = SendWqe {
            datagram: None,
            opcode: WqeOpcode::SEND,
            flags: CtrlFlags::CQ_UPDATE,
            imm: 0,
            remote: None,
            masked: None,
            atomic: None,
            payload: Payload::Inline(&data),
        };
        let w = {
            let mut sq = RingBuf::from_slice(&mut ours).unwrap();
            write_send_wqe(&mut sq, &geo, pi, &send, CNT).unwrap()
        };
        let n = oracle::baseline::inline_send(&mut theirs, CNT, pi, qpn, &data);
        prop_assert_eq!(n, w.next_pi.wrapping_sub(pi));
        let start = (pi % CNT) as usize * WQEBB;
        for k in 0..20 + inl {
            let at = (start + k) % ours.len();
            prop_assert_eq!(ours[at], theirs[at], "byte {} of the WQE", k);
        }
    }

    /// The C baseline's CQE poll reads the same fields as our decoder.
    #[test]
    fn c_baseline_polls_the_same_fields(counter: u16, byte_cnt: u32, qpn in 0u32..1 << 24, ci in 0u32..1 << 24, err: bool) {
        if !oracle_or_skip() { return Ok(()); }
        use mlx5_dv::prm::{CqeOpcode, Syndrome};
        let cqe = Cqe {
            opcode: if err { CqeOpcode::REQ_ERR } else { CqeOpcode::REQ },
            wqe_opcode: WqeOpcode::RDMA_WRITE,
            qpn,
            wqe_counter: counter,
            byte_cnt,
            imm: 0,
            solicited: false,
            format: 0,
            syndrome: Syndrome(if err { 0x13 } else { 0 }),
            vendor_syndrome: 0,
            flags_rqpn: 0,
            owner: false,
        }
        .encode(((ci & 256) != 0) as u8);
        let b = cqe.as_slice().try_into().unwrap();
        let got = oracle::baseline::poll_cqe(b, ci, 256).expect("software owns it");
        let d = Cqe::decode(&cqe);
        prop_assert_eq!(got[0], d.opcode.0 as u32);
        prop_assert_eq!(got[1], d.wqe_counter as u32);
        prop_assert_eq!(got[2], d.byte_cnt);
        prop_assert_eq!(got[3], d.qpn);
        prop_assert_eq!(got[4], d.syndrome.0 as u32);
        // With the other owner bit it is the hardware's.
        prop_assert!(oracle::baseline::poll_cqe(b, ci ^ 256, 256).is_none());
    }
}

/// The C driver baseline (`driver.c`) writes, for a 1-SGE RDMA WRITE and a
/// 64-byte inline WRITE, exactly the WQE bytes our encoder writes (so the
/// instruction counts compare the same work), rings its doorbell record and
/// BlueFlame copy, and its poll retires by `wqe_counter`.
#[test]
fn the_c_driver_baseline_writes_our_wqes() {
    use mlx5_dv::prm::{CqeOpcode, Syndrome};
    use mlx5_dv_oracle::driver::{self, Cq, Sq, Wc, Write};
    if !oracle_or_skip() {
        return;
    }
    assert!(
        driver::available(),
        "driver.c sees the same header as oracle.c"
    );
    let mut ring = vec![0u8; 16 * 64];
    let (mut wrid, mut heads) = (vec![0u64; 16], vec![0u32; 16]);
    let mut dbrec = [0u32; 2];
    let mut bf = vec![0u64; 64];
    let mut sq = Sq {
        buf: ring.as_mut_ptr(),
        wqe_cnt: 16,
        qpn: 0x1234,
        dbrec: dbrec.as_mut_ptr(),
        bf_reg: bf.as_mut_ptr().cast(),
        bf_size: 256,
        bf_offset: 0,
        cur_post: 0,
        head: 0,
        tail: 0,
        max_post: 8,
        wrid: wrid.as_mut_ptr(),
        wqe_head: heads.as_mut_ptr(),
    };
    let w = Write {
        wr_id: 77,
        raddr: 0x7f00_0000_9000,
        addr: 0x7f00_0000_1000,
        rkey: 0x22,
        lkey: 0x11,
        len: 4096,
        signaled: 1,
    };
    let data = [0x5au8; 64];
    // SAFETY: `sq` describes the vectors above, which outlive the calls.
    unsafe {
        assert_eq!(driver::cb_post_write(&mut sq, &w), 0);
        assert_eq!(
            driver::cb_post_inline_write(&mut sq, 78, 0x7f00_0000_9000, 0x22, data.as_ptr(), 64, 1),
            0
        );
    }
    assert_eq!((sq.cur_post, sq.head), (3, 2));
    assert_eq!(u32::from_be(dbrec[1]), 3);
    assert_eq!(sq.bf_offset, 0, "toggled twice");
    let geo = SqGeometry {
        wqe_cnt: 16,
        qpn: 0x1234,
        max_inline: 256,
        max_wqebbs: 16,
    };
    let mut ours = vec![0u8; 16 * 64];
    let mut r = RingBuf::from_slice(&mut ours).unwrap();
    let sge = [DataSeg {
        addr: w.addr,
        len: w.len,
        lkey: w.lkey,
    }];
    let remote = Some(RemoteSeg {
        addr: w.raddr,
        rkey: w.rkey,
    });
    let mk = |payload| SendWqe {
        datagram: None,
        opcode: WqeOpcode::RDMA_WRITE,
        flags: CtrlFlags::CQ_UPDATE,
        imm: 0,
        remote,
        masked: None,
        atomic: None,
        payload,
    };
    let a = write_send_wqe(&mut r, &geo, 0, &mk(Payload::Sges(&sge)), 256).unwrap();
    write_send_wqe(&mut r, &geo, a.next_pi, &mk(Payload::Inline(&data)), 256).unwrap();
    // Bytes past an inline payload's end in its last WQEBB are padding.
    assert_eq!(&ring[..64 + 100], &ours[..64 + 100]);
    // The inline WQE was copied to the second BlueFlame half (toggled back).
    let bf_bytes: Vec<u8> = bf[32..48].iter().flat_map(|x| x.to_ne_bytes()).collect();
    assert_eq!(&bf_bytes[..100], &ring[64..164]);
    // A CQE naming the inline WQE (index 1) retires both.
    let mut cqes = vec![0u8; 4 * 64];
    let cqe = Cqe {
        opcode: CqeOpcode::REQ,
        wqe_opcode: WqeOpcode::RDMA_WRITE,
        qpn: 0x1234,
        wqe_counter: 1,
        byte_cnt: 64,
        imm: 0,
        solicited: false,
        format: 0,
        syndrome: Syndrome(0),
        vendor_syndrome: 0,
        flags_rqpn: 0,
        owner: false,
    };
    cqes[..64].copy_from_slice(&cqe.encode(0));
    for c in cqes.chunks_mut(64).skip(1) {
        c[63] = 0xf0;
    }
    let mut cq_dbrec = [0u32; 2];
    let mut cq = Cq {
        buf: cqes.as_mut_ptr(),
        cqe_cnt: 4,
        ci: 0,
        dbrec: cq_dbrec.as_mut_ptr(),
    };
    let mut wc = [Wc::default(); 4];
    // SAFETY: as above, and `wc` holds 4.
    let n = unsafe { driver::cb_poll(&mut cq, &mut sq, wc.as_mut_ptr(), 4) };
    assert_eq!(n, 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].byte_len, wc[0].qp_num),
        (78, 64, 0x1234)
    );
    assert_eq!((sq.tail, cq.ci, u32::from_be(cq_dbrec[0])), (2, 1, 1));
    // SAFETY: as above.
    assert_eq!(
        unsafe { driver::cb_poll(&mut cq, &mut sq, wc.as_mut_ptr(), 4) },
        0,
        "empty"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The C baseline's DC WRITE (`driver_dc.c`'s `cb_post_dc_write`, as
    /// libmlx5's `mlx5_send_wr_set_dc_addr` and `mlx5dv.h`'s setters make
    /// it) writes exactly the WQE bytes of our codec (`Datagram::Dc`) and of
    /// our in-place post (`SendQueue::post_dc`), at every producer index of
    /// a small ring (the second WQEBB wrapping), for any AV, DCT number and
    /// key; with the same doorbell record and BlueFlame copy as `post_dc`.
    #[test]
    fn the_c_dc_write_is_our_dc_write(
        start in 0u32..16,
        av in prop::collection::vec(any::<u8>(), 48),
        dctn in 0u32..1 << 24,
        key: u64,
        (raddr, rkey, addr, lkey) in (any::<u64>(), any::<u32>(), any::<u64>(), any::<u32>()),
        len in 1u32..0x8000_0000,
        wr_id: u64,
    ) {
        use mlx5_dv::wqe::{dc_datagram_seg, Datagram, DATAGRAM_SEG};
        use mlx5_dv_oracle::driver::{self, Sq};
        if !oracle_or_skip() { return Ok(()); }
        prop_assert!(driver::available_dc(), "driver_dc.c sees the same header as oracle.c");
        let av: [u8; DATAGRAM_SEG] = av.try_into().unwrap();
        // The C driver, at producer index `start`.
        let mut ring = vec![0u8; 16 * 64];
        let (mut wrid, mut heads) = (vec![0u64; 16], vec![0u32; 16]);
        let mut dbrec = [0u32; 2];
        let mut bf = vec![0u64; 64];
        let mut sq = Sq {
            buf: ring.as_mut_ptr(),
            wqe_cnt: 16,
            qpn: 0x1234,
            dbrec: dbrec.as_mut_ptr(),
            bf_reg: bf.as_mut_ptr().cast(),
            bf_size: 256,
            bf_offset: 0,
            cur_post: start,
            head: 0,
            tail: 0,
            max_post: 8,
            wrid: wrid.as_mut_ptr(),
            wqe_head: heads.as_mut_ptr(),
        };
        // SAFETY: `sq` describes the vectors above, which outlive the call;
        // `av` holds 48 bytes.
        let r = unsafe {
            driver::cb_post_dc_write(&mut sq, av.as_ptr(), dctn, key, wr_id, raddr, rkey, addr, lkey, len)
        };
        prop_assert_eq!(r, 0);
        prop_assert_eq!((sq.cur_post, sq.head), (start + 2, 1));
        prop_assert_eq!(wrid[start as usize], wr_id);
        let wqebbs = |ring: &[u8]| -> Vec<u8> {
            [start, start + 1]
                .iter()
                .flat_map(|i| ring[(*i as usize % 16) * 64..][..64].to_vec())
                .collect()
        };
        // Our codec.
        let geo = SqGeometry { wqe_cnt: 16, qpn: 0x1234, max_inline: 0, max_wqebbs: 16 };
        let mut ours = vec![0u8; 16 * 64];
        let seg = dc_datagram_seg(&av, dctn, key).unwrap();
        let sge = [DataSeg { addr, len, lkey }];
        let w = SendWqe {
            datagram: Some(Datagram::Dc(&seg)),
            opcode: WqeOpcode::RDMA_WRITE,
            flags: CtrlFlags::CQ_UPDATE,
            imm: 0,
            remote: Some(RemoteSeg { addr: raddr, rkey }),
            masked: None,
            atomic: None,
            payload: Payload::Sges(&sge),
        };
        let mut rb = RingBuf::from_slice(&mut ours).unwrap();
        let next = write_send_wqe(&mut rb, &geo, start, &w, 256).unwrap().next_pi;
        prop_assert_eq!(next, start + 2);
        prop_assert_eq!(wqebbs(&ring), wqebbs(&ours), "codec, start {}", start);
        // Our in-place post, on a send queue over plain memory at `start`.
        let mut mring = vec![0u64; 16 * 8];
        let mut mdb = [0u32; 2];
        let mut mbf = vec![0u64; 64];
        let mut d = mlx5_dv::dv::mlx5dv_qp::zeroed();
        d.sq.buf = mring.as_mut_ptr().cast();
        d.sq.wqe_cnt = 16;
        d.sq.stride = 64;
        d.dbrec = mdb.as_mut_ptr();
        d.bf.reg = mbf.as_mut_ptr().cast();
        d.bf.size = 256;
        // SAFETY: the description names the memory above, which outlives
        // the queue and nothing else touches meanwhile.
        let mut q = unsafe { mlx5_dv::driver::SendQueue::new(&d, 0x1234, 0, 8) }.unwrap();
        q.set_auto_signal(0);
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
            q.post(&nop, 0).unwrap();
            q.ring_doorbell();
            let last = q.pi().wrapping_sub(1) as u16;
            q.complete(last);
        }
        let (bf0, off) = (mbf.clone(), (start % 2) as usize);
        q.post_dc(
            WqeOpcode::RDMA_WRITE,
            CtrlFlags::CQ_UPDATE,
            0,
            &av,
            dctn,
            key,
            Some(mlx5_dv::driver::Seg::raddr(raddr, rkey)),
            mlx5_dv::driver::Seg::data(addr, len, lkey),
            wr_id,
        )
        .unwrap();
        let mbytes: Vec<u8> = mring.iter().flat_map(|x| x.to_ne_bytes()).collect();
        prop_assert_eq!(wqebbs(&ring), wqebbs(&mbytes), "post_dc, start {}", start);
        prop_assert_eq!(dbrec[1], mdb[1], "doorbell record");
        // The BlueFlame copy: the C's into its first half; ours into the
        // half its `start` rings before it left it at.
        let cbf: Vec<u8> = bf[..16].iter().flat_map(|x| x.to_ne_bytes()).collect();
        let obf: Vec<u8> = mbf[off * 32..off * 32 + 16].iter().flat_map(|x| x.to_ne_bytes()).collect();
        prop_assert_eq!(&cbf, &wqebbs(&ring));
        prop_assert_eq!(&obf, &wqebbs(&ring), "BlueFlame copy of post_dc");
        prop_assert!(bf0 != mbf);
    }
}
