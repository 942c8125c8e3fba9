//! Two-host runs (`run_remote`): the exchange, the connection (TCP or
//! rdma_cm), and both sides of every test.

use super::bw::{bw_loop, lanes_report, Lane};
use super::*;

/// Which side of a two-host run this process is.
#[derive(Clone, Debug)]
pub enum Role {
    /// Waits for a client on this listener, bound before the server says
    /// it waits and kept for every size of a `-a` run (perftest with no
    /// host argument).
    Server {
        listener: std::sync::Arc<rdma_direct::exchange::Listener>,
    },
    /// Connects to a server (perftest with a host argument).
    Client { host: String, port: u16 },
}

/// Any of the eight tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnyTest {
    Lat(LatTest),
    Bw(BwTest),
}

impl AnyTest {
    /// Every test, in perftest's order.
    pub const ALL: [AnyTest; 8] = [
        AnyTest::Lat(LatTest::Write),
        AnyTest::Lat(LatTest::Read),
        AnyTest::Lat(LatTest::Send),
        AnyTest::Lat(LatTest::Atomic),
        AnyTest::Bw(BwTest::Write),
        AnyTest::Bw(BwTest::Read),
        AnyTest::Bw(BwTest::Send),
        AnyTest::Bw(BwTest::Atomic),
    ];

    /// Our name for the test (`write_lat`, ...: perftest's without `ib_`).
    pub fn name(self) -> &'static str {
        self.perftest_name().trim_start_matches("ib_")
    }

    /// perftest's program name for the test (`ib_write_lat`, ...).
    pub fn perftest_name(self) -> &'static str {
        match self {
            AnyTest::Lat(LatTest::Write) => "ib_write_lat",
            AnyTest::Lat(LatTest::Send) => "ib_send_lat",
            AnyTest::Lat(LatTest::Read) => "ib_read_lat",
            AnyTest::Lat(LatTest::Atomic) => "ib_atomic_lat",
            AnyTest::Bw(BwTest::Write) => "ib_write_bw",
            AnyTest::Bw(BwTest::Send) => "ib_send_bw",
            AnyTest::Bw(BwTest::Read) => "ib_read_bw",
            AnyTest::Bw(BwTest::Atomic) => "ib_atomic_bw",
        }
    }

    /// perftest's banner title.
    pub fn title(self) -> &'static str {
        match self {
            AnyTest::Lat(t) => t.title(),
            AnyTest::Bw(t) => t.title(),
        }
    }

    fn moves_8_bytes(self) -> bool {
        matches!(
            self,
            AnyTest::Lat(LatTest::Atomic) | AnyTest::Bw(BwTest::Atomic)
        )
    }
}

/// What a side of a two-host run measured: the side that times (the
/// client, and both sides of write_lat and send_lat, as perftest) reports;
/// the passive server of the other tests reports nothing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AnyReport {
    Lat(LatReport),
    Bw(BwReport),
    /// This side served the peer's run and timed nothing.
    Served {
        iterations: u32,
    },
}

/// A two-host connection for one run: this side's QP and buffer
/// (`[0, size)` what it sends or where reads land, `[size, 2 size)` what
/// the peer writes, reads or adds to), the peer's offered half, the TCP
/// connection for the closing handshake.
struct Link {
    qp: Qp,
    /// The SRQ this side's QP receives from (`--use-srq`, on a side that receives).
    srq: Option<rdma_direct::Srq>,
    /// UD: the AH toward the peer's port.
    ah: Option<rdma_direct::Ah>,
    /// The other QPs of a `-q` run, connected in the same order on both sides.
    more: Vec<Qp>,
    mr: Mr,
    peer: rdma_direct::exchange::ConnInfo,
    tcp: std::net::TcpStream,
    client: bool,
    info: RunInfo,
    _cm: Option<CmConn>,
}

