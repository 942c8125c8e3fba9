//! The two-sided cases of the suite, written against [`Peer`]: side B is
//! either a QP in this process ([`LocalPeer`], on any device) or a QP on
//! another host driven over TCP ([`RemotePeer`], served by
//! `rdma-direct conformance --server`).
//!
//! The peer protocol runs on the TCP connection of the exchange
//! ([`rdma_direct::exchange`]), after it: one command line, one answer line.
//!
//! | command | answer |
//! |---|---|
//! | `REG <len> <access bits>` | `OK <id> <addr> <rkey>` |
//! | `WRITE <id> <offset> <hex bytes>` | `OK` |
//! | `READ <id> <offset> <len>` | `OK <hex bytes>` |
//! | `DEREG <id>` | `OK <live MRs after>` (B drops its handle of MR `<id>`, then answers [`Pd::live_mrs`]; other ids stay) |
//! | `RECV <wr_id> <id>:<offset>:<len>,...` (`-` for none) | `OK` |
//! | `POLL <count> <timeout ms>` | `OK <wr_id>:<status>:<opcode>:<byte_len>:<imm or ->:<qp_num>:<src_qp>...`, at most `count` |
//! | `QUERY` | `OK <state>` |
//! | `ARM <0 or 1: solicited only>` | `OK` (B's CQ raises its next event) |
//! | `WAIT <timeout ms>` | `OK 1` if B's CQ event came, `OK 0` if not |
//! | `ENDPOINT` | `OK <hex of an exchange message>` (B's QP facts) |
//! | `RECONNECT <hex of A's exchange message> <B's first PSN>` | `OK` (B: ERR -> RESET -> INIT -> RTR -> RTS toward A) |
//! | `BYE` | `OK` (the server ends this case) |
//! | `MW`, `BIND`, `UNBIND`, `LINV` | side B's memory windows: see [`windows::mw_command`] |
//!
//! Errors are `ERR <message>`. The lines both protocols share are built and
//! parsed in [`wire`].
//!
//! The UD, UC and SRQ cases ([`TwoHostRun::Built`]) build other QPs on
//! each side and speak a protocol of their own to side B: see [`far`].

mod built_cases;
mod cases;
pub mod far;
mod windows;
mod wire;

use super::{pattern, poll_one, poll_until, CaseResult, Failure, Outcome};
use built_cases::*;
use cases::*;
pub use far::Build;
use rdma_direct::exchange::{self, ConnInfo};
use rdma_direct::{
    Access, Completion, Context, Error, Mr, Pd, Qp, QpConfig, QpState, RecvWr, RemoteAddr, Rkey,
    SendWr, Sge, WcOpcode, WcStatus,
};
use std::io::BufReader;
use std::net::TcpStream;
use std::time::Duration;
pub use windows::PeerMw;
use windows::*;
use wire::*;

/// A memory region on side B.
#[derive(Clone, Copy, Debug)]
pub struct PeerMr {
    pub id: u32,
    pub addr: u64,
    pub rkey: Rkey,
}

impl PeerMr {
    fn at(&self, offset: u64) -> RemoteAddr {
        RemoteAddr {
            addr: self.addr + offset,
            rkey: self.rkey,
        }
    }
}

