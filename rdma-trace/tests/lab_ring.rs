//! The ring path under load on a real kernel (lab guest, both kernels): nothing the
//! kernel saw is missing, and what is lost is accounted for exactly, per probe.
//!
//! * The probes scenario (ibv_rc_pingpong -e, rping, ib_write_bw) runs ten times in a
//!   row under `rdma-trace trace`, beside one CPU hog per CPU (so producers — uprobe
//!   programs run preemptible — are preempted), with one bpftrace counting throughout:
//!   every repetition reports no loss and nothing held; the ten captures together count
//!   what bpftrace counted.
//! * With a ring too small for the stream, each probe's hits = delivered + lost, exactly.

mod common;

use common::*;
use rdma_trace::source::capture::parse_jsonl;
use std::process::Child;
use std::time::{Duration, Instant};

const REPETITIONS: usize = 10;

/// The probes scenario, smaller: event-mode pingpong, rping, a short ib_write_bw.
fn scenario(dir: &std::path::Path) {
    let (s, c) = pair(
        dir,
        "rc_pingpong",
        &["ibv_rc_pingpong", "-e", "-d", "rxe0", "-g", "1", "-n", "30"],
        &["ibv_rc_pingpong", "-e", "-d", "rxe0", "-g", "1", "-n", "30", SERVER_IP],
    );
    finish(s, c, "ibv_rc_pingpong -e");
    let (s, c) = pair(
        dir,
        "rping",
        &["rping", "-s", "-a", SERVER_IP, "-C", "5"],
        &["rping", "-c", "-a", SERVER_IP, "-C", "5"],
    );
    finish(s, c, "rping");
    let (s, c) = pair(
        dir,
        "ib_write_bw",
        &["ib_write_bw", "-F", "-d", "rxe0", "-x", "1", "-n", "200"],
        &["ib_write_bw", "-F", "-d", "rxe0", "-x", "1", "-n", "200", SERVER_IP],
    );
    finish(s, c, "ib_write_bw");
}

/// Runs the scenario under `rdma-trace trace` with `extra` arguments; (stderr, capture).
fn traced(dir: &std::path::Path, extra: &[&str]) -> (String, String) {
    traced_with(dir, extra, |_| scenario(dir))
}

/// Runs `workload` (given the tracer's pid) under `rdma-trace trace -q -o` with `extra`
/// arguments, once the probes are attached; stops the tracer with SIGINT; (stderr, capture).
fn traced_with(dir: &std::path::Path, extra: &[&str], workload: impl FnOnce(u32)) -> (String, String) {
    let capture = dir.join("capture.jsonl");
    let tr_err = dir.join("rdma-trace.stderr");
    let mut tracer = std::process::Command::new(tracer_bin())
        .args(["trace", "-q", "-o"])
        .arg(&capture)
        .args(extra)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&tr_err).unwrap())
        .spawn()
        .expect("start rdma-trace");
    wait_for(&tr_err, "rdma-trace: tracing", &mut tracer, 180).expect("rdma-trace attaches");
    workload(tracer.id());
    std::thread::sleep(Duration::from_millis(500));
    interrupt(&tracer);
    let t0 = Instant::now();
    let st = wait_timeout(&mut tracer, 60);
    let stop = t0.elapsed();
    let stderr = std::fs::read_to_string(&tr_err).unwrap();
    assert!(st.success(), "rdma-trace exit {st}:\n{stderr}");
    std::fs::write(dir.join("stop-time.txt"), format!("{:.3} s\n", stop.as_secs_f64())).unwrap();
    (stderr, std::fs::read_to_string(&capture).expect("capture written"))
}

/// One busy loop per CPU, at nice 19: the tracer's producers get preempted, while rxe's
/// kworkers still run (at normal priority the hogs starved them and RC retries ran out:
/// ib_write_bw failed).
struct Hogs(Vec<Child>);

impl Hogs {
    /// A syscall flood: `dd bs=1` from /dev/zero to /dev/null until killed.
    fn dd_flood() -> Self {
        Self(vec![
            std::process::Command::new("dd")
                .args(["if=/dev/zero", "of=/dev/null", "bs=1", "status=none"])
                .spawn()
                .expect("dd"),
        ])
    }

