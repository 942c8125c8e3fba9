//! DC WQE codec tests: the DC datagram segment against hand-worked bytes
//! (and against UD's, whose `dqp_dct` is overwritten where DC's is OR-ed),
//! a DC WQE of every operation laid out by hand, the WQE that starts in the
//! ring's last WQEBB, refusals that write nothing, and an encode -> decode
//! round trip over random operations, DCT numbers, keys, SGE lists, inline
//! lengths and producer indices.

use super::*;
use crate::prm::{CtrlFlags, WqeOpcode, WQEBB};
use crate::ring::RingBuf;
use proptest::prelude::*;

/// An AV of bytes 1..=48, with `dqp_dct` (bytes 8..12) set to `dqp_dct`.
fn av_with(dqp_dct: u32) -> [u8; DATAGRAM_SEG] {
    let mut av = [0u8; DATAGRAM_SEG];
    for (i, b) in av.iter_mut().enumerate() {
        *b = i as u8 + 1;
    }
    av[AV_DQP_DCT..AV_DQP_DCT + 4].copy_from_slice(&dqp_dct.to_be_bytes());
    av
}

fn geo(wqe_cnt: u32) -> SqGeometry {
    SqGeometry {
        wqe_cnt,
        qpn: 0xab_cdef,
        max_inline: 512,
        max_wqebbs: 16,
    }
}

/// `dc_key` over all 8 key bytes, `dqp_dct` the AV's word OR the DCT
/// number OR bit 31: byte 8's bits the AV set (here 0x5a) stay set. UD's
/// writer on the same AV overwrites the word (byte 8 is 0x80) and keeps
/// bytes 4..8.
#[test]
fn dc_datagram_segment_hand_worked() {
    let av = av_with(0x5a00_0000);
    let s = dc_datagram_seg(&av, 0x12_3456, 0x0102_0304_0506_0708).unwrap();
    assert_eq!(s[0..8], [1, 2, 3, 4, 5, 6, 7, 8], "dc_key, big-endian");
    assert_eq!(
        s[8..12],
        [0xda, 0x12, 0x34, 0x56],
        "0x5a | 0x80, then the DCTN"
    );
    assert_eq!(s[12..], av[12..], "the rest is the AV's");
    assert_eq!(
        decode_dc_datagram_seg(&s),
        DcDest {
            dctn: 0x12_3456,
            dc_key: 0x0102_0304_0506_0708
        }
    );
    let ud = datagram_seg(&av, 0x12_3456, 0x1111_2222);
    assert_eq!(ud[8..12], [0x80, 0x12, 0x34, 0x56], "UD overwrites dqp_dct");
    assert_eq!(ud[4..8], av[4..8], "UD keeps the key union's reserved half");
    assert_eq!(ud[12..], s[12..]);
}

/// The OR, bit by bit: an AV with bit 31 already set gives the same
/// word; an AV with low bits set ORs them into the DCT number (as
/// libmlx5's `|=` does), which the decoder then reports.
#[test]
fn dc_dqp_dct_is_or_ed_into_the_avs_word() {
    let s = dc_datagram_seg(&av_with(EXTENDED_UD_AV), 0x42, 7).unwrap();
    assert_eq!(s[8..12], [0x80, 0, 0, 0x42]);
    let s = dc_datagram_seg(&av_with(0x7f00_0100), 0x01, 7).unwrap();
    assert_eq!(s[8..12], [0xff, 0, 0x01, 0x01]);
    assert_eq!(decode_dc_datagram_seg(&s).dctn, 0x101);
    // DCT number 0 and the widest one are written as given.
    let s = dc_datagram_seg(&av_with(0), 0, 0).unwrap();
    assert_eq!(s[..12], [0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0, 0, 0]);
    let s = dc_datagram_seg(&av_with(0), 0xff_ffff, u64::MAX).unwrap();
    assert_eq!(
        s[..12],
        [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x80, 0xff, 0xff, 0xff]
    );
}

#[test]
fn a_dct_number_over_24_bits_is_refused() {
    for dctn in [0x100_0000, 0x8000_0000, u32::MAX] {
        assert_eq!(
            dc_datagram_seg(&av_with(0), dctn, 1),
            Err(WqeError::DctnTooWide { dctn })
        );
    }
}

