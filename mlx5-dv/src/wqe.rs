//! Send WQE encoding: ctrl, remote-address, data and inline segments, and the
//! writer that places one whole WQE into an SQ ring at producer index `pi`.
//!
//! Layouts (`docs/prm-notes.md`; rdma-core `mlx5dv.h`
//! `struct mlx5_wqe_ctrl_seg` / `mlx5_wqe_raddr_seg` / `mlx5_wqe_data_seg` /
//! `mlx5_wqe_inline_seg`, `providers/mlx5/qp.c` `_mlx5_post_send`), all big-endian:
//!
//! ```text
//! ctrl   0: opmod<<24 | wqe_idx<<8 | opcode   4: qpn<<8 | ds   8: signature, rsvd, rsvd
//!       11: fm_ce_se                         12: immediate
//! raddr  0: remote address (8)    8: rkey (4)    12: reserved 0 (4)
//! data   0: byte_count (4)        4: lkey (4)     8: local address (8)
//! inline 0: 0x80000000 | len (4)  4: bytes..., padded to a multiple of 16
//! ```

use crate::prm::{CtrlFlags, WqeOpcode, DS, INLINE_SEG, MAX_DS, WQEBB};
use crate::ring::RingBuf;

/// One scatter/gather entry as it goes into a data segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataSeg {
    /// Local virtual address.
    pub addr: u64,
    /// Length in bytes. Zero-length entries are left out of the WQE (as rdma-core does).
    pub len: u32,
    /// Local key of the memory region holding `addr..addr+len`.
    pub lkey: u32,
}

/// The remote side of an RDMA operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteSeg {
    pub addr: u64,
    pub rkey: u32,
}

/// Where the WQE's payload comes from.
#[derive(Clone, Copy, Debug)]
pub enum Payload<'a> {
    /// Gathered by the device from registered memory.
    Sges(&'a [DataSeg]),
    /// Copied into the WQE itself (inline segment).
    Inline(&'a [u8]),
}

/// One send WQE to encode.
#[derive(Clone, Copy, Debug)]
pub struct SendWqe<'a> {
    pub opcode: WqeOpcode,
    pub flags: CtrlFlags,
    /// Immediate data as the application means it; written big-endian, so the
    /// responder's CQE returns the same `u32`.
    pub imm: u32,
    pub remote: Option<RemoteSeg>,
    pub payload: Payload<'a>,
}

/// The fixed facts of one send queue that the encoder needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqGeometry {
    /// SQ size in WQEBBs (`mlx5dv_qp.sq.wqe_cnt`), a power of two.
    pub wqe_cnt: u32,
    /// QP number (24 bits).
    pub qpn: u32,
    /// Largest inline payload in bytes (the QP's `max_inline_data`).
    pub max_inline: u32,
    /// Largest WQE in WQEBBs (at most 16: the kernel caps a send WQE at 1 KiB).
    pub max_wqebbs: u32,
}

/// What writing a WQE did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    /// DS count in the ctrl segment (16-byte units).
    pub ds: u32,
    /// WQEBBs used (64-byte units).
    pub wqebbs: u32,
    /// Producer index for the next WQE.
    pub next_pi: u32,
}

/// Why a WQE was refused. Nothing was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WqeError {
    #[error("WQE needs {ds} DS; the ctrl segment's ds field holds at most 63")]
    TooManyDs { ds: u32 },
    #[error("WQE needs {wqebbs} WQEBBs; this QP's largest send WQE is {max} WQEBBs")]
    TooBig { wqebbs: u32, max: u32 },
    #[error("inline payload of {len} bytes exceeds this QP's max_inline_data of {max} bytes")]
    InlineTooLong { len: usize, max: u32 },
    #[error("scatter/gather lengths sum to {total} bytes, more than 2^31")]
    LengthOverflow { total: u64 },
    #[error("opcode {0:#04x} needs a remote address and rkey")]
    MissingRemote(u8),
    #[error("opcode {0:#04x} is not supported by this encoder")]
    UnsupportedOpcode(u8),
    #[error("WQE needs {need} WQEBBs; only {free} are free in the SQ")]
    QueueFull { need: u32, free: u32 },
    #[error("SQ geometry says {wqe_cnt} WQEBBs, but the ring holds {ring_len} bytes (need a power of two, times 64)")]
    BadGeometry { wqe_cnt: u32, ring_len: usize },
    #[error("the SQ already holds max_send_wr = {max_post} outstanding work requests")]
    WrLimit { max_post: u32 },
}

