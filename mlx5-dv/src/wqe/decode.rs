//! Reading a send WQE back from an SQ ring, as the device (the sim) and the
//! trace see it.

use super::segments::{
    decode_atomic_seg, decode_ctrl_seg, decode_data_seg, decode_datagram_seg,
    decode_dc_datagram_seg, decode_inline_hdr, decode_raddr_seg, inline_ds, DatagramDest, DcDest,
};
use super::{decode_masked_atomic, AtomicSeg, AtomicSize, DataSeg, MaskedAtomic, RemoteSeg};
use crate::prm::{CtrlFlags, WqeOpcode, DS, WQEBB};
use crate::ring::RingBuf;

/// Where a decoded WQE's payload sits in the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodedPayload {
    /// No payload segments.
    None,
    /// `count` data segments, the first at ring offset `first`.
    Sges {
        /// Ring offset of the first data segment, in bytes.
        first: usize,
        /// Data segments (16 bytes each).
        count: u32,
    },
    /// An inline segment: `len` bytes starting at ring offset `off` (wrapping).
    Inline {
        /// Ring offset of the first payload byte (after the 4-byte header).
        off: usize,
        /// Payload length in bytes.
        len: u32,
    },
}

/// A send WQE read back from an SQ ring: what the device sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodedWqe {
    /// The opcode (ctrl byte 3).
    pub opcode: WqeOpcode,
    /// The opcode modifier (ctrl byte 0).
    pub opmod: u8,
    /// Low 16 bits of the WQE index (ctrl bytes 1..3).
    pub wqe_idx: u16,
    /// The QPN (ctrl bytes 4..7, 24 bits).
    pub qpn: u32,
    /// The WQE's size in DS (16-byte units; ctrl byte 7, 6 bits).
    pub ds: u32,
    /// The `fm_ce_se` byte (ctrl byte 11).
    pub flags: CtrlFlags,
    /// The ctrl segment's immediate (bytes 12..16, big-endian), whatever
    /// the opcode: immediate data as the application meant it (SEND_IMM,
    /// RDMA_WRITE_IMM), the rkey to invalidate (SEND_INVAL), else what the
    /// writer put there (0 for ours).
    pub imm: u32,
    /// The raddr segment, for the RDMA and atomic opcodes.
    pub remote: Option<RemoteSeg>,
    /// The atomic segment, for ATOMIC_CS and ATOMIC_FA.
    pub atomic: Option<AtomicSeg>,
    /// The masked atomic's operands and size (from the opmod), for
    /// ATOMIC_MASKED_CS and ATOMIC_MASKED_FA.
    pub masked: Option<MaskedAtomic>,
    /// Where the payload segments sit.
    pub payload: DecodedPayload,
    /// A UD or DC WQE's datagram segment: its ring offset (48 bytes; it
    /// never crosses the ring's end, [`super::Datagram`]).
    pub datagram: Option<usize>,
}

impl DecodedWqe {
    /// The datagram segment of a UD or DC WQE (`None` for others).
    pub fn av(&self, sq: &RingBuf<'_>) -> Option<[u8; super::DATAGRAM_SEG]> {
        let off = self.datagram?;
        let mut b = [0u8; super::DATAGRAM_SEG];
        sq.read_wrapping(off, &mut b);
        Some(b)
    }

    /// A DC WQE's destination ([`decode_dc_datagram_seg`] of its datagram
    /// segment: the DCT number and DC key); `None` for a WQE decoded without one.
    pub fn dc_dest(&self, sq: &RingBuf<'_>) -> Option<DcDest> {
        self.av(sq).map(|b| decode_dc_datagram_seg(&b))
    }

    /// A UD WQE's destination ([`decode_datagram_seg`]: remote QPN and
    /// qkey); `None` for a WQE decoded without a datagram segment.
    pub fn ud_dest(&self, sq: &RingBuf<'_>) -> Option<DatagramDest> {
        self.av(sq).map(|b| decode_datagram_seg(&b))
    }

    /// WQEBBs this WQE occupies.
    pub fn wqebbs(&self) -> u32 {
        (self.ds * DS as u32).div_ceil(WQEBB as u32)
    }

    /// Data segment `i` of an SGE payload (`None` past the end or for other payloads).
    pub fn sge(&self, sq: &RingBuf<'_>, i: u32) -> Option<DataSeg> {
        let DecodedPayload::Sges { first, count } = self.payload else {
            return None;
        };
        if i >= count {
            return None;
        }
        let mut b = [0u8; 16];
        sq.read_wrapping(first + i as usize * DS, &mut b);
        Some(decode_data_seg(&b))
    }

    /// Copies an inline payload into `out` (at most `out.len()` bytes); returns its length.
    pub fn inline_bytes(&self, sq: &RingBuf<'_>, out: &mut [u8]) -> usize {
        let DecodedPayload::Inline { off, len } = self.payload else {
            return 0;
        };
        let n = (len as usize).min(out.len());
        sq.read_wrapping(off, &mut out[..n]);
        len as usize
    }
}

