//! `rdma-direct compare` as a user meets it: its JSON and SVG on a
//! machine with only the sim, the guest's recipe, and `--from-json`
//! refusing bad and absurd input.

#[macro_use]
#[path = "support/bin.rs"]
mod support;
use support::*;

#[test]
fn compare_writes_json_and_svg_with_only_the_sim() {
    let dir = std::env::temp_dir().join(format!("rdma-direct-compare-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, svg) = (dir.join("c.json"), dir.join("c.svg"));
    let Some(o) = run(&[
        "compare",
        "-d",
        "sim",
        "--tests",
        "write_lat,write_bw",
        "--sizes",
        "2,4096",
        "--lat-iters",
        "50",
        "--bw-iters",
        "100",
        "--json",
        json.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]) else {
        return;
    };
    assert!(o.status.success(), "compare failed: {}", stderr(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.starts_with("| test | bytes | device |"), "{table}");
    assert_eq!(
        table
            .lines()
            .filter(|l| l.contains("| sim | direct |"))
            .count(),
        4,
        "{table}"
    );
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(rows.len(), 4);
    assert!(rows
        .iter()
        .filter(|r| r["test"] == "write_lat")
        .all(|r| r["t_typical_us"].as_f64().is_some_and(|t| t > 0.0)));
    assert!(rows
        .iter()
        .filter(|r| r["test"] == "write_bw")
        .all(|r| r["msg_rate_mpps"].as_f64().is_some_and(|m| m > 0.0)));
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
    for label in [
        "t_typical [µs]",
        "message rate [million messages/s]",
        "write_lat sim/direct",
        "write_bw sim/direct",
    ] {
        assert!(s.contains(label), "the SVG lacks {label:?}");
    }
    assert!(s.contains("<polyline"), "the SVG has no lines");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The README's recipe for getting compare's files out of the soft-RoCE
/// guest, run on the host without the guest: inside `sh -c`, compare's
/// table goes to stderr and only the JSON to stdout (redirected into
/// compare.json), then `compare --from-json` renders the SVG, which must
/// parse as XML with an `<svg>` root. Before, the recipe `cat`ed the SVG
/// into the same stream as the table, and the file began with `| test |`.
#[test]
fn compare_recipe_for_the_guest_gives_json_and_an_svg_that_parses() {
    let Some(bin) = bin() else { return };
    let dir = std::env::temp_dir().join(format!("rdma-direct-recipe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (inner_json, inner_svg) = (dir.join("c.json"), dir.join("c.svg"));
    let (json, svg) = (dir.join("compare.json"), dir.join("compare.svg"));
    let guest_part = format!(
        "\"$0\" compare -d sim --tests write_lat,atomic_lat,write_bw --sizes 2,64 \
         --lat-iters 50 --bw-iters 100 --json {} --svg {} >&2 && cat {}",
        inner_json.display(),
        inner_svg.display(),
        inner_json.display()
    );
    let o = Command::new("sh")
        .args(["-c", &guest_part, bin])
        .output()
        .expect("run sh");
    assert!(o.status.success(), "the guest part failed: {}", stderr(&o));
    assert!(
        stderr(&o).contains("| write_lat | 2 | sim | direct |"),
        "the table is not on stderr: {}",
        stderr(&o)
    );
    std::fs::write(&json, &o.stdout).unwrap();
    let rows: Vec<serde_json::Value> =
        serde_json::from_slice(&o.stdout).expect("stdout is compare's JSON alone");
    assert_eq!(
        rows.len(),
        5,
        "write_lat and write_bw at 2 sizes, atomic_lat at 8 B: {rows:?}"
    );
    let Some(o) = run(&[
        "compare",
        "--from-json",
        json.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]) else {
        return;
    };
    assert!(o.status.success(), "--from-json failed: {}", stderr(&o));
    assert!(o.stdout.is_empty(), "--from-json printed a table");
    for file in [&svg, &inner_svg] {
        let text = std::fs::read_to_string(file).unwrap();
        let doc = roxmltree::Document::parse(&text)
            .unwrap_or_else(|e| panic!("{} is not XML: {e}", file.display()));
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        let texts: Vec<&str> = doc
            .descendants()
            .filter_map(|n| n.is_text().then(|| n.text()).flatten())
            .map(str::trim)
            .collect();
        for label in [
            "t_typical [µs]",
            "message rate [million messages/s]",
            "message size [bytes; Ki = 1024]",
            "write_lat sim/direct",
            "atomic_lat sim/direct",
            "write_bw sim/direct",
        ] {
            assert!(
                texts.contains(&label),
                "{} lacks the text {label:?}",
                file.display()
            );
        }
    }
    // Rendered from the JSON, the plot is the one the run drew.
    assert_eq!(
        std::fs::read_to_string(&svg).unwrap(),
        std::fs::read_to_string(&inner_svg).unwrap()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--from-json` runs nothing, so the run's flags are refused beside it,
/// and a file that is not compare's JSON is a clear error (exit 2), with
/// no SVG written.
#[test]
fn compare_from_json_refuses_bad_input() {
    let dir = std::env::temp_dir().join(format!("rdma-direct-fromjson-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("out.svg");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let good_row = r#"{"test":"write_lat","bytes":2,"device":"sim","data_path":"direct",
        "t_typical_us":1.0,"t_avg_us":1.0,"p99_us":2.0,"bw_average_mb_per_s":null,
        "msg_rate_mpps":null,"post_ns_per_wr":50.0,"poll_ns_per_cqe":60.0}"#;
    let cases: Vec<(String, &str)> = vec![
        (write("table.json", "| test | bytes |\n"), "not JSON"),
        (write("object.json", "{}"), "not a JSON array"),
        (write("empty.json", "[]"), "no rows"),
        (
            write(
                "test.json",
                &format!("[{}]", good_row.replace("write_lat", "write_latency")),
            ),
            "row 0: unknown test \"write_latency\"",
        ),
        (
            write(
                "kind.json",
                &format!(
                    "[{good_row},{}]",
                    good_row.replace("\"write_lat\"", "\"write_bw\"")
                ),
            ),
            "row 1: write_bw needs bw_average_mb_per_s and msg_rate_mpps",
        ),
        (
            write(
                "path.json",
                &format!("[{}]", good_row.replace("direct", "dv")),
            ),
            "row 0: data_path \"dv\"",
        ),
        (
            dir.join("missing.json").to_str().unwrap().to_string(),
            "read ",
        ),
    ];
    for (file, want) in &cases {
        let Some(o) = run(&[
            "compare",
            "--from-json",
            file,
            "--svg",
            svg.to_str().unwrap(),
        ]) else {
            return;
        };
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{file}: exit {:?}, {e}", o.status);
        assert!(e.contains(want), "{file}: stderr {e:?} lacks {want:?}");
        assert!(!svg.exists(), "{file}: an SVG was written");
    }
    let good = write("good.json", &format!("[{good_row}]"));
    for extra in [
        &["-d", "sim"][..],
        &["--tests", "write_lat"],
        &["--json", "x.json"],
    ] {
        let mut args = vec![
            "compare",
            "--from-json",
            &good,
            "--svg",
            svg.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let Some(o) = run(&args) else { return };
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
        assert!(!svg.exists(), "{extra:?}: an SVG was written");
    }
    let Some(o) = run(&["compare", "--from-json", &good, "--svg", &good]) else {
        return;
    };
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("are both"), "{}", stderr(&o));
    let Some(o) = run(&[
        "compare",
        "--from-json",
        &good,
        "--svg",
        svg.to_str().unwrap(),
    ]) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(roxmltree::Document::parse(&std::fs::read_to_string(&svg).unwrap()).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

/// From the break-it review: `--from-json` refuses values a run cannot
/// measure (1e308 used to loop for ever drawing decades of ticks) and an
/// output that is its input however spelled (`./x`, a symbolic link).
#[test]
fn compare_from_json_refuses_absurd_values_and_its_own_input() {
    let Some(_) = bin() else { return };
    let dir = std::env::temp_dir().join(format!("rdma-direct-cli-fromjson-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let row = |t: &str| {
        format!(
            r#"[{{"test":"write_lat","bytes":64,"device":"sim","data_path":"direct","t_typical_us":{t},"t_avg_us":1.0,"p99_us":1.0}}]"#
        )
    };
    let huge = dir.join("huge.json");
    std::fs::write(&huge, row("1e308")).unwrap();
    let svg = dir.join("out.svg");
    let Some(o) = run(&[
        "compare",
        "--from-json",
        huge.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]) else {
        return;
    };
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("t_typical_us"), "{}", stderr(&o));
    assert!(!svg.exists(), "a refused input wrote {}", svg.display());
    let good = dir.join("good.json");
    std::fs::write(&good, row("1.5")).unwrap();
    std::os::unix::fs::symlink(&good, dir.join("link.svg")).unwrap();
    let dotted = format!("{}/./good.json", dir.display());
    let link = dir.join("link.svg");
    for out in [dotted.as_str(), link.to_str().unwrap()] {
        let Some(o) = run(&[
            "compare",
            "--from-json",
            good.to_str().unwrap(),
            "--svg",
            out,
        ]) else {
            return;
        };
        assert_eq!(o.status.code(), Some(2), "--svg {out}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("are both"),
            "--svg {out}: {}",
            stderr(&o)
        );
    }
    assert_eq!(
        std::fs::read_to_string(&good).unwrap(),
        row("1.5"),
        "the input was overwritten"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn compare_runs_dc_rows_on_the_sim_and_reads_them_back() {
    let dir = std::env::temp_dir().join(format!("rdma-direct-compare-dc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, svg) = (dir.join("c.json"), dir.join("c.svg"));
    let tests = "write_lat:DC,send_lat:DC,read_lat:DC,atomic_lat:DC,\
                 write_bw:DC,send_bw:DC,read_bw:DC,atomic_bw:DC";
    let Some(o) = run(&[
        "compare",
        "-d",
        "sim",
        "--tests",
        tests,
        "--sizes",
        "64",
        "--lat-iters",
        "50",
        "--bw-iters",
        "100",
        "--json",
        json.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]) else {
        return;
    };
    assert!(o.status.success(), "compare failed: {}", stderr(&o));
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let names: Vec<&str> = rows.iter().filter_map(|r| r["test"].as_str()).collect();
    assert_eq!(names, tests.split(',').collect::<Vec<_>>());
    // The JSON's DC rows render again.
    let again = dir.join("again.svg");
    let Some(o) = run(&[
        "compare",
        "--from-json",
        json.to_str().unwrap(),
        "--svg",
        again.to_str().unwrap(),
    ]) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&again)
        .unwrap()
        .contains("write_lat:DC sim/direct"));
    let _ = std::fs::remove_dir_all(&dir);
}
