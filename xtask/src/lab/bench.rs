//! `cargo xtask bench`: what watching costs, in the lab, one boot per kernel. The guest
//! (`guest/bench.sh`) runs each workload beside each way of watching it, in interleaved
//! rounds, and writes one JSON line per figure; here they become medians, spreads and
//! ratios to the workload alone, printed, kept as JSON and written into
//! docs/performance.md (the part between that kernel's markers). Not part of the gate.

use super::{Mode, Series};
use crate::util::{self, step};
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fs;
use std::time::Duration;

const BENCH_SH: &str = include_str!("guest/bench.sh");

/// The configurations in the order the tables show them (guest/bench.sh says what each is).
pub const CONFIGS: [&str; 9] = [
    "none",
    "bt-agg",
    "bt-stream",
    "bt-stream-u",
    "rt-kernel",
    "rt-stack-ids",
    "rt-default",
    "rt-cmd",
    "rt-metrics",
];

/// rdma-trace's configurations, each with the bpftrace configurations doing the same work.
const AGAINST: [(&str, &str); 5] = [
    ("rt-kernel", "bt-stream"),
    ("rt-stack-ids", "bt-stream"),
    ("rt-kernel", "bt-agg"),
    ("rt-default", "bt-stream-u"),
    ("rt-metrics", "bt-agg"),
];

#[derive(clap::Args, Default)]
pub struct BenchArgs {
    /// Kernel series (repeatable) [default: all].
    #[arg(long, value_enum, value_name = "SERIES")]
    pub kernel: Vec<Series>,
    /// Rounds: each runs every configuration once, in another order.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Timeout of each boot, in seconds.
    #[arg(long, default_value_t = 3600)]
    pub timeout: u64,
    /// Make the tables again from the last run's results (no boot).
    #[arg(long)]
    pub last_run: bool,
    /// The userspace pipeline alone, on this machine (no boot): stage by stage, and
    /// `replay`, `story`, `report` at each of `--sizes` events.
    #[arg(long)]
    pub host: bool,
    /// With `--host`: measure this revision's build too, side by side with the working
    /// tree's, every figure in the same rounds (built once in target/bench/against).
    #[arg(long, value_name = "REV", requires = "host")]
    pub against: Option<String>,
    /// Only these configurations (guest/bench.sh names them) [default: all].
    #[arg(long, value_delimiter = ',', value_name = "CONFIG", conflicts_with = "host")]
    pub configs: Vec<String>,
    /// Rounds of the `dd bs=1` flood [default: --rounds].
    #[arg(long, value_name = "N", conflicts_with = "host")]
    pub flood_rounds: Option<u32>,
    /// Event counts for `--host`.
    #[arg(long, value_delimiter = ',', default_values_t = [100_000u64, 1_000_000, 10_000_000])]
    pub sizes: Vec<u64>,
}

/// One workload's figure under one configuration, every round.
#[derive(Default, Debug)]
struct Cell {
    values: Vec<f64>,
    unit: String,
}

/// One configuration's own figures, every round.
#[derive(Default, Debug)]
struct Own {
    attach_ms: Vec<f64>,
    stop_ms: Vec<f64>,
    cpu_ms: Vec<f64>,
    events: Vec<u64>,
    lost: u64,
    bpf_runs: u64,
    bpf_ns: u64,
    /// Bytes the programs wrote to the ring, and the events, over the rounds that said.
    ring_bytes: u64,
    ring_events: u64,
    /// The links the run held (rdma-trace's summary), the most any round said.
    links: u64,
    /// The tracer's own split of each stop (the flood's rounds).
    splits: Vec<String>,
}

/// What one kernel's run measured.
#[derive(Default, Debug)]
pub struct Results {
    cells: BTreeMap<(String, String), Cell>,
    own: BTreeMap<String, Own>,
    workloads: Vec<String>,
    rounds: u32,
}

/// The median (nearest rank, as rdma-trace's own quantile) of `v`.
fn median(v: &[f64]) -> Option<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = (s.len() as f64 * 0.5).ceil().max(1.0) as usize;
    s.get(rank.min(s.len()).checked_sub(1)?).copied()
}

