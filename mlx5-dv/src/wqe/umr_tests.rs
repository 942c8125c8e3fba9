//! UMR WQE codec tests: a type-2 bind, a type-1 bind, a type-1 zero-length
//! bind and a `LOCAL_INV` against bytes worked by hand from `mlx5dv.h`'s
//! structs and libmlx5 v59's `set_umr_*_seg`; the WQE that wraps at the
//! ring's end; refusals that write nothing; an encode -> decode round trip.

use super::*;
use crate::prm::{CtrlFlags, WQEBB};
use crate::ring::RingBuf;
use proptest::prelude::*;

fn geo(wqe_cnt: u32) -> SqGeometry {
    SqGeometry {
        wqe_cnt,
        qpn: 0xab_cdef,
        max_inline: 512,
        max_wqebbs: 16,
    }
}

fn bind(access: MwAccess) -> UmrBind {
    UmrBind {
        lkey: 0x1122_3344,
        addr: 0x0000_7f00_dead_b000,
        len: 0x1_2345,
        access,
    }
}

const ALL: MwAccess = MwAccess {
    local_write: true,
    remote_read: true,
    remote_write: true,
    remote_atomic: true,
};

/// A type-2 bind: 3 WQEBBs, DS 12; ctrl imm = the current rkey; CHECK_FREE;
/// mask with QPN, LEN, START_ADDR and the four access bits; `qpn_mkey` =
/// new key byte | qpn << 8; the KLM after the mkey context, padded.
#[test]
fn type_2_bind_hand_worked() {
    let w = UmrWqe {
        flags: CtrlFlags::CQ_UPDATE,
        imm_rkey: 0x0000_4201,
        mw_type: MwType::Two,
        new_key: 0x02,
        bind: Some(bind(MwAccess {
            remote_read: true,
            remote_write: true,
            ..MwAccess::default()
        })),
    };
    let mut mem = vec![0xeeu8; 8 * WQEBB];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let wr = write_umr_wqe(&mut sq, &geo(8), 0x0102, &w, 8).unwrap();
    assert_eq!((wr.ds, wr.wqebbs, wr.next_pi), (12, 3, 0x0105));
    let at = 2 * WQEBB; // 0x0102 & 7
    let b = &mem[at..at + 3 * WQEBB];
    // ctrl: opmod 0, index 0x0102, opcode 0x25; qpn, DS 12; fm_ce_se; imm.
    assert_eq!(b[0..4], [0x00, 0x01, 0x02, 0x25]);
    assert_eq!(b[4..8], [0xab, 0xcd, 0xef, 12]);
    assert_eq!(b[8..12], [0, 0, 0, 0x08]);
    assert_eq!(b[12..16], [0x00, 0x00, 0x42, 0x01]);
    // UMR ctrl: flags INLINE | CHECK_FREE | TRNSLATION_OFFSET = 0xb0.
    assert_eq!(b[16..24], [0xb0, 0, 0, 0, 0x00, 0x04, 0, 0]);
    // mkey_mask: FREE (29) | ACCESS 18..21 | QPN (14) | MKEY (13) |
    // START_ADDR (6) | LEN (0) = 0x203c_6041.
    assert_eq!(b[24..32], [0, 0, 0, 0, 0x20, 0x3c, 0x60, 0x41]);
    assert!(b[32..64].iter().all(|&x| x == 0), "UMR ctrl reserved");
    // mkey context.
    let m = &b[64..128];
    assert_eq!(m[0..4], [0x00, 0x00, 0x30, 0x00], "free 0, access RR|RW");
    assert_eq!(m[4..8], [0xab, 0xcd, 0xef, 0x02], "qpn << 8 | new key byte");
    assert!(m[8..16].iter().all(|&x| x == 0));
    assert_eq!(m[16..24], [0, 0, 0x7f, 0, 0xde, 0xad, 0xb0, 0x00]);
    assert_eq!(m[24..32], [0, 0, 0, 0, 0, 0x01, 0x23, 0x45]);
    assert!(m[32..64].iter().all(|&x| x == 0));
    // KLM: byte_count, mkey (the MR's lkey), address; padding.
    let k = &b[128..192];
    assert_eq!(k[0..8], [0, 0x01, 0x23, 0x45, 0x11, 0x22, 0x33, 0x44]);
    assert_eq!(k[8..16], [0, 0, 0x7f, 0, 0xde, 0xad, 0xb0, 0x00]);
    assert!(k[16..64].iter().all(|&x| x == 0));
    // Nothing else touched.
    assert!(mem[..at]
        .iter()
        .chain(&mem[at + 3 * WQEBB..])
        .all(|&x| x == 0xee));
}

