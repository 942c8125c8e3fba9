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
use rdma_direct::testing::QpHooks;
use rdma_direct::{
    Access, Completion, Context, Error, LocalMr, Memory, Mr, Qp, QpAttr, QpConfig, QpState,
    RegRefusal, RemoteAddr, SendFlags, SendWr, Sge, WcOpcode, WcStatus, WriteWr,
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
    let src = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let dst = pd
        .alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
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
    let local = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let far = pd
        .alloc_mr(
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
/// the dropped MRs wait in the PD's graveyard for the WR, and the `Qp`
/// holds the `Pd` (under Miri a freed buffer the sim wrote into would be
/// reported as a use after free).
#[test]
fn the_pd_and_the_qp_keep_posted_memory_alive() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let src = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let dst = pd
        .alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
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
    let src = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let dst = pd
        .alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
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
            access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
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

/// Polls until one completion arrives (any status).
fn any_completion(qp: &mut Qp) -> Completion {
    let mut wc = [Completion::default(); 1];
    while qp.poll(&mut wc).unwrap() == 0 {
        std::thread::yield_now();
    }
    wc[0]
}

/// Memory of the first kind: a `LocalMr` is filled in place, moves into a
/// SEND, comes back after its completion; the peer's receive buffer moves
/// into its RQ and is read in place after the completion. Plain slices on
/// both sides, no copy through the crate.
#[test]
fn owned_buffers_send_and_receive_in_place() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut msg = pd.reg_local_mr(vec![0u8; 256], Access::empty()).unwrap();
    let rbuf = pd.alloc_local_mr(4096, Access::LOCAL_WRITE).unwrap();
    let rbuf_addr = rbuf.addr();
    let (mut a, mut b) = pd.create_connected_pair(&cfg()).unwrap();
    b.post_recv_owned(7, rbuf, 16, 512).unwrap();
    // Filled in place: a plain `&mut [u8]`.
    msg[..5].copy_from_slice(b"hello");
    msg.write(5, b", world").unwrap();
    a.post_send_owned(&SendWr::send(1, &[]).signaled(), msg, 0, 12)
        .unwrap();
    assert!(a.take_send_buf().is_none(), "nothing retired before a poll");
    let wc = one_completion(&mut a);
    assert_eq!((wc.wr_id, wc.opcode), (1, WcOpcode::SEND));
    let (id, msg) = a.take_send_buf().expect("the SEND's buffer comes back");
    assert_eq!((id, &msg[..12]), (1, &b"hello, world"[..]));
    assert!(a.take_send_buf().is_none());
    let wc = one_completion(&mut b);
    assert_eq!((wc.wr_id, wc.byte_len), (7, 12));
    let (id, rbuf) = b.take_recv_buf().expect("the receive's buffer comes back");
    assert_eq!((id, rbuf.addr()), (7, rbuf_addr));
    // In place: a slice of the registered bytes the device wrote.
    assert_eq!(&rbuf[16..16 + wc.byte_len as usize], b"hello, world");
    assert!(rbuf[..16].iter().all(|&x| x == 0));
    // The caller's Vec comes back, the same allocation with its bytes.
    let ptr = msg.addr();
    let Memory::Vec(v) = msg.into_memory() else {
        panic!("a Vec comes back as a Vec")
    };
    assert_eq!(
        (v.as_ptr() as u64, v.len(), &v[..5]),
        (ptr, 256, &b"hello"[..])
    );
}

/// The local target of an RDMA READ is a `LocalMr`, read in place after
/// the READ completes; an inline SEND copies from one plainly.
#[test]
fn an_owned_read_target_is_read_in_place() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let table = pd
        .reg_mr(vec![0u8; 1024], Access::LOCAL_WRITE | Access::REMOTE_READ)
        .unwrap();
    table.write(100, b"value-42").unwrap();
    let dst: LocalMr = pd.alloc_local_mr(64, Access::LOCAL_WRITE).unwrap();
    let (mut a, _b) = pd.create_connected_pair(&cfg()).unwrap();
    a.post_send_owned(
        &SendWr::rdma_read(3, &[], remote(&table, 100)).signaled(),
        dst,
        8,
        8,
    )
    .unwrap();
    assert_eq!(one_completion(&mut a).opcode, WcOpcode::RDMA_READ);
    let (_, dst) = a.take_send_buf().unwrap();
    assert_eq!(&dst[8..16], b"value-42");
    // Not a buffer with LOCAL_WRITE: refused before posting, the buffer
    // handed back, nothing written.
    let ro = pd.alloc_local_mr(64, Access::empty()).unwrap();
    let sq = a.sq_snapshot();
    let r = a.post_send_owned(
        &SendWr::rdma_read(4, &[], remote(&table, 0)).signaled(),
        ro,
        0,
        8,
    );
    let back = r.expect_err("a READ target without LOCAL_WRITE").buf;
    assert_eq!(back.access(), Access::empty());
    assert_eq!(a.sq_snapshot(), sq, "nothing written");
}

