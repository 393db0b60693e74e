//! The registration path in the story: each MR as what it is — user pages pinned (its
//! range, pages, access, the limit it was charged against), on-demand paging (nothing
//! pinned; the pages the device faulted in, counted), or a dma-buf exporter's memory (its
//! fd) —, how long the umem took or why it was refused, its keys from the provider's
//! reg_mr, its re-registrations, and its end (`ib_umem_release`, whatever the kind, or the
//! `mr_dereg` tracepoint for an MR known only from the kernel's tables). Pinned bytes are
//! whole pages of live pinned umems.

use super::rows::ProcessStory;
pub use super::rows::{MrKind, MrStory};
use crate::capture::{PinnedRange, ProcessState};
use crate::event::FieldId;
use crate::event::Task;
use crate::event::{Event, EventKind, ProbeId};
use crate::units::PAGE;
use crate::util::push_capped;
use std::collections::HashMap;

/// What the pins need between events.
#[derive(Default)]
pub(super) struct Pins {
    /// The pin entry open on each thread (its range, access and limit).
    open: HashMap<Task, MrStory>,
    /// Pinned umems (kernel pointer → range and bytes charged), per process.
    pub(super) live: HashMap<Task, HashMap<u64, PinnedRange>>,
    /// MRs from the kernel's tables still registered: restrack id → (pid, range).
    tables: HashMap<(u16, u32), (Task, PinnedRange)>,
    /// Live umems that pin nothing here (ODP, dma-buf): umem → pid.
    unpinned: HashMap<u64, Task>,
    /// The ODP mapping open on each thread: (the MR's process, its umem).
    faulting: HashMap<Task, (Task, u64)>,
    /// The rereg open on each thread: its MR.
    rereg: HashMap<Task, Option<u64>>,
}

impl Pins {
    /// The process an ODP mapping event belongs to: its MR's (the device's fault work may
    /// run in any thread).
    pub(super) fn owner_of(&self, e: &Event) -> Option<Task> {
        match (e.probe(), e.kind) {
            (Some(ProbeId::OdpFault), EventKind::Entry) => {
                e.field(FieldId::UmemOdp).and_then(|u| self.unpinned.get(&u)).copied()
            }
            (Some(ProbeId::OdpFault), EventKind::Return) => self.faulting.get(&e.thread()).map(|f| f.0),
            _ => None,
        }
    }

    /// A registration event of process `ps` (event `i`): returns the umem's latency when
    /// a pin ended.
    pub(super) fn event(
        &mut self,
        ps: &mut ProcessStory,
        i: usize,
        e: &Event,
        per_list: usize,
    ) -> Option<u64> {
        let kind = match e.probe() {
            Some(ProbeId::UmemGet) => MrKind::Pinned,
            Some(ProbeId::UmemOdpGet) => MrKind::Odp,
            Some(ProbeId::UmemDmabufGet) => MrKind::DmaBuf { fd: e.field(FieldId::Fd).unwrap_or(0) },
            Some(ProbeId::UmemDmabufPinned) => MrKind::DmaBufPinned { fd: e.field(FieldId::Fd).unwrap_or(0) },
            _ => return self.other(ps, e),
        };
        match e.kind {
            EventKind::Entry => {
                let row = MrStory {
                    kind,
                    pid: ps.pid,
                    tid: e.thread(),
                    addr: e.field(FieldId::Addr).or(e.field(FieldId::Offset)).unwrap_or(0),
                    length: e.field(FieldId::Size).unwrap_or(0),
                    pages: e.field(FieldId::Pages).filter(|_| kind == MrKind::Pinned),
                    access: e.field(FieldId::Access),
                    memlock_limit: e.field(FieldId::MemlockLimit),
                    ..Default::default()
                };
                self.open.insert(e.thread(), row);
                None
            }
            EventKind::Return => self.returned(ps, i, e, per_list, kind),
            _ => None,
        }
    }

