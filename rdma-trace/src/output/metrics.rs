//! The daemon's metrics in the Prometheus text format (version 0.0.4), for fleets: per
//! process (labels `pid`, `comm`; never a kernel pointer) the bytes pinned against the
//! memlock limit, MR registrations and refusals, completions by the context they ran in,
//! pin and wakeup latency histograms; per probe the events delivered and lost by reason.

use crate::capture::SiteCount;
use crate::pipeline::correlate::story::{BUCKETS_NS, Histogram, ProcessStory};
use crate::sink::Counted;
use std::fmt::Write;

/// A label value as the text format wants it: backslash, quote and newline escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    writeln!(out, "# HELP {name} {help}").ok();
    writeln!(out, "# TYPE {name} {kind}").ok();
}

fn proc_labels(p: &ProcessStory) -> String {
    let mut l = format!("pid=\"{}\",comm=\"{}\"", p.pid, label(&p.comm));
    if let Some(c) = p.cgroup.as_deref().and_then(crate::event::container_of) {
        l.push_str(&format!(",container=\"{c}\""));
    }
    l
}

fn histogram(out: &mut String, name: &str, labels: &str, h: &Histogram) {
    let mut cumulative = 0;
    for (i, upper) in BUCKETS_NS.iter().enumerate() {
        cumulative += h.counts.get(i).copied().unwrap_or(0);
        writeln!(out, "{name}_bucket{{{labels},le=\"{}\"}} {cumulative}", *upper as f64 / 1e9).ok();
    }
    writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count).ok();
    writeln!(out, "{name}_sum{{{labels}}} {}", h.sum_ns as f64 / 1e9).ok();
    writeln!(out, "{name}_count{{{labels}}} {}", h.count).ok();
}

/// The whole exposition: the story's processes (kworkers left out: their work is counted
/// under the process that owns the CQ) and the latest per-probe accounting.
pub(crate) fn render<'a>(
    processes: impl IntoIterator<Item = &'a ProcessStory>,
    sites: &[SiteCount],
) -> String {
    let mut out = String::new();
    let ps: Vec<&ProcessStory> = processes.into_iter().filter(|p| !p.comm.starts_with("kworker")).collect();
    gauges(&mut out, &ps);
    family(
        &mut out,
        "rdma_trace_completions_total",
        "counter",
        "Completion events on the process's CQs, by the context the handler ran in.",
    );
    for p in &ps {
        for (ctx, n) in &p.completions_by_context {
            writeln!(
                out,
                "rdma_trace_completions_total{{{},context=\"{}\"}} {n}",
                proc_labels(p),
                label(ctx.as_str())
            )
            .ok();
        }
    }
    family(&mut out, "rdma_trace_pin_latency_seconds", "histogram", "Time the umem function took to pin.");
    for p in &ps {
        histogram(&mut out, "rdma_trace_pin_latency_seconds", &proc_labels(p), &p.pin_latency);
    }
    family(
        &mut out,
        "rdma_trace_wakeup_latency_seconds",
        "histogram",
        "From a completion event to the channel read that woke the process.",
    );
    for p in &ps {
        histogram(&mut out, "rdma_trace_wakeup_latency_seconds", &proc_labels(p), &p.wakeup_latency);
    }
    accounting(&mut out, sites);
    out
}