/// One DC WQE of each operation, at pi 2 of an 8-WQEBB ring, against the
/// segments laid end to end by hand: ctrl, datagram, raddr, atomic, data.
#[test]
fn a_dc_wqe_of_every_operation_by_hand() {
    let seg = dc_datagram_seg(&av_with(0), 0x77, 0xfeed).unwrap();
    let sges = [
        DataSeg {
            addr: 0x1000,
            len: 100,
            lkey: 5,
        },
        DataSeg {
            addr: 0x2000,
            len: 0,
            lkey: 6,
        },
        DataSeg {
            addr: 0x3000,
            len: 8,
            lkey: 7,
        },
    ];
    let remote = RemoteSeg {
        addr: 0x8000_0008,
        rkey: 0x99,
    };
    let a = AtomicSeg {
        swap_add: 0x1111,
        compare: 0x2222,
    };
    let bytes = [0xc3u8; 20];
    let cases: [(WqeOpcode, bool, bool, Payload<'_>); 8] = [
        (WqeOpcode::SEND, false, false, Payload::Sges(&sges)),
        (WqeOpcode::SEND_IMM, false, false, Payload::Inline(&bytes)),
        (WqeOpcode::RDMA_WRITE, true, false, Payload::Sges(&sges)),
        (
            WqeOpcode::RDMA_WRITE_IMM,
            true,
            false,
            Payload::Inline(&bytes),
        ),
        (WqeOpcode::RDMA_WRITE, true, false, Payload::Inline(&[])),
        (WqeOpcode::RDMA_READ, true, false, Payload::Sges(&sges[..1])),
        (WqeOpcode::ATOMIC_CS, true, true, Payload::Sges(&sges[2..])),
        (WqeOpcode::ATOMIC_FA, true, true, Payload::Sges(&sges[2..])),
    ];
    for (op, has_remote, has_atomic, payload) in cases {
        let w = SendWqe {
            opcode: op,
            flags: CtrlFlags::CQ_UPDATE,
            imm: 0xa1b2_c3d4,
            remote: has_remote.then_some(remote),
            masked: None,
            atomic: has_atomic.then_some(a),
            payload,
            datagram: Some(Datagram::Dc(&seg)),
        };
        let mut want: Vec<u8> = Vec::new();
        want.extend_from_slice(&seg);
        if has_remote {
            want.extend_from_slice(&raddr_seg(remote));
        }
        if has_atomic {
            let compare = if op == WqeOpcode::ATOMIC_CS {
                0x2222
            } else {
                0
            };
            want.extend_from_slice(&atomic_seg(AtomicSeg { compare, ..a }));
            want.extend_from_slice(&data_seg(sges[2]));
        } else {
            match payload {
                Payload::Inline([]) => {}
                Payload::Inline(b) => {
                    want.extend_from_slice(&inline_hdr(b.len() as u32));
                    want.extend_from_slice(b);
                }
                Payload::Sges(s) => {
                    for d in s.iter().filter(|d| d.len != 0) {
                        want.extend_from_slice(&data_seg(*d));
                    }
                }
            }
        }
        let ds = 1 + want.len().div_ceil(16) as u32;
        let imm = if op.has_imm() { 0xa1b2_c3d4 } else { 0 };
        let mut full = ctrl_seg(op, 2, 0xab_cdef, ds, CtrlFlags::CQ_UPDATE, imm).to_vec();
        full.extend_from_slice(&want);
        let mut mem = vec![0u8; 8 * WQEBB];
        let mut sq = RingBuf::from_slice(&mut mem).unwrap();
        let got = write_send_wqe(&mut sq, &geo(8), 2, &w, 8).unwrap();
        assert_eq!(got.ds, ds, "{op:?}");
        assert_eq!(got.wqebbs, ds.div_ceil(4), "{op:?}");
        assert_eq!(&mem[2 * WQEBB..2 * WQEBB + full.len()], &full[..], "{op:?}");
        assert!(mem[2 * WQEBB + full.len()..].iter().all(|&b| b == 0));
    }
}

/// A DC WRITE whose ctrl segment is in the ring's last WQEBB: ctrl and
/// the datagram segment fill that WQEBB (the datagram segment never
/// crosses the end), the raddr and data segments continue at the ring's
/// start; it decodes back.
#[test]
fn a_dc_wqe_in_the_last_wqebb_keeps_its_datagram_whole() {
    let seg = dc_datagram_seg(&av_with(0), 0xabc, 0x5555).unwrap();
    let d = [DataSeg {
        addr: 0x4000,
        len: 64,
        lkey: 3,
    }];
    let remote = RemoteSeg {
        addr: 0x9000,
        rkey: 0x44,
    };
    let w = SendWqe {
        opcode: WqeOpcode::RDMA_WRITE,
        flags: CtrlFlags::empty(),
        imm: 0,
        remote: Some(remote),
        masked: None,
        atomic: None,
        payload: Payload::Sges(&d),
        datagram: Some(Datagram::Dc(&seg)),
    };
    let mut mem = vec![0u8; 4 * WQEBB];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let got = write_send_wqe(&mut sq, &geo(4), 7, &w, 4).unwrap();
    assert_eq!((got.ds, got.wqebbs, got.next_pi), (6, 2, 9));
    assert_eq!(&mem[3 * WQEBB + 16..4 * WQEBB], &seg[..]);
    assert_eq!(&mem[0..16], &raddr_seg(remote));
    assert_eq!(&mem[16..32], &data_seg(d[0]));
    let sq = RingBuf::from_slice(&mut mem).unwrap();
    let back = decode_dc_send_wqe(&sq, 4, 7).unwrap();
    assert_eq!(back.datagram, Some(3 * WQEBB + 16));
    assert_eq!(
        back.dc_dest(&sq),
        Some(DcDest {
            dctn: 0xabc,
            dc_key: 0x5555
        })
    );
    assert_eq!((back.remote, back.sge(&sq, 0)), (Some(remote), Some(d[0])));
}

/// Refusals write nothing: NOP with a DC datagram, UD with a WRITE, too
/// long an inline payload or too many SGEs once the datagram's 3 DS are
/// counted, an unaligned or operand-less atomic, no room.
#[test]
fn bad_dc_wqes_write_nothing() {
    let seg = dc_datagram_seg(&av_with(0), 1, 2).unwrap();
    let one = [DataSeg {
        addr: 0,
        len: 8,
        lkey: 1,
    }];
    let many = [DataSeg {
        addr: 0,
        len: 1,
        lkey: 1,
    }; 60];
    let inline = [0u8; 900];
    let base = SendWqe {
        opcode: WqeOpcode::RDMA_WRITE,
        flags: CtrlFlags::empty(),
        imm: 0,
        remote: Some(RemoteSeg { addr: 8, rkey: 1 }),
        masked: None,
        atomic: None,
        payload: Payload::Sges(&one),
        datagram: Some(Datagram::Dc(&seg)),
    };
    let mut g = geo(16);
    g.max_inline = 1000;
    let cases: [(SendWqe<'_>, u32, WqeError); 7] = [
        (
            SendWqe {
                opcode: WqeOpcode::NOP,
                remote: None,
                payload: Payload::Inline(&[]),
                ..base
            },
            16,
            WqeError::UnsupportedOpcode(WqeOpcode::NOP.0),
        ),
        (
            SendWqe {
                datagram: Some(Datagram::Ud(&seg)),
                ..base
            },
            16,
            WqeError::UnsupportedOpcode(WqeOpcode::RDMA_WRITE.0),
        ),
        (
            SendWqe {
                payload: Payload::Inline(&inline),
                ..base
            },
            16,
            // As RC, 1 + 1 + ceil(904 / 16) = 59 DS, 15 WQEBBs, would fit
            // a QP of 15-WQEBB WQEs; the datagram's 3 DS make 62, 16 WQEBBs.
            WqeError::TooBig {
                wqebbs: 16,
                max: 15,
            },
        ),
        (
            SendWqe {
                payload: Payload::Sges(&many),
                ..base
            },
            16,
            // 1 + 3 + 1 + 60: as RC (62 DS) it would fit.
            WqeError::TooManyDs { ds: 65 },
        ),
        (
            SendWqe {
                opcode: WqeOpcode::ATOMIC_FA,
                remote: Some(RemoteSeg { addr: 4, rkey: 1 }),
                atomic: Some(AtomicSeg {
                    swap_add: 1,
                    compare: 0,
                }),
                ..base
            },
            16,
            WqeError::UnalignedAtomic(4),
        ),
        (
            SendWqe {
                opcode: WqeOpcode::ATOMIC_CS,
                ..base
            },
            16,
            WqeError::MissingAtomic(WqeOpcode::ATOMIC_CS.0),
        ),
        (base, 0, WqeError::QueueFull { need: 2, free: 0 }),
    ];
    for (i, (w, free, want)) in cases.into_iter().enumerate() {
        let mut mem = vec![0u8; 16 * WQEBB];
        let mut sq = RingBuf::from_slice(&mut mem).unwrap();
        let mut gi = g;
        if i == 2 {
            gi.max_wqebbs = 15;
        }
        assert_eq!(write_send_wqe(&mut sq, &gi, 15, &w, free), Err(want));
        assert!(mem.iter().all(|&b| b == 0), "case {i} wrote");
    }
}

/// A random DC operation with its operands.
#[derive(Clone, Debug)]
struct Case {
    op: WqeOpcode,
    imm: u32,
    remote: RemoteSeg,
    atomic: AtomicSeg,
    sges: Vec<DataSeg>,
    inline: Option<Vec<u8>>,
}

fn sge() -> impl Strategy<Value = DataSeg> {
    (
        any::<u64>(),
        prop_oneof![Just(0u32), 1u32..1 << 20],
        any::<u32>(),
    )
        .prop_map(|(addr, len, lkey)| DataSeg { addr, len, lkey })
}

fn case() -> impl Strategy<Value = Case> {
    let ops = prop_oneof![
        Just(WqeOpcode::SEND),
        Just(WqeOpcode::SEND_IMM),
        Just(WqeOpcode::SEND_INVAL),
        Just(WqeOpcode::RDMA_WRITE),
        Just(WqeOpcode::RDMA_WRITE_IMM),
        Just(WqeOpcode::RDMA_READ),
        Just(WqeOpcode::ATOMIC_CS),
        Just(WqeOpcode::ATOMIC_FA),
    ];
    (
        ops,
        any::<u32>(),
        (any::<u64>(), any::<u32>()),
        (any::<u64>(), any::<u64>()),
        prop::collection::vec(sge(), 0..6),
        prop::option::of(prop::collection::vec(any::<u8>(), 0..400)),
        (any::<u64>(), 8u32..64, any::<u32>()),
    )
        .prop_map(|(op, imm, (ra, rkey), (sa, cmp), sges, inline, old)| {
            let atomic = matches!(op, WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA);
            let (addr, sges, inline) = if atomic {
                let (addr, len, lkey) = old;
                (ra & !7, vec![DataSeg { addr, len, lkey }], None)
            } else if op == WqeOpcode::RDMA_READ {
                (ra, sges, None)
            } else {
                (ra, sges, inline)
            };
            Case {
                op,
                imm,
                remote: RemoteSeg { addr, rkey },
                atomic: AtomicSeg {
                    swap_add: sa,
                    compare: cmp,
                },
                sges,
                inline,
            }
        })
}

/// The WQE's bytes after ctrl, laid end to end from the segment encoders.
fn reference(c: &Case, seg: &[u8; DATAGRAM_SEG]) -> Vec<u8> {
    let mut v = seg.to_vec();
    if c.op.has_raddr() {
        v.extend_from_slice(&raddr_seg(c.remote));
    }
    if matches!(c.op, WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA) {
        let compare = if c.op == WqeOpcode::ATOMIC_CS {
            c.atomic.compare
        } else {
            0
        };
        v.extend_from_slice(&atomic_seg(AtomicSeg {
            compare,
            ..c.atomic
        }));
        v.extend_from_slice(&data_seg(DataSeg {
            len: ATOMIC_SIZE,
            ..c.sges[0]
        }));
        return v;
    }
    match &c.inline {
        Some(b) if !b.is_empty() => {
            v.extend_from_slice(&inline_hdr(b.len() as u32));
            v.extend_from_slice(b);
        }
        Some(_) => {}
        None => {
            for d in c.sges.iter().filter(|d| d.len != 0) {
                v.extend_from_slice(&data_seg(*d));
            }
        }
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 256 }))]

    /// Encode, then decode: the ring holds ctrl and the reference bytes
    /// from the WQE's WQEBB on (wrapping at the ring's end, the datagram
    /// segment whole in the first WQEBB), nothing else changes, and the
    /// decoder returns the operation's fields, the DCT number and the key.
    #[test]
    fn dc_wqes_round_trip(
        c in case(),
        dctn in 0u32..1 << 24,
        dc_key: u64,
        high in 0u8..0x80,
        pi in prop_oneof![0u32..16, u32::MAX - 16..=u32::MAX, any::<u32>()],
        signaled: bool,
    ) {
        let mut av = av_with(0);
        av[AV_DQP_DCT] = high;
        let seg = dc_datagram_seg(&av, dctn, dc_key).unwrap();
        let payload = match &c.inline {
            Some(b) => Payload::Inline(b),
            None => Payload::Sges(&c.sges),
        };
        let flags = if signaled { CtrlFlags::CQ_UPDATE } else { CtrlFlags::empty() };
        let w = SendWqe {
            opcode: c.op,
            flags,
            imm: c.imm,
            remote: c.op.has_raddr().then_some(c.remote),
            masked: None,
            atomic: matches!(c.op, WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA)
                .then_some(c.atomic),
            payload,
            datagram: Some(Datagram::Dc(&seg)),
        };
        let want = reference(&c, &seg);
        let ds = 1 + want.len().div_ceil(16) as u32;
        let mut mem = vec![0xeeu8; 16 * WQEBB];
        let mut sq = RingBuf::from_slice(&mut mem).unwrap();
        let got = write_send_wqe(&mut sq, &geo(16), pi, &w, 16).unwrap();
        prop_assert_eq!((got.ds, got.wqebbs), (ds, ds.div_ceil(4)));
        prop_assert_eq!(got.next_pi, pi.wrapping_add(got.wqebbs));
        let imm = if c.op.has_imm() { c.imm } else { 0 };
        let mut full = ctrl_seg(c.op, pi as u16, 0xab_cdef, ds, flags, imm).to_vec();
        full.extend_from_slice(&want);
        let base = (pi % 16) as usize * WQEBB;
        prop_assert_eq!(&mem[base + 16..base + WQEBB], &seg[..], "the datagram, whole");
        for k in 0..mem.len() {
            let at = (base + k) % mem.len();
            let expect = full.get(k).copied().unwrap_or(0xee);
            prop_assert_eq!(mem[at], expect, "byte {} of the WQE", k);
        }
        let sq = RingBuf::from_slice(&mut mem).unwrap();
        let d = decode_dc_send_wqe(&sq, 16, pi).unwrap();
        prop_assert_eq!((d.opcode, d.wqe_idx, d.qpn, d.ds, d.flags, d.imm),
            (c.op, pi as u16, 0xab_cdef, ds, flags, imm));
        prop_assert_eq!(d.dc_dest(&sq), Some(DcDest { dctn, dc_key }));
        prop_assert_eq!(d.av(&sq).unwrap()[AV_DQP_DCT], high | 0x80);
        prop_assert_eq!(d.remote, c.op.has_raddr().then_some(c.remote));
        match (c.op, &c.inline) {
            (WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA, _) => {
                let compare = if c.op == WqeOpcode::ATOMIC_CS { c.atomic.compare } else { 0 };
                prop_assert_eq!(d.atomic, Some(AtomicSeg { compare, ..c.atomic }));
                prop_assert_eq!(d.sge(&sq, 0), Some(DataSeg { len: ATOMIC_SIZE, ..c.sges[0] }));
                prop_assert_eq!(d.sge(&sq, 1), None);
            }
            (_, Some(b)) => {
                let mut back = vec![0u8; b.len()];
                prop_assert_eq!(d.inline_bytes(&sq, &mut back), b.len());
                prop_assert_eq!(&back, b);
            }
            (_, None) => {
                let nz: Vec<DataSeg> = c.sges.iter().copied().filter(|s| s.len != 0).collect();
                for (i, s) in nz.iter().enumerate() {
                    prop_assert_eq!(d.sge(&sq, i as u32), Some(*s));
                }
                prop_assert_eq!(d.sge(&sq, nz.len() as u32), None);
            }
        }
    }
}
