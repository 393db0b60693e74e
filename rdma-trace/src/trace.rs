//! `rdma-trace trace`: attach, stream events through decode → enrich → correlate → sinks
//! until Ctrl-C, SIGTERM, the duration, or the traced command's exit. Nothing captured
//! is lost at shutdown: the ring is drained after detaching the signal wait.

use crate::correlate::Correlator;
use crate::enrich::Enricher;
use crate::fds::FdCache;
use crate::ksyms::Ksyms;
use crate::sink::Sink;
use crate::source::Ring;
use crate::{decode, kernel, setup, stats, syscalls};
use anyhow::{Context, Result, bail};
use std::io::Write;
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};

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
    let mut delivered = 0u64;
    let mut undecodable = 0u64;
    // Records read from the ring (decodable or not): at shutdown, compared with what the
    // programs committed.
    let records = std::cell::Cell::new(0u64);
    let mut sink_err: Option<std::io::Error> = None;
    let mut kept: Vec<crate::event::Event> = Vec::new();
    let keep = opts.story.is_some();
    let exit_code = rt.block_on(async {
        let mut ring = ring.into_async()?;
        let mut sigint = signal(SignalKind::interrupt())?;
        let mut sigterm = signal(SignalKind::terminate())?;
        let deadline = opts.duration.map(|d| tokio::time::Instant::now() + d);
        let mut child_handle = child.map(|(c, release)| {
            let mut release = release;
            let _ = release.write_all(b"\n"); // lets the child run
            c
        });
        let mut handle = |b: &[u8]| {
            records.set(records.get() + 1);
            match decode::decode(b) {
                Ok(raw) => {
                    if let Some(ev) = enricher.event(&raw) {
                        let ev = correlator.feed(ev);
                        delivered += 1;
                        for s in opts.sinks.iter_mut() {
                            if let Err(e) = s.event(&ev) {
                                sink_err.get_or_insert(e);
                            }
                        }
                        if keep {
                            kept.push(ev);
                        }
                    }
                }
                Err(_) => undecodable += 1,
            }
        };
        let mut code = 0;
        let stop: String;
        loop {
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = ring.next_batch(&mut handle) => { r?; }
                // Watchdog: a record whose producer never commits it sends no wakeup.
                _ = tokio::time::sleep(Duration::from_millis(250)) => { ring.drain_now(&mut handle); }
                _ = sigint.recv() => { stop = "SIGINT".into(); break }
                _ = sigterm.recv() => { stop = "SIGTERM".into(); break }
                _ = sleep => { stop = "the duration elapsed".into(); break }
                _ = tokio::time::sleep(Duration::from_millis(100)), if child_handle.is_some() => {
                    if let Some(c) = child_handle.as_mut()
                        && let Some(st) = c.try_wait()?
                    {
                        code = st.code().unwrap_or(1);
                        stop = format!("the command exited (pid {}, {st})", c.id());
                        // Give in-flight completions (kworkers) a moment, then stop.
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        break;
                    }
                }
            }
        }
        let still = child_handle.as_mut().and_then(|c| c.try_wait().ok().flatten().is_none().then(|| c.id()));
        match still {
            Some(pid) => eprintln!("rdma-trace: stopped on {stop}; the command (pid {pid}) is still running"),
            None => eprintln!("rdma-trace: stopped on {stop}"),
        }
        // Detach, let programs in flight finish, then read to the last committed record.
        let counters = loaded.detach_keep_counters()?;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let final_counts = counters.read()?;
        let expected = stats::committed(&final_counts);
        ring.drain_all(&mut handle, || records.get(), expected, Duration::from_secs(3)).await;
        let stuck = ring.stuck().clone();
        if stuck.skipped > 0 {
            let what = stuck
                .first
                .as_deref()
                .and_then(|b| decode::decode(b).ok())
                .map(|r| {
                    let h = r.header();
                    let slot = planning.plan.by_slot(h.slot as usize).map(|p| p.spec.id).unwrap_or("?");
                    format!("first: kind {} slot {} ({slot}) pid {} tid {}", h.kind, h.slot, h.tgid, h.tid)
                })
                .unwrap_or_else(|| "first: header not yet written".into());
            eprintln!(
                "rdma-trace: {} records stayed uncommitted in the ring for over {} ms and were skipped ({what})",
                stuck.skipped,
                crate::source::STUCK_AFTER.as_millis()
            );
        }
        let missing = expected.saturating_sub(records.get() + stuck.skipped);
        if missing > 0 {
            eprintln!("rdma-trace: {missing} events committed by the kernel never reached the reader (still being written at exit)");
        }
        Ok::<(i32, Vec<u64>), anyhow::Error>((code, final_counts))
    })?;
    let (exit_code, final_counts) = exit_code;
    for s in opts.sinks.iter_mut() {
        s.flush()?;
    }
    let st = stats::per_site(&planning.plan, &final_counts);
    eprint!("{}", stats::summary(&st, delivered, undecodable));
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
    Ok(exit_code)
}
