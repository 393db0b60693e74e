//! `rdma-trace export --perfetto`: a capture as Chrome trace-event JSON (what Perfetto's UI
//! and chrome://tracing load). A track per thread; complete slices (`ph:"X"`) for verbs
//! calls, syscalls and kernel functions (entry → return on one thread, so they nest as
//! the calls did); completions on their kworker's track, or on a softirq track per CPU;
//! a flow arrow from each completion to a short `woken` slice at the end of the channel read
//! it woke (drawn forward in time, the way Perfetto imports flows); process and thread names
//! (`ph:"M"`, plain: the viewers add the pid and tid); timestamps in microseconds from the
//! first event.

use crate::event::{Event, EventKind, ExecContext, PID_SHIFT, host_of};
use crate::pipeline::correlate::story::Story;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};

/// Softirq tracks: pid 0, tid this + the CPU.
const SOFTIRQ_TID: u32 = 1 << 30;
/// A completion without a return seen still gets a slice this long (flows need slices).
const MIN_DUR_US: f64 = 1.0;
/// The `woken` slice a completion's flow lands on, at the end of the wait it ended.
const WOKEN_NS: u64 = 1000;

/// The track an event is drawn on.
fn track(e: &Event) -> (u32, u32) {
    // A softirq track per host and CPU: merged hosts' pids carry the host (`PID_SHIFT`).
    let host_pid = host_of(e.pid) << PID_SHIFT;
    if e.context == Some(ExecContext::Softirq) { (host_pid, SOFTIRQ_TID + e.cpu) } else { (e.pid, e.tid) }
}

/// A merged pid or tid as the viewers show it (they print it beside the process name):
/// another host's as its index × 10^7 + its own (`10000185` is pid 185 on the second
/// host; Linux pids stay under 2^22), a softirq track's as it is.
fn shown(id: u32) -> u64 {
    if id >= SOFTIRQ_TID {
        return u64::from(id);
    }
    u64::from(host_of(id)) * 10_000_000 + u64::from(id & ((1 << PID_SHIFT) - 1))
}

/// A merged capture's host: its name, and its clock against the first capture's.
pub struct Host {
    pub name: String,
    pub placed: Option<crate::clock::Placed>,
    pub other_boot: bool,
}

/// What the export says of each other boot's clock.
fn clocks(hosts: &[Host]) -> Vec<Value> {
    let first = hosts.first().map_or("", |h| h.name.as_str());
    hosts
        .iter()
        .filter(|h| h.other_boot)
        .map(|h| match &h.placed {
            Some(p) => json!({"host": h.name, "against": first, "measured_by": p.measured_by,
                "offset": crate::clock::offset_text(p.offset_ns, p.error_ns),
                "offset_ns": p.offset_ns, "error_ns": p.error_ns}),
            None => json!({"host": h.name, "against": first, "offset": "not measured: placed on its own wall clock"}),
        })
        .collect()
}

/// A slice's part in a flow: the arrow's id, and whether one ends here, starts here, or
/// both (a completion: the post's arrow ends on it, the wakeup's starts from it).
#[derive(Clone, Copy, Default)]
struct Flow {
    id: u64,
    into: bool,
    out: bool,
}

struct Slice {
    name: String,
    cat: &'static str,
    track: (u32, u32),
    start_ns: u64,
    end_ns: Option<u64>,
    args: serde_json::Map<String, Value>,
    flow: Option<Flow>,
}

fn args_of(e: &Event) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    for (k, v) in &e.fields {
        m.insert(k.to_string(), json!(crate::pipeline::render::field(e, k, *v)));
    }
    if let Some(fd) = &e.fd_kind {
        m.insert("fd".into(), json!(fd));
    }
    m
}

