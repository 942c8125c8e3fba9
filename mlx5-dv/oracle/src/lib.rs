//! rdma-core's own `mlx5dv.h` inline helpers, compiled from the system header,
//! as a differential oracle for `mlx5-dv`'s encoder and decoder (tests and
//! fuzzing only). [`available`] is false when the header was missing at build time.

extern "C" {
    fn oracle_available() -> i32;
    #[allow(clippy::too_many_arguments)]
    fn oracle_set_ctrl_seg(
        out: *mut u8,
        pi: u16,
        opcode: u8,
        opmod: u8,
        qp_num: u32,
        fm_ce_se: u8,
        ds: u8,
        signature: u8,
        imm: u32,
    );
    fn oracle_set_data_seg(out: *mut u8, length: u32, lkey: u32, address: u64);
    fn oracle_cqe_fields(cqe: *const u8, out: *mut u8);
}

/// Whether the oracle was built against the real header.
pub fn available() -> bool {
    // SAFETY: a C function with no arguments and no side effects.
    unsafe { oracle_available() != 0 }
}

/// `mlx5dv_set_ctrl_seg` on a zeroed segment. `imm` is stored as given, as
/// rdma-core does: pass the immediate in network byte order (`imm.to_be()`).
#[allow(clippy::too_many_arguments)]
pub fn set_ctrl_seg(
    pi: u16,
    opcode: u8,
    opmod: u8,
    qp_num: u32,
    fm_ce_se: u8,
    ds: u8,
    signature: u8,
    imm: u32,
) -> [u8; 16] {
    let mut out = [0u8; 16];
    // SAFETY: `out` has the 16 bytes the C function writes.
    unsafe {
        oracle_set_ctrl_seg(
            out.as_mut_ptr(),
            pi,
            opcode,
            opmod,
            qp_num,
            fm_ce_se,
            ds,
            signature,
            imm,
        )
    };
    out
}

/// `mlx5dv_set_data_seg`.
pub fn set_data_seg(length: u32, lkey: u32, address: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    // SAFETY: `out` has the 16 bytes the C function writes.
    unsafe { oracle_set_data_seg(out.as_mut_ptr(), length, lkey, address) };
    out
}

/// `mlx5dv_get_cqe_owner`, `_se`, `_format`, `_opcode` of a 64-byte CQE.
pub fn cqe_fields(cqe: &[u8; 64]) -> [u8; 4] {
    let mut out = [0u8; 4];
    // SAFETY: `cqe` has the 64 bytes read, `out` the 4 written.
    unsafe { oracle_cqe_fields(cqe.as_ptr(), out.as_mut_ptr()) };
    out
}

/// The C baseline of the benchmarks: the same operations as our encoder and
/// poller, written in C with `mlx5dv.h`'s helpers (see `oracle.c`). Each
/// returns 0 when the header was missing at build time.
pub mod baseline {
    extern "C" {
        #[allow(clippy::too_many_arguments)]
        fn baseline_write_sge(
            sq: *mut u8,
            wqe_cnt: u32,
            pi: u32,
            qpn: u32,
            raddr: u64,
            rkey: u32,
            addr: u64,
            len: u32,
            lkey: u32,
        ) -> u32;
        fn baseline_inline_send(
            sq: *mut u8,
            wqe_cnt: u32,
            pi: u32,
            qpn: u32,
            data: *const u8,
            len: u32,
        ) -> u32;
        fn baseline_poll_cqe(cqe: *const u8, ci: u32, cqe_cnt: u32, out: *mut u32) -> i32;
        #[allow(clippy::too_many_arguments)]
        fn baseline_post_inline_writes(
            sq: *mut u8,
            wqe_cnt: u32,
            pi: *mut u32,
            qpn: u32,
            dbrec: *mut u32,
            bf_reg: *mut u8,
            bf_size: u32,
            bf_offset: *mut u32,
            raddr: u64,
            rkey: u32,
            data: *const u8,
            len: u32,
            batch: u32,
        );
    }

