//! Several captures as one placed stream: each read as a stream, records taken in wall-clock
//! order across them, every record moved onto the first capture's clock and pids
//! (`clock::Placement`), through one story and an aggregate per capture. `report`,
//! `export`, `explain` and the tests read captures through it; `tui` and the daemon's
//! viewers place live streams with the same `Placement` as they arrive (`serve::merge`).

use crate::capture::{Header, Record};
use crate::clock::Placement;
use crate::event::Event;
use crate::pipeline::correlate::aggregate::Aggregates;
use crate::pipeline::correlate::live::{Limits, Live};
use crate::source::capture::Reader;
use crate::steps::StepRecord;
use anyhow::{Context, Result};

/// One capture to merge: its name (for errors and notes) and its reader.
pub struct Input {
    pub name: String,
    pub reader: Reader<Box<dyn std::io::BufRead + Send>>,
}

impl Input {
    /// A capture file (`-` is stdin; compressed files are read as they are), read strictly
    /// or not (`--strict`).
    pub fn file(path: &std::path::Path, strict: bool) -> std::io::Result<Input> {
        let input = crate::source::capture::open(path)?;
        Ok(Input { name: path.display().to_string(), reader: Reader::new(input, strict) })
    }
}

/// What reading the captures gave: the story, each capture's header and aggregates, the
/// companion's steps, and every event (only when asked for: an export needs them all).
pub struct Read {
    pub live: Live,
    pub headers: Vec<Option<Header>>,
    /// Each capture of another boot: its clock against the first's, where measured.
    pub placed: Vec<Option<crate::clock::Placed>>,
    pub aggs: Vec<Aggregates>,
    pub steps: Vec<StepRecord>,
    pub events: Vec<Event>,
}

/// One capture being read: its next timed record (an event, or a step at its end).
struct Source {
    input: Input,
    next: Option<Record>,
    /// Its times and pids onto the first capture's.
    placement: Placement,
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
/// false: a caller that builds its own, `explain`, leaves `live` empty) and per-input
/// aggregates; each event also goes to `each`, with the index the story knows it by (its
/// place in the merged run).
pub fn merge(
    inputs: Vec<Input>,
    limits: Limits,
    story: bool,
    mut each: impl FnMut(usize, &Event),
) -> Result<Read> {
    let n = inputs.len();
    let mut out = Read {
        live: Live::new(Vec::new(), limits),
        headers: vec![None; n],
        placed: vec![None; n],
        aggs: vec![Aggregates::default(); n],
        steps: Vec::new(),
        events: Vec::new(),
    };
    let mut sources: Vec<Source> = inputs
        .into_iter()
        .map(|input| Source { input, next: None, placement: Placement::default() })
        .collect();
    let mut placed_events = 0;
    loop {
        for (i, s) in sources.iter_mut().enumerate() {
            fill(i, s, &mut out).with_context(|| s.input.name.clone())?;
        }
        let first = &out.headers[0];
        for (i, s) in sources.iter_mut().enumerate().skip(1) {
            if let (Some(h0), Some(h)) = (first, &out.headers[i]) {
                s.placement = Placement::of(i, h0, h);
                out.placed[i].clone_from(&s.placement.placed);
            }
        }
        let next = sources
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.next.as_ref().and_then(at).map(|t| (s.placement.time(t), i)))
            .min();
        let Some((_, i)) = next else { break };
        let s = &mut sources[i];
        match s.next.take() {
            Some(Record::Event(mut e)) => {
                s.placement.event(std::sync::Arc::make_mut(&mut e));
                out.aggs[i].event(&e);
                let index = if story { out.live.push(std::sync::Arc::clone(&e)) } else { placed_events };
                placed_events += 1;
                each(index, &e);
            }
            // A late joiner's capture (`trace --connect -o`) begins with what existed when
            // it joined: the story starts from it, placed like the capture's events.
            Some(Record::State(mut st)) => {
                s.placement.state(&mut st);
                if story {
                    out.live.seed(&st);
                }
            }
            Some(Record::Step(st)) => {
                let mut step = st.step;
                out.aggs[i].steps += 1;
                s.placement.step(&mut step);
                if story {
                    out.live.add_steps(vec![step.clone()]);
                }
                out.steps.push(step);
            }
            _ => {}
        }
    }
    for s in &sources {
        for note in s.input.reader.report.notes() {
            eprintln!("rdma-trace: {}: {note}", s.input.name);
        }
    }
    Ok(out)
}

/// Reads `s` until its next timed record (the untimed ones are taken in on the way).
fn fill(i: usize, s: &mut Source, out: &mut Read) -> Result<()> {
    while s.next.is_none() {
        let Some(r) = s.input.reader.next() else { return Ok(()) };
        match r.with_context(|| format!("reading {}", s.input.name))? {
            Record::Header(h) => out.headers[i] = Some(*h),
            Record::Stats(st) => out.aggs[i].stats(&st),
            Record::Loss(l) => out.aggs[i].loss(&l),
            Record::Trailer(t) => out.aggs[i].trailer(&t),
            r => s.next = Some(r),
        }
    }
    Ok(())
}
