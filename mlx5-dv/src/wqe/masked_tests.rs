//! Masked (extended) atomic WQEs: every opcode and size by hand (the
//! bytes written out from the layout in the module's table), refusals
//! that write nothing, the 2-WQEBB 8-byte compare-and-swap wrapping the
//! ring, and decode round trips.

use super::*;
use crate::prm::WQEBB;
use crate::ring::RingBuf;

fn geo8() -> SqGeometry {
    SqGeometry {
        wqe_cnt: 8,
        qpn: 0x1234,
        max_inline: 64,
        max_wqebbs: 16,
    }
}

const OLD4: [DataSeg; 1] = [DataSeg {
    addr: 0x5000,
    len: 4,
    lkey: 9,
}];
const OLD8: [DataSeg; 1] = [DataSeg {
    addr: 0x5000,
    len: 8,
    lkey: 9,
}];

fn masked<'a>(op: WqeOpcode, m: &'a MaskedAtomic, old: &'a [DataSeg]) -> SendWqe<'a> {
    SendWqe {
        datagram: None,
        masked: Some(m),
        atomic: None,
        opcode: op,
        flags: CtrlFlags::CQ_UPDATE,
        imm: 0,
        remote: Some(RemoteSeg {
            addr: 0x7000_0008,
            rkey: 0xabc,
        }),
        payload: Payload::Sges(old),
    }
}

const M: MaskedAtomic = MaskedAtomic {
    size: AtomicSize::B4,
    swap_add: 0x1122_3344,
    compare: 0x5566_7788,
    swap_mask: 0x99aa_bbcc,
    compare_mask: 0xddee_ff00,
};

/// The ctrl and raddr segments of WQE index `idx` with `ds` DS, opcode
/// `op` and opmod `opmod`, by hand.
fn head(opmod: u8, idx: u8, op: u8, ds: u8) -> Vec<u8> {
    let mut v = vec![opmod, 0, idx, op, 0, 0x12, 0x34, ds, 0, 0, 0, 8, 0, 0, 0, 0];
    v.extend_from_slice(&[0, 0, 0, 0, 0x70, 0, 0, 0x08, 0, 0, 0x0a, 0xbc, 0, 0, 0, 0]);
    v
}

/// The data segment of `n` bytes at 0x5000, lkey 9.
fn data(n: u8) -> [u8; 16] {
    [0, 0, 0, n, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0x50, 0]
}

/// Writes `w` at `pi` of a fresh 8-WQEBB ring; returns what it wrote and the ring.
fn write(w: &SendWqe<'_>, pi: u32) -> (Written, Vec<u8>) {
    let mut mem = vec![0u8; 8 * WQEBB];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let r = write_send_wqe(&mut sq, &geo8(), pi, w, 8).unwrap();
    (r, mem)
}

#[test]
fn masked_cs_4_by_hand() {
    let (w, mem) = write(&masked(WqeOpcode::ATOMIC_MASKED_CS, &M, &OLD4), 0);
    assert_eq!((w.ds, w.wqebbs), (4, 1));
    let mut want = head(0x08, 0, 0x14, 4);
    want.extend_from_slice(&[
        0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, // swap, compare
        0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x00, // swap_mask, compare_mask
    ]);
    want.extend_from_slice(&data(4));
    assert_eq!(&mem[..64], &want[..]);
}

#[test]
fn masked_fa_4_by_hand() {
    let (w, mem) = write(&masked(WqeOpcode::ATOMIC_MASKED_FA, &M, &OLD4), 1);
    assert_eq!((w.ds, w.wqebbs), (4, 1));
    let mut want = head(0x08, 1, 0x15, 4);
    want.extend_from_slice(&[
        0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, // add, field_boundary
        0, 0, 0, 0, 0, 0, 0, 0, // reserved: the masks are not written
    ]);
    want.extend_from_slice(&data(4));
    assert_eq!(&mem[64..128], &want[..]);
}

