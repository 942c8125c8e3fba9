//! Inline receive (scatter to CQE, [`InlineRecv`]) on the sim, through the
//! public API: SENDs and READs of 1 to 65 bytes on RC with 64- and
//! 128-byte CQEs, on a QP's own RQ and on an SRQ, atomics, a 2-SGE
//! receive, a receive too small, an unsignaled READ, UC and UD, the
//! refusals. Each payload is checked byte for byte, with guard bytes
//! around it, and the sim's count of CQEs that carried data says which
//! came in the CQE (so a test passes only if the copy-out did the work).

use rdma_direct::testing::QpHooks;
use rdma_direct::*;
use std::time::{Duration, Instant};

const GUARD: u8 = 0xee;
/// Where the receive or READ target starts in its MR, and how long its
/// SGE is: bytes before, and after the payload, are guards.
const AT: usize = 64;
const SGE_LEN: u32 = 100;

fn cfg(mode: InlineRecv) -> QpConfig {
    QpConfig {
        max_send_wr: 16,
        max_recv_wr: 16,
        inline_recv: mode,
        ..QpConfig::default()
    }
}

fn payload(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

fn one(qp: &mut Qp) -> Completion {
    let mut wc = [Completion::default(); 1];
    let t = Instant::now();
    while qp.poll(&mut wc).unwrap() == 0 {
        assert!(t.elapsed() < Duration::from_secs(10), "no completion");
        std::thread::yield_now();
    }
    wc[0]
}

fn scattered(q: &mut Qp) -> u64 {
    q.sim_hook().expect("a sim QP").scatter_cqes()
}

/// Checks that `mr` holds `want` at [`AT`] and guard bytes everywhere else.
fn check_target(mr: &Mr, want: &[u8], what: &str) {
    let mut got = vec![0u8; mr.len()];
    mr.read(0, &mut got).unwrap();
    assert_eq!(&got[AT..AT + want.len()], want, "{what}: payload");
    let untouched = got[..AT]
        .iter()
        .chain(&got[AT + want.len()..])
        .all(|&b| b == GUARD);
    assert!(untouched, "{what}: a byte outside the payload changed");
}

/// SENDs of 1, 31, 32, 33, 63, 64 and 65 bytes into one 100-byte SGE: the
/// ones up to the CQE's size (`limit`) come in the CQE, the rest by DMA,
/// all land whole with nothing around them touched; SEND_IMM keeps its
/// immediate.
fn sends_land_whole(mode: InlineRecv, limit: usize) {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let src = pd.alloc_mr(256, Access::LOCAL_WRITE).unwrap();
    let (mut a, mut b) = pd.create_connected_pair(&cfg(mode)).unwrap();
    for (k, n) in [1usize, 31, 32, 33, 63, 64, 65].into_iter().enumerate() {
        let dst = pd.alloc_mr(256, Access::LOCAL_WRITE).unwrap();
        dst.write(0, &[GUARD; 256]).unwrap();
        let data = payload(n, k as u8);
        src.write(0, &data).unwrap();
        let r = [Sge::new(&dst, AT, SGE_LEN).unwrap()];
        b.post_recv(&[RecvWr::new(100 + k as u64, &r)]).unwrap();
        let before = scattered(&mut b);
        let s = [Sge::new(&src, 0, n as u32).unwrap()];
        let mut wr = SendWr::send(k as u64, &s).signaled();
        if k % 2 == 1 {
            wr = wr.imm(0xabc0 + k as u32);
        }
        a.post_send(&[wr]).unwrap();
        let wc = one(&mut b);
        assert_eq!(wc.status, WcStatus::SUCCESS, "{n} bytes: {wc:?}");
        assert_eq!((wc.wr_id, wc.opcode), (100 + k as u64, WcOpcode::RECV));
        assert_eq!(wc.byte_len, n as u32);
        let imm = (k % 2 == 1).then_some(0xabc0 + k as u32);
        assert_eq!(wc.imm, imm, "{n} bytes");
        assert_eq!(wc.src_qp.qpn(), 0, "RC: no source QPN, even under CQE data");
        check_target(&dst, &data, &format!("{n}-byte SEND"));
        let inline = scattered(&mut b) - before;
        assert_eq!(inline, (n <= limit) as u64, "{n} bytes in the CQE?");
        assert!(one(&mut a).status.is_ok());
    }
}

#[test]
fn sends_up_to_32_bytes_come_in_64_byte_cqes_and_land_whole() {
    sends_land_whole(InlineRecv::Up32, 32);
}

#[test]
fn sends_up_to_64_bytes_come_in_128_byte_cqes_and_land_whole() {
    sends_land_whole(InlineRecv::Up64, 64);
}

/// READs of 1..65 bytes into a 100-byte SGE: the signaled ones up to the
/// CQE's size come in the requester's CQE, all land whole.
fn reads_land_whole(mode: InlineRecv, limit: usize) {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let far = pd
        .alloc_mr(256, Access::LOCAL_WRITE | Access::REMOTE_READ)
        .unwrap();
    let (mut a, _b) = pd.create_connected_pair(&cfg(mode)).unwrap();
    for (k, n) in [1usize, 31, 32, 33, 63, 64, 65].into_iter().enumerate() {
        let data = payload(n, 50 + k as u8);
        far.write(8, &data).unwrap();
        let dst = pd.alloc_mr(256, Access::LOCAL_WRITE).unwrap();
        dst.write(0, &[GUARD; 256]).unwrap();
        let before = scattered(&mut a);
        let s = [Sge::new(&dst, AT, n as u32).unwrap()];
        let remote = RemoteAddr {
            addr: far.addr() + 8,
            rkey: far.rkey(),
        };
        a.post_send(&[SendWr::rdma_read(k as u64, &s, remote).signaled()])
            .unwrap();
        let wc = one(&mut a);
        assert_eq!(wc.status, WcStatus::SUCCESS, "{n} bytes: {wc:?}");
        assert_eq!((wc.wr_id, wc.opcode), (k as u64, WcOpcode::RDMA_READ));
        assert_eq!(wc.byte_len, n as u32);
        check_target(&dst, &data, &format!("{n}-byte READ"));
        let inline = scattered(&mut a) - before;
        assert_eq!(inline, (n <= limit) as u64, "{n} bytes in the CQE?");
    }
}

#[test]
fn reads_up_to_32_bytes_come_in_64_byte_cqes_and_land_whole() {
    reads_land_whole(InlineRecv::Up32, 32);
}

#[test]
fn reads_up_to_64_bytes_come_in_128_byte_cqes_and_land_whole() {
    reads_land_whole(InlineRecv::Up64, 64);
}

/// A 2-SGE READ (5 + 20 bytes, apart) and a 2-SGE receive get the data
/// split in order; an unsignaled READ gets its data by DMA (no CQE to
/// carry it), the signaled one after it by the CQE.
#[test]
fn two_sges_split_the_data_and_an_unsignaled_read_is_dmaed() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let far = pd
        .alloc_mr(256, Access::LOCAL_WRITE | Access::REMOTE_READ)
        .unwrap();
    let data = payload(25, 9);
    far.write(0, &data).unwrap();
    let remote = RemoteAddr {
        addr: far.addr(),
        rkey: far.rkey(),
    };
    let dst = pd.alloc_mr(256, Access::LOCAL_WRITE).unwrap();
    dst.write(0, &[GUARD; 256]).unwrap();
    let two = [
        Sge::new(&dst, AT, 5).unwrap(),
        Sge::new(&dst, AT + 40, 20).unwrap(),
    ];
    let unsig = pd.alloc_mr(256, Access::LOCAL_WRITE).unwrap();
    unsig.write(0, &[GUARD; 256]).unwrap();
    let u = [Sge::new(&unsig, AT, 25).unwrap()];
    let two_cfg = QpConfig {
        max_send_sge: 2,
        max_recv_sge: 2,
        ..cfg(InlineRecv::Up32)
    };
    let (mut c, mut d) = pd.create_connected_pair(&two_cfg).unwrap();
    c.post_send(&[
        SendWr::rdma_read(1, &u, remote),
        SendWr::rdma_read(2, &two, remote).signaled(),
    ])
    .unwrap();
    let wc = one(&mut c);
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::SUCCESS));
    assert_eq!(scattered(&mut c), 1, "only the signaled READ in a CQE");
    check_target(&unsig, &data, "unsignaled READ");
    let mut got = vec![0u8; 256];
    dst.read(0, &mut got).unwrap();
    assert_eq!(&got[AT..AT + 5], &data[..5]);
    assert_eq!(&got[AT + 40..AT + 60], &data[5..]);
    got[AT..AT + 5].fill(GUARD);
    got[AT + 40..AT + 60].fill(GUARD);
    assert!(got.iter().all(|&b| b == GUARD), "a byte outside the SGEs");
    // A 2-SGE receive.
    let rdst = pd.alloc_mr(256, Access::LOCAL_WRITE).unwrap();
    rdst.write(0, &[GUARD; 256]).unwrap();
    let r = [
        Sge::new(&rdst, AT, 3).unwrap(),
        Sge::new(&rdst, AT + 10, 30).unwrap(),
    ];
    d.post_recv(&[RecvWr::new(7, &r)]).unwrap();
    let s = [Sge::new(&far, 0, 25).unwrap()];
    c.post_send(&[SendWr::send(3, &s).signaled()]).unwrap();
    let wc = one(&mut d);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (7, WcStatus::SUCCESS, 25)
    );
    assert_eq!(scattered(&mut d), 1);
    rdst.read(0, &mut got).unwrap();
    assert_eq!(&got[AT..AT + 3], &data[..3]);
    assert_eq!(&got[AT + 10..AT + 32], &data[3..]);
    got[AT..AT + 3].fill(GUARD);
    got[AT + 10..AT + 32].fill(GUARD);
    assert!(got.iter().all(|&b| b == GUARD), "a byte outside the SGEs");
}

