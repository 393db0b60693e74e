//! `rdma-trace diff A B`: two reports side by side — per-path counts and latency
//! percentiles, bytes and pages pinned, syscalls per completion and per work request, loss,
//! and the kernel stacks that are new in B or gone from it — with thresholds (`--fail-on
//! pin-p99=+20%`) a CI job can fail on.

use super::report::Report;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// Every metric a threshold can name, with its value in a report (absent: not measured).
pub fn metrics(r: &Report) -> BTreeMap<String, Option<f64>> {
    let mut m = BTreeMap::new();
    for (name, p) in &r.paths {
        m.insert(format!("{name}-events"), Some(p.events as f64));
        m.insert(format!("{name}-p50"), p.latency.p50_ns.map(|v| v as f64));
        m.insert(format!("{name}-p99"), p.latency.p99_ns.map(|v| v as f64));
    }
    m.insert("pin-pages".into(), r.paths.get("pin").and_then(|p| p.pages).map(|v| v as f64));
    m.insert("wakeup-p50".into(), r.wakeup.p50_ns.map(|v| v as f64));
    m.insert("wakeup-p99".into(), r.wakeup.p99_ns.map(|v| v as f64));
    let procs = &r.processes;
    m.insert("pinned-peak-bytes".into(), Some(procs.iter().map(|p| p.pinned_peak_bytes).sum::<u64>() as f64));
    m.insert("refused-pins".into(), Some(procs.iter().map(|p| p.refused_pins).sum::<u64>() as f64));
    // Completion events on every CQ, a process's or not: the completion path's count.
    m.insert("completions".into(), Some(r.cqs.iter().map(|c| c.completions).sum::<u64>() as f64));
    m.insert("syscalls-per-completion".into(), r.data_phase.per_completion_event);
    m.insert("syscalls-per-wr".into(), r.data_phase.per_work_request);
    // A v0 capture has no account of loss: not measured, rather than 0.
    let accounted = r.captures.iter().all(|c| c.version >= 1);
    m.insert("lost".into(), accounted.then(|| r.captures.iter().map(|c| c.lost).sum::<u64>() as f64));
    m
}

/// A threshold: `NAME=+20%` (B may exceed A by at most 20 %), `NAME=-10%` (B may fall
/// short of A by at most 10 %), `NAME=+5` / `NAME=-5` (absolute).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Threshold {
    pub metric: String,
    /// +1: an increase is checked; -1: a decrease.
    pub direction: i8,
    pub limit: f64,
    pub percent: bool,
}

/// Why a `--fail-on` threshold, or a diff against it, is refused.
#[derive(Debug, thiserror::Error)]
pub enum ThresholdError {
    #[error("{0:?}: expected NAME=+N% or NAME=-N")]
    NoEquals(String),
    #[error("{0:?}: the limit starts with + (an increase) or - (a decrease)")]
    NoSign(String),
    #[error("{0:?}: {1:?} is not a number")]
    NotANumber(String, String),
    #[error("--fail-on {threshold}: no metric {:?}; the metrics are {known:?}", threshold.metric)]
    NoMetric { threshold: Threshold, known: Vec<String> },
}

impl std::str::FromStr for Threshold {
    type Err = ThresholdError;
    fn from_str(s: &str) -> Result<Self, ThresholdError> {
        let (metric, rule) = s.split_once('=').ok_or_else(|| ThresholdError::NoEquals(s.to_string()))?;
        let direction = match rule.chars().next() {
            Some('+') => 1,
            Some('-') => -1,
            _ => return Err(ThresholdError::NoSign(s.to_string())),
        };
        let (num, percent) = match rule[1..].strip_suffix('%') {
            Some(n) => (n, true),
            None => (&rule[1..], false),
        };
        let limit =
            num.parse::<f64>().map_err(|_| ThresholdError::NotANumber(s.to_string(), num.to_string()))?;
        Ok(Threshold { metric: metric.to_string(), direction, limit, percent })
    }
}

impl std::fmt::Display for Threshold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sign = if self.direction > 0 { '+' } else { '-' };
        write!(f, "{}={sign}{}{}", self.metric, self.limit, if self.percent { "%" } else { "" })
    }
}

/// Two reports compared: their metrics side by side, the stacks only one has, the thresholds broken.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Diff {
    /// metric → (A, B).
    pub metrics: BTreeMap<String, (Option<f64>, Option<f64>)>,
    /// Per path: stacks (by function, innermost first) only B has, and only A has, with
    /// their counts.
    pub new_stacks: BTreeMap<String, Vec<(Vec<String>, u64)>>,
    pub missing_stacks: BTreeMap<String, Vec<(Vec<String>, u64)>>,
    /// The thresholds broken, each said in one line.
    pub failed: Vec<String>,
}

