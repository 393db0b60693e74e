//! docs/guides/ is what the code writes from the lab captures committed beside it
//! (docs/guides/captures/, made by `cargo xtask guides`), names the kernel of each, and
//! every `##` section of every guide quotes values of its own captures: each number in a
//! code span is one the explanations of that guide's topics give for the kernel the section
//! is about (both kernels where it names none).

use rdma_trace::capture::Record;
use rdma_trace::explain::lessons::Topic;
use std::collections::{HashMap, HashSet};
use std::path::Path;

fn docs() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/guides")
}

/// Per kernel release, per topic: every value its captures' explanations give.
fn values(dir: &Path) -> HashMap<String, HashMap<Topic, HashSet<u64>>> {
    let mut out: HashMap<String, HashMap<Topic, HashSet<u64>>> = HashMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let reader =
            rdma_trace::source::capture::Reader::new(rdma_trace::source::capture::open(&p).unwrap(), true);
        let (mut evs, mut steps, mut header) = (Vec::new(), Vec::new(), None);
        for r in reader {
            match r.unwrap() {
                Record::Event(e) => evs.push(std::sync::Arc::unwrap_or_clone(e)),
                Record::Step(s) => steps.push(s.step),
                Record::Header(h) => header = Some(*h),
                _ => {}
            }
        }
        let kernel = header.as_ref().expect("a v1 capture").kernel_release.clone();
        for (t, x) in rdma_trace::cmd::explain::all(&evs, &steps, header.as_ref()) {
            let set = out.entry(kernel.clone()).or_default().entry(t).or_default();
            set.extend(x.into_iter().flat_map(|x| x.values.into_values()));
        }
    }
    out
}

fn topics(file: &str) -> &'static [Topic] {
    match file {
        "mr-registration.md" => &[Topic::Mr, Topic::Fork],
        "doorbell-and-queue-mmaps.md" => &[Topic::Mmap],
        "interrupt-to-completion-event.md" => &[Topic::Cq],
        "kernel-bypass.md" => &[Topic::Bypass],
        other => panic!("a guide no test knows: {other}"),
    }
}

/// The numbers in a text's code spans (decimal or 0x hex).
fn quoted(text: &str) -> Vec<u64> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|c| match c.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => c.parse::<u64>().ok(),
        })
        .collect()
}

#[test]
fn the_guides_are_what_the_captures_give() {
    let guides = rdma_trace::cmd::explain::guides(&docs().join("captures")).unwrap();
    assert_eq!(guides.len(), 4);
    for g in &guides {
        let committed = std::fs::read_to_string(docs().join(g.file)).unwrap_or_default();
        assert!(
            committed == g.markdown,
            "{} is stale: cargo xtask guides --no-lab writes it from docs/guides/captures",
            g.file
        );
    }
}

#[test]
fn every_section_quotes_values_of_its_own_captures() {
    let known = values(&docs().join("captures"));
    assert_eq!(known.len(), 2, "captures of two kernels: {:?}", known.keys());
    let guides = rdma_trace::cmd::explain::guides(&docs().join("captures")).unwrap();
    for g in &guides {
        for k in known.keys() {
            assert!(g.markdown.contains(&format!("Linux {k}")), "{}: names {k}", g.file);
        }
        for section in g.markdown.split("\n## ").skip(1) {
            let head = section.lines().next().unwrap_or_default();
            let kernels: Vec<&String> = match known.keys().find(|k| head.contains(k.as_str())) {
                Some(k) => vec![k],
                None => known.keys().collect(),
            };
            let allowed: HashSet<u64> = kernels
                .iter()
                .flat_map(|k| topics(g.file).iter().filter_map(|t| known[*k].get(t)))
                .flatten()
                .copied()
                .collect();
            let nums = quoted(section);
            assert!(!nums.is_empty(), "{}: section {head:?} quotes no value", g.file);
            let foreign: Vec<&u64> = nums.iter().filter(|v| !allowed.contains(v)).collect();
            assert!(
                foreign.is_empty(),
                "{}: section {head:?} quotes {foreign:?}, not its captures' values",
                g.file
            );
        }
    }
}
