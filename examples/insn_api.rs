//! The public API's post and poll, run `N` times on the sim for instruction
//! counts under callgrind (`scripts/insn-count`, which counts only inside
//! the `#[inline(never)]` entry points below with `--toggle-collect`, so
//! neither this loop nor the sim's device thread is counted). Not an example
//! of use: a measurement harness.
//!
//! `insn_api <op> <N>`, op one of:
//! - `api_write1`: `Qp::post_write` of one signaled 1-SGE RDMA WRITE (its
//!   `WriteWr` read from memory, as the C baseline reads its `cb_write`);
//! - `api_write_inline1`: `Qp::post_write_inline` of 64 bytes, signaled
//!   (the flags a run-time value, as the C baseline's);
//! - `api_writes32`: `Qp::post_writes` of 32 1-SGE WRITEs, the last signaled;
//! - `api_post_write`: `Qp::post_send` of one signaled 1-SGE RDMA WRITE;
//! - `api_post_inline`: of one signaled 64-byte inline RDMA WRITE;
//! - `api_batch32`: of 32 1-SGE WRITEs, the last signaled (one doorbell);
//! - `api_poll1`, `api_poll16`: `Qp::poll` taking 1 or 16 completions (the
//!   CQEs are there before the call: `SimHook::cqes_ready`);
//! - `api_poll_empty`: `Qp::poll` of an empty CQ;
//! - `api_shared_poll_empty`: `SharedCq::poll` of an empty shared CQ (one
//!   connected QP on it);
//! - `api_half_write1`: `SendHalf::post_write` of one signaled 1-SGE RDMA
//!   WRITE (issue 16);
//! - `api_ud_post`: `Qp::post_send` of one signaled 1-SGE UD SEND;
//!   `api_srq_poll`: `Qp::poll` of one receive completion of a QP on an SRQ
//!   (issue 15);
//! - `api_post_recv`: `Qp::post_recv` of one 1-SGE receive on the QP's own
//!   RQ; `api_srq_post_recv`: `Srq::post_recv` of one 1-SGE receive (the
//!   peer's SEND takes each, and its completions are polled, uncounted);
//! - `api_rq_poll`, `api_ud_poll`: `Qp::poll` into a 1-entry slice of one
//!   receive completion of an RC, a UD QP's own RQ (the receive posted and
//!   the peer's SEND completed before the call) (issue 29);
//! - `api_poll16_zip`: `Qp::poll` taking 16 completions of 16 signaled
//!   WRITEs that the sim wrote as one compressed session (a title and two
//!   mini-CQE arrays; `QpConfig::cqe_compression`): the expansion counted
//!   per completion, beside `api_poll16` (issue 29);
//! - `api_dc_post`: `Qp::post_dc` of one signaled 1-SGE RDMA WRITE from a
//!   DCI to a DCT; `api_dc_poll`: `Qp::poll` of that WRITE's completion on
//!   the DCI (the CQE there before the call) (issue 30).

use rdma_direct::testing::QpHooks;
use rdma_direct::{
    Access, Completion, Context, CqSizing, DcDest, Qp, QpConfig, QpType, RecvWr, RemoteAddr,
    SendFlags, SendHalf, SendWr, Sge, SharedCq, Srq, UdDest, WriteWr,
};
use std::hint::black_box;

#[no_mangle]
#[inline(never)]
pub fn api_post_send(qp: &mut Qp, wrs: &[SendWr<'_>]) -> rdma_direct::Result<()> {
    qp.post_send(wrs)
}

#[no_mangle]
#[inline(never)]
pub fn api_post_dc(qp: &mut Qp, dest: &DcDest<'_>, wrs: &[SendWr<'_>]) -> rdma_direct::Result<()> {
    qp.post_dc(dest, wrs)
}

#[no_mangle]
#[inline(never)]
pub fn api_post_write(qp: &mut Qp, w: &WriteWr<'_>) -> rdma_direct::Result<()> {
    qp.post_write(w)
}

#[no_mangle]
#[inline(never)]
pub fn api_half_post_write(tx: &mut SendHalf, w: &WriteWr<'_>) -> rdma_direct::Result<()> {
    tx.post_write(w)
}

