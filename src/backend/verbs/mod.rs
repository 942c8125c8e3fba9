//! The verbs control path and the portable data path, over rdma-core's
//! libibverbs (`rdma-sys`). The FFI door: every `unsafe` block of the portable
//! crate that calls rdma-core lives here.
//!
//! Sources: rdma-core `libibverbs/verbs.h` and `man ibv_modify_qp` (required
//! attribute masks per transition, also in `docs/prm.md`), perftest
//! `perftest_communication.c` (GID choice, RTR/RTS attributes).

use crate::mem::{Access, Buffer, Registration};
use crate::wr::{Completion, SendWr, WcOpcode, WcStatus, WrOp};
use crate::{Error, Result};
use crate::{QpAttr, QpAttrMask, QpState};
use mlx5_dv::driver::CqCredits;
use rdma_sys::*;
use std::ffi::CStr;
use std::sync::Arc;

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
    raw: *mut ibv_context,
    pub(crate) name: String,
}

// SAFETY: ibv_context is thread-safe for the calls we make (rdma-core locks internally).
unsafe impl Send for Ctx {}
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
        // SAFETY: live context, valid out-pointer.
        check_detail(
            "ibv_query_gid",
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
    raw: *mut ibv_pd,
    pub(crate) ctx: Arc<Ctx>,
}

// SAFETY: as for Ctx.
unsafe impl Send for Pd {}
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
unsafe impl Sync for MrReg {}
impl Registration for MrReg {}

impl Drop for MrReg {
    fn drop(&mut self) {
        // SAFETY: registered in `reg_mr`, deregistered once, before its buffer is freed.
        unsafe { ibv_dereg_mr(self.raw) };
    }
}

/// Registers `buf`; returns the registration (deregisters on drop), lkey, rkey.
pub(crate) fn reg_mr(
    pd: &Arc<Pd>,
    buf: &Buffer,
    access: Access,
) -> Result<(Box<dyn Registration>, u32, u32)> {
    // SAFETY: `buf` is live memory of `buf.len()` bytes; the caller keeps it
    // alive until the returned registration is dropped (MrInner field order).
    let raw = unsafe { ibv_reg_mr(pd.raw, buf.ptr().cast(), buf.len(), access.bits() as i32) };
    if raw.is_null() {
        return Err(Error::Verbs {
            call: "ibv_reg_mr",
            errno: errno(),
            detail: String::new(),
        });
    }
    // SAFETY: non-null ibv_mr returned by rdma-core.
    let (lkey, rkey) = unsafe { ((*raw).lkey, (*raw).rkey) };
    Ok((
        Box::new(MrReg {
            raw,
            _pd: pd.clone(),
        }),
        lkey,
        rkey,
    ))
}

/// Sizes of one QP.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QpCaps {
    pub(crate) max_send_wr: u32,
    pub(crate) max_send_sge: u32,
    pub(crate) max_inline: u32,
    pub(crate) max_recv_wr: u32,
    pub(crate) max_recv_sge: u32,
}

/// How many WRs of a chain a post call took: all on success; on failure
/// those before `bad`, the first one not posted (verbs contract).
fn posted_count<T>(rc: i32, chain: &[T], bad: *mut T) -> usize {
    if rc == 0 {
        return chain.len();
    }
    chain.iter().position(|w| std::ptr::eq(w, bad)).unwrap_or(0)
}

/// Marks the verbs `wr_id` of a receive (sends carry a plain sequence number).
const RECV_TAG: u64 = 1 << 63;

/// Work requests per `ibv_post_send` call.
const CHUNK: usize = 32;

/// A CQ with its completion channel (event mode; the channel's fd is
/// non-blocking). Held by `Arc` by the QPs that complete into it and by
/// whoever polls it (a QP's own CQ, or a [`crate::SharedCq`]); destroyed
/// after the last of them: `ibv_destroy_cq`, then the channel.
pub(crate) struct VerbsCq {
    pub(crate) cq: *mut ibv_cq,
    channel: *mut ibv_comp_channel,
    /// CQEs the CQ holds, as the provider made it (`ibv_cq.cqe`).
    pub(crate) depth: u32,
    _ctx: Arc<Ctx>,
}

// SAFETY: one owner polls, arms and waits on the CQ (`&mut Qp` for a QP's
// own CQ, `&mut SharedCq` for a shared one); the other holders of the `Arc`
// only keep it alive for their QP; rdma-core's CQ calls lock internally.
unsafe impl Send for VerbsCq {}
unsafe impl Sync for VerbsCq {}

impl Drop for VerbsCq {
    fn drop(&mut self) {
        // SAFETY: created in `VerbsCq::create`; every QP completing into it
        // was destroyed first (they hold this `Arc`); the CQ goes before its
        // channel (events were acked as they came).
        unsafe {
            ibv_destroy_cq(self.cq);
            ibv_destroy_comp_channel(self.channel);
        }
    }
}

