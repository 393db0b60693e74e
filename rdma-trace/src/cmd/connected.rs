//! `trace --connect`: a daemon's stream (a socket here, `ssh://` on another host, a
//! capture file, `-`) shown as if traced here; several on one clock, each line led by its
//! host.

use crate::capture::Record;
use crate::cli::TraceArgs;
use crate::output::text::Text;
use crate::pipeline::correlate::engine::{Engine, Limits, StorySink};
use crate::serve::client::Source;
use crate::sink::Sink;
use anyhow::{Context, Result, bail};
use std::io::Write;
use std::path::{Path, PathBuf};

/// `trace --connect SOURCE`: a daemon's stream shown as if traced here; with -o, kept
/// byte for byte as the daemon sent it. Several sources: `several`.
pub(crate) fn run(a: &TraceArgs) -> Result<i32> {
    if a.max_size.is_some() {
        bail!("--max-size does not apply to --connect (the daemon's stream is kept as it comes)");
    }
    match a.connect.as_slice() {
        [one] => one_source(a, one),
        many => several(a, many),
    }
}

fn one_source(a: &TraceArgs, socket: &Path) -> Result<i32> {
    let source = crate::serve::client::Source::parse(socket).map_err(anyhow::Error::msg)?;
    let input = match source.open_redacted(crate::serve::Want::Both, a.redact) {
        Ok(i) => i,
        Err(why) => {
            eprintln!("rdma-trace: {why}");
            return Ok(2);
        }
    };
    let mut reader = crate::source::capture::Reader::new(kept_as_sent(a, input)?, false);
    let mut text = (!a.quiet && a.output.is_none()).then(|| {
        let mut t = Text::new(std::io::stdout());
        t.stacks = a.stacks;
        t
    });
    let mut story = a.story.then(|| StorySink(Engine::new(Vec::new(), Limits::default())));
    let mut stopped = None;
    let mut note = StateNote::default();
    let deadline = deadline(a);
    for r in reader.by_ref() {
        let r = r.with_context(|| socket.display().to_string())?;
        match &r {
            crate::capture::Record::State(st) => note.add(st),
            _ => note.say(),
        }
        stopped = show(socket, r, text.as_mut(), story.as_mut())?.or(stopped);
        // A daemon sends its stats every 800 ms: a stream never goes quiet for long.
        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            stopped =
                Some(format!("left the daemon's stream after --duration {}", a.duration.unwrap_or(0.0)));
            break;
        }
    }
    note.say();
    if let Some(t) = &mut text {
        t.flush()?;
    }
    for n in reader.report.notes() {
        eprintln!("rdma-trace: {}: {n}", socket.display());
    }
    eprintln!(
        "rdma-trace: {}",
        stopped.as_deref().unwrap_or("the daemon's stream ended without its trailer")
    );
    if let Some(StorySink(live)) = story {
        let (st, kept, steps) = live.finish();
        print!("{}", crate::output::story::text(&st, &kept, &steps));
    }
    Ok(0)
}

/// When `--duration` ends reading (none without it).
fn deadline(a: &TraceArgs) -> Option<std::time::Instant> {
    a.duration.map(|d| std::time::Instant::now() + std::time::Duration::from_secs_f64(d))
}

/// What the daemon's `state` records said, in one line per process: the state a joiner
/// gets first (in pieces of at most `STATE_PIECE_ROWS` rows), and what a later reading of
/// the kernel's tables added for everyone.
#[derive(Default)]
struct StateNote {
    /// Per process: comm, MRs, bytes pinned, mappings.
    processes: std::collections::BTreeMap<crate::event::Task, (String, usize, u64, usize)>,
    qps: usize,
    paired: usize,
    cqs: usize,
    pending: bool,
    /// The joiner's state was said: a later one is what the tables added.
    joined: bool,
}

impl StateNote {
    fn add(&mut self, st: &crate::capture::State) {
        for p in &st.processes {
            let who = crate::event::Task::new(p.host, p.pid);
            let e = self.processes.entry(who).or_insert_with(|| (p.comm.clone(), 0, 0, 0));
            e.1 += p.mrs.len();
            e.2 += p.pinned_bytes;
            e.3 += p.mappings.len();
        }
        self.qps += st.qps.len();
        self.paired += st.qps.iter().filter(|q| q.dest_qpn.is_some()).count();
        self.cqs += st.cqs.len();
        self.pending = true;
    }

