//! `rdma-trace trace`: runs the tracer, prints its notices and the run's summary, and the
//! joined story at the end when asked.

use crate::cli::TraceArgs;
use crate::event::Event;
use crate::live::kprobe_events::MAX_INSTANCES;
use crate::live::trace::{NotPrivileged, Notice, TraceOptions, Tracer};
use crate::output::{Sink, jsonl::Jsonl, text::Text};
use anyhow::{Context, Result, bail};
use std::io::Write;
use std::time::Duration;

fn options(a: &TraceArgs) -> Result<TraceOptions> {
    if !a.ring_kib.is_power_of_two() || a.ring_kib < 4 {
        bail!("--ring-kib must be a power of two ≥ 4 (got {})", a.ring_kib);
    }
    if !(1..=MAX_INSTANCES).contains(&a.kretprobe_instances) {
        bail!("--kretprobe-instances must be 1..={MAX_INSTANCES} (got {})", a.kretprobe_instances);
    }
    Ok(TraceOptions {
        probes: a.probes.clone(),
        pids: a.pids.clone(),
        command: a.command.clone(),
        duration: a.duration.map(Duration::from_secs_f64),
        ring_bytes: a.ring_kib * 1024,
        return_instances: a.kretprobe_instances,
    })
}

fn sinks(a: &TraceArgs) -> Result<Vec<Box<dyn Sink>>> {
    let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
    if !a.quiet {
        let mut t = Text::new(std::io::stdout());
        t.stacks = a.stacks;
        sinks.push(Box::new(t));
    }
    if let Some(p) = &a.output {
        let f = std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
        sinks.push(Box::new(Jsonl::new(std::io::BufWriter::new(f))));
    }
    Ok(sinks)
}

/// One line of stderr per notice.
fn print_notice(n: Notice) {
    match n {
        Notice::Blocked(why) => eprintln!("rdma-trace: {why}"),
        Notice::StaleEvents(Ok(0)) => {}
        Notice::StaleEvents(Ok(n)) => {
            eprintln!("rdma-trace: removed {n} kprobe events left by runs that were killed")
        }
        Notice::StaleEvents(Err(e)) => {
            eprintln!("rdma-trace: cannot check kprobe_events for stale events: {e}")
        }
        Notice::Skipped { id, reason } => eprintln!("rdma-trace: skip {id:<13} {reason}"),
        Notice::Attach(o) => match &o.attached {
            Err(e) => {
                eprintln!("rdma-trace: skip {:<13} {} ({}): attach failed: {e}", o.id, o.symbol, o.module)
            }
            Ok(()) => {
                if let Some(note) = &o.note {
                    eprintln!("rdma-trace: note {:<13} {}: {note}", o.id, o.symbol);
                }
            }
        },
        Notice::Tracing { attached, skipped, planned, syscalls } => eprintln!(
            "rdma-trace: tracing ({attached} probes attached, {skipped} skipped; planned in {} ms){}",
            planned.as_millis(),
            if syscalls { ", watching syscalls" } else { "" }
        ),
        Notice::Stopped { why, still_running: Some(pid) } => {
            eprintln!("rdma-trace: stopped on {why}; the command (pid {pid}) is still running")
        }
        Notice::Stopped { why, still_running: None } => eprintln!("rdma-trace: stopped on {why}"),
    }
}

pub fn run(a: TraceArgs) -> Result<i32> {
    let opts = options(&a)?;
    let mut sinks = sinks(&a)?;
    let tracer = match Tracer::start(opts, &mut print_notice) {
        Ok(t) => t,
        Err(e) => match e.downcast_ref::<NotPrivileged>() {
            Some(NotPrivileged(msg)) => {
                eprintln!("{msg}");
                return Ok(2);
            }
            None => return Err(e),
        },
    };
    let mut kept: Vec<Event> = Vec::new();
    let finished = tracer.run(&mut print_notice, |ev| {
        if a.story {
            kept.push(ev.clone());
        }
        sinks.iter_mut().try_for_each(|s| s.event(ev))
    })?;
    for s in sinks.iter_mut() {
        s.flush()?;
    }
    eprint!("{}", finished.account.summary());
    std::io::stderr().flush().ok();
    if let Some(e) = finished.consumer_error {
        bail!("writing events failed: {e}");
    }
    if a.story {
        let steps = super::story::read_steps(a.steps.as_deref())?;
        let story = crate::pipeline::correlate::story::build(&kept, &steps);
        print!("{}", crate::output::report::text(&story, &kept, &steps));
    }
    Ok(finished.stopped.code)
}
