//! Memory windows (issue 31): a grant of one slice of an MR, with its own
//! rkey and access, revoked without deregistering the MR.
//!
//! Every case binds a window on QP `b` of a loopback pair (a type-2 window
//! serves only the QP it was bound on, and `b` is the responder of `a`'s
//! accesses) over part of an MR registered with `Access::MW_BIND`, then
//! has `a` reach it through the window's rkey. A refused access puts both
//! QPs in ERR, so each access that must be refused gets fresh QPs.
//!
//! Where the device has no windows (`Pd::alloc_mw` refuses with
//! `Error::Unsupported { feature: MemoryWindows }`) every case is skipped
//! with that reason. rxe (Linux 6.1) checks an access through a window
//! against the window's MR, not the window's own range (`check_rkey` in
//! `rxe_resp.c`), so the window-bounds case is skipped there with that
//! reason; an access beyond the MR is refused everywhere.

use super::*;
use rdma_direct::{Feature, Mw, MwBind, MwRefusal, MwType, SendFlags};

/// The MR's access: what a window may grant (C10-75: REMOTE_WRITE needs
/// the MR's LOCAL_WRITE), and MW_BIND (C10-73).
const MR_ACCESS: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::MW_BIND);
/// A window's read-write grant.
const WIN_RW: Access = Access::REMOTE_WRITE.union(Access::REMOTE_READ);
/// The MR's length, and the window's first byte and length in it.
const MR_LEN: usize = 8192;
const WIN_OFF: usize = 1024;
const WIN_LEN: usize = 2048;

/// Why rxe does not refuse an access inside the MR and outside the window.
pub(super) const RXE_WINDOW_BOUNDS: &str = "rxe 6.1 checks an access through a window against \
     the window's MR, not the window's range (check_rkey in rxe_resp.c)";

/// A case stops early: skipped (no windows here) or failed.
type Stop = CaseResult;

/// The skip for the device's refusal of windows; any other error fails.
fn stop(e: Error, what: &str) -> Stop {
    match e {
        Error::Unsupported {
            feature: Feature::MemoryWindows,
            ..
        } => skipped(format!("no memory windows on this device ({what}): {e}")),
        e => Err(Failure(format!("{what}: {e}"))),
    }
}

/// Unwraps a `Result<_, Error>`, or returns [`stop`]'s outcome.
macro_rules! or_stop {
    ($e:expr, $($what:tt)+) => {
        match $e {
            Ok(v) => v,
            Err(e) => return stop(e, &format!($($what)+)),
        }
    };
}

/// Whether `dev` is an rxe device (its kernel driver is `rdma_rxe`).
pub(super) fn is_rxe(dev: &str) -> bool {
    rdma_direct::list_devices()
        .map(|v| v.iter().any(|d| d.name == dev && d.driver.contains("rxe")))
        .unwrap_or(false)
}

/// A loopback pair whose QPs post window WRs.
fn mw_setup(dev: &str) -> Result<Setup, Stop> {
    let cfg = QpConfig {
        max_send_wr: 64,
        max_send_sge: 4,
        max_inline: 128,
        memory_windows: true,
        ..QpConfig::default()
    };
    let ctx = Context::open(dev).map_err(|e| Err(Failure(format!("open {dev}: {e}"))))?;
    let pd = ctx.alloc_pd().map_err(|e| stop(e, "alloc_pd"))?;
    let (a, b) = pd
        .create_connected_pair(&cfg)
        .map_err(|e| stop(e, "a QP pair with QpConfig::memory_windows"))?;
    Ok(Setup {
        _ctx: ctx,
        pd,
        a,
        b,
    })
}

/// What a window case works on: the pair, the MR (filled with a pattern),
/// a local buffer at `a`, and the window.
// Field order: the window goes first. rxe 6.1 holds a reference to the
// QP a type-2 window is bound to, so destroying that QP first stalls
// (`__rxe_cleanup` waits for it, about 50 s under TCG, and warns).
struct Win {
    mw: Mw,
    mr: Mr,
    local: Mr,
    s: Setup,
}

/// Fresh QPs, an MR of [`MR_LEN`] bytes with [`MR_ACCESS`] holding
/// `pattern(MR_LEN, 5)`, and a window of `ty`, not bound yet.
fn win(dev: &str, ty: MwType) -> Result<Win, Stop> {
    let s = mw_setup(dev)?;
    let mw = s.pd.alloc_mw(ty).map_err(|e| stop(e, "Pd::alloc_mw"))?;
    let mr =
        s.pd.alloc_mr(MR_LEN, MR_ACCESS)
            .map_err(|e| Err(e.into()))?;
    mr.write(0, &pattern(MR_LEN, 5))
        .map_err(|e| Err(e.into()))?;
    let local =
        s.pd.alloc_mr(MR_LEN, Access::LOCAL_WRITE)
            .map_err(|e| Err(e.into()))?;
    Ok(Win { mw, mr, local, s })
}