/// Side B of a two-sided case.
pub trait Peer {
    fn alloc_mr(&mut self, len: usize, access: Access) -> Result<PeerMr, Failure>;
    fn write(&mut self, mr: &PeerMr, offset: usize, data: &[u8]) -> Result<(), Failure>;
    fn read(&mut self, mr: &PeerMr, offset: usize, len: usize) -> Result<Vec<u8>, Failure>;
    /// Drops side B's handle of `mr` (its id is not reused) and returns
    /// B's [`Pd::live_mrs`] after the drop. Once this returns the drop has
    /// happened: a WR side A posts after it is ordered after the drop.
    fn dereg_mr(&mut self, mr: &PeerMr) -> Result<u64, Failure>;
    /// Posts one receive over `(mr, offset, len)` pieces.
    fn post_recv(&mut self, wr_id: u64, sges: &[(PeerMr, usize, u32)]) -> Result<(), Failure>;
    /// Polls until `count` completions came or 20 s passed.
    fn poll(&mut self, count: usize) -> Result<Vec<Completion>, Failure>;
    fn state(&mut self) -> Result<QpState, Failure>;
    /// Side B's QP facts (QPN, GID, ...).
    fn endpoint(&mut self) -> Result<rdma_direct::Endpoint, Failure>;
    /// Side B: ERR -> RESET, then connect again toward `a` (whose first PSN
    /// is `a_psn`), sending from `b_psn`.
    fn reconnect(
        &mut self,
        a: &rdma_direct::Endpoint,
        a_psn: u32,
        b_psn: u32,
    ) -> Result<(), Failure>;
    /// Arms side B's CQ ([`Qp::arm_cq`]).
    fn arm_cq(&mut self, solicited_only: bool) -> Result<(), Failure>;
    /// Waits up to `timeout` for side B's CQ event ([`Qp::wait_cq_event`]).
    fn wait_cq_event(&mut self, timeout: Duration) -> Result<bool, Failure>;
    /// Allocates a window of `t` at side B ([`Pd::alloc_mw`]); `Ok(Err(why))`
    /// where B's device has no windows.
    fn alloc_mw(&mut self, t: rdma_direct::MwType) -> Result<Result<PeerMw, String>, Failure>;
    /// Side B binds `mw` over `len` bytes of `mr` from `offset` with
    /// `access` (type 1 `Qp::bind_mw`, type 2 a bind WR on B's QP), polls
    /// the completion, and returns the window's rkey.
    fn bind_mw(
        &mut self,
        mw: &PeerMw,
        mr: &PeerMr,
        offset: usize,
        len: usize,
        access: Access,
    ) -> Result<Rkey, Failure>;
    /// Side B's zero-length bind of type-1 `mw` ([`Qp::unbind_mw`]), polled;
    /// returns the window's new rkey.
    fn unbind_mw(&mut self, mw: &PeerMw) -> Result<Rkey, Failure>;
    /// Side B's LOCAL_INV of `rkey` on its QP, polled.
    fn local_inv(&mut self, rkey: Rkey) -> Result<(), Failure>;
}

/// Side B in this process: QP `b` of a loopback pair.
pub struct LocalPeer<'a> {
    pub qp: &'a mut Qp,
    pub pd: &'a Pd,
    /// B's MRs by id; a dropped one leaves `None`, so ids never shift.
    pub mrs: Vec<Option<Mr>>,
    /// B's windows by id.
    pub mws: Vec<rdma_direct::Mw>,
}

/// MR `id` of side B's, unless it was never registered or is dropped.
fn peer_mr(mrs: &[Option<Mr>], id: u64) -> Result<&Mr, Failure> {
    usize::try_from(id)
        .ok()
        .and_then(|i| mrs.get(i))
        .and_then(Option::as_ref)
        .ok_or_else(|| Failure(format!("no MR {id}")))
}

