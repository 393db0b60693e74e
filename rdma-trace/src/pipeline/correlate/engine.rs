//! The story kept current as events arrive: events are fed one at a time (from the ring, a
//! capture stream or a daemon), put back in time order through a short reorder window
//! (records from different CPUs interleave), and joined into the story as they leave it.
//!
//! Memory is bounded on an endless stream: the events themselves are kept up to
//! `Limits::events` (the oldest go first), and every per-process list up to
//! `Limits::per_list`; what was let go is counted. Counts, peaks and the data-phase
//! syscalls are aggregates and never let go of anything.

pub use super::kept::{Events, Limits};
use super::story::{Builder, Story};
use crate::event::Event;
use crate::event::Task;
use crate::steps::StepRecord;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::sync::Arc;

/// The events kept, in index order; the first fed are let go first. Events are joined in
/// about the order they were fed (the reorder window moves only a few), so keeping one is
/// nearly always a push at the back and letting one go a pop at the front.
#[derive(Default)]
pub struct Store {
    by_index: VecDeque<(usize, Arc<Event>)>,
    cap: usize,
    /// Events let go.
    pub evicted: u64,
}

impl Store {
    fn keep(&mut self, i: usize, ev: Arc<Event>) {
        match self.by_index.back() {
            Some(&(last, _)) if i < last => {
                let at = self.by_index.partition_point(|(j, _)| *j < i);
                self.by_index.insert(at, (i, ev));
            }
            _ => self.by_index.push_back((i, ev)),
        }
        while self.by_index.len() > self.cap {
            self.by_index.pop_front();
            self.evicted += 1;
        }
    }

    fn find(&self, i: usize) -> Option<&Arc<Event>> {
        let at = self.by_index.partition_point(|(j, _)| *j < i);
        self.by_index.get(at).filter(|(j, _)| *j == i).map(|(_, e)| e)
    }
}

/// The story as an output of the pipeline: every event is fed to it.
pub struct StorySink(pub Engine);

impl crate::sink::Sink for StorySink {
    fn event(&mut self, ev: &Arc<Event>) -> std::io::Result<()> {
        self.0.push(Arc::clone(ev));
        Ok(())
    }
    /// A daemon's state when this subscriber joined: what was pinned and mapped before.
    fn state(&mut self, st: &crate::capture::State) -> std::io::Result<()> {
        self.0.seed(st);
        Ok(())
    }
    fn step(&mut self, s: &StepRecord) -> std::io::Result<()> {
        self.0.add_steps(vec![s.clone()]);
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Events for Store {
    fn ev(&self, i: usize) -> Option<&Event> {
        self.find(i).map(|e| &**e)
    }
    fn all(&self) -> Box<dyn Iterator<Item = (usize, &Event)> + '_> {
        Box::new(self.by_index.iter().map(|(i, e)| (*i, &**e)))
    }
}

/// An event waiting in the reorder window, ordered by (time, index).
struct Waiting {
    ts_ns: u64,
    index: usize,
    ev: Arc<Event>,
}

impl PartialEq for Waiting {
    fn eq(&self, o: &Self) -> bool {
        (self.ts_ns, self.index) == (o.ts_ns, o.index)
    }
}
impl Eq for Waiting {}
impl PartialOrd for Waiting {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Waiting {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.ts_ns, self.index).cmp(&(o.ts_ns, o.index))
    }
}

/// The reorder window: events waiting to be joined, taken in (time, index) order. Most
/// arrive in order and wait in a queue (no heap work); one older than the newest waiting
/// goes to a heap, and the next out is the older of the two fronts.
#[derive(Default)]
struct Window {
    in_order: VecDeque<Waiting>,
    late: BinaryHeap<Reverse<Waiting>>,
}

impl Window {
    fn push(&mut self, w: Waiting) {
        match self.in_order.back() {
            Some(b) if w < *b => self.late.push(Reverse(w)),
            _ => self.in_order.push_back(w),
        }
    }

    /// Whether the next out is the heap's (older than the queue's front, or the only one).
    fn late_first(&self) -> bool {
        match (self.in_order.front(), self.late.peek()) {
            (Some(a), Some(Reverse(b))) => b < a,
            (a, b) => a.is_none() && b.is_some(),
        }
    }

    fn peek(&self) -> Option<&Waiting> {
        if self.late_first() { self.late.peek().map(|Reverse(w)| w) } else { self.in_order.front() }
    }

    fn pop(&mut self) -> Option<Waiting> {
        if self.late_first() { self.late.pop().map(|Reverse(w)| w) } else { self.in_order.pop_front() }
    }

    fn len(&self) -> usize {
        self.in_order.len() + self.late.len()
    }

