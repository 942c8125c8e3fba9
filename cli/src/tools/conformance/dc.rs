//! DC (dynamically connected, mlx5's): a DCT on an SRQ serving DCIs
//! (`Qp::ready_dct`, `Qp::ready_dci`, `Qp::post_dc`). Every operation over
//! DC; a wrong key, an unknown DCT and DCT number 0 fail the DCI and
//! deliver nothing; no DCT number before RTR (sideway `aef191d`); a failed
//! DCI refused until reset, then reused (UCX PR #6646). The cases with
//! many DCIs (one CQ with interleaved errors, UCX PR #7878; one DCT for 64
//! DCIs; SENDs into the SRQ in any order) are in `dc_many.rs`.
//!
//! Where the device has no DC (the verbs path: rxe) creating the DCT or
//! DCI is refused with `Error::Unsupported { feature: Dc }` and each case
//! is skipped with that reason. The status of a WR to a bad address is the
//! sim's choice (`RETRY_EXC_ERR`), checked on the sim; elsewhere any error
//! status but a flush is taken.

use super::*;
use rdma_direct::{Ah, DcDest, Feature, QpType, Srq};

/// The DC access key of every DCT here.
pub(super) const KEY: u64 = 0x0dc0_ffee_1234_5678;
/// Fills memory a bad address must leave alone.
const GUARD: u8 = 0xee;

pub(super) fn dct_cfg() -> QpConfig {
    QpConfig {
        qp_type: QpType::Dct,
        dc_key: KEY,
        ..QpConfig::default()
    }
}

pub(super) fn dci_cfg(max_send_wr: u32) -> QpConfig {
    QpConfig {
        qp_type: QpType::Dci,
        max_send_wr,
        max_send_sge: 2,
        max_inline: 64,
        rnr_retry: 7,
        ..QpConfig::default()
    }
}

/// The skip reason for a device's refusal of DC; any other error fails.
pub(super) fn dc_refused(e: Error, what: &str) -> Result<String, Failure> {
    match e {
        Error::Unsupported {
            feature: Feature::Dc,
            ..
        } => Ok(format!("no DC on this device ({what} refused: {e})")),
        e => Err(Failure(format!("{what}: {e}"))),
    }
}

/// `$e`'s value, or the case skipped when the device has no DC.
macro_rules! dc_try {
    ($e:expr, $what:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return skipped(super::dc::dc_refused(e, $what)?),
        }
    };
}
pub(super) use dc_try;

/// A PD with a DCT on an SRQ.
pub(super) struct Target {
    pub _ctx: Context,
    pub pd: Pd,
    pub srq: Srq,
    pub dct: Qp,
}

/// A DCT on an SRQ of `srq_wr` receives, brought to RTR when `ready`; or
/// the skip reason.
pub(super) fn target(
    dev: &str,
    srq_wr: u32,
    ready: bool,
) -> Result<Result<Target, String>, Failure> {
    let ctx = Context::open(dev).map_err(|e| Failure(format!("open {dev}: {e}")))?;
    let pd = ctx.alloc_pd()?;
    let srq = pd.create_srq(srq_wr, 1)?;
    let mut dct = match pd.create_qp_on_srq(&dct_cfg(), &srq) {
        Ok(q) => q,
        Err(e) => return Ok(Err(dc_refused(e, "a DCT")?)),
    };
    if ready {
        dct.ready_dct()?;
        check_eq!(dct.state(), QpState::Rtr, "the DCT after ready_dct");
    }
    Ok(Ok(Target {
        _ctx: ctx,
        pd,
        srq,
        dct,
    }))
}

/// The DCT's number, which a DCT in RTR must have.
pub(super) fn number(dct: &Qp) -> Result<u32, Failure> {
    dct.dct_number()
        .ok_or_else(|| Failure(format!("a DCT in {:?} has no DCT number", dct.state())))
}

