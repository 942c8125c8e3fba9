//! Backend-neutral work requests: SGEs, send and receive WRs.

use super::ah::Ah;
use super::error::Result;
use super::keys::{Lkey, RemoteAddr};
use super::mr::Mr;
use std::marker::PhantomData;

/// A scatter/gather entry inside a registered memory region (checked when
/// made). It borrows the [`Mr`], so the memory is live whenever a work request
/// naming it is posted (inline payloads are copied from it at post time).
// (`repr(C)`: `lkey` and then `len` in one 8-byte word, whose byte swap is
// bytes 0..8 of the `struct mlx5_wqe_data_seg`, `byte_count` then `lkey`,
// so the in-place posts load it once.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Sge<'mr> {
    pub(crate) addr: u64,
    pub(crate) lkey: Lkey,
    pub(crate) len: u32,
    /// The memory is a [`LocalMr`](crate::LocalMr) the WR owns: an inline
    /// copy reads it plainly (else with atomic loads, as a peer may write it).
    pub(crate) plain: bool,
    /// The PD of its MR (posted only on a QP of that PD), with
    /// [`NOT_ONE_SEG`] set when `len` is not 1 to 2^31 - 1 bytes (what one
    /// `struct mlx5_wqe_data_seg` carries): so the in-place posts check
    /// the PD and the length with one compare ([`Self::one_seg_on`]), the
    /// length having been looked at once, when the SGE was made.
    pd_tag: u32,
    _mr: PhantomData<&'mr Mr>,
}

/// Bit 31 of an [`Sge`]'s PD tag: its length is 0 or 2^31 bytes or more.
/// PD ids are below 2^31 (`PdInner::next_id`).
pub(crate) const NOT_ONE_SEG: u32 = 1 << 31;

/// The PD tag of an SGE of `len` bytes on PD `pd`.
#[inline(always)]
const fn pd_tag(pd: u32, len: u32) -> u32 {
    if len.wrapping_sub(1) >= NOT_ONE_SEG - 1 {
        pd | NOT_ONE_SEG
    } else {
        pd
    }
}

