//! Opening a device: the sim or an ibverbs device, and which data path its
//! QPs take.

#[cfg(feature = "verbs")]
use crate::backend::ibv;
use crate::device::handles::{CtxKind, PdInner, PdKind};
use crate::ib::device::{Backend, DataPath, DeviceInfo, OdpCaps, PortDetail, SIM_DEVICE};
use crate::ib::error::{Error, Result};
use crate::ib::event::AsyncEvent;
use crate::pd::reclaim::DeregQueue;
use crate::pd::Pd;
use mlx5_dv::sim;
use std::sync::Arc;

/// The sim and every ibverbs device on this host.
pub fn list_devices() -> Result<Vec<DeviceInfo>> {
    #[cfg_attr(not(feature = "verbs"), allow(unused_mut))]
    let mut v = vec![DeviceInfo {
        name: SIM_DEVICE.into(),
        kind: "sim",
        driver: "sim".into(),
        node_guid: 0,
        data_path: DataPath::Direct,
        ports: vec![PortDetail {
            port: 1,
            state: "ACTIVE",
            link_layer: "sim",
            active_mtu: None,
            rate_gbps: None,
            lid: 0,
            gids: Vec::new(),
        }],
        error: None,
        odp: sim_odp_caps(&sim::Device::new()),
    }];
    #[cfg(feature = "verbs")]
    for d in ibv::list_devices()? {
        let (driver, ports, mlx5, odp, error) = match ibv::describe(&d.name) {
            Ok((driver, ports, mlx5, odp)) => (driver, ports, mlx5, odp, None),
            Err(e) => (
                "unknown".into(),
                Vec::new(),
                false,
                OdpCaps::default(),
                Some(e.to_string()),
            ),
        };
        v.push(DeviceInfo {
            name: d.name,
            kind: "verbs",
            driver,
            node_guid: d.node_guid,
            // What `Backend::Auto` picks: direct on ConnectX (mlx5dv).
            data_path: if mlx5 {
                DataPath::Direct
            } else {
                DataPath::Verbs
            },
            ports,
            error,
            odp,
        });
    }
    Ok(v)
}

/// The sim's ODP caps as the crate reports them.
fn sim_odp_caps(dev: &sim::Device) -> OdpCaps {
    crate::backend::direct::sim_odp_caps(dev)
}

/// A sim async event as the crate reports it.
fn from_sim(e: sim::AsyncEvent) -> AsyncEvent {
    match e {
        sim::AsyncEvent::SrqLimitReached { srqn } => AsyncEvent::SrqLimitReached { srq_num: srqn },
        sim::AsyncEvent::CqError { cqn } => AsyncEvent::CqError { cq_num: cqn },
        sim::AsyncEvent::QpFatal { qpn } => AsyncEvent::QpFatal { qp_num: qpn },
        sim::AsyncEvent::SqDrained { qpn } => AsyncEvent::SqDrained { qp_num: qpn },
    }
}

/// An open device.
pub struct Context {
    kind: CtxKind,
    name: String,
    /// Sim events taken from the device and not yet handed out.
    pending: std::sync::Mutex<std::collections::VecDeque<AsyncEvent>>,
}

impl Context {
    /// Opens `name`: `sim` (a new software mlx5 device with its own device
    /// thread, which ends when the context and everything made from it are
    /// dropped) or an ibverbs device name such as `rxe0` or `mlx5_0`.
    /// Each open of `sim` is a device of its own, with no wire to another:
    /// QPs connect only to QPs of the same `Context`.
    pub fn open(name: &str) -> Result<Context> {
        Self::open_with(name, Backend::Auto)
    }

    /// Opens `name` with the data path `backend` asks for.
    ///
    /// Errors: [`Backend::Direct`] on a device that is neither the sim nor
    /// an mlx5, or [`Backend::Verbs`] on the sim ([`Error::Unsupported`]).
    pub fn open_with(name: &str, backend: Backend) -> Result<Context> {
        if name == SIM_DEVICE {
            if backend == Backend::Verbs {
                return Err(Error::Unsupported {
                    device: SIM_DEVICE.into(),
                    feature: crate::Feature::VerbsPath,
                });
            }
            let dev = sim::Device::new();
            dev.start()?;
            return Ok(Context {
                kind: CtxKind::Sim(dev),
                name: name.into(),
                pending: Default::default(),
            });
        }
        #[cfg(feature = "verbs")]
        {
            match ibv::open(name)? {
                Some(c) => {
                    let mlx5 = ibv::mlx5_supported(&c);
                    let path = match backend {
                        Backend::Auto if mlx5 => DataPath::Direct,
                        Backend::Auto | Backend::Verbs => DataPath::Verbs,
                        Backend::Direct if mlx5 => DataPath::Direct,
                        Backend::Direct => {
                            return Err(Error::Unsupported {
                                device: name.into(),
                                feature: crate::Feature::DirectPath,
                            })
                        }
                    };
                    Ok(Context {
                        kind: CtxKind::Verbs(c, path),
                        name: name.into(),
                        pending: Default::default(),
                    })
                }
                None => Err(Error::NoSuchDevice { name: name.into() }),
            }
        }
        #[cfg(not(feature = "verbs"))]
        Err(Error::NoVerbs { name: name.into() })
    }

