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
}
