//! The waiting side of a two-host run: the peer's closing byte noticed
//! during a wait (`peer_done`, `PeerCheck`, `wait_recv_unless_done`) and
//! the server of send_bw (`serve_send_bw`).

use super::*;

/// Whether the peer's closing handshake byte has arrived on `tcp` (it is
/// left there for [`rdma_direct::exchange::barrier`]); a closed connection is an
/// error.
pub(super) fn peer_done(tcp: &mut std::net::TcpStream) -> Result<bool> {
    let io = |e: std::io::Error| Error::Exchange(format!("the peer left: {e}"));
    tcp.set_nonblocking(true).map_err(io)?;
    let r = tcp.peek(&mut [0u8; 1]);
    tcp.set_nonblocking(false).map_err(io)?;
    match r {
        Ok(0) => Err(Error::Exchange(
            "the client left before its closing handshake".into(),
        )),
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(io(e)),
    }
}

/// When the server of send_bw stops.
pub(super) enum ServeUntil {
    /// After this many SENDs arrived.
    Received(u32),
    /// When the client's closing handshake byte arrives (`-D`: the client
    /// decides the count).
    PeerDone,
}

/// When a waiting server looks for the client's closing byte: once the wait
/// has lasted 1 ms, then every 1 ms (a round trip never waits that long, so
/// the check, three system calls, stays out of the timed waits).
pub(super) struct PeerCheck {
    start: u64,
    last: u64,
    ms: u64,
}

impl PeerCheck {
    pub(super) fn new() -> Self {
        let t = ticks();
        PeerCheck {
            start: t,
            last: t,
            ms: (1e6 * ticks_per_ns()) as u64,
        }
    }

    #[inline]
    pub(super) fn due(&mut self) -> bool {
        let t = ticks();
        if t.wrapping_sub(self.start) > self.ms && t.wrapping_sub(self.last) > self.ms {
            self.last = t;
            return true;
        }
        false
    }
}

/// Waits for a receive completion (send completions on the way are taken)
/// unless the client's closing byte arrives first: `false` then.
pub(super) fn wait_recv_unless_done(
    qp: &mut Qp,
    m: &mut CpuMeter,
    tcp: &mut std::net::TcpStream,
) -> Result<bool> {
    let mut wc = [Completion::default(); 4];
    let mut stopped = false;
    let mut check = PeerCheck::new();
    spin_until(
        || format!("no receive completion within {WAIT_LIMIT:?}"),
        || {
            let n = m.poll(qp, &mut wc)?;
            if recv_among(&wc[..n])? {
                return Ok(true);
            }
            if check.due() && peer_done(tcp)? {
                stopped = true;
                return Ok(true);
            }
            Ok(false)
        },
    )?;
    Ok(!stopped)
}

/// The server of send_bw: keeps `rx_depth` receives posted (to `srq` when
/// there is one), reposting each one consumed, until `until` says it is
/// over. Returns how many SENDs arrived.
pub(super) fn serve_send_bw(
    qps: &mut [&mut Qp],
    srq: &mut Option<rdma_direct::Srq>,
    recv: &[RecvWr<'_>],
    rx_depth: u32,
    until: ServeUntil,
    m: &mut CpuMeter,
    tcp: &mut std::net::TcpStream,
) -> Result<u32> {
    for qp in qps.iter_mut() {
        for _ in 0..rx_depth {
            m.post(1, || super::super::transport::post_recv(qp, srq, recv))?;
        }
    }
    super::barrier(tcp)?;
    let iters = match until {
        ServeUntil::Received(n) => n,
        ServeUntil::PeerDone => u32::MAX,
    };
    // SENDs arrived, per QP.
    let mut received = vec![0u32; qps.len()];
    let mut wc = [Completion::default(); 16];
    let limit = (WAIT_LIMIT.as_nanos() as f64 * ticks_per_ns()) as u64;
    let mut last_progress = ticks();
    let mut check = PeerCheck::new();
    while received.iter().any(|&r| r < iters) {
        let mut got = 0;
        for (qp, rcv) in qps.iter_mut().zip(received.iter_mut()) {
            let n = m.poll(qp, &mut wc)?;
            for c in &wc[..n] {
                if !c.status.is_ok() {
                    return Err(Error::from(*c));
                }
                *rcv += 1;
                if rcv.saturating_add(rx_depth) <= iters {
                    m.post(1, || super::super::transport::post_recv(qp, srq, recv))?;
                }
            }
            got += n;
        }
        let t = ticks();
        if got > 0 {
            last_progress = t;
        } else {
            if matches!(until, ServeUntil::PeerDone) && check.due() && peer_done(tcp)? {
                return Ok(received.iter().sum());
            }
            if t.wrapping_sub(last_progress) > limit && !matches!(until, ServeUntil::PeerDone) {
                let total: u32 = received.iter().sum();
                return Err(Error::Timeout(format!(
                    "{total} of {} SENDs arrived; none in {WAIT_LIMIT:?}",
                    iters.saturating_mul(qps.len() as u32)
                )));
            }
        }
    }
    Ok(received.iter().sum())
}