    /// The device name it was opened by (`mlx5_0`, `sim`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device's on-demand paging caps (what [`DeviceInfo::odp`] lists):
    /// the sim's model of them (`mlx5_dv::sim::Device::odp_caps`), or
    /// `ibv_query_device_ex(3)`'s `odp_caps`, asked once per context (empty
    /// where the provider has no `query_device_ex`). What
    /// [`Access::ON_DEMAND`](crate::Access::ON_DEMAND) registrations and
    /// [`Pd::reg_implicit_odp`] are checked against.
    pub fn odp_caps(&self) -> OdpCaps {
        match &self.kind {
            CtxKind::Sim(d) => sim_odp_caps(d),
            #[cfg(feature = "verbs")]
            CtxKind::Verbs(c, _) => ibv::odp_caps(c),
        }
    }

    /// The data path QPs of this device use.
    pub fn data_path(&self) -> DataPath {
        match self.kind {
            CtxKind::Sim(_) => DataPath::Direct,
            #[cfg(feature = "verbs")]
            CtxKind::Verbs(_, path) => path,
        }
    }

    /// Waits up to `timeout` for the device's next async event (a port
    /// going up or down, a CQ error, an SRQ's limit reached, ...), and
    /// returns it; `None` when none came in time. A blocking reader: on
    /// verbs `poll(2)` on the context's `async_fd` (made non-blocking),
    /// then `ibv_get_async_event` and `ibv_ack_async_event` (every event
    /// is acknowledged before this returns); on the sim, its event fd.
    /// Which events each device raises: `docs/concepts.md`.
    ///
    /// Errors: the system's refusal of the wait or the read
    /// ([`Error::Verbs`], [`Error::Os`]).
    #[cfg_attr(not(feature = "verbs"), allow(clippy::infallible_destructuring_match))]
    pub fn get_async_event(&self, timeout: std::time::Duration) -> Result<Option<AsyncEvent>> {
        let dev = match &self.kind {
            CtxKind::Sim(d) => d,
            #[cfg(feature = "verbs")]
            CtxKind::Verbs(c, _) => return ibv::get_async_event(c, timeout),
        };
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.is_empty() {
            pending.extend(dev.take_async_events().into_iter().map(from_sim));
        }
        if pending.is_empty() {
            let fd = dev.async_event_fd()?;
            use std::os::fd::AsFd;
            if crate::backend::wait_readable(fd.as_fd(), timeout, "the sim's async event fd")? {
                pending.extend(dev.take_async_events().into_iter().map(from_sim));
            }
        }
        Ok(pending.pop_front())
    }

    /// A duplicate of the file descriptor that becomes readable when the
    /// device has an async event (non-blocking), for
    /// [`AsyncEvents`](crate::AsyncEvents).
    pub(crate) fn async_event_fd(&self) -> Result<std::os::fd::OwnedFd> {
        match &self.kind {
            CtxKind::Sim(d) => {
                use std::os::fd::AsFd;
                d.async_event_fd()?
                    .as_fd()
                    .try_clone_to_owned()
                    .map_err(|e| Error::Os {
                        what: "dup of the sim's async event fd".into(),
                        source: e,
                    })
            }
            #[cfg(feature = "verbs")]
            CtxKind::Verbs(c, _) => ibv::async_fd(c),
        }
    }

    /// A completion channel that many CQs may share
    /// ([`Pd::create_shared_cq_on`]): one fd, one event loop, each event
    /// naming its CQ's token. `ibv_create_comp_channel(3)`, its fd made
    /// `O_NONBLOCK`; a sim channel on the sim.
    ///
    /// Errors: the device's ([`Error::Verbs`], `ibv_create_comp_channel`;
    /// on the sim [`Error::Sim`] when no eventfd can be made).
    pub fn create_comp_channel(&self) -> Result<crate::CompChannel> {
        crate::CompChannel::create(&self.kind)
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<Pd> {
        let kind = match &self.kind {
            CtxKind::Sim(d) => PdKind::Sim(d.clone(), d.alloc_pd()),
            #[cfg(feature = "verbs")]
            CtxKind::Verbs(c, path) => PdKind::Verbs(ibv::alloc_pd(c)?, *path),
        };
        Ok(Pd {
            inner: Arc::new(PdInner {
                dereg: Arc::new(DeregQueue::default()),
                id: PdInner::next_id(),
                registrations: std::sync::atomic::AtomicU64::new(0),
                kind,
            }),
        })
    }
}
