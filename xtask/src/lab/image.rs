//! The guest image: a Debian trixie root (debootstrap, minbase + `GUEST_PACKAGES`), trimmed,
//! packed whole as the initramfs, plus one cpio of each kernel's modules (the kernel accepts
//! concatenated newc archives). The root is keyed by its inputs; an initrd by root + kernel.
//!
//! The arm64 root (`ARM64_GUEST_PACKAGES`) is made on this x86-64 host without binfmt:
//! debootstrap's first stage (`--foreign`) resolves and downloads the packages and unpacks
//! the essential ones, then every package is unpacked here with dpkg-deb. No maintainer
//! script runs: the lab needs files, not configuration (the users and groups are copied
//! from base-passwd's masters; the dynamic linker finds the multiarch directories itself;
//! depmod runs on the host).

use super::Arch;
use super::cache::{self, Timer};
use super::kernels::Kernel;
use crate::setup::{ARM64_GUEST_PACKAGES, GUEST_PACKAGES};
use crate::util::{self, step};
use anyhow::{Context, Result, bail};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const SUITE: &str = "trixie";
/// PID 1 of the guest, baked into the root (everything that changes often lives in the share).
pub const INIT_SH: &str = include_str!("guest/init.sh");
/// Bump when the way the image is built changes in a way the other inputs do not show.
const FORMAT: &str = "rdma-trace-lab-image-1";

/// What the lab never needs in the root: documentation, locales, apt's caches.
const ROOT_TRIM: &[&str] = &[
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/lintian",
    "usr/share/bug",
    "var/cache/apt",
    "var/lib/apt/lists",
    "var/cache/debconf",
    "var/log",
];

/// Module trees the lab never loads (relative to `kernel/`): they only slow the boot.
const MODULE_TRIM: &[&str] = &[
    "drivers/gpu",
    "drivers/media",
    "sound",
    "drivers/net/wireless",
    "net/wireless",
    "net/mac80211",
    "drivers/staging",
    "drivers/bluetooth",
    "net/bluetooth",
    "drivers/iio",
    "drivers/usb",
    "drivers/hid",
    "drivers/input",
    "drivers/isdn",
    "drivers/scsi",
    "drivers/mtd",
    "drivers/net/can",
    "drivers/net/usb",
    "drivers/thunderbolt",
    "drivers/firewire",
    "drivers/platform/x86",
];

/// The built root: its key, its tree, the base cpio and the package versions.
pub struct RootFs {
    pub key: String,
    arch: Arch,
    dir: PathBuf,
    pub packages: PathBuf,
}

impl RootFs {
    fn tree(&self) -> PathBuf {
        self.dir.join("root")
    }
    fn base_cpio(&self) -> PathBuf {
        self.dir.join("base.cpio")
    }
}

/// A bootable pair for one kernel.
pub struct Image {
    pub vmlinuz: PathBuf,
    pub initrd: PathBuf,
}

fn package_names(arch: Arch) -> Vec<&'static str> {
    let list = match arch {
        Arch::X86_64 => GUEST_PACKAGES,
        Arch::Arm64 => ARM64_GUEST_PACKAGES,
    };
    let mut v: Vec<&str> = list.iter().map(|(p, _)| *p).collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn rootfs_key(arch: Arch) -> String {
    let pkgs = package_names(arch).join(",");
    let trim = ROOT_TRIM.join(",");
    let mut parts: Vec<&[u8]> =
        vec![FORMAT.as_bytes(), SUITE.as_bytes(), pkgs.as_bytes(), INIT_SH.as_bytes(), trim.as_bytes()];
    // The x86-64 key is what it was before arm64 came: its cached roots stay valid.
    if arch == Arch::Arm64 {
        parts.push(ARM64_FORMAT.as_bytes());
    }
    cache::key(&parts)
}

/// Bump when the arm64 root's making changes in a way the other inputs do not show.
const ARM64_FORMAT: &str = "arm64-unpacked-on-the-host-3";

fn sh(script: &str, dir: &Path) -> Result<()> {
    util::run(Command::new("sh").args(["-euc", script]).current_dir(dir))
}

