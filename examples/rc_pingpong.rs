//! An RC ping-pong like rdma-core's `ibv_rc_pingpong`: the two sides take
//! turns SENDing `size` bytes into a receive the other keeps posted, `iters`
//! times, and report bandwidth and time per round trip as it does.
//!
//! Nothing is copied: each side's send and receive buffers are `LocalMr`s
//! (memory only its own WRs touch) that move into the QP with each post
//! (`Qp::post_send_owned`, `Qp::post_recv_owned`) and come back after the
//! completion (`Qp::take_send_buf`, `Qp::take_recv_buf`). Each message
//! carries its iteration number, one byte per 4 KiB page (as
//! `ibv_rc_pingpong -c` validates), stamped into the send buffer and checked
//! in the receive buffer in place; a wrong one fails the run.
//!
//! ```text
//! cargo run --example rc_pingpong                          # the sim: two threads of this process
//! cargo run --example rc_pingpong -- -d rxe0               # server: waits on TCP port 18515
//! cargo run --example rc_pingpong -- -d rxe0 SERVER_HOST   # client
//! ```
//!
//! Flags as `ibv_rc_pingpong`'s where they apply: `-d DEV`, `-p PORT`,
//! `-s SIZE` (bytes, default 4096), `-n ITERS` (default 1000), `-g GID_INDEX`,
//! `-e` (sleep on CQ events instead of polling: `CompletionMode::Events`);
//! `-h`/`--help` prints the usage and exits 0. A bad argument exits 2, a
//! failed run 1.

use rdma_direct::exchange::{self, ConnInfo};
use rdma_direct::{
    Access, Completion, CompletionMode, Context, LocalMr, Pd, Qp, QpConfig, Rkey, SendWr, WcOpcode,
};
use std::time::{Duration, Instant};

