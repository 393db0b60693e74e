//! `explain` on real runs in the lab guest (both kernels):
//! - the companion traced to a capture; every topic explained from it, its numbers checked
//!   against what the companion announced (its MR's address, length, pages and keys, its
//!   event CQ, one wakeup per ibv_get_cq_event, one doorbell write(2) per send), the kernel
//!   named is this one, and every kernel function an explanation names is in this kernel's
//!   /proc/kallsyms;
//! - `explain mr -- CMD` live, on a pin refused as `nobody` with `ulimit -l 64`: the refusal
//!   explained with the limit and the size asked.
//!
//! The captures stay in the run's artifacts (`explain/`): `cargo xtask guides` writes the
//! guides from them.

mod common;

use common::*;
use rdma_trace::pipeline::correlate::story::read_steps;
use rdma_trace::steps::{StepName, StepRecord, pages_spanned};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// `rdma-trace trace -q -o DIR/NAME.jsonl -- cmd…`; the steps the companion announced.
fn capture(
    dir: &Path,
    name: &str,
    cmd: &[&str],
    steps: &Path,
) -> (std::process::ExitStatus, Vec<StepRecord>) {
    std::fs::remove_file(steps).ok();
    let (st, _) = trace_to_capture(dir, name, cmd);
    (st, read_steps(steps).unwrap_or_else(|e| panic!("{name}: the companion's steps: {e}")))
}

