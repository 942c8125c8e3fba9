//! The in-place posts (`fast.rs`) against the general one: for the same
//! WRs, two send queues over plain memory end with the same ring bytes,
//! doorbell record, BlueFlame register contents and bookkeeping, whether
//! a WR goes through `SendQueue::post` + `ring_doorbell` (a `SendWqe`
//! written by the codec's writer) or through `post_segs`,
//! `post_inline` or a `Reserved` batch. So the device cannot tell them
//! apart, and everything the codec is tested for holds for them.

use super::*;
use crate::dv::{mlx5dv_bf, mlx5dv_qp, mlx5dv_wq};
use crate::prm::{CtrlFlags, WqeOpcode, WQEBB};
use crate::wqe::{DataSeg, Payload, RemoteSeg, SendWqe, WqeError};
use proptest::prelude::*;

#[path = "fast_bf_tests.rs"]
mod bf;

/// One SQ's memory: ring, doorbell record, BlueFlame register pair.
struct Mem {
    ring: Vec<u64>,
    dbrec: Box<[u32; 2]>,
    bf: Vec<u64>,
}

impl Mem {
    fn new(wqe_cnt: u32) -> Self {
        Mem {
            ring: vec![0; wqe_cnt as usize * WQEBB / 8],
            dbrec: Box::new([0; 2]),
            bf: vec![0; 2 * 256 / 8],
        }
    }
    fn sq(&mut self, wqe_cnt: u32, max_post: u32) -> SendQueue {
        let mut d = mlx5dv_qp::zeroed();
        d.dbrec = self.dbrec.as_mut_ptr();
        d.sq = mlx5dv_wq {
            buf: self.ring.as_mut_ptr().cast(),
            wqe_cnt,
            stride: 64,
        };
        d.bf = mlx5dv_bf {
            reg: self.bf.as_mut_ptr().cast(),
            size: 256,
        };
        // SAFETY: the description names this value's memory, which outlives
        // the queue in every test and which nothing else touches meanwhile.
        unsafe { SendQueue::new(&d, 0xabc, 128, max_post) }.expect("send queue")
    }
}

/// A WR as both paths take it.
#[derive(Clone, Debug)]
struct Wr {
    op: u8,
    signaled: bool,
    solicited: bool,
    imm: u32,
    raddr: u64,
    rkey: u32,
    addr: u64,
    len: u32,
    lkey: u32,
    wr_id: u64,
    inline: Vec<u8>,
}

fn opcode(op: u8) -> WqeOpcode {
    [
        WqeOpcode::RDMA_WRITE,
        WqeOpcode::RDMA_WRITE_IMM,
        WqeOpcode::SEND,
        WqeOpcode::SEND_IMM,
        WqeOpcode::RDMA_READ,
        WqeOpcode::SEND_INVAL,
    ][op as usize]
}

