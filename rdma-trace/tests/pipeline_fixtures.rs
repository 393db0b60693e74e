//! decode → enrich → correlate, run by today's code on raw records rebuilt from the lab
//! captures of both kernels.
//!
//! Each kernel event of a capture is turned back into the bytes the eBPF programs wrote:
//! its header, its values in the plan's slot order (the plan made from that kernel's real
//! BTF), its failed/skipped masks, and its stack as addresses in a kallsyms made from the
//! frames the capture names. The pipeline must give back the event the lab run wrote:
//! name, symbol, path, fields (with the `pages` the correlator derives), the latency it
//! pairs, the execution context. Only what reads the live machine is left out
//! (`memlock_limit`, from /proc/<pid>/limits).

mod common;

use common::fixture_plan::{K73, K612, plan_for};
use rdma_trace::event::{Event, EventKind, Value, parse_jsonl};
use rdma_trace::pipeline::correlate::Correlator;
use rdma_trace::pipeline::enrich::Enricher;
use rdma_trace::pipeline::{decode, ksyms::Ksyms};
use rdma_trace::plan::select::{Plan, Planned};
use rdma_trace_common::{
    EventHeader, KIND_PROBE_ENTRY, KIND_PROBE_RETURN, MAX_FETCH, PROBE_FIXED_LEN, ProbeHead,
};
use std::collections::BTreeMap;
use std::path::Path;

fn capture(name: &str) -> Vec<Event> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab").join(name);
    parse_jsonl(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// A kallsyms with every frame the captures name, each function 64 KiB apart: the stack
/// of an event becomes addresses that symbolize back to the same strings.
struct Frames {
    base: BTreeMap<(String, Option<String>), u64>,
}

impl Frames {
    /// "name+0xoff [module]" → (name, off, module).
    fn split(frame: &str) -> (String, u64, Option<String>) {
        let (sym, module) = match frame.split_once(" [") {
            Some((s, m)) => (s, Some(m.trim_end_matches(']').to_string())),
            None => (frame, None),
        };
        let (name, off) = sym.rsplit_once("+0x").expect("frame is name+0xoff");
        (name.to_string(), u64::from_str_radix(off, 16).unwrap(), module)
    }

    fn of(events: &[Event]) -> Self {
        let mut base = BTreeMap::new();
        for f in events.iter().flat_map(|e| &e.stack) {
            let (name, _, module) = Self::split(f);
            let next = 0xffff_ffff_8100_0000 + base.len() as u64 * 0x1_0000;
            base.entry((name, module)).or_insert(next);
        }
        Self { base }
    }

    fn kallsyms(&self) -> String {
        self.base
            .iter()
            .map(|((name, module), a)| match module {
                Some(m) => format!("{a:x} t {name}\t[{m}]\n"),
                None => format!("{a:x} T {name}\n"),
            })
            .collect()
    }

    fn address(&self, frame: &str) -> u64 {
        let (name, off, module) = Self::split(frame);
        self.base[&(name, module)] + off
    }
}

fn raw_value(v: &Value) -> u64 {
    match v {
        Value::U(u) => *u,
        Value::I(i) => *i as u64,
    }
}

/// The record the programs wrote for `ev`, as bytes.
fn record(ev: &Event, p: &Planned, frames: &Frames) -> Vec<u8> {
    let is_return = ev.kind == EventKind::Return;
    let fields = if is_return { p.spec.ret } else { p.spec.entry };
    let mut comm = [0u8; 16];
    comm[..ev.comm.len().min(15)].copy_from_slice(&ev.comm.as_bytes()[..ev.comm.len().min(15)]);
    let mut head = ProbeHead {
        hdr: EventHeader {
            ts_ns: ev.ts_ns,
            tgid: ev.pid,
            tid: ev.tid,
            comm,
            cpu: ev.cpu,
            kind: if is_return { KIND_PROBE_RETURN } else { KIND_PROBE_ENTRY },
            slot: p.slot as u8,
            fail_mask: 0,
            skip_mask: 0,
        },
        vals: [0; MAX_FETCH],
        stack_len: (ev.stack.len() * 8) as u32,
        _pad: 0,
    };
    for (i, f) in fields.iter().enumerate() {
        if ev.unreadable.iter().any(|u| u == f.name) {
            head.hdr.fail_mask |= 1 << i;
        } else if ev.not_followed.iter().any(|u| u == f.name) {
            head.hdr.skip_mask |= 1 << i;
        } else if let Some(v) = ev.fields.get(f.name) {
            head.vals[i] = raw_value(v);
        } else {
            // A field the capture predates (the task's memlock fields): not read then.
            head.hdr.fail_mask |= 1 << i;
        }
    }
    // SAFETY: ProbeHead is a #[repr(C)] plain-data struct of PROBE_FIXED_LEN bytes.
    let bytes = unsafe { std::slice::from_raw_parts((&raw const head).cast::<u8>(), PROBE_FIXED_LEN) };
    let mut out = bytes.to_vec();
    for f in &ev.stack {
        out.extend_from_slice(&frames.address(f).to_ne_bytes());
    }
    out
}

/// The pin's task fields: the lab captures predate them (their memlock_limit came from a
/// live /proc read), so they are left out of the comparison.
const TASK_FIELDS: [&str; 3] = ["memlock_limit", "memlock_max", "pinned_vm_pages"];

/// What of an event the pipeline decides (the task fields left out), values as JSON gives
/// them back (a non-negative signed value reads as unsigned).
fn comparable(mut e: Event) -> Event {
    for f in TASK_FIELDS {
        e.fields.remove(f);
    }
    e.unreadable.retain(|u| !TASK_FIELDS.contains(&u.as_str()));
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
    let ksyms = Ksyms::parse(&frames.kallsyms());
    let mut enricher = Enricher { plan, ksyms: &ksyms, fds: Default::default(), memlock: Default::default() };
    let mut correlator = Correlator::default();
    let mut checked = 0;
    let mut latencies = 0;
    for ev in events.iter().filter(|e| matches!(e.kind, EventKind::Entry | EventKind::Return)) {
        // User-space probes are planned from libibverbs, which this plan has none of.
        let Some(p) = plan.probes.iter().find(|p| ev.probe() == Some(p.spec.id)) else { continue };
        let bytes = record(ev, p, &frames);
        let raw = decode::decode(&bytes).unwrap_or_else(|e| panic!("{kernel}: {e}: {ev:?}"));
        let got = enricher.event(&raw).unwrap_or_else(|| panic!("{kernel}: enricher dropped {ev:?}"));
        let mut got = correlator.feed(got);
        // Fields the capture predates (a probe that reads more today) were not read then:
        // left out of the comparison, and named to the caller.
        let fields = if ev.kind == EventKind::Return { p.spec.ret } else { p.spec.entry };
        let then = |n: &str| {
            ev.fields.contains_key(n) || ev.unreadable.iter().chain(&ev.not_followed).any(|u| u == n)
        };
        got.unreadable.retain(|u| {
            let newer = !then(u) && fields.iter().any(|f| f.name == u);
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
