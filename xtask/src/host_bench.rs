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

pub fn run(sizes: &[u64], rounds: u32) -> Result<()> {
    let release = util::build_release_with_synth_capture()?;
    let bench = build_pipeline_bench()?;
    let mut json = serde_json::Map::new();

    step(&format!("bench --host: the live pipeline stage by stage, 10^6 records, {rounds} rounds"));
    let out = pinned_output(Command::new(&bench).args(["stages", "1000000", &rounds.to_string()]))?;
    let stages = json_line(&out)?;
    json.insert("stages".into(), stages.clone());

    let mut whole = Vec::new();
    for &n in sizes {
        step(&format!("bench --host: the live pipeline whole, {n} records"));
        let out = pinned_output(Command::new(&bench).args(["full", &n.to_string()]))?;
        whole.push(json_line(&out)?);
    }
    json.insert("pipeline".into(), whole.clone().into());

    let mut readers = Vec::new();
    for cmd in ["replay", "story", "report"] {
        for &n in sizes {
            step(&format!("bench --host: `rdma-trace {cmd} -` on {n} events"));
            readers.push(read_capture(&release, cmd, n)?);
        }
    }
    let rows = readers.iter().map(|r| {
        serde_json::json!({"cmd": r.cmd, "events": r.events, "wall_s": r.wall_s, "cpu_s": r.cpu_s,
            "peak_rss_kib": r.peak_rss_kib})
    });
    json.insert("readers".into(), rows.collect());

    let md = markdown(&stages, &whole, &readers);
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

/// Builds `benches/pipeline.rs` and returns its executable.
fn build_pipeline_bench() -> Result<PathBuf> {
    let out = util::output(util::cargo().args([
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
fn read_capture(release: &Path, cmd: &str, n: u64) -> Result<Reader> {
    let mut gen_cmd = Command::new(release.join("examples/synth_capture"));
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

fn markdown(stages: &serde_json::Value, whole: &[serde_json::Value], readers: &[Reader]) -> String {
    let date = util::output(Command::new("date").args(["-u", "+%Y-%m-%d"])).unwrap_or_default();
    let mut md = format!(
        "### The userspace pipeline alone (host, one CPU, {})\n\n\
         The live path stage by stage ({} records, {} rounds, medians):\n\n\
         | stage | records/s | ns per record | the stage adds |\n|---|---|---|---|\n",
        date.trim(),
        stages["records"],
        stages["rounds"]
    );
    for s in stages["stages"].as_array().into_iter().flatten() {
        md += &format!(
            "| {} | {} | {} | {} ns |\n",
            s["stage"].as_str().unwrap_or("?"),
            rate(s["records_per_s"].as_f64().unwrap_or(0.0)),
            s["ns_per_record"],
            s["adds_ns"]
        );
    }
    md += "\nThe live path whole (every stage), by the number of records:\n\n\
           | records | records/s | peak RSS |\n|---|---|---|\n";
    for w in whole {
        md += &format!(
            "| {} | {} | {} MiB |\n",
            w["records"],
            rate(w["records_per_s"].as_f64().unwrap_or(0.0)),
            w["peak_rss_kib"].as_u64().unwrap_or(0) / 1024
        );
    }
    md += "\nReading a capture from a pipe (events per CPU-second of the reader; wall time):\n\n\
           | command | events | events/s | wall | peak RSS |\n|---|---|---|---|---|\n";
    for r in readers {
        md += &format!(
            "| `{}` | {} | {} | {:.1} s | {} MiB |\n",
            r.cmd,
            r.events,
            rate(r.events as f64 / r.cpu_s.max(1e-9)),
            r.wall_s,
            r.peak_rss_kib / 1024
        );
    }
    md
}
