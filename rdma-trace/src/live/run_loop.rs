//! The tracer's run: the ring read in bounded batches on one thread, each record through
//! decode → enrich → correlate to the sink (`RunLoop::record`), the timers' ticks and
//! stats between batches (`RunLoop::periodic`), and at shutdown the ring drained until
//! every record the switched-off programs committed is read. One owner of the run's state,
//! borrowed by one branch of the loop at a time.

use super::attach::Loaded;
use super::error::TraceError;
use crate::account::{self, ProgramCost, RunAccount, Tally};
use crate::capture::{self, Loss, SiteCount, Stats};
use crate::capture::{LossReason, LossSite};
use crate::clock::clock_ns;
use crate::event::Event;
use crate::pipeline::correlate::Correlator;
use crate::pipeline::decode;
use crate::pipeline::enrich::Enricher;
use crate::pipeline::fds::FdCache;
use crate::pipeline::ksyms::Ksyms;
use crate::plan::here::Planning;
use crate::sink::Sink;
use crate::source::{AsyncRing, Leftover};
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::MissedTickBehavior;

/// Why the run stopped, and the code to exit with (the traced command's).
pub(crate) struct Stopped {
    pub why: String,
    pub code: i32,
}

/// What the event loop does on its timers besides reading the ring.
enum Periodic {
    /// Every 50 ms: buffering outputs write out.
    Tick,
    /// Every second: the accounting so far (and any new loss).
    Stats,
}

/// CLOCK_MONOTONIC in ns: the clock of the events' `ts_ns`.
pub(super) fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC) as u64
}

/// The loss counts last reported, per probe and reason: a loss notice says what is new.
#[derive(Default)]
struct LossWatch {
    seen: std::collections::HashMap<(LossSite, LossReason), u64>,
}

impl LossWatch {
    fn new_losses(&mut self, ts_ns: u64, counts: &[SiteCount]) -> Vec<Loss> {
        let mut out = Vec::new();
        for c in counts {
            for (reason, n) in &c.lost {
                let before = self.seen.insert((c.site.clone(), reason.clone()), *n).unwrap_or(0);
                if *n > before {
                    out.push(Loss {
                        ts_ns,
                        site: c.site.clone(),
                        reason: reason.clone(),
                        count: n - before,
                        ..Default::default()
                    });
                }
            }
        }
        out
    }
}

/// What a ring record becomes.
#[allow(clippy::large_enum_variant)] // events are nearly every record: not boxed per event
enum Item {
    Event(Event),
    Step(Box<crate::steps::StepRecord>),
}

/// One raw record through decode and enrich, counted in `tally` whatever becomes of it.
fn to_item(b: &[u8], t: &mut Tally, enricher: &mut Enricher) -> Option<Item> {
    let hdr = decode::header(b);
    t.read(hdr.as_ref());
    let Ok(raw) = decode::decode(b) else {
        t.undecodable(hdr.as_ref());
        return None;
    };
    if let decode::Raw::Step { json, .. } = &raw {
        let Some(step) = crate::pipeline::enrich::step(json) else {
            t.undecodable(hdr.as_ref());
            return None;
        };
        t.delivered(raw.header());
        return Some(Item::Step(Box::new(step)));
    }
    let Some(ev) = enricher.event(&raw) else {
        t.enrich_dropped(raw.header());
        return None;
    };
    t.delivered(raw.header());
    Some(Item::Event(ev))
}

/// The entries that show a process using verbs (they run in the process, not a kworker):
/// the daemon's plan marks them so the kernel watches the process's syscalls from the
/// first one (`SlotPlan::watch`), and the run loop knows its verbs users by them.
pub(super) const VERBS_ENTRIES: [crate::event::ProbeId; 4] = {
    use crate::event::ProbeId::*;
    [IbvOpenDevice, UverbsMmap, UmemGet, IbvRegMr]
};

fn uses_verbs(ev: &Event) -> bool {
    ev.kind == crate::event::EventKind::Entry && ev.is_any(&VERBS_ENTRIES)
}

