//! The userspace pipeline alone, on the host: real-shaped raw records through decode →
//! enrich → correlate → live story → capture writer, on one thread, as the tracer runs
//! them for each record it reads from the ring.
//!
//! The records are the lab captures of 7.3 (perftest + rping, the companion, the memlock
//! run) turned back into the bytes the eBPF programs wrote (`tests/common/raw_records.rs`),
//! with the plan from 7.3's real BTF, and repeated as new processes (pids, object
//! addresses and time shifted per copy) for as many records as asked. Kernel stacks
//! symbolize against a kallsyms of realistic size.
//!
//! `pipeline stages N ROUNDS`: each stage cumulatively (the source alone, then decode,
//! enrich, correlate, the live story and the capture writer added one by one), interleaved
//! over ROUNDS rounds; the median rate of each and what each stage adds per record.
//!
//! `pipeline full N`: the whole pipeline once, as one JSON line with its rate and the
//! process's peak RSS (`cargo xtask bench --host` runs it at several N).
//!
//! The capture writer writes to nowhere: the cost of serializing is measured, not a
//! disk's. The tracer runs each writer on its own thread; here everything shares one.

#[path = "../tests/common/fixture_plan.rs"]
#[allow(dead_code)]
mod fixture_plan;
#[path = "../tests/common/lab_copies.rs"]
mod lab_copies;
#[path = "../tests/common/raw_records.rs"]
#[allow(dead_code)]
mod raw_records;

use rdma_trace::output::{jsonl::Jsonl, target::Target};
use rdma_trace::pipeline::correlate::Correlator;
use rdma_trace::pipeline::correlate::engine::{Engine, Limits, StorySink};
use rdma_trace::pipeline::enrich::Enricher;
use rdma_trace::pipeline::{decode, ksyms::Ksyms};
use rdma_trace::plan::select::Plan;
use rdma_trace::sink::Sink;
use rdma_trace_common::{EventHeader, KIND_SYS_ENTER, ProbeHead, SyscallEvent};
use std::time::{Duration, Instant};

/// Functions in the made-up kallsyms besides the frames the captures name: about what a
/// Debian kernel with the RDMA modules loaded lists.
const FILLER_SYMBOLS: u64 = 150_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    Source,
    Decode,
    Enrich,
    Correlate,
    Story,
    Capture,
}

const STAGES: [Stage; 6] =
    [Stage::Source, Stage::Decode, Stage::Enrich, Stage::Correlate, Stage::Story, Stage::Capture];

impl Stage {
    fn label(self) -> &'static str {
        match self {
            Stage::Source => "source (records made)",
            Stage::Decode => "+ decode",
            Stage::Enrich => "+ enrich",
            Stage::Correlate => "+ correlate",
            Stage::Story => "+ live story",
            Stage::Capture => "+ capture writer",
        }
    }
}

/// The base records, one copy's worth, and how long one copy spans.
struct Base {
    records: Vec<Vec<u8>>,
    span_ns: u64,
    plan: Plan,
    ksyms: Ksyms,
}

impl Base {
    fn load() -> Self {
        let (events, span_ns) = lab_copies::base();
        let plan = fixture_plan::plan_with_verbs(fixture_plan::K73);
        let frames = raw_records::Frames::of(&events);
        let mut kallsyms = frames.made_up_kallsyms();
        for i in 0..FILLER_SYMBOLS {
            kallsyms.push_str(&format!("{:x} t filler_{i}\n", 0xffff_ffff_8000_0000u64 + i * 0x40));
        }
        let ksyms = Ksyms::parse(&kallsyms);
        let records: Vec<Vec<u8>> =
            events.iter().filter_map(|e| raw_records::record(e, &plan, &frames)).collect();
        if records.len() < events.len() {
            eprintln!(
                "pipeline: {} of the {} lab events rebuilt as records (the rest are not planned here)",
                records.len(),
                events.len()
            );
        }
        Base { records, span_ns, plan, ksyms }
    }
}

/// Copy `k` of a base record, written into `out`: its own process, objects and time.
fn copy_into(out: &mut Vec<u8>, rec: &[u8], k: u64, span_ns: u64) {
    out.clear();
    out.extend_from_slice(rec);
    // SAFETY: every base record starts with an EventHeader; probe records are at least a
    // ProbeHead and syscall records a SyscallEvent (checked by size below); all are
    // plain-data #[repr(C)] structs, read and written unaligned.
    unsafe {
        let h = out.as_mut_ptr().cast::<EventHeader>();
        let mut hdr = h.read_unaligned();
        hdr.ts_ns += k * span_ns;
        hdr.tgid = lab_copies::task(hdr.tgid, k);
        hdr.tid = lab_copies::task(hdr.tid, k);
        h.write_unaligned(hdr);
        if hdr.kind == KIND_SYS_ENTER && out.len() >= size_of::<SyscallEvent>() {
            let s = out.as_mut_ptr().cast::<SyscallEvent>();
            let mut e = s.read_unaligned();
            e.args = e.args.map(|a| lab_copies::value(a, k));
            s.write_unaligned(e);
        } else if hdr.kind < KIND_SYS_ENTER && out.len() >= size_of::<ProbeHead>() {
            let p = out.as_mut_ptr().cast::<ProbeHead>();
            let mut e = p.read_unaligned();
            e.vals = e.vals.map(|v| lab_copies::value(v, k));
            p.write_unaligned(e);
        }
    }
}

