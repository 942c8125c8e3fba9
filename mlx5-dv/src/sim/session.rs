//! The sim's model of CQE compression (basic layout; the format is
//! [`crate::mini_cqe`]'s). The PRM is not public: this is a model derived
//! from the decoders (DPDK `drivers/net/mlx5/mlx5_rx.c`, UCX
//! `src/uct/ib/mlx5/ib_mlx5.c`), not the NIC's documented behaviour.
//!
//! On a CQ that compresses ([`super::Cq::set_compression`]):
//! - A CQE **qualifies** when it is successful (REQ or RESP_WR_IMM,
//!   RESP_SEND, RESP_SEND_IMM, RESP_SEND_INV) and of format 0 (no inline
//!   scatter). Error CQEs and every other CQE are written whole, as ever.
//! - Qualifying CQEs are **held** while each shares with the first every
//!   field a mini-CQE does not carry: the whole 64 bytes but `byte_cnt`,
//!   `wqe_counter` and the owner bit, and for requester CQEs the WQE opcode
//!   (byte 56) too: so QPN, CQE opcode, immediate / invalidated rkey,
//!   `flags_rqpn`, `srqn_uidx` (the QP's user index), the solicited bit,
//!   checksum bits, timestamp. A responder CQE's counter must also be the
//!   previous one's plus 1 (its mini carries none; on a NIC receives of an
//!   RQ complete in index order, and this rule keeps the sim right where
//!   they would not).
//! - The run is **written** when a CQE breaks it (one that does not share
//!   those fields, or does not qualify: written after it), when it reaches
//!   [`MAX_SESSION`] completions, and when the device's pass over the QPs
//!   ends (`write_held`, from `exec::run_all`, before the lock is let go
//!   and before the device thread goes idle): so no CQE is held across a
//!   pass, and a poller never waits for one.
//! - A run of 1 is written whole. A run of `N >= 2` is written as a
//!   session (arrays first, then the title, its `op_own` last with release
//!   order) when the consumer-index record shows room for its `N`
//!   slots; otherwise whole, CQE by CQE (the overrun rules as ever). On a
//!   CQ that ignores overrun the record is written only now and then, so
//!   the room it shows is a lower bound: compression then happens less,
//!   never into slots not yet consumed.
//! - One completion event for a session, raised when it is written, if
//!   the CQ is armed (a solicited-only arm: if the session's CQEs are
//!   solicited).

use super::cq::{cq_room, raise_if_armed, write_cqe};
use super::{CqEntry, State};
use crate::cqe::{owner_bit, Cqe};
use crate::mini_cqe::{self, MiniCqe, MINIS_PER_SLOT};
use crate::prm::CQE64;

/// The most completions the sim puts in one session (a NIC reports its
/// own in `cqe_comp_caps.max_num`).
pub const MAX_SESSION: usize = 64;

/// A CQ's held run: the whole CQEs (owner bit clear, user index in
/// `srqn_uidx`), written as a session or one by one.
#[derive(Default)]
pub(super) struct Held {
    cqes: Vec<[u8; CQE64]>,
    /// Requester CQEs (REQ): the minis carry counter and WQE opcode.
    req: bool,
    /// The CQ is in `State::held_cqs`.
    listed: bool,
}

impl Held {
    /// Whether the CQ must be put in `State::held_cqs` now (once per run).
    pub(super) fn take_listing(&mut self) -> bool {
        let list = !self.listed && !self.cqes.is_empty();
        self.listed |= list;
        list
    }
}

/// `b` without what a mini-CQE carries: the fields a session shares.
fn shared(b: &[u8; CQE64], req: bool) -> [u8; CQE64] {
    let mut k = *b;
    k[44..48].fill(0);
    k[60..62].fill(0);
    k[63] &= !1;
    if req {
        k[56] = 0;
    }
    k
}

fn counter(b: &[u8; CQE64]) -> u16 {
    u16::from_be_bytes([b[60], b[61]])
}

