use anyhow::Context;
use clap::Parser;
use rdma_trace::cli::{Cli, Cmd};
use rdma_trace::sink::{Sink, jsonl::Jsonl, text::Text};
use std::time::Duration;

fn run() -> anyhow::Result<i32> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Trace(a) => {
            if !a.ring_kib.is_power_of_two() || a.ring_kib < 4 {
                anyhow::bail!("--ring-kib must be a power of two ≥ 4 (got {})", a.ring_kib);
            }
            let mut sinks: Vec<Box<dyn Sink + Send>> = Vec::new();
            if !a.quiet {
                let mut t = Text::new(std::io::stdout());
                t.stacks = a.stacks;
                sinks.push(Box::new(t));
            }
            if let Some(p) = &a.output {
                let f = std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
                sinks.push(Box::new(Jsonl::new(std::io::BufWriter::new(f))));
            }
            rdma_trace::trace::run(rdma_trace::trace::TraceOptions {
                probes: a.probes,
                pids: a.pids,
                command: a.command,
                duration: a.duration.map(Duration::from_secs_f64),
                ring_bytes: a.ring_kib * 1024,
                sinks,
                story: a.story.then_some(a.steps),
            })
        }
        Cmd::Probes { no_attach } => rdma_trace::probes_cmd::run(!no_attach),
        Cmd::Story { capture, steps, json } => {
            let text = std::fs::read_to_string(&capture)
                .with_context(|| format!("reading {}", capture.display()))?;
            let events = rdma_trace::event::parse_jsonl(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", capture.display()))?;
            let steps = read_steps(steps.as_deref())?;
            let story = rdma_trace::correlate::story::build(&events, &steps);
            if json {
                println!("{}", serde_json::to_string_pretty(&story)?);
            } else {
                print!("{}", rdma_trace::report::text(&story, &events, &steps));
            }
            Ok(0)
        }
        Cmd::Replay { file, stacks } => {
            let text =
                std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            let events = rdma_trace::event::parse_jsonl(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            let mut t = Text::new(std::io::stdout().lock());
            t.stacks = stacks;
            for ev in &events {
                t.event(ev)?;
            }
            t.flush()?;
            Ok(0)
        }
    }
}

fn read_steps(
    path: Option<&std::path::Path>,
) -> anyhow::Result<Vec<rdma_trace::workload::record::StepRecord>> {
    path.map(rdma_trace::correlate::story::read_steps)
        .transpose()
        .map(Option::unwrap_or_default)
        .map_err(anyhow::Error::msg)
}

fn main() {
    match run() {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("rdma-trace: error: {e:#}");
            std::process::exit(1);
        }
    }
}
