//! On-demand paging on the sim: its caps as the crate reports them, the
//! implicit ODP MR (`sim::Device::reg_implicit_odp`) and prefetch
//! (`sim::Device::advise_mr`); the direct poll's handling of an SRQ
//! WQE's ODP page-fault CQE ([`odp_fault`]). An ordinary registration with
//! `Access::ON_DEMAND` needs nothing here: `reg_sim_mr` passes the flag,
//! and the sim's MR starts with no page resident.

use super::mr::SimReg;
use super::DirectQp;
use crate::ib::device::{OdpCaps, OdpOps};
use crate::ib::error::Result;
use crate::ib::mem::{Access, Buffer, OdpAdvice};
use crate::ib::mr::MrInner;
use mlx5_dv::cqe::Cqe;
use mlx5_dv::driver::ReceiveQueue;
use mlx5_dv::prm::CqeOpcode;
use mlx5_dv::sim;

/// The sim's ODP caps (`sim::Device::odp_caps`) as [`OdpCaps`].
pub(crate) fn sim_odp_caps(dev: &sim::Device) -> OdpCaps {
    let c = dev.odp_caps();
    OdpCaps {
        supported: c.supported(),
        implicit: c.implicit(),
        rc: OdpOps::from_bits_truncate(c.rc_odp_caps),
        uc: OdpOps::from_bits_truncate(c.uc_odp_caps),
        ud: OdpOps::from_bits_truncate(c.ud_odp_caps),
    }
}

/// Registers the whole address space in sim PD `pdn` as one ODP MR
/// (access checked by the caller, ON_DEMAND in it). The `MrInner`'s buffer
/// is [`Buffer::implicit`]: no CPU mapping, nothing to free.
///
/// Errors: the sim's ([`Error::Sim`](crate::Error::Sim)).
pub(crate) fn reg_sim_implicit_odp(dev: &sim::Device, pdn: u32, access: Access) -> Result<MrInner> {
    // SAFETY: `Pd::reg_implicit_odp`'s contract, passed on: the device
    // reaches host memory through this MR only where a WR's SGE (made
    // under `Sge::of_implicit_odp`'s contract) or a peer (under the rkey's)
    // names it.
    let k = unsafe { dev.reg_implicit_odp(pdn, access) }?;
    Ok(MrInner {
        reg: Box::new(SimReg {
            dev: dev.clone(),
            lkey: k.lkey,
        }),
        live: None,
        pd: 0,
        buf: Buffer::implicit(),
        lkey: k.lkey,
        rkey: k.rkey,
        access,
    })
}

/// Prefetch on the sim: each `(lkey, addr, len)` (checked by the caller:
/// this PD's, no plain bytes) made resident; the sim checks every entry
/// before it touches any.
///
/// Errors: the sim's ([`Error::Sim`](crate::Error::Sim)): an lkey of no ODP
/// MR of PD `pdn`, a range outside its MR.
pub(crate) fn sim_advise(
    dev: &sim::Device,
    pdn: u32,
    advice: OdpAdvice,
    list: &[(u32, u64, u32)],
) -> Result<()> {
    let advice = match advice {
        OdpAdvice::Prefetch => sim::OdpAdvice::Prefetch,
        OdpAdvice::PrefetchWrite => sim::OdpAdvice::PrefetchWrite,
        OdpAdvice::PrefetchNoFault => sim::OdpAdvice::PrefetchNoFault,
    };
    dev.advise_mr(pdn, advice, list)?;
    Ok(())
}

/// Whether `cqe` is an SRQ WQE's ODP page fault (`Cqe::is_odp_fault`:
/// RESP_ERR, syndrome 0x22, vendor syndrome 0x93) on a QP on an SRQ,
/// which it then hands back to the SRQ to be posted again, and which no
/// completion reports (libmlx5 `cq.c` `is_odp_pfault_err`, `srq.c`
/// `mlx5_complete_odp_fault`). Its WQE stays outstanding on the SRQ, whose
/// CQ credits were reserved once (`SrqShared::link`): no credit moves.
/// Only the error path asks (a CQE the fast paths did not take).
#[inline]
pub(super) fn odp_fault(rq: &ReceiveQueue, cqe: &Cqe) -> bool {
    cqe.opcode == CqeOpcode::RESP_ERR
        && rq.is_srq()
        && cqe.is_odp_fault()
        && rq.fault_on_srq(cqe.wqe_counter)
}

impl DirectQp {
    /// A shared CQ's CQE in error (`cqe`, of this QP): a requester's moved
    /// the QP to ERR (noted); an SRQ WQE's ODP page fault is handed back to
    /// the SRQ (`odp_fault`): `true`, nothing to retire or report.
    #[cold]
    #[inline(never)]
    pub(super) fn failed_or_faulted(&mut self, cqe: &Cqe) -> bool {
        if cqe.opcode == CqeOpcode::REQ_ERR {
            self.note_send_failed();
            return false;
        }
        odp_fault(&self.rq, cqe)
    }
}