/// A receive whose SGEs are smaller than the SEND completes with
/// LOC_LEN_ERR and nothing of the SEND lands in it.
#[test]
fn a_receive_too_small_is_a_local_length_error_with_nothing_written() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let (mut a, mut b) = pd.create_connected_pair(&cfg(InlineRecv::Up32)).unwrap();
    let dst = pd.alloc_mr(256, Access::LOCAL_WRITE).unwrap();
    dst.write(0, &[GUARD; 256]).unwrap();
    let r = [Sge::new(&dst, AT, 8).unwrap()];
    b.post_recv(&[RecvWr::new(1, &r)]).unwrap();
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let s = [Sge::new(&src, 0, 20).unwrap()];
    a.post_send(&[SendWr::send(2, &s).signaled()]).unwrap();
    let wc = one(&mut b);
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::LOC_LEN_ERR));
    check_target(&dst, &[], "a receive too small");
}

/// Atomics: the old value (8 bytes) comes in the requester's CQE and
/// lands in the 8-byte SGE.
#[test]
fn atomic_results_come_in_the_cqe() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let far = pd
        .alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_ATOMIC)
        .unwrap();
    far.write(0, &41u64.to_ne_bytes()).unwrap();
    let (mut a, _b) = pd.create_connected_pair(&cfg(InlineRecv::Up32)).unwrap();
    let old = pd.alloc_mr(256, Access::LOCAL_WRITE).unwrap();
    old.write(0, &[GUARD; 256]).unwrap();
    let s = [Sge::new(&old, AT, 8).unwrap()];
    let remote = RemoteAddr {
        addr: far.addr(),
        rkey: far.rkey(),
    };
    a.post_send(&[SendWr::atomic_fetch_add(1, &s, remote, 1).signaled()])
        .unwrap();
    let wc = one(&mut a);
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::SUCCESS, WcOpcode::FETCH_ADD)
    );
    check_target(&old, &41u64.to_ne_bytes(), "fetch-and-add");
    a.post_send(&[SendWr::atomic_cmp_swp(2, &s, remote, 42, 7).signaled()])
        .unwrap();
    let wc = one(&mut a);
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::SUCCESS, WcOpcode::COMP_SWAP)
    );
    check_target(&old, &42u64.to_ne_bytes(), "compare-and-swap");
    assert_eq!(scattered(&mut a), 2);
    let mut v = [0u8; 8];
    far.read(0, &mut v).unwrap();
    assert_eq!(u64::from_ne_bytes(v), 7);
}

