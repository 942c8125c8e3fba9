//! Memory windows (IB spec 10.6.7): [`Mw`] (its docs have the two types
//! side by side), [`MwBind`], and the bind checks.

pub use super::error::MwRefusal;
use super::keys::Rkey;
use super::mem::Access;
use super::mr::{Mr, Registration};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use mlx5_dv::wqe::MwType;

/// A memory window allocated on a PD ([`Pd::alloc_mw`](crate::Pd::alloc_mw),
/// `ibv_alloc_mw`); deallocated (`ibv_dealloc_mw`, which unbinds it) when
/// dropped, or, with a bind of it outstanding, once that bind retires.
///
/// Memory windows (IB spec 10.6.7): a grant of one slice of an [`Mr`] to
/// a peer, with its own rkey and access, revoked without deregistering
/// the MR.
///
/// | | type 1 ([`MwType::One`]) | type 2 ([`MwType::Two`]) |
/// |---|---|---|
/// | bind | [`Qp::bind_mw`](crate::Qp::bind_mw) (`ibv_bind_mw`) | a WR, [`SendWr::bind_mw`](crate::SendWr::bind_mw) (`IBV_WR_BIND_MW`), ordered with the QP's other WRs |
/// | revoke | [`Qp::unbind_mw`](crate::Qp::unbind_mw), a zero-length bind | [`SendWr::local_inv`](crate::SendWr::local_inv) (`IBV_WR_LOCAL_INV`), or the peer's [`SendWr::send_with_inv`](crate::SendWr::send_with_inv) |
/// | rebind | while bound | only once free (invalidated) |
/// | serves | every QP of the PD | the QP it was bound on |
///
/// The MR needs [`Access::MW_BIND`](crate::Access::MW_BIND) (IB spec
/// C10-73), and the window's access may not exceed what the MR allows a
/// window: REMOTE_WRITE and REMOTE_ATOMIC only over an MR with
/// LOCAL_WRITE (C10-75). Every bind changes the rkey's low byte (the
/// variant, `ibv_inc_rkey`), so an rkey handed out before is dead after
/// the next bind.
///
/// **The MR stays alive while a window may be bound to it.** A bind keeps
/// a handle to its MR in the window, and to the one the window mapped
/// before it (for a rollback), until the next bind, or until the window
/// is deallocated (dropped, and no bind of it outstanding:
/// `ibv_dealloc_mw` unbinds it first); so the MR's memory is never
/// deregistered, nor freed, under a bound window (rxe refuses such a
/// deregistration, the sim too).
///
/// On mlx5 (the sim, ConnectX) binds and `LOCAL_INV` are UMR WQEs
/// (`mlx5_dv::wqe::UmrWqe`, 3 WQEBBs for a bind, 2 for a zero-length one):
/// a QP that posts them is created with
/// [`QpConfig::memory_windows`](crate::QpConfig::memory_windows), which
/// sizes its send WQEs for them (rdma-core `mlx5_calc_send_wqe` with
/// `IBV_QP_EX_WITH_BIND_MW`).
///
/// Not `Clone`: one handle, which WRs borrow. Its [`rkey`](Self::rkey) is
/// the one its last bind posted gave it (set when the bind is posted, in
/// effect once the device runs it: WRs after it on the same QP see it),
/// or, once that bind failed, the one before it.
///
/// # One bind outstanding at a time; a failed bind rolls back
///
/// A bind names the window by the rkey the device holds now and gives it
/// the next one (IB spec o10-37.2; `ibv_bind_mw(3)`: the access holds
/// "after the bind completes successfully"), so a bind posted before the
/// one ahead of it has run would name a variant the device has not set.
/// Hence:
/// - **One bind of a window outstanding at a time**, on any QP, from any
///   thread: a bind or unbind ([`Qp::bind_mw`](crate::Qp::bind_mw),
///   [`Qp::unbind_mw`](crate::Qp::unbind_mw), a
///   [`SendWr::bind_mw`](crate::SendWr::bind_mw), a second one in the same
///   batch too) while another is outstanding is refused before anything
///   is written: [`MwRefusal::BindOutstanding`]. A bind is outstanding
///   from its post until a poll of its QP's CQ retires its WQE: its own
///   completion, or, unsignaled, a later signaled WR's on that QP (which
///   implies it ran), or its QP's RESET. Poll that QP, then bind again.
///   [`bind_outstanding`](Self::bind_outstanding) tells. (The claim is one
///   compare-and-swap of an atomic the window shares with its bind's
///   record on the QP. The common WRITE / SEND posts and polls do nothing
///   more: a QP with a bind outstanding polls on its general path until it
///   retires, and its queue of outstanding binds is locked only to add a
///   bind or to settle one.)
/// - **A bind that fails rolls back.** One that completes in error
///   (refused, `MW_BIND_ERR`) or is flushed (`WR_FLUSH_ERR`, its QP in
///   ERR) changed nothing on the device: [`rkey`](Self::rkey) goes back to
///   the one before it when the poll retires it, and the window binds
///   again (on a QP in RTS). (libibverbs moves `ibv_mw.rkey` at post and
///   leaves failures to its caller, `mlx5_bind_mw`; rxe likewise.) A
///   RESET settles the binds its drain of the CQ retires as a poll would;
///   a bind whose QP is reset or dropped with no completion of it (or of
///   a WR after it) seen keeps the rkey it gave (whether the device ran it
///   is not known).
/// - **Dropping a window with a bind outstanding** defers its
///   deallocation (`ibv_dealloc_mw`) until that bind retires (the bind's
///   record on its QP holds the window, and the MRs it may map), so the
///   bind completes as it would have; the window goes with the poll that
///   retires it, or with its QP.
/// - **Drop a type-2 window before the QP it is bound to** (or invalidate
///   it first). rxe 6.1 holds a reference to that QP while the window is
///   bound, and destroying the QP then waits for it (`__rxe_cleanup`,
///   `rxe_pool.c`: a kernel warning after a timeout, about 50 s in the
///   guests here).
pub struct Mw {
    /// The backend's handle: a verbs `*mut ibv_mw` as an integer; 0 on the sim.
    #[cfg_attr(not(feature = "verbs"), allow(dead_code))]
    pub(crate) raw: usize,
    pub(crate) mw_type: MwType,
    /// The PD id ([`Mr`]s carry the same): binds only to MRs of this PD.
    pub(crate) pd: u32,
    /// The rkey, the bind outstanding, the allocation and the MRs the
    /// window may map: shared with the record of its outstanding bind on
    /// a QP, which settles it when its WQE retires (and so outlives a
    /// window dropped under its bind: the window is deallocated once both
    /// are gone).
    pub(crate) state: Arc<MwState>,
}

