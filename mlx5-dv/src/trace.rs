//! Seeing the ring live: with `RDMA_DIRECT_TRACE=1` in the environment, every
//! WQE the driver posts and every CQE it polls is decoded and printed to
//! stderr with its ring offset. Off, it costs one relaxed load and a branch
//! per doorbell and per look-ahead of the poller: posted WQEs are printed when
//! the doorbell publishes them, and a switch made with [`set`] reaches the
//! poller within 16 CQEs.

use crate::cqe::Cqe;
use crate::ring::RingBuf;
use crate::wqe::decode_send_wqe;
use std::io::{self, Write};
use std::sync::atomic::{AtomicU8, Ordering};

/// 0 = not read yet, 1 = off, 2 = on.
static STATE: AtomicU8 = AtomicU8::new(0);

/// Whether tracing is on (`RDMA_DIRECT_TRACE` set to anything but `0` or empty).
#[inline(always)]
pub fn enabled() -> bool {
    // One compare on the hot path: off (1) is the common state.
    let s = STATE.load(Ordering::Relaxed);
    // This crate's unit tests also trace while a capture runs on the thread.
    #[cfg(test)]
    if capture::active() {
        return true;
    }
    s != 1 && (s == 2 || init())
}

/// Whether this crate's unit tests capture the trace on this thread (the
/// in-place posts, which read [`enabled`] once per queue, then trace too);
/// `false` outside them.
#[inline(always)]
pub(crate) fn in_capture() -> bool {
    #[cfg(test)]
    return capture::active();
    #[cfg(not(test))]
    false
}

#[cold]
#[inline(never)]
fn init() -> bool {
    let on = std::env::var("RDMA_DIRECT_TRACE").is_ok_and(|v| !v.is_empty() && v != "0");
    STATE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
    on
}