impl Win {
    /// Binds the window over `[off, off + len)` of the MR with `access`
    /// on `b`: type 1 through `Qp::bind_mw`, type 2 as a bind WR; polls
    /// its completion (BIND_MW, success). Returns the new rkey.
    fn bind(&mut self, off: usize, len: usize, access: Access) -> Result<Rkey, Stop> {
        let bind = MwBind::new(&self.mr, off, len, access);
        let rkey = match self.mw.mw_type() {
            MwType::One => self
                .s
                .b
                .bind_mw(&self.mw, bind, 70, SendFlags::SIGNALED)
                .map_err(|e| stop(e, "Qp::bind_mw"))?,
            MwType::Two => {
                self.s
                    .b
                    .post_send(&[SendWr::bind_mw(70, &self.mw, bind).signaled()])
                    .map_err(|e| stop(e, "a type-2 bind WR"))?;
                self.mw.rkey()
            }
        };
        let c = poll_one(&mut self.s.b).map_err(Err)?;
        if (c.status, c.wr_id, c.opcode) != (WcStatus::SUCCESS, 70, WcOpcode::BIND_MW) {
            return Err(Err(Failure(format!("the bind's completion: {c:?}"))));
        }
        if rkey != self.mw.rkey() {
            return Err(Err(Failure(format!(
                "the bind returned {rkey:?}, the window says {:?}",
                self.mw.rkey()
            ))));
        }
        Ok(rkey)
    }

    /// The window's address `off` bytes from the MR's start, through `rkey`.
    fn at(&self, off: usize, rkey: Rkey) -> RemoteAddr {
        RemoteAddr {
            addr: self.mr.addr() + off as u64,
            rkey,
        }
    }

    /// `a` WRITEs `len` bytes of `pattern(len, seed)` to `to`; returns the
    /// completion's status.
    fn write(&mut self, to: RemoteAddr, len: usize, seed: u8) -> Result<WcStatus, Failure> {
        self.local.write(0, &pattern(len, seed))?;
        let sge = [Sge::new(&self.local, 0, len as u32)?];
        self.s
            .a
            .post_send(&[SendWr::rdma_write(seed as u64, &sge, to).signaled()])?;
        let c = poll_one(&mut self.s.a)?;
        check_eq!(c.wr_id, seed as u64, "the WRITE's completion");
        Ok(c.status)
    }

    /// `a` READs `len` bytes from `from` into its buffer at `MR_LEN / 2`;
    /// returns the completion's status.
    fn read(&mut self, from: RemoteAddr, len: usize) -> Result<WcStatus, Failure> {
        let sge = [Sge::new(&self.local, MR_LEN / 2, len as u32)?];
        self.s
            .a
            .post_send(&[SendWr::rdma_read(90, &sge, from).signaled()])?;
        let c = poll_one(&mut self.s.a)?;
        check_eq!(c.wr_id, 90, "the READ's completion");
        Ok(c.status)
    }

    /// The MR holds `want`.
    fn mr_is(&self, want: &[u8], what: &str) -> Result<(), Failure> {
        check!(contents(&self.mr)? == want, "the MR's bytes {what}");
        Ok(())
    }
}

/// `want` with `pattern(len, seed)` at `off`: what the MR holds after a
/// WRITE of that pattern landed there.
fn written(mut want: Vec<u8>, off: usize, len: usize, seed: u8) -> Vec<u8> {
    want[off..off + len].copy_from_slice(&pattern(len, seed));
    want
}