/// One value per process, for each per-process family.
fn gauges(out: &mut String, ps: &[&ProcessStory]) {
    type Value = fn(&ProcessStory) -> Option<u64>;
    let families: [(&str, &str, &str, Value); 5] = [
        ("rdma_trace_pinned_bytes", "gauge", "Bytes pinned now by live MRs (whole pages).", |p| {
            Some(p.pinned_bytes)
        }),
        ("rdma_trace_pinned_peak_bytes", "gauge", "Most bytes pinned at once.", |p| {
            Some(p.pinned_peak_bytes)
        }),
        (
            "rdma_trace_memlock_limit_bytes",
            "gauge",
            "RLIMIT_MEMLOCK the pins are charged against (absent when unlimited or unknown).",
            |p| p.memlock_limit.filter(|&l| l != u64::MAX),
        ),
        ("rdma_trace_mr_registrations_total", "counter", "Memory pins the kernel made.", |p| {
            Some(p.pins_total)
        }),
        (
            "rdma_trace_mr_refusals_total",
            "counter",
            "Memory pins the kernel refused (e.g. over RLIMIT_MEMLOCK).",
            |p| Some(p.failed_pins_total),
        ),
    ];
    for (name, kind, help, value) in families {
        family(out, name, kind, help);
        for p in ps {
            if let Some(x) = value(p) {
                writeln!(out, "{name}{{{}}} {x}", proc_labels(p)).ok();
            }
        }
    }
}

/// A counting run's exposition (`plan::counted`): the same families, from what the
/// kernel aggregated (a process's pins; completions and wakeups are not counted there
/// yet), and each probe's hits per process.
pub(crate) fn render_counted(c: &Counted, sites: &[SiteCount]) -> String {
    let name = |tgid: u32| c.comms.get(&tgid).cloned().unwrap_or_default();
    let mut tgids: Vec<u32> = c.hits.iter().map(|h| h.0).collect();
    tgids.extend(c.pins.keys().chain(c.cqs.keys()));
    tgids.sort_unstable();
    tgids.dedup();
    let hist =
        |counts: &[u64], sum_ns| Histogram { counts: counts.to_vec(), count: counts.iter().sum(), sum_ns };
    let ps: Vec<ProcessStory> = tgids
        .into_iter()
        .map(|tgid| {
            let mut p = ProcessStory {
                pid: crate::event::Task::new(0, tgid),
                comm: name(tgid),
                ..Default::default()
            };
            if let Some(k) = c.pins.get(&tgid) {
                // A release counted on another CPU before its pin is read as none pinned.
                p.pinned_bytes = (k.pinned as i64).max(0) as u64;
                p.pinned_peak_bytes = k.peak;
                p.pins_total = k.pins;
                p.failed_pins_total = k.refused;
                p.pin_latency = hist(&k.latency, k.latency_sum_ns);
            }
            if let Some(q) = c.cqs.get(&tgid) {
                use crate::event::ExecContext;
                use crate::pipeline::correlate::cqs::RanIn;
                use rdma_trace_common::{CTX_KWORKER, CTX_PROCESS, CTX_SOFTIRQ};
                let contexts = [
                    (CTX_PROCESS, ExecContext::Process),
                    (CTX_KWORKER, ExecContext::Kworker),
                    (CTX_SOFTIRQ, ExecContext::Softirq),
                ];
                for (i, ctx) in contexts {
                    if q.by_context[i] > 0 {
                        p.completions_by_context.insert(RanIn(Some(ctx)), q.by_context[i]);
                    }
                }
                p.completions_total = q.by_context.iter().sum();
                p.wakeup_latency = hist(&q.wakeup, q.wakeup_sum_ns);
            }
            p
        })
        .collect();
    let mut out = render(&ps, sites);
    family(
        &mut out,
        "rdma_trace_probe_hits_total",
        "counter",
        "Hits of each probe, per process (counted in the kernel).",
    );
    for (tgid, row, n) in &c.hits {
        let labels = format!("pid=\"{tgid}\",comm=\"{}\"", label(&name(*tgid)));
        writeln!(out, "rdma_trace_probe_hits_total{{{labels},probe=\"{}\"}} {n}", label(row)).ok();
    }
    out
}