impl<'mr> Sge<'mr> {
    /// `len` bytes at byte `offset` of `mr`; refused if it does not fit in `mr`.
    pub fn new(mr: &'mr Mr, offset: usize, len: u32) -> Result<Sge<'mr>> {
        mr.check_range(offset, len as usize)?;
        Ok(Sge {
            addr: mr.addr() + offset as u64,
            len,
            lkey: mr.lkey(),
            plain: false,
            pd_tag: pd_tag(mr.pd(), len),
            _mr: PhantomData,
        })
    }

    /// Plain bytes of any memory as the payload of an **inline** send
    /// (`IBV_SEND_INLINE`): the bytes are copied into the WQE while
    /// `post_send` runs, so they need no registration, as with verbs, where
    /// an inline WR's lkeys are ignored. The copy is a plain `memcpy`,
    /// where an [`Mr`]'s bytes (which a peer may write meanwhile) are read
    /// one atomic byte at a time. A WR that is not inline, and every
    /// receive, refuses it with [`Error::BytesSge`](crate::Error::BytesSge).
    ///
    /// Errors: [`Error::LengthOverflow`](crate::Error::LengthOverflow) for 2^31 bytes or
    /// more (no inline payload is near that: see `QpConfig::max_inline`).
    pub fn bytes(data: &'mr [u8]) -> Result<Sge<'mr>> {
        if data.len() >= 1 << 31 {
            return Err(crate::Error::LengthOverflow {
                len: data.len() as u64,
                max: (1 << 31) - 1,
            });
        }
        Ok(Sge {
            addr: data.as_ptr() as u64,
            len: data.len() as u32,
            lkey: Lkey(0),
            plain: true,
            pd_tag: pd_tag(BYTES_PD, data.len() as u32),
            _mr: PhantomData,
        })
    }

    /// An SGE over a [`LocalMr`](crate::LocalMr)'s range (checked by the
    /// caller), for the owned posts; the buffer moves into the QP with it.
    pub(crate) fn owned(buf: &crate::ib::mr::LocalMr, offset: usize, len: u32) -> Sge<'_> {
        Sge {
            addr: buf.addr() + offset as u64,
            len,
            lkey: buf.lkey(),
            plain: true,
            pd_tag: pd_tag(buf.pd(), len),
            _mr: PhantomData,
        }
    }
    /// The virtual address of its first byte (`ibv_sge.addr`).
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// Its length in bytes (`ibv_sge.length`).
    pub fn len(&self) -> u32 {
        self.len
    }
    /// Whether it has zero bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The lkey of its MR (`ibv_sge.lkey`; 0 for [`Sge::bytes`]).
    pub fn lkey(&self) -> Lkey {
        self.lkey
    }
    /// The PD of its MR ([`BYTES_PD`] for [`Self::bytes`]).
    #[inline(always)]
    pub(crate) fn pd(&self) -> u32 {
        self.pd_tag & !NOT_ONE_SEG
    }
    /// Whether it is on PD `pd` and fits one data segment (1 to 2^31 - 1
    /// bytes): one compare.
    #[inline(always)]
    pub(crate) fn one_seg_on(&self, pd: u32) -> bool {
        self.pd_tag == pd
    }
}

/// The PD id an [`Sge::bytes`] carries: no PD has it
/// (`PdInner::next_id` never hands it out), so no WR that is not inline
/// takes it.
pub(crate) const BYTES_PD: u32 = !NOT_ONE_SEG;

/// What a send work request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrOp {
    /// RDMA WRITE of the gather list to `remote`.
    RdmaWrite {
        /// The peer's address and rkey (`wr.rdma`); the rkey's MR needs REMOTE_WRITE.
        remote: RemoteAddr,
    },
    /// RDMA WRITE, then a completion with `imm` at the responder (consumes a receive).
    RdmaWriteWithImm {
        /// The peer's address and rkey (`wr.rdma`); the rkey's MR needs REMOTE_WRITE.
        remote: RemoteAddr,
        /// The immediate, host order (sent big-endian, as `imm_data`).
        imm: u32,
    },
    /// SEND of the gather list into the peer's next receive buffer.
    Send,
    /// SEND with immediate data (the receiver's completion carries `imm`).
    SendWithImm {
        /// The immediate, host order (sent big-endian, as `imm_data`).
        imm: u32,
    },
    /// RDMA READ from `remote` into the scatter list.
    RdmaRead {
        /// The peer's address and rkey (`wr.rdma`); the rkey's MR needs REMOTE_READ.
        remote: RemoteAddr,
    },
    /// If the 8-byte-aligned u64 at `remote` equals `compare`, replace it with
    /// `swap`; the old value lands in the (8-byte) local SGE, host byte order.
    AtomicCmpSwp {
        /// The peer's 8-byte-aligned address and rkey (`wr.atomic`); the
        /// rkey's MR needs REMOTE_ATOMIC.
        remote: RemoteAddr,
        /// The value expected (`wr.atomic.compare_add`).
        compare: u64,
        /// The value stored on a match (`wr.atomic.swap`).
        swap: u64,
    },
    /// Add `add` to the 8-byte-aligned u64 at `remote`; the old value lands in
    /// the (8-byte) local SGE, host byte order.
    AtomicFetchAdd {
        /// The peer's 8-byte-aligned address and rkey (`wr.atomic`); the
        /// rkey's MR needs REMOTE_ATOMIC.
        remote: RemoteAddr,
        /// The addend, wrapping (`wr.atomic.compare_add`).
        add: u64,
    },
    /// UD: a SEND (with immediate data when `imm` is `Some`) to the
    /// destination in [`SendWr::ud`] ([`SendWr::ud_send`] makes both).
    UdSend {
        /// The immediate, host order (`IBV_WR_SEND_WITH_IMM` when `Some`).
        imm: Option<u32>,
    },
}

/// Where a UD send goes: an address handle, the remote QP number and the
/// qkey the remote QP expects (IB spec 9.8.4). A `qkey` with bit 31 set
/// stands for the sending QP's own qkey (a controlled qkey, IB spec C10-15).
/// The qkey travels out of band: the exchange (`rdma_direct::exchange`)
/// does not carry one, so both sides agree on it (perftest uses
/// 0x11111111) or send it in their own protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdDest<'a> {
    /// The address handle: the path to the destination's port (`wr.ud.ah`).
    pub ah: &'a Ah,
    /// The destination QPN, 24 bits (`wr.ud.remote_qpn`).
    pub remote_qpn: u32,
    /// The qkey the destination QP expects (`wr.ud.remote_qkey`).
    pub qkey: u32,
}

