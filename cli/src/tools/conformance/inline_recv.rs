//! Inline receive (scatter to CQE, `QpConfig::inline_recv`): SENDs and
//! READs of 1, 31, 32, 33, 63, 64 and 65 bytes on RC with the payload
//! checked byte for byte and guard bytes around the buffers, a 2-SGE
//! receive, and a receive too small. Where the device has no scatter to
//! CQE (the verbs path: rxe) the QP is refused with
//! `Error::Unsupported { feature: InlineReceive }` and the case is skipped
//! with that reason; `InlineRecv::Up64` (128-byte CQEs) runs where the
//! device takes it (the sim; ConnectX through `mlx5dv_create_cq`, not yet
//! run on hardware) and is skipped with the reason elsewhere. On
//! the sim, its count of CQEs that carried data shows which payloads came
//! in the CQE (those up to 32 or 64 bytes).

use super::*;
use rdma_direct::{Feature, InlineRecv};

const GUARD: u8 = 0xee;
/// Where the target buffer starts in its MR: the bytes before it and past
/// the payload are guards.
const AT: usize = 64;
const SIZES: [usize; 7] = [1, 31, 32, 33, 63, 64, 65];

/// A connected RC pair with `mode`, or the reason the device refused it.
fn inline_pair(dev: &str, mode: InlineRecv, sge: u32) -> Result<Result<Setup, String>, Failure> {
    let ctx = Context::open(dev).map_err(|e| Failure(format!("open {dev}: {e}")))?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig {
        max_send_wr: 32,
        max_recv_wr: 32,
        max_send_sge: sge,
        max_recv_sge: sge,
        inline_recv: mode,
        ..QpConfig::default()
    };
    match pd.create_connected_pair(&cfg) {
        Ok((a, b)) => Ok(Ok(Setup {
            _ctx: ctx,
            pd,
            a,
            b,
        })),
        Err(
            e @ Error::Unsupported {
                feature: Feature::InlineReceive,
                ..
            },
        ) => Ok(Err(format!("{mode:?} refused: {e}"))),
        Err(e) => Err(Failure(format!("{mode:?} on {dev}: {e}"))),
    }
}

/// The sim's count of CQEs that carried data for `q` (`None` elsewhere).
fn scattered(q: &mut Qp) -> Option<u64> {
    q.sim_hook().map(|h| h.scatter_cqes())
}

/// `mr` holds `want` at [`AT`] and [`GUARD`] everywhere else.
fn check_guarded(mr: &Mr, want: &[u8], what: &str) -> Result<(), Failure> {
    let got = contents(mr)?;
    check_eq!(&got[AT..AT + want.len()], want, "{what}: the payload");
    let outside = got[..AT]
        .iter()
        .chain(&got[AT + want.len()..])
        .position(|&b| b != GUARD);
    check_eq!(outside, None, "{what}: a byte outside the payload changed");
    Ok(())
}

fn guarded_mr(pd: &Pd) -> Result<Mr, Failure> {
    let mr = pd.alloc_mr(256, Access::LOCAL_WRITE)?;
    mr.write(0, &[GUARD; 256])?;
    Ok(mr)
}

/// Runs `f` for each mode the device takes; the modes it refused become
/// the skip reason if it took none, notes otherwise.
fn each_mode(
    dev: &str,
    sge: u32,
    mut f: impl FnMut(&mut Setup, usize) -> Result<(), Failure>,
) -> CaseResult {
    let (mut ran, mut notes) = (0, Vec::new());
    for (mode, limit) in [(InlineRecv::Up32, 32), (InlineRecv::Up64, 64)] {
        match inline_pair(dev, mode, sge)? {
            Ok(mut s) => {
                f(&mut s, limit)?;
                ran += 1;
            }
            Err(why) => notes.push(why),
        }
    }
    if ran == 0 {
        return skipped(notes.join("; "));
    }
    passed(notes)
}