fn spread(v: &[f64]) -> (f64, f64) {
    v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| (lo.min(*x), hi.max(*x)))
}

impl Results {
    /// Reads the guest's `results.jsonl`; a line that is not a figure is an error naming it.
    pub fn parse(text: &str) -> Result<Results> {
        let mut r = Results::default();
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let v: Value = serde_json::from_str(line).with_context(|| format!("results line {}", i + 1))?;
            let cfg = v["config"].as_str().with_context(|| format!("results line {}: no config", i + 1))?;
            let round = v["round"].as_u64().unwrap_or(0) as u32;
            r.rounds = r.rounds.max(round);
            if let Some(w) = v["workload"].as_str() {
                if !r.workloads.iter().any(|x| x == w) {
                    r.workloads.push(w.to_string());
                }
                let c = r.cells.entry((w.to_string(), cfg.to_string())).or_default();
                let value = v["value"].as_f64().unwrap_or(0.0);
                // A workload that failed wrote 0: it has no figure this round.
                if value > 0.0 {
                    c.values.push(value);
                }
                c.unit = v["unit"].as_str().unwrap_or("").to_string();
                continue;
            }
            let o = r.own.entry(cfg.to_string()).or_default();
            let num = |k: &str| v[k].as_f64().unwrap_or(0.0);
            o.attach_ms.push(num("attach_ms"));
            o.stop_ms.push(num("stop_ms"));
            o.cpu_ms.push(num("cpu_ms"));
            o.events.push(v["events"].as_u64().unwrap_or(0));
            o.lost += v["lost"].as_u64().unwrap_or(0);
            o.bpf_runs += v["bpf_runs"].as_u64().unwrap_or(0);
            o.bpf_ns += v["bpf_ns"].as_u64().unwrap_or(0);
            o.links = o.links.max(v["links"].as_u64().unwrap_or(0));
            if let Some(s) = v["split"].as_str() {
                o.splits.push(s.to_string());
            }
            if let Some(b) = v["ring_bytes"].as_u64().filter(|b| *b > 0) {
                o.ring_bytes += b;
                o.ring_events += v["events"].as_u64().unwrap_or(0);
            }
        }
        if r.cells.is_empty() {
            bail!("the bench wrote no figures");
        }
        Ok(r)
    }

    fn median_of(&self, w: &str, cfg: &str) -> Option<f64> {
        self.cells.get(&(w.to_string(), cfg.to_string())).and_then(|c| median(&c.values))
    }

    /// The time a workload takes under `cfg`, as a multiple of its time alone.
    pub fn ratio(&self, w: &str, cfg: &str) -> Option<f64> {
        Some(self.median_of(w, cfg)? / self.median_of(w, "none")?)
    }

    /// rdma-trace's extra time over bpftrace's extra time, for the same work.
    pub fn extra(&self, w: &str, rt: &str, bt: &str) -> Option<f64> {
        let none = self.median_of(w, "none")?;
        let (a, b) = (self.median_of(w, rt)? - none, self.median_of(w, bt)? - none);
        (b > 0.0).then(|| a / b)
    }

    /// The three tables as markdown.
    pub fn markdown(&self, title: &str) -> String {
        let mut s = format!("### {title}\n\n");
        s.push_str("Time of each workload beside each configuration, as a multiple of its time alone ");
        s.push_str(
            "(median of the rounds; the workload's own figure and the spread of the rounds after it).\n\n",
        );
        s.push_str(&format!(
            "| workload | {} |\n|---|{}\n",
            CONFIGS.join(" | "),
            "---|".repeat(CONFIGS.len())
        ));
        for w in &self.workloads {
            let mut row = format!("| {w} |");
            for cfg in CONFIGS {
                let cell = self.cells.get(&(w.clone(), cfg.to_string()));
                match (cell, self.median_of(w, cfg)) {
                    (Some(c), Some(m)) => {
                        let (lo, hi) = spread(&c.values);
                        let ratio = self.ratio(w, cfg).map(|r| format!("{r:.2}× ")).unwrap_or_default();
                        row.push_str(&format!(" {ratio}({}) |", span(&c.unit, m, lo, hi)));
                    }
                    _ => row.push_str(" – |"),
                }
            }
            s.push_str(&row);
            s.push('\n');
        }
        s.push_str("\nrdma-trace's extra time over bpftrace's, for the same work (below 1: rdma-trace costs less).\n\n");
        let heads: Vec<String> = AGAINST.iter().map(|(a, b)| format!("{a} / {b}")).collect();
        s.push_str(&format!("| workload | {} |\n|---|{}\n", heads.join(" | "), "---|".repeat(AGAINST.len())));
        for w in &self.workloads {
            let cells: Vec<String> = AGAINST
                .iter()
                .map(|(a, b)| self.extra(w, a, b).map(|x| format!("{x:.2}")).unwrap_or("–".into()))
                .collect();
            s.push_str(&format!("| {w} | {} |\n", cells.join(" | ")));
        }
        s.push_str("\nEach configuration's own cost: time to attach (start to ready), `SIGINT` to exit ");
        s.push_str("(median and worst), the tracer's CPU time over all the workloads, the events it saw in ");
        s.push_str("each round, what it lost, and its BPF programs' mean cost per run by the kernel's own ");
        s.push_str("stats (`run_time_ns / run_cnt`, all its programs together), and the bytes its programs ");
        s.push_str("wrote to the ring per event and the links it held, each undone at detach (rdma-trace's own counts).\n\n");
        s.push_str("| configuration | attach | stop (median, worst) | tracer CPU | events each round | lost | BPF ns per run | ring bytes per event | links |\n");
        s.push_str("|---|---|---|---|---|---|---|---|---|\n");
        for cfg in CONFIGS.iter().filter(|c| **c != "none") {
            let Some(o) = self.own.get(*cfg) else { continue };
            let events: Vec<String> = o.events.iter().map(u64::to_string).collect();
            let per_run = (o.bpf_runs > 0).then(|| o.bpf_ns as f64 / o.bpf_runs as f64);
            let ms = |v: &[f64]| median(v).map(|m| format!("{m:.0} ms")).unwrap_or("–".into());
            // `rt-cmd` runs the workloads itself: its start and stop are not timed apart.
            let own = *cfg != "rt-cmd";
            let stop = format!("{}, {:.0} ms", ms(&o.stop_ms), spread(&o.stop_ms).1);
            let ring = (o.ring_events > 0).then(|| o.ring_bytes / o.ring_events);
            s.push_str(&format!(
                "| {cfg} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                if own { ms(&o.attach_ms) } else { "–".into() },
                if own { stop } else { "–".into() },
                if own { ms(&o.cpu_ms) } else { "–".into() },
                events.join(", "),
                o.lost,
                per_run.map(|p| format!("{p:.0} ({} runs)", o.bpf_runs)).unwrap_or("–".into()),
                ring.map(|b| b.to_string()).unwrap_or("–".into()),
                if o.links > 0 { o.links.to_string() } else { "–".into() },
            ));
        }
        if let Some(f) = self.own.get("flood") {
            s.push_str(&format!(
                "\n`SIGINT` to exit while the ring overflows (`rdma-trace trace -o FILE -- dd bs=1`, stopped \
                 5 s after it is ready): median {}, worst {:.0} ms; events each round {}, {} lost in all.\n",
                median(&f.stop_ms).map(|m| format!("{m:.0} ms")).unwrap_or("–".into()),
                spread(&f.stop_ms).1,
                f.events.iter().map(u64::to_string).collect::<Vec<_>>().join(", "),
                f.lost,
            ));
            if !f.splits.is_empty() {
                s.push_str(&format!("The tracer's own split of each stop: {}.\n", f.splits.join("; ")));
            }
        }
        s
    }

    /// The same figures as JSON, for scripts.
    pub fn json(&self) -> Value {
        let mut cells = Vec::new();
        for ((w, cfg), c) in &self.cells {
            cells.push(json!({
                "workload": w, "config": cfg, "unit": c.unit, "values": c.values,
                "median": median(&c.values), "ratio": self.ratio(w, cfg),
            }));
        }
        let own: Vec<Value> = self
            .own
            .iter()
            .map(|(cfg, o)| {
                json!({
                    "config": cfg, "attach_ms": o.attach_ms, "stop_ms": o.stop_ms, "cpu_ms": o.cpu_ms,
                    "events": o.events, "lost": o.lost, "bpf_runs": o.bpf_runs, "bpf_ns": o.bpf_ns,
                    "ring_bytes": o.ring_bytes, "links": o.links,
                })
            })
            .collect();
        json!({ "rounds": self.rounds, "cells": cells, "configs": own })
    }
}

