//! Generated send queues and WR lists, drawn from a [`Source`] of numbers:
//! a seeded generator for the property tests, the fuzzer's bytes for the
//! fuzz target, so both explore the same space.

use crate::send::SqConfig;
use crate::wr::{ibv, Op, Sge, Ud, Wr};

/// Where the choices come from.
pub trait Source {
    fn next_u64(&mut self) -> u64;

    /// A number in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// `true` with probability `percent` / 100.
    fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }
}

/// splitmix64 from a seed.
pub struct Rng(pub u64);

impl Source for Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// A fuzzer's input, 8 bytes a number; zeros once it runs out.
pub struct Bytes<'a>(pub &'a [u8]);

impl Source for Bytes<'_> {
    fn next_u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        let n = self.0.len().min(8);
        b[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        u64::from_le_bytes(b)
    }
}

/// Bytes the inline SGEs of a case point into.
pub const ARENA: usize = 4096;

/// A send queue: a ring of 2^0 to 2^15 WQEBBs, RC, UC or UD, its largest
/// WQE and inline size as rdma-core would size them, its producer index
/// anywhere, near 2^16 and near 2^32 included.
pub fn sq_config(s: &mut impl Source) -> SqConfig {
    let wqe_cnt = 1u32 << s.range(0, 15);
    let qp_type = match s.range(0, 99) {
        0..=59 => ibv::QPT_RC,
        60..=74 => ibv::QPT_UC,
        _ => ibv::QPT_UD,
    };
    let max_wqebbs = s.range(1, 16.min(wqe_cnt) as u64) as u32;
    // The most inline bytes the largest WQE carries beside its ctrl and
    // its remote-address (RC, UC) or datagram (UD) segment; a WQE is at
    // most 63 DS (the ctrl segment's 6-bit ds field).
    let room = (max_wqebbs * 64)
        .min(63 * 16)
        .saturating_sub(if qp_type == ibv::QPT_UD { 68 } else { 36 });
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
        qp_type,
        qpn: s.range(1, 0xff_ffff) as u32,
        sq_sig_all: s.chance(10),
        prefer_bf: s.chance(80),
        auto_signal: 0,
        // Two doorbells a third of the time (the BlueFlame halves).
        split: if s.chance(33) {
            s.range(1, 8) as u32
        } else {
            0
        },
    }
}

fn sge_len(s: &mut impl Source) -> u32 {
    match s.range(0, 9) {
        0 => 0,
        1 => s.range(1, 8) as u32,
        2 => s.range(1 << 20, (1 << 31) - 1) as u32 / 64,
        _ => s.range(1, 65536) as u32,
    }
}

/// One WR that fits `cfg` (its WQE within `max_wqebbs`, its inline
/// payload within `max_inline`), of an operation `cfg`'s transport has
/// (SEND with invalidate on RC and UC, not UD: rdma-core
/// `MLX5_SUPPORTED_SEND_OPS_FLAGS_*`); inline SGEs point into `arena` (at
/// `arena_base`).
pub fn wr(s: &mut impl Source, cfg: &SqConfig, arena_base: u64) -> Wr {
    let ud = cfg.qp_type == ibv::QPT_UD;
    let raddr = s.next_u64();
    let rkey = s.next_u64() as u32;
    let op = match (cfg.qp_type, s.range(0, 7)) {
        (ibv::QPT_UD, k) => {
            if k % 2 == 0 {
                Op::Send
            } else {
                Op::SendImm {
                    imm: s.next_u64() as u32,
                }
            }
        }
        (_, 0) => Op::Send,
        (_, 1) => Op::SendImm {
            imm: s.next_u64() as u32,
        },
        (_, 2) => Op::Write { raddr, rkey },
        (_, 3) => Op::WriteImm {
            raddr,
            rkey,
            imm: s.next_u64() as u32,
        },
        (_, 7) => Op::SendInv {
            rkey: s.next_u64() as u32,
        },
        (ibv::QPT_UC, _) => Op::Write { raddr, rkey },
        (_, 4) => Op::Read { raddr, rkey },
        (_, 5) => Op::CmpSwap {
            raddr: raddr & !7,
            rkey,
            compare: s.next_u64(),
            swap: s.next_u64(),
        },
        _ => Op::FetchAdd {
            raddr: raddr & !7,
            rkey,
            add: s.next_u64(),
        },
    };
    let fixed = 1
        + if ud { 3 } else { 0 }
        + match op {
            Op::Send | Op::SendImm { .. } | Op::SendInv { .. } => 0,
            Op::CmpSwap { .. } | Op::FetchAdd { .. } => 2,
            _ => 1,
        };
    let ds_room = (cfg.max_wqebbs * 4).min(63) - fixed;
    let can_inline = matches!(
        op,
        Op::Send | Op::SendImm { .. } | Op::SendInv { .. } | Op::Write { .. } | Op::WriteImm { .. }
    );
    let inline = can_inline && s.chance(35);
    let mut sges = Vec::new();
    if op.is_atomic() {
        sges.push(Sge {
            addr: s.next_u64() & !7,
            len: s.range(8, 64) as u32,
            lkey: s.next_u64() as u32,
        });
    } else if inline {
        sges = inline_sges(
            s,
            (ds_room * 16).saturating_sub(4).min(cfg.max_inline),
            arena_base,
        );
    } else {
        let n = s.range(0, ds_room.min(32) as u64);
        for _ in 0..n {
            sges.push(Sge {
                addr: s.next_u64(),
                len: sge_len(s),
                lkey: s.next_u64() as u32,
            });
        }
    }
    let ud = ud.then(|| {
        let mut av = [0u8; 48];
        for chunk in av.chunks_mut(8) {
            chunk.copy_from_slice(&s.next_u64().to_le_bytes());
        }
        Ud {
            av,
            remote_qpn: s.range(0, 0xff_ffff) as u32,
            qkey: s.next_u64() as u32,
        }
    });
    Wr {
        wr_id: s.next_u64(),
        op,
        sges,
        inline,
        signaled: s.chance(40),
        solicited: s.chance(20),
        fence: s.chance(20),
        ud,
    }
}

/// A list of 1 to 64 WRs, at most `cfg.max_post` (so neither side
/// refuses one for the WR limit).
pub fn wr_list(s: &mut impl Source, cfg: &SqConfig, arena_base: u64) -> Vec<Wr> {
    let most = 64.min(cfg.max_post) as u64;
    let n = match s.range(0, 3) {
        0 => 1,
        1 => most,
        _ => s.range(1, most),
    };
    (0..n).map(|_| wr(s, cfg, arena_base)).collect()
}

/// The SGEs of an inline WR: a payload of `room` bytes, none, or a random
/// length below `room`, split into 1 to 3 buffers (some possibly empty)
/// at random places of the case's arena (at `arena_base`, [`ARENA`]
/// bytes), each with a random lkey (an inline WR's lkeys are not read).
pub fn inline_sges(s: &mut impl Source, room: u32, arena_base: u64) -> Vec<Sge> {
    let total = match s.range(0, 4) {
        0 => room,
        1 => 0,
        _ => s.range(0, room as u64) as u32,
    };
    let parts = s.range(1, 4) as u32;
    let mut left = total;
    let mut sges = Vec::new();
    for k in 0..parts {
        let len = if k + 1 == parts {
            left
        } else {
            s.range(0, left as u64) as u32
        };
        left -= len;
        let off = s.range(0, (ARENA as u32 - len) as u64);
        sges.push(Sge {
            addr: arena_base + off,
            len,
            lkey: s.next_u64() as u32,
        });
    }
    sges
}