/// A type-1 bind: no CHECK_FREE, no QPN in the mask, `qpn_mkey`'s upper
/// 24 bits all ones.
#[test]
fn type_1_bind_hand_worked() {
    let w = UmrWqe {
        flags: CtrlFlags::empty(),
        imm_rkey: 7,
        mw_type: MwType::One,
        new_key: 0xff,
        bind: Some(bind(ALL)),
    };
    let b = umr_wqe_bytes(0x12, 0, &w, 12);
    assert_eq!(b[16], 0x90, "INLINE | TRNSLATION_OFFSET");
    assert_eq!(b[24..32], [0, 0, 0, 0, 0x20, 0x3c, 0x20, 0x41]);
    assert_eq!(b[66], 0x78, "all four access bits");
    assert_eq!(b[68..72], [0xff, 0xff, 0xff, 0xff]);
}

/// Zero-length UMRs: a type-1 unbind (no QPN, no CHECK_QPN) and a
/// `LOCAL_INV` (type 2: CHECK_QPN, QPN in the mask, new key byte 0): 2
/// WQEBBs, DS 8, `free` set, nothing after the mkey context.
#[test]
fn zero_length_umrs_hand_worked() {
    let unbind = UmrWqe {
        flags: CtrlFlags::CQ_UPDATE,
        imm_rkey: 0x100,
        mw_type: MwType::One,
        new_key: 0x01,
        bind: None,
    };
    let inv = UmrWqe::local_inv(0xabc0_0102, CtrlFlags::CQ_UPDATE);
    for (w, flags, mask, key) in [
        (unbind, 0x90, [0x20, 0, 0x20, 0], [0xff, 0xff, 0xff, 0x01]),
        (inv, 0x98, [0x20, 0, 0x60, 0], [0xff, 0xff, 0xff, 0x00]),
    ] {
        let mut mem = vec![0xeeu8; 4 * WQEBB];
        let mut sq = RingBuf::from_slice(&mut mem).unwrap();
        let wr = write_umr_wqe(&mut sq, &geo(4), 1, &w, 4).unwrap();
        assert_eq!((wr.ds, wr.wqebbs), (8, 2));
        let b = &mem[WQEBB..3 * WQEBB];
        assert_eq!(b[7], 8, "DS");
        assert_eq!(b[12..16], w.imm_rkey.to_be_bytes());
        assert_eq!(b[16], flags);
        assert_eq!(b[20..22], [0, 0], "no KLM");
        assert_eq!(b[28..32], mask);
        assert_eq!(b[64], 0x40, "MLX5_WQE_MKEY_CONTEXT_FREE");
        assert_eq!(b[68..72], key);
        assert!(b[72..128].iter().all(|&x| x == 0));
        assert!(mem[3 * WQEBB..].iter().all(|&x| x == 0xee), "a third WQEBB");
    }
}

/// A bind that starts in the ring's last WQEBB: its mkey context and KLM
/// go to WQEBBs 0 and 1, byte for byte what the unwrapped WQE holds.
#[test]
fn bind_wraps_at_the_ring_end() {
    let w = UmrWqe {
        flags: CtrlFlags::CQ_UPDATE,
        imm_rkey: 0x55,
        mw_type: MwType::Two,
        new_key: 0x56,
        bind: Some(bind(ALL)),
    };
    let mut mem = vec![0u8; 4 * WQEBB];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    write_umr_wqe(&mut sq, &geo(4), 7, &w, 4).unwrap();
    let flat = umr_wqe_bytes(geo(4).qpn, 7, &w, 12);
    assert_eq!(mem[3 * WQEBB..], flat[..WQEBB]);
    assert_eq!(mem[..2 * WQEBB], flat[WQEBB..]);
    let sq = RingBuf::from_slice(&mut mem).unwrap();
    let d = decode_umr_wqe(&sq, 4, 7).unwrap();
    assert_eq!(
        (d.wqe, d.ds, d.wqe_idx, d.bound_qpn),
        (w, 12, 7, geo(4).qpn)
    );
}

