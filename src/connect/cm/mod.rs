//! Connecting a QP through the RDMA connection manager (librdmacm), the
//! second way besides our TCP exchange ([`crate::connect::exchange`]), as perftest's
//! `-R` does.
//!
//! The CM resolves the peer's IP address to a device, port and GID, picks
//! the PSNs, and carries the QPNs in its REQ/REP; our QP stays ours (it is
//! not attached to the `rdma_cm_id`): each side asks the CM for the INIT,
//! RTR and RTS attributes (`rdma_init_qp_attr`), and the QP takes them
//! through the same checked transitions as [`crate::Qp::connect_remote`],
//! with three of our own settings kept: the responder access (every remote
//! operation), `min_rnr_timer` and `rnr_retry` from the QP's
//! [`crate::QpConfig`]. The active side then sends the RTU
//! (`rdma_establish`); the passive side accepts only once its QP is in RTS.
//!
//! The CM's private data carries what the CM does not: the buffer each side
//! offers, 28 bytes, big-endian:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 4 | magic `b"rdcm"` |
//! | 4 | 2 | version, [`VERSION`] |
//! | 6 | 2 | reserved, 0 |
//! | 8 | 4 | rkey |
//! | 12 | 8 | address |
//! | 20 | 8 | length, bytes |
//!
//! The port is the CM's own port space (`RDMA_PS_TCP`), apart from the
//! kernel's TCP ports, so the same number as the TCP exchange may be used.
//!
//! **UD** (`RDMA_PS_UDP`, [`CmListener::bind_ud`], [`connect_ud`]): no
//! connection, a service ID resolution (SIDR) instead. The active side's
//! `ESTABLISHED` event carries the passive side's address, QPN and qkey
//! ([`UdPeer`]); the passive side learns nothing but the private data, so
//! it answers the first datagram through an AH built from its receive
//! ([`crate::Pd::create_ah_from_recv`], `ibv_create_ah_from_wc`, as
//! rdma-core's `udaddy` does) to the completion's source QPN. Both QPs
//! take the CM's qkey, [`UDP_QKEY`]. Each UD QP goes RESET -> INIT with the
//! CM's INIT attributes (pkey index, port, qkey), INIT -> RTR with none,
//! RTR -> RTS with SQ_PSN 0 (librdmacm's own `ucma_init_ud_qp`).
//!
//! The CM needs a kernel RDMA device (rxe, ConnectX) and the `rdma_ucm`
//! module: a QP of the sim is refused at once ([`Error::Unsupported`]), and
//! [`CmListener::bind`] fails without the module. Every call has an async
//! twin (`*_async`) that sleeps on the CM's event channel fd through a
//! [`Reactor`](crate::Reactor) instead of blocking the thread.
//!
//! Sources: librdmacm `rdma_cma.h` and `rdma_connect(3)`, `rdma_accept(3)`,
//! `rdma_init_qp_attr(3)` (QPs not attached to an id), `udaddy.c`.

use crate::qp_attr::{AddressVector, QpAttr};
use crate::{Error, Qp, Result, Rkey};
use rdma_sys::*;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

/// Version of the private-data layout above.
pub const VERSION: u16 = 1;
/// Size of the private data in bytes (at most 56 fit a connect request).
pub const OFFER_LEN: usize = 28;
const MAGIC: [u8; 4] = *b"rdcm";
/// The qkey the CM gives every UD QP in the `RDMA_PS_UDP` port space
/// (`RDMA_UDP_QKEY`, librdmacm `rdma_cma.h`).
pub const UDP_QKEY: u32 = 0x0123_4567;

/// The buffer one side offers the other for RDMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmOffer {
    /// The buffer's rkey (private data bytes 8..12, big-endian).
    pub rkey: Rkey,
    /// The buffer's virtual address (bytes 12..20, big-endian).
    pub addr: u64,
    /// The buffer's length in bytes (bytes 20..28, big-endian).
    pub len: u64,
}

