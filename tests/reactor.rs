//! The async waits' reactors on a plain eventfd (no RDMA device needed):
//! a watch is pending until the fd becomes readable, wakes its waker when
//! it does, is ready while it stays readable, and pending again once
//! drained. `ThreadReactor` always; `TokioReactor` with the `tokio`
//! feature, inside a tokio runtime (and refused outside one). With
//! `tokio`, also a QP's async wait inside a tokio runtime on the sim, and
//! a task aborted while the SEND it awaits is in flight (its buffer stays
//! with the QP until the completion).

use nix::sys::eventfd::{EfdFlags, EventFd};
use rdma_direct::{Reactor, ReadyFd, ThreadReactor};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// Counts its wakes.
#[derive(Default)]
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn eventfd() -> EventFd {
    EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC).unwrap()
}

/// The watch's life on `efd`: pending, woken once written, ready while
/// readable, pending again once drained, woken again by the next write.
fn watch_cycle(watch: &mut dyn ReadyFd, efd: &EventFd) {
    let count = Arc::new(Count::default());
    let waker = Waker::from(count.clone());
    let mut cx = Context::from_waker(&waker);
    for round in 0..3 {
        assert!(
            watch.poll_readable(&mut cx).is_pending(),
            "round {round}: ready before the fd was written"
        );
        let before = count.0.load(Ordering::SeqCst);
        efd.write(1).unwrap();
        let t = Instant::now();
        while count.0.load(Ordering::SeqCst) == before {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "round {round}: never woken"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            matches!(watch.poll_readable(&mut cx), Poll::Ready(Ok(()))),
            "round {round}: woken but not ready"
        );
        assert_eq!(efd.read().unwrap(), 1, "round {round}: drained");
    }
}

#[test]
fn the_thread_reactor_wakes_when_the_fd_becomes_readable() {
    let efd = eventfd();
    let r = ThreadReactor::new().unwrap();
    let mut w = r.watch(efd.as_fd()).unwrap();
    watch_cycle(&mut *w, &efd);
    // The watch is of a duplicate: dropping it leaves ours open.
    drop(w);
    efd.write(1).unwrap();
    assert_eq!(efd.read().unwrap(), 1);
}

#[cfg(feature = "tokio")]
mod tokio_tests {
    use super::*;
    use rdma_direct::reactor::TokioReactor;
    use rdma_direct::*;

