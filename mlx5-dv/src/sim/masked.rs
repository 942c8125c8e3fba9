//! The masked (extended) atomics as the device runs them:
//! `MLX5_OPCODE_ATOMIC_MASKED_CS` (0x14) and `MLX5_OPCODE_ATOMIC_MASKED_FA`
//! (0x15), 4 or 8 bytes by the ctrl segment's opmod (`wqe::AtomicSize`).
//!
//! The arithmetic (IB spec, the masked atomics of the extended atomics
//! annex; UCX builds AND, OR, XOR and SWAP from them the same way,
//! `rc/rc_mlx5.inl` `uct_rc_mlx5_iface_common_atomic_data`):
//!
//! - masked compare-and-swap: if `(old ^ compare) & compare_mask == 0`,
//!   the new value is `(old & !swap_mask) | (swap & swap_mask)`; else the
//!   word is left as it is. The old value is returned either way.
//! - masked fetch-and-add: `old + add`, with the sum cut into fields by
//!   `field_boundary`: a set bit marks the most significant bit of a
//!   field, and the carry out of it is dropped (so all bits set is XOR,
//!   none a plain wrapping add).
//!
//! Byte order, the sim's choice: the responder's word is in host byte
//! order for both sizes (it is updated as a CPU atomic would); the old
//! value lands in the requester's local SGE big-endian for 4 bytes (4-byte
//! extended atomics are big-endian; UCX reads the reply with `ntohl`) and
//! in host order for 8 bytes (`atomic_req_8B_endianness_mode` = 1, host
//! endianness: the mode the kernel sets where the device has it, and the
//! one the sim's plain atomics follow). The response is never scattered to
//! the CQE.

use super::ops::{responder_check, sge_at, sq_local_ok, Exec};
use super::{dma, Access, State};
use crate::prm::{Syndrome, WqeOpcode};
use crate::wqe::{AtomicSize, DataSeg, DecodedWqe, MaskedAtomic};

/// The word a masked compare-and-swap leaves where `old` was.
pub(crate) fn masked_cs(old: u64, m: &MaskedAtomic) -> u64 {
    if (old ^ m.compare) & m.compare_mask == 0 {
        (old & !m.swap_mask) | (m.swap_add & m.swap_mask)
    } else {
        old
    }
}

/// `a + b` with no carry out of any bit set in `boundary` (each the most
/// significant bit of a field): the fields' top bits are cleared, the rest
/// added (a carry reaches a top bit, never past it), the top bits' own
/// sums put back by XOR.
pub(crate) fn field_add(a: u64, b: u64, boundary: u64) -> u64 {
    ((a & !boundary).wrapping_add(b & !boundary)) ^ ((a ^ b) & boundary)
}

