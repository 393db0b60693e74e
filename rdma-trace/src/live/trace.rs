//! The tracer: attach, stream events through decode → enrich → correlate to the caller
//! until Ctrl-C, SIGTERM, the duration, or the traced command's exit. Nothing captured
//! is lost at shutdown: the programs are detached, then the ring is read until every
//! record they committed has arrived (or a deadline passes, and what was missing is
//! counted under its probe). It prints nothing: what it has to say are `Notice`s and the
//! final `RunAccount`, which the command layer formats.

use super::attach::{Loaded, Outcome};
use super::spawn::spawn_held;
use crate::event::Event;
use crate::output::summary::{self, ProgramCost, RunAccount, Tally};
use crate::pipeline::correlate::Correlator;
use crate::pipeline::decode;
use crate::pipeline::enrich::Enricher;
use crate::pipeline::fds::FdCache;
use crate::pipeline::ksyms::Ksyms;
use crate::plan::here::Planning;
use crate::plan::{kernel, syscalls};
use crate::source::{AsyncRing, Leftover, Ring};
use anyhow::{Context, Result};
use std::cell::RefCell;
use std::io::Write;
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::MissedTickBehavior;

pub struct TraceOptions {
    pub probes: Vec<String>,
    pub pids: Vec<u32>,
    pub command: Vec<String>,
    pub duration: Option<Duration>,
    pub ring_bytes: u32,
    /// Instances per kernel return probe (calls in flight it can follow).
    pub return_instances: u32,
}

/// What the tracer has to tell while it starts and stops.
#[derive(Debug)]
pub enum Notice {
    /// No plan could be made at all (no RDMA stack, no BTF).
    Blocked(String),
    /// Kprobe events of killed earlier runs were removed (or could not be checked).
    StaleEvents(Result<usize, String>),
    /// A catalog probe left out by planning.
    Skipped {
        id: crate::plan::catalog::ProbeId,
        reason: String,
    },
    /// A planned probe that did not attach, or attached not as asked.
    Attach(Outcome),
    Tracing {
        attached: usize,
        skipped: usize,
        planned: Duration,
        syscalls: bool,
    },
    /// Why the run stopped; the traced command's pid if it is still running.
    Stopped {
        why: String,
        still_running: Option<u32>,
    },
}

/// Why the run stopped, and the code to exit with (the traced command's).
pub struct Stopped {
    pub why: String,
    pub code: i32,
}

/// A finished run: why it stopped, its account, and the first error the event consumer
/// returned (the run goes on after one).
pub struct Finished {
    pub stopped: Stopped,
    pub account: RunAccount,
    pub consumer_error: Option<std::io::Error>,
}

/// An attached tracer, ready to run.
pub struct Tracer {
    opts: TraceOptions,
    planning: Planning,
    loaded: Loaded,
    ring: Ring,
    child: Option<(std::process::Child, std::fs::File)>,
}

/// Not root (or without the capabilities): the one line to print.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotPrivileged(pub String);

impl Tracer {
    /// Plans, loads and attaches; starts the traced command held until `run`.
    pub fn start(opts: TraceOptions, notice: &mut dyn FnMut(Notice)) -> Result<Self> {
        super::privilege::check().map_err(NotPrivileged)?;
        kernel::ensure_tracefs().context("tracefs")?;
        let wanted: Vec<&str> = opts.probes.iter().map(String::as_str).collect();
        let planning = crate::plan::here::plan_here(&wanted);
        if let Some(why) = &planning.blocked {
            notice(Notice::Blocked(why.clone()));
        }
        for s in &planning.plan.skipped {
            notice(Notice::Skipped { id: s.spec.id, reason: s.reason.clone() });
        }
        let stale = super::kprobe_events::remove_stale(std::path::Path::new(kernel::TRACEFS));
        notice(Notice::StaleEvents(stale.map(|v| v.len()).map_err(|e| e.to_string())));
        let (mut loaded, outcomes) =
            Loaded::attach_new(&planning.plan, opts.ring_bytes, opts.return_instances)?;
        let attached = outcomes.iter().filter(|o| o.attached.is_ok()).count();
        let skipped = planning.plan.skipped.len() + outcomes.len() - attached;
        for o in outcomes.into_iter().filter(|o| o.attached.is_err() || o.note.is_some()) {
            notice(Notice::Attach(o));
        }
        let watch_syscalls = !opts.pids.is_empty() || !opts.command.is_empty();
        if watch_syscalls {
            loaded.attach_syscalls(syscalls::system_layout()?, &syscalls::all_nrs())?;
            for p in &opts.pids {
                loaded.watch(*p)?;
            }
        }
        let mut child = None;
        if !opts.command.is_empty() {
            let (c, release) = spawn_held(&opts.command)?;
            loaded.watch(c.id())?;
            child = Some((c, release));
        }
        let ring = Ring::new(loaded.take_ring()?, opts.ring_bytes as usize)?;
        notice(Notice::Tracing { attached, skipped, planned: planning.took, syscalls: watch_syscalls });
        Ok(Self { opts, planning, loaded, ring, child })
    }

