//! `cargo xtask vm-test`: build the lab tests on the host, boot each kernel once, run every
//! lab test in that boot, count the results from libtest's output. `cargo xtask soak` does
//! the same for the soaks, which are too long for the gate.
//!
//! Lab tests are `#[test] #[ignore = "lab: …"]` functions of the rdma-trace package whose
//! names start with `lab_` (soaks: `soak_`). In the guest they see `RDMA_TRACE_BIN`,
//! `RDMA_TRACE_LAB=1`, `RDMA_TRACE_LAB_SERIES`, `RDMA_TRACE_LAB_OUT` (kept on the host in
//! `target/lab/out/`) and a working rxe0.

use super::{Arch, Mode, Series, VmTestArgs};
use crate::util::{self, step};
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Lab tests that need real hardware (name, reason): listed, never run in the guest.
pub const HARDWARE_ONLY: &[(&str, &str)] = &[];

const VMTEST_SH: &str = include_str!("guest/vmtest.sh");

/// One test executable and the lab tests it holds.
struct TestExe {
    path: PathBuf,
    /// File name in the share (`bin/tests/<name>`).
    name: String,
    tests: Vec<String>,
}

/// Builds rdma-trace and its test executables (before any boot: never build while QEMU runs).
pub fn build() -> Result<PathBuf> {
    step("lab: cargo build --release -p rdma-trace");
    util::run(util::cargo().args(["build", "--release", "-p", "rdma-trace"]))?;
    let bin = util::workspace_root().join("target/release/rdma-trace");
    if !bin.is_file() {
        bail!("{} was not built", bin.display());
    }
    Ok(bin)
}

/// The lab tests the gate runs, and the soaks (`cargo xtask soak`), by name prefix.
pub const LAB: &str = "lab_";
pub const SOAK: &str = "soak_";
/// Lab tests that need two guests on a wire: run by the gate in a second boot of each
/// kernel, a pair of guests (`super::run_pair`), each guest running every one of them.
pub const PAIR: &str = "pair_";

/// The lab tests the arm64 guest runs (name parts): every single-guest one (44 on
/// 2026-12-07, ~5 min in one boot). The `pair_` tests need two guests on a wire, which the
/// arm64 lab does not boot yet.
pub const ARM64_GROUP: &[&str] = &[LAB];

fn build_tests(group: &str, only: Option<&str>) -> Result<Vec<TestExe>> {
    build_tests_for(None, group, only)
}

/// `build_tests` for another architecture (`target`): cross-built, listed under QEMU's
/// user mode.
fn build_tests_for(
    target: Option<crate::build::Target>,
    group: &str,
    only: Option<&str>,
) -> Result<Vec<TestExe>> {
    let args = ["--release", "-p", "rdma-trace", "--no-run", "--message-format=json"];
    let json = match target {
        None => {
            step("lab: cargo test --release -p rdma-trace --no-run");
            util::output(util::cargo().arg("test").args(args))?
        }
        Some(t) => {
            step(&format!("lab: cargo test --release -p rdma-trace --no-run --target {}", t.triple()));
            util::output(&mut crate::build::cargo(t, "test", &args))?
        }
    };
    let mut exes = Vec::new();
    for line in json.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["reason"] != "compiler-artifact" || v["profile"]["test"] != true {
            continue;
        }
        let Some(exe) = v["executable"].as_str() else {
            continue;
        };
        let path = PathBuf::from(exe);
        let list = match target {
            None => util::output(std::process::Command::new(&path).args(["--list", "--ignored"]))?,
            Some(t) => util::output(crate::build::emulated(t, &path).args(["--list", "--ignored"]))?,
        };
        let tests: Vec<String> = list
            .lines()
            .filter_map(|l| l.strip_suffix(": test"))
            .filter(|n| {
                let name = n.rsplit("::").next().unwrap_or(n);
                name.starts_with(group) && only.is_none_or(|o| o.split(',').any(|part| n.contains(part)))
            })
            .map(str::to_string)
            .collect();
        let name = path.file_name().context("test executable name")?.to_string_lossy().into_owned();
        exes.push(TestExe { path, name, tests });
    }
    if exes.is_empty() {
        bail!("cargo built no test executables for rdma-trace");
    }
    Ok(exes)
}

fn hardware_only(test: &str) -> Option<&'static str> {
    HARDWARE_ONLY.iter().find(|(n, _)| test.contains(n)).map(|(_, why)| *why)
}

