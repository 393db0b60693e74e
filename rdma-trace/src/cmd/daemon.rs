//! `rdma-trace daemon`: the tracer with a broadcaster as its output, serving subscribers on
//! a Unix socket until SIGINT/SIGTERM (or `--duration`); then every subscriber gets the
//! trailer.

use super::start::print_notice;
use super::trace::trailer;
use crate::capture::{ClockSample, Header, Loss, LossReason, LossSite, Stats, Trailer};
use crate::cli::DaemonArgs;
use crate::event::Event;
use crate::live::kprobe_events::MAX_INSTANCES;
use crate::live::trace::TraceOptions;
use crate::output::fanout::{FanOut, OnError};
use crate::output::jsonl::Jsonl;
use crate::output::queued::{QUEUE, Queued};
use crate::serve::socket::Listener;
use crate::serve::{Broadcaster, ServeNotice};
use crate::sink::Sink;
use anyhow::{Context, Result, bail};
use std::io::Write;
use std::sync::mpsc::Receiver;

/// The broadcaster, the optional capture file, and the operator's notices (printed each
/// tick: who joined, who left and what they lost, who was refused).
struct Outputs {
    broadcaster: Broadcaster,
    /// `-o`: on its own thread behind a bounded queue, as `trace`'s outputs. Left behind
    /// when writing it fails: the subscribers are served on without it.
    file: FanOut,
    refusals: Receiver<String>,
}

impl Outputs {
    fn each(&mut self, f: impl Fn(&mut dyn Sink) -> std::io::Result<()>) -> std::io::Result<()> {
        f(&mut self.broadcaster)?;
        self.file(f);
        Ok(())
    }

    /// A record to the capture file, unless writing it failed before.
    fn file(&mut self, f: impl Fn(&mut dyn Sink) -> std::io::Result<()>) {
        f(&mut self.file).ok(); // it leaves a failed file behind; it never fails itself
        let failed: Vec<(String, String)> =
            self.file.newly_failed().iter().map(|f| (f.name.clone(), f.error.clone())).collect();
        for (name, e) in failed {
            self.file_lost(&name, &e);
        }
    }

    /// The capture file failed: said once on stderr and to every subscriber (a loss record
    /// of `output capture`, which the metrics count).
    fn file_lost(&mut self, name: &str, e: &str) {
        eprintln!(
            "rdma-trace daemon: writing the {name} file failed: {e}; serving the subscribers on without it"
        );
        let lost = Loss {
            v: crate::capture::VERSION,
            ty: "loss".into(),
            site: LossSite::Output(name.into()),
            reason: LossReason::Other(FILE_FAILED.into()),
            count: 1,
            ..Default::default()
        };
        self.broadcaster.loss(&lost).ok();
    }

    fn say(&mut self) {
        for n in self.broadcaster.notices() {
            match n {
                ServeNotice::Joined { peer, at_seq } => {
                    eprintln!("rdma-trace daemon: subscriber {peer} joined at record {at_seq}")
                }
                ServeNotice::Left { peer, lost } => {
                    eprintln!(
                        "rdma-trace daemon: subscriber {peer} left ({lost} records it had not been sent)"
                    )
                }
                ServeNotice::NotSeeded(why) => {
                    eprintln!("rdma-trace daemon: the state sent has only what events showed: {why}")
                }
                ServeNotice::Refused { peer, why } => {
                    eprintln!("rdma-trace daemon: subscriber {peer} {why}")
                }
            }
        }
        while let Ok(r) = self.refusals.try_recv() {
            eprintln!("rdma-trace daemon: {r}");
        }
    }
}

impl Sink for Outputs {
    fn event(&mut self, ev: &std::sync::Arc<Event>) -> std::io::Result<()> {
        self.each(|s| s.event(ev))
    }
    fn step(&mut self, st: &crate::steps::StepRecord) -> std::io::Result<()> {
        self.each(|s| s.step(st))
    }
    fn stats(&mut self, st: &Stats) -> std::io::Result<()> {
        self.each(|s| s.stats(st))
    }
    fn loss(&mut self, l: &Loss) -> std::io::Result<()> {
        self.each(|s| s.loss(l))
    }
    fn trailer(&mut self, t: &Trailer) -> std::io::Result<()> {
        self.each(|s| s.trailer(t))
    }
    fn processes_gone(&mut self, pids: &[u32], ts_ns: u64) -> std::io::Result<()> {
        self.broadcaster.processes_gone(pids, ts_ns)
    }
    fn counted(&mut self, c: &crate::sink::Counted) -> std::io::Result<()> {
        self.broadcaster.counted(c)
    }
    fn tick(&mut self) -> std::io::Result<()> {
        self.say();
        self.each(|s| s.tick())?;
        // What a reading of the kernel's tables added to the story, as the subscribers got it.
        for piece in self.broadcaster.taken_in() {
            self.file(|s| s.state(&piece));
        }
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.each(|s| s.flush())
    }
}