/// The MRs a window may map ([`Mw::claim_bind`]): `last` the one its
/// last bind posted maps, `before` the one the window mapped before that
/// bind (the window maps it again if that bind fails and rolls back).
#[derive(Default)]
pub(crate) struct Bound {
    pub(crate) last: Option<Mr>,
    pub(crate) before: Option<Mr>,
}

/// Bit 32 of [`MwState`]'s word: a bind of the window is outstanding.
const OUTSTANDING: u64 = 1 << 32;
/// Bit 33 of [`MwState`]'s word: the last bind settled failed and rolled
/// back (kept while the next one is outstanding: [`Mw::claim_bind`]).
const ROLLED_BACK: u64 = 1 << 33;

/// A window claimed for a bind ([`MwState::claim`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Claim {
    /// The rkey before the bind: the one it names the window by.
    pub(crate) old: u32,
    /// The bind before it rolled back (the window maps `Bound::before`).
    pub(crate) rolled_back: bool,
}

impl Claim {
    /// The rkey the bind gives the window ([`next_rkey`] of `old`).
    pub(crate) fn new_rkey(&self) -> u32 {
        next_rkey(self.old)
    }
}

/// A window's bind state, one atomic word shared by the [`Mw`] and the
/// record of its outstanding bind on a QP (`Arc`: it outlives a window
/// dropped under its bind). Bits 31:0 the rkey (the one the last bind
/// posted gives; rolled back to the one before it if that bind fails),
/// bit 32 [`OUTSTANDING`], bit 33 [`ROLLED_BACK`]. Each change is a
/// compare-and-swap; no lock.
///
/// A bind claims the window ([`Self::claim`]: rkey to the next, the mark
/// set) before anything is written, gives it back if its post fails
/// ([`Self::unclaim`]), and is settled when its WQE retires
/// ([`Self::settle`]: the mark cleared; on failure the rkey back).
pub(crate) struct MwState {
    word: AtomicU64,
    // Field order: the window is deallocated (`reg` drops) before the MRs
    // it may map may go.
    // (Held for its drop alone: it deallocates the window.)
    #[allow(dead_code)]
    reg: Box<dyn Registration>,
    /// The MRs the window may map, kept alive. Locked only by a bind (a
    /// control operation), never by post or poll.
    pub(crate) bound: Mutex<Bound>,
}

