//! The joined story as text: per process, the verbs calls with the kernel work inside
//! them, MR pinning, completions with their wakeup latency, the data-phase syscalls, and
//! (with companion steps) each step's checks.

use crate::event::FieldId;
use crate::event::{EventKind, Path, ProbeId};
use crate::pipeline::correlate::engine::Events;
use crate::pipeline::correlate::story::{ProcessStory, Story};
use crate::steps::StepRecord;
use std::fmt::Write;

/// The fd kinds worth naming in a step (see `fds.rs`).
use crate::units::millis as ms;

use crate::units::bytes as size;

fn median(mut v: Vec<u64>) -> Option<u64> {
    v.sort_unstable();
    crate::units::quantile(&v, 0.5)
}

fn process<E: Events + ?Sized>(out: &mut String, ps: &ProcessStory, events: &E) -> std::fmt::Result {
    let wake = ps.wakeup_latencies_ns.clone();
    writeln!(
        out,
        "process {} ({}): {}, {}, {}{}, pinned peak {}",
        ps.pid,
        crate::pipeline::render::printable(&ps.comm),
        crate::units::count(ps.event_count, "event"),
        crate::units::count(ps.calls_total, "verbs call"),
        crate::units::count(ps.completions_total, "completion event"),
        median(wake.clone())
            .map(|m| format!(" (wakeup median {} over {})", ms(m), wake.len()))
            .unwrap_or_default(),
        size(ps.pinned_peak_bytes)
    )?;
    if ps.calls_total > ps.calls.len() as u64 {
        writeln!(out, "  ({} earlier calls not kept)", ps.calls_total - ps.calls.len() as u64)?;
    }
    for c in &ps.calls {
        let Some(e) = events.ev(c.entry) else {
            writeln!(out, "  {} (its events are no longer kept)", c.name)?;
            continue;
        };
        let kernel: Vec<String> = c
            .nested
            .iter()
            .filter_map(|&i| events.ev(i))
            .filter(|k| k.kind == EventKind::Entry)
            .map(|k| match (k.probe(), k.field(FieldId::Pages)) {
                (Some(ProbeId::UmemGet), Some(p)) => {
                    format!("umem_get pins {}", crate::units::count(p, "page"))
                }
                _ => k.name.to_string(),
            })
            .collect();
        let r = c.ret.and_then(|i| events.ev(i));
        let mut line = format!("  {} {}", e.name, crate::output::text::fields_text(e));
        if let Some(r) = r {
            line.push_str(&format!(
                " → {} [{}]",
                crate::output::text::fields_text(r),
                r.ts_ns.checked_sub(e.ts_ns).map_or("n/a: return before call".into(), ms)
            ));
        }
        if !kernel.is_empty() {
            line.push_str(&format!("\n      kernel: {}", kernel.join(" → ")));
        }
        writeln!(out, "{line}")?;
    }
    match ps.memlock_limit {
        Some(u64::MAX) => writeln!(out, "  RLIMIT_MEMLOCK: unlimited")?,
        Some(l) => writeln!(
            out,
            "  RLIMIT_MEMLOCK: {} — peak pinned {} ({:.0}%; root/CAP_IPC_LOCK are not held to it)",
            size(l),
            size(ps.pinned_peak_bytes),
            ps.pinned_peak_bytes as f64 * 100.0 / l.max(1) as f64
        )?,
        None => {}
    }
    for e in ps.failed_pins.iter().filter_map(|&i| events.ev(i)) {
        writeln!(out, "  pin REFUSED by the umem function: {}", crate::output::text::fields_text(e))?;
    }
    if ps.failed_pins_total > ps.failed_pins.len() as u64 {
        writeln!(
            out,
            "  ({} more refused pins not kept)",
            ps.failed_pins_total - ps.failed_pins.len() as u64
        )?;
    }
    for line in unpinned(ps) {
        writeln!(out, "  {line}")?;
    }
    if ps.mappings_total > 0 {
        writeln!(out, "  uverbs mappings: {}", ps.mappings_total)?;
    }
    for m in &ps.mappings {
        let what = match &m.queue {
            Some(q) => q.to_string(),
            None => format!("offset {:#x}", m.pgoff),
        };
        let gone = if m.unmapped { ", unmapped" } else { "" };
        writeln!(out, "    {:#x} {}: {what}{gone}", m.start, size(m.end.saturating_sub(m.start)))?;
    }
    if ps.mappings_total > ps.mappings.len() as u64 {
        writeln!(out, "    ({} earlier mappings not kept)", ps.mappings_total - ps.mappings.len() as u64)?;
    }
    if !ps.data_phase_syscalls.is_empty() {
        let s: Vec<String> = ps.data_phase_syscalls.iter().map(|(k, v)| format!("{k} {v}")).collect();
        writeln!(out, "  data-phase syscalls: {}", s.join(", "))?;
    }
    Ok(())
}

/// `rdma-trace story`'s text: the story of each process, its steps joined to their events.
pub fn text<E: Events + ?Sized>(story: &Story, events: &E, steps: &[StepRecord]) -> String {
    let mut out = String::new();
    write_text(&mut out, story, events, steps).expect("formatting into a String cannot fail");
    out
}