/// Swaps the facts of both sides over the exchange, checks that both run
/// the same test with the same settings (one line each way), connects the
/// QP and waits until both sides are in RTS.
fn connect_link(test: AnyTest, cfg: &BwConfig, qcfg: &QpConfig, role: &Role) -> Result<Link> {
    use rdma_direct::exchange::{self, ConnInfo};
    let lat = &cfg.lat;
    let ctx = Context::open_with(&lat.device, lat.backend)?;
    if ctx.data_path() == "direct" && lat.device == rdma_direct::SIM_DEVICE {
        return Err(Error::Invalid(
            "the sim is one process's device: run both sides in one process (no --server, no host)"
                .into(),
        ));
    }
    let size = if test.moves_8_bytes() { 8 } else { lat.size } as usize;
    let pd = ctx.alloc_pd()?;
    // [0, size) what this side sends; from size, the peer's half (on UD
    // 40 bytes more: a receive starts with the GRH slot).
    let mr = pd.reg_mr(
        2 * size + 40,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
    )?;
    // --use-srq: a side that receives takes its receives from an SRQ (as
    // perftest, the receiving side makes it: both for send_lat, the
    // server for send_bw).
    let client = matches!(role, Role::Client { .. });
    let receives = matches!(test, AnyTest::Lat(LatTest::Send))
        || (matches!(test, AnyTest::Bw(BwTest::Send)) && !client);
    let srq = if lat.use_srq && receives {
        Some(pd.create_srq(qcfg.max_recv_wr.max(1), 1)?)
    } else {
        None
    };
    let mut qp = match &srq {
        Some(s) => pd.create_qp_on_srq(qcfg, s)?,
        None => pd.create_qp(qcfg)?,
    };
    let ud = qcfg.qp_type == rdma_direct::QpType::Ud;
    if ud {
        qp.ready_ud(super::transport::UD_QKEY)?;
        if size as u32 > qp.ud_mtu() {
            return Err(Error::Invalid(format!(
                "-c UD -s {size}: a UD message is at most the port's active MTU, {} bytes",
                qp.ud_mtu()
            )));
        }
    }
    let psn = Qp::random_psn();
    let mine = ConnInfo {
        endpoint: qp.endpoint(),
        psn,
        rkey: mr.rkey(),
        addr: mr.addr() + size as u64,
        len: size as u64,
        qkey: if ud { super::transport::UD_QKEY } else { 0 },
    };
    let (peer, mut tcp, role_name, client) = match role {
        Role::Server { listener } => {
            let (p, s) = listener.accept(&mine)?;
            (p, s, "server", false)
        }
        Role::Client { host, port } => {
            let (p, s) = exchange::connect(host, *port, Duration::from_secs(60), &mine)?;
            (p, s, "client", true)
        }
    };
    // Both sides must run the same thing: one line each way.
    let params = settings_line(test, cfg);
    let theirs = exchange::swap_line(&mut tcp, &params)?;
    if let Some(diff) = settings_mismatch(&params, theirs.trim_end()) {
        return Err(Error::Exchange(format!(
            "{diff}: give both sides the same test and flags"
        )));
    }
    if peer.len < size as u64
        || peer.addr.checked_add(peer.len).is_none()
        || peer.addr < size as u64
    {
        return Err(Error::Exchange(format!(
            "the peer offers {} bytes at {:#x}; this run needs {size}",
            peer.len, peer.addr
        )));
    }
    // The connection through the CM lives until the run's closing barrier.
    let (cm, ah) = if ud {
        if peer.qkey == 0 {
            return Err(Error::Exchange(
                "the peer's UD QP sent qkey 0 (a build before the exchange's qkey field?)".into(),
            ));
        }
        (None, Some(pd.create_ah(&qp.av_to(&peer.endpoint))?))
    } else {
        (
            connect_qp(&mut qp, lat.rdma_cm, role, psn, &peer, &mine)?,
            None,
        )
    };
    // -q: the other QPs swap their facts over the same connection.
    let mut more = Vec::new();
    for _ in 1..cfg.qps {
        let mut q = pd.create_qp(qcfg)?;
        let psn = Qp::random_psn();
        let mine_q = ConnInfo {
            endpoint: q.endpoint(),
            psn,
            ..mine
        };
        let peer_q = exchange::swap(&mut tcp, &mine_q)?;
        q.connect_remote(psn, &peer_q.endpoint, peer_q.psn)?;
        more.push(q);
    }
    exchange::barrier(&mut tcp)?;
    let path = qp.path();
    let info = RunInfo {
        qps: cfg.qps,
        rdma_cm: lat.rdma_cm,
        completion: cfg_completion(lat),
        role: Some(role_name),
        device: ctx.name().into(),
        data_path: qp.data_path(),
        inline: qcfg.max_inline,
        tx_depth: match test {
            AnyTest::Lat(_) => 1,
            AnyTest::Bw(_) => cfg.tx_depth,
        },
        qp_type: qcfg.qp_type,
        use_srq: lat.use_srq,
        sides: [
            SideInfo {
                qpn: qp.qp_num(),
                path,
                rkey: mr.rkey().0,
                vaddr: mr.addr(),
            },
            SideInfo {
                qpn: peer.endpoint.qpn,
                path: rdma_direct::PathInfo {
                    gid: peer.endpoint.gid,
                    lid: peer.endpoint.lid,
                    sq_psn: peer.psn,
                    dest_qpn: qp.qp_num(),
                    ..path
                },
                rkey: peer.rkey.0,
                vaddr: peer.addr - size as u64,
            },
        ],
    };
    Ok(Link {
        qp,
        srq,
        ah,
        more,
        mr,
        peer,
        tcp,
        client,
        info,
        _cm: cm,
    })
}

