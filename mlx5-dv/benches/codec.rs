//! Cost of the codec on the hot path: encoding a 1-SGE RDMA WRITE and a
//! 64-byte inline SEND into an SQ ring, and an ownership check plus decode of
//! a CQE. `cargo bench -p mlx5-dv --bench codec`; figures in docs/benchmarks.md.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use mlx5_dv::cqe::{sw_owned, Cqe};
use mlx5_dv::prm::{CqeOpcode, CtrlFlags, Syndrome, WqeOpcode, WQEBB};
use mlx5_dv::ring::RingBuf;
use mlx5_dv::wqe::{write_send_wqe, DataSeg, Payload, RemoteSeg, SendWqe, SqGeometry};

fn encode(c: &mut Criterion) {
    let geo = SqGeometry {
        wqe_cnt: 256,
        qpn: 0x1234,
        max_inline: 256,
        max_wqebbs: 16,
    };
    let mut mem = vec![0u8; 256 * WQEBB];
    let mut sq = RingBuf::from_slice(&mut mem).unwrap();
    let sge = [DataSeg {
        addr: 0x7f00_0000_1000,
        len: 4096,
        lkey: 0x11,
    }];
    let write = SendWqe {
        datagram: None,
        opcode: WqeOpcode::RDMA_WRITE,
        flags: CtrlFlags::CQ_UPDATE,
        imm: 0,
        remote: Some(RemoteSeg {
            addr: 0x7f00_0000_9000,
            rkey: 0x22,
        }),
        masked: None,
        atomic: None,
        payload: Payload::Sges(&sge),
    };
    let mut pi = 0u32;
    c.bench_function("encode 1-SGE RDMA WRITE", |b| {
        b.iter(|| {
            let w = write_send_wqe(&mut sq, &geo, pi, black_box(&write), 256).unwrap();
            pi = w.next_pi;
        })
    });
    let bytes = [0x5au8; 64];
    let send = SendWqe {
        datagram: None,
        opcode: WqeOpcode::SEND,
        flags: CtrlFlags::CQ_UPDATE,
        imm: 0,
        remote: None,
        masked: None,
        atomic: None,
        payload: Payload::Inline(&bytes),
    };
    c.bench_function("encode 64-byte inline SEND", |b| {
        b.iter(|| {
            let w = write_send_wqe(&mut sq, &geo, pi, black_box(&send), 256).unwrap();
            pi = w.next_pi;
        })
    });
}

fn decode(c: &mut Criterion) {
    let cqe = Cqe {
        opcode: CqeOpcode::REQ,
        wqe_opcode: WqeOpcode::RDMA_WRITE,
        qpn: 0x1234,
        wqe_counter: 7,
        byte_cnt: 4096,
        imm: 0,
        solicited: false,
        format: 0,
        syndrome: Syndrome(0),
        vendor_syndrome: 0,
        flags_rqpn: 0,
        owner: false,
    }
    .encode(0);
    c.bench_function("CQE ownership check + decode", |b| {
        b.iter(|| {
            let bytes = black_box(&cqe);
            if sw_owned(bytes[63], black_box(3), 256) {
                black_box(Cqe::decode(bytes));
            }
        })
    });
}

/// The same three operations through the C baseline: rdma-core's
/// `mlx5dv.h` helpers compiled from the system header (`mlx5-dv/oracle`,
/// which checks in its tests that they write the same bytes).
fn c_baseline(c: &mut Criterion) {
    use mlx5_dv_oracle as oracle;
    if !oracle::available() {
        eprintln!("codec bench: SKIPPING the C baseline: built without infiniband/mlx5dv.h");
        return;
    }
    let mut mem = vec![0u8; 256 * WQEBB];
    let mut pi = 0u32;
    c.bench_function("C baseline: encode 1-SGE RDMA WRITE", |b| {
        b.iter(|| {
            let n = oracle::baseline::write_sge(
                &mut mem,
                256,
                pi,
                0x1234,
                black_box(0x7f00_0000_9000),
                0x22,
                black_box(0x7f00_0000_1000),
                4096,
                0x11,
            );
            pi = pi.wrapping_add(n);
        })
    });
    let bytes = [0x5au8; 64];
    c.bench_function("C baseline: encode 64-byte inline SEND", |b| {
        b.iter(|| {
            let n = oracle::baseline::inline_send(&mut mem, 256, pi, 0x1234, black_box(&bytes));
            pi = pi.wrapping_add(n);
        })
    });
    let cqe = Cqe {
        opcode: CqeOpcode::REQ,
        wqe_opcode: WqeOpcode::RDMA_WRITE,
        qpn: 0x1234,
        wqe_counter: 7,
        byte_cnt: 4096,
        imm: 0,
        solicited: false,
        format: 0,
        syndrome: Syndrome(0),
        vendor_syndrome: 0,
        flags_rqpn: 0,
        owner: false,
    }
    .encode(0);
    c.bench_function("C baseline: CQE ownership check + decode", |b| {
        b.iter(|| {
            black_box(oracle::baseline::poll_cqe(
                black_box(&cqe),
                black_box(3),
                256,
            ))
        })
    });
}

criterion_group!(benches, encode, decode, c_baseline);
criterion_main!(benches);
