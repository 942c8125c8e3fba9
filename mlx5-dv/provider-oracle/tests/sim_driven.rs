//! rdma-core's provider drives the sim (issue 27 item 5): libmlx5's
//! `mlx5_post_send` / `mlx5_post_recv` / `mlx5_post_srq_recv` write into
//! the sim's own rings and ring its doorbells (the doorbell record, then
//! the 8-byte doorbell or the BlueFlame copy into the QP's UAR page), the
//! sim executes what it finds, and `mlx5_poll_cq_v1` reads the sim's CQEs,
//! each also decoded by `mlx5_dv::cqe` from its slot and required to say
//! the same (`sim_driven::agree`). Cases: RDMA WRITE (SGEs, inline of
//! several SGEs, zero-length, an unsignaled list retired by the next CQE),
//! RDMA READ, SEND and SEND_IMM (zero-length, a zero-length SGE the
//! provider leaves out) into receives posted by `mlx5_post_recv`, and
//! WRITE_IMM consuming one; ATOMIC_CS and ATOMIC_FA; a UD datagram; SENDs
//! into an SRQ posted by `mlx5_post_srq_recv` across its WQEs' reuse, and
//! one into a receive too small; a bad rkey (REM_ACCESS_ERR, then every
//! later WR and the responder's receives flushed); the SQ and a CQ of
//! 128-byte CQEs wrapping many times (the BlueFlame copy's source too);
//! UC both ways over one CQ; WRITEs with the sim on its own thread
//! (no call into the sim: the provider's doorbell is all it gets); and
//! SEND_WITH_INV of a window B bound with libmlx5's `IBV_WR_BIND_MW`
//! (`IBV_WC_WITH_INV` and the rkey at B, the window free after it), and
//! one the sim refuses.
//!
//! Files: here the test and its totals; `sim_driven/common.rs` the
//! helpers, `rc.rs` the RC and UC cases, `other.rs` UD, SRQ and the
//! device thread, `send_inv.rs` SEND with invalidate.

use mlx5_provider_oracle::oracle_or_skip;

#[cfg(provider_oracle)]
#[path = "sim_driven/common.rs"]
mod common;
#[cfg(provider_oracle)]
#[path = "sim_driven/other.rs"]
mod other;
#[cfg(provider_oracle)]
#[path = "sim_driven/rc.rs"]
mod rc;
#[cfg(provider_oracle)]
#[path = "sim_driven/send_inv.rs"]
mod send_inv;

#[test]
fn provider_drives_the_sim() {
    if oracle_or_skip("provider_drives_the_sim") {
        #[cfg(provider_oracle)]
        all();
    }
}

#[cfg(provider_oracle)]
fn all() {
    use mlx5_provider_oracle::sim_driven::Rig;
    use std::time::Instant;
    let start = Instant::now();
    let mut totals = (0u64, 0u64, 0u64);
    let mut add = |name: &str, rig: Rig| {
        totals.0 += rig.sends;
        totals.1 += rig.cqes;
        totals.2 += rig.recvs;
        mlx5_provider_oracle::say(
            "provider_drives_the_sim",
            format_args!(
                "{name}: {} send WRs, {} receive WRs, {} CQEs",
                rig.sends, rig.recvs, rig.cqes
            ),
        );
    };
    add("rc (write, read, send, atomics)", rc::rc_ops());
    add("bad rkey", rc::bad_rkey());
    add("ud", other::ud());
    add("srq", other::srq());
    add("sq and cq wrap", rc::wrap());
    add("uc, one cq for two qps", rc::uc_shared_cq());
    add("device thread", other::device_thread());
    add("send with invalidate", send_inv::send_with_invalidate());
    add(
        "send with invalidate, refused",
        send_inv::send_with_invalidate_refused(),
    );
    mlx5_provider_oracle::say(
        "provider_drives_the_sim",
        format_args!(
            "the sim ran {} send WRs written by mlx5_post_send and {} receive WRs by \
             mlx5_post_recv / mlx5_post_srq_recv; mlx5_poll_cq_v1 polled {} CQEs; {:.1} ms",
            totals.0,
            totals.2,
            totals.1,
            start.elapsed().as_secs_f64() * 1e3
        ),
    );
}
