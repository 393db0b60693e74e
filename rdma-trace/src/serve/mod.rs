//! Serving a running trace to subscribers (`rdma-trace daemon`): the capture stream, format
//! v1, over a byte stream. Each subscriber gets its own preamble — a header, then the state
//! of what is pinned and mapped when it joined — and from then on the shared records,
//! numbered as the daemon numbers them, so two subscribers can be compared record by
//! record.
//!
//! The broadcaster is a `Sink` of the tracer: it formats each record once and offers it to
//! every subscriber's bounded queue without waiting. A subscriber that falls behind loses
//! records, never slows the daemon or the others, and is told how many with a loss record
//! (site `subscriber`) when it catches up.

use crate::event::FieldId;
pub mod client;
pub mod http;
pub(crate) mod merge;
pub(crate) mod seeder;
pub mod socket;
pub(crate) mod virtio;

use crate::capture::{Header, Loss, ProcessState, SiteCount, Stats, Trailer};
use crate::event::Event;
use crate::output::jsonl::Jsonl;
use crate::pipeline::correlate::engine::{Engine, Limits};
use crate::sink::Sink;
use std::io::{self, Write};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};

/// Records queued per subscriber before it starts losing them.
pub const QUEUE: usize = 65_536;
/// Subscribers served at once; past this a new one is refused in one line.
pub(crate) const MAX_SUBSCRIBERS: usize = 64;
/// How long the end of a run waits for subscribers to be written out (their last
/// records, the trailer) before the daemon ends regardless: a subscriber that stopped
/// reading cannot hold SIGTERM or `--duration` back. Half a second: a daemon asked to stop
/// stops within a second whatever its subscribers do (issue 41); one reading at all has its
/// queue's last records written by then.
pub const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_millis(500);
/// How long a joiner that wants the state waits for the kernel's tables to be read; past
/// it, it is joined with what the events showed, and told so.
pub const SEED_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// As `SEED_WAIT`, for joiners still waiting when the run ends.
pub(crate) const SEED_WAIT_AT_END: std::time::Duration = std::time::Duration::from_millis(500);

/// What a subscriber asks for in its hello line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Want {
    /// The live records only (after the header).
    Events,
    /// The state when it joined, then the live records.
    Both,
}

/// The first line a subscriber sends.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Hello {
    /// Always "rdma-trace".
    pub hello: String,
    /// The newest capture format version the subscriber reads.
    pub version: u32,
    pub want: Want,
    /// Kernel addresses as stand-ins (`trace --connect --redact`), whoever asks.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redact: bool,
}

impl Hello {
    /// A hello for this build's format, asking for `want`.
    pub fn new(want: Want) -> Self {
        Hello { hello: "rdma-trace".into(), version: crate::capture::VERSION, want, redact: false }
    }
}

/// A subscriber accepted by the listener, waiting to be joined at a record boundary.
pub struct Joining {
    pub out: Box<dyn Write + Send>,
    pub hello: Hello,
    /// Who it is, for the daemon's notices (pid and uid from SO_PEERCRED).
    pub peer: String,
    /// Its uid (SO_PEERCRED; the host's end of a virtio port counts as root): one that is
    /// not root gets kernel addresses as stand-ins unless the daemon reveals them.
    pub uid: u32,
}

struct Subscriber {
    queue: SyncSender<Arc<[u8]>>,
    /// Sent the stream with kernel addresses replaced (`pipeline::redact`).
    redacted: bool,
    /// Records it lost since it was last told, and the number of the last one.
    dropped: u64,
    last_dropped_seq: u64,
    worker: std::thread::JoinHandle<()>,
    peer: String,
}

/// What the broadcaster has to say to the daemon's operator.
#[derive(Debug)]
pub enum ServeNotice {
    Joined {
        peer: String,
        at_seq: u64,
    },
    Left {
        peer: String,
        lost: u64,
    },
    /// The kernel's resource tables could not be read for a subscriber's state.
    NotSeeded(String),
    /// Not served (the cap on subscribers, no thread for it).
    Refused {
        peer: String,
        why: String,
    },
}

