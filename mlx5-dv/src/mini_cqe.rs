//! CQE compression, basic layout: mini-CQEs, compressed sessions, and their
//! expansion in place into ordinary CQEs.
//!
//! The PRM is not public. This is **the sim's model** of the basic layout,
//! derived from the decoders that read it: DPDK `drivers/net/mlx5/mlx5_rx.c`
//! (`mlx5_rx_poll_len`, `rxq_cq_decompress_v`'s scalar twin) and
//! `mlx5_prm.h` (`struct mlx5_mini_cqe8`), UCX `src/uct/ib/mlx5/ib_mlx5.c`
//! and `ib_mlx5.h` (`uct_ib_mlx5_cqe_unzip`, the mini-CQE layout), and
//! rdma-core `providers/mlx5/mlx5dv.h` (`MLX5DV_CQE_RES_FORMAT_*`). libmlx5
//! only turns compression on (`mlx5dv_create_cq` with
//! `MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE`); it never decompresses.
//!
//! # A session
//!
//! A session of `N >= 2` completions starting at CQ index `t`:
//!
//! ```text
//! slot t        title: a full 64-byte CQE, op_own bits 3:2 = 3 (format 3),
//!               byte_cnt (44..48, BE) = N, wqe_counter (60..62, BE) = the
//!               first completion's counter, every other field shared by
//!               the session; owner bit of slot t's lap
//! slot t+1      mini-CQE array 0: minis 0..8   (8 minis x 8 bytes = 64)
//! slot t+8j     mini-CQE array j >= 1: minis 8j..8j+8
//! slots t..t+N-1 the session's N slots, one a completion (the consumer
//!               index after it is t+N: DPDK's `zip->cq_ci`, UCX's basic
//!               unzip); those holding neither the title nor an array are
//!               holes the device never writes
//! ```
//!
//! A mini-CQE is 8 bytes, big-endian:
//!
//! ```text
//! requester (title opcode REQ):    0 wqe_counter (2)  2 s_wqe_opcode (1)  3 rsvd  4 byte_cnt (4)
//! responder (title opcode RESP_*): 0 rx_hash_result / checksum / stride index (4; the sim writes 0)
//!                                  4 byte_cnt (4)
//! ```
//!
//! Completion `k` of the session takes `byte_cnt` from mini `k`; a
//! requester completion takes `wqe_counter` and the WQE opcode (byte 56)
//! from it too; a responder completion's `wqe_counter` is the title's plus
//! `k` (responder minis carry no counter: this holds only where receives
//! complete in index order, which is why a compressing CQ may not serve an
//! SRQ). Everything else (QPN, opcode, immediate / invalidated rkey,
//! `flags_rqpn`, `srqn_uidx`, checksum bits, timestamp, signature) is the
//! title's. Error CQEs and inline-scatter CQEs are never compressed.
//! 64-byte CQE slots only: a CQ of 128-byte slots with compression is
//! refused at creation (our choice; the sim and the front end refuse it).
//!
//! # Expansion
//!
//! [`expand_session`] rewrites a session in place as `N` full CQEs in slots
//! `t..t+N-1` (completion `k` in slot `t+k`, the title's slot the first
//! one's; format 0, the owner bit of that slot's lap), so that a poller
//! then reads the `N` completions as ordinary CQEs from the title's slot on. Every slot of the
//! session then carries the current lap's owner bit, so on the next lap no
//! hole reads as software-owned (what DPDK gets by writing
//! `MLX5_CQE_INVALIDATE` into the holes).

use crate::prm::{CqeOpcode, CQE64};

/// Bytes in one mini-CQE.
pub const MINI_CQE_SIZE: usize = 8;
/// Mini-CQEs in one 64-byte array slot.
pub const MINIS_PER_SLOT: u32 = 8;
/// `op_own` bits 3:2 (the CQE format) of a compressed session's title.
pub const FORMAT_MASK: u8 = 0x0c;

/// Whether the CQE whose `op_own` (byte 63) is given is the title of a
/// compressed session: format bits 3:2 are 3 (`op_own & 0x0c == 0x0c`;
/// rdma-core `mlx5dv.h` `MLX5_COMPRESSED`, UCX
/// `uct_ib_mlx5_cqe_is_error_or_zipped`).
#[inline(always)]
pub fn is_title(op_own: u8) -> bool {
    op_own & FORMAT_MASK == FORMAT_MASK
}

