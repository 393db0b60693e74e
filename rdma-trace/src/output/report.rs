//! `rdma-trace report`: the numbers of one or more captures in one place, as text or as
//! JSON (schema in docs/report.md). Built from the story (processes, wakeups, data-phase
//! syscalls, companion steps) and the per-path aggregates fed beside it.

use crate::capture::{Header, LossSite, SiteCount};
use crate::event::Path;
use crate::pipeline::correlate::aggregate::{Aggregates, Dist, PathNumbers};
use crate::pipeline::correlate::story::{BUCKETS_NS, Story};
use crate::steps::StepRecord;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;

/// The JSON schema's version (docs/report.md).
pub(crate) const SCHEMA: u32 = 1;
/// Stacks shown per path.
pub(crate) const TOP_STACKS: usize = 5;

/// `rdma-trace report` (docs/report.md): per capture, per path, per process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema: u32,
    pub captures: Vec<CaptureInfo>,
    /// `pin`, `mmap`, `completion`, `teardown`.
    pub paths: BTreeMap<String, PathReport>,
    /// Completion event → the channel read that woke the program.
    pub wakeup: Latency,
    pub processes: Vec<ProcessReport>,
    /// Each QP seen, its peer, and its completions joined to posts (`connections`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub qps: Vec<crate::output::connections::QpReport>,
    /// Every CQ a completion was seen on (absent in reports written before).
    #[serde(default)]
    pub cqs: Vec<CqReport>,
    /// Every MR the story keeps: pinned, refused, ODP, dma-buf, or from the kernel's tables.
    #[serde(default)]
    pub mrs: Vec<MrReport>,
    pub data_phase: DataPhase,
}

/// A CQ: its owner, its completions, and its hops (nearest rank over the newest 1 024).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CqReport {
    pub hostname: String,
    /// The user handle its completions carry (`ibv_create_cq`'s result).
    pub handle: u64,
    /// Its owner, when known (the process that created it).
    pub pid: Option<u32>,
    pub comm: String,
    pub completions: u64,
    /// The fd of the completion channel its events are read from, where it was seen.
    #[serde(default)]
    pub channel_fd: Option<i32>,
    pub handler_p50_ns: Option<u64>,
    pub handler_p99_ns: Option<u64>,
    pub wakeup_p50_ns: Option<u64>,
    pub wakeup_p99_ns: Option<u64>,
    /// How many wakeups the two above are of.
    pub wakeup_samples: u64,
}

/// An MR: what it is, its range, pages and keys, and how it stands at the end.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MrReport {
    pub hostname: String,
    pub pid: u32,
    pub comm: String,
    /// `pinned`, `ODP`, `dma-buf fd N`, `dma-buf fd N, pinned`.
    pub kind: String,
    pub addr: u64,
    pub length: u64,
    pub pages: Option<u64>,
    pub lkey: Option<u64>,
    pub rkey: Option<u64>,
    /// `live` (registered at the end), `deregistered`, or `refused` (the pin failed).
    pub state: String,
    /// The errno of a refused pin (12: ENOMEM).
    pub refused_errno: Option<i64>,
    /// Known from the kernel's tables (a daemon's state), not from its pin.
    pub from_tables: bool,
}

/// What a capture says of itself: its header, trailer and loss account.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CaptureInfo {
    pub file: String,
    /// Capture format version (0: no header, no trailer, no account of loss).
    pub version: u32,
    pub hostname: String,
    pub kernel_release: String,
    pub boot_id: String,
    /// From the trailer: why the run stopped (absent: cut short).
    pub stopped: Option<String>,
    /// Records the run delivered (its trailer's count, else its last stats'): events and
    /// companion steps.
    pub delivered: u64,
    /// Of what was read: event records and step records.
    #[serde(default)]
    pub events: u64,
    #[serde(default)]
    pub steps: u64,
    /// Lost on the way into this capture: by the ring and the probes (the trailer's
    /// account) and `left_out`.
    pub lost: u64,
    /// Of `lost`: records the capture's writer (or, for a daemon's stream, the daemon)
    /// left out because it fell behind: its loss records (site `output …`, `subscriber`).
    #[serde(default)]
    pub left_out: u64,
    /// Per probe site: hits, delivered, lost by reason (the trailer's, else the last stats).
    pub sites: Vec<SiteCount>,
    /// Loss records in the stream, by `site: reason`.
    pub loss_records: BTreeMap<String, u64>,
    /// Another boot's capture: how its clock was placed against the first capture's
    /// (measured NTP-style by `daemon --clock-peer`); absent for the first capture, one of
    /// its boot, or one placed on its own wall clock (`clock_measured` false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<crate::clock::Placed>,
    /// False for another boot's capture placed on its wall clock as it stands.
    #[serde(default = "yes", skip_serializing_if = "Clone::clone")]
    pub clock_measured: bool,
}

