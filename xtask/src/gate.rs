//! `cargo xtask test`: the one gate, the same locally and in CI.

use crate::util::{self, step};
use anyhow::Result;

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
    step("gate: cargo deny check licenses bans (policy: deny.toml)");
    let mut deny = std::process::Command::new(crate::setup::cargo_deny_path());
    deny.current_dir(util::workspace_root()).args(["check", "licenses", "bans"]);
    util::run(&mut deny)?;
    step("gate: host tests");
    util::run(util::cargo().args(["test"]))?;
    step("gate: fuzz the capture reader (60 s)");
    crate::fuzz::run(&crate::fuzz::FuzzArgs { seconds: 60 })?;
    step("gate: story memory on a 10 M-event stream");
    crate::memory::run(&crate::memory::MemoryArgs { events: 10_000_000, max_mib: 100 })?;
    if no_lab {
        step("gate: lab tests skipped (--no-lab)");
        return Ok(());
    }
    step("gate: lab tests (QEMU, every kernel series)");
    crate::lab::vm_test(crate::lab::VmTestArgs::default())
}
