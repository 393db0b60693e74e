//! `rdma-trace daemon` on a real kernel (lab guest, both kernels): two subscribers, one
//! joining while the companion workload holds its MRs, while the companion and
//! `ib_send_bw -e` run. Both get identical records after the late one's join point, the
//! late one first receives the state of what is pinned and mapped; the companion's
//! syscalls are watched without being asked for; a subscriber run as `nobody` is refused
//! with one line; SIGTERM ends every subscriber's stream with the trailer. MRs a late
//! subscriber knows only from the kernel's tables end when their restrack id is deregistered.

use rdma_trace::event::FieldId;
mod common;

use common::daemon::*;
use common::*;
use rdma_trace::capture::Record;
use rdma_trace::source::capture::Reader;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_daemon_serves_a_late_subscriber_the_state_then_the_same_records() {
    let dir = out_dir("daemon");
    let socket = Path::new("/tmp/rdma-trace-lab.sock");
    let derr = dir.join("daemon.stderr");
    // uid 1000 allowed: the socket is then open to all, and the kernel's peer credentials
    // are what refuses nobody.
    let mut daemon = start_daemon(&["--allow-uid", "1000"], socket, None, &derr, "serving on");

    let mut early = subscriber(&dir, "early", socket);
    // uid 1000, allowed but not root: its stream has stand-ins for kernel addresses.
    let user_out = Path::new("/tmp/rdma-trace-lab-uid1000.jsonl");
    std::fs::remove_file(user_out).ok();
    let uerr = dir.join("uid1000.stderr");
    let mut user = Command::new("setpriv")
        .args(["--reuid=1000", "--regid=1000", "--clear-groups", "--inh-caps=-all", "--"])
        .arg(tracer_bin())
        .args(["trace", "-q", "--connect"])
        .arg(socket)
        .arg("-o")
        .arg(user_out)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&uerr).unwrap())
        .spawn()
        .expect("setpriv");
    wait_for(&uerr, "connected to", &mut user, 60).expect("uid 1000 connects");
    let nobody = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--"])
        .arg(tracer_bin())
        .args(["trace", "--connect"])
        .arg(socket)
        .output()
        .expect("setpriv");
    let nerr = String::from_utf8_lossy(&nobody.stderr);
    assert_eq!(nobody.status.code(), Some(2), "{nerr}");
    assert_eq!(nerr.lines().count(), 1, "one line: {nerr}");
    assert!(nerr.contains("refused: uid 65534"), "{nerr}");

    let steps = dir.join("companion-steps.jsonl");
    let mut companion = Command::new(workload_bin())
        .args(["--mr-sizes", "4K,64K,1M", "--iterations", "4", "--hold-ms", "6000", "--announce"])
        .arg(&steps)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("companion.stderr")).unwrap())
        .spawn()
        .expect("start the companion");
    // Its MRs are registered and its queues mapped once it polls; it then holds them (6 s).
    // The late one joins once the daemon's own stream (the early one's file) has that poll:
    // on 7.3 the daemon was 100 records behind the companion 500 ms after it polled, and
    // the state it served then was taken in the middle of the 1 MiB registration.
    wait_for(&steps, "\"poll_cq\"", &mut companion, 120).expect("the companion works");
    wait_for(&dir.join("early.jsonl"), "\"poll_cq\"", &mut early, 60).expect("the daemon saw it poll");
    let mut late = subscriber(&dir, "late", socket);
    send_bw_events(&dir, "200");
    let cst = wait_timeout(&mut companion, 120);
    assert!(cst.success(), "companion {cst}");
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let dst = wait_timeout(&mut daemon, 60);
    let dtext = std::fs::read_to_string(&derr).unwrap();
    assert!(dst.success(), "daemon {dst}:\n{dtext}");
    assert!(dtext.contains("the trailer went to 3 subscribers"), "{dtext}");
    let ust = wait_timeout(&mut user, 30);
    assert!(ust.success(), "uid 1000 {ust}: {}", std::fs::read_to_string(&uerr).unwrap_or_default());
    std::fs::copy(user_out, dir.join("uid1000.jsonl")).ok();
    for (name, c) in [("early", &mut early), ("late", &mut late)] {
        let st = wait_timeout(c, 30);
        let err = std::fs::read_to_string(dir.join(format!("{name}.stderr"))).unwrap();
        assert!(st.success() && err.contains("the daemon stopped on SIGTERM"), "{name} {st}:\n{err}");
    }

    let (a, b) = (records(&dir.join("early.jsonl")), records(&dir.join("late.jsonl")));
    assert!(matches!(a[0], Record::Header(_)) && matches!(b[0], Record::Header(_)));
    let Record::State(state) = &b[1] else { panic!("the late one's state first: {:?}", b[1]) };
    let cpid = companion.id();
    let held = state.processes.iter().find(|p| p.pid == cpid).unwrap_or_else(|| panic!("{state:?}"));
    let want_pinned: u64 = (1 + 16 + 256) * 4096;
    assert_eq!(held.pinned_bytes, want_pinned, "{held:?}");
    assert_eq!(held.mrs.iter().map(|m| m.length).sum::<u64>(), 4096 + 65536 + 1048576, "{held:?}");
    assert!(!held.mappings.is_empty(), "its queues are mapped: {held:?}");
    let joined_at = b[2].seq().unwrap();
    let shared = |rs: &[Record]| -> Vec<Record> {
        rs.iter()
            .filter(|r| !matches!(r, Record::Header(_) | Record::State(_)))
            .filter(|r| r.seq().unwrap() >= joined_at)
            .cloned()
            .collect()
    };
    let (sa, sb) = (shared(&a), shared(&b));
    assert!(sb.len() > 100, "{} records after the join", sb.len());
    assert_eq!(sa.len(), sb.len(), "the same number of records after the join point");
    assert!(sa == sb, "identical records after the join point");
    let Some(Record::Trailer(t)) = b.last() else { panic!("a trailer") };
    assert_eq!(t.stopped, "SIGTERM");
    // What only the late one saw whole: ib_send_bw; and the companion's syscalls were
    // watched without --pid (it was seen using verbs).
    let events = |rs: &[Record]| -> Vec<rdma_trace::event::Event> {
        rs.iter()
            .filter_map(|r| match r {
                Record::Event(e) => Some((**e).clone()),
                _ => None,
            })
            .collect()
    };
    let (ea, eb) = (events(&a), events(&b));
    assert!(eb.iter().any(|e| e.comm == "ib_send_bw" && e.is(rdma_trace::event::ProbeId::UmemGet)));

    // uid 1000's: the same events, kernel pointers as stand-ins (the same for the same).
    let u = records(user_out);
    let Record::Header(uh) = &u[0] else { panic!("a header first") };
    assert!(uh.redacted, "its header says the addresses are stand-ins");
    let eu = events(&u);
    let kernel = |es: &[rdma_trace::event::Event]| -> Vec<u64> {
        use rdma_trace::event::Value;
        es.iter()
            .flat_map(|e| e.fields.iter())
            .filter(|(k, _)| !k.starts_with("memlock"))
            .filter_map(|(_, v)| match v {
                Value::U(n) if n >= rdma_trace::pipeline::redact::KERNEL_HALF => Some(n),
                _ => None,
            })
            .filter(|n| rdma_trace::pipeline::render::err_ptr(*n).is_none())
            .collect()
    };
    let user_from = u.iter().find_map(|r| if let Record::Event(e) = r { e.seq } else { None }).unwrap();
    let root_same: Vec<_> = ea.iter().filter(|e| e.seq >= Some(user_from)).cloned().collect();
    assert_eq!(eu.len(), root_same.len(), "the same events from where it joined");
    let (raw, stand_ins) = (kernel(&root_same), kernel(&eu));
    assert!(
        raw.iter().any(|v| *v < rdma_trace::pipeline::redact::KERNEL_STAND_IN),
        "root sees kernel pointers"
    );
    assert_eq!(raw.len(), stand_ins.len());
    assert!(
        stand_ins.iter().all(|v| *v > rdma_trace::pipeline::redact::KERNEL_STAND_IN),
        "uid 1000 sees none"
    );
    assert!(
        ea.iter().any(|e| e.pid == cpid && e.path == rdma_trace::event::Path::Syscall && e.name == "write"),
        "the companion's doorbell writes were watched"
    );
    // Watched from its first verbs entry, in the kernel: the open of its uverbs device,
    // which ibv_open_device makes at once, is seen. A watch added at the tracer's next
    // 50 ms tick came after it.
    let mine: Vec<&rdma_trace::event::Event> = ea.iter().filter(|e| e.pid == cpid).collect();
    let first = mine
        .iter()
        .position(|e| {
            e.kind == rdma_trace::event::EventKind::Entry && e.is(rdma_trace::event::ProbeId::IbvOpenDevice)
        })
        .expect("its ibv_open_device");
    let opened =
        mine[first..].iter().take_while(|e| !e.is(rdma_trace::event::ProbeId::UverbsMmap)).any(|e| {
            e.path == rdma_trace::event::Path::Syscall
                && e.name == "openat"
                && e.fd_kind == Some(rdma_trace::event::FdKind::Uverbs)
        });
    assert!(opened, "the open of its device, inside ibv_open_device, was not traced");
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_daemon_started_late_still_shows_what_was_registered_before() {
    let dir = out_dir("daemon");
    let steps = dir.join("seeded-steps.jsonl");
    let mut companion = Command::new(workload_bin())
        .args(["--mr-sizes", "4K,64K,1M", "--iterations", "2", "--hold-ms", "180000", "--announce"])
        .arg(&steps)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("seeded-companion.stderr")).unwrap())
        .spawn()
        .expect("start the companion");
    wait_for(&steps, "\"poll_cq\"", &mut companion, 120).expect("the companion registered and works");
    let socket = Path::new("/tmp/rdma-trace-lab-seeded.sock");
    let derr = dir.join("seeded-daemon.stderr");
    let mut daemon = start_daemon(&[], socket, None, &derr, "serving on");
    // And one that only counts: it never saw the MRs pinned, so their release is charged to
    // no one, and said so.
    let counting_err = dir.join("seeded-counting.stderr");
    let mut counting = start_daemon(
        &["--metrics-only", "--metrics", "127.0.0.1:9467"],
        Path::new("/tmp/rdma-trace-lab-seeded-counting.sock"),
        None,
        &counting_err,
        "metrics on http://127.0.0.1:9467/metrics",
    );
    let out = dir.join("seeded.jsonl");
    let mut sub = subscriber(&dir, "seeded", socket);
    wait_for(&out, "\"type\":\"state\"", &mut sub, 60).expect("the subscriber's state");
    // Its exit deregisters the three MRs (the kernel's uverbs clean-up): a viewer that
    // joined after they were registered must see them end.
    let cpid = companion.id();
    companion.kill().ok();
    companion.wait().ok();
    let its_deregs = |text: &str| {
        let pid = format!("\"pid\":{cpid},");
        text.lines().filter(|l| l.contains("\"name\":\"mr_dereg\"") && l.contains(&pid)).count()
    };
    let t0 = std::time::Instant::now();
    while its_deregs(&std::fs::read_to_string(&out).unwrap_or_default()) < 3 && t0.elapsed().as_secs() < 60 {
        std::thread::sleep(Duration::from_millis(200));
    }
    let unjoined = unjoined_releases(&dir);
    // SAFETY: kill(2) of our own children.
    unsafe { libc::kill(counting.id() as i32, libc::SIGTERM) };
    let cst = wait_timeout(&mut counting, 60);
    assert!(cst.success(), "{}", std::fs::read_to_string(&counting_err).unwrap());
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let dst = wait_timeout(&mut daemon, 60);
    wait_timeout(&mut sub, 30);
    assert!(dst.success(), "{}", std::fs::read_to_string(&derr).unwrap());
    assert_eq!(unjoined, 3, "the three MRs pinned before the counting daemon, released unjoined");
    let said = std::fs::read_to_string(&counting_err).unwrap();
    assert!(said.contains("lost: not joined 3"), "its closing account says them:\n{said}");
    let recs = records(&out);
    let Record::State(state) = &recs[1] else { panic!("the state first: {:?}", recs[1]) };
    let p = state.processes.iter().find(|p| p.pid == cpid).unwrap_or_else(|| panic!("{state:?}"));
    assert!(p.seeded, "{p:?}");
    let mut lengths: Vec<u64> = p.mrs.iter().map(|m| m.length).collect();
    lengths.sort_unstable();
    assert_eq!(lengths, vec![4096, 65536, 1048576], "its MRs, from the kernel's tables: {p:?}");
    assert!(!p.mappings.is_empty(), "its uverbs mappings, from /proc/{cpid}/maps: {p:?}");
    assert_eq!(p.comm, "rdma-trace-work");
    // The tables' restrack ids are the ids its deregs carry.
    let mut ids: Vec<u64> = p.mrs.iter().map(|m| u64::from(m.mr_id.expect("an mrn"))).collect();
    ids.sort_unstable();
    let mut dereg_ids: Vec<u64> = recs
        .iter()
        .filter_map(|r| match r {
            Record::Event(e) if e.pid == cpid && e.is(rdma_trace::event::ProbeId::MrDereg) => {
                e.field(FieldId::MrId)
            }
            _ => None,
        })
        .collect();
    dereg_ids.sort_unstable();
    assert_eq!(ids, dereg_ids, "the ids `rdma res` listed, deregistered at its exit: {p:?}");
    assert!(p.mrs.iter().all(|m| m.lkey.is_some_and(|k| k != 0)), "the tables' lkeys: {p:?}");
    // The TUI on this stream: the three rows from the tables end; nothing stays pinned.
    let (mut f, _slot) = rdma_trace::tui::channel("lab".into(), false);
    for r in recs.iter().filter(|r| matches!(r, Record::State(_) | Record::Event(_))) {
        rdma_trace::sink::Sink::record(&mut f, r.clone()).unwrap();
    }
    f.caught_up();
    let m = &f.model;
    let cpid = rdma_trace::event::Task::new(0, cpid);
    let rows: Vec<_> = m.mrs.iter().filter(|r| r.pid == cpid).collect();
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows.iter().all(|r| r.from_tables() && !r.live), "{rows:?}");
    assert_eq!((m.procs[&cpid].pinned, m.procs[&cpid].mrs_live), (0, 0), "{:?}", m.procs[&cpid]);
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_daemon_metrics_scraped_by_prometheus_equal_the_story() {
    let dir = out_dir("daemon");
    let socket = Path::new("/tmp/rdma-trace-lab-metrics.sock");
    let derr = dir.join("metrics-daemon.stderr");
    let capture = dir.join("metrics-daemon.jsonl");
    let ready = "metrics on http://127.0.0.1:9464/metrics";
    let mut daemon = start_daemon(&["--metrics", "127.0.0.1:9464"], socket, Some(&capture), &derr, ready);
    // Beside it, on the same run, a daemon that only counts, in the kernel.
    let counting_err = dir.join("metrics-only-daemon.stderr");
    let mut counting = start_daemon(
        &["--metrics-only", "--metrics", "127.0.0.1:9466"],
        Path::new("/tmp/rdma-trace-lab-counting.sock"),
        None,
        &counting_err,
        "metrics on http://127.0.0.1:9466/metrics",
    );
    let cfg = dir.join("prometheus.yml");
    std::fs::write(
        &cfg,
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: rdma-trace\n    static_configs:\n      - targets: ['127.0.0.1:9464']\n",
    )
    .unwrap();
    let mut prom = prom::start(&cfg, &dir.join("prometheus.log"));
    let steps = dir.join("metrics-steps.jsonl");
    let mut companion = Command::new(workload_bin())
        .args(["--mr-sizes", "4K,64K,1M", "--iterations", "6", "--announce"])
        .arg(&steps)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("metrics-companion.stderr")).unwrap())
        .spawn()
        .expect("start the companion");
    let cst = wait_timeout(&mut companion, 120);
    assert!(cst.success(), "companion {cst}");
    let cpid = companion.id();
    // A stats record (every 800 ms) renews the metrics; then two scrapes.
    std::thread::sleep(Duration::from_secs(4));
    let (code, text) = prom::http_get("127.0.0.1:9464", "/metrics").expect("the daemon's metrics");
    assert_eq!(code, 200);
    std::fs::write(dir.join("metrics.txt"), &text).unwrap();
    promtool_check(&text);
    // Prometheus scrapes on its own schedule (slow to start under TCG): the companion's
    // series are waited for, at most a minute.
    let query = |q: String| {
        let t0 = std::time::Instant::now();
        loop {
            match prom::query_one(&q) {
                Some(v) => return Some(v),
                None if t0.elapsed() > Duration::from_secs(60) => return None,
                None => std::thread::sleep(Duration::from_millis(500)),
            }
        }
    };
    let peak = query(format!("rdma_trace_pinned_peak_bytes{{pid=\"{cpid}\"}}"));
    let completions = query(format!("sum(rdma_trace_completions_total{{pid=\"{cpid}\"}})"));
    let pins = query(format!("rdma_trace_mr_registrations_total{{pid=\"{cpid}\"}}"));
    let (code, counted) =
        prom::http_get("127.0.0.1:9466", "/metrics").expect("the counting daemon's metrics");
    assert_eq!(code, 200);
    std::fs::write(dir.join("metrics-only.txt"), &counted).unwrap();
    promtool_check(&counted);
    // SAFETY: kill(2) of our own children.
    unsafe { libc::kill(counting.id() as i32, libc::SIGTERM) };
    let cst = wait_timeout(&mut counting, 60);
    assert!(cst.success(), "{}", std::fs::read_to_string(&counting_err).unwrap());
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let dst = wait_timeout(&mut daemon, 60);
    prom.kill().ok();
    prom.wait().ok();
    assert!(dst.success(), "{}", std::fs::read_to_string(&derr).unwrap());
    let events: Vec<rdma_trace::event::Event> = records(&capture)
        .into_iter()
        .filter_map(|r| match r {
            Record::Event(e) => Some(std::sync::Arc::unwrap_or_clone(e)),
            _ => None,
        })
        .collect();
    let story = rdma_trace::pipeline::correlate::engine::build(&events, &[]);
    let ps = &story.processes[&rdma_trace::event::Task::new(0, cpid)];
    std::fs::write(
        dir.join("metrics-vs-story.txt"),
        format!("prometheus: peak {peak:?} completions {completions:?} pins {pins:?}\nstory: peak {} completions {} pins {}\n", ps.pinned_peak_bytes, ps.completions_total, ps.pins_total),
    )
    .ok();
    assert_eq!(peak, Some(ps.pinned_peak_bytes as f64), "pinned peak, Prometheus vs the story");
    assert_eq!(completions, Some(ps.completions_total as f64), "completions, Prometheus vs the story");
    assert_eq!(pins, Some(ps.pins_total as f64));
    assert_eq!(ps.pinned_peak_bytes, (1 + 16 + 256) * 4096);
    // The counting daemon, from its kernel counts, says what the story says.
    let series = |name: &str| -> Option<f64> {
        let want = format!("{name}{{pid=\"{cpid}\",");
        counted.lines().find(|l| l.starts_with(&want)).and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    let umem_gets = events
        .iter()
        .filter(|e| e.pid == cpid && e.is(rdma_trace::event::ProbeId::UmemGet))
        .filter(|e| e.kind == rdma_trace::event::EventKind::Entry)
        .count();
    let hits = |row: &str| {
        let want = format!("rdma_trace_probe_hits_total{{pid=\"{cpid}\",comm=\"");
        counted
            .lines()
            .find(|l| l.starts_with(&want) && l.contains(&format!("probe=\"{row}")))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
    };
    let stderr = std::fs::read_to_string(&counting_err).unwrap();
    assert!(
        stderr.contains("skipped") || stderr.contains("kernel probes only"),
        "uprobes left out:\n{stderr}"
    );
    assert_eq!(series("rdma_trace_pinned_peak_bytes"), Some(ps.pinned_peak_bytes as f64), "peak:\n{counted}");
    assert_eq!(series("rdma_trace_pinned_bytes"), Some(ps.pinned_bytes as f64), "pinned now:\n{counted}");
    assert_eq!(series("rdma_trace_mr_registrations_total"), Some(ps.pins_total as f64), "pins:\n{counted}");
    assert_eq!(series("rdma_trace_mr_refusals_total"), Some(ps.failed_pins_total as f64), "refusals");
    assert_eq!(series("rdma_trace_pin_latency_seconds_count"), Some(ps.pin_latency.count as f64));
    assert_eq!(hits("umem_get ("), Some(umem_gets as f64), "umem_get hits:\n{counted}");
    // Its completions, by the context their handler ran in, and their wakeups.
    let by_context: std::collections::BTreeMap<String, f64> = counted
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("rdma_trace_completions_total{{pid=\"{cpid}\",")))
        .filter_map(|l| {
            let ctx = l.split_once("context=\"")?.1.split_once('"')?.0.to_string();
            Some((ctx, l.rsplit(' ').next()?.parse().ok()?))
        })
        .collect();
    let story_contexts: std::collections::BTreeMap<String, f64> =
        ps.completions_by_context.iter().map(|(c, n)| (c.as_str().to_string(), *n as f64)).collect();
    assert!(ps.completions_total > 0, "the companion's completions are in the story");
    assert_eq!(by_context, story_contexts, "completions by context:\n{counted}");
    assert_eq!(
        series("rdma_trace_wakeup_latency_seconds_count"),
        Some(ps.wakeup_latency.count as f64),
        "wakeups:\n{counted}"
    );
}

