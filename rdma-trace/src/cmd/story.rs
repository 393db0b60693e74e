//! `rdma-trace story` and `rdma-trace replay`: read a capture, print the joined story or
//! the text stream.

use crate::output::{Sink, text::Text};
use crate::steps::StepRecord;
use anyhow::{Context, Result};
use std::path::Path;

fn read_capture(file: &Path) -> Result<Vec<crate::event::Event>> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    crate::event::parse_jsonl(&text).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))
}

/// The companion's step records, if a file is given.
pub fn read_steps(path: Option<&Path>) -> Result<Vec<StepRecord>> {
    path.map(crate::pipeline::correlate::story::read_steps)
        .transpose()
        .map(Option::unwrap_or_default)
        .map_err(anyhow::Error::msg)
}

pub fn story(capture: &Path, steps: Option<&Path>, json: bool) -> Result<i32> {
    let events = read_capture(capture)?;
    let steps = read_steps(steps)?;
    let story = crate::pipeline::correlate::story::build(&events, &steps);
    if json {
        println!("{}", serde_json::to_string_pretty(&story)?);
    } else {
        print!("{}", crate::output::report::text(&story, &events, &steps));
    }
    Ok(0)
}

pub fn replay(file: &Path, stacks: bool) -> Result<i32> {
    let events = read_capture(file)?;
    let mut t = Text::new(std::io::stdout().lock());
    t.stacks = stacks;
    for ev in &events {
        t.event(ev)?;
    }
    t.flush()?;
    Ok(0)
}
