//! `rdma-trace explain TOPIC [FILE] [-- CMD …]`: one real occurrence of a path explained,
//! from a capture or from a command traced here.

use crate::capture::Header;
use crate::cli::{ExplainArgs, ReadOpts};
use crate::event::Event;
use crate::explain::Explanation;
use crate::explain::lessons::Topic;
use crate::explain::{self, Input, RunCounts};
use crate::sink::Sink;
use crate::steps::StepRecord;
use anyhow::{Result, bail};

/// The events (the first `max_events`), steps and header of a run (the first's, of several
/// captures merged), and each capture's host.
struct Run {
    events: Vec<Event>,
    /// Every event the run had, kept or not.
    seen: u64,
    counts: RunCounts,
    steps: Vec<StepRecord>,
    header: Option<Header>,
    hosts: Vec<String>,
    clock_error_ns: Option<u64>,
}

/// Keeps the first `max` events of a run, and counts them all (`fork`'s counts too).
struct Prefix {
    events: Vec<Event>,
    seen: u64,
    max: u64,
    counts: RunCounts,
}

impl Prefix {
    fn new(max: u64) -> Self {
        Prefix { events: Vec::new(), seen: 0, max, counts: RunCounts::default() }
    }

    fn push(&mut self, e: &Event) {
        self.seen += 1;
        self.counts.add(e);
        if self.seen <= self.max {
            self.events.push(e.clone());
        }
    }

    /// The steps that began while events were still kept (all of them when all were).
    fn steps(&self, mut steps: Vec<StepRecord>) -> Vec<StepRecord> {
        if self.seen > self.max {
            let last = self.events.last().map_or(0, |e| e.ts_ns);
            steps.retain(|s| s.t_start_ns <= last);
        }
        steps
    }
}

/// Keeps a live run in memory, its first `max` events.
struct Collect(Prefix, Vec<StepRecord>);

impl Sink for Collect {
    fn event(&mut self, ev: &std::sync::Arc<Event>) -> std::io::Result<()> {
        self.0.push(ev);
        Ok(())
    }
    fn step(&mut self, s: &StepRecord) -> std::io::Result<()> {
        self.1.push(s.clone());
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn from_files(a: &ExplainArgs) -> Result<Run> {
    read_captures(&a.files, a.steps.as_deref(), a.max_events)
}

/// The captures' events (merged on one clock; the first `max`), the steps their markers
/// (or `steps`) recorded, the first's header and each one's host. Only the kept events
/// are held, and the story is built from them alone (`run`), not also while reading.
fn read_captures(files: &[std::path::PathBuf], steps: Option<&std::path::Path>, max: u64) -> Result<Run> {
    let opts = ReadOpts { strict: false, follow: false };
    let mut kept = Prefix::new(max);
    let r = super::report::read_each(files, opts, false, |_, e| kept.push(e))?;
    let hosts =
        r.headers.iter().map(|h| h.as_ref().map(|h| h.hostname.clone()).unwrap_or_default()).collect();
    let clock_error_ns = r.placed.iter().flatten().map(|p| p.error_ns).max();
    let header = r.headers.into_iter().next().flatten();
    let mut all_steps = r.steps;
    all_steps.extend(super::story::read_steps(steps)?);
    let steps = kept.steps(all_steps);
    Ok(Run {
        events: kept.events,
        seen: kept.seen,
        counts: kept.counts,
        steps,
        header,
        hosts,
        clock_error_ns,
    })
}

fn live(a: &ExplainArgs) -> Result<Option<Run>> {
    let opts = crate::live::trace::TraceOptions {
        probes: Vec::new(),
        pids: Vec::new(),
        command: a.command.clone(),
        duration: None,
        ring_bytes: 4 << 20,
        return_instances: crate::live::kprobe_events::DEFAULT_INSTANCES,
        stack_ids: false,
        watch_verbs_users: false,
        counted: false,
        command_log: None,
        run_as: crate::live::spawn::RunAs::choose(None)?,
    };
    let Some(tracer) = super::start::tracer(opts)? else { return Ok(None) };
    let header = tracer.header();
    let mut sink = Collect(Prefix::new(a.max_events), Vec::new());
    let finished = tracer.run(&mut super::start::print_notice, &mut sink)?;
    eprint!("{}", finished.account.summary());
    let steps = sink.0.steps(sink.1);
    Ok(Some(Run {
        events: sink.0.events,
        seen: sink.0.seen,
        counts: sink.0.counts,
        steps,
        header: Some(header),
        hosts: Vec::new(),
        clock_error_ns: None,
    }))
}

/// `rdma-trace explain`: returns the exit status.
pub fn run(a: ExplainArgs) -> Result<i32> {
    let run = match (a.files.is_empty(), a.command.is_empty()) {
        (false, true) => from_files(&a)?,
        (true, false) => match live(&a)? {
            Some(r) => r,
            None => return Ok(2),
        },
        (false, false) => bail!("give a capture or a command, not both"),
        (true, true) => {
            bail!("give a capture (rdma-trace explain {} FILE) or a command after --", a.topic.as_str())
        }
    };
    let mut steps = run.steps;
    let mut seen = std::collections::HashSet::new();
    steps.retain(|s| seen.insert((s.process(), s.run, s.step)));
    let story = crate::pipeline::correlate::engine::build(&run.events, &steps);
    let calls = crate::pipeline::correlate::calls::Pairs::of(&run.events);
    let input = Input {
        events: &run.events,
        calls: &calls,
        story: &story,
        steps: &steps,
        header: run.header.as_ref(),
        anchor: None,
        hosts: &run.hosts,
        clock_error_ns: run.clock_error_ns,
        run_counts: Some(run.counts),
    };
    let mut x: Explanation = explain::explain(a.topic, &input).map_err(anyhow::Error::msg)?;
    let kept = run.events.len() as u64;
    if run.seen > kept {
        let said = format!(
            "explained from the run's first {} events of {} (--max-events {}): the occurrence is the first, and the counts other than fork's are of those events",
            kept, run.seen, a.max_events
        );
        eprintln!("rdma-trace: {said}");
        x.notes.push(("What was read".into(), format!("This is {said}.")));
        x.values.insert("events_kept".into(), kept);
        x.values.insert("events_in_run".into(), run.seen);
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&x)?);
    } else {
        print!("{}", explain::text(&x));
    }
    Ok(0)
}

