//! The transports a benchmark runs on (perftest `-c RC|UC|UD|DC`)
//! and its SRQs (`--use-srq`): for a one-process run, a pair of QPs made
//! and brought up for each, and the SEND a side posts to the other (a
//! two-host run, `remote/`, uses [`check_transport`], [`UD_QKEY`],
//! [`DC_KEY`], [`recv_len`] and [`post_recv`]; each of its sides makes its
//! own QPs, `remote/side.rs`).
//!
//! `-c DC` (kept as `QpType::Dci` in the settings): side A posts from a DCI
//! to side B's DCT, which takes its receives from an SRQ; for the tests
//! where B posts back (write_lat, send_lat) B also has a DCI and A a DCT,
//! as perftest makes both on each side for its latency tests. Every post
//! of a DCI goes through `Qp::post_dc` to the peer's DCT ([`Dests::post`]).

use super::*;
use rdma_direct::{Ah, DataPath, DcDest, Pd, QpType, Srq, UdDest};

/// The qkey UD runs use (perftest's `DEF_QKEY`).
pub const UD_QKEY: u32 = 0x1111_1111;

/// The DC access key of the DCTs `-c DC` makes.
pub const DC_KEY: u64 = 0xffee_ddcc;

/// The transport's name as `-c` spells it (`DC` for a DCI or a DCT).
pub fn conn_name(qp_type: QpType) -> &'static str {
    if qp_type.is_dc() {
        "DC"
    } else {
        qp_type.name()
    }
}

/// perftest's rules for `-c DC` and where it runs: not with `-R` (perftest
/// refuses it: rdma_cm has no DC), and only on mlx5's direct path (the
/// sim, ConnectX; a verbs device such as rxe has no DC). Between two hosts
/// each side swaps its DCT's number and key over the TCP exchange
/// (`remote/side.rs`).
///
/// Errors: [`Error::Invalid`] naming the flag or the device.
pub fn check_dc(rdma_cm: bool, device: &str, path: DataPath) -> Result<()> {
    if rdma_cm {
        return Err(Error::Invalid(
            "-c DC with -R: rdma_cm connects RC QPs, not DC (perftest refuses -R with -c DC too)"
                .into(),
        ));
    }
    if path != DataPath::Direct {
        return Err(Error::Invalid(format!(
            "-c DC needs mlx5's direct path (the sim, ConnectX): {device} runs the verbs path, \
             which has no DC (DCI, DCT)"
        )));
    }
    Ok(())
}

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
        // perftest's -c DC: the write, read, send and atomic tests.
        QpType::Dci | QpType::Dct => test != "reg_mr",
    };
    if !ok {
        return Err(Error::Invalid(format!(
            "-c {} does not run {test}: UD runs send_lat and send_bw; UC runs write_lat, write_bw, \
             send_lat and send_bw; DC the write, read, send and atomic tests (as perftest)",
            conn_name(qp_type)
        )));
    }
    // (-c DC implies the SRQ: its DCTs take their receives from one.)
    if use_srq && !send && !qp_type.is_dc() {
        return Err(Error::Invalid(format!(
            "--use-srq is for the SEND tests (send_lat, send_bw), not {test}"
        )));
    }
    Ok(())
}

/// Two QPs of one PD, each to the other: connected (RC, UC) or up with
/// [`UD_QKEY`] and an AH each way (UD); each on an SRQ of its own with
/// `use_srq` (its receives then go there: [`Self::post_recv_b`]). On DC,
/// `a` is A's DCI and `b` B's DCT (on `srq_b`); `back` B's DCI and A's DCT
/// (on `srq_a`) when B posts too.
pub(super) struct Pair {
    pub(super) a: Qp,
    pub(super) b: Qp,
    /// DC, when B posts back: B's DCI, A's DCT.
    back: Option<(Qp, Qp)>,
    pub(super) srq_a: Option<Srq>,
    pub(super) srq_b: Option<Srq>,
}

/// Where each side's SENDs go: on UD an AH and the peer's QPN; on DC an AH
/// and the peer's DCT number.
pub(super) struct Dests {
    ah_to_b: Option<Ah>,
    ah_to_a: Option<Ah>,
    qpn_a: u32,
    qpn_b: u32,
    dc_to_b: Option<(Ah, u32)>,
    dc_to_a: Option<(Ah, u32)>,
}