/// The run's state: the pipeline's stages, the tally of every record read, the sink and
/// the first error it gave (which stops the run).
pub(super) struct RunLoop<'a> {
    planning: &'a Planning,
    enricher: Enricher<'a>,
    correlator: Correlator,
    pub(super) tally: Tally,
    sink: &'a mut dyn Sink,
    pub(super) failed: Option<std::io::Error>,
    /// The syscalls of every process seen using verbs are watched (the daemon): the kernel
    /// adds each to the watch table at its first verbs entry; the run loop keeps the verbs
    /// users seen, to take each out of the table once it is gone.
    watch_verbs_users: bool,
    /// A counting run's gone processes, until their counts leave the kernel's maps.
    retiring: super::counted::Retiring,
    users_seen: std::collections::HashSet<u32>,
    /// The kernel's refused watches already said on stderr.
    watch_failed_said: bool,
    /// The loss already said in the stream, per row and reason: what is new is said next.
    losses: LossWatch,
    /// Processes found gone at the last stats tick (see `forget_the_gone`).
    gone_last: std::collections::HashSet<u32>,
    /// Every process an event came from (the daemon: each is let go when gone), and the
    /// last one added (most events follow one of the same process).
    pids_seen: std::collections::HashSet<u32>,
    last_pid: Option<u32>,
    /// Kernel stacks by id (`--stack-ids`), looked up as records name them.
    pub(super) stacks: Option<super::stack_ids::StackIds>,
}

impl<'a> RunLoop<'a> {
    pub(super) fn new(
        planning: &'a Planning,
        ksyms: &'a Ksyms,
        sink: &'a mut dyn Sink,
        watch_verbs_users: bool,
    ) -> Self {
        RunLoop {
            planning,
            enricher: Enricher {
                plan: &planning.plan,
                ksyms,
                fds: FdCache::default(),
                memlock: Default::default(),
                frames: Default::default(),
                cgroups: Default::default(),
            },
            correlator: Correlator::default(),
            tally: Tally::default(),
            sink,
            failed: None,
            watch_verbs_users,
            retiring: Default::default(),
            users_seen: Default::default(),
            watch_failed_said: false,
            losses: LossWatch::default(),
            gone_last: Default::default(),
            pids_seen: Default::default(),
            last_pid: None,
            stacks: None,
        }
    }

    /// Long uptime: what is kept per process (the verbs users seen, fd kinds, memlock
    /// limits) is let go once the process has been gone at two stats ticks running, by when
    /// its last events are read. A pid the kernel gives to a new verbs process is then
    /// watched as new, and the caches do not grow with every process the daemon saw.
    ///
    /// Its entry in the kernel's watch table goes too. `sched_exit` removes a watched task's
    /// entry when it exits, but a short-lived process can exit before the tick that adds
    /// it: that entry would stay, and a later task given the same pid (any task: one of the
    /// daemon's own threads, and through fork-following its children) would be watched.
    /// With no task of that pid now, nothing that should be watched is unwatched.
    /// Returns the processes let go, for the sinks (`Sink::processes_gone`).
    fn forget_the_gone(&mut self, loaded: &mut Loaded) -> Vec<u32> {
        let mut pids: std::collections::HashSet<u32> = self.users_seen.iter().copied().collect();
        pids.extend(self.enricher.fds.pids());
        pids.extend(self.enricher.memlock.pids());
        pids.extend(self.pids_seen.iter().copied());
        let gone: std::collections::HashSet<u32> =
            pids.into_iter().filter(|p| !std::path::Path::new(&format!("/proc/{p}")).exists()).collect();
        let mut forgotten: Vec<u32> = gone.intersection(&self.gone_last).copied().collect();
        forgotten.sort_unstable();
        for &p in &forgotten {
            if self.users_seen.remove(&p) {
                // Not there (sched_exit removed it) is the usual answer.
                loaded.unwatch(p).ok();
            }
            self.pids_seen.remove(&p);
            self.enricher.fds.forget_process(p);
            self.enricher.memlock.forget(p);
        }
        self.last_pid = None;
        self.gone_last = gone;
        forgotten
    }

