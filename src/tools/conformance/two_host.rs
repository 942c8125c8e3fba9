//! The two-sided cases of the suite, written against [`Peer`]: side B is
//! either a QP in this process ([`LocalPeer`], on any device) or a QP on
//! another host driven over TCP ([`RemotePeer`], served by
//! `rdma-direct conformance --server`).
//!
//! The peer protocol runs on the TCP connection of the exchange
//! ([`crate::exchange`]), after it: one command line, one answer line.
//!
//! | command | answer |
//! |---|---|
//! | `REG <len> <access bits>` | `OK <id> <addr> <rkey>` |
//! | `WRITE <id> <offset> <hex bytes>` | `OK` |
//! | `READ <id> <offset> <len>` | `OK <hex bytes>` |
//! | `RECV <wr_id> <id>:<offset>:<len>,...` (`-` for none) | `OK` |
//! | `POLL <count> <timeout ms>` | `OK <wr_id>:<status>:<opcode>:<byte_len>:<imm or ->...` |
//! | `QUERY` | `OK <state>` |
//! | `ARM <0 or 1: solicited only>` | `OK` (B's CQ raises its next event) |
//! | `WAIT <timeout ms>` | `OK 1` if B's CQ event came, `OK 0` if not |
//! | `ENDPOINT` | `OK <hex of an exchange message>` (B's QP facts) |
//! | `RECONNECT <hex of A's exchange message> <B's first PSN>` | `OK` (B: ERR -> RESET -> INIT -> RTR -> RTS toward A) |
//! | `BYE` | `OK` (the server ends this case) |
//!
//! Errors are `ERR <message>`.

use super::{pattern, poll_one, poll_until, CaseResult, Failure, Outcome};
use crate::exchange::{self, ConnInfo};
use crate::{
    Access, Completion, Context, Error, Mr, Pd, Qp, QpConfig, QpState, RecvWr, RemoteAddr, Rkey,
    SendWr, Sge, WcOpcode, WcStatus,
};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A memory region on side B.
#[derive(Clone, Copy, Debug)]
pub struct PeerMr {
    pub id: u32,
    pub addr: u64,
    pub rkey: Rkey,
    pub len: u64,
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
    fn reg_mr(&mut self, len: usize, access: Access) -> Result<PeerMr, Failure>;
    fn write(&mut self, mr: &PeerMr, offset: usize, data: &[u8]) -> Result<(), Failure>;
    fn read(&mut self, mr: &PeerMr, offset: usize, len: usize) -> Result<Vec<u8>, Failure>;
    /// Posts one receive over `(mr, offset, len)` pieces.
    fn post_recv(&mut self, wr_id: u64, sges: &[(PeerMr, usize, u32)]) -> Result<(), Failure>;
    /// Polls until `count` completions came or 20 s passed.
    fn poll(&mut self, count: usize) -> Result<Vec<Completion>, Failure>;
    fn state(&mut self) -> Result<QpState, Failure>;
    /// Side B's QP facts (QPN, GID, ...).
    fn endpoint(&mut self) -> Result<crate::Endpoint, Failure>;
    /// Side B: ERR -> RESET, then connect again toward `a` (whose first PSN
    /// is `a_psn`), sending from `b_psn`.
    fn reconnect(&mut self, a: &crate::Endpoint, a_psn: u32, b_psn: u32) -> Result<(), Failure>;
    /// Arms side B's CQ ([`Qp::arm_cq`]).
    fn arm_cq(&mut self, solicited_only: bool) -> Result<(), Failure>;
    /// Waits up to `timeout` for side B's CQ event ([`Qp::wait_cq_event`]).
    fn wait_cq_event(&mut self, timeout: Duration) -> Result<bool, Failure>;
}

/// Side B in this process: QP `b` of a loopback pair.
pub struct LocalPeer<'a> {
    pub qp: &'a mut Qp,
    pub pd: &'a Pd,
    pub mrs: Vec<Mr>,
}