    /// A send queue as `mlx5dv_init_obj` describes it, for
    /// [`post_inline_writes`].
    pub struct RawSq {
        pub buf: *mut u8,
        /// WQEBBs, a power of two.
        pub wqe_cnt: u32,
        pub qpn: u32,
        pub dbrec: *mut u32,
        pub bf_reg: *mut u8,
        pub bf_size: u32,
        /// The producer index, WQEBBs.
        pub pi: u32,
        pub bf_offset: u32,
    }

    /// Posts `batch` inline RDMA WRITEs of `data` (the last signaled) and
    /// rings the doorbell, as the C baseline does (see `oracle.c`).
    ///
    /// # Safety
    /// `sq` must describe a live QP's rings (`buf` of `wqe_cnt` WQEBBs, its
    /// doorbell record, its BlueFlame registers) with room for `batch` WQEs
    /// of `data.len() <= 256` bytes, and nothing else may post on it.
    pub unsafe fn post_inline_writes(
        sq: &mut RawSq,
        raddr: u64,
        rkey: u32,
        data: &[u8],
        batch: u32,
    ) {
        // SAFETY: the caller's contract covers every pointer the C function uses.
        unsafe {
            baseline_post_inline_writes(
                sq.buf,
                sq.wqe_cnt,
                &mut sq.pi,
                sq.qpn,
                sq.dbrec,
                sq.bf_reg,
                sq.bf_size,
                &mut sq.bf_offset,
                raddr,
                rkey,
                data.as_ptr(),
                data.len() as u32,
                batch,
            )
        }
    }

    /// A 1-SGE RDMA WRITE into `sq` (`wqe_cnt` WQEBBs of 64 bytes) at `pi`;
    /// returns the WQEBBs used (1).
    ///
    /// # Panics
    /// If `sq` is not `wqe_cnt` (a power of two) WQEBBs.
    #[allow(clippy::too_many_arguments)]
    pub fn write_sge(
        sq: &mut [u8],
        wqe_cnt: u32,
        pi: u32,
        qpn: u32,
        raddr: u64,
        rkey: u32,
        addr: u64,
        len: u32,
        lkey: u32,
    ) -> u32 {
        assert!(wqe_cnt.is_power_of_two() && sq.len() == wqe_cnt as usize * 64);
        // SAFETY: the C function writes one WQEBB inside `sq` (checked above).
        unsafe {
            baseline_write_sge(
                sq.as_mut_ptr(),
                wqe_cnt,
                pi,
                qpn,
                raddr,
                rkey,
                addr,
                len,
                lkey,
            )
        }
    }

    /// An inline SEND of `data` into `sq` at `pi` (wrapping at the end);
    /// returns the WQEBBs used.
    ///
    /// # Panics
    /// If `sq` is not `wqe_cnt` (a power of two) WQEBBs, or `data` needs
    /// more than 4 WQEBBs.
    pub fn inline_send(sq: &mut [u8], wqe_cnt: u32, pi: u32, qpn: u32, data: &[u8]) -> u32 {
        assert!(wqe_cnt.is_power_of_two() && sq.len() == wqe_cnt as usize * 64);
        assert!(data.len() <= 4 * 64 - 20 && wqe_cnt >= 4);
        // SAFETY: the C function writes at most 4 WQEBBs of `sq`, wrapping
        // inside it, and reads `data.len()` bytes of `data`.
        unsafe {
            baseline_inline_send(
                sq.as_mut_ptr(),
                wqe_cnt,
                pi,
                qpn,
                data.as_ptr(),
                data.len() as u32,
            )
        }
    }

    /// The ownership check of a 64-byte CQE for consumer index `ci` and, if
    /// software owns it, its opcode, WQE counter, byte count, QPN and
    /// syndrome.
    pub fn poll_cqe(cqe: &[u8; 64], ci: u32, cqe_cnt: u32) -> Option<[u32; 5]> {
        let mut out = [0u32; 5];
        // SAFETY: `cqe` has the 64 bytes read, `out` the 5 words written.
        (unsafe { baseline_poll_cqe(cqe.as_ptr(), ci, cqe_cnt, out.as_mut_ptr()) } != 0)
            .then_some(out)
    }
}

