//! Are we allowed to load and attach eBPF programs?

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Parses `CapEff:` from /proc/self/status.
pub fn effective_caps(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

/// The one line to print when tracing is not allowed, or None when it is.
pub fn missing(caps: u64) -> Option<&'static str> {
    let has = |c: u32| caps & (1u64 << c) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        None
    } else {
        Some("rdma-trace needs root (or CAP_BPF and CAP_PERFMON) to load its eBPF probes: run it with sudo")
    }
}

pub fn check() -> Result<(), &'static str> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    match missing(effective_caps(&status).unwrap_or(0)) {
        Some(msg) => Err(msg),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_sets() {
        assert_eq!(effective_caps("Name:\tx\nCapEff:\t000001ffffffffff\n"), Some(0x1ffffffffff));
        assert!(missing(0x1ffffffffff).is_none());
        assert!(missing(0).is_some());
        assert!(missing(1 << CAP_BPF).is_some());
        assert!(missing((1 << CAP_BPF) | (1 << CAP_PERFMON)).is_none());
    }
}
