//! Small process helpers shared by the xtask commands.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Runs a command with inherited stdio; fails naming the command on a non-zero exit.
pub fn run(cmd: &mut Command) -> Result<()> {
    let desc = describe(cmd);
    let st = cmd.status().with_context(|| format!("could not start `{desc}`"))?;
    if !st.success() {
        bail!("`{desc}` failed ({st})");
    }
    Ok(())
}

/// Runs a command and returns its stdout (stderr passes through).
pub fn output(cmd: &mut Command) -> Result<String> {
    let desc = describe(cmd);
    let out = cmd.stderr(Stdio::inherit()).output().with_context(|| format!("could not start `{desc}`"))?;
    if !out.status.success() {
        bail!("`{desc}` failed ({})", out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a command quietly; true when it exits 0.
pub fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null()).stderr(Stdio::null()).status().map(|s| s.success()).unwrap_or(false)
}

pub fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask has a parent directory").to_path_buf()
}

/// `cargo` as invoked us (falls back to `cargo` on PATH).
pub fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(workspace_root());
    c
}

/// A step of the run, with the minutes and seconds since its first step: a gate's log says
/// where its time went.
pub fn step(msg: &str) {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let t = START.get_or_init(std::time::Instant::now).elapsed().as_secs();
    eprintln!("==> [{:02}:{:02}] {msg}", t / 60, t % 60);
}

/// Where downloads, kernels, guest images and the bpf-linker LLVM prefix are cached:
/// outside the checkout so a fresh clone reuses them. `RDMA_TRACE_CACHE` overrides.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("RDMA_TRACE_CACHE") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("rdma-trace");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache/rdma-trace")
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { geteuid() == 0 }
}

unsafe extern "C" {
    fn geteuid() -> u32;
}

/// Builds the release `rdma-trace` and the `synth_capture` example (story-memory,
/// tui-load); returns `target/release`.
pub fn build_release_with_synth_capture() -> Result<PathBuf> {
    build_release_in(&workspace_root(), None, &["synth_capture"])
}

/// Builds the release `rdma-trace` (and `examples`) of the tree at `dir`, into `target`
/// (else its own target/); returns the release directory.
pub fn build_release_in(dir: &Path, target: Option<&Path>, examples: &[&str]) -> Result<PathBuf> {
    let mut c = cargo();
    c.current_dir(dir).args(["build", "--release", "-q", "-p", "rdma-trace", "--bin", "rdma-trace"]);
    for e in examples {
        c.args(["--example", e]);
    }
    if let Some(t) = target {
        c.env("CARGO_TARGET_DIR", t);
    }
    run(&mut c)?;
    Ok(target.map_or_else(|| dir.join("target"), Path::to_path_buf).join("release"))
}
