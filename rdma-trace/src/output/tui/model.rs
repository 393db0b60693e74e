//! What the TUI shows, kept current event by event by the pipeline's thread and handed to
//! the screen as a snapshot (a clone, at most 30 a second). Bounded: rows and samples are
//! capped, so a snapshot costs the same after a minute or a day. No terminal code here.

use crate::capture::{Header, Stats};
use crate::event::{Event, EventKind, ExecContext, Path, ProbeId};
use crate::pipeline::correlate::checks::{Check, checks_for};
use crate::pipeline::correlate::mmaps::{Named, Namer, Queue};
use crate::pipeline::correlate::story::push_capped;
use crate::pipeline::render;
use crate::steps::{StepName, StepRecord};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Rows kept per table, events kept for the stream screen, latency samples kept.
pub const ROWS: usize = 512;
pub const EVENTS: usize = 2_000;
pub const SAMPLES: usize = 1_024;
/// Seconds of per-second completion counts kept for sparklines.
pub const SECONDS: usize = 60;

/// One MR: its pin and what became of it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MrRow {
    pub pid: u32,
    pub comm: String,
    pub addr: u64,
    pub length: u64,
    pub pages: Option<u64>,
    pub access: Option<u64>,
    pub latency_ns: Option<u64>,
    pub lkey: Option<u64>,
    pub rkey: Option<u64>,
    pub live: bool,
    /// A refused pin: the errno, and the memlock limit it was held to.
    pub refused: Option<i64>,
    pub memlock_limit: Option<u64>,
    umem: Option<u64>,
    /// The restrack id, for an MR from the tables: `mr_dereg` ends it.
    mr_id: Option<u32>,
    /// The thread that registered it (its keys and its explanation are found by it).
    pub tid: u32,
}

impl MrRow {
    /// Known only from the kernel's tables when this viewer joined (`rdma res`: no
    /// address); only those MRs carry a restrack id.
    pub fn from_tables(&self) -> bool {
        self.mr_id.is_some()
    }
}

/// One uverbs mapping.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MapRow {
    pub pid: u32,
    pub comm: String,
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    /// The page the offset selects (mlx5's command decoded; rxe's is a queue's cookie).
    pub kind: String,
    /// The cache mode the driver chose (from the mapping probe's page protection).
    pub cache: Option<String>,
    /// The libibverbs call open on the thread when it was made.
    pub call: Option<crate::event::Name>,
    /// The queue it maps (soft-RoCE), once named.
    pub queue: Option<Queue>,
    /// The program unmapped it (a munmap of its start).
    pub unmapped: bool,
}

/// The CQ a completion handler's event is for, as the Completions screen keys it: the
/// program's own handle when the kernel read one, else the kernel's CQ pointer.
pub fn cq_handle(e: &Event) -> Option<u64> {
    e.field("cq_user_handle").filter(|h| *h != 0).or(e.field("cq"))
}

/// Latency samples (ns), the newest kept.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Samples(pub VecDeque<u64>);

impl Samples {
    pub fn push(&mut self, v: u64) {
        push_capped(&mut self.0, SAMPLES, v);
    }
    /// The q-quantile (0..=1) of the samples kept, nearest rank.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let mut v: Vec<u64> = self.0.iter().copied().collect();
        v.sort_unstable();
        crate::units::quantile(&v, q)
    }

    /// Only the newest `SAMPLES` are kept: the quantiles are of a window, not the run.
    pub fn windowed(&self) -> bool {
        self.0.len() >= SAMPLES
    }
}

/// One CQ and its completion path.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CqRow {
    pub handle: u64,
    pub pid: Option<u32>,
    pub comm: String,
    pub completions: u64,
    pub by_context: BTreeMap<String, u64>,
    /// Completions per second, oldest first (the last is the current second).
    pub per_second: VecDeque<u64>,
    last_second: u64,
    /// The hops: the handler's own time; completion → the channel read returning;
    /// the read → ibv_get_cq_event returning.
    pub handler_ns: Samples,
    pub wakeup_ns: Samples,
    pub library_ns: Samples,
}