bitflags::bitflags! {
    /// The flags of a WR posted by one of [`Qp`](crate::Qp)'s one-opcode
    /// posts ([`Qp::post_write`](crate::Qp::post_write),
    /// [`Qp::post_write_inline`](crate::Qp::post_write_inline)): the
    /// `signaled`, `solicited` and `fence` of a [`SendWr`]. The values are
    /// the mlx5 ctrl segment's `fm_ce_se` bits (byte 11 of `struct
    /// mlx5_wqe_ctrl_seg`, rdma-core `mlx5dv.h`), so the direct path stores
    /// them as they are; the verbs path maps them to `IBV_SEND_*`.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct SendFlags: u8 {
        /// Generate a completion (`IBV_SEND_SIGNALED`; mlx5
        /// `MLX5_WQE_CTRL_CQ_UPDATE`, 0x08).
        const SIGNALED = 0x08;
        /// Ask for a solicited event at the responder (`IBV_SEND_SOLICITED`;
        /// mlx5 `MLX5_WQE_CTRL_SOLICITED`, 0x02).
        const SOLICITED = 0x02;
        /// Start only after every earlier RDMA READ and atomic of this QP
        /// has completed (`IBV_SEND_FENCE`; mlx5 `MLX5_WQE_CTRL_FENCE`, 0x80).
        const FENCE = 0x80;
    }
}

/// One RDMA WRITE of one SGE, for [`Qp::post_writes`](crate::Qp::post_writes):
/// what `SendWr::rdma_write(wr_id, &[sge], remote)` with `flags` is, in a
/// form that needs no decoding.
#[derive(Clone, Copy, Debug)]
pub struct WriteWr<'a> {
    /// Returned in the completion's [`Completion::wr_id`](crate::Completion::wr_id).
    pub wr_id: u64,
    /// The local bytes written: an SGE of an [`Mr`] on the QP's PD.
    pub sge: Sge<'a>,
    /// The peer's address and rkey; the rkey's MR needs REMOTE_WRITE.
    pub remote: RemoteAddr,
    /// Signaled, solicited, fence.
    pub flags: SendFlags,
}

impl<'a> WriteWr<'a> {
    /// An unsignaled WRITE of `sge` to `remote`.
    pub fn new(wr_id: u64, sge: Sge<'a>, remote: RemoteAddr) -> Self {
        WriteWr {
            wr_id,
            sge,
            remote,
            flags: SendFlags::empty(),
        }
    }

    /// The same WR, signaled.
    pub fn signaled(mut self) -> Self {
        self.flags |= SendFlags::SIGNALED;
        self
    }

    /// The [`SendWr`] that posts the same WRITE.
    pub fn to_send_wr(&self) -> SendWr<'_> {
        SendWr::rdma_write(self.wr_id, std::slice::from_ref(&self.sge), self.remote)
            .with_flags(self.flags)
    }
}

/// Send WRs read one at a time, by index: a `[SendWr]`, or a `[WriteWr]`
/// whose `SendWr`s are made as they are read, so that a batch of those
/// reaches the checked path with no copy into a buffer of its own.
pub(crate) trait SendWrs {
    fn count(&self) -> usize;
    fn wr(&self, i: usize) -> SendWr<'_>;
}

impl SendWrs for [SendWr<'_>] {
    #[inline]
    fn count(&self) -> usize {
        self.len()
    }
    #[inline]
    fn wr(&self, i: usize) -> SendWr<'_> {
        self[i]
    }
}

impl SendWrs for [WriteWr<'_>] {
    #[inline]
    fn count(&self) -> usize {
        self.len()
    }
    #[inline]
    fn wr(&self, i: usize) -> SendWr<'_> {
        self[i].to_send_wr()
    }
}

/// One send work request (`ibv_send_wr` without the linked list).
///
/// `repr(C)`: the four flags are adjacent bytes in declaration order, so
/// the direct path reads them with one load (`SendWr::ctrl_bits`).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct SendWr<'a> {
    /// Returned in the completion's [`Completion::wr_id`](crate::Completion::wr_id).
    pub wr_id: u64,
    /// The operation and its remote operands (`opcode`, `wr.rdma`, `wr.atomic`).
    pub op: WrOp,
    /// The gather list (the scatter list for READ and atomics); at most
    /// the QP's `max_send_sge` entries.
    pub sges: &'a [Sge<'a>],
    /// Generate a completion (`IBV_SEND_SIGNALED`, mlx5 CQ_UPDATE).
    pub signaled: bool,
    /// Copy the payload into the WQE at post time (`IBV_SEND_INLINE`), up
    /// to [`Qp::max_inline`](crate::Qp::max_inline) bytes: the SGEs may
    /// then name any memory, [`Sge::bytes`] included (copied plainly; an
    /// [`Mr`]'s bytes are read one atomic byte at a time).
    pub inline: bool,
    /// Ask for a solicited event at the responder (`IBV_SEND_SOLICITED`,
    /// mlx5 ctrl `SOLICITED`): its CQE carries the `se` bit, which wakes a CQ
    /// armed for solicited completions only. SEND and WRITE_WITH_IMM.
    pub solicited: bool,
    /// Start only after every earlier RDMA READ and atomic of this QP has
    /// completed (`IBV_SEND_FENCE`, mlx5 ctrl `FENCE`).
    pub fence: bool,
    /// The destination of a [`WrOp::UdSend`] (read with that op only).
    pub ud: Option<UdDest<'a>>,
}

