//! DC (dynamically connected) send WQEs against libmlx5's `ibv_wr_*` /
//! `mlx5dv_wr_*` builders: a DCI of ours and one of the provider's over
//! identical rings, the same generated WR lists posted to both, every byte
//! compared.
//!
//! libmlx5 writes a DC WQE only through the builders
//! (`providers/mlx5/qp.c`: `mlx5_send_wr_set_dc_addr`, installed by
//! `mlx5_qp_fill_wr_pfns` on an `IBV_QPT_DRIVER` QP whose `dc_type` is
//! `MLX5DV_DCTYPE_DCI`): `harness/dc.c` is that DCI, each list one
//! `ibv_wr_start` .. `ibv_wr_complete` batch per doorbell. Ours is
//! `mlx5_dv::driver::SendQueue` posting [`SendWqe`](mlx5_dv::wqe::SendWqe)s
//! whose `datagram` is [`Datagram::Dc`] of mlx5-dv's [`dc_datagram_seg`].
//!
//! The WQE (rdma-core `mlx5dv.h` `struct mlx5_wqe_ctrl_seg`,
//! `struct mlx5_wqe_datagram_seg`; all big-endian):
//!
//! ```text
//! ctrl      0..16   as for RC (opcode, WQE index, QPN, DS, fm_ce_se, immediate)
//! datagram 16..64   the AH's 48-byte AV, with
//!                   0..8  the DC access key (`av.key.dc_key`)
//!                   8..12 dqp_dct |= DCT number | MLX5_EXTENDED_UD_AV (bit 31)
//! then              raddr (WRITE, WRITE_IMM, READ, atomics), atomic (atomics),
//!                   data segments or one inline segment, as for RC
//! ```
//!
//! The builders' differences from `mlx5_post_send` that show here:
//! a batch is all or nothing (a builder's error rolls the producer index
//! back and `ibv_wr_complete` returns it, no doorbell); `inl_wqe`, which
//! asks for the BlueFlame copy, is set by any inline setter, an empty
//! payload included; the ctrl segment's immediate is left unwritten for
//! opcodes without one ([`Allowed::BuilderImm`]); an atomic's data segment
//! carries the SGE length as given (ours writes 8: the generator gives 8).

use crate::gen::Source;
#[cfg(provider_oracle)]
use crate::send::{outcome_diffs, BF_SIZE};
use crate::send::{Allowed, Outcome, SqConfig, SqMem};
use crate::wr::{ibv, Op, Sge, Wr};
use mlx5_dv::driver::SendQueue;
use mlx5_dv::dv::{mlx5dv_bf, mlx5dv_qp, mlx5dv_wq};
use mlx5_dv::wqe::{dc_datagram_seg, Datagram, WqeError, AV_DQP_DCT, DATAGRAM_SEG};

/// A DC destination: the AH's address vector, the DCT number, the DC key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dc {
    pub av: [u8; DATAGRAM_SEG],
    pub dctn: u32,
    pub key: u64,
}

/// The builder that gives the WR's data (`harness/dc.c` `enum po_dc_setter`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setter {
    /// `ibv_wr_set_sge` (one SGE).
    Sge = 0,
    /// `ibv_wr_set_sge_list`.
    SgeList = 1,
    /// `ibv_wr_set_inline_data` (one buffer).
    Inline = 2,
    /// `ibv_wr_set_inline_data_list`.
    InlineList = 3,
}

/// A DC work request: the operation and its data as [`Wr`] (whose `ud` is
/// `None`), its destination, and how the builders are called: the data
/// setter, and whether `mlx5dv_wr_set_dc_addr` comes before it (the WQE
/// is finished by whichever of the two comes second).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DcWr {
    pub wr: Wr,
    pub dc: Dc,
    pub setter: Setter,
    pub addr_first: bool,
}

/// `enum ibv_qp_type`'s `IBV_QPT_DRIVER`, a DCI's (`verbs.h`).
pub const QPT_DRIVER: u32 = 0xff;