fn yes() -> bool {
    true
}

/// One path (pin, mmap, completion, …) across a capture.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PathReport {
    /// Entry events of the path's kernel probes.
    pub events: u64,
    pub by_probe: BTreeMap<String, u64>,
    /// Time in the path's main function (`latency.of`).
    pub latency: Latency,
    pub top_stacks: Vec<Stack>,
    /// Every distinct stack (by function) with how often: what `diff` compares.
    pub stacks: Vec<Stack>,
    /// Pin path: pages pinned over the run (the umem function's count).
    pub pages: Option<u64>,
}

/// A latency distribution: quantiles and a histogram.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// What is timed.
    pub of: String,
    pub count: u64,
    pub mean_ns: Option<u64>,
    pub p50_ns: Option<u64>,
    pub p90_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    pub max_ns: Option<u64>,
    /// Counts per bucket (`le_ns`: upper bound; absent for the last, unbounded one).
    pub histogram: Vec<Bucket>,
}

/// One bucket of a latency histogram.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    pub le_ns: Option<u64>,
    pub count: u64,
}

/// A kernel stack by function, innermost first, and how often it was seen.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stack {
    pub count: u64,
    /// Innermost frame first.
    pub frames: Vec<String>,
}

/// One process of the report: what it pinned, mapped and completed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessReport {
    pub pid: u32,
    pub hostname: String,
    pub comm: String,
    /// The cgroup its events ran in (absent in captures without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    pub pins: u64,
    pub refused_pins: u64,
    pub pinned_peak_bytes: u64,
    /// RLIMIT_MEMLOCK; absent when unknown or unlimited (`memlock_unlimited`).
    pub memlock_limit_bytes: Option<u64>,
    pub memlock_unlimited: bool,
    pub completions: u64,
    pub wakeup_p50_ns: Option<u64>,
    pub wakeup_p99_ns: Option<u64>,
    /// MRs registered (`mrs_live` still registered at the end), bytes still pinned at the
    /// end, uverbs mappings made (absent in reports written before).
    #[serde(default)]
    pub mrs: u64,
    #[serde(default)]
    pub mrs_live: u64,
    #[serde(default)]
    pub pinned_bytes: u64,
    #[serde(default)]
    pub mappings: u64,
}

/// A process's data phase: from its first post to its last completion.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DataPhase {
    /// Syscalls between the end of set-up and the start of teardown, by `name[fd kind]`,
    /// over every process.
    pub syscalls: BTreeMap<String, u64>,
    pub total: u64,
    pub completion_events: u64,
    pub per_completion_event: Option<f64>,
    /// Work requests the companion posted (its post_send/post_write/post_recv steps), when
    /// the captures carry its steps.
    pub work_requests: Option<u64>,
    pub per_work_request: Option<f64>,
}

/// One capture's part: its header and what was fed from it.
pub struct Part<'a> {
    pub file: String,
    pub header: Option<&'a Header>,
    pub agg: &'a Aggregates,
    /// Another boot's capture: its clock against the first capture's, where measured.
    pub placed: Option<&'a crate::clock::Placed>,
    /// Of another boot than the first capture's.
    pub other_boot: bool,
}

fn latency(of: &str, d: &Dist) -> Latency {
    let h = &d.histogram;
    let histogram = (0..h.counts.len())
        .map(|i| Bucket { le_ns: BUCKETS_NS.get(i).copied(), count: h.counts[i] })
        .collect();
    Latency {
        of: of.into(),
        count: d.count,
        mean_ns: (d.count > 0).then(|| d.sum_ns / d.count),
        p50_ns: d.quantile(0.5),
        p90_ns: d.quantile(0.9),
        p99_ns: d.quantile(0.99),
        max_ns: (d.count > 0).then_some(d.max_ns),
        histogram,
    }
}

