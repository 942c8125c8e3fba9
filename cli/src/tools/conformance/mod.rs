//! The conformance suite: one set of cases, written once against the
//! backend-neutral API, run on any device: the sim (direct path), rxe and
//! other ibverbs devices (verbs path), mlx5.
//!
//! `cargo test --test conformance` runs every case on every device present;
//! `rdma-direct conformance -d DEV` runs them from the CLI, one line per case.
//! A case passes, fails with a message naming what differed, or is skipped
//! with the reason (e.g. a case that needs the sim's test hook on rxe).

use rdma_direct::testing::QpHooks;
use rdma_direct::{
    Access, Completion, CompletionMode, Context, CqSizing, Error, Mr, Pd, Qp, QpAttr, QpConfig,
    QpState, RecvWr, RegRefusal, RemoteAddr, Rkey, SendWr, Sge, SharedCq, WcOpcode, WcStatus,
};
use std::time::{Duration, Instant};

/// What a case that did not fail found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Passed; the text says what was seen (may be empty).
    Passed(String),
    /// Not run on this device; the text says why.
    Skipped(String),
}

/// Why a case failed: what differed, and where in the suite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure(pub String);

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure(format!("unexpected error: {e}"))
    }
}

/// The result of one case on one device.
pub type CaseResult = Result<Outcome, Failure>;

/// One case of the suite.
#[derive(Clone, Copy)]
pub struct Case {
    /// Its name (a Rust identifier; the test of the same name runs it).
    pub name: &'static str,
    run: CaseFn,
}

#[derive(Clone, Copy)]
enum CaseFn {
    /// Builds what it needs on the device itself.
    OneSided(fn(&str) -> CaseResult),
    /// A two-sided case (`two_host`): here with side B a second QP in this
    /// process; `--peer` runs the same code against another host.
    TwoSided(&'static two_host::TwoHostCase),
}

impl Case {
    /// Runs the case on device `dev`. A panic inside the case is a failure.
    pub fn run(&self, dev: &str) -> CaseResult {
        let run = || match self.run {
            CaseFn::OneSided(f) => f(dev),
            CaseFn::TwoSided(f) => two_host::run_local(dev, f),
        };
        match std::panic::catch_unwind(run) {
            Ok(r) => r,
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                Err(Failure(format!("panicked: {msg}")))
            }
        }
    }
}

/// Totals of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

/// Runs every case whose name contains `filter` on `dev`, calling `report`
/// after each one.
pub fn run(dev: &str, filter: &str, mut report: impl FnMut(&Case, &CaseResult)) -> Summary {
    let mut s = Summary::default();
    for c in cases().iter().filter(|c| c.name.contains(filter)) {
        let r = c.run(dev);
        match &r {
            Ok(Outcome::Passed(_)) => s.passed += 1,
            Ok(Outcome::Skipped(_)) => s.skipped += 1,
            Err(_) => s.failed += 1,
        }
        report(c, &r);
    }
    s
}

macro_rules! check {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(Failure(format!(
                "{} (check `{}` at line {})",
                format!($($msg)+),
                stringify!($cond),
                line!()
            )));
        }
    };
    ($cond:expr) => {
        check!($cond, "failed")
    };
}

macro_rules! check_eq {
    ($left:expr, $right:expr, $($msg:tt)+) => {{
        let (l, r) = (&$left, &$right);
        if l != r {
            return Err(Failure(format!(
                "{}: got {:?}, want {:?} (line {})",
                format!($($msg)+),
                l,
                r,
                line!()
            )));
        }
    }};
    ($left:expr, $right:expr) => {
        check_eq!($left, $right, "`{}`", stringify!($left))
    };
}

mod async_waits;
mod benchmarks;
mod channel;
mod completions;
mod compression;
mod data;
mod dc;
mod dc_many;
mod device_errors;
mod dmabuf;
mod flow;
mod halves;
mod inline_recv;
mod masked_atomics;
mod memory;
mod odp;
mod refusals;
mod srq;
mod timestamps;
mod transports;
pub mod two_host;
mod windows;

