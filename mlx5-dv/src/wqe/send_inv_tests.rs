//! SEND with invalidate (`MLX5_OPCODE_SEND_INVAL`, 0x01): laid out as a
//! SEND (ctrl, then data segments or an inline segment), its ctrl
//! immediate (bytes 12..16) the rkey to invalidate, big-endian, as
//! libmlx5's `_mlx5_post_send` writes `ctrl->imm =
//! htobe32(wr->invalidate_rkey)` (rdma-core `providers/mlx5/qp.c`,
//! `send_ieth`). By hand, wrapping the ring, read back, and on each
//! transport (RC and UC, DC take it; UD does not: rdma-core
//! `MLX5_SUPPORTED_SEND_OPS_FLAGS_*`).

use super::*;
use crate::prm::WQEBB;
use crate::ring::RingBuf;

const RKEY: u32 = 0x1234_5678;

fn geo8() -> SqGeometry {
    SqGeometry {
        wqe_cnt: 8,
        qpn: 0x1234,
        max_inline: 256,
        max_wqebbs: 16,
    }
}

fn send_inv<'a>(payload: Payload<'a>) -> SendWqe<'a> {
    SendWqe {
        datagram: None,
        masked: None,
        atomic: None,
        opcode: WqeOpcode::SEND_INVAL,
        flags: CtrlFlags::CQ_UPDATE,
        imm: RKEY,
        remote: None,
        payload,
    }
}

#[test]
fn send_inval_carries_its_rkey_in_the_immediate() {
    assert!(WqeOpcode::SEND_INVAL.has_imm());
    assert!(!WqeOpcode::SEND_INVAL.has_imm_data());
    assert!(!WqeOpcode::SEND_INVAL.has_raddr());
    for op in [WqeOpcode::SEND_IMM, WqeOpcode::RDMA_WRITE_IMM] {
        assert!(op.has_imm() && op.has_imm_data(), "{op:?}");
    }
    for op in [WqeOpcode::SEND, WqeOpcode::RDMA_WRITE, WqeOpcode::RDMA_READ] {
        assert!(!op.has_imm() && !op.has_imm_data(), "{op:?}");
    }
}

/// One SGE at pi 3: ctrl (opcode 0x01, DS 2, the rkey big-endian at
/// bytes 12..16), then the data segment; one WQEBB.
#[test]
fn send_inval_of_one_sge_by_hand() {
    let mut mem = vec![0xeeu8; 8 * WQEBB];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let d = [DataSeg {
        addr: 0x0102_0304_0506_0708,
        len: 0x1000,
        lkey: 0xaabb_ccdd,
    }];
    let w = write_send_wqe(&mut sq, &geo8(), 3, &send_inv(Payload::Sges(&d)), 8).unwrap();
    assert_eq!(
        w,
        Written {
            ds: 2,
            wqebbs: 1,
            next_pi: 4
        }
    );
    let at = 3 * WQEBB;
    assert_eq!(
        &mem[at..at + 16],
        &[0, 0, 3, 0x01, 0, 0x12, 0x34, 2, 0, 0, 0, 0x08, 0x12, 0x34, 0x56, 0x78]
    );
    assert_eq!(
        &mem[at + 16..at + 32],
        &[0, 0, 0x10, 0, 0xaa, 0xbb, 0xcc, 0xdd, 1, 2, 3, 4, 5, 6, 7, 8]
    );
    // Nothing else: not the rest of its WQEBB, nor another.
    assert!(mem[..at].iter().chain(&mem[at + 32..]).all(|&b| b == 0xee));
}

