//! Runs one codec operation `N` times, for instruction counts under
//! callgrind (`scripts/insn-count`): ours or the C baseline of `mlx5-dv/oracle`
//! (rdma-core's `mlx5dv.h` helpers).
//!
//! `insn_count <op> <N>` with op one of `ours_write`, `c_write` (a 1-SGE
//! RDMA WRITE), `ours_inline`, `c_inline` (a 64-byte inline SEND),
//! `ours_cqe`, `c_cqe` (CQE ownership check and decode), `ours_post`,
//! `c_post` (a 64-byte inline RDMA WRITE posted and its doorbell rung, on
//! rings in plain memory: the doorbell record and BlueFlame stores are
//! ordinary stores here).
//!
//! `cb_post_write`, `cb_post_inline`, `cb_batch32`, `cb_poll1`, `cb_poll16`,
//! `cb_poll_empty`: the C driver baseline of the public API's post and poll
//! (`mlx5-dv/oracle/driver.c`), run `N` times (batches of 32 WRITEs, polls
//! of 1 or 16 CQEs, empty polls); `cb_ud_send` (a 1-SGE UD SEND),
//! `cb_poll_srq` (one receive CQE of a QP on an SRQ; both
//! `driver_ud_srq.c`); `cb_post_recv` (one 1-SGE receive on a QP's own
//! RQ), `cb_post_srq_recv` (on an SRQ), `cb_poll_rq` (one RC receive CQE
//! of a QP's own RQ), `cb_poll_ud_recv` (one UD receive CQE),
//! `cb_poll_srq_recv` (one receive CQE of a QP on an SRQ, as libmlx5's
//! poll does it; all five `driver_recv.c`, rdma-core v59's libmlx5
//! without its locks).
//! `cb_dc_write` (one signaled 1-SGE DC RDMA WRITE, `driver_dc.c`) beside
//! ours, `ours_dc_write` (`SendQueue::post_dc`, inside
//! `ours_post_dc_write`) and `ours_dc_room` (`SendQueue::dc_room`, inside
//! `ours_dc_room_write`), on plain-memory rings.
//! `scripts/insn-count` counts only inside their entry points (callgrind
//! `--toggle-collect`). The queue is retired, and the CQEs written,
//! outside them.

