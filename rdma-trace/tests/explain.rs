//! `explain` on lab captures of both kernels: golden text of every topic, its numbers
//! against the values the companion itself announced (its MR lengths and keys, the pages
//! they span, its CQ, its posts, a refused pin's size and limit), and every kernel function
//! an explanation names present in that kernel (its BTF: vmlinux and the RDMA modules).

mod common;

use common::fixture_plan::{K73, K612, kernel_fixture as btf_fixture};
use rdma_trace::cmd::explain::all;
use rdma_trace::explain;
use rdma_trace::explain::lessons::Topic;
use rdma_trace::pipeline::correlate::story::read_steps;
use rdma_trace::plan::btf::{self, BtfSource};
use rdma_trace::source::capture::parse_jsonl;
use rdma_trace::steps::{StepName, StepRecord};
use std::path::{Path, PathBuf};

fn lab(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab").join(name)
}

fn run(name: &str) -> (Vec<rdma_trace::event::Event>, Vec<StepRecord>) {
    let events = parse_jsonl(&std::fs::read_to_string(lab(&format!("{name}.jsonl"))).unwrap()).unwrap();
    (events, read_steps(&lab(&format!("{name}.steps.jsonl"))).unwrap())
}

#[test]
fn every_topic_of_the_companion_on_every_kernel() {
    for k in ["6.1", "6.12", "7.3"] {
        let (events, steps) = run(&format!("companion-{k}"));
        for (topic, x) in all(&events, &steps, None) {
            let x = x.unwrap_or_else(|e| panic!("{k} {topic:?}: {e}"));
            insta::assert_snapshot!(format!("explain-{}-companion-{k}", topic.as_str()), explain::text(&x));
        }
    }
}

#[test]
fn the_numbers_are_the_companions_own() {
    for k in ["6.1", "6.12", "7.3"] {
        let (events, steps) = run(&format!("companion-{k}"));
        let xs: Vec<_> = all(&events, &steps, None).into_iter().map(|(t, x)| (t, x.unwrap())).collect();
        let v = |t: Topic, key: &str| {
            xs.iter().find(|(tt, _)| *tt == t).and_then(|(_, x)| x.values.get(key).copied())
        };
        // The first MR the companion registered.
        let mr = steps.iter().find(|s| s.name == StepName::RegMr).and_then(|s| s.mr.clone()).unwrap();
        assert_eq!(v(Topic::Mr, "mr_length"), Some(mr.length), "{k}");
        assert_eq!(v(Topic::Mr, "mr_addr"), Some(mr.addr), "{k}");
        assert_eq!(v(Topic::Mr, "pages"), Some(rdma_trace::steps::pages_spanned(mr.addr, mr.length)), "{k}");
        assert_eq!(
            (v(Topic::Mr, "lkey"), v(Topic::Mr, "rkey")),
            (Some(mr.lkey.into()), Some(mr.rkey.into())),
            "{k}"
        );
        // The CQ its completion events are for.
        let event_cq = steps.iter().find_map(|s| s.event_cq).unwrap();
        assert_eq!(v(Topic::Cq, "cq_handle"), Some(event_cq), "{k}");
        let waits = steps.iter().filter(|s| s.name == StepName::GetCqEvent).count() as u64;
        assert_eq!(v(Topic::Cq, "wakeups"), Some(waits), "{k}: one wakeup per ibv_get_cq_event");
        // Its posts: one doorbell write(2) per send on soft-RoCE.
        let sends =
            steps.iter().filter(|s| matches!(s.name, StepName::PostSend | StepName::PostWrite)).count()
                as u64;
        let posts = steps.iter().filter(|s| rdma_trace::steps::is_work_request(s.name)).count() as u64;
        assert_eq!(v(Topic::Bypass, "work_requests"), Some(posts), "{k}");
        assert_eq!(v(Topic::Bypass, "sends_posted"), Some(sends), "{k}");
        assert_eq!(v(Topic::Bypass, "doorbell_writes"), Some(sends), "{k}: rxe rings with write(2)");
        assert_eq!(v(Topic::Fork, "madvise_dontfork"), Some(0), "{k}: copy-on-fork kernels get no madvise");
    }
}

