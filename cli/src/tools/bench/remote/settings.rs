//! The settings line both sides of a two-host run swap (`settings_line`)
//! and what differs between two (`settings_mismatch`).

use super::*;

/// The settings both sides of a two-host run must share, as one line for
/// [`rdma_direct::exchange::swap_line`]: the test's name, then `FLAG=VALUE`
/// for `-s` (bytes; 8 for the atomics), `-n`, `-t`, `-Q`, `-l`, `-q`, `-D`
/// (seconds, or `none`), `-A`, `-R` (`yes`/`no`), `-c` (`RC`, `UC`, `UD`,
/// `DC`) and `--use-srq`
/// (`yes`/`no`), flags spelled as the
/// CLI spells them. [`settings_mismatch`] compares two.
pub fn settings_line(test: AnyTest, cfg: &BwConfig) -> String {
    let lat = &cfg.lat;
    let size = if test.moves_8_bytes() { 8 } else { lat.size };
    let duration = cfg
        .duration
        .or(lat.duration)
        .map_or("none".to_string(), |d| d.as_secs().to_string());
    let atomic = lat.atomic.name();
    format!(
        "{} -s={size} -n={} -t={} -Q={} -l={} -q={} -D={duration} -A={atomic} -R={} -c={} --use-srq={}",
        test.name(),
        lat.iters,
        cfg.tx_depth,
        cfg.cq_mod,
        cfg.post_list,
        cfg.qps,
        if lat.rdma_cm { "yes" } else { "no" },
        super::super::conn_name(lat.qp_type),
        if lat.use_srq { "yes" } else { "no" }
    )
}

/// What differs between this side's [`settings_line`] and the peer's, in
/// the CLI's words (`-s 128 here, -s 64 on the peer; -R here, no -R on the
/// peer`), or `None` when they agree. A line that is not a settings line
/// (another version of this tool) is said to be one.
pub fn settings_mismatch(mine: &str, theirs: &str) -> Option<String> {
    if mine == theirs {
        return None;
    }
    fn parse(line: &str) -> Option<(&str, Vec<(&str, &str)>)> {
        let mut it = line.split(' ');
        let test = it.next()?;
        let pairs = it
            .map(|kv| kv.split_once('='))
            .collect::<Option<Vec<_>>>()?;
        Some((test, pairs))
    }
    fn spell(flag: &str, value: &str) -> String {
        match (flag, value) {
            ("-R" | "--use-srq", "yes") => flag.into(),
            ("-R" | "--use-srq", _) | ("-D", "none") => format!("no {flag}"),
            _ => format!("{flag} {value}"),
        }
    }
    let (Some((my_test, my)), Some((their_test, their))) = (parse(mine), parse(theirs)) else {
        return Some(format!(
            "the peer's settings line {theirs:?} is not one this version reads: run the same rdma-direct on both sides"
        ));
    };
    let mut diffs = Vec::new();
    if my_test != their_test {
        diffs.push(format!("{my_test} here, {their_test} on the peer"));
    }
    for &(flag, v) in &my {
        match their.iter().find(|(f, _)| *f == flag) {
            Some(&(_, w)) if w == v => {}
            Some(&(_, w)) => diffs.push(format!(
                "{} here, {} on the peer",
                spell(flag, v),
                spell(flag, w)
            )),
            None => diffs.push(format!(
                "{} here, the peer does not say {flag}",
                spell(flag, v)
            )),
        }
    }
    if diffs.is_empty() {
        // The same pairs in another order or with more: another version.
        return Some(format!(
            "the peer's settings line {theirs:?} is not this side's {mine:?}: run the same rdma-direct on both sides"
        ));
    }
    Some(format!("the two sides differ: {}", diffs.join("; ")))
}