/// Runs the masked atomic of WQE `w` (its linear copy `wqe`) of QP `qpn`:
/// the local and responder checks of the plain atomics, then the update.
pub(super) fn masked_atomic(st: &mut State, qpn: u32, w: &DecodedWqe, wqe: &[u8]) -> Exec {
    let (Some(remote), Some(m), Some(old_to)) = (w.remote, w.masked, sge_at(w, wqe, 0)) else {
        return Exec::Err(Syndrome::LOCAL_QP_OP_ERR);
    };
    let size = m.size.bytes();
    if old_to.len < size
        || !sq_local_ok(
            st,
            qpn,
            DataSeg {
                len: size,
                ..old_to
            },
            true,
        )
    {
        return Exec::Err(Syndrome::LOCAL_PROT_ERR);
    }
    if remote.addr % size as u64 != 0 {
        // As a misaligned plain atomic: an invalid request at the responder.
        return Exec::Err(Syndrome::REMOTE_INVAL_REQ_ERR);
    }
    if let Err(s) = responder_check(
        st,
        qpn,
        remote.rkey,
        remote.addr,
        size as u64,
        Access::REMOTE_ATOMIC,
    ) {
        return Exec::Err(s);
    }
    let cs = w.opcode == WqeOpcode::ATOMIC_MASKED_CS;
    // SAFETY: the remote word is `size`-aligned inside a checked MR.
    let old = unsafe {
        dma::update(remote.addr, size, |old| {
            if cs {
                masked_cs(old, &m)
            } else {
                field_add(old, m.swap_add, m.compare)
            }
        })
    };
    let mut resp = [0u8; 8];
    let bytes = match m.size {
        AtomicSize::B4 => {
            resp[..4].copy_from_slice(&(old as u32).to_be_bytes());
            &resp[..4]
        }
        AtomicSize::B8 => {
            resp = old.to_ne_bytes();
            &resp[..]
        }
    };
    // SAFETY: the local `size` bytes were checked above.
    unsafe { dma::write_from(old_to.addr, bytes) };
    Exec::Ok { byte_cnt: size }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Bit by bit, as the spec says it: bit `i` of the sum is the bits'
    /// sum with the carry in, and the carry out goes on unless `i` is a
    /// field's top bit.
    fn field_add_by_bits(a: u64, b: u64, boundary: u64) -> u64 {
        let (mut out, mut carry) = (0u64, 0u64);
        for i in 0..64 {
            let s = (a >> i & 1) + (b >> i & 1) + carry;
            out |= (s & 1) << i;
            carry = if boundary >> i & 1 == 1 { 0 } else { s >> 1 };
        }
        out
    }

    /// Bit by bit: on a match of every compared bit, each swapped bit
    /// takes `swap`'s, the others stay.
    fn masked_cs_by_bits(old: u64, m: &MaskedAtomic) -> u64 {
        let hit = (0..64).all(|i| m.compare_mask >> i & 1 == 0 || (old ^ m.compare) >> i & 1 == 0);
        if !hit {
            return old;
        }
        (0..64).fold(0, |v, i| {
            let from = if m.swap_mask >> i & 1 == 1 {
                m.swap_add
            } else {
                old
            };
            v | (from >> i & 1) << i
        })
    }

    fn m(swap: u64, compare: u64, swap_mask: u64, compare_mask: u64) -> MaskedAtomic {
        MaskedAtomic {
            size: AtomicSize::B8,
            swap_add: swap,
            compare,
            swap_mask,
            compare_mask,
        }
    }

    proptest! {
        #[test]
        fn field_add_is_the_bitwise_sum(a: u64, b: u64, boundary: u64) {
            prop_assert_eq!(field_add(a, b, boundary), field_add_by_bits(a, b, boundary));
        }

        #[test]
        fn field_add_without_boundaries_adds_and_with_all_xors(a: u64, b: u64) {
            prop_assert_eq!(field_add(a, b, 0), a.wrapping_add(b));
            prop_assert_eq!(field_add(a, b, u64::MAX), a ^ b);
        }

        /// A 4-byte add is the 64-bit one cut to 32 bits (the update's
        /// `as u32`): no bit above 31 reaches the low half.
        #[test]
        fn field_add_of_4_bytes_is_the_low_half(a: u32, b: u32, boundary: u32) {
            let by_bits = field_add_by_bits(a as u64, b as u64, boundary as u64) as u32;
            prop_assert_eq!(field_add(a as u64, b as u64, boundary as u64) as u32, by_bits);
        }

        #[test]
        fn masked_cs_is_the_bitwise_rule(old: u64, s: u64, c: u64, sm: u64, cm: u64) {
            let m = m(s, c, sm, cm);
            prop_assert_eq!(masked_cs(old, &m), masked_cs_by_bits(old, &m));
        }

        /// Full masks are the plain compare-and-swap.
        #[test]
        fn masked_cs_with_full_masks_is_cas(old: u64, s: u64, c: u64) {
            let want = if old == c { s } else { old };
            prop_assert_eq!(masked_cs(old, &m(s, c, u64::MAX, u64::MAX)), want);
            prop_assert_eq!(masked_cs(old, &m(s, old, u64::MAX, u64::MAX)), s);
        }
    }

    /// By hand: a carry stops at a boundary; UCX's AND and OR.
    #[test]
    fn by_hand() {
        // Two 4-bit fields in a byte (boundaries at bits 3 and 7): 0x0f + 0x01
        // leaves the low field 0 and the high one untouched.
        assert_eq!(field_add(0x0f, 0x01, 0x88), 0x00);
        assert_eq!(field_add(0x0f, 0x01, 0), 0x10);
        assert_eq!(field_add(0xff, 0x11, 0x88), 0x00);
        // AND with v: compare_mask 0, swap_mask !v, swap v.
        let v = 0xf0f0;
        assert_eq!(masked_cs(0xff00, &m(v, 0, !v, 0)), 0xff00 & v);
        // OR with v: swap_mask v, swap v.
        assert_eq!(masked_cs(0x000f, &m(v, 0, v, 0)), 0x000f | v);
        // A miss on a compared bit changes nothing.
        assert_eq!(masked_cs(0x12, &m(0xff, 0x10, 0xff, 0xf0)), 0xff);
        assert_eq!(masked_cs(0x22, &m(0xff, 0x10, 0xff, 0xf0)), 0x22);
    }
}
