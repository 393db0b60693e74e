//! A run that only counts (`rdma-trace daemon --metrics-only`): each kernel probe's hits
//! are aggregated in the kernel, per process and probe, and the pins are charged and
//! timed there (`SlotPlan::agg`); nothing goes to the ring. The user-space probes are left
//! out: they exist to join a verbs call to its kernel events, which counting does not do.

use super::catalog::{FieldId, Kind, ProbeId};
use super::select::{Plan, Skip, Skipped};
use rdma_trace_common::{
    AGG_COMPLETION, AGG_COUNT, AGG_CQ_MADE, AGG_PIN_ENTRY, AGG_PIN_RETURN, AGG_UNPIN, AGG_WAKEUP, MAX_FETCH,
    STACK_COPY, STACK_NONE, SlotPlan,
};

/// Turns `plan` into a counting one: every kernel probe counts, the pin functions charge
/// and time, and the uprobes are skipped (said as such).
pub fn count_only(plan: &mut Plan) {
    plan.counted = true;
    let (kept, user): (Vec<_>, Vec<_>) = std::mem::take(&mut plan.probes)
        .into_iter()
        .partition(|p| !matches!(p.spec.kind, Kind::Uprobe { .. }));
    plan.skipped.extend(user.into_iter().map(|p| Skipped { spec: p.spec, reason: Skip::NotCounted }));
    plan.probes = kept;
    for p in &mut plan.probes {
        let entry_at = |id| index(p.spec.entry.iter().map(|f| f.id), id);
        let ret_at = |id| index(p.spec.ret.iter().map(|f| f.id), id);
        let (entry, ret) = match p.spec.id {
            ProbeId::UmemGet => (
                role(AGG_PIN_ENTRY, entry_at(FieldId::Addr), entry_at(FieldId::Size)),
                role(AGG_PIN_RETURN, ret_at(FieldId::Umem), None),
            ),
            ProbeId::UmemRelease => (role(AGG_UNPIN, entry_at(FieldId::Umem), None), Some((AGG_COUNT, 0, 0))),
            ProbeId::RxeCreateCq | ProbeId::Mlx5CreateCq => {
                (role(AGG_CQ_MADE, entry_at(FieldId::Cq), None), Some((AGG_COUNT, 0, 0)))
            }
            ProbeId::CompHandler => (role(AGG_COMPLETION, entry_at(FieldId::Cq), None), None),
            ProbeId::CompEventRead => (Some((AGG_COUNT, 0, 0)), role(AGG_WAKEUP, ret_at(FieldId::Ret), None)),
            _ => (Some((AGG_COUNT, 0, 0)), Some((AGG_COUNT, 0, 0))),
        };
        set(&mut p.entry, entry);
        // The completion's stack says whether its handler ran in softirq processing.
        p.entry.stack = if p.entry.agg == AGG_COMPLETION { STACK_COPY } else { STACK_NONE };
        if let Some(r) = p.ret.as_mut() {
            set(r, ret.or(Some((AGG_COUNT, 0, 0))));
        }
    }
}

/// A role reading `vals[a]` and `vals[b]`; a field the catalog does not have leaves the
/// slot counting only.
fn role(agg: u8, a: Option<usize>, b: Option<usize>) -> Option<(u8, u8, u8)> {
    let needs_b = agg == AGG_PIN_ENTRY;
    match (a, b) {
        (Some(a), Some(b)) => Some((agg, a as u8, b as u8)),
        (Some(a), None) if !needs_b => Some((agg, a as u8, 0)),
        _ => Some((AGG_COUNT, 0, 0)),
    }
}

fn set(slot: &mut SlotPlan, role: Option<(u8, u8, u8)>) {
    if let Some((agg, a, b)) = role {
        (slot.agg, slot.agg_a, slot.agg_b) = (agg, a, b);
    }
}

fn index(mut ids: impl Iterator<Item = FieldId>, id: FieldId) -> Option<usize> {
    ids.position(|f| f == id).filter(|&i| i < MAX_FETCH)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::catalog::CATALOG;
    use crate::plan::select::Planned;

    fn planned(id: ProbeId, slot: usize) -> Planned {
        Planned::for_test(id, slot)
    }

    #[test]
    fn pins_are_charged_and_timed_and_every_other_kernel_probe_counts() {
        let user = CATALOG.iter().find(|s| matches!(s.kind, Kind::Uprobe { .. })).unwrap().id;
        let mut plan = Plan {
            probes: vec![
                planned(ProbeId::UmemGet, 0),
                planned(ProbeId::UmemRelease, 1),
                planned(ProbeId::CompHandler, 2),
                planned(ProbeId::RxeCreateCq, 3),
                planned(ProbeId::CompEventRead, 4),
                planned(user, 24),
            ],
            ..Default::default()
        };
        count_only(&mut plan);
        assert!(plan.counted);
        assert_eq!(plan.skipped.len(), 1);
        assert_eq!((plan.probes[3].entry.agg, plan.probes[3].entry.agg_a), (AGG_CQ_MADE, 0));
        // ib_uverbs_comp_event_read's return: a positive count is a wakeup.
        assert_eq!(plan.probes[4].ret.map(|r| (r.agg, r.agg_a)), Some((AGG_WAKEUP, 0)));
        assert_eq!(
            plan.skipped[0].reason.to_string(),
            "a counting run (--metrics-only) reads kernel probes only"
        );
        let get = &plan.probes[0];
        // ib_umem_get(device, addr, size, access): the catalog reads addr then size.
        assert_eq!((get.entry.agg, get.entry.agg_a, get.entry.agg_b), (AGG_PIN_ENTRY, 0, 1));
        let r = get.ret.unwrap();
        assert_eq!((r.agg, r.agg_a), (AGG_PIN_RETURN, 0));
        assert_eq!((plan.probes[1].entry.agg, plan.probes[1].entry.agg_a), (AGG_UNPIN, 0));
        // ib_uverbs_comp_handler(cq, …): counted for the CQ's maker, its stack taken.
        let handler = &plan.probes[2];
        assert_eq!(
            (handler.entry.agg, handler.entry.agg_a, handler.entry.stack),
            (AGG_COMPLETION, 0, STACK_COPY)
        );
        assert!(plan.probes[..2].iter().all(|p| p.entry.stack == STACK_NONE), "no other stacks are taken");
    }
}
