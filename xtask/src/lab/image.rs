//! The guest image: a Debian trixie root (debootstrap, minbase + `GUEST_PACKAGES`), trimmed,
//! packed whole as the initramfs, plus one cpio of each kernel's modules (the kernel accepts
//! concatenated newc archives). The root is keyed by its inputs; an initrd by root + kernel.

use super::cache::{self, Timer};
use super::kernels::Kernel;
use crate::setup::GUEST_PACKAGES;
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

fn package_names() -> Vec<&'static str> {
    let mut v: Vec<&str> = GUEST_PACKAGES.iter().map(|(p, _)| *p).collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn rootfs_key() -> String {
    let pkgs = package_names().join(",");
    cache::key(&[
        FORMAT.as_bytes(),
        SUITE.as_bytes(),
        pkgs.as_bytes(),
        INIT_SH.as_bytes(),
        ROOT_TRIM.join(",").as_bytes(),
    ])
}

fn sh(script: &str, dir: &Path) -> Result<()> {
    util::run(Command::new("sh").args(["-euc", script]).current_dir(dir))
}

/// The guest root for the current inputs: built once, reused until an input changes.
pub fn ensure_rootfs(mirror: &str) -> Result<RootFs> {
    let key = rootfs_key();
    let dir = cache::root().join("rootfs").join(&key);
    let rootfs = RootFs { key: key.clone(), packages: dir.join("packages.txt"), dir: dir.clone() };
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
    let debs = cache::root().join("debootstrap-debs");
    fs::create_dir_all(&debs)?;
    {
        let _t = Timer::start("debootstrap of the guest root");
        step(&format!(
            "lab: debootstrap --variant=minbase {SUITE} with {} (downloads cached in {})",
            package_names().join(" "),
            debs.display()
        ));
        util::run(
            Command::new("debootstrap")
                .arg("--variant=minbase")
                .arg(format!("--include={}", package_names().join(",")))
                .arg(format!("--cache-dir={}", debs.display()))
                .arg(SUITE)
                .arg(&tree)
                .arg(mirror),
        )?;
    }
    let _t = Timer::start("trimming and packing the guest root");
    let versions = util::output(Command::new("chroot").arg(&tree).args([
        "dpkg-query",
        "-W",
        "-f",
        "${Package} ${Version}\\n",
    ]))?;
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
    // The host may have no kmod: run the guest's depmod on the guest's tree.
    util::run(Command::new("chroot").arg(&tree).args(["depmod", kver]))?;
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