impl CmOffer {
    /// The 28-byte private data.
    pub fn encode(&self) -> [u8; OFFER_LEN] {
        let mut m = [0u8; OFFER_LEN];
        m[0..4].copy_from_slice(&MAGIC);
        m[4..6].copy_from_slice(&VERSION.to_be_bytes());
        m[8..12].copy_from_slice(&self.rkey.0.to_be_bytes());
        m[12..20].copy_from_slice(&self.addr.to_be_bytes());
        m[20..28].copy_from_slice(&self.len.to_be_bytes());
        m
    }

    /// Reads the private data of a peer; another magic, another version or
    /// fewer than 28 bytes is [`Error::Exchange`].
    pub fn decode(m: &[u8]) -> Result<CmOffer> {
        if m.len() < OFFER_LEN || m[0..4] != MAGIC {
            return Err(Error::Exchange(format!(
                "the peer's CM private data is not ours ({} bytes, starting {:02x?})",
                m.len(),
                &m[..m.len().min(4)]
            )));
        }
        let v = u16::from_be_bytes([m[4], m[5]]);
        if v != VERSION {
            return Err(Error::Exchange(format!(
                "the peer's CM private data is version {v}; this build speaks {VERSION}"
            )));
        }
        let u32_at = |o: usize| u32::from_be_bytes(m[o..o + 4].try_into().unwrap_or([0; 4]));
        let u64_at = |o: usize| u64::from_be_bytes(m[o..o + 8].try_into().unwrap_or([0; 8]));
        Ok(CmOffer {
            rkey: Rkey(u32_at(8)),
            addr: u64_at(12),
            len: u64_at(20),
        })
    }
}

use crate::backend::ibv::{check_detail as check, errno};
use crate::connect::cm_wait::{block_on, next_serial, Awaited, Blocking, FdWait};
use crate::reactor::deadline_after;

mod attr;
mod listener;
use attr::{
    attr_from_raw, av_from_raw, check_qp, check_qp_here, conn_param, sockaddr, steps_from,
    ud_steps_from,
};
pub use listener::CmListener;

/// An event channel (its fd non-blocking) and one id on it; both destroyed
/// on drop.
struct Id {
    ch: *mut rdma_event_channel,
    id: *mut rdma_cm_id,
    /// Names the channel's fd to an [`FdWait`].
    serial: u64,
}

// SAFETY: librdmacm's calls on an id and its channel are thread-safe (two
// readers of one channel each take a different event); the pointers are
// used only through `&self`/`&mut self` of their owner and freed in `drop`.
unsafe impl Send for Id {}
// SAFETY: as for `Send`: the librdmacm calls made through `&Id` are
// thread-safe, and freeing the id and channel needs `drop`'s `&mut`.
unsafe impl Sync for Id {}

/// A new event channel, its fd made non-blocking (`rdma_get_cm_event` then
/// fails with EAGAIN when no event waits, rather than blocking).
fn event_channel(detail: &str) -> Result<*mut rdma_event_channel> {
    // SAFETY: no arguments; a null return sets errno.
    let ch = unsafe { rdma_create_event_channel() };
    if ch.is_null() {
        return Err(Error::Verbs {
            call: "rdma_create_event_channel",
            errno: errno(),
            detail: detail.into(),
        });
    }
    // SAFETY: `ch` is live; fcntl on its fd changes only its flags.
    unsafe {
        let fd = (*ch).fd;
        libc::fcntl(
            fd,
            libc::F_SETFL,
            libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
        );
    }
    Ok(ch)
}