/// On an SRQ: the data goes to the SRQ WQE's SGE (after its next
/// segment), with 64- and 128-byte CQEs.
#[test]
fn srq_receives_take_cqe_data() {
    for (mode, limit) in [(InlineRecv::Up32, 32usize), (InlineRecv::Up64, 64)] {
        let ctx = Context::open("sim").unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let mut srq = pd.create_srq(16, 1).unwrap();
        let mut b = pd.create_qp_on_srq(&cfg(mode), &srq).unwrap();
        let mut a = pd.create_qp(&cfg(mode)).unwrap();
        Qp::connect_loopback(&mut a, &mut b).unwrap();
        let src = pd.alloc_mr(256, Access::LOCAL_WRITE).unwrap();
        for (k, n) in [1usize, 32, 33, 64, 65].into_iter().enumerate() {
            let dst = pd.alloc_mr(256, Access::LOCAL_WRITE).unwrap();
            dst.write(0, &[GUARD; 256]).unwrap();
            let r = [Sge::new(&dst, AT, SGE_LEN).unwrap()];
            srq.post_recv(&[RecvWr::new(k as u64, &r)]).unwrap();
            let data = payload(n, 100 + k as u8);
            src.write(0, &data).unwrap();
            let before = scattered(&mut b);
            let s = [Sge::new(&src, 0, n as u32).unwrap()];
            a.post_send(&[SendWr::send(k as u64, &s).signaled()])
                .unwrap();
            let wc = one(&mut b);
            assert_eq!((wc.wr_id, wc.status), (k as u64, WcStatus::SUCCESS));
            assert_eq!(wc.byte_len, n as u32);
            check_target(&dst, &data, &format!("{mode:?}: {n}-byte SEND on an SRQ"));
            let inline = scattered(&mut b) - before;
            assert_eq!(inline, (n <= limit) as u64, "{mode:?}: {n} bytes");
            assert!(one(&mut a).status.is_ok());
        }
    }
}