impl std::fmt::Debug for MwState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let w = self.word.load(Ordering::Acquire);
        f.debug_struct("MwState")
            .field("rkey", &format_args!("{:#x}", w as u32))
            .field("outstanding", &(w & OUTSTANDING != 0))
            .field("rolled_back", &(w & ROLLED_BACK != 0))
            .finish()
    }
}

impl MwState {
    /// A window not bound, its allocation `reg` (deallocates it when
    /// dropped), its rkey `rkey`.
    pub(crate) fn new(reg: Box<dyn Registration>, rkey: u32) -> Arc<MwState> {
        Arc::new(MwState {
            word: AtomicU64::new(rkey as u64),
            reg,
            bound: Mutex::new(Bound::default()),
        })
    }

    /// The rkey now (bits 31:0).
    #[inline]
    pub(crate) fn rkey(&self) -> u32 {
        self.word.load(Ordering::Acquire) as u32
    }

    /// Whether a bind is outstanding.
    pub(crate) fn outstanding(&self) -> bool {
        self.word.load(Ordering::Acquire) & OUTSTANDING != 0
    }

    /// Claims the window for a bind: its rkey becomes the next
    /// ([`next_rkey`]) and a bind is outstanding, in one compare-and-swap.
    /// Returns the rkey before (the one the bind names the window by) and
    /// whether the bind before rolled back.
    ///
    /// Errors: [`MwRefusal::BindOutstanding`], changing nothing.
    pub(crate) fn claim(&self) -> Result<Claim, MwRefusal> {
        let mut w = self.word.load(Ordering::Acquire);
        loop {
            if w & OUTSTANDING != 0 {
                return Err(MwRefusal::BindOutstanding { rkey: w as u32 });
            }
            let now = w as u32;
            let new = (w & ROLLED_BACK) | OUTSTANDING | next_rkey(now) as u64;
            match self
                .word
                .compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    return Ok(Claim {
                        old: now,
                        rolled_back: w & ROLLED_BACK != 0,
                    })
                }
                Err(seen) => w = seen,
            }
        }
    }

    /// Gives back a claim whose bind was not posted: the rkey before it,
    /// no bind outstanding, the last bind's rollback forgotten
    /// ([`Mw::unclaim_bind`] puts the MR it maps in `Bound::last`).
    fn unclaim(&self) {
        self.finish(|w| prev_rkey(w as u32) as u64);
    }

    /// Settles the outstanding bind, its WQE retired: `ok`, it ran (the
    /// rkey stays); else it completed in error or was flushed: the bind
    /// took no effect (IB spec o10-37.2; `ibv_bind_mw(3)`: the access holds
    /// "after the bind completes successfully"), so the rkey goes back to
    /// the one before it.
    pub(crate) fn settle(&self, ok: bool) {
        if ok {
            self.finish(|w| w as u32 as u64);
        } else {
            self.finish(|w| ROLLED_BACK | prev_rkey(w as u32) as u64);
        }
    }

    /// Clears the outstanding mark, the word made `f(word)`: a CAS from
    /// the word with the mark (only the bind's owner changes it then).
    fn finish(&self, f: impl Fn(u64) -> u64) {
        let mut w = self.word.load(Ordering::Acquire);
        loop {
            debug_assert!(w & OUTSTANDING != 0, "no bind outstanding");
            if w & OUTSTANDING == 0 {
                return;
            }
            match self
                .word
                .compare_exchange_weak(w, f(w), Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(seen) => w = seen,
            }
        }
    }
}

impl Mw {
    /// A window of `mw_type` on PD `pd`, its allocation's rkey `rkey`.
    pub(crate) fn new(
        reg: Box<dyn Registration>,
        raw: usize,
        mw_type: MwType,
        pd: u32,
        rkey: u32,
    ) -> Mw {
        Mw {
            raw,
            mw_type,
            pd,
            state: MwState::new(reg, rkey),
        }
    }