impl Id {
    /// A new id in port space `ps` (`RDMA_PS_TCP` or `RDMA_PS_UDP`).
    fn new(ps: rdma_port_space::Type) -> Result<Id> {
        let ch = event_channel(" (is the rdma_ucm module loaded?)")?;
        let mut id = std::ptr::null_mut();
        // SAFETY: `ch` is live; `id` receives the new id.
        let rc = unsafe { rdma_create_id(ch, &mut id, std::ptr::null_mut(), ps) };
        if let Err(e) = check("rdma_create_id", rc, String::new) {
            // SAFETY: `ch` is live and has no ids.
            unsafe { rdma_destroy_event_channel(ch) };
            return Err(e);
        }
        Ok(Id {
            ch,
            id,
            serial: next_serial(),
        })
    }

    /// Moves `id` (a connection request's new id) onto a channel of its own.
    fn adopt(id: *mut rdma_cm_id) -> Result<Id> {
        let ch = match event_channel("") {
            Ok(ch) => ch,
            Err(e) => {
                // SAFETY: `id` is a live id whose events are all acknowledged.
                unsafe { rdma_destroy_id(id) };
                return Err(e);
            }
        };
        // SAFETY: both live; every event of `id` was acknowledged.
        let rc = unsafe { rdma_migrate_id(id, ch) };
        let me = Id {
            ch,
            id,
            serial: next_serial(),
        };
        check("rdma_migrate_id", rc, String::new)?;
        Ok(me)
    }

    /// Waits (through `w`) for the next event on the channel until
    /// `deadline`; it is acknowledged before this returns (what it carries
    /// is copied).
    async fn next_event<W: FdWait>(
        &self,
        w: &mut W,
        deadline: Instant,
        waiting_for: &str,
    ) -> Result<Event> {
        loop {
            if let Some(ev) = self.try_event()? {
                return Ok(ev);
            }
            // SAFETY: the channel's fd lives as long as the channel (`self`).
            let fd = unsafe { BorrowedFd::borrow_raw((*self.ch).fd) };
            if !w
                .ready(self.serial, fd, false, deadline, "rdma_cm event channel")
                .await?
            {
                return Err(Error::Timeout(format!(
                    "rdma_cm: no event while waiting for {waiting_for}"
                )));
            }
        }
    }

    /// The next event if one waits (the fd is non-blocking), acknowledged.
    fn try_event(&self) -> Result<Option<Event>> {
        let mut ev: *mut rdma_cm_event = std::ptr::null_mut();
        // SAFETY: live channel; `ev` receives the event. Non-blocking fd:
        // EAGAIN when none waits.
        let rc = unsafe { rdma_get_cm_event(self.ch, &mut ev) };
        if rc != 0 && errno() == libc::EAGAIN {
            return Ok(None);
        }
        check("rdma_get_cm_event", rc, String::new)?;
        // SAFETY: `ev` is the event just returned; it lives until acked.
        let out = unsafe {
            let e = &*ev;
            let conn = e.param.conn;
            let private = if conn.private_data.is_null() {
                Vec::new()
            } else {
                std::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    conn.private_data_len.into(),
                )
                .to_vec()
            };
            // The union's UD member: meaningful on a UDP id's ESTABLISHED
            // (any bit pattern of its pointer and integers is valid).
            let ud = e.param.ud;
            Event {
                kind: e.event,
                status: e.status,
                id: e.id,
                private,
                ud: (ud.ah_attr, ud.qp_num, ud.qkey),
            }
        };
        // SAFETY: `ev` came from rdma_get_cm_event and is acked once.
        unsafe { rdma_ack_cm_event(ev) };
        Ok(Some(out))
    }

    /// Waits for an event of kind `want`; any other is an error naming it.
    async fn expect<W: FdWait>(&self, w: &mut W, want: u32, deadline: Instant) -> Result<Event> {
        let ev = self.next_event(w, deadline, event_name(want)).await?;
        if ev.kind != want {
            return Err(Error::Exchange(format!(
                "rdma_cm: {} (status {}) while waiting for {}",
                event_name(ev.kind),
                ev.status,
                event_name(want)
            )));
        }
        Ok(ev)
    }

    /// The ibverbs device the id is bound to, if any.
    fn device(&self) -> Option<String> {
        // SAFETY: live id; `verbs` is null or a live context whose device
        // name is a NUL-terminated string.
        unsafe {
            let verbs = (*self.id).verbs;
            if verbs.is_null() {
                return None;
            }
            let name = ibv_get_device_name((*verbs).device);
            (!name.is_null()).then(|| {
                std::ffi::CStr::from_ptr(name)
                    .to_string_lossy()
                    .into_owned()
            })
        }
    }

    /// `rdma_init_qp_attr` for `state`, as our attributes.
    fn qp_attr(&self, state: u32) -> Result<QpAttr> {
        // SAFETY: plain data; zero is valid.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = state;
        let mut mask = 0;
        check(
            "rdma_init_qp_attr",
            // SAFETY: live id; both outputs valid for the call.
            unsafe { rdma_init_qp_attr(self.id, &mut a, &mut mask) },
            || format!(" (for QP state {state})"),
        )?;
        Ok(attr_from_raw(&a, mask as u32))
    }
}

