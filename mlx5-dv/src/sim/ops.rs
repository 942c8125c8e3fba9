//! The opcodes: SEND / SEND_IMM / SEND_INVAL delivered into the peer's
//! receive WQEs (SEND_INVAL's window invalidated first: `mw.rs`),
//! RDMA WRITE (and WRITE_IMM), RDMA READ and the atomics, with the local
//! (lkey) and responder (rkey, QP access) checks before any DMA.

use super::dma;
use super::recv::{complete_recv, next_recv, resp_cqe};
use super::{Access, QpState, QpType, State};
use crate::cqe::Cqe;
use crate::prm::{CqeOpcode, CtrlFlags, Syndrome, WqeOpcode, DS, WQEBB};
use crate::wqe::{DataSeg, DecodedPayload, DecodedWqe};

/// Outcome of executing one WQE.
pub(super) enum Exec {
    Ok {
        byte_cnt: u32,
    },
    Err(Syndrome),
    /// Receiver not ready: leave the WQE in the SQ and try again later.
    Rnr,
}

/// The responder side of SEND / SEND_IMM / SEND_INVAL / RDMA_WRITE_IMM:
/// consumes the peer's next receive WQE. `data` is scattered into it
/// (SENDs); for RDMA_WRITE_IMM `data` is empty and `byte_cnt` is the
/// written length. `Rnr` when the peer has no receive WQE posted (the
/// requester retries per its `rnr_retry`). `solicited`: the request's ctrl
/// segment asked for a solicited event; the responder's CQE carries it
/// (CQE `se` bit). `inval` (SEND_INVAL): the rkey whose window the
/// responder frees (`mw::remote_invalidate`) after the receive's checks
/// and before any data moves; refused, nothing is delivered and the
/// requester gets REMOTE_INVAL_REQ_ERR (RC: the receive completes with
/// that syndrome and the responder goes to ERR; UC: dropped).
fn deliver(
    st: &mut State,
    qpn: u32,
    data: Option<&[u8]>,
    byte_cnt: u32,
    imm: Option<u32>,
    inval: Option<u32>,
    solicited: bool,
) -> Exec {
    let Some(peer) = st.qps[&qpn].peer.filter(|p| {
        st.qps
            .get(p)
            .is_some_and(|p| matches!(p.state, QpState::Rtr | QpState::Rts | QpState::Sqd))
    }) else {
        return Exec::Err(Syndrome::TRANSPORT_RETRY_EXC_ERR);
    };
    // A receive WQE's lkeys belong to its queue's PD: the SRQ's, on one.
    let pd = match st.qps[&peer].srq.and_then(|n| st.srqs.get(&n)) {
        Some(srq) => srq.pd,
        None => st.qps[&peer].pd,
    };
    let reliable = st.qps[&qpn].qp_type == QpType::Rc;
    // Scatter to CQE (`scatter.rs`): the payload goes into the CQE, not
    // to the receive's buffers (checked all the same).
    let inline = data.filter(|d| super::scatter::responder_scatters(st, peer, d.len()));
    let (idx, segs, n) = loop {
        let Some((idx, segs, n)) = next_recv(st, peer) else {
            return Exec::Rnr;
        };
        // An SRQ WQE whose buffer takes an ODP page fault is consumed
        // with its fault CQE; the message comes again (`odp.rs`).
        let data = data.filter(|_| inline.is_none());
        if !super::odp::srq_refault(st, peer, pd, idx, &segs[..n], data) {
            break (idx, segs, n);
        }
        if !reliable {
            // UC: no retry; the message is dropped (as for an RNR).
            return Exec::Rnr;
        }
    };
    let fail = |st: &mut State, resp: Syndrome, req: Syndrome| {
        if !reliable {
            // UC: the responder drops the message; nothing changes there.
            return Exec::Err(req);
        }
        complete_recv(st, peer, idx, resp_cqe(CqeOpcode::RESP_ERR, 0, 0, resp));
        if !super::dc::is_dct(st, peer) {
            // (A DCT stays in RTR for its other DCIs: `dc.rs`.)
            st.qps.get_mut(&peer).expect("peer").state = QpState::Err;
        }
        Exec::Err(req)
    };
    let (opcode, imm) = match (data.is_some(), imm, inval) {
        // The CQE's `imm_inval_pkey` carries the rkey invalidated (libmlx5
        // `handle_responder`: `wc->invalidated_rkey`).
        (true, _, Some(rkey)) => (CqeOpcode::RESP_SEND_INV, rkey),
        (true, None, None) => (CqeOpcode::RESP_SEND, 0),
        (true, Some(v), None) => (CqeOpcode::RESP_SEND_IMM, v),
        (false, v, _) => (CqeOpcode::RESP_WR_IMM, v.unwrap_or(0)),
    };
    if let Some(data) = data {
        if segs[..n]
            .iter()
            .any(|s| s.len != 0 && !local_ok(st, pd, *s, true))
        {
            // A responder-side protection error: the requester sees a remote operation error.
            return fail(st, Syndrome::LOCAL_PROT_ERR, Syndrome::REMOTE_OP_ERR);
        }
        let room: u64 = segs[..n].iter().map(|s| s.len as u64).sum();
        if room < data.len() as u64 {
            // Too small a receive buffer: local length error at the responder,
            // remote invalid request at the requester.
            return fail(
                st,
                Syndrome::LOCAL_LENGTH_ERR,
                Syndrome::REMOTE_INVAL_REQ_ERR,
            );
        }
        // ODP: the pages the bytes fill, faulted in before any moves (an
        // implicit MR's unmapped page: a protection error, `odp.rs`).
        if inline.is_none() && !super::odp::fault_in_scatter(st, &segs[..n], data.len()) {
            return fail(st, Syndrome::LOCAL_PROT_ERR, Syndrome::REMOTE_OP_ERR);
        }
        if let Some(rkey) = inval {
            // The window of the responder QP's own PD (an SRQ's receive
            // names the SRQ's, `pd` above).
            let qp_pd = st.qps[&peer].pd;
            if !super::mw::remote_invalidate(st, rkey, peer, qp_pd) {
                return fail(
                    st,
                    Syndrome::REMOTE_INVAL_REQ_ERR,
                    Syndrome::REMOTE_INVAL_REQ_ERR,
                );
            }
        }
        if inline.is_none() {
            scatter(st, &segs[..n], data);
        }
    }
    let c = Cqe {
        solicited,
        // A DCT's receive names its requester, the DCI, as UD's does.
        flags_rqpn: if super::dc::is_dct(st, peer) { qpn } else { 0 },
        ..resp_cqe(opcode, byte_cnt, imm, Syndrome(0))
    };
    match inline {
        Some(d) => super::scatter::complete_recv_inline(st, peer, idx, c, d),
        None => complete_recv(st, peer, idx, c),
    }
    Exec::Ok { byte_cnt }
}

