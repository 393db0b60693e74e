//! The pinning path in the story: each MR's pin (its range, pages, access, the limit it
//! was charged against, how long it took, or why it was refused), its keys from the
//! provider's reg_mr, and its end (`ib_umem_release`, or the `mr_dereg` tracepoint for an
//! MR known only from the kernel's tables). Pinned bytes are whole pages of live umems.

use super::story::{ProcessStory, push_capped};
use crate::capture::{PinnedRange, ProcessState};
use crate::event::{Event, EventKind, ProbeId};
use crate::units::PAGE;
use std::collections::HashMap;

/// One MR: its pin and what became of it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct MrStory {
    pub pid: u32,
    /// The thread that registered it.
    pub tid: u32,
    /// The pin's return event (none for an MR known only from the kernel's tables).
    pub event: Option<usize>,
    pub addr: u64,
    pub length: u64,
    pub pages: Option<u64>,
    pub access: Option<u64>,
    pub latency_ns: Option<u64>,
    pub lkey: Option<u64>,
    pub rkey: Option<u64>,
    /// Pinned now (not yet released).
    pub live: bool,
    /// A refused pin: the errno (12 for ENOMEM), and the memlock limit it was held to.
    pub refused: Option<i64>,
    pub memlock_limit: Option<u64>,
    /// The kernel's `struct ib_umem *`, which its release names.
    #[serde(skip)]
    pub umem: Option<u64>,
    /// The restrack id of an MR from the tables (`rdma res`): its `mr_dereg` ends it.
    pub mr_id: Option<u32>,
}

impl MrStory {
    /// Known only from the kernel's tables (`rdma res`: no address, no pin seen).
    pub fn from_tables(&self) -> bool {
        self.mr_id.is_some()
    }

    /// What it charges against the memlock limit: whole pages.
    pub fn charged(&self) -> u64 {
        self.pages.map(|p| p * PAGE).unwrap_or(self.length)
    }
}

/// What the pins need between events.
#[derive(Default)]
pub(super) struct Pins {
    /// The pin entry open on each thread (its range, access and limit).
    open: HashMap<u32, MrStory>,
    /// Pinned umems (kernel pointer → range and bytes charged), per process.
    pub(super) live: HashMap<u32, HashMap<u64, PinnedRange>>,
    /// MRs from the kernel's tables still registered: restrack id → (pid, range).
    tables: HashMap<u32, (u32, PinnedRange)>,
}

impl Pins {
    /// A pin event of process `ps` (event `i`): returns the pin's latency when one ended.
    pub(super) fn event(
        &mut self,
        ps: &mut ProcessStory,
        i: usize,
        e: &Event,
        per_list: usize,
    ) -> Option<u64> {
        match (e.probe(), e.kind) {
            (Some(ProbeId::UmemGet), EventKind::Entry) => {
                let row = MrStory {
                    pid: ps.pid,
                    tid: e.tid,
                    addr: e.field("addr").unwrap_or(0),
                    length: e.field("size").unwrap_or(0),
                    pages: e.field("pages"),
                    access: e.field("access"),
                    memlock_limit: e.field("memlock_limit"),
                    ..Default::default()
                };
                self.open.insert(e.tid, row);
                None
            }
            (Some(ProbeId::UmemGet), EventKind::Return) => self.returned(ps, i, e, per_list),
            (Some(ProbeId::RxeRegMr | ProbeId::Mlx5RegMr), EventKind::Return) => {
                // The provider's reg_mr returns right after the pin, on the same thread.
                let row =
                    ps.mrs.iter_mut().rev().find(|r| r.tid == e.tid && r.event.is_some() && r.lkey.is_none());
                if let Some(row) = row {
                    row.lkey = e.field("lkey");
                    row.rkey = e.field("rkey");
                }
                None
            }
            (Some(ProbeId::UmemRelease), EventKind::Entry) => {
                let umem = e.field("umem");
                if let Some(r) = umem.and_then(|u| self.live.entry(ps.pid).or_default().remove(&u)) {
                    ps.pinned_bytes = ps.pinned_bytes.saturating_sub(r.charged);
                    ended(ps, |m| m.umem == umem);
                }
                None
            }
            _ => None,
        }
    }

