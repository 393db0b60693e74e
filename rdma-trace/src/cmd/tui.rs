//! `rdma-trace tui`: the screens over a capture (with time controls), a daemon, or a live
//! trace in this process. The source runs on this thread; the screen on its own.

use crate::capture::Record;
use crate::cli::TuiArgs;
use crate::sink::Sink;
use crate::source::capture::Reader;
use crate::tui::{self, Control, Feeder};
use anyhow::{Context, Result};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long `--connect` keeps trying a daemon that is not there yet.
const CONNECT_FOR: Duration = Duration::from_secs(600);

/// `rdma-trace tui`: returns the exit status.
pub fn run(a: TuiArgs) -> Result<i32> {
    use std::io::IsTerminal;
    // The screen needs a terminal to draw on and to read keys from: without one (a pipe, a
    // CI step, `< /dev/null`) it could neither show anything nor be told to stop.
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        eprintln!(
            "rdma-trace tui: needs a terminal (stdin and stdout); for a stream without one use `rdma-trace trace` (--connect SOCKET for a daemon), or `story`/`report` for a file"
        );
        return Ok(2);
    }
    if let Some(file) = &a.file {
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let (feeder, rx) = tui::channel(name, true);
        let control = feeder.control.clone();
        let screen = std::thread::spawn(move || tui::screen(rx, control, true));
        let fed = replay(file, feeder);
        let shown = screen.join().map_err(|_| anyhow::anyhow!("the screen thread panicked"))?;
        fed?;
        said(a.verbose, shown?);
        return Ok(0);
    }
    if a.connect.len() > 1 {
        return several(a.connect, a.verbose);
    }
    if let Some(socket) = a.connect.first() {
        let (mut feeder, rx) = tui::channel(format!("daemon {}", socket.display()), false);
        let control = feeder.control.clone();
        let socket = socket.clone();
        // The screen opens at once; the daemon may still be starting (a lab guest booting):
        // the connection is retried for a while, and said on the status line.
        std::thread::spawn(move || {
            feeder.model.finished = Some("connecting…".into());
            feeder.offer(true);
            let input = connect(&socket, &mut |waiting| {
                feeder.model.finished = Some(waiting.into());
                feeder.offer(true);
            });
            match input {
                Ok(input) => {
                    feeder.model.finished = None;
                    follow(Reader::new(input, false), feeder)
                }
                Err(why) => feeder.finished(why.to_string()),
            }
        });
        said(a.verbose, tui::screen(rx, control, false)?);
        return Ok(0);
    }
    live(a)
}