use async_waits::*;
use benchmarks::*;
use channel::*;
use completions::*;
use compression::*;
use data::*;
use dc::*;
use dc_many::*;
use device_errors::*;
use dmabuf::*;
use flow::*;
use halves::*;
use inline_recv::*;
use masked_atomics::*;
use memory::*;
use odp::*;
use refusals::*;
use srq::*;
use timestamps::*;
use transports::*;
use windows::*;

fn passed(notes: Vec<String>) -> CaseResult {
    Ok(Outcome::Passed(notes.join("; ")))
}

fn skipped(why: impl Into<String>) -> CaseResult {
    Ok(Outcome::Skipped(why.into()))
}

struct Setup {
    _ctx: Context,
    pd: Pd,
    a: Qp,
    b: Qp,
}

fn setup(dev: &str) -> Result<Setup, Failure> {
    setup_with(
        dev,
        QpConfig {
            max_send_wr: 64,
            max_send_sge: 4,
            max_inline: 128,
            ..QpConfig::default()
        },
    )
}

fn setup_with(dev: &str, cfg: QpConfig) -> Result<Setup, Failure> {
    let ctx = Context::open(dev).map_err(|e| Failure(format!("open {dev}: {e}")))?;
    let pd = ctx.alloc_pd()?;
    let (a, b) = pd
        .create_connected_pair(&cfg)
        .map_err(|e| Failure(format!("connect on {dev}: {e}")))?;
    Ok(Setup {
        _ctx: ctx,
        pd,
        a,
        b,
    })
}

/// How long a case waits for a completion before it fails.
const COMPLETION_TIMEOUT: Duration = Duration::from_secs(20);

fn poll_one(qp: &mut Qp) -> Result<Completion, Failure> {
    Ok(poll_until(qp, 1)?[0])
}

/// A QP's own CQ or a shared one, as [`poll_until`] polls it.
trait Polled {
    fn poll_cq(&mut self, out: &mut [Completion]) -> rdma_direct::Result<usize>;
}

impl Polled for Qp {
    fn poll_cq(&mut self, out: &mut [Completion]) -> rdma_direct::Result<usize> {
        self.poll(out)
    }
}

impl Polled for SharedCq {
    fn poll_cq(&mut self, out: &mut [Completion]) -> rdma_direct::Result<usize> {
        self.poll(out)
    }
}

/// Polls a QP's own CQ or a shared one until `want` completions came
/// (never taking more), or fails after `COMPLETION_TIMEOUT`.
fn poll_until<C: Polled>(cq: &mut C, want: usize) -> Result<Vec<Completion>, Failure> {
    let mut got = Vec::new();
    let deadline = Instant::now() + COMPLETION_TIMEOUT;
    let mut wc = [Completion::default(); 16];
    while got.len() < want {
        let room = (want - got.len()).min(wc.len());
        let n = cq.poll_cq(&mut wc[..room])?;
        got.extend_from_slice(&wc[..n]);
        if n == 0 {
            check!(
                Instant::now() < deadline,
                "{} of {want} completions within {COMPLETION_TIMEOUT:?}",
                got.len()
            );
            std::thread::yield_now();
        }
    }
    Ok(got)
}

/// Nothing completes within 50 ms (what a refused post must leave behind).
fn nothing_completes(qp: &mut Qp) -> Result<(), Failure> {
    std::thread::sleep(Duration::from_millis(50));
    let mut wc = [Completion::default(); 4];
    let n = qp.poll(&mut wc)?;
    check_eq!(n, 0, "completions of refused WRs: {:?}", &wc[..n]);
    Ok(())
}

