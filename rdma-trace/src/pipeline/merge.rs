//! Several sources as one placed stream. `Merge` places each source's records onto the
//! first source's clock (`clock::Placement`: another boot's records marked with its host,
//! its times moved by the offset its daemon or the first's measured). Files and live streams
//! differ only in order:
//!
//! - files (`merge`): each read as a stream, records taken in wall-clock order across them,
//!   through one story and an aggregate per capture. `report`, `export`, `explain` and the
//!   tests read captures so.
//! - live streams (`Merge::take`, from `tui --connect` and `trace --connect`): placed in the
//!   order they arrive (`serve::merge` reads each on a thread), and the story's reorder
//!   window puts them in time order. A source's records wait until its header and the
//!   first's have come, and the story is settled only as far as every source has reached
//!   (`Merge::settled`), so a slower source's events are not joined late.

use crate::capture::{Header, Record};
use crate::clock::Placement;
use crate::event::Event;
use crate::pipeline::correlate::aggregate::Aggregates;
use crate::pipeline::correlate::engine::{Engine, Limits};
use crate::source::capture::Reader;
use crate::steps::StepRecord;

/// A capture that could not be read while merging (bad input: its reader's error).
#[derive(Debug, thiserror::Error)]
#[error("reading {input}")]
pub(crate) struct MergeError {
    /// The capture's name.
    pub input: String,
    #[source]
    pub error: crate::source::capture::ReadError,
}

/// One capture to merge: its name (for errors and notes) and its reader.
pub struct Input {
    pub name: String,
    pub reader: Reader<Box<dyn std::io::BufRead + Send>>,
}

impl Input {
    /// A capture file (`-` is stdin; compressed files are read as they are), read strictly
    /// or not (`--strict`).
    pub(crate) fn file(path: &std::path::Path, strict: bool) -> std::io::Result<Input> {
        let input = crate::source::capture::open(path)?;
        Ok(Input { name: path.display().to_string(), reader: Reader::new(input, strict) })
    }
}

/// What reading the captures gave: the story, each capture's header and aggregates, the
/// companion's steps, and every event (only when asked for: an export needs them all).
pub struct Read {
    pub engine: Engine,
    pub headers: Vec<Option<Header>>,
    /// Each capture of another boot: its clock against the first's, where measured.
    pub placed: Vec<Option<crate::clock::Placed>>,
    pub aggs: Vec<Aggregates>,
    pub steps: Vec<StepRecord>,
    pub events: Vec<Event>,
}

/// The sources' headers and placements, and what waits for the first header.
pub struct Merge {
    pub headers: Vec<Option<Header>>,
    pub placements: Vec<Option<Placement>>,
    held: Vec<(usize, Record)>,
    /// Each source's latest stats time, placed on the first's clock.
    reached: Vec<Option<u64>>,
}

impl Merge {
    /// A merge of `sources` streams, none placed yet.
    pub fn new(sources: usize) -> Self {
        Merge {
            headers: vec![None; sources],
            placements: vec![None; sources],
            held: Vec::new(),
            reached: vec![None; sources],
        }
    }

    /// A live source's record, in the order it came: returns what can be fed now, placed,
    /// each with its source.
    pub fn take(&mut self, i: usize, rec: Record) -> Vec<(usize, Record)> {
        let header = matches!(rec, Record::Header(_));
        if let Record::Header(h) = &rec {
            self.header(i, (**h).clone());
        }
        // Nothing of a source is placed before its header and the first's: it waits. Only
        // a header can release what waits, so only then is the waiting list looked at (a
        // source without one costs each of its records once, not the list each time).
        if self.placements[i].is_none() {
            self.held.push((i, rec));
            return Vec::new();
        }
        let waiting = if header { std::mem::take(&mut self.held) } else { Vec::new() };
        let mut out = Vec::new();
        for (j, r) in waiting.into_iter().chain([(i, rec)]) {
            if self.placements[j].is_none() {
                self.held.push((j, r));
                continue;
            }
            out.push((j, self.place(j, r)));
        }
        out
    }

    /// Source `i`'s header: each source whose header and the first's are known gets its
    /// placement.
    pub fn header(&mut self, i: usize, h: Header) {
        self.headers[i] = Some(h);
        let Some(first) = &self.headers[0] else { return };
        for (j, h) in self.headers.iter().enumerate() {
            if let (Some(h), None) = (h, &self.placements[j]) {
                self.placements[j] = Some(Placement::of(j, first, h));
            }
        }
    }

    /// Source `i`'s time `t` on the first's clock (as it is, while `i` has no placement).
    pub fn time(&self, i: usize, t: u64) -> u64 {
        self.placements[i].as_ref().map_or(t, |p| p.time(t))
    }

