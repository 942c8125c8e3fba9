//! CQE decoding (64-byte CQE proper; in a 128-byte slot it is the last 64 bytes).
//!
//! Offsets in the 64-byte CQE (rdma-core `mlx5dv.h` `struct mlx5_cqe64` and
//! `struct mlx5_err_cqe`), big-endian:
//!
//! ```text
//! 24 flags_rqpn: GRH 29:28, SL 27:24, source QPN 23:0 (responder CQEs)
//! 36 imm_inval_pkey (4)   44 byte_cnt (4)   48 timestamp (8)
//! 54 vendor syndrome (1, error CQEs)        55 syndrome (1, error CQEs)
//! 56 sop_drop_qpn: WQE opcode in 31:24 (requester), QPN in 23:0
//! 60 wqe_counter (2)      62 signature (1)  63 op_own: opcode 7:4, format 3:2, se 1, owner 0
//! ```

use crate::prm::{CqeOpcode, Syndrome, WqeOpcode, CQE64, VENDOR_SYNDROME_ODP_PFAULT};

/// `op_own` bit 2 (`MLX5_INLINE_SCATTER_32`, rdma-core `mlx5dv.h`): the
/// data of a small receive, READ response or atomic result sits in bytes
/// 0..32 of the 64-byte CQE proper (length: `byte_cnt`, at most 32) and
/// was not written to the WR's buffers: the host copies it out.
pub const INLINE_SCATTER_32: u8 = 0x4;
/// `op_own` bit 3 (`MLX5_INLINE_SCATTER_64`): as [`INLINE_SCATTER_32`],
/// up to 64 bytes in the 64 bytes before the CQE proper, the first half of
/// a 128-byte CQ slot (rdma-core `cq.c`: `cqe - 1`). Never on a CQ of
/// 64-byte slots.
pub const INLINE_SCATTER_64: u8 = 0x8;

/// Whether the CQE whose `op_own` byte is given is owned by software at
/// consumer index `ci` of a CQ with `cqe_cnt` entries (a power of two):
/// its opcode is not INVALID and its owner bit equals `(ci / cqe_cnt) & 1`.
/// rdma-core: `cq.c` `next_cqe_sw` / `get_sw_cqe`.
#[inline(always)]
pub fn sw_owned(op_own: u8, ci: u32, cqe_cnt: u32) -> bool {
    (op_own >> 4) != CqeOpcode::INVALID.0 && ((op_own & 1) != 0) == ((ci & cqe_cnt) != 0)
}

/// Offset of the CQE's 64-bit big-endian `timestamp` in the 64-byte CQE
/// proper (rdma-core `mlx5dv.h` `struct mlx5_cqe64`, `timestamp`).
pub const TIMESTAMP: usize = 48;

/// Owner bit the device writes for the CQE at producer index `pi`.
#[inline]
pub fn owner_bit(pi: u32, cqe_cnt: u32) -> u8 {
    ((pi & cqe_cnt) != 0) as u8
}

/// A decoded CQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cqe {
    /// The CQE opcode (op_own, byte 63, bits 7:4).
    pub opcode: CqeOpcode,
    /// For requester CQEs (REQ, REQ_ERR): the WQE opcode they complete.
    pub wqe_opcode: WqeOpcode,
    /// The QP (`sop_drop_qpn` bits 23:0, byte 56) whose WQE this CQE completes.
    pub qpn: u32,
    /// Low 16 bits of the index of the (last) WQE this CQE completes.
    pub wqe_counter: u16,
    /// `byte_cnt` (bytes 44..48): the bytes the completed operation moved (a receive: the message length).
    pub byte_cnt: u32,
    /// Immediate data as the sender passed it.
    pub imm: u32,
    /// Solicited-event bit (op_own bit 1).
    pub solicited: bool,
    /// Format / inline-scatter bits (op_own bits 3:2): for responder CQEs
    /// bit 2 (`MLX5_INLINE_SCATTER_32`) means up to 32 bytes of data sit in this
    /// CQE, bit 3 (`MLX5_INLINE_SCATTER_64`) 64 bytes in the preceding 64;
    /// format 3 marks a compressed CQE block.
    pub format: u8,
    /// Owner bit (op_own bit 0).
    pub owner: bool,
    /// For REQ_ERR / RESP_ERR: the error syndrome; otherwise 0.
    pub syndrome: Syndrome,
    /// For REQ_ERR / RESP_ERR: the vendor error syndrome (byte 54); otherwise 0.
    pub vendor_syndrome: u8,
    /// Responder CQEs (`flags_rqpn`, bytes 24..28): the sender's QPN in
    /// 23:0 (UD), its SL in 27:24, and in 29:28 whether a GRH came (then the
    /// receive buffer's first 40 bytes hold it); 0 in requester CQEs.
    pub flags_rqpn: u32,
}