    fn say(&mut self) {
        if !std::mem::take(&mut self.pending) {
            return;
        }
        let when = if self.joined { "the kernel's tables added" } else { "when joined" };
        for (pid, (comm, mrs, pinned, maps)) in std::mem::take(&mut self.processes) {
            eprintln!(
                "rdma-trace: {when}: {} [{pid}] {mrs} MRs pinning {pinned} bytes, {maps} uverbs mappings",
                crate::pipeline::render::printable(&comm),
            );
        }
        if self.qps + self.cqs > 0 {
            eprintln!(
                "rdma-trace: {when}: {} QPs ({} told their peer), {} CQs",
                self.qps, self.paired, self.cqs
            );
        }
        (self.qps, self.paired, self.cqs) = (0, 0, 0);
        self.joined = true;
    }
}

/// With -o, the daemon's bytes go to the file (or stdout) as they are read.
fn kept_as_sent(
    a: &TraceArgs,
    input: Box<dyn std::io::BufRead + Send>,
) -> Result<Box<dyn std::io::BufRead + Send>> {
    use crate::serve::client::Tee;
    Ok(match &a.output {
        Some(p) if p == std::path::Path::new("-") => {
            Box::new(std::io::BufReader::new(Tee::new(input, std::io::stdout())))
        }
        Some(p) => {
            let file = crate::output::target::CaptureFile::create(p, None)
                .with_context(|| format!("creating {}", p.display()))?;
            Box::new(std::io::BufReader::new(Tee::new(input, file)))
        }
        None => input,
    })
}

/// One record of a daemon's stream shown (what joining said on stderr, the rest to the
/// text stream and the story); a trailer's account is returned.
fn show(
    socket: &Path,
    r: crate::capture::Record,
    text: Option<&mut Text<std::io::Stdout>>,
    story: Option<&mut StorySink>,
) -> Result<Option<String>> {
    use crate::capture::Record;
    let mut stopped = None;
    match &r {
        Record::Header(h) => {
            eprintln!("rdma-trace: connected to {} ({}, {})", socket.display(), h.hostname, h.kernel_release)
        }
        Record::Trailer(t) => {
            stopped = Some(format!(
                "the daemon stopped on {}: {} events delivered, {} lost",
                t.stopped, t.delivered, t.lost
            ));
        }
        _ => {}
    }
    if let Some(t) = text {
        t.record(r.clone())?;
    }
    if let Some(s) = story {
        s.record(r)?;
    }
    Ok(stopped)
}

/// Several sources as one stream: each read on its own thread and placed on the first's
/// clock and pids (`pipeline::merge::Merge`, as `tui` does); each event's line is led by its host's
/// name and shows that host's own pid. Lines come in time order: a record waits until
/// every source has reached its time (`Merge::settled`: each source's latest stats tick,
/// a second apart on a daemon) by the story's reorder window, or has ended: the stream
/// runs about two seconds behind the hosts.
fn several(a: &TraceArgs, sources: &[PathBuf]) -> Result<i32> {
    use crate::pipeline::merge::Merge;
    use crate::serve::merge::{Tagged, spawn};
    if a.output.is_some() || a.story {
        bail!(
            "-o and --story take one source: keep each host's stream (`trace --connect SOURCE -o FILE`, \
             one per host); `report`, `export` and `tui --connect` merge the files on one clock"
        );
    }
    let (tx, rx) = std::sync::mpsc::channel();
    for (i, spec) in sources.iter().enumerate() {
        let source = Source::parse(spec).map_err(anyhow::Error::msg)?;
        match source.open_redacted(crate::serve::Want::Both, a.redact) {
            Ok(input) => spawn(i, crate::source::capture::Reader::new(input, false), tx.clone()),
            Err(why) => {
                eprintln!("rdma-trace: {why}");
                return Ok(2);
            }
        }
    }
    drop(tx);
    let mut merge = Merge::new(sources.len());
    let mut ended: Vec<Option<String>> = vec![None; sources.len()];
    let mut waiting = Waiting::default();
    let mut out = std::io::stdout().lock();
    let look = Look { quiet: a.quiet, stacks: a.stacks };
    let deadline = deadline(a);
    loop {
        let t = match deadline {
            None => match rx.recv() {
                Ok(t) => t,
                Err(_) => break,
            },
            Some(d) => match rx.recv_timeout(d.saturating_duration_since(std::time::Instant::now())) {
                Ok(t) => t,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    let left = format!("left its stream after --duration {}", a.duration.unwrap_or(0.0));
                    ended.iter_mut().for_each(|e| _ = e.get_or_insert(left.clone()));
                    break;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            },
        };
        match t {
            Tagged::Record(i, r) => {
                for (j, r) in merge.take(i, r) {
                    if let Record::Trailer(t) = &r {
                        merge.ended(j);
                        ended[j] = Some(format!(
                            "the daemon stopped on {}: {} events delivered, {} lost",
                            t.stopped, t.delivered, t.lost
                        ));
                    }
                    match time_of(&r) {
                        Some(ts) => waiting.push(ts, j, r),
                        None => shown_from(&merge, j, r, &mut out, look)?,
                    }
                }
            }
            Tagged::Ended(i, why) => {
                merge.ended(i);
                ended[i].get_or_insert(format!("the stream ended without its trailer ({why})"));
            }
        }
        // Events read after a stats tick may be older than it (the ring is read in
        // batches): held as long as the story's reorder window.
        let due = merge.settled().map(|t| t.saturating_sub(Limits::default().reorder_ns));
        for (j, r) in waiting.until(due) {
            shown_from(&merge, j, r, &mut out, look)?;
        }
    }
    for (j, r) in waiting.until(Some(u64::MAX)) {
        shown_from(&merge, j, r, &mut out, look)?;
    }
    out.flush()?;
    for (spec, why) in sources.iter().zip(ended) {
        eprintln!("rdma-trace: {}: {}", spec.display(), why.unwrap_or_else(|| "no stream".into()));
    }
    Ok(0)
}

