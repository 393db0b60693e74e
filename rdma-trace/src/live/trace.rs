//! The tracer: attach, stream events through decode → enrich → correlate to the caller
//! until Ctrl-C, SIGTERM, the duration, or the traced command's exit. Nothing captured
//! is lost at shutdown: the programs are switched off, then the ring is read until every
//! record they committed has arrived (or a deadline passes, and what was missing is
//! counted under its probe); the links are let go after this process exits
//! (`detach.rs`), so nobody waits for the kernel's detach. It prints nothing: what it has to say are `Notice`s and the
//! final `RunAccount`, which the command layer formats.

use super::attach::{Loaded, Outcome};
pub(crate) use super::run_loop::Stopped;
use super::run_loop::{RunLoop, event_loop, monotonic_ns, shutdown};
use super::spawn::spawn_held;
use crate::account::RunAccount;
use crate::capture::{Header, ProbeStatus};
use crate::clock::clock_ns;
use crate::pipeline::ksyms::Ksyms;
use crate::plan::here::Planning;
use crate::plan::{kernel, syscalls};
use crate::sink::Sink;
use crate::source::Ring;
use std::io::Write;
use std::time::Duration;

pub(crate) struct TraceOptions {
    pub probes: Vec<String>,
    pub pids: Vec<u32>,
    pub command: Vec<String>,
    pub duration: Option<Duration>,
    pub ring_bytes: u32,
    /// Instances per kernel return probe (calls in flight it can follow).
    pub return_instances: u32,
    /// Watch the syscalls of every process seen using verbs (opening a device, mapping
    /// uverbs pages, pinning), from then on: the daemon's view, with no `--pid` or command.
    pub watch_verbs_users: bool,
    /// Kernel stacks go by id (`bpf_get_stackid`): a record carries an id, and each
    /// distinct stack is read from the kernel's map once.
    pub stack_ids: bool,
    /// Count in the kernel and stream nothing (`plan::counted`): the daemon's
    /// `--metrics-only`.
    pub counted: bool,
    /// Where the command's stdout and stderr go (the TUI owns the terminal), if not ours.
    pub command_log: Option<std::path::PathBuf>,
    /// Whom the command runs as (`spawn::RunAs::choose`); none: as this process.
    pub run_as: Option<super::spawn::RunAs>,
}

