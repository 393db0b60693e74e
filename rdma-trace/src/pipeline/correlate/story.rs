//! The joined story of verbs programs: every event attributed to a process — completions
//! through the CQ they were raised on, never by the kworker/softirq pid they ran in —,
//! kernel work nested in the libibverbs call that caused it, and (with the companion
//! workload's step records) each step joined to the kernel events it caused.
//!
//! Pure: events (and steps) in, story out. Time is the events' own clock. The builder takes
//! one event at a time in time order (`engine::Engine` feeds it, bounded); `engine::build` is the whole
//! capture at once.

use super::checks::{Check, checks_for};
use super::cqs::{CqRows, Cqs, RanIn, Samples};
use super::kept::Events;
use super::mmaps::{Named, Namer};
use super::pins::Pins;
use super::qps::{PostJoin, QpStory, Qps};
pub use super::rows::{BUCKETS_NS, Call, Completion, Histogram, MapStory, ProcessStory};
use crate::capture::{CqState, Mapping, PinnedRange, ProcessState, State};
use crate::event::FieldId;
use crate::event::Task;
use crate::event::{Event, EventKind, Path, ProbeId};
use crate::steps::{StepName, StepRecord};
use crate::util::push_capped;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// A companion step, joined once the story has passed its end: the kernel events it
/// caused, and its checks as judged then.
#[derive(Clone, Debug)]
pub(crate) struct Joined {
    pub step: StepRecord,
    pub events: Vec<usize>,
    pub checks: Vec<Check>,
}

/// A companion step and the kernel events it caused.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StepJoin {
    pub step: usize,
    pub events: Vec<usize>,
    pub checks: Vec<Check>,
}

/// What the engine knows of a run: its processes, CQs, QPs, the companion's steps joined
/// to their events, and what it let go of.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Story {
    pub processes: BTreeMap<Task, ProcessStory>,
    /// Every CQ a completion was seen on, owner known or not.
    pub cqs: CqRows,
    /// Every QP seen modified or posted on, paired with its peer, its completions joined
    /// to the posts that caused them.
    pub qps: QpStory,
    /// The newest pin latencies and completion → wakeup latencies of the whole run.
    pub pin_ns: Samples,
    pub wakeup_ns: Samples,
    pub steps: Vec<StepJoin>,
    /// Events no process could be found for (completions on CQs created before the trace).
    pub unjoined: VecDeque<usize>,
    pub unjoined_total: u64,
    /// Events no longer kept for lookups (a bounded story on a long stream).
    pub evicted_events: u64,
    /// Companion steps no longer kept (the oldest, past `Limits::per_list`).
    pub evicted_steps: u64,
    /// libibverbs calls let go while open (past `calls::MAX_OPEN` on one thread, after
    /// their returns were lost): they are not in their process's calls.
    pub calls_let_go: u64,
    /// Processes no longer followed (the quietest, past `Limits::processes`), and the
    /// events they had.
    pub retired_processes: u64,
    pub retired_events: u64,
    /// Every event the story was told: each is a process's, unjoined, or a retired
    /// process's.
    pub events_total: u64,
}

impl Story {
    /// The name of process `pid` as the story knows it (empty if it does not).
    pub(crate) fn comm(&self, pid: Task) -> String {
        self.processes.get(&pid).map(|p| p.comm.clone()).unwrap_or_default()
    }

    /// The story with its event indexes moved by `to` (an index no longer kept: `None`,
    /// and what names only it is let go): for readers that hold the events as a slice.
    pub(crate) fn reindexed(mut self, to: &dyn Fn(usize) -> Option<usize>) -> Story {
        let all = |v: &mut VecDeque<usize>| *v = v.iter().filter_map(|&i| to(i)).collect();
        for ps in self.processes.values_mut() {
            all(&mut ps.events);
            all(&mut ps.failed_pins);
            ps.calls.retain_mut(|c| {
                let Some(entry) = to(c.entry) else { return false };
                c.entry = entry;
                c.ret = c.ret.and_then(to);
                c.nested = c.nested.iter().filter_map(|&i| to(i)).collect();
                true
            });
            ps.completions.retain_mut(|c| {
                let Some(event) = to(c.event) else { return false };
                c.event = event;
                c.wakeup = c.wakeup.and_then(to);
                true
            });
            ps.mappings.iter_mut().for_each(|m| m.event = m.event.and_then(to));
            ps.mrs.iter_mut().for_each(|m| m.event = m.event.and_then(to));
        }
        self.cqs.values_mut().for_each(|c| c.latest = c.latest.and_then(to));
        self.qps.joins = self
            .qps
            .joins
            .iter()
            .filter_map(|j| Some(PostJoin { post: to(j.post)?, completion: to(j.completion)?, ..*j }))
            .collect();
        all(&mut self.unjoined);
        for j in &mut self.steps {
            j.events = j.events.iter().filter_map(|&i| to(i)).collect();
        }
        self
    }
}

