//! The joined story of verbs programs: every event attributed to a process — completions
//! through the CQ they were raised on, never by the kworker/softirq pid they ran in —,
//! kernel work nested in the libibverbs call that caused it, and (with the companion
//! workload's step records) each step joined to the kernel events it caused.
//!
//! Pure: events (and steps) in, story out. Time is the events' own clock.

use super::checks::{Check, checks_for};
use crate::event::{Event, EventKind, Path, ProbeId};
use crate::steps::{StepName, StepRecord};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// A libibverbs call (uprobe entry/return) and the kernel events on its thread inside it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Call {
    pub name: String,
    pub tid: u32,
    pub entry: usize,
    pub ret: Option<usize>,
    pub nested: Vec<usize>,
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
    /// Every event attributed to the process (completions included), by index.
    pub events: Vec<usize>,
    pub calls: Vec<Call>,
    pub completions: Vec<Completion>,
    /// Largest sum of pinned bytes (whole pages of live umems) over the run.
    pub pinned_peak_bytes: u64,
    /// RLIMIT_MEMLOCK the pins are charged against (`u64::MAX`: unlimited), when known.
    pub memlock_limit: Option<u64>,
    /// Pins the kernel refused (the umem function returned an error, e.g. -ENOMEM over
    /// the memlock limit).
    pub failed_pins: Vec<usize>,
    /// Syscalls between the end of set-up and the start of teardown, by `name[fd kind]`:
    /// on soft-RoCE the doorbell is a write(2) on the uverbs fd; a NIC's is an MMIO store.
    pub data_phase_syscalls: BTreeMap<String, u64>,
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
    pub unjoined: Vec<usize>,
}

fn is_user_call(e: &Event) -> bool {
    e.path == Path::Verbs
}

fn is_completion(e: &Event) -> bool {
    e.is(ProbeId::CompHandler) && e.kind == EventKind::Entry
}

/// Which process owns each CQ: by the user handle (ibv_create_cq, companion steps) and
/// by the kernel `struct ib_cq *` (the provider's create_cq).
#[derive(Default)]
struct CqOwners {
    by_handle: HashMap<u64, u32>,
    by_kernel_cq: HashMap<u64, u32>,
}

impl CqOwners {
    fn learn(events: &[Event], steps: &[StepRecord]) -> Self {
        let mut o = CqOwners::default();
        for e in events {
            match (e.probe(), e.kind) {
                // The user handle is only set after the driver returns: join by the kernel CQ.
                (Some(ProbeId::RxeCreateCq | ProbeId::Mlx5CreateCq), EventKind::Entry) => {
                    if let Some(c) = e.field("cq") {
                        o.by_kernel_cq.insert(c, e.pid);
                    }
                }
                (Some(ProbeId::IbvCreateCq), EventKind::Return) => {
                    if let Some(h) = e.field("cq").filter(|h| *h != 0) {
                        o.by_handle.insert(h, e.pid);
                    }
                }
                _ => {}
            }
        }
        for s in steps.iter().filter(|s| s.name == StepName::CreateCq) {
            if let Some(cq) = &s.cq {
                o.by_handle.insert(cq.handle, s.pid);
            }
        }
        o
    }

    fn owner(&self, e: &Event) -> Option<u32> {
        let by_handle = e.field("cq_user_handle").and_then(|h| self.by_handle.get(&h));
        by_handle.or_else(|| e.field("cq").and_then(|c| self.by_kernel_cq.get(&c))).copied()
    }
}

/// Indices of `events` in time order (records from different CPUs interleave).
fn time_order(events: &[Event]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..events.len()).collect();
    idx.sort_by_key(|&i| (events[i].ts_ns, i));
    idx
}