fn on_sim(q: &mut Qp) -> bool {
    q.sim_hook().is_some()
}

/// A DCI in RTS of `t.pd`, or the skip reason; and an AH to the DCT.
fn dci_of(t: &Target, max_send_wr: u32) -> Result<Result<(Qp, Ah), String>, Failure> {
    let mut dci = match t.pd.create_qp(&dci_cfg(max_send_wr)) {
        Ok(q) => q,
        Err(e) => return Ok(Err(dc_refused(e, "a DCI")?)),
    };
    dci.ready_dci()?;
    check_eq!(dci.state(), QpState::Rts, "the DCI after ready_dci");
    let ah = t.pd.create_ah(&dci.av_to(&t.dct.endpoint()))?;
    Ok(Ok((dci, ah)))
}

/// Each completion is `want`'s (wr_id, status) in order, on QP `qpn`.
fn check_sends(got: &[Completion], want: &[(u64, WcStatus)], qpn: u32) -> Result<(), Failure> {
    let ids: Vec<(u64, WcStatus)> = got.iter().map(|c| (c.wr_id, c.status)).collect();
    check_eq!(ids, want.to_vec(), "the DCI's completions");
    for c in got {
        check_eq!(c.qp_num, qpn, "qp_num of the completion of wr {}", c.wr_id);
    }
    Ok(())
}