/// A DCI's send queue: a ring of 2^1 to 2^15 WQEBBs, its largest WQE 2 to
/// 16 WQEBBs (a DC WQE with data is at least 2: ctrl and datagram fill
/// the first), an inline size as rdma-core would size it beside ctrl,
/// datagram, raddr and the inline header (84 bytes), its producer index
/// anywhere, near 2^16 and 2^32 included.
pub fn dci_config(s: &mut impl Source) -> SqConfig {
    let wqe_cnt = 1u32 << s.range(1, 15);
    let max_wqebbs = s.range(2, 16.min(wqe_cnt) as u64) as u32;
    let room = (max_wqebbs * 64).min(63 * 16).saturating_sub(84);
    let max_inline = if s.chance(70) {
        room
    } else {
        s.range(0, room as u64) as u32
    };
    let start_pi = match s.range(0, 5) {
        0 => s.range(0, 300) as u32,
        1 => (1u32 << 16).wrapping_sub(s.range(0, 200) as u32),
        2 => 0u32.wrapping_sub(s.range(1, 200) as u32),
        _ => s.next_u64() as u32,
    };
    SqConfig {
        wqe_cnt,
        start_pi,
        max_wqebbs,
        max_inline,
        max_post: (wqe_cnt / max_wqebbs).max(1),
        qp_type: QPT_DRIVER,
        qpn: s.range(1, 0xff_ffff) as u32,
        sq_sig_all: s.chance(10),
        prefer_bf: s.chance(80),
        auto_signal: 0,
        split: if s.chance(33) {
            s.range(1, 8) as u32
        } else {
            0
        },
    }
}

/// A random AV: 48 random bytes, its `dqp_dct` (bytes 8..12) zero half
/// the time (as `mlx5_create_ah` leaves it) and random bits otherwise
/// (which the DCT number is ORed into).
fn av(s: &mut impl Source) -> [u8; DATAGRAM_SEG] {
    let mut av = [0u8; DATAGRAM_SEG];
    for chunk in av.chunks_mut(8) {
        chunk.copy_from_slice(&s.next_u64().to_le_bytes());
    }
    if s.chance(50) {
        av[AV_DQP_DCT..AV_DQP_DCT + 4].fill(0);
    }
    av
}

/// One DC WR that fits `cfg`: of every operation when `every`, else SEND
/// or SEND_IMM; 0 to 32 SGEs (some empty), or an inline payload of 1 to 4
/// buffers in `arena` (at `arena_base`, [`crate::gen::ARENA`] bytes)
/// within `max_inline` and the largest WQE; an atomic's one SGE of 8
/// bytes; a DCT number of 24 bits and a DC key of 64.
pub fn dc_wr(s: &mut impl Source, cfg: &SqConfig, arena_base: u64, every: bool) -> DcWr {
    let raddr = s.next_u64();
    let rkey = s.next_u64() as u32;
    let op = match s.range(0, if every { 7 } else { 1 }) {
        0 => Op::Send,
        1 => Op::SendImm {
            imm: s.next_u64() as u32,
        },
        2 => Op::Write { raddr, rkey },
        3 => Op::WriteImm {
            raddr,
            rkey,
            imm: s.next_u64() as u32,
        },
        4 => Op::Read { raddr, rkey },
        5 => Op::CmpSwap {
            raddr: raddr & !7,
            rkey,
            compare: s.next_u64(),
            swap: s.next_u64(),
        },
        6 => Op::FetchAdd {
            raddr: raddr & !7,
            rkey,
            add: s.next_u64(),
        },
        // `ibv_wr_send_inv` (`mlx5_send_wr_send_inv`; DCI = RC's ops).
        _ => Op::SendInv {
            rkey: s.next_u64() as u32,
        },
    };
    // ctrl and datagram (4 DS), then raddr and atomic.
    let fixed = 4 + match op {
        Op::Send | Op::SendImm { .. } | Op::SendInv { .. } => 0,
        Op::CmpSwap { .. } | Op::FetchAdd { .. } => 2,
        _ => 1,
    };
    let ds_room = (cfg.max_wqebbs * 4).min(63) - fixed;
    let can_inline = !matches!(op, Op::Read { .. }) && !op.is_atomic();
    let inline = can_inline && s.chance(35);
    let mut sges = Vec::new();
    if op.is_atomic() {
        sges.push(Sge {
            addr: s.next_u64() & !7,
            len: 8,
            lkey: s.next_u64() as u32,
        });
    } else if inline {
        sges = crate::gen::inline_sges(
            s,
            (ds_room * 16).saturating_sub(4).min(cfg.max_inline),
            arena_base,
        );
    } else {
        let n = s.range(0, ds_room.min(32) as u64);
        for _ in 0..n {
            let len = match s.range(0, 9) {
                0 => 0,
                1 => s.range(1, 8) as u32,
                2 => s.range(1 << 20, (1 << 31) - 1) as u32 / 64,
                _ => s.range(1, 65536) as u32,
            };
            sges.push(Sge {
                addr: s.next_u64(),
                len,
                lkey: s.next_u64() as u32,
            });
        }
    }
    let one = sges.len() == 1 && s.chance(50);
    let setter = match (inline, one) {
        (false, true) => Setter::Sge,
        (false, false) => Setter::SgeList,
        (true, true) => Setter::Inline,
        (true, false) => Setter::InlineList,
    };
    let dc = Dc {
        av: av(s),
        dctn: s.range(0, 0xff_ffff) as u32,
        key: s.next_u64(),
    };
    DcWr {
        wr: Wr {
            wr_id: s.next_u64(),
            op,
            sges,
            inline,
            signaled: s.chance(40),
            solicited: s.chance(20),
            fence: s.chance(20),
            ud: None,
        },
        dc,
        setter,
        addr_first: s.chance(50),
    }
}

