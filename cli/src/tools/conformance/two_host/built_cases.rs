//! The two-sided UC, UD and SRQ cases: side A's QPs here ([`Near`]), side
//! B behind a [`FarPeer`] (in this process, or on another host).
//!
//! UC and UD complete a send at the requester once it is sent, not once it
//! landed: a case learns that a datagram arrived from B's receive, and
//! that one was dropped from a later one landing in the receive it would
//! have taken (a QP's messages arrive in order). Where nothing can follow
//! (a drop with no receive posted), the case waits [`SETTLE`] before it
//! posts the receive.

use super::super::{nothing_completes, passed, pattern, poll_one, poll_until};
use super::far::{limit_event, FarPeer, Near};
use super::{CaseResult, Failure};
use rdma_direct::testing::QpHooks;
use rdma_direct::{
    Access, Completion, Error, QpState, RemoteAddr, Rkey, SendWr, Sge, WcOpcode, WcStatus,
};
use std::time::Duration;

const RW: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);
/// How long a datagram with nowhere to land is given to arrive (and be
/// dropped) before side B posts a receive it could otherwise take.
const SETTLE: Duration = Duration::from_secs(1);

/// A UD SEND of 1000 bytes from A into a 1040-byte receive at B: byte_len
/// 1040 (the 40-byte GRH slot first), the payload at offset 40, A's QPN as
/// the source, the immediate carried; sent with the qkey B's exchange
/// message gave.
pub(super) fn th_ud_send_lands_after_the_grh_slot(
    a: &mut Near<'_>,
    b: &mut FarPeer<'_>,
) -> CaseResult {
    let src = a.pd.alloc_mr(1000, Access::LOCAL_WRITE)?;
    src.write(0, &pattern(1000, 11))?;
    let dst = b.alloc_mr(1040, Access::LOCAL_WRITE)?;
    b.post_recv(5, &[(dst, 0, 1040)])?;
    let sge = [Sge::new(&src, 0, 1000)?];
    let qkey = a.far[0].qkey;
    let (q, dest) = a.ud()?;
    q.post_send(&[SendWr::ud_send(1, &sge, dest).imm(0x77).signaled()])?;
    let s = poll_one(q)?;
    check_eq!(
        (s.wr_id, s.status, s.opcode),
        (1, WcStatus::SUCCESS, WcOpcode::SEND),
        "the sender's"
    );
    let r = b.poll(1)?[0];
    check_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len, r.imm),
        (5, WcStatus::SUCCESS, WcOpcode::RECV, 1040, Some(0x77)),
        "the receive"
    );
    check_eq!(r.src_qp.qpn(), q.qp_num(), "the source QPN");
    check!(r.src_qp.grh(), "a UD receive carries the GRH flag");
    check_eq!(
        b.read(&dst, 40, 1000)?,
        pattern(1000, 11),
        "the payload at offset 40"
    );
    passed(vec![format!(
        "UD MTU {} bytes, qkey {qkey:#x} from B's connection facts",
        q.ud_mtu()
    )])
}

/// B answers A's datagram through an AH built from its receive
/// (`ibv_create_ah_from_wc`): the reply lands at A with B's QPN as the
/// source, the payload A sent at offset 40. This is how a server that
/// learned of its client through rdma_cm (`-R`) answers it.
pub(super) fn th_ud_reply_through_an_ah_from_the_receive(
    a: &mut Near<'_>,
    b: &mut FarPeer<'_>,
) -> CaseResult {
    let pd = a.pd;
    let b_qpn = a.far[0].endpoint.qpn;
    let src = pd.alloc_mr(200, Access::LOCAL_WRITE)?;
    src.write(0, &pattern(200, 21))?;
    let back = pd.alloc_mr(240, Access::LOCAL_WRITE)?;
    let dst = b.alloc_mr(240, Access::LOCAL_WRITE)?;
    b.post_recv(1, &[(dst, 0, 240)])?;
    let (q, dest) = a.ud()?;
    q.post_recv(&[rdma_direct::RecvWr::new(2, &[Sge::new(&back, 0, 240)?])])?;
    let out = [Sge::new(&src, 0, 200)?];
    q.post_send(&[SendWr::ud_send(3, &out, dest).signaled()])?;
    let sender = b.echo(&dst, 0)?;
    check_eq!(sender, q.qp_num(), "the QPN B answered");
    let got = poll_until(q, 2)?;
    let recv = got
        .iter()
        .find(|c| c.opcode == WcOpcode::RECV)
        .ok_or_else(|| Failure(format!("no reply at A: {got:?}")))?;
    check_eq!(
        (recv.wr_id, recv.status, recv.byte_len),
        (2, WcStatus::SUCCESS, 240),
        "A's receive of the reply"
    );
    check_eq!(recv.src_qp.qpn(), b_qpn, "the reply's source QPN");
    let mut got = vec![0u8; 200];
    back.read(40, &mut got)?;
    check_eq!(got, pattern(200, 21), "the reply's payload at offset 40");
    passed(vec![])
}

