//! Per-probe accounting, as the user sees it: every hit a program counted is either
//! delivered or lost for a named reason, so `hits = delivered + lost` per probe.

use crate::capture::{LossReason, LossSite};
use crate::plan::select::Plan;
use rdma_trace_common::{
    CNT_BUILD_NS_MAX, CNT_BUILD_NS_SUM, CNT_BUILD_SLOW, CNT_HITS, CNT_NO_SCRATCH, CNT_READ_FAILED,
    CNT_RINGBUF_FULL, CNT_STACK_FAILED, COUNTER_SITES, COUNTERS, EventHeader, KIND_PROBE_ENTRY,
    KIND_PROBE_RETURN, KIND_STEP, KIND_SYS_ENTER, KIND_SYS_EXIT, SITE_FORK, SITE_STEP, SITE_SYS_ENTER,
    SITE_SYS_EXIT, SITE_WATCH, return_site,
};

/// What userspace did with the records it read, per counter site.
#[derive(Clone, Debug)]
pub struct Tally {
    /// Records read from the ring (decodable or not), per site.
    pub read: Vec<u64>,
    /// Events that reached the outputs.
    pub delivered: Vec<u64>,
    /// Records the enricher could not attribute to a planned probe.
    pub enrich_dropped: Vec<u64>,
    /// Records whose body did not decode (their header did).
    pub undecodable: Vec<u64>,
    /// Records too short to carry a header: no site to charge them to.
    pub headerless: u64,
    /// Bytes of every record read, as the programs wrote them (the ring's traffic).
    pub ring_bytes: u64,
}

impl Default for Tally {
    fn default() -> Self {
        Self {
            read: vec![0; COUNTER_SITES],
            delivered: vec![0; COUNTER_SITES],
            enrich_dropped: vec![0; COUNTER_SITES],
            undecodable: vec![0; COUNTER_SITES],
            headerless: 0,
            ring_bytes: 0,
        }
    }
}

/// The counter site a record was produced at, from its header.
pub fn site_of(h: &EventHeader) -> Option<usize> {
    let slot = h.slot as usize;
    let site = match h.kind {
        KIND_PROBE_ENTRY => slot,
        KIND_PROBE_RETURN => return_site(slot),
        KIND_SYS_ENTER => SITE_SYS_ENTER,
        KIND_SYS_EXIT => SITE_SYS_EXIT,
        KIND_STEP => SITE_STEP,
        _ => return None,
    };
    (site < COUNTER_SITES).then_some(site)
}

impl Tally {
    fn bump(v: &mut [u64], h: Option<&EventHeader>) -> bool {
        match h.and_then(site_of) {
            Some(s) => {
                v[s] += 1;
                true
            }
            None => false,
        }
    }

    /// A record was read; `h` is its header if it has one.
    pub fn read(&mut self, h: Option<&EventHeader>) {
        if !Self::bump(&mut self.read, h) {
            self.headerless += 1;
        }
    }
    pub fn delivered(&mut self, h: &EventHeader) {
        Self::bump(&mut self.delivered, Some(h));
    }
    pub fn enrich_dropped(&mut self, h: &EventHeader) {
        Self::bump(&mut self.enrich_dropped, Some(h));
    }
    pub fn undecodable(&mut self, h: Option<&EventHeader>) {
        Self::bump(&mut self.undecodable, h);
    }

    /// Records the programs committed that the reader has not read yet. The fork follower
    /// and the in-kernel watch count hits but write no record.
    pub fn pending(&self, counters: &[u64]) -> u64 {
        (0..COUNTER_SITES)
            .filter(|s| ![SITE_FORK, SITE_WATCH].contains(s))
            .map(|s| {
                let at = |w: usize| counters.get(s * COUNTERS + w).copied().unwrap_or(0);
                let committed = at(CNT_HITS).saturating_sub(at(CNT_RINGBUF_FULL) + at(CNT_NO_SCRATCH));
                committed.saturating_sub(self.read[s])
            })
            .sum()
    }
}