    fn returned(&mut self, ps: &mut ProcessStory, i: usize, e: &Event, per_list: usize) -> Option<u64> {
        let mut row = self.open.remove(&e.tid).unwrap_or_else(|| MrStory {
            pid: ps.pid,
            tid: e.tid,
            addr: e.field("umem_address").unwrap_or(0),
            length: e.field("umem_length").unwrap_or(0),
            ..Default::default()
        });
        row.event = Some(i);
        row.latency_ns = e.latency_ns;
        let umem = e.field("umem");
        if let Some(err) = umem.and_then(crate::pipeline::render::err_ptr) {
            row.refused = Some(-err);
            push_capped(&mut ps.failed_pins, per_list, i);
            ps.failed_pins_total += 1;
        } else {
            ps.pins_total += 1;
            if let Some(l) = e.latency_ns {
                ps.pin_latency.observe(l);
            }
            row.pages = row.pages.or(e.field("pages"));
            // What the pin charges: whole pages (VmPin), not the byte length.
            let charged = e.field("pages").map(|p| p * PAGE).or(e.field("umem_length"));
            if let (Some(u), Some(charged)) = (umem, charged) {
                let range = PinnedRange {
                    addr: e.field("umem_address").unwrap_or(0),
                    length: e.field("umem_length").unwrap_or(0),
                    charged,
                    umem: Some(u),
                    ..Default::default()
                };
                self.live.entry(ps.pid).or_default().insert(u, range);
                ps.pinned_bytes += charged;
                ps.pinned_peak_bytes = ps.pinned_peak_bytes.max(ps.pinned_bytes);
                row.umem = Some(u);
                row.live = true;
                ps.mrs_live += 1;
            }
        }
        push_capped(&mut ps.mrs, per_list, row);
        e.latency_ns
    }

    /// An `mr_dereg` (in any process: restrack ids are the kernel's): the MR from the
    /// tables with that id ends, in its own process's story.
    pub(super) fn dereg(&mut self, e: &Event, story: &mut std::collections::BTreeMap<u32, ProcessStory>) {
        if !(e.is(ProbeId::MrDereg) && e.kind == EventKind::Entry) {
            return;
        }
        let Some(id) = e.field("mr_id").and_then(|i| u32::try_from(i).ok()) else { return };
        let Some((pid, range)) = self.tables.remove(&id) else { return };
        if let Some(ps) = story.get_mut(&pid) {
            ps.pinned_bytes = ps.pinned_bytes.saturating_sub(range.charged);
            ended(ps, |m| m.mr_id == Some(id));
        }
    }

    /// What a daemon said was pinned before this story began (its state record).
    pub(super) fn seed(&mut self, ps: &mut ProcessStory, st: &ProcessState, per_list: usize) {
        ps.memlock_limit = st.memlock_limit.or(ps.memlock_limit);
        for m in &st.mrs {
            let row = MrStory {
                pid: st.pid,
                addr: m.addr,
                length: m.length,
                pages: Some(m.charged / PAGE),
                lkey: m.lkey,
                rkey: m.rkey,
                live: true,
                umem: m.umem,
                mr_id: m.mr_id,
                ..Default::default()
            };
            match (m.umem, m.mr_id) {
                (Some(u), _) => _ = self.live.entry(st.pid).or_default().insert(u, m.clone()),
                (None, Some(id)) => _ = self.tables.insert(id, (st.pid, m.clone())),
                (None, None) => continue,
            }
            ps.pinned_bytes += m.charged;
            ps.pinned_peak_bytes = ps.pinned_peak_bytes.max(ps.pinned_bytes);
            ps.mrs_live += 1;
            ps.mrs_seeded += 1;
            push_capped(&mut ps.mrs, per_list, row);
        }
    }

    /// What process `pid` has pinned now, by address.
    pub(super) fn live_of(&self, pid: u32) -> Vec<PinnedRange> {
        let seen = self.live.get(&pid).into_iter().flat_map(|m| m.values());
        let tables = self.tables.values().filter(|(p, _)| *p == pid).map(|(_, r)| r);
        let mut out: Vec<PinnedRange> = seen.chain(tables).cloned().collect();
        out.sort_by_key(|r| r.addr);
        out
    }

    /// Forgets a retired process.
    pub(super) fn retire(&mut self, pid: u32) {
        self.live.remove(&pid);
        self.tables.retain(|_, (p, _)| *p != pid);
        self.open.retain(|_, r| r.pid != pid);
    }
}

/// The newest live MR row `is` names is no longer pinned.
fn ended(ps: &mut ProcessStory, is: impl Fn(&MrStory) -> bool) {
    ps.mrs_live = ps.mrs_live.saturating_sub(1);
    if let Some(row) = ps.mrs.iter_mut().rev().find(|r| r.live && is(r)) {
        row.live = false;
    }
}
