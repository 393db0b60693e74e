//! docs/probes.md is generated from the catalog; this keeps it true.

#[test]
fn probes_md_matches_the_catalog() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/probes.md");
    let want = rdma_trace::plan::catalog::markdown();
    if std::env::var_os("RDMA_TRACE_BLESS").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/probes.md is stale: run RDMA_TRACE_BLESS=1 cargo test -p rdma-trace --test docs"
    );
}

/// The backticked words of docs/report.md's table row for `key` (its first cell).
fn row_words(doc: &str, key: &str) -> Vec<String> {
    let row = doc
        .lines()
        .find(|l| l.starts_with(&format!("| `{key}` |")))
        .unwrap_or_else(|| panic!("docs/report.md has no row for {key}"));
    let what = row.splitn(3, '|').nth(2).unwrap();
    what.split('`').skip(1).step_by(2).map(|w| w.trim_end_matches("[]").to_string()).collect()
}

/// The keys of the objects in `v` (an object, or an array of them).
fn keys(v: &serde_json::Value) -> std::collections::BTreeSet<String> {
    match v {
        serde_json::Value::Object(o) => o.keys().cloned().collect(),
        serde_json::Value::Array(a) => a.iter().flat_map(keys).collect(),
        _ => Default::default(),
    }
}

/// Issue 40: help is the truth. Every key `report --json` writes in its captures,
/// processes, CQs, MRs and QPs is named in docs/report.md's row for them, and every word
/// the row names as a key is written, on lab captures that have each (a merged pair for
/// the QPs and clocks).
#[test]
fn report_md_names_every_key_report_json_has() {
    let doc =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/report.md"))
            .unwrap();
    let lab = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab");
    let opts = rdma_trace::cli::ReadOpts { strict: true, follow: false };
    let mut merged = std::collections::BTreeMap::<String, std::collections::BTreeSet<String>>::new();
    for files in [
        vec!["companion-7.3.jsonl"],
        vec!["memlock-7.3.jsonl"],
        vec!["session-6.12.jsonl"],
        vec!["pair-7.3.host1.jsonl.zst", "pair-7.3.host2.jsonl.zst"],
    ] {
        let paths: Vec<_> = files.iter().map(|f| lab.join(f)).collect();
        let r = rdma_trace::cmd::report::build(&paths, opts).unwrap();
        let v = serde_json::to_value(&r).unwrap();
        for (k, sub) in v.as_object().unwrap() {
            merged.entry(k.clone()).or_default().extend(keys(sub));
        }
        merged.entry("top".into()).or_default().extend(keys(&v));
    }
    // The table's first cells: every top-level key.
    for k in &merged["top"] {
        assert!(
            doc.contains(&format!("| `{k}` |")) || doc.contains(&format!("| `{k}[]` |")),
            "docs/report.md has no row for `{k}`"
        );
    }
    for (k, cell) in [
        ("captures", "captures[]"),
        ("processes", "processes[]"),
        ("cqs", "cqs[]"),
        ("mrs", "mrs[]"),
        ("qps", "qps[]"),
        ("data_phase", "data_phase"),
    ] {
        let words = row_words(&doc, cell);
        let have = &merged[k];
        for key in have {
            assert!(
                words.contains(key),
                "docs/report.md's `{cell}` row does not name `{key}`, which report --json writes"
            );
        }
        assert!(!have.is_empty(), "no capture gave {k}");
    }
}

/// Issue 40: the metric names `diff --help` and docs/report.md give are the ones `diff`
/// measures.
#[test]
fn diff_names_the_metrics_it_measures() {
    let lab = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab");
    let opts = rdma_trace::cli::ReadOpts { strict: true, follow: false };
    let r = rdma_trace::cmd::report::build(&[lab.join("companion-7.3.jsonl")], opts).unwrap();
    let metrics = rdma_trace::output::diff::metrics(&r);
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_rdma-trace"))
        .args(["diff", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap().replace('\n', " ");
    let doc =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/report.md"))
            .unwrap();
    for m in metrics.keys() {
        let path =
            ["pin", "mmap", "completion", "teardown"].into_iter().find(|p| m.starts_with(&format!("{p}-")));
        let path_form = path.map(|p| format!("{p}-…"));
        let named =
            help.contains(m.as_str()) || path_form.as_ref().is_some_and(|f| help.contains(f.as_str()));
        assert!(named, "diff --help does not name the metric {m}: {help}");
        let doc_form = ["pin", "mmap", "completion", "teardown"]
            .iter()
            .find_map(|p| m.strip_prefix(&format!("{p}-")).map(|rest| format!("`<path>-{rest}`")));
        assert!(
            doc.contains(&format!("`{m}`")) || doc_form.is_some_and(|f| doc.contains(&f)),
            "docs/report.md does not name the metric {m}"
        );
    }
}

/// Issue 40: `probes --json` writes the keys its help names, the same on every line.
#[test]
fn probes_json_writes_the_keys_its_help_names() {
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rdma-trace")).args(args).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let help = run(&["probes", "--help"]).replace('\n', " ");
    let lines = run(&["probes", "--json", "--no-attach"]);
    assert!(lines.lines().count() >= 20, "{lines}");
    let want = ["id", "kind", "status", "hardware_only", "symbol", "module", "return", "path", "reason"];
    for l in lines.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let have: Vec<&String> = v.as_object().unwrap().keys().collect();
        let mut have: Vec<&str> = have.into_iter().map(String::as_str).collect();
        have.sort();
        let mut w = want.to_vec();
        w.sort();
        assert_eq!(have, w, "{l}");
    }
    for k in want {
        assert!(help.contains(k), "probes --help does not name `{k}`: {help}");
    }
}
