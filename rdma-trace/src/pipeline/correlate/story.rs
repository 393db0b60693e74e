//! The joined story of verbs programs: every event attributed to a process — completions
//! through the CQ they were raised on, never by the kworker/softirq pid they ran in —,
//! kernel work nested in the libibverbs call that caused it, and (with the companion
//! workload's step records) each step joined to the kernel events it caused.
//!
//! Pure: events (and steps) in, story out. Time is the events' own clock. The builder takes
//! one event at a time in time order (`live::Live` feeds it, bounded); `build` is the whole
//! capture at once.

use super::checks::{Check, checks_for};
use super::live::{Events, Limits, Live};
use super::mmaps::{Named, Namer, Queue};
use crate::capture::{Mapping, PinnedRange, ProcessState, State};
use crate::event::{Event, EventKind, Path, ProbeId};
use crate::steps::{StepName, StepRecord};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// A libibverbs call (uprobe entry/return) and the kernel events on its thread inside it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Call {
    pub name: crate::event::Name,
    pub tid: u32,
    pub entry: usize,
    pub ret: Option<usize>,
    pub nested: Vec<usize>,
    #[serde(skip)]
    pid: u32,
    #[serde(skip)]
    entry_ts_ns: u64,
}

/// A completion event and, when seen, the workload's wakeup that consumed it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Completion {
    pub event: usize,
    pub cq_user_handle: u64,
    /// The completion-channel read (or ibv_get_cq_event) return that delivered it.
    pub wakeup: Option<usize>,
    pub wakeup_latency_ns: Option<u64>,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ProcessStory {
    pub pid: u32,
    pub comm: String,
    /// Its latest event's time.
    pub last_ts_ns: u64,
    /// Events attributed to the process (completions included), by index: the newest
    /// `Limits::per_list`; `event_count` counts them all.
    pub events: VecDeque<usize>,
    pub event_count: u64,
    /// Its libibverbs calls (the newest kept; `calls_total` counts them all).
    pub calls: VecDeque<Call>,
    pub calls_total: u64,
    pub completions: VecDeque<Completion>,
    pub completions_total: u64,
    /// Wakeup latencies (ns) of its completions, in order (up to `Limits::per_list`).
    pub wakeup_latencies_ns: Vec<u64>,
    /// Completions by the context they ran in (kworker, softirq, process).
    pub completions_by_context: BTreeMap<String, u64>,
    /// How long the umem function took per pin, and completion → wakeup.
    pub pin_latency: Histogram,
    pub wakeup_latency: Histogram,
    /// Pins the kernel made (the umem function returned a umem).
    pub pins_total: u64,
    /// Largest sum of pinned bytes (whole pages of live umems) over the run.
    pub pinned_peak_bytes: u64,
    /// Bytes pinned now (live umems).
    pub pinned_bytes: u64,
    /// RLIMIT_MEMLOCK the pins are charged against (`u64::MAX`: unlimited), when known.
    pub memlock_limit: Option<u64>,
    /// Pins the kernel refused (the umem function returned an error, e.g. -ENOMEM over
    /// the memlock limit).
    pub failed_pins: VecDeque<usize>,
    pub failed_pins_total: u64,
    /// Its uverbs mappings, the newest kept (`mappings_total` counts them all).
    pub mappings: VecDeque<MapStory>,
    pub mappings_total: u64,
    /// Syscalls between the end of set-up and the start of teardown, by `name[fd kind]`:
    /// on soft-RoCE the doorbell is a write(2) on the uverbs fd; a NIC's is an MMIO store.
    pub data_phase_syscalls: BTreeMap<String, u64>,
}

/// A uverbs mapping: the mmap that made it, the verbs call it was made in, and what it
/// maps where that is known (see `mmaps`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct MapStory {
    /// The `uverbs_mmap` entry.
    pub event: usize,
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    pub call: Option<crate::event::Name>,
    pub queue: Option<Queue>,
    /// A munmap of its start was seen.
    pub unmapped: bool,
}