/// The function timed for each path (see `aggregate::timed`).
fn timed_name(p: Path) -> &'static str {
    match p {
        Path::Pin => "umem_get (pinning the pages)",
        Path::Mmap => "uverbs_mmap (the mmap dispatch)",
        Path::Completion => "comp_handler (the completion handler)",
        Path::Teardown => "umem_release (unpinning)",
        _ => "",
    }
}

fn capture(p: &Part) -> CaptureInfo {
    let h = p.header;
    let t = p.agg.trailer.as_ref();
    let left_out: u64 = p
        .agg
        .loss_records
        .iter()
        .filter(|((site, _), _)| matches!(site, LossSite::Output(_) | LossSite::Subscriber))
        .map(|(_, n)| n)
        .sum();
    CaptureInfo {
        file: p.file.clone(),
        version: if h.is_some() { crate::capture::VERSION } else { 0 },
        hostname: h.map(|h| h.hostname.clone()).unwrap_or_default(),
        kernel_release: h.map(|h| h.kernel_release.clone()).unwrap_or_default(),
        boot_id: h.map(|h| h.boot_id.clone()).unwrap_or_default(),
        stopped: t.map(|t| t.stopped.clone()),
        delivered: t.map(|t| t.delivered).unwrap_or_else(|| p.agg.sites.iter().map(|s| s.delivered).sum()),
        events: p.agg.events,
        steps: p.agg.steps,
        lost: left_out
            + t.map(|t| t.lost).unwrap_or_else(|| p.agg.sites.iter().flat_map(|s| s.lost.values()).sum()),
        left_out,
        sites: p.agg.sites.clone(),
        loss_records: p.agg.loss_records.iter().map(|((s, r), n)| (format!("{s}: {r}"), *n)).collect(),
        clock: p.placed.cloned(),
        clock_measured: p.placed.is_some() || !p.other_boot,
    }
}

/// The report of a story, its companion steps and its captures' parts.
pub fn build(story: &Story, steps: &[StepRecord], parts: &[Part]) -> Report {
    let mut paths: BTreeMap<Path, PathNumbers> = BTreeMap::new();
    for p in parts {
        for (path, n) in &p.agg.paths {
            paths.entry(*path).or_default().merge(n);
        }
    }
    let paths = paths
        .iter()
        .map(|(path, n)| {
            let mut stacks: Vec<(&Vec<String>, &u64)> = n.stacks.iter().collect();
            stacks.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
            let all: Vec<Stack> =
                stacks.into_iter().map(|(f, c)| Stack { count: *c, frames: f.clone() }).collect();
            let r = PathReport {
                events: n.count,
                by_probe: n.by_probe.clone(),
                latency: latency(timed_name(*path), &n.latency),
                top_stacks: all.iter().take(TOP_STACKS).cloned().collect(),
                stacks: all,
                pages: (*path == Path::Pin).then_some(n.pages),
            };
            (path.as_str().to_string(), r)
        })
        .collect();
    let mut wake = Dist::default();
    for ps in story.processes.values() {
        ps.wakeup_latencies_ns.iter().for_each(|&l| wake.observe(l));
    }
    let host = |i: u16| {
        parts.get(usize::from(i)).and_then(|p| p.header).map(|h| h.hostname.clone()).unwrap_or_default()
    };
    let processes = story
        .processes
        .values()
        .filter(|ps| ps.mrs_total() + ps.failed_pins_total + ps.completions_total + ps.mappings_total > 0)
        .map(|ps| {
            let mut w = Dist::default();
            ps.wakeup_latencies_ns.iter().for_each(|&l| w.observe(l));
            ProcessReport {
                pid: ps.pid.pid,
                hostname: host(ps.pid.host),
                comm: ps.comm.clone(),
                cgroup: ps.cgroup.as_deref().map(str::to_string),
                pins: ps.pins_total,
                refused_pins: ps.failed_pins_total,
                pinned_peak_bytes: ps.pinned_peak_bytes,
                memlock_limit_bytes: ps.memlock_limit.filter(|&l| l != u64::MAX),
                memlock_unlimited: ps.memlock_limit == Some(u64::MAX),
                completions: ps.completions_total,
                wakeup_p50_ns: w.quantile(0.5),
                wakeup_p99_ns: w.quantile(0.99),
                mrs: ps.mrs_total(),
                mrs_live: ps.mrs_live,
                pinned_bytes: ps.pinned_bytes,
                mappings: ps.mappings_total,
            }
        })
        .collect();
    let cqs = story
        .cqs
        .values()
        .map(|c| CqReport {
            hostname: host(c.host),
            handle: c.handle,
            pid: c.pid.map(|p| p.pid),
            comm: c.pid.map(|p| story.comm(p)).unwrap_or_default(),
            completions: c.completions,
            channel_fd: c.channel_fd,
            handler_p50_ns: c.handler_ns.quantile(0.5),
            handler_p99_ns: c.handler_ns.quantile(0.99),
            wakeup_p50_ns: c.wakeup_ns.quantile(0.5),
            wakeup_p99_ns: c.wakeup_ns.quantile(0.99),
            wakeup_samples: c.wakeup_ns.0.len() as u64,
        })
        .collect();
    let mrs = story
        .processes
        .values()
        .flat_map(|ps| ps.mrs.iter().map(move |m| (ps, m)))
        .map(|(ps, m)| MrReport {
            hostname: host(ps.pid.host),
            pid: ps.pid.pid,
            comm: ps.comm.clone(),
            kind: m.kind.brief(),
            addr: m.addr,
            length: m.length,
            pages: m.pages,
            lkey: m.lkey,
            rkey: m.rkey,
            state: m.state().into(),
            refused_errno: m.refused,
            from_tables: m.from_tables(),
        })
        .collect();
    Report {
        schema: SCHEMA,
        captures: parts.iter().map(capture).collect(),
        paths,
        wakeup: latency("completion event → the channel read that woke the program", &wake),
        processes,
        qps: crate::output::connections::build(&story.qps, &host),
        cqs,
        mrs,
        data_phase: data_phase(story, steps),
    }
}

