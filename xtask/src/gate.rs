//! `cargo xtask test`: the one gate, the same locally and in CI.

use crate::util::{self, step};
use anyhow::{Result, bail};

pub fn run(no_lab: bool) -> Result<()> {
    crate::setup::run()?;
    step("gate: cargo fmt --check");
    util::run(util::cargo().args(["fmt", "--all", "--", "--check"]))?;
    step("gate: clippy (userspace, common, xtask)");
    util::run(util::cargo().args(["clippy", "--all-targets", "--", "-D", "warnings"]))?;
    step("gate: clippy (eBPF crate)");
    // On the host target: a no_std binary needs panic=abort to type-check.
    util::run(util::cargo().args([
        "clippy",
        "-p",
        "rdma-trace-ebpf",
        "--config",
        "profile.dev.panic=\"abort\"",
        "--",
        "-D",
        "warnings",
    ]))?;
    step("gate: clippy (eBPF crate, as built for arm64: its argument reads)");
    // Its own target directory: other rustflags would rebuild the host's.
    util::run(util::cargo().args([
        "clippy",
        "-p",
        "rdma-trace-ebpf",
        "--target-dir",
        "target/clippy-arm64",
        "--config",
        "profile.dev.panic=\"abort\"",
        "--config",
        "build.rustflags=[\"--cfg=bpf_target_arch=\\\"aarch64\\\"\"]",
        "--",
        "-D",
        "warnings",
    ]))?;
    step("gate: cargo deny check licenses bans (policy: deny.toml)");
    let mut deny = std::process::Command::new(crate::setup::cargo_deny_path());
    deny.current_dir(util::workspace_root()).args(["check", "licenses", "bans"]);
    util::run(&mut deny)?;
    step("gate: host tests");
    util::run(util::cargo().args(["test"]))?;
    // The host tests a plain `cargo test` lists as ignored, with the reason: they need root.
    step("gate: host tests that need root (eBPF on this kernel, setpriv, an sshd of their own)");
    util::run(util::cargo().args(ROOT_TESTS).args(["--", "--ignored"]))?;
    step("gate: fuzz the capture reader (60 s)");
    crate::fuzz::run(&crate::fuzz::FuzzArgs { seconds: 60 })?;
    step("gate: story memory on a 10 M-event stream");
    crate::memory::run(&crate::memory::MemoryArgs { events: 10_000_000, max_mib: 100 })?;
    step("gate: export --perfetto memory on a 116 MB capture");
    crate::memory::export(&crate::memory::ExportArgs { events: 500_000, max_mib: 200 })?;
    step("gate: explain memory on a 116 MB capture");
    crate::memory::explain(&crate::memory::ExplainArgs { events: 500_000, max_mib: 200 })?;
    step("gate: the TUI replaying 1 M events at top speed");
    crate::tui_load::run(&crate::tui_load::TuiLoadArgs { events: 1_000_000 })?;
    step("gate: the arm64 cross-build (tracer and companion start under qemu-aarch64)");
    crate::build::run(&crate::build::BuildArgs { target: crate::build::Target::Aarch64 })?;
    if no_lab {
        step("gate: the committed exports in Perfetto's UI and chromium");
        crate::perfetto::run(&crate::perfetto::PerfettoArgs { examples_only: true, fresh_since: None })?;
        step("gate: lab tests skipped (--no-lab)");
        left_out();
        return Ok(());
    }
    step("gate: lab tests (QEMU, every kernel series)");
    let lab_started = std::time::SystemTime::now();
    crate::lab::vm_test(crate::lab::VmTestArgs::default())?;
    step("gate: the committed exports and this run's lab exports in Perfetto's UI and chromium");
    crate::perfetto::run(&crate::perfetto::PerfettoArgs {
        examples_only: false,
        fresh_since: Some(lab_started),
    })?;
    demo_in_tmux()?;
    left_out();
    Ok(())
}

/// What the gate does not run, said every time so that nothing is left out silently.
fn left_out() {
    step(
        "gate: done. Not in it (run them before resolving what they cover): `cargo xtask soak` \
         (the lab tests named soak_…: the ten-run ring soak under CPU hogs, 30 min of daemon churn \
         and joins, a late viewer of 100 000 MRs; about an hour a \
         kernel), `cargo xtask fuzz --seconds 600` (the gate fuzzes for 60 s)",
    );
}

/// The test files whose ignored tests need root (and no lab): run with `--ignored` as root.
const ROOT_TESTS: [&str; 9] =
    ["test", "-p", "rdma-trace", "--test", "host_ebpf", "--test", "cli", "--test", "ssh_source"];

/// The README's first command as a person sees it: `cargo xtask demo` in a terminal (tmux,
/// 120×32) until a pinning row from the guest is on screen; then `q`: it must exit 0 and
/// leave the terminal as it found it.
fn demo_in_tmux() -> Result<()> {
    use std::process::Command;
    use std::time::{Duration, Instant};
    step("gate: the demo in a terminal (tmux 120×32): a pinning row from the guest, then q");
    let dir = util::workspace_root().join("target/lab/demo-gate");
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir)?;
    let exe = std::env::current_exe()?;
    let d = dir.display();
    let script = format!(
        "stty -a > {d}/before; {} demo; echo $? > {d}/code; stty -a > {d}/after; sleep 600",
        exe.display()
    );
    let tmux = |args: &[&str]| -> String {
        let out = Command::new("tmux").args(["-L", "rdma-trace-demo-gate"]).args(args).output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default()
    };
    tmux(&["kill-server"]);
    tmux(&["new-session", "-d", "-s", "d", "-x", "120", "-y", "32", "sh", "-c", &script]);
    let result = (|| -> Result<()> {
        let wait = |what: &str, secs: u64, ok: &dyn Fn(&str) -> bool| -> Result<String> {
            let t0 = Instant::now();
            loop {
                let s = tmux(&["capture-pane", "-p", "-t", "d"]);
                if ok(&s) {
                    return Ok(s);
                }
                if t0.elapsed() > Duration::from_secs(secs) {
                    bail!("the demo never showed {what} in {secs} s; the screen:\n{s}");
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        };
        let started = Instant::now();
        wait("the companion pinning (overview)", 900, &|s| {
            s.contains("rdma-trace-work [") && s.contains(" MRs")
        })?;
        step(&format!(
            "gate: demo: the companion's pinning live on screen {:.0} s after the demo started",
            started.elapsed().as_secs_f64()
        ));
        tmux(&["send-keys", "-t", "d", "2"]);
        let rows =
            wait("an MR row", 120, &|s| s.lines().any(|l| l.contains("rdma-trac") && l.contains("0x")))?;
        std::fs::write(dir.join("pinning.txt"), rows)?;
        tmux(&["send-keys", "-t", "d", "q"]);
        wait("the end of the demo", 300, &|_| dir.join("after").exists())?;
        std::thread::sleep(Duration::from_millis(300));
        let code = std::fs::read_to_string(dir.join("code"))?;
        if code.trim() != "0" {
            bail!("the demo exited {}", code.trim());
        }
        let settings = |f: &str| -> Result<String> {
            Ok(std::fs::read_to_string(dir.join(f))?.lines().skip(1).collect::<Vec<_>>().join("\n"))
        };
        if settings("before")? != settings("after")? {
            bail!("the terminal's settings changed (stty -a before and after in {d})");
        }
        Ok(())
    })();
    tmux(&["kill-server"]);
    result
}
