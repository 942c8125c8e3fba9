//! QPs: creating one, its handle ([`Qp`]: the raw description, state
//! transitions, test hooks), and destroying it.

use super::cq::release_cq;
use super::dma::DmaBuf;
use super::{Access, Cq, Device, QpEntry, QpState, QpType, SimError, MAX_SQ_WQEBBS, RNR_DELAY};
use crate::dv::{mlx5dv_bf, mlx5dv_qp, mlx5dv_wq};
use crate::prm::WQEBB;
use std::sync::Arc;

impl Device {
    /// Creates an RC QP in RESET whose send completions go to `send_cq`.
    /// `sq_wqebbs` is the SQ size in 64-byte WQEBBs (power of two, 1..=32768).
    pub fn create_qp(&self, pd: u32, send_cq: &Cq, sq_wqebbs: u32) -> Result<Qp, SimError> {
        self.create_qp_rq(pd, send_cq, sq_wqebbs, 1, 16)
    }

    /// Creates an RC QP in RESET with a receive queue of `rq_wqe_cnt` WQEs of
    /// `rq_stride` bytes (powers of two; stride 16..=1024, one data segment per
    /// 16 bytes). Send and receive completions both go to `cq`.
    pub fn create_qp_rq(
        &self,
        pd: u32,
        cq: &Cq,
        sq_wqebbs: u32,
        rq_wqe_cnt: u32,
        rq_stride: u32,
    ) -> Result<Qp, SimError> {
        self.create_qp_in(pd, cq, sq_wqebbs, rq_wqe_cnt, rq_stride, None, QpType::Rc)
    }

    /// Creates a QP of type `qp_type` in RESET (otherwise as
    /// [`Self::create_qp_rq`], or [`Self::create_qp_srq`] with `srq`).
    #[allow(clippy::too_many_arguments)]
    pub fn create_qp_of(
        &self,
        qp_type: QpType,
        pd: u32,
        cq: &Cq,
        sq_wqebbs: u32,
        rq_wqe_cnt: u32,
        rq_stride: u32,
        srq: Option<&super::Srq>,
    ) -> Result<Qp, SimError> {
        if let Some(s) = srq {
            if !self.lock().srqs.contains_key(&s.srqn()) {
                return Err(SimError::NoSuchSrq(s.srqn()));
            }
        }
        let srqn = srq.map(super::Srq::srqn);
        self.create_qp_in(pd, cq, sq_wqebbs, rq_wqe_cnt, rq_stride, srqn, qp_type)
    }

