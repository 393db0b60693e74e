//! The daemon over long runs (`cargo xtask soak`, not in the gate): joins by the
//! thousand while companions come and go with their pids reused, and a late viewer of a
//! process holding 100 000 MRs.

mod common;

use common::daemon::*;
use common::*;
use rdma_trace::capture::Record;
use rdma_trace::source::capture::Reader;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Issue 41: a daemon up for 30 min while companions come and go, each about 0.45 s,
/// with pids reused (the guest's `pid_max` at 512 for the run), and a join about every
/// 0.9 s: 2 000 joins at least. Every join gets its state, which holds the processes that
/// exist (the gone are forgotten), not every one the daemon saw; the daemon's RSS, threads
/// and descriptors at the end are where they were once its 5-minute window of ended
/// processes filled (within a margin for the allocator); a subscriber that stays loses nothing and gets the trailer, and the
/// run lost no event; every companion is watched (its syscalls are traced), a pid's first
/// one and those given a pid again alike. `RDMA_TRACE_SOAK_MINUTES` shortens it (a try).
#[test]
#[ignore = "soak: minutes in the soft-RoCE guest (cargo xtask soak)"]
fn soak_daemon_thirty_minutes_of_churn_and_joins_leave_it_flat() {
    let dir = out_dir("daemon-joins");
    let socket = Path::new("/tmp/rdma-trace-joins.sock");
    let derr = dir.join("daemon.stderr");
    let mut daemon = Reaped::of(start_daemon(&[], socket, None, &derr, "serving on"));
    let dpid = daemon.id();
    let mut steady = Reaped::of(subscriber(&dir, "steady", socket));
    let companion = workload_bin();
    let _pid_max = PidMax::set(512);
    let launched = dir.join("launched.txt");
    std::fs::remove_file(&launched).ok();
    let mut churn = Reaped::group(Command::new("sh").args([
        "-c",
        &format!(
            "while :; do {} --mr-sizes 4K,64K --iterations 1 --announce /dev/null >/dev/null 2>&1 & \
             echo $! >> {}; wait $!; done",
            companion.display(),
            launched.display()
        ),
    ]));
    let minutes: u64 =
        std::env::var("RDMA_TRACE_SOAK_MINUTES").ok().and_then(|m| m.parse().ok()).unwrap_or(30);
    let run = Duration::from_secs(minutes * 60);
    let joins: u32 = if minutes >= 30 { 2000 } else { 10 };
    let cadence = run / joins;
    let mut took = Vec::new();
    let mut most_processes = 0;
    // (minute, RSS kB, threads, fds): after the first minute, then every five.
    let mut at: Vec<(u64, u64, u64, u64)> = Vec::new();
    let usage = |m: u64| (m, status_field(dpid, "VmRSS:"), status_field(dpid, "Threads:"), fds(dpid));
    let t0 = std::time::Instant::now();
    let mut i = 0u32;
    while i < joins || t0.elapsed() < run {
        match join_once(socket) {
            Ok((t, processes)) => {
                took.push(t);
                most_processes = most_processes.max(processes);
            }
            Err(e) => panic!("join {i} at {:?}: {e}", t0.elapsed()),
        }
        i += 1;
        let minute = t0.elapsed().as_secs() / 60;
        let due = match at.last() {
            None => minute >= 1,
            Some(l) => minute >= l.0 + 5,
        };
        if due {
            at.push(usage(minute));
        }
        if let Some(rest) = (cadence * i).checked_sub(t0.elapsed()) {
            std::thread::sleep(rest);
        }
    }
    at.push(usage(t0.elapsed().as_secs() / 60));
    churn.signal(libc::SIGKILL);
    wait_timeout(&mut churn, 10);
    std::thread::sleep(Duration::from_secs(2));
    took.sort();
    let q = |f: f64| took[((took.len() - 1) as f64 * f) as usize];
    let figures = format!(
        "{} joins in {:?}: state after p50 {:?}, p99 {:?}, max {:?}; at most {most_processes} processes in a state; \
         (minute, RSS kB, threads, fds): {at:?}\n",
        took.len(),
        t0.elapsed(),
        q(0.5),
        q(0.99),
        q(1.0)
    );
    std::fs::write(dir.join("joins.txt"), &figures).unwrap();
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(dpid as i32, libc::SIGTERM) };
    let dst = wait_timeout(&mut daemon, 60);
    assert!(dst.success(), "daemon {dst}: {}", std::fs::read_to_string(&derr).unwrap_or_default());
    assert!(wait_timeout(&mut steady, 30).success(), "the steady subscriber");
    // The daemon keeps each ended process's last row 5 min (Prometheus's lookback,
    // `Engine::ended`) and fills its other bounded lists meanwhile: RSS is flat from then on
    // (6.12: 85.5 MiB at 1 min, 102.5 at 6, 104.8 at 30).
    let first = at.iter().find(|a| a.0 >= 6).copied().unwrap_or(at[0]);
    let last = at[at.len() - 1];
    assert!(last.1 < first.1 + 8 * 1024, "RSS grew by more than 8 MiB after the first 6 minutes: {figures}");
    assert!(last.2 <= first.2 + 2, "threads grew: {figures}");
    assert!(last.3 <= first.3 + 2, "descriptors grew: {figures}");
    // One companion at a time (about 0.45 s each under TCG), and those gone in the last
    // 4 s or so (found gone at two stats ticks, then joined past the 1 s reorder window):
    // not the 1 000 the story may follow, nor the 1 600 launched.
    assert!(most_processes <= 32, "the state kept processes that were gone: {figures}");
    let rs = records(&dir.join("steady.jsonl"));
    let lost: Vec<&Record> = rs.iter().filter(|r| lost_to_the_subscriber(r)).collect();
    assert!(lost.is_empty(), "the steady subscriber lost records: {lost:?}\n{figures}");
    let Some(Record::Trailer(t)) = rs.last() else { panic!("it got no trailer: {figures}") };
    // Every probe delivered all it counted. Runs of a program the kernel skipped (its
    // recursion guard: on 7.3, with full preemption, sys_enter skipped 653 of some 363 000
    // runs in this soak; 6.12 skipped none) are shown in the account and written here;
    // they come from the kernel, not from the joins.
    use rdma_trace::capture::{LossReason, LossSite};
    let (skipped, lost): (Vec<_>, Vec<_>) = t.sites.iter().filter(|s| !s.lost.is_empty()).partition(|s| {
        matches!(s.site, LossSite::Program(_)) && s.lost.keys().all(|r| *r == LossReason::SkippedByKernel)
    });
    std::fs::write(dir.join("skipped-by-kernel.txt"), format!("{skipped:?}\n")).unwrap();
    assert!(lost.is_empty(), "the run lost events during the joins: {lost:?}\n{figures}");
    let events = rs.iter().filter(|r| matches!(r, Record::Event(_))).count();
    assert!(events > 1000, "the companions' events flowed through the joins: {events}\n{figures}");
    // Watched are the companions, never a task that got a gone companion's pid: not the
    // daemon's own threads, the `rdma` it runs for each join, or the shell's children
    // before they exec (all three were traced before the gone left the watch table).
    let strays: std::collections::BTreeMap<&str, usize> = rs
        .iter()
        .filter_map(|r| match r {
            Record::Event(e) if e.path == rdma_trace::event::Path::Syscall => Some(e.comm.as_str()),
            _ => None,
        })
        .filter(|c| *c != "rdma-trace-work")
        .fold(Default::default(), |mut m, c| {
            *m.entry(c).or_default() += 1;
            m
        });
    assert!(strays.is_empty(), "syscalls of tasks that are not verbs users were traced: {strays:?}");
    watched_again(&rs, &std::fs::read_to_string(&launched).unwrap(), &dir, minutes >= 30);
}