impl Drop for Id {
    fn drop(&mut self) {
        // SAFETY: both live and owned by us; every event we took was acked.
        unsafe {
            rdma_destroy_id(self.id);
            rdma_destroy_event_channel(self.ch);
        }
    }
}

// SAFETY: `id` is a handle only passed back to librdmacm (thread-safe);
// the rest is plain data copied out of the acknowledged event.
unsafe impl Send for Event {}

struct Event {
    kind: u32,
    status: i32,
    id: *mut rdma_cm_id,
    private: Vec<u8>,
    /// `param.ud`'s AH attributes, QPN and qkey (UDP ids' ESTABLISHED).
    ud: (ibv_ah_attr, u32, u32),
}

fn event_name(kind: u32) -> &'static str {
    use rdma_cm_event_type::*;
    match kind {
        RDMA_CM_EVENT_ADDR_RESOLVED => "ADDR_RESOLVED",
        RDMA_CM_EVENT_ADDR_ERROR => "ADDR_ERROR",
        RDMA_CM_EVENT_ROUTE_RESOLVED => "ROUTE_RESOLVED",
        RDMA_CM_EVENT_ROUTE_ERROR => "ROUTE_ERROR",
        RDMA_CM_EVENT_CONNECT_REQUEST => "CONNECT_REQUEST",
        RDMA_CM_EVENT_CONNECT_RESPONSE => "CONNECT_RESPONSE",
        RDMA_CM_EVENT_CONNECT_ERROR => "CONNECT_ERROR",
        RDMA_CM_EVENT_UNREACHABLE => "UNREACHABLE",
        RDMA_CM_EVENT_REJECTED => "REJECTED",
        RDMA_CM_EVENT_ESTABLISHED => "ESTABLISHED",
        RDMA_CM_EVENT_DISCONNECTED => "DISCONNECTED",
        RDMA_CM_EVENT_DEVICE_REMOVAL => "DEVICE_REMOVAL",
        RDMA_CM_EVENT_TIMEWAIT_EXIT => "TIMEWAIT_EXIT",
        _ => "another event",
    }
}

/// A connection made through the CM. Dropping it disconnects (a DREQ to
/// the peer) and frees the id; the QP is left as it is.
/// For UD (no connection) dropping it frees the id only.
pub struct CmConnection {
    id: Id,
    ud: bool,
}

impl Drop for CmConnection {
    fn drop(&mut self) {
        if !self.ud {
            // SAFETY: live id; with no QP attached the CM only sends the DREQ.
            unsafe { rdma_disconnect(self.id.id) };
        }
    }
}

