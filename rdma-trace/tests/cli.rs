//! The command line as a user types it.

mod common;

use common::detach_helper_running;
use std::path::Path;
use std::process::Command;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_rdma-trace")
}

#[test]
#[ignore = "needs root (traces, or drops to nobody with setpriv): cargo xtask test runs it as root"]
fn without_privileges_one_clear_line_and_nonzero_exit() {
    // As an unprivileged user (nobody, no capabilities).
    // An existing output file nobody may write to is not touched: privileges are
    // checked before any output is opened.
    let dir = std::env::temp_dir().join(format!("rt-nopriv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let existing = dir.join("keep.jsonl");
    std::fs::write(&existing, "precious\n").unwrap();
    std::fs::set_permissions(&existing, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--"])
        .args([bin(), "trace", "--duration", "1", "-o"])
        .arg(&existing)
        .output()
        .expect("setpriv (util-linux, installed by cargo xtask setup)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("needs root (or CAP_BPF and CAP_PERFMON)"), "{err}");
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "precious\n", "the refused run truncated -o");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn help_teaches_each_subcommand_in_rdma_terms() {
    let out = Command::new(bin()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for want in ["trace", "probes", "story", "replay", "memory pinning", "doorbell", "completion"] {
        assert!(help.contains(want), "--help lacks {want:?}:\n{help}");
    }
    let out = Command::new(bin()).args(["trace", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for want in ["--pid", "--story", "--steps", "lost", "kworker"] {
        assert!(help.contains(want), "trace --help lacks {want:?}:\n{help}");
    }
}

/// Runs the binary as nobody, without capabilities.
fn as_nobody(args: &[&str]) -> std::process::Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--"])
        .arg(bin())
        .args(args)
        .output()
        .expect("setpriv (util-linux, installed by cargo xtask setup)")
}

#[test]
#[ignore = "needs root (traces, or drops to nobody with setpriv): cargo xtask test runs it as root"]
fn probes_lists_every_catalog_probe_and_attaching_needs_root() {
    // Independent of the tool's own kallsyms reading: the kernel lists a loaded (or
    // built-in) ib_core under /sys/module.
    let has_rdma = std::path::Path::new("/sys/module/ib_core").exists();
    let out = as_nobody(&["probes", "--no-attach"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for spec in rdma_trace::plan::catalog::CATALOG {
        let row = text.lines().find(|l| l.split_whitespace().next() == Some(spec.id.as_str()));
        let row = row.unwrap_or_else(|| panic!("{} is not listed:\n{text}", spec.id));
        if !has_rdma {
            // This machine's kernel has no RDMA stack; the lab guest's has (lab_probes
            // tests that side).
            assert!(row.contains("skipped") && row.contains("no RDMA stack"), "{row}");
        }
    }
    assert_eq!(err.contains("nothing to trace here"), !has_rdma, "{err}");
    // Attaching is refused like trace.
    let out = as_nobody(&["probes"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("needs root (or CAP_BPF and CAP_PERFMON)") && err.contains("--no-attach"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
#[ignore = "needs root (traces, or drops to nobody with setpriv): cargo xtask test runs it as root"]
fn trace_without_rdma_stops_unless_asked_for_syscalls() {
    require_root();
    if std::path::Path::new("/sys/module/ib_core").exists() {
        return; // the lab guest tests the traced side
    }
    let out = Command::new(bin()).args(["trace", "--duration", "30"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("nothing to trace here"), "{err}");
    let out = Command::new(bin()).args(["trace", "-q", "--", "true"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("only the syscalls of the traced processes will be shown"), "{err}");
}

#[test]
fn an_unknown_probe_id_is_refused_naming_the_ids() {
    let out = Command::new(bin()).args(["trace", "--probe", "bogus", "--duration", "1"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "bad input: {err}");
    assert!(err.contains("unknown probe id bogus"), "{err}");
    for spec in rdma_trace::plan::catalog::CATALOG {
        assert!(err.contains(spec.id.as_str()), "{} not named:\n{err}", spec.id);
    }
}

#[test]
#[ignore = "needs root (traces, or drops to nobody with setpriv): cargo xtask test runs it as root"]
fn control_characters_in_a_process_name_are_escaped() {
    require_root();
    // The shell renames itself (ESC, a newline) and then reads a file with a builtin, so
    // the syscalls are its own under that name.
    let script = r#"printf 'ev\nil\033[2J' > /proc/self/comm; read x < /etc/hostname; true"#;
    let out = Command::new(bin()).args(["trace", "--", "sh", "-c", script]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("ev\\nil\\x1b[2J["), "the name is shown escaped:\n{text}");
    assert!(!text.contains('\x1b'), "no raw ESC reaches the terminal");
    assert!(text.lines().all(|l| !l.starts_with("il")), "no fake line");
}

fn require_root() {
    if rdma_trace::live::privilege::check().is_err() {
        panic!("this test loads eBPF programs: run as root");
    }
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rdma-trace-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The summary's per-probe rows: (name, hits, delivered, lost).
fn summary_rows(err: &str) -> Vec<(String, u64, u64, u64)> {
    err.lines()
        .filter(|l| l.trim_start().starts_with("syscalls "))
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let n = |i: usize| w.get(i)?.parse::<u64>().ok();
            Some((format!("{} {}", w[0], w[1]), n(2)?, n(3)?, n(4)?))
        })
        .collect()
}

fn summary_delivered(err: &str) -> u64 {
    err.lines()
        .find_map(|l| l.strip_prefix("rdma-trace: ")?.split(" events delivered").next()?.parse().ok())
        .unwrap_or_else(|| panic!("no summary:\n{err}"))
}

/// Kills the command the tracer left running (its pid is in the stop line).
fn kill_left_running(err: &str) {
    if let Some(pid) =
        err.split("(pid ").nth(1).and_then(|r| r.split(')').next()).and_then(|p| p.parse::<i32>().ok())
    {
        // SAFETY: killing the command the tracer started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

#[test]
#[ignore = "needs root (traces, or drops to nobody with setpriv): cargo xtask test runs it as root"]
fn ctrl_c_under_a_syscall_flood_stops_at_once_and_accounts_for_every_committed_event() {
    require_root();
    let dir = temp_dir("ctrlc");
    let cap = dir.join("cap.jsonl");
    // stderr to a file: the traced command inherits it and outlives the tracer.
    let err_file = dir.join("stderr.txt");
    let mut child = Command::new(bin())
        .args(["trace", "-q", "-o"])
        .arg(&cap)
        .args(["--", "dd", "if=/dev/zero", "of=/dev/null", "bs=1"])
        .stderr(std::fs::File::create(&err_file).unwrap())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2500));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let t0 = std::time::Instant::now();
    child.wait().unwrap();
    let took = t0.elapsed();
    let err = std::fs::read_to_string(&err_file).unwrap();
    kill_left_running(&err);
    assert!(err.contains("stopped on SIGINT"), "{err}");
    // Stopping is one batch away at any rate; the drain after it reads at most one ring.
    // (The old loop drained until the ring was empty and could run for a minute.)
    assert!(took < std::time::Duration::from_secs(5), "SIGINT to exit took {took:?}:\n{err}");
    let rows = summary_rows(&err);
    assert_eq!(rows.len(), 2, "{err}");
    for (name, hits, delivered, lost) in &rows {
        assert_eq!(*hits, delivered + lost, "{name}: hits = delivered + lost\n{err}");
    }
    assert!(!err.contains("held past shutdown"), "{err}");
    let delivered = summary_delivered(&err);
    let text = std::fs::read_to_string(&cap).unwrap();
    let events = rdma_trace::source::capture::parse_jsonl(&text).unwrap().len() as u64;
    assert!(delivered > 1000, "{err}");
    // The capture's writer has a bounded queue: under a flood it may fall behind the ring
    // reader, and then says in the file how many events it left out.
    let left_out: u64 = rdma_trace::source::capture::Reader::new(text.as_bytes(), true)
        .filter_map(|r| match r.unwrap() {
            rdma_trace::capture::Record::Loss(l)
                if l.site == rdma_trace::capture::LossSite::Output("capture".into())
                    && l.reason == rdma_trace::capture::LossReason::QueueFull =>
            {
                Some(l.count)
            }
            _ => None,
        })
        .sum();
    assert_eq!(
        events + left_out,
        delivered,
        "every delivered event is in the file or told as left out:\n{err}"
    );
    let trailer = text.lines().last().unwrap_or_default();
    assert!(
        trailer.contains(r#""type":"trailer""#) && trailer.contains(&format!(r#""delivered":{delivered},"#)),
        "the capture ends with a trailer giving the same count: {trailer}"
    );
    assert_eq!(delivered, rows.iter().map(|r| r.2).sum::<u64>(), "{err}");
    // The links were handed to a helper that lets them go after the tracer's exit: it
    // ends too (within seconds; another root test's helper may run beside it).
    let t0 = std::time::Instant::now();
    while detach_helper_running() {
        assert!(t0.elapsed() < std::time::Duration::from_secs(20), "a detach helper still runs after 20 s");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
#[ignore = "needs root (traces, or drops to nobody with setpriv): cargo xtask test runs it as root"]
fn duration_is_honoured_under_a_syscall_flood() {
    require_root();
    let dir = temp_dir("duration");
    let err_file = dir.join("stderr.txt");
    let t0 = std::time::Instant::now();
    let st = Command::new(bin())
        .args(["trace", "-q", "--duration", "2", "--", "dd", "if=/dev/zero", "of=/dev/null", "bs=1"])
        .stderr(std::fs::File::create(&err_file).unwrap())
        .status()
        .unwrap();
    let took = t0.elapsed();
    let err = std::fs::read_to_string(&err_file).unwrap();
    kill_left_running(&err);
    // The duration reached the command too: dd ended by SIGTERM, its status is the run's.
    assert_eq!(st.code(), Some(128 + libc::SIGTERM), "{err}");
    assert!(!err.contains("still running"), "{err}");
    assert!(err.contains("stopped on the duration elapsed"), "{err}");
    // Planning and attaching come first (about a second here); then 2 s of tracing.
    assert!(took < std::time::Duration::from_secs(7), "--duration 2 ran {took:?}:\n{err}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
#[ignore = "needs root (traces, or drops to nobody with setpriv): cargo xtask test runs it as root"]
fn exited_children_leave_the_watch_table() {
    require_root();
    let dir = temp_dir("forks");
    let cap = dir.join("cap.jsonl");
    // More short-lived children than the watch table once held (1024), then one more
    // whose open must still be seen.
    let script = "i=0; while [ $i -lt 1100 ]; do /bin/true; i=$((i+1)); done; cat /etc/hostname";
    // Without cargo's LD_LIBRARY_PATH, each exec would probe every directory in it
    // (eight times the syscalls): this test is about the table, not the reader's speed.
    let out = Command::new(bin())
        .args(["trace", "-q", "-o"])
        .arg(&cap)
        .args(["--", "sh", "-c", script])
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let text = std::fs::read_to_string(&cap).unwrap();
    let seen = text.lines().any(|l| l.contains("\"/etc/hostname\"") && l.contains("\"cat\""));
    assert!(seen, "the last child's open of /etc/hostname is traced\n{err}");
    assert!(!err.contains("could not be watched"), "{err}");
    for (name, hits, delivered, lost) in summary_rows(&err) {
        assert_eq!(hits, delivered + lost, "{name}\n{err}");
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
#[ignore = "needs root (traces, or drops to nobody with setpriv): cargo xtask test runs it as root"]
fn a_write_error_stops_the_run_at_once_naming_the_output() {
    require_root();
    let t0 = std::time::Instant::now();
    let out = Command::new(bin())
        .args(["trace", "-q", "-o", "/dev/full", "--duration", "30", "--", "sh", "-c"])
        // The command's own output goes elsewhere: it outlives the run (said in the notice)
        // and must not hold this test's pipes open.
        .arg("exec >/dev/null 2>&1 </dev/null; while :; do cat /dev/null; done")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    let still = err.split("the command (pid ").nth(1).and_then(|r| r.split(')').next()?.parse::<i32>().ok());
    if let Some(pid) = still {
        // SAFETY: kill(2) of the command this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(still.is_some(), "the notice names the command left running:\n{err}");
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("writing /dev/full: No space left on device"), "{err}");
    assert!(err.contains("events delivered"), "the summary is still printed:\n{err}");
    assert!(took < std::time::Duration::from_secs(10), "took {took:?}:\n{err}");
}

#[test]
#[ignore = "needs root (traces, or drops to nobody with setpriv): cargo xtask test runs it as root"]
fn connecting_needs_no_privileges_and_says_when_no_daemon_listens() {
    let out = as_nobody(&["trace", "--connect", "/tmp/rdma-trace-no-such.sock"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("cannot connect to the daemon at /tmp/rdma-trace-no-such.sock"), "{err}");
}

#[test]
fn follow_refuses_a_compressed_capture_with_a_reason() {
    let dir = temp_dir("follow-zst");
    let zst = dir.join("run.jsonl.zst");
    let st = Command::new("zstd")
        .args(["-q", "-f", "-o"])
        .arg(&zst)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab/memlock-7.3.jsonl"))
        .status()
        .unwrap();
    assert!(st.success());
    let out = Command::new(bin()).args(["replay", "--follow"]).arg(&zst).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "bad input: {err}");
    assert!(err.contains("--follow reads plain captures"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// `| head`: a reader that stops reading ends the reading commands quietly, as it ends
/// cat (by SIGPIPE, or 0 where the output was already written), never with a panic or
/// an error line. Each command's output is longer than the one line read here.
#[test]
fn a_closed_pipe_ends_the_reading_commands_quietly() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::ExitStatusExt;
    let lab = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab");
    let cap = lab.join("companion-7.3.jsonl").display().to_string();
    let other = lab.join("companion-6.12.jsonl").display().to_string();
    let runs: [&[&str]; 6] = [
        &["story", &cap],
        &["story", "--json", &cap],
        &["report", "--json", &cap],
        &["replay", &cap],
        &["explain", "mr", "--json", &cap],
        &["diff", &other, &cap],
    ];
    for args in runs {
        let mut child = Command::new(bin())
            .args(args)
            .env("RUST_BACKTRACE", "1")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
        assert!(!first.is_empty(), "{args:?}: printed nothing");
        // The reader is gone (dropped with its pipe): what is left to print meets EPIPE.
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{args:?}: {err}");
        let quiet = out.status.success() || out.status.signal() == Some(libc::SIGPIPE);
        assert!(quiet, "{args:?}: {:?} {err}", out.status);
    }
}

/// A file that is not a capture (random bytes, gzip, a companion step file) is said not to
/// be one, naming its first line, exit 2 (bad input): never an empty report of "format v0".
#[test]
fn a_file_that_is_not_a_capture_is_refused_naming_its_first_line() {
    let dir = temp_dir("not-a-capture");
    let lab = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab");
    let random: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(dir.join("random.bin"), random).unwrap();
    // gzip's magic and header, then deflate bytes.
    std::fs::write(dir.join("cap.gz"), [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0x4b, 0x4c, 0x4a, 6, 0]).unwrap();
    let files = [dir.join("random.bin"), dir.join("cap.gz"), lab.join("companion-7.3.steps.jsonl")];
    for f in &files {
        for cmd in [&["report"][..], &["story"], &["report", "--json"]] {
            let out = Command::new(bin()).args(cmd).arg(f).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{cmd:?} {}: {err}", f.display());
            assert!(
                err.contains("line 1 (byte 0)") && err.contains("is not a capture"),
                "{cmd:?} {}: {err}",
                f.display()
            );
            assert!(out.stdout.is_empty(), "{cmd:?} {}: printed a report", f.display());
        }
    }
    let said = |f: &Path| {
        String::from_utf8_lossy(&Command::new(bin()).arg("report").arg(f).output().unwrap().stderr)
            .into_owned()
    };
    assert!(said(&files[1]).contains("gzip-compressed: gunzip it first"), "{}", said(&files[1]));
    assert!(said(&files[2]).contains("a companion step file: give it with --steps"), "{}", said(&files[2]));
    std::fs::remove_dir_all(&dir).ok();
}

/// `tui` with no terminal (stdin from /dev/null, stdout to a pipe): one line saying what to
/// use instead and exit 2, at once; it used to wait for keys it could never read.
#[test]
fn tui_without_a_terminal_says_so_and_exits_2() {
    let cap = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab/companion-7.3.jsonl");
    let started = std::time::Instant::now();
    let out = Command::new(bin()).arg("tui").arg(&cap).stdin(std::process::Stdio::null()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("needs a terminal"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "it ended at once");
}

/// Issue 41: a capture of two completions on one CQ, one at time 0 and one at the end of
/// time, is read at once (the per-second counts once looped over every second between),
/// by `story`, `report` and `tui`'s story alike (one engine).
#[test]
fn completions_a_lifetime_apart_are_read_at_once() {
    let lab = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab/companion-7.3.jsonl");
    let text = std::fs::read_to_string(lab).unwrap();
    let header = text.lines().next().unwrap();
    let completion = text
        .lines()
        .find(|l| l.contains(r#""name":"comp_handler","#) && l.contains(r#""kind":"entry""#))
        .unwrap();
    let mut lines = vec![header.to_string()];
    for (seq, ts) in [(1u64, 0u64), (2, u64::MAX)] {
        let mut v: serde_json::Value = serde_json::from_str(completion).unwrap();
        v["seq"] = seq.into();
        v["ts_ns"] = ts.into();
        lines.push(v.to_string());
    }
    let dir = temp_dir("far-apart");
    let cap = dir.join("far.jsonl");
    std::fs::write(&cap, lines.join("\n") + "\n").unwrap();
    for cmd in ["story", "report"] {
        let started = std::time::Instant::now();
        let out = Command::new(bin()).arg(cmd).arg(&cap).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{cmd}: {err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "{cmd} took {:?}", started.elapsed());
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// `trace --pid` of a process that does not exist is an error naming it, before anything
/// is attached (it used to trace nothing for it and exit 0).
#[test]
fn trace_of_a_pid_that_does_not_exist_is_refused() {
    let out = Command::new(bin()).args(["trace", "--pid", "999999999", "--duration", "1"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--pid 999999999: no such process"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// Exit status (README, `--help`): 2 for bad input of every kind, 1 only for a diff past
/// its threshold (or a run that failed while it ran), 0 otherwise; one line each.
#[test]
fn exit_codes_tell_bad_input_from_a_regression() {
    let lab = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab");
    let (a, b) = (lab.join("memlock-6.12.jsonl"), lab.join("companion-7.3.jsonl"));
    let dir = temp_dir("exit-codes");
    let run = |args: &[&std::ffi::OsStr]| Command::new(bin()).args(args).output().unwrap();
    let os = |s: &str| std::ffi::OsString::from(s);
    let bad: Vec<Vec<std::ffi::OsString>> = vec![
        vec![os("report"), dir.join("missing.jsonl").into()],
        vec![os("story"), dir.clone().into()],
        vec![os("diff"), a.clone().into(), b.clone().into(), os("--fail-on"), os("bogus=+20%")],
        vec![os("trace"), os("--ring-kib"), os("3")],
        vec![os("trace"), os("--rotate"), os("2"), os("-o"), dir.join("x.jsonl").into()],
        vec![os("export"), a.clone().into()],
        vec![os("story"), a.clone().into(), os("--steps"), dir.join("missing.steps").into()],
    ];
    for args in &bad {
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|s| s.as_os_str()).collect();
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // A threshold that holds, and one broken: 0 and 1.
    let diff = |rule: &str| {
        Command::new(bin()).arg("diff").arg(&a).arg(&b).args(["--fail-on", rule]).output().unwrap()
    };
    assert_eq!(diff("pin-pages=+100000").status.code(), Some(0));
    assert_eq!(diff("pin-pages=+1").status.code(), Some(1));
    let help = String::from_utf8_lossy(&run(&[std::ffi::OsStr::new("--help")]).stdout).into_owned();
    assert!(help.contains("Exit status: 0 done; 1 diff --fail-on tripped"), "{help}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue 41: `trace -- CMD` runs CMD as the user who ran sudo (SUDO_UID), or as `--user`
/// says (root only when asked), and exits with CMD's status, 128+N for a signal.
#[test]
#[ignore = "needs root (traces, or drops to nobody with setpriv): cargo xtask test runs it as root"]
fn the_traced_command_runs_as_its_user_and_gives_its_status() {
    require_root();
    // Not under sudo (whatever ran this test): as root unless --user says.
    let run = |args: &[&str]| {
        Command::new(bin())
            .args(["trace", "-q"])
            .args(args)
            .env_remove("SUDO_UID")
            .env_remove("LD_LIBRARY_PATH")
            .output()
            .unwrap()
    };
    let sudo = [("SUDO_UID", "65534"), ("SUDO_GID", "65534"), ("SUDO_USER", "nobody")];
    let uid = |out: &std::process::Output| String::from_utf8_lossy(&out.stdout).trim().to_string();
    let as_sudo = Command::new(bin())
        .args(["trace", "-q", "--", "id", "-u"])
        .envs(sudo)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    assert_eq!(uid(&as_sudo), "65534", "{}", String::from_utf8_lossy(&as_sudo.stderr));
    let kept_root = Command::new(bin())
        .args(["trace", "-q", "--user", "root", "--", "id", "-u"])
        .envs(sudo)
        .output()
        .unwrap();
    assert_eq!(uid(&kept_root), "0");
    let named = run(&["--user", "nobody", "--", "id", "-u"]);
    assert_eq!(uid(&named), "65534");
    let plain_root = run(&["--", "id", "-u"]);
    assert_eq!(uid(&plain_root), "0", "not under sudo: as this process");
    // The command's status is the run's.
    assert_eq!(run(&["--", "sh", "-c", "exit 7"]).status.code(), Some(7));
    assert_eq!(run(&["--", "sh", "-c", "kill -TERM $$"]).status.code(), Some(128 + libc::SIGTERM));
    let t0 = std::time::Instant::now();
    let slept = run(&["--duration", "1", "--", "sleep", "30"]);
    assert_eq!(slept.status.code(), Some(128 + libc::SIGTERM), "{}", String::from_utf8_lossy(&slept.stderr));
    assert!(t0.elapsed() < std::time::Duration::from_secs(15), "the duration ended the command");
    let nobody = run(&["--user", "no-such-user-here", "--", "true"]);
    let err = String::from_utf8_lossy(&nobody.stderr);
    assert_eq!(nobody.status.code(), Some(2), "{err}");
    assert!(err.contains("--user no-such-user-here: no such user"), "{err}");
}

/// `-` is stdout for export too (it wrote a file named `-`).
#[test]
fn export_to_dash_writes_stdout() {
    let dir = temp_dir("export-dash");
    let cap = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab/companion-7.3.jsonl");
    let out =
        Command::new(bin()).current_dir(&dir).args(["export", "--folded", "-"]).arg(&cap).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let folded = String::from_utf8_lossy(&out.stdout);
    assert!(folded.lines().count() > 3 && folded.contains("ib_umem_get"), "{folded}");
    assert!(!dir.join("-").exists(), "no file named -");
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue 41: `--duration` ends `trace --connect` too. A stand-in daemon that says hello
/// back and then streams stats records (as a daemon does every 800 ms), each write ending
/// in the first half of the next line: after `--duration 1` the subscriber leaves, says so,
/// exits 0, and its `-o` file holds whole records only.
#[test]
fn trace_connect_ends_on_duration_with_whole_records() {
    use rdma_trace::sink::Sink;
    use std::io::{BufRead, Write};
    let dir = std::env::temp_dir().join(format!("rt-connect-duration-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("daemon.sock");
    std::fs::remove_file(&socket).ok();
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        let mut hello = String::new();
        std::io::BufReader::new(&s).read_line(&mut hello).unwrap();
        let mut w = rdma_trace::output::jsonl::Jsonl::starting_at(Vec::new(), 0);
        w.header(&rdma_trace::capture::Header { hostname: "stand-in".into(), ..Default::default() }).unwrap();
        let mut bytes = w.take_written();
        for i in 1.. {
            w.stats(&rdma_trace::capture::Stats { ts_ns: i, ..Default::default() }).unwrap();
            let line = w.take_written();
            let (first, second) = line.split_at(line.len() / 2);
            bytes.extend_from_slice(first);
            if (&s).write_all(&bytes).is_err() {
                return;
            }
            bytes = second.to_vec();
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    });
    let out = dir.join("left.jsonl");
    let t0 = std::time::Instant::now();
    let run = Command::new(bin())
        .args(["trace", "-q", "--duration", "1", "--connect"])
        .arg(&socket)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{err}");
    assert!(took < std::time::Duration::from_secs(5), "took {took:?}");
    assert!(err.contains("left the daemon's stream after --duration 1"), "{err}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.ends_with('\n') && text.lines().count() >= 5, "{text}");
    for (n, l) in text.lines().enumerate() {
        assert!(rdma_trace::source::capture::parse_line(l).is_ok(), "line {}: {l:?}", n + 1);
    }
    std::fs::remove_dir_all(&dir).ok();
}
