//! What the TUI shows: a view of the one story (`pipeline::correlate::engine`), which the
//! pipeline's thread feeds and reads at most 30 times a second to make a snapshot for the
//! screen. Nothing is joined here: MRs, mappings, CQs and their hops, processes and steps
//! are the story's rows; the view adds only what the source reports (counts, losses,
//! position) and the newest events for the Events screen. Bounded: a snapshot costs the
//! same after a minute or a day. No terminal code here.

use crate::capture::{Header, SiteCount};
use crate::event::Event;
use crate::pipeline::correlate::checks::Check;
use crate::pipeline::correlate::engine::Engine;
use crate::pipeline::correlate::pins::MrStory;
use crate::pipeline::correlate::story::{Joined, MapStory, ProcessStory};
use crate::pipeline::render;
use crate::util::push_capped;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

pub use crate::pipeline::correlate::cqs::{CqStory, SAMPLES, SECONDS, Samples, cq_handle};

/// Rows kept per table, events kept for the stream screen.
pub const ROWS: usize = 512;
pub(crate) const EVENTS: usize = 2_000;

/// One MR (the story's) and its process's name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MrRow {
    pub comm: String,
    pub mr: MrStory,
}

/// One uverbs mapping (the story's), with its process.
#[derive(Clone, Debug, PartialEq)]
pub struct MapRow {
    pub pid: crate::event::Task,
    pub comm: String,
    pub map: MapStory,
}

/// One CQ and its completion path (the story's), with its owner's name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CqRow {
    pub comm: String,
    pub cq: CqStory,
    /// Where its completions' posts were, and the time from them (`correlate::qps`): the
    /// path's first hop, when soft-RoCE's doorbells were seen.
    pub post: Option<PostHop>,
}

/// A CQ's completions joined to posts: on the QP's peer (another host's, or this one's)
/// or on the QP itself.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PostHop {
    /// `qp 0x13 @rdma-lab-2`.
    pub from: String,
    pub across: bool,
    pub ns: Samples,
}

impl std::ops::Deref for MrRow {
    type Target = MrStory;
    fn deref(&self) -> &MrStory {
        &self.mr
    }
}

impl std::ops::Deref for MapRow {
    type Target = MapStory;
    fn deref(&self) -> &MapStory {
        &self.map
    }
}

impl std::ops::Deref for CqRow {
    type Target = CqStory;
    fn deref(&self) -> &CqStory {
        &self.cq
    }
}

/// One companion step as it ended: what it announced, the kernel and library events of
/// its thread inside it (and the completion its wakeup consumed), and the checks of the
/// values both sides know — judged with the events seen by then.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepRow {
    pub pid: crate::event::Task,
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
    /// Of them, the kernel's (not a syscall, not a library call): what `story` counts.
    pub kernel: usize,
    pub checks: Vec<Check>,
}

/// Per process: pins now against the limit.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcRow {
    pub pid: crate::event::Task,
    pub comm: String,
    pub pinned: u64,
    pub memlock_limit: Option<u64>,
    pub mrs_live: u64,
    pub mrs_total: u64,
    pub refused: u64,
    pub mappings: u64,
    /// The cgroup its events ran in, where the capture has it.
    pub cgroup: Option<String>,
}

impl ProcRow {
    /// Its container's id, first 12 hex digits (as `docker ps` shows it), where its
    /// cgroup's path names one.
    pub(crate) fn container(&self) -> Option<&str> {
        self.cgroup.as_deref().and_then(crate::event::container_of).map(|c| &c[..12])
    }
}

