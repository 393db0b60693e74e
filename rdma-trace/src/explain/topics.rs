//! The three paths, each walked through one real occurrence: MR registration, a mmap on
//! the uverbs fd, a completion event.

use super::parts::Missing;
use super::parts::{Explanation, Input, Named, Stage, fields, named, named_frames, syscall_line};
use crate::event::FieldId;
use crate::event::{Event, EventKind, Path, ProbeId};
use crate::explain::lessons as L;
use crate::pipeline::correlate::mmaps::Object;
use crate::units::{bytes, duration as us};

fn is(e: &Event, ids: &[ProbeId], kind: EventKind) -> bool {
    e.is_any(ids) && e.kind == kind
}

/// "One real registration: comm [pid], thread tid."
fn one_real(what: &str, e: &Event) -> String {
    format!("One real {what}: {} [{}], thread {}.", crate::pipeline::render::printable(&e.comm), e.pid, e.tid)
}

const REG_MR: [ProbeId; 2] = [ProbeId::RxeRegMr, ProbeId::Mlx5RegMr];

/// The umem function's error, if it returned one (an ERR_PTR).
fn pin_error(r: &Event) -> Option<i64> {
    r.field(FieldId::Umem).and_then(crate::pipeline::render::err_ptr)
}

/// The syscall that carried the work at `i` into the kernel (the one it happened in), as a
/// stage.
fn syscall_stage(input: &Input, i: usize, what: &str) -> Stage {
    let sys = input.enclosing(i, |e| e.kind == EventKind::SyscallEnter);
    let mut s = Stage { title: format!("The system call — {what}"), ..Default::default() };
    match sys {
        Some((_, e)) => s.seen.push(syscall_line(e)),
        None => s.seen.push("(syscalls were not watched in this capture: trace with --pid or -- CMD)".into()),
    }
    s
}

pub(super) fn mr(input: &Input) -> Result<Explanation, Missing> {
    let ev = input.events;
    let pins: Vec<usize> =
        (0..ev.len()).filter(|&i| is(&ev[i], &[ProbeId::UmemGet], EventKind::Entry)).collect();
    let ok = |i: &usize| input.return_of(*i).is_some_and(|(_, r)| pin_error(r).is_none());
    let Some(pin) = input.anchored(&pins).or(pins.iter().find(|i| ok(i)).or(pins.first()).copied()) else {
        return Err(Missing::Pin);
    };
    let p = &ev[pin];
    let mut x = Explanation { occurrence: one_real("registration", p), ..Default::default() };
    x.stages.push(mr_user_call(input, pin));
    x.stages.push(syscall_stage(input, pin, "the command enters the kernel"));
    // The dispatch: the stack's frames above the provider; the provider's below them.
    let (dispatch, below): (Vec<_>, Vec<_>) = named_frames(&p.stack)
        .into_iter()
        .partition(|f| f.file.contains("/core/uverbs") || f.file.starts_with("fs/"));
    x.stages.push(Stage {
        title: "The uverbs dispatch".into(),
        functions: dispatch,
        text: "uverbs checks the command and calls the provider's reg_user_mr.".into(),
        ..Default::default()
    });
    let prov = mr_provider(input, pin, below, &mut x.values);
    x.stages.push(prov);
    let core = mr_pinning(input, pin, &mut x.values);
    x.stages.push(core);
    x.notes.push(("What ENOMEM means here".into(), L::PIN_ENOMEM.into()));
    refusals(input, &mut x);
    Ok(x)
}

/// The libibverbs calls around the pin at `pin` (ibv_reg_mr and its iova2 inner call).
fn mr_user_call(input: &Input, pin: usize) -> Stage {
    let outer = input.enclosing(pin, |e| is(e, &[ProbeId::IbvRegMr], EventKind::Entry));
    let inner = input.enclosing(pin, |e| is(e, &[ProbeId::IbvRegMrIova2], EventKind::Entry));
    let mut user = Stage { title: "The user call — libibverbs".into(), ..Default::default() };
    for (_, c) in outer.into_iter().chain(inner) {
        user.seen.push(format!(
            "{}({})",
            c.name,
            fields(c, &[FieldId::Addr, FieldId::Length, FieldId::Iova, FieldId::Access])
        ));
    }
    if user.seen.is_empty() {
        user.seen.push("(no libibverbs uprobe event: the program's libibverbs was not probed)".into());
    }
    user.text =
        "The program asks libibverbs to register a buffer with access rights; libibverbs and the provider \
library turn it into a uverbs command on the device's fd."
            .into();
    user
}

