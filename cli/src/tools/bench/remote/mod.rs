//! Two-host runs (`run_remote`): which side this is, the tests and what
//! each side reports, and both sides of every test; the connection in
//! `link.rs`, the settings both compare in `settings.rs`, the waiting
//! server in `serve.rs`.

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
/// - `-c DC` (`QpType::Dci` in the settings): each side makes a DCT on an
///   SRQ (keyed [`super::transport::DC_KEY`]) and a DCI, sends its DCT's
///   number and key (a version-2 exchange message,
///   `ConnInfo::of_dct`), and posts every WR from its DCI to the peer's
///   DCT (`Qp::post_dc`, through an AH toward the peer's port). The
///   peer's SENDs complete on the DCT, its own on the DCI. Reliable as RC
///   (send_bw's server counts `-n` SENDs); `-R` is refused (perftest's
///   rule), as is a device off mlx5's direct path (rxe).
///
/// Errors: as the one-process runs; `-q` over 1 with `-c UC|UD|DC` or
/// `--use-srq`, a UD size over the port's MTU ([`Error::Invalid`]); [`Error::Exchange`] when the two sides
/// disagree on the test or a flag of [`settings_line`], naming each flag
/// that differs ([`settings_mismatch`]).
pub fn run_remote(test: AnyTest, cfg: &BwConfig, role: &Role) -> Result<(RunInfo, AnyReport)> {
    run_remote_on(test, cfg, role, None)
}

/// [`run_remote`] on `ctx` when given (the tests' loopback: both sides
/// threads of one process on one sim `Context`), else on `lat.device`.
pub(crate) fn run_remote_on(
    test: AnyTest,
    cfg: &BwConfig,
    role: &Role,
    ctx: Option<&Context>,
) -> Result<(RunInfo, AnyReport)> {
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
            "-q over 1 runs the bandwidth tests on RC over the TCP exchange (not latency tests, not -R, -c UC, UD or DC, --use-srq)"
                .into(),
        ));
    }
    let unreliable = matches!(
        lat.qp_type,
        rdma_direct::QpType::Uc | rdma_direct::QpType::Ud
    );
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
        max_send_sge: lat.atomic.send_sges(),
        port: lat.port,
        gid_index: lat.gid_index,
        rnr_retry: if rx_depth > 0 { 7 } else { 6 },
        qp_type: lat.qp_type,
        cqe_compression: lat.cqe_comp,
        inline_recv: lat.inline_recv,
        ..QpConfig::default()
    };
    let Link {
        mut qp,
        mut dct,
        mut srq,
        ah,
        dc,
        mut more,
        mr,
        peer,
        mut tcp,
        client,
        info,
        _cm,
    } = connect_link(test, cfg, &qcfg, role, ctx)?;
    // DC: every post of the DCI names the peer's DCT; the peer's SENDs
    // complete on this side's DCT.
    let dc = dc.as_ref().map(DcTarget::dest);
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
                m.post(1, || post_to(&mut qp, dc, &[wr]))?;
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
            barrier(&mut tcp)?; // both receives posted before the first SEND
            let mut wr = send_wr(&sge).signaled();
            wr.inline = inline;
            // DC: the DCI's send completions come on its own CQ, not with
            // the DCT's receives: the last one is taken before the next
            // post (by then the peer has answered it).
            let mut unacked = false;
            for i in 0..rounds {
                if past(&mut deadline) {
                    break;
                }
                let rx = dct.as_mut().unwrap_or(&mut qp);
                if !client {
                    if watch {
                        if !wait_recv_unless_done(rx, &mut m, &mut tcp)? {
                            break;
                        }
                    } else {
                        wait_recv(rx, "this", &mut m)?;
                    }
                    m.post(1, || post_recv(rx, &mut srq, &recv))?;
                }
                if unacked {
                    wait_completion(&mut qp, "this", &mut m)?;
                }
                stamps.push(ticks());
                wr.wr_id = i as u64;
                m.post(1, || post_to(&mut qp, dc, &[wr]))?;
                unacked = dc.is_some();
                if client {
                    let rx = dct.as_mut().unwrap_or(&mut qp);
                    wait_recv(rx, "this", &mut m)?;
                    m.post(1, || post_recv(rx, &mut srq, &recv))?;
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
                    m.post(1, || post_to(&mut qp, dc, &[wr]))?;
                    wait_completion(&mut qp, "this", &mut m)?;
                }
            }
            None
        }
        AnyTest::Bw(t) => {
            if client {
                if t == BwTest::Send {
                    barrier(&mut tcp)?; // the server's receives are posted
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
                    let mut lane = Lane::new(q, wr, None, lat.iters)?;
                    lane.dc = dc;
                    lanes.push(lane);
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
                // (DC: the SENDs complete on the DCT.)
                let rx = dct.as_mut().unwrap_or(&mut qp);
                let mut qps: Vec<&mut Qp> = std::iter::once(rx).chain(more.iter_mut()).collect();
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
    barrier(&mut tcp)?;
    drop(more);
    drop(dct);
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

mod link;
mod serve;
mod settings;
pub(crate) mod side;

use link::*;
use serve::*;
pub use settings::*;
use side::*;

/// `exchange::barrier`, with the CLI's hint: two sides whose runs differ in
/// size or count (`-s`, `-n`) end apart, and the first to finish sees the
/// other leave.
pub(super) fn barrier(tcp: &mut std::net::TcpStream) -> rdma_direct::Result<()> {
    rdma_direct::exchange::barrier(tcp).map_err(|e| match e {
        rdma_direct::Error::Exchange(m) => {
            rdma_direct::Error::Exchange(format!("{m} (different -s or -n on the two sides?)"))
        }
        e => e,
    })
}