/// What the screen shows: a snapshot of the story and the run's counts.
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
    /// The stream accounts for its loss (format v1: a header, stats, a trailer); a v0 file
    /// does not, and its loss is not known rather than 0.
    pub accounted: bool,
    /// One source's loss by reason (several sources: each host's line has its own).
    pub lost_by: BTreeMap<crate::capture::LossReason, u64>,
    /// Where it was lost: each source's sites (probes, programs, outputs) that lost
    /// anything, from its latest account, keyed by the source's index (0 for one).
    pub lost_at: BTreeMap<usize, Vec<SiteCount>>,
    /// Events per second (over the last wall-clock second the source measured).
    pub rate: f64,
    pub finished: Option<String>,
    // The rows are shared: a snapshot (`Model::clone`, up to 30 a second) copies pointers,
    // and the feeder makes new rows from the story rather than changing these.
    pub procs: Arc<BTreeMap<crate::event::Task, ProcRow>>,
    pub mrs: Arc<VecDeque<MrRow>>,
    pub maps: Arc<VecDeque<MapRow>>,
    pub cqs: Arc<BTreeMap<u64, CqRow>>,
    /// The newest events, and the story's index of each (what `e` anchors on): copied
    /// (pointers) at the first event after a snapshot took them.
    pub events: Arc<VecDeque<Arc<Event>>>,
    pub indices: Arc<VecDeque<usize>>,
    /// `/` on the Events screen: what matched among every event the story keeps.
    pub found: Option<Arc<Found>>,
    pub steps: Arc<VecDeque<StepRow>>,
    pub pin_ns: Samples,
    pub wakeup_ns: Samples,
    /// The story's step joins already made into rows.
    steps_seen: u64,
    /// The latest explanation the story gave.
    pub answer: Option<Answer>,
    /// Several sources (`tui --connect A --connect B`): one line each, in source order
    /// (`event::Task::host` is the index). Empty for one source.
    pub hosts: Vec<HostLine>,
    /// `source` in few cells, for a narrow status line (`2 hosts -249.4±1.5ms`).
    pub source_compact: Option<String>,
}

/// The events a filter matched among all the story keeps (not only the newest the Events
/// screen holds): the newest `EVENTS` of them, oldest first, with their story indexes.
#[derive(Clone, Debug, Default)]
pub struct Found {
    pub filter: String,
    pub events: Vec<Arc<Event>>,
    pub indices: Vec<usize>,
    /// How many matched, among how many kept.
    pub matched: usize,
    pub searched: usize,
}

/// One source of several: its host, kernel, clock against the first's, and loss.
#[derive(Clone, Debug, Default)]
pub struct HostLine {
    pub name: String,
    pub kernel: String,
    /// Against the first source's clock: the measured offset and its error bar, or that
    /// it was not measured (empty for the first, or one of its boot).
    pub clock: String,
    pub clock_compact: String,
    /// The measured offset's error bar, ns.
    pub clock_error_ns: Option<u64>,
    pub lost: u64,
    /// Of it, by reason (its daemon's accounting), and records its daemon did not send
    /// this view (it fell behind).
    pub lost_by: BTreeMap<crate::capture::LossReason, u64>,
    pub not_sent: u64,
    /// Its stream ended (why).
    pub ended: Option<String>,
}

impl HostLine {
    /// A source not yet heard from, named by its socket.
    pub(crate) fn waiting(socket: &std::path::Path) -> Self {
        HostLine { name: socket.display().to_string(), ..Default::default() }
    }
}

/// An account's loss, by reason over every site.
fn by_reason(sites: &[SiteCount]) -> BTreeMap<crate::capture::LossReason, u64> {
    let mut out = BTreeMap::new();
    for (r, n) in sites.iter().flat_map(|c| &c.lost) {
        *out.entry(r.clone()).or_default() += n;
    }
    out
}

/// The sites of an account that lost anything.
fn lossy(sites: &[SiteCount]) -> Vec<SiteCount> {
    sites.iter().filter(|c| c.lost.values().any(|n| *n > 0)).cloned().collect()
}

impl Model {
    /// An empty model of events from `source`.
    pub fn new(source: String) -> Self {
        Model { source, ..Default::default() }
    }

