//! Memory windows between two sides (issue 31): side B allocates, binds
//! and revokes windows over its own MRs; side A reaches them through their
//! rkeys. The window work of side B, shared by [`super::LocalPeer`] and
//! the server's peer protocol (its `MW`, `BIND`, `UNBIND` and `LINV`
//! lines), and the cases.
//!
//! Both sides' QPs are made with `QpConfig::memory_windows`
//! ([`super::TwoHostRun::RcWindows`]). Where B's device has no windows
//! (`Pd::alloc_mw` refuses with `Error::Unsupported`), each case is
//! skipped with that reason. A refused access puts both QPs in ERR: each
//! case makes one refused access at most, last.

use super::super::{passed, poll_one, skipped};
use super::*;
use rdma_direct::{Feature, Mw, MwBind, MwType, SendFlags};

/// A window on side B.
#[derive(Clone, Copy, Debug)]
pub struct PeerMw {
    pub id: u32,
}

/// The wr_id of B's binds and invalidations (polled at once by B).
const B_WR: u64 = 0xb1d;

fn type_number(t: MwType) -> u8 {
    match t {
        MwType::One => 1,
        MwType::Two => 2,
    }
}

/// Side B allocates a window of `t` on `pd`: its id in `mws` and rkey, or
/// (`Ok(Err(why))`) the device's refusal of windows.
pub(super) fn b_alloc_mw(
    pd: &Pd,
    mws: &mut Vec<Mw>,
    t: MwType,
) -> Result<Result<(u32, Rkey), String>, Failure> {
    match pd.alloc_mw(t) {
        Ok(mw) => {
            let k = mw.rkey();
            mws.push(mw);
            Ok(Ok((mws.len() as u32 - 1, k)))
        }
        Err(
            e @ Error::Unsupported {
                feature: Feature::MemoryWindows,
                ..
            },
        ) => Ok(Err(e.to_string())),
        Err(e) => Err(Failure(format!("side B: Pd::alloc_mw: {e}"))),
    }
}

pub(super) fn b_mw(mws: &[Mw], id: u64) -> Result<&Mw, Failure> {
    usize::try_from(id)
        .ok()
        .and_then(|i| mws.get(i))
        .ok_or_else(|| Failure(format!("no window {id}")))
}

/// Polls side B's completion of its bind or invalidation: success, `op`.
fn b_completes(qp: &mut Qp, op: WcOpcode, what: &str) -> Result<(), Failure> {
    let c = poll_one(qp)?;
    if (c.status, c.wr_id, c.opcode) != (WcStatus::SUCCESS, B_WR, op) {
        return Err(Failure(format!("side B's {what}: {c:?}")));
    }
    Ok(())
}

/// Side B binds window `mw` over `len` bytes of MR `mr` from `off` with
/// `access` (type 1: `Qp::bind_mw`; type 2: a bind WR), signaled, and
/// polls the completion. Returns the window's new rkey.
pub(super) fn b_bind(
    qp: &mut Qp,
    mr: &Mr,
    mw: &Mw,
    off: usize,
    len: usize,
    access: Access,
) -> Result<Rkey, Failure> {
    let bind = MwBind::new(mr, off, len, access);
    let rkey = match mw.mw_type() {
        MwType::One => qp.bind_mw(mw, bind, B_WR, SendFlags::SIGNALED)?,
        MwType::Two => {
            qp.post_send(&[SendWr::bind_mw(B_WR, mw, bind).signaled()])?;
            mw.rkey()
        }
    };
    b_completes(qp, WcOpcode::BIND_MW, "bind")?;
    Ok(rkey)
}

/// Side B's zero-length bind of type-1 window `mw`; returns its new rkey.
pub(super) fn b_unbind(qp: &mut Qp, mw: &Mw) -> Result<Rkey, Failure> {
    let k = qp.unbind_mw(mw, B_WR, SendFlags::SIGNALED)?;
    b_completes(qp, WcOpcode::BIND_MW, "zero-length bind")?;
    Ok(k)
}

/// Side B's LOCAL_INV of `rkey`, polled.
pub(super) fn b_local_inv(qp: &mut Qp, rkey: Rkey) -> Result<(), Failure> {
    qp.post_send(&[SendWr::local_inv(B_WR, rkey).signaled()])?;
    b_completes(qp, WcOpcode::LOCAL_INV, "LOCAL_INV")
}