/// One companion step as it ended: what it announced, the kernel and library events of
/// its thread inside it (and the completion its wakeup consumed), and the checks of the
/// values both sides know — judged with the events seen by then.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepRow {
    pub pid: u32,
    pub tid: u32,
    pub run: u32,
    pub step: u32,
    pub name: String,
    pub ok: bool,
    /// Why it failed ("ENOMEM", or the companion's message).
    pub error: Option<String>,
    pub took_ns: u64,
    /// One line per event: time into the step, the probe, its fields.
    pub events: Vec<String>,
    pub checks: Vec<Check>,
}

/// Per process: pins now against the limit.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcRow {
    pub pid: u32,
    pub comm: String,
    pub pinned: u64,
    pub memlock_limit: Option<u64>,
    pub mrs_live: u64,
    pub mrs_total: u64,
    pub refused: u64,
    pub mappings: u64,
}

#[derive(Clone, Debug, Default)]
pub struct Model {
    /// Where the events come from, and the position in a file.
    pub source: String,
    pub position: Option<(u64, u64)>,
    pub attached: usize,
    pub skipped: usize,
    pub kernel: String,
    pub events_total: u64,
    pub lost_total: u64,
    /// Records a daemon did not send this viewer (it fell behind), as the daemon counted.
    pub not_sent: u64,
    /// Events per second (over the last wall-clock second the source measured).
    pub rate: f64,
    pub finished: Option<String>,
    pub procs: BTreeMap<u32, ProcRow>,
    pub mrs: VecDeque<MrRow>,
    pub maps: VecDeque<MapRow>,
    pub cqs: BTreeMap<u64, CqRow>,
    pub events: VecDeque<Event>,
    pub steps: VecDeque<StepRow>,
    pub pin_ns: Samples,
    pub wakeup_ns: Samples,
    // What joins events: pending pins per thread, CQ owners, the verbs call open per
    // thread, completions waiting for their wakeup per process, the last channel read.
    pending_pin: HashMap<u32, MrRow>,
    cq_owner: HashMap<u64, (u32, String)>,
    /// The CQ each thread's completion handler is running for.
    handling: HashMap<u32, u64>,
    open_call: HashMap<u32, crate::event::Name>,
    waiting: HashMap<u32, VecDeque<(u64, u64)>>,
    last_read: HashMap<u32, (u64, u64)>,
    /// Per thread, its latest channel reads and the completion each consumed (read time,
    /// completion time): a get_cq_event step is joined to its completion.
    consumed: HashMap<u32, VecDeque<(u64, u64)>>,
    /// What each mapping maps (the story's namer, fed the same events).
    namer: Namer,
}

impl Model {
    /// An empty model of events from `source`.
    pub fn new(source: String) -> Self {
        Model { source, ..Default::default() }
    }

    /// The counts of a newer snapshot (events, losses, rate, how the source stands), the
    /// rows kept as they are: what a paused live screen shows.
    pub fn counts_from(&mut self, newer: &Model) {
        self.events_total = newer.events_total;
        self.lost_total = newer.lost_total;
        self.not_sent = newer.not_sent;
        self.rate = newer.rate;
        self.position = newer.position;
        self.finished.clone_from(&newer.finished);
        (self.attached, self.skipped) = (newer.attached, newer.skipped);
    }

    pub fn header(&mut self, h: &Header) {
        self.attached = h.probes.iter().filter(|p| p.attached).count();
        self.skipped = h.probes.len() - self.attached;
        self.kernel = h.kernel_release.clone();
    }

    /// A daemon's state when this viewer joined: what was pinned and mapped before.
    pub fn seed(&mut self, st: &crate::capture::State) {
        for p in &st.processes {
            let row = self.proc(p.pid, &p.comm);
            row.pinned = p.pinned_bytes;
            row.memlock_limit = p.memlock_limit;
            row.mrs_live = p.mrs.len() as u64;
            row.mrs_total = p.mrs.len() as u64;
            row.mappings = p.mappings.len() as u64;
            for m in &p.mrs {
                push_capped(
                    &mut self.mrs,
                    ROWS,
                    MrRow {
                        pid: p.pid,
                        comm: p.comm.clone(),
                        addr: m.addr,
                        length: m.length,
                        pages: Some(m.charged / crate::units::PAGE),
                        lkey: m.lkey,
                        rkey: m.rkey,
                        live: true,
                        umem: m.umem,
                        mr_id: m.mr_id,
                        ..Default::default()
                    },
                );
            }
            for m in &p.mappings {
                push_capped(
                    &mut self.maps,
                    ROWS,
                    MapRow {
                        pid: p.pid,
                        comm: p.comm.clone(),
                        start: m.start,
                        end: m.end,
                        pgoff: m.pgoff,
                        kind: m
                            .what
                            .clone()
                            .unwrap_or_else(|| format!("offset {:#x} (before this viewer joined)", m.pgoff)),
                        ..Default::default()
                    },
                );
            }
        }
    }