    /// The counts of a newer snapshot (events, losses, rate, how the source stands), the
    /// rows kept as they are: what a paused live screen shows.
    pub(crate) fn counts_from(&mut self, newer: &Model) {
        self.events_total = newer.events_total;
        self.lost_total = newer.lost_total;
        self.not_sent = newer.not_sent;
        self.lost_by.clone_from(&newer.lost_by);
        self.lost_at.clone_from(&newer.lost_at);
        self.accounted = newer.accounted;
        self.rate = newer.rate;
        self.position = newer.position;
        self.finished.clone_from(&newer.finished);
        (self.attached, self.skipped) = (newer.attached, newer.skipped);
        self.answer.clone_from(&newer.answer);
        self.found.clone_from(&newer.found);
        self.hosts.clone_from(&newer.hosts);
        self.source.clone_from(&newer.source);
        self.source_compact.clone_from(&newer.source_compact);
    }

    /// Source `i`'s header (of several), placed on the first's clock as `placement` says.
    pub fn host(&mut self, i: usize, h: &Header, placement: Option<&crate::clock::Placement>) {
        let line = &mut self.hosts[i];
        line.name.clone_from(&h.hostname);
        line.kernel.clone_from(&h.kernel_release);
        line.clock_error_ns = placement.and_then(|p| p.placed.as_ref()).map(|c| c.error_ns);
        (line.clock, line.clock_compact) = match placement {
            Some(p) if p.other_boot => match &p.placed {
                Some(c) => (
                    crate::clock::offset_text(c.offset_ns, c.error_ns),
                    format!("{:+.1}±{:.1}ms", c.offset_ns as f64 / 1e6, c.error_ns as f64 / 1e6),
                ),
                None => ("clock not measured".into(), "clock?".into()),
            },
            _ => (String::new(), String::new()),
        };
        let names: Vec<String> = self
            .hosts
            .iter()
            .map(|l| if l.clock.is_empty() { l.name.clone() } else { format!("{} {}", l.name, l.clock) })
            .collect();
        self.source = names.join(" · ");
        let offsets: Vec<String> =
            self.hosts.iter().filter(|l| !l.clock.is_empty()).map(|l| l.clock_compact.clone()).collect();
        self.source_compact =
            Some(format!("{} hosts {}", self.hosts.len(), offsets.join(",")).trim_end().to_string());
    }

    /// Source `i`'s accounting (of several): what the screen calls lost is every host's.
    /// (A trailer's final account, `sites`, the same.)
    pub fn host_stats(&mut self, i: usize, sites: &[SiteCount]) {
        self.hosts[i].lost = sites.iter().flat_map(|c| c.lost.values()).sum();
        self.hosts[i].lost_by = by_reason(sites);
        self.lost_at.insert(i, lossy(sites));
        self.lost_total = self.hosts.iter().map(|h| h.lost).sum();
    }

    /// Records source `i`'s daemon did not send this view.
    pub fn host_not_sent(&mut self, i: usize, count: u64) {
        self.hosts[i].not_sent += count;
        self.not_sent += count;
    }

    /// What was lost, said where and why, the largest first (at most `most`): "ring full
    /// 30, skipped by the kernel 9", each led by its host when there are several. None
    /// when nothing was.
    pub fn loss_words(&self, most: usize) -> Option<String> {
        let mut parts: Vec<(u64, String)> = Vec::new();
        if self.hosts.is_empty() {
            parts.extend(self.lost_by.iter().map(|(r, n)| (*n, r.to_string())));
        }
        for h in &self.hosts {
            parts.extend(h.lost_by.iter().map(|(r, n)| (*n, format!("{} {r}", h.name))));
            if h.not_sent > 0 {
                parts.push((h.not_sent, format!("{} not sent to this view", h.name)));
            }
        }
        parts.retain(|(n, _)| *n > 0);
        if parts.is_empty() {
            return None;
        }
        parts.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let more = parts.len().saturating_sub(most);
        let mut words: Vec<String> = parts.iter().take(most).map(|(n, w)| format!("{w} {n}")).collect();
        if more > 0 {
            words.push(format!("{more} more"));
        }
        Some(words.join(", "))
    }