/// Scatters `data` over receive segments `segs` (checked against
/// registered MRs of the receive queue's PD, with room for it all), in
/// order, publishing the final byte last (pollers watch it).
pub(super) fn scatter(st: &State, segs: &[DataSeg], data: &[u8]) {
    let mut left = data;
    for s in segs {
        if left.is_empty() {
            break;
        }
        let k = left.len().min(s.len as usize);
        let (now, rest) = left.split_at(k);
        let body = if rest.is_empty() { &now[..k - 1] } else { now };
        // SAFETY: `s` was checked against a registered MR of the receive
        // queue's PD (the caller's); an owned one only this receive touches now.
        unsafe {
            if owned(st, s.lkey) {
                dma::write_owned(s.addr, body);
            } else {
                dma::write_from(s.addr, body);
            }
            if rest.is_empty() {
                dma::store_last_byte(s.addr + k as u64 - 1, now[k - 1]);
            }
        }
        left = rest;
    }
}

/// Copies a WQE's payload (inline bytes or checked local SGEs) into `out`.
pub(super) fn gather(
    st: &State,
    qpn: u32,
    w: &DecodedWqe,
    wqe: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), Syndrome> {
    out.clear();
    match w.payload {
        DecodedPayload::Inline { .. } => out.extend_from_slice(inline_of(w, wqe)),
        DecodedPayload::Sges { count, .. } => {
            for i in 0..count {
                let s = sge_at(w, wqe, i).expect("i < count");
                if !sq_local_ok(st, qpn, s, false) {
                    return Err(Syndrome::LOCAL_PROT_ERR);
                }
                if out.len() as u64 + s.len as u64 > 1 << 31 {
                    return Err(Syndrome::LOCAL_LENGTH_ERR);
                }
                let at = out.len();
                out.resize(at + s.len as usize, 0);
                // SAFETY: `s` was checked against a registered MR of this QP's
                // PD; an owned one only this WR touches now.
                unsafe {
                    if owned(st, s.lkey) {
                        dma::read_owned(s.addr, &mut out[at..])
                    } else {
                        dma::read_into(s.addr, &mut out[at..])
                    }
                };
            }
        }
        DecodedPayload::None => {}
    }
    Ok(())
}

