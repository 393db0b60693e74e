//! `rdma-trace export --perfetto`: a capture as Chrome trace-event JSON (what Perfetto's UI
//! and chrome://tracing load). A track per thread; complete slices (`ph:"X"`) for verbs
//! calls, syscalls and kernel functions (entry → return on one thread, so they nest as
//! the calls did); completions on their kworker's track, or on a softirq track per CPU;
//! a flow arrow from each completion to a short `woken` slice at the end of the channel read
//! it woke (drawn forward in time, the way Perfetto imports flows); process and thread names
//! (`ph:"M"`, plain: the viewers add the pid and tid); timestamps in microseconds from the
//! first event.

use crate::event::{Event, EventKind, ExecContext};
use crate::pipeline::correlate::story::Story;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};

/// Softirq tracks: pid 0, tid this + the CPU.
const SOFTIRQ_TID: u32 = 1 << 30;
/// A completion without a return seen still gets a slice this long (flows need slices).
const MIN_DUR_US: f64 = 1.0;
/// The `woken` slice a completion's flow lands on, at the end of the wait it ended.
const WOKEN_NS: u64 = 1000;

/// The first id given to another host's pids and tids: above every Linux pid (`PID_MAX_LIMIT`
/// is 2^22), so no id of the first host's is taken.
const OTHER_HOSTS_FROM: u32 = 1 << 22;

/// The ids the export gives pids and tids. A trace-event file has one namespace of pids and
/// one of tids, so where several hosts are merged, each other host's ids are given new
/// ones in the order first seen; its processes' names say their own pid and the host.
#[derive(Default)]
struct Ids {
    given: HashMap<(u16, u32), u32>,
    next: u32,
}

impl Ids {
    fn of(&mut self, host: u16, id: u32) -> u32 {
        if host == 0 {
            return id;
        }
        let next = &mut self.next;
        *self.given.entry((host, id)).or_insert_with(|| {
            *next += 1;
            OTHER_HOSTS_FROM + *next - 1
        })
    }
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
    name: crate::event::Name,
    cat: &'static str,
    track: (u32, u32),
    start_ns: u64,
    end_ns: Option<u64>,
    args: Args,
    flow: Option<Flow>,
}

/// A slice's args as the text of a JSON object without its braces (`"k":"v",…`): an
/// export of a big capture holds hundreds of thousands of them.
#[derive(Default)]
struct Args(String);

impl Args {
    fn of(e: &Event) -> Args {
        let mut m = serde_json::Map::new();
        for (k, v) in &e.fields {
            m.insert(k.to_string(), json!(crate::pipeline::render::field(e, k, v)));
        }
        if let Some(fd) = &e.fd_kind {
            m.insert("fd".into(), json!(fd));
        }
        Args::from_map(&m)
    }

    fn from_map(m: &serde_json::Map<String, Value>) -> Args {
        let text = serde_json::to_string(m).unwrap_or_default();
        Args(text[1..text.len() - 1].to_string())
    }

    fn map(&self) -> serde_json::Map<String, Value> {
        serde_json::from_str(&format!("{{{}}}", self.0)).unwrap_or_default()
    }

    /// The return's args join the entry's; where both have a key, the return's wins.
    fn extend(&mut self, more: Args) {
        if more.0.is_empty() {
            return;
        }
        if self.0.is_empty() {
            *self = more;
            return;
        }
        let mut m = self.map();
        let theirs = more.map();
        if theirs.keys().any(|k| m.contains_key(k)) {
            m.extend(theirs);
            *self = Args::from_map(&m);
        } else {
            self.0.push(',');
            self.0.push_str(&more.0);
        }
    }
}

pub use crate::pipeline::correlate::calls::MAX_OPEN;
use crate::pipeline::correlate::calls::{self, OpenCalls};

/// The export as the capture is read: slices, with entries paired to returns by the one
/// pairing (`correlate::calls`: a call that lost its return stays an open slice, a return
/// that lost its entry makes none, so the slices of a thread nest whatever was lost); the
/// slice each event is part of; and the names of the tracks.
#[derive(Default)]
pub(crate) struct Timeline {
    slices: Vec<Slice>,
    /// By event index: its slice (`NONE`: none).
    slice_of: Vec<u32>,
    /// Per thread: its open calls' slices.
    open: OpenCalls<usize>,
    ids: Ids,
    /// By the id given: the process's name, host and own pid.
    procs: BTreeMap<u32, (String, u16, u32)>,
    threads: BTreeMap<(u32, u32), String>,
    t0: Option<u64>,
    /// Flow ids given so far.
    flows: u64,
}

const NONE: u32 = u32::MAX;

