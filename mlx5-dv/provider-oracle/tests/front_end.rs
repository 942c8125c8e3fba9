//! The public API's posts against libmlx5's `mlx5_post_send`: WR lists
//! posted through `rdma_direct::Qp` on the sim (`post_send` and its
//! in-place paths, the one-opcode posts `post_write`, `post_writes`,
//! `post_write_inline`; RC, UC and UD), the SQ ring before and after read
//! back (`Qp::sq_snapshot`), and the same WRs (the same addresses, lkeys
//! and rkeys) given to the provider over a copy of the ring before. So
//! every path from a `SendWr` to ring bytes runs under the oracle, however
//! the posts are rewritten; the WRs are valid, executed by the sim and
//! completed before the next list.
//!
//! What this cannot compare: the BlueFlame register (the sim's, not
//! visible here: `send_wqes.rs` compares our driver's), and the AV bytes of
//! a UD AH, which the provider is given from our WQE (its qkey and remote
//! QPN are set by each side).
// Needs the oracle linked: without it `oracle_linked.rs` says SKIPPED.
#![cfg(provider_oracle)]

use mlx5_provider_oracle::gen::{Rng, Source};
use mlx5_provider_oracle::send::{allowed_bytes, post_theirs, ring_diffs, SqConfig, SqMem};
use mlx5_provider_oracle::wr::{ibv, Op, Sge as OSge, Ud, Wr};
use mlx5_provider_oracle::{cases, oracle_or_skip};
use rdma_direct::testing::QpHooks;
use rdma_direct::*;
use std::time::{Duration, Instant};

const QKEY: u32 = 0x1111_1111;
const PATIENCE: Duration = Duration::from_secs(30);

struct Env {
    _ctx: Context,
    pd: Pd,
    /// Local: gather, inline source, READ and atomic targets.
    src: Mr,
    /// The peer's: WRITE, READ and atomic target.
    dst: Mr,
    /// The peer's receive buffers.
    rbuf: Mr,
}

fn env() -> Env {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let src = pd.alloc_mr(1 << 16, Access::LOCAL_WRITE).unwrap();
    let all =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let dst = pd.alloc_mr(1 << 16, all).unwrap();
    let rbuf = pd.alloc_mr(1 << 16, Access::LOCAL_WRITE).unwrap();
    Env {
        _ctx: ctx,
        pd,
        src,
        dst,
        rbuf,
    }
}

/// The SQ ring and its 16-bit producer index (the doorbell record).
fn snapshot(q: &Qp) -> (Vec<u8>, u32) {
    let s = q.sq_snapshot().expect("a direct-path QP");
    let n = s.len() - 4;
    let pi = u32::from_be_bytes(s[n..].try_into().unwrap()) & 0xffff;
    (s[..n].to_vec(), pi)
}

fn poll_until(q: &mut Qp, n: usize, what: &str) -> Vec<Completion> {
    let mut got = Vec::new();
    let t = Instant::now();
    let mut wc = [Completion::default(); 16];
    while got.len() < n {
        let k = q.poll(&mut wc).unwrap();
        got.extend_from_slice(&wc[..k]);
        if k == 0 {
            assert!(
                t.elapsed() < PATIENCE,
                "{what}: {} of {n} completions",
                got.len()
            );
            std::thread::yield_now();
        }
    }
    for c in &got {
        assert!(c.status.is_ok(), "{what}: {c:?}");
    }
    got
}

/// One generated WR, as the oracle's `Wr` and as the pieces of a
/// `SendWr` (SGE ranges of `src`, built by the caller).
struct Gen<'a> {
    wr: Wr,
    /// (offset in `src`, length) of each SGE.
    sges: Vec<(usize, u32)>,
    op: WrOp<'a>,
}

