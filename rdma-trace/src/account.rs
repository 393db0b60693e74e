//! The run's accounting: every hit a program counted is either delivered or lost for a
//! named reason, so `hits = delivered + lost` per probe. The live edge fills it (the
//! programs' counters, what the reader did with each record); the outputs read it
//! (`output::summary` writes it for people, the capture's stats and trailer for files).

use crate::capture::{LossReason, LossSite};
use crate::plan::select::Plan;
use rdma_trace_common::{
    CNT_BUILD_NS_MAX, CNT_BUILD_NS_SUM, CNT_BUILD_SLOW, CNT_COUNT_FULL, CNT_HITS, CNT_NO_SCRATCH,
    CNT_NOT_JOINED, CNT_READ_FAILED, CNT_RINGBUF_FULL, CNT_STACK_FAILED, COUNTER_SITES, COUNTERS,
    EventHeader, KIND_PROBE_ENTRY, KIND_PROBE_RETURN, KIND_STEP, KIND_SYS_ENTER, KIND_SYS_EXIT, SITE_FORK,
    SITE_STEP, SITE_SYS_ENTER, SITE_SYS_EXIT, SITE_WATCH, return_site,
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
    /// Entries whose stack went by id and the map no longer had (`--stack-ids`): shown
    /// with the kernel's failed stack captures, under no-stack.
    pub stack_lost: Vec<u64>,
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
            stack_lost: vec![0; COUNTER_SITES],
        }
    }
}

