//! Lab capture events turned back into the bytes the eBPF programs wrote: the header, the
//! values in the plan's slot order, the failed/skipped masks, and the kernel stack as
//! addresses in a kallsyms made from the frames the capture names. Syscall events become
//! syscall records (x86-64 numbers, arguments in the order the catalog names them).
//!
//! Used by the pipeline fixture test (the pipeline must give the lab's events back) and by
//! the host pipeline bench (real-shaped records at any rate).

use rdma_trace::event::FieldId;
use rdma_trace::event::{Event, EventKind, Value};
use rdma_trace::plan::select::{Plan, Planned};
use rdma_trace::plan::syscalls;
use rdma_trace_common::{
    EventHeader, KIND_PROBE_ENTRY, KIND_PROBE_RETURN, KIND_SYS_ENTER, KIND_SYS_EXIT, MAX_FETCH, PATH_LEN,
    PROBE_FIXED_LEN, ProbeHead, SyscallEvent,
};
use std::collections::BTreeMap;

/// A kallsyms with every frame the events name, each function 64 KiB apart: a stack
/// becomes addresses that symbolize back to the same strings.
pub struct Frames {
    base: BTreeMap<(String, Option<String>), u64>,
}

impl Frames {
    /// "name+0xoff [module]" → (name, off, module).
    fn split(frame: &str) -> (String, u64, Option<String>) {
        let (sym, module) = match frame.split_once(" [") {
            Some((s, m)) => (s, Some(m.trim_end_matches(']').to_string())),
            None => (frame, None),
        };
        let (name, off) = sym.rsplit_once("+0x").expect("frame is name+0xoff");
        (name.to_string(), u64::from_str_radix(off, 16).unwrap(), module)
    }

    pub fn of(events: &[Event]) -> Self {
        let mut base = BTreeMap::new();
        for f in events.iter().flat_map(|e| &e.stack) {
            let (name, _, module) = Self::split(f);
            let next = 0xffff_ffff_8100_0000 + base.len() as u64 * 0x1_0000;
            base.entry((name, module)).or_insert(next);
        }
        Self { base }
    }

    pub fn made_up_kallsyms(&self) -> String {
        self.base
            .iter()
            .map(|((name, module), a)| match module {
                Some(m) => format!("{a:x} t {name}\t[{m}]\n"),
                None => format!("{a:x} T {name}\n"),
            })
            .collect()
    }

    fn address(&self, frame: &str) -> u64 {
        let (name, off, module) = Self::split(frame);
        self.base[&(name, module)] + off
    }
}

pub fn raw_value(v: Value) -> u64 {
    match v {
        Value::U(u) => u,
        Value::I(i) => i as u64,
    }
}

fn comm(ev: &Event) -> [u8; 16] {
    let mut comm = [0u8; 16];
    let n = ev.comm.len().min(15);
    comm[..n].copy_from_slice(&ev.comm.as_bytes()[..n]);
    comm
}

fn header(ev: &Event, kind: u8, slot: u8) -> EventHeader {
    EventHeader {
        ts_ns: ev.ts_ns,
        tgid: ev.pid,
        tid: ev.tid,
        comm: comm(ev),
        cpu: ev.cpu,
        kind,
        slot,
        fail_mask: 0,
        skip_mask: 0,
        cgroup_id: ev.cgroup_id.unwrap_or(0),
    }
}

/// The bytes of a `#[repr(C)]` plain-data record.
fn bytes_of<T: Copy>(t: &T, len: usize) -> Vec<u8> {
    assert!(len <= size_of::<T>());
    // SAFETY: T is a #[repr(C)] plain-data record of at least `len` bytes.
    unsafe { std::slice::from_raw_parts((t as *const T).cast::<u8>(), len) }.to_vec()
}

/// The record a probe program wrote for `ev` (planned as `p`).
pub fn probe_record(ev: &Event, p: &Planned, frames: &Frames) -> Vec<u8> {
    let is_return = ev.kind == EventKind::Return;
    let fields = if is_return { p.spec.ret } else { p.spec.entry };
    let kind = if is_return { KIND_PROBE_RETURN } else { KIND_PROBE_ENTRY };
    let mut head = ProbeHead {
        hdr: header(ev, kind, p.slot as u8),
        vals: [0; MAX_FETCH],
        stack_len: (ev.stack.len() * 8) as u32,
        stack_id: 0,
    };
    for (i, f) in fields.iter().enumerate() {
        if ev.unreadable.iter().any(|u| u == f.name()) {
            head.hdr.fail_mask |= 1 << i;
        } else if ev.not_followed.iter().any(|u| u == f.name()) {
            head.hdr.skip_mask |= 1 << i;
        } else if let Some(v) = ev.fields.get(f.id) {
            head.vals[i] = raw_value(v);
        } else {
            // A field the capture predates (the task's memlock fields): not read then.
            head.hdr.fail_mask |= 1 << i;
        }
    }
    let mut out = bytes_of(&head, PROBE_FIXED_LEN);
    for f in &ev.stack {
        out.extend_from_slice(&frames.address(f).to_ne_bytes());
    }
    out
}

/// The record the syscall programs wrote for `ev`, or None for a syscall not watched.
pub fn syscall_record(ev: &Event) -> Option<Vec<u8>> {
    let spec = syscalls::WATCHED.iter().find(|s| ev.name == s.name)?;
    let is_exit = ev.kind == EventKind::SyscallExit;
    let mut rec = SyscallEvent {
        hdr: header(ev, if is_exit { KIND_SYS_EXIT } else { KIND_SYS_ENTER }, 0),
        nr: u64::from(spec.nr),
        args: [0; 6],
        path: [0; PATH_LEN],
    };
    if is_exit {
        rec.args[0] = ev.fields.get(FieldId::Ret).map(raw_value)?;
    } else {
        for (i, a) in spec.args.iter().enumerate() {
            rec.args[i] = ev.fields.get(*a).map_or(0, raw_value);
        }
    }
    Some(bytes_of(&rec, size_of::<SyscallEvent>()))
}

/// The record for any event the plan (or the syscall table) covers.
pub fn record(ev: &Event, plan: &Plan, frames: &Frames) -> Option<Vec<u8>> {
    match ev.kind {
        EventKind::Entry | EventKind::Return => {
            let p = plan.probes.iter().find(|p| ev.probe() == Some(p.spec.id))?;
            Some(probe_record(ev, p, frames))
        }
        EventKind::SyscallEnter | EventKind::SyscallExit => syscall_record(ev),
    }
}
