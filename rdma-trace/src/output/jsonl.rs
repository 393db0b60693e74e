//! The capture stream, format v1 (`crate::capture`, docs/event-format.md): a header, the
//! events, stats every 800 ms, loss notices, a trailer; each record numbered.
//! Written to a file (mode 0600: it holds kernel addresses) or any writer (stdout, a socket).

use super::target::{CaptureFile, Rotation, Target};
use crate::capture::{self, Header, Loss, Stats, Trailer};
use crate::event::Event;
use crate::sink::Sink;
use serde::Serialize;
use std::io;
use std::path::Path;

/// The capture writer: format v1 records, one JSON line each, to a target.
pub struct Jsonl<W: Target> {
    out: W,
    seq: u64,
    /// Written since the last flush.
    dirty: bool,
    /// Repeated at the top of each rotated file, so every file describes itself.
    header: Option<Header>,
    /// The accounting so far, for the trailer that closes a rotated file.
    last_stats: Option<Stats>,
    /// An event's line, written by hand (`Numbered::write`), kept between events.
    event_line: Vec<u8>,
}

impl Jsonl<CaptureFile> {
    /// Creates (or truncates) `path` with mode 0600; zstd if it ends in `.zst`.
    pub fn create(path: &Path, rotation: Option<Rotation>) -> io::Result<Self> {
        Ok(Self::new(CaptureFile::create(path, rotation)?))
    }
}

impl<W: Target> Jsonl<W> {
    /// A writer to `out` (its header is written by `Sink::header`).
    pub fn new(out: W) -> Self {
        Self::starting_at(out, 0)
    }

    /// A stream whose first record is number `seq` (a daemon numbers its shared stream,
    /// and each subscriber's preamble just before the point it joined).
    pub fn starting_at(out: W, seq: u64) -> Self {
        Self { out, seq, dirty: false, header: None, last_stats: None, event_line: Vec::new() }
    }

    /// The number the next record gets.
    pub(crate) fn next_seq(&self) -> u64 {
        self.seq
    }

    /// What was written since the last call (a stream written to memory).
    pub fn take_written(&mut self) -> W
    where
        W: Default,
    {
        std::mem::take(&mut self.out)
    }

    /// The writer, for a stream written to memory.
    pub fn into_inner(self) -> W {
        self.out
    }

    fn named(&self, e: io::Error) -> io::Error {
        io::Error::new(e.kind(), format!("writing {}: {e}", self.out.name()))
    }

    fn line<T: Serialize>(&mut self, rec: &T) -> io::Result<()> {
        let res = serde_json::to_writer(&mut self.out, rec).map_err(io::Error::from);
        let res = res.and_then(|()| self.out.write_all(b"\n"));
        self.numbered(res)
    }

    /// A record was written (or failed to be, `res`): it took its number either way.
    fn numbered(&mut self, res: io::Result<()>) -> io::Result<()> {
        self.seq += 1;
        self.dirty = true;
        res.map_err(|e| self.named(e))
    }

    /// At a record boundary: a full file is closed with a trailer (the counts so far) and
    /// the stream goes on in the next file, which starts with the header again.
    fn rotate_if_due(&mut self) -> io::Result<()> {
        if !self.out.rotate_due() {
            return Ok(());
        }
        let next = self.out.next_name();
        let sites = self.last_stats.as_ref().map(|s| s.sites.clone()).unwrap_or_default();
        let t = Trailer {
            v: capture::VERSION,
            seq: self.seq,
            ty: "trailer".into(),
            ts_ns: self.last_stats.as_ref().map_or(0, |s| s.ts_ns),
            stopped: format!("continued in the next file ({next})"),
            exit_code: 0,
            delivered: sites.iter().map(|s| s.delivered).sum(),
            lost: sites.iter().flat_map(|s| s.lost.values()).sum(),
            sites,
        };
        self.line(&t)?;
        self.out.rotate().map_err(|e| self.named(e))?;
        if let Some(h) = self.header.clone() {
            self.line(&Header { seq: self.seq, ..h })?;
        }
        Ok(())
    }
}