pub use seeder::Seed;

/// The daemon's side: hands the stream to every subscriber, each behind its own queue.
pub struct Broadcaster {
    format: Jsonl<Vec<u8>>,
    header: Header,
    story: Engine,
    joins: Receiver<Joining>,
    subs: Vec<Subscriber>,
    notices: Vec<ServeNotice>,
    /// Reads the kernel's tables off this thread (`seeder`), when `seeded_by`.
    seeder: Option<seeder::Seeder>,
    /// Joiners that want the state, since when, until a reading of the kernel serves them.
    waiting: Vec<(std::time::Instant, Joining)>,
    /// Joiners were joined without a reading (it took too long): the first reading that
    /// began after this one's arrival is taken in when it comes, for everyone.
    owed: Option<std::time::Instant>,
    /// MRs deregistered lately (restrack ids the `mr_dereg` tracepoint named), and when:
    /// a reading that began before one cannot bring it back.
    deregs: std::collections::VecDeque<(std::time::Instant, u32)>,
    /// When each process last registered or deregistered memory (its pin and teardown
    /// events): one busy while a reading ran gets nothing from it (`seeder::complement`).
    last_pin: std::collections::HashMap<u32, std::time::Instant>,
    /// What readings added to the story since `taken_in` was last asked, in the pieces the
    /// subscribers got (for the daemon's capture file).
    taken: Vec<crate::capture::State>,
    /// The Prometheus exposition, renewed with every stats record.
    metrics: Option<Arc<std::sync::Mutex<String>>>,
    /// A counting run's latest kernel counts: the metrics are rendered from these.
    counted: Option<crate::sink::Counted>,
    /// Records each subscriber may fall behind by before it loses any.
    queue: usize,
    /// Subscribers that are not root get kernel addresses too (`--show-kernel-addresses`).
    reveal: bool,
    /// The stream as redacted subscribers get it: formatted in step with `format` (the same
    /// numbers) while one is connected.
    hidden: Option<Jsonl<Vec<u8>>>,
    redactor: crate::pipeline::redact::Redactor,
    /// What the daemon's own outputs lost (its `output …` loss records), for the metrics.
    outputs_lost: std::collections::BTreeMap<(crate::capture::LossSite, crate::capture::LossReason), u64>,
}

impl Broadcaster {
    /// The shared stream starts at record 2: a subscriber joining first gets its header
    /// and state as records 0 and 1.
    pub fn new(header: Header, joins: Receiver<Joining>) -> Self {
        Broadcaster {
            format: Jsonl::starting_at(Vec::new(), 2),
            header,
            story: Engine::new(Vec::new(), Limits::default()),
            joins,
            subs: Vec::new(),
            notices: Vec::new(),
            seeder: None,
            waiting: Vec::new(),
            owed: None,
            deregs: Default::default(),
            last_pin: Default::default(),
            taken: Vec::new(),
            metrics: None,
            counted: None,
            queue: QUEUE,
            reveal: false,
            hidden: None,
            redactor: Default::default(),
            outputs_lost: Default::default(),
        }
    }

    /// Subscribers that are not root get the kernel addresses too (else stand-ins).
    pub fn revealing(mut self, reveal: bool) -> Self {
        self.reveal = reveal;
        self
    }

    /// How far (records) a subscriber may fall behind before it loses records.
    pub(crate) fn with_queue(mut self, records: usize) -> Self {
        self.queue = records.max(1);
        self
    }

    /// Keeps `text` the current metrics exposition (`output::metrics`).
    pub fn with_metrics(mut self, text: Arc<std::sync::Mutex<String>>) -> Self {
        self.metrics = Some(text);
        self
    }

    /// Completes the story with what the kernel holds (see `seeder::complement`), read on a
    /// thread of its own (`seeder`) when subscribers join. Without that thread, nothing is
    /// seeded, and the notice says why.
    pub fn seeded_by(mut self, seed: Seed) -> Self {
        match seeder::Seeder::spawn(seed) {
            Ok(s) => self.seeder = Some(s),
            Err(e) => self.notices.push(ServeNotice::NotSeeded(format!("no thread to read them on ({e})"))),
        }
        self
    }

