//! What the story keeps, and how it looks events up: `Limits` (how many events, entries
//! per list and processes are kept, how long a late record is waited for) and `Events`
//! (what the story indexes: a whole capture's slice, or the live store).

use crate::event::Event;

/// Events a story can look up by the index it gives them (the order they were fed in).
pub trait Events {
    /// The event the story knows by index `i`, if it is still kept.
    fn ev(&self, i: usize) -> Option<&Event>;
    /// Every event still kept, with its index, in the order fed.
    fn all(&self) -> Box<dyn Iterator<Item = (usize, &Event)> + '_>;
}

impl Events for [Event] {
    fn ev(&self, i: usize) -> Option<&Event> {
        self.get(i)
    }
    fn all(&self) -> Box<dyn Iterator<Item = (usize, &Event)> + '_> {
        Box::new(self.iter().enumerate())
    }
}

impl Events for Vec<Event> {
    fn ev(&self, i: usize) -> Option<&Event> {
        self.get(i)
    }
    fn all(&self) -> Box<dyn Iterator<Item = (usize, &Event)> + '_> {
        Box::new(self.iter().enumerate())
    }
}

/// What the story keeps, and how long it waits for a late record.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Events kept for lookups (the report's call lines, step joins).
    pub events: usize,
    /// Entries kept per list (a process's events, calls, completions, refused pins).
    pub per_list: usize,
    /// Processes followed at once: past it, the one quiet longest is retired.
    pub processes: usize,
    /// An event is joined once one this much newer has arrived…
    pub reorder_ns: u64,
    /// …or once this many wait.
    pub reorder_max: usize,
}

impl Default for Limits {
    /// Bounded: about 100 MiB at most on an endless stream of lab-sized events.
    fn default() -> Self {
        Limits {
            events: 20_000,
            per_list: 2_000,
            processes: 1_000,
            reorder_ns: 1_000_000_000,
            reorder_max: 50_000,
        }
    }
}

impl Limits {
    /// Everything kept, everything sorted before joining: a whole capture in memory.
    pub fn unbounded() -> Self {
        Limits {
            events: usize::MAX,
            per_list: usize::MAX,
            processes: usize::MAX,
            reorder_ns: u64::MAX,
            reorder_max: usize::MAX,
        }
    }
}
