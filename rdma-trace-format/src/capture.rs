//! Capture format v1: the records of a capture file, which is also the wire format of the
//! daemon and of `trace -o -` (docs/event-format.md).
//!
//! One JSON object per line. Every v1 line starts `{"v":1,"seq":N,` — `seq` counts the
//! records of the stream from 0, so a reader tells a gap from a quiet period. Events are
//! the `Event` record (no `type` key); every other record names itself with `"type"`:
//! one `header` first, `stats` every 800 ms, a `loss` where loss was seen, one
//! `trailer` last. A stream without its trailer was cut short.
//!
//! Version rule: a reader reads every version up to its own; a newer minor addition is a
//! new optional key (ignored by older readers); anything else is a new version. v0 files
//! (bare events, `"v":0`) are still read.

use crate::event::Event;
pub use crate::event::KernelError;
pub use crate::loss::{LossReason, LossSite};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const VERSION: u32 = crate::event::FORMAT_VERSION;

/// Stats records come this often while a run lasts (the format promises at most a second
/// between two; the margin absorbs a late timer).
pub const STATS_EVERY: std::time::Duration = std::time::Duration::from_millis(800);

/// The first record: what ran, where, and what was attached.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub v: u32,
    pub seq: u64,
    #[serde(rename = "type")]
    pub ty: String,
    /// "rdma-trace 0.1.0".
    pub tool: String,
    pub hostname: String,
    pub kernel_release: String,
    /// /proc/sys/kernel/random/boot_id: timestamps of two files compare only within a boot.
    pub boot_id: String,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC at start, in ns: `ts_ns + this` is wall-clock time.
    pub realtime_offset_ns: i64,
    pub command_line: Vec<String>,
    pub ring_bytes: u32,
    pub return_instances: u32,
    pub probes: Vec<ProbeStatus>,
    /// The libibverbs the uprobes went on, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub libibverbs: Option<String>,
    /// Written with `--redact`: kernel addresses and page frames are stand-ins.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redacted: bool,
    /// What the kernel said of fork() and pinned pages at start (`rdma sys show`:
    /// copy-on-fork), when it could be asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_on_fork: Option<bool>,
    /// Other hosts' clocks against this one's, measured at start (`daemon --clock-peer`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clocks: Vec<ClockSample>,
}

/// Another host's clock, measured NTP-style: this host asked at `t0`, the peer answered
/// with its wall clock `t1`, the answer came back at `t2` (both ends' CLOCK_REALTIME, ns).
/// `offset_ns` = t1 − (t0 + t2)/2 is how far the peer's wall clock is ahead of this one's;
/// it is wrong by at most half the round trip, `rtt_ns` / 2 (of the sample kept: the one
/// with the shortest round trip of those asked).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockSample {
    /// What was asked (`HOST:PORT` of the peer's daemon).
    pub peer: String,
    /// The peer's own name and boot, from its answer: what its capture's header says.
    pub hostname: String,
    pub boot_id: String,
    pub offset_ns: i64,
    pub rtt_ns: u64,
    /// Samples taken; the one with the shortest round trip is kept.
    pub samples: u32,
    /// This host's wall clock when it was kept (t2), ns since the epoch.
    pub at_ns: i64,
}

impl ClockSample {
    /// From one exchange: sent at `t0`, the peer's `t1`, received at `t2`.
    pub fn from_exchange(t0: i64, t1: i64, t2: i64) -> (i64, u64) {
        let rtt = (t2 - t0).max(0);
        (t1 - (t0 + rtt / 2), rtt as u64)
    }

    /// The error bar: half the round trip.
    pub fn error_ns(&self) -> u64 {
        self.rtt_ns.div_ceil(2)
    }
}