/// Compares report `b` with report `a` against `thresholds`.
pub fn diff(a: &Report, b: &Report, thresholds: &[Threshold]) -> Result<Diff, ThresholdError> {
    let (ma, mb) = (metrics(a), metrics(b));
    let mut out = Diff::default();
    for (k, va) in &ma {
        out.metrics.insert(k.clone(), (*va, mb.get(k).copied().flatten()));
    }
    for (k, vb) in &mb {
        out.metrics.entry(k.clone()).or_insert((None, *vb));
    }
    let paths: BTreeSet<&String> = a.paths.keys().chain(b.paths.keys()).collect();
    for path in paths {
        let set = |r: &Report| -> BTreeMap<Vec<String>, u64> {
            r.paths
                .get(path)
                .map(|p| p.stacks.iter().map(|s| (s.frames.clone(), s.count)).collect())
                .unwrap_or_default()
        };
        let (sa, sb) = (set(a), set(b));
        let only =
            |x: &BTreeMap<Vec<String>, u64>, y: &BTreeMap<Vec<String>, u64>| -> Vec<(Vec<String>, u64)> {
                x.iter().filter(|(k, _)| !y.contains_key(*k)).map(|(k, v)| (k.clone(), *v)).collect()
            };
        let (new, gone) = (only(&sb, &sa), only(&sa, &sb));
        if !new.is_empty() {
            out.new_stacks.insert(path.clone(), new);
        }
        if !gone.is_empty() {
            out.missing_stacks.insert(path.clone(), gone);
        }
    }
    for t in thresholds {
        let Some((va, vb)) = out.metrics.get(&t.metric) else {
            let known = out.metrics.keys().cloned().collect();
            return Err(ThresholdError::NoMetric { threshold: t.clone(), known });
        };
        let (Some(va), Some(vb)) = (va, vb) else {
            out.failed.push(format!("{t}: not measured in {}", if va.is_none() { "A" } else { "B" }));
            continue;
        };
        let change = (vb - va) * f64::from(t.direction);
        let allowed = if t.percent { va.abs() * t.limit / 100.0 } else { t.limit };
        if change > allowed {
            out.failed.push(format!(
                "{t}: A {} → B {} ({})",
                show(&t.metric, *va),
                show(&t.metric, *vb),
                delta(*va, *vb)
            ));
        }
    }
    Ok(out)
}

fn show(metric: &str, v: f64) -> String {
    if metric.ends_with("-p50") || metric.ends_with("-p99") {
        if v >= 1e6 { format!("{:.2} ms", v / 1e6) } else { format!("{:.1} µs", v / 1e3) }
    } else if metric.ends_with("-bytes") {
        format!("{:.0} KiB", v / 1024.0)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn delta(a: f64, b: f64) -> String {
    if a == 0.0 {
        if b == 0.0 { "=".into() } else { format!("{:+}", b - a) }
    } else {
        format!("{:+.1}%", (b - a) / a.abs() * 100.0)
    }
}

/// The comparison as text.
pub fn text(d: &Diff) -> String {
    let mut out = String::new();
    write_text(&mut out, d).expect("formatting into a String cannot fail");
    out
}

fn write_text(out: &mut String, d: &Diff) -> std::fmt::Result {
    writeln!(out, "{:<26} {:>14} {:>14} {:>10}", "metric", "A", "B", "change")?;
    for (k, (a, b)) in &d.metrics {
        let v = |x: &Option<f64>| x.map(|x| show(k, x)).unwrap_or("-".into());
        let c = match (a, b) {
            (Some(a), Some(b)) => delta(*a, *b),
            _ => String::new(),
        };
        writeln!(out, "{k:<26} {:>14} {:>14} {c:>10}", v(a), v(b))?;
    }
    for (title, stacks) in [("new in B", &d.new_stacks), ("gone from B", &d.missing_stacks)] {
        for (path, list) in stacks {
            writeln!(out, "\n{path} stacks {title}:")?;
            for (frames, n) in list {
                let shown: Vec<&str> = frames.iter().take(6).map(String::as_str).collect();
                writeln!(out, "  {n:>6}×  {}", shown.join(" ← "))?;
            }
        }
    }
    if !d.failed.is_empty() {
        writeln!(out)?;
    }
    for f in &d.failed {
        writeln!(out, "FAIL {f}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_parse_and_say_what_is_wrong() {
        let t: Threshold = "pin-p99=+20%".parse().unwrap();
        assert_eq!(t, Threshold { metric: "pin-p99".into(), direction: 1, limit: 20.0, percent: true });
        let t: Threshold = "completions=-5".parse().unwrap();
        assert_eq!((t.direction, t.percent, t.limit), (-1, false, 5.0));
        assert!("pin-p99".parse::<Threshold>().unwrap_err().to_string().contains("NAME=+N%"));
        assert!("pin-p99=20%".parse::<Threshold>().unwrap_err().to_string().contains("starts with +"));
        assert!("pin-p99=+x%".parse::<Threshold>().unwrap_err().to_string().contains("not a number"));
    }

    #[test]
    fn a_threshold_fails_only_past_its_limit_and_names_unknown_metrics() {
        let mut a = Report::default();
        a.paths.insert("pin".into(), Default::default());
        a.paths.get_mut("pin").unwrap().latency.p99_ns = Some(1000);
        let mut b = a.clone();
        b.paths.get_mut("pin").unwrap().latency.p99_ns = Some(1199);
        let th = |s: &str| vec![s.parse::<Threshold>().unwrap()];
        assert!(diff(&a, &b, &th("pin-p99=+20%")).unwrap().failed.is_empty());
        b.paths.get_mut("pin").unwrap().latency.p99_ns = Some(1201);
        let d = diff(&a, &b, &th("pin-p99=+20%")).unwrap();
        assert_eq!(d.failed.len(), 1, "{:?}", d.failed);
        assert!(d.failed[0].starts_with("pin-p99=+20%: A 1.0 µs → B 1.2 µs"), "{}", d.failed[0]);
        assert!(
            diff(&a, &b, &th("pin-p99=-20%")).unwrap().failed.is_empty(),
            "a decrease rule ignores increases"
        );
        assert!(diff(&a, &b, &th("pin-p42=+1%")).unwrap_err().to_string().contains("no metric \"pin-p42\""));
    }
}
