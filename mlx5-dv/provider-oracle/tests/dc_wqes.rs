//! DC send WQEs against libmlx5's `ibv_wr_*` / `mlx5dv_wr_*` builders
//! (`harness/dc.c`, `src/dc.rs`): generated DC WR lists posted through our
//! driver and through a DCI of the provider's over identical rings; every
//! byte of the ring compared (but those `dc_allowed_bytes` allows), the
//! doorbell record, the BlueFlame registers and the producer index.
// Needs the oracle linked: without it `oracle_linked.rs` says SKIPPED.
#![cfg(provider_oracle)]

use mlx5_dv::wqe::WqeError;
use mlx5_provider_oracle::dc::{self, DcVerdict, DcWr, Setter};
use mlx5_provider_oracle::gen::{Rng, Source, ARENA};
use mlx5_provider_oracle::send::SqMem;
use mlx5_provider_oracle::wr::{Op, Sge};
use mlx5_provider_oracle::{cases, oracle_or_skip, say};
use std::collections::BTreeMap;

/// What a run saw: lists agreed, WRs and WQEBBs in them, WRs by op, and
/// lists by the situations they reached.
#[derive(Default)]
struct Tally {
    agreed: u64,
    wrs: u64,
    wqebbs: u64,
    ops: BTreeMap<&'static str, u64>,
    situations: BTreeMap<&'static str, u64>,
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Send => "SEND",
        Op::SendImm { .. } => "SEND_IMM",
        Op::SendInv { .. } => "SEND_INV",
        Op::Write { .. } => "WRITE",
        Op::WriteImm { .. } => "WRITE_IMM",
        Op::Read { .. } => "READ",
        Op::CmpSwap { .. } => "CMP_SWAP",
        Op::FetchAdd { .. } => "FETCH_ADD",
    }
}

/// One generated case (seed `seed`): `Err` with the case and what differs.
fn one_case(seed: u64, every: bool, t: &mut Tally) -> Result<(), String> {
    let mut s = Rng(seed);
    let cfg = dc::dci_config(&mut s);
    let mut arena = vec![0u8; ARENA];
    for b in arena.iter_mut() {
        *b = s.next_u64() as u8;
    }
    let wrs = dc::dc_wr_list(&mut s, &cfg, arena.as_ptr() as u64, every);
    match dc::dc_differences(&cfg, &wrs, None, &arena, seed) {
        DcVerdict::Agree(wqebbs) => {
            t.agreed += 1;
            for k in dc::dc_situations(&cfg, &wrs) {
                *t.situations.entry(k).or_default() += 1;
            }
            t.wrs += wrs.len() as u64;
            t.wqebbs += wqebbs as u64;
            for w in &wrs {
                *t.ops.entry(op_name(w.wr.op)).or_default() += 1;
            }
            Ok(())
        }
        DcVerdict::Differ(bad) => Err(format!(
            "seed {seed:#x}: {cfg:?}\n{} WRs, first {:?}\n{}",
            wrs.len(),
            wrs.first(),
            bad.join("\n")
        )),
    }
}