/// A list of 1 to 64 DC WRs, at most `cfg.max_post` (so neither side
/// refuses one for the WR limit, and the list never laps the ring).
pub fn dc_wr_list(s: &mut impl Source, cfg: &SqConfig, arena_base: u64, every: bool) -> Vec<DcWr> {
    let most = 64.min(cfg.max_post) as u64;
    let n = match s.range(0, 3) {
        0 => 1,
        1 => most,
        _ => s.range(1, most),
    };
    (0..n).map(|_| dc_wr(s, cfg, arena_base, every)).collect()
}

/// Posts `wrs` through our driver (`SendQueue::post` of each WR's WQE, its
/// datagram segment [`dc_datagram_seg`], one `ring_doorbell` per post of
/// [`SqConfig::batches`]) until one is refused: the outcome, and the
/// refusal (the WR's index and our typed error).
pub fn post_ours_dc(
    cfg: &SqConfig,
    mem: &mut SqMem,
    wrs: &[DcWr],
    arena: &[u8],
) -> (Outcome, Option<(usize, WqeError)>) {
    let desc = mlx5dv_qp {
        dbrec: mem.dbrec.ptr().cast(),
        sq: mlx5dv_wq {
            buf: mem.ring.ptr().cast(),
            wqe_cnt: cfg.wqe_cnt,
            stride: 64,
        },
        rq: mlx5dv_wq {
            buf: core::ptr::null_mut(),
            wqe_cnt: 0,
            stride: 0,
        },
        bf: mlx5dv_bf {
            reg: mem.bf.ptr().cast(),
            size: crate::send::BF_SIZE,
        },
        ..mlx5dv_qp::zeroed()
    };
    // SAFETY: the ring, doorbell record and BlueFlame registers are `mem`'s
    // (sized as `desc` says), which outlives `sq` (dropped below) and which
    // nothing else touches meanwhile.
    let mut sq = unsafe { SendQueue::new(&desc, cfg.qpn, cfg.max_inline, cfg.max_post) }
        .expect("a valid description");
    assert!(sq.limit_wqe_size(cfg.max_wqebbs));
    sq.set_auto_signal(cfg.auto_signal);
    assert!(sq.start_at(cfg.start_pi));
    let mut refused = None;
    let mut at = wrs.len();
    'posts: for b in cfg.batches(wrs.len()) {
        for i in b {
            let w = &wrs[i];
            // (The generator's DCT numbers fit 24 bits.)
            let seg = dc_datagram_seg(&w.dc.av, w.dc.dctn, w.dc.key).expect("a 24-bit DCT number");
            let r =
                w.wr.with_wqe_datagram(cfg.sq_sig_all, arena, Some(Datagram::Dc(&seg)), |wqe| {
                    sq.post(wqe, w.wr.wr_id)
                });
            if let Err(e) = r {
                refused = Some((i, e));
                at = i;
                sq.ring_doorbell();
                break 'posts;
            }
        }
        sq.ring_doorbell();
    }
    let pi = sq.pi();
    drop(sq);
    (mem.outcome(at, pi), refused)
}