use mlx5_dv::cqe::{sw_owned, Cqe};
use mlx5_dv::prm::{CqeOpcode, CtrlFlags, Syndrome, WqeOpcode, WQEBB};
use mlx5_dv::ring::RingBuf;
use mlx5_dv::wqe::{write_send_wqe, DataSeg, Payload, RemoteSeg, SendWqe, SqGeometry};
use mlx5_dv_oracle::baseline;
use std::hint::black_box;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(op), Some(n)) = (args.get(1), args.get(2).and_then(|n| n.parse::<u32>().ok())) else {
        eprintln!("usage: insn_count <ours_write|c_write|ours_inline|c_inline|ours_cqe|c_cqe|ours_post|c_post> <N>");
        std::process::exit(2);
    };
    let geo = SqGeometry {
        wqe_cnt: 256,
        qpn: 0x1234,
        max_inline: 256,
        max_wqebbs: 16,
    };
    let mut mem = vec![0u8; 256 * WQEBB];
    let sge = [DataSeg {
        addr: 0x7f00_0000_1000,
        len: 4096,
        lkey: 0x11,
    }];
    let write = SendWqe {
        datagram: None,
        opcode: WqeOpcode::RDMA_WRITE,
        flags: CtrlFlags::CQ_UPDATE,
        imm: 0,
        remote: Some(RemoteSeg {
            addr: 0x7f00_0000_9000,
            rkey: 0x22,
        }),
        masked: None,
        atomic: None,
        payload: Payload::Sges(&sge),
    };
    let bytes = [0x5au8; 64];
    let send = SendWqe {
        datagram: None,
        opcode: WqeOpcode::SEND,
        flags: CtrlFlags::CQ_UPDATE,
        imm: 0,
        remote: None,
        masked: None,
        atomic: None,
        payload: Payload::Inline(&bytes),
    };
    let cqe = Cqe {
        opcode: CqeOpcode::REQ,
        wqe_opcode: WqeOpcode::RDMA_WRITE,
        qpn: 0x1234,
        wqe_counter: 7,
        byte_cnt: 4096,
        imm: 0,
        solicited: false,
        format: 0,
        syndrome: Syndrome(0),
        vendor_syndrome: 0,
        flags_rqpn: 0,
        owner: false,
    }
    .encode(0);
    let mut pi = 0u32;
    match op.as_str() {
        "ours_write" | "ours_inline" => {
            let wqe = if op == "ours_write" { &write } else { &send };
            let mut sq = RingBuf::from_slice(&mut mem).expect("ring");
            for _ in 0..n {
                let w = write_send_wqe(&mut sq, &geo, pi, black_box(wqe), 256).expect("encode");
                pi = w.next_pi;
            }
        }
        "c_write" => {
            for _ in 0..n {
                pi = pi.wrapping_add(baseline::write_sge(
                    &mut mem,
                    256,
                    pi,
                    0x1234,
                    black_box(0x7f00_0000_9000),
                    0x22,
                    black_box(0x7f00_0000_1000),
                    4096,
                    0x11,
                ));
            }
        }
        "c_inline" => {
            for _ in 0..n {
                pi = pi.wrapping_add(baseline::inline_send(
                    &mut mem,
                    256,
                    pi,
                    0x1234,
                    black_box(&bytes),
                ));
            }
        }
        "ours_cqe" => {
            for i in 0..n {
                let b = black_box(&cqe);
                if sw_owned(b[63], black_box(i & 255), 256) {
                    black_box(Cqe::decode(b));
                }
            }
        }
        "c_cqe" => {
            for i in 0..n {
                black_box(baseline::poll_cqe(black_box(&cqe), black_box(i & 255), 256));
            }
        }
        "ours_post" | "c_post" => {
            // An SQ of 256 WQEBBs, its doorbell record and a BlueFlame pair
            // (2 x 256 bytes), all plain memory, as mlx5dv_init_obj would
            // describe them.
            let mut dbrec = [0u32; 2];
            let mut bf = vec![0u64; 64];
            let mut qp = mlx5_dv::dv::mlx5dv_qp::zeroed();
            qp.sq.buf = mem.as_mut_ptr().cast();
            qp.sq.wqe_cnt = 256;
            qp.sq.stride = 64;
            qp.dbrec = dbrec.as_mut_ptr();
            qp.bf.reg = bf.as_mut_ptr().cast();
            qp.bf.size = 256;
            let data = [0x5au8; 64];
            if op == "ours_post" {
                // SAFETY: the description names memory this function owns
                // and nothing else touches while `sq` lives.
                let mut sq = unsafe { mlx5_dv::driver::SendQueue::new(&qp, 0x1234, 256, 0) }
                    .expect("send queue");
                sq.set_auto_signal(0);
                let w = SendWqe {
                    datagram: None,
                    opcode: WqeOpcode::RDMA_WRITE,
                    flags: CtrlFlags::CQ_UPDATE,
                    imm: 0,
                    remote: Some(RemoteSeg {
                        addr: 0x7f00_0000_9000,
                        rkey: 0x22,
                    }),
                    masked: None,
                    atomic: None,
                    payload: Payload::Inline(&data),
                };
                for i in 0..n {
                    // 2 WQEBBs each: forget them before the ring is full
                    // (no device consumes them here).
                    if i % 64 == 63 {
                        sq.reset();
                    }
                    sq.post(black_box(&w), i as u64).expect("post");
                    sq.ring_doorbell();
                }
            } else {
                let mut raw = baseline::RawSq {
                    buf: mem.as_mut_ptr(),
                    wqe_cnt: 256,
                    qpn: 0x1234,
                    dbrec: dbrec.as_mut_ptr(),
                    bf_reg: bf.as_mut_ptr().cast(),
                    bf_size: 256,
                    pi: 0,
                    bf_offset: 0,
                };
                for _ in 0..n {
                    // SAFETY: `raw` names memory this function owns; the ring
                    // wraps, so there is always room.
                    unsafe {
                        baseline::post_inline_writes(
                            &mut raw,
                            0x7f00_0000_9000,
                            0x22,
                            black_box(&data),
                            1,
                        )
                    };
                }
            }
            black_box(&bf);
            black_box(&dbrec);
        }
        "ours_dc_write" | "ours_dc_room" => ours_dc(op, n),
        op if op.starts_with("cb_") => c_driver(op, n),
        other => {
            eprintln!("insn_count: unknown op {other:?}");
            std::process::exit(2);
        }
    }
    black_box(&mem);
    black_box(pi);
}

