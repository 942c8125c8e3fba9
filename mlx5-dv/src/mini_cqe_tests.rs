//! Unit tests of the basic-layout codec (Miri runs them: plain memory only).

use super::*;
use crate::cqe::{owner_bit, sw_owned, Cqe};
use crate::prm::{Syndrome, WqeOpcode};

/// A fresh ring: every slot INVALID with owner 0, the rest of it junk
/// (so that a field the expansion forgets to write shows).
fn ring(cqe_cnt: u32) -> Vec<u8> {
    let mut r = vec![0xa5u8; cqe_cnt as usize * CQE64];
    for i in 0..cqe_cnt as usize {
        r[i * CQE64 + 63] = 0xf0;
    }
    r
}

fn recv_cqe(counter: u16, byte_cnt: u32) -> Cqe {
    Cqe {
        opcode: CqeOpcode::RESP_SEND_IMM,
        wqe_opcode: WqeOpcode(0),
        qpn: 0x12345,
        wqe_counter: counter,
        byte_cnt,
        imm: 0xdead_beef,
        solicited: false,
        format: 0,
        owner: false,
        syndrome: Syndrome(0),
        vendor_syndrome: 0,
        flags_rqpn: 0x1000_0777,
    }
}

fn send_cqe(counter: u16, op: WqeOpcode, byte_cnt: u32) -> Cqe {
    Cqe {
        opcode: CqeOpcode::REQ,
        wqe_opcode: op,
        imm: 0,
        flags_rqpn: 0,
        qpn: 0x77,
        ..recv_cqe(counter, byte_cnt)
    }
}

/// The full CQE the device would have written for `c` at index `i`, with
/// user index `uidx` in `srqn_uidx`.
fn full(c: &Cqe, i: u32, cqe_cnt: u32) -> [u8; CQE64] {
    let mut b = c.encode(owner_bit(i, cqe_cnt));
    b[32..36].copy_from_slice(&0x42u32.to_be_bytes());
    b
}

/// Writes the session of `cqes` at absolute index `t`, expands it, and
/// checks that slots `t+1..=t+N` then hold exactly the full CQEs (apart
/// from the title's shared bytes), owned at their index.
fn round_trip(cqe_cnt: u32, t: u32, cqes: &[Cqe]) -> Vec<u8> {
    let mut r = ring(cqe_cnt);
    let first = full(&cqes[0], t, cqe_cnt);
    let req = cqes[0].opcode == CqeOpcode::REQ;
    let minis: Vec<MiniCqe> = cqes
        .iter()
        .map(|c| {
            if req {
                MiniCqe::requester(c.wqe_counter, c.wqe_opcode.0, c.byte_cnt)
            } else {
                MiniCqe::responder(0, c.byte_cnt)
            }
        })
        .collect();
    write_session(&mut r, cqe_cnt, t, &first, &minis).unwrap();
    let title_slot = &r[(t & (cqe_cnt - 1)) as usize * CQE64..][..CQE64];
    assert!(is_title(title_slot[63]));
    assert!(sw_owned(title_slot[63], t, cqe_cnt));
    let n = expand_session(&mut r, cqe_cnt, t).unwrap();
    assert_eq!(n, cqes.len() as u32);
    for (k, c) in cqes.iter().enumerate() {
        let i = t.wrapping_add(k as u32);
        let o = (i & (cqe_cnt - 1)) as usize * CQE64;
        let slot: [u8; CQE64] = r[o..o + CQE64].try_into().unwrap();
        assert!(
            sw_owned(slot[63], i, cqe_cnt),
            "completion {k} owned at {i}"
        );
        assert_eq!(slot, full(c, i, cqe_cnt), "completion {k} at index {i}");
    }
    r
}

#[test]
fn mini_layouts_are_big_endian_at_their_offsets() {
    let m = MiniCqe::requester(0x0102, 0x08, 0x0a0b_0c0d);
    assert_eq!(m.0, [1, 2, 8, 0, 0x0a, 0x0b, 0x0c, 0x0d]);
    assert_eq!(
        (m.wqe_counter(), m.s_wqe_opcode(), m.byte_cnt()),
        (0x0102, 8, 0x0a0b_0c0d)
    );
    let m = MiniCqe::responder(0x1122_3344, 64);
    assert_eq!(m.0, [0x11, 0x22, 0x33, 0x44, 0, 0, 0, 64]);
    assert_eq!((m.rx_hash(), m.byte_cnt()), (0x1122_3344, 64));
}

#[test]
fn arrays_sit_after_the_title_then_every_eight_slots() {
    assert_eq!([0, 1, 2, 3].map(array_offset), [1, 8, 16, 24]);
    assert_eq!([2, 8, 9, 16, 17].map(arrays), [1, 1, 2, 2, 3]);
    assert_eq!(session_slots(7), 7);
    assert!(is_title(0x2c) && is_title(0x0d) && !is_title(0x28) && !is_title(0x24));
}

#[test]
fn receive_sessions_of_2_7_8_9_17_expand_to_consecutive_counters() {
    for n in [2u16, 7, 8, 9, 17] {
        let cqes: Vec<Cqe> = (0..n).map(|k| recv_cqe(500 + k, 10 + k as u32)).collect();
        round_trip(64, 3, &cqes);
    }
}

#[test]
fn requester_sessions_take_counter_and_opcode_from_each_mini() {
    for n in [2u16, 7, 8, 9, 17] {
        let cqes: Vec<Cqe> = (0..n)
            .map(|k| {
                let op = if k % 2 == 0 {
                    WqeOpcode::RDMA_WRITE
                } else {
                    WqeOpcode::SEND
                };
                // Counters that are not consecutive: a requester's come from the minis.
                send_cqe(0xfff0u16.wrapping_add(3 * k), op, 4096 * k as u32)
            })
            .collect();
        round_trip(32, 10, &cqes);
    }
}

