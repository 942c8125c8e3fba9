//! UD, SRQ and device-thread cases.

use crate::common::*;

pub fn ud() -> Rig {
    let mut rig = Rig::new();
    let (c1, c2) = (rig.cq(64), rig.cq(64));
    let spec = QpSpec {
        qp_type: QpType::Ud,
        ..QpSpec::rc()
    };
    let (u1, u2) = (rig.qp(c1, spec), rig.qp(c2, spec));
    let qkey = 0x1111_2222;
    rig.ready_ud(u1, qkey);
    rig.ready_ud(u2, qkey);
    let (q1, q2) = (rig.qpn(u1), rig.qpn(u2));
    let src = rig.mr(4096, Access::LOCAL_WRITE);
    let dst = rig.mr(4096, Access::LOCAL_WRITE);
    rig.write_mem(&src, 0, &pattern(3, 4096));
    rig.post_recv(
        u2,
        &[
            (300, vec![dst.sge(0, 512)]),
            (301, vec![dst.sge(1024, 512)]),
        ],
    )
    .expect("the receives");
    // The AV rdma-direct's direct backend gives a sim AH (`Pd::create_ah`:
    // 48 zero bytes; the sim routes by the datagram's QPN and qkey).
    let ud = Some(Ud {
        av: [0; 48],
        remote_qpn: q2,
        qkey,
    });
    let mut d0 = wr(40, Op::Send, vec![src.sge(0, 100)], true);
    d0.ud = ud;
    let mut d1 = inline(wr(
        41,
        Op::SendImm { imm: 0x5555_aaaa },
        vec![src.sge(200, 30)],
        true,
    ));
    d1.ud = ud;
    rig.post_send(u1, &[d0.clone(), d1]).expect("the datagrams");
    // The datagram segment the provider wrote is the one our driver
    // writes (qkey, then the remote QPN with MLX5_EXTENDED_UD_AV).
    assert_eq!(
        rig.sq_bytes(u1, 0, 64)[16..64],
        d0.datagram().unwrap()[..],
        "datagram segment"
    );
    assert_eq!(rig.run(), 2);
    let c = rig.poll(c1, 8);
    assert_eq!(c.len(), 2);
    expect(&c[0], 40, wc::SUCCESS, Some(wc::SEND), q1);
    expect(&c[1], 41, wc::SUCCESS, Some(wc::SEND), q1);
    let c = rig.poll(c2, 8);
    assert_eq!(c.len(), 2);
    for (p, (id, len, imm)) in c
        .iter()
        .zip([(300, 140, None), (301, 70, Some(0x5555_aaaa))])
    {
        expect(p, id, wc::SUCCESS, Some(wc::RECV), q2);
        assert_eq!(p.wc.byte_len, len, "the GRH slot and the payload: {p:?}");
        assert_eq!(p.wc.src_qp, q1, "source QP: {p:?}");
        assert_eq!(p.wc.wc_flags & wc::GRH, wc::GRH, "GRH flag: {p:?}");
        assert_eq!(p.wc.wc_flags & wc::WITH_IMM != 0, imm.is_some());
        if let Some(imm) = imm {
            assert_eq!(p.wc.imm, imm);
        }
    }
    let s = rig.read_mem(&src, 0, 4096);
    assert_eq!(rig.read_mem(&dst, 40, 100), s[..100]);
    assert_eq!(rig.read_mem(&dst, 1024 + 40, 30), s[200..230]);
    all_retired(&rig, u1);
    all_retired(&rig, u2);
    rig
}