impl<'a> SendWr<'a> {
    /// A UD SEND of `sges` to `dest` (with immediate data when `imm` is
    /// `Some`), unsignaled, not inline. Posting it takes at most the port's
    /// active MTU of payload (`Qp::post_send` returns
    /// [`Error::MessageTooLong`](crate::Error::MessageTooLong) otherwise);
    /// the receiver's buffer needs 40 bytes more, for the GRH (a smaller one
    /// fails: a local length error, or on rxe 6.1 a local QP operation
    /// error, and the receiving QP goes to ERR).
    pub fn ud_send(wr_id: u64, sges: &'a [Sge<'a>], dest: UdDest<'a>, imm: Option<u32>) -> Self {
        SendWr {
            op: WrOp::UdSend { imm },
            ud: Some(dest),
            ..SendWr::send(wr_id, sges)
        }
    }

    /// An RDMA WRITE of `sges` to `remote`, unsignaled, not inline.
    pub fn rdma_write(wr_id: u64, sges: &'a [Sge<'a>], remote: RemoteAddr) -> Self {
        SendWr {
            wr_id,
            op: WrOp::RdmaWrite { remote },
            sges,
            signaled: false,
            inline: false,
            solicited: false,
            fence: false,
            ud: None,
        }
    }
    /// A SEND of `sges`, unsignaled, not inline.
    pub fn send(wr_id: u64, sges: &'a [Sge<'a>]) -> Self {
        SendWr {
            wr_id,
            op: WrOp::Send,
            sges,
            signaled: false,
            inline: false,
            solicited: false,
            fence: false,
            ud: None,
        }
    }

    /// A SEND with immediate data; `imm` reaches the receiver as the same `u32`.
    pub fn send_with_imm(wr_id: u64, sges: &'a [Sge<'a>], imm: u32) -> Self {
        SendWr {
            wr_id,
            op: WrOp::SendWithImm { imm },
            sges,
            signaled: false,
            inline: false,
            solicited: false,
            fence: false,
            ud: None,
        }
    }

    /// An RDMA WRITE with immediate data (consumes a receive at the peer).
    pub fn rdma_write_with_imm(
        wr_id: u64,
        sges: &'a [Sge<'a>],
        remote: RemoteAddr,
        imm: u32,
    ) -> Self {
        SendWr {
            wr_id,
            op: WrOp::RdmaWriteWithImm { remote, imm },
            sges,
            signaled: false,
            inline: false,
            solicited: false,
            fence: false,
            ud: None,
        }
    }

    /// An RDMA READ of `remote` into `sges`, unsignaled.
    pub fn rdma_read(wr_id: u64, sges: &'a [Sge<'a>], remote: RemoteAddr) -> Self {
        SendWr {
            wr_id,
            op: WrOp::RdmaRead { remote },
            sges,
            signaled: false,
            inline: false,
            solicited: false,
            fence: false,
            ud: None,
        }
    }

    /// A compare-and-swap on the u64 at `remote`; the old value goes to `old` (one 8-byte SGE).
    pub fn atomic_cmp_swp(
        wr_id: u64,
        old: &'a [Sge<'a>],
        remote: RemoteAddr,
        compare: u64,
        swap: u64,
    ) -> Self {
        SendWr {
            wr_id,
            op: WrOp::AtomicCmpSwp {
                remote,
                compare,
                swap,
            },
            sges: old,
            signaled: false,
            inline: false,
            solicited: false,
            fence: false,
            ud: None,
        }
    }

    /// A fetch-and-add on the u64 at `remote`; the old value goes to `old` (one 8-byte SGE).
    pub fn atomic_fetch_add(wr_id: u64, old: &'a [Sge<'a>], remote: RemoteAddr, add: u64) -> Self {
        SendWr {
            wr_id,
            op: WrOp::AtomicFetchAdd { remote, add },
            sges: old,
            signaled: false,
            inline: false,
            solicited: false,
            fence: false,
            ud: None,
        }
    }

    /// See [`SendWr::signaled`](#structfield.signaled).
    pub fn signaled(mut self) -> Self {
        self.signaled = true;
        self
    }
    /// See [`SendWr::inline`](#structfield.inline).
    pub fn inline(mut self) -> Self {
        self.inline = true;
        self
    }
    /// See [`SendWr::solicited`](#structfield.solicited).
    pub fn solicited(mut self) -> Self {
        self.solicited = true;
        self
    }
    /// See [`SendWr::fence`](#structfield.fence).
    pub fn fence(mut self) -> Self {
        self.fence = true;
        self
    }
    /// The mlx5 ctrl segment's `fm_ce_se` bits of `signaled` (CQ_UPDATE,
    /// 0x08), `solicited` (SOLICITED, 0x02) and `fence` (FENCE, 0x80).
    ///
    /// The four flags, read as one little-endian word, hold `signaled` in
    /// bit 0, `solicited` in bit 16 and `fence` in bit 24; one multiply
    /// moves them to bits 27, 25 and 31 (the other products land outside
    /// bits 24..32 and no two overlap, so nothing carries), and the top
    /// byte is the answer: four instructions where testing each flag takes
    /// thirteen. The result does not depend on the layout, only its speed.
    #[inline(always)]
    pub(crate) fn ctrl_bits(&self) -> u8 {
        let v = u32::from_le_bytes([
            self.signaled as u8,
            self.inline as u8,
            self.solicited as u8,
            self.fence as u8,
        ]);
        let m = (v & 0x0101_0001) as u64;
        ((m * ((1 << 27) | (1 << 9) | (1 << 7))) >> 24) as u8
    }

    /// This WR with `signaled`, `solicited` and `fence` as `f` says.
    pub(crate) fn with_flags(mut self, f: SendFlags) -> Self {
        self.signaled = f.contains(SendFlags::SIGNALED);
        self.solicited = f.contains(SendFlags::SOLICITED);
        self.fence = f.contains(SendFlags::FENCE);
        self
    }

    pub(crate) fn total_len(&self) -> u64 {
        self.sges.iter().map(|s| s.len as u64).sum()
    }
}

