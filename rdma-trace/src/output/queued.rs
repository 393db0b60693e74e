//! An output on a thread of its own behind a bounded queue, so a slow terminal or disk
//! never holds up the ring reader. What does not fit is left out and counted for that
//! output alone, and the output is told: a `loss` record (site `output <name>`, reason
//! `queue full` for events, `queue full (other records)` for stats, loss and step records)
//! goes into its own stream before the next record it gets. The end of a run (trailer,
//! flush) waits for the queue to drain: nothing is left behind then.

use crate::capture::{Header, Loss, LossReason, LossSite, Record, State, Stats, Step, Trailer};
use crate::event::Event;
use crate::sink::Sink;
use crate::steps::StepRecord;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Records an output may fall behind by before it loses any.
pub(crate) const QUEUE: usize = 16_384;

/// What goes to the output's thread: a record of the stream, or the sink's two calls
/// that are not records.
enum Msg {
    Record(Record),
    Tick,
    Flush(SyncSender<()>),
}

pub(crate) struct Queued {
    name: String,
    tx: Option<SyncSender<Msg>>,
    /// Events and other records left out since their last loss record got through.
    pending: [u64; 2],
    /// Records left out in all.
    pub dropped: u64,
    /// Events and steps left out, per account row (`account::row_of`).
    pub left_out_rows: std::collections::BTreeMap<String, u64>,
    /// The newest time seen (for the loss record's `ts_ns`).
    newest_ns: u64,
    /// The output's first error: every later call returns it.
    failed: Arc<Mutex<Option<(io::ErrorKind, String)>>>,
    /// Records queued, and records the thread has taken (`backlog`).
    sent: u64,
    taken: Arc<AtomicU64>,
    worker: Option<JoinHandle<()>>,
}

impl Queued {
    /// `inner` runs on its own thread, `capacity` records behind at most.
    pub(crate) fn new(name: &str, inner: Box<dyn Sink + Send>, capacity: usize) -> Self {
        let (tx, rx) = sync_channel(capacity);
        let failed = Arc::new(Mutex::new(None));
        let (f, taken) = (failed.clone(), Arc::new(AtomicU64::new(0)));
        let t = taken.clone();
        let worker = std::thread::Builder::new()
            .name(format!("out {name}"))
            .spawn(move || serve(inner, rx, f, t))
            .expect("spawning an output thread");
        let pending = [0; 2];
        Queued {
            name: name.into(),
            tx: Some(tx),
            pending,
            dropped: 0,
            left_out_rows: Default::default(),
            newest_ns: 0,
            failed,
            sent: 0,
            taken,
            worker: Some(worker),
        }
    }

    /// Records queued that the output's thread has not taken yet (what the end of a run
    /// waits for; at most the queue's capacity).
    pub(crate) fn backlog(&self) -> u64 {
        self.sent.saturating_sub(self.taken.load(Ordering::Relaxed))
    }

    /// The output's name ("text", "capture").
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    fn error(&self) -> Option<io::Error> {
        self.failed.lock().ok()?.as_ref().map(|(k, m)| io::Error::new(*k, m.clone()))
    }

    /// Offers `m` without waiting; a full queue leaves it out (counted; false). The loss
    /// record owed goes first whenever there is room.
    fn offer(&mut self, m: Msg) -> io::Result<bool> {
        if let Some(e) = self.error() {
            return Err(e);
        }
        let Some(tx) = self.tx.clone() else { return Err(io::Error::other("output closed")) };
        let kind = usize::from(!matches!(m, Msg::Record(Record::Event(_))));
        for k in 0..2 {
            if self.pending[k] == 0 {
                continue;
            }
            match tx.try_send(Msg::Record(Record::Loss(self.owed(k)))) {
                Ok(()) => {
                    self.pending[k] = 0;
                    self.sent += 1;
                }
                Err(TrySendError::Full(_)) => {
                    // A tick is no record: a stalled output loses none by skipping one.
                    if !matches!(m, Msg::Tick) {
                        self.left_out(kind);
                    }
                    return Ok(false);
                }
                Err(TrySendError::Disconnected(_)) => return Err(self.gone()),
            }
        }
        let record = matches!(m, Msg::Record(_));
        match tx.try_send(m) {
            Ok(()) => {
                self.sent += u64::from(record);
                Ok(true)
            }
            Err(TrySendError::Full(Msg::Tick)) => Ok(false),
            Err(TrySendError::Full(_)) => {
                self.left_out(kind);
                Ok(false)
            }
            Err(TrySendError::Disconnected(_)) => Err(self.gone()),
        }
    }

    /// The loss record owed for events (0) or other records (1).
    fn owed(&self, k: usize) -> Loss {
        Loss {
            ts_ns: self.newest_ns,
            site: LossSite::Output(self.name.clone()),
            reason: [LossReason::QueueFull, LossReason::QueueFullOther][k].clone(),
            count: self.pending[k],
            ..Default::default()
        }
    }