fn remote(mr: &Mr, offset: u64) -> RemoteAddr {
    RemoteAddr {
        addr: mr.addr() + offset,
        rkey: mr.rkey(),
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn contents(mr: &Mr) -> Result<Vec<u8>, Failure> {
    let mut v = vec![0; mr.len()];
    mr.read(0, &mut v)?;
    Ok(v)
}

fn read_u64(mr: &Mr, off: usize) -> Result<u64, Failure> {
    let mut b = [0u8; 8];
    mr.read(off, &mut b)?;
    Ok(u64::from_ne_bytes(b))
}

/// The operations the size matrix runs, with a name for messages.
const SIZED_OPS: [&str; 5] = ["WRITE", "WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM", "READ"];

/// What the send queue holds, for showing that a refused post wrote
/// nothing: ring bytes and doorbell record on the direct path; `None` on
/// the verbs path (the provider owns the ring).
fn ring_snapshot(qp: &Qp) -> Option<Vec<u8>> {
    qp.sq_snapshot()
}

macro_rules! case {
    ($f:ident) => {
        Case {
            name: stringify!($f),
            run: CaseFn::OneSided($f),
        }
    };
}

/// Every case, in the order the CLI runs them.
pub fn cases() -> &'static [Case] {
    static ALL: std::sync::OnceLock<Vec<Case>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        let mut v = ONE_SIDED.to_vec();
        v.extend(two_host::two_host_cases().iter().map(|c| Case {
            name: c.name,
            run: CaseFn::TwoSided(c),
        }));
        v
    })
}