fn data_phase(story: &Story, steps: &[StepRecord]) -> DataPhase {
    let mut syscalls: BTreeMap<String, u64> = BTreeMap::new();
    for ps in story.processes.values() {
        for (k, v) in &ps.data_phase_syscalls {
            *syscalls.entry(k.clone()).or_default() += v;
        }
    }
    let total: u64 = syscalls.values().sum();
    let completion_events: u64 = story.processes.values().map(|p| p.completions_total).sum();
    let posts: Vec<&StepRecord> = steps.iter().filter(|s| crate::steps::is_work_request(s.name)).collect();
    let wr = posts.len() as u64;
    let work_requests = (wr > 0).then_some(wr);
    // Per work request: the syscalls of the processes that posted them, not every process's.
    let posters: std::collections::BTreeSet<crate::event::Task> = posts.iter().map(|s| s.process()).collect();
    let theirs: u64 = story
        .processes
        .values()
        .filter(|p| posters.contains(&p.pid))
        .map(|p| p.data_phase_syscalls.values().sum::<u64>())
        .sum();
    DataPhase {
        syscalls,
        total,
        completion_events,
        per_completion_event: (completion_events > 0).then(|| total as f64 / completion_events as f64),
        work_requests,
        per_work_request: work_requests.map(|n| theirs as f64 / n as f64),
    }
}

fn ns(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), crate::units::duration)
}

use crate::units::bytes_approx as bytes;

/// The report as text.
pub fn text(r: &Report) -> String {
    let mut out = String::new();
    write_text(&mut out, r).expect("formatting into a String cannot fail");
    out
}

fn write_text(out: &mut String, r: &Report) -> std::fmt::Result {
    text_captures(out, r)?;
    text_paths(out, r)?;
    text_stacks(out, r)?;
    text_processes(out, r)?;
    crate::output::connections::text(out, &r.qps, r.captures.len() > 1)?;
    text_data_phase(out, r)?;
    text_loss(out, r)
}

/// "851 events and 72 steps read": what the story was told (a daemon's stream may begin
/// after its run did, so this can be less than what the run delivered).
fn read_words(c: &CaptureInfo) -> String {
    let events = crate::units::count(c.events, "event");
    if c.steps == 0 {
        format!("{events} read")
    } else {
        format!("{events} and {} read", crate::units::count(c.steps, "step"))
    }
}