/// The counter site a record was produced at, from its header.
pub(crate) fn site_of(h: &EventHeader) -> Option<usize> {
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
    /// A record was delivered to the outputs; `h` is its header.
    pub fn delivered(&mut self, h: &EventHeader) {
        Self::bump(&mut self.delivered, Some(h));
    }
    pub(crate) fn enrich_dropped(&mut self, h: &EventHeader) {
        Self::bump(&mut self.enrich_dropped, Some(h));
    }
    pub(crate) fn undecodable(&mut self, h: Option<&EventHeader>) {
        Self::bump(&mut self.undecodable, h);
    }
    pub(crate) fn stack_lost(&mut self, h: Option<&EventHeader>) {
        Self::bump(&mut self.stack_lost, h);
    }

    /// Records the programs committed that the reader has not read yet. The fork follower
    /// and the in-kernel watch count hits but write no record.
    /// Records read from the ring, every site's and the headerless ones.
    pub(crate) fn records(&self) -> u64 {
        self.read.iter().sum::<u64>() + self.headerless
    }

    pub(crate) fn pending(&self, counters: &[u64]) -> u64 {
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
    /// Counting runs: a table of the counts was full; the hit or its charge went uncounted.
    pub count_full: u64,
    /// Counting runs: the hit's partner (the CQ's making, the pin's start, the completion
    /// a wakeup takes) came before the run; its charge went to no one.
    pub not_joined: u64,
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
    /// Records of this site lost, for every reason.
    pub fn lost(&self) -> u64 {
        self.loss_reasons().iter().map(|(_, n)| n).sum()
    }

    /// The loss reasons with their counts, the non-zero ones.
    pub(crate) fn loss_reasons(&self) -> Vec<(LossReason, u64)> {
        [
            (LossReason::MissedByKernel, self.kernel_missed),
            (LossReason::RingFull, self.ringbuf_full),
            (LossReason::NoScratch, self.no_scratch),
            (LossReason::CountingTableFull, self.count_full),
            (LossReason::NotJoined, self.not_joined),
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
    pub(crate) fn count(&self, live: bool) -> crate::capture::SiteCount {
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

pub(crate) fn site(name: String, c: &[u64], t: &Tally, missed: Option<&[u64]>, site: usize) -> SiteStats {
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
        count_full: at(CNT_COUNT_FULL),
        not_joined: at(CNT_NOT_JOINED),
        held: hits as i64 - ringbuf_full as i64 - no_scratch as i64 - read as i64,
        enrich_dropped: t.enrich_dropped.get(site).copied().unwrap_or(0),
        undecodable: t.undecodable.get(site).copied().unwrap_or(0),
        read_failed: at(CNT_READ_FAILED),
        stack_failed: at(CNT_STACK_FAILED) + t.stack_lost.get(site).copied().unwrap_or(0),
        build_ns_max: at(CNT_BUILD_NS_MAX),
        build_ns_sum: at(CNT_BUILD_NS_SUM),
        build_slow: at(CNT_BUILD_SLOW),
        left_out: Vec::new(),
    }
}

/// The name of a probe's row in the account: its entry ("umem_get (ib_umem_get)") or its
/// return ("umem_get return"). One definition for the table and for what outputs left out.
pub(crate) fn probe_row(id: &str, symbol: &str, is_return: bool) -> String {
    if is_return { format!("{id} return") } else { format!("{id} ({symbol})") }
}
pub(crate) const SYSCALLS_ENTER_ROW: &str = "syscalls enter";
pub(crate) const SYSCALLS_EXIT_ROW: &str = "syscalls exit";
/// The account row of the companion's step records.
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
    // A counting run's hits go to the kernel's counts, not the ring: each is delivered there.
    let counted = |mut s: SiteStats| {
        if plan.counted {
            let lost = s.ringbuf_full + s.no_scratch + s.count_full + s.not_joined;
            s.delivered = (s.hits - s.kernel_missed).saturating_sub(lost);
            s.held = 0;
        }
        s
    };
    for p in &plan.probes {
        let id = p.spec.id.as_str();
        out.push(counted(site(probe_row(id, p.symbol, false), counters, tally, missed, p.slot)));
        if p.ret.is_some() {
            let ret = site(probe_row(id, p.symbol, true), counters, tally, missed, return_site(p.slot));
            out.push(counted(ret));
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
pub(crate) fn forks(counters: &[u64]) -> (u64, u64) {
    let at = |w: usize| counters.get(SITE_FORK * COUNTERS + w).copied().unwrap_or(0);
    (at(CNT_HITS), at(CNT_NO_SCRATCH))
}

/// Verbs users the kernel's watch added by their first verbs entry, and those it could
/// not add (table full).
pub(crate) fn watches(counters: &[u64]) -> (u64, u64) {
    let at = |w: usize| counters.get(SITE_WATCH * COUNTERS + w).copied().unwrap_or(0);
    (at(CNT_HITS), at(CNT_NO_SCRATCH))
}

/// One eBPF program's figures from the kernel (`bpf_prog_info`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ProgramCost {
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
pub(crate) fn program_counts(programs: &[ProgramCost]) -> Vec<crate::capture::SiteCount> {
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
pub(crate) struct RunAccount {
    pub sites: Vec<SiteStats>,
    pub headerless: u64,
    /// Records read from the ring, and their bytes.
    pub ring_records: u64,
    pub ring_bytes: u64,
    /// Kernel stacks by id (`--stack-ids`): the distinct stacks seen.
    pub stacks_by_id: Option<usize>,
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
    /// The links the run held: each is a registration the kernel undoes at detach, one at
    /// a time, which is most of what a stop costs.
    pub links: Links,
}

/// The links a run held, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Links {
    /// Kernel function entries (and returns aya placed).
    pub kernel: usize,
    /// Kernel function returns placed through tracefs.
    pub returns: usize,
    /// User-space probes (libibverbs, the companion's step marker).
    pub user: usize,
    /// Tracepoints (system calls, forks and exits, the catalog's).
    pub tracepoints: usize,
}

impl Links {
    /// All of them.
    pub(crate) fn total(&self) -> usize {
        self.kernel + self.returns + self.user + self.tracepoints
    }
}

impl RunAccount {
    /// What output `name` left out, per account row (`row_of`), into each row's account.
    pub(crate) fn note_left_out(&mut self, name: &str, rows: &std::collections::BTreeMap<String, u64>) {
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

    pub(crate) fn delivered(&self) -> u64 {
        self.sites.iter().map(|s| s.delivered).sum()
    }

    /// The account as a capture records it, row by row: each probe, then what no probe's
    /// counters saw — a program's runs the kernel skipped, ring records with no header —, so
    /// that the rows' losses add up to `lost()` wherever they are shown.
    pub(crate) fn counts(&self) -> Vec<crate::capture::SiteCount> {
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

    pub(crate) fn lost(&self) -> u64 {
        self.sites.iter().map(SiteStats::lost).sum::<u64>() + self.headerless + self.kernel_misses()
    }

    /// Program runs the kernel skipped (not attributable to one probe: programs are shared).
    pub(crate) fn kernel_misses(&self) -> u64 {
        self.programs.iter().map(|p| p.recursion_misses).sum()
    }
}

/// The account row of `site` in `plan` (a probe's entry or return).
pub(crate) fn row_of_site(plan: &Plan, site: usize) -> Option<String> {
    plan.probes.iter().find_map(|p| {
        let id = p.spec.id.as_str();
        if site == p.slot {
            Some(probe_row(id, p.symbol, false))
        } else if p.ret.is_some() && site == return_site(p.slot) {
            Some(probe_row(id, p.symbol, true))
        } else {
            None
        }
    })
}