/// On a CQ that compresses: holds CQE `c` (user index `uidx`) in the run
/// being gathered, writing the run held first when `c` breaks it, and
/// returns true; or, when `c` does not qualify, writes the run held and
/// returns false (the caller writes `c` whole).
pub(super) fn hold(cq: &mut CqEntry, c: &Cqe, uidx: u32) -> bool {
    let Some(req) = mini_cqe::requester(c.opcode.0).filter(|_| c.format == 0) else {
        write_run(cq);
        return false;
    };
    let mut b = c.encode(0);
    b[32..36].copy_from_slice(&(uidx & 0xff_ffff).to_be_bytes());
    if let Some(first) = cq.held.cqes.first() {
        let last = cq.held.cqes.last().expect("not empty");
        let joins = req == cq.held.req
            && shared(first, req) == shared(&b, req)
            && (req || counter(&b) == counter(last).wrapping_add(1));
        if !joins {
            write_run(cq);
        }
    }
    if cq.held.cqes.is_empty() {
        cq.held.req = req;
    }
    cq.held.cqes.push(b);
    if cq.held.cqes.len() >= MAX_SESSION {
        write_run(cq);
    }
    true
}

/// Writes every run held (the pass ends): each CQ listed in
/// `State::held_cqs`. An overrun it causes raises `AsyncEvent::CqError`.
pub(super) fn write_held(st: &mut State) {
    let mut cqns = std::mem::take(&mut st.held_cqs);
    for &cqn in &cqns {
        let Some(cq) = st.cqs.get_mut(&cqn) else {
            continue;
        };
        let before = cq.error_events;
        write_run(cq);
        cq.held.listed = false;
        if cq.error_events != before {
            super::srq::raise(st, super::AsyncEvent::CqError { cqn });
        }
    }
    cqns.clear();
    st.held_cqs = cqns;
}

/// Writes CQ `cq`'s held run, if any, before a CQE that is never held
/// (one that carries scattered data, `cq::push_cqe_with_data`).
pub(super) fn write_pending(cq: &mut CqEntry) {
    write_run(cq);
}

/// Writes CQ `cq`'s held run, if any: a session, or whole CQEs.
fn write_run(cq: &mut CqEntry) {
    let n = cq.held.cqes.len();
    if n == 0 {
        return;
    }
    let mut cqes = std::mem::take(&mut cq.held.cqes);
    let fits = n >= 2 && cq_room(cq) as usize >= n && !cq.overrun;
    if fits {
        write_session(cq, &cqes);
    } else {
        for b in cqes.iter_mut() {
            let solicited = b[63] & 2 != 0;
            if write_cqe(cq, b) {
                raise_if_armed(cq, solicited);
            }
        }
    }
    cqes.clear();
    cq.held.cqes = cqes;
}

/// Writes `cqes` (2..=MAX_SESSION, sharing the title's fields) as a
/// session at the producer index: the arrays at `t+1` and `t+8j`, then the
/// title at `t` with its `op_own` published last; the producer index moves
/// `N` slots; 64 bytes counted per title and per array.
fn write_session(cq: &mut CqEntry, cqes: &[[u8; CQE64]]) {
    let n = cqes.len() as u32;
    let t = cq.pi;
    let mask = cq.cqe_cnt - 1;
    let req = cq.held.req;
    let mut minis = [MiniCqe::default(); MINIS_PER_SLOT as usize];
    for (j, chunk) in cqes.chunks(MINIS_PER_SLOT as usize).enumerate() {
        for (m, b) in minis.iter_mut().zip(chunk) {
            let byte_cnt = u32::from_be_bytes([b[44], b[45], b[46], b[47]]);
            *m = if req {
                MiniCqe::requester(counter(b), b[56], byte_cnt)
            } else {
                MiniCqe::responder(0, byte_cnt)
            };
        }
        let slot = t.wrapping_add(mini_cqe::array_offset(j as u32)) & mask;
        cq.buf.write(
            slot as usize * CQE64,
            &mini_cqe::array(&minis[..chunk.len()]),
        );
        cq.cqe_bytes += CQE64 as u64;
    }
    let mut title = mini_cqe::title(&cqes[0], n);
    title[63] |= owner_bit(t, cq.cqe_cnt);
    let off = (t & mask) as usize * CQE64;
    cq.buf.write(off, &title[..63]);
    cq.buf.publish_op_own(off + 63, title[63]);
    cq.cqe_bytes += CQE64 as u64;
    cq.pi = t.wrapping_add(mini_cqe::session_slots(n));
    raise_if_armed(cq, title[63] & 2 != 0);
}
