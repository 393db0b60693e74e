//! `rdma-trace report FILE…`, `rdma-trace diff A B` and `rdma-trace export`: the numbers,
//! two runs compared, and pictures (a Perfetto timeline, folded stacks, a flame graph).
//! Captures are read as streams; several are merged on the wall clock from their headers.

use crate::capture::{Header, Record};
use crate::cli::ReadOpts;
use crate::clock::Placement;
use crate::event::Event;
use crate::output::numbers::{self, Part, Report};
use crate::pipeline::correlate::aggregate::Aggregates;
use crate::pipeline::correlate::live::{Limits, Live};
use crate::source::capture::Reader;
use crate::steps::StepRecord;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};

/// Lists kept per process for a report: enough for exact percentiles on lab-sized runs.
const PER_LIST: usize = 100_000;

/// What reading the captures gave: the story, each capture's header and aggregates, the
/// companion's steps, and every event (only when asked for: an export needs them all).
pub struct Read {
    pub live: Live,
    pub headers: Vec<Option<Header>>,
    /// Each capture of another boot: its clock against the first's, where measured.
    pub placed: Vec<Option<crate::clock::Placed>>,
    pub aggs: Vec<Aggregates>,
    pub steps: Vec<StepRecord>,
    pub events: Vec<Event>,
}

/// One capture being read: its next timed record (an event, or a step at its end).
struct Source {
    path: PathBuf,
    reader: Reader<Box<dyn std::io::BufRead + Send>>,
    next: Option<Record>,
    /// Its times and pids onto the first capture's.
    placement: Placement,
}

fn at(r: &Record) -> Option<u64> {
    match r {
        Record::Event(e) => Some(e.ts_ns),
        Record::State(st) => Some(st.ts_ns),
        Record::Step(s) => Some(s.step.t_end_ns),
        _ => None,
    }
}

/// Reads every capture, merged on the wall clock, through one story and per-capture
/// aggregates; `keep_events` keeps the events too.
pub fn read(files: &[PathBuf], opts: ReadOpts, keep_events: bool) -> Result<Read> {
    let mut events = Vec::new();
    let mut r = read_each(files, opts, true, |_, e| {
        if keep_events {
            events.push(e.clone());
        }
    })?;
    r.events = events;
    Ok(r)
}

/// Reads every capture, merged on the wall clock, through one story (unless `story` is
/// false: a caller that builds its own, `explain`, leaves `live` empty) and per-capture
/// aggregates; each event also goes to `each`, with the index the story knows it by (its
/// place in the merged run).
pub fn read_each(
    files: &[PathBuf],
    opts: ReadOpts,
    story: bool,
    mut each: impl FnMut(usize, &Event),
) -> Result<Read> {
    if opts.follow {
        bail!(
            "--follow is for replay, story and tui: the numbers are of a capture as it stands (run again when it ends)"
        );
    }
    let limits = Limits { per_list: PER_LIST, ..Limits::default() };
    let mut out = Read {
        live: Live::new(Vec::new(), limits),
        headers: vec![None; files.len()],
        placed: vec![None; files.len()],
        aggs: vec![Aggregates::default(); files.len()],
        steps: Vec::new(),
        events: Vec::new(),
    };
    let mut sources = Vec::new();
    let mut placed_events = 0;
    for f in files {
        let input = crate::source::capture::open(f)
            .map_err(|e| crate::cli::BadInput(format!("opening {}: {e}", f.display())))?;
        sources.push(Source {
            path: f.clone(),
            reader: Reader::new(input, opts.strict),
            next: None,
            placement: Placement::default(),
        });
    }
    loop {
        for (i, s) in sources.iter_mut().enumerate() {
            fill(i, s, &mut out).with_context(|| files[i].display().to_string())?;
        }
        let first = &out.headers[0];
        for (i, s) in sources.iter_mut().enumerate().skip(1) {
            if let (Some(h0), Some(h)) = (first, &out.headers[i]) {
                s.placement = Placement::of(i, h0, h);
                out.placed[i].clone_from(&s.placement.placed);
            }
        }
        let next = sources
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.next.as_ref().and_then(at).map(|t| (s.placement.time(t), i)))
            .min();
        let Some((_, i)) = next else { break };
        let s = &mut sources[i];
        match s.next.take() {
            Some(Record::Event(mut e)) => {
                s.placement.event(std::sync::Arc::make_mut(&mut e));
                out.aggs[i].event(&e);
                let index = if story { out.live.push(std::sync::Arc::clone(&e)) } else { placed_events };
                placed_events += 1;
                each(index, &e);
            }
            // A late joiner's capture (`trace --connect -o`) begins with what existed when
            // it joined: the story starts from it, placed like the capture's events.
            Some(Record::State(mut st)) => {
                s.placement.state(&mut st);
                if story {
                    out.live.seed(&st);
                }
            }
            Some(Record::Step(st)) => {
                let mut step = st.step;
                out.aggs[i].steps += 1;
                s.placement.step(&mut step);
                if story {
                    out.live.add_steps(vec![step.clone()]);
                }
                out.steps.push(step);
            }
            _ => {}
        }
    }
    for (f, s) in files.iter().zip(&sources) {
        for n in s.reader.report.notes() {
            eprintln!("rdma-trace: {}: {n}", f.display());
        }
    }
    Ok(out)
}