/// One receive work request (`ibv_recv_wr` without the linked list): the
/// buffers the next incoming SEND (or nothing, for RDMA WRITE with immediate) fills.
#[derive(Clone, Copy, Debug)]
pub struct RecvWr<'a> {
    /// Returned in the completion's [`Completion::wr_id`](crate::Completion::wr_id).
    pub wr_id: u64,
    /// The scatter list, filled in order; at most the QP's (or SRQ's)
    /// `max_recv_sge` entries.
    pub sges: &'a [Sge<'a>],
}

impl<'a> RecvWr<'a> {
    /// A receive of `sges`, completing with `wr_id`.
    pub fn new(wr_id: u64, sges: &'a [Sge<'a>]) -> Self {
        RecvWr { wr_id, sges }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ib::keys::{RemoteAddr, Rkey};

    #[test]
    fn ctrl_bits_are_the_three_flags_whatever_inline_is() {
        let to = RemoteAddr {
            addr: 0,
            rkey: Rkey(0),
        };
        for k in 0..16u8 {
            let mut w = SendWr::rdma_write(0, &[], to);
            (w.signaled, w.inline, w.solicited, w.fence) =
                (k & 1 != 0, k & 2 != 0, k & 4 != 0, k & 8 != 0);
            let want =
                (w.signaled as u8 * 0x08) | (w.solicited as u8 * 0x02) | (w.fence as u8 * 0x80);
            assert_eq!(w.ctrl_bits(), want, "flags {k:#06b}");
        }
    }

    /// The PD tag: the PD alone for 1 to 2^31 - 1 bytes, with
    /// `NOT_ONE_SEG` for 0 and for 2^31 or more, so that `one_seg_on` is
    /// both checks in one compare; `pd` is the PD either way.
    #[test]
    fn the_pd_tag_says_pd_and_one_data_segment() {
        for (len, one) in [
            (0, false),
            (1, true),
            (4096, true),
            ((1 << 31) - 1, true),
            (1 << 31, false),
            (u32::MAX, false),
        ] {
            let s = Sge {
                addr: 0x1000,
                lkey: Lkey(7),
                len,
                plain: false,
                pd_tag: pd_tag(5, len),
                _mr: PhantomData,
            };
            assert_eq!(s.pd(), 5, "len {len}");
            assert_eq!(s.one_seg_on(5), one, "len {len}");
            assert!(!s.one_seg_on(6), "len {len}");
        }
        let b = Sge::bytes(&[1, 2, 3]).unwrap();
        assert_eq!(b.pd(), BYTES_PD);
        assert!(!Sge::bytes(&[]).unwrap().one_seg_on(BYTES_PD));
    }
}
