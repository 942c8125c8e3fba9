//! UMR WQEs for memory windows: a bind (type 1 or type 2) and an
//! invalidation (`LOCAL_INV`), as rdma-core v59's libmlx5 writes them
//! (`providers/mlx5/qp.c`: `set_bind_wr`, `set_umr_control_seg`,
//! `set_umr_mkey_seg`, `set_umr_data_seg`; reached from `_mlx5_post_send`'s
//! `IBV_WR_BIND_MW` and `IBV_WR_LOCAL_INV` cases, from `mlx5_bind_mw`, and
//! from the `ibv_wr_bind_mw` / `ibv_wr_local_inv` builders). Layouts are
//! `mlx5dv.h`'s `struct mlx5_wqe_umr_ctrl_seg`, `mlx5_wqe_mkey_context_seg`
//! and `mlx5_wqe_umr_klm_seg`; every field is big-endian. Offsets from the
//! WQE's start:
//!
//! ```text
//!   0 ctrl (16)    opcode UMR (0x25), opmod 0, ds 12 (bind) or 8 (no KLM),
//!                  imm = the window's current rkey (bind) or the rkey
//!                  invalidated (LOCAL_INV)
//!  16 UMR ctrl (48)
//!       16 flags: INLINE 0x80 | TRNSLATION_OFFSET 0x10, + CHECK_FREE 0x20
//!          (type-2 bind) or CHECK_QPN 0x08 (type 2, no KLM)
//!       17 rsvd (3)   20 klm_octowords (2): 4 with a KLM, else 0
//!       22 translation_offset (2) = 0
//!       24 mkey_mask (8): FREE | MKEY, + QPN (type 2), + LEN | START_ADDR
//!          | the four ACCESS bits (with a KLM)
//!       32 rsvd (32)
//!  64 mkey context (64)
//!       64 free: 0 (bind) or 0x40 (no KLM)   66 access_flags (bind)
//!       68 qpn_mkey: new key byte | 0xffffff00 (type 1, or no KLM), else
//!          | qpn << 8
//!       80 start_addr (8)   88 len (8)   (bind; the rest reserved, 0)
//! 128 KLM, padded to 64 bytes (bind only)
//!      128 byte_count (4) = len   132 mkey (4) = the MR's lkey
//!      136 address (8)            144 zero (48)
//! ```
//!
//! A bind is 3 WQEBBs (192 bytes), a zero-length bind or `LOCAL_INV` 2
//! (128 bytes). Every segment starts at a WQEBB boundary or inside the
//! first WQEBB, so each WQEBB is placed at `(pi + k) & (wqe_cnt - 1)`: the
//! WQE wraps at the ring's end between WQEBBs, as libmlx5's `seg == qend`
//! checks do (rdma-core commits `efad77085`, `c4344e46f` fixed wraps here).
//!
//! Bytes libmlx5 never writes (the mkey context's reserved bytes, and for a
//! zero-length UMR its `access_flags`, `start_addr` and `len`) are written
//! 0 here: the device ignores them, and a ring read back shows no stale
//! bytes. The WQE after a UMR needs `INITIATOR_SMALL_FENCE`
//! ([`CtrlFlags::SMALL_FENCE`]), which libmlx5 carries in `fm_cache`; that is
//! the send queue's business (`SendQueue::post_umr`), not this encoder's.

use super::segments::ctrl_seg;
use super::{SqGeometry, WqeError, Written};
use crate::prm::{CtrlFlags, WqeOpcode, WQEBB};
use crate::ring::RingBuf;

/// `MLX5_OPCODE_UMR`: the ctrl opcode of a memory-window bind or
/// invalidation (`mlx5dv.h`).
pub const UMR: WqeOpcode = WqeOpcode(0x25);

/// The largest window a bind maps, in bytes: 2^31, the KLM's 32-bit
/// `byte_count` ("up to 2GB", `mlx5dv.h`; libmlx5's `set_bind_wr` refuses
/// more with `EOPNOTSUPP`).
pub const UMR_MAX_LEN: u64 = 1 << 31;

/// `MLX5_WQE_UMR_CTRL_FLAG_*` (`mlx5dv.h`): UMR ctrl segment byte 0.
mod ctrl_flag {
    pub const INLINE: u8 = 1 << 7;
    pub const CHECK_FREE: u8 = 1 << 5;
    pub const TRNSLATION_OFFSET: u8 = 1 << 4;
    pub const CHECK_QPN: u8 = 1 << 3;
}

