//! Builds the eBPF object (nightly, bpfel-unknown-none, build-std=core, bpf-linker) and
//! leaves it in OUT_DIR for `include_bytes_aligned!`. `cargo xtask setup` installs what
//! this needs.
//!
//! Every build of this crate (check, clippy, test, release, the fuzz build) has its own
//! OUT_DIR, but the eBPF object does not depend on which: they all share one eBPF build in
//! `<target>/bpf`, so a gate compiles it (and `core` for the BPF target) once, not five
//! times. The nested cargo's lock on that directory keeps concurrent builds of it apart; the
//! copy into OUT_DIR afterwards is not under that lock (two builds of different eBPF sources
//! at once may embed the newer object).
use anyhow::{Context as _, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

const PACKAGE: &str = "rdma-trace-ebpf";
/// The eBPF crate's binary: the object's name in OUT_DIR (see `live/attach.rs`).
const OBJECT: &str = "rdma-trace";

fn main() -> anyhow::Result<()> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = manifest.parent().context("rdma-trace has a parent directory")?;
    // The object is built from these two crates, with the workspace's profile and locked
    // versions (aya-ebpf); a change to any of them builds it again.
    for dir in ["rdma-trace-ebpf", "rdma-trace-common", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", workspace.join(dir).display());
    }
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");
    // A relative CARGO_TARGET_DIR is taken from the workspace root, where cargo (and
    // `cargo xtask`) is run from; the nested build and the copy below use the same path.
    let target_dir = match std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from) {
        Some(d) if d.is_relative() => workspace.join(d),
        Some(d) => d,
        None => workspace.join("target"),
    }
    .join("bpf");
    let endian = std::env::var("CARGO_CFG_TARGET_ENDIAN").context("CARGO_CFG_TARGET_ENDIAN")?;
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").context("CARGO_CFG_TARGET_ARCH")?;
    let target = if endian == "big" { "bpfeb-unknown-none" } else { "bpfel-unknown-none" };

    let mut cargo = Command::new("rustup");
    cargo
        .args(["run", "nightly", "cargo", "build", "--release", "--package", PACKAGE])
        .args(["--bins", "--target", target, "-Z", "build-std=core", "--target-dir"])
        .arg(&target_dir)
        .current_dir(workspace)
        // The flags the BPF build needs, whatever the outer build was given (clippy's
        // wrapper, the fuzz build's sanitizer flags).
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            format!("--cfg=bpf_target_arch=\"{arch}\"\x1f-Cdebuginfo=2\x1f-Clink-arg=--btf"),
        )
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTC")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTUP_TOOLCHAIN");
    let out = cargo.output().context("running rustup (installed by `cargo xtask setup`)")?;
    if !out.status.success() {
        bail!(
            "building the eBPF programs failed; run `cargo xtask setup` (nightly rust-src, \
             bpf-linker)\n{:?}\n{}",
            cargo,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let built = target_dir.join(target).join("release").join(OBJECT);
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").context("OUT_DIR")?);
    // Copy, then rename: a reader of OUT_DIR never sees half an object.
    let partial = out_dir.join(format!("{OBJECT}.partial"));
    std::fs::copy(&built, &partial)
        .with_context(|| format!("copying {} to {}", built.display(), partial.display()))?;
    std::fs::rename(&partial, out_dir.join(OBJECT))?;
    Ok(())
}
