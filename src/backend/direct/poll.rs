//! The direct data path's poll: CQEs of a QP's own CQ ([`DirectQp::poll`])
//! or of a CQ several QPs share ([`DirectCq::take_shared`](super::DirectCq::take_shared),
//! in `poll_shared.rs`) retire their
//! WRs in the SQ or RQ and become [`Completion`]s.
//!
//! Cost, per `Qp::poll` call: an empty CQ is one load of the `op_own` byte
//! at the consumer index and one compare, after the one test that sends a
//! QP on an SRQ to its own poll (`poll_srq.rs`, which publishes nothing
//! for an SRQ's receive: the QP's own counts do not move). Each CQE:
//! its ownership test, one from-device barrier, the fields the completion
//! needs (decoded in place), the WR found by `wqe_counter`. Once per call
//! that took CQEs: CQ credits back (if the QP counts them), the retired
//! counts published for the PD's deferred deregistration ([`WrProgress`]), and the CQ's
//! consumer-index record only if the CQ detects overrun (ours are created
//! to ignore it: `DirectCq::create_sim` / `create_mlx5`). No allocation,
//! lock or syscall.
//!
//! [`WrProgress`]: crate::ib::progress::WrProgress

use super::odp::odp_fault;
use super::DirectQp;
use crate::ib::completion::{Completion, SrcQp, WcOpcode, WcStatus};
use crate::ib::error::{Error, Result};
use mlx5_dv::cqe::{Cqe, CqeRef};
use mlx5_dv::driver::{ReceiveQueue, Retired, Retirer};
use mlx5_dv::prm::{CqeOpcode, WqeOpcode};

/// The [`WcOpcode`] of a requester completion, by the WQE opcode its CQE
/// names (byte 56): one load instead of a chain of compares. WQE opcodes
/// we never post read as SEND.
static REQ_WC_OPCODE: [u8; 256] = {
    let mut t = [WcOpcode::SEND.0 as u8; 256];
    t[WqeOpcode::RDMA_WRITE.0 as usize] = WcOpcode::RDMA_WRITE.0 as u8;
    t[WqeOpcode::RDMA_WRITE_IMM.0 as usize] = WcOpcode::RDMA_WRITE.0 as u8;
    t[WqeOpcode::RDMA_READ.0 as usize] = WcOpcode::RDMA_READ.0 as u8;
    t[WqeOpcode::ATOMIC_CS.0 as usize] = WcOpcode::COMP_SWAP.0 as u8;
    t[WqeOpcode::ATOMIC_FA.0 as usize] = WcOpcode::FETCH_ADD.0 as u8;
    // (`ibv_wc_opcode` has no masked atomics: they complete as the plain
    // ones, `byte_len` their size.)
    t[WqeOpcode::ATOMIC_MASKED_CS.0 as usize] = WcOpcode::COMP_SWAP.0 as u8;
    t[WqeOpcode::ATOMIC_MASKED_FA.0 as usize] = WcOpcode::FETCH_ADD.0 as u8;
    // A UMR is a window's bind (type 1 or 2, zero-length too) or a
    // `LOCAL_INV`: the CQE does not say which (libmlx5 keeps the WR's
    // opcode per WQE, `wr_data[idx]`, `handle_good_req`). A bind here; a
    // `LOCAL_INV` is told by the QP's per-WQE record on the general path,
    // which its CQE takes (`mw.rs`, `DirectQp::umr_completion`).
    t[mlx5_dv::wqe::UMR.0 as usize] = WcOpcode::BIND_MW.0 as u8;
    t
};

/// An `op_own` below this is a successful requester CQE (opcode REQ, 0)
/// in the plain format (bits 3:2 clear: neither compressed nor carrying
/// scattered data), whatever its `se` and owner bits: the send poll's
/// common CQE, told in one compare.
pub(super) const COMMON_SEND_LIMIT: u8 = 0x04;

/// The format bits of `op_own` (3:2): 0 a plain CQE, 1 or 2 one carrying
/// scattered data (`MLX5_INLINE_SCATTER_32` / `_64`), 3 a compressed
/// session's title. The fast paths take format 0 alone.
const FORMAT: u8 = 0x0c;

