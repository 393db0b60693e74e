//! Entry and return paired: the one rule every reader of calls uses (the latency the
//! correlator writes, the story's libibverbs calls, the Perfetto export's slices, the
//! calls `explain` reads).
//!
//! Each thread has a stack of open calls. A return closes the innermost open call of its
//! name; any call opened inside that one and still open lost its return (the kernel skips
//! program runs: `program … skipped by the kernel`) and is closed without one. A return
//! with no open call of its name lost its entry and pairs with nothing. So the calls of a
//! thread nest whatever was lost.

use crate::event::{Event, EventKind, Name, Task};
use std::collections::HashMap;

/// Deeper than this, a thread's oldest open call is let go as an unreturned one: calls
/// nest a few deep, so only a probe whose returns are never seen gets here.
pub const MAX_OPEN: usize = 256;

/// The open calls of every thread, each with what its reader keeps for it (`T`).
pub(crate) struct OpenCalls<T> {
    by_thread: HashMap<Task, Vec<(Name, T)>>,
    /// Open calls let go past `MAX_OPEN` (their returns, if any come, pair with nothing).
    pub let_go: u64,
}

impl<T> Default for OpenCalls<T> {
    fn default() -> Self {
        OpenCalls { by_thread: HashMap::new(), let_go: 0 }
    }
}

/// What a return closed: its call, and the calls opened inside it that lost their returns
/// (innermost last).
pub(crate) struct Closed<T> {
    pub call: T,
    pub unreturned: Vec<T>,
}

impl<T> OpenCalls<T> {
    /// A call of `name` entered on `thread`.
    pub(crate) fn enter(&mut self, thread: Task, name: &Name, t: T) {
        let stack = self.by_thread.entry(thread).or_default();
        stack.push((name.clone(), t));
        if stack.len() > MAX_OPEN {
            stack.remove(0);
            self.let_go += 1;
        }
    }

    /// A return of `name` on `thread`: the call it closes, or None (its entry was lost).
    pub(crate) fn ret(&mut self, thread: Task, name: &Name) -> Option<Closed<T>> {
        let stack = self.by_thread.get_mut(&thread)?;
        let at = stack.iter().rposition(|(n, _)| n == name)?;
        let unreturned = stack.drain(at + 1..).map(|(_, t)| t).collect();
        let (_, call) = stack.pop()?;
        if stack.is_empty() {
            self.by_thread.remove(&thread);
        }
        Some(Closed { call, unreturned })
    }

    /// The innermost call open on `thread`.
    pub(crate) fn innermost(&self, thread: Task) -> Option<&T> {
        self.by_thread.get(&thread).and_then(|s| s.last()).map(|(_, t)| t)
    }

    pub(crate) fn innermost_mut(&mut self, thread: Task) -> Option<&mut T> {
        self.by_thread.get_mut(&thread).and_then(|s| s.last_mut()).map(|(_, t)| t)
    }

    /// Every call still open.
    pub(crate) fn open(&self) -> impl Iterator<Item = &T> {
        self.by_thread.values().flatten().map(|(_, t)| t)
    }

    /// Forgets the open calls `keep` refuses (a process gone).
    pub(crate) fn retain(&mut self, keep: impl Fn(&T) -> bool) {
        self.by_thread.retain(|_, s| {
            s.retain(|(_, t)| keep(t));
            !s.is_empty()
        });
    }
}

/// Whether `e` opens a call (a function or a syscall entered); else it closes one.
pub(crate) fn opens(e: &Event) -> bool {
    matches!(e.kind, EventKind::Entry | EventKind::SyscallEnter)
}

/// The calls of a run's events, paired by the rule above: for each event, the return that
/// closed it (an entry), and the call it happened in (the innermost open on its thread).
pub struct Pairs {
    ret: Vec<Option<usize>>,
    parent: Vec<Option<usize>>,
}