#[test]
fn a_session_wrapping_the_ring_end_takes_the_next_laps_owner_bit() {
    // 16 slots; title at absolute 29 (slot 13, lap 1): completions at
    // 29..31 (lap 1) and 32.. (slots 0.., lap 2).
    let cqes: Vec<Cqe> = (0..9)
        .map(|k| recv_cqe((u16::MAX - 2).wrapping_add(k), k as u32))
        .collect();
    let r = round_trip(16, 29, &cqes);
    assert_eq!(
        r[13 * CQE64 + 63] & 1,
        1,
        "the title's slot, completion 0, keeps lap 1's bit"
    );
    assert_eq!(
        r[2 * CQE64 + 63] & 1,
        0,
        "slot 2 (index 34) holds lap 2's bit"
    );
    // The counters wrap at 16 bits: completion 8 at index 37 (slot 5).
    assert_eq!(
        Cqe::decode(r[5 * CQE64..6 * CQE64].try_into().unwrap()).wqe_counter,
        5
    );
}

#[test]
fn seven_receives_from_counter_100_expand_to_100_to_106_then_the_next_cqe() {
    let cnt = 16;
    let cqes: Vec<Cqe> = (0..7).map(|k| recv_cqe(100 + k, 1)).collect();
    let mut r = round_trip(cnt, 0, &cqes);
    // The CQE after the session (index 7) and an empty slot at 8.
    let next = full(&recv_cqe(107, 1), 7, cnt);
    r[7 * CQE64..8 * CQE64].copy_from_slice(&next);
    let mut got = Vec::new();
    let mut ci = 0; // the title's slot now holds the first completion
    while sw_owned(r[ci as usize * CQE64 + 63], ci, cnt) {
        got.push(Cqe::decode(r[ci as usize * CQE64..][..CQE64].try_into().unwrap()).wqe_counter);
        ci += 1;
    }
    assert_eq!(got, (100..=107).collect::<Vec<_>>());
}

#[test]
fn after_a_session_the_next_lap_finds_no_hole_owned() {
    let cnt = 16;
    // A stale CQE of lap 0 in a slot that is a hole of the lap-1 session:
    // on lap 2 it would read as owned unless the expansion wrote it.
    let mut r = ring(cnt);
    let stale = full(&recv_cqe(1, 1), 5, cnt);
    r[5 * CQE64..6 * CQE64].copy_from_slice(&stale);
    let cqes: Vec<Cqe> = (0..9).map(|k| recv_cqe(k, 1)).collect();
    let first = full(&cqes[0], 16, cnt);
    let minis: Vec<_> = cqes
        .iter()
        .map(|c| MiniCqe::responder(0, c.byte_cnt))
        .collect();
    write_session(&mut r, cnt, 16, &first, &minis).unwrap();
    expand_session(&mut r, cnt, 16).unwrap();
    for i in 32..48u32 {
        let s = (i % cnt) as usize;
        assert!(
            !sw_owned(r[s * CQE64 + 63], i, cnt),
            "slot {s} reads as owned on lap 2"
        );
    }
}

#[test]
fn bad_titles_are_refused_and_change_nothing() {
    let cnt = 8;
    let mut r = ring(cnt);
    let before = r.clone();
    assert_eq!(
        expand_session(&mut r, cnt, 0),
        Err(SessionError::NotATitle { op_own: 0xf0 })
    );
    for n in [0u32, 1, 9, u32::MAX] {
        let mut t = title(&full(&recv_cqe(0, 0), 0, cnt), n);
        t[44..48].copy_from_slice(&n.to_be_bytes());
        r[..CQE64].copy_from_slice(&t);
        let snap = r.clone();
        assert_eq!(
            expand_session(&mut r, cnt, 0),
            Err(SessionError::Count { n, max: 8 })
        );
        assert_eq!(r, snap);
    }
    let mut e = full(&recv_cqe(0, 0), 0, cnt);
    e[63] = (CqeOpcode::RESP_ERR.0 << 4) | FORMAT_MASK;
    e[44..48].copy_from_slice(&3u32.to_be_bytes());
    r[..CQE64].copy_from_slice(&e);
    assert_eq!(
        expand_session(&mut r, cnt, 0),
        Err(SessionError::Opcode { opcode: 14 })
    );
    let mut short = before.clone();
    assert_eq!(
        expand_session(&mut short[..CQE64 * 7], cnt, 0),
        Err(SessionError::Ring {
            len: 448,
            cqe_cnt: 8
        })
    );
    assert_eq!(short, before);
}

#[test]
fn the_largest_session_fills_all_but_one_slot_and_writes_only_inside_the_ring() {
    let cnt = 16;
    let cqes: Vec<Cqe> = (0..15).map(|k| recv_cqe(k, k as u32)).collect();
    let r = round_trip(cnt, 7, &cqes);
    assert_eq!(r.len(), 16 * CQE64);
}

#[test]
fn a_title_index_near_u32_max_wraps_without_overflow() {
    // Found by the cqe_session fuzz target: write_session added the array
    // offset to the title index unwrapped.
    let cnt = 16;
    let t = u32::MAX;
    let cqes: Vec<Cqe> = (0..9).map(|k| recv_cqe(k, k as u32)).collect();
    round_trip(cnt, t, &cqes);
}