pub(super) fn send(st: &mut State, qpn: u32, w: &DecodedWqe, wqe: &[u8]) -> Exec {
    let mut data = std::mem::take(&mut st.scratch);
    let r = match gather(st, qpn, w, wqe, &mut data) {
        Err(s) => Exec::Err(s),
        Ok(()) => {
            let imm = (w.opcode == WqeOpcode::SEND_IMM).then_some(w.imm);
            let inval = (w.opcode == WqeOpcode::SEND_INVAL).then_some(w.imm);
            let se = w.flags.contains(CtrlFlags::SOLICITED);
            deliver(st, qpn, Some(&data), data.len() as u32, imm, inval, se)
        }
    };
    st.scratch = data;
    r
}

pub(super) fn rdma_write_imm(st: &mut State, qpn: u32, w: &DecodedWqe, wqe: &[u8]) -> Exec {
    // The receive WQE must be there before any data moves (else RNR, retried).
    let Some(peer) = st.qps[&qpn].peer else {
        return Exec::Err(Syndrome::TRANSPORT_RETRY_EXC_ERR);
    };
    if st
        .qps
        .get(&peer)
        .is_some_and(|p| matches!(p.state, QpState::Rtr | QpState::Rts | QpState::Sqd))
        && next_recv(st, peer).is_none()
    {
        return Exec::Rnr;
    }
    match rdma_write(st, qpn, w, wqe) {
        Exec::Ok { byte_cnt } => deliver(
            st,
            qpn,
            None,
            byte_cnt,
            Some(w.imm),
            None,
            w.flags.contains(CtrlFlags::SOLICITED),
        ),
        other => other,
    }
}

/// Largest send WQE: 16 WQEBBs (the kernel's cap; 63 DS fit).
pub(super) const MAX_WQE: usize = 16 * WQEBB;

/// Data segment `i` of a decoded WQE's SGE payload, read from its linear copy.
pub(super) fn sge_at(w: &DecodedWqe, wqe: &[u8], i: u32) -> Option<DataSeg> {
    let DecodedPayload::Sges { first, count } = w.payload else {
        return None;
    };
    if i >= count {
        return None;
    }
    let at = first + i as usize * DS;
    let b: &[u8; 16] = wqe.get(at..at + DS)?.try_into().ok()?;
    Some(crate::wqe::decode_data_seg(b))
}

/// The inline bytes of a decoded WQE, in its linear copy (empty for other payloads).
fn inline_of<'a>(w: &DecodedWqe, wqe: &'a [u8]) -> &'a [u8] {
    match w.payload {
        DecodedPayload::Inline { off, len } => wqe.get(off..off + len as usize).unwrap_or(&[]),
        _ => &[],
    }
}

/// Whether `lkey` names an owned MR ([`super::Device::reg_mr_owned`]),
/// which the sim copies plainly.
fn owned(st: &State, lkey: u32) -> bool {
    st.mrs.get(&lkey).is_some_and(|mr| mr.owned)
}

/// [`local_ok`] for an SGE of a WQE of QP `qpn`'s SQ: a QP whose SQ a test
/// hook rewrote touches no owned MR. The SGE's ODP pages are faulted in
/// (`odp.rs`): an implicit MR's page the process does not map fails it.
pub(super) fn sq_local_ok(st: &State, qpn: u32, s: DataSeg, write: bool) -> bool {
    let q = &st.qps[&qpn];
    local_ok(st, q.pd, s, write)
        && !(q.hooked && owned(st, s.lkey))
        && super::odp::fault_in(st, s.lkey, s.addr, s.len as u64, write)
}

/// Whether `lkey` names an MR of `pd` holding `addr..addr+len` (with LOCAL_WRITE
/// when the device will write there).
pub(super) fn local_ok(st: &State, pd: u32, s: DataSeg, write: bool) -> bool {
    st.mrs.get(&s.lkey).is_some_and(|mr| {
        mr.pd == pd
            && (!write || mr.access.contains(Access::LOCAL_WRITE))
            && s.addr >= mr.addr
            && s.addr
                .checked_add(s.len as u64)
                .is_some_and(|end| end <= mr.addr + mr.len)
    })
}