#[derive(Clone, Copy)]
struct Look {
    quiet: bool,
    stacks: bool,
}

/// When a record happened, for those shown in time order.
fn time_of(r: &Record) -> Option<u64> {
    match r {
        Record::Event(e) => Some(e.ts_ns),
        Record::Step(s) => Some(s.step.t_end_ns),
        Record::Loss(l) => Some(l.ts_ns),
        _ => None,
    }
}

/// Placed records held until every source has reached their time: oldest first, and in
/// arrival order among equals.
#[derive(Default)]
struct Waiting {
    heap: std::collections::BinaryHeap<std::cmp::Reverse<(u64, u64)>>,
    records: std::collections::HashMap<u64, (usize, Record)>,
    next: u64,
}

impl Waiting {
    fn push(&mut self, ts: u64, j: usize, r: Record) {
        self.heap.push(std::cmp::Reverse((ts, self.next)));
        self.records.insert(self.next, (j, r));
        self.next += 1;
    }

    /// What is due by `settled` (nothing before every source has said how far it reached).
    fn until(&mut self, settled: Option<u64>) -> Vec<(usize, Record)> {
        let Some(t) = settled else { return Vec::new() };
        let mut due = Vec::new();
        while let Some(std::cmp::Reverse((ts, n))) = self.heap.peek().copied()
            && ts <= t
        {
            self.heap.pop();
            due.extend(self.records.remove(&n));
        }
        due
    }
}

/// One placed record of source `j`, its lines led by its host.
fn shown_from(
    merge: &crate::pipeline::merge::Merge,
    j: usize,
    r: Record,
    out: &mut impl Write,
    look: Look,
) -> Result<()> {
    let Look { quiet, stacks } = look;
    let host = merge.headers[j].as_ref().map_or("?", |h| h.hostname.as_str());
    match r {
        Record::Header(h) => {
            let clock = match merge.placements[j].as_ref().and_then(|p| p.placed.as_ref()) {
                Some(c) => format!(
                    ", its clock {} from the first's",
                    crate::clock::offset_text(c.offset_ns, c.error_ns)
                ),
                None if j > 0 && merge.placements[j].as_ref().is_some_and(|p| p.other_boot) => {
                    ", its clock not measured (placed on its own wall clock)".into()
                }
                None => String::new(),
            };
            eprintln!("rdma-trace: source {}: {} ({}){clock}", j + 1, h.hostname, h.kernel_release);
        }
        Record::Event(e) if !quiet => {
            writeln!(out, "{host:<12} {}", crate::output::text::line(&e))?;
            if stacks && e.kind == crate::event::EventKind::Entry {
                for f in &e.stack {
                    writeln!(out, "{:>29}{f}", "")?;
                }
            }
        }
        Record::Step(s) if !quiet => {
            writeln!(out, "{host:<12} {}", crate::output::text::step_line(&s.step))?;
        }
        Record::Loss(l) => {
            writeln!(out, "{host:<12} {}", crate::output::text::loss_line(&l))?;
        }
        _ => {}
    }
    Ok(())
}