/// Bad owned posts are refused with the buffer handed back and nothing
/// posted.
#[test]
fn a_refused_owned_post_hands_the_buffer_back() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let (mut a, _b) = pd.create_connected_pair(&cfg()).unwrap();
    let buf = pd.alloc_local_mr(64, Access::LOCAL_WRITE).unwrap();
    let addr = buf.addr();
    let r = a.post_send_owned(&SendWr::send(1, &[]), buf, 60, 8);
    let back = r.expect_err("outside the buffer").buf;
    assert_eq!(back.addr(), addr);
    let r = a.post_recv_owned(2, back, 0, 64);
    assert!(r.is_ok());
    let sq = a.sq_snapshot();
    let sim_buf = pd.alloc_local_mr(64, Access::empty()).unwrap();
    let r = a.post_recv_owned(3, sim_buf, 0, 64);
    assert!(matches!(r, Err(ref e) if matches!(e.error, Error::MissingAccess { .. })));
    assert_eq!(a.sq_snapshot(), sq);
    assert!(matches!(
        pd.reg_local_mr(vec![0u8; 8], Access::LOCAL_WRITE | Access::REMOTE_WRITE),
        Err(Error::Register(RegRefusal::RemoteOnLocal))
    ));
    assert!(matches!(
        pd.reg_mr(Vec::new(), Access::LOCAL_WRITE),
        Err(Error::Register(RegRefusal::ZeroLength))
    ));
}

/// An MR whose last handle is dropped while a WRITE from it is in flight:
/// the WRITE completes successfully, and the MR is deregistered only once
/// that completion has been polled (the live-MR count says so).
#[test]
fn a_dropped_mr_goes_after_its_last_wr_completes() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let dst = pd
        .alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let (mut a, _b) = pd.create_connected_pair(&cfg()).unwrap();
    let src = pd.reg_mr(vec![0x5au8; 4096], Access::empty()).unwrap();
    assert_eq!(pd.live_mrs(), 2);
    let sge = [Sge::new(&src, 0, 4096).unwrap()];
    a.post_send(&[SendWr::rdma_write(9, &sge, remote(&dst, 0)).signaled()])
        .unwrap();
    drop(src);
    // Still live: the WR may still read it.
    assert_eq!(pd.live_mrs(), 2);
    let wc = one_completion(&mut a);
    assert_eq!(wc.wr_id, 9);
    assert_eq!(pd.reclaim(), 0);
    assert_eq!(pd.live_mrs(), 1);
    let mut got = [0u8; 2];
    dst.read(4094, &mut got).unwrap();
    assert_eq!(got, [0x5a; 2]);
    // With nothing outstanding a drop deregisters at once.
    drop(dst);
    assert_eq!(pd.live_mrs(), 0);
}

