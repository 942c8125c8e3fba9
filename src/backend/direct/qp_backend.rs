//! [`QpBackend`] for [`DirectQp`]: the shared interface, each method the
//! inherent one of the same name (inlined: the front end's dispatch costs
//! nothing over calling it directly).

use super::DirectQp;
use crate::backend::{EventWake, QpBackend, WrCounts};
use crate::ib::completion::Completion;
use crate::ib::error::Result;
use crate::ib::progress::WrProgress;
use crate::ib::qp_attr::{PathInfo, QpAttr, QpInfo, QpState};
use crate::ib::wr::{RecvWr, SendWrs};
use std::sync::Arc;

impl QpBackend for DirectQp {
    #[inline(always)]
    fn post_send<W: SendWrs + ?Sized>(&mut self, wrs: &W) -> Result<()> {
        Self::post_send(self, wrs)
    }
    #[inline(always)]
    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        Self::post_recv(self, wrs)
    }
    #[inline(always)]
    fn poll(&mut self, out: &mut [Completion]) -> Result<usize> {
        Self::poll(self, out)
    }
    #[inline(always)]
    fn arm_cq(&mut self, solicited_only: bool) -> Result<()> {
        Self::arm_cq(self, solicited_only)
    }
    #[inline(always)]
    fn wait_cq_event(&mut self, timeout: std::time::Duration) -> Result<bool> {
        Self::wait_cq_event(self, timeout)
    }
    #[inline(always)]
    fn event_wake(&mut self, waker: &std::task::Waker) -> Result<EventWake<'_>> {
        Self::event_wake(self, waker)
    }
    #[inline(always)]
    fn take_events(&mut self) -> Result<u32> {
        Self::take_events(self)
    }
    #[inline(always)]
    fn modify(&mut self, from: QpState, to: QpState, attr: &QpAttr) -> Result<()> {
        Self::modify(self, from, to, attr)
    }
    #[inline(always)]
    fn query(&self) -> Result<QpInfo> {
        Self::query(self)
    }
    #[inline(always)]
    fn counts(&self) -> WrCounts {
        Self::counts(self)
    }
    #[inline(always)]
    fn progress(&self) -> &Arc<WrProgress> {
        Self::progress(self)
    }
    #[inline(always)]
    fn cq_depth(&self) -> u32 {
        Self::cq_depth(self)
    }
    #[inline(always)]
    fn max_send_sge(&self) -> u32 {
        Self::max_send_sge(self)
    }
    #[inline(always)]
    fn qpn(&self) -> u32 {
        Self::qpn(self)
    }
    #[inline(always)]
    fn path(&self) -> PathInfo {
        Self::path(self)
    }
    #[inline(always)]
    fn set_path(&mut self, p: PathInfo) {
        Self::set_path(self, p)
    }
}