/// Why ring bytes are not a well-formed send WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The ctrl segment's DS count is too small for the opcode's segments.
    #[error("ctrl segment says {ds} DS; opcode {opcode:#04x} needs at least {min}")]
    TooFewDs {
        /// The ctrl segment's DS count.
        ds: u32,
        /// The WQE opcode.
        opcode: u8,
        /// The fewest DS the opcode needs.
        min: u32,
    },
    /// The inline segment's length runs past the WQE's DS.
    #[error("inline segment of {len} bytes overruns the WQE's {ds} DS")]
    InlineOverrun {
        /// The inline header's byte count.
        len: u32,
        /// The ctrl segment's DS count.
        ds: u32,
    },
    /// A masked atomic whose ctrl opmod names no operand size this codec
    /// knows (4 bytes: 0x08, 8 bytes: 0x09).
    #[error("masked atomic opcode {opcode:#04x} with opmod {opmod:#04x}: not a 4- or 8-byte extended atomic")]
    BadOpmod {
        /// The WQE opcode.
        opcode: u8,
        /// The ctrl segment's opmod.
        opmod: u8,
    },
    /// The WQE's DS count is larger than the whole ring.
    #[error("WQE of {ds} DS does not fit a ring of {wqe_cnt} WQEBBs")]
    BiggerThanRing {
        /// The ctrl segment's DS count.
        ds: u32,
        /// The ring's size in WQEBBs.
        wqe_cnt: u32,
    },
}

/// Reads the send WQE at producer index `pi` of an SQ of `wqe_cnt` WQEBBs
/// (the inverse of [`write_send_wqe`](super::write_send_wqe)).
pub fn decode_send_wqe(sq: &RingBuf<'_>, wqe_cnt: u32, pi: u32) -> Result<DecodedWqe, DecodeError> {
    decode_in(sq, wqe_cnt, pi, false)
}

/// [`decode_send_wqe`] of a UD QP's SQ: a datagram segment (3 DS) follows
/// the ctrl segment.
pub fn decode_ud_send_wqe(
    sq: &RingBuf<'_>,
    wqe_cnt: u32,
    pi: u32,
) -> Result<DecodedWqe, DecodeError> {
    decode_in(sq, wqe_cnt, pi, true)
}

/// [`decode_send_wqe`] of a DCI's SQ: a DC WQE has the same layout as a
/// UD one (ctrl, the 48-byte datagram segment, then the operation's
/// segments as RC's: raddr, atomic, data or inline), for every operation.
/// [`DecodedWqe::dc_dest`] reads its destination (DCT number and DC key).
pub fn decode_dc_send_wqe(
    sq: &RingBuf<'_>,
    wqe_cnt: u32,
    pi: u32,
) -> Result<DecodedWqe, DecodeError> {
    decode_in(sq, wqe_cnt, pi, true)
}

fn decode_in(sq: &RingBuf<'_>, wqe_cnt: u32, pi: u32, ud: bool) -> Result<DecodedWqe, DecodeError> {
    let base = (pi & (wqe_cnt.max(1) - 1)) as usize * WQEBB;
    let seg = |k: usize| {
        let mut b = [0u8; 16];
        sq.read_wrapping(base + k * DS, &mut b);
        b
    };
    let c = decode_ctrl_seg(&seg(0));
    let (opcode, ds) = (c.opcode, c.ds);
    if (ds * DS as u32).div_ceil(WQEBB as u32) > wqe_cnt {
        return Err(DecodeError::BiggerThanRing { ds, wqe_cnt });
    }
    let atomic_op = matches!(opcode, WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA);
    let masked_size = if opcode.is_masked_atomic() {
        match AtomicSize::from_opmod(c.opmod) {
            Some(s) => Some(s),
            None => {
                return Err(DecodeError::BadOpmod {
                    opcode: opcode.0,
                    opmod: c.opmod,
                })
            }
        }
    } else {
        None
    };
    // Operand segments: 1 for the plain atomics, 1 or 2 for a masked one.
    let operands = match masked_size {
        Some(AtomicSize::B8) if opcode == WqeOpcode::ATOMIC_MASKED_CS => 2,
        Some(_) => 1,
        None => atomic_op as u32,
    };
    let raddr = opcode.has_raddr() as u32;
    let av = if ud {
        (super::DATAGRAM_SEG / DS) as u32
    } else {
        0
    };
    let min = 1 + av + raddr + if operands > 0 { operands + 1 } else { 0 };
    if ds < min {
        return Err(DecodeError::TooFewDs {
            ds,
            opcode: opcode.0,
            min,
        });
    }
    let remote = (raddr == 1).then(|| decode_raddr_seg(&seg(1 + av as usize)));
    let first = 1 + av as usize + raddr as usize + operands as usize;
    let atomic = atomic_op.then(|| decode_atomic_seg(&seg(first - 1)));
    let masked = masked_size.map(|size| {
        let ops = 1 + av as usize + raddr as usize;
        decode_masked_atomic(opcode, size, [&seg(ops), &seg(ops + 1)])
    });
    let rest = ds - first as u32;
    let payload = if rest == 0 {
        DecodedPayload::None
    } else {
        let p = seg(first);
        let inline = decode_inline_hdr([p[0], p[1], p[2], p[3]]).filter(|_| operands == 0);
        if let Some(len) = inline {
            if inline_ds(len as usize) > rest {
                return Err(DecodeError::InlineOverrun { len, ds });
            }
            DecodedPayload::Inline {
                off: (base + first * DS + 4) % sq.len(),
                len,
            }
        } else {
            DecodedPayload::Sges {
                first: (base + first * DS) % sq.len(),
                count: rest,
            }
        }
    };
    Ok(DecodedWqe {
        opcode,
        opmod: c.opmod,
        wqe_idx: c.wqe_idx,
        qpn: c.qpn,
        ds,
        flags: c.flags,
        imm: c.imm,
        remote,
        atomic,
        masked,
        payload,
        datagram: ud.then(|| (base + DS) % sq.len()),
    })
}
