//! The soft-RoCE lab: Debian's own kernels under QEMU with a real RDMA stack (rdma_rxe on a
//! dummy netdev), for `cargo xtask lab`, `vm-test` and `demo`.
//!
//! Layout: `kernels` resolves and fetches the newest kernel of each series, `image` builds
//! the guest root and one initrd per kernel (all cached outside the checkout, see `cache`),
//! `qemu` boots it. Per-run files (the entry script, the script to run, the binaries under
//! test) go through the 9p share `target/lab` → `/mnt/host`, so code changes never rebuild
//! the image. Outputs stay in `target/lab/out/<series>/`.

pub mod bench;
mod cache;
mod demo;
mod image;
mod kernels;
mod qemu;
mod vmtest;

use crate::util::{self, step};
use anyhow::{Context, Result, bail};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use demo::demo;
pub use vmtest::{soak, vm_test};

/// The per-run entry script (runs in the guest from the share).
const ENTRY_SH: &str = include_str!("guest/entry.sh");

/// A Debian kernel series; the newest kernel of it is resolved at run time.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Series {
    /// Debian trixie's own kernel (linux-image-*-amd64-unsigned).
    Trixie,
    /// The newest kernel in trixie-backports (linux-binary-*, linux-modules-*, linux-base-*).
    TrixieBackports,
    /// Debian bookworm's own kernel (6.1; linux-image-*-amd64-unsigned), under the same
    /// trixie guest. An extra series, not in the gate: soft-RoCE there still runs its work
    /// in tasklets, so a completion can run inside the poster's own write(2).
    Bookworm,
    /// Debian trixie's own arm64 kernel (linux-image-*-arm64-unsigned) under
    /// qemu-system-aarch64 (TCG), in an arm64 guest root: the arm64 lab.
    TrixieArm64,
}

impl Series {
    /// The x86-64 series the gate tests in full (`vm-test`, `bench` without `--kernel`).
    pub const ALL: [Series; 2] = [Series::Trixie, Series::TrixieBackports];
    /// What `vm-test` (the gate's lab tests) runs without `--kernel`: those, and the arm64
    /// guest's group (`vmtest::ARM64_GROUP`).
    pub const GATE: [Series; 3] = [Series::Trixie, Series::TrixieBackports, Series::TrixieArm64];

    pub fn name(self) -> &'static str {
        match self {
            Series::Trixie => "trixie",
            Series::TrixieBackports => "trixie-backports",
            Series::Bookworm => "bookworm",
            Series::TrixieArm64 => "trixie-arm64",
        }
    }

    /// The archive suites that carry this series.
    pub fn suites(self) -> &'static [&'static str] {
        match self {
            Series::Trixie | Series::TrixieArm64 => &["trixie", "trixie-security", "trixie-updates"],
            Series::TrixieBackports => &["trixie-backports"],
            Series::Bookworm => &["bookworm", "bookworm-security", "bookworm-updates"],
        }
    }

    /// The guest's architecture.
    pub fn arch(self) -> Arch {
        match self {
            Series::TrixieArm64 => Arch::Arm64,
            _ => Arch::X86_64,
        }
    }
}

/// A guest architecture: its kernel flavour, its QEMU and its binaries.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Arch {
    X86_64,
    Arm64,
}

impl Arch {
    /// Debian's architecture name (and kernel flavour).
    pub fn debian(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }
    /// Where the host's release build of the tracer and the companion is.
    pub fn release_dir(self) -> PathBuf {
        match self {
            Arch::X86_64 => util::workspace_root().join("target/release"),
            Arch::Arm64 => util::workspace_root().join("target/aarch64-unknown-linux-gnu/release"),
        }
    }
    /// The share's directory of this architecture's binaries (`/mnt/host/<it>` in the guest;
    /// entry.sh picks it by `uname -m`).
    pub fn bin_dir(self) -> &'static str {
        match self {
            Arch::X86_64 => "bin",
            Arch::Arm64 => "bin-aarch64",
        }
    }
}

