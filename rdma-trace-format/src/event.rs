//! The event record: what the pipeline after decode consumes and emits, and what capture
//! files hold (JSON Lines, version 0; see docs/event-format.md).

pub use crate::fd::FdKind;
pub use crate::fields::{FieldId, Fields, Key, Value};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The three paths the tool shows, plus teardown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Path {
    /// Memory registration: pinning user pages for the NIC.
    Pin,
    /// mmap of doorbell/UAR pages and queue buffers.
    Mmap,
    /// Interrupt → completion event on a completion channel.
    Completion,
    /// Releasing pinned memory / deregistering MRs.
    Teardown,
    /// The verbs call in user space (libibverbs) that set the kernel path off.
    Verbs,
    /// A traced program's syscall (`--pid`, `-- CMD`).
    Syscall,
}

impl Path {
    pub const fn as_str(self) -> &'static str {
        match self {
            Path::Pin => "pin",
            Path::Mmap => "mmap",
            Path::Completion => "completion",
            Path::Teardown => "teardown",
            Path::Verbs => "verbs",
            Path::Syscall => "syscall",
        }
    }
}

impl std::fmt::Display for Path {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

named_ids! {
    /// A catalog probe. The string form (`as_str`) is what files, the command line and
    /// the summary show.
    ProbeId {
        UmemGet = "umem_get",
        RxeRegMr = "rxe_reg_mr",
        Mlx5RegMr = "mlx5_reg_mr",
        UmemOdpGet = "umem_odp_get",
        OdpFault = "odp_fault",
        UmemDmabufGet = "umem_dmabuf_get",
        UmemDmabufPinned = "umem_dmabuf_pinned",
        RxeRereg = "rxe_rereg_mr",
        Mlx5Rereg = "mlx5_rereg_mr",
        UverbsMmap = "uverbs_mmap",
        RxeMmapInfo = "rxe_mmap_info",
        RxeMmap = "rxe_mmap",
        Mlx5Mmap = "mlx5_mmap",
        MmapIo = "mmap_io",
        CompHandler = "comp_handler",
        RxeCreateCq = "rxe_create_cq",
        Mlx5CreateCq = "mlx5_create_cq",
        CompEventRead = "comp_event_read",
        ModifyQp = "modify_qp",
        RxePostSend = "rxe_post_send",
        UmemRelease = "umem_release",
        MrDereg = "mr_dereg",
        IbvOpenDevice = "ibv_open_device",
        IbvRegMr = "ibv_reg_mr",
        IbvRegMrIova2 = "ibv_reg_mr_iova2",
        IbvDeregMr = "ibv_dereg_mr",
        IbvCreateCompChannel = "ibv_create_comp_channel",
        IbvCreateCq = "ibv_create_cq",
        IbvCreateQp = "ibv_create_qp",
        IbvGetCqEvent = "ibv_get_cq_event",
    }
}

impl serde::Serialize for ProbeId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

pub use crate::stack::{Frame, Stack, Stacks};

/// The version of capture format the events (and `capture`'s other records) are written
/// with: docs/event-format.md.
pub const FORMAT_VERSION: u32 = 1;

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

/// What an event is named by: the catalog probe it came from, set once when it is
/// enriched, so no consumer parses a string back; or another name (a syscall's, or a probe
/// of a newer build read from its file). Written as the plain string either way.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Name {
    Probe(ProbeId),
    Other(Key),
}

impl Name {
    pub fn as_str(&self) -> &str {
        match self {
            Name::Probe(p) => p.as_str(),
            Name::Other(s) => s,
        }
    }

    pub fn probe(&self) -> Option<ProbeId> {
        match self {
            Name::Probe(p) => Some(*p),
            Name::Other(_) => None,
        }
    }

    /// A name read from text: the probe it names, if this build knows it.
    pub fn parse(s: &str) -> Self {
        ProbeId::parse(s).map_or_else(|| Name::Other(s.to_string().into()), Name::Probe)
    }
}

impl Default for Name {
    fn default() -> Self {
        Name::Other(Key::Borrowed(""))
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl From<ProbeId> for Name {
    fn from(p: ProbeId) -> Self {
        Name::Probe(p)
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Self {
        Name::parse(s)
    }
}

impl Serialize for Name {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Name;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a probe id or a syscall name")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Name, E> {
                Ok(Name::parse(v))
            }
        }
        d.deserialize_str(V)
    }
}

/// A task's name (`comm`), shared: the same few names recur on every event, so each is
/// made once (by the tracer from the kernel's bytes, by a reader from the text) and the
/// events hold a pointer to it. Reads and writes as the string.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Comm(Option<std::sync::Arc<str>>);