/// UC scatters on the responder side; UD takes the option and ignores it
/// (as the kernel's mlx5 driver); off by default nothing scatters.
#[test]
fn uc_scatters_ud_ignores_it_and_off_is_the_default() {
    assert_eq!(QpConfig::default().inline_recv, InlineRecv::Off);
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let data = payload(20, 3);
    src.write(0, &data).unwrap();
    let s = [Sge::new(&src, 0, 20).unwrap()];
    for (qp_type, off, want) in [
        (QpType::Uc, false, 1),
        (QpType::Ud, false, 0),
        (QpType::Rc, true, 0),
    ] {
        let c = QpConfig {
            qp_type,
            inline_recv: if off {
                InlineRecv::Off
            } else {
                InlineRecv::Up32
            },
            ..cfg(InlineRecv::Off)
        };
        let mut a = pd.create_qp(&c).unwrap();
        let mut b = pd.create_qp(&c).unwrap();
        let dst = pd.alloc_mr(256, Access::LOCAL_WRITE).unwrap();
        dst.write(0, &[GUARD; 256]).unwrap();
        let ud = qp_type == QpType::Ud;
        // A UD receive starts with the 40-byte GRH slot.
        let r = [Sge::new(&dst, if ud { AT - 40 } else { AT }, SGE_LEN).unwrap()];
        let ah;
        let wr = if ud {
            a.ready_ud(0x11).unwrap();
            b.ready_ud(0x11).unwrap();
            ah = pd.create_ah(&a.av_to(&b.endpoint())).unwrap();
            let dest = UdDest {
                ah: &ah,
                remote_qpn: b.qp_num(),
                qkey: 0x11,
            };
            SendWr::ud_send(1, &s, dest).signaled()
        } else {
            Qp::connect_loopback(&mut a, &mut b).unwrap();
            SendWr::send(1, &s).signaled()
        };
        b.post_recv(&[RecvWr::new(1, &r)]).unwrap();
        a.post_send(&[wr]).unwrap();
        let wc = one(&mut b);
        assert_eq!(
            (wc.status, wc.byte_len),
            (WcStatus::SUCCESS, 20 + 40 * ud as u32)
        );
        let mut got = vec![0u8; 256];
        dst.read(0, &mut got).unwrap();
        assert_eq!(&got[AT..AT + 20], &data[..], "{qp_type:?}");
        assert_eq!(scattered(&mut b), want, "{qp_type:?}, off {off}");
    }
}

