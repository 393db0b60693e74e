//! `rdma-trace tui FILE` in a real terminal (tmux): a lab capture at 80×24, resized to
//! 200×60 in the middle, shows that capture's values; `q` exits 0 and the terminal's
//! settings (`stty -a`) are the same before and after.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

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
    fn keys(&self, keys: &str) {
        self.run(&["send-keys", "-t", "t", keys]);
    }
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
    let small = tmux.wait_for("0x18c0");
    assert!(small.contains("0x1724") && small.contains("0x16cc"), "{small}");
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
    assert!(big.contains("0x18c0") && big.lines().count() >= 59, "{big}");
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
