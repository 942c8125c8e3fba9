//! rdma-core's provider driving the sim (issue 27 item 5): libmlx5's
//! `mlx5_post_send`, `mlx5_post_recv` and `mlx5_post_srq_recv` write into
//! the sim's own rings and ring its doorbells, the sim executes, and
//! `mlx5_poll_cq_v1` reads the sim's CQEs.
//!
//! A [`Rig`] is one sim device, one PD on it, and one provider context.
//! Every provider object is built over a sim object exactly as libmlx5
//! builds its own over what `mlx5dv_init_obj` describes on a ConnectX: the
//! fake `mlx5_qp` over the sim QP's `mlx5dv_qp` (SQ ring, RQ ring, doorbell
//! record, and as `bf->reg` the BlueFlame register in the QP's UAR page,
//! `bf.size` bytes per half, offset 0 to start), its `rsc.rsn` the user
//! index the sim writes in the QP's version-1 CQEs; the fake `mlx5_cq`
//! over the sim CQ's `mlx5dv_cq` (ring and doorbell record: the provider's
//! consumer index is what the sim reads to detect an overrun); the fake
//! `mlx5_srq` over the sim SRQ's ring and doorbell record.
//!
//! The sim notices work only through the doorbell records, as its
//! `run_qp` reads them; the provider's UAR writes (8-byte doorbell or
//! BlueFlame copy) land in the UAR page and are kept there for the test
//! to look at ([`Rig::bf_regs`]). The sim runs either synchronously
//! ([`Rig::run`], `sim::Device::process`: the device's turn, no kick) or
//! on its own thread ([`Rig::start_device_thread`]).
//!
//! Every CQE the provider polls is decoded again by `mlx5_dv::cqe` from
//! the slot it came from, and the two readings must agree ([`agree`]):
//! whatever the sim writes parses to the same completion in both.

use crate::ffi::*;
use crate::mem::Mem;
use crate::mw::{placeholder, Bind};
use crate::provider::{ProviderRecvs, ProviderWrs};
use crate::wr::{ibv, Sge, Wr};
use mlx5_dv::cqe::Cqe;
use mlx5_dv::dv::mlx5dv_qp;
use mlx5_dv::prm::{CqeOpcode, WqeOpcode, CQE64};
use mlx5_dv::sim::{self, Access, Device, QpState, QpType};
use mlx5_dv::wqe::MwType;
use std::time::{Duration, Instant};

/// A CQ, QP or SRQ of a [`Rig`] (an index into its tables).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqId(usize);
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpId(usize);
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqId(usize);

/// Registered memory of a [`Rig`]: its address, length and keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub addr: u64,
    pub len: u32,
    pub lkey: u32,
    pub rkey: u32,
}

impl Region {
    /// An SGE of `len` bytes at offset `off`.
    pub fn sge(&self, off: u32, len: u32) -> Sge {
        assert!(
            off as u64 + len as u64 <= self.len as u64,
            "SGE outside the region"
        );
        Sge {
            addr: self.addr + off as u64,
            len,
            lkey: self.lkey,
        }
    }

    /// The address at offset `off`.
    pub fn at(&self, off: u32) -> u64 {
        self.addr + off as u64
    }
}

/// What a QP of the rig is made of.
#[derive(Clone, Copy, Debug)]
pub struct QpSpec {
    pub qp_type: QpType,
    /// SQ size in WQEBBs (a power of two).
    pub sq_wqebbs: u32,
    /// RQ WQEs and bytes per WQE (powers of two; ignored on an SRQ).
    pub rq_wqe_cnt: u32,
    pub rq_stride: u32,
    pub srq: Option<SrqId>,
    /// The largest WQE in WQEBBs: the provider's `max_post` is
    /// `sq_wqebbs / max_wqebbs` WRs (`verbs.c`).
    pub max_wqebbs: u32,
    pub max_inline: u32,
}

impl QpSpec {
    /// An RC QP: 64 WQEBBs of SQ (WQEs up to 4 WQEBBs, 16 WRs
    /// outstanding, 128 bytes inline), 16 receive WQEs of 4 SGEs.
    pub fn rc() -> QpSpec {
        QpSpec {
            qp_type: QpType::Rc,
            sq_wqebbs: 64,
            rq_wqe_cnt: 16,
            rq_stride: 64,
            srq: None,
            max_wqebbs: 4,
            max_inline: 128,
        }
    }
}

