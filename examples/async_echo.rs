//! An async echo server on tokio: many clients connect through rdma_cm,
//! and each connection is a task. The server awaits each connection
//! (`CmListener::accept_async`); each client's task connects
//! (`cm::connect_async`), all at once: the CM's event channels watched by
//! tokio's reactor, no blocking thread. A connection's task owns its QP: it
//! posts SENDs and receives and awaits its completions
//! (`Qp::completions(CompletionMode::Events).next().await`), so a task
//! waiting for its peer sleeps until the CQ's event wakes it (on a verbs
//! device through tokio's reactor, `AsyncFd`, with the `tokio` feature).
//!
//! Each message is `-s` bytes: its 8-byte number, then a pattern of the
//! number and the client's index. The server SENDs each message back on
//! the connection it came in on; each client sends `-n` messages one at a
//! time and checks every echo. A client's last message is 8 bytes of
//! `u64::MAX`: the server's task then ends, and the server exits once
//! `-c` clients have come and gone.
//!
//! ```text
//! cargo run --features tokio --example async_echo                     # the sim: server and clients in this process (QPs connected in loopback)
//! cargo run --features tokio --example async_echo -- -d rxe0 --server # server: rdma_cm on port 18515
//! cargo run --features tokio --example async_echo -- -d rxe0 SERVER_IP
//! ```
//!
//! Flags: `-d DEV`, `-p PORT`, `-c CLIENTS` (default 4), `-n MESSAGES`
//! per client (default 1000), `-s SIZE` (16 to 4096, default 64),
//! `--server`; `-h` prints the usage. A bad argument exits 2, a failed run 1.

use rdma_direct::{
    Access, Completion, CompletionMode, Context, Error, Mr, Pd, Qp, QpConfig, RecvWr, Result,
    SendWr, Sge, WcOpcode,
};
use std::time::{Duration, Instant};

/// Receives each side keeps posted.
const RECVS: usize = 8;
/// The last message's number: the client is done.
const BYE: u64 = u64::MAX;

struct Args {
    dev: String,
    port: u16,
    clients: usize,
    messages: u64,
    size: usize,
    server: bool,
    host: Option<String>,
}

fn args() -> std::result::Result<Option<Args>, String> {
    let mut a = Args {
        dev: rdma_direct::SIM_DEVICE.into(),
        port: 18515,
        clients: 4,
        messages: 1000,
        size: 64,
        server: false,
        host: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(f) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match f.as_str() {
            "-d" | "--ib-dev" => a.dev = val("-d")?,
            "-p" | "--port" => a.port = val("-p")?.parse().map_err(|e| format!("-p: {e}"))?,
            "-c" | "--clients" => a.clients = val("-c")?.parse().map_err(|e| format!("-c: {e}"))?,
            "-n" | "--messages" => {
                a.messages = val("-n")?.parse().map_err(|e| format!("-n: {e}"))?
            }
            "-s" | "--size" => a.size = val("-s")?.parse().map_err(|e| format!("-s: {e}"))?,
            "--server" => a.server = true,
            "-h" | "--help" => return Ok(None),
            h if !h.starts_with('-') && a.host.is_none() => a.host = Some(h.into()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.clients == 0 || a.clients > 64 || a.messages == 0 || !(16..=4096).contains(&a.size) {
        return Err("-c must be 1..=64, -n at least 1, -s 16..=4096".into());
    }
    let sim = a.dev == rdma_direct::SIM_DEVICE;
    if !sim && (a.server == a.host.is_some()) {
        return Err("on a device other than the sim, give either --server or SERVER_IP".into());
    }
    if sim && (a.server || a.host.is_some()) {
        return Err("the sim has no connection manager: run without --server or a host".into());
    }
    Ok(Some(a))
}

fn cfg() -> QpConfig {
    QpConfig {
        max_send_wr: 16,
        max_recv_wr: RECVS as u32,
        // A client may SEND before the server's task has posted its
        // receives (they are posted once the QP is connected): RNR NAKs
        // are retried for ever, as perftest's are.
        rnr_retry: 7,
        ..QpConfig::default()
    }
}

/// Message `k` of client `c`: its number, then a pattern of both.
fn message(k: u64, c: usize, size: usize) -> Vec<u8> {
    let mut m = vec![0u8; size];
    m[..8].copy_from_slice(&k.to_le_bytes());
    for (i, b) in m[8..].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(7) ^ (k as u8) ^ (c as u8).wrapping_mul(31);
    }
    m
}

/// A connection's memory: `RECVS` receive slots and one send slot of
/// `size` bytes each.
struct Bufs {
    recv: Mr,
    send: Mr,
    size: usize,
}

impl Bufs {
    fn new(pd: &Pd, size: usize) -> Result<Bufs> {
        Ok(Bufs {
            recv: pd.alloc_mr(RECVS * size, Access::LOCAL_WRITE)?,
            send: pd.alloc_mr(size, Access::LOCAL_WRITE)?,
            size,
        })
    }

    /// Posts the receive of slot `k` (its wr_id).
    fn post_recv(&self, qp: &mut Qp, k: usize) -> Result<()> {
        let sge = [Sge::new(&self.recv, k * self.size, self.size as u32)?];
        qp.post_recv(&[RecvWr::new(k as u64, &sge)])
    }

    /// SENDs `bytes` (signaled, wr_id `id`) from the send slot.
    fn send(&self, qp: &mut Qp, id: u64, bytes: &[u8]) -> Result<()> {
        self.send.write(0, bytes)?;
        let sge = [Sge::new(&self.send, 0, bytes.len() as u32)?];
        qp.post_send(&[SendWr::send(id, &sge).signaled()])
    }
}

/// Awaits the QP's next receive (send completions on the way are taken),
/// up to 60 s; returns its slot and length.
async fn next_recv(qp: &mut Qp) -> Result<(usize, usize)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut out = [Completion::default(); 4];
    let mut c = qp.completions(CompletionMode::Events);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = tokio::time::timeout(left, c.next_batch(&mut out))
            .await
            .map_err(|_| Error::Timeout("no receive within 60 s".into()))??;
        for w in &out[..n] {
            if !w.status.is_ok() {
                return Err(Error::from(*w));
            }
            if w.opcode == WcOpcode::RECV {
                // (Polled one batch at a time: a receive is the last thing
                // this side waits for, so nothing after it is in `out`
                // but send completions, taken here.)
                return Ok((w.wr_id as usize, w.byte_len as usize));
            }
        }
    }
}

