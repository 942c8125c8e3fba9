//! The verbs control path over rdma-core's libibverbs (`rdma-sys`): devices
//! and ports, contexts, PDs, memory registrations, CQs with their completion
//! channels, QP state changes and queries, and the mlx5dv calls that hand a
//! ConnectX's rings to the direct path. Both backends (`direct` on ConnectX,
//! `verbs` everywhere) build on it. Every `unsafe` block here calls rdma-core.
//!
//! Sources: rdma-core `libibverbs/verbs.h` and `man ibv_modify_qp` (required
//! attribute masks per transition, also in `docs/prm.md`), perftest
//! `perftest_communication.c` (GID choice, RTR/RTS attributes).

mod ah;
mod cq;
mod dmabuf;
mod mlx5;
mod mw;
mod qp;
mod srq;

pub(crate) use ah::VerbsAh;
pub(crate) use cq::{VerbsChannel, VerbsCq};
pub(crate) use dmabuf::reg_dmabuf;
pub(crate) use mlx5::{
    cqe_comp_caps, create_mlx5_qp, describe_mlx5_cq, describe_mlx5_srq, mini_cqe_format,
    mlx5_supported, Mlx5Objs,
};
// The DC QPs on ConnectX, for the direct path.
pub(crate) use mlx5::{create_mlx5_dci, create_mlx5_dct};
pub(crate) use mw::alloc_mw;
pub(crate) use qp::{ibv_type, modify_raw, query_raw, QpCaps};
pub(crate) use srq::{async_fd, get_async_event, VerbsSrq};

use crate::ib::device::{GidEntry, PortDetail};
use crate::ib::error::{Error, Result};
use crate::ib::mem::{Access, Buffer};
use crate::ib::mr::{MrInner, Registration};
use rdma_sys::*;
use std::ffi::CStr;
use std::sync::Arc;

/// `RDMA_DIRECT_VERBS_OLD_POST=1` (read once): the verbs backend makes its
/// QPs and CQs with `ibv_create_qp` / `ibv_create_cq` and posts and polls
/// with `ibv_post_send` / `ibv_poll_cq`, as where a provider lacks the
/// extended verbs (to test that fallback on a device that has them).
pub(crate) fn old_verbs() -> bool {
    static OLD: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OLD.get_or_init(|| std::env::var("RDMA_DIRECT_VERBS_OLD_POST").is_ok_and(|v| v == "1"))
}

/// The provider's `verbs_context` op `$field` of `ctx`, as verbs.h's
/// `verbs_get_ctx_op` finds it: `None` where the context is not extended
/// or the library's `verbs_context` is too old to have it or the provider
/// left it unset. (rdma-sys 0.3.0's own `verbs_get_ctx` compares
/// `abi_compat` with `u32::MAX`, not verbs.h's `UINTPTR_MAX`, so on 64-bit
/// its `ibv_create_cq_ex` / `ibv_create_qp_ex` always say EOPNOTSUPP.)
macro_rules! ctx_op {
    ($ctx:expr, $field:ident) => {{
        let c: *mut ibv_context = $ctx;
        // SAFETY: `c` is a live context; an extended one (`abi_compat` is
        // verbs.h's `__VERBS_ABI_IS_EXTENDED`, all ones) is the `context`
        // field of a `verbs_context` whose `sz` says how much of it the
        // library has.
        unsafe {
            if (*c).abi_compat as usize != usize::MAX {
                None
            } else {
                let vc = c
                    .cast::<u8>()
                    .sub(std::mem::offset_of!(verbs_context, context))
                    .cast::<verbs_context>();
                if (*vc).sz
                    < std::mem::size_of::<verbs_context>()
                        - std::mem::offset_of!(verbs_context, $field)
                {
                    None
                } else {
                    (*vc).$field
                }
            }
        }
    }};
}

// (After `ctx_op!`, which it uses.)
mod odp;
pub(crate) use odp::{advise as advise_odp, odp_caps, reg_implicit as reg_implicit_odp};

