//! Recognising a process's RDMA file descriptors from /proc/<pid>/fd.
//!
//! The uverbs fd is the opened character device `/dev/infiniband/uverbsN`; a completion
//! channel is an anonymous inode named `[infinibandevent]` (ib_uverbs creates it with
//! anon_inode_getfile). Both are looked up once per (pid, fd) and cached.

use crate::event::FdKind;
use std::collections::HashMap;

/// What each (pid, fd) is. An fd opened while traced is bound from the path its
/// open/openat carried (exact even when the fd number is reused later), a duplicate
/// (dup, dup2, dup3, fcntl F_DUPFD) from the fd it copies; a completion channel from the
/// fd ibv_create_comp_channel returned; other fds (opened before tracing) are looked up in
/// /proc/<pid>/fd once and cached until closed — a lookup that fails once the process is
/// gone, since events are processed after the fact. An fd number seen closed, or opened
/// from an unreadable path, is never looked up there: by then it may be another file.
#[derive(Default)]
pub struct FdCache {
    known: HashMap<(u32, u64), FdKind>,
    /// Fds seen closed, or opened by a syscall whose path could not be read: what /proc
    /// shows for that number later is some other file, so it is not asked.
    gone: std::collections::HashSet<(u32, u64)>,
    /// A syscall in flight per thread that will return a new fd: what that fd will be
    /// (`None`: not known, so whatever the number meant before is forgotten).
    pending: HashMap<u32, Option<FdKind>>,
    /// Lookups that failed (the process or the fd gone): not asked again. Bounded: past
    /// `FAILED_KEPT` it starts over.
    failed: std::collections::HashSet<(u32, u64)>,
}

const FAILED_KEPT: usize = 1 << 16;