    /// The window's rkey: what a peer names it by (`ibv_mw.rkey`). Upper
    /// 24 bits the window's index, low 8 its variant, which each bind
    /// changes (plus one, wrapping: `ibv_inc_rkey`). The one the last bind
    /// posted gives, from its post on; back to the one before it if that
    /// bind completes in error or is flushed (see the type's docs).
    pub fn rkey(&self) -> Rkey {
        Rkey(self.state.rkey())
    }

    /// Whether a bind of the window is outstanding: posted, its WQE not
    /// yet retired by a poll of its QP's CQ (its completion, or a later
    /// signaled WR's on that QP). Another bind meanwhile is refused
    /// ([`MwRefusal::BindOutstanding`]).
    pub fn bind_outstanding(&self) -> bool {
        self.state.outstanding()
    }

    /// Its type (`ibv_mw.type`).
    pub fn mw_type(&self) -> MwType {
        self.mw_type
    }

    /// The PD id it was allocated on.
    pub(crate) fn pd(&self) -> u32 {
        self.pd
    }

    /// Claims the window for a bind ([`MwState::claim`]; [`Mw::rkey`] is
    /// the claim's new one from now on) and records the MRs it may map:
    /// `mr` for a bind with a range, the one it maps now for a zero-length
    /// bind (the device may still be running a WR through it); the one it
    /// maps now kept too, for a rollback. (What it maps now: that of the
    /// bind before, or of the one before that if the bind before rolled
    /// back.) Before anything is written: [`Self::unclaim_bind`] gives it
    /// back if the bind is not posted.
    ///
    /// Errors: [`MwRefusal::BindOutstanding`], changing nothing.
    pub(crate) fn claim_bind(&self, mr: Option<&Mr>) -> Result<Claim, MwRefusal> {
        let mut b = self.state.bound.lock().unwrap_or_else(|e| e.into_inner());
        let claim = self.state.claim()?;
        let mapped = if claim.rolled_back {
            b.before.take()
        } else {
            b.last.take()
        };
        b.last = mr.cloned().or_else(|| mapped.clone());
        b.before = mapped;
        Ok(claim)
    }

    /// Gives back a claim ([`Self::claim_bind`]) whose bind was not
    /// posted: the rkey before it, no bind outstanding, the MR it mapped
    /// before.
    pub(crate) fn unclaim_bind(&self) {
        let mut b = self.state.bound.lock().unwrap_or_else(|e| e.into_inner());
        b.last = b.before.take();
        self.state.unclaim();
    }
}

/// Windows are equal when they are the same window (the same handle).
impl PartialEq for Mw {
    fn eq(&self, other: &Mw) -> bool {
        std::ptr::eq(self, other)
    }
}
impl Eq for Mw {}

impl std::fmt::Debug for Mw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mw")
            .field("rkey", &format_args!("{:#x}", self.rkey().0))
            .field("mw_type", &self.mw_type)
            .finish()
    }
}

/// The rkey a bind gives a window whose rkey is `rkey`: the same index,
/// the variant byte plus one, wrapping (`ibv_inc_rkey`, `verbs.h`).
pub(crate) fn next_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

/// The variant byte of `rkey` minus one, wrapping: undoes [`next_rkey`].
pub(crate) fn prev_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_sub(1) & 0xff)
}

/// What a bind maps: `len` bytes of `mr` from byte `offset` (the window's
/// address is the MR's address plus `offset`: not zero-based, as verbs'
/// `ibv_mw_bind_info.addr`), with `access` (REMOTE_READ, REMOTE_WRITE,
/// REMOTE_ATOMIC, LOCAL_WRITE; `ibv_mw_bind_info.mw_access_flags`).
///
/// Checked at post, before anything is written
/// ([`Error::MwRefused`](crate::Error::MwRefused)): `len` 1 to 2^31
/// bytes inside the MR, the MR registered with
/// [`Access::MW_BIND`](crate::Access::MW_BIND) on the window's PD, no
/// flag outside those four, REMOTE_WRITE or REMOTE_ATOMIC only over an MR
/// with LOCAL_WRITE.
#[derive(Clone, Copy, Debug)]
pub struct MwBind<'a> {
    /// The MR the window maps part of.
    pub mr: &'a Mr,
    /// Byte offset of the window's first byte in the MR.
    pub offset: usize,
    /// The window's length in bytes, 1 to 2^31.
    pub len: usize,
    /// What the window allows a peer.
    pub access: Access,
}