/// Over the MTU: refused at A's post with `MessageTooLong`, nothing
/// written. No receive posted at B, and the wrong qkey: each datagram is
/// lost while A's send succeeds; the receive B posts after them takes the
/// next datagram with the right qkey (48 bytes: 40 + 8).
pub(super) fn th_ud_drops_what_it_cannot_deliver(
    a: &mut Near<'_>,
    b: &mut FarPeer<'_>,
) -> CaseResult {
    let pd = a.pd;
    let (q, dest) = a.ud()?;
    let mtu = q.ud_mtu();
    let src = pd.alloc_mr(mtu as usize + 1, Access::LOCAL_WRITE)?;
    let over = [Sge::new(&src, 0, mtu + 1)?];
    let before = q.sq_snapshot();
    match q.post_send(&[SendWr::ud_send(1, &over, dest).signaled()]) {
        Err(Error::MessageTooLong { len, mtu: m }) => {
            check_eq!((len, m), (mtu as u64 + 1, mtu), "the refusal's figures")
        }
        other => return Err(Failure(format!("a UD SEND of MTU + 1 bytes: {other:?}"))),
    }
    check_eq!(q.sq_snapshot(), before, "the SQ after the refusal");
    nothing_completes(q)?;
    let (s24, s8, s16) = (
        [Sge::new(&src, 0, 24)?],
        [Sge::new(&src, 0, 8)?],
        [Sge::new(&src, 0, 16)?],
    );
    q.post_send(&[SendWr::ud_send(2, &s24, dest).signaled()])?;
    check!(
        poll_one(q)?.status.is_ok(),
        "a datagram with no receive posted"
    );
    std::thread::sleep(SETTLE);
    let dst = b.alloc_mr(mtu as usize + 40, Access::LOCAL_WRITE)?;
    b.post_recv(9, &[(dst, 0, mtu + 40)])?;
    let wrong = rdma_direct::UdDest {
        qkey: dest.qkey ^ 1,
        ..dest
    };
    q.post_send(&[
        SendWr::ud_send(3, &s8, wrong).signaled(),
        SendWr::ud_send(4, &s16, dest).signaled(),
    ])?;
    check!(
        poll_until(q, 2)?.iter().all(|c| c.status.is_ok()),
        "the wrong qkey's and the right one's sends"
    );
    let r = b.poll(1)?[0];
    check_eq!(
        (r.wr_id, r.status, r.byte_len),
        (9, WcStatus::SUCCESS, 56),
        "the receive posted after the drops (40 + 16: neither the 24-byte datagram with no receive nor the 8-byte one with the wrong qkey)"
    );
    check_eq!(b.state(0)?, QpState::Rts, "side B after the drops");
    // At the MTU exactly: delivered.
    b.post_recv(10, &[(dst, 0, mtu + 40)])?;
    let at = [Sge::new(&src, 0, mtu)?];
    q.post_send(&[SendWr::ud_send(5, &at, dest).signaled()])?;
    check!(poll_one(q)?.status.is_ok(), "a datagram of the MTU");
    check_eq!(b.poll(1)?[0].byte_len, mtu + 40, "its receive");
    passed(vec![format!("MTU {mtu}")])
}