/// A median and the spread of the rounds, in the unit that suits the median:
/// `278 µs, 245–294`.
fn span(unit: &str, median: f64, lo: f64, hi: f64) -> String {
    let to_ns = match unit {
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => 1.0,
    };
    let m = median * to_ns;
    let (div, name) = match m {
        m if m >= 1e9 => (1e9, "s"),
        m if m >= 1e6 => (1e6, "ms"),
        _ => (1e3, "µs"),
    };
    let f = |v: f64| {
        let v = v * to_ns / div;
        if v >= 100.0 { format!("{v:.0}") } else { format!("{v:.1}") }
    };
    format!("{} {name}, {}–{}", f(median), f(lo), f(hi))
}

/// Replaces (or appends) the part of `doc` between `<!-- bench:NAME -->` and
/// `<!-- /bench:NAME -->`.
pub fn splice(doc: &str, name: &str, body: &str) -> String {
    let (open, close) = (format!("<!-- bench:{name} -->"), format!("<!-- /bench:{name} -->"));
    let block = format!("{open}\n{body}{close}");
    match (doc.find(&open), doc.find(&close)) {
        (Some(a), Some(b)) if b > a => format!("{}{block}{}", &doc[..a], &doc[b + close.len()..]),
        _ => format!("{}\n{block}\n", doc.trim_end()),
    }
}