impl Cqe {
    /// The source QPN of a responder CQE (UD: the sender's QP).
    pub fn src_qp(&self) -> u32 {
        self.flags_rqpn & 0xff_ffff
    }

    /// Whether the received message came with a GRH (its 40 bytes lead the
    /// receive buffer): rdma-core `cq.c` `(flags_rqpn >> 28) & 3`.
    pub fn grh(&self) -> bool {
        (self.flags_rqpn >> 28) & 3 != 0
    }

    /// The rkey a peer's SEND with invalidate freed at this responder: the
    /// immediate field (`imm_inval_pkey`, bytes 36..40, big-endian) of a
    /// RESP_SEND_INV CQE; `None` for every other opcode. As
    /// [`CqeRef::invalidated_rkey`].
    pub fn invalidated_rkey(&self) -> Option<u32> {
        (self.opcode == CqeOpcode::RESP_SEND_INV).then_some(self.imm)
    }

    /// Whether this is ConnectX's ODP page-fault CQE of an SRQ WQE: a
    /// RESP_ERR CQE with syndrome [`Syndrome::REMOTE_ABORTED_ERR`] (0x22,
    /// byte 55) and vendor syndrome [`VENDOR_SYNDROME_ODP_PFAULT`] (0x93,
    /// byte 54). Not a completion to report: the WQE it names
    /// (`wqe_counter`) goes back to the SRQ
    /// ([`crate::driver::SrqSlots::fault`]). rdma-core `cq.c`
    /// `is_odp_pfault_err`. As [`CqeRef::is_odp_fault`].
    pub fn is_odp_fault(&self) -> bool {
        self.opcode == CqeOpcode::RESP_ERR
            && self.syndrome == Syndrome::REMOTE_ABORTED_ERR
            && self.vendor_syndrome == VENDOR_SYNDROME_ODP_PFAULT
    }
}

impl Cqe {
    /// Decodes a 64-byte CQE proper.
    #[inline]
    pub fn decode(b: &[u8; CQE64]) -> Cqe {
        // SAFETY: `b` is 64 readable bytes.
        unsafe { Self::decode_raw(b.as_ptr()) }
    }

    /// Decodes the 64-byte CQE proper at `p`, reading only the bytes it
    /// needs (24..28, 36..48, 54..62, 63), not copying all 64 first.
    ///
    /// # Safety
    /// `p` must be valid for reads of 64 bytes (no alignment needed).
    #[inline(always)]
    pub(crate) unsafe fn decode_raw(p: *const u8) -> Cqe {
        // SAFETY: every offset read is below 64 (caller's guarantee); unaligned
        // reads need no alignment.
        let be32 = |o: usize| u32::from_be(unsafe { (p.add(o) as *const u32).read_unaligned() });
        // SAFETY: as above.
        let byte = |o: usize| unsafe { *p.add(o) };
        let op_own = byte(63);
        let opcode = CqeOpcode(op_own >> 4);
        let sop = be32(56);
        let err = opcode.is_error();
        Cqe {
            opcode,
            wqe_opcode: WqeOpcode((sop >> 24) as u8),
            qpn: sop & 0xff_ffff,
            // SAFETY: as above.
            wqe_counter: u16::from_be(unsafe { (p.add(60) as *const u16).read_unaligned() }),
            byte_cnt: be32(44),
            imm: be32(36),
            solicited: op_own & 0x2 != 0,
            format: (op_own >> 2) & 0x3,
            owner: op_own & 1 != 0,
            syndrome: Syndrome(if err { byte(55) } else { 0 }),
            vendor_syndrome: if err { byte(54) } else { 0 },
            flags_rqpn: be32(24),
        }
    }

