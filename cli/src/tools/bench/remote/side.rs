//! This side's QPs of a two-host run (`SideQps::new`), what it tells the
//! peer of them (`SideQps::conn_info`) and, on DC, the peer's target
//! (`DcTarget`): on RC and UC one QP; on UD one brought up with the qkey;
//! on DC (`-c DC`) a DCI to post from and a DCT on an SRQ that takes the
//! peer's operations, published by its DCT number and DC key (a version-2
//! exchange message). Each side makes both, as perftest's `-c DC` does
//! for its latency tests: the exchange stays symmetric, and the side that
//! only serves (read, atomic, the bandwidth tests) never posts from its DCI.

use super::super::transport::{DC_KEY, UD_QKEY};
use super::*;
use rdma_direct::exchange::ConnInfo;
use rdma_direct::{Ah, DcDest, Pd, QpType, Srq};

/// This side's QPs for one run.
pub(crate) struct SideQps {
    /// The QP this side posts from and takes its send completions on (a
    /// DCI on DC); on RC, UC and UD its receives come here too.
    pub(crate) qp: Qp,
    /// DC: the DCT the peer's operations reach; its receives (from `srq`)
    /// complete here.
    pub(crate) dct: Option<Qp>,
    /// Where receives are posted: `--use-srq` on a side that receives; on
    /// DC always (the DCT's SRQ).
    pub(crate) srq: Option<Srq>,
}

impl SideQps {
    /// The QPs for `qcfg`'s transport (`QpType::Dci` for `-c DC`), with an
    /// SRQ when `srq_wanted` (a receiving side's `--use-srq`; DC makes one
    /// for its DCT whatever it says). UD's QP is brought up with
    /// [`UD_QKEY`], DC's DCI to RTS and DCT to RTR (keyed [`DC_KEY`]); RC
    /// and UC stay in INIT for `connect_qp`.
    pub(crate) fn new(pd: &Pd, qcfg: &QpConfig, srq_wanted: bool) -> Result<SideQps> {
        if qcfg.qp_type.is_dc() {
            let srq = pd.create_srq(qcfg.max_recv_wr.max(1), 1)?;
            let dct_cfg = QpConfig {
                qp_type: QpType::Dct,
                dc_key: DC_KEY,
                ..*qcfg
            };
            let mut dct = pd.create_qp_on_srq(&dct_cfg, &srq)?;
            dct.ready_dct()?;
            let mut qp = pd.create_qp(&QpConfig {
                qp_type: QpType::Dci,
                ..*qcfg
            })?;
            qp.ready_dci()?;
            return Ok(SideQps {
                qp,
                dct: Some(dct),
                srq: Some(srq),
            });
        }
        let srq = if srq_wanted {
            Some(pd.create_srq(qcfg.max_recv_wr.max(1), 1)?)
        } else {
            None
        };
        let mut qp = match &srq {
            Some(s) => pd.create_qp_on_srq(qcfg, s)?,
            None => pd.create_qp(qcfg)?,
        };
        if qcfg.qp_type == QpType::Ud {
            qp.ready_ud(UD_QKEY)?;
        }
        Ok(SideQps { qp, dct: None, srq })
    }

    /// What this side tells the peer: its QP's endpoint and `psn` (on DC
    /// its DCT's number and key instead: [`ConnInfo::of_dct`], a version-2
    /// message), the qkey on UD, and `[size, 2 size)` of `mr` offered.
    ///
    /// Errors: those of [`ConnInfo::of_dct`].
    pub(crate) fn conn_info(&self, psn: u32, mr: &Mr, size: usize) -> Result<ConnInfo> {
        let base = match &self.dct {
            Some(dct) => ConnInfo::of_dct(dct)?,
            None => ConnInfo::of(&self.qp, psn),
        };
        Ok(ConnInfo {
            rkey: mr.rkey(),
            addr: mr.addr() + size as u64,
            len: size as u64,
            qkey: if self.qp.config().qp_type == QpType::Ud {
                UD_QKEY
            } else {
                0
            },
            ..base
        })
    }
}

/// The peer's DCT as this side's DCI addresses it: an AH toward its port,
/// its DCT number and its DC key (from its version-2 message).
pub(crate) struct DcTarget {
    pub(crate) ah: Ah,
    pub(crate) dctn: u32,
    pub(crate) key: u64,
}

impl DcTarget {
    /// The target `peer` published, reached from `dci` (an AH of `pd`).
    ///
    /// Errors: [`Error::Exchange`] when the peer's message names no DC
    /// target (version 1: not `-c DC`, or a build before DC); those of
    /// `Pd::create_ah`.
    pub(crate) fn of_peer(pd: &Pd, dci: &Qp, peer: &ConnInfo) -> Result<DcTarget> {
        let Some(key) = peer.dc_key else {
            return Err(Error::Exchange(
                "-c DC: the peer's exchange message names no DC target (version 1: it runs \
                 another transport, or a build without DC between two hosts)"
                    .into(),
            ));
        };
        Ok(DcTarget {
            ah: pd.create_ah(&dci.av_to(&peer.endpoint))?,
            dctn: peer.endpoint.qpn,
            key,
        })
    }

    /// The destination a `Qp::post_dc` names.
    pub(crate) fn dest(&self) -> DcDest<'_> {
        DcDest {
            ah: &self.ah,
            dctn: self.dctn,
            key: self.key,
        }
    }
}

/// Posts `wrs` on `qp`: to the DCT `dc` names through `Qp::post_dc` on DC,
/// else `Qp::post_send`.
pub(crate) fn post_to(qp: &mut Qp, dc: Option<DcDest<'_>>, wrs: &[SendWr<'_>]) -> Result<()> {
    match dc {
        Some(d) => qp.post_dc(&d, wrs),
        None => qp.post_send(wrs),
    }
}
