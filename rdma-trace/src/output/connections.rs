//! The report's queue pairs: each QP with its peer (on this host or another), its posts,
//! and its completions joined to the posts that caused them (`correlate::qps`).

use crate::capture::QpCounts;
use crate::pipeline::correlate::qps::{QpKey, QpRow, QpStory};
use crate::pipeline::render::qp_state;
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// A queue pair of the report: its two ends and the completions joined to its posts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QpReport {
    pub hostname: String,
    pub qpn: u32,
    pub pid: u32,
    pub comm: String,
    /// RESET … ERR, of the newest modify seen.
    pub state: Option<String>,
    /// What the application named at RTR: the remote QP number, and the peer's IPv4
    /// address where its GID maps one.
    pub dest_qpn: Option<u32>,
    pub dest_ipv4: Option<String>,
    /// The other end, when both ends named each other in the captures given.
    pub peer: Option<QpEnd>,
    /// Doorbells the kernel saw (soft-RoCE's `rxe_post_send`; none on a NIC whose doorbell
    /// is an MMIO store).
    #[serde(flatten)]
    pub counts: QpCounts,
    /// The peer's post → a completion here (nearest rank, of the newest samples kept).
    pub across_p50_ns: Option<u64>,
    pub across_p99_ns: Option<u64>,
    pub across_min_ns: Option<u64>,
    /// Its own post → a completion here (the send acknowledged).
    pub own_p50_ns: Option<u64>,
    pub own_p99_ns: Option<u64>,
}

/// One end of a queue pair: its host and QP number.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QpEnd {
    pub hostname: String,
    pub qpn: u32,
}

/// The rows of `qps`; `host(i)` names capture `i`'s host.
pub fn build(qps: &QpStory, host: &dyn Fn(u16) -> String) -> Vec<QpReport> {
    qps.rows.values().map(|r| row(r, host)).collect()
}

fn row(r: &QpRow, host: &dyn Fn(u16) -> String) -> QpReport {
    let end = |k: QpKey| QpEnd { hostname: host(k.host), qpn: k.qpn };
    QpReport {
        hostname: host(r.key.host),
        qpn: r.key.qpn,
        pid: r.pid.pid,
        comm: r.comm.clone(),
        state: r.state.and_then(qp_state).map(str::to_string),
        dest_qpn: r.dest_qpn,
        dest_ipv4: r.dest_ipv4().map(|a| a.to_string()),
        peer: r.peer.map(end),
        counts: r.counts,
        across_p50_ns: r.across_ns.quantile(0.5),
        across_p99_ns: r.across_ns.quantile(0.99),
        across_min_ns: r.across_ns.0.iter().min().copied(),
        own_p50_ns: r.own_ns.quantile(0.5),
        own_p99_ns: r.own_ns.quantile(0.99),
    }
}

/// The section: one line per QP, then what its completions were joined to.
pub fn text(out: &mut String, qps: &[QpReport], several_hosts: bool) -> std::fmt::Result {
    if qps.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\nqueue pairs (each completion joined to the newest post that can have caused it: a lower bound where posts queue)"
    )?;
    let at = |h: &str| if several_hosts { format!(" @{h}") } else { String::new() };
    let d = |v: Option<u64>| v.map_or("?".into(), crate::units::duration);
    for q in qps {
        let peer = match (&q.peer, q.dest_qpn) {
            (Some(p), _) => format!("↔ qp {:#x}{}", p.qpn, at(&p.hostname)),
            (None, Some(n)) => format!(
                "→ qp {n:#x}{} (its end not seen)",
                q.dest_ipv4.as_deref().map(|a| format!(" at {a}")).unwrap_or_default()
            ),
            (None, None) => "(no peer named)".into(),
        };
        writeln!(
            out,
            "  qp {:#x}{} {} {} {} {peer}: {} posts, {} completions",
            q.qpn,
            at(&q.hostname),
            q.pid,
            crate::pipeline::render::printable(&q.comm),
            q.state.as_deref().unwrap_or("?"),
            q.counts.posts,
            q.counts.completions
        )?;
        if q.counts.after_peer_post > 0 {
            writeln!(
                out,
                "    {} after a post on the peer: post → completion p50 {}, p99 {}, min {}",
                q.counts.after_peer_post,
                d(q.across_p50_ns),
                d(q.across_p99_ns),
                d(q.across_min_ns)
            )?;
        }
        if q.counts.after_own_post > 0 {
            writeln!(
                out,
                "    {} after its own post (the send acknowledged): p50 {}, p99 {}",
                q.counts.after_own_post,
                d(q.own_p50_ns),
                d(q.own_p99_ns)
            )?;
        }
        if q.counts.before_any_post > 0 {
            writeln!(
                out,
                "    {} before any post that could have caused them{}",
                q.counts.before_any_post,
                if several_hosts {
                    " (across hosts: the clocks are placed wrong by more than the path)"
                } else {
                    ""
                }
            )?;
        }
        if q.counts.flushed > 0 {
            writeln!(out, "    {} flushed (the QP in the error state, no post to join)", q.counts.flushed)?;
        }
        if q.counts.peer_unknown > 0 {
            writeln!(
                out,
                "    {} on its receive CQ with the other end not seen (give its capture too)",
                q.counts.peer_unknown
            )?;
        }
    }
    Ok(())
}