/// A 13-byte inline payload: ctrl (DS 3), the inline header
/// `0x80000000 | 13`, the bytes.
#[test]
fn send_inval_inline_by_hand() {
    let mut mem = vec![0u8; 8 * WQEBB];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let bytes: Vec<u8> = (1..=13).collect();
    let mut wqe = send_inv(Payload::Inline(&bytes));
    wqe.flags = CtrlFlags::CQ_UPDATE | CtrlFlags::SOLICITED;
    let w = write_send_wqe(&mut sq, &geo8(), 0x1_0000, &wqe, 8).unwrap();
    assert_eq!((w.ds, w.wqebbs, w.next_pi), (3, 1, 0x1_0001));
    assert_eq!(
        &mem[..16],
        &[0, 0, 0, 0x01, 0, 0x12, 0x34, 3, 0, 0, 0, 0x0a, 0x12, 0x34, 0x56, 0x78],
        "wqe_idx is pi modulo 2^16"
    );
    assert_eq!(&mem[16..20], &[0x80, 0, 0, 13]);
    assert_eq!(&mem[20..33], &bytes[..]);
}

/// A 100-byte inline SEND_INVAL at the ring's last WQEBB: its ctrl and
/// the first 44 payload bytes there, the rest from the ring's start; it
/// decodes back to the same rkey and payload.
#[test]
fn send_inval_wraps_the_ring_and_reads_back() {
    let mut mem = vec![0xeeu8; 8 * WQEBB];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let payload: Vec<u8> = (0u8..100).collect();
    let w = write_send_wqe(&mut sq, &geo8(), 7, &send_inv(Payload::Inline(&payload)), 8).unwrap();
    // ctrl (1) + ceil((4 + 100) / 16) (7): 8 DS, 2 WQEBBs.
    assert_eq!((w.ds, w.wqebbs, w.next_pi), (8, 2, 9));
    assert_eq!(
        &mem[448..464],
        &[0, 0, 7, 0x01, 0, 0x12, 0x34, 8, 0, 0, 0, 0x08, 0x12, 0x34, 0x56, 0x78]
    );
    assert_eq!(&mem[464..468], &[0x80, 0, 0, 100]);
    assert_eq!(&mem[468..512], &payload[..44]);
    assert_eq!(&mem[..56], &payload[44..]);
    assert!(mem[64..448].iter().all(|&b| b == 0xee));
    let sq = RingBuf::from_slice(&mut mem).unwrap();
    let d = decode_send_wqe(&sq, 8, 7).unwrap();
    assert_eq!(
        (d.opcode, d.wqe_idx, d.qpn, d.ds, d.flags, d.imm, d.remote),
        (
            WqeOpcode::SEND_INVAL,
            7,
            0x1234,
            8,
            CtrlFlags::CQ_UPDATE,
            RKEY,
            None
        )
    );
    let mut back = [0u8; 128];
    assert_eq!(d.inline_bytes(&sq, &mut back), 100);
    assert_eq!(&back[..100], &payload[..]);
}

/// SGE lists of 0 to 4 entries (zero-length ones left out), at every
/// producer index of a small ring: each decodes back to its rkey and its
/// non-empty SGEs.
#[test]
fn send_inval_sge_lists_round_trip_at_every_index() {
    let sges: Vec<DataSeg> = (0..4u32)
        .map(|i| DataSeg {
            addr: 0x1000 * (i as u64 + 1),
            len: if i == 1 { 0 } else { 100 + i },
            lkey: 0x300 + i,
        })
        .collect();
    for n in 0..=sges.len() {
        for pi in 0..8u32 {
            let mut mem = vec![0u8; 4 * WQEBB];
            let mut sq = RingBuf::from_slice(&mut mem).unwrap();
            let mut g = geo8();
            g.wqe_cnt = 4;
            let mut wqe = send_inv(Payload::Sges(&sges[..n]));
            wqe.imm = RKEY ^ pi;
            let w = write_send_wqe(&mut sq, &g, pi, &wqe, 4).unwrap();
            let nz: Vec<DataSeg> = sges[..n].iter().copied().filter(|s| s.len != 0).collect();
            assert_eq!(w.ds, 1 + nz.len() as u32, "{n} SGEs at pi {pi}");
            let d = decode_send_wqe(&sq, 4, pi).unwrap();
            assert_eq!((d.opcode, d.imm), (WqeOpcode::SEND_INVAL, RKEY ^ pi));
            for (i, s) in nz.iter().enumerate() {
                assert_eq!(d.sge(&sq, i as u32), Some(*s), "{n} SGEs at pi {pi}");
            }
            assert_eq!(d.sge(&sq, nz.len() as u32), None);
        }
    }
}

