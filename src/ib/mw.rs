//! Memory windows (IB spec 10.6.7): [`Mw`] (its docs have the two types
//! side by side), [`MwBind`], and the bind checks.

pub use super::error::MwRefusal;
use super::keys::Rkey;
use super::mem::Access;
use super::mr::{Mr, Registration};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

pub use mlx5_dv::wqe::MwType;

/// A memory window allocated on a PD ([`Pd::alloc_mw`](crate::Pd::alloc_mw),
/// `ibv_alloc_mw`); deallocated (`ibv_dealloc_mw`, which unbinds it) when
/// dropped.
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
/// a handle to its MR in the window until the window is bound again or
/// dropped (dropping a window deallocates it, `ibv_dealloc_mw`, which
/// unbinds it first); so the MR's memory is never deregistered, nor freed,
/// under a bound window (rxe refuses such a deregistration, the sim too).
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
/// effect once the device runs it: WRs after it on the same QP see it).
///
/// # Binds are posted in order, one window at a time
///
/// A bind names the window by the rkey the device holds now and gives it
/// the next one, so the binds of one window must reach the device in
/// the order they were posted:
/// - **One QP at a time.** Binding the same window on two QPs (or from two
///   threads) without waiting for the first bind's completion may run
///   them in the other order: the second is then refused (`MW_BIND_ERR`)
///   and its QP goes to ERR. Wait for a bind's completion before binding
///   the window on another QP.
/// - **A bind that fails leaves the window behind.** The rkey moves when
///   the bind is posted; a bind that completes in error (refused,
///   `MW_BIND_ERR`, or flushed, `WR_FLUSH_ERR`) changed nothing on the
///   device, so [`rkey`](Self::rkey) is then one ahead of it and every
///   later bind of the window is refused. Drop the window and allocate
///   another. (libibverbs moves `ibv_mw.rkey` at post too, `mlx5_bind_mw`.)
/// - **Dropping a window with a bind outstanding** deallocates it under
///   that bind: the bind completes with `MW_BIND_ERR` and its QP goes to
///   ERR. Drop a window once its binds have completed.
/// - **Drop a type-2 window before the QP it is bound to** (or invalidate
///   it first). rxe 6.1 holds a reference to that QP while the window is
///   bound, and destroying the QP then waits for it (`__rxe_cleanup`,
///   `rxe_pool.c`: a kernel warning after a timeout, about 50 s in the
///   guests here).
pub struct Mw {
    // Field order: the window is deallocated (`reg` drops) before the MR
    // of its last bind may go.
    // (Held for its drop alone: it deallocates the window.)
    #[allow(dead_code)]
    pub(crate) reg: Box<dyn Registration>,
    /// The backend's handle: a verbs `*mut ibv_mw` as an integer; 0 on the sim.
    #[cfg_attr(not(feature = "verbs"), allow(dead_code))]
    pub(crate) raw: usize,
    pub(crate) mw_type: MwType,
    /// The PD id ([`Mr`]s carry the same): binds only to MRs of this PD.
    pub(crate) pd: u32,
    /// The rkey now: the allocation's, then each posted bind's.
    pub(crate) rkey: AtomicU32,
    /// The MR of the last bind, kept alive while the window may map it.
    /// Locked only by a bind (a control operation), never by post or poll.
    pub(crate) bound: Mutex<Option<Mr>>,
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
            reg,
            raw,
            mw_type,
            pd,
            rkey: AtomicU32::new(rkey),
            bound: Mutex::new(None),
        }
    }

    /// The window's rkey: what a peer names it by (`ibv_mw.rkey`). Upper
    /// 24 bits the window's index, low 8 its variant, which each bind
    /// changes (plus one, wrapping: `ibv_inc_rkey`).
    pub fn rkey(&self) -> Rkey {
        Rkey(self.rkey.load(Ordering::Acquire))
    }

    /// Its type (`ibv_mw.type`).
    pub fn mw_type(&self) -> MwType {
        self.mw_type
    }

    /// The PD id it was allocated on.
    pub(crate) fn pd(&self) -> u32 {
        self.pd
    }

    /// Records a posted bind: the rkey `rkey` it gives and, for a bind
    /// with a range, the MR it maps (kept alive; the previous one let go).
    /// A zero-length bind keeps the MR of the last bind: the device may
    /// still be running a WR through it.
    pub(crate) fn record_bind(&self, rkey: u32, mr: Option<&Mr>) {
        self.rkey.store(rkey, Ordering::Release);
        if let Some(mr) = mr {
            let mut b = self.bound.lock().unwrap_or_else(|e| e.into_inner());
            *b = Some(mr.clone());
        }
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
    use super::next_rkey;

    #[test]
    fn next_rkey_changes_only_the_variant_byte() {
        assert_eq!(next_rkey(0x1234_5600), 0x1234_5601);
        assert_eq!(next_rkey(0x1234_56ff), 0x1234_5600);
        assert_eq!(next_rkey(0xffff_ffff), 0xffff_ff00);
    }
}
