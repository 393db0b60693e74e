//! What an explanation is made of (its stages, the functions it names) and from (the
//! events, the story, the steps, the header, the anchor), shared by every topic.

use crate::capture::Header;
use crate::event::FieldId;
use crate::event::{Event, EventKind};
use crate::explain::frames;
use crate::pipeline::correlate::story::Story;
use crate::steps::StepRecord;
use serde::Serialize;
use std::collections::BTreeMap;

/// A kernel function named by an explanation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Named {
    pub function: String,
    pub file: String,
    pub what: String,
}

/// One stage of a path as it ran: the values seen, the functions that ran, and why.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Stage {
    pub title: String,
    /// The values seen, one line each.
    pub seen: Vec<String>,
    pub functions: Vec<Named>,
    pub text: String,
}

/// One topic explained on one real occurrence from a capture.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Explanation {
    pub topic: String,
    pub title: String,
    /// The kernel the capture was made on (its header), when known.
    pub kernel: Option<String>,
    pub occurrence: String,
    pub stages: Vec<Stage>,
    /// Why, with this run's numbers: (heading, text).
    pub notes: Vec<(String, String)>,
    /// The numbers, by name, for scripts and tests (bytes, pages, ns, counts, keys).
    pub values: BTreeMap<String, u64>,
    /// Every kernel function it names (see `functions_named`).
    pub functions: Vec<String>,
}

/// MADV_DONTFORK (asm-generic/mman-common.h).
const MADV_DONTFORK: u64 = 10;

/// What `fork` counts: syscalls seen (were they watched), madvise calls, those that said
/// MADV_DONTFORK, and pins. Over every event of a run, also where only its first events
/// are kept (`Input::run_counts`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunCounts {
    pub syscalls: u64,
    pub madvise: u64,
    pub dontfork: u64,
    pub pins: u64,
}

impl RunCounts {
    /// Counts `e` if it is a system call, a `madvise` (and a DONTFORK one) or a pin.
    pub fn add(&mut self, e: &Event) {
        if e.kind == EventKind::SyscallEnter {
            self.syscalls += 1;
            if e.name == "madvise" {
                self.madvise += 1;
                self.dontfork += u64::from(e.field(FieldId::Advice) == Some(MADV_DONTFORK));
            }
        }
        self.pins += u64::from(e.is(crate::event::ProbeId::UmemGet) && e.kind == EventKind::Entry);
    }

    /// The counts of a run's events.
    pub fn of(events: &[Event]) -> Self {
        let mut c = RunCounts::default();
        events.iter().for_each(|e| c.add(e));
        c
    }
}

/// What an explanation is made from.
pub struct Input<'a> {
    pub events: &'a [Event],
    /// The events' calls, paired (`correlate::calls`): what each return closed, and the
    /// calls each event happened in.
    pub calls: &'a crate::pipeline::correlate::calls::Pairs,
    pub story: &'a Story,
    pub steps: &'a [StepRecord],
    pub header: Option<&'a Header>,
    /// The event the person chose (the TUI's selection): the occurrence explained is the
    /// one on its thread nearest to it, else the run's first.
    pub anchor: Option<usize>,
    /// The hosts' names, in the order their captures were merged (`event::Task::host`);
    /// empty, or one, for a single host.
    pub hosts: &'a [String],
    /// The other hosts' clocks against the first's: the widest error bar of the offsets
    /// measured (None: one host, or not measured).
    pub clock_error_ns: Option<u64>,
    /// What `fork` counts, over the whole run, when `events` are only its first (None:
    /// counted from `events`).
    pub run_counts: Option<RunCounts>,
}

impl Input<'_> {
    /// A process as the explanation names it: its pid, with its host's name when the
    /// events are of several hosts (`273@host-b`).
    pub(super) fn who(&self, t: crate::event::Task) -> String {
        t.at(self.host(t))
    }
    /// The name of the host `t` ran on, where the events are of several hosts.
    pub(super) fn host(&self, t: crate::event::Task) -> Option<&str> {
        self.hosts.get(usize::from(t.host)).filter(|_| self.hosts.len() > 1).map(String::as_str)
    }
    /// Of `candidates` (event indexes, in order), the one the anchor points at: on the
    /// anchor's thread, the last at or before it, else the first after it; without an
    /// anchor (or none on its thread), `None`.
    pub(super) fn anchored(&self, candidates: &[usize]) -> Option<usize> {
        let a = self.anchor?;
        let tid = self.events.get(a)?.thread();
        let on = |i: &&usize| self.events[**i].thread() == tid;
        candidates
            .iter()
            .filter(|i| **i <= a)
            .rfind(on)
            .or(candidates.iter().find(|i| **i > a && on(i)))
            .copied()
    }
    /// The innermost call event `i` happened in that `ok` accepts (its entry).
    pub(super) fn enclosing(&self, i: usize, ok: impl Fn(&Event) -> bool) -> Option<(usize, &Event)> {
        self.calls.enclosing(i).map(|j| (j, &self.events[j])).find(|(_, e)| ok(e))
    }
    /// The first event inside the call entered at `i` that `ok` accepts.
    pub(super) fn inside(&self, i: usize, ok: impl Fn(&Event) -> bool) -> Option<(usize, &Event)> {
        self.calls.inside(i).map(|j| (j, &self.events[j])).find(|(_, e)| ok(e))
    }
    /// The return that ends the call entered at `i`.
    pub(super) fn return_of(&self, i: usize) -> Option<(usize, &Event)> {
        self.calls.return_of(i).map(|r| (r, &self.events[r]))
    }
}

/// The path's frames of a stack, outermost first, as the table names them.
pub(super) fn named_frames<S: AsRef<str>>(stack: &[S]) -> Vec<Named> {
    stack
        .iter()
        .rev()
        .filter_map(|f| frames::lookup(f.as_ref()))
        .map(|f| Named { function: f.function.into(), file: f.file.into(), what: f.what.into() })
        .collect()
}

/// A function an event was probed at, with its file when the table knows it.
pub(super) fn named(function: &str) -> Named {
    match frames::lookup(function) {
        Some(f) => Named { function: f.function.into(), file: f.file.into(), what: f.what.into() },
        None => Named { function: function.into(), file: String::new(), what: String::new() },
    }
}

/// A system call as a stage shows it: `ioctl(arg=… cmd=… fd=4) on the uverbs fd`.
pub(super) fn syscall_line(e: &Event) -> String {
    let on = e.fd_kind.as_ref().map(|k| format!(" on the {k} fd")).unwrap_or_default();
    format!("{}({}){on}", e.name, crate::output::text::fields_text(e))
}

/// `name=value` of the fields, rendered.
pub(super) fn fields(e: &Event, keys: &[FieldId]) -> String {
    keys.iter()
        .filter_map(|k| {
            e.fields.get(*k).map(|v| format!("{k}={}", crate::pipeline::render::field(e, k.as_str(), v)))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// What a capture lacks for an explanation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Missing {
    #[error("no MR registration in this capture (no umem_get event)")]
    Pin,
    #[error("no mmap on a uverbs fd in this capture (no uverbs_mmap event)")]
    Mmap,
    #[error(
        "no completion event that woke a program in this capture (event mode: ibv_req_notify_cq + ibv_get_cq_event)"
    )]
    WokenCompletion,
    #[error("no data phase in this capture (its syscalls were not watched: trace with --pid or -- CMD)")]
    DataPhase,
    #[error("no syscalls in this capture: madvise cannot be counted (trace with --pid or -- CMD)")]
    Syscalls,
}