/// The settings both sides of a two-host run must share, as one line for
/// [`rdma_direct::exchange::swap_line`]: the test's name, then `FLAG=VALUE`
/// for `-s` (bytes; 8 for the atomics), `-n`, `-t`, `-Q`, `-l`, `-q`, `-D`
/// (seconds, or `none`), `-A`, `-R` (`yes`/`no`), `-c` and `--use-srq`
/// (`yes`/`no`), flags spelled as the
/// CLI spells them. [`settings_mismatch`] compares two.
pub fn settings_line(test: AnyTest, cfg: &BwConfig) -> String {
    let lat = &cfg.lat;
    let size = if test.moves_8_bytes() { 8 } else { lat.size };
    let duration = cfg
        .duration
        .or(lat.duration)
        .map_or("none".to_string(), |d| d.as_secs().to_string());
    let atomic = lat.atomic.name();
    format!(
        "{} -s={size} -n={} -t={} -Q={} -l={} -q={} -D={duration} -A={atomic} -R={} -c={} --use-srq={}",
        test.name(),
        lat.iters,
        cfg.tx_depth,
        cfg.cq_mod,
        cfg.post_list,
        cfg.qps,
        if lat.rdma_cm { "yes" } else { "no" },
        lat.qp_type.name(),
        if lat.use_srq { "yes" } else { "no" }
    )
}

/// What differs between this side's [`settings_line`] and the peer's, in
/// the CLI's words (`-s 128 here, -s 64 on the peer; -R here, no -R on the
/// peer`), or `None` when they agree. A line that is not a settings line
/// (another version of this tool) is said to be one.
pub fn settings_mismatch(mine: &str, theirs: &str) -> Option<String> {
    if mine == theirs {
        return None;
    }
    fn parse(line: &str) -> Option<(&str, Vec<(&str, &str)>)> {
        let mut it = line.split(' ');
        let test = it.next()?;
        let pairs = it
            .map(|kv| kv.split_once('='))
            .collect::<Option<Vec<_>>>()?;
        Some((test, pairs))
    }
    fn spell(flag: &str, value: &str) -> String {
        match (flag, value) {
            ("-R" | "--use-srq", "yes") => flag.into(),
            ("-R" | "--use-srq", _) | ("-D", "none") => format!("no {flag}"),
            _ => format!("{flag} {value}"),
        }
    }
    let (Some((my_test, my)), Some((their_test, their))) = (parse(mine), parse(theirs)) else {
        return Some(format!(
            "the peer's settings line {theirs:?} is not one this version reads: run the same rdma-direct on both sides"
        ));
    };
    let mut diffs = Vec::new();
    if my_test != their_test {
        diffs.push(format!("{my_test} here, {their_test} on the peer"));
    }
    for &(flag, v) in &my {
        match their.iter().find(|(f, _)| *f == flag) {
            Some(&(_, w)) if w == v => {}
            Some(&(_, w)) => diffs.push(format!(
                "{} here, {} on the peer",
                spell(flag, v),
                spell(flag, w)
            )),
            None => diffs.push(format!(
                "{} here, the peer does not say {flag}",
                spell(flag, v)
            )),
        }
    }
    if diffs.is_empty() {
        // The same pairs in another order or with more: another version.
        return Some(format!(
            "the peer's settings line {theirs:?} is not this side's {mine:?}: run the same rdma-direct on both sides"
        ));
    }
    Some(format!("the two sides differ: {}", diffs.join("; ")))
}

