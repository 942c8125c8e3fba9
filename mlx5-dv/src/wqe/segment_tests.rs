//! The segment codec's unit tests: each encoder against hand-worked bytes,
//! the ctrl encoder's two routes against each other, decoders against
//! encoders, and the receive WQE codec (RQ and SRQ) round trip.

use super::segments::{ctrl_stored, qpn_word, CtrlQpn};
use super::*;
use crate::prm::{CtrlFlags, WqeOpcode, INVALID_LKEY};
use crate::ring::RingBuf;
use proptest::prelude::*;

fn stored_bytes(w: [u64; 2]) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&w[0].to_ne_bytes());
    b[8..].copy_from_slice(&w[1].to_ne_bytes());
    b
}

#[test]
fn ctrl_segment_hand_worked() {
    let b = ctrl_seg(
        WqeOpcode::RDMA_WRITE_IMM,
        0xabcd,
        0xff12_3456,
        0x43,
        CtrlFlags::CQ_UPDATE,
        0x0102_0304,
    );
    assert_eq!(
        b,
        [0, 0xab, 0xcd, 0x09, 0x12, 0x34, 0x56, 0x03, 0, 0, 0, 0x08, 1, 2, 3, 4]
    );
}

proptest! {
    // Under Miri a few cases (256 took a minute a test): there the point
    // is that the raw stores stay in bounds, not the fields' coverage.
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 256 }))]

    /// The queue's route (the QP's word kept) and the stand-alone route
    /// give the same 16 bytes, whatever the fields (out-of-range bits dropped).
    #[test]
    fn ctrl_routes_agree(op: u8, idx: u32, qpn: u32, ds: u32, flags: u8, imm: u32) {
        let f = CtrlFlags::from_bits_retain(flags);
        let raw = ctrl_stored(WqeOpcode(op), idx, CtrlQpn::Raw(qpn), ds, f, imm);
        let word = ctrl_stored(WqeOpcode(op), idx, CtrlQpn::Word(qpn_word(qpn)), ds, f, imm);
        prop_assert_eq!(stored_bytes(raw), stored_bytes(word));
        prop_assert_eq!(
            decode_ctrl_seg(&stored_bytes(raw)),
            CtrlFields {
                opcode: WqeOpcode(op),
                opmod: 0,
                wqe_idx: idx as u16,
                qpn: qpn & 0xff_ffff,
                ds: ds & 0x3f,
                flags: f,
                imm,
            }
        );
    }

    /// Each 16-byte segment decodes to what was encoded.
    #[test]
    fn segments_decode_to_what_was_encoded(addr: u64, len in 0u32..1 << 31, key: u32, other: u64) {
        let d = DataSeg { addr, len, lkey: key };
        prop_assert_eq!(decode_data_seg(&data_seg(d)), d);
        let r = RemoteSeg { addr, rkey: key };
        prop_assert_eq!(decode_raddr_seg(&raddr_seg(r)), r);
        let a = AtomicSeg { swap_add: addr, compare: other };
        prop_assert_eq!(decode_atomic_seg(&atomic_seg(a)), a);
        let b = data_seg(d);
        prop_assert_eq!(Seg::from_bytes(&b).to_bytes(), b);
    }
}

#[test]
fn data_raddr_atomic_hand_worked() {
    let d = data_seg(DataSeg {
        addr: 0x0102_0304_0506_0708,
        len: 0x1000,
        lkey: 0xaabb_ccdd,
    });
    assert_eq!(
        d,
        [0, 0, 0x10, 0, 0xaa, 0xbb, 0xcc, 0xdd, 1, 2, 3, 4, 5, 6, 7, 8]
    );
    let r = raddr_seg(RemoteSeg {
        addr: 0x1122_3344_5566_7788,
        rkey: 0x99aa_bbcc,
    });
    assert_eq!(
        r,
        [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0, 0, 0, 0]
    );
    let a = atomic_seg(AtomicSeg {
        swap_add: 1,
        compare: 2,
    });
    assert_eq!(a, [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2]);
}

