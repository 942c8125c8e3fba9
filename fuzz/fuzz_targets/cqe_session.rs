//! Compressed CQE sessions (basic layout, `mlx5_dv::mini_cqe`):
//! - any ring bytes and any title index: `expand_session` never panics,
//!   writes nothing when it refuses, and otherwise writes only the session's
//!   slots `t..t+N` (wrapping), inside the ring;
//! - a well-formed session as the encoder (`write_session`, the sim's model)
//!   writes it expands to exactly the full CQEs it was made from, each with
//!   the owner bit of its slot's lap.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mlx5_dv::cqe::owner_bit;
use mlx5_dv::mini_cqe::{expand_session, write_session, MiniCqe};

#[derive(Arbitrary, Debug)]
struct Input {
    log_cnt: u8,
    title: u32,
    /// Ring bytes, repeated to fill the ring.
    fill: Vec<u8>,
    /// A well-formed session: its count, first CQE and minis.
    n: u16,
    at: u32,
    responder: Option<u8>,
    first: [u8; 64],
    minis: Vec<(u16, u8, u32)>,
    /// A ring of a wrong length.
    short: u8,
}

fuzz_target!(|inp: Input| {
    let cnt = 1u32 << (1 + inp.log_cnt % 9); // 2..=512 slots
    let len = cnt as usize * 64;
    let mut ring: Vec<u8> = if inp.fill.is_empty() {
        vec![0; len]
    } else {
        inp.fill.iter().copied().cycle().take(len).collect()
    };
    // Any bytes, any title index.
    let before = ring.clone();
    match expand_session(&mut ring, cnt, inp.title) {
        Err(_) => assert_eq!(ring, before, "a refusal wrote"),
        Ok(n) => {
            assert!((2..=cnt).contains(&n));
            let t = inp.title % cnt;
            for s in 0..cnt {
                let in_session = (s + cnt - t) % cnt;
                let changed = ring[s as usize * 64..][..64] != before[s as usize * 64..][..64];
                assert!(!changed || in_session < n, "slot {s} outside the session written");
            }
        }
    }
    // A ring that is not cnt * 64 bytes is refused.
    let mut bad = vec![0u8; len.saturating_sub(1 + inp.short as usize)];
    assert!(expand_session(&mut bad, cnt, 0).is_err());

    // A well-formed session round-trips.
    let n = 2 + inp.n as u32 % (cnt - 1).max(1);
    if n > cnt {
        return;
    }
    let t = inp.at;
    let mut first = inp.first;
    first[63] = match inp.responder {
        None => 0x00,
        Some(op) => (1 + op % 4) << 4,
    } | (first[63] & 2)
        | owner_bit(t, cnt);
    let req = inp.responder.is_none();
    let minis: Vec<MiniCqe> = (0..n as usize)
        .map(|k| {
            let (c, op, b) = inp.minis.get(k).copied().unwrap_or((k as u16, 8, k as u32));
            if req {
                MiniCqe::requester(c, op, b)
            } else {
                MiniCqe::responder(0, b)
            }
        })
        .collect();
    let mut ring = before;
    write_session(&mut ring, cnt, t, &first, &minis).expect("a well-formed session");
    assert_eq!(expand_session(&mut ring, cnt, t), Ok(n));
    let counter0 = u16::from_be_bytes([first[60], first[61]]);
    for (k, m) in minis.iter().enumerate() {
        let i = t.wrapping_add(k as u32);
        let mut want = first;
        want[44..48].copy_from_slice(&m.byte_cnt().to_be_bytes());
        let counter = if req {
            want[56] = m.s_wqe_opcode();
            m.wqe_counter()
        } else {
            counter0.wrapping_add(k as u16)
        };
        want[60..62].copy_from_slice(&counter.to_be_bytes());
        want[63] = (first[63] & !1) | owner_bit(i, cnt);
        let s = (i % cnt) as usize * 64;
        assert_eq!(&ring[s..s + 64], &want[..], "completion {k} at index {i}");
    }
});