/// A WR for a QP of `qp_type`; on UD, to `dest`.
fn gen_wr<'a>(
    s: &mut Rng,
    e: &Env,
    qp_type: QpType,
    dest: Option<UdDest<'a>>,
    (max_inline, max_sge): (u32, u32),
    id: u64,
) -> Gen<'a> {
    let remote = |s: &mut Rng, align: u64| RemoteAddr {
        addr: e.dst.addr() + (s.range(0, 60_000) & !(align - 1)),
        rkey: e.dst.rkey(),
    };
    let op = match (qp_type, s.range(0, 6)) {
        (QpType::Ud, k) => WrOp::UdSend {
            dest: dest.expect("a UD QP's WRs have a destination"),
            imm: (k % 2 == 1).then(|| s.next_u64() as u32),
        },
        (_, 0) => WrOp::Send,
        (_, 1) => WrOp::SendWithImm {
            imm: s.next_u64() as u32,
        },
        (_, 2) | (QpType::Uc, 4..) => WrOp::RdmaWrite {
            remote: remote(s, 1),
        },
        (_, 3) => WrOp::RdmaWriteWithImm {
            remote: remote(s, 1),
            imm: s.next_u64() as u32,
        },
        (_, 4) => WrOp::RdmaRead {
            remote: remote(s, 1),
        },
        (_, 5) => WrOp::AtomicCmpSwp {
            remote: remote(s, 8),
            compare: s.next_u64() % 4,
            swap: s.next_u64(),
        },
        _ => WrOp::AtomicFetchAdd {
            remote: remote(s, 8),
            add: s.next_u64(),
        },
    };
    let atomic = matches!(op, WrOp::AtomicCmpSwp { .. } | WrOp::AtomicFetchAdd { .. });
    // READ and atomic results land in the upper half of `src`, gathers and
    // inline copies read the lower half: the device's writes of one WR of
    // a list never change the bytes a later WR of it copies inline (ours
    // copies at our post, the provider's at its, after the device ran).
    let target = matches!(op, WrOp::RdmaRead { .. }) || atomic;
    let base = if target { 32_768 } else { 0 };
    let can_inline = matches!(
        op,
        WrOp::Send
            | WrOp::SendWithImm { .. }
            | WrOp::RdmaWrite { .. }
            | WrOp::RdmaWriteWithImm { .. }
            | WrOp::UdSend { .. }
    );
    let inline = can_inline && max_inline > 0 && s.chance(30);
    let mut sges = Vec::new();
    if atomic {
        sges.push((base + (s.range(0, 4000) * 8) as usize, 8));
    } else if inline {
        let mut left = s.range(0, max_inline as u64) as u32;
        for _ in 0..s.range(1, max_sge.min(3) as u64) {
            let len = s.range(0, left as u64) as u32;
            left -= len;
            sges.push((s.range(0, 32_000) as usize, len));
        }
    } else {
        for _ in 0..s.range(1, max_sge as u64) {
            let len = if s.chance(10) {
                0
            } else {
                s.range(1, 400) as u32
            };
            sges.push((base + s.range(0, 32_000) as usize, len));
        }
    }
    let o = |r: RemoteAddr| (r.addr, r.rkey.0);
    let oop = match op {
        WrOp::Send => Op::Send,
        WrOp::SendWithImm { imm } => Op::SendImm { imm },
        WrOp::UdSend { imm, .. } => imm.map_or(Op::Send, |imm| Op::SendImm { imm }),
        WrOp::RdmaWrite { remote } => Op::Write {
            raddr: o(remote).0,
            rkey: o(remote).1,
        },
        WrOp::RdmaWriteWithImm { remote, imm } => Op::WriteImm {
            raddr: o(remote).0,
            rkey: o(remote).1,
            imm,
        },
        WrOp::RdmaRead { remote } => Op::Read {
            raddr: o(remote).0,
            rkey: o(remote).1,
        },
        WrOp::AtomicCmpSwp {
            remote,
            compare,
            swap,
        } => Op::CmpSwap {
            raddr: o(remote).0,
            rkey: o(remote).1,
            compare,
            swap,
        },
        WrOp::AtomicFetchAdd { remote, add } => Op::FetchAdd {
            raddr: o(remote).0,
            rkey: o(remote).1,
            add,
        },
        // (Never generated above: libmlx5 posts no masked atomic, so the
        // oracle has nothing to compare them with.)
        WrOp::MaskedCmpSwap { .. } | WrOp::MaskedFetchAdd { .. } => {
            unreachable!("no masked atomics in the provider oracle")
        }
        WrOp::SendWithInv { rkey } => Op::SendInv { rkey: rkey.0 },
        // (Never generated above: window binds and LOCAL_INV are compared
        // as UMR WQEs in `umr_wqes.rs`, through libmlx5's own calls.)
        WrOp::BindMw { .. } | WrOp::LocalInv { .. } => {
            unreachable!("no window WRs in the front-end comparison")
        }
    };
    let wr = Wr {
        wr_id: id,
        op: oop,
        sges: sges
            .iter()
            .map(|&(off, len)| OSge {
                addr: e.src.addr() + off as u64,
                len,
                lkey: e.src.lkey().get(),
            })
            .collect(),
        inline,
        signaled: s.chance(40),
        solicited: s.chance(20),
        fence: s.chance(20),
        ud: None,
    };
    Gen { wr, sges, op }
}