/// One 8-byte mini-CQE, as it lies in an array slot (big-endian fields;
/// layouts in the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MiniCqe(pub [u8; MINI_CQE_SIZE]);

impl MiniCqe {
    /// A requester mini-CQE: `wqe_counter` (bytes 0..2), the WQE opcode
    /// completed (byte 2), `byte_cnt` (bytes 4..8).
    pub fn requester(wqe_counter: u16, s_wqe_opcode: u8, byte_cnt: u32) -> Self {
        let mut b = [0u8; MINI_CQE_SIZE];
        b[0..2].copy_from_slice(&wqe_counter.to_be_bytes());
        b[2] = s_wqe_opcode;
        b[4..8].copy_from_slice(&byte_cnt.to_be_bytes());
        MiniCqe(b)
    }

    /// A responder mini-CQE: the RX hash result, checksum or stride index
    /// (bytes 0..4; the sim writes 0), `byte_cnt` (bytes 4..8).
    pub fn responder(rx_hash: u32, byte_cnt: u32) -> Self {
        let mut b = [0u8; MINI_CQE_SIZE];
        b[0..4].copy_from_slice(&rx_hash.to_be_bytes());
        b[4..8].copy_from_slice(&byte_cnt.to_be_bytes());
        MiniCqe(b)
    }

    /// `byte_cnt` (bytes 4..8), either layout.
    pub fn byte_cnt(&self) -> u32 {
        u32::from_be_bytes([self.0[4], self.0[5], self.0[6], self.0[7]])
    }

    /// Requester layout: `wqe_counter` (bytes 0..2).
    pub fn wqe_counter(&self) -> u16 {
        u16::from_be_bytes([self.0[0], self.0[1]])
    }

    /// Requester layout: the WQE opcode completed (byte 2).
    pub fn s_wqe_opcode(&self) -> u8 {
        self.0[2]
    }

    /// Responder layout: the RX hash result / checksum / stride index (bytes 0..4).
    pub fn rx_hash(&self) -> u32 {
        u32::from_be_bytes([self.0[0], self.0[1], self.0[2], self.0[3]])
    }
}

/// Why [`expand_session`] (or [`write_session`]) refused; it then wrote nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionError {
    /// The ring is not `cqe_cnt` 64-byte slots, or `cqe_cnt` is not a power
    /// of two of at least 2.
    Ring {
        /// The ring's length in bytes.
        len: usize,
        /// The slot count given.
        cqe_cnt: u32,
    },
    /// The slot at the title index is not a title (format bits not 3).
    NotATitle {
        /// Its `op_own` byte.
        op_own: u8,
    },
    /// The title's opcode is neither REQ nor a successful responder opcode
    /// (errors are never compressed).
    Opcode {
        /// The opcode (op_own bits 7:4).
        opcode: u8,
    },
    /// The count (title `byte_cnt`) is below 2 or above `cqe_cnt`: the
    /// session would not fit the ring.
    Count {
        /// The count.
        n: u32,
        /// The largest the ring allows (`cqe_cnt`).
        max: u32,
    },
}

impl core::fmt::Display for SessionError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SessionError::Ring { len, cqe_cnt } => write!(
                f,
                "a CQ ring of {len} bytes is not {cqe_cnt} 64-byte slots (a power of two, at least 2)"
            ),
            SessionError::NotATitle { op_own } => {
                write!(f, "op_own {op_own:#04x} is not a compressed-session title (format 3)")
            }
            SessionError::Opcode { opcode } => write!(
                f,
                "a compressed-session title of CQE opcode {opcode:#x}: only REQ and RESP_* (1..=4) are compressed"
            ),
            SessionError::Count { n, max } => {
                write!(f, "a compressed session of {n} completions: 2..={max} fit the ring")
            }
        }
    }
}

impl std::error::Error for SessionError {}

/// Whether a session of CQEs of this opcode (op_own bits 7:4) carries
/// requester mini-CQEs (REQ) or responder ones (RESP_WR_IMM, RESP_SEND,
/// RESP_SEND_IMM, RESP_SEND_INV); `None` for an opcode never compressed
/// (errors among them).
pub fn requester(opcode: u8) -> Option<bool> {
    match CqeOpcode(opcode) {
        CqeOpcode::REQ => Some(true),
        CqeOpcode::RESP_WR_IMM
        | CqeOpcode::RESP_SEND
        | CqeOpcode::RESP_SEND_IMM
        | CqeOpcode::RESP_SEND_INV => Some(false),
        _ => None,
    }
}