/// The server's window lines; `None` for any other.
///
/// | command | answer |
/// |---|---|
/// | `MW <1 or 2>` | `OK <id> <rkey>`, or `OK - <why>` where the device has no windows |
/// | `BIND <mw id> <mr id> <offset> <len> <access bits>` | `OK <rkey>` (bound, B's completion polled) |
/// | `UNBIND <mw id>` | `OK <rkey>` (a type-1 zero-length bind, polled) |
/// | `LINV <rkey>` | `OK` (a LOCAL_INV, polled) |
pub(super) fn mw_command(
    line: &str,
    pd: &Pd,
    qp: &mut Qp,
    mrs: &[Option<Mr>],
    mws: &mut Vec<Mw>,
) -> Option<Result<String, Failure>> {
    let f: Vec<&str> = line.split(' ').collect();
    let num = |i: usize| -> Result<u64, Failure> {
        f.get(i)
            .and_then(|x| x.parse().ok())
            .ok_or_else(|| Failure(format!("argument {i} of `{line}`")))
    };
    let r = (|| match f.first().copied().unwrap_or("") {
        "MW" => {
            let t = match num(1)? {
                1 => MwType::One,
                2 => MwType::Two,
                n => return Err(Failure(format!("window type {n}"))),
            };
            Ok(Some(match b_alloc_mw(pd, mws, t)? {
                Ok((id, k)) => format!("{id} {}", k.0),
                Err(why) => format!("- {why}"),
            }))
        }
        "BIND" => {
            let access = u32::try_from(num(5)?)
                .ok()
                .and_then(Access::from_bits)
                .ok_or_else(|| Failure("access bits".into()))?;
            let mw = b_mw(mws, num(1)?)?;
            let mr = peer_mr(mrs, num(2)?)?;
            let k = b_bind(qp, mr, mw, num(3)? as usize, num(4)? as usize, access)?;
            Ok(Some(k.0.to_string()))
        }
        "UNBIND" => Ok(Some(b_unbind(qp, b_mw(mws, num(1)?)?)?.0.to_string())),
        "LINV" => {
            let k = u32::try_from(num(1)?).map_err(|_| Failure("an rkey".into()))?;
            b_local_inv(qp, Rkey(k))?;
            Ok(Some(String::new()))
        }
        _ => Ok(None),
    })();
    r.transpose()
}

/// `MW`'s answer: the window, or the device's refusal.
pub(super) fn parse_mw(a: &str) -> Result<Result<PeerMw, String>, Failure> {
    if let Some(why) = a.strip_prefix("- ") {
        return Ok(Err(why.to_string()));
    }
    let f: Vec<u64> = a.split(' ').filter_map(|x| x.parse().ok()).collect();
    match f[..] {
        [id, _rkey] => Ok(Ok(PeerMw {
            id: u32::try_from(id).map_err(|_| bad("MW"))?,
        })),
        _ => Err(bad("MW")),
    }
}

/// `MW`'s command line.
pub(super) fn mw_line(t: MwType) -> String {
    format!("MW {}", type_number(t))
}

/// An rkey answer (`BIND`, `UNBIND`).
pub(super) fn parse_rkey(a: &str, what: &str) -> Result<Rkey, Failure> {
    a.parse().map(Rkey).map_err(|_| bad(what))
}

// ---- the cases ----

const MR_LEN: usize = 8192;
const WIN_OFF: usize = 1024;
const WIN_LEN: usize = 2048;
const MR_ACCESS: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::MW_BIND);
const WIN_RW: Access = Access::REMOTE_WRITE.union(Access::REMOTE_READ);

/// Side B's MR of [`MR_LEN`] bytes holding `pattern(MR_LEN, 7)`, and a
/// window of `t` on it, not bound; `Err(skip)` where B has no windows.
fn b_window(b: &mut dyn Peer, t: MwType) -> Result<Result<(PeerMr, PeerMw), CaseResult>, Failure> {
    let mr = b.alloc_mr(MR_LEN, MR_ACCESS)?;
    b.write(&mr, 0, &pattern(MR_LEN, 7))?;
    Ok(match b.alloc_mw(t)? {
        Ok(mw) => Ok((mr, mw)),
        Err(why) => Err(skipped(format!("no memory windows at side B: {why}"))),
    })
}

/// `mr`'s address `off`, through `rkey`.
fn at(mr: &PeerMr, off: usize, rkey: Rkey) -> RemoteAddr {
    RemoteAddr {
        addr: mr.addr + off as u64,
        rkey,
    }
}

/// A WRITES `len` bytes of `pattern(len, seed)` from `local` to `to`;
/// returns the status.
fn a_write(
    a: &mut Qp,
    local: &Mr,
    to: RemoteAddr,
    len: usize,
    seed: u8,
) -> Result<WcStatus, Failure> {
    local.write(0, &pattern(len, seed))?;
    let sge = [Sge::new(local, 0, len as u32)?];
    a.post_send(&[SendWr::rdma_write(seed as u64, &sge, to).signaled()])?;
    let c = poll_one(a)?;
    check_eq!(c.wr_id, seed as u64, "A's WRITE");
    Ok(c.status)
}

