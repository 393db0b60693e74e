//! Debian kernels for the lab: the newest of each series, resolved from the archive at run
//! time with a private apt configuration (the host's own apt state is never touched),
//! downloaded once and unpacked into the cache. Offline, the cached kernels are used.

use super::cache::{self, Timer};
use super::{Arch, Series};
use crate::util::{self, step};
use anyhow::{Context, Result, bail};
use std::fs;
use std::path::PathBuf;
use std::process::Command;

/// One unpacked kernel: `uname -r` and where its files are.
pub struct Kernel {
    pub series: Series,
    /// `uname -r` of the kernel, e.g. the ABI name plus the flavour.
    pub kver: String,
    /// The unpacked packages (`boot/`, `usr/lib/modules/<kver>/`).
    pub root: PathBuf,
}

impl Kernel {
    pub fn vmlinuz(&self) -> Result<PathBuf> {
        [self.root.join(format!("boot/vmlinuz-{}", self.kver)), self.modules_dir().join("vmlinuz")]
            .into_iter()
            .find(|p| p.is_file())
            .with_context(|| format!("no vmlinuz for {} under {}", self.kver, self.root.display()))
    }

    pub fn modules_dir(&self) -> PathBuf {
        let usr = self.root.join("usr/lib/modules").join(&self.kver);
        if usr.is_dir() { usr } else { self.root.join("lib/modules").join(&self.kver) }
    }
}

/// The mirror, read from the machine's own apt sources (never hard-coded).
pub fn mirror() -> Result<String> {
    let mut texts = Vec::new();
    for dir in ["/etc/apt/sources.list.d"] {
        if let Ok(rd) = fs::read_dir(dir) {
            let mut paths: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
            paths.sort();
            texts.extend(paths.iter().filter_map(|p| fs::read_to_string(p).ok()));
        }
    }
    texts.extend(fs::read_to_string("/etc/apt/sources.list").ok());
    for t in &texts {
        for line in t.lines().map(str::trim) {
            // deb822: `URIs: http://…/debian`; one-line: `deb [opts] http://…/debian suite …`.
            let uri = if let Some(rest) = line.strip_prefix("URIs:") {
                rest.split_whitespace().next()
            } else if line.starts_with("deb ") {
                line.split_whitespace().skip(1).find(|w| w.contains("://"))
            } else {
                None
            };
            if let Some(u) = uri.filter(|u| u.trim_end_matches('/').ends_with("/debian")) {
                return Ok(u.trim_end_matches('/').to_string());
            }
        }
    }
    bail!("no Debian mirror (a URI ending in /debian) in /etc/apt/sources.list{{,.d/*}}")
}

/// The private apt configuration under the cache.
struct Apt {
    dir: PathBuf,
    arch: Arch,
}

impl Apt {
    fn new(mirror: &str, arch: Arch) -> Result<Self> {
        let dir = match arch {
            Arch::X86_64 => cache::root().join("apt"),
            Arch::Arm64 => cache::root().join("apt-arm64"),
        };
        for d in ["lists/partial", "cache/archives/partial", "etc"] {
            fs::create_dir_all(dir.join(d))?;
        }
        let security = format!("{}/debian-security", mirror.trim_end_matches("/debian"));
        let mut sources = format!("deb {mirror} trixie main\ndeb {security} trixie-security main\n");
        if arch == Arch::X86_64 {
            sources.push_str(&format!(
                "deb {mirror} trixie-backports main\n\
                 deb {mirror} bookworm main\ndeb {security} bookworm-security main\ndeb {mirror} bookworm-updates main\n"
            ));
        }
        let list = dir.join("etc/sources.list");
        if fs::read_to_string(&list).ok().as_deref() != Some(sources.as_str()) {
            // New suites: the lists on hand do not have them.
            fs::remove_file(dir.join("updated")).ok();
            fs::write(&list, sources)?;
        }
        Ok(Apt { dir, arch })
    }

    fn cmd(&self, prog: &str) -> Command {
        let mut c = Command::new(prog);
        let d = |s: &str| self.dir.join(s).display().to_string();
        c.arg("-o").arg(format!("Dir::Etc::SourceList={}", d("etc/sources.list")));
        c.args(["-o", "Dir::Etc::SourceParts=/dev/null"]);
        c.arg("-o").arg(format!("Dir::State::Lists={}", d("lists")));
        c.arg("-o").arg(format!("Dir::Cache={}", d("cache")));
        c.args(["-o", "Dir::State::status=/var/lib/dpkg/status"]);
        if self.arch == Arch::Arm64 {
            c.args(["-o", "APT::Architecture=arm64", "-o", "APT::Architectures=arm64"]);
        }
        c.args([
            "-o",
            "Acquire::http::Timeout=20",
            "-o",
            "Acquire::Retries=1",
            "-o",
            "APT::Sandbox::User=root",
            "-q",
        ]);
        c.env("LC_ALL", "C");
        c
    }
}