pub(super) fn dc_every_operation_lands(dev: &str) -> CaseResult {
    let t = match target(dev, 8, true)? {
        Ok(t) => t,
        Err(why) => return skipped(why),
    };
    let (mut dci, ah) = match dci_of(&t, 16)? {
        Ok(d) => d,
        Err(why) => return skipped(why),
    };
    let Target {
        pd,
        mut srq,
        mut dct,
        ..
    } = t;
    let to = DcDest {
        ah: &ah,
        dctn: number(&dct)?,
        key: KEY,
    };
    let src = pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(8192, Access::MR_ALL)?;
    src.write(0, &pattern(256, 1))?;
    src.write(512, &pattern(16, 2))?;
    src.write(600, &pattern(16, 3))?;
    dst.write(0, &[GUARD; 8192])?;
    dst.write(3000, &pattern(64, 4))?;
    dst.write(2048, &5u64.to_ne_bytes())?;
    let inline = pattern(32, 5);
    let bufs: Vec<[Sge; 1]> = (0..4)
        .map(|i| Sge::new(&dst, 1024 + i * 256, 256).map(|s| [s]))
        .collect::<Result<_, _>>()?;
    let recvs: Vec<RecvWr> = bufs
        .iter()
        .enumerate()
        .map(|(i, s)| RecvWr::new(100 + i as u64, s))
        .collect();
    srq.post_recv(&recvs)?;
    let s = |off: usize, len: u32| Sge::new(&src, off, len).map(|s| [s]);
    let (a, b, c, d) = (s(0, 64)?, s(64, 64)?, s(128, 64)?, s(192, 64)?);
    let read = s(256, 64)?;
    let inl = [Sge::bytes(&inline)?];
    let gather = [Sge::new(&src, 512, 16)?, Sge::new(&src, 600, 16)?];
    let wrs = [
        SendWr::rdma_write(1, &a, remote(&dst, 0)).signaled(),
        SendWr::rdma_write(2, &b, remote(&dst, 64))
            .imm(0xabc)
            .signaled(),
        SendWr::send(3, &c).signaled(),
        SendWr::send(4, &d).imm(0xdef).signaled(),
        SendWr::rdma_read(5, &read, remote(&dst, 3000)).signaled(),
        SendWr::rdma_write(6, &inl, remote(&dst, 3100))
            .inline()
            .signaled(),
        SendWr::send(7, &gather).signaled(),
    ];
    dci.post_dc(&to, &wrs)?;
    let got = poll_until(&mut dci, wrs.len())?;
    let ok: Vec<(u64, WcStatus)> = (1..=7).map(|i| (i, WcStatus::SUCCESS)).collect();
    check_sends(&got, &ok, dci.qp_num())?;
    let ops: Vec<WcOpcode> = got.iter().map(|c| c.opcode).collect();
    use WcOpcode as O;
    check_eq!(
        ops,
        vec![
            O::RDMA_WRITE,
            O::RDMA_WRITE,
            O::SEND,
            O::SEND,
            O::RDMA_READ,
            O::RDMA_WRITE,
            O::SEND
        ],
        "the DCI's opcodes"
    );
    let (sb, db) = (contents(&src)?, contents(&dst)?);
    check_eq!(&db[0..128], &sb[0..128], "the WRITEs' bytes");
    check_eq!(&sb[256..320], &db[3000..3064], "the READ's bytes");
    check_eq!(&db[3100..3132], &inline[..], "the inline WRITE's bytes");
    check!(
        db[3132..3200].iter().all(|&x| x == GUARD),
        "the inline WRITE wrote past its 32 bytes"
    );
    let recvd = poll_until(&mut dct, 4)?;
    let ids: Vec<u64> = recvd.iter().map(|c| c.wr_id).collect();
    check_eq!(
        ids,
        vec![100, 101, 102, 103],
        "the SRQ's receives, in order"
    );
    for c in &recvd {
        check_eq!(c.status, WcStatus::SUCCESS, "receive {}", c.wr_id);
        check_eq!(
            c.src_qp.qpn(),
            dci.qp_num(),
            "src_qp of receive {}",
            c.wr_id
        );
        check_eq!(c.qp_num, dct.qp_num(), "qp_num of receive {}", c.wr_id);
    }
    let imms: Vec<Option<u32>> = recvd.iter().map(|c| c.imm).collect();
    check_eq!(
        imms,
        vec![Some(0xabc), None, Some(0xdef), None],
        "immediates"
    );
    let kinds: Vec<WcOpcode> = recvd.iter().map(|c| c.opcode).collect();
    check_eq!(
        kinds,
        vec![O::RECV_RDMA_WITH_IMM, O::RECV, O::RECV, O::RECV],
        "receive opcodes"
    );
    let lens: Vec<u32> = recvd[1..].iter().map(|c| c.byte_len).collect();
    check_eq!(lens, vec![64, 64, 32], "byte_len of the SENDs' receives");
    check_eq!(&db[1280..1344], &sb[128..192], "the SEND's bytes");
    check_eq!(
        &db[1536..1600],
        &sb[192..256],
        "the SEND with immediate's bytes"
    );
    let mut g = sb[512..528].to_vec();
    g.extend_from_slice(&sb[600..616]);
    check_eq!(&db[1792..1824], &g[..], "the 2-SGE SEND's bytes");
    check!(
        db[1024..1280].iter().all(|&x| x == GUARD),
        "a WRITE with immediate wrote into its receive's buffer"
    );
    // Atomics, one in flight at a time.
    let old = s(320, 8)?;
    dci.post_dc(
        &to,
        &[SendWr::atomic_fetch_add(8, &old, remote(&dst, 2048), 3).signaled()],
    )?;
    check_sends(
        &poll_until(&mut dci, 1)?,
        &[(8, WcStatus::SUCCESS)],
        dci.qp_num(),
    )?;
    check_eq!(read_u64(&src, 320)?, 5, "fetch-and-add's old value");
    let old2 = s(328, 8)?;
    dci.post_dc(
        &to,
        &[SendWr::atomic_cmp_swp(9, &old2, remote(&dst, 2048), 8, 42).signaled()],
    )?;
    let c = poll_until(&mut dci, 1)?;
    check_sends(&c, &[(9, WcStatus::SUCCESS)], dci.qp_num())?;
    check_eq!(c[0].opcode, O::COMP_SWAP, "compare-and-swap's opcode");
    check_eq!(read_u64(&src, 328)?, 8, "compare-and-swap's old value");
    check_eq!(read_u64(&dst, 2048)?, 42, "the word after compare-and-swap");
    nothing_completes(&mut dct)?;
    passed(vec![])
}