impl Peer for LocalPeer<'_> {
    fn alloc_mr(&mut self, len: usize, access: Access) -> Result<PeerMr, Failure> {
        let mr = self.pd.alloc_mr(len, access)?;
        let p = PeerMr {
            id: self.mrs.len() as u32,
            addr: mr.addr(),
            rkey: mr.rkey(),
        };
        self.mrs.push(Some(mr));
        Ok(p)
    }
    fn write(&mut self, mr: &PeerMr, offset: usize, data: &[u8]) -> Result<(), Failure> {
        Ok(peer_mr(&self.mrs, mr.id.into())?.write(offset, data)?)
    }
    fn read(&mut self, mr: &PeerMr, offset: usize, len: usize) -> Result<Vec<u8>, Failure> {
        let mut v = vec![0; len];
        peer_mr(&self.mrs, mr.id.into())?.read(offset, &mut v)?;
        Ok(v)
    }
    fn dereg_mr(&mut self, mr: &PeerMr) -> Result<u64, Failure> {
        dereg(self.pd, &mut self.mrs, mr.id.into())
    }
    fn post_recv(&mut self, wr_id: u64, sges: &[(PeerMr, usize, u32)]) -> Result<(), Failure> {
        let sges = sges
            .iter()
            .map(|(m, o, l)| Ok(Sge::new(peer_mr(&self.mrs, m.id.into())?, *o, *l)?))
            .collect::<Result<Vec<_>, Failure>>()?;
        Ok(self.qp.post_recv(&[RecvWr::new(wr_id, &sges)])?)
    }
    fn poll(&mut self, count: usize) -> Result<Vec<Completion>, Failure> {
        poll_until(self.qp, count)
    }
    fn state(&mut self) -> Result<QpState, Failure> {
        Ok(self.qp.query()?.state)
    }
    fn endpoint(&mut self) -> Result<rdma_direct::Endpoint, Failure> {
        Ok(self.qp.endpoint())
    }
    fn reconnect(
        &mut self,
        a: &rdma_direct::Endpoint,
        a_psn: u32,
        b_psn: u32,
    ) -> Result<(), Failure> {
        reconnect(self.qp, a, a_psn, b_psn)
    }
    fn arm_cq(&mut self, solicited_only: bool) -> Result<(), Failure> {
        Ok(self.qp.arm_cq(solicited_only)?)
    }
    fn wait_cq_event(&mut self, timeout: Duration) -> Result<bool, Failure> {
        Ok(self.qp.wait_cq_event(timeout)?)
    }
    fn alloc_mw(&mut self, t: rdma_direct::MwType) -> Result<Result<PeerMw, String>, Failure> {
        Ok(b_alloc_mw(self.pd, &mut self.mws, t)?.map(|(id, _)| PeerMw { id }))
    }
    fn bind_mw(
        &mut self,
        mw: &PeerMw,
        mr: &PeerMr,
        offset: usize,
        len: usize,
        access: Access,
    ) -> Result<Rkey, Failure> {
        let m = peer_mr(&self.mrs, mr.id.into())?;
        b_bind(
            self.qp,
            m,
            b_mw(&self.mws, mw.id.into())?,
            offset,
            len,
            access,
        )
    }
    fn unbind_mw(&mut self, mw: &PeerMw) -> Result<Rkey, Failure> {
        b_unbind(self.qp, b_mw(&self.mws, mw.id.into())?)
    }
    fn local_inv(&mut self, rkey: Rkey) -> Result<(), Failure> {
        b_local_inv(self.qp, rkey)
    }
}

/// Drops side B's MR `id` (its slot stays, empty) and returns the PD's
/// live registrations after the drop.
fn dereg(pd: &Pd, mrs: &mut [Option<Mr>], id: u64) -> Result<u64, Failure> {
    peer_mr(mrs, id)?;
    drop(mrs[id as usize].take());
    Ok(pd.live_mrs())
}

/// ERR -> RESET, then `connect_remote` toward `a`.
fn reconnect(
    qp: &mut Qp,
    a: &rdma_direct::Endpoint,
    a_psn: u32,
    b_psn: u32,
) -> Result<(), Failure> {
    qp.modify(QpState::Err, &rdma_direct::QpAttr::default())?;
    qp.modify(QpState::Reset, &rdma_direct::QpAttr::default())?;
    Ok(qp.connect_remote(b_psn, a, a_psn)?)
}

fn endpoint_msg(e: &rdma_direct::Endpoint, psn: u32) -> String {
    hex(&ConnInfo {
        endpoint: *e,
        psn,
        rkey: Rkey(0),
        addr: 0,
        len: 0,
        qkey: 0,
        dc_key: None,
    }
    .encode())
}