    fn start() -> Self {
        let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
        Self(
            (0..n)
                .map(|_| {
                    std::process::Command::new("sh").args(["-c", "while :; do :; done"]).spawn().expect("hog")
                })
                .collect(),
        )
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for h in &mut self.0 {
            h.kill().ok();
            h.wait().ok();
        }
    }
}

/// A soak, not part of the gate (about 450-700 s a kernel under TCG): `cargo xtask soak`.
#[test]
#[ignore = "soak: needs the soft-RoCE guest (cargo xtask soak)"]
fn soak_ring_ten_runs_under_cpu_hogs_lose_and_hold_nothing() {
    let top = out_dir("ring");
    let bt = Bpftrace::for_this_kernel();
    let mut bpf = bt.start(&top);
    let hogs = Hogs::start();
    let mut events = Vec::new();
    let mut report = String::new();
    let t0 = Instant::now();
    for rep in 0..REPETITIONS {
        let dir = top.join(format!("rep-{rep}"));
        std::fs::create_dir_all(&dir).unwrap();
        let (stderr, capture) = traced(&dir, &[]);
        let evs = parse_jsonl(&capture).expect("capture parses");
        // A record written twice (two preempted uprobe runs sharing the JIT's per-CPU
        // private stack, seen on 7.3) would hide a lost one from the counts.
        let mut seen = std::collections::HashSet::new();
        for e in &evs {
            let key = (e.name.clone(), format!("{:?}", e.kind), e.tid, e.ts_ns);
            assert!(seen.insert(key), "repetition {rep}: a record appears twice: {e:?}");
        }
        let summary = stderr.lines().find(|l| l.contains(" events delivered")).unwrap_or("").to_string();
        report.push_str(&format!("rep {rep}: {summary}\n"));
        let lost = tool_losses(&stderr);
        assert!(lost.is_empty(), "repetition {rep}: {lost:?}\n{stderr}");
        let table = rows(&stderr);
        assert!(table.iter().any(|r| r.0.starts_with("comp_handler")), "no comp_handler row:\n{stderr}");
        for (name, hits, delivered, lost) in &table {
            assert_eq!((*hits, *lost), (*delivered, 0), "repetition {rep}, {name}:\n{stderr}");
        }
        events.extend(evs);
    }
    drop(hogs);
    interrupt(&bpf);
    wait_timeout(&mut bpf, 60);
    let bt_out = std::fs::read_to_string(top.join("bpftrace.out")).unwrap();
    let (counts, equal) = compare_counts(&events, &bt, &bt_out);
    let secs = t0.elapsed().as_secs_f64();
    let rate = events.len() as f64 / secs;
    report.push_str(&format!("{} events in {secs:.0} s ({rate:.0} events/s)\n{counts}", events.len()));
    std::fs::write(top.join("report.txt"), &report).unwrap();
    assert!(equal, "the ten captures differ from bpftrace:\n{report}\nbpftrace said:\n{bt_out}");
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_ring_overflow_is_accounted_exactly_per_probe() {
    let dir = out_dir("ring-overflow");
    // A syscall flood watched beside the scenario: a one-page ring must overflow. It runs
    // until killed (with a count it could end during the tracer's 7-8 s plan in the guest,
    // and the ring then overflowed on the scenario alone); held as a hog, so that a failing
    // assertion while tracing still kills it.
    let flood = Hogs::dd_flood();
    let pid = flood.0[0].id().to_string();
    let (stderr, capture) = traced(&dir, &["--ring-kib", "4", "--pid", &pid]);
    drop(flood);
    let events = parse_jsonl(&capture).expect("capture parses");
    let table = rows(&stderr);
    let flooded = table.iter().find(|r| r.0 == "syscalls enter").map_or(0, |r| r.1);
    assert!(flooded > 0, "the flood is traced (a syscalls enter row with hits):\n{stderr}");
    let lost: u64 = table.iter().map(|r| r.3).sum();
    assert!(lost > 0, "a 4 KiB ring must overflow here:\n{stderr}");
    assert!(stderr.contains("ring full"), "{stderr}");
    for (name, hits, d, l) in &table {
        assert_eq!(*hits, d + l, "{name}: hits = delivered + lost\n{stderr}");
    }
    // The whole account, to the record: every event a row delivered to the outputs is in
    // the file or was left out by the capture writer (when it fell behind under the flood),
    // row by row; the writer's loss records in the file say the same count.
    use rdma_trace::account::{STEPS_ROW, row_of};
    use rdma_trace::capture::Record;
    let left = left_out(&stderr, "capture");
    let records: Vec<Record> = rdma_trace::source::capture::Reader::new(capture.as_bytes(), true)
        .collect::<Result<_, _>>()
        .expect("capture reads");
    let mut in_file: std::collections::BTreeMap<String, u64> = Default::default();
    for e in &events {
        *in_file.entry(row_of(e)).or_default() += 1;
    }
    let steps = records.iter().filter(|r| matches!(r, Record::Step(_))).count() as u64;
    if steps > 0 {
        in_file.insert(STEPS_ROW.into(), steps);
    }
    for (name, _, delivered, _) in &table {
        let (f, l) = (in_file.get(name).copied().unwrap_or(0), left.get(name).copied().unwrap_or(0));
        assert_eq!(*delivered, f + l, "{name}: delivered = in the file {f} + left out {l}\n{stderr}");
    }
    let named: u64 = table.iter().map(|r| r.0.as_str()).filter_map(|n| in_file.get(n)).sum();
    assert_eq!(named, events.len() as u64 + steps, "every record in the file is under a row:\n{stderr}");
    // Events left out are told as `queue full` (steps with the other records).
    let told: u64 = records
        .iter()
        .filter_map(|r| match r {
            Record::Loss(l)
                if l.site == rdma_trace::capture::LossSite::Output("capture".into())
                    && l.reason == rdma_trace::capture::LossReason::QueueFull =>
            {
                Some(l.count)
            }
            _ => None,
        })
        .sum();
    let left_events: u64 = left.iter().filter(|(row, _)| *row != STEPS_ROW).map(|(_, n)| n).sum();
    assert_eq!(left_events, told, "the table and the file's loss records:\n{stderr}");
    eprintln!(
        "overflow account: delivered {} = in the file {} + left out by the writer {told}",
        table.iter().map(|r| r.2).sum::<u64>(),
        events.len()
    );
    for bad in ["held past shutdown", "never committed", "counter error"] {
        assert!(!stderr.contains(bad), "{bad}:\n{stderr}");
    }
}

fn kprobe_events() -> String {
    std::fs::read_to_string("/sys/kernel/tracing/kprobe_events").expect("kprobe_events")
}

/// The bytes a record of the summary's "ring: N records, B bytes (S bytes a record)".
fn ring_record_bytes(stderr: &str) -> u64 {
    let ring = stderr.lines().find_map(|l| l.trim().strip_prefix("ring: ")).expect("a ring line");
    let per = ring.rsplit_once(" (").and_then(|(_, r)| r.split_once(' ')).map(|(n, _)| n.parse().ok());
    per.flatten().unwrap_or_else(|| panic!("bytes a record in {ring}"))
}

/// `kprobe_events` once no line holds `mine` and no detach helper runs, or at `within`.
fn events_gone(mine: &str, within: Duration) -> String {
    let t0 = Instant::now();
    loop {
        let now = kprobe_events();
        if (!now.contains(mine) && !detach_helper_running()) || t0.elapsed() > within {
            return now;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Ctrl-C under a syscall flood, with every catalog probe attached: the prompt is back
/// within a second, the capture holds every event the ring held and its account is whole,
/// and the probes are detached and their tracefs events removed after the tracer exited.
#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_ring_sigint_under_a_flood_returns_at_once_and_the_probes_go_after() {
    let dir = out_dir("stop-under-flood");
    let flood = Hogs::dd_flood();
    let pid = flood.0[0].id().to_string();
    // On the guest's memory, as a user's disk would take it: the 9p share under TCG took
    // 3-4 s to take the writer's queue at the stop.
    let capture = std::path::Path::new("/tmp/stop-under-flood.jsonl");
    let tr_err = dir.join("rdma-trace.stderr");
    let mut tracer = std::process::Command::new(tracer_bin())
        .args(["trace", "-q", "-o"])
        .arg(capture)
        .args(["--pid", &pid])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&tr_err).unwrap())
        .spawn()
        .expect("start rdma-trace");
    wait_for(&tr_err, "rdma-trace: tracing", &mut tracer, 180).expect("rdma-trace attaches");
    std::thread::sleep(Duration::from_secs(3));
    let me = tracer.id();
    interrupt(&tracer);
    let t0 = Instant::now();
    // When the tracer said it stopped (its loop saw the signal) and when its summary was
    // out: a slow stop then says on which side of them the time went (a gate on 6.12 once
    // took 17.5 s to exit with the tracer's own stop split at 1.9 s).
    let (mut said_stop, mut said_summary) = (None, None);
    let st = wait_watching(&mut tracer, 60, |waited| {
        let text = std::fs::read_to_string(&tr_err).unwrap_or_default();
        if said_stop.is_none() && text.contains("stopped on SIGINT") {
            said_stop = Some(waited);
        }
        if said_summary.is_none() && text.contains("links: ") {
            said_summary = Some(waited);
        }
    });
    let stop = t0.elapsed();
    let phases = format!(
        "said it stopped at {said_stop:.2?}, its summary out at {said_summary:.2?}, exited at {stop:.2?}"
    );
    // Read at once: the return probes' events are the helper's to remove, after the exit.
    let at_exit = kprobe_events();
    drop(flood);
    let stderr = std::fs::read_to_string(&tr_err).unwrap();
    assert!(st.success(), "rdma-trace exit {st}:\n{stderr}");
    let mine = format!("rdma_trace_{me}/");
    let placed_returns = stderr.lines().find_map(|l| l.trim().strip_prefix("links: ")).expect("a links line");
    let t1 = Instant::now();
    let left = events_gone(&mine, Duration::from_secs(180));
    let detached = t1.elapsed();
    std::fs::write(
        dir.join("stop-time.txt"),
        format!(
            "SIGINT to exit {:.3} s; the helper done {:.1} s after ({placed_returns})\n{phases}\n{}\n",
            stop.as_secs_f64(),
            detached.as_secs_f64(),
            stderr.lines().find(|l| l.contains("stopping took")).unwrap_or("(stopping took under 1 s)")
        ),
    )
    .unwrap();
    eprintln!(
        "stop under a flood: SIGINT to exit {stop:?}; links let go {detached:?} after ({placed_returns})"
    );
    assert!(
        !left.contains(&mine) && !detach_helper_running(),
        "the helper detaches and removes the events:\n{left}"
    );
    std::fs::copy(capture, dir.join("capture.jsonl")).expect("the capture kept with the artifacts");
    let records: Vec<rdma_trace::capture::Record> =
        rdma_trace::source::capture::Reader::new(std::fs::read(capture).unwrap().as_slice(), true)
            .collect::<Result<_, _>>()
            .expect("capture reads");
    assert!(
        matches!(records.last(), Some(rdma_trace::capture::Record::Trailer(_))),
        "the capture ends with its trailer"
    );
    let table = rows(&stderr);
    let flooded = table.iter().find(|r| r.0 == "syscalls enter").map_or(0, |r| r.1);
    assert!(flooded > 1000, "the flood is traced:\n{stderr}");
    for (name, hits, d, l) in &table {
        assert_eq!(*hits, d + l, "{name}: hits = delivered + lost\n{stderr}");
    }
    // What must hold is that the detach is not on the path: the tracer handed the links
    // over (it did not detach in place), they were still attached when it had exited, and
    // the helper let them go after.
    assert!(
        !stderr.contains("detaching the probes before exiting") && !stderr.contains(", detaching "),
        "the tracer detached in place:\n{stderr}"
    );
    assert!(
        at_exit.contains(&mine),
        "the return probes are still placed when the tracer has exited:\n{at_exit}"
    );
    // The goal is a second, and what stopping still does is userspace work bounded by
    // sizes, not by the machine: the ring's leftover (at most a full 4 MiB ring) and the
    // capture's queue (at most `QUEUE` records, and its loss and trailer records). How long
    // that work takes is the machine's: 1.45-4.09 s over 18 runs here, 9.9 and 23.2 s on a
    // gate machine whose helper let the links go as fast as ours (2026-12-07). So the time
    // is measured by `cargo xtask bench` (the flood round) and kept in stop-time.txt, and
    // what must hold here is the bound on the work. A run under a second prints no split
    // (it met the goal).
    if let Some(split) = stderr.lines().find(|l| l.contains("stopping took")) {
        let records = |part: &str| -> u64 {
            let (_, rest) = split.split_once(part).unwrap_or_else(|| panic!("{part} in {split}"));
            let n = rest.split_once(": ").and_then(|(_, r)| r.split_once(" record"));
            n.and_then(|(n, _)| n.parse().ok()).unwrap_or_else(|| panic!("{part}'s records in {split}"))
        };
        let per = ring_record_bytes(&stderr);
        let ring_holds = 4 * 1024 * 1024 / per;
        assert!(
            records("draining the ring") <= ring_holds,
            "the stop read more than a full ring holds ({ring_holds} records of {per} bytes): the \
             programs were not switched off ({phases}):\n{stderr}"
        );
        assert!(
            records("writing the outputs") <= 16_384 + 3,
            "the capture's queue held more than its size ({phases}):\n{stderr}"
        );
    }
    assert!(stop <= Duration::from_secs(60), "SIGINT to exit took {stop:?} ({phases}):\n{stderr}");
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_ring_return_probe_out_of_instances_is_counted_as_missed() {
    // Two event-mode pingpong pairs at once: four processes that each block in
    // ib_uverbs_comp_event_read, often together. With one instance the return probe
    // cannot follow the second of two calls in flight; the kernel skips its return and
    // only counts it. Every such call must show up as "missed by the kernel" under the
    // return probe, so that it still has as many hits as the entry.
    let dir = out_dir("kretprobe-instances");
    let mut mine = String::new();
    let (stderr, capture) =
        traced_with(&dir, &["--probe", "comp_event_read", "--kretprobe-instances", "1"], |tracer| {
            let placed = kprobe_events();
            mine = format!("r1:rdma_trace_{tracer}/");
            assert!(
                placed.lines().any(|l| l.starts_with(&mine) && l.ends_with(" ib_uverbs_comp_event_read")),
                "the return probe is placed through tracefs with 1 instance ({mine}…):\n{placed}"
            );
            let pp = |port: &'static str, server: bool| {
                let mut a = vec!["ibv_rc_pingpong", "-e", "-d", "rxe0", "-g", "1", "-n", "300", "-p", port];
                if !server {
                    a.push(SERVER_IP);
                }
                a
            };
            let (s1, c1) = pair(&dir, "pp1", &pp("18515", true), &pp("18515", false));
            let (s2, c2) = pair(&dir, "pp2", &pp("18516", true), &pp("18516", false));
            finish(s1, c1, "pingpong 1");
            finish(s2, c2, "pingpong 2");
        });
    let left = events_gone(&mine, Duration::from_secs(120));
    assert!(!left.contains(&mine), "the tracer's helper removes its kprobe events after it exits:\n{left}");

    let table = rows(&stderr);
    let row = |name: &str| {
        table
            .iter()
            .find(|r| r.0.starts_with(name))
            .unwrap_or_else(|| panic!("no row {name}:\n{stderr}"))
            .clone()
    };
    let entry = row("comp_event_read (");
    let ret = row("comp_event_read return");
    assert_eq!(entry.3, 0, "entries lose nothing:\n{stderr}");
    // A run the kernel skipped (another BPF program on the CPU) is counted under its
    // program; here each program serves this one probe.
    let (entry_skips, ret_skips) =
        (program_skips(&stderr, Some("kprobe_entry")), program_skips(&stderr, Some("kprobe_return")));
    if stderr.contains("this kernel does not report kprobe missed counts") {
        // Before 6.7 (the 6.1 lab series) the kernel counts no missed returns: the tracer
        // says so under its table, and the returns fall short of the entries.
        assert!(
            entry.1 > ret.1 + ret_skips,
            "one instance for four blocking processes misses returns:\n{stderr}"
        );
        return;
    }
    assert_eq!(
        entry.1 + entry_skips,
        ret.1 + ret_skips,
        "every call fired the entry and (counted or missed) the return:\n{stderr}"
    );
    assert_eq!(ret.1, ret.2 + ret.3, "return: hits = delivered + lost:\n{stderr}");
    let missed_line = stderr
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("comp_event_read return"))
        .nth(1)
        .unwrap_or_default();
    assert!(ret.3 > 0, "one instance for four blocking processes must miss returns:\n{stderr}");
    assert_eq!(
        missed_line.trim(),
        format!("lost: missed by the kernel {}", ret.3),
        "the return's whole loss is the kernel's missed count:\n{stderr}"
    );
    let delivered = parse_jsonl(&capture).expect("capture parses");
    let returns = delivered
        .iter()
        .filter(|e| e.name == "comp_event_read" && e.kind == rdma_trace::event::EventKind::Return)
        .count();
    assert_eq!(returns as u64, ret.2, "return events in the file = delivered:\n{stderr}");
}