/// One probe's (or tracepoint's) account.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SiteStats {
    pub site: String,
    /// Every time the probe fired: the runs its program counted, plus `kernel_missed`.
    pub hits: u64,
    pub delivered: u64,
    /// Lost: the kernel did not run the program (the kprobe's missed count: a return
    /// probe out of instances, or the probe re-entered).
    pub kernel_missed: u64,
    /// Lost: the ring buffer was full.
    pub ringbuf_full: u64,
    /// Lost: no scratch record (the per-CPU scratch lookup failed).
    pub no_scratch: u64,
    /// Lost: counted by the program but never read (still being written when the reader
    /// gave up at shutdown). Negative would mean more records than hits: a counting bug.
    pub held: i64,
    /// Lost: the enricher could not attribute the record to a planned probe.
    pub enrich_dropped: u64,
    /// Lost: the record did not decode.
    pub undecodable: u64,
    /// Kept with a field missing: a kernel read failed.
    pub read_failed: u64,
    /// Kept without their kernel stack.
    pub stack_failed: u64,
    /// Time spent building records before writing them (ns): largest, total, over 1 ms.
    pub build_ns_max: u64,
    pub build_ns_sum: u64,
    pub build_slow: u64,
    /// Of `delivered`, what each output left out because it fell behind (output name,
    /// count): delivered = what that output wrote + what it left out.
    pub left_out: Vec<(String, u64)>,
}

impl SiteStats {
    pub fn lost(&self) -> u64 {
        self.loss_reasons().iter().map(|(_, n)| n).sum()
    }

    /// The loss reasons with their counts, the non-zero ones.
    pub fn loss_reasons(&self) -> Vec<(LossReason, u64)> {
        [
            (LossReason::MissedByKernel, self.kernel_missed),
            (LossReason::RingFull, self.ringbuf_full),
            (LossReason::NoScratch, self.no_scratch),
            (LossReason::HeldPastShutdown, self.held.max(0) as u64),
            (LossReason::DroppedByEnricher, self.enrich_dropped),
            (LossReason::Undecodable, self.undecodable),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect()
    }
}

impl SiteStats {
    /// This account as a capture records it. `live`: mid-run, records counted but not read
    /// yet are in flight, not lost.
    pub fn count(&self, live: bool) -> crate::capture::SiteCount {
        let mut lost: std::collections::BTreeMap<LossReason, u64> = self.loss_reasons().into_iter().collect();
        let mut in_flight = 0;
        if live {
            in_flight = lost.remove(&LossReason::HeldPastShutdown).unwrap_or(0);
        }
        crate::capture::SiteCount {
            site: LossSite::Probe(self.site.clone()),
            hits: self.hits,
            delivered: self.delivered,
            in_flight,
            lost,
        }
    }
}

fn site(name: String, c: &[u64], t: &Tally, missed: Option<&[u64]>, site: usize) -> SiteStats {
    let at = |what: usize| c.get(site * COUNTERS + what).copied().unwrap_or(0);
    let (hits, ringbuf_full, no_scratch) = (at(CNT_HITS), at(CNT_RINGBUF_FULL), at(CNT_NO_SCRATCH));
    let read = t.read.get(site).copied().unwrap_or(0);
    let kernel_missed = missed.and_then(|m| m.get(site)).copied().unwrap_or(0);
    SiteStats {
        site: name,
        hits: hits + kernel_missed,
        kernel_missed,
        delivered: t.delivered.get(site).copied().unwrap_or(0),
        ringbuf_full,
        no_scratch,
        held: hits as i64 - ringbuf_full as i64 - no_scratch as i64 - read as i64,
        enrich_dropped: t.enrich_dropped.get(site).copied().unwrap_or(0),
        undecodable: t.undecodable.get(site).copied().unwrap_or(0),
        read_failed: at(CNT_READ_FAILED),
        stack_failed: at(CNT_STACK_FAILED),
        build_ns_max: at(CNT_BUILD_NS_MAX),
        build_ns_sum: at(CNT_BUILD_NS_SUM),
        build_slow: at(CNT_BUILD_SLOW),
        left_out: Vec::new(),
    }
}

/// The name of a probe's row in the account: its entry ("umem_get (ib_umem_get)") or its
/// return ("umem_get return"). One definition for the table and for what outputs left out.
pub fn probe_row(id: &str, symbol: &str, is_return: bool) -> String {
    if is_return { format!("{id} return") } else { format!("{id} ({symbol})") }
}
pub const SYSCALLS_ENTER_ROW: &str = "syscalls enter";
pub const SYSCALLS_EXIT_ROW: &str = "syscalls exit";
pub const STEPS_ROW: &str = "companion steps (rdma_trace_step)";

/// The account row an event was counted under.
pub fn row_of(ev: &crate::event::Event) -> String {
    use crate::event::EventKind::*;
    match ev.kind {
        SyscallEnter => SYSCALLS_ENTER_ROW.into(),
        SyscallExit => SYSCALLS_EXIT_ROW.into(),
        Entry => probe_row(ev.name.as_str(), ev.symbol.as_deref().unwrap_or("?"), false),
        Return => probe_row(ev.name.as_str(), "", true),
    }
}

/// Accounts per attached probe (entry and return) and for the syscall tracepoints.
/// `missed`: the kernel's per-site missed counts, where it can tell them.
pub fn per_site(plan: &Plan, counters: &[u64], tally: &Tally, missed: Option<&[u64]>) -> Vec<SiteStats> {
    let mut out = Vec::new();
    for p in &plan.probes {
        let id = p.spec.id.as_str();
        out.push(site(probe_row(id, p.symbol, false), counters, tally, missed, p.slot));
        if p.ret.is_some() {
            out.push(site(probe_row(id, p.symbol, true), counters, tally, missed, return_site(p.slot)));
        }
    }
    out.push(site(SYSCALLS_ENTER_ROW.into(), counters, tally, None, SITE_SYS_ENTER));
    out.push(site(SYSCALLS_EXIT_ROW.into(), counters, tally, None, SITE_SYS_EXIT));
    if counters.get(SITE_STEP * COUNTERS + CNT_HITS).is_some_and(|&n| n > 0) {
        out.push(site(STEPS_ROW.into(), counters, tally, None, SITE_STEP));
    }
    out
}

/// Forks of watched processes, and children that could not be watched (table full).
pub fn forks(counters: &[u64]) -> (u64, u64) {
    let at = |w: usize| counters.get(SITE_FORK * COUNTERS + w).copied().unwrap_or(0);
    (at(CNT_HITS), at(CNT_NO_SCRATCH))
}

/// Verbs users the kernel's watch added by their first verbs entry, and those it could
/// not add (table full).
pub fn watches(counters: &[u64]) -> (u64, u64) {
    let at = |w: usize| counters.get(SITE_WATCH * COUNTERS + w).copied().unwrap_or(0);
    (at(CNT_HITS), at(CNT_NO_SCRATCH))
}

/// One eBPF program's figures from the kernel (`bpf_prog_info`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgramCost {
    pub name: String,
    /// Runs and their total time: counted only while `kernel.bpf_stats_enabled` is on.
    pub run_cnt: u64,
    pub run_time_ns: u64,
    /// Runs the kernel skipped because another BPF program was running on that CPU: their
    /// events never reached the program, so no per-probe counter saw them.
    pub recursion_misses: u64,
}