fn parse_endpoint_msg(h: &str) -> Result<ConnInfo, Failure> {
    let b = unhex(h).ok_or_else(|| bad("an exchange message"))?;
    let m: [u8; exchange::MSG_LEN] = b.try_into().map_err(|_| bad("an exchange message"))?;
    Ok(ConnInfo::decode(&m)?)
}

/// Side B on another host, over the peer protocol.
pub struct RemotePeer {
    out: TcpStream,
    inp: BufReader<TcpStream>,
}

impl RemotePeer {
    fn call(&mut self, line: &str) -> Result<String, Failure> {
        tcp_call(&mut self.out, &mut self.inp, line)
    }
}

impl Peer for RemotePeer {
    fn alloc_mr(&mut self, len: usize, access: Access) -> Result<PeerMr, Failure> {
        parse_reg(&self.call(&format!("REG {len} {}", access.bits()))?)
    }
    fn write(&mut self, mr: &PeerMr, offset: usize, data: &[u8]) -> Result<(), Failure> {
        self.call(&format!("WRITE {} {offset} {}", mr.id, hex(data)))
            .map(|_| ())
    }
    fn read(&mut self, mr: &PeerMr, offset: usize, len: usize) -> Result<Vec<u8>, Failure> {
        let a = self.call(&format!("READ {} {offset} {len}", mr.id))?;
        unhex(&a).ok_or_else(|| bad("READ"))
    }
    fn dereg_mr(&mut self, mr: &PeerMr) -> Result<u64, Failure> {
        self.call(&format!("DEREG {}", mr.id))?
            .parse()
            .map_err(|_| bad("DEREG"))
    }
    fn post_recv(&mut self, wr_id: u64, sges: &[(PeerMr, usize, u32)]) -> Result<(), Failure> {
        self.call(&recv_command(wr_id, sges)).map(|_| ())
    }
    fn poll(&mut self, count: usize) -> Result<Vec<Completion>, Failure> {
        let v = parse_completions(&self.call(&format!("POLL {count} 20000"))?)?;
        if v.len() < count {
            return Err(Failure(format!(
                "peer: {} of {count} completions within 20 s",
                v.len()
            )));
        }
        Ok(v)
    }
    fn endpoint(&mut self) -> Result<rdma_direct::Endpoint, Failure> {
        let a = self.call("ENDPOINT")?;
        Ok(parse_endpoint_msg(&a)?.endpoint)
    }
    fn reconnect(
        &mut self,
        a: &rdma_direct::Endpoint,
        a_psn: u32,
        b_psn: u32,
    ) -> Result<(), Failure> {
        self.call(&format!("RECONNECT {} {b_psn}", endpoint_msg(a, a_psn)))
            .map(|_| ())
    }
    fn arm_cq(&mut self, solicited_only: bool) -> Result<(), Failure> {
        self.call(&format!("ARM {}", solicited_only as u8))
            .map(|_| ())
    }
    fn wait_cq_event(&mut self, timeout: Duration) -> Result<bool, Failure> {
        match self
            .call(&format!("WAIT {}", timeout.as_millis()))?
            .as_str()
        {
            "1" => Ok(true),
            "0" => Ok(false),
            _ => Err(bad("WAIT")),
        }
    }
    fn state(&mut self) -> Result<QpState, Failure> {
        parse_state(&self.call("QUERY")?)
    }
    fn alloc_mw(&mut self, t: rdma_direct::MwType) -> Result<Result<PeerMw, String>, Failure> {
        parse_mw(&self.call(&mw_line(t))?)
    }
    fn bind_mw(
        &mut self,
        mw: &PeerMw,
        mr: &PeerMr,
        offset: usize,
        len: usize,
        access: Access,
    ) -> Result<Rkey, Failure> {
        let line = format!("BIND {} {} {offset} {len} {}", mw.id, mr.id, access.bits());
        parse_rkey(&self.call(&line)?, "BIND")
    }
    fn unbind_mw(&mut self, mw: &PeerMw) -> Result<Rkey, Failure> {
        parse_rkey(&self.call(&format!("UNBIND {}", mw.id))?, "UNBIND")
    }
    fn local_inv(&mut self, rkey: Rkey) -> Result<(), Failure> {
        self.call(&format!("LINV {}", rkey.0)).map(|_| ())
    }
}