/// The provider's registration around the pin: its arguments, the keys it returned, and
/// its own frames (`below`: the stack under the dispatch).
fn mr_provider(
    input: &Input,
    pin: usize,
    below: Vec<Named>,
    v: &mut std::collections::BTreeMap<String, u64>,
) -> Stage {
    let provider = input.enclosing(pin, |e| is(e, &REG_MR, EventKind::Entry));
    let mut prov = Stage { title: "The provider".into(), ..Default::default() };
    if let Some((pi, pe)) = provider {
        let name = pe.symbol.as_deref().unwrap_or(pe.name.as_str());
        prov.seen.push(format!(
            "{name}({})",
            fields(pe, &[FieldId::Start, FieldId::Length, FieldId::Iova, FieldId::Access])
        ));
        prov.functions.push(named(name));
        if let Some((_, r)) = input.return_of(pi) {
            prov.seen.push(format!(
                "returned {} after {}",
                fields(r, &[FieldId::Lkey, FieldId::Rkey]),
                us(r.latency_ns.unwrap_or(0))
            ));
            if let (Some(l), Some(k)) = (r.field(FieldId::Lkey), r.field(FieldId::Rkey)) {
                v.insert("lkey".into(), l);
                v.insert("rkey".into(), k);
            }
        }
    }
    prov.functions.extend(below.into_iter().filter(|f| !f.file.contains("core/umem")));
    prov.functions.dedup_by(|a, b| a.function == b.function);
    prov.text =
        "The provider builds what the NIC will use to reach the buffer: on hardware a translation table in \
the NIC; on soft-RoCE its own page map. First it has the core pin the pages."
            .into();
    prov
}

/// The core's pinning: what was asked, what was pinned, how long, against which limit.
fn mr_pinning(input: &Input, pin: usize, v: &mut std::collections::BTreeMap<String, u64>) -> Stage {
    let p = &input.events[pin];
    let umem_fn = p.symbol.as_deref().unwrap_or(p.name.as_str()).to_string();
    let mut core = Stage { title: "The core work — pinning the pages".into(), ..Default::default() };
    core.functions.push(named(&umem_fn));
    core.seen.push(format!("{umem_fn}({})", fields(p, &[FieldId::Addr, FieldId::Size, FieldId::Access])));
    let (addr, size) = (p.field(FieldId::Addr).unwrap_or(0), p.field(FieldId::Size).unwrap_or(0));
    let pages = crate::steps::pages_spanned(addr, size);
    let limit = p.field(FieldId::MemlockLimit);
    v.insert("mr_addr".into(), addr);
    v.insert("mr_length".into(), size);
    v.insert("pages".into(), pages);
    if let Some(l) = limit {
        v.insert("memlock_limit".into(), l);
    }
    match input.return_of(pin) {
        Some((_, r)) if pin_error(r).is_none() => {
            let pinned = r.field(FieldId::Pages).unwrap_or(pages);
            core.seen.push(format!(
                "pinned {pinned} pages ({}) in {}; charged to RLIMIT_MEMLOCK ({})",
                bytes(pinned * crate::units::PAGE),
                us(r.latency_ns.unwrap_or(0)),
                limit.map(bytes).unwrap_or("limit not read".into())
            ));
            v.insert("pin_ns".into(), r.latency_ns.unwrap_or(0));
        }
        Some((_, r)) => core.seen.push(format!("REFUSED: {}", fields(r, &[FieldId::Umem]))),
        None => core.seen.push("(its return was not seen)".into()),
    }
    core.text = L::PIN_WHY.into();
    core
}

/// Every refused pin of the run: who, how much was asked, against which limit.
fn refusals(input: &Input, x: &mut Explanation) {
    let ev = input.events;
    for i in (0..ev.len()).filter(|&i| is(&ev[i], &[ProbeId::UmemGet], EventKind::Entry)) {
        let Some((_, r)) = input.return_of(i) else { continue };
        let Some(err) = pin_error(r) else { continue };
        let e = &ev[i];
        let (size, limit) = (e.field(FieldId::Size).unwrap_or(0), e.field(FieldId::MemlockLimit));
        let pages = crate::steps::pages_spanned(e.field(FieldId::Addr).unwrap_or(0), size);
        // The mm's pinned_vm when the pin began: what the new pages were added to.
        let already = e.field(FieldId::PinnedVmPages).map(|n| n * crate::units::PAGE);
        let text = format!(
            "{} [{}] asked to pin {} ({pages} pages) with RLIMIT_MEMLOCK at {}{}: the umem function returned {} ({}), and \
ibv_reg_mr failed with errno {}. The limit, not the machine's memory, refused it.",
            crate::pipeline::render::printable(&e.comm),
            e.pid,
            bytes(size),
            limit.map(bytes).unwrap_or("an unknown limit".into()),
            already.map(|b| format!(" and {} already pinned by the process", bytes(b))).unwrap_or_default(),
            err,
            crate::pipeline::render::errno_name(-err),
            -err
        );
        x.values.insert("refused_asked_bytes".into(), size);
        x.values.insert("refused_errno".into(), (-err) as u64);
        if let Some(l) = limit {
            x.values.insert("refused_memlock_limit".into(), l);
        }
        if let Some(b) = already {
            x.values.insert("refused_already_pinned_bytes".into(), b);
        }
        x.notes.push(("A pin this run refused".into(), text));
        return;
    }
}

