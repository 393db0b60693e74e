//! `cargo xtask story-memory`: `rdma-trace story` on an endless stream stays bounded. A
//! synthetic capture of N events, built from the lab captures as many processes with their
//! own MRs and CQs (`rdma-trace/examples/synth_capture.rs`), is piped into `story -`; the
//! story's peak RSS (getrusage of the reaped child) must stay under the bound.

use crate::util::{self, step};
use anyhow::{Context, Result, bail};
use std::process::{Command, Stdio};

#[derive(clap::Args)]
pub struct MemoryArgs {
    /// Events in the synthetic capture.
    #[arg(long, default_value_t = 10_000_000)]
    pub events: u64,
    /// The bound on the story's peak RSS, MiB.
    #[arg(long, default_value_t = 100)]
    pub max_mib: u64,
}

pub fn run(a: &MemoryArgs) -> Result<()> {
    step(&format!(
        "story-memory: {} events through `rdma-trace story -`, peak RSS under {} MiB",
        a.events, a.max_mib
    ));
    let release = util::build_release_with_synth_capture()?;
    let mut synth = Command::new(release.join("examples/synth_capture"))
        .arg(a.events.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting synth_capture")?;
    let t0 = std::time::Instant::now();
    let story = Command::new(release.join("rdma-trace"))
        .args(["story", "-"])
        .stdin(synth.stdout.take().expect("piped"))
        .stdout(Stdio::piped())
        .spawn()
        .context("starting rdma-trace story")?;
    let pid = story.id() as i32;
    // The report is read while the story runs (it prints at the end).
    let mut out = story.stdout.expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out, &mut s).map(|_| s)
    });
    let (status, ru) = wait_rusage(pid)?;
    let maxrss_kib = ru.ru_maxrss as u64;
    let took = t0.elapsed();
    let synth_status = synth.wait()?;
    let report = reader.join().map_err(|_| anyhow::anyhow!("reader thread"))??;
    if status != 0 || !synth_status.success() {
        bail!("story exited {status}, synth_capture {synth_status}");
    }
    let processes = report.lines().filter(|l| l.starts_with("process ")).count();
    let mib = maxrss_kib / 1024;
    println!(
        "story-memory: {} events in {:.1} s ({:.0} k events/s), {processes} processes in the report, peak RSS {mib} MiB",
        a.events,
        took.as_secs_f64(),
        a.events as f64 / took.as_secs_f64() / 1e3
    );
    if !report.contains("events were let go to bound memory") && a.events > 1_000_000 {
        bail!("the report does not say what was let go:\n{}", report.lines().last().unwrap_or(""));
    }
    if mib >= a.max_mib {
        bail!("peak RSS {mib} MiB is over {} MiB", a.max_mib);
    }
    Ok(())
}

/// Waits for `pid`; its exit code and resource use (peak RSS in KiB, CPU time).
pub fn wait_rusage(pid: i32) -> Result<(i32, libc::rusage)> {
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value to be overwritten.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child with valid out-pointers.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    if r != pid {
        bail!("wait4: {}", std::io::Error::last_os_error());
    }
    let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) };
    Ok((code, ru))
}

#[derive(clap::Args)]
pub struct ExportArgs {
    /// Events in the synthetic capture (500 000 is a capture of about 116 MB).
    #[arg(long, default_value_t = 500_000)]
    pub events: u64,
    /// The bound on the peak RSS of each command measured, MiB.
    #[arg(long, default_value_t = 200)]
    pub max_mib: u64,
}

/// The release build (with `synth_capture`), `target/<name>/`, and in it `big.jsonl`: a
/// synthetic capture of `events` events.
fn big_capture(
    name: &str,
    events: u64,
) -> Result<(std::path::PathBuf, std::path::PathBuf, std::path::PathBuf)> {
    let release = util::build_release_with_synth_capture()?;
    let dir = util::workspace_root().join("target").join(name);
    std::fs::create_dir_all(&dir)?;
    let capture = dir.join("big.jsonl");
    let file = std::fs::File::create(&capture).context("creating the capture")?;
    let synth =
        Command::new(release.join("examples/synth_capture")).arg(events.to_string()).stdout(file).status()?;
    if !synth.success() {
        bail!("synth_capture exited {synth}");
    }
    Ok((release, dir, capture))
}