/// The QP configuration both sides of a two-host case use.
fn two_host_config() -> QpConfig {
    QpConfig {
        max_send_wr: 64,
        max_send_sge: 4,
        max_inline: 128,
        max_recv_sge: 4,
        // A receive posted late at B travels over TCP to another host, which
        // under TCG can take longer than 6 tries at 0.64 ms each: 6 tries at
        // 491.52 ms cover it.
        min_rnr_timer: 31,
        ..QpConfig::default()
    }
}

/// How side A's and side B's QPs are connected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Connect {
    /// Our TCP exchange ([`rdma_direct::exchange`]) and [`Qp::connect_remote`].
    #[default]
    Tcp,
    /// The RDMA connection manager ([`rdma_direct::cm`], perftest's `-R`), on the
    /// same port number in the CM's port space; the peer protocol still runs
    /// on a TCP connection made first.
    RdmaCm,
}

#[cfg(feature = "verbs")]
type CmConn = rdma_direct::cm::CmConnection;
#[cfg(not(feature = "verbs"))]
type CmConn = ();

/// Where this side connects from: the server's CM listener lives across
/// its cases.
enum Side<'a> {
    #[cfg(feature = "verbs")]
    Server(
        &'a exchange::Listener,
        Option<&'a rdma_direct::cm::CmListener>,
    ),
    #[cfg(not(feature = "verbs"))]
    Server(&'a exchange::Listener, Option<&'a ()>),
    Client(&'a str, u16, Connect),
}

/// One QP connected to a peer's, and the TCP connection the peer protocol
/// runs on (made by the exchange). With [`Connect::RdmaCm`] the QP is
/// connected by the CM instead of the exchanged facts. A 64-byte MR is
/// offered (the cases register their own).
fn connect_over(
    pd: &Pd,
    side: Side<'_>,
    cfg: &QpConfig,
) -> rdma_direct::Result<(Qp, TcpStream, Mr, Option<CmConn>)> {
    let mut qp = pd.create_qp(cfg)?;
    let mr = pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let psn = Qp::random_psn();
    let mine = ConnInfo {
        endpoint: qp.endpoint(),
        psn,
        rkey: mr.rkey(),
        addr: mr.addr(),
        len: 64,
        qkey: 0,
        dc_key: None,
    };
    let (peer, mut tcp) = match side {
        Side::Server(listener, _) => listener.accept(&mine)?,
        Side::Client(host, port, _) => {
            exchange::connect(host, port, Duration::from_secs(60), &mine)?
        }
    };
    let how = match side {
        Side::Server(_, l) => {
            if l.is_some() {
                Connect::RdmaCm
            } else {
                Connect::Tcp
            }
        }
        Side::Client(_, _, how) => how,
    };
    agree_on(&mut tcp, how)?;
    let cm = match side {
        Side::Server(_, None) | Side::Client(_, _, Connect::Tcp) => {
            qp.connect_remote(psn, &peer.endpoint, peer.psn)?;
            None
        }
        #[cfg(feature = "verbs")]
        Side::Server(_, Some(listener)) => {
            let offer = rdma_direct::cm::CmOffer {
                rkey: mr.rkey(),
                addr: mr.addr(),
                len: 64,
            };
            Some(listener.accept(&mut qp, &offer, Duration::from_secs(60))?.0)
        }
        #[cfg(feature = "verbs")]
        Side::Client(host, port, Connect::RdmaCm) => {
            let offer = rdma_direct::cm::CmOffer {
                rkey: mr.rkey(),
                addr: mr.addr(),
                len: 64,
            };
            Some(rdma_direct::cm::connect(&mut qp, host, port, &offer, Duration::from_secs(60))?.0)
        }
        #[cfg(not(feature = "verbs"))]
        _ => return Err(Error::Invalid("rdma_cm needs the `verbs` feature".into())),
    };
    exchange::barrier(&mut tcp)?;
    Ok((qp, tcp, mr, cm))
}

