//! Return probes placed through tracefs with a chosen number of instances, and the
//! kernel's count of the probe hits no program saw.
//!
//! A kretprobe holds one instance per call in flight. A call that finds none left is not
//! traced at all: the kernel only bumps the probe's `nmissed`. The perf-PMU way of
//! creating kprobes (what aya uses) cannot choose the number, and the kernel's default is
//! max(10, 2 × CPUs). `ib_uverbs_comp_event_read` blocks, so every thread waiting on a
//! completion channel holds one: the default is too small for a threaded server. Here a
//! return probe is written to `kprobe_events` as `r<N>:rdma_trace_<pid>/<name> <symbol>`,
//! opened as a tracepoint perf event, and the program is linked to it.
//!
//! Each probe link (these and aya's) is asked for its `missed` count through
//! `BPF_OBJ_GET_INFO_BY_FD` (`bpf_link_info.perf_event.kprobe.missed`, Linux 6.7+): the
//! kprobe's own misses plus, for a return probe, the calls that found no instance.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Instances per return probe unless `--kretprobe-instances` says otherwise: a thousand
/// threads may wait in one probed function at once. The kernel keeps, per CPU, a slot
/// per instance (8 bytes each), so this costs 8 KiB per CPU per return probe.
pub(crate) const DEFAULT_INSTANCES: u32 = 1024;
/// The kernel's ceiling (`KRETPROBE_MAXACTIVE_MAX`).
pub(crate) const MAX_INSTANCES: u32 = 4096;

const GROUP_PREFIX: &str = "rdma_trace_";

/// One return probe this process created in tracefs, linked to a program. Dropping it
/// detaches the program and removes the event.
pub(crate) struct ReturnProbe {
    link: Option<OwnedFd>,
    perf: Option<OwnedFd>,
    events_file: PathBuf,
    event: String,
}

fn bpf(cmd: libc::c_long, attr: &mut [u64]) -> io::Result<i64> {
    // SAFETY: bpf(2) with an attr buffer of the size given, valid for the call.
    let r =
        unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), size_of_val(attr) as libc::c_uint) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

fn owned(fd: i64) -> OwnedFd {
    // SAFETY: `fd` was just returned by a syscall that creates a descriptor; nobody else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// `BPF_LINK_GET_FD_BY_ID`: a descriptor for a link known by its id.
pub(crate) fn link_fd_by_id(id: u32) -> io::Result<OwnedFd> {
    const BPF_LINK_GET_FD_BY_ID: libc::c_long = 30;
    let mut attr = [0u64; 2];
    attr[0] = id as u64;
    bpf(BPF_LINK_GET_FD_BY_ID, &mut attr).map(owned)
}

/// The kernel's missed count of a perf-event kprobe link. `struct bpf_link_info`: type,
/// id, prog_id, then (8-aligned, at byte 16) perf_event { type, pad, kprobe { func_name
/// u64, name_len, offset, addr u64, missed u64, cookie u64 } }: `missed` is word 6.
pub(crate) fn link_missed(link: BorrowedFd<'_>) -> io::Result<u64> {
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    const BPF_LINK_TYPE_PERF_EVENT: u64 = 7;
    let mut info = [0u64; 12];
    let mut attr = [0u64; 2];
    attr[0] = link.as_raw_fd() as u32 as u64 | ((size_of_val(&info) as u64) << 32);
    attr[1] = info.as_mut_ptr() as u64;
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    if info[0] & 0xffff_ffff != BPF_LINK_TYPE_PERF_EVENT {
        return Err(io::Error::other(format!("link type {} is not a perf event", info[0] & 0xffff_ffff)));
    }
    Ok(info[6])
}

/// `perf_event_open(2)` of a tracefs event by id, on CPU 0 for every process (a BPF
/// program linked to it runs wherever the probe fires).
fn open_tracepoint(id: u64) -> io::Result<OwnedFd> {
    const PERF_TYPE_TRACEPOINT: u64 = 2;
    const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
    let mut attr = [0u64; 16]; // struct perf_event_attr, PERF_ATTR_SIZE_VER7 (128 bytes)
    attr[0] = PERF_TYPE_TRACEPOINT | ((size_of_val(&attr) as u64) << 32);
    attr[1] = id; // config
    attr[2] = 1; // sample_period
    attr[6] = 1; // wakeup_events
    // SAFETY: perf_event_open(2) with a zero-initialised attr of the size it declares.
    let r = unsafe {
        libc::syscall(libc::SYS_perf_event_open, attr.as_ptr(), -1i32, 0i32, -1i32, PERF_FLAG_FD_CLOEXEC)
    };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(owned(r)) }
}

/// `BPF_LINK_CREATE` of a kprobe program on a perf event.
fn link_perf_event(prog: BorrowedFd<'_>, perf: BorrowedFd<'_>, cookie: u64) -> io::Result<OwnedFd> {
    const BPF_LINK_CREATE: libc::c_long = 28;
    const BPF_PERF_EVENT: u64 = 41;
    let mut attr = [0u64; 8];
    attr[0] = prog.as_raw_fd() as u32 as u64 | ((perf.as_raw_fd() as u32 as u64) << 32);
    attr[1] = BPF_PERF_EVENT; // attach_type; flags 0
    attr[2] = cookie;
    bpf(BPF_LINK_CREATE, &mut attr).map(owned)
}