/// The receive a successful responder CQE of the plain format retires on
/// a QP's own RQ ([`ReceiveQueue::complete_in_order`]; an SRQ's queue
/// declines), and its wr_id; `None`, having retired nothing, for any
/// other CQE (an error, a compressed or scattering one, a stale one: the
/// general path's), or for a receive out of order.
#[inline(always)]
fn received_own(rq: &mut ReceiveQueue, cqe: CqeRef<'_>, op_own: u8) -> Option<u64> {
    if !plain_receive(op_own) {
        return None;
    }
    rq.complete_in_order(cqe.wqe_counter())
}

/// Whether `op_own` is a successful responder CQE's in the plain format:
/// opcode RESP_WR_IMM (1) to RESP_SEND_INV (4), format bits (3:2) clear,
/// in one compare: `op_own - 0x10` has the opcode - 1 in bits 7:4 (0 to
/// 3: bits 7:6 clear; an `op_own` below 0x10 wraps to 0xf there) and the
/// format bits as they were. (Excluding RESP_SEND_INV takes a second test
/// or a table's base register: one instruction more on every poll,
/// `scripts/insn-count`; [`write_recv_fields`] writes it instead.)
#[inline(always)]
pub(super) fn plain_receive(op_own: u8) -> bool {
    const _: () = assert!(CqeOpcode::RESP_WR_IMM.0 == 1 && CqeOpcode::RESP_SEND_INV.0 == 4);
    op_own.wrapping_sub(0x10) & 0xcc == 0
}

/// The completion of a receive [`received_own`] retired (`wr_id`) of QP
/// `qpn`, as [`completion`] makes it, from the fields a receive needs
/// (`op_own` one [`plain_receive`] took) and with no branch on the
/// opcode but the immediate's: RESP_WR_IMM (1) is RECV_RDMA_WITH_IMM
/// (129), the others RECV (128); the odd opcodes (RESP_WR_IMM,
/// RESP_SEND_IMM) carry an immediate. Written into `c` a field at a
/// time, each as soon as it is read, so that few values are live at once
/// (the inlined poll keeps its registers for its caller's).
#[inline(always)]
fn write_recv_completion(c: &mut Completion, wr_id: u64, cqe: CqeRef<'_>, op_own: u8, qpn: u32) {
    c.wr_id = wr_id;
    write_recv_fields(c, cqe, op_own, qpn);
}

/// [`write_recv_completion`] but for the wr_id: for `received_on_srq`
/// (`poll_srq.rs`), which learns it after.
#[inline(always)]
pub(super) fn write_recv_fields(c: &mut Completion, cqe: CqeRef<'_>, op_own: u8, qpn: u32) {
    c.status = WcStatus::SUCCESS;
    c.vendor_err = 0;
    // (A CQ with timestamps takes no fast path: `DirectCq::timestamps`.)
    c.timestamp = 0;
    // (None first: its store needs no register; with the three before
    // it, adjacent zeros.)
    c.imm = None;
    c.byte_len = cqe.byte_cnt();
    c.qp_num = qpn;
    // Of the opcodes 1 to 4 (`plain_receive`), RESP_WR_IMM alone has an
    // `op_own` below 0x20 (RESP_SEND_INV is a RECV too).
    c.opcode = WcOpcode(WcOpcode::RECV.0 | (op_own < 0x20) as u32);
    // QPN in bits 23:0; the GRH flag (bit 31) set when bits 29:28 are not
    // both clear: with bits 31:30 and 27:24 cleared, adding 7 to bits
    // 31:28 carries into bit 31 exactly then.
    let f = cqe.flags_rqpn();
    c.src_qp = SrcQp((f & 0x30ff_ffff).wrapping_add(0x7000_0000) & 0x80ff_ffff);
    // The odd opcodes (RESP_WR_IMM 1, RESP_SEND_IMM 3: bit 4) carry an
    // immediate; RESP_SEND_INV (4: bit 6, alone of 1 to 4) the rkey it
    // invalidated, in the same field (`imm_inval_pkey`), and WITH_INV
    // (`SrcQp` bit 30: `op_own` bit 6 moved up 24). A RESP_SEND's (2)
    // common receive pays the one test.
    if op_own & 0x50 != 0 {
        c.imm = Some(cqe.imm());
        c.src_qp.0 |= ((op_own & 0x40) as u32) << 24;
    }
}

