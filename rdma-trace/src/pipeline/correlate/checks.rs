//! What a companion step says, against what the kernel did: one check per value both
//! sides know (MR range and keys, CQ handle, the CQ an event was delivered for).

use super::kept::Events;
use crate::event::FieldId;
use crate::event::{Event, EventKind, ProbeId};
use crate::steps::{StepName, StepRecord};

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Check {
    pub what: String,
    /// What the step announced.
    pub step: String,
    /// What the kernel (or libibverbs) showed; `-` when the event was not seen.
    pub kernel: String,
    pub ok: bool,
}

/// Addresses, keys and handles read best in hex; sizes and page counts in decimal.
fn check(what: &str, step: u64, kernel: Option<u64>) -> Check {
    let decimal = what.contains("size") || what.contains("pages") || what.contains("errno");
    let show = |v: u64| if decimal { v.to_string() } else { format!("{v:#x}") };
    Check {
        what: what.into(),
        step: show(step),
        kernel: kernel.map(show).unwrap_or_else(|| "-".into()),
        ok: kernel == Some(step),
    }
}

fn find<'a>(events: &'a dyn Events, mine: &[usize], ids: &[ProbeId], kind: EventKind) -> Option<&'a Event> {
    mine.iter().filter_map(|&i| events.ev(i)).find(|e| e.is_any(ids) && e.kind == kind)
}

const REG_MR: [ProbeId; 2] = [ProbeId::RxeRegMr, ProbeId::Mlx5RegMr];
const CREATE_CQ: [ProbeId; 2] = [ProbeId::RxeCreateCq, ProbeId::Mlx5CreateCq];

/// The step registered with IBV_ACCESS_ON_DEMAND (its config says `odp`).
fn mr_on_demand(s: &StepRecord) -> bool {
    const ON_DEMAND: u32 = 1 << 6;
    s.mr.as_ref().is_some_and(|m| m.access & ON_DEMAND != 0)
}

pub(crate) fn checks_for(s: &StepRecord, mine: &[usize], events: &dyn Events) -> Vec<Check> {
    let mut out = Vec::new();
    match s.name {
        StepName::RegMr if !s.ok => {
            // A refused registration: the errno libibverbs reported is the umem's error,
            // where a umem was asked for (an ODP request a device cannot serve is refused
            // before any: then there is nothing of the kernel's to check it against).
            let Some(errno) = s.errno else { return out };
            let Some(umem) = find(events, mine, &[ProbeId::UmemGet, ProbeId::UmemOdpGet], EventKind::Return)
            else {
                return out;
            };
            let kernel = (umem.field(FieldId::Umem).or(umem.field(FieldId::UmemOdp)))
                .and_then(crate::pipeline::render::err_ptr)
                .map(|e| (-e) as u64);
            out.push(check("pin errno", errno as u64, kernel));
        }
        StepName::RegMr if mr_on_demand(s) => {
            // On-demand paging: the ODP umem covers the range; nothing is pinned.
            let Some(mr) = &s.mr else { return out };
            let odp = find(events, mine, &[ProbeId::UmemOdpGet], EventKind::Entry);
            out.push(check("ODP umem addr", mr.addr, odp.and_then(|e| e.field(FieldId::Addr))));
            out.push(check("ODP umem size", mr.length, odp.and_then(|e| e.field(FieldId::Size))));
            let pin = find(events, mine, &[ProbeId::UmemGet], EventKind::Entry);
            out.push(check("pages pinned", 0, Some(pin.map_or(0, |e| e.field(FieldId::Pages).unwrap_or(0)))));
            let reg = find(events, mine, &REG_MR, EventKind::Return);
            out.push(check("lkey", mr.lkey.into(), reg.and_then(|e| e.field(FieldId::Lkey))));
            out.push(check("rkey", mr.rkey.into(), reg.and_then(|e| e.field(FieldId::Rkey))));
        }
        StepName::RegMr => {
            let Some(mr) = &s.mr else { return out };
            let pin = find(events, mine, &[ProbeId::UmemGet], EventKind::Entry);
            out.push(check("umem addr", mr.addr, pin.and_then(|e| e.field(FieldId::Addr))));
            out.push(check("umem size", mr.length, pin.and_then(|e| e.field(FieldId::Size))));
            let pinned = find(events, mine, &[ProbeId::UmemGet], EventKind::Return);
            out.push(check(
                "pages pinned",
                crate::steps::pages_spanned(mr.addr, mr.length),
                pinned.and_then(|e| e.field(FieldId::Pages)),
            ));
            let reg = find(events, mine, &REG_MR, EventKind::Return);
            out.push(check("lkey", mr.lkey.into(), reg.and_then(|e| e.field(FieldId::Lkey))));
            out.push(check("rkey", mr.rkey.into(), reg.and_then(|e| e.field(FieldId::Rkey))));
        }
        StepName::CreateCq => {
            let Some(cq) = &s.cq else { return out };
            // libibverbs returned the handle the step announces…
            let user = find(events, mine, &[ProbeId::IbvCreateCq], EventKind::Return);
            out.push(check("ibv_create_cq result", cq.handle, user.and_then(|e| e.field(FieldId::Cq))));
            // …and the completions the kernel raises on the CQ created here carry it.
            if let Some(kcq) =
                find(events, mine, &CREATE_CQ, EventKind::Entry).and_then(|e| e.field(FieldId::Cq))
                && let Some(c) = events
                    .all()
                    .map(|(_, e)| e)
                    .find(|e| e.is(ProbeId::CompHandler) && e.field(FieldId::Cq) == Some(kcq))
            {
                out.push(check("user handle of its completions", cq.handle, c.field(FieldId::CqUserHandle)));
            }
        }
        StepName::GetCqEvent => {
            let Some(want) = s.event_cq else { return out };
            let comp = mine.iter().filter_map(|&i| events.ev(i)).find(|e| e.is(ProbeId::CompHandler));
            out.push(check("completion's CQ", want, comp.and_then(|e| e.field(FieldId::CqUserHandle))));
        }
        StepName::DeregMr => {
            let Some(mr) = &s.mr else { return out };
            let rel = find(events, mine, &[ProbeId::UmemRelease], EventKind::Entry);
            out.push(check("unpinned addr", mr.addr, rel.and_then(|e| e.field(FieldId::UmemAddress))));
        }
        _ => {}
    }
    out
}