/// verbs.h's `ibv_create_cq_ex`: null with errno EOPNOTSUPP where the
/// provider has no `create_cq_ex`.
pub(crate) fn create_cq_ex(ctx: &Ctx, attr: &mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex {
    match ctx_op!(ctx.raw, create_cq_ex) {
        // SAFETY: the provider's op on its live context; `attr` is valid.
        Some(f) => unsafe { f(ctx.raw, attr) },
        None => {
            // SAFETY: the thread's errno.
            unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
            std::ptr::null_mut()
        }
    }
}

/// verbs.h's `ibv_create_qp_ex`: null with errno EOPNOTSUPP where the
/// provider has no `create_qp_ex`.
pub(crate) fn create_qp_ex(ctx: &Ctx, attr: &mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
    match ctx_op!(ctx.raw, create_qp_ex) {
        // SAFETY: the provider's op on its live context; `attr` is valid
        // (its PD, CQs and SRQ live).
        Some(f) => unsafe { f(ctx.raw, attr) },
        None => {
            // SAFETY: the thread's errno.
            unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
            std::ptr::null_mut()
        }
    }
}

pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Turns a verbs return code into a typed error naming the call and, in
/// `detail` (e.g. " (port 2)"), the arguments that matter.
pub(crate) fn check_detail(
    call: &'static str,
    rc: i32,
    detail: impl FnOnce() -> String,
) -> Result<()> {
    let errno = match rc {
        0 => return Ok(()),
        // rdma-core returns errno values directly (positive) or -1 with errno set.
        rc if rc > 0 => rc,
        _ => errno(),
    };
    Err(Error::Verbs {
        call,
        errno,
        detail: detail(),
    })
}

/// One ibverbs device as `ibv_get_device_list` reports it.
#[derive(Clone, Debug)]
pub struct VerbsDeviceInfo {
    pub name: String,
    /// Node GUID in host order.
    pub node_guid: u64,
    /// The uverbs character device (`uverbs0`, ...).
    #[allow(dead_code)]
    pub dev_name: String,
}

struct DeviceList {
    list: *mut *mut ibv_device,
    n: usize,
}

impl DeviceList {
    fn get() -> Result<Self> {
        let mut n = 0;
        // SAFETY: FFI; `n` is a valid out-pointer.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(Error::Verbs {
                call: "ibv_get_device_list",
                errno: errno(),
                detail: String::new(),
            });
        }
        Ok(Self {
            list,
            n: n.max(0) as usize,
        })
    }
    fn devices(&self) -> impl Iterator<Item = *mut ibv_device> + '_ {
        // SAFETY: `list` holds `n` valid device pointers until freed in Drop.
        (0..self.n).map(move |i| unsafe { *self.list.add(i) })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: `list` came from ibv_get_device_list and is freed once.
        unsafe { ibv_free_device_list(self.list) };
    }
}

fn device_name(dev: *mut ibv_device) -> String {
    // SAFETY: `dev` is a live device of a live list; the name is a C string.
    unsafe { CStr::from_ptr(ibv_get_device_name(dev)) }
        .to_string_lossy()
        .into_owned()
}

/// Every ibverbs device on this host (empty where the kernel has no RDMA).
pub fn list_devices() -> Result<Vec<VerbsDeviceInfo>> {
    let list = match DeviceList::get() {
        Ok(l) => l,
        // libibverbs reports ENOSYS when the kernel has no RDMA subsystem at all.
        Err(Error::Verbs {
            errno: libc::ENOSYS,
            ..
        }) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(list
        .devices()
        .map(|d| {
            // SAFETY: `d` is a live device; dev_name is a NUL-terminated array.
            let dev_name = unsafe { CStr::from_ptr((*d).dev_name.as_ptr()) }
                .to_string_lossy()
                .into_owned();
            // SAFETY: as above.
            let guid = u64::from_be(unsafe { ibv_get_device_guid(d) });
            VerbsDeviceInfo {
                name: device_name(d),
                node_guid: guid,
                dev_name,
            }
        })
        .collect())
}

/// An open device context.
pub(crate) struct Ctx {
    pub(crate) raw: *mut ibv_context,
    pub(crate) name: String,
    /// Its ODP caps, asked once (`odp::odp_caps`).
    odp: std::sync::OnceLock<crate::ib::device::OdpCaps>,
}

// SAFETY: ibv_context is thread-safe for the calls we make (rdma-core locks internally).
unsafe impl Send for Ctx {}
// SAFETY: as for `Send`: rdma-core locks the context calls made through
// `&Ctx`; closing it needs `drop`'s `&mut`.
unsafe impl Sync for Ctx {}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: opened in `open`, closed once, after every PD/CQ/QP holding an Arc is gone.
        unsafe { ibv_close_device(self.raw) };
    }
}

