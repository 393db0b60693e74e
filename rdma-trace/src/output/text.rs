//! The human text stream: one line per event, values in RDMA terms.

use crate::event::{Event, EventKind, Path};
use crate::pipeline::render;
use crate::sink::Sink;
use std::io::Write;

pub(crate) struct Text<W: Write> {
    out: W,
    /// Print kernel stacks under control-path entries.
    pub stacks: bool,
    /// Print syscall events.
    pub syscalls: bool,
    /// The line being written, kept between events.
    line: String,
}

impl<W: Write> Text<W> {
    pub(crate) fn new(out: W) -> Self {
        Self { out, stacks: false, syscalls: true, line: String::new() }
    }
}

/// The event's fields as `name=value` pairs, values in RDMA terms.
pub(crate) fn fields_text(ev: &Event) -> String {
    let mut s = String::new();
    write_fields(&mut s, ev).expect("a String takes every write");
    s
}

/// `fields_text`, written at the end of `out`.
fn write_fields(out: &mut String, ev: &Event) -> std::fmt::Result {
    use std::fmt::Write as _;
    let mut sep = "";
    for (k, v) in &ev.fields {
        write!(out, "{sep}{k}=")?;
        render::write_field(out, ev, k, v)?;
        sep = " ";
    }
    for k in &ev.unreadable {
        write!(out, "{sep}{k}=<unreadable>")?;
        sep = " ";
    }
    for k in &ev.not_followed {
        write!(out, "{sep}{k}=<null/err>")?;
        sep = " ";
    }
    Ok(())
}

/// How an event's kind is drawn: → entry, ← return, » « a syscall's enter and exit.
pub(crate) fn arrow(kind: EventKind) -> &'static str {
    match kind {
        EventKind::Entry => "→",
        EventKind::Return => "←",
        EventKind::SyscallEnter => "»",
        EventKind::SyscallExit => "«",
    }
}

/// One line for an event (no trailing newline).
pub fn line(ev: &Event) -> String {
    let mut s = String::with_capacity(160);
    write_line(&mut s, ev).expect("a String takes every write");
    s
}

/// `line`, written at the end of `s`.
fn write_line(s: &mut String, ev: &Event) -> std::fmt::Result {
    use std::fmt::Write as _;
    let secs = ev.ts_ns as f64 / 1e9;
    let arrow = arrow(ev.kind);
    let comm = render::printable(&ev.comm);
    write!(s, "{secs:>14.6} {:<10} {arrow} {:<14} {comm}[{}/{}]", ev.path, ev.name, ev.pid, ev.tid)?;
    if let Some(c) = ev.container() {
        write!(s, " @container:{}", &c[..12])?;
    }
    if let Some(c) = ev.context
        && ev.path == Path::Completion
    {
        s.push_str(&format!(" ctx={c:?}").to_lowercase());
    }
    if let Some(fd) = &ev.fd_kind {
        write!(s, " [{}]", render::printable(fd.as_str()))?;
    }
    if !ev.fields.is_empty() || !ev.unreadable.is_empty() || !ev.not_followed.is_empty() {
        s.push(' ');
        write_fields(s, ev)?;
    }
    if let Some(l) = ev.latency_ns {
        write!(s, " took={:.1}µs", l as f64 / 1e3)?;
    }
    Ok(())
}

/// One line for a companion step: when it ended, its name and number, how long it took,
/// and how it went (no trailing newline).
pub(crate) fn step_line(s: &crate::steps::StepRecord) -> String {
    let secs = s.t_end_ns as f64 / 1e9;
    let took = s.t_end_ns.saturating_sub(s.t_start_ns) as f64 / 1e3;
    let how = match (&s.ok, s.errno, &s.error) {
        (true, ..) => "ok".to_string(),
        (false, Some(n), _) => format!("failed: {}", render::errno_name(n as i64)),
        (false, None, Some(e)) => format!("failed: {}", render::printable(e)),
        (false, None, None) => "failed".to_string(),
    };
    format!(
        "{secs:>14.6} {:<10} ◆ {:<14} pid {}/{} run {} step {} took={took:.1}µs {how}",
        "step",
        s.name.as_str(),
        s.pid,
        s.tid,
        s.run,
        s.step
    )
}

/// One line for a loss notice (no trailing newline).
pub(crate) fn loss_line(l: &crate::capture::Loss) -> String {
    let secs = l.ts_ns as f64 / 1e9;
    format!("{secs:>14.6} {:<10} ! {} events of {} lost: {}", "lost", l.count, l.site, l.reason)
}

impl<W: Write> Sink for Text<W> {
    fn step(&mut self, s: &crate::steps::StepRecord) -> std::io::Result<()> {
        writeln!(self.out, "{}", step_line(s))
    }
    fn event(&mut self, ev: &std::sync::Arc<Event>) -> std::io::Result<()> {
        let is_sys = matches!(ev.kind, EventKind::SyscallEnter | EventKind::SyscallExit);
        if is_sys && !self.syscalls {
            return Ok(());
        }
        self.line.clear();
        write_line(&mut self.line, ev).expect("a String takes every write");
        self.line.push('\n');
        self.out.write_all(self.line.as_bytes())?;
        if self.stacks && ev.kind == EventKind::Entry {
            for f in &ev.stack {
                writeln!(self.out, "{:>16}{f}", "")?;
            }
        }
        Ok(())
    }
    /// Loss is never silent: a line in the stream where it was seen.
    fn loss(&mut self, l: &crate::capture::Loss) -> std::io::Result<()> {
        writeln!(self.out, "{}", loss_line(l))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}