/// One CQE as the provider reported it, with the slot's bytes and our
/// decoder's reading of them.
#[derive(Clone, Copy, Debug)]
pub struct Polled {
    pub wc: po_wc,
    /// The 64-byte CQE the provider consumed (read back from its slot).
    pub raw: [u8; CQE64],
    pub ours: Cqe,
}

/// A WQE whose next-WQE segment changed: its index, the 16 bytes
/// before and after.
pub type Relinked = (u32, Vec<u8>, Vec<u8>);

struct RigCq {
    po: *mut po_cq,
    sim: sim::Cq,
    cqe_cnt: u32,
}

struct RigQp {
    po: *mut po_qp,
    sim: sim::Qp,
    dv: mlx5dv_qp,
}

struct RigSrq {
    po: *mut po_srq,
    sim: sim::Srq,
}

/// A sim device with provider objects over its objects; see the module
/// documentation. Dropping it stops the device thread, frees the provider
/// objects, then the sim's, then the registered memory.
pub struct Rig {
    pub dev: Device,
    pub pd: u32,
    ctx: *mut po_ctx,
    cqs: Vec<RigCq>,
    qps: Vec<RigQp>,
    srqs: Vec<RigSrq>,
    mrs: Vec<(u32, Mem)>,
    /// The device thread runs ([`Self::start_device_thread`]).
    threaded: bool,
    /// Send WRs `mlx5_post_send` took, receive WRs `mlx5_post_recv` and
    /// `mlx5_post_srq_recv` took, and CQEs `mlx5_poll_cq_v1` returned.
    pub sends: u64,
    pub recvs: u64,
    pub cqes: u64,
}

/// `enum ibv_wc_opcode` and `ibv_wc_flags` values the checks use.
pub mod wc {
    pub const SEND: u32 = 0;
    pub const RDMA_WRITE: u32 = 1;
    pub const RDMA_READ: u32 = 2;
    pub const COMP_SWAP: u32 = 3;
    pub const FETCH_ADD: u32 = 4;
    pub const RECV: u32 = 128;
    pub const RECV_RDMA_WITH_IMM: u32 = 129;
    pub const GRH: u32 = 1;
    pub const WITH_IMM: u32 = 2;
    pub const WITH_INV: u32 = 8;
    pub const SUCCESS: u32 = 0;
    pub const LOC_LEN_ERR: u32 = 1;
    pub const REM_INV_REQ_ERR: u32 = 9;
    pub const REM_ACCESS_ERR: u32 = 10;
    pub const WR_FLUSH_ERR: u32 = 5;
}

impl Default for Rig {
    fn default() -> Self {
        Self::new()
    }
}

impl Rig {
    pub fn new() -> Rig {
        let dev = Device::new();
        let pd = dev.alloc_pd();
        // SAFETY: no arguments; a fresh context, freed in `drop`.
        let ctx = unsafe { po_ctx_new() };
        assert!(!ctx.is_null(), "po_ctx_new");
        Rig {
            dev,
            pd,
            ctx,
            cqs: Vec::new(),
            qps: Vec::new(),
            srqs: Vec::new(),
            mrs: Vec::new(),
            threaded: false,
            sends: 0,
            recvs: 0,
            cqes: 0,
        }
    }

    /// From now on the sim executes on its own thread, as doorbell records
    /// change; [`Self::run`] is then not needed.
    pub fn start_device_thread(&mut self) {
        self.dev.start().expect("the sim's device thread");
        self.threaded = true;
    }

    /// `len` bytes of zeroed memory registered with `access`.
    pub fn mr(&mut self, len: u32, access: Access) -> Region {
        let mem = Mem::zeroed(len as usize);
        // SAFETY: `mem` is kept in `self.mrs` until `drop`, which
        // deregisters it before freeing it (after stopping the device).
        let k =
            unsafe { self.dev.reg_mr(self.pd, mem.ptr(), len as usize, access) }.expect("reg_mr");
        let r = Region {
            addr: mem.ptr() as u64,
            len,
            lkey: k.lkey,
            rkey: k.rkey,
        };
        self.mrs.push((k.lkey, mem));
        r
    }

