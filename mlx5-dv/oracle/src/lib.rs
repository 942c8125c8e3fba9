//! rdma-core's own `mlx5dv.h` inline helpers, compiled from the system header,
//! as a differential oracle for `mlx5-dv`'s encoder and decoder (tests and
//! fuzzing only). [`available`] is false when the header was missing at build time.

extern "C" {
    fn oracle_available() -> i32;
    #[allow(clippy::too_many_arguments)]
    fn oracle_set_ctrl_seg(
        out: *mut u8,
        pi: u16,
        opcode: u8,
        opmod: u8,
        qp_num: u32,
        fm_ce_se: u8,
        ds: u8,
        signature: u8,
        imm: u32,
    );
    fn oracle_set_data_seg(out: *mut u8, length: u32, lkey: u32, address: u64);
    fn oracle_cqe_fields(cqe: *const u8, out: *mut u8);
}

/// Whether the oracle was built against the real header.
pub fn available() -> bool {
    // SAFETY: a C function with no arguments and no side effects.
    unsafe { oracle_available() != 0 }
}

/// `mlx5dv_set_ctrl_seg` on a zeroed segment. `imm` is stored as given, as
/// rdma-core does: pass the immediate in network byte order (`imm.to_be()`).
#[allow(clippy::too_many_arguments)]
pub fn set_ctrl_seg(
    pi: u16,
    opcode: u8,
    opmod: u8,
    qp_num: u32,
    fm_ce_se: u8,
    ds: u8,
    signature: u8,
    imm: u32,
) -> [u8; 16] {
    let mut out = [0u8; 16];
    // SAFETY: `out` has the 16 bytes the C function writes.
    unsafe {
        oracle_set_ctrl_seg(
            out.as_mut_ptr(),
            pi,
            opcode,
            opmod,
            qp_num,
            fm_ce_se,
            ds,
            signature,
            imm,
        )
    };
    out
}

/// `mlx5dv_set_data_seg`.
pub fn set_data_seg(length: u32, lkey: u32, address: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    // SAFETY: `out` has the 16 bytes the C function writes.
    unsafe { oracle_set_data_seg(out.as_mut_ptr(), length, lkey, address) };
    out
}

/// `mlx5dv_get_cqe_owner`, `_se`, `_format`, `_opcode` of a 64-byte CQE.
pub fn cqe_fields(cqe: &[u8; 64]) -> [u8; 4] {
    let mut out = [0u8; 4];
    // SAFETY: `cqe` has the 64 bytes read, `out` the 4 written.
    unsafe { oracle_cqe_fields(cqe.as_ptr(), out.as_mut_ptr()) };
    out
}