#[derive(Default)]
struct Tally {
    passed: usize,
    failed: Vec<String>,
    skipped: usize,
    note: Option<String>,
}

impl Tally {
    /// The summary line of one boot's results: `head` names the boot (series, round,
    /// kernel), `took` its time; the failed tests and the note on lines of their own.
    fn line(&self, head: &str, took: &str) -> String {
        let (passed, failed, skipped) = (self.passed, self.failed.len(), self.skipped);
        let mut l = format!("{head}: {passed} passed, {failed} failed, {skipped} skipped ({took})");
        if !self.failed.is_empty() {
            l.push_str(&format!("\n    failed: {}", self.failed.join(", ")));
        }
        if let Some(n) = &self.note {
            l.push_str(&format!("\n    FAIL: {n}"));
        }
        l
    }
}

/// `test NAME ... ok|FAILED|ignored…` lines of libtest output. What a test's own child
/// processes print to stdout can land after ` ... ` and push the result onto a later line
/// of its own: the result is the first of ok/FAILED/ignored at the end of the test line or
/// alone on a line before the next test; none seen is "" (started, never finished).
fn parse(log: &str) -> BTreeMap<String, String> {
    const RESULTS: [&str; 3] = ["ok", "FAILED", "ignored"];
    let mut out = BTreeMap::new();
    let mut open: Option<String> = None;
    for l in log.lines().map(|l| l.trim_end_matches('\r')) {
        if let Some((name, rest)) = l.strip_prefix("test ").and_then(|l| l.split_once(" ... ")) {
            let first = rest.split([',', ' ']).next().unwrap_or("");
            let done = RESULTS.contains(&first);
            out.insert(name.to_string(), if done { first.to_string() } else { String::new() });
            open = (!done).then(|| name.to_string());
            continue;
        }
        let Some(name) = open.as_ref() else { continue };
        let word = l.trim();
        let last = word.rsplit(' ').next().unwrap_or("");
        if RESULTS.contains(&word) || (RESULTS.contains(&last) && !word.starts_with("test result")) {
            let r = if RESULTS.contains(&word) { word } else { last };
            out.insert(name.clone(), r.to_string());
            open = None;
        } else if word.starts_with("test result") || word == "failures:" {
            open = None;
        }
    }
    // libtest's own list of failures (indented names after a bare `failures:`) has the
    // last word: no stray output can make a failed test read as passed.
    let mut listing = false;
    for l in log.lines().map(|l| l.trim_end_matches('\r')) {
        if l == "failures:" {
            listing = true;
        } else if listing && l.starts_with("    ") && !l.trim().contains(' ') {
            out.insert(l.trim().to_string(), "FAILED".into());
        } else if listing && !l.trim().is_empty() {
            listing = false;
        }
    }
    out
}

/// The guest's list of test executables to run (`tests.txt`), each with its libtest filter.
fn test_list(exes: &[TestExe], group: &str, filter: &str) -> String {
    let mut list = String::new();
    for e in exes.iter().filter(|e| !e.tests.is_empty()) {
        let skips: Vec<String> = HARDWARE_ONLY.iter().map(|(n, _)| format!("--skip {n}")).collect();
        // libtest takes one filter here: the part of `--only a,b` this binary's tests match.
        let parts: Vec<&str> = filter.split(',').filter(|p| e.tests.iter().any(|t| t.contains(p))).collect();
        let filter = if parts.len() == 1 { parts[0] } else { group };
        list.push_str(&format!("{}\t{filter}\t{}\n", e.name, skips.join(" ")));
    }
    list
}

/// Runs `run`; runs it once more if the guest kernel crashed outside BPF and kprobes (the
/// lab's kernel, not the tool: see `qemu::GuestCrash`), saying so and returning a note for
/// the summary. A second crash, or one in tracing code, is the result.
fn again_after_crash<T>(what: &str, run: impl Fn() -> Result<T>) -> (Result<T>, Option<String>) {
    let first = run();
    let crash = first.as_ref().err().and_then(|e| e.downcast_ref::<super::qemu::GuestCrash>());
    match crash {
        Some(c) if !c.in_tracing => {
            let at = c.at.clone().unwrap_or_else(|| "no RIP line".into());
            step(&format!(
                "lab: WARNING: {what}: the guest kernel crashed outside BPF and kprobes (RIP: {at}); \
                 booting it once more"
            ));
            (run(), Some(format!("{what} booted twice: the first boot's kernel crashed at {at}")))
        }
        _ => (first, None),
    }
}

