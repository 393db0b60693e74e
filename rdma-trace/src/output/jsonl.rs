//! The capture stream, format v1 (`crate::capture`, docs/event-format.md): a header, the
//! events, stats at most a second apart, loss notices, a trailer; each record numbered.
//! Written to a file (mode 0600: it holds kernel addresses) or any writer (stdout, a socket).

use super::Sink;
use crate::capture::{self, Header, Loss, Stats, Trailer};
use crate::event::Event;
use serde::Serialize;
use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

/// A killed run loses at most this much of its stream.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

pub struct Jsonl<W: Write> {
    out: W,
    /// What the errors name (the file, or "stdout").
    name: String,
    seq: u64,
    /// Written since the last flush.
    dirty: bool,
}

impl Jsonl<io::BufWriter<std::fs::File>> {
    /// Creates (or truncates) `path` with mode 0600.
    pub fn create(path: &Path) -> io::Result<Self> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
        // An existing file keeps its mode through open(2): set it (on regular files only:
        // never chmod a device such as /dev/full or a FIFO someone made).
        if f.metadata()?.is_file() {
            f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        Ok(Self::new(io::BufWriter::new(f), path.display().to_string()))
    }
}

impl<W: Write> Jsonl<W> {
    pub fn new(out: W, name: String) -> Self {
        Self { out, name, seq: 0, dirty: false }
    }

    /// The writer, for a stream written to memory.
    pub fn into_inner(self) -> W {
        self.out
    }

    fn named(&self, e: io::Error) -> io::Error {
        io::Error::new(e.kind(), format!("writing {}: {e}", self.name))
    }

    fn line<T: Serialize>(&mut self, rec: &T) -> io::Result<()> {
        let res = serde_json::to_writer(&mut self.out, rec).map_err(io::Error::from);
        let res = res.and_then(|()| self.out.write_all(b"\n"));
        self.seq += 1;
        self.dirty = true;
        res.map_err(|e| self.named(e))
    }

    /// The header: the first record (written out with the first tick).
    pub fn header(&mut self, h: &Header) -> io::Result<()> {
        let h = Header { v: capture::VERSION, seq: self.seq, ty: "header".into(), ..h.clone() };
        self.line(&h)
    }
}

impl<W: Write> Sink for Jsonl<W> {
    fn event(&mut self, ev: &Event) -> io::Result<()> {
        let mut e = ev.clone();
        e.v = capture::VERSION;
        e.seq = Some(self.seq);
        capture::split_errors(&mut e);
        self.line(&e)
    }
    fn stats(&mut self, s: &Stats) -> io::Result<()> {
        self.line(&Stats { v: capture::VERSION, seq: self.seq, ty: "stats".into(), ..s.clone() })
    }
    fn loss(&mut self, l: &Loss) -> io::Result<()> {
        self.line(&Loss { v: capture::VERSION, seq: self.seq, ty: "loss".into(), ..l.clone() })
    }
    fn trailer(&mut self, t: &Trailer) -> io::Result<()> {
        self.line(&Trailer { v: capture::VERSION, seq: self.seq, ty: "trailer".into(), ..t.clone() })?;
        self.flush()
    }
    /// Called every `FLUSH_EVERY`: what was written since is written out.
    fn tick(&mut self) -> io::Result<()> {
        if self.dirty { self.flush() } else { Ok(()) }
    }
    fn flush(&mut self) -> io::Result<()> {
        self.dirty = false;
        self.out.flush().map_err(|e| self.named(e))
    }
}
