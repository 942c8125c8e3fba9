//! Creating a QP: the configuration checked, the backend's QP made (the
//! sim, ConnectX, verbs), its own CQ or a shared one, an SRQ's receives.

use crate::backend::direct;
use crate::backend::QpBackend;
#[cfg(feature = "verbs")]
use crate::backend::{ibv, verbs};
use crate::device::handles::{PdInner, PdKind, SharedKind};
use crate::ib::config::{CqSizing, QpConfig};
#[cfg(feature = "verbs")]
use crate::ib::device::DataPath;
use crate::ib::error::{Error, Result};
use crate::ib::qp_attr::{Endpoint, QpState, QpType};
use crate::qp::backend;
use crate::qp::held::{HeldQueue, Owned};
use crate::qp::{Qp, QpKind, ReclaimOnDrop};
use crate::srq::{Srq, SrqKind};
use mlx5_dv::driver::CqCredits;
use mlx5_dv::sim;
use std::sync::Arc;

impl Qp {
    /// [`Self::create_qp`], completing into its own CQ or into `shared`'s.
    pub(crate) fn create(
        pd_inner: &Arc<PdInner>,
        cfg: &QpConfig,
        shared: Option<(&SharedKind, &CqCredits, usize)>,
        srq: Option<&Srq>,
    ) -> Result<Qp> {
        if let Some(s) = srq {
            if !Arc::ptr_eq(s.pd(), pd_inner) {
                return Err(Error::ForeignPd {
                    object: crate::PdObject::Srq,
                });
            }
        }
        dc_shape(cfg, srq.is_some())?;
        // On an SRQ the receive limits are the SRQ's (its CQ room, its SGEs).
        let cfg = &match srq {
            Some(s) => QpConfig {
                max_recv_wr: s.max_wr(),
                max_recv_sge: s.max_sge(),
                ..*cfg
            },
            None => *cfg,
        };
        let direct_srq = match srq.map(Srq::kind) {
            Some(SrqKind::Direct(d)) => Some(d),
            _ => None,
        };
        // (A DCT sends nothing: its send limits are not looked at.)
        let cfg = &match cfg.qp_type {
            QpType::Dct => QpConfig {
                max_send_wr: 1,
                max_send_sge: 0,
                max_inline: 0,
                ..*cfg
            },
            QpType::Dci => QpConfig {
                max_recv_wr: 0,
                max_recv_sge: 0,
                ..*cfg
            },
            _ => *cfg,
        };
        if cfg.max_send_wr == 0 || cfg.max_send_wr > 1 << 14 {
            return Err(Error::Config {
                field: "max_send_wr",
                value: cfg.max_send_wr as u64,
                min: 1,
                max: 1 << 14,
            });
        }
        if cfg.max_recv_wr > 1 << 14 {
            return Err(Error::Config {
                field: "max_recv_wr",
                value: cfg.max_recv_wr as u64,
                min: 0,
                max: 1 << 14,
            });
        }
        if cfg.rnr_retry > 7 {
            return Err(Error::Config {
                field: "rnr_retry (7: retry forever)",
                value: cfg.rnr_retry as u64,
                min: 0,
                max: 7,
            });
        }
        if cfg.min_rnr_timer > 31 {
            return Err(Error::Config {
                field: "min_rnr_timer (IB spec table 45 code)",
                value: cfg.min_rnr_timer as u64,
                min: 0,
                max: 31,
            });
        }
        let cq_depth = match cfg.cq_depth {
            Some(_) if shared.is_some() => {
                return Err(Error::Invalid(
                    "cq_depth is the shared CQ's: leave QpConfig::cq_depth None".into(),
                ))
            }
            Some(d) if d == 0 || d > 1 << 22 => {
                return Err(Error::Config {
                    field: "cq_depth",
                    value: d as u64,
                    min: 1,
                    max: 1 << 22,
                })
            }
            Some(d) => d,
            // Default: room for a completion of every outstanding send and
            // posted receive, with the sizing helper's headroom.
            None => CqSizing::new().qp(cfg).depth()?,
        };
        // CQE compression: the QP's own CQ's, or the shared CQ's. Not for a
        // QP on an SRQ (responder mini-CQEs carry no counter; the SRQ is a
        // linked list completing out of index order).
        let compressed = match shared {
            Some(_) if cfg.cqe_compression => {
                return Err(Error::Invalid(
                    "cqe_compression is the shared CQ's (Pd::create_compressed_shared_cq): \
                     leave QpConfig::cqe_compression false"
                        .into(),
                ))
            }
            Some((SharedKind::Direct(c), ..)) => c.compressed,
            _ => cfg.cqe_compression,
        };
        // Completion timestamps: the QP's own CQ's, or the shared CQ's.
        if shared.is_some() && cfg.completion_timestamps {
            return Err(Error::Invalid(
                "completion_timestamps is the shared CQ's (Pd::create_timestamped_shared_cq): \
                 leave QpConfig::completion_timestamps false"
                    .into(),
            ));
        }
        if cfg.completion_timestamps && cfg.cqe_compression {
            return Err(Error::Invalid(
                "completion timestamps with CQE compression: mini-CQEs carry no timestamp; \
                 ask for one of them"
                    .into(),
            ));
        }
        let own_cq = crate::ib::config::CqOptions {
            compress: cfg.cqe_compression,
            timestamps: cfg.completion_timestamps,
        };
        if compressed && srq.is_some() {
            return Err(Error::Invalid(
                "a CQ with CQE compression cannot serve a QP on an SRQ: responder mini-CQEs \
                 carry no WQE counter, and an SRQ's WQEs complete out of index order"
                    .into(),
            ));
        }
        let direct_cq = || match shared {
            None => Ok::<_, Error>(direct::CqFor::Own(cq_depth, own_cq)),
            Some((SharedKind::Direct(c), credits, _)) => Ok(direct::CqFor::Shared(c, credits)),
            #[cfg(feature = "verbs")]
            Some((SharedKind::Verbs(..), ..)) => Err(Error::PathMismatch {
                qp: "direct-path",
                object: crate::PdObject::Cq,
                theirs: "verbs",
            }),
        };
        inline_recv_gate(cfg, pd_inner, shared.is_some())?;
        let mut kind = match &pd_inner.kind {
            PdKind::Sim(dev, pdn) => {
                direct_limits(cfg)?;
                if cfg.port != 1 {
                    return Err(Error::Config {
                        field: "port (the sim has one)",
                        value: cfg.port as u64,
                        min: 1,
                        max: 1,
                    });
                }
                if cfg.gid_index.is_some() {
                    return Err(Error::Unsupported {
                        device: crate::SIM_DEVICE.into(),
                        feature: crate::Feature::GidTable,
                    });
                }
                // WQEBBs per WQE: ctrl + raddr + the larger of the SGE list and
                // the inline segment; with memory windows, at least a bind's UMR.
                let per_wqe = direct::sq_max_wqebbs(
                    cfg.qp_type,
                    cfg.max_send_sge,
                    cfg.max_inline,
                    cfg.memory_windows,
                );
                let wqebbs = (cfg.max_send_wr * per_wqe).next_power_of_two();
                if wqebbs > sim::MAX_SQ_WQEBBS {
                    return Err(Error::Invalid(format!(
                        "max_send_wr {} of WQEs up to {per_wqe} WQEBBs (max_send_sge {}, max_inline {}) needs \
                         {wqebbs} WQEBBs; the sim's SQ holds at most {}",
                        cfg.max_send_wr,
                        cfg.max_send_sge,
                        cfg.max_inline,
                        sim::MAX_SQ_WQEBBS
                    )));
                }
                QpKind::Direct(direct::DirectQp::create_sim(
                    dev,
                    *pdn,
                    wqebbs,
                    cfg.max_send_wr,
                    direct_cq()?,
                    cfg.max_inline,
                    cfg.max_send_sge,
                    cfg.max_recv_wr,
                    cfg.max_recv_sge,
                    direct_srq,
                    cfg.qp_type,
                    cfg.inline_recv,
                    cfg.dc_key,
                    cfg.memory_windows,
                )?)
            }
            #[cfg(feature = "verbs")]
            PdKind::Verbs(pd, direct) => {
                let caps = ibv::QpCaps {
                    qp_type: cfg.qp_type,
                    max_send_wr: cfg.max_send_wr,
                    max_send_sge: cfg.max_send_sge,
                    max_inline: cfg.max_inline,
                    max_recv_wr: cfg.max_recv_wr.max(1),
                    max_recv_sge: cfg.max_recv_sge.max(1),
                    memory_windows: cfg.memory_windows,
                };
                if cfg.qp_type.is_dc() && *direct != DataPath::Direct {
                    // DC is mlx5's, and libmlx5 posts it only through the
                    // ibv_wr_* builders: the direct path alone has it.
                    return Err(Error::Unsupported {
                        device: pd.ctx.name.clone(),
                        feature: crate::Feature::Dc,
                    });
                }
                if *direct == DataPath::Direct {
                    direct_limits(cfg)?;
                    let mut q = direct::DirectQp::create_mlx5(
                        pd,
                        caps,
                        direct_cq()?,
                        direct_srq,
                        cfg.inline_recv,
                        cfg.dc_key,
                        cfg.memory_windows,
                    )?;
                    q.limit_recv_sge(cfg.max_recv_sge);
                    QpKind::Direct(q)
                } else {
                    if cfg.cqe_compression {
                        return Err(Error::Unsupported {
                            device: pd.ctx.name.clone(),
                            feature: crate::Feature::CqeCompression,
                        });
                    }
                    // The device is asked for at least one receive SGE;
                    // receives are held to what the caller asked.
                    let choice = match shared {
                        None => verbs::CqChoice::Own(cq_depth, cfg.completion_timestamps),
                        Some((SharedKind::Verbs(c), credits, _)) => {
                            verbs::CqChoice::Shared(c, credits)
                        }
                        Some((SharedKind::Direct(_), ..)) => {
                            return Err(Error::PathMismatch {
                                qp: "verbs",
                                object: crate::PdObject::Cq,
                                theirs: "direct-path",
                            })
                        }
                    };
                    let verbs_srq = match srq.map(Srq::kind) {
                        Some(SrqKind::Verbs(v)) => Some(v),
                        Some(SrqKind::Direct(_)) => {
                            return Err(Error::PathMismatch {
                                qp: "verbs",
                                object: crate::PdObject::Srq,
                                theirs: "direct-path",
                            })
                        }
                        None => None,
                    };
                    let mut q = verbs::create_qp(pd, caps, choice, verbs_srq)?;
                    q.limit_recv_sge(cfg.max_recv_sge);
                    QpKind::Verbs(q)
                }
            }
        };
        let local = match &pd_inner.kind {
            PdKind::Sim(..) => Endpoint {
                qpn: 0,
                lid: 0,
                gid: [0; 16],
                gid_index: None,
                active_mtu: 0,
                roce: false,
            },
            #[cfg(feature = "verbs")]
            PdKind::Verbs(pd, _) => {
                let port = pd.ctx.query_port(cfg.port)?;
                let roce = port.link_layer == 2;
                let (gid_index, gid) = if roce {
                    let (i, g) = pd.ctx.choose_gid(cfg.port, &port, cfg.gid_index)?;
                    (Some(i), g)
                } else {
                    (None, [0; 16])
                };
                Endpoint {
                    qpn: 0,
                    lid: port.lid,
                    gid,
                    gid_index,
                    active_mtu: port.active_mtu,
                    roce,
                }
            }
        };
        let srq = match srq {
            Some(s) => Some(s.shared.link(match &mut kind {
                QpKind::Direct(q) => q.srq_credits(),
                #[cfg(feature = "verbs")]
                QpKind::Verbs(q) => Some(q.credits().clone()),
            })?),
            None => None,
        };
        let progress = backend!(&kind, progress());
        pd_inner.dereg.add_qp(progress);
        let mut qp = Qp {
            pd_id: pd_inner.id,
            kind,
            owned: Owned {
                send: HeldQueue::new(cfg.max_send_wr),
                recv: HeldQueue::new(cfg.max_recv_wr),
            },
            shared_cq: shared.map(|(_, _, tag)| tag),
            state: QpState::Reset,
            cfg: *cfg,
            local,
            srq,
            pd: pd_inner.clone(),
            halves: None,
            _reclaim: ReclaimOnDrop(pd_inner.dereg.clone()),
        };
        qp.local.qpn = qp.qp_num();
        let mtu = qp.ud_mtu();
        if let Some(d) = qp.direct_mut() {
            d.set_ud_mtu(mtu);
        }
        Ok(qp)
    }
}