/// Opens the device called `name`; `Ok(None)` if there is none.
pub(crate) fn open(name: &str) -> Result<Option<Arc<Ctx>>> {
    let list = match DeviceList::get() {
        Ok(l) => l,
        Err(Error::Verbs {
            errno: libc::ENOSYS,
            ..
        }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some(dev) = list.devices().find(|&d| device_name(d) == name) else {
        return Ok(None);
    };
    // SAFETY: `dev` is a live device of `list`, which outlives the call.
    let raw = unsafe { ibv_open_device(dev) };
    if raw.is_null() {
        return Err(Error::Verbs {
            call: "ibv_open_device",
            errno: errno(),
            detail: String::new(),
        });
    }
    Ok(Some(Arc::new(Ctx {
        raw,
        name: name.to_owned(),
        odp: std::sync::OnceLock::new(),
    })))
}

/// The port facts the connection needs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PortInfo {
    pub(crate) lid: u16,
    /// `enum ibv_mtu` value.
    pub(crate) active_mtu: u32,
    /// `IBV_LINK_LAYER_ETHERNET` (2) for RoCE.
    pub(crate) link_layer: u8,
    pub(crate) gid_tbl_len: i32,
}

impl Ctx {
    pub(crate) fn query_port(&self, port: u8) -> Result<PortInfo> {
        // SAFETY: ibv_port_attr is plain data; zero is a valid bit pattern.
        let mut a: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: live context, valid out-pointer.
        let r = check_detail(
            "ibv_query_port",
            unsafe { ___ibv_query_port(self.raw, port, &mut a) },
            || format!(" ({} port {port})", self.name),
        );
        match r {
            // A port number the device does not have is the caller's argument.
            Err(Error::Verbs { errno, .. }) if errno == libc::EINVAL => {
                return Err(Error::Invalid(format!(
                    "{} has no port {port} (`rdma-direct devices` lists its ports)",
                    self.name
                )))
            }
            r => r?,
        }
        Ok(PortInfo {
            lid: a.lid,
            active_mtu: a.active_mtu,
            link_layer: a.link_layer,
            gid_tbl_len: a.gid_tbl_len,
        })
    }

    fn query_gid(&self, port: u8, index: i32) -> Result<[u8; 16]> {
        // SAFETY: ibv_gid is plain data.
        let mut g: ibv_gid = unsafe { std::mem::zeroed() };
        check_detail(
            "ibv_query_gid",
            // SAFETY: live context, valid out-pointer.
            unsafe { ibv_query_gid(self.raw, port, index, &mut g) },
            || format!(" ({} port {port} index {index})", self.name),
        )?;
        // SAFETY: every bit pattern of the union is a valid [u8; 16].
        Ok(unsafe { g.raw })
    }

    /// The GID index to use on RoCE: the explicit one if given, else the first
    /// IPv4-mapped RoCE v2 entry (as perftest picks). Types come from sysfs
    /// (`/sys/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<index>`).
    pub(crate) fn choose_gid(
        &self,
        port: u8,
        info: &PortInfo,
        explicit: Option<u8>,
    ) -> Result<(u8, [u8; 16])> {
        if let Some(i) = explicit {
            let gid = if (i as i32) < info.gid_tbl_len {
                self.query_gid(port, i as i32).ok()
            } else {
                None
            };
            return match gid {
                Some(g) if g != [0; 16] => Ok((i, g)),
                _ => Err(Error::Invalid(format!(
                    "GID index {i} of {} port {port} is empty (the table has {} entries; `rdma-direct devices` lists them)",
                    self.name, info.gid_tbl_len
                ))),
            };
        }
        let mut seen = Vec::new();
        for i in 0..info.gid_tbl_len.min(256) {
            let Ok(gid) = self.query_gid(port, i) else {
                continue;
            };
            if gid == [0; 16] {
                continue;
            }
            let ty = std::fs::read_to_string(format!(
                "/sys/class/infiniband/{}/ports/{port}/gid_attrs/types/{i}",
                self.name
            ))
            .unwrap_or_default();
            let v4_mapped = gid[..10] == [0; 10] && gid[10..12] == [0xff, 0xff];
            if ty.trim() == "RoCE v2" && v4_mapped {
                return Ok((i as u8, gid));
            }
            seen.push(format!(
                "{i}: {} {}",
                ty.trim(),
                std::net::Ipv6Addr::from(gid)
            ));
        }
        Err(Error::NoGid(format!(
            "device {} port {port} has no IPv4-mapped RoCE v2 GID (give the address an IPv4 address, or pass a GID index); GIDs seen: [{}]",
            self.name,
            seen.join(", ")
        )))
    }
}

/// A protection domain.
pub(crate) struct Pd {
    pub(crate) raw: *mut ibv_pd,
    pub(crate) ctx: Arc<Ctx>,
}

// SAFETY: as for Ctx: rdma-core's PD calls (`ibv_reg_mr`, `ibv_create_qp`,
// ...) are thread-safe; deallocating it needs `drop`'s `&mut`.
unsafe impl Send for Pd {}
// SAFETY: as for Ctx: the PD calls made through `&Pd` are thread-safe.
unsafe impl Sync for Pd {}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: allocated in `alloc_pd`; every MR and QP holds an Arc<Pd>, so none is left.
        unsafe { ibv_dealloc_pd(self.raw) };
    }
}

