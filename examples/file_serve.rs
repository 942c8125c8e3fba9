//! Serving a file by RDMA READ: the server maps a file read-write and shared
//! and registers the mapping; the client READs the whole file, chunk by
//! chunk, with no server CPU involved, and checks every byte.
//!
//! ```text
//! cargo run --example file_serve                          # the sim: both sides in this process
//! cargo run --example file_serve -- -d rxe0               # server: waits on TCP port 18515
//! cargo run --example file_serve -- -d rxe0 SERVER_HOST   # client
//! ```
//!
//! The server creates a file on tmpfs (`/dev/shm`) of `-s` bytes, writes a
//! deterministic pattern into it ([`pattern`]), maps it
//! (`memmap2::MmapMut::map_mut`, shared), unlinks it (the mapping keeps the
//! pages) and registers the mapping with `Pd::reg_mr` (memory a peer
//! reaches: an `Mr`). Its address, rkey and length go to the client in the
//! TCP exchange; then it waits for the client's "done".
//!
//! The client READs the file in chunks of 64 KiB, 4 READs posted at a time,
//! each into a `LocalMr` of its own that moves into the QP with the READ
//! (`Qp::post_send_owned`) and comes back after the completion
//! (`Qp::take_send_buf`); the chunk is checked in place against the pattern,
//! no copy out, and the buffer goes out again with the next READ. It prints
//! the bytes read, the chunks, MB/s and `all N bytes match`.
//!
//! Flags: `-d DEV`, `-p PORT`, `-s BYTES` (the file's size, default 8 MiB;
//! the server's: the client reads what the server offers); `-h`/`--help`
//! prints the usage and exits 0. A bad argument exits 2, a failed run 1 (a
//! byte that does not match fails it, on both sides).

use rdma_direct::exchange::{self, ConnInfo};
use rdma_direct::{
    Access, Completion, Context, Error, LocalMr, Mr, Pd, Qp, QpConfig, RemoteAddr, Rkey, SendWr,
};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Bytes per RDMA READ.
const CHUNK: u64 = 64 << 10;
/// READs posted at a time (each with its own buffer). The QP lets one be
/// outstanding on the wire (`max_rd_atomic` 1, as `Qp::connect_remote`
/// sets); the others wait in the send queue, so the device starts the next
/// as soon as one's response is in, while the program checks that one.
const IN_FLIGHT: usize = 4;
const DEFAULT_SIZE: u64 = 8 << 20;

/// A failed run: the crate's error, the file's, or bytes that do not match.
type Failure = Box<dyn std::error::Error>;