pub(super) fn mmap(input: &Input) -> Result<Explanation, Missing> {
    let ev = input.events;
    let maps: Vec<usize> =
        (0..ev.len()).filter(|&i| is(&ev[i], &[ProbeId::UverbsMmap], EventKind::Entry)).collect();
    let Some(i) = input.anchored(&maps).or(maps.first().copied()) else {
        return Err(Missing::Mmap);
    };
    let m = &ev[i];
    let mut x = Explanation { occurrence: one_real("mapping", m), ..Default::default() };
    let (start, end, pgoff) = (
        m.field(FieldId::VmStart).unwrap_or(0),
        m.field(FieldId::VmEnd).unwrap_or(0),
        m.field(FieldId::VmPgoff).unwrap_or(0),
    );
    x.values.insert("length".into(), end.saturating_sub(start));
    x.values.insert("pgoff".into(), pgoff);
    x.stages.push(syscall_stage(input, i, "mmap(2) on the uverbs fd"));
    let mut dispatch = Stage { title: "The uverbs dispatch".into(), ..Default::default() };
    dispatch.seen.push(format!(
        "{} bytes at {start:#x}, offset {pgoff:#x} (in pages), {}",
        end.saturating_sub(start),
        fields(m, &[FieldId::VmPageProt, FieldId::VmFlags])
    ));
    dispatch.functions = named_frames(&m.stack).into_iter().filter(|f| f.file.contains("/core/")).collect();
    dispatch.text =
        "ib_uverbs_mmap hands the mapping to the provider of the device the fd was opened on.".into();
    x.stages.push(dispatch);
    let provider =
        input.inside(i, |e| e.path == Path::Mmap && e.kind == EventKind::Entry && !e.is(ProbeId::UverbsMmap));
    let mut prov = Stage { title: "The provider — what the offset selects".into(), ..Default::default() };
    if let Some((_, p)) = provider {
        prov.functions.push(named(p.symbol.as_deref().unwrap_or(p.name.as_str())));
        prov.seen.push(format!("{} at offset {pgoff:#x}", p.symbol.as_deref().unwrap_or(p.name.as_str())));
    }
    if let Some((_, r)) = input.return_of(i) {
        prov.seen.push(format!("mapped in {}", us(r.latency_ns.unwrap_or(0))));
        x.values.insert("mmap_ns".into(), r.latency_ns.unwrap_or(0));
    }
    prov.text = L::MMAP_OFFSET.into();
    x.stages.push(prov);
    if let Some(stage) = rxe_queue(input, i, &mut x) {
        x.stages.push(stage);
    }
    let count = (0..ev.len())
        .filter(|&j| ev[j].process() == m.process() && is(&ev[j], &[ProbeId::UverbsMmap], EventKind::Entry))
        .count();
    x.values.insert("mappings".into(), count as u64);
    x.notes.push((format!("Why map at all ({count} uverbs mappings in this process)"), L::MMAP_WHY.into()));
    let named: Vec<String> = input
        .story
        .processes
        .get(&m.process())
        .into_iter()
        .flat_map(|p| &p.mappings)
        .filter_map(|r| Some(format!("{:#x} ({}): {}", r.start, bytes(r.end - r.start), r.queue.as_ref()?)))
        .collect();
    if !named.is_empty() {
        x.notes.push((
            format!("What each mapping of this process is ({} named)", named.len()),
            named.join("; "),
        ));
    }
    x.notes.push(("Doorbells on hardware".into(), L::MMAP_WC.into()));
    Ok(x)
}

/// On soft-RoCE, the queue the mapping at event `i` is: the key's making, and the object.
fn rxe_queue(input: &Input, i: usize, x: &mut Explanation) -> Option<Stage> {
    let m = &input.events[i];
    let rows = &input.story.processes.get(&m.process())?.mappings;
    let q = rows.iter().find(|r| r.event == Some(i))?.queue.as_ref()?;
    x.values.insert("queue_key".into(), q.key);
    x.values.insert("queue_bytes".into(), q.bytes);
    if let Some(n) = q.entries {
        x.values.insert("queue_entries".into(), n);
    }
    if let Some(Object::Qp(n)) = q.object {
        x.values.insert("qpn".into(), n.into());
    }
    if let Some(Object::Cq(h)) = q.object {
        x.values.insert("cq_handle".into(), h);
    }
    x.occurrence = format!("{} It maps {q}.", x.occurrence);
    let mut st = Stage { title: "The queue behind the key".into(), ..Default::default() };
    st.seen.push(format!("key {:#x}: {q}", q.key));
    let made = input.events[..i].iter().rev().find(|e| {
        e.is(ProbeId::RxeMmapInfo)
            && e.kind == EventKind::Return
            && e.thread() == m.thread()
            && e.field(FieldId::Key) == Some(q.key)
    });
    if let Some(r) = made {
        st.seen.push(format!("the key was made {} before the mmap", us(m.ts_ns.saturating_sub(r.ts_ns))));
    }
    st.functions.push(named("rxe_create_mmap_info"));
    st.functions.push(named("rxe_mmap"));
    st.text = L::MMAP_RXE_KEY.into();
    Some(st)
}