/// UD has no SEND_INVAL (`MLX5_SUPPORTED_SEND_OPS_FLAGS_UD`): refused,
/// nothing written. DC has (`..._DCI` = `..._RC`): ctrl, the datagram
/// segment, the data segment, the rkey in the ctrl immediate.
#[test]
fn send_inval_is_refused_on_ud_and_taken_on_dc() {
    let av = [0x11u8; DATAGRAM_SEG];
    let d = [DataSeg {
        addr: 0x1000,
        len: 64,
        lkey: 0x77,
    }];
    let mut mem = vec![0x5au8; 8 * WQEBB];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let ud = SendWqe {
        datagram: Some(Datagram::Ud(&av)),
        ..send_inv(Payload::Sges(&d))
    };
    assert_eq!(
        write_send_wqe(&mut sq, &geo8(), 2, &ud, 8),
        Err(WqeError::UnsupportedOpcode(0x01))
    );
    assert_eq!(
        wqe_size(&geo8(), &ud),
        Err(WqeError::UnsupportedOpcode(0x01))
    );
    assert!(mem.iter().all(|&b| b == 0x5a), "nothing written");

    let seg = dc_datagram_seg(&av, 0x00ab_cdef, 0x0102_0304_0506_0708).unwrap();
    let dc = SendWqe {
        datagram: Some(Datagram::Dc(&seg)),
        ..send_inv(Payload::Sges(&d))
    };
    let mut mem = vec![0u8; 8 * WQEBB];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let w = write_send_wqe(&mut sq, &geo8(), 7, &dc, 8).unwrap();
    assert_eq!((w.ds, w.wqebbs), (5, 2));
    assert_eq!(&mem[448 + 12..448 + 16], &RKEY.to_be_bytes());
    assert_eq!(&mem[448 + 16..512], &seg[..]);
    assert_eq!(&mem[..16], &data_seg(d[0]), "the data segment wrapped");
    let sq = RingBuf::from_slice(&mut mem).unwrap();
    let back = decode_dc_send_wqe(&sq, 8, 7).unwrap();
    assert_eq!((back.opcode, back.imm), (WqeOpcode::SEND_INVAL, RKEY));
    assert_eq!(back.sge(&sq, 0), Some(d[0]));
}

/// The general writer's in-place 1-SGE path (`write_one_sge`) leaves
/// SEND_INVAL to the general one: the same bytes as a SEND of the same
/// SGE but for the opcode and the immediate.
#[test]
fn send_inval_differs_from_a_send_in_opcode_and_immediate_only() {
    let d = [DataSeg {
        addr: 0xdead_beef,
        len: 77,
        lkey: 0x42,
    }];
    let mut a = vec![0u8; 8 * WQEBB];
    let mut b = vec![0u8; 8 * WQEBB];
    let inv = send_inv(Payload::Sges(&d));
    let send = SendWqe {
        opcode: WqeOpcode::SEND,
        ..inv
    };
    write_send_wqe(
        &mut RingBuf::from_slice(&mut a).unwrap(),
        &geo8(),
        5,
        &inv,
        8,
    )
    .unwrap();
    write_send_wqe(
        &mut RingBuf::from_slice(&mut b).unwrap(),
        &geo8(),
        5,
        &send,
        8,
    )
    .unwrap();
    let at = 5 * WQEBB;
    assert_eq!((a[at + 3], b[at + 3]), (0x01, 0x0a));
    assert_eq!(&a[at + 12..at + 16], &RKEY.to_be_bytes());
    assert_eq!(&b[at + 12..at + 16], &[0; 4], "a SEND writes no immediate");
    for k in (0..a.len()).filter(|&k| k != at + 3 && !(at + 12..at + 16).contains(&k)) {
        assert_eq!(a[k], b[k], "byte {k}");
    }
}
