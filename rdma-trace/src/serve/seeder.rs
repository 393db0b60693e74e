//! Reading what the kernel holds for a late subscriber's state (`rdma res show mr`, /proc),
//! on a thread of its own: the thread that drains the ring never waits for it, so a flood
//! of joins costs the other outputs nothing.
//!
//! One reading serves every joiner that arrived before it began; a joiner that arrives
//! while one is under way waits for the next, so what it gets is never older than its own
//! arrival. The broadcaster asks at most one reading at a time.

use crate::capture::{ProcessState, SeedError, State};
use std::collections::{BTreeMap, HashSet};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::time::Instant;

/// Reads what the kernel holds now (`live::seed::now`), for the state a subscriber gets.
pub type Seed = Box<dyn FnMut() -> Result<Vec<ProcessState>, SeedError> + Send>;

/// One reading of the kernel's tables, and when it began.
pub(crate) struct Seeding {
    pub began: Instant,
    pub found: Result<Vec<ProcessState>, SeedError>,
}

pub(crate) struct Seeder {
    ask: SyncSender<()>,
    done: Receiver<Seeding>,
    /// A reading asked for and not yet back.
    under_way: bool,
    /// The newest reading back, until the joiners it serves are joined.
    latest: Option<Seeding>,
}

impl Seeder {
    /// The seeding thread. It ends when the seeder is dropped (after a reading under way).
    pub(crate) fn spawn(mut seed: Seed) -> std::io::Result<Self> {
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
    pub(crate) fn since(&mut self, since: Instant) -> Option<&Seeding> {
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
                    self.latest = Some(Seeding { began: Instant::now(), found: Err(SeedError::ThreadEnded) });
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
    pub(crate) fn wait(&mut self, since: Instant, deadline: Instant) -> Option<&Seeding> {
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

    /// The reading `since` or `wait` answered with, handed over whole (it serves once: every
    /// joiner it can serve is joined with it), not copied.
    pub(crate) fn take(&mut self) -> Option<Seeding> {
        self.latest.take()
    }
}

/// What a reading of the kernel's tables (`found`) holds that the story (`known`, its
/// state now) does not show, marked `seeded`: the MRs of a process registered before the
/// daemon started, or whose events the ring lost; the mappings of a process the story
/// has none of; a process the story does not know, whole.
///
/// An MR counts as known by its lkey. The story may know an MR without its key (a lost
/// return), so a process gets at most as many MRs as the tables hold beyond what the story
/// has. An MR deregistered since the reading began (`gone`: restrack ids the `mr_dereg`
/// tracepoint named) is not added: it no longer exists. A process the story saw register
/// or deregister about when the reading ran (`busy`) gets nothing: its events may still be
/// on their way through the ring, and what the tables list of it would be counted twice.
pub(crate) fn complement(
    known: &State,
    found: Vec<ProcessState>,
    gone: &HashSet<u32>,
    busy: &HashSet<u32>,
) -> Vec<ProcessState> {
    let by_pid: BTreeMap<u32, &ProcessState> = known.processes.iter().map(|p| (p.pid, p)).collect();
    let mut out = Vec::new();
    for mut f in found {
        f.mrs.retain(|m| m.mr_id.is_none_or(|id| !gone.contains(&id)));
        if busy.contains(&f.pid) && by_pid.contains_key(&f.pid) {
            continue;
        }
        if let Some(k) = by_pid.get(&f.pid) {
            let keys: HashSet<u64> = k.mrs.iter().filter_map(|m| m.lkey).collect();
            let room = f.mrs.len().saturating_sub(k.mrs.len());
            let new: Vec<_> =
                f.mrs.into_iter().filter(|m| m.lkey.is_none_or(|l| !keys.contains(&l))).take(room).collect();
            f.mrs = new;
            if !k.mappings.is_empty() {
                f.mappings.clear();
            }
        }
        if f.mrs.is_empty() && f.mappings.is_empty() && by_pid.contains_key(&f.pid) {
            continue;
        }
        f.pinned_bytes = f.mrs.iter().map(|m| m.charged).sum();
        f.seeded = true;
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{Mapping, PinnedRange};
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

    fn mr(id: u32, lkey: u64) -> PinnedRange {
        PinnedRange { length: 4096, charged: 4096, mr_id: Some(id), lkey: Some(lkey), ..Default::default() }
    }

    fn state(processes: Vec<ProcessState>) -> State {
        State { v: 1, ty: "state".into(), processes, ..Default::default() }
    }

    #[test]
    fn the_tables_add_what_events_did_not_show_and_nothing_twice() {
        let map = Mapping { start: 1, end: 2, pgoff: 0, what: None };
        // The story knows pid 7 with one MR (lkey 0x10) and a mapping; the ring lost the
        // events of its second MR. Pid 9 registered before the daemon started.
        let known = state(vec![ProcessState {
            pid: 7,
            comm: "ib_send_bw".into(),
            mrs: vec![PinnedRange { lkey: Some(0x10), umem: Some(0xffff_8000), ..mr(0, 0x10) }],
            mappings: vec![map.clone()],
            ..Default::default()
        }]);
        let found = vec![
            ProcessState {
                pid: 7,
                mrs: vec![mr(1, 0x10), mr(2, 0x20)],
                mappings: vec![map.clone()],
                ..Default::default()
            },
            ProcessState {
                pid: 9,
                comm: "old".into(),
                mrs: vec![mr(3, 0x30)],
                mappings: vec![map],
                ..Default::default()
            },
        ];
        let c = complement(&known, found.clone(), &HashSet::new(), &HashSet::new());
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].mrs, vec![mr(2, 0x20)], "only the MR the events did not show");
        assert!(c[0].mappings.is_empty(), "the story has its mappings");
        assert_eq!((c[0].pinned_bytes, c[0].seeded), (4096, true));
        assert_eq!((c[1].pid, c[1].mrs.len(), c[1].mappings.len()), (9, 1, 1), "an unknown process, whole");
        // Deregistered while the tables were read: not added.
        let c = complement(&known, found.clone(), &HashSet::from([2, 3]), &HashSet::new());
        assert_eq!(c.len(), 1, "pid 7 has nothing left to add: {c:?}");
        assert_eq!((c[0].pid, c[0].mrs.len()), (9, 0));
        // A second reading against the story that took the first in adds nothing.
        let mut taken = known.clone();
        taken.processes[0].mrs.push(mr(2, 0x20));
        taken.processes.push(ProcessState { pid: 9, ..found[1].clone() });
        assert!(complement(&taken, found.clone(), &HashSet::new(), &HashSet::new()).is_empty());
        // Pid 7 registering while the tables were read: its events may be on their way.
        let c = complement(&known, found, &HashSet::new(), &HashSet::from([7, 9]));
        assert_eq!(
            c.iter().map(|p| p.pid).collect::<Vec<_>>(),
            [9],
            "an unknown process is never busy in the story"
        );
    }

    #[test]
    fn an_mr_the_story_knows_without_its_key_is_not_added_twice() {
        let known = state(vec![ProcessState {
            pid: 7,
            mrs: vec![PinnedRange { lkey: None, umem: Some(1), ..mr(0, 0) }, mr(0, 0x10)],
            ..Default::default()
        }]);
        let found = vec![ProcessState {
            pid: 7,
            mrs: vec![mr(1, 0x10), mr(2, 0x20), mr(3, 0x30)],
            ..Default::default()
        }];
        let c = complement(&known, found, &HashSet::new(), &HashSet::new());
        assert_eq!(c[0].mrs.len(), 1, "three in the tables, two known (one without its key): one more");
        assert_eq!(c[0].pinned_bytes, 4096);
    }
}