impl<W: Target> Sink for Jsonl<W> {
    /// The header: the first record (written out with the first tick).
    fn header(&mut self, h: &Header) -> io::Result<()> {
        let h = Header { v: capture::VERSION, seq: self.seq, ty: "header".into(), ..h.clone() };
        self.header = Some(h.clone());
        self.line(&h)
    }
    /// The state of a daemon's story when a subscriber joins.
    fn state(&mut self, st: &crate::capture::State) -> io::Result<()> {
        let st =
            crate::capture::State { v: capture::VERSION, seq: self.seq, ty: "state".into(), ..st.clone() };
        self.line(&st)
    }
    fn event(&mut self, ev: &std::sync::Arc<Event>) -> io::Result<()> {
        if capture::has_errors(ev) {
            // Rare (a failed call): the errors are split out of a copy.
            let mut e = Event::clone(ev);
            e.v = capture::VERSION;
            e.seq = Some(self.seq);
            capture::split_errors(&mut e);
            self.line(&e)?;
        } else {
            self.event_line.clear();
            rdma_trace_format::event::Numbered::new(ev, capture::VERSION, self.seq)
                .write(&mut self.event_line);
            self.event_line.push(b'\n');
            let res = self.out.write_all(&self.event_line);
            self.numbered(res)?;
        }
        self.rotate_if_due()
    }
    fn step(&mut self, s: &crate::steps::StepRecord) -> io::Result<()> {
        let ty = "step".into();
        self.line(&capture::Step { v: capture::VERSION, seq: self.seq, ty, step: s.clone() })?;
        self.rotate_if_due()
    }
    fn stats(&mut self, s: &Stats) -> io::Result<()> {
        let s = Stats { v: capture::VERSION, seq: self.seq, ty: "stats".into(), ..s.clone() };
        self.line(&s)?;
        self.last_stats = Some(s);
        self.rotate_if_due()
    }
    fn loss(&mut self, l: &Loss) -> io::Result<()> {
        self.line(&Loss { v: capture::VERSION, seq: self.seq, ty: "loss".into(), ..l.clone() })
    }
    fn trailer(&mut self, t: &Trailer) -> io::Result<()> {
        self.line(&Trailer { v: capture::VERSION, seq: self.seq, ty: "trailer".into(), ..t.clone() })?;
        self.dirty = false;
        self.out.finish().map_err(|e| self.named(e))
    }
    /// Called every `sink::TICK_EVERY`: what was written since is written out.
    fn tick(&mut self) -> io::Result<()> {
        if self.dirty { self.flush() } else { Ok(()) }
    }
    fn flush(&mut self) -> io::Result<()> {
        self.dirty = false;
        self.out.flush().map_err(|e| self.named(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The borrowed record (`Numbered`) writes the same bytes as the event itself with its
    /// version and place set, on every event of every lab capture (failed calls included).
    #[test]
    fn a_borrowed_event_writes_the_same_bytes_as_the_event() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab");
        let mut checked = 0;
        let mut split = 0;
        for f in ["companion-7.3.jsonl", "companion-6.12.jsonl", "memlock-7.3.jsonl", "session-6.12.jsonl"] {
            let events =
                crate::source::capture::parse_jsonl(&std::fs::read_to_string(dir.join(f)).unwrap()).unwrap();
            let mut w = Jsonl::new(Vec::new());
            let mut want = Vec::new();
            for (seq, ev) in events.iter().enumerate() {
                w.event(&std::sync::Arc::new(ev.clone())).unwrap();
                let mut e = ev.clone();
                e.v = capture::VERSION;
                e.seq = Some(seq as u64);
                split += usize::from(capture::has_errors(&e));
                capture::split_errors(&mut e);
                serde_json::to_writer(&mut want, &e).unwrap();
                want.push(b'\n');
                checked += 1;
            }
            assert_eq!(String::from_utf8(w.out).unwrap(), String::from_utf8(want).unwrap(), "{f}");
        }
        assert!(checked > 1000, "only {checked} events");
        assert!(split > 0, "no capture has a failed call: the copying path went untested");
    }
}