    fn left_out(&mut self, kind: usize) {
        self.pending[kind] += 1;
        self.dropped += 1;
    }

    /// Waits until the output has taken `m` (the end of a run: nothing may be left out).
    fn hand(&mut self, m: Msg) -> io::Result<()> {
        if let Some(e) = self.error() {
            return Err(e);
        }
        let record = matches!(m, Msg::Record(_));
        let gone = self.tx.as_ref().is_none_or(|tx| tx.send(m).is_err());
        self.sent += u64::from(record && !gone);
        if gone { Err(self.gone()) } else { Ok(()) }
    }

    fn gone(&self) -> io::Error {
        self.error().unwrap_or_else(|| io::Error::other(format!("output {} stopped", self.name)))
    }
}

fn serve(
    mut inner: Box<dyn Sink + Send>,
    rx: Receiver<Msg>,
    failed: Arc<Mutex<Option<(io::ErrorKind, String)>>>,
    taken: Arc<AtomicU64>,
) {
    for m in rx {
        let r = match m {
            Msg::Record(r) => {
                taken.fetch_add(1, Ordering::Relaxed);
                inner.record(r)
            }
            Msg::Tick => inner.tick(),
            Msg::Flush(done) => {
                let r = inner.flush();
                done.send(()).ok();
                r
            }
        };
        if let Err(e) = r {
            if let Ok(mut f) = failed.lock() {
                *f = Some((e.kind(), e.to_string()));
            }
            return;
        }
    }
}

impl Queued {
    fn count_row(&mut self, taken: bool, row: impl FnOnce() -> String) {
        if !taken {
            *self.left_out_rows.entry(row()).or_default() += 1;
        }
    }
}