/// What the tracer has to tell while it starts and stops.
#[derive(Debug)]
pub(crate) enum Notice {
    /// No plan could be made at all (no RDMA stack, no BTF).
    Blocked(String),
    /// Kprobe events of killed earlier runs were removed (or could not be checked).
    StaleEvents(std::io::Result<usize>),
    /// A catalog probe left out by planning.
    Skipped {
        id: crate::plan::catalog::ProbeId,
        reason: crate::plan::select::Skip,
    },
    /// This kernel's mlx5_ib numbers differ from what rdma-trace decodes, or could not be
    /// read (said only then).
    Mlx5(crate::plan::mlx5::Check),
    /// A planned probe that did not attach, or attached not as asked.
    Attach(Outcome),
    /// The companion's step marker: the binary it was attached in, or why not.
    StepMarker(Result<std::path::PathBuf, StepMarkerError>),
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

/// A finished run: why it stopped, its account, and the first error the event consumer
/// returned (the run goes on after one).
pub(crate) struct Finished {
    pub stopped: Stopped,
    /// When shutdown ended (CLOCK_MONOTONIC ns).
    pub ended_ns: u64,
    pub account: RunAccount,
    pub consumer_error: Option<std::io::Error>,
    /// How long each part of stopping took, from the moment the run loop ended.
    pub stopping: Vec<StopPhase>,
}

pub(crate) use super::run_loop::StopPhase;

/// "stopping took 1.2 s (detaching 0.9 s, draining the ring 0.3 s: 2 records)" when
/// stopping took longer than `over`.
pub(crate) fn stopping_line(phases: &[StopPhase], over: Duration) -> Option<String> {
    let total: Duration = phases.iter().map(|p| p.took).sum();
    let part = |p: &StopPhase| {
        let n = p.records.map(|n| format!(": {}", crate::units::count(n, "record"))).unwrap_or_default();
        format!("{} {:.1} s{n}", p.name, p.took.as_secs_f64())
    };
    let parts: Vec<String> = phases.iter().map(part).collect();
    (total > over).then(|| format!("stopping took {:.1} s ({})", total.as_secs_f64(), parts.join(", ")))
}

/// An attached tracer, ready to run.
pub(crate) struct Tracer {
    opts: TraceOptions,
    planning: Planning,
    loaded: Loaded,
    ring: Ring,
    /// Kernel stacks by id, when asked for.
    stacks: Option<super::stack_ids::StackIds>,
    child: Option<(std::process::Child, std::fs::File)>,
    /// Every catalog probe's fate in this run, for the capture header.
    probes: Vec<ProbeStatus>,
    /// `rdma sys show`'s copy-on-fork, asked once at start.
    copy_on_fork: Option<bool>,
    /// The stack symbolizer, built while the probes load.
    ksyms: Ksyms,
}

/// Why the companion's step marker was not attached (the run goes on without it).
#[derive(Debug, thiserror::Error)]
pub(crate) enum StepMarkerError {
    #[error("where this executable is: {0}")]
    NoExe(std::io::Error),
    #[error("no companion at {} (steps are read from --steps at the end)", .0.display())]
    NoCompanion(std::path::PathBuf),
    #[error("{0}")]
    Attach(#[from] super::attach::AttachError),
    #[error("a counting run (--metrics-only) streams no steps")]
    Counting,
}

pub(crate) use super::error::TraceError;

type Result<T, E = TraceError> = std::result::Result<T, E>;

impl Tracer {
    /// Plans, loads and attaches; starts the traced command held until `run`.
    pub(crate) fn start(opts: TraceOptions, notice: &mut dyn FnMut(Notice)) -> Result<Self> {
        super::privilege::check()?;
        // `rdma sys show` runs while the probes load (it took the 7.3 lab guest about a
        // second; after the "tracing" line it delayed the first events and stats).
        let copy_on_fork = std::thread::spawn(copy_on_fork);
        kernel::ensure_tracefs().map_err(TraceError::Tracefs)?;
        let wanted: Vec<&str> = opts.probes.iter().map(String::as_str).collect();
        let mut planning = crate::plan::here::plan_here(&wanted);
        if opts.counted && planning.blocked.is_none() {
            crate::plan::counted::count_only(&mut planning.plan);
        }
        let explicit = !opts.pids.is_empty() || !opts.command.is_empty();
        let watch_syscalls = explicit || opts.watch_verbs_users;
        match &planning.blocked {
            // Nothing to attach and no process asked for: running on would show nothing.
            Some(why) if !explicit => return Err(TraceError::Blocked(why.clone())),
            Some(why) => notice(Notice::Blocked(format!(
                "{why}\nrdma-trace: only the syscalls of the traced processes will be shown"
            ))),
            None => {
                for s in &planning.plan.skipped {
                    notice(Notice::Skipped { id: s.spec.id, reason: s.reason.clone() });
                }
                use crate::plan::mlx5::Check;
                if let Some(c @ (Check::Differs(_) | Check::Unreadable(_))) = planning.mlx5.take() {
                    notice(Notice::Mlx5(c));
                }
            }
        }
        // The symbolizer is built while the probes load too: parsing the 7.3 guest's
        // kallsyms after the "tracing" line delayed the first stats record past two periods.
        // Nothing else reads the text once planned: it moves to the parsing thread.
        let kallsyms = std::mem::take(&mut planning.kallsyms);
        let ksyms = std::thread::spawn(move || Ksyms::parse(&kallsyms));
        let stale = super::kprobe_events::remove_stale(std::path::Path::new(kernel::TRACEFS));
        notice(Notice::StaleEvents(stale.map(|v| v.len())));
        if opts.watch_verbs_users {
            for p in planning
                .plan
                .probes
                .iter_mut()
                .filter(|p| super::run_loop::VERBS_ENTRIES.contains(&p.spec.id))
            {
                p.entry.watch = 1;
            }
        }
        if opts.stack_ids {
            for p in
                planning.plan.probes.iter_mut().filter(|p| p.entry.stack == rdma_trace_common::STACK_COPY)
            {
                p.entry.stack = rdma_trace_common::STACK_ID;
            }
        }
        let (mut loaded, outcomes) =
            Loaded::attach_new(&planning.plan, opts.ring_bytes, opts.return_instances)?;
        let attached = outcomes.iter().filter(|o| o.attached.is_ok()).count();
        let skipped = planning.plan.skipped.len() + outcomes.len() - attached;
        let mut probes = probe_statuses(&planning, &outcomes);
        for o in outcomes.into_iter().filter(|o| o.attached.is_err() || o.note.is_some()) {
            notice(Notice::Attach(o));
        }
        // A counting run streams nothing, the companion's steps included.
        let marker = if opts.counted {
            Err(StepMarkerError::Counting)
        } else {
            step_marker(&mut loaded, &opts.command)
        };
        probes.push(ProbeStatus {
            id: STEP_MARKER_ID.into(),
            symbol: Some(crate::steps::MARKER_SYMBOL.into()),
            module: marker.as_ref().ok().map(|p| p.display().to_string()),
            attached: marker.is_ok(),
            reason: marker.as_ref().err().map(ToString::to_string),
        });
        notice(Notice::StepMarker(marker));
        if watch_syscalls {
            loaded.attach_syscalls(syscalls::system_layout()?, &syscalls::all_nrs())?;
            for p in &opts.pids {
                loaded.watch(*p)?;
            }
        }
        let mut child = None;
        if !opts.command.is_empty() {
            let (c, release) = spawn_held(&opts.command, opts.command_log.as_deref(), opts.run_as.as_ref())?;
            loaded.watch(c.id())?;
            child = Some((c, release));
        }
        let ring = Ring::new(loaded.take_ring()?, opts.ring_bytes as usize)?;
        let stacks = if opts.stack_ids { Some(loaded.take_stacks()?) } else { None };
        let copy_on_fork = copy_on_fork.join().unwrap_or(None);
        let ksyms = ksyms.join().map_err(|_| TraceError::Ksyms)?;
        if let Some(&r) = ksyms.ranges_of(&["__kretprobe_trampoline"]).first() {
            loaded.set_kretprobe_trampoline(r)?;
        }
        if planning.plan.counted {
            // A counted completion's context is told as the story tells it from its stack.
            let ranges = ksyms.ranges_of(&crate::pipeline::enrich::SOFTIRQ_FRAMES);
            loaded.set_softirq_ranges(&ranges)?;
        }
        notice(Notice::Tracing { attached, skipped, planned: planning.took, syscalls: watch_syscalls });
        Ok(Self { opts, planning, loaded, ring, stacks, child, probes, copy_on_fork, ksyms })
    }

