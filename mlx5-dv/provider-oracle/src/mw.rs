//! Memory-window WQEs (UMR) against libmlx5: lists that mix binds,
//! `LOCAL_INV`s and plain WRs, posted through our driver
//! (`SendQueue::post_umr`, `SendQueue::post`) and through the provider
//! (`mlx5_post_send` with `IBV_WR_BIND_MW` / `IBV_WR_LOCAL_INV`, and
//! `mlx5_bind_mw` for a type-1 bind through the QP), over identical rings,
//! then compared as [`crate::send`] compares: the ring but the bytes
//! [`crate::send::Allowed`] names, the doorbell record, the BlueFlame
//! registers and the producer index. The WQE after a UMR carries the small
//! fence on both sides (libmlx5's `fm_cache`), in the same post or the next.

#[cfg(provider_oracle)]
use crate::ffi::{po_mw_wr, po_send_wr};
use crate::gen::{self, Source};
#[cfg(provider_oracle)]
use crate::send::{allowed_bytes, outcome_diffs, ProviderSq, SqMem};
use crate::send::{Outcome, SqConfig};
use crate::wr::{ibv, Wr};
use mlx5_dv::driver::SendQueue;
use mlx5_dv::dv::{mlx5dv_bf, mlx5dv_qp, mlx5dv_wq};
use mlx5_dv::prm::CtrlFlags;
use mlx5_dv::wqe::{MwAccess, MwType, UmrBind, UmrWqe, WqeError};

/// `enum ibv_wr_opcode`'s memory-window operations, `IBV_ACCESS_*` bits and
/// `enum ibv_mw_type` (`verbs.h`).
pub mod ibv_mw {
    pub const LOCAL_INV: u32 = 7;
    pub const BIND_MW: u32 = 8;
    pub const ACCESS_LOCAL_WRITE: u32 = 1;
    pub const ACCESS_REMOTE_WRITE: u32 = 2;
    pub const ACCESS_REMOTE_READ: u32 = 4;
    pub const ACCESS_REMOTE_ATOMIC: u32 = 8;
    pub const MW_TYPE_1: u32 = 1;
    pub const MW_TYPE_2: u32 = 2;
}

/// A bind of a window (`ibv_send_wr.bind_mw`, or `mlx5_bind_mw`'s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bind {
    pub wr_id: u64,
    pub mw_type: MwType,
    /// The window's rkey before the bind (`ibv_mw.rkey`).
    pub mw_rkey: u32,
    /// The rkey after it (`bind_mw.rkey`; `mlx5_bind_mw` makes its own).
    pub new_rkey: u32,
    /// The MR's lkey; its range `[addr, addr + len)` (0 bytes: unbind).
    pub lkey: u32,
    pub addr: u64,
    pub len: u64,
    /// `IBV_ACCESS_*` of the window.
    pub access: u32,
    pub signaled: bool,
    pub fence: bool,
}

/// One WR of a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    Plain(Wr),
    Bind(Bind),
    LocalInv {
        wr_id: u64,
        rkey: u32,
        signaled: bool,
        fence: bool,
    },
}

/// One post: a list through `mlx5_post_send` / our `post` + `post_umr`, or
/// (`via_bind_mw`) its one [`Item::Bind`] through `mlx5_bind_mw`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Post {
    pub items: Vec<Item>,
    pub via_bind_mw: bool,
}

fn flags(signaled: bool, fence: bool, sig_all: bool) -> CtrlFlags {
    let mut f = CtrlFlags::empty();
    if signaled || sig_all {
        f |= CtrlFlags::CQ_UPDATE;
    }
    if fence {
        f |= CtrlFlags::FENCE;
    }
    f
}

#[cfg(provider_oracle)]
fn send_flags(signaled: bool, fence: bool) -> u32 {
    (if fence { ibv::SEND_FENCE } else { 0 }) | (if signaled { ibv::SEND_SIGNALED } else { 0 })
}

/// `ibv_inc_rkey` (`verbs.h`): the key's low byte plus one.
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