/// SENDs of 1..65 bytes into a 100-byte receive: whole, nothing around
/// them touched, the immediate kept; on the sim, those up to the CQE's
/// size came in the CQE.
pub(super) fn inline_receive_sends_of_1_to_65_bytes_land_whole(dev: &str) -> CaseResult {
    each_mode(dev, 1, |s, limit| {
        let src = s.pd.alloc_mr(256, Access::LOCAL_WRITE)?;
        for (k, n) in SIZES.into_iter().enumerate() {
            let dst = guarded_mr(&s.pd)?;
            let data = pattern(n, k as u8);
            src.write(0, &data)?;
            let r = [Sge::new(&dst, AT, 100)?];
            s.b.post_recv(&[RecvWr::new(k as u64, &r)])?;
            let before = scattered(&mut s.b);
            let g = [Sge::new(&src, 0, n as u32)?];
            s.a.post_send(&[SendWr::send(k as u64, &g).imm(n as u32).signaled()])?;
            let wc = poll_one(&mut s.b)?;
            check_eq!(wc.status, WcStatus::SUCCESS, "{n}-byte SEND: {wc:?}");
            check_eq!(
                (wc.wr_id, wc.byte_len, wc.imm),
                (k as u64, n as u32, Some(n as u32)),
                "{n}-byte SEND"
            );
            check_guarded(&dst, &data, &format!("{n}-byte SEND"))?;
            if let (Some(b0), Some(b1)) = (before, scattered(&mut s.b)) {
                check_eq!(b1 - b0, (n <= limit) as u64, "{n} bytes in the CQE");
            }
            check!(poll_one(&mut s.a)?.status.is_ok());
        }
        Ok(())
    })
}

/// Signaled READs of 1..65 bytes: whole, nothing around them touched; on
/// the sim, those up to the CQE's size came in the requester's CQE.
pub(super) fn inline_receive_reads_of_1_to_65_bytes_land_whole(dev: &str) -> CaseResult {
    each_mode(dev, 1, |s, limit| {
        let far =
            s.pd.alloc_mr(256, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
        for (k, n) in SIZES.into_iter().enumerate() {
            let data = pattern(n, 40 + k as u8);
            far.write(16, &data)?;
            let dst = guarded_mr(&s.pd)?;
            let before = scattered(&mut s.a);
            let g = [Sge::new(&dst, AT, n as u32)?];
            s.a.post_send(&[SendWr::rdma_read(k as u64, &g, remote(&far, 16)).signaled()])?;
            let wc = poll_one(&mut s.a)?;
            check_eq!(wc.status, WcStatus::SUCCESS, "{n}-byte READ: {wc:?}");
            check_eq!(
                (wc.wr_id, wc.opcode, wc.byte_len),
                (k as u64, WcOpcode::RDMA_READ, n as u32),
                "{n}-byte READ"
            );
            check_guarded(&dst, &data, &format!("{n}-byte READ"))?;
            if let (Some(b0), Some(b1)) = (before, scattered(&mut s.a)) {
                check_eq!(b1 - b0, (n <= limit) as u64, "{n} bytes in the CQE");
            }
        }
        Ok(())
    })
}

/// A 2-SGE receive (3 + 30 bytes, apart) takes a 25-byte SEND in order
/// with the gap and the rest untouched; a receive of 8 bytes takes no
/// 20-byte SEND: LOC_LEN_ERR, nothing written.
pub(super) fn inline_receive_two_sges_and_a_receive_too_small(dev: &str) -> CaseResult {
    each_mode(dev, 2, |s, _| {
        let src = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
        let data = pattern(25, 7);
        src.write(0, &data)?;
        let dst = guarded_mr(&s.pd)?;
        let r = [Sge::new(&dst, AT, 3)?, Sge::new(&dst, AT + 10, 30)?];
        s.b.post_recv(&[RecvWr::new(1, &r)])?;
        let g = [Sge::new(&src, 0, 25)?];
        s.a.post_send(&[SendWr::send(2, &g).signaled()])?;
        let wc = poll_one(&mut s.b)?;
        check_eq!(
            (wc.wr_id, wc.status, wc.byte_len),
            (1, WcStatus::SUCCESS, 25)
        );
        check!(poll_one(&mut s.a)?.status.is_ok());
        let mut got = contents(&dst)?;
        check_eq!(&got[AT..AT + 3], &data[..3], "first SGE");
        check_eq!(&got[AT + 10..AT + 32], &data[3..], "second SGE");
        got[AT..AT + 3].fill(GUARD);
        got[AT + 10..AT + 32].fill(GUARD);
        check_eq!(
            got.iter().position(|&b| b != GUARD),
            None,
            "a byte outside the two SGEs changed"
        );
        // Too small: 8 bytes for 20.
        let small = guarded_mr(&s.pd)?;
        let r = [Sge::new(&small, AT, 8)?];
        s.b.post_recv(&[RecvWr::new(3, &r)])?;
        let g = [Sge::new(&src, 0, 20)?];
        s.a.post_send(&[SendWr::send(4, &g).signaled()])?;
        let wc = poll_one(&mut s.b)?;
        check_eq!((wc.wr_id, wc.status), (3, WcStatus::LOC_LEN_ERR), "{wc:?}");
        check_guarded(&small, &[], "a receive too small")?;
        Ok(())
    })
}
