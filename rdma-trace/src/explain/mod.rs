//! `rdma-trace explain TOPIC`: one real occurrence of a path, from a capture, stage by
//! stage — the user call, the syscall, the uverbs dispatch, the provider, the core work —
//! with the values seen, the kernel functions that did it (each with its source file, as
//! that kernel's stacks show them) and why, in words from `lessons.rs`.

mod contrasts;
mod cq;
pub mod frames;
pub(crate) mod guide;
pub mod lessons;
mod parts;
mod topics;

use crate::explain::lessons::Topic;
pub use parts::{Explanation, Input, Missing, Named, RunCounts, Stage};
use std::fmt::Write;

/// The explanation of `topic` from what was captured; an error says what the capture lacks.
pub(crate) fn explain(topic: Topic, input: &Input) -> Result<Explanation, Missing> {
    let mut x = match topic {
        Topic::Mr => topics::mr(input)?,
        Topic::Mmap => topics::mmap(input)?,
        Topic::Cq => cq::cq(input)?,
        Topic::Bypass => contrasts::bypass(input)?,
        Topic::Fork => contrasts::fork(input)?,
    };
    x.topic = topic.as_str().into();
    x.title = topic.title().into();
    x.kernel = input.header.map(|h| h.kernel_release.clone()).filter(|k| !k.is_empty());
    x.functions = functions_named(&x);
    Ok(x)
}

/// Every kernel function the explanation names: its stages' functions, and the table's
/// functions its texts mention.
pub(crate) fn functions_named(x: &Explanation) -> Vec<String> {
    let mut out: Vec<String> =
        x.stages.iter().flat_map(|s| s.functions.iter().map(|f| f.function.clone())).collect();
    let texts = x.stages.iter().map(|s| s.text.as_str()).chain(x.notes.iter().map(|n| n.1.as_str()));
    for t in texts {
        for f in frames::FRAMES {
            let mentioned = t.match_indices(f.function).any(|(at, _)| {
                let before = t[..at].chars().next_back();
                let after = t[at + f.function.len()..].chars().next();
                let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
                !word(before) && !word(after)
            });
            if mentioned {
                out.push(f.function.into());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The explanation as the command line prints it (88 columns).
pub fn text(x: &Explanation) -> String {
    text_at(x, 88)
}

/// The explanation with its prose wrapped to `width` columns (the TUI's panel): text
/// wrapped once, where it is shown, leaves no orphan words.
pub(crate) fn text_at(x: &Explanation, width: usize) -> String {
    let mut out = String::new();
    write_text(&mut out, x, width).expect("formatting into a String cannot fail");
    out
}

fn write_text(out: &mut String, x: &Explanation, width: usize) -> std::fmt::Result {
    let kernel = x.kernel.as_deref().map(|k| format!(" on Linux {k}")).unwrap_or_default();
    writeln!(out, "{} ({}){kernel}", x.title, x.topic)?;
    writeln!(out, "{}\n", x.occurrence)?;
    for (i, s) in x.stages.iter().enumerate() {
        writeln!(out, "{}. {}", i + 1, s.title)?;
        for l in &s.seen {
            writeln!(out, "     {l}")?;
        }
        for f in &s.functions {
            let file = if f.file.is_empty() { String::new() } else { format!(" ({})", f.file) };
            let what = if f.what.is_empty() { String::new() } else { format!(": {}", f.what) };
            writeln!(out, "   · {}(){file}{what}", f.function)?;
        }
        if !s.text.is_empty() {
            writeln!(out, "{}", wrap(&s.text, width, "   "))?;
        }
        writeln!(out)?;
    }
    for (head, t) in &x.notes {
        writeln!(out, "{head}")?;
        writeln!(out, "{}\n", wrap(t, width, "   "))?;
    }
    Ok(())
}

/// Words on lines of at most `width`, each indented.
pub(crate) fn wrap(text: &str, width: usize, indent: &str) -> String {
    let mut lines = Vec::new();
    let mut line = String::from(indent);
    for w in text.split_whitespace() {
        if line.len() > indent.len() && line.chars().count() + 1 + w.chars().count() > width {
            lines.push(std::mem::replace(&mut line, String::from(indent)));
        }
        if line.len() > indent.len() {
            line.push(' ');
        }
        line.push_str(w);
    }
    if line.len() > indent.len() {
        lines.push(line);
    }
    lines.join("\n")
}