/// Walks the WQEs the provider wrote from `from` to `to` (producer
/// indices) and lists the ring bytes that may differ: a FETCH_ADD's
/// compare operand ([`Allowed::FetchAddCompare`], after ctrl, datagram and
/// raddr) and the ctrl immediate of an opcode without one
/// ([`Allowed::BuilderImm`]).
pub fn dc_allowed_bytes(ring: &[u8], wqe_cnt: u32, from: u32, to: u32) -> Vec<(usize, Allowed)> {
    let len = ring.len();
    let at = |idx: u32, off: usize| ((idx & (wqe_cnt - 1)) as usize * 64 + off) % len;
    let mut out = Vec::new();
    let mut idx = from;
    while idx != to {
        let opcode = ring[at(idx, 3)];
        let ds = (ring[at(idx, 7)] & 0x3f) as usize;
        if opcode == 0x12 {
            for k in 8..16 {
                out.push((
                    at(idx, 16 + DATAGRAM_SEG + 16 + k),
                    Allowed::FetchAddCompare,
                ));
            }
        }
        // SEND_IMM (0x0b) and RDMA_WRITE_IMM (0x09) carry an immediate,
        // SEND_INVAL (0x01) the rkey (`mlx5_send_wr_send_inv`).
        if !matches!(opcode, 0x0b | 0x09 | 0x01) {
            for k in 12..16 {
                out.push((at(idx, k), Allowed::BuilderImm));
            }
        }
        idx = idx.wrapping_add((ds * 16).div_ceil(64).max(1) as u32);
    }
    out
}

/// The DS (16-byte units) libmlx5's builders give `w`'s WQE: ctrl and
/// datagram (4), raddr, atomic, then one per non-empty SGE or the inline
/// segment (its 4-byte header and payload, to 16 bytes; none if empty).
pub fn dc_ds(w: &DcWr) -> u32 {
    let op = w.wr.op;
    let send = matches!(op, Op::Send | Op::SendImm { .. } | Op::SendInv { .. });
    let mut ds = 4 + !send as u32 + op.is_atomic() as u32;
    if w.wr.inline {
        let len = w.wr.inline_len() as u32;
        if len > 0 {
            ds += (len + 4).div_ceil(16);
        }
    } else {
        ds += w.wr.sges.iter().filter(|s| s.len != 0).count() as u32;
    }
    ds
}