    /// Notices since the last call.
    pub fn notices(&mut self) -> Vec<ServeNotice> {
        std::mem::take(&mut self.notices)
    }

    /// Joins waiting subscribers here, between two records: each gets its preamble,
    /// numbered just before the next shared record. One that wants the state waits (not
    /// this thread) for a reading of the kernel's tables that began after it arrived,
    /// `SEED_WAIT` at most; at the end of the run, `SEED_WAIT_AT_END`. A reading is taken
    /// into the story (`take_in`) before anyone is joined with it; one that comes after
    /// its joiners gave up on it is taken in when it comes.
    fn admit(&mut self, ending: bool) -> io::Result<()> {
        let now = std::time::Instant::now();
        while let Ok(mut j) = self.joins.try_recv() {
            if self.subs.len() + self.waiting.len() >= MAX_SUBSCRIBERS {
                let why = format!("refused: {MAX_SUBSCRIBERS} subscribers already (this daemon's limit)");
                writeln!(j.out, "rdma-trace daemon: {why}").ok();
                self.notices.push(ServeNotice::Refused { peer: j.peer, why });
                continue;
            }
            match (j.hello.want, self.seeder.is_some()) {
                (Want::Both, true) => self.waiting.push((now, j)),
                (Want::Both, false) => {
                    let state = self.story.state();
                    self.join(j, Some(&state))?;
                }
                (Want::Events, _) => self.join(j, None)?,
            }
        }
        while let Some(oldest) = self.waiting.iter().map(|w| w.0).min() {
            let Some(seeder) = self.seeder.as_mut() else { break };
            let reading = match ending {
                true => seeder.wait(oldest, now + SEED_WAIT_AT_END),
                false => seeder.since(oldest),
            };
            let reading = if reading.is_some() { seeder.take() } else { None };
            // The state joiners get: what `take_in` read of the story when it added nothing.
            let mut current = None;
            let served = match reading {
                Some(r) => {
                    current = self.take_in(r.began, r.found)?;
                    let (served, left) =
                        std::mem::take(&mut self.waiting).into_iter().partition(|w| w.0 <= r.began);
                    self.waiting = left;
                    served
                }
                None => {
                    // Waited too long: joined with what the events showed; the reading is
                    // taken in when it comes.
                    let waited = if ending { std::time::Duration::ZERO } else { SEED_WAIT };
                    let (late, left): (Vec<_>, _) = std::mem::take(&mut self.waiting)
                        .into_iter()
                        .partition(|w| now.duration_since(w.0) >= waited);
                    self.waiting = left;
                    if late.is_empty() {
                        break;
                    }
                    let first = late.iter().map(|w| w.0).min().unwrap_or(now);
                    self.owed = Some(self.owed.map_or(first, |o| o.min(first)));
                    let limit = if ending { SEED_WAIT_AT_END } else { SEED_WAIT };
                    let d = format!("{:.1} s", limit.as_secs_f64());
                    self.notices.push(ServeNotice::NotSeeded(format!(
                        "the kernel's tables were not read within {d}: {} joined with what the events showed, \
                         the rest follows when they are read",
                        crate::units::count(late.len() as u64, "subscriber")
                    )));
                    late
                }
            };
            let state = match current {
                Some(s) => s,
                None => self.story.state(),
            };
            for (_, j) in served {
                self.join(j, Some(&state))?;
            }
        }
        if !ending
            && let Some(since) = self.owed
            && let Some(seeder) = self.seeder.as_mut()
            && seeder.since(since).is_some()
            && let Some(r) = seeder.take()
        {
            self.take_in(r.began, r.found)?;
        }
        Ok(())
    }

