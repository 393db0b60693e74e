//! The event record (JSON Lines; docs/event-format.md): defined by the format crate, which
//! reads and writes it without the engine. How a field is shown comes from the catalog
//! (`pipeline::render::of`).

pub use rdma_trace_format::event::*;

/// Captures merged from several boots (`report`, `export`): the events of capture `i > 0`
/// from another boot get `i << PID_SHIFT` added to their pids and tids (pids are ≤ 2^22 on
/// Linux), so one story keeps each host's processes, CQs and QPs apart.
pub const PID_SHIFT: u32 = 22;

/// Which capture (host) a merged pid came from: 0 for the first, or for a single capture.
pub fn host_of(pid: u32) -> u32 {
    pid >> PID_SHIFT
}

/// A merged pid (or tid) as its own host numbers it.
pub fn local_pid(pid: u32) -> u32 {
    pid & ((1 << PID_SHIFT) - 1)
}

/// A merged pid as the screens and explanations name it: its own host's number, and the
/// host's name where several are merged (`273@host-b`).
pub fn pid_at(pid: u32, host: Option<&str>) -> String {
    match host {
        Some(h) => format!("{}@{h}", local_pid(pid)),
        None => local_pid(pid).to_string(),
    }
}