fn is_user_call(e: &Event) -> bool {
    e.path == Path::Verbs
}

fn is_completion(e: &Event) -> bool {
    e.is(ProbeId::CompHandler) && e.kind == EventKind::Entry
}

/// Which process owns each CQ: by the user handle (ibv_create_cq, companion steps) and
/// by the kernel `struct ib_cq *` (the provider's create_cq), learned as they are seen;
/// and the fd of the completion channel each handle was made with.
#[derive(Default)]
struct CqOwners {
    by_handle: HashMap<u64, Task>,
    by_kernel_cq: HashMap<u64, Task>,
    /// Per user handle in `by_handle` made with a channel: the channel's fd.
    channel_fds: HashMap<u64, i32>,
    /// Per (process, `struct ibv_comp_channel *`): its fd (ibv_create_comp_channel).
    channels: HashMap<(Task, u64), i32>,
    /// Per thread in ibv_create_cq: the channel it was given.
    making: HashMap<Task, u64>,
}

impl CqOwners {
    fn from_steps(steps: &[StepRecord]) -> Self {
        let mut o = CqOwners::default();
        for s in steps.iter().filter(|s| s.name == StepName::CreateCq) {
            if let Some(cq) = &s.cq {
                o.by_handle.insert(cq.handle, s.process());
                if let Some(fd) = cq.channel_fd {
                    o.channel_fds.insert(cq.handle, fd);
                }
            }
        }
        o
    }

    /// The fd of the channel the CQ completion `e` is for was made with.
    fn channel_fd(&self, e: &Event) -> Option<i32> {
        super::cqs::cq_handle(e).and_then(|h| self.channel_fds.get(&h)).copied()
    }

    /// A process is gone: what it made goes with it.
    fn retire(&mut self, pid: Task) {
        self.by_handle.retain(|_, owner| *owner != pid);
        self.by_kernel_cq.retain(|_, owner| *owner != pid);
        self.channel_fds.retain(|h, _| self.by_handle.contains_key(h));
        self.channels.retain(|(owner, _), _| *owner != pid);
    }

    fn learn(&mut self, e: &Event) {
        match (e.probe(), e.kind) {
            // The user handle is only set after the driver returns: join by the kernel CQ.
            (Some(ProbeId::RxeCreateCq | ProbeId::Mlx5CreateCq), EventKind::Entry) => {
                if let Some(c) = e.field(FieldId::Cq) {
                    self.by_kernel_cq.insert(c, e.process());
                }
            }
            (Some(ProbeId::IbvCreateCompChannel), EventKind::Return) => {
                if let (Some(ch), Some(fd)) =
                    (e.field(FieldId::Channel).filter(|c| *c != 0), e.field(FieldId::Fd))
                {
                    self.channels.insert((e.process(), ch), fd as i32);
                }
            }
            (Some(ProbeId::IbvCreateCq), EventKind::Entry) => {
                self.making.insert(e.thread(), e.field(FieldId::Channel).unwrap_or(0));
            }
            (Some(ProbeId::IbvCreateCq), EventKind::Return) => {
                let channel = self.making.remove(&e.thread()).filter(|c| *c != 0);
                if let Some(h) = e.field(FieldId::Cq).filter(|h| *h != 0) {
                    self.by_handle.insert(h, e.process());
                    // A handle the allocator gave again: the new CQ's channel, or none.
                    match channel.and_then(|c| self.channels.get(&(e.process(), c))) {
                        Some(&fd) => self.channel_fds.insert(h, fd),
                        None => self.channel_fds.remove(&h),
                    };
                }
            }
            _ => {}
        }
    }

