//! Memory windows in the sim: windows allocated on a PD (their keys from
//! the MR key space: an rkey's upper 24 bits name an MR or a window, its
//! low byte is the window's variant), the UMR WQEs that bind and
//! invalidate them ([`crate::wqe::UmrWqe`]), a peer's SEND with
//! invalidate that frees one, and the responder's check of an access
//! through one.
//!
//! The sim's rules (IB spec 10.6.7, 9.4.1.1; where a ConnectX status is not
//! public, the sim's choice, as rxe 6.1 does, unverified on hardware):
//! - A bind (a UMR with a KLM) needs: its ctrl immediate naming the window
//!   by index and current variant byte; the window on the QP's PD and of
//!   the type the WQE says (the mkey mask's QPN bit: type 2); a type-2
//!   window free (`CHECK_FREE`), bound to this QP (`qpn_mkey`); the KLM's
//!   MR of the same PD, registered with `MW_BIND`, holding the range; a
//!   window with REMOTE_WRITE or REMOTE_ATOMIC only over an MR with
//!   LOCAL_WRITE. Else it completes with MW_BIND_ERR (0x06) and the
//!   window is unchanged. A type-1 window may be rebound while bound.
//! - A zero-length UMR of type 1 unbinds a type-1 window (MW_BIND_ERR
//!   otherwise); `LOCAL_INV` (type 2, `CHECK_QPN`) frees a type-2 window
//!   bound to this QP whose rkey it names exactly, else it completes with
//!   LOCAL_QP_OP_ERR (0x02: rxe's status for invalidating a type-1
//!   window). A bind sets the window's variant byte (`qpn_mkey` byte 3);
//!   an invalidation leaves it.
//! - UMRs run on RC and UC QPs only (LOCAL_QP_OP_ERR elsewhere).
//! - A peer's SEND with invalidate (`MLX5_OPCODE_SEND_INVAL`, the rkey in
//!   its ctrl immediate; RC, UC and DC, not UD: rdma-core
//!   `MLX5_SUPPORTED_SEND_OPS_FLAGS_*`) is a SEND to the responder: it
//!   waits for a receive (RNR), the receive's lkeys and room are checked
//!   as a SEND's (those errors first, as rxe's `execute` copies before it
//!   invalidates); then the rkey must name, exactly (variant byte
//!   included), a type-2 window of the responder QP's PD bound to that QP
//!   (IB spec 10.6.7.2, o10-37.2.26 for type 1; rxe 6.1 `invalidate_rkey`,
//!   `rxe_invalidate_mw`). It then becomes free (later accesses through
//!   it are REM_ACCESS_ERR; a bind takes it again), the payload is
//!   delivered, and the receive's CQE is RESP_SEND_INV with the rkey in
//!   `imm_inval_pkey` (bytes 36..40; libmlx5 `handle_responder`:
//!   `IBV_WC_WITH_INV`, `invalidated_rkey`). Refused (an unknown key, an
//!   MR's rkey: the sim's MRs are not fast-registered ones, which alone a
//!   peer may invalidate, rxe's `rxe_invalidate_mr`; a type-1 window; a
//!   stale variant; another PD's window; a window bound to another QP; a
//!   free window): nothing is delivered, the window is unchanged, the
//!   requester's WQE completes with REMOTE_INVAL_REQ_ERR (0x12); on RC the
//!   receive completes with RESP_ERR, syndrome REMOTE_INVAL_REQ_ERR, and
//!   the responder goes to ERR, its other receives flushed (rxe's class J:
//!   `RESPST_ERR_INVALIDATE_RKEY`, `IB_WC_REM_INV_REQ_ERR`; ConnectX's
//!   responder syndrome is not public: the sim's choice). On UC the
//!   responder drops the message (its receive and state untouched) and
//!   the requester succeeds, as for UC's other responder errors. rxe is
//!   looser: it checks neither the window's QP nor its PD and frees a
//!   free type-2 window again. A DCT cannot own a type-2 window (binds run
//!   on RC and UC QPs), so a DCI's SEND_INVAL is always refused (the DCT
//!   stays in RTR, as for its other errors).
//! - A remote access through a window (an rkey naming no MR): the window
//!   bound, the variant byte equal, on the responder QP's PD, a type-2
//!   window bound to that QP, its access covering the operation, the
//!   range inside the window's own range (rxe 6.1 checks the MR's range
//!   instead: `check_rkey`). Else REM_ACCESS_ERR, as for an MR.