    /// The first hop of `c`'s completions: from the posts they were joined to, on the
    /// peer of the QP whose receive CQ it is, else on the QP whose send CQ it is.
    fn post_hop(&self, qps: &crate::pipeline::correlate::qps::QpStory, c: &CqStory) -> Option<PostHop> {
        let name = |k: crate::pipeline::correlate::qps::QpKey| {
            let host = self.hosts.get(k.host as usize).filter(|_| self.hosts.len() > 1);
            format!("qp {:#x}{}", k.qpn, host.map(|h| format!(" @{}", h.name)).unwrap_or_default())
        };
        // The QPs its completions were joined through (a freed CQ's address is given to the
        // next CQ made: the pointer alone can name another process's QP).
        let through = |k: Option<crate::pipeline::correlate::qps::QpKey>| k.and_then(|k| qps.rows.get(&k));
        if let Some(q) = through(c.via_peer).filter(|q| q.counts.after_peer_post > 0) {
            return Some(PostHop { from: name(q.peer?), across: true, ns: q.across_ns.clone() });
        }
        if let Some(q) = through(c.via_own).filter(|q| q.counts.after_own_post > 0) {
            return Some(PostHop { from: name(q.key), across: false, ns: q.own_ns.clone() });
        }
        // A CQ told of before this viewer joined, by a daemon of an older format: its QPs by
        // pointer.
        let mine = qps
            .rows
            .values()
            .filter(|q| q.key.host == c.host && c.kernel != 0 && c.pid.is_none_or(|p| p == q.pid));
        let across = mine
            .clone()
            .filter(|q| q.recv_cq == c.kernel && q.counts.after_peer_post > 0)
            .find_map(|q| Some(PostHop { from: name(q.peer?), across: true, ns: q.across_ns.clone() }));
        across.or_else(|| {
            mine.filter(|q| q.send_cq == c.kernel && q.counts.after_own_post > 0)
                .map(|q| PostHop { from: name(q.key), across: false, ns: q.own_ns.clone() })
                .next()
        })
    }

    /// A process as the screens name it: its pid, and with several hosts the host's name
    /// (`event::Task::host`).
    pub(crate) fn who(&self, t: crate::event::Task) -> String {
        let host = self.hosts.get(usize::from(t.host)).filter(|_| self.hosts.len() > 1);
        t.at(host.map(|h| h.name.as_str()))
    }

    /// What the filter matches a process by besides its pid and name: `pid@host`, and its
    /// cgroup's path and `container:<id>` where it ran in one.
    pub(crate) fn tags(&self, pid: crate::event::Task) -> String {
        let mut t = self.who(pid);
        if let Some(p) = self.procs.get(&pid) {
            if let Some(c) = p.container() {
                t.push_str(&format!(" container:{c}"));
            }
            if let Some(g) = &p.cgroup {
                t.push_str(&format!(" {g}"));
            }
        }
        t
    }

    /// A stream's header: its kernel, and the probes attached and skipped.
    pub fn header(&mut self, h: &Header) {
        // A v1 stream (it has a header) accounts for its loss; a v0 file cannot.
        self.accounted = true;
        self.attached = h.probes.iter().filter(|p| p.attached).count();
        self.skipped = h.probes.len() - self.attached;
        self.kernel = h.kernel_release.clone();
    }

    /// A loss record: the kernel side is in the stats; what a daemon could not send to
    /// this viewer is counted here.
    pub(crate) fn loss(&mut self, l: &crate::capture::Loss) {
        if l.site == crate::capture::LossSite::Subscriber {
            self.not_sent += l.count;
        }
    }

    /// One source's account: a stats record's, or a trailer's final one.
    pub fn stats(&mut self, sites: &[SiteCount]) {
        self.lost_total = sites.iter().flat_map(|c| c.lost.values()).sum();
        self.lost_by = by_reason(sites);
        self.lost_at.insert(0, lossy(sites));
    }