/// The situations a DC list on `cfg` puts the WQE writers in, by name
/// (each at most once per list): what `tests/dc_wqes.rs` requires its
/// generated cases to reach.
pub fn dc_situations(cfg: &SqConfig, wrs: &[DcWr]) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mask = cfg.wqe_cnt - 1;
    let mut pi = cfg.start_pi;
    for w in wrs {
        let wqebbs = (dc_ds(w) * 16).div_ceil(64);
        let slot = pi & mask;
        if slot == mask && wqebbs > 1 {
            out.push("a datagram segment ending the ring (the next segment at its start)");
        } else if slot + wqebbs > cfg.wqe_cnt {
            out.push("a WQE across the ring's end");
        }
        if w.wr.inline && w.wr.inline_len() == cfg.max_inline as usize && cfg.max_inline > 0 {
            out.push("an inline payload of max_inline bytes");
        }
        if w.wr.inline && w.wr.inline_len() == 0 {
            out.push("an empty inline payload");
        }
        if dc_ds(w) == 63 {
            out.push("a WQE of 63 DS");
        }
        out.push(if w.addr_first {
            "the DC address before the data"
        } else {
            "the DC address after the data"
        });
        out.push(match w.setter {
            Setter::Sge => "ibv_wr_set_sge",
            Setter::SgeList => "ibv_wr_set_sge_list",
            Setter::Inline => "ibv_wr_set_inline_data",
            Setter::InlineList => "ibv_wr_set_inline_data_list",
        });
        if w.dc.av[AV_DQP_DCT..AV_DQP_DCT + 4] != [0; 4] {
            out.push("an AV whose dqp_dct has bits of its own");
        }
        pi = pi.wrapping_add(wqebbs);
    }
    if (cfg.start_pi & 0xffff) > (pi & 0xffff) {
        out.push("a list across producer index 2^16");
    }
    if cfg.start_pi > pi {
        out.push("a list across producer index 2^32");
    }
    if wrs.len() == 64 {
        out.push("a list of 64 WRs");
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// `ibv_send_wr.send_flags` a builder's `wr_flags` takes (inline is the
/// setter's business).
pub fn wr_flags(w: &Wr) -> u32 {
    w.ibv_flags() & !ibv::SEND_INLINE
}

#[cfg(provider_oracle)]
pub use provider::*;

#[cfg(provider_oracle)]
mod provider {
    use super::*;
    use crate::ffi::*;
    use crate::mem::Mem;

    /// DC WRs in the harness's form, with the SGEs and AVs they point into.
    pub struct ProviderDcWrs {
        pub list: Vec<po_dc_wr>,
        _sges: Vec<Vec<po_dc_sge>>,
        _avs: Vec<[u8; DATAGRAM_SEG]>,
    }

    impl ProviderDcWrs {
        pub fn of(wrs: &[DcWr]) -> ProviderDcWrs {
            let sges: Vec<Vec<po_dc_sge>> = wrs
                .iter()
                .map(|w| {
                    w.wr.sges
                        .iter()
                        .map(|s| po_dc_sge {
                            addr: s.addr,
                            length: s.len,
                            lkey: s.lkey,
                        })
                        .collect()
                })
                .collect();
            let avs: Vec<[u8; DATAGRAM_SEG]> = wrs.iter().map(|w| w.dc.av).collect();
            // (The heap buffers the list points into do not move with the Vecs.)
            let list = wrs
                .iter()
                .zip(&sges)
                .zip(&avs)
                .map(|((w, s), av)| {
                    let (remote_addr, rkey) = w.wr.op.remote().unwrap_or((0, 0));
                    let (compare_add, swap) = w.wr.op.atomic_args();
                    po_dc_wr {
                        wr_id: w.wr.wr_id,
                        sg_list: s.as_ptr(),
                        av: av.as_ptr(),
                        remote_addr,
                        compare_add,
                        swap,
                        dc_key: w.dc.key,
                        opcode: w.wr.op.ibv(),
                        wr_flags: wr_flags(&w.wr),
                        imm: w.wr.op.imm(),
                        num_sge: s.len() as u32,
                        rkey,
                        dctn: w.dc.dctn,
                        setter: w.setter as u32,
                        addr_first: w.addr_first as u32,
                    }
                })
                .collect();
            ProviderDcWrs {
                list,
                _sges: sges,
                _avs: avs,
            }
        }
    }

    /// libmlx5's DCI of `cfg` (`harness/dc.c`) over rings the caller owns
    /// and keeps for `'m`; freed on drop.
    pub struct ProviderDci<'m> {
        dci: *mut po_dci,
        _rings: core::marker::PhantomData<&'m Mem>,
    }

    impl<'m> ProviderDci<'m> {
        /// Over `ring` (`cfg.wqe_cnt` WQEBBs), `dbrec` (8 bytes) and `bf`
        /// (2 x [`BF_SIZE`] bytes), its producer index at `cfg.start_pi`,
        /// `max_post` WRs and 32 SGEs at most.
        pub fn new(cfg: &SqConfig, ring: &'m Mem, dbrec: &'m Mem, bf: &'m Mem) -> ProviderDci<'m> {
            assert!(ring.len() >= cfg.wqe_cnt as usize * 64 && dbrec.len() >= 8);
            assert!(bf.len() >= 2 * BF_SIZE as usize);
            let c = po_dci_cfg {
                sq_buf: ring.ptr().cast(),
                dbrec: dbrec.ptr().cast(),
                bf_reg: bf.ptr().cast(),
                sq_wqe_cnt: cfg.wqe_cnt,
                sq_cur_post: cfg.start_pi,
                sq_max_post: cfg.max_post,
                sq_max_gs: 32,
                max_inline: cfg.max_inline,
                qpn: cfg.qpn,
                sq_sig_all: cfg.sq_sig_all as u32,
                prefer_bf: cfg.prefer_bf as u32,
                bf_size: BF_SIZE,
                pad: 0,
            };
            // SAFETY: `c` names memory sized as asserted above, which the
            // caller keeps for `'m`, longer than the DCI.
            let dci = unsafe { po_dci_new(&c) };
            assert!(!dci.is_null(), "po_dci_new refused {cfg:?}");
            ProviderDci {
                dci,
                _rings: core::marker::PhantomData,
            }
        }

        /// One `ibv_wr_start` .. `ibv_wr_complete` batch of `list` (1 to
        /// 64 WRs): what `ibv_wr_complete` returns (0 or an errno).
        pub fn post(&mut self, list: &[po_dc_wr]) -> i32 {
            // SAFETY: `dci` is live; `list` and what it points to (the
            // caller's) outlive the call.
            unsafe { po_dci_post(self.dci, list.as_ptr(), list.len() as u32) }
        }

        /// Its producer index, its WR head and its BlueFlame offset.
        pub fn state(&self) -> (u32, u32, u32) {
            let (mut pi, mut head, mut bf) = (0, 0, 0);
            // SAFETY: `dci` is live.
            unsafe { po_dci_state(self.dci, &mut pi, &mut head, &mut bf) };
            (pi, head, bf)
        }

        /// The wr_id it holds for the WQE at producer index `pi`.
        pub fn wrid(&self, pi: u32) -> u64 {
            // SAFETY: `dci` is live; the index is masked by the harness.
            unsafe { po_dci_wrid(self.dci, pi) }
        }
    }

    impl Drop for ProviderDci<'_> {
        fn drop(&mut self) {
            // SAFETY: made in `new`, freed once.
            unsafe { po_dci_free(self.dci) }
        }
    }

    /// Posts `wrs` through libmlx5's builders, one batch per post of
    /// [`SqConfig::batches`], stopping at a batch refused: the outcome
    /// (`refused_at` the refused batch's first WR) and the errno.
    pub fn post_theirs_dc(cfg: &SqConfig, mem: &mut SqMem, wrs: &[DcWr]) -> (Outcome, i32) {
        let p = ProviderDcWrs::of(wrs);
        let mut dci = ProviderDci::new(cfg, &mem.ring, &mem.dbrec, &mem.bf);
        let (mut err, mut bad) = (0, wrs.len());
        for b in cfg.batches(wrs.len()) {
            let e = dci.post(&p.list[b.clone()]);
            if e != 0 {
                (err, bad) = (e, b.start);
                break;
            }
        }
        let (pi, _, _) = dci.state();
        drop(dci);
        (mem.outcome(bad, pi), err)
    }

    /// What posting one DC list to both sides gave.
    #[derive(Debug)]
    pub enum DcVerdict {
        /// Identical but for the allowed bytes; the WQEBBs written.
        Agree(u32),
        /// What differs, described.
        Differ(Vec<String>),
    }

    /// Posts `wrs` to both DCIs over rings holding `pattern(seed, ..)` and
    /// compares the producer index, the doorbell record, the BlueFlame
    /// registers (the first 8 bytes always; the whole register where
    /// libmlx5 copied the WQE: one WR in the batch, an inline setter called
    /// or `prefer_bf`, at most [`BF_SIZE`] bytes) and the whole ring but
    /// for [`dc_allowed_bytes`].
    /// `ours_wrs`, when a test changes one side, is what ours posts.
    pub fn dc_differences(
        cfg: &SqConfig,
        wrs: &[DcWr],
        ours_wrs: Option<&[DcWr]>,
        arena: &[u8],
        seed: u64,
    ) -> DcVerdict {
        let reach = (wrs.len() as u32 * cfg.max_wqebbs).min(cfg.wqe_cnt);
        let mut ours = SqMem::new(cfg, seed, reach);
        let mut theirs = SqMem::new(cfg, seed, reach);
        let (o, refused) = post_ours_dc(cfg, &mut ours, ours_wrs.unwrap_or(wrs), arena);
        let (t, err) = post_theirs_dc(cfg, &mut theirs, wrs);
        if refused.is_some() || err != 0 {
            return DcVerdict::Differ(vec![format!(
                "a refusal: ours {refused:?}, theirs errno {err} (batch from WR {})",
                t.refused_at
            )]);
        }
        let ring_t = theirs.ring.bytes();
        let allowed = dc_allowed_bytes(ring_t, cfg.wqe_cnt, cfg.start_pi, t.pi);
        // (Any inline setter makes the builders copy a one-WR batch, even
        // of an empty payload: docs/prm.md.)
        let bad = outcome_diffs(
            cfg,
            &o,
            &t,
            ours.ring.bytes(),
            ring_t,
            &allowed,
            wrs.len(),
            |i| wrs[i].wr.inline,
        );
        if bad.is_empty() {
            DcVerdict::Agree(t.pi.wrapping_sub(cfg.start_pi))
        } else {
            DcVerdict::Differ(bad)
        }
    }
}
