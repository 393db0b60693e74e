//! Helpers for lab tests (run in the soft-RoCE guest by `cargo xtask vm-test`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const IGNORE: &str = "lab: needs the soft-RoCE guest (cargo xtask vm-test)";

pub fn tracer_bin() -> PathBuf {
    PathBuf::from(std::env::var("RDMA_TRACE_BIN").expect("RDMA_TRACE_BIN (set by the lab runner)"))
}

/// Where artifacts go (kept on the host after the run).
pub fn out_dir(sub: &str) -> PathBuf {
    let base = std::env::var("RDMA_TRACE_LAB_OUT").unwrap_or_else(|_| "/tmp/lab-out".into());
    let d = Path::new(&base).join(sub);
    std::fs::create_dir_all(&d).expect("artifact dir");
    d
}

/// CLOCK_MONOTONIC in ns: the clock bpf_ktime_get_ns reads.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime with a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Waits until `file` contains `needle` (or the process exits, or `secs` pass).
pub fn wait_for(file: &Path, needle: &str, child: &mut Child, secs: u64) -> Result<(), String> {
    let t0 = Instant::now();
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if text.contains(needle) {
            return Ok(());
        }
        if let Ok(Some(st)) = child.try_wait() {
            return Err(format!("exited ({st}) before printing {needle:?}:\n{text}"));
        }
        if t0.elapsed() > Duration::from_secs(secs) {
            return Err(format!("no {needle:?} after {secs} s:\n{text}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn interrupt(child: &Child) {
    // SAFETY: sending a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
}

/// Waits for a child up to `secs`, killing it after that.
pub fn wait_timeout(child: &mut Child, secs: u64) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return st;
        }
        if t0.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            return child.wait().expect("wait");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Spawns a command with stdout+stderr into `log`.
pub fn spawn_logged(cmd: &str, args: &[&str], log: &Path) -> Child {
    let f = std::fs::File::create(log).expect("log file");
    let f2 = f.try_clone().expect("dup");
    Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(f))
        .stderr(Stdio::from(f2))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd}: {e}"))
}

/// The umem pinning function of this kernel.
pub fn umem_symbol() -> &'static str {
    let k = std::fs::read_to_string("/proc/kallsyms").expect("kallsyms");
    if k.lines()
        .any(|l| l.split_whitespace().nth(2) == Some("ib_umem_get"))
    {
        "ib_umem_get"
    } else {
        "__ib_umem_get_va"
    }
}

pub fn run_output(cmd: &str, args: &[&str]) -> String {
    let o = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    String::from_utf8_lossy(&o.stdout).into_owned()
}
