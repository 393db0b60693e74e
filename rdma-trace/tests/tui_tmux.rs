//! `rdma-trace tui` in a real terminal (tmux), on a lab capture: at 80×24, resized to
//! 200×60 in the middle, it shows that capture's values; `q` exits 0 and the terminal's
//! settings (`stty -a`) are the same before and after. Then each thing a person does at
//! the keys, at 80×24 and at 200×60: help on top and closed by esc, `e` on a row, an event
//! whole, the charts' scales, and a paused live screen (fed by a stand-in daemon that
//! streams the same capture) holding still while its counts go on. And two daemons on one
//! screen (stand-ins streaming the two-host lab's captures): both hosts named, the
//! measured clock offset shown, each host's processes with their host.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The two sizes each key is tried at.
const SIZES: [(u16, u16); 2] = [(80, 24), (200, 60)];

struct Tmux {
    server: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux").arg("-L").arg(&self.server).args(args).output().expect("tmux");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "t"])
    }
    /// Waits until the screen shows `needle`.
    fn wait_for(&self, needle: &str) -> String {
        let t0 = Instant::now();
        loop {
            let s = self.screen();
            if s.contains(needle) {
                return s;
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "no {needle:?} on screen:\n{s}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    /// Waits until the screen shows every one of `needles` (20 s at most).
    fn wait_for_all(&self, needles: &[&str]) -> String {
        let t0 = Instant::now();
        loop {
            let s = self.screen();
            let missing: Vec<&&str> = needles.iter().filter(|n| !s.contains(**n)).collect();
            if missing.is_empty() {
                return s;
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "no {missing:?} on screen:\n{s}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    fn keys(&self, keys: &str) {
        self.run(&["send-keys", "-t", "t", keys]);
    }
    /// Waits until the screen no longer shows `needle`.
    fn wait_gone(&self, needle: &str) -> String {
        let t0 = Instant::now();
        loop {
            let s = self.screen();
            if !s.contains(needle) {
                return s;
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "{needle:?} stays on screen:\n{s}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    /// Waits until `ok` holds of the screen.
    fn wait_until(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let t0 = Instant::now();
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "never {what}:\n{s}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The explanation `e` opened, once the story has answered (the box says it is asking
/// until then).
fn answered(t: &Tmux) -> String {
    t.wait_for("explain (");
    t.wait_until("the story's answer", |s| s.contains("explain (") && !s.contains("asking the story"))
}

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rdma-trace"))
}

fn companion() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab/companion-7.3.jsonl")
}

/// `rdma-trace ARGS` in a `w`×`h` tmux window of its own.
fn open(args: &str, w: u16, h: u16) -> Tmux {
    static N: AtomicUsize = AtomicUsize::new(0);
    let tmux =
        Tmux { server: format!("rt-tui-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)) };
    let script = format!("{} {args}; sleep 60", bin().display());
    let (w, h) = (w.to_string(), h.to_string());
    tmux.run(&["new-session", "-d", "-s", "t", "-x", &w, "-y", &h, "sh", "-c", &script]);
    tmux
}

/// The companion's 7.3 capture replayed to its end in a `w`×`h` terminal.
fn replayed(w: u16, h: u16) -> Tmux {
    let t = open(&format!("tui {}", companion().display()), w, h);
    t.wait_for("1 Overview");
    t.keys("G");
    t.wait_for("end of the capture");
    t
}

/// The table rows of the companion's process on screen, each split in words.
fn rows(screen: &str) -> Vec<Vec<String>> {
    screen
        .lines()
        .filter(|l| {
            l.contains("rdma-trace-work 0x")
                || l.contains("rdma-trace-w… 0x")
                || l.contains(" rdma-trace-work [")
        })
        .map(|l| l.trim_matches(|c| c == '│' || c == ' ').split_whitespace().map(String::from).collect())
        .collect()
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.run(&["kill-server"]);
    }
}

#[test]
fn replaying_a_capture_in_a_terminal_resizes_and_restores_it() {
    let dir = std::env::temp_dir().join(format!("rt-tui-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_rdma-trace"));
    let capture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab/companion-7.3.jsonl");
    let d = dir.display();
    let script = format!(
        "stty -a > {d}/before; {} tui {}; echo $? > {d}/code; stty -a > {d}/after; sleep 60",
        bin.display(),
        capture.display()
    );
    let tmux = Tmux { server: format!("rt-tui-{}", std::process::id()) };
    tmux.run(&["new-session", "-d", "-s", "t", "-x", "80", "-y", "24", "sh", "-c", &script]);
    tmux.wait_for("1 Overview");
    // To the end of the capture, then the MRs: the companion's three keys.
    tmux.keys("G");
    tmux.wait_for("end of the capture");
    tmux.keys("2");
    let small = tmux.wait_for("0x15e9");
    assert!(small.contains("0x144d") && small.contains("0x13f4"), "{small}");
    assert!(small.lines().all(|l| l.chars().count() <= 80), "{small}");
    tmux.run(&["resize-window", "-t", "t", "-x", "200", "-y", "60"]);
    let t0 = Instant::now();
    let big = loop {
        let s = tmux.screen();
        if s.lines().any(|l| l.trim_end().chars().count() > 80) {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "not redrawn at 200×60:\n{s}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(big.contains("0x15e9") && big.lines().count() >= 59, "{big}");
    tmux.keys("4");
    tmux.wait_for("completion path of CQ");
    tmux.keys("q");
    let t0 = Instant::now();
    while !dir.join("after").exists() {
        assert!(t0.elapsed() < Duration::from_secs(10), "q did not end it:\n{}", tmux.screen());
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(std::fs::read_to_string(dir.join("code")).unwrap().trim(), "0");
    let before = std::fs::read_to_string(dir.join("before")).unwrap();
    let after = std::fs::read_to_string(dir.join("after")).unwrap();
    // The window size changed with the resize; every setting is the same.
    let settings = |s: &str| s.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(settings(&before), settings(&after), "stty -a before and after");
    std::fs::remove_dir_all(&dir).ok();
}

/// The help box is on top: keys other than its own do nothing under it (`e` opened an
/// explanation beneath it), and esc closes it.
#[test]
fn help_is_on_top_and_esc_closes_it() {
    for (w, h) in SIZES {
        let t = replayed(w, h);
        t.keys("?");
        t.wait_for("keys (? or esc closes)");
        t.keys("e");
        t.keys("Escape");
        let s = t.wait_gone("keys (? or esc closes)");
        // Keys are taken in order: had `e` opened an explanation, it would show now.
        assert!(!s.contains("explain ("), "at {w}×{h}, e acted under the help:\n{s}");
        t.keys("?");
        t.wait_for("keys (? or esc closes)");
        t.keys("?");
        t.wait_gone("keys (? or esc closes)");
    }
}

/// `e` on Pinning, Mmap and Completions explains the selected row: that MR's registration
/// (its address, for the newest and the next), that mapping's mmap, that CQ's completion.
#[test]
fn e_explains_the_selected_row_on_pinning_mmap_and_completions() {
    for (w, h) in SIZES {
        let t = replayed(w, h);
        t.keys("2");
        let pins = rows(&t.wait_for("MRs (3"));
        assert_eq!(pins.len(), 3, "{pins:?}");
        for (k, row) in pins.iter().take(2).enumerate() {
            if k == 1 {
                t.keys("j");
            }
            t.keys("e");
            let x = answered(&t);
            assert!(x.contains(&format!("ibv_reg_mr(addr={}", row[2])), "at {w}×{h}, MR {}:\n{x}", row[2]);
            t.keys("Escape");
            t.wait_gone("explain (");
        }
        t.keys("3");
        let screen = t.wait_for("uverbs mappings (6, 0 mapped");
        let maps = rows(&screen);
        // Each mapping is named by its queue: the companion's two QPs' send and receive
        // queues and its two CQs' rings.
        for (what, n) in [("send queue, 31 WQEs", 2), ("recv queue, 31 WQEs", 2), (" ring, 31 CQEs", 2)] {
            let seen = screen.lines().filter(|l| l.contains(what)).count();
            assert_eq!(seen, n, "at {w}×{h}, {what:?}:\n{screen}");
        }
        t.keys("e");
        let x = answered(&t);
        assert!(x.contains(&format!("at {},", maps[0][2])), "at {w}×{h}, mapping {}:\n{x}", maps[0][2]);
        let flat = x.replace(['│', '\n'], " ").split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains("It maps the send queue of QP 28 ("),
            "at {w}×{h}, the newest mapping named:\n{x}"
        );
        t.keys("Escape");
        t.wait_gone("explain (");
        t.keys("4");
        let cqs = t.wait_for("completion path of CQ");
        let handle = cqs
            .lines()
            .find_map(|l| {
                l.strip_prefix("│0x").map(|r| format!("0x{}", r.split_whitespace().next().unwrap()))
            })
            .unwrap_or_else(|| panic!("no CQ row:\n{cqs}"));
        t.keys("e");
        let x = answered(&t);
        assert!(x.contains(&format!("CQ {handle} of rdma-trace-work")), "at {w}×{h}, CQ {handle}:\n{x}");
    }
}

/// An event with more than its detail box holds says how much more, and enter shows it
/// whole: its stack included.
#[test]
fn enter_shows_an_event_whole() {
    for (w, h) in SIZES {
        let t = replayed(w, h);
        t.keys("5");
        t.wait_for("detail (enter");
        // The mappings' events: five fields and a stack of eight frames or more.
        t.keys("/");
        t.keys("vm_pgoff");
        t.keys("Enter");
        let s = t.wait_for("events matching /vm_pgoff: 12 of");
        if h == 24 {
            assert!(s.contains("more lines (enter"), "at {w}×{h}, the detail is cut silently:\n{s}");
        }
        t.keys("Enter");
        // The newest of them (selected): rxe_mmap's or ib_uverbs_mmap's entry, whose stack
        // ends in the system call's entry. Waited for whole: tmux can show a frame half drawn
        // (the panel's title over the list's last lines).
        t.wait_for_all(&[
            "all of it (↑↓ scroll",
            "mmap entered in rdma-trace-work [227]",
            "vm_pgoff = ",
            "[ib_uverbs]",
            "entry_SYSCALL_64",
        ]);
        t.keys("Escape");
        t.wait_gone("all of it (↑↓ scroll");
    }
}

/// The charts say their scale: the wakeup histogram its bucket width, tallest bar and
/// range; the pin sparkline how many pins and the tallest; a CQ's rate its peak.
#[test]
fn charts_say_their_scale() {
    for (w, h) in SIZES {
        let t = replayed(w, h);
        let o = t.wait_for("bars: last 3 pins,");
        assert!(o.contains("bars /s, peak"), "at {w}×{h}:\n{o}");
        t.keys("4");
        let s = t.wait_until("the histogram's caption", |s| {
            s.contains("completion path of") && s.contains(" range, ")
        });
        let lines: Vec<&str> = s.lines().collect();
        let bottom = lines.iter().rposition(|l| l.starts_with('└')).unwrap();
        let axis: Vec<&str> =
            lines[bottom - 1].trim_matches(|c| c == '│' || c == ' ').split_whitespace().collect();
        assert!(
            axis.len() == 2 && axis.iter().all(|v| v.ends_with("µs") || v.ends_with("ms")),
            "at {w}×{h}, no range under the histogram: {:?}\n{s}",
            lines[bottom - 1]
        );
    }
}

/// A stand-in daemon: takes a subscriber's hello on `socket` and streams the companion's
/// capture's events to it, a record every 5 ms, again and again until the subscriber goes
/// (a slow machine never runs out of stream before the test has seen what it waits for).
fn stream_capture(socket: &Path) -> std::thread::JoinHandle<()> {
    let listener = std::os::unix::net::UnixListener::bind(socket).unwrap();
    let text = std::fs::read_to_string(companion()).unwrap();
    std::thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        let mut hello = String::new();
        std::io::BufReader::new(&conn).read_line(&mut hello).unwrap();
        let mut out = &conn;
        loop {
            for line in text.lines() {
                if writeln!(out, "{line}").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    })
}

/// The events counted on the status line.
fn counted(screen: &str) -> u64 {
    let status = screen.lines().rev().find(|l| l.contains(" lost")).unwrap_or("");
    let part = status.split('│').find(|p| p.contains(" ev")).unwrap_or("");
    part.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// The Events list as shown (the rows between its top border and the detail box).
fn listed(screen: &str) -> Vec<String> {
    let lines: Vec<&str> = screen.lines().collect();
    let top = lines.iter().position(|l| l.starts_with("┌events")).unwrap_or(0);
    let end = lines.iter().position(|l| l.starts_with("┌detail")).unwrap_or(lines.len());
    lines[top + 1..end].iter().map(|l| l.to_string()).collect()
}

/// Paused on a live source (a daemon), the rows hold still while the event count goes on;
/// unpaused, they move again.
#[test]
fn paused_live_rows_hold_still_while_the_counts_go_on() {
    for (w, h) in SIZES {
        let dir = std::env::temp_dir().join(format!("rt-tui-live-{}-{w}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("daemon.sock");
        std::fs::remove_file(&socket).ok();
        let daemon = stream_capture(&socket);
        let t = open(&format!("tui --connect {}", socket.display()), w, h);
        t.keys("5");
        t.wait_until("100 events", |s| counted(s) >= 100);
        t.keys(" ");
        let paused = t.wait_for("PAUSED");
        let at = counted(&paused);
        let later = t.wait_until("200 more events counted while paused", |s| counted(s) >= at + 200);
        assert_eq!(listed(&later), listed(&paused), "at {w}×{h}, the rows moved while paused:\n{later}");
        t.keys(" ");
        let held = listed(&later);
        t.wait_until("the rows moving again", |s| !s.contains("PAUSED") && listed(s) != held);
        drop(t);
        daemon.join().ok();
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// A stand-in for one host's daemon: streams `capture` (plain or zstd) once to the first
/// subscriber, a record every millisecond, then holds the connection until it goes.
fn stream_once(socket: &Path, capture: &Path) -> std::thread::JoinHandle<()> {
    let listener = std::os::unix::net::UnixListener::bind(socket).unwrap();
    let bytes = std::fs::read(capture).unwrap();
    let text = if capture.extension().is_some_and(|e| e == "zst") {
        String::from_utf8(zstd::decode_all(&bytes[..]).unwrap()).unwrap()
    } else {
        String::from_utf8(bytes).unwrap()
    };
    std::thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        let mut hello = String::new();
        std::io::BufReader::new(&conn).read_line(&mut hello).unwrap();
        let mut out = &conn;
        for line in text.lines() {
            if writeln!(out, "{line}").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // Until the viewer goes: its read of nothing more.
        let mut rest = String::new();
        std::io::BufReader::new(&conn).read_line(&mut rest).ok();
    })
}

/// Both ends of a connection on one screen: `tui --connect A --connect B`, A a daemon's
/// socket, B a capture file (a source as well).
#[test]
fn two_daemons_on_one_screen_name_their_hosts_and_the_clock_between_them() {
    let dir = std::env::temp_dir().join(format!("rt-tui-pair-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lab = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab");
    let a = dir.join("a.sock");
    let da = stream_once(&a, &lab.join("pair-6.12.host1.jsonl.zst"));
    let b = lab.join("pair-6.12.host2.jsonl.zst");
    let t = open(&format!("tui --connect {} --connect {}", a.display(), b.display()), 200, 60);
    // The status line: the first host, the second with its measured offset (host 1's
    // daemon measured it: -249.445 ms ± 1.477 ms).
    t.wait_for("rdma-lab-1 · rdma-lab-2 -249.445 ms ± 1.477 ms");
    // Each host's ib_send_bw kept apart, named with its host (pids 280 and 273 there).
    let s = t.wait_until("both hosts' ib_send_bw", |s| {
        s.contains("280@rdma-lab-1") && s.contains("273@rdma-lab-2")
    });
    assert!(!s.contains("4194"), "no merged pid shown raw:\n{s}");
    // The Completions screen: a CQ of rping on host 2 begins its path at the post on its
    // peer, host 1's rping QP (the QPs the report pairs; both streams must have been
    // joined: the story waits for the slower host).
    let files = [lab.join("pair-6.12.host1.jsonl.zst"), lab.join("pair-6.12.host2.jsonl.zst")];
    let opts = rdma_trace::cli::ReadOpts { strict: true, follow: false };
    let r = rdma_trace::cmd::report::build(&files, opts).unwrap();
    let rping =
        r.qps.iter().find(|q| q.hostname == "rdma-lab-2" && q.comm == "rping" && q.peer.is_some()).unwrap();
    let want =
        format!("a post on its peer, qp {:#x} @rdma-lab-1 → this CQ", rping.peer.as_ref().unwrap().qpn);
    t.keys("4");
    // Every CQ of the two captures listed: both streams were read to their trailers.
    let cqs = rdma_trace::cmd::report::read(&files, opts, false).unwrap().engine.finish().0.cqs.len();
    t.wait_until("every CQ listed", |s| s.lines().filter(|l| l.starts_with("│0x")).count() >= cqs);
    let mut found = false;
    for _ in 0..8 {
        if t.screen().contains(&want) {
            found = true;
            break;
        }
        t.keys("Down");
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(found, "no CQ path begins {want:?}:\n{}", t.screen());
    // `e` on it: the explanation begins at that post, on the other host, with the clock's
    // error bar.
    t.keys("e");
    let s = t.wait_for("The post — a send on the peer QP");
    assert!(s.contains("@rdma-lab-1]") && s.contains("error bar"), "{s}");
    t.keys("Escape");
    t.wait_gone("The post — a send on the peer QP");
    // Filtered by host: only host 2's CQs are left, each named with it.
    let theirs = rdma_trace::cmd::report::read(&files[1..], opts, false).unwrap().engine.finish().0.cqs.len();
    t.keys("/");
    t.keys("@rdma-lab-2");
    t.keys("Enter");
    let s =
        t.wait_until("host 2's CQs only", |s| s.lines().filter(|l| l.starts_with("│0x")).count() == theirs);
    for row in s.lines().filter(|l| l.starts_with("│0x")) {
        assert!(row.contains("@rdma-lab-2"), "a row of another host under the filter: {row}\n{s}");
    }
    drop(t);
    da.join().ok();
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue 40, at 80×24: `/` on Events searches every event the story keeps (ib_send_bw ran
/// before rping, its events are far older than the newest 2 000), and `l` opens what was
/// lost, by host, probe and reason, which esc closes.
#[test]
fn at_80x24_a_filter_finds_old_events_and_l_shows_the_loss() {
    let capture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab/perftest-rping-7.3.jsonl.zst");
    let t = open(&format!("tui {}", capture.display()), 80, 24);
    t.wait_for("1 Overview");
    t.keys("G");
    t.wait_for("end of the capture");
    t.keys("5");
    t.wait_for("events (");
    t.keys("/");
    t.keys("ib_send_bw");
    t.keys("Enter");
    let s = t.wait_for("events matching /ib_send_bw: 4002 of");
    assert!(s.contains("ib_send_bw"), "{s}");
    t.keys("l");
    let s = t.wait_for("what was lost, where and why");
    assert!(s.contains("0 lost, 0 not sent to this view"), "{s}");
    t.keys("Escape");
    t.wait_gone("what was lost, where and why");
}
