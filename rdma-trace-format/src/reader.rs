//! Reading capture streams (v0 and v1) line by line, in constant memory: a file, `-`
//! (stdin) or a FIFO. A damaged line is skipped, counted and named by its line and byte
//! offset (or, with `strict`, is an error); a line longer than `MAX_LINE` is refused (the
//! input is not a capture); a v1 stream without its trailer is reported as cut short.

use crate::capture::{self, Header, Loss, Record, Stats, Trailer};
use crate::event::Event;
use std::io::{self, BufRead};

/// No record comes near this; a longer line means the input is not a capture.
pub const MAX_LINE: usize = 1 << 20;
/// How often `--follow` looks for more at the end of the input.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(100);
/// The zstd frame magic: a compressed capture is recognised by its content.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// Damaged lines described one by one (the rest are only counted).
const DESCRIBED: usize = 10;

/// A line that could not be read as a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// 1-based line number and the byte offset of the line's start.
    pub line: u64,
    pub offset: u64,
    pub why: String,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {} (byte {}): {}", self.line, self.offset, self.why)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("reading: {0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Damaged(Damage),
    #[error("line {line} (byte {offset}) is longer than {MAX_LINE} bytes: this is not a capture")]
    TooLong { line: u64, offset: u64 },
    /// The first line is no record: whatever this is (random bytes, gzip, a step file), it
    /// is not a capture, and reading on would only count its lines as damaged.
    #[error("{0}: this is not a capture (its first line is no capture record)")]
    NotACapture(Damage),
}

/// What a reader saw besides the records it returned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadReport {
    /// The stream's format version (of its first record).
    pub version: Option<u32>,
    pub damaged: u64,
    /// The first damaged lines.
    pub described: Vec<Damage>,
    /// Records missing between two sequence numbers (v1).
    pub seq_gaps: u64,
    /// A v1 stream that ended without its trailer.
    pub cut_short: bool,
    pub saw_trailer: bool,
}

impl ReadReport {
    /// One line per thing worth saying, for stderr; empty when the stream was whole.
    pub fn notes(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.damaged > 0 {
            let first: Vec<String> = self.described.iter().map(ToString::to_string).collect();
            out.push(format!("skipped {} damaged lines: {}", self.damaged, first.join("; ")));
        }
        if self.seq_gaps > 0 {
            out.push(format!("{} records are missing (gaps in their sequence numbers)", self.seq_gaps));
        }
        if self.cut_short {
            out.push(
                "the capture was cut short: it has no trailer (the run was killed or is still writing)"
                    .into(),
            );
        }
        out
    }
}

/// A capture as a buffered stream: `-` is stdin; zstd is decompressed (recognised by its
/// magic, whatever the name). A compressed capture cut mid-frame (a killed run) ends where
/// its data ends; the reader then reports it cut short.
pub fn open(path: &std::path::Path) -> io::Result<Box<dyn BufRead + Send>> {
    let input: Box<dyn BufRead + Send> = if path == std::path::Path::new("-") {
        Box::new(io::BufReader::with_capacity(1 << 16, io::stdin()))
    } else {
        Box::new(io::BufReader::with_capacity(1 << 16, std::fs::File::open(path)?))
    };
    decoded(input)
}

/// Whether the file at `path` is a zstd stream (by its magic).
pub fn is_zstd(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 4];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok() && head == ZSTD_MAGIC
}

/// `input` as it reads, decompressed if it starts with the zstd magic.
pub fn decoded<'a>(mut input: Box<dyn BufRead + Send + 'a>) -> io::Result<Box<dyn BufRead + Send + 'a>> {
    let head = loop {
        match input.fill_buf() {
            Ok(b) => break b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    };
    if head.starts_with(&ZSTD_MAGIC) {
        let z = zstd::stream::read::Decoder::with_buffer(input)?;
        return Ok(Box::new(io::BufReader::with_capacity(1 << 16, CutIsEnd(z))));
    }
    Ok(input)
}

/// A decoder whose "incomplete frame" at the end of its input is the end of the stream.
struct CutIsEnd<R>(R);

