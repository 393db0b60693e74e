//! `report`, `diff` and `export` on lab captures of both kernels: golden text (insta), and
//! the Perfetto export held to the trace-event checker (`common::trace_events`).

use rdma_trace::cli::ReadOpts;
use rdma_trace::cmd::report::{build, read};
use rdma_trace::output::{diff, flame, perfetto, report};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

mod common;
use common::trace_events::check_trace_events;

const OPTS: ReadOpts = ReadOpts { strict: true, follow: false };

const CAPTURES: [&str; 4] = [
    "companion-6.12.jsonl",
    "companion-7.3.jsonl",
    "perftest-rping-6.12.jsonl.zst",
    "perftest-rping-7.3.jsonl.zst",
];

#[test]
fn the_perfetto_export_of_every_lab_capture_passes_the_checker() {
    for c in CAPTURES {
        let r = read(&[common::lab_capture(c)], OPTS, true).unwrap();
        let events = r.events.clone();
        let (story, _, _) = r.engine.finish();
        let doc = perfetto::export(&events, &story, &[]);
        let wrong = check_trace_events(&doc);
        assert!(wrong.is_empty(), "{c}: {} problems, first: {:?}", wrong.len(), &wrong[..wrong.len().min(5)]);
        let evs = doc["traceEvents"].as_array().unwrap();
        let flows = evs.iter().filter(|e| e["flow_out"] == Value::Bool(true)).count() as u64;
        let woken: u64 =
            story.processes.values().flat_map(|p| &p.completions).filter(|c| c.wakeup.is_some()).count()
                as u64;
        assert_eq!(flows, woken, "{c}: a flow per completion that woke its program");
        assert!(flows > 0, "{c}");
    }
}

/// The kernel skips program runs (another BPF program on the CPU: `program … skipped by
/// the kernel`), so a capture can lack a return or an exit, or an entry, inside a call
/// that did return: seen in a 7.3 pair run, where a `read` whose exit was skipped got a
/// later `read`'s exit and overlapped the `ibv_get_cq_event` calls around it, and
/// Perfetto dropped the slices. The export pairs on each thread's stack of open calls:
/// whatever is lost, its slices nest.
#[test]
fn slices_nest_whatever_entries_and_returns_the_kernel_skipped() {
    use rdma_trace::event::EventKind;
    for c in CAPTURES {
        let r = read(&[common::lab_capture(c)], OPTS, true).unwrap();
        for (every, keep) in [(5, EventKind::Entry), (7, EventKind::Return), (3, EventKind::SyscallEnter)] {
            let (mut n, mut dropped) = (0, 0);
            let events: Vec<_> = r
                .events
                .iter()
                .filter(|e| {
                    let skipped = e.kind != keep && {
                        n += 1;
                        n % every == 0
                    };
                    dropped += usize::from(skipped);
                    !skipped
                })
                .cloned()
                .collect();
            assert!(dropped > 10, "{c}: {dropped} skipped");
            let story = rdma_trace::pipeline::correlate::engine::build(&events, &[]);
            let doc = perfetto::export(&events, &story, &[]);
            let wrong = check_trace_events(&doc);
            assert!(
                wrong.is_empty(),
                "{c}, every {every}th but {keep:?}: {:?}",
                &wrong[..wrong.len().min(3)]
            );
        }
    }
}

/// A probe whose returns are never seen leaves its calls open on their thread: past
/// `MAX_OPEN` the oldest are let go, and the export counts them where it says what it is.
#[test]
fn calls_left_open_past_the_bound_are_counted() {
    use rdma_trace::event::EventKind;
    let r = read(&[common::lab_capture("companion-7.3.jsonl")], OPTS, true).unwrap();
    let entry = r.events.iter().find(|e| e.kind == EventKind::Entry).unwrap().clone();
    let extra = 44;
    let events: Vec<_> = (0..(perfetto::MAX_OPEN + extra) as u64)
        .map(|k| {
            let mut e = entry.clone();
            e.ts_ns += k * 1000;
            e
        })
        .collect();
    let story = rdma_trace::pipeline::correlate::engine::build(&events, &[]);
    let doc = perfetto::export(&events, &story, &[]);
    assert_eq!(doc["otherData"]["open_calls_let_go"], serde_json::json!(extra));
    assert!(check_trace_events(&doc).is_empty());
    let real = perfetto::export(&r.events, &r.engine.finish().0, &[]);
    assert!(real["otherData"].get("open_calls_let_go").is_none(), "none on a real capture");
}