const ONE_SIDED: &[Case] = &[
    case!(write_beyond_the_remote_mr_is_remote_access_error),
    case!(inline_gather_and_unsignaled_writes_wrap_the_ring),
    case!(bad_input_is_refused_and_posts_nothing),
    case!(latency_benchmarks_run),
    case!(qp_outlives_its_context_handle),
    case!(memory_of_another_protection_domain_is_refused),
    case!(zero_length_write_checks_no_rkey),
    case!(send_queue_full_refuses_the_whole_batch_until_completions_are_polled),
    case!(rdma_read_lands_byte_for_byte_and_needs_remote_read),
    case!(atomics_update_the_remote_word_and_return_the_old_value),
    case!(masked_compare_and_swap_hits_and_misses),
    case!(masked_fetch_and_add_stops_carries_at_field_boundaries),
    case!(masked_atomics_misaligned_or_misshapen_are_refused),
    case!(the_16_bit_wqe_index_wraps),
    case!(unsignaled_streams_never_fill_the_send_queue),
    case!(bandwidth_benchmarks_run),
    case!(one_to_max_sges_gather_and_scatter),
    case!(inline_at_the_limit_and_one_over),
    case!(post_before_rts_is_refused),
    case!(rnr_retry_finite_and_forever),
    case!(fence_and_solicited),
    case!(completion_events_wake_the_waiter),
    case!(modify_checks_attributes_by_name),
    case!(short_rnr_timer_fails_fast),
    case!(connect_checks_first_and_optional_attributes_apply),
    case!(unsignaled_streams_never_exhaust_cq_credits),
    case!(refused_receive_batches_post_nothing),
    case!(out_of_range_qp_configs_are_refused),
    case!(memory_pool_serves_without_registering),
    case!(two_qps_share_one_cq),
    case!(completion_modes_wait_for_each_completion),
    case!(cq_credits_bound_what_is_outstanding),
    case!(malformed_wqes_are_local_qp_operation_errors),
    case!(misaligned_atomic_is_a_remote_invalid_request),
    case!(cq_overrun_stops_the_cq_and_raises_an_event),
    case!(a_vec_is_a_local_sge_and_a_remote_target),
    case!(an_anonymous_mmap_is_a_local_sge_and_a_remote_target),
    case!(a_tmpfs_file_mapping_is_a_local_sge_and_a_remote_target),
    case!(a_hugetlbfs_mapping_is_a_local_sge_and_a_remote_target),
    case!(a_receive_is_read_in_place),
    case!(a_dropped_in_flight_mr_goes_after_its_completion),
    case!(a_dropped_remote_target_refuses_the_next_write),
    case!(local_write_on_read_only_memory_is_refused),
    case!(posted_receives_hold_only_the_mr_they_name),
    case!(srq_scatters_a_send_over_two_sges),
    case!(one_srq_feeds_four_qps_on_one_cq),
    case!(srq_limit_event_is_raised_once_then_rearmed),
    case!(out_of_order_receive_completions_on_rq_and_srq),
    case!(a_qp_on_an_srq_in_err_leaves_the_srq_to_the_others),
    case!(srq_refusals_post_nothing),
    case!(an_srq_receive_holds_only_the_mr_it_names),
    case!(a_reset_gives_unpolled_srq_receives_back),
    case!(an_error_receive_gives_its_srq_wqe_back),
    case!(a_qp_on_an_srq_ignores_its_receive_caps),
    case!(uc_write_lands_and_read_is_refused),
    case!(uc_drops_what_the_responder_cannot_take),
    case!(uc_transitions_check_their_own_attributes),
    case!(ud_send_lands_after_the_grh_slot),
    case!(ud_drops_and_refusals),
    case!(ud_receive_too_small),
    case!(an_ah_from_a_receive_answers_its_sender),
    case!(ud_transitions_check_their_own_attributes),
    case!(transport_benchmarks_run),
    case!(halves_post_from_four_threads_while_the_owner_polls),
    case!(halves_of_qps_on_a_shared_cq),
    case!(split_refusals_and_join),
    case!(a_half_waits_for_room_until_the_owner_polls),
    case!(async_waits_sleep_until_the_event),
    case!(no_completion_event_is_lost),
    case!(a_stale_consumer_index_at_arm_time),
    case!(many_cqs_on_one_channel),
    case!(the_send_queue_drains_with_an_event),
    case!(a_dropped_wait_leaves_the_buffer_with_the_qp),
    case!(port_events_stream_when_the_link_goes_down_and_up),
    case!(cqe_compression_sessions_deliver_every_completion_once),
    case!(completion_timestamps_are_present_and_in_order),
    case!(inline_receive_sends_of_1_to_65_bytes_land_whole),
    case!(inline_receive_reads_of_1_to_65_bytes_land_whole),
    case!(inline_receive_two_sges_and_a_receive_too_small),
    case!(dc_every_operation_lands),
    case!(dc_a_wrong_key_fails_the_dci_and_delivers_nothing),
    case!(dc_an_unknown_dct_fails_the_dci_and_delivers_nothing),
    case!(dc_dct_number_zero_fails_the_dci_and_delivers_nothing),
    case!(dc_no_dct_number_before_rtr),
    case!(dc_a_failed_dci_is_refused_until_reset_then_reused),
    case!(dc_dcis_on_one_cq_with_interleaved_errors),
    case!(dc_one_dct_serves_64_dcis),
    case!(dmabuf_writes_and_reads_reach_the_buffer_at_the_iova),
    case!(dmabuf_writes_outside_the_iova_range_are_refused),
    case!(dmabuf_iova_and_offset_apart_in_a_page_are_refused_first),
    case!(dc_sends_into_the_srq_in_any_order),
    case!(window_read_and_write_land_in_its_range),
    case!(window_type_2_refuses_after_a_local_inv),
    case!(window_type_2_refuses_after_a_send_with_invalidate),
    case!(window_type_1_refuses_after_a_zero_length_bind),
    case!(window_grants_less_than_its_mr),
    case!(window_bind_on_an_mr_without_mw_bind_is_refused),
    case!(window_refuses_inside_the_mr_outside_its_range),
    case!(window_refuses_beyond_the_mr),
    case!(window_type_2_bind_fenced_behind_a_write_completes_in_order),
    case!(odp_mr_takes_every_operation_in_and_out),
    case!(odp_advise_then_access),
    case!(odp_implicit_mr_reaches_memory_by_address),
    case!(odp_srq_receives_every_message_once_through_faults),
];
