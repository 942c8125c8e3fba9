//! The direct data path's own cost, on the sim's rings (host memory, so the
//! BlueFlame copy and doorbell are plain stores here, not MMIO):
//! posting a 64-byte inline RDMA WRITE with its doorbell, singly and in
//! batches of 32; polling and retiring a CQE; and the sim's execution rate.
//! `cargo bench -p mlx5-dv --features sim --bench driver`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use mlx5_dv::driver::{CompletionQueue, SendQueue};
use mlx5_dv::prm::{CtrlFlags, WqeOpcode};
use mlx5_dv::sim::{Access, Cq, Device, Qp};
use mlx5_dv::wqe::{Payload, RemoteSeg, SendWqe};
use std::time::{Duration, Instant};

const SQ_WQEBBS: u32 = 1024;

struct Rig {
    dev: Device,
    /// The raw description of QP a's SQ, for the C baseline.
    raw: mlx5_dv::dv::mlx5dv_qp,
    qpn: u32,
    sq: SendQueue,
    cq: CompletionQueue,
    _keep: (Qp, Qp, Cq, Cq, Vec<u8>),
    raddr: u64,
    rkey: u32,
}

fn rig() -> Rig {
    let dev = Device::new();
    let pd = dev.alloc_pd();
    let (ca, cb) = (
        dev.create_cq(1024, 64).unwrap(),
        dev.create_cq(1024, 64).unwrap(),
    );
    let (a, b) = (
        dev.create_qp(pd, &ca, SQ_WQEBBS).unwrap(),
        dev.create_qp(pd, &cb, SQ_WQEBBS).unwrap(),
    );
    for (x, y) in [(&a, &b), (&b, &a)] {
        x.to_init(Access::QP_ALL).unwrap();
        x.to_rtr(y.qpn()).unwrap();
        x.to_rts().unwrap();
    }
    let mut mem = vec![0u8; 4096];
    // SAFETY: `mem` lives in the Rig as long as the device may touch it.
    let k = unsafe { dev.reg_mr(pd, mem.as_mut_ptr(), 4096, Access::MR_ALL) }.unwrap();
    // SAFETY: the descriptions come from `a` / `ca`, kept alive by the Rig.
    let sq = unsafe { SendQueue::new(&a.dv(), a.qpn(), 256, 0) }.unwrap();
    let cq = unsafe { CompletionQueue::new(&ca.dv()) }.unwrap();
    let raddr = mem.as_ptr() as u64;
    Rig {
        raw: a.dv(),
        qpn: a.qpn(),
        dev,
        sq,
        cq,
        _keep: (a, b, ca, cb, mem),
        raddr,
        rkey: k.rkey,
    }
}

impl Rig {
    /// Lets the sim execute what was posted and retires it (outside timing).
    fn drain(&mut self) {
        self.dev.process();
        while let Some(c) = self.cq.poll_one() {
            self.sq.complete(c.wqe_counter);
        }
        self.cq.update_ci();
    }
}

fn post(c: &mut Criterion) {
    let payload = [0x5au8; 64];
    for batch in [1usize, 32] {
        let mut r = rig();
        r.sq.set_auto_signal(0);
        let mut g = c.benchmark_group("direct post, 64-byte inline RDMA WRITE + doorbell");
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_function(format!("batch of {batch}"), |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    if r.sq.free_wrs() < batch as u32 + 1
                        || r.sq.free_wqebbs() < 2 * batch as u32 + 2
                    {
                        r.drain();
                    }
                    let t = Instant::now();
                    for k in 0..batch {
                        let w = SendWqe {
                            datagram: None,
                            opcode: WqeOpcode::RDMA_WRITE,
                            flags: if k == batch - 1 {
                                CtrlFlags::CQ_UPDATE
                            } else {
                                CtrlFlags::empty()
                            },
                            imm: 0,
                            remote: Some(RemoteSeg {
                                addr: r.raddr,
                                rkey: r.rkey,
                            }),
                            masked: None,
                            atomic: None,
                            payload: Payload::Inline(&payload),
                        };
                        r.sq.post(&w, k as u64).unwrap();
                    }
                    r.sq.ring_doorbell();
                    spent += t.elapsed();
                }
                spent
            })
        });
        g.finish();
    }
}

