//! RC and UC cases: WRITE, READ, SEND, WRITE_IMM, atomics; a bad rkey;
//! the SQ, CQ and BlueFlame copies across the ring ends; UC over one CQ.

use crate::common::*;
use mlx5_dv::prm::{CqeOpcode, Syndrome};

pub fn rc_ops() -> Rig {
    let mut p = pair(false);
    let (a, b) = (p.a, p.b);
    let (qa, qb) = (p.rig.qpn(a), p.rig.qpn(b));
    let to = |off| Op::Write {
        raddr: p.b_mem.at(off),
        rkey: p.b_mem.rkey,
    };

    // WRITE: two SGEs and an inline payload unsignaled, then a
    // signaled one: one doorbell for the list (the 8-byte write of the
    // last WQE's ctrl segment), one CQE that retires all three.
    let list = [
        wr(
            1,
            to(0),
            vec![p.a_src.sge(0, 100), p.a_src.sge(100, 200)],
            false,
        ),
        inline(wr(
            2,
            to(512),
            vec![
                p.a_src.sge(300, 25),
                p.a_src.sge(0, 0),
                p.a_src.sge(325, 15),
            ],
            false,
        )),
        wr(3, to(1024), vec![p.a_src.sge(1000, 64)], true),
    ];
    let pi0 = p.rig.sq_state(a).cur_post;
    p.rig.post_send(a, &list).expect("the WRITE list");
    let s = p.rig.sq_state(a);
    assert_eq!(
        p.rig.dbrec(a)[4..8],
        (s.cur_post & 0xffff).to_be_bytes(),
        "SQ doorbell record"
    );
    let last = last_wqe(&p.rig, a, pi0, s.cur_post);
    assert_eq!(
        p.rig.bf_regs(a)[..8],
        p.rig.sq_bytes(a, last, 8)[..],
        "the 8-byte doorbell: the last WQE's ctrl segment at bf.reg + 0"
    );
    assert_eq!(s.bf_offset, 256, "the BlueFlame offset toggled");
    assert_eq!(
        p.rig.run(),
        3,
        "the sim ran the three WQEs the doorbell record named"
    );
    let c = p.rig.poll(p.acq, 8);
    assert_eq!(c.len(), 1, "one CQE for the signaled WRITE: {c:?}");
    expect(&c[0], 3, wc::SUCCESS, Some(wc::RDMA_WRITE), qa);
    all_retired(&p.rig, a);
    let src = p.rig.read_mem(&p.a_src, 0, 4096);
    assert_eq!(p.rig.read_mem(&p.b_mem, 0, 300), src[..300]);
    assert_eq!(p.rig.read_mem(&p.b_mem, 512, 40), src[300..340]);
    assert_eq!(p.rig.read_mem(&p.b_mem, 1024, 64), src[1000..1064]);

    // A single inline WRITE: the provider copies the whole WQE
    // (9 DS, 192 bytes in 64-byte blocks) to the other BlueFlame half.
    let pi0 = p.rig.sq_state(a).cur_post;
    p.rig
        .post_send(
            a,
            &[inline(wr(4, to(2048), vec![p.a_src.sge(2000, 100)], true))],
        )
        .expect("the inline WRITE");
    assert_eq!(
        p.rig.bf_regs(a)[256..256 + 192],
        p.rig.sq_bytes(a, pi0, 192)[..],
        "BlueFlame copy"
    );
    assert_eq!(p.rig.sq_state(a).bf_offset, 0);
    assert_eq!(p.rig.run(), 1);
    let c = p.rig.poll(p.acq, 8);
    assert_eq!(c.len(), 1);
    expect(&c[0], 4, wc::SUCCESS, Some(wc::RDMA_WRITE), qa);
    assert_eq!(p.rig.read_mem(&p.b_mem, 2048, 100), src[2000..2100]);

    // READ: 256 remote bytes scattered over two local SGEs.
    let remote = pattern(7, 256);
    p.rig.write_mem(&p.b_mem, 3000, &remote);
    let read = Op::Read {
        raddr: p.b_mem.at(3000),
        rkey: p.b_mem.rkey,
    };
    p.rig
        .post_send(
            a,
            &[wr(
                5,
                read,
                vec![p.a_dst.sge(0, 128), p.a_dst.sge(200, 128)],
                true,
            )],
        )
        .expect("the READ");
    assert_eq!(p.rig.run(), 1);
    let c = p.rig.poll(p.acq, 8);
    assert_eq!(c.len(), 1);
    expect(&c[0], 5, wc::SUCCESS, Some(wc::RDMA_READ), qa);
    assert_eq!(c[0].wc.byte_len, 256);
    assert_eq!(p.rig.read_mem(&p.a_dst, 0, 128), remote[..128]);
    assert_eq!(p.rig.read_mem(&p.a_dst, 200, 128), remote[128..]);

    // SEND, SEND_IMM, an inline solicited SEND and a WRITE_IMM into
    // four receives B posted with mlx5_post_recv (one of two SGEs).
    let r = &p.b_recv;
    let recvs = [
        (100, vec![r.sge(0, 256)]),
        (101, vec![r.sge(256, 100), r.sge(512, 200)]),
        (102, vec![r.sge(1024, 256)]),
        (103, vec![r.sge(1536, 256)]),
        (104, vec![r.sge(2048, 64)]),
        (105, vec![r.sge(2304, 64)]),
    ];
    p.rig.post_recv(b, &recvs).expect("the receives");
    assert_eq!(
        p.rig.dbrec(b)[0..4],
        6u32.to_be_bytes(),
        "RQ doorbell record"
    );
    let mut solicited = inline(wr(12, Op::Send, vec![p.a_src.sge(3000, 20)], true));
    solicited.solicited = true;
    let sends = [
        wr(10, Op::Send, vec![p.a_src.sge(0, 64)], true),
        wr(
            11,
            Op::SendImm { imm: 0x1122_3344 },
            vec![p.a_src.sge(64, 150), p.a_src.sge(400, 100)],
            true,
        ),
        solicited,
        wr(
            13,
            Op::WriteImm {
                raddr: p.b_mem.at(3500),
                rkey: p.b_mem.rkey,
                imm: 0xcafe_f00d,
            },
            vec![p.a_src.sge(3500, 32)],
            true,
        ),
        // Zero-length: a SEND of no SGE, a SEND whose first SGE the
        // provider leaves out (length 0), a WRITE of no SGE.
        wr(14, Op::Send, vec![], true),
        wr(
            15,
            Op::Send,
            vec![p.a_src.sge(0, 0), p.a_src.sge(4000, 40)],
            true,
        ),
        wr(16, to(0), vec![], true),
    ];
    p.rig.post_send(a, &sends).expect("the SENDs");
    assert_eq!(p.rig.run(), 7);
    let c = p.rig.poll(p.acq, 8);
    assert_eq!(c.len(), 7);
    for (got, (id, op)) in c.iter().zip([
        (10, wc::SEND),
        (11, wc::SEND),
        (12, wc::SEND),
        (13, wc::RDMA_WRITE),
        (14, wc::SEND),
        (15, wc::SEND),
        (16, wc::RDMA_WRITE),
    ]) {
        expect(got, id, wc::SUCCESS, Some(op), qa);
    }
    let c = p.rig.poll(p.bcq, 8);
    assert_eq!(c.len(), 6);
    let want = [
        (100, wc::RECV, 64, None),
        (101, wc::RECV, 250, Some(0x1122_3344)),
        (102, wc::RECV, 20, None),
        (103, wc::RECV_RDMA_WITH_IMM, 32, Some(0xcafe_f00d)),
        (104, wc::RECV, 0, None),
        (105, wc::RECV, 40, None),
    ];
    for (got, (id, op, len, imm)) in c.iter().zip(want) {
        expect(got, id, wc::SUCCESS, Some(op), qb);
        assert_eq!(got.wc.byte_len, len, "{got:?}");
        assert_eq!(
            got.wc.wc_flags & wc::WITH_IMM != 0,
            imm.is_some(),
            "{got:?}"
        );
        if let Some(imm) = imm {
            assert_eq!(got.wc.imm, imm, "{got:?}");
        }
        assert_eq!(
            (got.wc.src_qp, got.wc.wc_flags & wc::GRH),
            (0, 0),
            "RC: no source QP, no GRH"
        );
    }
    assert_eq!(p.rig.read_mem(r, 0, 64), src[..64]);
    let sent: Vec<u8> = [&src[64..214], &src[400..500]].concat();
    assert_eq!(p.rig.read_mem(r, 256, 100), sent[..100]);
    assert_eq!(p.rig.read_mem(r, 512, 150), sent[100..]);
    assert_eq!(p.rig.read_mem(r, 1024, 20), src[3000..3020]);
    assert_eq!(p.rig.read_mem(&p.b_mem, 3500, 32), src[3500..3532]);
    assert_eq!(p.rig.read_mem(r, 2304, 40), src[4000..4040]);
    assert_eq!(
        p.rig.read_mem(&p.b_mem, 0, 300),
        src[..300],
        "WRITE 16 wrote nothing"
    );

    // Atomics on a remote u64 (the sim: host byte order, as a ConnectX
    // in the host-endianness atomic mode the kernel sets up).
    p.rig.write_mem(&p.b_mem, 3840, &5u64.to_ne_bytes());
    let at = p.b_mem.at(3840);
    let atomics = [
        wr(
            20,
            Op::CmpSwap {
                raddr: at,
                rkey: p.b_mem.rkey,
                compare: 5,
                swap: 77,
            },
            vec![p.a_dst.sge(512, 8)],
            true,
        ),
        wr(
            21,
            Op::CmpSwap {
                raddr: at,
                rkey: p.b_mem.rkey,
                compare: 5,
                swap: 99,
            },
            vec![p.a_dst.sge(520, 8)],
            true,
        ),
        wr(
            22,
            Op::FetchAdd {
                raddr: at,
                rkey: p.b_mem.rkey,
                add: 10,
            },
            vec![p.a_dst.sge(528, 8)],
            true,
        ),
    ];
    p.rig.post_send(a, &atomics).expect("the atomics");
    assert_eq!(p.rig.run(), 3);
    let c = p.rig.poll(p.acq, 8);
    assert_eq!(c.len(), 3);
    for (got, (id, op)) in c.iter().zip([
        (20, wc::COMP_SWAP),
        (21, wc::COMP_SWAP),
        (22, wc::FETCH_ADD),
    ]) {
        expect(got, id, wc::SUCCESS, Some(op), qa);
        assert_eq!(got.wc.byte_len, 8);
    }
    let u64_at = |rig: &Rig, r: &Region, off| {
        u64::from_ne_bytes(rig.read_mem(r, off, 8).try_into().unwrap())
    };
    assert_eq!(u64_at(&p.rig, &p.a_dst, 512), 5, "CS: the old value landed");
    assert_eq!(
        u64_at(&p.rig, &p.a_dst, 520),
        77,
        "CS that failed: the value it found"
    );
    assert_eq!(u64_at(&p.rig, &p.a_dst, 528), 77, "FA: the old value");
    assert_eq!(
        u64_at(&p.rig, &p.b_mem, 3840),
        87,
        "remote: swapped once, then added"
    );

    all_retired(&p.rig, a);
    all_retired(&p.rig, b);
    assert!(!p.rig.overrun(p.acq) && !p.rig.overrun(p.bcq));
    assert_eq!(
        (p.rig.state(a), p.rig.state(b)),
        (QpState::Rts, QpState::Rts)
    );
    p.rig
}