/// The runs each program's kernel skipped, as account rows (`program kprobe_entry`: lost,
/// skipped by the kernel), for programs that had any.
pub fn program_counts(programs: &[ProgramCost]) -> Vec<crate::capture::SiteCount> {
    (programs.iter().filter(|p| p.recursion_misses > 0))
        .map(|p| crate::capture::SiteCount {
            site: LossSite::Program(p.name.clone()),
            hits: p.recursion_misses,
            lost: [(LossReason::SkippedByKernel, p.recursion_misses)].into(),
            ..Default::default()
        })
        .collect()
}

/// The account of a whole run, printed at its end.
#[derive(Clone, Debug, Default)]
pub struct RunAccount {
    pub sites: Vec<SiteStats>,
    pub headerless: u64,
    /// Records read from the ring, and their bytes.
    pub ring_records: u64,
    pub ring_bytes: u64,
    /// Kernel stacks by id (`--stack-ids`): distinct stacks, and ids the map did not have.
    pub stacks_by_id: Option<(usize, u64)>,
    /// Calls the correlator let go while open (too deep on one thread): no latency for
    /// their returns.
    pub calls_let_go: u64,
    /// Records the reader found still being written, and its longest wait (ns).
    pub reader_waits: u64,
    pub reader_longest_wait_ns: u64,
    /// Records reserved but never committed at shutdown, and records blocked behind them.
    pub uncommitted_at_exit: u64,
    pub blocked_at_exit: u64,
    pub forks: u64,
    pub forks_unwatched: u64,
    /// Verbs users (the daemon's) the kernel's watch added at their first verbs entry, and
    /// those the table refused: tries, not processes (a refused process is tried again at
    /// its next verbs entry).
    pub watches: u64,
    pub watches_failed: u64,
    pub programs: Vec<ProgramCost>,
    /// False where the kernel cannot report kprobe missed counts (before 6.7).
    pub kernel_missed_known: bool,
}

