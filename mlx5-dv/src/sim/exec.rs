//! Executing an SQ: the WQEs between the device's consumer index and the SQ
//! doorbell record, one at a time (malformed ones, RNR retries, ERR flushes),
//! with the requester's CQEs; each WQE decoded and handed to its opcode.

use super::dc::{find_dct, DcRole};
use super::ops::{atomic, rdma_read, rdma_write, rdma_write_imm, send, Exec, MAX_WQE};
use super::recv::flush_recv;
use super::{QpState, QpType, State, RNR_DELAY};
use crate::cqe::Cqe;
use crate::doorbell::QP_DBREC_SQ;
use crate::mmio;
use crate::prm::{CqeOpcode, CtrlFlags, Syndrome, WqeOpcode, DS, WQEBB};
use crate::ring::RingBuf;
use crate::wqe::{decode_dc_datagram_seg, decode_dc_send_wqe, decode_send_wqe, decode_ud_send_wqe};

/// One pass over every QP; returns how many WQEs ran.
pub(super) fn run_all(st: &mut State) -> usize {
    let mut n = 0;
    for i in 0..st.qp_order.len() {
        let qpn = st.qp_order[i];
        n += run_qp(st, qpn);
    }
    // Compressed sessions held end with the pass (sim/session.rs).
    super::session::write_held(st);
    n
}

/// The SQ's doorbell-record counter (16 bits): WQEs rung so far.
fn sq_doorbell(st: &State, qpn: u32) -> u32 {
    let q = &st.qps[&qpn];
    // SAFETY: the dbrec DmaBuf is 64 bytes, 4096-aligned; word 1 is the SQ's.
    let pi = unsafe { mmio::read_dbrec((q.dbrec.ptr() as *const u32).add(QP_DBREC_SQ)) };
    pi & 0xffff
}

/// QP `qpn` moved to SQD: its drain ends at the WQEs rung so far; with
/// `notify`, `AsyncEvent::SqDrained` is raised when they are done.
pub(super) fn start_drain(st: &mut State, qpn: u32, notify: bool) {
    let db_pi = sq_doorbell(st, qpn);
    st.qps.get_mut(&qpn).expect("a live QP").sqd = Some((db_pi, notify));
    drained(st, qpn);
}

/// Whether QP `qpn`, in SQD, has run every WQE its drain takes (raising
/// `SqDrained` the first time, if asked for).
fn drained(st: &mut State, qpn: u32) -> bool {
    let q = st.qps.get_mut(&qpn).expect("a live QP");
    let Some((end, notify)) = q.sqd else {
        return false;
    };
    if q.sq_ci & 0xffff != end {
        return false;
    }
    if notify {
        q.sqd = Some((end, false));
        super::srq::raise(st, super::AsyncEvent::SqDrained { qpn });
    }
    true
}

