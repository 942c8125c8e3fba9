//! A UD RPC echo: one UD QP per side; the client keeps `-w` requests
//! outstanding, the server SENDs each request's bytes back to the client's
//! QP (through an AH built from the client's endpoint, which came over the
//! TCP exchange), and the client checks every reply against its request. UD neither
//! acknowledges nor retries, so the client resends a request whose reply has
//! not come within 200 ms (the server echoes a resent request again; a
//! second reply is counted once), and gives up after 5 s with a message
//! naming the request.
//!
//! Each request is `-s` bytes: its 8-byte id, then a pattern of the id.
//! Each receive is 40 bytes more: a UD receive begins with the GRH slot.
//! Each side's QP has its own qkey (the server `0x11111111`, perftest's
//! `DEF_QKEY`; the client `0x11112222`); the QPNs, qkeys, LIDs and GIDs
//! travel over the TCP exchange (`rdma_direct::exchange`, the qkey at bytes
//! 44..48), and each side sends with the qkey the other said.
//!
//! With `-R` the two sides find each other through rdma_cm's UDP port
//! space instead (no TCP): the client's resolution answers with the
//! server's address, QPN and qkey (`cm::connect_ud`); the server learns
//! nothing of the client until its first request, and answers it through
//! an AH built from that receive (`Pd::create_ah_from_recv`,
//! `ibv_create_ah_from_wc`) to the completion's source QPN. Both QPs take
//! the CM's qkey (`cm::UDP_QKEY`).
//!
//! ```text
//! cargo run --example ud_echo                          # the sim: two threads of this process
//! cargo run --example ud_echo -- -d rxe0               # server: waits on TCP port 18515
//! cargo run --example ud_echo -- -d rxe0 SERVER_HOST   # client
//! cargo run --example ud_echo -- -d rxe0 -R            # server, through rdma_cm (port 18515 of its UDP space)
//! cargo run --example ud_echo -- -d rxe0 -R SERVER_IP  # client, through rdma_cm
//! ```
//!
//! Flags: `-d DEV`, `-p PORT`, `-n REQUESTS` (default 10000), `-w WINDOW`
//! (outstanding requests, default 32), `-s SIZE` (8 to the port's MTU,
//! default 64), `-g GID_INDEX`, `-R` (rdma_cm); `-h` prints the usage. A bad argument exits
//! 2, a failed run 1.

use rdma_direct::exchange::{self, ConnInfo};
use rdma_direct::{
    Access, Ah, Completion, Context, Endpoint, Error, Mr, Pd, Qp, QpConfig, QpType, RecvWr, Result,
    Rkey, SendWr, Sge, UdDest, WcOpcode,
};
use std::time::{Duration, Instant};