    fn is_empty(&self) -> bool {
        self.in_order.is_empty() && self.late.is_empty()
    }
}

/// How long the final row of a process found gone is kept for the metrics: Prometheus's
/// default lookback, so a scrape at any usual interval after the end has its last counts.
pub const ENDED_KEPT_NS: u64 = 300_000_000_000;
/// At most this many such rows.
pub(crate) const ENDED_KEPT: usize = 256;

/// The story builder: attributes and joins every event once; every view reads it.
pub struct Engine {
    limits: Limits,
    steps: Vec<StepRecord>,
    /// (pid, run, step) of every step kept: a step announced live and read again from
    /// the companion's file at the end is joined once.
    step_keys: std::collections::HashSet<(Task, u32, u32)>,
    evicted_steps: u64,
    /// The end of the newest step let go: a step ending by then was known (its key is
    /// gone with it), so it is not taken again.
    evicted_through_ns: Option<u64>,
    next_index: usize,
    newest_ns: u64,
    /// Several sources (`pipeline::merge::Merge`): the newest event pushed does not move the window
    /// (a source ahead of the others would let theirs be joined late); only `settle`, with
    /// the time every source has reached, does (and `reorder_max`).
    settle_only: bool,
    window: Window,
    /// Every event before this time has been joined (or will count as late).
    joined_through_ns: u64,
    /// Steps waiting for the story to pass their end, by (end, key).
    to_join: BTreeMap<(u64, (Task, u32, u32)), StepRecord>,
    /// Processes found gone, by when: each is forgotten once the story has joined every
    /// event up to then (`retire`).
    gone: std::collections::VecDeque<(u64, Task)>,
    /// The rows of processes forgotten as gone, by when, kept `ENDED_KEPT_NS` (at most
    /// `ENDED_KEPT`): a scrape after a process ended still has its final counts.
    ended: std::collections::VecDeque<(u64, super::story::ProcessStory)>,
    store: Store,
    builder: Builder,
}

impl Engine {
    /// A story of the companion's `steps` (if any) and the events fed after.
    pub fn new(steps: Vec<StepRecord>, limits: Limits) -> Self {
        let builder = Builder::new(&steps, limits.per_list, limits.processes);
        let store = Store { cap: limits.events, ..Default::default() };
        let step_keys = steps.iter().map(step_key).collect();
        let to_join = steps.iter().map(|s| ((s.t_end_ns, step_key(s)), s.clone())).collect();
        let window = Window::default();
        Engine {
            limits,
            steps,
            step_keys,
            evicted_steps: 0,
            evicted_through_ns: None,
            next_index: 0,
            newest_ns: 0,
            settle_only: false,
            window,
            joined_through_ns: 0,
            to_join,
            gone: Default::default(),
            ended: Default::default(),
            store,
            builder,
        }
    }

    /// Feeds one event; returns the index the story knows it by.
    pub fn push(&mut self, ev: impl Into<Arc<Event>>) -> usize {
        let ev = ev.into();
        let index = self.next_index;
        self.next_index += 1;
        self.newest_ns = self.newest_ns.max(ev.ts_ns);
        self.window.push(Waiting { ts_ns: ev.ts_ns, index, ev });
        while let Some(w) = self.window.peek() {
            let by_time =
                !self.settle_only && self.newest_ns.saturating_sub(w.ts_ns) >= self.limits.reorder_ns;
            if !by_time && self.window.len() <= self.limits.reorder_max {
                break;
            }
            self.join_next();
        }
        if !self.settle_only {
            self.through(self.newest_ns.saturating_sub(self.limits.reorder_ns));
        }
        index
    }

    /// From now on only `settle` moves the reorder window (several sources, each at its
    /// own pace: the window follows the one furthest behind).
    pub fn settle_only(&mut self) {
        self.settle_only = true;
    }

    /// Joins what waited long enough by the clock `now_ns` (the events' clock: a live
    /// source knows the time even when no event comes to push the window along).
    pub fn settle(&mut self, now_ns: u64) {
        while let Some(w) = self.window.peek() {
            if now_ns.saturating_sub(w.ts_ns) < self.limits.reorder_ns {
                break;
            }
            self.join_next();
        }
        self.through(now_ns.saturating_sub(self.limits.reorder_ns));
    }

    /// Every event before `t` is joined: the steps that ended before it are joined too,
    /// and processes found gone by then are forgotten.
    fn through(&mut self, t: u64) {
        self.joined_through_ns = self.joined_through_ns.max(t);
        while let Some(entry) = self.to_join.first_entry() {
            if entry.key().0 >= self.joined_through_ns {
                break;
            }
            let s = entry.remove();
            self.builder.join_step(&s, &self.store);
        }
        self.forget_gone(self.joined_through_ns);
        while let Some((at, _)) = self.ended.front()
            && (at.saturating_add(ENDED_KEPT_NS) < self.joined_through_ns || self.ended.len() > ENDED_KEPT)
        {
            self.ended.pop_front();
        }
    }

