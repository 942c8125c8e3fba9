//! RPCs over DC: one server DCT on an SRQ, many clients (64 by default)
//! reaching it through a pool of DCIs ([`DciPool`]), a SEND request and a
//! WRITE-with-immediate reply per RPC, every reply checked. All in one
//! process, one thread, one device and one PD (the sim by default).
//!
//! ```text
//! cargo run --example dc_rpc                                  # the sim
//! cargo run --example dc_rpc -- --clients 64 --dcis 4 --rpcs 6400
//! ```
//!
//! The client side: each client has its own DCT (the target of its
//! replies; all on one small SRQ, each with its own key) and its own reply
//! slot in the client MR; every request goes through the client side's
//! pool of `--dcis` DCIs to the server's DCT. A request (32 bytes) carries
//! the client's id, the RPC's sequence number and the reply slot's address
//! and rkey. The server polls the request from its DCT, answers with a
//! WRITE with immediate (the sequence number) of 64 bytes, a function of
//! the request, into that client's slot through the server's pool of
//! `--dcis` DCIs: one DCI per client while its reply is outstanding, so
//! with more clients than DCIs the pool refuses (`Error::QueueFull`) and
//! the server keeps the reply until a poll frees a DCI. The client checks
//! every reply's bytes (its slot is zeroed before each request).
//!
//! Flags: `-d DEV`, `-c CLIENTS` (1..=1024, default 64), `-w DCIS` (1..=64,
//! default 4), `-n RPCS` (at least 1, default 6400, spread over the
//! clients, one in flight per client); `-h` prints the usage. A bad
//! argument exits 2, a failed run (a wrong reply, an error completion, a
//! stall) 1.

use rdma_direct::{
    Access, Ah, Completion, Context, DcDest, DciPool, Error, Mr, Pd, Qp, QpConfig, QpType, RecvWr,
    RemoteAddr, Result, Rkey, SendWr, Sge, Srq, WcOpcode,
};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

const USAGE: &str = "\
usage: dc_rpc [-d DEV] [-c CLIENTS] [-w DCIS] [-n RPCS]
  -d, --ib-dev DEV      device (default: sim); both sides run in this process
  -c, --clients N       clients, 1..=1024 (default 64), each with its own DCT
  -w, --dcis N          DCIs in each side's pool, 1..=64 (default 4)
  -n, --rpcs N          RPCs in all, at least 1 (default 6400), one in flight per client
  -h, --help            print this and exit
";

const SERVER_KEY: u64 = 0x5e4e_5e4e_0000_0001;
const CLIENT_KEY: u64 = 0xc11e_0000_0000_0000;
const REQ: usize = 32;
const REPLY: usize = 64;
const WAIT: Duration = Duration::from_secs(30);

struct Args {
    dev: String,
    clients: usize,
    dcis: usize,
    rpcs: u64,
}