impl VerbsCq {
    /// `ibv_create_comp_channel` (fd made non-blocking), then
    /// `ibv_create_cq` of at least `depth` CQEs on it.
    pub(crate) fn create(ctx: &Arc<Ctx>, depth: u32) -> Result<Arc<VerbsCq>> {
        // SAFETY: live context.
        let channel = unsafe { ibv_create_comp_channel(ctx.raw) };
        if channel.is_null() {
            return Err(Error::Verbs {
                call: "ibv_create_comp_channel",
                errno: errno(),
                detail: String::new(),
            });
        }
        // SAFETY: `channel` is live; fcntl on its fd changes only its flags.
        unsafe {
            let fd = (*channel).fd;
            libc::fcntl(
                fd,
                libc::F_SETFL,
                libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
            );
        }
        // SAFETY: live context and channel.
        let cq = unsafe {
            ibv_create_cq(
                ctx.raw,
                depth.min(i32::MAX as u32) as i32,
                std::ptr::null_mut(),
                channel,
                0,
            )
        };
        if cq.is_null() {
            let e = errno();
            // SAFETY: created above, unused.
            unsafe { ibv_destroy_comp_channel(channel) };
            return Err(Error::Verbs {
                call: "ibv_create_cq",
                errno: e,
                detail: format!(" ({depth} CQEs)"),
            });
        }
        // SAFETY: non-null CQ; `cqe` is the depth the provider gave it.
        let depth = unsafe { (*cq).cqe }.max(1) as u32;
        Ok(Arc::new(VerbsCq {
            cq,
            channel,
            depth,
            _ctx: ctx.clone(),
        }))
    }

    /// `ibv_req_notify_cq`: one completion event for the next completion
    /// (with `solicited_only`, the next solicited or error one).
    pub(crate) fn arm(&self, solicited_only: bool) -> Result<()> {
        // SAFETY: live CQ.
        let rc = unsafe { ibv_req_notify_cq(self.cq, solicited_only as i32) };
        check_detail("ibv_req_notify_cq", rc, String::new)
    }

    /// Waits up to `timeout` for a completion event ([`wait_channel`]).
    pub(crate) fn wait(&self, timeout: std::time::Duration) -> Result<bool> {
        wait_channel(self.channel, timeout)
    }

    /// `ibv_poll_cq` for up to `store.len()` (at most 16) completions.
    #[inline]
    fn poll_into<'s>(
        &self,
        store: &'s mut [std::mem::MaybeUninit<ibv_wc>; 16],
        want: usize,
    ) -> Result<&'s [ibv_wc]> {
        let want = want.min(store.len());
        // SAFETY: live CQ; `store` has room for `want` entries.
        let n = unsafe { ibv_poll_cq(self.cq, want as i32, store.as_mut_ptr().cast()) };
        if n < 0 {
            return Err(Error::Verbs {
                call: "ibv_poll_cq",
                errno: -n,
                detail: String::new(),
            });
        }
        // SAFETY: ibv_poll_cq wrote the first `n` (<= `want`) entries.
        Ok(unsafe { std::slice::from_raw_parts(store.as_ptr().cast(), n as usize) })
    }

    /// Discards the events raised and the completions written so far (a QP
    /// with its own CQ going to RESET).
    fn drain(&self) {
        while self.wait(std::time::Duration::ZERO).unwrap_or(false) {}
        // SAFETY: plain data; zero is valid.
        let mut wc: [ibv_wc; 16] = unsafe { std::mem::zeroed() };
        // SAFETY: live CQ; `wc` holds 16 entries.
        while unsafe { ibv_poll_cq(self.cq, 16, wc.as_mut_ptr()) } > 0 {}
    }
}

/// Takes completions from a CQ that several verbs QPs share, until `max`
/// were handed to `put` or the CQ is empty: each goes to the QP of `m` its
/// `qp_num` names, which retires the WR (and the unsignaled ones before
/// it); the CQ credits of every retired WR go back once. Completions of QP
/// `skip` are dropped unretired (a QP just moved to RESET). Returns the
/// completions handed over and the first error (a completion of a QP not
/// among `m`: [`Error::ForeignCqe`]); the batch already taken is still
/// handed over.
pub(crate) fn take_shared(
    cq: &VerbsCq,
    m: &mut crate::cq::Members,
    max: usize,
    skip: Option<u32>,
    mut put: impl FnMut(usize, Completion),
) -> (usize, Result<()>) {
    let mut store = [const { std::mem::MaybeUninit::<ibv_wc>::uninit() }; 16];
    let mut freed = 0;
    let mut k = 0;
    let mut result = Ok(());
    while k < max {
        let want = (max - k).min(store.len());
        let wc = match cq.poll_into(&mut store, want) {
            Ok(wc) => wc,
            Err(e) => {
                result = Err(e);
                break;
            }
        };
        for w in wc {
            if skip == Some(w.qp_num) {
                continue;
            }
            let found = m.find(w.qp_num).and_then(crate::Qp::verbs_mut);
            let Some(q) = found else {
                if result.is_ok() {
                    result = Err(Error::ForeignCqe { qpn: w.qp_num });
                }
                continue;
            };
            if let Some(c) = q.retire(w, &mut freed) {
                put(k, c);
                k += 1;
            }
        }
        if wc.len() < want || result.is_err() {
            break;
        }
    }
    m.credits.give(freed);
    (k, result)
}

/// An RC QP driven through `ibv_post_send` / `ibv_poll_cq`, with its own CQ
/// or on a [`crate::SharedCq`].
pub(crate) struct VerbsQp {
    qp: *mut ibv_qp,
    /// The CQ its sends and receives complete into.
    cq: Arc<VerbsCq>,
    /// The CQ is a [`crate::SharedCq`]'s: polled, armed and waited on there.
    shared: bool,
    /// Room in the CQ: every posted WR holds one credit until retired
    /// (shared by the QPs of a shared CQ).
    credits: CqCredits,
    qpn: u32,
    caps: QpCaps,
    /// Outstanding-WR accounting, as rdma-core's mlx5 provider keeps it
    /// (`mlx5_wq_overflow`): the verbs `wr_id` we post is our WR sequence
    /// number; `wr_ids[seq % max_post]` holds the caller's wr_id. A completion
    /// for `seq` retires every WR up to it (unsignaled ones included). So a
    /// batch that does not fit is refused whole whatever the provider does
    /// with SQ slots. The CQ is guarded by `credits`.
    max_post: u32,
    /// Per sequence slot: the CQE was asked for by auto-signal only.
    hidden: Box<[bool]>,
    auto_signal: u32,
    unsignaled_run: u32,
    /// The same accounting for receives; their verbs `wr_id` is `RECV_TAG | seq`.
    max_recv: u32,
    recv_ids: Box<[u64]>,
    recv_posted: u64,
    recv_done: u64,
    path: crate::PathInfo,
    wr_ids: Box<[u64]>,
    posted: u64,
    retired: u64,
    _pd: Arc<Pd>,
}