    /// Copies `src` into the region at `off` (while no WR targets it).
    pub fn write_mem(&mut self, r: &Region, off: u32, src: &[u8]) {
        assert!(off as usize + src.len() <= r.len as usize);
        // SAFETY: the range is inside memory this rig owns (`mr`), and no
        // WR the device may be executing touches it (the caller's word).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), r.at(off) as *mut u8, src.len()) }
    }

    /// The region's bytes `off..off + len` (after the WRs that write them
    /// completed).
    pub fn read_mem(&self, r: &Region, off: u32, len: u32) -> Vec<u8> {
        assert!(off as u64 + len as u64 <= r.len as u64);
        let mut out = vec![0u8; len as usize];
        // SAFETY: as `write_mem`; a completion polled orders the device's
        // writes before this read.
        unsafe {
            std::ptr::copy_nonoverlapping(r.at(off) as *const u8, out.as_mut_ptr(), out.len())
        };
        out
    }

    /// A sim CQ of `cqe_cnt` 64-byte CQEs (detecting overrun, so the
    /// provider's consumer-index record matters) and the provider's CQ
    /// over its ring and doorbell record.
    pub fn cq(&mut self, cqe_cnt: u32) -> CqId {
        self.cq_sized(cqe_cnt, 64)
    }

    /// [`Self::cq`] with CQEs of `cqe_size` (64 or 128) bytes.
    pub fn cq_sized(&mut self, cqe_cnt: u32, cqe_size: u32) -> CqId {
        let sim = self.dev.create_cq(cqe_cnt, cqe_size).expect("create_cq");
        let d = sim.dv();
        let cfg = po_cq_cfg {
            buf: d.buf,
            dbrec: d.dbrec,
            cqe_cnt: d.cqe_cnt,
            cqe_sz: d.cqe_size,
            cons_index: 0,
            cqn: d.cqn,
        };
        // SAFETY: `ctx` is live; the ring and record are the sim CQ's, which
        // outlives the provider's CQ (freed first in `drop`).
        let po = unsafe { po_cq_new(self.ctx, &cfg) };
        assert!(!po.is_null(), "po_cq_new");
        self.cqs.push(RigCq {
            po,
            sim,
            cqe_cnt: d.cqe_cnt,
        });
        CqId(self.cqs.len() - 1)
    }

