//! Where events and accounts go: a human text stream, a JSON Lines capture file, the
//! story report, the run's summary.

pub mod jsonl;
pub mod report;
pub mod summary;
pub mod text;

use crate::event::Event;

pub trait Sink {
    fn event(&mut self, ev: &Event) -> std::io::Result<()>;
    fn flush(&mut self) -> std::io::Result<()>;
}
