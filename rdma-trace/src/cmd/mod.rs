//! The subcommands: each gathers what the libraries return and prints it.

pub(crate) mod connected;
pub mod daemon;
pub mod explain;
pub mod probes;
pub mod report;
pub mod selftest;
pub(crate) mod start;
pub mod story;
pub mod trace;
pub mod tui;

/// `$TMPDIR/rdma-trace-<uid>`, mode 0700 and this user's (made if missing; refused if it is
/// a symlink, another user's, or open to others): where the TUI keeps the traced command's
/// output, which can hold anything the command prints, and `selftest` its capture.
pub(crate) fn private_dir() -> anyhow::Result<std::path::PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    // SAFETY: geteuid(2) cannot fail.
    let me = unsafe { libc::geteuid() };
    let dir = std::env::temp_dir().join(format!("rdma-trace-{me}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => anyhow::bail!("creating {}: {e}", dir.display()),
    }
    let m = std::fs::symlink_metadata(&dir)?;
    if !m.is_dir() || m.uid() != me || m.mode() & 0o077 != 0 {
        anyhow::bail!(
            "{} is not a private directory of this user's (mode 0700, uid {me}): not used",
            dir.display()
        );
    }
    Ok(dir)
}