// SAFETY: the QP is used from one thread at a time (`&mut self`); its CQ as
// `VerbsCq` says.
unsafe impl Send for VerbsQp {}

impl Drop for VerbsQp {
    fn drop(&mut self) {
        // SAFETY: created in `create_qp`; the QP goes before its CQ (the
        // `Arc<VerbsCq>` field is dropped after this).
        unsafe { ibv_destroy_qp(self.qp) };
    }
}

/// Where a new QP's completions go: a CQ of its own of `depth` CQEs, or a
/// shared one whose credits it takes from.
pub(crate) enum CqChoice<'a> {
    Own(u32),
    Shared(&'a Arc<VerbsCq>, &'a CqCredits),
}

impl CqChoice<'_> {
    /// The CQ (created for `Own`), its credits, and whether it is shared.
    fn resolve(&self, ctx: &Arc<Ctx>) -> Result<(Arc<VerbsCq>, CqCredits, bool)> {
        Ok(match self {
            CqChoice::Own(depth) => {
                let cq = VerbsCq::create(ctx, *depth)?;
                let credits = CqCredits::new(cq.depth);
                (cq, credits, false)
            }
            CqChoice::Shared(cq, credits) => ((*cq).clone(), (*credits).clone(), true),
        })
    }
}

pub(crate) fn create_qp(pd: &Arc<Pd>, caps: QpCaps, cq: CqChoice<'_>) -> Result<VerbsQp> {
    let (cq, credits, shared) = cq.resolve(&pd.ctx)?;
    // SAFETY: plain data; zero is valid.
    let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    init.send_cq = cq.cq;
    init.recv_cq = cq.cq;
    init.qp_type = ibv_qp_type::IBV_QPT_RC;
    init.cap = ibv_qp_cap {
        max_send_wr: caps.max_send_wr,
        max_recv_wr: caps.max_recv_wr,
        max_send_sge: caps.max_send_sge,
        max_recv_sge: caps.max_recv_sge,
        max_inline_data: caps.max_inline,
    };
    // SAFETY: live PD, valid attributes.
    let qp = unsafe { ibv_create_qp(pd.raw, &mut init) };
    if qp.is_null() {
        return Err(Error::Verbs {
            call: "ibv_create_qp",
            errno: errno(),
            detail: format!(
                " (RC, max_send_wr {}, max_send_sge {}, max_inline_data {}: more than {} allows?)",
                caps.max_send_wr, caps.max_send_sge, caps.max_inline, pd.ctx.name
            ),
        });
    }
    // SAFETY: non-null QP.
    let qpn = unsafe { (*qp).qp_num };
    let caps = QpCaps {
        max_inline: init.cap.max_inline_data,
        ..caps
    };
    let max_post = caps.max_send_wr.min(init.cap.max_send_wr);
    Ok(VerbsQp {
        qp,
        cq,
        shared,
        credits,
        qpn,
        caps,
        max_post,
        hidden: vec![false; max_post as usize].into_boxed_slice(),
        auto_signal: (max_post / 2).max(1),
        unsignaled_run: 0,
        max_recv: init.cap.max_recv_wr.min(caps.max_recv_wr).max(1),
        recv_ids: vec![0; init.cap.max_recv_wr.min(caps.max_recv_wr).max(1) as usize]
            .into_boxed_slice(),
        recv_posted: 0,
        recv_done: 0,
        path: crate::PathInfo::unconnected(""),
        wr_ids: vec![0; max_post as usize].into_boxed_slice(),
        posted: 0,
        retired: 0,
        _pd: pd.clone(),
    })
}

impl VerbsQp {
    /// The QP's own CQ, or [`Error::SharedCq`] when its CQ is shared.
    fn own_cq(&self) -> Result<&VerbsCq> {
        if self.shared {
            return Err(Error::SharedCq { qpn: self.qpn });
        }
        Ok(&self.cq)
    }

    /// `ibv_req_notify_cq` on the QP's own CQ.
    pub(crate) fn arm_cq(&mut self, solicited_only: bool) -> Result<()> {
        self.own_cq()?.arm(solicited_only)
    }

    /// Waits up to `timeout` for a completion event of the QP's own CQ.
    pub(crate) fn wait_cq_event(&mut self, timeout: std::time::Duration) -> Result<bool> {
        self.own_cq()?.wait(timeout)
    }

    /// Depth of the CQ the device gave, in CQEs.
    pub(crate) fn cq_depth(&self) -> u32 {
        self.cq.depth
    }

    /// Sends and receives posted and not yet retired.
    pub(crate) fn outstanding(&self) -> u64 {
        (self.posted - self.retired) + (self.recv_posted - self.recv_done)
    }

    /// The inline size the device granted (`max_inline_data`), in bytes.
    pub(crate) fn max_inline(&self) -> u32 {
        self.caps.max_inline
    }

    pub(crate) fn qpn(&self) -> u32 {
        self.qpn
    }

    pub(crate) fn path(&self) -> crate::PathInfo {
        self.path
    }

    pub(crate) fn set_path(&mut self, p: crate::PathInfo) {
        self.path = p;
    }

