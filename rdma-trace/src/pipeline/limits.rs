//! RLIMIT_MEMLOCK of a traced process, from /proc/<pid>/limits (read once per process):
//! what the umem pin is charged against. Root and CAP_IPC_LOCK are never refused. The pin
//! probe reads the limit from the task itself when it fires; this is the fallback for
//! events without it (a kernel whose BTF lacks the path, a failed read).

use procfs::process::{LimitValue, Process};
use std::collections::HashMap;

/// The soft "Max locked memory" limit of `pid` in bytes; `u64::MAX` for unlimited. None if
/// the process is gone (events are enriched after the fact) or /proc cannot be read.
pub(crate) fn memlock_of(pid: u32) -> Option<u64> {
    let limit = Process::new(pid as i32).and_then(|p| p.limits()).ok()?.max_locked_memory.soft_limit;
    Some(match limit {
        LimitValue::Unlimited => u64::MAX,
        LimitValue::Value(v) => v,
    })
}

#[derive(Default)]
pub struct MemlockCache {
    known: HashMap<u32, Option<u64>>,
}

impl MemlockCache {
    pub fn of(&mut self, pid: u32) -> Option<u64> {
        *self.known.entry(pid).or_insert_with(|| memlock_of(pid))
    }

    /// The processes it holds a limit of.
    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.known.keys().copied()
    }

    /// Process `pid` ended: a new process given the pid is read afresh.
    pub fn forget(&mut self, pid: u32) {
        self.known.remove(&pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memlock_of_this_process_is_its_rlimit() {
        let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit(2) with a valid rlimit struct.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) }, 0);
        let want = if r.rlim_cur == libc::RLIM_INFINITY { u64::MAX } else { r.rlim_cur };
        assert_eq!(MemlockCache::default().of(std::process::id()), Some(want));
        // No such process (above the kernel's pid limit).
        assert_eq!(memlock_of(4_999_999), None);
    }
}
