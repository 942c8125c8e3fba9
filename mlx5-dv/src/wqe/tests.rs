//! WQE codec unit tests: hand-worked vectors, wrap-around, refusals, round trips.

use super::*;
use crate::prm::WQEBB;
use crate::ring::RingBuf;

fn geo8() -> SqGeometry {
    SqGeometry {
        wqe_cnt: 8,
        qpn: 0x1234,
        max_inline: 256,
        max_wqebbs: 16,
    }
}

/// The vector from the walking-skeleton issue : a 100-byte
/// inline RDMA WRITE at pi 7 of an 8-WQEBB SQ wraps to the buffer's start.
#[test]
fn inline_write_wraps_the_ring() {
    let mut mem = vec![0xeeu8; 512];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let payload: Vec<u8> = (0u8..100).collect();
    let wqe = SendWqe {
        datagram: None,
        masked: None,
        atomic: None,
        opcode: WqeOpcode::RDMA_WRITE,
        flags: CtrlFlags::CQ_UPDATE,
        imm: 0,
        remote: Some(RemoteSeg {
            addr: 0xdead0000,
            rkey: 0xabc,
        }),
        payload: Payload::Inline(&payload),
    };
    let w = write_send_wqe(&mut sq, &geo8(), 7, &wqe, 8).unwrap();
    assert_eq!(
        w,
        Written {
            ds: 9,
            wqebbs: 3,
            next_pi: 10
        }
    );
    assert_eq!(
        &mem[448..464],
        &[0, 0, 7, 8, 0, 0x12, 0x34, 9, 0, 0, 0, 8, 0, 0, 0, 0]
    );
    assert_eq!(
        &mem[464..480],
        &[0, 0, 0, 0, 0xde, 0xad, 0, 0, 0, 0, 0x0a, 0xbc, 0, 0, 0, 0]
    );
    assert_eq!(&mem[480..484], &[0x80, 0, 0, 0x64]);
    assert_eq!(&mem[484..512], &payload[0..28]);
    assert_eq!(&mem[0..72], &payload[28..100]);
    // Bytes past the WQE (and before the ctrl segment) are untouched.
    assert!(mem[72..448].iter().all(|&b| b == 0xee));
    assert_eq!(
        crate::doorbell::sq_dbrec(w.next_pi).to_be_bytes(),
        [0, 0, 0, 0x0a]
    );
}

#[test]
fn sge_write_layout_and_zero_length_sges_left_out() {
    let mut mem = vec![0u8; 512];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let sges = [
        DataSeg {
            addr: 0x1000,
            len: 4096,
            lkey: 0x11,
        },
        DataSeg {
            addr: 0x9999,
            len: 0,
            lkey: 0x22,
        },
    ];
    let wqe = SendWqe {
        datagram: None,
        masked: None,
        atomic: None,
        opcode: WqeOpcode::RDMA_WRITE,
        flags: CtrlFlags::empty(),
        imm: 0,
        remote: Some(RemoteSeg {
            addr: 0x2000,
            rkey: 0x33,
        }),
        payload: Payload::Sges(&sges),
    };
    let w = write_send_wqe(&mut sq, &geo8(), 0x10001, &wqe, 8).unwrap();
    assert_eq!(
        w,
        Written {
            ds: 3,
            wqebbs: 1,
            next_pi: 0x10002
        }
    );
    // wqe_idx is pi & 0xffff; slot is pi & 7 = 1.
    assert_eq!(&mem[64..72], &[0, 0, 0x01, 8, 0, 0x12, 0x34, 3]);
    assert_eq!(
        &mem[96..112],
        &[0, 0, 0x10, 0, 0, 0, 0, 0x11, 0, 0, 0, 0, 0, 0, 0x10, 0]
    );
    assert!(mem[112..128].iter().all(|&b| b == 0));
}