/// Receives kept posted (a server's) hold only the MR they name: a dropped
/// MR that no outstanding receive names goes at once; one a receive names
/// waits for that receive.
#[test]
fn posted_receives_hold_only_the_mr_they_name() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let (mut a, mut b) = pd.create_connected_pair(&cfg()).unwrap();
    let ring = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let owned = pd.alloc_local_mr(64, Access::LOCAL_WRITE).unwrap();
    b.post_recv_owned(1, owned, 0, 64).unwrap();
    let sge = [Sge::new(&ring, 0, 64).unwrap()];
    b.post_recv(&[rdma_direct::RecvWr::new(2, &sge)]).unwrap();
    let live = pd.live_mrs();
    let other = pd
        .alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    drop(other);
    assert_eq!(pd.live_mrs(), live, "no outstanding receive names it");
    // A receive that names the dropped MR holds it until it completes.
    let named = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let sge = [Sge::new(&named, 0, 64).unwrap()];
    b.post_recv(&[rdma_direct::RecvWr::new(3, &sge)]).unwrap();
    drop(named);
    assert_eq!(pd.live_mrs(), live + 1, "the third receive names it");
    let msg = pd.alloc_mr(64, Access::empty()).unwrap();
    let s = [Sge::new(&msg, 0, 8).unwrap()];
    for i in 0..3 {
        a.post_send(&[SendWr::send(10 + i, &s).signaled()]).unwrap();
        assert!(one_completion(&mut a).status.is_ok());
        assert!(one_completion(&mut b).status.is_ok());
    }
    drop(msg); // its SENDs completed: it goes at once
    pd.reclaim();
    assert_eq!(pd.live_mrs(), live, "gone once its receive completed");
}

/// A flush hands buffers back: receives posted by value come back after
/// the QP goes to ERR and their flush completions are polled; a RESET
/// retires what is left.
#[test]
fn a_flush_hands_the_buffers_back() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let (_a, mut b) = pd.create_connected_pair(&cfg()).unwrap();
    for i in 0..3 {
        let buf = pd.alloc_local_mr(128, Access::LOCAL_WRITE).unwrap();
        b.post_recv_owned(i, buf, 0, 128).unwrap();
    }
    assert!(b.take_recv_buf().is_none());
    b.modify(QpState::Err, &QpAttr::default()).unwrap();
    let wc = any_completion(&mut b);
    assert_eq!(wc.status, WcStatus::WR_FLUSH_ERR);
    assert_eq!(b.take_recv_buf().map(|(id, _)| id), Some(0));
    b.modify(QpState::Reset, &QpAttr::default()).unwrap();
    assert_eq!(b.take_recv_buf().map(|(id, _)| id), Some(1));
    assert_eq!(b.take_recv_buf().map(|(id, _)| id), Some(2));
    assert!(b.take_recv_buf().is_none());
    assert_eq!(pd.live_mrs(), 0);
}

/// The caller's memory of each kind Miri can map (a `Vec`, a `Box<[u8]>`,
/// an anonymous `MmapMut`) as a local SGE and as a remote target, handed
/// back with its bytes.
#[test]
fn the_callers_memory_is_registered_and_handed_back() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let (mut a, _b) = pd.create_connected_pair(&cfg()).unwrap();
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let kinds: Vec<Memory> = vec![
        vec![1u8; 4096].into(),
        vec![2u8; 4096].into_boxed_slice().into(),
        memmap2::MmapMut::map_anon(4096).unwrap().into(),
    ];
    for (i, mem) in kinds.into_iter().enumerate() {
        let ptr = mem.as_ptr() as u64;
        let mr = pd.reg_mr(mem, rw).unwrap();
        assert_eq!(mr.addr(), ptr);
        mr.write(0, &[0x10 + i as u8; 64]).unwrap();
        // As a local SGE: into its own second half (as a remote target).
        let sge = [Sge::new(&mr, 0, 64).unwrap()];
        a.post_send(&[SendWr::rdma_write(i as u64, &sge, remote(&mr, 2048)).signaled()])
            .unwrap();
        assert_eq!(one_completion(&mut a).wr_id, i as u64);
        let mem = mr
            .try_into_memory()
            .expect("last handle, nothing outstanding")
            .unwrap();
        assert_eq!(mem.as_ptr() as u64, ptr);
        let bytes: &[u8] = match &mem {
            Memory::Vec(v) => v,
            Memory::Boxed(b) => b,
            Memory::MmapMut(m) => m,
            _ => panic!("came back as another kind"),
        };
        assert_eq!(&bytes[2048..2112], &[0x10 + i as u8; 64][..]);
    }
    assert_eq!(pd.live_mrs(), 0);
}