fn with(mut v: Vec<u8>, off: usize, len: usize, seed: u8) -> Vec<u8> {
    v[off..off + len].copy_from_slice(&pattern(len, seed));
    v
}

/// A type-2 window of side B's: A's WRITE lands inside its range (the
/// rest of B's MR unchanged) and A's READ returns its bytes; B's
/// LOCAL_INV revokes it: A's next WRITE is refused (REM_ACCESS_ERR), B's
/// memory unchanged, and B's QP reaches ERR.
pub(super) fn th_window_type_2_read_write_then_local_inv(
    a: &mut Qp,
    pd: &Pd,
    b: &mut dyn Peer,
) -> CaseResult {
    let (mr, mw) = match b_window(b, MwType::Two)? {
        Ok(x) => x,
        Err(skip) => return skip,
    };
    let rkey = b.bind_mw(&mw, &mr, WIN_OFF, WIN_LEN, WIN_RW)?;
    let local = pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    check_eq!(
        a_write(a, &local, at(&mr, WIN_OFF + 128, rkey), 256, 1)?,
        WcStatus::SUCCESS,
        "A's WRITE through B's window"
    );
    let want = with(pattern(MR_LEN, 7), WIN_OFF + 128, 256, 1);
    check!(b.read(&mr, 0, MR_LEN)? == want, "B's MR after the WRITE");
    let sge = [Sge::new(&local, 2048, 512)?];
    a.post_send(&[SendWr::rdma_read(2, &sge, at(&mr, WIN_OFF + 1024, rkey)).signaled()])?;
    let c = poll_one(a)?;
    check_eq!(
        (c.status, c.wr_id),
        (WcStatus::SUCCESS, 2),
        "A's READ through B's window"
    );
    let mut got = vec![0; 512];
    local.read(2048, &mut got)?;
    check!(
        got[..] == want[WIN_OFF + 1024..WIN_OFF + 1536],
        "the READ's bytes"
    );
    b.local_inv(rkey)?;
    check_eq!(
        a_write(a, &local, at(&mr, WIN_OFF + 128, rkey), 256, 3)?,
        WcStatus::REM_ACCESS_ERR,
        "A's WRITE after B's LOCAL_INV"
    );
    check!(
        b.read(&mr, 0, MR_LEN)? == want,
        "B's MR after the refused WRITE"
    );
    responder_reaches_err(b)?;
    passed(vec![format!("window rkey {:#x}", rkey.0)])
}

/// A's SEND with invalidate names B's type-2 window: B's receive
/// completion says which rkey it invalidated; A's WRITE through it is then
/// refused and B's memory unchanged.
pub(super) fn th_window_send_with_invalidate_revokes_bs_window(
    a: &mut Qp,
    pd: &Pd,
    b: &mut dyn Peer,
) -> CaseResult {
    let (mr, mw) = match b_window(b, MwType::Two)? {
        Ok(x) => x,
        Err(skip) => return skip,
    };
    let rkey = b.bind_mw(&mw, &mr, WIN_OFF, WIN_LEN, WIN_RW)?;
    let rbuf = b.alloc_mr(64, Access::LOCAL_WRITE)?;
    b.post_recv(5, &[(rbuf, 0, 64)])?;
    let local = pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    local.write(0, &pattern(32, 9))?;
    let sge = [Sge::new(&local, 0, 32)?];
    a.post_send(&[SendWr::send_with_inv(4, &sge, rkey).signaled()])?;
    let c = poll_one(a)?;
    check_eq!(
        (c.status, c.wr_id, c.opcode),
        (WcStatus::SUCCESS, 4, WcOpcode::SEND),
        "A's SEND with invalidate"
    );
    let r = b.poll(1)?[0];
    check_eq!(
        (r.status, r.wr_id, r.opcode, r.byte_len),
        (WcStatus::SUCCESS, 5, WcOpcode::RECV, 32),
        "B's receive"
    );
    check_eq!(
        r.invalidated_rkey(),
        Some(rkey),
        "the rkey B's receive names"
    );
    check!(
        b.read(&rbuf, 0, 32)? == pattern(32, 9),
        "the SEND's bytes at B"
    );
    check_eq!(
        a_write(a, &local, at(&mr, WIN_OFF, rkey), 64, 6)?,
        WcStatus::REM_ACCESS_ERR,
        "A's WRITE after its SEND with invalidate"
    );
    check!(
        b.read(&mr, 0, MR_LEN)? == pattern(MR_LEN, 7),
        "B's MR after the refused WRITE"
    );
    passed(vec![format!("B's receive named rkey {:#x}", rkey.0)])
}