impl Peer for LocalPeer<'_> {
    fn reg_mr(&mut self, len: usize, access: Access) -> Result<PeerMr, Failure> {
        let mr = self.pd.reg_mr(len, access)?;
        let p = PeerMr {
            id: self.mrs.len() as u32,
            addr: mr.addr(),
            rkey: mr.rkey(),
            len: len as u64,
        };
        self.mrs.push(mr);
        Ok(p)
    }
    fn write(&mut self, mr: &PeerMr, offset: usize, data: &[u8]) -> Result<(), Failure> {
        Ok(self.mrs[mr.id as usize].write(offset, data)?)
    }
    fn read(&mut self, mr: &PeerMr, offset: usize, len: usize) -> Result<Vec<u8>, Failure> {
        let mut v = vec![0; len];
        self.mrs[mr.id as usize].read(offset, &mut v)?;
        Ok(v)
    }
    fn post_recv(&mut self, wr_id: u64, sges: &[(PeerMr, usize, u32)]) -> Result<(), Failure> {
        let sges = sges
            .iter()
            .map(|(m, o, l)| Sge::new(&self.mrs[m.id as usize], *o, *l))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(self.qp.post_recv(&[RecvWr::new(wr_id, &sges)])?)
    }
    fn poll(&mut self, count: usize) -> Result<Vec<Completion>, Failure> {
        poll_until(self.qp, count)
    }
    fn state(&mut self) -> Result<QpState, Failure> {
        Ok(self.qp.query()?.state)
    }
    fn endpoint(&mut self) -> Result<crate::Endpoint, Failure> {
        Ok(self.qp.endpoint())
    }
    fn reconnect(&mut self, a: &crate::Endpoint, a_psn: u32, b_psn: u32) -> Result<(), Failure> {
        reconnect(self.qp, a, a_psn, b_psn)
    }
    fn arm_cq(&mut self, solicited_only: bool) -> Result<(), Failure> {
        Ok(self.qp.arm_cq(solicited_only)?)
    }
    fn wait_cq_event(&mut self, timeout: Duration) -> Result<bool, Failure> {
        Ok(self.qp.wait_cq_event(timeout)?)
    }
}

/// ERR -> RESET, then `connect_remote` toward `a`.
fn reconnect(qp: &mut Qp, a: &crate::Endpoint, a_psn: u32, b_psn: u32) -> Result<(), Failure> {
    qp.modify(QpState::Err, &crate::QpAttr::default())?;
    qp.modify(QpState::Reset, &crate::QpAttr::default())?;
    Ok(qp.connect_remote(b_psn, a, a_psn)?)
}

