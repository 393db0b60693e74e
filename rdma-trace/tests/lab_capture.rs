//! Capture format v1 written by a real run (lab guest, both kernels):
//!
//! * a whole capture: its header says which kernel, boot and probes; stats records come at
//!   most a second apart; the trailer's counts are the summary's and the events the file
//!   holds; the sequence has no gap;
//! * a run killed with SIGKILL: the file reads back to within 100 ms of the kill, and the
//!   reader says it was cut short;
//! * a run writing to a full tmpfs: it stops at once, names the file, prints its summary,
//!   and what it wrote reads back.

mod common;

use common::*;
use rdma_trace::capture::{Header, Record, Stats, Trailer};
use rdma_trace::event::Event;
use rdma_trace::source::capture::{ReadReport, Reader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Every record of a capture, read leniently, with the reader's report.
fn read_back(path: &Path) -> (Vec<Record>, ReadReport) {
    let f = std::io::BufReader::new(std::fs::File::open(path).expect("capture exists"));
    let mut r = Reader::new(f, false);
    let recs: Vec<Record> = r.by_ref().map(|x| x.expect("readable")).collect();
    (recs, r.report)
}

fn start_tracer(capture: &Path, stderr: &Path) -> Child {
    let mut tracer = Command::new(tracer_bin())
        .args(["trace", "-q", "-o"])
        .arg(capture)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(stderr).unwrap())
        .spawn()
        .expect("start rdma-trace");
    wait_for(stderr, "rdma-trace: tracing", &mut tracer, 180).expect("rdma-trace attaches");
    tracer
}

/// An event-mode pingpong of `n` round trips: a steady stream of completion events.
fn pingpong(dir: &Path, n: &str) -> (Child, Child) {
    pair(
        dir,
        "rc_pingpong",
        &["ibv_rc_pingpong", "-e", "-d", "rxe0", "-g", "1", "-n", n],
        &["ibv_rc_pingpong", "-e", "-d", "rxe0", "-g", "1", "-n", n, SERVER_IP],
    )
}

fn stop_pair((mut s, mut c): (Child, Child)) {
    for p in [&mut c, &mut s] {
        p.kill().ok();
        p.wait().ok();
    }
}

