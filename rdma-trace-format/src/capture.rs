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

/// What exists when a subscriber joins a running daemon (after its header, before the
/// live records): per process, the memory pinned and the uverbs mappings; the queue pairs
/// with their CQs and peers; the CQs with their owners. A viewer that joins late joins
/// what comes next as one that was there from the start would.
///
/// A large state comes in pieces (`pieces`), several state records one after another, each
/// well under a reader's line limit; a reader seeds from each in turn (they add up).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    pub v: u32,
    pub seq: u64,
    #[serde(rename = "type")]
    pub ty: String,
    pub ts_ns: u64,
    pub processes: Vec<ProcessState>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub qps: Vec<QpState>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cqs: Vec<CqState>,
}

/// Rows (MRs, mappings, QPs, CQs) in one state record: at a few hundred bytes a row, a
/// piece stays far below the reader's line limit (`reader::MAX_LINE`, 1 MiB).
pub const STATE_PIECE_ROWS: usize = 1_000;

impl State {
    /// The rows it holds (MRs, mappings, QPs and CQs).
    pub fn rows(&self) -> usize {
        let per_process: usize = self.processes.iter().map(|p| p.mrs.len() + p.mappings.len()).sum();
        per_process + self.qps.len() + self.cqs.len()
    }

    /// The same state as records of at most `rows` rows each (at least one record; a
    /// process split over several keeps its name and figures in each, its MRs and mappings
    /// shared out). Seeding from each in turn is seeding from the whole.
    pub fn pieces(self, rows: usize) -> Vec<State> {
        let rows = rows.max(1);
        let State { v, seq, ty, ts_ns, processes, qps, cqs } = self;
        let empty = || State { v, seq, ty: ty.clone(), ts_ns, ..Default::default() };
        let mut out = vec![empty()];
        let mut room = rows;
        let next = |out: &mut Vec<State>, room: &mut usize| {
            if *room == 0 {
                out.push(empty());
                *room = rows;
            }
        };
        for p in &processes {
            let mut mrs = p.mrs.iter().cloned().peekable();
            let mut maps = p.mappings.iter().cloned().peekable();
            let mut first = true;
            while first || mrs.peek().is_some() || maps.peek().is_some() {
                next(&mut out, &mut room);
                let mut part = ProcessState { mrs: Vec::new(), mappings: Vec::new(), ..p.clone() };
                if !first {
                    // The figures are the process's once; a later part adds only rows.
                    (part.pinned_bytes, part.completions) = (0, 0);
                }
                first = false;
                while room > 0 && mrs.peek().is_some() {
                    part.mrs.extend(mrs.next());
                    room -= 1;
                }
                while room > 0 && maps.peek().is_some() {
                    part.mappings.extend(maps.next());
                    room -= 1;
                }
                if part.mrs.is_empty() && part.mappings.is_empty() && room > 0 {
                    // A process with no rows still takes a place (its name).
                    room -= 1;
                }
                out.last_mut().expect("one at least").processes.push(part);
            }
        }
        for q in qps {
            next(&mut out, &mut room);
            out.last_mut().expect("one at least").qps.push(q);
            room -= 1;
        }
        for c in cqs {
            next(&mut out, &mut room);
            out.last_mut().expect("one at least").cqs.push(c);
            room -= 1;
        }
        out
    }
}

/// A queue pair live when the subscriber joined: who drives it, its CQs, its state, the
/// peer it was told at RTR, and its counts so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpState {
    pub qpn: u32,
    pub pid: u32,
    /// The host it is on where several are merged (`event::Task`); never written.
    #[serde(skip)]
    pub host: u16,
    pub comm: String,
    /// Kernel `struct ib_cq *`s (0: not seen).
    pub send_cq: u64,
    pub recv_cq: u64,
    /// `enum ib_qp_state` of its newest modify.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<u64>,
    /// At RTR: the remote QP number and GID (its two halves, as the kernel holds them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dest_qpn: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dgid: Option<[u64; 2]>,
    /// Its newest post's time: a completion just after the join is joined to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_post_ns: Option<u64>,
    #[serde(flatten)]
    pub counts: QpCounts,
}

/// A QP's doorbells and completions, and what each completion was joined to: one set of
/// counts for the story's row, the state record and the report (flattened: its keys are the
/// record's own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpCounts {
    /// Doorbells rung for it (posts reaching the kernel).
    #[serde(default)]
    pub posts: u64,
    /// Completions on its CQs.
    #[serde(default)]
    pub completions: u64,
    /// Of them: joined to a post on the peer (a message that arrived), to one of its own (a
    /// send acknowledged), or with no post before them on the QP they were joined through.
    #[serde(default)]
    pub after_peer_post: u64,
    #[serde(default)]
    pub after_own_post: u64,
    #[serde(default)]
    pub before_any_post: u64,
    /// Completions while it was in the error state with no post to join: work requests
    /// flushed (a connection that failed, or one torn down).
    #[serde(default)]
    pub flushed: u64,
    /// Completions on its receive CQ while its peer is not known (the other end's capture
    /// not given, or its RTR not seen).
    #[serde(default)]
    pub peer_unknown: u64,
}

