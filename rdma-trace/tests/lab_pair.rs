//! Both ends of a connection, each traced in its own kernel: two lab guests joined by a
//! virtual Ethernet wire (`cargo xtask lab --hosts 2`; `cargo xtask vm-test` runs these
//! tests, named `pair_…`, on both guests at once). Each guest runs the same test and plays
//! its part by `LAB_HOST`: host 1 (10.0.0.1) serves, host 2 (10.0.0.2) connects. They meet
//! through the network and through files in the share both see (`LAB_SYNC`).
//!
//! `ib_send_bw -e` between the guests, each end under its own `rdma-trace trace`:
//! - each capture is its own kernel's: its header names its host and its own boot;
//! - each end's kernel pinned its send_bw buffer and made the QP the workload printed as its
//!   own (`ibv_create_qp` returning that QPN);
//! - the peers agree on the pairing, and each capture has the QP the *other* end connected
//!   to: what host 2's perftest printed as the remote QPN is the QP host 1's tracer saw made;
//! - `report` of the two captures names both hosts and keeps their processes apart.

mod common;

use common::*;
use rdma_trace::capture::Record;
use rdma_trace::event::{Event, EventKind, ProbeId};
use rdma_trace::source::capture::{Reader, open};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// This guest's part: 1 serves, 2 connects.
fn host() -> u8 {
    std::env::var("LAB_HOST").ok().and_then(|h| h.parse().ok()).expect("LAB_HOST: run by vm-test's pair boot")
}

/// The directory both guests see.
fn sync_dir() -> PathBuf {
    PathBuf::from(std::env::var("LAB_SYNC").expect("LAB_SYNC: run by vm-test's pair boot"))
}

