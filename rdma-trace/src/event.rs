//! The event record: what the pipeline after decode consumes and emits, and what capture
//! files hold (JSON Lines, version 0; see docs/event-format.md).

pub use crate::plan::catalog::{Path, ProbeId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The version events are written with (`capture::VERSION`).
pub const FORMAT_VERSION: u32 = crate::capture::VERSION;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A kernel function was entered (or a tracepoint fired).
    Entry,
    /// A kernel function returned.
    Return,
    SyscallEnter,
    SyscallExit,
}

/// Where the kernel ran the code (completions never run in the workload's pid).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecContext {
    Process,
    Kworker,
    Softirq,
}

/// A field value: unsigned (addresses, lengths, keys) or signed (return codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    U(u64),
    I(i64),
}

impl Value {
    pub fn as_u64(self) -> u64 {
        match self {
            Value::U(v) => v,
            Value::I(v) => v as u64,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub v: u32,
    /// v1: the record's place in its stream (see `capture`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns).
    pub ts_ns: u64,
    pub kind: EventKind,
    /// Probe id (catalog) or syscall name.
    pub name: String,
    /// The kernel function or tracepoint (probe events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symbol: Option<String>,
    /// pin / mmap / completion / teardown / verbs / syscall.
    pub path: Path,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub cpu: u32,
    #[serde(default)]
    pub fields: BTreeMap<String, Value>,
    /// Fields whose kernel read failed (value absent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
    /// Fields not dereferenced because the pointer was NULL or an ERR_PTR.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_followed: Vec<String>,
    /// Symbolized kernel stack, innermost first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stack: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<ExecContext>,
    /// What the syscall's fd is (`uverbs`, `comp_channel`, or its /proc path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fd_kind: Option<String>,
    /// Return events: time since the matching entry on the same thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ns: Option<u64>,
    /// v1 files: pointer fields that held an ERR_PTR, as errors (in memory they stay in
    /// `fields`; `capture::join_errors`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, crate::capture::KernelError>,
}

impl Event {
    pub fn field(&self, name: &str) -> Option<u64> {
        self.fields.get(name).map(|v| v.as_u64())
    }

    /// The catalog probe this event came from (None for syscalls).
    pub fn probe(&self) -> Option<ProbeId> {
        match self.kind {
            EventKind::Entry | EventKind::Return => ProbeId::parse(&self.name),
            EventKind::SyscallEnter | EventKind::SyscallExit => None,
        }
    }

    /// How field `name` of this event is shown: the hint its probe's catalog entry gives
    /// (or the syscall table's), so every output renders a value alike.
    pub fn render_of(&self, name: &str) -> crate::plan::catalog::Render {
        if let Some(spec) = self.probe().map(crate::plan::catalog::by_id) {
            let fields = if self.kind == EventKind::Return { spec.ret } else { spec.entry };
            if let Some(f) = fields.iter().find(|f| f.name == name) {
                return f.render;
            }
        }
        crate::plan::syscalls::render_of(name)
    }

    /// Whether this event came from probe `id`.
    pub fn is(&self, id: ProbeId) -> bool {
        self.probe() == Some(id)
    }

    /// Whether this event came from one of `ids`.
    pub fn is_any(&self, ids: &[ProbeId]) -> bool {
        self.probe().is_some_and(|p| ids.contains(&p))
    }
}

/// Parses JSON Lines of `T`, checking each record's format version; an error names the line.
pub fn parse_lines<T: serde::de::DeserializeOwned>(
    text: &str,
    version: impl Fn(&T) -> u32,
    want: u32,
    what: &str,
) -> Result<Vec<T>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let rec: T = serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1))?;
        let v = version(&rec);
        if v != want {
            return Err(format!("line {}: {what} format version {v} (this build reads {want})", i + 1));
        }
        out.push(rec);
    }
    Ok(out)
}

/// The events of a whole capture (v0 or v1) held in memory, strictly: the first damaged
/// line is an error naming it. Streams are read with `source::capture::Reader`.
pub fn parse_jsonl(text: &str) -> Result<Vec<Event>, String> {
    let mut out = Vec::new();
    for r in crate::source::capture::Reader::new(text.as_bytes(), true) {
        if let crate::capture::Record::Event(e) = r.map_err(|e| e.to_string())? {
            out.push(*e);
        }
    }
    Ok(out)
}