/// A CQ known when the subscriber joined: the kernel's `struct ib_cq *`, the program's
/// handle (`cq_context`), the process that made it, its completion channel's fd, and its
/// completions so far. Either pointer may be 0 where it was not seen.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CqState {
    #[serde(default)]
    pub kernel: u64,
    #[serde(default)]
    pub handle: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default)]
    pub completions: u64,
    /// The host it is on where several are merged (`event::Task`); never written.
    #[serde(skip)]
    pub host: u16,
    /// The fd of the completion channel its events are read from, where it was seen
    /// (`ibv_create_cq` with a channel, or `ibv_get_cq_event` returning it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_fd: Option<i32>,
    /// The QPs (numbered on its host) its completions were last joined through: to a post on
    /// the QP's peer, and to the QP's own post.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via_peer_qpn: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via_own_qpn: Option<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessState {
    pub pid: u32,
    /// The host it is on where several are merged (`event::Task`); never written.
    #[serde(skip)]
    pub host: u16,
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

/// A record of a capture stream.
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
        ev.fields.insert_named(&name, crate::event::Value::U((-e.errno) as u64));
    }
}

#[cfg(test)]
mod state_pieces {
    use super::*;

    fn big() -> State {
        let mrs = |n: u64| {
            (0..n)
                .map(|i| PinnedRange {
                    addr: i << 12,
                    length: 4096,
                    charged: 4096,
                    umem: Some(i),
                    ..Default::default()
                })
                .collect()
        };
        let maps = (0..10)
            .map(|i| Mapping {
                start: i << 20,
                end: (i << 20) + 4096,
                pgoff: i,
                what: Some("CQ 1 ring".into()),
            })
            .collect();
        State {
            v: VERSION,
            seq: 7,
            ty: "state".into(),
            ts_ns: 5,
            processes: vec![
                ProcessState {
                    pid: 1,
                    comm: "kv".into(),
                    pinned_bytes: 2500 * 4096,
                    mrs: mrs(2500),
                    mappings: maps,
                    completions: 9,
                    ..Default::default()
                },
                ProcessState { pid: 2, comm: "idle".into(), ..Default::default() },
            ],
            qps: (0..3)
                .map(|q| QpState {
                    qpn: q + 17,
                    pid: 1,
                    counts: QpCounts { posts: 3, ..Default::default() },
                    ..Default::default()
                })
                .collect(),
            cqs: (0..2).map(|c| CqState { kernel: c + 1, pid: Some(1), ..Default::default() }).collect(),
        }
    }

    #[test]
    fn a_large_state_comes_in_pieces_each_readable_that_add_up_to_it() {
        let whole = big();
        let pieces = whole.clone().pieces(STATE_PIECE_ROWS);
        assert_eq!(pieces.len(), 3, "2 516 rows by 1 000");
        for p in &pieces {
            assert!(p.rows() <= STATE_PIECE_ROWS);
            assert!(serde_json::to_vec(p).unwrap().len() < crate::reader::MAX_LINE / 4);
            assert_eq!((p.seq, p.ts_ns, p.ty.as_str()), (7, 5, "state"));
        }
        // Each process's rows, in order, and its figures once.
        for want in &whole.processes {
            let parts: Vec<&ProcessState> =
                pieces.iter().flat_map(|p| &p.processes).filter(|p| p.pid == want.pid).collect();
            assert!(parts.iter().all(|p| p.comm == want.comm));
            let mrs: Vec<PinnedRange> = parts.iter().flat_map(|p| p.mrs.clone()).collect();
            let maps: Vec<Mapping> = parts.iter().flat_map(|p| p.mappings.clone()).collect();
            assert_eq!((mrs, maps), (want.mrs.clone(), want.mappings.clone()));
            assert_eq!(parts.iter().map(|p| p.pinned_bytes).sum::<u64>(), want.pinned_bytes);
            assert_eq!(parts.iter().map(|p| p.completions).sum::<u64>(), want.completions);
        }
        assert_eq!(pieces.iter().flat_map(|p| p.qps.clone()).collect::<Vec<_>>(), whole.qps);
        assert_eq!(pieces.iter().flat_map(|p| p.cqs.clone()).collect::<Vec<_>>(), whole.cqs);
    }

    #[test]
    fn a_small_or_empty_state_is_one_record() {
        let empty = State { ty: "state".into(), ..Default::default() };
        assert_eq!(empty.clone().pieces(STATE_PIECE_ROWS), vec![empty]);
        let mut one = big();
        one.processes[0].mrs.truncate(3);
        assert_eq!(one.clone().pieces(STATE_PIECE_ROWS), vec![one]);
    }
}
