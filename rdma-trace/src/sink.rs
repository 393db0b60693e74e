//! Where events go: a human text stream, a JSON Lines capture file.

pub mod jsonl;
pub mod text;

use crate::event::Event;

pub trait Sink {
    fn event(&mut self, ev: &Event) -> std::io::Result<()>;
    fn flush(&mut self) -> std::io::Result<()>;
}