/// A UD receive at B too small for A's datagram: a local length error
/// (the sim) or a local QP operation error (rxe on Linux 6.1), with B's QP
/// in ERR; or dropped, B's QP in RTS (newer kernels). A's send succeeds.
pub(super) fn th_ud_receive_too_small(a: &mut Near<'_>, b: &mut FarPeer<'_>) -> CaseResult {
    let src = a.pd.alloc_mr(200, Access::LOCAL_WRITE)?;
    let dst = b.alloc_mr(100, Access::LOCAL_WRITE)?;
    b.post_recv(1, &[(dst, 0, 100)])?;
    let sge = [Sge::new(&src, 0, 200)?];
    let (q, dest) = a.ud()?;
    q.post_send(&[SendWr::ud_send(1, &sge, dest).signaled()])?;
    check!(poll_one(q)?.status.is_ok(), "the sender");
    let wc = b.poll_for(1, SETTLE)?;
    let state = b.state(0)?;
    match (&wc[..], state) {
        ([c], QpState::Err)
            if matches!(c.status, WcStatus::LOC_LEN_ERR | WcStatus::LOC_QP_OP_ERR) =>
        {
            passed(vec![format!("{} and B's QP in ERR", c.status.ident())])
        }
        ([], QpState::Rts) => passed(vec!["dropped; B's QP in RTS".into()]),
        _ => Err(Failure(format!(
            "a receive too small: {wc:?}, B's QP in {state:?}"
        ))),
    }
}

/// A UC WRITE from A lands at B (a SEND_WITH_IMM after it shows it
/// arrived), and READ and the atomics are refused at A's post with nothing
/// written.
pub(super) fn th_uc_write_lands_and_read_is_refused(
    a: &mut Near<'_>,
    b: &mut FarPeer<'_>,
) -> CaseResult {
    let src = a.pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    src.write(0, &pattern(4096, 5))?;
    let dst = b.alloc_mr(4096, RW)?;
    b.post_recv(20, &[(dst, 3072, 64)])?;
    let at = |o: u64| RemoteAddr {
        addr: dst.addr + o,
        rkey: dst.rkey,
    };
    let (big, small) = ([Sge::new(&src, 0, 1000)?], [Sge::new(&src, 0, 64)?]);
    let q = &mut a.qps[0];
    q.post_send(&[
        SendWr::rdma_write(1, &big, at(0)).signaled(),
        SendWr::send(2, &small).imm(0xabcd).signaled(),
    ])?;
    check!(
        poll_until(q, 2)?.iter().all(|c| c.status.is_ok()),
        "the WRITE and the SEND"
    );
    let r = b.poll(1)?[0];
    check_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len, r.imm),
        (20, WcStatus::SUCCESS, WcOpcode::RECV, 64, Some(0xabcd)),
        "the SEND's receive"
    );
    check_eq!(
        b.read(&dst, 0, 1000)?,
        pattern(4096, 5)[..1000].to_vec(),
        "the WRITE's bytes"
    );
    let before = q.sq_snapshot();
    let tgt = [Sge::new(&src, 0, 8)?];
    for w in [
        SendWr::rdma_read(4, &tgt, at(0)).signaled(),
        SendWr::atomic_fetch_add(5, &tgt, at(0), 1).signaled(),
        SendWr::atomic_cmp_swp(6, &tgt, at(0), 0, 1).signaled(),
    ] {
        check!(
            matches!(
                q.post_send(std::slice::from_ref(&w)),
                Err(Error::WrongTransport { .. })
            ),
            "{:?} on a UC QP",
            w.op
        );
    }
    check_eq!(q.sq_snapshot(), before, "the SQ after the refusals");
    nothing_completes(q)?;
    passed(vec![])
}

/// UC drops what B cannot take, with A's sends succeeding: a SEND with no
/// receive posted, a WRITE with a bad rkey (B's memory unchanged). B stays
/// in RTS, and the receive it posts after takes the next SEND.
pub(super) fn th_uc_drops_what_the_responder_cannot_take(
    a: &mut Near<'_>,
    b: &mut FarPeer<'_>,
) -> CaseResult {
    let src = a.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    src.write(0, &[7; 64])?;
    let dst = b.alloc_mr(4096, RW)?;
    let (s32, s64) = ([Sge::new(&src, 0, 32)?], [Sge::new(&src, 0, 64)?]);
    let bad = RemoteAddr {
        addr: dst.addr + 1024,
        rkey: Rkey(dst.rkey.0 ^ 0x100),
    };
    let q = &mut a.qps[0];
    q.post_send(&[
        SendWr::send(1, &s32).signaled(),
        SendWr::rdma_write(2, &s64, bad).signaled(),
    ])?;
    check!(
        poll_until(q, 2)?.iter().all(|c| c.status.is_ok()),
        "a SEND with no receive posted and a WRITE with a bad rkey"
    );
    std::thread::sleep(SETTLE);
    check_eq!(b.state(0)?, QpState::Rts, "side B after the drops");
    b.post_recv(9, &[(dst, 0, 64)])?;
    q.post_send(&[SendWr::send(3, &s64).signaled()])?;
    check!(poll_one(q)?.status.is_ok(), "the next SEND");
    let r = b.poll(1)?[0];
    check_eq!(
        (r.wr_id, r.status, r.byte_len),
        (9, WcStatus::SUCCESS, 64),
        "the receive posted after the drops (64 bytes: not the 32-byte SEND dropped)"
    );
    check_eq!(b.read(&dst, 0, 64)?, vec![7u8; 64], "its bytes");
    check!(
        b.read(&dst, 64, 4096 - 64)?.iter().all(|&x| x == 0),
        "nothing else landed (the bad-rkey WRITE aimed at 1024)"
    );
    passed(vec![])
}

