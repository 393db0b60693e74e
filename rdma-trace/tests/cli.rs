//! The command line as a user types it.

use std::process::Command;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_rdma-trace")
}

#[test]
fn without_privileges_one_clear_line_and_nonzero_exit() {
    // As an unprivileged user (nobody, no capabilities).
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--"])
        .args([bin(), "trace", "--duration", "1"])
        .output()
        .expect("setpriv (util-linux, installed by cargo xtask setup)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("needs root (or CAP_BPF and CAP_PERFMON)"), "{err}");
}

#[test]
fn help_teaches_each_subcommand_in_rdma_terms() {
    let out = Command::new(bin()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for want in ["trace", "probes", "story", "replay", "memory pinning", "doorbell", "completion"] {
        assert!(help.contains(want), "--help lacks {want:?}:\n{help}");
    }
    let out = Command::new(bin()).args(["trace", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for want in ["--pid", "--story", "--steps", "lost", "kworker"] {
        assert!(help.contains(want), "trace --help lacks {want:?}:\n{help}");
    }
}

#[test]
fn probes_on_a_kernel_without_rdma_says_so() {
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    let has_rdma = rdma_trace::kernel::Symbols::parse(&kallsyms).has_rdma();
    let out = Command::new(bin()).args(["probes", "--no-attach"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    // This machine's kernel has no RDMA stack; the lab guest's has (lab_probes tests that side).
    assert_eq!(text.contains("no RDMA stack"), !has_rdma, "{text}");
}

#[test]
fn ctrl_c_keeps_every_committed_event() {
    if rdma_trace::privilege::check().is_err() {
        panic!("this test loads eBPF programs: run as root");
    }
    let dir = std::env::temp_dir().join(format!("rdma-trace-ctrlc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cap = dir.join("cap.jsonl");
    // stderr to a file: the traced loop inherits it and outlives the tracer.
    let err_file = dir.join("stderr.txt");
    let mut child = Command::new(bin())
        .args(["trace", "-q", "-o"])
        .arg(&cap)
        .args(["--", "sh", "-c", "while :; do dd if=/dev/zero of=/dev/null bs=1 count=300 2>/dev/null; done"])
        .stderr(std::fs::File::create(&err_file).unwrap())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    child.wait().unwrap();
    let err = std::fs::read_to_string(&err_file).unwrap();
    // The traced loop is still running: stop it.
    if let Some(pid) =
        err.split("(pid ").nth(1).and_then(|r| r.split(')').next()).and_then(|p| p.parse::<i32>().ok())
    {
        // SAFETY: killing the command we started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(err.contains("stopped on SIGINT"), "{err}");
    assert!(!err.contains("never reached"), "{err}");
    let delivered: u64 = err
        .lines()
        .find_map(|l| l.strip_prefix("rdma-trace: ")?.split(" events delivered").next()?.parse().ok())
        .unwrap_or_else(|| panic!("{err}"));
    // Committed = hits − lost (a tight loop of 1-byte dd outruns the reader: the loss is
    // counted and shown, never silent).
    let committed: u64 = err
        .lines()
        .filter(|l| l.trim_start().starts_with("syscalls "))
        .filter_map(|l| {
            let f: Vec<u64> = l.split_whitespace().skip(2).filter_map(|v| v.parse().ok()).collect();
            Some(f.first()? - f.get(1)?)
        })
        .sum();
    let lines = std::fs::read_to_string(&cap).unwrap().lines().count() as u64;
    assert!(delivered > 1000, "{err}");
    assert_eq!((lines, delivered), (committed, committed), "file lines, delivered vs committed:\n{err}");
    std::fs::remove_dir_all(dir).ok();
}