/// Executes the pending WQEs of one QP (in SQD, those its drain takes).
/// Returns how many ran.
fn run_qp(st: &mut State, qpn: u32) -> usize {
    let mut done = 0;
    if st.qps[&qpn].state == QpState::Err {
        done += flush_recv(st, qpn);
    }
    loop {
        let db_pi = sq_doorbell(st, qpn);
        // Looked at first: a drain that ends with the last WQE rung raises
        // its event here.
        let drain_done = st.qps[&qpn].state == QpState::Sqd && drained(st, qpn);
        let q = &st.qps[&qpn];
        if drain_done
            || db_pi == q.sq_ci & 0xffff
            || matches!(q.state, QpState::Reset | QpState::Init | QpState::Rtr)
        {
            return done;
        }
        let q = &st.qps[&qpn];
        if st.cqs[&q.send_cqn].overrun {
            // The CQ is in error: the device stops this QP.
            return done;
        }
        if let Some(t) = q.rnr_wait_until {
            if std::time::Instant::now() < t {
                return done;
            }
        }
        let slot = (q.sq_ci & (q.sq_wqe_cnt - 1)) as usize * WQEBB;
        let ctrl = crate::wqe::decode_ctrl_seg(&q.sq.read_array(slot));
        let (opcode, wqe_idx, flags, ctrl_qpn) = (ctrl.opcode, ctrl.wqe_idx, ctrl.flags, ctrl.qpn);
        let ds = ctrl.ds as usize;
        let wqebbs = (ds.max(1) * DS).div_ceil(WQEBB) as u32;
        // The device names a WQE by its own counter, whatever the ctrl segment says.
        let own_idx = q.sq_ci as u16;
        let state = q.state;
        let send_cqn = q.send_cqn;
        let mut result = if state == QpState::Err {
            Exec::Err(Syndrome::WR_FLUSH_ERR)
        } else if ds == 0 || wqe_idx != (q.sq_ci & 0xffff) as u16 || ctrl_qpn != qpn {
            // A WQE the device cannot even parse: a local QP operation
            // error, and the QP's catastrophic error as an async event
            // (`IBV_EVENT_QP_FATAL`).
            super::srq::raise(st, super::AsyncEvent::QpFatal { qpn });
            Exec::Err(Syndrome::LOCAL_QP_OP_ERR)
        } else {
            execute(st, qpn, slot, ds)
        };
        let q = st.qps.get_mut(&qpn).expect("qp");
        if q.qp_type == QpType::Uc {
            // No ACK, no NAK: what the responder could not take is dropped,
            // and the requester succeeds (its own local errors aside).
            result = match result {
                Exec::Rnr
                | Exec::Err(
                    Syndrome::REMOTE_ACCESS_ERR
                    | Syndrome::REMOTE_INVAL_REQ_ERR
                    | Syndrome::REMOTE_OP_ERR
                    | Syndrome::TRANSPORT_RETRY_EXC_ERR,
                ) if state != QpState::Err => Exec::Ok { byte_cnt: 0 },
                r => r,
            };
        }
        if matches!(result, Exec::Rnr) {
            if q.rnr_retry == 7 || q.rnr_left > 0 {
                // RNR NAK: try this WQE again after the responder's timer.
                if q.rnr_retry != 7 {
                    q.rnr_left -= 1;
                }
                let wait = q
                    .peer
                    .and_then(|p| st.qps.get(&p))
                    .map_or(RNR_DELAY, |p| p.min_rnr_delay);
                let q = st.qps.get_mut(&qpn).expect("qp");
                q.rnr_wait_until = Some(std::time::Instant::now() + wait);
                return done;
            }
            result = Exec::Err(Syndrome::RNR_RETRY_EXC_ERR);
        }
        q.rnr_left = q.rnr_retry;
        q.rnr_wait_until = None;
        q.sq_ci = q.sq_ci.wrapping_add(wqebbs);
        let cqe = match result {
            Exec::Ok { byte_cnt } if flags.contains(CtrlFlags::CQ_UPDATE) => Some(Cqe {
                opcode: CqeOpcode::REQ,
                wqe_opcode: opcode,
                qpn,
                wqe_counter: own_idx,
                byte_cnt,
                imm: 0,
                solicited: false,
                format: 0,
                syndrome: Syndrome(0),
                vendor_syndrome: 0,
                flags_rqpn: 0,
                owner: false,
            }),
            Exec::Ok { .. } | Exec::Rnr => None,
            Exec::Err(syn) => {
                q.state = QpState::Err;
                Some(Cqe {
                    opcode: CqeOpcode::REQ_ERR,
                    wqe_opcode: opcode,
                    qpn,
                    wqe_counter: own_idx,
                    byte_cnt: 0,
                    imm: 0,
                    solicited: false,
                    format: 0,
                    syndrome: syn,
                    vendor_syndrome: 0,
                    flags_rqpn: 0,
                    owner: false,
                })
            }
        };
        if let Some(c) = cqe {
            let uidx = st.qps[&qpn].uidx;
            super::scatter::push_req_cqe(st, qpn, send_cqn, &c, uidx);
        }
        done += 1;
    }
}