pub(crate) fn alloc_pd(ctx: &Arc<Ctx>) -> Result<Arc<Pd>> {
    // SAFETY: live context.
    let raw = unsafe { ibv_alloc_pd(ctx.raw) };
    if raw.is_null() {
        return Err(Error::Verbs {
            call: "ibv_alloc_pd",
            errno: errno(),
            detail: String::new(),
        });
    }
    Ok(Arc::new(Pd {
        raw,
        ctx: ctx.clone(),
    }))
}

struct MrReg {
    raw: *mut ibv_mr,
    _pd: Arc<Pd>,
}

// SAFETY: an ibv_mr handle is only deregistered, once, on drop.
unsafe impl Send for MrReg {}
// SAFETY: `&MrReg` gives the handle only as an integer (`handle`, for a
// window bind, which rdma-core reads it in); only `drop` frees it.
unsafe impl Sync for MrReg {}
impl Registration for MrReg {
    /// The `*mut ibv_mr` (`ibv_mw_bind_info.mr` of a window bound to it).
    fn handle(&self) -> usize {
        self.raw as usize
    }
}

impl Drop for MrReg {
    fn drop(&mut self) {
        // SAFETY: registered in `reg_mr`, deregistered once, before its buffer is freed.
        unsafe { ibv_dereg_mr(self.raw) };
    }
}

/// Registers `buf` with `ibv_reg_mr` (access flags as given: the caller
/// checked them); the `MrInner` returned owns both, and its field order
/// deregisters before it frees the buffer.
///
/// With [`Access::ON_DEMAND`], the device's ODP caps are asked first.
///
/// Errors: [`Error::Unsupported`] ([`Feature::Odp`](crate::Feature::Odp))
/// for ON_DEMAND where the caps lack `IBV_ODP_SUPPORT` (before the verb) or
/// the kernel answers `EOPNOTSUPP`; `ibv_reg_mr`'s others, as [`Error::Verbs`].
pub(crate) fn reg_mr(pd: &Arc<Pd>, buf: Buffer, access: Access) -> Result<MrInner> {
    let odp = access.contains(Access::ON_DEMAND);
    if odp {
        odp::check(&pd.ctx, false)?;
    }
    // SAFETY: `buf` is live memory of `buf.len()` bytes; it moves into the
    // MrInner returned, which drops this registration before the buffer.
    let raw = unsafe { ibv_reg_mr(pd.raw, buf.ptr().cast(), buf.len(), access.bits() as i32) };
    if raw.is_null() {
        let (errno, detail) = (
            errno(),
            format!(
                " ({} bytes at {:p}, access {access:?})",
                buf.len(),
                buf.ptr()
            ),
        );
        if odp {
            return Err(odp::refusal(&pd.ctx, "ibv_reg_mr", errno, detail));
        }
        return Err(Error::Verbs {
            call: "ibv_reg_mr",
            errno,
            detail,
        });
    }
    // SAFETY: non-null ibv_mr returned by rdma-core.
    let (lkey, rkey) = unsafe { ((*raw).lkey, (*raw).rkey) };
    Ok(MrInner {
        reg: Box::new(MrReg {
            raw,
            _pd: pd.clone(),
        }),
        live: None,
        pd: 0,
        buf,
        lkey,
        rkey,
        access,
    })
}

