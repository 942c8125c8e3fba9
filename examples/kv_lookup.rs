//! A small key-value lookup over RDMA READ: the server keeps a table of
//! 64-byte slots (8-byte key, 56-byte value) in a buffer from a
//! pre-registered memory pool; the client hashes a key to its slot and
//! fetches the slot with one RDMA READ, no server CPU involved.
//!
//! The two kinds of registered memory: the table is memory a peer reaches
//! (REMOTE_READ), so the server fills it with the safe atomic copies
//! (`PoolBuf::write`, i.e. `Mr::write`), all before its rkey is sent. The
//! client's READ target is a `LocalMr` of its own: it moves into the QP
//! with each READ (`Qp::post_send_owned`), comes back after the completion
//! (`Qp::take_send_buf`), and the slot is parsed in place, no copy out.
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
    Access, Completion, Context, LocalMr, Pd, Qp, QpConfig, RemoteAddr, Rkey, SendWr, WcStatus,
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
/// pool, made when it was built), filled slot by slot with `PoolBuf::write`:
/// the atomic byte copies of `Mr::write`, the safe path for memory a peer
/// may reach. Called before the table's rkey goes to anyone.
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
/// key's slot into `local`, which the READ holds until its completion;
/// every value is checked in place.
fn lookups(
    qp: &mut Qp,
    mut local: LocalMr,
    table: RemoteAddr,
    n: u32,
) -> rdma_direct::Result<Duration> {
    let mut wc = [Completion::default(); 1];
    let start = Instant::now();
    for i in 0..n {
        let key = (i as u64).wrapping_mul(2_654_435_761) % KEYS;
        let at = RemoteAddr {
            addr: table.addr + (slot_of(key) * SLOT) as u64,
            rkey: table.rkey,
        };
        // The READ's target moves into the QP (no SGE: the buffer is it).
        let read = SendWr::rdma_read(i as u64, &[], at).signaled();
        qp.post_send_owned(&read, local, 0, SLOT as u32)
            .map_err(rdma_direct::Error::from)?;
        while qp.poll(&mut wc)? == 0 {
            std::thread::yield_now();
        }
        if wc[0].status != WcStatus::SUCCESS {
            return Err(wc[0].into());
        }
        // Completed: the buffer comes back, the slot in it.
        local = match qp.take_send_buf() {
            Some((_, b)) => b,
            None => {
                return Err(rdma_direct::Error::Invalid(
                    "the READ's buffer was not handed back after its completion".into(),
                ))
            }
        };
        let slot = &local[..SLOT];
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
    // The client's READ target: one registration, made before the lookups.
    let local = || pd.alloc_local_mr(SLOT, Access::LOCAL_WRITE);
    if dev == rdma_direct::SIM_DEVICE {
        let pool = pool(&pd)?;
        let table = fill_table(&pool)?;
        let (mut client, _server) = pd.create_connected_pair(&QpConfig::default())?;
        let local = local()?;
        let regs = pd.registrations();
        let t = lookups(&mut client, local, table.remote(0)?, n)?;
        report(n, t, pd.registrations() - regs);
        return Ok(());
    }
    let mut qp = pd.create_qp(&QpConfig::default())?;
    let psn = Qp::random_psn();
    let server = host.is_none();
    // Only the server has a table (filled before its rkey is sent, below).
    let table = if server {
        Some(fill_table(&pool(&pd)?)?)
    } else {
        None
    };
    let mine = ConnInfo {
        endpoint: qp.endpoint(),
        psn,
        rkey: table.as_ref().map_or(Rkey(0), |t| t.rkey()),
        addr: table.as_ref().map_or(0, |t| t.addr()),
        len: (SLOTS * SLOT) as u64,
        qkey: 0,
        dc_key: None,
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
        let local = local()?;
        let regs = pd.registrations();
        let t = lookups(&mut qp, local, table, n)?;
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