/// The slot, counted from the title, of mini-CQE array `j`: 1 for array 0,
/// `8j` for array `j >= 1` (DPDK `mlx5_rx.c`: the next array 7 slots after
/// the previous one's last completion).
#[inline]
pub fn array_offset(j: u32) -> u32 {
    if j == 0 {
        1
    } else {
        MINIS_PER_SLOT * j
    }
}

/// The mini-CQE arrays a session of `n` completions holds (`ceil(n / 8)`).
pub fn arrays(n: u32) -> u32 {
    n.div_ceil(MINIS_PER_SLOT)
}

/// Slots a session of `n` completions consumes: `n`, one per completion
/// (the title's slot the first's; arrays and holes among them).
pub fn session_slots(n: u32) -> u32 {
    n
}

/// The title of a session of `n` completions whose first completion is the
/// format-0 CQE `first` (its owner bit kept): `first` with `byte_cnt` set
/// to `n` and format bits 3:2 set to 3.
pub fn title(first: &[u8; CQE64], n: u32) -> [u8; CQE64] {
    let mut t = *first;
    t[44..48].copy_from_slice(&n.to_be_bytes());
    t[63] |= FORMAT_MASK;
    t
}

/// A 64-byte mini-CQE array holding `minis` (at most 8), the rest zero.
pub fn array(minis: &[MiniCqe]) -> [u8; CQE64] {
    let mut b = [0u8; CQE64];
    for (i, m) in minis.iter().take(MINIS_PER_SLOT as usize).enumerate() {
        b[i * MINI_CQE_SIZE..(i + 1) * MINI_CQE_SIZE].copy_from_slice(&m.0);
    }
    b
}

/// The slots of a CQ ring that [`expand_in`] reads and writes: 64-byte CQE
/// slots, indexed modulo [`Self::cqe_cnt`].
pub trait CqSlots {
    /// Slots in the ring (a power of two, at least 2).
    fn cqe_cnt(&self) -> u32;
    /// The 64 bytes of slot `i` (`i < cqe_cnt`).
    fn read(&self, i: u32) -> [u8; CQE64];
    /// Writes the 64 bytes of slot `i` (`i < cqe_cnt`).
    fn write(&mut self, i: u32, b: &[u8; CQE64]);
}

/// A CQ ring in plain memory: `cqe_cnt` 64-byte slots.
pub struct RingSlots<'a> {
    ring: &'a mut [u8],
    cqe_cnt: u32,
}

impl<'a> RingSlots<'a> {
    /// The ring `ring` of `cqe_cnt` slots. Errors: [`SessionError::Ring`]
    /// unless `cqe_cnt` is a power of two of at least 2 and `ring` is
    /// `cqe_cnt * 64` bytes.
    pub fn new(ring: &'a mut [u8], cqe_cnt: u32) -> Result<Self, SessionError> {
        if !cqe_cnt.is_power_of_two() || cqe_cnt < 2 || ring.len() != cqe_cnt as usize * CQE64 {
            return Err(SessionError::Ring {
                len: ring.len(),
                cqe_cnt,
            });
        }
        Ok(RingSlots { ring, cqe_cnt })
    }
}

impl CqSlots for RingSlots<'_> {
    fn cqe_cnt(&self) -> u32 {
        self.cqe_cnt
    }
    fn read(&self, i: u32) -> [u8; CQE64] {
        let o = i as usize * CQE64;
        self.ring[o..o + CQE64].try_into().expect("a whole slot")
    }
    fn write(&mut self, i: u32, b: &[u8; CQE64]) {
        let o = i as usize * CQE64;
        self.ring[o..o + CQE64].copy_from_slice(b);
    }
}

/// Checks the title at slot `t` (masked) of `ring`: returns its bytes,
/// the count, and whether its minis are requester ones.
fn check_title(ring: &impl CqSlots, t: u32) -> Result<([u8; CQE64], u32, bool), SessionError> {
    let title = ring.read(t);
    let op_own = title[63];
    if !is_title(op_own) {
        return Err(SessionError::NotATitle { op_own });
    }
    let req = requester(op_own >> 4).ok_or(SessionError::Opcode {
        opcode: op_own >> 4,
    })?;
    let n = u32::from_be_bytes([title[44], title[45], title[46], title[47]]);
    let max = ring.cqe_cnt();
    if !(2..=max).contains(&n) {
        return Err(SessionError::Count { n, max });
    }
    Ok((title, n, req))
}