/// One catalog probe in this run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeStatus {
    pub id: String,
    /// The symbol it resolved to (absent when skipped before resolving).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symbol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    pub attached: bool,
    /// Why it was skipped, or how it was attached otherwise than asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One probe's account at a moment: `hits = delivered + lost + in_flight`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteCount {
    pub site: LossSite,
    pub hits: u64,
    pub delivered: u64,
    /// Counted by the program, not read yet (0 in the trailer, or lost as "held").
    pub in_flight: u64,
    /// Lost, by reason.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub lost: BTreeMap<LossReason, u64>,
}

/// Periodic accounting, every 800 ms (`STATS_EVERY`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub v: u32,
    pub seq: u64,
    #[serde(rename = "type")]
    pub ty: String,
    pub ts_ns: u64,
    pub sites: Vec<SiteCount>,
}

/// Loss seen since the previous stats record, where it happened in the stream.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Loss {
    pub v: u32,
    pub seq: u64,
    #[serde(rename = "type")]
    pub ty: String,
    pub ts_ns: u64,
    pub site: LossSite,
    pub reason: LossReason,
    pub count: u64,
}

/// The last record: final counts and why the run stopped.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Trailer {
    pub v: u32,
    pub seq: u64,
    #[serde(rename = "type")]
    pub ty: String,
    pub ts_ns: u64,
    pub stopped: String,
    pub exit_code: i32,
    pub delivered: u64,
    pub lost: u64,
    pub sites: Vec<SiteCount>,
}

/// A companion step, as its `rdma_trace_step` marker announced it while the run went on:
/// the step record of docs/workload.md, whole, with its own version inside.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub v: u32,
    pub seq: u64,
    #[serde(rename = "type")]
    pub ty: String,
    pub step: crate::steps::StepRecord,
}

/// A record of a capture stream.
/// What exists when a subscriber joins a running daemon (after its header, before the
/// live records): per process, the memory pinned and the uverbs mappings, so a viewer
/// that joins late still sees what was set up before it came.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    pub v: u32,
    pub seq: u64,
    #[serde(rename = "type")]
    pub ty: String,
    pub ts_ns: u64,
    pub processes: Vec<ProcessState>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessState {
    pub pid: u32,
    pub comm: String,
    pub pinned_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memlock_limit: Option<u64>,
    pub mrs: Vec<PinnedRange>,
    pub mappings: Vec<Mapping>,
    pub completions: u64,
    /// Known from the kernel's resource tables at start (`rdma res`), not from events seen.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub seeded: bool,
}

/// A live pin: the user range and the bytes charged (whole pages), with what names it to
/// the events that end it: the umem pointer `ib_umem_release` gets (when the pin was seen),
/// or the restrack id the `rdma_core:mr_dereg` tracepoint gives (when it came from `rdma res`,
/// which lists no address and no umem).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedRange {
    pub addr: u64,
    pub length: u64,
    pub charged: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub umem: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mr_id: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lkey: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rkey: Option<u64>,
}

/// A uverbs mapping (doorbell/UAR or queue pages): the VMA and its page offset.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    /// What it maps, where the tracer learned it (soft-RoCE: the queue behind the key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    Header(Box<Header>),
    State(State),
    /// Shared: a reader's event goes to every sink as the pointer it is made in.
    Event(std::sync::Arc<Event>),
    Step(Box<Step>),
    Stats(Stats),
    Loss(Loss),
    Trailer(Trailer),
}

impl Record {
    pub fn seq(&self) -> Option<u64> {
        match self {
            Record::Header(h) => Some(h.seq),
            Record::State(s) => Some(s.seq),
            Record::Event(e) => e.seq,
            Record::Step(s) => Some(s.seq),
            Record::Stats(s) => Some(s.seq),
            Record::Loss(l) => Some(l.seq),
            Record::Trailer(t) => Some(t.seq),
        }
    }
}

/// For reading: `errors` back into the ERR_PTR values the pipeline works on.
pub fn join_errors(ev: &mut Event) {
    for (name, e) in std::mem::take(&mut ev.errors) {
        ev.fields.insert(name.into(), crate::event::Value::U((-e.errno) as u64));
    }
}