#[test]
fn the_checker_finds_what_is_wrong() {
    let doc = serde_json::json!({"traceEvents": [
        {"ph": "X", "name": "a", "ts": 0.0, "dur": 10.0, "pid": 1, "tid": 1, "bind_id": "0x1", "flow_out": true},
        {"ph": "X", "name": "b", "ts": 5.0, "dur": 10.0, "pid": 1, "tid": 1},
        {"ph": "i", "name": "c", "ts": 1.0, "pid": 1, "tid": 1, "s": "t", "bind_id": "0x2", "flow_in": true},
        {"ph": "M", "name": "process_name", "pid": 1},
        {"ph": "X", "name": "d", "ts": 1.0, "pid": 1, "tid": 2},
        {"ph": "X", "name": "e", "ts": 20.0, "dur": 1.0, "pid": 1, "tid": 3, "bind_id": "0x3", "flow_out": true},
        {"ph": "X", "name": "f", "ts": 19.0, "dur": 9.0, "pid": 1, "tid": 4, "bind_id": "0x3", "flow_in": true},
        // A chain (post → completion → wakeup) under one id: right.
        {"ph": "X", "name": "g", "ts": 30.0, "dur": 1.0, "pid": 2, "tid": 1, "bind_id": "0x4", "flow_out": true},
        {"ph": "X", "name": "h", "ts": 31.0, "dur": 1.0, "pid": 2, "tid": 2, "bind_id": "0x4", "flow_in": true, "flow_out": true},
        {"ph": "X", "name": "j", "ts": 32.0, "dur": 1.0, "pid": 2, "tid": 3, "bind_id": "0x4", "flow_in": true},
        // A chain whose middle only ends an arrow: the last slice has nothing to end.
        {"ph": "X", "name": "k", "ts": 40.0, "dur": 1.0, "pid": 3, "tid": 1, "bind_id": "0x5", "flow_out": true},
        {"ph": "X", "name": "l", "ts": 41.0, "dur": 1.0, "pid": 3, "tid": 2, "bind_id": "0x5", "flow_in": true},
        {"ph": "X", "name": "m", "ts": 42.0, "dur": 1.0, "pid": 3, "tid": 3, "bind_id": "0x5", "flow_in": true}
    ]});
    let wrong = check_trace_events(&doc).join("\n");
    for want in [
        "overlaps a",
        "flow \"0x1\": 1 slice(s): an arrow needs a flow_out and a flow_in",
        "a flow bound to a i event",
        "metadata without args.name",
        "event 4 (X): no dur",
        "flow \"0x3\": slice 0 of 2 at 19: flow_in true, flow_out false (want false, true)",
        "flow \"0x5\": slice 1 of 3 at 41: flow_in true, flow_out false (want true, true)",
    ] {
        assert!(wrong.contains(want), "{want:?} not found in:\n{wrong}");
    }
    assert!(!wrong.contains("0x4"), "a right chain is not faulted:\n{wrong}");
}

#[test]
fn report_text_and_json_of_both_kernels() {
    for c in CAPTURES {
        let r = build(&[common::lab_capture(c)], OPTS).unwrap();
        insta::assert_snapshot!(format!("report-{c}"), report::text(&r));
        let json = serde_json::to_string_pretty(&r).unwrap();
        let back: report::Report = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r, "{c}: the JSON reads back as the report");
    }
    let r = build(&[common::lab_capture("companion-6.12.jsonl")], OPTS).unwrap();
    insta::assert_snapshot!("report-companion-6.12.json", serde_json::to_string_pretty(&r).unwrap());
}

