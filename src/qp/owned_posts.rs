//! Posting a [`LocalMr`] by value and taking it back: the owned posts of
//! [`Qp`] (`docs/concepts.md`, "Two kinds of memory"). Each builds one SGE
//! over the buffer and posts through [`Qp::post_send`] / [`Qp::post_recv`],
//! so every check of those applies; the buffer then waits in the QP's
//! slots (`owned.rs`) until its WR is retired.

use crate::ib::error::{Error, Result};
use crate::ib::mem::Access;
use crate::ib::mr::{LocalMr, Refused};
use crate::ib::wr::{RecvWr, SendWr, Sge, WrOp};
use crate::qp::Qp;

impl Qp {
    /// Posts one send WR whose local data is `len` bytes at `offset` of
    /// `buf`, moving `buf` into the QP: it is the WR's SGE (the gather list
    /// of a SEND or WRITE, the target of an RDMA READ, the 8-byte old value
    /// of an atomic) and comes back from [`Self::take_send_buf`] once the WR
    /// has completed or been flushed. `wr` gives the operation and flags;
    /// its `sges` must be empty. An inline payload is copied from `buf`
    /// plainly (memcpy).
    ///
    /// Everything [`Self::post_send`] checks applies. Errors: those, and
    /// [`Error::Invalid`] when `wr.sges` is not empty, [`Error::OutOfBounds`]
    /// when the range is outside `buf`, [`Error::MissingAccess`] when an RDMA
    /// READ or atomic target lacks LOCAL_WRITE, [`Error::Invalid`] when the buffer
    /// of the WR posted `max_send_wr` WRs ago has not been taken back yet;
    /// the buffer comes back in [`Refused`], nothing posted.
    ///
    /// Buffers still held when the QP is dropped are deregistered and freed
    /// with it (after the device QP is destroyed); to keep them, move the QP
    /// to RESET first (that retires every WR) and take them back.
    // (The error carries the buffer back; boxing it would allocate on a
    // refusal for nothing.)
    #[allow(clippy::result_large_err)]
    pub fn post_send_owned(
        &mut self,
        wr: &SendWr<'_>,
        buf: LocalMr,
        offset: usize,
        len: u32,
    ) -> std::result::Result<(), Refused> {
        let seq = self.counts().sends_posted;
        if let Err(error) = self.check_owned(wr.sges.len(), &buf, offset, len, true, seq) {
            return Err(Refused { error, buf });
        }
        let lands = matches!(
            wr.op,
            WrOp::RdmaRead { .. }
                | WrOp::AtomicCmpSwp { .. }
                | WrOp::AtomicFetchAdd { .. }
                | WrOp::MaskedCmpSwap { .. }
                | WrOp::MaskedFetchAdd { .. }
        );
        if lands && !buf.access().contains(Access::LOCAL_WRITE) {
            let error = Error::MissingAccess {
                object: "an RDMA READ or atomic writes its local buffer: it",
                needs: Access::LOCAL_WRITE,
            };
            return Err(Refused { error, buf });
        }
        let sge = [Sge::owned(&buf, offset, len)];
        let w = SendWr { sges: &sge, ..*wr };
        match self.post_send(std::slice::from_ref(&w)) {
            Ok(()) => {
                self.owned.send.put(seq, wr.wr_id, buf);
                Ok(())
            }
            Err(error) => Err(Refused { error, buf }),
        }
    }

    /// Posts one receive into `len` bytes at `offset` of `buf`, moving `buf`
    /// into the QP until the receive completes (or is flushed):
    /// [`Self::take_recv_buf`] hands it back, and the bytes received are
    /// then read in place (`&buf[offset..offset + byte_len]`).
    ///
    /// Everything [`Self::post_recv`] checks applies. Errors: those, and
    /// [`Error::OutOfBounds`] when the range is outside `buf`,
    /// [`Error::MissingAccess`] when `buf` lacks LOCAL_WRITE, [`Error::Invalid`]
    /// when the buffer of the receive posted `max_recv_wr`
    /// receives ago has not been taken back yet; the buffer comes back in
    /// [`Refused`], nothing posted.
    #[allow(clippy::result_large_err)]
    pub fn post_recv_owned(
        &mut self,
        wr_id: u64,
        buf: LocalMr,
        offset: usize,
        len: u32,
    ) -> std::result::Result<(), Refused> {
        let seq = self.counts().recvs_posted;
        if let Err(error) = self.check_owned(0, &buf, offset, len, false, seq) {
            return Err(Refused { error, buf });
        }
        if !buf.access().contains(Access::LOCAL_WRITE) {
            let error = Error::MissingAccess {
                object: "a receive buffer",
                needs: Access::LOCAL_WRITE,
            };
            return Err(Refused { error, buf });
        }
        let sge = [Sge::owned(&buf, offset, len)];
        match self.post_recv(&[RecvWr::new(wr_id, &sge)]) {
            Ok(()) => {
                self.owned.recv.put(seq, wr_id, buf);
                Ok(())
            }
            Err(error) => Err(Refused { error, buf }),
        }
    }

    fn check_owned(
        &self,
        sges: usize,
        buf: &LocalMr,
        offset: usize,
        len: u32,
        send: bool,
        seq: u64,
    ) -> Result<()> {
        if sges != 0 {
            return Err(Error::Invalid(
                "an owned post takes its one SGE from the buffer: leave wr.sges empty".into(),
            ));
        }
        if offset
            .checked_add(len as usize)
            .is_none_or(|end| end > buf.len())
        {
            return Err(Error::OutOfBounds {
                offset: offset as u64,
                len: len as u64,
                size: buf.len() as u64,
                object: "buffer",
            });
        }
        let counts = self.counts();
        let (q, take, retired, full) = if send {
            (
                &self.owned.send,
                "take_send_buf",
                counts.sends_retired,
                Error::QueueFull,
            )
        } else {
            (
                &self.owned.recv,
                "take_recv_buf",
                counts.recvs_retired,
                Error::RecvQueueFull,
            )
        };
        if let Some(held) = q.occupant(seq) {
            if held >= retired {
                // Its WR is still outstanding: the queue is full.
                return Err(full);
            }
            return Err(Error::Invalid(format!(
                "the QP holds a buffer for each of its last {} WRs (the queue's WR limit), \
                 retired ones included, until they are taken back: call Qp::{take}",
                q.slots()
            )));
        }
        Ok(())
    }

    /// The buffer of the oldest retired owned send WR not yet handed back,
    /// with its `wr_id` (match it with the completion [`Self::poll`] gave;
    /// unsignaled WRs are retired by a later signaled one's completion, a
    /// flushed one by its flush). In posting order; no allocation. `None`:
    /// none retired.
    pub fn take_send_buf(&mut self) -> Option<(u64, LocalMr)> {
        let retired = self.counts().sends_retired;
        self.owned.send.take(retired)
    }

    /// The buffer of the oldest completed (or flushed) owned receive not yet
    /// handed back, with its `wr_id`: the bytes received are in place in it
    /// (the completion's `byte_len` says how many). In posting order.
    pub fn take_recv_buf(&mut self) -> Option<(u64, LocalMr)> {
        let retired = self.counts().recvs_retired;
        self.owned.recv.take(retired)
    }
}
