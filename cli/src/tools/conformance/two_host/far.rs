//! The two-sided cases that build something other than one RC QP a side:
//! UC, UD, and RC QPs on a shared receive queue. [`Build`] says what each
//! side builds. Side A is a [`Near`] here; side B is a [`Far`], driven by
//! the text commands below through a [`FarPeer`]: over TCP to
//! `conformance --server` on another host, or handed to a `Far` in this
//! process. The same code answers both, so the in-process run tests the
//! server's side too.
//!
//! | command | answer |
//! |---|---|
//! | `REG`, `WRITE`, `READ`, `DEREG` | as in the RC cases' protocol ([`super`]) |
//! | `RECV <wr_id> <id>:<offset>:<len>,...` | `OK` (posted to B's SRQ when it has one, else to its QP) |
//! | `RECVN <first wr_id> <n> <id>:<offset>:<len>` | `OK` (`n` receives, wr_ids `first..first + n`, each over the one SGE) |
//! | `POLL <count> <timeout ms>` | `OK` and per completion `<wr_id>:<status>:<opcode>:<byte_len>:<imm or ->:<qp_num>:<src_qp>`; fewer than `count` when the time ran out |
//! | `QUERY <i>` | `OK <state of B's QP i>` |
//! | `ERR <i>` | `OK` (B's QP `i` moved to ERR) |
//! | `LIMIT <n>` | `OK` (B's pending device events dropped, then its SRQ's limit armed at `n`) |
//! | `EVENT <timeout ms>` | `OK -`, or `OK <event>` (an [`AsyncEvent`] in Rust's debug form) |
//! | `ECHO <id> <offset>` | `OK <source QPN>`: B takes one UD receive (its buffer at `offset` of MR `id`) and sends the payload back through an AH built from it, to its source QPN |
//! | `OUTSTANDING` | `OK <receives B's SRQ holds>` |
//! | `SRQN` | `OK <B's SRQ's number>` |
//! | `BYE` | `OK` (the server ends this case) |
//!
//! The QPs are connected through the TCP exchange ([`exchange`]): QP 0's
//! facts in the first message, each further QP's in one more
//! ([`exchange::swap`]), a UD QP's qkey in the message's qkey field. Then
//! each side says the case it runs and how it connects (one line each); a
//! mismatch fails both sides at once.

use super::{
    two_host_config, wire, wire::mr_command, CaseResult, Connect, Failure, PeerMr, NOT_CONNECTED,
};
use rdma_direct::exchange::{self, ConnInfo};
use rdma_direct::{
    Ah, AsyncEvent, Completion, Context, CqSizing, Mr, Pd, Qp, QpConfig, QpState, QpType, RecvWr,
    Rkey, Sge, SharedCq, Srq, WcOpcode,
};
use std::io::BufReader;
use std::net::TcpStream;
use std::time::Duration;

/// What each side of a case builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Build {
    /// One UC QP a side.
    Uc,
    /// One UD QP a side, each with its own qkey ([`QKEY_A`], [`QKEY_B`])
    /// and side A an AH toward B's port.
    Ud,
    /// `qps` RC QPs a side; side B's all on one SRQ of `max_wr` receives
    /// of `max_sge` SGEs, completing into one shared CQ.
    Srq {
        qps: usize,
        max_wr: u32,
        max_sge: u32,
    },
}

/// Side A's qkey on UD: B's and A's differ, so a side that sent with its
/// own rather than the one the exchange gave would be dropped.
pub const QKEY_A: u32 = 0x0a0a_0001;
/// Side B's qkey on UD.
pub const QKEY_B: u32 = 0x0b0b_0002;

/// A case over a [`Build`]: side A here, side B behind a [`FarPeer`].
pub type BuiltFn = fn(&mut Near<'_>, &mut FarPeer<'_>) -> CaseResult;

/// Side A of a built case.
pub struct Near<'a> {
    pub pd: &'a Pd,
    pub qps: Vec<Qp>,
    /// Side B's QPs' facts (QPN, qkey, ...), in the order of `qps`.
    pub far: Vec<ConnInfo>,
    /// Toward side B's port (UD only).
    pub ah: Option<Ah>,
}

