//! Where events and accounts go: a human text stream, a capture stream (JSON Lines, format
//! v1), the story report, the run's summary, Prometheus metrics.

pub mod connections;
pub mod diff;
pub mod fanout;
pub mod flame;
pub mod jsonl;
pub mod metrics;
pub mod perfetto;
pub mod queued;
pub mod report;
pub mod story;
pub mod summary;
pub mod target;
pub mod text;