use super::ops::Exec;
use super::{Device, SimError, State};
use crate::prm::{Syndrome, WQEBB};
use crate::ring::RingBuf;
use crate::verbs::{Access, QpType};
use crate::wqe::{decode_umr_wqe, MwType};

/// A window's binding.
#[derive(Clone, Copy, Debug)]
pub(super) struct Bound {
    /// The MR's lkey.
    mr: u32,
    addr: u64,
    len: u64,
    access: Access,
    /// Type 2: the QP it is bound to.
    qpn: Option<u32>,
}

/// One memory window.
pub(super) struct MwEntry {
    pd: u32,
    mw_type: MwType,
    /// The rkey's low byte now.
    key: u8,
    bound: Option<Bound>,
}

impl Device {
    /// Allocates a memory window of `mw_type` on PD `pd` (`ibv_alloc_mw`):
    /// unbound, its rkey's variant byte 0. Returns the rkey.
    ///
    /// Errors: [`SimError::Exhausted`] when no key is free.
    pub fn alloc_mw(&self, pd: u32, mw_type: MwType) -> Result<u32, SimError> {
        let mut st = self.lock();
        let key = st.alloc_key()?;
        st.mws.insert(
            key,
            MwEntry {
                pd,
                mw_type,
                key: 0,
                bound: None,
            },
        );
        Ok(key)
    }

    /// Frees the window `rkey` names (any variant; `ibv_dealloc_mw`): a
    /// bound window is unbound first, so no later access gets through.
    ///
    /// Errors: [`SimError::NoSuchMw`].
    pub fn dealloc_mw(&self, rkey: u32) -> Result<(), SimError> {
        self.lock()
            .mws
            .remove(&(rkey & !0xff))
            .map(|_| ())
            .ok_or(SimError::NoSuchMw(rkey))
    }

    /// The window's rkey now and whether it is bound (`None`: no such
    /// window).
    pub fn mw_state(&self, rkey: u32) -> Option<(u32, bool)> {
        let st = self.lock();
        let idx = rkey & !0xff;
        st.mws
            .get(&idx)
            .map(|w| (idx | w.key as u32, w.bound.is_some()))
    }
}

/// Windows bound to the MR `lkey`.
pub(super) fn windows_on(st: &State, lkey: u32) -> usize {
    st.mws
        .values()
        .filter(|w| w.bound.is_some_and(|b| b.mr == lkey))
        .count()
}