impl Wr {
    fn flags(&self) -> CtrlFlags {
        let mut f = CtrlFlags::empty();
        f.set(CtrlFlags::CQ_UPDATE, self.signaled);
        f.set(CtrlFlags::SOLICITED, self.solicited);
        f
    }
    fn imm(&self) -> u32 {
        if opcode(self.op).has_imm() {
            self.imm
        } else {
            0
        }
    }
    /// Through the general path, with the codec's writer.
    fn post_general(&self, sq: &mut SendQueue, inline: bool) -> Result<(), WqeError> {
        let op = opcode(self.op);
        let sge = [DataSeg {
            addr: self.addr,
            len: self.len,
            lkey: self.lkey,
        }];
        let w = SendWqe {
            datagram: None,
            opcode: op,
            flags: self.flags(),
            imm: self.imm(),
            remote: op.has_raddr().then_some(RemoteSeg {
                addr: self.raddr,
                rkey: self.rkey,
            }),
            masked: None,
            atomic: None,
            payload: if inline {
                Payload::Inline(&self.inline)
            } else {
                Payload::Sges(&sge)
            },
        };
        sq.post(&w, self.wr_id)
    }
    fn raddr(&self) -> Option<Seg> {
        opcode(self.op)
            .has_raddr()
            .then_some(Seg::raddr(self.raddr, self.rkey))
    }
    fn data(&self) -> Seg {
        Seg::data(self.addr, self.len, self.lkey)
    }
    /// Through `post_segs`.
    fn post_bf(&self, sq: &mut SendQueue) -> Result<(), WqeError> {
        let (op, f, imm) = (opcode(self.op), self.flags(), self.imm());
        match self.raddr() {
            Some(r) => sq.post_segs(op, f, imm, [r, self.data()], self.wr_id),
            None => sq.post_segs(op, f, imm, [self.data()], self.wr_id),
        }
    }
    /// Through `write_segs_gated` + `ring_put` (`Qp::post_write`'s path):
    /// whether it posted.
    fn post_gated(&self, sq: &mut SendQueue) -> bool {
        let (op, f, imm) = (opcode(self.op), self.flags(), self.imm());
        let put = match self.raddr() {
            Some(r) => sq.write_segs_gated(op, f, imm, [r, self.data()], self.wr_id),
            None => sq.write_segs_gated(op, f, imm, [self.data()], self.wr_id),
        };
        put.map(Written::ring).is_some()
    }
    /// Through `write_segs_bf` + `WrittenBf::ring` (`Qp::post_send`'s
    /// inlined path): whether it posted.
    fn post_gated_bf(&self, sq: &mut SendQueue) -> bool {
        let (op, f, imm) = (opcode(self.op), self.flags(), self.imm());
        let put = match self.raddr() {
            Some(r) => sq.write_segs_bf(op, f, imm, [r, self.data()], self.wr_id),
            None => sq.write_segs_bf(op, f, imm, [self.data()], self.wr_id),
        };
        put.map(WrittenBf::ring).is_some()
    }
    /// Into a reserved batch.
    fn push(&self, room: &mut Reserved<'_>) -> Result<(), WqeError> {
        let (op, f, imm) = (opcode(self.op), self.flags(), self.imm());
        match self.raddr() {
            Some(r) => room.write_segs(op, f, imm, [r, self.data()], self.wr_id),
            None => room.write_segs(op, f, imm, [self.data()], self.wr_id),
        }
    }
    /// Through `post_inline` (plain bytes).
    fn post_inline(&self, sq: &mut SendQueue) -> Result<(), WqeError> {
        let (op, f, imm) = (opcode(self.op), self.flags(), self.imm());
        // SAFETY: `self.inline` is ours and nothing writes it meanwhile.
        unsafe {
            sq.post_inline(
                op,
                f,
                imm,
                self.raddr(),
                self.inline.as_ptr(),
                self.inline.len(),
                false,
                self.wr_id,
            )
        }
    }
    /// Through `post_inline_gated` (plain bytes): whether it posted.
    fn post_inline_gated(&self, sq: &mut SendQueue) -> bool {
        let (op, f, imm) = (opcode(self.op), self.flags(), self.imm());
        // SAFETY: `self.inline` is ours and nothing writes it meanwhile.
        unsafe {
            sq.post_inline_gated(
                op,
                f,
                imm,
                self.raddr(),
                self.inline.as_ptr(),
                self.inline.len(),
                false,
                self.wr_id,
            )
        }
    }
}

/// A signaled RDMA WRITE of 64 bytes, `inline` its inline payload.
fn signaled_write(inline: Vec<u8>) -> Wr {
    Wr {
        op: 0,
        signaled: true,
        solicited: false,
        imm: 0,
        raddr: 0x1000,
        rkey: 1,
        addr: 0x2000,
        len: 64,
        lkey: 2,
        wr_id: 9,
        inline,
    }
}