/// The companions launched one after another (`launched`: their pids in order), against
/// the stream: each launch is a run of consecutive companion events under its pid. A run
/// is watched if a syscall of it was traced. Every run is: the kernel watches a process
/// from its first verbs entry, so no companion ends before it is watched, and a pid given
/// to a new companion is watched again. The last launch, killed at the end, is not counted.
fn watched_again(rs: &[Record], launched: &str, dir: &Path, reuse_expected: bool) {
    use rdma_trace::event::Path as EventPath;
    let pids: Vec<u32> = launched.lines().filter_map(|l| l.trim().parse().ok()).collect();
    let mut runs: Vec<(u32, bool)> = Vec::new();
    for r in rs {
        let Record::Event(e) = r else { continue };
        if e.comm != "rdma-trace-work" {
            continue;
        }
        match runs.last_mut() {
            Some((pid, watched)) if *pid == e.pid => *watched |= e.path == EventPath::Syscall,
            _ => runs.push((e.pid, e.path == EventPath::Syscall)),
        }
    }
    if runs.last().map(|r| r.0) == pids.last().copied() {
        runs.pop();
    }
    // (runs, watched) of first launches of a pid, and of later ones.
    let (mut first, mut later) = ((0u32, 0u32), (0u32, 0u32));
    let mut seen = std::collections::HashSet::new();
    for (pid, watched) in &runs {
        let t = if seen.insert(*pid) { &mut first } else { &mut later };
        t.0 += 1;
        t.1 += u32::from(*watched);
    }
    let rate = |t: (u32, u32)| f64::from(t.1) / f64::from(t.0.max(1));
    let text = format!(
        "{} launches, {} runs seen; first runs of a pid {} ({} watched, {:.0} %), later runs {} ({} watched, {:.0} %)\n",
        pids.len(),
        runs.len(),
        first.0,
        first.1,
        100.0 * rate(first),
        later.0,
        later.1,
        100.0 * rate(later)
    );
    std::fs::write(dir.join("pid-reuse.txt"), &text).unwrap();
    assert!(!reuse_expected || later.0 >= 100, "pid_max 512 forced too few pids to be reused: {text}");
    assert_eq!(first.1, first.0, "a companion was not watched: {text}");
    assert_eq!(later.1, later.0, "a companion given a pid again was not watched: {text}");
}