/// A remote-target MR dropped (nothing outstanding): its rkey is dead at
/// once, and the peer's next WRITE into it fails with REM_ACCESS_ERR.
#[test]
fn a_dropped_target_refuses_the_peers_write() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let src = pd.alloc_mr(64, Access::empty()).unwrap();
    let target = pd
        .alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let (mut a, _b) = pd.create_connected_pair(&cfg()).unwrap();
    let to = remote(&target, 0);
    let sge = [Sge::new(&src, 0, 8).unwrap()];
    a.post_send(&[SendWr::rdma_write(1, &sge, to).signaled()])
        .unwrap();
    assert!(one_completion(&mut a).status.is_ok());
    drop(target);
    a.post_send(&[SendWr::rdma_write(2, &sge, to).signaled()])
        .unwrap();
    assert_eq!(any_completion(&mut a).status, WcStatus::REM_ACCESS_ERR);
}

/// Misuses of memory, each refused: an SGE of another PD or
/// device (only its own PD's QPs hold a dropped MR back), safe writes to a
/// raw range registered without write access, a test hook's WQE naming a
/// held `LocalMr` (the sim touches no owned MR from a hooked QP), and a
/// full queue of owned WRs reported as full, not as bad input.
#[test]
fn foreign_read_only_and_held_memory_misuse_is_refused() {
    let (ctx1, ctx2) = (Context::open("sim").unwrap(), Context::open("sim").unwrap());
    let (pd1, pd2) = (ctx1.alloc_pd().unwrap(), ctx2.alloc_pd().unwrap());
    let (mut a, mut b) = pd2.create_connected_pair(&cfg()).unwrap();
    let m1 = pd1.reg_mr(vec![0u8; 64], Access::LOCAL_WRITE).unwrap();
    let sge = [Sge::new(&m1, 0, 64).unwrap()];
    let r = b.post_recv(&[rdma_direct::RecvWr::new(1, &sge)]);
    assert!(matches!(r, Err(Error::ForeignPd { .. })), "{r:?}");
    let r = a.post_send(&[SendWr::send(1, &sge)]);
    assert!(matches!(r, Err(Error::ForeignPd { .. })), "{r:?}");

    static RO: [u8; 64] = [7; 64];
    // SAFETY: a static, readable for the program's life; no write access asked.
    let raw = unsafe { pd2.reg_mr_raw(RO.as_ptr() as *mut u8, 64, Access::REMOTE_READ) }.unwrap();
    assert!(!raw.is_writable());
    assert!(raw.write(0, b"x").is_err());
    assert_eq!(raw.load_u8(63), 7);

    let far = pd2
        .reg_mr(vec![b'!'; 64], Access::LOCAL_WRITE | Access::REMOTE_READ)
        .unwrap();
    let decoy = pd2.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let held = pd2.alloc_local_mr(64, Access::LOCAL_WRITE).unwrap();
    let (lkey, addr) = (held.lkey().get(), held.addr());
    let sge = [Sge::new(&decoy, 0, 16).unwrap()];
    let wr = SendWr::rdma_read(2, &sge, remote(&far, 0)).signaled();
    a.sim_hook()
        .unwrap()
        .post_patched(&wr, |w| {
            w[36..40].copy_from_slice(&lkey.to_be_bytes());
            w[40..48].copy_from_slice(&addr.to_be_bytes());
        })
        .unwrap();
    let mut sum = 0u32;
    for _ in 0..20 {
        sum += held[..16].iter().map(|&x| x as u32).sum::<u32>();
        std::thread::yield_now();
    }
    assert_eq!(any_completion(&mut a).status, WcStatus::LOC_PROT_ERR);
    assert_eq!(sum, 0, "the held LocalMr was never written");

    // Owned SENDs waiting for receives that never come fill the queue.
    let cfg2 = QpConfig {
        max_send_wr: 2,
        rnr_retry: 7,
        ..cfg()
    };
    let (mut c, _d) = pd2.create_connected_pair(&cfg2).unwrap();
    for i in 0..2 {
        let m = pd2.alloc_local_mr(8, Access::empty()).unwrap();
        c.post_send_owned(&SendWr::send(i, &[]).signaled(), m, 0, 8)
            .unwrap();
    }
    let m = pd2.alloc_local_mr(8, Access::empty()).unwrap();
    let r = c.post_send_owned(&SendWr::send(3, &[]).signaled(), m, 0, 8);
    assert!(
        matches!(r, Err(ref e) if matches!(e.error, Error::QueueFull)),
        "{r:?}"
    );
}