/// What is wrong with the address of [`bad_address`]'s WRs.
#[derive(Clone, Copy, Debug)]
enum Bad {
    WrongKey,
    UnknownDct,
    DctZero,
}

pub(super) fn dc_a_wrong_key_fails_the_dci_and_delivers_nothing(dev: &str) -> CaseResult {
    bad_address(dev, Bad::WrongKey)
}

pub(super) fn dc_an_unknown_dct_fails_the_dci_and_delivers_nothing(dev: &str) -> CaseResult {
    bad_address(dev, Bad::UnknownDct)
}

pub(super) fn dc_dct_number_zero_fails_the_dci_and_delivers_nothing(dev: &str) -> CaseResult {
    bad_address(dev, Bad::DctZero)
}

/// The first WR to a bad address failed (the sim's status on the sim, an
/// error other than a flush elsewhere), the rest flushed, each naming the
/// DCI, which is now failed.
fn check_failed_batch(dci: &mut Qp, got: &[Completion], ids: &[u64]) -> Result<(), Failure> {
    let want: Vec<u64> = ids.to_vec();
    check_eq!(
        got.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        want,
        "wr_ids of the failed batch"
    );
    let first = got[0].status;
    if on_sim(dci) {
        check_eq!(
            first,
            WcStatus::RETRY_EXC_ERR,
            "the sim's status for a bad address"
        );
    } else {
        check!(
            !first.is_ok() && first != WcStatus::WR_FLUSH_ERR,
            "the first WR to a bad address: {first:?}"
        );
    }
    for c in &got[1..] {
        check_eq!(
            c.status,
            WcStatus::WR_FLUSH_ERR,
            "WR {} after the error",
            c.wr_id
        );
    }
    for c in got {
        check_eq!(
            c.qp_num,
            dci.qp_num(),
            "qp_num of the completion of wr {}",
            c.wr_id
        );
    }
    check!(
        dci.dci_failed(),
        "the DCI is not failed after its error completion"
    );
    Ok(())
}

/// A post on a failed DCI is refused with `QpState { Err }` and writes
/// nothing to its ring.
fn check_refused(dci: &mut Qp, to: &DcDest<'_>, wrs: &[SendWr<'_>]) -> Result<(), Failure> {
    let before = ring_snapshot(dci);
    match dci.post_dc(to, wrs) {
        Err(Error::QpState {
            state: QpState::Err,
            ..
        }) => {}
        r => return Err(Failure(format!("a post on a failed DCI: {r:?}"))),
    }
    check!(
        ring_snapshot(dci) == before,
        "a refused post wrote to the ring"
    );
    Ok(())
}