/// The responder side of an RDMA access to `addr..addr+len` with `rkey`
/// (IB class C: an access violation puts the responder QP in ERR too).
pub(super) fn responder_check(
    st: &mut State,
    qpn: u32,
    rkey: u32,
    addr: u64,
    len: u64,
    need: Access,
) -> Result<(), Syndrome> {
    let peer = st.qps[&qpn].peer.ok_or(Syndrome::TRANSPORT_RETRY_EXC_ERR)?;
    let responder = st
        .qps
        .get(&peer)
        .filter(|p| matches!(p.state, QpState::Rtr | QpState::Rts | QpState::Sqd))
        .ok_or(Syndrome::TRANSPORT_RETRY_EXC_ERR)?;
    let ok = responder.access.contains(need)
        && match st.mrs.get(&rkey) {
            Some(mr) => {
                mr.pd == responder.pd
                    && mr.access.contains(need)
                    && addr >= mr.addr
                    && addr
                        .checked_add(len)
                        .is_some_and(|end| end <= mr.addr + mr.len)
            }
            // An rkey of no MR may name a memory window (`mw.rs`).
            None => super::mw::window_allows(st, rkey, peer, responder.pd, addr, len, need),
        }
        // ODP: the target's pages faulted in before any byte moves; an
        // implicit MR's page the process does not map is refused.
        && {
            let mr = match st.mrs.contains_key(&rkey) {
                true => Some(rkey),
                false => super::mw::window_mr(st, rkey),
            };
            let write = need != Access::REMOTE_READ;
            mr.is_none_or(|mr| super::odp::fault_in(st, mr, addr, len, write))
        };
    if ok {
        return Ok(());
    }
    if st.qps[&qpn].qp_type == QpType::Rc && !super::dc::is_dct(st, peer) {
        // (UC: the responder drops the packet; its state does not change.
        // A DCT stays in RTR for its other DCIs: `dc.rs`.)
        st.qps.get_mut(&peer).expect("peer").state = QpState::Err;
    }
    Err(Syndrome::REMOTE_ACCESS_ERR)
}

pub(super) fn rdma_write(st: &mut State, qpn: u32, w: &DecodedWqe, wqe: &[u8]) -> Exec {
    let remote = w.remote.expect("decoded RDMA WRITE has a remote segment");
    // The payload: inline bytes in the WQE, or checked local SGEs (read from
    // the WQE again when copying, rather than gathered into an array first).
    let inline = inline_of(w, wqe);
    let (count, total) = match w.payload {
        DecodedPayload::Inline { .. } => (0, inline.len() as u64),
        DecodedPayload::Sges { count, .. } => {
            let mut total = 0u64;
            for i in 0..count {
                let s = sge_at(w, wqe, i).expect("i < count");
                if !sq_local_ok(st, qpn, s, false) {
                    return Exec::Err(Syndrome::LOCAL_PROT_ERR);
                }
                total += s.len as u64;
            }
            (count, total)
        }
        DecodedPayload::None => (0, 0),
    };
    if total > 1 << 31 {
        return Exec::Err(Syndrome::LOCAL_LENGTH_ERR);
    }
    // A zero-length RDMA WRITE carries no data: the responder checks no
    // R_Key or address (IB spec C9-88; the kernel's rxe_resp.c check_rkey).
    if total == 0 {
        return Exec::Ok { byte_cnt: 0 };
    }
    if let Err(s) = responder_check(
        st,
        qpn,
        remote.rkey,
        remote.addr,
        total,
        Access::REMOTE_WRITE,
    ) {
        return Exec::Err(s);
    }
    // Copy in order, holding the very last byte back until everything else
    // landed: perftest-style pollers watch the last byte.
    // Every dma call below: both ranges were checked against registered
    // MRs above; registration promises the memory stays valid.
    let last = remote.addr + total - 1;
    if let DecodedPayload::Inline { .. } = w.payload {
        let len = inline.len();
        // SAFETY: `[remote.addr, remote.addr + len)` is the remote range
        // checked above (`total` is the inline length), in a registered MR.
        unsafe {
            dma::write_from(remote.addr, &inline[..len - 1]);
            dma::store_last_byte(last, inline[len - 1]);
        }
    } else {
        let sge = |i: u32| sge_at(w, wqe, i).expect("i < count");
        let last_sge = (0..count)
            .rev()
            .find(|&i| sge(i).len > 0)
            .expect("total > 0");
        let mut dst = remote.addr;
        for i in 0..=last_sge {
            let s = sge(i);
            let body = if i == last_sge {
                s.len as usize - 1
            } else {
                s.len as usize
            };
            // SAFETY: SGE `i` and its place in the remote range were checked
            // above; an owned SGE only this WR touches now.
            unsafe {
                if owned(st, s.lkey) {
                    dma::copy_from_owned(s.addr, dst, body)
                } else {
                    dma::copy(s.addr, dst, body)
                }
            };
            dst += s.len as u64;
        }
        let s = sge(last_sge);
        // SAFETY: the last byte of a checked SGE into the checked remote range.
        unsafe { dma::copy_last_byte(s.addr + s.len as u64 - 1, last) };
    }
    Exec::Ok {
        byte_cnt: total as u32,
    }
}

