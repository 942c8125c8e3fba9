//! Scatter to CQE in the sim, byte for byte: where the data of a small
//! SEND lies in the CQ slot (`MLX5_INLINE_SCATTER_32`: bytes 0..32 of the
//! 64-byte CQE; `MLX5_INLINE_SCATTER_64`: the first half of a 128-byte
//! slot), that nothing is DMAed, and the creation-time rules.

use super::*;
use crate::cqe::{INLINE_SCATTER_32, INLINE_SCATTER_64};
use crate::driver::ReceiveQueue;

/// A SEND of `n` bytes from QP a to QP b, b with responder scatter, on a
/// CQ of `cqe_size`-byte CQEs: the receive CQE's slot bytes, and the
/// receive buffer (which started as 0xee).
fn send_and_read_slot(cqe_size: u32, n: usize) -> (Vec<u8>, Vec<u8>) {
    let dev = Device::new();
    let mk = || {
        let cq = dev.create_cq(16, cqe_size).unwrap();
        let qp = dev.create_qp_rq(PD, &cq, 8, 4, 16).unwrap();
        (qp, cq)
    };
    let ((qa, _ca), (qb, cb)) = (mk(), mk());
    assert_eq!(qb.set_scatter_to_cqe(true, false), Ok((true, false)));
    for (x, y) in [(&qa, &qb), (&qb, &qa)] {
        x.to_init(Access::QP_ALL).unwrap();
        x.to_rtr(y.qpn()).unwrap();
        x.to_rts().unwrap();
    }
    // SAFETY: as in `pair`.
    let mut sq = unsafe { SendQueue::new(&qa.dv(), qa.qpn(), 64, 4) }.unwrap();
    // SAFETY: a description from a live sim object the test keeps longer
    // than the driver; the driver touches ring memory only when called.
    let mut rq = unsafe { ReceiveQueue::new(&qb.dv()) }.unwrap();
    let mut buf = vec![0xeeu8; 256];
    // SAFETY: the Vec outlives all device work on it, done only inside
    // `dev.process()` calls while it lives.
    let k = unsafe { dev.reg_mr(PD, buf.as_mut_ptr(), 256, Access::LOCAL_WRITE) }.unwrap();
    for (i, b) in buf[..n].iter_mut().enumerate() {
        *b = i as u8 + 1;
    }
    let seg = |off: u64, len: u32| DataSeg {
        addr: buf.as_ptr() as u64 + off,
        len,
        lkey: k.lkey,
    };
    rq.post(&[seg(128, 128)], 1).unwrap();
    rq.ring_doorbell();
    let sge = [seg(0, n as u32)];
    sq.post(&send_wqe(&sge), 2).unwrap();
    sq.ring_doorbell();
    dev.process();
    let d = cb.dv();
    let mut slot = vec![0u8; cqe_size as usize];
    // SAFETY: slot 0 of the live CQ's buffer, written by the device before
    // `process` returned (nothing writes it now).
    unsafe { core::ptr::copy_nonoverlapping(d.buf.cast::<u8>(), slot.as_mut_ptr(), slot.len()) };
    let recv = buf[128..].to_vec();
    (slot, recv)
}

#[test]
fn a_send_of_32_bytes_lies_in_the_64_byte_cqe_and_is_not_dmaed() {
    let (slot, recv) = send_and_read_slot(64, 32);
    let want: Vec<u8> = (1..=32).collect();
    assert_eq!(&slot[..32], &want[..], "bytes 0..32 of the CQE");
    assert_eq!(slot[63] & 0x0c, INLINE_SCATTER_32);
    assert_eq!(slot[63] >> 4, crate::prm::CqeOpcode::RESP_SEND.0);
    assert_eq!(u32::from_be_bytes(slot[44..48].try_into().unwrap()), 32);
    assert!(recv.iter().all(|&b| b == 0xee), "nothing DMAed");
}

#[test]
fn a_send_of_64_bytes_lies_before_the_cqe_of_a_128_byte_slot() {
    let (slot, recv) = send_and_read_slot(128, 64);
    let want: Vec<u8> = (1..=64).collect();
    assert_eq!(&slot[..64], &want[..], "the slot's first half");
    assert_eq!(slot[127] & 0x0c, INLINE_SCATTER_64);
    assert_eq!(
        u32::from_be_bytes(slot[64 + 44..64 + 48].try_into().unwrap()),
        64
    );
    assert!(recv.iter().all(|&b| b == 0xee), "nothing DMAed");
}

#[test]
fn a_send_of_33_bytes_on_64_byte_cqes_is_dmaed() {
    let (slot, recv) = send_and_read_slot(64, 33);
    assert_eq!(slot[63] & 0x0c, 0, "no scatter bits");
    let want: Vec<u8> = (1..=33).collect();
    assert_eq!(&recv[..33], &want[..]);
    assert!(recv[33..].iter().all(|&b| b == 0xee));
}

/// Scatter is a creation attribute: refused outside RESET; UD takes
/// neither side, UC the responder only.
#[test]
fn scatter_to_cqe_is_set_in_reset_and_follows_the_transport() {
    let dev = Device::new();
    let cq = dev.create_cq(16, 64).unwrap();
    let of = |t| dev.create_qp_of(t, PD, &cq, 8, 4, 16, None).unwrap();
    assert_eq!(
        of(QpType::Rc).set_scatter_to_cqe(true, true),
        Ok((true, true))
    );
    assert_eq!(
        of(QpType::Uc).set_scatter_to_cqe(true, true),
        Ok((true, false))
    );
    assert_eq!(
        of(QpType::Ud).set_scatter_to_cqe(true, true),
        Ok((false, false))
    );
    let q = of(QpType::Rc);
    q.to_init(Access::QP_ALL).unwrap();
    assert!(matches!(
        q.set_scatter_to_cqe(true, true),
        Err(SimError::BadTransition { .. })
    ));
    assert_eq!(q.scatter_to_cqe(), (false, false), "nothing changed");
}
