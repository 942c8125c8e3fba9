//! The direct QP's send WQE size: the largest WQE its limits make, as
//! rdma-core's `mlx5_calc_send_wqe` sizes a QP's SQ (`providers/mlx5/verbs.c`),
//! and with memory windows at least a bind's UMR WQE.

use crate::ib::qp_attr::QpType;
use mlx5_dv::wqe::DATAGRAM_SEG;

/// WQEBBs of a bind's UMR WQE (ctrl 16, UMR ctrl 48, mkey context 64, one
/// KLM padded to 64: 192 bytes); a zero-length one (an unbind, `LOCAL_INV`)
/// takes 2.
pub(crate) const UMR_WQEBBS: u32 = 3;

/// The largest send WQE of a QP with these limits, in WQEBBs: ctrl, raddr
/// and the larger of the SGE list and the inline segment (an atomic WQE,
/// 4 DS, fits one WQEBB), as rdma-core's `mlx5_calc_send_wqe` sizes it.
pub(crate) fn max_wqebbs(max_send_sge: u32, max_inline: u32) -> u32 {
    let payload = (max_send_sge as usize * 16).max((max_inline as usize + 4).div_ceil(16) * 16);
    (32 + payload).div_ceil(64) as u32
}

/// [`max_wqebbs`] for a QP of type `t`: a UD WQE has the 48-byte datagram
/// segment after its ctrl segment, and no remote-address segment; a DCI's
/// has both (and an atomic's 16-byte segment with its one SGE).
pub(crate) fn max_wqebbs_of(t: QpType, max_send_sge: u32, max_inline: u32) -> u32 {
    let payload = (max_send_sge as usize * 16).max((max_inline as usize + 4).div_ceil(16) * 16);
    match t {
        QpType::Ud => (16 + DATAGRAM_SEG + payload).div_ceil(64) as u32,
        QpType::Dci => (16 + DATAGRAM_SEG + 16 + payload.max(32)).div_ceil(64) as u32,
        _ => max_wqebbs(max_send_sge, max_inline),
    }
}

/// The largest send WQE, in WQEBBs, of a direct QP of type `t` with these
/// limits ([`max_wqebbs_of`]), and with `memory_windows` at least a bind's
/// UMR ([`UMR_WQEBBS`]), as `mlx5_calc_send_wqe` sizes a QP with
/// `IBV_QP_EX_WITH_BIND_MW` (`MLX5_BIND_MW_WQE_SIZE`, 192 bytes).
pub(crate) fn sq_max_wqebbs(t: QpType, max_send_sge: u32, max_inline: u32, mw: bool) -> u32 {
    let n = max_wqebbs_of(t, max_send_sge, max_inline);
    if mw {
        n.max(UMR_WQEBBS)
    } else {
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With memory windows a QP's WQEs hold at least a bind's 3 WQEBBs
    /// (`MLX5_BIND_MW_WQE_SIZE`, 192 bytes); larger limits keep theirs.
    #[test]
    fn memory_windows_size_the_sq_for_a_bind() {
        assert_eq!(sq_max_wqebbs(QpType::Rc, 1, 0, false), 1);
        assert_eq!(sq_max_wqebbs(QpType::Rc, 1, 0, true), UMR_WQEBBS);
        assert_eq!(sq_max_wqebbs(QpType::Uc, 1, 60, true), UMR_WQEBBS);
        assert_eq!(sq_max_wqebbs(QpType::Rc, 30, 0, true), 8);
        assert_eq!(sq_max_wqebbs(QpType::Rc, 30, 0, false), 8);
    }
}