/// "851 events: 845 in 1 process below, 6 in kernel threads (kworker/u8:2 ×4, …)": every
/// event told, placed, so that the parts add up to what `report` and the TUI count.
fn totals(story: &Story) -> String {
    let (mut shown, mut procs, mut kernel) = (0u64, 0usize, std::collections::BTreeMap::<&str, u64>::new());
    for ps in story.processes.values().filter(|p| p.event_count > 0) {
        if ps.comm.starts_with("kworker") {
            *kernel.entry(ps.comm.as_str()).or_default() += ps.event_count;
        } else {
            (shown, procs) = (shown + ps.event_count, procs + 1);
        }
    }
    let mut parts =
        vec![format!("{shown} in {procs} {} below", if procs == 1 { "process" } else { "processes" })];
    if !kernel.is_empty() {
        let n: u64 = kernel.values().sum();
        let names: Vec<String> =
            kernel.iter().map(|(c, n)| format!("{} ×{n}", crate::pipeline::render::printable(c))).collect();
        parts.push(format!("{n} in kernel threads ({})", names.join(", ")));
    }
    if story.unjoined_total > 0 {
        parts.push(format!("{} unjoined", story.unjoined_total));
    }
    if story.retired_events > 0 {
        parts.push(format!("{} in retired processes", story.retired_events));
    }
    format!("{}: {}", crate::units::count(story.events_total, "event"), parts.join(", "))
}

fn write_text<E: Events + ?Sized>(
    out: &mut String,
    story: &Story,
    events: &E,
    steps: &[StepRecord],
) -> std::fmt::Result {
    writeln!(out, "{}", totals(story))?;
    for ps in story.processes.values().filter(|p| !p.comm.starts_with("kworker") && p.event_count > 0) {
        process(out, ps, events)?;
    }
    if !story.steps.is_empty() {
        writeln!(out, "companion steps:")?;
        for j in &story.steps {
            let s = &steps[j.step];
            let checks: Vec<String> = j
                .checks
                .iter()
                .map(|c| {
                    if c.ok {
                        format!("{} {} ✓", c.what, c.step)
                    } else {
                        format!("{} {} ≠ {} ✗", c.what, c.step, c.kernel)
                    }
                })
                .collect();
            let kernel = j
                .events
                .iter()
                .filter_map(|&i| events.ev(i))
                .filter(|e| !matches!(e.path, Path::Syscall | Path::Verbs))
                .count();
            // The step's syscalls on RDMA fds (rxe's doorbell is a write on the uverbs fd).
            let sys: Vec<String> = j
                .events
                .iter()
                .filter_map(|&i| events.ev(i))
                .filter(|e| e.kind == EventKind::SyscallEnter)
                .filter_map(|e| e.fd_kind.as_ref().filter(|k| k.is_rdma()).map(|k| (e, k)))
                .map(|(e, k)| format!("{}[{k}]", e.name))
                .collect();
            let sys = if sys.is_empty() { String::new() } else { format!("  syscalls: {}", sys.join(" ")) };
            writeln!(
                out,
                "  step {:>3} {:<18} {:>3} kernel events  {}{sys}",
                s.step,
                format!("{:?}", s.name),
                kernel,
                checks.join("  ")
            )?;
        }
    }
    let failed = story.steps.iter().flat_map(|j| &j.checks).filter(|c| !c.ok).count();
    writeln!(
        out,
        "unjoined events: {} (completions on CQs created before tracing started); failed checks: {failed}",
        story.unjoined_total
    )?;
    if story.retired_processes > 0 {
        writeln!(
            out,
            "({} processes were retired, the quietest first, to bound memory: not shown above)",
            story.retired_processes
        )?;
    }
    if story.evicted_steps > 0 {
        writeln!(
            out,
            "({} companion steps were let go to bound memory, the oldest first)",
            story.evicted_steps
        )?;
    }
    if story.evicted_events > 0 {
        writeln!(
            out,
            "({} events were let go to bound memory: the counts above include them, the lines above do not)",
            story.evicted_events
        )?;
    }
    if story.calls_let_go > 0 {
        writeln!(
            out,
            "({} libibverbs calls were still open {} deep on their thread and were let go: their returns were lost)",
            story.calls_let_go,
            crate::pipeline::correlate::calls::MAX_OPEN
        )?;
    }
    Ok(())
}

/// The MRs that pin nothing here, and re-registrations: one line each kind seen.
fn unpinned(ps: &crate::pipeline::correlate::story::ProcessStory) -> Vec<String> {
    let mut out = Vec::new();
    if ps.odp_total > 0 {
        out.push(format!(
            "on-demand paging (ODP) MRs: {} (nothing pinned at registration; {} mappings of their pages for the device)",
            ps.odp_total, ps.odp_faults
        ));
    }
    if ps.dmabuf_total > 0 {
        out.push(format!("dma-buf MRs: {} (an exporter's memory, not charged to memlock)", ps.dmabuf_total));
    }
    if ps.rereg_total > 0 {
        out.push(format!(
            "re-registrations: {} ({} refused by the provider)",
            ps.rereg_total, ps.rereg_refused
        ));
    }
    out
}
