//! DC with many DCIs: several DCIs on one shared CQ, some posting to bad
//! addresses, their completions interleaved (UCX PR #7878: an error CQE
//! credited to the wrong DCI, whose credits then exceeded its ring); one
//! DCT serving 64 DCIs; SENDs of several DCIs into one DCT's SRQ,
//! completed in whatever order. Skipped where the device has no DC, as in
//! `dc.rs`.

use super::dc::{dc_try, dci_cfg, number, target, KEY};
use super::*;
use rdma_direct::{CqSizing, DcDest};
use std::collections::VecDeque;

fn next(rng: &mut u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    *rng
}

/// What a WR of [`dc_dcis_on_one_cq_with_interleaved_errors`] must end as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    /// To the DCT: succeeds unless an earlier WR of its DCI failed.
    Good,
    /// The first of a batch to a bad address: the error.
    BadFirst,
    /// The rest of that batch: flushed.
    BadRest,
}

/// The shared CQ's DCIs as the case tracks them.
struct Dcis {
    /// Per DCI, its WRs outstanding in posting order: (wr_id, fate).
    queue: Vec<VecDeque<(u64, Fate)>>,
    /// Per DCI, whether its error completion was polled since its reset.
    errored: Vec<bool>,
    seq: Vec<u64>,
    /// Whether a reset may have left completions the SharedCq took from
    /// the CQ (their WRs retired, credits back) and not yet returned:
    /// cleared by a poll that returns fewer than it asked for.
    held: bool,
    max_wr: u32,
    ok: u32,
    errors: u32,
    flushed: u32,
}

impl Dcis {
    fn out(&self, i: usize) -> u32 {
        self.queue[i].len() as u32
    }

    fn total(&self) -> u32 {
        (0..self.queue.len()).map(|i| self.out(i)).sum()
    }

    /// The slot (8 bytes in src and dst) of DCI `i`'s WR number `seq`.
    fn slot(&self, i: usize, seq: u64) -> usize {
        (i * self.max_wr as usize + (seq % self.max_wr as u64) as usize) * 8
    }

    /// Takes completion `c`: its QP is the DCI that posted its wr_id, it
    /// is that DCI's oldest WR, and its status is the one it must have.
    fn complete(&mut self, c: &Completion, cq: &SharedCq, dst: &Mr) -> Result<usize, Failure> {
        let owner = (c.wr_id >> 32) as usize;
        let i = cq
            .index_of(c.qp_num)
            .ok_or_else(|| Failure(format!("a completion of no DCI of the CQ: {c:?}")))?;
        check_eq!(i, owner, "the DCI a completion names (wr {:#x})", c.wr_id);
        let (id, fate) = self.queue[i]
            .pop_front()
            .ok_or_else(|| Failure(format!("DCI {i} had nothing outstanding: {c:?}")))?;
        check_eq!(c.wr_id, id, "DCI {i}'s oldest WR");
        match (self.errored[i], fate) {
            (false, Fate::Good) => {
                check_eq!(c.status, WcStatus::SUCCESS, "wr {id:#x}");
                let at = self.slot(i, id & 0xffff_ffff);
                check_eq!(read_u64(dst, at)?, id, "the word wr {id:#x} wrote");
                self.ok += 1;
            }
            (false, Fate::BadFirst) => {
                check!(
                    !c.status.is_ok() && c.status != WcStatus::WR_FLUSH_ERR,
                    "wr {id:#x} to a bad address: {c:?}"
                );
                self.errored[i] = true;
                self.errors += 1;
            }
            (false, Fate::BadRest) => {
                return Err(Failure(format!("wr {id:#x} after no error: {c:?}")));
            }
            (true, _) => {
                check_eq!(
                    c.status,
                    WcStatus::WR_FLUSH_ERR,
                    "wr {id:#x} after the error"
                );
                self.flushed += 1;
            }
        }
        Ok(i)
    }