/// The guest root for the current inputs: built once, reused until an input changes.
pub fn ensure_rootfs(mirror: &str, arch: Arch) -> Result<RootFs> {
    let key = rootfs_key(arch);
    let dir = cache::root().join("rootfs").join(&key);
    let rootfs = RootFs { key: key.clone(), arch, packages: dir.join("packages.txt"), dir: dir.clone() };
    if cache::is_complete(&dir) {
        step(&format!("lab: guest root {key}: cached in {}", dir.display()));
        return Ok(rootfs);
    }
    if !util::is_root() {
        bail!(
            "building the guest root needs root (debootstrap, chroot); run as root once, then it is cached"
        );
    }
    cache::remove(&dir)?;
    fs::create_dir_all(&dir)?;
    let tree = rootfs.tree();
    let versions = match arch {
        Arch::X86_64 => debootstrapped(&tree, mirror)?,
        Arch::Arm64 => unpacked_arm64(&tree, mirror)?,
    };
    let _t = Timer::start("trimming and packing the guest root");
    fs::write(&rootfs.packages, versions)?;
    for t in ROOT_TRIM {
        cache::remove(&tree.join(t))?;
    }
    fs::create_dir_all(tree.join("mnt/host"))?;
    let init = tree.join("init");
    fs::write(&init, INIT_SH)?;
    sh("chmod 755 init", &tree)?;
    // Everything but the module trees, which come per kernel.
    let out = rootfs.base_cpio();
    sh(
        &format!(
            "find . -path ./usr/lib/modules -prune -o -print | cpio -o -H newc -R 0:0 --quiet > '{}'",
            out.display()
        ),
        &tree,
    )?;
    step(&format!("lab: base cpio {} ({})", out.display(), cache::size_mb(&out)));
    cache::mark_complete(&dir)?;
    Ok(rootfs)
}

/// Runs debootstrap for `arch`'s root into `tree`: both stages for x86-64, the first
/// (`--foreign`) for arm64, which cannot run here (see the module's comment).
fn debootstrap(tree: &Path, mirror: &str, arch: Arch) -> Result<()> {
    let (debs, flags): (&str, &[&str]) = match arch {
        Arch::X86_64 => ("debootstrap-debs", &["--variant=minbase"]),
        Arch::Arm64 => ("debootstrap-debs-arm64", &["--foreign", "--arch=arm64", "--variant=minbase"]),
    };
    let debs = cache::root().join(debs);
    fs::create_dir_all(&debs)?;
    let names = package_names(arch);
    let _t = Timer::start(format!("debootstrap {} of the {} guest root", flags.join(" "), arch.debian()));
    step(&format!(
        "lab: debootstrap {} {SUITE} with {} (downloads cached in {})",
        flags.join(" "),
        names.join(" "),
        debs.display()
    ));
    util::run(
        Command::new("debootstrap")
            .args(flags)
            .arg(format!("--include={}", names.join(",")))
            .arg(format!("--cache-dir={}", debs.display()))
            .arg(SUITE)
            .arg(tree)
            .arg(mirror),
    )
}

/// The x86-64 root: debootstrap, both stages, here. Returns the package versions.
fn debootstrapped(tree: &Path, mirror: &str) -> Result<String> {
    debootstrap(tree, mirror, Arch::X86_64)?;
    util::output(Command::new("chroot").arg(tree).args([
        "dpkg-query",
        "-W",
        "-f",
        "${Package} ${Version}\\n",
    ]))
}

