//! Differential fuzzing against rdma-core's own mlx5dv.h helpers (compiled
//! from the system header by `mlx5-dv-oracle`): ctrl and data segments and
//! the CQE op_own accessors must agree byte for byte.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mlx5_dv::cqe::Cqe;
use mlx5_dv::prm::{CtrlFlags, WqeOpcode};
use mlx5_dv::wqe::{ctrl_seg, data_seg, DataSeg};
use mlx5_dv_oracle as oracle;

#[derive(Arbitrary, Debug)]
struct Input {
    pi: u16,
    opcode: u8,
    qpn: u32,
    flags: u8,
    ds: u8,
    imm: u32,
    len: u32,
    lkey: u32,
    addr: u64,
    cqe: [u8; 64],
}

fuzz_target!(|i: Input| {
    assert!(
        oracle::available(),
        "the oracle was built without infiniband/mlx5dv.h"
    );
    let (qpn, ds) = (i.qpn & 0xff_ffff, i.ds & 0x3f);
    let ours = ctrl_seg(
        WqeOpcode(i.opcode),
        i.pi,
        qpn,
        ds as u32,
        CtrlFlags::from_bits_retain(i.flags),
        i.imm,
    );
    assert_eq!(
        ours,
        oracle::set_ctrl_seg(i.pi, i.opcode, 0, qpn, i.flags, ds, 0, i.imm.to_be())
    );
    let d = DataSeg {
        addr: i.addr,
        len: i.len,
        lkey: i.lkey,
    };
    assert_eq!(data_seg(d), oracle::set_data_seg(i.len, i.lkey, i.addr));
    let c = Cqe::decode(&i.cqe);
    assert_eq!(
        [c.owner as u8, c.solicited as u8, c.format, c.opcode.0],
        oracle::cqe_fields(&i.cqe)
    );
});