    /// The CQs as a late subscriber is told them: each CQ a completion was seen on (its
    /// row), and each whose maker is known, by either pointer.
    fn state(&self, rows: &super::cqs::CqRows) -> Vec<CqState> {
        let mut out: Vec<CqState> = rows
            .values()
            .map(|r| (r, r.pid.or_else(|| self.by_kernel_cq.get(&r.kernel).copied())))
            .map(|(r, owner)| CqState {
                kernel: r.kernel,
                handle: r.handle,
                pid: owner.map(|t| t.pid),
                host: owner.map_or(r.host, |t| t.host),
                completions: r.completions,
                channel_fd: r.channel_fd.or_else(|| self.channel_fds.get(&r.handle).copied()),
                via_peer_qpn: r.via_peer.map(|k| k.qpn),
                via_own_qpn: r.via_own.map(|k| k.qpn),
            })
            .collect();
        let mut kernels: Vec<(&u64, &Task)> = self.by_kernel_cq.iter().collect();
        kernels.sort_unstable();
        for (&kernel, &t) in kernels {
            if !out.iter().any(|c| c.kernel == kernel) {
                out.push(CqState { kernel, pid: Some(t.pid), host: t.host, ..Default::default() });
            }
        }
        let mut handles: Vec<(&u64, &Task)> = self.by_handle.iter().collect();
        handles.sort_unstable();
        for (&handle, &t) in handles {
            let channel_fd = self.channel_fds.get(&handle).copied();
            match out.iter_mut().find(|c| c.handle == handle) {
                Some(c) if c.pid.is_none() => (c.pid, c.host) = (Some(t.pid), t.host),
                Some(_) => {}
                None => out.push(CqState {
                    handle,
                    pid: Some(t.pid),
                    host: t.host,
                    channel_fd,
                    ..Default::default()
                }),
            }
        }
        out
    }

    /// What a daemon said: each CQ's maker, by whichever pointer it was known.
    fn seed(&mut self, cqs: &[CqState]) {
        for c in cqs {
            let Some(pid) = c.pid.map(|p| Task::new(c.host, p)) else { continue };
            if c.kernel != 0 {
                self.by_kernel_cq.insert(c.kernel, pid);
            }
            if c.handle != 0 && c.handle != c.kernel {
                self.by_handle.insert(c.handle, pid);
                if let Some(fd) = c.channel_fd {
                    self.channel_fds.insert(c.handle, fd);
                }
            }
        }
    }

    fn owner(&self, e: &Event) -> Option<Task> {
        let by_handle = e.field(FieldId::CqUserHandle).and_then(|h| self.by_handle.get(&h));
        by_handle.or_else(|| e.field(FieldId::Cq).and_then(|c| self.by_kernel_cq.get(&c))).copied()
    }
}

/// The data phase: the work, from the first post (or, where posts never reach the kernel,
/// the first completion) to the last completion consumed; the syscall the first is in
/// counts. Set-up ends with the last CQ/QP/MR creation or QP modify; teardown starts with
/// the first release. Kept as it goes: a later set-up event starts the count again (that
/// was still set-up); syscalls wait in `pending` until a post, a completion or its wakeup
/// shows the work went on past them (what follows the last one, the QPs destroyed and the
/// rings unmapped, is teardown, not work), and the first teardown event closes the count.
#[derive(Default)]
struct Phase {
    setup_done_at: Option<u64>,
    teardown_at: Option<u64>,
    pending: BTreeMap<String, u64>,
    /// The first post or completion was seen: the phase's syscalls are being counted.
    started: bool,
    /// The newest syscall entered (the one a post or a completion came in).
    last_enter: Option<String>,
}

