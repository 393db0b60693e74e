//! A long synthetic capture (format v1, on stdout) built from real lab captures: the
//! perftest + rping, companion and memlock runs, repeated as new processes — each copy
//! with its own pids and tids, its own kernel objects (umems, MRs, CQs) and user handles,
//! later in time — until N events. For measuring what `rdma-trace story` keeps on an
//! endless stream (`cargo xtask story-memory`).
//!
//! Usage: synth_capture N

use rdma_trace::capture::{Header, Record, Trailer};
use rdma_trace::event::{Event, Value};
use rdma_trace::output::{Sink, jsonl::Jsonl};
use rdma_trace::source::capture::{Reader, open};
use std::path::Path;

const SOURCES: [&str; 3] = ["perftest-rping-7.3.jsonl.zst", "companion-7.3.jsonl", "memlock-7.3.jsonl"];

fn load(name: &str) -> Vec<Event> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab").join(name);
    let r = Reader::new(open(&path).expect("lab fixture"), true);
    r.filter_map(|rec| match rec.expect("lab fixtures read") {
        Record::Event(e) => Some(*e),
        _ => None,
    })
    .collect()
}

/// Copy `k` of an event: its own process, objects and time.
fn copy(e: &Event, k: u64, span_ns: u64) -> Event {
    let mut e = e.clone();
    let shift = |v: u32| v.wrapping_add((k as u32).wrapping_mul(65_536));
    e.pid = shift(e.pid);
    e.tid = shift(e.tid);
    e.ts_ns += k * span_ns;
    for v in e.fields.values_mut() {
        if let Value::U(n) = v
            && *n >= 1 << 28
            && rdma_trace::pipeline::render::err_ptr(*n).is_none()
        {
            // Addresses, pointers and handles: another object per copy (lengths, keys,
            // counts and fds stay).
            *n = n.wrapping_add(k << 32);
        }
    }
    e
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).expect("usage: synth_capture N");
    let mut base: Vec<Event> = SOURCES.iter().flat_map(|s| load(s)).collect();
    base.sort_by_key(|e| e.ts_ns);
    let (first, last) = (base[0].ts_ns, base[base.len() - 1].ts_ns);
    let span = last - first + 1_000_000;
    let mut w = Jsonl::new(std::io::BufWriter::with_capacity(1 << 20, std::io::stdout()));
    let header = Header {
        tool: "synth_capture".into(),
        hostname: "synthetic".into(),
        kernel_release: "7.3.4+deb13-amd64".into(),
        boot_id: String::new(),
        realtime_offset_ns: 0,
        command_line: std::env::args().collect(),
        ring_bytes: 0,
        return_instances: 0,
        probes: vec![],
        libibverbs: None,
        redacted: false,
        ..Default::default()
    };
    let out = (|| -> std::io::Result<()> {
        w.header(&header)?;
        let mut written = 0u64;
        'copies: for k in 0.. {
            for e in &base {
                if written == n {
                    break 'copies;
                }
                w.event(&std::sync::Arc::new(copy(e, k, span)))?;
                written += 1;
            }
        }
        w.trailer(&Trailer {
            ts_ns: 0,
            stopped: "synthetic".into(),
            exit_code: 0,
            delivered: written,
            lost: 0,
            sites: vec![],
            ..Default::default()
        })?;
        w.flush()
    })();
    if let Err(e) = out
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("synth_capture: {e}");
        std::process::exit(1);
    }
}
