//! `cargo xtask tui-load`: the TUI never slows the pipeline. A synthetic capture of N
//! events (`rdma-trace/examples/synth_capture.rs`, the lab captures repeated as new
//! processes) is replayed by `rdma-trace tui FILE` at top speed in a real terminal (tmux):
//! every event must reach the model (the status line's count, 0 lost), and keys pressed
//! during the replay must show on screen. Reports the end-to-end key latency seen through
//! tmux and the TUI's own frame rate and key-to-frame times.

use crate::util::{self, step};
use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct TuiLoadArgs {
    /// Events in the synthetic capture.
    #[arg(long, default_value_t = 1_000_000)]
    pub events: u64,
}

struct Tmux(&'static str);

impl Tmux {
    fn run(&self, args: &[&str]) -> String {
        match Command::new("tmux").args(["-L", self.0]).args(args).output() {
            Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
            // Said at once: otherwise a missing tmux looks like a TUI that never drew.
            Err(e) => panic!("tui-load: cannot run tmux ({e}); cargo xtask setup installs it"),
        }
    }
    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "t"])
    }
    /// Polls the screen every 10 ms until `ok`; how long it took, or the screen at the limit.
    fn until(&self, limit: Duration, ok: impl Fn(&str) -> bool) -> Result<Duration, String> {
        let t0 = Instant::now();
        loop {
            let s = self.screen();
            if ok(&s) {
                return Ok(t0.elapsed());
            }
            if t0.elapsed() > limit {
                return Err(s);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

pub fn run(a: &TuiLoadArgs) -> Result<()> {
    step(&format!("tui-load: `rdma-trace tui` replays {} events at top speed; keys stay answered", a.events));
    let release = util::build_release_with_synth_capture()?;
    let root = util::workspace_root();
    let dir = root.join("target/tmp/tui-load");
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir)?;
    let capture = dir.join("capture.jsonl");
    let st = Command::new(release.join("examples/synth_capture"))
        .arg(a.events.to_string())
        .stdout(std::fs::File::create(&capture)?)
        .status()
        .context("synth_capture")?;
    if !st.success() {
        bail!("synth_capture exited {st}");
    }
    let result = replay(&release.join("rdma-trace"), &capture, &dir, a.events);
    std::fs::remove_file(&capture).ok();
    result
}

fn replay(bin: &Path, capture: &Path, dir: &Path, events: u64) -> Result<()> {
    let d = dir.display();
    let script = format!(
        "{} tui --verbose {} 2> {d}/stderr; echo $? > {d}/code; sleep 600",
        bin.display(),
        capture.display()
    );
    let tmux = Tmux("rdma-trace-tui-load");
    tmux.run(&["kill-server"]);
    tmux.run(&["new-session", "-d", "-s", "t", "-x", "120", "-y", "32", "sh", "-c", &script]);
    let r = drive(&tmux, dir, events);
    tmux.run(&["kill-server"]);
    r
}

fn drive(tmux: &Tmux, dir: &Path, events: u64) -> Result<()> {
    let opened = |s: &str| s.contains("1 Overview");
    tmux.until(Duration::from_secs(30), opened).map_err(|s| anyhow::anyhow!("the TUI never opened:\n{s}"))?;
    let t0 = Instant::now();
    tmux.run(&["send-keys", "-t", "t", "G"]);
    // Switch screens while the replay runs: each key must show within 2 s.
    let screens = [("2", "MRs ("), ("3", "uverbs mappings ("), ("5", "events ("), ("6", "companion steps (")];
    let mut latencies = Vec::new();
    let ended = |s: &str| s.contains("(end of the capture)");
    for (key, title) in screens.iter().cycle() {
        if ended(&tmux.screen()) || t0.elapsed() > Duration::from_secs(600) {
            break;
        }
        tmux.run(&["send-keys", "-t", "t", key]);
        let took = tmux
            .until(Duration::from_secs(2), |s| s.contains(title))
            .map_err(|s| anyhow::anyhow!("key {key} not answered within 2 s:\n{s}"))?;
        latencies.push(took);
        std::thread::sleep(Duration::from_millis(200));
    }
    let screen = tmux
        .until(Duration::from_secs(600), ended)
        .map(|_| tmux.screen())
        .map_err(|s| anyhow::anyhow!("the replay never ended:\n{s}"))?;
    let replayed = t0.elapsed();
    let want = format!("│ {events} ev ");
    if !screen.contains(&want) || !screen.contains("│ 0 lost") {
        bail!("the model does not show {events} events and 0 lost:\n{screen}");
    }
    tmux.run(&["send-keys", "-t", "t", "q"]);
    let code = dir.join("code");
    let t1 = Instant::now();
    while !code.exists() {
        if t1.elapsed() > Duration::from_secs(10) {
            bail!("q did not end the TUI:\n{}", tmux.screen());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(100));
    let exit = std::fs::read_to_string(&code)?;
    let stderr = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
    if exit.trim() != "0" {
        bail!("the TUI exited {}: {stderr}", exit.trim());
    }
    if latencies.is_empty() {
        bail!("the replay ended before any key was sent: give it more events (--events)");
    }
    latencies.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (mid, max) = (latencies[latencies.len() / 2], latencies[latencies.len() - 1]);
    println!(
        "tui-load: {events} events replayed at top speed in {:.1} s ({:.0} k events/s), all in the model, 0 lost",
        replayed.as_secs_f64(),
        events as f64 / replayed.as_secs_f64() / 1e3
    );
    println!(
        "tui-load: {} keys during the replay, on screen (seen through tmux, polled every 10 ms) after median {:.0} ms, longest {:.0} ms",
        latencies.len(),
        ms(mid),
        ms(max)
    );
    print!("tui-load: the TUI's own account: {stderr}");
    Ok(())
}
