//! The TCP exchange as futures (`exchange::connect_async`,
//! `Listener::accept_async`, `swap_async`) on the built-in reactor, driven
//! by a minimal executor (no runtime): both sides get each other's facts;
//! a connect to a port nobody listens on gives up at its `wait` through the
//! timerfd, not earlier and not never; an accept dropped before a client
//! came leaves the listener to the next one; and the blocking calls, which
//! run the same code, still work beside them. (rdma_cm's async calls need a
//! kernel device: `examples/async_echo` runs them between two guests.)

use rdma_direct::exchange::{self, ConnInfo, Listener};
use rdma_direct::{Endpoint, Error, Rkey};
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `f` on this thread, parking while it pends; counts the parks.
fn block_on<F: Future>(f: F, parks: &mut u32) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    let t = Instant::now();
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "never resolved");
        *parks += 1;
        std::thread::park_timeout(Duration::from_secs(1));
    }
}

fn info(qpn: u32) -> ConnInfo {
    ConnInfo {
        endpoint: Endpoint {
            qpn,
            lid: 0,
            gid: [qpn as u8; 16],
            gid_index: None,
            active_mtu: 3,
            roce: true,
        },
        psn: qpn + 1,
        rkey: Rkey(qpn + 2),
        addr: 0x1000 + qpn as u64,
        len: 64,
        qkey: 0,
        dc_key: None,
    }
}

/// A port nothing listens on now (bound, then let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn both_sides_swap_their_facts_as_futures() {
    let l = Listener::bind(free_port()).unwrap();
    let port = l.port();
    let server = std::thread::spawn(move || {
        let mut parks = 0;
        let r = block_on(l.accept_async(&info(0x11)), &mut parks);
        (r, parks)
    });
    // The client starts late, so the server's accept sleeps first.
    std::thread::sleep(Duration::from_millis(100));
    let mut parks = 0;
    let (peer, _s) = block_on(
        exchange::connect_async("127.0.0.1", port, Duration::from_secs(10), &info(0x22)),
        &mut parks,
    )
    .unwrap();
    assert_eq!(peer, info(0x11), "the client got the server's facts");
    let (r, server_parks) = server.join().unwrap();
    let (got, _s) = r.unwrap();
    assert_eq!(got, info(0x22), "the server got the client's facts");
    assert!(
        server_parks > 0,
        "the server's accept never slept: its wait was not exercised"
    );
}

#[test]
fn a_connect_nobody_answers_gives_up_at_its_wait() {
    let port = free_port();
    let mut parks = 0;
    let t = Instant::now();
    let r = block_on(
        exchange::connect_async("127.0.0.1", port, Duration::from_millis(300), &info(1)),
        &mut parks,
    );
    let took = t.elapsed();
    assert!(matches!(r, Err(Error::Exchange(_))), "{r:?}");
    assert!(
        took >= Duration::from_millis(300),
        "gave up after {took:?}, before its wait"
    );
    assert!(parks > 0, "the pauses between tries never slept");
    // A name that does not resolve is an argument error at once.
    let r = block_on(
        exchange::connect_async(
            "no-such-host.invalid",
            port,
            Duration::from_secs(30),
            &info(1),
        ),
        &mut parks,
    );
    assert!(matches!(r, Err(Error::Invalid(_))), "{r:?}");
}

#[test]
fn a_dropped_accept_leaves_the_listener_to_the_next() {
    let l = Listener::bind(free_port()).unwrap();
    let port = l.port();
    {
        // Polled once (no client yet: it sleeps), then dropped.
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mine = info(5);
        let mut f = std::pin::pin!(l.accept_async(&mine));
        assert!(f
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
    }
    let client = std::thread::spawn(move || {
        exchange::connect("127.0.0.1", port, Duration::from_secs(10), &info(6))
    });
    // The blocking accept, on the same (non-blocking) listener.
    let (got, _s) = l.accept(&info(5)).unwrap();
    assert_eq!(got, info(6));
    let (peer, _c) = client.join().unwrap().unwrap();
    assert_eq!(peer, info(5));
}

#[test]
fn swap_async_runs_again_on_a_connection() {
    let l = Listener::bind(free_port()).unwrap();
    let port = l.port();
    let server = std::thread::spawn(move || {
        let (_, mut s) = l.accept(&info(7)).unwrap();
        let again = exchange::swap(&mut s, &info(9)).unwrap();
        exchange::barrier(&mut s).unwrap();
        again
    });
    let (_, mut s) =
        exchange::connect("127.0.0.1", port, Duration::from_secs(10), &info(8)).unwrap();
    let mut parks = 0;
    let again = block_on(exchange::swap_async(&mut s, &info(10)), &mut parks).unwrap();
    assert_eq!(again, info(9));
    // Blocking again after the async swap: the barrier reads in place.
    exchange::barrier(&mut s).unwrap();
    assert_eq!(server.join().unwrap(), info(10));
}

/// `ConnInfo::of` / `offering` and `exchange::connect_qp`: two sim QPs of
/// one Context connected through the TCP exchange futures, each side from
/// its own facts, then a WRITE into the buffer the peer offered; facts of
/// another QP are refused and change nothing.
#[test]
fn connect_qp_takes_the_psns_from_the_facts() {
    use rdma_direct::{Access, Context, QpConfig, QpState, RemoteAddr, SendWr, Sge};
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut a = pd.create_qp(&QpConfig::default()).unwrap();
    let mut b = pd.create_qp(&QpConfig::default()).unwrap();
    let dst = pd
        .alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let src = pd.alloc_mr(8, Access::LOCAL_WRITE).unwrap();
    src.write(0, &[7; 8]).unwrap();
    let mine_a = ConnInfo::of(&a, 0x111);
    let mine_b = ConnInfo::of(&b, 0x222).offering(&dst);
    assert_eq!(
        (mine_b.rkey, mine_b.addr, mine_b.len),
        (dst.rkey(), dst.addr(), 64)
    );
    let wrong = exchange::connect_qp(&mut a, &mine_b, &mine_b);
    assert!(matches!(wrong, Err(Error::Invalid(_))), "{wrong:?}");
    assert_eq!(
        a.state(),
        QpState::Reset,
        "a refused connect changed the QP"
    );
    let l = Listener::bind(0).unwrap();
    let port = l.port();
    let server = std::thread::spawn(move || {
        let mut parks = 0;
        block_on(l.accept_async(&mine_b), &mut parks).unwrap().0
    });
    let mut parks = 0;
    let (peer_of_a, _s) = block_on(
        exchange::connect_async("127.0.0.1", port, Duration::from_secs(10), &mine_a),
        &mut parks,
    )
    .unwrap();
    let peer_of_b = server.join().unwrap();
    exchange::connect_qp(&mut a, &mine_a, &peer_of_a).unwrap();
    exchange::connect_qp(&mut b, &mine_b, &peer_of_b).unwrap();
    let to = RemoteAddr {
        addr: peer_of_a.addr,
        rkey: peer_of_a.rkey,
    };
    let sge = [Sge::new(&src, 0, 8).unwrap()];
    a.post_send(&[SendWr::rdma_write(1, &sge, to).signaled()])
        .unwrap();
    let mut wc = [rdma_direct::Completion::default(); 1];
    let t = Instant::now();
    while a.poll(&mut wc).unwrap() == 0 {
        assert!(t.elapsed() < Duration::from_secs(20), "no completion");
    }
    assert!(wc[0].status.is_ok(), "{}", wc[0].status);
    let mut got = [0u8; 8];
    dst.read(0, &mut got).unwrap();
    assert_eq!(got, [7; 8]);
}
