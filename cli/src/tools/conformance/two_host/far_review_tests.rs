//! Malformed and hostile commands against `Far::answer` (review of the
//! two-sided UD/UC/SRQ protocol): each must give an `Err`, never panic,
//! never hang, and never be taken as something it does not say.

use super::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

const SRQ: Build = Build::Srq {
    qps: 2,
    max_wr: 4,
    max_sge: 1,
};

/// Side B of `build` on the sim, connected to a side A that is kept alive.
fn with_far(build: Build, f: impl FnOnce(&mut Far, &Context, &Pd)) {
    let ctx = Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut a = make(&pd, build, false).unwrap();
    let mut b = make(&pd, build, true).unwrap();
    let (ia, ib) = (a.infos(build, QKEY_A), b.infos(build, QKEY_B));
    let _ah = a.connect(&pd, build, &ia, &ib).unwrap();
    b.connect(&pd, build, &ib, &ia).unwrap();
    let mut far = b.into_far(ia[0].qkey);
    f(&mut far, &ctx, &pd);
}

/// `line`'s answer, failing the test if it panicked.
fn ask(far: &mut Far, ctx: &Context, pd: &Pd, line: &str) -> Result<String, Failure> {
    catch_unwind(AssertUnwindSafe(|| far.answer(line, ctx, pd)))
        .unwrap_or_else(|_| panic!("`{line}` panicked instead of answering ERR"))
}

fn refused(far: &mut Far, ctx: &Context, pd: &Pd, line: &str) {
    let r = ask(far, ctx, pd, line);
    assert!(r.is_err(), "`{line}` was accepted: {r:?}");
}

#[test]
fn recvn_whose_wr_ids_overflow_is_refused_not_a_panic() {
    with_far(Build::Ud, |far, ctx, pd| {
        ask(far, ctx, pd, "REG 4096 1").unwrap();
        // wr_ids first..first + n do not fit a u64.
        refused(far, ctx, pd, "RECVN 18446744073709551615 2 0:0:64");
    });
}

#[test]
fn an_sge_with_a_junk_field_is_refused() {
    with_far(Build::Ud, |far, ctx, pd| {
        ask(far, ctx, pd, "REG 4096 1").unwrap();
        // Four fields, one not a number: not `<id>:<offset>:<len>`.
        refused(far, ctx, pd, "RECV 1 0:x:0:64");
        refused(far, ctx, pd, "RECVN 1 1 0:0:x:64");
    });
}

#[test]
fn an_sge_length_over_u32_is_refused_not_truncated() {
    with_far(Build::Ud, |far, ctx, pd| {
        ask(far, ctx, pd, "REG 4096 1").unwrap();
        // 2^32 + 64: truncated to 64 it fits the MR.
        refused(far, ctx, pd, "RECV 1 0:0:4294967360");
    });
}

#[test]
fn a_limit_over_u32_is_refused_not_truncated() {
    with_far(SRQ, |far, ctx, pd| {
        // 2^32 + 1: truncated to 1 it is a valid limit.
        refused(far, ctx, pd, "LIMIT 4294967297");
    });
}

#[test]
fn a_full_srq_refuses_one_more_receive() {
    with_far(SRQ, |far, ctx, pd| {
        ask(far, ctx, pd, "REG 4096 1").unwrap();
        ask(far, ctx, pd, "RECVN 0 4 0:0:64").unwrap();
        assert_eq!(ask(far, ctx, pd, "OUTSTANDING").unwrap(), "4");
        refused(far, ctx, pd, "RECV 9 0:0:64");
        refused(far, ctx, pd, "RECVN 10 1 0:0:64");
        assert_eq!(ask(far, ctx, pd, "OUTSTANDING").unwrap(), "4");
    });
}

#[test]
fn a_batch_over_the_srq_posts_nothing() {
    with_far(SRQ, |far, ctx, pd| {
        ask(far, ctx, pd, "REG 4096 1").unwrap();
        refused(far, ctx, pd, "RECVN 0 5 0:0:64");
        refused(far, ctx, pd, "RECVN 0 65536 0:0:64");
        refused(far, ctx, pd, "RECVN 0 65537 0:0:64");
        assert_eq!(ask(far, ctx, pd, "OUTSTANDING").unwrap(), "0");
    });
}

