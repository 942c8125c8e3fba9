//! SRQs: creating one, its handle ([`Srq`]: the raw description, the
//! limit), the device's side of consuming its WQEs, and the device's async
//! events ([`AsyncEvent`]).
//!
//! The ring is an mlx5 SRQ's (`driver::SharedReceiveQueue` says the
//! layout): WQEs linked through `next_wqe_index`, linked `0 -> 1 -> ...`
//! at creation (head 0, tail the last), as libmlx5's `set_srq_buf_ll`. The
//! device consumes posted WQEs in list order: it keeps the index of the
//! next one and reads each WQE's next segment when it consumes it; the
//! doorbell record's 16-bit count says how many were posted.

use super::dma::DmaBuf;
use super::{Device, SimError, SrqEntry, State};
use crate::driver::SrqDesc;
use crate::mmio;
use crate::wqe::{
    decode_recv_wqe, decode_srq_next_seg, srq_next_seg, DataSeg, RecvLayout, SRQ_NEXT_SEG,
};
use std::sync::Arc;

/// Most WQEs an SRQ of the sim holds (its ring has one more).
pub const MAX_SRQ_WR: u32 = (1 << 15) - 1;

/// A device async event (verbs `struct ibv_async_event`: the type and the
/// object it names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncEvent {
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`: a consumed WQE left fewer than the
    /// armed limit posted on SRQ `srqn`; the limit is disarmed.
    SrqLimitReached {
        /// The SRQ.
        srqn: u32,
    },
    /// `IBV_EVENT_CQ_ERR`: CQ `cqn` overran (it stopped).
    CqError {
        /// The CQ.
        cqn: u32,
    },
    /// `IBV_EVENT_QP_FATAL`: QP `qpn` met a WQE it could not parse (DS 0,
    /// the wrong WQE index or QPN in its ctrl segment); the WQE completes
    /// with a local QP operation error and the QP goes to ERR.
    QpFatal {
        /// The QP.
        qpn: u32,
    },
    /// `IBV_EVENT_SQ_DRAINED`: QP `qpn`, moved to SQD asking for it, has
    /// run every WQE rung before the move.
    SqDrained {
        /// The QP.
        qpn: u32,
    },
}

impl Device {
    /// Creates an SRQ in PD `pd` taking up to `max_wr` receives of up to
    /// `max_sge` SGEs, sized as libmlx5 sizes one without a wait queue: a
    /// stride of `16 + 16 * max_sge` bytes rounded up to a power of two (at
    /// least 32), `(max_wr + 1).next_power_of_two()` WQEs.
    ///
    /// Errors: [`SimError::BadSize`] for `max_wr` not 1..=[`MAX_SRQ_WR`] or
    /// `max_sge` not 1..=63.
    pub fn create_srq(&self, pd: u32, max_wr: u32, max_sge: u32) -> Result<Srq, SimError> {
        if !(1..=MAX_SRQ_WR).contains(&max_wr) {
            return Err(SimError::BadSize {
                what: "srq max_wr",
                value: max_wr,
                min: 1,
                max: MAX_SRQ_WR,
            });
        }
        if !(1..=63).contains(&max_sge) {
            return Err(SimError::BadSize {
                what: "srq max_sge",
                value: max_sge,
                min: 1,
                max: 63,
            });
        }
        let stride = (SRQ_NEXT_SEG as u32 + 16 * max_sge)
            .next_power_of_two()
            .max(32);
        let count = (max_wr + 1).next_power_of_two().max(64 / stride);
        let buf = DmaBuf::new(count as usize * stride as usize);
        for i in 0..count as usize {
            buf.write(i * stride as usize, &srq_next_seg((i + 1) as u16));
        }
        let mut st = self.lock();
        st.next_srqn += 1;
        let srqn = st.next_srqn;
        st.srqs.insert(
            srqn,
            SrqEntry {
                pd,
                buf,
                dbrec: DmaBuf::new(64),
                count,
                stride,
                cur: 0,
                consumed: 0,
                limit: 0,
                limit_events: 0,
            },
        );
        Ok(Srq {
            dev: self.clone(),
            srqn,
        })
    }

    /// The async events raised and not yet taken, oldest first.
    pub fn take_async_events(&self) -> Vec<AsyncEvent> {
        let mut st = self.lock();
        if let Some(fd) = &st.async_fd {
            // Non-blocking: drains the count, if any.
            let _ = fd.read();
        }
        std::mem::take(&mut st.async_events)
    }

    /// Becomes readable while async events wait to be taken (an eventfd,
    /// non-blocking), as verbs' `ibv_context.async_fd`.
    ///
    /// Errors: [`SimError::Os`] when the system refuses an eventfd.
    pub fn async_event_fd(&self) -> Result<Arc<nix::sys::eventfd::EventFd>, SimError> {
        let mut st = self.lock();
        if let Some(fd) = &st.async_fd {
            return Ok(fd.clone());
        }
        let fd = Arc::new(
            nix::sys::eventfd::EventFd::from_value_and_flags(
                st.async_events.len() as u32,
                nix::sys::eventfd::EfdFlags::EFD_NONBLOCK
                    | nix::sys::eventfd::EfdFlags::EFD_CLOEXEC,
            )
            .map_err(|e| SimError::Os(format!("eventfd: {e}")))?,
        );
        st.async_fd = Some(fd.clone());
        Ok(fd)
    }
}

/// Raises an async event.
pub(super) fn raise(st: &mut State, e: AsyncEvent) {
    st.async_events.push(e);
    if let Some(fd) = &st.async_fd {
        let _ = fd.write(1);
    }
}

/// The next posted WQE of SRQ `srqn`, if the doorbell record shows one:
/// its index and data segments (up to the stride, ended by
/// MLX5_INVALID_LKEY; the codec's `decode_recv_wqe`), read once.
pub(super) fn next_srq_wqe<const N: usize>(
    st: &State,
    srqn: u32,
) -> Option<(u16, [DataSeg; N], usize)> {
    let s = st.srqs.get(&srqn)?;
    // SAFETY: the dbrec DmaBuf is 64 bytes, 4096-aligned; word 0 is the SRQ's.
    let posted = unsafe { mmio::read_dbrec(s.dbrec.ptr() as *const u32) } as u16;
    if posted == s.consumed {
        return None;
    }
    let base = s.cur as usize * s.stride as usize;
    let mut w = decode_recv_wqe::<N>(RecvLayout::Srq, s.stride, |o| s.buf.read_array(base + o));
    super::dmabuf::translate_segs(st, &mut w.segs[..w.n]);
    Some((s.cur as u16, w.segs, w.n))
}

/// The device consumed SRQ `srqn`'s next WQE: moves to the WQE its next
/// segment names, and raises the limit event if fewer than the armed
/// limit are left posted.
pub(super) fn consume_srq_wqe(st: &mut State, srqn: u32) {
    let Some(s) = st.srqs.get_mut(&srqn) else {
        return;
    };
    let next: [u8; SRQ_NEXT_SEG] = s.buf.read_array(s.cur as usize * s.stride as usize);
    s.cur = decode_srq_next_seg(&next) as u32 % s.count;
    s.consumed = s.consumed.wrapping_add(1);
    // SAFETY: as in `next_srq_wqe`.
    let posted = unsafe { mmio::read_dbrec(s.dbrec.ptr() as *const u32) } as u16;
    let left = posted.wrapping_sub(s.consumed) as u32;
    if s.limit != 0 && left < s.limit {
        s.limit = 0;
        s.limit_events += 1;
        raise(st, AsyncEvent::SrqLimitReached { srqn });
    }
}

/// A sim SRQ; destroyed on drop. The host drops its driver over the
/// ring first.
pub struct Srq {
    dev: Device,
    srqn: u32,
}

impl Srq {
    /// The SRQ number (24 bits).
    pub fn srqn(&self) -> u32 {
        self.srqn
    }

    /// The raw description, as `mlx5dv_init_obj(MLX5DV_OBJ_SRQ)` gives it
    /// at creation: head 0, tail the last WQE. Valid while `self` lives.
    pub fn dv(&self) -> SrqDesc {
        let st = self.dev.lock();
        let s = &st.srqs[&self.srqn];
        SrqDesc {
            buf: s.buf.ptr(),
            dbrec: s.dbrec.ptr().cast(),
            stride: s.stride,
            head: 0,
            tail: s.count - 1,
        }
    }

    /// Arms the limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): the first
    /// WQE consumed that leaves fewer than `limit` posted raises one
    /// [`AsyncEvent::SrqLimitReached`] and disarms it. 0 disarms.
    pub fn set_limit(&self, limit: u32) -> Result<(), SimError> {
        let mut st = self.dev.lock();
        let s = st.srqs.get_mut(&self.srqn).expect("a live SRQ");
        if limit >= s.count {
            return Err(SimError::BadSize {
                what: "srq_limit",
                value: limit,
                min: 0,
                max: s.count - 1,
            });
        }
        s.limit = limit;
        Ok(())
    }

    /// The armed limit (0: none), and the limit events raised.
    pub fn limit(&self) -> (u32, u64) {
        let st = self.dev.lock();
        let s = &st.srqs[&self.srqn];
        (s.limit, s.limit_events)
    }

    /// The device's PD of this SRQ.
    pub fn pd(&self) -> u32 {
        self.dev.lock().srqs[&self.srqn].pd
    }
}

impl Drop for Srq {
    fn drop(&mut self) {
        // (QPs on it see no WQE from now on: they take RNR NAKs.)
        self.dev.lock().srqs.remove(&self.srqn);
    }
}
