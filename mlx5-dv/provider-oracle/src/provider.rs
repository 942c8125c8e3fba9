//! Work requests in the harness's form: `po_send_wr` / `po_recv_wr` lists
//! with the SGE arrays and address vectors they point into, kept alive as
//! long as the list (one conversion, for every test that posts to the
//! provider).

use crate::ffi::*;
use crate::wr::{Sge, Wr};

/// `sges` as `po_sge`s.
pub fn po_sges(sges: &[Sge]) -> Vec<po_sge> {
    sges.iter()
        .map(|s| po_sge {
            addr: s.addr,
            length: s.len,
            lkey: s.lkey,
        })
        .collect()
}

/// The harness's form of `w`, pointing at `sges` (its SGEs) and `av` (its
/// UD address vector), which the caller keeps alive.
pub fn send_wr(w: &Wr, sges: &[po_sge], av: Option<&[u8; 48]>) -> po_send_wr {
    let (raddr, rkey) = w.op.remote().unwrap_or((0, 0));
    let (compare_add, swap) = w.op.atomic_args();
    po_send_wr {
        wr_id: w.wr_id,
        sg_list: sges.as_ptr(),
        av: av.map_or(core::ptr::null(), |a| a.as_ptr()),
        remote_addr: raddr,
        compare_add,
        swap,
        opcode: w.op.ibv(),
        send_flags: w.ibv_flags(),
        imm: w.op.imm(),
        num_sge: sges.len() as u32,
        rkey,
        remote_qpn: w.ud.map_or(0, |u| u.remote_qpn),
        remote_qkey: w.ud.map_or(0, |u| u.qkey),
        pad: 0,
    }
}

/// Send WRs in the harness's form, with what they point into.
pub struct ProviderWrs {
    pub list: Vec<po_send_wr>,
    _sges: Vec<Vec<po_sge>>,
    _avs: Vec<Option<[u8; 48]>>,
}

impl ProviderWrs {
    pub fn of(wrs: &[Wr]) -> ProviderWrs {
        let sges: Vec<Vec<po_sge>> = wrs.iter().map(|w| po_sges(&w.sges)).collect();
        let avs: Vec<Option<[u8; 48]>> = wrs.iter().map(|w| w.ud.map(|u| u.av)).collect();
        // (The heap buffers the list points into do not move with the Vecs.)
        let list = wrs
            .iter()
            .zip(&sges)
            .zip(&avs)
            .map(|((w, s), av)| send_wr(w, s, av.as_ref()))
            .collect();
        ProviderWrs {
            list,
            _sges: sges,
            _avs: avs,
        }
    }
}

/// Receive WRs (`(wr_id, SGEs)`) in the harness's form, with their SGEs.
pub struct ProviderRecvs {
    pub list: Vec<po_recv_wr>,
    _sges: Vec<Vec<po_sge>>,
}

impl ProviderRecvs {
    pub fn of(wrs: &[(u64, Vec<Sge>)]) -> ProviderRecvs {
        let sges: Vec<Vec<po_sge>> = wrs.iter().map(|(_, s)| po_sges(s)).collect();
        let list = wrs
            .iter()
            .zip(&sges)
            .map(|((id, _), s)| po_recv_wr {
                wr_id: *id,
                sg_list: s.as_ptr(),
                num_sge: s.len() as u32,
                pad: 0,
            })
            .collect();
        ProviderRecvs { list, _sges: sges }
    }
}
