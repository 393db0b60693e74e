//! decode → enrich → correlate, run by today's code on raw records rebuilt from the lab
//! captures of both kernels.
//!
//! Each kernel event of a capture is turned back into the bytes the eBPF programs wrote
//! (`common::raw_records`), with the plan made from that kernel's real BTF. The pipeline must give back the event the lab run wrote:
//! name, symbol, path, fields (with the `pages` the correlator derives), the latency it
//! pairs, the execution context. Only what reads the live machine is left out
//! (`memlock_limit`, from /proc/<pid>/limits).

mod common;

use common::fixture_plan::{K73, K612, plan_for};
use common::raw_records::{Frames, probe_record};
use rdma_trace::event::FieldId;
use rdma_trace::event::{Event, EventKind, Value};
use rdma_trace::pipeline::correlate::Correlator;
use rdma_trace::pipeline::enrich::Enricher;
use rdma_trace::pipeline::{decode, ksyms::Ksyms};
use rdma_trace::plan::select::Plan;
use rdma_trace::source::capture::parse_jsonl;
use std::path::Path;

fn capture(name: &str) -> Vec<Event> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab").join(name);
    parse_jsonl(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// The pin's task fields: the lab captures predate them (their memlock_limit came from a
/// live /proc read), so they are left out of the comparison.
const TASK_FIELDS: [FieldId; 3] = [FieldId::MemlockLimit, FieldId::MemlockMax, FieldId::PinnedVmPages];

/// What of an event the pipeline decides (the task fields left out), values as JSON gives
/// them back (a non-negative signed value reads as unsigned).
fn comparable(mut e: Event) -> Event {
    for f in TASK_FIELDS {
        e.fields.remove(f);
    }
    e.unreadable.retain(|u| !TASK_FIELDS.iter().any(|f| f.as_str() == u));
    e.v = 0; // v0 files carry 0; live events carry the version they will be written in
    e.seq = None; // the capture writer numbers records; the pipeline does not
    for v in e.fields.values_mut() {
        if let Value::I(i) = *v
            && i >= 0
        {
            *v = Value::U(i as u64);
        }
    }
    e
}

/// Rebuilds each kernel event of capture `name` from bytes; returns how many, and the
/// `probe.field`s today's catalog reads that the capture predates.
fn replay_through_the_pipeline(
    kernel: &str,
    plan: &Plan,
    name: &str,
) -> (usize, std::collections::BTreeSet<String>) {
    let mut predated = std::collections::BTreeSet::new();
    let events = capture(name);
    let frames = Frames::of(&events);
    let ksyms = Ksyms::parse(&frames.made_up_kallsyms());
    let mut enricher = Enricher {
        plan,
        ksyms: &ksyms,
        fds: Default::default(),
        memlock: Default::default(),
        frames: Default::default(),
        cgroups: Default::default(),
    };
    let mut correlator = Correlator::default();
    let mut checked = 0;
    let mut latencies = 0;
    for ev in events.iter().filter(|e| matches!(e.kind, EventKind::Entry | EventKind::Return)) {
        // User-space probes are planned from libibverbs, which this plan has none of.
        let Some(p) = plan.probes.iter().find(|p| ev.probe() == Some(p.spec.id)) else { continue };
        let bytes = probe_record(ev, p, &frames);
        let raw = decode::decode(&bytes).unwrap_or_else(|e| panic!("{kernel}: {e}: {ev:?}"));
        let mut got = enricher.event(&raw).unwrap_or_else(|| panic!("{kernel}: enricher dropped {ev:?}"));
        correlator.feed(&mut got);
        // Fields the capture predates (a probe that reads more today) were not read then:
        // left out of the comparison, and named to the caller.
        let fields = if ev.kind == EventKind::Return { p.spec.ret } else { p.spec.entry };
        let then = |n: &str| {
            ev.fields.get_named(n).is_some() || ev.unreadable.iter().chain(&ev.not_followed).any(|u| u == n)
        };
        got.unreadable.retain(|u| {
            let newer = !then(u) && fields.iter().any(|f| f.name() == u);
            if newer {
                predated.insert(format!("{}.{u}", ev.name));
            }
            !newer
        });
        let got = comparable(got);
        assert_eq!(got, comparable(ev.clone()), "{kernel} {name}: event {checked} differs");
        latencies += usize::from(got.latency_ns.is_some());
        checked += 1;
    }
    assert!(latencies > 20, "{kernel} {name}: only {latencies} returns paired");
    (checked, predated)
}

#[test]
fn lab_captures_come_back_unchanged_through_decode_enrich_correlate() {
    for (kernel, files) in [
        (K612, ["session-6.12.jsonl", "companion-6.12.jsonl"]),
        (K73, ["session-7.3.jsonl", "companion-7.3.jsonl"]),
    ] {
        let plan = plan_for(kernel);
        for f in files {
            let (n, predated) = replay_through_the_pipeline(kernel, &plan, f);
            assert!(n > 50, "{kernel} {f}: only {n} kernel events rebuilt");
            // The session captures were made before the pin read the task's memlock fields
            // and before rxe_mmap read its context; the companion's with today's catalog.
            const SESSION: [&str; 4] = [
                "rxe_mmap.context",
                "umem_get.memlock_limit",
                "umem_get.memlock_max",
                "umem_get.pinned_vm_pages",
            ];
            let allowed: &[&str] = if f.starts_with("session") { &SESSION } else { &[] };
            let unexpected: Vec<&String> =
                predated.iter().filter(|p| !allowed.contains(&p.as_str())).collect();
            assert!(unexpected.is_empty(), "{kernel} {f}: fields missing from the capture: {unexpected:?}");
        }
    }
}