#[test]
fn bad_input_writes_nothing() {
    let mut mem = vec![0x5au8; 512];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let big = vec![0u8; 300];
    let sge = [DataSeg {
        addr: 0,
        len: 1,
        lkey: 0,
    }; 70];
    let huge = [DataSeg {
        addr: 0,
        len: 0x7fff_ffff,
        lkey: 0,
    }; 2];
    let cases: Vec<(SendWqe<'_>, WqeError)> = vec![
        (
            SendWqe {
                datagram: None,
                opcode: WqeOpcode::RDMA_WRITE,
                flags: CtrlFlags::empty(),
                imm: 0,
                remote: None,
                masked: None,
                atomic: None,
                payload: Payload::Inline(b"x"),
            },
            WqeError::MissingRemote(8),
        ),
        (
            SendWqe {
                datagram: None,
                opcode: WqeOpcode::SEND,
                flags: CtrlFlags::empty(),
                imm: 0,
                remote: None,
                masked: None,
                atomic: None,
                payload: Payload::Inline(&big),
            },
            WqeError::InlineTooLong { len: 300, max: 256 },
        ),
        (
            SendWqe {
                datagram: None,
                opcode: WqeOpcode::SEND,
                flags: CtrlFlags::empty(),
                imm: 0,
                remote: None,
                masked: None,
                atomic: None,
                payload: Payload::Sges(&sge),
            },
            WqeError::TooManyDs { ds: 71 },
        ),
        (
            SendWqe {
                datagram: None,
                opcode: WqeOpcode::SEND,
                flags: CtrlFlags::empty(),
                imm: 0,
                remote: None,
                masked: None,
                atomic: None,
                payload: Payload::Sges(&huge),
            },
            WqeError::LengthOverflow {
                total: 2 * 0x7fff_ffff,
            },
        ),
        (
            SendWqe {
                datagram: None,
                opcode: WqeOpcode::SEND,
                flags: CtrlFlags::empty(),
                imm: 0,
                remote: None,
                masked: None,
                atomic: None,
                payload: Payload::Sges(&sge[..20]),
            },
            WqeError::QueueFull { need: 6, free: 5 },
        ),
    ];
    for (wqe, want) in cases {
        assert_eq!(write_send_wqe(&mut sq, &geo8(), 3, &wqe, 5), Err(want));
    }
    assert!(mem.iter().all(|&b| b == 0x5a));
}

fn wqe<'a>(opcode: WqeOpcode, payload: Payload<'a>) -> SendWqe<'a> {
    SendWqe {
        datagram: None,
        opcode,
        flags: CtrlFlags::CQ_UPDATE,
        imm: 0,
        remote: Some(RemoteSeg {
            addr: 0x1000,
            rkey: 0x77,
        }),
        masked: None,
        atomic: None,
        payload,
    }
}

#[test]
fn inline_ds_by_hand() {
    for (len, ds) in [(1, 1), (12, 1), (13, 2), (28, 2), (29, 3), (60, 4), (61, 5)] {
        assert_eq!(inline_ds(len), ds, "inline length {len}");
    }
}

#[test]
fn three_sge_write_in_the_last_wqebb_wraps_its_third_data_segment() {
    let mut mem = vec![0u8; 512];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let sges = [
        DataSeg {
            addr: 0xa000,
            len: 1,
            lkey: 1,
        },
        DataSeg {
            addr: 0xb000,
            len: 2,
            lkey: 2,
        },
        DataSeg {
            addr: 0xc000,
            len: 3,
            lkey: 3,
        },
    ];
    let w = write_send_wqe(
        &mut sq,
        &geo8(),
        7,
        &wqe(WqeOpcode::RDMA_WRITE, Payload::Sges(&sges)),
        8,
    )
    .unwrap();
    assert_eq!((w.ds, w.wqebbs, w.next_pi), (5, 2, 9));
    assert_eq!(&mem[480..484], &[0, 0, 0, 1]);
    assert_eq!(&mem[496..500], &[0, 0, 0, 2]);
    assert_eq!(&mem[0..16], &data_seg(sges[2]));
}

#[test]
fn atomics_by_hand() {
    let mut mem = vec![0u8; 512];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let old = [DataSeg {
        addr: 0x5000,
        len: 8,
        lkey: 9,
    }];
    let mut fa = wqe(WqeOpcode::ATOMIC_FA, Payload::Sges(&old));
    fa.atomic = Some(AtomicSeg {
        swap_add: 0x10,
        compare: 0xdead,
    });
    let w = write_send_wqe(&mut sq, &geo8(), 0, &fa, 8).unwrap();
    assert_eq!((w.ds, w.wqebbs), (4, 1));
    assert_eq!(&mem[32..40], &[0, 0, 0, 0, 0, 0, 0, 0x10]);
    assert_eq!(
        &mem[40..48],
        &[0; 8],
        "FETCH_AND_ADD writes no compare value"
    );
    assert_eq!(
        &mem[48..52],
        &[0, 0, 0, 8],
        "the old value's data segment is 8 bytes"
    );

    let mut cs = wqe(WqeOpcode::ATOMIC_CS, Payload::Sges(&old));
    cs.atomic = Some(AtomicSeg {
        swap_add: 9,
        compare: 5,
    });
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let w = write_send_wqe(&mut sq, &geo8(), 1, &cs, 8).unwrap();
    assert_eq!((w.ds, w.wqebbs), (4, 1));
    assert_eq!(&mem[96..104], &9u64.to_be_bytes());
    assert_eq!(&mem[104..112], &5u64.to_be_bytes());
    assert_eq!(mem[67], 0x11, "ATOMIC_CS opcode");

    // Bad atomics write nothing.
    let before = mem.clone();
    let mut bad = cs;
    bad.remote = Some(RemoteSeg {
        addr: 0x1004,
        rkey: 1,
    });
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    assert_eq!(
        write_send_wqe(&mut sq, &geo8(), 2, &bad, 8),
        Err(WqeError::UnalignedAtomic(0x1004))
    );
    bad = cs;
    bad.atomic = None;
    assert_eq!(
        write_send_wqe(&mut sq, &geo8(), 2, &bad, 8),
        Err(WqeError::MissingAtomic(0x11))
    );
    bad = cs;
    bad.payload = Payload::Sges(&[]);
    assert_eq!(
        write_send_wqe(&mut sq, &geo8(), 2, &bad, 8),
        Err(WqeError::AtomicSge)
    );
    bad = cs;
    bad.remote = None;
    assert_eq!(
        write_send_wqe(&mut sq, &geo8(), 2, &bad, 8),
        Err(WqeError::MissingRemote(0x11))
    );
    assert_eq!(mem, before);
}