/// Refusals write nothing: a bind of 0 bytes or over 2^31, no room, a
/// QP whose largest WQE is 2 WQEBBs, a ring of the wrong size.
#[test]
fn refusals_write_nothing() {
    let ok = UmrWqe {
        flags: CtrlFlags::empty(),
        imm_rkey: 1,
        mw_type: MwType::Two,
        new_key: 2,
        bind: Some(bind(ALL)),
    };
    let with_len = |len| UmrWqe {
        bind: Some(UmrBind { len, ..bind(ALL) }),
        ..ok
    };
    let small = SqGeometry {
        max_wqebbs: 2,
        ..geo(8)
    };
    let cases: [(SqGeometry, UmrWqe, u32, WqeError); 4] = [
        (geo(8), with_len(0), 8, WqeError::UmrLength { len: 0 }),
        (
            geo(8),
            with_len(UMR_MAX_LEN + 1),
            8,
            WqeError::UmrLength {
                len: UMR_MAX_LEN + 1,
            },
        ),
        (geo(8), ok, 2, WqeError::QueueFull { need: 3, free: 2 }),
        (small, ok, 8, WqeError::TooBig { wqebbs: 3, max: 2 }),
    ];
    for (g, w, free, err) in cases {
        let mut mem = vec![0xeeu8; 8 * WQEBB];
        let mut sq = RingBuf::from_slice(&mut mem).unwrap();
        assert_eq!(write_umr_wqe(&mut sq, &g, 3, &w, free), Err(err));
        assert!(mem.iter().all(|&x| x == 0xee), "{err:?} wrote");
    }
    // The largest bind is accepted.
    let mut mem = vec![0u8; 8 * WQEBB];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    assert!(write_umr_wqe(&mut sq, &geo(8), 0, &with_len(UMR_MAX_LEN), 8).is_ok());
    let mut mem = vec![0u8; 4 * WQEBB];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    assert!(matches!(
        write_umr_wqe(&mut sq, &geo(8), 0, &ok, 8),
        Err(WqeError::BadGeometry { .. })
    ));
    assert!(mem.iter().all(|&x| x == 0));
}

/// A ring slot that holds another opcode is not a UMR.
#[test]
fn decode_refuses_other_opcodes() {
    let mut mem = vec![0u8; 4 * WQEBB];
    mem[..16].copy_from_slice(&ctrl_seg(
        crate::prm::WqeOpcode::RDMA_WRITE,
        0,
        1,
        12,
        CtrlFlags::empty(),
        0,
    ));
    let sq = RingBuf::from_slice(&mut mem).unwrap();
    assert_eq!(decode_umr_wqe(&sq, 4, 0), None);
}

fn any_umr() -> impl Strategy<Value = UmrWqe> {
    let access = (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
        |(local_write, remote_read, remote_write, remote_atomic)| MwAccess {
            local_write,
            remote_read,
            remote_write,
            remote_atomic,
        },
    );
    let bind = (any::<u32>(), any::<u64>(), 1..=UMR_MAX_LEN, access).prop_map(
        |(lkey, addr, len, access)| UmrBind {
            lkey,
            addr,
            len,
            access,
        },
    );
    (
        any::<u8>(),
        any::<u32>(),
        any::<bool>(),
        any::<u8>(),
        proptest::option::of(bind),
    )
        .prop_map(|(f, imm_rkey, two, new_key, bind)| UmrWqe {
            flags: CtrlFlags::from_bits_truncate(f),
            imm_rkey,
            mw_type: if two { MwType::Two } else { MwType::One },
            new_key,
            bind,
        })
}

proptest! {
    /// Whatever is written reads back the same, at any producer index,
    /// and only the WQE's WQEBBs change.
    #[test]
    fn encode_decode_round_trip(w in any_umr(), pi in any::<u32>(), qpn in 0u32..1 << 24) {
        let g = SqGeometry { qpn, ..geo(8) };
        let mut mem = vec![0xeeu8; 8 * WQEBB];
        let mut sq = RingBuf::from_slice(&mut mem).unwrap();
        let wr = write_umr_wqe(&mut sq, &g, pi, &w, 8).unwrap();
        let d = decode_umr_wqe(&sq, 8, pi).unwrap();
        prop_assert_eq!(d.wqe, w);
        prop_assert_eq!(d.ds, wr.ds);
        prop_assert_eq!(d.qpn, qpn);
        prop_assert_eq!(d.wqe_idx, pi as u16);
        let two_bound = w.mw_type == MwType::Two && w.bind.is_some();
        prop_assert_eq!(d.bound_qpn, if two_bound { qpn } else { 0xff_ffff });
        for k in 0..8u32 {
            let used = (0..wr.wqebbs).any(|j| pi.wrapping_add(j) & 7 == k);
            let slot = &mem[k as usize * WQEBB..][..WQEBB];
            prop_assert_eq!(used, slot.iter().any(|&x| x != 0xee), "WQEBB {}", k);
        }
    }
}
