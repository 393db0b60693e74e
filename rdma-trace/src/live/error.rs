//! Why the tracer could not start, or stopped on an error: one type for `live/`.

use super::privilege::NotPrivileged;
use std::io;

/// Why the tracer could not start, or stopped on an error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TraceError {
    #[error(transparent)]
    NotPrivileged(#[from] NotPrivileged),
    #[error("tracefs: {0}")]
    Tracefs(io::Error),
    /// No plan could be made and no process was asked for (its words).
    #[error("{0}")]
    Blocked(String),
    #[error(transparent)]
    Attach(#[from] super::attach::AttachError),
    #[error(transparent)]
    Spawn(#[from] super::spawn::SpawnError),
    #[error("parsing /proc/kallsyms failed")]
    Ksyms,
    #[error(transparent)]
    Io(#[from] io::Error),
}