#[test]
fn bad_sges_are_refused() {
    with_far(SRQ, |far, ctx, pd| {
        ask(far, ctx, pd, "REG 64 1").unwrap();
        for line in [
            "RECV 1 1:0:8",  // no MR 1
            "RECV 1 0:60:8", // past the MR's end
            "RECV 1 0:18446744073709551615:8",
            "RECV 1 0:0:8,0:8:8", // two SGEs on an SRQ of max_sge 1
            "RECV 1",             // no SGE list: `-`? no: nothing given
            "RECV x 0:0:8",
            "RECV 1 0:0",
            "RECVN 1 2",
            "RECVN 1 2 9:0:8",
        ] {
            let r = ask(far, ctx, pd, line);
            if line == "RECV 1" {
                // A missing list is taken as `-` (no SGE): note it, accept either.
                eprintln!("`RECV 1` -> {r:?}");
                continue;
            }
            assert!(r.is_err(), "`{line}` was accepted: {r:?}");
        }
        ask(far, ctx, pd, "DEREG 0").unwrap();
        refused(far, ctx, pd, "RECV 1 0:0:8");
        refused(far, ctx, pd, "DEREG 0");
    });
}

#[test]
fn qp_indices_that_do_not_exist_are_refused() {
    with_far(SRQ, |far, ctx, pd| {
        for line in [
            "ERR 2",
            "ERR 18446744073709551615",
            "ERR -1",
            "ERR",
            "QUERY 2",
            "QUERY",
        ] {
            refused(far, ctx, pd, line);
        }
        assert_eq!(ask(far, ctx, pd, "QUERY 1").unwrap(), "Rts");
    });
    with_far(Build::Ud, |far, ctx, pd| {
        refused(far, ctx, pd, "ERR 1");
        refused(far, ctx, pd, "QUERY 1");
        for line in ["OUTSTANDING", "SRQN", "LIMIT 1"] {
            refused(far, ctx, pd, line); // no SRQ
        }
    });
}

#[test]
fn unknown_and_empty_commands_are_refused() {
    with_far(Build::Uc, |far, ctx, pd| {
        for line in [
            "", " ", "recv 1 -", "POLL", "POLL 1", "POLL x 1", "EVENT", "ECHO", "NOPE",
        ] {
            refused(far, ctx, pd, line);
        }
    });
}

#[test]
fn huge_counts_and_offsets_are_refused_or_bounded() {
    with_far(Build::Ud, |far, ctx, pd| {
        refused(far, ctx, pd, "REG 18446744073709551615 1");
        refused(far, ctx, pd, "REG 0 1");
        ask(far, ctx, pd, "REG 64 1").unwrap();
        refused(far, ctx, pd, "READ 0 18446744073709551615 8");
        refused(far, ctx, pd, "READ 0 0 18446744073709551615");
        refused(far, ctx, pd, "WRITE 0 18446744073709551615 00");
        let t = Instant::now();
        // Nothing to poll: a huge count returns at its (short) deadline.
        assert_eq!(
            ask(far, ctx, pd, "POLL 18446744073709551615 10").unwrap(),
            ""
        );
        assert_eq!(ask(far, ctx, pd, "POLL 0 0").unwrap(), "");
        assert_eq!(ask(far, ctx, pd, "EVENT 0").unwrap(), "-");
        assert!(t.elapsed() < Duration::from_secs(5));
    });
}

#[test]
fn echo_without_a_ud_qp_or_mr_is_refused_at_once() {
    with_far(SRQ, |far, ctx, pd| {
        ask(far, ctx, pd, "REG 64 1").unwrap();
        let t = Instant::now();
        refused(far, ctx, pd, "ECHO 0 0");
        assert!(t.elapsed() < Duration::from_secs(1));
    });
    with_far(Build::Ud, |far, ctx, pd| {
        let t = Instant::now();
        refused(far, ctx, pd, "ECHO 0 0"); // no MR 0
        refused(far, ctx, pd, "ECHO 0");
        assert!(t.elapsed() < Duration::from_secs(1));
    });
}

#[test]
fn echo_with_nothing_received_gives_up() {
    with_far(Build::Ud, |far, ctx, pd| {
        ask(far, ctx, pd, "REG 4096 1").unwrap();
        let t = Instant::now();
        refused(far, ctx, pd, "ECHO 0 0");
        assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    });
}