/// [`expand_session`] over any [`CqSlots`]. Returns the count `N`.
/// Reads each array before its slot is overwritten: completions go from
/// `N-1` down to 0, array `j` read once when its first (highest) mini
/// comes; array `j >= 1` (slot `t+8j`) is the slot of completion `8j`,
/// its own lowest, and array 0 (slot `t+1`) that of completion 1, both
/// written after the array was read; the title (slot `t`, kept in hand)
/// goes last, with completion 0.
pub fn expand_in(ring: &mut impl CqSlots, t: u32) -> Result<u32, SessionError> {
    let cnt = ring.cqe_cnt();
    let mask = cnt - 1;
    let t = t & mask;
    let (title, n, req) = check_title(ring, t)?;
    let lap = title[63] & 1;
    let counter0 = u16::from_be_bytes([title[60], title[61]]);
    let mut arr = [0u8; CQE64];
    let mut arr_j = u32::MAX;
    for k in (0..n).rev() {
        let j = k / MINIS_PER_SLOT;
        if j != arr_j {
            arr = ring.read((t + array_offset(j)) & mask);
            arr_j = j;
        }
        let o = (k % MINIS_PER_SLOT) as usize * MINI_CQE_SIZE;
        let m = MiniCqe(arr[o..o + MINI_CQE_SIZE].try_into().expect("8 bytes"));
        let mut c = title;
        c[44..48].copy_from_slice(&m.byte_cnt().to_be_bytes());
        let counter = if req {
            c[56] = m.s_wqe_opcode();
            m.wqe_counter()
        } else {
            counter0.wrapping_add(k as u16)
        };
        c[60..62].copy_from_slice(&counter.to_be_bytes());
        let at = t + k;
        // Past the ring's end the slot belongs to the next lap.
        let owner = lap ^ (at >= cnt) as u8;
        c[63] = (title[63] & !(FORMAT_MASK | 1)) | owner;
        ring.write(at & mask, &c);
    }
    Ok(n)
}

/// Expands the compressed session whose title is at slot `title_index`
/// (taken modulo `cqe_cnt`) of `ring` (`cqe_cnt` 64-byte CQE slots) in
/// place, as the [module docs](self) say, wrapping at the ring's end.
/// Returns the count `N`; the `N` completions are then ordinary CQEs in
/// slots `title_index .. title_index+N`.
///
/// Errors (then nothing is written): [`SessionError::Ring`],
/// [`SessionError::NotATitle`], [`SessionError::Opcode`],
/// [`SessionError::Count`] (a corrupt count never makes it write past the
/// session's `N <= cqe_cnt` slots).
pub fn expand_session(
    ring: &mut [u8],
    cqe_cnt: u32,
    title_index: u32,
) -> Result<u32, SessionError> {
    expand_in(&mut RingSlots::new(ring, cqe_cnt)?, title_index)
}

/// Writes a session as the device does (the sim's model; tests and the fuzz
/// target use it): `first` is the first completion as a full format-0 CQE
/// (owner bit of slot `t`'s lap, the session's shared fields), `minis` one
/// per completion; arrays at `t+1` and `t+8j`, then the title at `t`
/// (a device publishes the title's `op_own` last). Holes are left as they
/// were. Errors as [`expand_session`]'s, checked before anything is written.
pub fn write_session(
    ring: &mut [u8],
    cqe_cnt: u32,
    t: u32,
    first: &[u8; CQE64],
    minis: &[MiniCqe],
) -> Result<(), SessionError> {
    let mut r = RingSlots::new(ring, cqe_cnt)?;
    let n = minis.len() as u32;
    let max = cqe_cnt;
    if !(2..=max).contains(&n) {
        return Err(SessionError::Count { n, max });
    }
    let op_own = first[63];
    if requester(op_own >> 4).is_none() {
        return Err(SessionError::Opcode {
            opcode: op_own >> 4,
        });
    }
    let mask = cqe_cnt - 1;
    for (j, chunk) in minis.chunks(MINIS_PER_SLOT as usize).enumerate() {
        r.write(t.wrapping_add(array_offset(j as u32)) & mask, &array(chunk));
    }
    r.write(t & mask, &title(first, n));
    Ok(())
}

#[cfg(test)]
#[path = "mini_cqe_tests.rs"]
mod tests;