/// A 100-byte SEND from A into an SRQ receive at B of SGEs of 32 and 96
/// bytes lands as bytes 0..31 and 32..99, completing with byte_len 100 on
/// the QP that took it.
pub(super) fn th_srq_scatters_a_send_over_two_sges(
    a: &mut Near<'_>,
    b: &mut FarPeer<'_>,
) -> CaseResult {
    let src = a.pd.alloc_mr(100, Access::LOCAL_WRITE)?;
    src.write(0, &pattern(100, 3))?;
    let dst = b.alloc_mr(256, Access::LOCAL_WRITE)?;
    b.post_recv(77, &[(dst, 0, 32), (dst, 128, 96)])?;
    let q = &mut a.qps[0];
    q.post_send(&[SendWr::send(1, &[Sge::new(&src, 0, 100)?]).signaled()])?;
    check!(poll_one(q)?.status.is_ok(), "the SEND");
    let r = b.poll(1)?[0];
    check_eq!(
        (r.status, r.opcode, r.wr_id, r.byte_len),
        (WcStatus::SUCCESS, WcOpcode::RECV, 77, 100),
        "the receive's completion"
    );
    check_eq!(r.qp_num, a.far[0].endpoint.qpn, "the QP that took it");
    let got = b.read(&dst, 0, 256)?;
    let want = pattern(100, 3);
    check_eq!(&got[..32], &want[..32], "bytes 0..31 in the first SGE");
    check_eq!(&got[128..196], &want[32..], "bytes 32..99 in the second");
    check!(
        got[32..128].iter().chain(&got[196..]).all(|&x| x == 0),
        "nothing outside the SGEs"
    );
    passed(vec![])
}

/// One SRQ at B shared by 4 QPs on one CQ, 10,000 SENDs from A to each:
/// every receive's wr_id comes back exactly once, and each QP takes as
/// many as were sent to it. In rounds: B posts 500 receives, A sends 125
/// on each QP, B's completions are checked.
pub(super) fn th_one_srq_feeds_four_qps(a: &mut Near<'_>, b: &mut FarPeer<'_>) -> CaseResult {
    const EACH: u64 = 10_000;
    const ROUND: u64 = 125;
    const WINDOW: u64 = 32;
    let qps = a.qps.len() as u64;
    let src = a.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let sge = [Sge::new(&src, 0, 64)?];
    let dst = b.alloc_mr(64, Access::LOCAL_WRITE)?;
    let total = qps * EACH;
    let mut seen = vec![false; total as usize];
    let mut per_qp = vec![0u64; qps as usize];
    let mut wc = [Completion::default(); 32];
    for round in 0..EACH / ROUND {
        let first = round * ROUND * qps;
        b.post_recvs(first, ROUND * qps, (dst, 0, 64))?;
        for q in a.qps.iter_mut() {
            let (mut sent, mut done) = (0u64, 0u64);
            while done < ROUND {
                while sent < ROUND && sent - done < WINDOW {
                    q.post_send(&[SendWr::send(sent, &sge).signaled()])?;
                    sent += 1;
                }
                let n = q.poll(&mut wc)?;
                for c in &wc[..n] {
                    check!(c.status.is_ok(), "a SEND: {c:?}");
                }
                done += n as u64;
            }
        }
        for c in b.poll((ROUND * qps) as usize)? {
            check!(
                c.status.is_ok() && c.opcode == WcOpcode::RECV,
                "a receive: {c:?}"
            );
            let k = c.wr_id.wrapping_sub(first);
            check!(k < ROUND * qps, "wr_id {} is not this round's", c.wr_id);
            check!(!seen[c.wr_id as usize], "wr_id {} came back twice", c.wr_id);
            seen[c.wr_id as usize] = true;
            let i = a
                .far
                .iter()
                .position(|f| f.endpoint.qpn == c.qp_num)
                .ok_or_else(|| Failure(format!("a receive of QP {:#x}", c.qp_num)))?;
            per_qp[i] += 1;
        }
    }
    check_eq!(per_qp, vec![EACH; qps as usize], "receives per QP");
    check!(seen.iter().all(|&s| s), "every wr_id came back");
    passed(vec![format!(
        "{total} receives through one SRQ, in rounds of {}",
        ROUND * qps
    )])
}