/// Opens a source: a daemon's socket is tried again for a while (it may still be starting:
/// a lab guest booting), and `waiting` is told while it is; ssh and files are tried once.
fn connect(
    socket: &Path,
    waiting: &mut dyn FnMut(&str),
) -> Result<Box<dyn std::io::BufRead + Send>, crate::serve::client::ConnectError> {
    use crate::serve::client::{ConnectError, Source};
    let t0 = Instant::now();
    let source = Source::parse(socket)?;
    loop {
        match source.open(crate::serve::Want::Both) {
            Ok(i) => return Ok(i),
            // Nobody listening yet: a daemon (a lab guest) may still be starting.
            Err(ConnectError::Unreachable { .. }) if t0.elapsed() <= CONNECT_FOR => {
                waiting("waiting for the daemon…");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(why) => return Err(why),
        }
    }
}

/// Several daemons on one screen: each connected and read on its own thread, their
/// records placed onto the first's clock and marked with their host (`pipeline::merge::Merge`) and fed to one story.
fn several(sockets: Vec<std::path::PathBuf>, verbose: bool) -> Result<i32> {
    use crate::pipeline::merge::Merge;
    use crate::serve::merge::{self, Tagged};
    let (mut feeder, rx) = tui::channel(format!("{} daemons", sockets.len()), false);
    let control = feeder.control.clone();
    std::thread::spawn(move || {
        let (tx, records) = std::sync::mpsc::channel();
        for (i, socket) in sockets.iter().cloned().enumerate() {
            let tx = tx.clone();
            std::thread::spawn(move || match connect(&socket, &mut |_| {}) {
                Ok(input) => merge::spawn(i, Reader::new(input, false), tx),
                Err(why) => drop(tx.send(Tagged::Ended(i, why.to_string()))),
            });
        }
        drop(tx);
        feeder.model.hosts = sockets.iter().map(|s| tui::HostLine::waiting(s)).collect();
        feeder.model.finished = Some("connecting…".into());
        feeder.offer(true);
        let mut merge = Merge::new(sockets.len());
        feeder.engine.settle_only();
        loop {
            // Not only when a record comes: what the last one settled is shown too.
            let t = match records.recv_timeout(Duration::from_millis(50)) {
                Ok(t) => Some(t),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => None,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            };
            match t {
                None => {}
                Some(Tagged::Record(i, r)) => {
                    for (j, r) in merge.take(i, r) {
                        if matches!(r, Record::Trailer(_)) {
                            // Its last record: it holds the others back no more.
                            merge.ended(j);
                        }
                        feed_one(&mut feeder, &merge, j, r);
                    }
                }
                Some(Tagged::Ended(i, why)) => {
                    merge.ended(i);
                    feeder.model.hosts[i].ended = Some(why);
                }
            }
            if let Some(t) = merge.settled() {
                feeder.engine.settle(t);
            }
            feeder.offer(false);
        }
        feeder.finished("every daemon's stream ended".into());
        feeder.serve_until_quit();
    });
    said(verbose, tui::screen(rx, control, false)?);
    Ok(0)
}

/// One placed record of source `i` into the model.
fn feed_one(feeder: &mut Feeder, merge: &crate::pipeline::merge::Merge, i: usize, r: Record) {
    match r {
        Record::Header(h) => {
            let placement = merge.placements[i].as_ref();
            feeder.model.host(i, &h, placement);
            if i == 0 {
                feeder.header(&h).ok();
            }
            feeder.model.finished = None;
        }
        Record::Stats(s) => feeder.model.host_stats(i, &s.sites),
        Record::Loss(l) if l.site == crate::capture::LossSite::Subscriber => {
            feeder.model.host_not_sent(i, l.count);
            feeder.offer(true);
        }
        Record::Trailer(t) => {
            feeder.model.host_stats(i, &t.sites);
            feeder.model.hosts[i].ended = Some(format!("stopped on {}", t.stopped));
        }
        // the feeder's methods cannot fail
        r => drop(feeder.record(r)),
    }
}

/// Waits while paused (a step lets one event through); false when told to stop or jump.
fn wait_paused(c: &Control, feeder: &mut Feeder) -> bool {
    while c.paused.load(Ordering::Relaxed) {
        if c.quit.load(Ordering::Relaxed)
            || c.restart.load(Ordering::Relaxed)
            || c.to_end.load(Ordering::Relaxed)
        {
            return false;
        }
        if c.steps.load(Ordering::Relaxed) > 0 {
            c.steps.fetch_sub(1, Ordering::Relaxed);
            return true;
        }
        feeder.offer(true);
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// The replay clock: event time `ts` is due at `anchor.0 + (ts − anchor.1) / speed`.
struct Clock {
    anchor: Option<(Instant, u64)>,
    speed_x10: u32,
}

impl Clock {
    /// Sleeps (in slices, offering snapshots and watching the keys) until `ts` is due.
    fn until(&mut self, ts: u64, c: &Control, feeder: &mut Feeder) {
        loop {
            if c.to_end.load(Ordering::Relaxed)
                || c.quit.load(Ordering::Relaxed)
                || c.restart.load(Ordering::Relaxed)
            {
                return;
            }
            let speed = c.speed_x10.load(Ordering::Relaxed).max(1);
            if speed != self.speed_x10 || c.paused.load(Ordering::Relaxed) {
                self.anchor = None;
                self.speed_x10 = speed;
            }
            let (t0, ts0) = *self.anchor.get_or_insert((Instant::now(), ts));
            let due = t0 + Duration::from_nanos(ts.saturating_sub(ts0).saturating_mul(10) / speed as u64);
            let now = Instant::now();
            if due <= now {
                return;
            }
            feeder.offer(false);
            std::thread::sleep((due - now).min(Duration::from_millis(20)));
        }
    }
}

/// Plays a capture at its recorded pace (× the speed keys), as often as asked.
fn replay(file: &Path, mut feeder: Feeder) -> Result<()> {
    let c = feeder.control.clone();
    'again: loop {
        feeder.reset();
        c.restart.store(false, Ordering::Relaxed);
        c.to_end.store(false, Ordering::Relaxed);
        let input = crate::source::capture::open(file)
            .map_err(|e| crate::cli::BadInput(format!("opening {}: {e}", file.display())))?;
        let mut reader = Reader::new(input, false);
        let mut clock = Clock { anchor: None, speed_x10: 10 };
        let mut n = 0;
        for rec in reader.by_ref() {
            if c.quit.load(Ordering::Relaxed) {
                return Ok(());
            }
            if c.restart.load(Ordering::Relaxed) {
                continue 'again;
            }
            match rec.with_context(|| file.display().to_string())? {
                Record::Header(h) => feeder.header(&h)?,
                Record::Event(e) => {
                    if !c.to_end.load(Ordering::Relaxed) {
                        if !wait_paused(&c, &mut feeder) {
                            clock.anchor = None;
                        }
                        clock.until(e.ts_ns, &c, &mut feeder);
                    }
                    n += 1;
                    feeder.model.position = Some((n, 0));
                    feeder.event(&e)?;
                }
                Record::Step(s) => feeder.step(&s.step)?,
                Record::Stats(s) => feeder.stats(&s)?,
                Record::Loss(l) => feeder.loss(&l)?,
                Record::Trailer(t) => feeder.trailer(&t)?,
                // A late joiner's capture (`trace --connect -o`): what existed before it.
                Record::State(st) => feeder.state(&st)?,
            }
        }
        let notes = reader.report.notes();
        feeder.finished(if notes.is_empty() { "end of the capture".into() } else { notes.join("; ") });
        loop {
            if c.quit.load(Ordering::Relaxed) {
                return Ok(());
            }
            if c.restart.load(Ordering::Relaxed) {
                continue 'again;
            }
            // The screen may still ask the story (`e`).
            feeder.offer(false);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A daemon's stream into the model (its state first).
fn follow(mut reader: Reader<Box<dyn std::io::BufRead + Send>>, mut feeder: Feeder) {
    for rec in reader.by_ref() {
        let Ok(rec) = rec else { break };
        // the feeder's methods cannot fail
        feeder.record(rec).ok();
    }
    if feeder.model.finished.is_none() {
        feeder.finished("the daemon's stream ended".into());
    }
    feeder.serve_until_quit();
}

/// Tracing here: the tracer starts (its notices printed before the screen opens), runs on
/// this thread into the model, and stops when the screen quits.
fn live(a: TuiArgs) -> Result<i32> {
    use crate::live::trace::TraceOptions;
    let log = super::private_dir()?.join(format!("tui-{}.log", std::process::id()));
    let opts = TraceOptions {
        probes: a.probes.clone(),
        pids: a.pids.clone(),
        command: a.command.clone(),
        duration: None,
        ring_bytes: 4 << 20,
        return_instances: crate::live::kprobe_events::DEFAULT_INSTANCES,
        stack_ids: false,
        watch_verbs_users: false,
        counted: false,
        command_log: (!a.command.is_empty()).then(|| log.clone()),
        run_as: crate::live::spawn::RunAs::choose(None)?,
    };
    let Some(tracer) = super::start::tracer(opts)? else { return Ok(2) };
    let (mut feeder, rx) = tui::channel("live".into(), false);
    feeder.header(&tracer.header())?;
    let control = feeder.control.clone();
    let screen = std::thread::spawn(move || {
        let r = tui::screen(rx, control, false);
        // SAFETY: kill(2) of this process: SIGINT stops the tracer, which detaches.
        unsafe { libc::kill(std::process::id() as i32, libc::SIGINT) };
        r
    });
    let finished = tracer.run(&mut |_| {}, &mut feeder)?;
    // Stopped with the command, the screen stays (and may still ask the story) until `q`.
    feeder.serve_until_quit();
    let shown = screen.join().map_err(|_| anyhow::anyhow!("the screen thread panicked"))?;
    eprint!("{}", finished.account.summary());
    if !a.command.is_empty() {
        eprintln!("rdma-trace: the command's output is in {}", log.display());
    }
    said(a.verbose, shown?);
    Ok(0)
}

/// The screen's own account at exit (frames, keys, snapshots), with `--verbose` only.
fn said(verbose: bool, frames: tui::Frames) {
    if verbose {
        eprintln!("rdma-trace tui: {frames}");
    }
}
