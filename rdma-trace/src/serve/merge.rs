//! Several daemons' streams as one (`tui --connect A --connect B`): each source is read on
//! its own thread and its records handed on tagged with its index; `Merge` places each
//! onto the first source's clock (`clock::Placement`: another boot's records marked with
//! its host, its times by the offset its daemon or the first's measured) in the order they
//! arrive, and the story's reorder window puts them in time order. A source's records wait
//! until the first source's header has come (nothing can be placed before it), and the
//! story is settled only as far as every source has reached (the oldest of their latest
//! stats records), so a slower source's events are not joined late.

use crate::capture::{Header, Record};
use crate::clock::Placement;
use crate::source::capture::Reader;
use std::sync::mpsc::Sender;

/// What a source's thread hands on.
pub enum Tagged {
    Record(usize, Record),
    /// The source's stream ended (why).
    Ended(usize, String),
}

/// Reads source `i` to its end on a thread of its own.
pub fn spawn(i: usize, mut reader: Reader<Box<dyn std::io::BufRead + Send>>, tx: Sender<Tagged>) {
    std::thread::spawn(move || {
        for rec in reader.by_ref() {
            match rec {
                Ok(r) => {
                    if tx.send(Tagged::Record(i, r)).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    tx.send(Tagged::Ended(i, format!("{e:#}"))).ok();
                    return;
                }
            }
        }
        let notes = reader.report.notes();
        let why = if notes.is_empty() { "its stream ended".to_string() } else { notes.join("; ") };
        tx.send(Tagged::Ended(i, why)).ok();
    });
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
    pub fn new(sources: usize) -> Self {
        Merge {
            headers: vec![None; sources],
            placements: vec![None; sources],
            held: Vec::new(),
            reached: vec![None; sources],
        }
    }

    /// Takes in source `i`'s record; returns what can be fed now, placed, each with its
    /// source.
    pub fn take(&mut self, i: usize, rec: Record) -> Vec<(usize, Record)> {
        let header = matches!(rec, Record::Header(_));
        if let Record::Header(h) = &rec {
            self.headers[i] = Some((**h).clone());
        }
        // Nothing of a source is placed before its header and the first's: it waits. Only
        // a header can release what waits, so only then is the waiting list looked at (a
        // source without one costs each of its records once, not the list each time).
        if self.headers[0].is_none() || self.headers[i].is_none() {
            self.held.push((i, rec));
            return Vec::new();
        }
        let waiting = if header { std::mem::take(&mut self.held) } else { Vec::new() };
        let mut out = Vec::new();
        for (j, r) in waiting.into_iter().chain([(i, rec)]) {
            let (Some(first), Some(h)) = (&self.headers[0], &self.headers[j]) else {
                self.held.push((j, r));
                continue;
            };
            let p = self.placements[j].get_or_insert_with(|| Placement::of(j, first, h)).clone();
            out.push((j, self.place(j, p, r)));
        }
        out
    }

    fn place(&mut self, i: usize, p: Placement, rec: Record) -> Record {
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