/// The report's numbers are the story's and the capture's own: pins and pinned bytes per
/// process, completions, and the pages the companion's MRs span.
#[test]
fn the_report_counts_what_the_story_counts() {
    for k in ["6.12", "7.3"] {
        let file = common::lab_capture(&format!("companion-{k}.jsonl"));
        let r = build(std::slice::from_ref(&file), OPTS).unwrap();
        let events =
            rdma_trace::source::capture::parse_jsonl(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let story = rdma_trace::pipeline::correlate::engine::build(&events, &[]);
        for p in &r.processes {
            let s = &story.processes[&rdma_trace::event::Task::new(0, p.pid)];
            assert_eq!(
                (p.pins, p.pinned_peak_bytes, p.completions),
                (s.pins_total, s.pinned_peak_bytes, s.completions_total)
            );
        }
        let steps = rdma_trace::pipeline::correlate::story::read_steps(&common::lab_capture(&format!(
            "companion-{k}.steps.jsonl"
        )))
        .unwrap();
        // Against the companion's own steps: its MRs registered, their bytes pinned at once.
        let cpid = steps[0].pid;
        let mrs: Vec<_> = steps
            .iter()
            .filter(|s| s.name == rdma_trace::steps::StepName::RegMr)
            .filter_map(|s| s.mr.clone())
            .collect();
        let p = r.processes.iter().find(|p| p.pid == cpid).expect("the companion in the report");
        assert_eq!(p.pins, mrs.len() as u64, "{k}");
        let span: u64 = mrs.iter().map(|m| rdma_trace::steps::pages_spanned(m.addr, m.length) * 4096).sum();
        assert_eq!(p.pinned_peak_bytes, span, "{k}: all its MRs live at once");
        let pages: u64 = steps
            .iter()
            .filter_map(|s| s.mr.as_ref().filter(|_| s.name == rdma_trace::steps::StepName::RegMr))
            .map(|m| rdma_trace::steps::pages_spanned(m.addr, m.length))
            .sum();
        assert_eq!(r.paths["pin"].pages, Some(pages), "{k}: pages pinned = the pages the MRs span");
        let comp = events
            .iter()
            .filter(|e| {
                e.is(rdma_trace::event::ProbeId::CompHandler) && e.kind == rdma_trace::event::EventKind::Entry
            })
            .count() as u64;
        assert_eq!(r.paths["completion"].by_probe["comp_handler"], comp);
    }
}

#[test]
fn diff_of_two_runs_and_its_thresholds() {
    let a = build(&[common::lab_capture("companion-7.3.jsonl")], OPTS).unwrap();
    let b = build(&[common::lab_capture("perftest-rping-7.3.jsonl.zst")], OPTS).unwrap();
    // B pins fewer pages (perftest and rping register small MRs): a decrease rule breaks.
    let th: Vec<diff::Threshold> = ["pin-pages=-10%", "lost=+0"].iter().map(|s| s.parse().unwrap()).collect();
    let d = diff::diff(&a, &b, &th).unwrap();
    insta::assert_snapshot!("diff-companion-7.3-vs-perftest-rping-7.3", diff::text(&d));
    assert_eq!(d.failed.len(), 1, "{:?}", d.failed);
    assert!(d.failed[0].starts_with("pin-pages=-10%: A 273 → B 71"), "{:?}", d.failed);
    let same = diff::diff(&a, &a, &th).unwrap();
    assert!(same.failed.is_empty() && same.new_stacks.is_empty() && same.missing_stacks.is_empty());
}

#[test]
fn folded_stacks_and_the_flame_graph_of_both_kernels() {
    for c in ["companion-6.12.jsonl", "perftest-rping-7.3.jsonl.zst"] {
        let r = read(&[common::lab_capture(c)], OPTS, true).unwrap();
        let folded = flame::folded(&r.events);
        insta::assert_snapshot!(format!("folded-{c}"), folded);
        let total: u64 = folded.lines().map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap()).sum();
        let with_stacks = r
            .events
            .iter()
            .filter(|e| {
                !e.stack.is_empty()
                    && e.kind == rdma_trace::event::EventKind::Entry
                    && !matches!(e.path, rdma_trace::event::Path::Syscall | rdma_trace::event::Path::Verbs)
            })
            .count() as u64;
        assert_eq!(total, with_stacks, "{c}: every kernel stack counted once");
        let svg = flame::svg(&folded, c);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains(&format!("<title>all ({total} hits, 100.0%)</title>")), "{c}");
    }
}

/// The example in docs/ is what this build exports from that lab capture.
#[test]
fn the_committed_perfetto_example_is_this_builds_export() {
    let r = read(&[common::lab_capture("companion-7.3.jsonl")], OPTS, true).unwrap();
    let events = r.events.clone();
    let (story, _, _) = r.engine.finish();
    let doc = perfetto::export(&events, &story, &[]);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/companion-7.3.perfetto.json");
    let committed: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(
        committed == doc,
        "regenerate: rdma-trace export rdma-trace/tests/fixtures/lab/companion-7.3.jsonl --perfetto {}",
        path.display()
    );
    assert!(check_trace_events(&committed).is_empty());
}

