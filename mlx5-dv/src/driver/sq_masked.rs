//! [`SendQueue::post_masked`]: [`SendQueue::post`] of a masked atomic
//! (`ATOMIC_MASKED_CS` / `ATOMIC_MASKED_FA`), apart, so that no other WQE
//! pays a test for it: sized by the codec's masked sizing, written by its
//! masked writer, with `post`'s bookkeeping.

use super::sq::{SendQueue, Slot};
use crate::wqe::{masked_size_or, write_masked, CtrlQpn, SendWqe, WqeError};

impl SendQueue {
    /// [`Self::post`] of a masked atomic `wqe` (its opcode
    /// `ATOMIC_MASKED_CS` or `ATOMIC_MASKED_FA`, its operands
    /// `wqe.masked`): checked and sized (`wqe::wqe_size`'s errors; any
    /// other opcode is [`WqeError::UnsupportedOpcode`]), given room,
    /// counted and written, without ringing the doorbell. On error nothing
    /// is written.
    #[inline(never)]
    pub fn post_masked(&mut self, wqe: &SendWqe<'_>, wr_id: u64) -> Result<(), WqeError> {
        if self.max_post == self.posted.wrapping_sub(self.retired) {
            return Err(self.wr_limit());
        }
        let e = WqeError::UnsupportedOpcode(wqe.opcode.0);
        let (ds, wqebbs) = masked_size_or(e, wqe, self.geo.max_wqebbs)?;
        let (pi, posted, wqe_cnt) = (self.pi, self.posted, self.geo.wqe_cnt);
        let free = wqe_cnt - pi.wrapping_sub(self.tail);
        if wqebbs > free {
            return Err(WqeError::QueueFull { need: wqebbs, free });
        }
        let (flags, forced) = self.auto_signal(wqe.flags);
        let slot = (pi & (wqe_cnt - 1)) as usize;
        // SAFETY: `slots` has `wqe_cnt` entries (made so in `new`), and `slot`
        // is masked below `wqe_cnt`.
        unsafe { Slot::store(self.slots.ptr().add(slot), wr_id, posted, wqebbs, forced) };
        self.posted = posted.wrapping_add(1);
        self.batch_last = pi;
        self.pi = pi.wrapping_add(wqebbs);
        let qpn = CtrlQpn::Word(self.qpn_word);
        write_masked(&mut self.buf, &self.geo, qpn, pi, wqe, flags, ds);
        Ok(())
    }
}
