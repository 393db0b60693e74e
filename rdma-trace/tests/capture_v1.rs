//! Capture format v1 on real lab events: written by the capture writer, read back by the
//! streaming reader — records, sequence, ERR_PTR as errors, damage named by line and
//! offset, cut streams, refused lines — and the commands around it (replay into a closed
//! pipe, v0 files).

use rdma_trace::capture::{Header, Loss, Record, SiteCount, Stats, Trailer};
use rdma_trace::event::FieldId;
use rdma_trace::event::{Event, EventKind};
use rdma_trace::output::jsonl::Jsonl;
use rdma_trace::sink::Sink;
use rdma_trace::source::capture::{MAX_LINE, ReadError, Reader};
use std::io::Read;

use std::process::{Command, Stdio};

mod common;

fn site(lost: u64) -> SiteCount {
    let mut s =
        SiteCount { site: "umem_get return".into(), hits: 9, delivered: 9 - lost, ..Default::default() };
    if lost > 0 {
        s.lost.insert("ring full".into(), lost);
    }
    s
}

/// A whole v1 stream of the memlock capture's events (it has refused pins: ERR_PTRs).
fn stream(events: &[Event]) -> Vec<u8> {
    let mut w = Jsonl::new(Vec::new());
    w.header(&common::test_header()).unwrap();
    for (i, e) in events.iter().enumerate() {
        w.event(&std::sync::Arc::new(e.clone())).unwrap();
        if i == 3 {
            w.stats(&Stats { ts_ns: e.ts_ns, sites: vec![site(0)], ..Default::default() }).unwrap();
            w.loss(&Loss {
                ts_ns: e.ts_ns,
                site: "umem_get return".into(),
                reason: "ring full".into(),
                count: 2,
                ..Default::default()
            })
            .unwrap();
        }
    }
    let t = Trailer {
        ts_ns: 1,
        stopped: "SIGINT".into(),
        exit_code: 0,
        delivered: 7,
        lost: 2,
        sites: vec![site(2)],
        ..Default::default()
    };
    w.trailer(&t).unwrap();
    w.flush().unwrap();
    w.into_inner()
}

fn read_all(bytes: &[u8], strict: bool) -> (Vec<Record>, rdma_trace::source::capture::ReadReport) {
    let mut r = Reader::new(bytes, strict);
    let recs: Vec<Record> = r.by_ref().map(|x| x.unwrap()).collect();
    (recs, r.report)
}

#[test]
fn a_stream_reads_back_record_for_record() {
    let events = common::lab_events("memlock-7.3.jsonl");
    let bytes = stream(&events);
    let text = String::from_utf8(bytes.clone()).unwrap();
    // ERR_PTRs are written as errors, never as pointer-sized numbers.
    assert!(!text.contains("18446744073709551604"), "an ERR_PTR was written as a number");
    assert!(text.contains(r#""errors":{"umem":{"err":"ENOMEM","errno":12}}"#), "{text}");
    let (recs, report) = read_all(&bytes, true);
    assert_eq!(report.version, Some(1));
    assert!(report.saw_trailer && !report.cut_short && report.damaged == 0 && report.seq_gaps == 0);
    assert_eq!(recs.len(), events.len() + 4);
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r.seq(), Some(i as u64), "record {i} numbered in order");
    }
    assert!(
        matches!(&recs[0], Record::Header(h) if **h == Header { v: 1, ty: "header".into(), ..common::test_header() })
    );
    let back: Vec<Event> = recs
        .into_iter()
        .filter_map(|r| match r {
            Record::Event(e) => Some(std::sync::Arc::unwrap_or_clone(e)),
            _ => None,
        })
        .collect();
    for (a, b) in back.iter().zip(&events) {
        assert_eq!(Event { v: 0, seq: None, ..a.clone() }, *b, "the pipeline sees the event it was given");
    }
    let refused =
        back.iter().filter(|e| e.is(rdma_trace::event::ProbeId::UmemGet) && e.kind == EventKind::Return);
    assert!(
        refused.filter_map(|e| e.field(FieldId::Umem)).any(|u| u == (-12i64) as u64),
        "the ERR_PTR is back"
    );
}

#[test]
fn a_damaged_line_is_skipped_and_named_by_line_and_offset() {
    let bytes = stream(&common::lab_events("memlock-6.12.jsonl"));
    let text = String::from_utf8(bytes).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines[5] = r#"{"v":1,"seq":5,"ts_ns":12,"kind":"entr"#.into();
    let offset: usize = lines[..5].iter().map(|l| l.len() + 1).sum();
    let broken = lines.join("\n") + "\n";
    let (recs, report) = read_all(broken.as_bytes(), false);
    assert_eq!(recs.len(), lines.len() - 1);
    assert_eq!(report.damaged, 1);
    assert_eq!((report.described[0].line, report.described[0].offset), (6, offset as u64));
    assert_eq!(report.seq_gaps, 1, "the skipped record leaves a gap in the sequence");
    let notes = report.notes().join("\n");
    assert!(notes.contains(&format!("line 6 (byte {offset})")), "{notes}");
    // --strict: the same line is an error naming it.
    let err = Reader::new(broken.as_bytes(), true).find_map(Result::err).expect("strict fails");
    assert!(err.to_string().starts_with(&format!("line 6 (byte {offset}): ")), "{err}");
}