#[test]
fn send_with_imm_round_trips_through_a_cqe() {
    let mut mem = vec![0u8; 512];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let mut w = wqe(WqeOpcode::SEND_IMM, Payload::Inline(b"x"));
    w.remote = None;
    w.imm = 0x89AB_CDEF;
    write_send_wqe(&mut sq, &geo8(), 0, &w, 8).unwrap();
    assert_eq!(&mem[12..16], &[0x89, 0xAB, 0xCD, 0xEF]);
    let mut cqe = [0u8; 64];
    cqe[36..40].copy_from_slice(&mem[12..16]);
    cqe[63] = crate::prm::CqeOpcode::RESP_SEND_IMM.0 << 4;
    let c = crate::cqe::Cqe::decode(&cqe);
    assert_eq!(c.imm, 0x89AB_CDEF);
    assert_eq!(c.imm as u64, 0x0000_0000_89AB_CDEF);
    // Opcodes without an immediate write 0 there, whatever `imm` holds.
    let mut plain = w;
    plain.opcode = WqeOpcode::SEND;
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    write_send_wqe(&mut sq, &geo8(), 1, &plain, 8).unwrap();
    assert_eq!(&mem[64 + 12..64 + 16], &[0; 4]);
}

#[test]
fn read_refuses_inline() {
    let mut mem = vec![0u8; 512];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let r = wqe(WqeOpcode::RDMA_READ, Payload::Inline(b"no"));
    assert_eq!(
        write_send_wqe(&mut sq, &geo8(), 0, &r, 8),
        Err(WqeError::InlineNotAllowed(0x10))
    );
    assert!(mem.iter().all(|&b| b == 0));
}

