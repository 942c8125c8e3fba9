//! Connecting a QP through the RDMA connection manager (librdmacm), the
//! second way besides our TCP exchange ([`crate::exchange`]), as perftest's
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
//! Sources: librdmacm `rdma_cma.h` and `rdma_connect(3)`, `rdma_accept(3)`,
//! `rdma_init_qp_attr(3)` (QPs not attached to an id), `udaddy.c`.

use crate::qp_attr::{AddressVector, Grh, QpAttr};
use crate::{Access, Error, Qp, Result, Rkey};
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
    pub rkey: Rkey,
    pub addr: u64,
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

/// An event channel and one id on it; both destroyed on drop.
struct Id {
    ch: *mut rdma_event_channel,
    id: *mut rdma_cm_id,
}

// SAFETY: librdmacm's calls on an id and its channel are thread-safe; the
// pointers are used only through `&self`/`&mut self` of their owner.
unsafe impl Send for Id {}

impl Id {
    /// A new id in port space `ps` (`RDMA_PS_TCP` or `RDMA_PS_UDP`).
    fn new(ps: rdma_port_space::Type) -> Result<Id> {
        // SAFETY: no arguments; a null return sets errno.
        let ch = unsafe { rdma_create_event_channel() };
        if ch.is_null() {
            return Err(Error::Verbs {
                call: "rdma_create_event_channel",
                errno: errno(),
                detail: " (is the rdma_ucm module loaded?)".into(),
            });
        }
        let mut id = std::ptr::null_mut();
        // SAFETY: `ch` is live; `id` receives the new id.
        let rc = unsafe { rdma_create_id(ch, &mut id, std::ptr::null_mut(), ps) };
        if let Err(e) = check("rdma_create_id", rc, String::new) {
            // SAFETY: `ch` is live and has no ids.
            unsafe { rdma_destroy_event_channel(ch) };
            return Err(e);
        }
        Ok(Id { ch, id })
    }

    /// Moves `id` (a connection request's new id) onto a channel of its own.
    fn adopt(id: *mut rdma_cm_id) -> Result<Id> {
        // SAFETY: no arguments; a null return sets errno.
        let ch = unsafe { rdma_create_event_channel() };
        if ch.is_null() {
            // SAFETY: `id` is a live id whose events are all acknowledged.
            unsafe { rdma_destroy_id(id) };
            return Err(Error::Verbs {
                call: "rdma_create_event_channel",
                errno: errno(),
                detail: String::new(),
            });
        }
        // SAFETY: both live; every event of `id` was acknowledged.
        let rc = unsafe { rdma_migrate_id(id, ch) };
        let me = Id { ch, id };
        check("rdma_migrate_id", rc, String::new)?;
        Ok(me)
    }

    /// Waits for the next event on the channel until `deadline`; it is
    /// acknowledged before this returns (what it carries is copied).
    fn next_event(&self, deadline: Instant, waiting_for: &str) -> Result<Event> {
        let left = deadline.saturating_duration_since(Instant::now());
        // SAFETY: the channel's fd lives as long as the channel (`self`).
        let fd = unsafe { BorrowedFd::borrow_raw((*self.ch).fd) };
        if !crate::backend::wait_readable(fd, left, "rdma_cm event channel")? {
            return Err(Error::Timeout(format!(
                "rdma_cm: no event while waiting for {waiting_for}"
            )));
        }
        let mut ev: *mut rdma_cm_event = std::ptr::null_mut();
        // SAFETY: live channel with an event ready; `ev` receives it.
        check(
            "rdma_get_cm_event",
            unsafe { rdma_get_cm_event(self.ch, &mut ev) },
            String::new,
        )?;
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
        Ok(out)
    }

