//! `rdma-trace story` and `rdma-trace replay`: read a capture (v0 or v1; a file, a FIFO, or
//! `-` for stdin) as a stream, print the joined story or the text stream.

use crate::capture::Record;
use crate::cli::ReadOpts;
use crate::event::Event;
use crate::output::{Sink, text::Text};
use crate::source::capture::{ReadReport, Reader};
use crate::steps::StepRecord;
use anyhow::{Context, Result};
use std::path::Path;

/// Runs `each` on every record of `file`; afterwards says on stderr what was damaged,
/// missing or cut.
fn each_record(
    file: &Path,
    opts: ReadOpts,
    mut each: impl FnMut(Record) -> Result<()>,
) -> Result<ReadReport> {
    let input = crate::source::capture::open(file).with_context(|| format!("opening {}", file.display()))?;
    let mut reader = Reader::new(input, opts.strict);
    if opts.follow {
        reader = reader.following();
    }
    for r in reader.by_ref() {
        each(r.with_context(|| file.display().to_string())?)?;
    }
    for n in reader.report.notes() {
        eprintln!("rdma-trace: {}: {n}", file.display());
    }
    Ok(reader.report)
}

/// The companion's step records, if a file is given.
pub fn read_steps(path: Option<&Path>) -> Result<Vec<StepRecord>> {
    path.map(crate::pipeline::correlate::story::read_steps)
        .transpose()
        .map(Option::unwrap_or_default)
        .map_err(anyhow::Error::msg)
}

pub fn story(capture: &Path, steps: Option<&Path>, json: bool, opts: ReadOpts) -> Result<i32> {
    let mut events: Vec<Event> = Vec::new();
    each_record(capture, opts, |r| {
        if let Record::Event(e) = r {
            events.push(*e);
        }
        Ok(())
    })?;
    let steps = read_steps(steps)?;
    let story = crate::pipeline::correlate::story::build(&events, &steps);
    if json {
        println!("{}", serde_json::to_string_pretty(&story)?);
    } else {
        print!("{}", crate::output::report::text(&story, &events, &steps));
    }
    Ok(0)
}

/// Whether an error is the reader of our stdout going away (`replay … | head`).
fn closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

pub fn replay(file: &Path, stacks: bool, opts: ReadOpts) -> Result<i32> {
    let mut t = Text::new(std::io::stdout().lock());
    t.stacks = stacks;
    let res = each_record(file, opts, |r| {
        match r {
            Record::Event(e) => t.event(&e)?,
            Record::Loss(l) => t.loss(&l)?,
            Record::Trailer(tr) => eprintln!(
                "rdma-trace: {}: {} events delivered, {} lost; stopped on {}",
                file.display(),
                tr.delivered,
                tr.lost,
                tr.stopped
            ),
            Record::Header(_) | Record::Stats(_) => {}
        }
        Ok(())
    })
    .and_then(|_| t.flush().map_err(anyhow::Error::from));
    match res {
        Err(e) if closed_pipe(&e) => Ok(0),
        Err(e) => Err(e),
        Ok(()) => Ok(0),
    }
}
