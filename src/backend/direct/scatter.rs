//! Scatter to CQE ([`InlineRecv`]) on the direct path: the QP's and CQ's
//! creation on the sim, and the poll's copy-out, which moves the data a
//! CQE carries (`op_own` format 1, `MLX5_INLINE_SCATTER_32`, or 2,
//! `MLX5_INLINE_SCATTER_64`) to the buffers of the WR it completes before
//! the CQE is retired, as libmlx5's `handle_responder` and
//! `mlx5_parse_cqe` do (`mlx5-dv`'s `driver::scatter` walks the WQE).
//!
//! The poll's fast paths send every CQE with format bits set to the
//! general path (`poll_rest`, `take_shared`), which decodes each CQE
//! through [`decode`] or [`decode_shared`]: for a CQE without data, one
//! test of the `op_own` byte already loaded. A copy that cannot be made
//! turns the CQE into an error CQE of the same WR, so the completion
//! carries the status (nothing was written to the WR's buffers then):
//! - the WR's SGEs hold fewer bytes than the CQE carries, or the CQE's
//!   count does not fit its slot: `LOC_LEN_ERR` (libmlx5's `copy_to_scat`);
//! - a requester CQE naming a WQE that is not a READ, ATOMIC_CS or
//!   ATOMIC_FA: `REM_INV_REQ_ERR` (libmlx5's `mlx5_copy_to_send_wqe`);
//! - a counter naming no outstanding WQE: the CQE is left as it is, and
//!   retiring it reports [`Error::StaleCqe`](crate::Error::StaleCqe).
//!
//! On a split QP the counter is checked against the retiring copy's
//! window (as its wr_id lookup is), not the posting halves' exact indices.

use super::{DirectCq, DirectQp};
use crate::ib::config::InlineRecv;
use crate::ib::error::Result;
use mlx5_dv::cqe::{Cqe, CqeRef, INLINE_SCATTER_32};
use mlx5_dv::driver::{ReceiveQueue, Retirer, ScatterError};
use mlx5_dv::prm::{CqeOpcode, Syndrome};
use mlx5_dv::sim;

/// The QP's own CQ on the sim, of at least `depth` CQEs: 128-byte CQEs for
/// [`InlineRecv::Up64`], 64-byte otherwise (`DirectCq::create_sim`'s).
pub(super) fn create_sim_cq(dev: &sim::Device, depth: u32, mode: InlineRecv) -> Result<DirectCq> {
    if mode != InlineRecv::Up64 {
        return DirectCq::create_sim(dev, depth);
    }
    let sim_cq = dev.create_cq_ex(depth.next_power_of_two().max(2), 128, true)?;
    DirectCq::over_sim(sim_cq, None)
}

/// Turns scatter to CQE on for a new sim QP (in RESET) when `mode` asks
/// for it: responder and requester, which the sim takes on RC, responder
/// only on UC, neither on UD (as the kernel sets `cs_res` / `cs_req`).
pub(super) fn set_sim_qp(qp: &sim::Qp, mode: InlineRecv) -> Result<()> {
    if mode.is_on() {
        qp.set_scatter_to_cqe(true, true)?;
    }
    Ok(())
}

/// The CQE `raw` of a QP whose queues are `sq` and `rq`, decoded, with
/// the data it carries (if any) copied to its WR's buffers first: what
/// `poll_rest` retires. A CQE without data costs one test of `op_own`.
#[inline(always)]
pub(super) fn decode(raw: CqeRef<'_>, sq: &Retirer<'_>, rq: &ReceiveQueue) -> Cqe {
    let cqe = raw.decode();
    if !raw.has_inline_data() {
        return cqe;
    }
    copy_out(raw, cqe, sq, rq)
}

/// [`decode`] on a CQ several QPs share, for the CQE `raw` (decoded:
/// `cqe`) of QP `q`: on a split QP inside its retiring copy's windows.
#[inline(always)]
pub(super) fn decode_shared(raw: CqeRef<'_>, cqe: Cqe, q: &mut DirectQp) -> Cqe {
    if !raw.has_inline_data() {
        return cqe;
    }
    copy_out_shared(raw, cqe, q)
}

#[cold]
#[inline(never)]
fn copy_out_shared(raw: CqeRef<'_>, cqe: Cqe, q: &mut DirectQp) -> Cqe {
    if !q.is_split() {
        return copy_out(raw, cqe, &q.sq.retirer(), &q.rq);
    }
    q.sq.open_window();
    q.rq.open_window();
    let cqe = copy_out(raw, cqe, &q.sq.retirer(), &q.rq);
    q.sq.close_window();
    q.rq.close_window();
    cqe
}

/// Copies the data of `raw` (decoded: `cqe`) to the WR it names; the CQE
/// to retire: `cqe` (its `flags_rqpn` cleared when the data lay over it),
/// or an error CQE of the same WR when the copy could not be made.
#[cold]
#[inline(never)]
fn copy_out(raw: CqeRef<'_>, mut cqe: Cqe, sq: &Retirer<'_>, rq: &ReceiveQueue) -> Cqe {
    if cqe.opcode.is_error() {
        // Error CQEs carry no data.
        return cqe;
    }
    let requester = cqe.opcode == CqeOpcode::REQ;
    let r = match raw.inline_data() {
        None => Err(ScatterError::Length {
            need: cqe.byte_cnt,
            room: 0,
        }),
        // SAFETY: the copy writes only through data segments of a WQE the
        // queue holds as outstanding (checked by `scatter_from_cqe` against
        // its indices, before anything is written): its WR was posted with
        // SGEs the post range-checked against live `Mr`s / `LocalMr`s of this
        // process (virtual addresses, on the sim and on ConnectX alike), which
        // the PD keeps registered and allocated until the WR is retired
        // (its deregistration waits for `WrProgress`), and this CQE is not
        // retired yet. `data` lies in the CQ ring, not in those buffers.
        Some(data) if requester => unsafe { sq.scatter_from_cqe(cqe.wqe_counter, data) },
        // SAFETY: as above, for the receive WQE (of the RQ, or of the SRQ,
        // whose WQE the device holds until this CQE completes it).
        Some(data) => unsafe { rq.scatter_from_cqe(cqe.wqe_counter, data) },
    };
    let syndrome = match r {
        Ok(()) => {
            if raw.op_own() & INLINE_SCATTER_32 != 0 {
                // Bytes 0..32 were data, `flags_rqpn` (24..28) among them.
                cqe.flags_rqpn = 0;
            }
            return cqe;
        }
        Err(ScatterError::Stale) => return cqe,
        Err(ScatterError::Length { .. }) => Syndrome::LOCAL_LENGTH_ERR,
        Err(ScatterError::Opcode(_)) => Syndrome::REMOTE_INVAL_REQ_ERR,
    };
    Cqe {
        opcode: if requester {
            CqeOpcode::REQ_ERR
        } else {
            CqeOpcode::RESP_ERR
        },
        syndrome,
        vendor_syndrome: 0,
        imm: 0,
        flags_rqpn: 0,
        ..cqe
    }
}

impl DirectQp {
    /// Test hook: CQEs the sim wrote for this QP with data in them (0 on
    /// ConnectX, which does not say).
    #[cfg(feature = "test-hooks")]
    pub(crate) fn scatter_cqes(&self) -> u64 {
        match &*self.dev {
            super::DirectDev::Sim(q) => q.scatter_cqes(),
            #[cfg(feature = "verbs")]
            super::DirectDev::Mlx5(_) => 0,
        }
    }
}