const USAGE: &str = "\
usage: ud_echo [-d DEV] [-p PORT] [-n REQUESTS] [-w WINDOW] [-s SIZE] [-g GID_INDEX] [-R] [HOST]
  -d, --ib-dev DEV     device (default: sim; both sides run as two threads of this process)
  -p, --port PORT      TCP port of the QP exchange; with -R the port in rdma_cm's UDP space (default 18515)
  -n, --requests N     requests the client makes (default 10000)
  -w, --window W       requests outstanding at once, 1..=256 (default 32)
  -s, --size SIZE      bytes per request, 8 to the port's MTU (default 64)
  -g, --gid-idx INDEX  local GID index (default: the device's)
  -R, --rdma_cm        find the peer through rdma_cm's UDP port space, not the TCP exchange
  -h, --help           print this and exit
  HOST                 connect to the server on HOST (without: be the server)
";

/// The server QP's qkey (perftest's `DEF_QKEY`).
const SERVER_QKEY: u32 = 0x1111_1111;
/// The client QP's qkey: not the server's, so that a side sending with its
/// own qkey rather than the one the exchange gave would be dropped.
const CLIENT_QKEY: u32 = 0x1111_2222;
/// A request id that tells the server the run is over.
const DONE: u64 = u64::MAX;
/// Bytes of the GRH slot at the start of every UD receive.
const GRH: usize = 40;
const RESEND_AFTER: Duration = Duration::from_millis(200);
const GIVE_UP_AFTER: Duration = Duration::from_secs(5);

struct Args {
    dev: String,
    port: u16,
    requests: u64,
    window: u32,
    size: u32,
    gid: Option<u8>,
    host: Option<String>,
    rdma_cm: bool,
}

fn args() -> std::result::Result<Option<Args>, String> {
    let mut a = Args {
        dev: rdma_direct::SIM_DEVICE.into(),
        port: exchange::DEFAULT_PORT,
        requests: 10_000,
        window: 32,
        size: 64,
        gid: None,
        host: None,
        rdma_cm: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(f) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match f.as_str() {
            "-d" | "--ib-dev" => a.dev = val("-d")?,
            "-p" | "--port" => a.port = val("-p")?.parse().map_err(|e| format!("-p: {e}"))?,
            "-n" | "--requests" => {
                a.requests = val("-n")?.parse().map_err(|e| format!("-n: {e}"))?
            }
            "-w" | "--window" => a.window = val("-w")?.parse().map_err(|e| format!("-w: {e}"))?,
            "-s" | "--size" => a.size = val("-s")?.parse().map_err(|e| format!("-s: {e}"))?,
            "-g" | "--gid-idx" => a.gid = Some(val("-g")?.parse().map_err(|e| format!("-g: {e}"))?),
            "-R" | "--rdma_cm" => a.rdma_cm = true,
            "-h" | "--help" => return Ok(None),
            h if !h.starts_with('-') && a.host.is_none() => a.host = Some(h.into()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.requests == 0 || !(1..=256).contains(&a.window) || a.size < 8 || a.size > 4096 {
        return Err("-n must be at least 1, -w 1..=256, -s 8..=4096".into());
    }
    if a.rdma_cm && a.dev == rdma_direct::SIM_DEVICE {
        return Err(
            "-R needs a kernel RDMA device (-d rxe0): the sim has no connection manager".into(),
        );
    }
    Ok(Some(a))
}

fn config(a: &Args) -> QpConfig {
    QpConfig {
        qp_type: QpType::Ud,
        max_send_wr: 2 * a.window,
        max_recv_wr: 2 * a.window,
        max_inline: 0,
        gid_index: a.gid,
        ..QpConfig::default()
    }
}

/// Request `id`'s bytes: the id, then a pattern of it.
fn fill(buf: &mut [u8], id: u64) {
    buf[..8].copy_from_slice(&id.to_le_bytes());
    for (k, b) in buf[8..].iter_mut().enumerate() {
        *b = (id as u8).wrapping_mul(31).wrapping_add(k as u8);
    }
}

/// One side: its UD QP, an AH toward the peer, the peer's QPN and qkey, and one
/// MR of `slots` send slots then `slots` receive slots (each `40 + size`).
struct Side {
    qp: Qp,
    /// `None` on a server through rdma_cm until the first request.
    ah: Option<Ah>,
    peer_qpn: u32,
    peer_qkey: u32,
    mr: Mr,
    size: usize,
    slots: usize,
}

impl Side {
    /// `qkey` is this side's; `peer_qkey` the one the peer's QP takes.
    fn new(
        pd: &Pd,
        mut qp: Qp,
        qkey: u32,
        peer: &Endpoint,
        peer_qkey: u32,
        a: &Args,
    ) -> Result<Side> {
        qp.ready_ud(qkey)?;
        let ah = pd.create_ah(&qp.av_to(peer))?;
        Side::up(pd, qp, Some(ah), peer.qpn, peer_qkey, a)
    }

    /// A side whose QP is up (in RTS), sending through `ah` to `peer_qpn`.
    fn up(
        pd: &Pd,
        qp: Qp,
        ah: Option<Ah>,
        peer_qpn: u32,
        peer_qkey: u32,
        a: &Args,
    ) -> Result<Side> {
        let mtu = qp.ud_mtu();
        if a.size > mtu {
            return Err(Error::Invalid(format!(
                "-s {}: a UD message is at most the port's active MTU, {mtu} bytes",
                a.size
            )));
        }
        let slots = 2 * a.window as usize;
        let size = a.size as usize;
        let mr = pd.alloc_mr(2 * slots * (GRH + size), Access::LOCAL_WRITE)?;
        let mut s = Side {
            qp,
            ah,
            peer_qpn,
            peer_qkey,
            mr,
            size,
            slots,
        };
        for k in 0..slots {
            s.post_recv(k)?;
        }
        Ok(s)
    }

    fn recv_at(&self, k: usize) -> usize {
        (self.slots + k) * (GRH + self.size)
    }

    fn post_recv(&mut self, k: usize) -> Result<()> {
        let sge = [Sge::new(
            &self.mr,
            self.recv_at(k),
            (GRH + self.size) as u32,
        )?];
        self.qp.post_recv(&[RecvWr::new(k as u64, &sge)])
    }

    /// SENDs send slot `k` (`bytes`, written there first) to the peer.
    fn send(&mut self, k: usize, bytes: &[u8]) -> Result<()> {
        let at = k * (GRH + self.size);
        self.mr.write(at, bytes)?;
        let sge = [Sge::new(&self.mr, at, bytes.len() as u32)?];
        let ah = self.ah.as_ref().ok_or(Error::Invalid(
            "no AH toward the peer yet (no request has come)".into(),
        ))?;
        let to = UdDest {
            ah,
            remote_qpn: self.peer_qpn,
            qkey: self.peer_qkey,
        };
        let wr = SendWr::ud_send(k as u64, &sge, to).signaled();
        self.qp.post_send(&[wr])
    }

    /// The payload of the receive `c` completed, read in place (after the
    /// GRH slot), and the receive posted again.
    fn take(&mut self, c: &Completion, out: &mut [u8]) -> Result<usize> {
        if !c.status.is_ok() {
            return Err(Error::from(*c));
        }
        let k = c.wr_id as usize;
        let n = (c.byte_len as usize).saturating_sub(GRH).min(out.len());
        self.mr.read(self.recv_at(k) + GRH, &mut out[..n])?;
        self.post_recv(k)?;
        Ok(n)
    }
}

/// The server: echoes every request back until the client says it is done.
/// With no AH yet (rdma_cm), the first request's receive makes one, and its
/// source QPN is where the replies go (`pd` is then needed).
fn serve(s: &mut Side, pd: Option<&Pd>) -> Result<u64> {
    let mut wc = [Completion::default(); 16];
    let mut buf = vec![0u8; s.size];
    let mut next = 0usize;
    let (mut echoed, mut inflight) = (0u64, 0usize);
    let mut last = Instant::now();
    loop {
        let n = s.qp.poll(&mut wc)?;
        if n == 0 {
            if last.elapsed() > Duration::from_secs(60) {
                return Err(Error::Timeout("the client sent nothing for 60 s".into()));
            }
            std::thread::yield_now();
            continue;
        }
        last = Instant::now();
        for c in &wc[..n] {
            if c.opcode != WcOpcode::RECV {
                if !c.status.is_ok() {
                    return Err(Error::from(*c));
                }
                inflight -= 1;
                continue;
            }
            if s.ah.is_none() && c.status.is_ok() {
                let pd = pd.ok_or(Error::Invalid("no AH and no PD to make one".into()))?;
                let mut grh = [0u8; GRH];
                s.mr.read(s.recv_at(c.wr_id as usize), &mut grh)?;
                s.ah = Some(pd.create_ah_from_recv(s.qp.config().port, c, &grh)?);
                s.peer_qpn = c.src_qp.qpn();
                eprintln!(
                    "ud_echo: the first request came from QPN {:#x}: answering it through an AH built from its receive",
                    s.peer_qpn
                );
            }
            let len = s.take(c, &mut buf)?;
            if len >= 8 && u64::from_le_bytes(buf[..8].try_into().unwrap()) == DONE {
                return Ok(echoed);
            }
            // Keep the SQ within its slots: wait for a send to complete.
            while inflight >= s.slots {
                let mut one = [Completion::default(); 1];
                if s.qp.poll(&mut one)? == 1 {
                    if one[0].opcode == WcOpcode::RECV {
                        return Err(Error::Invalid("a request overran the server".into()));
                    }
                    inflight -= 1;
                }
            }
            let bytes = buf[..len].to_vec();
            s.send(next, &bytes)?;
            next = (next + 1) % s.slots;
            inflight += 1;
            echoed += 1;
        }
    }
}

/// The client: `requests` requests, `window` outstanding, each reply
/// checked; resends after [`RESEND_AFTER`], gives up after [`GIVE_UP_AFTER`].
fn client(s: &mut Side, requests: u64, window: u32) -> Result<(Duration, u64)> {
    let start = Instant::now();
    let mut sent_at: Vec<Option<(Instant, Instant)>> = vec![None; requests as usize];
    let mut answered = vec![false; requests as usize];
    let (mut next, mut done, mut resent) = (0u64, 0u64, 0u64);
    let mut outstanding = std::collections::VecDeque::new();
    let (mut req, mut got) = (vec![0u8; s.size], vec![0u8; s.size]);
    let mut slot = 0usize;
    let mut inflight = 0usize;
    let mut wc = [Completion::default(); 16];
    while done < requests {
        while next < requests && outstanding.len() < window as usize && inflight < s.slots {
            fill(&mut req, next);
            s.send(slot, &req)?;
            slot = (slot + 1) % s.slots;
            inflight += 1;
            let now = Instant::now();
            sent_at[next as usize] = Some((now, now));
            outstanding.push_back(next);
            next += 1;
        }
        let n = s.qp.poll(&mut wc)?;
        for c in &wc[..n] {
            if c.opcode != WcOpcode::RECV {
                if !c.status.is_ok() {
                    return Err(Error::from(*c));
                }
                inflight -= 1;
                continue;
            }
            let len = s.take(c, &mut got)?;
            let id = u64::from_le_bytes(got[..8].try_into().unwrap());
            if id >= requests || len != s.size {
                return Err(Error::Invalid(format!(
                    "a reply of {len} bytes names request {id}"
                )));
            }
            fill(&mut req, id);
            if got != req {
                return Err(Error::Invalid(format!(
                    "the reply to request {id} differs from the request"
                )));
            }
            if !answered[id as usize] {
                answered[id as usize] = true;
                done += 1;
            }
        }
        outstanding.retain(|&id| !answered[id as usize]);
        // Resend the oldest unanswered request when its reply is late.
        if let Some(&id) = outstanding.front() {
            let (first, last) = sent_at[id as usize].expect("sent");
            if first.elapsed() > GIVE_UP_AFTER {
                return Err(Error::Timeout(format!(
                    "request {id}: no reply within {GIVE_UP_AFTER:?} ({resent} resends in all; UD does not retry)"
                )));
            }
            if last.elapsed() > RESEND_AFTER && inflight < s.slots {
                fill(&mut req, id);
                s.send(slot, &req)?;
                slot = (slot + 1) % s.slots;
                inflight += 1;
                sent_at[id as usize] = Some((first, Instant::now()));
                resent += 1;
            }
        }
        if n == 0 {
            std::thread::yield_now();
        }
    }
    let t = start.elapsed();
    // Tell the server (resent until its receive surely has it: UD may drop).
    let mut bye = vec![0u8; s.size];
    bye[..8].copy_from_slice(&DONE.to_le_bytes());
    for _ in 0..3 {
        while inflight >= s.slots {
            let mut one = [Completion::default(); 1];
            if s.qp.poll(&mut one)? == 1 && one[0].opcode != WcOpcode::RECV {
                inflight -= 1;
            }
        }
        s.send(slot, &bye)?;
        slot = (slot + 1) % s.slots;
        inflight += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    // Our SENDs complete before the QP goes.
    let deadline = Instant::now() + GIVE_UP_AFTER;
    while inflight > 0 && Instant::now() < deadline {
        let n = s.qp.poll(&mut wc)?;
        inflight -= wc[..n]
            .iter()
            .filter(|c| c.opcode != WcOpcode::RECV)
            .count();
    }
    Ok((t, resent))
}

fn report(a: &Args, t: Duration, resent: u64) {
    let s = t.as_secs_f64();
    println!(
        "{} requests of {} bytes, {} outstanding: {:.2} s, {:.0} requests/s, {:.2} usec/request; {resent} resent",
        a.requests,
        a.size,
        a.window,
        s,
        a.requests as f64 / s,
        s * 1e6 / a.requests as f64
    );
}

fn run(a: &Args) -> Result<()> {
    let ctx = Context::open(&a.dev)?;
    let pd = ctx.alloc_pd()?;
    let cfg = config(a);
    if a.dev == rdma_direct::SIM_DEVICE {
        // The sim lives in this process: the two sides are two threads.
        let (qa, qb) = (pd.create_qp(&cfg)?, pd.create_qp(&cfg)?);
        let (ea, eb) = (qa.endpoint(), qb.endpoint());
        let mut sa = Side::new(&pd, qa, CLIENT_QKEY, &eb, SERVER_QKEY, a)?;
        let mut sb = Side::new(&pd, qb, SERVER_QKEY, &ea, CLIENT_QKEY, a)?;
        let server = std::thread::spawn(move || serve(&mut sb, None));
        let c = client(&mut sa, a.requests, a.window);
        let echoed = server
            .join()
            .map_err(|_| Error::Invalid("the server thread panicked".into()))??;
        let (t, resent) = c?;
        println!("server echoed {echoed} requests (sim, two threads)");
        report(a, t, resent);
        return Ok(());
    }
    let qp = pd.create_qp(&cfg)?;
    if a.rdma_cm {
        return through_cm(a, &pd, qp);
    }
    let qkey = if a.host.is_none() {
        SERVER_QKEY
    } else {
        CLIENT_QKEY
    };
    let mine = ConnInfo {
        endpoint: qp.endpoint(),
        psn: 0,
        rkey: Rkey(0),
        addr: 0,
        len: 0,
        qkey,
        dc_key: None,
    };
    let (peer, _tcp) = match &a.host {
        None => {
            eprintln!("ud_echo: waiting for a client on TCP port {}", a.port);
            exchange::serve(a.port, &mine)?
        }
        Some(h) => exchange::connect(h, a.port, Duration::from_secs(60), &mine)?,
    };
    if peer.qkey == 0 {
        return Err(Error::Exchange(
            "the peer sent qkey 0: is it an RC program, or a build before the qkey field?".into(),
        ));
    }
    let mut side = Side::new(&pd, qp, qkey, &peer.endpoint, peer.qkey, a)?;
    match &a.host {
        None => {
            let echoed = serve(&mut side, Some(&pd))?;
            println!("server echoed {echoed} requests");
        }
        Some(_) => {
            // (The server posts its receives after the exchange: requests
            // that come before are dropped, and resent; likewise with -R.)
            let (t, resent) = client(&mut side, a.requests, a.window)?;
            report(a, t, resent);
        }
    }
    Ok(())
}

/// `-R`: the server answers the CM's request (`CmListener::bind_ud`,
/// `accept_ud`) and builds its AH from the first request; the client
/// resolves the server (`cm::connect_ud`) and sends through an AH of the
/// address the answer gave.
#[cfg(feature = "verbs")]
fn through_cm(a: &Args, pd: &Pd, mut qp: Qp) -> Result<()> {
    use rdma_direct::cm;
    let offer = cm::CmOffer {
        rkey: Rkey(0),
        addr: 0,
        len: 0,
    };
    let wait = Duration::from_secs(60);
    match &a.host {
        None => {
            let l = cm::CmListener::bind_ud(a.port)?;
            eprintln!(
                "ud_echo: waiting for a client through rdma_cm (UDP port space, port {})",
                a.port
            );
            let (_id, _) = l.accept_ud(&mut qp, &offer, wait)?;
            let mut side = Side::up(pd, qp, None, 0, cm::UDP_QKEY, a)?;
            let echoed = serve(&mut side, Some(pd))?;
            println!("server echoed {echoed} requests");
        }
        Some(h) => {
            let (_id, peer) = cm::connect_ud(&mut qp, h, a.port, &offer, wait)?;
            let ah = pd.create_ah(&peer.av)?;
            let mut side = Side::up(pd, qp, Some(ah), peer.qpn, peer.qkey, a)?;
            let (t, resent) = client(&mut side, a.requests, a.window)?;
            report(a, t, resent);
        }
    }
    Ok(())
}

#[cfg(not(feature = "verbs"))]
fn through_cm(_: &Args, _: &Pd, _: Qp) -> Result<()> {
    Err(Error::Invalid(
        "-R (rdma_cm) needs the `verbs` feature".into(),
    ))
}

fn main() -> std::process::ExitCode {
    let a = match args() {
        Ok(Some(a)) => a,
        Ok(None) => {
            print!("{USAGE}");
            return std::process::ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("ud_echo: {e}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    match run(&a) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ud_echo: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
