//! Successive doorbells on one send queue against libmlx5's: the
//! BlueFlame register half each doorbell writes (`bf->offset ^=
//! bf->buf_size` after every doorbell, `post_send_db`), the doorbell
//! record and the producer index, over several lists posted to the same
//! queue pair and retired in between. `send_wqes.rs` makes a new queue
//! per list, so it only ever sees the first doorbell (offset 0): a driver
//! that never toggles the half passes it.
// Needs the oracle linked: without it `oracle_linked.rs` says SKIPPED.
#![cfg(provider_oracle)]

use mlx5_dv::driver::SendQueue;
use mlx5_dv::dv::{mlx5dv_bf, mlx5dv_qp, mlx5dv_wq};
use mlx5_provider_oracle::gen::{self, Rng, Source, ARENA};
use mlx5_provider_oracle::mem::Mem;
use mlx5_provider_oracle::oracle_or_skip;
use mlx5_provider_oracle::send::{ProviderSq, ProviderWrs, BF_SIZE};
use mlx5_provider_oracle::wr::Op;

fn one_case(seed: u64) -> Result<u32, String> {
    let mut s = Rng(seed);
    let mut cfg = gen::sq_config(&mut s);
    // Both copy a single WQE whole (libmlx5 only with prefer_bf), so
    // every byte of both registers must agree.
    cfg.prefer_bf = true;
    cfg.sq_sig_all = false;
    let arena: Vec<u8> = (0..ARENA).map(|_| s.next_u64() as u8).collect();
    let mem = |len| Mem::zeroed(len);
    let (o_ring, o_db, o_bf) = (
        mem(cfg.wqe_cnt as usize * 64),
        mem(64),
        mem(2 * BF_SIZE as usize),
    );
    let (t_ring, t_db, t_bf) = (
        mem(cfg.wqe_cnt as usize * 64),
        mem(64),
        mem(2 * BF_SIZE as usize),
    );
    let desc = mlx5dv_qp {
        dbrec: o_db.ptr().cast(),
        sq: mlx5dv_wq {
            buf: o_ring.ptr().cast(),
            wqe_cnt: cfg.wqe_cnt,
            stride: 64,
        },
        rq: mlx5dv_wq {
            buf: core::ptr::null_mut(),
            wqe_cnt: 0,
            stride: 0,
        },
        bf: mlx5dv_bf {
            reg: o_bf.ptr().cast(),
            size: BF_SIZE,
        },
        ..mlx5dv_qp::zeroed()
    };
    // SAFETY: the ring, record and registers are this function's, alive
    // until it returns, after `sq` is dropped.
    let mut sq = unsafe { SendQueue::new(&desc, cfg.qpn, cfg.max_inline, cfg.max_post) }
        .map_err(|e| e.to_string())?;
    assert!(sq.limit_wqe_size(cfg.max_wqebbs));
    sq.set_auto_signal(0);
    assert!(sq.start_at(cfg.start_pi));
    let mut theirs = ProviderSq::new(&cfg, &t_ring, &t_db, &t_bf);
    let mut result = Ok(0);
    let rounds = s.range(2, 6);
    for round in 0..rounds {
        let mut wrs = gen::wr_list(&mut s, &cfg, arena.as_ptr() as u64);
        wrs.truncate(s.range(1, 3).min(cfg.max_post as u64) as usize);
        for w in &mut wrs {
            // FETCH_ADD's compare field differs by design (send_wqes.rs
            // masks it); it would show in the BlueFlame copy.
            if let Op::FetchAdd { raddr, rkey, add } = w.op {
                w.op = Op::CmpSwap {
                    raddr,
                    rkey,
                    compare: add,
                    swap: !add,
                };
            }
        }
        let half = theirs.state().bf_offset as usize;
        let first = sq.pi();
        let mut last = first;
        for w in &wrs {
            last = sq.pi();
            if let Err(e) = w.with_wqe(false, &arena, |wqe| sq.post(wqe, w.wr_id)) {
                result = Err(format!("round {round}: ours refused {w:?}: {e}"));
                break;
            }
        }
        if result.is_err() {
            break;
        }
        sq.ring_doorbell();
        let pw = ProviderWrs::of(&wrs);
        let list = &pw.list;
        let (err, bad) = theirs.post(list);
        if err != 0 {
            result = Err(format!(
                "round {round}: the provider refused WR {bad}: errno {err}"
            ));
            break;
        }
        let st = theirs.state();
        // One WQE of one DS (a SEND of nothing): libmlx5 rings 8 bytes
        // even with prefer_bf, ours copies the WQEBB (docs/prm.md).
        let ds = t_ring.bytes()[(first & (cfg.wqe_cnt - 1)) as usize * 64 + 7] & 0x3f;
        if wrs.len() == 1 && ds == 1 {
            let (o, t) = (o_bf.ptr(), t_bf.ptr());
            // SAFETY: bytes 8..BF_SIZE of the half just written, in both
            // register pairs (2 * BF_SIZE bytes each); nothing else holds
            // a reference to them.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    t.add(half + 8),
                    o.add(half + 8),
                    BF_SIZE as usize - 8,
                )
            };
        }
        let what = format!("round {round} ({} WRs, half {half:#x})", wrs.len());
        if sq.pi() != st.cur_post {
            result = Err(format!(
                "{what}: producer index ours {:#x}, theirs {:#x}",
                sq.pi(),
                st.cur_post
            ));
            break;
        }
        if o_db.bytes()[4..8] != t_db.bytes()[4..8] {
            result = Err(format!("{what}: doorbell record differs"));
            break;
        }
        if st.bf_offset as usize != half ^ BF_SIZE as usize {
            result = Err(format!("{what}: libmlx5 did not toggle its half"));
            break;
        }
        if let Some(i) = (0..2 * BF_SIZE as usize).find(|&i| o_bf.bytes()[i] != t_bf.bytes()[i]) {
            result = Err(format!(
                "{what}: BlueFlame registers differ first at byte {i:#x} (ours {:#04x}, theirs {:#04x})",
                o_bf.bytes()[i],
                t_bf.bytes()[i]
            ));
            break;
        }
        // Retire the round on both sides, so that the next fits.
        if sq.complete(last as u16).is_none() {
            result = Err(format!("{what}: ours did not retire WQE {last:#x}"));
            break;
        }
        theirs.retire_sends(wrs.len() as u32);
        result = result.map(|n| n + 1);
    }
    drop(theirs);
    drop(sq);
    result
}

#[test]
fn successive_doorbells_write_the_blueflame_halves_libmlx5_writes() {
    if !oracle_or_skip("successive_doorbells_write_the_blueflame_halves_libmlx5_writes") {
        return;
    }
    let n = (mlx5_provider_oracle::cases(2_000) / 4).max(100) as u64;
    let mut doorbells = 0;
    for seed in 0..n {
        match one_case(seed) {
            Ok(k) => doorbells += k,
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
    assert!(
        doorbells >= 2 * n as u32,
        "only {doorbells} doorbells compared"
    );
}
