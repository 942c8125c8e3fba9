//! Doorbell values (host-order `u32`; stored big-endian by [`crate::mmio::write_dbrec`]).
//!
//! Doorbell record layout (`mlx5dv_qp.dbrec`, `mlx5dv_cq.dbrec`), rdma-core
//! `providers/mlx5/qp.c` and `cq.c`:
//!
//! ```text
//! QP dbrec[0]: RQ producer index (16 bits)   dbrec[1]: SQ producer index (16 bits)
//! CQ dbrec[0]: consumer index (24 bits)      dbrec[1]: arm word
//! ```

/// Index of the SQ word in a QP doorbell record.
pub const QP_DBREC_SQ: usize = 1;
/// Index of the RQ word in a QP doorbell record.
pub const QP_DBREC_RQ: usize = 0;
/// Index of the consumer-index word in a CQ doorbell record.
pub const CQ_DBREC_CI: usize = 0;

/// SQ doorbell-record word: `pi & 0xffff`.
#[inline]
pub fn sq_dbrec(pi: u32) -> u32 {
    pi & 0xffff
}

/// RQ doorbell-record word: the receive producer index `& 0xffff`.
#[inline]
pub fn rq_dbrec(head: u32) -> u32 {
    head & 0xffff
}

/// Index of the arm word in a CQ doorbell record.
pub const CQ_DBREC_ARM: usize = 1;
/// Offset of the CQ doorbell register in the CQ's UAR page (`MLX5_CQ_DOORBELL`).
pub const CQ_UAR_DOORBELL: usize = 0x20;

/// CQ arm word (`dbrec[1]`), rdma-core `mlx5_arm_cq`:
/// `(arm_sn & 3) << 28 | cmd | (ci & 0xffffff)`, where `cmd` is
/// `MLX5_CQ_DB_REQ_NOT_SOL` (1 << 24) when only solicited completions should
/// raise an event, `MLX5_CQ_DB_REQ_NOT` (0) for any completion.
#[inline]
pub fn cq_arm_word(arm_sn: u32, solicited_only: bool, ci: u32) -> u32 {
    ((arm_sn & 3) << 28) | ((solicited_only as u32) << 24) | (ci & 0xff_ffff)
}

/// The 64-bit value written big-endian to `cq_uar + 0x20` after the arm word:
/// the arm word in the high half, the CQN in the low half.
#[inline]
pub fn cq_arm_uar(arm_word: u32, cqn: u32) -> u64 {
    ((arm_word as u64) << 32) | cqn as u64
}

/// The BlueFlame offset after a doorbell: the two halves of the register
/// alternate (`bf->offset ^= bf->buf_size` in rdma-core).
#[inline]
pub fn bf_offset_toggle(offset: u32, bf_size: u32) -> u32 {
    offset ^ bf_size
}

/// CQ consumer-index word: `ci & 0xffffff`.
#[inline]
pub fn cq_ci(ci: u32) -> u32 {
    ci & 0xff_ffff
}

/// Rebuilds a full 32-bit WQE index from a CQE's 16-bit `wqe_counter`, given
/// the oldest outstanding index `tail` and the next index to post `pi`.
/// Returns `None` when the counter names no WQE in `[tail, pi)` (stale or bogus).
#[inline]
pub fn full_wqe_index(wqe_counter: u16, tail: u32, pi: u32) -> Option<u32> {
    let delta = (wqe_counter as u32).wrapping_sub(tail) & 0xffff;
    let idx = tail.wrapping_add(delta);
    (delta < pi.wrapping_sub(tail)).then_some(idx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_index_window() {
        assert_eq!(full_wqe_index(5, 3, 10), Some(5));
        assert_eq!(full_wqe_index(2, 3, 10), None);
        assert_eq!(full_wqe_index(10, 3, 10), None);
        // Across the 16-bit wrap.
        assert_eq!(full_wqe_index(0x0001, 0x1_fffe, 0x2_0004), Some(0x2_0001));
        assert_eq!(cq_ci(0x1234_5678), 0x34_5678);
    }

    #[test]
    fn consumer_index_word_by_hand() {
        assert_eq!(cq_ci(65_535), 0x00_ffff);
        assert_eq!(cq_ci(65_536), 0x01_0000);
        assert_eq!(cq_ci(65_537), 0x01_0001);
        assert_eq!(cq_ci(1 << 24), 0);
    }

    #[test]
    fn arm_word_and_uar_value() {
        // arm_sn 5 -> 1; solicited only; ci 0x1000002 -> 0x000002.
        let w = cq_arm_word(5, true, 0x100_0002);
        assert_eq!(w, 0x1100_0002);
        assert_eq!(cq_arm_word(2, false, 7), 0x2000_0007);
        assert_eq!(cq_arm_uar(w, 0x85), 0x1100_0002_0000_0085);
        assert_eq!(
            cq_arm_uar(w, 0x85).to_be_bytes(),
            [0x11, 0, 0, 2, 0, 0, 0, 0x85]
        );
        assert_eq!(bf_offset_toggle(0, 256), 256);
        assert_eq!(bf_offset_toggle(256, 256), 0);
        assert_eq!(rq_dbrec(0x1_0003), 3);
        assert_eq!(sq_dbrec(0xabcd_1234), 0x1234);
    }
}
