//! The two-sided cases: each drives side A here and side B through a
//! [`Peer`] (in this process, or on another host).

use super::*;

pub(super) fn th_write_4096_lands(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let src = pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    let dst = b.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let data = pattern(4096, 9);
    src.write(0, &data)?;
    let sge = [Sge::new(&src, 0, 4096)?];
    a.post_send(&[SendWr::rdma_write(1, &sge, dst.at(0)).signaled()])?;
    let c = poll_one(a)?;
    check_eq!(
        (c.status, c.wr_id, c.opcode),
        (WcStatus::SUCCESS, 1, WcOpcode::RDMA_WRITE)
    );
    check!(b.read(&dst, 0, 4096)? == data, "payload differs at side B");
    Ok(Outcome::Passed(String::new()))
}

pub(super) fn th_read_lands(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let far = b.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
    let data = pattern(4096, 33);
    b.write(&far, 0, &data)?;
    let local = pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    let sge = [Sge::new(&local, 0, 4096)?];
    a.post_send(&[SendWr::rdma_read(2, &sge, far.at(0)).signaled()])?;
    let c = poll_one(a)?;
    check_eq!(
        (c.status, c.wr_id, c.byte_len),
        (WcStatus::SUCCESS, 2, 4096)
    );
    let mut got = vec![0; 4096];
    local.read(0, &mut got)?;
    check!(got == data, "READ data differs");
    Ok(Outcome::Passed(String::new()))
}

pub(super) fn th_wrong_rkey_leaves_memory_alone(
    a: &mut Qp,
    pd: &Pd,
    b: &mut dyn Peer,
) -> CaseResult {
    let src = pd.alloc_mr(256, Access::LOCAL_WRITE)?;
    let dst = b.alloc_mr(256, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let before = pattern(256, 200);
    b.write(&dst, 0, &before)?;
    let sge = [Sge::new(&src, 0, 256)?];
    let bad = RemoteAddr {
        addr: dst.addr,
        rkey: Rkey(dst.rkey.0 ^ 0x00ab_cd00),
    };
    a.post_send(&[SendWr::rdma_write(3, &sge, bad).signaled()])?;
    let c = poll_one(a)?;
    check_eq!((c.status, c.wr_id), (WcStatus::REM_ACCESS_ERR, 3));
    check!(b.read(&dst, 0, 256)? == before, "side B's memory changed");
    Ok(Outcome::Passed(format!("wrong rkey -> {:?}", c.status)))
}

pub(super) fn th_send_and_imm_land_in_receives(
    a: &mut Qp,
    pd: &Pd,
    b: &mut dyn Peer,
) -> CaseResult {
    let src = pd.alloc_mr(1024, Access::LOCAL_WRITE)?;
    let rbuf = b.alloc_mr(2048, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let data = pattern(1024, 71);
    src.write(0, &data)?;
    b.post_recv(10, &[(rbuf, 0, 1024)])?;
    b.post_recv(11, &[(rbuf, 1024, 1024)])?;
    b.post_recv(12, &[])?;
    let sge = [Sge::new(&src, 0, 1024)?];
    let small = [Sge::new(&src, 0, 16)?];
    a.post_send(&[
        SendWr::send(1, &sge).signaled(),
        SendWr::send(2, &sge).imm(0x89AB_CDEF).signaled(),
        SendWr::rdma_write(3, &small, rbuf.at(0))
            .imm(0x89AB_CDEF)
            .signaled(),
    ])?;
    let sent = poll_until(a, 3)?;
    check!(sent.iter().all(|c| c.status.is_ok()), "sender: {sent:?}");
    let got = b.poll(3)?;
    let seen: Vec<_> = got
        .iter()
        .map(|c| (c.wr_id, c.status, c.byte_len, c.imm))
        .collect();
    check_eq!(
        seen,
        vec![
            (10, WcStatus::SUCCESS, 1024, None),
            (11, WcStatus::SUCCESS, 1024, Some(0x89AB_CDEF)),
            (12, WcStatus::SUCCESS, 16, Some(0x89AB_CDEF)),
        ]
    );
    check_eq!(got[2].opcode, WcOpcode::RECV_RDMA_WITH_IMM);
    check!(
        b.read(&rbuf, 1024, 1024)? == data,
        "SEND_WITH_IMM payload differs"
    );
    Ok(Outcome::Passed(String::new()))
}

pub(super) fn th_fetch_and_add(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let word = b.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_ATOMIC)?;
    b.write(&word, 8, &0x0102_0304_0506_0708u64.to_ne_bytes())?;
    let old = pd.alloc_mr(8, Access::LOCAL_WRITE)?;
    let sge = [Sge::new(&old, 0, 8)?];
    a.post_send(&[SendWr::atomic_fetch_add(4, &sge, word.at(8), 0x10).signaled()])?;
    let c = poll_one(a)?;
    check_eq!((c.status, c.wr_id), (WcStatus::SUCCESS, 4));
    let mut o = [0u8; 8];
    old.read(0, &mut o)?;
    check_eq!(u64::from_ne_bytes(o), 0x0102_0304_0506_0708, "old value");
    let w = b.read(&word, 8, 8)?;
    check_eq!(
        u64::from_ne_bytes(w.try_into().unwrap_or_default()),
        0x0102_0304_0506_0718,
        "remote word"
    );
    Ok(Outcome::Passed(String::new()))
}

pub(super) fn th_error_flushes_and_both_go_to_err(
    a: &mut Qp,
    pd: &Pd,
    b: &mut dyn Peer,
) -> CaseResult {
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    src.write(0, &[0x5a; 64])?;
    let dst = b.alloc_mr(256, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 64)?];
    let bad = RemoteAddr {
        addr: dst.addr,
        rkey: Rkey(dst.rkey.0 ^ 0x0012_3400),
    };
    a.post_send(&[
        SendWr::rdma_write(1, &sge, dst.at(0)).signaled(),
        SendWr::rdma_write(2, &sge, bad).signaled(),
        SendWr::rdma_write(3, &sge, dst.at(64)),
        SendWr::rdma_write(4, &sge, dst.at(128)).signaled(),
    ])?;
    let got = poll_until(a, 4)?;
    let seen: Vec<_> = got.iter().map(|c| (c.wr_id, c.status)).collect();
    check_eq!(
        seen,
        vec![
            (1, WcStatus::SUCCESS),
            (2, WcStatus::REM_ACCESS_ERR),
            (3, WcStatus::WR_FLUSH_ERR),
            (4, WcStatus::WR_FLUSH_ERR)
        ]
    );
    check!(
        b.read(&dst, 64, 192)?.iter().all(|&x| x == 0),
        "a flushed WR wrote side B"
    );
    check_eq!(a.query()?.state, QpState::Err, "requester");
    responder_reaches_err(b)?;
    Ok(Outcome::Passed(String::new()))
}