/// `explain TOPIC FILE --json` (and its text, kept beside the capture).
fn explain(dir: &Path, topic: &str, file: &Path) -> Value {
    let text = Command::new(tracer_bin()).args(["explain", topic]).arg(file).output().expect("explain");
    assert!(text.status.success(), "explain {topic}: {}", String::from_utf8_lossy(&text.stderr));
    std::fs::write(dir.join(format!("explain-{topic}.txt")), &text.stdout).unwrap();
    let out = Command::new(tracer_bin()).args(["explain", topic, "--json"]).arg(file).output().unwrap();
    assert!(out.status.success(), "explain {topic} --json: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("explain's JSON")
}

fn value(x: &Value, key: &str) -> Option<u64> {
    x["values"][key].as_u64()
}

fn this_kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap().trim().to_string()
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_explain_every_topic_on_the_companion_with_its_own_numbers() {
    let dir = out_dir("explain");
    let steps_file = dir.join("companion.steps.jsonl");
    let w = workload_bin();
    let cmd = [
        w.to_str().unwrap(),
        "--announce",
        steps_file.to_str().unwrap(),
        "--mr-sizes",
        "4K,64K,1M",
        "--iterations",
        "6",
    ];
    let (st, steps) = capture(&dir, "companion", &cmd, &steps_file);
    assert!(st.success(), "the companion: {st}");
    let file = dir.join("companion.jsonl");
    let syms = common::kallsyms_names();
    let mut named = 0;
    for topic in ["mr", "mmap", "cq", "bypass", "fork"] {
        let x = explain(&dir, topic, &file);
        assert_eq!(x["kernel"].as_str(), Some(this_kernel().as_str()), "{topic}: the kernel named");
        let functions: Vec<&str> =
            x["functions"].as_array().unwrap().iter().filter_map(|f| f.as_str()).collect();
        let missing: Vec<&&str> = functions.iter().filter(|f| !syms.contains(**f)).collect();
        assert!(missing.is_empty(), "{topic}: named but not in /proc/kallsyms: {missing:?}");
        named += functions.len();
        match topic {
            "mr" => {
                let mr = steps.iter().find(|s| s.name == StepName::RegMr).and_then(|s| s.mr.clone()).unwrap();
                assert_eq!(value(&x, "mr_addr"), Some(mr.addr));
                assert_eq!(value(&x, "mr_length"), Some(mr.length));
                assert_eq!(value(&x, "pages"), Some(pages_spanned(mr.addr, mr.length)));
                assert_eq!(value(&x, "lkey"), Some(mr.lkey.into()));
                assert_eq!(value(&x, "rkey"), Some(mr.rkey.into()));
            }
            "mmap" => {
                // The companion's process mapped something through its uverbs fd.
                assert!(value(&x, "mappings").unwrap_or(0) >= 1, "{x}");
                assert!(value(&x, "length").unwrap_or(0) >= 4096, "{x}");
                // On soft-RoCE the mapping is named by the queue behind its key: one of the
                // companion's CQs (holding the CQEs it asked for) or QPs.
                assert_eq!(value(&x, "queue_key"), value(&x, "pgoff").map(|p| p << 12), "{x}");
                let cqs: Vec<(u64, i32)> =
                    steps.iter().filter_map(|s| s.cq.as_ref()).map(|c| (c.handle, c.cqe)).collect();
                let qpns: Vec<u64> =
                    steps.iter().filter_map(|s| s.qp.as_ref()).map(|q| q.qpn.into()).collect();
                match (value(&x, "cq_handle"), value(&x, "qpn")) {
                    (Some(h), None) => {
                        let (_, cqe) = cqs.iter().find(|c| c.0 == h).unwrap_or_else(|| panic!("{h:#x}: {x}"));
                        assert!(value(&x, "queue_entries").unwrap() >= *cqe as u64, "{x}");
                    }
                    (None, Some(n)) => assert!(qpns.contains(&n), "{n}: {x}"),
                    other => panic!("the mapping is not named by one object ({other:?}): {x}"),
                }
                assert!(x["occurrence"].as_str().unwrap().contains(" It maps the "), "{x}");
            }
            "cq" => {
                let event_cq = steps.iter().find_map(|s| s.event_cq).unwrap();
                assert_eq!(value(&x, "cq_handle"), Some(event_cq));
                let waits = steps.iter().filter(|s| s.name == StepName::GetCqEvent).count() as u64;
                assert_eq!(value(&x, "wakeups"), Some(waits), "one wakeup per ibv_get_cq_event");
                assert!(value(&x, "wakeup_ns").unwrap_or(0) > 0);
            }
            "bypass" => {
                let sends = steps
                    .iter()
                    .filter(|s| matches!(s.name, StepName::PostSend | StepName::PostWrite))
                    .count() as u64;
                let recvs = steps.iter().filter(|s| s.name == StepName::PostRecv).count() as u64;
                assert_eq!(value(&x, "work_requests"), Some(sends + recvs));
                assert_eq!(value(&x, "sends_posted"), Some(sends));
                assert_eq!(value(&x, "receives_posted"), Some(recvs));
                assert_eq!(value(&x, "doorbell_writes"), Some(sends), "soft-RoCE rings with write(2)");
            }
            _ => {
                let cow = run_output("rdma", &["sys", "show"]).contains("copy-on-fork on");
                let text = std::fs::read_to_string(dir.join("explain-fork.txt")).unwrap();
                assert_eq!(text.contains("said copy-on-fork on"), cow, "{text}");
                if cow {
                    assert_eq!(
                        value(&x, "madvise_dontfork"),
                        Some(0),
                        "copy-on-fork: libibverbs marks nothing"
                    );
                }
            }
        }
    }
    assert!(named > 15, "the explanations name the kernel's functions ({named})");
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_explain_a_pin_refused_over_memlock_as_nobody() {
    // Root is never held to RLIMIT_MEMLOCK (CAP_IPC_LOCK): register 1 MiB as nobody with a
    // 64 KiB limit, once into a capture (for the guides) and once live through explain.
    let dir = out_dir("explain");
    let inner = |steps: &str| {
        format!(
            "ulimit -l 64; exec {} --announce {steps} --mr-sizes 1M --iterations 1",
            workload_bin().display()
        )
    };
    let as_nobody = |inner: &str| -> Vec<String> {
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", "/bin/sh", "-c", inner]
            .map(String::from)
            .to_vec()
    };
    let steps_tmp = Path::new("/tmp/explain-memlock.steps.jsonl");
    let cmd = as_nobody(&inner(steps_tmp.to_str().unwrap()));
    let cmd: Vec<&str> = cmd.iter().map(|s| s.as_str()).collect();
    let (st, steps) = capture(&dir, "memlock", &cmd, steps_tmp);
    assert_eq!(st.code(), Some(1), "the companion fails its reg_mr");
    std::fs::copy(steps_tmp, dir.join("memlock.steps.jsonl")).unwrap();
    let failed = steps.iter().find(|s| s.name == StepName::RegMr && !s.ok).expect("the refused reg_mr step");
    assert_eq!(failed.errno, Some(12));

    let live = Command::new(tracer_bin())
        .args(["explain", "mr", "--json", "--"])
        .args(as_nobody(&inner("/dev/null")))
        .output()
        .expect("explain mr -- …");
    let stderr = String::from_utf8_lossy(&live.stderr);
    assert!(live.status.success(), "{stderr}");
    let x: Value = serde_json::from_slice(&live.stdout).unwrap_or_else(|e| panic!("{e}\n{stderr}"));
    assert_eq!(value(&x, "refused_errno"), Some(12), "{x}");
    assert_eq!(value(&x, "refused_memlock_limit"), Some(64 * 1024), "{x}");
    assert_eq!(value(&x, "refused_asked_bytes"), Some(1 << 20), "{x}");
    let notes = x["notes"].to_string();
    assert!(notes.contains("RLIMIT_MEMLOCK at 64 KiB") && notes.contains("(ENOMEM)"), "{notes}");
    let from_file = explain(&dir, "mr", &dir.join("memlock.jsonl"));
    for key in ["refused_errno", "refused_memlock_limit", "refused_asked_bytes", "mr_length"] {
        assert_eq!(value(&from_file, key), value(&x, key), "{key}: the capture against the live run");
    }
}
