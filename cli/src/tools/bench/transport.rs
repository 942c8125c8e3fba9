//! The transports a benchmark runs on (perftest `-c RC|UC|UD`)
//! and its SRQs (`--use-srq`): for a one-process run, a pair of QPs made
//! and brought up for each, and the SEND a side posts to the other (a
//! two-host run, `remote/`, uses [`check_transport`], [`UD_QKEY`],
//! [`recv_len`] and [`post_recv`]).

use super::*;
use rdma_direct::{Ah, Pd, QpType, Srq, UdDest};

/// The qkey UD runs use (perftest's `DEF_QKEY`).
pub const UD_QKEY: u32 = 0x1111_1111;

/// Which tests take which transport (perftest: UD for the SEND tests, UC
/// for WRITE and SEND; `--use-srq` for the SEND tests).
///
/// Errors: [`Error::Invalid`] naming the test and the flag.
pub fn check_transport(test: &str, qp_type: QpType, use_srq: bool) -> Result<()> {
    let send = test.starts_with("send_");
    let write = test.starts_with("write_");
    let ok = match qp_type {
        QpType::Rc => true,
        QpType::Uc => send || write,
        QpType::Ud => send,
        // DC is `-c DC` (not yet run by bench).
        QpType::Dci | QpType::Dct => false,
    };
    if !ok {
        return Err(Error::Invalid(format!(
            "-c {} does not run {test}: UD runs send_lat and send_bw; UC runs write_lat, write_bw, \
             send_lat and send_bw (as perftest)",
            qp_type.name()
        )));
    }
    if use_srq && !send {
        return Err(Error::Invalid(format!(
            "--use-srq is for the SEND tests (send_lat, send_bw), not {test}"
        )));
    }
    Ok(())
}

/// Two QPs of one PD, each to the other: connected (RC, UC) or up with
/// [`UD_QKEY`] and an AH each way (UD); each on an SRQ of its own with
/// `use_srq` (its receives then go there: [`Self::post_recv_b`]).
pub(super) struct Pair {
    pub(super) a: Qp,
    pub(super) b: Qp,
    pub(super) srq_a: Option<Srq>,
    pub(super) srq_b: Option<Srq>,
}

/// Where each side's SENDs go: on UD an AH and the peer's QPN.
pub(super) struct Dests {
    ah_to_b: Option<Ah>,
    ah_to_a: Option<Ah>,
    qpn_a: u32,
    qpn_b: u32,
}

impl Pair {
    pub(super) fn new(pd: &Pd, qcfg: &QpConfig, use_srq: bool) -> Result<(Pair, Dests)> {
        let srq = |n: u32| -> Result<Option<Srq>> {
            if use_srq {
                Ok(Some(pd.create_srq(n.max(1), qcfg.max_recv_sge.max(1))?))
            } else {
                Ok(None)
            }
        };
        let (srq_a, srq_b) = (srq(qcfg.max_recv_wr)?, srq(qcfg.max_recv_wr)?);
        let mk = |s: &Option<Srq>| match s {
            Some(s) => pd.create_qp_on_srq(qcfg, s),
            None => pd.create_qp(qcfg),
        };
        let (mut a, mut b) = (mk(&srq_a)?, mk(&srq_b)?);
        let (ah_to_b, ah_to_a) = if qcfg.qp_type == QpType::Ud {
            a.ready_ud(UD_QKEY)?;
            b.ready_ud(UD_QKEY)?;
            (
                Some(pd.create_ah(&a.av_to(&b.endpoint()))?),
                Some(pd.create_ah(&b.av_to(&a.endpoint()))?),
            )
        } else {
            Qp::connect_loopback(&mut a, &mut b)?;
            (None, None)
        };
        let dests = Dests {
            ah_to_b,
            ah_to_a,
            qpn_a: a.qp_num(),
            qpn_b: b.qp_num(),
        };
        Ok((Pair { a, b, srq_a, srq_b }, dests))
    }
}

impl Dests {
    /// A SEND of `sge` from A to B (`to_b`) or from B to A: on UD with the
    /// destination.
    pub(super) fn send_wr<'a>(&'a self, to_b: bool, sge: &'a [Sge<'a>]) -> SendWr<'a> {
        let (ah, qpn) = if to_b {
            (&self.ah_to_b, self.qpn_b)
        } else {
            (&self.ah_to_a, self.qpn_a)
        };
        match ah {
            Some(ah) => SendWr::ud_send(
                0,
                sge,
                UdDest {
                    ah,
                    remote_qpn: qpn,
                    qkey: UD_QKEY,
                },
            ),
            None => SendWr::send(0, sge),
        }
    }
}

/// Bytes a receive needs for a SEND of `size`: 40 more on UD (the GRH slot).
pub(super) fn recv_len(qp_type: QpType, size: u32) -> u32 {
    if qp_type == QpType::Ud {
        size + 40
    } else {
        size
    }
}

/// Posts `wrs` to `qp`, or to `srq` when the QP receives from one.
pub(super) fn post_recv(qp: &mut Qp, srq: &mut Option<Srq>, wrs: &[RecvWr<'_>]) -> Result<()> {
    match srq {
        Some(s) => s.post_recv(wrs),
        None => qp.post_recv(wrs),
    }
}