/// WRITE, WRITE_WITH_IMM, SEND, SEND_WITH_IMM and READ at 0, 1, 63, 64,
/// 4096 bytes and 1 MiB between the two sides, 16 guard bytes checked.
pub(super) fn th_every_opcode_at_every_size(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    const SIZES: [usize; 6] = [0, 1, 63, 64, 4096, 1 << 20];
    const GUARD: usize = 16;
    let len = (1 << 20) + GUARD;
    let local = pd.alloc_mr(len, Access::LOCAL_WRITE)?;
    let far = b.alloc_mr(
        len,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    )?;
    let mut id = 0u64;
    for &n in &SIZES {
        for op in super::super::SIZED_OPS {
            id += 1;
            let data = pattern(n, id as u8);
            let imm = 0x0200_0000 | id as u32;
            if op == "READ" {
                b.write(&far, 0, &data)?;
                local.write(0, &vec![0xEE; n + GUARD])?;
            } else {
                local.write(0, &data)?;
                b.write(&far, 0, &vec![0xEE; n + GUARD])?;
            }
            let lsge = [Sge::new(&local, 0, n as u32)?];
            let wr = match op {
                "WRITE" => SendWr::rdma_write(id, &lsge, far.at(0)),
                "WRITE_WITH_IMM" => SendWr::rdma_write(id, &lsge, far.at(0)).imm(imm),
                "SEND" => SendWr::send(id, &lsge),
                "SEND_WITH_IMM" => SendWr::send(id, &lsge).imm(imm),
                _ => SendWr::rdma_read(id, &lsge, far.at(0)),
            };
            let responder = match op {
                "SEND" | "SEND_WITH_IMM" => {
                    b.post_recv(id, &[(far, 0, (n + GUARD) as u32)])?;
                    true
                }
                "WRITE_WITH_IMM" => {
                    b.post_recv(id, &[])?;
                    true
                }
                _ => false,
            };
            a.post_send(&[wr.signaled()])?;
            let c = poll_one(a)?;
            check_eq!(
                (c.status, c.wr_id),
                (WcStatus::SUCCESS, id),
                "{op} of {n} bytes"
            );
            if responder {
                let r = b.poll(1)?;
                let want_imm = (op != "SEND").then_some(imm);
                check_eq!(
                    (r[0].status, r[0].wr_id, r[0].byte_len, r[0].imm),
                    (WcStatus::SUCCESS, id, n as u32, want_imm),
                    "{op} of {n} bytes at side B"
                );
            }
            let got = if op == "READ" {
                let mut v = vec![0; n + GUARD];
                local.read(0, &mut v)?;
                v
            } else {
                b.read(&far, 0, n + GUARD)?
            };
            check!(got[..n] == data[..], "{op} of {n} bytes: payload differs");
            check!(
                got[n..].iter().all(|&x| x == 0xEE),
                "{op} of {n} bytes: wrote past the message"
            );
        }
    }
    Ok(Outcome::Passed(String::new()))
}