#[test]
fn masked_cs_8_by_hand() {
    let m = MaskedAtomic {
        size: AtomicSize::B8,
        swap_add: 0x0102_0304_0506_0708,
        compare: 0x1112_1314_1516_1718,
        swap_mask: 0x2122_2324_2526_2728,
        compare_mask: 0x3132_3334_3536_3738,
    };
    let (w, mem) = write(&masked(WqeOpcode::ATOMIC_MASKED_CS, &m, &OLD8), 2);
    assert_eq!((w.ds, w.wqebbs, w.next_pi), (5, 2, 4));
    let mut want = head(0x09, 2, 0x14, 5);
    for v in [m.swap_add, m.compare, m.swap_mask, m.compare_mask] {
        want.extend_from_slice(&v.to_be_bytes());
    }
    want.extend_from_slice(&data(8));
    assert_eq!(&mem[128..208], &want[..]);
    assert!(mem[208..].iter().all(|&b| b == 0), "nothing past its 5 DS");
}

#[test]
fn masked_fa_8_by_hand() {
    let m = MaskedAtomic {
        size: AtomicSize::B8,
        swap_add: 0x0102_0304_0506_0708,
        compare: 0x8000_0000_8000_0000,
        swap_mask: 7,
        compare_mask: 7,
    };
    let (w, mem) = write(&masked(WqeOpcode::ATOMIC_MASKED_FA, &m, &OLD8), 3);
    assert_eq!((w.ds, w.wqebbs), (4, 1));
    let mut want = head(0x09, 3, 0x15, 4);
    want.extend_from_slice(&m.swap_add.to_be_bytes());
    want.extend_from_slice(&m.compare.to_be_bytes());
    want.extend_from_slice(&data(8));
    assert_eq!(&mem[192..256], &want[..]);
}

/// The 8-byte masked CS at the ring's last WQEBB: its fifth DS (the data
/// segment) continues at the ring's start; decoding reads it back.
#[test]
fn masked_cs_8_wraps_and_decodes() {
    let m = MaskedAtomic {
        size: AtomicSize::B8,
        swap_add: 1,
        compare: 2,
        swap_mask: 3,
        compare_mask: 4,
    };
    let w = masked(WqeOpcode::ATOMIC_MASKED_CS, &m, &OLD8);
    let mut mem = vec![0u8; 8 * WQEBB];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let r = write_send_wqe(&mut sq, &geo8(), 7, &w, 8).unwrap();
    assert_eq!((r.ds, r.wqebbs, r.next_pi), (5, 2, 9));
    let d = decode_send_wqe(&sq, 8, 7).unwrap();
    assert_eq!(
        (d.opcode, d.opmod, d.ds),
        (WqeOpcode::ATOMIC_MASKED_CS, 0x09, 5)
    );
    assert_eq!(d.masked, Some(m));
    assert_eq!(d.atomic, None);
    assert_eq!(d.sge(&sq, 0), Some(OLD8[0]));
    assert_eq!(d.sge(&sq, 1), None);
    assert_eq!(&mem[0..16], &data(8));
}

/// Encode, decode, the same operands: every opcode and size, the FA's
/// masks read back as 0 (not written).
#[test]
fn masked_round_trips() {
    for (size, old) in [(AtomicSize::B4, &OLD4), (AtomicSize::B8, &OLD8)] {
        for op in [WqeOpcode::ATOMIC_MASKED_CS, WqeOpcode::ATOMIC_MASKED_FA] {
            let m = MaskedAtomic { size, ..M };
            for pi in [0, 6, 7] {
                let mut mem = vec![0u8; 8 * WQEBB];
                let mut sq = RingBuf::from_slice(&mut mem).unwrap();
                write_send_wqe(&mut sq, &geo8(), pi, &masked(op, &m, old), 8).unwrap();
                let d = decode_send_wqe(&sq, 8, pi).unwrap();
                let want = if op == WqeOpcode::ATOMIC_MASKED_FA {
                    MaskedAtomic {
                        swap_mask: 0,
                        compare_mask: 0,
                        ..m
                    }
                } else {
                    m
                };
                assert_eq!(d.masked, Some(want), "{op:?} {size:?} at {pi}");
                assert_eq!(d.opmod, size.opmod());
                assert_eq!(d.remote.unwrap().addr, 0x7000_0008);
                assert_eq!(d.sge(&sq, 0), Some(old[0]));
            }
        }
    }
}

