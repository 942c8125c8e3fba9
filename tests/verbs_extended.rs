//! The verbs backend on rdma-core's extended verbs, on a real verbs device
//! named by `RDMA_DIRECT_VERBS_DEVICE` (e.g. rxe0 in the soft-RoCE guest;
//! skipped without it): its QPs post through `ibv_wr_*` and its CQs are
//! polled through `ibv_start_poll`, or, with
//! `RDMA_DIRECT_VERBS_OLD_POST=1`, both through the old calls; a WRITE,
//! an inline WRITE of two pieces, a 2-SGE WRITE and a READ move the bytes.
//! Completion timestamps (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`) come
//! where the provider takes them, and are refused with the typed error
//! where it does not (rxe) and with the old calls.

use rdma_direct::testing::QpHooks;
use rdma_direct::*;
use std::time::{Duration, Instant};

fn wait_one(q: &mut Qp) -> Completion {
    let mut out = [Completion::default(); 1];
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        if q.poll(&mut out).unwrap() == 1 {
            return out[0];
        }
    }
    panic!("no completion in 10 s");
}

#[test]
fn posts_and_polls_through_the_extended_verbs() {
    let Ok(dev) = std::env::var("RDMA_DIRECT_VERBS_DEVICE") else {
        eprintln!(
            "verbs_extended: posts_and_polls_through_the_extended_verbs: SKIPPED: \
             RDMA_DIRECT_VERBS_DEVICE names no verbs device (scripts/test step 3 sets it in the rxe guest)"
        );
        return;
    };
    let old = std::env::var("RDMA_DIRECT_VERBS_OLD_POST").is_ok_and(|v| v == "1");
    let ctx = Context::open(&dev).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let src = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let dst = pd
        .alloc_mr(
            4096,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let cfg = QpConfig {
        max_inline: 64,
        max_send_sge: 2,
        ..QpConfig::default()
    };
    let (mut a, _b) = pd.create_connected_pair(&cfg).unwrap();
    assert_eq!(
        a.verbs_extended(),
        Some((!old, !old)),
        "on {dev}, old {old}"
    );
    let data: Vec<u8> = (0..256u32).map(|i| (i * 13 + 5) as u8).collect();
    src.write(0, &data).unwrap();
    let to = |off: u64| RemoteAddr {
        addr: dst.addr() + off,
        rkey: dst.rkey(),
    };
    // A 1-SGE WRITE.
    let one = [Sge::new(&src, 0, 64).unwrap()];
    a.post_send(&[SendWr::rdma_write(1, &one, to(0)).with_flags(SendFlags::SIGNALED)])
        .unwrap();
    let c = wait_one(&mut a);
    assert_eq!((c.wr_id, c.status), (1, WcStatus::SUCCESS), "{c:?}");
    // An inline WRITE of two pieces, then a 2-SGE WRITE, one batch.
    let inl = [
        Sge::bytes(&data[100..110]).unwrap(),
        Sge::bytes(&data[110..130]).unwrap(),
    ];
    let two = [
        Sge::new(&src, 200, 16).unwrap(),
        Sge::new(&src, 216, 40).unwrap(),
    ];
    a.post_send(&[
        SendWr::rdma_write(2, &inl, to(100)).inline(),
        SendWr::rdma_write(3, &two, to(200)).with_flags(SendFlags::SIGNALED),
    ])
    .unwrap();
    let c = wait_one(&mut a);
    assert_eq!((c.wr_id, c.status), (3, WcStatus::SUCCESS), "{c:?}");
    let mut got = vec![0u8; 256];
    dst.read(0, &mut got).unwrap();
    assert_eq!(got[..64], data[..64]);
    assert_eq!(got[100..130], data[100..130]);
    assert_eq!(got[200..256], data[200..256]);
    // A READ back into the source's second half.
    let back = [Sge::new(&src, 1024, 256).unwrap()];
    a.post_send(&[SendWr::rdma_read(4, &back, to(0)).with_flags(SendFlags::SIGNALED)])
        .unwrap();
    let c = wait_one(&mut a);
    assert_eq!(
        (c.wr_id, c.status, c.byte_len),
        (4, WcStatus::SUCCESS, 256),
        "{c:?}"
    );
    let mut again = vec![0u8; 256];
    src.read(1024, &mut again).unwrap();
    assert_eq!(again, got);
}

/// `QpConfig::completion_timestamps` and `Pd::create_timestamped_shared_cq`
/// on a verbs device: where the provider takes
/// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` (never with the old calls, whose
/// `ibv_poll_cq` has no timestamp), a WRITE's completion carries a
/// non-zero one; elsewhere (rxe) both are refused with
/// `Error::Unsupported { feature: CompletionTimestamp }` naming the device,
/// and the PD still makes a QP without them.
#[test]
fn completion_timestamps_or_the_typed_refusal() {
    let Ok(dev) = std::env::var("RDMA_DIRECT_VERBS_DEVICE") else {
        eprintln!(
            "verbs_extended: completion_timestamps_or_the_typed_refusal: SKIPPED: \
             RDMA_DIRECT_VERBS_DEVICE names no verbs device (scripts/test step 3 sets it in the rxe guest)"
        );
        return;
    };
    let old = std::env::var("RDMA_DIRECT_VERBS_OLD_POST").is_ok_and(|v| v == "1");
    let ctx = Context::open(&dev).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cfg = QpConfig {
        completion_timestamps: true,
        ..QpConfig::default()
    };
    let refused = |r: Result<()>, what: &str| match r {
        Err(Error::Unsupported {
            device,
            feature: Feature::CompletionTimestamp,
        }) => {
            assert_eq!(device, dev, "{what}");
            true
        }
        Err(e) => panic!("{what} on {dev}: {e:?}"),
        Ok(()) => false,
    };
    let own = refused(pd.create_qp(&cfg).map(drop), "a QP's own CQ");
    let shared = refused(pd.create_timestamped_shared_cq(64).map(drop), "a shared CQ");
    assert_eq!(own, shared, "on {dev}: the two CQs differ");
    if own {
        eprintln!(
            "verbs_extended: completion timestamps on {dev} (old calls {old}): \
             refused with Error::Unsupported {{ feature: CompletionTimestamp }}"
        );
        // Nothing was left half made: the PD makes a QP without them.
        let (mut a, _b) = pd.create_connected_pair(&QpConfig::default()).unwrap();
        let mr = pd
            .alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        let sge = [Sge::new(&mr, 0, 8).unwrap()];
        let to = RemoteAddr {
            addr: mr.addr() + 8,
            rkey: mr.rkey(),
        };
        a.post_send(&[SendWr::rdma_write(1, &sge, to).signaled()])
            .unwrap();
        let c = wait_one(&mut a);
        assert_eq!((c.status, c.timestamp), (WcStatus::SUCCESS, 0), "{c:?}");
        return;
    }
    assert!(!old, "on {dev} the old calls made a CQ with timestamps");
    let (mut a, _b) = pd.create_connected_pair(&cfg).unwrap();
    let mr = pd
        .alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let sge = [Sge::new(&mr, 0, 8).unwrap()];
    let to = RemoteAddr {
        addr: mr.addr() + 8,
        rkey: mr.rkey(),
    };
    a.post_send(&[SendWr::rdma_write(1, &sge, to).signaled()])
        .unwrap();
    let c = wait_one(&mut a);
    assert_eq!(c.status, WcStatus::SUCCESS, "{c:?}");
    assert_ne!(c.timestamp, 0, "on {dev}: {c:?}");
}