impl Bind {
    /// Our driver's UMR WQE for it; `via_bind_mw`: `mlx5_bind_mw` picks
    /// the new key.
    pub fn umr(&self, sig_all: bool, via_bind_mw: bool) -> UmrWqe {
        use ibv_mw::*;
        let new = if via_bind_mw {
            inc_rkey(self.mw_rkey)
        } else {
            self.new_rkey
        };
        UmrWqe {
            flags: flags(self.signaled, self.fence, sig_all),
            imm_rkey: self.mw_rkey,
            mw_type: self.mw_type,
            new_key: new as u8,
            bind: (self.len > 0).then_some(UmrBind {
                lkey: self.lkey,
                addr: self.addr,
                len: self.len,
                access: MwAccess {
                    local_write: self.access & ACCESS_LOCAL_WRITE != 0,
                    remote_read: self.access & ACCESS_REMOTE_READ != 0,
                    remote_write: self.access & ACCESS_REMOTE_WRITE != 0,
                    remote_atomic: self.access & ACCESS_REMOTE_ATOMIC != 0,
                },
            }),
        }
    }

    /// The harness's form of the bind (`kind` 1 at its place in a list).
    #[cfg(provider_oracle)]
    pub(crate) fn po(&self) -> po_mw_wr {
        po_mw_wr {
            addr: self.addr,
            length: self.len,
            kind: 1,
            opcode: ibv_mw::BIND_MW,
            mw_type: match self.mw_type {
                MwType::One => ibv_mw::MW_TYPE_1,
                MwType::Two => ibv_mw::MW_TYPE_2,
            },
            mw_rkey: self.mw_rkey,
            new_rkey: self.new_rkey,
            mr_lkey: self.lkey,
            access: self.access,
            invalidate_rkey: 0,
        }
    }
}

#[cfg(provider_oracle)]
impl Item {
    /// Whether libmlx5 copies a one-WR post of it to BlueFlame as an
    /// inline WQE.
    fn inline_copied(&self) -> bool {
        matches!(self, Item::Plain(w) if w.inline && w.inline_len() > 0)
    }
}

/// Posts `posts` through our driver: plain WRs with `SendQueue::post`,
/// binds and `LOCAL_INV`s with `SendQueue::post_umr`, one
/// `ring_doorbell` per post. Stops at the first refusal.
pub fn post_ours(
    cfg: &SqConfig,
    ring: *mut u8,
    dbrec: *mut u32,
    bf: *mut u8,
    posts: &[Post],
    arena: &[u8],
    out: impl FnOnce(usize, u32) -> Outcome,
) -> (Outcome, Option<WqeError>) {
    let desc = mlx5dv_qp {
        dbrec,
        sq: mlx5dv_wq {
            buf: ring.cast(),
            wqe_cnt: cfg.wqe_cnt,
            stride: 64,
        },
        bf: mlx5dv_bf {
            reg: bf.cast(),
            size: crate::send::BF_SIZE,
        },
        ..mlx5dv_qp::zeroed()
    };
    // SAFETY: the caller's memory is sized for `cfg` and outlives `sq`
    // (dropped before this returns); nothing else touches it meanwhile.
    let mut sq = unsafe { SendQueue::new(&desc, cfg.qpn, cfg.max_inline, cfg.max_post) }
        .expect("a valid description");
    assert!(sq.limit_wqe_size(cfg.max_wqebbs));
    sq.set_auto_signal(cfg.auto_signal);
    assert!(sq.start_at(cfg.start_pi));
    let (mut at, mut refused) = (0, None);
    'posts: for p in posts {
        for item in &p.items {
            let r = match item {
                Item::Plain(w) => w.with_wqe(cfg.sq_sig_all, arena, |wqe| sq.post(wqe, w.wr_id)),
                Item::Bind(b) => sq.post_umr(&b.umr(cfg.sq_sig_all, p.via_bind_mw), b.wr_id),
                Item::LocalInv {
                    wr_id,
                    rkey,
                    signaled,
                    fence,
                } => sq.post_umr(
                    &UmrWqe::local_inv(*rkey, flags(*signaled, *fence, cfg.sq_sig_all)),
                    *wr_id,
                ),
            };
            if let Err(e) = r {
                refused = Some(e);
                sq.ring_doorbell();
                break 'posts;
            }
            at += 1;
        }
        sq.ring_doorbell();
    }
    let pi = sq.pi();
    drop(sq);
    (out(at, pi), refused)
}

