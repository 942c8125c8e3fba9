//! Registered memory end to end on the sim, through the public API, sized
//! for Miri (`scripts/miri` runs this file under it; natively it takes
//! milliseconds): the crate docs' WRITE, a READ, an inline WRITE and a
//! pool's buffers, each checked byte for byte, and the lifetimes
//! `docs/architecture.md` ("Memory and lifetimes") promises: the `Pd`
//! keeps an MR a posted WQE names alive after its last handle is gone, and
//! a `Qp` keeps its `Pd` and `Context` alive. Under Miri the sim's device
//! thread runs too, so every DMA into and out of the MRs and every ring
//! access is checked for use after free, out-of-bounds and data races.

use rdma_direct::pool::{Pool, PoolConfig};
use rdma_direct::{
    Access, Completion, Context, Mr, Qp, QpConfig, RemoteAddr, SendWr, Sge, WcOpcode,
};

/// Small rings: fewer bytes for Miri to set up and check.
fn cfg() -> QpConfig {
    QpConfig {
        max_send_wr: 8,
        max_recv_wr: 8,
        ..QpConfig::default()
    }
}

fn remote(mr: &Mr, offset: u64) -> RemoteAddr {
    RemoteAddr {
        addr: mr.addr() + offset,
        rkey: mr.rkey(),
    }
}

/// Polls until one completion arrives and checks it succeeded.
fn one_completion(qp: &mut Qp) -> Completion {
    let mut wc = [Completion::default(); 1];
    while qp.poll(&mut wc).unwrap() == 0 {
        std::thread::yield_now();
    }
    assert!(wc[0].status.is_ok(), "{:?}", wc[0]);
    wc[0]
}

/// The crate docs' example, then the bytes it wrote.
#[test]
fn the_docs_write_lands_in_the_remote_mr() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let src = pd.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    let dst = pd
        .reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let (mut a, b) = pd.create_connected_pair(&cfg()).unwrap();
    src.write(0, b"hello").unwrap();
    let sge = [Sge::new(&src, 0, 5).unwrap()];
    let wr = SendWr::rdma_write(1, &sge, remote(&dst, 100)).signaled();
    a.post_send(&[wr]).unwrap();
    let wc = one_completion(&mut a);
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.byte_len),
        (1, WcOpcode::RDMA_WRITE, 5)
    );
    let mut got = [0xffu8; 7];
    dst.read(99, &mut got).unwrap();
    assert_eq!(&got, b"\0hello\0");
    // The QPs go first, then the MRs, the PD and the context.
    drop((a, b));
    drop((src, dst));
    drop(pd);
    drop(ctx);
}

/// A READ copies the remote bytes into the local MR; an inline WRITE
/// copies from the local MR at post time.
#[test]
fn read_and_inline_write_copy_the_right_bytes() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let local = pd.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    let far = pd
        .reg_mr(
            8192,
            Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
        )
        .unwrap();
    let pattern: Vec<u8> = (0..200u32).map(|i| (i * 7 + 3) as u8).collect();
    far.write(5000, &pattern).unwrap();
    let (mut a, _b) = pd.create_connected_pair(&cfg()).unwrap();

    let sge = [Sge::new(&local, 10, 200).unwrap()];
    a.post_send(&[SendWr::rdma_read(2, &sge, remote(&far, 5000)).signaled()])
        .unwrap();
    let wc = one_completion(&mut a);
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.byte_len),
        (2, WcOpcode::RDMA_READ, 200)
    );
    let mut got = vec![0u8; 202];
    local.read(9, &mut got).unwrap();
    assert_eq!(got[0], 0);
    assert_eq!(&got[1..201], &pattern[..]);
    assert_eq!(got[201], 0);

    // Inline: the payload is copied into the WQE when posted, so changing
    // the source afterwards does not change what lands.
    local.write(0, b"inline!").unwrap();
    let sge = [Sge::new(&local, 0, 7).unwrap()];
    a.post_send(&[SendWr::rdma_write(3, &sge, remote(&far, 0))
        .inline()
        .signaled()])
        .unwrap();
    local.write(0, b"changed").unwrap();
    assert_eq!(one_completion(&mut a).wr_id, 3);
    let mut got = [0u8; 7];
    far.read(0, &mut got).unwrap();
    assert_eq!(&got, b"inline!");
}

/// Dropping every handle of an MR after posting a WRITE into it, and the
/// `Pd` and `Context` handles too, frees nothing the device still uses:
/// the `Pd` holds the MR and the `Qp` holds the `Pd` (under Miri a freed
/// buffer the sim wrote into would be reported as a use after free).
#[test]
fn the_pd_and_the_qp_keep_posted_memory_alive() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let src = pd.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    let dst = pd
        .reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let (mut a, b) = pd.create_connected_pair(&cfg()).unwrap();
    src.write(0, &[0xab; 64]).unwrap();
    {
        let sge = [Sge::new(&src, 0, 64).unwrap()];
        a.post_send(&[SendWr::rdma_write(4, &sge, remote(&dst, 0)).signaled()])
            .unwrap();
    }
    drop(src);
    drop(dst);
    drop(pd);
    drop(ctx);
    assert_eq!(one_completion(&mut a).wr_id, 4);
    drop(a);
    drop(b);
}

/// Arming the CQ while the sim may be writing a CQE: the sim reads the arm
/// doorbell after each CQE it writes, while the host writes it. Miri
/// reported a data race here (a volatile UAR store against the sim's plain
/// read) before both became atomic (`mmio::write_uar_doorbell`). Waiting
/// for the event itself takes `poll(2)`, which Miri cannot run: the CQ is
/// busy-polled instead.
#[test]
fn arming_while_the_sim_completes_is_no_data_race() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let src = pd.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    let dst = pd
        .reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let (mut a, _b) = pd.create_connected_pair(&cfg()).unwrap();
    let sge = [Sge::new(&src, 0, 8).unwrap()];
    for i in 0..3 {
        a.post_send(&[SendWr::rdma_write(i, &sge, remote(&dst, 0)).signaled()])
            .unwrap();
        a.arm_cq(false).unwrap();
        assert_eq!(one_completion(&mut a).wr_id, i);
    }
}

/// Two buffers of a small pool (its chunks are anonymous mappings): a WRITE
/// from one to the other, and a buffer returned and handed out again.
#[test]
fn a_pool_buffer_writes_into_another() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let pool = Pool::new(
        &pd,
        &PoolConfig {
            chunk_size: 8192,
            chunks: 1,
            buf_size: 4096,
            ..PoolConfig::default()
        },
    )
    .unwrap();
    let x = pool.alloc().unwrap();
    let y = pool.alloc().unwrap();
    assert_eq!(pool.available(), 0);
    let (mut a, _b) = pd.create_connected_pair(&cfg()).unwrap();
    x.write(0, b"from the pool").unwrap();
    let sge = [x.sge(0, 13).unwrap()];
    a.post_send(&[SendWr::rdma_write(5, &sge, y.remote(4000).unwrap()).signaled()])
        .unwrap();
    assert_eq!(one_completion(&mut a).wr_id, 5);
    let mut got = [0u8; 13];
    y.read(4000, &mut got).unwrap();
    assert_eq!(&got, b"from the pool");
    drop(y);
    assert_eq!(pool.available(), 1);
    let z = pool.alloc().unwrap();
    z.read(4000, &mut got).unwrap();
    assert_eq!(&got, b"from the pool");
}