const SETUP: [ProbeId; 6] = [
    ProbeId::RxeCreateCq,
    ProbeId::Mlx5CreateCq,
    ProbeId::UmemGet,
    ProbeId::UverbsMmap,
    ProbeId::IbvCreateQp,
    ProbeId::ModifyQp,
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
    open_calls: super::calls::OpenCalls<Call>,
    /// Completions awaiting a wakeup, per process: (completion number, its time, its CQ).
    pending: HashMap<Task, VecDeque<(u64, u64, u64)>>,
    pins: Pins,
    cqs: Cqs,
    qps: Qps,
    /// uverbs mappings by start address, per process (a munmap of the start ends one).
    mappings: HashMap<Task, BTreeMap<u64, Mapping>>,
    /// The start of the uverbs mmap each thread is inside (its return may refuse it).
    mmap_open: HashMap<Task, u64>,
    /// What each mapping maps.
    namer: Namer,
    phases: HashMap<Task, Phase>,
    /// Steps joined, in the order they were (the newest `per_list`), and how many ever.
    joins: VecDeque<Joined>,
    joins_total: u64,
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
            open_calls: Default::default(),
            pending: HashMap::new(),
            pins: Pins::default(),
            cqs: Cqs::default(),
            qps: Qps::default(),
            mappings: HashMap::new(),
            mmap_open: HashMap::new(),
            namer,
            phases: HashMap::new(),
            joins: VecDeque::new(),
            joins_total: 0,
        }
    }

    pub(super) fn learn_steps(&mut self, steps: &[StepRecord]) {
        let o = CqOwners::from_steps(steps);
        self.owners.by_handle.extend(o.by_handle);
        self.owners.channel_fds.extend(o.channel_fds);
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
    fn owner(&self, e: &Event) -> Option<Task> {
        if is_completion(e) { self.owners.owner(e) } else { self.pins.owner_of(e).or(Some(e.process())) }
    }

    /// Joins event `i` (the next in time order).
    pub(super) fn event(&mut self, i: usize, e: &Event) {
        self.story.events_total += 1;
        self.owners.learn(e);
        // Before anything returns early: a completion can name a mapping too.
        let named = self.namer.event(e);
        self.name(named);
        self.kernel_reads |= e.is(ProbeId::CompEventRead);
        self.pins.dereg(e, &mut self.story.processes);
        self.cqs.hops(&mut self.story.cqs, e);
        let via = self.qps.event(&mut self.story.qps, self.per_list, i, e);
        let owner = self.owner(e);
        let made = || super::cqs::Made { pid: owner, channel_fd: self.owners.channel_fd(e) };
        let cq = is_completion(e).then(|| self.cqs.completion(&mut self.story.cqs, i, e, made()));
        if let (Some(handle), Some((key, across))) = (cq, via) {
            super::cqs::joined(&mut self.story.cqs, handle, key, across);
        }
        let Some(pid) = owner else {
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
        if e.process() == pid && !is_user_call(e) {
            // The latest name: a forked shell becomes the program it execs.
            if ps.comm != *e.comm {
                ps.comm = e.comm.to_string();
            }
        }
        if e.process() == pid
            && let Some(c) = &e.cgroup
            && ps.cgroup.as_ref() != Some(c)
        {
            ps.cgroup = Some(c.clone());
        }
        push_capped(&mut ps.events, self.per_list, i);
        ps.event_count += 1;
        if let Some(cq) = cq {
            push_capped(
                &mut ps.completions,
                self.per_list,
                Completion {
                    event: i,
                    cq_user_handle: e.field(FieldId::CqUserHandle).unwrap_or(0),
                    wakeup: None,
                    wakeup_latency_ns: None,
                },
            );
            self.pending.entry(pid).or_default().push_back((ps.completions_total, e.ts_ns, cq));
            ps.completions_total += 1;
            *ps.completions_by_context.entry(RanIn(e.context)).or_default() += 1;
            self.work_went_on(pid);
            return;
        }
        if let Some(l) = e.field(FieldId::MemlockLimit) {
            ps.memlock_limit = Some(l);
        }
        self.wakeup(pid, i, e);
        let ps = self.story.processes.get_mut(&pid).expect("placed above");
        if let Some(l) = self.pins.event(ps, i, e, self.per_list) {
            self.story.pin_ns.push(l);
        }
        self.maps(pid, i, e);
        self.phase(pid, e);
        self.nest(pid, i, e);
    }

    pub(super) fn processes(&self) -> &BTreeMap<Task, ProcessStory> {
        &self.story.processes
    }

    pub(super) fn story(&self) -> &Story {
        &self.story
    }

    /// Forgets the process quiet longest, and everything kept for it.
    fn retire_quietest(&mut self) {
        let Some(pid) = self.story.processes.values().min_by_key(|p| p.last_ts_ns).map(|p| p.pid) else {
            return;
        };
        if let Some(ps) = self.story.processes.get(&pid) {
            self.story.retired_events += ps.event_count;
        }
        self.story.retired_processes += 1;
        self.forget(pid);
    }

    /// Forgets process `pid` and everything kept for it (retired at the cap, or gone);
    /// returns its row.
    pub(super) fn forget(&mut self, pid: Task) -> Option<ProcessStory> {
        let row = self.story.processes.remove(&pid);
        self.pending.remove(&pid);
        self.pins.retire(pid);
        self.mappings.remove(&pid);
        self.phases.remove(&pid);
        self.open_calls.retain(|c| c.pid != pid);
        self.owners.retire(pid);
        // Its QPs and CQs go with it: a daemon that runs for days sees QPs come and go.
        self.qps.retire(&mut self.story.qps, pid);
        self.story.cqs.retain(|_, c| c.pid != Some(pid));
        row
    }

    fn process(&mut self, pid: Task) -> &mut ProcessStory {
        self.story.processes.get_mut(&pid).expect("placed by event()")
    }

    /// The wakeup: the channel read returning with an event, or ibv_get_cq_event returning,
    /// consumes the oldest completion waiting in its process.
    fn wakeup(&mut self, pid: Task, i: usize, e: &Event) {
        let wakeup = e.kind == EventKind::Return
            && ((e.is(ProbeId::CompEventRead) && e.field(FieldId::Ret).is_some_and(|r| (r as i64) > 0))
                || (e.is(ProbeId::IbvGetCqEvent) && !self.kernel_reads));
        if !wakeup {
            return;
        }
        let Some((n, at, cq)) = self.pending.get_mut(&pid).and_then(|q| q.pop_front()) else { return };
        self.work_went_on(pid);
        let latency = e.ts_ns.saturating_sub(at);
        self.cqs.woke(&mut self.story.cqs, e, cq, latency);
        self.story.wakeup_ns.push(latency);
        let per_list = self.per_list;
        let ps = self.process(pid);
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

    /// What a daemon said exists when this story began (its state record, or one piece of
    /// it): pins and mappings made before, so they are shown and their ends are counted;
    /// QPs with their CQs and peers, and CQs with their makers, so what comes next joins as
    /// it would have had the story seen them made.
    pub(super) fn seed(&mut self, st: &State) {
        self.owners.seed(&st.cqs);
        for c in st.cqs.iter().filter(|c| c.completions > 0) {
            super::cqs::seed(&mut self.story.cqs, c);
        }
        self.qps.seed(&mut self.story.qps, &st.qps);
        for p in &st.processes {
            let pid = Task::new(p.host, p.pid);
            let ps =
                self.story.processes.entry(pid).or_insert_with(|| ProcessStory { pid, ..Default::default() });
            if ps.comm.is_empty() {
                ps.comm.clone_from(&p.comm);
            }
            self.pins.seed(ps, p, self.per_list);
            for m in &p.mappings {
                self.mappings.entry(pid).or_default().insert(m.start, m.clone());
                let kind = m
                    .what
                    .clone()
                    .unwrap_or_else(|| format!("offset {:#x} (before this story began)", m.pgoff));
                let row = MapStory {
                    event: None,
                    start: m.start,
                    end: m.end,
                    pgoff: m.pgoff,
                    kind,
                    cache: None,
                    call: None,
                    queue: None,
                    unmapped: false,
                };
                push_capped(&mut ps.mappings, self.per_list, row);
                ps.mappings_total += 1;
            }
        }
    }

    /// The mapping inventory: uverbs mmaps in, munmaps of their start out.
    fn maps(&mut self, pid: Task, i: usize, e: &Event) {
        if e.is(ProbeId::UverbsMmap) && e.kind == EventKind::Entry {
            if let (Some(start), Some(end)) = (e.field(FieldId::VmStart), e.field(FieldId::VmEnd)) {
                let pgoff = e.field(FieldId::VmPgoff).unwrap_or(0);
                self.mappings
                    .entry(pid)
                    .or_default()
                    .insert(start, Mapping { start, end, pgoff, what: None });
                let call = self.open_calls.innermost(e.thread()).map(|c| c.name.clone());
                let row = MapStory {
                    event: Some(i),
                    start,
                    end,
                    pgoff,
                    kind: mapping_kind(e, pgoff),
                    cache: e
                        .field(FieldId::VmPageProt)
                        .map(|p| crate::pipeline::render::cache_mode(p).to_string()),
                    call,
                    queue: None,
                    unmapped: false,
                };
                let per_list = self.per_list;
                self.mmap_open.insert(e.thread(), start);
                let ps = self.process(pid);
                push_capped(&mut ps.mappings, per_list, row);
                ps.mappings_total += 1;
            }
        } else if e.is(ProbeId::UverbsMmap) && e.kind == EventKind::Return {
            let start = self.mmap_open.remove(&e.thread());
            if let Some(start) = start
                && e.field(FieldId::Ret).is_some_and(|r| (r as i64) < 0)
            {
                // Refused (libmlx5 asks for a write-combining page, is told EPERM where the
                // device cannot, and asks again): nothing was mapped.
                self.mappings.get_mut(&pid).map(|m| m.remove(&start));
                let ps = self.process(pid);
                if let Some(at) = ps.mappings.iter().rposition(|r| r.start == start && !r.unmapped) {
                    ps.mappings.remove(at);
                    ps.mappings_total -= 1;
                }
            }
        } else if e.is_any(&[ProbeId::Mlx5Mmap, ProbeId::MmapIo])
            && e.kind == EventKind::Entry
            && let Some(start) = e.field(FieldId::VmStart)
            && let Some(row) = self.process(pid).mappings.iter_mut().rev().find(|r| r.start == start)
        {
            // The driver's own view of the mapping uverbs_mmap began (its stack at entry has
            // no driver frame yet): what mlx5's offset asks for, and the page protection the
            // doorbell gets (uverbs_mmap's entry has the default one).
            if e.is(ProbeId::Mlx5Mmap) {
                row.kind = crate::plan::mlx5::pgoff(row.pgoff);
            } else if let Some(prot) = e.field(FieldId::Prot) {
                row.cache = Some(crate::pipeline::render::cache_mode(prot).to_string());
            }
        } else if e.kind == EventKind::SyscallEnter
            && e.name == "munmap"
            && let Some(addr) = e.field(FieldId::Addr)
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
                let mut mrs: Vec<PinnedRange> = self.pins.live_of(p.pid);
                mrs.sort_by_key(|r| r.addr);
                ProcessState {
                    pid: p.pid.pid,
                    host: p.pid.host,
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
                    // Completed from the kernel's tables (a daemon's reading, or a state it sent).
                    seeded: p.mrs_seeded > 0,
                }
            })
            .collect();
        State {
            v: crate::capture::VERSION,
            seq: 0,
            ty: "state".into(),
            ts_ns,
            processes,
            qps: super::qps::Qps::state(&self.story.qps),
            cqs: self.owners.state(&self.story.cqs),
        }
    }

    /// The data-phase syscalls (see `Phase`).
    fn phase(&mut self, pid: Task, e: &Event) {
        let ph = self.phases.entry(pid).or_default();
        if e.is_any(&SETUP) {
            ph.setup_done_at = Some(e.ts_ns);
            (ph.started, ph.pending) = (false, BTreeMap::new());
            self.story.processes.get_mut(&pid).expect("placed by event()").data_phase_syscalls.clear();
            return;
        }
        if e.is_any(&TEARDOWN) {
            ph.teardown_at.get_or_insert(e.ts_ns);
            ph.pending.clear();
            return;
        }
        let in_phase = ph.setup_done_at.is_some_and(|s| e.ts_ns > s) && ph.teardown_at.is_none();
        if e.kind == EventKind::SyscallEnter && in_phase {
            let key = match &e.fd_kind {
                Some(k) if k.is_rdma() => {
                    format!("{}[{k}]", e.name)
                }
                _ => e.name.to_string(),
            };
            *ph.pending.entry(key.clone()).or_default() += 1;
            ph.last_enter = Some(key);
        }
        // A post (soft-RoCE's doorbell, inside the write that carries it): the work goes on.
        if e.is(ProbeId::RxePostSend) && e.kind == EventKind::Entry && in_phase {
            self.work_went_on(pid);
        }
    }

    /// A post, a completion or its wakeup of `pid`'s: the syscalls since the last are the
    /// work's (at the first, only the one it came in).
    fn work_went_on(&mut self, pid: Task) {
        let Some(ph) = self.phases.get_mut(&pid) else { return };
        if ph.setup_done_at.is_none() || ph.teardown_at.is_some() {
            return;
        }
        if !ph.started {
            ph.started = true;
            let in_flight = ph.last_enter.take().filter(|k| ph.pending.contains_key(k));
            ph.pending = in_flight.map(|k| BTreeMap::from([(k, 1)])).unwrap_or_default();
        }
        let Some(ps) = self.story.processes.get_mut(&pid) else { return };
        for (k, n) in std::mem::take(&mut ph.pending) {
            *ps.data_phase_syscalls.entry(k).or_default() += n;
        }
    }

    /// Kernel work nests inside the libibverbs call open on the same thread.
    fn nest(&mut self, pid: Task, i: usize, e: &Event) {
        if !is_user_call(e) {
            if let Some(c) = self.open_calls.innermost_mut(e.thread()) {
                c.nested.push(i);
            }
            return;
        }
        match e.kind {
            EventKind::Entry => self.open_calls.enter(
                e.thread(),
                &e.name,
                Call {
                    name: e.name.clone(),
                    tid: e.thread(),
                    entry: i,
                    ret: None,
                    nested: vec![],
                    pid: e.process(),
                    entry_ts_ns: e.ts_ns,
                },
            ),
            EventKind::Return => {
                // The calls opened inside this one that are still open lost their returns.
                if let Some(closed) = self.open_calls.ret(e.thread(), &e.name) {
                    let mut c = closed.call;
                    c.ret = Some(i);
                    let per_list = self.per_list;
                    let ps = self.process(pid);
                    for c in std::iter::once(c).chain(closed.unreturned) {
                        push_capped(&mut ps.calls, per_list, c);
                        ps.calls_total += 1;
                    }
                }
            }
            _ => {}
        }
    }

    /// The story now: calls still open are shown (in time order with the others), and
    /// the companion's steps joined to the events kept.
    pub(super) fn snapshot(&self, events: &dyn Events, steps: &[StepRecord]) -> Story {
        let mut story = self.story.clone();
        story.calls_let_go = self.open_calls.let_go;
        for c in self.open_calls.open() {
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
        story.steps = self.steps_in_order(events, steps);
        story
    }

    /// Joins step `s`: the events of its thread inside its window (the process's events
    /// are in time order), and the completion its wakeup consumed.
    pub(super) fn join_step(&mut self, s: &StepRecord, events: &dyn Events) {
        if s.name == StepName::Start {
            return;
        }
        let mut mine = Vec::new();
        if let Some(ps) = self.story.processes.get(&s.process()) {
            let from = ps.events.partition_point(|&i| events.ev(i).is_none_or(|e| e.ts_ns < s.t_start_ns));
            for &i in ps.events.range(from..) {
                let Some(e) = events.ev(i) else { continue };
                if e.ts_ns > s.t_end_ns {
                    break;
                }
                if e.thread() == s.thread() && !is_completion(e) {
                    mine.push(i);
                }
            }
            for c in &ps.completions {
                if c.wakeup.is_some_and(|w| mine.contains(&w)) {
                    mine.push(c.event);
                }
            }
        }
        let checks = checks_for(s, &mine, events);
        push_capped(&mut self.joins, self.per_list, Joined { step: s.clone(), events: mine, checks });
        self.joins_total += 1;
    }

    /// The steps joined after the first `seen` (a view's cursor), oldest first.
    pub(super) fn joins_since(&self, seen: u64) -> impl Iterator<Item = &Joined> {
        let first_kept = self.joins_total - self.joins.len() as u64;
        self.joins.range(seen.saturating_sub(first_kept).min(self.joins.len() as u64) as usize..)
    }

    pub(super) fn joins_total(&self) -> u64 {
        self.joins_total
    }

    /// The joins of the steps kept, in their order; each judged again with the events
    /// seen since (a CQ's completions come after its step), where all of its are kept.
    fn steps_in_order(&self, events: &dyn Events, steps: &[StepRecord]) -> Vec<StepJoin> {
        let by_key: HashMap<(Task, u32, u32), &Joined> =
            self.joins.iter().map(|j| ((j.step.process(), j.step.run, j.step.step), j)).collect();
        let mut out = Vec::new();
        for (si, s) in steps.iter().enumerate() {
            let Some(j) = by_key.get(&(s.process(), s.run, s.step)) else { continue };
            let kept = j.events.iter().all(|&i| events.ev(i).is_some());
            let checks = if kept { checks_for(s, &j.events, events) } else { j.checks.clone() };
            out.push(StepJoin { step: si, events: j.events.clone(), checks });
        }
        out
    }
}

/// What a mapping's offset selects, from the driver on its stack.
fn mapping_kind(e: &Event, pgoff: u64) -> String {
    if e.stack.iter().any(|f| f.contains("[mlx5_ib]")) {
        crate::plan::mlx5::pgoff(pgoff)
    } else if e.stack.iter().any(|f| f.contains("[rdma_rxe]")) {
        "queue buffer (rxe: the offset is the queue's key)".to_string()
    } else {
        format!("offset {pgoff:#x}")
    }
}

/// Why a step file could not be read: each names the file.
#[derive(Debug, thiserror::Error)]
pub enum StepsError {
    #[error("reading {path}: {source}")]
    Read { path: std::path::PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Parse { path: std::path::PathBuf, source: crate::event::LinesError },
}

/// Reads a step file (see `parse_steps`); errors name the file and line.
pub fn read_steps(path: &std::path::Path) -> Result<Vec<StepRecord>, StepsError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| StepsError::Read { path: path.into(), source })?;
    parse_steps(&text).map_err(|source| StepsError::Parse { path: path.into(), source })
}