    /// A loss record: the kernel side is in the stats; what a daemon could not send to
    /// this viewer is counted here.
    pub fn loss(&mut self, l: &crate::capture::Loss) {
        if l.site == "subscriber" {
            self.not_sent += l.count;
        }
    }

    pub fn stats(&mut self, s: &Stats) {
        self.lost_total = s.sites.iter().flat_map(|c| c.lost.values()).sum();
    }

    fn proc(&mut self, pid: u32, comm: &str) -> &mut ProcRow {
        let p = self.procs.entry(pid).or_insert_with(|| ProcRow { pid, ..Default::default() });
        if !comm.is_empty() && !comm.starts_with("kworker") {
            p.comm = comm.to_string();
        }
        p
    }

    pub fn event(&mut self, e: &Event) {
        self.events_total += 1;
        let named = self.namer.event(e);
        self.name(named);
        push_capped(&mut self.events, EVENTS, e.clone());
        if e.path == Path::Verbs {
            match e.kind {
                EventKind::Entry => {
                    self.open_call.insert(e.tid, e.name.clone());
                }
                EventKind::Return => {
                    self.open_call.remove(&e.tid);
                }
                _ => {}
            }
        }
        match (e.probe(), e.kind) {
            (Some(ProbeId::UmemGet), EventKind::Entry) => self.pin_entry(e),
            (Some(ProbeId::UmemGet), EventKind::Return) => self.pin_return(e),
            (Some(ProbeId::RxeRegMr | ProbeId::Mlx5RegMr), EventKind::Return) => self.keys(e),
            (Some(ProbeId::UmemRelease), EventKind::Entry) => {
                let u = e.field("umem");
                self.unpin(|r| u.is_some() && r.umem == u);
            }
            // Only MRs from the kernel's tables are named by id; a pin seen here ends with
            // its umem above.
            (Some(ProbeId::MrDereg), EventKind::Entry) => {
                let id = e.field("mr_id").and_then(|i| u32::try_from(i).ok());
                self.unpin(|r| id.is_some() && r.mr_id == id);
            }
            (Some(ProbeId::UverbsMmap), EventKind::Entry) => self.mapping(e),
            (None, EventKind::SyscallEnter) if e.name == "munmap" => {
                let (pid, addr) = (e.pid, e.field("addr"));
                let row =
                    self.maps.iter_mut().rev().find(|r| r.pid == pid && Some(r.start) == addr && !r.unmapped);
                if let Some(r) = row {
                    r.unmapped = true;
                }
            }
            (Some(ProbeId::RxeCreateCq | ProbeId::Mlx5CreateCq), EventKind::Entry) => {
                if let Some(c) = e.field("cq") {
                    self.cq_owner.entry(c).or_insert((e.pid, e.comm.clone()));
                }
            }
            (Some(ProbeId::IbvCreateCq), EventKind::Return) => {
                if let Some(h) = e.field("cq").filter(|h| *h != 0) {
                    self.cq_owner.insert(h, (e.pid, e.comm.clone()));
                }
            }
            (Some(ProbeId::CompHandler), EventKind::Entry) => self.completion(e),
            (Some(ProbeId::CompHandler), EventKind::Return) => {
                // The handler's own time, charged to the CQ it ran for on this thread.
                if let (Some(l), Some(h)) = (e.latency_ns, self.handling.remove(&e.tid))
                    && let Some(cq) = self.cqs.get_mut(&h)
                {
                    cq.handler_ns.push(l);
                }
            }
            (Some(ProbeId::CompEventRead), EventKind::Return)
                if e.field("ret").is_some_and(|r| r as i64 > 0) =>
            {
                self.wakeup(e)
            }
            (Some(ProbeId::IbvGetCqEvent), EventKind::Return) => {
                if let Some((t, h)) = self.last_read.remove(&e.tid)
                    && let Some(cq) = self.cqs.get_mut(&h)
                {
                    cq.library_ns.push(e.ts_ns.saturating_sub(t));
                }
            }
            _ => {}
        }
    }