/// The completion of a successful requester CQE (opcode REQ) of QP `qpn`
/// whose WR is `wr_id`.
#[inline(always)]
fn sent(wr_id: u64, cqe: CqeRef<'_>, qpn: u32) -> Completion {
    Completion {
        wr_id,
        status: WcStatus::SUCCESS,
        opcode: WcOpcode(REQ_WC_OPCODE[cqe.wqe_opcode().0 as usize] as u32),
        imm: None,
        byte_len: cqe.byte_cnt(),
        qp_num: qpn,
        vendor_err: 0,
        src_qp: SrcQp(0),
        // (A CQ with timestamps takes no fast path: `DirectCq::timestamps`.)
        timestamp: 0,
    }
}

/// [`Error::StaleCqe`] for a CQE of QP `qpn` whose `wqe_counter` names no
/// outstanding WR (inlined: see `completion`).
#[inline(always)]
fn stale(qpn: u32, counter: u16) -> Error {
    Error::StaleCqe { qpn, counter }
}

/// A CQE whose `wqe_counter` names no outstanding WQE ([`retire`]'s
/// refusal, made [`Error::StaleCqe`] by [`Stale::error`] where it is
/// reported): no bytes, so that the polls' loops move no whole [`Error`]
/// along with each completion.
#[derive(Clone, Copy, Debug)]
pub(super) struct Stale;

impl Stale {
    /// [`Error::StaleCqe`] for `cqe`.
    #[cold]
    pub(super) fn error(cqe: &Cqe) -> Error {
        stale(cqe.qpn, cqe.wqe_counter)
    }
}

/// Retires what one CQE of a QP completes, of any opcode: the receive it
/// names, or the send WQE it names with every unsignaled one before it.
/// Returns the completion to report (`None`: the CQE was asked for by
/// auto-signal only).
///
/// Errors: [`Stale`] when its `wqe_counter` names no outstanding WQE.
#[inline(always)]
pub(super) fn retire(
    sq: &mut Retirer<'_>,
    rq: &mut ReceiveQueue,
    cqe: &Cqe,
) -> std::result::Result<Option<Completion>, Stale> {
    let requester = matches!(cqe.opcode, CqeOpcode::REQ | CqeOpcode::REQ_ERR);
    let retired = if requester {
        sq.complete(cqe.wqe_counter)
    } else {
        rq.complete(cqe.wqe_counter).map(|wr_id| Retired {
            wr_id,
            hidden: false,
        })
    };
    match retired {
        Some(r) => Ok(completion(cqe, r)),
        None => Err(Stale),
    }
}

/// The completion to report for a CQE whose WR `retire` found (`None`: the
/// CQE was asked for by auto-signal only). Inlined, but not on the poll
/// loop's common path (a send's CQE without error): a call there would
/// make the loop keep its state out of the registers the call clobbers.
#[inline(always)]
fn completion(cqe: &Cqe, Retired { wr_id, hidden }: Retired) -> Option<Completion> {
    if hidden && !cqe.opcode.is_error() {
        // Asked for by auto-signal only: it retired SQ space; nobody waits for it.
        return None;
    }
    let opcode = match cqe.opcode {
        CqeOpcode::RESP_WR_IMM => WcOpcode::RECV_RDMA_WITH_IMM,
        // A SEND_WITH_INV's receive is a receive (libmlx5 `handle_responder`:
        // IBV_WC_RECV with IBV_WC_WITH_INV).
        CqeOpcode::RESP_SEND
        | CqeOpcode::RESP_SEND_IMM
        | CqeOpcode::RESP_SEND_INV
        | CqeOpcode::RESP_ERR => WcOpcode::RECV,
        _ => WcOpcode(REQ_WC_OPCODE[cqe.wqe_opcode.0 as usize] as u32),
    };
    // (RESP_SEND_INV: the rkey invalidated, host order, where the
    // immediate goes: `ibv_wc.invalidated_rkey`, `IBV_WC_WITH_INV`.)
    let with_imm = matches!(
        cqe.opcode,
        CqeOpcode::RESP_WR_IMM | CqeOpcode::RESP_SEND_IMM | CqeOpcode::RESP_SEND_INV
    );
    let with_inv = if cqe.opcode == CqeOpcode::RESP_SEND_INV {
        SrcQp::WITH_INV
    } else {
        0
    };
    Some(Completion {
        wr_id,
        status: WcStatus(cqe.wc_status()),
        opcode,
        imm: with_imm.then_some(cqe.imm),
        byte_len: cqe.byte_cnt,
        qp_num: cqe.qpn,
        vendor_err: cqe.vendor_syndrome as u32,
        src_qp: SrcQp(SrcQp::new(cqe.src_qp(), cqe.grh()).0 | with_inv),
        // (Set by the polls of a CQ with timestamps: `stamp`.)
        timestamp: 0,
    })
}

