//! `report` and `diff` on real runs in the lab guest (both kernels):
//! - the companion and `ib_send_bw -e` traced while bpftrace counts the same functions:
//!   the report's per-probe counts equal the trace's own summary and bpftrace's, its pins
//!   and pages are the companion's MRs, its work requests the companion's posts;
//! - a 4 KiB-MR run against a 64 MiB-MR run: `diff` shows the pinned pages grow from 1 to
//!   16384 and `--fail-on pin-pages=+10%` fails on it.

mod common;

use common::*;
use rdma_trace::output::report::Report;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

fn report_json(capture: &Path) -> Report {
    let out = Command::new(tracer_bin()).args(["report", "--json"]).arg(capture).output().expect("report");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("the report's JSON")
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_report_counts_equal_the_trace_summary_and_bpftrace() {
    let dir = out_dir("report");
    let capture = dir.join("capture.jsonl");
    let err = dir.join("rdma-trace.stderr");
    let mut tracer = Command::new(tracer_bin())
        .args(["trace", "-q", "-o"])
        .arg(&capture)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("start rdma-trace");
    wait_for(&err, "rdma-trace: tracing", &mut tracer, 120).expect("rdma-trace attaches");
    let bt = Bpftrace::for_this_kernel();
    let mut bpftrace = bt.start(&dir);
    let steps = dir.join("companion-steps.jsonl");
    let st = Command::new(workload_bin())
        .args(["--mr-sizes", "4K,64K,1M", "--iterations", "6", "--announce"])
        .arg(&steps)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("companion.stderr")).unwrap())
        .status()
        .expect("the companion");
    assert!(st.success(), "companion {st}");
    send_bw_events(&dir, "200");
    std::thread::sleep(Duration::from_millis(500));
    interrupt(&tracer);
    assert!(wait_timeout(&mut tracer, 60).success());
    interrupt(&bpftrace);
    wait_timeout(&mut bpftrace, 60);
    let stderr = std::fs::read_to_string(&err).unwrap();
    let bt_out = std::fs::read_to_string(dir.join("bpftrace.out")).unwrap();
    let r = report_json(&capture);
    let text = Command::new(tracer_bin()).arg("report").arg(&capture).output().unwrap().stdout;
    std::fs::write(dir.join("report.txt"), text).unwrap();

    // The report's per-probe entries = bpftrace's counts = the summary's delivered.
    let ours = |id: &str| r.paths.values().find_map(|p| p.by_probe.get(id)).copied().unwrap_or(0);
    let theirs = bt.counts(&bt_out);
    let summary = rows(&stderr);
    for (id, _, _) in &bt.counters {
        assert_eq!(Some(ours(id)), theirs.get(*id).copied(), "{id}: report vs bpftrace\n{bt_out}");
        let delivered = summary
            .iter()
            .find(|(site, ..)| site.split(' ').next() == Some(id) && !site.contains("return"))
            .map(|r| r.2);
        assert_eq!(Some(ours(id)), delivered, "{id}: report vs the summary\n{stderr}");
    }
    let c = &r.captures[0];
    assert_eq!(c.stopped.as_deref(), Some("SIGINT"));
    let total = stderr
        .lines()
        .find_map(|l| l.strip_prefix("rdma-trace: ")?.split(" events delivered").next()?.parse::<u64>().ok())
        .expect("the summary line");
    assert_eq!(c.delivered, total, "delivered: report vs the summary");

    // The companion's own values: its three MRs, the pages they span, its posts.
    let recs = rdma_trace::pipeline::correlate::story::read_steps(&steps).unwrap();
    let cpid = recs[0].pid;
    let p = r.processes.iter().find(|p| p.pid == cpid).unwrap_or_else(|| panic!("{:?}", r.processes));
    assert_eq!((p.pins, p.refused_pins, p.pinned_peak_bytes), (3, 0, (1 + 16 + 256) * 4096));
    let posts = recs
        .iter()
        .filter(|s| {
            use rdma_trace::steps::StepName::*;
            matches!(s.name, PostSend | PostWrite | PostRecv)
        })
        .count() as u64;
    assert_eq!(r.data_phase.work_requests, Some(posts), "the capture carries the companion's steps");
    let send_bw_pages: u64 =
        r.processes.iter().filter(|p| p.comm == "ib_send_bw").map(|p| p.pinned_peak_bytes / 4096).sum();
    assert_eq!(r.paths["pin"].pages, Some(1 + 16 + 256 + send_bw_pages), "pages pinned over the run");
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_report_diff_of_4k_and_64m_runs_shows_the_pinned_pages_and_fails() {
    let dir = out_dir("report-diff");
    let run = |name: &str, size: &str| {
        let capture = dir.join(format!("{name}.jsonl"));
        let st = Command::new(tracer_bin())
            .args(["trace", "-q", "-o"])
            .arg(&capture)
            .arg("--")
            .arg(workload_bin())
            .args(["--mr-sizes", size, "--iterations", "2", "--announce", "/dev/null"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join(format!("{name}.stderr"))).unwrap())
            .status()
            .expect("rdma-trace -- the companion");
        assert!(st.success(), "{name}: {st}");
        capture
    };
    let (small, big) = (run("mr-4k", "4K"), run("mr-64m", "64M"));
    assert_eq!(report_json(&small).paths["pin"].pages, Some(1));
    assert_eq!(report_json(&big).paths["pin"].pages, Some(16384));
    let out = Command::new(tracer_bin())
        .arg("diff")
        .args([&small, &big])
        .args(["--fail-on", "pin-pages=+10%"])
        .output()
        .expect("diff");
    let text = String::from_utf8_lossy(&out.stdout);
    std::fs::write(dir.join("diff.txt"), text.as_bytes()).unwrap();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("FAIL pin-pages=+10%: A 1 → B 16384"), "{text}");
    let line = text.lines().find(|l| l.starts_with("pinned-peak-bytes")).unwrap_or_default();
    assert!(line.contains("4 KiB") && line.contains("65536 KiB"), "{text}");
    let same = Command::new(tracer_bin())
        .arg("diff")
        .args([&small, &small])
        .args(["--fail-on", "pin-pages=+10%"])
        .output() // its report kept off the test's stdout (the lab runner reads that)
        .expect("diff");
    assert_eq!(same.status.code(), Some(0), "a run against itself passes");
}
