//! The two pollers over the same CQEs, and the comparison (with the
//! oracle linked only): see [`crate::cqe`].

use super::*;
use crate::ffi::*;
use crate::mem::Mem;
use crate::provider::{ProviderRecvs, ProviderWrs};
use crate::send::BF_SIZE;
use crate::wr::data_segs;
use core::ptr::null_mut;
use mlx5_dv::driver::{CompletionQueue, ReceiveQueue, SendQueue, SharedReceiveQueue, SrqDesc};
use mlx5_dv::dv::{mlx5dv_bf, mlx5dv_cq, mlx5dv_qp, mlx5dv_wq};
use mlx5_dv::sim;
use rdma_direct::{Completion, WcOpcode, WcStatus};

/// What differs between our completion and the provider's `ibv_wc` of
/// CQE `cqe`, described; empty when they agree. Compared: wr_id,
/// status, qp_num, vendor_err, src_qp, wc_flags and imm always; opcode
/// when the status is success (verbs leaves it undefined otherwise,
/// and libmlx5 does not write it for an error CQE); byte_len where
/// verbs defines it (RDMA READ, atomics, receives: libmlx5 does not
/// write it for a SEND or RDMA WRITE, ours is the CQE's byte count).
/// By design libmlx5 sets `IBV_WC_WITH_IMM` on a successful SEND_IMM or
/// RDMA_WRITE_IMM requester completion (with no immediate); ours has
/// no immediate on the send side: expected, and nowhere else. A
/// successful RESP_SEND_INV receive: libmlx5's `IBV_WC_WITH_INV` and
/// `invalidated_rkey` (in `imm`'s union, host order) against mlx5-dv's
/// parse of our ring's CQE, `cqe` ([`Cqe::invalidated_rkey`]), as
/// rdma-direct's `Completion` has no field for it yet (docs/prm.md);
/// its `imm` must then be `None`.
pub fn differences(cqe: &Cqe, ours: &Completion, theirs: &po_wc) -> Vec<String> {
    let mut d = Vec::new();
    let mut field = |name: &str, o: u64, t: u64| {
        if o != t {
            d.push(format!("{name}: ours {o:#x}, theirs {t:#x}"));
        }
    };
    let t = theirs;
    field("wr_id", ours.wr_id, t.wr_id);
    field("status", ours.status.0 as u64, t.status as u64);
    field("qp_num", ours.qp_num as u64, t.qp_num as u64);
    field("vendor_err", ours.vendor_err as u64, t.vendor_err as u64);
    field("src_qp", ours.src_qp.qpn() as u64, t.src_qp as u64);
    let ok = ours.status == WcStatus::SUCCESS;
    if ok {
        field("opcode", ours.opcode.0 as u64, t.opcode as u64);
        use WcOpcode as W;
        let defined = [
            W::RDMA_READ,
            W::COMP_SWAP,
            W::FETCH_ADD,
            W::RECV,
            W::RECV_RDMA_WITH_IMM,
        ];
        if defined.contains(&ours.opcode) {
            field("byte_len", ours.byte_len as u64, t.byte_len as u64);
        }
    }
    let mut flags = if ours.imm.is_some() { WC_WITH_IMM } else { 0 };
    flags |= if ours.src_qp.grh() { WC_GRH } else { 0 };
    let imm_op = matches!(
        cqe.wqe_opcode,
        WqeOpcode::SEND_IMM | WqeOpcode::RDMA_WRITE_IMM
    );
    if ok && cqe.opcode == CqeOpcode::REQ && imm_op {
        flags |= WC_WITH_IMM;
    }
    let inv = cqe.invalidated_rkey().filter(|_| ok);
    if inv.is_some() {
        flags |= WC_WITH_INV;
    }
    field("wc_flags", flags as u64, t.wc_flags as u64);
    match inv {
        // (`po_wc.imm` is `be32toh(imm_data)`: the host-order rkey swapped.)
        Some(rkey) => {
            field("invalidated_rkey", rkey as u64, t.imm.swap_bytes() as u64);
            field("imm (ours)", ours.imm.is_some() as u64, 0);
        }
        None => field("imm", ours.imm.unwrap_or(0) as u64, t.imm as u64),
    }
    d
}