    fn pin_entry(&mut self, e: &Event) {
        let row = MrRow {
            pid: e.pid,
            comm: e.comm.clone(),
            addr: e.field("addr").unwrap_or(0),
            length: e.field("size").unwrap_or(0),
            pages: e.field("pages"),
            access: e.field("access"),
            memlock_limit: e.field("memlock_limit"),
            tid: e.tid,
            ..Default::default()
        };
        self.pending_pin.insert(e.tid, row);
    }

    fn pin_return(&mut self, e: &Event) {
        let mut row = self.pending_pin.remove(&e.tid).unwrap_or_else(|| MrRow {
            pid: e.pid,
            comm: e.comm.clone(),
            addr: e.field("umem_address").unwrap_or(0),
            length: e.field("umem_length").unwrap_or(0),
            tid: e.tid,
            ..Default::default()
        });
        row.latency_ns = e.latency_ns;
        if let Some(l) = e.latency_ns {
            self.pin_ns.push(l);
        }
        let umem = e.field("umem");
        match umem.and_then(render::err_ptr) {
            Some(err) => {
                row.refused = Some(-err);
                self.proc(e.pid, &e.comm).refused += 1;
            }
            None => {
                row.umem = umem;
                row.live = true;
                row.pages = row.pages.or(e.field("pages"));
                let charged = row.pages.map(|p| p * crate::units::PAGE).unwrap_or(row.length);
                let limit = row.memlock_limit;
                let p = self.proc(e.pid, &e.comm);
                p.pinned += charged;
                p.mrs_live += 1;
                p.mrs_total += 1;
                p.memlock_limit = limit.or(p.memlock_limit);
            }
        }
        push_capped(&mut self.mrs, ROWS, row);
    }

    /// The provider's reg_mr returns right after the pin on the same thread: its keys.
    fn keys(&mut self, e: &Event) {
        if let Some(row) = self.mrs.iter_mut().rev().find(|r| r.tid == e.tid && r.lkey.is_none()) {
            row.lkey = e.field("lkey");
            row.rkey = e.field("rkey");
        }
    }

    /// The newest live MR that `is` names is deregistered: its pages are no longer charged.
    fn unpin(&mut self, is: impl Fn(&MrRow) -> bool) {
        if let Some(row) = self.mrs.iter_mut().rev().find(|r| r.live && is(r)) {
            row.live = false;
            let charged = row.pages.map(|p| p * crate::units::PAGE).unwrap_or(row.length);
            let pid = row.pid;
            if let Some(p) = self.procs.get_mut(&pid) {
                p.pinned = p.pinned.saturating_sub(charged);
                p.mrs_live = p.mrs_live.saturating_sub(1);
            }
        }
    }

    fn mapping(&mut self, e: &Event) {
        let (start, end) = (e.field("vm_start").unwrap_or(0), e.field("vm_end").unwrap_or(0));
        let pgoff = e.field("vm_pgoff").unwrap_or(0);
        let kind = if e.stack.iter().any(|f| f.contains("[mlx5_ib]")) {
            render::mlx5_pgoff(pgoff)
        } else if e.stack.iter().any(|f| f.contains("[rdma_rxe]")) {
            "queue buffer (rxe: the offset is the queue's key)".to_string()
        } else {
            format!("offset {pgoff:#x}")
        };
        let cache = e.field("vm_page_prot").map(|p| render::cache_mode(p).to_string());
        let call = self.open_call.get(&e.tid).cloned();
        self.proc(e.pid, &e.comm).mappings += 1;
        push_capped(
            &mut self.maps,
            ROWS,
            MapRow {
                pid: e.pid,
                comm: e.comm.clone(),
                start,
                end,
                pgoff,
                kind,
                cache,
                call,
                ..Default::default()
            },
        );
    }