/// Our in-place DC WRITE, the counterpart of `cb_post_dc_write`
/// (`oracle/driver_dc.c`): one signaled 1-SGE RDMA WRITE on a DCI through
/// `SendQueue::post_dc`, its doorbell a BlueFlame copy of both WQEBBs.
/// `#[no_mangle]` and never inlined, for `--toggle-collect`.
#[no_mangle]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub fn ours_post_dc_write(
    sq: &mut mlx5_dv::driver::SendQueue,
    av: &[u8; 48],
    dctn: u32,
    dc_key: u64,
    wr_id: u64,
    raddr: u64,
    rkey: u32,
    addr: u64,
    lkey: u32,
    len: u32,
) -> bool {
    use mlx5_dv::driver::Seg;
    sq.post_dc(
        WqeOpcode::RDMA_WRITE,
        CtrlFlags::CQ_UPDATE,
        0,
        av,
        dctn,
        dc_key,
        Some(Seg::raddr(raddr, rkey)),
        Seg::data(addr, len, lkey),
        wr_id,
    )
    .is_ok()
}

/// [`ours_post_dc_write`] through the gated room (`SendQueue::dc_room`,
/// its steps, `WrittenDc::ring`), and `post_dc` when the gate refuses.
#[no_mangle]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub fn ours_dc_room_write(
    sq: &mut mlx5_dv::driver::SendQueue,
    av: &[u8; 48],
    dctn: u32,
    dc_key: u64,
    wr_id: u64,
    raddr: u64,
    rkey: u32,
    addr: u64,
    lkey: u32,
    len: u32,
) -> bool {
    use mlx5_dv::driver::Seg;
    let Some(mut room) = sq.dc_room() else {
        return ours_post_dc_write(sq, av, dctn, dc_key, wr_id, raddr, rkey, addr, lkey, len);
    };
    if room.datagram(av, dctn, dc_key).is_err() {
        return false;
    }
    room.raddr(Seg::raddr(raddr, rkey));
    room.data(Seg::data(addr, len, lkey), true);
    room.finish(WqeOpcode::RDMA_WRITE, CtrlFlags::CQ_UPDATE, 0, 6, wr_id)
        .ring();
    true
}

/// `n` DC WRITEs through [`ours_post_dc_write`] (`ours_dc_write`) or
/// [`ours_dc_room_write`] (`ours_dc_room`) on an SQ of 256 WQEBBs over
/// plain memory (doorbell record and BlueFlame pair ordinary stores), as
/// `cb_dc_write`'s; each WQE retired outside the call.
fn ours_dc(op: &str, n: u32) {
    let mut ring = vec![0u64; 256 * WQEBB / 8];
    let mut dbrec = [0u32; 2];
    let mut bf = vec![0u64; 64];
    let mut qp = mlx5_dv::dv::mlx5dv_qp::zeroed();
    qp.sq.buf = ring.as_mut_ptr().cast();
    qp.sq.wqe_cnt = 256;
    qp.sq.stride = 64;
    qp.dbrec = dbrec.as_mut_ptr();
    qp.bf.reg = bf.as_mut_ptr().cast();
    qp.bf.size = 256;
    // SAFETY: the description names memory this function owns and nothing
    // else touches while `sq` lives.
    let mut sq =
        unsafe { mlx5_dv::driver::SendQueue::new(&qp, 0x1234, 0, 128) }.expect("send queue");
    // 128 WRs of at most 2 WQEBBs fit 256: the room is implied, and the
    // two-WQEBB gate opens.
    assert!(sq.limit_wqe_size(2));
    sq.set_ud_gate(true);
    let av = [0u8; 48];
    let post = if op == "ours_dc_write" {
        ours_post_dc_write
    } else {
        ours_dc_room_write
    };
    for _ in 0..n {
        assert!(post(
            &mut sq,
            black_box(&av),
            0x4321,
            0x0123_4567_89ab_cdef,
            7,
            0x7f00_0000_9000,
            0x22,
            0x7f00_0000_1000,
            0x11,
            4096,
        ));
        let last = sq.pi().wrapping_sub(2) as u16;
        sq.complete(last).expect("the WQE just posted");
    }
    black_box((&ring, &bf, &dbrec));
}