#[cfg(feature = "verbs")]
type CmConn = rdma_direct::cm::CmConnection;
#[cfg(not(feature = "verbs"))]
type CmConn = ();

/// Connects `qp` toward the peer: with the exchanged facts, or (`-R`)
/// through the RDMA connection manager on the same port number.
fn connect_qp(
    qp: &mut Qp,
    rdma_cm: bool,
    role: &Role,
    psn: u32,
    peer: &rdma_direct::exchange::ConnInfo,
    mine: &rdma_direct::exchange::ConnInfo,
) -> Result<Option<CmConn>> {
    if !rdma_cm {
        qp.connect_remote(psn, &peer.endpoint, peer.psn)?;
        return Ok(None);
    }
    #[cfg(feature = "verbs")]
    {
        let offer = rdma_direct::cm::CmOffer {
            rkey: mine.rkey,
            addr: mine.addr,
            len: mine.len,
        };
        let wait = Duration::from_secs(60);
        let conn = match role {
            Role::Server { listener } => {
                rdma_direct::cm::CmListener::bind(listener.port())?
                    .accept(qp, &offer, wait)?
                    .0
            }
            Role::Client { host, port } => {
                rdma_direct::cm::connect(qp, host, *port, &offer, wait)?.0
            }
        };
        Ok(Some(conn))
    }
    #[cfg(not(feature = "verbs"))]
    {
        let _ = (role, mine);
        Err(Error::Invalid(
            "rdma_cm (-R) needs the `verbs` feature".into(),
        ))
    }
}

