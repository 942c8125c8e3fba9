//! One-opcode posts: [`Qp::post_write`] and [`Qp::post_write_inline`], the
//! two most common WRs of storage and RPC systems, each built for its one
//! opcode, so that nothing is decoded per WR (rdma-core's `ibv_wr_rdma_write`
//! with `ibv_wr_set_sge` / `ibv_wr_set_inline_data`; UCX's
//! `uct_ep_put_zcopy` / `uct_ep_put_short`). Each posts exactly what
//! [`Qp::post_send`] posts for the same [`SendWr`], with the same checks and
//! errors: on the direct path the common case is built in place in the SQ,
//! and anything else takes [`Qp::post_send`].

use crate::ib::error::Result;
use crate::ib::keys::RemoteAddr;
use crate::ib::wr::{SendFlags, SendWr, Sge, WriteWr};
use crate::qp::{Qp, QpKind};

impl Qp {
    /// Posts one RDMA WRITE of `w.sge` to `w.remote`, with `w.flags`: what
    /// [`Self::post_send`] posts for [`WriteWr::to_send_wr`], and the same
    /// errors ([`Error::QpState`], [`Error::QueueFull`], [`Error::CqFull`],
    /// [`Error::ForeignPd`] for an SGE of another PD). On the direct path the
    /// WQE (one WQEBB: `docs/prm.md`) is written in place and rung with
    /// BlueFlame. A zero-length SGE is posted as a WRITE of no data
    /// segment, as [`Self::post_send`] does.
    ///
    /// [`Error::QpState`]: crate::Error::QpState
    /// [`Error::QueueFull`]: crate::Error::QueueFull
    /// [`Error::CqFull`]: crate::Error::CqFull
    /// [`Error::ForeignPd`]: crate::Error::ForeignPd
    #[inline(always)]
    #[cfg_attr(not(feature = "verbs"), allow(irrefutable_let_patterns))]
    pub fn post_write(&mut self, w: &WriteWr<'_>) -> Result<()> {
        let pd = self.pd_id;
        if let QpKind::Direct(q) = &mut self.kind {
            if q.post_write(w, pd).is_ok() {
                return Ok(());
            }
        }
        self.post_write_general(w)
    }

    /// [`Self::post_write`] through [`Self::post_send`]'s checked path (the
    /// in-place post declined it).
    #[inline(never)]
    pub(crate) fn post_write_general(&mut self, w: &WriteWr<'_>) -> Result<()> {
        self.post_send_checked(std::slice::from_ref(w))
    }
}

impl Qp {
    /// Posts one RDMA WRITE of the bytes of `data` to `remote`, inline
    /// (copied into the WQE now, so `data` may be any memory and is free
    /// again when this returns), with `flags`: what [`Self::post_send`]
    /// posts for `SendWr::rdma_write(wr_id, &[Sge::bytes(data)?],
    /// remote).inline()` with those flags, and the same errors, and
    /// [`Error::InlineTooLong`] above [`Self::max_inline`] bytes. On the direct
    /// path the WQE (`ceil((36 + len) / 64)` WQEBBs: `docs/prm.md`) is built
    /// in place and rung with BlueFlame. (UCX's `uct_ep_put_short`.)
    ///
    /// [`Error::InlineTooLong`]: crate::Error::InlineTooLong
    #[inline(always)]
    #[cfg_attr(not(feature = "verbs"), allow(irrefutable_let_patterns))]
    pub fn post_write_inline(
        &mut self,
        wr_id: u64,
        data: &[u8],
        remote: RemoteAddr,
        flags: SendFlags,
    ) -> Result<()> {
        if let QpKind::Direct(q) = &mut self.kind {
            if q.post_write_inline(wr_id, data, remote, flags).is_ok() {
                return Ok(());
            }
        }
        self.post_write_inline_general(wr_id, data, remote, flags)
    }

    /// [`Self::post_write_inline`] through [`Self::post_send`]'s checked
    /// path (the in-place post declined it).
    #[inline(never)]
    fn post_write_inline_general(
        &mut self,
        wr_id: u64,
        data: &[u8],
        remote: RemoteAddr,
        flags: SendFlags,
    ) -> Result<()> {
        let sges = [Sge::bytes(data)?];
        let w = SendWr::rdma_write(wr_id, &sges, remote)
            .inline()
            .with_flags(flags);
        self.post_send_checked(std::slice::from_ref(&w))
    }
}

impl Qp {
    /// Posts a batch of 1-SGE RDMA WRITEs with one doorbell: what
    /// [`Self::post_send`] posts for their [`WriteWr::to_send_wr`]s, with
    /// the same checks, errors and all-or-nothing rule (on any error
    /// nothing is posted). On the direct path each WQE (one WQEBB) is built
    /// in place and the last one's first 8 bytes ring the doorbell, as
    /// rdma-core rings a batch. Where the in-place path cannot post them (the
    /// verbs path; an error to report) they go through [`Self::post_send`]'s
    /// checks and backends, each `SendWr` made as it is read (no copy of the
    /// batch, no allocation).
    #[inline(always)]
    #[cfg_attr(not(feature = "verbs"), allow(irrefutable_let_patterns))]
    pub fn post_writes(&mut self, wrs: &[WriteWr<'_>]) -> Result<()> {
        let pd = self.pd_id;
        if let QpKind::Direct(q) = &mut self.kind {
            if q.post_writes(wrs, pd).is_ok() {
                return Ok(());
            }
        }
        self.post_writes_general(wrs)
    }

    /// [`Self::post_writes`] through [`Self::post_send`]'s checked path,
    /// which makes each WR's `SendWr` as it reads it (`SendWrs`).
    #[inline(never)]
    fn post_writes_general(&mut self, wrs: &[WriteWr<'_>]) -> Result<()> {
        self.post_send_checked(wrs)
    }
}