    /// A reading of the kernel's tables that began at `began`: what it holds that the story
    /// does not show goes into the story, and to every subscriber as a `state` record of the
    /// shared stream (the daemon's capture file too), so what each shows stays the same.
    /// Returns the story's state when the reading added nothing to it (still current).
    fn take_in(
        &mut self,
        began: std::time::Instant,
        found: Result<Vec<ProcessState>, crate::capture::SeedError>,
    ) -> io::Result<Option<crate::capture::State>> {
        if self.owed.is_some_and(|o| o <= began) {
            self.owed = None;
        }
        let found = match found {
            Ok(f) => f,
            Err(why) => {
                self.notices.push(ServeNotice::NotSeeded(why.to_string()));
                return Ok(None);
            }
        };
        let gone: std::collections::HashSet<u32> =
            self.deregs.iter().filter(|(t, _)| *t >= began).map(|(_, id)| *id).collect();
        // A second before the reading began: the ring is read well within that.
        let since = began.checked_sub(std::time::Duration::from_secs(1)).unwrap_or(began);
        self.last_pin.retain(|_, t| *t >= since);
        let busy: std::collections::HashSet<u32> = self.last_pin.keys().copied().collect();
        let known = self.story.state();
        let processes = seeder::complement(&known, found, &gone, &busy);
        if processes.is_empty() {
            return Ok(Some(known));
        }
        let added = crate::capture::State {
            v: crate::capture::VERSION,
            ty: "state".into(),
            ts_ns: known.ts_ns,
            processes,
            ..Default::default()
        };
        self.story.seed(&added);
        let pieces = added.pieces(crate::capture::STATE_PIECE_ROWS);
        for piece in &pieces {
            self.format.state(piece)?;
            if let Some(h) = &mut self.hidden {
                let mut p = piece.clone();
                self.redactor.state(&mut p);
                h.state(&p)?;
            }
            self.offer();
        }
        self.taken.extend(pieces);
        Ok(None)
    }

    /// One subscriber joined now: its header, its state (`None`: an empty one, for
    /// `want=events`), and its writer.
    fn join(&mut self, j: Joining, state: Option<&crate::capture::State>) -> io::Result<()> {
        let at = self.format.next_seq();
        let redacted = (j.uid != 0 && !self.reveal) || j.hello.redact;
        let mut pre = Jsonl::starting_at(Vec::new(), at - 2);
        pre.header(&crate::capture::Header {
            redacted: redacted || self.header.redacted,
            ..self.header.clone()
        })?;
        let mut preamble = pre.take_written();
        let pieces = match state {
            Some(state) => state.clone().pieces(crate::capture::STATE_PIECE_ROWS),
            // An empty state: the number is kept so the stream has no gap.
            None => vec![crate::capture::State {
                v: crate::capture::VERSION,
                ty: "state".into(),
                ..Default::default()
            }],
        };
        // A large state in several records, all numbered just before the shared stream.
        for mut piece in pieces {
            if redacted {
                self.redactor.state(&mut piece);
            }
            let mut one = Jsonl::starting_at(Vec::new(), at - 1);
            one.state(&piece)?;
            preamble.extend(one.take_written());
        }
        if redacted && self.hidden.is_none() {
            self.hidden = Some(Jsonl::starting_at(Vec::new(), at));
        }
        let (tx, rx) = std::sync::mpsc::sync_channel::<Arc<[u8]>>(self.queue);
        tx.send(Arc::from(preamble)).ok();
        let peer = j.peer.clone();
        let spawned =
            std::thread::Builder::new().name("rdma-trace-sub".into()).spawn(move || serve_one(j.out, rx));
        // Out of threads: this one is not served (and told so by its closed stream).
        let worker = match spawned {
            Ok(w) => w,
            Err(e) => {
                self.notices.push(ServeNotice::Refused { peer, why: format!("no thread to serve it ({e})") });
                return Ok(());
            }
        };
        self.notices.push(ServeNotice::Joined { peer: peer.clone(), at_seq: at });
        self.subs.push(Subscriber { queue: tx, redacted, dropped: 0, last_dropped_seq: 0, worker, peer });
        Ok(())
    }