/// `MLX5_WQE_UMR_CTRL_MKEY_MASK_*` (`mlx5dv.h`): which mkey context fields
/// the UMR changes (UMR ctrl bytes 8..16).
mod mask {
    pub const LEN: u64 = 1 << 0;
    pub const START_ADDR: u64 = 1 << 6;
    pub const MKEY: u64 = 1 << 13;
    pub const QPN: u64 = 1 << 14;
    pub const ACCESS_LOCAL_WRITE: u64 = 1 << 18;
    pub const ACCESS_REMOTE_READ: u64 = 1 << 19;
    pub const ACCESS_REMOTE_WRITE: u64 = 1 << 20;
    pub const ACCESS_ATOMIC: u64 = 1 << 21;
    pub const FREE: u64 = 1 << 29;
}

/// `MLX5_WQE_MKEY_CONTEXT_FREE`: mkey context byte 0 of a zero-length UMR.
const MKEY_FREE: u8 = 1 << 6;

/// Memory-window type (IB spec 10.6.7.2; `enum ibv_mw_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Type 1: bound and unbound through the QP (`ibv_bind_mw`), usable on
    /// any QP of the PD; the new key's `qpn_mkey` carries no QPN.
    One,
    /// Type 2: bound by a WR (`IBV_WR_BIND_MW`) onto one QP, which alone
    /// may use it; invalidated by `LOCAL_INV` or a peer's SEND with
    /// invalidate.
    Two,
}

/// A window's access as the mkey context's `access_flags` byte holds it
/// (`MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_*`, `mlx5dv.h`): LOCAL_WRITE 1 << 3,
/// REMOTE_READ 1 << 4, REMOTE_WRITE 1 << 5, ATOMIC 1 << 6. Local read is
/// implied (the kernel sets it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MwAccess {
    /// `IBV_ACCESS_LOCAL_WRITE`.
    pub local_write: bool,
    /// `IBV_ACCESS_REMOTE_READ`.
    pub remote_read: bool,
    /// `IBV_ACCESS_REMOTE_WRITE`.
    pub remote_write: bool,
    /// `IBV_ACCESS_REMOTE_ATOMIC`.
    pub remote_atomic: bool,
}

impl MwAccess {
    /// The mkey context's `access_flags` byte.
    pub fn bits(self) -> u8 {
        (self.local_write as u8) << 3
            | (self.remote_read as u8) << 4
            | (self.remote_write as u8) << 5
            | (self.remote_atomic as u8) << 6
    }

    /// The inverse of [`Self::bits`] (other bits ignored).
    pub fn from_bits(b: u8) -> MwAccess {
        MwAccess {
            local_write: b & 1 << 3 != 0,
            remote_read: b & 1 << 4 != 0,
            remote_write: b & 1 << 5 != 0,
            remote_atomic: b & 1 << 6 != 0,
        }
    }
}

/// The range a bind maps: `len` bytes of the MR whose lkey is `lkey`,
/// starting at its virtual address `addr` (the window's address is the
/// same: not zero-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UmrBind {
    /// The MR's lkey (KLM bytes 4..8).
    pub lkey: u32,
    /// Start address, bytes (mkey `start_addr`, KLM `address`).
    pub addr: u64,
    /// Length in bytes, 1..=[`UMR_MAX_LEN`] (mkey `len`, KLM `byte_count`).
    pub len: u64,
    /// What the window allows.
    pub access: MwAccess,
}

/// One UMR WQE: a memory-window bind, a zero-length bind (type 1's unbind)
/// or a `LOCAL_INV` (a type-2 zero-length UMR with new key byte 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UmrWqe {
    /// The ctrl segment's `fm_ce_se` byte (CQ_UPDATE, FENCE, ...).
    pub flags: CtrlFlags,
    /// The ctrl segment's immediate: the window's current rkey (a bind,
    /// `ibv_mw.rkey`) or the rkey invalidated (`LOCAL_INV`).
    pub imm_rkey: u32,
    /// The window's type; `LOCAL_INV` is written as type 2.
    pub mw_type: MwType,
    /// The low byte of the key after the UMR (`qpn_mkey` byte 3): a bind's
    /// new rkey's variant byte (`ibv_inc_rkey`); 0 for `LOCAL_INV`.
    pub new_key: u8,
    /// The mapped range; `None` for a zero-length UMR (the window is freed).
    pub bind: Option<UmrBind>,
}