/// `rdma-trace daemon`: returns the exit status.
pub fn run(a: DaemonArgs) -> Result<i32> {
    if !a.ring_kib.is_power_of_two() || a.ring_kib < 4 {
        crate::bad_input!("--ring-kib must be a power of two ≥ 4 (got {})", a.ring_kib);
    }
    if !(1..=MAX_INSTANCES).contains(&a.kretprobe_instances) {
        crate::bad_input!(
            "--kretprobe-instances must be 1..={MAX_INSTANCES} (got {})",
            a.kretprobe_instances
        );
    }
    super::trace::rotation(a.max_size.as_deref(), a.rotate)?;
    if a.max_size.is_some() && a.output.as_deref().is_none_or(|o| o == std::path::Path::new("-")) {
        crate::bad_input!("--max-size needs -o FILE");
    }
    let opts = TraceOptions {
        probes: a.probes.clone(),
        pids: Vec::new(),
        command: Vec::new(),
        duration: a.duration.map(std::time::Duration::from_secs_f64),
        ring_bytes: a.ring_kib * 1024,
        return_instances: a.kretprobe_instances,
        stack_ids: false,
        // A counting run needs no syscalls: they join what it does not stream.
        watch_verbs_users: !a.metrics_only,
        counted: a.metrics_only,
        command_log: None,
        run_as: None,
    };
    let Some(tracer) = super::start::tracer(opts)? else { return Ok(2) };
    let listener = Listener::bind(&a.socket, &a.allow_uids)
        .with_context(|| format!("listening on {}", a.socket.display()))?;
    eprintln!("rdma-trace daemon: serving on {} (SIGINT or SIGTERM stops)", listener.path().display());
    let (joins_tx, joins) = std::sync::mpsc::channel();
    let (refusals_tx, refusals) = std::sync::mpsc::channel();
    let socket = listener.path().to_path_buf();
    if let Some(port) = &a.virtio_port {
        crate::serve::virtio::serve(port, joins_tx.clone(), refusals_tx.clone())
            .with_context(|| format!("opening {}", port.display()))?;
        eprintln!("rdma-trace daemon: serving the host on {}", port.display());
    }
    listener.serve(joins_tx, refusals_tx);
    // Metrics first: they also answer a peer's clock question, asked while both start.
    let metrics = match &a.metrics {
        Some(addr) => {
            let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
            let bound = crate::serve::http::serve(addr, text.clone())
                .with_context(|| format!("serving metrics on {addr}"))?;
            eprintln!(
                "rdma-trace daemon: metrics on http://{bound}/metrics (its clock on {})",
                crate::clock::PATH
            );
            Some(text)
        }
        None => None,
    };
    let header = Header { clocks: clocks(&a.clock_peers), ..tracer.header() };
    let mut file = FanOut::default();
    if let Some(p) = &a.output {
        let rotation = super::trace::rotation(a.max_size.as_deref(), a.rotate)?;
        let mut w = Jsonl::create(p, rotation).with_context(|| format!("creating {}", p.display()))?;
        w.header(&header)?;
        file.push(Queued::new("capture", Box::new(w), QUEUE), OnError::LeaveBehind);
    }
    let mut broadcaster = Broadcaster::new(header, joins)
        .seeded_by(Box::new(crate::live::seed::now))
        .with_queue(a.subscriber_queue)
        .revealing(a.show_kernel_addresses);
    if let Some(text) = metrics {
        broadcaster = broadcaster.with_metrics(text);
    }
    let mut out = Outputs { broadcaster, file, refusals };
    let mut finished = tracer.run(&mut print_notice, &mut out)?;
    let t = std::time::Instant::now();
    let closed = match &finished.consumer_error {
        None => out.trailer(&trailer(&finished)).and_then(|()| out.flush()),
        Some(_) => Ok(()),
    };
    out.say();
    let subscribers = out.broadcaster.subscribers();
    let cut = out.broadcaster.close();
    finished.stopping.push(crate::live::trace::StopPhase::new("ending the streams", t.elapsed()));
    std::fs::remove_file(&socket).ok();
    let sent = crate::units::count((subscribers - cut.len()) as u64, "subscriber");
    eprintln!("rdma-trace daemon: the trailer went to {sent}");
    for peer in cut {
        let wait = crate::units::duration(crate::serve::CLOSE_WAIT.as_nanos() as u64);
        eprintln!("rdma-trace daemon: subscriber {peer} was not reading: cut off after {wait}");
    }
    for q in out.file.queued() {
        finished.account.note_left_out(q.name(), &q.left_out_rows);
    }
    eprint!("{}", finished.account.summary());
    for l in out.file.left_out_lines() {
        eprintln!("rdma-trace daemon: {l}");
    }
    for f in out.file.failed() {
        eprintln!(
            "rdma-trace daemon: the capture file failed ({}): {} records were not written to it",
            f.error, f.not_given
        );
    }
    // A stop that took over a second says where the time went.
    if let Some(l) = crate::live::trace::stopping_line(&finished.stopping, std::time::Duration::from_secs(1))
    {
        eprintln!("rdma-trace daemon: {l}");
    }
    std::io::stderr().flush().ok();
    if let Some(e) = finished.consumer_error {
        bail!("{e}; the daemon stopped");
    }
    closed?;
    Ok(finished.stopped.code)
}

/// The loss reason of a capture file that could not be written.
pub const FILE_FAILED: &str = "write failed";

/// How long a peer's daemon may take to answer its clock (it may still be attaching).
const CLOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(90);

/// Each `--clock-peer` measured (all at once: each may wait for its peer to start); one that
/// never answers is said and left out, and tracing goes on.
fn clocks(peers: &[String]) -> Vec<ClockSample> {
    let asked: Vec<_> = peers
        .iter()
        .map(|p| {
            let p = p.clone();
            std::thread::spawn(move || (crate::clock::measure(&p, CLOCK_WAIT), p))
        })
        .collect();
    let mut out = Vec::new();
    for h in asked {
        match h.join() {
            Ok((Ok(c), _)) => {
                eprintln!(
                    "rdma-trace daemon: the clock of {} ({}) is {} from this one's ({} samples)",
                    c.hostname,
                    c.peer,
                    crate::clock::describe(&c),
                    c.samples
                );
                out.push(c);
            }
            Ok((Err(e), p)) => eprintln!("rdma-trace daemon: the clock of {p} is not known: {e:#}"),
            Err(_) => {}
        }
    }
    out
}