    /// Decodes the CQE proper of a CQ slot of 64 or 128 bytes (in a 128-byte
    /// slot it is the second half). `None` for any other slot length.
    pub fn decode_slot(slot: &[u8]) -> Option<Cqe> {
        let proper: &[u8; CQE64] = match slot.len() {
            64 | 128 => slot[slot.len() - CQE64..].try_into().ok()?,
            _ => return None,
        };
        Some(Cqe::decode(proper))
    }

    /// Encodes this CQE (device side; the sim and tests use it). `op_own` gets
    /// the owner bit given (not `self.owner`); the caller publishes byte 63 last.
    pub fn encode(&self, owner: u8) -> [u8; CQE64] {
        let mut b = [0u8; CQE64];
        b[24..28].copy_from_slice(&self.flags_rqpn.to_be_bytes());
        b[36..40].copy_from_slice(&self.imm.to_be_bytes());
        b[44..48].copy_from_slice(&self.byte_cnt.to_be_bytes());
        if self.opcode.is_error() {
            b[54] = self.vendor_syndrome;
            b[55] = self.syndrome.0;
        }
        b[56..60].copy_from_slice(
            &(((self.wqe_opcode.0 as u32) << 24) | (self.qpn & 0xff_ffff)).to_be_bytes(),
        );
        b[60..62].copy_from_slice(&self.wqe_counter.to_be_bytes());
        b[63] = (self.opcode.0 << 4)
            | ((self.format & 3) << 2)
            | ((self.solicited as u8) << 1)
            | (owner & 1);
        b
    }

    /// The `ibv_wc_status` value for this CQE: 0 (success) unless it is an error CQE.
    pub fn wc_status(&self) -> u32 {
        if self.opcode.is_error() {
            self.syndrome.wc_status()
        } else {
            0
        }
    }
}

/// A software-owned CQE in the CQ ring, read field by field where it lies
/// (the offsets of [`Cqe`]'s fields, big-endian): what
/// [`CompletionQueue::take`](crate::driver::CompletionQueue::take) hands out
/// after its from-device barrier, valid for the call it is handed to. A
/// field not asked for is never loaded, and [`Self::decode`] gives the
/// whole [`Cqe`] where a caller wants every field.
#[derive(Clone, Copy)]
pub struct CqeRef<'a> {
    /// Byte 0 of the 64-byte CQE proper.
    p: *const u8,
    /// Its byte 63, as the ownership test read it.
    op_own: u8,
    /// The slot is 128 bytes: the 64 bytes before `p` are its first half
    /// (where [`INLINE_SCATTER_64`] data lies).
    slot128: bool,
    _cq: core::marker::PhantomData<&'a [u8; CQE64]>,
}

