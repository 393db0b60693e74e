//! `cargo xtask build --target aarch64`: the tracer and the companion for another
//! architecture, built on this x86-64 host with what setup installs and nothing fetched
//! from elsewhere: the nightly's `rust-src` builds the target's std (`-Z build-std`, as
//! no prebuilt arm64 std is installed), Debian's cross gcc links and builds the verbs
//! shim, and bindgen reads the cross libc's headers. The eBPF programs are built inside
//! (rdma-trace's build.rs, aya-build) for the target's `pt_regs`: aya-build sets
//! `bpf_target_arch` from the target. A quick run of each binary under `qemu-aarch64`
//! (user mode, no binfmt) shows they start.

use crate::util::{self, step};
use anyhow::{Result, bail};
use std::path::PathBuf;
use std::process::Command;

#[derive(clap::Args)]
pub struct BuildArgs {
    /// The architecture to build for.
    #[arg(long, value_enum, default_value_t = Target::Aarch64)]
    pub target: Target,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Target {
    /// arm64 (Grace, BlueField, Graviton): aarch64-unknown-linux-gnu.
    Aarch64,
}

impl Target {
    pub fn triple(self) -> &'static str {
        match self {
            Target::Aarch64 => "aarch64-unknown-linux-gnu",
        }
    }
    /// Debian's GNU prefix of the cross tools and the cross libc's root.
    fn gnu(self) -> &'static str {
        match self {
            Target::Aarch64 => "aarch64-linux-gnu",
        }
    }
    fn qemu_user(self) -> &'static str {
        match self {
            Target::Aarch64 => "qemu-aarch64",
        }
    }
}

/// The binaries a lab guest of that architecture runs.
pub const BINS: [&str; 2] = ["rdma-trace", "rdma-trace-workload"];

/// `cargo SUBCOMMAND` of the nightly for `target`, with the cross tools and the target's
/// std built from source; `args` go after the target.
pub fn cargo(target: Target, subcommand: &str, args: &[&str]) -> Command {
    let (triple, gnu) = (target.triple(), target.gnu());
    let under = |s: &str| s.replace('-', "_");
    let mut cmd = Command::new("rustup");
    cmd.current_dir(util::workspace_root())
        .args(["run", "nightly", "cargo", subcommand])
        .args(["-Z", "build-std=std,panic_abort", "--target", triple])
        .args(args)
        .env(format!("CARGO_TARGET_{}_LINKER", under(triple).to_uppercase()), format!("{gnu}-gcc"))
        .env(format!("CC_{}", under(triple)), format!("{gnu}-gcc"))
        .env(format!("AR_{}", under(triple)), format!("{gnu}-ar"))
        .env(format!("BINDGEN_EXTRA_CLANG_ARGS_{}", under(triple)), format!("--sysroot=/usr/{gnu}"));
    // The stable toolchain's cargo may have set these for an xtask run; the nightly's own
    // are wanted.
    for var in ["RUSTC", "RUSTDOC", "CARGO", "RUSTUP_TOOLCHAIN"] {
        cmd.env_remove(var);
    }
    cmd
}

/// Runs `exe` (built for `target`) here under QEMU's user mode with `args`.
pub fn emulated(target: Target, exe: &std::path::Path) -> Command {
    let mut c = Command::new(target.qemu_user());
    c.arg("-L").arg(format!("/usr/{}", target.gnu())).arg(exe);
    c
}

/// Builds the release binaries for `target`; returns their directory.
pub fn run(a: &BuildArgs) -> Result<PathBuf> {
    crate::setup::for_cross()?;
    let triple = a.target.triple();
    step(&format!("build: rdma-trace and the companion for {triple} (nightly, -Z build-std)"));
    util::run(&mut cargo(a.target, "build", &["--release", "-p", "rdma-trace", "--bins"]))?;
    let dir = util::workspace_root().join("target").join(triple).join("release");
    for bin in BINS {
        let path = dir.join(bin);
        let out = util::output(emulated(a.target, &path).arg("--version"))?;
        if out.trim().is_empty() {
            bail!("{} --version printed nothing under {}", path.display(), a.target.qemu_user());
        }
        step(&format!("build: {} runs under {}: {}", path.display(), a.target.qemu_user(), out.trim()));
    }
    Ok(dir)
}