/// On a CQ with timestamps, `c`'s from its CQE `raw` (bytes 48..56), when
/// it completed without error (an error CQE has its syndromes there).
#[inline(always)]
pub(super) fn stamp(c: &mut Completion, raw: CqeRef<'_>) {
    if c.status.is_ok() {
        c.timestamp = raw.timestamp();
    }
}

/// Test hook (feature `test-hooks`; `mlx5-dv/provider-oracle`, issue 27: the same
/// CQEs polled by libmlx5's `mlx5_poll_cq_v1`): the completion the direct
/// poll makes of `cqe`, taken from a CQ of QP `qpn` whose queues are `sq`
/// and `rq`, as its loops make it. On a QP's own CQ (`own_cq`), a REQ CQE
/// that retires a WR goes through `sent` (`poll_cqes`, `poll_more`); every
/// other CQE, and every CQE of a shared CQ (`take_shared`), is decoded and
/// goes through `retire`. `Ok(None)`: a CQE asked for by auto-signal only.
#[cfg(feature = "test-hooks")]
pub fn completion_of(
    sq: &mut Retirer<'_>,
    rq: &mut ReceiveQueue,
    cqe: CqeRef<'_>,
    qpn: u32,
    own_cq: bool,
) -> Result<Option<Completion>> {
    if own_cq && cqe.opcode() == CqeOpcode::REQ {
        if let Some(Retired { wr_id, hidden }) = sq.complete(cqe.wqe_counter()) {
            return Ok((!hidden).then(|| sent(wr_id, cqe, qpn)));
        }
    }
    let cqe = cqe.decode();
    retire(sq, rq, &cqe).map_err(|_| Stale::error(&cqe))
}

impl DirectQp {
    /// Polls up to `out.len()` completions of the QP's own CQ. An empty CQ
    /// costs, once the CQ is found, one load of the `op_own` byte at the
    /// consumer index and one compare (and a QP on an SRQ, found by one
    /// test before that, polls in [`Self::poll_on_srq`], `poll_srq.rs`).
    ///
    /// Errors: [`Error::SharedCq`] when it completes into a shared CQ;
    /// [`Error::StaleCqe`] (the completions taken before it in this call
    /// are dropped with their WRs retired, as before).
    #[inline(always)]
    pub(crate) fn poll(&mut self, out: &mut [Completion]) -> Result<usize> {
        if self.rq.is_srq() {
            // (Before the CQ's test: `poll_on_srq` makes its own.)
            return self.poll_on_srq(out);
        }
        match &self.cq {
            Some(c) if c.cq.slot_size() == 64 => self.poll_cqes::<64>(out),
            _ => self.poll_other(out),
        }
    }

    /// [`Self::poll`] of a CQ of 128-byte slots, or of a QP on a shared
    /// CQ ([`Error::SharedCq`]), out of line (one compare tells a CQ of
    /// the QP's own of 64-byte slots from both).
    #[inline(never)]
    fn poll_other(&mut self, out: &mut [Completion]) -> Result<usize> {
        match &self.cq {
            Some(_) => self.poll_cqes::<128>(out),
            None => self.shared_cq(),
        }
    }

    /// [`Error::SharedCq`]: a poll of a QP that completes into a shared CQ.
    #[cold]
    #[inline(never)]
    pub(super) fn shared_cq(&self) -> Result<usize> {
        Err(Error::SharedCq { qpn: self.qpn })
    }

