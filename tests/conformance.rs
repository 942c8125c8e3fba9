//! Runs the conformance suite (`rdma_direct::conformance`) as tests: one
//! test per case, each on every device present: always the sim (direct
//! path), plus each ibverbs device (verbs path), e.g. rxe0 inside the
//! soft-RoCE guest (`scripts/rxe-vm`).
//!
//! `RDMA_DIRECT_REQUIRE_DEVICE=name[,name...]` makes a missing device a failure
//! instead of a loud skip (CI sets it in the guest).

use rdma_direct::conformance::{cases, Outcome};
use rdma_direct::{Context, Mr, Pd, Qp};

/// Writes to the real stderr, past libtest's capture, so skips and
/// per-device results show in every run, not only failing ones.
fn loud(msg: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// The devices under test; says (once) what it skips and why.
fn devices() -> Vec<String> {
    let all = rdma_direct::list_devices().expect("list devices");
    let names: Vec<String> = all.iter().map(|d| d.name.clone()).collect();
    if let Ok(req) = std::env::var("RDMA_DIRECT_REQUIRE_DEVICE") {
        for r in req.split(',').filter(|s| !s.is_empty()) {
            assert!(
                names.iter().any(|n| n == r),
                "RDMA_DIRECT_REQUIRE_DEVICE names {r}, which is not present: {names:?}"
            );
        }
    }
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if names.len() == 1 {
            loud(format_args!(
                "conformance: SKIPPING the verbs path: no ibverbs device on this host (only the sim). \
                 scripts/test runs this suite again on rxe0 in a soft-RoCE guest."
            ));
        } else {
            loud(format_args!("conformance: devices under test: {names:?}"));
        }
    });
    names
}

/// Runs case `name` on every device; a failure on any device fails the test,
/// a skip is said out loud.
fn run_everywhere(name: &str) {
    let case = cases()
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no conformance case named {name}"));
    let mut failures = Vec::new();
    for dev in devices() {
        match case.run(&dev) {
            Ok(Outcome::Passed(note)) if note.is_empty() => {}
            Ok(Outcome::Passed(note)) => loud(format_args!("conformance: {dev}: {name}: {note}")),
            Ok(Outcome::Skipped(why)) => {
                loud(format_args!("conformance: {dev}: {name}: SKIPPED: {why}"))
            }
            Err(f) => failures.push(format!("{dev}: {f}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{name} failed:\n{}",
        failures.join("\n")
    );
}

macro_rules! conformance_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run_everywhere(stringify!($name));
            }
        )*

        /// Every case of the library's suite has its test here.
        #[test]
        fn every_case_is_a_test() {
            let listed = [$(stringify!($name)),*];
            for c in cases() {
                assert!(listed.contains(&c.name), "case {} has no test in tests/conformance.rs", c.name);
            }
        }
    };
}

conformance_tests!(
    th_write_4096_lands,
    th_read_lands,
    th_fetch_and_add,
    th_err_reset_reconnect,
    th_gather_and_scatter_sges,
    th_compare_and_swap,
    th_wrong_rkey_leaves_memory_alone,
    th_send_and_imm_land_in_receives,
    th_error_flushes_and_both_go_to_err,
    th_every_opcode_at_every_size,
    th_too_small_receive_fails_both_sides,
    th_rnr_waits_for_a_late_receive,
    th_rnr_without_a_receive_exhausts_retries,
    th_solicited_event_wakes_b,
    th_inline_at_the_limit_lands,
    th_unsignaled_stream_lands_in_order,
    write_beyond_the_remote_mr_is_remote_access_error,
    inline_gather_and_unsignaled_writes_wrap_the_ring,
    bad_input_is_refused_and_posts_nothing,
    latency_benchmarks_run,
    qp_outlives_its_context_handle,
    memory_of_another_protection_domain_is_refused,
    zero_length_write_checks_no_rkey,
    send_queue_full_refuses_the_whole_batch_until_completions_are_polled,
    rdma_read_lands_byte_for_byte_and_needs_remote_read,
    atomics_update_the_remote_word_and_return_the_old_value,
    the_16_bit_wqe_index_wraps,
    unsignaled_streams_never_fill_the_send_queue,
    bandwidth_benchmarks_run,
    one_to_max_sges_gather_and_scatter,
    inline_at_the_limit_and_one_over,
    post_before_rts_is_refused,
    rnr_retry_finite_and_forever,
    fence_and_solicited,
    completion_events_wake_the_waiter,
    modify_checks_attributes_by_name,
    short_rnr_timer_fails_fast,
    connect_checks_first_and_optional_attributes_apply,
    unsignaled_streams_never_exhaust_cq_credits,
    refused_receive_batches_post_nothing,
    out_of_range_qp_configs_are_refused,
    memory_pool_serves_without_registering,
    two_qps_share_one_cq,
    completion_modes_wait_for_each_completion,
    cq_credits_bound_what_is_outstanding,
    malformed_wqes_are_local_qp_operation_errors,
    misaligned_atomic_is_a_remote_invalid_request,
    cq_overrun_stops_the_cq_and_raises_an_event,
);

/// What the docs promise about threads, checked at compile time.
#[test]
fn thread_safety_is_as_documented() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Context>();
    send_sync::<Pd>();
    send_sync::<Mr>();
    send::<Qp>();
    send::<rdma_direct::SharedCq>();
}
