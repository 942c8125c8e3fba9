//! Shared receive queues: one pool of receives that many QPs take from
//! ([`Srq`], made by [`Pd::create_srq`](crate::Pd::create_srq)), and what a
//! QP on one keeps ([`SrqLink`]).

use crate::backend::direct;
#[cfg(feature = "verbs")]
use crate::backend::verbs;
use crate::device::handles::{PdInner, PdKind};
#[cfg(feature = "verbs")]
use crate::ib::device::DataPath;
use crate::ib::error::{Error, Result};
use crate::ib::wr::{RecvWr, BYTES_PD};
use mlx5_dv::driver::CqCredits;
use std::sync::{Arc, Mutex};

/// A shared receive queue (SRQ): receives posted here go to whichever QP
/// on it ([`Pd::create_qp_on_srq`](crate::Pd::create_qp_on_srq),
/// [`SharedCq::create_qp_on_srq`](crate::SharedCq::create_qp_on_srq))
/// takes the next incoming SEND (or WRITE_IMM), so a server's receive
/// memory grows with its load, not with its connections (IB spec 10.2.9).
/// Each receive completes on the CQ of the QP that took it, with that QP's
/// `qp_num`; its `wr_id` is the one posted here.
///
/// On mlx5 (the sim, ConnectX) our driver writes the SRQ's WQEs (their
/// layout: `docs/prm.md`, after rdma-core `providers/mlx5/srq.c`); elsewhere
/// `ibv_post_srq_recv`. Completions may come out of order; a receive's
/// slot is free again as soon as its completion is polled (or discarded by
/// a RESET or destroy of its QP).
///
/// CQ room: each CQ that QPs on an SRQ complete into keeps room for
/// `max_wr` of its receive completions (CQ credits taken when its first QP
/// on the SRQ is made, given back when its last goes), since any of them
/// may take every receive.
///
/// **ODP page faults.** A receive whose buffer is ODP memory
/// ([`Access::ON_DEMAND`](crate::Access::ON_DEMAND)) and not resident when
/// a message comes makes ConnectX write an error CQE for its WQE (syndrome
/// `REMOTE_ABORTED_ERR` 0x22, vendor syndrome 0x93) while it faults the
/// page in; the sender retries, and the message lands in a later receive.
/// No completion reports that CQE on any path. libmlx5 (the verbs path)
/// moves the WQE, under the SRQ's lock, to a wait queue for a cool-down
/// and posts its SGEs again in the head WQE (`mlx5_complete_odp_fault`,
/// `srq.c`). The direct path takes no lock: the poll that meets the CQE
/// marks the WQE faulted in the SRQ's slots (`SrqSlots::fault`), and the
/// SRQ's owner posts it again, same wr_id and SGEs, at the driver's next
/// relink, before any new receive: a [`Self::post_recv`] that takes the
/// checked path (a batch, more than one SGE, or the in-place post's room,
/// set at the last relink, used up), or [`Self::repost_faulted`]. The
/// in-place post of one receive does not relink (it tests nothing more
/// for faults). Until then the receive counts in [`Self::outstanding`] and
/// [`Self::faulted`]: a server whose posts go in place, or that posts only
/// when it needs more, should call [`Self::repost_faulted`] after its
/// polls, or its SRQ runs short. Every buffer comes back: each receive
/// posted completes exactly once (or is flushed), however many faults it
/// took.
///
/// `Send`, not `Sync`: one thread posts. The QPs on it may be on others.
pub struct Srq {
    // Field order: the poster (the ring driver) goes before the device
    // object it keeps; QPs on the SRQ keep that object too.
    kind: SrqKind,
    pub(crate) shared: Arc<SrqShared>,
    pd: Arc<PdInner>,
    /// `shared.pd_id`, here for the in-place post (no pointer to follow).
    pd_id: u32,
}

pub(crate) enum SrqKind {
    Direct(direct::DirectSrq),
    #[cfg(feature = "verbs")]
    Verbs(verbs::VerbsSrqPost),
}

/// What an SRQ's QPs share with it: its limits, and the CQ credits held
/// for its receives, per CQ.
pub(crate) struct SrqShared {
    pub(crate) max_wr: u32,
    pub(crate) max_sge: u32,
    /// The PD id its receives' SGEs must carry.
    pub(crate) pd_id: u32,
    reserved: Mutex<Vec<(CqCredits, u32)>>,
}

