//! UD on the sim: a SEND addressed by its WQE's datagram segment (the
//! remote QPN and qkey) to any UD QP of the device.
//!
//! What the sim models (IB spec 9.8.4; rxe `rxe_resp.c`):
//! - A WR's qkey with bit 31 set stands for the sending QP's own qkey
//!   (IB spec C10-15: a controlled qkey).
//! - No RNR and no retry: a datagram to no QP, to a QP not in RTR or RTS,
//!   with the wrong qkey, longer than [`UD_MTU`], or finding no receive
//!   posted, is dropped; the requester completes it successfully.
//! - A receive begins with the 40-byte GRH slot (zeros here: the sim has
//!   no wire), then the payload; `byte_len` counts both, and the CQE's
//!   `flags_rqpn` carries the sender's QPN and the GRH flag.
//! - A receive too small for GRH and payload completes with a local length
//!   error, and the receiving QP goes to ERR (what the sim does; rxe on
//!   Linux 6.1 completes it with a local QP operation error and goes to
//!   ERR too, later kernels drop the datagram).

use super::ops::{gather, local_ok, scatter, Exec};
use super::recv::{complete_recv, next_recv, resp_cqe_with};
use super::{QpState, QpType, State};
use crate::prm::{CqeOpcode, CtrlFlags, Syndrome, WqeOpcode};
use crate::wqe::{DecodedWqe, DATAGRAM_SEG};

/// The sim port's MTU for UD, in bytes: the largest datagram.
pub const UD_MTU: u32 = 4096;

/// Bytes of the GRH slot at the start of every UD receive.
pub const GRH_BYTES: usize = 40;

/// Executes a UD SEND (or SEND_IMM) of QP `qpn`, whose datagram segment
/// is `av`.
pub(super) fn ud_send(
    st: &mut State,
    qpn: u32,
    w: &DecodedWqe,
    wqe: &[u8],
    av: &[u8; DATAGRAM_SEG],
) -> Exec {
    if !matches!(w.opcode, WqeOpcode::SEND | WqeOpcode::SEND_IMM) {
        return Exec::Err(Syndrome::LOCAL_QP_OP_ERR);
    }
    let dest = crate::wqe::decode_datagram_seg(av);
    // A qkey with bit 31 set asks for the sending QP's own (IB spec C10-15).
    let qkey = if dest.qkey & 0x8000_0000 != 0 {
        st.qps[&qpn].qkey
    } else {
        dest.qkey
    };
    let dqpn = dest.remote_qpn;
    let mut data = std::mem::take(&mut st.scratch);
    data.clear();
    data.resize(GRH_BYTES, 0);
    let mut payload = Vec::new();
    let r = gather(st, qpn, w, wqe, &mut payload);
    data.extend_from_slice(&payload);
    let out = match r {
        Err(s) => Exec::Err(s),
        Ok(()) => deliver(st, qpn, dqpn, qkey, w, &data),
    };
    st.scratch = data;
    out
}

/// The responder side of a UD datagram (`data`: the GRH slot, then the
/// payload) from `src` to `dqpn` carrying `qkey`.
fn deliver(st: &mut State, src: u32, dqpn: u32, qkey: u32, w: &DecodedWqe, data: &[u8]) -> Exec {
    let ok = Exec::Ok { byte_cnt: 0 };
    if data.len() - GRH_BYTES > UD_MTU as usize {
        return ok;
    }
    let Some(dest) = st.qps.get(&dqpn) else {
        return ok;
    };
    if dest.qp_type != QpType::Ud
        || !matches!(dest.state, QpState::Rtr | QpState::Rts | QpState::Sqd)
        || dest.qkey != qkey
    {
        return ok;
    }
    let Some((idx, segs, n)) = next_recv(st, dqpn) else {
        return ok;
    };
    let pd = match st.qps[&dqpn].srq.and_then(|s| st.srqs.get(&s)) {
        Some(srq) => srq.pd,
        None => st.qps[&dqpn].pd,
    };
    let room: u64 = segs[..n].iter().map(|s| s.len as u64).sum();
    let prot = segs[..n]
        .iter()
        .any(|s| s.len != 0 && !local_ok(st, pd, *s, true))
        // ODP: faulted in transparently (`odp.rs`); an implicit MR's
        // unmapped page is a protection error.
        || (room >= data.len() as u64
            && !super::odp::fault_in_scatter(st, &segs[..n], data.len()));
    if prot || room < data.len() as u64 {
        let syn = if prot {
            Syndrome::LOCAL_PROT_ERR
        } else {
            Syndrome::LOCAL_LENGTH_ERR
        };
        complete_recv(
            st,
            dqpn,
            idx,
            resp_cqe_with(CqeOpcode::RESP_ERR, 0, 0, syn, 0),
        );
        st.qps.get_mut(&dqpn).expect("dest").state = QpState::Err;
        return ok;
    }
    scatter(st, &segs[..n], data);
    let (opcode, imm) = if w.opcode == WqeOpcode::SEND_IMM {
        (CqeOpcode::RESP_SEND_IMM, w.imm)
    } else {
        (CqeOpcode::RESP_SEND, 0)
    };
    let mut c = resp_cqe_with(
        opcode,
        data.len() as u32,
        imm,
        Syndrome(0),
        // GRH present (type 1), the sender's QPN.
        1 << 28 | src,
    );
    c.solicited = w.flags.contains(CtrlFlags::SOLICITED);
    complete_recv(st, dqpn, idx, c);
    ok
}