/// What the active side of a UD "connection" learns from the CM
/// ([`connect_ud`]): where to send, as the passive side answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdPeer {
    /// The path to the peer's port ([`crate::Pd::create_ah`] makes the AH).
    pub av: AddressVector,
    /// The peer's UD QPN.
    pub qpn: u32,
    /// The qkey its QP takes ([`UDP_QKEY`]).
    pub qkey: u32,
    /// The buffer the peer offered.
    pub offer: CmOffer,
}

/// Connects `qp` (in RESET) to a [`CmListener`] at `host:port`, resolving
/// the address and route (2 s each), and takes it to RTS with the CM's
/// attributes; a rejected or unreachable request (the listener is not up
/// yet), or an address or route not resolved in time (the peer host is not
/// up yet, or ARP under emulation is slow), is tried again every 100 ms
/// until `timeout`. Returns the connection
/// and the peer's offer.
///
/// Errors: [`Error::Exchange`] when `host` resolves to no IPv4 address or
/// is reached through another device than the QP's; [`Error::Timeout`];
/// [`Error::Verbs`] naming the CM call that failed; the QP's transition
/// errors (it goes back to RESET).
pub fn connect(
    qp: &mut Qp,
    host: &str,
    port: u16,
    offer: &CmOffer,
    timeout: Duration,
) -> Result<(CmConnection, CmOffer)> {
    let (c, p, _) = block_on(connect_in(
        qp,
        host,
        port,
        offer,
        timeout,
        false,
        &mut Blocking,
    ))?;
    Ok((c, p))
}

/// [`connect`] as a future, on any runtime: the CM's event channel fd
/// (non-blocking) is watched by a [`Reactor`](crate::Reactor)
/// ([`default_reactor`](crate::reactor::default_reactor)), and the timeout
/// and the 100 ms between tries by a `timerfd` beside it. The future is
/// `Send`. `host` is resolved by the system's blocking resolver (an IP
/// address is parsed at once). Dropped before it resolves, the attempt's id
/// is destroyed and `qp` may be left in INIT, RTR or RTS: reset it before
/// connecting it again.
///
/// Errors: as [`connect`]; [`Error::Reactor`].
pub async fn connect_async(
    qp: &mut Qp,
    host: &str,
    port: u16,
    offer: &CmOffer,
    timeout: Duration,
) -> Result<(CmConnection, CmOffer)> {
    let mut w = Awaited::default();
    let (c, p, _) = connect_in(qp, host, port, offer, timeout, false, &mut w).await?;
    Ok((c, p))
}

/// Resolves a UD peer through the CM's UDP port space (SIDR) at
/// `host:port`, a [`CmListener::bind_ud`] listener, and brings the UD `qp`
/// (in RESET) to RTS with the CM's qkey ([`UDP_QKEY`]). Returns the id
/// (kept until the caller is done) and what the peer answered: its
/// address, QPN and qkey. Retried as [`connect`] is.
///
/// Errors: as [`connect`]; a QP not UD ([`Error::WrongTransport`]).
pub fn connect_ud(
    qp: &mut Qp,
    host: &str,
    port: u16,
    offer: &CmOffer,
    timeout: Duration,
) -> Result<(CmConnection, UdPeer)> {
    ud_peer(block_on(connect_in(
        qp,
        host,
        port,
        offer,
        timeout,
        true,
        &mut Blocking,
    ))?)
}

/// [`connect_ud`] as a future, as [`connect_async`].
///
/// Errors: as [`connect_ud`]; [`Error::Reactor`].
pub async fn connect_ud_async(
    qp: &mut Qp,
    host: &str,
    port: u16,
    offer: &CmOffer,
    timeout: Duration,
) -> Result<(CmConnection, UdPeer)> {
    let mut w = Awaited::default();
    ud_peer(connect_in(qp, host, port, offer, timeout, true, &mut w).await?)
}

fn ud_peer((c, offer, ud): Connected) -> Result<(CmConnection, UdPeer)> {
    let (ah, qpn, qkey) = ud;
    Ok((
        c,
        UdPeer {
            av: av_from_raw(&ah),
            qpn,
            qkey,
            offer,
        },
    ))
}

