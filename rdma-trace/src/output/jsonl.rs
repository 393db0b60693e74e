//! JSON Lines capture: one event per line, format version 0.

use super::Sink;
use crate::event::Event;
use std::io::Write;

pub struct Jsonl<W: Write> {
    out: W,
}

impl<W: Write> Jsonl<W> {
    pub fn new(out: W) -> Self {
        Self { out }
    }
}

impl<W: Write> Sink for Jsonl<W> {
    fn event(&mut self, ev: &Event) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, ev)?;
        self.out.write_all(b"\n")
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}