const USAGE: &str = "\
usage: rc_pingpong [-d DEV] [-p PORT] [-s SIZE] [-n ITERS] [-g GID_INDEX] [-e] [HOST]
  -d, --ib-dev DEV     device (default: sim; both sides run as two threads of this process)
  -p, --port PORT      TCP port of the QP exchange (default 18515)
  -s, --size SIZE      bytes per SEND, 1..=1073741824 (default 4096)
  -n, --iters ITERS    round trips (default 1000)
  -g, --gid-idx INDEX  local GID index (default: the device's)
  -e, --events         sleep on CQ events instead of polling
  -h, --help           print this and exit
  HOST                 connect to the server on HOST (without: be the server)
";

/// What the command line asked for.
enum Parsed {
    Run(Args),
    Help,
}

struct Args {
    dev: String,
    port: u16,
    size: u32,
    iters: u32,
    gid: Option<u8>,
    events: bool,
    host: Option<String>,
}

/// Largest `-s` in bytes (1 GiB; a message may be up to 2^31 bytes, but
/// each side registers two buffers of this size).
const MAX_SIZE: u32 = 1 << 30;

/// The flags (see [`USAGE`]); `Err` names the bad argument.
fn args() -> Result<Parsed, String> {
    let mut a = Args {
        dev: rdma_direct::SIM_DEVICE.into(),
        port: exchange::DEFAULT_PORT,
        size: 4096,
        iters: 1000,
        gid: None,
        events: false,
        host: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(f) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match f.as_str() {
            "-d" | "--ib-dev" => a.dev = val("-d")?,
            "-p" | "--port" => a.port = val("-p")?.parse().map_err(|e| format!("-p: {e}"))?,
            "-s" | "--size" => a.size = val("-s")?.parse().map_err(|e| format!("-s: {e}"))?,
            "-n" | "--iters" => a.iters = val("-n")?.parse().map_err(|e| format!("-n: {e}"))?,
            "-g" | "--gid-idx" => a.gid = Some(val("-g")?.parse().map_err(|e| format!("-g: {e}"))?),
            "-e" | "--events" => a.events = true,
            "-h" | "--help" => return Ok(Parsed::Help),
            h if !h.starts_with('-') && a.host.is_none() => a.host = Some(h.into()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.size == 0 || a.iters == 0 {
        return Err("-s and -n must be at least 1".into());
    }
    // Checked before anything is allocated: each side registers 2 x size.
    if a.size > MAX_SIZE {
        return Err(format!(
            "-s {} is more than {MAX_SIZE} bytes (1 GiB), the largest SEND this example makes",
            a.size
        ));
    }
    Ok(Parsed::Run(a))
}

fn config(a: &Args) -> QpConfig {
    QpConfig {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_inline: 0,
        gid_index: a.gid,
        // As ibv_rc_pingpong: a SEND that finds no receive yet is retried
        // until one is posted.
        rnr_retry: 7,
        ..QpConfig::default()
    }
}

/// Message `iter`'s stamp at byte `off` of the buffer: one byte per 4 KiB
/// page (as `ibv_rc_pingpong -c` validates), so stamping and checking cost
/// next to nothing beside the SEND itself.
fn stamp(iter: u32, off: usize) -> u8 {
    (iter as u8) ^ ((off >> 12) as u8)
}

/// Writes message `iter`'s stamps into the send buffer, in place.
fn fill(buf: &mut [u8], iter: u32) {
    for off in (0..buf.len()).step_by(4096) {
        buf[off] = stamp(iter, off);
    }
}

/// Checks message `iter`'s stamps in the receive buffer, in place.
fn check(buf: &[u8], iter: u32) -> rdma_direct::Result<()> {
    for off in (0..buf.len()).step_by(4096) {
        if buf[off] != stamp(iter, off) {
            return Err(rdma_direct::Error::Invalid(format!(
                "SEND {iter} from the peer has byte {off} = {:#04x}, not {:#04x} (a stale or foreign message)",
                buf[off],
                stamp(iter, off)
            )));
        }
    }
    Ok(())
}

/// Each side's two buffers, registered once and posted by value: `send`
/// (read by the device only: no access flags) and `recv` (LOCAL_WRITE).
fn buffers(pd: &Pd, size: u32) -> rdma_direct::Result<(LocalMr, LocalMr)> {
    Ok((
        pd.alloc_local_mr(size as usize, Access::empty())?,
        pd.alloc_local_mr(size as usize, Access::LOCAL_WRITE)?,
    ))
}

/// The receive each side keeps posted: its receive buffer moves into the QP.
fn post_first_recv(qp: &mut Qp, recv: LocalMr, size: u32) -> rdma_direct::Result<()> {
    qp.post_recv_owned(0, recv, 0, size)
        .map_err(rdma_direct::Error::from)
}

/// One side's state: its completions so far and its send buffer while no
/// SEND holds it.
struct Side {
    size: u32,
    events: bool,
    wc: [Completion; 4],
    /// Completions seen so far: (receives, sends).
    done: (u32, u32),
    send: Option<LocalMr>,
}

fn gone(what: &str) -> rdma_direct::Error {
    rdma_direct::Error::Invalid(format!("the {what} buffer was not handed back"))
}

impl Side {
    /// Waits until `recvs` SENDs from the peer and `sends` of ours have
    /// completed, checking each completion (10 s at most).
    fn wait_for(&mut self, qp: &mut Qp, recvs: u32, sends: u32) -> rdma_direct::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.done.0 < recvs || self.done.1 < sends {
            let n = if self.events {
                let left = deadline.saturating_duration_since(Instant::now());
                qp.wait(&mut self.wc, CompletionMode::Events, left)?
            } else {
                qp.poll(&mut self.wc)?
            };
            for c in &self.wc[..n] {
                if !c.status.is_ok() {
                    return Err((*c).into());
                }
                if c.opcode == WcOpcode::RECV {
                    if c.byte_len != self.size {
                        return Err(rdma_direct::Error::Invalid(format!(
                            "a SEND of {} bytes from the peer, not {} (different -s on the two sides?)",
                            c.byte_len, self.size
                        )));
                    }
                    self.done.0 += 1;
                } else {
                    self.done.1 += 1;
                }
            }
            if n == 0 {
                if Instant::now() > deadline {
                    return Err(rdma_direct::Error::Timeout(format!(
                        "{} of {recvs} SENDs from the peer and {} of {sends} of ours completed in 10 s",
                        self.done.0, self.done.1
                    )));
                }
                // Let the other side (and the sim's device thread) run when
                // they share a core with this one.
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// SENDs message `iter`: takes the send buffer back from the QP once
    /// SEND `iter - 1` has completed (`recvs`: the receives this side has
    /// waited for already), stamps it in place and posts it by value.
    fn send(&mut self, qp: &mut Qp, iter: u32, recvs: u32) -> rdma_direct::Result<()> {
        let mut buf = match self.send.take() {
            Some(b) => b,
            None => {
                self.wait_for(qp, recvs, iter)?;
                qp.take_send_buf().ok_or_else(|| gone("send"))?.1
            }
        };
        fill(&mut buf, iter);
        let wr = SendWr::send(iter as u64, &[]).signaled();
        qp.post_send_owned(&wr, buf, 0, self.size)
            .map_err(rdma_direct::Error::from)
    }
}

/// One side: `first` sends first (the caller posted each side's first
/// receive, its receive buffer, before either could send). Each iteration:
/// (send,) wait for the peer's SEND, take the receive buffer back, check the
/// message in place and repost the buffer (but after the last), (send
/// back). A SEND takes the send buffer by value; it comes back once that
/// SEND has completed (`ibv_rc_pingpong` too waits for its SEND's
/// completion before the next) and is stamped in place for the next one.
/// Every completion is checked; the side returns only once its own SENDs
/// have all completed (as `ibv_rc_pingpong` counts both kinds), so its QP
/// outlives them. With `events`, waits sleep on the CQ's completion event.
fn pingpong(
    qp: &mut Qp,
    send: LocalMr,
    size: u32,
    iters: u32,
    first: bool,
    events: bool,
) -> rdma_direct::Result<Duration> {
    let mut side = Side {
        size,
        events,
        wc: [Completion::default(); 4],
        done: (0, 0),
        send: Some(send),
    };
    let start = Instant::now();
    for i in 0..iters {
        if first {
            side.send(qp, i, i)?;
        }
        side.wait_for(qp, i + 1, 0)?;
        let (_, recv) = qp.take_recv_buf().ok_or_else(|| gone("receive"))?;
        check(&recv[..size as usize], i)?;
        if i + 1 < iters {
            qp.post_recv_owned(0, recv, 0, size)
                .map_err(rdma_direct::Error::from)?;
        }
        if !first {
            side.send(qp, i, i + 1)?;
        }
    }
    // Every SEND of ours completed: the peer has it, and the QP may go.
    side.wait_for(qp, iters, iters)?;
    Ok(start.elapsed())
}

fn report(size: u32, iters: u32, t: Duration) {
    // As ibv_rc_pingpong: bytes counted both ways.
    let bytes = size as u64 * iters as u64 * 2;
    let s = t.as_secs_f64();
    println!(
        "{bytes} bytes in {s:.2} seconds = {:.2} Mbit/sec",
        bytes as f64 * 8.0 / s / 1e6
    );
    println!(
        "{iters} iters in {s:.2} seconds = {:.2} usec/iter",
        s * 1e6 / iters as f64
    );
}

fn main() -> std::process::ExitCode {
    let a = match args() {
        Ok(Parsed::Run(a)) => a,
        Ok(Parsed::Help) => {
            print!("{USAGE}");
            return std::process::ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("rc_pingpong: {e}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    match run(&a) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rc_pingpong: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(a: &Args) -> rdma_direct::Result<()> {
    let ctx = Context::open(&a.dev)?;
    let pd = ctx.alloc_pd()?;
    if a.dev == rdma_direct::SIM_DEVICE {
        // The sim lives in this process: the two sides are two threads.
        let (mut qa, mut qb) = pd.create_connected_pair(&config(a))?;
        let ((sa, ra), (sb, rb)) = (buffers(&pd, a.size)?, buffers(&pd, a.size)?);
        post_first_recv(&mut qa, ra, a.size)?;
        post_first_recv(&mut qb, rb, a.size)?;
        let (size, iters, ev) = (a.size, a.iters, a.events);
        let server = std::thread::spawn(move || pingpong(&mut qb, sb, size, iters, false, ev));
        let client = pingpong(&mut qa, sa, size, iters, true, ev);
        let server = server
            .join()
            .map_err(|_| rdma_direct::Error::Invalid("the server thread panicked".into()))?;
        // Both sides' errors matter; the server's first (the client may
        // only have timed out waiting for it).
        server?;
        let t = client?;
        println!(
            "local address:  QPN {:#08x} (sim, two threads)",
            qa.qp_num()
        );
        report(a.size, a.iters, t);
        return Ok(());
    }
    let mut qp = pd.create_qp(&config(a))?;
    let (send, recv) = buffers(&pd, a.size)?;
    let psn = Qp::random_psn();
    // Only SENDs cross: no memory is offered to the peer (rkey 0, as
    // kv_lookup's client does).
    let mine = ConnInfo {
        endpoint: qp.endpoint(),
        psn,
        rkey: Rkey(0),
        addr: 0,
        len: 0,
        qkey: 0,
        dc_key: None,
    };
    let (peer, mut tcp) = match &a.host {
        None => exchange::serve(a.port, &mine)?,
        Some(h) => exchange::connect(h, a.port, Duration::from_secs(60), &mine)?,
    };
    println!(
        "  local address:  QPN {:#08x}, PSN {psn:#08x}\n  remote address: QPN {:#08x}, PSN {:#08x}",
        qp.qp_num(),
        peer.endpoint.qpn,
        peer.psn
    );
    qp.connect_remote(psn, &peer.endpoint, peer.psn)?;
    // Our receive is posted before the barrier lets the peer send.
    post_first_recv(&mut qp, recv, a.size)?;
    exchange::barrier(&mut tcp)?;
    let t = pingpong(&mut qp, send, a.size, a.iters, a.host.is_some(), a.events)?;
    exchange::barrier(&mut tcp)?;
    report(a.size, a.iters, t);
    Ok(())
}