type Connected = (CmConnection, CmOffer, (ibv_ah_attr, u32, u32));

async fn connect_in<W: FdWait>(
    qp: &mut Qp,
    host: &str,
    port: u16,
    offer: &CmOffer,
    timeout: Duration,
    ud: bool,
    w: &mut W,
) -> Result<Connected> {
    use std::net::{SocketAddr, ToSocketAddrs};
    check_qp_here(qp, ud)?;
    let dst = (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::Exchange(format!("{host}: {e}")))?
        .find_map(|a| match a {
            SocketAddr::V4(v4) => Some(v4),
            SocketAddr::V6(_) => None,
        })
        .ok_or_else(|| Error::Exchange(format!("{host} has no IPv4 address")))?;
    let deadline = deadline_after(timeout);
    loop {
        match connect_once(qp, dst, offer, deadline, ud, w).await {
            Err(Error::Exchange(e))
                if [
                    "rdma_cm: REJECTED",
                    "rdma_cm: UNREACHABLE",
                    "rdma_cm: ADDR_ERROR",
                    "rdma_cm: ROUTE_ERROR",
                ]
                .iter()
                .any(|p| e.starts_with(p)) =>
            {
                if Instant::now() >= deadline {
                    return Err(Error::Timeout(format!(
                        "rdma_cm: {dst} did not accept: {e}"
                    )));
                }
                w.pause(Duration::from_millis(100)).await?;
            }
            r => return r,
        }
    }
}

/// `rdma_connect` on `id` (its route resolved) for `qp`, with `private`.
fn send_connect(
    qp: &Qp,
    id: &Id,
    private: &[u8; OFFER_LEN],
    dst: std::net::SocketAddrV4,
) -> Result<()> {
    let mut param = conn_param(qp, private);
    // SAFETY: live id with its route resolved; `param` and `private` outlive the call.
    check(
        "rdma_connect",
        unsafe { rdma_connect(id.id, &mut param) },
        || format!(" ({dst})"),
    )
}

/// The active side's SIDR on a UDP id whose route is resolved (the UD QP
/// already in RTS): `rdma_connect`, then the ESTABLISHED event's offer and
/// UD parameters.
async fn sidr<W: FdWait>(
    qp: &mut Qp,
    id: &Id,
    private: &[u8; OFFER_LEN],
    dst: std::net::SocketAddrV4,
    deadline: Instant,
    w: &mut W,
) -> Result<(CmOffer, (ibv_ah_attr, u32, u32))> {
    send_connect(qp, id, private, dst)?;
    let ev = id.next_event(w, deadline, "ESTABLISHED").await?;
    if ev.kind != rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED {
        return Err(Error::Exchange(format!(
            "rdma_cm: {} (status {}) from {dst}",
            event_name(ev.kind),
            ev.status
        )));
    }
    Ok((CmOffer::decode(&ev.private)?, ev.ud))
}