pub fn bad_rkey() -> Rig {
    let mut p = pair(false);
    let (a, b) = (p.a, p.b);
    let (qa, qb) = (p.rig.qpn(a), p.rig.qpn(b));
    let r = p.b_recv;
    p.rig
        .post_recv(
            b,
            &[(200, vec![r.sge(0, 128)]), (201, vec![r.sge(128, 128)])],
        )
        .expect("the receives");
    let bad = p.b_mem.rkey ^ 0x0100_0000;
    let list = [
        wr(
            30,
            Op::Write {
                raddr: p.b_mem.at(0),
                rkey: bad,
            },
            vec![p.a_src.sge(0, 64)],
            true,
        ),
        wr(
            31,
            Op::Write {
                raddr: p.b_mem.at(64),
                rkey: p.b_mem.rkey,
            },
            vec![p.a_src.sge(0, 64)],
            false,
        ),
        wr(32, Op::Send, vec![p.a_src.sge(0, 16)], true),
    ];
    p.rig.post_send(a, &list).expect("the list");
    // Three WQEs, and B (in ERR by the class C error) flushes its two receives.
    assert_eq!(p.rig.run(), 5);
    let c = p.rig.poll(p.acq, 8);
    assert_eq!(
        c.len(),
        3,
        "the error, then a flush for each later WR, signaled or not"
    );
    expect(&c[0], 30, wc::REM_ACCESS_ERR, None, qa);
    assert_eq!(
        (c[0].ours.opcode, c[0].ours.syndrome),
        (CqeOpcode::REQ_ERR, Syndrome::REMOTE_ACCESS_ERR)
    );
    for (got, id) in c[1..].iter().zip([31, 32]) {
        expect(got, id, wc::WR_FLUSH_ERR, None, qa);
        assert_eq!(got.ours.syndrome, Syndrome::WR_FLUSH_ERR);
    }
    let c = p.rig.poll(p.bcq, 8);
    assert_eq!(c.len(), 2, "B's receives flushed");
    for (got, id) in c.iter().zip([200, 201]) {
        expect(got, id, wc::WR_FLUSH_ERR, None, qb);
        assert_eq!(got.ours.opcode, CqeOpcode::RESP_ERR);
    }
    assert_eq!(
        (p.rig.state(a), p.rig.state(b)),
        (QpState::Err, QpState::Err)
    );
    assert!(
        p.rig.read_mem(&p.b_mem, 0, 128).iter().all(|&x| x == 0),
        "remote memory untouched"
    );
    // A WR posted after the error flushes too.
    p.rig
        .post_send(a, &[wr(33, Op::Send, vec![p.a_src.sge(0, 16)], false)])
        .expect("a WR after the error");
    assert_eq!(p.rig.run(), 1);
    let c = p.rig.poll(p.acq, 8);
    assert_eq!(c.len(), 1);
    expect(&c[0], 33, wc::WR_FLUSH_ERR, None, qa);
    all_retired(&p.rig, a);
    all_retired(&p.rig, b);
    p.rig
}

