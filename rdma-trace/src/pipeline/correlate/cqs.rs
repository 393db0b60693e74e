//! The completion path per CQ: completions counted by the context they ran in and per
//! second, and the three hops — the handler's own time, completion → the channel read
//! that woke the program, and that read → `ibv_get_cq_event` returning.

use crate::event::FieldId;
use crate::event::Task;
use crate::event::{Event, EventKind, ExecContext, ProbeId};
use crate::util::push_capped;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Latency samples kept per hop (the newest).
pub const SAMPLES: usize = 1_024;
/// Seconds of per-second completion counts kept.
pub const SECONDS: usize = 60;

/// Latency samples (ns), the newest `SAMPLES` kept; shared, so a copy of a row (the TUI's
/// snapshot) copies a pointer, and the next sample copies them only if one is still held.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Samples(pub std::sync::Arc<VecDeque<u64>>);

impl Samples {
    /// Adds a sample, dropping the oldest past the capacity.
    pub fn push(&mut self, v: u64) {
        push_capped(std::sync::Arc::make_mut(&mut self.0), SAMPLES, v);
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

/// The CQ a completion handler's event is for: the program's own handle when the kernel
/// read one, else the kernel's CQ pointer.
pub fn cq_handle(e: &Event) -> Option<u64> {
    e.field(FieldId::CqUserHandle).filter(|h| *h != 0).or(e.field(FieldId::Cq))
}

/// A QP: the host it lives on (0 for a single capture) and its number there (here, below
/// `qps`, because a CQ names the QPs its completions were joined through).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct QpKey {
    pub host: u16,
    pub qpn: u32,
}

/// The CQs by handle (`cq_handle`).
pub(crate) type CqRows = BTreeMap<u64, CqStory>;

/// One CQ and its completion path.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct CqStory {
    pub handle: u64,
    /// Its owner, when known (the process that created it).
    pub pid: Option<Task>,
    pub completions: u64,
    /// Its latest completion handler's entry (an event index of the story).
    pub latest: Option<usize>,
    pub by_context: BTreeMap<RanIn, u64>,
    /// Completions per second of the events' clock, oldest first (the last is the newest
    /// second seen).
    pub per_second: VecDeque<u64>,
    #[serde(skip)]
    last_second: u64,
    pub handler_ns: Samples,
    pub wakeup_ns: Samples,
    pub library_ns: Samples,
    /// The kernel's `struct ib_cq *` and the host it is on (`event::Task::host`): what a
    /// QP's send and receive CQs are known by (`qps`).
    pub kernel: u64,
    pub host: u16,
    /// The QP its newest completion joined to a post on its peer went through, and the QP
    /// whose own post its newest other one followed. Kept by key: the kernel gives a freed
    /// CQ's address to the next CQ made, so the pointer cannot say whose QP it was.
    pub via_peer: Option<QpKey>,
    pub via_own: Option<QpKey>,
    /// The fd of the completion channel its events are read from: given to `ibv_create_cq`,
    /// or the channel `ibv_get_cq_event` read one of its events from (a CQ made by
    /// `ibv_create_cq_ex`, as perftest does, is known only by the second).
    pub channel_fd: Option<i32>,
}

/// A CQ a daemon said had completions before this story began (`capture::CqState`): its
/// row, with its maker and count; its latencies are sampled from here on.
pub(super) fn seed(rows: &mut CqRows, c: &crate::capture::CqState) {
    let handle = if c.handle != 0 { c.handle } else { c.kernel };
    let row = rows.entry(handle).or_insert_with(|| CqStory { handle, ..Default::default() });
    row.pid = c.pid.map(|p| Task::new(c.host, p)).or(row.pid);
    row.kernel = c.kernel;
    row.host = c.host;
    row.completions += c.completions;
    let key = |qpn: Option<u32>| qpn.map(|qpn| QpKey { host: row.host, qpn });
    row.via_peer = key(c.via_peer_qpn).or(row.via_peer);
    row.via_own = key(c.via_own_qpn).or(row.via_own);
    row.channel_fd = c.channel_fd.or(row.channel_fd);
}

/// A completion of CQ `handle` was joined through QP `key` (to a post on its peer when
/// `across`).
pub(super) fn joined(rows: &mut CqRows, handle: u64, key: QpKey, across: bool) {
    if let Some(cq) = rows.get_mut(&handle) {
        *(if across { &mut cq.via_peer } else { &mut cq.via_own }) = Some(key);
    }
}

/// What joins a CQ's hops between events (its rows are the story's).
#[derive(Default)]
pub(super) struct Cqs {
    /// The CQ each thread's completion handler is running for.
    handling: HashMap<Task, u64>,
    /// Per thread, the channel read that woke it: (its time, the CQ).
    last_read: HashMap<Task, (u64, u64)>,
    /// Per thread, the channel fd the `ibv_get_cq_event` it is in reads.
    reading: HashMap<Task, i32>,
}

