//! What the DC refusal and fault tests share (`tests/dc_refusals.rs`,
//! `tests/dc_faults.rs`): a DCT on an SRQ and a DCI in RTS of one PD, the
//! DCI's ring as bytes, and a check that it still posts cleanly.
#![allow(dead_code)]

use super::sim::*;
use rdma_direct::testing::QpHooks;
use rdma_direct::*;

pub const KEY: u64 = 0x0123_4567_89ab_cdef;

pub fn dct_cfg() -> QpConfig {
    QpConfig {
        qp_type: QpType::Dct,
        dc_key: KEY,
        ..QpConfig::default()
    }
}

pub fn dci_cfg() -> QpConfig {
    QpConfig {
        qp_type: QpType::Dci,
        max_send_wr: 16,
        max_send_sge: 2,
        max_inline: 64,
        ..QpConfig::default()
    }
}

pub struct Dc {
    pub e: Env,
    pub srq: Srq,
    pub dct: Qp,
    pub dci: Qp,
    pub ah: Ah,
}

pub fn dc_with(cfg: &QpConfig) -> Dc {
    let e = env();
    let srq = e.pd.create_srq(16, 1).unwrap();
    let mut dct = e.pd.create_qp_on_srq(&dct_cfg(), &srq).unwrap();
    dct.ready_dct().unwrap();
    let mut dci = e.pd.create_qp(cfg).unwrap();
    dci.ready_dci().unwrap();
    let ah = e.pd.create_ah(&dci.av_to(&dct.endpoint())).unwrap();
    Dc {
        e,
        srq,
        dct,
        dci,
        ah,
    }
}

pub fn dc() -> Dc {
    dc_with(&dci_cfg())
}

pub fn dest<'a>(ah: &'a Ah, dct: &Qp) -> DcDest<'a> {
    DcDest {
        ah,
        dctn: dct.dct_number().unwrap(),
        key: KEY,
    }
}

pub fn ring(q: &Qp) -> Vec<u8> {
    q.sq_snapshot().unwrap()
}

/// The DCI still works and nothing refused went out: the next signaled
/// WR is the first completion.
pub fn still_clean(d: &mut Dc, id: u64) {
    let s = [Sge::new(&d.e.src, 0, 8).unwrap()];
    let to = dest(&d.ah, &d.dct);
    d.dci
        .post_dc(
            &to,
            &[SendWr::rdma_write(id, &s, remote(&d.e.dst, 0)).signaled()],
        )
        .unwrap();
    let c = poll_n(&mut d.dci, 1);
    assert_eq!((c[0].wr_id, c[0].status), (id, WcStatus::SUCCESS), "{c:?}");
    assert!(drain(&mut d.dci).is_empty());
}

// ---------------------------------------------------------------------