/// Encodes a ctrl segment (bytes 0..16 of every send WQE).
pub fn ctrl_seg(
    opcode: WqeOpcode,
    wqe_idx: u16,
    qpn: u32,
    ds: u32,
    flags: CtrlFlags,
    imm: u32,
) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[0..4].copy_from_slice(&(((wqe_idx as u32) << 8) | opcode.0 as u32).to_be_bytes());
    s[4..8].copy_from_slice(&(((qpn & 0xff_ffff) << 8) | (ds & 0x3f)).to_be_bytes());
    s[11] = flags.bits();
    s[12..16].copy_from_slice(&imm.to_be_bytes());
    s
}

/// Encodes a remote-address segment.
pub fn raddr_seg(r: RemoteSeg) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[0..8].copy_from_slice(&r.addr.to_be_bytes());
    s[8..12].copy_from_slice(&r.rkey.to_be_bytes());
    s
}

/// Encodes a data segment.
pub fn data_seg(d: DataSeg) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[0..4].copy_from_slice(&d.len.to_be_bytes());
    s[4..8].copy_from_slice(&d.lkey.to_be_bytes());
    s[8..16].copy_from_slice(&d.addr.to_be_bytes());
    s
}

/// DS count of an inline segment carrying `len` bytes: `ceil((len + 4) / 16)`.
pub fn inline_ds(len: usize) -> u32 {
    (len + 4).div_ceil(DS) as u32
}

/// Validates `wqe` against `geo` and returns `(ds, wqebbs)` without writing anything.
pub fn wqe_size(geo: &SqGeometry, wqe: &SendWqe<'_>) -> Result<(u32, u32), WqeError> {
    let op = wqe.opcode;
    if !matches!(
        op,
        WqeOpcode::RDMA_WRITE
            | WqeOpcode::RDMA_WRITE_IMM
            | WqeOpcode::SEND
            | WqeOpcode::SEND_IMM
            | WqeOpcode::NOP
    ) {
        return Err(WqeError::UnsupportedOpcode(op.0));
    }
    let mut ds = 1u32;
    if op.has_raddr() {
        if wqe.remote.is_none() {
            return Err(WqeError::MissingRemote(op.0));
        }
        ds += 1;
    }
    match wqe.payload {
        Payload::Inline(bytes) => {
            if bytes.len() > geo.max_inline as usize {
                return Err(WqeError::InlineTooLong {
                    len: bytes.len(),
                    max: geo.max_inline,
                });
            }
            if !bytes.is_empty() {
                ds += inline_ds(bytes.len());
            }
        }
        Payload::Sges(sges) => {
            let total: u64 = sges.iter().map(|s| s.len as u64).sum();
            if total > 1 << 31 {
                return Err(WqeError::LengthOverflow { total });
            }
            let n = sges.iter().filter(|s| s.len != 0).count();
            ds = ds.saturating_add(n.min(u32::MAX as usize) as u32);
        }
    }
    if ds > MAX_DS {
        return Err(WqeError::TooManyDs { ds });
    }
    let wqebbs = (ds * DS as u32).div_ceil(WQEBB as u32);
    let max = geo.max_wqebbs.min(geo.wqe_cnt);
    if wqebbs > max {
        return Err(WqeError::TooBig { wqebbs, max });
    }
    Ok((ds, wqebbs))
}