/// `Up64` wants 128-byte CQEs: a shared CQ's are 64 bytes, refused before
/// anything is created; `Up32` on a shared CQ works.
#[test]
fn up64_on_a_shared_cq_is_refused_and_up32_works_there() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut cq = pd.create_shared_cq(64).unwrap();
    let r = cq.create_qp(&cfg(InlineRecv::Up64));
    assert!(matches!(r, Err(Error::Invalid(_))), "{r:?}");
    assert_eq!(cq.credits_free(), 64, "nothing taken");
    let i = cq.create_qp(&cfg(InlineRecv::Up32)).unwrap();
    let j = cq.create_qp(&cfg(InlineRecv::Up32)).unwrap();
    let [x, y] = cq.qps_mut() else {
        unreachable!("two QPs")
    };
    Qp::connect_loopback(x, y).unwrap();
    let dst = pd.alloc_mr(256, Access::LOCAL_WRITE).unwrap();
    dst.write(0, &[GUARD; 256]).unwrap();
    let r = [Sge::new(&dst, AT, SGE_LEN).unwrap()];
    cq.qp_mut(j).post_recv(&[RecvWr::new(5, &r)]).unwrap();
    let data = payload(30, 1);
    let s = [Sge::bytes(&data).unwrap()];
    cq.qp_mut(i)
        .post_send(&[SendWr::send(6, &s).inline().signaled()])
        .unwrap();
    let mut got = Vec::new();
    let t = Instant::now();
    while got.len() < 2 {
        let mut wc = [Completion::default(); 2];
        let n = cq.poll(&mut wc).unwrap();
        got.extend_from_slice(&wc[..n]);
        assert!(t.elapsed() < Duration::from_secs(10));
    }
    let recv = got.iter().find(|c| c.wr_id == 5).expect("the receive");
    assert_eq!((recv.status, recv.byte_len), (WcStatus::SUCCESS, 30));
    check_target(&dst, &data, "a SEND on a shared CQ");
}

/// A QP split into halves: the receive half posts, the owner's poll (in
/// the retiring copy's window) copies the CQE's data out; the send half's
/// READ likewise.
#[test]
fn a_split_qp_copies_cqe_data_out_for_its_halves() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let far = pd
        .alloc_mr(256, Access::LOCAL_WRITE | Access::REMOTE_READ)
        .unwrap();
    let data = payload(24, 77);
    far.write(0, &data).unwrap();
    let (mut a, mut b) = pd.create_connected_pair(&cfg(InlineRecv::Up32)).unwrap();
    let dst = pd.alloc_mr(256, Access::LOCAL_WRITE).unwrap();
    dst.write(0, &[GUARD; 256]).unwrap();
    let rdst = pd.alloc_mr(256, Access::LOCAL_WRITE).unwrap();
    rdst.write(0, &[GUARD; 256]).unwrap();
    {
        let (mut tx, mut rx) = b.split().unwrap();
        let r = [Sge::new(&rdst, AT, SGE_LEN).unwrap()];
        rx.post_recv(&[RecvWr::new(1, &r)]).unwrap();
        let s = [Sge::new(&dst, AT, 24).unwrap()];
        let remote = RemoteAddr {
            addr: far.addr(),
            rkey: far.rkey(),
        };
        tx.post_send(&[SendWr::rdma_read(2, &s, remote).signaled()])
            .unwrap();
        let g = [Sge::new(&far, 0, 24).unwrap()];
        a.post_send(&[SendWr::send(3, &g).signaled()]).unwrap();
        let mut got = Vec::new();
        let t = Instant::now();
        while got.len() < 2 {
            let mut wc = [Completion::default(); 2];
            let n = b.poll(&mut wc).unwrap();
            got.extend_from_slice(&wc[..n]);
            assert!(t.elapsed() < Duration::from_secs(10), "{got:?}");
        }
        got.sort_by_key(|c| c.wr_id);
        assert_eq!(
            got.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
            vec![(1, WcStatus::SUCCESS), (2, WcStatus::SUCCESS)]
        );
        b.join(tx, rx).unwrap();
    }
    assert_eq!(scattered(&mut b), 2, "the receive and the READ in CQEs");
    check_target(&rdst, &data, "the receive half's receive");
    check_target(&dst, &data, "the send half's READ");
    assert!(one(&mut a).status.is_ok());
}