    /// The loss view: what was lost, by source, site and reason, the largest first, and
    /// what a daemon did not send this view; or why nothing can be said.
    pub(crate) fn loss_lines(&self) -> Vec<String> {
        if !self.accounted && self.lost_total == 0 {
            return vec![
                "This source keeps no account of loss (a format v0 file): what it lost".into(),
                "is not known, not 0.".into(),
            ];
        }
        let mut out = Vec::new();
        let several = self.hosts.len() > 1;
        let sources: Vec<usize> = if several { (0..self.hosts.len()).collect() } else { vec![0] };
        for i in sources {
            let (name, not_sent) = match self.hosts.get(i).filter(|_| several) {
                Some(h) => (Some(h.name.as_str()), h.not_sent),
                None => (None, self.not_sent),
            };
            let mut rows: Vec<(u64, String, String)> = self
                .lost_at
                .get(&i)
                .into_iter()
                .flatten()
                .flat_map(|c| {
                    c.lost
                        .iter()
                        .filter(|(_, n)| **n > 0)
                        .map(|(r, n)| (*n, c.site.to_string(), r.to_string()))
                })
                .collect();
            rows.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
            let total: u64 = rows.iter().map(|r| r.0).sum();
            if let Some(name) = name {
                out.push(format!("{name}: {total} lost, {not_sent} not sent to this view"));
            } else {
                out.push(format!("{total} lost, {not_sent} not sent to this view"));
            }
            let w = rows.iter().map(|r| r.1.chars().count()).max().unwrap_or(0);
            for (n, site, reason) in rows {
                out.push(format!("  {site:<w$}  {n:>9}  {reason}"));
            }
            if not_sent > 0 {
                out.push(format!("  {not_sent} not sent: this view fell behind its daemon"));
            }
        }
        out.push(String::new());
        out.push("Lost: counted at its site by the probes and the tracer".into());
        out.push("(the kernel's misses, a full ring, a full queue).".into());
        out.push("Not sent: records a daemon held for this view and".into());
        out.push("dropped when the view fell behind.".into());
        out
    }

    /// The story index of `e`, an event the Events screen lists (from the newest held, or
    /// from what `/` found).
    pub(crate) fn index_of(&self, e: &Event) -> Option<usize> {
        let same = |x: &Arc<Event>| std::ptr::eq(x.as_ref(), e);
        if let Some(f) = &self.found
            && let Some(pos) = f.events.iter().position(same)
        {
            return f.indices.get(pos).copied();
        }
        self.events.iter().position(same).and_then(|pos| self.indices.get(pos).copied())
    }

    /// Whether event `e` passes `filter`: its pid, host, container or cgroup, its name, or
    /// its fields contain it.
    pub(crate) fn matches(&self, filter: &str, e: &Event) -> bool {
        filter.is_empty()
            || self.tags(e.process()).contains(filter)
            || e.comm.contains(filter)
            || crate::output::text::fields_text(e).contains(filter)
    }

    /// Searches every event `engine` keeps for `filter` (empty: no search).
    pub fn search(&mut self, engine: &Engine, filter: &str) {
        if filter.is_empty() {
            self.found = None;
            return;
        }
        let (mut events, mut indices, mut matched, mut searched) = (Vec::new(), Vec::new(), 0, 0);
        for (i, e) in engine.kept().rev() {
            searched += 1;
            if self.matches(filter, e) {
                matched += 1;
                if events.len() < EVENTS {
                    events.push(e.clone());
                    indices.push(i);
                }
            }
        }
        events.reverse();
        indices.reverse();
        self.found = Some(Arc::new(Found { filter: filter.to_string(), events, indices, matched, searched }));
    }

    /// An event arrived, which the story knows as `index`: kept as the pointer the
    /// pipeline shares (a snapshot copies pointers, not events).
    pub fn event(&mut self, e: &std::sync::Arc<Event>, index: usize) {
        self.events_total += 1;
        push_capped(Arc::make_mut(&mut self.events), EVENTS, e.clone());
        push_capped(Arc::make_mut(&mut self.indices), EVENTS, index);
    }

