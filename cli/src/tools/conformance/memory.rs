//! Registered memory: the caller's own buffers of every kind as local SGEs
//! and remote targets, receives read in place, MRs that go when dropped
//! (after their last WR), and write access to read-only memory refused.

use super::*;
use rdma_direct::{LocalMr, MemfdPages, Memory};

const RW: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ);

/// `mem` registered on `s.pd`: a WRITE from it (a local SGE) into a crate
/// MR, and a WRITE from a crate MR into it (a remote target), each checked
/// byte for byte; then it comes back, the same memory with the bytes.
fn local_and_remote(s: &mut Setup, mem: Memory, what: &str) -> CaseResult {
    let (ptr, len) = (mem.as_ptr() as u64, mem.len());
    let n = len.min(64 << 10);
    let mr =
        s.pd.reg_mr(mem, RW)
            .map_err(|e| Failure(format!("register {what}: {e}")))?;
    check_eq!(mr.addr(), ptr, "{what}: the MR is the caller's memory");
    let other = s.pd.alloc_mr(n, RW)?;
    let out = pattern(n, 0x31);
    mr.write(0, &out)?;
    let sge = [Sge::new(&mr, 0, n as u32)?];
    s.a.post_send(&[SendWr::rdma_write(1, &sge, remote(&other, 0)).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check!(wc.status.is_ok(), "{what} as a local SGE: {wc:?}");
    check!(
        contents(&other)? == out,
        "{what} as a local SGE: the bytes landed"
    );
    let back = pattern(n, 0x77);
    other.write(0, &back)?;
    let sge = [Sge::new(&other, 0, n as u32)?];
    s.a.post_send(&[SendWr::rdma_write(2, &sge, remote(&mr, (len - n) as u64)).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check!(wc.status.is_ok(), "{what} as a remote target: {wc:?}");
    let mut got = vec![0; n];
    mr.read(len - n, &mut got)?;
    check!(got == back, "{what} as a remote target: the bytes landed");
    let live = s.pd.live_mrs();
    let mem = match mr.try_into_memory() {
        Ok(Some(m)) => m,
        Ok(None) => return Err(Failure(format!("{what}: no memory came back"))),
        Err(_) => {
            return Err(Failure(format!(
                "{what}: not handed back with nothing outstanding"
            )))
        }
    };
    check_eq!(
        s.pd.live_mrs(),
        live - 1,
        "{what}: deregistered when handed back"
    );
    check_eq!(mem.as_ptr() as u64, ptr, "{what}: the same memory back");
    passed(vec![format!(
        "{what}: {len} bytes at {ptr:#x}, {n} bytes each way"
    )])
}

pub(super) fn a_vec_is_a_local_sge_and_a_remote_target(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    local_and_remote(&mut s, vec![0u8; 256 << 10].into(), "a Vec<u8>")
}

pub(super) fn an_anonymous_mmap_is_a_local_sge_and_a_remote_target(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let map = rdma_direct::memmap2::MmapMut::map_anon(256 << 10)
        .map_err(|e| Failure(format!("mmap: {e}")))?;
    local_and_remote(&mut s, map.into(), "an anonymous MmapMut")
}

pub(super) fn a_tmpfs_file_mapping_is_a_local_sge_and_a_remote_target(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let map = Memory::memfd(256 << 10, MemfdPages::Tmpfs)?;
    local_and_remote(
        &mut s,
        map.into(),
        "a tmpfs file mapping (memfd, MAP_SHARED)",
    )
}

pub(super) fn a_hugetlbfs_mapping_is_a_local_sge_and_a_remote_target(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    match Memory::memfd(2 << 20, MemfdPages::Huge2M) {
        Ok(map) => local_and_remote(
            &mut s,
            map.into(),
            "a hugetlbfs file mapping (memfd MFD_HUGETLB, 2 MiB pages)",
        ),
        Err(e) => {
            let free = std::fs::read_to_string("/proc/sys/vm/nr_hugepages").unwrap_or_default();
            skipped(format!(
                "no 2 MiB huge page to map ({e}; /proc/sys/vm/nr_hugepages is {:?}): \
                 reserve some (scripts/rxe-vm's guest does)",
                free.trim()
            ))
        }
    }
}

/// A receive moves its `LocalMr` into the RQ; after its completion the
/// buffer comes back and the message is read in place, as a slice.
pub(super) fn a_receive_is_read_in_place(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let rbuf: LocalMr = s.pd.alloc_local_mr(4096, Access::LOCAL_WRITE)?;
    let at = rbuf.addr();
    s.b.post_recv_owned(5, rbuf, 64, 1024)
        .map_err(Error::from)?;
    let mut msg = s.pd.reg_local_mr(vec![0u8; 1024], Access::empty())?;
    let text = pattern(1000, 3);
    msg[..1000].copy_from_slice(&text);
    s.a.post_send_owned(&SendWr::send(6, &[]).signaled(), msg, 0, 1000)
        .map_err(Error::from)?;
    let wc = poll_one(&mut s.a)?;
    check!(wc.status.is_ok() && wc.wr_id == 6, "the SEND: {wc:?}");
    let (id, msg) =
        s.a.take_send_buf()
            .ok_or(Failure("the SEND's buffer did not come back".into()))?;
    check_eq!(id, 6);
    check!(
        msg[..1000] == text[..],
        "the SEND's buffer comes back unchanged"
    );
    let wc = poll_one(&mut s.b)?;
    check!(
        wc.status.is_ok() && wc.wr_id == 5 && wc.byte_len == 1000,
        "the receive: {wc:?}"
    );
    let (id, rbuf) =
        s.b.take_recv_buf()
            .ok_or(Failure("the receive's buffer did not come back".into()))?;
    check_eq!((id, rbuf.addr()), (5, at));
    // In place: the bytes the device wrote, as a plain slice of the MR.
    let got: &[u8] = &rbuf[64..64 + wc.byte_len as usize];
    check!(got == &text[..], "the message, read in place");
    check!(
        s.b.take_recv_buf().is_none(),
        "one buffer, handed back once"
    );
    passed(vec![format!(
        "{} bytes read in place at {:#x}",
        wc.byte_len,
        at + 64
    )])
}

/// The last handle of the local MR of an in-flight WRITE is dropped: the
/// WRITE still completes successfully, and the MR is deregistered only
/// once that completion has been polled (the PD's live-MR count).
pub(super) fn a_dropped_in_flight_mr_goes_after_its_completion(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let len = 1 << 20;
    let dst = s.pd.alloc_mr(len, RW)?;
    let src = s.pd.reg_mr(pattern(len, 9), Access::empty())?;
    let live = s.pd.live_mrs();
    let sge = [Sge::new(&src, 0, len as u32)?];
    s.a.post_send(&[SendWr::rdma_write(7, &sge, remote(&dst, 0)).signaled()])?;
    drop(src);
    check_eq!(
        s.pd.live_mrs(),
        live,
        "live MRs right after the drop (the WRITE may still read it)"
    );
    check!(s.pd.reclaim() == 1, "one MR waits for its WR");
    let wc = poll_one(&mut s.a)?;
    check!(wc.status.is_ok(), "the WRITE of a dropped MR: {wc:?}");
    check_eq!(
        s.pd.reclaim(),
        0,
        "MRs waiting after the completion was polled"
    );
    check_eq!(
        s.pd.live_mrs(),
        live - 1,
        "live MRs after the completion was polled"
    );
    check!(contents(&dst)? == pattern(len, 9), "every byte landed");
    passed(vec![format!(
        "live MRs {live} until the completion, {} after",
        live - 1
    )])
}

/// A remote-target MR dropped with nothing outstanding is deregistered at
/// once: the next WRITE into it fails with REM_ACCESS_ERR.
pub(super) fn a_dropped_remote_target_refuses_the_next_write(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let src = s.pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let target = s.pd.alloc_mr(4096, RW)?;
    let to = remote(&target, 0);
    let sge = [Sge::new(&src, 0, 8)?];
    s.a.post_send(&[SendWr::rdma_write(1, &sge, to).signaled()])?;
    check!(
        poll_one(&mut s.a)?.status.is_ok(),
        "the WRITE before the drop"
    );
    let live = s.pd.live_mrs();
    drop(target);
    check_eq!(s.pd.live_mrs(), live - 1, "deregistered at the drop");
    s.a.post_send(&[SendWr::rdma_write(2, &sge, to).signaled()])?;
    let wc = poll_one(&mut s.a)?;
    check_eq!(
        wc.status,
        WcStatus::REM_ACCESS_ERR,
        "the WRITE after the drop"
    );
    passed(vec![])
}

/// LOCAL_WRITE on a read-only mapping is refused: by the buffer's type on
/// the sim, by the kernel (`EFAULT`) on verbs; nothing is registered.
pub(super) fn local_write_on_read_only_memory_is_refused(dev: &str) -> CaseResult {
    let s = setup(dev)?;
    let map = Memory::memfd_read_only(&[7u8; 8192])?;
    let live = s.pd.live_mrs();
    let regs = s.pd.registrations();
    let r = s.pd.reg_mr(map, Access::LOCAL_WRITE);
    let how = match &r {
        Err(Error::Register(RegRefusal::ReadOnly)) => "refused by type (sim)".to_string(),
        Err(Error::Verbs {
            call: "ibv_reg_mr",
            errno,
            ..
        }) if *errno == libc::EFAULT => "ibv_reg_mr: EFAULT".to_string(),
        other => {
            return Err(Failure(format!(
                "LOCAL_WRITE on a read-only mapping: {other:?}"
            )))
        }
    };
    check_eq!(
        (s.pd.live_mrs(), s.pd.registrations()),
        (live, regs),
        "nothing registered"
    );
    passed(vec![how])
}

/// Receives kept posted into other memory (a server's) hold no dropped MR:
/// it is deregistered at its drop; one a posted receive names waits for
/// that receive's completion.
pub(super) fn posted_receives_hold_only_the_mr_they_name(dev: &str) -> CaseResult {
    let mut s = setup(dev)?;
    let ring = s.pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    for i in 0..4 {
        let sge = [Sge::new(&ring, i * 1024, 1024)?];
        s.b.post_recv(&[RecvWr::new(i as u64, &sge)])?;
    }
    let live = s.pd.live_mrs();
    let target = s.pd.alloc_mr(4096, RW)?;
    drop(target);
    check_eq!(
        s.pd.live_mrs(),
        live,
        "a dropped MR no posted receive names"
    );
    let named = s.pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    let sge = [Sge::new(&named, 0, 64)?];
    s.b.post_recv(&[RecvWr::new(9, &sge)])?;
    drop(named);
    check_eq!(
        s.pd.live_mrs(),
        live + 1,
        "a dropped MR the fifth receive names"
    );
    let msg = s.pd.alloc_mr(64, Access::empty())?;
    let m = [Sge::new(&msg, 0, 8)?];
    for i in 0..5 {
        s.a.post_send(&[SendWr::send(i, &m).signaled()])?;
        check!(poll_one(&mut s.a)?.status.is_ok(), "SEND {i}");
        check!(poll_one(&mut s.b)?.status.is_ok(), "receive {i}");
    }
    s.pd.reclaim();
    check_eq!(
        s.pd.live_mrs(),
        live + 1,
        "after the fifth receive completed (msg live)"
    );
    passed(vec![])
}