    #[test]
    fn the_tokio_reactor_wakes_inside_a_runtime_and_refuses_outside() {
        let efd = Arc::new(eventfd());
        assert!(
            TokioReactor.watch(efd.as_fd()).is_err(),
            "a watch outside a tokio runtime was not refused"
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut w = TokioReactor.watch(efd.as_fd()).unwrap();
            for round in 0..3 {
                let pending =
                    std::future::poll_fn(|cx| Poll::Ready(w.poll_readable(cx).is_pending())).await;
                assert!(pending, "round {round}: ready before the fd was written");
                let e = efd.clone();
                let writer = std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(5));
                    e.write(1).unwrap();
                });
                tokio::time::timeout(
                    Duration::from_secs(10),
                    std::future::poll_fn(|cx| w.poll_readable(cx)),
                )
                .await
                .expect("woken within 10 s")
                .unwrap();
                writer.join().unwrap();
                assert_eq!(efd.read().unwrap(), 1, "round {round}: drained");
            }
            // Inside the runtime, the default is tokio's.
            assert!(rdma_direct::reactor::default_reactor()
                .watch(efd.as_fd())
                .is_ok());
        });
    }

    #[test]
    fn a_qp_waits_inside_a_tokio_runtime() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let ctx = rdma_direct::Context::open("sim").unwrap();
            let pd = ctx.alloc_pd().unwrap();
            let (mut a, mut b) = pd.create_connected_pair(&QpConfig::default()).unwrap();
            let src = pd.alloc_mr(8, Access::LOCAL_WRITE).unwrap();
            let dst = pd.alloc_mr(8 * 64, Access::LOCAL_WRITE).unwrap();
            let (_b_tx, mut b_rx) = b.split().unwrap();
            let (mut a_tx, _a_rx) = a.split().unwrap();
            let _keep = (_b_tx,);
            let n = 100u64;
            // a, its send half and the polling of its sends: one task.
            let sender = tokio::spawn(async move {
                let mut out = [Completion::default(); 8];
                let mut sent = Vec::new();
                let sge = [Sge::new(&src, 0, 8).unwrap()];
                for k in 0..n {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    while a_tx.post_send(&[SendWr::send(k, &sge).signaled()]).is_err() {
                        let j = a.poll(&mut out).unwrap();
                        sent.extend(out[..j].iter().map(|c| c.wr_id));
                        tokio::task::yield_now().await;
                    }
                }
                while (sent.len() as u64) < n {
                    let j = tokio::time::timeout(
                        Duration::from_secs(10),
                        a.completions(CompletionMode::Adaptive { spins: 10 })
                            .next_batch(&mut out),
                    )
                    .await
                    .expect("sends within 10 s")
                    .unwrap();
                    sent.extend(out[..j].iter().map(|c| c.wr_id));
                }
                sent
            });
            let mut got = Vec::new();
            let mut out = [Completion::default(); 8];
            let mut posted = 0;
            while got.len() < n as usize {
                while posted < n && posted < got.len() as u64 + 32 {
                    let s = [Sge::new(&dst, (posted as usize % 64) * 8, 8).unwrap()];
                    b_rx.post_recv(&[RecvWr::new(posted, &s)]).unwrap();
                    posted += 1;
                }
                let k = tokio::time::timeout(
                    Duration::from_secs(10),
                    b.completions(CompletionMode::Events).next_batch(&mut out),
                )
                .await
                .expect("a receive within 10 s")
                .unwrap();
                got.extend(out[..k].iter().map(|c| c.wr_id));
            }
            assert_eq!(got, (0..n).collect::<Vec<_>>());
            assert_eq!(sender.await.unwrap(), (0..n).collect::<Vec<_>>());
        });
    }

    /// A task aborted while the SEND it awaits is in flight (RNR: no
    /// receive yet): the QP, shared with this thread, keeps the SEND's
    /// buffer until its completion, then hands it back untouched.
    #[test]
    fn an_aborted_task_leaves_the_buffer_with_the_qp() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let ctx = rdma_direct::Context::open("sim").unwrap();
            let pd = ctx.alloc_pd().unwrap();
            let cfg = QpConfig {
                rnr_retry: 7,
                ..QpConfig::default()
            };
            let (a, mut b) = pd.create_connected_pair(&cfg).unwrap();
            let mut buf = pd.alloc_local_mr(64, Access::empty()).unwrap();
            buf.copy_from_slice(&[0x3c; 64]);
            let live = pd.live_mrs();
            let a = Arc::new(tokio::sync::Mutex::new(a));
            let a2 = a.clone();
            let task = tokio::spawn(async move {
                let mut qp = a2.lock().await;
                qp.post_send_owned(&SendWr::send(1, &[]).signaled(), buf, 0, 64)
                    .map_err(|r| r.error)
                    .unwrap();
                let mut out = [Completion::default(); 1];
                qp.completions(CompletionMode::Events)
                    .next_batch(&mut out)
                    .await
            });
            tokio::time::sleep(Duration::from_millis(50)).await;
            task.abort();
            assert!(task.await.unwrap_err().is_cancelled());
            let mut qp = a.lock().await;
            assert!(
                qp.take_send_buf().is_none(),
                "the buffer came back mid-flight"
            );
            assert_eq!(
                pd.live_mrs(),
                live,
                "an MR went while its SEND was in flight"
            );
            let dst = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
            let rsge = [Sge::new(&dst, 0, 64).unwrap()];
            b.post_recv(&[RecvWr::new(9, &rsge)]).unwrap();
            let mut out = [Completion::default(); 1];
            let n = tokio::time::timeout(
                Duration::from_secs(10),
                qp.completions(CompletionMode::Events).next_batch(&mut out),
            )
            .await
            .expect("the SEND's completion")
            .unwrap();
            assert_eq!((n, out[0].wr_id), (1, 1));
            let (_, back) = qp.take_send_buf().expect("the buffer after its completion");
            assert!(back.iter().all(|&x| x == 0x3c));
        });
    }

    /// The TCP exchange as tokio tasks: both sides' futures spawned on a
    /// multi-threaded runtime (so they are `Send`), each socket watched by
    /// tokio's reactor (the client's connect for writability).
    #[test]
    fn the_tcp_exchange_runs_as_tokio_tasks() {
        use rdma_direct::exchange::{self, ConnInfo, Listener};
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let facts = |qpn: u32| ConnInfo {
            endpoint: Endpoint {
                qpn,
                lid: 0,
                gid: [1; 16],
                gid_index: None,
                active_mtu: 3,
                roce: true,
            },
            psn: 5,
            rkey: Rkey(6),
            addr: 7,
            len: 8,
            qkey: 0,
            dc_key: None,
        };
        rt.block_on(async move {
            let free = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let l = Listener::bind(free).unwrap();
            let port = l.port();
            let server = tokio::spawn(async move { l.accept_async(&facts(1)).await });
            let client = tokio::spawn(async move {
                exchange::connect_async("127.0.0.1", port, Duration::from_secs(10), &facts(2)).await
            });
            let (got, _s) = tokio::time::timeout(Duration::from_secs(30), server)
                .await
                .expect("accepted within 30 s")
                .unwrap()
                .unwrap();
            let (peer, _c) = client.await.unwrap().unwrap();
            assert_eq!((got, peer), (facts(2), facts(1)));
        });
    }
}