/// Latencies in fixed buckets (upper bounds in ns), with their count and sum: what a
/// metrics endpoint serves as a histogram.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Histogram {
    /// Counts per bucket of `BUCKETS_NS` (not cumulative), the last for larger values.
    pub counts: Vec<u64>,
    pub count: u64,
    pub sum_ns: u64,
}

/// 1 µs to 1 s, about three buckets a decade.
pub const BUCKETS_NS: [u64; 16] = [
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    50_000_000,
    250_000_000,
    1_000_000_000,
];

impl Histogram {
    pub fn observe(&mut self, ns: u64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS_NS.len() + 1];
        }
        let b = BUCKETS_NS.iter().position(|&u| ns <= u).unwrap_or(BUCKETS_NS.len());
        self.counts[b] += 1;
        self.count += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }
}

/// A companion step and the kernel events it caused.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StepJoin {
    pub step: usize,
    pub events: Vec<usize>,
    pub checks: Vec<Check>,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Story {
    pub processes: BTreeMap<u32, ProcessStory>,
    pub steps: Vec<StepJoin>,
    /// Events no process could be found for (completions on CQs created before the trace).
    pub unjoined: VecDeque<usize>,
    pub unjoined_total: u64,
    /// Events no longer kept for lookups (a bounded story on a long stream).
    pub evicted_events: u64,
    /// Companion steps no longer kept (the oldest, past `Limits::per_list`).
    pub evicted_steps: u64,
    /// Processes no longer followed (the quietest, past `Limits::processes`).
    pub retired_processes: u64,
}

fn is_user_call(e: &Event) -> bool {
    e.path == Path::Verbs
}

fn is_completion(e: &Event) -> bool {
    e.is(ProbeId::CompHandler) && e.kind == EventKind::Entry
}

/// Appends to a bounded list, letting the oldest go.
pub fn push_capped<T>(list: &mut VecDeque<T>, cap: usize, v: T) {
    list.push_back(v);
    if list.len() > cap {
        list.pop_front();
    }
}

/// Which process owns each CQ: by the user handle (ibv_create_cq, companion steps) and
/// by the kernel `struct ib_cq *` (the provider's create_cq), learned as they are seen.
#[derive(Default)]
struct CqOwners {
    by_handle: HashMap<u64, u32>,
    by_kernel_cq: HashMap<u64, u32>,
}

impl CqOwners {
    fn from_steps(steps: &[StepRecord]) -> Self {
        let mut o = CqOwners::default();
        for s in steps.iter().filter(|s| s.name == StepName::CreateCq) {
            if let Some(cq) = &s.cq {
                o.by_handle.insert(cq.handle, s.pid);
            }
        }
        o
    }

    fn learn(&mut self, e: &Event) {
        match (e.probe(), e.kind) {
            // The user handle is only set after the driver returns: join by the kernel CQ.
            (Some(ProbeId::RxeCreateCq | ProbeId::Mlx5CreateCq), EventKind::Entry) => {
                if let Some(c) = e.field("cq") {
                    self.by_kernel_cq.insert(c, e.pid);
                }
            }
            (Some(ProbeId::IbvCreateCq), EventKind::Return) => {
                if let Some(h) = e.field("cq").filter(|h| *h != 0) {
                    self.by_handle.insert(h, e.pid);
                }
            }
            _ => {}
        }
    }

    fn owner(&self, e: &Event) -> Option<u32> {
        let by_handle = e.field("cq_user_handle").and_then(|h| self.by_handle.get(&h));
        by_handle.or_else(|| e.field("cq").and_then(|c| self.by_kernel_cq.get(&c))).copied()
    }
}

/// Set-up ends with the last CQ/QP/MR creation; teardown starts with the first release.
/// Kept as it goes: a later set-up event clears what was counted before it (those
/// syscalls were still set-up), the first teardown event closes the count.
#[derive(Default)]
struct Phase {
    setup_done_at: Option<u64>,
    teardown_at: Option<u64>,
}

const SETUP: [ProbeId; 5] = [
    ProbeId::RxeCreateCq,
    ProbeId::Mlx5CreateCq,
    ProbeId::UmemGet,
    ProbeId::UverbsMmap,
    ProbeId::IbvCreateQp,
];
const TEARDOWN: [ProbeId; 3] = [ProbeId::UmemRelease, ProbeId::MrDereg, ProbeId::IbvDeregMr];

