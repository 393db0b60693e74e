//! Per-probe hit and loss counters, as the user sees them.

use crate::select::Plan;
use rdma_trace_common::{
    CNT_HITS, CNT_READ_FAILED, CNT_RINGBUF_FULL, CNT_STACK_FAILED, COUNTERS, SITE_SYS_ENTER, SITE_SYS_EXIT,
    return_site,
};

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SiteStats {
    pub site: String,
    pub hits: u64,
    /// Events lost: the ring buffer was full.
    pub ringbuf_full: u64,
    /// Events kept with a field missing: a kernel read failed.
    pub read_failed: u64,
    /// Events kept without their kernel stack.
    pub stack_failed: u64,
}

impl SiteStats {
    pub fn lost(&self) -> u64 {
        self.ringbuf_full
    }
}

fn site(name: String, c: &[u64], site: usize) -> SiteStats {
    let at = |what: usize| c.get(site * COUNTERS + what).copied().unwrap_or(0);
    SiteStats {
        site: name,
        hits: at(CNT_HITS),
        ringbuf_full: at(CNT_RINGBUF_FULL),
        read_failed: at(CNT_READ_FAILED),
        stack_failed: at(CNT_STACK_FAILED),
    }
}

/// Records the programs committed to the ring: every hit that found room (each hit emits
/// one record; the fork follower counts nothing).
pub fn committed(counters: &[u64]) -> u64 {
    counters.chunks(COUNTERS).map(|c| c[CNT_HITS].saturating_sub(c[CNT_RINGBUF_FULL])).sum()
}

/// Counters per attached probe (entry and return) and for the syscall tracepoints.
pub fn per_site(plan: &Plan, counters: &[u64]) -> Vec<SiteStats> {
    let mut out = Vec::new();
    for p in &plan.probes {
        out.push(site(format!("{} ({})", p.spec.id, p.symbol), counters, p.slot));
        if p.ret.is_some() {
            out.push(site(format!("{} return", p.spec.id), counters, return_site(p.slot)));
        }
    }
    out.push(site("syscalls enter".into(), counters, SITE_SYS_ENTER));
    out.push(site("syscalls exit".into(), counters, SITE_SYS_EXIT));
    out
}

/// The summary printed at the end of a run (and by the TUI's loss line).
pub fn summary(stats: &[SiteStats], delivered: u64, undecodable: u64) -> String {
    let lost: u64 = stats.iter().map(SiteStats::lost).sum();
    let mut s = format!(
        "rdma-trace: {delivered} events delivered, {lost} lost (ring buffer full), {undecodable} undecodable\n"
    );
    s.push_str(&format!(
        "  {:<34} {:>9} {:>9} {:>9} {:>9}\n",
        "probe", "hits", "lost", "read-fail", "no-stack"
    ));
    for st in stats.iter().filter(|s| s.hits > 0 || s.lost() > 0 || s.read_failed > 0) {
        s.push_str(&format!(
            "  {:<34} {:>9} {:>9} {:>9} {:>9}\n",
            st.site, st.hits, st.ringbuf_full, st.read_failed, st.stack_failed
        ));
    }
    s
}
