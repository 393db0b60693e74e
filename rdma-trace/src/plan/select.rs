//! Pure planning: catalog × this kernel → which probe goes on which symbol, in which
//! slot, reading what at which offsets — or why it is skipped.

use crate::plan::btf::{self, BtfSource};
use crate::plan::catalog::{CATALOG, Field, Kind, ProbeSpec, Src};
use crate::plan::kernel::{Symbols, TpField};
use rdma_trace_common::{
    Fetch, MAX_FETCH, MAX_HOPS, MAX_SLOTS, SRC_ARG0, SRC_CTX, SRC_NONE, SRC_RET, SRC_TASK, SlotPlan,
    TOTAL_SLOTS,
};
use std::collections::HashMap;
use std::path::PathBuf;

/// Slots reserved for tracepoint probes (programs `tp_22`, `tp_23`).
pub(crate) const TP_SLOTS: [usize; 2] = [MAX_SLOTS - 2, MAX_SLOTS - 1];

/// A probe planned on this kernel: its symbol, slot and what it reads.
#[derive(Clone, Debug)]
pub struct Planned {
    pub spec: &'static ProbeSpec,
    pub symbol: &'static str,
    /// The module the symbol lives in on this kernel (`vmlinux` when built in).
    pub module: String,
    pub slot: usize,
    pub entry: SlotPlan,
    /// The return plan (kprobes and uprobes).
    pub ret: Option<SlotPlan>,
    /// uprobes: the library file and the function's file offset.
    pub target: Option<(PathBuf, u64)>,
    /// kprobes: the function's address (kallsyms), which picks the slot in the programs.
    pub address: Option<u64>,
}

impl Planned {
    /// The catalog's probe `id` in `slot`, as a test plans it: no symbol, an entry that
    /// copies its stack, a return where the catalog has one.
    #[cfg(test)]
    pub(crate) fn for_test(id: crate::plan::catalog::ProbeId, slot: usize) -> Planned {
        let spec = crate::plan::catalog::CATALOG.iter().find(|s| s.id == id).unwrap();
        let ret = (!spec.ret.is_empty()).then(SlotPlan::default);
        let entry = SlotPlan { stack: rdma_trace_common::STACK_COPY, ..Default::default() };
        Planned { spec, symbol: "", module: String::new(), slot, entry, ret, target: None, address: None }
    }

    pub(crate) fn entry_program(&self) -> String {
        match self.spec.kind {
            Kind::Kprobe => "kprobe_entry".into(),
            Kind::Tracepoint { .. } => format!("tp_{}", self.slot),
            Kind::Uprobe { .. } => "uprobe_entry".into(),
        }
    }
    pub(crate) fn return_program(&self) -> Option<String> {
        match self.spec.kind {
            Kind::Uprobe { .. } => self.ret.map(|_| "uprobe_return".into()),
            _ => self.ret.map(|_| "kprobe_return".into()),
        }
    }
}

/// A catalog probe left out on this kernel, and why.
#[derive(Clone, Debug)]
pub struct Skipped {
    pub spec: &'static ProbeSpec,
    pub reason: Skip,
}

