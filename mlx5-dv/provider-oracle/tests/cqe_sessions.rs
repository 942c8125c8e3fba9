//! Compressed CQE sessions (basic layout, issue 29 item 2) against
//! libmlx5's `mlx5_poll_cq_v1`: every completion of a session written
//! with `mini_cqe::write_session` and decompressed by our expansion is
//! compared with libmlx5's parse of the equivalent full CQE, built field
//! by field from the generated minis (`mlx5_provider_oracle::cqe::sessions`).

use mlx5_provider_oracle::oracle_or_skip;

#[cfg(provider_oracle)]
#[test]
fn decompressed_sessions_read_as_libmlx5_reads_the_equivalent_full_cqes() {
    use mlx5_provider_oracle::cqe::sessions::{run_sessions, SITUATIONS};
    use mlx5_provider_oracle::gen::Rng;
    const NAME: &str = "decompressed_sessions_read_as_libmlx5_reads_the_equivalent_full_cqes";
    if !oracle_or_skip(NAME) {
        return;
    }
    mlx5_provider_oracle::ffi::check_abi().unwrap();
    let n = mlx5_provider_oracle::cases(2_000);
    let mut runner = proptest::test_runner::TestRunner::new(proptest::prelude::ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    });
    let totals = std::cell::RefCell::new((0u32, 0u64, 0u64, 0u64, [0u64; SITUATIONS.len()]));
    let t0 = std::time::Instant::now();
    let r = runner.run(&proptest::prelude::any::<u64>(), |seed| {
        let st = run_sessions(&mut Rng(seed))
            .map_err(|e| proptest::test_runner::TestCaseError::fail(format!("seed {seed}: {e}")))?;
        let mut t = totals.borrow_mut();
        (t.0, t.1, t.2, t.3) = (t.0 + 1, t.1 + st.sessions, t.2 + st.cqes, t.3 + st.polls);
        for (a, b) in t.4.iter_mut().zip(st.seen) {
            *a += b;
        }
        Ok(())
    });
    let (cases, sessions, cqes, polls, seen) = *totals.borrow();
    mlx5_provider_oracle::say(
        NAME,
        format_args!(
            "{cases} cases: {sessions} compressed sessions, {cqes} completions ({polls} polls) \
             decompressed and compared with mlx5_poll_cq_v1's parse of the full CQEs, in {:.1} s",
            t0.elapsed().as_secs_f64()
        ),
    );
    let counts: Vec<String> = SITUATIONS
        .iter()
        .zip(seen)
        .map(|(s, k)| format!("{s}: {k}"))
        .collect();
    mlx5_provider_oracle::say(NAME, format_args!("{}", counts.join("; ")));
    if let Err(e) = r {
        panic!("{e}");
    }
    let missing: Vec<&str> = SITUATIONS
        .iter()
        .zip(seen)
        .filter(|(_, k)| *k == 0)
        .map(|(s, _)| *s)
        .collect();
    if n >= 1_000 {
        assert!(missing.is_empty(), "never compared: {missing:?}");
    } else if !missing.is_empty() {
        mlx5_provider_oracle::say(NAME, format_args!("{n} cases met no {missing:?}"));
    }
}

#[cfg(not(provider_oracle))]
#[test]
fn decompressed_sessions_read_as_libmlx5_reads_the_equivalent_full_cqes() {
    assert!(!oracle_or_skip(
        "decompressed_sessions_read_as_libmlx5_reads_the_equivalent_full_cqes"
    ));
}