/// The server's task for one connection: echo each message back, until
/// the client's last one.
async fn serve(mut qp: Qp, bufs: Bufs) -> Result<u64> {
    for k in 0..RECVS {
        bufs.post_recv(&mut qp, k)?;
    }
    let mut echoed = 0;
    loop {
        let (slot, len) = next_recv(&mut qp).await?;
        let mut m = vec![0u8; len];
        bufs.recv.read(slot * bufs.size, &mut m)?;
        bufs.post_recv(&mut qp, slot)?;
        if len == 8 && m[..8] == BYE.to_le_bytes() {
            return Ok(echoed);
        }
        bufs.send(&mut qp, echoed, &m)?;
        echoed += 1;
    }
}

/// A client's task: `n` messages, each echo checked, then the last one.
async fn client(mut qp: Qp, bufs: Bufs, c: usize, n: u64) -> Result<()> {
    for k in 0..RECVS {
        bufs.post_recv(&mut qp, k)?;
    }
    for k in 0..n {
        let m = message(k, c, bufs.size);
        bufs.send(&mut qp, k, &m)?;
        let (slot, len) = next_recv(&mut qp).await?;
        let mut echo = vec![0u8; len];
        bufs.recv.read(slot * bufs.size, &mut echo)?;
        if echo != m {
            return Err(Error::Invalid(format!(
                "client {c}: the echo of message {k} differs from it"
            )));
        }
        bufs.post_recv(&mut qp, slot)?;
    }
    bufs.send(&mut qp, BYE, &BYE.to_le_bytes())?;
    // Its send completion: the server has it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut out = [Completion::default(); 4];
    let mut comps = qp.completions(CompletionMode::Events);
    loop {
        let n = tokio::time::timeout(
            deadline.saturating_duration_since(Instant::now()),
            comps.next_batch(&mut out),
        )
        .await
        .map_err(|_| Error::Timeout("the last message's completion".into()))??;
        if out[..n].iter().any(|w| w.wr_id == BYE) {
            return Ok(());
        }
    }
}

/// The sim: `clients` pairs connected in loopback, a server task and a
/// client task per pair.
async fn on_sim(a: &Args) -> Result<()> {
    let ctx = Context::open(&a.dev)?;
    let pd = ctx.alloc_pd()?;
    let mut tasks = Vec::new();
    for c in 0..a.clients {
        let (s, cl) = pd.create_connected_pair(&cfg())?;
        let (sb, cb) = (Bufs::new(&pd, a.size)?, Bufs::new(&pd, a.size)?);
        let n = a.messages;
        tasks.push(tokio::spawn(async move { serve(s, sb).await.map(|_| ()) }));
        tasks.push(tokio::spawn(async move { client(cl, cb, c, n).await }));
    }
    for t in tasks {
        t.await
            .map_err(|e| Error::Invalid(format!("a task failed: {e}")))??;
    }
    Ok(())
}

