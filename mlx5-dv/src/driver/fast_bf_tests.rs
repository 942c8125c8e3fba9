//! The BlueFlame-only posts (`SendQueue::write_segs_bf`, `ud_room`):
//! what `fast_tests`' proptests do not reach.

use super::*;

/// The BlueFlame-only posts (`write_segs_bf`, `ud_room`) refuse, writing
/// nothing, while a WQE posted and not rung precedes them (its doorbell,
/// `ring_doorbell`'s, would not be theirs); once rung they post again.
#[test]
fn bf_only_posts_refuse_behind_an_unrung_wqe() {
    let w = signaled_write(vec![]);
    let mut m = Mem::new(16);
    let mut sq = m.sq(16, 4);
    assert!(sq.limit_wqe_size(2));
    sq.set_gate(true);
    sq.set_ud_gate(true);
    assert!(w.post_gated_bf(&mut sq), "open, nothing pending");
    // Written and not rung: the next doorbell publishes it.
    let (op, f) = (opcode(w.op), w.flags());
    drop(
        sq.write_segs_gated(op, f, w.imm(), [w.data()], w.wr_id)
            .expect("open"),
    );
    let pending = state(&m, &sq);
    assert!(!w.post_gated_bf(&mut sq), "a WQE not rung precedes it");
    assert!(sq.ud_room().is_none(), "a WQE not rung precedes it");
    assert_eq!(state(&m, &sq), pending);
    sq.ring_doorbell();
    assert!(sq.ud_room().is_some(), "rung: open again");
    assert!(w.post_gated_bf(&mut sq), "rung: open again");
}
