//! Reading what the kernel holds for a late subscriber's state (`rdma res show mr`, /proc),
//! on a thread of its own: the thread that drains the ring never waits for it, so a flood
//! of joins costs the other outputs nothing.
//!
//! One reading serves every joiner that arrived before it began; a joiner that arrives
//! while one is under way waits for the next, so what it gets is never older than its own
//! arrival. The broadcaster asks at most one reading at a time.

use crate::capture::ProcessState;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::time::Instant;

/// Reads what the kernel holds now (`live::seed::now`), for the state a subscriber gets.
pub type Seed = Box<dyn FnMut() -> Result<Vec<ProcessState>, String> + Send>;

/// One reading of the kernel's tables, and when it began.
pub struct Seeding {
    pub began: Instant,
    pub found: Result<Vec<ProcessState>, String>,
}

pub struct Seeder {
    ask: SyncSender<()>,
    done: Receiver<Seeding>,
    /// A reading asked for and not yet back.
    under_way: bool,
    /// The newest reading back, until the joiners it serves are joined.
    latest: Option<Seeding>,
}

impl Seeder {
    /// The seeding thread. It ends when the seeder is dropped (after a reading under way).
    pub fn spawn(mut seed: Seed) -> std::io::Result<Self> {
        let (ask, asked) = std::sync::mpsc::sync_channel::<()>(1);
        let (tell, done) = std::sync::mpsc::sync_channel::<Seeding>(1);
        std::thread::Builder::new().name("rdma-trace-seed".into()).spawn(move || {
            while asked.recv().is_ok() {
                let began = Instant::now();
                let found = seed();
                if tell.send(Seeding { began, found }).is_err() {
                    return;
                }
            }
        })?;
        Ok(Seeder { ask, done, under_way: false, latest: None })
    }

    /// A reading that began at or after `since`, if one is back; otherwise one is asked for
    /// (unless one is under way: a joiner it cannot serve is served by the next) and `None`.
    pub fn since(&mut self, since: Instant) -> Option<&Seeding> {
        loop {
            match self.done.try_recv() {
                Ok(s) => {
                    self.under_way = false;
                    self.latest = Some(s);
                }
                Err(TryRecvError::Empty) => break,
                // The thread is gone (its seed panicked): nothing more will come.
                Err(TryRecvError::Disconnected) => {
                    self.under_way = false;
                    self.latest = Some(Seeding {
                        began: Instant::now(),
                        found: Err("the thread reading the kernel's tables ended".into()),
                    });
                    break;
                }
            }
        }
        if self.latest.as_ref().is_some_and(|s| s.began >= since) {
            return self.latest.as_ref();
        }
        if !self.under_way && self.ask.try_send(()).is_ok() {
            self.under_way = true;
        }
        None
    }

    /// As `since`, waiting until `deadline` at most for a reading to come back (asking again
    /// if the one under way began too early): for joiners waiting when the run ends.
    pub fn wait(&mut self, since: Instant, deadline: Instant) -> Option<&Seeding> {
        while self.since(since).is_none() && self.under_way {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.done.recv_timeout(left) {
                Ok(s) => {
                    self.under_way = false;
                    self.latest = Some(s);
                }
                Err(_) => break,
            }
        }
        self.latest.as_ref().filter(|s| s.began >= since)
    }

    /// The reading is no longer needed (every joiner it served is joined).
    pub fn forget(&mut self) {
        self.latest = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn counting(pause: Duration) -> (Seeder, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let seed: Seed = Box::new(move || {
            std::thread::sleep(pause);
            let n = c.fetch_add(1, Ordering::SeqCst) as u32 + 1;
            Ok(vec![ProcessState { pid: n, ..Default::default() }])
        });
        (Seeder::spawn(seed).unwrap(), calls)
    }

    #[test]
    fn joiners_that_arrive_together_share_one_reading_and_a_later_one_gets_a_newer() {
        let (mut s, calls) = counting(Duration::from_millis(50));
        let first = Instant::now();
        assert!(s.since(first).is_none(), "the reading is asked for, not waited for");
        let got = s.wait(first, Instant::now() + Duration::from_secs(5)).expect("back within 5 s");
        assert_eq!(got.found.as_ref().unwrap()[0].pid, 1);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let later = Instant::now();
        assert!(s.since(later).is_none(), "a reading older than its joiner does not serve it");
        let got = s.wait(later, Instant::now() + Duration::from_secs(5)).expect("back within 5 s");
        assert_eq!(got.found.as_ref().unwrap()[0].pid, 2);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        // Asked again while one was under way, it is not asked twice.
        let (mut s, calls) = counting(Duration::from_millis(100));
        let t = Instant::now();
        for _ in 0..50 {
            s.since(t);
        }
        s.wait(t, Instant::now() + Duration::from_secs(5)).expect("back");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_reading_that_takes_too_long_is_not_waited_for_past_the_deadline() {
        let (mut s, _) = counting(Duration::from_secs(3));
        let t = Instant::now();
        assert!(s.since(t).is_none());
        let waited = Instant::now();
        assert!(s.wait(t, Instant::now() + Duration::from_millis(200)).is_none());
        assert!(waited.elapsed() < Duration::from_secs(1), "waited {:?}", waited.elapsed());
    }
}