/// A READ and a WRITE through a window of each type land inside its
/// range: the WRITE's bytes at the window's address plus its offset, the
/// rest of the MR unchanged; the READ returns the MR's bytes there.
pub(super) fn window_read_and_write_land_in_its_range(dev: &str) -> CaseResult {
    let mut notes = Vec::new();
    for ty in [MwType::One, MwType::Two] {
        let mut w = match win(dev, ty) {
            Ok(w) => w,
            Err(stop) => return stop,
        };
        let rkey = match w.bind(WIN_OFF, WIN_LEN, WIN_RW) {
            Ok(k) => k,
            Err(stop) => return stop,
        };
        check!(rkey != w.mr.rkey(), "{ty:?}: the window's rkey is its own");
        let st = w.write(w.at(WIN_OFF + 256, rkey), 512, 11)?;
        check_eq!(st, WcStatus::SUCCESS, "{ty:?}: a WRITE through the window");
        let want = written(pattern(MR_LEN, 5), WIN_OFF + 256, 512, 11);
        w.mr_is(&want, &format!("after a {ty:?} window's WRITE"))?;
        let st = w.read(w.at(WIN_OFF + WIN_LEN - 512, rkey), 512)?;
        check_eq!(st, WcStatus::SUCCESS, "{ty:?}: a READ through the window");
        let mut got = vec![0; 512];
        w.local.read(MR_LEN / 2, &mut got)?;
        check!(
            got[..] == want[WIN_OFF + WIN_LEN - 512..WIN_OFF + WIN_LEN],
            "{ty:?}: the READ returned the window's last 512 bytes"
        );
        notes.push(format!(
            "{ty:?}: rkey {:#x} (the MR's {:#x})",
            rkey.0,
            w.mr.rkey().0
        ));
    }
    passed(notes)
}

/// How a revocation case takes the window away.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Revoke {
    /// Type 2: a LOCAL_INV WR on `b`.
    LocalInv,
    /// Type 2: `a`'s SEND with invalidate into a receive at `b`.
    SendWithInv,
    /// Type 1: a zero-length bind (`Qp::unbind_mw`) on `b`.
    Unbind,
}

/// Binds, WRITEs through the window (lands), revokes as `how` says, then
/// the same WRITE is refused (REM_ACCESS_ERR at `a`) and the MR is as it
/// was after the first.
fn revoked_window_refuses(dev: &str, how: Revoke) -> CaseResult {
    let ty = if how == Revoke::Unbind {
        MwType::One
    } else {
        MwType::Two
    };
    let mut w = match win(dev, ty) {
        Ok(w) => w,
        Err(stop) => return stop,
    };
    let rkey = match w.bind(WIN_OFF, WIN_LEN, WIN_RW) {
        Ok(k) => k,
        Err(stop) => return stop,
    };
    let to = w.at(WIN_OFF + 64, rkey);
    check_eq!(w.write(to, 256, 21)?, WcStatus::SUCCESS, "the WRITE before");
    let want = written(pattern(MR_LEN, 5), WIN_OFF + 64, 256, 21);
    let mut note = String::new();
    match how {
        Revoke::LocalInv => {
            or_stop!(
                w.s.b.post_send(&[SendWr::local_inv(71, rkey).signaled()]),
                "a LOCAL_INV WR"
            );
            let c = poll_one(&mut w.s.b)?;
            check_eq!(
                (c.status, c.wr_id, c.opcode),
                (WcStatus::SUCCESS, 71, WcOpcode::LOCAL_INV),
                "the LOCAL_INV's completion"
            );
        }
        Revoke::SendWithInv => {
            let rbuf = w.s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
            w.s.b
                .post_recv(&[RecvWr::new(72, &[Sge::new(&rbuf, 0, 64)?])])?;
            let msg = [Sge::new(&w.local, 0, 16)?];
            or_stop!(
                w.s.a
                    .post_send(&[SendWr::send_with_inv(73, &msg, rkey).signaled()]),
                "a SEND with invalidate"
            );
            let c = poll_one(&mut w.s.a)?;
            check_eq!(
                (c.status, c.wr_id, c.opcode),
                (WcStatus::SUCCESS, 73, WcOpcode::SEND),
                "the SEND with invalidate at the requester"
            );
            let r = poll_one(&mut w.s.b)?;
            check_eq!(
                (r.status, r.wr_id, r.opcode, r.byte_len),
                (WcStatus::SUCCESS, 72, WcOpcode::RECV, 16),
                "its receive"
            );
            check_eq!(
                r.invalidated_rkey(),
                Some(rkey),
                "the receive names the invalidated rkey"
            );
            note = format!("the receive named rkey {:#x}", rkey.0);
        }
        Revoke::Unbind => {
            let after = or_stop!(
                w.s.b.unbind_mw(&w.mw, 74, SendFlags::SIGNALED),
                "Qp::unbind_mw"
            );
            let c = poll_one(&mut w.s.b)?;
            check_eq!(
                (c.status, c.wr_id, c.opcode),
                (WcStatus::SUCCESS, 74, WcOpcode::BIND_MW),
                "the zero-length bind's completion"
            );
            check!(after != rkey, "the unbind gives the window a new rkey");
        }
    }
    check_eq!(
        w.write(to, 256, 22)?,
        WcStatus::REM_ACCESS_ERR,
        "the same WRITE after {how:?}"
    );
    w.mr_is(&want, &format!("after the refused WRITE ({how:?})"))?;
    passed(vec![note])
}