/// What a DC QP must be created with, before anything is made: a DCT on
/// an SRQ (its receives), a DCI on none (it receives nothing), neither
/// with inline receive (rdma-core clears scatter to CQE on DC; UCX PR
/// #5052) or CQE compression on its own CQ (a DCT's receives come from an
/// SRQ). [`Error::Invalid`] naming the conflict.
fn dc_shape(cfg: &QpConfig, on_srq: bool) -> Result<()> {
    let problem = match cfg.qp_type {
        QpType::Dct if !on_srq => {
            "a DCT takes its receives from an SRQ: create it with Pd::create_qp_on_srq"
        }
        QpType::Dci if on_srq => "a DCI receives nothing: create it with Pd::create_qp, on no SRQ",
        QpType::Dci | QpType::Dct if cfg.inline_recv.is_on() => {
            "inline receive (scatter to CQE) is not for DC QPs (rdma-core clears it on DC)"
        }
        _ => return Ok(()),
    };
    Err(Error::Invalid(problem.into()))
}

/// The direct path's limits per WQE: `max_send_sge`, `max_recv_sge` and
/// `max_inline` within them ([`Error::Config`] naming the first that is not).
fn direct_limits(cfg: &QpConfig) -> Result<()> {
    let limits = [
        (
            "max_send_sge (the direct path's SGEs per WQE)",
            cfg.max_send_sge,
            direct::MAX_SGE,
        ),
        (
            "max_recv_sge (the direct path's SGEs per receive WQE)",
            cfg.max_recv_sge,
            direct::MAX_SGE,
        ),
        (
            "max_inline (the direct path's inline bytes per WQE)",
            cfg.max_inline,
            direct::MAX_INLINE,
        ),
    ];
    for (field, value, max) in limits {
        if value as usize > max {
            return Err(Error::Config {
                field,
                value: value as u64,
                min: 0,
                max: max as u64,
            });
        }
    }
    Ok(())
}