/// The server through rdma_cm: accepts `-c` connections
/// (`CmListener::accept_async`: the CM's event channel watched by tokio's
/// reactor), a task each.
#[cfg(feature = "verbs")]
async fn server(a: &Args) -> Result<()> {
    use rdma_direct::cm::{CmListener, CmOffer};
    let ctx = std::sync::Arc::new(Context::open(&a.dev)?);
    let pd = std::sync::Arc::new(ctx.alloc_pd()?);
    let listener = CmListener::bind(a.port)?;
    println!(
        "async_echo: server on {} port {}, waiting for {} clients",
        a.dev, a.port, a.clients
    );
    let mut tasks = Vec::new();
    for c in 0..a.clients {
        let mut qp = pd.create_qp(&cfg())?;
        let none = CmOffer {
            rkey: rdma_direct::Rkey(0),
            addr: 0,
            len: 0,
        };
        let (conn, _) = listener
            .accept_async(&mut qp, &none, Duration::from_secs(120))
            .await?;
        let bufs = Bufs::new(&pd, a.size)?;
        tasks.push(tokio::spawn(async move {
            let r = serve(qp, bufs).await;
            drop(conn);
            (c, r)
        }));
    }
    let mut total = 0;
    for t in tasks {
        let (c, r) = t
            .await
            .map_err(|e| Error::Invalid(format!("a task failed: {e}")))?;
        let n = r?;
        println!("async_echo: connection {c}: {n} messages echoed");
        total += n;
    }
    println!(
        "async_echo: server done: {total} messages echoed on {} connections",
        a.clients
    );
    Ok(())
}

/// The clients through rdma_cm: `-c` connections to the server, a task
/// each, which connects (`cm::connect_async`), then runs.
#[cfg(feature = "verbs")]
async fn clients(a: &Args, host: &str) -> Result<()> {
    use rdma_direct::cm::{self, CmOffer};
    let ctx = std::sync::Arc::new(Context::open(&a.dev)?);
    let pd = std::sync::Arc::new(ctx.alloc_pd()?);
    let mut tasks = Vec::new();
    for c in 0..a.clients {
        let (p, h, port) = (pd.clone(), host.to_string(), a.port);
        let n = a.messages;
        let size = a.size;
        tasks.push(tokio::spawn(async move {
            let mut qp = p.create_qp(&cfg())?;
            let none = CmOffer {
                rkey: rdma_direct::Rkey(0),
                addr: 0,
                len: 0,
            };
            let (conn, _) =
                cm::connect_async(&mut qp, &h, port, &none, Duration::from_secs(120)).await?;
            let bufs = Bufs::new(&p, size)?;
            let r = client(qp, bufs, c, n).await;
            drop(conn);
            r
        }));
    }
    for t in tasks {
        t.await
            .map_err(|e| Error::Invalid(format!("a task failed: {e}")))??;
    }
    Ok(())
}

fn main() {
    let a = match args() {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("usage: async_echo [-d DEV] [-p PORT] [-c CLIENTS] [-n MESSAGES] [-s SIZE] [--server | SERVER_IP]");
            return;
        }
        Err(e) => {
            eprintln!("async_echo: {e}");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let start = Instant::now();
    let r = rt.block_on(async {
        if a.dev == rdma_direct::SIM_DEVICE {
            return on_sim(&a).await;
        }
        #[cfg(feature = "verbs")]
        {
            match &a.host {
                None => server(&a).await,
                Some(h) => clients(&a, h).await,
            }
        }
        #[cfg(not(feature = "verbs"))]
        Err(Error::Invalid(
            "a device other than the sim needs the verbs feature".into(),
        ))
    });
    match r {
        Ok(()) => {
            if a.server {
                return;
            }
            let msgs = a.clients as u64 * a.messages;
            let secs = start.elapsed().as_secs_f64();
            println!(
                "async_echo: {} clients x {} messages of {} bytes on {}: every echo checked, {msgs} round trips in {secs:.2} s ({:.1} us each, tasks interleaved)",
                a.clients, a.messages, a.size, a.dev, secs * 1e6 / msgs as f64
            );
        }
        Err(e) => {
            eprintln!("async_echo: {e}");
            std::process::exit(1);
        }
    }
}