/// Byte `i` of the file: the low byte of `i * 131`, XORed with a hash of
/// `i`'s 256-byte block, so that no two chunks are alike (a READ from the
/// wrong offset, or a chunk checked against the wrong one, cannot pass).
fn pattern(i: u64) -> u8 {
    let block = ((i >> 8).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8;
    (i as u8).wrapping_mul(131) ^ block
}

const USAGE: &str = "\
usage: file_serve [-d DEV] [-p PORT] [-s BYTES] [HOST]
  -d, --ib-dev DEV     device (default: sim; both sides run in this process)
  -p, --port PORT      TCP port of the QP exchange (default 18515)
  -s, --size BYTES     size of the file the server serves (default 8388608);
                       the client reads what the server offers
  -h, --help           print this and exit
  HOST                 connect to the server on HOST (without: be the server)
";

/// What the command line asked for (see [`USAGE`]).
struct Args {
    dev: String,
    port: u16,
    size: u64,
    host: Option<String>,
}

/// The flags; `None` for `-h`/`--help`, `Err` naming the bad argument.
fn args() -> Result<Option<Args>, String> {
    let mut a = Args {
        dev: rdma_direct::SIM_DEVICE.to_string(),
        port: exchange::DEFAULT_PORT,
        size: DEFAULT_SIZE,
        host: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(f) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match f.as_str() {
            "-d" | "--ib-dev" => a.dev = val("-d")?,
            "-p" | "--port" => a.port = val("-p")?.parse().map_err(|e| format!("-p: {e}"))?,
            "-s" | "--size" => a.size = val("-s")?.parse().map_err(|e| format!("-s: {e}"))?,
            "-h" | "--help" => return Ok(None),
            h if !h.starts_with('-') && a.host.is_none() => a.host = Some(h.to_string()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.size == 0 {
        return Err("-s must be at least 1".into());
    }
    if usize::try_from(a.size).is_err() {
        return Err(format!(
            "-s {} does not fit this machine's address space",
            a.size
        ));
    }
    Ok(Some(a))
}

/// Exit status 0 on success and for `--help`, 2 for a bad argument, 1 for a
/// failed run (as the other examples).
fn main() -> std::process::ExitCode {
    let a = match args() {
        Ok(Some(a)) => a,
        Ok(None) => {
            print!("{USAGE}");
            return std::process::ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("file_serve: {e}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    match run(a) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("file_serve: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Removes the file when dropped: right after it is mapped, or on the way
/// out of a failed setup.
struct Unlink(PathBuf);

impl Drop for Unlink {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The server's file: `size` bytes of [`pattern`] in a new file on tmpfs,
/// mapped shared, unlinked, and registered for the peer to READ.
fn serve_file(pd: &Pd, size: u64) -> Result<Mr, Failure> {
    let path = PathBuf::from(format!(
        "/dev/shm/rdma-direct-file-serve-{}",
        std::process::id()
    ));
    let io = |what: &str, e: std::io::Error| format!("{what} {}: {e}", path.display());
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| io("cannot create", e))?;
    let unlink = Unlink(path.clone());
    // Written through the file, not the mapping: a full tmpfs is an error
    // here (ENOSPC), where a store into the mapping would be a SIGBUS.
    let mut block = vec![0u8; CHUNK as usize];
    let mut at = 0u64;
    while at < size {
        let n = CHUNK.min(size - at) as usize;
        for (k, b) in block[..n].iter_mut().enumerate() {
            *b = pattern(at + k as u64);
        }
        file.write_all(&block[..n])
            .map_err(|e| io("cannot write", e))?;
        at += n as u64;
    }
    // SAFETY: the file is this process's own (created above with a name of
    // its pid, `create_new`) and is unlinked right below, so nothing else
    // truncates or changes it while it is mapped; the program itself only
    // hands the mapping to `Pd::reg_mr`, whose `Mr` governs every access.
    let map = unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(|e| io("cannot map", e))?;
    drop(unlink);
    // Read-write and shared, with LOCAL_WRITE: kernel 6.1 pins every
    // registration for writing (`ib_umem_get`), so a read-only shared
    // mapping (`memmap2::Mmap`) would fail with EFAULT even with REMOTE_READ
    // alone (and a private one would be copied on write, the device then
    // seeing the copy).
    Ok(pd.reg_mr(map, Access::LOCAL_WRITE | Access::REMOTE_READ)?)
}

/// What the client found.
struct Outcome {
    elapsed: Duration,
    chunks: u64,
    /// READs posted at a time (buffers).
    in_flight: usize,
    /// Bytes that differ from the pattern, and the first: (offset, got).
    bad: u64,
    first_bad: Option<(u64, u8)>,
}

/// Counts the bytes of `data` (the file's bytes from `at`) that differ
/// from the pattern, keeping the first.
fn check(data: &[u8], at: u64, r: &mut Outcome) {
    for (k, &b) in data.iter().enumerate() {
        let i = at + k as u64;
        if b != pattern(i) {
            r.bad += 1;
            r.first_bad.get_or_insert((i, b));
        }
    }
}

/// The client: READs `len` bytes at `file` in chunks of `CHUNK`, up to
/// `IN_FLIGHT` posted at a time, each into a buffer of `bufs` that the READ
/// holds until its completion; every chunk is checked in place.
fn read_file(
    qp: &mut Qp,
    mut bufs: Vec<LocalMr>,
    file: RemoteAddr,
    len: u64,
) -> rdma_direct::Result<Outcome> {
    let chunk = CHUNK.min(len);
    let chunks = len.div_ceil(chunk);
    let mut r = Outcome {
        elapsed: Duration::ZERO,
        chunks,
        in_flight: bufs.len(),
        bad: 0,
        first_bad: None,
    };
    let mut wc = [Completion::default(); IN_FLIGHT];
    let (mut posted, mut done) = (0u64, 0u64);
    let at = |c: u64| (c * chunk, chunk.min(len - c * chunk));
    let start = Instant::now();
    let mut progress = start;
    while done < chunks {
        // Every free buffer goes out with the next chunk's READ.
        while posted < chunks {
            let Some(buf) = bufs.pop() else { break };
            let (off, n) = at(posted);
            let remote = RemoteAddr {
                addr: file.addr + off,
                rkey: file.rkey,
            };
            let read = SendWr::rdma_read(posted, &[], remote).signaled();
            qp.post_send_owned(&read, buf, 0, n as u32)
                .map_err(Error::from)?;
            posted += 1;
        }
        let n = qp.poll(&mut wc)?;
        for c in &wc[..n] {
            if !c.status.is_ok() {
                return Err((*c).into());
            }
            // In posting order: this completion's buffer, the chunk in it.
            let (id, buf) = qp.take_send_buf().ok_or_else(|| {
                Error::Invalid("a READ's buffer was not handed back after its completion".into())
            })?;
            let (off, n) = at(id);
            check(&buf[..n as usize], off, &mut r);
            bufs.push(buf);
            done += 1;
        }
        if n > 0 {
            progress = Instant::now();
        } else if progress.elapsed() > Duration::from_secs(10) {
            return Err(Error::Timeout(format!(
                "{done} of {chunks} READs completed; none more in 10 s"
            )));
        } else {
            // Let the sim's device thread run when it shares our core.
            std::thread::yield_now();
        }
    }
    r.elapsed = start.elapsed();
    Ok(r)
}

/// The client's buffers: as many as READs are posted at a time (no more
/// than the chunks), each one chunk, registered before the READs start.
fn buffers(pd: &Pd, len: u64) -> rdma_direct::Result<Vec<LocalMr>> {
    let n = (IN_FLIGHT as u64).min(len.div_ceil(CHUNK)) as usize;
    (0..n)
        .map(|_| pd.alloc_local_mr(CHUNK.min(len) as usize, Access::LOCAL_WRITE))
        .collect()
}

/// Prints what the client read; `Err` when a byte did not match.
fn report(r: &Outcome, len: u64) -> Result<(), Failure> {
    let s = r.elapsed.as_secs_f64();
    println!(
        "read {len} bytes in {} chunks of up to {} bytes ({} READs posted at a time) in {s:.3} s = {:.2} MB/s",
        r.chunks,
        CHUNK.min(len),
        r.in_flight,
        len as f64 / s / 1e6
    );
    match r.first_bad {
        None => {
            println!("all {len} bytes match");
            Ok(())
        }
        Some((i, got)) => Err(format!(
            "{} of {len} bytes do not match; the first is byte {i}: {got:#04x}, not {:#04x}",
            r.bad,
            pattern(i)
        )
        .into()),
    }
}

fn run(a: Args) -> Result<(), Failure> {
    let Args {
        dev,
        port,
        size,
        host,
    } = a;
    let ctx = Context::open(&dev)?;
    let pd = ctx.alloc_pd()?;
    if dev == rdma_direct::SIM_DEVICE {
        let file = serve_file(&pd, size)?;
        println!("file_serve: serving {size} bytes of a tmpfs file (mapped shared, unlinked) by RDMA READ");
        let (mut client, _server) = pd.create_connected_pair(&QpConfig::default())?;
        let remote = RemoteAddr {
            addr: file.addr(),
            rkey: file.rkey(),
        };
        let r = read_file(&mut client, buffers(&pd, size)?, remote, size)?;
        return report(&r, size);
    }
    let mut qp = pd.create_qp(&QpConfig::default())?;
    let psn = Qp::random_psn();
    // Only the server offers memory: its file, registered before the rkey
    // is sent.
    let file = match host {
        None => Some(serve_file(&pd, size)?),
        Some(_) => None,
    };
    let mine = ConnInfo {
        endpoint: qp.endpoint(),
        psn,
        rkey: file.as_ref().map_or(Rkey(0), Mr::rkey),
        addr: file.as_ref().map_or(0, Mr::addr),
        len: file.as_ref().map_or(0, |f| f.len() as u64),
        qkey: 0,
        dc_key: None,
    };
    let (peer, mut tcp) = match &host {
        None => exchange::serve(port, &mine)?,
        Some(h) => exchange::connect(h, port, Duration::from_secs(60), &mine)?,
    };
    qp.connect_remote(psn, &peer.endpoint, peer.psn)?;
    exchange::barrier(&mut tcp)?;
    if file.is_some() {
        println!("file_serve: serving {size} bytes of a tmpfs file (mapped shared, unlinked) by RDMA READ");
        // However long the client takes: wait for its word.
        tcp.set_read_timeout(None)
            .map_err(|e| Error::Exchange(format!("socket: {e}")))?;
        let said = exchange::swap_line(&mut tcp, "bye")?;
        if said != "done" {
            return Err(format!("the client says: {said}").into());
        }
        println!("file_serve: the client read the file and is done");
        return Ok(());
    }
    if peer.len == 0 {
        return Err("the server offers no file (is it another program?)".into());
    }
    let remote = RemoteAddr {
        addr: peer.addr,
        rkey: peer.rkey,
    };
    let r = read_file(&mut qp, buffers(&pd, peer.len)?, remote, peer.len)?;
    let verdict = report(&r, peer.len);
    let line = match &verdict {
        Ok(()) => "done".to_string(),
        Err(e) => format!("failed: {e}"),
    };
    exchange::swap_line(&mut tcp, &line)?;
    verdict
}