#[test]
fn a_refused_pin_is_explained_with_the_limit_and_the_size_asked() {
    for k in ["6.12", "7.3"] {
        let (events, steps) = run(&format!("memlock-{k}"));
        let failed =
            steps.iter().find(|s| s.name == StepName::RegMr && !s.ok).expect("the refused reg_mr step");
        let x = all(&events, &steps, None).into_iter().find(|(t, _)| *t == Topic::Mr).unwrap().1.unwrap();
        // The size it asked for: its first MR size (the start record's configuration).
        let asked = steps.iter().find_map(|s| s.config.as_ref()).map(|c| c.mr_sizes[0]).unwrap();
        assert_eq!(failed.errno, Some(12));
        let text = explain::text(&x);
        assert_eq!(x.values.get("refused_errno"), Some(&12), "{k}: {text}");
        assert_eq!(x.values.get("refused_memlock_limit"), Some(&65536), "{k}");
        assert_eq!(x.values.get("refused_asked_bytes"), Some(&asked), "{k}");
        assert!(text.contains("RLIMIT_MEMLOCK at 64 KiB") && text.contains("(ENOMEM)"), "{k}: {text}");
        insta::assert_snapshot!(format!("explain-mr-memlock-{k}"), text);
    }
}

/// Every function an explanation names is in that kernel: in its BTF (vmlinux or an RDMA
/// module), or in its kallsyms as the capture's own stacks were symbolized with (BTF drops
/// a static function whose name several files use, e.g. rxe's do_complete on 6.12). The
/// names follow what that kernel ran, not one kernel's source.
#[test]
fn every_function_named_exists_in_that_kernel() {
    for (k, btf_name) in [("6.12", K612), ("7.3", K73)] {
        let dir = btf_fixture(btf_name);
        let mut src = BtfSource::open(&dir).unwrap();
        let modules: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let (events, steps) = run(&format!("companion-{k}"));
        let (mevents, msteps) = run(&format!("memlock-{k}"));
        let mut named: Vec<String> = Vec::new();
        for (ev, st) in [(&events, &steps), (&mevents, &msteps)] {
            for (_, x) in all(ev, st, None) {
                if let Ok(x) = x {
                    named.extend(x.functions);
                }
            }
        }
        named.sort();
        named.dedup();
        let on_stacks: std::collections::HashSet<&str> = events
            .iter()
            .chain(&mevents)
            .flat_map(|e| e.stack.iter().map(|f| rdma_trace::explain::frames::function(f)))
            .collect();
        assert!(named.len() > 15, "{k}: {named:?}");
        let missing: Vec<&String> = named
            .iter()
            .filter(|f| !on_stacks.contains(f.as_str()))
            .filter(|f| !modules.iter().any(|m| src.module(m).is_ok_and(|b| btf::proto(b, f).is_ok())))
            .collect();
        assert!(missing.is_empty(), "{k}: named but not in this kernel: {missing:?}");
    }
}

/// Issue 40 item 7: on Debian bookworm's 6.1, soft-RoCE runs the CQ's tasklet in the softirq
/// that the poster's own write(2) runs as it re-enables bottom halves. `explain cq` says so
/// from the completion's frames (not from the kernel series), and that arming was a system
/// call, from the companion's req_notify_cq step.
#[test]
fn on_6_1_the_completion_ran_in_a_tasklet_inside_the_posters_write() {
    let (events, steps) = run("companion-6.1");
    let x = all(&events, &steps, None).into_iter().find(|(t, _)| *t == Topic::Cq).unwrap().1.unwrap();
    let text = explain::text(&x);
    let nic = x.stages.iter().find(|s| s.title.starts_with("The NIC's side")).unwrap();
    assert!(nic.title.contains("in a tasklet inside ") && nic.title.ends_with("'s own write(2)"), "{text}");
    assert!(nic.text.contains("Here it ran inside the program's own system call"), "{text}");
    let named: Vec<&str> = nic.functions.iter().map(|f| f.function.as_str()).collect();
    for f in ["rxe_post_send", "handle_softirqs", "__local_bh_enable_ip"] {
        assert!(named.contains(&f), "{f} not named: {named:?}");
    }
    assert_eq!(x.values.get("arm_syscalls"), Some(&1), "{text}");
    insta::assert_snapshot!("explain-cq-companion-6.1", text);
}
