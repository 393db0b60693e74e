//! `rdma-trace explain TOPIC`: one real occurrence of a path, from a capture, stage by
//! stage — the user call, the syscall, the uverbs dispatch, the provider, the core work —
//! with the values seen, the kernel functions that did it (each with its source file, as
//! that kernel's stacks show them) and why, in words from `plan/lessons.rs`.

mod contrasts;
pub mod guide;
mod topics;

use crate::capture::Header;
use crate::event::{Event, EventKind};
use crate::pipeline::correlate::story::Story;
use crate::plan::frames;
use crate::plan::lessons::Topic;
use crate::steps::StepRecord;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

/// A kernel function named by an explanation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Named {
    pub function: String,
    pub file: String,
    pub what: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Stage {
    pub title: String,
    /// The values seen, one line each.
    pub seen: Vec<String>,
    pub functions: Vec<Named>,
    pub text: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Explanation {
    pub topic: String,
    pub title: String,
    /// The kernel the capture was made on (its header), when known.
    pub kernel: Option<String>,
    pub occurrence: String,
    pub stages: Vec<Stage>,
    /// Why, with this run's numbers: (heading, text).
    pub notes: Vec<(String, String)>,
    /// The numbers, by name, for scripts and tests (bytes, pages, ns, counts, keys).
    pub values: BTreeMap<String, u64>,
    /// Every kernel function it names (see `functions_named`).
    pub functions: Vec<String>,
}

/// What an explanation is made from.
pub struct Input<'a> {
    pub events: &'a [Event],
    pub story: &'a Story,
    pub steps: &'a [StepRecord],
    pub header: Option<&'a Header>,
    /// The event the person chose (the TUI's selection): the occurrence explained is the
    /// one on its thread nearest to it, else the run's first.
    pub anchor: Option<usize>,
    /// The hosts' names, in the order their captures were merged (`event::host_of`);
    /// empty, or one, for a single host.
    pub hosts: &'a [String],
    /// The other hosts' clocks against the first's: the widest error bar of the offsets
    /// measured (None: one host, or not measured).
    pub clock_error_ns: Option<u64>,
}

impl Input<'_> {
    /// A process as the explanation names it: its pid, with its host's name when the
    /// events are of several hosts (`273@host-b`).
    fn who(&self, pid: u32) -> String {
        crate::event::pid_at(pid, self.host(pid))
    }
    /// The name of the host `pid` ran on, where the events are of several hosts.
    fn host(&self, pid: u32) -> Option<&str> {
        self.hosts
            .get(crate::event::host_of(pid) as usize)
            .filter(|_| self.hosts.len() > 1)
            .map(String::as_str)
    }
    /// Of `candidates` (event indexes, in order), the one the anchor points at: on the
    /// anchor's thread, the last at or before it, else the first after it; without an
    /// anchor (or none on its thread), `None`.
    fn anchored(&self, candidates: &[usize]) -> Option<usize> {
        let a = self.anchor?;
        let tid = self.events.get(a)?.tid;
        let on = |i: &&usize| self.events[**i].tid == tid;
        candidates
            .iter()
            .filter(|i| **i <= a)
            .rfind(on)
            .or(candidates.iter().find(|i| **i > a && on(i)))
            .copied()
    }
    /// The first event after `i` on `tid` that `ok` accepts.
    fn next_on(&self, i: usize, tid: u32, ok: impl Fn(&Event) -> bool) -> Option<(usize, &Event)> {
        self.events.iter().enumerate().skip(i + 1).find(|(_, e)| e.tid == tid && ok(e))
    }
    /// The last event before `i` on `tid` that `ok` accepts.
    fn prev_on(&self, i: usize, tid: u32, ok: impl Fn(&Event) -> bool) -> Option<(usize, &Event)> {
        self.events[..i].iter().enumerate().rev().find(|(_, e)| e.tid == tid && ok(e))
    }
    /// The return that ends the call entered at `i` (same thread, same probe).
    fn return_of(&self, i: usize) -> Option<(usize, &Event)> {
        let e = &self.events[i];
        self.next_on(i, e.tid, |r| r.name == e.name && r.kind == EventKind::Return)
    }
}

/// The path's frames of a stack, outermost first, as the table names them.
fn named_frames<S: AsRef<str>>(stack: &[S]) -> Vec<Named> {
    stack
        .iter()
        .rev()
        .filter_map(|f| frames::lookup(f.as_ref()))
        .map(|f| Named { function: f.function.into(), file: f.file.into(), what: f.what.into() })
        .collect()
}

/// A function an event was probed at, with its file when the table knows it.
fn named(function: &str) -> Named {
    match frames::lookup(function) {
        Some(f) => Named { function: f.function.into(), file: f.file.into(), what: f.what.into() },
        None => Named { function: function.into(), file: String::new(), what: String::new() },
    }
}

/// `name=value` of the fields, rendered.
fn fields(e: &Event, keys: &[&str]) -> String {
    keys.iter()
        .filter_map(|k| e.fields.get(k).map(|v| format!("{k}={}", crate::pipeline::render::field(e, k, *v))))
        .collect::<Vec<_>>()
        .join(" ")
}

use crate::units::duration as us;

use crate::units::bytes;

/// The explanation of `topic` from what was captured; an error says what the capture lacks.
pub fn explain(topic: Topic, input: &Input) -> Result<Explanation, String> {
    let mut x = match topic {
        Topic::Mr => topics::mr(input)?,
        Topic::Mmap => topics::mmap(input)?,
        Topic::Cq => topics::cq(input)?,
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
pub fn functions_named(x: &Explanation) -> Vec<String> {
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

pub fn text(x: &Explanation) -> String {
    let mut out = String::new();
    write_text(&mut out, x).expect("formatting into a String cannot fail");
    out
}

fn write_text(out: &mut String, x: &Explanation) -> std::fmt::Result {
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
            writeln!(out, "{}", wrap(&s.text, 88, "   "))?;
        }
        writeln!(out)?;
    }
    for (head, t) in &x.notes {
        writeln!(out, "{head}")?;
        writeln!(out, "{}\n", wrap(t, 88, "   "))?;
    }
    Ok(())
}

/// Words on lines of at most `width`, each indented.
pub fn wrap(text: &str, width: usize, indent: &str) -> String {
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
