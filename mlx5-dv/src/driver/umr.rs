//! Posting a UMR WQE (a memory-window bind or `LOCAL_INV`,
//! [`crate::wqe::UmrWqe`]) on a send queue, and the small fence that the
//! WQE after it carries (libmlx5's `fm_cache`: `_mlx5_post_send` sets
//! `next_fence = MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE` for `IBV_WR_BIND_MW`
//! and `IBV_WR_LOCAL_INV`, and the next WQE, in this post or a later one,
//! takes it unless it asks for `FENCE`).

use super::sq::{SendQueue, Slot};
use crate::prm::CtrlFlags;
use crate::wqe::{umr_size, write_umr_sized, UmrWqe, WqeError};

impl SendQueue {
    /// Writes one UMR WQE (3 WQEBBs for a bind, 2 for a zero-length UMR)
    /// without ringing the doorbell, as [`Self::post`] writes a send WQE:
    /// auto-signal applies, its `wr_id` comes back in its completion, and
    /// on error nothing is written.
    ///
    /// The next WQE [`Self::post`] (or this) writes gets
    /// [`CtrlFlags::SMALL_FENCE`] unless it asks for [`CtrlFlags::FENCE`],
    /// so it does not run before the new key is in place. Until then the
    /// in-place posts' gates ([`Self::set_gate`], [`Self::set_ud_gate`],
    /// [`Self::set_dc_gate`]) are closed, so the next WQE goes through
    /// [`Self::post`]; it reopens the gates its owner opened. (The
    /// in-place writers without a gate, `post_segs`, `reserve`,
    /// `post_inline`, `post_ud` and `post_dc`, do not apply the fence: a
    /// caller that posts UMRs uses [`Self::post`] for the WQE after one.)
    ///
    /// Errors: [`WqeError::WrLimit`] with `max_post` WRs outstanding;
    /// [`crate::wqe::umr_size`]'s ([`WqeError::UmrLength`],
    /// [`WqeError::TooBig`]); [`WqeError::QueueFull`].
    pub fn post_umr(&mut self, wqe: &UmrWqe, wr_id: u64) -> Result<(), WqeError> {
        let pi = self.pi;
        let posted = self.posted;
        let wqe_cnt = self.geo.wqe_cnt;
        if self.max_post == posted.wrapping_sub(self.retired) {
            return Err(self.wr_limit());
        }
        let free = wqe_cnt - pi.wrapping_sub(self.tail);
        let (ds, wqebbs) = umr_size(&self.geo, wqe)?;
        if wqebbs > free {
            return Err(WqeError::QueueFull { need: wqebbs, free });
        }
        let (mut flags, forced) = self.auto_signal(wqe.flags);
        if !self.fence_next.is_empty() {
            flags = self.take_fence(flags);
        }
        let slot = (pi & (wqe_cnt - 1)) as usize;
        // SAFETY: `slots` has `wqe_cnt` entries (made so in `new`), and
        // `slot` is masked below `wqe_cnt`.
        unsafe { Slot::store(self.slots.ptr().add(slot), wr_id, posted, wqebbs, forced) };
        self.posted = posted.wrapping_add(1);
        self.batch_last = pi;
        self.pi = pi.wrapping_add(wqebbs);
        let w = UmrWqe { flags, ..*wqe };
        write_umr_sized(&mut self.buf, &self.geo, pi, &w, ds, wqebbs);
        self.fence_next = CtrlFlags::SMALL_FENCE;
        self.gate = 0;
        self.ud_gate = 0;
        self.dc_gate = 0;
        Ok(())
    }

    /// `flags` with the pending fence (unless they ask for `FENCE`, which
    /// orders more), which is then spent; the gates [`Self::post_umr`]
    /// closed reopen as their owner left them.
    #[cold]
    #[inline(never)]
    pub(super) fn take_fence(&mut self, flags: CtrlFlags) -> CtrlFlags {
        let f = if flags.contains(CtrlFlags::FENCE) {
            flags
        } else {
            flags | self.fence_next
        };
        self.fence_next = CtrlFlags::empty();
        self.set_gate(self.gate_open);
        self.set_ud_gate(self.ud_gate_open);
        self.set_dc_gate(self.dc_gate_open);
        f
    }

    /// The fence the next WQE gets: [`CtrlFlags::SMALL_FENCE`] after a UMR
    /// until a WQE takes it, else empty.
    pub fn pending_fence(&self) -> CtrlFlags {
        self.fence_next
    }
}
