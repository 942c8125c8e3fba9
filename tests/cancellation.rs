//! Cancellation: an async wait dropped while the WR it waits
//! for is in flight leaves the WR's buffer with the QP until its
//! completion. On the sim, with the device thread, through the waker the
//! sim wakes itself (no `poll(2)`): `scripts/miri` runs this file under
//! Miri too, which checks that nothing frees or touches the buffer while
//! the device may still read it.

use rdma_direct::{
    Access, Completion, CompletionMode, Context, QpConfig, RecvWr, SendWr, Sge, WcOpcode, WcStatus,
};
use std::future::Future;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Wake, Waker};

/// Wakes a parked thread.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

fn waker() -> Waker {
    Waker::from(Arc::new(Unpark(std::thread::current())))
}

/// Polls `f` to the end on this thread.
fn block_on<F: Future>(f: F) -> F::Output {
    let w = waker();
    let mut cx = TaskContext::from_waker(&w);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

#[test]
fn a_wait_dropped_mid_flight_leaves_the_buffer_with_the_qp() {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cfg = QpConfig {
        max_send_wr: 4,
        max_recv_wr: 4,
        // No receive is posted yet: the SEND waits at the responder (RNR
        // NAKs retried for ever), in flight, with its buffer.
        rnr_retry: 7,
        ..QpConfig::default()
    };
    let (mut a, mut b) = pd.create_connected_pair(&cfg).unwrap();
    let mut buf = pd.alloc_local_mr(64, Access::empty()).unwrap();
    buf.copy_from_slice(&[0x5a; 64]);
    let dst = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let live = pd.live_mrs();
    a.post_send_owned(&SendWr::send(1, &[]).signaled(), buf, 0, 64)
        .map_err(|r| r.error)
        .unwrap();
    // A wait, polled once (Pending: the SEND is in flight), then dropped:
    // the task that awaited it was cancelled.
    {
        let mut out = [Completion::default(); 1];
        let mut c = a.completions(CompletionMode::Events);
        let w = waker();
        let mut cx = TaskContext::from_waker(&w);
        let mut f = std::pin::pin!(c.next_batch(&mut out));
        for _ in 0..3 {
            assert!(
                f.as_mut().poll(&mut cx).is_pending(),
                "the SEND completed with no receive posted"
            );
        }
    }
    // The QP holds the buffer: not handed back, not deregistered.
    assert!(
        a.take_send_buf().is_none(),
        "the buffer came back mid-flight"
    );
    assert_eq!(
        pd.live_mrs(),
        live,
        "an MR went while its SEND was in flight"
    );
    // The receive lands the SEND; a new wait takes its completion, and
    // then the buffer comes back, untouched.
    let rsge = [Sge::new(&dst, 0, 64).unwrap()];
    b.post_recv(&[RecvWr::new(9, &rsge)]).unwrap();
    let mut out = [Completion::default(); 1];
    let n = block_on(a.completions(CompletionMode::Events).next_batch(&mut out)).unwrap();
    assert_eq!(n, 1);
    assert_eq!(
        (out[0].wr_id, out[0].status, out[0].opcode),
        (1, WcStatus::SUCCESS, WcOpcode::SEND)
    );
    let (wr_id, back) = a.take_send_buf().expect("the buffer after its completion");
    assert_eq!(wr_id, 1);
    assert!(back.iter().all(|&x| x == 0x5a), "the buffer changed");
    let n = block_on(b.completions(CompletionMode::Events).next_batch(&mut out)).unwrap();
    assert_eq!((n, out[0].wr_id, out[0].byte_len), (1, 9, 64));
    let mut got = [0u8; 64];
    dst.read(0, &mut got).unwrap();
    assert_eq!(got, [0x5a; 64], "the bytes that landed");
}
