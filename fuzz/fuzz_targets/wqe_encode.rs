//! Structure-aware fuzzing of the SQ writer: any WQE description, at any
//! producer index, in any ring size. Refused WQEs write nothing; accepted
//! ones write only inside their own WQEBBs and decode back to the request.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mlx5_dv::prm::{CtrlFlags, WqeOpcode, WQEBB};
use mlx5_dv::ring::RingBuf;
use mlx5_dv::wqe::{
    decode_send_wqe, wqe_size, write_send_wqe, AtomicSeg, DataSeg, DecodedPayload, Payload,
    RemoteSeg, SendWqe, SqGeometry,
};

#[derive(Arbitrary, Debug)]
struct Input {
    log_wqe_cnt: u8,
    pi: u32,
    opcode: u8,
    flags: u8,
    imm: u32,
    remote: Option<(u64, u32)>,
    atomic: Option<(u64, u64)>,
    inline: Option<Vec<u8>>,
    sges: Vec<(u64, u32, u32)>,
    free: u32,
    max_inline: u16,
    max_wqebbs: u8,
    qpn: u32,
}

fuzz_target!(|inp: Input| {
    let wqe_cnt = 1u32 << (inp.log_wqe_cnt % 8);
    let geo = SqGeometry {
        wqe_cnt,
        qpn: inp.qpn & 0xff_ffff,
        max_inline: inp.max_inline as u32,
        max_wqebbs: inp.max_wqebbs as u32,
    };
    let sges: Vec<DataSeg> = inp
        .sges
        .iter()
        .map(|&(addr, len, lkey)| DataSeg { addr, len, lkey })
        .collect();
    let payload = match &inp.inline {
        Some(b) => Payload::Inline(b),
        None => Payload::Sges(&sges),
    };
    let wqe = SendWqe {
        datagram: None,
        masked: None,
        atomic: inp
            .atomic
            .map(|(swap_add, compare)| AtomicSeg { swap_add, compare }),
        opcode: WqeOpcode(inp.opcode),
        flags: CtrlFlags::from_bits_retain(inp.flags),
        imm: inp.imm,
        remote: inp.remote.map(|(addr, rkey)| RemoteSeg { addr, rkey }),
        payload,
    };
    let len = wqe_cnt as usize * WQEBB;
    let mut mem = vec![0xa5u8; len];
    let mut ring = RingBuf::from_slice(&mut mem).unwrap();
    let sized = wqe_size(&geo, &wqe);
    match write_send_wqe(&mut ring, &geo, inp.pi, &wqe, inp.free) {
        Err(_) => assert!(
            mem.iter().all(|&b| b == 0xa5),
            "a refused WQE wrote ring bytes"
        ),
        Ok(w) => {
            let (ds, wqebbs) = sized.expect("wqe_size disagrees with the writer");
            assert_eq!((w.ds, w.wqebbs), (ds, wqebbs));
            assert!(wqebbs <= inp.free && wqebbs <= wqe_cnt && ds <= 63);
            assert_eq!(w.next_pi, inp.pi.wrapping_add(wqebbs));
            let start = (inp.pi & (wqe_cnt - 1)) as usize * WQEBB;
            let inside = |off: usize| (off + len - start) % len < wqebbs as usize * WQEBB;
            for (off, &b) in mem.iter().enumerate() {
                if !inside(off) {
                    assert_eq!(b, 0xa5, "byte {off} outside the WQE changed");
                }
            }
            let c = &mem[start..start + 16];
            assert_eq!(c[3], inp.opcode);
            assert_eq!(u16::from_be_bytes([c[1], c[2]]), inp.pi as u16);
            assert_eq!(
                u32::from_be_bytes([c[4], c[5], c[6], c[7]]),
                ((inp.qpn & 0xff_ffff) << 8) | ds
            );
            assert_eq!(c[11], inp.flags);

            // Decodes back to the request.
            let ring = RingBuf::from_slice(&mut mem).unwrap();
            let d = decode_send_wqe(&ring, wqe_cnt, inp.pi).expect("an accepted WQE decodes");
            assert_eq!(
                (d.opcode, d.wqe_idx, d.qpn, d.ds),
                (wqe.opcode, inp.pi as u16, inp.qpn & 0xff_ffff, ds)
            );
            assert_eq!(d.flags.bits(), inp.flags);
            assert_eq!(d.imm, if wqe.opcode.has_imm() { inp.imm } else { 0 });
            if wqe.opcode.has_raddr() {
                assert_eq!(d.remote, wqe.remote);
            }
            match (wqe.opcode, wqe.payload) {
                (WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA, Payload::Sges([s])) => {
                    let a = wqe.atomic.unwrap();
                    let compare = if wqe.opcode == WqeOpcode::ATOMIC_CS {
                        a.compare
                    } else {
                        0
                    };
                    assert_eq!(
                        d.atomic,
                        Some(AtomicSeg {
                            swap_add: a.swap_add,
                            compare
                        })
                    );
                    assert_eq!(d.sge(&ring, 0), Some(DataSeg { len: 8, ..*s }));
                }
                (_, Payload::Inline(b)) if !b.is_empty() => {
                    let mut back = vec![0u8; b.len()];
                    assert_eq!(d.inline_bytes(&ring, &mut back), b.len());
                    assert_eq!(&back, b);
                }
                (_, Payload::Inline(_)) => assert_eq!(d.payload, DecodedPayload::None),
                (_, Payload::Sges(list)) => {
                    let kept: Vec<DataSeg> = list.iter().copied().filter(|s| s.len != 0).collect();
                    let got: Vec<DataSeg> = (0..kept.len() as u32)
                        .map(|i| d.sge(&ring, i).unwrap())
                        .collect();
                    assert_eq!(got, kept);
                    assert!(d.sge(&ring, kept.len() as u32).is_none());
                }
            }
        }
    }
});