/// Writes one whole send WQE into `sq` at producer index `pi`.
///
/// `sq` is the SQ buffer (`geo.wqe_cnt * 64` bytes); the WQE starts at byte
/// `(pi & (wqe_cnt - 1)) * 64`, and segments or inline bytes that reach the end
/// of the buffer continue at its start. `free` is the number of WQEBBs the caller
/// knows to be free. On error nothing is written.
pub fn write_send_wqe(
    sq: &mut RingBuf<'_>,
    geo: &SqGeometry,
    pi: u32,
    wqe: &SendWqe<'_>,
    free: u32,
) -> Result<Written, WqeError> {
    if !geo.wqe_cnt.is_power_of_two() || sq.len() != geo.wqe_cnt as usize * WQEBB {
        return Err(WqeError::BadGeometry {
            wqe_cnt: geo.wqe_cnt,
            ring_len: sq.len(),
        });
    }
    let (ds, wqebbs) = wqe_size(geo, wqe)?;
    if wqebbs > free {
        return Err(WqeError::QueueFull { need: wqebbs, free });
    }
    let base = (pi & (geo.wqe_cnt - 1)) as usize * WQEBB;
    sq.write_seg(
        base,
        &ctrl_seg(wqe.opcode, pi as u16, geo.qpn, ds, wqe.flags, wqe.imm),
    );
    let mut off = base + DS;
    if let (true, Some(r)) = (wqe.opcode.has_raddr(), wqe.remote) {
        sq.write_seg(off, &raddr_seg(r));
        off += DS;
    }
    match wqe.payload {
        Payload::Inline(bytes) if !bytes.is_empty() => {
            sq.write_wrapping(off, &(bytes.len() as u32 | INLINE_SEG).to_be_bytes());
            sq.write_wrapping(off + 4, bytes);
        }
        Payload::Inline(_) => {}
        Payload::Sges(sges) => {
            for s in sges.iter().filter(|s| s.len != 0) {
                sq.write_seg(off, &data_seg(*s));
                off += DS;
            }
        }
    }
    Ok(Written {
        ds,
        wqebbs,
        next_pi: pi.wrapping_add(wqebbs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo8() -> SqGeometry {
        SqGeometry {
            wqe_cnt: 8,
            qpn: 0x1234,
            max_inline: 256,
            max_wqebbs: 16,
        }
    }

    /// The vector from the walking-skeleton issue : a 100-byte
    /// inline RDMA WRITE at pi 7 of an 8-WQEBB SQ wraps to the buffer's start.
    #[test]
    fn inline_write_wraps_the_ring() {
        let mut mem = vec![0xeeu8; 512];
        let mut sq = RingBuf::from_slice(&mut mem).unwrap();
        let payload: Vec<u8> = (0u8..100).collect();
        let wqe = SendWqe {
            opcode: WqeOpcode::RDMA_WRITE,
            flags: CtrlFlags::CQ_UPDATE,
            imm: 0,
            remote: Some(RemoteSeg {
                addr: 0xdead0000,
                rkey: 0xabc,
            }),
            payload: Payload::Inline(&payload),
        };
        let w = write_send_wqe(&mut sq, &geo8(), 7, &wqe, 8).unwrap();
        assert_eq!(
            w,
            Written {
                ds: 9,
                wqebbs: 3,
                next_pi: 10
            }
        );
        assert_eq!(
            &mem[448..464],
            &[0, 0, 7, 8, 0, 0x12, 0x34, 9, 0, 0, 0, 8, 0, 0, 0, 0]
        );
        assert_eq!(
            &mem[464..480],
            &[0, 0, 0, 0, 0xde, 0xad, 0, 0, 0, 0, 0x0a, 0xbc, 0, 0, 0, 0]
        );
        assert_eq!(&mem[480..484], &[0x80, 0, 0, 0x64]);
        assert_eq!(&mem[484..512], &payload[0..28]);
        assert_eq!(&mem[0..72], &payload[28..100]);
        // Bytes past the WQE (and before the ctrl segment) are untouched.
        assert!(mem[72..448].iter().all(|&b| b == 0xee));
        assert_eq!(
            crate::doorbell::sq_dbrec(w.next_pi).to_be_bytes(),
            [0, 0, 0, 0x0a]
        );
    }

    #[test]
    fn sge_write_layout_and_zero_length_sges_left_out() {
        let mut mem = vec![0u8; 512];
        let mut sq = RingBuf::from_slice(&mut mem).unwrap();
        let sges = [
            DataSeg {
                addr: 0x1000,
                len: 4096,
                lkey: 0x11,
            },
            DataSeg {
                addr: 0x9999,
                len: 0,
                lkey: 0x22,
            },
        ];
        let wqe = SendWqe {
            opcode: WqeOpcode::RDMA_WRITE,
            flags: CtrlFlags::empty(),
            imm: 0,
            remote: Some(RemoteSeg {
                addr: 0x2000,
                rkey: 0x33,
            }),
            payload: Payload::Sges(&sges),
        };
        let w = write_send_wqe(&mut sq, &geo8(), 0x10001, &wqe, 8).unwrap();
        assert_eq!(
            w,
            Written {
                ds: 3,
                wqebbs: 1,
                next_pi: 0x10002
            }
        );
        // wqe_idx is pi & 0xffff; slot is pi & 7 = 1.
        assert_eq!(&mem[64..72], &[0, 0, 0x01, 8, 0, 0x12, 0x34, 3]);
        assert_eq!(
            &mem[96..112],
            &[0, 0, 0x10, 0, 0, 0, 0, 0x11, 0, 0, 0, 0, 0, 0, 0x10, 0]
        );
        assert!(mem[112..128].iter().all(|&b| b == 0));
    }

    #[test]
    fn bad_input_writes_nothing() {
        let mut mem = vec![0x5au8; 512];
        let mut sq = RingBuf::from_slice(&mut mem).unwrap();
        let big = vec![0u8; 300];
        let sge = [DataSeg {
            addr: 0,
            len: 1,
            lkey: 0,
        }; 70];
        let huge = [DataSeg {
            addr: 0,
            len: u32::MAX,
            lkey: 0,
        }; 2];
        let cases: Vec<(SendWqe<'_>, WqeError)> = vec![
            (
                SendWqe {
                    opcode: WqeOpcode::RDMA_WRITE,
                    flags: CtrlFlags::empty(),
                    imm: 0,
                    remote: None,
                    payload: Payload::Inline(b"x"),
                },
                WqeError::MissingRemote(8),
            ),
            (
                SendWqe {
                    opcode: WqeOpcode::SEND,
                    flags: CtrlFlags::empty(),
                    imm: 0,
                    remote: None,
                    payload: Payload::Inline(&big),
                },
                WqeError::InlineTooLong { len: 300, max: 256 },
            ),
            (
                SendWqe {
                    opcode: WqeOpcode::SEND,
                    flags: CtrlFlags::empty(),
                    imm: 0,
                    remote: None,
                    payload: Payload::Sges(&sge),
                },
                WqeError::TooManyDs { ds: 71 },
            ),
            (
                SendWqe {
                    opcode: WqeOpcode::SEND,
                    flags: CtrlFlags::empty(),
                    imm: 0,
                    remote: None,
                    payload: Payload::Sges(&huge),
                },
                WqeError::LengthOverflow {
                    total: 2 * u32::MAX as u64,
                },
            ),
            (
                SendWqe {
                    opcode: WqeOpcode::SEND,
                    flags: CtrlFlags::empty(),
                    imm: 0,
                    remote: None,
                    payload: Payload::Sges(&sge[..20]),
                },
                WqeError::QueueFull { need: 6, free: 5 },
            ),
        ];
        for (wqe, want) in cases {
            assert_eq!(write_send_wqe(&mut sq, &geo8(), 3, &wqe, 5), Err(want));
        }
        assert!(mem.iter().all(|&b| b == 0x5a));
    }
}