/// Runs `test` between two hosts as perftest runs it: the sides swap their
/// QP and buffer facts over TCP ([`rdma_direct::exchange`]) and check that both
/// run the same test and flags, connect, run, and meet again before either
/// tears its QP down.
///
/// - write_lat: the sides take turns RDMA-writing `size` bytes into each
///   other's buffer, each waiting for the last byte to change before
///   writing back; the client writes first; both report.
/// - send_lat: the same with SENDs into a receive each side keeps posted.
/// - read_lat, atomic_lat (fetch-and-add), and the four bandwidth tests:
///   the client posts against the server's buffer and reports; the server
///   is passive (for send_bw it keeps receives posted: `max(tx_depth, 512)`
///   at most `iters`, as perftest's `-r`), and reports
///   [`AnyReport::Served`]. SENDs retry RNR forever (`rnr_retry` 7, as
///   perftest), since the server reposts at its own pace.
/// - `-c UC` / `-c UD` (`lat.qp_type`): UC connects as RC does; UD brings
///   both QPs up with [`super::transport::UD_QKEY`], sends through an AH
///   toward the peer's port, to the QPN and qkey its exchange message
///   gave, into receives 40 bytes longer (the GRH slot). Neither retries:
///   a latency round whose message is lost fails after the wait limit;
///   the server of an unreliable send_bw serves until the client is done
///   and prints how many SENDs arrived.
/// - `--use-srq`: the receiving side's QP takes its receives from an SRQ
///   it makes (both sides of send_lat, the server of send_bw).
///
/// Errors: as the one-process runs; `-q` over 1 with `-c UC|UD` or
/// `--use-srq`, a UD size over the port's MTU ([`Error::Invalid`]); [`Error::Exchange`] when the two sides
/// disagree on the test or a flag of [`settings_line`], naming each flag
/// that differs ([`settings_mismatch`]).
pub fn run_remote(test: AnyTest, cfg: &BwConfig, role: &Role) -> Result<(RunInfo, AnyReport)> {
    let lat = &cfg.lat;
    let size_asked = if test.moves_8_bytes() { 8 } else { lat.size };
    let rounds = if lat.duration.is_some() && matches!(test, AnyTest::Lat(_)) {
        DURATION_SAMPLES
    } else {
        lat.iters
    };
    let mut stamps: Vec<u64> = checked_run(size_asked, rounds)?;
    check_bw(cfg)?;
    if cfg.qps > 1
        && (matches!(test, AnyTest::Lat(_))
            || lat.rdma_cm
            || lat.qp_type != rdma_direct::QpType::Rc
            || lat.use_srq)
    {
        return Err(Error::Invalid(
            "-q over 1 runs the bandwidth tests on RC over the TCP exchange (not latency tests, not -R, -c UC or UD, --use-srq)"
                .into(),
        ));
    }
    let unreliable = lat.qp_type != rdma_direct::QpType::Rc;
    let size = size_asked as usize;
    let sends = matches!(
        test,
        AnyTest::Lat(LatTest::Write | LatTest::Send) | AnyTest::Bw(BwTest::Write | BwTest::Send)
    );
    let inline = sends && size_asked <= lat.inline_size;
    let rx_depth = match test {
        AnyTest::Lat(LatTest::Send) => 1,
        AnyTest::Bw(BwTest::Send) => cfg.tx_depth.max(512).min(lat.iters.max(cfg.tx_depth)),
        _ => 0,
    };
    let qcfg = QpConfig {
        max_send_wr: match test {
            AnyTest::Lat(_) => 16,
            AnyTest::Bw(_) => cfg.tx_depth,
        },
        max_recv_wr: rx_depth,
        max_inline: if inline { lat.inline_size } else { 0 },
        port: lat.port,
        gid_index: lat.gid_index,
        rnr_retry: if rx_depth > 0 { 7 } else { 6 },
        qp_type: lat.qp_type,
        ..QpConfig::default()
    };
    let Link {
        mut qp,
        mut srq,
        ah,
        mut more,
        mr,
        peer,
        mut tcp,
        client,
        info,
        _cm,
    } = connect_link(test, cfg, &qcfg, role)?;
    let to_peer = RemoteAddr {
        addr: peer.addr,
        rkey: peer.rkey,
    };
    let sge = [Sge::new(&mr, 0, size_asked)?];
    let rsge = [Sge::new(
        &mr,
        size,
        super::transport::recv_len(lat.qp_type, size_asked),
    )?];
    let recv = [RecvWr::new(0, &rsge)];
    // A SEND to the peer: on UD through the AH, to its QPN with its qkey.
    let send_wr = |sge| match &ah {
        Some(ah) => SendWr::ud_send(
            0,
            sge,
            rdma_direct::UdDest {
                ah,
                remote_qpn: peer.endpoint.qpn,
                qkey: peer.qkey,
            },
            None,
        ),
        None => SendWr::send(0, sge),
    };
    let post_recv = super::transport::post_recv;
    let mut m = CpuMeter::new(&cfg.lat);
    // -D on a latency test: the client stops at its deadline, after a whole
    // round trip; the server stops when the client's closing byte arrives.
    let mut deadline = if client {
        deadline_after(lat.duration)
    } else {
        None
    };
    let watch = lat.duration.is_some() && !client;
    let report = match test {
        AnyTest::Lat(LatTest::Write) => {
            let mut wr = SendWr::rdma_write(0, &sge, to_peer).signaled();
            wr.inline = inline;
            let last = size - 1;
            for i in 0..rounds {
                if past(&mut deadline) {
                    break;
                }
                let seq = (i as u8).wrapping_add(1);
                if !client {
                    let mut stopped = false;
                    let mut check = PeerCheck::new();
                    spin_until(
                        || format!("iteration {i}: the client's write never arrived"),
                        || {
                            if mr.load_u8(size + last) == seq {
                                return Ok(true);
                            }
                            if watch && check.due() && peer_done(&mut tcp)? {
                                stopped = true;
                                return Ok(true);
                            }
                            Ok(false)
                        },
                    )?;
                    if stopped {
                        break;
                    }
                }
                stamps.push(ticks());
                mr.store_u8(last, seq);
                wr.wr_id = i as u64;
                m.post(1, || qp.post_send(&[wr]))?;
                if client {
                    spin_until(
                        || format!("iteration {i}: the server's write never arrived"),
                        || Ok(mr.load_u8(size + last) == seq),
                    )?;
                }
                wait_completion(&mut qp, "this", &mut m)?;
            }
            None
        }
        AnyTest::Lat(LatTest::Send) => {
            m.post(1, || post_recv(&mut qp, &mut srq, &recv))?;
            rdma_direct::exchange::barrier(&mut tcp)?; // both receives posted before the first SEND
            let mut wr = send_wr(&sge).signaled();
            wr.inline = inline;
            for i in 0..rounds {
                if past(&mut deadline) {
                    break;
                }
                if !client {
                    if watch {
                        if !wait_recv_unless_done(&mut qp, &mut m, &mut tcp)? {
                            break;
                        }
                    } else {
                        wait_recv(&mut qp, "this", &mut m)?;
                    }
                    m.post(1, || post_recv(&mut qp, &mut srq, &recv))?;
                }
                stamps.push(ticks());
                wr.wr_id = i as u64;
                m.post(1, || qp.post_send(&[wr]))?;
                if client {
                    wait_recv(&mut qp, "this", &mut m)?;
                    m.post(1, || post_recv(&mut qp, &mut srq, &recv))?;
                }
            }
            // Send completions not yet seen are drained with the QP.
            None
        }
        AnyTest::Lat(t @ (LatTest::Read | LatTest::Atomic)) => {
            if client {
                let mut wr = if t == LatTest::Read {
                    SendWr::rdma_read(0, &sge, to_peer).signaled()
                } else {
                    lat.atomic.wr(0, &sge, to_peer).signaled()
                };
                for i in 0..rounds {
                    if past(&mut deadline) {
                        break;
                    }
                    stamps.push(ticks());
                    wr.wr_id = i as u64;
                    m.post(1, || qp.post_send(&[wr]))?;
                    wait_completion(&mut qp, "this", &mut m)?;
                }
            }
            None
        }
        AnyTest::Bw(t) => {
            if client {
                if t == BwTest::Send {
                    rdma_direct::exchange::barrier(&mut tcp)?; // the server's receives are posted
                }
                let mut wr = match t {
                    BwTest::Write => SendWr::rdma_write(0, &sge, to_peer),
                    BwTest::Read => SendWr::rdma_read(0, &sge, to_peer),
                    BwTest::Send => send_wr(&sge),
                    BwTest::Atomic => lat.atomic.wr(0, &sge, to_peer),
                };
                wr.inline = inline;
                let mut lanes = Vec::with_capacity(cfg.qps as usize);
                for q in std::iter::once(&mut qp).chain(more.iter_mut()) {
                    lanes.push(Lane::new(q, wr, None, lat.iters)?);
                }
                let count = bw_loop(&mut lanes, cfg, &mut m)?;
                let mut r = match cfg.duration {
                    None => lanes_report(size_asked, &lanes),
                    Some(_) => count.report(size_asked),
                };
                r.cpu = m.report();
                Some(AnyReport::Bw(r))
            } else if t == BwTest::Send {
                // UC and UD drop a SEND that finds no receive: the client
                // decides the count, and the server says what arrived.
                let until = match (cfg.duration, unreliable) {
                    (None, false) => ServeUntil::Received(lat.iters),
                    _ => ServeUntil::PeerDone,
                };
                let mut qps: Vec<&mut Qp> =
                    std::iter::once(&mut qp).chain(more.iter_mut()).collect();
                let got =
                    serve_send_bw(&mut qps, &mut srq, &recv, rx_depth, until, &mut m, &mut tcp)?;
                if unreliable {
                    eprintln!(
                        "rdma-direct: server: {got} SENDs arrived ({} drops what finds no receive posted)",
                        lat.qp_type.name()
                    );
                }
                None
            } else {
                None
            }
        }
    };
    rdma_direct::exchange::barrier(&mut tcp)?;
    drop(more);
    drop(qp);
    let report = match (report, test) {
        (Some(r), _) => r,
        (None, AnyTest::Lat(t)) if client || matches!(t, LatTest::Write | LatTest::Send) => {
            AnyReport::Lat(lat_report(size_asked, &stamps, t.rtt_factor(), &m)?)
        }
        (None, _) => AnyReport::Served {
            iterations: lat.iters,
        },
    };
    Ok((info, report))
}

