//! Real ConnectX hardware: the conformance suite on the direct path
//! (`mlx5dv_create_qp` + `mlx5dv_init_obj` + our ring driver), then a short
//! write_lat on the direct path and on verbs for comparison; and the two
//! CQs made by `mlx5dv_create_cq`: CQE compression (64 signaled WRITEs
//! complete in order) and `InlineRecv::Up64`'s 128-byte CQEs (a 64-byte
//! SEND lands whole). A device that refuses either with its typed error
//! (`Feature::CqeCompression`, `Feature::InlineReceive`) is reported as a
//! skip with the error.
//!
//! Runs only when `RDMA_DIRECT_MLX5_DEVICE` names the device (e.g. `mlx5_0`);
//! otherwise it says loudly on stderr that it skips and why, with the
//! `SKIPPED:` marker that `scripts/test` and `.ci/run` count as a skip (cargo
//! itself reports the test as passed).

// The two engines of `src/tools` the suite needs, compiled into this crate.
#[allow(dead_code, unused_imports)]
#[path = "../src/tools"]
mod tools {
    pub mod bench;
    pub mod conformance;
}

use rdma_direct::{
    Access, Backend, Completion, Context, Error, Feature, InlineRecv, QpConfig, RecvWr, RemoteAddr,
    SendWr, Sge, WcOpcode, WcStatus,
};
use std::time::{Duration, Instant};
use tools::bench::{run_lat, LatConfig, LatTest};
use tools::conformance::{cases, Outcome};

fn loud(msg: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{msg}");
}

#[test]
fn conformance_and_latency_on_mlx5_hardware() {
    let Ok(dev) = std::env::var("RDMA_DIRECT_MLX5_DEVICE") else {
        loud(format_args!(
            "mlx5: conformance_and_latency_on_mlx5_hardware: SKIPPED: RDMA_DIRECT_MLX5_DEVICE is not set \
             (set it to a ConnectX device name such as mlx5_0 to run the hardware tests)"
        ));
        return;
    };
    let ctx = Context::open(&dev).unwrap_or_else(|e| panic!("open {dev}: {e}"));
    assert_eq!(
        ctx.data_path(),
        rdma_direct::DataPath::Direct,
        "{dev} is not driven by the direct path (mlx5dv_is_supported is false?)"
    );
    drop(ctx);
    let mut failed = Vec::new();
    for c in cases() {
        match c.run(&dev) {
            Ok(Outcome::Passed(_)) => {}
            Ok(Outcome::Skipped(why)) => {
                loud(format_args!("mlx5: {dev}: {}: SKIPPED: {why}", c.name))
            }
            Err(f) => failed.push(format!("{}: {f}", c.name)),
        }
    }
    assert!(failed.is_empty(), "{dev}:\n{}", failed.join("\n"));
    for backend in [Backend::Direct, Backend::Verbs] {
        let cfg = LatConfig {
            device: dev.clone(),
            iters: 1000,
            backend,
            ..Default::default()
        };
        let (_, r) = run_lat(LatTest::Write, &cfg).unwrap_or_else(|e| panic!("{backend:?}: {e}"));
        loud(format_args!(
            "mlx5: {dev} write_lat {backend:?}: t_typical {:.2} us, post {:.1} ns/WR, poll {:.1} ns/CQE",
            r.t_typical, r.cpu.post_ns, r.cpu.poll_ns
        ));
    }
}

/// The device `RDMA_DIRECT_MLX5_DEVICE` names, or `None` after saying
/// loudly that `test` skips.
fn device(test: &str) -> Option<String> {
    let dev = std::env::var("RDMA_DIRECT_MLX5_DEVICE").ok();
    if dev.is_none() {
        loud(format_args!(
            "mlx5: {test}: SKIPPED: RDMA_DIRECT_MLX5_DEVICE is not set \
             (set it to a ConnectX device name such as mlx5_0 to run the hardware tests)"
        ));
    }
    dev
}

/// Polls `q` until `n` completions came (at most 5 s), `per` at a time.
fn poll_n(q: &mut rdma_direct::Qp, n: usize, per: usize, what: &str) -> Vec<Completion> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < n {
        let mut wc = vec![Completion::default(); per.min(n - got.len())];
        let k = q
            .poll(&mut wc)
            .unwrap_or_else(|e| panic!("{what}: poll: {e}"));
        got.extend_from_slice(&wc[..k]);
        assert!(
            Instant::now() < deadline,
            "{what}: {} of {n} completions in 5 s",
            got.len()
        );
    }
    got
}