fn run(test: &str, every: bool, default: u32) {
    mlx5_provider_oracle::ffi::check_dc_abi().unwrap();
    let n = cases(default);
    let mut t = Tally::default();
    let mut failures = Vec::new();
    for k in 0..n as u64 {
        let seed = k.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ if every { 0xdc } else { 0x5e };
        if let Err(e) = one_case(seed, every, &mut t) {
            failures.push(e);
            if failures.len() >= 3 {
                break;
            }
        }
    }
    say(
        test,
        format_args!(
            "{} DC WR lists ({} WRs, {} WQEBBs) compared with libmlx5's builders; WRs by op {:?}",
            t.agreed, t.wrs, t.wqebbs, t.ops
        ),
    );
    say(
        test,
        format_args!("lists compared, by situation: {:?}", t.situations),
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(t.agreed > 0, "no list compared");
    // What the generator must reach, once enough lists are compared.
    if t.agreed >= 1_000 {
        let need = [
            "a datagram segment ending the ring (the next segment at its start)",
            "a WQE across the ring's end",
            "an inline payload of max_inline bytes",
            "an empty inline payload",
            "the DC address before the data",
            "the DC address after the data",
            "ibv_wr_set_sge",
            "ibv_wr_set_sge_list",
            "ibv_wr_set_inline_data",
            "ibv_wr_set_inline_data_list",
            "an AV whose dqp_dct has bits of its own",
            "a list across producer index 2^16",
            "a list across producer index 2^32",
            "a list of 64 WRs",
        ];
        for k in need {
            assert!(t.situations.contains_key(k), "no compared list had {k}");
        }
    }
}

/// DC SEND and SEND_IMM lists (SGEs, inline, the DC address given before
/// or after the data): byte for byte as libmlx5 writes them.
#[test]
fn dc_send_lists_write_the_rings_libmlx5_writes() {
    let test = "dc_send_lists_write_the_rings_libmlx5_writes";
    if !oracle_or_skip(test) {
        return;
    }
    run(test, false, 10_000);
}

/// DC lists of every operation (SEND, SEND_IMM, WRITE, WRITE_IMM, READ,
/// CMP_SWAP, FETCH_ADD).
#[test]
fn dc_lists_of_every_operation_write_the_rings_libmlx5_writes() {
    let test = "dc_lists_of_every_operation_write_the_rings_libmlx5_writes";
    if !oracle_or_skip(test) {
        return;
    }
    run(test, true, 10_000);
}

/// The comparison sees a one-bit change, on our side only, of a WR's DCT
/// number, DC key, AV (past the key and `dqp_dct`, which the DC address
/// overwrites or ORs), flags or an SGE's lkey: a test that could not fail
/// would prove nothing.
#[test]
fn a_dc_wr_changed_on_one_side_is_a_difference() {
    let test = "a_dc_wr_changed_on_one_side_is_a_difference";
    if !oracle_or_skip(test) {
        return;
    }
    let mut caught = 0;
    for seed in 0..400u64 {
        let mut s = Rng(seed);
        let mut cfg = dc::dci_config(&mut s);
        cfg.sq_sig_all = false;
        let mut arena = vec![0u8; ARENA];
        for b in arena.iter_mut() {
            *b = s.next_u64() as u8;
        }
        let wrs = dc::dc_wr_list(&mut s, &cfg, arena.as_ptr() as u64, false);
        let mut changed = wrs.clone();
        let w = &mut changed[s.range(0, wrs.len() as u64 - 1) as usize];
        match s.range(0, 5) {
            0 => {
                // A bit the AV's dqp_dct has set hides the DCT number's.
                let bit = 1u32 << s.range(0, 23);
                if u32::from_be_bytes(w.dc.av[8..12].try_into().unwrap()) & bit != 0 {
                    continue;
                }
                w.dc.dctn ^= bit;
            }
            1 => w.dc.key ^= 1 << s.range(0, 63),
            2 => w.dc.av[s.range(12, 47) as usize] ^= 1 << s.range(0, 7),
            3 => w.wr.solicited = !w.wr.solicited,
            4 if !w.wr.inline && w.wr.sges.iter().any(|g| g.len != 0) => {
                let g = w.wr.sges.iter_mut().find(|g| g.len != 0).unwrap();
                g.lkey ^= 1 << s.range(0, 31);
            }
            _ => w.wr.signaled = !w.wr.signaled,
        }
        let v = dc::dc_differences(&cfg, &wrs, Some(&changed), &arena, seed);
        assert!(
            matches!(v, DcVerdict::Differ(_)),
            "seed {seed}: a changed DC WR went unnoticed: {v:?}"
        );
        caught += 1;
    }
    assert!(caught > 350, "only {caught} of 400 changes tried");
}

/// A DC WR refused for its inline payload (one byte over `max_inline`),
/// and a batch over the WR limit: libmlx5's `ibv_wr_complete` returns
/// ENOMEM and rolls the whole batch back (producer index unchanged, no
/// doorbell record, no BlueFlame write; the bytes its builders wrote stay
/// in the ring, unused); ours refuses that WR with a typed error
/// (`InlineTooLong`, `WrLimit` or `QueueFull`) and writes nothing of it, having posted
/// and rung the WRs before it, as `ibv_post_send` does: a batch is all or
/// nothing in the builders only.
#[test]
fn dc_refusals_agree_with_libmlx5() {
    let test = "dc_refusals_agree_with_libmlx5";
    if !oracle_or_skip(test) {
        return;
    }
    let mut seen = [0u32; 2];
    for seed in 0..300u64 {
        let mut s = Rng(seed);
        let mut cfg = dc::dci_config(&mut s);
        cfg.split = 0;
        let mut arena = vec![0u8; ARENA];
        for b in arena.iter_mut() {
            *b = s.next_u64() as u8;
        }
        let base = arena.as_ptr() as u64;
        let mut w: DcWr = dc::dc_wr(&mut s, &cfg, base, false);
        let too_long = seed % 2 == 0 && (cfg.max_inline as usize) < ARENA;
        let wrs = if too_long {
            w.wr.inline = true;
            w.wr.sges = vec![Sge {
                addr: base,
                len: cfg.max_inline + 1,
                lkey: 0,
            }];
            w.setter = Setter::Inline;
            vec![w]
        } else {
            // max_post + 1 WRs, the last over the limit.
            let n = (cfg.max_post + 1).min(64) as usize;
            if n <= cfg.max_post as usize {
                continue;
            }
            (0..n)
                .map(|_| dc::dc_wr(&mut s, &cfg, base, false))
                .collect()
        };
        let reach = (wrs.len() as u32 * cfg.max_wqebbs).min(cfg.wqe_cnt);
        let mut ours = SqMem::new(&cfg, seed, reach);
        let mut theirs = SqMem::new(&cfg, seed, reach);
        let (o, refused) = dc::post_ours_dc(&cfg, &mut ours, &wrs, &arena);
        let (t, err) = dc::post_theirs_dc(&cfg, &mut theirs, &wrs);
        assert_eq!(err, 12, "seed {seed}: libmlx5's ibv_wr_complete: ENOMEM");
        assert_eq!(t.pi, cfg.start_pi, "seed {seed}: libmlx5 rolled back");
        assert_eq!(t.dbrec, [0; 4], "seed {seed}: libmlx5 rang nothing");
        assert!(
            t.bf.iter().all(|&b| b == 0),
            "seed {seed}: no BlueFlame write"
        );
        let last = wrs.len() - 1;
        match refused {
            Some((at, WqeError::InlineTooLong { len, max })) if too_long => {
                assert_eq!(
                    (at, len, max),
                    (0, cfg.max_inline as usize + 1, cfg.max_inline)
                );
                assert_eq!(o.pi, cfg.start_pi, "seed {seed}: ours wrote nothing");
                assert_eq!(o.dbrec, [0; 4], "seed {seed}");
                seen[0] += 1;
            }
            Some((at, WqeError::QueueFull { .. } | WqeError::WrLimit { .. })) if !too_long => {
                assert_eq!(at, last, "seed {seed}: ours refused the WR over the limit");
                assert_ne!(
                    o.pi, cfg.start_pi,
                    "seed {seed}: ours posted the WRs before it"
                );
                seen[1] += 1;
            }
            r => panic!("seed {seed}: ours {r:?}, too_long {too_long}"),
        }
    }
    say(
        test,
        format_args!(
            "{} inline-too-long and {} over-the-WR-limit refusals compared with libmlx5's builders",
            seen[0], seen[1]
        ),
    );
    assert!(seen[0] > 50 && seen[1] > 50, "{seen:?}");
}

/// One DC RDMA_WRITE as libmlx5's builders write it, checked byte by byte
/// against the layout written out here by hand (not by our codec): ctrl,
/// the AV with the DC key at 0..8 and `dqp_dct | DCT number | 1 << 31` at
/// 8..12, the rest of the AV as given, raddr, one data segment; on a zeroed
/// ring (the ctrl immediate, never written, stays zero). What our codec's
/// DC WRITE must write, whatever it supports today.
#[test]
fn libmlx5_writes_a_dc_write_as_the_layout_says() {
    let test = "libmlx5_writes_a_dc_write_as_the_layout_says";
    if !oracle_or_skip(test) {
        return;
    }
    use mlx5_provider_oracle::dc::{Dc, ProviderDcWrs, ProviderDci, QPT_DRIVER};
    use mlx5_provider_oracle::mem::Mem;
    use mlx5_provider_oracle::send::{SqConfig, BF_SIZE};
    use mlx5_provider_oracle::wr::Wr;
    let cfg = SqConfig {
        wqe_cnt: 4,
        start_pi: 0x1_0002,
        max_wqebbs: 2,
        max_inline: 0,
        max_post: 2,
        qp_type: QPT_DRIVER,
        qpn: 0x12_3456,
        sq_sig_all: false,
        prefer_bf: false,
        auto_signal: 0,
        split: 0,
    };
    let mut av = [0u8; 48];
    for (i, b) in av.iter_mut().enumerate() {
        *b = 0xa0 ^ i as u8;
    }
    av[8..12].copy_from_slice(&[0x00, 0x40, 0x00, 0x01]);
    let w = DcWr {
        wr: Wr {
            wr_id: 7,
            op: Op::Write {
                raddr: 0x1122_3344_5566_7788,
                rkey: 0x99aa_bbcc,
            },
            sges: vec![Sge {
                addr: 0x0102_0304_0506_0708,
                len: 0x1234,
                lkey: 0xdead_beef,
            }],
            inline: false,
            signaled: true,
            solicited: false,
            fence: false,
            ud: None,
        },
        dc: Dc {
            av,
            dctn: 0xab_cdef,
            key: 0x0f1e_2d3c_4b5a_6978,
        },
        setter: Setter::Sge,
        addr_first: false,
    };
    let ring = Mem::zeroed(4 * 64);
    let dbrec = Mem::zeroed(64);
    let bf = Mem::zeroed(2 * BF_SIZE as usize);
    let p = ProviderDcWrs::of(std::slice::from_ref(&w));
    let mut dci = ProviderDci::new(&cfg, &ring, &dbrec, &bf);
    assert_eq!(dci.post(&p.list), 0);
    let (pi, head, _) = dci.state();
    assert_eq!((pi, head), (0x1_0004, 1), "2 WQEBBs, 1 WR");
    assert_eq!(dci.wrid(0x1_0002), 7);
    drop(dci);
    let mut want = Vec::new();
    // ctrl: WQE index 0x0002, RDMA_WRITE (0x08); QPN, 6 DS; CQ_UPDATE (0x08).
    want.extend_from_slice(&[0x00, 0x00, 0x02, 0x08, 0x12, 0x34, 0x56, 0x06]);
    want.extend_from_slice(&[0, 0, 0, 0x08, 0, 0, 0, 0]);
    want.extend_from_slice(&0x0f1e_2d3c_4b5a_6978u64.to_be_bytes());
    want.extend_from_slice(&[0x80, 0xeb, 0xcd, 0xef]);
    want.extend_from_slice(&av[12..]);
    want.extend_from_slice(&0x1122_3344_5566_7788u64.to_be_bytes());
    want.extend_from_slice(&[0x99, 0xaa, 0xbb, 0xcc, 0, 0, 0, 0]);
    want.extend_from_slice(&[0, 0, 0x12, 0x34, 0xde, 0xad, 0xbe, 0xef]);
    want.extend_from_slice(&0x0102_0304_0506_0708u64.to_be_bytes());
    assert_eq!(want.len(), 96);
    let r = ring.bytes();
    assert_eq!(&r[2 * 64..2 * 64 + 96], &want[..]);
    assert!(r[..128].iter().chain(&r[2 * 64 + 96..]).all(|&b| b == 0));
    assert_eq!(&dbrec.bytes()[4..8], &[0, 0, 0, 0x04], "SQ doorbell record");
    assert_eq!(&bf.bytes()[..8], &want[..8], "the 8-byte doorbell");
    say(test, format_args!("one DC WRITE, 96 bytes, as laid out"));
}