/// What `rdma-direct devices` shows of one ibverbs device: its driver and
/// every port with state, link layer, MTU, rate and GID table; whether it
/// is an mlx5; its ODP caps.
pub(crate) fn describe(
    name: &str,
) -> Result<(String, Vec<PortDetail>, bool, crate::ib::device::OdpCaps)> {
    let ctx = open(name)?.ok_or_else(|| Error::NoSuchDevice { name: name.into() })?;
    // SAFETY: plain data; zero is valid.
    let mut dev: ibv_device_attr = unsafe { std::mem::zeroed() };
    check_detail(
        "ibv_query_device",
        // SAFETY: live context; valid out-pointer.
        unsafe { ibv_query_device(ctx.raw, &mut dev) },
        || format!(" ({name})"),
    )?;
    let sys = format!("/sys/class/infiniband/{name}");
    let driver = std::fs::read_link(format!("{sys}/device/driver"))
        .ok()
        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
        .or_else(|| {
            // Soft-RoCE has no bus device; its sysfs names the netdev it runs on.
            std::fs::read_to_string(format!("{sys}/parent"))
                .ok()
                .map(|p| format!("rdma_rxe (on {})", p.trim()))
        })
        .unwrap_or_else(|| "unknown".into());
    let mut ports = Vec::new();
    for port in 1..=dev.phys_port_cnt {
        // SAFETY: plain data; zero is valid.
        let mut a: ibv_port_attr = unsafe { std::mem::zeroed() };
        check_detail(
            "ibv_query_port",
            // SAFETY: live context; valid out-pointer.
            unsafe { ___ibv_query_port(ctx.raw, port, &mut a) },
            || format!(" ({name} port {port})"),
        )?;
        let state = match a.state {
            ibv_port_state::IBV_PORT_DOWN => "DOWN",
            ibv_port_state::IBV_PORT_INIT => "INIT",
            ibv_port_state::IBV_PORT_ARMED => "ARMED",
            ibv_port_state::IBV_PORT_ACTIVE => "ACTIVE",
            ibv_port_state::IBV_PORT_ACTIVE_DEFER => "ACTIVE_DEFER",
            _ => "NOP",
        };
        let link_layer = match a.link_layer {
            2 => "Ethernet",
            _ => "InfiniBand",
        };
        // Per-lane Gb/s for `active_speed`, lanes for `active_width` (IB spec 14.2.5.6).
        let lane = match a.active_speed {
            1 => 2.5,
            2 => 5.0,
            4 | 8 => 10.0,
            16 => 14.0625,
            32 => 25.78125,
            64 => 53.125,
            128 => 106.25,
            _ => 0.0,
        };
        let lanes = match a.active_width {
            1 => 1.0,
            2 => 4.0,
            4 => 8.0,
            8 => 12.0,
            16 => 2.0,
            _ => 0.0,
        };
        let mut gids = Vec::new();
        for i in 0..a.gid_tbl_len.clamp(0, 256) {
            let Ok(gid) = ctx.query_gid(port, i) else {
                continue;
            };
            if gid == [0; 16] {
                continue;
            }
            let kind = std::fs::read_to_string(format!("{sys}/ports/{port}/gid_attrs/types/{i}"))
                .map(|t| t.trim().to_string())
                .unwrap_or_else(|_| "IB".into());
            gids.push(GidEntry {
                index: i as u32,
                gid,
                kind,
            });
        }
        ports.push(PortDetail {
            port,
            state,
            link_layer,
            active_mtu: (1..=5)
                .contains(&a.active_mtu)
                .then(|| 128u32 << a.active_mtu),
            rate_gbps: (lane * lanes > 0.0).then_some(lane * lanes),
            lid: a.lid,
            gids,
        });
    }
    Ok((driver, ports, mlx5_supported(&ctx), odp_caps(&ctx)))
}
