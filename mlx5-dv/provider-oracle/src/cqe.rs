//! CQEs: the sim's CQEs polled by our direct path and by libmlx5's
//! `mlx5_poll_cq_v1` (CQE version 1, which the sim writes and libmlx5 asks
//! ConnectX for), and the comparison of the completions each makes.
//!
//! A [`Case`] is one CQ (2 to 2^15 slots of 64 or 128 bytes, its consumer
//! index anywhere: near 2^24, where the record's 24 bits wrap, and near
//! 2^32 included; the slots ahead holding the previous pass's CQEs) and one
//! to four QPs completing into it (RC, UC or UD; each with its own RQ or on
//! one SRQ). Every queue gets WRs on both sides: ours through
//! `mlx5_dv::driver`'s queues as the direct backend posts, theirs through
//! `mlx5_post_send` / `mlx5_post_recv` / `mlx5_post_srq_recv`. [`plan`]
//! then lists the CQEs the sim writes for them: requester and responder,
//! success and every error syndrome, flushes after an error, receives out
//! of order. The sim's own writer (`sim::Cq::hook_push_cqe`) writes them
//! into a sim CQ, and each slot is copied into our CQ ring and the
//! provider's, in chunks that never overrun, polled by both in batches of
//! 1 to 64: ours by `mlx5_dv::driver::CompletionQueue` and the direct
//! backend's own step from a CQE to a `Completion`
//! (`rdma_direct::testing::direct_completion_of`), theirs by `po_poll_cq`. After
//! each poll: every completion field both have ([`differences`]), the
//! consumer index, the CQ doorbell record, the SQ's retired WR count.
//!
//! Shared by `tests/cqes.rs` and, later, a fuzz target: [`run`] takes any
//! [`Source`]. `sessions` (with the oracle linked): compressed sessions
//! against libmlx5's parse of the full CQEs they stand for
//! (`tests/cqe_sessions.rs`).

use crate::gen::{self, Source, ARENA};
use crate::send::SqConfig;
use crate::wr::{ibv, Op, Sge, Wr};
use mlx5_dv::cqe::Cqe;
use mlx5_dv::prm::{CqeOpcode, Syndrome, WqeOpcode};

/// `enum ibv_wc_flags` bits both sides have.
pub const WC_GRH: u32 = 1;
pub const WC_WITH_IMM: u32 = 2;
/// `IBV_WC_WITH_INV`: libmlx5's flag on a RESP_SEND_INV receive, whose
/// `invalidated_rkey` shares `imm_data`.
pub const WC_WITH_INV: u32 = 1 << 3;

/// The syndromes the sim writes in a requester error CQE (`sim/exec.rs`,
/// `ops.rs`, `ud.rs`); WR_FLUSH_ERR comes after an error.
pub const SIM_REQ_SYNDROMES: [Syndrome; 8] = [
    Syndrome::LOCAL_LENGTH_ERR,
    Syndrome::LOCAL_QP_OP_ERR,
    Syndrome::LOCAL_PROT_ERR,
    Syndrome::REMOTE_INVAL_REQ_ERR,
    Syndrome::REMOTE_ACCESS_ERR,
    Syndrome::REMOTE_OP_ERR,
    Syndrome::TRANSPORT_RETRY_EXC_ERR,
    Syndrome::RNR_RETRY_EXC_ERR,
];

/// The syndromes the sim writes in a responder error CQE (`ops.rs`,
/// `ud.rs`; REMOTE_INVAL_REQ_ERR for a SEND with invalidate it refuses,
/// `mw.rs`); WR_FLUSH_ERR for an RQ flushed after an error.
pub const SIM_RESP_SYNDROMES: [Syndrome; 3] = [
    Syndrome::LOCAL_LENGTH_ERR,
    Syndrome::LOCAL_PROT_ERR,
    Syndrome::REMOTE_INVAL_REQ_ERR,
];

/// Syndromes the sim never writes: the rest of libmlx5's table (MW bind,
/// bad response, local access, remote aborted) and values it does not
/// know (general error).
pub const OTHER_SYNDROMES: [u8; 9] = [0x06, 0x10, 0x11, 0x22, 0x00, 0x03, 0x07, 0x21, 0xff];

/// A receive WR: its wr_id and SGEs.
pub type RecvWr = (u64, Vec<Sge>);