/// CQE compression on ConnectX (`mlx5dv_create_cq` with
/// `MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE`): 64 signaled WRITEs behind
/// one doorbell, polled 5 at a time (sessions split across polls), complete
/// each once, in posting order, successfully, and the data arrived.
#[test]
fn compressed_cq_delivers_64_signaled_writes_in_order() {
    let test = "compressed_cq_delivers_64_signaled_writes_in_order";
    let Some(dev) = device(test) else { return };
    let ctx = Context::open(&dev).unwrap_or_else(|e| panic!("open {dev}: {e}"));
    let pd = ctx.alloc_pd().unwrap();
    let cfg = QpConfig {
        max_send_wr: 64,
        max_recv_wr: 1,
        cqe_compression: true,
        ..QpConfig::default()
    };
    let (mut a, _b) = match pd.create_connected_pair(&cfg) {
        Ok(p) => p,
        Err(
            e @ Error::Unsupported {
                feature: Feature::CqeCompression,
                ..
            },
        ) => {
            loud(format_args!(
                "mlx5: {dev}: {test}: SKIPPED: refused with a typed error: {e}"
            ));
            return;
        }
        Err(e) => panic!("{dev}: a QP with CQE compression: {e}"),
    };
    let src = pd.alloc_mr(64 * 64, Access::LOCAL_WRITE).unwrap();
    let dst = pd
        .alloc_mr(64 * 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let data: Vec<u8> = (0..64 * 64).map(|i| (i * 7 + 3) as u8).collect();
    src.write(0, &data).unwrap();
    let sges: Vec<[Sge; 1]> = (0..64)
        .map(|k| [Sge::new(&src, k * 64, 64).unwrap()])
        .collect();
    let wrs: Vec<SendWr> = (0..64)
        .map(|k| {
            let to = RemoteAddr {
                addr: dst.addr() + k as u64 * 64,
                rkey: dst.rkey(),
            };
            SendWr::rdma_write(1000 + k as u64, &sges[k], to).signaled()
        })
        .collect();
    a.post_send(&wrs)
        .unwrap_or_else(|e| panic!("{dev}: post 64 WRITEs: {e}"));
    let got = poll_n(&mut a, 64, 5, test);
    for (k, wc) in got.iter().enumerate() {
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (1000 + k as u64, WcStatus::SUCCESS, WcOpcode::RDMA_WRITE),
            "{dev}: completion {k} of 64: {wc:?}"
        );
    }
    let mut back = vec![0u8; data.len()];
    dst.read(0, &mut back).unwrap();
    assert_eq!(back, data, "{dev}: the WRITEs' data");
    let mut more = [Completion::default(); 4];
    assert_eq!(
        a.poll(&mut more).unwrap(),
        0,
        "{dev}: a completion past the 64"
    );
}

/// `InlineRecv::Up64` on ConnectX (the QP's own CQ of 128-byte CQEs from
/// `mlx5dv_create_cq`, responder scatter of up to 64 bytes): a 64-byte
/// SEND lands whole in the posted buffer, the bytes around it untouched,
/// with its length and immediate.
#[test]
fn up64_inline_receive_of_64_bytes_lands_whole() {
    let test = "up64_inline_receive_of_64_bytes_lands_whole";
    let Some(dev) = device(test) else { return };
    let ctx = Context::open(&dev).unwrap_or_else(|e| panic!("open {dev}: {e}"));
    let pd = ctx.alloc_pd().unwrap();
    let cfg = QpConfig {
        max_send_wr: 8,
        max_recv_wr: 8,
        inline_recv: InlineRecv::Up64,
        ..QpConfig::default()
    };
    let (mut a, mut b) = match pd.create_connected_pair(&cfg) {
        Ok(p) => p,
        Err(
            e @ Error::Unsupported {
                feature: Feature::InlineReceive,
                ..
            },
        ) => {
            loud(format_args!(
                "mlx5: {dev}: {test}: SKIPPED: refused with a typed error: {e}"
            ));
            return;
        }
        Err(e) => panic!("{dev}: a QP with InlineRecv::Up64: {e}"),
    };
    const GUARD: u8 = 0xee;
    let src = pd.alloc_mr(256, Access::LOCAL_WRITE).unwrap();
    let dst = pd.alloc_mr(256, Access::LOCAL_WRITE).unwrap();
    dst.write(0, &[GUARD; 256]).unwrap();
    let data: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
    src.write(0, &data).unwrap();
    let r = [Sge::new(&dst, 64, 100).unwrap()];
    b.post_recv(&[RecvWr::new(7, &r)]).unwrap();
    let g = [Sge::new(&src, 0, 64).unwrap()];
    a.post_send(&[SendWr::send(8, &g).imm(64).signaled()])
        .unwrap_or_else(|e| panic!("{dev}: post the SEND: {e}"));
    let sent = poll_n(&mut a, 1, 1, test);
    assert_eq!(
        sent[0].status,
        WcStatus::SUCCESS,
        "{dev}: the SEND: {:?}",
        sent[0]
    );
    let wc = poll_n(&mut b, 1, 1, test)[0];
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len, wc.imm),
        (7, WcStatus::SUCCESS, 64, Some(64)),
        "{dev}: the receive: {wc:?}"
    );
    let mut got = vec![0u8; 256];
    dst.read(0, &mut got).unwrap();
    assert_eq!(&got[64..128], &data[..], "{dev}: the payload");
    assert!(
        got[..64].iter().chain(&got[128..]).all(|&x| x == GUARD),
        "{dev}: a byte outside the payload changed"
    );
}