#[derive(clap::Args, Default)]
pub struct LabArgs {
    /// Run SCRIPT in the guest after the set-up, without a console; exit with its exit code.
    #[arg(long, value_name = "SCRIPT")]
    pub run: Option<PathBuf>,
    /// Kernel series to boot [default: trixie-backports, the newest].
    #[arg(long, value_enum, value_name = "SERIES")]
    pub kernel: Option<Series>,
    /// Timeout of a `--run` boot, in seconds [default: 1200].
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Guests: 2 boots a pair joined by a virtual Ethernet wire, each with its own kernel
    /// and soft-RoCE device (10.0.0.1 and 10.0.0.2, one vCPU each); needs `--run`, which
    /// both run (`LAB_HOST` is 1 or 2, `LAB_PEER` the other's address).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub hosts: u8,
}

#[derive(clap::Args, Default)]
pub struct VmTestArgs {
    /// Kernel series to test (repeatable) [default: trixie and trixie-backports in full,
    /// and trixie-arm64's group].
    #[arg(long, value_enum, value_name = "SERIES")]
    pub kernel: Vec<Series>,
    /// Timeout of each boot, in seconds [default: 2700; soaks 5400].
    #[arg(long, value_name = "SECS")]
    pub boot_timeout: Option<u64>,
    /// Timeout of the whole run, in seconds [default: 4800; soaks 9000].
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Only the lab tests whose names contain this, or one of these (comma-separated), for
    /// iterating on a few tests; the gate runs them all.
    #[arg(long, value_name = "SUBSTRING")]
    pub only: Option<String>,
    /// Run them this many times in a row, each round a boot of its own per kernel (for a
    /// flaky test: `--only pair_ --repeat 5`); every round's result and time is printed,
    /// and a test passes only if it passed in every round.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub repeat: u32,
}

#[derive(clap::Args, Default)]
pub struct DemoArgs {
    /// Kernel series to boot [default: trixie-backports, the newest].
    #[arg(long, value_enum, value_name = "SERIES")]
    pub kernel: Option<Series>,
    /// Timeout of the boot, in seconds [default: 900] (the text demo).
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// The text stream on the console instead of the TUI (what runs without a terminal).
    #[arg(long)]
    pub text: bool,
    /// 2: two guests on a wire, a daemon in each (each measuring the other's clock), the
    /// perftest and rping pairs split across them, both on one TUI (needs a terminal).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub hosts: u8,
}

/// A kernel ready to boot.
pub struct Guest {
    pub series: Series,
    pub kver: String,
    image: image::Image,
}

/// Fetches the kernels and builds the images (under the cache lock).
pub fn prepare(series: &[Series]) -> Result<Vec<Guest>> {
    if series.iter().any(|s| s.arch() == Arch::Arm64) {
        crate::setup::for_cross()?;
    }
    let _lock = cache::lock()?;
    step(&format!("lab: cache {}", cache::root().display()));
    let kernels = kernels::resolve(series)?;
    let mut roots: Vec<(Arch, image::RootFs)> = Vec::new();
    let mut out = Vec::new();
    for k in kernels {
        let arch = k.series.arch();
        if !roots.iter().any(|(a, _)| *a == arch) {
            let rootfs = image::ensure_rootfs(&kernels::mirror()?, arch)?;
            step(&format!("lab: {} guest package versions: {}", arch.debian(), rootfs.packages.display()));
            roots.push((arch, rootfs));
        }
        let (_, rootfs) = roots.iter().find(|(a, _)| *a == arch).context("a root per arch")?;
        let image = image::ensure_image(rootfs, &k)?;
        out.push(Guest { series: k.series, kver: k.kver.clone(), image });
    }
    Ok(out)
}

/// The host side of the 9p share.
pub fn share_dir() -> PathBuf {
    util::workspace_root().join("target/lab")
}

/// Host directory of a series' outputs (`/mnt/host/out/<series>` in the guest).
pub fn out_dir(series: Series) -> PathBuf {
    share_dir().join("out").join(series.name())
}

/// Host directory of the outputs of guest `host` of a pair (its `LAB_OUT`).
pub fn pair_out_dir(series: Series, host: u8) -> PathBuf {
    out_dir(series).join("pair").join(format!("host{host}"))
}

/// Copies a host-built binary into the share's `bin/` (never into the image).
pub fn share_binary(src: &Path, name: &str) -> Result<PathBuf> {
    share_binary_for(Arch::X86_64, src, name)
}

/// `share_binary` into the directory of `arch`'s binaries.
pub fn share_binary_for(arch: Arch, src: &Path, name: &str) -> Result<PathBuf> {
    let dst = share_dir().join(arch.bin_dir()).join(name);
    fs::create_dir_all(dst.parent().context("a bin dir")?)?;
    fs::remove_file(&dst).ok();
    fs::copy(src, &dst).with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
    Ok(dst)
}