impl UmrWqe {
    /// A type-2 `LOCAL_INV` of `rkey` (libmlx5 `IBV_WR_LOCAL_INV`).
    pub fn local_inv(rkey: u32, flags: CtrlFlags) -> UmrWqe {
        UmrWqe {
            flags,
            imm_rkey: rkey,
            mw_type: MwType::Two,
            new_key: 0,
            bind: None,
        }
    }

    /// DS (16-byte units) and WQEBBs: 12 and 3 with a KLM, else 8 and 2.
    pub fn size(&self) -> (u32, u32) {
        if self.bind.is_some() {
            (12, 3)
        } else {
            (8, 2)
        }
    }
}

/// Checks `wqe` against `geo` and returns `(ds, wqebbs)`, writing nothing.
///
/// Errors: [`WqeError::UmrLength`] for a bind of 0 or more than
/// [`UMR_MAX_LEN`] bytes (a zero-length UMR is `bind: None`);
/// [`WqeError::TooBig`] when the QP's largest WQE is under its WQEBBs.
pub fn umr_size(geo: &SqGeometry, wqe: &UmrWqe) -> Result<(u32, u32), WqeError> {
    if let Some(b) = wqe.bind {
        if b.len == 0 || b.len > UMR_MAX_LEN {
            return Err(WqeError::UmrLength { len: b.len });
        }
    }
    let (ds, wqebbs) = wqe.size();
    let max = geo.max_wqebbs.min(geo.wqe_cnt);
    if wqebbs > max {
        return Err(WqeError::TooBig { wqebbs, max });
    }
    Ok((ds, wqebbs))
}

/// The WQE's bytes, in WQEBB order (`wqebbs * 64` of the 192 are meant).
pub fn umr_wqe_bytes(qpn: u32, pi: u32, wqe: &UmrWqe, ds: u32) -> [u8; 3 * WQEBB] {
    let mut b = [0u8; 3 * WQEBB];
    b[..16].copy_from_slice(&ctrl_seg(UMR, pi as u16, qpn, ds, wqe.flags, wqe.imm_rkey));
    let type2 = wqe.mw_type == MwType::Two;
    // UMR ctrl.
    let mut flags = ctrl_flag::TRNSLATION_OFFSET | ctrl_flag::INLINE;
    let mut mkey_mask = mask::FREE | mask::MKEY;
    if type2 {
        mkey_mask |= mask::QPN;
    }
    match wqe.bind {
        Some(_) => {
            if type2 {
                flags |= ctrl_flag::CHECK_FREE;
            }
            mkey_mask |= mask::LEN
                | mask::START_ADDR
                | mask::ACCESS_LOCAL_WRITE
                | mask::ACCESS_REMOTE_READ
                | mask::ACCESS_REMOTE_WRITE
                | mask::ACCESS_ATOMIC;
            // `get_klm_octo(1)`: one KLM rounded up to 8, in 16-byte halves.
            b[20..22].copy_from_slice(&4u16.to_be_bytes());
        }
        None if type2 => flags |= ctrl_flag::CHECK_QPN,
        None => {}
    }
    b[16] = flags;
    b[24..32].copy_from_slice(&mkey_mask.to_be_bytes());
    // The mkey context.
    let m = 64;
    let high = if wqe.mw_type == MwType::One || wqe.bind.is_none() {
        0xffff_ff00
    } else {
        (qpn & 0xff_ffff) << 8
    };
    b[m + 4..m + 8].copy_from_slice(&(wqe.new_key as u32 | high).to_be_bytes());
    match wqe.bind {
        Some(k) => {
            b[m + 2] = k.access.bits();
            b[m + 16..m + 24].copy_from_slice(&k.addr.to_be_bytes());
            b[m + 24..m + 32].copy_from_slice(&k.len.to_be_bytes());
            // The KLM.
            let d = 128;
            b[d..d + 4].copy_from_slice(&(k.len as u32).to_be_bytes());
            b[d + 4..d + 8].copy_from_slice(&k.lkey.to_be_bytes());
            b[d + 8..d + 16].copy_from_slice(&k.addr.to_be_bytes());
        }
        None => b[m] = MKEY_FREE,
    }
    b
}