/// Each capture: where, which kernel, how much came and how it ended.
fn text_captures(out: &mut String, r: &Report) -> std::fmt::Result {
    for c in r.captures.iter().filter(|c| c.version == 0) {
        writeln!(
            out,
            "capture {}: format v0 (no header, no trailer: no account of loss), {}",
            c.file,
            read_words(c)
        )?;
    }
    for c in r.captures.iter().filter(|c| c.version > 0) {
        writeln!(
            out,
            "capture {}: {} ({}), {} ({} delivered), {} lost{}, {}",
            c.file,
            if c.hostname.is_empty() { "?" } else { &c.hostname },
            c.kernel_release,
            read_words(c),
            crate::units::count(c.delivered, "record"),
            c.lost,
            if c.left_out > 0 {
                format!(" ({} left out by a writer that fell behind)", c.left_out)
            } else {
                String::new()
            },
            c.stopped
                .as_deref()
                .map(|s| format!("stopped on {s}"))
                .unwrap_or("cut short (no trailer)".into())
        )?;
        let first = r.captures.first().map_or("?", |c| c.hostname.as_str());
        if let Some(p) = &c.clock {
            writeln!(
                out,
                "  its clock is {} from {first}'s (measured by {}), and its events are placed by it",
                crate::clock::offset_text(p.offset_ns, p.error_ns),
                p.measured_by
            )?;
        } else if !c.clock_measured {
            writeln!(
                out,
                "  its clock against {first}'s was not measured: its events are placed on its own wall clock (daemon --clock-peer measures it)"
            )?;
        }
    }
    Ok(())
}

/// Per path: counts and the latency of its main function, then histograms.
fn text_paths(out: &mut String, r: &Report) -> std::fmt::Result {
    writeln!(
        out,
        "\n{:<11} {:>7}  {:>10} {:>10} {:>10} {:>10}  timed",
        "path", "events", "p50", "p90", "p99", "max"
    )?;
    let row = |out: &mut String, name: &str, events: u64, l: &Latency| {
        writeln!(
            out,
            "{name:<11} {events:>7}  {:>10} {:>10} {:>10} {:>10}  {} ×{}",
            ns(l.p50_ns),
            ns(l.p90_ns),
            ns(l.p99_ns),
            ns(l.max_ns),
            l.of,
            l.count
        )
    };
    for (name, p) in &r.paths {
        row(out, name, p.events, &p.latency)?;
    }
    row(out, "wakeup", r.wakeup.count, &r.wakeup)?;
    for (name, p) in &r.paths {
        let each: Vec<String> = p.by_probe.iter().map(|(k, v)| format!("{k} {v}")).collect();
        writeln!(out, "  {name}: {}", each.join(", "))?;
    }
    for (name, l) in r.paths.iter().map(|(n, p)| (n.as_str(), &p.latency)).chain([("wakeup", &r.wakeup)]) {
        histogram(out, name, l)?;
    }
    Ok(())
}

/// The most frequent kernel stacks per path.
fn text_stacks(out: &mut String, r: &Report) -> std::fmt::Result {
    writeln!(out, "\ntop kernel stacks (innermost frame first)")?;
    for (name, p) in r.paths.iter().filter(|(_, p)| !p.top_stacks.is_empty()) {
        writeln!(out, "  {name}:")?;
        for s in &p.top_stacks {
            let frames: Vec<&str> = s.frames.iter().take(6).map(String::as_str).collect();
            let more = s.frames.len().saturating_sub(6);
            let more = if more > 0 { format!(" ← … {more} more") } else { String::new() };
            writeln!(out, "    {:>6}×  {}{more}", s.count, frames.join(" ← "))?;
        }
    }
    Ok(())
}