pub fn bench(a: BenchArgs) -> Result<()> {
    let series = if a.kernel.is_empty() { Series::ALL.to_vec() } else { a.kernel.clone() };
    if a.last_run {
        for s in series {
            let kver = fs::read_to_string(super::out_dir(s).join("bench/kernel")).unwrap_or_default();
            write_tables(s, kver.trim())?;
        }
        return Ok(());
    }
    let bin = super::vmtest::build()?;
    super::share_binary(&bin, "rdma-trace")?;
    super::share_binary(&bin.with_file_name("rdma-trace-workload"), "rdma-trace-workload")?;
    let guests = super::prepare(&series)?;
    for g in &guests {
        let mut env = format!("BENCH_ROUNDS={}\n", a.rounds);
        if !a.configs.is_empty() {
            env.push_str(&format!("BENCH_CONFIGS='{}'\n", a.configs.join(" ")));
        }
        if let Some(n) = a.flood_rounds {
            env.push_str(&format!("BENCH_FLOOD_ROUNDS={n}\n"));
        }
        let files = [("bench.env", env)];
        let mode = Mode::Script {
            script: BENCH_SH,
            files: &files,
            timeout: Duration::from_secs(a.timeout),
            log: "bench.console.log",
        };
        let rc = super::run_guest(g, mode)?;
        if rc != Some(0) {
            bail!("the bench failed in the {} guest (exit {rc:?}); see its console log", g.series.name());
        }
        fs::write(super::out_dir(g.series).join("bench/kernel"), &g.kver)?;
        write_tables(g.series, &g.kver)?;
    }
    Ok(())
}