/// One QP's run: `rounds` lists posted through the public API on `a`
/// (to `b`), each compared with the provider's writing of it.
fn run(e: &Env, qp_type: QpType, cfg: &QpConfig, seed: u64, rounds: u32) -> (u64, u64) {
    let (mut a, mut b, ah) = match qp_type {
        QpType::Ud => {
            let (mut a, mut b) = (e.pd.create_qp(cfg).unwrap(), e.pd.create_qp(cfg).unwrap());
            a.ready_ud(QKEY).unwrap();
            b.ready_ud(QKEY).unwrap();
            let ah = e.pd.create_ah(&a.av_to(&b.endpoint())).unwrap();
            (a, b, Some(ah))
        }
        _ => {
            let (a, b) = e.pd.create_connected_pair(cfg).unwrap();
            (a, b, None)
        }
    };
    let max_inline = a.max_inline();
    let mut s = Rng(seed);
    let (mut lists, mut wrs_done) = (0u64, 0u64);
    for round in 0..rounds {
        let n = s.range(1, cfg.max_send_wr.min(8) as u64) as usize;
        let dest = ah.as_ref().map(|ah| UdDest {
            ah,
            remote_qpn: b.qp_num(),
            qkey: QKEY,
        });
        let mut gens: Vec<Gen> = (0..n)
            .map(|k| {
                gen_wr(
                    &mut s,
                    e,
                    qp_type,
                    dest,
                    (max_inline, cfg.max_send_sge),
                    (round as u64) << 8 | k as u64,
                )
            })
            .collect();
        // The last one signaled, so its completion retires the list.
        gens.last_mut().unwrap().wr.signaled = true;
        let sges: Vec<Vec<Sge<'_>>> = gens
            .iter()
            .map(|g| {
                g.sges
                    .iter()
                    .map(|&(off, len)| Sge::new(&e.src, off, len).unwrap())
                    .collect()
            })
            .collect();
        let wrs: Vec<SendWr<'_>> = gens
            .iter()
            .zip(&sges)
            .map(|(g, sg)| {
                let mut f = SendFlags::empty();
                f.set(SendFlags::SIGNALED, g.wr.signaled);
                f.set(SendFlags::SOLICITED, g.wr.solicited);
                f.set(SendFlags::FENCE, g.wr.fence);
                SendWr {
                    wr_id: g.wr.wr_id,
                    op: g.op,
                    sges: sg,
                    flags: f,
                    inline: g.wr.inline,
                }
            })
            .collect();
        // Receives for what consumes one at the peer.
        let recvs = gens
            .iter()
            .filter(|g| {
                matches!(
                    g.op,
                    WrOp::Send
                        | WrOp::SendWithImm { .. }
                        | WrOp::RdmaWriteWithImm { .. }
                        | WrOp::UdSend { .. }
                )
            })
            .count();
        let rsges: Vec<[Sge<'_>; 1]> = (0..recvs)
            .map(|k| [Sge::new(&e.rbuf, k * 4096, 4096).unwrap()])
            .collect();
        let rwrs: Vec<RecvWr<'_>> = rsges
            .iter()
            .enumerate()
            .map(|(k, sg)| RecvWr::new(k as u64, sg))
            .collect();
        if !rwrs.is_empty() {
            b.post_recv(&rwrs).unwrap();
        }
        let (before, pi0) = snapshot(&a);
        // The post: the one-opcode posts where the list is of their kind
        // (half the time), else post_send.
        let one_sge_writes = wrs.iter().all(|w| {
            matches!(w.op, WrOp::RdmaWrite { .. })
                && !w.inline
                && w.sges.len() == 1
                && !w.sges[0].is_empty()
        });
        let flags = |w: &SendWr<'_>| w.flags;
        let remote_of = |w: &SendWr<'_>| match w.op {
            WrOp::RdmaWrite { remote } => remote,
            _ => unreachable!(),
        };
        let how = if qp_type != QpType::Ud && one_sge_writes && s.chance(50) {
            let ww: Vec<WriteWr<'_>> = wrs
                .iter()
                .map(|w| WriteWr {
                    wr_id: w.wr_id,
                    sge: w.sges[0],
                    remote: remote_of(w),
                    flags: flags(w),
                })
                .collect();
            if ww.len() == 1 {
                a.post_write(&ww[0]).unwrap();
                "post_write"
            } else {
                a.post_writes(&ww).unwrap();
                "post_writes"
            }
        } else if wrs.len() == 1
            && wrs[0].inline
            && matches!(wrs[0].op, WrOp::RdmaWrite { .. })
            && s.chance(50)
        {
            let w = &wrs[0];
            let mut data = Vec::new();
            for g in &gens[0].sges {
                let mut b = vec![0u8; g.1 as usize];
                e.src.read(g.0, &mut b).unwrap();
                data.extend_from_slice(&b);
            }
            a.post_write_inline(w.wr_id, &data, remote_of(w), flags(w))
                .unwrap();
            "post_write_inline"
        } else {
            a.post_send(&wrs).unwrap();
            "post_send"
        };
        let (after, pi1) = snapshot(&a);
        // The provider: the same ring before, the same WRs; the UD AV from
        // our WQE (the AH's bytes), auto-signal's CQE where ours put one.
        let wqe_cnt = (before.len() / 64) as u32;
        let at = |pi: u32| ((pi & (wqe_cnt - 1)) * 64) as usize;
        let mut theirs: Vec<Wr> = gens.iter().map(|g| g.wr.clone()).collect();
        let mut pi = pi0;
        for w in theirs.iter_mut() {
            let q = at(pi);
            if !w.signaled && after[q + 11] & 0x08 != 0 {
                w.signaled = true;
            }
            if qp_type == QpType::Ud {
                let mut av = [0u8; 48];
                for (k, b) in av.iter_mut().enumerate() {
                    *b = after[(q + 16 + k) % after.len()];
                }
                w.ud = Some(Ud {
                    av,
                    remote_qpn: b.qp_num(),
                    qkey: QKEY,
                });
            }
            pi = pi.wrapping_add(((after[q + 7] & 0x3f) as u32 * 16).div_ceil(64));
        }
        let ocfg = SqConfig {
            wqe_cnt,
            start_pi: pi0,
            max_wqebbs: 16.min(wqe_cnt),
            max_inline,
            max_post: wqe_cnt,
            qp_type: match qp_type {
                QpType::Rc => ibv::QPT_RC,
                QpType::Uc => ibv::QPT_UC,
                _ => ibv::QPT_UD,
            },
            qpn: a.qp_num(),
            sq_sig_all: false,
            prefer_bf: true,
            auto_signal: 0,
            split: 0,
        };
        let mut mem = SqMem::new(&ocfg, 0, 0);
        mem.ring.bytes_mut().copy_from_slice(&before);
        let (t, err) = post_theirs(&ocfg, &mut mem, &theirs);
        let what = format!(
            "{qp_type:?} {cfg:?} round {round} ({how}, {n} WRs: {:?})",
            theirs
        );
        assert_eq!(err, 0, "{what}: the provider refused WR {}", t.refused_at);
        assert_eq!(t.pi & 0xffff, pi1, "{what}: producer index");
        assert_eq!(u32::from_be_bytes(t.dbrec), pi1, "{what}: doorbell record");
        let ring_t = mem.ring.bytes();
        let allowed = allowed_bytes(ring_t, wqe_cnt, pi0, t.pi, qp_type == QpType::Ud);
        let d = ring_diffs(&after, ring_t, &allowed);
        assert!(
            d.is_empty(),
            "{what}: ring bytes differ at {:?}",
            d.iter()
                .take(8)
                .map(|d| (d.at / 64, d.at % 64, d.ours, d.theirs))
                .collect::<Vec<_>>()
        );
        // Executed and completed before the next list.
        let signaled = theirs
            .iter()
            .zip(&gens)
            .filter(|(_, g)| g.wr.signaled)
            .count();
        poll_until(&mut a, signaled, &what);
        poll_until(&mut b, recvs, &what);
        lists += 1;
        wrs_done += n as u64;
    }
    (lists, wrs_done)
}

#[test]
fn public_api_posts_write_the_rings_libmlx5_writes() {
    if !oracle_or_skip("public_api_posts_write_the_rings_libmlx5_writes") {
        return;
    }
    let e = env();
    let rounds = (cases(2_000) / 200).clamp(20, 500);
    let (mut lists, mut wrs) = (0, 0);
    let mut seed = 1;
    for qp_type in [QpType::Rc, QpType::Uc, QpType::Ud] {
        for (send, inline, sge) in [(1, 0, 1), (4, 64, 2), (16, 220, 4), (64, 60, 3)] {
            let cfg = QpConfig {
                qp_type,
                max_send_wr: send,
                max_inline: inline,
                max_send_sge: sge,
                max_recv_wr: 64,
                ..QpConfig::default()
            };
            let (l, w) = run(&e, qp_type, &cfg, seed, rounds);
            lists += l;
            wrs += w;
            seed += 1;
        }
    }
    mlx5_provider_oracle::say(
        "public_api_posts_write_the_rings_libmlx5_writes",
        format_args!(
            "{lists} WR lists ({wrs} WRs) posted through rdma_direct::Qp on the sim, \
             compared with mlx5_post_send"
        ),
    );
}