/// Per process: pins, refusals, the peak pinned against memlock, completions.
fn text_processes(out: &mut String, r: &Report) -> std::fmt::Result {
    writeln!(out, "\nprocesses")?;
    writeln!(
        out,
        "  {:<24} {:>5} {:>7} {:>12} {:>12} {:>6} {:>10}",
        "pid comm", "pins", "refused", "pinned peak", "memlock", "compl", "wake p50"
    )?;
    for p in &r.processes {
        let memlock = match (p.memlock_unlimited, p.memlock_limit_bytes) {
            (true, _) => "unlimited".to_string(),
            (false, Some(l)) => bytes(l),
            (false, None) => "?".into(),
        };
        let who = format!("{} {}", p.pid, crate::pipeline::render::printable(&p.comm));
        let who = if r.captures.len() > 1 { format!("{who} @{}", p.hostname) } else { who };
        let who = match p.cgroup.as_deref().and_then(crate::event::container_of) {
            Some(c) => format!("{who} [container {}]", &c[..12]),
            None => who,
        };
        writeln!(
            out,
            "  {who:<24} {:>5} {:>7} {:>12} {memlock:>12} {:>6} {:>10}",
            p.pins,
            p.refused_pins,
            bytes(p.pinned_peak_bytes),
            p.completions,
            ns(p.wakeup_p50_ns)
        )?;
    }
    Ok(())
}

/// The data phase's syscalls, per completion event and per work request.
fn text_data_phase(out: &mut String, r: &Report) -> std::fmt::Result {
    let d = &r.data_phase;
    writeln!(out, "\ndata phase: {} syscalls", d.total)?;
    for (k, v) in &d.syscalls {
        writeln!(out, "  {v:>7}  {k}")?;
    }
    if let Some(x) = d.per_completion_event {
        writeln!(out, "  {x:.2} per completion event ({} events)", d.completion_events)?;
    }
    if let (Some(x), Some(n)) = (d.per_work_request, d.work_requests) {
        writeln!(out, "  {x:.2} per work request ({n} posted by the companion)")?;
    }
    Ok(())
}

/// Loss, as each capture accounts for it.
fn text_loss(out: &mut String, r: &Report) -> std::fmt::Result {
    writeln!(out, "\nloss, as each capture accounts for it")?;
    for c in &r.captures {
        if c.version == 0 {
            writeln!(out, "  {}: no account (format v0)", c.file)?;
            continue;
        }
        let lossy: Vec<&SiteCount> = c.sites.iter().filter(|s| !s.lost.is_empty()).collect();
        // The total the first line says, less what the rows and the outputs name: a capture
        // written before every loss had a row (a program's skipped runs) says it only there.
        let named: u64 = c.sites.iter().flat_map(|s| s.lost.values()).sum();
        let unnamed = c.lost.saturating_sub(named + c.left_out);
        if lossy.is_empty() && c.loss_records.is_empty() && unnamed == 0 {
            writeln!(out, "  {}: none ({} sites, every hit delivered)", c.file, c.sites.len())?;
        }
        if unnamed > 0 {
            writeln!(
                out,
                "  {}: {unnamed} lost that no row of the capture names (its trailer's total)",
                c.file
            )?;
        }
        for s in lossy {
            let why: Vec<String> = s.lost.iter().map(|(k, v)| format!("{v} {k}")).collect();
            writeln!(
                out,
                "  {}: {}: {} hits, {} delivered, lost {}",
                c.file,
                s.site,
                s.hits,
                s.delivered,
                why.join(", ")
            )?;
        }
        for (k, v) in &c.loss_records {
            writeln!(out, "  {}: loss record {k}: {v}", c.file)?;
        }
    }
    Ok(())
}

/// A path's histogram as bars (only buckets up to the last non-empty one).
fn histogram(out: &mut String, name: &str, l: &Latency) -> std::fmt::Result {
    let last = l.histogram.iter().rposition(|b| b.count > 0);
    let Some(last) = last else { return Ok(()) };
    let first = l.histogram.iter().position(|b| b.count > 0).unwrap_or(0);
    let most = l.histogram.iter().map(|b| b.count).max().unwrap_or(1).max(1);
    writeln!(out, "\n{name}: {}", l.of)?;
    for b in &l.histogram[first..=last] {
        let le = b.le_ns.map(|n| format!("≤ {}", ns(Some(n)))).unwrap_or("> 1 s".into());
        let bar = "█".repeat(((b.count * 40).div_ceil(most)) as usize);
        writeln!(out, "  {le:>12} {:>7} {bar}", b.count)?;
    }
    Ok(())
}