impl RunAccount {
    /// What output `name` left out, per account row (`row_of`), into each row's account.
    pub fn note_left_out(&mut self, name: &str, rows: &std::collections::BTreeMap<String, u64>) {
        for (row, &n) in rows.iter().filter(|(_, n)| **n > 0) {
            let at = match self.sites.iter().position(|s| &s.site == row) {
                Some(i) => i,
                None => {
                    // Never silent: a row the account does not have is shown on its own.
                    self.sites.push(SiteStats { site: row.clone(), ..Default::default() });
                    self.sites.len() - 1
                }
            };
            self.sites[at].left_out.push((name.to_string(), n));
        }
    }

    pub fn delivered(&self) -> u64 {
        self.sites.iter().map(|s| s.delivered).sum()
    }

    /// The account as a capture records it, row by row: each probe, then what no probe's
    /// counters saw — a program's runs the kernel skipped, ring records with no header —, so
    /// that the rows' losses add up to `lost()` wherever they are shown.
    pub fn counts(&self) -> Vec<crate::capture::SiteCount> {
        let mut out: Vec<_> = self.sites.iter().map(|s| s.count(false)).collect();
        out.extend(program_counts(&self.programs));
        if self.headerless > 0 {
            out.push(crate::capture::SiteCount {
                site: LossSite::Headerless,
                hits: self.headerless,
                lost: [(LossReason::Undecodable, self.headerless)].into(),
                ..Default::default()
            });
        }
        out
    }

    pub fn lost(&self) -> u64 {
        self.sites.iter().map(SiteStats::lost).sum::<u64>() + self.headerless + self.kernel_misses()
    }

    /// Program runs the kernel skipped (not attributable to one probe: programs are shared).
    pub fn kernel_misses(&self) -> u64 {
        self.programs.iter().map(|p| p.recursion_misses).sum()
    }

    /// The summary: totals, the loss by reason, then one row per probe that saw anything,
    /// then what the reader, the kernel and the programs reported.
    pub fn summary(&self) -> String {
        let mut s = self.totals();
        s.push_str(&self.table());
        s.push_str(&self.notes());
        s
    }

    /// Every reason anything was lost, summed over the probes, in the order first seen.
    fn reasons(&self) -> Vec<(String, u64)> {
        let mut reasons: Vec<(String, u64)> = Vec::new();
        for (r, n) in self.sites.iter().flat_map(SiteStats::loss_reasons) {
            match reasons.iter_mut().find(|(x, _)| x == r.as_str()) {
                Some((_, m)) => *m += n,
                None => reasons.push((r.to_string(), n)),
            }
        }
        if self.headerless > 0 {
            reasons.push(("without a header".into(), self.headerless));
        }
        if self.kernel_misses() > 0 {
            reasons.push((
                "skipped by the kernel (another BPF program was running on the CPU)".into(),
                self.kernel_misses(),
            ));
        }
        reasons
    }

    /// "rdma-trace: N events delivered, M lost (by reason)".
    fn totals(&self) -> String {
        let mut s = format!("rdma-trace: {} events delivered, {} lost", self.delivered(), self.lost());
        let reasons = self.reasons();
        if !reasons.is_empty() {
            let r: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
            s.push_str(&format!(" ({})", r.join(", ")));
        }
        s.push('\n');
        s
    }

    /// One row per probe that saw anything, with its loss reasons under it.
    fn table(&self) -> String {
        let width = self.sites.iter().map(|s| s.site.chars().count()).max().unwrap_or(0).max(34);
        let mut s = format!(
            "  {:<width$} {:>9} {:>9} {:>7} {:>9} {:>8} {:>11}\n",
            "probe", "hits", "delivered", "lost", "read-fail", "no-stack", "build max"
        );
        let shown =
            |s: &&SiteStats| s.hits > 0 || s.lost() > 0 || s.read_failed > 0 || !s.left_out.is_empty();
        for st in self.sites.iter().filter(shown) {
            s.push_str(&format!(
                "  {:<width$} {:>9} {:>9} {:>7} {:>9} {:>8} {:>9}µs\n",
                st.site,
                st.hits,
                st.delivered,
                st.lost(),
                st.read_failed,
                st.stack_failed,
                st.build_ns_max / 1000
            ));
            let reasons = st.loss_reasons();
            if !reasons.is_empty() {
                let r: Vec<String> = reasons.iter().map(|(r, n)| format!("{r} {n}")).collect();
                s.push_str(&format!("  {:<width$} lost: {}\n", "", r.join(", ")));
            }
            for (output, n) in &st.left_out {
                s.push_str(&format!(
                    "  {:<width$} delivered, then left out by the {output} output (it fell behind): {n}\n",
                    ""
                ));
            }
            if st.held < 0 {
                s.push_str(&format!(
                    "  {:<width$} {} more records read than the program counted (counter error)\n",
                    "", -st.held
                ));
            }
        }
        s
    }

