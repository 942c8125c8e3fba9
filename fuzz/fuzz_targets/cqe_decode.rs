//! Any 64 bytes decode without panicking; decode(encode(x)) == x; ownership
//! never accepts an INVALID opcode.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mlx5_dv::cqe::{sw_owned, Cqe};

fuzz_target!(|data: (u32, u8, [u8; 64])| {
    let (ci, log_cnt, bytes) = data;
    let c = Cqe::decode(&bytes);
    let again = Cqe::decode(&c.encode(bytes[63] & 1));
    assert_eq!(again, c);
    let cnt = 1u32 << (log_cnt % 23);
    if bytes[63] >> 4 == 0xf {
        assert!(!sw_owned(bytes[63], ci, cnt));
    }
    let _ = c.wc_status();
});
