//! A cgroup id (what `bpf_get_current_cgroup_id` returns: the inode number of the cgroup's
//! directory in the v2 hierarchy) → its path under /sys/fs/cgroup, found by walking the
//! hierarchy once per id and cached. A cgroup gone before its events are enriched has no
//! path; its id stays in the event.

use crate::event::Frame;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where the v2 hierarchy is mounted.
const ROOT: &str = "/sys/fs/cgroup";
/// Ids remembered, at most: past it the cache starts over.
const KEPT: usize = 4096;
/// Directories walked per lookup, at most (a hierarchy bigger than this is cut short).
const WALK_MAX: usize = 100_000;

pub struct CgroupCache {
    root: PathBuf,
    by_id: HashMap<u64, Option<Frame>>,
}

impl Default for CgroupCache {
    fn default() -> Self {
        Self::at(ROOT)
    }
}

impl CgroupCache {
    /// A cache over the hierarchy mounted at `root`.
    pub fn at(root: impl Into<PathBuf>) -> Self {
        CgroupCache { root: root.into(), by_id: HashMap::new() }
    }

    /// The path of cgroup `id` (`/` for the root), or None when no directory has it.
    pub fn path(&mut self, id: u64) -> Option<Frame> {
        if let Some(p) = self.by_id.get(&id) {
            return p.clone();
        }
        if self.by_id.len() >= KEPT {
            self.by_id.clear();
        }
        let found = find(&self.root, id).map(|p| {
            let rel = p.strip_prefix(&self.root).unwrap_or(&p).to_string_lossy().into_owned();
            Frame::from(format!("/{rel}"))
        });
        self.by_id.insert(id, found.clone());
        found
    }
}

/// The directory under `root` whose inode number is `id`, breadth first.
fn find(root: &Path, id: u64) -> Option<PathBuf> {
    let mut queue = std::collections::VecDeque::from([root.to_path_buf()]);
    let mut walked = 0;
    while let Some(dir) = queue.pop_front() {
        walked += 1;
        if walked > WALK_MAX {
            return None;
        }
        let Ok(meta) = std::fs::metadata(&dir) else { continue };
        if meta.ino() == id {
            return Some(dir);
        }
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        queue.extend(entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory tree stands in for the hierarchy: ids are its directories' inodes.
    #[test]
    fn finds_a_directory_by_its_inode_and_remembers_a_miss() {
        let root = std::env::temp_dir().join(format!("rdma-trace-cgroups-{}", std::process::id()));
        let scope = root.join("system.slice").join(format!("docker-{}.scope", "ab".repeat(32)));
        std::fs::create_dir_all(&scope).unwrap();
        let id = std::fs::metadata(&scope).unwrap().ino();
        let root_id = std::fs::metadata(&root).unwrap().ino();
        let mut c = CgroupCache::at(&root);
        let p = c.path(id).expect("found");
        assert_eq!(&*p, format!("/system.slice/docker-{}.scope", "ab".repeat(32)));
        assert_eq!(crate::event::container_of(&p), Some("ab".repeat(32).as_str()));
        assert_eq!(c.path(root_id).as_deref(), Some("/"));
        assert_eq!(c.path(u64::MAX), None);
        std::fs::remove_dir_all(&root).unwrap();
        // Cached: found again after the directory is gone.
        assert!(c.path(id).is_some());
    }
}