impl<R: io::Read> io::Read for CutIsEnd<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.0.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
            r => r,
        }
    }
}

pub struct Reader<R> {
    input: R,
    strict: bool,
    line: u64,
    /// Bytes read so far, and where the current line started.
    offset: u64,
    line_start: u64,
    buf: Vec<u8>,
    next_seq: Option<u64>,
    done: bool,
    /// At the end of the input, wait for more until the trailer comes (`--follow`).
    follow: bool,
    pub report: ReadReport,
}

/// Where the record type is named: v1 non-event records start `{"v":1,"seq":N,"type":"`.
fn record_type(line: &str) -> Option<&str> {
    let head = &line.as_bytes()[..line.len().min(48)];
    let key = b"\"type\":\"";
    let at = head.windows(key.len()).position(|w| w == key)? + key.len();
    let rest = &line[at..];
    rest.find('"').map(|end| &rest[..end])
}

/// Why a line is not a record.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    /// Not JSON, or not the record its type names (serde's words: where, and what).
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("unknown record type {0:?}")]
    UnknownType(String),
}

/// Parses one line into a record (not checking its version).
pub fn parse_line(line: &str) -> Result<Record, LineError> {
    let e = LineError::Json;
    Ok(match record_type(line) {
        None => {
            let mut ev = match crate::quick::event(line) {
                Some(ev) => ev,
                None => serde_json::from_str::<Event>(line).map_err(e)?,
            };
            capture::join_errors(&mut ev);
            Record::Event(std::sync::Arc::new(ev))
        }
        Some("header") => Record::Header(Box::new(serde_json::from_str::<Header>(line).map_err(e)?)),
        Some("step") => Record::Step(Box::new(serde_json::from_str::<capture::Step>(line).map_err(e)?)),
        Some("stats") => Record::Stats(serde_json::from_str::<Stats>(line).map_err(e)?),
        Some("state") => Record::State(serde_json::from_str::<capture::State>(line).map_err(e)?),
        Some("loss") => Record::Loss(serde_json::from_str::<Loss>(line).map_err(e)?),
        Some("trailer") => Record::Trailer(serde_json::from_str::<Trailer>(line).map_err(e)?),
        Some(other) => return Err(LineError::UnknownType(other.to_string())),
    })
}

fn version_of(r: &Record) -> u32 {
    match r {
        Record::Header(h) => h.v,
        Record::State(s) => s.v,
        Record::Event(e) => e.v,
        Record::Step(s) => s.v,
        Record::Stats(s) => s.v,
        Record::Loss(l) => l.v,
        Record::Trailer(t) => t.v,
    }
}

impl<R: BufRead> Reader<R> {
    pub fn new(input: R, strict: bool) -> Self {
        Self {
            input,
            strict,
            line: 0,
            offset: 0,
            line_start: 0,
            buf: Vec::new(),
            next_seq: None,
            done: false,
            follow: false,
            report: ReadReport::default(),
        }
    }

    /// Reads a growing capture: at its end, waits for more (as `tail -f`) until its
    /// trailer is read. A cut line at the end is waited on, not counted as damaged.
    pub fn following(mut self) -> Self {
        self.follow = true;
        self
    }

    /// The next line into `buf` (without its newline); false at the end. Refuses a line
    /// over `MAX_LINE` without reading the rest of it.
    fn next_line(&mut self) -> Result<bool, ReadError> {
        self.buf.clear();
        loop {
            let chunk = match self.input.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            if chunk.is_empty() {
                if self.follow && !self.report.saw_trailer {
                    std::thread::sleep(FOLLOW_POLL);
                    continue;
                }
                return Ok(!self.buf.is_empty());
            }
            let (take, end) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            self.buf.extend_from_slice(&chunk[..take]);
            self.input.consume(take);
            if self.buf.len() > MAX_LINE + 1 {
                return Err(ReadError::TooLong { line: self.line + 1, offset: self.offset });
            }
            if end {
                return Ok(true);
            }
        }
    }