/// A QP's own receive queue.
#[derive(Clone, Debug)]
pub struct RqCase {
    pub wqe_cnt: u32,
    pub stride: u32,
    /// The producer counter before the first post.
    pub head: u32,
    pub recvs: Vec<RecvWr>,
}

/// One QP: its SQ (`sq.qpn`, `sq.qp_type`), user index, own RQ or none
/// (its receives come from the case's SRQ), and the sends posted.
#[derive(Clone, Debug)]
pub struct QpCase {
    pub sq: SqConfig,
    pub uidx: u32,
    pub rq: Option<RqCase>,
    pub sends: Vec<Wr>,
}

/// The SRQ: `count` WQEs of `stride` bytes, linked in order.
#[derive(Clone, Debug)]
pub struct SrqCase {
    pub count: u32,
    pub stride: u32,
    pub recvs: Vec<RecvWr>,
}

/// Everything one comparison runs on. Not `Clone`: the inline SGEs of
/// its WRs point into its own `arena`.
#[derive(Debug)]
pub struct Case {
    pub cqe_cnt: u32,
    pub cqe_size: u32,
    /// Both consumer indices, and the sim's producer index, at the start.
    pub start_ci: u32,
    /// CQEs of the pass before `start_ci` in the slots ahead (up to a ring).
    pub stale: u32,
    /// Our CQ ignores overrun (the direct backend's do): its polls leave the
    /// consumer-index record alone.
    pub ignore_overrun: bool,
    pub qps: Vec<QpCase>,
    pub srq: Option<SrqCase>,
    /// The bytes inline SGEs point into (its address is theirs).
    pub arena: Vec<u8>,
}

fn start_index(s: &mut impl Source) -> u32 {
    match s.range(0, 5) {
        0 => s.range(0, 300) as u32,
        1 => (1u32 << 24).wrapping_sub(s.range(0, 300) as u32),
        2 => 0u32.wrapping_sub(s.range(1, 300) as u32),
        3 => (1u32 << 16).wrapping_sub(s.range(0, 300) as u32),
        _ => s.next_u64() as u32,
    }
}

/// A QPN and a user index none of `qps` has: random, the next free one
/// on a clash (so that a fuzzer's exhausted input, all zeros, ends too).
fn fresh_ids(s: &mut impl Source, qps: &[QpCase]) -> (u32, u32) {
    let mut qpn = s.range(1, 0xff_ffff) as u32;
    while qps.iter().any(|q| q.sq.qpn == qpn) {
        qpn = qpn % 0xff_ffff + 1;
    }
    let mut uidx = s.range(0, 0xff_ffff) as u32;
    while qps.iter().any(|q| q.uidx == uidx) {
        uidx = (uidx + 1) & 0xff_ffff;
    }
    (qpn, uidx)
}

fn sq_config(s: &mut impl Source, qp_type: u32, qpn: u32) -> SqConfig {
    let wqe_cnt = 1u32 << s.range(1, 8);
    let max_wqebbs = s.range(1, 4.min(wqe_cnt) as u64) as u32;
    let room = (max_wqebbs * 64).saturating_sub(if qp_type == ibv::QPT_UD { 68 } else { 36 });
    SqConfig {
        wqe_cnt,
        start_pi: start_index(s),
        max_wqebbs,
        max_inline: if s.chance(70) {
            room
        } else {
            s.range(0, room as u64) as u32
        },
        max_post: (wqe_cnt / max_wqebbs).max(1),
        qp_type,
        qpn,
        sq_sig_all: s.chance(10),
        prefer_bf: s.chance(50),
        auto_signal: 0,
        split: 0,
    }
}

fn recv_wrs(s: &mut impl Source, n: u64, max_sge: u32) -> Vec<RecvWr> {
    (0..n)
        .map(|_| {
            let sges = (0..s.range(1, max_sge as u64))
                .map(|_| Sge {
                    addr: s.next_u64(),
                    len: s.range(1, 1 << 20) as u32,
                    lkey: (s.next_u64() as u32) | 0x200,
                })
                .collect();
            (s.next_u64(), sges)
        })
        .collect()
}

/// Up to `most`: often all of it, sometimes none.
fn count(s: &mut impl Source, most: u64) -> u64 {
    match s.range(0, 5) {
        0 => 0,
        1 | 2 => most,
        _ => s.range(0, most),
    }
}