    /// A sim SRQ of `max_wr` receives of `max_sge` SGEs and the provider's
    /// over its ring. Returns it and the WQEs whose next-WQE segment
    /// `po_srq_new` changed from what the sim had linked at creation
    /// (index, sim's 16 bytes, after `po_srq_new`): both link `0 -> 1 ->
    /// ...`, so the list should be empty.
    pub fn srq(&mut self, max_wr: u32, max_sge: u32) -> (SrqId, Vec<Relinked>) {
        let sim = self
            .dev
            .create_srq(self.pd, max_wr, max_sge)
            .expect("create_srq");
        let d = sim.dv();
        let count = d.tail + 1;
        let next_segs = |buf: *mut u8| -> Vec<Vec<u8>> {
            (0..count as usize)
                .map(|i| {
                    let mut s = vec![0u8; 16];
                    // SAFETY: WQE `i` lies inside the sim's SRQ ring of
                    // `count * stride` bytes, alive while `sim` is.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            buf.add(i * d.stride as usize),
                            s.as_mut_ptr(),
                            16,
                        )
                    };
                    s
                })
                .collect()
        };
        let before = next_segs(d.buf);
        let cfg = po_srq_cfg {
            buf: d.buf.cast(),
            db: d.dbrec,
            max: count,
            wqe_shift: d.stride.trailing_zeros(),
            max_gs: (d.stride - 16) / 16,
            srqn: sim.srqn(),
        };
        // SAFETY: `ctx` is live; the ring and record are the sim SRQ's,
        // which outlives the provider's SRQ (freed first in `drop`).
        let po = unsafe { po_srq_new(self.ctx, &cfg) };
        assert!(!po.is_null(), "po_srq_new");
        let after = next_segs(d.buf);
        let changed = before
            .into_iter()
            .zip(after)
            .enumerate()
            .filter(|(_, (b, a))| b != a)
            .map(|(i, (b, a))| (i as u32, b, a))
            .collect();
        self.srqs.push(RigSrq { po, sim });
        (SrqId(self.srqs.len() - 1), changed)
    }

    /// A sim QP completing into `cq` (sends and receives) and the
    /// provider's QP over its rings, doorbell record and BlueFlame
    /// register, in RTS on the provider's side (the sim's starts in RESET:
    /// [`Self::connect`], [`Self::ready_ud`]).
    pub fn qp(&mut self, cq: CqId, spec: QpSpec) -> QpId {
        let srq = spec.srq.map(|s| &self.srqs[s.0].sim);
        let sim = self
            .dev
            .create_qp_of(
                spec.qp_type,
                self.pd,
                &self.cqs[cq.0].sim,
                spec.sq_wqebbs,
                spec.rq_wqe_cnt,
                spec.rq_stride,
                srq,
            )
            .expect("create_qp_of");
        let d = sim.dv();
        let rq = d.rq.wqe_cnt != 0;
        let cfg = po_qp_cfg {
            sq_buf: d.sq.buf,
            rq_buf: if rq { d.rq.buf } else { core::ptr::null_mut() },
            dbrec: d.dbrec,
            bf_reg: d.bf.reg,
            sq_wqe_cnt: d.sq.wqe_cnt,
            sq_cur_post: 0,
            sq_max_post: d.sq.wqe_cnt / spec.max_wqebbs,
            sq_max_gs: 4,
            max_inline: spec.max_inline,
            rq_wqe_cnt: d.rq.wqe_cnt,
            rq_wqe_shift: if rq { d.rq.stride.trailing_zeros() } else { 0 },
            rq_max_gs: if rq { d.rq.stride / 16 } else { 0 },
            rq_max_post: d.rq.wqe_cnt,
            rq_head: 0,
            qpn: sim.qpn(),
            qp_type: match spec.qp_type {
                QpType::Rc => ibv::QPT_RC,
                QpType::Uc => ibv::QPT_UC,
                QpType::Ud => ibv::QPT_UD,
                // (DC QPs are the builders' oracle's: `dc.rs`.)
                QpType::Dci | QpType::Dct => crate::dc::QPT_DRIVER,
            },
            sq_sig_all: 0,
            wq_sig: 0,
            atomics: (spec.qp_type == QpType::Rc) as u32,
            prefer_bf: 0,
            bf_size: d.bf.size,
            bf_offset: 0,
            user_index: sim.user_index(),
            pad: 0,
        };
        let cqp = self.cqs[cq.0].po;
        let srqp = spec
            .srq
            .map_or(core::ptr::null_mut(), |s| self.srqs[s.0].po);
        // SAFETY: `ctx`, the CQ and the SRQ are live provider objects; the
        // rings, record and UAR page are the sim QP's, which outlives the
        // provider's QP (freed first in `drop`).
        let po = unsafe { po_qp_new(self.ctx, &cfg, cqp, cqp, srqp) };
        assert!(!po.is_null(), "po_qp_new");
        self.qps.push(RigQp { po, sim, dv: d });
        QpId(self.qps.len() - 1)
    }

    /// Connects RC (or UC) QPs `a` and `b` to each other: RESET -> INIT
    /// (with responder `access`) -> RTR -> RTS on both.
    pub fn connect(&self, a: QpId, b: QpId, access: Access) {
        for (x, y) in [(a, b), (b, a)] {
            let (x, y) = (&self.qps[x.0].sim, &self.qps[y.0].sim);
            x.to_init(access).expect("to_init");
            x.to_rtr(y.qpn()).expect("to_rtr");
            x.to_rts().expect("to_rts");
        }
    }

    /// A UD QP to RTS with `qkey`.
    pub fn ready_ud(&self, q: QpId, qkey: u32) {
        let s = &self.qps[q.0].sim;
        s.to_init_ud(qkey).expect("to_init_ud");
        s.to_rtr_ud().expect("to_rtr_ud");
        s.to_rts().expect("to_rts");
    }

    pub fn qpn(&self, q: QpId) -> u32 {
        self.qps[q.0].sim.qpn()
    }

    /// The sim's state of the QP.
    pub fn state(&self, q: QpId) -> QpState {
        self.qps[q.0].sim.state()
    }

    /// The provider's SQ and RQ counters and BlueFlame offset.
    pub fn sq_state(&self, q: QpId) -> po_sq_state {
        let mut s = po_sq_state::default();
        // SAFETY: a live provider QP and a valid out-pointer.
        unsafe { po_qp_state(self.qps[q.0].po, &mut s) };
        s
    }

    /// Both halves of the QP's BlueFlame register in the sim's UAR page,
    /// as the provider's doorbells left them.
    pub fn bf_regs(&self, q: QpId) -> Vec<u8> {
        let d = &self.qps[q.0].dv;
        let mut out = vec![0u8; 2 * d.bf.size as usize];
        // SAFETY: `bf.reg` points at two registers of `bf.size` bytes in
        // the sim QP's UAR page (`sim::BF_OFFSET` + 512 <= 4096), alive
        // while the QP is; only the provider writes them, inside post calls.
        unsafe {
            std::ptr::copy_nonoverlapping(d.bf.reg as *const u8, out.as_mut_ptr(), out.len())
        };
        out
    }

    /// The QP's doorbell record as the sim reads it: word 0 (RQ) and word
    /// 1 (SQ), big-endian.
    pub fn dbrec(&self, q: QpId) -> [u8; 8] {
        let mut out = [0u8; 8];
        // SAFETY: the sim QP's doorbell record is 64 bytes, alive while the
        // QP is; the provider writes it only inside post calls.
        unsafe {
            std::ptr::copy_nonoverlapping(self.qps[q.0].dv.dbrec as *const u8, out.as_mut_ptr(), 8)
        };
        out
    }

    /// `len` SQ ring bytes from WQEBB index `pi` (wrapping), as the device
    /// reads them.
    pub fn sq_bytes(&self, q: QpId, pi: u32, len: usize) -> Vec<u8> {
        let d = &self.qps[q.0].dv;
        let mut out = vec![0u8; len];
        let off = (pi & (d.sq.wqe_cnt - 1)) as usize * 64;
        self.qps[q.0].sim.hook_read_sq(off, &mut out);
        out
    }

    /// `mlx5_post_send` of `wrs` on QP `q` (one call). `Err((errno, index
    /// of the WR refused))` on a refusal.
    pub fn post_send(&mut self, q: QpId, wrs: &[Wr]) -> Result<(), (i32, u32)> {
        let pw = ProviderWrs::of(wrs);
        let list = &pw.list;
        let mut bad = 0u32;
        // SAFETY: a live provider QP; the list, its SGE arrays and AVs live
        // until the call returns; the rings it writes are the sim's.
        let err =
            unsafe { po_post_send(self.qps[q.0].po, list.as_ptr(), list.len() as u32, &mut bad) };
        self.sends += bad as u64;
        if err != 0 {
            return Err((err, bad));
        }
        Ok(())
    }

    /// A memory window of `mw_type` on the rig's PD
    /// (`sim::Device::alloc_mw`): its rkey, variant byte 0.
    pub fn alloc_mw(&self, mw_type: MwType) -> u32 {
        self.dev.alloc_mw(self.pd, mw_type).expect("alloc_mw")
    }

    /// `mlx5_post_send` of the one memory-window bind `b` on QP `q`
    /// (`IBV_WR_BIND_MW` over the harness's fake `ibv_mw` and `ibv_mr`):
    /// libmlx5's UMR WQE, which the sim executes as the bind. `Err((errno,
    /// 0))` on a refusal.
    pub fn post_bind(&mut self, q: QpId, b: &Bind) -> Result<(), (i32, u32)> {
        let w = Wr {
            wr_id: b.wr_id,
            signaled: b.signaled,
            fence: b.fence,
            ..placeholder()
        };
        let pw = ProviderWrs::of(std::slice::from_ref(&w));
        let mw = [b.po()];
        let mut bad = 0u32;
        // SAFETY: a live provider QP; the list and its bind entry live
        // until the call returns; the ring it writes is the sim's.
        let err = unsafe {
            po_post_send_mw(self.qps[q.0].po, pw.list.as_ptr(), mw.as_ptr(), 1, &mut bad)
        };
        self.sends += bad as u64;
        if err != 0 {
            return Err((err, bad));
        }
        Ok(())
    }

    /// `mlx5_post_recv` of `(wr_id, SGEs)` receives on QP `q`.
    pub fn post_recv(&mut self, q: QpId, wrs: &[(u64, Vec<Sge>)]) -> Result<(), (i32, u32)> {
        let po = self.qps[q.0].po;
        // SAFETY: a live provider QP; the list is valid for the call.
        self.post_recv_with(wrs, |l, n, bad| unsafe { po_post_recv(po, l, n, bad) })
    }

    /// `mlx5_post_srq_recv` of `(wr_id, SGEs)` receives on SRQ `s`.
    pub fn post_srq_recv(&mut self, s: SrqId, wrs: &[(u64, Vec<Sge>)]) -> Result<(), (i32, u32)> {
        let po = self.srqs[s.0].po;
        // SAFETY: a live provider SRQ; the list is valid for the call.
        self.post_recv_with(wrs, |l, n, bad| unsafe { po_post_srq_recv(po, l, n, bad) })
    }

    fn post_recv_with(
        &mut self,
        wrs: &[(u64, Vec<Sge>)],
        post: impl FnOnce(*const po_recv_wr, u32, *mut u32) -> i32,
    ) -> Result<(), (i32, u32)> {
        let recvs = ProviderRecvs::of(wrs);
        let list = &recvs.list;
        let mut bad = 0u32;
        let err = post(list.as_ptr(), list.len() as u32, &mut bad);
        self.recvs += bad as u64;
        if err != 0 {
            return Err((err, bad));
        }
        Ok(())
    }

    /// The sim's turn (synchronous mode): executes every WQE whose doorbell
    /// record it sees; returns how many ran (0, doing nothing, while the
    /// device thread runs).
    pub fn run(&self) -> usize {
        if self.threaded {
            return 0;
        }
        self.dev.process()
    }

    /// `mlx5_poll_cq_v1` for up to `max` (1..=64) CQEs of CQ `cq`, each
    /// checked against our decoding of its slot ([`agree`]; panics with
    /// the CQE's bytes if they disagree).
    pub fn poll(&mut self, cq: CqId, max: usize) -> Vec<Polled> {
        let c = &self.cqs[cq.0];
        // SAFETY: a live provider CQ.
        let ci = unsafe { po_cq_cons_index(c.po) };
        let mut out = vec![po_wc::default(); max];
        // SAFETY: a live provider CQ over the sim's ring; `out` holds `max`.
        let n = unsafe { po_poll_cq(c.po, max as i32, out.as_mut_ptr()) };
        assert!(
            n >= 0,
            "mlx5_poll_cq_v1 failed ({n}) at consumer index {ci}"
        );
        out.truncate(n as usize);
        let polled: Vec<Polled> = out
            .into_iter()
            .enumerate()
            .map(|(i, wc)| {
                let raw = c
                    .sim
                    .hook_read_cqe(ci.wrapping_add(i as u32) & (c.cqe_cnt - 1));
                let ours = Cqe::decode(&raw);
                if let Err(e) = agree(&wc, &ours) {
                    panic!(
                        "CQE {:#x} of CQ {:#x}: {e}\nbytes {}",
                        ci + i as u32,
                        c.sim.cqn(),
                        hex(&raw)
                    );
                }
                Polled { wc, raw, ours }
            })
            .collect();
        self.cqes += polled.len() as u64;
        polled
    }

    /// Polls CQ `cq` until `n` CQEs came (running the sim between polls
    /// unless its thread runs), or `timeout` passed; returns what came.
    pub fn wait(&mut self, cq: CqId, n: usize, timeout: Duration) -> Vec<Polled> {
        let start = Instant::now();
        let mut got = Vec::new();
        while got.len() < n && start.elapsed() < timeout {
            self.run();
            let more = self.poll(cq, (n - got.len()).min(64));
            if more.is_empty() {
                std::thread::yield_now();
            }
            got.extend(more);
        }
        got
    }

    /// Whether CQ `cq` overran (the sim read a stale consumer index).
    pub fn overrun(&self, cq: CqId) -> bool {
        self.cqs[cq.0].sim.overrun()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.dev.stop();
        // SAFETY: each provider object once, QPs before the SRQs and CQs
        // they name, all before the context they point into.
        unsafe {
            for q in &self.qps {
                po_qp_free(q.po);
            }
            for s in &self.srqs {
                po_srq_free(s.po);
            }
            for c in &self.cqs {
                po_cq_free(c.po);
            }
            po_ctx_free(self.ctx);
        }
        self.qps.clear();
        self.srqs.clear();
        self.cqs.clear();
        for (lkey, _) in &self.mrs {
            let _ = self.dev.dereg_mr(*lkey);
        }
        self.mrs.clear();
    }
}