/// Each side says how it connects the QPs (one line, `tcp` or `rdma_cm`);
/// a mismatch is an error on both sides at once, not a CM timeout.
fn agree_on(tcp: &mut TcpStream, how: Connect) -> rdma_direct::Result<()> {
    let name = |h| match h {
        Connect::Tcp => "tcp",
        Connect::RdmaCm => "rdma_cm",
    };
    let theirs = exchange::swap_line(tcp, name(how))?;
    if theirs != name(how) {
        return Err(Error::Exchange(format!(
            "this side connects the QPs through {}, the peer through {theirs:?}: give -R on both sides or on neither",
            name(how)
        )));
    }
    Ok(())
}

/// Serves the two-sided cases to one client on `listener` (bound by the
/// caller before it says it waits, kept across the cases), one connection
/// per case, each with a fresh QP connected as `how` says; returns after
/// the last case. With [`Connect::RdmaCm`] the CM listens on the same port
/// number.
pub fn serve(dev: &str, listener: &exchange::Listener, how: Connect) -> rdma_direct::Result<()> {
    let ctx = Context::open(dev)?;
    #[cfg(feature = "verbs")]
    let cm_listener = match how {
        Connect::Tcp => None,
        Connect::RdmaCm => Some(rdma_direct::cm::CmListener::bind(listener.port())?),
    };
    // UD cases resolve through the UDP port space, on the same number.
    #[cfg(feature = "verbs")]
    let ud_listener = match how {
        Connect::Tcp => None,
        Connect::RdmaCm => Some(rdma_direct::cm::CmListener::bind_ud(listener.port())?),
    };
    #[cfg(not(feature = "verbs"))]
    let cm_listener: Option<()> = match how {
        Connect::Tcp => None,
        Connect::RdmaCm => return Err(Error::Invalid("rdma_cm needs the `verbs` feature".into())),
    };
    for case in two_host_cases() {
        let pd = ctx.alloc_pd()?;
        if let TwoHostRun::Built(build, _) = case.run {
            let cm = match how {
                Connect::Tcp => far::CmUd::No(Default::default()),
                #[cfg(feature = "verbs")]
                Connect::RdmaCm => far::CmUd::Accept(ud_listener.as_ref().expect("bound above")),
                #[cfg(not(feature = "verbs"))]
                Connect::RdmaCm => unreachable!("refused above"),
            };
            far::serve_built(&ctx, &pd, listener, cm, case.name, build)?;
            continue;
        }
        let (mut qp, tcp, _mr, _cm) = connect_over(
            &pd,
            Side::Server(listener, cm_listener.as_ref()),
            &case.run.config(),
        )?;
        let mut mrs: Vec<Option<Mr>> = Vec::new();
        // (Declared after the QP: the windows go first.)
        let mut mws: Vec<rdma_direct::Mw> = Vec::new();
        serve_lines(tcp, |line| {
            serve_one(line, &pd, &mut qp, &mut mrs, &mut mws)
        })?;
    }
    Ok(())
}