impl Timeline {
    /// Event `i` (the index the story knows it by), in the order read.
    pub(crate) fn event(&mut self, i: usize, e: &Event) {
        self.t0.get_or_insert(e.ts_ns);
        self.name(e);
        let slice = match calls::opens(e) {
            true => {
                let cat = if e.kind == EventKind::SyscallEnter { "syscall" } else { e.path.as_str() };
                let track = self.track(e);
                self.slices.push(Slice {
                    name: e.name.clone(),
                    cat,
                    track,
                    start_ns: e.ts_ns,
                    end_ns: None,
                    args: Args::of(e),
                    flow: None,
                });
                self.open.enter(e.thread(), &e.name, self.slices.len() - 1);
                self.slices.len() - 1
            }
            false => {
                let Some(calls::Closed { call: s, .. }) = self.open.ret(e.thread(), &e.name) else { return };
                self.slices[s].end_ns = Some(e.ts_ns);
                self.slices[s].args.extend(Args::of(e));
                s
            }
        };
        if self.slice_of.len() <= i {
            self.slice_of.resize(i + 1, NONE);
        }
        self.slice_of[i] = slice as u32;
    }

    /// Open calls let go past `MAX_OPEN` (their returns, if any come, pair with nothing).
    pub(crate) fn let_go(&self) -> u64 {
        self.open.let_go
    }

    fn slice_of(&self, i: usize) -> Option<usize> {
        self.slice_of.get(i).filter(|&&s| s != NONE).map(|&s| s as usize)
    }

    /// The track an event is drawn on: its thread's, or its host's softirq track of its CPU.
    fn track(&mut self, e: &Event) -> (u32, u32) {
        if e.context == Some(ExecContext::Softirq) {
            (self.ids.of(e.host, 0), self.ids.of(e.host, SOFTIRQ_TID + e.cpu))
        } else {
            (self.ids.of(e.host, e.pid), self.ids.of(e.host, e.tid))
        }
    }

    /// The names of the tracks: `process_name` and `thread_name` metadata.
    fn name(&mut self, e: &Event) {
        let (pid, tid) = self.track(e);
        if e.context == Some(ExecContext::Softirq) {
            self.procs.insert(pid, ("softirq".into(), e.host, 0));
            self.threads.insert((pid, tid), format!("softirq cpu {}", e.cpu));
            return;
        }
        if e.pid == e.tid || !self.procs.contains_key(&pid) {
            self.procs.insert(pid, (e.comm.to_string(), e.host, e.pid));
        }
        self.threads.insert((pid, tid), e.comm.to_string());
    }
}

/// The trace-event JSON of `events` (in time order), with the story's completion → wakeup
/// pairs and post → completion joins (indices into `events`) as flows. `hosts`: the
/// merged captures' host names (processes are named with theirs when there are several)
/// and how each other boot's clock was placed (said in `otherData.clocks`).
pub fn export(events: &[Event], story: &Story, hosts: &[Host]) -> Value {
    let mut t = Timeline::default();
    for (i, e) in events.iter().enumerate() {
        t.event(i, e);
    }
    let mut out = Vec::new();
    t.write(story, hosts, &mut out).expect("writing to memory");
    serde_json::from_slice(&out).expect("the export is JSON")
}

impl Timeline {
    /// Writes the export, with the story's completion → wakeup pairs and post → completion
    /// joins (by the indices `event` was given) as flows. `hosts`: the merged captures' host
    /// names (processes are named with theirs when there are several) and how each other
    /// boot's clock was placed (said in `otherData.clocks`).
    pub(crate) fn write(
        mut self,
        story: &Story,
        hosts: &[Host],
        w: &mut dyn std::io::Write,
    ) -> std::io::Result<()> {
        let woken = self.wakeups(story);
        posts_to_completions(&mut self, story);
        self.slices.extend(woken);
        w.write_all(b"{\"traceEvents\":[")?;
        let mut first = true;
        for m in self.names(hosts) {
            if !std::mem::take(&mut first) {
                w.write_all(b",")?;
            }
            serde_json::to_writer(&mut *w, &m)?;
        }
        let t0 = self.t0.unwrap_or(0);
        for s in &self.slices {
            if !std::mem::take(&mut first) {
                w.write_all(b",")?;
            }
            write_slice(w, s, t0)?;
        }
        // No displayTimeUnit: Perfetto ignores it and counts it in its import stats.
        let mut other = json!({"tool": "rdma-trace"});
        let clocks = clocks(hosts);
        if !clocks.is_empty() {
            other["clocks"] = json!(clocks);
        }
        if self.let_go() > 0 {
            other["open_calls_let_go"] = json!(self.let_go());
        }
        w.write_all(b"],\"otherData\":")?;
        serde_json::to_writer(&mut *w, &other)?;
        w.write_all(b"}")?;
        w.flush()
    }