/// Reads `s` until its next timed record (the untimed ones are taken in on the way).
fn fill(i: usize, s: &mut Source, out: &mut Read) -> Result<()> {
    while s.next.is_none() {
        let Some(r) = s.reader.next() else { return Ok(()) };
        match r.with_context(|| format!("reading {}", s.path.display()))? {
            Record::Header(h) => out.headers[i] = Some(*h),
            Record::Stats(st) => out.aggs[i].stats(&st),
            Record::Loss(l) => out.aggs[i].loss(&l),
            Record::Trailer(t) => out.aggs[i].trailer(&t),
            r => s.next = Some(r),
        }
    }
    Ok(())
}

/// The report of `files` (merged).
pub fn build(files: &[PathBuf], opts: ReadOpts) -> Result<Report> {
    let r = read(files, opts, false)?;
    let (story, _, steps) = r.live.finish();
    let parts: Vec<Part> = files
        .iter()
        .zip(r.headers.iter().zip(&r.aggs).zip(&r.placed))
        .map(|(f, ((h, a), placed))| Part {
            file: name(f),
            header: h.as_ref(),
            agg: a,
            placed: placed.as_ref(),
            other_boot: h.as_ref().zip(r.headers[0].as_ref()).is_some_and(|(h, h0)| h.boot_id != h0.boot_id),
        })
        .collect();
    Ok(numbers::build(&story, &steps, &parts))
}

fn name(f: &Path) -> String {
    f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| f.display().to_string())
}

pub fn report(files: &[PathBuf], json: bool, opts: ReadOpts) -> Result<i32> {
    if files.is_empty() {
        bail!("no capture given");
    }
    let r = build(files, opts)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", numbers::text(&r));
    }
    Ok(0)
}

/// `diff A B`: exit 1 when a `--fail-on` threshold is broken.
pub fn diff(a: &Path, b: &Path, fail_on: &[String], json: bool, opts: ReadOpts) -> Result<i32> {
    let thresholds = fail_on
        .iter()
        .map(|t| t.parse::<crate::output::diff::Threshold>())
        .collect::<Result<Vec<_>, String>>()
        .map_err(|e| crate::cli::BadInput(format!("--fail-on: {e}")))?;
    let (ra, rb) = (build(&[a.to_path_buf()], opts)?, build(&[b.to_path_buf()], opts)?);
    let d = crate::output::diff::diff(&ra, &rb, &thresholds).map_err(crate::cli::BadInput)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&d)?);
    } else {
        println!("A = {}\nB = {}\n", a.display(), b.display());
        print!("{}", crate::output::diff::text(&d));
    }
    Ok(if d.failed.is_empty() { 0 } else { 1 })
}

/// A file written (stdout is not named).
fn done(path: &Path) {
    if path != Path::new("-") {
        eprintln!("rdma-trace: wrote {}", path.display());
    }
}

/// `export`: each picture asked for, written to its file.
pub fn export(
    files: &[PathBuf],
    perfetto: Option<&Path>,
    folded: Option<&Path>,
    flamegraph: Option<&Path>,
    opts: ReadOpts,
) -> Result<i32> {
    if perfetto.is_none() && folded.is_none() && flamegraph.is_none() {
        crate::bad_input!("say what to export: --perfetto OUT.json, --folded OUT, --flamegraph OUT.svg");
    }
    // Built as the captures are read: no event is kept (a capture of hundreds of MB).
    let mut timeline = perfetto.map(|_| crate::output::perfetto::Timeline::default());
    let mut stacks = (folded.is_some() || flamegraph.is_some()).then(crate::output::flame::Folded::default);
    let r = read_each(files, opts, true, |i, e| {
        if let Some(t) = &mut timeline {
            t.event(i, e);
        }
        if let Some(s) = &mut stacks {
            s.event(e);
        }
    })?;
    // `-` is stdout, as everywhere.
    let open = |path: &Path| -> Result<Box<dyn std::io::Write>> {
        if path == Path::new("-") {
            return Ok(Box::new(std::io::BufWriter::new(std::io::stdout().lock())));
        }
        let f = std::fs::File::create(path).with_context(|| format!("writing {}", path.display()))?;
        Ok(Box::new(std::io::BufWriter::new(f)))
    };
    let write = |path: &Path, text: &str| -> Result<()> {
        let mut w = open(path)?;
        w.write_all(text.as_bytes())
            .and_then(|()| w.flush())
            .with_context(|| format!("writing {}", path.display()))?;
        done(path);
        Ok(())
    };
    if let (Some(p), Some(timeline)) = (perfetto, timeline) {
        let (story, _, _) = r.live.finish();
        let first = r.headers[0].as_ref().map(|h| h.boot_id.clone());
        let hosts: Vec<_> = r
            .headers
            .iter()
            .zip(&r.placed)
            .map(|(h, placed)| crate::output::perfetto::Host {
                name: h.as_ref().map(|h| h.hostname.clone()).unwrap_or_default(),
                placed: placed.clone(),
                other_boot: h.as_ref().is_some_and(|h| Some(&h.boot_id) != first.as_ref()),
            })
            .collect();
        if timeline.let_go > 0 {
            eprintln!(
                "rdma-trace: {} calls were still open {} deep on their thread and were let go: drawn without their end (in otherData.open_calls_let_go)",
                timeline.let_go,
                crate::output::perfetto::MAX_OPEN
            );
        }
        let mut w = open(p)?;
        timeline.write(&story, &hosts, &mut w).with_context(|| format!("writing {}", p.display()))?;
        done(p);
    }
    let stacks = stacks.map(|s| s.text()).unwrap_or_default();
    if let Some(p) = folded {
        write(p, &stacks)?;
    }
    if let Some(p) = flamegraph {
        let names: Vec<String> = files.iter().map(|f| name(f)).collect();
        let title = format!("kernel stacks per path: {}", names.join(", "));
        write(p, &crate::output::flame::svg(&stacks, &title))?;
    }
    Ok(0)
}