/// The story as it is built, one event at a time in time order.
pub(super) struct Builder {
    per_list: usize,
    max_processes: usize,
    /// ibv_get_cq_event returns count as wakeups only where the kernel read is probed
    /// (seen so far: its entry comes before the library call returns).
    kernel_reads: bool,
    owners: CqOwners,
    story: Story,
    /// libibverbs calls open per thread.
    open_calls: HashMap<u32, Vec<Call>>,
    /// Completions awaiting a wakeup, per process: (completion number, its time).
    pending: HashMap<u32, VecDeque<(u64, u64)>>,
    /// Pinned umems (kernel pointer → the range and bytes charged), per process.
    live_umems: HashMap<u32, HashMap<u64, PinnedRange>>,
    /// uverbs mappings by start address, per process (a munmap of the start ends one).
    mappings: HashMap<u32, BTreeMap<u64, Mapping>>,
    /// What each mapping maps.
    namer: Namer,
    phases: HashMap<u32, Phase>,
}

/// The whole capture at once: every event kept, all sorted by time before joining.
pub fn build(events: &[Event], steps: &[StepRecord]) -> Story {
    let mut live = Live::new(steps.to_vec(), Limits::unbounded());
    for e in events {
        live.push(e.clone());
    }
    live.finish().0
}

impl Builder {
    pub(super) fn new(steps: &[StepRecord], per_list: usize, max_processes: usize) -> Self {
        let mut namer = Namer::default();
        for s in steps {
            namer.step(s);
        }
        Builder {
            per_list,
            max_processes,
            kernel_reads: false,
            owners: CqOwners::from_steps(steps),
            story: Story::default(),
            open_calls: HashMap::new(),
            pending: HashMap::new(),
            live_umems: HashMap::new(),
            mappings: HashMap::new(),
            namer,
            phases: HashMap::new(),
        }
    }

    pub(super) fn learn_steps(&mut self, steps: &[StepRecord]) {
        let o = CqOwners::from_steps(steps);
        self.owners.by_handle.extend(o.by_handle);
        for s in steps {
            let named = self.namer.step(s);
            self.name(named);
        }
    }

    /// Mappings named (or their object learned): the story's rows and the state's.
    fn name(&mut self, named: Vec<Named>) {
        for n in named {
            if let Some(m) = self.mappings.get_mut(&n.pid).and_then(|m| m.get_mut(&n.start)) {
                m.what = Some(n.queue.to_string());
            }
            let rows = self.story.processes.get_mut(&n.pid).map(|p| &mut p.mappings);
            if let Some(row) = rows.and_then(|r| r.iter_mut().rev().find(|r| r.start == n.start)) {
                row.queue = Some(n.queue);
            }
        }
    }

    /// The process an event belongs to: a completion's is its CQ's owner.
    fn owner(&self, e: &Event) -> Option<u32> {
        if is_completion(e) { self.owners.owner(e) } else { Some(e.pid) }
    }

    /// Joins event `i` (the next in time order).
    pub(super) fn event(&mut self, i: usize, e: &Event) {
        self.owners.learn(e);
        // Before anything returns early: a completion can name a mapping too.
        let named = self.namer.event(e);
        self.name(named);
        self.kernel_reads |= e.is(ProbeId::CompEventRead);
        let Some(pid) = self.owner(e) else {
            push_capped(&mut self.story.unjoined, self.per_list, i);
            self.story.unjoined_total += 1;
            return;
        };
        if !self.story.processes.contains_key(&pid) && self.story.processes.len() >= self.max_processes {
            self.retire_quietest();
        }
        let ps =
            self.story.processes.entry(pid).or_insert_with(|| ProcessStory { pid, ..Default::default() });
        ps.last_ts_ns = e.ts_ns;
        if e.pid == pid && !is_user_call(e) {
            // The latest name: a forked shell becomes the program it execs.
            ps.comm.clone_from(&e.comm);
        }
        push_capped(&mut ps.events, self.per_list, i);
        ps.event_count += 1;
        if is_completion(e) {
            push_capped(
                &mut ps.completions,
                self.per_list,
                Completion {
                    event: i,
                    cq_user_handle: e.field("cq_user_handle").unwrap_or(0),
                    wakeup: None,
                    wakeup_latency_ns: None,
                },
            );
            self.pending.entry(pid).or_default().push_back((ps.completions_total, e.ts_ns));
            ps.completions_total += 1;
            let ctx = e.context.map(|c| format!("{c:?}").to_lowercase()).unwrap_or_else(|| "unknown".into());
            *ps.completions_by_context.entry(ctx).or_default() += 1;
            return;
        }
        if let Some(l) = e.field("memlock_limit") {
            ps.memlock_limit = Some(l);
        }
        self.wakeup(pid, i, e);
        self.pins(pid, i, e);
        self.maps(pid, i, e);
        self.phase(pid, e);
        self.nest(pid, i, e);
    }

