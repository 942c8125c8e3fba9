//! A two-host run's connection (`Link`, `connect_link`): the exchange of
//! both sides' facts, the settings line both compare, and the QPs connected
//! by the exchanged facts or through rdma_cm (on UD an AH to the peer's
//! QP, on DC to its DCT: nothing to connect).

use super::*;

/// A two-host connection for one run: this side's QP and buffer
/// (`[0, size)` what it sends or where reads land, `[size, 2 size)` what
/// the peer writes, reads or adds to), the peer's offered half, the TCP
/// connection for the closing handshake.
pub(super) struct Link {
    /// The QP this side posts from and takes send completions on (a DCI on DC).
    pub(super) qp: Qp,
    /// DC: this side's DCT, where the peer's SENDs complete.
    pub(super) dct: Option<Qp>,
    /// The SRQ receives go to (`--use-srq`, on a side that receives; on DC the DCT's).
    pub(super) srq: Option<rdma_direct::Srq>,
    /// UD: the AH toward the peer's port.
    pub(super) ah: Option<rdma_direct::Ah>,
    /// DC: the peer's DCT, which every post of `qp` names (`Qp::post_dc`).
    pub(super) dc: Option<DcTarget>,
    /// The other QPs of a `-q` run, connected in the same order on both sides.
    pub(super) more: Vec<Qp>,
    pub(super) mr: Mr,
    pub(super) peer: rdma_direct::exchange::ConnInfo,
    pub(super) tcp: std::net::TcpStream,
    pub(super) client: bool,
    pub(super) info: RunInfo,
    pub(super) _cm: Option<CmConn>,
}