/// Prints a kernel's tables and writes them into docs/performance.md and summary.json.
fn write_tables(series: Series, kver: &str) -> Result<()> {
    let dir = super::out_dir(series).join("bench");
    let results = dir.join("results.jsonl");
    let text = fs::read_to_string(&results)
        .with_context(|| format!("reading {} (run `cargo xtask bench` first)", results.display()))?;
    let r = Results::parse(&text)?;
    let date =
        util::output(std::process::Command::new("date").args(["-u", "+%Y-%m-%d", "-r"]).arg(&results))?;
    let title = format!("{} ({kver}), {}, {} rounds, TCG", series.name(), date.trim(), r.rounds);
    let md = r.markdown(&title);
    println!("{md}");
    fs::write(dir.join("summary.json"), serde_json::to_string_pretty(&r.json())?)?;
    let doc_path = util::workspace_root().join("docs/performance.md");
    let doc = fs::read_to_string(&doc_path).unwrap_or_default();
    fs::write(&doc_path, splice(&doc, series.name(), &md))?;
    step(&format!("bench: {} written to docs/performance.md and {}", series.name(), dir.display()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"{"round":1,"config":"none","workload":"mr-4K","value":100,"unit":"ns"}
{"round":1,"config":"bt-stream","workload":"mr-4K","value":300,"unit":"ns"}
{"round":1,"config":"rt-kernel","workload":"mr-4K","value":200,"unit":"ns"}
{"round":2,"config":"none","workload":"mr-4K","value":120,"unit":"ns"}
{"round":2,"config":"bt-stream","workload":"mr-4K","value":320,"unit":"ns"}
{"round":2,"config":"rt-kernel","workload":"mr-4K","value":0,"unit":"ns"}
{"round":1,"config":"rt-kernel","attach_ms":900,"stop_ms":300,"cpu_ms":50,"events":12,"lost":0,"bpf_runs":10,"bpf_ns":5000,"ring_bytes":2400,"links":54}
{"round":1,"config":"flood","stop_ms":1500,"events":9,"lost":3,"split":"1.2 s (switching off 0.0 s, draining the ring 1.1 s: 23831 records)"}
"#;

    #[test]
    fn ratios_and_extra_time_from_the_medians() {
        let r = Results::parse(SAMPLE).unwrap();
        // none: median of 100 and 120 is 100 (nearest rank); rt-kernel's failed round
        // (0) has no figure.
        assert_eq!(r.ratio("mr-4K", "rt-kernel"), Some(2.0));
        assert_eq!(r.ratio("mr-4K", "bt-stream"), Some(3.0));
        assert_eq!(r.extra("mr-4K", "rt-kernel", "bt-stream"), Some(0.5));
        assert_eq!(r.extra("mr-4K", "rt-default", "bt-stream-u"), None);
        let md = r.markdown("t");
        assert!(md.contains("| mr-4K | 1.00× (0.1 µs, 0.1–0.1) |"), "{md}");
        assert_eq!(span("ns", 278_111.0, 244_739.0, 294_342.0), "278 µs, 245–294");
        assert_eq!(span("us", 1587.0, 1498.0, 1782.0), "1.6 ms, 1.5–1.8");
        assert_eq!(span("ns", 6.13e9, 5.23e9, 7.52e9), "6.1 s, 5.2–7.5");
        assert!(
            md.contains(
                "| rt-kernel | 900 ms | 300 ms, 300 ms | 50 ms | 12 | 0 | 500 (10 runs) | 200 | 54 |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "The tracer's own split of each stop: 1.2 s (switching off 0.0 s, draining the ring 1.1 s: 23831 records)."
            ),
            "{md}"
        );
    }

    #[test]
    fn a_bad_line_is_named() {
        let e = Results::parse("{\"config\":\"none\"}\nnot json\n").unwrap_err();
        assert!(format!("{e:#}").contains("results line 2"), "{e:#}");
    }

    #[test]
    fn a_kernels_part_is_replaced_in_place() {
        let doc = "# P\n\nintro\n";
        let once = splice(doc, "trixie", "A\n");
        assert_eq!(once, "# P\n\nintro\n<!-- bench:trixie -->\nA\n<!-- /bench:trixie -->\n");
        let twice = splice(&format!("{once}\nafter\n"), "trixie", "B\n");
        assert_eq!(twice, "# P\n\nintro\n<!-- bench:trixie -->\nB\n<!-- /bench:trixie -->\n\nafter\n");
    }
}