impl Pairs {
    /// `events` in the order they ran (a story's time order).
    pub fn of(events: &[Event]) -> Pairs {
        let mut calls = OpenCalls::<usize>::default();
        let mut out = Pairs { ret: vec![None; events.len()], parent: vec![None; events.len()] };
        for (i, e) in events.iter().enumerate() {
            let thread = e.thread();
            out.parent[i] = calls.innermost(thread).copied();
            if opens(e) {
                calls.enter(thread, &e.name, i);
            } else if let Some(c) = calls.ret(thread, &e.name) {
                out.ret[c.call] = Some(i);
                out.parent[i] = out.parent[c.call];
            }
        }
        out
    }

    /// The return that closed the call entered at `i`.
    pub fn return_of(&self, i: usize) -> Option<usize> {
        self.ret.get(i).copied().flatten()
    }

    /// The calls event `i` happened in, innermost first.
    pub fn enclosing(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors(self.parent.get(i).copied().flatten(), |&p| self.parent[p])
    }

    /// The events inside the call entered at `i` (up to its return, or the end of the run
    /// where it lost its return), on its thread: each has `i` among its enclosing calls.
    pub fn inside(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        let end = self.return_of(i).unwrap_or(self.parent.len());
        (i + 1..end).filter(move |&j| self.enclosing(j).any(|p| p == i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: &str, name: &str, tid: u32) -> Event {
        let text = format!(
            r#"{{"v":1,"ts_ns":0,"kind":"{kind}","name":"{name}","path":"pin","pid":1,"tid":{tid},"comm":"x","cpu":0}}"#
        );
        serde_json::from_str(&text).unwrap()
    }

    /// A lost return leaves its call unreturned when the call around it returns; a lost
    /// entry's return pairs with nothing; another thread's calls are its own.
    #[test]
    fn calls_nest_whatever_was_lost() {
        let events = [
            ev("syscall_enter", "ioctl", 1), // 0
            ev("entry", "umem_get", 1),      // 1
            ev("entry", "rxe_reg_mr", 1),    // 2: its return is lost
            ev("entry", "umem_get", 2),      // 3: another thread
            ev("return", "umem_get", 1),     // 4: closes 1, and 2 lost its return
            ev("return", "rxe_reg_mr", 1),   // 5: nothing open of its name: its entry lost
            ev("syscall_exit", "ioctl", 1),  // 6: closes 0
            ev("return", "umem_get", 2),     // 7: closes 3
        ];
        let p = Pairs::of(&events);
        let rets: Vec<_> = (0..events.len()).map(|i| p.return_of(i)).collect();
        assert_eq!(rets, [Some(6), Some(4), None, Some(7), None, None, None, None]);
        assert_eq!(p.enclosing(2).collect::<Vec<_>>(), [1, 0]);
        assert_eq!(p.enclosing(4).collect::<Vec<_>>(), [0], "a return is in what its entry was in");
        assert_eq!(p.enclosing(5).collect::<Vec<_>>(), [0]);
        assert_eq!(p.enclosing(3).count(), 0);
        assert_eq!(p.inside(0).collect::<Vec<_>>(), [1, 2, 4, 5]);
        assert_eq!(p.inside(1).collect::<Vec<_>>(), [2]);

        let mut calls = OpenCalls::default();
        let t = Task::new(0, 1);
        calls.enter(t, &"a".into(), 'a');
        calls.enter(t, &"b".into(), 'b');
        calls.enter(t, &"c".into(), 'c');
        let c = calls.ret(t, &"a".into()).unwrap();
        assert_eq!((c.call, c.unreturned), ('a', vec!['b', 'c']));
        assert!(calls.ret(t, &"b".into()).is_none());
        assert_eq!(calls.open().count(), 0);
    }

    /// Past `MAX_OPEN` open calls on a thread, the oldest is let go, counted.
    #[test]
    fn a_thread_holds_at_most_max_open_calls() {
        let mut calls = OpenCalls::default();
        let t = Task::new(0, 1);
        for i in 0..MAX_OPEN + 3 {
            calls.enter(t, &"f".into(), i);
        }
        assert_eq!((calls.open().count(), calls.let_go), (MAX_OPEN, 3));
        assert_eq!(calls.ret(t, &"f".into()).map(|c| c.call), Some(MAX_OPEN + 2));
    }
}