/// Pairs entries with returns on each thread's stack of open calls: a return closes the
/// innermost open call of its name, and any call opened inside it that is still open lost
/// its return (the kernel skips program runs: `program … skipped by the kernel`) and stays
/// an open slice; a return with no open call of its name lost its entry and makes none.
/// So the slices of a thread nest whatever was lost. `slice_of[event index]` is its slice.
fn slices(events: &[Event]) -> (Vec<Slice>, HashMap<usize, usize>) {
    let mut out: Vec<Slice> = Vec::new();
    let mut slice_of = HashMap::new();
    let mut open: HashMap<u32, Vec<(&crate::event::Name, usize)>> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        match e.kind {
            EventKind::Entry | EventKind::SyscallEnter => {
                let cat = if e.kind == EventKind::SyscallEnter { "syscall" } else { e.path.as_str() };
                out.push(Slice {
                    name: e.name.to_string(),
                    cat,
                    track: track(e),
                    start_ns: e.ts_ns,
                    end_ns: None,
                    args: args_of(e),
                    flow: None,
                });
                open.entry(e.tid).or_default().push((&e.name, out.len() - 1));
                slice_of.insert(i, out.len() - 1);
            }
            EventKind::Return | EventKind::SyscallExit => {
                let Some(stack) = open.get_mut(&e.tid) else { continue };
                let Some(at) = stack.iter().rposition(|(name, _)| **name == e.name) else { continue };
                let s = stack[at].1;
                stack.truncate(at);
                out[s].end_ns = Some(e.ts_ns);
                out[s].args.extend(args_of(e));
                slice_of.insert(i, s);
            }
        }
    }
    (out, slice_of)
}

/// The trace-event JSON of `events` (in time order), with the story's completion → wakeup
/// pairs and post → completion joins (indices into `events`) as flows. `hosts`: the
/// merged captures' host names (processes are named with theirs when there are several)
/// and how each other boot's clock was placed (said in `otherData.clocks`).
pub fn export(events: &[Event], story: &Story, hosts: &[Host]) -> Value {
    let (mut slices, slice_of) = slices(events);
    let mut on_track: HashMap<(u32, u32), Vec<usize>> = HashMap::new();
    for (i, s) in slices.iter().enumerate() {
        on_track.entry(s.track).or_default().push(i);
    }
    for list in on_track.values_mut() {
        list.sort_by_key(|&i| slices[i].start_ns);
    }
    let mut flow = 0u64;
    let mut woken = Vec::new();
    for ps in story.processes.values() {
        for c in &ps.completions {
            let (Some(w), Some(&from)) = (c.wakeup, slice_of.get(&c.event)) else { continue };
            let Some(&to) = slice_of.get(&w) else { continue };
            if from == to || slices[from].flow.is_some() || slices[to].flow.is_some() {
                continue;
            }
            flow += 1;
            slices[from].flow = Some(Flow { id: flow, out: true, into: false });
            let Some(at) = woken_span(&slices, &on_track, from, to) else {
                // No room at the end of the wait: the arrow lands on the wait itself, which
                // Perfetto keeps as long as the wait began after the completion.
                slices[to].flow = Some(Flow { id: flow, into: true, out: false });
                continue;
            };
            woken.push(Slice {
                name: "woken".into(),
                cat: "completion",
                track: slices[to].track,
                start_ns: at.0,
                end_ns: Some(at.1),
                args: serde_json::Map::from_iter([("by".to_string(), json!(slices[from].name))]),
                flow: Some(Flow { id: flow, into: true, out: false }),
            });
        }
    }
    posts_to_completions(&mut slices, &slice_of, story, &mut flow);
    slices.extend(woken);
    let t0 = events.first().map(|e| e.ts_ns).unwrap_or(0);
    let us = |ns: u64| ns.saturating_sub(t0) as f64 / 1000.0;
    let mut trace: Vec<Value> = names(events, hosts);
    for s in &slices {
        let (pid, tid) = (shown(s.track.0), shown(s.track.1));
        let mut ev = json!({"name": s.name, "cat": s.cat, "pid": pid, "tid": tid, "ts": us(s.start_ns), "args": s.args});
        match (s.end_ns, s.flow) {
            (Some(end), _) => {
                ev["ph"] = json!("X");
                ev["dur"] = json!(end.saturating_sub(s.start_ns) as f64 / 1000.0);
            }
            // Flows attach to slices, not instants: an unreturned completion gets a short one.
            (None, Some(_)) => {
                ev["ph"] = json!("X");
                ev["dur"] = json!(MIN_DUR_US);
            }
            (None, None) => {
                ev["ph"] = json!("i");
                ev["s"] = json!("t");
            }
        }
        if let Some(f) = s.flow {
            ev["bind_id"] = json!(format!("{:#x}", f.id));
            for (set, key) in [(f.into, "flow_in"), (f.out, "flow_out")] {
                if set {
                    ev[key] = json!(true);
                }
            }
        }
        trace.push(ev);
    }
    // No displayTimeUnit: Perfetto ignores it and counts it in its import stats.
    let mut other = json!({"tool": "rdma-trace"});
    let clocks = clocks(hosts);
    if !clocks.is_empty() {
        other["clocks"] = json!(clocks);
    }
    json!({"traceEvents": trace, "otherData": other})
}