    /// Keys, re-registrations, ODP mappings and releases.
    fn other(&mut self, ps: &mut ProcessStory, e: &Event) -> Option<u64> {
        match (e.probe(), e.kind) {
            (Some(ProbeId::RxeRegMr | ProbeId::Mlx5RegMr), EventKind::Return) => {
                // The provider's reg_mr returns right after the umem, on the same thread.
                let pid = ps.pid;
                if let Some(row) =
                    newest(ps, |r| r.tid == e.thread() && r.event.is_some() && r.lkey.is_none())
                {
                    row.lkey = e.field(FieldId::Lkey);
                    row.rkey = e.field(FieldId::Rkey);
                    row.mr = e.field(FieldId::Mr).filter(|m| crate::pipeline::render::err_ptr(*m).is_none());
                    // The live pin too: a late subscriber's state names its keys.
                    if let Some(r) = row.umem.and_then(|u| self.live.get_mut(&pid)?.get_mut(&u)) {
                        (r.lkey, r.rkey) = (row.lkey, row.rkey);
                    }
                }
            }
            (Some(ProbeId::RxeRereg | ProbeId::Mlx5Rereg), EventKind::Entry) => {
                ps.rereg_total += 1;
                let mr = e.field(FieldId::Mr);
                if let Some(row) = newest(ps, |r| mr.is_some() && r.mr == mr) {
                    row.rereg += 1;
                }
                self.rereg.insert(e.thread(), mr);
            }
            (Some(ProbeId::RxeRereg | ProbeId::Mlx5Rereg), EventKind::Return) => {
                let mr = self.rereg.remove(&e.thread()).flatten();
                if e.field(FieldId::Mr).and_then(crate::pipeline::render::err_ptr).is_some() {
                    ps.rereg_refused += 1;
                    if let Some(row) = newest(ps, |r| mr.is_some() && r.mr == mr) {
                        row.rereg_refused += 1;
                    }
                }
            }
            (Some(ProbeId::OdpFault), EventKind::Entry) => {
                let umem = e.field(FieldId::UmemOdp).unwrap_or(0);
                ps.odp_faults += 1;
                if let Some(row) = newest(ps, |r| r.umem == Some(umem)) {
                    row.faults += 1;
                }
                self.faulting.insert(e.thread(), (ps.pid, umem));
            }
            (Some(ProbeId::OdpFault), EventKind::Return) => {
                let mapped = e.field(FieldId::Ret).map(|r| r as i64).filter(|r| *r > 0);
                if let (Some((_, umem)), Some(n)) = (self.faulting.remove(&e.thread()), mapped)
                    && let Some(row) = newest(ps, |r| r.umem == Some(umem))
                {
                    row.faulted_pages += n as u64;
                }
            }
            (Some(ProbeId::UmemRelease), EventKind::Entry) => {
                let umem = e.field(FieldId::Umem);
                if let Some(r) = umem.and_then(|u| self.live.entry(ps.pid).or_default().remove(&u)) {
                    ps.pinned_bytes = ps.pinned_bytes.saturating_sub(r.charged);
                    ended(ps, |m| m.umem == umem);
                } else if umem.and_then(|u| self.unpinned.remove(&u)).is_some() {
                    ended(ps, |m| m.umem == umem);
                }
            }
            _ => {}
        }
        None
    }

    /// A umem returned (`kind` says which call made it): the MR refused, or live. Returns
    /// the latency of a pin.
    fn returned(
        &mut self,
        ps: &mut ProcessStory,
        i: usize,
        e: &Event,
        per_list: usize,
        kind: MrKind,
    ) -> Option<u64> {
        // An entry not seen (the story began during the call): what the return says.
        let mut row = self.open.remove(&e.thread()).unwrap_or_else(|| MrStory {
            kind,
            pid: ps.pid,
            tid: e.thread(),
            addr: e.field(FieldId::UmemAddress).unwrap_or(0),
            length: e.field(FieldId::UmemLength).unwrap_or(0),
            ..Default::default()
        });
        row.event = Some(i);
        row.latency_ns = e.latency_ns;
        let umem = e.field(FieldId::Umem).or(e.field(FieldId::UmemOdp)).or(e.field(FieldId::UmemDmabuf));
        if let Some(err) = umem.and_then(crate::pipeline::render::err_ptr) {
            row.refused = Some(-err);
            push_capped(&mut ps.failed_pins, per_list, i);
            ps.failed_pins_total += 1;
        } else if row.kind == MrKind::Pinned {
            self.pinned(ps, &mut row, e, umem);
        } else {
            // ODP or dma-buf: live, charging nothing to the limit.
            match row.kind {
                MrKind::Odp => ps.odp_total += 1,
                _ => ps.dmabuf_total += 1,
            }
            if let Some(u) = umem {
                self.unpinned.insert(u, ps.pid);
                live(ps, &mut row, u);
            }
        }
        let pin = (row.kind == MrKind::Pinned).then_some(e.latency_ns).flatten();
        push_capped(&mut ps.mrs, per_list, row);
        pin
    }

    /// A pin that succeeded: its pages charged to the process.
    fn pinned(&mut self, ps: &mut ProcessStory, row: &mut MrStory, e: &Event, umem: Option<u64>) {
        ps.pins_total += 1;
        if let Some(l) = e.latency_ns {
            ps.pin_latency.observe(l);
        }
        row.pages = row.pages.or(e.field(FieldId::Pages));
        // What the pin charges: whole pages (VmPin), not the byte length.
        let charged = e.field(FieldId::Pages).map(|p| p * PAGE).or(e.field(FieldId::UmemLength));
        if let (Some(u), Some(charged)) = (umem, charged) {
            let range = PinnedRange {
                addr: e.field(FieldId::UmemAddress).unwrap_or(0),
                length: e.field(FieldId::UmemLength).unwrap_or(0),
                charged,
                umem: Some(u),
                ..Default::default()
            };
            self.live.entry(ps.pid).or_default().insert(u, range);
            ps.pinned_bytes += charged;
            ps.pinned_peak_bytes = ps.pinned_peak_bytes.max(ps.pinned_bytes);
            live(ps, row, u);
        }
    }

