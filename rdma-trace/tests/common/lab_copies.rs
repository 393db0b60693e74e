//! The lab captures of 7.3, repeated as new processes: what `examples/synth_capture.rs`
//! (as events) and `benches/pipeline.rs` (as raw records) make long streams of. Each copy
//! `k` has its own pids and tids, its own kernel objects and user handles, and its own time.

use rdma_trace::capture::Record;
use rdma_trace::event::Event;
use rdma_trace::source::capture::{Reader, open};
use std::path::Path;

/// The perftest + rping, companion and memlock runs.
pub const SOURCES: [&str; 3] = ["perftest-rping-7.3.jsonl.zst", "companion-7.3.jsonl", "memlock-7.3.jsonl"];

/// The events of every source, in time order, and how long one copy spans (plus 1 ms).
pub fn base() -> (Vec<Event>, u64) {
    let mut events: Vec<Event> = SOURCES.iter().flat_map(|s| load(s)).collect();
    events.sort_by_key(|e| e.ts_ns);
    let span_ns = events[events.len() - 1].ts_ns - events[0].ts_ns + 1_000_000;
    (events, span_ns)
}

fn load(name: &str) -> Vec<Event> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab").join(name);
    let r = Reader::new(open(&path).expect("lab fixture"), true);
    r.filter_map(|rec| match rec.expect("lab fixtures read") {
        Record::Event(e) => Some(std::sync::Arc::unwrap_or_clone(e)),
        _ => None,
    })
    .collect()
}

/// A pid or tid in copy `k`.
pub fn task(v: u32, k: u64) -> u32 {
    v.wrapping_add((k as u32).wrapping_mul(65_536))
}

/// A value in copy `k`: addresses, pointers and handles become another object (lengths,
/// keys, counts, fds and error pointers stay).
pub fn value(v: u64, k: u64) -> u64 {
    if v >= 1 << 28 && rdma_trace::pipeline::render::err_ptr(v).is_none() {
        v.wrapping_add(k << 32)
    } else {
        v
    }
}
