//! `rdma-trace report FILE…`, `rdma-trace diff A B` and `rdma-trace export`: the numbers,
//! two runs compared, and pictures (a Perfetto timeline, folded stacks, a flame graph).
//! Captures are read as streams; several are merged on the wall clock from their headers.

use crate::cli::ReadOpts;
use crate::event::Event;
use crate::output::report::{self, Part, Report};
use crate::pipeline::correlate::engine::Limits;
pub use crate::pipeline::merge::{self, Input, Read};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};

/// Lists kept per process for a report: enough for exact percentiles on lab-sized runs.
const PER_LIST: usize = 100_000;

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

/// `files` opened and merged (`pipeline::merge`): each event also goes to `each`, with
/// the index the story knows it by.
pub fn read_each(
    files: &[PathBuf],
    opts: ReadOpts,
    story: bool,
    each: impl FnMut(usize, &Event),
) -> Result<Read> {
    if opts.follow {
        bail!(
            "--follow is for replay, story and tui: the numbers are of a capture as it stands (run again when it ends)"
        );
    }
    let inputs = files
        .iter()
        .map(|f| {
            Input::file(f, opts.strict)
                .map_err(|e| crate::cli::BadInput(format!("opening {}: {e}", f.display())))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let limits = Limits { per_list: PER_LIST, ..Limits::default() };
    Ok(merge::merge(inputs, limits, story, each)?)
}

/// The report of `files` (merged).
pub fn build(files: &[PathBuf], opts: ReadOpts) -> Result<Report> {
    let r = read(files, opts, false)?;
    let (story, _, steps) = r.engine.finish();
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
    Ok(report::build(&story, &steps, &parts))
}

fn name(f: &Path) -> String {
    f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| f.display().to_string())
}

/// `rdma-trace report`: returns the exit status.
pub fn report(files: &[PathBuf], json: bool, opts: ReadOpts) -> Result<i32> {
    if files.is_empty() {
        bail!("no capture given");
    }
    let r = build(files, opts)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", report::text(&r));
    }
    Ok(0)
}

/// `diff A B`: exit 1 when a `--fail-on` threshold is broken.
pub fn diff(a: &Path, b: &Path, fail_on: &[String], json: bool, opts: ReadOpts) -> Result<i32> {
    let thresholds = fail_on
        .iter()
        .map(|t| t.parse::<crate::output::diff::Threshold>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| crate::cli::BadInput(format!("--fail-on: {e}")))?;
    let (ra, rb) = (build(&[a.to_path_buf()], opts)?, build(&[b.to_path_buf()], opts)?);
    let d =
        crate::output::diff::diff(&ra, &rb, &thresholds).map_err(|e| crate::cli::BadInput(e.to_string()))?;
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
        let (story, _, _) = r.engine.finish();
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
        if timeline.let_go() > 0 {
            eprintln!(
                "rdma-trace: {} calls were still open {} deep on their thread and were let go: drawn without their end (in otherData.open_calls_let_go)",
                timeline.let_go(),
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
