//! `poll.rs`'s unit tests: the receive fast paths' opcode test, and a
//! SEND with invalidate's receive completion.

use super::*;

/// `plain_receive`'s one compare tells every `op_own` as the two tests
/// it replaced: opcode RESP_WR_IMM to RESP_SEND_INV, format bits clear.
#[test]
fn plain_receive_is_the_opcode_and_format_test() {
    for op_own in 0..=255u8 {
        let opcode = op_own >> 4;
        let want = op_own & FORMAT == 0
            && (CqeOpcode::RESP_WR_IMM.0..=CqeOpcode::RESP_SEND_INV.0).contains(&opcode);
        assert_eq!(plain_receive(op_own), want, "op_own {op_own:#04x}");
    }
}

/// The receive of a peer's SEND_WITH_INV (CQE opcode RESP_SEND_INV,
/// which ConnectX and, since hsinv, the sim write) is a RECV, as libmlx5
/// reports it; it read as the requester opcode of byte 56 before
/// (found against `mlx5_poll_cq_v1` by the provider oracle).
#[test]
fn a_send_with_invalidate_receive_is_a_recv() {
    let mut b = [0u8; 64];
    b[36..40].copy_from_slice(&0xac2a_2a5eu32.to_be_bytes());
    b[44..48].copy_from_slice(&100u32.to_be_bytes());
    b[56..60].copy_from_slice(&0x00a9_1adau32.to_be_bytes());
    b[63] = CqeOpcode::RESP_SEND_INV.0 << 4;
    let cqe = Cqe::decode(&b);
    let c = completion(
        &cqe,
        Retired {
            wr_id: 7,
            hidden: false,
        },
    )
    .expect("a completion");
    assert_eq!(c.opcode, WcOpcode::RECV);
    assert_eq!((c.wr_id, c.byte_len, c.imm), (7, 100, Some(0xac2a_2a5e)));
    assert!(c.src_qp.with_inv());
    assert_eq!(c.invalidated_rkey(), Some(crate::Rkey(0xac2a_2a5e)));
    // (The fast paths' `write_recv_fields` of it: tests/memory_windows.rs,
    // a SEND with invalidate on the sim.)
}
