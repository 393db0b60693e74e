//! Where events and accounts go: a human text stream, a capture stream (JSON Lines, format
//! v1), the story report, the run's summary, Prometheus metrics.

pub mod connections;
pub mod diff;
pub(crate) mod fanout;
pub mod flame;
pub mod jsonl;
pub(crate) mod metrics;
pub mod perfetto;
pub(crate) mod queued;
pub mod report;
pub mod selftest;
pub mod story;
pub(crate) mod summary;
pub mod target;
pub mod text;
