//! The stream's one vocabulary at the bottom: a `Sink` takes the records of capture format
//! v1 (`capture::Record`) one kind at a time; the tracer's live run, a capture being read
//! and a daemon's subscribers all hand their records to sinks. The outputs (`output/`), the
//! story (`pipeline::correlate::engine::StorySink`), the broadcaster and the TUI's feeder
//! implement it.

use crate::capture::{Header, Loss, Record, State, Stats, Trailer};
use crate::event::Event;
use crate::steps::StepRecord;
use std::io;
use std::sync::Arc;

/// How often a live run ticks its sinks (`Sink::tick`), and buffered records are written
/// out. A killed run's file must reach to within 100 ms of the kill, and an event waits in
/// the ring and the output queue before the writer has it (tens of ms on an emulated CPU):
/// a 100 ms period left no room for that, and a 6.12 guest's file ended 109 ms before its
/// kill. Half of it leaves the other half for the way there.
pub(crate) const TICK_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// What a counting run's kernel aggregated (`plan::counted`), read at each stats tick.
#[derive(Clone, Debug, Default)]
pub struct Counted {
    /// Hits per process (tgid) and account row (`probe_row`).
    pub hits: Vec<(u32, String, u64)>,
    /// Each process's name, as its first counted hit saw it.
    pub comms: std::collections::BTreeMap<u32, String>,
    /// Each process's pins, charges and pin latencies.
    pub pins: std::collections::BTreeMap<u32, rdma_trace_common::ProcPins>,
    /// Each CQ owner's completions (by context) and wakeups.
    pub cqs: std::collections::BTreeMap<u32, rdma_trace_common::ProcCqs>,
}

/// A destination of the event stream. Only `event` and `flush` are required: the other
/// records matter to a capture, not to every output.
pub trait Sink {
    /// Any record of a capture stream, to the method for its kind.
    fn record(&mut self, r: Record) -> io::Result<()> {
        match r {
            Record::Header(h) => self.header(&h),
            Record::State(s) => self.state(&s),
            Record::Event(e) => self.event(&e),
            Record::Step(s) => self.step(&s.step),
            Record::Stats(s) => self.stats(&s),
            Record::Loss(l) => self.loss(&l),
            Record::Trailer(t) => self.trailer(&t),
        }
    }
    /// A stream's first record (a source's; a live run writes its own).
    fn header(&mut self, _h: &Header) -> io::Result<()> {
        Ok(())
    }
    /// What a daemon's kernel held when a subscriber joined.
    fn state(&mut self, _s: &State) -> io::Result<()> {
        Ok(())
    }
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
    /// Processes the live run found gone (at two stats ticks running; their last events are
    /// read by then), at `ts_ns` on the events' clock. Not a record: a sink that keeps a
    /// state for late joiners (the daemon's) forgets them; a view of the run keeps them.
    fn processes_gone(&mut self, _pids: &[u32], _ts_ns: u64) -> io::Result<()> {
        Ok(())
    }
    /// What a counting run's kernel aggregated (`plan::counted`), just before each stats
    /// record: a sink that serves metrics serves these instead of its story's.
    fn counted(&mut self, _c: &Counted) -> io::Result<()> {
        Ok(())
    }
    /// Called every 50 ms during a run (`TICK_EVERY`): a buffering sink writes out
    /// what it holds, so a killed run loses at most the last 100 ms.
    fn tick(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// Writes out whatever the sink holds (the end of a run waits for it).
    fn flush(&mut self) -> io::Result<()>;
}