    /// What the reader waited on, what was left at exit, the programs' own figures.
    fn notes(&self) -> String {
        let mut s = String::new();
        if self.reader_waits > 0 {
            s.push_str(&format!(
                "  the reader waited on {} records still being written (longest {} µs)\n",
                self.reader_waits,
                self.reader_longest_wait_ns / 1000
            ));
        }
        if self.uncommitted_at_exit > 0 {
            s.push_str(&format!(
                "  at exit {} records were never committed ({} committed records behind them could not be read)\n",
                self.uncommitted_at_exit, self.blocked_at_exit
            ));
        }
        if self.ring_records > 0 {
            s.push_str(&format!(
                "  ring: {} records, {} bytes ({} bytes a record)\n",
                self.ring_records,
                self.ring_bytes,
                self.ring_bytes / self.ring_records
            ));
        }
        if self.calls_let_go > 0 {
            s.push_str(&format!(
                "  {} calls were still open {} deep on their thread and were let go: their returns have no latency\n",
                self.calls_let_go,
                crate::pipeline::correlate::calls::MAX_OPEN
            ));
        }
        if let Some((distinct, failed)) = self.stacks_by_id {
            s.push_str(&format!(
                "  stacks by id: {distinct} distinct; {failed} events named an id the map did not have (they have no stack)\n"
            ));
        }
        for p in &self.programs {
            if p.recursion_misses > 0 {
                s.push_str(&format!(
                    "  program {}: {} runs skipped by the kernel\n",
                    p.name, p.recursion_misses
                ));
            }
            if p.run_cnt > 0 && p.run_time_ns > 0 {
                s.push_str(&format!(
                    "  program {}: {} runs, {} ns per run (kernel BPF stats)\n",
                    p.name,
                    p.run_cnt,
                    p.run_time_ns / p.run_cnt
                ));
            }
        }
        if !self.kernel_missed_known {
            s.push_str("  this kernel does not report kprobe missed counts (6.7+): probe hits the kernel skipped are not counted\n");
        }
        if self.forks_unwatched > 0 {
            s.push_str(&format!(
                "  {} of {} forked children could not be watched (watch table full): their syscalls are not seen\n",
                self.forks_unwatched, self.forks
            ));
        }
        if self.watches > 0 {
            s.push_str(&format!(
                "  {} verbs processes watched from their first verbs entry (their syscalls)\n",
                self.watches
            ));
        }
        if self.watches_failed > 0 {
            s.push_str(&format!(
                "  {} tries to watch a verbs process failed (watch table full): their syscalls are not seen\n",
                self.watches_failed
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(kind: u8, slot: u8) -> EventHeader {
        EventHeader {
            ts_ns: 0,
            tgid: 1,
            tid: 1,
            comm: [0; 16],
            cpu: 0,
            kind,
            slot,
            fail_mask: 0,
            skip_mask: 0,
            cgroup_id: 0,
        }
    }

    #[test]
    fn every_hit_is_delivered_or_lost_for_a_reason() {
        let mut c = vec![0u64; COUNTER_SITES * COUNTERS];
        // Slot 2 entry: 10 hits, 2 ring full, 1 without scratch; 7 read, of which one
        // the enricher dropped and one did not decode; 5 delivered.
        c[2 * COUNTERS + CNT_HITS] = 10;
        c[2 * COUNTERS + CNT_RINGBUF_FULL] = 2;
        c[2 * COUNTERS + CNT_NO_SCRATCH] = 1;
        let mut t = Tally::default();
        let h = hdr(KIND_PROBE_ENTRY, 2);
        for _ in 0..6 {
            t.read(Some(&h));
        }
        for _ in 0..4 {
            t.delivered(&h);
        }
        t.enrich_dropped(&h);
        t.undecodable(Some(&h));
        assert_eq!(t.pending(&c), 1, "one committed record not read yet");
        let st = site("x".into(), &c, &t, None, 2);
        assert_eq!(st.held, 1);
        assert_eq!(st.hits, st.delivered + st.lost());
        t.read(Some(&h));
        t.delivered(&h);
        assert_eq!(t.pending(&c), 0);
        let st = site("x".into(), &c, &t, None, 2);
        assert_eq!((st.held, st.lost(), st.delivered), (0, 5, 5));
        let acct = RunAccount { sites: vec![st], kernel_missed_known: true, ..Default::default() };
        let text = acct.summary();
        assert!(
            text.starts_with(
                "rdma-trace: 5 events delivered, 5 lost (2 ring full, 1 no scratch, 1 dropped by the enricher, 1 undecodable)"
            ),
            "{text}"
        );
        assert!(
            text.contains("lost: ring full 2, no scratch 1, dropped by the enricher 1, undecodable 1"),
            "{text}"
        );
    }

    #[test]
    fn runs_the_kernel_missed_are_hits_and_losses_of_their_probe() {
        let mut c = vec![0u64; COUNTER_SITES * COUNTERS];
        let ret = return_site(4);
        c[ret * COUNTERS + CNT_HITS] = 3;
        let mut t = Tally::default();
        let h = hdr(KIND_PROBE_RETURN, 4);
        for _ in 0..3 {
            t.read(Some(&h));
            t.delivered(&h);
        }
        let mut missed = vec![0u64; COUNTER_SITES];
        missed[ret] = 2;
        let st = site("comp_event_read return".into(), &c, &t, Some(&missed), ret);
        assert_eq!((st.hits, st.delivered, st.lost(), st.held), (5, 3, 2, 0));
        let acct = RunAccount { sites: vec![st], kernel_missed_known: true, ..Default::default() };
        let text = acct.summary();
        assert!(
            text.starts_with("rdma-trace: 3 events delivered, 2 lost (2 missed by the kernel)\n"),
            "{text}"
        );
        let unknown = RunAccount { kernel_missed_known: false, ..acct };
        assert!(unknown.summary().contains("does not report kprobe missed counts"));
    }

    #[test]
    fn forks_and_watches_write_no_record_to_wait_for() {
        let mut c = vec![0u64; COUNTER_SITES * COUNTERS];
        c[SITE_FORK * COUNTERS + CNT_HITS] = 2;
        c[SITE_WATCH * COUNTERS + CNT_HITS] = 3;
        c[SITE_SYS_EXIT * COUNTERS + CNT_HITS] = 1;
        let mut t = Tally::default();
        assert_eq!(t.pending(&c), 1, "only the syscall's record is awaited");
        t.read(Some(&hdr(KIND_SYS_EXIT, 0)));
        assert_eq!(t.pending(&c), 0, "a shutdown's drain does not wait out its deadline for them");
    }

    #[test]
    fn the_kernels_watches_and_its_refusals_are_said() {
        let mut c = vec![0u64; COUNTER_SITES * COUNTERS];
        c[SITE_WATCH * COUNTERS + CNT_HITS] = 3;
        c[SITE_WATCH * COUNTERS + CNT_NO_SCRATCH] = 1;
        c[SITE_FORK * COUNTERS + CNT_NO_SCRATCH] = 7;
        let (watches, watches_failed) = watches(&c);
        assert_eq!((watches, watches_failed), (3, 1), "its own site, not the fork follower's");
        let text =
            RunAccount { watches, watches_failed, kernel_missed_known: true, ..Default::default() }.summary();
        assert!(text.contains("  3 verbs processes watched from their first verbs entry"), "{text}");
        assert!(text.contains("  1 tries to watch a verbs process failed (watch table full)"), "{text}");
        let quiet = RunAccount { kernel_missed_known: true, ..Default::default() }.summary();
        assert!(!quiet.contains("watch"), "nothing said by a run that watches nothing: {quiet}");
    }

    #[test]
    fn zero_lost_only_when_nothing_was_lost() {
        let mut c = vec![0u64; COUNTER_SITES * COUNTERS];
        c[SITE_SYS_EXIT * COUNTERS + CNT_HITS] = 3;
        let mut t = Tally::default();
        let h = hdr(KIND_SYS_EXIT, 0);
        for _ in 0..3 {
            t.read(Some(&h));
            t.delivered(&h);
        }
        let acct = RunAccount {
            sites: vec![site("s".into(), &c, &t, None, SITE_SYS_EXIT)],
            kernel_missed_known: true,
            ..Default::default()
        };
        assert!(acct.summary().starts_with("rdma-trace: 3 events delivered, 0 lost\n"));
        // One record still held at exit: no longer "0 lost".
        c[SITE_SYS_EXIT * COUNTERS + CNT_HITS] = 4;
        let acct = RunAccount {
            sites: vec![site("s".into(), &c, &t, None, SITE_SYS_EXIT)],
            kernel_missed_known: true,
            ..Default::default()
        };
        assert!(
            acct.summary().starts_with("rdma-trace: 3 events delivered, 1 lost (1 held past shutdown)\n")
        );
        t.read(None);
        assert_eq!(t.headerless, 1);
    }

    #[test]
    fn what_an_output_left_out_is_shown_under_the_row_that_delivered_it() {
        let row = |site: &str, delivered: u64| SiteStats {
            site: site.into(),
            hits: delivered,
            delivered,
            ..Default::default()
        };
        let mut acct = RunAccount {
            sites: vec![
                row("umem_get (ib_umem_get)", 4),
                row("umem_get return", 4),
                row(SYSCALLS_ENTER_ROW, 90),
            ],
            kernel_missed_known: true,
            ..Default::default()
        };
        let ev = |kind: &str, symbol: &str| -> crate::event::Event {
            serde_json::from_str(&format!(
                r#"{{"v":1,"ts_ns":1,"kind":"{kind}","name":"umem_get",{symbol}"path":"pin","pid":1,"tid":1,"comm":"x","cpu":0}}"#
            ))
            .unwrap()
        };
        let mut capture = std::collections::BTreeMap::new();
        for e in [ev("entry", r#""symbol":"ib_umem_get","#), ev("return", r#""symbol":"ib_umem_get","#)] {
            *capture.entry(row_of(&e)).or_default() += 1;
        }
        capture.insert(SYSCALLS_ENTER_ROW.to_string(), 40);
        acct.note_left_out("capture", &capture);
        // A row the account does not have is shown on its own, never dropped.
        acct.note_left_out("text", &[("nosuch (x)".to_string(), 2)].into_iter().collect());
        let text = acct.summary();
        let lines: Vec<&str> = text.lines().collect();
        let under = |r: &str| {
            let i = lines
                .iter()
                .position(|l| l.trim_start().starts_with(r))
                .unwrap_or_else(|| panic!("{r}: {text}"));
            lines[i + 1].trim().to_string()
        };
        let said =
            |o: &str, n: u64| format!("delivered, then left out by the {o} output (it fell behind): {n}");
        assert_eq!(under("umem_get (ib_umem_get)"), said("capture", 1), "{text}");
        assert_eq!(under("umem_get return"), said("capture", 1), "{text}");
        assert_eq!(under(SYSCALLS_ENTER_ROW), said("capture", 40), "{text}");
        assert_eq!(under("nosuch (x)"), said("text", 2), "{text}");
        // Leaving out is not a loss of the tracer's: the totals are unchanged.
        assert!(text.starts_with("rdma-trace: 98 events delivered, 0 lost\n"), "{text}");
    }

    /// Runs a program's kernel skipped and records with no header are rows of the account
    /// as a capture records it: its rows' losses add up to the total the first line says.
    #[test]
    fn every_loss_has_a_row() {
        let prog = |name: &str, misses| ProgramCost {
            name: name.into(),
            recursion_misses: misses,
            ..Default::default()
        };
        let acct = RunAccount {
            programs: vec![prog("kprobe_entry", 5), prog("kprobe_return", 0)],
            headerless: 2,
            kernel_missed_known: true,
            ..Default::default()
        };
        let rows = acct.counts();
        let sites: Vec<String> = rows.iter().map(|r| r.site.to_string()).collect();
        assert_eq!(sites, ["program kprobe_entry", "ring records without a header"]);
        assert_eq!(rows[1].site, LossSite::Headerless);
        assert_eq!(rows[0].lost.get(&LossReason::SkippedByKernel), Some(&5));
        let said: u64 = rows.iter().flat_map(|r| r.lost.values()).sum();
        assert_eq!((said, acct.lost()), (7, 7));
    }
}