impl Pair {
    /// The pair for `qcfg`'s transport; on DC (`QpType::Dci` in `qcfg`)
    /// B's DCI and A's DCT too when `both_ways`.
    pub(super) fn new(
        pd: &Pd,
        qcfg: &QpConfig,
        use_srq: bool,
        both_ways: bool,
    ) -> Result<(Pair, Dests)> {
        if qcfg.qp_type.is_dc() {
            return Self::new_dc(pd, qcfg, both_ways);
        }
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
            dc_to_b: None,
            dc_to_a: None,
        };
        let back = None;
        Ok((
            Pair {
                a,
                b,
                back,
                srq_a,
                srq_b,
            },
            dests,
        ))
    }

    /// DC: A's DCI and B's DCT on an SRQ (perftest's `-c DC` implies
    /// `--use-srq`), and with `both_ways` B's DCI and A's DCT on one.
    fn new_dc(pd: &Pd, qcfg: &QpConfig, both_ways: bool) -> Result<(Pair, Dests)> {
        let srq = || pd.create_srq(qcfg.max_recv_wr.max(1), qcfg.max_recv_sge.max(1));
        let dct = |srq: &Srq| -> Result<Qp> {
            let cfg = QpConfig {
                qp_type: QpType::Dct,
                dc_key: DC_KEY,
                ..*qcfg
            };
            let mut q = pd.create_qp_on_srq(&cfg, srq)?;
            q.ready_dct()?;
            Ok(q)
        };
        let dci = || -> Result<Qp> {
            let cfg = QpConfig {
                qp_type: QpType::Dci,
                ..*qcfg
            };
            let mut q = pd.create_qp(&cfg)?;
            q.ready_dci()?;
            Ok(q)
        };
        // The AH from `from` to the DCT `to`, and its number.
        let target = |from: &Qp, to: &Qp| -> Result<(Ah, u32)> {
            let n = to.dct_number().ok_or_else(|| {
                Error::Invalid("the DCT has no number after ready_dct (not in RTR)".into())
            })?;
            Ok((pd.create_ah(&from.av_to(&to.endpoint()))?, n))
        };
        let srq_b = srq()?;
        let b = dct(&srq_b)?;
        let a = dci()?;
        let dc_to_b = Some(target(&a, &b)?);
        let (srq_a, back, dc_to_a) = if both_ways {
            let srq_a = srq()?;
            let a_dct = dct(&srq_a)?;
            let b_dci = dci()?;
            let to_a = target(&b_dci, &a_dct)?;
            (Some(srq_a), Some((b_dci, a_dct)), Some(to_a))
        } else {
            (None, None, None)
        };
        let dests = Dests {
            ah_to_b: None,
            ah_to_a: None,
            qpn_a: a.qp_num(),
            qpn_b: b.qp_num(),
            dc_to_b,
            dc_to_a,
        };
        Ok((
            Pair {
                a,
                b,
                back,
                srq_a,
                srq_b: Some(srq_b),
            },
            dests,
        ))
    }

    /// The QP side A receives on: A's DCT on DC, else `a`.
    pub(super) fn a_rx(&mut self) -> &mut Qp {
        match &mut self.back {
            Some((_, a_dct)) => a_dct,
            None => &mut self.a,
        }
    }

    /// The QP side B posts from: B's DCI on DC, else `b`.
    pub(super) fn b_tx(&mut self) -> &mut Qp {
        match &mut self.back {
            Some((b_dci, _)) => b_dci,
            None => &mut self.b,
        }
    }

    /// Posts receives for side A: to its SRQ, or its QP.
    pub(super) fn post_recv_a(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        match &mut self.srq_a {
            Some(s) => s.post_recv(wrs),
            None => self.a.post_recv(wrs),
        }
    }

    /// Posts receives for side B: to its SRQ, or its QP.
    pub(super) fn post_recv_b(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        post_recv(&mut self.b, &mut self.srq_b, wrs)
    }

    /// Every QP of the pair.
    pub(super) fn qps_mut(&mut self) -> Vec<&mut Qp> {
        let mut v = vec![&mut self.a, &mut self.b];
        if let Some((x, y)) = &mut self.back {
            v.push(x);
            v.push(y);
        }
        v
    }
}

impl Dests {
    /// A SEND of `sge` from A to B (`to_b`) or from B to A: on UD with the
    /// destination (on DC the target goes with the post: [`Self::post`]).
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

    /// On DC, the peer's DCT (B's with `to_b`, else A's): `None` on the
    /// other transports.
    pub(super) fn dc(&self, to_b: bool) -> Option<DcDest<'_>> {
        let t = if to_b { &self.dc_to_b } else { &self.dc_to_a };
        t.as_ref().map(|(ah, dctn)| DcDest {
            ah,
            dctn: *dctn,
            key: DC_KEY,
        })
    }

    /// Posts `wrs` on `qp` toward B (`to_b`) or A: `Qp::post_dc` to the
    /// peer's DCT on DC, else `Qp::post_send`.
    pub(super) fn post(&self, qp: &mut Qp, to_b: bool, wrs: &[SendWr<'_>]) -> Result<()> {
        match self.dc(to_b) {
            Some(d) => qp.post_dc(&d, wrs),
            None => qp.post_send(wrs),
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