    /// Creates an RC QP in RESET whose receives come from `srq` (its own
    /// RQ is empty: `dv().rq.wqe_cnt` is 0, as libmlx5 describes such a
    /// QP); send and receive completions both go to `cq`. A QP in ERR
    /// leaves the SRQ's WQEs for the other QPs on it.
    ///
    /// Errors: as [`Self::create_qp`]; [`SimError::NoSuchSrq`].
    pub fn create_qp_srq(
        &self,
        pd: u32,
        cq: &Cq,
        sq_wqebbs: u32,
        srq: &super::Srq,
    ) -> Result<Qp, SimError> {
        if !self.lock().srqs.contains_key(&srq.srqn()) {
            return Err(SimError::NoSuchSrq(srq.srqn()));
        }
        self.create_qp_in(pd, cq, sq_wqebbs, 1, 16, Some(srq.srqn()), QpType::Rc)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn create_qp_in(
        &self,
        pd: u32,
        cq: &Cq,
        sq_wqebbs: u32,
        rq_wqe_cnt: u32,
        rq_stride: u32,
        srq: Option<u32>,
        qp_type: QpType,
    ) -> Result<Qp, SimError> {
        if !rq_wqe_cnt.is_power_of_two() || rq_wqe_cnt > 1 << 15 {
            return Err(SimError::BadSize {
                what: "rq_wqe_cnt",
                value: rq_wqe_cnt,
                min: 1,
                max: 1 << 15,
            });
        }
        if !rq_stride.is_power_of_two() || !(16..=1024).contains(&rq_stride) {
            return Err(SimError::BadSize {
                what: "rq_stride",
                value: rq_stride,
                min: 16,
                max: 1024,
            });
        }
        let send_cq = cq;
        if !sq_wqebbs.is_power_of_two() || sq_wqebbs > MAX_SQ_WQEBBS {
            return Err(SimError::BadSize {
                what: "sq_wqebbs",
                value: sq_wqebbs,
                min: 1,
                max: 1 << 15,
            });
        }
        if !Arc::ptr_eq(&send_cq.dev.inner, &self.inner) {
            return Err(SimError::ForeignCq(send_cq.cqn));
        }
        let mut st = self.lock();
        // QPNs are 24 bits; skip numbers in use after a wrap.
        let start = st.next_qpn;
        let mut qpn = start;
        while st.qps.contains_key(&qpn) || qpn == 0 {
            qpn = (qpn + 1) & 0xff_ffff;
            if qpn == start {
                return Err(SimError::Exhausted { what: "QP" });
            }
        }
        st.next_qpn = (qpn + 1) & 0xff_ffff;
        let uidx = st.next_uidx;
        st.next_uidx = 0x80_0000 | (uidx + 1) & 0x7f_ffff;
        st.cqs.get_mut(&send_cq.cqn).expect("live CQ").refs += 1;
        st.qp_order.push(qpn);
        st.qps.insert(
            qpn,
            QpEntry {
                pd,
                qp_type,
                state: QpState::Reset,
                sq: DmaBuf::new(sq_wqebbs as usize * WQEBB),
                sq_wqe_cnt: sq_wqebbs,
                dbrec: DmaBuf::new(64),
                uar: DmaBuf::new(4096),
                send_cqn: send_cq.cqn,
                sq_ci: 0,
                rq: DmaBuf::new(rq_wqe_cnt as usize * rq_stride as usize),
                rq_wqe_cnt: if srq.is_some() { 0 } else { rq_wqe_cnt },
                rq_stride,
                rq_ci: 0,
                peer: None,
                access: Access::empty(),
                rnr_retry: 7,
                rnr_left: 7,
                rnr_wait_until: None,
                sqd: None,
                min_rnr_delay: RNR_DELAY,
                hooked: false,
                srq,
                qkey: 0,
                uidx,
                swap_recv: false,
                held_recv: None,
                scatter_resp: false,
                scatter_req: false,
                req_inline: None,
                scatter_cqes: 0,
                dc: None,
            },
        );
        Ok(Qp {
            dev: self.clone(),
            qpn,
        })
    }
}

/// A sim QP (RC, UC, UD, or DC's DCI or DCT: `dc.rs`); destroyed on drop.
pub struct Qp {
    pub(super) dev: Device,
    pub(super) qpn: u32,
}

/// Offset of the first BlueFlame register in the UAR page, in bytes.
pub const BF_OFFSET: usize = 0x800;
/// Size of the BlueFlame register (`mlx5dv_qp.bf.size`), in bytes.
pub const BF_SIZE: u32 = 256;

impl Qp {
    /// The QP number (24 bits). For a DCT, the sim's number for the
    /// object, which DCIs may address only once [`Self::dctn`] gives it.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The raw description, as `mlx5dv_init_obj` would return it. Valid while `self` lives.
    pub fn dv(&self) -> mlx5dv_qp {
        let st = self.dev.lock();
        let q = &st.qps[&self.qpn];
        let mut d = mlx5dv_qp::zeroed();
        d.dbrec = q.dbrec.ptr().cast();
        d.sq = mlx5dv_wq {
            buf: q.sq.ptr().cast(),
            wqe_cnt: q.sq_wqe_cnt,
            stride: WQEBB as u32,
        };
        d.bf = mlx5dv_bf {
            // SAFETY: BF_OFFSET < 4096, the UAR page's size: in bounds of its allocation.
            reg: unsafe { q.uar.ptr().add(BF_OFFSET) }.cast(),
            size: BF_SIZE,
        };
        d.rq = mlx5dv_wq {
            buf: q.rq.ptr().cast(),
            wqe_cnt: q.rq_wqe_cnt,
            stride: q.rq_stride,
        };
        d.sqn = self.qpn;
        d.rqn = self.qpn;
        let empty = mlx5dv_wq {
            buf: std::ptr::null_mut(),
            wqe_cnt: 0,
            stride: 0,
        };
        match q.dc {
            // A DCT has no SQ and no RQ of its own; a DCI no RQ.
            Some(super::dc::DcRole::Dct { .. }) => {
                d.sq = empty;
                d.rq = empty;
            }
            Some(super::dc::DcRole::Dci) => d.rq = empty,
            None => {}
        }
        d
    }

    /// The SRQ its receives come from, if any.
    pub fn srqn(&self) -> Option<u32> {
        self.dev.lock().qps[&self.qpn].srq
    }

    /// Its user index, which its version-1 CQEs carry in bytes 32..36.
    pub fn user_index(&self) -> u32 {
        self.dev.lock().qps[&self.qpn].uidx
    }

