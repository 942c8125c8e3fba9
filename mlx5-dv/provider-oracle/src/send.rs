//! Our send queue and the provider's over identical rings: the same WR
//! list posted to both, then every byte compared.
//!
//! Ours is `mlx5_dv::driver::SendQueue` (the ring driver rdma-direct's
//! direct backend posts through) over memory described as
//! `mlx5dv_init_obj` describes a ConnectX QP; theirs is libmlx5's
//! `mlx5_post_send` over a fake `struct mlx5_qp` whose ring, doorbell
//! record and BlueFlame register are ours too. What is compared is what
//! the device reads: the ring, the doorbell record, the BlueFlame
//! registers; and the producer index after the list.

#[cfg(provider_oracle)]
use crate::ffi::*;
use crate::mem::Mem;
#[cfg(provider_oracle)]
pub use crate::provider::ProviderWrs;
#[cfg(provider_oracle)]
use crate::wr::ibv;
#[cfg(provider_oracle)]
use crate::wr::ibv::QPT_UD;
use crate::wr::Wr;
use mlx5_dv::driver::SendQueue;
use mlx5_dv::dv::{mlx5dv_bf, mlx5dv_qp, mlx5dv_wq};
use mlx5_dv::wqe::WqeError;

/// BlueFlame register size of the fake UAR (each of the two), bytes.
pub const BF_SIZE: u32 = 256;

/// One send queue's facts, the same for both sides.
#[derive(Clone, Copy, Debug)]
pub struct SqConfig {
    /// Ring size in WQEBBs, a power of two (2^0 to 2^15).
    pub wqe_cnt: u32,
    /// The producer index before the first post (the QP's past).
    pub start_pi: u32,
    /// The largest WQE in WQEBBs (our `limit_wqe_size`; the provider's
    /// `max_post` is `wqe_cnt / max_wqebbs` WRs, as `verbs.c` computes it).
    pub max_wqebbs: u32,
    pub max_inline: u32,
    /// Work requests outstanding at most (both sides).
    pub max_post: u32,
    /// `enum ibv_qp_type`: RC, UC or UD.
    pub qp_type: u32,
    pub qpn: u32,
    pub sq_sig_all: bool,
    /// libmlx5's `MLX5_POST_SEND_PREFER_BF`: a single WQE that fits goes
    /// through BlueFlame whole (our driver's only policy).
    pub prefer_bf: bool,
    /// Our auto-signal period in WRs (0: off). The provider has none.
    pub auto_signal: u32,
    /// The list goes in two posts, each rung: its first `split` WRs, then
    /// the rest (0, or the list's length or more: one post). The second
    /// doorbell writes the other BlueFlame half.
    pub split: u32,
}

impl SqConfig {
    /// The list's posts: index ranges, each rung once.
    pub fn batches(&self, n: usize) -> Vec<core::ops::Range<usize>> {
        let k = self.split as usize;
        if k == 0 || k >= n {
            core::iter::once(0..n).collect()
        } else {
            vec![0..k, k..n]
        }
    }
}

/// What one side left after posting a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The index of the first WR refused (the list's length if none).
    pub refused_at: usize,
    /// The producer index after the list (WQEBBs, 32 bits).
    pub pi: u32,
    /// The SQ doorbell record word, as the device reads it (big-endian).
    pub dbrec: [u8; 4],
    /// Both BlueFlame registers (2 x [`BF_SIZE`] bytes).
    pub bf: Vec<u8>,
}

/// The ring bytes both sides start from: `pattern(i)` at byte `i`.
pub fn pattern(seed: u64, i: usize) -> u8 {
    let x = (i as u64 ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 56) as u8
}

/// Memory of one side: ring, doorbell record, BlueFlame registers.
pub struct SqMem {
    pub ring: Mem,
    pub dbrec: Mem,
    pub bf: Mem,
}