fn endpoint_msg(e: &crate::Endpoint, psn: u32) -> String {
    hex(&ConnInfo {
        endpoint: *e,
        psn,
        rkey: Rkey(0),
        addr: 0,
        len: 0,
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
        writeln!(self.out, "{line}").map_err(|e| Failure(format!("peer: send: {e}")))?;
        let mut answer = String::new();
        self.inp
            .read_line(&mut answer)
            .map_err(|e| Failure(format!("peer: receive: {e}")))?;
        let answer = answer.trim_end();
        match answer.strip_prefix("OK") {
            Some(rest) => Ok(rest.trim_start().to_string()),
            None => Err(Failure(format!(
                "peer refused `{}`: {answer}",
                line.split(' ').next().unwrap_or("")
            ))),
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

fn bad(what: &str) -> Failure {
    Failure(format!("peer: malformed answer to {what}"))
}

impl Peer for RemotePeer {
    fn reg_mr(&mut self, len: usize, access: Access) -> Result<PeerMr, Failure> {
        let a = self.call(&format!("REG {len} {}", access.bits()))?;
        let f: Vec<u64> = a.split(' ').filter_map(|x| x.parse().ok()).collect();
        match f[..] {
            [id, addr, rkey] => Ok(PeerMr {
                id: id as u32,
                addr,
                rkey: Rkey(rkey as u32),
                len: len as u64,
            }),
            _ => Err(bad("REG")),
        }
    }
    fn write(&mut self, mr: &PeerMr, offset: usize, data: &[u8]) -> Result<(), Failure> {
        self.call(&format!("WRITE {} {offset} {}", mr.id, hex(data)))
            .map(|_| ())
    }
    fn read(&mut self, mr: &PeerMr, offset: usize, len: usize) -> Result<Vec<u8>, Failure> {
        let a = self.call(&format!("READ {} {offset} {len}", mr.id))?;
        unhex(&a).ok_or_else(|| bad("READ"))
    }
    fn post_recv(&mut self, wr_id: u64, sges: &[(PeerMr, usize, u32)]) -> Result<(), Failure> {
        let list: Vec<String> = sges
            .iter()
            .map(|(m, o, l)| format!("{}:{o}:{l}", m.id))
            .collect();
        let list = if list.is_empty() {
            "-".into()
        } else {
            list.join(",")
        };
        self.call(&format!("RECV {wr_id} {list}")).map(|_| ())
    }
    fn poll(&mut self, count: usize) -> Result<Vec<Completion>, Failure> {
        let a = self.call(&format!("POLL {count} 20000"))?;
        let mut v = Vec::new();
        for c in a.split(' ').filter(|x| !x.is_empty()) {
            let f: Vec<&str> = c.split(':').collect();
            let [wr_id, status, opcode, byte_len, imm] = f[..] else {
                return Err(bad("POLL"));
            };
            let num = |x: &str| x.parse::<u64>().map_err(|_| bad("POLL"));
            v.push(Completion {
                wr_id: num(wr_id)?,
                status: WcStatus(num(status)? as u32),
                opcode: WcOpcode(num(opcode)? as u32),
                byte_len: num(byte_len)? as u32,
                imm: if imm == "-" {
                    None
                } else {
                    Some(num(imm)? as u32)
                },
                qp_num: 0,
                vendor_err: 0,
            });
        }
        if v.len() < count {
            return Err(Failure(format!(
                "peer: {} of {count} completions within 20 s",
                v.len()
            )));
        }
        Ok(v)
    }
    fn endpoint(&mut self) -> Result<crate::Endpoint, Failure> {
        let a = self.call("ENDPOINT")?;
        Ok(parse_endpoint_msg(&a)?.endpoint)
    }
    fn reconnect(&mut self, a: &crate::Endpoint, a_psn: u32, b_psn: u32) -> Result<(), Failure> {
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
        match self.call("QUERY")?.as_str() {
            "Reset" => Ok(QpState::Reset),
            "Init" => Ok(QpState::Init),
            "Rtr" => Ok(QpState::Rtr),
            "Rts" => Ok(QpState::Rts),
            "Err" => Ok(QpState::Err),
            _ => Err(bad("QUERY")),
        }
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
    /// Our TCP exchange ([`crate::exchange`]) and [`Qp::connect_remote`].
    #[default]
    Tcp,
    /// The RDMA connection manager ([`crate::cm`], perftest's `-R`), on the
    /// same port number in the CM's port space; the peer protocol still runs
    /// on a TCP connection made first.
    RdmaCm,
}

#[cfg(feature = "verbs")]
type CmConn = crate::cm::CmConnection;
#[cfg(not(feature = "verbs"))]
type CmConn = ();

/// Where this side connects from: the server's CM listener lives across
/// its cases.
enum Side<'a> {
    #[cfg(feature = "verbs")]
    Server(u16, Option<&'a crate::cm::CmListener>),
    #[cfg(not(feature = "verbs"))]
    Server(u16, Option<&'a ()>),
    Client(&'a str, u16, Connect),
}

/// One QP connected to a peer's, and the TCP connection the peer protocol
/// runs on (made by the exchange). With [`Connect::RdmaCm`] the QP is
/// connected by the CM instead of the exchanged facts. A 64-byte MR is
/// offered (the cases register their own).
fn connect_over(pd: &Pd, side: Side<'_>) -> crate::Result<(Qp, TcpStream, Mr, Option<CmConn>)> {
    let mut qp = pd.create_qp(&two_host_config())?;
    let mr = pd.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let psn = Qp::random_psn();
    let mine = ConnInfo {
        endpoint: qp.endpoint(),
        psn,
        rkey: mr.rkey(),
        addr: mr.addr(),
        len: 64,
    };
    let (peer, mut tcp) = match side {
        Side::Server(port, _) => exchange::serve(port, &mine)?,
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
            let offer = crate::cm::CmOffer {
                rkey: mr.rkey(),
                addr: mr.addr(),
                len: 64,
            };
            Some(listener.accept(&mut qp, &offer, Duration::from_secs(60))?.0)
        }
        #[cfg(feature = "verbs")]
        Side::Client(host, port, Connect::RdmaCm) => {
            let offer = crate::cm::CmOffer {
                rkey: mr.rkey(),
                addr: mr.addr(),
                len: 64,
            };
            Some(crate::cm::connect(&mut qp, host, port, &offer, Duration::from_secs(60))?.0)
        }
        #[cfg(not(feature = "verbs"))]
        _ => return Err(Error::Invalid("rdma_cm needs the `verbs` feature".into())),
    };
    exchange::barrier(&mut tcp)?;
    Ok((qp, tcp, mr, cm))
}

/// Each side says how it connects the QPs (one line, `tcp` or `rdma_cm`);
/// a mismatch is an error on both sides at once, not a CM timeout.
fn agree_on(tcp: &mut TcpStream, how: Connect) -> crate::Result<()> {
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

/// Serves the two-sided cases to one client on `port`, one connection per
/// case, each with a fresh QP connected as `how` says; returns after the
/// last case.
pub fn serve(dev: &str, port: u16, how: Connect) -> crate::Result<()> {
    let ctx = Context::open(dev)?;
    #[cfg(feature = "verbs")]
    let listener = match how {
        Connect::Tcp => None,
        Connect::RdmaCm => Some(crate::cm::CmListener::bind(port)?),
    };
    #[cfg(not(feature = "verbs"))]
    let listener: Option<()> = match how {
        Connect::Tcp => None,
        Connect::RdmaCm => return Err(Error::Invalid("rdma_cm needs the `verbs` feature".into())),
    };
    for _ in two_host_cases() {
        let pd = ctx.alloc_pd()?;
        let (mut qp, tcp, _mr, _cm) = connect_over(&pd, Side::Server(port, listener.as_ref()))?;
        let mut out = tcp
            .try_clone()
            .map_err(|e| Error::Exchange(format!("socket: {e}")))?;
        let mut inp = BufReader::new(tcp);
        let mut mrs: Vec<Mr> = Vec::new();
        loop {
            let mut line = String::new();
            if inp.read_line(&mut line).unwrap_or(0) == 0 {
                break; // the client went away: next case
            }
            let answer = serve_one(line.trim_end(), &pd, &mut qp, &mut mrs);
            let bye = line.starts_with("BYE");
            let text = match answer {
                Ok(a) if a.is_empty() => "OK".to_string(),
                Ok(a) => format!("OK {a}"),
                Err(e) => format!("ERR {}", e.0),
            };
            if writeln!(out, "{text}").is_err() || bye {
                break;
            }
        }
    }
    Ok(())
}

fn serve_one(line: &str, pd: &Pd, qp: &mut Qp, mrs: &mut Vec<Mr>) -> Result<String, Failure> {
    let f: Vec<&str> = line.split(' ').collect();
    let num = |i: usize| -> Result<u64, Failure> {
        f.get(i)
            .and_then(|x| x.parse().ok())
            .ok_or_else(|| Failure(format!("argument {i} of `{line}`")))
    };
    let mr = |id: u64, mrs: &Vec<Mr>| -> Result<usize, Failure> {
        (id < mrs.len() as u64)
            .then_some(id as usize)
            .ok_or_else(|| Failure(format!("no MR {id}")))
    };
    match f.first().copied().unwrap_or("") {
        "REG" => {
            let access =
                Access::from_bits(num(2)? as u32).ok_or_else(|| Failure("access bits".into()))?;
            let m = pd.reg_mr(num(1)? as usize, access)?;
            let a = format!("{} {} {}", mrs.len(), m.addr(), m.rkey().0);
            mrs.push(m);
            Ok(a)
        }
        "WRITE" => {
            let i = mr(num(1)?, mrs)?;
            let data =
                unhex(f.get(3).copied().unwrap_or("")).ok_or_else(|| Failure("hex".into()))?;
            mrs[i].write(num(2)? as usize, &data)?;
            Ok(String::new())
        }
        "READ" => {
            let i = mr(num(1)?, mrs)?;
            let len = num(3)? as usize;
            if len > 16 << 20 {
                return Err(Failure("READ of more than 16 MiB".into()));
            }
            let mut v = vec![0; len];
            mrs[i].read(num(2)? as usize, &mut v)?;
            Ok(hex(&v))
        }
        "RECV" => {
            let wr_id = num(1)?;
            let list = f.get(2).copied().unwrap_or("-");
            let mut pieces = Vec::new();
            if list != "-" {
                for p in list.split(',') {
                    let x: Vec<u64> = p.split(':').filter_map(|v| v.parse().ok()).collect();
                    let [id, off, len] = x[..] else {
                        return Err(Failure(format!("SGE `{p}`")));
                    };
                    pieces.push((mr(id, mrs)?, off as usize, len as u32));
                }
            }
            let sges = pieces
                .iter()
                .map(|&(i, o, l)| Sge::new(&mrs[i], o, l))
                .collect::<Result<Vec<_>, _>>()?;
            qp.post_recv(&[RecvWr::new(wr_id, &sges)])?;
            Ok(String::new())
        }
        "POLL" => {
            let count = num(1)? as usize;
            let deadline = std::time::Instant::now() + Duration::from_millis(num(2)?.min(60_000));
            let mut got = Vec::new();
            let mut wc = [Completion::default(); 8];
            while got.len() < count && std::time::Instant::now() < deadline {
                let n = qp.poll(&mut wc)?;
                got.extend_from_slice(&wc[..n]);
                if n == 0 {
                    std::thread::yield_now();
                }
            }
            Ok(got
                .iter()
                .map(|c| {
                    format!(
                        "{}:{}:{}:{}:{}",
                        c.wr_id,
                        c.status.0,
                        c.opcode.0,
                        c.byte_len,
                        c.imm.map_or("-".to_string(), |i| i.to_string())
                    )
                })
                .collect::<Vec<_>>()
                .join(" "))
        }
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

/// The two-sided cases.
pub fn two_host_cases() -> &'static [(&'static str, TwoHostFn)] {
    &[
        ("th_write_4096_lands", th_write_4096_lands),
        ("th_read_lands", th_read_lands),
        (
            "th_wrong_rkey_leaves_memory_alone",
            th_wrong_rkey_leaves_memory_alone,
        ),
        (
            "th_send_and_imm_land_in_receives",
            th_send_and_imm_land_in_receives,
        ),
        ("th_fetch_and_add", th_fetch_and_add),
        (
            "th_error_flushes_and_both_go_to_err",
            th_error_flushes_and_both_go_to_err,
        ),
        (
            "th_every_opcode_at_every_size",
            th_every_opcode_at_every_size,
        ),
        (
            "th_too_small_receive_fails_both_sides",
            th_too_small_receive_fails_both_sides,
        ),
        (
            "th_rnr_waits_for_a_late_receive",
            th_rnr_waits_for_a_late_receive,
        ),
        ("th_err_reset_reconnect", th_err_reset_reconnect),
        ("th_gather_and_scatter_sges", th_gather_and_scatter_sges),
        ("th_compare_and_swap", th_compare_and_swap),
        (
            "th_rnr_without_a_receive_exhausts_retries",
            th_rnr_without_a_receive_exhausts_retries,
        ),
        ("th_solicited_event_wakes_b", th_solicited_event_wakes_b),
        ("th_inline_at_the_limit_lands", th_inline_at_the_limit_lands),
        (
            "th_unsignaled_stream_lands_in_order",
            th_unsignaled_stream_lands_in_order,
        ),
    ]
}

/// How the failure of a case whose QPs never got connected begins (the
/// server is gone or disagrees: running more cases is pointless).
pub const NOT_CONNECTED: &str = "not connected: ";

/// Runs one two-sided case against a server on `host:port`, the QPs
/// connected as `how` says (the server must use the same).
pub fn run_remote(dev: &str, host: &str, port: u16, how: Connect, case: TwoHostFn) -> CaseResult {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let (mut qp, tcp, _mr, _cm) = connect_over(&pd, Side::Client(host, port, how))
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
pub fn run_local(dev: &str, case: TwoHostFn) -> CaseResult {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let (mut a, mut b) = pd.create_connected_pair(&two_host_config())?;
    let mut peer = LocalPeer {
        qp: &mut b,
        pd: &pd,
        mrs: Vec::new(),
    };
    case(&mut a, &pd, &mut peer)
}

fn th_write_4096_lands(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let src = pd.reg_mr(4096, Access::LOCAL_WRITE)?;
    let dst = b.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
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

fn th_read_lands(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let far = b.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
    let data = pattern(4096, 33);
    b.write(&far, 0, &data)?;
    let local = pd.reg_mr(4096, Access::LOCAL_WRITE)?;
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

fn th_wrong_rkey_leaves_memory_alone(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let src = pd.reg_mr(256, Access::LOCAL_WRITE)?;
    let dst = b.reg_mr(256, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
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

fn th_send_and_imm_land_in_receives(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let src = pd.reg_mr(1024, Access::LOCAL_WRITE)?;
    let rbuf = b.reg_mr(2048, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let data = pattern(1024, 71);
    src.write(0, &data)?;
    b.post_recv(10, &[(rbuf, 0, 1024)])?;
    b.post_recv(11, &[(rbuf, 1024, 1024)])?;
    b.post_recv(12, &[])?;
    let sge = [Sge::new(&src, 0, 1024)?];
    let small = [Sge::new(&src, 0, 16)?];
    a.post_send(&[
        SendWr::send(1, &sge).signaled(),
        SendWr::send_with_imm(2, &sge, 0x89AB_CDEF).signaled(),
        SendWr::rdma_write_with_imm(3, &small, rbuf.at(0), 0x89AB_CDEF).signaled(),
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

fn th_fetch_and_add(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let word = b.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_ATOMIC)?;
    b.write(&word, 8, &0x0102_0304_0506_0708u64.to_ne_bytes())?;
    let old = pd.reg_mr(8, Access::LOCAL_WRITE)?;
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

fn th_error_flushes_and_both_go_to_err(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let src = pd.reg_mr(64, Access::LOCAL_WRITE)?;
    src.write(0, &[0x5a; 64])?;
    let dst = b.reg_mr(256, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
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
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while b.state()? != QpState::Err {
        check!(
            std::time::Instant::now() < deadline,
            "responder never reached ERR"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(Outcome::Passed(String::new()))
}

/// WRITE, WRITE_WITH_IMM, SEND, SEND_WITH_IMM and READ at 0, 1, 63, 64,
/// 4096 bytes and 1 MiB between the two sides, 16 guard bytes checked.
fn th_every_opcode_at_every_size(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    const SIZES: [usize; 6] = [0, 1, 63, 64, 4096, 1 << 20];
    const GUARD: usize = 16;
    let len = (1 << 20) + GUARD;
    let local = pd.reg_mr(len, Access::LOCAL_WRITE)?;
    let far = b.reg_mr(
        len,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    )?;
    let mut id = 0u64;
    for &n in &SIZES {
        for op in super::SIZED_OPS {
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
                "WRITE_WITH_IMM" => SendWr::rdma_write_with_imm(id, &lsge, far.at(0), imm),
                "SEND" => SendWr::send(id, &lsge),
                "SEND_WITH_IMM" => SendWr::send_with_imm(id, &lsge, imm),
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
fn th_too_small_receive_fails_both_sides(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let src = pd.reg_mr(256, Access::LOCAL_WRITE)?;
    let rbuf = b.reg_mr(64, Access::LOCAL_WRITE)?;
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
fn th_rnr_waits_for_a_late_receive(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let src = pd.reg_mr(64, Access::LOCAL_WRITE)?;
    src.write(0, &[0x3c; 64])?;
    let rbuf = b.reg_mr(64, Access::LOCAL_WRITE)?;
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
fn th_err_reset_reconnect(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let src = pd.reg_mr(64, Access::LOCAL_WRITE)?;
    src.write(0, &[0x66; 64])?;
    let dst = b.reg_mr(128, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 64)?];
    let bad = RemoteAddr {
        addr: dst.addr,
        rkey: Rkey(dst.rkey.0 ^ 0x0012_3400),
    };
    a.post_send(&[SendWr::rdma_write(1, &sge, bad).signaled()])?;
    check_eq!(poll_one(a)?.status, WcStatus::REM_ACCESS_ERR);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while b.state()? != QpState::Err {
        check!(
            std::time::Instant::now() < deadline,
            "responder never reached ERR"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let (ea, eb) = (a.endpoint(), b.endpoint()?);
    let (psn_a, psn_b) = (Qp::random_psn(), Qp::random_psn());
    // B first (it is told A's facts), then A.
    b.reconnect(&ea, psn_a, psn_b)?;
    a.modify(QpState::Err, &crate::QpAttr::default())?;
    a.modify(QpState::Reset, &crate::QpAttr::default())?;
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
fn th_gather_and_scatter_sges(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let local = pd.reg_mr(8192, Access::LOCAL_WRITE)?;
    let far = b.reg_mr(8192, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
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
fn th_compare_and_swap(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let word = b.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_ATOMIC)?;
    b.write(&word, 16, &0x0102_0304_0506_0718u64.to_ne_bytes())?;
    let old = pd.reg_mr(16, Access::LOCAL_WRITE)?;
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
fn th_rnr_without_a_receive_exhausts_retries(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let src = pd.reg_mr(64, Access::LOCAL_WRITE)?;
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
    let floor = crate::qp_attr::rnr_timer(31) * 5;
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
fn th_solicited_event_wakes_b(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let src = pd.reg_mr(64, Access::LOCAL_WRITE)?;
    src.write(0, &[0x5a; 64])?;
    let rbuf = b.reg_mr(256, Access::LOCAL_WRITE)?;
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
fn th_inline_at_the_limit_lands(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    let limit = a.max_inline() as usize;
    let src = pd.reg_mr(limit + 1, Access::LOCAL_WRITE)?;
    let data = pattern(limit + 1, 77);
    src.write(0, &data)?;
    let far = b.reg_mr(2 * limit + 2, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
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
            matches!(r, Err(Error::Invalid(_))),
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
fn th_unsignaled_stream_lands_in_order(a: &mut Qp, pd: &Pd, b: &mut dyn Peer) -> CaseResult {
    const N: u64 = 1000;
    let src = pd.reg_mr(8 * N as usize, Access::LOCAL_WRITE)?;
    for i in 0..N {
        src.write(8 * i as usize, &(i + 1).to_le_bytes())?;
    }
    let far = b.reg_mr(8 * N as usize, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
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