pub fn srq() -> Rig {
    let mut rig = Rig::new();
    // 15 receives of 2 SGEs: the sim's ring holds 16 WQEs of 64 bytes.
    let (srq, changed) = rig.srq(15, 2);
    assert!(
        changed.is_empty(),
        "po_srq_new relinked the sim's SRQ differently (WQE, sim's next segment, after): {changed:?}"
    );
    let (ce, cf) = (rig.cq(64), rig.cq(64));
    let e = rig.qp(ce, QpSpec::rc());
    let f = rig.qp(
        cf,
        QpSpec {
            srq: Some(srq),
            ..QpSpec::rc()
        },
    );
    rig.connect(e, f, ALL);
    let (qe, qf) = (rig.qpn(e), rig.qpn(f));
    let src = rig.mr(4096, Access::LOCAL_WRITE);
    let dst = rig.mr(8192, Access::LOCAL_WRITE);
    rig.write_mem(&src, 0, &pattern(9, 4096));
    let s = rig.read_mem(&src, 0, 4096);
    // Three rounds of 8 receives and 8 SENDs: 24 receives through 16
    // WQEs, so the provider relinks completed WQEs (v59: at post time,
    // from its bitmap) and the sim follows the links it wrote.
    let mut next_recv = 0u64;
    for round in 0..3u64 {
        let recvs: Vec<(u64, Vec<Sge>)> = (0..8)
            .map(|i| {
                let k = next_recv + i;
                (500 + k, vec![dst.sge((k % 32) as u32 * 256, 256)])
            })
            .collect();
        rig.post_srq_recv(srq, &recvs).expect("the SRQ receives");
        let sends: Vec<Wr> = (0..8)
            .map(|i| {
                wr(
                    600 + round * 8 + i,
                    Op::Send,
                    vec![src.sge(i as u32 * 300, 10 + i as u32)],
                    true,
                )
            })
            .collect();
        rig.post_send(e, &sends).expect("the SENDs");
        assert_eq!(rig.run(), 8);
        let c = rig.poll(ce, 16);
        assert_eq!(c.len(), 8);
        for (p, w) in c.iter().zip(&sends) {
            expect(p, w.wr_id, wc::SUCCESS, Some(wc::SEND), qe);
        }
        let c = rig.poll(cf, 16);
        assert_eq!(c.len(), 8);
        for (i, p) in c.iter().enumerate() {
            let k = next_recv + i as u64;
            expect(p, 500 + k, wc::SUCCESS, Some(wc::RECV), qf);
            assert_eq!(p.wc.byte_len, 10 + i as u32);
            let at = (k % 32) as u32 * 256;
            assert_eq!(
                rig.read_mem(&dst, at, 10 + i as u32),
                s[i * 300..i * 300 + 10 + i]
            );
        }
        next_recv += 8;
    }
    // A SEND into a receive too small: a local length error on the SRQ's
    // QP (the provider hands the WQE back to the SRQ), a remote invalid
    // request at the sender; the SRQ's other receive stays posted.
    rig.post_srq_recv(
        srq,
        &[(700, vec![dst.sge(0, 8)]), (701, vec![dst.sge(256, 256)])],
    )
    .expect("the SRQ receives");
    rig.post_send(e, &[wr(800, Op::Send, vec![src.sge(0, 64)], true)])
        .expect("the SEND");
    assert_eq!(rig.run(), 1);
    let c = rig.poll(ce, 4);
    assert_eq!(c.len(), 1);
    expect(&c[0], 800, wc::REM_INV_REQ_ERR, None, qe);
    let c = rig.poll(cf, 4);
    assert_eq!(c.len(), 1, "one error CQE, no flush of the SRQ's other WQE");
    expect(&c[0], 700, wc::LOC_LEN_ERR, None, qf);
    assert_eq!((rig.state(e), rig.state(f)), (QpState::Err, QpState::Err));
    all_retired(&rig, e);
    rig
}

pub fn device_thread() -> Rig {
    let mut p = pair(true);
    let (a, qa) = (p.a, p.rig.qpn(p.a));
    let src = p.rig.read_mem(&p.a_src, 0, 4096);
    // 12 lists of 4 WRITEs (3 unsignaled, the last signaled), at most 3
    // lists outstanding (the provider's max_post is 16 WRs), then one
    // inline WRITE through BlueFlame. Nothing calls into the sim.
    let mut outstanding = 0;
    let mut done = Vec::new();
    for l in 0..12u64 {
        let list: Vec<Wr> = (0..4u64)
            .map(|i| {
                let k = (l * 4 + i) as u32;
                let to = Op::Write {
                    raddr: p.b_mem.at(k * 64),
                    rkey: p.b_mem.rkey,
                };
                wr(
                    1000 + k as u64,
                    to,
                    vec![p.a_src.sge(4095 - 64 - k, 64)],
                    i == 3,
                )
            })
            .collect();
        p.rig.post_send(a, &list).expect("a WRITE list");
        outstanding += 1;
        if outstanding == 3 {
            let c = p.rig.wait(p.acq, 1, T);
            assert_eq!(c.len(), 1, "the device thread ran the list within {T:?}");
            done.extend(c);
            outstanding -= 1;
        }
    }
    let inl = inline(wr(
        2000,
        Op::Write {
            raddr: p.b_mem.at(3072),
            rkey: p.b_mem.rkey,
        },
        vec![p.a_src.sge(0, 100)],
        true,
    ));
    p.rig.post_send(a, &[inl]).expect("the inline WRITE");
    done.extend(p.rig.wait(p.acq, outstanding + 1, T));
    let ids: Vec<u64> = done.iter().map(|p| p.wc.wr_id).collect();
    let want: Vec<u64> = (0..12).map(|l| 1000 + l * 4 + 3).chain([2000]).collect();
    assert_eq!(ids, want, "one CQE per list, in order");
    for got in &done {
        expect(got, got.wc.wr_id, wc::SUCCESS, Some(wc::RDMA_WRITE), qa);
    }
    for k in 0..48u32 {
        let from = (4095 - 64 - k) as usize;
        assert_eq!(
            p.rig.read_mem(&p.b_mem, k * 64, 64),
            src[from..from + 64],
            "WRITE {k}"
        );
    }
    assert_eq!(p.rig.read_mem(&p.b_mem, 3072, 100), src[..100]);
    all_retired(&p.rig, a);
    p.rig
}