    /// A counting run's kernel counts to the sink; those of processes gone for the
    /// lookback leave the kernel's maps.
    fn counted(&mut self, loaded: &mut Loaded) {
        let c = match loaded.counted(&self.planning.plan) {
            Ok(c) => c,
            Err(e) => return eprintln!("rdma-trace: reading the kernel's counts: {e}"),
        };
        let r = self.sink.counted(&c);
        self.keep(r);
        let alive = |p: u32| std::path::Path::new(&format!("/proc/{p}")).exists();
        let due = self.retiring.due(&c, std::time::Instant::now(), alive);
        if !due.is_empty()
            && let Err(e) = loaded.forget_counted(&due)
        {
            eprintln!("rdma-trace: forgetting the counts of ended processes: {e}");
        }
    }

    /// Keeps the sink's first error; after one, nothing more is written.
    fn keep(&mut self, r: std::io::Result<()>) {
        if let Err(e) = r {
            self.failed.get_or_insert(e);
        }
    }

    /// One ring record through decode → enrich → correlate, to the sink.
    fn record(&mut self, b: &[u8]) {
        self.tally.ring_bytes += b.len() as u64;
        let b = match self.stacks.as_mut() {
            Some(s) => {
                let (b, lost) = s.resolve(b);
                if lost {
                    self.tally.stack_lost(decode::header(b).as_ref());
                }
                b
            }
            None => b,
        };
        let mut ev = match to_item(b, &mut self.tally, &mut self.enricher) {
            Some(Item::Event(ev)) => ev,
            Some(Item::Step(s)) => {
                if self.failed.is_none() {
                    let r = self.sink.step(&s);
                    self.keep(r);
                }
                return;
            }
            None => return,
        };
        self.correlator.feed(&mut ev);
        if self.watch_verbs_users {
            if uses_verbs(&ev) {
                self.users_seen.insert(ev.pid);
            }
            if self.last_pid != Some(ev.pid) {
                self.pids_seen.insert(ev.pid);
                self.last_pid = Some(ev.pid);
            }
        }
        if self.failed.is_none() {
            let r = self.sink.event(&std::sync::Arc::new(ev));
            self.keep(r);
        }
    }

    /// A timer's turn: the tick (outputs written out) or the stats (the accounting so far,
    /// and what loss is new).
    fn periodic(&mut self, p: Periodic, loaded: &mut Loaded) {
        match p {
            Periodic::Tick => {
                let r = self.sink.tick();
                self.keep(r);
            }
            Periodic::Stats => {
                let counters = loaded.counters().unwrap_or_default();
                let (_, refused) = account::watches(&counters);
                if refused > 0 && !self.watch_failed_said {
                    self.watch_failed_said = true;
                    eprintln!(
                        "rdma-trace: the watch table is full: a verbs process's syscalls are not seen; \
                         the count is in the summary"
                    );
                }
                let missed = loaded.kernel_missed();
                let sites = account::per_site(&self.planning.plan, &counters, &self.tally, missed.as_deref());
                let ts_ns = monotonic_ns();
                let mut counts: Vec<_> = sites.iter().map(|s| s.count(true)).collect();
                counts.extend(account::program_counts(&loaded.program_costs()));
                for l in self.losses.new_losses(ts_ns, &counts) {
                    let r = self.sink.loss(&l);
                    self.keep(r);
                }
                if self.planning.plan.counted {
                    self.counted(loaded);
                }
                let r = self.sink.stats(&Stats { ts_ns, sites: counts, ..Default::default() });
                self.keep(r);
                let gone = self.forget_the_gone(loaded);
                if !gone.is_empty() {
                    let r = self.sink.processes_gone(&gone, ts_ns);
                    self.keep(r);
                }
            }
        }
    }

