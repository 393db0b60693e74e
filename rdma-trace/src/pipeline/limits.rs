//! RLIMIT_MEMLOCK of a traced process, from /proc/<pid>/limits (read once per process):
//! what the umem pin is charged against. Root and CAP_IPC_LOCK are never refused.

use std::collections::HashMap;

/// The soft "Max locked memory" limit in bytes; `u64::MAX` for unlimited.
pub fn parse_memlock(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max locked memory"))?;
    let soft = line["Max locked memory".len()..].split_whitespace().next()?;
    if soft == "unlimited" { Some(u64::MAX) } else { soft.parse().ok() }
}

#[derive(Default)]
pub struct MemlockCache {
    known: HashMap<u32, Option<u64>>,
}

impl MemlockCache {
    pub fn of(&mut self, pid: u32) -> Option<u64> {
        *self
            .known
            .entry(pid)
            .or_insert_with(|| parse_memlock(&std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_limits_lines() {
        let t = "Limit                     Soft Limit           Hard Limit           Units     \n\
                 Max locked memory         8388608              8388608              bytes     \n";
        assert_eq!(parse_memlock(t), Some(8 << 20));
        let t = "Max locked memory         unlimited            unlimited            bytes     \n";
        assert_eq!(parse_memlock(t), Some(u64::MAX));
        assert_eq!(parse_memlock("Max open files 1024 4096 files\n"), None);
    }
}