    /// The capture header of this run (its version and sequence are the writer's).
    pub(crate) fn header(&self) -> Header {
        let lib = self.planning.plan.probes.iter().find_map(|p| p.target.as_ref()).map(|(path, _)| path);
        Header {
            tool: format!("rdma-trace {}", env!("CARGO_PKG_VERSION")),
            hostname: read_trimmed("/proc/sys/kernel/hostname"),
            kernel_release: read_trimmed("/proc/sys/kernel/osrelease"),
            boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
            realtime_offset_ns: realtime_offset_ns(),
            command_line: std::env::args().collect(),
            ring_bytes: self.opts.ring_bytes,
            return_instances: self.opts.return_instances,
            probes: self.probes.clone(),
            libibverbs: lib.map(|p| p.display().to_string()),
            redacted: false,
            copy_on_fork: self.copy_on_fork,
            ..Default::default()
        }
    }

    /// Runs until told to stop, giving every event, the accounting every second and a
    /// tick every 50 ms to `sink`, then shuts down. A sink error stops the run at once.
    pub(crate) fn run(self, notice: &mut dyn FnMut(Notice), sink: &mut dyn Sink) -> Result<Finished> {
        let Self { opts, planning, mut loaded, ring, stacks, child, ksyms, .. } = self;
        let mut run = RunLoop::new(&planning, &ksyms, sink, opts.watch_verbs_users);
        run.stacks = stacks;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (stopped, end) = rt.block_on(async {
            let mut ring = ring.into_async()?;
            let mut child = child.map(|(c, mut release)| {
                release.write_all(b"\n").ok(); // lets the child run (a dead child is seen below)
                c
            });
            let stopped = event_loop(&mut ring, &mut run, &mut loaded, opts.duration, &mut child).await?;
            let still_running =
                child.as_mut().and_then(|c| c.try_wait().ok().flatten().is_none().then(|| c.id()));
            notice(Notice::Stopped { why: stopped.why.clone(), still_running });
            let end = shutdown(loaded, &mut ring, &mut run).await?;
            Ok::<_, TraceError>((stopped, end))
        })?;
        let account = end.account(&planning, &run);
        run.last_losses(&account);
        Ok(Finished {
            stopped,
            ended_ns: monotonic_ns(),
            account,
            consumer_error: run.failed,
            stopping: end.stopping,
        })
    }
}

/// `rdma sys show`'s copy-on-fork (iproute2's rdma tool: `… copy-on-fork on`), if it
/// answers.
fn copy_on_fork() -> Option<bool> {
    let out = std::process::Command::new("rdma").args(["sys", "show"]).output().ok()?;
    parse_copy_on_fork(&String::from_utf8_lossy(&out.stdout))
}

fn parse_copy_on_fork(text: &str) -> Option<bool> {
    let mut words = text.split_whitespace();
    words.find(|w| *w == "copy-on-fork")?;
    match words.next()? {
        "on" => Some(true),
        "off" => Some(false),
        _ => None,
    }
}

/// The step marker's row among the probes (header, summary).
pub(crate) const STEP_MARKER_ID: &str = "companion_step";

/// Attaches the step marker in the companion binary: the traced command's own program if
/// it is the companion, else the one installed beside this executable.
fn step_marker(loaded: &mut Loaded, command: &[String]) -> Result<std::path::PathBuf, StepMarkerError> {
    let named = command.first().map(std::path::Path::new).filter(|p| {
        p.file_name().is_some_and(|n| n == crate::steps::WORKLOAD_BIN) && p.components().count() > 1
    });
    let path = match named {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .map_err(StepMarkerError::NoExe)?
            .with_file_name(crate::steps::WORKLOAD_BIN),
    };
    if !path.is_file() {
        return Err(StepMarkerError::NoCompanion(path));
    }
    loaded.attach_step_marker(&path)?;
    Ok(path)
}

/// Every catalog probe: attached (with a note if not as asked) or skipped, and why.
fn probe_statuses(planning: &Planning, outcomes: &[Outcome]) -> Vec<ProbeStatus> {
    let mut out: Vec<ProbeStatus> = outcomes
        .iter()
        .map(|o| ProbeStatus {
            id: o.id.to_string(),
            symbol: Some(o.symbol.into()),
            module: Some(o.module.clone()),
            attached: o.attached.is_ok(),
            reason: o.attached.as_ref().err().map(ToString::to_string).or_else(|| o.note.clone()),
        })
        .collect();
    out.extend(planning.plan.skipped.iter().map(|s| ProbeStatus {
        id: s.spec.id.to_string(),
        symbol: None,
        module: None,
        attached: false,
        reason: Some(s.reason.to_string()),
    }));
    out
}

/// A one-line /proc file, trimmed ("" if it cannot be read: the header says so by leaving
/// the field empty).
fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// CLOCK_REALTIME − CLOCK_MONOTONIC now, in ns.
fn realtime_offset_ns() -> i64 {
    clock_ns(libc::CLOCK_REALTIME) - clock_ns(libc::CLOCK_MONOTONIC)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn a_slow_stop_says_where_its_time_went() {
        use super::StopPhase;
        let phases = [
            StopPhase::new("detaching", Duration::from_millis(900)),
            StopPhase::of("draining the ring", Duration::from_millis(400), 24_967),
        ];
        assert_eq!(
            super::stopping_line(&phases, Duration::from_secs(1)).as_deref(),
            Some("stopping took 1.3 s (detaching 0.9 s, draining the ring 0.4 s: 24967 records)")
        );
        assert_eq!(super::stopping_line(&phases[..1], Duration::from_secs(1)), None);
    }

    #[test]
    fn copy_on_fork_as_rdma_sys_show_prints_it() {
        // The shape of rdma sys show's line (the lab guest prints copy-on-fork on).
        let text = "netns shared privileged-qkey off copy-on-fork on\n";
        assert_eq!(super::parse_copy_on_fork(text), Some(true));
        assert_eq!(super::parse_copy_on_fork("netns shared copy-on-fork off"), Some(false));
        assert_eq!(super::parse_copy_on_fork("netns shared"), None);
    }
}
