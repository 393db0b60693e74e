//! The pipeline after decode, on captures recorded in the lab (both kernels): parsing,
//! pairing, rendering, the replay command, and corrupt input.

use rdma_trace::event::EventKind;
use rdma_trace::event::FieldId;

use std::process::Command;

mod common;

#[test]
fn captures_parse_and_every_return_has_its_entry() {
    for f in ["session-6.12.jsonl", "session-7.3.jsonl"] {
        let evs = common::lab_events(f);
        assert!(evs.len() > 500, "{f}: {}", evs.len());
        let mut open: std::collections::HashMap<(u32, &str), i64> = Default::default();
        for e in &evs {
            let k = open.entry((e.tid, e.name.as_str())).or_default();
            match e.kind {
                EventKind::Entry if e.symbol.as_deref() != Some("mr_dereg") => *k += 1,
                EventKind::Return => {
                    *k -= 1;
                    assert!(*k >= 0, "{f}: return without entry: {e:?}");
                    assert!(e.latency_ns.is_some(), "{f}: return without latency: {e:?}");
                }
                _ => {}
            }
        }
    }
}

#[test]
fn text_lines_name_the_rdma_values() {
    let evs = common::lab_events("session-7.3.jsonl");
    let ret = evs.iter().find(|e| e.name == "rxe_reg_mr" && e.kind == EventKind::Return).unwrap();
    let line = rdma_trace::output::text::line(ret);
    let lkey = ret.field(FieldId::Lkey).unwrap();
    assert!(line.contains(&format!("lkey={lkey:#x}")), "{line}");
    assert!(line.contains("took="), "{line}");
    let entry = evs.iter().find(|e| e.name == "rxe_reg_mr" && e.kind == EventKind::Entry).unwrap();
    let line = rdma_trace::output::text::line(entry);
    assert!(line.contains("access=LOCAL_WRITE|REMOTE_WRITE|RELAXED_ORDERING"), "{line}");
    let comp = evs.iter().find(|e| e.name == "comp_handler").unwrap();
    assert!(rdma_trace::output::text::line(comp).contains("ctx=kworker"));
}

/// The text stream of the first events of the 7.3 session, byte for byte.
#[test]
fn text_stream_golden() {
    let evs = common::lab_events("session-7.3.jsonl");
    let text: String = evs.iter().take(60).map(|e| rdma_trace::output::text::line(e) + "\n").collect();
    let golden = common::lab_capture("session-7.3.head.txt");
    if std::env::var_os("RDMA_TRACE_BLESS").is_some() {
        std::fs::write(&golden, &text).unwrap();
    }
    assert_eq!(text, std::fs::read_to_string(&golden).unwrap_or_default(), "RDMA_TRACE_BLESS=1 to accept");
}

#[test]
fn replay_prints_every_event() {
    let out = Command::new(env!("CARGO_BIN_EXE_rdma-trace"))
        .args(["replay"])
        .arg(common::lab_capture("session-6.12.jsonl"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = String::from_utf8_lossy(&out.stdout).lines().count();
    assert_eq!(lines, common::lab_events("session-6.12.jsonl").len());
}

#[test]
fn corrupt_line_is_skipped_and_named_or_with_strict_refused() {
    let good = std::fs::read_to_string(common::lab_capture("session-6.12.jsonl")).unwrap();
    let mut lines: Vec<&str> = good.lines().take(10).collect();
    lines[6] = "{\"v\":0,\"ts_ns\":12,\"kind\":\"entr";
    let dir = std::env::temp_dir().join(format!("rdma-trace-corrupt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("bad.jsonl");
    std::fs::write(&p, lines.join("\n")).unwrap();
    let offset: usize = lines[..6].iter().map(|l| l.len() + 1).sum();
    // Skipped, counted and named; the other nine are printed.
    let out = Command::new(env!("CARGO_BIN_EXE_rdma-trace")).arg("replay").arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains(&format!("skipped 1 damaged lines: line 7 (byte {offset})")), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 9);
    // --strict: the first damaged line is an error naming it.
    let out =
        Command::new(env!("CARGO_BIN_EXE_rdma-trace")).args(["replay", "--strict"]).arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "bad input: {err}");
    assert!(err.contains(&format!("line 7 (byte {offset})")), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    std::fs::remove_dir_all(dir).ok();
}