#[test]
fn inline_header_and_ds() {
    assert_eq!(inline_hdr(100), [0x80, 0, 0, 100]);
    assert_eq!(
        decode_inline_hdr(inline_hdr(0x7fff_ffff)),
        Some(0x7fff_ffff)
    );
    assert_eq!(decode_inline_hdr(0x7fff_ffffu32.to_be_bytes()), None);
    assert_eq!(inline_ds(0), 1);
    assert_eq!(inline_ds(12), 1);
    assert_eq!(inline_ds(13), 2);
    assert_eq!(inline_ds(60), 4);
    assert_eq!(inline_ds(61), 5);
}

/// The AV is copied; qkey (0..4) and `dqp_dct` (8..12) are patched in.
#[test]
fn datagram_segment_patches_qkey_and_remote_qpn() {
    let mut av = [0u8; DATAGRAM_SEG];
    for (i, b) in av.iter_mut().enumerate() {
        *b = i as u8 + 1;
    }
    let s = datagram_seg(&av, 0xff12_3456, 0x1111_2222);
    assert_eq!(s[0..4], [0x11, 0x11, 0x22, 0x22]);
    assert_eq!(s[4..8], av[4..8]);
    assert_eq!(s[AV_DQP_DCT..AV_DQP_DCT + 4], [0x80, 0x12, 0x34, 0x56]);
    assert_eq!(s[12..], av[12..]);
    assert_eq!(
        decode_datagram_seg(&s),
        DatagramDest {
            qkey: 0x1111_2222,
            remote_qpn: 0x12_3456
        }
    );
}

#[test]
fn srq_next_segment() {
    let s = srq_next_seg(0x1234);
    assert_eq!(s[..4], [0, 0, 0x12, 0x34]);
    assert!(s[4..].iter().all(|&b| b == 0));
    assert_eq!(decode_srq_next_seg(&s), 0x1234);
}

fn sges() -> [DataSeg; 3] {
    [
        DataSeg {
            addr: 0x1000,
            len: 10,
            lkey: 7,
        },
        DataSeg {
            addr: 0x2000,
            len: 0,
            lkey: 8,
        },
        DataSeg {
            addr: 0x3000,
            len: 30,
            lkey: 9,
        },
    ]
}

/// An RQ WQE written and read back: the empty SGE left out, the
/// terminator not returned; a full WQE ends at its stride.
#[test]
fn rq_wqe_round_trip() {
    let mut mem = vec![0xeeu8; 4 * 64];
    let mut rq = RingBuf::from_slice(&mut mem).unwrap();
    write_recv_wqe(&mut rq, 4, 64, 1, &sges()).unwrap();
    let read = |o: usize| -> [u8; 16] { mem[64 + o..64 + o + 16].try_into().unwrap() };
    let w = decode_recv_wqe::<4>(RecvLayout::Rq, 64, read);
    assert_eq!((w.next, w.n), (None, 2));
    assert_eq!(w.segs[..2], [sges()[0], sges()[2]]);
    assert_eq!(
        decode_data_seg(&read(32)),
        DataSeg {
            addr: 0,
            len: 0,
            lkey: INVALID_LKEY
        }
    );
    let mut mem = vec![0u8; 2 * 32];
    let mut rq = RingBuf::from_slice(&mut mem).unwrap();
    write_recv_wqe(&mut rq, 2, 32, 0, &sges()).unwrap();
    let w = decode_recv_wqe::<4>(RecvLayout::Rq, 32, |o| mem[o..o + 16].try_into().unwrap());
    assert_eq!(w.n, 2, "two segments fill the stride: no terminator");
}

/// An SRQ WQE: the next segment, then the data segments as an RQ's; at
/// most `N` are read.
#[test]
fn srq_wqe_round_trip() {
    let mut mem = vec![0xeeu8; 2 * 64];
    let mut buf = RingBuf::from_slice(&mut mem).unwrap();
    buf.write_seg(64, &srq_next_seg(5));
    write_recv_segs(&mut buf, 64 + SRQ_NEXT_SEG, &sges(), 3);
    let read = |o: usize| -> [u8; 16] { mem[64 + o..64 + o + 16].try_into().unwrap() };
    let w = decode_recv_wqe::<4>(RecvLayout::Srq, 64, read);
    assert_eq!((w.next, w.n), (Some(5), 2));
    assert_eq!(w.segs[..2], [sges()[0], sges()[2]]);
    let w = decode_recv_wqe::<1>(RecvLayout::Srq, 64, read);
    assert_eq!((w.n, w.segs[0]), (1, sges()[0]));
}