/// The C driver baseline (`driver.c`) over rings in plain memory: `n` calls
/// of the entry point `op` names, the bookkeeping between calls (retiring
/// the SQ, writing the CQEs the next poll takes) outside it.
fn c_driver(op: &str, n: u32) {
    use mlx5_dv_oracle::driver::{self, Cq, Sq, Wc, Write};
    if !driver::available() {
        eprintln!("insn_count: the C baseline was built without <infiniband/mlx5dv.h>");
        std::process::exit(2);
    }
    const WQEBBS: u32 = 256;
    const CQES: u32 = 256;
    let mut ring = vec![0u8; WQEBBS as usize * WQEBB];
    let mut wrid = vec![0u64; WQEBBS as usize];
    let mut wqe_head = vec![0u32; WQEBBS as usize];
    let mut dbrec = [0u32; 2];
    let mut bf = vec![0u64; 64];
    let mut sq = Sq {
        buf: ring.as_mut_ptr(),
        wqe_cnt: WQEBBS,
        qpn: 0x1234,
        dbrec: dbrec.as_mut_ptr(),
        bf_reg: bf.as_mut_ptr().cast(),
        bf_size: 256,
        bf_offset: 0,
        cur_post: 0,
        head: 0,
        tail: 0,
        max_post: 128,
        wrid: wrid.as_mut_ptr(),
        wqe_head: wqe_head.as_mut_ptr(),
    };
    let w = Write {
        wr_id: 7,
        raddr: 0x7f00_0000_9000,
        addr: 0x7f00_0000_1000,
        rkey: 0x22,
        lkey: 0x11,
        len: 4096,
        signaled: 1,
    };
    let data = [0x5au8; 64];
    let mut cqes = vec![0u8; CQES as usize * 64];
    for c in cqes.chunks_mut(64) {
        c[63] = 0xf0; // INVALID, owner 0
    }
    let mut cq_dbrec = [0u32; 2];
    let mut cq = Cq {
        buf: cqes.as_mut_ptr(),
        cqe_cnt: CQES,
        ci: 0,
        dbrec: cq_dbrec.as_mut_ptr(),
    };
    let cqe = |owner: u8| {
        Cqe {
            opcode: CqeOpcode::REQ,
            wqe_opcode: WqeOpcode::RDMA_WRITE,
            qpn: 0x1234,
            wqe_counter: 0,
            byte_cnt: 4096,
            imm: 0,
            solicited: false,
            format: 0,
            syndrome: Syndrome(0),
            vendor_syndrome: 0,
            flags_rqpn: 0,
            owner: false,
        }
        .encode(owner)
    };
    let owned = [cqe(0), cqe(1)];
    let mut wc = [Wc::default(); 16];
    // Writes `k` software-owned CQEs from the consumer index on.
    let produce = |cq: &Cq, k: u32, cqes: &mut [u8]| {
        for j in 0..k {
            let i = cq.ci.wrapping_add(j);
            let at = (i & (CQES - 1)) as usize * 64;
            cqes[at..at + 64].copy_from_slice(&owned[((i / CQES) & 1) as usize]);
        }
    };
    let batch = [w; 32];
    let av = [0u8; 48];
    // An SRQ of 64 WQEs of 32 bytes (issue 15's receive-completion row).
    let mut srq_ring = vec![0u8; 64 * 32];
    let mut srq_wrid: Vec<u64> = (0..64).collect();
    let mut srq = driver::Srq {
        buf: srq_ring.as_mut_ptr(),
        stride: 32,
        tail: 63,
        wrid: srq_wrid.as_mut_ptr(),
    };
    if op == "cb_dc_write" {
        assert!(driver::available_dc(), "driver_dc.c built without mlx5dv.h");
    }
    if op == "cb_ud_send" || op == "cb_poll_srq" {
        assert!(
            driver::available15(),
            "driver_ud_srq.c built without mlx5dv.h"
        );
    }
    // Issue 29's receive rows (driver_recv.c): a QP's own RQ of 64 WQEs of
    // 16 bytes (one data segment: what `QpConfig::default()` makes), and an
    // SRQ of 64 WQEs of 32 bytes (next segment, one data segment: what
    // `create_srq(64, 1)` makes) whose free list runs 0, 1, .., 63.
    if matches!(
        op,
        "cb_post_recv" | "cb_post_srq_recv" | "cb_poll_rq" | "cb_poll_ud_recv" | "cb_poll_srq_recv"
    ) {
        assert!(
            driver::available29(),
            "driver_recv.c built without mlx5dv.h"
        );
    }
    let mut rq_ring = vec![0u8; 64 * 16];
    let mut rq_wrid: Vec<u64> = (0..64).collect();
    let mut rq = driver::Rq {
        buf: rq_ring.as_mut_ptr(),
        wqe_cnt: 64,
        wqe_shift: 4,
        max_gs: 1,
        max_post: 64,
        head: 0,
        tail: 0,
        wrid: rq_wrid.as_mut_ptr(),
        dbrec: dbrec.as_mut_ptr(),
    };
    let mut psrq_ring = vec![0u8; 64 * 32];
    for i in 0..64usize {
        psrq_ring[i * 32 + 2..i * 32 + 4].copy_from_slice(&((i as u16 + 1) & 63).to_be_bytes());
    }
    let mut psrq_wrid = vec![0u64; 64];
    let mut srq_db = 0u32;
    let mut psrq = driver::PostSrq {
        buf: psrq_ring.as_mut_ptr(),
        wqe_shift: 5,
        max_gs: 1,
        head: 0,
        tail: 63,
        counter: 0,
        wrid: psrq_wrid.as_mut_ptr(),
        db: &mut srq_db,
    };
    let mut recv_sge = driver::IbvSge {
        addr: 0x7f00_0000_1000,
        length: 64,
        lkey: 0x11,
    };
    // A responder CQE of a SEND of 64 bytes into (S)RQ WQE `idx`: RC (no
    // source QPN), or from QPN 0x99 with a GRH (UD, and the SRQ row's).
    let rq_cqe = |owner: u8, idx: u16, flags_rqpn: u32| {
        Cqe {
            opcode: CqeOpcode::RESP_SEND,
            wqe_opcode: WqeOpcode(0),
            qpn: 0x1234,
            wqe_counter: idx,
            byte_cnt: 64,
            imm: 0,
            solicited: false,
            format: 0,
            syndrome: Syndrome(0),
            vendor_syndrome: 0,
            flags_rqpn,
            owner: false,
        }
        .encode(owner)
    };
    for _ in 0..n {
        match op {
            "cb_post_write" => {
                // SAFETY: `sq` describes the vectors above, which live to the
                // end of this function (so for every call below).
                assert_eq!(unsafe { driver::cb_post_write(&mut sq, black_box(&w)) }, 0);
                sq.tail = sq.head;
            }
            "cb_post_inline" => {
                // SAFETY: as for cb_post_write; `data` holds the 64 bytes.
                let r = unsafe {
                    driver::cb_post_inline_write(
                        &mut sq,
                        7,
                        0x7f00_0000_9000,
                        0x22,
                        black_box(data.as_ptr()),
                        64,
                        1,
                    )
                };
                assert_eq!(r, 0);
                sq.tail = sq.head;
            }
            "cb_batch32" => {
                // SAFETY: as for cb_post_write; `batch` holds the 32 WRs.
                let r =
                    unsafe { driver::cb_post_write_batch(&mut sq, black_box(batch.as_ptr()), 32) };
                assert_eq!(r, 0);
                sq.tail = sq.head;
            }
            "cb_ud_send" => {
                // SAFETY: as for cb_post_write; `av` holds 48 bytes.
                let r = unsafe {
                    driver::cb_post_ud_send(
                        &mut sq,
                        black_box(av.as_ptr()),
                        0x4321,
                        0x1111_1111,
                        7,
                        0x7f00_0000_1000,
                        0x11,
                        64,
                    )
                };
                assert_eq!(r, 0);
                sq.tail = sq.head;
            }
            "cb_dc_write" => {
                // SAFETY: as for cb_post_write; `av` holds 48 bytes.
                let r = unsafe {
                    driver::cb_post_dc_write(
                        &mut sq,
                        black_box(av.as_ptr()),
                        0x4321,
                        0x0123_4567_89ab_cdef,
                        7,
                        0x7f00_0000_9000,
                        0x22,
                        0x7f00_0000_1000,
                        0x11,
                        4096,
                    )
                };
                assert_eq!(r, 0);
                sq.tail = sq.head;
            }
            "cb_poll_srq" => {
                let i = cq.ci;
                let at = (i & (CQES - 1)) as usize * 64;
                let c = rq_cqe(((i / CQES) & 1) as u8, (i % 64) as u16, 1 << 28 | 0x99);
                cqes[at..at + 64].copy_from_slice(&c);
                let mut rwc = driver::RecvWc::default();
                // SAFETY: `cq` and `srq` describe the vectors here, which
                // live to the end of this function.
                let got = unsafe { driver::cb_poll_srq(&mut cq, &mut srq, &mut rwc) };
                assert_eq!(got, 1);
                black_box(rwc);
            }
            "cb_poll_srq_recv" => {
                // As cb_poll_srq's, on the SRQ cb_post_srq_recv posts to.
                let i = cq.ci;
                let at = (i & (CQES - 1)) as usize * 64;
                let c = rq_cqe(((i / CQES) & 1) as u8, (i % 64) as u16, 1 << 28 | 0x99);
                cqes[at..at + 64].copy_from_slice(&c);
                let mut rwc = driver::RecvCompletion::default();
                // SAFETY: `cq` and `psrq` describe the vectors here, which
                // live to the end of this function.
                let got = unsafe { driver::cb_poll_srq_recv(&mut cq, &mut psrq, &mut rwc) };
                assert_eq!(got, 1);
                black_box(rwc);
            }
            "cb_post_recv" => {
                let mut wr = driver::IbvRecvWr {
                    wr_id: 9,
                    next: std::ptr::null_mut(),
                    sg_list: &mut recv_sge,
                    num_sge: 1,
                };
                let mut bad = std::ptr::null_mut();
                // SAFETY: `rq` describes the vectors above, which live to the
                // end of this function; `wr` is one WR of one SGE.
                let r = unsafe { driver::cb_post_recv(&mut rq, black_box(&mut wr), &mut bad) };
                assert_eq!(r, 0);
                // The device took it and its completion was polled.
                rq.tail = rq.head;
            }
            "cb_post_srq_recv" => {
                let mut wr = driver::IbvRecvWr {
                    wr_id: 9,
                    next: std::ptr::null_mut(),
                    sg_list: &mut recv_sge,
                    num_sge: 1,
                };
                let mut bad = std::ptr::null_mut();
                let taken = psrq.head as usize;
                // SAFETY: `psrq` describes the vectors above, which live to
                // the end of this function, its free list linked; `wr` is one
                // WR of one SGE.
                let r =
                    unsafe { driver::cb_post_srq_recv(&mut psrq, black_box(&mut wr), &mut bad) };
                assert_eq!(r, 0);
                // The device took it and its completion was polled: the WQE
                // goes back to the list's tail (as cb_poll_srq relinks it).
                let t = psrq.tail as usize * 32;
                psrq_ring[t + 2..t + 4].copy_from_slice(&(taken as u16).to_be_bytes());
                psrq.tail = taken as u32;
            }
            "cb_poll_rq" | "cb_poll_ud_recv" => {
                // The receive was posted, and the device completed it.
                let idx = (rq.head & 63) as u16;
                rq.head += 1;
                let i = cq.ci;
                let at = (i & (CQES - 1)) as usize * 64;
                let flags = if op == "cb_poll_rq" {
                    0
                } else {
                    1 << 28 | 0x99
                };
                cqes[at..at + 64].copy_from_slice(&rq_cqe(((i / CQES) & 1) as u8, idx, flags));
                let mut rwc = driver::RecvCompletion::default();
                // SAFETY: `cq` and `rq` describe the vectors here, which
                // live to the end of this function.
                let got = unsafe {
                    if op == "cb_poll_rq" {
                        driver::cb_poll_rq(&mut cq, &mut rq, &mut rwc)
                    } else {
                        driver::cb_poll_ud_recv(&mut cq, &mut rq, &mut rwc)
                    }
                };
                assert_eq!((got, rwc.wr_id), (1, idx as u64));
                black_box(rwc);
            }
            "cb_poll1" | "cb_poll16" | "cb_poll_empty" => {
                let k = match op {
                    "cb_poll1" => 1,
                    "cb_poll16" => 16,
                    _ => 0,
                };
                produce(&cq, k, &mut cqes);
                // SAFETY: `sq` and `cq` describe the vectors above; `wc`
                // holds the 16 entries asked for.
                let got = unsafe { driver::cb_poll(&mut cq, &mut sq, wc.as_mut_ptr(), 16) };
                assert_eq!(got, k as i32);
            }
            other => {
                eprintln!("insn_count: unknown op {other:?}");
                std::process::exit(2);
            }
        }
    }
    black_box((&ring, &bf, &dbrec, &cq_dbrec, &wc, &srq_ring, &srq_wrid));
    black_box((&rq_ring, &rq_wrid, &psrq_ring, &psrq_wrid, srq_db));
}