/// A SEND of 256 bytes into a 64-byte receive: both sides fail it (mlx5 and
/// the sim: REM_INV_REQ_ERR / LOC_LEN_ERR; rxe: REM_OP_ERR / LOC_QP_OP_ERR).
pub(super) fn th_too_small_receive_fails_both_sides(
    a: &mut Qp,
    pd: &Pd,
    b: &mut dyn Peer,
) -> CaseResult {
    let src = pd.alloc_mr(256, Access::LOCAL_WRITE)?;
    let rbuf = b.alloc_mr(64, Access::LOCAL_WRITE)?;
    b.post_recv(7, &[(rbuf, 0, 64)])?;
    let sge = [Sge::new(&src, 0, 256)?];
    a.post_send(&[SendWr::send(8, &sge).signaled()])?;
    let c = poll_one(a)?;
    check!(
        c.wr_id == 8 && [WcStatus::REM_INV_REQ_ERR, WcStatus::REM_OP_ERR].contains(&c.status),
        "requester: {c:?}"
    );
    let r = b.poll(1)?;
    check!(
        r[0].wr_id == 7 && [WcStatus::LOC_LEN_ERR, WcStatus::LOC_QP_OP_ERR].contains(&r[0].status),
        "responder: {:?}",
        r[0]
    );
    Ok(Outcome::Passed(format!(
        "{:?} / {:?}",
        c.status, r[0].status
    )))
}

/// A receive posted after the SEND (side B posts it only when told, after
/// A's post returned): the SEND is NAKed until it is there (`rnr_retry` 6
/// at B's `min_rnr_timer` 31, about 2.9 s of retries), then lands.
pub(super) fn th_rnr_waits_for_a_late_receive(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    src.write(0, &[0x3c; 64])?;
    let rbuf = b.alloc_mr(64, Access::LOCAL_WRITE)?;
    let sge = [Sge::new(&src, 0, 64)?];
    a.post_send(&[SendWr::send(1, &sge).signaled()])?;
    b.post_recv(2, &[(rbuf, 0, 64)])?;
    let c = poll_one(a)?;
    check_eq!(
        (c.status, c.wr_id),
        (WcStatus::SUCCESS, 1),
        "the SEND after RNR NAKs"
    );
    let r = b.poll(1)?;
    check_eq!(
        (r[0].status, r[0].wr_id, r[0].byte_len),
        (WcStatus::SUCCESS, 2, 64)
    );
    check!(b.read(&rbuf, 0, 64)? == vec![0x3c; 64], "payload");
    Ok(Outcome::Passed(String::new()))
}

