//! `rdma-trace trace`: runs the tracer, prints its notices and the run's summary, and the
//! joined story at the end when asked.

use crate::capture::{Loss, Stats, Trailer};
use crate::cli::TraceArgs;
use crate::event::Event;
use crate::live::kprobe_events::MAX_INSTANCES;
use crate::live::trace::{Finished, StopPhase, TraceOptions, Tracer};
use crate::output::fanout::{FanOut, OnError};
use crate::output::queued::{QUEUE, Queued};
use crate::output::target::{Rotation, parse_size};
use crate::output::{jsonl::Jsonl, text::Text};
use crate::pipeline::correlate::engine::{Engine, Limits, StorySink};
use crate::pipeline::redact::Redactor;
use crate::sink::Sink;
use anyhow::{Context, Result, bail};
use std::io::Write;
use std::time::Duration;

fn options(a: &TraceArgs) -> Result<TraceOptions> {
    if !a.ring_kib.is_power_of_two() || a.ring_kib < 4 {
        crate::bad_input!("--ring-kib must be a power of two ≥ 4 (got {})", a.ring_kib);
    }
    if !(1..=MAX_INSTANCES).contains(&a.kretprobe_instances) {
        crate::bad_input!(
            "--kretprobe-instances must be 1..={MAX_INSTANCES} (got {})",
            a.kretprobe_instances
        );
    }
    rotation(a.max_size.as_deref(), a.rotate)?;
    if a.max_size.is_some() && a.output.as_deref().is_none_or(|o| o == std::path::Path::new("-")) {
        crate::bad_input!("--max-size needs -o FILE");
    }
    let unknown: Vec<&str> =
        a.probes.iter().map(String::as_str).filter(|p| crate::plan::catalog::by_name(p).is_none()).collect();
    if !unknown.is_empty() {
        let ids: Vec<&str> = crate::plan::catalog::CATALOG.iter().map(|s| s.id.as_str()).collect();
        crate::bad_input!("unknown probe id {} (the ids are: {})", unknown.join(", "), ids.join(", "));
    }
    // A pid that is not running would be watched for nothing, and the run say nothing.
    let gone: Vec<String> = a
        .pids
        .iter()
        .filter(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
        .map(u32::to_string)
        .collect();
    if !gone.is_empty() {
        crate::bad_input!("--pid {}: no such process", gone.join(", "));
    }
    Ok(TraceOptions {
        probes: a.probes.clone(),
        pids: a.pids.clone(),
        command: a.command.clone(),
        duration: a.duration.map(Duration::from_secs_f64),
        ring_bytes: a.ring_kib * 1024,
        return_instances: a.kretprobe_instances,
        stack_ids: a.stack_ids,
        watch_verbs_users: false,
        counted: false,
        command_log: None,
        run_as: crate::live::spawn::RunAs::choose(a.user.as_deref())
            .map_err(|e| crate::cli::BadInput(format!("{e:#}")))?,
    })
}

/// The capture header, saying whether addresses were redacted.
fn header(a: &TraceArgs, tracer: &Tracer) -> crate::capture::Header {
    crate::capture::Header { redacted: a.redact, ..tracer.header() }
}

/// `--max-size`/`--rotate`: when a capture file moves on to the next (`trace -o` and
/// `daemon -o` alike).
pub fn rotation(max_size: Option<&str>, rotate: Option<u32>) -> Result<Option<Rotation>> {
    match (max_size, rotate) {
        (None, None) => Ok(None),
        (None, Some(_)) => crate::bad_input!("--rotate needs --max-size"),
        (Some(size), keep) => {
            let max_bytes = parse_size(size).map_err(|e| crate::cli::BadInput(format!("--max-size: {e}")))?;
            if keep == Some(0) {
                crate::bad_input!("--rotate must keep at least one file");
            }
            Ok(Some(Rotation { max_bytes, keep }))
        }
    }
}

/// The text stream, the capture and, with `--story`, the story (bounded, kept current as
/// events arrive). Opened only once the tracer has started (privileges checked, probes
/// attached): a refused run truncates no file.
struct Outputs {
    /// The text stream and the capture, each on its own thread behind a bounded queue: a
    /// slow terminal or disk never holds the ring reader up (what one misses is counted).
    /// Either failing stops the run.
    fan: FanOut,
    story: Option<StorySink>,
    /// `--redact`: kernel addresses replaced before any output sees the event.
    redact: Option<Redactor>,
}

impl Outputs {
    fn open(a: &TraceArgs, tracer: &Tracer) -> Result<Self> {
        let mut fan = FanOut::default();
        let to_stdout = a.output.as_deref() == Some(std::path::Path::new("-"));
        if !a.quiet && !to_stdout {
            let mut t = Text::new(std::io::stdout());
            t.stacks = a.stacks;
            fan.push(Queued::new("text", Box::new(t), QUEUE), OnError::Stop);
        }
        match &a.output {
            Some(_) if to_stdout => {
                let mut w = Jsonl::new(std::io::BufWriter::new(std::io::stdout()));
                w.header(&header(a, tracer))?;
                fan.push(Queued::new("capture", Box::new(w), QUEUE), OnError::Stop);
            }
            Some(p) => {
                let mut w = Jsonl::create(p, rotation(a.max_size.as_deref(), a.rotate)?)
                    .with_context(|| format!("creating {}", p.display()))?;
                w.header(&header(a, tracer))?;
                fan.push(Queued::new("capture", Box::new(w), QUEUE), OnError::Stop);
            }
            None => {}
        }
        // The companion's step file is read at the end (it is written during the run).
        let story = a.story.then(|| StorySink(Engine::new(Vec::new(), Limits::default())));
        Ok(Self { fan, story, redact: a.redact.then(Redactor::default) })
    }
}

impl Sink for Outputs {
    fn event(&mut self, ev: &std::sync::Arc<Event>) -> std::io::Result<()> {
        let redacted;
        let ev = match &mut self.redact {
            Some(r) => {
                let mut e = Event::clone(ev);
                r.event(&mut e);
                redacted = std::sync::Arc::new(e);
                &redacted
            }
            None => ev,
        };
        if let Some(s) = &mut self.story {
            s.event(ev)?;
        }
        self.fan.event(ev)
    }
    fn step(&mut self, s: &crate::steps::StepRecord) -> std::io::Result<()> {
        if let Some(story) = &mut self.story {
            story.step(s)?;
        }
        self.fan.step(s)
    }
    fn stats(&mut self, s: &Stats) -> std::io::Result<()> {
        self.fan.stats(s)
    }
    fn loss(&mut self, l: &Loss) -> std::io::Result<()> {
        self.fan.loss(l)
    }
    fn trailer(&mut self, t: &Trailer) -> std::io::Result<()> {
        self.fan.trailer(t)
    }
    fn tick(&mut self) -> std::io::Result<()> {
        self.fan.tick()
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.fan.flush()
    }
}

/// The trailer of a finished run.
pub(super) fn trailer(f: &Finished) -> Trailer {
    let a = &f.account;
    Trailer {
        ts_ns: f.ended_ns,
        stopped: f.stopped.why.clone(),
        exit_code: f.stopped.code,
        delivered: a.delivered(),
        lost: a.lost(),
        sites: a.counts(),
        ..Default::default()
    }
}

/// `rdma-trace trace`: returns the exit status (a traced command's own).
pub fn run(a: TraceArgs) -> Result<i32> {
    if !a.connect.is_empty() {
        return super::connected::run(&a);
    }
    let opts = options(&a)?;
    let Some(tracer) = super::start::tracer(opts)? else { return Ok(2) };
    let mut out = Outputs::open(&a, &tracer)?;
    let mut finished = tracer.run(&mut super::start::print_notice, &mut out)?;
    let t = std::time::Instant::now();
    let queued: u64 = out.fan.queued().map(|q| q.backlog()).sum();
    // After a failed write only the summary is still worth trying for.
    let closed = match &finished.consumer_error {
        None => out.trailer(&trailer(&finished)).and_then(|()| out.flush()),
        Some(_) => Ok(()),
    };
    finished.stopping.push(StopPhase::of("writing the outputs", t.elapsed(), queued));
    // The trailer is written: what the outputs left out joins the account shown.
    for q in out.fan.queued() {
        finished.account.note_left_out(q.name(), &q.left_out_rows);
    }
    eprint!("{}", finished.account.summary());
    for l in out.fan.left_out_lines() {
        eprintln!("rdma-trace: {l}");
    }
    // A stop that took over a second says where the time went.
    if let Some(l) = crate::live::trace::stopping_line(&finished.stopping, std::time::Duration::from_secs(1))
    {
        eprintln!("rdma-trace: {l}");
    }
    std::io::stderr().flush().ok();
    if let Some(e) = finished.consumer_error {
        bail!("{e}; the run was stopped (what was written before is readable)");
    }
    closed?;
    if let Some(StorySink(mut live)) = out.story {
        live.add_steps(super::story::read_steps(a.steps.as_deref())?);
        let (story, kept, steps) = live.finish();
        print!("{}", crate::output::story::text(&story, &kept, &steps));
    }
    Ok(finished.stopped.code)
}

/// `__detach-after-exit`: the helper of a stopped run (`live/detach.rs`). Exits 0, or 1 if
/// some return probe's event could not be removed (a later run removes it).
pub fn detach_after_exit(wait_fd: i32, events_file: Option<&std::path::Path>, events: &[String]) -> i32 {
    i32::from(crate::live::detach::helper(wait_fd, events_file, events) > 0)
}