fn wr() -> impl Strategy<Value = Wr> {
    (
        (0u8..6, any::<bool>(), any::<bool>(), any::<u32>()),
        (
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
            1u32..1 << 31,
            any::<u32>(),
        ),
        (any::<u64>(), prop::collection::vec(any::<u8>(), 0..=128)),
    )
        .prop_map(
            |((op, signaled, solicited, imm), (raddr, rkey, addr, len, lkey), (wr_id, inline))| {
                Wr {
                    op,
                    signaled,
                    solicited,
                    imm,
                    raddr,
                    rkey,
                    addr,
                    len,
                    lkey,
                    wr_id,
                    inline,
                }
            },
        )
}

/// Everything a post leaves behind that the device or a later call sees.
fn state(m: &Mem, sq: &SendQueue) -> (Vec<u64>, [u32; 2], Vec<u64>, [u32; 6]) {
    (
        m.ring.clone(),
        *m.dbrec,
        m.bf.clone(),
        [
            sq.pi(),
            sq.outstanding(),
            sq.free_wqebbs(),
            sq.batch_start as u32,
            sq.bf_offset,
            sq.last_signaled,
        ],
    )
}

/// Retires everything posted (the test plays the device), so that a long
/// run keeps finding room.
fn retire_all(sq: &mut SendQueue, last: u32) {
    if sq.outstanding() != 0 {
        // The CQE names the last WQE's first WQEBB.
        assert!(sq.complete(last as u16).is_some());
    }
}