/// A generated case.
pub fn case(s: &mut impl Source) -> Case {
    let cqe_cnt = 1u32
        << match s.range(0, 99) {
            0..=69 => s.range(1, 6),
            70..=98 => s.range(7, 12),
            _ => s.range(13, 15),
        };
    let arena: Vec<u8> = (0..ARENA).map(|_| s.next_u64() as u8).collect();
    let base = arena.as_ptr() as u64;
    let n = s.range(1, 4) as usize;
    let mut qps: Vec<QpCase> = Vec::with_capacity(n);
    let mut srq = false;
    for _ in 0..n {
        let (qpn, uidx) = fresh_ids(s, &qps);
        let qp_type = match s.range(0, 9) {
            0..=4 => ibv::QPT_RC,
            5 | 6 => ibv::QPT_UC,
            _ => ibv::QPT_UD,
        };
        let sq = sq_config(s, qp_type, qpn);
        let most = 64.min(sq.max_post) as u64;
        let sends = (0..count(s, most)).map(|_| gen::wr(s, &sq, base)).collect();
        let rq = if s.chance(35) {
            srq = true;
            None
        } else {
            let wqe_cnt = 1u32 << s.range(0, 7);
            let stride = (16u32 << s.range(0, 3)).max(64 / wqe_cnt);
            Some(RqCase {
                wqe_cnt,
                stride,
                head: start_index(s),
                recvs: {
                    let k = count(s, wqe_cnt as u64);
                    recv_wrs(s, k, stride / 16)
                },
            })
        };
        qps.push(QpCase {
            sq,
            uidx,
            rq,
            sends,
        });
    }
    let srq = srq.then(|| {
        let count = 1u32 << s.range(1, 8);
        let stride = 32u32 << s.range(0, 2);
        let k = self::count(s, count as u64 - 1);
        SrqCase {
            count,
            stride,
            recvs: recv_wrs(s, k, stride / 16 - 1),
        }
    });
    Case {
        cqe_cnt,
        cqe_size: if s.chance(50) { 64 } else { 128 },
        start_ci: start_index(s),
        stale: if s.chance(70) {
            cqe_cnt
        } else {
            s.range(0, cqe_cnt as u64) as u32
        },
        ignore_overrun: s.chance(50),
        qps,
        srq,
        arena,
    }
}

impl Case {
    /// The case in one line per queue (its Debug holds every WR).
    pub fn summary(&self) -> String {
        let mut v = vec![format!(
            "CQ of {} x {} bytes from index {:#x}, {} stale, ignore_overrun {}",
            self.cqe_cnt, self.cqe_size, self.start_ci, self.stale, self.ignore_overrun
        )];
        for q in &self.qps {
            let c = &q.sq;
            let rq = q.rq.as_ref().map_or("on the SRQ".into(), |r| {
                let n = r.recvs.len();
                format!(
                    "RQ {} x {} from {:#x}, {n} receives",
                    r.wqe_cnt, r.stride, r.head
                )
            });
            v.push(format!(
                "QP {:#x} (uidx {:#x}, type {}): SQ {} from {:#x}, {} sends, sig_all {}; {rq}",
                c.qpn,
                q.uidx,
                c.qp_type,
                c.wqe_cnt,
                c.start_pi,
                q.sends.len(),
                c.sq_sig_all
            ));
        }
        if let Some(q) = &self.srq {
            v.push(format!(
                "SRQ {} x {}, {} receives",
                q.count,
                q.stride,
                q.recvs.len()
            ));
        }
        v.join("\n")
    }
}

/// A send WQE posted: its index (its first WQEBB's), whether it asked for
/// a CQE, its opcode and the bytes the sim counts for it.
#[derive(Clone, Copy, Debug)]
pub struct SentWqe {
    pub idx: u32,
    pub signaled: bool,
    pub opcode: WqeOpcode,
    pub bytes: u32,
}

/// What was posted where: the indices the CQEs name.
#[derive(Clone, Debug, Default)]
pub struct Posted {
    /// Per QP, its send WQEs in order.
    pub sends: Vec<Vec<SentWqe>>,
    /// Per QP, its own RQ's WQE indices in order (empty on the SRQ).
    pub recvs: Vec<Vec<u32>>,
    /// The SRQ's WQE indices in posting order, the order the device
    /// consumes them in.
    pub srq: Vec<u32>,
}

