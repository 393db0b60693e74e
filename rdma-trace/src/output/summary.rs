//! The run's account as the user reads it at the end: totals, the loss by reason, a row per
//! probe, then what the reader, the kernel and the programs reported.

use crate::account::{RunAccount, SiteStats};

impl RunAccount {
    /// The summary: totals, the loss by reason, then one row per probe that saw anything,
    /// then what the reader, the kernel and the programs reported.
    pub(crate) fn summary(&self) -> String {
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
        let l = &self.links;
        if l.total() > 0 {
            s.push_str(&format!(
                "  links: {} held ({} kernel entries, {} returns through tracefs, {} user-space, {} tracepoints)\n",
                l.total(),
                l.kernel,
                l.returns,
                l.user,
                l.tracepoints
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
        if let Some(distinct) = self.stacks_by_id {
            s.push_str(&format!(
                "  stacks by id: {distinct} distinct (an id the map no longer had counts under no-stack)\n"
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
    use crate::account::*;
    use crate::capture::{LossReason, LossSite};
    use rdma_trace_common::*;

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

    /// A counting run reads no records: its hits are delivered to the kernel's counts,
    /// except those a full table or an unseen partner kept out, which are said as losses.
    #[test]
    fn a_counting_runs_uncounted_hits_are_losses_with_their_reason() {
        use crate::plan::{catalog::ProbeId, select::Plan};
        let mut c = vec![0u64; COUNTER_ENTRIES];
        c[COUNTERS + CNT_HITS] = 6;
        c[COUNTERS + CNT_NOT_JOINED] = 3;
        c[2 * COUNTERS + CNT_HITS] = 9;
        c[2 * COUNTERS + CNT_COUNT_FULL] = 2;
        let plan = Plan {
            probes: vec![
                crate::plan::select::Planned::for_test(ProbeId::UmemRelease, 1),
                crate::plan::select::Planned::for_test(ProbeId::CompHandler, 2),
            ],
            counted: true,
            ..Default::default()
        };
        let sites = per_site(&plan, &c, &Tally::default(), None);
        let got: Vec<_> = sites[..2].iter().map(|s| (s.hits, s.delivered, s.lost(), s.held)).collect();
        assert_eq!(got, [(6, 3, 3, 0), (9, 7, 2, 0)]);
        let count = sites[0].count(false);
        assert_eq!(count.lost.get(&LossReason::NotJoined), Some(&3));
        let acct = RunAccount { sites, kernel_missed_known: true, ..Default::default() };
        let text = acct.summary();
        assert!(
            text.starts_with("rdma-trace: 10 events delivered, 5 lost (3 not joined, 2 counting table full)"),
            "{text}"
        );
    }

    /// A stack the kernel kept by id that the map no longer had is shown where the
    /// kernel's failed captures are: the probe's no-stack column. It is no loss.
    #[test]
    fn a_stack_lost_by_id_counts_under_no_stack() {
        let mut c = vec![0u64; COUNTER_ENTRIES];
        c[2 * COUNTERS + CNT_HITS] = 2;
        c[2 * COUNTERS + CNT_STACK_FAILED] = 1;
        let mut t = Tally::default();
        let h = hdr(KIND_PROBE_ENTRY, 2);
        for _ in 0..2 {
            t.read(Some(&h));
            t.delivered(&h);
        }
        t.stack_lost(Some(&h));
        let st = site("x".into(), &c, &t, None, 2);
        assert_eq!((st.stack_failed, st.lost(), st.delivered), (2, 0, 2));
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
    fn the_links_held_are_said_by_kind_and_not_when_there_were_none() {
        use crate::account::Links;
        let links = Links { kernel: 20, returns: 18, user: 10, tracepoints: 6 };
        let text = RunAccount { links, kernel_missed_known: true, ..Default::default() }.summary();
        let line =
            "  links: 54 held (20 kernel entries, 18 returns through tracefs, 10 user-space, 6 tracepoints)";
        assert!(text.contains(line), "{text}");
        let none = RunAccount { kernel_missed_known: true, ..Default::default() }.summary();
        assert!(!none.contains("links:"), "{none}");
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
