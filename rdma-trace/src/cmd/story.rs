//! `rdma-trace story` and `rdma-trace replay`: read a capture (v0 or v1; a file, a FIFO, or
//! `-` for stdin) as a stream, print the joined story or the text stream.

use crate::cli::ReadOpts;
use crate::event::Event;
use crate::output::text::Text;
use crate::pipeline::correlate::engine::{Engine, Limits, StorySink};
use crate::pipeline::feed;
use crate::sink::Sink;
use crate::source::capture::{ReadReport, Reader};
use crate::steps::StepRecord;
use anyhow::{Context, Result};
use std::path::Path;

/// The capture as a reader (plain or zstd; `-` is stdin; `--follow` waits for more).
fn reader(file: &Path, opts: ReadOpts) -> Result<Reader<Box<dyn std::io::BufRead + Send>>> {
    if opts.follow && file != Path::new("-") && crate::source::capture::is_zstd(file) {
        crate::bad_input!(
            "--follow reads plain captures: {} is zstd (a frame still being written cannot be followed)",
            file.display()
        );
    }
    let input = crate::source::capture::open(file)
        .map_err(|e| crate::cli::BadInput(format!("opening {}: {e}", file.display())))?;
    let reader = Reader::new(input, opts.strict);
    Ok(if opts.follow { reader.following() } else { reader })
}

/// Says on stderr what the reader found damaged, missing or cut.
fn report_damage(file: &Path, report: &ReadReport) {
    for n in report.notes() {
        eprintln!("rdma-trace: {}: {n}", file.display());
    }
}

/// The companion's step records, if a file is given.
pub fn read_steps(path: Option<&Path>) -> Result<Vec<StepRecord>> {
    path.map(crate::pipeline::correlate::story::read_steps)
        .transpose()
        .map(Option::unwrap_or_default)
        .map_err(|e| crate::cli::BadInput(e.to_string()).into())
}

/// `story`: the capture fed through the story (bounded: `Limits::default`), then printed.
pub fn story(capture: &Path, steps: Option<&Path>, json: bool, opts: ReadOpts) -> Result<i32> {
    let steps = read_steps(steps)?;
    let mut r = reader(capture, opts)?;
    let mut sink = StorySink(Engine::new(steps, Limits::default()));
    let fed = feed(&mut r, &mut sink).map_err(unfed).with_context(|| capture.display().to_string());
    report_damage(capture, &r.report);
    fed?;
    let (story, kept, steps) = sink.0.finish();
    if json {
        println!("{}", serde_json::to_string_pretty(&story)?);
    } else {
        print!("{}", crate::output::story::text(&story, &kept, &steps));
    }
    Ok(0)
}

/// The reader's or the sink's own error, as the cause (`main` tells bad input by the
/// reader's error, `closed_pipe` a gone reader by the sink's).
fn unfed(e: crate::pipeline::FeedError) -> anyhow::Error {
    match e {
        crate::pipeline::FeedError::Read(e) => e.into(),
        crate::pipeline::FeedError::Write(e) => e.into(),
    }
}

/// Whether an error is the reader of our stdout going away (`replay … | head`).
fn closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The text stream of a replay, and the trailer's account on stderr.
struct Replay<'a> {
    text: Text<std::io::StdoutLock<'static>>,
    file: &'a Path,
}

impl Sink for Replay<'_> {
    fn event(&mut self, ev: &std::sync::Arc<Event>) -> std::io::Result<()> {
        self.text.event(ev)
    }
    fn step(&mut self, s: &crate::steps::StepRecord) -> std::io::Result<()> {
        self.text.step(s)
    }
    fn loss(&mut self, l: &crate::capture::Loss) -> std::io::Result<()> {
        self.text.loss(l)
    }
    fn trailer(&mut self, t: &crate::capture::Trailer) -> std::io::Result<()> {
        eprintln!(
            "rdma-trace: {}: {} events delivered, {} lost; stopped on {}",
            self.file.display(),
            t.delivered,
            t.lost,
            t.stopped
        );
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.text.flush()
    }
}

/// `replay`: the capture fed to the text stream.
pub fn replay(file: &Path, stacks: bool, opts: ReadOpts) -> Result<i32> {
    let mut text = Text::new(std::io::stdout().lock());
    text.stacks = stacks;
    let mut r = reader(file, opts)?;
    let res =
        feed(&mut r, &mut Replay { text, file }).map_err(unfed).with_context(|| file.display().to_string());
    report_damage(file, &r.report);
    match res {
        Err(e) if closed_pipe(&e) => Ok(0),
        Err(e) => Err(e),
        Ok(()) => Ok(0),
    }
}