pub(super) fn window_type_2_refuses_after_a_local_inv(dev: &str) -> CaseResult {
    revoked_window_refuses(dev, Revoke::LocalInv)
}

pub(super) fn window_type_2_refuses_after_a_send_with_invalidate(dev: &str) -> CaseResult {
    revoked_window_refuses(dev, Revoke::SendWithInv)
}

pub(super) fn window_type_1_refuses_after_a_zero_length_bind(dev: &str) -> CaseResult {
    revoked_window_refuses(dev, Revoke::Unbind)
}

/// A window bound with REMOTE_READ only over an MR that allows READ and
/// WRITE: a READ through it lands, a WRITE is refused (REM_ACCESS_ERR)
/// and the MR is unchanged.
pub(super) fn window_grants_less_than_its_mr(dev: &str) -> CaseResult {
    let mut w = match win(dev, MwType::Two) {
        Ok(w) => w,
        Err(stop) => return stop,
    };
    let rkey = match w.bind(WIN_OFF, WIN_LEN, Access::REMOTE_READ) {
        Ok(k) => k,
        Err(stop) => return stop,
    };
    check_eq!(
        w.read(w.at(WIN_OFF, rkey), 256)?,
        WcStatus::SUCCESS,
        "a READ through a REMOTE_READ window"
    );
    let mut got = vec![0; 256];
    w.local.read(MR_LEN / 2, &mut got)?;
    check!(
        got[..] == pattern(MR_LEN, 5)[WIN_OFF..WIN_OFF + 256],
        "the READ's bytes"
    );
    check_eq!(
        w.write(w.at(WIN_OFF, rkey), 256, 31)?,
        WcStatus::REM_ACCESS_ERR,
        "a WRITE through a REMOTE_READ window (its MR allows WRITE)"
    );
    w.mr_is(&pattern(MR_LEN, 5), "after the refused WRITE")?;
    passed(vec![])
}

/// A bind over an MR registered without MW_BIND is refused at post, for
/// either type, with `MwRefused(NoMwBind)`: nothing written to the send
/// queue, nothing completes; the QP then binds over an MR with MW_BIND,
/// and a WRITE through that window lands.
pub(super) fn window_bind_on_an_mr_without_mw_bind_is_refused(dev: &str) -> CaseResult {
    let mut w = match win(dev, MwType::Two) {
        Ok(w) => w,
        Err(stop) => return stop,
    };
    let one = or_stop!(w.s.pd.alloc_mw(MwType::One), "Pd::alloc_mw(One)");
    let plain = w.s.pd.alloc_mr(
        4096,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    )?;
    let bind = MwBind::new(&plain, 0, 4096, WIN_RW);
    let before = ring_snapshot(&w.s.b);
    let r = w.s.b.bind_mw(&one, bind, 1, SendFlags::SIGNALED);
    check!(
        matches!(r, Err(Error::MwRefused(MwRefusal::NoMwBind))),
        "a type-1 bind over an MR without MW_BIND: {r:?}"
    );
    let r =
        w.s.b
            .post_send(&[SendWr::bind_mw(2, &w.mw, bind).signaled()]);
    check!(
        matches!(r, Err(Error::MwRefused(MwRefusal::NoMwBind))),
        "a type-2 bind WR over an MR without MW_BIND: {r:?}"
    );
    check!(
        ring_snapshot(&w.s.b) == before,
        "the refused binds wrote to the send queue"
    );
    nothing_completes(&mut w.s.b)?;
    let rkey = match w.bind(WIN_OFF, WIN_LEN, WIN_RW) {
        Ok(k) => k,
        Err(stop) => return stop,
    };
    check_eq!(
        w.write(w.at(WIN_OFF, rkey), 128, 41)?,
        WcStatus::SUCCESS,
        "a WRITE through the window bound after the refusals"
    );
    w.mr_is(
        &written(pattern(MR_LEN, 5), WIN_OFF, 128, 41),
        "after the WRITE",
    )?;
    passed(vec![])
}