/// Prometheus's own check of an exposition passes.
/// The releases the counting daemon on :9467 could charge to no one, as its metrics say
/// them (waited for, a minute at most, as a stats tick renews the metrics).
fn unjoined_releases(dir: &Path) -> u64 {
    let t0 = std::time::Instant::now();
    loop {
        let (code, text) =
            prom::http_get("127.0.0.1:9467", "/metrics").expect("the counting daemon's metrics");
        assert_eq!(code, 200);
        let n: u64 = text
            .lines()
            .filter(|l| {
                l.starts_with("rdma_trace_events_lost_total{probe=\"umem_release")
                    && l.contains("reason=\"not joined\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
        if n >= 3 || t0.elapsed() > Duration::from_secs(60) {
            std::fs::write(dir.join("seeded-counting-metrics.txt"), &text).unwrap();
            return n;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn promtool_check(text: &str) {
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    std::io::Write::write_all(&mut check.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let checked = check.wait_with_output().unwrap();
    assert!(
        checked.status.success(),
        "promtool check metrics:\n{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}

/// A subscriber that stops reading for 10 s while the companion and `ib_send_bw -e` run
/// costs the daemon and the other subscriber nothing: the other gets every record (no gap,
/// no loss), the ring loses nothing, and the stalled one is told exactly what it missed
/// (its records + the counts it was told = the other's, over the same sequence numbers).
#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_daemon_a_subscriber_that_stops_reading_costs_the_others_nothing() {
    use std::io::BufRead;
    let dir = out_dir("daemon-stall");
    let socket = Path::new("/tmp/rdma-trace-stall.sock");
    let derr = dir.join("daemon.stderr");
    // A queue that 10 s of the workloads overflow (with the socket's buffer: about 5000
    // records come in that time here), and that a subscriber which keeps reading never fills.
    // With 64 the steady one (its file on the 9p share, the CPUs busy under TCG) fell 628
    // records behind on 6.12 and was told so; it now writes into the guest's RAM. With 1024
    // it fell 272 records behind once on 7.3 (told so, in a loss record); 2048 leaves it
    // twice the room, and the stalled one still loses most of the 10 s. With 2048 it fell
    // 82 behind once on 6.12 (stop 55): on the guest's one vCPU the companion, ib_send_bw,
    // the daemon and this test all run, and the steady reader waited for the CPU. It runs
    // ahead of them now (nice -10), so what it measures is the daemon, not the scheduler.
    let mut daemon = start_daemon(&["--subscriber-queue", "2048"], socket, None, &derr, "serving on");
    let steady_file = Path::new("/tmp/rdma-trace-steady.jsonl");
    let mut steady = common::daemon::subscriber_at(&dir, "steady", socket, steady_file, -10);
    let mut stalled =
        rdma_trace::serve::client::connect(socket, rdma_trace::serve::Want::Both).expect("a raw subscriber");
    let stalled_at = std::time::Instant::now();
    let mut companion = Command::new(workload_bin())
        .args(["--mr-sizes", "4K,64K", "--iterations", "20", "--announce", "/dev/null"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("companion.stderr")).unwrap())
        .spawn()
        .expect("start the companion");
    send_bw_events(&dir, "500");
    assert!(wait_timeout(&mut companion, 120).success(), "the companion");
    if let Some(rest) = Duration::from_secs(10).checked_sub(stalled_at.elapsed()) {
        std::thread::sleep(rest);
    }
    // It reads again, to the end: the daemon stops (SIGTERM) while it drains.
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        let mut line = String::new();
        while stalled.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            lines.push(std::mem::take(&mut line));
        }
        lines
    });
    std::thread::sleep(Duration::from_secs(2));
    let signalled = std::time::Instant::now();
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let dst = wait_timeout(&mut daemon, 60);
    let stopped_in = signalled.elapsed();
    let dtext = std::fs::read_to_string(&derr).unwrap();
    std::fs::write(dir.join("stopped-in.txt"), format!("SIGTERM to exit: {stopped_in:?}\n")).unwrap();
    assert!(dst.success(), "daemon {dst}:\n{dtext}");
    assert!(!dtext.contains("ring full"), "the stall backed up into the ring:\n{dtext}");
    // Issue 41: whatever the subscribers do, they hold a stop up 0.5 s at most (the
    // daemon's "ending the streams", said when a stop took over a second). Detaching the
    // probes is the kernel's time, seconds under TCG (issue 44): not asserted here.
    let ending = dtext
        .lines()
        .find_map(|l| l.split("ending the streams ").nth(1))
        .and_then(|r| r.split(' ').next())
        .map(|secs| secs.parse::<f64>().expect("seconds"));
    assert!(
        ending.is_none_or(|s| s <= 0.6),
        "the subscribers held the stop {ending:?} s ({stopped_in:?} in all):\n{dtext}"
    );
    assert!(wait_timeout(&mut steady, 30).success());
    let got: String = reader.join().expect("the stalled reader").concat();
    let mut r = Reader::new(got.as_bytes(), true);
    let slow: Vec<Record> = r.by_ref().map(|x| x.expect("readable")).collect();
    assert!(r.report.saw_trailer, "the stalled one still gets the trailer");
    let told: Vec<(u64, u64)> = slow
        .iter()
        .filter_map(|x| match x {
            Record::Loss(l) if l.site == rdma_trace::capture::LossSite::Subscriber => Some((l.seq, l.count)),
            _ => None,
        })
        .collect();
    assert!(!told.is_empty(), "a 10 s stall with a 2048-record queue loses records, and says so");
    std::fs::copy(steady_file, dir.join("steady.jsonl")).expect("the steady one's stream kept");
    let mut fr = Reader::new(std::io::BufReader::new(std::fs::File::open(steady_file).unwrap()), true);
    let fast: Vec<Record> = fr.by_ref().map(|x| x.expect("readable")).collect();
    assert_eq!(fr.report.seq_gaps, 0, "the steady one has every record");
    assert!(!fast.iter().any(lost_to_the_subscriber), "and is told no loss");
    // Over the stalled one's shared span: its records plus what it was told = the other's.
    let shared = |rs: &[Record]| -> Vec<u64> {
        rs.iter()
            .filter(|x| !matches!(x, Record::Header(_) | Record::State(_)))
            .filter(|x| !lost_to_the_subscriber(x))
            .filter_map(Record::seq)
            .collect()
    };
    let (slow_seqs, fast_seqs) = (shared(&slow), shared(&fast));
    let (first, last) = (slow_seqs[0], *slow_seqs.last().unwrap());
    let fast_span = fast_seqs.iter().filter(|s| (first..=last).contains(*s)).count() as u64;
    let lost: u64 = told.iter().map(|t| t.1).sum();
    assert_eq!(slow_seqs.len() as u64 + lost, fast_span, "received {} + told {lost}", slow_seqs.len());
    std::fs::write(
        dir.join("figures.txt"),
        format!(
            "stalled: {} records received, {lost} told lost in {} loss records; steady: {fast_span}\n",
            slow_seqs.len(),
            told.len()
        ),
    )
    .unwrap();
}

/// As uid/gid 65534 in a forked child: connects to `socket`, writes up to `mib` MiB with no
/// newline (until the daemon closes), then reads its answer. Exit 0: the answer is one
/// line from the daemon refusing it. Everything the child touches is made before the fork
/// (the test is multithreaded: a child may not allocate).
fn flood_as_nobody(socket: &Path, mib: usize) -> libc::pid_t {
    let addr = unix_addr(socket);
    let chunk = vec![b'x'; 1 << 20];
    let mut answer = [0u8; 512];
    let want = b"rdma-trace daemon: refused";
    // SAFETY: fork(2); the child makes only async-signal-safe system calls on memory made
    // before it, then _exit(2)s.
    let pid = unsafe { libc::fork() };
    if pid != 0 {
        return pid;
    }
    // SAFETY: the child's system calls, on the address and buffers made before the fork.
    unsafe {
        become_uid(65534);
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        if fd < 0 || libc::connect(fd, (&raw const addr).cast(), len) != 0 {
            libc::_exit(4);
        }
        for _ in 0..mib {
            if libc::send(fd, chunk.as_ptr().cast(), chunk.len(), libc::MSG_NOSIGNAL) < 0 {
                break;
            }
        }
        let n = libc::read(fd, answer.as_mut_ptr().cast(), answer.len());
        let refused = n >= want.len() as isize && answer[..want.len()] == want[..];
        let one_line = n > 0 && answer[..n as usize].iter().filter(|&&b| b == b'\n').count() == 1;
        libc::_exit(if refused && one_line { 0 } else { 1 });
    }
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_daemon_other_users_cannot_exhaust_it() {
    use std::io::Write;
    let dir = out_dir("daemon-guard");
    let socket = Path::new("/tmp/rdma-trace-guard.sock");
    let derr = dir.join("daemon.stderr");
    let ready = "metrics on http://127.0.0.1:9465/metrics";
    // Other uids allowed: the socket is 0666, so any local user can connect.
    let args = ["--allow-uid", "1000", "--metrics", "127.0.0.1:9465"];
    let mut daemon = start_daemon(&args, socket, None, &derr, ready);
    let dpid = daemon.id();
    let mut guarded = subscriber(&dir, "guarded", socket);
    let (rss0, threads0) = (status_field(dpid, "VmRSS:"), status_field(dpid, "Threads:"));
    // 64 connections as nobody, each pushing 16 MiB with no newline (1 GiB in all, as
    // issue 27 tried), and 32 slow-loris metrics requests that never end their headers.
    let floods: Vec<libc::pid_t> = (0..64).map(|_| flood_as_nobody(socket, 16)).collect();
    let lorises: Vec<std::net::TcpStream> = (0..32)
        .map(|_| {
            let mut s = std::net::TcpStream::connect("127.0.0.1:9465").unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\nX-Slow: ").unwrap();
            s
        })
        .collect();
    let (mut rss_max, mut threads_max) = (rss0, threads0);
    let t0 = std::time::Instant::now();
    let mut scraped = Vec::new();
    while t0.elapsed() < Duration::from_secs(6) {
        rss_max = rss_max.max(status_field(dpid, "VmRSS:"));
        threads_max = threads_max.max(status_field(dpid, "Threads:"));
        scraped.push(prom::http_get("127.0.0.1:9465", "/metrics").map(|r| r.0));
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut refused = 0;
    for pid in floods {
        let mut st = 0;
        // SAFETY: waitpid(2) on our own child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        refused += usize::from(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0);
    }
    drop(lorises);
    let mut companion = Command::new(workload_bin())
        .args(["--mr-sizes", "4K", "--iterations", "2", "--announce", "/dev/null"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("companion.stderr")).unwrap())
        .spawn()
        .expect("start the companion");
    assert!(wait_timeout(&mut companion, 120).success(), "the companion");
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(dpid as i32, libc::SIGTERM) };
    let dst = wait_timeout(&mut daemon, 60);
    let dtext = std::fs::read_to_string(&derr).unwrap();
    let report = format!(
        "RSS {rss0} → {rss_max} kB, threads {threads0} → {threads_max}, refused {refused}/64, scrapes {scraped:?}"
    );
    std::fs::write(dir.join("guard.txt"), format!("{report}\n")).unwrap();
    assert!(dst.success(), "daemon {dst}:\n{dtext}");
    assert_eq!(refused, 64, "every flooding nobody got one line refusing it: {report}");
    assert!(rss_max < rss0 + 64 * 1024, "the daemon's RSS grew by more than 64 MiB: {report}");
    let bound = threads0 + socket_bounds() as u64;
    assert!(threads_max <= bound, "threads past {bound}: {report}");
    let answered = scraped.iter().filter(|c| **c == Some(200)).count();
    assert_eq!(answered, scraped.len(), "every scrape answered 200 among the slow ones: {report}");
    assert!(wait_timeout(&mut guarded, 30).success(), "the guarded subscriber");
    let rs = records(&dir.join("guarded.jsonl"));
    // What the daemon could not send this subscriber is what a flood could cost it. The
    // kernel's own accounting (program runs it skipped, a ring full) is reported to it
    // as well, and is no loss of the socket's: kept in guard.txt.
    let (not_sent, kernel): (Vec<&Record>, Vec<&Record>) =
        rs.iter().filter(|r| matches!(r, Record::Loss(_))).partition(|r| lost_to_the_subscriber(r));
    std::fs::write(dir.join("guard.txt"), format!("{report}\nthe kernel's accounting told: {kernel:?}\n"))
        .unwrap();
    assert!(not_sent.is_empty(), "the subscriber lost records: {not_sent:?}");
    assert!(matches!(rs.last(), Some(Record::Trailer(_))), "it got the trailer");
    let cpid = companion.id();
    assert!(
        rs.iter().any(|r| matches!(r, Record::Event(e) if e.pid == cpid)),
        "the companion, run after the flood, was seen"
    );
}

/// Threads the daemon may add while greeting and answering at their limits.
fn socket_bounds() -> usize {
    use rdma_trace::serve::socket::{MAX_GREETING, MAX_GREETING_PER_UID};
    MAX_GREETING + MAX_GREETING_PER_UID + rdma_trace::serve::http::MAX_IN_FLIGHT + 4
}

/// The address of the Unix socket at `socket`, for a forked child's connect(2).
fn unix_addr(socket: &Path) -> libc::sockaddr_un {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid (empty) address.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(socket.as_os_str().as_bytes()) {
        *d = *s as libc::c_char;
    }
    addr
}

/// In a forked child: no groups, then gid and uid `uid`; exit 3 if any of that fails.
///
/// # Safety
/// Only in a forked child of this multithreaded test: it makes system calls alone.
unsafe fn become_uid(uid: u32) {
    // SAFETY: system calls with no memory of ours but a null pointer.
    unsafe {
        let ok =
            libc::setgroups(0, std::ptr::null()) == 0 && libc::setgid(uid) == 0 && libc::setuid(uid) == 0;
        if !ok {
            libc::_exit(3);
        }
    }
}

/// Forks a child that, as `uid`, opens `n` connections to `socket` and holds them 13 s:
/// silent, or (`dribble`) sending one byte on each every 4 s. Everything the child touches
/// is made before the fork (the test is multithreaded: a child may not allocate).
fn hold_as(uid: u32, socket: &Path, n: usize, dribble: bool) -> libc::pid_t {
    let addr = unix_addr(socket);
    let mut fds = vec![-1i32; n];
    let four = libc::timespec { tv_sec: 4, tv_nsec: 0 };
    // SAFETY: fork(2); the child makes only async-signal-safe system calls on memory made
    // before it, then _exit(2)s.
    let pid = unsafe { libc::fork() };
    if pid != 0 {
        return pid;
    }
    // SAFETY: the child's system calls, on the address and buffers made before the fork.
    unsafe {
        become_uid(uid);
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        for fd in fds.iter_mut() {
            *fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            if *fd < 0 || libc::connect(*fd, (&raw const addr).cast(), len) != 0 {
                libc::_exit(4);
            }
        }
        for _ in 0..3 {
            libc::nanosleep(&four, std::ptr::null_mut());
            if dribble {
                for fd in &fds {
                    libc::send(*fd, b"{".as_ptr().cast(), 1, libc::MSG_NOSIGNAL);
                }
            }
        }
        libc::nanosleep(&four, std::ptr::null_mut());
        libc::_exit(0);
    }
}

/// Issue 41: 64 silent connections and 64 that send a byte every 4 s, all of an allowed
/// uid, beside a root subscriber. Then a root viewer joins: its state comes within 2 s,
/// and the subscriber that was there loses nothing. One user's connections hold
/// `MAX_GREETING_PER_UID` greeting slots at most; root has slots of its own.
#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_daemon_slow_hellos_of_a_user_cannot_hold_up_roots_join() {
    let dir = out_dir("daemon-slow-hellos");
    let socket = Path::new("/tmp/rdma-trace-slow-hellos.sock");
    let derr = dir.join("daemon.stderr");
    let mut daemon = Reaped::of(start_daemon(&["--allow-uid", "1000"], socket, None, &derr, "serving on"));
    let mut there = Reaped::of(subscriber(&dir, "there", socket));
    let mut companion = Command::new(workload_bin())
        .args(["--mr-sizes", "4K,64K", "--iterations", "20", "--announce", "/dev/null"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("companion.stderr")).unwrap())
        .spawn()
        .expect("start the companion");
    let holders: Vec<libc::pid_t> = [false, true].iter().map(|&d| hold_as(1000, socket, 64, d)).collect();
    // Their connections are made, and the greeting slots they can hold are held.
    std::thread::sleep(Duration::from_secs(2));
    let took = join_once(socket);
    let mut held_on = 0;
    for pid in holders {
        let mut st = 0;
        // SAFETY: waitpid(2) on our own child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        held_on += usize::from(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0);
    }
    assert!(wait_timeout(&mut companion, 120).success(), "the companion");
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let dst = wait_timeout(&mut daemon, 60);
    let dtext = std::fs::read_to_string(&derr).unwrap();
    std::fs::write(dir.join("join.txt"), format!("root's join among 128 slow connections: {took:?}\n"))
        .unwrap();
    assert!(dst.success(), "daemon {dst}:\n{dtext}");
    assert_eq!(held_on, 2, "both holders connected 64 times and held on: {dtext}");
    let (took, _) = took.unwrap_or_else(|e| panic!("root's join: {e}\n{dtext}"));
    assert!(took < Duration::from_secs(2), "root's state came after {took:?}");
    assert!(dtext.contains("busy greeting this user's other connections"), "{dtext}");
    assert!(wait_timeout(&mut there, 30).success(), "the subscriber that was there");
    let rs = records(&dir.join("there.jsonl"));
    assert!(!rs.iter().any(lost_to_the_subscriber), "the subscriber that was there lost records");
    assert!(matches!(rs.last(), Some(Record::Trailer(_))), "it got the trailer");
    let cpid = companion.id();
    assert!(rs.iter().any(|r| matches!(r, Record::Event(e) if e.pid == cpid)), "it saw the companion");
}

/// Issue 41: a daemon's capture file that cannot be written (a full disk: a 64 KiB tmpfs)
/// costs its subscribers nothing. The daemon says so on stderr, to each subscriber (a
/// loss record of `output capture`) and in its metrics, serves on, and ends with the
/// trailer; the subscriber's stream holds the companion's whole run.
#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_daemon_a_full_disk_loses_the_file_not_the_subscribers() {
    let dir = out_dir("daemon");
    let full = Path::new("/tmp/rdma-trace-lab-full");
    std::fs::create_dir_all(full).unwrap();
    let mounted =
        Command::new("mount").args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"]).arg(full).status().unwrap();
    assert!(mounted.success(), "mount a 64 KiB tmpfs");
    let socket = Path::new("/tmp/rdma-trace-lab-full.sock");
    let derr = dir.join("full-daemon.stderr");
    let ready = "metrics on http://127.0.0.1:9465/metrics";
    let mut daemon =
        start_daemon(&["--metrics", "127.0.0.1:9465"], socket, Some(&full.join("cap.jsonl")), &derr, ready);
    let sub_out = dir.join("full-subscriber.jsonl");
    let mut sub = subscriber_to(&dir, "full-subscriber", socket, &sub_out);
    let mut companion = Command::new(workload_bin())
        .args(["--mr-sizes", "4K,64K,1M"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("full-companion.stderr")).unwrap())
        .spawn()
        .expect("start the companion");
    let cst = wait_timeout(&mut companion, 120);
    assert!(cst.success(), "companion {cst}");
    let cpid = companion.id();
    std::thread::sleep(Duration::from_secs(3));
    let (code, metrics) = prom::http_get("127.0.0.1:9465", "/metrics").expect("the daemon's metrics");
    std::fs::write(dir.join("full-metrics.txt"), &metrics).unwrap();
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let dst = wait_timeout(&mut daemon, 60);
    let sst = wait_timeout(&mut sub, 60);
    Command::new("umount").arg(full).status().ok();
    let err = std::fs::read_to_string(&derr).unwrap();
    assert!(dst.success(), "the daemon ends as asked: {dst}\n{err}");
    assert!(sst.success(), "the subscriber: {sst}");
    assert!(err.contains("writing the capture file failed"), "{err}");
    assert!(err.contains("records were not written to it"), "{err}");
    assert_eq!(code, 200);
    assert!(
        metrics.contains("rdma_trace_events_lost_total{probe=\"output capture\",reason=\"write failed\"} 1"),
        "{metrics}"
    );
    let recs = records(&sub_out);
    let told = recs.iter().any(|r| {
        matches!(r, Record::Loss(l) if l.site.to_string() == "output capture" && l.reason.as_str() == "write failed")
    });
    assert!(told, "the subscriber was told the file failed");
    assert!(matches!(recs.last(), Some(Record::Trailer(_))), "the subscriber got the trailer");
    let pins = recs
        .iter()
        .filter(|r| matches!(r, Record::Event(e) if e.pid == cpid && e.name.as_str() == "umem_get" && e.kind == rdma_trace::event::EventKind::Entry))
        .count();
    assert_eq!(pins, 3, "every pin of the companion reached the subscriber");
}

/// Issue 41: `daemon -o FILE --max-size 16K --rotate 3` moves on to a new file as `trace`
/// does and keeps the newest three (the first, rot.jsonl, is gone), each whole (a header
/// first, a trailer last) and not much past its size.
#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_daemon_rotates_its_capture_file() {
    let dir = out_dir("daemon").join("rotate");
    // A run before this one (a longer one) leaves files this one would not remove.
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap();
    let socket = Path::new("/tmp/rdma-trace-lab-rotate.sock");
    let derr = dir.join("daemon.stderr");
    let mut daemon = start_daemon(
        &["--max-size", "16K", "--rotate", "3"],
        socket,
        Some(&dir.join("rot.jsonl")),
        &derr,
        "serving on",
    );
    // Two runs of the companion: well over three files of 16 KiB.
    for _ in 0..2 {
        let mut companion = Command::new(workload_bin())
            .args(["--mr-sizes", "4K,64K,1M"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the companion");
        assert!(wait_timeout(&mut companion, 120).success());
    }
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let dst = wait_timeout(&mut daemon, 60);
    assert!(dst.success(), "{}", std::fs::read_to_string(&derr).unwrap());
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("rot"))
        .collect();
    assert_eq!(files.len(), 3, "the newest three are kept: {files:?}");
    assert!(!dir.join("rot.jsonl").exists(), "the oldest files are removed: {files:?}");
    for f in &files {
        let recs = records(f);
        assert!(matches!(recs.first(), Some(Record::Header(_))), "{}", f.display());
        assert!(matches!(recs.last(), Some(Record::Trailer(_))), "{}", f.display());
        assert!(std::fs::metadata(f).unwrap().len() < 64 << 10, "{}", f.display());
    }
}