/// What the guest does after the RDMA set-up.
pub enum Mode<'a> {
    /// A shell on the console (the terminal).
    Shell,
    /// Run this script (contents), with extra files placed beside it in the run dir.
    Script { script: &'a str, files: &'a [(&'a str, String)], timeout: Duration, log: &'a str },
}

/// Boots `g` once. Returns the script's exit code (None for the shell).
pub fn run_guest(g: &Guest, mode: Mode) -> Result<Option<i32>> {
    run_guest_with(g, mode, &qemu::Extras::default())
}

/// `run_guest` with a virtio port, the console off the terminal, or a stop from the host
/// (a guest stopped by the host reports exit 0).
pub fn run_guest_with(g: &Guest, mode: Mode, extras: &qemu::Extras) -> Result<Option<i32>> {
    let share = share_dir();
    let host = extras.wire.map(|w| format!("-host{}", w.host)).unwrap_or_default();
    let id = format!("{}-{}{host}", g.series.name(), std::process::id());
    let run = share.join("run").join(&id);
    cache::remove(&run)?;
    fs::create_dir_all(&run)?;
    fs::create_dir_all(out_dir(g.series))?;
    let guest_run = format!("/mnt/host/run/{id}");
    // A guest of a pair writes its outputs beside its peer's, each in its own directory.
    let out = extras.wire.map_or_else(|| out_dir(g.series), |w| pair_out_dir(g.series, w.host));
    fs::create_dir_all(&out)?;
    let out = out.strip_prefix(&share).context("outputs are in the share")?.display().to_string();
    let mut env = format!("LAB_SERIES='{}'\nLAB_OUT='/mnt/host/{out}'\n", g.series.name());
    if let Some(w) = extras.wire {
        let peer = 3 - w.host;
        env.push_str(&format!("LAB_HOST={}\nLAB_PEER=10.0.0.{peer}\nLAB_MAC={}\n", w.host, w.mac()));
        env.push_str(&format!("LAB_SYNC=/mnt/host/run/{}\n", pair_dir_name(g)));
    }
    fs::write(run.join("entry.sh"), ENTRY_SH)?;
    let (interactive, timeout, log) = match &mode {
        Mode::Shell => {
            let (rows, cols) = terminal_size().unwrap_or((24, 80));
            let term = std::env::var("TERM").unwrap_or_else(|_| "vt100".into());
            let term: String = term.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
            env.push_str(&format!("LAB_MODE=shell\nLAB_ROWS={rows}\nLAB_COLS={cols}\nLAB_TERM='{term}'\n"));
            (true, Duration::MAX, None)
        }
        Mode::Script { script, files, timeout, log } => {
            fs::write(run.join("script"), script)?;
            for (name, text) in files.iter() {
                fs::write(run.join(name), text)?;
            }
            env.push_str(&format!("LAB_MODE=script\nLAB_SCRIPT='{guest_run}/script'\n"));
            (false, *timeout, Some(out_dir(g.series).join(log)))
        }
    };
    fs::write(run.join("env"), env)?;
    step(&format!("lab: {} kernel {}", g.series.name(), g.kver));
    let boot = qemu::Boot {
        arch: g.series.arch(),
        vmlinuz: &g.image.vmlinuz,
        initrd: &g.image.initrd,
        share: &share,
        append: format!("lab.entry={guest_run}/entry.sh"),
        interactive,
        timeout,
        console_log: log.clone(),
        extras,
    };
    let mut res = qemu::boot(&boot);
    if let Err(e) = &res
        && let Some(early) = e.downcast_ref::<qemu::EarlyFailure>()
    {
        let first = early.0.lines().next().unwrap_or_default();
        step(&format!("lab: the guest failed before its userspace started ({first}); booting once more"));
        res = qemu::boot(&boot);
    }
    let rc = fs::read_to_string(run.join("rc")).ok();
    cache::remove(&run)?;
    let outcome = res?;
    step(&format!(
        "lab: guest {} ({}) powered off after {:.1} s{}",
        g.series.name(),
        g.kver,
        outcome.elapsed.as_secs_f64(),
        log.map(|l| format!("; console saved to {}", l.display())).unwrap_or_default()
    ));
    for o in &outcome.oopses {
        step(&format!("lab: WARNING: the guest kernel reported: {o}"));
    }
    if interactive {
        return Ok(None);
    }
    if extras.stop.as_ref().is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed)) {
        return Ok(Some(0));
    }
    match rc.as_deref().map(str::trim) {
        None => bail!("the guest reported no exit code (see the console above)"),
        Some("setup-failed") => {
            bail!("the guest's RDMA set-up (modules, rxe0) failed; see the console above")
        }
        Some(s) => Ok(Some(s.parse().with_context(|| format!("bad exit code from the guest: {s:?}"))?)),
    }
}