    /// The rows, from the story as it stands.
    pub fn rows_from(&mut self, engine: &Engine) {
        let story = engine.now();
        let shown = |p: &&ProcessStory| p.mrs_total() + p.failed_pins_total + p.mappings_total > 0;
        self.procs = Arc::new(story.processes.values().filter(shown).map(|p| (p.pid, proc_row(p))).collect());
        // The newest `ROWS` of all processes' rows, chosen by reference; only they are copied.
        let mut mrs: Vec<(&ProcessStory, &MrStory)> = (story.processes.values())
            .flat_map(|p| p.mrs.iter().rev().take(ROWS).map(move |r| (p, r)))
            .collect();
        mrs.sort_by_key(|(_, r)| r.event.map_or(0, |i| i + 1));
        let mrs = newest(mrs).into_iter().map(|(p, r)| MrRow { comm: p.comm.clone(), mr: r.clone() });
        self.mrs = Arc::new(mrs.collect());
        let mut maps: Vec<(&ProcessStory, &MapStory)> = (story.processes.values())
            .flat_map(|p| p.mappings.iter().rev().take(ROWS).map(move |m| (p, m)))
            .collect();
        maps.sort_by_key(|(_, m)| m.event.map_or(0, |i| i + 1));
        let maps = newest(maps).into_iter().map(|(p, m)| MapRow {
            pid: p.pid,
            comm: p.comm.clone(),
            map: m.clone(),
        });
        self.maps = Arc::new(maps.collect());
        self.cqs = Arc::new(
            (story.cqs.iter())
                .map(|(h, c)| {
                    let post = self.post_hop(&story.qps, c);
                    (
                        *h,
                        CqRow { comm: c.pid.map(|p| story.comm(p)).unwrap_or_default(), cq: c.clone(), post },
                    )
                })
                .collect(),
        );
        self.pin_ns = story.pin_ns.clone();
        self.wakeup_ns = story.wakeup_ns.clone();
        let (joined, total) = engine.joins_since(self.steps_seen);
        for j in joined {
            push_capped(Arc::make_mut(&mut self.steps), ROWS, step_row(j, engine));
        }
        self.steps_seen = total;
    }
}

/// The newest `ROWS` of rows in order.
fn newest<T>(mut rows: Vec<T>) -> VecDeque<T> {
    let over = rows.len().saturating_sub(ROWS);
    rows.drain(..over);
    rows.into()
}

fn proc_row(p: &ProcessStory) -> ProcRow {
    ProcRow {
        pid: p.pid,
        comm: p.comm.clone(),
        pinned: p.pinned_bytes,
        memlock_limit: p.memlock_limit,
        mrs_live: p.mrs_live,
        mrs_total: p.mrs_total(),
        refused: p.failed_pins_total,
        mappings: p.mappings_total,
        cgroup: p.cgroup.as_deref().map(str::to_string),
    }
}

/// A joined step as the Steps screen lists it: one line per event, time into the step.
fn step_row(j: &Joined, engine: &Engine) -> StepRow {
    let s = &j.step;
    let line = |e: &Event| {
        let arrow = crate::output::text::arrow(e.kind);
        let at = e.ts_ns as f64 / 1e3 - s.t_start_ns as f64 / 1e3;
        format!("{at:>+9.1}µs {arrow} {} {}", e.name, crate::output::text::fields_text(e))
    };
    let mut mine: Vec<&Event> = j.events.iter().filter_map(|&i| engine.event(i)).collect();
    mine.sort_by_key(|e| e.ts_ns);
    let error = match (s.errno, &s.error) {
        (Some(n), _) => Some(render::errno_name(n as i64).to_string()),
        (None, e) => e.clone(),
    };
    StepRow {
        pid: s.process(),
        tid: s.tid,
        run: s.run,
        step: s.step,
        name: s.name.as_str().into(),
        ok: s.ok,
        error,
        took_ns: s.t_end_ns.saturating_sub(s.t_start_ns),
        kernel: mine
            .iter()
            .filter(|e| !matches!(e.path, crate::event::Path::Syscall | crate::event::Path::Verbs))
            .count(),
        events: mine.into_iter().map(line).collect(),
        checks: j.checks.clone(),
    }
}

/// The story's answer to an `e` (`lesson::Ask`), handed to the screen with the next snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub id: u64,
    pub text: String,
}
