//! A small key-value lookup over RDMA READ: the server keeps a table of
//! 64-byte slots (8-byte key, 56-byte value) in a buffer from a
//! pre-registered memory pool; the client hashes a key to its slot and
//! fetches the slot with one RDMA READ, no server CPU involved.
//!
//! ```text
//! cargo run --example kv_lookup                          # the sim: both sides in this process
//! cargo run --example kv_lookup -- -d rxe0               # server: waits on TCP port 18515
//! cargo run --example kv_lookup -- -d rxe0 SERVER_HOST   # client
//! ```
//!
//! Flags: `-d DEV`, `-p PORT`, `-n LOOKUPS` (default 10000); `-h`/`--help`
//! prints the usage and exits 0. A bad argument exits 2, a failed run 1.

use rdma_direct::exchange::{self, ConnInfo};
use rdma_direct::pool::{Pool, PoolBuf, PoolConfig};
use rdma_direct::{
    Access, Completion, Context, Pd, Qp, QpConfig, RemoteAddr, Rkey, SendWr, WcStatus,
};
use std::time::{Duration, Instant};

const SLOT: usize = 64;
const SLOTS: usize = 1024;
/// Keys stored: every slot's key is its index's; values name the key.
const KEYS: u64 = SLOTS as u64;

fn slot_of(key: u64) -> usize {
    // Keys 0..KEYS map one to one onto slots (a real table would probe).
    (key as usize).wrapping_mul(0x9e37_79b9) % SLOTS
}

fn value_of(key: u64) -> [u8; SLOT - 8] {
    let mut v = [0u8; SLOT - 8];
    let s = format!("value of key {key}");
    v[..s.len()].copy_from_slice(s.as_bytes());
    v
}

/// The table: a 64 KiB buffer of the pool (one registration for the whole
/// pool, made when it was built).
fn fill_table(pool: &Pool) -> rdma_direct::Result<PoolBuf> {
    let table = pool.alloc()?;
    for key in 0..KEYS {
        let mut slot = [0u8; SLOT];
        slot[..8].copy_from_slice(&key.to_le_bytes());
        slot[8..].copy_from_slice(&value_of(key));
        table.write(slot_of(key) * SLOT, &slot)?;
    }
    Ok(table)
}

fn pool(pd: &Pd) -> rdma_direct::Result<Pool> {
    Pool::new(
        pd,
        &PoolConfig {
            buf_size: SLOTS * SLOT,
            access: Access::LOCAL_WRITE | Access::REMOTE_READ,
            ..PoolConfig::default()
        },
    )
}

/// The client: `n` lookups of pseudo-random keys, each one RDMA READ of the
/// key's slot into a pool buffer; every value is checked.
fn lookups(qp: &mut Qp, pool: &Pool, table: RemoteAddr, n: u32) -> rdma_direct::Result<Duration> {
    let local = pool.alloc()?;
    let sge = [local.sge(0, SLOT as u32)?];
    let mut wc = [Completion::default(); 1];
    let start = Instant::now();
    for i in 0..n {
        let key = (i as u64).wrapping_mul(2_654_435_761) % KEYS;
        let at = RemoteAddr {
            addr: table.addr + (slot_of(key) * SLOT) as u64,
            rkey: table.rkey,
        };
        qp.post_send(&[SendWr::rdma_read(i as u64, &sge, at).signaled()])?;
        while qp.poll(&mut wc)? == 0 {
            std::thread::yield_now();
        }
        if wc[0].status != WcStatus::SUCCESS {
            return Err(wc[0].into());
        }
        let mut slot = [0u8; SLOT];
        local.read(0, &mut slot)?;
        let got = u64::from_le_bytes(slot[..8].try_into().unwrap_or_default());
        if got != key || slot[8..] != value_of(key) {
            return Err(rdma_direct::Error::Invalid(format!(
                "lookup of key {key} read the slot of key {got}"
            )));
        }
    }
    Ok(start.elapsed())
}