/// Every topic's explanation of one run, for the guides (a topic the run cannot show is
/// left out with its reason).
pub fn all(
    events: &[Event],
    steps: &[StepRecord],
    header: Option<&Header>,
) -> Vec<(Topic, Result<Explanation, crate::explain::Missing>)> {
    let story = crate::pipeline::correlate::engine::build(events, steps);
    let calls = crate::pipeline::correlate::calls::Pairs::of(events);
    let input = Input {
        events,
        calls: &calls,
        story: &story,
        steps,
        header,
        anchor: None,
        hosts: &[],
        clock_error_ns: None,
        run_counts: None,
    };
    Topic::ALL.iter().map(|t| (*t, explain::explain(*t, &input))).collect()
}

/// The guides (docs/guides/) from the lab captures in `dir`: for each kernel series,
/// `<series>-companion.jsonl[.zst]` and `<series>-memlock.jsonl[.zst]` (`cargo xtask guides`
/// puts them there), in the order of their kernels.
pub fn guides(dir: &std::path::Path) -> Result<Vec<crate::explain::guide::Guide>> {
    use crate::explain::guide::KernelRun;
    let mut runs = Vec::new();
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains("-companion.jsonl"))
        .collect();
    names.sort();
    for name in names {
        let run = read_captures(&[dir.join(&name)], None, u64::MAX)?;
        let Some(header) = run.header.clone() else {
            bail!("{name}: no v1 header (the kernel is not named)")
        };
        let memlock_name = name.replace("-companion.", "-memlock.");
        // The refused-pin capture may be absent (its section is then left out), never broken.
        let memlock = if dir.join(&memlock_name).exists() {
            let m = read_captures(&[dir.join(&memlock_name)], None, u64::MAX)?;
            let x = all(&m.events, &m.steps, m.header.as_ref()).into_iter().find(|(t, _)| *t == Topic::Mr);
            x.map(|(_, x)| (memlock_name, x))
        } else {
            None
        };
        let companion = (name, all(&run.events, &run.steps, Some(&header)));
        runs.push(KernelRun { kernel: header.kernel_release, companion, memlock });
    }
    runs.sort_by_key(|r| {
        r.kernel.split(['.', '-', '+']).take(3).map(|p| p.parse::<u32>().unwrap_or(0)).collect::<Vec<_>>()
    });
    if runs.is_empty() {
        bail!("{}: no <series>-companion.jsonl captures", dir.display());
    }
    Ok(crate::explain::guide::guides(&runs))
}