/// Whether the peer's closing handshake byte has arrived on `tcp` (it is
/// left there for [`rdma_direct::exchange::barrier`]); a closed connection is an
/// error.
fn peer_done(tcp: &mut std::net::TcpStream) -> Result<bool> {
    let io = |e: std::io::Error| Error::Exchange(format!("the peer left: {e}"));
    tcp.set_nonblocking(true).map_err(io)?;
    let r = tcp.peek(&mut [0u8; 1]);
    tcp.set_nonblocking(false).map_err(io)?;
    match r {
        Ok(0) => Err(Error::Exchange(
            "the client left before its closing handshake".into(),
        )),
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(io(e)),
    }
}

/// When the server of send_bw stops.
enum ServeUntil {
    /// After this many SENDs arrived.
    Received(u32),
    /// When the client's closing handshake byte arrives (`-D`: the client
    /// decides the count).
    PeerDone,
}

/// When a waiting server looks for the client's closing byte: once the wait
/// has lasted 1 ms, then every 1 ms (a round trip never waits that long, so
/// the check, three system calls, stays out of the timed waits).
struct PeerCheck {
    start: u64,
    last: u64,
    ms: u64,
}

impl PeerCheck {
    fn new() -> Self {
        let t = ticks();
        PeerCheck {
            start: t,
            last: t,
            ms: (1e6 * ticks_per_ns()) as u64,
        }
    }

