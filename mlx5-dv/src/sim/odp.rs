//! On-demand paging (ODP) in the sim: MRs that are not pinned, whose pages
//! the device faults in on first touch.
//!
//! **What ConnectX does** (Linux `drivers/infiniband/hw/mlx5/odp.c`,
//! rdma-core `providers/mlx5/srq.c` and `cq.c`): an MR registered with
//! `IBV_ACCESS_ON_DEMAND` is not pinned; the device keeps its own page
//! table of it, empty at first. A DMA to a page not in it is a page fault:
//! the device stops that access, the kernel maps the page in and tells the
//! device, and the access goes on (a requester's WQE waits; a responder
//! NAKs with an RNR-style NAK and the requester retries). The kernel's
//! MMU notifier takes pages out of the device's table again when it
//! reclaims or moves them. Implicit ODP registers the whole address
//! space (`addr` 0, `length` `SIZE_MAX`). `ibv_advise_mr` prefetches.
//! One case is not transparent: a receive that scatters data (a SEND's)
//! into an **SRQ** WQE whose buffer faults. ConnectX then consumes the
//! WQE with an error CQE (RESP_ERR, syndrome `REMOTE_ABORTED_ERR` 0x22, vendor syndrome
//! `MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT` 0x93, `wqe_counter` the WQE's
//! index) on the QP's receive CQ, leaves the QP in RTS, and the message
//! arrives again (the requester's retry) into a later WQE; libmlx5 reports
//! no completion for that CQE and reposts the WQE (`mlx5_complete_odp_fault`).
//!
//! **The sim's model.** Pages are 4096 bytes ([`ODP_PAGE`]); each ODP MR
//! keeps the set of its pages that are resident (none at registration).
//! Every DMA the sim makes to an ODP MR checks residency first, at the
//! point where the access's checks pass and before any byte moves: a
//! requester's local SGEs (gather, READ and atomic results), a responder's
//! receive scatter (the bytes the message fills, not the whole SGE), a
//! peer's WRITE / READ / atomic target (through an MR or a memory window
//! bound to one). A page not resident is a fault: counted
//! ([`OdpStats::faults`]), made resident, and the access completes,
//! transparently. Except a receive through an SRQ whose bytes fault:
//! then, as ConnectX does, the sim writes the 0x22/0x93 error CQE for that
//! SRQ WQE, consumes it, makes the pages resident, and delivers the message
//! again at once into the SRQ's next WQE (the requester's retry: the sim
//! spends no time on it and does not count it against `rnr_retry`); with
//! no WQE left the usual RNR handling applies (a UC message is dropped, as
//! UC drops whatever the responder cannot take). UD receives and DMA-BUF
//! MRs fault transparently (by host address); a receive scattered into
//! its CQE (`scatter.rs`) writes no buffer, so it does not fault, nor does
//! a WRITE with immediate's receive. Nothing is written before a fault
//! resolves: the sim resolves it before the access goes on.
//!
//! **Implicit ODP** ([`Device::reg_implicit_odp`]): the MR covers every
//! address, so the program's promise is weaker than a registration's. On
//! a fault the sim checks that each faulting page is mapped in the process
//! with the permission the access needs (read; write for a write), from
//! `/proc/self/maps` (on the fault path only). A page that is not fails the
//! access as the device's failed page fault does: LOCAL_PROT_ERR for a
//! local SGE, REM_ACCESS_ERR (the responder QP to ERR) for a peer's access,
//! LOCAL_PROT_ERR at the responder (REMOTE_OP_ERR at the requester) for a
//! receive's buffer, and nothing is touched. The sim has no MMU notifier:
//! a page made resident stays so until [`Device::evict_odp`], so memory
//! the program unmaps afterwards must not be named through the MR again
//! (the registration's contract).
//!
//! [`Device::evict_odp`] takes every page out (the MMU notifier's
//! invalidation, for tests); [`Device::advise_mr`] makes pages resident
//! (`ibv_advise_mr`); [`Device::odp_stats`] counts; [`Device::odp_caps`]
//! says what the sim supports (`struct ibv_odp_caps`).