    /// An arrow from each completion to the wait it ended; the `woken` slices they land on.
    fn wakeups(&mut self, story: &Story) -> Vec<Slice> {
        let mut on_track: HashMap<(u32, u32), Vec<usize>> = HashMap::new();
        for (i, s) in self.slices.iter().enumerate() {
            on_track.entry(s.track).or_default().push(i);
        }
        for list in on_track.values_mut() {
            list.sort_by_key(|&i| self.slices[i].start_ns);
        }
        let mut woken = Vec::new();
        for ps in story.processes.values() {
            for c in &ps.completions {
                let (Some(w), Some(from)) = (c.wakeup, self.slice_of(c.event)) else { continue };
                let Some(to) = self.slice_of(w) else { continue };
                let slices = &mut self.slices;
                if from == to || slices[from].flow.is_some() || slices[to].flow.is_some() {
                    continue;
                }
                self.flows += 1;
                let flow = self.flows;
                slices[from].flow = Some(Flow { id: flow, out: true, into: false });
                let Some(at) = woken_span(slices, &on_track, from, to) else {
                    // No room at the end of the wait: the arrow lands on the wait itself, which
                    // Perfetto keeps as long as the wait began after the completion.
                    slices[to].flow = Some(Flow { id: flow, into: true, out: false });
                    continue;
                };
                let by = serde_json::Map::from_iter([("by".to_string(), json!(slices[from].name.as_str()))]);
                woken.push(Slice {
                    name: crate::event::Name::Other("woken".into()),
                    cat: "completion",
                    track: slices[to].track,
                    start_ns: at.0,
                    end_ns: Some(at.1),
                    args: Args::from_map(&by),
                    flow: Some(Flow { id: flow, into: true, out: false }),
                });
            }
        }
        woken
    }

    /// `process_name` and `thread_name` metadata for every track. With several hosts, each
    /// process's name ends with its host's (`@host-b`), and another host's says its own pid
    /// (the id the viewers print beside it is the export's).
    fn names(&self, hosts: &[Host]) -> Vec<Value> {
        let several = hosts.len() > 1;
        let host_name = |h: u16| hosts.get(usize::from(h)).map_or("?", |h| h.name.as_str());
        let mut out = Vec::new();
        for (&id, (name, host, own)) in &self.procs {
            let name = match (several, *host) {
                (false, _) => name.clone(),
                (true, 0) => format!("{name} @{}", host_name(0)),
                (true, h) if name == "softirq" => format!("softirq @{}", host_name(h)),
                (true, h) => format!("{name} (pid {own}) @{}", host_name(h)),
            };
            out.push(json!({"ph": "M", "name": "process_name", "pid": id, "tid": 0, "args": {"name": name}}));
        }
        out.extend(self.threads.iter().map(|((pid, tid), name)| {
            json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        }));
        out
    }
}

/// One slice as a trace event: complete (`X`) when it ended or carries a flow (flows attach
/// to slices, not instants: an unreturned completion gets a short one), else an instant.
fn write_slice(w: &mut dyn std::io::Write, s: &Slice, t0: u64) -> std::io::Result<()> {
    let us = |ns: u64| ns.saturating_sub(t0) as f64 / 1000.0;
    let (pid, tid) = s.track;
    w.write_all(b"{\"name\":")?;
    serde_json::to_writer(&mut *w, s.name.as_str())?;
    write!(w, ",\"cat\":\"{}\",\"pid\":{pid},\"tid\":{tid},\"ts\":", s.cat)?;
    serde_json::to_writer(&mut *w, &us(s.start_ns))?;
    write!(w, ",\"args\":{{{}}}", s.args.0)?;
    match (s.end_ns, s.flow) {
        (Some(end), _) => {
            w.write_all(b",\"ph\":\"X\",\"dur\":")?;
            serde_json::to_writer(&mut *w, &(end.saturating_sub(s.start_ns) as f64 / 1000.0))?;
        }
        (None, Some(_)) => {
            w.write_all(b",\"ph\":\"X\",\"dur\":")?;
            serde_json::to_writer(&mut *w, &MIN_DUR_US)?;
        }
        (None, None) => w.write_all(b",\"ph\":\"i\",\"s\":\"t\"")?,
    }
    if let Some(f) = s.flow {
        write!(w, ",\"bind_id\":\"{:#x}\"", f.id)?;
        for (set, key) in [(f.into, "flow_in"), (f.out, "flow_out")] {
            if set {
                write!(w, ",\"{key}\":true")?;
            }
        }
    }
    w.write_all(b"}")
}

/// An arrow from each post on one end of a connection to the completion it caused on the
/// other (`story.qps.joins`, across only; the first completion of each post): where the
/// completion already starts the arrow to its wakeup, the post's arrow ends on it under
/// the same id, so post → completion → wakeup is one chain.
fn posts_to_completions(t: &mut Timeline, story: &Story) {
    for j in story.qps.joins.iter().filter(|j| j.across) {
        let (Some(post), Some(done)) = (t.slice_of(j.post), t.slice_of(j.completion)) else {
            continue;
        };
        let slices = &mut t.slices;
        let taken = |f: Option<Flow>, end: fn(Flow) -> bool| f.is_some_and(end);
        if post == done || slices[post].flow.is_some() || taken(slices[done].flow, |f| f.into) {
            continue;
        }
        let id = match slices[done].flow {
            Some(f) => f.id,
            None => {
                t.flows += 1;
                t.flows
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
