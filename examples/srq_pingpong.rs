//! A ping-pong over several RC QPs whose server side shares one SRQ, in the
//! manner of rdma-core's `ibv_srq_pingpong`: the server's `-q` QPs take
//! their receives from one SRQ and complete into one shared CQ; each round
//! the client SENDs on every QP, and the server answers each message on the
//! QP its completion names (`Completion::qp_num`), reposting the SRQ
//! receive it consumed. The client checks that every QP got its own answer
//! (the round and QP index are in each message).
//!
//! ```text
//! cargo run --example srq_pingpong                          # the sim: two threads of this process
//! cargo run --example srq_pingpong -- -d rxe0               # server: waits on TCP port 18515
//! cargo run --example srq_pingpong -- -d rxe0 SERVER_HOST   # client
//! ```
//!
//! Flags: `-d DEV`, `-p PORT`, `-q QPS` (1..=16, default 4), `-n ROUNDS`
//! (default 1000), `-s SIZE` (8..=65536, default 64), `-g GID_INDEX`; `-h`
//! prints the usage. A bad argument exits 2, a failed run 1.

use rdma_direct::exchange::{self, ConnInfo};
use rdma_direct::{
    Access, Completion, Context, CqSizing, Error, Mr, Pd, Qp, QpConfig, RecvWr, Result, Rkey,
    SendWr, Sge, SharedCq, Srq, WcOpcode,
};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const USAGE: &str = "\
usage: srq_pingpong [-d DEV] [-p PORT] [-q QPS] [-n ROUNDS] [-s SIZE] [-g GID_INDEX] [HOST]
  -d, --ib-dev DEV     device (default: sim; both sides run as two threads of this process)
  -p, --port PORT      TCP port of the QP exchange (default 18515)
  -q, --num-qp QPS     QPs, 1..=16 (default 4); the server's share one SRQ
  -n, --iters ROUNDS   rounds, one message each way on every QP (default 1000)
  -s, --size SIZE      bytes per message, 8..=65536 (default 64)
  -g, --gid-idx INDEX  local GID index (default: the device's)
  -h, --help           print this and exit
  HOST                 connect to the server on HOST (without: be the server)
";

const WAIT: Duration = Duration::from_secs(20);

struct Args {
    dev: String,
    port: u16,
    qps: usize,
    rounds: u32,
    size: usize,
    gid: Option<u8>,
    host: Option<String>,
}

fn args() -> std::result::Result<Option<Args>, String> {
    let mut a = Args {
        dev: rdma_direct::SIM_DEVICE.into(),
        port: exchange::DEFAULT_PORT,
        qps: 4,
        rounds: 1000,
        size: 64,
        gid: None,
        host: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(f) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match f.as_str() {
            "-d" | "--ib-dev" => a.dev = val("-d")?,
            "-p" | "--port" => a.port = val("-p")?.parse().map_err(|e| format!("-p: {e}"))?,
            "-q" | "--num-qp" => a.qps = val("-q")?.parse().map_err(|e| format!("-q: {e}"))?,
            "-n" | "--iters" => a.rounds = val("-n")?.parse().map_err(|e| format!("-n: {e}"))?,
            "-s" | "--size" => a.size = val("-s")?.parse().map_err(|e| format!("-s: {e}"))?,
            "-g" | "--gid-idx" => a.gid = Some(val("-g")?.parse().map_err(|e| format!("-g: {e}"))?),
            "-h" | "--help" => return Ok(None),
            h if !h.starts_with('-') && a.host.is_none() => a.host = Some(h.into()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if !(1..=16).contains(&a.qps) || a.rounds == 0 || !(8..=65536).contains(&a.size) {
        return Err("-q must be 1..=16, -n at least 1, -s 8..=65536".into());
    }
    Ok(Some(a))
}

fn config(a: &Args) -> QpConfig {
    QpConfig {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_inline: 0,
        gid_index: a.gid,
        rnr_retry: 7,
        ..QpConfig::default()
    }
}

/// Message of round `r` on QP `q`: both, then a pattern.
fn fill(buf: &mut [u8], r: u32, q: usize) {
    buf[..4].copy_from_slice(&r.to_le_bytes());
    buf[4..8].copy_from_slice(&(q as u32).to_le_bytes());
    for (k, b) in buf[8..].iter_mut().enumerate() {
        *b = (r as u8) ^ (q as u8).wrapping_mul(17) ^ k as u8;
    }
}

/// The server: `qps` QPs on one SRQ and one shared CQ, the SRQ holding two
/// receives per QP, each of one slot of `mr`.
struct Server {
    cq: SharedCq,
    srq: Srq,
    mr: Mr,
    size: usize,
}

impl Server {
    fn new(pd: &Pd, a: &Args) -> Result<Server> {
        let recvs = 2 * a.qps as u32;
        let mut srq = pd.create_srq(recvs, 1)?;
        let cfg = config(a);
        let depth = CqSizing::new()
            .queue(recvs)
            .queue(a.qps as u32 * cfg.max_send_wr)
            .depth()?;
        let mut cq = pd.create_shared_cq(depth)?;
        for _ in 0..a.qps {
            cq.create_qp_on_srq(&cfg, &srq)?;
        }
        // Slots 0..recvs receive; recvs..recvs + qps send.
        let mr = pd.alloc_mr((recvs as usize + a.qps) * a.size, Access::LOCAL_WRITE)?;
        let s = Server {
            cq,
            srq: srq_post_all(&mut srq, &mr, recvs, a.size).map(|()| srq)?,
            mr,
            size: a.size,
        };
        Ok(s)
    }

    /// Answers `rounds * qps` messages, each on the QP it came on.
    fn serve(&mut self, rounds: u32, qps: usize) -> Result<()> {
        let recvs = 2 * qps;
        let mut wc = [Completion::default(); 16];
        let (mut answered, total) = (0usize, rounds as usize * qps);
        let mut sends = 0usize;
        let mut buf = vec![0u8; self.size];
        let deadline = Instant::now() + WAIT + Duration::from_secs(rounds as u64 / 100);
        while answered < total || sends > 0 {
            if Instant::now() > deadline {
                return Err(Error::Timeout(format!(
                    "the server answered {answered} of {total} messages"
                )));
            }
            let n = self.cq.poll(&mut wc)?;
            for c in &wc[..n] {
                if !c.status.is_ok() {
                    return Err(Error::from(*c));
                }
                if c.opcode != WcOpcode::RECV {
                    sends -= 1;
                    continue;
                }
                let slot = c.wr_id as usize;
                self.mr.read(slot * self.size, &mut buf)?;
                let q = self.cq.index_of(c.qp_num).ok_or_else(|| {
                    Error::Invalid(format!("a message on QP {:#x}, not ours", c.qp_num))
                })?;
                // The receive goes back to the SRQ, for whichever QP needs it.
                let rs = [Sge::new(&self.mr, slot * self.size, self.size as u32)?];
                self.srq.post_recv(&[RecvWr::new(slot as u64, &rs)])?;
                let at = (recvs + q) * self.size;
                self.mr.write(at, &buf)?;
                let ss = [Sge::new(&self.mr, at, self.size as u32)?];
                self.cq
                    .qp_mut(q)
                    .post_send(&[SendWr::send(q as u64, &ss).signaled()])?;
                sends += 1;
                answered += 1;
            }
            if n == 0 {
                std::thread::yield_now();
            }
        }
        Ok(())
    }
}

/// Posts receives `0..n` (slot `k` of `mr`, `size` bytes) to `srq`.
fn srq_post_all(srq: &mut Srq, mr: &Mr, n: u32, size: usize) -> Result<()> {
    for k in 0..n as usize {
        let s = [Sge::new(mr, k * size, size as u32)?];
        srq.post_recv(&[RecvWr::new(k as u64, &s)])?;
    }
    Ok(())
}

/// The client: `rounds` rounds of one message on each QP and its answer.
fn client(qps: &mut [Qp], mr: &Mr, rounds: u32, size: usize) -> Result<Duration> {
    let n = qps.len();
    let mut buf = vec![0u8; size];
    let mut want = vec![0u8; size];
    let recv_at = |q: usize| (n + q) * size;
    for (q, qp) in qps.iter_mut().enumerate() {
        let r = [Sge::new(mr, recv_at(q), size as u32)?];
        qp.post_recv(&[RecvWr::new(q as u64, &r)])?;
    }
    let start = Instant::now();
    let mut wc = [Completion::default(); 4];
    for round in 0..rounds {
        for (q, qp) in qps.iter_mut().enumerate() {
            fill(&mut buf, round, q);
            mr.write(q * size, &buf)?;
            let s = [Sge::new(mr, q * size, size as u32)?];
            qp.post_send(&[SendWr::send(q as u64, &s).signaled()])?;
        }
        for (q, qp) in qps.iter_mut().enumerate() {
            let (mut sent, mut got) = (false, false);
            let deadline = Instant::now() + WAIT;
            while !(sent && got) {
                if Instant::now() > deadline {
                    return Err(Error::Timeout(format!(
                        "round {round}, QP {q}: no answer within {WAIT:?}"
                    )));
                }
                let k = qp.poll(&mut wc)?;
                for c in &wc[..k] {
                    if !c.status.is_ok() {
                        return Err(Error::from(*c));
                    }
                    match c.opcode {
                        WcOpcode::RECV => got = true,
                        _ => sent = true,
                    }
                }
            }
            mr.read(recv_at(q), &mut buf)?;
            fill(&mut want, round, q);
            if buf != want {
                return Err(Error::Invalid(format!(
                    "round {round}, QP {q}: the answer is not this QP's message"
                )));
            }
            if round + 1 < rounds {
                let r = [Sge::new(mr, recv_at(q), size as u32)?];
                qp.post_recv(&[RecvWr::new(q as u64, &r)])?;
            }
        }
    }
    Ok(start.elapsed())
}

fn report(a: &Args, t: Duration) {
    let s = t.as_secs_f64();
    let msgs = a.rounds as u64 * a.qps as u64 * 2;
    println!(
        "{} QPs on one SRQ, {} rounds of {} bytes: {:.2} s, {:.2} usec/round, {:.0} messages/s",
        a.qps,
        a.rounds,
        a.size,
        s,
        s * 1e6 / a.rounds as f64,
        msgs as f64 / s
    );
}

fn info(qp: &Qp) -> ConnInfo {
    ConnInfo {
        endpoint: qp.endpoint(),
        psn: Qp::random_psn(),
        rkey: Rkey(0),
        addr: 0,
        len: 0,
        qkey: 0,
        dc_key: None,
    }
}

/// Connects `mine[i]` to the peer's QP `i` over `tcp` (the first exchange
/// was `first`'s).
fn connect_all(mine: Vec<&mut Qp>, tcp: &mut TcpStream, first: (ConnInfo, ConnInfo)) -> Result<()> {
    let mut pair = Some(first);
    for qp in mine {
        let (me, peer) = match pair.take() {
            Some(p) => p,
            None => {
                let me = info(qp);
                (me, exchange::swap(tcp, &me)?)
            }
        };
        qp.connect_remote(me.psn, &peer.endpoint, peer.psn)?;
    }
    exchange::barrier(tcp)
}

fn run(a: &Args) -> Result<()> {
    let ctx = Context::open(&a.dev)?;
    let pd = ctx.alloc_pd()?;
    let cfg = config(a);
    let mr = pd.alloc_mr(2 * a.qps * a.size, Access::LOCAL_WRITE)?;
    if a.dev == rdma_direct::SIM_DEVICE {
        let mut server = Server::new(&pd, a)?;
        let mut qps = Vec::new();
        for i in 0..a.qps {
            let mut q = pd.create_qp(&cfg)?;
            Qp::connect_loopback(server.cq.qp_mut(i), &mut q)?;
            qps.push(q);
        }
        let (rounds, n) = (a.rounds, a.qps);
        let s = std::thread::spawn(move || server.serve(rounds, n));
        let c = client(&mut qps, &mr, a.rounds, a.size);
        s.join()
            .map_err(|_| Error::Invalid("the server thread panicked".into()))??;
        report(a, c?);
        return Ok(());
    }
    match &a.host {
        None => {
            let mut server = Server::new(&pd, a)?;
            let me = info(server.cq.qp(0));
            eprintln!("srq_pingpong: waiting for a client on TCP port {}", a.port);
            let (peer, mut tcp) = exchange::serve(a.port, &me)?;
            let qps: Vec<&mut Qp> = server.cq.qps_mut().iter_mut().collect();
            connect_all(qps, &mut tcp, (me, peer))?;
            server.serve(a.rounds, a.qps)?;
            exchange::barrier(&mut tcp)?;
            println!(
                "server: answered {} messages on {} QPs",
                a.rounds as usize * a.qps,
                a.qps
            );
        }
        Some(h) => {
            let mut qps = Vec::new();
            for _ in 0..a.qps {
                qps.push(pd.create_qp(&cfg)?);
            }
            let me = info(&qps[0]);
            let (peer, mut tcp) = exchange::connect(h, a.port, Duration::from_secs(60), &me)?;
            connect_all(qps.iter_mut().collect(), &mut tcp, (me, peer))?;
            let t = client(&mut qps, &mr, a.rounds, a.size)?;
            exchange::barrier(&mut tcp)?;
            report(a, t);
        }
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let a = match args() {
        Ok(Some(a)) => a,
        Ok(None) => {
            print!("{USAGE}");
            return std::process::ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("srq_pingpong: {e}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    match run(&a) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("srq_pingpong: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