/// Names kept for sharing, at most (past this the table starts again).
const COMMS_KEPT: usize = 4096;
/// Names each thread keeps at hand (`Comm::new`).
const RECENT_KEPT: usize = 8;

impl Comm {
    /// `s`, shared with every other `Comm` made from the same text (while kept).
    pub fn new(s: &str) -> Comm {
        use std::collections::HashMap;
        use std::sync::{Arc, Mutex};
        static KEPT: Mutex<Option<HashMap<Box<str>, Arc<str>>>> = Mutex::new(None);
        if s.is_empty() {
            return Comm(None);
        }
        // The names this thread made last: a stream's events come from a few tasks, so
        // most names are found here without the shared table's lock and hash.
        thread_local! {
            static RECENT: std::cell::RefCell<(usize, [Option<Arc<str>>; RECENT_KEPT])> =
                const { std::cell::RefCell::new((0, [const { None }; RECENT_KEPT])) };
        }
        let recent = RECENT.with_borrow(|(_, r)| r.iter().flatten().find(|a| &***a == s).cloned());
        if let Some(a) = recent {
            return Comm(Some(a));
        }
        let a = Self::kept(&KEPT, s);
        RECENT.with_borrow_mut(|(next, r)| {
            r[*next] = Some(Arc::clone(&a));
            *next = (*next + 1) % RECENT_KEPT;
        });
        Comm(Some(a))
    }

    /// `s` from the shared table, added if it is not there.
    fn kept(
        table: &std::sync::Mutex<Option<std::collections::HashMap<Box<str>, std::sync::Arc<str>>>>,
        s: &str,
    ) -> std::sync::Arc<str> {
        use std::collections::HashMap;
        use std::sync::Arc;
        let mut kept = table.lock().unwrap_or_else(|e| e.into_inner());
        let kept = kept.get_or_insert_with(HashMap::new);
        if let Some(a) = kept.get(s) {
            return Arc::clone(a);
        }
        if kept.len() >= COMMS_KEPT {
            kept.clear();
        }
        let a: Arc<str> = Arc::from(s);
        kept.insert(s.into(), Arc::clone(&a));
        a
    }

    pub fn as_str(&self) -> &str {
        self.0.as_deref().unwrap_or("")
    }
}

impl std::ops::Deref for Comm {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for Comm {
    fn from(s: &str) -> Self {
        Comm::new(s)
    }
}

impl From<String> for Comm {
    fn from(s: String) -> Self {
        Comm::new(&s)
    }
}

impl PartialEq<str> for Comm {
    fn eq(&self, o: &str) -> bool {
        self.as_str() == o
    }
}

impl PartialEq<&str> for Comm {
    fn eq(&self, o: &&str) -> bool {
        self.as_str() == *o
    }
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for Comm {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Comm {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Comm;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a task name")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Comm, E> {
                Ok(Comm::new(v))
            }
        }
        d.deserialize_str(V)
    }
}

/// A process (or thread) wherever it ran: the host it ran on, by its place among merged
/// captures or sources (0 for the first, or the only one), and its own number there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Task {
    pub host: u16,
    pub pid: u32,
}

impl Task {
    pub const fn new(host: u16, pid: u32) -> Self {
        Task { host, pid }
    }

    /// As screens and explanations name it: its own number, and the host's name where
    /// several are merged (`273@host-b`).
    pub fn at(self, host_name: Option<&str>) -> String {
        match host_name {
            Some(h) => format!("{}@{h}", self.pid),
            None => self.pid.to_string(),
        }
    }
}

/// Written as its pid where it is the first (or only) host's, so a single capture's JSON
/// reads as it always did; another host's as `pid@host-index`.
impl Serialize for Task {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.host == 0 {
            s.serialize_u32(self.pid)
        } else {
            s.collect_str(&format_args!("{}@{}", self.pid, self.host))
        }
    }
}