/// The story as it is built, one event at a time in time order.
struct Builder<'a> {
    events: &'a [Event],
    /// ibv_get_cq_event returns count as wakeups only where the kernel read was not probed.
    kernel_reads: bool,
    owners: CqOwners,
    story: Story,
    /// libibverbs calls open per thread.
    open_calls: HashMap<u32, Vec<Call>>,
    /// Completions awaiting a wakeup, per process.
    pending: HashMap<u32, VecDeque<usize>>,
    /// Pinned umems (kernel pointer → bytes charged) and the total, per process.
    live_umems: HashMap<u32, HashMap<u64, u64>>,
    pinned: HashMap<u32, u64>,
}

pub fn build(events: &[Event], steps: &[StepRecord]) -> Story {
    let order = time_order(events);
    let mut b = Builder {
        events,
        kernel_reads: events.iter().any(|e| e.is(ProbeId::CompEventRead)),
        owners: CqOwners::learn(events, steps),
        story: Story::default(),
        open_calls: HashMap::new(),
        pending: HashMap::new(),
        live_umems: HashMap::new(),
        pinned: HashMap::new(),
    };
    for &i in &order {
        b.event(i);
    }
    let mut story = b.finish();
    story.steps = join_steps(events, &order, steps, &story);
    story
}

impl Builder<'_> {
    /// The process an event belongs to: a completion's is its CQ's owner.
    fn owner(&self, e: &Event) -> Option<u32> {
        if is_completion(e) { self.owners.owner(e) } else { Some(e.pid) }
    }

    fn event(&mut self, i: usize) {
        let e = &self.events[i];
        let Some(pid) = self.owner(e) else {
            self.story.unjoined.push(i);
            return;
        };
        let ps =
            self.story.processes.entry(pid).or_insert_with(|| ProcessStory { pid, ..Default::default() });
        if e.pid == pid && !is_user_call(e) {
            // The latest name: a forked shell becomes the program it execs.
            ps.comm.clone_from(&e.comm);
        }
        ps.events.push(i);
        if is_completion(e) {
            ps.completions.push(Completion {
                event: i,
                cq_user_handle: e.field("cq_user_handle").unwrap_or(0),
                wakeup: None,
                wakeup_latency_ns: None,
            });
            self.pending.entry(pid).or_default().push_back(ps.completions.len() - 1);
            return;
        }
        if let Some(l) = e.field("memlock_limit") {
            ps.memlock_limit = Some(l);
        }
        self.wakeup(pid, i);
        self.pins(pid, i);
        self.nest(pid, i);
    }

    /// The wakeup: the channel read returning with an event, or ibv_get_cq_event returning,
    /// consumes the oldest completion waiting in its process.
    fn wakeup(&mut self, pid: u32, i: usize) {
        let e = &self.events[i];
        let wakeup = e.kind == EventKind::Return
            && ((e.is(ProbeId::CompEventRead) && e.field("ret").is_some_and(|r| (r as i64) > 0))
                || (e.is(ProbeId::IbvGetCqEvent) && !self.kernel_reads));
        let ps = self.story.processes.get_mut(&pid).expect("placed by event()");
        if wakeup && let Some(ci) = self.pending.get_mut(&pid).and_then(|q| q.pop_front()) {
            let c = &mut ps.completions[ci];
            c.wakeup = Some(i);
            c.wakeup_latency_ns = Some(e.ts_ns.saturating_sub(self.events[c.event].ts_ns));
        }
    }

    /// Pinned bytes over time.
    fn pins(&mut self, pid: u32, i: usize) {
        let e = &self.events[i];
        let ps = self.story.processes.get_mut(&pid).expect("placed by event()");
        let err = |u: Option<u64>| u.and_then(crate::pipeline::render::err_ptr).is_some();
        match (e.probe(), e.kind) {
            (Some(ProbeId::UmemGet), EventKind::Return) if err(e.field("umem")) => ps.failed_pins.push(i),
            (Some(ProbeId::UmemGet), EventKind::Return) => {
                // What the pin charges: whole pages (VmPin), not the byte length.
                let len = e.field("pages").map(|p| p * 4096).or(e.field("umem_length"));
                if let (Some(u), Some(len)) = (e.field("umem"), len) {
                    self.live_umems.entry(pid).or_default().insert(u, len);
                    let now = self.pinned.entry(pid).or_default();
                    *now += len;
                    ps.pinned_peak_bytes = ps.pinned_peak_bytes.max(*now);
                }
            }
            (Some(ProbeId::UmemRelease), EventKind::Entry) => {
                let released =
                    e.field("umem").and_then(|u| self.live_umems.entry(pid).or_default().remove(&u));
                if let Some(len) = released {
                    let now = self.pinned.entry(pid).or_default();
                    *now = now.saturating_sub(len);
                }
            }
            _ => {}
        }
    }

    /// Kernel work nests inside the libibverbs call open on the same thread.
    fn nest(&mut self, pid: u32, i: usize) {
        let e = &self.events[i];
        if !is_user_call(e) {
            if let Some(c) = self.open_calls.get_mut(&e.tid).and_then(|s| s.last_mut()) {
                c.nested.push(i);
            }
            return;
        }
        let stack = self.open_calls.entry(e.tid).or_default();
        match e.kind {
            EventKind::Entry => {
                stack.push(Call { name: e.name.clone(), tid: e.tid, entry: i, ret: None, nested: vec![] })
            }
            EventKind::Return => {
                if let Some(pos) = stack.iter().rposition(|c| c.name == e.name) {
                    let mut c = stack.remove(pos);
                    c.ret = Some(i);
                    self.story.processes.get_mut(&pid).expect("placed by event()").calls.push(c);
                }
            }
            _ => {}
        }
    }

    /// Calls still open when the trace stopped are kept; calls in time order; the
    /// data-phase syscalls of each process.
    fn finish(mut self) -> Story {
        let events = self.events;
        for c in self.open_calls.into_values().flatten() {
            let pid = events[c.entry].pid;
            self.story
                .processes
                .entry(pid)
                .or_insert_with(|| ProcessStory { pid, ..Default::default() })
                .calls
                .push(c);
        }
        for ps in self.story.processes.values_mut() {
            ps.calls.sort_by_key(|c| events[c.entry].ts_ns);
            ps.data_phase_syscalls = data_phase(events, &ps.events);
        }
        self.story
    }
}