/// Posts `posts` through libmlx5, one call each (`mlx5_post_send`, or
/// `mlx5_bind_mw`); the errno of the first refused and the rkeys
/// `mlx5_bind_mw` left.
#[cfg(provider_oracle)]
pub fn post_theirs(cfg: &SqConfig, mem: &mut SqMem, posts: &[Post]) -> (Outcome, i32, Vec<u32>) {
    let mut sq = ProviderSq::new(cfg, &mem.ring, &mem.dbrec, &mem.bf);
    let (mut err, mut done, mut rkeys) = (0, 0usize, Vec::new());
    for p in posts {
        if p.via_bind_mw {
            let Some(Item::Bind(b)) = p.items.first() else {
                panic!("a via_bind_mw post holds one bind");
            };
            let mut rkey = 0;
            let e = sq.bind_mw(&b.po(), b.wr_id, send_flags(b.signaled, b.fence), &mut rkey);
            rkeys.push(rkey);
            if e != 0 {
                err = e;
                break;
            }
            done += 1;
            continue;
        }
        let wrs = crate::provider::ProviderWrs::of(
            &p.items
                .iter()
                .map(|i| match i {
                    Item::Plain(w) => w.clone(),
                    _ => placeholder(),
                })
                .collect::<Vec<_>>(),
        );
        let mut list: Vec<po_send_wr> = wrs.list.clone();
        let mw: Vec<po_mw_wr> = p
            .items
            .iter()
            .zip(list.iter_mut())
            .map(|(i, x)| match i {
                Item::Plain(_) => po_mw_wr::default(),
                Item::Bind(b) => {
                    (x.wr_id, x.send_flags) = (b.wr_id, send_flags(b.signaled, b.fence));
                    b.po()
                }
                Item::LocalInv {
                    wr_id,
                    rkey,
                    signaled,
                    fence,
                } => {
                    (x.wr_id, x.send_flags) = (*wr_id, send_flags(*signaled, *fence));
                    po_mw_wr {
                        kind: 1,
                        opcode: ibv_mw::LOCAL_INV,
                        mw_type: ibv_mw::MW_TYPE_2,
                        invalidate_rkey: *rkey,
                        ..po_mw_wr::default()
                    }
                }
            })
            .collect();
        let (e, at) = sq.post_mw(&list, &mw);
        if e != 0 {
            err = e;
            done += at as usize;
            break;
        }
        done += list.len();
    }
    let pi = sq.state().cur_post;
    drop(sq);
    (mem.outcome(done, pi), err, rkeys)
}

/// A plain WR standing in for a memory-window one in the provider's list
/// (every field but `wr_id` and `send_flags` is replaced).
#[cfg(provider_oracle)]
pub(crate) fn placeholder() -> Wr {
    Wr {
        wr_id: 0,
        op: crate::wr::Op::Send,
        sges: Vec::new(),
        inline: false,
        signaled: false,
        solicited: false,
        fence: false,
        ud: None,
    }
}

/// Posts `posts` (at most two) to both (`ours_posts` to ours, when a test
/// changes one side) over rings holding `pattern(seed, ..)` and returns
/// what differs, described (empty when they agree), and the WQEBBs the
/// provider wrote. `cfg.split` is set from the posts.
#[cfg(provider_oracle)]
pub fn differences(
    cfg: &SqConfig,
    posts: &[Post],
    ours_posts: Option<&[Post]>,
    arena: &[u8],
    seed: u64,
) -> (Vec<String>, u32) {
    assert!((1..=2).contains(&posts.len()));
    let cfg = SqConfig {
        split: if posts.len() == 2 {
            posts[0].items.len() as u32
        } else {
            0
        },
        ..*cfg
    };
    let items: Vec<&Item> = posts.iter().flat_map(|p| &p.items).collect();
    let reach = (items.len() as u32 * cfg.max_wqebbs.max(3)).min(cfg.wqe_cnt);
    let ours = SqMem::new(&cfg, seed, reach);
    let mut theirs = SqMem::new(&cfg, seed, reach);
    let (ring, dbrec, bf) = (
        ours.ring.ptr().cast::<u8>(),
        ours.dbrec.ptr().cast::<u32>(),
        ours.bf.ptr().cast::<u8>(),
    );
    let mine = ours_posts.unwrap_or(posts);
    let (o, refused) = post_ours(&cfg, ring, dbrec, bf, mine, arena, |at, pi| {
        ours.outcome(at, pi)
    });
    let (t, err, rkeys) = post_theirs(&cfg, &mut theirs, posts);
    let mut bad = Vec::new();
    if refused.is_some() || err != 0 {
        bad.push(format!(
            "a refusal: ours at {} ({refused:?}), theirs at {} (errno {err})",
            o.refused_at, t.refused_at
        ));
        return (bad, 0);
    }
    let binds = posts.iter().filter(|p| p.via_bind_mw);
    for (p, rkey) in binds.zip(&rkeys) {
        if let Some(Item::Bind(b)) = p.items.first() {
            if inc_rkey(b.mw_rkey) != *rkey {
                bad.push(format!(
                    "mlx5_bind_mw left rkey {rkey:#x}; ours {:#x}",
                    inc_rkey(b.mw_rkey)
                ));
            }
        }
    }
    let ring_t = theirs.ring.bytes();
    let allowed = allowed_bytes(ring_t, cfg.wqe_cnt, cfg.start_pi, t.pi, false);
    bad.extend(outcome_diffs(
        &cfg,
        &o,
        &t,
        ours.ring.bytes(),
        ring_t,
        &allowed,
        items.len(),
        |i| items[i].inline_copied(),
    ));
    (bad, t.pi.wrapping_sub(cfg.start_pi))
}

