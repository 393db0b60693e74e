//! The lab's cache: a directory outside the checkout (`util::cache_dir()/lab`), keyed by
//! its inputs, guarded by one lock file so two runs never build the same thing at once.

use anyhow::{Context, Result};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Root of everything the lab caches.
pub fn root() -> PathBuf {
    crate::util::cache_dir().join("lab")
}

/// Holds the cache lock until dropped (the OS releases it when the file closes).
pub struct Lock {
    _file: File,
}

/// Takes the cache lock, waiting (and saying so) while another run holds it.
pub fn lock() -> Result<Lock> {
    let dir = root();
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("lock");
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    if file.try_lock().is_err() {
        crate::util::step(&format!(
            "lab: waiting for the cache lock {} (another run is preparing)",
            path.display()
        ));
        file.lock().with_context(|| format!("locking {}", path.display()))?;
    }
    Ok(Lock { _file: file })
}

/// A stable 64-bit FNV-1a hash over the given parts (cache keys; not for security).
/// Each part is length-prefixed so ("ab","c") and ("a","bc") differ.
pub fn key(parts: &[&[u8]]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for p in parts {
        feed(&(p.len() as u64).to_le_bytes());
        feed(p);
    }
    format!("{h:016x}")
}

/// A completion marker: a directory's content counts only once this file exists.
pub fn is_complete(dir: &Path) -> bool {
    dir.join(".complete").exists()
}

pub fn mark_complete(dir: &Path) -> Result<()> {
    fs::write(dir.join(".complete"), b"").with_context(|| format!("marking {} complete", dir.display()))
}

/// Removes a path whether it is a file, a directory or absent.
pub fn remove(path: &Path) -> Result<()> {
    match fs::symlink_metadata(path) {
        Err(_) => Ok(()),
        Ok(m) if m.is_dir() => {
            fs::remove_dir_all(path).with_context(|| format!("removing {}", path.display()))
        }
        Ok(_) => fs::remove_file(path).with_context(|| format!("removing {}", path.display())),
    }
}

/// Prints `==> lab: <what> took N s` when dropped, for the timing report.
pub struct Timer {
    what: String,
    start: Instant,
}

impl Timer {
    pub fn start(what: impl Into<String>) -> Self {
        Timer { what: what.into(), start: Instant::now() }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        crate::util::step(&format!("lab: {} took {:.1} s", self.what, self.start.elapsed().as_secs_f64()));
    }
}

/// Human-readable size of a file in MB.
pub fn size_mb(path: &Path) -> String {
    fs::metadata(path).map(|m| format!("{:.0} MB", m.len() as f64 / 1e6)).unwrap_or_else(|_| "?".into())
}