impl Near<'_> {
    /// Side A's QP 0 and a UD send's destination: B's QP 0, through the AH,
    /// with the qkey B's exchange message gave.
    pub fn ud(&mut self) -> Result<(&mut Qp, rdma_direct::UdDest<'_>), Failure> {
        let ah = self
            .ah
            .as_ref()
            .ok_or_else(|| Failure("no AH: not a UD case".into()))?;
        let dest = rdma_direct::UdDest {
            ah,
            remote_qpn: self.far[0].endpoint.qpn,
            qkey: self.far[0].qkey,
        };
        Ok((&mut self.qps[0], dest))
    }
}

/// Side B's QPs.
// One of each lives per case: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum FarQps {
    Own(Qp),
    Srq { srq: Srq, cq: SharedCq },
}

/// Side B of a built case: its QPs and the MRs the cases register there.
pub struct Far {
    qps: FarQps,
    mrs: Vec<Option<Mr>>,
    /// The qkey side A's UD QP takes.
    peer_qkey: u32,
}

/// What one side builds, before it is connected.
// One of each lives per case: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Made {
    Own(Vec<Qp>),
    Srq(Srq, SharedCq),
}

fn config(build: Build) -> QpConfig {
    match build {
        Build::Uc => QpConfig {
            qp_type: QpType::Uc,
            ..two_host_config()
        },
        Build::Ud => QpConfig {
            qp_type: QpType::Ud,
            max_inline: 0,
            ..two_host_config()
        },
        Build::Srq { .. } => two_host_config(),
    }
}

fn make(pd: &Pd, build: Build, side_b: bool) -> rdma_direct::Result<Made> {
    let cfg = config(build);
    match build {
        Build::Srq {
            qps,
            max_wr,
            max_sge,
        } if side_b => {
            let srq = pd.create_srq(max_wr, max_sge)?;
            let depth = CqSizing::new()
                .queue(srq.max_wr())
                .queue(qps as u32 * cfg.max_send_wr)
                .depth()?;
            let mut cq = pd.create_shared_cq(depth)?;
            for _ in 0..qps {
                cq.create_qp_on_srq(&cfg, &srq)?;
            }
            Ok(Made::Srq(srq, cq))
        }
        Build::Srq { qps, .. } => Ok(Made::Own(
            (0..qps)
                .map(|_| pd.create_qp(&cfg))
                .collect::<rdma_direct::Result<_>>()?,
        )),
        Build::Uc | Build::Ud => Ok(Made::Own(vec![pd.create_qp(&cfg)?])),
    }
}

impl Made {
    fn qps(&mut self) -> &mut [Qp] {
        match self {
            Made::Own(v) => v,
            Made::Srq(_, cq) => cq.qps_mut(),
        }
    }

    /// Each QP's facts, with a fresh first PSN, and `qkey` on UD.
    fn infos(&mut self, build: Build, qkey: u32) -> Vec<ConnInfo> {
        self.qps()
            .iter()
            .map(|q| ConnInfo {
                endpoint: q.endpoint(),
                psn: Qp::random_psn(),
                rkey: Rkey(0),
                addr: 0,
                len: 0,
                qkey: if build == Build::Ud { qkey } else { 0 },
                dc_key: None,
            })
            .collect()
    }

    /// Connects QP `i` to `peer[i]` (UD: brought up with `mine[0].qkey`;
    /// the AH toward the peer's port is returned).
    fn connect(
        &mut self,
        pd: &Pd,
        build: Build,
        mine: &[ConnInfo],
        peer: &[ConnInfo],
    ) -> rdma_direct::Result<Option<Ah>> {
        let qps = self.qps();
        if build == Build::Ud {
            qps[0].ready_ud(mine[0].qkey)?;
            return Ok(Some(pd.create_ah(&qps[0].av_to(&peer[0].endpoint))?));
        }
        for ((q, m), p) in qps.iter_mut().zip(mine).zip(peer) {
            q.connect_remote(m.psn, &p.endpoint, p.psn)?;
        }
        Ok(None)
    }

