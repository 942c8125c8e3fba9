//! The checks of a masked atomic WR ([`WrOp::MaskedCmpSwap`],
//! [`WrOp::MaskedFetchAdd`]) before anything is written: the path, the
//! shape of its one SGE, the remote address's alignment, the operands'
//! width.
//!
//! The probe is the post itself. No verbs or mlx5dv query reports extended
//! atomics: mlx5_ib reports `masked_atomic_cap` NONE, and what the device
//! has (`atomic_operations`, `atomic_size_qp` / `_dc`, the 8-byte
//! endianness mode) is read by a DevX `QUERY_HCA_CAP` (UCX
//! `dv/ib_mlx5dv_md.c`), which this crate does not make. So the direct
//! path posts them (the sim runs them; a ConnectX without extended
//! atomics completes the WR in error) and the verbs path, which has no
//! opcode for them, refuses them here.

use super::{Qp, QpKind};
use crate::ib::error::{Error, Result};
use crate::ib::wr::{SendWr, WrOp};

impl Qp {
    /// A masked atomic WR `w` against the path and its shape:
    /// [`Error::Unsupported`] ([`Feature::MaskedAtomics`](crate::Feature::MaskedAtomics))
    /// on the verbs path, [`Error::MaskedAtomicShape`] unless one SGE of
    /// exactly `size` bytes and not inline, [`Error::MaskedAtomicOperand`]
    /// for a remote address not aligned to `size` or an operand wider
    /// than `size` bytes. Any other WR passes.
    pub(crate) fn check_masked(&self, w: &SendWr<'_>) -> Result<()> {
        let (remote, size, operands) = match w.op {
            WrOp::MaskedCmpSwap {
                remote,
                size,
                compare,
                compare_mask,
                swap,
                swap_mask,
            } => (remote, size, [compare, compare_mask, swap, swap_mask]),
            WrOp::MaskedFetchAdd {
                remote,
                size,
                add,
                field_boundary,
            } => (remote, size, [add, field_boundary, 0, 0]),
            _ => return Ok(()),
        };
        #[cfg(feature = "verbs")]
        if let QpKind::Verbs(_) = self.kind {
            return Err(Error::Unsupported {
                device: self.verbs_device().unwrap_or("verbs").into(),
                feature: crate::Feature::MaskedAtomics,
            });
        }
        #[cfg(not(feature = "verbs"))]
        let QpKind::Direct(_) = self.kind;
        let bytes = size.bytes();
        if w.inline || w.sges.len() != 1 || w.sges[0].len() != bytes {
            return Err(Error::MaskedAtomicShape {
                size: bytes,
                sges: w.sges.len(),
                len: w.total_len(),
                inline: w.inline,
            });
        }
        if remote.addr % bytes as u64 != 0 {
            return Err(Error::MaskedAtomicOperand {
                size: bytes,
                addr: remote.addr,
                value: 0,
            });
        }
        if let Some(&value) = operands.iter().find(|&&v| v > size.max_value()) {
            return Err(Error::MaskedAtomicOperand {
                size: bytes,
                addr: 0,
                value,
            });
        }
        Ok(())
    }
}