/// The arm64 root: debootstrap's first stage, then every package it chose unpacked here
/// (see the module's comment). Returns the package versions (from the files' names).
fn unpacked_arm64(tree: &Path, mirror: &str) -> Result<String> {
    debootstrap(tree, mirror, Arch::Arm64)?;
    let _t = Timer::start("unpacking the arm64 packages");
    // "package /var/cache/apt/archives/package_version_arm64.deb", one a line.
    let list = fs::read_to_string(tree.join("debootstrap/debpaths")).context("debootstrap's debpaths")?;
    let mut versions = String::new();
    for line in list.lines() {
        let Some((pkg, path)) = line.split_once(' ') else { continue };
        let deb = tree.join(path.trim_start_matches('/'));
        // Into the merged /usr the first stage made: keep its directory symlinks.
        sh(
            &format!(
                "dpkg-deb --fsys-tarfile '{}' | tar -x --keep-directory-symlink -C '{}'",
                deb.display(),
                tree.display()
            ),
            tree,
        )?;
        let file = deb.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let version = file.split('_').nth(1).unwrap_or("?").replace("%3a", ":");
        versions.push_str(&format!("{pkg} {version}\n"));
    }
    for (master, etc) in [("passwd.master", "passwd"), ("group.master", "group")] {
        let to = tree.join("etc").join(etc);
        if !to.exists() {
            fs::copy(tree.join("usr/share/base-passwd").join(master), &to)
                .with_context(|| format!("/etc/{etc}"))?;
        }
    }
    // What update-alternatives would have linked (no maintainer script ran): awk.
    let awk = tree.join("usr/bin/awk");
    if !awk.exists() && awk.with_file_name("mawk").exists() {
        std::os::unix::fs::symlink("mawk", &awk)?;
    }
    // The first stage links the host's /proc into the root where it cannot mount one.
    for d in ["proc", "sys"] {
        let p = tree.join(d);
        if p.is_symlink() {
            fs::remove_file(&p)?;
            fs::create_dir_all(&p)?;
        }
    }
    cache::remove(&tree.join("debootstrap"))?;
    cache::remove(&tree.join("var/cache/apt/archives"))?;
    step(&format!("lab: arm64 root: {} packages unpacked", versions.lines().count()));
    Ok(versions)
}

/// The initrd of `kernel` on `rootfs`: built once per (root, kernel).
pub fn ensure_image(rootfs: &RootFs, kernel: &Kernel) -> Result<Image> {
    let kver = &kernel.kver;
    let ikey = cache::key(&[rootfs.key.as_bytes(), kver.as_bytes(), MODULE_TRIM.join(",").as_bytes()]);
    let dir = cache::root().join("images").join(format!("{kver}-{ikey}"));
    let img = Image { vmlinuz: dir.join("vmlinuz"), initrd: dir.join("initrd.cpio") };
    if cache::is_complete(&dir) {
        step(&format!(
            "lab: initrd for {kver}: cached ({}, {})",
            img.initrd.display(),
            cache::size_mb(&img.initrd)
        ));
        return Ok(img);
    }
    let _t = Timer::start(format!("building the initrd for {kver}"));
    cache::remove(&dir)?;
    fs::create_dir_all(&dir)?;
    let tree = rootfs.tree();
    let mods = tree.join("usr/lib/modules").join(kver);
    cache::remove(&mods)?;
    fs::create_dir_all(mods.parent().context("modules dir has a parent")?)?;
    util::run(Command::new("cp").arg("-a").arg(kernel.modules_dir()).arg(&mods))?;
    for t in MODULE_TRIM {
        cache::remove(&mods.join("kernel").join(t))?;
    }
    match rootfs.arch {
        // The host may have no kmod: run the guest's depmod on the guest's tree.
        Arch::X86_64 => util::run(Command::new("chroot").arg(&tree).args(["depmod", kver]))?,
        // The arm64 tree cannot run here: the host's depmod (setup installs kmod for it).
        Arch::Arm64 => util::run(Command::new("depmod").arg("-b").arg(&tree).arg(kver))?,
    }
    let mods_cpio = dir.join("modules.cpio");
    sh(
        &format!(
            "{{ printf 'usr\\nusr/lib\\nusr/lib/modules\\n'; find 'usr/lib/modules/{kver}'; }} \
             | cpio -o -H newc -R 0:0 --quiet > '{}'",
            mods_cpio.display()
        ),
        &tree,
    )?;
    cache::remove(&mods)?;
    sh(
        &format!(
            "cat '{}' '{}' > '{}'",
            rootfs.base_cpio().display(),
            mods_cpio.display(),
            img.initrd.display()
        ),
        &dir,
    )?;
    cache::remove(&mods_cpio)?;
    fs::copy(kernel.vmlinuz()?, &img.vmlinuz).context("copying vmlinuz")?;
    cache::mark_complete(&dir)?;
    step(&format!("lab: initrd {} ({})", img.initrd.display(), cache::size_mb(&img.initrd)));
    Ok(img)
}