impl Sink for Queued {
    /// The stream's start: waited for, never left out.
    fn header(&mut self, h: &Header) -> io::Result<()> {
        self.hand(Msg::Record(Record::Header(Box::new(h.clone()))))
    }
    fn state(&mut self, st: &State) -> io::Result<()> {
        self.hand(Msg::Record(Record::State(st.clone())))
    }
    fn event(&mut self, ev: &std::sync::Arc<Event>) -> io::Result<()> {
        self.newest_ns = self.newest_ns.max(ev.ts_ns);
        let taken = self.offer(Msg::Record(Record::Event(std::sync::Arc::clone(ev))))?;
        self.count_row(taken, || crate::account::row_of(ev));
        Ok(())
    }
    fn step(&mut self, s: &StepRecord) -> io::Result<()> {
        let step = Step { v: crate::capture::VERSION, seq: 0, ty: "step".into(), step: s.clone() };
        let taken = self.offer(Msg::Record(Record::Step(Box::new(step))))?;
        self.count_row(taken, || crate::account::STEPS_ROW.into());
        Ok(())
    }
    fn stats(&mut self, s: &Stats) -> io::Result<()> {
        self.newest_ns = self.newest_ns.max(s.ts_ns);
        self.offer(Msg::Record(Record::Stats(s.clone()))).map(drop)
    }
    fn loss(&mut self, l: &Loss) -> io::Result<()> {
        self.offer(Msg::Record(Record::Loss(l.clone()))).map(drop)
    }
    /// The end: the owed loss record and the trailer are waited for.
    fn trailer(&mut self, t: &Trailer) -> io::Result<()> {
        for k in 0..2 {
            if self.pending[k] > 0 {
                let l = self.owed(k);
                self.pending[k] = 0;
                self.hand(Msg::Record(Record::Loss(l)))?;
            }
        }
        self.hand(Msg::Record(Record::Trailer(t.clone())))
    }
    fn tick(&mut self) -> io::Result<()> {
        self.offer(Msg::Tick).map(drop)
    }
    /// Waits until everything queued is written.
    fn flush(&mut self) -> io::Result<()> {
        let (done, wait) = sync_channel(1);
        self.hand(Msg::Flush(done))?;
        if wait.recv().is_err() {
            return Err(self.gone());
        }
        self.error().map_or(Ok(()), Err)
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(w) = self.worker.take() {
            w.join().ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;

    /// Holds its first event until the barrier opens; records everything it gets.
    struct Slow {
        gate: Option<Arc<Barrier>>,
        got: Arc<Mutex<Vec<String>>>,
    }

    impl Sink for Slow {
        fn event(&mut self, ev: &std::sync::Arc<Event>) -> io::Result<()> {
            if let Some(g) = self.gate.take() {
                g.wait();
            }
            self.got.lock().unwrap().push(format!("event {}", ev.ts_ns));
            Ok(())
        }
        fn loss(&mut self, l: &Loss) -> io::Result<()> {
            self.got.lock().unwrap().push(format!("loss {} {} {}", l.site, l.reason, l.count));
            Ok(())
        }
        fn trailer(&mut self, _t: &Trailer) -> io::Result<()> {
            self.got.lock().unwrap().push("trailer".into());
            Ok(())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn event(ts_ns: u64) -> Arc<Event> {
        let line = format!(
            r#"{{"v":0,"ts_ns":{ts_ns},"kind":"entry","name":"umem_get","path":"pin","pid":1,"tid":1,"comm":"x","cpu":0,"fields":{{}}}}"#
        );
        Arc::new(serde_json::from_str(&line).unwrap())
    }

    #[test]
    fn a_stalled_output_never_holds_the_caller_and_is_told_what_it_missed() {
        let gate = Arc::new(Barrier::new(2));
        let got = Arc::new(Mutex::new(Vec::new()));
        let slow = Slow { gate: Some(gate.clone()), got: got.clone() };
        let mut q = Queued::new("text", Box::new(slow), 8);
        let t0 = std::time::Instant::now();
        for ts in 0..1000 {
            q.event(&event(ts)).unwrap();
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(2), "the caller waited");
        // 8 wait in the queue, and the first one the output took (held) made room for one
        // more unless the pushes were quicker than the output thread: the rest are left out.
        assert!((1000 - 9..=1000 - 8).contains(&q.dropped), "{}", q.dropped);
        // What the end of a run would wait for: the 8 queued, and the one held if the
        // thread had not taken it yet.
        assert!((8..=9).contains(&q.backlog()), "{}", q.backlog());
        gate.wait();
        q.flush().unwrap(); // the queue drained: the next record finds room
        assert_eq!(q.backlog(), 0);
        q.event(&event(5000)).unwrap();
        q.trailer(&Trailer {
            ts_ns: 6000,
            stopped: "SIGINT".into(),
            exit_code: 0,
            delivered: 0,
            lost: 0,
            sites: Vec::new(),
            ..Default::default()
        })
        .unwrap();
        q.flush().unwrap();
        let got = got.lock().unwrap().clone();
        let events = got.iter().filter(|l| l.starts_with("event")).count() as u64;
        let told: u64 = got
            .iter()
            .filter_map(|l| l.strip_prefix("loss output text queue full "))
            .map(|n| n.parse::<u64>().unwrap())
            .sum();
        assert_eq!(events + told, 1001, "{got:?}");
        assert_eq!(told, q.dropped);
        // Counted under the row that delivered them (this event has no symbol).
        assert_eq!(q.left_out_rows.iter().collect::<Vec<_>>(), [(&"umem_get (?)".to_string(), &told)]);
        // Each loss record sits where its gap is: the events around it are not consecutive.
        let ts = |s: &String| s.strip_prefix("event ").and_then(|n| n.parse::<u64>().ok());
        for (i, l) in got.iter().enumerate().filter(|(_, l)| l.starts_with("loss")) {
            let before = got[..i].iter().rev().find_map(ts);
            let after = got[i + 1..].iter().find_map(ts);
            assert!(before.zip(after).is_some_and(|(b, a)| a > b + 1), "{l} at {i}: {got:?}");
        }
        assert_eq!(got.last().map(String::as_str), Some("trailer"));
    }

    #[test]
    fn ticks_offered_to_a_stalled_output_are_not_counted_as_lost() {
        let gate = Arc::new(Barrier::new(2));
        let got = Arc::new(Mutex::new(Vec::new()));
        let slow = Slow { gate: Some(gate.clone()), got: got.clone() };
        let mut q = Queued::new("text", Box::new(slow), 8);
        for ts in 0..100 {
            q.event(&event(ts)).unwrap();
        }
        let dropped = q.dropped;
        assert!(dropped >= 100 - 9, "{dropped}");
        // The stall goes on (a loss record is owed and the queue is full): ticks keep coming.
        for _ in 0..50 {
            q.tick().unwrap();
        }
        assert_eq!(q.dropped, dropped, "a tick is not a record");
        gate.wait();
        q.flush().unwrap();
        let got = got.lock().unwrap().clone();
        assert!(!got.iter().any(|l| l.contains("other records")), "{got:?}");
    }

    #[test]
    fn an_output_error_comes_back_to_the_caller() {
        struct Full;
        impl Sink for Full {
            fn event(&mut self, _: &std::sync::Arc<Event>) -> io::Result<()> {
                Err(io::Error::new(io::ErrorKind::StorageFull, "out.jsonl: no space left"))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut q = Queued::new("capture", Box::new(Full), 8);
        q.event(&event(1)).unwrap();
        let e = q.flush().unwrap_err();
        assert!(e.to_string().contains("no space left"), "{e}");
        assert!(q.event(&event(2)).is_err(), "every later call fails too");
    }
}