/// A type-1 window of side B's: A's WRITE lands; B's zero-length bind
/// (`Qp::unbind_mw`) revokes it: the same WRITE is refused, B's memory
/// unchanged.
pub(super) fn th_window_type_1_unbind_revokes(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let (mr, mw) = match b_window(b, MwType::One)? {
        Ok(x) => x,
        Err(skip) => return skip,
    };
    let rkey = b.bind_mw(&mw, &mr, WIN_OFF, WIN_LEN, WIN_RW)?;
    let local = pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    let to = at(&mr, WIN_OFF + WIN_LEN - 256, rkey);
    check_eq!(
        a_write(a, &local, to, 256, 7)?,
        WcStatus::SUCCESS,
        "A's WRITE through B's type-1 window"
    );
    let want = with(pattern(MR_LEN, 7), WIN_OFF + WIN_LEN - 256, 256, 7);
    check!(b.read(&mr, 0, MR_LEN)? == want, "B's MR after the WRITE");
    let after = b.unbind_mw(&mw)?;
    check!(after != rkey, "the unbind gives the window a new rkey");
    check_eq!(
        a_write(a, &local, to, 256, 8)?,
        WcStatus::REM_ACCESS_ERR,
        "A's WRITE after B's zero-length bind"
    );
    check!(
        b.read(&mr, 0, MR_LEN)? == want,
        "B's MR after the refused WRITE"
    );
    passed(vec![])
}

/// The window cases with side B behind the peer protocol (a
/// [`RemotePeer`] over a localhost TCP connection to the server's
/// `serve_one` in a thread), on the sim: the `MW`, `BIND`, `UNBIND` and
/// `LINV` lines and their answers, as two hosts speak them.
#[cfg(test)]
#[test]
fn the_window_cases_pass_over_the_peer_protocol_on_the_sim() {
    use std::net::{TcpListener, TcpStream};
    let run = TwoHostRun::RcWindows(th_window_type_1_unbind_revokes);
    for (name, case) in [
        (
            "type 2 then LOCAL_INV",
            th_window_type_2_read_write_then_local_inv as TwoHostFn,
        ),
        (
            "SEND with invalidate",
            th_window_send_with_invalidate_revokes_bs_window,
        ),
        ("type 1 unbind", th_window_type_1_unbind_revokes),
    ] {
        let ctx = Context::open(rdma_direct::SIM_DEVICE).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let (mut a, mut b) = pd.create_connected_pair(&run.config()).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let r = std::thread::scope(|s| {
            let pd = &pd;
            let b = &mut b;
            s.spawn(move || {
                let (tcp, _) = listener.accept().unwrap();
                let mut mrs: Vec<Option<Mr>> = Vec::new();
                let mut mws: Vec<Mw> = Vec::new();
                serve_lines(tcp, |line| serve_one(line, pd, b, &mut mrs, &mut mws)).unwrap();
            });
            let tcp = TcpStream::connect(addr).unwrap();
            let mut peer = RemotePeer {
                out: tcp.try_clone().unwrap(),
                inp: BufReader::new(tcp),
            };
            let r = case(&mut a, pd, &mut peer);
            peer.call("BYE").unwrap();
            r
        });
        match r {
            Ok(Outcome::Passed(_)) => {}
            other => panic!("{name}: {other:?}"),
        }
    }
}

/// Malformed window lines are refused (`ERR`), never a panic: an unknown
/// type, a window or MR that does not exist, junk numbers, an unbind of a
/// type-2 window.
#[cfg(test)]
#[test]
fn malformed_window_lines_are_refused() {
    let ctx = Context::open(rdma_direct::SIM_DEVICE).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cfg = TwoHostRun::RcWindows(th_window_type_1_unbind_revokes).config();
    let (_a, mut b) = pd.create_connected_pair(&cfg).unwrap();
    let (mut mrs, mut mws): (Vec<Option<Mr>>, Vec<Mw>) = (Vec::new(), Vec::new());
    let mut ask = |line: &str| serve_one(line, &pd, &mut b, &mut mrs, &mut mws);
    ask(&format!("REG 4096 {}", MR_ACCESS.bits())).unwrap();
    let two = ask("MW 2").unwrap();
    assert!(two.starts_with("0 "), "{two}");
    for line in [
        "MW 3",
        "MW x",
        "BIND 1 0 0 64 6",
        "BIND 0 9 0 64 6",
        "BIND 0 0 x 64 6",
        "BIND 0 0 0 64 4096",
        "BIND 0 0 4000 200 6",
        "UNBIND 0",
        "UNBIND 7",
        "LINV 99999999999",
        "LINV",
    ] {
        assert!(ask(line).is_err(), "`{line}` was accepted");
    }
}
