//! The story's rows, as every view reads them: a process with its calls, completions,
//! MRs and mappings, and the latency histograms. Data only: the joins that fill them are
//! in `story` (attribution), `pins` (MRs), `cqs` and `mmaps`.

use super::mmaps::Queue;
use crate::event::Task;
use crate::units::PAGE;
use std::collections::{BTreeMap, VecDeque};

/// A libibverbs call (uprobe entry/return) and the kernel events on its thread inside it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Call {
    pub name: crate::event::Name,
    pub tid: Task,
    pub entry: usize,
    pub ret: Option<usize>,
    pub nested: Vec<usize>,
    #[serde(skip)]
    pub(super) pid: Task,
    #[serde(skip)]
    pub(super) entry_ts_ns: u64,
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

/// One process's story: its calls, pins, MRs, mappings and completions.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ProcessStory {
    pub pid: Task,
    pub comm: String,
    /// The cgroup its own events ran in, latest (a container's names the container).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<crate::event::Frame>,
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
    pub completions_by_context: BTreeMap<super::cqs::RanIn, u64>,
    /// How long the umem function took per pin, and completion → wakeup.
    pub pin_latency: Histogram,
    pub wakeup_latency: Histogram,
    /// Pins the kernel made (the umem function returned a umem).
    pub pins_total: u64,
    /// Its MRs, pinned or refused, the newest kept (the rest are counted in `pins_total`,
    /// `failed_pins_total` and `mrs_seeded`).
    pub mrs: VecDeque<MrStory>,
    /// MRs pinned now.
    pub mrs_live: u64,
    /// MRs known from the kernel's tables when the story began (a daemon's state).
    pub mrs_seeded: u64,
    /// MRs registered without pinning: on-demand paging, and dma-buf (none of it charged
    /// to the memlock limit); the ODP mappings the device's faults made.
    pub odp_total: u64,
    pub dmabuf_total: u64,
    pub odp_faults: u64,
    /// Re-registrations asked (`ibv_rereg_mr`), and those the provider refused.
    pub rereg_total: u64,
    pub rereg_refused: u64,
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
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct MapStory {
    /// The `uverbs_mmap` entry (none for a mapping made before the story began).
    pub event: Option<usize>,
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    /// What the offset selects, from the driver on the mapping's stack (mlx5's command
    /// decoded; rxe's offset is a queue's key, named in `queue` once known).
    pub kind: String,
    /// The cache mode the driver chose (from the mapping's page protection).
    pub cache: Option<String>,
    pub call: Option<crate::event::Name>,
    pub queue: Option<Queue>,
    /// A munmap of its start was seen.
    pub unmapped: bool,
}

impl MapStory {
    /// What it maps, as briefly as a table row says it: the queue once named, else what the
    /// offset selects.
    pub fn what(&self) -> String {
        self.queue.as_ref().map_or_else(|| self.kind.clone(), |q| q.brief())
    }
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
pub const BUCKETS_NS: [u64; 16] = rdma_trace_common::LATENCY_BUCKETS_NS;

impl Histogram {
    /// Counts one latency.
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

impl ProcessStory {
    /// The row without its lists (events, calls, completions, wakeup latencies, MRs,
    /// refused pins, mappings): its counts, gauges and histograms, what the metrics read.
    pub fn counts_only(mut self) -> Self {
        self.events = Default::default();
        self.calls = Default::default();
        self.completions = Default::default();
        self.wakeup_latencies_ns = Default::default();
        self.mrs = Default::default();
        self.failed_pins = Default::default();
        self.mappings = Default::default();
        self
    }

    /// Every MR it registered (pinned, ODP, dma-buf, or known from the tables).
    pub fn mrs_total(&self) -> u64 {
        self.pins_total + self.odp_total + self.dmabuf_total + self.mrs_seeded
    }
}

/// What an MR's memory is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MrKind {
    /// User pages pinned (`ib_umem_get`), charged to RLIMIT_MEMLOCK.
    #[default]
    Pinned,
    /// On-demand paging (`ib_umem_odp_get`): nothing pinned; pages are mapped as the
    /// device faults on them.
    Odp,
    /// A dma-buf exporter's memory (`ib_umem_dmabuf_get`: GPU memory, say), moved when the
    /// exporter says so.
    DmaBuf { fd: u64 },
    /// A dma-buf the exporter pins for the MR's life (`ib_umem_dmabuf_get_pinned`).
    DmaBufPinned { fd: u64 },
}

impl MrKind {
    /// As a table cell says it.
    pub fn brief(self) -> String {
        match self {
            MrKind::Pinned => "pinned".into(),
            MrKind::Odp => "ODP".into(),
            MrKind::DmaBuf { fd } => format!("dma-buf fd {fd}"),
            MrKind::DmaBufPinned { fd } => format!("dma-buf fd {fd}, pinned"),
        }
    }
}

/// One MR: its umem and what became of it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct MrStory {
    pub kind: MrKind,
    pub pid: Task,
    /// The thread that registered it.
    pub tid: Task,
    /// The pin's return event (none for an MR known only from the kernel's tables).
    pub event: Option<usize>,
    pub addr: u64,
    pub length: u64,
    pub pages: Option<u64>,
    pub access: Option<u64>,
    pub latency_ns: Option<u64>,
    pub lkey: Option<u64>,
    pub rkey: Option<u64>,
    /// Pinned now (not yet released).
    pub live: bool,
    /// A refused pin: the errno (12 for ENOMEM), and the memlock limit it was held to.
    pub refused: Option<i64>,
    pub memlock_limit: Option<u64>,
    /// The kernel's `struct ib_umem *`, which its release names.
    #[serde(skip)]
    pub umem: Option<u64>,
    /// The restrack id of an MR from the tables (`rdma res`): its `mr_dereg` ends it.
    pub mr_id: Option<u32>,
    /// The kernel's `struct ib_mr *` (from the provider's reg_mr), which a rereg names.
    #[serde(skip)]
    pub mr: Option<u64>,
    /// ODP: the times its pages were mapped for the device (faults or prefetches), and
    /// the pages those mapped.
    pub faults: u64,
    pub faulted_pages: u64,
    /// Re-registrations asked of it (`ibv_rereg_mr`), and how many the provider refused.
    pub rereg: u64,
    pub rereg_refused: u64,
}

impl MrStory {
    /// Known only from the kernel's tables (`rdma res`: no address, no pin seen).
    pub fn from_tables(&self) -> bool {
        self.mr_id.is_some()
    }

    /// How it stands: `refused` (the pin failed), `live` (registered), or `deregistered`.
    pub fn state(&self) -> &'static str {
        match (self.refused, self.live) {
            (Some(_), _) => "refused",
            (None, true) => "live",
            (None, false) => "deregistered",
        }
    }

    /// What it charges against the memlock limit: whole pages.
    pub fn charged(&self) -> u64 {
        self.pages.map(|p| p * PAGE).unwrap_or(self.length)
    }
}