#[test]
fn receive_wqe_ends_with_the_invalid_lkey_when_short() {
    let mut mem = vec![0xffu8; 4 * 64];
    let mut rq = RingBuf::from_slice(&mut mem).unwrap();
    let two = [
        DataSeg {
            addr: 0x10,
            len: 100,
            lkey: 5,
        },
        DataSeg {
            addr: 0x20,
            len: 0,
            lkey: 6,
        },
        DataSeg {
            addr: 0x30,
            len: 7,
            lkey: 7,
        },
    ];
    write_recv_wqe(&mut rq, 4, 64, 5, &two).unwrap();
    // Slot 5 & 3 = 1: two data segments (the empty one left out), then the terminator.
    assert_eq!(&mem[64..80], &data_seg(two[0]));
    assert_eq!(&mem[80..96], &data_seg(two[2]));
    assert_eq!(
        &mem[96..112],
        &[0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    assert!(mem[112..128].iter().all(|&b| b == 0xff));
    let four = [DataSeg {
        addr: 1,
        len: 1,
        lkey: 1,
    }; 4];
    let mut rq = RingBuf::from_slice(&mut mem).unwrap();
    write_recv_wqe(&mut rq, 4, 64, 2, &four).unwrap();
    assert_eq!(
        &mem[176..192],
        &data_seg(four[3]),
        "a full stride has no terminator"
    );
    let before = mem.clone();
    let mut rq = RingBuf::from_slice(&mut mem).unwrap();
    assert_eq!(
        write_recv_wqe(
            &mut rq,
            4,
            64,
            0,
            &[DataSeg {
                addr: 1,
                len: 1,
                lkey: 1
            }; 5]
        ),
        Err(WqeError::RecvTooManySges {
            need: 5,
            stride: 64
        })
    );
    assert_eq!(mem, before);
}

#[test]
fn decode_reads_back_what_was_written() {
    let mut mem = vec![0u8; 512];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let payload: Vec<u8> = (0u8..100).collect();
    let mut w = wqe(WqeOpcode::RDMA_WRITE_IMM, Payload::Inline(&payload));
    w.imm = 0x0102_0304;
    write_send_wqe(&mut sq, &geo8(), 7, &w, 8).unwrap();
    let d = decode_send_wqe(&sq, 8, 7).unwrap();
    assert_eq!(
        (d.opcode, d.wqe_idx, d.qpn, d.ds, d.imm),
        (WqeOpcode::RDMA_WRITE_IMM, 7, 0x1234, 9, 0x0102_0304)
    );
    assert_eq!(d.remote, w.remote);
    let mut back = [0u8; 128];
    assert_eq!(d.inline_bytes(&sq, &mut back), 100);
    assert_eq!(&back[..100], &payload[..]);

    let old = [DataSeg {
        addr: 0x5000,
        len: 16,
        lkey: 9,
    }];
    let mut cs = wqe(WqeOpcode::ATOMIC_CS, Payload::Sges(&old));
    cs.atomic = Some(AtomicSeg {
        swap_add: 9,
        compare: 5,
    });
    write_send_wqe(&mut sq, &geo8(), 2, &cs, 8).unwrap();
    let d = decode_send_wqe(&sq, 8, 2).unwrap();
    assert_eq!(d.atomic, cs.atomic);
    assert_eq!(d.sge(&sq, 0), Some(DataSeg { len: 8, ..old[0] }));
    assert_eq!(d.sge(&sq, 1), None);
}

/// Every WQE shape, at every producer index of a small ring: where the
/// WQE reaches the end of the ring (scratch buffer, then a wrapping copy)
/// the ring holds the same bytes, rotated, as where it does not (direct
/// stores), and nothing outside the bytes the WQE writes changes.
#[test]
fn wrapped_and_direct_writes_lay_out_the_same_bytes() {
    let sges = [
        DataSeg {
            addr: 0x1111_2222_3333_4444,
            len: 17,
            lkey: 0x55,
        },
        DataSeg {
            addr: 9,
            len: 0,
            lkey: 1,
        },
        DataSeg {
            addr: 0xabcdef,
            len: 4096,
            lkey: 0x66,
        },
    ];
    let old = [DataSeg {
        addr: 0x8000,
        len: 8,
        lkey: 3,
    }];
    let bytes: Vec<u8> = (1..=200u8).collect();
    let mut shapes = vec![
        wqe(WqeOpcode::RDMA_WRITE, Payload::Sges(&sges)),
        wqe(WqeOpcode::RDMA_READ, Payload::Sges(&sges[..1])),
        wqe(WqeOpcode::NOP, Payload::Inline(&[])),
    ];
    // Under Miri (where the whole set takes a minute) only the lengths at
    // the edges of `copy_inline`'s arms and the producer indices where a WQE
    // starts at the ring's start or may reach its end: the unsafe stores
    // Miri checks are the same, fewer shapes pass through them.
    let lens: &[usize] = if cfg!(miri) {
        &[1, 3, 4, 8, 16, 31, 32, 64, 65, 200]
    } else {
        &[
            1, 3, 4, 7, 8, 12, 13, 15, 16, 28, 31, 32, 60, 64, 65, 100, 200,
        ]
    };
    let pis: &[u32] = if cfg!(miri) {
        &[0, 4, 5, 6, 7]
    } else {
        &[0, 1, 2, 3, 4, 5, 6, 7]
    };
    for &len in lens {
        shapes.push(wqe(
            WqeOpcode::RDMA_WRITE_IMM,
            Payload::Inline(&bytes[..len]),
        ));
        let mut send = wqe(WqeOpcode::SEND, Payload::Inline(&bytes[..len]));
        send.remote = None;
        shapes.push(send);
    }
    for op in [WqeOpcode::ATOMIC_CS, WqeOpcode::ATOMIC_FA] {
        let mut a = wqe(op, Payload::Sges(&old));
        a.atomic = Some(AtomicSeg {
            swap_add: 0x0102_0304_0506_0708,
            compare: 0x1112_1314_1516_1718,
        });
        shapes.push(a);
    }
    for w in &shapes {
        // The reference: written at index 0 of a ring large enough that
        // nothing wraps.
        let mut big = vec![0xeeu8; 16 * WQEBB];
        let mut ring = RingBuf::from_slice(&mut big).unwrap();
        let mut g = geo8();
        g.wqe_cnt = 16;
        let r = write_send_wqe(&mut ring, &g, 0, w, 16).unwrap();
        for &pi in pis {
            let mut mem = vec![0xeeu8; 8 * WQEBB];
            let mut sq = RingBuf::from_slice(&mut mem).unwrap();
            let got = write_send_wqe(&mut sq, &geo8(), pi, w, 8).unwrap();
            assert_eq!((got.ds, got.wqebbs), (r.ds, r.wqebbs));
            let base = pi as usize * WQEBB;
            for k in 0..mem.len() {
                let want = if k < 16 * WQEBB - base {
                    // Bytes from the WQE's start on (mod the ring).
                    big.get(k).copied()
                } else {
                    None
                };
                let at = (base + k) % mem.len();
                // The ctrl segment's wqe_idx is the producer index.
                let want = match (k, want) {
                    (1, Some(_)) => Some((pi >> 8) as u8),
                    (2, Some(_)) => Some(pi as u8),
                    (_, w) => w,
                };
                assert_eq!(Some(mem[at]), want, "{:?} at pi {pi}, byte {k}", w.opcode);
            }
        }
    }
}

/// Found by the `wqe_encode` fuzzer: a 2^31-byte data segment's byte count
/// has bit 31 set, which the device reads as an inline segment.
#[test]
fn an_sge_of_2_pow_31_bytes_is_refused() {
    let mut mem = vec![0u8; 512];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let big = [DataSeg {
        addr: 0,
        len: 1 << 31,
        lkey: 1,
    }];
    let w = wqe(WqeOpcode::RDMA_WRITE, Payload::Sges(&big));
    assert_eq!(
        write_send_wqe(&mut sq, &geo8(), 0, &w, 8),
        Err(WqeError::SgeTooLong { len: 1 << 31 })
    );
    assert!(mem.iter().all(|&b| b == 0));
}

/// A UD SEND: ctrl, the 48-byte datagram segment as given, then the data
/// segment; 5 DS, 2 WQEBBs. It wraps the ring at its last WQEBB, decodes
/// back (the AV and the SGE), and the RC decoder does not take it for RC.
#[test]
fn ud_send_carries_its_datagram_segment() {
    let mut mem = vec![0u8; 512];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let mut av = [0u8; DATAGRAM_SEG];
    for (i, b) in av.iter_mut().enumerate() {
        *b = i as u8 + 1;
    }
    av[AV_DQP_DCT..AV_DQP_DCT + 4].copy_from_slice(&(EXTENDED_UD_AV | 0x4321).to_be_bytes());
    let d = [DataSeg {
        addr: 0x1000,
        len: 256,
        lkey: 0x77,
    }];
    let wqe = SendWqe {
        datagram: Some(Datagram::Ud(&av)),
        masked: None,
        atomic: None,
        opcode: WqeOpcode::SEND,
        flags: CtrlFlags::CQ_UPDATE,
        imm: 0,
        remote: None,
        payload: Payload::Sges(&d),
    };
    let w = write_send_wqe(&mut sq, &geo8(), 7, &wqe, 8).unwrap();
    assert_eq!((w.ds, w.wqebbs), (5, 2));
    assert_eq!(
        &mem[7 * WQEBB + 16..7 * WQEBB + 64],
        &av[..],
        "the AV after ctrl"
    );
    assert_eq!(
        &mem[0..4],
        &256u32.to_be_bytes(),
        "the data segment wrapped"
    );
    let sq = RingBuf::from_slice(&mut mem).unwrap();
    let back = decode_ud_send_wqe(&sq, 8, 7).unwrap();
    assert_eq!(back.av(&sq), Some(av));
    let dest = Some(DatagramDest {
        qkey: 0x0102_0304,
        remote_qpn: 0x4321,
    });
    assert_eq!(back.ud_dest(&sq), dest);
    assert_eq!(back.sge(&sq, 0), Some(d[0]));
    assert_eq!(back.ds, 5);
    // A UD WQE is SEND or SEND_IMM only.
    let mut mem2 = vec![0u8; 512];
    let mut sq2 = RingBuf::from_slice(&mut mem2).unwrap();
    let write = SendWqe {
        opcode: WqeOpcode::RDMA_WRITE,
        remote: Some(RemoteSeg { addr: 0, rkey: 1 }),
        ..wqe
    };
    assert!(matches!(
        write_send_wqe(&mut sq2, &geo8(), 0, &write, 8),
        Err(WqeError::UnsupportedOpcode(_))
    ));
    assert!(mem2.iter().all(|&b| b == 0), "nothing written");
}