/// Numeric parts of an ABI name ("6.12.115+deb13.1" → [6, 12, 115, 13, 1]) for ordering.
fn version_key(abi: &str) -> Vec<u64> {
    abi.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// Candidate (ABI, packages) of a series from the archive's package names.
fn candidates(series: Series, names: &[&str]) -> Vec<(String, Vec<String>)> {
    // trixie's ABI names are "6.12.115+deb13"; bookworm's "6.1.0-41" (never "-rt", "-cloud").
    let plain = |abi: &str| {
        let mut parts = abi.splitn(2, '-');
        let (version, abinum) = (parts.next().unwrap_or(""), parts.next());
        version.starts_with(|c: char| c.is_ascii_digit())
            && match series {
                Series::Bookworm => {
                    abinum.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                }
                _ => abinum.is_none(),
            }
    };
    let mut out = Vec::new();
    for n in names {
        let abi = match series {
            Series::Trixie | Series::Bookworm => {
                n.strip_prefix("linux-image-").and_then(|r| r.strip_suffix("-amd64-unsigned"))
            }
            Series::TrixieArm64 => {
                n.strip_prefix("linux-image-").and_then(|r| r.strip_suffix("-arm64-unsigned"))
            }
            Series::TrixieBackports => n.strip_prefix("linux-binary-").and_then(|r| r.strip_suffix("-amd64")),
        };
        let Some(abi) = abi.filter(|a| plain(a)) else {
            continue;
        };
        let mut pkgs = vec![n.to_string()];
        if series == Series::TrixieBackports {
            for extra in [format!("linux-modules-{abi}-amd64"), format!("linux-base-{abi}-amd64")] {
                if names.contains(&extra.as_str()) {
                    pkgs.push(extra);
                }
            }
        }
        out.push((abi.to_string(), pkgs));
    }
    out
}

/// Package lists younger than this are used as they are (a second run downloads nothing);
/// `RDMA_TRACE_LAB_REFRESH=1` refreshes anyway.
const LISTS_FRESH: std::time::Duration = std::time::Duration::from_secs(3600);

/// Refreshes the private package lists; false when the archive cannot be reached.
fn update(apt: &Apt) -> bool {
    let stamp = apt.dir.join("updated");
    let age = fs::metadata(&stamp).and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
    let forced = std::env::var("RDMA_TRACE_LAB_REFRESH").is_ok_and(|v| v == "1");
    if let Some(age) = age.filter(|a| *a < LISTS_FRESH && !forced) {
        step(&format!(
            "lab: package lists refreshed {} min ago: using them (RDMA_TRACE_LAB_REFRESH=1 refreshes)",
            age.as_secs() / 60
        ));
        return true;
    }
    let _t = Timer::start("apt update (private lists)");
    step(&format!("lab: refreshing the {} package lists ({})", apt.arch.debian(), apt.dir.display()));
    let mut c = apt.cmd("apt-get");
    c.arg("update");
    match util::output(&mut c) {
        Ok(out) => {
            let count = |p: &str| out.lines().filter(|l| l.starts_with(p)).count();
            step(&format!(
                "lab: package lists: {} unchanged (Hit), {} downloaded (Get)",
                count("Hit:"),
                count("Get:")
            ));
            fs::write(&stamp, b"").ok();
            true
        }
        Err(e) => {
            step(&format!("lab: the archive cannot be reached ({e:#}); using cached kernels"));
            false
        }
    }
}

/// Newest kernel of `series` in the archive: (ABI, packages).
fn newest_in_archive(apt: &Apt, series: Series) -> Result<(String, Vec<String>)> {
    let mut c = apt.cmd("apt-cache");
    c.args(["pkgnames", "linux-"]);
    let all = util::output(&mut c)?;
    let names: Vec<&str> = all.lines().map(str::trim).collect();
    let mut cands = candidates(series, &names);
    if cands.is_empty() {
        bail!("no {} kernel packages in the archive", series.name());
    }
    // Keep the candidates that the series' own suites carry.
    let mut c = apt.cmd("apt-cache");
    c.arg("madison").args(cands.iter().map(|(_, p)| &p[0]));
    let madison = util::output(&mut c)?;
    cands.retain(|(_, pkgs)| {
        madison.lines().any(|l| {
            let mut f = l.split('|').map(str::trim);
            let (pkg, src) = (f.next().unwrap_or(""), f.nth(1).unwrap_or(""));
            pkg == pkgs[0]
                && src
                    .split_whitespace()
                    .nth(1)
                    .is_some_and(|s| series.suites().iter().any(|x| s.starts_with(&format!("{x}/"))))
        })
    });
    cands.sort_by_key(|(abi, _)| version_key(abi));
    cands.pop().with_context(|| format!("no {} kernel in the suites {:?}", series.name(), series.suites()))
}

fn kernel_dir(kver: &str) -> PathBuf {
    cache::root().join("kernels").join(kver)
}

/// Newest cached kernel of a series (offline fallback).
fn newest_cached(series: Series) -> Result<Kernel> {
    let dir = cache::root().join("kernels");
    let mut found: Vec<String> = fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    found.retain(|k| {
        let d = kernel_dir(k);
        cache::is_complete(&d)
            && fs::read_to_string(d.join("series")).is_ok_and(|s| s.trim() == series.name())
    });
    found.sort_by_key(|k| version_key(k));
    let kver = found.pop().with_context(|| {
        format!(
            "the archive cannot be reached and no {} kernel is cached in {}",
            series.name(),
            dir.display()
        )
    })?;
    Ok(Kernel { series, root: kernel_dir(&kver).join("root"), kver })
}

/// Downloads (once) and unpacks the packages of one kernel.
fn fetch(apt: &Apt, series: Series, kver: &str, pkgs: &[String]) -> Result<Kernel> {
    let dir = kernel_dir(kver);
    let root = dir.join("root");
    let kernel = Kernel { series, kver: kver.to_string(), root: root.clone() };
    if cache::is_complete(&dir) {
        step(&format!("lab: kernel {kver} ({}): cached in {}", series.name(), dir.display()));
        return Ok(kernel);
    }
    let debs = dir.join("debs");
    fs::create_dir_all(&debs)?;
    let have = |p: &str| {
        fs::read_dir(&debs).is_ok_and(|rd| {
            rd.filter_map(|e| e.ok()).any(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.starts_with(&format!("{p}_")) && n.ends_with(".deb")
            })
        })
    };
    let missing: Vec<&String> = pkgs.iter().filter(|p| !have(p)).collect();
    if !missing.is_empty() {
        let _t = Timer::start(format!("download of kernel {kver}"));
        step(&format!(
            "lab: downloading {}",
            missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" ")
        ));
        let mut c = apt.cmd("apt-get");
        c.arg("download").args(&missing).current_dir(&debs);
        util::run(&mut c)?;
    }
    let _t = Timer::start(format!("unpacking kernel {kver}"));
    cache::remove(&root)?;
    fs::create_dir_all(&root)?;
    let mut versions = String::new();
    for e in fs::read_dir(&debs)?.filter_map(|e| e.ok()) {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "deb") {
            util::run(Command::new("dpkg-deb").arg("-x").arg(&p).arg(&root))?;
            versions.push_str(&format!("{}\n", p.file_name().unwrap_or_default().to_string_lossy()));
        }
    }
    kernel.vmlinuz()?;
    if !kernel.modules_dir().is_dir() {
        bail!("kernel {kver}: no modules directory in {}", root.display());
    }
    fs::write(dir.join("series"), format!("{}\n", series.name()))?;
    fs::write(dir.join("packages.txt"), versions)?;
    cache::mark_complete(&dir)?;
    Ok(kernel)
}