/// An arrow from each post on one end of a connection to the completion it caused on the
/// other (`story.qps.joins`, across only; the first completion of each post): where the
/// completion already starts the arrow to its wakeup, the post's arrow ends on it under
/// the same id, so post → completion → wakeup is one chain.
fn posts_to_completions(
    slices: &mut [Slice],
    slice_of: &HashMap<usize, usize>,
    story: &Story,
    flow: &mut u64,
) {
    for j in story.qps.joins.iter().filter(|j| j.across) {
        let (Some(&post), Some(&done)) = (slice_of.get(&j.post), slice_of.get(&j.completion)) else {
            continue;
        };
        let taken = |f: Option<Flow>, end: fn(Flow) -> bool| f.is_some_and(end);
        if post == done || slices[post].flow.is_some() || taken(slices[done].flow, |f| f.into) {
            continue;
        }
        let id = match slices[done].flow {
            Some(f) => f.id,
            None => {
                *flow += 1;
                *flow
            }
        };
        slices[post].flow = Some(Flow { id, out: true, into: false });
        let f = slices[done].flow.get_or_insert(Flow { id, ..Default::default() });
        f.into = true;
    }
}

/// Where the arrow of a completion (slice `from`) lands in the wait it ended (slice `to`):
/// a short `woken` slice at the end of the wait, after everything nested in it and after the
/// completion began. Perfetto imports flows in time order and drops one whose end slice
/// starts before its start slice (a blocking read starts before the handler that wakes it).
/// `on_track`: each track's slices in order of start.
fn woken_span(
    slices: &[Slice],
    on_track: &HashMap<(u32, u32), Vec<usize>>,
    from: usize,
    to: usize,
) -> Option<(u64, u64)> {
    let (wait, handler) = (&slices[to], &slices[from]);
    let end = wait.end_ns?;
    let track = on_track.get(&wait.track)?;
    let first = track.partition_point(|&i| slices[i].start_ns < wait.start_ns);
    let nested_end = track[first..]
        .iter()
        .take_while(|&&i| slices[i].start_ns < end)
        .filter(|&&i| i != to && slices[i].end_ns.is_none_or(|e| e <= end))
        .map(|&i| slices[i].end_ns.unwrap_or(slices[i].start_ns))
        .max()
        .unwrap_or(wait.start_ns);
    let start = end.saturating_sub(WOKEN_NS).max(nested_end).max(handler.start_ns + 1);
    (start < end).then_some((start, end))
}

/// `process_name` and `thread_name` metadata for every track; with several hosts, each
/// process named with its host's name.
fn names(events: &[Event], hosts: &[Host]) -> Vec<Value> {
    let mut procs: BTreeMap<u32, String> = BTreeMap::new();
    let mut threads: BTreeMap<(u32, u32), String> = BTreeMap::new();
    let at = |pid: u32| match hosts.get(host_of(pid) as usize).filter(|_| hosts.len() > 1) {
        Some(h) => format!(" @{}", h.name),
        None => String::new(),
    };
    for e in events {
        let (pid, tid) = track(e);
        if tid >= SOFTIRQ_TID {
            procs.insert(pid, format!("softirq{}", at(pid)));
            threads.insert((pid, tid), format!("softirq cpu {}", e.cpu));
            continue;
        }
        if e.pid == e.tid || !procs.contains_key(&pid) {
            procs.insert(pid, format!("{}{}", e.comm, at(pid)));
        }
        threads.insert((pid, tid), e.comm.clone());
    }
    let mut out: Vec<Value> = procs
        .iter()
        .map(|(pid, name)| {
            json!({"ph": "M", "name": "process_name", "pid": shown(*pid), "tid": 0, "args": {"name": name}})
        })
        .collect();
    out.extend(threads.iter().map(
        |((pid, tid), name)| {
            json!({"ph": "M", "name": "thread_name", "pid": shown(*pid), "tid": shown(*tid), "args": {"name": name}})
        },
    ));
    out
}