/// Hands the trace sink to `f`, which writes one line: stderr, or in this
/// crate's unit tests the buffer of a `capture::run` on this thread. A
/// closed or failing sink drops the line (tracing must never fail or panic a
/// post or a poll).
fn to_sink(f: impl FnOnce(&mut dyn Write) -> io::Result<()>) {
    #[cfg(test)]
    if capture::active() {
        let mut line = Vec::new();
        let _ = f(&mut line);
        capture::append(&line);
        return;
    }
    let _ = f(&mut io::stderr());
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

/// Prints the send WQE at `pi`, which the doorbell is publishing.
#[cold]
pub(crate) fn posted(qpn: u32, sq: &RingBuf<'_>, wqe_cnt: u32, pi: u32, wr_id: u64) {
    to_sink(|w| write_posted(w, qpn, sq, wqe_cnt, pi, wr_id));
}

/// The line [`posted`] prints, written to `w`.
#[cold]
fn write_posted(
    w: &mut (impl Write + ?Sized),
    qpn: u32,
    sq: &RingBuf<'_>,
    wqe_cnt: u32,
    pi: u32,
    wr_id: u64,
) -> io::Result<()> {
    let off = (pi & (wqe_cnt - 1)) as usize * crate::prm::WQEBB;
    match decode_send_wqe(sq, wqe_cnt, pi) {
        Ok(d) => writeln!(
            w,
            "rdma-direct trace: QP {qpn:#x} post wr_id {wr_id} pi {pi} SQ offset {off}: {} ds {} wqebbs {} flags {:#04x} imm {:#x} {} atomic {} payload {:?}",
            d.opcode.name().unwrap_or("?"),
            d.ds,
            d.wqebbs(),
            d.flags.bits(),
            d.imm,
            remote_str(d.remote),
            d.atomic.map_or("-".into(), |a| format!("swap_add {:#x} compare {:#x}", a.swap_add, a.compare)),
            d.payload
        ),
        Err(e) => writeln!(
            w,
            "rdma-direct trace: QP {qpn:#x} post wr_id {wr_id} pi {pi} SQ offset {off}: undecodable: {e}"
        ),
    }
}

/// Prints the receive WQE just posted at `rq_idx` (RQ byte offset `off`).
#[cold]
pub(crate) fn recv_posted(rq_idx: u32, off: usize, wr_id: u64, nsge: usize) {
    to_sink(|w| write_recv_posted(w, rq_idx, off, wr_id, nsge));
}

/// The line [`recv_posted`] prints, written to `w`.
#[cold]
fn write_recv_posted(
    w: &mut (impl Write + ?Sized),
    rq_idx: u32,
    off: usize,
    wr_id: u64,
    nsge: usize,
) -> io::Result<()> {
    writeln!(
        w,
        "rdma-direct trace: post receive wr_id {wr_id} index {rq_idx} RQ offset {off}: {nsge} SGEs"
    )
}

/// Prints the CQE at `cqe`, which the caller has just polled.
///
/// # Safety
/// `cqe` must be valid for reads of 64 bytes.
#[cold]
pub(crate) unsafe fn polled(cqn: u32, ci: u32, off: usize, cqe: *const u8) {
    // SAFETY: caller's guarantee.
    let c = unsafe { Cqe::decode_raw(cqe) };
    to_sink(|w| write_polled(w, cqn, ci, off, &c));
}

/// The line [`polled`] prints for the decoded CQE `c`, written to `w`.
#[cold]
fn write_polled(
    w: &mut (impl Write + ?Sized),
    cqn: u32,
    ci: u32,
    off: usize,
    c: &Cqe,
) -> io::Result<()> {
    writeln!(
        w,
        "rdma-direct trace: CQ {cqn:#x} CQE ci {ci} offset {off}: {} wqe_opcode {} qpn {:#x} wqe_counter {} byte_cnt {} imm {:#x} syndrome {:#04x} vendor {:#04x}",
        c.opcode.name().unwrap_or("?"),
        c.wqe_opcode.name().unwrap_or("?"),
        c.qpn,
        c.wqe_counter,
        c.byte_cnt,
        c.imm,
        c.syndrome.0,
        c.vendor_syndrome
    )
}

/// Test-only: trace lines captured per thread instead of printed, so a unit
/// test can look at what the printers wrote (and passing tests print nothing).
#[cfg(test)]
pub(crate) mod capture {
    use std::cell::RefCell;

    thread_local! {
        /// The lines captured on this thread while [`run`] runs.
        static LINES: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
    }

    /// Whether a capture runs on this thread.
    pub(super) fn active() -> bool {
        LINES.with_borrow(|l| l.is_some())
    }

    /// Adds the bytes of a line to this thread's capture.
    pub(super) fn append(bytes: &[u8]) {
        LINES.with_borrow_mut(|l| l.get_or_insert_with(Vec::new).extend_from_slice(bytes));
    }

    /// Runs `f` with tracing on for this thread only (whatever [`super::set`]
    /// says), and returns what the printers wrote meanwhile.
    pub(crate) fn run(f: impl FnOnce()) -> String {
        /// Ends the capture even if `f` panics.
        struct End;
        impl Drop for End {
            fn drop(&mut self) {
                LINES.set(None);
            }
        }
        LINES.set(Some(Vec::new()));
        let end = End;
        f();
        let out = LINES.with_borrow_mut(|l| l.take()).unwrap_or_default();
        drop(end);
        String::from_utf8(out).expect("trace lines are UTF-8")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prm::{CqeOpcode, CtrlFlags, Syndrome, WqeOpcode};
    use crate::wqe::{write_send_wqe, Payload, RemoteSeg, SendWqe, SqGeometry};

    /// The printers decode whatever is on the ring without panicking (their
    /// output is for people; `RDMA_DIRECT_TRACE=1 rdma-direct bench ...`
    /// shows it): garbage WQEs print as undecodable, or decoded as far as the
    /// ctrl segment goes, one line each.
    #[test]
    fn printers_take_any_ring_bytes() {
        let mut mem: Vec<u8> = (0..=255u8).cycle().take(512).collect();
        let ring = RingBuf::from_slice(&mut mem).unwrap();
        let mut out = Vec::new();
        for pi in 0..8 {
            write_posted(&mut out, 0x1234, &ring, 8, pi, pi as u64).unwrap();
        }
        let out = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 8, "{out}");
        for (pi, l) in lines.iter().enumerate() {
            let head = format!(
                "rdma-direct trace: QP 0x1234 post wr_id {pi} pi {pi} SQ offset {}: ",
                pi * 64
            );
            assert!(l.starts_with(&head), "{l}");
            // The pattern repeats every 256 bytes (4 WQEBBs): WQEBBs 2 and 3
            // of each pass have an inline header with an absurd length.
            if pi % 4 >= 2 {
                let len = if pi % 4 == 2 { 277975699 } else { 1355928275 };
                assert_eq!(
                    &l[head.len()..],
                    format!("undecodable: inline segment of {len} bytes overruns the WQE's 7 DS")
                );
            } else {
                assert!(l[head.len()..].starts_with("? ds 7 wqebbs 2 flags "), "{l}");
                assert!(
                    l.ends_with(&format!(
                        "payload Sges {{ first: {}, count: 6 }}",
                        pi * 64 + 16
                    )),
                    "{l}"
                );
            }
        }
        let mut out = Vec::new();
        let c = Cqe::decode(&[0xa5u8; 64]);
        write_polled(&mut out, 0x80, 3, 192, &c).unwrap();
        write_recv_posted(&mut out, 1, 16, 9, 2).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "rdma-direct trace: CQ 0x80 CQE ci 3 offset 192: ? wqe_opcode ? qpn 0xa5a5a5 wqe_counter 42405 byte_cnt 2779096485 imm 0xa5a5a5a5 syndrome 0x00 vendor 0x00\n\
             rdma-direct trace: post receive wr_id 9 index 1 RQ offset 16: 2 SGEs\n"
        );
    }

    /// A WQE the encoder wrote and a CQE as the device writes it print
    /// decoded, through the same sink the driver uses (captured here, stderr
    /// otherwise).
    #[test]
    fn printers_decode_a_written_wqe_and_cqe() {
        let mut mem = vec![0u8; 8 * 64];
        let mut ring = RingBuf::from_slice(&mut mem).unwrap();
        let geo = SqGeometry {
            wqe_cnt: 8,
            qpn: 0x42,
            max_inline: 64,
            max_wqebbs: 4,
        };
        let wqe = SendWqe {
            datagram: None,
            opcode: WqeOpcode::RDMA_WRITE_IMM,
            flags: CtrlFlags::CQ_UPDATE,
            imm: 0xbeef,
            remote: Some(RemoteSeg {
                addr: 0x1000,
                rkey: 0x77,
            }),
            masked: None,
            atomic: None,
            payload: Payload::Inline(&[1, 2, 3]),
        };
        write_send_wqe(&mut ring, &geo, 5, &wqe, 8).unwrap();
        let cqe = Cqe {
            opcode: CqeOpcode::REQ,
            wqe_opcode: WqeOpcode::RDMA_WRITE_IMM,
            qpn: 0x42,
            wqe_counter: 5,
            byte_cnt: 3,
            imm: 0,
            solicited: false,
            format: 0,
            owner: false,
            syndrome: Syndrome(0),
            vendor_syndrome: 0,
            flags_rqpn: 0,
        }
        .encode(0);
        let out = capture::run(|| {
            posted(0x42, &ring, 8, 5, 77);
            // SAFETY: 64 readable bytes.
            unsafe { polled(0x80, 0, 0, cqe.as_ptr()) };
            recv_posted(2, 32, 78, 1);
        });
        assert_eq!(
            out,
            "rdma-direct trace: QP 0x42 post wr_id 77 pi 5 SQ offset 320: RDMA_WRITE_IMM ds 3 wqebbs 1 flags 0x08 imm 0xbeef raddr 0x1000 rkey 0x77 atomic - payload Inline { off: 356, len: 3 }\n\
             rdma-direct trace: CQ 0x80 CQE ci 0 offset 0: REQ wqe_opcode RDMA_WRITE_IMM qpn 0x42 wqe_counter 5 byte_cnt 3 imm 0x0 syndrome 0x00 vendor 0x00\n\
             rdma-direct trace: post receive wr_id 78 index 2 RQ offset 32: 1 SGEs\n"
        );
        assert!(!capture::active(), "the capture ended");
    }
}
