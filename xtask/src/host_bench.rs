//! `cargo xtask bench --host`: the userspace pipeline alone, on this machine, no guest.
//!
//! - The live path, stage by stage: `benches/pipeline.rs` (real-shaped raw records through
//!   decode → enrich → correlate → live story → capture writer), interleaved rounds.
//! - The same pipeline whole at 10^5, 10^6 and 10^7 records: records/s and peak RSS.
//! - `replay`, `story` and `report` reading a synthetic capture of the same sizes
//!   (`examples/synth_capture.rs`, piped): events per CPU-second and peak RSS.
//!
//! Every measured process runs pinned to one CPU (the generator of the piped capture to the
//! other), so a rate is what one core does. Writes the tables into docs/performance.md
//! (between its `host` markers) and target/bench/host.json. Not part of the gate.

use crate::util::{self, step};
use anyhow::{Context, Result, bail};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The CPU every measured process runs on; a piped capture is made on the other.
const MEASURED_CPU: usize = 1;
const GENERATOR_CPU: usize = 0;

/// One build under test: the working tree's, or another revision's (`--against`).
struct Build {
    label: String,
    release: PathBuf,
    bench: PathBuf,
}

pub fn run(sizes: &[u64], rounds: u32, against: Option<&str>) -> Result<()> {
    let now = Build {
        label: "now".into(),
        release: util::build_release_with_synth_capture()?,
        bench: build_pipeline_bench(&util::workspace_root(), None)?,
    };
    // The generator of every piped capture is this tree's: both builds read the same bytes.
    let synth = now.release.join("examples/synth_capture");
    let mut builds = match against {
        Some(rev) => vec![build_revision(rev)?],
        None => Vec::new(),
    };
    builds.push(now);
    let mut json = serde_json::Map::new();

    step(&format!("bench --host: the live pipeline stage by stage, 10^6 records, {rounds} rounds"));
    let mut stages = Vec::new();
    for b in &builds {
        let out = pinned_output(Command::new(&b.bench).args(["stages", "1000000", &rounds.to_string()]))?;
        stages.push(json_line(&out)?);
    }
    json.insert("stages".into(), stages.clone().into());

    // Each figure: every build once a round, in turn (the order flips each round), so
    // a noisy minute falls on both; the median of the rounds is kept.
    let mut whole: Vec<Vec<serde_json::Value>> = vec![Vec::new(); builds.len()];
    for &n in sizes {
        step(&format!("bench --host: the live pipeline whole, {n} records, {rounds} rounds"));
        let runs = in_turn(&builds, rounds, |b| {
            json_line(&pinned_output(Command::new(&b.bench).args(["full", &n.to_string()]))?)
        })?;
        for (i, r) in runs.into_iter().enumerate() {
            whole[i].push(median_by(r, |v| v["records_per_s"].as_f64().unwrap_or(0.0)));
        }
    }
    json.insert("pipeline".into(), whole.clone().into());

    let mut readers: Vec<Vec<Reader>> = builds.iter().map(|_| Vec::new()).collect();
    for cmd in ["replay", "story", "report"] {
        for &n in sizes {
            step(&format!("bench --host: `rdma-trace {cmd} -` on {n} events, {rounds} rounds"));
            let runs = in_turn(&builds, rounds, |b| read_capture(&synth, &b.release, cmd, n))?;
            for (i, r) in runs.into_iter().enumerate() {
                readers[i].push(median_by(r, |r| r.events as f64 / r.cpu_s.max(1e-9)));
            }
        }
    }
    let rows = |rs: &[Reader]| -> serde_json::Value {
        rs.iter()
            .map(|r| {
                serde_json::json!({"cmd": r.cmd, "events": r.events, "wall_s": r.wall_s, "cpu_s": r.cpu_s,
                    "peak_rss_kib": r.peak_rss_kib})
            })
            .collect()
    };
    json.insert("readers".into(), readers.iter().map(|r| rows(r)).collect());
    json.insert("builds".into(), builds.iter().map(|b| b.label.clone()).collect());

    let labels: Vec<&str> = builds.iter().map(|b| b.label.as_str()).collect();
    let md = markdown(&labels, &stages, &whole, &readers);
    println!("{md}");
    let dir = util::workspace_root().join("target/bench");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("host.json"), serde_json::to_string_pretty(&json)?)?;
    let doc_path = util::workspace_root().join("docs/performance.md");
    let doc = std::fs::read_to_string(&doc_path).unwrap_or_default();
    std::fs::write(&doc_path, crate::lab::bench::splice(&doc, "host", &md))?;
    step("bench --host: written to docs/performance.md and target/bench/host.json");
    Ok(())
}