/// Writes `wqe` into `sq` at producer index `pi`, its WQEBBs wrapping at
/// the ring's end; `free` is the WQEBBs the caller knows to be free. On
/// error nothing is written.
///
/// Errors: [`umr_size`]'s; [`WqeError::BadGeometry`] for a ring that is
/// not `wqe_cnt * 64` bytes with `wqe_cnt` a power of two;
/// [`WqeError::QueueFull`] when fewer than its WQEBBs are free.
pub fn write_umr_wqe(
    sq: &mut RingBuf<'_>,
    geo: &SqGeometry,
    pi: u32,
    wqe: &UmrWqe,
    free: u32,
) -> Result<Written, WqeError> {
    if !geo.wqe_cnt.is_power_of_two() || sq.len() != geo.wqe_cnt as usize * WQEBB {
        return Err(WqeError::BadGeometry {
            wqe_cnt: geo.wqe_cnt,
            ring_len: sq.len(),
        });
    }
    let (ds, wqebbs) = umr_size(geo, wqe)?;
    if wqebbs > free {
        return Err(WqeError::QueueFull { need: wqebbs, free });
    }
    write_umr_sized(sq, geo, pi, wqe, ds, wqebbs);
    Ok(Written {
        ds,
        wqebbs,
        next_pi: pi.wrapping_add(wqebbs),
    })
}

/// [`write_umr_wqe`] once checked: the geometry, the size, the room.
pub(crate) fn write_umr_sized(
    sq: &mut RingBuf<'_>,
    geo: &SqGeometry,
    pi: u32,
    wqe: &UmrWqe,
    ds: u32,
    wqebbs: u32,
) {
    let bytes = umr_wqe_bytes(geo.qpn, pi, wqe, ds);
    for k in 0..wqebbs {
        let at = (pi.wrapping_add(k) & (geo.wqe_cnt - 1)) as usize * WQEBB;
        sq.write_wrapping(at, &bytes[k as usize * WQEBB..][..WQEBB]);
    }
}

/// A UMR WQE read back from an SQ ring ([`decode_umr_wqe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodedUmr {
    /// Low 16 bits of the WQE index (ctrl bytes 1..3).
    pub wqe_idx: u16,
    /// The QPN (ctrl bytes 4..7).
    pub qpn: u32,
    /// DS (ctrl byte 7).
    pub ds: u32,
    /// The UMR as written: `mw_type` is type 2 when the mkey mask has QPN.
    pub wqe: UmrWqe,
    /// The `qpn_mkey` word's upper 24 bits: the QPN a type-2 window is
    /// bound to, or 0xffffff (type 1, or freed).
    pub bound_qpn: u32,
}

/// Reads the UMR WQE at producer index `pi` of an SQ of `wqe_cnt` WQEBBs:
/// the inverse of [`write_umr_wqe`]. `None` when the ctrl opcode is not
/// UMR or its DS is neither 8 nor 12.
pub fn decode_umr_wqe(sq: &RingBuf<'_>, wqe_cnt: u32, pi: u32) -> Option<DecodedUmr> {
    let mut b = [0u8; 3 * WQEBB];
    for k in 0..3u32.min(wqe_cnt.max(1)) {
        let at = (pi.wrapping_add(k) & (wqe_cnt.max(1) - 1)) as usize * WQEBB;
        sq.read_wrapping(at, &mut b[k as usize * WQEBB..][..WQEBB]);
    }
    let c = super::decode_ctrl_seg(b[..16].try_into().expect("16 bytes"));
    if c.opcode != UMR || !(c.ds == 8 || c.ds == 12) {
        return None;
    }
    let be32 = |o: usize| u32::from_be_bytes(b[o..o + 4].try_into().expect("4 bytes"));
    let be64 = |o: usize| u64::from_be_bytes(b[o..o + 8].try_into().expect("8 bytes"));
    let mkey_mask = be64(24);
    let qpn_mkey = be32(68);
    let bind = (c.ds == 12).then(|| UmrBind {
        lkey: be32(132),
        addr: be64(136),
        len: be64(88),
        access: MwAccess::from_bits(b[66]),
    });
    Some(DecodedUmr {
        wqe_idx: c.wqe_idx,
        qpn: c.qpn,
        ds: c.ds,
        wqe: UmrWqe {
            flags: c.flags,
            imm_rkey: c.imm,
            mw_type: if mkey_mask & mask::QPN != 0 {
                MwType::Two
            } else {
                MwType::One
            },
            new_key: qpn_mkey as u8,
            bind,
        },
        bound_qpn: qpn_mkey >> 8,
    })
}