/// B's SRQ limit armed at 4 with 6 receives posted: the event comes once,
/// when A's third SEND leaves 3; re-armed at 2, it comes again when the
/// fifth leaves 1, and once only.
pub(super) fn th_srq_limit_event_is_raised_once_then_rearmed(
    a: &mut Near<'_>,
    b: &mut FarPeer<'_>,
) -> CaseResult {
    let src = a.pd.alloc_mr(8, Access::LOCAL_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    let dst = b.alloc_mr(64, Access::LOCAL_WRITE)?;
    b.post_recvs(0, 6, (dst, 0, 64))?;
    b.set_limit(4)?;
    let want = limit_event(b.srq_num()?);
    let mut events = Vec::new();
    for k in 0..4u64 {
        let q = &mut a.qps[0];
        q.post_send(&[SendWr::send(k, &sge).signaled()])?;
        check!(poll_one(q)?.status.is_ok(), "SEND {k}");
        b.poll(1)?;
        // Left posted: 5, 4, 3 (fewer than 4: the event), 2.
        let wait = if k == 2 {
            Duration::from_secs(20)
        } else {
            Duration::from_millis(200)
        };
        if let Some(e) = b.event(wait)? {
            events.push((k, e));
        }
    }
    check_eq!(
        events,
        vec![(2, want.clone())],
        "events after each receive taken"
    );
    b.set_limit(2)?;
    let q = &mut a.qps[0];
    q.post_send(&[SendWr::send(9, &sge).signaled()])?;
    check!(poll_one(q)?.status.is_ok(), "the fifth SEND");
    b.poll(1)?; // 1 left
    check_eq!(
        b.event(Duration::from_secs(20))?,
        Some(want),
        "the event after re-arming"
    );
    check_eq!(
        b.event(Duration::from_millis(200))?,
        None,
        "no second event"
    );
    passed(vec![])
}

/// B's QP 0 on the SRQ moved to ERR takes none of the SRQ's receives: the
/// SRQ keeps all 4, and A's 4 SENDs on QP 1 land in them.
pub(super) fn th_a_qp_on_an_srq_in_err_leaves_the_srq_to_the_others(
    a: &mut Near<'_>,
    b: &mut FarPeer<'_>,
) -> CaseResult {
    let src = a.pd.alloc_mr(8, Access::LOCAL_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    let dst = b.alloc_mr(64, Access::LOCAL_WRITE)?;
    b.post_recvs(0, 4, (dst, 0, 64))?;
    b.move_to_err(0)?;
    check_eq!(b.state(0)?, QpState::Err, "B's QP 0");
    check_eq!(b.poll_for(1, Duration::from_millis(200))?, vec![], "B's CQ");
    check_eq!(b.outstanding()?, 4, "the SRQ keeps its receives");
    let q = &mut a.qps[1];
    let wrs: Vec<SendWr> = (0..4).map(|k| SendWr::send(k, &sge).signaled()).collect();
    q.post_send(&wrs)?;
    check!(
        poll_until(q, 4)?.iter().all(|c| c.status.is_ok()),
        "A's SENDs on QP 1"
    );
    let got = b.poll(4)?;
    let mut ids: Vec<u64> = got.iter().map(|c| c.wr_id).collect();
    ids.sort();
    check_eq!(ids, vec![0, 1, 2, 3], "B's QP 1 took all four");
    check!(
        got.iter()
            .all(|c| c.status.is_ok() && c.qp_num == a.far[1].endpoint.qpn),
        "{got:?}"
    );
    check_eq!(b.outstanding()?, 0, "the SRQ after");
    passed(vec![])
}
