//! Scatter to CQE, the device's half (the sim's model of ConnectX's
//! "inline receive"): small payloads written into the CQE instead of the
//! WR's buffers.
//!
//! Per QP, off by default ([`Qp::set_scatter_to_cqe`]), as the kernel sets
//! the QP context's `cs_res` / `cs_req` at creation (`hw/mlx5/qp.c`):
//! - **responder** (`cs_res`; RC and UC only, never UD): a received SEND or
//!   SEND_IMM of at most 32 bytes on a CQ of 64-byte CQEs, or at most 64 on
//!   one of 128-byte CQEs, goes into the receive CQE: bytes 0..32 of the
//!   64-byte CQE proper with `op_own` bit 0x4 (`MLX5_INLINE_SCATTER_32`),
//!   or bytes 0..64 of the 128-byte slot, the half before the CQE proper,
//!   with bit 0x8 (`MLX5_INLINE_SCATTER_64`). The receive WQE is consumed
//!   (checked as for any SEND: its lkeys, its room, else the usual
//!   LOC_LEN_ERR / LOC_PROT_ERR), `byte_cnt` is the length, nothing is
//!   DMAed to its buffers. RDMA_WRITE_IMM carries no payload to a receive:
//!   never scattered. Longer payloads are DMAed as always.
//! - **requester** (`cs_req`; RC only; the kernel sets it when the QP is
//!   created with `sq_sig_all` or `MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE`):
//!   an RDMA READ response or an atomic's old value (8 bytes) that fits
//!   goes into the requester's CQE the same way. Only for a WQE that asks
//!   for a CQE (`CQ_UPDATE`): an unsignaled READ or atomic writes no CQE,
//!   so the sim DMAs its data to its buffers as usual (what a device must
//!   do; the kernel ties `cs_req` to `sq_sig_all` so that every WQE is
//!   signaled unless the user allowed it explicitly).
//!
//! Scatter CQEs are written by [`push_cqe_with_data`](super::cq) and never
//! compressed. With the receive-swap test hook on
//! ([`Qp::hook_swap_recv_completions`]) the responder DMAs as without
//! scatter (the held CQE carries no data).

use super::cq::{push_cqe_to, push_cqe_with_data};
use super::srq::consume_srq_wqe;
use super::{Qp, QpState, QpType, SimError, State};
use crate::cqe::Cqe;

/// Data a requester CQE carries (a READ response or an atomic's old
/// value), held between the WQE's execution and its CQE.
#[derive(Clone, Copy, Debug)]
pub(super) struct InlineData {
    bytes: [u8; 64],
    len: u8,
}

impl InlineData {
    /// `data` (at most 64 bytes).
    pub(super) fn new(data: &[u8]) -> Self {
        let mut bytes = [0u8; 64];
        bytes[..data.len()].copy_from_slice(data);
        InlineData {
            bytes,
            len: data.len() as u8,
        }
    }