/// The host terminal's size (the guest cannot ask for it over a serial line).
fn terminal_size() -> Option<(u16, u16)> {
    let tty = fs::File::open("/dev/tty").ok()?;
    let out = std::process::Command::new("stty").arg("size").stdin(tty).output().ok()?;
    let s = String::from_utf8_lossy(&out.stdout);
    let mut it = s.split_whitespace().filter_map(|w| w.parse().ok()).filter(|n: &u16| *n > 0);
    Some((it.next()?, it.next()?))
}

/// `cargo xtask lab`: a shell in the guest, or `--run SCRIPT` non-interactively.
pub fn lab(a: LabArgs) -> Result<()> {
    let series = a.kernel.unwrap_or(Series::TrixieBackports);
    let script = match &a.run {
        Some(p) => Some(fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?),
        None => None,
    };
    let guests = prepare(&[series])?;
    let g = &guests[0];
    let arch = g.series.arch();
    let bin = arch.release_dir().join("rdma-trace");
    if bin.is_file() {
        share_binary_for(arch, &bin, "rdma-trace")?;
        step(&format!(
            "lab: /mnt/host/{}/rdma-trace is the last release build ({})",
            arch.bin_dir(),
            match arch {
                Arch::X86_64 => "cargo build --release -p rdma-trace",
                Arch::Arm64 => "cargo xtask build --target aarch64",
            }
        ));
    }
    let workload = bin.with_file_name("rdma-trace-workload");
    if workload.is_file() {
        share_binary_for(arch, &workload, "rdma-trace-workload")?;
    }
    let Some(script) = script else {
        if a.hosts == 2 {
            bail!("--hosts 2 needs --run SCRIPT: the console is one terminal");
        }
        run_guest(g, Mode::Shell)?;
        return Ok(());
    };
    let timeout = Duration::from_secs(a.timeout.unwrap_or(1200));
    if a.hosts == 2 {
        let [a1, a2] = run_pair(g, &script, &[], timeout, "lab-run")?;
        step(&format!("lab: the script exited with {a1} on host 1 and {a2} on host 2"));
        if a1 != 0 || a2 != 0 {
            std::process::exit(if a1 != 0 { a1 } else { a2 });
        }
        return Ok(());
    }
    let rc = run_guest(g, Mode::Script { script: &script, files: &[], timeout, log: "lab-run.console.log" })?
        .unwrap_or(0);
    step(&format!("lab: the script exited with {rc}"));
    if rc != 0 {
        std::process::exit(rc);
    }
    Ok(())
}

/// The run directory both guests of a pair share (`LAB_SYNC`): files one writes, the other
/// sees (`lab_wait` in the guest scripts).
fn pair_dir_name(g: &Guest) -> String {
    format!("{}-{}-pair", g.series.name(), std::process::id())
}

/// Boots two guests of `g`'s kernel joined by a wire, both running `script` (with
/// `LAB_HOST` 1 or 2); returns each one's exit code, host 1's first. The guests meet through
/// the network or through files in the share (`/mnt/host/out/…`).
pub fn run_pair(
    g: &Guest,
    script: &str,
    files: &[(&str, String)],
    timeout: Duration,
    log: &str,
) -> Result<[i32; 2]> {
    run_pair_with(g, script, files, timeout, log, &|host| qemu::Extras {
        console_off_terminal: host == 2,
        ..Default::default()
    })
}