impl SqMem {
    /// A ring of `cfg.wqe_cnt` WQEBBs holding `pattern(seed, ..)` over
    /// every byte a list of `reach` WQEBBs from `start_pi` may touch (the
    /// whole ring when it is that small), zero elsewhere.
    pub fn new(cfg: &SqConfig, seed: u64, reach: u32) -> SqMem {
        let len = cfg.wqe_cnt as usize * 64;
        let mut ring = Mem::zeroed(len);
        let bytes = ring.bytes_mut();
        if reach >= cfg.wqe_cnt {
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = pattern(seed, i);
            }
        } else {
            let first = cfg.start_pi.wrapping_sub(1) as usize;
            for k in 0..(reach + 2) as usize {
                let at = (first.wrapping_add(k) % cfg.wqe_cnt as usize) * 64;
                for (i, b) in bytes.iter_mut().enumerate().skip(at).take(64) {
                    *b = pattern(seed, i);
                }
            }
        }
        SqMem {
            ring,
            dbrec: Mem::zeroed(64),
            bf: Mem::zeroed(2 * BF_SIZE as usize),
        }
    }

    pub(crate) fn outcome(&self, refused_at: usize, pi: u32) -> Outcome {
        let d = self.dbrec.bytes();
        Outcome {
            refused_at,
            pi,
            dbrec: [d[4], d[5], d[6], d[7]],
            bf: self.bf.bytes().to_vec(),
        }
    }
}

/// Posts `wrs` through our driver: each WR's WQE with `SendQueue::post`
/// until one is refused, and one `ring_doorbell` per post of
/// [`SqConfig::batches`] (as the direct backend posts a checked list).
/// `arena` holds the inline SGEs' bytes.
pub fn post_ours(
    cfg: &SqConfig,
    mem: &mut SqMem,
    wrs: &[Wr],
    arena: &[u8],
) -> (Outcome, Option<WqeError>) {
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
            size: BF_SIZE,
        },
        ..mlx5dv_qp::zeroed()
    };
    // SAFETY: the rings, doorbell record and BlueFlame registers are `mem`'s
    // (sized as `desc` says), which outlives `sq` (dropped at the end of
    // this function) and which nothing else touches meanwhile.
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
            if let Err(e) = w.with_wqe(cfg.sq_sig_all, arena, |wqe| sq.post(wqe, w.wr_id)) {
                refused = Some(e);
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

/// libmlx5's send queue of `cfg` (a fake `struct mlx5_qp` in RTS on a
/// fake CQ) over rings the caller owns and keeps for `'m`; freed on drop.
#[cfg(provider_oracle)]
pub struct ProviderSq<'m> {
    ctx: *mut po_ctx,
    cq: *mut po_cq,
    qp: *mut po_qp,
    _cq_mem: [Mem; 2],
    _rings: core::marker::PhantomData<&'m Mem>,
}