    /// Test hook: with `on`, the QP's receive CQEs are written in swapped
    /// pairs (WQEs 1, 0, 3, 2 for receives into 0, 1, 2, 3), as a device
    /// that completes receives out of order; the first of a pair waits for
    /// the second (or for the hook to go off, or a flush). The data lands
    /// in each WQE as always.
    pub fn hook_swap_recv_completions(&self, on: bool) {
        let mut st = self.dev.lock();
        let q = st.qps.get_mut(&self.qpn).expect("a live QP's entry");
        q.swap_recv = on;
        if !on {
            super::recv::release_held(&mut st, self.qpn);
            // Outside a pass: a compressed session it joined is written now.
            super::session::write_held(&mut st);
        }
    }

    /// The connected peer's QPN (set at RTR).
    pub fn dest_qpn(&self) -> Option<u32> {
        self.dev.lock().qps.get(&self.qpn).and_then(|q| q.peer)
    }

    /// The QP's state (where the calls moved it, or ERR after an error).
    pub fn state(&self) -> QpState {
        self.dev.lock().qps[&self.qpn].state
    }

    /// Test hook: copies SQ bytes from ring offset `off` (wrapping at the
    /// ring end) into `dst`, as the device would DMA-read them.
    pub fn hook_read_sq(&self, off: usize, dst: &mut [u8]) {
        self.dev.lock().qps[&self.qpn].sq.read_wrapping(off, dst);
    }

    /// Test hook: overwrites SQ bytes at ring offset `off` (wrapping), for
    /// WQEs the driver would never write (bad DS, wrong QPN or index,
    /// unknown opcode, misaligned atomic). Use before ringing the doorbell.
    pub fn hook_write_sq(&self, off: usize, src: &[u8]) {
        let mut st = self.dev.lock();
        let q = st.qps.get_mut(&self.qpn).expect("a live QP's entry");
        // Bytes from a hook may name any lkey: from now on this QP's WQEs
        // never touch an owned MR (whose bytes only its own WRs may touch).
        q.hooked = true;
        q.sq.write(off, src);
    }

    pub(super) fn modify(&self, to: QpState, f: impl FnOnce(&mut QpEntry)) -> Result<(), SimError> {
        let mut st = self.dev.lock();
        let q = st
            .qps
            .get_mut(&self.qpn)
            .ok_or(SimError::NoSuchQp(self.qpn))?;
        let ok = matches!(
            (q.state, to),
            (QpState::Reset, QpState::Init)
                | (QpState::Init, QpState::Rtr)
                | (QpState::Rtr, QpState::Rts)
                | (QpState::Rts, QpState::Sqd)
                | (QpState::Sqd, QpState::Rts)
                | (_, QpState::Reset)
                | (_, QpState::Err)
        ) && super::dc::dc_allows(q.dc, q.state, to);
        if !ok {
            return Err(SimError::BadTransition { from: q.state, to });
        }
        f(q);
        if q.state == QpState::Sqd {
            q.sqd = None;
        }
        q.state = to;
        Ok(())
    }

    /// RTS -> SQD: the WQEs rung so far are run to completion, later ones
    /// wait for [`Self::resume`]; with `notify`, `AsyncEvent::SqDrained`
    /// is raised once they are done (at once if none is left).
    pub fn to_sqd(&self, notify: bool) -> Result<(), SimError> {
        self.modify(QpState::Sqd, |_| {})?;
        super::exec::start_drain(&mut self.dev.lock(), self.qpn, notify);
        Ok(())
    }

    /// SQD -> RTS: the WQEs held back run.
    pub fn resume(&self) -> Result<(), SimError> {
        self.modify(QpState::Rts, |_| {})
    }

    /// RESET -> INIT of a UD QP with its qkey.
    pub fn to_init_ud(&self, qkey: u32) -> Result<(), SimError> {
        self.modify(QpState::Init, |q| q.qkey = qkey)
    }

    /// INIT -> RTR of a UD QP (no peer: each WQE names its destination).
    pub fn to_rtr_ud(&self) -> Result<(), SimError> {
        self.modify(QpState::Rtr, |_| {})
    }

    /// A UD QP's qkey (INIT -> INIT, RTR and RTS may change it).
    pub fn set_qkey(&self, qkey: u32) -> Result<(), SimError> {
        let mut st = self.dev.lock();
        let q = st
            .qps
            .get_mut(&self.qpn)
            .ok_or(SimError::NoSuchQp(self.qpn))?;
        q.qkey = qkey;
        Ok(())
    }