    /// [`Self::poll`] on a CQ of `SLOT`-byte slots, inlined into the caller
    /// for its first CQE, whose ownership test is the empty poll's. A poll
    /// with room for more than one completion that finds a second CQE
    /// behind the first puts the first back and goes on out of line
    /// ([`Self::poll_more`]): asked first, so that nothing of it is live
    /// while the one CQE is read. One common CQE, a send's completed
    /// without error or a receive's of the QP's own RQ in order
    /// ([`received_own`]), is taken, and what it retired published, in
    /// straight-line code, which reads the CQ's and queues' state where it
    /// lies and calls nothing but in tail position (so it needs few
    /// registers). Any other first CQE is put back, and the poll goes on
    /// in [`Self::poll_general`] (an error, a compressed or scattering
    /// CQE, a stale `wqe_counter`, a receive out of order). Not for a QP
    /// on an SRQ ([`Self::poll_on_srq`]'s: its receives would go to the
    /// general path here).
    #[inline(always)]
    pub(super) fn poll_cqes<const SLOT: usize>(&mut self, out: &mut [Completion]) -> Result<usize> {
        let Some(own) = &mut self.cq else {
            return self.shared_cq();
        };
        let Some(taken) = own.cq.take::<SLOT>() else {
            return Ok(0);
        };
        if own.general {
            // Each CQE's timestamp is copied on the general path (`stamp`);
            // the fast paths store 0. A `LOCAL_INV`'s CQE is told there
            // (`umr_completion`). (Tested after the empty CQ's test.)
            taken.put_back();
            return self.poll_general::<SLOT>(out);
        }
        // (Tested after the empty CQ's test: an empty poll does not pay it.)
        match out.len() {
            0 => {
                taken.put_back();
                return Ok(0);
            }
            1 => {}
            _ if taken.next_owned() => {
                taken.put_back();
                if self.is_split() {
                    // Its copy of the queues retires nothing: the general path's.
                    return self.poll_general::<SLOT>(out);
                }
                return self.poll_more::<SLOT>(out);
            }
            _ => {}
        }
        let cqe = taken.cqe();
        let op_own = cqe.op_own();
        if op_own >= COMMON_SEND_LIMIT {
            let Some(wr_id) = received_own(&mut self.rq, cqe, op_own) else {
                taken.put_back();
                return self.poll_general::<SLOT>(out);
            };
            write_recv_completion(&mut out[0], wr_id, cqe, op_own, self.qpn);
            if self.count_credits || !own.cq.quiet_polls() {
                return self.polled_one(1);
            }
            self.progress
                .recvs_retired(self.recvd.wrapping_sub(self.rq.outstanding() as u64));
            return Ok(1);
        }
        // (A compressed session's title failed the common CQEs' tests
        // above and went to the general path, which expands it.)
        let Some(Retired { wr_id, hidden }) = self.sq.complete(cqe.wqe_counter()) else {
            // Stale (nothing retired): `retire`'s.
            taken.put_back();
            return self.poll_general::<SLOT>(out);
        };
        let n = if hidden {
            // Asked for by auto-signal only.
            0
        } else {
            out[0] = sent(wr_id, cqe, self.qpn);
            1
        };
        if self.count_credits || !own.cq.quiet_polls() {
            return self.polled_one(n);
        }
        // Only a send retired.
        self.progress.sends_retired(self.sq.retired_count());
        Ok(n)
    }

    /// The end of a poll that took one CQE, a send's ([`Self::poll_cqes`]),
    /// when CQ credits go back or [`CompletionQueue::polled`] has something
    /// to do: both, the retired sends published, and `Ok(n)`.
    ///
    /// [`CompletionQueue::polled`]: mlx5_dv::driver::CompletionQueue::polled
    #[cold]
    #[inline(never)]
    pub(super) fn polled_one(&mut self, n: usize) -> Result<usize> {
        self.publish_polled();
        if let Some(c) = &mut self.cq {
            let from = c.cq.ci().wrapping_sub(1);
            c.cq.polled(from);
        }
        Ok(n)
    }

    /// A poll whose first CQE (at the consumer index) is not a common one:
    /// [`Self::poll_rest`].
    #[cold]
    #[inline(never)]
    pub(super) fn poll_general<const SLOT: usize>(
        &mut self,
        out: &mut [Completion],
    ) -> Result<usize> {
        let from = match &self.cq {
            Some(c) => c.cq.ci(),
            None => return self.shared_cq(),
        };
        if self.is_split() {
            // (Its copy of the queues has nothing outstanding, so the
            // inlined poll and `poll_more` took no CQE and came here.)
            return self.retire_split(|q| q.poll_rest::<SLOT>(out, 0, None, from));
        }
        if self
            .cq
            .as_mut()
            .is_some_and(|c| !c.general && c.cq.expand_title())
        {
            // A compressed session, now ordinary CQEs: the fast loop's
            // (unless every CQE is the general path's, whose cursor
            // expands a title itself).
            return self.poll_more::<SLOT>(out);
        }
        self.poll_rest::<SLOT>(out, 0, None, from)
    }