#[cfg(provider_oracle)]
impl<'m> ProviderSq<'m> {
    /// Over `ring` (`cfg.wqe_cnt` WQEBBs), `dbrec` (8 bytes) and `bf`
    /// (2 x [`BF_SIZE`] bytes), its producer index at `cfg.start_pi`.
    pub fn new(cfg: &SqConfig, ring: &'m Mem, dbrec: &'m Mem, bf: &'m Mem) -> ProviderSq<'m> {
        assert!(ring.len() >= cfg.wqe_cnt as usize * 64 && dbrec.len() >= 8);
        assert!(bf.len() >= 2 * BF_SIZE as usize);
        let cq_mem = [Mem::zeroed(64), Mem::zeroed(64)];
        let cq_cfg = po_cq_cfg {
            buf: cq_mem[0].ptr().cast(),
            dbrec: cq_mem[1].ptr().cast(),
            cqe_cnt: 1,
            cqe_sz: 64,
            cons_index: 0,
            cqn: 1,
        };
        let qp_cfg = po_qp_cfg {
            sq_buf: ring.ptr().cast(),
            rq_buf: core::ptr::null_mut(),
            dbrec: dbrec.ptr().cast(),
            bf_reg: bf.ptr().cast(),
            sq_wqe_cnt: cfg.wqe_cnt,
            sq_cur_post: cfg.start_pi,
            sq_max_post: cfg.max_post,
            sq_max_gs: 32,
            max_inline: cfg.max_inline,
            rq_wqe_cnt: 0,
            rq_wqe_shift: 0,
            rq_max_gs: 0,
            rq_max_post: 0,
            rq_head: 0,
            qpn: cfg.qpn,
            qp_type: cfg.qp_type,
            sq_sig_all: cfg.sq_sig_all as u32,
            wq_sig: 0,
            atomics: (cfg.qp_type == ibv::QPT_RC) as u32,
            prefer_bf: cfg.prefer_bf as u32,
            bf_size: BF_SIZE,
            bf_offset: 0,
            user_index: cfg.qpn,
            pad: 0,
        };
        // SAFETY: the configs name memory sized as asserted above, which
        // outlives the objects: the caller's for `'m`, the CQ's in the
        // returned value (freed in Drop after the objects).
        let (ctx, cq, qp) = unsafe {
            let ctx = po_ctx_new();
            assert!(!ctx.is_null());
            let cq = po_cq_new(ctx, &cq_cfg);
            assert!(!cq.is_null());
            let qp = po_qp_new(ctx, &qp_cfg, cq, cq, core::ptr::null_mut());
            assert!(!qp.is_null());
            (ctx, cq, qp)
        };
        ProviderSq {
            ctx,
            cq,
            qp,
            _cq_mem: cq_mem,
            _rings: core::marker::PhantomData,
        }
    }

    /// `mlx5_post_send` of `list` (at most 64): errno and the index of the
    /// WR refused (the list's length if none).
    pub fn post(&mut self, list: &[po_send_wr]) -> (i32, u32) {
        let mut bad = list.len() as u32;
        // SAFETY: `qp` is live; `list` and what it points to (the caller's)
        // outlive the call.
        let err = unsafe { po_post_send(self.qp, list.as_ptr(), list.len() as u32, &mut bad) };
        (err, if err == 0 { list.len() as u32 } else { bad })
    }

    /// `mlx5_post_send` of `list` with the memory-window WRs `mw` names
    /// (`harness.c` `po_post_send_mw`; `mw` as long as `list`): errno and
    /// the index of the WR refused (the list's length if none).
    pub fn post_mw(&mut self, list: &[po_send_wr], mw: &[po_mw_wr]) -> (i32, u32) {
        assert_eq!(list.len(), mw.len());
        let mut bad = list.len() as u32;
        // SAFETY: `qp` is live; `list`, `mw` and what they point to (the
        // caller's) outlive the call; both hold `list.len()` entries.
        let err = unsafe {
            po_post_send_mw(
                self.qp,
                list.as_ptr(),
                mw.as_ptr(),
                list.len() as u32,
                &mut bad,
            )
        };
        (err, if err == 0 { list.len() as u32 } else { bad })
    }

    /// `mlx5_bind_mw` of the window and range `m` names: errno, and the
    /// window's rkey after it in `rkey`.
    pub fn bind_mw(&mut self, m: &po_mw_wr, wr_id: u64, send_flags: u32, rkey: &mut u32) -> i32 {
        // SAFETY: `qp` is live; `m` and `rkey` outlive the call.
        unsafe { po_bind_mw(self.qp, m, wr_id, send_flags, rkey) }
    }

    /// Its producer index, WR counters and BlueFlame offset.
    pub fn state(&self) -> po_sq_state {
        let mut st = po_sq_state::default();
        // SAFETY: `qp` is live.
        unsafe { po_qp_state(self.qp, &mut st) };
        st
    }

    /// `n` WRs retired, as a poll would.
    pub fn retire_sends(&mut self, n: u32) {
        // SAFETY: `qp` is live.
        unsafe { po_qp_retire_sends(self.qp, n) };
    }
}

#[cfg(provider_oracle)]
impl Drop for ProviderSq<'_> {
    fn drop(&mut self) {
        // SAFETY: made in `new`, freed once, QP before CQ before context.
        unsafe {
            po_qp_free(self.qp);
            po_cq_free(self.cq);
            po_ctx_free(self.ctx);
        }
    }
}

/// Posts `wrs` through libmlx5's `mlx5_post_send`, one call per post of
/// [`SqConfig::batches`].
#[cfg(provider_oracle)]
pub fn post_theirs(cfg: &SqConfig, mem: &mut SqMem, wrs: &[Wr]) -> (Outcome, i32) {
    let wrs = ProviderWrs::of(wrs);
    let list = &wrs.list;
    let mut sq = ProviderSq::new(cfg, &mem.ring, &mem.dbrec, &mem.bf);
    let (mut err, mut bad) = (0, list.len() as u32);
    for b in cfg.batches(list.len()) {
        let (e, at) = sq.post(&list[b.clone()]);
        if e != 0 {
            (err, bad) = (e, b.start as u32 + at);
            break;
        }
    }
    let pi = sq.state().cur_post;
    drop(sq);
    (mem.outcome(bad as usize, pi), err)
}

