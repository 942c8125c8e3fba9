//! SRQs on the verbs path: `ibv_post_srq_recv`, with the verbs `wr_id` of
//! each receive `SRQ_TAG | slot`, the slot's entry in an [`SrqSlots`]
//! table holding the caller's wr_id and lkeys (so an MR dropped while a
//! receive names it waits for that receive, as on the direct path), and
//! QPs' polls completing the slot they name.

use super::super::ibv::{Pd, VerbsSrq};
use crate::ib::error::{Error, Result};
use crate::ib::wr::RecvWr;
use mlx5_dv::driver::SrqSlots;
use rdma_sys::*;
use std::mem::MaybeUninit;
use std::sync::Arc;

/// Bit 62 of a verbs `wr_id`: a receive posted to an SRQ, its slot in the
/// low 16 bits.
pub(crate) const SRQ_TAG: u64 = 1 << 62;

/// Most SGEs per receive (the front end's limit for every SRQ).
const MAX_SGE: usize = 30;

/// The poster's side of a verbs SRQ.
pub(crate) struct VerbsSrqPost {
    srq: Arc<VerbsSrq>,
    slots: Arc<SrqSlots>,
    /// Slots not posted, and the poster's place in the slots' return queue.
    free: Vec<u32>,
    returned_at: u64,
    max_sge: u32,
}

impl VerbsSrqPost {
    pub(crate) fn create(pd: &Arc<Pd>, max_wr: u32, max_sge: u32) -> Result<Self> {
        let srq = VerbsSrq::create(pd, max_wr, max_sge)?;
        if srq.max_wr < max_wr || srq.max_sge < max_sge {
            return Err(Error::Invalid(format!(
                "the device granted an SRQ of {} receives of {} SGEs; asked {max_wr} of {max_sge}",
                srq.max_wr, srq.max_sge
            )));
        }
        Ok(VerbsSrqPost {
            srq: Arc::new(srq),
            slots: Arc::new(SrqSlots::new(max_wr, max_sge)),
            free: (0..max_wr).rev().collect(),
            returned_at: 0,
            max_sge,
        })
    }

    /// What QPs on the SRQ keep: the SRQ object and the slot table.
    pub(crate) fn parts(&self) -> (Arc<VerbsSrq>, Arc<SrqSlots>) {
        (self.srq.clone(), self.slots.clone())
    }

    pub(crate) fn slots(&self) -> &Arc<SrqSlots> {
        &self.slots
    }

    pub(crate) fn srqn(&self) -> u32 {
        self.srq.srqn()
    }

    fn relink(&mut self) {
        while let Some(i) = self.slots.take_returned(&mut self.returned_at) {
            self.free.push(i);
        }
    }

    pub(crate) fn outstanding(&mut self) -> u32 {
        self.relink();
        self.slots.count() - self.free.len() as u32
    }

    pub(crate) fn set_limit(&mut self, limit: u32) -> Result<()> {
        self.srq.set_limit(limit)
    }

    /// Posts `wrs` with `ibv_post_srq_recv`, 32 per call, all or nothing
    /// as far as our checks go (SGE count, 2^31 bytes, room); a provider's
    /// refusal part way leaves the WRs before it posted ([`Error::Verbs`]).
    pub(crate) fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        let max = self.max_sge as usize;
        for w in wrs {
            if w.sges.len() > max {
                return Err(Error::TooManySges {
                    sges: w.sges.len(),
                    max: max as u32,
                    limit: "the SRQ's max_sge",
                });
            }
            let total: u64 = w.sges.iter().map(|s| s.len as u64).sum();
            if total > 1 << 31 {
                return Err(Error::LengthOverflow {
                    len: total,
                    max: 1 << 31,
                });
            }
        }
        self.relink();
        if wrs.len() > self.free.len() {
            return Err(Error::RecvQueueFull);
        }
        const CHUNK: usize = 32;
        for chunk in wrs.chunks(CHUNK) {
            let mut sge_store = [const { MaybeUninit::<ibv_sge>::uninit() }; CHUNK * MAX_SGE];
            let mut wr_store = [const { MaybeUninit::<ibv_recv_wr>::uninit() }; CHUNK];
            let mut taken = [0u32; CHUNK];
            let mut at = 0;
            for (i, w) in chunk.iter().enumerate() {
                let idx = self.free.pop().expect("room checked");
                taken[i] = idx;
                self.slots
                    .give(idx, w.wr_id, w.sges.iter().map(|s| s.lkey.0));
                let first = at;
                for s in w.sges {
                    sge_store[at].write(ibv_sge {
                        addr: s.addr,
                        length: s.len,
                        lkey: s.lkey.0,
                    });
                    at += 1;
                }
                wr_store[i].write(ibv_recv_wr {
                    wr_id: SRQ_TAG | idx as u64,
                    next: std::ptr::null_mut(),
                    // SAFETY: `first` <= `CHUNK * MAX_SGE` (`sge_store[at]` was indexed,
                    // bounds-checked, for every SGE before it), so the pointer stays
                    // inside `sge_store` or one past its end.
                    sg_list: unsafe { sge_store.as_mut_ptr().add(first) }.cast(),
                    num_sge: w.sges.len() as i32,
                });
            }
            // SAFETY: the first `chunk.len()` entries were written above.
            let vwrs: &mut [ibv_recv_wr] = unsafe {
                std::slice::from_raw_parts_mut(wr_store.as_mut_ptr().cast(), chunk.len())
            };
            for i in 1..vwrs.len() {
                let next: *mut ibv_recv_wr = &mut vwrs[i];
                vwrs[i - 1].next = next;
            }
            let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
            // SAFETY: live SRQ; the chain and its SGEs live across the call.
            let rc = unsafe { ibv_post_srq_recv(self.srq.raw, vwrs.as_mut_ptr(), &mut bad) };
            if rc != 0 {
                let posted = if bad.is_null() {
                    0
                } else {
                    // SAFETY: `bad` points into `vwrs`.
                    unsafe { bad.offset_from(vwrs.as_ptr()) }.max(0) as usize
                };
                for &idx in &taken[posted..chunk.len()] {
                    self.slots.take_back(idx);
                    self.free.push(idx);
                }
                return Err(Error::Verbs {
                    call: "ibv_post_srq_recv",
                    errno: if rc > 0 {
                        rc
                    } else {
                        super::super::ibv::errno()
                    },
                    detail: String::new(),
                });
            }
        }
        Ok(())
    }
}
