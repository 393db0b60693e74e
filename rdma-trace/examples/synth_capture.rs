//! A long synthetic capture (format v1, on stdout) built from real lab captures: the
//! perftest + rping, companion and memlock runs, repeated as new processes — each copy
//! with its own pids and tids, its own kernel objects (umems, MRs, CQs) and user handles,
//! later in time — until N events. For measuring what `rdma-trace story` keeps on an
//! endless stream (`cargo xtask story-memory`).
//!
//! Usage: synth_capture N

use rdma_trace::capture::{Header, Trailer};
use rdma_trace::event::{Event, Value};
use rdma_trace::output::jsonl::Jsonl;
use rdma_trace::sink::Sink;

#[path = "../tests/common/lab_copies.rs"]
mod lab_copies;

/// Copy `k` of an event: its own process, objects and time.
fn copy(e: &Event, k: u64, span_ns: u64) -> Event {
    let mut e = e.clone();
    e.pid = lab_copies::task(e.pid, k);
    e.tid = lab_copies::task(e.tid, k);
    e.ts_ns += k * span_ns;
    for v in e.fields.values_mut() {
        if let Value::U(n) = v {
            *n = lab_copies::value(*n, k);
        }
    }
    e
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).expect("usage: synth_capture N");
    let (base, span) = lab_copies::base();
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
