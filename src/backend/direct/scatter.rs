//! Scatter to CQE ([`InlineRecv`]) on the direct path: the QP's and CQ's
//! creation on the sim, and the poll's copy-out, which moves the data a
//! CQE carries (`op_own` format 1, `MLX5_INLINE_SCATTER_32`, or 2,
//! `MLX5_INLINE_SCATTER_64`) to the buffers of the WR it completes before
//! the CQE is retired, as libmlx5's `handle_responder` and
//! `mlx5_parse_cqe` do (`mlx5-dv`'s `driver::scatter` walks the WQE).
//!
//! The poll's fast paths send every CQE with format bits set to the
//! general path (`poll_rest`, `take_shared`), which decodes each CQE
//! through [`decode`] or [`decode_shared`]: for a CQE without data, one
//! test of the `op_own` byte already loaded. A copy that cannot be made
//! turns the CQE into an error CQE of the same WR, so the completion
//! carries the status (nothing was written to the WR's buffers then):
//! - the WR's SGEs hold fewer bytes than the CQE carries, or the CQE's
//!   count does not fit its slot: `LOC_LEN_ERR` (libmlx5's `copy_to_scat`);
//! - a requester CQE naming a WQE that is not a READ, ATOMIC_CS or
//!   ATOMIC_FA: `REM_INV_REQ_ERR` (libmlx5's `mlx5_copy_to_send_wqe`);
//! - a counter naming no outstanding WQE: the CQE is left as it is, and
//!   retiring it reports [`Error::StaleCqe`](crate::Error::StaleCqe).
//!
//! On a split QP the counter is checked against the retiring copy's
//! window (as its wr_id lookup is), not the posting halves' exact indices.

use super::{DirectCq, DirectQp};
use crate::ib::config::InlineRecv;
use crate::ib::error::Result;
use mlx5_dv::cqe::{Cqe, CqeRef, INLINE_SCATTER_32};
use mlx5_dv::driver::{ReceiveQueue, Retirer, ScatterError};
use mlx5_dv::prm::{CqeOpcode, Syndrome};
use mlx5_dv::sim;

/// The QP's own CQ on the sim, of at least `depth` CQEs: 128-byte CQEs for
/// [`InlineRecv::Up64`], 64-byte otherwise (`DirectCq::create_sim`'s).
pub(super) fn create_sim_cq(dev: &sim::Device, depth: u32, mode: InlineRecv) -> Result<DirectCq> {
    if mode != InlineRecv::Up64 {
        return DirectCq::create_sim(dev, depth);
    }
    let sim_cq = dev.create_cq_ex(depth.next_power_of_two().max(2), 128, true)?;
    DirectCq::over_sim(sim_cq, None)
}

/// Turns scatter to CQE on for a new sim QP (in RESET) when `mode` asks
/// for it: responder and requester, which the sim takes on RC, responder
/// only on UC, neither on UD (as the kernel sets `cs_res` / `cs_req`).
pub(super) fn set_sim_qp(qp: &sim::Qp, mode: InlineRecv) -> Result<()> {
    if mode.is_on() {
        qp.set_scatter_to_cqe(true, true)?;
    }
    Ok(())
}

/// The CQE `raw` of a QP whose queues are `sq` and `rq`, decoded, with
/// the data it carries (if any) copied to its WR's buffers first: what
/// `poll_rest` retires. A CQE without data costs one test of `op_own`.
#[inline(always)]
pub(super) fn decode(raw: CqeRef<'_>, sq: &Retirer<'_>, rq: &ReceiveQueue) -> Cqe {
    let cqe = raw.decode();
    if !raw.has_inline_data() {
        return cqe;
    }
    copy_out(raw, cqe, sq, rq)
}

/// [`decode`] on a CQ several QPs share, for the CQE `raw` (decoded:
/// `cqe`) of QP `q`: on a split QP inside its retiring copy's windows.
#[inline(always)]
pub(super) fn decode_shared(raw: CqeRef<'_>, cqe: Cqe, q: &mut DirectQp) -> Cqe {
    if !raw.has_inline_data() {
        return cqe;
    }
    copy_out_shared(raw, cqe, q)
}

#[cold]
#[inline(never)]
fn copy_out_shared(raw: CqeRef<'_>, cqe: Cqe, q: &mut DirectQp) -> Cqe {
    if !q.is_split() {
        return copy_out(raw, cqe, &q.sq.retirer(), &q.rq);
    }
    q.sq.open_window();
    q.rq.open_window();
    let cqe = copy_out(raw, cqe, &q.sq.retirer(), &q.rq);
    q.sq.close_window();
    q.rq.close_window();
    cqe
}