proptest! {
    // Under Miri (where each case takes tens of seconds) one case: the
    // point there is that the raw stores stay in bounds.
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 1 } else { 256 }))]

    /// One WR at a time, each with its doorbell: `post_segs` and
    /// `post_inline` against `post` + `ring_doorbell`, starting at a
    /// random producer index so that inline payloads wrap at the ring end.
    #[test]
    fn in_place_posts_write_what_the_codec_writes(
        wrs in prop::collection::vec((wr(), any::<bool>()), 1..24),
        skip in 0u32..16,
    ) {
        let (mut a, mut b) = (Mem::new(16), Mem::new(16));
        let (mut sa, mut sb) = (a.sq(16, 8), b.sq(16, 8));
        for s in [&mut sa, &mut sb] {
            // Move the producer index (NOPs of one WQEBB), then retire them.
            for _ in 0..skip {
                let nop = SendWqe {
                    datagram: None,
                    opcode: WqeOpcode::NOP,
                    flags: CtrlFlags::empty(),
                    imm: 0,
                    remote: None,
                    masked: None,
                    atomic: None,
                    payload: Payload::Inline(&[]),
                };
                let last = s.pi();
                s.post(&nop, 0).unwrap();
                s.ring_doorbell();
                retire_all(s, last);
            }
        }
        let mut last = 0;
        for (w, inline) in &wrs {
            let inline = *inline && opcode(w.op) != WqeOpcode::RDMA_READ;
            let at = sa.pi();
            let ra = w.post_general(&mut sa, inline);
            if ra.is_ok() {
                sa.ring_doorbell();
            }
            let rb = if inline { w.post_inline(&mut sb) } else { w.post_bf(&mut sb) };
            prop_assert_eq!(ra.is_ok(), rb.is_ok(), "{:?} {:?}", ra, rb);
            if ra.is_ok() {
                last = at;
            }
            prop_assert_eq!(state(&a, &sa), state(&b, &sb));
            if sa.outstanding() > 4 {
                retire_all(&mut sa, last);
                retire_all(&mut sb, last);
            }
        }
    }

    /// A batch: `reserve` + `write_segs` + `ring` against `post` of each +
    /// one `ring_doorbell` (the 8-byte doorbell of the last WQE).
    #[test]
    fn a_reserved_batch_writes_what_posting_each_writes(
        wrs in prop::collection::vec(wr(), 2..12),
    ) {
        let (mut a, mut b) = (Mem::new(16), Mem::new(16));
        let (mut sa, mut sb) = (a.sq(16, 16), b.sq(16, 16));
        for w in &wrs {
            w.post_general(&mut sa, false).unwrap();
        }
        sa.ring_doorbell();
        let mut room = sb.reserve(wrs.len() as u32).unwrap();
        for w in &wrs {
            w.push(&mut room).unwrap();
        }
        prop_assert!(wrs[0].push(&mut room).is_err(), "no more than reserved");
        room.ring();
        prop_assert_eq!(state(&a, &sa), state(&b, &sb));
    }

    /// The gated post against `post_segs`, gate open, over auto-signal
    /// periods, WR limits and producer indices: the same bytes and slots,
    /// and where one refuses (the WR limit) the other does too.
    #[test]
    fn gated_posts_write_what_post_segs_writes(
        wrs in prop::collection::vec(wr(), 1..40),
        period in 0u32..6,
        max_post in 1u32..5,
    ) {
        let (mut a, mut b, mut c) = (Mem::new(16), Mem::new(16), Mem::new(16));
        let (mut sa, mut sb) = (a.sq(16, max_post), b.sq(16, max_post));
        let mut sc = c.sq(16, max_post);
        for s in [&mut sa, &mut sb, &mut sc] {
            // At most 4 WQEs of at most 3 WQEBBs (ctrl, raddr, 128 inline
            // bytes): the room check is implied.
            assert!(s.limit_wqe_size(1));
            s.set_auto_signal(period);
        }
        sb.set_gate(true);
        sc.set_gate(true);
        let mut last = None;
        for (i, w) in wrs.iter().enumerate() {
            let at = sa.pi();
            let ra = w.post_bf(&mut sa);
            let rb = w.post_gated(&mut sb);
            // (Every post rings: the next one's doorbell is BlueFlame's.)
            let rc = w.post_gated_bf(&mut sc);
            prop_assert_eq!(ra.is_ok(), rb, "{:?}", ra);
            prop_assert_eq!(rb, rc);
            if rb {
                last = Some(at);
            }
            prop_assert_eq!(state(&a, &sa), state(&b, &sb));
            prop_assert_eq!(state(&a, &sa), state(&c, &sc));
            for j in 0..16 {
                prop_assert_eq!(sa.slots.get(j).fields(), sb.slots.get(j).fields());
                prop_assert_eq!(sa.slots.get(j).fields(), sc.slots.get(j).fields());
            }
            prop_assert_eq!(sa.retired_count(), sb.retired_count());
            prop_assert_eq!(sa.posted_count(), sb.posted_count());
            prop_assert_eq!(sa.posted_count(), sc.posted_count());
            // Retire now and then, so both the limit and room are reached.
            if i % 3 == 2 {
                if let Some(l) = last.take() {
                    retire_all(&mut sa, l);
                    retire_all(&mut sb, l);
                    retire_all(&mut sc, l);
                }
            }
        }
    }

    /// The gated inline post against `post_inline`, gate open, over
    /// auto-signal periods, WR limits, payload lengths (0 to the queue's
    /// `max_inline`, 128) and producer indices (the payload wrapping at the
    /// ring's end): the same bytes and slots, and where one refuses (the
    /// WR limit) the other does too; with the gate closed it refuses and
    /// writes nothing.
    #[test]
    fn gated_inline_posts_write_what_post_inline_writes(
        wrs in prop::collection::vec(wr(), 1..40),
        period in 0u32..6,
        max_post in 1u32..5,
    ) {
        let (mut a, mut b) = (Mem::new(16), Mem::new(16));
        let (mut sa, mut sb) = (a.sq(16, max_post), b.sq(16, max_post));
        for s in [&mut sa, &mut sb] {
            // At most 4 WQEs of at most 3 WQEBBs: the room check is implied.
            assert!(s.limit_wqe_size(1));
            s.set_auto_signal(period);
        }
        let closed = wrs[0].post_inline_gated(&mut sb);
        prop_assert!(!closed, "posted through a closed gate");
        prop_assert_eq!(state(&a, &sa), state(&b, &sb));
        sb.set_gate(true);
        let mut last = None;
        for (i, w) in wrs.iter().enumerate() {
            let at = sa.pi();
            let ra = w.post_inline(&mut sa);
            let rb = w.post_inline_gated(&mut sb);
            prop_assert_eq!(ra.is_ok(), rb, "{:?}", ra);
            if rb {
                last = Some(at);
            }
            prop_assert_eq!(state(&a, &sa), state(&b, &sb));
            for j in 0..16 {
                prop_assert_eq!(sa.slots.get(j).fields(), sb.slots.get(j).fields());
            }
            prop_assert_eq!(sa.posted_count(), sb.posted_count());
            if i % 3 == 2 {
                if let Some(l) = last.take() {
                    retire_all(&mut sa, l);
                    retire_all(&mut sb, l);
                }
            }
        }
    }

    /// Batches through `Reserved::write_all` (its loop with auto-signal and
    /// the one without, which it takes when no WR can be signaled by
    /// force) against `post` of each and one `ring_doorbell`, over
    /// several auto-signal periods: the same bytes, the same hidden CQEs.
    #[test]
    fn push_all_writes_what_posting_each_writes(
        batches in prop::collection::vec(prop::collection::vec(wr(), 1..9), 1..6),
        period in 0u32..6,
    ) {
        let (mut a, mut b) = (Mem::new(16), Mem::new(16));
        let (mut sa, mut sb) = (a.sq(16, 16), b.sq(16, 16));
        sa.set_auto_signal(period);
        sb.set_auto_signal(period);
        for wrs in &batches {
            // One segment layout per batch: the remote-address ones.
            let wrs: Vec<&Wr> = wrs.iter().filter(|w| w.raddr().is_some()).collect();
            if wrs.is_empty() {
                continue;
            }
            let last = sa.pi() + wrs.len() as u32 - 1;
            for w in &wrs {
                w.post_general(&mut sa, false).unwrap();
            }
            sa.ring_doorbell();
            let mut room = sb.reserve(wrs.len() as u32).unwrap();
            let pushed = room.write_all(&wrs, |w| {
                let r = w.raddr().expect("filtered");
                (opcode(w.op), w.flags(), w.imm(), [r, w.data()], w.wr_id)
            });
            prop_assert!(pushed);
            prop_assert!(
                !room.write_all::<_, 2>(&wrs[..1], |_| unreachable!()),
                "no more than reserved"
            );
            room.ring();
            prop_assert_eq!(state(&a, &sa), state(&b, &sb));
            // Every slot's hidden flag and wr_id agree too.
            for i in 0..16 {
                prop_assert_eq!(sa.slots.get(i).fields(), sb.slots.get(i).fields());
            }
            retire_all(&mut sa, last);
            retire_all(&mut sb, last);
        }
    }
}