pub(super) fn rdma_read(st: &mut State, qpn: u32, w: &DecodedWqe, wqe: &[u8]) -> Exec {
    let remote = w.remote.expect("decoded RDMA READ has a remote segment");
    let mut dsts = [DataSeg {
        addr: 0,
        len: 0,
        lkey: 0,
    }; MAX_WQE / DS];
    let (mut n, mut total) = (0usize, 0u64);
    if let DecodedPayload::Sges { count, .. } = w.payload {
        for i in 0..count {
            let s = sge_at(w, wqe, i).expect("i < count");
            if !sq_local_ok(st, qpn, s, true) {
                return Exec::Err(Syndrome::LOCAL_PROT_ERR);
            }
            dsts[n] = s;
            n += 1;
            total += s.len as u64;
        }
    } else if !matches!(w.payload, DecodedPayload::None) {
        return Exec::Err(Syndrome::LOCAL_QP_OP_ERR);
    }
    if total > 1 << 31 {
        return Exec::Err(Syndrome::LOCAL_LENGTH_ERR);
    }
    if total == 0 {
        return Exec::Ok { byte_cnt: 0 };
    }
    if let Err(s) = responder_check(
        st,
        qpn,
        remote.rkey,
        remote.addr,
        total,
        Access::REMOTE_READ,
    ) {
        return Exec::Err(s);
    }
    let signaled = w.flags.contains(CtrlFlags::CQ_UPDATE);
    if super::scatter::requester_scatters(st, qpn, total as usize, signaled) {
        // Scatter to CQE: the response goes into the CQE (`scatter.rs`).
        let mut resp = [0u8; 64];
        // SAFETY: the remote range was checked against a registered MR above.
        unsafe { dma::read_into(remote.addr, &mut resp[..total as usize]) };
        let data = super::scatter::InlineData::new(&resp[..total as usize]);
        st.qps.get_mut(&qpn).expect("qp").req_inline = Some(data);
        return Exec::Ok {
            byte_cnt: total as u32,
        };
    }
    let mut src = remote.addr;
    for d in &dsts[..n] {
        // SAFETY: both ranges were checked against registered MRs above; an
        // owned target only this WR touches now.
        unsafe {
            if owned(st, d.lkey) {
                dma::copy_to_owned(src, d.addr, d.len as usize)
            } else {
                dma::copy(src, d.addr, d.len as usize)
            }
        };
        src += d.len as u64;
    }
    Exec::Ok {
        byte_cnt: total as u32,
    }
}

pub(super) fn atomic(st: &mut State, qpn: u32, w: &DecodedWqe, wqe: &[u8]) -> Exec {
    let (Some(remote), Some(a), Some(old_to)) = (w.remote, w.atomic, sge_at(w, wqe, 0)) else {
        return Exec::Err(Syndrome::LOCAL_QP_OP_ERR);
    };
    if old_to.len < 8 || !sq_local_ok(st, qpn, DataSeg { len: 8, ..old_to }, true) {
        return Exec::Err(Syndrome::LOCAL_PROT_ERR);
    }
    if remote.addr % 8 != 0 {
        // The responder NAKs a misaligned atomic as an invalid request.
        return Exec::Err(Syndrome::REMOTE_INVAL_REQ_ERR);
    }
    if let Err(s) = responder_check(st, qpn, remote.rkey, remote.addr, 8, Access::REMOTE_ATOMIC) {
        return Exec::Err(s);
    }
    // Atomics act on the remote u64 in host byte order (as rxe does); the old
    // value lands in the local buffer in host byte order too.
    // SAFETY: the remote word is 8-byte aligned inside a checked MR; the local
    // 8 bytes were checked above.
    let old = unsafe {
        if w.opcode == WqeOpcode::ATOMIC_CS {
            dma::compare_swap(remote.addr, a.compare, a.swap_add)
        } else {
            dma::fetch_add(remote.addr, a.swap_add)
        }
    };
    let signaled = w.flags.contains(CtrlFlags::CQ_UPDATE);
    if super::scatter::requester_scatters(st, qpn, 8, signaled) {
        // Scatter to CQE: the old value goes into the CQE (`scatter.rs`).
        let data = super::scatter::InlineData::new(&old.to_ne_bytes());
        st.qps.get_mut(&qpn).expect("qp").req_inline = Some(data);
        return Exec::Ok { byte_cnt: 8 };
    }
    // SAFETY: checked above.
    unsafe { dma::write_from(old_to.addr, &old.to_ne_bytes()) };
    Exec::Ok { byte_cnt: 8 }
}