/// `cargo xtask export-memory`: `rdma-trace export --perfetto` of a big capture keeps no
/// event, only its slices' text, so its peak RSS stays under the bound.
pub fn export(a: &ExportArgs) -> Result<()> {
    step(&format!(
        "export-memory: {} events through `rdma-trace export --perfetto`, peak RSS under {} MiB",
        a.events, a.max_mib
    ));
    let (release, dir, capture) = big_capture("export-memory", a.events)?;
    let out = dir.join("big.perfetto.json");
    let t0 = std::time::Instant::now();
    let export = Command::new(release.join("rdma-trace"))
        .arg("export")
        .arg(&capture)
        .arg("--perfetto")
        .arg(&out)
        .spawn()
        .context("starting rdma-trace export")?;
    let (status, ru) = wait_rusage(export.id() as i32)?;
    let took = t0.elapsed();
    if status != 0 {
        bail!("export exited {status}");
    }
    let mib = ru.ru_maxrss as u64 / 1024;
    let (in_mb, out_mb) =
        (std::fs::metadata(&capture)?.len() / 1_000_000, std::fs::metadata(&out)?.len() / 1_000_000);
    // The export is one JSON document that ends as one. Checked without building it in
    // memory: a child's ru_maxrss counts this process's own peak at the spawn (the kernel
    // carries the old mm's high-water mark across exec), so xtask stays small for the
    // measurements after this one (a 53 MB export parsed into a Value is ~500 MB).
    let text = std::fs::read(&out)?;
    serde_json::from_slice::<serde::de::IgnoredAny>(&text).context("the export is not JSON")?;
    let slices = text.windows(6).filter(|w| w == b"\"ph\":\"").count();
    drop(text);
    std::fs::remove_file(&capture).ok();
    std::fs::remove_file(&out).ok();
    println!(
        "export-memory: a {in_mb} MB capture ({} events) → {out_mb} MB, {slices} trace events, in {:.1} s; peak RSS {mib} MiB",
        a.events,
        took.as_secs_f64()
    );
    if slices < a.events as usize / 4 {
        bail!("only {slices} trace events for {} events", a.events);
    }
    if mib >= a.max_mib {
        bail!("peak RSS {mib} MiB is over {} MiB", a.max_mib);
    }
    Ok(())
}

/// `explain-memory` takes what `export-memory` takes.
pub type ExplainArgs = ExportArgs;

/// `cargo xtask explain-memory`: `rdma-trace explain` of a big capture keeps only the run's
/// first events (`--max-events`, 100 000 by default) and reads the rest through the
/// report's bounded story: each topic's peak RSS stays under the bound, and the
/// explanation says how much of the run it kept.
pub fn explain(a: &ExplainArgs) -> Result<()> {
    step(&format!(
        "explain-memory: {} events through `rdma-trace explain`, peak RSS under {} MiB",
        a.events, a.max_mib
    ));
    let (release, dir, capture) = big_capture("explain-memory", a.events)?;
    let mut worst = 0;
    for topic in ["mr", "mmap", "cq"] {
        let t0 = std::time::Instant::now();
        let out = dir.join(format!("{topic}.json"));
        let child = Command::new(release.join("rdma-trace"))
            .args(["explain", topic, "--json"])
            .arg(&capture)
            .stdout(std::fs::File::create(&out)?)
            .stderr(Stdio::null())
            .spawn()
            .context("starting rdma-trace explain")?;
        let (status, ru) = wait_rusage(child.id() as i32)?;
        let took = t0.elapsed();
        let mib = ru.ru_maxrss as u64 / 1024;
        if status != 0 {
            bail!("explain {topic} exited {status}");
        }
        let x: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&out)?).context("explain --json is not JSON")?;
        let (kept, run) = (x["values"]["events_kept"].as_u64(), x["values"]["events_in_run"].as_u64());
        println!(
            "explain-memory: explain {topic}: {} stages, kept {kept:?} of {run:?} events, in {:.1} s; peak RSS {mib} MiB",
            x["stages"].as_array().map_or(0, |s| s.len()),
            took.as_secs_f64()
        );
        if run != Some(a.events) || kept.is_none_or(|k| k >= a.events) {
            bail!("explain {topic} does not say it kept part of the run: kept {kept:?} of {run:?}");
        }
        worst = worst.max(mib);
    }
    std::fs::remove_file(&capture).ok();
    if worst >= a.max_mib {
        bail!("peak RSS {worst} MiB is over {} MiB", a.max_mib);
    }
    Ok(())
}
