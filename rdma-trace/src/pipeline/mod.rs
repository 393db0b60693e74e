//! From raw records to events: decode (bytes → typed records), enrich (names, rendered
//! values, symbolized stacks, fds), correlate (latency pairs, the story).
//!
//! The live tracer runs all of it and hands each event to its outputs (`live::trace`); a
//! capture's events went through it when they were recorded, so a capture source hands its
//! records straight to the outputs (`feed`). Either way the outputs are `Sink`s: the text
//! stream, a capture writer, the story (`correlate::engine::StorySink`). Several captures are
//! read as one placed stream by `merge`.

pub(crate) mod cgroups;
pub mod correlate;
pub mod decode;
pub mod enrich;
pub(crate) mod fds;
pub mod ksyms;
pub(crate) mod limits;
pub mod merge;
pub mod redact;
pub mod render;

/// Why feeding a capture to a sink stopped.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// The capture could not be read (bad input).
    #[error(transparent)]
    Read(#[from] crate::source::capture::ReadError),
    /// The sink failed (a closed pipe included).
    #[error(transparent)]
    Write(#[from] std::io::Error),
}

/// Hands every record of a capture stream to `sink`, in order. Stops at the first error of
/// the reader or of the sink (a closed pipe included).
pub fn feed<R: std::io::BufRead>(
    reader: &mut crate::source::capture::Reader<R>,
    sink: &mut dyn crate::sink::Sink,
) -> Result<(), FeedError> {
    for r in reader.by_ref() {
        sink.record(r?)?;
    }
    sink.flush()?;
    Ok(())
}
