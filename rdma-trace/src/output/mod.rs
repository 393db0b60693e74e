//! Where events and accounts go: a human text stream, a capture stream (JSON Lines, format
//! v1), the story report, the run's summary, Prometheus metrics, the TUI.

pub mod connections;
pub mod diff;
pub mod explain;
pub mod flame;
pub mod jsonl;
pub mod metrics;
pub mod numbers;
pub mod perfetto;
pub mod queued;
pub mod report;
pub mod summary;
pub mod target;
pub mod text;
pub mod tui;

use crate::capture::{Loss, Stats, Trailer};
use crate::event::Event;
use crate::steps::StepRecord;
use std::io;
use std::sync::Arc;

/// A destination of the event stream. Only `event` and `flush` are required: the other
/// records matter to a capture, not to every output.
pub trait Sink {
    /// An event, shared: a sink that keeps it keeps the `Arc`, not a copy.
    fn event(&mut self, ev: &Arc<Event>) -> io::Result<()>;
    /// A companion step, announced by its marker when the step ended (after its events).
    fn step(&mut self, _s: &StepRecord) -> io::Result<()> {
        Ok(())
    }
    /// The run's accounting so far, every 800 ms.
    fn stats(&mut self, _s: &Stats) -> io::Result<()> {
        Ok(())
    }
    /// Loss seen since the previous stats, at the point in the stream it was seen.
    fn loss(&mut self, _l: &Loss) -> io::Result<()> {
        Ok(())
    }
    /// The last record: final counts and why the run stopped.
    fn trailer(&mut self, _t: &Trailer) -> io::Result<()> {
        Ok(())
    }
    /// Called every 50 ms during a run (`jsonl::FLUSH_EVERY`): a buffering sink writes out
    /// what it holds, so a killed run loses at most the last 100 ms.
    fn tick(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()>;
}

/// Several sinks as one; the first error of any of them is returned.
impl Sink for Vec<Box<dyn Sink>> {
    fn event(&mut self, ev: &Arc<Event>) -> io::Result<()> {
        self.iter_mut().try_for_each(|s| s.event(ev))
    }
    fn step(&mut self, st: &StepRecord) -> io::Result<()> {
        self.iter_mut().try_for_each(|s| s.step(st))
    }
    fn stats(&mut self, st: &Stats) -> io::Result<()> {
        self.iter_mut().try_for_each(|s| s.stats(st))
    }
    fn loss(&mut self, l: &Loss) -> io::Result<()> {
        self.iter_mut().try_for_each(|s| s.loss(l))
    }
    fn trailer(&mut self, t: &Trailer) -> io::Result<()> {
        self.iter_mut().try_for_each(|s| s.trailer(t))
    }
    fn tick(&mut self) -> io::Result<()> {
        self.iter_mut().try_for_each(|s| s.tick())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.iter_mut().try_for_each(|s| s.flush())
    }
}