fn serve_one(
    line: &str,
    pd: &Pd,
    qp: &mut Qp,
    mrs: &mut Vec<Option<Mr>>,
    mws: &mut Vec<rdma_direct::Mw>,
) -> Result<String, Failure> {
    let f: Vec<&str> = line.split(' ').collect();
    let num = |i: usize| -> Result<u64, Failure> {
        f.get(i)
            .and_then(|x| x.parse().ok())
            .ok_or_else(|| Failure(format!("argument {i} of `{line}`")))
    };
    if let Some(r) = mr_command(line, pd, mrs) {
        return r;
    }
    if let Some(r) = mw_command(line, pd, qp, mrs, mws) {
        return r;
    }
    match f.first().copied().unwrap_or("") {
        "RECV" => {
            let wr_id = num(1)?;
            let list = f.get(2).copied().unwrap_or("-");
            let mut sges = Vec::new();
            if list != "-" {
                for p in list.split(',') {
                    let (id, off, len) = parse_sge(p)?;
                    sges.push(Sge::new(peer_mr(mrs, id)?, off, len)?);
                }
            }
            qp.post_recv(&[RecvWr::new(wr_id, &sges)])?;
            Ok(String::new())
        }
        "POLL" => poll_text(qp, num(1)? as usize, num(2)?),
        "QUERY" => Ok(format!("{:?}", qp.query()?.state)),
        "ARM" => {
            qp.arm_cq(num(1)? != 0)?;
            Ok(String::new())
        }
        "WAIT" => {
            let ms = num(1)?.min(60_000);
            Ok((qp.wait_cq_event(Duration::from_millis(ms))? as u8).to_string())
        }
        "ENDPOINT" => Ok(endpoint_msg(&qp.endpoint(), 0)),
        "RECONNECT" => {
            let a = parse_endpoint_msg(f.get(1).copied().unwrap_or(""))?;
            reconnect(qp, &a.endpoint, a.psn, num(2)? as u32)?;
            Ok(String::new())
        }
        "BYE" => Ok(String::new()),
        other => Err(Failure(format!("unknown command `{other}`"))),
    }
}

/// A two-sided case: side A's QP and PD, side B behind [`Peer`].
pub type TwoHostFn = fn(&mut Qp, &Pd, &mut dyn Peer) -> CaseResult;

/// One two-sided case: its name, and what it runs over.
#[derive(Clone, Copy)]
pub struct TwoHostCase {
    pub name: &'static str,
    pub run: TwoHostRun,
}

/// What a two-sided case runs over.
#[derive(Clone, Copy)]
pub enum TwoHostRun {
    /// One RC QP a side, connected through the exchange or rdma_cm.
    Rc(TwoHostFn),
    /// As [`Self::Rc`], both QPs made with `QpConfig::memory_windows`.
    RcWindows(TwoHostFn),
    /// What [`Build`] says, connected through the exchange ([`far`]).
    Built(Build, far::BuiltFn),
}

macro_rules! rc {
    ($f:ident) => {
        TwoHostCase {
            name: stringify!($f),
            run: TwoHostRun::Rc($f),
        }
    };
}

impl TwoHostRun {
    /// The QP configuration of both sides of an RC case.
    fn config(&self) -> QpConfig {
        match self {
            TwoHostRun::RcWindows(_) => QpConfig {
                memory_windows: true,
                ..two_host_config()
            },
            _ => two_host_config(),
        }
    }
}

macro_rules! rcw {
    ($f:ident) => {
        TwoHostCase {
            name: stringify!($f),
            run: TwoHostRun::RcWindows($f),
        }
    };
}

macro_rules! built {
    ($f:ident, $b:expr) => {
        TwoHostCase {
            name: stringify!($f),
            run: TwoHostRun::Built($b, $f),
        }
    };
}

