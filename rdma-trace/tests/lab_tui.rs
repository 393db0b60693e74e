//! The live TUI on a real kernel (lab guest, both kernels), driven in tmux while the
//! companion workload runs under it: its MRs appear on the pinning screen with their
//! lengths and keys, its CQ on the completion screen; `q` detaches and exits 0.

mod common;

use common::*;
use std::time::{Duration, Instant};

fn tmux(args: &[&str]) -> String {
    common::tmux("lab-tui", args)
}

fn wait_screen(needle: &str, secs: u64) -> String {
    let t0 = Instant::now();
    loop {
        let s = tmux(&["capture-pane", "-p", "-t", "t"]);
        if s.contains(needle) {
            return s;
        }
        assert!(t0.elapsed() < Duration::from_secs(secs), "no {needle:?} on screen:\n{s}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_tui_live_shows_the_companion_pinning_and_completing() {
    let dir = out_dir("tui");
    let workload = tracer_bin().with_file_name("rdma-trace-workload");
    let script = format!(
        "{} tui -- {} --mr-sizes 4K,64K,1M --iterations 6 --hold-ms 20000 --announce /tmp/tui-steps.jsonl \
         2> {d}/tui.stderr; echo $? > {d}/tui.code; sleep 60",
        tracer_bin().display(),
        workload.display(),
        d = dir.display()
    );
    std::fs::remove_file(dir.join("tui.code")).ok();
    tmux(&["new-session", "-d", "-s", "t", "-x", "120", "-y", "32", "sh", "-c", &script]);
    wait_screen("1 Overview", 180);
    // The MRs, while the companion holds them.
    tmux(&["send-keys", "-t", "t", "2"]);
    let pins = wait_screen("MRs (3", 120);
    std::fs::write(dir.join("pinning.txt"), &pins).unwrap();
    for len in ["1.0M", "64K", "4K"] {
        assert!(pins.lines().any(|l| l.contains(len) && l.contains("rdma-trac")), "{len} MR:\n{pins}");
    }
    let rows = pins.lines().filter(|l| l.contains("rdma-trac") && l.contains("0x")).collect::<Vec<_>>();
    assert!(rows.len() == 3 && rows.iter().all(|l| l.contains(" live")), "held: live\n{pins}");
    tmux(&["send-keys", "-t", "t", "4"]);
    let comp = wait_screen("completion path of CQ", 60);
    std::fs::write(dir.join("completions.txt"), &comp).unwrap();
    // Where it ran, as the frames say: a kworker (6.12, 7.3), or a softirq (6.1's tasklet).
    assert!(comp.contains("kworker") || comp.contains("softirq"), "soft-RoCE's context:\n{comp}");
    tmux(&["send-keys", "-t", "t", "q"]);
    let t0 = Instant::now();
    while !dir.join("tui.code").exists() {
        assert!(t0.elapsed() < Duration::from_secs(60), "q did not end the TUI");
        std::thread::sleep(Duration::from_millis(250));
    }
    std::thread::sleep(Duration::from_millis(300));
    let code = std::fs::read_to_string(dir.join("tui.code")).unwrap();
    let err = std::fs::read_to_string(dir.join("tui.stderr")).unwrap_or_default();
    tmux(&["kill-server"]);
    assert_eq!(code.trim(), "0", "{err}");
    assert!(err.contains("events delivered"), "the summary after the screen closed:\n{err}");
}
