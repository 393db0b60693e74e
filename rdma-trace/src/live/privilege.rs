//! Are we allowed to load and attach eBPF programs?

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The one line to print when tracing is not allowed, or None when it is.
pub(crate) fn missing(caps: u64) -> Option<&'static str> {
    let has = |c: u32| caps & (1u64 << c) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        None
    } else {
        Some("rdma-trace needs root (or CAP_BPF and CAP_PERFMON) to load its eBPF probes: run it with sudo")
    }
}

/// Ok when tracing is allowed; else the one line to print (not privileged, or /proc could
/// not be read — said as such, never mistaken for "needs root").
pub fn check() -> Result<(), NotPrivileged> {
    let caps = procfs::process::Process::myself()
        .and_then(|p| p.status())
        .map_err(NotPrivileged::Unreadable)?
        .capeff;
    match missing(caps) {
        Some(msg) => Err(NotPrivileged::Missing(msg)),
        None => Ok(()),
    }
}

/// Tracing is not allowed here (or whether it is could not be read): the one line to print.
#[derive(Debug, thiserror::Error)]
pub enum NotPrivileged {
    #[error("rdma-trace: cannot read this process's capabilities from /proc/self/status: {0}")]
    Unreadable(procfs::ProcError),
    #[error("{0}")]
    Missing(&'static str),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_sets() {
        assert!(missing(0x1ffffffffff).is_none());
        assert!(missing(0).is_some());
        assert!(missing(1 << CAP_BPF).is_some());
        assert!(missing((1 << CAP_BPF) | (1 << CAP_PERFMON)).is_none());
    }
}