/// Runs `n` records through the pipeline up to `upto`; returns the time taken and the
/// events that came out.
fn run(base: &Base, upto: Stage, n: u64) -> (Duration, u64) {
    let mut enricher = Enricher {
        plan: &base.plan,
        ksyms: &base.ksyms,
        fds: Default::default(),
        memlock: Default::default(),
        frames: Default::default(),
        cgroups: Default::default(),
    };
    let mut correlator = Correlator::default();
    let mut story = StorySink(Engine::new(Vec::new(), Limits::default()));
    let mut writer = Jsonl::new(Discard::default());
    let mut buf = Vec::with_capacity(1024);
    let mut out = 0u64;
    let per_copy = base.records.len() as u64;
    let t0 = Instant::now();
    for i in 0..n {
        let (k, j) = (i / per_copy, (i % per_copy) as usize);
        copy_into(&mut buf, &base.records[j], k, base.span_ns);
        if upto == Stage::Source {
            out += u64::from(buf[0] != 0xff);
            continue;
        }
        let raw = decode::decode(&buf).expect("a rebuilt record decodes");
        if upto == Stage::Decode {
            out += 1;
            continue;
        }
        let Some(mut ev) = enricher.event(&raw) else { continue };
        if upto == Stage::Enrich {
            out += u64::from(ev.ts_ns != 0);
            continue;
        }
        // As the tracer hands it to its outputs: shared, not copied.
        correlator.feed(&mut ev);
        let ev = std::sync::Arc::new(ev);
        out += 1;
        if upto >= Stage::Story {
            story.event(&ev).expect("the story takes every event");
        }
        if upto >= Stage::Capture {
            writer.event(&ev).expect("writing to nowhere");
        }
    }
    writer.flush().expect("writing to nowhere");
    let took = t0.elapsed();
    std::hint::black_box(&story);
    (took, out)
}

/// Where the capture writer's bytes go: counted, then let go.
#[derive(Default)]
struct Discard(u64);

impl std::io::Write for Discard {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0 += b.len() as u64;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Target for Discard {
    fn name(&self) -> String {
        "nowhere (the bench)".into()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn stages(base: &Base, n: u64, rounds: usize) {
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); STAGES.len()];
    for r in 0..rounds {
        // Each round in another order, so drift on a noisy machine is spread over all.
        let mut order: Vec<usize> = (0..STAGES.len()).collect();
        order.rotate_left(r % STAGES.len());
        if r % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let (took, _) = run(base, STAGES[i], n);
            rates[i].push(n as f64 / took.as_secs_f64());
        }
    }
    println!("{n} records, {rounds} rounds, medians; one thread");
    println!("{:<24} {:>14} {:>12} {:>12}", "stage", "records/s", "ns/record", "stage adds");
    let mut before = 0.0;
    let mut json = Vec::new();
    for (i, s) in STAGES.iter().enumerate() {
        let rate = median(rates[i].clone());
        let ns = 1e9 / rate;
        let adds = ns - before;
        println!("{:<24} {:>14.0} {:>12.0} {:>12.0}", s.label(), rate, ns, adds);
        json.push(format!(
            r#"{{"stage":"{}","records_per_s":{rate:.0},"ns_per_record":{ns:.0},"adds_ns":{adds:.0}}}"#,
            s.label()
        ));
        before = ns;
    }
    println!("JSON {{\"records\":{n},\"rounds\":{rounds},\"stages\":[{}]}}", json.join(","));
}

fn full(base: &Base, n: u64) {
    let (took, events) = run(base, Stage::Capture, n);
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage on this process with a valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    println!(
        "JSON {{\"records\":{n},\"events\":{events},\"secs\":{:.3},\"records_per_s\":{:.0},\"peak_rss_kib\":{}}}",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64(),
        ru.ru_maxrss
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let num = |i: usize, d: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let base = Base::load();
    match args.first().map(String::as_str) {
        Some("full") => full(&base, num(1, 1_000_000)),
        Some("stages") | None => stages(&base, num(1, 200_000), num(2, 5) as usize),
        Some(other) => {
            eprintln!("usage: pipeline [stages N ROUNDS | full N] (not {other})");
            std::process::exit(2);
        }
    }
}

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