    /// Forgets the processes found gone before `t`. Each keeps its final row in `ended`
    /// (its counts and histograms, not its lists; one row per pid, the newest).
    fn forget_gone(&mut self, t: u64) {
        while let Some(&(at, pid)) = self.gone.front()
            && at < t
        {
            self.gone.pop_front();
            if let Some(row) = self.builder.forget(pid) {
                self.ended.retain(|(_, p)| p.pid != pid);
                self.ended.push_back((at, row.counts_only()));
            }
        }
    }

    /// Processes forgotten as gone in the last `ENDED_KEPT_NS`, with their final rows
    /// (not one whose pid the story follows again).
    pub fn ended(&self) -> impl Iterator<Item = &super::story::ProcessStory> {
        let now = self.builder.processes();
        self.ended.iter().map(|(_, p)| p).filter(move |p| !now.contains_key(&p.pid))
    }

    /// Process `pid` was found gone at `at_ns` (the events' clock): it leaves the story
    /// (its rows, MRs, mappings, QPs and CQs) once every event before then is joined, so
    /// its last events do not bring it back. A daemon's state holds what still exists.
    pub fn retire(&mut self, pid: Task, at_ns: u64) {
        self.gone.push_back((at_ns, pid));
        self.through(self.joined_through_ns);
    }

    /// Joins everything fed so far, and every step that ended by then (a source that ended
    /// or paused: nothing later is waited for).
    pub fn flush(&mut self) {
        while !self.window.is_empty() {
            self.join_next();
        }
        self.through(self.newest_ns.saturating_add(1));
    }

    /// Joins everything fed so far, and every step.
    fn join_all(&mut self) {
        while !self.window.is_empty() {
            self.join_next();
        }
        self.through(u64::MAX);
    }

    /// What a daemon said exists when this story began (its state record).
    pub fn seed(&mut self, st: &crate::capture::State) {
        self.builder.seed(st);
    }

    /// What `explain` reads, everything fed joined first: the events kept, in the order
    /// fed, the story with its indexes into them, the steps, and where `anchor` (an index
    /// `push` gave) is among them (none when it is no longer kept).
    pub(crate) fn for_explain(
        &mut self,
        anchor: usize,
    ) -> (Vec<Event>, Story, Vec<StepRecord>, Option<usize>) {
        self.flush();
        let kept: Vec<usize> = self.store.by_index.iter().map(|(i, _)| *i).collect();
        let events = self.store.by_index.iter().map(|(_, e)| Event::clone(e)).collect();
        let at = |i: usize| kept.binary_search(&i).ok();
        let story = self.story().reindexed(&at);
        (events, story, self.steps.clone(), at(anchor))
    }

    /// An event still kept, by the index `push` gave it.
    pub fn event(&self, i: usize) -> Option<&Event> {
        self.store.ev(i)
    }

    /// Every event kept, with its index, oldest first, as the pointers the story holds.
    pub fn kept(&self) -> impl DoubleEndedIterator<Item = (usize, &Arc<Event>)> {
        self.store.by_index.iter().map(|(i, e)| (*i, e))
    }

    /// The story as it stands (no copy): what a view reads.
    pub fn now(&self) -> &Story {
        self.builder.story()
    }

    /// The steps joined after the first `seen`, oldest first, and how many there are.
    pub(crate) fn joins_since(&self, seen: u64) -> (impl Iterator<Item = &super::story::Joined>, u64) {
        (self.builder.joins_since(seen), self.builder.joins_total())
    }

    fn join_next(&mut self) {
        if let Some(w) = self.window.pop() {
            // A process found gone before this event leaves first: a new process given
            // its pid starts a row of its own.
            self.forget_gone(w.ev.ts_ns);
            self.builder.event(w.index, &w.ev);
            self.store.keep(w.index, w.ev);
        }
    }

    /// What exists now (pinned ranges, mappings per process), for a subscriber joining:
    /// everything fed so far counts (the reorder window is joined first, so the state
    /// and the records the subscriber gets next meet exactly).
    pub fn state(&mut self) -> crate::capture::State {
        while !self.window.is_empty() {
            self.join_next();
        }
        self.through(self.newest_ns.saturating_sub(self.limits.reorder_ns));
        self.builder.state(self.newest_ns)
    }