/// Parses the companion's step records (JSON Lines); an error names the line.
pub fn parse_steps(text: &str) -> Result<Vec<StepRecord>, crate::event::LinesError> {
    crate::event::parse_lines(text, |s: &StepRecord| s.v, crate::steps::VERSION, "step record")
}

#[cfg(test)]
mod mlx5_mapping_tests {
    use crate::event::Event;

    fn ev(seq: u64, kind: &str, name: &str, fields: &str) -> Event {
        let text = format!(
            r#"{{"v":1,"ts_ns":{seq},"kind":"{kind}","name":"{name}","path":"mmap","pid":7,"tid":7,"comm":"rdma-trace-work","cpu":0,"fields":{{{fields}}}}}"#
        );
        serde_json::from_str(&text).unwrap()
    }

    /// What a ConnectX mapping goes through, as the probes report it (no NIC here: the
    /// order and the fields are the catalog's): uverbs_mmap's entry has the default page
    /// protection and no driver frame, mlx5_ib_mmap reads the offset, rdma_user_mmap_io is
    /// given the doorbell's protection. A write-combining page refused (EPERM) is no mapping.
    #[test]
    fn an_mlx5_mapping_is_named_by_the_driver_and_mapped_as_mmap_io_says() {
        const CACHED: u64 = 0x8000_0000_0000_0027;
        const WC: u64 = CACHED | (1 << 3); // PWT: the PAT entry Linux sets for write-combining
        let (wc_page, nc_page) = ((2 << 8) | 1, 3 << 8);
        let events = [
            // libmlx5 asks for UAR 1 write-combining: refused.
            ev(
                1,
                "entry",
                "uverbs_mmap",
                &format!(r#""vm_start":4096,"vm_end":8192,"vm_pgoff":{wc_page},"vm_page_prot":{CACHED}"#),
            ),
            ev(2, "entry", "mlx5_mmap", &format!(r#""vm_start":4096,"vm_pgoff":{wc_page}"#)),
            ev(3, "return", "mlx5_mmap", r#""ret":-1"#),
            ev(4, "return", "uverbs_mmap", r#""ret":-1"#),
            // It asks again non-cached: mapped.
            ev(
                5,
                "entry",
                "uverbs_mmap",
                &format!(r#""vm_start":4096,"vm_end":8192,"vm_pgoff":{nc_page},"vm_page_prot":{CACHED}"#),
            ),
            ev(6, "entry", "mlx5_mmap", &format!(r#""vm_start":4096,"vm_pgoff":{nc_page}"#)),
            ev(7, "entry", "mmap_io", &format!(r#""vm_start":4096,"prot":{}"#, CACHED | (1 << 4))),
            ev(8, "return", "mmap_io", r#""ret":0"#),
            ev(9, "return", "mlx5_mmap", r#""ret":0"#),
            ev(10, "return", "uverbs_mmap", r#""ret":0"#),
            // And a BlueFlame page write-combining.
            ev(
                11,
                "entry",
                "uverbs_mmap",
                &format!(r#""vm_start":12288,"vm_end":16384,"vm_pgoff":{wc_page},"vm_page_prot":{CACHED}"#),
            ),
            ev(12, "entry", "mlx5_mmap", &format!(r#""vm_start":12288,"vm_pgoff":{wc_page}"#)),
            ev(13, "entry", "mmap_io", &format!(r#""vm_start":12288,"prot":{WC}"#)),
            ev(14, "return", "uverbs_mmap", r#""ret":0"#),
        ];
        let story = super::super::engine::build(&events, &[]);
        let p = story.processes.values().next().expect("the process");
        let rows: Vec<(u64, &str, Option<&str>)> =
            p.mappings.iter().map(|m| (m.start, m.kind.as_str(), m.cache.as_deref())).collect();
        assert_eq!(
            rows,
            [
                (4096, "0x300 (UAR page, non-cached (NC_PAGE), index 0)", Some("UC- (uncached)")),
                (
                    12288,
                    "0x201 (UAR/BlueFlame page, write-combining (WC_PAGE), index 1)",
                    Some("WC (write-combining)")
                ),
            ]
        );
        assert_eq!(p.mappings_total, 2);
    }
}