/// Copies the data of `raw` (decoded: `cqe`) to the WR it names; the CQE
/// to retire: `cqe` (its `flags_rqpn` cleared when the data lay over it),
/// or an error CQE of the same WR when the copy could not be made.
#[cold]
#[inline(never)]
fn copy_out(raw: CqeRef<'_>, mut cqe: Cqe, sq: &Retirer<'_>, rq: &ReceiveQueue) -> Cqe {
    if cqe.opcode.is_error() {
        // Error CQEs carry no data.
        return cqe;
    }
    let requester = cqe.opcode == CqeOpcode::REQ;
    let r = match raw.inline_data() {
        None => Err(ScatterError::Length {
            need: cqe.byte_cnt,
            room: 0,
        }),
        // SAFETY: the copy writes only through data segments of a WQE the
        // queue holds as outstanding (checked by `scatter_from_cqe` against
        // its indices, before anything is written): its WR was posted with
        // SGEs the post range-checked against live `Mr`s / `LocalMr`s of this
        // process (virtual addresses, on the sim and on ConnectX alike), which
        // the PD keeps registered and allocated until the WR is retired
        // (its deregistration waits for `WrProgress`), and this CQE is not
        // retired yet. `data` lies in the CQ ring, not in those buffers.
        Some(data) if requester => unsafe { sq.scatter_from_cqe(cqe.wqe_counter, data) },
        // SAFETY: as above, for the receive WQE (of the RQ, or of the SRQ,
        // whose WQE the device holds until this CQE completes it).
        Some(data) => unsafe { rq.scatter_from_cqe(cqe.wqe_counter, data) },
    };
    let syndrome = match r {
        Ok(()) => {
            if raw.op_own() & INLINE_SCATTER_32 != 0 {
                // Bytes 0..32 were data, `flags_rqpn` (24..28) among them.
                cqe.flags_rqpn = 0;
            }
            return cqe;
        }
        Err(ScatterError::Stale) => return cqe,
        Err(ScatterError::Length { .. }) => Syndrome::LOCAL_LENGTH_ERR,
        Err(ScatterError::Opcode(_)) => Syndrome::REMOTE_INVAL_REQ_ERR,
    };
    Cqe {
        opcode: if requester {
            CqeOpcode::REQ_ERR
        } else {
            CqeOpcode::RESP_ERR
        },
        syndrome,
        vendor_syndrome: 0,
        imm: 0,
        flags_rqpn: 0,
        ..cqe
    }
}

