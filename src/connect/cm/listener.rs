//! The passive side of rdma_cm: [`CmListener`] binds, listens, and accepts
//! connection requests whose private data carries our offer.

use super::*;

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
        block_on(self.accept_in(qp, offer, timeout, false, &mut Blocking))
    }

    /// [`Self::accept`] as a future, on any runtime: the CM's event
    /// channel fd (non-blocking) is watched by a [`Reactor`](crate::Reactor)
    /// ([`default_reactor`](crate::reactor::default_reactor)), and the
    /// timeout by a `timerfd` beside it. The future is `Send`. Dropped
    /// before it resolves, the request being answered is dropped with its
    /// id (the peer sees a timeout or a reject) and `qp` may be left in
    /// INIT, RTR or RTS: reset it before connecting it again.
    ///
    /// Errors: as [`Self::accept`]; [`Error::Reactor`].
    pub async fn accept_async(
        &self,
        qp: &mut Qp,
        offer: &CmOffer,
        timeout: Duration,
    ) -> Result<(CmConnection, CmOffer)> {
        let mut w = Awaited::default();
        self.accept_in(qp, offer, timeout, false, &mut w).await
    }

    /// On a [`Self::bind_ud`] listener: waits up to `timeout` for one
    /// request, brings the UD `qp` (in RESET) to RTS with the CM's qkey
    /// ([`UDP_QKEY`]), and answers with its QPN and `offer`. Returns the
    /// id (kept until the caller is done) and the peer's offer. The
    /// request names no QP: the peer's QPN and address come with its first
    /// datagram ([`crate::Completion::src_qp`],
    /// [`crate::Pd::create_ah_from_recv`]).
    ///
    /// Errors: as [`Self::accept`]; a listener of the TCP space
    /// ([`Error::Invalid`]), or a QP not UD ([`Error::WrongTransport`]).
    pub fn accept_ud(
        &self,
        qp: &mut Qp,
        offer: &CmOffer,
        timeout: Duration,
    ) -> Result<(CmConnection, CmOffer)> {
        block_on(self.accept_in(qp, offer, timeout, true, &mut Blocking))
    }

    /// [`Self::accept_ud`] as a future, as [`Self::accept_async`].
    ///
    /// Errors: as [`Self::accept_ud`]; [`Error::Reactor`].
    pub async fn accept_ud_async(
        &self,
        qp: &mut Qp,
        offer: &CmOffer,
        timeout: Duration,
    ) -> Result<(CmConnection, CmOffer)> {
        let mut w = Awaited::default();
        self.accept_in(qp, offer, timeout, true, &mut w).await
    }

    /// [`Self::accept`] (`ud` false: then the RTU is waited for) and
    /// [`Self::accept_ud`] (`ud`: SIDR has no RTU), waiting through `w`.
    async fn accept_in<W: FdWait>(
        &self,
        qp: &mut Qp,
        offer: &CmOffer,
        timeout: Duration,
        ud: bool,
        w: &mut W,
    ) -> Result<(CmConnection, CmOffer)> {
        let deadline = deadline_after(timeout);
        let (conn, peer) = self.request(qp, ud, deadline, w).await?;
        let [init, rtr, rts] = if ud {
            ud_steps_from(&conn)?
        } else {
            steps_from(&conn, qp)?
        };
        qp.connect_steps(init, rtr, rts)?;
        let private = offer.encode();
        {
            let mut param = conn_param(qp, &private);
            // SAFETY: live id of a request; `param` and `private` outlive the call.
            let rc = unsafe { rdma_accept(conn.id, &mut param) };
            check("rdma_accept", rc, String::new)?;
        }
        if !ud {
            conn.expect(w, rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED, deadline)
                .await?;
        }
        Ok((CmConnection { id: conn, ud }, peer))
    }

    /// The next connection request, on an id of its own, with the peer's
    /// offer; a request this side cannot take is rejected.
    async fn request<W: FdWait>(
        &self,
        qp: &mut Qp,
        ud: bool,
        deadline: Instant,
        w: &mut W,
    ) -> Result<(Id, CmOffer)> {
        if ud != self.ud {
            return Err(Error::Invalid(if ud {
                "accept_ud needs a listener of CmListener::bind_ud".into()
            } else {
                "a CmListener::bind_ud listener takes UD QPs: accept_ud".into()
            }));
        }
        check_qp_here(qp, ud)?;
        let req = loop {
            let ev = self.id.next_event(w, deadline, "CONNECT_REQUEST").await?;
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