    /// A poll of more than one CQE (from the consumer index, none taken:
    /// [`Self::poll_cqes`] saw two): the common CQEs in a loop that keeps
    /// the CQ and SQ state it uses in registers (copied into cursors,
    /// [`CqCursor`] and [`Retirer`], and written back after it) and calls
    /// nothing ([`Self::poll_loop`]; from the first receive's CQE on, the
    /// same loop taking receives too); at any other CQE (taken, decoded),
    /// the poll goes on in [`Self::poll_rest`]. Not for a split QP's copy,
    /// whose queues retire nothing (its callers send that to
    /// [`Self::poll_general`]).
    ///
    /// [`CqCursor`]: mlx5_dv::driver::CqCursor
    #[inline(never)]
    fn poll_more<const SLOT: usize>(&mut self, out: &mut [Completion]) -> Result<usize> {
        self.poll_loop::<SLOT, false>(out, 0, None)
    }

    /// [`Self::poll_more`]'s loop, after `n` completions of a poll that
    /// started at consumer index `from` (`None`: the one now). Its common
    /// CQEs: a send's completed without error, and with `RECV` a
    /// receive's of the QP's own RQ in order ([`received_own`]). Without
    /// `RECV` (the loop a poll of sends alone keeps lean), a CQE that may
    /// be such a receive ([`plain_receive`]) is put back and the poll
    /// goes on with `RECV` ([`Self::poll_recvs`]).
    #[inline(always)]
    fn poll_loop<const SLOT: usize, const RECV: bool>(
        &mut self,
        out: &mut [Completion],
        mut n: usize,
        from: Option<u32>,
    ) -> Result<usize> {
        /// Where the loop stopped, if not at an empty CQ or a full `out`.
        enum Stop {
            /// At a CQE for `poll_rest`, taken and decoded.
            Decoded(Cqe),
            /// At a CQE put back, in another format (scatter-to-CQE data,
            /// copied out by `poll_rest` from the slot; a compressed
            /// session's title, expanded here or there).
            PutBack,
            /// (Without `RECV`) at a receive's, put back.
            Recv,
        }
        let Some(own) = &mut self.cq else {
            return self.shared_cq();
        };
        let from = from.unwrap_or_else(|| own.cq.ci());
        let qpn = self.qpn;
        loop {
            let mut cqes = own.cq.cursor::<SLOT>();
            let mut sq = self.sq.retirer();
            let rq = &mut self.rq;
            let mut stop = None;
            while n < out.len() {
                let Some(cqe) = cqes.next_plain() else {
                    break;
                };
                let op_own = cqe.op_own();
                if op_own < COMMON_SEND_LIMIT {
                    // The common CQE: a send completed without error.
                    match sq.complete(cqe.wqe_counter()) {
                        Some(Retired {
                            wr_id,
                            hidden: false,
                        }) => {
                            out[n] = sent(wr_id, cqe, qpn);
                            n += 1;
                            continue;
                        }
                        // Asked for by auto-signal only.
                        Some(_) => continue,
                        // Stale: `retire` says so.
                        None => {}
                    }
                } else if RECV {
                    // (An SRQ's queue declines: it has no WQEs of its own.)
                    if let Some(wr_id) = received_own(rq, cqe, op_own) {
                        write_recv_completion(&mut out[n], wr_id, cqe, op_own, qpn);
                        n += 1;
                        continue;
                    }
                }
                stop = Some(if op_own & FORMAT != 0 {
                    cqes.put_back();
                    Stop::PutBack
                } else if !RECV && plain_receive(op_own) {
                    cqes.put_back();
                    Stop::Recv
                } else {
                    Stop::Decoded(cqe.decode())
                });
                break;
            }
            drop((sq, cqes));
            match stop {
                None => break,
                Some(Stop::Recv) => return self.poll_recvs::<SLOT>(out, n, from),
                // A compressed session, now ordinary CQEs: this loop's.
                Some(Stop::PutBack) if own.cq.expand_title() => {}
                Some(Stop::PutBack) => return self.poll_rest::<SLOT>(out, n, None, from),
                Some(Stop::Decoded(c)) => return self.poll_rest::<SLOT>(out, n, Some(c), from),
            }
        }
        own.cq.polled(from);
        if RECV {
            self.publish_polled();
            return Ok(n);
        }
        // Only sends retired.
        let sends = self.sq.retired_count();
        if self.count_credits {
            let (s0, _) = self.progress.retired_published();
            self.credits.give(sends.wrapping_sub(s0));
        }
        self.progress.sends_retired(sends);
        Ok(n)
    }