/// A case: an RC or UC send queue whose largest WQE takes a bind (3
/// WQEBBs), anywhere in its index space (so UMRs wrap at the ring's end),
/// and one or two posts of 1 to 12 WRs, about half of them binds
/// (type 1 and 2, of 0 to 2^31 bytes, every access) and `LOCAL_INV`s,
/// the rest plain WRs of the transport; a post of one type-1 bind goes
/// through `mlx5_bind_mw` a third of the time. No list outruns the ring
/// or the WR limit.
pub fn case(s: &mut impl Source, arena_base: u64) -> (SqConfig, Vec<Post>) {
    let mut cfg = gen::sq_config(s);
    cfg.wqe_cnt = cfg.wqe_cnt.max(8);
    cfg.qp_type = if s.chance(75) {
        ibv::QPT_RC
    } else {
        ibv::QPT_UC
    };
    cfg.max_wqebbs = s.range(3, 16.min(cfg.wqe_cnt) as u64) as u32;
    cfg.max_inline = cfg.max_inline.min(cfg.max_wqebbs * 64 - 36);
    cfg.max_post = (cfg.wqe_cnt / cfg.max_wqebbs).max(1);
    if s.chance(50) {
        // A few WQEBBs before the ring's end, so that a UMR wraps.
        let end = (cfg.start_pi | (cfg.wqe_cnt - 1)).wrapping_add(1);
        cfg.start_pi = end.wrapping_sub(s.range(1, 6) as u32);
    }
    let total = s.range(1, 12.min(cfg.max_post) as u64) as usize;
    let mut items = Vec::new();
    for _ in 0..total {
        items.push(match s.range(0, 5) {
            0 | 1 => Item::Bind(bind(s)),
            2 => Item::LocalInv {
                wr_id: s.next_u64(),
                rkey: s.next_u64() as u32,
                signaled: s.chance(50),
                fence: s.chance(20),
            },
            _ => Item::Plain(gen::wr(s, &cfg, arena_base)),
        });
    }
    let cut = if total > 1 && s.chance(40) {
        s.range(1, total as u64 - 1) as usize
    } else {
        total
    };
    let second = items.split_off(cut);
    let mut posts = vec![Post {
        via_bind_mw: false,
        items,
    }];
    if !second.is_empty() {
        posts.push(Post {
            via_bind_mw: false,
            items: second,
        });
    }
    // A one-bind post of a type-1 window (any length): through mlx5_bind_mw.
    for p in &mut posts {
        if let [Item::Bind(b)] = p.items.as_mut_slice() {
            if s.chance(33) {
                b.mw_type = MwType::One;
                p.via_bind_mw = true;
            }
        }
    }
    (cfg, posts)
}

fn bind(s: &mut impl Source) -> Bind {
    let len = match s.range(0, 5) {
        0 => 0,
        1 => 1 << 31,
        2 => s.range(1, 64),
        _ => s.range(1, 1 << 31),
    };
    Bind {
        wr_id: s.next_u64(),
        mw_type: if s.chance(50) {
            MwType::One
        } else {
            MwType::Two
        },
        mw_rkey: s.next_u64() as u32,
        new_rkey: s.next_u64() as u32,
        lkey: if len == 0 && s.chance(50) {
            0
        } else {
            s.next_u64() as u32 | 1
        },
        addr: s.next_u64(),
        len,
        access: s.range(0, 15) as u32,
        signaled: s.chance(50),
        fence: s.chance(20),
    }
}