/// After an error both QPs are in ERR; both go ERR -> RESET -> INIT -> RTR
/// -> RTS toward each other again, and traffic works.
pub(super) fn th_err_reset_reconnect(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    src.write(0, &[0x66; 64])?;
    let dst = b.alloc_mr(128, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 64)?];
    let bad = RemoteAddr {
        addr: dst.addr,
        rkey: Rkey(dst.rkey.0 ^ 0x0012_3400),
    };
    a.post_send(&[SendWr::rdma_write(1, &sge, bad).signaled()])?;
    check_eq!(poll_one(a)?.status, WcStatus::REM_ACCESS_ERR);
    responder_reaches_err(b)?;
    let (ea, eb) = (a.endpoint(), b.endpoint()?);
    let (psn_a, psn_b) = (Qp::random_psn(), Qp::random_psn());
    // B first (it is told A's facts), then A.
    b.reconnect(&ea, psn_a, psn_b)?;
    a.modify(QpState::Err, &rdma_direct::QpAttr::default())?;
    a.modify(QpState::Reset, &rdma_direct::QpAttr::default())?;
    a.connect_remote(psn_a, &eb, psn_b)?;
    check_eq!((a.query()?.state, b.state()?), (QpState::Rts, QpState::Rts));
    a.post_send(&[SendWr::rdma_write(2, &sge, dst.at(64)).signaled()])?;
    let c = poll_one(a)?;
    check_eq!(
        (c.status, c.wr_id),
        (WcStatus::SUCCESS, 2),
        "after recovery"
    );
    check!(
        b.read(&dst, 64, 64)? == vec![0x66; 64],
        "payload after recovery"
    );
    Ok(Outcome::Passed(String::new()))
}

/// A WRITE and a SEND each gathering k local pieces (k = 1..=4, the QPs'
/// `max_send_sge`) land contiguous at side B, every byte in its place and
/// nothing past the end.
pub(super) fn th_gather_and_scatter_sges(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let local = pd.alloc_mr(8192, Access::LOCAL_WRITE)?;
    let far = b.alloc_mr(8192, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    for k in 1..=4usize {
        // k pieces of (7 i + 3) bytes at 1 KiB * i, gathered into one WRITE.
        let piece = |i: usize| (i << 10, 7 * i as u32 + 3);
        let total: usize = (0..k).map(|i| piece(i).1 as usize).sum();
        let data = pattern(total, k as u8);
        let mut off = 0;
        for i in 0..k {
            let (at, l) = piece(i);
            local.write(at, &data[off..off + l as usize])?;
            off += l as usize;
        }
        let gather = (0..k)
            .map(|i| Sge::new(&local, piece(i).0, piece(i).1))
            .collect::<Result<Vec<_>, _>>()?;
        b.write(&far, 4096, &vec![0; total + 1])?;
        a.post_send(&[SendWr::rdma_write(k as u64, &gather, far.at(4096)).signaled()])?;
        check_eq!(
            poll_one(a)?.status,
            WcStatus::SUCCESS,
            "WRITE gathering {k} SGEs"
        );
        let got = b.read(&far, 4096, total + 1)?;
        check!(
            got[..total] == data[..] && got[total] == 0,
            "WRITE gathering {k} SGEs: payload"
        );
        // The same pieces as one SEND into one receive at side B.
        b.post_recv(100 + k as u64, &[(far, 0, total as u32)])?;
        a.post_send(&[SendWr::send(200 + k as u64, &gather).signaled()])?;
        check_eq!(
            poll_one(a)?.status,
            WcStatus::SUCCESS,
            "SEND gathering {k} SGEs"
        );
        let r = b.poll(1)?;
        check_eq!((r[0].wr_id, r[0].byte_len), (100 + k as u64, total as u32));
        check!(
            b.read(&far, 0, total)? == data,
            "SEND gathering {k} SGEs: payload"
        );
        // One SGE at A, scattered into k pieces of one receive at side B.
        let one = [Sge::new(&local, 0, total as u32)?];
        local.write(0, &data)?;
        b.write(&far, 0, &vec![0; 8192])?;
        let scatter: Vec<(PeerMr, usize, u32)> =
            (0..k).map(|i| (far, piece(i).0, piece(i).1)).collect();
        b.post_recv(300 + k as u64, &scatter)?;
        a.post_send(&[SendWr::send(400 + k as u64, &one).signaled()])?;
        check_eq!(
            poll_one(a)?.status,
            WcStatus::SUCCESS,
            "SEND scattered into {k} SGEs"
        );
        let r = b.poll(1)?;
        check_eq!(
            (r[0].status, r[0].wr_id, r[0].byte_len),
            (WcStatus::SUCCESS, 300 + k as u64, total as u32)
        );
        let mut off = 0;
        for i in 0..k {
            let (at, l) = piece(i);
            let got = b.read(&far, at, l as usize + 1)?;
            check!(
                got[..l as usize] == data[off..off + l as usize] && got[l as usize] == 0,
                "SEND scattered into {k} SGEs: piece {i}"
            );
            off += l as usize;
        }
    }
    Ok(Outcome::Passed(
        "1..4 SGEs gathered at A, scattered at B".into(),
    ))
}

/// Compare-and-swap on side B's word: a match swaps and returns the old
/// value; a mismatch leaves the word and returns it too.
pub(super) fn th_compare_and_swap(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let word = b.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_ATOMIC)?;
    b.write(&word, 16, &0x0102_0304_0506_0718u64.to_ne_bytes())?;
    let old = pd.alloc_mr(16, Access::LOCAL_WRITE)?;
    let sge = [Sge::new(&old, 0, 8)?];
    let read_word = |b: &mut dyn Peer| -> Result<u64, Failure> {
        Ok(u64::from_ne_bytes(
            b.read(&word, 16, 8)?.try_into().unwrap_or_default(),
        ))
    };
    a.post_send(&[
        SendWr::atomic_cmp_swp(5, &sge, word.at(16), 0x0102_0304_0506_0718, 42).signaled(),
    ])?;
    check_eq!(poll_one(a)?.status, WcStatus::SUCCESS);
    check_eq!(read_word(b)?, 42, "CAS did not swap");
    let mut o = [0u8; 8];
    old.read(0, &mut o)?;
    check_eq!(u64::from_ne_bytes(o), 0x0102_0304_0506_0718, "old value");
    a.post_send(&[SendWr::atomic_cmp_swp(6, &sge, word.at(16), 7, 99).signaled()])?;
    check_eq!(poll_one(a)?.status, WcStatus::SUCCESS);
    check_eq!(read_word(b)?, 42, "a failed CAS changed the word");
    old.read(0, &mut o)?;
    check_eq!(u64::from_ne_bytes(o), 42, "old value of a failed CAS");
    Ok(Outcome::Passed(String::new()))
}