    /// Side B, sending to side A with `peer_qkey` (UD).
    fn into_far(self, peer_qkey: u32) -> Far {
        let qps = match self {
            Made::Own(mut v) => FarQps::Own(v.remove(0)),
            Made::Srq(srq, cq) => FarQps::Srq { srq, cq },
        };
        Far {
            qps,
            mrs: Vec::new(),
            peer_qkey,
        }
    }
}

/// Side A's and side B's case, [`Build`] and way of connecting, one line
/// each way.
fn agree(tcp: &mut TcpStream, name: &str, build: Build, how: Connect) -> rdma_direct::Result<()> {
    let mine = format!("{name} {build:?} {how:?}");
    let theirs = exchange::swap_line(tcp, &mine)?;
    if theirs != mine {
        return Err(rdma_direct::Error::Exchange(format!(
            "this side runs `{mine}`, the peer `{theirs}`: the same build of rdma-direct on both, and -R on both or on neither?"
        )));
    }
    Ok(())
}

/// Under `-R`, how a UD case's QPs find each other through rdma_cm's UDP
/// port space (the other builds connect through the exchange).
pub(super) enum CmUd<'a> {
    /// Not through the CM.
    No(std::marker::PhantomData<&'a ()>),
    /// Side B: answer the request on this listener ([`rdma_direct::cm::CmListener::bind_ud`]).
    #[cfg(feature = "verbs")]
    Accept(&'a rdma_direct::cm::CmListener),
    /// Side A: resolve the peer at this host and port.
    #[cfg(feature = "verbs")]
    Connect(&'a str, u16),
}

impl CmUd<'_> {
    fn how(&self) -> Connect {
        match self {
            CmUd::No(_) => Connect::Tcp,
            #[cfg(feature = "verbs")]
            _ => Connect::RdmaCm,
        }
    }
}

/// What keeps a CM id alive for the case.
type Keep = Option<Box<dyn std::any::Any>>;

/// One side, connected: its QPs, the peer's facts, the AH toward the peer
/// (UD), the TCP connection, and what keeps a CM id alive.
type Sided = (Made, Vec<ConnInfo>, Option<Ah>, TcpStream, Keep);

/// Builds `build` on one side, swaps the QPs' facts over `first` (the
/// exchange that makes the TCP connection, given QP 0's facts) and one
/// [`exchange::swap`] per further QP, agrees on the case, and connects:
/// through the CM when `cm` says so (UD), else with the exchanged facts.
fn connect_side(
    pd: &Pd,
    name: &str,
    build: Build,
    side_b: bool,
    cm: CmUd<'_>,
    first: impl FnOnce(&ConnInfo) -> rdma_direct::Result<(ConnInfo, TcpStream)>,
) -> rdma_direct::Result<Sided> {
    let mut made = make(pd, build, side_b)?;
    let mine = made.infos(build, if side_b { QKEY_B } else { QKEY_A });
    let (p0, mut tcp) = first(&mine[0])?;
    let mut peer = vec![p0];
    for m in &mine[1..] {
        peer.push(exchange::swap(&mut tcp, m)?);
    }
    let how = if build == Build::Ud {
        cm.how()
    } else {
        Connect::Tcp
    };
    agree(&mut tcp, name, build, how)?;
    if build == Build::Ud && peer[0].qkey == 0 {
        return Err(rdma_direct::Error::Exchange(
            "the peer's UD QP sent qkey 0".into(),
        ));
    }
    let (ah, keep): (Option<Ah>, Keep) = match cm {
        CmUd::No(_) => (made.connect(pd, build, &mine, &peer)?, None),
        #[cfg(feature = "verbs")]
        _ if build != Build::Ud => (made.connect(pd, build, &mine, &peer)?, None),
        #[cfg(feature = "verbs")]
        CmUd::Accept(l) => {
            let (c, _) = l.accept_ud(&mut made.qps()[0], &no_offer(), Duration::from_secs(60))?;
            // The CM gives both QPs its qkey.
            peer[0].qkey = rdma_direct::cm::UDP_QKEY;
            (None, Some(Box::new(c)))
        }
        #[cfg(feature = "verbs")]
        CmUd::Connect(host, port) => {
            let (c, u) = rdma_direct::cm::connect_ud(
                &mut made.qps()[0],
                host,
                port,
                &no_offer(),
                Duration::from_secs(60),
            )?;
            if u.qpn != peer[0].endpoint.qpn {
                return Err(rdma_direct::Error::Exchange(format!(
                    "rdma_cm answered for QPN {:#x}, the exchange named {:#x}",
                    u.qpn, peer[0].endpoint.qpn
                )));
            }
            peer[0].qkey = u.qkey;
            (Some(pd.create_ah(&u.av)?), Some(Box::new(c)))
        }
    };
    exchange::barrier(&mut tcp)?;
    Ok((made, peer, ah, tcp, keep))
}

#[cfg(feature = "verbs")]
fn no_offer() -> rdma_direct::cm::CmOffer {
    rdma_direct::cm::CmOffer {
        rkey: Rkey(0),
        addr: 0,
        len: 0,
    }
}

/// Serves one built case to the client on `listener`: builds side B,
/// connects, and answers commands until `BYE` or the client goes away.
pub(super) fn serve_built(
    ctx: &Context,
    pd: &Pd,
    listener: &exchange::Listener,
    cm: CmUd<'_>,
    name: &str,
    build: Build,
) -> rdma_direct::Result<()> {
    let (made, peer, _, tcp, _keep) =
        connect_side(pd, name, build, true, cm, |m| listener.accept(m))?;
    let mut far = made.into_far(peer[0].qkey);
    wire::serve_lines(tcp, |line| far.answer(line, ctx, pd))
}

/// Runs built case `f` against a server on `host:port`.
pub fn run_built_remote(
    dev: &str,
    host: &str,
    port: u16,
    how: Connect,
    name: &str,
    build: Build,
    f: BuiltFn,
) -> CaseResult {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let cm = match how {
        Connect::Tcp => CmUd::No(Default::default()),
        #[cfg(feature = "verbs")]
        Connect::RdmaCm => CmUd::Connect(host, port),
        #[cfg(not(feature = "verbs"))]
        Connect::RdmaCm => return Err(Failure("rdma_cm needs the `verbs` feature".into())),
    };
    let ud_cm = build == Build::Ud && how == Connect::RdmaCm;
    let (mut made, far, ah, tcp, _keep) = connect_side(&pd, name, build, false, cm, |m| {
        exchange::connect(host, port, Duration::from_secs(60), m)
    })
    .map_err(|e| Failure(format!("{NOT_CONNECTED}{e}")))?;
    let out = tcp
        .try_clone()
        .map_err(|e| Failure(format!("socket: {e}")))?;
    let mut near = Near {
        pd: &pd,
        qps: std::mem::take(match &mut made {
            Made::Own(v) => v,
            Made::Srq(..) => unreachable!("side A builds no SRQ"),
        }),
        far,
        ah,
    };
    let mut peer = FarPeer {
        link: Link::Tcp {
            out,
            inp: BufReader::new(tcp),
        },
    };
    let r = f(&mut near, &mut peer);
    let _ = peer.call("BYE");
    if ud_cm {
        return r;
    }
    with_cm_note(r, how)
}

/// Under `-R` a built case still connects through the exchange, and says so.
fn with_cm_note(r: CaseResult, how: Connect) -> CaseResult {
    match (r, how) {
        (Ok(super::Outcome::Passed(n)), Connect::RdmaCm) => {
            let note = "QPs connected through the TCP exchange: -R connects the RC and UD cases";
            Ok(super::Outcome::Passed(if n.is_empty() {
                note.into()
            } else {
                format!("{n}; {note}")
            }))
        }
        (r, _) => r,
    }
}

/// Runs built case `f` with side B in this process.
pub fn run_built_local(dev: &str, build: Build, f: BuiltFn) -> CaseResult {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let mut a = make(&pd, build, false)?;
    let mut b = make(&pd, build, true)?;
    let (ia, ib) = (a.infos(build, QKEY_A), b.infos(build, QKEY_B));
    let ah = a.connect(&pd, build, &ia, &ib)?;
    b.connect(&pd, build, &ib, &ia)?;
    let a_qkey = ia[0].qkey;
    let mut near = Near {
        pd: &pd,
        qps: match a {
            Made::Own(v) => v,
            Made::Srq(..) => unreachable!("side A builds no SRQ"),
        },
        far: ib,
        ah,
    };
    let mut peer = FarPeer {
        link: Link::Here {
            far: b.into_far(a_qkey),
            ctx: &ctx,
            pd: &pd,
        },
    };
    f(&mut near, &mut peer)
}

impl Far {
    fn qp(&mut self, i: u64) -> Result<&mut Qp, Failure> {
        match &mut self.qps {
            FarQps::Own(q) if i == 0 => Ok(q),
            FarQps::Srq { cq, .. } if (i as usize) < cq.len() => Ok(cq.qp_mut(i as usize)),
            _ => Err(Failure(format!("side B has no QP {i}"))),
        }
    }

    fn srq(&mut self) -> Result<&mut Srq, Failure> {
        match &mut self.qps {
            FarQps::Srq { srq, .. } => Ok(srq),
            FarQps::Own(_) => Err(Failure("side B has no SRQ".into())),
        }
    }

    fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), Failure> {
        match &mut self.qps {
            FarQps::Own(q) => q.post_recv(wrs)?,
            FarQps::Srq { srq, .. } => srq.post_recv(wrs)?,
        }
        Ok(())
    }

    /// `ECHO`: takes one UD receive (waiting up to 20 s) whose buffer
    /// starts at `offset` of MR `id`, and sends its payload back to its
    /// sender through an AH built from the receive
    /// ([`Pd::create_ah_from_recv`]), to its source QPN, with A's qkey.
    fn echo(&mut self, id: u64, offset: usize, pd: &Pd) -> Result<String, Failure> {
        let Far {
            qps,
            mrs,
            peer_qkey,
        } = self;
        let FarQps::Own(q) = qps else {
            return Err(Failure("ECHO needs side B's UD QP".into()));
        };
        let mr = super::peer_mr(mrs, id)?;
        let c = super::super::poll_one(q)?;
        if !c.status.is_ok() || c.opcode != WcOpcode::RECV || c.byte_len < 40 {
            return Err(Failure(format!("ECHO: the receive completed {c:?}")));
        }
        let mut grh = [0u8; 40];
        mr.read(offset, &mut grh)?;
        let ah = pd.create_ah_from_recv(q.config().port, &c, &grh)?;
        let sge = [Sge::new(mr, offset + 40, c.byte_len - 40)?];
        let to = rdma_direct::UdDest {
            ah: &ah,
            remote_qpn: c.src_qp.qpn(),
            qkey: *peer_qkey,
        };
        q.post_send(&[rdma_direct::SendWr::ud_send(u64::MAX, &sge, to).signaled()])?;
        let s = super::super::poll_one(q)?;
        if !s.status.is_ok() || s.wr_id != u64::MAX {
            return Err(Failure(format!("ECHO: the reply completed {s:?}")));
        }
        Ok(c.src_qp.qpn().to_string())
    }

    /// Answers one command (the table above).
    fn answer(&mut self, line: &str, ctx: &Context, pd: &Pd) -> Result<String, Failure> {
        if let Some(r) = mr_command(line, pd, &mut self.mrs) {
            return r;
        }
        let f: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| -> Result<u64, Failure> {
            f.get(i)
                .and_then(|x| x.parse().ok())
                .ok_or_else(|| Failure(format!("argument {i} of `{line}`")))
        };
        let sge = |mrs: &[Option<Mr>], p: &str| -> Result<(usize, usize, u32), Failure> {
            let (id, off, len) = wire::parse_sge(p)?;
            super::peer_mr(mrs, id)?;
            Ok((id as usize, off, len))
        };
        match f.first().copied().unwrap_or("") {
            "RECV" => {
                let mut parts = Vec::new();
                for p in f.get(2).copied().unwrap_or("-").split(',') {
                    if p != "-" {
                        parts.push(sge(&self.mrs, p)?);
                    }
                }
                let mrs = std::mem::take(&mut self.mrs);
                let r = (|| {
                    let sges = parts
                        .iter()
                        .map(|&(id, o, l)| Sge::new(mrs[id].as_ref().expect("checked"), o, l))
                        .collect::<rdma_direct::Result<Vec<_>>>()?;
                    self.post(&[RecvWr::new(num(1)?, &sges)])
                })();
                self.mrs = mrs;
                r.map(|()| String::new())
            }
            "RECVN" => {
                let (first, n) = (num(1)?, num(2)?);
                if n > 65_536 {
                    return Err(Failure("RECVN of more than 65,536".into()));
                }
                if first.checked_add(n).is_none() {
                    return Err(Failure(format!(
                        "RECVN: wr_ids {first}..{first} + {n} do not fit 64 bits"
                    )));
                }
                let (id, o, l) = sge(&self.mrs, f.get(3).copied().unwrap_or(""))?;
                let mrs = std::mem::take(&mut self.mrs);
                let r = (|| {
                    let s = [Sge::new(mrs[id].as_ref().expect("checked"), o, l)?];
                    let wrs: Vec<RecvWr> = (0..n).map(|k| RecvWr::new(first + k, &s)).collect();
                    self.post(&wrs)
                })();
                self.mrs = mrs;
                r.map(|()| String::new())
            }
            "POLL" => {
                let (count, ms) = (num(1)? as usize, num(2)?);
                match &mut self.qps {
                    FarQps::Own(q) => wire::poll_text(q, count, ms),
                    FarQps::Srq { cq, .. } => wire::poll_text(cq, count, ms),
                }
            }
            "QUERY" => Ok(format!("{:?}", self.qp(num(1)?)?.query()?.state)),
            "ERR" => {
                self.qp(num(1)?)?
                    .modify(QpState::Err, &rdma_direct::QpAttr::default())?;
                Ok(String::new())
            }
            "LIMIT" => {
                let n = u32::try_from(num(1)?)
                    .map_err(|_| Failure(format!("LIMIT: {} is over 32 bits", f[1])))?;
                self.srq()?; // no SRQ: refused before any event is dropped
                while ctx.get_async_event(Duration::ZERO)?.is_some() {}
                self.srq()?.set_limit(n)?;
                Ok(String::new())
            }
            "EVENT" => {
                let ms = num(1)?.min(60_000);
                Ok(match ctx.get_async_event(Duration::from_millis(ms))? {
                    Some(e) => format!("{e:?}"),
                    None => "-".into(),
                })
            }
            "ECHO" => {
                let off = usize::try_from(num(2)?).map_err(|_| Failure("ECHO: offset".into()))?;
                self.echo(num(1)?, off, pd)
            }
            "OUTSTANDING" => Ok(self.srq()?.outstanding().to_string()),
            "SRQN" => Ok(self.srq()?.srq_num().to_string()),
            "BYE" => Ok(String::new()),
            other => Err(Failure(format!("unknown command `{other}`"))),
        }
    }
}