impl DirectQp {
    /// Test hook: CQEs the sim wrote for this QP with data in them (0 on
    /// ConnectX, which does not say).
    #[cfg(feature = "test-hooks")]
    pub(crate) fn scatter_cqes(&self) -> u64 {
        match &*self.dev {
            super::DirectDev::Sim(q) => q.scatter_cqes(),
            #[cfg(feature = "verbs")]
            super::DirectDev::Mlx5(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    //! The poll's copy-out over rings in plain memory (the test plays the
    //! device): what each outcome of the copy makes of the CQE.
    use super::*;
    use mlx5_dv::cqe::INLINE_SCATTER_32;
    use mlx5_dv::driver::{CompletionQueue, SendQueue};
    use mlx5_dv::dv::{mlx5dv_cq, mlx5dv_qp, mlx5dv_wq};
    use mlx5_dv::prm::{CtrlFlags, WqeOpcode};
    use mlx5_dv::wqe::{DataSeg, Payload, RemoteSeg, SendWqe};

    /// Rings in plain memory: a CQ of 4 64-byte CQEs, an RQ of 4 WQEs of
    /// 2 segments, an SQ of 4 WQEBBs, and a target buffer.
    struct Rig {
        cq: Vec<u8>,
        cq_db: Vec<u32>,
        rq: Vec<u64>,
        sq: Vec<u64>,
        qp_db: Vec<u32>,
        bf: Vec<u64>,
        buf: Vec<u8>,
    }

    impl Rig {
        fn new() -> Self {
            let mut cq = vec![0u8; 4 * 64];
            for s in cq.chunks_exact_mut(64) {
                s[63] = 0xf0;
            }
            Rig {
                cq,
                cq_db: vec![0; 2],
                rq: vec![0; 4 * 32 / 8],
                sq: vec![0; 4 * 64 / 8],
                qp_db: vec![0; 2],
                bf: vec![0; 64],
                buf: vec![0xee; 64],
            }
        }

        /// A scatter CQE in slot 0: `opcode`, `data` in bytes 0..32,
        /// `counter`, flags_rqpn 0x00ab_cdef (under the data).
        fn cqe(&mut self, opcode: CqeOpcode, data: &[u8], counter: u16) {
            let c = Cqe {
                opcode,
                wqe_opcode: WqeOpcode(0),
                qpn: 7,
                wqe_counter: counter,
                byte_cnt: data.len() as u32,
                imm: 0,
                solicited: false,
                format: 1,
                owner: false,
                syndrome: Syndrome(0),
                vendor_syndrome: 0,
                flags_rqpn: 0x00ab_cdef,
            };
            let mut b = c.encode(0);
            b[..data.len()].copy_from_slice(data);
            self.cq[..64].copy_from_slice(&b);
            assert_eq!(b[63] & 0x0c, INLINE_SCATTER_32);
        }

        fn seg(&self, off: usize, len: u32) -> DataSeg {
            DataSeg {
                addr: self.buf.as_ptr() as u64 + off as u64,
                len,
                lkey: 0x200,
            }
        }

        /// Polls slot 0 and decodes it through [`decode`], with an RQ
        /// holding one receive of `recv` and an SQ holding `send`.
        fn poll(&mut self, recv: &[DataSeg], send: Option<&SendWqe<'_>>) -> Cqe {
            let mut d = mlx5dv_qp::zeroed();
            d.dbrec = self.qp_db.as_mut_ptr();
            d.rq = mlx5dv_wq {
                buf: self.rq.as_mut_ptr().cast(),
                wqe_cnt: 4,
                stride: 32,
            };
            d.sq = mlx5dv_wq {
                buf: self.sq.as_mut_ptr().cast(),
                wqe_cnt: 4,
                stride: 64,
            };
            d.bf = mlx5_dv::dv::mlx5dv_bf {
                reg: self.bf.as_mut_ptr().cast(),
                size: 256,
            };
            let dcq = mlx5dv_cq {
                buf: self.cq.as_mut_ptr().cast(),
                dbrec: self.cq_db.as_mut_ptr(),
                cqe_cnt: 4,
                cqe_size: 64,
                cq_uar: core::ptr::null_mut(),
                cqn: 1,
                comp_mask: 0,
            };
            // SAFETY: the rings live in `self`, outlive the queues (dropped
            // at the end of this call), and nothing else touches them (the
            // BlueFlame register: 512 bytes of `bf`, never rung here).
            let (mut rq, mut sq, mut cq) = unsafe {
                (
                    ReceiveQueue::new(&d).expect("rq"),
                    SendQueue::new(&d, 7, 0, 0).expect("sq"),
                    CompletionQueue::new(&dcq).expect("cq"),
                )
            };
            if !recv.is_empty() {
                rq.post(recv, 1).expect("receive");
            }
            if let Some(w) = send {
                sq.post(w, 2).expect("send");
            }
            let retirer = sq.retirer();
            let mut cqes = cq.cursor::<64>();
            let raw = cqes.next().expect("the CQE");
            decode(raw, &retirer, &rq)
        }
    }

    #[test]
    fn data_that_fits_is_copied_and_flags_rqpn_cleared() {
        let mut r = Rig::new();
        r.cqe(CqeOpcode::RESP_SEND, b"0123456789", 0);
        let segs = [r.seg(8, 4), r.seg(20, 6)];
        let c = r.poll(&segs, None);
        assert_eq!(
            (c.opcode, c.flags_rqpn, c.byte_cnt),
            (CqeOpcode::RESP_SEND, 0, 10)
        );
        assert_eq!(&r.buf[8..12], b"0123");
        assert_eq!(&r.buf[20..26], b"456789");
        assert!(r.buf[..8]
            .iter()
            .chain(&r.buf[12..20])
            .chain(&r.buf[26..])
            .all(|&b| b == 0xee));
    }

    #[test]
    fn data_that_does_not_fit_is_a_local_length_error_with_nothing_written() {
        let mut r = Rig::new();
        r.cqe(CqeOpcode::RESP_SEND_IMM, &[1; 20], 0);
        let segs = [r.seg(0, 8)];
        let c = r.poll(&segs, None);
        assert_eq!(
            (c.opcode, c.syndrome),
            (CqeOpcode::RESP_ERR, Syndrome::LOCAL_LENGTH_ERR)
        );
        assert_eq!(c.wc_status(), 1, "IBV_WC_LOC_LEN_ERR");
        assert_eq!(c.wqe_counter, 0, "the same WR");
        assert!(r.buf.iter().all(|&b| b == 0xee));
    }

    #[test]
    fn a_send_wqe_of_another_opcode_is_a_remote_invalid_request() {
        let mut r = Rig::new();
        r.cqe(CqeOpcode::REQ, &[2; 8], 0);
        let segs = [r.seg(0, 8)];
        let w = SendWqe {
            datagram: None,
            opcode: WqeOpcode::RDMA_WRITE,
            flags: CtrlFlags::CQ_UPDATE,
            imm: 0,
            remote: Some(RemoteSeg { addr: 64, rkey: 3 }),
            masked: None,
            atomic: None,
            payload: Payload::Sges(&segs),
        };
        let c = r.poll(&[], Some(&w));
        assert_eq!(
            (c.opcode, c.syndrome),
            (CqeOpcode::REQ_ERR, Syndrome::REMOTE_INVAL_REQ_ERR)
        );
        assert!(r.buf.iter().all(|&b| b == 0xee));
        // A READ there takes it.
        let read = SendWqe {
            opcode: WqeOpcode::RDMA_READ,
            ..w
        };
        let c = r.poll(&[], Some(&read));
        assert_eq!(c.opcode, CqeOpcode::REQ);
        assert_eq!(&r.buf[..8], &[2; 8]);
    }

    #[test]
    fn a_stale_counter_leaves_the_cqe_as_it_is() {
        let mut r = Rig::new();
        r.cqe(CqeOpcode::RESP_SEND, &[3; 4], 1);
        let segs = [r.seg(0, 8)];
        let c = r.poll(&segs, None);
        assert_eq!((c.opcode, c.wqe_counter), (CqeOpcode::RESP_SEND, 1));
        assert!(r.buf.iter().all(|&b| b == 0xee));
    }
}
