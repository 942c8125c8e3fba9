//! What the memory-window tests (`memory_windows*.rs`) share, on the sim:
//! a PD with an MR a window may be bound to, fresh connected QPs with
//! `QpConfig::memory_windows` (a refused access puts both QPs in ERR: each
//! case makes its own), a peer's WRITE and READ through an rkey and the
//! status they complete with, and the ring's fence bits.
#![allow(dead_code, unused_imports)]

use rdma_direct::testing::QpHooks;
use rdma_direct::*;

#[path = "sim.rs"]
mod sim;
pub use sim::*;

/// The MR's length, bytes.
pub const LEN: usize = 4096;
/// The window's range in the MR (bytes `[OFF, OFF + WLEN)`).
pub const OFF: usize = 1024;
pub const WLEN: usize = 1024;

/// REMOTE_READ and REMOTE_WRITE.
pub const RW: Access = Access::REMOTE_READ.union(Access::REMOTE_WRITE);

pub struct MwEnv {
    pub ctx: Context,
    pub pd: Pd,
    /// The responder's memory: `LEN` bytes, local and remote write, remote
    /// read, MW_BIND; zeroed.
    pub mr: Mr,
    /// The requester's: `LEN` bytes, local write.
    pub src: Mr,
}

/// The sim, a PD, the window's MR and the requester's.
pub fn mw_env() -> MwEnv {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd
        .alloc_mr(
            LEN,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::MW_BIND,
        )
        .unwrap();
    let src = pd.alloc_mr(LEN, Access::LOCAL_WRITE).unwrap();
    MwEnv { ctx, pd, mr, src }
}

/// The QP config of these tests: RC, memory windows on.
pub fn mw_cfg() -> QpConfig {
    QpConfig {
        max_send_wr: 16,
        max_recv_wr: 16,
        memory_windows: true,
        ..QpConfig::default()
    }
}

/// Fresh connected QPs `(a, b)` on `pd`: `a` the peer that reaches `b`'s
/// memory, `b` the window's QP (binds and invalidations).
pub fn pair(pd: &Pd) -> (Qp, Qp) {
    pd.create_connected_pair(&mw_cfg()).unwrap()
}

/// The window's bind over `[OFF, OFF + WLEN)` of `mr` with `access`.
pub fn window(mr: &Mr, access: Access) -> MwBind<'_> {
    MwBind::new(mr, OFF, WLEN, access)
}

/// One completion of `q`, the next to come.
pub fn next(q: &mut Qp) -> Completion {
    poll_n(q, 1)[0]
}

/// `a` WRITEs 8 bytes of `byte` (from its `src`) at `addr` of the peer
/// through `rkey`, signaled: the status it completes with.
pub fn write_through(a: &mut Qp, src: &Mr, byte: u8, addr: u64, rkey: Rkey) -> WcStatus {
    src.write(0, &[byte; 8]).unwrap();
    let s = [Sge::new(src, 0, 8).unwrap()];
    a.post_send(&[SendWr::rdma_write(77, &s, RemoteAddr { addr, rkey }).signaled()])
        .unwrap();
    let c = next(a);
    assert_eq!(c.wr_id, 77);
    c.status
}

/// `a` READs 8 bytes at `addr` of the peer through `rkey` into its `src`
/// (bytes 8..16), signaled: the status, and the bytes on success.
pub fn read_through(a: &mut Qp, src: &Mr, addr: u64, rkey: Rkey) -> (WcStatus, [u8; 8]) {
    src.write(8, &[0; 8]).unwrap();
    let s = [Sge::new(src, 8, 8).unwrap()];
    a.post_send(&[SendWr::rdma_read(78, &s, RemoteAddr { addr, rkey }).signaled()])
        .unwrap();
    let c = next(a);
    assert_eq!(c.wr_id, 78);
    let mut got = [0u8; 8];
    src.read(8, &mut got).unwrap();
    (c.status, got)
}

/// All of `mr`'s bytes.
pub fn bytes(mr: &Mr) -> Vec<u8> {
    let mut v = vec![0u8; mr.len()];
    mr.read(0, &mut v).unwrap();
    v
}

/// The ctrl segment's `fm_ce_se` byte (byte 11) of the WQE at producer
/// index `pi` in `q`'s ring.
pub fn fm_ce_se(q: &Qp, pi: u32) -> u8 {
    let s = q.sq_snapshot().unwrap();
    let wqe_cnt = ((s.len() - 4) / 64) as u32;
    s[((pi % wqe_cnt) * 64) as usize + 11]
}

/// The ctrl segment's opcode byte (byte 3) of the WQE at `pi`.
pub fn opcode_at(q: &Qp, pi: u32) -> u8 {
    let s = q.sq_snapshot().unwrap();
    let wqe_cnt = ((s.len() - 4) / 64) as u32;
    s[((pi % wqe_cnt) * 64) as usize + 3]
}

/// The SQ's producer index (its doorbell record).
pub fn pi_of(q: &Qp) -> u32 {
    let s = q.sq_snapshot().unwrap();
    let n = s.len() - 4;
    u32::from_be_bytes(s[n..].try_into().unwrap()) & 0xffff
}

/// `MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE` in `fm_ce_se`.
pub const SMALL_FENCE: u8 = 1 << 5;
/// `MLX5_OPCODE_UMR`.
pub const UMR: u8 = 0x25;

/// Refused, nothing written (ring and doorbell record the same); returns
/// the error.
pub fn refused(q: &mut Qp, f: impl FnOnce(&mut Qp) -> Result<()>) -> Error {
    let before = q.sq_snapshot().unwrap();
    let e = f(q).expect_err("must be refused");
    assert_eq!(before, q.sq_snapshot().unwrap(), "refusal wrote: {e}");
    e
}

/// The rkey's variant byte plus one, as a bind gives it.
pub fn inc(rkey: Rkey) -> Rkey {
    Rkey((rkey.0 & !0xff) | (rkey.0.wrapping_add(1) & 0xff))
}

/// After a refusal on `b`: no completion came, and a WRITE posts and
/// completes (b writes 8 bytes into `mr`'s first bytes through the MR's
/// own rkey).
pub fn still_posts(b: &mut Qp, e: &MwEnv, what: &str) {
    let mut wc = [Completion::default(); 4];
    assert_eq!(b.poll(&mut wc).unwrap(), 0, "{what}: a completion came");
    let s = [Sge::new(&e.src, 0, 8).unwrap()];
    let r = RemoteAddr {
        addr: e.mr.addr(),
        rkey: e.mr.rkey(),
    };
    b.post_send(&[SendWr::rdma_write(90, &s, r).signaled()])
        .unwrap();
    let c = next(b);
    assert_eq!((c.wr_id, c.status), (90, WcStatus::SUCCESS), "{what}");
}