fn events(recs: &[Record]) -> Vec<&Event> {
    recs.iter()
        .filter_map(|r| match r {
            Record::Event(e) => Some(&**e),
            _ => None,
        })
        .collect()
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_capture_has_header_stats_and_trailer() {
    let dir = out_dir("capture");
    let capture = dir.join("whole.jsonl");
    let err = dir.join("whole.stderr");
    let mut tracer = start_tracer(&capture, &err);
    let t_start = monotonic_ns();
    let (s, c) = pingpong(&dir, "300");
    finish(s, c, "ibv_rc_pingpong -e");
    std::thread::sleep(Duration::from_millis(2500)); // a few stats records after the work
    let t_stop = monotonic_ns();
    interrupt(&tracer);
    let st = wait_timeout(&mut tracer, 60);
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert!(st.success(), "{st}:\n{stderr}");

    let (recs, report) = read_back(&capture);
    assert_eq!(report.version, Some(1));
    assert_eq!((report.damaged, report.seq_gaps, report.cut_short), (0, 0, false), "{report:?}");

    let Some(Record::Header(h)) = recs.first() else { panic!("the header comes first: {:?}", recs.first()) };
    let h: &Header = h;
    let trimmed = |p: &str| std::fs::read_to_string(p).unwrap().trim().to_string();
    assert_eq!(h.kernel_release, trimmed("/proc/sys/kernel/osrelease"));
    assert_eq!(h.boot_id, trimmed("/proc/sys/kernel/random/boot_id"));
    assert_eq!(h.hostname, trimmed("/proc/sys/kernel/hostname"));
    assert!(h.command_line.iter().any(|a| a == "-o"), "{:?}", h.command_line);
    let attached = |id: &str| h.probes.iter().any(|p| p.id == id && p.attached);
    // The links the summary says the run held: an entry and a return for each kernel
    // function attached (a return aya placed counts as an entry link, so the sum holds).
    let kernel_probes = rdma_trace::plan::catalog::CATALOG
        .iter()
        .filter(|s| matches!(s.kind, rdma_trace::plan::catalog::Kind::Kprobe) && attached(s.id.as_str()))
        .count();
    let links = stderr.lines().find_map(|l| l.trim().strip_prefix("links: ")).expect("a links line");
    let n = |after: &str| -> usize {
        let at = links.find(after).unwrap_or_else(|| panic!("{after:?} in {links:?}"));
        links[..at].rsplit([' ', '(']).next().and_then(|w| w.parse().ok()).expect("a count")
    };
    assert_eq!(n(" kernel entries") + n(" returns through tracefs"), 2 * kernel_probes, "{links}");
    assert!(attached("umem_get") && attached("comp_handler") && attached("ibv_reg_mr"), "{:?}", h.probes);
    assert!(
        h.probes.iter().filter(|p| !p.attached).all(|p| p.reason.is_some()),
        "every skipped probe says why: {:?}",
        h.probes
    );
    // Wall clock = monotonic + offset: the header's offset puts the run at now.
    let wall_now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64;
    let wall_of_mono = monotonic_ns() as i64 + h.realtime_offset_ns;
    assert!((wall_now - wall_of_mono).abs() < 1_000_000_000, "offset {} is off", h.realtime_offset_ns);

    let stats: Vec<&Stats> = recs
        .iter()
        .filter_map(|r| match r {
            Record::Stats(s) => Some(s),
            _ => None,
        })
        .collect();
    // Every 800 ms on a fixed schedule from the run loop's first tick to the stop (then the
    // trailer closes it): a tick the busy loop made late (on 6.12 under TCG one came 227 ms
    // late) is followed by an early one, and no tick is lost: no gap reaches two periods,
    // and the schedule does not drift (as many records as periods in the span, give or take
    // one). The first tick comes when the loop starts, after the rest of the start-up that
    // follows the "tracing" line (outputs, the header): that wait is bounded on its own
    // (under TCG it has taken 1.8 s once, with the guest's CPU shared).
    let period = rdma_trace::capture::STATS_EVERY.as_millis() as u64;
    let Some(first) = stats.first() else { panic!("no stats record in {} records", recs.len()) };
    let start_up_ms = first.ts_ns.saturating_sub(t_start) / 1_000_000;
    assert!(start_up_ms < 5_000, "the first stats record came {start_up_ms} ms after \"tracing\"");
    let mut times: Vec<u64> = stats.iter().map(|s| s.ts_ns).collect();
    times.push(t_stop);
    let gaps: Vec<u64> = times.windows(2).map(|w| w[1].saturating_sub(w[0]) / 1_000_000).collect();
    std::fs::write(dir.join("whole.stats-gaps-ms.txt"), format!("start-up {start_up_ms}, then {gaps:?}\n"))
        .ok();
    assert!(gaps.iter().all(|&g| g < 2 * period), "stats gaps (ms) from the first tick to stop: {gaps:?}");
    let span_ms = t_stop.saturating_sub(first.ts_ns) / 1_000_000;
    assert!(stats.len() as u64 + 1 >= span_ms / period, "{} stats in {span_ms} ms: {gaps:?}", stats.len());
    let Some(Record::Trailer(t)) = recs.last() else { panic!("the trailer comes last") };
    let t: &Trailer = t;
    assert_eq!(t.stopped, "SIGINT");
    let evs = events(&recs);
    assert_eq!(t.delivered, evs.len() as u64, "the trailer counts the events the file holds");
    // What was lost (the kernel may skip a program while another runs on the CPU) is
    // counted, and the file's accounting is the summary's and adds up per probe.
    assert!(
        stderr.contains(&format!("{} events delivered, {} lost", t.delivered, t.lost)),
        "the summary agrees:\n{stderr}"
    );
    let delivered_per_site: u64 = t.sites.iter().map(|s| s.delivered).sum();
    let lost_per_site: u64 = t.sites.iter().flat_map(|s| s.lost.values()).sum();
    // Runs the kernel skipped belong to a program, not a probe (programs are shared): they
    // are rows of their own (`program NAME`), as the summary names them; with those rows
    // the total adds up exactly.
    let skipped = program_skips(&stderr, None);
    let program_rows: u64 = t
        .sites
        .iter()
        .filter(|s| matches!(s.site, rdma_trace::capture::LossSite::Program(_)))
        .flat_map(|s| s.lost.values())
        .sum();
    assert_eq!(program_rows, skipped, "the program rows are the summary's skips:\n{stderr}");
    assert_eq!((delivered_per_site, lost_per_site), (t.delivered, t.lost), "{stderr}");
    for s in &t.sites {
        assert_eq!(s.hits, s.delivered + s.lost.values().sum::<u64>(), "{s:?}");
    }
    // The last stats record never counts more than the trailer.
    let last = stats.last().unwrap();
    for s in &last.sites {
        let end = t.sites.iter().find(|e| e.site == s.site).expect("same sites");
        assert!(s.hits <= end.hits && s.delivered <= end.delivered, "{s:?} vs {end:?}");
    }
    // A kernel pointer return that is an ERR_PTR is an error, never a pointer-sized number.
    for e in evs.iter().filter(|e| e.kind == rdma_trace::event::EventKind::Return) {
        for k in [rdma_trace::event::FieldId::Umem, rdma_trace::event::FieldId::Mr] {
            if let Some(n) = e.field(k) {
                assert!(n < u64::MAX - 4095, "{k} = {n} in {e:?}");
            }
        }
    }
    let mr = evs.iter().filter(|e| e.is(rdma_trace::event::ProbeId::UmemGet)).count();
    assert!(mr > 0, "the pingpong's MRs were pinned");
    std::fs::write(dir.join("whole.summary.txt"), format!("{} records, {} stats\n", recs.len(), stats.len()))
        .ok();
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_capture_of_a_killed_run_reads_back_to_within_100ms() {
    let dir = out_dir("capture");
    // Written on the guest's own disk (tmpfs), as a user's capture is, and copied to the
    // share after. On the 9p share a 6.12 file once read back out of order (seq 2020-2024
    // over seq 2001-2006, 25 lines before the end); 12 kills on the share from two guests
    // at once did not repeat it, and the cause is not known. A disorder of the writer's own
    // would show here just the same: only the share is out of the path.
    let local = Path::new("/tmp/rdma-trace-killed.jsonl");
    std::fs::remove_file(local).ok();
    let capture = local.to_path_buf();
    let err = dir.join("killed.stderr");
    // A steady stream the reader keeps up with (a shell waking every 10 ms, its syscalls
    // watched): what is measured is the writer's flushing, not a backlog in the ring on an
    // emulated CPU. The shell waits on a fifo with a timeout, a builtin. Heavier loops left
    // the reader behind: with `sleep 0.01` (a fork and an exec every 10 ms, about 40
    // syscalls each) the 7.3 guest's reader ran 309 ms behind; with a file read besides the
    // wait (about 1500 events/s) a 6.12 file ended 157.6 ms before the kill, its events
    // dense to the end. The loop ends by itself after the kill.
    let script = "f=/tmp/rdma-trace-killed.fifo; rm -f $f; mkfifo $f; exec 3<>$f; \
                  for i in $(seq 1500); do read -t 0.01 -u 3 x; done";
    let mut tracer = Command::new(tracer_bin())
        .args(["trace", "-q", "-o"])
        .arg(&capture)
        .args(["--", "bash", "-c", script])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("start rdma-trace");
    wait_for(&err, "rdma-trace: tracing", &mut tracer, 180).expect("rdma-trace attaches");
    std::thread::sleep(Duration::from_secs(4));
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(tracer.id() as i32, libc::SIGKILL) };
    let killed_at = monotonic_ns();
    tracer.wait().ok();

    std::fs::copy(&capture, dir.join("killed.jsonl")).ok();
    let (recs, report) = read_back(&capture);
    assert!(report.cut_short, "{report:?}");
    assert!(report.notes().iter().any(|n| n.contains("cut short")), "{:?}", report.notes());
    assert!(report.damaged <= 1, "at most the last line is partial: {report:?}");
    let newest = recs
        .iter()
        .filter_map(|r| match r {
            Record::Event(e) => Some(e.ts_ns),
            Record::Stats(s) => Some(s.ts_ns),
            _ => None,
        })
        .max()
        .expect("records before the kill");
    let lag_ms = killed_at.saturating_sub(newest) as f64 / 1e6;
    let event_ts: Vec<u64> =
        recs.iter().filter_map(|r| if let Record::Event(e) = r { Some(e.ts_ns) } else { None }).collect();
    let span_s = newest.saturating_sub(event_ts.first().copied().unwrap_or(newest)) as f64 / 1e9;
    std::fs::write(
        dir.join("killed.summary.txt"),
        format!(
            "{} records ({:.0} events/s); newest {lag_ms:.1} ms before the kill; {:?}\n",
            recs.len(),
            event_ts.len() as f64 / span_s.max(1e-3),
            report
        ),
    )
    .ok();
    assert!(lag_ms <= 100.0, "the file ends {lag_ms:.1} ms before the kill");
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_capture_on_a_full_tmpfs_stops_the_run_naming_the_file() {
    let dir = out_dir("capture");
    let mnt = Path::new("/tmp/rdma-trace-full");
    std::fs::create_dir_all(mnt).unwrap();
    let m =
        Command::new("mount").args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"]).arg(mnt).status().unwrap();
    assert!(m.success(), "mount tmpfs");
    let capture = mnt.join("capture.jsonl");
    let err = dir.join("full.stderr");
    let mut tracer = start_tracer(&capture, &err);
    let pp = pingpong(&dir, "100000");
    let st = wait_timeout(&mut tracer, 120);
    let stderr = std::fs::read_to_string(&err).unwrap();
    stop_pair(pp);
    let (recs, report) = read_back(&capture);
    std::fs::copy(&capture, dir.join("full.jsonl")).ok();
    Command::new("umount").arg(mnt).status().ok();

    assert_eq!(st.code(), Some(1), "{stderr}");
    let named = format!("writing {}: No space left on device", capture.display());
    assert!(stderr.contains(&named), "names the file:\n{stderr}");
    assert!(stderr.contains("events delivered"), "the summary is printed:\n{stderr}");
    assert!(matches!(recs.first(), Some(Record::Header(_))), "the header was written");
    assert!(!events(&recs).is_empty(), "events before the disk filled read back");
    assert!(report.cut_short && report.damaged <= 1, "{report:?}");
}
