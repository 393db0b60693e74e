//! Recognising a process's RDMA file descriptors from /proc/<pid>/fd.
//!
//! The uverbs fd is the opened character device `/dev/infiniband/uverbsN`; a completion
//! channel is an anonymous inode named `[infinibandevent]` (ib_uverbs creates it with
//! anon_inode_getfile). Both are looked up once per (pid, fd) and cached.

use std::collections::HashMap;

pub fn classify_target(target: &str) -> String {
    if target.starts_with("/dev/infiniband/uverbs") {
        "uverbs".into()
    } else if target == "anon_inode:[infinibandevent]" {
        "comp_channel".into()
    } else if target.starts_with("/dev/infiniband/rdma_cm") {
        "rdma_cm".into()
    } else {
        target.into()
    }
}

#[derive(Default)]
pub struct FdCache {
    known: HashMap<(u32, u64), String>,
}

impl FdCache {
    pub fn kind(&mut self, pid: u32, fd: u64) -> Option<String> {
        if fd > i32::MAX as u64 {
            return None;
        }
        if let Some(k) = self.known.get(&(pid, fd)) {
            return Some(k.clone());
        }
        let target = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
        let k = classify_target(&target.to_string_lossy());
        self.known.insert((pid, fd), k.clone());
        Some(k)
    }

    /// An fd was closed or reused: forget what it was.
    pub fn forget(&mut self, pid: u32, fd: u64) {
        self.known.remove(&(pid, fd));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdma_fds() {
        assert_eq!(classify_target("/dev/infiniband/uverbs0"), "uverbs");
        assert_eq!(classify_target("anon_inode:[infinibandevent]"), "comp_channel");
        assert_eq!(classify_target("/dev/null"), "/dev/null");
    }
}