    /// `ibv_modify_qp` to `to` with the attributes `attr` carries (the
    /// caller checked them with `check_rc_modify`). Moving to RESET also
    /// forgets every outstanding WR and discards completions not yet polled
    /// (as rdma-core's providers clean the CQ of a QP they reset).
    pub(crate) fn modify_to(&mut self, to: QpState, attr: &QpAttr) -> Result<()> {
        modify_raw(self.qp, self.qpn, to, attr)?;
        if to == QpState::Reset {
            if !self.shared {
                // Events and completions from before RESET are stale now.
                // (A QP on a shared CQ reaches RESET with none outstanding:
                // `Qp::modify` sees to it.)
                self.cq.drain();
                self.credits = CqCredits::new(self.credits.depth());
            }
            self.retired = self.posted;
            self.recv_done = self.recv_posted;
            self.unsignaled_run = 0;
        }
        Ok(())
    }

    /// The QP's state as the device has it (`ibv_query_qp`), with the
    /// attributes that tell a connection apart.
    pub(crate) fn query(&self) -> Result<crate::QpInfo> {
        query_raw(self.qp, self.qpn)
    }

    /// Posts `wrs` with `ibv_post_send`, 32 WRs per call. Checked first (SGE
    /// count, inline size, length, and room for every WR under `max_send_wr`
    /// outstanding): on those errors nothing is posted.
    pub(crate) fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<()> {
        for w in wrs {
            if w.sges.len() > self.caps.max_send_sge as usize {
                return Err(Error::Invalid(format!(
                    "{} SGEs exceed the QP's max_send_sge of {}",
                    w.sges.len(),
                    self.caps.max_send_sge
                )));
            }
            if w.inline && w.total_len() > self.caps.max_inline as u64 {
                return Err(Error::Invalid(format!(
                    "inline payload of {} bytes exceeds the QP's max_inline_data of {}",
                    w.total_len(),
                    self.caps.max_inline
                )));
            }
        }
        let outstanding = self.posted - self.retired;
        if outstanding + wrs.len() as u64 > self.max_post as u64 {
            return Err(Error::QueueFull);
        }
        if wrs.is_empty() {
            return Ok(());
        }
        if !self.credits.take(wrs.len() as u32) {
            return Err(Error::CqFull);
        }
        // When this batch took the CQ's last credit, its last WR must make a
        // CQE: else no completion would ever give the credits back.
        let last_credit = self.credits.free() == 0;
        let before = self.posted;
        let n = wrs.len().div_ceil(CHUNK);
        for (i, chunk) in wrs.chunks(CHUNK).enumerate() {
            if let Err(e) = self.post_chunk(chunk, last_credit && i + 1 == n) {
                // Credits of the WRs the provider did not take go back.
                self.credits
                    .give(wrs.len() as u32 - (self.posted - before) as u32);
                return Err(e);
            }
        }
        Ok(())
    }