#[no_mangle]
#[inline(never)]
pub fn api_post_write_inline(
    qp: &mut Qp,
    wr_id: u64,
    data: &[u8],
    remote: &RemoteAddr,
    flags: SendFlags,
) -> rdma_direct::Result<()> {
    qp.post_write_inline(wr_id, data, *remote, flags)
}

#[no_mangle]
#[inline(never)]
pub fn api_post_writes(qp: &mut Qp, wrs: &[WriteWr<'_>]) -> rdma_direct::Result<()> {
    qp.post_writes(wrs)
}

#[no_mangle]
#[inline(never)]
pub fn api_poll(qp: &mut Qp, out: &mut [Completion]) -> rdma_direct::Result<usize> {
    qp.poll(out)
}

#[no_mangle]
#[inline(never)]
pub fn api_post_recv(qp: &mut Qp, wrs: &[RecvWr<'_>]) -> rdma_direct::Result<()> {
    qp.post_recv(wrs)
}

#[no_mangle]
#[inline(never)]
pub fn api_srq_post_recv(srq: &mut Srq, wrs: &[RecvWr<'_>]) -> rdma_direct::Result<()> {
    srq.post_recv(wrs)
}

#[no_mangle]
#[inline(never)]
pub fn api_shared_poll(cq: &mut SharedCq, out: &mut [Completion]) -> rdma_direct::Result<usize> {
    cq.poll(out)
}

/// Polls (not counted) until `k` completions came.
fn drain(qp: &mut Qp, k: usize) {
    let mut wc = [Completion::default(); 32];
    let mut got = 0;
    while got < k {
        let n = qp.poll(&mut wc).expect("poll");
        assert!(wc[..n].iter().all(|c| c.status.is_ok()), "{:?}", &wc[..n]);
        got += n;
        if n == 0 {
            // Under valgrind the threads take turns: let the sim's run.
            std::thread::yield_now();
        }
    }
}

fn main() -> rdma_direct::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(op), Some(n)) = (args.get(1), args.get(2).and_then(|n| n.parse::<u32>().ok())) else {
        eprintln!("usage: insn_api <api_write1|api_half_write1|api_write_inline1|api_writes32|api_post_write|api_post_inline|api_batch32|api_poll1|api_poll16|api_poll_empty|api_shared_poll_empty|api_ud_post|api_srq_poll|api_post_recv|api_srq_post_recv|api_rq_poll|api_ud_poll|api_poll16_zip|api_dc_post|api_dc_poll> <N>");
        std::process::exit(2);
    };
    let ctx = Context::open("sim")?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig {
        max_send_wr: 64,
        max_inline: 64,
        ..QpConfig::default()
    };
    let (mut a, _b) = pd.create_connected_pair(&cfg)?;
    // Issue 29's compressed row: a pair whose CQs compress.
    let (mut zip_a, _zip_b) = pd.create_connected_pair(&QpConfig {
        cqe_compression: true,
        ..cfg
    })?;
    let src = pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let to = RemoteAddr {
        addr: dst.addr(),
        rkey: dst.rkey(),
    };
    let sge = [Sge::new(&src, 0, 64)?];
    let write = SendWr::rdma_write(1, &sge, to).signaled();
    // The inline payload is plain bytes, as the C baseline's (an Mr's would
    // be read one atomic byte at a time: a peer may write it meanwhile).
    let payload = [0x5au8; 64];
    let bytes = [Sge::bytes(&payload)?];
    let inline = SendWr::rdma_write(2, &bytes, to).inline().signaled();
    let write1 = WriteWr::new(1, sge[0], to).signaled();
    let mut batch = [SendWr::rdma_write(3, &sge, to); 32];
    batch[31] = batch[31].signaled();
    let mut writes = [WriteWr::new(3, sge[0], to); 32];
    writes[31] = writes[31].signaled();
    let mut out = [Completion::default(); 16];
    // A shared CQ with one QP on it, connected to a QP of its own CQ.
    let mut shared = pd.create_shared_cq(CqSizing::new().qp(&cfg).depth()?)?;
    let on_shared = shared.create_qp(&cfg)?;
    let mut peer = pd.create_qp(&cfg)?;
    Qp::connect_loopback(shared.qp_mut(on_shared), &mut peer)?;
    // Issue 15's rows: a UD pair, and a receiver on an SRQ with its sender.
    let ud_cfg = QpConfig {
        qp_type: QpType::Ud,
        max_inline: 0,
        ..cfg
    };
    let (mut ud_a, mut ud_b) = (pd.create_qp(&ud_cfg)?, pd.create_qp(&ud_cfg)?);
    ud_a.ready_ud(0x1111_1111)?;
    ud_b.ready_ud(0x1111_1111)?;
    let ah = pd.create_ah(&ud_a.av_to(&ud_b.endpoint()))?;
    let ud_wr = SendWr::ud_send(
        4,
        &sge,
        UdDest {
            ah: &ah,
            remote_qpn: ud_b.qp_num(),
            qkey: 0x1111_1111,
        },
    )
    .signaled();
    let mut srq = pd.create_srq(64, 1)?;
    let mut srq_rx = pd.create_qp_on_srq(&cfg, &srq)?;
    let mut srq_tx = pd.create_qp(&cfg)?;
    Qp::connect_loopback(&mut srq_rx, &mut srq_tx)?;
    let rbuf = [Sge::new(&dst, 0, 64)?];
    // Issue 16's row: the send half of a split QP (its CQ polled by the QP).
    let (mut split_a, _split_b) = pd.create_connected_pair(&cfg)?;
    let (mut half_tx, _half_rx) = split_a.split()?;
    let send = SendWr::send(5, &sge).signaled();
    // Issue 29's rows: an RC pair whose first QP receives on its own RQ
    // (and the UD pair above, ud_b receiving: 40 bytes of GRH, then 64).
    let (mut rc_rx, mut rc_tx) = pd.create_connected_pair(&cfg)?;
    let ud_rbuf = [Sge::new(&dst, 0, 128)?];
    // Issue 30's rows: a DCI and a DCT (on an SRQ) of the same PD.
    let dc_srq = pd.create_srq(4, 1)?;
    let mut dct = pd.create_qp_on_srq(
        &QpConfig {
            qp_type: QpType::Dct,
            dc_key: 0xdc,
            ..cfg
        },
        &dc_srq,
    )?;
    dct.ready_dct()?;
    let mut dci = pd.create_qp(&QpConfig {
        qp_type: QpType::Dci,
        ..cfg
    })?;
    dci.ready_dci()?;
    let dc_ah = pd.create_ah(&dci.av_to(&dct.endpoint()))?;
    let dc_to = DcDest {
        ah: &dc_ah,
        dctn: dct.dct_number().expect("a DCT in RTR"),
        key: 0xdc,
    };
    for _ in 0..n {
        match op.as_str() {
            "api_post_write" => {
                api_post_send(&mut a, std::slice::from_ref(black_box(&write)))?;
                drain(&mut a, 1);
            }
            "api_write1" => {
                api_post_write(&mut a, black_box(&write1))?;
                drain(&mut a, 1);
            }
            "api_half_write1" => {
                api_half_post_write(&mut half_tx, black_box(&write1))?;
                drain(&mut split_a, 1);
            }
            "api_write_inline1" => {
                let (id, data, r, f) = black_box((2, &payload[..], &to, SendFlags::SIGNALED));
                api_post_write_inline(&mut a, id, data, r, f)?;
                drain(&mut a, 1);
            }
            "api_post_inline" => {
                api_post_send(&mut a, std::slice::from_ref(black_box(&inline)))?;
                drain(&mut a, 1);
            }
            "api_writes32" => {
                api_post_writes(&mut a, black_box(&writes))?;
                drain(&mut a, 1);
            }
            "api_batch32" => {
                api_post_send(&mut a, black_box(&batch))?;
                drain(&mut a, 1);
            }
            "api_poll1" | "api_poll16" => {
                let k = if op == "api_poll1" { 1 } else { 16 };
                a.post_send(&vec![write; k])?;
                let hook = a.sim_hook().expect("the sim");
                while !hook.cqes_ready(k as u32) {
                    std::thread::yield_now();
                }
                let got = api_poll(&mut a, black_box(&mut out))?;
                assert_eq!(got, k, "the CQEs were there");
            }
            "api_poll16_zip" => {
                zip_a.post_send(&[write; 16])?;
                let hook = zip_a.sim_hook().expect("the sim");
                while !hook.cqes_ready(16) {
                    std::thread::yield_now();
                }
                let got = api_poll(&mut zip_a, black_box(&mut out))?;
                assert_eq!(got, 16, "the session was there");
            }
            "api_ud_post" => {
                api_post_send(&mut ud_a, std::slice::from_ref(black_box(&ud_wr)))?;
                drain(&mut ud_a, 1);
            }
            "api_srq_poll" => {
                srq.post_recv(&[RecvWr::new(9, &rbuf)])?;
                srq_tx.post_send(&[send])?;
                let hook = srq_rx.sim_hook().expect("the sim");
                while !hook.cqes_ready(1) {
                    std::thread::yield_now();
                }
                let got = api_poll(&mut srq_rx, black_box(&mut out))?;
                assert_eq!((got, out[0].wr_id), (1, 9), "the receive's CQE was there");
                drain(&mut srq_tx, 1);
            }
            "api_post_recv" => {
                api_post_recv(
                    &mut rc_rx,
                    std::slice::from_ref(black_box(&RecvWr::new(9, &rbuf))),
                )?;
                rc_tx.post_send(&[send])?;
                drain(&mut rc_rx, 1);
                drain(&mut rc_tx, 1);
            }
            "api_srq_post_recv" => {
                api_srq_post_recv(
                    &mut srq,
                    std::slice::from_ref(black_box(&RecvWr::new(9, &rbuf))),
                )?;
                srq_tx.post_send(&[send])?;
                drain(&mut srq_rx, 1);
                drain(&mut srq_tx, 1);
            }
            "api_rq_poll" => {
                rc_rx.post_recv(&[RecvWr::new(9, &rbuf)])?;
                rc_tx.post_send(&[send])?;
                let hook = rc_rx.sim_hook().expect("the sim");
                while !hook.cqes_ready(1) {
                    std::thread::yield_now();
                }
                let got = api_poll(&mut rc_rx, black_box(&mut out[..1]))?;
                assert_eq!((got, out[0].wr_id), (1, 9), "the receive's CQE was there");
                drain(&mut rc_tx, 1);
            }
            "api_ud_poll" => {
                ud_b.post_recv(&[RecvWr::new(10, &ud_rbuf)])?;
                ud_a.post_send(&[ud_wr])?;
                let hook = ud_b.sim_hook().expect("the sim");
                while !hook.cqes_ready(1) {
                    std::thread::yield_now();
                }
                let got = api_poll(&mut ud_b, black_box(&mut out[..1]))?;
                let c = out[0];
                assert_eq!(
                    (got, c.wr_id, c.byte_len),
                    (1, 10, 40 + 64),
                    "the receive's CQE was there"
                );
                assert_eq!(c.src_qp.qpn(), ud_a.qp_num());
                drain(&mut ud_a, 1);
            }
            "api_dc_post" => {
                api_post_dc(
                    &mut dci,
                    black_box(&dc_to),
                    std::slice::from_ref(black_box(&write)),
                )?;
                drain(&mut dci, 1);
            }
            "api_dc_poll" => {
                dci.post_dc(&dc_to, &[write])?;
                let hook = dci.sim_hook().expect("the sim");
                while !hook.cqes_ready(1) {
                    std::thread::yield_now();
                }
                let got = api_poll(&mut dci, black_box(&mut out[..1]))?;
                assert_eq!((got, out[0].wr_id), (1, 1), "the WRITE's CQE was there");
            }
            "api_poll_empty" => {
                assert_eq!(api_poll(&mut a, black_box(&mut out))?, 0);
            }
            "api_shared_poll_empty" => {
                assert_eq!(api_shared_poll(&mut shared, black_box(&mut out))?, 0);
            }
            other => {
                eprintln!("insn_api: unknown op {other:?}");
                std::process::exit(2);
            }
        }
    }
    black_box(&out);
    Ok(())
}