/// Misaligned, too wide, without operands, of the wrong SGE, and too big
/// for the QP's largest WQE: refused, nothing written.
#[test]
fn masked_refusals_write_nothing() {
    let mut mem = vec![0xeeu8; 8 * WQEBB];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let ok = masked(WqeOpcode::ATOMIC_MASKED_CS, &M, &OLD4);
    let mut bad = ok;
    bad.remote = Some(RemoteSeg {
        addr: 0x1002,
        rkey: 1,
    });
    assert_eq!(
        write_send_wqe(&mut sq, &geo8(), 0, &bad, 8),
        Err(WqeError::MaskedAtomicUnaligned {
            addr: 0x1002,
            size: 4
        })
    );
    bad = ok;
    let m8 = MaskedAtomic {
        size: AtomicSize::B8,
        ..M
    };
    bad.masked = Some(&m8);
    bad.remote = Some(RemoteSeg {
        addr: 0x1004,
        rkey: 1,
    });
    assert_eq!(
        write_send_wqe(&mut sq, &geo8(), 0, &bad, 8),
        Err(WqeError::MaskedAtomicUnaligned {
            addr: 0x1004,
            size: 8
        })
    );
    bad = ok;
    let wide = MaskedAtomic {
        compare_mask: 1 << 32,
        ..M
    };
    bad.masked = Some(&wide);
    assert_eq!(
        write_send_wqe(&mut sq, &geo8(), 0, &bad, 8),
        Err(WqeError::MaskedOperandTooWide { size: 4 })
    );
    // A FETCH_ADD's masks are not written: not looked at.
    bad.opcode = WqeOpcode::ATOMIC_MASKED_FA;
    assert!(wqe_size(&geo8(), &bad).is_ok());
    bad = ok;
    bad.masked = None;
    assert_eq!(
        write_send_wqe(&mut sq, &geo8(), 0, &bad, 8),
        Err(WqeError::MissingAtomic(0x14))
    );
    bad = ok;
    bad.payload = Payload::Sges(&OLD4[..0]);
    assert_eq!(
        write_send_wqe(&mut sq, &geo8(), 0, &bad, 8),
        Err(WqeError::MaskedAtomicSge { size: 4 })
    );
    bad.masked = Some(&m8);
    bad.payload = Payload::Sges(&OLD4);
    assert_eq!(
        write_send_wqe(&mut sq, &geo8(), 0, &bad, 8),
        Err(WqeError::MaskedAtomicSge { size: 8 })
    );
    bad.payload = Payload::Inline(&[0; 8]);
    assert_eq!(
        write_send_wqe(&mut sq, &geo8(), 0, &bad, 8),
        Err(WqeError::MaskedAtomicSge { size: 8 })
    );
    // 8-byte CS: 2 WQEBBs, more than a QP of 1-WQEBB WQEs takes.
    let cs8 = masked(WqeOpcode::ATOMIC_MASKED_CS, &m8, &OLD8);
    let small = SqGeometry {
        max_wqebbs: 1,
        ..geo8()
    };
    assert_eq!(
        write_send_wqe(&mut sq, &small, 0, &cs8, 8),
        Err(WqeError::TooBig { wqebbs: 2, max: 1 })
    );
    assert!(mem.iter().all(|&b| b == 0xee));
}

/// A masked opcode whose opmod names no size is not decoded.
#[test]
fn masked_bad_opmod_is_refused() {
    let (_, mut mem) = write(&masked(WqeOpcode::ATOMIC_MASKED_FA, &M, &OLD4), 0);
    mem[0] = 0x0b; // opmod 8 | 3: 32 bytes, not ours
    let sq = RingBuf::from_slice(&mut mem).unwrap();
    assert_eq!(
        decode_send_wqe(&sq, 8, 0),
        Err(DecodeError::BadOpmod {
            opcode: 0x15,
            opmod: 0x0b
        })
    );
}