    /// Runs until told to stop, giving every event to `consume`, then shuts down.
    pub fn run(
        self,
        notice: &mut dyn FnMut(Notice),
        mut consume: impl FnMut(&Event) -> std::io::Result<()>,
    ) -> Result<Finished> {
        let Self { opts, planning, loaded, ring, child } = self;
        let ksyms = Ksyms::parse(&planning.kallsyms);
        let mut enricher = Enricher {
            plan: &planning.plan,
            ksyms: &ksyms,
            fds: FdCache::default(),
            memlock: Default::default(),
        };
        let mut correlator = Correlator::default();
        let tally = RefCell::new(Tally::default());
        let mut consumer_error = None;
        let mut handle = |b: &[u8]| {
            let Some(ev) = to_event(b, &mut tally.borrow_mut(), &mut enricher) else { return };
            let ev = correlator.feed(ev);
            if let Err(e) = consume(&ev) {
                consumer_error.get_or_insert(e);
            }
        };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (stopped, end) = rt.block_on(async {
            let mut ring = ring.into_async()?;
            let mut child = child.map(|(c, mut release)| {
                release.write_all(b"\n").ok(); // lets the child run (a dead child is seen below)
                c
            });
            let stopped = event_loop(&mut ring, &mut handle, opts.duration, &mut child).await?;
            let still_running =
                child.as_mut().and_then(|c| c.try_wait().ok().flatten().is_none().then(|| c.id()));
            notice(Notice::Stopped { why: stopped.why.clone(), still_running });
            let end = shutdown(loaded, &mut ring, &mut handle, &tally).await?;
            Ok::<_, anyhow::Error>((stopped, end))
        })?;
        let account = end.account(&planning, &tally.into_inner());
        Ok(Finished { stopped, account, consumer_error })
    }
}

/// One raw record through decode and enrich, counted in `tally` whatever becomes of it.
fn to_event(b: &[u8], t: &mut Tally, enricher: &mut Enricher) -> Option<Event> {
    let hdr = decode::header(b);
    t.read(hdr.as_ref());
    let Ok(raw) = decode::decode(b) else {
        t.undecodable(hdr.as_ref());
        return None;
    };
    let Some(ev) = enricher.event(&raw) else {
        t.enrich_dropped(raw.header());
        return None;
    };
    t.delivered(raw.header());
    Some(ev)
}

/// The event loop: reads the ring in bounded batches and checks, between batches, the
/// signals, the duration and the command's exit, so a stop is honoured at any event rate.
async fn event_loop(
    ring: &mut AsyncRing,
    handle: &mut impl FnMut(&[u8]),
    duration: Option<Duration>,
    child: &mut Option<std::process::Child>,
) -> Result<Stopped> {
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let deadline = tokio::time::sleep(duration.unwrap_or(Duration::from_secs(u32::MAX as u64)));
    tokio::pin!(deadline);
    let mut watchdog = tokio::time::interval(Duration::from_millis(250));
    watchdog.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut child_check = tokio::time::interval(Duration::from_millis(100));
    child_check.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            _ = sigint.recv() => return Ok(Stopped { why: "SIGINT".into(), code: 0 }),
            _ = sigterm.recv() => return Ok(Stopped { why: "SIGTERM".into(), code: 0 }),
            _ = &mut deadline, if duration.is_some() => {
                return Ok(Stopped { why: "the duration elapsed".into(), code: 0 });
            }
            _ = child_check.tick(), if child.is_some() => {
                if let Some(c) = child.as_mut()
                    && let Some(st) = c.try_wait()?
                {
                    // Give in-flight completions (kworkers) a moment, then stop.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    let why = format!("the command exited (pid {}, {st})", c.id());
                    return Ok(Stopped { why, code: st.code().unwrap_or(1) });
                }
            }
            // A wakeup can be missed while the reader waits on a record being written.
            _ = watchdog.tick() => { ring.drain_now(&mut *handle); }
            r = ring.next_batch(&mut *handle) => { r?; }
        }
    }
}

/// What shutdown gathered: the final counters and what the ring and the kernel said.
struct End {
    counters: Vec<u64>,
    left: Leftover,
    programs: Vec<ProgramCost>,
    missed: Option<Vec<u64>>,
    waits: crate::source::Waits,
}

impl End {
    fn account(&self, planning: &Planning, tally: &Tally) -> RunAccount {
        let (forks, forks_unwatched) = summary::forks(&self.counters);
        RunAccount {
            sites: summary::per_site(&planning.plan, &self.counters, tally, self.missed.as_deref()),
            headerless: tally.headerless,
            reader_waits: self.waits.records,
            reader_longest_wait_ns: self.waits.longest.as_nanos() as u64,
            uncommitted_at_exit: self.left.uncommitted,
            blocked_at_exit: self.left.blocked,
            forks,
            forks_unwatched,
            programs: self.programs.clone(),
            kernel_missed_known: self.missed.is_some(),
        }
    }
}

/// Detaches the programs, then reads the ring until every record they committed is read
/// (or a deadline passes).
async fn shutdown(
    loaded: Loaded,
    ring: &mut AsyncRing,
    handle: &mut impl FnMut(&[u8]),
    tally: &RefCell<Tally>,
) -> Result<End> {
    let programs = loaded.program_costs();
    let missed = loaded.kernel_missed();
    let counters = loaded.detach_keep_counters()?;
    let pending = || counters.read().map(|c| tally.borrow().pending(&c)).unwrap_or(0);
    let left = ring.finish(&mut *handle, pending, HELD_DEADLINE).await;
    Ok(End { counters: counters.read()?, left, programs, missed, waits: ring.waits().clone() })
}

/// How long shutdown waits for records still being written after the programs detach.
const HELD_DEADLINE: Duration = Duration::from_secs(1);