#[test]
fn a_stream_cut_mid_line_reads_to_the_cut_and_says_so() {
    let bytes = stream(&common::lab_events("memlock-7.3.jsonl"));
    // As after a SIGKILL: the trailer never came, the last line stops half-way.
    let cut = &bytes[..bytes.len() - 200];
    let (recs, report) = read_all(cut, false);
    assert!(report.cut_short, "{report:?}");
    assert_eq!(report.damaged, 1);
    assert!(report.described[0].why.starts_with("cut short (no newline)"), "{report:?}");
    let whole_lines = cut.iter().filter(|&&b| b == b'\n').count();
    assert_eq!(recs.len(), whole_lines, "every whole line is read");
    assert!(report.notes().iter().any(|n| n.contains("no trailer")));
}

#[test]
fn a_line_longer_than_the_maximum_is_refused_in_bounded_memory() {
    // /dev/zero-like input: no newline ever.
    let endless = std::io::BufReader::new(std::io::repeat(b'x'));
    let err = Reader::new(endless, false).next().unwrap().unwrap_err();
    assert!(matches!(err, ReadError::TooLong { line: 1, offset: 0 }), "{err}");
    assert!(err.to_string().contains(&MAX_LINE.to_string()));
}

#[test]
fn v0_captures_still_read_as_events() {
    let text = std::fs::read_to_string(common::lab_capture("session-6.12.jsonl")).unwrap();
    let (recs, report) = read_all(text.as_bytes(), true);
    assert_eq!(report.version, Some(0));
    assert!(!report.cut_short, "v0 files have no trailer to miss");
    assert_eq!(recs.len(), text.lines().count());
    assert!(recs.iter().all(|r| matches!(r, Record::Event(_))));
}

#[test]
fn replay_into_a_closed_pipe_ends_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rdma-trace"))
        .arg("replay")
        .arg(common::lab_capture("session-7.3.jsonl"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 64];
    child.stdout.as_mut().unwrap().read_exact(&mut first).unwrap();
    drop(child.stdout.take()); // `| head -c 64`
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // Ended as cat is (SIGPIPE), or having seen EPIPE itself: quietly either way.
    let quiet = out.status.success()
        || std::os::unix::process::ExitStatusExt::signal(&out.status) == Some(libc::SIGPIPE);
    assert!(quiet, "exit {}: {err}", out.status);
    assert!(!err.contains("Broken pipe"), "{err}");
}

#[test]
fn replay_reads_stdin() {
    let f = std::fs::File::open(common::lab_capture("session-6.12.jsonl")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rdma-trace")).args(["replay", "-"]).stdin(f).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        common::lab_events("session-6.12.jsonl").len()
    );
}

#[test]
fn a_redacted_capture_hides_kernel_addresses_and_still_joins() {
    use rdma_trace::pipeline::correlate::engine;
    use rdma_trace::pipeline::redact::{KERNEL_HALF, KERNEL_STAND_IN, Redactor};
    for name in ["companion-7.3.jsonl", "companion-6.12.jsonl", "memlock-7.3.jsonl"] {
        let events = common::lab_events(name);
        let mut r = Redactor::default();
        let redacted: Vec<Event> = events
            .iter()
            .map(|e| {
                let mut e = e.clone();
                r.event(&mut e);
                e
            })
            .collect();
        let kernel_values: Vec<u64> = events
            .iter()
            .flat_map(|e| e.fields.values().map(|v| v.as_u64()))
            .filter(|&v| (KERNEL_HALF..u64::MAX - 4095).contains(&v))
            .collect();
        assert!(!kernel_values.is_empty(), "{name} has kernel addresses to hide");
        for e in &redacted {
            for (k, v) in &e.fields {
                let v = v.as_u64();
                assert!(!kernel_values.contains(&v) || v >= KERNEL_STAND_IN, "{name}: {k} = {v:#x} kept");
            }
        }
        let (a, b) = (engine::build(&events, &[]), engine::build(&redacted, &[]));
        assert_eq!(a.unjoined, b.unjoined, "{name}");
        assert_eq!(a.processes.len(), b.processes.len(), "{name}");
        for (pa, pb) in a.processes.values().zip(b.processes.values()) {
            assert_eq!(
                (&pa.events, pa.calls.len(), pa.completions.len()),
                (&pb.events, pb.calls.len(), pb.completions.len()),
                "{name}: the same joins"
            );
        }
    }
}