/// Resolves and fetches the newest kernel of each series (one archive refresh per
/// architecture).
pub fn resolve(series: &[Series]) -> Result<Vec<Kernel>> {
    let mirror = mirror()?;
    let mut apts: Vec<(Apt, bool)> = Vec::new();
    let mut out = Vec::new();
    for &s in series {
        if !apts.iter().any(|(a, _)| a.arch == s.arch()) {
            let apt = Apt::new(&mirror, s.arch())?;
            let online = update(&apt);
            apts.push((apt, online));
        }
        let (apt, online) = apts.iter().find(|(a, _)| a.arch == s.arch()).context("an apt per arch")?;
        let k = if *online {
            let (abi, pkgs) = newest_in_archive(apt, s)?;
            step(&format!("lab: newest {} kernel in the archive: {abi} ({})", s.name(), pkgs.join(", ")));
            fetch(apt, s, &format!("{abi}-{}", s.arch().debian()), &pkgs)?
        } else {
            let k = newest_cached(s)?;
            step(&format!("lab: offline: using the cached {} kernel {}", s.name(), k.kver));
            k
        };
        out.push(k);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_series_finds_its_own_kernels_only() {
        let names = [
            "linux-image-6.12.48+deb13-amd64-unsigned",
            "linux-image-6.12.48+deb13-rt-amd64-unsigned",
            "linux-image-6.1.0-41-amd64-unsigned",
            "linux-image-6.1.0-41-rt-amd64-unsigned",
            "linux-image-6.1.0-41-cloud-amd64-unsigned",
            "linux-binary-7.3.4+deb13-amd64",
            "linux-modules-7.3.4+deb13-amd64",
            "linux-base-7.3.4+deb13-amd64",
            "linux-image-6.12.118+deb13-arm64-unsigned",
            "linux-image-6.12.118+deb13-arm64-16k-unsigned",
            "linux-image-6.12.118+deb13-cloud-arm64-unsigned",
        ];
        let abis = |s| candidates(s, &names).into_iter().map(|(a, p)| (a, p.len())).collect::<Vec<_>>();
        assert_eq!(abis(Series::Trixie), [("6.12.48+deb13".to_string(), 1)]);
        assert_eq!(abis(Series::Bookworm), [("6.1.0-41".to_string(), 1)]);
        assert_eq!(abis(Series::TrixieBackports), [("7.3.4+deb13".to_string(), 3)]);
        // arm64: the 4K-page generic flavour only (not 16k, cloud or rt).
        assert_eq!(abis(Series::TrixieArm64), [("6.12.118+deb13".to_string(), 1)]);
        assert!(version_key("6.1.0-41") > version_key("6.1.0-9"));
    }
}