    pub(super) fn processes(&self) -> &BTreeMap<u32, ProcessStory> {
        &self.story.processes
    }

    /// Forgets the process quiet longest, and everything kept for it.
    fn retire_quietest(&mut self) {
        let Some(pid) = self.story.processes.values().min_by_key(|p| p.last_ts_ns).map(|p| p.pid) else {
            return;
        };
        self.story.processes.remove(&pid);
        self.story.retired_processes += 1;
        self.pending.remove(&pid);
        self.live_umems.remove(&pid);
        self.mappings.remove(&pid);
        self.phases.remove(&pid);
        self.open_calls.retain(|_, calls| {
            calls.retain(|c| c.pid != pid);
            !calls.is_empty()
        });
        self.owners.by_handle.retain(|_, owner| *owner != pid);
        self.owners.by_kernel_cq.retain(|_, owner| *owner != pid);
    }

    fn process(&mut self, pid: u32) -> &mut ProcessStory {
        self.story.processes.get_mut(&pid).expect("placed by event()")
    }

    /// The wakeup: the channel read returning with an event, or ibv_get_cq_event returning,
    /// consumes the oldest completion waiting in its process.
    fn wakeup(&mut self, pid: u32, i: usize, e: &Event) {
        let wakeup = e.kind == EventKind::Return
            && ((e.is(ProbeId::CompEventRead) && e.field("ret").is_some_and(|r| (r as i64) > 0))
                || (e.is(ProbeId::IbvGetCqEvent) && !self.kernel_reads));
        if !wakeup {
            return;
        }
        let Some((n, at)) = self.pending.get_mut(&pid).and_then(|q| q.pop_front()) else { return };
        let per_list = self.per_list;
        let ps = self.process(pid);
        let latency = e.ts_ns.saturating_sub(at);
        ps.wakeup_latency.observe(latency);
        if ps.wakeup_latencies_ns.len() < per_list {
            ps.wakeup_latencies_ns.push(latency);
        }
        // The completion itself, if it is still in the kept list.
        let first_kept = ps.completions_total - ps.completions.len() as u64;
        if let Some(c) = n.checked_sub(first_kept).and_then(|k| ps.completions.get_mut(k as usize)) {
            c.wakeup = Some(i);
            c.wakeup_latency_ns = Some(latency);
        }
    }

