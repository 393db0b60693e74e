//! The daemon's metrics in the Prometheus text format (version 0.0.4), for fleets: per
//! process (labels `pid`, `comm`; never a kernel pointer) the bytes pinned against the
//! memlock limit, MR registrations and refusals, completions by the context they ran in,
//! pin and wakeup latency histograms; per probe the events delivered and lost by reason.

use crate::capture::SiteCount;
use crate::pipeline::correlate::story::{BUCKETS_NS, Histogram, ProcessStory};
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
pub fn render<'a>(processes: impl IntoIterator<Item = &'a ProcessStory>, sites: &[SiteCount]) -> String {
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

/// Request bytes read at most (the request line and headers), the time a client has to
/// send them, and the requests answered at once (past that, 503 at once).
pub const MAX_REQUEST: u64 = 16 << 10;
const REQUEST_TIME: std::time::Duration = std::time::Duration::from_secs(2);
pub const MAX_IN_FLIGHT: usize = 64;

/// Serves `text()` over HTTP on `addr` (any path, GET; `/clock` answers the wall clock for a
/// peer's `--clock-peer`, `clock`): a thread per connection (at most
/// `MAX_IN_FLIGHT`), the current exposition each time. A client that sends more than
/// `MAX_REQUEST` bytes or takes longer than 2 s is answered as it stands, then closed.
pub fn serve(
    addr: &str,
    text: std::sync::Arc<std::sync::Mutex<String>>,
) -> std::io::Result<std::net::SocketAddr> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    let in_flight = std::sync::Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            if in_flight.fetch_add(1, Ordering::AcqRel) >= MAX_IN_FLIGHT {
                in_flight.fetch_sub(1, Ordering::AcqRel);
                let busy =
                    "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                std::io::Write::write_all(&mut &conn, busy.as_bytes()).ok();
                continue;
            }
            let (text, in_flight) = (text.clone(), in_flight.clone());
            std::thread::spawn(move || {
                answer(&conn, &text);
                in_flight.fetch_sub(1, Ordering::AcqRel);
            });
        }
    });
    Ok(bound)
}

/// Reads the request (bounded in bytes and time) and writes the exposition.
fn answer(conn: &std::net::TcpStream, text: &std::sync::Mutex<String>) {
    use std::io::{BufRead, BufReader, Read};
    let deadline = std::time::Instant::now() + REQUEST_TIME;
    let mut r = BufReader::new(conn.take(MAX_REQUEST));
    let mut line = String::new();
    let mut first = String::new();
    // The request line and headers, up to the blank line.
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || conn.set_read_timeout(Some(left)).is_err() {
            break;
        }
        line.clear();
        if !r.read_line(&mut line).is_ok_and(|n| n > 0) || line == "\r\n" || line == "\n" {
            break;
        }
        if first.is_empty() {
            first = line.clone();
        }
    }
    let (body, kind) = if first.split_whitespace().nth(1) == Some(crate::clock::PATH) {
        (crate::clock::answer(), "application/json")
    } else {
        (text.lock().map(|t| t.clone()).unwrap_or_default(), "text/plain; version=0.0.4")
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut w = conn;
    std::io::Write::write_all(&mut w, head.as_bytes()).ok();
    std::io::Write::write_all(&mut w, body.as_bytes()).ok();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slow clients and endless headers hold a thread for at most 2 s and 16 KiB each; a
    /// scrape among them is answered at once.
    #[test]
    fn slow_and_endless_requests_cost_bounded_time_and_the_scrape_still_answers() {
        use std::io::{Read, Write};
        use std::net::TcpStream;
        let text = std::sync::Arc::new(std::sync::Mutex::new("rdma_trace_up 1\n".to_string()));
        let addr = serve("127.0.0.1:0", text).unwrap();
        let slow: Vec<TcpStream> = (0..16)
            .map(|_| {
                let mut s = TcpStream::connect(addr).unwrap();
                s.write_all(b"GET / HTTP/1.1\r\nX-Slow: ").unwrap();
                s
            })
            .collect();
        let mut endless = TcpStream::connect(addr).unwrap();
        let junk = vec![b'a'; 64 << 10];
        let mut sent = 0usize;
        while sent < 8 << 20 && endless.write_all(&junk).is_ok() {
            sent += junk.len();
            endless.set_write_timeout(Some(std::time::Duration::from_secs(3))).unwrap();
        }
        assert!(sent < 8 << 20, "the endless request was read to {sent} bytes");
        let t = std::time::Instant::now();
        let mut scrape = TcpStream::connect(addr).unwrap();
        scrape.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut got = String::new();
        scrape.read_to_string(&mut got).unwrap();
        assert!(got.starts_with("HTTP/1.1 200") && got.ends_with("rdma_trace_up 1\n"), "{got}");
        assert!(t.elapsed() < std::time::Duration::from_secs(1), "the scrape waited {:?}", t.elapsed());
        for mut s in slow {
            let t = std::time::Instant::now();
            let mut got = String::new();
            s.read_to_string(&mut got).ok();
            assert!(got.starts_with("HTTP/1.1 200"), "{got}");
            assert!(t.elapsed() < std::time::Duration::from_secs(3), "held {:?}", t.elapsed());
        }
    }

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
}