    /// One `ibv_post_send` of up to `CHUNK` WRs; with `signal_last`, the
    /// last one is signaled whatever its flags.
    fn post_chunk(&mut self, wrs: &[SendWr<'_>], signal_last: bool) -> Result<()> {
        use std::mem::MaybeUninit;
        let nsge: usize = wrs.iter().map(|w| w.sges.len()).sum();
        // Only the entries used are written (no zeroing of whole arrays on
        // every post: that showed in the latency under emulation).
        let mut sge_store = [const { MaybeUninit::<ibv_sge>::uninit() }; CHUNK * 4];
        let mut sge_vec: Vec<ibv_sge>;
        let sge_base: *mut ibv_sge = if nsge <= sge_store.len() {
            sge_store.as_mut_ptr().cast()
        } else {
            // Many-SGE batches are rare; they may allocate.
            sge_vec = Vec::with_capacity(nsge);
            sge_vec.as_mut_ptr()
        };
        let mut wr_store = [const { MaybeUninit::<ibv_send_wr>::uninit() }; CHUNK];
        let mut s = 0;
        for (i, w) in wrs.iter().enumerate() {
            let first = s;
            for g in w.sges {
                // SAFETY: `sge_base` has room for `nsge` entries and `s < nsge`.
                unsafe {
                    sge_base.add(s).write(ibv_sge {
                        addr: g.addr,
                        length: g.len,
                        lkey: g.lkey.0,
                    })
                };
                s += 1;
            }
            let seq = self.posted + i as u64;
            // Auto-signal, as the direct path does: a hidden CQE every
            // `auto_signal` unsignaled WRs keeps the accounting moving.
            let forced = !w.signaled
                && (self.unsignaled_run + 1 >= self.auto_signal
                    || (signal_last && i + 1 == wrs.len()));
            self.unsignaled_run = if w.signaled || forced {
                0
            } else {
                self.unsignaled_run + 1
            };
            let slot = (seq % self.max_post as u64) as usize;
            self.wr_ids[slot] = w.wr_id;
            self.hidden[slot] = forced;
            // SAFETY: ibv_send_wr is plain data (pointers and integers); zero is valid.
            let v = wr_store[i].write(unsafe { std::mem::zeroed() });
            v.wr_id = seq;
            // SAFETY: `first <= nsge`: inside (or one past) the SGE storage.
            v.sg_list = unsafe { sge_base.add(first) };
            v.num_sge = w.sges.len() as i32;
            let mut flags = 0;
            if w.signaled || forced {
                flags |= ibv_send_flags::IBV_SEND_SIGNALED.0;
            }
            if w.inline {
                flags |= ibv_send_flags::IBV_SEND_INLINE.0;
            }
            if w.solicited {
                flags |= ibv_send_flags::IBV_SEND_SOLICITED.0;
            }
            if w.fence {
                flags |= ibv_send_flags::IBV_SEND_FENCE.0;
            }
            v.send_flags = flags;
            match w.op {
                WrOp::RdmaWrite { remote } => {
                    v.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
                    v.wr.rdma = rdma_t {
                        remote_addr: remote.addr,
                        rkey: remote.rkey.0,
                    };
                }
                WrOp::RdmaWriteWithImm { remote, imm } => {
                    v.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
                    v.wr.rdma = rdma_t {
                        remote_addr: remote.addr,
                        rkey: remote.rkey.0,
                    };
                    v.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
                }
                WrOp::Send => v.opcode = ibv_wr_opcode::IBV_WR_SEND,
                WrOp::SendWithImm { imm } => {
                    v.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_IMM;
                    v.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
                }
                WrOp::RdmaRead { remote } => {
                    v.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ;
                    v.wr.rdma = rdma_t {
                        remote_addr: remote.addr,
                        rkey: remote.rkey.0,
                    };
                }
                WrOp::AtomicCmpSwp {
                    remote,
                    compare,
                    swap,
                } => {
                    v.opcode = ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP;
                    v.wr.atomic = atomic_t {
                        remote_addr: remote.addr,
                        compare_add: compare,
                        swap,
                        rkey: remote.rkey.0,
                    };
                }
                WrOp::AtomicFetchAdd { remote, add } => {
                    v.opcode = ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD;
                    v.wr.atomic = atomic_t {
                        remote_addr: remote.addr,
                        compare_add: add,
                        swap: 0,
                        rkey: remote.rkey.0,
                    };
                }
            }
        }
        // SAFETY: the first `wrs.len()` entries were written above.
        let vwrs: &mut [ibv_send_wr] =
            unsafe { std::slice::from_raw_parts_mut(wr_store.as_mut_ptr().cast(), wrs.len()) };
        for i in 1..wrs.len() {
            let next: *mut ibv_send_wr = &mut vwrs[i];
            vwrs[i - 1].next = next;
        }
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: live QP; the WR chain and SGE arrays outlive the call; the
        // SGEs name registered memory (Sge::new checked the ranges).
        let rc = unsafe { ibv_post_send(self.qp, vwrs.as_mut_ptr(), &mut bad) };
        // WRs before `bad` were posted: count them, so their completions match.
        let posted = posted_count(rc, vwrs, bad);
        self.posted += posted as u64;
        match rc {
            0 => Ok(()),
            libc::ENOMEM => Err(Error::QueueFull),
            e => Err(Error::Verbs {
                call: "ibv_post_send",
                errno: if e > 0 { e } else { errno() },
                detail: format!(" ({posted} of a chunk of {} WRs were posted)", wrs.len()),
            }),
        }
    }

    /// Posts receives with `ibv_post_recv`, 32 per call. Checked first (SGE
    /// count, room under `max_recv_wr`): on those errors nothing is posted.
    /// Receives take at most `n` SGEs (the QP's config), whatever the
    /// device granted.
    pub(crate) fn limit_recv_sge(&mut self, n: u32) {
        self.caps.max_recv_sge = self.caps.max_recv_sge.min(n);
    }

    pub(crate) fn post_recv(&mut self, wrs: &[crate::wr::RecvWr<'_>]) -> Result<()> {
        for w in wrs {
            if w.sges.len() > self.caps.max_recv_sge as usize {
                return Err(Error::Invalid(format!(
                    "{} SGEs exceed the QP's max_recv_sge of {}",
                    w.sges.len(),
                    self.caps.max_recv_sge
                )));
            }
        }
        if self.recv_posted - self.recv_done + wrs.len() as u64 > self.max_recv as u64 {
            return Err(Error::RecvQueueFull);
        }
        if !self.credits.take(wrs.len() as u32) {
            return Err(Error::CqFull);
        }
        let before = self.recv_posted;
        let r = self.post_recv_chunks(wrs);
        if r.is_err() {
            // Credits of the WRs the provider did not take go back.
            self.credits
                .give(wrs.len() as u32 - (self.recv_posted - before) as u32);
        }
        r
    }

    /// `ibv_post_recv` of `wrs`, 32 per call (checked by `post_recv`).
    fn post_recv_chunks(&mut self, wrs: &[crate::wr::RecvWr<'_>]) -> Result<()> {
        for chunk in wrs.chunks(CHUNK) {
            use std::mem::MaybeUninit;
            let nsge: usize = chunk.iter().map(|w| w.sges.len()).sum();
            // Only the entries used are written, as in `post_chunk`.
            let mut sge_store = [const { MaybeUninit::<ibv_sge>::uninit() }; CHUNK * 4];
            let mut sge_vec: Vec<ibv_sge>;
            let sge_base: *mut ibv_sge = if nsge <= sge_store.len() {
                sge_store.as_mut_ptr().cast()
            } else {
                // Many-SGE batches are rare; they may allocate.
                sge_vec = Vec::with_capacity(nsge);
                sge_vec.as_mut_ptr()
            };
            let mut wr_store = [const { MaybeUninit::<ibv_recv_wr>::uninit() }; CHUNK];
            let mut k = 0;
            for (i, w) in chunk.iter().enumerate() {
                let first = k;
                for g in w.sges {
                    // SAFETY: `sge_base` has room for `nsge` entries and `k < nsge`.
                    unsafe {
                        sge_base.add(k).write(ibv_sge {
                            addr: g.addr,
                            length: g.len,
                            lkey: g.lkey.0,
                        })
                    };
                    k += 1;
                }
                let seq = self.recv_posted + i as u64;
                self.recv_ids[(seq % self.max_recv as u64) as usize] = w.wr_id;
                wr_store[i].write(ibv_recv_wr {
                    wr_id: RECV_TAG | seq,
                    next: std::ptr::null_mut(),
                    // SAFETY: `first <= nsge`: inside (or one past) the SGE storage.
                    sg_list: unsafe { sge_base.add(first) },
                    num_sge: w.sges.len() as i32,
                });
            }
            // SAFETY: the first `chunk.len()` entries were written above.
            let vwrs: &mut [ibv_recv_wr] = unsafe {
                std::slice::from_raw_parts_mut(wr_store.as_mut_ptr().cast(), chunk.len())
            };
            for i in 1..chunk.len() {
                let next: *mut ibv_recv_wr = &mut vwrs[i];
                vwrs[i - 1].next = next;
            }
            let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
            // SAFETY: live QP; the WR chain and SGE array outlive the call; the
            // SGEs name registered memory (Sge::new checked the ranges).
            let rc = unsafe { ibv_post_recv(self.qp, vwrs.as_mut_ptr(), &mut bad) };
            let posted = posted_count(rc, vwrs, bad);
            self.recv_posted += posted as u64;
            match rc {
                0 => {}
                libc::ENOMEM => return Err(Error::QueueFull),
                e => {
                    return Err(Error::Verbs {
                        call: "ibv_post_recv",
                        errno: if e > 0 { e } else { errno() },
                        detail: format!(
                            " ({posted} of a chunk of {} WRs were posted)",
                            chunk.len()
                        ),
                    })
                }
            }
        }
        Ok(())
    }

    /// Polls up to `out.len()` completions of the QP's own CQ with
    /// `ibv_poll_cq`. Errors: [`Error::SharedCq`] when its CQ is shared.
    pub(crate) fn poll(&mut self, out: &mut [Completion]) -> Result<usize> {
        if self.shared {
            return Err(Error::SharedCq { qpn: self.qpn });
        }
        let mut store = [const { std::mem::MaybeUninit::<ibv_wc>::uninit() }; 16];
        let wc = self.cq.poll_into(&mut store, out.len())?;
        let mut freed = 0;
        let mut k = 0;
        for w in wc {
            if let Some(c) = self.retire(w, &mut freed) {
                out[k] = c;
                k += 1;
            }
        }
        self.credits.give(freed);
        Ok(k)
    }

    /// Retires what the work completion `w` of this QP completes (a
    /// completion for send sequence `seq` retires every send up to it,
    /// unsignaled ones included); adds the CQ credits freed to `freed`.
    /// Returns the completion to report (`None`: asked for by auto-signal only).
    #[inline]
    fn retire(&mut self, w: &ibv_wc, freed: &mut u32) -> Option<Completion> {
        // Our wr_id is the WR's sequence number (see `VerbsQp`).
        let (wr_id, hidden) = if w.wr_id & RECV_TAG != 0 {
            let seq = w.wr_id & !RECV_TAG;
            if seq >= self.recv_posted || seq < self.recv_done {
                // Names no receive this QP posted, or one already retired
                // (a completion from before a RESET).
                return None;
            }
            let done = self.recv_done.max(seq + 1);
            *freed += (done - self.recv_done) as u32;
            self.recv_done = done;
            (self.recv_ids[(seq % self.max_recv as u64) as usize], false)
        } else {
            if w.wr_id >= self.posted || w.wr_id < self.retired {
                // Names no send this QP posted, or one already retired (a
                // completion from before a RESET).
                return None;
            }
            let retired = self.retired.max(w.wr_id + 1);
            *freed += (retired - self.retired) as u32;
            self.retired = retired;
            let slot = (w.wr_id % self.max_post as u64) as usize;
            (self.wr_ids[slot], self.hidden[slot])
        };
        if hidden && w.status == ibv_wc_status::IBV_WC_SUCCESS {
            return None; // asked for by auto-signal only
        }
        Some(Completion {
            wr_id,
            status: WcStatus(w.status),
            opcode: WcOpcode(w.opcode),
            // SAFETY: reading the union as the immediate is meaningful only
            // with IBV_WC_WITH_IMM set, which is checked first.
            imm: (w.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0)
                .then(|| u32::from_be(unsafe { w.imm_data_invalidated_rkey_union.imm_data })),
            byte_len: w.byte_len,
            qp_num: w.qp_num,
            vendor_err: w.vendor_err,
        })
    }
}

/// What `rdma-direct devices` shows of one ibverbs device: its driver and
/// every port with state, link layer, MTU, rate and GID table.
pub(crate) fn describe(name: &str) -> Result<(String, Vec<crate::PortDetail>, bool)> {
    let ctx = open(name)?.ok_or_else(|| Error::NoSuchDevice { name: name.into() })?;
    // SAFETY: plain data; zero is valid.
    let mut dev: ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: live context; valid out-pointer.
    check_detail(
        "ibv_query_device",
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
        // SAFETY: live context; valid out-pointer.
        check_detail(
            "ibv_query_port",
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
            gids.push(crate::GidEntry {
                index: i as u32,
                gid,
                kind,
            });
        }
        ports.push(crate::PortDetail {
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
    Ok((driver, ports, mlx5_supported(&ctx)))
}

/// Waits (poll on the completion channel's fd) up to `timeout` for a
/// completion event, then `ibv_get_cq_event` and `ibv_ack_cq_events`.
pub(crate) fn wait_channel(
    channel: *mut ibv_comp_channel,
    timeout: std::time::Duration,
) -> Result<bool> {
    // SAFETY: the caller keeps the channel (and its fd) alive.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw((*channel).fd) };
    if !crate::wait_readable(fd, timeout, "completion channel")? {
        return Ok(false);
    }
    let mut cq: *mut ibv_cq = std::ptr::null_mut();
    let mut ctx: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: live channel; out-pointers valid. Non-blocking fd: EAGAIN
    // when another reader took the event.
    let rc = unsafe { ibv_get_cq_event(channel, &mut cq, &mut ctx) };
    if rc != 0 {
        let e = errno();
        if e == libc::EAGAIN {
            return Ok(false);
        }
        return Err(Error::Verbs {
            call: "ibv_get_cq_event",
            errno: e,
            detail: String::new(),
        });
    }
    // SAFETY: `cq` is the CQ the event was for (ours); one event to ack.
    unsafe { ibv_ack_cq_events(cq, 1) };
    Ok(true)
}

/// `ibv_modify_qp` of `qp` to `to` with the attributes `attr` carries.
pub(crate) fn modify_raw(qp: *mut ibv_qp, qpn: u32, to: QpState, attr: &QpAttr) -> Result<()> {
    // SAFETY: plain data; zero is valid.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = match to {
        QpState::Reset => ibv_qp_state::IBV_QPS_RESET,
        QpState::Init => ibv_qp_state::IBV_QPS_INIT,
        QpState::Rtr => ibv_qp_state::IBV_QPS_RTR,
        QpState::Rts => ibv_qp_state::IBV_QPS_RTS,
        QpState::Err => ibv_qp_state::IBV_QPS_ERR,
    };
    if let Some(v) = attr.pkey_index {
        a.pkey_index = v;
    }
    if let Some(v) = attr.port {
        a.port_num = v;
    }
    if let Some(v) = attr.access {
        a.qp_access_flags = v.bits();
    }
    if let Some(av) = attr.av {
        a.ah_attr.dlid = av.dlid;
        a.ah_attr.port_num = av.port;
        a.ah_attr.sl = av.service_level;
        if let Some(g) = av.grh {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = ibv_gid { raw: g.dgid };
            a.ah_attr.grh.sgid_index = g.sgid_index;
            a.ah_attr.grh.hop_limit = g.hop_limit;
            a.ah_attr.grh.traffic_class = g.traffic_class;
            a.ah_attr.grh.flow_label = g.flow_label;
        }
    }
    if let Some(v) = attr.path_mtu {
        a.path_mtu = v;
    }
    if let Some(v) = attr.dest_qpn {
        a.dest_qp_num = v;
    }
    if let Some(v) = attr.rq_psn {
        a.rq_psn = v;
    }
    if let Some(v) = attr.max_dest_rd_atomic {
        a.max_dest_rd_atomic = v;
    }
    if let Some(v) = attr.min_rnr_timer {
        a.min_rnr_timer = v;
    }
    if let Some(v) = attr.sq_psn {
        a.sq_psn = v;
    }
    if let Some(v) = attr.timeout {
        a.timeout = v;
    }
    if let Some(v) = attr.retry_cnt {
        a.retry_cnt = v;
    }
    if let Some(v) = attr.rnr_retry {
        a.rnr_retry = v;
    }
    if let Some(v) = attr.max_rd_atomic {
        a.max_rd_atomic = v;
    }
    let mask = (attr.mask() | QpAttrMask::STATE).bits();
    // SAFETY: the caller's QP is live; `a` is valid for the call.
    check_detail(
        "ibv_modify_qp",
        unsafe { ibv_modify_qp(qp, &mut a, mask as i32) },
        || format!(" (QP {qpn:#x} to {to:?}, attributes {:?})", attr.mask()),
    )?;
    Ok(())
}

/// `ibv_query_qp` of `qp`: its state and connection attributes.
pub(crate) fn query_raw(qp: *mut ibv_qp, qpn: u32) -> Result<crate::QpInfo> {
    // SAFETY: plain data; zero is valid.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    // SAFETY: plain data; zero is valid.
    let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    let mask = QpAttrMask::STATE
        | QpAttrMask::DEST_QPN
        | QpAttrMask::PATH_MTU
        | QpAttrMask::RNR_RETRY
        | QpAttrMask::SQ_PSN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MIN_RNR_TIMER;
    // SAFETY: live QP; both outputs valid for the call.
    check_detail(
        "ibv_query_qp",
        unsafe { ibv_query_qp(qp, &mut a, mask.bits() as i32, &mut init) },
        || format!(" (QP {qpn:#x})"),
    )?;
    let state = match a.qp_state {
        ibv_qp_state::IBV_QPS_RESET => QpState::Reset,
        ibv_qp_state::IBV_QPS_INIT => QpState::Init,
        ibv_qp_state::IBV_QPS_RTR => QpState::Rtr,
        ibv_qp_state::IBV_QPS_RTS => QpState::Rts,
        _ => QpState::Err,
    };
    Ok(crate::QpInfo {
        state,
        dest_qpn: (state != QpState::Reset && state != QpState::Init).then_some(a.dest_qp_num),
        rnr_retry: Some(a.rnr_retry),
        min_rnr_timer: Some(a.min_rnr_timer),
        path_mtu: Some(a.path_mtu),
        sq_psn: Some(a.sq_psn),
        rq_psn: Some(a.rq_psn),
    })
}

/// Whether `ctx`'s device is a ConnectX that libmlx5's direct verbs
/// describe (`mlx5dv_is_supported`): then the direct path can drive it.
pub(crate) fn mlx5_supported(ctx: &Ctx) -> bool {
    // SAFETY: live context; its device pointer is valid while it is open.
    unsafe { mlx5_dv::dv::mlx5dv_is_supported((*ctx.raw).device.cast()) }
}

/// The verbs objects behind a direct-path QP on ConnectX: the QP made by
/// `mlx5dv_create_qp` (scatter-to-CQE disabled, so every payload lands in
/// the buffers the WRs name), its CQ and completion channel. Our ring driver
/// posts and polls them; verbs does only the control path (modify, query,
/// events).
pub(crate) struct Mlx5Objs {
    qp: *mut ibv_qp,
    pub(crate) qpn: u32,
    pub(crate) max_inline: u32,
    /// The CQ it completes into (dropped after the QP).
    _cq: Arc<VerbsCq>,
    _pd: Arc<Pd>,
}

// SAFETY: as for VerbsQp; the owning DirectQp is driven by one thread at a time.
unsafe impl Send for Mlx5Objs {}

impl Drop for Mlx5Objs {
    fn drop(&mut self) {
        // SAFETY: created in `create_mlx5_qp`; the QP goes before its CQ
        // (the `Arc<VerbsCq>` field is dropped after this).
        unsafe { ibv_destroy_qp(self.qp) };
    }
}

impl Mlx5Objs {
    pub(crate) fn modify_to(&mut self, to: QpState, attr: &QpAttr) -> Result<()> {
        modify_raw(self.qp, self.qpn, to, attr)
    }

    pub(crate) fn query(&self) -> Result<crate::QpInfo> {
        query_raw(self.qp, self.qpn)
    }
}

/// Creates an RC QP for the direct path on a ConnectX (`mlx5dv_create_qp`
/// with `MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`) completing into `cq`,
/// and describes it with `mlx5dv_init_obj`.
pub(crate) fn create_mlx5_qp(
    pd: &Arc<Pd>,
    caps: QpCaps,
    cq: &Arc<VerbsCq>,
) -> Result<(Mlx5Objs, mlx5_dv::dv::mlx5dv_qp)> {
    use mlx5_dv::dv::*;
    // SAFETY: plain data; zero is valid.
    let mut attr: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
    attr.send_cq = cq.cq;
    attr.recv_cq = cq.cq;
    attr.qp_type = ibv_qp_type::IBV_QPT_RC;
    attr.comp_mask = ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0;
    attr.pd = pd.raw;
    attr.cap = ibv_qp_cap {
        max_send_wr: caps.max_send_wr,
        max_recv_wr: caps.max_recv_wr,
        max_send_sge: caps.max_send_sge,
        max_recv_sge: caps.max_recv_sge,
        max_inline_data: caps.max_inline,
    };
    // SAFETY: plain data; zero is valid.
    let mut dv_attr: mlx5dv_qp_init_attr = unsafe { std::mem::zeroed() };
    dv_attr.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS;
    dv_attr.create_flags = MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE;
    // SAFETY: live context; both attribute structs valid for the call.
    let qp = unsafe {
        mlx5dv_create_qp(
            pd.ctx.raw.cast(),
            (&mut attr as *mut ibv_qp_init_attr_ex).cast(),
            &mut dv_attr,
        )
    } as *mut ibv_qp;
    if qp.is_null() {
        return Err(Error::Verbs {
            call: "mlx5dv_create_qp",
            errno: errno(),
            detail: format!(
                " (RC, max_send_wr {}, max_send_sge {}, max_inline_data {})",
                caps.max_send_wr, caps.max_send_sge, caps.max_inline
            ),
        });
    }
    // SAFETY: non-null QP.
    let qpn = unsafe { (*qp).qp_num };
    let objs = Mlx5Objs {
        qp,
        qpn,
        max_inline: attr.cap.max_inline_data,
        _cq: cq.clone(),
        _pd: pd.clone(),
    };
    let mut dv_qp = mlx5dv_qp::zeroed();
    init_obj(
        qp.cast(),
        &mut dv_qp,
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    )?;
    Ok((objs, dv_qp))
}

/// Describes a CQ for the direct path with `mlx5dv_init_obj`.
pub(crate) fn describe_mlx5_cq(cq: &VerbsCq) -> Result<mlx5_dv::dv::mlx5dv_cq> {
    let mut dv_cq = mlx5_dv::dv::mlx5dv_cq::zeroed();
    init_obj(
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        cq.cq.cast(),
        &mut dv_cq,
    )?;
    Ok(dv_cq)
}

/// `mlx5dv_init_obj` for a QP and/or a CQ (a null `in` pointer leaves that
/// one out).
fn init_obj(
    qp: *mut std::ffi::c_void,
    dv_qp: *mut mlx5_dv::dv::mlx5dv_qp,
    cq: *mut std::ffi::c_void,
    dv_cq: *mut mlx5_dv::dv::mlx5dv_cq,
) -> Result<()> {
    use mlx5_dv::dv::*;
    let none = || mlx5dv_obj_pair {
        in_: std::ptr::null_mut(),
        out: std::ptr::null_mut(),
    };
    let mut obj = mlx5dv_obj {
        qp: mlx5dv_obj_pair {
            in_: qp,
            out: dv_qp,
        },
        cq: mlx5dv_obj_pair {
            in_: cq,
            out: dv_cq,
        },
        srq: none(),
        rwq: none(),
        dm: none(),
        ah: none(),
        pd: none(),
    };
    let mut types = 0;
    if !qp.is_null() {
        types |= MLX5DV_OBJ_QP;
    }
    if !cq.is_null() {
        types |= MLX5DV_OBJ_CQ;
    }
    // SAFETY: `obj` names live objects of the caller's and points at
    // writable outputs for the ones `types` selects.
    let rc = unsafe { mlx5dv_init_obj(&mut obj, types) };
    if rc != 0 {
        return Err(Error::Verbs {
            call: "mlx5dv_init_obj",
            errno: if rc > 0 { rc } else { errno() },
            detail: String::new(),
        });
    }
    Ok(())
}