/// No receive is ever posted at B: A's SEND is NAKed `rnr_retry` 6 times,
/// each after B's `min_rnr_timer` 31 (491.52 ms), then fails with
/// RNR_RETRY_EXC_ERR; A goes to ERR, B stays in RTS (an RNR NAK is not an
/// error at the responder).
pub(super) fn th_rnr_without_a_receive_exhausts_retries(
    a: &mut Qp,
    pd: &Pd,
    b: &mut dyn Peer,
) -> CaseResult {
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let sge = [Sge::new(&src, 0, 64)?];
    let t0 = std::time::Instant::now();
    a.post_send(&[SendWr::send(1, &sge).signaled()])?;
    let c = poll_one(a)?;
    let took = t0.elapsed();
    check_eq!(
        (c.status, c.wr_id),
        (WcStatus::RNR_RETRY_EXC_ERR, 1),
        "a SEND no receive ever meets"
    );
    // Six waits of 491.52 ms: fewer than five means the timer was not honoured.
    let floor = rdma_direct::qp_attr::rnr_timer(31) * 5;
    check!(
        took >= floor,
        "RNR_RETRY_EXC_ERR after {took:?}, before 5 of B's 491.52 ms RNR timers ran out"
    );
    check_eq!(a.query()?.state, QpState::Err);
    check_eq!(b.state()?, QpState::Rts, "B after only RNR NAKs");
    Ok(Outcome::Passed(format!(
        "RNR_RETRY_EXC_ERR after {:.2} s",
        took.as_secs_f64()
    )))
}

/// B arms its CQ for solicited completions only: a SEND without the
/// solicited bit completes at B without an event; one with it raises the
/// event (IB spec 11.4.2.2, `ibv_req_notify_cq(cq, 1)`).
pub(super) fn th_solicited_event_wakes_b(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    src.write(0, &[0x5a; 64])?;
    let rbuf = b.alloc_mr(256, Access::LOCAL_WRITE)?;
    b.post_recv(10, &[(rbuf, 0, 64)])?;
    b.post_recv(11, &[(rbuf, 64, 64)])?;
    b.arm_cq(true)?;
    let sge = [Sge::new(&src, 0, 64)?];
    a.post_send(&[SendWr::send(1, &sge).signaled()])?;
    check_eq!(poll_one(a)?.status, WcStatus::SUCCESS);
    check!(
        !b.wait_cq_event(Duration::from_millis(300))?,
        "an unsolicited SEND woke a CQ armed for solicited completions"
    );
    a.post_send(&[SendWr::send(2, &sge).solicited().signaled()])?;
    check_eq!(poll_one(a)?.status, WcStatus::SUCCESS);
    check!(
        b.wait_cq_event(Duration::from_secs(10))?,
        "a solicited SEND raised no event at B within 10 s"
    );
    let r = b.poll(2)?;
    check_eq!(
        (r[0].wr_id, r[0].status, r[1].wr_id, r[1].status),
        (10, WcStatus::SUCCESS, 11, WcStatus::SUCCESS)
    );
    Ok(Outcome::Passed(String::new()))
}