fn args() -> std::result::Result<Option<Args>, String> {
    let mut a = Args {
        dev: rdma_direct::SIM_DEVICE.into(),
        clients: 64,
        dcis: 4,
        rpcs: 6400,
    };
    let mut it = std::env::args().skip(1);
    while let Some(f) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match f.as_str() {
            "-d" | "--ib-dev" => a.dev = val("-d")?,
            "-c" | "--clients" => a.clients = val("-c")?.parse().map_err(|e| format!("-c: {e}"))?,
            "-w" | "--dcis" => a.dcis = val("-w")?.parse().map_err(|e| format!("-w: {e}"))?,
            "-n" | "--rpcs" => a.rpcs = val("-n")?.parse().map_err(|e| format!("-n: {e}"))?,
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if !(1..=1024).contains(&a.clients) || !(1..=64).contains(&a.dcis) || a.rpcs == 0 {
        return Err("-c must be 1..=1024, -w 1..=64, -n at least 1".into());
    }
    Ok(Some(a))
}

/// Reply byte `k` of RPC `seq` of client `id`: the server's function of
/// the request, which the client recomputes.
fn reply_byte(id: u32, seq: u32, k: usize) -> u8 {
    (id.wrapping_mul(31) ^ seq.wrapping_mul(7) ^ (k as u32).wrapping_mul(13)) as u8
}

fn dci_cfg() -> QpConfig {
    QpConfig {
        qp_type: QpType::Dci,
        max_send_wr: 16,
        ..QpConfig::default()
    }
}

/// A DCT in RTR on `srq` with key `key`.
fn dct(pd: &Pd, srq: &Srq, key: u64) -> Result<Qp> {
    let cfg = QpConfig {
        qp_type: QpType::Dct,
        dc_key: key,
        ..QpConfig::default()
    };
    let mut q = pd.create_qp_on_srq(&cfg, srq)?;
    q.ready_dct()?;
    Ok(q)
}

fn bad(c: &Completion, what: &str) -> Error {
    Error::Invalid(format!("{what}: {c:?}"))
}

/// The server: its DCT on `srq` (a receive of `REQ` bytes per client,
/// slot `k` of `mr`), a reply slot per client in `mr` after them, its pool,
/// and an AH per client DCT.
struct Server {
    srq: Srq,
    dct: Qp,
    pool: DciPool,
    mr: Mr,
    ahs: Vec<Ah>,
    /// Each client DCT's number (a peer would learn it from the client's
    /// `ConnInfo::dc_target`).
    dctns: Vec<u32>,
    /// Replies the pool refused (all DCIs bound): (client, seq, addr, rkey).
    waiting: VecDeque<(u32, u32, u64, u32)>,
    refused: u64,
    most_bound: usize,
}

/// The clients: their DCTs on one SRQ, the request and reply slots in
/// `mr`, the pool their requests go through, and each one's state.
struct Clients {
    srq: Srq,
    dcts: Vec<Qp>,
    pool: DciPool,
    mr: Mr,
    /// Each client's RPCs sent (its next seq) and whether one is in flight.
    sent: Vec<u32>,
    busy: Vec<bool>,
    refused: u64,
}

fn run(a: &Args) -> Result<()> {
    let ctx = Context::open(&a.dev)?;
    let pd = ctx.alloc_pd()?;
    let n = a.clients;
    let remote = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    // The server.
    let mut ssrq = pd.create_srq(n as u32, 1)?;
    let sdct = dct(&pd, &ssrq, SERVER_KEY)?;
    let smr = pd.alloc_mr(n * (REQ + REPLY), Access::LOCAL_WRITE)?;
    for k in 0..n {
        let s = [Sge::new(&smr, k * REQ, REQ as u32)?];
        ssrq.post_recv(&[RecvWr::new(k as u64, &s)])?;
    }
    let spool = DciPool::new(&pd, &dci_cfg(), a.dcis)?;
    // The clients: one DCT each, one receive each on their SRQ (the
    // WRITE with immediate consumes one; it carries no bytes).
    let mut csrq = pd.create_srq(n as u32, 1)?;
    let cmr = pd.alloc_mr(n * (REQ + REPLY) + 8, remote)?;
    let mut dcts = Vec::with_capacity(n);
    for k in 0..n {
        dcts.push(dct(&pd, &csrq, CLIENT_KEY ^ k as u64)?);
        let s = [Sge::new(&cmr, n * (REQ + REPLY), 8)?];
        csrq.post_recv(&[RecvWr::new(k as u64, &s)])?;
    }
    let ahs = dcts
        .iter()
        .map(|d| pd.create_ah(&spool.dci(0).av_to(&d.endpoint())))
        .collect::<Result<Vec<_>>>()?;
    let cpool = DciPool::new(&pd, &dci_cfg(), a.dcis)?;
    let sah = pd.create_ah(&cpool.dci(0).av_to(&sdct.endpoint()))?;
    let mut server = Server {
        srq: ssrq,
        dct: sdct,
        pool: spool,
        mr: smr,
        ahs,
        dctns: dcts
            .iter()
            .map(|d| d.dct_number().expect("a DCT in RTR"))
            .collect(),
        waiting: VecDeque::with_capacity(n),
        refused: 0,
        most_bound: 0,
    };
    let mut clients = Clients {
        srq: csrq,
        dcts,
        pool: cpool,
        mr: cmr,
        sent: vec![0; n],
        busy: vec![false; n],
        refused: 0,
    };
    let to_server = DcDest {
        ah: &sah,
        dctn: server.dct.dct_number().expect("a DCT in RTR"),
        key: SERVER_KEY,
    };
    let t = Instant::now();
    let (mut issued, mut checked) = (0u64, 0u64);
    let mut last = (Instant::now(), 0u64);
    while checked < a.rpcs {
        issued += clients.send_requests(&to_server, a.rpcs - issued)?;
        server.serve(n)?;
        checked += clients.take_replies()?;
        if checked != last.1 {
            last = (Instant::now(), checked);
        } else if last.0.elapsed() > WAIT {
            return Err(Error::Timeout(format!(
                "{checked} of {} replies, none for {WAIT:?}",
                a.rpcs
            )));
        } else {
            std::thread::yield_now();
        }
    }
    let el = t.elapsed();
    println!(
        "dc_rpc: {} RPCs from {n} clients, {} DCIs per side: {checked} replies checked, 0 mismatches",
        a.rpcs, a.dcis
    );
    println!(
        "dc_rpc: server pool refused {} replies (all DCIs bound; retried after a poll), \
         at most {} of {} DCIs bound; client pool refused {} requests",
        server.refused, server.most_bound, a.dcis, clients.refused
    );
    println!(
        "dc_rpc: {:.1} us per RPC ({:.2} s)",
        el.as_secs_f64() * 1e6 / a.rpcs as f64,
        el.as_secs_f64()
    );
    Ok(())
}

impl Clients {
    /// Sends a request from each idle client (up to `left`): its reply
    /// slot zeroed first. Returns how many went.
    fn send_requests(&mut self, to: &DcDest<'_>, left: u64) -> Result<u64> {
        let n = self.dcts.len();
        let mut went = 0;
        let mut wc = [Completion::default(); 16];
        for c in 0..n {
            if went == left {
                break;
            }
            if self.busy[c] {
                continue;
            }
            let (req, slot) = (c * REQ, n * REQ + c * REPLY);
            self.mr.write(slot, &[0u8; REPLY])?;
            let mut m = [0u8; REQ];
            m[..4].copy_from_slice(&(c as u32).to_le_bytes());
            m[4..8].copy_from_slice(&self.sent[c].to_le_bytes());
            m[8..16].copy_from_slice(&(self.mr.addr() + slot as u64).to_le_bytes());
            m[16..20].copy_from_slice(&self.mr.rkey().0.to_le_bytes());
            self.mr.write(req, &m)?;
            let s = [Sge::new(&self.mr, req, REQ as u32)?];
            match self.pool.post(to, &[SendWr::send(c as u64, &s).signaled()]) {
                Ok(_) => {}
                Err(Error::QueueFull) => {
                    // Every DCI bound, or the server's DCI's ring full.
                    self.refused += 1;
                    break;
                }
                Err(e) => return Err(e),
            }
            self.busy[c] = true;
            went += 1;
        }
        let k = self.pool.poll(&mut wc)?;
        if let Some(c) = wc[..k].iter().find(|c| !c.status.is_ok()) {
            return Err(bad(c, "a request failed"));
        }
        Ok(went)
    }

    /// Polls the busy clients' DCTs for their replies and checks each.
    fn take_replies(&mut self) -> Result<u64> {
        let n = self.dcts.len();
        let mut got = 0;
        let mut wc = [Completion::default(); 1];
        let mut buf = [0u8; REPLY];
        for c in 0..n {
            if !self.busy[c] || self.dcts[c].poll(&mut wc)? == 0 {
                continue;
            }
            let w = &wc[0];
            let seq = self.sent[c];
            if !w.status.is_ok() || w.opcode != WcOpcode::RECV_RDMA_WITH_IMM {
                return Err(bad(w, "a reply"));
            }
            if w.imm != Some(seq) {
                return Err(Error::Invalid(format!(
                    "client {c}: the reply to RPC {seq} came with immediate {:?}",
                    w.imm
                )));
            }
            self.mr.read(n * REQ + c * REPLY, &mut buf)?;
            if let Some(k) = (0..REPLY).find(|&k| buf[k] != reply_byte(c as u32, seq, k)) {
                return Err(Error::Invalid(format!(
                    "client {c}: reply to RPC {seq}: byte {k} is {:#x}, not {:#x}",
                    buf[k],
                    reply_byte(c as u32, seq, k)
                )));
            }
            let s = [Sge::new(&self.mr, n * (REQ + REPLY), 8)?];
            self.srq.post_recv(&[RecvWr::new(w.wr_id, &s)])?;
            self.sent[c] += 1;
            self.busy[c] = false;
            got += 1;
        }
        Ok(got)
    }
}

impl Server {
    /// Takes the requests that came, reposting their receives, and
    /// replies (those waiting first); polls the pool.
    fn serve(&mut self, n: usize) -> Result<()> {
        let mut wc = [Completion::default(); 16];
        let k = self.dct.poll(&mut wc)?;
        for w in &wc[..k] {
            if !w.status.is_ok() || w.opcode != WcOpcode::RECV || w.byte_len as usize != REQ {
                return Err(bad(w, "a request"));
            }
            let slot = w.wr_id as usize;
            let mut m = [0u8; REQ];
            self.mr.read(slot * REQ, &mut m)?;
            let s = [Sge::new(&self.mr, slot * REQ, REQ as u32)?];
            self.srq.post_recv(&[RecvWr::new(w.wr_id, &s)])?;
            let word = |r: std::ops::Range<usize>| {
                let mut b = [0u8; 8];
                b[..r.len()].copy_from_slice(&m[r]);
                u64::from_le_bytes(b)
            };
            let id = word(0..4) as u32;
            if id as usize >= n {
                return Err(Error::Invalid(format!("a request from client {id}")));
            }
            self.waiting
                .push_back((id, word(4..8) as u32, word(8..16), word(16..20) as u32));
        }
        while let Some(&(id, seq, addr, rkey)) = self.waiting.front() {
            let at = n * REQ + id as usize * REPLY;
            let mut r = [0u8; REPLY];
            for (k, b) in r.iter_mut().enumerate() {
                *b = reply_byte(id, seq, k);
            }
            self.mr.write(at, &r)?;
            let s = [Sge::new(&self.mr, at, REPLY as u32)?];
            let to = DcDest {
                ah: &self.ahs[id as usize],
                dctn: self.dctns[id as usize],
                key: CLIENT_KEY ^ id as u64,
            };
            let wr = SendWr::rdma_write(
                id as u64,
                &s,
                RemoteAddr {
                    addr,
                    rkey: Rkey(rkey),
                },
            )
            .imm(seq)
            .signaled();
            match self.pool.post(&to, &[wr]) {
                Ok(_) => {
                    self.waiting.pop_front();
                    self.most_bound = self.most_bound.max(self.pool.busy());
                }
                Err(Error::QueueFull) => {
                    self.refused += 1;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        let k = self.pool.poll(&mut wc)?;
        if let Some(c) = wc[..k].iter().find(|c| !c.status.is_ok()) {
            return Err(bad(c, "a reply failed"));
        }
        Ok(())
    }
}

fn main() -> std::process::ExitCode {
    let a = match args() {
        Ok(Some(a)) => a,
        Ok(None) => {
            print!("{USAGE}");
            return std::process::ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("dc_rpc: {e}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    match run(&a) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dc_rpc: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