/// The C baseline of the public API's post and poll (`driver.c`: a small
/// mlx5 driver on rdma-core's `mlx5dv.h` helpers; frozen, see its header;
/// issue 15's UD post and SRQ poll in `driver_ud_srq.c`, issue 29's
/// receive posts and polls in `driver_recv.c`). `scripts/insn-count`
/// counts the instructions inside these entry points beside ours.
pub mod driver {
    /// A send queue as the driver keeps it (`struct cb_sq`).
    #[repr(C)]
    pub struct Sq {
        pub buf: *mut u8,
        /// WQEBBs, a power of two.
        pub wqe_cnt: u32,
        pub qpn: u32,
        /// The QP's doorbell record (`[1]` is the SQ's).
        pub dbrec: *mut u32,
        /// BlueFlame registers: `2 * bf_size` bytes.
        pub bf_reg: *mut u8,
        pub bf_size: u32,
        pub bf_offset: u32,
        /// Next WQEBB index.
        pub cur_post: u32,
        /// WRs posted and retired.
        pub head: u32,
        pub tail: u32,
        /// WRs outstanding at most.
        pub max_post: u32,
        /// `wqe_cnt` entries each: the wr_id of the WQE starting at a WQEBB
        /// slot, and `head` when it was posted.
        pub wrid: *mut u64,
        pub wqe_head: *mut u32,
    }

    /// A CQ as the driver keeps it (`struct cb_cq`).
    #[repr(C)]
    pub struct Cq {
        pub buf: *mut u8,
        /// 64-byte CQEs, a power of two.
        pub cqe_cnt: u32,
        pub ci: u32,
        /// `[0]` is the consumer index record.
        pub dbrec: *mut u32,
    }

