//! Letting go of the probes after rdma-trace has exited, so a stop does not wait for it.
//!
//! Closing a probe's link is what detaches it, and the kernel makes that slow: each perf
//! probe is unregistered under `event_mutex` with a grace period, about 80 ms a link in
//! the TCG lab and tens of ms on real machines, so 40–60 links held the prompt for seconds
//! (13–15 s under a `dd bs=1` flood on 7.3). At a stop the programs are first switched off
//! (`Loaded::switch_off`: they still run but return at once), the ring is drained and the
//! outputs are written; then a helper process (`rdma-trace __detach-after-exit`) is given
//! every BPF and perf descriptor of this process. When this process exits its own
//! references go without cost; the helper, which waited for that exit, closes the last
//! ones (the detach) and removes the return probes' tracefs events. Meanwhile the probes
//! stay attached and switched off. If the helper cannot be started, the links are closed
//! here, as before.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// The hidden subcommand the helper runs as.
pub(crate) const HELPER: &str = "__detach-after-exit";

/// What the helper removes from tracefs once the descriptors are closed.
pub(crate) struct Events {
    /// `kprobe_events` of the tracefs the events were written to.
    pub file: PathBuf,
    /// The events, `group/name`.
    pub names: Vec<String>,
}

/// Starts the helper with every BPF and perf descriptor of this process; it holds them
/// until this process exits, then closes them and removes `events`.
pub(crate) fn after_exit(events: &Events) -> io::Result<()> {
    let mut keep = descriptors()?;
    let (read, write) = super::spawn::cloexec_pipe()?;
    keep.push(read.as_raw_fd());
    let mut cmd = std::process::Command::new("/proc/self/exe");
    cmd.arg(HELPER).arg("--wait-fd").arg(read.as_raw_fd().to_string());
    if !events.names.is_empty() {
        cmd.arg("--events-file").arg(&events.file).args(&events.names);
    }
    cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
    cmd.stderr(std::process::Stdio::null());
    // SAFETY: between fork and exec only fcntl(2) and setsid(2), both async-signal-safe,
    // over a list allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            for fd in &keep {
                if libc::fcntl(*fd, libc::F_SETFD, 0) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            // Its own session: the terminal's Ctrl-C and hangup are not for it.
            libc::setsid();
            Ok(())
        });
    }
    // Not waited for: at this process's exit it is handed to init, which reaps it.
    drop(cmd.spawn()?);
    // The write end stays open until this process exits: its end is the helper's signal.
    std::mem::forget(write);
    Ok(())
}

/// This process's BPF objects (links, programs, maps) and perf events, by descriptor.
fn descriptors() -> io::Result<Vec<i32>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let entry = entry?;
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(target) = std::fs::read_link(entry.path()) else { continue };
        if is_probe_object(&target.to_string_lossy()) {
            out.push(fd);
        }
    }
    Ok(out)
}

/// Whether a descriptor's `/proc/self/fd` link names a BPF object or a perf event.
fn is_probe_object(target: &str) -> bool {
    target.starts_with("anon_inode:bpf") || target == "anon_inode:[perf_event]"
}

/// The helper: waits until the tracer that started it has exited (its pipe's end), closes
/// every descriptor it was given (the kernel detaches each probe as its last reference
/// goes), then removes the return probes' events. Returns the number of events it could
/// not remove (a later run removes those: `kprobe_events::remove_stale`).
pub(crate) fn helper(wait_fd: i32, events_file: Option<&Path>, events: &[String]) -> usize {
    let mut b = [0u8; 1];
    loop {
        // SAFETY: read(2) into a one-byte buffer of ours.
        let n = unsafe { libc::read(wait_fd, b.as_mut_ptr().cast(), 1) };
        if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break;
        }
    }
    // SAFETY: close_range(2) on descriptors this process holds and nothing here uses.
    unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    let Some(file) = events_file else { return events.len() };
    events.iter().filter(|e| super::kprobe_events::remove(file, e).is_err()).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bpf_objects_and_perf_events_are_handed_over() {
        for t in
            ["anon_inode:bpf_link", "anon_inode:bpf-prog", "anon_inode:bpf-map", "anon_inode:[perf_event]"]
        {
            assert!(is_probe_object(t), "{t}");
        }
        for t in ["pipe:[123]", "/dev/pts/0", "socket:[9]", "/tmp/capture.jsonl", "anon_inode:[eventfd]"] {
            assert!(!is_probe_object(t), "{t}");
        }
    }
}