/// Refusals write nothing: a full SQ (WR limit and WQEBBs), an inline
/// payload above `max_inline`, a reservation larger than the room.
#[test]
fn refused_in_place_posts_write_nothing() {
    let mut m = Mem::new(8);
    let mut sq = m.sq(8, 4);
    let w = signaled_write(vec![7; 200]);
    assert!(matches!(
        w.post_inline(&mut sq),
        Err(WqeError::InlineTooLong { len: 200, max: 128 })
    ));
    assert!(matches!(
        sq.reserve(5),
        Err(WqeError::WrLimit { max_post: 4 })
    ));
    for _ in 0..4 {
        w.post_bf(&mut sq).unwrap();
    }
    let before = state(&m, &sq);
    assert!(matches!(w.post_bf(&mut sq), Err(WqeError::WrLimit { .. })));
    let short = Wr {
        inline: vec![1; 8],
        ..w.clone()
    };
    assert!(matches!(
        short.post_inline(&mut sq),
        Err(WqeError::WrLimit { .. })
    ));
    assert!(sq.reserve(1).is_err());
    assert_eq!(state(&m, &sq), before, "a refused post changed something");
}

/// The gate: closed when the queue is made, closed again by
/// `set_gate(false)`, and closed whatever `set_gate` says while the room
/// check is not implied by the WR limit (opened by `limit_wqe_size` once it
/// is). A refused gated post writes nothing; so does one at the WR limit.
/// The UD gate: closed when made, while the room check is not implied by
/// the WR limit, at the WR limit and when closed again; a refusal writes
/// nothing.
#[test]
fn a_closed_ud_gate_refuses_and_writes_nothing() {
    let mut m = Mem::new(8);
    let mut sq = m.sq(8, 2);
    let snap = sq.snapshot();
    assert!(sq.ud_room().is_none(), "closed when made");
    sq.set_ud_gate(true);
    assert!(sq.ud_room().is_none(), "2 WRs of 8 WQEBBs need not fit 8");
    // (Its 128 inline bytes keep its largest WQE at 3 WQEBBs: 2 x 3 fit.)
    assert!(sq.limit_wqe_size(2));
    assert!(sq.ud_room().is_some(), "opened");
    for i in 0..2 {
        let mut r = sq.ud_room().expect("under the WR limit");
        r.datagram(&[0; crate::wqe::DATAGRAM_SEG], 1, 2);
        r.data(Seg::data(0x1000, 8, 1));
        r.finish(WqeOpcode::SEND, CtrlFlags::CQ_UPDATE, 0, i).ring();
    }
    let full = sq.snapshot();
    assert!(snap != full);
    assert!(sq.ud_room().is_none(), "at the WR limit");
    assert!(sq.snapshot() == full);
    sq.retirer().complete(2);
    assert!(sq.ud_room().is_some(), "a WR retired");
    sq.set_ud_gate(false);
    assert!(sq.ud_room().is_none(), "closed again");
}