    /// The processes as joined so far (no copy: for metrics).
    pub fn processes(&self) -> &BTreeMap<Task, super::story::ProcessStory> {
        self.builder.processes()
    }

    /// The story so far (the events still in the reorder window not yet in it).
    pub fn story(&self) -> Story {
        self.builder.snapshot(&self.store, &self.steps)
    }

    /// Steps as they are announced (the marker), or known only at the end (a step file the
    /// companion finished writing): joined with the events kept; one already known is not
    /// added twice. CQ owners they name count for completions joined after this. At most
    /// `per_list` steps are kept, the oldest let go first (and counted).
    pub fn add_steps(&mut self, steps: Vec<StepRecord>) {
        let gone = self.evicted_through_ns;
        let new: Vec<StepRecord> = steps
            .into_iter()
            .filter(|s| gone.is_none_or(|t| s.t_end_ns > t))
            .filter(|s| self.step_keys.insert(step_key(s)))
            .collect();
        self.builder.learn_steps(&new);
        for s in &new {
            self.to_join.insert((s.t_end_ns, step_key(s)), s.clone());
        }
        self.steps.extend(new);
        let over = self.steps.len().saturating_sub(self.limits.per_list);
        if over > 0 {
            self.steps.sort_by_key(|s| s.t_end_ns);
            for s in self.steps.drain(..over) {
                self.step_keys.remove(&step_key(&s));
                self.to_join.remove(&(s.t_end_ns, step_key(&s)));
                self.evicted_through_ns = Some(self.evicted_through_ns.unwrap_or(0).max(s.t_end_ns));
            }
            self.evicted_steps += over as u64;
        }
        // A step whose end the story has already passed is joined now.
        self.through(self.joined_through_ns);
    }

    /// Joins what waits and ends the story; the events kept come with it.
    pub fn finish(mut self) -> (Story, Store, Vec<StepRecord>) {
        self.join_all();
        let mut story = self.builder.snapshot(&self.store, &self.steps);
        story.evicted_events = self.store.evicted;
        story.evicted_steps = self.evicted_steps;
        (story, self.store, self.steps)
    }
}

fn step_key(s: &StepRecord) -> (Task, u32, u32) {
    (s.process(), s.run, s.step)
}

/// A story of the whole capture at once: every event kept, all sorted by time before joining.
pub fn build(events: &[Event], steps: &[StepRecord]) -> Story {
    let mut live = Engine::new(steps.to_vec(), Limits::unbounded());
    for e in events {
        live.push(e.clone());
    }
    live.finish().0
}

#[cfg(test)]
mod window_tests {
    use super::*;

    /// Whatever order events arrive in, the window gives them back by (time, index).
    #[test]
    fn the_window_gives_events_back_in_time_order() {
        let times = [5u64, 7, 7, 3, 9, 1, 9, 8, 2, 10, 4, 4, 11];
        let ev: Arc<Event> = Arc::new(
            serde_json::from_str(
                r#"{"v":1,"ts_ns":0,"kind":"entry","name":"umem_get","path":"pin","pid":1,"tid":1,"comm":"x","cpu":0}"#,
            )
            .unwrap(),
        );
        let mut w = Window::default();
        for (index, &ts_ns) in times.iter().enumerate() {
            w.push(Waiting { ts_ns, index, ev: Arc::clone(&ev) });
        }
        assert_eq!(w.len(), times.len());
        let mut want: Vec<(u64, usize)> = times.iter().copied().zip(0..).collect();
        want.sort();
        let mut got = Vec::new();
        while let Some(p) = w.peek().map(|p| (p.ts_ns, p.index)) {
            let x = w.pop().unwrap();
            assert_eq!(p, (x.ts_ns, x.index));
            got.push(p);
        }
        assert!(w.is_empty());
        assert_eq!(got, want);
    }

    /// Calls nested deeper than `MAX_OPEN` on one thread (their returns lost) are let go,
    /// and both the story and the correlator count them.
    #[test]
    fn calls_let_go_are_counted_by_the_story_and_the_correlator() {
        let over = 7;
        let mut events: Vec<Event> = (0..super::super::calls::MAX_OPEN + over)
            .map(|i| {
                serde_json::from_str(&format!(
                    r#"{{"v":1,"ts_ns":{i},"kind":"entry","name":"ibv_reg_mr","path":"verbs","pid":1,"tid":1,"comm":"x","cpu":0}}"#
                ))
                .unwrap()
            })
            .collect();
        assert_eq!(build(&events, &[]).calls_let_go, over as u64);
        let mut c = super::super::Correlator::default();
        events.iter_mut().for_each(|e| c.feed(e));
        assert_eq!(c.let_go(), over as u64);
    }
}
