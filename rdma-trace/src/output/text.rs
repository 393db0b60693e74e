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
}

impl<W: Write> Text<W> {
    pub(crate) fn new(out: W) -> Self {
        Self { out, stacks: false, syscalls: true }
    }
}

/// The event's fields as `name=value` pairs, values in RDMA terms.
pub(crate) fn fields_text(ev: &Event) -> String {
    let mut parts: Vec<String> =
        ev.fields.iter().map(|(k, v)| format!("{k}={}", render::field(ev, k, v))).collect();
    parts.extend(ev.unreadable.iter().map(|k| format!("{k}=<unreadable>")));
    parts.extend(ev.not_followed.iter().map(|k| format!("{k}=<null/err>")));
    parts.join(" ")
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
    let secs = ev.ts_ns as f64 / 1e9;
    let arrow = arrow(ev.kind);
    let comm = render::printable(&ev.comm);
    let mut s = format!("{secs:>14.6} {:<10} {arrow} {:<14} {comm}[{}/{}]", ev.path, ev.name, ev.pid, ev.tid);
    if let Some(c) = ev.container() {
        s.push_str(&format!(" @container:{}", &c[..12]));
    }
    if let Some(c) = ev.context
        && ev.path == Path::Completion
    {
        s.push_str(&format!(" ctx={c:?}").to_lowercase());
    }
    if let Some(fd) = &ev.fd_kind {
        s.push_str(&format!(" [{}]", render::printable(fd.as_str())));
    }
    let fields = fields_text(ev);
    if !fields.is_empty() {
        s.push(' ');
        s.push_str(&fields);
    }
    if let Some(l) = ev.latency_ns {
        s.push_str(&format!(" took={:.1}µs", l as f64 / 1e3));
    }
    s
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
        writeln!(self.out, "{}", line(ev))?;
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