/// Executes the UMR WQE `wqe` (its linear copy, at least its DS long) of
/// `qpn`.
pub(super) fn umr(st: &mut State, qpn: u32, wqe: &mut [u8]) -> Exec {
    let n = (wqe.len() / WQEBB) as u32;
    let Some(d) = RingBuf::from_slice(wqe).and_then(|r| decode_umr_wqe(&r, n, 0)) else {
        return Exec::Err(Syndrome::LOCAL_QP_OP_ERR);
    };
    let q = &st.qps[&qpn];
    if !matches!(q.qp_type, QpType::Rc | QpType::Uc) || q.dc.is_some() {
        return Exec::Err(Syndrome::LOCAL_QP_OP_ERR);
    }
    let pd = q.pd;
    let w = d.wqe;
    let bind_err = Exec::Err(Syndrome::MW_BIND_ERR);
    let Some(mw) = st.mws.get(&(w.imm_rkey & !0xff)) else {
        return match w.bind {
            Some(_) => bind_err,
            None if w.mw_type == MwType::One => bind_err,
            None => Exec::Err(Syndrome::LOCAL_QP_OP_ERR),
        };
    };
    let named = mw.key == w.imm_rkey as u8 && mw.pd == pd;
    match (w.bind, w.mw_type) {
        (Some(b), t) => {
            let type_ok = mw.mw_type == t
                && match t {
                    MwType::One => true,
                    MwType::Two => mw.bound.is_none() && d.bound_qpn == qpn,
                };
            let mr_ok = st.mrs.get(&b.lkey).is_some_and(|mr| {
                let access = b.access;
                mr.pd == pd
                    && mr.access.contains(Access::MW_BIND)
                    && b.addr >= mr.addr
                    && b.addr
                        .checked_add(b.len)
                        .is_some_and(|e| e <= mr.addr + mr.len)
                    && (!(access.remote_write || access.remote_atomic)
                        || mr.access.contains(Access::LOCAL_WRITE))
            });
            if !(named && type_ok && mr_ok) {
                return bind_err;
            }
            let mut access = Access::empty();
            access.set(Access::LOCAL_WRITE, b.access.local_write);
            access.set(Access::REMOTE_READ, b.access.remote_read);
            access.set(Access::REMOTE_WRITE, b.access.remote_write);
            access.set(Access::REMOTE_ATOMIC, b.access.remote_atomic);
            let mw = st.mws.get_mut(&(w.imm_rkey & !0xff)).expect("looked up");
            mw.bound = Some(Bound {
                mr: b.lkey,
                addr: b.addr,
                len: b.len,
                access,
                qpn: (t == MwType::Two).then_some(qpn),
            });
            mw.key = w.new_key;
        }
        (None, MwType::One) => {
            if !(named && mw.mw_type == MwType::One) {
                return bind_err;
            }
            let mw = st.mws.get_mut(&(w.imm_rkey & !0xff)).expect("looked up");
            mw.bound = None;
            mw.key = w.new_key;
        }
        (None, MwType::Two) => {
            let ok =
                named && mw.mw_type == MwType::Two && mw.bound.is_some_and(|b| b.qpn == Some(qpn));
            if !ok {
                return Exec::Err(Syndrome::LOCAL_QP_OP_ERR);
            }
            st.mws
                .get_mut(&(w.imm_rkey & !0xff))
                .expect("looked up")
                .bound = None;
        }
    }
    Exec::Ok { byte_cnt: 0 }
}

/// A peer's SEND with invalidate at the responder QP `responder`, on PD
/// `pd` (the module's rules): frees the window `rkey` names if it is a
/// type-2 window of `pd` bound to `responder` and `rkey` is its current
/// key, and returns true; else returns false and changes nothing.
pub(super) fn remote_invalidate(st: &mut State, rkey: u32, responder: u32, pd: u32) -> bool {
    let Some(w) = st.mws.get_mut(&(rkey & !0xff)) else {
        return false;
    };
    let ok = w.key == rkey as u8
        && w.pd == pd
        && w.mw_type == MwType::Two
        && w.bound.is_some_and(|b| b.qpn == Some(responder));
    if ok {
        w.bound = None;
    }
    ok
}

/// The lkey of the MR the window of `rkey` is bound to, if it is bound
/// (for the ODP residency of an access through it: `odp.rs`).
pub(super) fn window_mr(st: &State, rkey: u32) -> Option<u32> {
    st.mws.get(&(rkey & !0xff))?.bound.map(|b| b.mr)
}

/// Whether `rkey` names a window through which the responder QP
/// `responder` (on PD `pd`) may do `need` on `[addr, addr + len)`.
pub(super) fn window_allows(
    st: &State,
    rkey: u32,
    responder: u32,
    pd: u32,
    addr: u64,
    len: u64,
    need: Access,
) -> bool {
    st.mws.get(&(rkey & !0xff)).is_some_and(|w| {
        w.key == rkey as u8
            && w.pd == pd
            && w.bound.is_some_and(|b| {
                b.qpn.is_none_or(|q| q == responder)
                    && b.access.contains(need)
                    && addr >= b.addr
                    && addr.checked_add(len).is_some_and(|e| e <= b.addr + b.len)
            })
    })
}