fn poll(c: &mut Criterion) {
    let mut r = rig();
    let payload = [1u8; 8];
    c.bench_function("direct poll + retire one CQE", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                // Make up to 256 CQEs (outside timing), then time polling them.
                let n = left.min(256);
                for k in 0..n {
                    let w = SendWqe {
                        datagram: None,
                        opcode: WqeOpcode::RDMA_WRITE,
                        flags: CtrlFlags::CQ_UPDATE,
                        imm: 0,
                        remote: Some(RemoteSeg {
                            addr: r.raddr,
                            rkey: r.rkey,
                        }),
                        masked: None,
                        atomic: None,
                        payload: Payload::Inline(&payload),
                    };
                    r.sq.post(&w, k).unwrap();
                }
                r.sq.ring_doorbell();
                r.dev.process();
                let t = Instant::now();
                for _ in 0..n {
                    let c = r.cq.poll_one().expect("CQE");
                    std::hint::black_box(r.sq.complete(c.wqe_counter));
                }
                r.cq.update_ci();
                spent += t.elapsed();
                left -= n;
            }
            spent
        })
    });
}

fn sim_rate(c: &mut Criterion) {
    let mut r = rig();
    r.sq.set_auto_signal(0);
    let payload = [2u8; 64];
    let mut g = c.benchmark_group("sim executes 64-byte inline RDMA WRITEs");
    g.throughput(Throughput::Elements(256));
    g.bench_function("256 per doorbell", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                r.drain();
                for k in 0..256u64 {
                    let w = SendWqe {
                        datagram: None,
                        opcode: WqeOpcode::RDMA_WRITE,
                        flags: if k == 255 {
                            CtrlFlags::CQ_UPDATE
                        } else {
                            CtrlFlags::empty()
                        },
                        imm: 0,
                        remote: Some(RemoteSeg {
                            addr: r.raddr,
                            rkey: r.rkey,
                        }),
                        masked: None,
                        atomic: None,
                        payload: Payload::Inline(&payload),
                    };
                    r.sq.post(&w, k).unwrap();
                }
                r.sq.ring_doorbell();
                let t = Instant::now();
                r.dev.process();
                spent += t.elapsed();
            }
            spent
        })
    });
    g.finish();
}

/// The same posts through the C baseline: rdma-core's `mlx5dv.h` helpers
/// and its doorbell sequence, written in C (`mlx5-dv/oracle/oracle.c`), on
/// the same sim rings.
fn c_post(c: &mut Criterion) {
    use mlx5_dv_oracle::{available, baseline};
    if !available() {
        eprintln!("driver bench: SKIPPING the C baseline: built without infiniband/mlx5dv.h");
        return;
    }
    let payload = [0x5au8; 64];
    for batch in [1u32, 32] {
        let mut r = rig();
        let mut sq = baseline::RawSq {
            buf: r.raw.sq.buf.cast(),
            wqe_cnt: r.raw.sq.wqe_cnt,
            qpn: r.qpn,
            dbrec: r.raw.dbrec,
            bf_reg: r.raw.bf.reg.cast(),
            bf_size: r.raw.bf.size,
            pi: 0,
            bf_offset: 0,
        };
        let mut drained = 0u32;
        let mut g = c.benchmark_group("C baseline post, 64-byte inline RDMA WRITE + doorbell");
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_function(format!("batch of {batch}"), |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    // Each WQE takes 2 WQEBBs; the sim consumes everything
                    // posted when drained (outside timing).
                    if sq.pi.wrapping_sub(drained) + 2 * batch > sq.wqe_cnt {
                        r.dev.process();
                        while r.cq.poll_one().is_some() {}
                        r.cq.update_ci();
                        drained = sq.pi;
                    }
                    let t = Instant::now();
                    // SAFETY: `sq` describes QP a of the rig, alive while `r`
                    // is; the check above left room for the batch; nothing
                    // else posts on it.
                    unsafe {
                        baseline::post_inline_writes(&mut sq, r.raddr, r.rkey, &payload, batch)
                    };
                    spent += t.elapsed();
                }
                spent
            })
        });
        g.finish();
        // The sim accepted every WQE the baseline wrote.
        r.dev.process();
        let mut n = 0;
        while let Some(c) = r.cq.poll_one() {
            assert_eq!(c.syndrome.0, 0, "the sim refused a C baseline WQE");
            n += 1;
        }
        r.cq.update_ci();
        assert!(n > 0 || sq.pi == drained);
    }
}

criterion_group!(benches, post, poll, sim_rate, c_post);
criterion_main!(benches);
