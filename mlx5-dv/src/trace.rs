//! Seeing the ring live: with `RDMA_DIRECT_TRACE=1` in the environment, every
//! WQE the driver posts and every CQE it polls is decoded and printed to
//! stderr with its ring offset. Off, it costs one relaxed load and a branch
//! per doorbell and per look-ahead of the poller: posted WQEs are printed when
//! the doorbell publishes them, and a switch made with [`set`] reaches the
//! poller within 16 CQEs.

use crate::cqe::Cqe;
use crate::ring::RingBuf;
use crate::wqe::decode_send_wqe;
use std::sync::atomic::{AtomicU8, Ordering};

/// 0 = not read yet, 1 = off, 2 = on.
static STATE: AtomicU8 = AtomicU8::new(0);

/// Whether tracing is on (`RDMA_DIRECT_TRACE` set to anything but `0` or empty).
#[inline(always)]
pub fn enabled() -> bool {
    // One compare on the hot path: off (1) is the common state.
    let s = STATE.load(Ordering::Relaxed);
    s != 1 && (s == 2 || init())
}

#[cold]
#[inline(never)]
fn init() -> bool {
    let on = std::env::var("RDMA_DIRECT_TRACE").is_ok_and(|v| !v.is_empty() && v != "0");
    STATE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
    on
}

/// Writes one trace line to stderr; a closed or failing stderr drops it
/// (tracing must never fail or panic a post or a poll).
macro_rules! line {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

/// `Some(RemoteSeg { .. })` as `raddr 0x.. rkey 0x..`, or `-`.
fn remote_str(r: Option<crate::wqe::RemoteSeg>) -> String {
    r.map_or("-".into(), |r| {
        format!("raddr {:#x} rkey {:#x}", r.addr, r.rkey)
    })
}

/// Turns tracing on or off from code (tests, tools).
pub fn set(on: bool) {
    STATE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
}

#[cold]
pub(crate) fn posted(qpn: u32, sq: &RingBuf<'_>, wqe_cnt: u32, pi: u32, wr_id: u64) {
    let off = (pi & (wqe_cnt - 1)) as usize * crate::prm::WQEBB;
    match decode_send_wqe(sq, wqe_cnt, pi) {
        Ok(w) => line!(
            "rdma-direct trace: QP {qpn:#x} post wr_id {wr_id} pi {pi} SQ offset {off}: {} ds {} wqebbs {} flags {:#04x} imm {:#x} {} atomic {} payload {:?}",
            w.opcode.name().unwrap_or("?"),
            w.ds,
            w.wqebbs(),
            w.flags.bits(),
            w.imm,
            remote_str(w.remote),
            w.atomic.map_or("-".into(), |a| format!("swap_add {:#x} compare {:#x}", a.swap_add, a.compare)),
            w.payload
        ),
        Err(e) => line!("rdma-direct trace: QP {qpn:#x} post wr_id {wr_id} pi {pi} SQ offset {off}: undecodable: {e}"),
    }
}

#[cold]
pub(crate) fn recv_posted(rq_idx: u32, off: usize, wr_id: u64, nsge: usize) {
    line!(
        "rdma-direct trace: post receive wr_id {wr_id} index {rq_idx} RQ offset {off}: {nsge} SGEs"
    );
}

/// Prints the CQE at `cqe`, which the caller has just polled.
///
/// # Safety
/// `cqe` must be valid for reads of 64 bytes.
#[cold]
pub(crate) unsafe fn polled(cqn: u32, ci: u32, off: usize, cqe: *const u8) {
    // SAFETY: caller's guarantee.
    let c = unsafe { Cqe::decode_raw(cqe) };
    line!(
        "rdma-direct trace: CQ {cqn:#x} CQE ci {ci} offset {off}: {} wqe_opcode {} qpn {:#x} wqe_counter {} byte_cnt {} imm {:#x} syndrome {:#04x} vendor {:#04x}",
        c.opcode.name().unwrap_or("?"),
        c.wqe_opcode.name().unwrap_or("?"),
        c.qpn,
        c.wqe_counter,
        c.byte_cnt,
        c.imm,
        c.syndrome.0,
        c.vendor_syndrome
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The printers decode whatever is on the ring without panicking (their
    /// output is for people; `RDMA_DIRECT_TRACE=1 rdma-direct bench ...` shows it).
    #[test]
    fn printers_take_any_ring_bytes() {
        let mut mem: Vec<u8> = (0..=255u8).cycle().take(512).collect();
        let ring = RingBuf::from_slice(&mut mem).unwrap();
        for pi in 0..8 {
            posted(0x1234, &ring, 8, pi, pi as u64);
        }
        // SAFETY: 64 readable bytes.
        unsafe { polled(0x80, 3, 192, [0xa5u8; 64].as_ptr()) };
        recv_posted(1, 16, 9, 2);
    }
}
