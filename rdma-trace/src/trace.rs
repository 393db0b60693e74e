//! `rdma-trace trace`: attach, stream events through decode → enrich → correlate → sinks
//! until Ctrl-C, SIGTERM, the duration, or the traced command's exit. Nothing captured
//! is lost at shutdown: the programs are detached, then the ring is read until every
//! record they committed has arrived (or a deadline passes, and what was missing is
//! counted under its probe).

use crate::correlate::Correlator;
use crate::enrich::Enricher;
use crate::fds::FdCache;
use crate::ksyms::Ksyms;
use crate::sink::Sink;
use crate::source::{AsyncRing, Leftover, Ring};
use crate::stats::Tally;
use crate::{decode, kernel, setup, stats, syscalls};
use anyhow::{Context, Result, bail};
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
    pub sinks: Vec<Box<dyn Sink + Send>>,
    /// Print the joined story at the end (with the companion's step file, if given).
    pub story: Option<Option<std::path::PathBuf>>,
}

/// Starts `cmd` held at a barrier so its syscalls are watched from its first one.
/// A tiny shell waits on a pipe (fd 3) and then execs the command, keeping the pid;
/// writing to (or closing) the returned pipe end releases it.
fn spawn_held(cmd: &[String]) -> Result<(std::process::Child, std::fs::File)> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;
    let mut fds = [0i32; 2];
    // SAFETY: pipe2(2) with a valid two-int array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1])) };
    let rfd = r.as_raw_fd();
    let mut c = std::process::Command::new("/bin/sh");
    c.arg("-c").arg("read _ <&3; exec 3<&-; exec \"$0\" \"$@\"").args(cmd);
    // SAFETY: dup2 is async-signal-safe; it gives the child the read end as fd 3
    // (without O_CLOEXEC).
    unsafe {
        c.pre_exec(move || {
            if libc::dup2(rfd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = c.spawn().with_context(|| format!("cannot start {}", cmd[0]))?;
    drop(r);
    Ok((child, w))
}

/// Why the run stopped, and the traced command's exit code.
struct Stopped {
    why: String,
    code: i32,
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

/// Detaches the programs, then reads the ring until every record they committed is read
/// (or a deadline passes); returns the final counters and what was left in the ring.
async fn shutdown(
    loaded: crate::attach::Loaded,
    ring: &mut AsyncRing,
    handle: &mut impl FnMut(&[u8]),
    tally: &std::cell::RefCell<Tally>,
) -> Result<(Vec<u64>, Leftover, Vec<stats::ProgramCost>)> {
    let programs = loaded.program_costs();
    let counters = loaded.detach_keep_counters()?;
    let pending = || counters.read().map(|c| tally.borrow().pending(&c)).unwrap_or(0);
    let left = ring.finish(&mut *handle, pending, HELD_DEADLINE).await;
    Ok((counters.read()?, left, programs))
}

/// How long shutdown waits for records still being written after the programs detach.
const HELD_DEADLINE: Duration = Duration::from_secs(1);

pub fn run(mut opts: TraceOptions) -> Result<i32> {
    if let Err(msg) = crate::privilege::check() {
        eprintln!("{msg}");
        return Ok(2);
    }
    kernel::ensure_tracefs().context("tracefs")?;
    let wanted: Vec<&str> = opts.probes.iter().map(String::as_str).collect();
    let planning = setup::plan_here(&wanted);
    if let Some(why) = &planning.blocked {
        eprintln!("rdma-trace: {why}");
    }
    for s in &planning.plan.skipped {
        eprintln!("rdma-trace: skip {:<13} {}", s.spec.id, s.reason);
    }
    let (mut loaded, outcomes) = setup::attach(&planning.plan, opts.ring_bytes)?;
    let mut attached = 0;
    let mut failed = planning.plan.skipped.len();
    for o in &outcomes {
        match &o.attached {
            Ok(()) => attached += 1,
            Err(e) => {
                failed += 1;
                eprintln!("rdma-trace: skip {:<13} {} ({}): attach failed: {e}", o.id, o.symbol, o.module);
            }
        }
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
    let ksyms = Ksyms::parse(&planning.kallsyms);
    let mut enricher = Enricher {
        plan: &planning.plan,
        ksyms: &ksyms,
        fds: FdCache::default(),
        memlock: Default::default(),
    };
    let mut correlator = Correlator::default();
    eprintln!(
        "rdma-trace: tracing ({attached} probes attached, {failed} skipped; planned in {} ms){}",
        planning.took.as_millis(),
        if watch_syscalls { ", watching syscalls" } else { "" }
    );

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let tally = std::cell::RefCell::new(Tally::default());
    let mut sink_err: Option<std::io::Error> = None;
    let mut kept: Vec<crate::event::Event> = Vec::new();
    let keep = opts.story.is_some();
    let (stopped, final_counts, left, waits, programs) = rt.block_on(async {
        let mut ring = ring.into_async()?;
        let mut child_handle = child.map(|(c, mut release)| {
            let _ = release.write_all(b"\n"); // lets the child run
            c
        });
        let mut handle = |b: &[u8]| {
            let hdr = decode::header(b);
            let mut t = tally.borrow_mut();
            t.read(hdr.as_ref());
            let Ok(raw) = decode::decode(b) else {
                t.undecodable(hdr.as_ref());
                return;
            };
            let Some(ev) = enricher.event(&raw) else {
                t.enrich_dropped(raw.header());
                return;
            };
            t.delivered(raw.header());
            let ev = correlator.feed(ev);
            for s in opts.sinks.iter_mut() {
                if let Err(e) = s.event(&ev) {
                    sink_err.get_or_insert(e);
                }
            }
            if keep {
                kept.push(ev);
            }
        };
        let stopped = event_loop(&mut ring, &mut handle, opts.duration, &mut child_handle).await?;
        let still = child_handle.as_mut().and_then(|c| c.try_wait().ok().flatten().is_none().then(|| c.id()));
        match still {
            Some(pid) => {
                eprintln!("rdma-trace: stopped on {}; the command (pid {pid}) is still running", stopped.why)
            }
            None => eprintln!("rdma-trace: stopped on {}", stopped.why),
        }
        let (counts, left, programs) = shutdown(loaded, &mut ring, &mut handle, &tally).await?;
        Ok::<_, anyhow::Error>((stopped, counts, left, ring.waits().clone(), programs))
    })?;
    for s in opts.sinks.iter_mut() {
        s.flush()?;
    }
    let tally = tally.into_inner();
    let (forks, forks_unwatched) = stats::forks(&final_counts);
    let account = stats::RunAccount {
        sites: stats::per_site(&planning.plan, &final_counts, &tally),
        headerless: tally.headerless,
        reader_waits: waits.records,
        reader_longest_wait_ns: waits.longest.as_nanos() as u64,
        uncommitted_at_exit: left.uncommitted,
        blocked_at_exit: left.blocked,
        forks,
        forks_unwatched,
        programs,
    };
    eprint!("{}", account.summary());
    std::io::stderr().flush().ok();
    if let Some(e) = sink_err {
        bail!("writing events failed: {e}");
    }
    if let Some(steps_file) = &opts.story {
        let steps = match steps_file {
            Some(p) => crate::correlate::story::read_steps(p).map_err(anyhow::Error::msg)?,
            None => Vec::new(),
        };
        let story = crate::correlate::story::build(&kept, &steps);
        print!("{}", crate::report::text(&story, &kept, &steps));
    }
    Ok(stopped.code)
}