    /// A completion (`struct cb_wc`).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct Wc {
        pub wr_id: u64,
        pub status: u32,
        pub opcode: u32,
        pub byte_len: u32,
        pub qp_num: u32,
    }

    /// One 1-SGE RDMA WRITE (`struct cb_write`).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct Write {
        pub wr_id: u64,
        pub raddr: u64,
        pub addr: u64,
        pub rkey: u32,
        pub lkey: u32,
        pub len: u32,
        pub signaled: u32,
    }

    extern "C" {
        fn cb_available() -> i32;
        /// One 1-SGE RDMA WRITE with its doorbell and BlueFlame copy; 0, or
        /// -1 when `max_post` WRs are outstanding.
        ///
        /// # Safety
        /// `sq` describes live memory of the sizes its fields say.
        pub fn cb_post_write(sq: *mut Sq, w: *const Write) -> i32;
        /// One RDMA WRITE of `len` (at most 64) inline bytes; as [`cb_post_write`].
        pub fn cb_post_inline_write(
            sq: *mut Sq,
            wr_id: u64,
            raddr: u64,
            rkey: u32,
            data: *const u8,
            len: u32,
            signaled: i32,
        ) -> i32;
        /// `n` 1-SGE WRITEs with one 8-byte doorbell; as [`cb_post_write`].
        pub fn cb_post_write_batch(sq: *mut Sq, w: *const Write, n: u32) -> i32;
        /// Up to `max` completions of `sq`'s WRs from `cq`; returns how many.
        ///
        /// # Safety
        /// As [`cb_post_write`], for both queues; `wc` holds `max` entries.
        pub fn cb_poll(cq: *mut Cq, sq: *mut Sq, wc: *mut Wc, max: i32) -> i32;
        fn cb15_available() -> i32;
        /// One UD SEND of one SGE through the 48-byte AV `av` (issue 15's
        /// baseline, `driver_ud_srq.c`); 0, or -1 when `max_post` WRs are
        /// outstanding.
        ///
        /// # Safety
        /// As [`cb_post_write`]; `av` points at 48 readable bytes.
        #[allow(clippy::too_many_arguments)]
        pub fn cb_post_ud_send(
            sq: *mut Sq,
            av: *const u8,
            remote_qpn: u32,
            qkey: u32,
            wr_id: u64,
            addr: u64,
            lkey: u32,
            len: u32,
        ) -> i32;
        /// One responder CQE of a QP on `srq` (relinked at the SRQ's tail);
        /// 1, or 0 when the CQ holds none.
        ///
        /// # Safety
        /// `cq` and `srq` describe live rings; `wc` is writable.
        pub fn cb_poll_srq(cq: *mut Cq, srq: *mut Srq, wc: *mut RecvWc) -> i32;
        fn cb_dc_available() -> i32;
        /// One signaled RDMA WRITE of one SGE on a DCI to DCT `dctn` with
        /// access key `dc_key`, through the 48-byte AV `av` (`driver_dc.c`:
        /// ctrl, the datagram segment as `mlx5_send_wr_set_dc_addr` makes
        /// it, raddr, data; 6 DS, 2 WQEBBs, BlueFlame copy of both); 0, or
        /// -1 when `max_post` WRs are outstanding.
        ///
        /// # Safety
        /// As [`cb_post_write`]; `av` points at 48 readable bytes.
        #[allow(clippy::too_many_arguments)]
        pub fn cb_post_dc_write(
            sq: *mut Sq,
            av: *const u8,
            dctn: u32,
            dc_key: u64,
            wr_id: u64,
            raddr: u64,
            rkey: u32,
            addr: u64,
            lkey: u32,
            len: u32,
        ) -> i32;
    }

    /// Whether `driver_dc.c` was built with `<infiniband/mlx5dv.h>`.
    pub fn available_dc() -> bool {
        // SAFETY: no arguments, no side effects.
        unsafe { cb_dc_available() != 0 }
    }

    /// An SRQ as libmlx5 keeps it (`struct cb_srq`).
    #[repr(C)]
    pub struct Srq {
        pub buf: *mut u8,
        /// Bytes per WQE.
        pub stride: u32,
        /// The list's tail.
        pub tail: u32,
        /// The wr_id of each WQE.
        pub wrid: *mut u64,
    }

    /// A receive completion (`struct cb_rwc`).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct RecvWc {
        pub wr_id: u64,
        pub status: u32,
        pub byte_len: u32,
        pub qp_num: u32,
        pub src_qp: u32,
        pub grh: u32,
    }

    /// Whether `driver_ud_srq.c` was built with `<infiniband/mlx5dv.h>`.
    pub fn available15() -> bool {
        // SAFETY: no arguments, no side effects.
        unsafe { cb15_available() != 0 }
    }

    /// Whether the baseline was built against the real header.
    pub fn available() -> bool {
        // SAFETY: no arguments, no side effects.
        unsafe { cb_available() != 0 }
    }

    /// A QP's own receive queue as libmlx5 keeps it (`struct cb_rq`,
    /// `driver_recv.c`).
    #[repr(C)]
    pub struct Rq {
        /// `wqe_cnt` WQEs of `1 << wqe_shift` bytes.
        pub buf: *mut u8,
        /// A power of two.
        pub wqe_cnt: u32,
        pub wqe_shift: u32,
        /// Data segments a WQE holds.
        pub max_gs: u32,
        /// WRs outstanding at most.
        pub max_post: u32,
        /// WRs posted and completed.
        pub head: u32,
        pub tail: u32,
        /// `wqe_cnt` entries: each WQE's wr_id.
        pub wrid: *mut u64,
        /// The QP's doorbell record (`[0]` is the RQ's).
        pub dbrec: *mut u32,
    }

    /// An SRQ as libmlx5 keeps it for posting (`struct cb_post_srq`).
    #[repr(C)]
    pub struct PostSrq {
        /// WQEs of `1 << wqe_shift` bytes: the 16-byte next segment, then
        /// data segments.
        pub buf: *mut u8,
        pub wqe_shift: u32,
        pub max_gs: u32,
        /// The free list's first and last WQE.
        pub head: u32,
        pub tail: u32,
        /// WRs posted: the doorbell record's value.
        pub counter: u32,
        /// The wr_id of each WQE.
        pub wrid: *mut u64,
        /// The SRQ's doorbell record.
        pub db: *mut u32,
    }

    /// `struct ibv_sge` (`<infiniband/verbs.h>`).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct IbvSge {
        pub addr: u64,
        pub length: u32,
        pub lkey: u32,
    }

    /// `struct ibv_recv_wr` (`<infiniband/verbs.h>`): a list of receives.
    #[repr(C)]
    #[derive(Debug)]
    pub struct IbvRecvWr {
        pub wr_id: u64,
        pub next: *mut IbvRecvWr,
        pub sg_list: *mut IbvSge,
        pub num_sge: i32,
    }

    /// A receive completion (`struct cb_recv_wc`): the `ibv_wc` fields our
    /// `Completion` has.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct RecvCompletion {
        pub wr_id: u64,
        pub status: u32,
        /// `enum ibv_wc_opcode`.
        pub opcode: u32,
        /// `IBV_WC_GRH`, `IBV_WC_WITH_IMM`, `IBV_WC_WITH_INV`.
        pub wc_flags: u32,
        pub imm_data: u32,
        pub byte_len: u32,
        pub qp_num: u32,
        pub src_qp: u32,
        pub vendor_err: u32,
    }

    extern "C" {
        fn cb29_available() -> i32;
        /// rdma-core v59's `mlx5_post_recv` (issue 29's baseline,
        /// `driver_recv.c`): 0, or ENOMEM / EINVAL with `*bad_wr` the WR
        /// refused.
        ///
        /// # Safety
        /// `rq` describes live memory of the sizes its fields say; `wr` is
        /// a valid list whose SGE lists hold `num_sge` entries.
        pub fn cb_post_recv(rq: *mut Rq, wr: *mut IbvRecvWr, bad_wr: *mut *mut IbvRecvWr) -> i32;
        /// rdma-core v59's `mlx5_post_srq_recv`; as [`cb_post_recv`].
        ///
        /// # Safety
        /// As [`cb_post_recv`], for `srq`, whose free list is well linked.
        pub fn cb_post_srq_recv(
            srq: *mut PostSrq,
            wr: *mut IbvRecvWr,
            bad_wr: *mut *mut IbvRecvWr,
        ) -> i32;
        /// One responder CQE of an RC QP's own RQ (`mlx5_poll_one`,
        /// `handle_responder`): 1, 0 when the CQ holds none, -1 for a CQE
        /// not a receive's.
        ///
        /// # Safety
        /// `cq` and `rq` describe live rings; `wc` is writable.
        pub fn cb_poll_rq(cq: *mut Cq, rq: *mut Rq, wc: *mut RecvCompletion) -> i32;
        /// The same for a UD QP (the same code in libmlx5).
        ///
        /// # Safety
        /// As [`cb_poll_rq`].
        pub fn cb_poll_ud_recv(cq: *mut Cq, rq: *mut Rq, wc: *mut RecvCompletion) -> i32;
        /// The same for a QP on `srq` (`handle_responder`'s SRQ case, the
        /// WQE relinked at once): not a frozen row, shown beside
        /// `cb_poll_srq`.
        ///
        /// # Safety
        /// `cq` and `srq` describe live rings; `wc` is writable.
        pub fn cb_poll_srq_recv(cq: *mut Cq, srq: *mut PostSrq, wc: *mut RecvCompletion) -> i32;
    }

    /// Whether `driver_recv.c` was built with `<infiniband/mlx5dv.h>`.
    pub fn available29() -> bool {
        // SAFETY: no arguments, no side effects.
        unsafe { cb29_available() != 0 }
    }
}