fn run_series(
    g: &super::Guest,
    exes: &[TestExe],
    group: &str,
    filter: &str,
    timeout: Duration,
    console_prefix: Option<String>,
) -> Result<Tally> {
    let logs = super::out_dir(g.series).join("tests");
    super::cache::remove(&logs)?;
    let files = [("tests.txt", test_list(exes, group, filter))];
    let mode = Mode::Script { script: VMTEST_SH, files: &files, timeout, log: "vm-test.console.log" };
    super::run_guest_with(g, mode, &super::qemu::Extras { console_prefix, ..Default::default() })?;
    Ok(tally(g, exes, &[logs]))
}

/// The pair tests of `g`'s kernel: two guests on a wire, each running them all; a test
/// passes when it passes on both.
fn run_pair_series(g: &super::Guest, exes: &[TestExe], filter: &str, timeout: Duration) -> Result<Tally> {
    let logs: Vec<PathBuf> = (1..=2).map(|h| super::pair_out_dir(g.series, h).join("tests")).collect();
    for l in &logs {
        super::cache::remove(l)?;
    }
    let files = [("tests.txt", test_list(exes, PAIR, filter))];
    let rcs = super::run_pair(g, VMTEST_SH, &files, timeout, "vm-test-pair")?;
    if rcs != [0, 0] {
        bail!("the pair's test runner exited {rcs:?}");
    }
    Ok(tally(g, exes, &logs))
}

/// Counts the results of `exes`' lab tests from the libtest logs in each of `logs` (one
/// directory per guest: a test passes only if it passed in every guest).
fn tally(g: &super::Guest, exes: &[TestExe], logs: &[PathBuf]) -> Tally {
    let mut t = Tally::default();
    let (mut expected, mut ran) = (0, 0);
    for e in exes.iter().filter(|e| !e.tests.is_empty()) {
        let per_guest: Vec<BTreeMap<String, String>> = logs
            .iter()
            .map(|l| parse(&fs::read_to_string(l.join(format!("{}.log", e.name))).unwrap_or_default()))
            .collect();
        // The worst result any guest gave (a pair test that failed on one side failed).
        let mut results: BTreeMap<String, String> = BTreeMap::new();
        for name in &e.tests {
            let worst = per_guest
                .iter()
                .map(|r| r.get(name).cloned())
                .min_by_key(|r| match r.as_deref() {
                    None => 0,
                    Some("") => 1,
                    Some("FAILED") => 2,
                    Some("ok") => 4,
                    Some(_) => 3,
                })
                .flatten();
            if let Some(w) = worst {
                results.insert(name.clone(), w);
            }
        }
        for name in &e.tests {
            if let Some(why) = hardware_only(name) {
                step(&format!("lab: {}: skipped {name}: hardware only: {why}", g.series.name()));
                t.skipped += 1;
                continue;
            }
            expected += 1;
            match results.get(name).map(String::as_str) {
                Some("ok") => t.passed += 1,
                Some("FAILED") => t.failed.push(name.clone()),
                Some("") => t.failed.push(format!("{name} (started, never finished: the test binary died)")),
                Some(other) => t.failed.push(format!("{name} ({other})")),
                None => t.failed.push(format!("{name} (did not run)")),
            }
            ran += usize::from(matches!(results.get(name).map(String::as_str), Some("ok" | "FAILED")));
        }
    }
    if ran < expected {
        t.note = Some(format!("only {ran} of {expected} lab tests ran"));
    }
    t
}

/// The arm64 guest's lab tests (`ARM64_GROUP`, or `--only`): the tracer, the companion and
/// the tests cross-built, one boot of `Series::TrixieArm64`. Returns (passed, failed, the
/// summary line).
fn run_arm64(group: &str, a: &VmTestArgs, timeout: Duration) -> Result<(usize, usize, String)> {
    let start = Instant::now();
    let target = crate::build::Target::Aarch64;
    let dir = crate::build::run(&crate::build::BuildArgs { target })?;
    let only = a.only.clone().unwrap_or_else(|| ARM64_GROUP.join(","));
    let exes = build_tests_for(Some(target), group, Some(&only))?;
    let bin = Arch::Arm64.bin_dir();
    super::cache::remove(&super::share_dir().join(bin).join("tests"))?;
    for e in exes.iter().filter(|e| !e.tests.is_empty()) {
        super::share_binary_for(Arch::Arm64, &e.path, &format!("tests/{}", e.name))?;
    }
    for b in crate::build::BINS {
        super::share_binary_for(Arch::Arm64, &dir.join(b), b)?;
    }
    let guests = super::prepare(&[Series::TrixieArm64])?;
    let g = &guests[0];
    let total: usize = exes.iter().map(|e| e.tests.len()).sum();
    step(&format!("lab: {total} lab tests on arm64 ({})", only));
    let (res, note) =
        again_after_crash(g.series.name(), || run_series(g, &exes, group, &only, timeout, None));
    let secs = start.elapsed().as_secs();
    let mut out = match res {
        Ok(t) => {
            let l =
                t.line(&format!("{} ({})", g.series.name(), g.kver), &format!("{secs} s, with its build"));
            (t.passed, t.failed.len() + usize::from(t.note.is_some()), l)
        }
        Err(e) => (0, 1, format!("{} ({}): FAILED to run: {e:#}", g.series.name(), g.kver)),
    };
    if let Some(n) = note {
        out.2.push_str(&format!("\n    NOTE: {n}"));
    }
    Ok(out)
}