/// A deliberate change to one CQE on one side only: byte `byte` of the
/// 64-byte CQE proper XOR `xor`, in the first planned CQE `pick`
/// chooses, in the provider's ring (`theirs`) or ours.
#[derive(Clone, Copy)]
pub struct Tamper {
    pub pick: fn(&Cqe) -> bool,
    pub byte: usize,
    pub xor: u8,
    pub theirs: bool,
}

/// What a run compared.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Completions compared (one per CQE).
    pub cqes: u64,
    pub polls: u64,
    /// Whether a [`Tamper`] found its CQE.
    pub tampered: bool,
}

/// What [`run`] tells its caller as it goes (for coverage counts).
pub enum Event<'a> {
    /// The case, before anything is posted.
    Case(&'a Case),
    /// A CQE both sides polled and agreed on, and its QP's transport.
    Cqe(&'a Planned, u32),
    /// A poll that took `n` completions, the consumer index from `from`
    /// to `to`.
    Poll { n: usize, from: u32, to: u32 },
}

pub(super) struct OurQp {
    pub(super) qpn: u32,
    pub(super) sq: SendQueue,
    rq: ReceiveQueue,
}

/// Both sides of one case and the sim CQ the CQEs come from. The
/// provider's objects are freed in `Drop`, then the drivers and the
/// sim go, then the memory they all point into.
pub(super) struct World {
    pub(super) cq: CompletionQueue,
    pub(super) qps: Vec<OurQp>,
    srq: Option<SharedReceiveQueue>,
    ctx: *mut po_ctx,
    pub(super) pcq: *mut po_cq,
    pub(super) pqps: Vec<*mut po_qp>,
    psrq: *mut po_srq,
    scq: sim::Cq,
    _dev: sim::Device,
    /// The sim CQ's ring (`cqe_cnt * cqe_size` bytes, while `scq` lives).
    sim_ring: *const u8,
    /// CQ rings and doorbell records: ours, theirs.
    pub(super) rings: [Mem; 2],
    pub(super) dbrecs: [Mem; 2],
    _mem: Vec<Mem>,
}

impl Drop for World {
    fn drop(&mut self) {
        // SAFETY: made in `World::new`, each freed once, QPs before the
        // SRQ and CQ they name, the context last.
        unsafe {
            for &q in &self.pqps {
                po_qp_free(q);
            }
            if !self.psrq.is_null() {
                po_srq_free(self.psrq);
            }
            po_cq_free(self.pcq);
            po_ctx_free(self.ctx);
        }
    }
}

/// Posts receives through `post` (`po_post_recv` or
/// `po_post_srq_recv`), 64 a call; every one must be taken.
fn post_their_recvs(
    wrs: &[RecvWr],
    mut post: impl FnMut(&[po_recv_wr], &mut u32) -> i32,
) -> Result<(), String> {
    for chunk in wrs.chunks(64) {
        let recvs = ProviderRecvs::of(chunk);
        let list = &recvs.list;
        let mut bad = 0;
        let err = post(list, &mut bad);
        if err != 0 {
            return Err(format!(
                "the provider refused receive {bad} of {}: errno {err}",
                list.len()
            ));
        }
    }
    Ok(())
}

/// Posts `wrs` through `mlx5_post_send`, 64 a call (the harness's
/// most); every one must be taken.
fn post_their_sends(qp: *mut po_qp, wrs: &[Wr]) -> Result<(), String> {
    for chunk in wrs.chunks(64) {
        let pw = ProviderWrs::of(chunk);
        let list = &pw.list;
        let mut bad = 0;
        // SAFETY: `qp` is live; the list, its SGE arrays and AVs outlive the call.
        let err = unsafe { po_post_send(qp, list.as_ptr(), list.len() as u32, &mut bad) };
        if err != 0 {
            return Err(format!(
                "the provider refused send {bad} of {}: errno {err}",
                list.len()
            ));
        }
    }
    Ok(())
}

fn mem(len: usize, keep: &mut Vec<Mem>) -> *mut u8 {
    let m = Mem::zeroed(len);
    let p = m.ptr();
    keep.push(m);
    p
}

/// A CQE the pass before left in a slot (never software-owned again).
fn stale(s: &mut impl Source) -> Cqe {
    let op = [0, 1, 2, 3, 13, 14][s.range(0, 5) as usize];
    let mut c = cqe(
        CqeOpcode(op),
        s.range(0, 0xff_ffff) as u32,
        s.next_u64() as u16,
    );
    c.byte_cnt = s.next_u64() as u32;
    c
}

impl World {
    /// Both sides of `case` with every WR posted, and the sim CQ with
    /// the stale CQEs ahead of `start_ci` copied into both rings.
    pub(super) fn new(s: &mut impl Source, case: &Case) -> Result<(World, Posted), String> {
        let (cnt, size, ci) = (case.cqe_cnt, case.cqe_size, case.start_ci);
        let mut keep = Vec::new();
        let rings = [0, 1].map(|_| Mem::zeroed(cnt as usize * size as usize));
        let mut dbrecs = [0, 1].map(|_| Mem::zeroed(64));
        for d in &mut dbrecs {
            d.bytes_mut()[..4].copy_from_slice(&(ci & 0xff_ffff).to_be_bytes());
        }
        let desc = mlx5dv_cq {
            buf: rings[0].ptr().cast(),
            dbrec: dbrecs[0].ptr().cast(),
            cqe_cnt: cnt,
            cqe_size: size,
            cq_uar: null_mut(),
            cqn: 1,
            comp_mask: 0,
        };
        // SAFETY: the ring and record are the World's, dropped after `cq`.
        let mut cq = unsafe { CompletionQueue::new(&desc) }.map_err(|e| e.to_string())?;
        cq.start_at(ci);
        cq.set_overrun_ignored(case.ignore_overrun);
        let pcfg = po_cq_cfg {
            buf: rings[1].ptr().cast(),
            dbrec: dbrecs[1].ptr().cast(),
            cqe_cnt: cnt,
            cqe_sz: size,
            cons_index: ci,
            cqn: 1,
        };
        let dev = sim::Device::new();
        let scq = dev
            .create_cq_ex(cnt, size, true)
            .map_err(|e| e.to_string())?;
        // SAFETY: no arguments.
        let ctx = unsafe { po_ctx_new() };
        assert!(!ctx.is_null());
        // SAFETY: a live context; the ring and record are the World's, freed
        // after the CQ (`Drop`).
        let pcq = unsafe { po_cq_new(ctx, &pcfg) };
        let sim_ring = scq.dv().buf as *const u8;
        let mut w = World {
            cq,
            qps: Vec::new(),
            srq: None,
            ctx,
            pcq,
            pqps: Vec::new(),
            psrq: null_mut(),
            scq,
            _dev: dev,
            sim_ring,
            rings,
            dbrecs,
            _mem: Vec::new(),
        };
        // (A null CQ is freed harmlessly by `Drop`: free(NULL).)
        assert!(!pcq.is_null());
        let mut posted = Posted::default();
        if let Some(q) = &case.srq {
            let (buf, db) = (
                mem((q.count * q.stride) as usize, &mut keep),
                mem(64, &mut keep),
            );
            let cfg = po_srq_cfg {
                buf: buf.cast(),
                db: db.cast(),
                max: q.count,
                wqe_shift: q.stride.trailing_zeros(),
                max_gs: q.stride / 16 - 1,
                srqn: 0x40,
            };
            // SAFETY: the buffers are the World's, freed after the SRQ.
            w.psrq = unsafe { po_srq_new(w.ctx, &cfg) };
            assert!(!w.psrq.is_null());
            // Ours over a copy of the list libmlx5 linked.
            let (obuf, odb) = (
                mem((q.count * q.stride) as usize, &mut keep),
                mem(64, &mut keep),
            );
            // SAFETY: two distinct buffers of `count * stride` bytes.
            unsafe { core::ptr::copy_nonoverlapping(buf, obuf, (q.count * q.stride) as usize) };
            let d = SrqDesc {
                buf: obuf,
                dbrec: odb.cast(),
                stride: q.stride,
                head: 0,
                tail: q.count - 1,
            };
            // SAFETY: as above; the list is initialized.
            let mut srq = unsafe { SharedReceiveQueue::new(&d, q.stride / 16 - 1) }
                .map_err(|e| e.to_string())?;
            for (id, sges) in &q.recvs {
                posted.srq.push(
                    srq.post(&data_segs(sges), *id)
                        .map_err(|e| format!("our SRQ: {e}"))?,
                );
            }
            srq.ring_doorbell();
            // SAFETY: the SRQ is live; the lists outlive each call.
            post_their_recvs(&q.recvs, |l, bad| unsafe {
                po_post_srq_recv(w.psrq, l.as_ptr(), l.len() as u32, bad)
            })?;
            for (&i, (id, _)) in posted.srq.iter().zip(&q.recvs) {
                // SAFETY: `i` is below `count`.
                let theirs = unsafe { po_srq_wrid(w.psrq, i) };
                if theirs != *id {
                    return Err(format!(
                        "SRQ WQE {i}: ours is wr_id {id:#x}, the provider's {theirs:#x}"
                    ));
                }
            }
            w.srq = Some(srq);
        }
        for qp in &case.qps {
            let c = &qp.sq;
            let (rq_cnt, stride) = qp.rq.as_ref().map_or((0, 0), |r| (r.wqe_cnt, r.stride));
            let side = |keep: &mut Vec<Mem>| mlx5dv_qp {
                dbrec: mem(64, keep).cast(),
                sq: mlx5dv_wq {
                    buf: mem(c.wqe_cnt as usize * 64, keep).cast(),
                    wqe_cnt: c.wqe_cnt,
                    stride: 64,
                },
                rq: mlx5dv_wq {
                    buf: if rq_cnt == 0 {
                        null_mut()
                    } else {
                        mem((rq_cnt * stride) as usize, keep).cast()
                    },
                    wqe_cnt: rq_cnt,
                    stride,
                },
                bf: mlx5dv_bf {
                    reg: mem(2 * BF_SIZE as usize, keep).cast(),
                    size: BF_SIZE,
                },
                ..mlx5dv_qp::zeroed()
            };
            let (o, t) = (side(&mut keep), side(&mut keep));
            // SAFETY: the rings, record and registers are the World's.
            let mut sq = unsafe { SendQueue::new(&o, c.qpn, c.max_inline, c.max_post) }
                .map_err(|e| e.to_string())?;
            assert!(sq.limit_wqe_size(c.max_wqebbs) && sq.start_at(c.start_pi));
            sq.set_auto_signal(0);
            let mut sent = Vec::new();
            for wr in &qp.sends {
                let idx = sq.pi();
                wr.with_wqe(c.sq_sig_all, &case.arena, |wqe| sq.post(wqe, wr.wr_id))
                    .map_err(|e| format!("our SQ refused {wr:?}: {e}"))?;
                let (signaled, opcode) = (wr.signaled || c.sq_sig_all, wr.op.mlx5());
                sent.push(SentWqe {
                    idx,
                    signaled,
                    opcode,
                    bytes: sent_bytes(wr, c.qp_type),
                });
            }
            sq.ring_doorbell();
            posted.sends.push(sent);
            let cfg = po_qp_cfg {
                sq_buf: t.sq.buf,
                rq_buf: t.rq.buf,
                dbrec: t.dbrec,
                bf_reg: t.bf.reg,
                sq_wqe_cnt: c.wqe_cnt,
                sq_cur_post: c.start_pi,
                sq_max_post: c.max_post,
                sq_max_gs: 32,
                max_inline: c.max_inline,
                rq_wqe_cnt: rq_cnt,
                rq_wqe_shift: stride.trailing_zeros(),
                rq_max_gs: stride / 16,
                rq_max_post: rq_cnt,
                rq_head: qp.rq.as_ref().map_or(0, |r| r.head),
                qpn: c.qpn,
                qp_type: c.qp_type,
                sq_sig_all: c.sq_sig_all as u32,
                wq_sig: 0,
                atomics: (c.qp_type == ibv::QPT_RC) as u32,
                prefer_bf: c.prefer_bf as u32,
                bf_size: BF_SIZE,
                bf_offset: 0,
                user_index: qp.uidx,
                pad: 0,
            };
            let srq = if qp.rq.is_some() { null_mut() } else { w.psrq };
            // SAFETY: every buffer named is the World's; the context, CQ
            // and SRQ are live and freed after the QP.
            let pqp = unsafe { po_qp_new(w.ctx, &cfg, w.pcq, w.pcq, srq) };
            assert!(!pqp.is_null());
            w.pqps.push(pqp);
            post_their_sends(pqp, &qp.sends)?;
            let rq = match &qp.rq {
                None => ReceiveQueue::on_srq(w.srq.as_ref().expect("an SRQ").slots().clone()),
                Some(r) => {
                    // SAFETY: as for `sq`.
                    let mut rq = unsafe { ReceiveQueue::new(&o) }.map_err(|e| e.to_string())?;
                    assert!(rq.start_at(r.head));
                    for (id, sges) in &r.recvs {
                        rq.post(&data_segs(sges), *id)
                            .map_err(|e| format!("our RQ: {e}"))?;
                    }
                    rq.ring_doorbell();
                    // SAFETY: the QP is live; the lists outlive each call.
                    post_their_recvs(&r.recvs, |l, bad| unsafe {
                        po_post_recv(pqp, l.as_ptr(), l.len() as u32, bad)
                    })?;
                    rq
                }
            };
            let heads = qp.rq.as_ref().map_or(Vec::new(), |r| {
                (0..r.recvs.len() as u32)
                    .map(|k| r.head.wrapping_add(k))
                    .collect()
            });
            posted.recvs.push(heads);
            w.qps.push(OurQp { qpn: c.qpn, sq, rq });
        }
        w._mem = keep;
        // The previous pass's CQEs in the slots ahead, then both rings
        // as the sim's.
        w.scq.hook_start_at(ci.wrapping_sub(case.stale));
        for _ in 0..case.stale {
            w.scq.hook_push_cqe(&stale(s), s.range(0, 0xff_ffff) as u32);
        }
        for i in 0..cnt {
            w.copy_slot(i, None);
        }
        Ok((w, posted))
    }

    /// Copies slot `i` (modulo the ring) of the sim CQ into both rings,
    /// then XORs `tamper`'s byte on its side.
    fn copy_slot(&mut self, i: u32, tamper: Option<&Tamper>) {
        let size = self.cq.slot_size();
        let off = (i & (self.cq.cqe_cnt() - 1)) as usize * size;
        // SAFETY: a slot of the sim CQ's ring (masked index), which lives
        // as long as `scq`; nothing writes it meanwhile (the sim has no
        // thread here, and writes only inside `hook_push_cqe`).
        let slot = unsafe { core::slice::from_raw_parts(self.sim_ring.add(off), size) };
        for r in &mut self.rings {
            r.bytes_mut()[off..off + size].copy_from_slice(slot);
        }
        if let Some(t) = tamper {
            self.rings[t.theirs as usize].bytes_mut()[off + size - 64 + t.byte] ^= t.xor;
        }
    }

    /// Our poll of up to `ne` completions, as the direct backend's:
    /// the cursor, [`rdma_direct::testing::direct_completion_of`] per CQE on
    /// the QP its QPN names, then `polled` (the record, if written).
    pub(super) fn poll_ours<const SLOT: usize>(
        &mut self,
        ne: usize,
        out: &mut Vec<Completion>,
    ) -> Result<(), String> {
        let own = self.qps.len() == 1;
        let from = self.cq.ci();
        let mut err = None;
        let mut cqes = self.cq.cursor::<SLOT>();
        while out.len() < ne {
            let Some(c) = cqes.next() else { break };
            let qpn = c.qpn();
            let Some(q) = self.qps.iter_mut().find(|q| q.qpn == qpn) else {
                err = Some(format!("ours: a CQE of QP {qpn:#x}, none of the case's"));
                break;
            };
            match rdma_direct::testing::direct_completion_of(
                &mut q.sq.retirer(),
                &mut q.rq,
                c,
                qpn,
                own,
            ) {
                Ok(Some(wc)) => out.push(wc),
                Ok(None) => {}
                Err(e) => {
                    err = Some(format!("ours: {e}"));
                    break;
                }
            }
        }
        drop(cqes);
        self.cq.polled(from);
        err.map_or(Ok(()), Err)
    }

    /// After a poll: the consumer indices, the CQ doorbell records
    /// (ours, on a CQ that ignores overrun, still as it started), each
    /// SQ's retired WRs (the provider's `sq.tail`).
    pub(super) fn indices(&self, start_ci: u32) -> Result<(), String> {
        // SAFETY: the CQ is live.
        let theirs = unsafe { po_cq_cons_index(self.pcq) };
        if self.cq.ci() != theirs {
            return Err(format!(
                "consumer index: ours {:#x}, theirs {theirs:#x}",
                self.cq.ci()
            ));
        }
        let rec = |m: &Mem| <[u8; 4]>::try_from(&m.bytes()[..4]).unwrap();
        let (o, t) = (rec(&self.dbrecs[0]), rec(&self.dbrecs[1]));
        let want = if self.cq.overrun_ignored() {
            (start_ci & 0xff_ffff).to_be_bytes()
        } else {
            t
        };
        if o != want {
            return Err(format!(
                "CQ doorbell record: ours {o:02x?}, expected {want:02x?} (theirs {t:02x?})"
            ));
        }
        for (q, &p) in self.qps.iter().zip(&self.pqps) {
            let mut st = po_sq_state::default();
            // SAFETY: the QP is live.
            unsafe { po_qp_state(p, &mut st) };
            if q.sq.retired_count() != st.tail {
                return Err(format!(
                    "QP {:#x}: WRs retired: ours {}, theirs {}",
                    q.qpn,
                    q.sq.retired_count(),
                    st.tail
                ));
            }
        }
        Ok(())
    }
}

pub(super) fn batch(s: &mut impl Source) -> usize {
    match s.range(0, 9) {
        0..=2 => 64,
        3 | 4 => 1,
        _ => s.range(1, 64) as usize,
    }
}

/// One generated case from `s`: posts, plans, writes and polls (see
/// the module's doc), with `tamper` applied if given. `Err` describes
/// the first difference: the CQE's bytes, our completion, the
/// provider's.
pub fn run(
    s: &mut impl Source,
    tamper: Option<Tamper>,
    on: &mut dyn FnMut(Event<'_>),
) -> Result<Stats, String> {
    let case = case(s);
    on(Event::Case(&case));
    let (mut w, posted) = World::new(s, &case)?;
    let plan = plan(s, &case, &posted);
    let tamper_at = tamper.and_then(|t| plan.iter().position(|p| (t.pick)(&p.cqe)));
    let (cnt, size) = (case.cqe_cnt, case.cqe_size as usize);
    let mut st = Stats {
        tampered: tamper_at.is_some(),
        ..Stats::default()
    };
    let (mut pi, mut written) = (case.start_ci, 0);
    let mut ours = Vec::with_capacity(64);
    let mut theirs = [po_wc::default(); 64];
    loop {
        let unpolled = pi.wrapping_sub(w.cq.ci());
        let room = (cnt - unpolled.min(cnt)).min((plan.len() - written) as u32);
        if room > 0 && (unpolled == 0 || s.chance(40)) {
            let k = if s.chance(50) {
                room
            } else {
                s.range(1, room as u64) as u32
            };
            for _ in 0..k {
                let p = &plan[written];
                w.scq.hook_push_cqe(&p.cqe, p.uidx);
                w.copy_slot(pi, tamper.as_ref().filter(|_| tamper_at == Some(written)));
                (pi, written) = (pi.wrapping_add(1), written + 1);
            }
            continue;
        }
        let last = unpolled == 0;
        let (ne, from) = (batch(s), w.cq.ci());
        ours.clear();
        let r = if size == 64 {
            w.poll_ours::<64>(ne, &mut ours)
        } else {
            w.poll_ours::<128>(ne, &mut ours)
        };
        // SAFETY: the CQ is live; `theirs` holds 64 entries.
        let n = unsafe { po_poll_cq(w.pcq, ne as i32, theirs.as_mut_ptr()) };
        st.polls += 1;
        let to = w.cq.ci();
        let shown = |k: usize| {
            let off = (from.wrapping_add(k as u32) & (cnt - 1)) as usize * size + size - 64;
            let ring = |i: usize| w.rings[i].bytes()[off..off + 64].to_vec();
            let theirs_k = (k < n.max(0) as usize).then(|| theirs[k]);
            format!(
                "CQE {} (ours {:02x?}, theirs {:02x?})\nours:   {:?}\ntheirs: {theirs_k:?}\n{}",
                from.wrapping_add(k as u32),
                ring(0),
                ring(1),
                ours.get(k),
                case.summary()
            )
        };
        r.map_err(|e| format!("{e}\n{}", shown(ours.len())))?;
        if n < 0 || n as usize != ours.len() {
            return Err(format!(
                "a poll of {ne}: ours took {}, theirs {n}\n{}",
                ours.len(),
                shown(0)
            ));
        }
        for (k, (o, t)) in ours.iter().zip(&theirs).enumerate() {
            let j = from.wrapping_add(k as u32).wrapping_sub(case.start_ci) as usize;
            let off = (from.wrapping_add(k as u32) & (cnt - 1)) as usize * size;
            let c = Cqe::decode_slot(&w.rings[0].bytes()[off..off + size]).expect("a slot");
            let d = differences(&c, o, t);
            if !d.is_empty() {
                return Err(format!("{}\n{}", d.join("\n"), shown(k)));
            }
            let qp = case.qps.iter().find(|q| q.sq.qpn == c.qpn);
            on(Event::Cqe(&plan[j], qp.map_or(0, |q| q.sq.qp_type)));
        }
        st.cqes += ours.len() as u64;
        on(Event::Poll {
            n: ours.len(),
            from,
            to,
        });
        w.indices(case.start_ci)?;
        // The SQ room a retirement gives back: the WQEBBs from the oldest
        // WR not yet retired (libmlx5's `sq.tail`, equal to ours: checked
        // above) to the producer index are all that is in use. libmlx5
        // counts WRs only, so this is ours against the posted indices.
        for (k, q) in w.qps.iter().enumerate() {
            let sent = &posted.sends[k];
            let retired = q.sq.retired_count() as usize;
            let tail = sent.get(retired).map_or(q.sq.pi(), |s| s.idx);
            let want = q.sq.geometry().wqe_cnt - q.sq.pi().wrapping_sub(tail);
            if q.sq.free_wqebbs() != want {
                return Err(format!(
                    "QP {:#x}: free WQEBBs after {retired} WRs retired: ours {}, expected {want}\n{}",
                    q.qpn,
                    q.sq.free_wqebbs(),
                    case.summary()
                ));
            }
        }
        if n == 0 && !last {
            return Err(format!(
                "{unpolled} CQEs written, and neither side polls them\n{}",
                shown(0)
            ));
        }
        if last && written == plan.len() {
            break;
        }
    }
    // A drain or RESET writes our record too: then they agree.
    w.cq.update_ci();
    let rec = |i: usize| w.dbrecs[i].bytes()[..4].to_vec();
    if rec(0) != rec(1) {
        return Err(format!(
            "CQ doorbell record after update_ci: ours {:02x?}, theirs {:02x?}",
            rec(0),
            rec(1)
        ));
    }
    Ok(st)
}