use super::{Device, MrEntry, MrKeys, SimError, State};
use crate::verbs::Access;
use crate::wqe::DataSeg;
use std::cell::{Cell, RefCell};
use std::collections::HashSet;

/// The sim's ODP page size, in bytes (the host's base page on x86_64 and
/// the unit ConnectX's ODP page tables map).
pub const ODP_PAGE: u64 = 4096;

/// Advice for [`Device::advise_mr`] (`enum ibv_advise_mr_advice`,
/// `libibverbs/verbs.h`; `ibv_advise_mr(3)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OdpAdvice {
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH` (0): make the pages resident for
    /// reading (the kernel maps them with read permission).
    Prefetch,
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE` (1): make them resident for
    /// reading and writing; the MR must be writable.
    PrefetchWrite,
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT` (2): make resident only the
    /// pages the CPU has present already (mapped, in memory: `mincore(2)`),
    /// faulting none in; the others are left as they are, without error.
    PrefetchNoFault,
}

/// What the sim's ODP did ([`Device::odp_stats`]), since the device was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OdpStats {
    /// Page faults resolved: pages an access found not resident and made
    /// resident (one per page).
    pub faults: u64,
    /// SRQ page-fault CQEs written (RESP_ERR, 0x22 / 0x93), one per SRQ WQE
    /// consumed that way.
    pub srq_fault_cqes: u64,
    /// Pages made resident by [`Device::advise_mr`].
    pub prefetched: u64,
}

/// The device's ODP capabilities, as `ibv_query_device_ex` reports them
/// (`struct ibv_odp_caps` in `ibv_device_attr_ex.odp_caps`, and
/// `xrc_odp_caps`; `libibverbs/verbs.h`): the general bits
/// ([`Self::SUPPORT`], [`Self::SUPPORT_IMPLICIT`]) and per transport the
/// operations an ODP MR may serve (`IBV_ODP_SUPPORT_*` bits,
/// [`Self::SEND`]...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OdpCaps {
    /// `general_caps`: [`Self::SUPPORT`] | [`Self::SUPPORT_IMPLICIT`].
    pub general_caps: u64,
    /// `per_transport_caps.rc_odp_caps`.
    pub rc_odp_caps: u32,
    /// `per_transport_caps.uc_odp_caps`.
    pub uc_odp_caps: u32,
    /// `per_transport_caps.ud_odp_caps`.
    pub ud_odp_caps: u32,
    /// `xrc_odp_caps` (the sim has no XRC: 0).
    pub xrc_odp_caps: u32,
}

impl OdpCaps {
    /// `IBV_ODP_SUPPORT`: ODP MRs may be registered.
    pub const SUPPORT: u64 = 1 << 0;
    /// `IBV_ODP_SUPPORT_IMPLICIT`: implicit ODP (the whole address space).
    pub const SUPPORT_IMPLICIT: u64 = 1 << 1;
    /// `IBV_ODP_SUPPORT_SEND`: a requester's SEND may gather from an ODP MR.
    pub const SEND: u32 = 1 << 0;
    /// `IBV_ODP_SUPPORT_RECV`: a receive (RQ) may scatter into one.
    pub const RECV: u32 = 1 << 1;
    /// `IBV_ODP_SUPPORT_WRITE`: RDMA WRITE (either side).
    pub const WRITE: u32 = 1 << 2;
    /// `IBV_ODP_SUPPORT_READ`: RDMA READ (either side).
    pub const READ: u32 = 1 << 3;
    /// `IBV_ODP_SUPPORT_ATOMIC`: atomics (either side).
    pub const ATOMIC: u32 = 1 << 4;
    /// `IBV_ODP_SUPPORT_SRQ_RECV`: a receive through an SRQ.
    pub const SRQ_RECV: u32 = 1 << 5;

    /// Whether ODP MRs are supported at all.
    pub fn supported(&self) -> bool {
        self.general_caps & Self::SUPPORT != 0
    }

    /// Whether implicit ODP is supported.
    pub fn implicit(&self) -> bool {
        self.general_caps & Self::SUPPORT_IMPLICIT != 0
    }
}

/// An ODP MR's device page table: which of its pages are resident.
/// Interior mutability: the checks that fault pages in hold `&State`
/// (under the device's lock).
pub(super) struct Pages {
    /// Registered by [`Device::reg_implicit_odp`]: faults check the host's
    /// mappings.
    implicit: bool,
    /// Resident pages, by page number (`addr / ODP_PAGE`).
    resident: RefCell<HashSet<u64>>,
}

impl Pages {
    pub(super) fn new(implicit: bool) -> Self {
        Pages {
            implicit,
            resident: RefCell::new(HashSet::new()),
        }
    }
}

/// The device's ODP bookkeeping.
#[derive(Default)]
pub(super) struct OdpState {
    /// ODP MRs registered (none: no access looks residency up).
    pub(super) mrs: usize,
    stats: Cell<OdpStats>,
}

impl Device {
    /// Registers an implicit ODP MR on `pd` (`ibv_reg_mr(pd, NULL,
    /// SIZE_MAX, access | IBV_ACCESS_ON_DEMAND)`): address 0, length
    /// `u64::MAX`, every page not resident. lkey equals rkey;
    /// [`Self::dereg_mr`] deregisters it.
    ///
    /// Errors: [`SimError::NeedsOnDemand`] when `access` lacks
    /// [`Access::ON_DEMAND`] (the kernel: EINVAL); [`SimError::Exhausted`].
    ///
    /// # Safety
    /// Every address a WQE or a peer names through this MR must be memory
    /// the program lets the device read (and write, for a write) while the
    /// access runs. The sim checks, on a fault, that the page is mapped with
    /// the permission needed (see the module docs), which catches an
    /// unmapped page but not memory the program uses otherwise.
    pub unsafe fn reg_implicit_odp(&self, pd: u32, access: Access) -> Result<MrKeys, SimError> {
        if !access.contains(Access::ON_DEMAND) {
            return Err(SimError::NeedsOnDemand(access));
        }
        let mut st = self.lock();
        let key = st.alloc_key()?;
        st.mrs.insert(
            key,
            MrEntry {
                pd,
                addr: 0,
                len: u64::MAX,
                access,
                owned: false,
                iova: None,
                odp: Some(Pages::new(true)),
            },
        );
        st.odp.mrs += 1;
        Ok(MrKeys {
            lkey: key,
            rkey: key,
        })
    }

    /// Makes the pages of `sges` (lkey, address, length) resident, as
    /// `ibv_advise_mr(pd, advice, IBV_ADVISE_MR_FLAG_FLUSH, sg_list,
    /// num_sge)` does (synchronously). Every SGE is checked before any page
    /// changes; a zero-length SGE makes nothing resident.
    ///
    /// Errors, in the kernel's order (Linux `hw/mlx5/odp.c`
    /// `get_prefetchable_mr` and `pagefault_mr`; its errno in brackets, as
    /// `ibv_advise_mr(3)` lists them): [`SimError::NoSuchMr`] (ENOENT);
    /// [`SimError::NotOdp`] for an MR without ON_DEMAND (ENOENT: the
    /// kernel looks the lkey up among ODP mkeys only); [`SimError::ForeignMr`]
    /// for another PD's MR (EPERM); [`SimError::NotWritable`] for
    /// [`OdpAdvice::PrefetchWrite`] on an MR that is not writable (EPERM;
    /// writable: LOCAL_WRITE, REMOTE_WRITE, REMOTE_ATOMIC or MW_BIND, the
    /// kernel's `ib_access_writable`);
    /// [`SimError::OutsideMr`] for a range not inside the MR (EFAULT);
    /// [`SimError::Unmapped`] for a page of an implicit MR not mapped with
    /// the permission asked (EFAULT; not with
    /// [`OdpAdvice::PrefetchNoFault`], which skips it).
    pub fn advise_mr(
        &self,
        pd: u32,
        advice: OdpAdvice,
        sges: &[(u32, u64, u32)],
    ) -> Result<(), SimError> {
        let st = self.lock();
        // Every SGE checked first: a refusal changes nothing.
        for &(lkey, va, len) in sges {
            let mr = st.mrs.get(&lkey).ok_or(SimError::NoSuchMr(lkey))?;
            let pages = mr.odp.as_ref().ok_or(SimError::NotOdp(lkey))?;
            if mr.pd != pd {
                return Err(SimError::ForeignMr { lkey, pd });
            }
            let writable = Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_ATOMIC
                | Access::MW_BIND;
            if advice == OdpAdvice::PrefetchWrite && !mr.access.intersects(writable) {
                return Err(SimError::NotWritable(lkey));
            }
            let addr = super::dmabuf::host_addr(&st, lkey, va);
            let inside = addr >= mr.addr
                && addr
                    .checked_add(len as u64)
                    .is_some_and(|end| end <= mr.addr + mr.len);
            if !inside {
                return Err(SimError::OutsideMr {
                    lkey,
                    addr: va,
                    len: len as u64,
                });
            }
            if pages.implicit && advice != OdpAdvice::PrefetchNoFault && len != 0 {
                let maps = HostMaps::read();
                let write = advice == OdpAdvice::PrefetchWrite;
                if let Some(pg) = span(addr, len as u64).find(|&pg| !maps.allows(pg, write)) {
                    return Err(SimError::Unmapped(pg * ODP_PAGE));
                }
            }
        }
        let mut made = 0;
        for &(lkey, va, len) in sges {
            let pages = st.mrs[&lkey].odp.as_ref().expect("checked above");
            let addr = super::dmabuf::host_addr(&st, lkey, va);
            let mut resident = pages.resident.borrow_mut();
            for pg in span(addr, len as u64) {
                if advice == OdpAdvice::PrefetchNoFault && !cpu_present(pg) {
                    continue;
                }
                made += resident.insert(pg) as u64;
            }
        }
        st.odp.count(|s| s.prefetched += made);
        Ok(())
    }

    /// Makes every resident page of the ODP MR `lkey` not resident, as the
    /// kernel's MMU-notifier invalidation does when it reclaims the memory;
    /// returns how many were. The next access to them faults again.
    ///
    /// Errors: [`SimError::NoSuchMr`]; [`SimError::NotOdp`].
    pub fn evict_odp(&self, lkey: u32) -> Result<u64, SimError> {
        let st = self.lock();
        let mr = st.mrs.get(&lkey).ok_or(SimError::NoSuchMr(lkey))?;
        let pages = mr.odp.as_ref().ok_or(SimError::NotOdp(lkey))?;
        let mut r = pages.resident.borrow_mut();
        let n = r.len() as u64;
        r.clear();
        Ok(n)
    }

    /// What the sim's ODP did so far.
    pub fn odp_stats(&self) -> OdpStats {
        self.lock().odp.stats.get()
    }

    /// The sim's ODP capabilities: ODP and implicit ODP; RC: SEND, RECV,
    /// WRITE, READ, ATOMIC, SRQ_RECV; UC: SEND, RECV, WRITE, SRQ_RECV; UD:
    /// SEND, RECV, SRQ_RECV; no XRC.
    pub fn odp_caps(&self) -> OdpCaps {
        let uc = OdpCaps::SEND | OdpCaps::RECV | OdpCaps::WRITE | OdpCaps::SRQ_RECV;
        OdpCaps {
            general_caps: OdpCaps::SUPPORT | OdpCaps::SUPPORT_IMPLICIT,
            rc_odp_caps: uc | OdpCaps::READ | OdpCaps::ATOMIC,
            uc_odp_caps: uc,
            ud_odp_caps: OdpCaps::SEND | OdpCaps::RECV | OdpCaps::SRQ_RECV,
            xrc_odp_caps: 0,
        }
    }
}