/// Why a byte may differ, by design: the rows of docs/prm.md's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allowed {
    /// The compare operand of a FETCH_ADD's atomic segment (bytes 8..16):
    /// the provider never writes it; the device ignores it.
    FetchAddCompare,
    /// The immediate of a ctrl segment (bytes 12..16) whose opcode has
    /// none: libmlx5's `ibv_wr_*` builders never write it
    /// (`_common_wqe_init_op` zeroes ctrl bytes 8..12 only; `mlx5_post_send`
    /// writes 0); the device ignores it. DC WQEs only (`crate::dc`).
    BuilderImm,
    /// The bytes of a UMR WQE's mkey context segment (WQE bytes 64..128)
    /// that libmlx5's `set_umr_mkey_seg` never writes: `reserved1`, `sf`,
    /// `reserved2`, `flags_pd` and everything from `bsf_octword_size` on;
    /// for a zero-length UMR (`LOCAL_INV`, an unbind) `access_flags`,
    /// `start_addr` and `len` too. Ours writes 0; the device ignores them
    /// (a bind's mkey mask names the fields it changes).
    UmrMkeyUnwritten,
}

/// One byte that differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Diff {
    /// The ring byte (offset from the ring's start).
    pub at: usize,
    pub ours: u8,
    pub theirs: u8,
}

/// Walks the WQEs the provider wrote from `from` to `to` (producer
/// indices) and returns, for each ring byte in them, whether it may
/// differ ([`Allowed`]), as a list of (ring offset, why).
pub fn allowed_bytes(
    ring: &[u8],
    wqe_cnt: u32,
    from: u32,
    to: u32,
    ud: bool,
) -> Vec<(usize, Allowed)> {
    let len = ring.len();
    let at = |idx: u32, off: usize| ((idx & (wqe_cnt - 1)) as usize * 64 + off) % len;
    let mut out = Vec::new();
    let mut idx = from;
    while idx != to {
        let byte = |off: usize| ring[at(idx, off)];
        let opcode = byte(3);
        let ds = (byte(7) & 0x3f) as usize;
        let wqebbs = (ds * 16).div_ceil(64).max(1) as u32;
        // FETCH_ADD: ctrl, remote address, then the atomic segment.
        let seg = 16 + if ud { 48 } else { 0 } + 16;
        if opcode == 0x12 {
            for k in 8..16 {
                out.push((at(idx, seg + k), Allowed::FetchAddCompare));
            }
        }
        if opcode == 0x25 {
            let next = idx.wrapping_add(1);
            let zero_len = ds == 8;
            for k in (0..64).filter(|&k| {
                matches!(k, 1 | 3 | 8..=15 | 32..=63) || (zero_len && matches!(k, 2 | 16..=31))
            }) {
                out.push((at(next, k), Allowed::UmrMkeyUnwritten));
            }
        }
        idx = idx.wrapping_add(wqebbs);
    }
    out
}

/// Every ring byte that differs, but those `allowed` lists.
pub fn ring_diffs(ours: &[u8], theirs: &[u8], allowed: &[(usize, Allowed)]) -> Vec<Diff> {
    let mut skip = vec![false; ours.len()];
    for &(at, _) in allowed {
        skip[at] = true;
    }
    ours.iter()
        .zip(theirs)
        .enumerate()
        .filter(|&(i, (a, b))| a != b && !skip[i])
        .map(|(at, (&o, &t))| Diff {
            at,
            ours: o,
            theirs: t,
        })
        .collect()
}

/// Posts `wrs` to both (`ours_wrs` to ours, when a test changes one side),
/// over rings that hold `pattern(seed, ..)`, and returns what differs,
/// described (empty when they agree), and the WQEBBs the provider wrote.
#[cfg(provider_oracle)]
pub fn differences(
    cfg: &SqConfig,
    wrs: &[Wr],
    ours_wrs: Option<&[Wr]>,
    arena: &[u8],
    seed: u64,
) -> (Vec<String>, u32) {
    let reach = (wrs.len() as u32 * cfg.max_wqebbs).min(cfg.wqe_cnt);
    let mut ours = SqMem::new(cfg, seed, reach);
    let mut theirs = SqMem::new(cfg, seed, reach);
    let (o, refused) = post_ours(cfg, &mut ours, ours_wrs.unwrap_or(wrs), arena);
    let (t, err) = post_theirs(cfg, &mut theirs, wrs);
    let mut bad = Vec::new();
    if refused.is_some() || err != 0 {
        bad.push(format!(
            "a refusal: ours at {} ({refused:?}), theirs at {} (errno {err})",
            o.refused_at, t.refused_at
        ));
        return (bad, 0);
    }
    let ring_t = theirs.ring.bytes();
    let allowed = allowed_bytes(
        ring_t,
        cfg.wqe_cnt,
        cfg.start_pi,
        t.pi,
        cfg.qp_type == QPT_UD,
    );
    bad.extend(outcome_diffs(
        cfg,
        &o,
        &t,
        ours.ring.bytes(),
        ring_t,
        &allowed,
        wrs.len(),
        |i| wrs[i].inline && wrs[i].inline_len() > 0,
    ));
    (bad, t.pi.wrapping_sub(cfg.start_pi))
}