/// Executes one WQE of `qpn` whose ctrl segment is at SQ offset `slot`.
fn execute(st: &mut State, qpn: u32, slot: usize, ds: usize) -> Exec {
    // The linear copy is as small as the WQE allows: zeroing 1 KiB per WQE
    // costs more than executing a small one.
    match ds * DS {
        0..=128 => execute_in::<128>(st, qpn, slot, ds),
        129..=256 => execute_in::<256>(st, qpn, slot, ds),
        _ => execute_in::<MAX_WQE>(st, qpn, slot, ds),
    }
}

/// [`execute`] with a linear copy of `N` bytes (a power of two, at least 64
/// and at least `ds * 16`).
fn execute_in<const N: usize>(st: &mut State, qpn: u32, slot: usize, ds: usize) -> Exec {
    // DMA-read the WQE (it may wrap the SQ) into a linear copy, then decode it
    // with the same decoder the tools use. Every offset the decoder returns is
    // below `ds * 16 <= N`, so the payload is contiguous in the copy.
    let mut wqe = [0u8; N];
    let q = &st.qps[&qpn];
    let n = (ds * DS).min(N).min(q.sq_wqe_cnt as usize * WQEBB);
    q.sq.read_wrapping(slot, &mut wqe[..n]);
    if wqe[3] == crate::wqe::UMR.0 {
        // A memory-window bind or invalidation (`mw.rs`).
        return super::mw::umr(st, qpn, &mut wqe[..]);
    }
    let ud = q.qp_type == QpType::Ud;
    let dci = q.dc == Some(DcRole::Dci);
    let (decoded, av) = {
        let ring = RingBuf::from_slice(&mut wqe).expect("a power of two of at least 64 bytes");
        let d = if dci {
            decode_dc_send_wqe(&ring, (N / WQEBB) as u32, 0)
        } else if ud {
            decode_ud_send_wqe(&ring, (N / WQEBB) as u32, 0)
        } else {
            decode_send_wqe(&ring, (N / WQEBB) as u32, 0)
        };
        let av = d.ok().and_then(|w| w.av(&ring));
        (d, av)
    };
    let Ok(w) = decoded else {
        return Exec::Err(Syndrome::LOCAL_QP_OP_ERR);
    };
    let b = &wqe[..];
    if dci {
        // DC: the datagram segment names the DCT; the operation then runs
        // as RC's with that DCT as the DCI's peer (kept after the WQE: the
        // DCI's current connection, whose RNR timer a retry waits).
        let Some(av) = av else {
            return Exec::Err(Syndrome::LOCAL_QP_OP_ERR);
        };
        match find_dct(st, decode_dc_datagram_seg(&av)) {
            Ok(dct) => st.qps.get_mut(&qpn).expect("qp").peer = Some(dct),
            Err(syn) => return Exec::Err(syn),
        }
    } else if let Some(av) = av {
        return super::ud::ud_send(st, qpn, &w, b, &av);
    }
    let connected_only = matches!(
        w.opcode,
        WqeOpcode::RDMA_READ
            | WqeOpcode::ATOMIC_CS
            | WqeOpcode::ATOMIC_FA
            | WqeOpcode::ATOMIC_MASKED_CS
            | WqeOpcode::ATOMIC_MASKED_FA
    );
    if connected_only && st.qps[&qpn].qp_type != QpType::Rc {
        // UC has no READ or atomics (IB spec 9.8.3, table 38).
        return Exec::Err(Syndrome::LOCAL_QP_OP_ERR);
    }
    match w.opcode {
        WqeOpcode::RDMA_WRITE => rdma_write(st, qpn, &w, b),
        WqeOpcode::RDMA_WRITE_IMM => rdma_write_imm(st, qpn, &w, b),
        WqeOpcode::SEND | WqeOpcode::SEND_IMM | WqeOpcode::SEND_INVAL => send(st, qpn, &w, b),
        WqeOpcode::RDMA_READ => rdma_read(st, qpn, &w, b),
        WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA => atomic(st, qpn, &w, b),
        WqeOpcode::ATOMIC_MASKED_CS | WqeOpcode::ATOMIC_MASKED_FA => {
            super::masked::masked_atomic(st, qpn, &w, b)
        }
        _ => Exec::Err(Syndrome::LOCAL_QP_OP_ERR),
    }
}