impl FdCache {
    pub fn kind(&mut self, pid: u32, fd: u64) -> Option<FdKind> {
        if fd > i32::MAX as u64 {
            return None;
        }
        if let Some(k) = self.known.get(&(pid, fd)) {
            return Some(k.clone());
        }
        if self.gone.contains(&(pid, fd)) || self.failed.contains(&(pid, fd)) {
            return None;
        }
        let Ok(target) = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")) else {
            if self.failed.len() >= FAILED_KEPT {
                self.failed.clear();
            }
            self.failed.insert((pid, fd));
            return None;
        };
        let k = FdKind::of_target(&target.to_string_lossy());
        self.known.insert((pid, fd), k.clone());
        Some(k)
    }

    /// An open/openat of `path` started on thread `tid`.
    pub fn opening(&mut self, tid: u32, path: &str) {
        self.pending.insert(tid, Some(FdKind::of_target(path)));
    }

    /// An open/openat whose path could not be read started on `tid`: its fd is unknown.
    pub fn opening_unknown(&mut self, tid: u32) {
        self.pending.insert(tid, None);
    }

    /// A dup of `old` started on thread `tid` (dup, dup2, dup3, fcntl F_DUPFD*): the new
    /// fd will be what `old` is.
    pub fn duping(&mut self, pid: u32, tid: u32, old: u64) {
        let k = self.kind(pid, old);
        self.pending.insert(tid, k);
    }

    /// The open or dup on `tid` returned `ret` (an fd, or -errno).
    pub fn opened(&mut self, pid: u32, tid: u32, ret: i64) {
        match self.pending.remove(&tid) {
            Some(Some(k)) if ret >= 0 => {
                self.gone.remove(&(pid, ret as u64));
                self.known.insert((pid, ret as u64), k);
            }
            Some(None) if ret >= 0 => {
                self.known.remove(&(pid, ret as u64));
                self.gone.insert((pid, ret as u64));
            }
            _ => {}
        }
    }

    /// Something else told us what this fd is (e.g. ibv_create_comp_channel's result).
    pub fn bind(&mut self, pid: u32, fd: u64, kind: FdKind) {
        self.gone.remove(&(pid, fd));
        self.known.insert((pid, fd), kind);
    }

    /// An fd was closed: forget what it was, and say what that was as far as an open, a
    /// dup, a bind or an earlier syscall on it told. /proc is not asked: by the time the
    /// event is enriched the number may be another file (seen on 6.1: a library's fd
    /// closed, then the uverbs device opened at that number).
    pub fn forget(&mut self, pid: u32, fd: u64) -> Option<FdKind> {
        self.gone.insert((pid, fd));
        self.known.remove(&(pid, fd))
    }

    /// The processes it holds something of.
    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.known.keys().chain(&self.gone).chain(&self.failed).map(|(p, _)| *p)
    }

    /// Process `pid` ended: all it knew of it goes (a new process given the pid starts
    /// afresh; a daemon's cache does not grow with every process it ever saw).
    pub fn forget_process(&mut self, pid: u32) {
        self.known.retain(|(p, _), _| *p != pid);
        self.gone.retain(|(p, _)| *p != pid);
        self.failed.retain(|(p, _)| *p != pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_that_ended_is_forgotten_whole() {
        let mut c = FdCache::default();
        c.bind(7, 3, FdKind::Uverbs);
        c.bind(8, 3, FdKind::CompChannel);
        c.forget(7, 4);
        c.forget_process(7);
        assert!(c.pids().all(|p| p == 8), "{:?}", c.pids().collect::<Vec<_>>());
        assert_eq!(c.kind(8, 3), Some(FdKind::CompChannel));
    }

    #[test]
    fn a_close_is_named_only_from_what_was_seen_open() {
        // This process holds a file /proc can name; the cache never saw it opened.
        let f = std::fs::File::open("/proc/self/status").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f) as u64;
        let me = std::process::id();
        let mut c = FdCache::default();
        assert_eq!(c.forget(me, fd), None, "a close asks no /proc");
        let mut c = FdCache::default();
        assert!(c.kind(me, fd).is_some(), "another syscall does");
        assert!(c.forget(me, fd).is_some(), "and a close then says what it learnt");
    }

    #[test]
    fn reused_fd_numbers_follow_their_opens() {
        let mut c = FdCache::default();
        // fd 3: a provider library, closed, then the uverbs device.
        c.opening(7, "/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so");
        c.opened(7, 7, 3);
        assert_eq!(
            c.kind(7, 3).as_ref().map(FdKind::as_str),
            Some("/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so")
        );
        c.forget(7, 3);
        c.opening(7, "/dev/infiniband/uverbs0");
        c.opened(7, 7, 3);
        assert_eq!(c.kind(7, 3), Some(FdKind::Uverbs));
        // A failed open binds nothing.
        c.opening(7, "/dev/infiniband/uverbs9");
        c.opened(7, 7, -2);
        assert_eq!(c.known.get(&(7, 4)), None);
    }

    #[test]
    fn a_closed_fd_number_is_not_looked_up_in_proc() {
        // This process's fd 0 is open (stdin): /proc would name it. Seen closed (or opened
        // from a path the probe could not read), the number is unknown until an open the
        // tracer saw binds it again — /proc would show whatever holds it by then.
        let me = std::process::id();
        let mut c = FdCache::default();
        c.forget(me, 0);
        assert_eq!(c.kind(me, 0), None, "closed: not asked of /proc");
        c.opening_unknown(9);
        c.opened(me, 9, 1);
        assert_eq!(c.kind(me, 1), None, "opened from an unreadable path");
        c.opening(9, "/dev/infiniband/uverbs0");
        c.opened(me, 9, 0);
        assert_eq!(c.kind(me, 0), Some(FdKind::Uverbs));
    }

    #[test]
    fn a_duplicated_fd_is_what_it_copies() {
        let mut c = FdCache::default();
        // dd's shape: fd 0 is /dev/null, then open /dev/zero as 3, dup2(3, 0), close(3).
        c.bind(9, 0, FdKind::of_target("/dev/null"));
        c.opening(9, "/dev/zero");
        c.opened(9, 9, 3);
        c.duping(9, 9, 3);
        c.opened(9, 9, 0);
        c.forget(9, 3);
        assert_eq!(c.kind(9, 0).as_ref().map(FdKind::as_str), Some("/dev/zero"));
        // A failed dup leaves the target as it was.
        c.duping(9, 9, 0);
        c.opened(9, 9, -9);
        assert_eq!(c.kind(9, 0).as_ref().map(FdKind::as_str), Some("/dev/zero"));
        // A dup of an fd nobody can name forgets what the new number meant (pid 0 has no
        // /proc fd directory).
        c.bind(0, 5, FdKind::Uverbs);
        c.duping(0, 0, 77);
        c.opened(0, 0, 5);
        assert_eq!(c.known.get(&(0, 5)), None);
    }

    #[test]
    fn rdma_fds() {
        assert_eq!(FdKind::of_target("/dev/infiniband/uverbs0"), FdKind::Uverbs);
        assert_eq!(FdKind::of_target("anon_inode:[infinibandevent]"), FdKind::CompChannel);
        assert_eq!(FdKind::of_target("/dev/null"), FdKind::Other("/dev/null".into()));
    }
}