/// `f` on every build, `rounds` times, in turn: per build, its result each round.
fn in_turn<T>(builds: &[Build], rounds: u32, mut f: impl FnMut(&Build) -> Result<T>) -> Result<Vec<Vec<T>>> {
    let mut out: Vec<Vec<T>> = builds.iter().map(|_| Vec::new()).collect();
    for r in 0..rounds.max(1) {
        let order: Vec<usize> =
            if r % 2 == 0 { (0..builds.len()).collect() } else { (0..builds.len()).rev().collect() };
        for i in order {
            out[i].push(f(&builds[i])?);
        }
    }
    Ok(out)
}

/// The run whose `key` is the median of the runs.
fn median_by<T>(mut runs: Vec<T>, key: impl Fn(&T) -> f64) -> T {
    runs.sort_by(|a, b| key(a).total_cmp(&key(b)));
    let mid = runs.len() / 2;
    runs.swap_remove(mid)
}

/// Revision `rev` built in a worktree of its own under target/bench/against (kept, so a
/// second bench against it builds nothing).
fn build_revision(rev: &str) -> Result<Build> {
    let root = util::workspace_root();
    let short = util::output(Command::new("git").current_dir(&root).args(["rev-parse", "--short", rev]))?;
    let short = short.trim();
    let base = root.join("target/bench/against");
    let tree = base.join(short);
    let target = base.join(format!("{short}-target"));
    if !tree.join("Cargo.toml").exists() {
        step(&format!("bench --host: a worktree of {rev} ({short})"));
        std::fs::create_dir_all(&base)?;
        util::run(
            Command::new("git")
                .current_dir(&root)
                .args(["worktree", "add", "--detach"])
                .arg(&tree)
                .arg(short),
        )?;
    }
    step(&format!("bench --host: building {short} (release, its own target directory)"));
    let release = util::build_release_in(&tree, Some(&target), &[])?;
    Ok(Build { label: short.to_string(), release, bench: build_pipeline_bench(&tree, Some(&target))? })
}

/// Builds `benches/pipeline.rs` of the tree at `dir` and returns its executable.
fn build_pipeline_bench(dir: &Path, target: Option<&Path>) -> Result<PathBuf> {
    let mut cargo = util::cargo();
    cargo.current_dir(dir);
    if let Some(t) = target {
        cargo.env("CARGO_TARGET_DIR", t);
    }
    let out = util::output(cargo.args([
        "bench",
        "-q",
        "-p",
        "rdma-trace",
        "--bench",
        "pipeline",
        "--no-run",
        "--message-format=json",
    ]))?;
    out.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["target"]["name"] == "pipeline")
        .find_map(|v| v["executable"].as_str().map(PathBuf::from))
        .context("cargo did not name the pipeline bench's executable")
}

/// Runs `cmd` pinned to the measured CPU from the workspace root; its stdout.
fn pinned_output(cmd: &mut Command) -> Result<String> {
    pin(cmd, MEASURED_CPU);
    util::output(cmd.current_dir(util::workspace_root()))
}

fn pin(cmd: &mut Command, cpu: usize) {
    // SAFETY: only async-signal-safe calls between fork and exec (sched_setaffinity).
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The `JSON {...}` line a bench prints.
fn json_line(out: &str) -> Result<serde_json::Value> {
    let line =
        out.lines().find_map(|l| l.strip_prefix("JSON ")).context("no JSON line in the bench's output")?;
    serde_json::from_str(line).with_context(|| format!("the bench's JSON line: {line}"))
}

struct Reader {
    cmd: String,
    events: u64,
    wall_s: f64,
    cpu_s: f64,
    peak_rss_kib: u64,
}

/// `rdma-trace CMD -` reading a synthetic capture of `n` events from a pipe.
fn read_capture(synth: &Path, release: &Path, cmd: &str, n: u64) -> Result<Reader> {
    let mut gen_cmd = Command::new(synth);
    gen_cmd.arg(n.to_string()).stdout(Stdio::piped());
    pin(&mut gen_cmd, GENERATOR_CPU);
    let mut generator = gen_cmd.spawn().context("starting synth_capture")?;
    let mut reader_cmd = Command::new(release.join("rdma-trace"));
    reader_cmd
        .args([cmd, "-"])
        .stdin(generator.stdout.take().expect("piped"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    pin(&mut reader_cmd, MEASURED_CPU);
    let t0 = std::time::Instant::now();
    let mut child = reader_cmd.spawn().with_context(|| format!("starting rdma-trace {cmd}"))?;
    let pid = child.id() as i32;
    let mut err = child.stderr.take().expect("piped");
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut err, &mut s).map(|_| s)
    });
    let (status, ru) = crate::memory::wait_rusage(pid)?;
    let wall_s = t0.elapsed().as_secs_f64();
    let gen_status = generator.wait()?;
    let stderr = errors.join().map_err(|_| anyhow::anyhow!("stderr reader"))??;
    if status != 0 || !gen_status.success() {
        bail!("rdma-trace {cmd} exited {status} (synth_capture: {gen_status}): {stderr}");
    }
    let cpu = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(Reader {
        cmd: cmd.into(),
        events: n,
        wall_s,
        cpu_s: cpu(ru.ru_utime) + cpu(ru.ru_stime),
        peak_rss_kib: ru.ru_maxrss as u64,
    })
}

