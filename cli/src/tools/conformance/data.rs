//! Data movement: every opcode lands byte for byte, at the limits (SGE
//! counts, inline size, the 16-bit WQE index), and an access the remote MR
//! does not allow fails.

use super::*;

pub(super) fn write_beyond_the_remote_mr_is_remote_access_error(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let src = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    src.write(0, &[0xee; 64])?;
    let sge = [Sge::new(&src, 0, 64)?];
    s.a.post_send(&[SendWr::rdma_write(1, &sge, remote(&dst, 4096 - 32)).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check_eq!(wc.status, WcStatus::REM_ACCESS_ERR, "got {}", wc.status);
    check!(contents(&dst)?.iter().all(|&b| b == 0), "target changed");
    drop(s.b);
    passed(vec![])
}

pub(super) fn inline_gather_and_unsignaled_writes_wrap_the_ring(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let src = s.pd.alloc_mr(8192, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.alloc_mr(8192, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    // 300 rounds of: an unsignaled inline write, then a signaled 3-SGE write;
    // the signaled completion retires both. Sizes vary so WQEs straddle the SQ end.
    for round in 0..300u32 {
        let n = 1 + (round as usize * 37) % 120;
        let a = pattern(n, round as u8);
        src.write(0, &a)?;
        // Odd rounds: the payload as plain bytes (`Sge::bytes`), which an
        // inline WR takes from any memory.
        let sge = [if round % 2 == 0 {
            Sge::new(&src, 0, n as u32)?
        } else {
            Sge::bytes(&a)?
        }];
        let off = (round as u64 * 13) % 3800;
        s.a.post_send(&[
            SendWr::rdma_write(1000 + round as u64, &sge, remote(&dst, off)).inline(),
        ])?;
        let parts = [(4096usize, 100u32), (4500, 0), (5000, 200)];
        let b = pattern(300, round as u8 ^ 0x5a);
        src.write(4096, &b[..100])?;
        src.write(5000, &b[100..])?;
        let sges: Vec<Sge> = parts
            .iter()
            .map(|&(o, l)| Sge::new(&src, o, l))
            .collect::<Result<_, _>>()?;
        s.a.post_send(&[
            SendWr::rdma_write(round as u64, &sges, remote(&dst, 4096 + off)).signaled(),
        ])?;
        let wc = poll_one(&mut s.a)?;
        check_eq!(
            (wc.status, wc.wr_id),
            (WcStatus::SUCCESS, round as u64),
            "round {round}"
        );
        let got = contents(&dst)?;
        check_eq!(
            &got[off as usize..off as usize + n],
            &a[..],
            "inline payload, round {round}"
        );
        check_eq!(
            &got[4096 + off as usize..4096 + off as usize + 300],
            &b[..],
            "SGE payload, round {round}"
        );
    }
    drop(s.b);
    passed(vec![])
}

pub(super) fn zero_length_write_checks_no_rkey(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let src = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let sge = [Sge::new(&src, 0, 0)?];
    let nowhere = RemoteAddr {
        addr: 0,
        rkey: Rkey(0xdead),
    };
    s.a.post_send(&[SendWr::rdma_write(4, &sge, nowhere).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check_eq!(
        (wc.status, wc.wr_id),
        (WcStatus::SUCCESS, 4),
        "got {}",
        wc.status
    );
    drop(s.b);
    passed(vec![])
}

pub(super) fn rdma_read_lands_byte_for_byte_and_needs_remote_read(dev: &str) -> CaseResult {
    let mut notes: Vec<String> = Vec::new();
    let mut s = setup(dev)?;
    let remote_mr =
        s.pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
    let local = s.pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    let data = pattern(4096, 99);
    remote_mr.write(0, &data)?;
    // Two SGEs scatter the read: 1000 bytes then 3096.
    let sges = [Sge::new(&local, 0, 1000)?, Sge::new(&local, 1000, 3096)?];
    s.a.post_send(&[SendWr::rdma_read(8, &sges, remote(&remote_mr, 0)).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check_eq!(
        (wc.status, wc.wr_id, wc.byte_len),
        (WcStatus::SUCCESS, 8, 4096),
        "{}",
        wc.status
    );
    check_eq!(wc.opcode, WcOpcode::RDMA_READ);
    check_eq!(contents(&local)?, data, "read data differs");
    notes.push("4096-byte RDMA READ landed byte for byte".to_string());

    // A region without REMOTE_READ: remote access error, local memory untouched.
    let mut s = setup(dev)?;
    let no_read =
        s.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let local = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    no_read.write(0, &[7; 64])?;
    let sge = [Sge::new(&local, 0, 64)?];
    s.a.post_send(&[SendWr::rdma_read(9, &sge, remote(&no_read, 0)).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check_eq!(wc.status, WcStatus::REM_ACCESS_ERR, "got {}", wc.status);
    check!(
        contents(&local)?.iter().all(|&b| b == 0),
        "local memory changed"
    );
    drop(s.b);
    passed(notes)
}

pub(super) fn atomics_update_the_remote_word_and_return_the_old_value(dev: &str) -> CaseResult {
    let mut notes: Vec<String> = Vec::new();
    let mut s = setup(dev)?;
    let word =
        s.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_ATOMIC)?;
    let old = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    word.write(8, &0x0102_0304_0506_0708u64.to_ne_bytes())?;
    let sge = [Sge::new(&old, 0, 8)?];
    s.a.post_send(&[SendWr::atomic_fetch_add(1, &sge, remote(&word, 8), 0x10).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check_eq!(
        (wc.status, wc.wr_id),
        (WcStatus::SUCCESS, 1),
        "{}",
        wc.status
    );
    check_eq!((wc.opcode, wc.byte_len), (WcOpcode::FETCH_ADD, 8));
    check_eq!(
        read_u64(&word, 8)?,
        0x0102_0304_0506_0718,
        "remote after FAA"
    );
    check_eq!(read_u64(&old, 0)?, 0x0102_0304_0506_0708, "old value");

    // CAS that matches swaps; one that does not leaves the word alone. Both return the old value.
    let sge = [Sge::new(&old, 8, 8)?];
    s.a.post_send(&[
        SendWr::atomic_cmp_swp(2, &sge, remote(&word, 8), 0x0102_0304_0506_0718, 42).signaled(),
    ])?;
    check_eq!(poll_one(&mut s.a)?.status, WcStatus::SUCCESS);
    check_eq!(read_u64(&word, 8)?, 42, "CAS did not swap");
    check_eq!(read_u64(&old, 8)?, 0x0102_0304_0506_0718, "CAS old value");
    s.a.post_send(&[SendWr::atomic_cmp_swp(3, &sge, remote(&word, 8), 7, 99).signaled()])?;
    check_eq!(poll_one(&mut s.a)?.status, WcStatus::SUCCESS);
    check_eq!(read_u64(&word, 8)?, 42, "a failed CAS changed the word");
    check_eq!(read_u64(&old, 8)?, 42, "failed CAS old value");
    notes.push("FAA and CAS update the remote word, return the old value".to_string());

    // Bad atomics are refused before anything is posted.
    let bad = [
        SendWr::atomic_fetch_add(4, &sge, remote(&word, 4), 1),
        SendWr::atomic_fetch_add(5, &[], remote(&word, 8), 1),
    ];
    for w in bad {
        check!(matches!(
            s.a.post_send(&[w.signaled()]),
            Err(Error::AtomicShape { .. } | Error::AtomicUnaligned { .. })
        ));
    }
    let mut wc = [Completion::default(); 2];
    std::thread::sleep(Duration::from_millis(50));
    check_eq!(s.a.poll(&mut wc)?, 0, "a refused atomic was posted");
    check_eq!(read_u64(&word, 8)?, 42);
    drop(s.b);
    passed(notes)
}

/// More than 65,536 WQEs, so the 16-bit WQE index in ctrl segments and CQEs wraps.
pub(super) fn the_16_bit_wqe_index_wraps(dev: &str) -> CaseResult {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig {
        max_send_wr: 64,
        ..QpConfig::default()
    };
    let (mut a, _b) = pd.create_connected_pair(&cfg)?;
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sge = [Sge::new(&src, 0, 8)?];
    let total = 70_000u64;
    let mut next = 0u64;
    let mut batch: Vec<SendWr> = Vec::with_capacity(32);
    while next < total {
        batch.clear();
        // 31 unsignaled, then one signaled: one completion per 32 WRs.
        for k in 0..32 {
            let w = SendWr::rdma_write(next + k, &sge, remote(&dst, 0)).inline();
            batch.push(if k == 31 { w.signaled() } else { w });
        }
        src.write(0, &(next + 31).to_ne_bytes())?;
        a.post_send(&batch)?;
        let c = poll_one(&mut a)?;
        check_eq!((c.status, c.wr_id), (WcStatus::SUCCESS, next + 31));
        next += 32;
    }
    let mut last = [0u8; 8];
    dst.read(0, &mut last)?;
    check_eq!(u64::from_ne_bytes(last), next - 1);
    passed(vec![])
}

/// Gather and scatter with every SGE count from 1 to the QP's maximum:
/// a WRITE gathers k pieces, a SEND gathers k and scatters into k, a READ
/// scatters into k. One SGE over the maximum is refused and posts nothing.
pub(super) fn one_to_max_sges_gather_and_scatter(dev: &str) -> CaseResult {
    const MAX: usize = 30;
    let mut s = setup_with(
        dev,
        QpConfig {
            max_send_wr: 16,
            max_send_sge: MAX as u32,
            max_recv_wr: 16,
            max_recv_sge: MAX as u32,
            max_inline: 64,
            ..QpConfig::default()
        },
    )?;
    let local = s.pd.alloc_mr(64 << 10, Access::LOCAL_WRITE)?;
    let far = s.pd.alloc_mr(
        64 << 10,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    )?;
    // Piece i: (3 * i + 5) bytes at 1 KiB * i (pieces never touch).
    let piece = |i: usize| (i << 10, 3 * i as u32 + 5);
    for k in 1..=MAX {
        let total: usize = (0..k).map(|i| piece(i).1 as usize).sum();
        let data = pattern(total, k as u8);
        let mut off = 0;
        for i in 0..k {
            let (at, l) = piece(i);
            local.write(at, &data[off..off + l as usize])?;
            off += l as usize;
        }
        let gather = (0..k)
            .map(|i| Sge::new(&local, piece(i).0, piece(i).1))
            .collect::<Result<Vec<_>, _>>()?;
        // WRITE gathers k pieces into one contiguous run.
        far.write(0, &vec![0; total + 1])?;
        s.a.post_send(&[SendWr::rdma_write(k as u64, &gather, remote(&far, 0)).signaled()])?;
        let c = poll_one(&mut s.a)?;
        check_eq!(
            (c.status, c.wr_id),
            (WcStatus::SUCCESS, k as u64),
            "WRITE with {k} SGEs"
        );
        let mut got = vec![0; total + 1];
        far.read(0, &mut got)?;
        check!(
            got[..total] == data[..] && got[total] == 0,
            "WRITE with {k} SGEs: payload"
        );
        // SEND gathers k and scatters into k pieces of the receive buffer.
        for i in 0..k {
            far.write(piece(i).0, &vec![0; piece(i).1 as usize])?;
        }
        let scatter = (0..k)
            .map(|i| Sge::new(&far, piece(i).0, piece(i).1))
            .collect::<Result<Vec<_>, _>>()?;
        s.b.post_recv(&[RecvWr::new(k as u64, &scatter)])?;
        s.a.post_send(&[SendWr::send(100 + k as u64, &gather).signaled()])?;
        let c = poll_one(&mut s.a)?;
        check_eq!(
            (c.status, c.wr_id),
            (WcStatus::SUCCESS, 100 + k as u64),
            "SEND with {k} SGEs"
        );
        let r = poll_one(&mut s.b)?;
        check_eq!(
            (r.status, r.wr_id, r.byte_len),
            (WcStatus::SUCCESS, k as u64, total as u32),
            "receive with {k} SGEs"
        );
        let mut off = 0;
        for i in 0..k {
            let (at, l) = piece(i);
            let mut got = vec![0; l as usize];
            far.read(at, &mut got)?;
            check!(
                got[..] == data[off..off + l as usize],
                "SEND with {k} SGEs: piece {i} differs"
            );
            off += l as usize;
        }
        // READ scatters a contiguous remote run into k local pieces.
        let back = pattern(total, !(k as u8));
        far.write(32 << 10, &back)?;
        s.a.post_send(&[
            SendWr::rdma_read(200 + k as u64, &gather, remote(&far, 32 << 10)).signaled(),
        ])?;
        let c = poll_one(&mut s.a)?;
        check_eq!(
            (c.status, c.wr_id, c.byte_len),
            (WcStatus::SUCCESS, 200 + k as u64, total as u32),
            "READ with {k} SGEs"
        );
        let mut off = 0;
        for i in 0..k {
            let (at, l) = piece(i);
            let mut got = vec![0; l as usize];
            local.read(at, &mut got)?;
            check!(
                got[..] == back[off..off + l as usize],
                "READ with {k} SGEs: piece {i} differs"
            );
            off += l as usize;
        }
    }
    let over = (0..=MAX)
        .map(|i| Sge::new(&local, i * 8, 8))
        .collect::<Result<Vec<_>, _>>()?;
    let r =
        s.a.post_send(&[SendWr::rdma_write(999, &over, remote(&far, 0)).signaled()]);
    check!(
        matches!(r, Err(Error::TooManySges { .. })),
        "{} SGEs accepted: {r:?}",
        MAX + 1
    );
    let r = s.b.post_recv(&[RecvWr::new(999, &over)]);
    check!(
        matches!(r, Err(Error::TooManySges { .. })),
        "receive with {} SGEs accepted: {r:?}",
        MAX + 1
    );
    nothing_completes(&mut s.a)?;
    nothing_completes(&mut s.b)?;
    passed(vec![format!(
        "1..={MAX} SGEs gather and scatter; {} refused",
        MAX + 1
    )])
}

/// An inline WRITE of exactly the QP's inline limit lands; one byte more
/// (in one SGE or spread over two) is refused and posts nothing.
pub(super) fn inline_at_the_limit_and_one_over(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let limit = s.a.max_inline() as usize;
    let src = s.pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    let dst =
        s.pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let data = pattern(limit + 1, 42);
    src.write(0, &data)?;
    let at_limit = [Sge::new(&src, 0, limit as u32)?];
    s.a.post_send(&[SendWr::rdma_write(1, &at_limit, remote(&dst, 0))
        .inline()
        .signaled()])?;
    let c = poll_one(&mut s.a)?;
    check_eq!(
        (c.status, c.wr_id),
        (WcStatus::SUCCESS, 1),
        "inline of {limit} bytes"
    );
    let got = contents(&dst)?;
    check!(
        got[..limit] == data[..limit] && got[limit] == 0,
        "inline of {limit} bytes: payload"
    );
    // The same WR built from a copy of the source: inline data is taken at post time.
    let one_over = [Sge::new(&src, 0, limit as u32 + 1)?];
    let split = [Sge::new(&src, 0, limit as u32)?, Sge::new(&src, limit, 1)?];
    let before = ring_snapshot(&s.a);
    for (what, sges) in [("one SGE", &one_over[..]), ("two SGEs", &split[..])] {
        let r = s.a.post_send(&[SendWr::rdma_write(2, sges, remote(&dst, 0))
            .inline()
            .signaled()]);
        check!(
            matches!(r, Err(Error::InlineTooLong { .. })),
            "inline of {} bytes in {what} accepted: {r:?}",
            limit + 1
        );
    }
    check!(
        ring_snapshot(&s.a) == before,
        "a refused post changed the send queue ring or its doorbell record"
    );
    nothing_completes(&mut s.a)?;
    passed(vec![format!(
        "inline limit {limit} bytes lands; {} refused{}",
        limit + 1,
        if before.is_some() {
            ", ring and doorbell record unchanged"
        } else {
            ""
        }
    )])
}

/// A fenced WRITE after a READ of the same bytes sees the READ done first;
/// a solicited SEND lands like any other.
pub(super) fn fence_and_solicited(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let local = s.pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    let far = s.pd.alloc_mr(
        4096,
        Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
    )?;
    let data = pattern(4096, 5);
    far.write(0, &data)?;
    // READ far[0..4096] into local, then (fenced) WRITE local back to far[..]
    // at an offset: the WRITE must carry what the READ brought.
    let rd = [Sge::new(&local, 0, 2048)?];
    let wr = [Sge::new(&local, 0, 2048)?];
    s.a.post_send(&[
        SendWr::rdma_read(1, &rd, remote(&far, 0)),
        SendWr::rdma_write(2, &wr, remote(&far, 2048))
            .fence()
            .signaled(),
    ])?;
    let c = poll_one(&mut s.a)?;
    check_eq!((c.status, c.wr_id), (WcStatus::SUCCESS, 2));
    let got = contents(&far)?;
    check!(
        got[2048..] == data[..2048],
        "the fenced WRITE did not carry the READ's data"
    );
    let rbuf = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    s.b.post_recv(&[RecvWr::new(3, &[Sge::new(&rbuf, 0, 64)?])])?;
    let sge = [Sge::new(&local, 0, 64)?];
    s.a.post_send(&[SendWr::send(4, &sge).solicited().signaled()])?;
    check_eq!(
        poll_one(&mut s.a)?.status,
        WcStatus::SUCCESS,
        "solicited SEND"
    );
    let r = poll_one(&mut s.b)?;
    check_eq!((r.status, r.wr_id, r.byte_len), (WcStatus::SUCCESS, 3, 64));
    passed(vec![])
}