/// Why a probe is not planned on this machine (its words are what `probes` and the
/// tracer's notices say).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Skip {
    /// Every slot of its kind is taken.
    #[error("no free {0} slot")]
    NoSlot(&'static str),
    /// None of its symbols is in kallsyms (each named with its module).
    #[error("not in this kernel: {0} — module not loaded or renamed")]
    NotInKernel(String),
    #[error("no BTF for {0}")]
    NoBtf(String),
    /// BTF says no: the module's BTF, the function, or a field's path (its words).
    #[error("{0}")]
    Btf(String),
    #[error("tracepoint {0} not in this kernel")]
    NoTracepoint(String),
    /// The library could not be read (its reason), or was not looked up.
    #[error("{0}")]
    Library(String),
    #[error("{library} not looked up")]
    NotLookedUp { library: String },
    #[error("{path} does not export {symbol}")]
    NotExported { path: String, symbol: &'static str },
    /// A run that only counts reads kernel probes (`counted::count_only`).
    #[error("a counting run (--metrics-only) reads kernel probes only")]
    NotCounted,
    #[error("{0} fields; at most {MAX_FETCH}")]
    TooManyFields(usize),
    /// A field the catalog asks for that cannot be read here.
    #[error("field {field}: {why}")]
    Field { field: String, why: FieldError },
    /// No plan could be made at all (no RDMA stack, no BTF): every probe says so.
    #[error("{0}")]
    Blocked(String),
}

/// Why one field a probe reads cannot be read on this machine.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FieldError {
    /// The field reads from where its kind of probe cannot: "user probes read arguments
    /// 0-5 or the return value".
    #[error("{field}: {kind} read {reads}")]
    WrongSource { field: &'static str, kind: &'static str, reads: &'static str },
    #[error("no ABI entry for {0}")]
    NoAbi(&'static str),
    #[error("{tracepoint} has no field {name}")]
    NoTpField { tracepoint: String, name: &'static str },
    #[error("{tracepoint} field {name} is {size} bytes")]
    TpFieldSize { tracepoint: String, name: &'static str, size: u32 },
    /// BTF's words for the path.
    #[error("{0}")]
    Btf(String),
}

impl From<btf::BtfError> for FieldError {
    fn from(e: btf::BtfError) -> FieldError {
        FieldError::Btf(e.to_string())
    }
}

impl From<btf::BtfError> for Skip {
    fn from(e: btf::BtfError) -> Skip {
        Skip::Btf(e.to_string())
    }
}

/// The probes planned and those skipped.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub probes: Vec<Planned>,
    pub skipped: Vec<Skipped>,
    /// The run only counts in the kernel (`counted::count_only`): no record is streamed.
    pub counted: bool,
}

impl Plan {
    pub(crate) fn by_slot(&self, slot: usize) -> Option<&Planned> {
        self.probes.iter().find(|p| p.slot == slot)
    }
}

/// Why a user-space library the catalog probes could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LibraryError {
    #[error("{0} not found (rdma-core's libibverbs is not installed)")]
    NotFound(&'static str),
    #[error("{path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Elf { path: PathBuf, source: object::Error },
}

/// A shared library's exported functions (default symbol versions) and their file offsets.
#[derive(Clone, Debug)]
pub struct Library {
    pub path: PathBuf,
    pub functions: HashMap<String, u64>,
}

/// What the planner needs to know about the kernel (and the user-space libraries).
pub struct KernelView<'a> {
    pub symbols: &'a Symbols,
    pub btf: &'a mut BtfSource,
    /// Tracepoint record layout (`None` when the tracepoint does not exist).
    pub tracepoint: &'a dyn Fn(&str, &str) -> Option<Vec<TpField>>,
    /// Libraries by soname, or why one is unavailable.
    pub libraries: &'a HashMap<String, Result<Library, LibraryError>>,
}

/// Plans the probes in `wanted` (all of the catalog when empty).
pub fn plan(k: &mut KernelView<'_>, wanted: &[&str]) -> Plan {
    let mut out = Plan::default();
    let mut next_kprobe_slot = 0usize;
    let mut tp_slots = TP_SLOTS.iter();
    let mut user_slots = MAX_SLOTS..TOTAL_SLOTS;
    for spec in CATALOG.iter().filter(|s| wanted.is_empty() || wanted.contains(&s.id.as_str())) {
        let res = match spec.kind {
            Kind::Kprobe => {
                if next_kprobe_slot >= TP_SLOTS[0] {
                    Err(Skip::NoSlot("probe"))
                } else {
                    plan_kprobe(k, spec, next_kprobe_slot)
                }
            }
            Kind::Tracepoint { category } => match tp_slots.next() {
                Some(&slot) => plan_tracepoint(k, spec, category, slot),
                None => Err(Skip::NoSlot("tracepoint")),
            },
            Kind::Uprobe { library } => match user_slots.next() {
                Some(slot) => plan_uprobe(k, spec, library, slot),
                None => Err(Skip::NoSlot("user-space probe")),
            },
        };
        match res {
            Ok(p) => {
                if matches!(spec.kind, Kind::Kprobe) {
                    next_kprobe_slot += 1;
                }
                out.probes.push(p)
            }
            Err(reason) => out.skipped.push(Skipped { spec, reason }),
        }
    }
    out
}

fn plan_kprobe(k: &mut KernelView<'_>, spec: &'static ProbeSpec, slot: usize) -> Result<Planned, Skip> {
    let Some((sym, module)) =
        spec.symbols.iter().find_map(|s| k.symbols.module_of(s.name).map(|m| (s, m.to_string())))
    else {
        let names: Vec<_> = spec.symbols.iter().map(|s| format!("{} ({})", s.name, s.module)).collect();
        return Err(Skip::NotInKernel(names.join(", ")));
    };
    k.btf.module(&module)?;
    // Core RDMA structs are defined in these modules; others may only declare them.
    k.btf.preload(&["ib_core", "ib_uverbs"]);
    let (btf, others) = k.btf.with_others(&module).ok_or_else(|| Skip::NoBtf(module.clone()))?;
    let proto = btf::proto(btf, sym.name)?;
    let entry = slot_plan(spec.entry, |f| {
        let param = match f.from {
            Src::Param(p) => Some(p),
            // What the task holds is extra to the probe: a kernel whose BTF lacks the path
            // still gets the probe, the field read as failed on every hit (shown as
            // unreadable; the memlock limit then comes from /proc).
            Src::Task => {
                return Ok(match btf::resolve_from_struct(btf, "task_struct", f.path, &others) {
                    Ok((offsets, size)) => fetch(SRC_TASK, &offsets, size),
                    Err(_) => fetch(SRC_NONE, &[], 8),
                });
            }
            _ => {
                let (kind, reads) = ("entry fields", "parameters or the task");
                return Err(FieldError::WrongSource { field: f.name(), kind, reads });
            }
        };
        let r = btf::resolve(btf, sym.name, &proto, param, f.path, &others)?;
        Ok(fetch(SRC_ARG0 + r.arg.unwrap_or(0) as u8, &r.offsets, r.size))
    })?;
    let ret = slot_plan(spec.ret, |f| {
        if f.from != Src::Ret {
            let (kind, reads) = ("return fields", "the return value");
            return Err(FieldError::WrongSource { field: f.name(), kind, reads });
        }
        let r = btf::resolve(btf, sym.name, &proto, None, f.path, &others)?;
        Ok(fetch(SRC_RET, &r.offsets, r.size))
    })?;
    let mut entry = entry;
    entry.stack = if spec.stack { rdma_trace_common::STACK_COPY } else { rdma_trace_common::STACK_NONE };
    let address = k.symbols.address_of(sym.name);
    Ok(Planned { spec, symbol: sym.name, module, slot, entry, ret: Some(ret), target: None, address })
}

fn plan_uprobe(
    k: &KernelView<'_>,
    spec: &'static ProbeSpec,
    library: &str,
    slot: usize,
) -> Result<Planned, Skip> {
    let lib = match k.libraries.get(library) {
        Some(Ok(l)) => l,
        Some(Err(why)) => return Err(Skip::Library(why.to_string())),
        None => return Err(Skip::NotLookedUp { library: library.to_string() }),
    };
    let Some((sym, off)) = spec.symbols.iter().find_map(|s| lib.functions.get(s.name).map(|o| (s, *o)))
    else {
        return Err(Skip::NotExported { path: lib.path.display().to_string(), symbol: spec.symbols[0].name });
    };
    let user_fetch = |f: &Field| -> Result<Fetch, FieldError> {
        let src = match f.from {
            Src::UserArg(n) if n < 6 => SRC_ARG0 + n,
            Src::UserRet => SRC_RET,
            _ => {
                let (kind, reads) = ("user probes", "arguments 0-5 or the return value");
                return Err(FieldError::WrongSource { field: f.name(), kind, reads });
            }
        };
        if f.path.is_empty() {
            return Ok(fetch(src, &[], 8));
        }
        let (off, size) = crate::plan::catalog::user_abi(f.path).ok_or(FieldError::NoAbi(f.path))?;
        Ok(fetch(src, &[off], size))
    };
    let mut entry = slot_plan(spec.entry, user_fetch)?;
    let mut ret = slot_plan(spec.ret, user_fetch)?;
    entry.user = 1;
    ret.user = 1;
    Ok(Planned {
        spec,
        symbol: sym.name,
        module: library.to_string(),
        slot,
        entry,
        ret: Some(ret),
        target: Some((lib.path.clone(), off)),
        address: None,
    })
}

fn plan_tracepoint(
    k: &mut KernelView<'_>,
    spec: &'static ProbeSpec,
    category: &str,
    slot: usize,
) -> Result<Planned, Skip> {
    let sym = &spec.symbols[0];
    let fields = (k.tracepoint)(category, sym.name)
        .ok_or_else(|| Skip::NoTracepoint(format!("{category}:{}", sym.name)))?;
    let mut entry = slot_plan(spec.entry, |f| {
        let Src::TpField(name) = f.from else {
            let (kind, reads) = ("tracepoint fields", "the record");
            return Err(FieldError::WrongSource { field: f.name(), kind, reads });
        };
        let tracepoint = || format!("{category}:{}", sym.name);
        let tf = crate::plan::kernel::field(&fields, name)
            .ok_or_else(|| FieldError::NoTpField { tracepoint: tracepoint(), name })?;
        if ![1, 2, 4, 8].contains(&tf.size) {
            return Err(FieldError::TpFieldSize { tracepoint: tracepoint(), name, size: tf.size });
        }
        Ok(fetch(SRC_CTX, &[tf.offset], tf.size as u8))
    })?;
    entry.stack = if spec.stack { rdma_trace_common::STACK_COPY } else { rdma_trace_common::STACK_NONE };
    let module = k.symbols.module_of(sym.name).unwrap_or(sym.module).to_string();
    Ok(Planned { spec, symbol: sym.name, module, slot, entry, ret: None, target: None, address: None })
}

fn fetch(src: u8, offsets: &[u32], size: u8) -> Fetch {
    let mut f = Fetch { src, hops: offsets.len() as u8, size, ..Default::default() };
    for (i, o) in offsets.iter().take(MAX_HOPS).enumerate() {
        f.offsets[i] = *o;
    }
    f
}

/// Each field's fetch, by `each`; a field it cannot read (why, in words) skips the probe.
fn slot_plan(
    fields: &[Field],
    mut each: impl FnMut(&Field) -> Result<Fetch, FieldError>,
) -> Result<SlotPlan, Skip> {
    if fields.len() > MAX_FETCH {
        return Err(Skip::TooManyFields(fields.len()));
    }
    let mut plan = SlotPlan { n: fields.len() as u8, active: 1, ..Default::default() };
    for (i, f) in fields.iter().enumerate() {
        plan.fetches[i] = each(f).map_err(|why| Skip::Field { field: f.name().to_string(), why })?;
    }
    Ok(plan)
}