/// The in-place posts under Miri: inline payloads of plain bytes
/// and of an `Mr` wrapping the SQ's end, `Qp::post_write_inline`,
/// `Qp::post_write` and `Qp::post_writes`, and a batch.
#[test]
fn inline_wrap_and_batches_under_miri() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let src = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let dst = pd
        .alloc_mr(
            4096,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let c = QpConfig {
        max_send_wr: 2,
        max_recv_wr: 2,
        max_inline: 100,
        ..QpConfig::default()
    };
    let (mut a, _b) = pd.create_connected_pair(&c).unwrap();
    let to = remote(&dst, 0);
    let data: Vec<u8> = (0..100u8).collect();
    src.write(0, &data).unwrap();
    for (i, len) in [100usize, 37, 1, 65, 99, 0, 100, 64]
        .into_iter()
        .enumerate()
    {
        let by = [Sge::bytes(&data[..len]).unwrap()];
        let mr = [Sge::new(&src, 0, len as u32).unwrap()];
        let w = if i % 2 == 0 {
            SendWr::rdma_write(i as u64, &by, to).inline().signaled()
        } else {
            SendWr::rdma_write(i as u64, &mr, to).inline().signaled()
        };
        a.post_send(&[w]).unwrap();
        assert_eq!(one_completion(&mut a).wr_id, i as u64);
        let mut got = vec![0u8; len];
        dst.read(0, &mut got).unwrap();
        assert_eq!(&got[..], &data[..len]);
    }
    // The one-opcode posts: inline across the SQ's end, and a 1-SGE WRITE.
    for (i, len) in [100usize, 65, 37].into_iter().enumerate() {
        a.post_write_inline(20 + i as u64, &data[..len], to, SendFlags::SIGNALED)
            .unwrap();
        assert_eq!(one_completion(&mut a).wr_id, 20 + i as u64);
        let mut got = vec![0u8; len];
        dst.read(0, &mut got).unwrap();
        assert_eq!(&got[..], &data[..len]);
    }
    let s8 = Sge::new(&src, 8, 8).unwrap();
    a.post_write(&WriteWr {
        wr_id: 30,
        sge: s8,
        remote: to,
        flags: SendFlags::SIGNALED,
    })
    .unwrap();
    assert_eq!(one_completion(&mut a).wr_id, 30);
    a.post_writes(&[
        WriteWr::new(31, s8, to),
        WriteWr::new(32, s8, to).signaled(),
    ])
    .unwrap();
    assert_eq!(one_completion(&mut a).wr_id, 32);
    let sg = [Sge::new(&src, 0, 8).unwrap()];
    a.post_send(&[
        SendWr::rdma_write(50, &sg, to),
        SendWr::rdma_read(51, &sg, to).signaled(),
    ])
    .unwrap();
    assert_eq!(one_completion(&mut a).wr_id, 51);
}

/// A QP of a `SharedCq` through the in-place posts and the shared poll.
#[test]
fn shared_cq_under_miri() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let src = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let dst = pd
        .alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let c = QpConfig {
        max_send_wr: 2,
        max_recv_wr: 2,
        max_inline: 64,
        ..QpConfig::default()
    };
    let mut cq = pd.create_shared_cq(4).unwrap();
    let x = cq.create_qp(&c).unwrap();
    let mut p = pd.create_qp(&c).unwrap();
    Qp::connect_loopback(cq.qp_mut(x), &mut p).unwrap();
    let to = remote(&dst, 0);
    let d = [7u8; 64];
    let by = [Sge::bytes(&d).unwrap()];
    let sg = [Sge::new(&src, 0, 8).unwrap()];
    for i in 0..4u64 {
        let w = if i % 2 == 0 {
            SendWr::rdma_write(i, &by, to).inline().signaled()
        } else {
            SendWr::rdma_write(i, &sg, to).signaled()
        };
        cq.qp_mut(x).post_send(&[w]).unwrap();
        let mut wc = [Completion::default(); 2];
        while cq.poll(&mut wc).unwrap() == 0 {
            std::thread::yield_now();
        }
        assert_eq!(wc[0].wr_id, i);
    }
}