/// What differs between our outcome `o` and the provider's `t` of one
/// list of `n` WRs posted in `cfg.batches(n)` over rings `ring_o` and
/// `ring_t`, but for the `allowed` bytes: the producer index, the
/// doorbell record, each doorbell's BlueFlame register and the whole ring
/// (at most 13 ring bytes told). `inline_copied(i)`: whether the provider
/// copies a one-WR batch whose WR is `i` to BlueFlame as an inline WQE.
///
/// BlueFlame, per doorbell (the first at offset 0, the next in the
/// other half: `offset ^= bf_size`): the first 8 bytes (the last WQE's
/// ctrl segment) always; the whole register where the provider copied
/// the WQE too (one WR, inline or prefer_bf, more than one DS, at most
/// `BF_SIZE` bytes). Else our copy of the whole WQE is docs/prm.md's row
/// "BlueFlame for one WQE that is not inline". The copy carries the
/// WQE's bytes, so the ring's allowed bytes are allowed in it too.
#[allow(clippy::too_many_arguments)]
pub fn outcome_diffs(
    cfg: &SqConfig,
    o: &Outcome,
    t: &Outcome,
    ring_o: &[u8],
    ring_t: &[u8],
    allowed: &[(usize, Allowed)],
    n: usize,
    inline_copied: impl Fn(usize) -> bool,
) -> Vec<String> {
    let mut bad = Vec::new();
    if o.pi != t.pi {
        bad.push(format!(
            "producer index: ours {:#x}, theirs {:#x}",
            o.pi, t.pi
        ));
    }
    if o.dbrec != t.dbrec {
        bad.push(format!(
            "doorbell record: ours {:02x?}, theirs {:02x?}",
            o.dbrec, t.dbrec
        ));
    }
    let ring_len = ring_t.len();
    let at = |pi: u32| (pi & (cfg.wqe_cnt - 1)) as usize * 64;
    let ds_at = |pi: u32| (ring_t[at(pi) + 7] & 0x3f) as u32;
    let mut pi = cfg.start_pi;
    for (k, b) in cfg.batches(n).into_iter().enumerate() {
        let off = (k % 2) * BF_SIZE as usize;
        let first = pi;
        for _ in b.clone() {
            pi = pi.wrapping_add((ds_at(pi) * 16).div_ceil(64).max(1));
        }
        let ds = ds_at(first);
        let copied = b.len() == 1
            && (inline_copied(b.start) || cfg.prefer_bf)
            && ds > 1
            && ds * 16 <= BF_SIZE;
        let n = if copied { BF_SIZE as usize } else { 8 };
        let mut bf_o = o.bf[off..off + n].to_vec();
        let mut bf_t = t.bf[off..off + n].to_vec();
        if copied {
            for &(a, _) in allowed {
                let rel = (a + ring_len - at(first)) % ring_len;
                if rel < n {
                    bf_o[rel] = 0;
                    bf_t[rel] = 0;
                }
            }
        }
        if bf_o != bf_t {
            bad.push(format!(
                "BlueFlame register of doorbell {k} (offset {off}, {n} bytes): ours {:02x?}, theirs {:02x?}",
                &bf_o[..n.min(96)],
                &bf_t[..n.min(96)]
            ));
        }
    }
    // The whole ring (a stray write anywhere shows): equal but for the
    // allowed bytes of the WQEs posted.
    if ring_o != ring_t {
        for d in ring_diffs(ring_o, ring_t, allowed).into_iter().take(13) {
            bad.push(format!(
                "ring byte {:#x} (WQEBB {}, byte {}): ours {:#04x}, theirs {:#04x}",
                d.at,
                d.at / 64,
                d.at % 64,
                d.ours,
                d.theirs
            ));
        }
    }
    bad
}