/// Swaps the facts of both sides over the exchange, checks that both run
/// the same test with the same settings (one line each way), connects the
/// QP and waits until both sides are in RTS. The device is `lat.device`,
/// opened here (not the sim: one process's device), or `ctx` (tests: both
/// sides threads of one process on one sim).
pub(super) fn connect_link(
    test: AnyTest,
    cfg: &BwConfig,
    qcfg: &QpConfig,
    role: &Role,
    ctx: Option<&Context>,
) -> Result<Link> {
    use rdma_direct::exchange::{self, ConnInfo};
    let lat = &cfg.lat;
    let opened;
    let ctx = match ctx {
        Some(c) => c,
        None => {
            opened = Context::open_with(&lat.device, lat.backend)?;
            if opened.data_path() == rdma_direct::DataPath::Direct
                && lat.device == rdma_direct::SIM_DEVICE
            {
                return Err(Error::Invalid(
                    "the sim is one process's device: run both sides in one process (no --server, no host)"
                        .into(),
                ));
            }
            &opened
        }
    };
    let size = if test.moves_8_bytes() { 8 } else { lat.size } as usize;
    let pd = ctx.alloc_pd()?;
    // [0, size) what this side sends; from size, the peer's half (on UD
    // 40 bytes more: a receive starts with the GRH slot).
    let mr = pd.alloc_mr(
        2 * size + 40,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
    )?;
    // --use-srq: a side that receives takes its receives from an SRQ (as
    // perftest, the receiving side makes it: both for send_lat, the
    // server for send_bw).
    let client = matches!(role, Role::Client { .. });
    let receives = matches!(test, AnyTest::Lat(LatTest::Send))
        || (matches!(test, AnyTest::Bw(BwTest::Send)) && !client);
    let side = SideQps::new(&pd, qcfg, lat.use_srq && receives)?;
    let psn = Qp::random_psn();
    let mine = side.conn_info(psn, &mr, size)?;
    let SideQps { mut qp, dct, srq } = side;
    let ud = qcfg.qp_type == rdma_direct::QpType::Ud;
    let dc = qcfg.qp_type.is_dc();
    if ud && size as u32 > qp.ud_mtu() {
        return Err(Error::Invalid(format!(
            "-c UD -s {size}: a UD message is at most the port's active MTU, {} bytes",
            qp.ud_mtu()
        )));
    }
    let (peer, mut tcp, role_name, client) = match role {
        Role::Server { listener } => {
            let (p, s) = listener.accept(&mine)?;
            (p, s, "server", false)
        }
        Role::Client { host, port } => {
            let (p, s) = exchange::connect(host, *port, Duration::from_secs(60), &mine)?;
            (p, s, "client", true)
        }
    };
    // Both sides must run the same thing: one line each way.
    let params = settings_line(test, cfg);
    let theirs = exchange::swap_line(&mut tcp, &params)?;
    if let Some(diff) = settings_mismatch(&params, theirs.trim_end()) {
        return Err(Error::Exchange(format!(
            "{diff}: give both sides the same test and flags"
        )));
    }
    if peer.len < size as u64
        || peer.addr.checked_add(peer.len).is_none()
        || peer.addr < size as u64
    {
        return Err(Error::Exchange(format!(
            "the peer offers {} bytes at {:#x}; this run needs {size}",
            peer.len, peer.addr
        )));
    }
    // DC: the peer's DCT, which this side's DCI names in every post.
    let dc_target = if dc {
        Some(DcTarget::of_peer(&pd, &qp, &peer)?)
    } else {
        None
    };
    // The connection through the CM lives until the run's closing barrier.
    let (cm, ah) = if dc {
        (None, None)
    } else if ud {
        if peer.qkey == 0 {
            return Err(Error::Exchange(
                "the peer's UD QP sent qkey 0 (a build before the exchange's qkey field?)".into(),
            ));
        }
        (None, Some(pd.create_ah(&qp.av_to(&peer.endpoint))?))
    } else {
        (
            connect_qp(&mut qp, lat.rdma_cm, role, psn, &peer, &mine)?,
            None,
        )
    };
    // -q: the other QPs swap their facts over the same connection.
    let mut more = Vec::new();
    for _ in 1..cfg.qps {
        let mut q = pd.create_qp(qcfg)?;
        let psn = Qp::random_psn();
        let mine_q = ConnInfo {
            endpoint: q.endpoint(),
            psn,
            ..mine
        };
        let peer_q = exchange::swap(&mut tcp, &mine_q)?;
        q.connect_remote(psn, &peer_q.endpoint, peer_q.psn)?;
        more.push(q);
    }
    super::barrier(&mut tcp)?;
    let path = qp.path();
    let info = RunInfo {
        qps: cfg.qps,
        rdma_cm: lat.rdma_cm,
        completion: cfg_completion(lat),
        role: Some(role_name),
        device: ctx.name().into(),
        data_path: qp.data_path().as_str(),
        inline: qcfg.max_inline,
        tx_depth: match test {
            AnyTest::Lat(_) => 1,
            AnyTest::Bw(_) => cfg.tx_depth,
        },
        qp_type: qcfg.qp_type,
        use_srq: lat.use_srq,
        cqe_comp: lat.cqe_comp,
        cqe_bytes: None,
        inline_recv: qcfg.inline_recv,
        sides: [
            SideInfo {
                qpn: qp.qp_num(),
                path,
                rkey: mr.rkey().0,
                vaddr: mr.addr(),
            },
            SideInfo {
                qpn: peer.endpoint.qpn,
                path: rdma_direct::PathInfo {
                    gid: peer.endpoint.gid,
                    lid: peer.endpoint.lid,
                    sq_psn: peer.psn,
                    dest_qpn: qp.qp_num(),
                    ..path
                },
                rkey: peer.rkey.0,
                vaddr: peer.addr - size as u64,
            },
        ],
    };
    Ok(Link {
        qp,
        dct,
        srq,
        ah,
        dc: dc_target,
        more,
        mr,
        peer,
        tcp,
        client,
        info,
        _cm: cm,
    })
}

#[cfg(feature = "verbs")]
pub(super) type CmConn = rdma_direct::cm::CmConnection;
#[cfg(not(feature = "verbs"))]
pub(super) type CmConn = ();

/// Connects `qp` toward the peer: with the exchanged facts, or (`-R`)
/// through the RDMA connection manager on the same port number.
pub(super) fn connect_qp(
    qp: &mut Qp,
    rdma_cm: bool,
    role: &Role,
    psn: u32,
    peer: &rdma_direct::exchange::ConnInfo,
    mine: &rdma_direct::exchange::ConnInfo,
) -> Result<Option<CmConn>> {
    if !rdma_cm {
        qp.connect_remote(psn, &peer.endpoint, peer.psn)?;
        return Ok(None);
    }
    #[cfg(feature = "verbs")]
    {
        let offer = rdma_direct::cm::CmOffer {
            rkey: mine.rkey,
            addr: mine.addr,
            len: mine.len,
        };
        let wait = Duration::from_secs(60);
        let conn = match role {
            Role::Server { listener } => {
                rdma_direct::cm::CmListener::bind(listener.port())?
                    .accept(qp, &offer, wait)?
                    .0
            }
            Role::Client { host, port } => {
                rdma_direct::cm::connect(qp, host, *port, &offer, wait)?.0
            }
        };
        Ok(Some(conn))
    }
    #[cfg(not(feature = "verbs"))]
    {
        let _ = (role, mine);
        Err(Error::Invalid(
            "rdma_cm (-R) needs the `verbs` feature".into(),
        ))
    }
}