/// A window over `[WIN_OFF, WIN_OFF + WIN_LEN)` refuses an access inside
/// its MR but outside its range: a WRITE wholly past its end, and (fresh
/// QPs) one that straddles its end; the MR is unchanged. Skipped on rxe.
pub(super) fn window_refuses_inside_the_mr_outside_its_range(dev: &str) -> CaseResult {
    if is_rxe(dev) {
        return skipped(RXE_WINDOW_BOUNDS);
    }
    for (what, off, len) in [
        ("wholly past the window's end", WIN_OFF + WIN_LEN + 512, 256),
        ("straddling the window's end", WIN_OFF + WIN_LEN - 8, 16),
        ("before the window's start", WIN_OFF - 256, 128),
    ] {
        let mut w = match win(dev, MwType::Two) {
            Ok(w) => w,
            Err(stop) => return stop,
        };
        let rkey = match w.bind(WIN_OFF, WIN_LEN, WIN_RW) {
            Ok(k) => k,
            Err(stop) => return stop,
        };
        check_eq!(
            w.write(w.at(off, rkey), len, 51)?,
            WcStatus::REM_ACCESS_ERR,
            "a WRITE inside the MR, {what}"
        );
        w.mr_is(&pattern(MR_LEN, 5), &format!("after a WRITE {what}"))?;
    }
    passed(vec![])
}

/// A window over the MR's last 2 KiB refuses a WRITE that runs past the
/// MR's end (on every device, rxe too); the MR is unchanged.
pub(super) fn window_refuses_beyond_the_mr(dev: &str) -> CaseResult {
    let mut w = match win(dev, MwType::Two) {
        Ok(w) => w,
        Err(stop) => return stop,
    };
    let rkey = match w.bind(MR_LEN - WIN_LEN, WIN_LEN, WIN_RW) {
        Ok(k) => k,
        Err(stop) => return stop,
    };
    check_eq!(
        w.write(w.at(MR_LEN - 64, rkey), 128, 61)?,
        WcStatus::REM_ACCESS_ERR,
        "a WRITE through the window past the MR's end"
    );
    w.mr_is(&pattern(MR_LEN, 5), "after the refused WRITE")?;
    passed(vec![])
}

/// A type-2 bind behind a WRITE on the same send queue (`b`'s), fenced.
///
/// The ordering checked: a bind does not wait for an earlier WRITE's ACK
/// unless fenced (rxe runs a bind when its requester reaches it; mlx5
/// fences only the WQE after a UMR). With `SendFlags::FENCE` the bind
/// waits until the WRITE before it has completed: the two complete in
/// posting order, both successfully, the WRITE's 64 KiB have landed, and
/// the window the bind made serves `a`'s WRITE at once. (An unfenced bind
/// racing ahead of the WRITE is allowed, not observable here: the case
/// does not check it.)
pub(super) fn window_type_2_bind_fenced_behind_a_write_completes_in_order(dev: &str) -> CaseResult {
    let mut w = match win(dev, MwType::Two) {
        Ok(w) => w,
        Err(stop) => return stop,
    };
    const BIG: usize = 64 << 10;
    let src = w.s.pd.alloc_mr(BIG, Access::LOCAL_WRITE)?;
    src.write(0, &pattern(BIG, 81))?;
    let dst =
        w.s.pd
            .alloc_mr(BIG, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, BIG as u32)?];
    let bind = MwBind::new(&w.mr, WIN_OFF, WIN_LEN, WIN_RW);
    or_stop!(
        w.s.b.post_send(&[
            SendWr::rdma_write(80, &sge, remote(&dst, 0)).signaled(),
            SendWr::bind_mw(81, &w.mw, bind).fence().signaled(),
        ]),
        "a WRITE then a fenced type-2 bind WR"
    );
    let rkey = w.mw.rkey();
    let got = poll_until(&mut w.s.b, 2)?;
    let seen: Vec<_> = got.iter().map(|c| (c.wr_id, c.status, c.opcode)).collect();
    check_eq!(
        seen,
        vec![
            (80, WcStatus::SUCCESS, WcOpcode::RDMA_WRITE),
            (81, WcStatus::SUCCESS, WcOpcode::BIND_MW)
        ],
        "the WRITE, then the fenced bind"
    );
    check!(
        contents(&dst)? == pattern(BIG, 81),
        "the WRITE's bytes landed"
    );
    check_eq!(
        w.write(w.at(WIN_OFF + 100, rkey), 200, 82)?,
        WcStatus::SUCCESS,
        "a WRITE through the window the fenced bind made"
    );
    w.mr_is(
        &written(pattern(MR_LEN, 5), WIN_OFF + 100, 200, 82),
        "after the WRITE through the window",
    )?;
    passed(vec![])
}