/// Binds are equal when they name the same MR (the same registration),
/// range and access.
impl PartialEq for MwBind<'_> {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.mr.inner, &other.mr.inner)
            && self.offset == other.offset
            && self.len == other.len
            && self.access == other.access
    }
}
impl Eq for MwBind<'_> {}

impl<'a> MwBind<'a> {
    /// `len` bytes of `mr` from `offset`, with `access`.
    pub fn new(mr: &'a Mr, offset: usize, len: usize, access: Access) -> Self {
        MwBind {
            mr,
            offset,
            len,
            access,
        }
    }

    /// The window's first address (the MR's address plus `offset`,
    /// wrapping: meaningless for a range the bind refuses,
    /// [`MwRefusal::Range`]).
    pub fn addr(&self) -> u64 {
        self.mr.addr().wrapping_add(self.offset as u64)
    }
}

/// Checks a bind of a window on PD `pd` against its MR, writing nothing.
pub(crate) fn check_bind(pd: u32, b: &MwBind<'_>) -> Result<(), MwRefusal> {
    let mr = b.mr;
    if mr.pd() != pd {
        return Err(MwRefusal::OtherPd);
    }
    if !mr.access().contains(Access::MW_BIND) {
        return Err(MwRefusal::NoMwBind);
    }
    let fits = b.len >= 1
        && b.len <= 1 << 31
        && b.offset
            .checked_add(b.len)
            .is_some_and(|end| end <= mr.len());
    if !fits {
        return Err(MwRefusal::Range {
            offset: b.offset,
            len: b.len,
            mr_len: mr.len(),
        });
    }
    let writes = b
        .access
        .intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC);
    if !Access::QP_ALL.contains(b.access) || (writes && !mr.access().contains(Access::LOCAL_WRITE))
    {
        return Err(MwRefusal::Access { access: b.access });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoReg;
    impl Registration for NoReg {}

    /// A claim moves the rkey and marks the bind outstanding; a second is
    /// refused, changing nothing; a settle clears the mark (success: the
    /// rkey stays; failure: it rolls back, remembered for the next claim);
    /// an unclaim gives the rkey back.
    #[test]
    fn claim_settle_and_unclaim_move_the_rkey_and_the_mark() {
        let s = MwState::new(Box::new(NoReg), 0x1234_56ff);
        let c = s.claim().unwrap();
        assert_eq!(
            (c.old, c.new_rkey(), c.rolled_back),
            (0x1234_56ff, 0x1234_5600, false)
        );
        assert_eq!((s.rkey(), s.outstanding()), (0x1234_5600, true));
        assert_eq!(
            s.claim(),
            Err(MwRefusal::BindOutstanding { rkey: 0x1234_5600 })
        );
        assert_eq!(s.rkey(), 0x1234_5600);
        s.settle(false);
        assert_eq!((s.rkey(), s.outstanding()), (0x1234_56ff, false));
        let c = s.claim().unwrap();
        assert!(c.rolled_back);
        s.unclaim();
        assert_eq!((s.rkey(), s.outstanding()), (0x1234_56ff, false));
        s.claim().unwrap();
        s.settle(true);
        assert_eq!((s.rkey(), s.outstanding()), (0x1234_5600, false));
        assert!(!s.claim().unwrap().rolled_back);
    }

    /// Two threads claiming one window: exactly one claim at a time.
    #[test]
    fn racing_claims_take_turns() {
        let s = MwState::new(Box::new(NoReg), 0x100);
        let won = std::sync::atomic::AtomicU32::new(0);
        std::thread::scope(|t| {
            for _ in 0..2 {
                t.spawn(|| {
                    for _ in 0..10_000 {
                        if s.claim().is_ok() {
                            won.fetch_add(1, Ordering::Relaxed);
                            s.settle(true);
                        }
                    }
                });
            }
        });
        let n = won.load(Ordering::Relaxed);
        assert_eq!(s.rkey(), 0x100 | (n & 0xff));
        assert!(!s.outstanding());
    }

    #[test]
    fn next_rkey_changes_only_the_variant_byte() {
        assert_eq!(next_rkey(0x1234_5600), 0x1234_5601);
        assert_eq!(next_rkey(0x1234_56ff), 0x1234_5600);
        assert_eq!(next_rkey(0xffff_ffff), 0xffff_ff00);
    }
}