    /// Waits for an event of kind `want`; any other is an error naming it.
    fn expect(&self, want: u32, deadline: Instant) -> Result<Event> {
        let ev = self.next_event(deadline, event_name(want))?;
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
        // SAFETY: live id; both outputs valid for the call.
        check(
            "rdma_init_qp_attr",
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

/// `ibv_ah_attr` as our address vector.
fn av_from_raw(ah: &ibv_ah_attr) -> AddressVector {
    AddressVector {
        dlid: ah.dlid,
        port: ah.port_num,
        service_level: ah.sl,
        grh: (ah.is_global != 0).then_some(Grh {
            // SAFETY: every bit pattern of the GID union is valid.
            dgid: unsafe { ah.grh.dgid.raw },
            sgid_index: ah.grh.sgid_index,
            hop_limit: ah.grh.hop_limit,
            traffic_class: ah.grh.traffic_class,
            flow_label: ah.grh.flow_label,
        }),
    }
}

/// `ibv_qp_attr` with `mask` as our attributes (the fields the mask names).
fn attr_from_raw(a: &ibv_qp_attr, mask: u32) -> QpAttr {
    use crate::qp_attr::QpAttrMask as M;
    let m = M::from_bits_truncate(mask);
    let has = |b: M| m.contains(b);
    QpAttr {
        pkey_index: has(M::PKEY_INDEX).then_some(a.pkey_index),
        port: has(M::PORT).then_some(a.port_num),
        access: has(M::ACCESS_FLAGS).then(|| Access::from_bits_truncate(a.qp_access_flags)),
        av: has(M::AV).then(|| av_from_raw(&a.ah_attr)),
        path_mtu: has(M::PATH_MTU).then_some(a.path_mtu),
        dest_qpn: has(M::DEST_QPN).then_some(a.dest_qp_num),
        rq_psn: has(M::RQ_PSN).then_some(a.rq_psn),
        max_dest_rd_atomic: has(M::MAX_DEST_RD_ATOMIC).then_some(a.max_dest_rd_atomic),
        min_rnr_timer: has(M::MIN_RNR_TIMER).then_some(a.min_rnr_timer),
        sq_psn: has(M::SQ_PSN).then_some(a.sq_psn),
        timeout: has(M::TIMEOUT).then_some(a.timeout),
        retry_cnt: has(M::RETRY_CNT).then_some(a.retry_cnt),
        rnr_retry: has(M::RNR_RETRY).then_some(a.rnr_retry),
        qkey: has(M::QKEY).then_some(a.qkey),
        max_rd_atomic: has(M::MAX_QP_RD_ATOMIC).then_some(a.max_rd_atomic),
    }
}

/// The CM's INIT, RTR and RTS attributes for `qp`, with our responder
/// access, `min_rnr_timer` and `rnr_retry`.
fn steps_from(id: &Id, qp: &Qp) -> Result<[QpAttr; 3]> {
    use ibv_qp_state::*;
    let cfg = qp.config();
    let mut init = id.qp_attr(IBV_QPS_INIT)?;
    init.access = Some(Access::all());
    let mut rtr = id.qp_attr(IBV_QPS_RTR)?;
    rtr.min_rnr_timer = Some(cfg.min_rnr_timer);
    let mut rts = id.qp_attr(IBV_QPS_RTS)?;
    rts.rnr_retry = Some(cfg.rnr_retry);
    Ok([init, rtr, rts])
}

/// A UD QP's steps: the CM's INIT attributes (pkey index, port, qkey),
/// RTR with none, RTS with SQ_PSN 0 (librdmacm's `ucma_init_ud_qp`).
fn ud_steps_from(id: &Id) -> Result<[QpAttr; 3]> {
    let init = id.qp_attr(ibv_qp_state::IBV_QPS_INIT)?;
    Ok([init, QpAttr::default(), QpAttr::rts_unreliable(0)])
}

fn conn_param(qp: &Qp, private: &[u8; OFFER_LEN]) -> rdma_conn_param {
    rdma_conn_param {
        private_data: private.as_ptr().cast(),
        private_data_len: OFFER_LEN as u8,
        responder_resources: 1,
        initiator_depth: 1,
        flow_control: 0,
        retry_count: 7,
        rnr_retry_count: qp.config().rnr_retry,
        // The REQ/REP say whether the QP takes its receives from an SRQ.
        srq: qp.srq.is_some() as u8,
        qp_num: qp.endpoint().qpn,
    }
}

/// `qp` must be a verbs QP in RESET on the device the CM picks, UD when
/// `ud` says so (the UDP port space) and RC or UC when not.
fn check_qp(qp: &Qp, id: &Id, peer: &str, ud: bool) -> Result<()> {
    let ours = check_qp_here(qp, ud)?;
    match id.device() {
        Some(d) if d == ours => Ok(()),
        d => Err(Error::Exchange(format!(
            "rdma_cm reaches {peer} through device {}, but the QP is on {ours}",
            d.as_deref().unwrap_or("(none)")
        ))),
    }
}

/// What [`check_qp`] checks without the CM (a verbs QP, its transport, in
/// RESET): run before any id is made, so a wrong QP is refused at once.
/// Returns the QP's device name.
fn check_qp_here(qp: &Qp, ud: bool) -> Result<String> {
    let Some(ours) = qp.verbs_device() else {
        return Err(Error::Invalid(
            "rdma_cm needs a kernel RDMA device (the sim has no connection manager)".into(),
        ));
    };
    let is_ud = qp.config().qp_type == crate::QpType::Ud;
    if is_ud != ud {
        return Err(Error::Invalid(if ud {
            format!(
                "a UD connection through rdma_cm needs a UD QP (this one is {})",
                qp.config().qp_type.name()
            )
        } else {
            "a UD QP connects through rdma_cm with cm::connect_ud / CmListener::bind_ud".into()
        }));
    }
    if qp.state() != crate::qp_attr::QpState::Reset {
        return Err(Error::Invalid(format!(
            "connecting through rdma_cm needs the QP in RESET (it is in {:?})",
            qp.state()
        )));
    }
    Ok(ours.to_string())
}

fn sockaddr(addr: std::net::SocketAddrV4) -> libc::sockaddr_in {
    // SAFETY: plain data; zero is valid.
    let mut s: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    s.sin_family = libc::AF_INET as libc::sa_family_t;
    s.sin_port = addr.port().to_be();
    s.sin_addr.s_addr = u32::from(*addr.ip()).to_be();
    s
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

/// Listens for connection requests on a CM port (all local addresses).
pub struct CmListener {
    id: Id,
    port: u16,
    ud: bool,
}

impl CmListener {
    /// Binds `0.0.0.0:port` in the CM's TCP port space and listens.
    ///
    /// Errors: [`Error::Verbs`] naming `rdma_bind_addr` (e.g. `EADDRINUSE`)
    /// or `rdma_listen`.
    pub fn bind(port: u16) -> Result<CmListener> {
        Self::bind_in(port, false)
    }

    /// Binds `0.0.0.0:port` in the CM's UDP port space (`RDMA_PS_UDP`: UD
    /// QPs, [`Self::accept_ud`]) and listens. The UDP and TCP port spaces
    /// are apart: one port number may be bound in each.
    ///
    /// Errors: as [`Self::bind`].
    pub fn bind_ud(port: u16) -> Result<CmListener> {
        Self::bind_in(port, true)
    }

    fn bind_in(port: u16, ud: bool) -> Result<CmListener> {
        let ps = if ud {
            rdma_port_space::RDMA_PS_UDP
        } else {
            rdma_port_space::RDMA_PS_TCP
        };
        let id = Id::new(ps)?;
        let mut sa = sockaddr(std::net::SocketAddrV4::new(
            std::net::Ipv4Addr::UNSPECIFIED,
            port,
        ));
        // SAFETY: live id; `sa` is a valid sockaddr_in for the call.
        let rc = unsafe { rdma_bind_addr(id.id, (&mut sa as *mut libc::sockaddr_in).cast()) };
        check("rdma_bind_addr", rc, || format!(" (0.0.0.0:{port})"))?;
        // SAFETY: live, bound id.
        check("rdma_listen", unsafe { rdma_listen(id.id, 8) }, || {
            format!(" (port {port})")
        })?;
        Ok(CmListener { id, port, ud })
    }

    /// Waits up to `timeout` for one connection request, takes `qp` (in
    /// RESET, on the device the request arrived on) to RTS with the CM's
    /// attributes, accepts with `offer`, and waits for the RTU. Returns the
    /// connection and the peer's offer.
    ///
    /// Errors: [`Error::Timeout`]; [`Error::Exchange`] for a request from
    /// another device or with foreign private data (the request is
    /// rejected); the QP's transition errors (it goes back to RESET).
    pub fn accept(
        &self,
        qp: &mut Qp,
        offer: &CmOffer,
        timeout: Duration,
    ) -> Result<(CmConnection, CmOffer)> {
        self.accept_in(qp, offer, timeout, false)
    }

    /// On a [`Self::bind_ud`] listener: waits up to `timeout` for one
    /// request, brings the UD `qp` (in RESET) to RTS with the CM's qkey
    /// ([`UDP_QKEY`]), and answers with its QPN and `offer`. Returns the
    /// id (kept until the caller is done) and the peer's offer. The
    /// request names no QP: the peer's QPN and address come with its first
    /// datagram ([`crate::Completion::src_qp`],
    /// [`crate::Pd::create_ah_from_recv`]).
    ///
    /// Errors: as [`Self::accept`]; a listener of the TCP space, or a QP
    /// not UD ([`Error::Invalid`]).
    pub fn accept_ud(
        &self,
        qp: &mut Qp,
        offer: &CmOffer,
        timeout: Duration,
    ) -> Result<(CmConnection, CmOffer)> {
        self.accept_in(qp, offer, timeout, true)
    }

    /// [`Self::accept`] (`ud` false: then the RTU is waited for) and
    /// [`Self::accept_ud`] (`ud`: SIDR has no RTU).
    fn accept_in(
        &self,
        qp: &mut Qp,
        offer: &CmOffer,
        timeout: Duration,
        ud: bool,
    ) -> Result<(CmConnection, CmOffer)> {
        let deadline = Instant::now() + timeout;
        let (conn, peer) = self.request(qp, ud, deadline)?;
        let [init, rtr, rts] = if ud {
            ud_steps_from(&conn)?
        } else {
            steps_from(&conn, qp)?
        };
        qp.connect_steps(init, rtr, rts)?;
        let private = offer.encode();
        let mut param = conn_param(qp, &private);
        // SAFETY: live id of a request; `param` and `private` outlive the call.
        let rc = unsafe { rdma_accept(conn.id, &mut param) };
        check("rdma_accept", rc, String::new)?;
        if !ud {
            conn.expect(rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED, deadline)?;
        }
        Ok((CmConnection { id: conn, ud }, peer))
    }

    /// The next connection request, on an id of its own, with the peer's
    /// offer; a request this side cannot take is rejected.
    fn request(&self, qp: &Qp, ud: bool, deadline: Instant) -> Result<(Id, CmOffer)> {
        if ud != self.ud {
            return Err(Error::Invalid(if ud {
                "accept_ud needs a listener of CmListener::bind_ud".into()
            } else {
                "a CmListener::bind_ud listener takes UD QPs: accept_ud".into()
            }));
        }
        check_qp_here(qp, ud)?;
        let req = loop {
            let ev = self.id.next_event(deadline, "CONNECT_REQUEST")?;
            if ev.kind == rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST {
                break ev;
            }
            // Anything else on a listener (e.g. a device going away) is
            // not for us; keep waiting.
        };
        let conn = Id::adopt(req.id)?;
        let peer = CmOffer::decode(&req.private).and_then(|p| {
            check_qp(qp, &conn, &format!("port {}", self.port), ud)?;
            Ok(p)
        });
        match peer {
            Ok(p) => Ok((conn, p)),
            Err(e) => {
                // SAFETY: live id of an unanswered request.
                unsafe { rdma_reject(conn.id, std::ptr::null(), 0) };
                Err(e)
            }
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
    let (c, p, _) = connect_in(qp, host, port, offer, timeout, false)?;
    Ok((c, p))
}

/// Resolves a UD peer through the CM's UDP port space (SIDR) at
/// `host:port`, a [`CmListener::bind_ud`] listener, and brings the UD `qp`
/// (in RESET) to RTS with the CM's qkey ([`UDP_QKEY`]). Returns the id
/// (kept until the caller is done) and what the peer answered: its
/// address, QPN and qkey. Retried as [`connect`] is.
///
/// Errors: as [`connect`]; a QP not UD ([`Error::Invalid`]).
pub fn connect_ud(
    qp: &mut Qp,
    host: &str,
    port: u16,
    offer: &CmOffer,
    timeout: Duration,
) -> Result<(CmConnection, UdPeer)> {
    let (c, offer, ud) = connect_in(qp, host, port, offer, timeout, true)?;
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

fn connect_in(
    qp: &mut Qp,
    host: &str,
    port: u16,
    offer: &CmOffer,
    timeout: Duration,
    ud: bool,
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
    let deadline = Instant::now() + timeout;
    loop {
        match connect_once(qp, dst, offer, deadline, ud) {
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
                std::thread::sleep(Duration::from_millis(100));
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
fn sidr(
    qp: &Qp,
    id: &Id,
    private: &[u8; OFFER_LEN],
    dst: std::net::SocketAddrV4,
    deadline: Instant,
) -> Result<(CmOffer, (ibv_ah_attr, u32, u32))> {
    send_connect(qp, id, private, dst)?;
    let ev = id.next_event(deadline, "ESTABLISHED")?;
    if ev.kind != rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED {
        return Err(Error::Exchange(format!(
            "rdma_cm: {} (status {}) from {dst}",
            event_name(ev.kind),
            ev.status
        )));
    }
    Ok((CmOffer::decode(&ev.private)?, ev.ud))
}

fn connect_once(
    qp: &mut Qp,
    dst: std::net::SocketAddrV4,
    offer: &CmOffer,
    deadline: Instant,
    ud: bool,
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
    id.expect(RDMA_CM_EVENT_ADDR_RESOLVED, deadline)?;
    check_qp(qp, &id, &dst.to_string(), ud)?;
    // SAFETY: live id with its address resolved.
    check(
        "rdma_resolve_route",
        unsafe { rdma_resolve_route(id.id, 2000) },
        || format!(" ({dst})"),
    )?;
    id.expect(RDMA_CM_EVENT_ROUTE_RESOLVED, deadline)?;
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
        let r = sidr(qp, &id, &private, dst, deadline);
        return match r {
            Ok((peer, ud_param)) => Ok((CmConnection { id, ud: true }, peer, ud_param)),
            Err(e) => {
                qp.modify(crate::qp_attr::QpState::Reset, &QpAttr::default())?;
                Err(e)
            }
        };
    }
    send_connect(qp, &id, &private, dst)?;
    let rep = id.next_event(deadline, "CONNECT_RESPONSE")?;
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