    /// Moves a record of source `i` onto the first's clock and host (as it is, while `i`
    /// has no placement).
    pub(crate) fn place(&mut self, i: usize, rec: Record) -> Record {
        let Some(p) = &self.placements[i] else { return rec };
        match rec {
            Record::Event(mut e) => {
                p.event(std::sync::Arc::make_mut(&mut e));
                Record::Event(e)
            }
            Record::Step(mut s) => {
                p.step(&mut s.step);
                Record::Step(s)
            }
            Record::State(mut st) => {
                p.state(&mut st);
                Record::State(st)
            }
            Record::Stats(mut s) => {
                s.ts_ns = p.time(s.ts_ns);
                self.reached[i] = Some(s.ts_ns);
                Record::Stats(s)
            }
            r => r,
        }
    }

    /// How far every source has reached (placed): the story may join what is older. None
    /// until each has sent its stats.
    pub fn settled(&self) -> Option<u64> {
        self.reached.iter().copied().collect::<Option<Vec<u64>>>()?.into_iter().min()
    }

    /// A source that ended no longer holds the others back.
    pub fn ended(&mut self, i: usize) {
        self.reached[i] = Some(u64::MAX);
    }
}

/// One capture being read: its next timed record (an event, or a step at its end).
struct Source {
    input: Input,
    next: Option<Record>,
}

fn at(r: &Record) -> Option<u64> {
    match r {
        Record::Event(e) => Some(e.ts_ns),
        Record::State(st) => Some(st.ts_ns),
        Record::Step(s) => Some(s.step.t_end_ns),
        _ => None,
    }
}

/// Reads every input, merged on the wall clock, through one story (unless `story` is
/// false: a caller that builds its own, `explain`, leaves `engine` empty) and per-input
/// aggregates; each event also goes to `each`, with the index the story knows it by (its
/// place in the merged run).
pub(crate) fn merge(
    inputs: Vec<Input>,
    limits: Limits,
    story: bool,
    mut each: impl FnMut(usize, &Event),
) -> Result<Read, MergeError> {
    let n = inputs.len();
    let mut out = Read {
        engine: Engine::new(Vec::new(), limits),
        headers: vec![None; n],
        placed: vec![None; n],
        aggs: vec![Aggregates::default(); n],
        steps: Vec::new(),
        events: Vec::new(),
    };
    let mut sources: Vec<Source> = inputs.into_iter().map(|input| Source { input, next: None }).collect();
    let mut m = Merge::new(n);
    let mut placed_events = 0;
    loop {
        for (i, s) in sources.iter_mut().enumerate() {
            fill(i, s, &mut m, &mut out)?;
        }
        let next = sources
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.next.as_ref().and_then(at).map(|t| (m.time(i, t), i)))
            .min();
        let Some((_, i)) = next else { break };
        let Some(rec) = sources[i].next.take() else { break };
        match m.place(i, rec) {
            Record::Event(e) => {
                out.aggs[i].event(&e);
                let index = if story { out.engine.push(std::sync::Arc::clone(&e)) } else { placed_events };
                placed_events += 1;
                each(index, &e);
            }
            // A late joiner's capture (`trace --connect -o`) begins with what existed when
            // it joined: the story starts from it, placed like the capture's events.
            Record::State(st) if story => out.engine.seed(&st),
            Record::Step(st) => {
                let step = st.step;
                out.aggs[i].steps += 1;
                if story {
                    out.engine.add_steps(vec![step.clone()]);
                }
                out.steps.push(step);
            }
            _ => {}
        }
    }
    for (i, p) in m.placements.iter().enumerate().skip(1) {
        out.placed[i] = p.as_ref().and_then(|p| p.placed.clone());
    }
    out.headers = m.headers;
    for s in &sources {
        for note in s.input.reader.report.notes() {
            eprintln!("rdma-trace: {}: {note}", s.input.name);
        }
    }
    Ok(out)
}

/// Reads `s` until its next timed record (the untimed ones are taken in on the way).
fn fill(i: usize, s: &mut Source, m: &mut Merge, out: &mut Read) -> Result<(), MergeError> {
    while s.next.is_none() {
        let Some(r) = s.input.reader.next() else { return Ok(()) };
        match r.map_err(|error| MergeError { input: s.input.name.clone(), error })? {
            Record::Header(h) => m.header(i, *h),
            Record::Stats(st) => out.aggs[i].stats(&st),
            Record::Loss(l) => out.aggs[i].loss(&l),
            Record::Trailer(t) => out.aggs[i].trailer(&t),
            r => s.next = Some(r),
        }
    }
    Ok(())
}