#[test]
fn a_closed_gate_refuses_and_writes_nothing() {
    let w = signaled_write(vec![]);
    let mut m = Mem::new(16);
    // 8 WQEs of up to 16 WQEBBs do not fit 16: no room implied.
    let mut sq = m.sq(16, 8);
    let before = state(&m, &sq);
    assert!(!w.post_gated(&mut sq), "closed when made");
    sq.set_gate(true);
    assert!(
        !w.post_gated(&mut sq),
        "open, but the room check is not implied"
    );
    assert_eq!(state(&m, &sq), before);
    // 8 WQEs of 3 WQEBBs (128 inline bytes) still exceed 16: closed.
    assert!(sq.limit_wqe_size(1));
    assert!(!w.post_gated(&mut sq));
    assert_eq!(state(&m, &sq), before);

    let mut m = Mem::new(16);
    let mut sq = m.sq(16, 4);
    sq.set_gate(true);
    assert!(
        !w.post_gated(&mut sq),
        "room not implied before limit_wqe_size"
    );
    // 4 x 3 WQEBBs fit 16: `limit_wqe_size` opens the gate asked for.
    assert!(sq.limit_wqe_size(1));
    for _ in 0..4 {
        assert!(w.post_gated(&mut sq));
    }
    let full = state(&m, &sq);
    assert!(!w.post_gated(&mut sq), "at the WR limit");
    assert_eq!(
        state(&m, &sq),
        full,
        "a refusal at the limit wrote something"
    );
    retire_all(&mut sq, 3);
    sq.set_gate(false);
    let idle = state(&m, &sq);
    assert!(!w.post_gated(&mut sq), "closed again");
    assert_eq!(state(&m, &sq), idle);
    assert!(w.post_bf(&mut sq).is_ok(), "post_segs needs no gate");
}