/// With CQE compression too: a CQE with data is never compressed and
/// breaks the run held before it, so receives of mixed sizes (in the CQE
/// and by DMA) complete in order, each whole; `Up64` with compression is
/// refused (128-byte CQEs against 64-byte ones).
#[test]
fn with_cqe_compression_cqes_with_data_break_the_run_and_keep_order() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let zip = |mode| QpConfig {
        cqe_compression: true,
        ..cfg(mode)
    };
    let r = pd.create_qp(&zip(InlineRecv::Up64)).map(|_| ());
    assert!(matches!(r, Err(Error::Invalid(_))), "{r:?}");
    let (mut a, mut b) = pd.create_connected_pair(&zip(InlineRecv::Up32)).unwrap();
    let src = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let dst = pd.alloc_mr(16 * 256, Access::LOCAL_WRITE).unwrap();
    dst.write(0, &[GUARD; 16 * 256]).unwrap();
    // Runs of DMAed receives (compressible) broken by ones with data.
    let sizes = [40usize, 50, 60, 8, 70, 80, 90, 16, 33, 34, 1, 100];
    let rs: Vec<[Sge<'_>; 1]> = (0..sizes.len())
        .map(|k| [Sge::new(&dst, k * 256 + AT, 128).unwrap()])
        .collect();
    let rws: Vec<RecvWr<'_>> = rs
        .iter()
        .enumerate()
        .map(|(k, s)| RecvWr::new(k as u64, s))
        .collect();
    b.post_recv(&rws).unwrap();
    let mut want = Vec::new();
    for (k, &n) in sizes.iter().enumerate() {
        let data = payload(n, 200 + k as u8);
        src.write(k * 128, &data).unwrap();
        want.push(data);
    }
    let gs: Vec<[Sge<'_>; 1]> = sizes
        .iter()
        .enumerate()
        .map(|(k, &n)| [Sge::new(&src, k * 128, n as u32).unwrap()])
        .collect();
    let ws: Vec<SendWr<'_>> = gs
        .iter()
        .enumerate()
        .map(|(k, g)| SendWr::send(k as u64, g).signaled())
        .collect();
    a.post_send(&ws).unwrap();
    let mut got = Vec::new();
    let t = Instant::now();
    while got.len() < sizes.len() {
        let mut wc = [Completion::default(); 3];
        let n = b.poll(&mut wc).unwrap();
        got.extend_from_slice(&wc[..n]);
        assert!(t.elapsed() < Duration::from_secs(10), "{got:?}");
    }
    let ids: Vec<u64> = got.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, (0..sizes.len() as u64).collect::<Vec<_>>(), "in order");
    let mut all = vec![0u8; 16 * 256];
    dst.read(0, &mut all).unwrap();
    for (k, c) in got.iter().enumerate() {
        assert_eq!((c.status, c.byte_len), (WcStatus::SUCCESS, sizes[k] as u32));
        let at = k * 256 + AT;
        assert_eq!(&all[at..at + sizes[k]], &want[k][..], "receive {k}");
        assert!(all[at + sizes[k]..(k + 1) * 256]
            .iter()
            .all(|&b| b == GUARD));
    }
    let inline = sizes.iter().filter(|&&n| n <= 32).count() as u64;
    assert_eq!(scattered(&mut b), inline);
    let bytes = b.sim_hook().unwrap().cqe_bytes_written();
    assert!(
        bytes < 64 * sizes.len() as u64,
        "some run compressed: {bytes} bytes"
    );
    let mut sent = 0;
    while sent < sizes.len() {
        let mut wc = [Completion::default(); 16];
        sent += a.poll(&mut wc).unwrap();
    }
}