    /// RESET -> INIT with the responder access the QP allows.
    pub fn to_init(&self, access: Access) -> Result<(), SimError> {
        self.modify(QpState::Init, |q| q.access = access)
    }

    /// INIT -> RTR, connected to `dest_qpn` on the same device, asking
    /// requesters to wait [`RNR_DELAY`] after an RNR NAK.
    pub fn to_rtr(&self, dest_qpn: u32) -> Result<(), SimError> {
        self.to_rtr_with(dest_qpn, RNR_DELAY)
    }

    /// INIT -> RTR, connected to `dest_qpn`; after an RNR NAK from this QP
    /// its requester waits `min_rnr_delay` (the responder's `min_rnr_timer`,
    /// IB spec table 45) before it retries.
    pub fn to_rtr_with(
        &self,
        dest_qpn: u32,
        min_rnr_delay: std::time::Duration,
    ) -> Result<(), SimError> {
        {
            let st = self.dev.lock();
            let Some(dest) = st.qps.get(&dest_qpn) else {
                return Err(SimError::NoSuchQp(dest_qpn));
            };
            if dest.dc.is_some() || st.qps.get(&self.qpn).is_some_and(|q| q.dc.is_some()) {
                return Err(SimError::Unsupported {
                    what: "a connected peer on a DC QP (a DCI's WQEs name their DCT)",
                });
            }
        }
        self.modify(QpState::Rtr, |q| {
            q.peer = Some(dest_qpn);
            q.min_rnr_delay = min_rnr_delay;
        })
    }

    /// Changes the attributes a transition may carry besides the required
    /// ones, in any state but RESET: the responder access and the RNR NAK
    /// timer this QP asks its requesters to wait (INIT -> INIT, INIT -> RTR,
    /// RTR -> RTS and RTS -> RTS may carry them).
    pub fn set_optional(
        &self,
        access: Option<Access>,
        min_rnr_delay: Option<std::time::Duration>,
    ) -> Result<(), SimError> {
        let mut st = self.dev.lock();
        let q = st
            .qps
            .get_mut(&self.qpn)
            .ok_or(SimError::NoSuchQp(self.qpn))?;
        if q.state == QpState::Reset {
            return Err(SimError::BadTransition {
                from: q.state,
                to: q.state,
            });
        }
        if let Some(a) = access {
            q.access = a;
        }
        if let Some(d) = min_rnr_delay {
            q.min_rnr_delay = d;
        }
        Ok(())
    }

    /// `rnr_retry` as set at RTR -> RTS (7 before).
    pub fn rnr_retry(&self) -> u8 {
        self.dev.lock().qps[&self.qpn].rnr_retry
    }

    /// RTR -> RTS, retrying RNR NAKs forever (`rnr_retry` 7).
    pub fn to_rts(&self) -> Result<(), SimError> {
        self.to_rts_with(7)
    }

    /// RTR -> RTS with `rnr_retry`: how often a SEND (or WRITE_IMM) that
    /// finds no receive posted is retried, [`RNR_DELAY`] apart, before it
    /// completes with RNR_RETRY_EXC_ERR (syndrome 0x16); 7 means forever
    /// (IB spec 9.7.5.2.8). Values above 7 are refused.
    pub fn to_rts_with(&self, rnr_retry: u8) -> Result<(), SimError> {
        if rnr_retry > 7 {
            return Err(SimError::BadSize {
                what: "rnr_retry",
                value: rnr_retry as u32,
                min: 0,
                max: 7,
            });
        }
        self.modify(QpState::Rts, |q| {
            q.rnr_retry = rnr_retry;
            q.rnr_left = rnr_retry;
            q.rnr_wait_until = None;
        })
    }

    /// Any state -> ERR.
    pub fn to_err(&self) -> Result<(), SimError> {
        self.modify(QpState::Err, |_| {})
    }

    /// Any state -> RESET: zeroes the doorbell record and restarts the device's index.
    pub fn to_reset(&self) -> Result<(), SimError> {
        self.modify(QpState::Reset, |q| {
            q.dbrec.write(0, &[0; 8]);
            q.sq_ci = 0;
            q.rq_ci = 0;
            q.peer = None;
        })
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        let mut st = self.dev.lock();
        if let Some(q) = st.qps.remove(&self.qpn) {
            release_cq(&mut st, q.send_cqn);
        }
        st.qp_order.retain(|&q| q != self.qpn);
    }
}