/// `limit_wqe_size` with WQEs outstanding changes nothing (a break-it
/// review found that it let a post skip the room check on a full ring):
/// two 8-WQEBB WQEs fill a ring of 16, and an in-place post still finds
/// no room.
#[test]
fn limit_wqe_size_waits_for_an_idle_queue() {
    let mut m = Mem::new(16);
    let mut sq = m.sq(16, 4);
    let sges = [DataSeg {
        addr: 0x1000,
        len: 8,
        lkey: 1,
    }; 30];
    let big = SendWqe {
        datagram: None,
        opcode: WqeOpcode::RDMA_WRITE,
        flags: CtrlFlags::CQ_UPDATE,
        imm: 0,
        remote: Some(RemoteSeg {
            addr: 0x2000,
            rkey: 2,
        }),
        masked: None,
        atomic: None,
        payload: Payload::Sges(&sges),
    };
    sq.post(&big, 1).unwrap();
    sq.post(&big, 2).unwrap();
    sq.ring_doorbell();
    assert_eq!(sq.free_wqebbs(), 0, "two WQEs of 8 WQEBBs fill the ring");
    assert!(!sq.limit_wqe_size(1), "refused with WRs outstanding");
    let before = state(&m, &sq);
    let r = sq.post_segs(
        WqeOpcode::RDMA_WRITE,
        CtrlFlags::CQ_UPDATE,
        0,
        [Seg::raddr(0x3000, 3), Seg::data(0x4000, 8, 4)],
        3,
    );
    assert!(matches!(r, Err(WqeError::QueueFull { .. })), "{r:?}");
    assert_eq!(state(&m, &sq), before, "overwrote an outstanding WQE");
    // Idle again: the limit applies.
    assert!(sq.complete(8).is_some(), "the second WQE starts at WQEBB 8");
    assert!(sq.limit_wqe_size(1));
}