async fn connect_once<W: FdWait>(
    qp: &mut Qp,
    dst: std::net::SocketAddrV4,
    offer: &CmOffer,
    deadline: Instant,
    ud: bool,
    w: &mut W,
) -> Result<Connected> {
    use rdma_cm_event_type::*;
    let id = Id::new(if ud {
        rdma_port_space::RDMA_PS_UDP
    } else {
        rdma_port_space::RDMA_PS_TCP
    })?;
    let mut sa = sockaddr(dst);
    // SAFETY: live id; `sa` is a valid sockaddr_in for the call.
    let rc = unsafe {
        rdma_resolve_addr(
            id.id,
            std::ptr::null_mut(),
            (&mut sa as *mut libc::sockaddr_in).cast(),
            2000,
        )
    };
    check("rdma_resolve_addr", rc, || format!(" ({dst})"))?;
    id.expect(w, RDMA_CM_EVENT_ADDR_RESOLVED, deadline).await?;
    check_qp(qp, &id, &dst.to_string(), ud)?;
    check(
        "rdma_resolve_route",
        // SAFETY: live id with its address resolved.
        unsafe { rdma_resolve_route(id.id, 2000) },
        || format!(" ({dst})"),
    )?;
    id.expect(w, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline).await?;
    let private = offer.encode();
    if ud {
        // The QP first: the peer may send as soon as it answers.
        let [init, rtr, rts] = ud_steps_from(&id)?;
        qp.connect_steps(init, rtr, rts)?;
    }
    if ud {
        // SIDR: the answer is ESTABLISHED, carrying the peer's AH, QPN and
        // qkey. Whatever fails from here takes the QP back to RESET, so
        // that it may be connected again.
        let r = sidr(qp, &id, &private, dst, deadline, w).await;
        return match r {
            Ok((peer, ud_param)) => Ok((CmConnection { id, ud: true }, peer, ud_param)),
            Err(e) => {
                qp.modify(crate::qp_attr::QpState::Reset, &QpAttr::default())?;
                Err(e)
            }
        };
    }
    send_connect(qp, &id, &private, dst)?;
    let rep = id.next_event(w, deadline, "CONNECT_RESPONSE").await?;
    if rep.kind != RDMA_CM_EVENT_CONNECT_RESPONSE {
        return Err(Error::Exchange(format!(
            "rdma_cm: {} (status {}) from {dst}",
            event_name(rep.kind),
            rep.status
        )));
    }
    let peer = CmOffer::decode(&rep.private);
    let steps = peer.and_then(|p| Ok((p, steps_from(&id, qp)?)));
    let (peer, [init, rtr, rts]) = match steps {
        Ok(s) => s,
        Err(e) => {
            // SAFETY: live id with a reply not yet answered.
            unsafe { rdma_reject(id.id, std::ptr::null(), 0) };
            return Err(e);
        }
    };
    qp.connect_steps(init, rtr, rts)?;
    // SAFETY: live id whose reply came; sends the RTU.
    check("rdma_establish", unsafe { rdma_establish(id.id) }, || {
        format!(" ({dst})")
    })?;
    Ok((CmConnection { id, ud: false }, peer, rep.ud))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The async calls' futures are `Send` (a spawned task may await
    /// them); a compile-time check.
    #[allow(dead_code)]
    fn the_futures_are_send(l: &CmListener, qp: &mut Qp, o: &CmOffer) {
        fn send<T: Send>(_: T) {}
        send(l.accept_async(qp, o, Duration::ZERO));
        send(l.accept_ud_async(qp, o, Duration::ZERO));
        send(connect_async(qp, "h", 1, o, Duration::ZERO));
        send(connect_ud_async(qp, "h", 1, o, Duration::ZERO));
    }

    #[test]
    fn offer_round_trips_and_foreign_data_is_refused() {
        let o = CmOffer {
            rkey: Rkey(0x1234_5678),
            addr: 0x7f00_dead_beef,
            len: 4096,
        };
        let m = o.encode();
        assert_eq!(&m[0..4], b"rdcm");
        assert_eq!(m[8..12], [0x12, 0x34, 0x56, 0x78]);
        assert_eq!(CmOffer::decode(&m).unwrap(), o);
        // The CM pads private data to its maximum; the padding is ignored.
        let mut padded = m.to_vec();
        padded.resize(56, 0);
        assert_eq!(CmOffer::decode(&padded).unwrap(), o);
        assert!(matches!(CmOffer::decode(&m[..27]), Err(Error::Exchange(_))));
        let mut v2 = m;
        v2[5] = 2;
        assert!(matches!(CmOffer::decode(&v2), Err(Error::Exchange(_))));
        let mut other = m;
        other[0] = b'x';
        assert!(matches!(CmOffer::decode(&other), Err(Error::Exchange(_))));
    }
}