/// The 6.12 companion capture the guides are written from, unpacked.
fn guide_capture() -> String {
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/guides/captures/trixie-companion.jsonl.zst");
    String::from_utf8(zstd::stream::decode_all(std::fs::File::open(&src).unwrap()).unwrap()).unwrap()
}

/// Records the capture's own writer left out (its `output capture` loss records) are lost
/// for the report and for `diff --fail-on lost`, beside the trailer's account.
#[test]
fn records_the_writer_left_out_count_as_lost() {
    let plain = guide_capture();
    let (body, trailer) = plain.trim_end().rsplit_once('\n').unwrap();
    assert!(trailer.contains(r#""type":"trailer""#), "{trailer}");
    let t: Value = serde_json::from_str(trailer).unwrap();
    let loss = format!(
        r#"{{"v":1,"seq":{},"type":"loss","ts_ns":{},"site":"output capture","reason":"queue full","count":7}}"#,
        t["seq"].as_u64().unwrap(),
        t["ts_ns"].as_u64().unwrap()
    );
    let trailer = trailer.replacen(
        &format!(r#""seq":{}"#, t["seq"]),
        &format!(r#""seq":{}"#, t["seq"].as_u64().unwrap() + 1),
        1,
    );
    let dir = std::env::temp_dir().join(format!("rt-left-out-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (whole, cut) = (dir.join("whole.jsonl"), dir.join("left-out.jsonl"));
    std::fs::write(&whole, &plain).unwrap();
    std::fs::write(&cut, format!("{body}\n{loss}\n{trailer}\n")).unwrap();
    let (a, b) = (
        build(std::slice::from_ref(&whole), OPTS).unwrap(),
        build(std::slice::from_ref(&cut), OPTS).unwrap(),
    );
    assert_eq!((a.captures[0].left_out, b.captures[0].left_out), (0, 7));
    assert_eq!(b.captures[0].lost, a.captures[0].lost + 7);
    let th: Vec<diff::Threshold> = vec!["lost=+0".parse().unwrap()];
    let d = diff::diff(&a, &b, &th).unwrap();
    assert_eq!(d.failed.len(), 1, "a run that left records out fails --fail-on lost=+0: {:?}", d.failed);
    std::fs::remove_dir_all(&dir).ok();
}

/// Runs a program's kernel skipped: the report's first line and its loss section say the
/// same total. A capture written now names them in a row of its trailer (and a loss
/// record); one written before said them only in the trailer's total, which the loss
/// section then says as lost that no row names — never "none".
#[test]
fn the_loss_section_says_what_the_first_line_counts() {
    let plain = guide_capture();
    let (body, trailer) = plain.trim_end().rsplit_once('\n').unwrap();
    // The typed trailer keeps the `{"v":1,"seq":N,"type":` prefix the reader keys on.
    let mut t: rdma_trace::capture::Trailer = serde_json::from_str(trailer).unwrap();
    assert_eq!(t.lost, 0, "{trailer}");
    t.lost = 5;
    let old = serde_json::to_string(&t).unwrap();
    t.sites.push(rdma_trace::capture::SiteCount {
        site: rdma_trace::capture::LossSite::Program("kprobe_entry".into()),
        hits: 5,
        lost: BTreeMap::from([(rdma_trace::capture::LossReason::SkippedByKernel, 5)]),
        ..Default::default()
    });
    let new = serde_json::to_string(&t).unwrap();
    let dir = std::env::temp_dir().join(format!("rt-skipped-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, trailer, said) in [
        ("old", old, "5 lost that no row of the capture names"),
        ("new", new, "program kprobe_entry: 5 hits, 0 delivered, lost 5 skipped by the kernel"),
    ] {
        let file = dir.join(format!("{name}.jsonl"));
        std::fs::write(&file, format!("{body}\n{trailer}\n")).unwrap();
        let r = build(std::slice::from_ref(&file), OPTS).unwrap();
        assert_eq!(r.captures[0].lost, 5, "{name}");
        let text = rdma_trace::output::report::text(&r);
        assert!(text.contains(said), "{name}:\n{text}");
        assert!(!text.contains("every hit delivered"), "{name}:\n{text}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