/// A UD SEND built in place (`post_ud`, and the gated `ud_room`) is the
/// general writer's WQE for
/// the same WR (ctrl, the AV with the qkey and remote QPN patched in, the
/// data segment), at every producer index of a small ring (so its second
/// WQEBB wraps), signaled or not, with the same doorbell record and
/// BlueFlame copy.
#[test]
fn ud_sends_in_place_write_what_the_writer_writes() {
    let mut av = [0u8; crate::wqe::DATAGRAM_SEG];
    for (i, b) in av.iter_mut().enumerate() {
        *b = 0x80 | i as u8;
    }
    for start in 0..8u32 {
        for signaled in [true, false] {
            let (mut ma, mut mb, mut mc) = (Mem::new(8), Mem::new(8), Mem::new(8));
            let (mut a, mut b) = (ma.sq(8, 4), mb.sq(8, 4));
            a.limit_wqe_size(2);
            b.limit_wqe_size(2);
            // The gated one: a WR limit that implies the room (2 WRs of at
            // most 3 WQEBBs), the same auto-signal period as the others'.
            let mut c = mc.sq(8, 2);
            c.limit_wqe_size(2);
            c.set_auto_signal(2);
            c.set_ud_gate(true);
            // Both at producer index `start` first (NOPs, retired).
            for _ in 0..start {
                let nop = SendWqe {
                    datagram: None,
                    opcode: WqeOpcode::NOP,
                    flags: CtrlFlags::CQ_UPDATE,
                    imm: 0,
                    remote: None,
                    masked: None,
                    atomic: None,
                    payload: Payload::Sges(&[]),
                };
                for q in [&mut a, &mut b, &mut c] {
                    q.post(&nop, 0).unwrap();
                    q.ring_doorbell();
                    let last = q.pi().wrapping_sub(1) as u16;
                    q.retirer().complete(last);
                }
            }
            let flags = if signaled {
                CtrlFlags::CQ_UPDATE
            } else {
                CtrlFlags::empty()
            };
            let mut patched = av;
            patched[0..4].copy_from_slice(&0x1111_2222u32.to_be_bytes());
            patched[8..12].copy_from_slice(&(0x4321 | crate::wqe::EXTENDED_UD_AV).to_be_bytes());
            let d = [DataSeg {
                addr: 0x1000,
                len: 100,
                lkey: 0x77,
            }];
            let wqe = SendWqe {
                datagram: Some(crate::wqe::Datagram::Ud(&patched)),
                opcode: WqeOpcode::SEND_IMM,
                flags,
                imm: 9,
                remote: None,
                masked: None,
                atomic: None,
                payload: Payload::Sges(&d),
            };
            a.post(&wqe, 42).unwrap();
            a.ring_doorbell();
            b.post_ud(
                WqeOpcode::SEND_IMM,
                flags,
                9,
                &av,
                0x4321,
                0x1111_2222,
                Seg::data(0x1000, 100, 0x77),
                42,
            )
            .unwrap();
            // The gated post (`ud_room`), its steps in the order the
            // direct path takes them.
            let mut room = c.ud_room().expect("the UD gate is open");
            room.datagram(&av, 0x4321, 0x1111_2222);
            room.data(Seg::data(0x1000, 100, 0x77));
            room.finish(WqeOpcode::SEND_IMM, flags, 9, 42).ring();
            for (m, q, what) in [(&mb, &b, "post_ud"), (&mc, &c, "ud_room")] {
                assert_eq!(ma.ring, m.ring, "{what}: ring, start {start}");
                assert_eq!(ma.dbrec, m.dbrec, "{what}: doorbell record, start {start}");
                assert_eq!(ma.bf, m.bf, "{what}: BlueFlame register, start {start}");
                assert_eq!((a.pi(), a.posted_count()), (q.pi(), q.posted_count()));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 1 } else { 256 }))]

    /// A queue split into a posting copy and a retiring copy
    /// (`split_copy`, the retiring one's window opened only to complete,
    /// `consumed` passed back before each post) against one whole queue,
    /// for the same WRs and CQEs: the same ring bytes and doorbell record,
    /// the same refusals (the WR limit), the same wr_ids retired, and no
    /// CQE taken while the window is shut.
    #[test]
    fn a_split_queue_posts_and_retires_as_a_whole_one(
        // (Under Miri fewer steps: each takes it a while.)
        steps in prop::collection::vec((wr(), 0u8..4), 1..if cfg!(miri) { 16 } else { 60 }),
        max_post in 1u32..6,
    ) {
        let (mut a, mut b) = (Mem::new(16), Mem::new(16));
        let mut whole = a.sq(16, max_post);
        let mut poster = b.sq(16, max_post);
        // SAFETY: `poster` alone posts, `owner` alone retires, on this thread.
        let mut owner = unsafe { poster.split_copy() };
        owner.close_window();
        // The WQEs posted and not yet retired: (first WQEBB index, signaled).
        let mut live: Vec<(u32, bool)> = Vec::new();
        for (w, action) in &steps {
            if *action == 0 && !live.is_empty() {
                // The CQE of the oldest signaled WQE, if any (else the last).
                let k = live.iter().position(|l| l.1).unwrap_or(live.len() - 1);
                let counter = live[k].0 as u16;
                prop_assert!(owner.complete(counter).is_none(), "a CQE taken with the window shut");
                let rw = whole.complete(counter);
                owner.open_window();
                let ro = owner.complete(counter);
                owner.close_window();
                prop_assert_eq!(rw, ro);
                prop_assert_eq!(whole.retired_count(), owner.retired_count());
                live.drain(..=k);
                continue;
            }
            let at = whole.pi();
            poster.set_consumed(owner.consumed());
            let rw = w.post_general(&mut whole, false);
            let rp = w.post_general(&mut poster, false);
            prop_assert_eq!(&rw, &rp);
            whole.ring_doorbell();
            poster.ring_doorbell();
            if rw.is_ok() {
                // (Auto-signal may have signaled it: a CQE of it is allowed.)
                live.push((at, true));
            }
            prop_assert_eq!(&a.ring, &b.ring);
            prop_assert_eq!(*a.dbrec, *b.dbrec);
            prop_assert_eq!(whole.posted_count(), poster.posted_count());
        }
    }
}
