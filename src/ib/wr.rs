//! Backend-neutral work requests: SGEs, send and receive WRs.

use super::ah::Ah;
use super::error::Result;
use super::keys::{Lkey, RemoteAddr, Rkey};
use super::mr::Mr;
use super::mw::{Mw, MwBind};
use std::marker::PhantomData;

pub use mlx5_dv::wqe::AtomicSize;

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
    /// `len` bytes at byte `offset` of `mr`; refused if it does not fit in
    /// `mr` ([`Error::OutOfBounds`](crate::Error::OutOfBounds)), or `mr` has
    /// no CPU mapping ([`Error::NoCpuMapping`](crate::Error::NoCpuMapping):
    /// a DMA-BUF registration, whose SGEs [`Sge::of_dmabuf`] makes).
    pub fn new(mr: &'mr Mr, offset: usize, len: u32) -> Result<Sge<'mr>> {
        mr.check_cpu("Sge::new (an inline post would copy it through the CPU)")?;
        Self::in_mr(mr, offset, len)
    }

    /// [`Self::new`] without asking for a CPU mapping (the range checked).
    pub(crate) fn in_mr(mr: &'mr Mr, offset: usize, len: u32) -> Result<Sge<'mr>> {
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

/// What a send work request does: the opcode and its operands. Each
/// variant is one opcode of verbs (`ibv_send_wr.opcode`) and of the mlx5
/// ctrl segment (`MLX5_OPCODE_*`, rdma-core `mlx5dv.h`); [`SendWr`]'s
/// constructors make them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrOp<'a> {
    /// RDMA WRITE of the gather list to `remote` (`IBV_WR_RDMA_WRITE`,
    /// `MLX5_OPCODE_RDMA_WRITE` 0x08).
    RdmaWrite {
        /// The peer's address and rkey (`wr.rdma`); the rkey's MR needs REMOTE_WRITE.
        remote: RemoteAddr,
    },
    /// RDMA WRITE, then a completion with `imm` at the responder (consumes
    /// a receive) (`IBV_WR_RDMA_WRITE_WITH_IMM`, `MLX5_OPCODE_RDMA_WRITE_IMM` 0x09).
    RdmaWriteWithImm {
        /// The peer's address and rkey (`wr.rdma`); the rkey's MR needs REMOTE_WRITE.
        remote: RemoteAddr,
        /// The immediate, host order (sent big-endian, as `imm_data`).
        imm: u32,
    },
    /// SEND of the gather list into the peer's next receive buffer
    /// (`IBV_WR_SEND`, `MLX5_OPCODE_SEND` 0x0a).
    Send,
    /// SEND with immediate data (the receiver's completion carries `imm`)
    /// (`IBV_WR_SEND_WITH_IMM`, `MLX5_OPCODE_SEND_IMM` 0x0b).
    SendWithImm {
        /// The immediate, host order (sent big-endian, as `imm_data`).
        imm: u32,
    },
    /// RDMA READ from `remote` into the scatter list (`IBV_WR_RDMA_READ`,
    /// `MLX5_OPCODE_RDMA_READ` 0x10).
    RdmaRead {
        /// The peer's address and rkey (`wr.rdma`); the rkey's MR needs REMOTE_READ.
        remote: RemoteAddr,
    },
    /// If the 8-byte-aligned u64 at `remote` equals `compare`, replace it with
    /// `swap`; the old value lands in the (8-byte) local SGE, host byte order
    /// (`IBV_WR_ATOMIC_CMP_AND_SWP`, `MLX5_OPCODE_ATOMIC_CS` 0x11).
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
    /// the (8-byte) local SGE, host byte order (`IBV_WR_ATOMIC_FETCH_AND_ADD`,
    /// `MLX5_OPCODE_ATOMIC_FA` 0x12).
    AtomicFetchAdd {
        /// The peer's 8-byte-aligned address and rkey (`wr.atomic`); the
        /// rkey's MR needs REMOTE_ATOMIC.
        remote: RemoteAddr,
        /// The addend, wrapping (`wr.atomic.compare_add`).
        add: u64,
    },
    /// Masked compare-and-swap of the `size`-byte word at `remote` (aligned
    /// to `size`): if `(old ^ compare) & compare_mask == 0`, the word
    /// becomes `(old & !swap_mask) | (swap & swap_mask)`; the old value
    /// lands in the local SGE (exactly `size` bytes), 4 bytes big-endian, 8
    /// in host order ([`AtomicSize::old_value`] reads it). An mlx5
    /// extended atomic (`MLX5_OPCODE_ATOMIC_MASKED_CS` 0x14, ctrl opmod
    /// `8 | (log2(size) - 2)`; no verbs opcode posts it): the direct path
    /// only (the verbs path refuses it, [`Feature::MaskedAtomics`](crate::Feature::MaskedAtomics)).
    MaskedCmpSwap {
        /// The peer's address (aligned to `size`) and rkey; the rkey's MR
        /// needs REMOTE_ATOMIC.
        remote: RemoteAddr,
        /// The operand size: 4 or 8 bytes; every operand fits it.
        size: AtomicSize,
        /// The value compared with, under `compare_mask`.
        compare: u64,
        /// The bits compared (0: always a hit).
        compare_mask: u64,
        /// The value stored, under `swap_mask`.
        swap: u64,
        /// The bits of `swap` stored on a hit.
        swap_mask: u64,
    },
    /// Masked fetch-and-add of `add` to the `size`-byte word at `remote`
    /// (aligned to `size`), the sum cut into fields by `field_boundary`: a
    /// set bit marks the most significant bit of a field, whose carry is
    /// dropped (0: a plain wrapping add; all ones: XOR). The old value
    /// lands in the local SGE as [`Self::MaskedCmpSwap`]'s does
    /// (`MLX5_OPCODE_ATOMIC_MASKED_FA` 0x15). Direct path only.
    MaskedFetchAdd {
        /// The peer's address (aligned to `size`) and rkey; the rkey's MR
        /// needs REMOTE_ATOMIC.
        remote: RemoteAddr,
        /// The operand size: 4 or 8 bytes; both operands fit it.
        size: AtomicSize,
        /// The addend.
        add: u64,
        /// The fields' most significant bits.
        field_boundary: u64,
    },
    /// UD: a SEND to `dest` (`IBV_WR_SEND`, `MLX5_OPCODE_SEND` 0x0a, with
    /// the datagram segment), with immediate data when `imm` is `Some`
    /// (`IBV_WR_SEND_WITH_IMM`, `MLX5_OPCODE_SEND_IMM` 0x0b). The
    /// destination is part of the operation, so a UD send without one
    /// cannot be built:
    ///
    /// ```compile_fail
    /// # use rdma_direct::WrOp;
    /// let op: WrOp<'static> = WrOp::UdSend { imm: None }; // no `dest`
    /// ```
    UdSend {
        /// Where it goes (`wr.ud`).
        dest: UdDest<'a>,
        /// The immediate, host order (`IBV_WR_SEND_WITH_IMM` when `Some`).
        imm: Option<u32>,
    },
    /// Binds the type-2 window `mw` to `bind` (`IBV_WR_BIND_MW`; on mlx5 a
    /// UMR WQE, `MLX5_OPCODE_UMR` 0x25, 3 WQEBBs). The window must be free
    /// (never bound, or invalidated); it gives `mw` the next rkey
    /// (its variant byte plus one, [`Mw::rkey`]) as it is posted, and serves
    /// only this QP. No SGEs. Completes as `WcOpcode::BIND_MW`.
    BindMw {
        /// The window (type 2, of the QP's PD).
        mw: &'a Mw,
        /// What it maps.
        bind: MwBind<'a>,
    },
    /// Invalidates the type-2 window (or other key) `rkey` names
    /// (`IBV_WR_LOCAL_INV`; on mlx5 a zero-length UMR, 2 WQEBBs): later
    /// accesses through it are refused. No SGEs. Completes as
    /// `WcOpcode::LOCAL_INV`.
    LocalInv {
        /// The rkey to invalidate (`invalidate_rkey`).
        rkey: Rkey,
    },
    /// A SEND that also invalidates `rkey` at the responder
    /// (`IBV_WR_SEND_WITH_INV`, `MLX5_OPCODE_SEND_INVAL` 0x01, the rkey in
    /// the ctrl segment's immediate, big-endian): the responder's receive
    /// completion names it ([`Completion::invalidated_rkey`](crate::Completion::invalidated_rkey)).
    /// RC only; the rkey must name a type-2 window bound to the responding
    /// QP, else the responder refuses it (REM_INV_REQ_ERR here, and both
    /// QPs go to ERR).
    SendWithInv {
        /// The peer's rkey to invalidate.
        rkey: Rkey,
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

/// Where a DC initiator's WRs go ([`Qp::post_dc`](crate::Qp::post_dc)):
/// the path to the target's port (an address handle, as a UD send's), the
/// target's DCT number and the DC access key it was created with
/// ([`QpConfig::dc_key`](crate::QpConfig::dc_key)). The WQE carries them
/// in its 48-byte datagram segment: the AH's address vector with
/// `dqp_dct` (bytes 8..12, big-endian) = `dctn | MLX5_EXTENDED_UD_AV` and
/// the key at bytes 0..8, big-endian (rdma-core
/// `mlx5_send_wr_set_dc_addr`, `providers/mlx5/qp.c`).
///
/// A DCT number or key that names no DCT in RTR is not refused at post
/// (the initiator cannot know): the WR completes in error on the DCI (the
/// sim's status: `WcStatus::RETRY_EXC_ERR`, its choice, unverified on
/// hardware) and the DCI goes to ERR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DcDest<'a> {
    /// The address handle: the path to the target's port.
    pub ah: &'a Ah,
    /// The target's DCT number, 24 bits
    /// ([`Qp::dct_number`](crate::Qp::dct_number) on its side).
    pub dctn: u32,
    /// The target's DC access key.
    pub key: u64,
}

bitflags::bitflags! {
    /// The flags of every send WR ([`SendWr::flags`], [`WriteWr::flags`],
    /// [`Qp::post_write_inline`](crate::Qp::post_write_inline)'s `flags`).
    ///
    /// **Not `IBV_SEND_*` values**: build them from these constants or the
    /// WR builders (`.signaled()`, ...), never from rdma-core's numbers
    /// (`IBV_SEND_SIGNALED` is 2, which is [`Self::SOLICITED`] here).
    ///
    /// The same as `ibv_send_wr.send_flags` but for `IBV_SEND_INLINE` (which is
    /// [`SendWr::inline`]: a choice of how the payload travels, not a
    /// flag of the WQE). The values are the mlx5 ctrl segment's `fm_ce_se`
    /// bits (byte 11 of `struct mlx5_wqe_ctrl_seg`, rdma-core `mlx5dv.h`
    /// `MLX5_WQE_CTRL_*`), so the direct path stores them as they are; the
    /// verbs path maps them to `IBV_SEND_*`. No other bit belongs in a WR:
    /// the builders' `with_flags` drop any (which only
    /// `SendFlags::from_bits_retain` makes), and so do the one-opcode posts,
    /// but a [`SendWr::flags`] assigned one directly would reach the ctrl
    /// segment as it is (the in-place `post_send` copies the byte unmasked:
    /// the mask cost it 2 instructions a WR, `scripts/insn-count`).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct SendFlags: u8 {
        /// Generate a completion (`IBV_SEND_SIGNALED`; mlx5
        /// `MLX5_WQE_CTRL_CQ_UPDATE`, 0x08).
        const SIGNALED = 0x08;
        /// Ask for a solicited event at the responder (`IBV_SEND_SOLICITED`;
        /// mlx5 `MLX5_WQE_CTRL_SOLICITED`, 0x02): its CQE carries the `se`
        /// bit, which wakes a CQ armed for solicited completions only. SEND
        /// and WRITE_WITH_IMM.
        const SOLICITED = 0x02;
        /// Start only after every earlier RDMA READ and atomic of this QP
        /// has completed (`IBV_SEND_FENCE`; mlx5 `MLX5_WQE_CTRL_FENCE`, 0x80).
        const FENCE = 0x80;
    }
}

impl SendFlags {
    /// The ctrl segment's `fm_ce_se` byte of these flags: their bits, less
    /// any not defined here (one AND).
    #[inline(always)]
    pub(crate) const fn ctrl_bits(self) -> u8 {
        self.bits() & Self::all().bits()
    }
}

/// One RDMA WRITE of one SGE (`IBV_WR_RDMA_WRITE`, `MLX5_OPCODE_RDMA_WRITE`
/// 0x08), for [`Qp::post_write`](crate::Qp::post_write) and
/// [`Qp::post_writes`](crate::Qp::post_writes): what
/// `SendWr::rdma_write(wr_id, &[sge], remote)` with `flags` is, in a form
/// that needs no decoding. Built as a [`SendWr`] is:
/// `WriteWr::new(wr_id, sge, remote).signaled()`.
///
/// Errors at post: those of [`Qp::post_write`](crate::Qp::post_write).
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
    /// An RDMA WRITE of `sge` to `remote`, no flags (unsignaled).
    pub fn new(wr_id: u64, sge: Sge<'a>, remote: RemoteAddr) -> Self {
        WriteWr {
            wr_id,
            sge,
            remote,
            flags: SendFlags::empty(),
        }
    }

    /// The same WR, signaled ([`SendFlags::SIGNALED`]).
    pub fn signaled(self) -> Self {
        self.with_flags(SendFlags::SIGNALED)
    }
    /// The same WR, solicited ([`SendFlags::SOLICITED`]).
    pub fn solicited(self) -> Self {
        self.with_flags(SendFlags::SOLICITED)
    }
    /// The same WR, fenced ([`SendFlags::FENCE`]).
    pub fn fence(self) -> Self {
        self.with_flags(SendFlags::FENCE)
    }
    /// The same WR with `f` added to its flags (any bit not defined in
    /// [`SendFlags`] dropped).
    pub fn with_flags(mut self, f: SendFlags) -> Self {
        self.flags |= f & SendFlags::all();
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
/// Every opcode is built the same way: its constructor takes the WR id and
/// the operands it needs ([`Self::rdma_write`], [`Self::send`],
/// [`Self::rdma_read`], [`Self::atomic_cmp_swp`],
/// [`Self::atomic_fetch_add`], [`Self::masked_cmp_swap`],
/// [`Self::masked_fetch_add`], [`Self::ud_send`]), and the optional ones
/// are chained: [`Self::signaled`], [`Self::solicited`], [`Self::fence`],
/// [`Self::with_flags`], [`Self::inline`], [`Self::imm`]. A constructor
/// makes an unsignaled WR, not inline, with no immediate.
/// (`SendWr::rdma_write(7, &sges, to).imm(0x1234).signaled()`.)
///
/// Errors at post are [`Qp::post_send`](crate::Qp::post_send)'s.
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    /// Returned in the completion's [`Completion::wr_id`](crate::Completion::wr_id).
    pub wr_id: u64,
    /// The operation and its operands (`opcode`, `imm_data`, `wr.rdma`,
    /// `wr.atomic`, `wr.ud`).
    pub op: WrOp<'a>,
    /// The gather list (the scatter list for READ and atomics); at most
    /// the QP's `max_send_sge` entries.
    pub sges: &'a [Sge<'a>],
    /// Signaled, solicited, fence (`send_flags`, the mlx5 ctrl segment's
    /// `fm_ce_se`, copied into it as they are: no bit but those three, see
    /// [`SendFlags`]).
    pub flags: SendFlags,
    /// Copy the payload into the WQE at post time (`IBV_SEND_INLINE`), up
    /// to [`Qp::max_inline`](crate::Qp::max_inline) bytes: the SGEs may
    /// then name any memory, [`Sge::bytes`] included (copied plainly; an
    /// [`Mr`]'s bytes are read one atomic byte at a time). WRITE and SEND
    /// only, with or without immediate, and UD SEND.
    pub inline: bool,
}

impl<'a> SendWr<'a> {
    /// `op` on `sges`, no flags, not inline.
    #[inline(always)]
    const fn of(wr_id: u64, op: WrOp<'a>, sges: &'a [Sge<'a>]) -> Self {
        SendWr {
            wr_id,
            op,
            sges,
            flags: SendFlags::empty(),
            inline: false,
        }
    }

    /// An RDMA WRITE of `sges` to `remote` (`IBV_WR_RDMA_WRITE`,
    /// `MLX5_OPCODE_RDMA_WRITE`; with [`Self::imm`],
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`, `MLX5_OPCODE_RDMA_WRITE_IMM`, which
    /// consumes a receive at the peer). `remote`'s MR needs REMOTE_WRITE.
    pub fn rdma_write(wr_id: u64, sges: &'a [Sge<'a>], remote: RemoteAddr) -> Self {
        Self::of(wr_id, WrOp::RdmaWrite { remote }, sges)
    }

    /// A SEND of `sges` into the peer's next receive buffer (`IBV_WR_SEND`,
    /// `MLX5_OPCODE_SEND`; with [`Self::imm`], `IBV_WR_SEND_WITH_IMM`,
    /// `MLX5_OPCODE_SEND_IMM`). RC and UC QPs; UD takes [`Self::ud_send`].
    pub fn send(wr_id: u64, sges: &'a [Sge<'a>]) -> Self {
        Self::of(wr_id, WrOp::Send, sges)
    }

    /// A UD SEND of `sges` to `dest` (`IBV_WR_SEND`, `MLX5_OPCODE_SEND`
    /// with the datagram segment; with [`Self::imm`],
    /// `IBV_WR_SEND_WITH_IMM`, `MLX5_OPCODE_SEND_IMM`), on a UD QP.
    /// Posting it takes at most the port's active MTU of payload
    /// (`Qp::post_send` returns
    /// [`Error::MessageTooLong`](crate::Error::MessageTooLong) otherwise)
    /// and an AH of the QP's PD; the receiver's buffer needs 40 bytes
    /// more, for the GRH (a smaller one fails: a local length error, or on
    /// rxe 6.1 a local QP operation error, and the receiving QP goes to ERR).
    pub fn ud_send(wr_id: u64, sges: &'a [Sge<'a>], dest: UdDest<'a>) -> Self {
        Self::of(wr_id, WrOp::UdSend { dest, imm: None }, sges)
    }

    /// An RDMA READ of `remote` into `sges` (`IBV_WR_RDMA_READ`,
    /// `MLX5_OPCODE_RDMA_READ`), on an RC QP; `remote`'s MR needs
    /// REMOTE_READ. Never inline.
    pub fn rdma_read(wr_id: u64, sges: &'a [Sge<'a>], remote: RemoteAddr) -> Self {
        Self::of(wr_id, WrOp::RdmaRead { remote }, sges)
    }

    /// A compare-and-swap on the 8-byte-aligned u64 at `remote`
    /// (`IBV_WR_ATOMIC_CMP_AND_SWP`, `MLX5_OPCODE_ATOMIC_CS`), on an RC QP:
    /// `swap` is stored if it holds `compare`; the old value goes to `old`
    /// (exactly one 8-byte SGE, host byte order). `remote`'s MR needs
    /// REMOTE_ATOMIC. Never inline.
    pub fn atomic_cmp_swp(
        wr_id: u64,
        old: &'a [Sge<'a>],
        remote: RemoteAddr,
        compare: u64,
        swap: u64,
    ) -> Self {
        let op = WrOp::AtomicCmpSwp {
            remote,
            compare,
            swap,
        };
        Self::of(wr_id, op, old)
    }

    /// A fetch-and-add of `add` (wrapping) on the 8-byte-aligned u64 at
    /// `remote` (`IBV_WR_ATOMIC_FETCH_AND_ADD`, `MLX5_OPCODE_ATOMIC_FA`), on
    /// an RC QP; the old value goes to `old` (exactly one 8-byte SGE, host
    /// byte order). `remote`'s MR needs REMOTE_ATOMIC. Never inline.
    pub fn atomic_fetch_add(wr_id: u64, old: &'a [Sge<'a>], remote: RemoteAddr, add: u64) -> Self {
        Self::of(wr_id, WrOp::AtomicFetchAdd { remote, add }, old)
    }

    /// A masked compare-and-swap ([`WrOp::MaskedCmpSwap`]) of the
    /// `size`-byte word at `remote`, on an RC QP (or a DCI) of the direct
    /// path: where `(old ^ compare) & compare_mask == 0` it stores `swap`'s
    /// bits under `swap_mask`; the old value goes to `old` (exactly one
    /// SGE of `size` bytes; [`AtomicSize::old_value`] reads it). `remote`
    /// is aligned to `size`, its MR has REMOTE_ATOMIC. Never inline.
    ///
    /// An 8-byte one is 80 bytes, two WQEBBs: the QP's largest WQE must
    /// hold it (`max_send_sge` 3 or more, or `max_inline` 29 or more, as
    /// rdma-core's `mlx5_calc_send_wqe` sizes an RC WQE; a DCI's always
    /// does), else [`Error::Wqe`](crate::Error::Wqe) (`TooBig`).
    ///
    /// Support: no verbs or mlx5dv query reports extended atomics (mlx5
    /// reports `masked_atomic_cap` NONE), so this is tried, not probed:
    /// the sim runs it; on ConnectX it is posted, and a device without
    /// extended atomics completes it in error; the verbs path refuses it
    /// with [`Error::Unsupported`](crate::Error::Unsupported)
    /// ([`Feature::MaskedAtomics`](crate::Feature::MaskedAtomics)).
    #[allow(clippy::too_many_arguments)]
    pub fn masked_cmp_swap(
        wr_id: u64,
        old: &'a [Sge<'a>],
        remote: RemoteAddr,
        size: AtomicSize,
        compare: u64,
        compare_mask: u64,
        swap: u64,
        swap_mask: u64,
    ) -> Self {
        let op = WrOp::MaskedCmpSwap {
            remote,
            size,
            compare,
            compare_mask,
            swap,
            swap_mask,
        };
        Self::of(wr_id, op, old)
    }

    /// A masked fetch-and-add ([`WrOp::MaskedFetchAdd`]) of `add` to the
    /// `size`-byte word at `remote`, no carry leaving a bit set in
    /// `field_boundary`; the old value goes to `old` (exactly one SGE of
    /// `size` bytes). As [`Self::masked_cmp_swap`] otherwise (one WQEBB for
    /// either size).
    pub fn masked_fetch_add(
        wr_id: u64,
        old: &'a [Sge<'a>],
        remote: RemoteAddr,
        size: AtomicSize,
        add: u64,
        field_boundary: u64,
    ) -> Self {
        let op = WrOp::MaskedFetchAdd {
            remote,
            size,
            add,
            field_boundary,
        };
        Self::of(wr_id, op, old)
    }

    /// Binds the type-2 window `mw` to `bind` ([`WrOp::BindMw`]): no SGEs.
    /// Checked at post ([`Error::MwRefused`](crate::Error::MwRefused)).
    pub fn bind_mw(wr_id: u64, mw: &'a Mw, bind: MwBind<'a>) -> Self {
        Self::of(wr_id, WrOp::BindMw { mw, bind }, &[])
    }

    /// Invalidates `rkey` locally ([`WrOp::LocalInv`]): no SGEs.
    pub fn local_inv(wr_id: u64, rkey: Rkey) -> Self {
        Self::of(wr_id, WrOp::LocalInv { rkey }, &[])
    }

    /// A SEND of `sges` that invalidates the peer's `rkey`
    /// ([`WrOp::SendWithInv`]).
    pub fn send_with_inv(wr_id: u64, sges: &'a [Sge<'a>], rkey: Rkey) -> Self {
        Self::of(wr_id, WrOp::SendWithInv { rkey }, sges)
    }

    /// The same WR carrying the immediate `imm` (host order; sent
    /// big-endian as `imm_data`, and the receiver's completion carries the
    /// same `u32`): a WRITE becomes `RdmaWriteWithImm`, a SEND
    /// `SendWithImm`, a UD SEND gets `imm: Some(imm)`; on one that already
    /// has one, `imm` replaces it.
    ///
    /// Panics on an RDMA READ, an atomic or a window or invalidate WR,
    /// which carry no immediate.
    pub fn imm(mut self, imm: u32) -> Self {
        self.op = match self.op {
            WrOp::RdmaWrite { remote } | WrOp::RdmaWriteWithImm { remote, .. } => {
                WrOp::RdmaWriteWithImm { remote, imm }
            }
            WrOp::Send | WrOp::SendWithImm { .. } => WrOp::SendWithImm { imm },
            WrOp::UdSend { dest, .. } => WrOp::UdSend {
                dest,
                imm: Some(imm),
            },
            op @ (WrOp::RdmaRead { .. }
            | WrOp::AtomicCmpSwp { .. }
            | WrOp::AtomicFetchAdd { .. }
            | WrOp::MaskedCmpSwap { .. }
            | WrOp::MaskedFetchAdd { .. }
            | WrOp::BindMw { .. }
            | WrOp::LocalInv { .. }
            | WrOp::SendWithInv { .. }) => {
                panic!("SendWr::imm: {op:?} carries no immediate")
            }
        };
        self
    }

    /// The same WR, signaled ([`SendFlags::SIGNALED`]).
    pub fn signaled(self) -> Self {
        self.with_flags(SendFlags::SIGNALED)
    }
    /// The same WR, solicited ([`SendFlags::SOLICITED`]).
    pub fn solicited(self) -> Self {
        self.with_flags(SendFlags::SOLICITED)
    }
    /// The same WR, fenced ([`SendFlags::FENCE`]).
    pub fn fence(self) -> Self {
        self.with_flags(SendFlags::FENCE)
    }
    /// The same WR with `f` added to its flags (any bit not defined in
    /// [`SendFlags`] dropped).
    pub fn with_flags(mut self, f: SendFlags) -> Self {
        self.flags |= f & SendFlags::all();
        self
    }
    /// The same WR, inline ([`SendWr::inline`](#structfield.inline)).
    pub fn inline(mut self) -> Self {
        self.inline = true;
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

    /// A WR's flags (the ctrl byte) are its SIGNALED, SOLICITED and FENCE
    /// bits, whatever other bits `from_bits_retain` put in (`with_flags` and
    /// `ctrl_bits` drop them), and whether the WR is inline.
    #[test]
    fn ctrl_bits_are_the_three_flags_whatever_inline_is() {
        let to = RemoteAddr {
            addr: 0,
            rkey: Rkey(0),
        };
        for k in 0..=255u8 {
            for inline in [false, true] {
                let mut w =
                    SendWr::rdma_write(0, &[], to).with_flags(SendFlags::from_bits_retain(k));
                w.inline = inline;
                assert_eq!(w.flags.bits(), k & 0x8a, "flags {k:#010b}");
                let f = SendFlags::from_bits_retain(k);
                assert_eq!(f.ctrl_bits(), k & 0x8a, "flags {k:#010b}");
            }
        }
        assert_eq!(SendWr::send(0, &[]).signaled().flags.ctrl_bits(), 0x08);
        assert_eq!(SendWr::send(0, &[]).solicited().flags.ctrl_bits(), 0x02);
        assert_eq!(SendWr::send(0, &[]).fence().flags.ctrl_bits(), 0x80);
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