/// The bytes the sim's requester CQE counts for a successful WR
/// (`Exec::Ok`): the payload for SEND, WRITE and READ, 8 for the atomics,
/// 0 for a UD SEND.
pub fn sent_bytes(w: &Wr, qp_type: u32) -> u32 {
    if qp_type == ibv::QPT_UD {
        return 0;
    }
    match w.op {
        Op::CmpSwap { .. } | Op::FetchAdd { .. } => 8,
        _ => w.sges.iter().fold(0u32, |a, s| a.wrapping_add(s.len)),
    }
}

/// A CQE the sim writes, with its QP's user index.
#[derive(Clone, Copy, Debug)]
pub struct Planned {
    pub cqe: Cqe,
    pub uidx: u32,
    /// A receive of the SRQ.
    pub srq: bool,
}

fn cqe(opcode: CqeOpcode, qpn: u32, wqe_counter: u16) -> Cqe {
    Cqe {
        opcode,
        wqe_opcode: WqeOpcode(0),
        qpn,
        wqe_counter,
        byte_cnt: 0,
        imm: 0,
        solicited: false,
        format: 0,
        owner: false,
        syndrome: Syndrome(0),
        vendor_syndrome: 0,
        flags_rqpn: 0,
    }
}

/// An error: mostly what the sim writes, sometimes what it does not; a
/// vendor syndrome now and then (never libmlx5's ODP page fault, 0x93,
/// which it handles inside the poll).
fn error(s: &mut impl Source, sim: &[Syndrome]) -> (Syndrome, u8) {
    let syn = if s.chance(75) {
        sim[s.range(0, sim.len() as u64 - 1) as usize]
    } else {
        Syndrome(OTHER_SYNDROMES[s.range(0, OTHER_SYNDROMES.len() as u64 - 1) as usize])
    };
    (syn, vendor(s))
}

fn vendor(s: &mut impl Source) -> u8 {
    if !s.chance(30) {
        return 0;
    }
    match s.range(1, 255) as u8 {
        0x93 => 0x94,
        v => v,
    }
}

fn with_error(mut c: Cqe, (syn, vendor): (Syndrome, u8)) -> Cqe {
    c.opcode = if c.opcode == CqeOpcode::REQ {
        CqeOpcode::REQ_ERR
    } else {
        CqeOpcode::RESP_ERR
    };
    // As the sim's (`resp_cqe`, exec.rs): nothing but the syndromes.
    (c.syndrome, c.vendor_syndrome) = (syn, vendor);
    (c.byte_cnt, c.imm, c.flags_rqpn, c.solicited) = (0, 0, 0, false);
    c
}

/// A successful receive's CQE on a QP of `qp_type`: RC and UC take
/// SEND, SEND_IMM, WRITE_IMM and SEND_INV (the invalidated rkey in
/// `imm`), UD SEND and SEND_IMM with the sender's QPN and the GRH flag
/// (mostly as the sim writes them: GRH type 1, SL 0).
fn received(s: &mut impl Source, qp_type: u32, qpn: u32, idx: u32) -> Cqe {
    let ud = qp_type == ibv::QPT_UD;
    let op = match s.range(0, if ud { 1 } else { 3 }) {
        0 => CqeOpcode::RESP_SEND,
        1 => CqeOpcode::RESP_SEND_IMM,
        2 => CqeOpcode::RESP_WR_IMM,
        _ => CqeOpcode::RESP_SEND_INV,
    };
    let mut c = cqe(op, qpn, idx as u16);
    c.byte_cnt = match s.range(0, 3) {
        0 => 0,
        _ if ud => 40 + s.range(0, 4096) as u32,
        _ => s.range(0, 1 << 31) as u32,
    };
    if op != CqeOpcode::RESP_SEND {
        c.imm = s.next_u64() as u32;
    }
    c.solicited = s.chance(25);
    if ud {
        let g = if s.chance(70) {
            1
        } else {
            s.range(0, 3) as u32
        };
        let sl = if s.chance(70) {
            0
        } else {
            s.range(0, 15) as u32
        };
        c.flags_rqpn = g << 28 | sl << 24 | s.range(0, 0xff_ffff) as u32;
    }
    c
}