/// Inline WRITE and SEND of exactly the `max_inline` the device granted
/// land at B; one byte more (one SGE, or two summing to it) is refused
/// before anything is posted, and B's memory stays as it was.
pub(super) fn th_inline_at_the_limit_lands(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let limit = a.max_inline() as usize;
    let src = pd.alloc_mr(limit + 1, Access::LOCAL_WRITE)?;
    let data = pattern(limit + 1, 77);
    src.write(0, &data)?;
    let far = b.alloc_mr(2 * limit + 2, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let at_limit = [Sge::new(&src, 0, limit as u32)?];
    a.post_send(&[SendWr::rdma_write(1, &at_limit, far.at(0))
        .inline()
        .signaled()])?;
    check_eq!(
        poll_one(a)?.status,
        WcStatus::SUCCESS,
        "inline WRITE of {limit} B"
    );
    let got = b.read(&far, 0, limit + 1)?;
    check!(
        got[..limit] == data[..limit] && got[limit] == 0,
        "inline WRITE of {limit} B: payload at B"
    );
    b.post_recv(5, &[(far, limit + 1, limit as u32 + 1)])?;
    a.post_send(&[SendWr::send(2, &at_limit).inline().signaled()])?;
    check_eq!(
        poll_one(a)?.status,
        WcStatus::SUCCESS,
        "inline SEND of {limit} B"
    );
    let r = b.poll(1)?;
    check_eq!(
        (r[0].status, r[0].byte_len),
        (WcStatus::SUCCESS, limit as u32)
    );
    check!(
        b.read(&far, limit + 1, limit)? == data[..limit],
        "inline SEND of {limit} B: payload at B"
    );
    let before = b.read(&far, 0, 2 * limit + 2)?;
    let one_over = [Sge::new(&src, 0, limit as u32 + 1)?];
    let split = [Sge::new(&src, 0, limit as u32)?, Sge::new(&src, limit, 1)?];
    for (what, sges) in [("one SGE", &one_over[..]), ("two SGEs", &split[..])] {
        let r = a.post_send(&[SendWr::rdma_write(3, sges, far.at(0)).inline().signaled()]);
        check!(
            matches!(r, Err(Error::InlineTooLong { .. })),
            "inline of {} B in {what} accepted: {r:?}",
            limit + 1
        );
    }
    std::thread::sleep(Duration::from_millis(50));
    let mut wc = [Completion::default(); 2];
    check_eq!(a.poll(&mut wc)?, 0, "a refused inline WR completed");
    check!(
        b.read(&far, 0, 2 * limit + 2)? == before,
        "a refused inline WR changed B's memory"
    );
    Ok(Outcome::Passed(format!("inline limit {limit} B")))
}

/// 1,000 unsignaled 8-byte WRITEs, each to its own slot at B, with every
/// 100th and the last signaled; full send queue or CQ is waited out by
/// polling. Every slot holds its value, and the completions (the signaled
/// WRs, and any the driver signals itself to keep the queue moving) come in
/// posting order, all SUCCESS.
pub(super) fn th_unsignaled_stream_lands_in_order(
    a: &mut Qp,
    pd: &Pd,
    b: &mut dyn Peer,
) -> CaseResult {
    const N: u64 = 1000;
    let src = pd.alloc_mr(8 * N as usize, Access::LOCAL_WRITE)?;
    for i in 0..N {
        src.write(8 * i as usize, &(i + 1).to_le_bytes())?;
    }
    let far = b.alloc_mr(8 * N as usize, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let mut done = Vec::new();
    let mut wc = [Completion::default(); 16];
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut i = 0;
    while i < N {
        let sge = [Sge::new(&src, 8 * i as usize, 8)?];
        let mut wr = SendWr::rdma_write(i, &sge, far.at(8 * i));
        if i % 100 == 99 || i == N - 1 {
            wr = wr.signaled();
        }
        match a.post_send(&[wr]) {
            Ok(()) => i += 1,
            Err(Error::QueueFull | Error::CqFull) => {
                check!(
                    std::time::Instant::now() < deadline,
                    "the stream stalled at WR {i}"
                );
            }
            Err(e) => return Err(e.into()),
        }
        let n = a.poll(&mut wc)?;
        done.extend_from_slice(&wc[..n]);
    }
    while done.last().map(|c| c.wr_id) != Some(N - 1) {
        check!(
            std::time::Instant::now() < deadline,
            "{} completions, none for the last WR",
            done.len()
        );
        let n = a.poll(&mut wc)?;
        done.extend_from_slice(&wc[..n]);
    }
    for c in &done {
        check_eq!(c.status, WcStatus::SUCCESS, "WR {}", c.wr_id);
    }
    // Completions besides the signaled ones may be the driver's own
    // auto-signals (every half send queue), never out of order.
    check!(
        done.windows(2).all(|w| w[0].wr_id < w[1].wr_id),
        "completions out of order: {:?}",
        done.iter().map(|c| c.wr_id).collect::<Vec<_>>()
    );
    let got = b.read(&far, 0, 8 * N as usize)?;
    for i in 0..N as usize {
        let v = u64::from_le_bytes(got[8 * i..8 * i + 8].try_into().unwrap_or_default());
        check_eq!(v, i as u64 + 1, "slot {i} at B");
    }
    Ok(Outcome::Passed(format!(
        "{N} WRITEs, {} completions",
        done.len()
    )))
}

/// Side B registers a remote target (and a second MR it keeps), A WRITEs
/// into the target and B reads the bytes back; then B drops its only handle
/// of the target (`DEREG`: its answer comes after the drop, the token that
/// orders the drop before A's next post). A's next WRITE to the same address
/// and rkey completes with REM_ACCESS_ERR, A's QP goes to ERR and B's too,
/// and the MR B kept still holds its bytes under its own id.
pub(super) fn th_dropped_target_refuses_the_next_write(
    a: &mut Qp,
    pd: &Pd,
    b: &mut dyn Peer,
) -> CaseResult {
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let data = pattern(64, 123);
    src.write(0, &data)?;
    let target = b.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let kept = b.alloc_mr(64, Access::LOCAL_WRITE)?;
    b.write(&kept, 0, &[0xa5; 64])?;
    let sge = [Sge::new(&src, 0, 64)?];
    a.post_send(&[SendWr::rdma_write(1, &sge, target.at(0)).signaled()])?;
    let c = poll_one(a)?;
    check_eq!(
        (c.status, c.wr_id),
        (WcStatus::SUCCESS, 1),
        "the WRITE before the drop"
    );
    check!(
        b.read(&target, 0, 64)? == data,
        "the WRITE before the drop: payload at B"
    );
    let live = b.dereg_mr(&target)?;
    check!(
        b.read(&target, 0, 8).is_err(),
        "side B still reads the MR it dropped"
    );
    a.post_send(&[SendWr::rdma_write(2, &sge, target.at(0)).signaled()])?;
    let c = poll_one(a)?;
    check_eq!(
        (c.status, c.wr_id),
        (WcStatus::REM_ACCESS_ERR, 2),
        "the WRITE after the drop"
    );
    check_eq!(a.query()?.state, QpState::Err, "requester");
    responder_reaches_err(b)?;
    check!(
        b.read(&kept, 0, 64)? == vec![0xa5; 64],
        "the MR side B kept, after the drop of another"
    );
    // Nothing is outstanding on either QP: the kept MR goes at its drop too.
    let after = b.dereg_mr(&kept)?;
    check_eq!(
        after + 1,
        live,
        "B's live MRs after dropping the kept one, plus one"
    );
    Ok(Outcome::Passed(format!(
        "after the drop {:?}; B's live MRs {live}, then {after}",
        c.status
    )))
}

/// Side B's QP reaches ERR within 20 s (an access violation or a flush moves
/// the responder to ERR too), or the case fails.
pub(super) fn responder_reaches_err(b: &mut dyn Peer) -> Result<(), Failure> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while b.state()? != QpState::Err {
        check!(
            std::time::Instant::now() < deadline,
            "responder never reached ERR"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}