    /// What the CQ's credits say is outstanding is what was posted and not
    /// polled (at most that while completions may be held), and no DCI
    /// holds more than its ring.
    fn check_credits(&self, cq: &SharedCq) -> Result<(), Failure> {
        for i in 0..self.queue.len() {
            check!(
                self.out(i) <= self.max_wr,
                "DCI {i}: {} outstanding",
                self.out(i)
            );
        }
        check!(
            cq.credits_free() <= cq.depth(),
            "credits above the CQ's depth"
        );
        let taken = cq.depth() - cq.credits_free();
        if self.held {
            check!(
                taken <= self.total(),
                "{taken} CQ credits taken, {} WRs outstanding",
                self.total()
            );
            return Ok(());
        }
        check_eq!(
            cq.depth() - cq.credits_free(),
            self.total(),
            "CQ credits taken vs WRs outstanding {:?} (errored {:?}, failed {:?})",
            self.queue,
            self.errored,
            (0..self.queue.len())
                .map(|i| cq.qp(i).dci_failed())
                .collect::<Vec<_>>()
        );
        Ok(())
    }
}

pub(super) fn dc_dcis_on_one_cq_with_interleaved_errors(dev: &str) -> CaseResult {
    const N: usize = 4;
    const WR: u32 = 6;
    const ROUNDS: usize = 80;
    let t = match target(dev, 4, true)? {
        Ok(t) => t,
        Err(why) => return skipped(why),
    };
    let cfg = dci_cfg(WR);
    let mut cq =
        t.pd.create_shared_cq(CqSizing::new().queue(N as u32 * WR).depth()?)?;
    for i in 0..N {
        let k = dc_try!(cq.create_qp(&cfg), "a DCI on a shared CQ");
        check_eq!(k, i, "the DCI's index");
        cq.qp_mut(i).ready_dci()?;
    }
    let ah = t.pd.create_ah(&cq.qp(0).av_to(&t.dct.endpoint()))?;
    let to = DcDest {
        ah: &ah,
        dctn: number(&t.dct)?,
        key: KEY,
    };
    let bad = [DcDest { key: !KEY, ..to }, DcDest { dctn: 0, ..to }];
    let bytes = N * WR as usize * 8;
    let src = t.pd.alloc_mr(bytes, Access::LOCAL_WRITE)?;
    let dst = t.pd.alloc_mr(bytes, Access::MR_ALL)?;
    let mut d = Dcis {
        queue: vec![VecDeque::new(); N],
        errored: vec![false; N],
        seq: vec![0; N],
        held: false,
        max_wr: WR,
        ok: 0,
        errors: 0,
        flushed: 0,
    };
    let (mut rng, mut mixed, mut early, mut full, mut refused) =
        (0x2545_f491_4f6c_dd1du64, 0, 0, 0, 0);
    let mut failed_early = 0;
    let mut wc = [Completion::default(); 8];
    let poll = |cq: &mut SharedCq, d: &mut Dcis, wc: &mut [Completion]| -> Result<bool, Failure> {
        let n = cq.poll(wc)?;
        if n < wc.len() {
            d.held = false;
        }
        let mut qps = Vec::new();
        let mut error = false;
        for c in &wc[..n] {
            qps.push(d.complete(c, cq, &dst)?);
            error |= c.status != WcStatus::SUCCESS && c.status != WcStatus::WR_FLUSH_ERR;
        }
        qps.dedup();
        Ok(error && qps.len() > 1)
    };
    for round in 0..ROUNDS {
        for k in 0..N {
            let i = (round + k) % N;
            let s0 = [Sge::new(&src, d.slot(i, d.seq[i]), 8)?];
            let one = [SendWr::rdma_write(u64::MAX, &s0, remote(&dst, 0)).signaled()];
            if cq.qp(i).dci_failed() {
                let before = ring_snapshot(cq.qp(i));
                match cq.qp_mut(i).post_dc(&to, &one) {
                    Err(Error::QpState {
                        state: QpState::Err,
                        ..
                    }) => refused += 1,
                    r => return Err(Failure(format!("a post on failed DCI {i}: {r:?}"))),
                }
                check!(ring_snapshot(cq.qp(i)) == before, "a refused post wrote");
                continue;
            }
            let room = WR - d.out(i);
            if room == 0 {
                if d.held {
                    // Its ring may be free already: the probe waits.
                    continue;
                }
                match cq.qp_mut(i).post_dc(&to, &one) {
                    Err(Error::QueueFull) => full += 1,
                    r => return Err(Failure(format!("a post on full DCI {i}: {r:?}"))),
                }
                continue;
            }
            let n = 1 + next(&mut rng) % room as u64;
            let is_bad = next(&mut rng).is_multiple_of(4);
            let mut sges = Vec::new();
            let mut ids = Vec::new();
            for _ in 0..n {
                let seq = d.seq[i];
                d.seq[i] += 1;
                let id = ((i as u64) << 32) | seq;
                let at = d.slot(i, seq);
                src.write(at, &id.to_ne_bytes())?;
                dst.write(at, &[0; 8])?;
                sges.push(([Sge::new(&src, at, 8)?], at));
                ids.push(id);
            }
            let wrs: Vec<SendWr> = sges
                .iter()
                .zip(&ids)
                .map(|((s, at), id)| {
                    SendWr::rdma_write(*id, s, remote(&dst, *at as u64)).signaled()
                })
                .collect();
            let dest = if is_bad {
                &bad[(next(&mut rng) % 2) as usize]
            } else {
                &to
            };
            cq.qp_mut(i).post_dc(dest, &wrs)?;
            for (j, id) in ids.iter().enumerate() {
                let fate = match (is_bad, j) {
                    (false, _) => Fate::Good,
                    (true, 0) => Fate::BadFirst,
                    (true, _) => Fate::BadRest,
                };
                d.queue[i].push_back((*id, fate));
            }
            d.check_credits(&cq)?;
        }
        // Polls of 1 to 8 CQEs; the first waits for one (the device runs
        // on while the case posts).
        let deadline = Instant::now() + COMPLETION_TIMEOUT;
        for k in 0..1 + next(&mut rng) % 3 {
            let want = 1 + (next(&mut rng) % wc.len() as u64) as usize;
            loop {
                let before = d.total();
                mixed += poll(&mut cq, &mut d, &mut wc[..want])? as u32;
                if k > 0 || before == 0 || d.total() < before {
                    break;
                }
                check!(Instant::now() < deadline, "no completion of {before} WRs");
                std::thread::yield_now();
            }
        }
        for i in 0..N {
            let failed = cq.qp(i).dci_failed();
            if d.errored[i] {
                check!(failed, "round {round}: DCI {i} not failed after its error");
            } else if failed {
                // Its error taken from the CQ by another DCI's reset, and
                // held for the next polls.
                check!(
                    d.held && d.queue[i].iter().any(|w| w.1 == Fate::BadFirst),
                    "round {round}: DCI {i} failed, no error of it outstanding"
                );
                failed_early += 1;
            }
            // A failed DCI reset once drained, or at once half the time
            // (its flushes still in the CQ: dropped, the others' kept).
            if d.errored[i] && (d.queue[i].is_empty() || next(&mut rng).is_multiple_of(2)) {
                early += !d.queue[i].is_empty() as u32;
                cq.reset_qp(i)?;
                d.held = true;
                cq.qp_mut(i).ready_dci()?;
                d.queue[i].clear();
                d.errored[i] = false;
                check!(!cq.qp(i).dci_failed(), "DCI {i} failed after its reset");
            }
        }
        d.check_credits(&cq)?;
    }
    let deadline = Instant::now() + COMPLETION_TIMEOUT;
    while d.total() > 0 {
        check!(
            Instant::now() < deadline,
            "{} WRs never completed",
            d.total()
        );
        mixed += poll(&mut cq, &mut d, &mut wc)? as u32;
    }
    for i in 0..N {
        check_eq!(
            cq.qp(i).dci_failed(),
            d.errored[i],
            "DCI {i} failed at the end"
        );
    }
    d.check_credits(&cq)?;
    check_eq!(cq.credits_free(), cq.depth(), "credits free at the end");
    check!(
        d.errors >= 5 && d.ok >= 50,
        "too few errors ({}) or successes ({}): {} flushed, {mixed} mixed, {early} early, \
         {refused} refused, {full} full",
        d.errors,
        d.ok,
        d.flushed
    );
    passed(vec![format!(
        "{} ok, {} errors, {} flushed; {mixed} polls mixed an error with another DCI's \
         completion; {early} resets with flushes unpolled; {refused} posts on failed DCIs \
         and {full} on full ones refused; {failed_early} times a DCI \
         was failed before its error was returned",
        d.ok, d.errors, d.flushed
    )])
}