// One of each lives per case: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Link<'a> {
    Tcp {
        out: TcpStream,
        inp: BufReader<TcpStream>,
    },
    Here {
        far: Far,
        ctx: &'a Context,
        pd: &'a Pd,
    },
}

/// Side B of a built case, on another host or in this process.
pub struct FarPeer<'a> {
    link: Link<'a>,
}

impl FarPeer<'_> {
    fn call(&mut self, line: &str) -> Result<String, Failure> {
        match &mut self.link {
            Link::Here { far, ctx, pd } => far.answer(line, ctx, pd),
            Link::Tcp { out, inp } => wire::tcp_call(out, inp, line),
        }
    }

    pub fn alloc_mr(&mut self, len: usize, access: rdma_direct::Access) -> Result<PeerMr, Failure> {
        wire::parse_reg(&self.call(&format!("REG {len} {}", access.bits()))?)
    }

    pub fn read(&mut self, mr: &PeerMr, offset: usize, len: usize) -> Result<Vec<u8>, Failure> {
        let a = self.call(&format!("READ {} {offset} {len}", mr.id))?;
        wire::unhex(&a).ok_or_else(|| wire::bad("READ"))
    }

    /// One receive over `(mr, offset, len)` pieces (to B's SRQ if it has one).
    pub fn post_recv(&mut self, wr_id: u64, sges: &[(PeerMr, usize, u32)]) -> Result<(), Failure> {
        self.call(&wire::recv_command(wr_id, sges)).map(|_| ())
    }

    /// `n` receives, wr_ids `first..first + n`, each over `(mr, offset, len)`.
    pub fn post_recvs(
        &mut self,
        first: u64,
        n: u64,
        (mr, offset, len): (PeerMr, usize, u32),
    ) -> Result<(), Failure> {
        self.call(&format!("RECVN {first} {n} {}:{offset}:{len}", mr.id))
            .map(|_| ())
    }

    /// Up to `count` completions of side B's, waiting up to `timeout`.
    pub fn poll_for(
        &mut self,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<Completion>, Failure> {
        wire::parse_completions(&self.call(&format!("POLL {count} {}", timeout.as_millis()))?)
    }

    /// Exactly `count` completions, within 20 s.
    pub fn poll(&mut self, count: usize) -> Result<Vec<Completion>, Failure> {
        let v = self.poll_for(count, Duration::from_secs(20))?;
        check_eq!(v.len(), count, "completions at side B within 20 s: {v:?}");
        Ok(v)
    }

    /// The state of side B's QP `i`.
    pub fn state(&mut self, i: usize) -> Result<QpState, Failure> {
        wire::parse_state(&self.call(&format!("QUERY {i}"))?)
    }

    /// Moves side B's QP `i` to ERR.
    pub fn move_to_err(&mut self, i: usize) -> Result<(), Failure> {
        self.call(&format!("ERR {i}")).map(|_| ())
    }

    /// Drops side B's pending device events, then arms its SRQ's limit.
    pub fn set_limit(&mut self, n: u32) -> Result<(), Failure> {
        self.call(&format!("LIMIT {n}")).map(|_| ())
    }

    /// Side B's next device event within `timeout`, in Rust's debug form.
    pub fn event(&mut self, timeout: Duration) -> Result<Option<String>, Failure> {
        let a = self.call(&format!("EVENT {}", timeout.as_millis()))?;
        Ok((a != "-").then_some(a))
    }

    /// Side B's SRQ's number (what its limit event names).
    pub fn srq_num(&mut self) -> Result<u32, Failure> {
        self.call("SRQN")?.parse().map_err(|_| wire::bad("SRQN"))
    }

    /// Side B takes one UD receive whose buffer starts at `offset` of `mr`
    /// and sends its payload back through an AH built from it; returns the
    /// source QPN it answered.
    pub fn echo(&mut self, mr: &PeerMr, offset: usize) -> Result<u32, Failure> {
        self.call(&format!("ECHO {} {offset}", mr.id))?
            .parse()
            .map_err(|_| wire::bad("ECHO"))
    }

    /// The receives side B's SRQ holds.
    pub fn outstanding(&mut self) -> Result<u32, Failure> {
        self.call("OUTSTANDING")?
            .parse()
            .map_err(|_| wire::bad("OUTSTANDING"))
    }
}

/// The debug form of the SRQ limit event of SRQ `srq_num`, as
/// [`FarPeer::event`] gives it.
pub fn limit_event(srq_num: u32) -> String {
    format!("{:?}", AsyncEvent::SrqLimitReached { srq_num })
}

#[cfg(test)]
#[path = "far_review_tests.rs"]
mod review_tests;