/// One join, read until the MRs its `state` records hold for `pid` reach `want` (the state
/// it joins with, and what a later reading of the kernel's tables adds for everyone), 3 min
/// at most: the time until then, the state records, the MRs the joining state held, and
/// the MRs in all.
fn join_whole(socket: &Path, pid: u32, want: u64) -> Result<(Duration, usize, u64, u64), String> {
    use rdma_trace::serve::{Hello, Want};
    use std::io::Write;
    let t0 = std::time::Instant::now();
    let mut s = std::os::unix::net::UnixStream::connect(socket).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(120))).ok();
    let hello = serde_json::to_string(&Hello::new(Want::Both)).unwrap();
    s.write_all(format!("{hello}\n").as_bytes()).map_err(|e| format!("hello: {e}"))?;
    let (mut pieces, mut mrs, mut joined) = (0, 0u64, None);
    for r in Reader::new(std::io::BufReader::new(s), true) {
        match r {
            Ok(Record::State(st)) => {
                pieces += 1;
                mrs += st.processes.iter().filter(|p| p.pid == pid).map(|p| p.mrs.len() as u64).sum::<u64>();
            }
            Ok(Record::Header(_)) => {}
            Ok(_) => _ = joined.get_or_insert(mrs),
            Err(e) => return Err(format!("reading: {e}")),
        }
        if (joined.is_some() && mrs >= want) || t0.elapsed() > Duration::from_secs(180) {
            return Ok((t0.elapsed(), pieces, joined.unwrap_or(mrs), mrs));
        }
    }
    Err("the stream ended".into())
}