pub(super) fn dc_one_dct_serves_64_dcis(dev: &str) -> CaseResult {
    const N: usize = 64;
    let t = match target(dev, N as u32, true)? {
        Ok(t) => t,
        Err(why) => return skipped(why),
    };
    let (pd, mut srq, mut dct) = (t.pd, t.srq, t.dct);
    let cfg = dci_cfg(4);
    let mut cq = pd.create_shared_cq(CqSizing::new().queue(N as u32 * 4).depth()?)?;
    for _ in 0..N {
        let i = dc_try!(cq.create_qp(&cfg), "a DCI on a shared CQ");
        cq.qp_mut(i).ready_dci()?;
    }
    let mut qpns: Vec<u32> = (0..N).map(|i| cq.qp(i).qp_num()).collect();
    let ah = pd.create_ah(&cq.qp(0).av_to(&dct.endpoint()))?;
    let to = DcDest {
        ah: &ah,
        dctn: number(&dct)?,
        key: KEY,
    };
    let src = pd.alloc_mr(N * 64, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(N * 64 + 8, Access::MR_ALL)?;
    let rb = pd.alloc_mr(N * 64, Access::LOCAL_WRITE)?;
    let back = pd.alloc_mr(N * 72, Access::LOCAL_WRITE)?;
    let bufs: Vec<[Sge; 1]> = (0..N)
        .map(|k| Sge::new(&rb, k * 64, 64).map(|s| [s]))
        .collect::<Result<_, _>>()?;
    let recvs: Vec<RecvWr> = (0..N)
        .map(|k| RecvWr::new(1000 + k as u64, &bufs[k]))
        .collect();
    srq.post_recv(&recvs)?;
    let word = N * 64;
    dst.write(word, &0u64.to_ne_bytes())?;
    // Round 1: from each DCI, a WRITE to its slot and a SEND with its
    // index as the immediate.
    for i in 0..N {
        src.write(i * 64, &pattern(64, i as u8))?;
        let s = [Sge::new(&src, i * 64, 64)?];
        let id = i as u64 * 10;
        cq.qp_mut(i).post_dc(
            &to,
            &[
                SendWr::rdma_write(id + 1, &s, remote(&dst, i as u64 * 64)).signaled(),
                SendWr::send(id + 2, &s).imm(i as u32).signaled(),
            ],
        )?;
    }
    // Round 2, posted behind it: a READ of the slot back, and a
    // fetch-and-add of i + 1 on one word.
    for i in 0..N {
        let r = [Sge::new(&back, i * 64, 64)?];
        let old = [Sge::new(&back, N * 64 + i * 8, 8)?];
        let id = i as u64 * 10;
        cq.qp_mut(i).post_dc(
            &to,
            &[
                SendWr::rdma_read(id + 3, &r, remote(&dst, i as u64 * 64)).signaled(),
                SendWr::atomic_fetch_add(id + 4, &old, remote(&dst, word as u64), i as u64 + 1)
                    .signaled(),
            ],
        )?;
    }
    let mut next_of = vec![1u64; N];
    for c in poll_until(&mut cq, 4 * N)? {
        let i = (c.wr_id / 10) as usize;
        check!(i < N, "a completion of wr {}", c.wr_id);
        check_eq!(c.status, WcStatus::SUCCESS, "wr {}", c.wr_id);
        check_eq!(cq.index_of(c.qp_num), Some(i), "the DCI of wr {}", c.wr_id);
        check_eq!(c.wr_id % 10, next_of[i], "DCI {i}'s completions in order");
        next_of[i] += 1;
    }
    let mut from = [false; N];
    for c in poll_until(&mut dct, N)? {
        check_eq!(c.status, WcStatus::SUCCESS, "receive {}", c.wr_id);
        let i = c.imm.unwrap_or(u32::MAX) as usize;
        check!(
            i < N && !from[i],
            "receive {}: immediate {:?}",
            c.wr_id,
            c.imm
        );
        from[i] = true;
        check_eq!(c.src_qp.qpn(), qpns[i], "the sender of DCI {i}'s SEND");
        check_eq!(c.byte_len, 64, "DCI {i}'s SEND's length");
        let k = c.wr_id.wrapping_sub(1000) as usize;
        check!(k < N, "receive wr_id {}", c.wr_id);
        check_eq!(
            &contents(&rb)?[k * 64..k * 64 + 64],
            &pattern(64, i as u8)[..],
            "DCI {i}'s SEND in receive {}",
            c.wr_id
        );
    }
    let (db, bb) = (contents(&dst)?, contents(&back)?);
    let mut olds = Vec::new();
    for i in 0..N {
        let p = pattern(64, i as u8);
        check_eq!(&db[i * 64..i * 64 + 64], &p[..], "DCI {i}'s WRITE");
        check_eq!(&bb[i * 64..i * 64 + 64], &p[..], "DCI {i}'s READ");
        olds.push(read_u64(&back, N * 64 + i * 8)?);
    }
    let sum = (N * (N + 1) / 2) as u64;
    check_eq!(
        read_u64(&dst, word)?,
        sum,
        "the word after 64 fetch-and-adds"
    );
    olds.sort_unstable();
    olds.dedup();
    check_eq!(olds.len(), N, "distinct old values of the fetch-and-adds");
    check!(olds.iter().all(|&o| o < sum), "an old value beyond the sum");
    qpns.sort_unstable();
    qpns.dedup();
    check_eq!(qpns.len(), N, "distinct DCI numbers");
    nothing_completes(&mut dct)?;
    check_eq!(srq.outstanding(), 0, "receives left in the SRQ");
    passed(vec![])
}

pub(super) fn dc_sends_into_the_srq_in_any_order(dev: &str) -> CaseResult {
    const N: usize = 4;
    const K: usize = 48;
    const SLOTS: usize = 32;
    const WINDOW: usize = 8;
    let t = match target(dev, SLOTS as u32, true)? {
        Ok(t) => t,
        Err(why) => return skipped(why),
    };
    let (pd, mut srq, mut dct) = (t.pd, t.srq, t.dct);
    let mut dcis = Vec::new();
    for _ in 0..N {
        let mut q = dc_try!(pd.create_qp(&dci_cfg(WINDOW as u32)), "a DCI");
        q.ready_dci()?;
        dcis.push(q);
    }
    let ah = pd.create_ah(&dcis[0].av_to(&dct.endpoint()))?;
    let to = DcDest {
        ah: &ah,
        dctn: number(&dct)?,
        key: KEY,
    };
    // On the sim, receive CQEs come in swapped pairs.
    let swapped = match dct.sim_hook() {
        Some(mut h) => {
            h.swap_recv_completions(true);
            true
        }
        None => false,
    };
    let len = |i: usize, q: usize| 2 + (i * 37 + q * 11) % 199;
    let payload = |i: usize, q: usize| {
        let mut p = pattern(len(i, q), (i * 53 + q) as u8);
        p[0] = i as u8;
        p[1] = q as u8;
        p
    };
    let src = pd.alloc_mr(N * K * 256, Access::LOCAL_WRITE)?;
    for i in 0..N {
        for q in 0..K {
            src.write((i * K + q) * 256, &payload(i, q))?;
        }
    }
    let rb = pd.alloc_mr(SLOTS * 256, Access::LOCAL_WRITE)?;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut free: Vec<usize> = (0..SLOTS).collect();
    let mut posted: VecDeque<usize> = VecDeque::new();
    let mut seen = [[false; K]; N];
    let (mut sent, mut acked) = ([0usize; N], [0usize; N]);
    let (mut received, mut out_of_order) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut wc = [Completion::default(); 8];
    let mut swap_on = swapped;
    while received < N * K {
        check!(
            Instant::now() < deadline,
            "{received} of {} receives",
            N * K
        );
        // Receives into the free slots, in shuffled order.
        if free.len() >= 4 {
            for k in (1..free.len()).rev() {
                free.swap(k, (next(&mut rng) % (k as u64 + 1)) as usize);
            }
            for &s in &free {
                rb.write(s * 256, &[0xee; 256])?;
            }
            let bufs: Vec<[Sge; 1]> = free
                .iter()
                .map(|&s| Sge::new(&rb, s * 256, 256).map(|g| [g]))
                .collect::<Result<_, _>>()?;
            let wrs: Vec<RecvWr> = free
                .iter()
                .zip(&bufs)
                .map(|(&s, b)| RecvWr::new(s as u64, b))
                .collect();
            srq.post_recv(&wrs)?;
            posted.extend(free.drain(..));
        }
        let i = (next(&mut rng) % N as u64) as usize;
        let n = (1 + next(&mut rng) % 3) as usize;
        let n = n.min(K - sent[i]).min(WINDOW - (sent[i] - acked[i]));
        if n > 0 {
            let sges: Vec<[Sge; 1]> = (sent[i]..sent[i] + n)
                .map(|q| Sge::new(&src, (i * K + q) * 256, len(i, q) as u32).map(|s| [s]))
                .collect::<Result<_, _>>()?;
            let wrs: Vec<SendWr> = sges
                .iter()
                .enumerate()
                .map(|(k, s)| {
                    let q = sent[i] + k;
                    let w = SendWr::send(q as u64, s).signaled();
                    if q % 2 == 1 {
                        w.imm((i << 16 | q) as u32)
                    } else {
                        w
                    }
                })
                .collect();
            dcis[i].post_dc(&to, &wrs)?;
            sent[i] += n;
        }
        for (i, dci) in dcis.iter_mut().enumerate() {
            let n = dci.poll(&mut wc)?;
            for c in &wc[..n] {
                check_eq!(
                    (c.wr_id, c.status),
                    (acked[i] as u64, WcStatus::SUCCESS),
                    "DCI {i}'s SEND"
                );
                acked[i] += 1;
            }
        }
        if swap_on && acked.iter().all(|&a| a == K) {
            // Every SEND landed: the last of a pair comes out now.
            if let Some(mut h) = dct.sim_hook() {
                h.swap_recv_completions(false);
            }
            swap_on = false;
        }
        let n = dct.poll(&mut wc)?;
        for c in &wc[..n] {
            check_eq!(c.status, WcStatus::SUCCESS, "receive {}", c.wr_id);
            let s = c.wr_id as usize;
            let at = posted
                .iter()
                .position(|&p| p == s)
                .ok_or_else(|| Failure(format!("receive {s} completed while not posted")))?;
            out_of_order += (at != 0) as u32;
            posted.remove(at);
            let got = contents(&rb)?[s * 256..s * 256 + 256].to_vec();
            let (i, q) = (got[0] as usize, got[1] as usize);
            check!(i < N && q < K, "receive {s}: header {i}, {q}");
            check!(!seen[i][q], "DCI {i}'s SEND {q} received twice");
            seen[i][q] = true;
            check_eq!(
                c.src_qp.qpn(),
                dcis[i].qp_num(),
                "the sender of SEND {i}.{q}"
            );
            check_eq!(c.qp_num, dct.qp_num(), "qp_num of receive {s}");
            check_eq!(c.byte_len as usize, len(i, q), "byte_len of SEND {i}.{q}");
            let want = payload(i, q);
            check_eq!(&got[..want.len()], &want[..], "SEND {i}.{q}'s bytes");
            check!(
                got[want.len()..].iter().all(|&b| b == 0xee),
                "SEND {i}.{q} wrote past its length"
            );
            let imm = (q % 2 == 1).then_some((i << 16 | q) as u32);
            check_eq!(c.imm, imm, "SEND {i}.{q}'s immediate");
            free.push(s);
            received += 1;
        }
    }
    check!(
        seen.iter().all(|s| s.iter().all(|&x| x)),
        "a SEND never received"
    );
    if swapped {
        check!(
            out_of_order > 0,
            "the sim's swapped receive completions never came"
        );
    }
    nothing_completes(&mut dct)?;
    passed(vec![format!(
        "{received} receives, {out_of_order} out of posting order"
    )])
}
