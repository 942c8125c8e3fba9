//! Helpers of the sim-driven cases: WRs, patterns, the expected
//! completion, a connected RC pair with its memory, the SQ walk.

pub use mlx5_dv::sim::{Access, QpState, QpType};
pub use mlx5_provider_oracle::sim_driven::{hex, wc, CqId, Polled, QpId, QpSpec, Region, Rig};
pub use mlx5_provider_oracle::wr::{Op, Sge, Ud, Wr};
pub use std::time::Duration;

pub const ALL: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC);
/// How long a wait for the device thread may take.
pub const T: Duration = Duration::from_secs(10);

pub fn wr(wr_id: u64, op: Op, sges: Vec<Sge>, signaled: bool) -> Wr {
    Wr {
        wr_id,
        op,
        sges,
        inline: false,
        signaled,
        solicited: false,
        fence: false,
        ud: None,
    }
}

pub fn inline(mut w: Wr) -> Wr {
    w.inline = true;
    w
}

pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// One completion as expected.
#[track_caller]
pub fn expect(p: &Polled, wr_id: u64, status: u32, opcode: Option<u32>, qpn: u32) {
    let w = &p.wc;
    let at = format!("{w:?}\nCQE {}", hex(&p.raw));
    assert_eq!(w.wr_id, wr_id, "wr_id: {at}");
    assert_eq!(w.status, status, "status: {at}");
    if let Some(op) = opcode {
        assert_eq!(w.opcode, op, "opcode: {at}");
    }
    assert_eq!(w.qp_num, qpn, "qp_num: {at}");
}

/// Two connected RC QPs, each with its own CQ, and memory: `a_src`,
/// `a_dst` on A's side, `b_mem` (remote target) and `b_recv` on B's.
pub struct Pair {
    pub rig: Rig,
    pub a: QpId,
    pub b: QpId,
    pub acq: CqId,
    pub bcq: CqId,
    pub a_src: Region,
    pub a_dst: Region,
    pub b_mem: Region,
    pub b_recv: Region,
}

pub fn pair(threaded: bool) -> Pair {
    let mut rig = Rig::new();
    if threaded {
        rig.start_device_thread();
    }
    let (acq, bcq) = (rig.cq(64), rig.cq(64));
    let a = rig.qp(acq, QpSpec::rc());
    let b = rig.qp(bcq, QpSpec::rc());
    rig.connect(a, b, ALL);
    let a_src = rig.mr(4096, Access::LOCAL_WRITE);
    let a_dst = rig.mr(4096, Access::LOCAL_WRITE);
    let b_mem = rig.mr(4096, ALL);
    let b_recv = rig.mr(4096, Access::LOCAL_WRITE);
    rig.write_mem(&a_src, 0, &pattern(1, 4096));
    Pair {
        rig,
        a,
        b,
        acq,
        bcq,
        a_src,
        a_dst,
        b_mem,
        b_recv,
    }
}

/// The WQEBB index of the last WQE the provider wrote between `from`
/// and `to`, walking the ctrl segments' DS counts.
pub fn last_wqe(rig: &Rig, q: QpId, from: u32, to: u32) -> u32 {
    let (mut pi, mut last) = (from, from);
    while pi != to {
        last = pi;
        let ds = (rig.sq_bytes(q, pi, 8)[7] & 0x3f) as u32;
        pi = pi.wrapping_add((ds * 16).div_ceil(64).max(1));
    }
    last
}

/// Every WR posted on `q` was retired by a completion.
#[track_caller]
pub fn all_retired(rig: &Rig, q: QpId) {
    let s = rig.sq_state(q);
    assert_eq!((s.tail, s.rq_tail), (s.head, s.rq_head), "{s:?}");
}
