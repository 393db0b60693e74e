//! Correlation (pure: events in, story out, no I/O). `Correlator`, on the live path before
//! anything is written: each return's latency from its entry (`calls`, the one pairing),
//! and the pages a umem spans. The rest builds the story (`engine`, `story` and its rows).

use crate::event::FieldId;
pub(crate) mod aggregate;
pub(crate) mod calls;
pub(crate) mod checks;
pub(crate) mod cqs;
pub mod engine;
pub(crate) mod kept;
pub mod mmaps;
pub mod pins;
pub mod qps;
pub(crate) mod rows;
pub mod story;

use crate::event::{Event, EventKind, ProbeId, Value};
use crate::steps::pages_spanned;

/// An entry waiting for its return: when it happened, and the user range it was given.
struct OpenCall {
    ts_ns: u64,
    range: Option<(u64, u64)>,
}

/// Pairs each return with its entry on the same thread (latency), live.
#[derive(Default)]
pub struct Correlator {
    /// The functions open on each thread (syscalls are not calls here: their exits carry
    /// no latency).
    open: calls::OpenCalls<OpenCall>,
}

impl Correlator {
    /// Calls let go while open (past `calls::MAX_OPEN` on one thread): their returns get
    /// no latency.
    pub(crate) fn let_go(&self) -> u64 {
        self.open.let_go
    }

    /// Adds what pairing `ev` with its entry gives (latency, a pin's pages), in place.
    pub fn feed(&mut self, ev: &mut Event) {
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
                self.open.enter(ev.thread(), &ev.name, OpenCall { ts_ns: ev.ts_ns, range });
            }
            EventKind::Return => {
                if let Some(calls::Closed { call, .. }) = self.open.ret(ev.thread(), &ev.name) {
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