/// The CQEs the sim writes for what `posted` lists, in an order it may
/// write them: each queue in its own order (a QP's SQ strictly: a CQE
/// retires the unsignaled WQEs before it), the queues interleaved, some
/// CQEs swapped with the next, never two of one SQ (receives out of order,
/// as the sim's swap hook and SRQs give them). A queue may stop early (the device
/// has not got there yet). An error CQE puts its QP in error: every WQE
/// of it after that is flushed (WR_FLUSH_ERR, signaled or not; an SRQ's
/// WQEs stay for its other QPs).
pub fn plan(s: &mut impl Source, case: &Case, posted: &Posted) -> Vec<Planned> {
    let err_pct = [0, 3, 15][s.range(0, 2) as usize];
    let n = case.qps.len();
    let (mut err, mut sq_at, mut rq_at) = (vec![false; n], vec![0usize; n], vec![0usize; n]);
    let sq_end: Vec<usize> = posted.sends.iter().map(|v| budget(s, v.len())).collect();
    let rq_end: Vec<usize> = posted.recvs.iter().map(|v| budget(s, v.len())).collect();
    let (mut srq_at, srq_end) = (0, budget(s, posted.srq.len()));
    let mut out = Vec::new();
    let mut choices = Vec::new();
    loop {
        choices.clear();
        for i in 0..n {
            if sq_at[i] < sq_end[i] {
                choices.push((i, 0));
            }
            if rq_at[i] < rq_end[i] {
                choices.push((i, 1));
            }
            if case.qps[i].rq.is_none() && !err[i] && srq_at < srq_end {
                choices.push((i, 2));
            }
        }
        if choices.is_empty() {
            break;
        }
        let (i, what) = choices[s.range(0, choices.len() as u64 - 1) as usize];
        let qp = &case.qps[i];
        let (qpn, qp_type) = (qp.sq.qpn, qp.sq.qp_type);
        let fails = !err[i] && s.chance(err_pct);
        let c = if what == 0 {
            let w = posted.sends[i][sq_at[i]];
            sq_at[i] += 1;
            let mut c = cqe(CqeOpcode::REQ, qpn, w.idx as u16);
            c.wqe_opcode = w.opcode;
            c.byte_cnt = if w.opcode == WqeOpcode::RDMA_READ && s.chance(10) {
                s.next_u64() as u32
            } else {
                w.bytes
            };
            if err[i] {
                Some(with_error(c, (Syndrome::WR_FLUSH_ERR, vendor(s))))
            } else if fails {
                Some(with_error(c, error(s, &SIM_REQ_SYNDROMES)))
            } else {
                w.signaled.then_some(c)
            }
        } else {
            let idx = if what == 1 {
                rq_at[i] += 1;
                posted.recvs[i][rq_at[i] - 1]
            } else {
                srq_at += 1;
                posted.srq[srq_at - 1]
            };
            let c = received(s, qp_type, qpn, idx);
            Some(if err[i] {
                with_error(c, (Syndrome::WR_FLUSH_ERR, vendor(s)))
            } else if fails {
                with_error(c, error(s, &SIM_RESP_SYNDROMES))
            } else {
                c
            })
        };
        err[i] |= fails;
        if let Some(cqe) = c {
            out.push(Planned {
                cqe,
                uidx: qp.uidx,
                srq: what == 2,
            });
        }
    }
    // Out of order: any two neighbours but two of one SQ.
    let req = |c: &Cqe| matches!(c.opcode, CqeOpcode::REQ | CqeOpcode::REQ_ERR);
    let mut i = 0;
    while i + 1 < out.len() {
        let (a, b) = (&out[i].cqe, &out[i + 1].cqe);
        if !(req(a) && req(b) && a.qpn == b.qpn) && s.chance(8) {
            out.swap(i, i + 1);
            i += 1;
        }
        i += 1;
    }
    out
}

/// How far a queue gets: mostly to its end.
fn budget(s: &mut impl Source, n: usize) -> usize {
    if s.chance(25) {
        s.range(0, n as u64) as usize
    } else {
        n
    }
}

#[cfg(provider_oracle)]
mod oracle;
#[cfg(provider_oracle)]
pub use oracle::*;
#[cfg(provider_oracle)]
pub mod sessions;