    /// Offers the record just formatted to every subscriber.
    fn offer(&mut self) {
        let main: Arc<[u8]> = Arc::from(self.format.take_written());
        let hidden: Option<Arc<[u8]>> = self.hidden.as_mut().map(|h| Arc::from(h.take_written()));
        let seq = self.format.next_seq() - 1;
        let mut gone = Vec::new();
        for (k, s) in self.subs.iter_mut().enumerate() {
            if s.dropped > 0 {
                let loss = loss_line(s.last_dropped_seq, s.dropped);
                match s.queue.try_send(loss) {
                    Ok(()) => s.dropped = 0,
                    Err(TrySendError::Full(_)) => {}
                    Err(TrySendError::Disconnected(_)) => gone.push(k),
                }
            }
            if s.dropped > 0 {
                s.dropped += 1;
                s.last_dropped_seq = seq;
                continue;
            }
            let line = match (&hidden, s.redacted) {
                (Some(h), true) => h.clone(),
                _ => main.clone(),
            };
            match s.queue.try_send(line) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    s.dropped += 1;
                    s.last_dropped_seq = seq;
                }
                Err(TrySendError::Disconnected(_)) => gone.push(k),
            }
        }
        for k in gone.into_iter().rev() {
            let s = self.subs.swap_remove(k);
            self.notices.push(ServeNotice::Left { peer: s.peer, lost: s.dropped });
        }
        // The redacted stream is made only while someone gets it.
        if !self.subs.iter().any(|s| s.redacted) {
            self.hidden = None;
        }
    }

    /// Formats a record that holds no kernel address in both streams (numbered alike).
    fn both(&mut self, f: impl Fn(&mut Jsonl<Vec<u8>>) -> io::Result<()>) -> io::Result<()> {
        f(&mut self.format)?;
        if let Some(h) = &mut self.hidden {
            f(h)?;
        }
        Ok(())
    }

    /// Ends every subscriber's stream (after the trailer) and waits, `CLOSE_WAIT` at most in
    /// all, for each to be written out; one still behind is told what it lost if room comes
    /// by then. Returns the subscribers still being written to at the deadline (cut off).
    pub fn close(self) -> Vec<String> {
        let deadline = std::time::Instant::now() + CLOSE_WAIT;
        let pause = std::time::Duration::from_millis(5);
        let mut workers = Vec::new();
        for s in self.subs {
            if s.dropped > 0 {
                let loss = loss_line(s.last_dropped_seq, s.dropped);
                while let Err(TrySendError::Full(_)) = s.queue.try_send(loss.clone()) {
                    if std::time::Instant::now() >= deadline {
                        break;
                    }
                    std::thread::sleep(pause);
                }
            }
            drop(s.queue);
            workers.push((s.peer, s.worker));
        }
        let mut cut = Vec::new();
        for (peer, w) in workers {
            while !w.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(pause);
            }
            if w.is_finished() {
                w.join().ok();
            } else {
                cut.push(peer);
            }
        }
        cut
    }

    /// What readings of the kernel's tables added to the story since the last call, as the
    /// `state` records the subscribers got.
    pub fn taken_in(&mut self) -> Vec<crate::capture::State> {
        std::mem::take(&mut self.taken)
    }

    /// Subscribers connected now.
    pub fn subscribers(&self) -> usize {
        self.subs.len()
    }
}

/// The loss record a subscriber gets for what it missed (numbered as the last record it
/// lost, so its reader also sees the gap).
fn loss_line(seq: u64, count: u64) -> Arc<[u8]> {
    let l = Loss {
        v: crate::capture::VERSION,
        seq,
        ty: "loss".into(),
        ts_ns: 0,
        site: crate::capture::LossSite::Subscriber,
        reason: crate::capture::LossReason::SubscriberBehind,
        count,
    };
    let mut line = serde_json::to_vec(&l).expect("a loss record serializes");
    line.push(b'\n');
    Arc::from(line)
}