/// Issue 41: a late viewer of a process that holds 100 000 MRs (4 KiB each, over one
/// buffer: what a storage or KV-cache engine registers), registered while the daemon
/// runs. Under TCG the ring loses about a tenth of the registration burst's events (said
/// in the stats), and reading the kernel's tables takes longer than a joiner waits: the
/// first joiner gets what the events showed, then what the tables add, as everyone does.
/// Its state is split into records the reader accepts, and a late raw join, a late
/// `trace --connect -o` and a late `tui --connect` (tmux, 120×32) get all of it: the
/// capture's report counts 100 000 live MRs and their pinned bytes, as `rdma res show mr`
/// and the companion's VmPin say, and the TUI's overview says the same.
#[test]
#[ignore = "soak: minutes in the soft-RoCE guest (cargo xtask soak)"]
fn soak_daemon_a_late_viewer_of_a_hundred_thousand_mrs() {
    const N: u64 = 100_000;
    let dir = out_dir("daemon-100k");
    let socket = Path::new("/tmp/rdma-trace-100k.sock");
    let derr = dir.join("daemon.stderr");
    let mut daemon = Reaped::of(start_daemon(&[], socket, None, &derr, "serving on"));
    let dpid = daemon.id();
    let cerr = dir.join("companion.stderr");
    let mut companion = Reaped::of(
        Command::new(workload_bin())
            .args(["--hold-mrs", &N.to_string(), "--mr-sizes", "4K", "--announce", "/dev/null"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&cerr).unwrap())
            .spawn()
            .expect("start the companion"),
    );
    let cpid = companion.id();
    wait_for(&cerr, &format!("holding {N} MRs"), &mut companion, 3000)
        .expect("the companion registers its MRs");
    // What the kernel says it holds.
    let res = run_output("rdma", &["-j", "res", "show", "mr"]);
    let listed: Vec<serde_json::Value> = serde_json::from_str(&res).expect("rdma res show mr's JSON");
    let listed = listed.iter().filter(|m| m["pid"] == cpid).count() as u64;
    let vm_pin_kb = status_field(cpid, "VmPin:");
    assert_eq!((listed, vm_pin_kb), (N, N * 4), "the kernel's MR list and VmPin");
    // Let the daemon catch up with the registrations before the joins.
    std::thread::sleep(Duration::from_secs(10));
    let rss_kb = status_field(dpid, "VmRSS:");
    let (took, pieces, joined_with, mrs) = join_whole(socket, cpid, N).expect("a raw join");
    // A late capture, read by the report.
    let late = dir.join("late.jsonl");
    let lerr = dir.join("late.stderr");
    let mut capture = Command::new(tracer_bin())
        .args(["trace", "-q", "--duration", "20", "--connect"])
        .arg(socket)
        .arg("-o")
        .arg(&late)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&lerr).unwrap())
        .spawn()
        .expect("a late trace --connect");
    let lst = wait_timeout(&mut capture, 120);
    assert!(lst.success(), "trace --connect {lst}: {}", std::fs::read_to_string(&lerr).unwrap_or_default());
    let out = Command::new(tracer_bin()).args(["report", "--json"]).arg(&late).output().expect("report");
    assert!(out.status.success(), "report: {}", String::from_utf8_lossy(&out.stderr));
    let report: rdma_trace::output::report::Report =
        serde_json::from_slice(&out.stdout).expect("the report's JSON");
    let p = report.processes.iter().find(|p| p.pid == cpid).expect("the companion in the report");
    // The TUI, late, in an 120×32 terminal.
    let tmux = |args: &[&str]| common::tmux("soak-100k", args);
    let script = format!(
        "{} tui --connect {} 2> {d}/tui.stderr; echo $? > {d}/tui.code; sleep 60",
        tracer_bin().display(),
        socket.display(),
        d = dir.display()
    );
    std::fs::remove_file(dir.join("tui.code")).ok();
    let t_tui = std::time::Instant::now();
    tmux(&["new-session", "-d", "-s", "t", "-x", "120", "-y", "32", "sh", "-c", &script]);
    let want = format!("{N} live/{N} MRs");
    let screen = loop {
        let s = tmux(&["capture-pane", "-p", "-t", "t"]);
        if s.contains(&want) || t_tui.elapsed() > Duration::from_secs(120) {
            break s;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let tui_took = t_tui.elapsed();
    std::fs::write(dir.join("overview.txt"), &screen).unwrap();
    tmux(&["send-keys", "-t", "t", "q"]);
    let t0 = std::time::Instant::now();
    while !dir.join("tui.code").exists() && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(250));
    }
    std::thread::sleep(Duration::from_millis(300));
    let code = std::fs::read_to_string(dir.join("tui.code")).unwrap_or_default();
    tmux(&["kill-server"]);
    // The daemon ends before the companion lets its MRs go (not 100 000 deregistrations to trace).
    let t_stop = std::time::Instant::now();
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(dpid as i32, libc::SIGTERM) };
    let dst = wait_timeout(&mut daemon, 120);
    let stopped_in = t_stop.elapsed();
    companion.signal(libc::SIGTERM);
    let cst = wait_timeout(&mut companion, 600);
    let figures = format!(
        "{N} MRs: daemon RSS {rss_kb} kB; a raw join whole in {took:?} ({pieces} state records, {joined_with} MRs in its joining state, {mrs} in all); \
         report: {} MRs, {} live, {} bytes pinned; TUI overview in {tui_took:?}; daemon stopped in {stopped_in:?}\n",
        p.mrs, p.mrs_live, p.pinned_bytes
    );
    std::fs::write(dir.join("figures.txt"), &figures).unwrap();
    assert!(dst.success(), "daemon {dst}: {}", std::fs::read_to_string(&derr).unwrap_or_default());
    assert!(cst.success(), "companion {cst}: {}", std::fs::read_to_string(&cerr).unwrap_or_default());
    assert_eq!(mrs, N, "the raw join's state: {figures}");
    assert!(pieces >= (N as usize).div_ceil(rdma_trace::capture::STATE_PIECE_ROWS), "{figures}");
    assert_eq!((p.mrs_live, p.pinned_bytes), (N, N * 4096), "the late capture's report: {figures}");
    assert!(
        screen.contains(&want),
        "the TUI's overview did not say {want:?} in 2 min ({}):\n{screen}",
        std::fs::read_to_string(dir.join("tui.stderr")).unwrap_or_default()
    );
    assert_eq!(
        code.trim(),
        "0",
        "q ended the TUI: {}",
        std::fs::read_to_string(dir.join("tui.stderr")).unwrap_or_default()
    );
}