pub fn vm_test(a: VmTestArgs) -> Result<()> {
    run_group(LAB, a)
}

/// `cargo xtask soak`: the soaks, one boot per kernel, outside the gate.
pub fn soak(a: VmTestArgs) -> Result<()> {
    run_group(SOAK, a)
}

fn run_group(group: &str, a: VmTestArgs) -> Result<()> {
    let start = Instant::now();
    // The soaks run longer than the gate: the churn soak alone is 30 min.
    let (overall, per_boot) = if group == SOAK { (9000, 5400) } else { (4800, 2700) };
    let overall = Duration::from_secs(a.timeout.unwrap_or(overall));
    let per_boot = Duration::from_secs(a.boot_timeout.unwrap_or(per_boot));
    let default = if group == LAB { Series::GATE.to_vec() } else { Series::ALL.to_vec() };
    let mut series = if a.kernel.is_empty() { default } else { a.kernel.clone() };
    series.dedup();
    // The arm64 guest first, on its own (its TCG takes both cores; its build is its own).
    let mut arm64 = None;
    if series.contains(&Series::TrixieArm64) {
        series.retain(|s| s.arch() == Arch::X86_64);
        arm64 = Some(run_arm64(group, &a, overall.min(per_boot))?);
        if series.is_empty() {
            let (passed, failed, line) = arm64.unwrap_or_default();
            println!("vm-test: {line}");
            println!("vm-test: {passed} passed, {failed} failed ({} s)", start.elapsed().as_secs());
            if failed > 0 || passed == 0 {
                bail!("vm-test failed");
            }
            return Ok(());
        }
    }
    // Everything the guest runs is built here, before the first boot.
    let bin = build()?;
    let exes = build_tests(group, a.only.as_deref())?;
    // The gate's lab tests bring the pair tests with them (a second boot per kernel).
    let pairs = if group == LAB { build_tests(PAIR, a.only.as_deref())? } else { Vec::new() };
    let pair_total: usize = pairs.iter().map(|e| e.tests.len()).sum();
    let total: usize = exes.iter().map(|e| e.tests.len()).sum::<usize>() + pair_total;
    step(&format!(
        "lab: {total} lab tests ({pair_total} on a pair of guests) in {} test executables",
        exes.len()
    ));
    super::cache::remove(&super::share_dir().join("bin/tests"))?;
    for e in exes.iter().chain(&pairs) {
        if !e.tests.is_empty() {
            super::share_binary(&e.path, &format!("tests/{}", e.name))?;
        }
    }
    super::share_binary(&bin, "rdma-trace")?;
    super::share_binary(&bin.with_file_name("rdma-trace-workload"), "rdma-trace-workload")?;
    let guests = super::prepare(&series)?;
    let mut lines = Vec::new();
    let (mut passed, mut failed) = (0, 0);
    if let Some((p, f, line)) = arm64 {
        (passed, failed) = (p, f);
        lines.push(line);
    }
    // Boots run again after a guest kernel crash outside tracing (`again_after_crash`).
    let mut reruns = 0;
    let rounds = a.repeat.max(1);
    let filter = a.only.as_deref().unwrap_or(group);
    let pair_filter = a.only.as_deref().unwrap_or(PAIR);
    for round in 1..=rounds {
        // Each kernel's single-guest boot, side by side: single-threaded TCG keeps each guest
        // on one host core, so two kernels take the time of one (the pairs, two guests each,
        // go one kernel at a time after).
        let side_by_side =
            guests.len() > 1 && std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
        let left = overall.saturating_sub(start.elapsed()).min(per_boot);
        let singles: Vec<(Result<Tally>, Option<String>, Duration)> = std::thread::scope(|s| {
            let runs: Vec<_> = guests
                .iter()
                .map(|g| {
                    let exes = &exes;
                    let prefix = side_by_side.then(|| format!("[{}]", g.series.name()));
                    let run = move || {
                        let t0 = Instant::now();
                        let (res, note) = if left.is_zero() {
                            (
                                Err(anyhow::anyhow!(
                                    "the overall timeout of {} s is spent",
                                    overall.as_secs()
                                )),
                                None,
                            )
                        } else if total == pair_total {
                            (Ok(Tally::default()), None) // only pair tests asked for: no single-guest boot
                        } else {
                            again_after_crash(g.series.name(), || {
                                run_series(g, exes, group, filter, left, prefix.clone())
                            })
                        };
                        (res, note, t0.elapsed())
                    };
                    if side_by_side { Ok(s.spawn(run)) } else { Err(run) }
                })
                .collect();
            runs.into_iter()
                .map(|r| match r {
                    Ok(h) => h.join().unwrap_or_else(|_| {
                        (Err(anyhow::anyhow!("its thread panicked")), None, Duration::ZERO)
                    }),
                    Err(run) => run(),
                })
                .collect()
        });
        for (g, (res, single_note, single_time)) in guests.iter().zip(singles) {
            let mut notes: Vec<String> = single_note.into_iter().collect();
            let pair_start = Instant::now();
            let res = match res {
                Ok(mut t) if pair_total > 0 => {
                    let left = overall.saturating_sub(start.elapsed()).min(per_boot);
                    let what = format!("{} pair", g.series.name());
                    let (p, pair_note) =
                        again_after_crash(&what, || run_pair_series(g, &pairs, pair_filter, left));
                    notes.extend(pair_note);
                    match p {
                        Ok(p) => {
                            t.passed += p.passed;
                            t.failed.extend(p.failed);
                            t.skipped += p.skipped;
                            t.note = t.note.or(p.note.map(|n| format!("pair: {n}")));
                            Ok(t)
                        }
                        Err(e) => Err(e.context("the pair of guests")),
                    }
                }
                other => other,
            };
            let secs = (single_time + pair_start.elapsed()).as_secs();
            let mut line = match res {
                Ok(t) => {
                    passed += t.passed;
                    failed += t.failed.len();
                    let round = if rounds > 1 { format!(" round {round}/{rounds}") } else { String::new() };
                    t.line(&format!("{}{round} ({})", g.series.name(), g.kver), &format!("{secs} s"))
                }
                Err(e) => {
                    failed += 1;
                    format!("{} round {round} ({}): FAILED to run: {e:#}", g.series.name(), g.kver)
                }
            };
            reruns += notes.len();
            for n in notes {
                line.push_str(&format!("\n    NOTE: {n}"));
            }
            println!("vm-test: {line}");
            lines.push(line);
        }
    }
    println!("\nvm-test summary (outputs in {}):", super::share_dir().join("out").display());
    for l in &lines {
        println!("  {l}");
    }
    let rerun = if reruns > 0 {
        format!("; {reruns} boot(s) run again after a guest kernel crash outside tracing (NOTE lines above)")
    } else {
        String::new()
    };
    println!("vm-test: {passed} passed, {failed} failed ({} s){rerun}", start.elapsed().as_secs());
    if failed > 0 {
        bail!("vm-test failed");
    }
    if total == 0 {
        bail!("no tests named {group}… exist (#[ignore = \"lab: …\"] or \"soak: …\")");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_result_pushed_to_its_own_line_by_a_childs_output_is_still_read() {
        let log = "running 3 tests\n\
test a ... ok\n\
test b ... A = /mnt/host/x.jsonl\n\
B = /mnt/host/x.jsonl\n\
metric  A  B\n\
ok\n\
test c ... FAILED\n\
test d ... \n\
test e ... child says all ok\n\
\n\
failures:\n\
\n\
---- e stdout ----\n\
\n\
failures:\n    c\n    e\n\
\n\
test result: FAILED. 2 passed; 2 failed\n";
        let r = super::parse(log);
        assert_eq!(r["a"], "ok");
        assert_eq!(r["b"], "ok");
        assert_eq!(r["c"], "FAILED");
        assert_eq!(r["d"], "", "never finished");
        assert_eq!(r["e"], "FAILED", "libtest's list of failures decides");
    }
}
