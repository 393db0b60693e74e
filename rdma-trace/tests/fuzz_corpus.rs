//! Every input the capture reader's fuzzer kept, read through `story` and `report` as the
//! commands read them: each ends within its time limit in a story, a report or a refusal,
//! never a panic and never a hang. `cargo xtask fuzz` (and so the gate) runs this on the
//! corpus it grew (`RDMA_TRACE_FUZZ_CORPUS`); without it, on the committed seeds.

use rdma_trace::capture::Record;
use rdma_trace::cli::ReadOpts;
use rdma_trace::pipeline::correlate::engine::{Engine, Limits};
use rdma_trace::source::capture::{Reader, open};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A release build reads any input the fuzzer makes (at most 256 KiB) well within this.
const LIMIT: Duration = if cfg!(debug_assertions) { Duration::from_secs(10) } else { Duration::from_secs(1) };

/// `story` and `report` of `path`, lenient as the commands are by default.
fn story_and_report(path: &Path) {
    if let Ok(input) = open(path) {
        let mut live = Engine::new(Vec::new(), Limits::default());
        for r in Reader::new(input, false) {
            match r {
                Ok(Record::Event(e)) => _ = live.push(e),
                Ok(Record::Step(s)) => live.add_steps(vec![s.step]),
                Ok(Record::State(st)) => live.seed(&st),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let (story, kept, steps) = live.finish();
        rdma_trace::output::story::text(&story, &kept, &steps);
    }
    if let Ok(r) =
        rdma_trace::cmd::report::build(&[path.to_path_buf()], ReadOpts { strict: false, follow: false })
    {
        rdma_trace::output::report::text(&r);
    }
}

fn inputs() -> Vec<PathBuf> {
    let dirs: Vec<PathBuf> = match std::env::var_os("RDMA_TRACE_FUZZ_CORPUS") {
        Some(d) => std::env::split_paths(&d).collect(),
        None => vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/reader")],
    };
    let mut out: Vec<PathBuf> = dirs
        .iter()
        .flat_map(|d| std::fs::read_dir(d).unwrap_or_else(|e| panic!("{}: {e}", d.display())))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

#[test]
fn story_and_report_end_in_bounded_time_on_every_fuzzed_input() {
    let all = inputs();
    assert!(!all.is_empty(), "no inputs");
    let mut slowest = (Duration::ZERO, PathBuf::new());
    for path in &all {
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        let t = std::time::Instant::now();
        let worker = std::thread::spawn(move || {
            story_and_report(&p);
            tx.send(()).ok();
        });
        match rx.recv_timeout(LIMIT) {
            Ok(()) => worker.join().unwrap(),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("{}: story and report took more than {LIMIT:?}", path.display())
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                panic!("{}: story or report panicked", path.display())
            }
        }
        if t.elapsed() > slowest.0 {
            slowest = (t.elapsed(), path.clone());
        }
    }
    eprintln!("{} inputs; the slowest {:?} ({})", all.len(), slowest.0, slowest.1.display());
}
