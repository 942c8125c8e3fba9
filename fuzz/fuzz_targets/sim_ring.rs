//! Whatever bytes are on the SQ ring and whatever the doorbell record says,
//! the sim never panics and never touches memory outside registered MRs.
//! Structure-aware: besides raw bytes, the fuzzer can drop well-formed
//! segments (valid keys, addresses near and across MR edges) into the ring.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mlx5_dv::sim::{Access, Device};
use mlx5_dv::wqe::{data_seg, raddr_seg, DataSeg, RemoteSeg};

#[derive(Arbitrary, Debug)]
enum Patch {
    /// A data segment into the local MR: offset and length relative to it.
    Local { seg: u8, off: i16, len: u16 },
    /// A remote-address segment into the remote MR.
    Remote { seg: u8, off: i16 },
    /// A ctrl segment with this opcode, ds and flags at WQEBB `wqebb` (wqe_idx = wqebb).
    Ctrl {
        wqebb: u8,
        opcode: u8,
        ds: u8,
        flags: u8,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    ring: Vec<u8>,
    patches: Vec<Patch>,
    db_pi: u16,
    access: u8,
}

const PAGE: usize = 4096;
const SQ_WQEBBS: u32 = 8;

fuzz_target!(|inp: Input| {
    let dev = Device::new();
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(16, 64).unwrap();
    let a = dev.create_qp(pd, &cq, SQ_WQEBBS).unwrap();
    let b = dev.create_qp(pd, &cq, SQ_WQEBBS).unwrap();
    let access = Access::from_bits_truncate(inp.access as u32) | Access::LOCAL_WRITE;
    for (x, y) in [(&a, &b), (&b, &a)] {
        x.to_init(Access::QP_ALL).unwrap();
        x.to_rtr(y.qpn()).unwrap();
        x.to_rts().unwrap();
    }
    // Guard pages around each MR: [guard][MR][guard].
    let mut local = vec![0x11u8; 3 * PAGE];
    let mut remote = vec![0x22u8; 3 * PAGE];
    let lbase = local.as_mut_ptr() as u64 + PAGE as u64;
    let rbase = remote.as_mut_ptr() as u64 + PAGE as u64;
    // SAFETY: both Vecs outlive `dev`'s use of them: the device runs only
    // inside `dev.process()` below, and is dropped before the Vecs.
    let kl = unsafe { dev.reg_mr(pd, lbase as *mut u8, PAGE, access) }.unwrap();
    let kr = unsafe { dev.reg_mr(pd, rbase as *mut u8, PAGE, access) }.unwrap();

    let dv = a.dv();
    let sq_len = SQ_WQEBBS as usize * 64;
    let mut sq = vec![0u8; sq_len];
    for (i, b) in inp.ring.iter().take(sq_len).enumerate() {
        sq[i] = *b;
    }
    let mut put = |seg: usize, bytes: [u8; 16]| {
        let off = (seg * 16) % sq_len;
        sq[off..off + 16].copy_from_slice(&bytes);
    };
    for p in &inp.patches {
        match *p {
            Patch::Local { seg, off, len } => put(
                seg as usize,
                data_seg(DataSeg {
                    addr: lbase.wrapping_add_signed(off as i64),
                    len: len as u32,
                    lkey: kl.lkey,
                }),
            ),
            Patch::Remote { seg, off } => put(
                seg as usize,
                raddr_seg(RemoteSeg {
                    addr: rbase.wrapping_add_signed(off as i64),
                    rkey: kr.rkey,
                }),
            ),
            Patch::Ctrl {
                wqebb,
                opcode,
                ds,
                flags,
            } => {
                let w = (wqebb as u32) % SQ_WQEBBS;
                put(
                    w as usize * 4,
                    mlx5_dv::wqe::ctrl_seg(
                        mlx5_dv::prm::WqeOpcode(opcode),
                        w as u16,
                        a.qpn(),
                        (ds & 0x3f) as u32,
                        mlx5_dv::prm::CtrlFlags::from_bits_retain(flags),
                        0,
                    ),
                )
            }
        }
    }
    // SAFETY: `dv` describes `a`'s live SQ of `sq_len` bytes and its doorbell
    // record; nothing else writes them while we do (no device thread).
    unsafe {
        std::ptr::copy_nonoverlapping(sq.as_ptr(), dv.sq.buf as *mut u8, sq_len);
        mlx5_dv::mmio::write_dbrec(dv.dbrec.add(1), inp.db_pi as u32);
    }
    dev.process();
    // Drain the CQ (decode every owned CQE) so back-pressure does not hide work.
    let cqd = cq.dv();
    for ci in 0..16u32 {
        // SAFETY: the CQ buffer holds 16 64-byte CQEs.
        let bytes = unsafe { *(cqd.buf as *const [u8; 64]).add(ci as usize) };
        if mlx5_dv::cqe::sw_owned(bytes[63], ci, 16) {
            let _ = mlx5_dv::cqe::Cqe::decode(&bytes);
        }
    }
    drop((a, b, cq));
    drop(dev);
    assert!(
        local[..PAGE].iter().all(|&x| x == 0x11),
        "wrote below the local MR"
    );
    assert!(
        local[2 * PAGE..].iter().all(|&x| x == 0x11),
        "wrote above the local MR"
    );
    assert!(
        remote[..PAGE].iter().all(|&x| x == 0x22),
        "wrote below the remote MR"
    );
    assert!(
        remote[2 * PAGE..].iter().all(|&x| x == 0x22),
        "wrote above the remote MR"
    );
});