/// A 16-WQEBB SQ (4 WRs outstanding) and a CQ of 4 CQEs of 128 bytes:
/// 80 single WRITEs and 16 lists of two walk the SQ eleven times round
/// (BlueFlame-copied WQEs across its end: the copy's source wraps too),
/// and the CQ 28 times, the sim reading the provider's consumer index
/// (it detects overrun) before each CQE.
pub fn wrap() -> Rig {
    let mut rig = Rig::new();
    let acq = rig.cq_sized(4, 128);
    let bcq = rig.cq(64);
    let small = QpSpec {
        sq_wqebbs: 16,
        ..QpSpec::rc()
    };
    let a = rig.qp(acq, small);
    let b = rig.qp(bcq, QpSpec::rc());
    rig.connect(a, b, ALL);
    let qa = rig.qpn(a);
    let src = rig.mr(4096, Access::LOCAL_WRITE);
    let dst = rig.mr(8192, ALL);
    rig.write_mem(&src, 0, &pattern(5, 4096));
    let s = rig.read_mem(&src, 0, 4096);
    let lens = [1u32, 12, 28, 29, 60, 92, 100, 128];
    let mut straddles = 0;
    for i in 0..96u32 {
        let len = lens[i as usize % lens.len()];
        let at = (i * 137) % (4096 - 128);
        let to = |k: u32| Op::Write {
            raddr: dst.at(k * 128),
            rkey: dst.rkey,
        };
        let st = rig.sq_state(a);
        let (pi0, off) = (st.cur_post, st.bf_offset as usize);
        let list = if i % 6 == 5 {
            vec![
                wr(i as u64, to(i % 64), vec![src.sge(at, len)], true),
                inline(wr(
                    100 + i as u64,
                    to((i + 32) % 64),
                    vec![src.sge(at, len)],
                    true,
                )),
            ]
        } else if i % 3 == 2 {
            vec![wr(i as u64, to(i % 64), vec![src.sge(at, len)], true)]
        } else {
            vec![inline(wr(
                i as u64,
                to(i % 64),
                vec![src.sge(at, len)],
                true,
            ))]
        };
        rig.post_send(a, &list).expect("a WRITE");
        let pi1 = rig.sq_state(a).cur_post;
        let ds = (rig.sq_bytes(a, pi0, 8)[7] & 0x3f) as usize;
        // What the provider wrote to the register: the whole WQE (inline,
        // alone, more than one DS) or its first 8 bytes; the last WQE's.
        let last = last_wqe(&rig, a, pi0, pi1);
        let n = if list.len() == 1 && list[0].inline {
            let n = (ds * 16).next_multiple_of(64);
            if (pi0 & 15) as usize + n / 64 > 16 {
                // The WQE continues at the ring's start; so does the
                // source of the provider's BlueFlame copy.
                straddles += 1;
            }
            n
        } else {
            8
        };
        assert_eq!(
            rig.bf_regs(a)[off..off + n],
            rig.sq_bytes(a, last, n)[..],
            "WR {i}: the doorbell's register bytes (pi {pi0}, {n} bytes)"
        );
        assert_eq!(rig.run(), list.len());
        let c = rig.poll(acq, 4);
        assert_eq!(c.len(), list.len(), "WR {i}");
        for (got, w) in c.iter().zip(&list) {
            expect(got, w.wr_id, wc::SUCCESS, Some(wc::RDMA_WRITE), qa);
            let k = match w.op {
                Op::Write { raddr, .. } => ((raddr - dst.addr) / 128) as u32,
                _ => unreachable!(),
            };
            let want = &s[at as usize..(at + len) as usize];
            assert_eq!(rig.read_mem(&dst, k * 128, len), want, "WR {}", w.wr_id);
        }
    }
    let passes = rig.sq_state(a).cur_post / 16;
    assert!(
        passes >= 10 && straddles >= 2,
        "{passes} passes of the SQ, {straddles} BlueFlame-copied WQEs across its end"
    );
    assert!(
        !rig.overrun(acq),
        "the sim saw the provider's consumer index"
    );
    all_retired(&rig, a);
    rig
}