/// `run_pair` with what else each guest needs (`extras(host)`; its wire is set here).
pub fn run_pair_with(
    g: &Guest,
    script: &str,
    files: &[(&str, String)],
    timeout: Duration,
    log: &str,
    extras: &(dyn Fn(u8) -> qemu::Extras + Sync),
) -> Result<[i32; 2]> {
    // Two UDP ports on the loopback, per run (a second lab on this machine picks others).
    let base = 20_000 + (std::process::id() % 20_000) as u16 * 2;
    let wire = |host: u8| qemu::Wire {
        host,
        port: base + u16::from(host) - 1,
        peer_port: base + 2 - u16::from(host),
    };
    let logs = [format!("{log}.host1.console.log"), format!("{log}.host2.console.log")];
    let sync = share_dir().join("run").join(pair_dir_name(g));
    cache::remove(&sync)?;
    fs::create_dir_all(&sync)?;
    // A guest whose peer is gone waits for nothing that will come (a server for its client):
    // once one guest has ended, the other gets PEER_GRACE to finish, then is powered off;
    // once one has failed (a crash, a timeout), the other is powered off at once.
    // (Only where the caller has no stop of its own: the demo stops both itself.)
    let own_stop: [Arc<AtomicBool>; 2] = Default::default();
    let owned = [1u8, 2].map(|host| extras(host).stop.is_none());
    let cut_off: [AtomicBool; 2] = Default::default();
    let (ended_tx, ended_rx) = std::sync::mpsc::channel::<(u8, bool)>();
    let results = std::thread::scope(|s| {
        let runs: Vec<_> = [1u8, 2]
            .into_iter()
            .map(|host| {
                let mut extras = qemu::Extras { wire: Some(wire(host)), ..extras(host) };
                extras.stop.get_or_insert_with(|| own_stop[usize::from(host) - 1].clone());
                let log = &logs[usize::from(host) - 1];
                let ended = ended_tx.clone();
                s.spawn(move || {
                    let mode = Mode::Script { script, files, timeout, log };
                    let r = run_guest_with(g, mode, &extras);
                    ended.send((host, r.is_err())).ok();
                    r
                })
            })
            .collect();
        drop(ended_tx);
        let (own_stop, cut_off, owned) = (&own_stop, &cut_off, &owned);
        s.spawn(move || {
            let Ok((first, failed)) = ended_rx.recv() else { return };
            let other = 3 - first;
            if !owned[usize::from(other) - 1] {
                return;
            }
            if failed {
                step(&format!("lab: host {first} failed: powering host {other} off"));
                own_stop[usize::from(other) - 1].store(true, Ordering::Relaxed);
                return;
            }
            if ended_rx.recv_timeout(PEER_GRACE) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                step(&format!(
                    "lab: host {first} ended {} s ago and host {other} is still running: powering it off",
                    PEER_GRACE.as_secs()
                ));
                cut_off[usize::from(other) - 1].store(true, Ordering::Relaxed);
                own_stop[usize::from(other) - 1].store(true, Ordering::Relaxed);
            }
        });
        runs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("its thread panicked"))))
            .collect::<Vec<_>>()
    });
    cache::remove(&sync)?;
    // Both guests' outcomes, whichever failed (the first error alone hid the peer's).
    let mut rcs = [0; 2];
    let mut failures = Vec::new();
    let mut crash: Option<qemu::GuestCrash> = None;
    for (i, r) in results.into_iter().enumerate() {
        match r {
            _ if cut_off[i].load(Ordering::Relaxed) => failures.push(format!(
                "host {}: powered off {} s after its peer ended (it was waiting on the peer)",
                i + 1,
                PEER_GRACE.as_secs()
            )),
            Ok(rc) => rcs[i] = rc.unwrap_or(0),
            Err(e) => {
                failures.push(format!("host {}: {e:#}", i + 1));
                if let Some(c) = e.downcast_ref::<qemu::GuestCrash>() {
                    let seen = crash.get_or_insert(qemu::GuestCrash {
                        in_tracing: false,
                        at: None,
                        msg: String::new(),
                    });
                    seen.in_tracing |= c.in_tracing;
                    seen.at = seen.at.take().or_else(|| c.at.clone());
                }
            }
        }
    }
    if !failures.is_empty() {
        let msg = failures.join("\n");
        // A crashed guest stays a crash for the caller, who may boot the pair again.
        return Err(match crash {
            Some(c) => qemu::GuestCrash { msg, ..c }.into(),
            None => anyhow::anyhow!(msg),
        });
    }
    Ok(rcs)
}

/// How long a guest of a pair may go on after its peer has ended.
const PEER_GRACE: Duration = Duration::from_secs(600);
