//! The responder's receive queue: the next posted receive WQE, its
//! completion, and the flush of a QP in ERR.

use super::cq::push_cqe_to;
use super::srq::{consume_srq_wqe, next_srq_wqe};
use super::State;
use crate::cqe::Cqe;
use crate::doorbell::QP_DBREC_RQ;
use crate::mmio;
use crate::prm::{CqeOpcode, Syndrome, WqeOpcode};
use crate::wqe::{decode_recv_wqe, DataSeg, RecvLayout};

/// Most data segments in one receive WQE (a 1 KiB stride).
const MAX_RECV_SGE: usize = 64;

/// Receive WQE `rq_ci` of `qpn`, if the RQ doorbell record shows one posted:
/// its index and data segments (up to the stride, ended by MLX5_INVALID_LKEY;
/// the codec's `decode_recv_wqe`). On a QP of an SRQ, the SRQ's next WQE
/// (`srq::next_srq_wqe`).
pub(super) fn next_recv(st: &State, qpn: u32) -> Option<(u16, [DataSeg; MAX_RECV_SGE], usize)> {
    let q = &st.qps[&qpn];
    if let Some(srqn) = q.srq {
        return next_srq_wqe::<MAX_RECV_SGE>(st, srqn);
    }
    // SAFETY: the dbrec DmaBuf is 64 bytes, 4096-aligned; word 0 is the RQ's.
    let head = unsafe { mmio::read_dbrec((q.dbrec.ptr() as *const u32).add(QP_DBREC_RQ)) } & 0xffff;
    if head == q.rq_ci & 0xffff {
        return None;
    }
    let slot = (q.rq_ci & (q.rq_wqe_cnt - 1)) as usize * q.rq_stride as usize;
    let mut w =
        decode_recv_wqe::<MAX_RECV_SGE>(RecvLayout::Rq, q.rq_stride, |o| q.rq.read_array(slot + o));
    super::dmabuf::translate_segs(st, &mut w.segs[..w.n]);
    Some((q.rq_ci as u16, w.segs, w.n))
}

/// Completes receive WQE `idx` of `qpn` on its CQ and moves past it (on
/// an SRQ: to the WQE its next segment names). The CQE is version 1: it
/// carries the QP's user index. With the swap hook on, the first of each
/// pair waits for the second.
pub(super) fn complete_recv(st: &mut State, qpn: u32, idx: u16, c: Cqe) {
    let q = st.qps.get_mut(&qpn).expect("qp");
    let srq = q.srq;
    if srq.is_none() {
        q.rq_ci = q.rq_ci.wrapping_add(1);
    }
    let c = Cqe {
        qpn,
        wqe_counter: idx,
        ..c
    };
    let (cqn, uidx) = (q.send_cqn, q.uidx);
    let first = if q.swap_recv {
        match q.held_recv.take() {
            None => {
                q.held_recv = Some(c);
                None
            }
            held => held,
        }
    } else {
        None
    };
    if let Some(srqn) = srq {
        consume_srq_wqe(st, srqn);
    }
    if first.is_none() && st.qps[&qpn].held_recv.is_some() {
        return;
    }
    push_cqe_to(st, cqn, &c, uidx);
    if let Some(f) = first {
        push_cqe_to(st, cqn, &f, uidx);
    }
}

/// Writes the receive CQE the swap hook holds, if any.
pub(super) fn release_held(st: &mut State, qpn: u32) {
    let Some(q) = st.qps.get_mut(&qpn) else {
        return;
    };
    if let Some(c) = q.held_recv.take() {
        let (cqn, uidx) = (q.send_cqn, q.uidx);
        push_cqe_to(st, cqn, &c, uidx);
    }
}

pub(super) fn resp_cqe(opcode: CqeOpcode, byte_cnt: u32, imm: u32, syndrome: Syndrome) -> Cqe {
    resp_cqe_with(opcode, byte_cnt, imm, syndrome, 0)
}

/// [`resp_cqe`] with `flags_rqpn` (UD: GRH flag and source QPN).
pub(super) fn resp_cqe_with(
    opcode: CqeOpcode,
    byte_cnt: u32,
    imm: u32,
    syndrome: Syndrome,
    flags_rqpn: u32,
) -> Cqe {
    Cqe {
        opcode,
        wqe_opcode: WqeOpcode(0),
        qpn: 0,
        wqe_counter: 0,
        byte_cnt,
        imm,
        solicited: false,
        format: 0,
        syndrome,
        vendor_syndrome: 0,
        flags_rqpn,
        owner: false,
    }
}

/// Flushes every posted receive WQE of a QP in ERR (RESP_ERR,
/// WR_FLUSH_ERR). A QP on an SRQ flushes none: the SRQ's WQEs stay for
/// its other QPs (IB spec 10.2.9.5).
pub(super) fn flush_recv(st: &mut State, qpn: u32) -> usize {
    release_held(st, qpn);
    if st.qps[&qpn].srq.is_some() {
        return 0;
    }
    let mut n = 0;
    while !st.cqs[&st.qps[&qpn].send_cqn].overrun {
        let Some((idx, _, _)) = next_recv(st, qpn) else {
            break;
        };
        complete_recv(
            st,
            qpn,
            idx,
            resp_cqe(CqeOpcode::RESP_ERR, 0, 0, Syndrome::WR_FLUSH_ERR),
        );
        n += 1;
    }
    n
}
