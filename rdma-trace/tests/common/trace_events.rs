//! A checker of Chrome trace-event JSON, written from the Trace Event Format document —
//! the keys each phase requires, the complete slices of each track properly nested — and
//! from the rule by which Perfetto's importer reads flows (v2: `bind_id` with `flow_out` /
//! `flow_in`): in time order, each `flow_in` ends the arrow the previous `flow_out` of its
//! id began, so a flow's slices must alternate out → in, each later than the one before
//! (else Perfetto drops it, counting `flow_end_without_start`). A chain (post → completion
//! → wakeup) shares one id: its middle slice is both `flow_in` and `flow_out`.

use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

/// A complete slice on a track: start, end (µs), name.
type Span = (f64, f64, String);

/// What is wrong with a trace-event JSON document, if anything.
pub fn check_trace_events(doc: &Value) -> Vec<String> {
    let mut wrong = Vec::new();
    let Some(events) = doc["traceEvents"].as_array() else { return vec!["no traceEvents array".into()] };
    // Per flow id: each slice bound to it (start in µs, flow_in, flow_out).
    let mut flows: HashMap<String, Vec<(f64, bool, bool)>> = HashMap::new();
    let mut tracks: BTreeMap<(u64, u64), Vec<Span>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        let ph = e["ph"].as_str().unwrap_or("");
        let need: &[&str] = match ph {
            "X" => &["name", "ts", "dur", "pid", "tid"],
            "i" | "I" => &["name", "ts", "pid", "tid", "s"],
            "M" => &["name", "pid", "args"],
            "B" | "E" => &["ts", "pid", "tid"],
            other => {
                wrong.push(format!("event {i}: unknown phase {other:?}"));
                continue;
            }
        };
        for k in need {
            if e.get(*k).is_none() {
                wrong.push(format!("event {i} ({ph}): no {k}"));
            }
        }
        if ph == "M" && e["args"]["name"].as_str().is_none() {
            wrong.push(format!("event {i}: metadata without args.name"));
        }
        if ph == "i" && !["g", "p", "t"].contains(&e["s"].as_str().unwrap_or("")) {
            wrong.push(format!("event {i}: instant scope {:?}", e["s"]));
        }
        if let Some(id) = e.get("bind_id") {
            if ph != "X" {
                wrong.push(format!("event {i}: a flow bound to a {ph} event (flows bind to slices)"));
            }
            let (into, out) = (e["flow_in"] == Value::Bool(true), e["flow_out"] == Value::Bool(true));
            flows.entry(id.to_string()).or_default().push((e["ts"].as_f64().unwrap_or(-1.0), into, out));
        }
        if ph == "X" {
            let (ts, dur) = (e["ts"].as_f64().unwrap_or(-1.0), e["dur"].as_f64().unwrap_or(-1.0));
            if ts < 0.0 || dur < 0.0 {
                wrong.push(format!("event {i}: ts {ts} dur {dur}"));
            }
            let track = (e["pid"].as_u64().unwrap_or(0), e["tid"].as_u64().unwrap_or(0));
            tracks.entry(track).or_default().push((
                ts,
                ts + dur,
                e["name"].as_str().unwrap_or("").to_string(),
            ));
        }
    }
    for (id, ends) in &mut flows {
        ends.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in chain_faults(ends) {
            wrong.push(format!("flow {id}: {w}"));
        }
    }
    const EPS: f64 = 1e-6;
    for (track, slices) in &mut tracks {
        // Longer first at equal starts: a parent opens before its child.
        slices.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut open: Vec<&Span> = Vec::new();
        for s in slices.iter() {
            while open.last().is_some_and(|p| s.0 >= p.1 - EPS) {
                open.pop();
            }
            if let Some(p) = open.last()
                && s.1 > p.1 + EPS
            {
                wrong.push(format!(
                    "track {track:?}: {} [{}, {}] overlaps {} [{}, {}]",
                    s.2, s.0, s.1, p.2, p.0, p.1
                ));
            }
            open.push(s);
        }
    }
    wrong
}

/// What is wrong with one id's slices (in time order): the first starts the arrow, the
/// last ends one, every slice between does both, and each starts after the one before.
fn chain_faults(ends: &[(f64, bool, bool)]) -> Vec<String> {
    let mut wrong = Vec::new();
    let n = ends.len();
    if n < 2 {
        wrong.push(format!("{n} slice(s): an arrow needs a flow_out and a flow_in"));
        return wrong;
    }
    for (k, (ts, into, out)) in ends.iter().enumerate() {
        let want = (k > 0, k + 1 < n);
        if (*into, *out) != want {
            wrong.push(format!(
                "slice {k} of {n} at {ts}: flow_in {into}, flow_out {out} (want {}, {})",
                want.0, want.1
            ));
        }
        if k > 0 && *ts <= ends[k - 1].0 {
            wrong.push(format!(
                "its flow_in slice starts at {ts}, not after the flow_out before it at {}",
                ends[k - 1].0
            ));
        }
    }
    wrong
}