    /// Pinned bytes over time.
    fn pins(&mut self, pid: u32, i: usize, e: &Event) {
        let per_list = self.per_list;
        let err = |u: Option<u64>| u.and_then(crate::pipeline::render::err_ptr).is_some();
        match (e.probe(), e.kind) {
            (Some(ProbeId::UmemGet), EventKind::Return) if err(e.field("umem")) => {
                let ps = self.process(pid);
                push_capped(&mut ps.failed_pins, per_list, i);
                ps.failed_pins_total += 1;
            }
            (Some(ProbeId::UmemGet), EventKind::Return) => {
                let ps = self.process(pid);
                ps.pins_total += 1;
                if let Some(l) = e.latency_ns {
                    ps.pin_latency.observe(l);
                }
                // What the pin charges: whole pages (VmPin), not the byte length.
                let len = e.field("pages").map(|p| p * crate::units::PAGE).or(e.field("umem_length"));
                if let (Some(u), Some(len)) = (e.field("umem"), len) {
                    let range = PinnedRange {
                        addr: e.field("umem_address").unwrap_or(0),
                        length: e.field("umem_length").unwrap_or(0),
                        charged: len,
                        umem: Some(u),
                        ..Default::default()
                    };
                    self.live_umems.entry(pid).or_default().insert(u, range);
                    let ps = self.process(pid);
                    ps.pinned_bytes += len;
                    ps.pinned_peak_bytes = ps.pinned_peak_bytes.max(ps.pinned_bytes);
                }
            }
            (Some(ProbeId::UmemRelease), EventKind::Entry) => {
                let released =
                    e.field("umem").and_then(|u| self.live_umems.entry(pid).or_default().remove(&u));
                if let Some(r) = released {
                    let ps = self.process(pid);
                    ps.pinned_bytes = ps.pinned_bytes.saturating_sub(r.charged);
                }
            }
            _ => {}
        }
    }

    /// The mapping inventory: uverbs mmaps in, munmaps of their start out.
    fn maps(&mut self, pid: u32, i: usize, e: &Event) {
        if e.is(ProbeId::UverbsMmap) && e.kind == EventKind::Entry {
            if let (Some(start), Some(end)) = (e.field("vm_start"), e.field("vm_end")) {
                let pgoff = e.field("vm_pgoff").unwrap_or(0);
                self.mappings
                    .entry(pid)
                    .or_default()
                    .insert(start, Mapping { start, end, pgoff, what: None });
                let call = self.open_calls.get(&e.tid).and_then(|c| c.last()).map(|c| c.name.clone());
                let row = MapStory { event: i, start, end, pgoff, call, queue: None, unmapped: false };
                let per_list = self.per_list;
                let ps = self.process(pid);
                push_capped(&mut ps.mappings, per_list, row);
                ps.mappings_total += 1;
            }
        } else if e.kind == EventKind::SyscallEnter
            && e.name == "munmap"
            && let Some(addr) = e.field("addr")
            && let Some(maps) = self.mappings.get_mut(&pid)
            && maps.remove(&addr).is_some()
            && let Some(row) = self.process(pid).mappings.iter_mut().rev().find(|r| r.start == addr)
        {
            row.unmapped = true;
        }
    }

    /// What exists now, per process: pinned ranges and mappings (for a late subscriber).
    pub(super) fn state(&self, ts_ns: u64) -> State {
        let processes = self
            .story
            .processes
            .values()
            .filter(|p| !p.comm.starts_with("kworker"))
            .map(|p| {
                let mut mrs: Vec<PinnedRange> =
                    self.live_umems.get(&p.pid).map(|m| m.values().cloned().collect()).unwrap_or_default();
                mrs.sort_by_key(|r| r.addr);
                ProcessState {
                    pid: p.pid,
                    comm: p.comm.clone(),
                    pinned_bytes: p.pinned_bytes,
                    memlock_limit: p.memlock_limit,
                    mrs,
                    mappings: self
                        .mappings
                        .get(&p.pid)
                        .map(|m| m.values().cloned().collect())
                        .unwrap_or_default(),
                    completions: p.completions_total,
                    seeded: false,
                }
            })
            .collect();
        State { v: crate::capture::VERSION, seq: 0, ty: "state".into(), ts_ns, processes }
    }

    /// The data-phase syscalls (see `Phase`).
    fn phase(&mut self, pid: u32, e: &Event) {
        let ph = self.phases.entry(pid).or_default();
        if e.is_any(&SETUP) {
            ph.setup_done_at = Some(e.ts_ns);
            self.story.processes.get_mut(&pid).expect("placed by event()").data_phase_syscalls.clear();
            return;
        }
        if e.is_any(&TEARDOWN) {
            ph.teardown_at.get_or_insert(e.ts_ns);
            return;
        }
        let in_phase = ph.setup_done_at.is_some_and(|s| e.ts_ns > s) && ph.teardown_at.is_none();
        if e.kind == EventKind::SyscallEnter && in_phase {
            let key = match &e.fd_kind {
                Some(k) if k == "uverbs" || k == "comp_channel" || k == "rdma_cm" => {
                    format!("{}[{k}]", e.name)
                }
                _ => e.name.to_string(),
            };
            *self.process(pid).data_phase_syscalls.entry(key).or_default() += 1;
        }
    }

