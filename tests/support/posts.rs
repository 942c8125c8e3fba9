//! Helpers of the one-opcode post tests (`posting_*.rs`, `completions.rs`,
//! `transports.rs`, `srq*.rs`): QP configs, WQE comparisons with `post_send`,
//! a small RNG, refusals that write nothing.
#![allow(dead_code, unused_imports)]

use rdma_direct::testing::QpHooks;
use rdma_direct::*;

#[path = "sim.rs"]
mod sim;
pub use sim::remote as to;
pub use sim::*;

pub fn cfg(send: u32, max_inline: u32) -> QpConfig {
    QpConfig {
        max_send_wr: send,
        max_inline,
        ..QpConfig::default()
    }
}

pub fn with_flags(w: SendWr<'_>, f: SendFlags) -> SendWr<'_> {
    w.with_flags(f)
}

/// The QPN bytes (4..7) of a ctrl segment.
pub fn qpn_bytes(q: &Qp) -> [u8; 3] {
    let n = q.qp_num();
    [(n >> 16) as u8, (n >> 8) as u8, n as u8]
}

/// The SQ doorbell record (the producer index, 16 bits) of a snapshot.
pub fn dbrec(s: &[u8]) -> u32 {
    let n = s.len() - 4;
    u32::from_be_bytes(s[n..].try_into().unwrap()) & 0xffff
}

/// Compares the WQEs two QPs posted since their producer index was `from`
/// (the device reads the `ds * 16` bytes of each: those are compared,
/// continuing at the ring's start, the QPN masked) and their doorbell
/// records; returns the new producer index.
pub fn same_wqes_since(a: &Qp, b: &Qp, from: u32, what: &str) -> u32 {
    let (sa, sb) = (a.sq_snapshot().unwrap(), b.sq_snapshot().unwrap());
    assert_eq!(sa.len(), sb.len(), "{what}: ring sizes");
    let ring = sa.len() - 4;
    assert_eq!(&sa[ring..], &sb[ring..], "{what}: doorbell records");
    let wqe_cnt = (ring / 64) as u32;
    let to_pi = dbrec(&sa);
    let mut pi = from & 0xffff;
    let mut k = 0;
    while pi != to_pi {
        let at = ((pi % wqe_cnt) * 64) as usize;
        let ds = (sa[at + 7] & 0x3f) as usize;
        assert_eq!(sa[at + 7], sb[at + 7], "{what}: WQE {k} (pi {pi}) ds");
        assert!(ds >= 1, "{what}: WQE {k} (pi {pi}) ds 0");
        let take = |s: &[u8]| -> Vec<u8> { (0..ds * 16).map(|i| s[(at + i) % ring]).collect() };
        let (mut x, mut y) = (take(&sa), take(&sb));
        x[4..7].fill(0);
        y[4..7].fill(0);
        // An inline WRITE's padding (after its bytes, to the DS end) is
        // written by neither path: stale bytes of older WQEs.
        if ds >= 3 && x[32] & 0x80 != 0 {
            let len = u32::from_be_bytes(x[32..36].try_into().unwrap()) & 0x7fff_ffff;
            let end = (36 + len as usize).min(x.len());
            x.truncate(end);
            y.truncate(end);
        }
        assert_eq!(x, y, "{what}: WQE {k} at pi {pi} (ds {ds})");
        pi = (pi + (ds as u32 * 16).div_ceil(64)) & 0xffff;
        k += 1;
        assert!(k <= wqe_cnt, "{what}: walked past the ring");
    }
    to_pi
}

/// Compares two fresh QPs' rings whole, WQEBB by WQEBB (QPNs masked where
/// both hold their own): for rings that have not wrapped.
pub fn same_ring(a: &Qp, b: &Qp, what: &str) {
    let (sa, sb) = (a.sq_snapshot().unwrap(), b.sq_snapshot().unwrap());
    assert_eq!(sa.len(), sb.len(), "{what}: ring sizes");
    let ring = sa.len() - 4;
    assert_eq!(&sa[ring..], &sb[ring..], "{what}: doorbell records");
    let (qa, qb) = (qpn_bytes(a), qpn_bytes(b));
    for (k, (x, y)) in sa[..ring].chunks(64).zip(sb[..ring].chunks(64)).enumerate() {
        let (mut x, mut y) = (x.to_vec(), y.to_vec());
        if x[4..7] == qa && y[4..7] == qb {
            x[4..7].fill(0);
            y[4..7].fill(0);
        }
        assert_eq!(x, y, "{what}: WQEBB {k}");
    }
}

/// A small deterministic generator (xorshift64*).
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Refused, nothing written; returns the error.
pub fn refused_by(qp: &mut Qp, f: impl FnOnce(&mut Qp) -> Result<()>) -> Error {
    refused_at(qp, "", f)
}

/// [`refused_by`], saying what was refused when it was not.
pub fn refused_at(qp: &mut Qp, what: &str, f: impl FnOnce(&mut Qp) -> Result<()>) -> Error {
    let before = qp.sq_snapshot().unwrap();
    let e = f(qp).expect_err(&format!("must be refused: {what}"));
    assert_eq!(
        before,
        qp.sq_snapshot().unwrap(),
        "refusal wrote ring bytes: {e}"
    );
    e
}

/// `n` one-SGE lists of `len` bytes each, back to back in `mr` (SRQ tests).
pub fn srq_sges(mr: &Mr, n: usize, len: u32) -> Vec<[Sge<'_>; 1]> {
    (0..n)
        .map(|k| [Sge::new(mr, k * len as usize, len).unwrap()])
        .collect()
}

/// One receive of each of `sges`, wr_ids from `base` on (SRQ tests).
pub fn recvs<'a>(sges: &'a [[Sge<'a>; 1]], base: u64) -> Vec<RecvWr<'a>> {
    sges.iter()
        .enumerate()
        .map(|(k, s)| RecvWr::new(base + k as u64, s))
        .collect()
}
