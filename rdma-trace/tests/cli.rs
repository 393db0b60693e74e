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