/// Refuses an [`InlineRecv`](crate::InlineRecv) the QP cannot have, before
/// anything is created: any on the verbs path (libibverbs has no scatter
/// to CQE: [`Error::Unsupported`], [`Feature::InlineReceive`](crate::Feature::InlineReceive)),
/// `Up64` on a shared CQ or with CQE compression (64-byte CQEs:
/// [`Error::Invalid`]). On ConnectX, `Up64`'s 128-byte CQEs are made by
/// `mlx5dv_create_cq`, which refuses them with [`Error::Unsupported`]
/// where the device does (before the QP is created).
/// UD takes any and ignores it, as the kernel's mlx5 driver does.
fn inline_recv_gate(cfg: &QpConfig, pd: &PdInner, shared_cq: bool) -> Result<()> {
    use crate::InlineRecv;
    if !cfg.inline_recv.is_on() {
        return Ok(());
    }
    let up64 = cfg.inline_recv == InlineRecv::Up64;
    match &pd.kind {
        PdKind::Sim(..) => {}
        #[cfg(feature = "verbs")]
        PdKind::Verbs(p, path) => {
            // ConnectX's Up64 (128-byte CQEs) is gated where its CQ is made
            // (`DirectCq::create_mlx5_wide`).
            if *path != DataPath::Direct {
                return Err(Error::Unsupported {
                    device: p.ctx.name.clone(),
                    feature: crate::Feature::InlineReceive,
                });
            }
        }
    }
    if up64 && shared_cq {
        return Err(Error::Invalid(
            "InlineRecv::Up64 needs 128-byte CQEs: the QP's own CQ (a shared CQ has 64-byte CQEs)"
                .into(),
        ));
    }
    if up64 && cfg.cqe_compression {
        return Err(Error::Invalid(
            "InlineRecv::Up64 needs 128-byte CQEs, and CQE compression 64-byte ones:              ask for one of them"
                .into(),
        ));
    }
    Ok(())
}