/// UC both ways over one CQ: a WRITE, a SEND_IMM and a SEND; the
/// provider finds each CQE's QP by the user index the sim wrote.
pub fn uc_shared_cq() -> Rig {
    let mut rig = Rig::new();
    let cq = rig.cq(16);
    let uc = QpSpec {
        qp_type: QpType::Uc,
        ..QpSpec::rc()
    };
    let (a, b) = (rig.qp(cq, uc), rig.qp(cq, uc));
    rig.connect(a, b, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let (qa, qb) = (rig.qpn(a), rig.qpn(b));
    let src = rig.mr(4096, Access::LOCAL_WRITE);
    let dst = rig.mr(4096, ALL);
    rig.write_mem(&src, 0, &pattern(11, 4096));
    let s = rig.read_mem(&src, 0, 4096);
    rig.post_recv(b, &[(70, vec![dst.sge(1024, 256)])])
        .expect("B's receive");
    rig.post_recv(a, &[(71, vec![dst.sge(2048, 256)])])
        .expect("A's receive");
    let write = Op::Write {
        raddr: dst.at(0),
        rkey: dst.rkey,
    };
    rig.post_send(
        a,
        &[
            wr(60, write, vec![src.sge(0, 64)], true),
            wr(61, Op::SendImm { imm: 0xabcd }, vec![src.sge(64, 32)], true),
        ],
    )
    .expect("A's sends");
    rig.post_send(b, &[wr(62, Op::Send, vec![src.sge(96, 16)], true)])
        .expect("B's send");
    assert_eq!(rig.run(), 3);
    let mut c = rig.poll(cq, 16);
    assert_eq!(c.len(), 5, "{c:?}");
    c.sort_by_key(|p| p.wc.wr_id);
    let want = [
        (60, qa, wc::RDMA_WRITE, None),
        (61, qa, wc::SEND, None),
        (62, qb, wc::SEND, None),
        (70, qb, wc::RECV, Some((32, 0xabcd))),
        (71, qa, wc::RECV, Some((16, 0))),
    ];
    for (got, (id, qpn, op, recv)) in c.iter().zip(want) {
        expect(got, id, wc::SUCCESS, Some(op), qpn);
        if let Some((len, imm)) = recv {
            assert_eq!(got.wc.byte_len, len);
            assert_eq!(got.wc.imm, imm);
        }
    }
    assert_eq!(rig.read_mem(&dst, 0, 64), s[..64]);
    assert_eq!(rig.read_mem(&dst, 1024, 32), s[64..96]);
    assert_eq!(rig.read_mem(&dst, 2048, 16), s[96..112]);
    all_retired(&rig, a);
    all_retired(&rig, b);
    rig
}
