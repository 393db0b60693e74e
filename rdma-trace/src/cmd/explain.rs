//! `rdma-trace explain TOPIC [FILE] [-- CMD …]`: one real occurrence of a path explained,
//! from a capture or from a command traced here.

use crate::capture::Header;
use crate::cli::{ExplainArgs, ReadOpts};
use crate::event::Event;
use crate::output::explain::Explanation;
use crate::output::explain::{self, Input};
use crate::plan::lessons::Topic;
use crate::sink::Sink;
use crate::steps::StepRecord;
use anyhow::{Result, bail};

/// The events, steps and header of a run (the first's, of several captures merged), and
/// each capture's host.
struct Run {
    events: Vec<Event>,
    steps: Vec<StepRecord>,
    header: Option<Header>,
    hosts: Vec<String>,
    clock_error_ns: Option<u64>,
}

/// Keeps a live run in memory.
#[derive(Default)]
struct Collect(Vec<Event>, Vec<StepRecord>);

impl Sink for Collect {
    fn event(&mut self, ev: &std::sync::Arc<Event>) -> std::io::Result<()> {
        self.0.push(Event::clone(ev));
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
    let mut run = read_captures(&a.files)?;
    run.steps.extend(super::story::read_steps(a.steps.as_deref())?);
    Ok(run)
}

/// The captures' events (merged on one clock), the steps their markers recorded, the
/// first's header and each one's host.
fn read_captures(files: &[std::path::PathBuf]) -> Result<Run> {
    let opts = ReadOpts { strict: false, follow: false };
    let r = super::report::read(files, opts, true)?;
    let hosts =
        r.headers.iter().map(|h| h.as_ref().map(|h| h.hostname.clone()).unwrap_or_default()).collect();
    let clock_error_ns = r.placed.iter().flatten().map(|p| p.error_ns).max();
    let header = r.headers.into_iter().next().flatten();
    Ok(Run { events: r.events, steps: r.steps, header, hosts, clock_error_ns })
}

fn live(a: &ExplainArgs) -> Result<Option<Run>> {
    let opts = crate::live::trace::TraceOptions {
        probes: Vec::new(),
        pids: Vec::new(),
        command: a.command.clone(),
        duration: None,
        ring_bytes: 4 << 20,
        return_instances: crate::live::kprobe_events::DEFAULT_INSTANCES,
        watch_verbs_users: false,
        command_log: None,
        run_as: crate::live::spawn::RunAs::choose(None)?,
    };
    let Some(tracer) = super::start::tracer(opts)? else { return Ok(None) };
    let header = tracer.header();
    let mut sink = Collect::default();
    let finished = tracer.run(&mut super::start::print_notice, &mut sink)?;
    eprint!("{}", finished.account.summary());
    Ok(Some(Run {
        events: sink.0,
        steps: sink.1,
        header: Some(header),
        hosts: Vec::new(),
        clock_error_ns: None,
    }))
}

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
    steps.retain(|s| seen.insert((s.pid, s.run, s.step)));
    let story = crate::pipeline::correlate::live::build(&run.events, &steps);
    let input = Input {
        events: &run.events,
        story: &story,
        steps: &steps,
        header: run.header.as_ref(),
        anchor: None,
        hosts: &run.hosts,
        clock_error_ns: run.clock_error_ns,
    };
    let x: Explanation = explain::explain(a.topic, &input).map_err(anyhow::Error::msg)?;
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
) -> Vec<(Topic, Result<Explanation, String>)> {
    let story = crate::pipeline::correlate::live::build(events, steps);
    let input =
        Input { events, story: &story, steps, header, anchor: None, hosts: &[], clock_error_ns: None };
    Topic::ALL.iter().map(|t| (*t, explain::explain(*t, &input))).collect()
}

/// The guides (docs/guides/) from the lab captures in `dir`: for each kernel series,
/// `<series>-companion.jsonl[.zst]` and `<series>-memlock.jsonl[.zst]` (`cargo xtask guides`
/// puts them there), in the order of their kernels.
pub fn guides(dir: &std::path::Path) -> Result<Vec<crate::output::explain::guide::Guide>> {
    use crate::output::explain::guide::KernelRun;
    let mut runs = Vec::new();
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains("-companion.jsonl"))
        .collect();
    names.sort();
    for name in names {
        let run = read_captures(&[dir.join(&name)])?;
        let Some(header) = run.header.clone() else {
            bail!("{name}: no v1 header (the kernel is not named)")
        };
        let memlock_name = name.replace("-companion.", "-memlock.");
        // The refused-pin capture may be absent (its section is then left out), never broken.
        let memlock = if dir.join(&memlock_name).exists() {
            let m = read_captures(&[dir.join(&memlock_name)])?;
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
    Ok(crate::output::explain::guide::guides(&runs))
}