/// A QP's tie to its SRQ: the CQ credits it holds there, given back when
/// the last QP of its CQ on the SRQ goes.
pub(crate) struct SrqLink {
    pub(crate) shared: Arc<SrqShared>,
    credits: Option<CqCredits>,
}

impl SrqShared {
    /// Holds `max_wr` of `credits` for this SRQ's receives, once per CQ.
    ///
    /// Errors: [`Error::SrqCqCredits`] when the CQ has fewer free.
    pub(crate) fn link(self: &Arc<Self>, credits: Option<CqCredits>) -> Result<SrqLink> {
        if let Some(c) = &credits {
            let mut r = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
            match r.iter_mut().find(|(k, _)| k.id() == c.id()) {
                Some((_, refs)) => *refs += 1,
                None if c.take(self.max_wr) => r.push((c.clone(), 1)),
                None => {
                    return Err(Error::SrqCqCredits {
                        free: c.free(),
                        max_wr: self.max_wr,
                    })
                }
            }
        }
        Ok(SrqLink {
            shared: self.clone(),
            credits,
        })
    }
}

impl Drop for SrqLink {
    fn drop(&mut self) {
        let Some(c) = &self.credits else { return };
        let mut r = self
            .shared
            .reserved
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(i) = r.iter().position(|(k, _)| k.id() == c.id()) {
            r[i].1 -= 1;
            if r[i].1 == 0 {
                r.remove(i);
                c.give(self.shared.max_wr);
            }
        }
    }
}

impl Srq {
    /// See [`Pd::create_srq`](crate::Pd::create_srq).
    pub(crate) fn create(pd: &Arc<PdInner>, max_wr: u32, max_sge: u32) -> Result<Srq> {
        if !(1..=1 << 14).contains(&max_wr) {
            return Err(Error::Config {
                field: "SRQ max_wr",
                value: max_wr as u64,
                min: 1,
                max: 1 << 14,
            });
        }
        if max_sge == 0 || max_sge as usize > direct::MAX_SGE {
            return Err(Error::Config {
                field: "SRQ max_sge",
                value: max_sge as u64,
                min: 1,
                max: direct::MAX_SGE as u64,
            });
        }
        let kind = match &pd.kind {
            PdKind::Sim(dev, pdn) => {
                SrqKind::Direct(direct::DirectSrq::create_sim(dev, *pdn, max_wr, max_sge)?)
            }
            #[cfg(feature = "verbs")]
            PdKind::Verbs(p, DataPath::Direct) => {
                SrqKind::Direct(direct::DirectSrq::create_mlx5(p, max_wr, max_sge)?)
            }
            #[cfg(feature = "verbs")]
            PdKind::Verbs(p, DataPath::Verbs) => {
                SrqKind::Verbs(verbs::VerbsSrqPost::create(p, max_wr, max_sge)?)
            }
        };
        let slots = match &kind {
            SrqKind::Direct(d) => d.slots(),
            #[cfg(feature = "verbs")]
            SrqKind::Verbs(v) => v.slots(),
        };
        pd.dereg.add_srq(slots);
        Ok(Srq {
            kind,
            shared: Arc::new(SrqShared {
                max_wr,
                max_sge,
                pd_id: pd.id,
                reserved: Mutex::new(Vec::new()),
            }),
            pd: pd.clone(),
            pd_id: pd.id,
        })
    }

    pub(crate) fn kind(&self) -> &SrqKind {
        &self.kind
    }

    pub(crate) fn pd(&self) -> &Arc<PdInner> {
        &self.pd
    }

    /// Most receives the SRQ holds at once.
    pub fn max_wr(&self) -> u32 {
        self.shared.max_wr
    }

    /// Most SGEs per receive.
    pub fn max_sge(&self) -> u32 {
        self.shared.max_sge
    }

    /// The SRQ number (`ibv_get_srq_num`; where a verbs provider does not
    /// give one, the SRQ's kernel handle, which async events name too).
    pub fn srq_num(&self) -> u32 {
        match &self.kind {
            SrqKind::Direct(d) => d.srqn(),
            #[cfg(feature = "verbs")]
            SrqKind::Verbs(v) => v.srqn(),
        }
    }

    /// Receives posted whose completions have not been polled yet (a
    /// receive is free again once its completion is polled, whatever the
    /// order), those that took an ODP page fault and wait to be posted
    /// again ([`Self::faulted`]) included: they are still the SRQ's, and
    /// [`Self::post_recv`] keeps their room.
    pub fn outstanding(&mut self) -> u32 {
        match &mut self.kind {
            SrqKind::Direct(d) => d.outstanding(),
            #[cfg(feature = "verbs")]
            SrqKind::Verbs(v) => v.outstanding(),
        }
    }