fn rate(per_s: f64) -> String {
    if per_s >= 1e6 { format!("{:.2} M/s", per_s / 1e6) } else { format!("{:.0} k/s", per_s / 1e3) }
}

/// A column per build; where there are two, a last column of the second's figure over the
/// first's (rates: above 1 is faster; RSS: below 1 is smaller).
fn markdown(
    labels: &[&str],
    stages: &[serde_json::Value],
    whole: &[Vec<serde_json::Value>],
    readers: &[Vec<Reader>],
) -> String {
    let date = util::output(Command::new("date").args(["-u", "+%Y-%m-%d"])).unwrap_or_default();
    let pair = labels.len() == 2;
    let heads = |what: &str| labels.iter().map(|l| format!(" {what} ({l}) |")).collect::<String>();
    let ratio_head = if pair { format!(" {} ÷ {} |", labels[1], labels[0]) } else { String::new() };
    let rules = |n: usize| "---|".repeat(n);
    let ratio =
        |row: &[f64]| if pair { format!(" {:.2}× |", row[1] / row[0].max(1e-9)) } else { String::new() };
    let first = &stages[0];
    let mut md = format!(
        "### The userspace pipeline alone (host, one CPU, {})\n\n\
         Builds: {}. The live path stage by stage ({} records, {} rounds, medians), ns per record:\n\n\
         | stage |{}{}\n|---|{}\n",
        date.trim(),
        labels.iter().map(|l| format!("`{l}`")).collect::<Vec<_>>().join(", "),
        first["records"],
        first["rounds"],
        heads("ns"),
        ratio_head,
        rules(labels.len() + pair as usize)
    );
    let names: Vec<&str> =
        first["stages"].as_array().into_iter().flatten().filter_map(|s| s["stage"].as_str()).collect();
    for name in names {
        let ns: Vec<f64> = stages
            .iter()
            .map(|st| {
                st["stages"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|s| s["stage"] == name)
                    .map_or(f64::NAN, |s| s["ns_per_record"].as_f64().unwrap_or(f64::NAN))
            })
            .collect();
        md += &format!(
            "| {name} |{}{}\n",
            ns.iter().map(|v| format!(" {v:.0} |")).collect::<String>(),
            ratio(&ns)
        );
    }
    md += &format!(
        "\nThe live path whole (every stage), by the number of records (median of the rounds):\n\n\
         | records |{}{}{}\n|---|{}\n",
        heads("records/s"),
        heads("peak RSS"),
        ratio_head,
        rules(2 * labels.len() + pair as usize)
    );
    for (i, w) in whole[0].iter().enumerate() {
        let rate_of = |b: usize| whole[b][i]["records_per_s"].as_f64().unwrap_or(0.0);
        let rates: Vec<f64> = (0..labels.len()).map(rate_of).collect();
        md += &format!(
            "| {} |{}{}{}\n",
            w["records"],
            rates.iter().map(|r| format!(" {} |", rate(*r))).collect::<String>(),
            (0..labels.len())
                .map(|b| format!(" {} MiB |", whole[b][i]["peak_rss_kib"].as_u64().unwrap_or(0) / 1024))
                .collect::<String>(),
            ratio(&rates)
        );
    }
    md += &format!(
        "\nReading a capture from a pipe (events per CPU-second of the reader, median of the rounds):\n\n\
         | command | events |{}{}{}\n|---|---|{}\n",
        heads("events/s"),
        heads("peak RSS"),
        ratio_head,
        rules(2 * labels.len() + pair as usize)
    );
    for (i, r) in readers[0].iter().enumerate() {
        let rates: Vec<f64> = readers.iter().map(|rs| rs[i].events as f64 / rs[i].cpu_s.max(1e-9)).collect();
        md += &format!(
            "| `{}` | {} |{}{}{}\n",
            r.cmd,
            r.events,
            rates.iter().map(|v| format!(" {} |", rate(*v))).collect::<String>(),
            readers.iter().map(|rs| format!(" {} MiB |", rs[i].peak_rss_kib / 1024)).collect::<String>(),
            ratio(&rates)
        );
    }
    md
}