    /// An `mr_dereg` (in any process: restrack ids are the kernel's): the MR from the
    /// tables with that id ends, in its own process's story.
    pub(super) fn dereg(&mut self, e: &Event, story: &mut std::collections::BTreeMap<Task, ProcessStory>) {
        if !(e.is(ProbeId::MrDereg) && e.kind == EventKind::Entry) {
            return;
        }
        let Some(id) = e.field(FieldId::MrId).and_then(|i| u32::try_from(i).ok()) else { return };
        let Some((pid, range)) = self.tables.remove(&(e.host, id)) else { return };
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
                pid: Task::new(st.host, st.pid),
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
                (Some(u), _) => {
                    _ = self.live.entry(Task::new(st.host, st.pid)).or_default().insert(u, m.clone())
                }
                (None, Some(id)) => {
                    _ = self.tables.insert((st.host, id), (Task::new(st.host, st.pid), m.clone()))
                }
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
    pub(super) fn live_of(&self, pid: Task) -> Vec<PinnedRange> {
        let seen = self.live.get(&pid).into_iter().flat_map(|m| m.values());
        let tables = self.tables.values().filter(|(p, _)| *p == pid).map(|(_, r)| r);
        let mut out: Vec<PinnedRange> = seen.chain(tables).cloned().collect();
        out.sort_by_key(|r| r.addr);
        out
    }

    /// Forgets a retired process.
    pub(super) fn retire(&mut self, pid: Task) {
        self.live.remove(&pid);
        self.unpinned.retain(|_, p| *p != pid);
        self.faulting.retain(|_, f| f.0 != pid);
        self.tables.retain(|_, (p, _)| *p != pid);
        self.open.retain(|_, r| r.pid != pid);
    }
}

/// The newest live MR row `is` names is no longer pinned.
/// The MR row of `umem` is live.
fn live(ps: &mut ProcessStory, row: &mut MrStory, umem: u64) {
    row.umem = Some(umem);
    row.live = true;
    ps.mrs_live += 1;
}

/// The newest MR row that `is` picks.
fn newest(ps: &mut ProcessStory, is: impl Fn(&MrStory) -> bool) -> Option<&mut MrStory> {
    ps.mrs.iter_mut().rev().find(|r| is(r))
}

fn ended(ps: &mut ProcessStory, is: impl Fn(&MrStory) -> bool) {
    ps.mrs_live = ps.mrs_live.saturating_sub(1);
    if let Some(row) = newest(ps, |r| r.live && is(r)) {
        row.live = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ret(name: &str, fields: &str) -> Event {
        let line = format!(
            r#"{{"v":1,"ts_ns":1,"kind":"return","name":"{name}","path":"pin","pid":7,"tid":7,"comm":"w","cpu":0,"fields":{{{fields}}},"latency_ns":50}}"#
        );
        serde_json::from_str(&line).unwrap()
    }

    /// A umem whose entry was not seen (the story began during the call) is still what
    /// its probe says: an ODP return counts an ODP MR, live and charging nothing; a pin's
    /// return charges its pages and gives its latency.
    #[test]
    fn a_return_without_its_entry_keeps_its_kind() {
        let (mut pins, mut ps) =
            (Pins::default(), ProcessStory { pid: Task::new(0, 7), ..Default::default() });
        let odp = ret("umem_odp_get", r#""umem_odp":4096,"umem_address":8192,"umem_length":65536"#);
        assert_eq!(pins.event(&mut ps, 0, &odp, 10), None);
        assert_eq!((ps.odp_total, ps.dmabuf_total, ps.pins_total, ps.pinned_bytes), (1, 0, 0, 0));
        let row = &ps.mrs[0];
        assert_eq!((row.kind, row.addr, row.length, row.live), (MrKind::Odp, 8192, 65536, true));
        let pin = ret("umem_get", r#""pages":2,"umem":12288,"umem_address":16384,"umem_length":8000"#);
        assert_eq!(pins.event(&mut ps, 1, &pin, 10), Some(50));
        assert_eq!((ps.pins_total, ps.pinned_bytes, ps.mrs_live), (1, 2 * PAGE, 2));
        assert_eq!(ps.mrs[1].kind, MrKind::Pinned);
    }
}