/// One subscriber's writer: lines from its queue to its stream, flushed whenever the queue
/// is momentarily empty; ends when the stream breaks or the queue closes.
fn serve_one(out: Box<dyn Write + Send>, rx: Receiver<Arc<[u8]>>) {
    let mut out = io::BufWriter::new(out);
    while let Ok(line) = rx.recv() {
        if out.write_all(&line).is_err() {
            return;
        }
        while let Ok(more) = rx.try_recv() {
            if out.write_all(&more).is_err() {
                return;
            }
        }
        if out.flush().is_err() {
            return;
        }
    }
    out.flush().ok();
}

impl Sink for Broadcaster {
    fn event(&mut self, ev: &std::sync::Arc<Event>) -> io::Result<()> {
        if matches!(ev.path, crate::event::Path::Pin | crate::event::Path::Teardown) {
            self.last_pin.insert(ev.pid, std::time::Instant::now());
        }
        if ev.is(crate::event::ProbeId::MrDereg) {
            self.deregs.extend(
                ev.field(FieldId::MrId)
                    .and_then(|i| u32::try_from(i).ok())
                    .map(|id| (std::time::Instant::now(), id)),
            );
            // A reading takes seconds at most (`SEED_WAIT` is what a joiner waits).
            while self.deregs.front().is_some_and(|(t, _)| t.elapsed() > std::time::Duration::from_secs(120))
            {
                self.deregs.pop_front();
            }
        }
        self.story.push(ev.clone());
        self.format.event(ev)?;
        if let Some(h) = &mut self.hidden {
            let mut e = Event::clone(ev);
            self.redactor.event(&mut e);
            h.event(&std::sync::Arc::new(e))?;
        }
        self.offer();
        Ok(())
    }
    fn step(&mut self, s: &crate::steps::StepRecord) -> io::Result<()> {
        self.story.add_steps(vec![s.clone()]);
        self.both(|f| f.step(s))?;
        self.offer();
        Ok(())
    }
    fn counted(&mut self, c: &crate::sink::Counted) -> io::Result<()> {
        self.counted = Some(c.clone());
        Ok(())
    }
    fn stats(&mut self, s: &Stats) -> io::Result<()> {
        self.story.settle(s.ts_ns);
        if let Some(m) = &self.metrics {
            // The run's account, and what the daemon's own outputs lost (its loss records).
            let mut sites = s.sites.clone();
            for ((site, reason), n) in &self.outputs_lost {
                sites.push(SiteCount {
                    site: site.clone(),
                    lost: [(reason.clone(), *n)].into(),
                    ..Default::default()
                });
            }
            let text = match &self.counted {
                Some(c) => crate::output::metrics::render_counted(c, &sites),
                None => {
                    // Processes that ended keep their series a while (`Engine::ended`).
                    let processes = self.story.processes().values().chain(self.story.ended());
                    crate::output::metrics::render(processes, &sites)
                }
            };
            if let Ok(mut t) = m.lock() {
                *t = text;
            }
        }
        self.both(|f| f.stats(s))?;
        self.offer();
        Ok(())
    }
    fn loss(&mut self, l: &Loss) -> io::Result<()> {
        if matches!(l.site, crate::capture::LossSite::Output(_)) {
            *self.outputs_lost.entry((l.site.clone(), l.reason.clone())).or_default() += l.count;
        }
        self.both(|f| f.loss(l))?;
        self.offer();
        Ok(())
    }
    fn trailer(&mut self, t: &Trailer) -> io::Result<()> {
        self.admit(true)?;
        self.both(|f| f.trailer(t))?;
        self.offer();
        Ok(())
    }
    /// A process gone leaves the state late joiners get (and the metrics), once the story
    /// has joined its last events.
    fn processes_gone(&mut self, pids: &[u32], ts_ns: u64) -> io::Result<()> {
        for &pid in pids {
            self.story.retire(crate::event::Task::new(0, pid), ts_ns);
            self.last_pin.remove(&pid);
        }
        Ok(())
    }
    /// On each tick (every 50 ms): subscribers waiting are joined.
    fn tick(&mut self) -> io::Result<()> {
        self.admit(false)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
