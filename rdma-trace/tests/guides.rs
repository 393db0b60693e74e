//! docs/guides/ is what the code writes from the lab captures committed beside it
//! (docs/guides/captures/, made by `cargo xtask guides`), names the kernel of each, and
//! every `##` section of every guide quotes at least one value of its captures.

use std::collections::HashSet;
use std::path::Path;

fn docs() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/guides")
}

/// Every number an explanation of these captures gives (its `values`).
fn values(dir: &Path) -> HashSet<u64> {
    let mut out = HashSet::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let events =
            rdma_trace::source::capture::Reader::new(rdma_trace::source::capture::open(&p).unwrap(), true);
        let (mut evs, mut steps, mut header) = (Vec::new(), Vec::new(), None);
        for r in events {
            match r.unwrap() {
                rdma_trace::capture::Record::Event(e) => evs.push(*e),
                rdma_trace::capture::Record::Step(s) => steps.push(s.step),
                rdma_trace::capture::Record::Header(h) => header = Some(*h),
                _ => {}
            }
        }
        for (_, x) in rdma_trace::cmd::explain::all(&evs, &steps, header.as_ref()) {
            out.extend(x.into_iter().flat_map(|x| x.values.into_values()));
        }
    }
    out
}

#[test]
fn the_guides_are_what_the_captures_give() {
    let guides = rdma_trace::cmd::explain::guides(&docs().join("captures")).unwrap();
    assert_eq!(guides.len(), 4);
    for g in &guides {
        let committed = std::fs::read_to_string(docs().join(g.file)).unwrap_or_default();
        assert!(
            committed == g.markdown,
            "{} is stale: run cargo run -p rdma-trace --example guides -- docs/guides/captures docs/guides",
            g.file
        );
    }
}

#[test]
fn every_section_quotes_a_value_of_its_captures() {
    let known = values(&docs().join("captures"));
    let guides = rdma_trace::cmd::explain::guides(&docs().join("captures")).unwrap();
    for g in &guides {
        assert!(
            g.markdown.contains("Linux 6.12") && g.markdown.contains("Linux 7."),
            "{}: both kernels named",
            g.file
        );
        for section in g.markdown.split("\n## ").skip(1) {
            let head = section.lines().next().unwrap_or_default();
            let quoted: Vec<u64> =
                section.split('`').skip(1).step_by(2).filter_map(|c| c.parse::<u64>().ok()).collect();
            assert!(
                quoted.iter().any(|v| known.contains(v)),
                "{}: section {head:?} quotes no value of its captures",
                g.file
            );
        }
    }
}