/// Waits for the other guest's `file` in the shared directory (written whole, then renamed);
/// a peer whose test failed says so (`Failing`), and the wait ends at once.
fn wait_for_peer(file: &Path, secs: u64) {
    let start = Instant::now();
    let failed = file.with_extension("failed");
    while !file.exists() {
        assert!(!failed.exists(), "the peer's test failed (see its log): {}", failed.display());
        assert!(start.elapsed() < Duration::from_secs(secs), "the peer never wrote {}", file.display());
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Tells the peer this guest's test failed (a file beside what it waits for), so it does
/// not wait out its timeout.
struct Failing(PathBuf);

impl Drop for Failing {
    fn drop(&mut self) {
        if std::thread::panicking() {
            std::fs::write(self.0.with_extension("failed"), "").ok();
        }
    }
}

/// Writes `text` to `file` so the peer never reads it half-written.
fn publish(file: &Path, text: &str) {
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, file).unwrap();
}

/// `local address: LID … QPN 0x0011 …` and `remote address: …` from perftest's output.
fn qpns(out: &str) -> (u64, u64) {
    let qpn = |which: &str| {
        let l = out
            .lines()
            .find(|l| l.trim_start().starts_with(which))
            .unwrap_or_else(|| panic!("no {which}: {out}"));
        let hex = l.split("QPN ").nth(1).and_then(|r| r.split_whitespace().next()).expect("a QPN");
        u64::from_str_radix(hex.trim_start_matches("0x"), 16).expect("a hex QPN")
    };
    (qpn("local address"), qpn("remote address"))
}

struct Capture {
    hostname: String,
    boot_id: String,
    events: Vec<Event>,
}

fn read(path: &Path) -> Capture {
    let mut c = Capture { hostname: String::new(), boot_id: String::new(), events: Vec::new() };
    for r in Reader::new(open(path).expect("the capture"), true) {
        match r.expect("the capture reads whole") {
            Record::Header(h) => (c.hostname, c.boot_id) = (h.hostname, h.boot_id),
            Record::Event(e) => c.events.push(*e),
            _ => {}
        }
    }
    c
}

/// The QP numbers `ibv_create_qp` returned in the capture.
fn qps_made(c: &Capture) -> Vec<u64> {
    c.events
        .iter()
        .filter(|e| e.is(ProbeId::IbvCreateQp) && e.kind == EventKind::Return)
        .filter_map(|e| e.field("qp_num"))
        .collect()
}

#[test]
#[ignore = "lab: needs two soft-RoCE guests on a wire (cargo xtask vm-test)"]
fn pair_send_bw_each_end_in_its_own_kernel() {
    let (me, sync) = (host(), sync_dir());
    let peer = 3 - me;
    let file = |h: u8| sync.join(format!("send-bw.host{h}"));
    let _failing = Failing(file(me));
    let dir = out_dir("pair-send-bw");
    let capture = dir.join(format!("host{me}.jsonl"));
    let perftest = "ib_send_bw -F -e -d rxe0 -x 1 -n 200";
    // The client retries until the server (traced on the other guest) listens.
    let cmd = if me == 1 {
        perftest.to_string()
    } else {
        format!("for i in $(seq 90); do {perftest} 10.0.0.1 && exit 0; sleep 2; done; exit 1")
    };
    let out = dir.join("perftest.out");
    let st = Command::new(tracer_bin())
        .args(["trace", "-q", "-o"])
        .arg(&capture)
        .args(["--", "sh", "-c", &format!("( {cmd} ) >{}", out.display())])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("rdma-trace.stderr")).unwrap())
        .status()
        .expect("run rdma-trace");
    let printed = std::fs::read_to_string(&out).unwrap();
    assert!(st.success(), "host {me}: the traced ib_send_bw failed ({st}):\n{printed}");
    let (local, remote) = qpns(&printed);
    let mine = read(&capture);
    assert_eq!(mine.hostname, format!("rdma-lab-{me}"), "the capture names its own host");

    // This end's kernel made the QP this end's perftest printed, and pinned its buffer.
    assert!(qps_made(&mine).contains(&local), "host {me}: QPN {local:#x} not made in {:?}", qps_made(&mine));
    let pinned: Vec<u64> = mine
        .events
        .iter()
        .filter(|e| e.is(ProbeId::UmemGet) && e.kind == EventKind::Entry && e.comm == "ib_send_bw")
        .filter_map(|e| e.field("size"))
        .collect();
    assert!(pinned.iter().any(|&s| s >= 65_536), "host {me}: no 64 KiB pin by ib_send_bw: {pinned:?}");
    let completions = mine.events.iter().filter(|e| e.is(ProbeId::CompHandler)).count();
    assert!(completions > 0, "host {me}: no completion handled in this kernel");

    // Each end publishes what it knows; each checks the other's.
    std::fs::copy(&capture, sync.join(format!("send-bw.host{me}.jsonl"))).unwrap();
    publish(&file(me), &format!("{local} {remote}\n"));
    wait_for_peer(&file(peer), 300);
    let theirs: Vec<u64> =
        std::fs::read_to_string(file(peer)).unwrap().split_whitespace().map(|w| w.parse().unwrap()).collect();
    assert_eq!(
        (theirs[0], theirs[1]),
        (remote, local),
        "host {me}: the two ends' perftests disagree on the pair"
    );
    let other = read(&sync.join(format!("send-bw.host{peer}.jsonl")));
    assert_eq!(other.hostname, format!("rdma-lab-{peer}"));
    assert_ne!(other.boot_id, mine.boot_id, "two kernels, two boots");
    assert!(
        qps_made(&other).contains(&remote),
        "host {me}: the QP it connected to ({remote:#x}) is not among those the peer's kernel made: {:?}",
        qps_made(&other)
    );

    // One report of both ends: both hosts named, their processes kept apart.
    if me == 1 {
        let rep = Command::new(tracer_bin())
            .arg("report")
            .arg(&capture)
            .arg(sync.join("send-bw.host2.jsonl"))
            .output()
            .expect("report");
        let text = String::from_utf8_lossy(&rep.stdout);
        assert!(rep.status.success(), "{}", String::from_utf8_lossy(&rep.stderr));
        for h in ["rdma-lab-1", "rdma-lab-2"] {
            assert!(
                text.lines().any(|l| l.contains("ib_send_bw") && l.contains(&format!("@{h}"))),
                "the report's processes name {h}:\n{text}"
            );
        }
    }
}