    #[inline]
    fn due(&mut self) -> bool {
        let t = ticks();
        if t.wrapping_sub(self.start) > self.ms && t.wrapping_sub(self.last) > self.ms {
            self.last = t;
            return true;
        }
        false
    }
}

/// Waits for a receive completion (send completions on the way are taken)
/// unless the client's closing byte arrives first: `false` then.
fn wait_recv_unless_done(
    qp: &mut Qp,
    m: &mut CpuMeter,
    tcp: &mut std::net::TcpStream,
) -> Result<bool> {
    let mut wc = [Completion::default(); 4];
    let mut stopped = false;
    let mut check = PeerCheck::new();
    spin_until(
        || format!("no receive completion within {WAIT_LIMIT:?}"),
        || {
            let n = m.poll(qp, &mut wc)?;
            if recv_among(&wc[..n])? {
                return Ok(true);
            }
            if check.due() && peer_done(tcp)? {
                stopped = true;
                return Ok(true);
            }
            Ok(false)
        },
    )?;
    Ok(!stopped)
}

/// The server of send_bw: keeps `rx_depth` receives posted (to `srq` when
/// there is one), reposting each one consumed, until `until` says it is
/// over. Returns how many SENDs arrived.
fn serve_send_bw(
    qps: &mut [&mut Qp],
    srq: &mut Option<rdma_direct::Srq>,
    recv: &[RecvWr<'_>],
    rx_depth: u32,
    until: ServeUntil,
    m: &mut CpuMeter,
    tcp: &mut std::net::TcpStream,
) -> Result<u32> {
    for qp in qps.iter_mut() {
        for _ in 0..rx_depth {
            m.post(1, || super::transport::post_recv(qp, srq, recv))?;
        }
    }
    rdma_direct::exchange::barrier(tcp)?;
    let iters = match until {
        ServeUntil::Received(n) => n,
        ServeUntil::PeerDone => u32::MAX,
    };
    // SENDs arrived, per QP.
    let mut received = vec![0u32; qps.len()];
    let mut wc = [Completion::default(); 16];
    let limit = (WAIT_LIMIT.as_nanos() as f64 * ticks_per_ns()) as u64;
    let mut last_progress = ticks();
    let mut check = PeerCheck::new();
    while received.iter().any(|&r| r < iters) {
        let mut got = 0;
        for (qp, rcv) in qps.iter_mut().zip(received.iter_mut()) {
            let n = m.poll(qp, &mut wc)?;
            for c in &wc[..n] {
                if !c.status.is_ok() {
                    return Err(Error::from(*c));
                }
                *rcv += 1;
                if rcv.saturating_add(rx_depth) <= iters {
                    m.post(1, || super::transport::post_recv(qp, srq, recv))?;
                }
            }
            got += n;
        }
        let t = ticks();
        if got > 0 {
            last_progress = t;
        } else {
            if matches!(until, ServeUntil::PeerDone) && check.due() && peer_done(tcp)? {
                return Ok(received.iter().sum());
            }
            if t.wrapping_sub(last_progress) > limit && !matches!(until, ServeUntil::PeerDone) {
                let total: u32 = received.iter().sum();
                return Err(Error::Timeout(format!(
                    "{total} of {} SENDs arrived; none in {WAIT_LIMIT:?}",
                    iters.saturating_mul(qps.len() as u32)
                )));
            }
        }
    }
    Ok(received.iter().sum())
}