/// Set-up ends with the last CQ/QP/MR creation; teardown starts with the first release.
fn data_phase(events: &[Event], mine: &[usize]) -> BTreeMap<String, u64> {
    use ProbeId::*;
    let setup = [RxeCreateCq, Mlx5CreateCq, UmemGet, UverbsMmap, IbvCreateQp];
    let teardown = [UmemRelease, MrDereg, IbvDeregMr];
    let start = mine.iter().filter(|&&i| events[i].is_any(&setup)).map(|&i| events[i].ts_ns).max();
    let end = mine.iter().filter(|&&i| events[i].is_any(&teardown)).map(|&i| events[i].ts_ns).min();
    let (Some(start), end) = (start, end.unwrap_or(u64::MAX)) else {
        return BTreeMap::new();
    };
    let mut out = BTreeMap::new();
    for &i in mine {
        let e = &events[i];
        if e.kind == EventKind::SyscallEnter && e.ts_ns > start && e.ts_ns < end {
            let key = match &e.fd_kind {
                Some(k) if k == "uverbs" || k == "comp_channel" || k == "rdma_cm" => {
                    format!("{}[{k}]", e.name)
                }
                _ => e.name.clone(),
            };
            *out.entry(key).or_default() += 1;
        }
    }
    out
}

/// Each companion step gets the events of its thread inside its time window; a
/// get_cq_event step also gets the completion its wakeup consumed.
fn join_steps(events: &[Event], order: &[usize], steps: &[StepRecord], story: &Story) -> Vec<StepJoin> {
    let mut out = Vec::new();
    for (si, s) in steps.iter().enumerate() {
        if s.name == StepName::Start {
            continue;
        }
        let mut mine: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&i| {
                let e = &events[i];
                e.tid == s.tid && e.ts_ns >= s.t_start_ns && e.ts_ns <= s.t_end_ns && !is_completion(e)
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