impl CqeRef<'_> {
    /// The CQE proper at `p` of a CQ slot of `slot` bytes (64 or 128; in a
    /// 128-byte slot `p` is the slot's byte 64), whose byte 63 is `op_own`.
    ///
    /// # Safety
    /// `p` must be valid for reads of 64 bytes, which nothing writes, for
    /// the lifetime chosen; with `slot` 128 the 64 bytes before `p` too
    /// (the slot's first half).
    #[inline(always)]
    pub(crate) unsafe fn in_slot(p: *const u8, op_own: u8, slot: usize) -> Self {
        CqeRef {
            p,
            op_own,
            slot128: slot == 128,
            _cq: core::marker::PhantomData,
        }
    }

    #[inline(always)]
    fn be32(&self, o: usize) -> u32 {
        // SAFETY: `o + 4 <= 64` at every call below (`in_slot`'s contract);
        // unaligned reads need no alignment.
        u32::from_be(unsafe { (self.p.add(o) as *const u32).read_unaligned() })
    }

    #[inline(always)]
    fn byte(&self, o: usize) -> u8 {
        // SAFETY: `o < 64` at every call below (`in_slot`'s contract).
        unsafe { *self.p.add(o) }
    }

    /// `op_own` (byte 63): opcode in bits 7:4, format 3:2, se 1, owner 0.
    #[inline(always)]
    pub fn op_own(&self) -> u8 {
        self.op_own
    }

    /// The CQE opcode (op_own bits 7:4).
    #[inline(always)]
    pub fn opcode(&self) -> CqeOpcode {
        CqeOpcode(self.op_own() >> 4)
    }

    /// Low 16 bits of the index of the (last) WQE this CQE completes (bytes 60..62).
    #[inline(always)]
    pub fn wqe_counter(&self) -> u16 {
        // SAFETY: bytes 60..62 of the CQE (`in_slot`'s contract).
        u16::from_be(unsafe { (self.p.add(60) as *const u16).read_unaligned() })
    }

    /// QPN (bits 23:0 of bytes 56..60).
    #[inline(always)]
    pub fn qpn(&self) -> u32 {
        self.be32(56) & 0xff_ffff
    }

    /// For requester CQEs: the WQE opcode they complete (byte 56).
    #[inline(always)]
    pub fn wqe_opcode(&self) -> WqeOpcode {
        WqeOpcode(self.byte(56))
    }

    /// Bytes 44..48.
    #[inline(always)]
    pub fn byte_cnt(&self) -> u32 {
        self.be32(44)
    }

    /// `imm_inval_pkey` (bytes 36..40): a responder CQE's immediate data
    /// (RESP_WR_IMM, RESP_SEND_IMM) or invalidated rkey (RESP_SEND_INV).
    #[inline(always)]
    pub fn imm(&self) -> u32 {
        self.be32(36)
    }

    /// The rkey a peer's SEND with invalidate freed at this responder
    /// (`IBV_WC_WITH_INV`): `imm_inval_pkey` (bytes 36..40, big-endian) of
    /// a RESP_SEND_INV CQE, `None` for any other opcode (an error CQE
    /// included). rdma-core `cq.c` `handle_responder`: `wc->invalidated_rkey
    /// = be32toh(cqe->imm_inval_pkey)`; a compressed session's CQEs carry
    /// the title's (`mini_cqe`).
    #[inline(always)]
    pub fn invalidated_rkey(&self) -> Option<u32> {
        (self.opcode() == CqeOpcode::RESP_SEND_INV).then(|| self.imm())
    }

    /// `timestamp` (bytes 48..56, big-endian): when the device wrote the
    /// CQE, on its free-running clock (ConnectX: device clock ticks; the
    /// sim: nanoseconds since the device was made). Meaningful only on a CQ
    /// created for timestamps (`ibv_create_cq_ex` with
    /// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`; the sim's
    /// `Cq::set_timestamps`); never in a compressed session's mini-CQEs.
    #[inline(always)]
    pub fn timestamp(&self) -> u64 {
        // SAFETY: bytes 48..56 of the CQE (`in_slot`'s contract); unaligned
        // reads need no alignment.
        u64::from_be(unsafe { (self.p.add(TIMESTAMP) as *const u64).read_unaligned() })
    }

    /// `flags_rqpn` (bytes 24..28): a responder CQE's source QPN in 23:0,
    /// SL in 27:24, GRH in 29:28 ([`Cqe::flags_rqpn`]).
    #[inline(always)]
    pub fn flags_rqpn(&self) -> u32 {
        self.be32(24)
    }

    /// Whether this is an SRQ WQE's ODP page-fault CQE: RESP_ERR, syndrome
    /// 0x22 (byte 55), vendor syndrome 0x93 (byte 54); [`Cqe::is_odp_fault`].
    /// For the error path: it reads bytes 54 and 55 only for a RESP_ERR CQE.
    #[inline]
    pub fn is_odp_fault(&self) -> bool {
        self.opcode() == CqeOpcode::RESP_ERR
            && self.byte(55) == Syndrome::REMOTE_ABORTED_ERR.0
            && self.byte(54) == VENDOR_SYNDROME_ODP_PFAULT
    }

    /// Every field, as [`Cqe::decode`] reads them.
    #[inline(always)]
    pub fn decode(&self) -> Cqe {
        // SAFETY: `in_slot`'s contract: 64 readable bytes.
        unsafe { Cqe::decode_raw(self.p) }
    }

    /// Whether the CQE carries inline-scattered data: format 1
    /// ([`INLINE_SCATTER_32`]) or 2 ([`INLINE_SCATTER_64`]) in `op_own`
    /// bits 3:2 (format 3, both bits, is a compressed CQE block, not
    /// data). One test of the byte the ownership test read.
    #[inline(always)]
    pub fn has_inline_data(&self) -> bool {
        let f = self.op_own & (INLINE_SCATTER_32 | INLINE_SCATTER_64);
        f != 0 && f != INLINE_SCATTER_32 | INLINE_SCATTER_64
    }

    /// The data a scatter-to-CQE completion carries, read in place (valid
    /// while the CQE is): `byte_cnt` bytes from byte 0 of the CQE proper
    /// with [`INLINE_SCATTER_32`] (at most 32), or from byte 0 of a
    /// 128-byte slot with [`INLINE_SCATTER_64`] (at most 64). `None` for
    /// a CQE without either bit, an error CQE, and a CQE whose bits or
    /// `byte_cnt` do not fit its slot (`INLINE_SCATTER_64` in a 64-byte
    /// slot, a count over 32 or 64): the device wrote no such CQE, and
    /// nothing outside the slot is read. `None` too with both bits set
    /// (format 3: a compressed CQE block).
    #[inline]
    pub fn inline_data(&self) -> Option<&[u8]> {
        if self.opcode().is_error() || !self.has_inline_data() {
            return None;
        }
        let len = self.byte_cnt() as usize;
        let start = if self.op_own & INLINE_SCATTER_32 != 0 {
            if len > 32 {
                return None;
            }
            self.p
        } else if self.op_own & INLINE_SCATTER_64 != 0 && self.slot128 {
            if len > 64 {
                return None;
            }
            self.p.wrapping_sub(CQE64)
        } else {
            return None;
        };
        // SAFETY: `len` bytes from byte 0 of the CQE proper (at most 32 of
        // its 64), or from byte 0 of a 128-byte slot (at most 64, the half
        // before the CQE proper): readable and unwritten for `'_`
        // (`in_slot`'s contract).
        Some(unsafe { core::slice::from_raw_parts(start, len) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ownership_follows_the_wrap_count() {
        // Fresh CQ slot: INVALID, owner 0 — never software-owned.
        assert!(!sw_owned(0xf0, 0, 8));
        assert!(!sw_owned(0xf1, 8, 8));
        // REQ with owner 0 is owned on the first pass, not the second.
        assert!(sw_owned(0x00, 3, 8));
        assert!(!sw_owned(0x00, 11, 8));
        assert!(sw_owned(0x01, 11, 8));
        assert_eq!(owner_bit(8, 8), 1);
        assert_eq!(owner_bit(16, 8), 0);
    }

    /// The ODP page-fault CQE: RESP_ERR with 0x22 in byte 55 and 0x93 in
    /// byte 54 (`struct mlx5_err_cqe`'s `syndrome` and `vendor_err_synd`);
    /// either byte otherwise, or another opcode, is not one.
    #[test]
    fn odp_fault_needs_resp_err_syndrome_0x22_and_vendor_0x93() {
        let mut b = [0u8; 64];
        b[54] = 0x93;
        b[55] = 0x22;
        b[60..62].copy_from_slice(&[0x00, 0x05]);
        for (op_own, v54, v55, want) in [
            (0xe0, 0x93, 0x22, true),
            (0xe1, 0x93, 0x22, true),
            (0xd0, 0x93, 0x22, false),
            (0xe0, 0x92, 0x22, false),
            (0xe0, 0x93, 0x13, false),
            (0x20, 0x93, 0x22, false),
        ] {
            (b[54], b[55], b[63]) = (v54, v55, op_own);
            let c = Cqe::decode(&b);
            assert_eq!(c.is_odp_fault(), want, "{op_own:#x} {v54:#x} {v55:#x}");
            // SAFETY: `b` is 64 readable bytes nothing writes meanwhile.
            let r = unsafe { CqeRef::in_slot(b.as_ptr(), b[63], 64) };
            assert_eq!(r.is_odp_fault(), want);
            assert_eq!(r.wqe_counter(), 5);
            if want {
                assert_eq!(c.wc_status(), 16, "IBV_WC_REM_ABORT_ERR");
                assert_eq!(c.encode(b[63] & 1), b);
            }
        }
    }

    #[test]
    fn req_err_decodes_at_prm_offsets() {
        let mut b = [0u8; 64];
        b[54] = 0x88;
        b[55] = 0x13;
        b[56..60].copy_from_slice(&[0x08, 0x00, 0x12, 0x34]);
        b[60..62].copy_from_slice(&[0x00, 0x07]);
        b[63] = 0xd1;
        let c = Cqe::decode(&b);
        assert_eq!(c.opcode, CqeOpcode::REQ_ERR);
        assert_eq!(c.syndrome, Syndrome::REMOTE_ACCESS_ERR);
        assert_eq!(c.vendor_syndrome, 0x88);
        assert_eq!(c.wqe_opcode, WqeOpcode::RDMA_WRITE);
        assert_eq!(c.qpn, 0x1234);
        assert_eq!(c.wqe_counter, 7);
        assert_eq!(c.wc_status(), 10); // IBV_WC_REM_ACCESS_ERR
        assert_eq!(c.encode(1), b);
    }

    #[test]
    fn req_decodes_and_round_trips() {
        let c = Cqe {
            opcode: CqeOpcode::REQ,
            wqe_opcode: WqeOpcode::RDMA_WRITE_IMM,
            qpn: 0xabcdef,
            wqe_counter: 0xfffe,
            byte_cnt: 4096,
            imm: 0x01020304,
            solicited: true,
            format: 0,
            syndrome: Syndrome(0),
            vendor_syndrome: 0,
            flags_rqpn: 0x1123_4567,
            owner: false,
        };
        let b = c.encode(0);
        assert_eq!(&b[24..28], &[0x11, 0x23, 0x45, 0x67]);
        assert_eq!(Cqe::decode(&b).flags_rqpn, 0x1123_4567);
        assert_eq!(&b[36..40], &[1, 2, 3, 4]);
        assert_eq!(&b[44..48], &[0, 0, 0x10, 0]);
        assert_eq!(b[63], 0x02);
        assert_eq!(Cqe::decode(&b), c);
        assert_eq!(c.wc_status(), 0);
    }

    /// A slot of `slot` bytes whose CQE proper has `op_own` and
    /// `byte_cnt`, bytes `0..slot - 64` (the half before it) set to 0xaa
    /// and its first 32 to 0x55.
    fn slot_with(slot: usize, op_own: u8, byte_cnt: u32) -> Vec<u8> {
        let mut b = vec![0xaau8; slot];
        let p = slot - CQE64;
        b[p..p + 32].fill(0x55);
        b[p + 44..p + 48].copy_from_slice(&byte_cnt.to_be_bytes());
        b[p + 63] = op_own;
        b
    }

    fn data_of(b: &[u8]) -> Option<Vec<u8>> {
        let p = b.len() - CQE64;
        // SAFETY: `b` is the whole slot (64 or 128 bytes), alive and
        // unwritten while the CqeRef is used.
        let r = unsafe { CqeRef::in_slot(b.as_ptr().add(p), b[p + 63], b.len()) };
        r.inline_data().map(<[u8]>::to_vec)
    }

    #[test]
    fn inline_data_is_read_where_the_scatter_bits_say() {
        let resp = CqeOpcode::RESP_SEND.0 << 4;
        // SCATTER_32: bytes 0..byte_cnt of the CQE proper, either slot size.
        assert_eq!(
            data_of(&slot_with(64, resp | INLINE_SCATTER_32, 32)),
            Some(vec![0x55; 32])
        );
        assert_eq!(
            data_of(&slot_with(128, resp | INLINE_SCATTER_32, 1)),
            Some(vec![0x55])
        );
        // SCATTER_64: the 64 bytes before the CQE proper of a 128-byte slot.
        assert_eq!(
            data_of(&slot_with(128, resp | INLINE_SCATTER_64, 64)),
            Some(vec![0xaa; 64])
        );
        // Never outside the slot: SCATTER_64 in a 64-byte slot, counts too big.
        assert_eq!(data_of(&slot_with(64, resp | INLINE_SCATTER_64, 8)), None);
        assert_eq!(data_of(&slot_with(64, resp | INLINE_SCATTER_32, 33)), None);
        assert_eq!(data_of(&slot_with(128, resp | INLINE_SCATTER_64, 65)), None);
        // No bits, both (format 3: compressed), or an error CQE: none.
        let both = INLINE_SCATTER_32 | INLINE_SCATTER_64;
        assert_eq!(data_of(&slot_with(128, resp | both, 8)), None);
        assert_eq!(data_of(&slot_with(64, resp, 8)), None);
        let err = CqeOpcode::RESP_ERR.0 << 4;
        assert_eq!(data_of(&slot_with(64, err | INLINE_SCATTER_32, 8)), None);
        // Zero bytes: an empty slice, not None.
        assert_eq!(
            data_of(&slot_with(64, resp | INLINE_SCATTER_32, 0)),
            Some(vec![])
        );
    }
}