    /// Mappings named (or their object learned) by the namer.
    fn name(&mut self, named: Vec<Named>) {
        for n in named {
            if let Some(r) = self.maps.iter_mut().rev().find(|r| r.pid == n.pid && r.start == n.start) {
                r.kind = n.queue.brief();
                r.queue = Some(n.queue);
            }
        }
    }

    fn completion(&mut self, e: &Event) {
        let handle = cq_handle(e).unwrap_or(0);
        let owner =
            self.cq_owner.get(&handle).or_else(|| e.field("cq").and_then(|c| self.cq_owner.get(&c))).cloned();
        let cq = self.cqs.entry(handle).or_insert_with(|| CqRow { handle, ..Default::default() });
        if let Some((pid, comm)) = &owner {
            cq.pid = Some(*pid);
            cq.comm.clone_from(comm);
        }
        cq.completions += 1;
        let ctx = match e.context {
            Some(ExecContext::Softirq) => "softirq",
            Some(ExecContext::Kworker) => "kworker",
            Some(ExecContext::Process) => "process",
            None => "unknown",
        };
        *cq.by_context.entry(ctx.into()).or_default() += 1;
        let second = e.ts_ns / 1_000_000_000;
        if cq.per_second.is_empty() {
            cq.last_second = second;
            cq.per_second.push_back(0);
        }
        while cq.last_second < second {
            cq.last_second += 1;
            cq.per_second.push_back(0);
            if cq.per_second.len() > SECONDS {
                cq.per_second.pop_front();
            }
        }
        if let Some(last) = cq.per_second.back_mut() {
            *last += 1;
        }
        // The handler's return on this thread is charged to this CQ.
        self.handling.insert(e.tid, handle);
        if let Some((pid, _)) = owner {
            self.waiting.entry(pid).or_default().push_back((e.ts_ns, handle));
        }
    }

    fn wakeup(&mut self, e: &Event) {
        let Some((t, handle)) = self.waiting.get_mut(&e.pid).and_then(|q| q.pop_front()) else { return };
        let l = e.ts_ns.saturating_sub(t);
        self.wakeup_ns.push(l);
        if let Some(cq) = self.cqs.get_mut(&handle) {
            cq.wakeup_ns.push(l);
        }
        self.last_read.insert(e.tid, (e.ts_ns, handle));
        push_capped(self.consumed.entry(e.tid).or_default(), 16, (e.ts_ns, t));
    }

    /// A companion step ended: joined to the events kept (see `StepRow`).
    pub fn step(&mut self, s: &StepRecord) {
        let named = self.namer.step(s);
        self.name(named);
        if s.name == StepName::Start {
            return;
        }
        let inside = |t: u64| t >= s.t_start_ns && t <= s.t_end_ns;
        let completion = |e: &Event| e.is(ProbeId::CompHandler) && e.kind == EventKind::Entry;
        let woke: Vec<u64> = self
            .consumed
            .get(&s.tid)
            .into_iter()
            .flatten()
            .filter(|(r, _)| inside(*r))
            .map(|c| c.1)
            .collect();
        let mine: Vec<Event> = self
            .events
            .iter()
            .filter(|e| {
                (e.tid == s.tid && inside(e.ts_ns) && !completion(e))
                    || (completion(e) && woke.contains(&e.ts_ns))
            })
            .cloned()
            .collect();
        let all: Vec<usize> = (0..mine.len()).collect();
        let checks = checks_for(s, &all, &mine);
        let line = |e: &Event| {
            let arrow = crate::output::text::arrow(e.kind);
            let at = e.ts_ns as f64 / 1e3 - s.t_start_ns as f64 / 1e3;
            format!("{at:>+9.1}µs {arrow} {} {}", e.name, crate::output::text::fields_text(e))
        };
        let error = match (s.errno, &s.error) {
            (Some(n), _) => Some(render::errno_name(n as i64).to_string()),
            (None, e) => e.clone(),
        };
        let row = StepRow {
            pid: s.pid,
            tid: s.tid,
            run: s.run,
            step: s.step,
            name: s.name.as_str().into(),
            ok: s.ok,
            error,
            took_ns: s.t_end_ns.saturating_sub(s.t_start_ns),
            events: mine.iter().map(line).collect(),
            checks,
        };
        push_capped(&mut self.steps, ROWS, row);
    }
}