fn bad_address(dev: &str, bad: Bad) -> CaseResult {
    let t = match target(dev, 8, true)? {
        Ok(t) => t,
        Err(why) => return skipped(why),
    };
    let (mut dci, ah) = match dci_of(&t, 16)? {
        Ok(d) => d,
        Err(why) => return skipped(why),
    };
    let Target {
        pd,
        mut srq,
        mut dct,
        ..
    } = t;
    let n = number(&dct)?;
    let (dctn, key) = match bad {
        Bad::WrongKey => (n, KEY ^ 1),
        // Another number in 24 bits, not 0.
        Bad::UnknownDct => (n ^ 0x80_0000, KEY),
        Bad::DctZero => (0, KEY),
    };
    let src = pd.alloc_mr(1024, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(2048, Access::MR_ALL)?;
    src.write(0, &pattern(256, 9))?;
    src.write(512, &[GUARD; 64])?;
    dst.write(0, &[GUARD; 2048])?;
    let rbuf = [Sge::new(&dst, 1024, 256)?];
    srq.post_recv(&[RecvWr::new(500, &rbuf)])?;
    let (w, sd, rd) = (
        [Sge::new(&src, 0, 64)?],
        [Sge::new(&src, 64, 64)?],
        [Sge::new(&src, 512, 64)?],
    );
    let atom = [Sge::new(&src, 600, 8)?];
    let batch = [
        SendWr::rdma_write(1, &w, remote(&dst, 0)).signaled(),
        SendWr::send(2, &sd).signaled(),
        SendWr::rdma_write(3, &w, remote(&dst, 64))
            .imm(7)
            .signaled(),
        SendWr::rdma_read(4, &rd, remote(&dst, 128)).signaled(),
        SendWr::atomic_fetch_add(5, &atom, remote(&dst, 512), 1).signaled(),
    ];
    let to_bad = DcDest { ah: &ah, dctn, key };
    dci.post_dc(&to_bad, &batch)?;
    let got = poll_until(&mut dci, batch.len())?;
    check_failed_batch(&mut dci, &got, &[1, 2, 3, 4, 5])?;
    let status = got[0].status;
    // Nothing delivered: no byte of the target, no receive, no READ data.
    check!(
        contents(&dst)?.iter().all(|&x| x == GUARD),
        "{bad:?}: bytes of the target changed"
    );
    check!(
        contents(&src)?[512..576].iter().all(|&x| x == GUARD),
        "{bad:?}: the READ brought data back"
    );
    nothing_completes(&mut dct)?;
    check_eq!(dct.state(), QpState::Rtr, "the DCT after a bad request");
    check_eq!(
        dct.dct_number(),
        Some(n),
        "the DCT's number after a bad request"
    );
    let to = DcDest {
        ah: &ah,
        dctn: n,
        key: KEY,
    };
    check_refused(&mut dci, &to, &batch[..2])?;
    nothing_completes(&mut dci)?;
    // Reset, then the same DCI reaches the DCT: the receive was still there.
    dci.reset_dci()?;
    check!(!dci.dci_failed(), "the DCI still failed after reset_dci");
    dci.post_dc(&to, &batch[..2])?;
    check_sends(
        &poll_until(&mut dci, 2)?,
        &[(1, WcStatus::SUCCESS), (2, WcStatus::SUCCESS)],
        dci.qp_num(),
    )?;
    let r = poll_until(&mut dct, 1)?;
    check_eq!(
        (r[0].wr_id, r[0].status, r[0].src_qp.qpn(), r[0].byte_len),
        (500, WcStatus::SUCCESS, dci.qp_num(), 64),
        "the receive after the reset"
    );
    let (sb, db) = (contents(&src)?, contents(&dst)?);
    check_eq!(&db[0..64], &sb[0..64], "the WRITE after the reset");
    check_eq!(&db[1024..1088], &sb[64..128], "the SEND after the reset");
    passed(vec![format!("{bad:?}: {status:?}")])
}

pub(super) fn dc_no_dct_number_before_rtr(dev: &str) -> CaseResult {
    let t = match target(dev, 8, false)? {
        Ok(t) => t,
        Err(why) => return skipped(why),
    };
    let (mut dci, ah) = match dci_of(&t, 8)? {
        Ok(d) => d,
        Err(why) => return skipped(why),
    };
    let Target {
        pd,
        mut srq,
        mut dct,
        ..
    } = t;
    check_eq!(dct.state(), QpState::Reset, "a new DCT");
    check_eq!(dct.dct_number(), None, "a DCT's number in RESET");
    let port = dct.config().port;
    dct.modify(QpState::Init, &QpAttr::init(port, Access::QP_ALL))?;
    check_eq!(dct.dct_number(), None, "a DCT's number in INIT");
    check_eq!(dci.dct_number(), None, "a DCI's DCT number");
    let mut rc = pd.create_qp(&QpConfig::default())?;
    check_eq!(rc.dct_number(), None, "an RC QP's DCT number");
    // What a peer that read the number too early would address (sideway
    // published 0): it reaches no DCT; nothing is delivered.
    let early = dct.endpoint().qpn;
    let src = pd.alloc_mr(256, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(1024, Access::MR_ALL)?;
    src.write(0, &pattern(64, 3))?;
    dst.write(0, &[GUARD; 1024])?;
    let rbuf = [Sge::new(&dst, 512, 256)?];
    srq.post_recv(&[RecvWr::new(7, &rbuf)])?;
    let s = [Sge::new(&src, 0, 64)?];
    let wrs = [
        SendWr::rdma_write(1, &s, remote(&dst, 0)).signaled(),
        SendWr::send(2, &s).signaled(),
    ];
    let early_to = DcDest {
        ah: &ah,
        dctn: early,
        key: KEY,
    };
    dci.post_dc(&early_to, &wrs)?;
    let got = poll_until(&mut dci, 2)?;
    check_failed_batch(&mut dci, &got, &[1, 2])?;
    check!(
        contents(&dst)?.iter().all(|&x| x == GUARD),
        "a WR to a DCT in INIT (number {early:#x}) wrote its target"
    );
    dci.reset_dci()?;
    // To RTR as ready_dct takes it (ConnectX: the port's AV and MTU).
    let path = if on_sim(&mut dct) {
        None
    } else {
        let ep = dct.endpoint();
        Some((dct.av_to(&ep), ep.active_mtu.max(1)))
    };
    dct.modify(
        QpState::Rtr,
        &QpAttr::rtr_dct(dct.config().min_rnr_timer, path),
    )?;
    let n = number(&dct)?;
    check!(n != 0 && n <= 0xff_ffff, "the DCT number {n:#x}");
    check_eq!(dct.endpoint().qpn, n, "the endpoint's qpn of a DCT in RTR");
    check!(
        dct.modify(QpState::Rts, &QpAttr::rts(0, 7)).is_err(),
        "a DCT moved on to RTS"
    );
    let mut other = pd.create_qp_on_srq(&dct_cfg(), &srq)?;
    other.ready_dct()?;
    check!(number(&other)? != n, "two DCTs with number {n:#x}");
    let to = DcDest {
        ah: &ah,
        dctn: n,
        key: KEY,
    };
    dci.post_dc(&to, &wrs)?;
    let ok = [(1, WcStatus::SUCCESS), (2, WcStatus::SUCCESS)];
    check_sends(&poll_until(&mut dci, 2)?, &ok, dci.qp_num())?;
    let r = poll_until(&mut dct, 1)?;
    check_eq!(
        (r[0].wr_id, r[0].status),
        (7, WcStatus::SUCCESS),
        "the receive"
    );
    let db = contents(&dst)?;
    check_eq!(&db[0..64], &pattern(64, 3)[..], "the WRITE");
    check_eq!(&db[512..576], &pattern(64, 3)[..], "the SEND");
    nothing_completes(&mut other)?;
    nothing_completes(&mut rc)?;
    passed(vec![format!(
        "number before RTR read as {early:#x}; in RTR {n:#x}"
    )])
}

/// UCX PR #6646: a DCI whose WR failed is refused (nothing written) until
/// it is reset; a reset with its flushes unpolled discards them and not
/// the WRs posted after it; the DCI is reused round after round.
pub(super) fn dc_a_failed_dci_is_refused_until_reset_then_reused(dev: &str) -> CaseResult {
    let t = match target(dev, 16, true)? {
        Ok(t) => t,
        Err(why) => return skipped(why),
    };
    let (mut dci, ah) = match dci_of(&t, 8)? {
        Ok(d) => d,
        Err(why) => return skipped(why),
    };
    let Target {
        pd,
        mut srq,
        mut dct,
        ..
    } = t;
    let n = number(&dct)?;
    let to = DcDest {
        ah: &ah,
        dctn: n,
        key: KEY,
    };
    let bad = DcDest { key: !KEY, ..to };
    let src = pd.alloc_mr(64 * 16, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(64 * 16, Access::MR_ALL)?;
    let rb = pd.alloc_mr(64 * 16, Access::LOCAL_WRITE)?;
    let qpn = dci.qp_num();
    for round in 0..9u64 {
        let id = round * 100;
        let p = pattern(64, round as u8);
        let at = (round as usize % 16) * 64;
        src.write(at, &p)?;
        dst.write(0, &[GUARD; 128])?;
        let s = [Sge::new(&src, at, 64)?];
        let rbuf = [Sge::new(&rb, at, 64)?];
        srq.post_recv(&[RecvWr::new(id, &rbuf)])?;
        let three = |base: u64| {
            [
                SendWr::rdma_write(base + 1, &s, remote(&dst, 0)).signaled(),
                SendWr::send(base + 2, &s).signaled(),
                SendWr::rdma_write(base + 3, &s, remote(&dst, 64)).signaled(),
            ]
        };
        match round % 3 {
            // Every completion polled, a post refused, then the reset.
            0 => {
                dci.post_dc(&bad, &three(id))?;
                let got = poll_until(&mut dci, 3)?;
                check_failed_batch(&mut dci, &got, &[id + 1, id + 2, id + 3])?;
                check_refused(&mut dci, &to, &three(id + 10))?;
            }
            // Only the error polled: the reset discards the flushes.
            1 => {
                dci.post_dc(&bad, &three(id))?;
                let got = poll_until(&mut dci, 1)?;
                check_eq!(got[0].wr_id, id + 1, "the first completion");
                check!(dci.dci_failed(), "the DCI is not failed after its error");
                check_refused(&mut dci, &to, &three(id + 10))?;
            }
            // Good WRs before the bad ones: they land; the rest flush.
            _ => {
                dci.post_dc(&to, &three(id + 20)[..1])?;
                dci.post_dc(&bad, &three(id))?;
                let got = poll_until(&mut dci, 4)?;
                check_eq!(
                    (got[0].wr_id, got[0].status),
                    (id + 21, WcStatus::SUCCESS),
                    "the good WR before the bad ones"
                );
                check_failed_batch(&mut dci, &got[1..], &[id + 1, id + 2, id + 3])?;
                check_eq!(read_u64(&dst, 0)?, read_u64(&src, at)?, "the good WRITE");
                dst.write(0, &[GUARD; 8])?;
            }
        }
        nothing_completes(&mut dct)?;
        dci.reset_dci()?;
        check!(
            !dci.dci_failed(),
            "round {round}: still failed after reset_dci"
        );
        check_eq!(dci.state(), QpState::Rts, "round {round}: after reset_dci");
        // The WRs posted after the reset: each completes once, nothing
        // of before the reset comes back.
        dci.post_dc(&to, &three(id + 50))?;
        let ok: Vec<(u64, WcStatus)> = (51..54).map(|k| (id + k, WcStatus::SUCCESS)).collect();
        check_sends(&poll_until(&mut dci, 3)?, &ok, qpn)?;
        nothing_completes(&mut dci)?;
        let r = poll_until(&mut dct, 1)?;
        check_eq!(
            (r[0].wr_id, r[0].status, r[0].src_qp.qpn()),
            (id, WcStatus::SUCCESS, qpn),
            "round {round}: the receive"
        );
        check_eq!(
            &contents(&rb)?[at..at + 64],
            &p[..],
            "round {round}: the SEND"
        );
        let db = contents(&dst)?;
        check_eq!(&db[0..64], &p[..], "round {round}: the first WRITE");
        check_eq!(&db[64..128], &p[..], "round {round}: the second WRITE");
    }
    check_eq!(dci.qp_num(), qpn, "the DCI's number after its resets");
    passed(vec![])
}
