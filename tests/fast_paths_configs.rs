//! The in-place posts' hostile tests, continued (`fast_paths.rs`): odd QP
//! configurations, over-long `Sge::bytes`, and the in-place and checked
//! paths writing the same WQEs.

use rdma_direct::testing::QpHooks;
use rdma_direct::*;
use std::time::Duration;

#[path = "support/fast_paths.rs"]
mod support;
use support::*;

#[test]
fn odd_configs() {
    let e = env();
    let to = remote(&e.dst, 0);
    let sg = [Sge::new(&e.src, 0, 8).unwrap()];
    let d = [1u8; 8];
    let by = [Sge::bytes(&d).unwrap()];
    // max_send_sge 0
    let c = QpConfig {
        max_send_sge: 0,
        max_inline: 0,
        ..cfg(4, 4)
    };
    let (mut a, _b) = e.pd.create_connected_pair(&c).unwrap();
    for w in [
        SendWr::rdma_write(1, &sg, to),
        SendWr::rdma_write(1, &by, to).inline(),
        SendWr::send(1, &sg),
    ] {
        let err = refused(&mut a, &[w]);
        println!("sge0: {err:?}");
        assert!(matches!(err, Error::Invalid(_)));
    }
    a.post_send(&[SendWr::rdma_write(2, &[], to).signaled()])
        .unwrap();
    let wc = poll_n(&mut a, 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status),
        (2, WcStatus::SUCCESS),
        "an empty WRITE"
    );
    a.post_send(&[SendWr::send(3, &[]).inline().signaled()])
        .unwrap_or_else(|e| println!("empty inline send: {e:?}"));
    println!("{:?}", drain(&mut a));
    // max_inline 0 with sge 1
    let c = QpConfig {
        max_send_sge: 1,
        max_inline: 0,
        ..cfg(4, 4)
    };
    let (mut a, _b) = e.pd.create_connected_pair(&c).unwrap();
    let err = refused(&mut a, &[SendWr::rdma_write(1, &by, to).inline()]);
    assert!(matches!(err, Error::Invalid(_)), "{err:?}");
    let z: [u8; 0] = [];
    let bz = [Sge::bytes(&z).unwrap()];
    a.post_send(&[SendWr::rdma_write(4, &bz, to).inline().signaled()])
        .unwrap();
    a.post_send(&[SendWr::send(5, &bz).inline().signaled()])
        .unwrap();
    let wc = poll_n(&mut a, 1);
    println!("0-byte inline write: {wc:?}");
    std::thread::sleep(Duration::from_millis(20));
    println!("0-byte inline send without recv: {:?}", drain(&mut a));
    // user-modified to ERR: posts flushed
    let (mut a, _b) = e.pd.create_connected_pair(&cfg(4, 4)).unwrap();
    a.modify(QpState::Err, &QpAttr::default()).unwrap();
    a.post_send(&[SendWr::rdma_write(6, &sg, to)]).unwrap();
    a.post_send(&[SendWr::rdma_write(7, &by, to).inline()])
        .unwrap();
    a.post_send(&[
        SendWr::rdma_write(8, &sg, to),
        SendWr::rdma_read(9, &sg, to),
    ])
    .unwrap();
    let wc = poll_n(&mut a, 4);
    assert!(
        wc.iter().all(|c| c.status == WcStatus::WR_FLUSH_ERR),
        "{wc:?}"
    );
    assert_eq!(
        wc.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        vec![6, 7, 8, 9]
    );
    // Owned post with a non-empty sge list made of bytes: refused
    let lm = e.pd.reg_local(4096, Access::LOCAL_WRITE).unwrap();
    let (mut a, _b) = e.pd.create_connected_pair(&cfg(4, 4)).unwrap();
    let r = a.post_send_owned(&SendWr::rdma_write(1, &by, to), lm, 0, 8);
    let lm = match r {
        Err(rf) => {
            println!("owned+bytes: {:?}", rf.error);
            rf.buf
        }
        Ok(()) => panic!("owned with sges accepted"),
    };
    // Owned inline WRITE on the fast path
    a.post_send_owned(
        &SendWr::rdma_write(2, &[], to).inline().signaled(),
        lm,
        0,
        8,
    )
    .unwrap();
    assert_eq!(poll_n(&mut a, 1)[0].wr_id, 2);
    assert!(a.take_send_buf().is_some());
}

#[test]
fn bytes_too_long() {
    let v = vec![0u8; 1 << 31];
    assert!(matches!(Sge::bytes(&v), Err(Error::Invalid(_))));
    assert!(Sge::bytes(&v[..(1 << 31) - 1]).is_ok());
}

/// The same WRs through the fast paths (singles) and the checked path (a
/// batch with an inline WR): the WQE bytes the device reads must match.
#[test]
fn fast_and_checked_write_the_same_wqes() {
    let e = env();
    let c = QpConfig {
        max_inline: 220,
        ..cfg(64, 64)
    };
    let (mut a, _pa) = e.pd.create_connected_pair(&c).unwrap();
    let (mut b, _pb) = e.pd.create_connected_pair(&c).unwrap();
    let data: Vec<u8> = (0..220u32).map(|i| (i * 13 + 1) as u8).collect();
    let sg = [Sge::new(&e.src, 16, 40).unwrap()];
    let to = remote(&e.dst, 0);
    let lens = [
        0usize, 1, 11, 12, 13, 27, 28, 29, 44, 60, 61, 64, 65, 92, 124, 156, 188, 219, 220,
    ];
    let mut n = 0;
    for (i, &len) in lens.iter().enumerate() {
        let by = [Sge::bytes(&data[..len]).unwrap()];
        let mut w1 = SendWr::rdma_write(i as u64, &by, to).inline();
        if i % 2 == 0 {
            w1 = w1.signaled();
        }
        if i % 3 == 0 {
            w1.fence = true;
        }
        let w2 = match i % 3 {
            0 => SendWr::rdma_write(100 + i as u64, &sg, to),
            1 => SendWr::rdma_read(100 + i as u64, &sg, to).signaled(),
            _ => SendWr::rdma_write_with_imm(100 + i as u64, &sg, to, 0xfeed).solicited(),
        };
        let w2 = if i % 3 == 2 {
            SendWr {
                op: WrOp::RdmaWrite { remote: to },
                ..w2
            }
        } else {
            w2
        };
        a.post_send(&[w1]).unwrap();
        a.post_send(&[w2]).unwrap();
        b.post_send(&[w1, w2]).unwrap();
        n += 2;
    }
    std::thread::sleep(Duration::from_millis(50));
    let sa = a.sq_snapshot().unwrap();
    let sb = b.sq_snapshot().unwrap();
    let ring = sa.len() - 4;
    assert_eq!(&sa[ring..], &sb[ring..], "doorbell records");
    let mut off = 0;
    for k in 0..n {
        let ds = (sa[off + 7] & 0x3f) as usize;
        assert_eq!(sa[off + 7], sb[off + 7], "WQE {k} ds");
        let mut x = sa[off..off + ds * 16].to_vec();
        let mut y = sb[off..off + ds * 16].to_vec();
        x[4..7].fill(0);
        y[4..7].fill(0);
        assert_eq!(x, y, "WQE {k} at {off} (ds {ds})");
        off += (ds * 16).div_ceil(64) * 64;
    }
    let _ = drain(&mut a);
    let _ = drain(&mut b);
}