    fn damaged(&mut self, why: String) -> Option<Result<Record, ReadError>> {
        let d = Damage { line: self.line, offset: self.line_start, why };
        if self.line == 1 {
            self.done = true;
            let why = match what_it_is(&self.buf) {
                Some(known) => format!("{}; {known}", d.why),
                None => d.why,
            };
            return Some(Err(ReadError::NotACapture(Damage { why, ..d })));
        }
        if self.strict {
            self.done = true;
            return Some(Err(ReadError::Damaged(d)));
        }
        self.report.damaged += 1;
        if self.report.described.len() < DESCRIBED {
            self.report.described.push(d);
        }
        None
    }

    /// Checks the version and the sequence of a parsed record.
    fn accept(&mut self, rec: Record) -> Option<Result<Record, ReadError>> {
        let v = version_of(&rec);
        if v > capture::VERSION {
            return self.damaged(format!("format version {v} (this build reads up to {})", capture::VERSION));
        }
        let version = *self.report.version.get_or_insert(v);
        if v != version {
            return self.damaged(format!("format version {v} in a version {version} stream"));
        }
        if let Some(seq) = rec.seq() {
            if let Some(want) = self.next_seq
                && seq > want
            {
                self.report.seq_gaps = self.report.seq_gaps.saturating_add(seq - want);
            }
            // (A damaged file may say u64::MAX: nothing can follow it without a gap.)
            self.next_seq = seq.checked_add(1);
        }
        if matches!(rec, Record::Trailer(_)) {
            self.report.saw_trailer = true;
        }
        Some(Ok(rec))
    }

    fn finish(&mut self) {
        self.done = true;
        self.report.cut_short = self.report.version.unwrap_or(0) >= 1 && !self.report.saw_trailer;
    }
}

impl<R: BufRead> Iterator for Reader<R> {
    type Item = Result<Record, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            self.line_start = self.offset;
            match self.next_line() {
                Ok(false) => self.finish(),
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
                Ok(true) => {
                    self.line += 1;
                    self.offset += self.buf.len() as u64;
                    let cut = self.buf.last() != Some(&b'\n');
                    // The line is read where it lies, then the buffer is given back.
                    let line = std::mem::take(&mut self.buf);
                    let parsed = record(&line, cut);
                    self.buf = line;
                    let out = match parsed {
                        None => None,
                        Some(Ok(rec)) => self.accept(rec),
                        Some(Err(why)) => self.damaged(why),
                    };
                    if let Some(r) = out {
                        return Some(r);
                    }
                }
            }
        }
        None
    }
}

/// The record of one line (its newline still on, if it had one): None for a blank line,
/// or why it is damaged.
fn record(line: &[u8], cut: bool) -> Option<Result<Record, String>> {
    let text = match std::str::from_utf8(line) {
        Ok(t) => t.trim_end_matches('\n'),
        Err(e) => return Some(Err(format!("not UTF-8 ({e})"))),
    };
    if text.trim().is_empty() {
        return None;
    }
    Some(
        parse_line(text)
            .map_err(|why| if cut { format!("cut short (no newline): {why}") } else { why.to_string() }),
    )
}

/// The events of a whole capture (v0 or v1) held in memory, strictly: the first damaged
/// line is an error naming it. Streams are read with `Reader`.
pub fn parse_jsonl(text: &str) -> Result<Vec<Event>, ReadError> {
    let mut out = Vec::new();
    for r in Reader::new(text.as_bytes(), true) {
        if let Record::Event(e) = r? {
            out.push(std::sync::Arc::unwrap_or_clone(e));
        }
    }
    Ok(out)
}

/// What a first line that is no capture record says the file is, where that is known, and
/// what to do with it.
fn what_it_is(line: &[u8]) -> Option<&'static str> {
    if line.starts_with(&[0x1f, 0x8b]) {
        return Some("it is gzip-compressed: gunzip it first (captures are read plain or zstd)");
    }
    let text = std::str::from_utf8(line).ok()?;
    if serde_json::from_str::<crate::steps::StepRecord>(text.trim_end()).is_ok() {
        return Some("it is a companion step file: give it with --steps, beside the capture it belongs to");
    }
    None
}