impl Cqs {
    /// A completion handler entered (`made`: the CQ's process and channel fd, as far as
    /// known); returns the CQ.
    pub(super) fn completion(&mut self, rows: &mut CqRows, i: usize, e: &Event, made: Made) -> u64 {
        let handle = cq_handle(e).unwrap_or(0);
        let cq = rows.entry(handle).or_insert_with(|| CqStory { handle, ..Default::default() });
        cq.pid = made.pid.or(cq.pid);
        cq.channel_fd = made.channel_fd.or(cq.channel_fd);
        cq.kernel = e.field(FieldId::Cq).unwrap_or(cq.kernel);
        cq.host = e.host;
        cq.completions += 1;
        cq.latest = Some(i);
        *cq.by_context.entry(RanIn(e.context)).or_default() += 1;
        let second = e.ts_ns / 1_000_000_000;
        if cq.per_second.is_empty() {
            cq.last_second = second;
            cq.per_second.push_back(0);
        }
        // Quiet seconds count as zeros, at most the `SECONDS` kept: a gap of years (a
        // damaged or hostile timestamp) costs no more than a minute's.
        let quiet = second.saturating_sub(cq.last_second);
        for _ in 0..quiet.min(SECONDS as u64) {
            push_capped(&mut cq.per_second, SECONDS, 0);
        }
        cq.last_second = cq.last_second.max(second);
        if let Some(last) = cq.per_second.back_mut() {
            *last += 1;
        }
        self.handling.insert(e.thread(), handle);
        handle
    }

    /// The handler's return, and ibv_get_cq_event's: their hops (and, at ibv_get_cq_event's
    /// entry, the channel fd it reads).
    pub(super) fn hops(&mut self, rows: &mut CqRows, e: &Event) {
        if e.kind != EventKind::Return {
            if let Some(fd) = e.field(FieldId::Fd).filter(|_| e.is(ProbeId::IbvGetCqEvent)) {
                self.reading.insert(e.thread(), fd as i32);
            }
            return;
        }
        let (latency, handle) = match e.probe() {
            Some(ProbeId::CompHandler) => (e.latency_ns, self.handling.remove(&e.thread())),
            Some(ProbeId::IbvGetCqEvent) => match self.last_read.remove(&e.thread()) {
                Some((t, h)) => {
                    self.read_from(rows, e.thread(), h);
                    (Some(e.ts_ns.saturating_sub(t)), Some(h))
                }
                // Left for `woke`, when ibv_get_cq_event's return is itself the wakeup.
                None => (None, None),
            },
            _ => return,
        };
        if let (Some(l), Some(cq)) = (latency, handle.and_then(|h| rows.get_mut(&h))) {
            match e.probe() {
                Some(ProbeId::CompHandler) => cq.handler_ns.push(l),
                _ => cq.library_ns.push(l),
            }
        }
    }

    /// A wakeup consumed a completion of `handle` after `latency`; a kernel read (`e`)
    /// starts the library hop on its thread.
    pub(super) fn woke(&mut self, rows: &mut CqRows, e: &Event, handle: u64, latency: u64) {
        if let Some(cq) = rows.get_mut(&handle) {
            cq.wakeup_ns.push(latency);
        }
        if e.is(ProbeId::CompEventRead) {
            self.last_read.insert(e.thread(), (e.ts_ns, handle));
        }
        if e.is(ProbeId::IbvGetCqEvent) {
            self.read_from(rows, e.thread(), handle);
        }
    }

    /// Thread `tid`'s ibv_get_cq_event returned an event of `handle`: the CQ's channel is the
    /// fd it read.
    fn read_from(&mut self, rows: &mut CqRows, tid: Task, handle: u64) {
        if let (Some(fd), Some(cq)) = (self.reading.remove(&tid), rows.get_mut(&handle)) {
            cq.channel_fd = Some(fd);
        }
    }
}

/// What is known of a CQ's making when its completion is seen: its process and the fd of
/// the channel it was made with.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Made {
    pub pid: Option<Task>,
    pub channel_fd: Option<i32>,
}

/// The context a completion ran in, as counted (a map key): the event's, or unknown where
/// its capture has none. Written, and ordered, as its word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RanIn(pub Option<ExecContext>);

impl RanIn {
    pub fn as_str(self) -> &'static str {
        match self.0 {
            Some(ExecContext::Softirq) => "softirq",
            Some(ExecContext::Kworker) => "kworker",
            Some(ExecContext::Process) => "process",
            None => "unknown",
        }
    }
}

impl std::fmt::Display for RanIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl Ord for RanIn {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialOrd for RanIn {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl serde::Serialize for RanIn {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}