impl OdpState {
    fn count(&self, f: impl FnOnce(&mut OdpStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }
}

/// The page numbers `addr..addr+len` touches (none for `len` 0).
fn span(addr: u64, len: u64) -> impl Iterator<Item = u64> + Clone {
    let (first, end) = match len {
        0 => (1, 0),
        _ => (addr / ODP_PAGE, (addr + (len - 1)) / ODP_PAGE),
    };
    first..=end
}

/// What a DMA to `addr..addr+len` of the MR of `key` finds.
enum Residency {
    /// Not an ODP MR, or every page resident: no fault.
    Resident,
    /// Some pages are not resident, and may be made so.
    Faults,
    /// A page of an implicit MR that the process does not map with the
    /// permission needed: the device's page fault fails.
    Unresolvable,
}

fn residency(st: &State, key: u32, addr: u64, len: u64, write: bool) -> Residency {
    let Some(pages) = st.mrs.get(&key).and_then(|m| m.odp.as_ref()) else {
        return Residency::Resident;
    };
    let resident = pages.resident.borrow();
    let mut missing = span(addr, len)
        .filter(|pg| !resident.contains(pg))
        .peekable();
    if missing.peek().is_none() {
        return Residency::Resident;
    }
    if pages.implicit {
        // On the fault path only: what the process maps now.
        let maps = HostMaps::read();
        if missing.any(|pg| !maps.allows(pg, write)) {
            return Residency::Unresolvable;
        }
    }
    Residency::Faults
}

/// Makes `addr..addr+len` of the MR of `key` resident, counting each page
/// that was not as a fault.
fn resolve(st: &State, key: u32, addr: u64, len: u64) {
    let Some(pages) = st.mrs.get(&key).and_then(|m| m.odp.as_ref()) else {
        return;
    };
    let mut resident = pages.resident.borrow_mut();
    let made = span(addr, len).filter(|&pg| resident.insert(pg)).count() as u64;
    st.odp.count(|s| s.faults += made);
}

/// Faults in the pages of `addr..addr+len` of the MR of `key` (an lkey or
/// an rkey; the range already checked inside it) for an access that
/// writes or not, before the access moves a byte: `true` when they are
/// all resident now (or the MR is not ODP), `false` when an implicit MR's
/// page is not mapped with the permission needed (nothing made resident:
/// the caller fails the access).
pub(super) fn fault_in(st: &State, key: u32, addr: u64, len: u64, write: bool) -> bool {
    if st.odp.mrs == 0 || len == 0 {
        return true;
    }
    match residency(st, key, addr, len, write) {
        Residency::Resident => true,
        Residency::Unresolvable => false,
        Residency::Faults => {
            resolve(st, key, addr, len);
            true
        }
    }
}

/// The parts of `segs` (checked) that scattering `len` bytes fills, in
/// order: (lkey, address, bytes).
fn filled(segs: &[DataSeg], len: usize) -> impl Iterator<Item = (u32, u64, u64)> + '_ {
    let mut left = len as u64;
    segs.iter().map_while(move |s| {
        if left == 0 {
            return None;
        }
        let k = left.min(s.len as u64);
        left -= k;
        Some((s.lkey, s.addr, k))
    })
}