const USAGE: &str = "\
usage: kv_lookup [-d DEV] [-p PORT] [-n LOOKUPS] [HOST]
  -d, --ib-dev DEV     device (default: sim; both sides run in this process)
  -p, --port PORT      TCP port of the QP exchange (default 18515)
  -n, --iters LOOKUPS  lookups the client makes (default 10000)
  -h, --help           print this and exit
  HOST                 connect to the server on HOST (without: be the server)
";

/// What the command line asked for (see [`USAGE`]).
struct Args {
    dev: String,
    port: u16,
    n: u32,
    host: Option<String>,
}

/// The flags; `None` for `-h`/`--help`, `Err` naming the bad argument.
fn args() -> Result<Option<Args>, String> {
    let mut a = Args {
        dev: rdma_direct::SIM_DEVICE.to_string(),
        port: exchange::DEFAULT_PORT,
        n: 10_000,
        host: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(f) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match f.as_str() {
            "-d" | "--ib-dev" => a.dev = val("-d")?,
            "-p" | "--port" => a.port = val("-p")?.parse().map_err(|e| format!("-p: {e}"))?,
            "-n" | "--iters" => a.n = val("-n")?.parse().map_err(|e| format!("-n: {e}"))?,
            "-h" | "--help" => return Ok(None),
            h if !h.starts_with('-') && a.host.is_none() => a.host = Some(h.to_string()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.n == 0 {
        return Err("-n must be at least 1".into());
    }
    Ok(Some(a))
}

/// Exit status 0 on success and for `--help`, 2 for a bad argument, 1 for a
/// failed run (as `rc_pingpong`).
fn main() -> std::process::ExitCode {
    let a = match args() {
        Ok(Some(a)) => a,
        Ok(None) => {
            print!("{USAGE}");
            return std::process::ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("kv_lookup: {e}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    match run(a) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kv_lookup: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(a: Args) -> rdma_direct::Result<()> {
    let Args { dev, port, n, host } = a;
    let ctx = Context::open(&dev)?;
    let pd = ctx.alloc_pd()?;
    let pool = pool(&pd)?;
    let regs = pd.registrations();
    if dev == rdma_direct::SIM_DEVICE {
        let table = fill_table(&pool)?;
        let (mut client, _server) = pd.create_connected_pair(&QpConfig::default())?;
        let t = lookups(&mut client, &pool, table.remote(0)?, n)?;
        report(n, t, pd.registrations() - regs);
        return Ok(());
    }
    let mut qp = pd.create_qp(&QpConfig::default())?;
    let psn = Qp::random_psn();
    let server = host.is_none();
    let table = if server {
        Some(fill_table(&pool)?)
    } else {
        None
    };
    let mine = ConnInfo {
        endpoint: qp.endpoint(),
        psn,
        rkey: table.as_ref().map_or(Rkey(0), |t| t.rkey()),
        addr: table.as_ref().map_or(0, |t| t.addr()),
        len: (SLOTS * SLOT) as u64,
    };
    let (peer, mut tcp) = match &host {
        None => exchange::serve(port, &mine)?,
        Some(h) => exchange::connect(h, port, Duration::from_secs(60), &mine)?,
    };
    qp.connect_remote(psn, &peer.endpoint, peer.psn)?;
    exchange::barrier(&mut tcp)?;
    if !server {
        let table = RemoteAddr {
            addr: peer.addr,
            rkey: peer.rkey,
        };
        let t = lookups(&mut qp, &pool, table, n)?;
        report(n, t, pd.registrations() - regs);
    } else {
        println!("kv_lookup: serving {KEYS} keys; the client reads them with RDMA READ");
    }
    exchange::barrier(&mut tcp)?;
    Ok(())
}

fn report(n: u32, t: Duration, new_regs: u64) {
    println!(
        "{n} lookups in {:.3} s = {:.2} usec/lookup, every value checked; memory registered during the lookups: {new_regs}",
        t.as_secs_f64(),
        t.as_secs_f64() * 1e6 / n as f64
    );
}