    /// What was lost since the last stats record (at shutdown: runs the kernel skipped,
    /// records held past it), said before the trailer, so that the stream's loss records
    /// add up to the trailer's account.
    pub(super) fn last_losses(&mut self, account: &RunAccount) {
        for l in self.losses.new_losses(monotonic_ns(), &account.counts()) {
            let r = self.sink.loss(&l);
            self.keep(r);
        }
    }
}

/// The run stops (a signal, the duration): a command still running gets `sig`, as a
/// shell's job would, and a second to end. The run's exit code is the command's status
/// (128+N for a signal, as shells say it), or 0 with no command.
async fn stop(child: &mut Option<std::process::Child>, sig: i32, why: &str) -> Stopped {
    let Some(c) = child.as_mut() else { return Stopped { why: why.into(), code: 0 } };
    if matches!(c.try_wait(), Ok(None)) {
        // SAFETY: kill(2) of our own child, not yet reaped (its pid is still its own).
        unsafe { libc::kill(c.id() as i32, sig) };
        for _ in 0..50 {
            if !matches!(c.try_wait(), Ok(None)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let code = match c.try_wait() {
        Ok(Some(st)) => status_code(st),
        _ => 128 + sig,
    };
    Stopped { why: why.into(), code }
}

/// An exit status as shells give it: the code, or 128+N for signal N.
fn status_code(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

/// The event loop: reads the ring in bounded batches and checks, between batches, the
/// signals, the duration, the command's exit and the outputs, so a stop is honoured at
/// any event rate.
pub(super) async fn event_loop(
    ring: &mut AsyncRing,
    run: &mut RunLoop<'_>,
    loaded: &mut Loaded,
    duration: Option<Duration>,
    child: &mut Option<std::process::Child>,
) -> Result<Stopped, TraceError> {
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let deadline = tokio::time::sleep(duration.unwrap_or(Duration::from_secs(u32::MAX as u64)));
    tokio::pin!(deadline);
    let every = |period, missed| {
        let mut i = tokio::time::interval(period);
        i.set_missed_tick_behavior(missed);
        i
    };
    let (mut watchdog, mut child_check) = (
        every(Duration::from_millis(250), MissedTickBehavior::Delay),
        every(Duration::from_millis(100), MissedTickBehavior::Delay),
    );
    // On a fixed schedule (a late tick does not push the next one back): the bounds the
    // capture format promises.
    let (mut flush, mut stats) = (
        every(crate::sink::TICK_EVERY, MissedTickBehavior::Skip),
        every(capture::STATS_EVERY, MissedTickBehavior::Skip),
    );
    loop {
        if let Some(e) = run.failed.as_ref() {
            return Ok(Stopped { why: format!("an output failed ({e})"), code: 1 });
        }
        tokio::select! {
            biased;
            _ = sigint.recv() => return Ok(stop(child, libc::SIGINT, "SIGINT").await),
            _ = sigterm.recv() => return Ok(stop(child, libc::SIGTERM, "SIGTERM").await),
            _ = &mut deadline, if duration.is_some() => {
                return Ok(stop(child, libc::SIGTERM, "the duration elapsed").await);
            }
            _ = child_check.tick(), if child.is_some() => {
                if let Some(c) = child.as_mut()
                    && let Some(st) = c.try_wait()?
                {
                    // Give in-flight completions (kworkers) a moment, then stop.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    let why = format!("the command exited (pid {}, {st})", c.id());
                    return Ok(Stopped { why, code: status_code(st) });
                }
            }
            _ = flush.tick() => run.periodic(Periodic::Tick, loaded),
            _ = stats.tick() => run.periodic(Periodic::Stats, loaded),
            // A wakeup can be missed while the reader waits on a record being written.
            _ = watchdog.tick() => { ring.drain_now(|b| run.record(b)); }
            r = ring.next_batch(|b| run.record(b)) => { r?; }
        }
    }
}

/// A part of stopping: how long it took and, for the parts whose work is records (the
/// ring's leftover, an output's queue), how many it had. Their counts are bounded by the
/// ring's and the queue's sizes, whatever the machine's speed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StopPhase {
    pub name: &'static str,
    pub took: Duration,
    pub records: Option<u64>,
}

impl StopPhase {
    pub(crate) fn new(name: &'static str, took: Duration) -> Self {
        Self { name, took, records: None }
    }
    pub(crate) fn of(name: &'static str, took: Duration, records: u64) -> Self {
        Self { name, took, records: Some(records) }
    }
}

/// What shutdown gathered: the final counters and what the ring and the kernel said.
pub(super) struct End {
    counters: Vec<u64>,
    left: Leftover,
    programs: Vec<ProgramCost>,
    missed: Option<Vec<u64>>,
    links: crate::account::Links,
    waits: crate::source::Waits,
    pub(super) stopping: Vec<StopPhase>,
}

impl End {
    pub(super) fn account(&self, planning: &Planning, run: &RunLoop) -> RunAccount {
        let tally = &run.tally;
        let (forks, forks_unwatched) = account::forks(&self.counters);
        let (watches, watches_failed) = account::watches(&self.counters);
        RunAccount {
            sites: account::per_site(&planning.plan, &self.counters, tally, self.missed.as_deref()),
            headerless: tally.headerless,
            ring_records: tally.records(),
            ring_bytes: tally.ring_bytes,
            stacks_by_id: run.stacks.as_ref().map(|s| s.distinct()),
            calls_let_go: run.correlator.let_go(),
            reader_waits: self.waits.records,
            reader_longest_wait_ns: self.waits.longest.as_nanos() as u64,
            uncommitted_at_exit: self.left.uncommitted,
            blocked_at_exit: self.left.blocked,
            forks,
            forks_unwatched,
            watches,
            watches_failed,
            programs: self.programs.clone(),
            kernel_missed_known: self.missed.is_some(),
            links: self.links,
        }
    }
}

/// Switches the programs off, reads the ring until every record they committed is read
/// (or a deadline passes), then lets the links go: after this process exits, by a helper
/// (`detach`), so nobody waits for the kernel's detach; here, if that helper cannot start.
pub(super) async fn shutdown(
    mut loaded: Loaded,
    ring: &mut AsyncRing,
    run: &mut RunLoop<'_>,
) -> Result<End, TraceError> {
    let t = std::time::Instant::now();
    let programs = loaded.program_costs();
    let missed = loaded.kernel_missed();
    let links = loaded.links();
    let counters = loaded.switch_off()?;
    // A program that read its plan just before the switch finishes within microseconds.
    tokio::time::sleep(SWITCH_GRACE).await;
    let off = t.elapsed();
    // A counting run's hits went to the kernel's maps: none is owed to the ring.
    let counted = run.planning.plan.counted;
    let pending = |run: &RunLoop| {
        if counted { 0 } else { counters.read().map(|c| run.tally.pending(&c)).unwrap_or(0) }
    };
    let read_before = run.tally.records();
    let left = ring.finish(run, |run, b| run.record(b), pending, HELD_DEADLINE).await;
    let drained = t.elapsed();
    let handed = loaded.let_go();
    if let Err(e) = &handed {
        eprintln!("rdma-trace: detaching the probes before exiting: no helper to do it after ({e})");
    }
    let letting_go = if handed.is_ok() { "handing the links over" } else { "detaching" };
    let stopping = vec![
        StopPhase::new("switching off", off),
        StopPhase::of("draining the ring", drained - off, run.tally.records() - read_before),
        StopPhase::new(letting_go, t.elapsed() - drained),
    ];
    Ok(End {
        counters: counters.read()?,
        left,
        programs,
        missed,
        links,
        waits: ring.waits().clone(),
        stopping,
    })
}

/// How long the programs are given to finish a run begun before they were switched off.
const SWITCH_GRACE: Duration = Duration::from_millis(20);

/// How long shutdown waits for records still being written after the switch-off.
const HELD_DEADLINE: Duration = Duration::from_secs(1);