/// The `ring: N records, B bytes` line of a run's summary: (records, bytes).
fn ring_line(stderr: &str) -> (u64, u64) {
    let l = stderr.lines().find_map(|l| l.trim().strip_prefix("ring: ")).expect("a ring line");
    let n: Vec<u64> = l.split([' ', ',']).filter_map(|w| w.parse().ok()).collect();
    (n[0], n[1])
}

/// Each pin's stack, as text, per entry (names with offsets: the same kernel either way).
fn pin_stacks(capture: &str) -> Vec<Vec<String>> {
    let events = parse_jsonl(capture).expect("capture parses");
    events
        .iter()
        .filter(|e| e.name == "umem_get" && e.kind == rdma_trace::event::EventKind::Entry)
        .map(|e| e.stack.iter().map(|f| f.to_string()).collect())
        .collect()
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_ring_stacks_by_id_are_the_copied_stacks_in_fewer_bytes() {
    // The same MR loop traced twice: stacks copied into each record, then by id.
    let loop_ = |dir: &std::path::Path| {
        let out = std::process::Command::new(workload_bin())
            .args(["--announce", "/dev/null", "--mr-sizes", "4K", "--reg-loop", "40"])
            .output()
            .expect("run the companion");
        std::fs::write(dir.join("workload.log"), [&out.stdout[..], &out.stderr[..]].concat()).unwrap();
        assert!(out.status.success(), "companion: {}", String::from_utf8_lossy(&out.stderr));
    };
    let (a_dir, b_dir) = (out_dir("stacks-copied"), out_dir("stacks-by-id"));
    let (a_err, a_cap) = traced_with(&a_dir, &[], |_| loop_(&a_dir));
    let (b_err, b_cap) = traced_with(&b_dir, &["--stack-ids"], |_| loop_(&b_dir));
    let (a, b) = (pin_stacks(&a_cap), pin_stacks(&b_cap));
    assert!(a.len() >= 40 && b.len() >= 40, "pins: {} copied, {} by id", a.len(), b.len());
    assert!(b.iter().all(|s| !s.is_empty()), "a pin without its stack by id:\n{b_err}");
    let set = |v: &[Vec<String>]| v.iter().cloned().collect::<std::collections::BTreeSet<_>>();
    assert_eq!(set(&a), set(&b), "the loop's pin stacks, copied and by id");
    assert!(b_err.lines().any(|l| l.contains("stacks by id:")), "the by-id line:\n{b_err}");
    // No entry lost its stack by id: in the per-probe table (hits, delivered, lost,
    // read-fail, no-stack, …) every row's no-stack is 0.
    let table = b_err.lines().skip_while(|l| !l.contains("no-stack")).skip(1);
    let rows: Vec<Vec<u64>> = table
        .map(|l| l.split_whitespace().filter_map(|w| w.parse().ok()).collect::<Vec<u64>>())
        .filter(|n| n.len() >= 5)
        .collect();
    assert!(!rows.is_empty(), "the per-probe table:\n{b_err}");
    assert!(rows.iter().all(|n| n[4] == 0), "a stack lost by id:\n{b_err}");
    let ((ar, ab), (br, bb)) = (ring_line(&a_err), ring_line(&b_err));
    std::fs::write(
        b_dir.join("ring-bytes.txt"),
        format!("copied {ar} records {ab} bytes\nby id {br} records {bb} bytes\n"),
    )
    .unwrap();
    assert!(bb / br < ab / ar, "bytes a record: by id {} against copied {}", bb / br, ab / ar);
}