    /// [`Self::poll_loop`] with receives, out of line: a poll of more than
    /// one CQE that met a receive's.
    #[inline(never)]
    pub(super) fn poll_recvs<const SLOT: usize>(
        &mut self,
        out: &mut [Completion],
        n: usize,
        from: u32,
    ) -> Result<usize> {
        self.poll_loop::<SLOT, true>(out, n, Some(from))
    }

    /// The rest of a poll that started at consumer index `from` and took
    /// `n` completions, then `first` (a CQE of any kind, taken, not
    /// retired), if any: every CQE by [`retire`], until `out` holds
    /// `out.len()` completions or the CQ is empty.
    #[cold]
    #[inline(never)]
    pub(super) fn poll_rest<const SLOT: usize>(
        &mut self,
        out: &mut [Completion],
        mut n: usize,
        mut first: Option<Cqe>,
        from: u32,
    ) -> Result<usize> {
        let Some(own) = &mut self.cq else {
            return self.shared_cq();
        };
        // (`first` comes from the fast loops only, which a CQ with
        // timestamps never enters: each of its CQEs is read here.)
        let stamps = own.timestamps;
        debug_assert!(!(stamps && first.is_some()));
        let mut cqes = own.cq.cursor::<SLOT>();
        let posted = self.sq.posted_count();
        let mut sq = self.sq.retirer();
        let rq = &mut self.rq;
        let umr_ops = &self.umr_ops;
        // (With window binds outstanding each CQE settles those it
        // retired: `mw.rs`, `PendingBinds`.)
        let binds = &mut self.binds;
        let failed_before = self.send_failed;
        // The one error a QP's own CQ can give (`retire`'s).
        let mut stale_at = None;
        // A requester CQE in error: the device moved the QP to ERR.
        let mut failed = false;
        loop {
            let (cqe, raw) = match first.take() {
                Some(c) => (c, None),
                None if n < out.len() => match cqes.next() {
                    Some(c) => (super::scatter::decode(c, &sq, rq), Some(c)),
                    None => break,
                },
                None => break,
            };
            if odp_fault(rq, &cqe) {
                continue;
            }
            let r = retire(&mut sq, rq, &cqe);
            if !binds.is_empty() {
                let retired = posted.wrapping_sub(sq.outstanding());
                let error = cqe.opcode == CqeOpcode::REQ_ERR;
                binds.settle(retired, error, failed_before || failed);
            }
            failed |= cqe.opcode == CqeOpcode::REQ_ERR;
            match r {
                Ok(Some(mut c)) => {
                    super::mw::umr_completion(umr_ops, &mut c, cqe.wqe_counter);
                    if let (true, Some(raw)) = (stamps, raw) {
                        stamp(&mut c, raw);
                    }
                    out[n] = c;
                    n += 1;
                }
                Ok(None) => {}
                Err(_) => {
                    stale_at = Some((cqe.qpn, cqe.wqe_counter));
                    break;
                }
            }
        }
        drop((sq, cqes));
        own.cq.polled(from);
        if failed {
            self.note_send_failed();
        }
        if self.umrs_pending() {
            self.umrs_retired();
        }
        self.publish_polled();
        match stale_at {
            None => Ok(n),
            Some((qpn, counter)) => Err(stale(qpn, counter)),
        }
    }

    /// After a poll of the QP's own CQ: the CQ credits of what it retired
    /// go back (if the QP counts them: the difference from the retired
    /// counts published before, so nothing is counted during the loop),
    /// and the new counts are published for the PD's deferred deregistration.
    #[inline(always)]
    fn publish_polled(&self) {
        let recvs = self.counts().recvs_retired;
        let sends = self.sq.retired_count();
        if self.count_credits {
            let (s0, r0) = self.progress.retired_published();
            let freed = sends
                .wrapping_sub(s0)
                .wrapping_add(recvs.wrapping_sub(r0) as u32);
            self.credits.give(freed);
        }
        self.progress.retired(sends, recvs);
    }
}

#[cfg(test)]
#[path = "poll_tests.rs"]
mod tests;