impl std::fmt::Display for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host == 0 { write!(f, "{}", self.pid) } else { write!(f, "{}@{}", self.pid, self.host) }
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
    /// The catalog probe, or the syscall (written as its string either way).
    pub name: Name,
    /// The kernel function or tracepoint (probe events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symbol: Option<Key>,
    /// pin / mmap / completion / teardown / verbs / syscall.
    pub path: Path,
    pub pid: u32,
    pub tid: u32,
    pub comm: Comm,
    pub cpu: u32,
    #[serde(default)]
    pub fields: Fields,
    /// Fields whose kernel read failed (value absent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
    /// Fields not dereferenced because the pointer was NULL or an ERR_PTR.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_followed: Vec<String>,
    /// Symbolized kernel stack, innermost first.
    #[serde(default, skip_serializing_if = "Stack::is_empty")]
    pub stack: Stack,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<ExecContext>,
    /// What the syscall's fd is (`uverbs`, `comp_channel`, or its /proc path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fd_kind: Option<FdKind>,
    /// Return events: time since the matching entry on the same thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ns: Option<u64>,
    /// The cgroup (v2) the task ran in: its id (the inode of its directory)…
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_id: Option<u64>,
    /// …and its path under /sys/fs/cgroup, when the tracer could find it (a container's
    /// names its id: `container_of`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<Frame>,
    /// v1 files: pointer fields that held an ERR_PTR, as errors (in memory they stay in
    /// `fields`; `capture::join_errors`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, KernelError>,
    /// Which host it ran on where several are merged (`Task::host`): set where a merge
    /// places it, never written (each capture is one host's).
    #[serde(skip)]
    pub host: u16,
}

/// An event as a v1 record writes it, borrowed: the writer's version and place in the
/// stream, the rest the event's own. Serializes to the same bytes as an `Event` with `v`
/// and `seq` set (its fields in `Event`'s order; a test in the writer checks it on every
/// lab capture), without copying the event.
#[derive(Serialize)]
pub struct Numbered<'a> {
    pub(crate) v: u32,
    pub(crate) seq: u64,
    pub(crate) ts_ns: u64,
    pub(crate) kind: EventKind,
    pub(crate) name: &'a Name,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) symbol: &'a Option<Key>,
    pub(crate) path: Path,
    pub(crate) pid: u32,
    pub(crate) tid: u32,
    pub(crate) comm: &'a str,
    pub(crate) cpu: u32,
    pub(crate) fields: &'a Fields,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub(crate) unreadable: &'a [String],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub(crate) not_followed: &'a [String],
    #[serde(skip_serializing_if = "<[Frame]>::is_empty")]
    pub(crate) stack: &'a [Frame],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) context: Option<ExecContext>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fd_kind: &'a Option<FdKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) latency_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cgroup_id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cgroup: &'a Option<Frame>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) errors: &'a BTreeMap<String, KernelError>,
}

impl<'a> Numbered<'a> {
    pub fn new(ev: &'a Event, v: u32, seq: u64) -> Self {
        Numbered {
            v,
            seq,
            ts_ns: ev.ts_ns,
            kind: ev.kind,
            name: &ev.name,
            symbol: &ev.symbol,
            path: ev.path,
            pid: ev.pid,
            tid: ev.tid,
            comm: &ev.comm,
            cpu: ev.cpu,
            fields: &ev.fields,
            unreadable: &ev.unreadable,
            not_followed: &ev.not_followed,
            stack: &ev.stack[..],
            context: ev.context,
            fd_kind: &ev.fd_kind,
            latency_ns: ev.latency_ns,
            cgroup_id: ev.cgroup_id,
            cgroup: &ev.cgroup,
            errors: &ev.errors,
        }
    }
}

/// The container a cgroup path names: the 64-hex-digit id in its last component that has
/// one (`docker-<id>.scope`, `/docker/<id>`, `cri-containerd-<id>.scope`, `crio-<id>.scope`,
/// `libpod-<id>.scope`, a kubepods pod's container), as the runtimes write it.
pub fn container_of(cgroup: &str) -> Option<&str> {
    cgroup.rsplit('/').find_map(|part| {
        let b = part.as_bytes();
        (0..b.len().saturating_sub(63)).find_map(|i| {
            let run = &b[i..i + 64];
            let hex = run.iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c));
            let starts = i == 0 || !b[i - 1].is_ascii_hexdigit();
            let ends = i + 64 == b.len() || !b[i + 64].is_ascii_hexdigit();
            (hex && starts && ends).then(|| &part[i..i + 64])
        })
    })
}

impl Event {
    /// The container the event's cgroup names, if any.
    pub fn container(&self) -> Option<&str> {
        self.cgroup.as_deref().and_then(container_of)
    }

    /// The process it ran in, on its host.
    pub fn process(&self) -> Task {
        Task::new(self.host, self.pid)
    }

    /// The thread it ran in, on its host.
    pub fn thread(&self) -> Task {
        Task::new(self.host, self.tid)
    }

    pub fn field(&self, id: FieldId) -> Option<u64> {
        self.fields.get(id).map(|v| v.as_u64())
    }

