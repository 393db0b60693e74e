//! Builds the eBPF object (nightly, bpfel-unknown-none, bpf-linker) and leaves it in
//! OUT_DIR for `include_bytes_aligned!`. `cargo xtask setup` installs what this needs.
use anyhow::Context as _;

fn main() -> anyhow::Result<()> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("rdma-trace has a parent directory")?
        .join("rdma-trace-ebpf");
    let root = root.to_str().context("workspace path is not UTF-8")?;
    let pkg = aya_build::Package { name: "rdma-trace-ebpf", root_dir: root, ..Default::default() };
    aya_build::build_ebpf([pkg], aya_build::Toolchain::default())
        .context("building the eBPF programs failed; run `cargo xtask setup` (nightly rust-src, bpf-linker)")
}