/// The two-sided cases, in the order the client runs them and the server
/// serves them.
pub fn two_host_cases() -> &'static [TwoHostCase] {
    const SRQ1: Build = Build::Srq {
        qps: 1,
        max_wr: 16,
        max_sge: 2,
    };
    &[
        rc!(th_write_4096_lands),
        rc!(th_read_lands),
        rc!(th_wrong_rkey_leaves_memory_alone),
        rc!(th_send_and_imm_land_in_receives),
        rc!(th_fetch_and_add),
        rc!(th_error_flushes_and_both_go_to_err),
        rc!(th_every_opcode_at_every_size),
        rc!(th_too_small_receive_fails_both_sides),
        rc!(th_rnr_waits_for_a_late_receive),
        rc!(th_err_reset_reconnect),
        rc!(th_gather_and_scatter_sges),
        rc!(th_compare_and_swap),
        rc!(th_rnr_without_a_receive_exhausts_retries),
        rc!(th_solicited_event_wakes_b),
        rc!(th_inline_at_the_limit_lands),
        rc!(th_unsignaled_stream_lands_in_order),
        rc!(th_dropped_target_refuses_the_next_write),
        built!(th_ud_send_lands_after_the_grh_slot, Build::Ud),
        built!(th_ud_reply_through_an_ah_from_the_receive, Build::Ud),
        built!(th_ud_drops_what_it_cannot_deliver, Build::Ud),
        built!(th_ud_receive_too_small, Build::Ud),
        built!(th_uc_write_lands_and_read_is_refused, Build::Uc),
        built!(th_uc_drops_what_the_responder_cannot_take, Build::Uc),
        built!(th_srq_scatters_a_send_over_two_sges, SRQ1),
        built!(
            th_one_srq_feeds_four_qps,
            Build::Srq {
                qps: 4,
                max_wr: 1024,
                max_sge: 1
            }
        ),
        built!(th_srq_limit_event_is_raised_once_then_rearmed, SRQ1),
        built!(
            th_a_qp_on_an_srq_in_err_leaves_the_srq_to_the_others,
            Build::Srq {
                qps: 2,
                max_wr: 16,
                max_sge: 1
            }
        ),
        rcw!(th_window_type_2_read_write_then_local_inv),
        rcw!(th_window_send_with_invalidate_revokes_bs_window),
        rcw!(th_window_type_1_unbind_revokes),
    ]
}

/// How the failure of a case whose QPs never got connected begins (the
/// server is gone or disagrees: running more cases is pointless).
pub const NOT_CONNECTED: &str = "not connected: ";

/// Runs one two-sided case against a server on `host:port`, the QPs
/// connected as `how` says (the server must use the same).
pub fn run_remote(
    dev: &str,
    host: &str,
    port: u16,
    how: Connect,
    case: &TwoHostCase,
) -> CaseResult {
    let cfg = case.run.config();
    let case = match case.run {
        TwoHostRun::Rc(f) | TwoHostRun::RcWindows(f) => f,
        TwoHostRun::Built(build, f) => {
            return far::run_built_remote(dev, host, port, how, case.name, build, f)
        }
    };
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let (mut qp, tcp, _mr, _cm) = connect_over(&pd, Side::Client(host, port, how), &cfg)
        .map_err(|e| Failure(format!("{NOT_CONNECTED}{e}")))?;
    let out = tcp
        .try_clone()
        .map_err(|e| Failure(format!("socket: {e}")))?;
    let mut peer = RemotePeer {
        out,
        inp: BufReader::new(tcp),
    };
    let r = case(&mut qp, &pd, &mut peer);
    let _ = peer.call("BYE");
    r
}

/// Runs one two-sided case with side B a second QP in this process.
pub fn run_local(dev: &str, case: &TwoHostCase) -> CaseResult {
    let cfg = case.run.config();
    let case = match case.run {
        TwoHostRun::Rc(f) | TwoHostRun::RcWindows(f) => f,
        TwoHostRun::Built(build, f) => return far::run_built_local(dev, build, f),
    };
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let (mut a, mut b) = pd.create_connected_pair(&cfg)?;
    let mut peer = LocalPeer {
        qp: &mut b,
        pd: &pd,
        mrs: Vec::new(),
        mws: Vec::new(),
    };
    case(&mut a, &pd, &mut peer)
}