    /// The catalog probe this event came from (None for syscalls).
    pub fn probe(&self) -> Option<ProbeId> {
        match self.kind {
            EventKind::Entry | EventKind::Return => self.name.probe(),
            EventKind::SyscallEnter | EventKind::SyscallExit => None,
        }
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

/// Why a JSON Lines file of one kind of record (the companion's steps) could not be read:
/// each names its line.
#[derive(Debug, thiserror::Error)]
pub enum LinesError {
    #[error("line {line}: {source}")]
    Json { line: usize, source: serde_json::Error },
    #[error("line {line}: {what} format version {found} (this build reads {want})")]
    Version { line: usize, what: &'static str, found: u32, want: u32 },
}

/// Parses JSON Lines of `T`, checking each record's format version; an error names the line.
pub fn parse_lines<T: serde::de::DeserializeOwned>(
    text: &str,
    version: impl Fn(&T) -> u32,
    want: u32,
    what: &'static str,
) -> Result<Vec<T>, LinesError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let rec: T = serde_json::from_str(line).map_err(|source| LinesError::Json { line: i + 1, source })?;
        let found = version(&rec);
        if found != want {
            return Err(LinesError::Version { line: i + 1, what, found, want });
        }
        out.push(rec);
    }
    Ok(out)
}

/// A kernel function's ERR_PTR return, as a capture writes it: never a pointer-sized number.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelError {
    /// "ENOMEM".
    pub err: String,
    /// 12.
    pub errno: i64,
}

/// The errno a kernel error names (`ENOMEM`), or "errno" for one not in this list.
pub fn errno_name(e: i64) -> &'static str {
    match e {
        1 => "EPERM",
        2 => "ENOENT",
        3 => "ESRCH",
        4 => "EINTR",
        5 => "EIO",
        6 => "ENXIO",
        7 => "E2BIG",
        9 => "EBADF",
        10 => "ECHILD",
        11 => "EAGAIN",
        12 => "ENOMEM",
        13 => "EACCES",
        14 => "EFAULT",
        16 => "EBUSY",
        17 => "EEXIST",
        19 => "ENODEV",
        20 => "ENOTDIR",
        21 => "EISDIR",
        22 => "EINVAL",
        23 => "ENFILE",
        24 => "EMFILE",
        25 => "ENOTTY",
        28 => "ENOSPC",
        32 => "EPIPE",
        34 => "ERANGE",
        38 => "ENOSYS",
        61 => "ENODATA",
        62 => "ETIME",
        71 => "EPROTO",
        75 => "EOVERFLOW",
        95 => "EOPNOTSUPP",
        104 => "ECONNRESET",
        110 => "ETIMEDOUT",
        111 => "ECONNREFUSED",
        // The kernel's own, seen where a syscall was interrupted by a signal.
        512 => "ERESTARTSYS",
        513 => "ERESTARTNOINTR",
        514 => "ERESTARTNOHAND",
        516 => "ERESTART_RESTARTBLOCK",
        524 => "ENOTSUPP",
        _ => "errno",
    }
}

/// An ERR_PTR value (the top 4095 addresses) as its negative errno.
pub fn err_ptr(v: u64) -> Option<i64> {
    let s = v as i64;
    (-4095..0).contains(&s).then_some(s)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_name_is_shared_from_the_threads_recent_ones_and_from_the_table() {
        let ptr = |c: &Comm| c.0.as_ref().map(|a| std::sync::Arc::as_ptr(a) as *const u8);
        let first = Comm::new("ib_write_bw");
        // More names than a thread keeps at hand: the first is found in the shared table.
        for i in 0..super::RECENT_KEPT + 2 {
            assert_eq!(Comm::new(&format!("task{i}")).as_str(), format!("task{i}"));
        }
        assert_eq!(ptr(&Comm::new("ib_write_bw")), ptr(&first));
        // And again, now among the recent ones.
        assert_eq!(ptr(&Comm::new("ib_write_bw")), ptr(&first));
        let other_thread = std::thread::spawn(|| Comm::new("ib_write_bw")).join().unwrap();
        assert_eq!(ptr(&other_thread), ptr(&first));
        assert_eq!(Comm::new(""), Comm::default());
    }

    use super::*;

    #[test]
    fn a_name_is_typed_once_and_written_as_its_string() {
        for id in ProbeId::ALL {
            let n = Name::parse(id.as_str());
            assert_eq!(n, Name::Probe(*id));
            assert_eq!(serde_json::to_string(&n).unwrap(), format!("\"{id}\""));
        }
        let sys: Name = serde_json::from_str("\"munmap\"").unwrap();
        assert_eq!(sys, Name::Other("munmap".into()));
        assert_eq!(sys.probe(), None);
        assert!(sys == "munmap");
        // A probe this build does not know stays readable by its name.
        let newer: Name = serde_json::from_str("\"umem_future_get\"").unwrap();
        assert_eq!((newer.as_str(), newer.probe()), ("umem_future_get", None));
    }
}