/// What scattering `len` bytes over receive segments `segs` (checked
/// against the receive queue's MRs) finds: [`Residency::Faults`] when a
/// page the bytes fill is not resident and every one may be made so.
fn scatter_residency(st: &State, segs: &[DataSeg], len: usize) -> Residency {
    let mut out = Residency::Resident;
    for (key, addr, k) in filled(segs, len) {
        match residency(st, key, addr, k, true) {
            Residency::Resident => {}
            Residency::Faults => out = Residency::Faults,
            Residency::Unresolvable => return Residency::Unresolvable,
        }
    }
    out
}

/// [`fault_in`] for a receive's scatter of `len` bytes over `segs`
/// (checked): `false`, nothing made resident, when a page cannot be.
pub(super) fn fault_in_scatter(st: &State, segs: &[DataSeg], len: usize) -> bool {
    if st.odp.mrs == 0 {
        return true;
    }
    match scatter_residency(st, segs, len) {
        Residency::Resident => true,
        Residency::Unresolvable => false,
        Residency::Faults => {
            for (key, addr, k) in filled(segs, len) {
                resolve(st, key, addr, k);
            }
            true
        }
    }
}

/// The SRQ page-fault case (module docs): before a message of `len` bytes
/// is scattered into receive WQE `idx` of SRQ-fed QP `qpn` (its
/// segments `segs`, checked against the SRQ's PD), whether it faults.
/// If so, writes the WQE's page-fault CQE (RESP_ERR, 0x22 / 0x93,
/// `wqe_counter` `idx`) on the QP's receive CQ, consumes the WQE, makes
/// the pages resident and returns `true`: the caller delivers the message
/// again into the next WQE. The QP's state does not change.
fn srq_fault(st: &mut State, qpn: u32, idx: u16, segs: &[DataSeg], len: usize) -> bool {
    if st.odp.mrs == 0 || len == 0 {
        return false;
    }
    if !matches!(scatter_residency(st, segs, len), Residency::Faults) {
        return false;
    }
    for (key, addr, k) in filled(segs, len) {
        resolve(st, key, addr, k);
    }
    let c = crate::cqe::Cqe {
        vendor_syndrome: crate::prm::VENDOR_SYNDROME_ODP_PFAULT,
        ..super::recv::resp_cqe(
            crate::prm::CqeOpcode::RESP_ERR,
            0,
            0,
            crate::prm::Syndrome::REMOTE_ABORTED_ERR,
        )
    };
    super::recv::complete_recv(st, qpn, idx, c);
    st.odp.count(|s| s.srq_fault_cqes += 1);
    true
}