    /// Receives that took an ODP page fault and wait to be posted again by
    /// the next relink ([`Self::post_recv`]'s checked path) or
    /// [`Self::repost_faulted`] (see the [type docs](Self)); always 0 on the
    /// verbs path, where libmlx5 posts them again itself.
    pub fn faulted(&self) -> u32 {
        match &self.kind {
            SrqKind::Direct(d) => d.faulted(),
            #[cfg(feature = "verbs")]
            SrqKind::Verbs(_) => 0,
        }
    }

    /// Posts again, now, every receive that took an ODP page fault (same
    /// wr_id and SGEs, one doorbell) and returns how many; 0 when none
    /// waits, and on the verbs path. A [`Self::post_recv`] that relinks
    /// (its checked path) does the same before it posts.
    pub fn repost_faulted(&mut self) -> u32 {
        match &mut self.kind {
            SrqKind::Direct(d) => d.repost_faulted(),
            #[cfg(feature = "verbs")]
            SrqKind::Verbs(_) => 0,
        }
    }

    /// Posts a batch of receives with one doorbell; every WR is checked
    /// first, and on any error nothing is posted.
    ///
    /// Errors: [`Error::RecvQueueFull`] when the SRQ would hold more than
    /// `max_wr` receives not yet polled back (poll the QPs' CQs, then post
    /// again); [`Error::TooManySges`], [`Error::LengthOverflow`], [`Error::NeverFits`], [`Error::ForeignPd`], [`Error::BytesSge`] for more SGEs than `max_sge`, over 2^31
    /// bytes, a batch larger than `max_wr` (it could never fit), an SGE of
    /// another PD or of plain bytes; a verbs device's refusal
    /// ([`Error::Verbs`], `ibv_post_srq_recv`).
    #[inline(always)]
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        // One receive of one SGE on the direct path: in place
        // (`DirectSrq::post_recv_one`); anything else, or anything it
        // declines, takes the checked path.
        if let (SrqKind::Direct(d), [w]) = (&mut self.kind, wrs) {
            if d.post_recv_one(w, self.pd_id) {
                return Ok(());
            }
        }
        self.post_recv_checked(wrs)
    }

    /// [`Self::post_recv`] with every check, for every WR and backend.
    #[inline(never)]
    fn post_recv_checked(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        // The in-place post declined for want of room, maybe: relink what
        // completed, and post one receive of one SGE in place again (it
        // checks all it takes).
        if let (SrqKind::Direct(d), [w]) = (&mut self.kind, wrs) {
            d.refill();
            if d.post_recv_one(w, self.pd_id) {
                return Ok(());
            }
        }
        for w in wrs {
            if w.sges.iter().any(|s| s.pd() == BYTES_PD) {
                return Err(Error::BytesSge);
            }
            if w.sges.iter().any(|s| s.pd() != self.shared.pd_id) {
                return Err(Error::ForeignPd {
                    object: crate::PdObject::Sge,
                });
            }
        }
        if wrs.len() > self.shared.max_wr as usize {
            return Err(Error::NeverFits {
                wrs: wrs.len(),
                queue: crate::Queue::Srq,
                depth: self.shared.max_wr,
            });
        }
        match &mut self.kind {
            SrqKind::Direct(d) => d.post_recv(wrs),
            #[cfg(feature = "verbs")]
            SrqKind::Verbs(v) => v.post_recv(wrs),
        }
    }

    /// Arms the SRQ limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): when a
    /// receive taken leaves fewer than `limit` posted, the device raises
    /// one [`AsyncEvent::SrqLimitReached`](crate::AsyncEvent) (read it with
    /// [`Context::get_async_event`](crate::Context::get_async_event)) and
    /// the limit is disarmed: arm it again for the next. 0 disarms.
    ///
    /// Errors: `limit` above `max_wr` ([`Error::Config`]); the device's.
    pub fn set_limit(&mut self, limit: u32) -> Result<()> {
        if limit > self.shared.max_wr {
            return Err(Error::Config {
                field: "srq_limit (at most the SRQ's max_wr)",
                value: limit as u64,
                min: 0,
                max: self.shared.max_wr as u64,
            });
        }
        match &mut self.kind {
            SrqKind::Direct(d) => d.set_limit(limit),
            #[cfg(feature = "verbs")]
            SrqKind::Verbs(v) => v.set_limit(limit),
        }
    }
}