/// Per probe: delivered, and lost by reason.
fn accounting(out: &mut String, sites: &[SiteCount]) {
    family(out, "rdma_trace_events_delivered_total", "counter", "Events delivered, per probe.");
    for s in sites {
        writeln!(
            out,
            "rdma_trace_events_delivered_total{{probe=\"{}\"}} {}",
            label(&s.site.to_string()),
            s.delivered
        )
        .ok();
    }
    family(out, "rdma_trace_events_lost_total", "counter", "Events lost, per probe and reason.");
    for s in sites {
        for (reason, n) in &s.lost {
            writeln!(
                out,
                "rdma_trace_events_lost_total{{probe=\"{}\",reason=\"{}\"}} {n}",
                label(&s.site.to_string()),
                label(reason.as_str())
            )
            .ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped_and_histograms_cumulative() {
        let mut p = ProcessStory {
            pid: crate::event::Task::new(0, 7),
            comm: "a\"b\\c".into(),
            pinned_bytes: 4096,
            ..Default::default()
        };
        p.pin_latency.observe(3_000);
        p.pin_latency.observe(2_000_000_000);
        let kworker = crate::pipeline::correlate::cqs::RanIn(Some(crate::event::ExecContext::Kworker));
        p.completions_by_context.insert(kworker, 5);
        let text = render([&p], &[]);
        assert!(text.contains("rdma_trace_pinned_bytes{pid=\"7\",comm=\"a\\\"b\\\\c\"} 4096"), "{text}");
        assert!(text.contains(
            "rdma_trace_pin_latency_seconds_bucket{pid=\"7\",comm=\"a\\\"b\\\\c\",le=\"0.000005\"} 1"
        ));
        assert!(text.contains("le=\"+Inf\"} 2"));
        assert!(text.contains("context=\"kworker\"} 5"));
        assert!(!text.contains("0xff"), "no kernel pointer in a metric");
    }

    #[test]
    fn a_counting_run_says_the_same_families_from_the_kernels_counts() {
        let mut k = rdma_trace_common::ProcPins { pinned: 8192, peak: 12288, pins: 2, ..Default::default() };
        k.latency[2] = 2; // two pins of 2.5-5 µs
        k.latency_sum_ns = 7_000;
        let mut q = rdma_trace_common::ProcCqs::default();
        q.by_context[rdma_trace_common::CTX_KWORKER] = 3;
        q.wakeup[6] = 2; // two wakeups of 50-100 µs
        q.wakeup_sum_ns = 150_000;
        let c = Counted {
            hits: vec![
                (7, "umem_get (ib_umem_get)".into(), 2),
                (9, "comp_handler (ib_uverbs_comp_handler)".into(), 5),
            ],
            comms: [(7, "mr\"loop".to_string())].into(),
            pins: [(7, k)].into(),
            cqs: [(7, q)].into(),
        };
        let text = render_counted(&c, &[]);
        for line in [
            "rdma_trace_pinned_bytes{pid=\"7\",comm=\"mr\\\"loop\"} 8192",
            "rdma_trace_pinned_peak_bytes{pid=\"7\",comm=\"mr\\\"loop\"} 12288",
            "rdma_trace_mr_registrations_total{pid=\"7\",comm=\"mr\\\"loop\"} 2",
            "rdma_trace_pin_latency_seconds_bucket{pid=\"7\",comm=\"mr\\\"loop\",le=\"0.000005\"} 2",
            "rdma_trace_pin_latency_seconds_count{pid=\"7\",comm=\"mr\\\"loop\"} 2",
            "rdma_trace_probe_hits_total{pid=\"7\",comm=\"mr\\\"loop\",probe=\"umem_get (ib_umem_get)\"} 2",
            // A process whose name was not kept still has its counts.
            "rdma_trace_probe_hits_total{pid=\"9\",comm=\"\",probe=\"comp_handler (ib_uverbs_comp_handler)\"} 5",
            "rdma_trace_pinned_bytes{pid=\"9\",comm=\"\"} 0",
            "rdma_trace_completions_total{pid=\"7\",comm=\"mr\\\"loop\",context=\"kworker\"} 3",
            "rdma_trace_wakeup_latency_seconds_bucket{pid=\"7\",comm=\"mr\\\"loop\",le=\"0.0001\"} 2",
            "rdma_trace_wakeup_latency_seconds_count{pid=\"7\",comm=\"mr\\\"loop\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
    }
}