/// Whether the provider's completion `wc` says what our decoding `ours`
/// of the same CQE says: status (`Syndrome::wc_status`), vendor syndrome,
/// QPN, and for a successful CQE the opcode (a requester's by its WQE
/// opcode), the byte count where verbs reports one, the immediate (or a
/// RESP_SEND_INV's invalidated rkey, `Cqe::invalidated_rkey`), and a
/// receive's source QP and GRH flag.
pub fn agree(wc: &po_wc, ours: &Cqe) -> Result<(), String> {
    let mut bad = Vec::new();
    let mut check = |what: &str, theirs: u32, o: u32| {
        if theirs != o {
            bad.push(format!("{what}: provider {theirs:#x}, ours {o:#x}"));
        }
    };
    check("status", wc.status, ours.wc_status());
    check("qp_num", wc.qp_num, ours.qpn);
    if ours.opcode.is_error() {
        check("vendor_err", wc.vendor_err, ours.vendor_syndrome as u32);
    } else if ours.opcode == CqeOpcode::REQ {
        let (op, len) = match ours.wqe_opcode {
            WqeOpcode::RDMA_WRITE | WqeOpcode::RDMA_WRITE_IMM => (wc::RDMA_WRITE, None),
            WqeOpcode::SEND | WqeOpcode::SEND_IMM | WqeOpcode::SEND_INVAL => (wc::SEND, None),
            WqeOpcode::RDMA_READ => (wc::RDMA_READ, Some(ours.byte_cnt)),
            WqeOpcode::ATOMIC_CS => (wc::COMP_SWAP, Some(8)),
            WqeOpcode::ATOMIC_FA => (wc::FETCH_ADD, Some(8)),
            o => return Err(format!("a requester CQE for WQE opcode {:#x}", o.0)),
        };
        check("opcode", wc.opcode, op);
        if let Some(len) = len {
            check("byte_len", wc.byte_len, len);
        }
    } else {
        let (op, imm) = match ours.opcode {
            CqeOpcode::RESP_SEND | CqeOpcode::RESP_SEND_INV => (wc::RECV, false),
            CqeOpcode::RESP_SEND_IMM => (wc::RECV, true),
            CqeOpcode::RESP_WR_IMM => (wc::RECV_RDMA_WITH_IMM, true),
            o => return Err(format!("a responder CQE of opcode {:#x}", o.0)),
        };
        check("opcode", wc.opcode, op);
        check("byte_len", wc.byte_len, ours.byte_cnt);
        check(
            "with_imm",
            wc.wc_flags & wc::WITH_IMM,
            if imm { wc::WITH_IMM } else { 0 },
        );
        if imm {
            check("imm", wc.imm, ours.imm);
        }
        let inv = ours.invalidated_rkey();
        check(
            "with_inv",
            wc.wc_flags & wc::WITH_INV,
            if inv.is_some() { wc::WITH_INV } else { 0 },
        );
        if let Some(rkey) = inv {
            // (`po_wc.imm` is `be32toh(imm_data)`; `invalidated_rkey`
            // shares its union in host order.)
            check("invalidated_rkey", wc.imm.swap_bytes(), rkey);
        }
        check("src_qp", wc.src_qp, ours.src_qp());
        check("grh", wc.wc_flags & wc::GRH, ours.grh() as u32);
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(bad.join("; "))
    }
}

/// Bytes as hex, 16 a group.
pub fn hex(b: &[u8]) -> String {
    b.chunks(16)
        .map(|c| c.iter().map(|x| format!("{x:02x}")).collect::<String>())
        .collect::<Vec<_>>()
        .join(" ")
}