    /// Kernel work nests inside the libibverbs call open on the same thread.
    fn nest(&mut self, pid: u32, i: usize, e: &Event) {
        if !is_user_call(e) {
            if let Some(c) = self.open_calls.get_mut(&e.tid).and_then(|s| s.last_mut()) {
                c.nested.push(i);
            }
            return;
        }
        let stack = self.open_calls.entry(e.tid).or_default();
        match e.kind {
            EventKind::Entry => stack.push(Call {
                name: e.name.clone(),
                tid: e.tid,
                entry: i,
                ret: None,
                nested: vec![],
                pid: e.pid,
                entry_ts_ns: e.ts_ns,
            }),
            EventKind::Return => {
                if let Some(pos) = stack.iter().rposition(|c| c.name == e.name) {
                    let mut c = stack.remove(pos);
                    c.ret = Some(i);
                    let per_list = self.per_list;
                    let ps = self.process(pid);
                    push_capped(&mut ps.calls, per_list, c);
                    ps.calls_total += 1;
                }
            }
            _ => {}
        }
    }

    /// The story now: calls still open are shown (in time order with the others), and
    /// the companion's steps joined to the events kept.
    pub(super) fn snapshot(&self, events: &dyn Events, steps: &[StepRecord]) -> Story {
        let mut story = self.story.clone();
        for c in self.open_calls.values().flatten() {
            let ps = story
                .processes
                .entry(c.pid)
                .or_insert_with(|| ProcessStory { pid: c.pid, ..Default::default() });
            ps.calls.push_back(c.clone());
            ps.calls_total += 1;
        }
        for ps in story.processes.values_mut() {
            ps.calls.make_contiguous().sort_by_key(|c| c.entry_ts_ns);
        }
        story.steps = join_steps(events, steps, &story);
        story
    }
}

/// Each companion step gets the events of its thread inside its time window; a
/// get_cq_event step also gets the completion its wakeup consumed.
fn join_steps(events: &dyn Events, steps: &[StepRecord], story: &Story) -> Vec<StepJoin> {
    if steps.is_empty() {
        return Vec::new();
    }
    let mut order: Vec<(u64, usize)> = events.all().map(|(i, e)| (e.ts_ns, i)).collect();
    order.sort_unstable();
    let mut out = Vec::new();
    for (si, s) in steps.iter().enumerate() {
        if s.name == StepName::Start {
            continue;
        }
        // Only the events inside the step's window are looked at (a long stream keeps many).
        let from = order.partition_point(|&(t, _)| t < s.t_start_ns);
        let to = order.partition_point(|&(t, _)| t <= s.t_end_ns);
        let mut mine: Vec<usize> = order[from..to.max(from)]
            .iter()
            .map(|&(_, i)| i)
            .filter(|&i| {
                events.ev(i).is_some_and(|e| {
                    e.tid == s.tid && e.ts_ns >= s.t_start_ns && e.ts_ns <= s.t_end_ns && !is_completion(e)
                })
            })
            .collect();
        if let Some(ps) = story.processes.get(&s.pid) {
            for c in &ps.completions {
                if c.wakeup.is_some_and(|w| mine.contains(&w)) {
                    mine.push(c.event);
                }
            }
        }
        let checks = checks_for(s, &mine, events);
        out.push(StepJoin { step: si, events: mine, checks });
    }
    out
}

/// Reads a step file (see `parse_steps`); errors name the file and line.
pub fn read_steps(path: &std::path::Path) -> Result<Vec<StepRecord>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    parse_steps(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses the companion's step records (JSON Lines); an error names the line.
pub fn parse_steps(text: &str) -> Result<Vec<StepRecord>, String> {
    crate::event::parse_lines(text, |s: &StepRecord| s.v, crate::steps::VERSION, "step record")
}
