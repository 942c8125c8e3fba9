//! Protection domains: memory registration, and where QPs and shared CQs
//! are created.

use crate::backend::direct;
#[cfg(feature = "verbs")]
use crate::backend::ibv;
use crate::cq::SharedCq;
use crate::handles::{PdInner, PdKind, SharedKind};
use crate::qp::Qp;
use crate::types::config::QpConfig;
use crate::types::error::{Error, Result};
use crate::types::mem::{Access, Buffer, Mr, Pages};
use mlx5_dv::driver::CqCredits;
use std::sync::Arc;

/// A protection domain. It keeps every MR registered through it alive (memory
/// and registration) until the PD and every QP created from it are dropped.
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

impl Pd {
    /// Registers a new zeroed, page-aligned buffer of `len` bytes.
    ///
    /// Errors: `len` of 0, or REMOTE_WRITE / REMOTE_ATOMIC without LOCAL_WRITE
    /// (the IB spec requires it) are refused before any registration.
    pub fn reg_mr(&self, len: usize, access: Access) -> Result<Mr> {
        check_access(access)?;
        self.register(Buffer::new(len)?, access)
    }

    /// Registers a fresh anonymous mapping of `len` bytes (huge pages when
    /// the system has them: see [`Pages`]), as the memory pool's chunks are.
    ///
    /// Errors: as [`Self::reg_mr`]; the mapping's.
    pub fn reg_mapped(&self, len: usize, access: Access) -> Result<(Mr, Pages)> {
        check_access(access)?;
        let (buf, pages) = Buffer::mapped(len)?;
        Ok((self.register(buf, access)?, pages))
    }

    /// How many memory registrations this PD has made (pool chunks
    /// included): a pool that serves from its chunks adds none.
    pub fn registrations(&self) -> u64 {
        self.inner
            .registrations
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Releases `mr` now, instead of when the PD goes: for a registration
    /// no work request has ever named (a pool whose building failed).
    pub(crate) fn release_unused(&self, mr: Mr) {
        self.inner
            .mrs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|m| !Arc::ptr_eq(m, &mr.inner));
    }

    /// Registers `buf` (checked access flags) and keeps it with the PD.
    fn register(&self, buf: Buffer, access: Access) -> Result<Mr> {
        check_access(access)?;
        let inner = Arc::new(match &self.inner.kind {
            PdKind::Sim(dev, pdn) => direct::reg_sim_mr(dev, *pdn, buf, access)?,
            #[cfg(feature = "verbs")]
            PdKind::Verbs(pd, _) => ibv::reg_mr(pd, buf, access)?,
        });
        self.inner
            .registrations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner
            .mrs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(inner.clone());
        Ok(Mr { inner })
    }

    /// Creates two RC QPs on this device, each with its own CQ, and takes both
    /// RESET -> INIT -> RTR -> RTS connected to each other (loopback):
    /// [`Pd::create_qp`] twice, then [`Qp::connect_loopback`].
    pub fn create_connected_pair(&self, cfg: &QpConfig) -> Result<(Qp, Qp)> {
        let mut a = self.create_qp(cfg)?;
        let mut b = self.create_qp(cfg)?;
        Qp::connect_loopback(&mut a, &mut b)?;
        Ok((a, b))
    }

    /// Creates an RC QP with its own CQ, in RESET: it takes no work request
    /// until it is connected ([`Qp::connect_loopback`]).
    ///
    /// The CQ has room for a completion of every outstanding send and every
    /// posted receive (what a flush after an error produces), so it cannot
    /// overrun.
    ///
    /// Errors: [`Error::Invalid`], before the device is asked, when
    /// `max_send_wr` is not 1..=16384, `max_recv_wr` over 16384, `rnr_retry`
    /// over 7, `min_rnr_timer` over 31 or `cq_depth` not 1..=4194304; the
    /// device's own refusals as [`Error::Verbs`] naming the call.
    pub fn create_qp(&self, cfg: &QpConfig) -> Result<Qp> {
        Qp::create(&self.inner, cfg, None)
    }

    /// Creates a CQ of at least `depth` CQEs for several QPs to share
    /// ([`SharedCq::create_qp`]); [`CqSizing`](crate::CqSizing) gives a depth that never
    /// limits posting. On verbs this is `ibv_create_cq` with a completion
    /// channel; on the direct path our poller runs over its ring.
    ///
    /// Errors: [`Error::Invalid`] when `depth` is not 1..=4194304; the
    /// device's refusal as [`Error::Verbs`].
    pub fn create_shared_cq(&self, depth: u32) -> Result<SharedCq> {
        if depth == 0 || depth > 1 << 22 {
            return Err(Error::Invalid(format!(
                "shared CQ depth {depth} must be 1..=4194304"
            )));
        }
        let kind = match &self.inner.kind {
            PdKind::Sim(dev, _) => SharedKind::Direct(direct::DirectCq::create_sim(dev, depth)?),
            #[cfg(feature = "verbs")]
            PdKind::Verbs(pd, true) => {
                SharedKind::Direct(direct::DirectCq::create_mlx5(&pd.ctx, depth)?)
            }
            #[cfg(feature = "verbs")]
            PdKind::Verbs(pd, false) => SharedKind::Verbs(ibv::VerbsCq::create(&pd.ctx, depth)?),
        };
        let depth = match &kind {
            SharedKind::Direct(c) => c.depth(),
            #[cfg(feature = "verbs")]
            SharedKind::Verbs(c) => c.depth,
        };
        Ok(SharedCq::new(
            kind,
            CqCredits::new(depth),
            self.inner.clone(),
        ))
    }
}

/// Access flags a registration takes: only bits this crate knows, and
/// REMOTE_WRITE / REMOTE_ATOMIC only with LOCAL_WRITE (IB spec 10.6.3.1).
fn check_access(access: Access) -> Result<()> {
    if Access::from_bits(access.bits()).is_none() {
        return Err(Error::Invalid(format!(
            "access flags {:#x} hold bits this crate does not know",
            access.bits()
        )));
    }
    if access.intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
        && !access.contains(Access::LOCAL_WRITE)
    {
        return Err(Error::Invalid(
            "REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE too".into(),
        ));
    }
    Ok(())
}