    /// The bytes.
    pub(super) fn get(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// The most bytes a CQE of CQ `cqn` carries: 32 with 64-byte CQEs, 64
/// with 128-byte CQEs.
fn cq_limit(st: &State, cqn: u32) -> usize {
    if st.cqs[&cqn].cqe_size == 128 {
        64
    } else {
        32
    }
}

/// Whether responder QP `qpn` takes a `len`-byte SEND into its receive CQE.
pub(super) fn responder_scatters(st: &State, qpn: u32, len: usize) -> bool {
    let q = &st.qps[&qpn];
    q.scatter_resp && !q.swap_recv && len > 0 && len <= cq_limit(st, q.send_cqn)
}

/// Whether requester QP `qpn` takes `len` bytes of a READ response or an
/// atomic result into the CQE of a WQE whose ctrl flags ask for one
/// (`signaled`).
pub(super) fn requester_scatters(st: &State, qpn: u32, len: usize, signaled: bool) -> bool {
    let q = &st.qps[&qpn];
    q.scatter_req && signaled && len > 0 && len <= cq_limit(st, q.send_cqn)
}

/// Writes requester CQE `c` of QP `qpn` (user index `uidx`) to CQ `cqn`,
/// with the data its WQE's execution held for it, if any (a READ response
/// or atomic result, scattered to the CQE: then `c` is a REQ CQE).
pub(super) fn push_req_cqe(st: &mut State, qpn: u32, cqn: u32, c: &Cqe, uidx: u32) {
    match st.qps.get_mut(&qpn).and_then(|q| q.req_inline.take()) {
        Some(d) if c.opcode == crate::prm::CqeOpcode::REQ => {
            st.qps.get_mut(&qpn).expect("qp").scatter_cqes += 1;
            push_cqe_with_data(st, cqn, c, uidx, d.get())
        }
        _ => push_cqe_to(st, cqn, c, uidx),
    }
}

/// [`super::recv::complete_recv`] for a receive whose payload `data` goes
/// into its CQE: the WQE is consumed (the RQ's counter moves, or the SRQ's
/// list), and the CQE written with the data.
pub(super) fn complete_recv_inline(st: &mut State, qpn: u32, idx: u16, c: Cqe, data: &[u8]) {
    let q = st.qps.get_mut(&qpn).expect("qp");
    q.scatter_cqes += 1;
    let srq = q.srq;
    if srq.is_none() {
        q.rq_ci = q.rq_ci.wrapping_add(1);
    }
    let (cqn, uidx) = (q.send_cqn, q.uidx);
    if let Some(srqn) = srq {
        consume_srq_wqe(st, srqn);
    }
    let c = Cqe {
        qpn,
        wqe_counter: idx,
        ..c
    };
    push_cqe_with_data(st, cqn, &c, uidx, data);
}

impl Qp {
    /// Scatter to CQE for this QP (see the module docs), as the QP is
    /// created with it (`mlx5dv_create_qp` without
    /// `MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`): `responder` for small
    /// SENDs received (taken on RC and UC, ignored on UD, as the kernel
    /// sets `cs_res`), `requester` for small READ responses and atomic
    /// results of signaled WQEs (taken on RC only: the kernel sets `cs_req`
    /// when the QP has `sq_sig_all` or `MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE`).
    /// Ignored on a DCI or a DCT (the sim models no DCT with
    /// `MLX5_VENDOR_CAP_FLAGS_SCAT2CQE_DCT`). Returns what is in force,
    /// `(responder, requester)`.
    ///
    /// Errors: [`SimError::BadTransition`] outside RESET (a creation
    /// attribute: nothing changes); [`SimError::NoSuchQp`].
    pub fn set_scatter_to_cqe(
        &self,
        responder: bool,
        requester: bool,
    ) -> Result<(bool, bool), SimError> {
        let mut st = self.dev.lock();
        let q = st
            .qps
            .get_mut(&self.qpn)
            .ok_or(SimError::NoSuchQp(self.qpn))?;
        if q.state != QpState::Reset {
            return Err(SimError::BadTransition {
                from: q.state,
                to: q.state,
            });
        }
        // Never on DC: rdma-core (`verbs.c`) clears MLX5_QP_FLAG_SCATTER_CQE
        // for a DCI and for a DCT without MLX5_VENDOR_CAP_FLAGS_SCAT2CQE_DCT
        // (and UCX PR #5052 found 32-byte scatter wrong on DC).
        let dc = q.dc.is_some();
        q.scatter_resp = responder && !dc && matches!(q.qp_type, QpType::Rc | QpType::Uc);
        q.scatter_req = requester && !dc && q.qp_type == QpType::Rc;
        Ok((q.scatter_resp, q.scatter_req))
    }

    /// CQEs the device wrote for this QP with data in them (received
    /// SENDs, READ responses, atomic results), for tests that must know
    /// the data did come in the CQE.
    pub fn scatter_cqes(&self) -> u64 {
        self.dev.lock().qps[&self.qpn].scatter_cqes
    }

    /// The scatter to CQE in force, `(responder, requester)`.
    pub fn scatter_to_cqe(&self) -> (bool, bool) {
        let st = self.dev.lock();
        let q = &st.qps[&self.qpn];
        (q.scatter_resp, q.scatter_req)
    }
}