/// The event name for a symbol: tracefs takes letters, digits and `_`.
fn event_name(slot: usize, symbol: &str) -> String {
    let clean: String =
        symbol.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    let mut name = format!("r{slot}_{clean}");
    name.truncate(60);
    name
}

fn write_events(file: &Path, line: &str) -> io::Result<()> {
    let mut f = OpenOptions::new().append(true).open(file)?;
    f.write_all(format!("{line}\n").as_bytes())
}

impl ReturnProbe {
    /// Places a return probe on `symbol` with `instances` instances and links `prog` to it.
    pub(crate) fn attach(
        tracefs: &Path,
        symbol: &str,
        instances: u32,
        prog: BorrowedFd<'_>,
        slot: usize,
    ) -> io::Result<Self> {
        let events_file = tracefs.join("kprobe_events");
        let event = format!("{GROUP_PREFIX}{}/{}", std::process::id(), event_name(slot, symbol));
        write_events(&events_file, &format!("r{instances}:{event} {symbol}")).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("writing r{instances}:{event} to {}: {e}", events_file.display()),
            )
        })?;
        // From here on, dropping `probe` removes the event again.
        let mut probe = Self { link: None, perf: None, events_file, event };
        let id_file = tracefs.join("events").join(&probe.event).join("id");
        let id: u64 = std::fs::read_to_string(&id_file)?
            .trim()
            .parse()
            .map_err(|e| io::Error::other(format!("{}: {e}", id_file.display())))?;
        let perf = open_tracepoint(id)?;
        probe.link = Some(link_perf_event(prog, perf.as_fd(), slot as u64)?);
        probe.perf = Some(perf);
        Ok(probe)
    }

    /// The calls this probe did not see (no instance left, or the kprobe re-entered).
    pub(crate) fn missed(&self) -> io::Result<u64> {
        match &self.link {
            Some(l) => link_missed(l.as_fd()),
            None => Err(io::Error::other("not linked")),
        }
    }
}

impl ReturnProbe {
    /// Its event (`group/name`) and the `kprobe_events` it is in.
    pub(crate) fn event(&self) -> (&Path, &str) {
        (&self.events_file, &self.event)
    }

    /// Leaves its event to whoever closes the last descriptor of its link
    /// (`detach::after_exit`): dropping it then removes nothing.
    pub(crate) fn leave_event(&mut self) {
        self.event.clear();
    }
}

/// Removes an event (`group/name`) this process or one before it wrote to `file`.
pub(crate) fn remove(file: &Path, event: &str) -> io::Result<()> {
    write_events(file, &format!("-:{event}"))
}

impl Drop for ReturnProbe {
    fn drop(&mut self) {
        // The link and the perf event go first: an event in use cannot be removed.
        self.link.take();
        self.perf.take();
        // Best effort: an event left behind is removed by the next run (`remove_stale`).
        if !self.event.is_empty() {
            remove(&self.events_file, &self.event).ok();
        }
    }
}

/// Removes the tracefs events of rdma-trace processes that no longer run (killed before
/// they could clean up). Returns the events removed.
pub(crate) fn remove_stale(tracefs: &Path) -> io::Result<Vec<String>> {
    let file = tracefs.join("kprobe_events");
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        // A kernel without kprobes: nothing can have been left behind.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut removed = Vec::new();
    for line in text.lines() {
        // "r1024:rdma_trace_123/r3_ib_umem_get ib_umem_get"
        let Some(event) = line.split_whitespace().next().and_then(|d| d.split_once(':')).map(|(_, e)| e)
        else {
            continue;
        };
        let Some(pid) = event.strip_prefix(GROUP_PREFIX).and_then(|r| r.split('/').next()) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        match remove(&file, event) {
            Ok(()) => removed.push(event.to_string()),
            // Still in use: a helper is detaching it after its run exited (`detach`).
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_are_tracefs_safe() {
        assert_eq!(event_name(3, "ib_umem_get"), "r3_ib_umem_get");
        assert_eq!(event_name(12, "rxe_mr_init_user.isra.0"), "r12_rxe_mr_init_user_isra_0");
        assert!(event_name(1, &"x".repeat(200)).len() <= 60);
    }

    #[test]
    fn stale_events_of_dead_processes_are_removed_and_live_ones_kept() {
        let dir = std::env::temp_dir().join(format!("rt-kpe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let me = std::process::id();
        // A pid above the kernel's pid_max limit (4194304) cannot be running.
        std::fs::write(
            dir.join("kprobe_events"),
            format!(
                "r1024:rdma_trace_{me}/r3_ib_umem_get ib_umem_get\n\
                 r1024:rdma_trace_4999999/r4_ib_umem_release ib_umem_release\n\
                 p:kprobes/other do_sys_open\n"
            ),
        )
        .unwrap();
        let removed = remove_stale(&dir).unwrap();
        assert_eq!(removed, vec!["rdma_trace_4999999/r4_ib_umem_release".to_string()]);
        let after = std::fs::read_to_string(dir.join("kprobe_events")).unwrap();
        assert!(after.ends_with("-:rdma_trace_4999999/r4_ib_umem_release\n"), "{after}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