/// [`srq_fault`] for the responder's receive WQE `idx` (`segs`) of QP
/// `qpn` about to take `data` (`None`: no bytes go to its buffers): only
/// on a QP fed by an SRQ, and only for a WQE the responder would
/// otherwise take (every segment valid on `pd` with LOCAL_WRITE, room for
/// the data), so that a bad WQE still fails as it would.
pub(super) fn srq_refault(
    st: &mut State,
    qpn: u32,
    pd: u32,
    idx: u16,
    segs: &[DataSeg],
    data: Option<&[u8]>,
) -> bool {
    let Some(data) = data.filter(|_| st.odp.mrs != 0 && st.qps[&qpn].srq.is_some()) else {
        return false;
    };
    let room: u64 = segs.iter().map(|s| s.len as u64).sum();
    if room < data.len() as u64
        || segs
            .iter()
            .any(|s| s.len != 0 && !super::ops::local_ok(st, pd, *s, true))
    {
        return false;
    }
    srq_fault(st, qpn, idx, segs, data.len())
}

/// The process's mappings (`/proc/self/maps`): start, end, readable,
/// writable. Read on a fault of an implicit MR only.
struct HostMaps(Vec<(u64, u64, bool, bool)>);

impl HostMaps {
    fn read() -> Self {
        let text = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        HostMaps(
            text.lines()
                .filter_map(|line| {
                    let mut f = line.split_ascii_whitespace();
                    let (lo, hi) = f.next()?.split_once('-')?;
                    let perms = f.next()?.as_bytes();
                    Some((
                        u64::from_str_radix(lo, 16).ok()?,
                        u64::from_str_radix(hi, 16).ok()?,
                        perms.first() == Some(&b'r'),
                        perms.get(1) == Some(&b'w'),
                    ))
                })
                .collect(),
        )
    }

    /// Whether page `pg` is mapped readable (and writable, for `write`).
    fn allows(&self, pg: u64, write: bool) -> bool {
        let at = pg * ODP_PAGE;
        self.0
            .iter()
            .any(|&(lo, hi, r, w)| lo <= at && at < hi && r && (w || !write))
    }
}

/// Whether the CPU has page `pg` present (mapped and in memory:
/// `mincore(2)`), for [`OdpAdvice::PrefetchNoFault`].
fn cpu_present(pg: u64) -> bool {
    let mut v = 0u8;
    // SAFETY: `mincore` reads no memory of the range: it fills one byte
    // of `v` for the one page named (page-aligned), or fails (ENOMEM for
    // an unmapped page).
    let r = unsafe {
        libc::mincore(
            (pg * ODP_PAGE) as *mut libc::c_void,
            ODP_PAGE as usize,
            &mut v,
        )
    };
    r == 0 && v & 1 != 0
}
