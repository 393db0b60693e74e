//! Correlation (pure: events in, events out, no I/O). Today: pairs each return with its
//! entry on the same thread and probe to give the call's latency, and adds derived
//! measures (pages pinned by a umem).

use crate::event::FieldId;
use crate::event::Task;
pub mod aggregate;
pub mod checks;
pub mod cqs;
pub mod kept;
pub mod live;
pub mod mmaps;
pub mod pins;
pub mod qps;
pub mod rows;
pub mod story;

use crate::event::{Event, EventKind, ProbeId, Value};
use crate::steps::pages_spanned;
use std::collections::HashMap;

/// An entry waiting for its return: when it happened, and the user range it was given.
struct OpenCall {
    ts_ns: u64,
    range: Option<(u64, u64)>,
}

#[derive(Default)]
pub struct Correlator {
    /// (tid, probe) → open calls (a stack: calls may nest).
    open: HashMap<(Task, crate::event::Name), Vec<OpenCall>>,
}

impl Correlator {
    pub fn feed(&mut self, mut ev: Event) -> Event {
        match ev.kind {
            EventKind::Entry => {
                let range = match (ev.field(FieldId::Addr), ev.field(FieldId::Size)) {
                    (Some(a), Some(s)) => Some((a, s)),
                    _ => None,
                };
                if let Some((a, s)) = range
                    && ev.is(ProbeId::UmemGet)
                {
                    ev.fields.insert(FieldId::Pages, Value::U(pages_spanned(a, s)));
                }
                self.open
                    .entry((ev.thread(), ev.name.clone()))
                    .or_default()
                    .push(OpenCall { ts_ns: ev.ts_ns, range });
            }
            EventKind::Return => {
                if let Some(stack) = self.open.get_mut(&(ev.thread(), ev.name.clone()))
                    && let Some(call) = stack.pop()
                {
                    ev.latency_ns = Some(ev.ts_ns.saturating_sub(call.ts_ns));
                    // The pages the kernel pinned, from the umem it returned (its iova and
                    // length: what ib_umem_num_pages counts), else from the call's range.
                    let kernel = ev.field(FieldId::UmemIova).zip(ev.field(FieldId::UmemLength));
                    if let Some((a, s)) = kernel.or(call.range)
                        && ev.is(ProbeId::UmemGet)
                    {
                        ev.fields.insert(FieldId::Pages, Value::U(pages_spanned(a, s)));
                    }
                }
            }
            _ => {}
        }
        ev
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages() {
        assert_eq!(pages_spanned(0x1000, 4096), 1);
        assert_eq!(pages_spanned(0x1800, 4096), 2);
        assert_eq!(pages_spanned(0x1000, 64 << 20), 16384);
        assert_eq!(pages_spanned(0x1fff, 2), 2);
        assert_eq!(pages_spanned(0x1000, 0), 0);
    }
}
